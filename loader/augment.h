/* Private to loader/: the per-sample augmentation (augment.c): crop boxes drawn from the random
 * streams, the output conversion tables and the one crop-flip-convert pass. Pure functions over
 * memory, with no threads and no I/O, so that cachebench's decode-every-epoch path runs exactly
 * the loader's code and tests include this without liburing or pthreads. */
#ifndef DLCACHE_LOADER_AUGMENT_H
#define DLCACHE_LOADER_AUGMENT_H

#include "common.h"

#include <dlcache/loader.h>

#include <stddef.h>
#include <stdint.h>

/* ---- Augmentation (augment.c) ---------------------------------------------------------------- */

/** A crop region in source pixels: rows top..top+h-1, columns left..left+w-1. */
typedef struct dlc__box {
    uint32_t top, left, h, w;
} dlc__box;

/** torchvision 0.14 RandomResizedCrop.get_params on a width x height image. */
dlc__box dlc__rrc_params(uint32_t width, uint32_t height, const float scale[2],
                         const float ratio[2], dlc__rng *rng);
/** torchvision CenterCrop offsets (round half to even, like Python's round()). */
dlc__box dlc__center_box(uint32_t width, uint32_t height, uint32_t crop_w, uint32_t crop_h);
/** torchvision RandomCrop offsets: uniform top in [0, height-crop_h], then left. */
dlc__box dlc__random_box(uint32_t width, uint32_t height, uint32_t crop_w, uint32_t crop_h,
                         dlc__rng *rng);

/** The most channels of an image: 1 (gray), 3 (RGB) or 4 (RGBA, RGB + depth...). */
#define DLC__MAX_CHANNELS 4u

/** Output conversion tables, made once at open: one entry per channel and byte value, computed
 *  exactly like the reference expression ((float)x / 255 - mean) / std. */
typedef struct dlc__convert {
    uint32_t dtype;    /**< DLC_DTYPE_UINT8, FLOAT32, FLOAT16 or BFLOAT16. */
    uint32_t channels; /**< Channels per pixel, 1..DLC__MAX_CHANNELS. */
    float f32[DLC__MAX_CHANNELS][256];
    uint16_t f16[DLC__MAX_CHANNELS][256]; /**< The 16-bit outputs: binary16 bits for FLOAT16,
                                               bfloat16 bits for BFLOAT16. */
    float mean[DLC__MAX_CHANNELS], std[DLC__MAX_CHANNELS]; /**< As configured: the vector path
                                                                computes with them. */
    int simd; /**< Float outputs use an AVX2 + FMA + F16C kernel (1 or 3 channels): the CPU has it
                   and, tried on every byte value of every channel at init, it gave exactly the
                   tables' bits. */
} dlc__convert;

/** @p mean and @p std hold @p channels values. */
void dlc__convert_init(dlc__convert *cv, uint32_t dtype, uint32_t channels, const float *mean,
                       const float *std);

/** Mirror a row of @p w RGB pixels into @p out (no overlap): SSSE3 where the CPU has it. */
void dlc__flip_row_rgb(const uint8_t *in, uint8_t *out, uint32_t w);

/**
 * The one pass of the loader: copy the @p box of an interleaved uint8 image (rows @p stride bytes
 * apart), mirrored left-right when @p flip, converted as @p cv says, to @p dst: box.h x box.w x C
 * (uint8, NHWC sample) or C planes of box.h x box.w (float32/float16, NCHW sample).
 */
void dlc__crop_convert(const uint8_t *src, size_t stride, dlc__box box, int flip,
                       const dlc__convert *cv, void *dst);

/**
 * Nearest-neighbour resample for masks and label maps, whose values are class ids and must never
 * be blended: output pixel (x, y) of the @p dst_w x @p dst_h result takes source pixel
 * (floor(x0 + (x + 0.5) * w / dst_w), floor(y0 + (y + 0.5) * h / dst_h)) of the region
 * (x0, y0, w, h) of @p src (Pillow's NEAREST with a box), mirrored when @p flip. Any channel
 * count; rows of @p dst are dst_w * C bytes. No allocation.
 */
void dlc__resize_nearest(const uint8_t *src, size_t stride, uint32_t channels, double x0, double y0,
                         double w, double h, int flip, uint8_t *dst, uint32_t dst_w,
                         uint32_t dst_h);

/** The geometric transform of one view, applied to boxes: a source pixel x maps to
 *  (x - x0) * sx, y to (y - y0) * sy, on an output of out_w x out_h, mirrored when flip. */
typedef struct dlc__geom {
    double x0, y0, sx, sy;
    uint32_t out_w, out_h;
    int flip;
} dlc__geom;

/**
 * Move @p n boxes (x0, y0, x1, y1 float32 little-endian, in source pixels, at any alignment: a
 * small record's payload has none) as the image moved: map, mirror, clip to the output, and drop
 * those left without area. Writes the kept boxes to @p out (not overlapping @p in) and, when @p
 * keep is not NULL, keep[i] = 1 for each input box kept, else 0. Boxes whose coordinates are not
 * finite are dropped. Returns the number kept.
 */
uint32_t dlc__boxes_transform(const uint8_t *in, uint32_t n, const dlc__geom *g, float *out,
                              uint8_t *keep);

#endif /* DLCACHE_LOADER_AUGMENT_H */
