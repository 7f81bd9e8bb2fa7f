/* Private to the image part (cache/image/image_*.c): the resampler's windowed entry
 * point, which the codec uses to resize and center-crop in one pass, and the
 * codec's buffers, which the PNG functions (image_png.c) share. */
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

/* A buffer that grows to the largest size asked for and is then reused. */
typedef struct dlc__grow_buf {
    uint8_t *p;
    size_t cap;
} dlc__grow_buf;

/* Make @p b hold at least @p need bytes, 64-byte aligned. Its contents are not kept when it
 * grows. DLC_OK or -ENOMEM with a message. */
dlc_status dlc__buf_reserve(dlc__grow_buf *b, size_t need);

/* The codec's buffer of decoded pixels (the result of the decode functions) and the one of PNG
 * output: each valid until the next call on the codec. */
dlc__grow_buf *dlc__codec_pixels(dlc_codec *c);
dlc__grow_buf *dlc__codec_png(dlc_codec *c);

/* dlc_jpeg_decode_resize_as() in two steps, so that a caller can give the result a place of its
 * own (the builder: the record it goes into, build_item.c) instead of the codec's buffer and a
 * copy: what one JPEG's decode + resize will make, from its header; then the decode and resize
 * into that place. */
typedef struct dlc__jpeg_resize {
    int src_width, src_height;  /* the JPEG's, from its header */
    int subsamp, colorspace;    /* TurboJPEG's TJSAMP_* and TJCS_* of the JPEG */
    int scale_num, scale_denom; /* the DCT reduction the decode uses */
    uint32_t channels;          /* of the result: 1 or 3 */
    dlc_resize_geometry g;      /* the resize and its crop: the result is g.width x g.height */
} dlc__jpeg_resize;

/* Read @p jpeg's header and plan its decode + resize as dlc_jpeg_decode_resize_as() does. DLC_OK,
 * DLC_EINVAL (channels, short side) or DLC_EDECODE (the header), with a message. */
dlc_status dlc__jpeg_resize_plan(dlc_codec *c, const void *jpeg, size_t size, uint32_t channels,
                                 uint32_t short_side, int center_crop, dlc__jpeg_resize *plan);

/* Bytes of the result of @p plan, its rows packed. */
static inline size_t dlc__jpeg_resize_bytes(const dlc__jpeg_resize *plan)
{
    return (size_t)plan->g.width * plan->g.height * plan->channels;
}

/* Decode the JPEG that @p plan was made from (the same bytes) and resize it into @p dst, which
 * holds dlc__jpeg_resize_bytes() bytes; *out describes it (rows packed). Bit-identical to
 * dlc_jpeg_decode_resize_as(). DLC_OK, DLC_EDECODE or -ENOMEM, with a message. */
dlc_status dlc__jpeg_resize_run(dlc_codec *c, const void *jpeg, size_t size,
                                const dlc__jpeg_resize *plan, uint8_t *dst, dlc_image *out);

/* The most pixels a decode accepts: Pillow refuses images above 2 x Image.MAX_IMAGE_PIXELS as
 * decompression bombs; a 12-byte header claiming 65535 x 65535 must not make us allocate
 * 12 GiB either. */
#define DLC__IMAGE_MAX_PIXELS ((uint64_t)2 * 89478485u)

#endif /* DLCACHE_IMAGE_INTERNAL_H */
