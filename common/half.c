/* IEEE binary16 conversion, bit-exact with torch's .half() (round to nearest even). Used by the
 * loader's float16 tables and by the tools that check them. */
#include "common.h"

#include <string.h>

uint16_t dlc__f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* Inf or NaN (NaN stays a quiet NaN). */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    if (absx >= 0x477ff000u) /* Rounds to a value beyond the largest half: infinity. */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) {
        /* Subnormal half (or zero): shift the full significand into place, round to even. */
        if (absx < 0x33000000u)
            return (uint16_t)sign;
        const uint32_t e = absx >> 23;
        const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e; /* 14..24 */
        uint32_t h = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
    /* Normal: rebias the exponent and round the 13 dropped bits to nearest even; a carry into
     * the exponent is the correct result. */
    uint32_t h = ((absx - 0x38000000u) >> 13);
    const uint32_t rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}
