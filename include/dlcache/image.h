/**
 * @file image.h
 * @brief JPEG (libjpeg-turbo) and PNG (libpng) decode and encode, and the
 *        resampling that the builder and the loader share.
 *
 * The resize is an antialiased separable filter computed like Pillow's
 * BILINEAR resample (the filter torchvision's Resize uses on PIL images): a
 * triangle kernel whose support grows with the reduction factor, coefficients
 * normalised per output pixel and applied in fixed point, horizontal pass then
 * vertical pass. So a store built by dlcache looks like Resize(N) +
 * CenterCrop(N) in torchvision, and a random-resized-crop in the loader looks
 * like torchvision's RandomResizedCrop.
 *
 * PNG is the lossless encoding of image fields (format version 2): masks and
 * label maps keep their class ids bit for bit. Images of 1, 3 or 4 channels
 * (gray, RGB, RGBA) are stored and decoded with their channel count.
 *
 * A ::dlc_codec is a per-thread context: it owns the libjpeg-turbo handles and
 * scratch buffers that grow to the largest image seen and are then reused, so
 * a steady stream of images allocates nothing. It must not be shared between
 * threads. The free functions without a codec (dlc_resize...) allocate nothing
 * and work in the caller's buffers.
 *
 * Errors: DLC_EDECODE (not a JPEG or PNG, truncated, unsupported), DLC_EINVAL,
 * -ENOMEM. dlc_errmsg() says what libjpeg-turbo or libpng said.
 */
#ifndef DLCACHE_IMAGE_H
#define DLCACHE_IMAGE_H

#include <dlcache/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Per-thread JPEG, PNG and resampling context. */
typedef struct dlc_codec dlc_codec;

/** An interleaved uint8 image: gray (1 channel), RGB (3) or RGBA (4). */
typedef struct dlc_image {
    uint8_t *data;     /**< First pixel (row 0, column 0, channel 0). */
    uint32_t width;    /**< Pixels. */
    uint32_t height;   /**< Pixels. */
    uint32_t channels; /**< 3 (RGB) from the JPEG functions unless asked otherwise; 1, 3 or 4. */
    size_t stride;     /**< Bytes from one row to the next (>= width * channels). */
} dlc_image;

/**
 * @brief Create a codec. Its JPEG encoder and scratch buffers are made on first use.
 * @param[out] out The codec, or NULL on failure; release with dlc_codec_destroy().
 * @return DLC_OK, DLC_EINVAL (@p out is NULL), -ENOMEM (also when libjpeg-turbo cannot make its
 *         decompressor).
 */
DLC_API dlc_status dlc_codec_create(dlc_codec **out);
/** Free @p c and its buffers.
 *  @param[in] c A codec from dlc_codec_create(), or NULL (nothing happens). */
DLC_API void dlc_codec_destroy(dlc_codec *c);

/**
 * @brief Read a JPEG's dimensions and its number of colour components without
 *        decoding it: 1 (grayscale), 3 (YCbCr or RGB) or 4 (CMYK, YCCK).
 * @param[in] c The calling thread's codec.
 * @param[in] jpeg The JPEG's bytes; not retained.
 * @param[in] size Bytes at @p jpeg.
 * @param[out] width Pixels; may be NULL. Written on DLC_OK only.
 * @param[out] height Pixels; may be NULL. Written on DLC_OK only.
 * @param[out] components 1, 3 or 4 as above; may be NULL. Written on DLC_OK only.
 * @return As dlc_jpeg_info().
 */
DLC_API dlc_status dlc_jpeg_header(dlc_codec *c, const void *jpeg, size_t size, uint32_t *width,
                                   uint32_t *height, uint32_t *components);

/**
 * @brief dlc_jpeg_decode() with the channels of the result chosen: 3 gives
 *        exactly what dlc_jpeg_decode() gives; 1 gives gray: the stored
 *        samples of a grayscale JPEG, the luma (Y) that libjpeg-turbo decodes
 *        from a YCbCr one, and Pillow's L = (299 R + 587 G + 114 B) / 1000 of
 *        the RGB of an RGB or CMYK one (what a 1-channel image field stores).
 * @param[in] c As dlc_jpeg_decode().
 * @param[in] jpeg As dlc_jpeg_decode().
 * @param[in] size As dlc_jpeg_decode().
 * @param[in] channels 1 or 3.
 * @param[in] min_width As dlc_jpeg_decode().
 * @param[in] min_height As dlc_jpeg_decode().
 * @param[out] out Pixels in the codec's scratch buffer: valid until the next call on @p c.
 * @return DLC_OK, DLC_EDECODE, DLC_EINVAL (other channels), -ENOMEM.
 */
DLC_API dlc_status dlc_jpeg_decode_as(dlc_codec *c, const void *jpeg, size_t size,
                                      uint32_t channels, uint32_t min_width, uint32_t min_height,
                                      dlc_image *out);

/**
 * @brief dlc_jpeg_decode_resize() to @p channels channels (1 or 3, as in
 *        dlc_jpeg_decode_as()): the builder's transform for 1-channel stores.
 * @param[in] c As dlc_jpeg_decode_resize().
 * @param[in] jpeg As dlc_jpeg_decode_resize().
 * @param[in] size As dlc_jpeg_decode_resize().
 * @param[in] channels 1 or 3.
 * @param[in] short_side As dlc_jpeg_decode_resize().
 * @param[in] center_crop As dlc_jpeg_decode_resize().
 * @param[out] out As dlc_jpeg_decode_resize().
 * @return DLC_OK, DLC_EDECODE, DLC_EINVAL (other channels, or a bad short side), -ENOMEM.
 */
DLC_API dlc_status dlc_jpeg_decode_resize_as(dlc_codec *c, const void *jpeg, size_t size,
                                             uint32_t channels, uint32_t short_side,
                                             int center_crop, dlc_image *out);

/**
 * @brief Encode RGB pixels as a baseline JPEG (4:2:0 subsampling for quality
 *        < 90, 4:4:4 from 90).
 * @param[in] c The calling thread's codec.
 * @param[in] img The pixels: 3 channels (RGB), or 1 (gray, encoded as a grayscale JPEG).
 * @param[in] quality 1..100.
 * @param[out] jpeg The encoded bytes, in the codec's scratch: valid until the
 *             next call on @p c.
 * @param[out] size Bytes at *@p jpeg.
 * @return DLC_OK, DLC_EINVAL (a NULL argument, other channels, bad geometry, a quality outside
 *         1..100), -ENOMEM.
 */
DLC_API dlc_status dlc_jpeg_encode(dlc_codec *c, const dlc_image *img, int quality,
                                   const uint8_t **jpeg, size_t *size);

/**
 * @brief Read a PNG's dimensions and the channels dlc_png_decode() gives,
 *        without decoding it.
 * @param[in] c The calling thread's codec.
 * @param[in] png The PNG's bytes; not retained.
 * @param[in] size Bytes at @p png.
 * @param[out] width Pixels; may be NULL. Written on DLC_OK only.
 * @param[out] height Pixels; may be NULL. Written on DLC_OK only.
 * @param[out] channels 1 (gray), 3 (RGB, or a palette without transparency) or
 *             4 (RGBA, gray with alpha, or a palette with transparency); may be NULL.
 * @return DLC_OK, DLC_EDECODE (not a PNG, a damaged header, a side over 2^20).
 */
DLC_API dlc_status dlc_png_info(dlc_codec *c, const void *png, size_t size, uint32_t *width,
                                uint32_t *height, uint32_t *channels);

/**
 * @brief Decode a PNG into 8-bit samples, keeping its channels: gray stays
 *        1 channel, RGB 3, RGBA 4 (what the store's PNG fields hold, bit for
 *        bit). Other PNGs are converted: below 8 bits expanded, 16 bits
 *        reduced to their high byte, palettes expanded to RGB (RGBA with
 *        transparency), gray with alpha expanded to RGBA.
 * @param[in] c The calling thread's codec.
 * @param[in] png The PNG's bytes; not retained.
 * @param[in] size Bytes at @p png.
 * @param[out] out Pixels in the codec's scratch buffer: valid until the next call on @p c.
 * @return DLC_OK, DLC_EDECODE (libpng's reason: truncated, bad CRC, too large), -ENOMEM.
 */
DLC_API dlc_status dlc_png_decode(dlc_codec *c, const void *png, size_t size, dlc_image *out);

/**
 * @brief Decode a mask or label map: a palette PNG gives its palette indices, which are the
 *        class ids (Pascal VOC and Cityscapes masks are stored so), in one channel; any other
 *        PNG decodes as dlc_png_decode() decodes it.
 * @param[in] c As dlc_png_decode().
 * @param[in] png As dlc_png_decode().
 * @param[in] size As dlc_png_decode().
 * @param[out] out Pixels in the codec's scratch buffer: valid until the next call on @p c.
 * @return DLC_OK, DLC_EDECODE, -ENOMEM.
 */
DLC_API dlc_status dlc_png_decode_ids(dlc_codec *c, const void *png, size_t size, dlc_image *out);

/**
 * @brief Encode @p img (1, 3 or 4 channels: gray, RGB, RGBA) as an 8-bit
 *        PNG. Lossless. The bytes depend only on the pixels (fixed zlib level
 *        and filters), so stores are byte-identical at any thread count.
 * @param[in] c The calling thread's codec.
 * @param[in] img The pixels.
 * @param[out] png The encoded bytes, in the codec's scratch: valid until the
 *             next call on @p c.
 * @param[out] size Bytes at *@p png.
 * @return DLC_OK, DLC_EINVAL (bad geometry or channels), -ENOMEM.
 */
DLC_API dlc_status dlc_png_encode(dlc_codec *c, const dlc_image *img, const uint8_t **png,
                                  size_t *size);

/**
 * @brief Scratch bytes dlc_resize() needs to map a @p src_w x @p src_h region
 *        to @p dst_w x @p dst_h with @p channels channels.
 *        @p src_w and @p src_h are the region's size rounded up (ceil(w),
 *        ceil(h)) or anything larger, such as the whole source image, so one
 *        bound computed from the largest source serves every crop of it.
 * @param[in] src_w Width of the source region, rounded up (or larger).
 * @param[in] src_h Height of the source region, rounded up (or larger).
 * @param[in] dst_w Width of the result.
 * @param[in] dst_h Height of the result.
 * @param[in] channels 1 to 4.
 * @return Bytes, or 0 for a zero size, a side above 2^20 or channels not
 *         in 1..4.
 */
DLC_API size_t dlc_resize_scratch_bound(uint32_t src_w, uint32_t src_h, uint32_t dst_w,
                                        uint32_t dst_h, uint32_t channels);

/**
 * @brief Antialiased bilinear resample (Pillow's BILINEAR) of the region
 *        (@p x, @p y, @p w, @p h) of @p src, given in source pixels and
 *        possibly fractional, to all of @p dst. No allocation.
 *        The result is bit-identical to Pillow 9.4's
 *        Image.resize((dst w, dst h), BILINEAR, box=(x, y, x + w, y + h)),
 *        the box taken in single precision as Pillow does. @p src and @p dst
 *        have the same channel count, 1 to 4 (3 in dlcache).
 * @param[in] src The source image.
 * @param[in] x Left of the region, in source pixels.
 * @param[in] y Top of the region, in source pixels.
 * @param[in] w Width of the region, in source pixels.
 * @param[in] h Height of the region, in source pixels.
 * @param[in] dst The result: its width, height and stride say where; its pixels are written.
 * @param[in] scratch At least dlc_resize_scratch_bound() bytes, 16-byte aligned.
 * @param[in] scratch_size Bytes at @p scratch.
 * @return DLC_OK or DLC_EINVAL (region outside src, empty sizes, small scratch).
 * Thread safety: reentrant.
 */
DLC_API dlc_status dlc_resize(const dlc_image *src, double x, double y, double w, double h,
                              const dlc_image *dst, void *scratch, size_t scratch_size);

/** Where the builder's transform puts an image: dlc_jpeg_decode_resize() resizes a source image
 *  to resized_w x resized_h and keeps the window of width x height pixels at (x, y) of it. */
typedef struct dlc_resize_geometry {
    uint32_t resized_w; /**< The shorter side is the short side asked for; the longer one keeps
                             the aspect, truncated (torchvision's Resize(N)). */
    uint32_t resized_h; /**< The other side of the resized image. */
    uint32_t x;         /**< Left of the kept window: torchvision's CenterCrop offset, or 0. */
    uint32_t y;         /**< Top of the kept window. */
    uint32_t width;     /**< Of the window: the result's size (resized_w without a crop). */
    uint32_t height;    /**< Of the window (resized_h without a crop). */
} dlc_resize_geometry;

/**
 * @brief The geometry dlc_jpeg_decode_resize() gives a @p src_w x @p src_h image resized to the
 *        short side @p short_side, center-cropped to short_side x short_side when
 *        @p center_crop. Masks resized with dlc_resize_nearest() to this geometry align pixel for
 *        pixel with their image.
 * @param[in] src_w The source image's width.
 * @param[in] src_h The source image's height.
 * @param[in] short_side The shorter side after the resize.
 * @param[in] center_crop Non-zero: crop to short_side x short_side.
 * @param[out] out Filled; on DLC_EINVAL its resized size says what the resize would give.
 * @return DLC_OK or DLC_EINVAL (a zero size, a short side above 2^20, or a resized side that is 0
 *         or above 2^20).
 * Thread safety: reentrant.
 */
DLC_API dlc_status dlc_resize_geometry_get(uint32_t src_w, uint32_t src_h, uint32_t short_side,
                                           int center_crop, dlc_resize_geometry *out);

/**
 * @brief Nearest-neighbour resample of all of @p src to a virtual @p out_w x @p out_h image, of
 *        which the window at (@p x, @p y) of dst's width x height is written to @p dst. Samples
 *        are copied, never blended: class ids stay class ids. Bit-identical to Pillow 9.4's
 *        Image.resize((out_w, out_h), NEAREST).crop((x, y, x + w, y + h)), which is
 *        torchvision's Resize(N, NEAREST) + CenterCrop(N) on a PIL mask when the geometry comes
 *        from dlc_resize_geometry_get(). No allocation.
 * @param[in] src 1 to 4 channels.
 * @param[in] out_w Width of the virtual resized image.
 * @param[in] out_h Height of the virtual resized image.
 * @param[in] x Left of the window in the virtual image.
 * @param[in] y Top of the window in the virtual image.
 * @param[in] dst The same channels; the window must lie inside out_w x out_h. Its pixels are
 *            written.
 * @return DLC_OK or DLC_EINVAL (channels, empty sizes, a window outside the output).
 * Thread safety: reentrant.
 */
DLC_API dlc_status dlc_resize_nearest(const dlc_image *src, uint32_t out_w, uint32_t out_h,
                                      uint32_t x, uint32_t y, const dlc_image *dst);

/* ---- Experimental ----------------------------------------------------------------------------
 * Shorthands of the one way to each: dlc_jpeg_header() (with NULL components) for dlc_jpeg_info(),
 * dlc_jpeg_decode_as() and dlc_jpeg_decode_resize_as() (with 3 channels) for dlc_jpeg_decode()
 * and dlc_jpeg_decode_resize().
 * Declared only when the program defines DLC_EXPERIMENTAL before including this header (zstd's
 * ZSTD_STATIC_LINKING_ONLY is the model; the tree's own build defines it): exported, in the
 * DLCACHE_EXPERIMENTAL node of the symbol map, but outside the frozen ABI: they may change or go
 * in any release (CONTRIBUTING.md, "The ABI"). */
#ifdef DLC_EXPERIMENTAL

/**
 * @brief Read a JPEG's dimensions without decoding it.
 * @param[in] c The calling thread's codec.
 * @param[in] jpeg The JPEG's bytes; not retained.
 * @param[in] size Bytes at @p jpeg.
 * @param[out] width Pixels; may be NULL. Written on DLC_OK only.
 * @param[out] height Pixels; may be NULL. Written on DLC_OK only.
 * @return DLC_OK, DLC_EDECODE (not a JPEG, a damaged header, an image too large to decode),
 *         DLC_EINVAL (@p c is NULL), -ENOMEM.
 */
DLC_API dlc_status dlc_jpeg_info(dlc_codec *c, const void *jpeg, size_t size, uint32_t *width,
                                 uint32_t *height);

/**
 * @brief Decode a JPEG to RGB. Grayscale and CMYK/YCCK images become RGB.
 *        When @p min_width and @p min_height are non-zero, libjpeg-turbo's DCT
 *        scaling (1/2, 1/4, 1/8) is used for the largest reduction that keeps
 *        the decoded image at least that large; pass 0, 0 for full size.
 * @param[in] c The calling thread's codec.
 * @param[in] jpeg The JPEG's bytes; not retained.
 * @param[in] size Bytes at @p jpeg.
 * @param[in] min_width Smallest width wanted after DCT scaling, or 0.
 * @param[in] min_height Smallest height wanted after DCT scaling, or 0.
 * @param[out] out Pixels in the codec's scratch buffer: valid until the next
 *             call on @p c.
 * @return DLC_OK, DLC_EDECODE, -ENOMEM.
 */
DLC_API dlc_status dlc_jpeg_decode(dlc_codec *c, const void *jpeg, size_t size, uint32_t min_width,
                                   uint32_t min_height, dlc_image *out);

/**
 * @brief The heavy transform of the builder: decode, resize so the shorter
 *        side is @p short_side (aspect kept, torchvision's rounding), then
 *        optionally a center crop of short_side x short_side (torchvision's
 *        CenterCrop offsets). An image at least twice the resize target
 *        on both axes is decoded with the largest DCT reduction (1/2, 1/4,
 *        1/8) that keeps it at least as large as the target, then resized
 *        with the antialiasing filter; smaller images are decoded at full
 *        size and the result is bit-identical to torchvision on PIL. With
 *        DCT scaling the result differs slightly from torchvision on the
 *        full-size image: 48.6 dB mean PSNR (32.5 dB minimum) on the 12 MATE
 *        photographs (tests/e2e/image_psnr.sh).
 * @param[in] c The calling thread's codec.
 * @param[in] jpeg The JPEG's bytes; not retained.
 * @param[in] size Bytes at @p jpeg.
 * @param[in] short_side The shorter side after the resize, 1..2^20 pixels.
 * @param[in] center_crop Non-zero: keep the centered short_side x short_side square.
 * @param[out] out Result in the codec's scratch: valid until the next call on @p c.
 * @return DLC_OK, DLC_EDECODE, DLC_EINVAL (a short side of 0 or above 2^20), -ENOMEM.
 */
DLC_API dlc_status dlc_jpeg_decode_resize(dlc_codec *c, const void *jpeg, size_t size,
                                          uint32_t short_side, int center_crop, dlc_image *out);

#endif /* DLC_EXPERIMENTAL */

#ifdef __cplusplus
}
#endif
#endif /* DLCACHE_IMAGE_H */
