/* The out-of-line part of the counter-based random streams (common.h). */
#include "common.h"

uint64_t dlc__rng_below(dlc__rng *r, uint64_t n)
{
    /* Lemire's multiply-shift with rejection: unbiased, and rejects almost never. */
    unsigned __int128 m = (unsigned __int128)dlc__rng_next(r) * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        const uint64_t threshold = -n % n;
        while (low < threshold) {
            m = (unsigned __int128)dlc__rng_next(r) * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}
