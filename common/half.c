/* IEEE binary16 conversion, bit-exact with torch's .half() (round to nearest even). Used by the
 * loader's float16 tables and by the tools that check them. */
#include "common.h"
#include "convert_hd.h"

uint16_t dlc__f32_to_f16(float f)
{
    return dlc__hd_f32_to_f16(f); /* Written once for the CPU and the GPU. */
}
