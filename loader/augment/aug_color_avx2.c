/* AVX2 kernels of the color ops (aug_color.c), for CPUs that have it (dlc__aug_have_avx2()).
 *
 * Each computes, lane by lane, the very float32 operations of its scalar twin in aug_color.c in
 * the same order (a product, then a sum: no fused multiply-add, the part is built with
 * -ffp-contract=off and these functions do not enable FMA), clamps with max/min as the scalar
 * selects do, and truncates with cvttps as the casts do, so every byte is the scalar code's
 * (tests/augment/test_aug_color.c compares the two on random images and a grid of the color
 * cube). Sharpness alone computes another expression: the integer quotient that its float
 * rounding always equals. Each works on the bulk of a row and returns how much it did; the
 * scalar code does the rest of the row. */
#include "aug_ops.h"

#if DLC__AUG_X86

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

int dlc__aug_have_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}

/* 8 bytes at @p p as 8 floats. */
static inline AVX2 __m256 load8_ps(const uint8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* clamp(0, 255) then truncation, as trunc_u8() and clamp255() of aug_color.c: max(v, 0) is 0
 * for a NaN as !(v > 0) is. */
static inline AVX2 __m256i trunc8(__m256 v)
{
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(255.0f));
    return _mm256_cvttps_epi32(v);
}

/* Four vectors of 8 values in 0..255 as 32 bytes, in order a, b, c, d. */
static inline AVX2 __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d)
{
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    /* Lanes: a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7, in 4-byte groups. */
    const __m256i x = _mm256_packus_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* The lane constants of vector v (of 8 values) of a row of c-channel values: value 8v + l is
 * of channel (8v + l) % c; 24 is a multiple of every c in 1..4, so the pattern has period 3. */
static inline AVX2 void channel_pattern(const float k[DLC__AUG_MAX_CHANNELS], uint32_t c,
                                        __m256 out[3])
{
    for (int v = 0; v < 3; v++) {
        float lanes[8];
        for (int l = 0; l < 8; l++)
            lanes[l] = k[(uint32_t)(8 * v + l) % c];
        out[v] = _mm256_loadu_ps(lanes);
    }
}

AVX2 size_t dlc__aug_map_avx2(uint8_t *p, size_t n, uint32_t c, int sub_first,
                              const float a[DLC__AUG_MAX_CHANNELS],
                              const float b[DLC__AUG_MAX_CHANNELS])
{
    __m256 va[3], vb[3];
    channel_pattern(a, c, va);
    channel_pattern(b, c, vb);
    size_t i = 0;
    /* 96 values (12 vectors, the pattern 4 times) a step. */
    for (; i + 96 <= n; i += 96) {
        for (int j = 0; j < 3; j++) {
            __m256i o[4];
            for (int k = 0; k < 4; k++) {
                const int v = (4 * j + k) % 3;
                const __m256 x = load8_ps(p + i + 32 * j + 8 * k);
                const __m256 y = sub_first ? _mm256_mul_ps(_mm256_sub_ps(x, va[v]), vb[v])
                                           : _mm256_add_ps(_mm256_mul_ps(x, va[v]), vb[v]);
                o[k] = trunc8(y);
            }
            _mm256_storeu_si256((__m256i *)(p + i + 32 * j), pack32(o[0], o[1], o[2], o[3]));
        }
    }
    return i;
}

AVX2 size_t dlc__aug_minmax_avx2(const uint8_t *p, size_t n, uint8_t lo[96], uint8_t hi[96])
{
    __m256i mn[3], mx[3];
    for (int j = 0; j < 3; j++) {
        mn[j] = _mm256_loadu_si256((const __m256i *)(lo + 32 * j));
        mx[j] = _mm256_loadu_si256((const __m256i *)(hi + 32 * j));
    }
    size_t i = 0;
    for (; i + 96 <= n; i += 96)
        for (int j = 0; j < 3; j++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(p + i + 32 * j));
            mn[j] = _mm256_min_epu8(mn[j], v);
            mx[j] = _mm256_max_epu8(mx[j], v);
        }
    for (int j = 0; j < 3; j++) {
        _mm256_storeu_si256((__m256i *)(lo + 32 * j), mn[j]);
        _mm256_storeu_si256((__m256i *)(hi + 32 * j), mx[j]);
    }
    return i;
}

AVX2 size_t dlc__aug_solarize_avx2(uint8_t *p, size_t n, uint32_t from)
{
    if (from > 255)
        return n; /* Nothing is inverted. */
    const __m256i t = _mm256_set1_epi8((char)from), ones = _mm256_set1_epi8(-1);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(p + i));
        const __m256i ge = _mm256_cmpeq_epi8(_mm256_max_epu8(v, t), v); /* v >= from */
        _mm256_storeu_si256((__m256i *)(p + i), _mm256_xor_si256(v, _mm256_and_si256(ge, ones)));
    }
    return i;
}

/* Byte shuffles that split 8 RGB pixels (24 bytes: 16 in one vector, 8 in another) into the R
 * values (bytes 0-7) and G values (bytes 8-15) of rg, and B (bytes 0-7) of b; 0x80 gives 0. */
#define NO (char)0x80
static inline AVX2 void split8(const uint8_t *p, __m256 *r, __m256 *g, __m256 *b)
{
    const __m128i lo = _mm_loadu_si128((const __m128i *)p);
    const __m128i hi = _mm_loadl_epi64((const __m128i *)(p + 16));
    const __m128i rg = _mm_or_si128(
        _mm_shuffle_epi8(lo,
                         _mm_setr_epi8(0, 3, 6, 9, 12, 15, NO, NO, 1, 4, 7, 10, 13, NO, NO, NO)),
        _mm_shuffle_epi8(hi,
                         _mm_setr_epi8(NO, NO, NO, NO, NO, NO, 2, 5, NO, NO, NO, NO, NO, 0, 3, 6)));
    const __m128i bb =
        _mm_or_si128(_mm_shuffle_epi8(lo, _mm_setr_epi8(2, 5, 8, 11, 14, NO, NO, NO, NO, NO, NO, NO,
                                                        NO, NO, NO, NO)),
                     _mm_shuffle_epi8(hi, _mm_setr_epi8(NO, NO, NO, NO, NO, 1, 4, 7, NO, NO, NO, NO,
                                                        NO, NO, NO, NO)));
    *r = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(rg));
    *g = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(rg, 8)));
    *b = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bb));
}

/* The inverse of split8(): three vectors of 8 values in 0..255 stored as 8 RGB pixels. */
static inline AVX2 void join8(uint8_t *p, __m256i r, __m256i g, __m256i b)
{
    /* Lanes: r0-3 g0-3 b0-3 b0-3 | r4-7 g4-7 b4-7 b4-7. */
    const __m256i x = _mm256_packus_epi16(_mm256_packs_epi32(r, g), _mm256_packs_epi32(b, b));
    const __m256i m = _mm256_setr_epi8(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, NO, NO, NO, NO, 0, 4,
                                       8, 1, 5, 9, 2, 6, 10, 3, 7, 11, NO, NO, NO, NO);
    const __m256i y = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(x, m),
                                                  _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7));
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(y));
    _mm_storel_epi64((__m128i *)(p + 16), _mm256_extracti128_si256(y, 1));
}
#undef NO

/* rgb_to_grayscale's float sum (0.2989 R + 0.587 G) + 0.114 B, truncated (l >= 0). */
static inline AVX2 __m256i gray8(__m256 r, __m256 g, __m256 b)
{
    const __m256 l = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(0.2989f), r),
                                                 _mm256_mul_ps(_mm256_set1_ps(0.587f), g)),
                                   _mm256_mul_ps(_mm256_set1_ps(0.114f), b));
    return _mm256_cvttps_epi32(l);
}

AVX2 size_t dlc__aug_gray_sum_avx2(const uint8_t *p, uint32_t w, uint64_t *sum)
{
    __m256i acc = _mm256_setzero_si256(); /* 8 lanes of at most 255 * w / 8: no overflow. */
    uint32_t x = 0;
    for (; x + 8 <= w; x += 8) {
        __m256 r, g, b;
        split8(p + 3 * (size_t)x, &r, &g, &b);
        acc = _mm256_add_epi32(acc, gray8(r, g, b));
    }
    uint32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, acc);
    for (int l = 0; l < 8; l++)
        *sum += lanes[l];
    return x;
}

AVX2 size_t dlc__aug_grayscale_avx2(uint8_t *p, uint32_t w)
{
    uint32_t x = 0;
    for (; x + 8 <= w; x += 8) {
        __m256 r, g, b;
        split8(p + 3 * (size_t)x, &r, &g, &b);
        const __m256i l = gray8(r, g, b);
        join8(p + 3 * (size_t)x, l, l, l);
    }
    return x;
}

AVX2 size_t dlc__aug_saturation_avx2(uint8_t *p, uint32_t w, float r, float q)
{
    const __m256 vr = _mm256_set1_ps(r), vq = _mm256_set1_ps(q);
    uint32_t x = 0;
    for (; x + 8 <= w; x += 8) {
        __m256 cr, cg, cb;
        split8(p + 3 * (size_t)x, &cr, &cg, &cb);
        const __m256 g = _mm256_mul_ps(vq, _mm256_cvtepi32_ps(gray8(cr, cg, cb)));
        join8(p + 3 * (size_t)x, trunc8(_mm256_add_ps(_mm256_mul_ps(vr, cr), g)),
              trunc8(_mm256_add_ps(_mm256_mul_ps(vr, cg), g)),
              trunc8(_mm256_add_ps(_mm256_mul_ps(vr, cb), g)));
    }
    return x;
}

/* adjust_hue's hue_chunk() (aug_color.c) on 8 pixels: the same selects as blends, the same
 * divisions. */
static inline AVX2 __m256 sel(__m256 mask, __m256 yes, __m256 no)
{
    return _mm256_blendv_ps(no, yes, mask);
}

static inline AVX2 __m256 clamp01(__m256 v)
{
    return _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(1.0f));
}

static inline AVX2 __m256 ieq(__m256i i, int k)
{
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(i, _mm256_set1_epi32(k)));
}

AVX2 size_t dlc__aug_hue_avx2(uint8_t *p, uint32_t w, float hf)
{
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    const __m256 c255 = _mm256_set1_ps(255.0f), vhf = _mm256_set1_ps(hf);
    uint32_t x = 0;
    for (; x + 8 <= w; x += 8) {
        __m256 r, g, b;
        split8(p + 3 * (size_t)x, &r, &g, &b);
        const __m256 rr = _mm256_div_ps(r, c255), gg = _mm256_div_ps(g, c255);
        const __m256 bb = _mm256_div_ps(b, c255);
        /* max_ps(a, b) is a > b ? a : b and min_ps(a, b) is a < b ? a : b, the scalar selects. */
        const __m256 mgb = _mm256_max_ps(gg, bb), ngb = _mm256_min_ps(gg, bb);
        const __m256 maxc = _mm256_max_ps(rr, mgb), minc = _mm256_min_ps(rr, ngb);
        const __m256 eqc = _mm256_cmp_ps(maxc, minc, _CMP_EQ_OQ);
        const __m256 cr = _mm256_sub_ps(maxc, minc);
        const __m256 s = _mm256_div_ps(cr, sel(eqc, one, maxc));
        const __m256 crd = sel(eqc, one, cr);
        const __m256 rc = _mm256_div_ps(_mm256_sub_ps(maxc, rr), crd);
        const __m256 gc = _mm256_div_ps(_mm256_sub_ps(maxc, gg), crd);
        const __m256 bc = _mm256_div_ps(_mm256_sub_ps(maxc, bb), crd);
        const __m256 hr = _mm256_sub_ps(bc, gc);
        const __m256 hg = _mm256_sub_ps(_mm256_add_ps(_mm256_set1_ps(2.0f), rc), bc);
        const __m256 hb = _mm256_sub_ps(_mm256_add_ps(_mm256_set1_ps(4.0f), gc), rc);
        __m256 hh = sel(_mm256_cmp_ps(maxc, rr, _CMP_EQ_OQ), hr,
                        sel(_mm256_cmp_ps(maxc, gg, _CMP_EQ_OQ), hg, hb));
        __m256 t = _mm256_add_ps(_mm256_div_ps(hh, _mm256_set1_ps(6.0f)), one);
        hh = sel(_mm256_cmp_ps(t, one, _CMP_GE_OQ), _mm256_sub_ps(t, one), t);
        t = _mm256_add_ps(hh, vhf);
        hh = sel(_mm256_cmp_ps(t, one, _CMP_GE_OQ), _mm256_sub_ps(t, one),
                 sel(_mm256_cmp_ps(t, zero, _CMP_LT_OQ), _mm256_add_ps(t, one), t));
        const __m256 v = maxc;
        const __m256 h6 = _mm256_mul_ps(hh, _mm256_set1_ps(6.0f));
        __m256i i = _mm256_cvttps_epi32(h6);
        const __m256 f = _mm256_sub_ps(h6, _mm256_cvtepi32_ps(i));
        i = _mm256_sub_epi32(
            i, _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(5)), _mm256_set1_epi32(6)));
        const __m256 pp = clamp01(_mm256_mul_ps(v, _mm256_sub_ps(one, s)));
        const __m256 qq = clamp01(_mm256_mul_ps(v, _mm256_sub_ps(one, _mm256_mul_ps(s, f))));
        const __m256 tt =
            clamp01(_mm256_mul_ps(v, _mm256_sub_ps(one, _mm256_mul_ps(s, _mm256_sub_ps(one, f)))));
        const __m256 i0 = ieq(i, 0), i1 = ieq(i, 1), i2 = ieq(i, 2), i3 = ieq(i, 3);
        const __m256 i4 = ieq(i, 4), i5 = ieq(i, 5);
        const __m256 o0 =
            sel(_mm256_or_ps(i0, i5), v, sel(i1, qq, sel(_mm256_or_ps(i2, i3), pp, tt)));
        const __m256 o1 = sel(_mm256_or_ps(i1, i2), v, sel(i0, tt, sel(i3, qq, pp)));
        const __m256 o2 =
            sel(_mm256_or_ps(i3, i4), v, sel(_mm256_or_ps(i0, i1), pp, sel(i2, tt, qq)));
        join8(p + 3 * (size_t)x, trunc8(_mm256_mul_ps(o0, c255)), trunc8(_mm256_mul_ps(o1, c255)),
              trunc8(_mm256_mul_ps(o2, c255)));
    }
    return x;
}

/* Sixteen 3x3 sums of sharpness' kernel [1 1 1; 1 5 1; 1 1 1] from the rows around, as 16-bit
 * integers (at most 13 * 255). */
static inline AVX2 __m256i sum16(const uint8_t *up, const uint8_t *mid, const uint8_t *dn, size_t i,
                                 uint32_t c)
{
#define W16(p) _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(p)))
    const __m256i m = W16(mid + i);
    __m256i s = _mm256_add_epi16(W16(up + i - c), W16(up + i));
    s = _mm256_add_epi16(s, W16(up + i + c));
    s = _mm256_add_epi16(s, W16(mid + i - c));
    s = _mm256_add_epi16(s, _mm256_add_epi16(_mm256_slli_epi16(m, 2), m));
    s = _mm256_add_epi16(s, W16(mid + i + c));
    s = _mm256_add_epi16(s, W16(dn + i - c));
    s = _mm256_add_epi16(s, W16(dn + i));
    return _mm256_add_epi16(s, W16(dn + i + c));
#undef W16
}

/* One half (8 values) of the sharpness blend: r * x + q * deg, deg the smoothed value. */
static inline AVX2 __m256i sharp8(__m256i deg32, __m256 x, __m256 vr, __m256 vq)
{
    const __m256 deg = _mm256_cvtepi32_ps(deg32);
    return trunc8(_mm256_add_ps(_mm256_mul_ps(vr, x), _mm256_mul_ps(vq, deg)));
}

AVX2 size_t dlc__aug_sharpness_avx2(const uint8_t *up, const uint8_t *mid, const uint8_t *dn,
                                    uint8_t *out, size_t row, uint32_t c, float r, float q)
{
    const __m256 vr = _mm256_set1_ps(r), vq = _mm256_set1_ps(q);
    size_t i = c;
    /* Values c .. row - c - 1; the loads reach i + c + 15 < row. */
    for (; i + 32 + c <= row; i += 32) {
        __m256i o[4];
        for (int h = 0; h < 2; h++) {
            const size_t at = i + 16 * (size_t)h;
            /* The scalar (int)((float)s / 13 + 0.5) is round(s / 13) = (s + 6) / 13 for every
             * sum (s / 13 is never a tie), and for s + 6 <= 13 * 255 + 6 that quotient is
             * (s + 6) * 5042 >> 16 (both checked by tests/augment/test_aug_color.c). */
            const __m256i s = _mm256_mulhi_epu16(
                _mm256_add_epi16(sum16(up, mid, dn, at, c), _mm256_set1_epi16(6)),
                _mm256_set1_epi16(5042));
            const __m128i mv = _mm_loadu_si128((const __m128i *)(mid + at));
            o[2 * h] = sharp8(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(s)),
                              _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mv)), vr, vq);
            o[2 * h + 1] =
                sharp8(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(s, 1)),
                       _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(mv, 8))), vr, vq);
        }
        _mm256_storeu_si256((__m256i *)(out + i), pack32(o[0], o[1], o[2], o[3]));
    }
    return i;
}

#endif /* DLC__AUG_X86 */
