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

/** Output conversion tables, made once at open: one entry per channel and byte value, computed
 *  exactly like the reference expression ((float)x / 255 - mean) / std. */
typedef struct dlc__convert {
    uint32_t dtype;    /**< A ::dlc_dtype. */
    uint32_t channels; /**< Channels per pixel. */
    float f32[3][256];
    uint16_t f16[3][256];
    float mean[3], std[3]; /**< As configured: the vector path computes with them. */
    int simd; /**< Float outputs use the AVX2 + FMA + F16C kernel: the CPU has it and, tried on
                   every byte value of every channel at init, it gave exactly the tables' bits. */
} dlc__convert;

void dlc__convert_init(dlc__convert *cv, uint32_t dtype, uint32_t channels, const float mean[3],
                       const float std[3]);

/** Mirror a row of @p w RGB pixels into @p out (no overlap): SSSE3 where the CPU has it. */
void dlc__flip_row_rgb(const uint8_t *in, uint8_t *out, uint32_t w);

/**
 * The one pass of the loader: copy the @p box of an interleaved uint8 image (rows @p stride bytes
 * apart), mirrored left-right when @p flip, converted as @p cv says, to @p dst: box.h x box.w x C
 * (uint8, NHWC sample) or C planes of box.h x box.w (float32/float16, NCHW sample).
 */
void dlc__crop_convert(const uint8_t *src, size_t stride, dlc__box box, int flip,
                       const dlc__convert *cv, void *dst);

#endif /* DLCACHE_LOADER_AUGMENT_H */
