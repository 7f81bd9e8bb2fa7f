/* Private to loader/: eight float32 values to eight 16-bit ones, IEEE binary16 or bfloat16, in
 * one AVX2 + F16C step, for the vector loops of the conversion (augment.c) and of MixUp
 * (batchaug.c), so that both round exactly as the tables and torch do. x86 only; the caller
 * checks the CPU (F16C and AVX2) before it runs code built with DLC__SIMD16_TARGET. */
#ifndef DLCACHE_LOADER_SIMD16_H
#define DLCACHE_LOADER_SIMD16_H

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define DLC__SIMD16_TARGET __attribute__((target("avx2,f16c")))

/** @p v as IEEE half (@p bf16 0) or bfloat16 (@p bf16 1), each rounded to nearest even: half
 *  by F16C; bfloat16 by adding 0x7fff plus the kept part's lowest bit and cutting the low
 *  16 bits, as torch's round_to_nearest_even() does for finite values. */
static inline DLC__SIMD16_TARGET __m128i dlc__f32x8_to_16(__m256 v, const int bf16)
{
    if (!bf16)
        return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
#endif

#endif /* DLCACHE_LOADER_SIMD16_H */
