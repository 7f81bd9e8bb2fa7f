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

/* ---- aug_geom.c */

/* The inverse affine matrix of torchvision's _get_inverse_affine_matrix (in double, as Python
 * computes it): @p center relative to the image's center, @p angle clockwise in degrees. */
void dlc__aug_inverse_affine(const double center[2], double angle, const double translate[2],
                             double scale, const double shear[2], double m[6]);
/* Resample with the inverse matrix @p m as torchvision's tensor affine/rotate does (nearest,
 * fill outside); scratch: w * h * c bytes. */
void dlc__aug_warp(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                   const double m[6], const uint8_t fill[4], void *scratch);

#endif /* DLCACHE_LOADER_AUG_OPS_H */
