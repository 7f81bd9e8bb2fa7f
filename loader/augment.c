/* Crop parameters (torchvision's algorithms) and the one-pass crop + flip + convert kernel. */
#include "augment.h"
#include "convert_hd.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>

#include "simd16.h"
#define DLC_HAVE_SSSE3_FLIP 1
#define DLC_HAVE_AVX2_CONVERT 1
#endif

/* Python's round(): half to even, which is nearbyint() in the default rounding mode. */
static int64_t py_round(double x)
{
    return (int64_t)nearbyint(x);
}

dlc__box dlc__rrc_params(uint32_t width, uint32_t height, const float scale[2],
                         const float ratio[2], dlc__rng *rng)
{
    const double area = (double)height * (double)width;
    const double log_r0 = log((double)ratio[0]), log_r1 = log((double)ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        const double target_area =
            area * (scale[0] + (scale[1] - (double)scale[0]) * dlc__rng_uniform(rng));
        const double aspect = exp(log_r0 + (log_r1 - log_r0) * dlc__rng_uniform(rng));
        const int64_t w = py_round(sqrt(target_area * aspect));
        const int64_t h = py_round(sqrt(target_area / aspect));
        if (w > 0 && w <= (int64_t)width && h > 0 && h <= (int64_t)height) {
            dlc__box b;
            b.top = (uint32_t)dlc__rng_below(rng, (uint64_t)(height - h + 1));
            b.left = (uint32_t)dlc__rng_below(rng, (uint64_t)(width - w + 1));
            b.h = (uint32_t)h;
            b.w = (uint32_t)w;
            return b;
        }
    }
    /* Fallback to a central crop of the closest allowed aspect ratio. */
    const double in_ratio = (double)width / (double)height;
    const double rmin = fmin(ratio[0], ratio[1]), rmax = fmax(ratio[0], ratio[1]);
    int64_t w, h;
    if (in_ratio < rmin) {
        w = width;
        h = py_round((double)w / rmin);
    } else if (in_ratio > rmax) {
        h = height;
        w = py_round((double)h * rmax);
    } else {
        w = width;
        h = height;
    }
    /* Guard rounding at the edges: the box must stay inside the image and not be empty. */
    if (h < 1)
        h = 1;
    if (w < 1)
        w = 1;
    if (h > (int64_t)height)
        h = height;
    if (w > (int64_t)width)
        w = width;
    dlc__box b = {(uint32_t)((height - h) / 2), (uint32_t)((width - w) / 2), (uint32_t)h,
                  (uint32_t)w};
    return b;
}

dlc__box dlc__center_box(uint32_t width, uint32_t height, uint32_t crop_w, uint32_t crop_h)
{
    dlc__box b = {(uint32_t)py_round(((double)height - crop_h) / 2.0),
                  (uint32_t)py_round(((double)width - crop_w) / 2.0), crop_h, crop_w};
    return b;
}

dlc__box dlc__random_box(uint32_t width, uint32_t height, uint32_t crop_w, uint32_t crop_h,
                         dlc__rng *rng)
{
    dlc__box b = {0, 0, crop_h, crop_w};
    b.top = (uint32_t)dlc__rng_below(rng, (uint64_t)(height - crop_h) + 1);
    b.left = (uint32_t)dlc__rng_below(rng, (uint64_t)(width - crop_w) + 1);
    return b;
}

/* Rows ahead of the one being mirrored whose source bytes are prefetched (see below). */
#define FLIP_PREFETCH_ROWS 2u

/* Ask for the @p bytes at @p p to be brought into the cache. A mirrored row is read from its end
 * backwards, and the hardware prefetchers follow ascending streams only: measured on the AMD EPYC
 * (Zen 4) we build on, a flipped 224 x 224 crop of a cold 256 x 256 record took 3 to 5 times as
 * long as the plain row copies (every line of every row a cache miss), and with the rows two ahead
 * prefetched it runs at the speed of those copies. Prefetches never fault, so the call is safe
 * even where the bytes are not mapped, but the callers only pass rows of the image. */
static inline void prefetch_bytes(const uint8_t *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(p + o);
    __builtin_prefetch(p + bytes - 1);
}

#ifdef DLC_HAVE_AVX2_CONVERT
/* Byte shuffles that pick, out of 8 RGB pixels (their first 16 bytes in one vector, the last 8
 * in another), the 8 values of channel 0 (bytes 0-7) and channel 1 (bytes 8-15), and those of
 * channel 2 (bytes 0-7), in pixel order ([0]) or mirrored ([1]): {rg from the first vector, rg
 * from the second, b from the first, b from the second}; NO (0x80) gives a zero to OR with. */
#define NO 0x80
static const uint8_t deinterleave_masks[2][4][16] = {
    {
        {0, 3, 6, 9, 12, 15, NO, NO, 1, 4, 7, 10, 13, NO, NO, NO},
        {NO, NO, NO, NO, NO, NO, 2, 5, NO, NO, NO, NO, NO, 0, 3, 6},
        {2, 5, 8, 11, 14, NO, NO, NO, NO, NO, NO, NO, NO, NO, NO, NO},
        {NO, NO, NO, NO, NO, 1, 4, 7, NO, NO, NO, NO, NO, NO, NO, NO},
    },
    {
        {NO, NO, 15, 12, 9, 6, 3, 0, NO, NO, NO, 13, 10, 7, 4, 1},
        {5, 2, NO, NO, NO, NO, NO, NO, 6, 3, 0, NO, NO, NO, NO, NO},
        {NO, NO, NO, 14, 11, 8, 5, 2, NO, NO, NO, NO, NO, NO, NO, NO},
        {7, 4, 1, NO, NO, NO, NO, NO, NO, NO, NO, NO, NO, NO, NO, NO},
    },
};
#undef NO

#define AVX2_CONVERT_TARGET __attribute__((target("avx2,fma,f16c")))

/* The constants of the reference expression for one channel, in vectors. */
typedef struct norm_consts {
    __m256 mean, std, rstd;
} norm_consts;

/* ((float)v / 255 - mean) / std for 8 byte values @p v, with each division done as a product by
 * the rounded reciprocal and one FMA correction step (Markstein's). A vector division per step
 * would be exact by construction but costs about as much as the table lookups it replaces; the
 * corrected product is the correctly rounded quotient for almost every operand, and the operands
 * here are only 256 per channel, so dlc__convert_init() tries them all and keeps this path only
 * when every result is the table's. */
static inline AVX2_CONVERT_TARGET __m256 normalize8(__m128i v, const norm_consts *k)
{
    const __m256 c255 = _mm256_set1_ps(255.0f), r255 = _mm256_set1_ps(1.0f / 255.0f);
    const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    __m256 q = _mm256_mul_ps(x, r255);
    q = _mm256_fmadd_ps(_mm256_fnmadd_ps(q, c255, x), r255, q);
    const __m256 t = _mm256_sub_ps(q, k->mean);
    const __m256 r = _mm256_mul_ps(t, k->rstd);
    return _mm256_fmadd_ps(_mm256_fnmadd_ps(r, k->std, t), k->rstd, r);
}

/* 8 floats become 16-bit words through dlc__f32x8_to_16() (simd16.h): binary16 for @p f16 == 1,
 * bfloat16 for 2, which is dlc__hd_f32_to_bf16() for every value but NaN, and the normalized
 * values are never NaN. */

/* dlc__crop_convert() for float32 and float16 (NCHW) on CPUs with AVX2, FMA and F16C: 8 pixels
 * at a time are deinterleaved with byte shuffles (mirrored by the same shuffles when @p flip),
 * normalized in float and stored to the three planes; the last W % 8 pixels of a row go through
 * the tables, which hold the same bits. */
static inline AVX2_CONVERT_TARGET __attribute__((always_inline)) void
crop_convert_avx2_body(const uint8_t *base, size_t stride, uint32_t W, uint32_t H, int flip,
                       const dlc__convert *cv, void *dst, const int f16)
{
    norm_consts k[3];
    for (int c = 0; c < 3; c++) {
        k[c].mean = _mm256_set1_ps(cv->mean[c]);
        k[c].std = _mm256_set1_ps(cv->std[c]);
        k[c].rstd = _mm256_set1_ps(1.0f / cv->std[c]);
    }
    const uint8_t(*m)[16] = deinterleave_masks[flip ? 1 : 0];
    const __m128i m_rg_lo = _mm_loadu_si128((const __m128i *)m[0]);
    const __m128i m_rg_hi = _mm_loadu_si128((const __m128i *)m[1]);
    const __m128i m_b_lo = _mm_loadu_si128((const __m128i *)m[2]);
    const __m128i m_b_hi = _mm_loadu_si128((const __m128i *)m[3]);
    const size_t plane = (size_t)W * H;
    const uint32_t W8 = W & ~7u;
    for (uint32_t y = 0; y < H; y++) {
        const uint8_t *row = base + (size_t)y * stride;
        if (flip && y + FLIP_PREFETCH_ROWS < H)
            prefetch_bytes(row + FLIP_PREFETCH_ROWS * stride, (size_t)W * 3);
        const size_t o = (size_t)y * W;
        for (uint32_t x = 0; x < W8; x += 8) {
            /* Output pixels x..x+7 are source pixels x..x+7, or W-8-x..W-1-x mirrored: 24
             * bytes, read as 16 + 8 so that nothing past the row is touched. */
            const uint8_t *p = row + (size_t)(flip ? W - 8 - x : x) * 3;
            const __m128i lo = _mm_loadu_si128((const __m128i *)p);
            const __m128i hi = _mm_loadl_epi64((const __m128i *)(p + 16));
            const __m128i rg =
                _mm_or_si128(_mm_shuffle_epi8(lo, m_rg_lo), _mm_shuffle_epi8(hi, m_rg_hi));
            const __m128i b =
                _mm_or_si128(_mm_shuffle_epi8(lo, m_b_lo), _mm_shuffle_epi8(hi, m_b_hi));
            const __m256 v0 = normalize8(rg, &k[0]);
            const __m256 v1 = normalize8(_mm_srli_si128(rg, 8), &k[1]);
            const __m256 v2 = normalize8(b, &k[2]);
            if (f16) {
                uint16_t *d = (uint16_t *)dst + o + x;
                _mm_storeu_si128((__m128i *)d, dlc__f32x8_to_16(v0, f16 == 2));
                _mm_storeu_si128((__m128i *)(d + plane), dlc__f32x8_to_16(v1, f16 == 2));
                _mm_storeu_si128((__m128i *)(d + 2 * plane), dlc__f32x8_to_16(v2, f16 == 2));
            } else {
                float *d = (float *)dst + o + x;
                _mm256_storeu_ps(d, v0);
                _mm256_storeu_ps(d + plane, v1);
                _mm256_storeu_ps(d + 2 * plane, v2);
            }
        }
        for (uint32_t x = W8; x < W; x++) {
            const uint8_t *p = row + (size_t)(flip ? W - 1 - x : x) * 3;
            for (uint32_t c = 0; c < 3; c++) {
                if (f16)
                    ((uint16_t *)dst)[c * plane + o + x] = cv->f16[c][p[c]];
                else
                    ((float *)dst)[c * plane + o + x] = cv->f32[c][p[c]];
            }
        }
    }
}

/* The same for one channel (gray images): 8 bytes of a row at a time, reversed by one byte
 * shuffle when mirrored, into the single plane. Small gray images (28 x 28) are where the loader
 * runs at millions of samples a second, so the per-pixel table lookups matter there. */
static inline AVX2_CONVERT_TARGET __attribute__((always_inline)) void
crop_convert_avx2_gray(const uint8_t *base, size_t stride, uint32_t W, uint32_t H, int flip,
                       const dlc__convert *cv, void *dst, const int f16)
{
    const norm_consts k = {_mm256_set1_ps(cv->mean[0]), _mm256_set1_ps(cv->std[0]),
                           _mm256_set1_ps(1.0f / cv->std[0])};
    const __m128i rev = _mm_setr_epi8(7, 6, 5, 4, 3, 2, 1, 0, 8, 9, 10, 11, 12, 13, 14, 15);
    const uint32_t W8 = W & ~7u;
    for (uint32_t y = 0; y < H; y++) {
        const uint8_t *row = base + (size_t)y * stride;
        const size_t o = (size_t)y * W;
        for (uint32_t x = 0; x < W8; x += 8) {
            __m128i v = _mm_loadl_epi64((const __m128i *)(row + (flip ? W - 8 - x : x)));
            if (flip)
                v = _mm_shuffle_epi8(v, rev);
            const __m256 r = normalize8(v, &k);
            if (f16)
                _mm_storeu_si128((__m128i *)((uint16_t *)dst + o + x),
                                 dlc__f32x8_to_16(r, f16 == 2));
            else
                _mm256_storeu_ps((float *)dst + o + x, r);
        }
        for (uint32_t x = W8; x < W; x++) {
            const uint8_t v = row[flip ? W - 1 - x : x];
            if (f16)
                ((uint16_t *)dst)[o + x] = cv->f16[0][v];
            else
                ((float *)dst)[o + x] = cv->f32[0][v];
        }
    }
}

/* The bodies once per output type and channel count, so that the store is chosen outside the
 * loops. */
static AVX2_CONVERT_TARGET void crop_convert_avx2(const uint8_t *base, size_t stride, uint32_t W,
                                                  uint32_t H, int flip, const dlc__convert *cv,
                                                  void *dst)
{
    const int f16 = cv->dtype == DLC_DTYPE_FLOAT16 ? 1 : cv->dtype == DLC_DTYPE_BFLOAT16 ? 2 : 0;
    if (cv->channels == 1) {
        if (f16 == 1)
            crop_convert_avx2_gray(base, stride, W, H, flip, cv, dst, 1);
        else if (f16 == 2)
            crop_convert_avx2_gray(base, stride, W, H, flip, cv, dst, 2);
        else
            crop_convert_avx2_gray(base, stride, W, H, flip, cv, dst, 0);
    } else if (f16 == 1) {
        crop_convert_avx2_body(base, stride, W, H, flip, cv, dst, 1);
    } else if (f16 == 2) {
        crop_convert_avx2_body(base, stride, W, H, flip, cv, dst, 2);
    } else {
        crop_convert_avx2_body(base, stride, W, H, flip, cv, dst, 0);
    }
}

/* Does the vector kernel run here, and give the tables' bits for every input? It is an
 * elementwise function of (channel, byte), so one row holding every byte value in every
 * channel tries all of its inputs. */
static int avx2_convert_matches_tables(const dlc__convert *cv)
{
    unsigned a, b, c, d;
    if (!__builtin_cpu_supports("avx2") || !__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_FMA) ||
        !(c & bit_F16C))
        return 0;
    const uint32_t C = cv->channels;
    uint8_t row[256 * 3];
    for (uint32_t v = 0; v < 256; v++)
        for (uint32_t ch = 0; ch < C; ch++)
            row[v * C + ch] = (uint8_t)v;
    float out[3 * 256]; /* Large enough for the float16 planes too. */
    crop_convert_avx2(row, sizeof row, 256, 1, 0, cv, out);
    if (cv->dtype != DLC_DTYPE_FLOAT32)
        return memcmp(out, cv->f16, C * sizeof cv->f16[0]) == 0;
    return memcmp(out, cv->f32, C * sizeof cv->f32[0]) == 0;
}
#endif

void dlc__convert_init(dlc__convert *cv, uint32_t dtype, uint32_t channels, const float *mean,
                       const float *std)
{
    memset(cv, 0, sizeof *cv);
    cv->dtype = dtype;
    cv->channels = channels;
    for (uint32_t c = 0; c < channels && c < DLC__MAX_CHANNELS; c++) {
        cv->mean[c] = mean[c];
        cv->std[c] = std[c];
        for (int v = 0; v < 256; v++) {
            /* Exactly the reference expression in float, so outputs are bit-identical to a
             * straightforward (x / 255 - mean) / std, and to the device's conversion, which
             * runs the same two functions (common/convert_hd.h). */
            const float f = dlc__hd_norm((uint32_t)v, mean[c], std[c]);
            cv->f32[c][v] = f;
            cv->f16[c][v] = dlc__hd_f32_to_16(f, dtype);
        }
    }
#ifdef DLC_HAVE_AVX2_CONVERT
    if ((channels == 1 || channels == 3) &&
        (dtype == DLC_DTYPE_FLOAT32 || dtype == DLC_DTYPE_FLOAT16 || dtype == DLC_DTYPE_BFLOAT16))
        cv->simd = avx2_convert_matches_tables(cv);
#endif
}

/* Mirror one row of @p w RGB pixels: out[x] = in[w - 1 - x]. */
static void flip_row_rgb_scalar(const uint8_t *restrict in, uint8_t *restrict out, uint32_t w)
{
    for (uint32_t x = 0; x < w; x++) {
        const uint8_t *p = in + (size_t)(w - 1 - x) * 3;
        out[x * 3 + 0] = p[0];
        out[x * 3 + 1] = p[1];
        out[x * 3 + 2] = p[2];
    }
}

#ifdef DLC_HAVE_SSSE3_FLIP
/* Sixteen RGB pixels (48 bytes, three vectors) reversed with byte shuffles: output vector o takes
 * its bytes from input vectors i through mask [o][i] (0x80 = none). The byte-at-a-time loop costs
 * a few times more than the plain row copy, and half the samples are flipped. */
static const uint8_t flip_masks[3][3][16] = {
    {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
      0x80},
     {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
      0x0e},
     {0x0d, 0x0e, 0x0f, 0x0a, 0x0b, 0x0c, 0x07, 0x08, 0x09, 0x04, 0x05, 0x06, 0x01, 0x02, 0x03,
      0x80}},
    {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x0f,
      0x80},
     {0x0f, 0x80, 0x0b, 0x0c, 0x0d, 0x08, 0x09, 0x0a, 0x05, 0x06, 0x07, 0x02, 0x03, 0x04, 0x80,
      0x00},
     {0x80, 0x00, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
      0x80}},
    {{0x80, 0x0c, 0x0d, 0x0e, 0x09, 0x0a, 0x0b, 0x06, 0x07, 0x08, 0x03, 0x04, 0x05, 0x00, 0x01,
      0x02},
     {0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
      0x80},
     {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
      0x80}},
};

__attribute__((target("ssse3"))) static void flip_row_rgb_ssse3(const uint8_t *restrict in,
                                                                uint8_t *restrict out, uint32_t w)
{
    __m128i m[3][3];
    for (int o = 0; o < 3; o++)
        for (int i = 0; i < 3; i++)
            m[o][i] = _mm_loadu_si128((const __m128i *)flip_masks[o][i]);
    uint32_t x = 0;
    for (; x + 16 <= w; x += 16) {
        /* Output pixels x..x+15 are input pixels w-16-x..w-1-x in reverse. */
        const uint8_t *src = in + (size_t)(w - 16 - x) * 3;
        const __m128i a = _mm_loadu_si128((const __m128i *)src);
        const __m128i b = _mm_loadu_si128((const __m128i *)(src + 16));
        const __m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
        const __m128i o0 = _mm_or_si128(_mm_shuffle_epi8(b, m[0][1]), _mm_shuffle_epi8(c, m[0][2]));
        const __m128i o1 =
            _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, m[1][0]), _mm_shuffle_epi8(b, m[1][1])),
                         _mm_shuffle_epi8(c, m[1][2]));
        const __m128i o2 = _mm_or_si128(_mm_shuffle_epi8(a, m[2][0]), _mm_shuffle_epi8(b, m[2][1]));
        _mm_storeu_si128((__m128i *)(out + (size_t)x * 3), o0);
        _mm_storeu_si128((__m128i *)(out + (size_t)x * 3 + 16), o1);
        _mm_storeu_si128((__m128i *)(out + (size_t)x * 3 + 32), o2);
    }
    /* The last w % 16 output pixels are the first input pixels, reversed. */
    if (x < w)
        flip_row_rgb_scalar(in, out + (size_t)x * 3, w - x);
}
#endif

void dlc__flip_row_rgb(const uint8_t *in, uint8_t *out, uint32_t w)
{
#ifdef DLC_HAVE_SSSE3_FLIP
    if (__builtin_cpu_supports("ssse3")) {
        flip_row_rgb_ssse3(in, out, w);
        return;
    }
#endif
    flip_row_rgb_scalar(in, out, w);
}

/* Mirror one row of @p w pixels of @p C channels (1 and 4 have their own word-sized loops). */
static void flip_row_any(const uint8_t *restrict in, uint8_t *restrict out, uint32_t w, uint32_t C)
{
    if (C == 1) {
        for (uint32_t x = 0; x < w; x++)
            out[x] = in[w - 1 - x];
    } else if (C == 4) {
        for (uint32_t x = 0; x < w; x++) {
            uint32_t v;
            memcpy(&v, in + (size_t)(w - 1 - x) * 4, 4);
            memcpy(out + (size_t)x * 4, &v, 4);
        }
    } else {
        for (uint32_t x = 0; x < w; x++)
            memcpy(out + (size_t)x * C, in + (size_t)(w - 1 - x) * C, C);
    }
}

/* Float planes through the tables for any channel count (the vector kernels cover 1 and 3). */
static void convert_planes_any(const uint8_t *base, size_t stride, uint32_t W, uint32_t H, int flip,
                               const dlc__convert *cv, void *dst)
{
    const uint32_t C = cv->channels;
    const size_t plane = (size_t)W * H;
    for (uint32_t y = 0; y < H; y++) {
        const uint8_t *row = base + (size_t)y * stride;
        for (uint32_t x = 0; x < W; x++) {
            const uint8_t *p = row + (size_t)(flip ? W - 1 - x : x) * C;
            const size_t o = (size_t)y * W + x;
            for (uint32_t c = 0; c < C; c++) {
                if (cv->dtype != DLC_DTYPE_FLOAT32)
                    ((uint16_t *)dst)[c * plane + o] = cv->f16[c][p[c]];
                else
                    ((float *)dst)[c * plane + o] = cv->f32[c][p[c]];
            }
        }
    }
}

void dlc__crop_convert(const uint8_t *src, size_t stride, dlc__box box, int flip,
                       const dlc__convert *cv, void *dst)
{
    const uint32_t C = cv->channels, W = box.w, H = box.h;
    const uint8_t *base = src + (size_t)box.top * stride + (size_t)box.left * C;
    if (cv->dtype == DLC_DTYPE_UINT8) {
        uint8_t *out = dst;
        const size_t row = (size_t)W * C;
        if (!flip && row == stride) {
            /* Whole rows of the image: one block (small images are copied millions of times a
             * second, where a call per row shows). */
            memcpy(out, base, row * H);
            return;
        }
        for (uint32_t y = 0; y < H; y++, out += row) {
            const uint8_t *in = base + (size_t)y * stride;
            if (!flip) {
                memcpy(out, in, row);
                continue;
            }
            if (y + FLIP_PREFETCH_ROWS < H)
                prefetch_bytes(in + FLIP_PREFETCH_ROWS * stride, row);
            if (C == 3)
                dlc__flip_row_rgb(in, out, W);
            else
                flip_row_any(in, out, W, C);
        }
        return;
    }
    /* NCHW: C planes written row by row while the source row is read once. */
#ifdef DLC_HAVE_AVX2_CONVERT
    if (cv->simd) {
        crop_convert_avx2(base, stride, W, H, flip, cv, dst);
        return;
    }
#endif
    if (C != 3) {
        convert_planes_any(base, stride, W, H, flip, cv, dst);
        return;
    }
    const size_t plane = (size_t)W * H;
    const ptrdiff_t step = flip ? -3 : 3;
    if (cv->dtype == DLC_DTYPE_FLOAT32) {
        float *o0 = dst, *o1 = o0 + plane, *o2 = o1 + plane;
        for (uint32_t y = 0; y < H; y++) {
            if (flip && y + FLIP_PREFETCH_ROWS < H)
                prefetch_bytes(base + (size_t)(y + FLIP_PREFETCH_ROWS) * stride, (size_t)W * 3);
            const uint8_t *p = base + (size_t)y * stride + (flip ? (size_t)(W - 1) * 3 : 0);
            for (uint32_t x = 0; x < W; x++, p += step) {
                o0[x] = cv->f32[0][p[0]];
                o1[x] = cv->f32[1][p[1]];
                o2[x] = cv->f32[2][p[2]];
            }
            o0 += W, o1 += W, o2 += W;
        }
    } else {
        uint16_t *o0 = dst, *o1 = o0 + plane, *o2 = o1 + plane;
        for (uint32_t y = 0; y < H; y++) {
            if (flip && y + FLIP_PREFETCH_ROWS < H)
                prefetch_bytes(base + (size_t)(y + FLIP_PREFETCH_ROWS) * stride, (size_t)W * 3);
            const uint8_t *p = base + (size_t)y * stride + (flip ? (size_t)(W - 1) * 3 : 0);
            for (uint32_t x = 0; x < W; x++, p += step) {
                o0[x] = cv->f16[0][p[0]];
                o1[x] = cv->f16[1][p[1]];
                o2[x] = cv->f16[2][p[2]];
            }
            o0 += W, o1 += W, o2 += W;
        }
    }
}

void dlc__resize_nearest(const uint8_t *src, size_t stride, uint32_t channels, double x0, double y0,
                         double w, double h, int flip, uint8_t *dst, uint32_t dst_w, uint32_t dst_h)
{
    const double sx = w / dst_w, sy = h / dst_h;
    /* The last source column and row of the region: floor() of a sample that lands exactly on
     * the region's far edge (possible through rounding) must stay inside it. */
    const uint32_t xmax = (uint32_t)ceil(x0 + w) - 1, ymax = (uint32_t)ceil(y0 + h) - 1;
    const size_t C = channels;
    for (uint32_t y = 0; y < dst_h; y++) {
        uint32_t iy = (uint32_t)floor(y0 + (y + 0.5) * sy);
        iy = iy > ymax ? ymax : iy;
        const uint8_t *row = src + (size_t)iy * stride;
        uint8_t *out = dst + (size_t)y * dst_w * C;
        for (uint32_t x = 0; x < dst_w; x++) {
            uint32_t ix = (uint32_t)floor(x0 + (x + 0.5) * sx);
            ix = ix > xmax ? xmax : ix;
            uint8_t *o = out + (size_t)(flip ? dst_w - 1 - x : x) * C;
            if (C == 1)
                *o = row[ix];
            else
                memcpy(o, row + ix * C, C);
        }
    }
}

uint32_t dlc__boxes_transform(const uint8_t *in, uint32_t n, const dlc__geom *g, float *out,
                              uint8_t *keep)
{
    uint32_t kept = 0;
    const double W = g->out_w, H = g->out_h;
    for (uint32_t i = 0; i < n; i++) {
        float b[4];
        memcpy(b, in + (size_t)16 * i, sizeof b);
        const double b0 = b[0], b1 = b[1], b2 = b[2], b3 = b[3];
        double x0 = (b0 - g->x0) * g->sx, y0 = (b1 - g->y0) * g->sy;
        double x1 = (b2 - g->x0) * g->sx, y1 = (b3 - g->y0) * g->sy;
        if (g->flip) {
            const double t = x0;
            x0 = W - x1;
            x1 = W - t;
        }
        /* fmin and fmax would turn a NaN into a bound, so a box with a coordinate that is not
         * finite is dropped before the clip. */
        const int finite = isfinite(x0) && isfinite(y0) && isfinite(x1) && isfinite(y1);
        x0 = fmin(fmax(x0, 0.0), W);
        x1 = fmin(fmax(x1, 0.0), W);
        y0 = fmin(fmax(y0, 0.0), H);
        y1 = fmin(fmax(y1, 0.0), H);
        /* Empty or not is decided on the float32 values the model gets: a box on the crop's far
         * edge can end 1e-14 inside it in double and be empty once rounded (the detection
         * example counted such boxes: models refuse them). */
        const float f[4] = {(float)x0, (float)y0, (float)x1, (float)y1};
        const int ok = finite && f[2] > f[0] && f[3] > f[1];
        if (keep)
            keep[i] = (uint8_t)ok;
        if (!ok)
            continue;
        memcpy(out + 4 * (size_t)kept++, f, sizeof f);
    }
    return kept;
}
