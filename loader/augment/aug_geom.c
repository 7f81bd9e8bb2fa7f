/* The geometric ops of aug_internal.h (rotate and the affine family), as torchvision 0.14's tensor
 * path computes them: _get_inverse_affine_matrix in double (Python), the matrix cast to float32,
 * _gen_affine_grid's pixel-center grid divided by half the image's size, and grid_sample with
 * align_corners=False, whose source coordinate is the float32 (x + 1) * W / 2 - 0.5 (ATen's
 * vectorized CPU kernel, GridSamplerKernel.cpp). Nearest takes the pixel at that coordinate
 * rounded half to even, or the fill outside the source. Bilinear weighs the four pixels around it
 * as that kernel does (the pixels outside count 0) and, when a fill is given, blends it in by the
 * weight of the outside, as _apply_grid_transform does with its mask channel:
 * img * mask + (1 - mask) * fill; the result is rounded half to even (_cast_squeeze_out).
 *
 * Where the paths differ: PIL's affine (Image.transform with the same inverse matrix) takes the
 * pixel at floor(coordinate + 0.5) of a grid shifted by half a pixel, so PIL and tensor results
 * differ on tie pixels and by a 0.5-pixel offset of the center for rotations; we follow the
 * tensor path. torch's batched matrix product may fuse a multiply-add where we do not, so a pixel
 * whose coordinate lies within a float rounding of a .5 tie can land on the neighbouring source
 * pixel: rare (the tests require 99 % identical and see far more). Bilinear sums the same
 * products in the same order, but torch's build may fuse them too, so a value whose sum lies
 * within a rounding of a .5 tie can differ by 1.
 *
 * Speed: every destination row's coordinates are affine in x, so they are computed for a block of
 * pixels at a time with the per-pixel float operations of the formula in their order (no
 * rearranging, -ffp-contract=off), eight lanes at once with AVX2 where the CPU has it: the
 * vector and scalar paths give the same bits. Nearest turns them into source offsets and gathers
 * the pixels (AVX2 gather, with a plain copy for eight pixels that map to consecutive source
 * pixels, as translations and shears along x mostly do). The source is the copy of the image in
 * the scratch: a warp reads pixels that it has already overwritten in place. */
#include "aug_ops.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_WARP_AVX2 1
#define AVX2_TARGET __attribute__((target("avx2")))
#define AVX2_INLINE __attribute__((target("avx2"), always_inline)) static inline
#endif

/* Destination pixels per block of the scalar nearest path: their offsets live on the stack. */
#define BLOCK 64u
/* Beyond this magnitude a coordinate is far outside any image (and floor/round are exact below
 * it): it takes the fill. */
#define FAR 4194304.0f /* 2^22 */

void dlc__aug_inverse_affine(const double center[2], double angle, const double translate[2],
                             double scale, const double shear[2], double m[6])
{
    const double pi = 3.14159265358979323846;
    const double rot = angle * pi / 180.0;
    const double sx = shear[0] * pi / 180.0;
    const double sy = shear[1] * pi / 180.0;
    const double cx = center[0], cy = center[1];
    const double tx = translate[0], ty = translate[1];
    const double a = cos(rot - sy) / cos(sy);
    const double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    const double c = sin(rot - sy) / cos(sy);
    const double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d / scale;
    m[1] = -b / scale;
    m[2] = 0.0 / scale;
    m[3] = -c / scale;
    m[4] = a / scale;
    m[5] = 0.0 / scale;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
}

/* One warp: the float32 constants of the grid and the source. */
typedef struct warp {
    const uint8_t *src; /* The copy of the image, rows `row` bytes apart, >= 4 bytes of slack. */
    size_t row;         /* w * c. */
    uint32_t w, h, c;
    float r00, r10, r20, r01, r11, r21; /* rescaled_theta = theta^T / [0.5 w, 0.5 h]. */
    float ux, uy;                       /* grid_sample's unnormalize: size / 2. */
    float bx0, by0;                     /* The base grid's first pixel center: -size / 2 + 0.5. */
    float fw, fh;                       /* w, h as floats. */
    uint8_t fill[4];
} warp;

/* Source coordinates of pixels x0 .. x0 + n - 1 of the row whose base-grid y is by, in the float
 * operations of _gen_affine_grid (bx * r00 + by * r10 + r20, left to right) and of the
 * unnormalize. */
static void coords_scalar(const warp *k, float by, uint32_t x0, uint32_t n, float *fx, float *fy)
{
    const float cyx = by * k->r10, cyy = by * k->r11;
    for (uint32_t i = 0; i < n; i++) {
        const float bx = k->bx0 + (float)(x0 + i);
        const float gx = bx * k->r00 + cyx + k->r20;
        const float gy = bx * k->r01 + cyy + k->r21;
        fx[i] = (gx + 1.0f) * k->ux - 0.5f;
        fy[i] = (gy + 1.0f) * k->uy - 0.5f;
    }
}

/* Nearest: the source offset of each pixel of the block, or -1 for the fill. */
static void offsets_scalar(const warp *k, float by, uint32_t x0, uint32_t n, int32_t *off)
{
    float fx[BLOCK], fy[BLOCK];
    coords_scalar(k, by, x0, n, fx, fy);
    for (uint32_t i = 0; i < n; i++) {
        const float ix = fabsf(fx[i]) < FAR ? dlc__aug_round_even(fx[i]) : -1.0f;
        const float iy = fabsf(fy[i]) < FAR ? dlc__aug_round_even(fy[i]) : -1.0f;
        const int in = ix >= 0.0f && ix < k->fw && iy >= 0.0f && iy < k->fh;
        off[i] = in ? (int32_t)iy * (int32_t)k->row + (int32_t)ix * (int32_t)k->c : -1;
    }
}

static void gather_scalar(const warp *k, const int32_t *off, uint32_t n, uint8_t *out)
{
    const uint32_t c = k->c;
    if (c == 3) {
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *s = off[i] >= 0 ? k->src + off[i] : k->fill;
            out[3 * i] = s[0], out[3 * i + 1] = s[1], out[3 * i + 2] = s[2];
        }
    } else if (c == 1) {
        for (uint32_t i = 0; i < n; i++)
            out[i] = off[i] >= 0 ? k->src[off[i]] : k->fill[0];
    } else {
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *s = off[i] >= 0 ? k->src + off[i] : k->fill;
            for (uint32_t j = 0; j < c; j++)
                out[(size_t)i * c + j] = s[j];
        }
    }
}

#ifdef HAVE_WARP_AVX2
/* coords_scalar() eight lanes at a time (n rounded up to a multiple of 8): the same operations
 * on each lane, so the same bits. */
AVX2_INLINE void coords8(const warp *k, __m256 cyx, __m256 cyy, uint32_t x, __m256 *fx, __m256 *fy)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 xf = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_set1_epi32((int32_t)x), lane));
    const __m256 bx = _mm256_add_ps(_mm256_set1_ps(k->bx0), xf);
    const __m256 gx = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(bx, _mm256_set1_ps(k->r00)), cyx),
                                    _mm256_set1_ps(k->r20));
    const __m256 gy = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(bx, _mm256_set1_ps(k->r01)), cyy),
                                    _mm256_set1_ps(k->r21));
    const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
    *fx = _mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(gx, one), _mm256_set1_ps(k->ux)), half);
    *fy = _mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(gy, one), _mm256_set1_ps(k->uy)), half);
}

/* Packing eight pixels of four bytes to c bytes each (c < 4): the shuffle keeps the first c bytes
 * of each pixel at the front of each 128-bit lane, the permutation joins the two lanes' 4 * c
 * bytes. Index c - 1. */
static const int8_t pack_shuf[3][32] = {
    {0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
     0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
    {0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
     0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1},
    {0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,
     0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1},
};
static const int32_t pack_perm[3][8] = {
    {0, 4, 2, 3, 1, 5, 6, 7},
    {0, 1, 4, 5, 2, 3, 6, 7},
    {0, 1, 2, 4, 5, 6, 3, 7},
};

/* Store eight packed pixels of four bytes as c bytes each. */
AVX2_INLINE void store_packed(uint8_t *o, __m256i v, const uint32_t c)
{
    if (c == 4) {
        _mm256_storeu_si256((__m256i *)o, v);
        return;
    }
    const __m256i shuf = _mm256_loadu_si256((const __m256i *)pack_shuf[c - 1]);
    const __m256i perm = _mm256_loadu_si256((const __m256i *)pack_perm[c - 1]);
    v = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v, shuf), perm);
    const __m128i lo = _mm256_castsi256_si128(v);
    if (c == 1) {
        _mm_storel_epi64((__m128i *)o, lo);
    } else if (c == 2) {
        _mm_storeu_si128((__m128i *)o, lo);
    } else {
        _mm_storeu_si128((__m128i *)o, lo);
        _mm_storel_epi64((__m128i *)(o + 16), _mm256_extracti128_si256(v, 1));
    }
}

/* Eight pixels' source offsets, -1 for the fill. The conversion rounds half to even (the default
 * rounding mode, which dlc__aug_round_even() assumes too); with w and h below 2^22 an integer in
 * [0, size) is exactly a coordinate of magnitude below 2^22 that rounds inside, and coordinates
 * beyond (or NaN) convert to values outside. */
AVX2_INLINE __m256i offsets8(const warp *k, __m256 cyx, __m256 cyy, uint32_t x, const uint32_t c)
{
    __m256 fx, fy;
    coords8(k, cyx, cyy, x, &fx, &fy);
    const __m256i ix = _mm256_cvtps_epi32(fx), iy = _mm256_cvtps_epi32(fy);
    /* Inside: 0 <= i <= size - 1 as unsigned (negative values are large). */
    const __m256i wm = _mm256_set1_epi32((int32_t)k->w - 1),
                  hm = _mm256_set1_epi32((int32_t)k->h - 1);
    const __m256i in = _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_min_epu32(ix, wm), ix),
                                        _mm256_cmpeq_epi32(_mm256_min_epu32(iy, hm), iy));
    __m256i xc = ix;
    if (c == 2)
        xc = _mm256_add_epi32(ix, ix);
    else if (c == 3)
        xc = _mm256_add_epi32(_mm256_add_epi32(ix, ix), ix);
    else if (c == 4)
        xc = _mm256_slli_epi32(ix, 2);
    const __m256i o =
        _mm256_add_epi32(_mm256_mullo_epi32(iy, _mm256_set1_epi32((int32_t)k->row)), xc);
    return _mm256_or_si256(o, _mm256_xor_si256(in, _mm256_set1_epi32(-1)));
}

/* One row of a @p c-channel image, 1 <= c <= 4: eight pixels at a time, a masked gather of four
 * bytes per pixel (the source has slack past its end) packed to c bytes; eight pixels that are
 * consecutive in the source are copied as they are. */
AVX2_INLINE void nearest_row_avx2_c(const warp *kp, float by, uint8_t *out, const uint32_t c)
{
    /* A local copy: the stores to the image could alias *kp, which would reload every constant
     * each iteration. */
    const warp kc = *kp, *k = &kc;
    const __m256 cyx = _mm256_set1_ps(by * k->r10), cyy = _mm256_set1_ps(by * k->r11);
    const __m256i step = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                            _mm256_set1_epi32((int32_t)c));
    uint32_t f32 = 0;
    memcpy(&f32, k->fill, 4);
    const __m256i fill = _mm256_set1_epi32((int32_t)f32);
    const __m256i none = _mm256_set1_epi32(-1);
    const int *base = (const int *)(const void *)k->src;
    uint32_t x = 0;
    for (; x + 8 <= k->w; x += 8) {
        uint8_t *o = out + (size_t)x * c;
        const __m256i off = offsets8(k, cyx, cyy, x, c);
        const int32_t o0 = _mm256_cvtsi256_si32(off);
        const __m256i seq = _mm256_add_epi32(_mm256_set1_epi32(o0), step);
        if (o0 >= 0 && _mm256_movemask_epi8(_mm256_cmpeq_epi32(off, seq)) == -1) {
            memcpy(o, k->src + o0, 8 * c);
            continue;
        }
        const __m256i in = _mm256_cmpgt_epi32(off, none);
        store_packed(o, _mm256_mask_i32gather_epi32(fill, base, off, in, 1), c);
    }
    if (x < k->w) {
        int32_t off[8];
        _mm256_storeu_si256((__m256i *)off, offsets8(k, cyx, cyy, x, c));
        gather_scalar(kp, off, kp->w - x, out + (size_t)x * c);
    }
}

AVX2_TARGET static void nearest_row_avx2(const warp *k, float by, uint8_t *out)
{
    switch (k->c) {
    case 1:
        nearest_row_avx2_c(k, by, out, 1);
        break;
    case 2:
        nearest_row_avx2_c(k, by, out, 2);
        break;
    case 3:
        nearest_row_avx2_c(k, by, out, 3);
        break;
    default:
        nearest_row_avx2_c(k, by, out, 4);
        break;
    }
}

static int cpu_has_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}
#else
static int cpu_has_avx2(void)
{
    return 0;
}
#endif

/* Nearest, one pixel at a time with size_t offsets: images whose offsets do not fit an int32. */
static void nearest_big(const warp *k, uint8_t *img, size_t stride)
{
    const uint32_t w = k->w, h = k->h, c = k->c;
    for (uint32_t y = 0; y < h; y++) {
        const float by = k->by0 + (float)y;
        uint8_t *out = img + (size_t)y * stride;
        for (uint32_t x = 0; x < w; x++) {
            float fx, fy;
            coords_scalar(k, by, x, 1, &fx, &fy);
            const float ix = fabsf(fx) < FAR ? dlc__aug_round_even(fx) : -1.0f;
            const float iy = fabsf(fy) < FAR ? dlc__aug_round_even(fy) : -1.0f;
            const int in = ix >= 0.0f && ix < k->fw && iy >= 0.0f && iy < k->fh;
            const uint8_t *s = in ? k->src + (size_t)iy * k->row + (size_t)ix * c : k->fill;
            memcpy(out + (size_t)x * c, s, c);
        }
    }
}

static void nearest(const warp *k, uint8_t *img, size_t stride, int simd)
{
    if ((uint64_t)k->row * k->h + 8 > (uint64_t)INT32_MAX) {
        nearest_big(k, img, stride);
        return;
    }
    /* The vector rows take an integer inside [0, size) for a coordinate below 2^22. */
    simd = simd && k->w < (1u << 22) && k->h < (1u << 22);
    int32_t off[BLOCK];
    for (uint32_t y = 0; y < k->h; y++) {
        const float by = k->by0 + (float)y;
        uint8_t *out = img + (size_t)y * stride;
#ifdef HAVE_WARP_AVX2
        if (simd) {
            nearest_row_avx2(k, by, out);
            continue;
        }
#endif
        for (uint32_t x0 = 0; x0 < k->w; x0 += BLOCK) {
            const uint32_t n = k->w - x0 < BLOCK ? k->w - x0 : BLOCK;
            offsets_scalar(k, by, x0, n, off);
            gather_scalar(k, off, n, out + (size_t)x0 * k->c);
        }
    }
}

/* Bilinear, one pixel at a time, as ATen's ApplyGridSample<bilinear> computes it in its AVX2
 * build, whose compiler fuses multiply-adds (measured against torch 1.13: every float of
 * grid_sample equal, where the unfused sums leave a fifth of them a rounding apart): the
 * unnormalize is fma(g + 1, size / 2, -0.5); the weights come from the floor; the four corners'
 * values times their weights are summed nw, ne, sw, se as fma(value, weight, sum), a corner
 * outside the image counting 0 (which leaves the sum as it is); the mask channel likewise with
 * values 1. The blend with the fill is torchvision's, in separate tensor ops (no fusing). */
static void bilinear_scalar(const warp *k, float by, uint32_t x0, uint32_t n, uint8_t *out,
                            int blend)
{
    const uint32_t c = k->c;
    const int32_t w = (int32_t)k->w, h = (int32_t)k->h;
    const float cyx = by * k->r10, cyy = by * k->r11;
    for (uint32_t i = 0; i < n; i++) {
        const float bx = k->bx0 + (float)(x0 + i);
        const float gx = bx * k->r00 + cyx + k->r20;
        const float gy = bx * k->r01 + cyy + k->r21;
        const float fx = fmaf(gx + 1.0f, k->ux, -0.5f), fy = fmaf(gy + 1.0f, k->uy, -0.5f);
        float v[DLC__AUG_MAX_CHANNELS] = {0.0f, 0.0f, 0.0f, 0.0f};
        float m = 0.0f;
        if (fabsf(fx) < FAR && fabsf(fy) < FAR) {
            const float xw = floorf(fx), yn = floorf(fy);
            const float we = fx - xw, e = 1.0f - we;
            const float ns = fy - yn, s = 1.0f - ns;
            const float wt[4] = {s * e, s * we, ns * e, ns * we}; /* nw, ne, sw, se */
            const int32_t x = (int32_t)xw, y = (int32_t)yn;
            for (int q = 0; q < 4; q++) {
                const int32_t qx = x + (q & 1), qy = y + (q >> 1);
                if (qx < 0 || qx >= w || qy < 0 || qy >= h)
                    continue;
                const uint8_t *p = k->src + (size_t)qy * k->row + (size_t)qx * c;
                for (uint32_t j = 0; j < c; j++)
                    v[j] = fmaf((float)p[j], wt[q], v[j]);
                m = m + wt[q];
            }
        }
        for (uint32_t j = 0; j < c; j++) {
            float r = v[j];
            if (blend)
                r = r * m + (1.0f - m) * (float)k->fill[j];
            r = dlc__aug_round_even(r);
            out[(size_t)i * c + j] = (uint8_t)(r <= 0.0f ? 0.0f : r >= 255.0f ? 255.0f : r);
        }
    }
}

#ifdef HAVE_WARP_AVX2
#define FMA_TARGET __attribute__((target("avx2,fma")))
#define FMA_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

/* bilinear_scalar() for eight pixels at x of a @p c-channel image: the same operations on each
 * lane (the fused ones fused), each corner a masked gather of four bytes. */
FMA_INLINE void bilinear8(const warp *k, __m256 cyx, __m256 cyy, uint32_t x, uint8_t *out,
                          int blend, const uint32_t c)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 xf = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_set1_epi32((int32_t)x), lane));
    const __m256 bx = _mm256_add_ps(_mm256_set1_ps(k->bx0), xf);
    const __m256 gx = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(bx, _mm256_set1_ps(k->r00)), cyx),
                                    _mm256_set1_ps(k->r20));
    const __m256 gy = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(bx, _mm256_set1_ps(k->r01)), cyy),
                                    _mm256_set1_ps(k->r21));
    const __m256 one = _mm256_set1_ps(1.0f), mhalf = _mm256_set1_ps(-0.5f);
    const __m256 fx = _mm256_fmadd_ps(_mm256_add_ps(gx, one), _mm256_set1_ps(k->ux), mhalf);
    const __m256 fy = _mm256_fmadd_ps(_mm256_add_ps(gy, one), _mm256_set1_ps(k->uy), mhalf);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 lim = _mm256_set1_ps(FAR);
    const __m256i near =
        _mm256_castps_si256(_mm256_and_ps(_mm256_cmp_ps(_mm256_and_ps(fx, absm), lim, _CMP_LT_OQ),
                                          _mm256_cmp_ps(_mm256_and_ps(fy, absm), lim, _CMP_LT_OQ)));
    /* Far lanes: coordinates 0 (finite weights), every corner masked off below. */
    const __m256 sx = _mm256_and_ps(fx, _mm256_castsi256_ps(near));
    const __m256 sy = _mm256_and_ps(fy, _mm256_castsi256_ps(near));
    const __m256 xw = _mm256_floor_ps(sx), yn = _mm256_floor_ps(sy);
    const __m256 we = _mm256_sub_ps(sx, xw), e = _mm256_sub_ps(one, we);
    const __m256 ns = _mm256_sub_ps(sy, yn), s = _mm256_sub_ps(one, ns);
    const __m256 wt[4] = {_mm256_mul_ps(s, e), _mm256_mul_ps(s, we), _mm256_mul_ps(ns, e),
                          _mm256_mul_ps(ns, we)};
    const __m256i xi = _mm256_cvttps_epi32(xw), yi = _mm256_cvttps_epi32(yn);
    const __m256i none = _mm256_set1_epi32(-1), ione = _mm256_set1_epi32(1);
    const __m256i vw = _mm256_set1_epi32((int32_t)k->w), vh = _mm256_set1_epi32((int32_t)k->h);
    const __m256i row = _mm256_set1_epi32((int32_t)k->row), vc = _mm256_set1_epi32((int32_t)c);
    const __m256i mask8 = _mm256_set1_epi32(255);
    const int *base = (const int *)(const void *)k->src;
    __m256 v[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
    __m256 m = _mm256_setzero_ps();
    for (int q = 0; q < 4; q++) {
        const __m256i qx = (q & 1) ? _mm256_add_epi32(xi, ione) : xi;
        const __m256i qy = (q >> 1) ? _mm256_add_epi32(yi, ione) : yi;
        const __m256i in = _mm256_and_si256(
            _mm256_and_si256(
                near, _mm256_and_si256(_mm256_cmpgt_epi32(qx, none), _mm256_cmpgt_epi32(vw, qx))),
            _mm256_and_si256(_mm256_cmpgt_epi32(qy, none), _mm256_cmpgt_epi32(vh, qy)));
        const __m256i off =
            _mm256_add_epi32(_mm256_mullo_epi32(qy, row), _mm256_mullo_epi32(qx, vc));
        const __m256i g = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), base,
                                                      _mm256_and_si256(off, in), in, 1);
        for (uint32_t j = 0; j < c; j++) {
            const __m256 p =
                _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(g, (int)(8 * j)), mask8));
            v[j] = _mm256_fmadd_ps(p, wt[q], v[j]);
        }
        m = _mm256_add_ps(m, _mm256_and_ps(wt[q], _mm256_castsi256_ps(in)));
    }
    __m256i pix = _mm256_setzero_si256();
    const __m256 lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(255.0f);
    for (uint32_t j = 0; j < c; j++) {
        __m256 r = v[j];
        if (blend)
            r = _mm256_add_ps(
                _mm256_mul_ps(r, m),
                _mm256_mul_ps(_mm256_sub_ps(one, m), _mm256_set1_ps((float)k->fill[j])));
        r = _mm256_round_ps(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
        pix = _mm256_or_si256(pix, _mm256_slli_epi32(_mm256_cvttps_epi32(r), (int)(8 * j)));
    }
    store_packed(out, pix, c);
}

FMA_INLINE void bilinear_avx2_c(const warp *kp, float by, uint32_t n, uint8_t *out, int blend,
                                const uint32_t c)
{
    const warp kc = *kp, *k = &kc; /* As nearest_row_avx2_c(). */
    const __m256 cyx = _mm256_set1_ps(by * k->r10), cyy = _mm256_set1_ps(by * k->r11);
    uint32_t x = 0;
    for (; x + 8 <= n; x += 8)
        bilinear8(k, cyx, cyy, x, out + (size_t)x * c, blend, c);
    if (x < n)
        bilinear_scalar(kp, by, x, n - x, out + (size_t)x * c, blend);
}

/* One row. */
FMA_TARGET static void bilinear_avx2(const warp *k, float by, uint8_t *out, int blend)
{
    switch (k->c) {
    case 1:
        bilinear_avx2_c(k, by, k->w, out, blend, 1);
        break;
    case 2:
        bilinear_avx2_c(k, by, k->w, out, blend, 2);
        break;
    case 3:
        bilinear_avx2_c(k, by, k->w, out, blend, 3);
        break;
    default:
        bilinear_avx2_c(k, by, k->w, out, blend, 4);
        break;
    }
}

/* AVX2 with FMA (the bilinear kernel's fused operations). */
static int cpu_has_fma(void)
{
    unsigned a, b, c, d;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_FMA);
}
#endif

static void bilinear(const warp *k, uint8_t *img, size_t stride, int blend, int simd)
{
#ifdef HAVE_WARP_AVX2
    simd = simd && k->row * k->h + 8 <= (size_t)INT32_MAX && cpu_has_fma();
#endif
    for (uint32_t y = 0; y < k->h; y++) {
        const float by = k->by0 + (float)y;
        uint8_t *out = img + (size_t)y * stride;
#ifdef HAVE_WARP_AVX2
        if (simd) {
            bilinear_avx2(k, by, out, blend);
            continue;
        }
#endif
        bilinear_scalar(k, by, 0, k->w, out, blend);
    }
    (void)simd;
}

void dlc__aug_warp_with(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                        const double m[6], const uint8_t fill[4], uint32_t mode, void *scratch,
                        int simd)
{
    const size_t row = (size_t)w * c;
    uint8_t *src = scratch;
    for (uint32_t y = 0; y < h; y++)
        memcpy(src + y * row, img + (size_t)y * stride, row);
    /* The gathers read four bytes at the last pixel's offset. */
    memset(src + row * h, 0, 4);
    warp k;
    k.src = src;
    k.row = row;
    k.w = w, k.h = h, k.c = c;
    /* rescaled_theta = theta^T / [0.5 w, 0.5 h], in float32. */
    const float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
    k.r00 = (float)m[0] / hw, k.r10 = (float)m[1] / hw, k.r20 = (float)m[2] / hw;
    k.r01 = (float)m[3] / hh, k.r11 = (float)m[4] / hh, k.r21 = (float)m[5] / hh;
    /* grid_sample's unnormalize, align_corners=False: (g + 1) * size / 2 - 0.5. */
    k.ux = (float)w / 2.0f, k.uy = (float)h / 2.0f;
    k.bx0 = -(float)w * 0.5f + 0.5f, k.by0 = -(float)h * 0.5f + 0.5f;
    k.fw = (float)w, k.fh = (float)h;
    memcpy(k.fill, fill, sizeof k.fill);
    simd = simd && cpu_has_avx2();
    if (mode & DLC__AUG_WARP_BILINEAR)
        bilinear(&k, img, stride, (mode & DLC__AUG_WARP_BLEND) != 0, simd);
    else
        nearest(&k, img, stride, simd);
}

void dlc__aug_warp(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                   const double m[6], const uint8_t fill[4], uint32_t mode, void *scratch)
{
    dlc__aug_warp_with(img, stride, w, h, c, m, fill, mode, scratch, 1);
}
