/* Private to loader/augment/: the ops' kernels on an interleaved uint8 image in place (img, rows
 * stride bytes apart, w x h pixels of c channels), called by aug_apply.c after it checked the
 * parameters. aug_color.c and aug_geom.c say how each follows torchvision's tensor path. */
#ifndef DLCACHE_LOADER_AUG_OPS_H
#define DLCACHE_LOADER_AUG_OPS_H

#include "aug_internal.h"

/* The most channels of an image (as loader/augment.h's DLC__MAX_CHANNELS). */
#define DLC__AUG_MAX_CHANNELS 4u

/* Round half to even (torch.round, grid_sample's nearest) of |v| < 2^22 without a libm call, so
 * that loops vectorize: adding and subtracting 1.5 * 2^23 leaves v rounded in the default
 * rounding mode (ISO C mode keeps the compiler from folding the two). */
static inline float dlc__aug_round_even(float v)
{
    const float big = 12582912.0f; /* 1.5 * 2^23 */
    return (v + big) - big;
}

/* ---- aug_color.c: 1 or 3 channels (the blend ops and invert/posterize/solarize/autocontrast/
 * equalize/blur take any count up to DLC__AUG_MAX_CHANNELS). */
/* The blends of _blend(): r * x + q * other in float32, clamped and truncated; r is the factor,
 * q the weight of the other image, 1 - factor as torch computes it (dlc__aug_blend_weights). */
void dlc__aug_blend_const(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, float r,
                          float q, float other);
void dlc__aug_brightness(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, float r,
                         float q);
void dlc__aug_contrast(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, float r,
                       float q);
void dlc__aug_saturation(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, float r,
                         float q);
void dlc__aug_hue(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, double factor);
void dlc__aug_grayscale(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c);
void dlc__aug_posterize(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                        uint32_t bits);
void dlc__aug_solarize(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                       double threshold);
/* aug_timm.c: timm's SolarizeAdd, values below @p threshold raised by @p addition (an integer
 * in 0..255), saturating at 255. */
void dlc__aug_solarize_add(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                           double addition, double threshold);
void dlc__aug_invert(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c);
void dlc__aug_autocontrast(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c);
void dlc__aug_equalize(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c);
/* Scratch: w * h * c bytes. */
void dlc__aug_sharpness(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, float r,
                        float q, void *scratch);
/* Odd kernel sides <= DLC__AUG_MAX_KERNEL with side / 2 < the image's side; scratch: w * h * c
 * floats, aligned for float. */
void dlc__aug_blur(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, uint32_t kx,
                   uint32_t ky, double sx, double sy, void *scratch);

/* ---- aug_color_avx2.c: vector kernels of aug_color.c's loops, lane by lane the same float32
 * operations, on x86 CPUs with AVX2 (dlc__aug_have_avx2()). Each does the bulk of a row and
 * returns how many values (or pixels) it did; the caller's scalar loop does the rest. Elsewhere
 * they are stubs that do nothing, and dlc__aug_have_avx2() is 0. */
#if defined(__x86_64__) || defined(__i386__)
#define DLC__AUG_X86 1
/* Whether the CPU runs the AVX2 kernels. */
int dlc__aug_have_avx2(void);
/* n values of c channels (1..4) in place: a[k] * x + b[k] (@p sub_first 0) or (x - a[k]) * b[k]
 * (1), k the value's channel, clamped to [0, 255] and truncated; returns a multiple of 96. */
size_t dlc__aug_map_avx2(uint8_t *p, size_t n, uint32_t c, int sub_first,
                         const float a[DLC__AUG_MAX_CHANNELS],
                         const float b[DLC__AUG_MAX_CHANNELS]);
/* Folds the first values (a multiple of 96) of n into the running minima and maxima of each of
 * the 96 positions of a step (value i into lo[i % 96], hi[i % 96]); returns how many it read. */
size_t dlc__aug_minmax_avx2(const uint8_t *p, size_t n, uint8_t lo[96], uint8_t hi[96]);
/* Inverts the values >= @p from (none when it is above 255); returns how many it did. */
size_t dlc__aug_solarize_avx2(uint8_t *p, size_t n, uint32_t from);
/* RGB rows of w pixels: they return the pixels done, a multiple of 8. */
size_t dlc__aug_gray_sum_avx2(const uint8_t *p, uint32_t w, uint64_t *sum);
size_t dlc__aug_grayscale_avx2(uint8_t *p, uint32_t w);
size_t dlc__aug_saturation_avx2(uint8_t *p, uint32_t w, float r, float q);
size_t dlc__aug_hue_avx2(uint8_t *p, uint32_t w, float hf);
/* Sharpness' interior values of one row of @p row values from c on, out of the original rows
 * up, mid and dn; returns the first value it did not do. */
size_t dlc__aug_sharpness_avx2(const uint8_t *up, const uint8_t *mid, const uint8_t *dn,
                               uint8_t *out, size_t row, uint32_t c, float r, float q);
#else
#define DLC__AUG_X86 0
static inline int dlc__aug_have_avx2(void)
{
    return 0;
}
#define dlc__aug_map_avx2(p, n, c, s, a, b) ((void)(a), (void)(b), (size_t)0)
#define dlc__aug_minmax_avx2(p, n, lo, hi) ((void)(lo), (void)(hi), (size_t)0)
#define dlc__aug_solarize_avx2(p, n, from) ((void)(from), (size_t)0)
#define dlc__aug_gray_sum_avx2(p, w, sum) ((size_t)0)
#define dlc__aug_grayscale_avx2(p, w) ((size_t)0)
#define dlc__aug_saturation_avx2(p, w, r, q) ((size_t)0)
#define dlc__aug_hue_avx2(p, w, hf) ((size_t)0)
#define dlc__aug_sharpness_avx2(up, mid, dn, out, row, c, r, q) ((size_t)(c))
#endif

/* ---- aug_geom.c */

/* The inverse affine matrix of torchvision's _get_inverse_affine_matrix (in double, as Python
 * computes it): @p center relative to the image's center, @p angle clockwise in degrees. */
void dlc__aug_inverse_affine(const double center[2], double angle, const double translate[2],
                             double scale, const double shear[2], double m[6]);
/* dlc__aug_warp()'s mode bits. Without DLC__AUG_WARP_BILINEAR, nearest. */
enum {
    DLC__AUG_WARP_BILINEAR = 1u, /* Bilinear (InterpolationMode.BILINEAR). */
    DLC__AUG_WARP_BLEND = 2u,    /* Bilinear: a fill was given (not torchvision's fill=None), so
                                    it is blended in by the outside's weight; without it the
                                    outside counts as 0 (grid_sample's zero padding). Nearest
                                    always takes the fill outside (fill=None is a fill of 0). */
};

/* Resample with the inverse matrix @p m as torchvision's tensor affine/rotate does (@p mode:
 * DLC__AUG_WARP_*); scratch: w * h * c + 4 bytes. */
void dlc__aug_warp(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                   const double m[6], const uint8_t fill[4], uint32_t mode, void *scratch);
/* dlc__aug_warp() with its vector kernels (@p simd 1, where the CPU has AVX2) or without them
 * (0), for the tests that check that both give the same bytes. */
void dlc__aug_warp_with(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                        const double m[6], const uint8_t fill[4], uint32_t mode, void *scratch,
                        int simd);

#endif /* DLCACHE_LOADER_AUG_OPS_H */
