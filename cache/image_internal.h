/* Private to the image part (cache/image_*.c): the resampler's windowed entry
 * point, which the codec uses to resize and center-crop in one pass. */
#ifndef DLCACHE_IMAGE_INTERNAL_H
#define DLCACHE_IMAGE_INTERNAL_H

#include <dlcache/image.h>

/* Largest width or height the image part accepts, in pixels. It keeps every
 * size computation far from overflow (a row of 2^20 RGB pixels, a tap count
 * of 2^21) and is beyond any photograph a data set holds. */
#define DLC__IMAGE_MAX_SIDE (1u << 20)

/*
 * Resample the region (x, y, w, h) of @p src as if to a whole image of
 * out_w x out_h pixels, but compute only the window of that virtual output
 * that starts at (ox, oy) and has dst->width x dst->height pixels.
 *
 * Every output pixel of Pillow's resampler depends only on its own index in
 * the output, so the window is bit-identical to resizing to out_w x out_h and
 * cropping afterwards, without the work for the cropped-away pixels.
 * dlc_resize() is the case ox = oy = 0 with the window the whole output.
 */
dlc_status dlc__resize_window(const dlc_image *src, double x, double y, double w, double h,
                              uint32_t out_w, uint32_t out_h, uint32_t ox, uint32_t oy,
                              const dlc_image *dst, void *scratch, size_t scratch_size);

/* Scratch bytes dlc__resize_window() needs for the same arguments (0 when
 * they are invalid; the call itself then reports why). */
size_t dlc__resize_window_need(const dlc_image *src, double x, double y, double w, double h,
                               uint32_t out_w, uint32_t out_h, uint32_t oy, const dlc_image *dst);

#endif /* DLCACHE_IMAGE_INTERNAL_H */
