/*
 * PNG decode and encode through libpng 1.6: the lossless encoding of image fields, for masks and
 * label maps whose class ids must come back bit for bit.
 *
 * libpng reports errors by longjmp from its error callback. The callback records the message for
 * dlc_errmsg() first, so that after the jump nothing needs to be read back from locals the jump
 * may have left indeterminate (C11 7.13.2.1): the functions that call setjmp keep only what was
 * set before it (the libpng handles and the read-only context), and do the work in helpers.
 *
 * Like the JPEG functions, the results live in the codec's buffers and are reused from call to
 * call, so a stream of images of similar sizes allocates nothing after the first (libpng's own
 * read and write structures are made per call: a few KiB, small next to a decode).
 */
#include "common.h"
#include "image_internal.h"

#include <errno.h>
#include <png.h>
#include <string.h>

/* zlib level of the encoder: masks and label maps, the usual content of PNG fields, compress
 * almost as well at 3 as at the default 6, about twice as fast; a fixed level (like libpng's
 * fixed filter heuristics) keeps the bytes a pure function of the pixels. */
#define PNG_ZLIB_LEVEL 3

/* What the error callback needs to word its message; never written after setjmp. */
typedef struct png_ctx {
    const char *what; /* "PNG decode", "PNG encode" */
    size_t size;      /* Bytes of the PNG being read (0 when encoding). */
} png_ctx;

/* Memory source of a decode. */
typedef struct png_src {
    const uint8_t *data;
    size_t size;
    size_t pos;
} png_src;

/* Memory sink of an encode: the codec's PNG buffer, sized in advance to a bound. */
typedef struct png_sink {
    uint8_t *p;
    size_t cap;
    size_t len;
} png_sink;

static void on_error(png_structp png, png_const_charp msg)
{
    const png_ctx *ctx = png_get_error_ptr(png);
    if (ctx->size)
        dlc__errorf(DLC_EDECODE, "%s (%zu bytes): %s", ctx->what, ctx->size, msg);
    else
        dlc__errorf(DLC_EINVAL, "%s: %s", ctx->what, msg);
    png_longjmp(png, 1);
}

/* Warnings (a bad ancillary chunk, an unknown profile) leave the pixels intact. */
static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void on_read(png_structp png, png_bytep out, size_t n)
{
    png_src *src = png_get_io_ptr(png);
    if (n > src->size - src->pos)
        png_error(png, "truncated: the data ends inside the image");
    memcpy(out, src->data + src->pos, n);
    src->pos += n;
}

static void on_write(png_structp png, png_bytep in, size_t n)
{
    png_sink *sink = png_get_io_ptr(png);
    if (n > sink->cap - sink->len)
        png_error(png, "output larger than its bound");
    memcpy(sink->p + sink->len, in, n);
    sink->len += n;
}

static void on_flush(png_structp png)
{
    (void)png;
}

/* Read the header and choose the transformations that give 8-bit gray, RGB or RGBA; with
 * @p ids, a palette image gives its indices in one channel. Returns the channels of the result.
 * May longjmp. */
static uint32_t read_header(png_structp png, png_infop info, int ids, uint32_t *w, uint32_t *h)
{
    png_read_info(png, info);
    const uint32_t width = png_get_image_width(png, info);
    const uint32_t height = png_get_image_height(png, info);
    if ((uint64_t)width * height > DLC__IMAGE_MAX_PIXELS)
        png_error(png, "too many pixels to decode");
    const int color = png_get_color_type(png, info);
    const int trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
    *w = width;
    *h = height;
    if (ids && color == PNG_COLOR_TYPE_PALETTE) {
        /* The indices themselves, one byte each (palettes of 1, 2 or 4 bits unpacked). */
        png_set_packing(png);
        return 1;
    }
    /* Expand palettes, gray below 8 bits and tRNS transparency to 8-bit samples. */
    png_set_expand(png);
    png_set_strip_16(png);
    uint32_t channels;
    if (color == PNG_COLOR_TYPE_GRAY && !trns) {
        channels = 1;
    } else if ((color == PNG_COLOR_TYPE_RGB || color == PNG_COLOR_TYPE_PALETTE) && !trns) {
        channels = 3;
    } else {
        /* Gray with alpha (or transparency) has no 2-channel image here: RGBA it is. */
        if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA)
            png_set_gray_to_rgb(png);
        channels = 4;
    }
    return channels;
}

static png_structp read_struct(const png_ctx *ctx)
{
    return png_create_read_struct(PNG_LIBPNG_VER_STRING, (png_voidp)ctx, on_error, on_warning);
}

/* Decode the rows of a PNG whose header was read into @p out's buffer. May longjmp. */
static dlc_status read_rows(png_structp png, png_infop info, dlc_codec *c, uint32_t channels,
                            dlc_image *out)
{
    const int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const uint32_t w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    const size_t stride = (size_t)w * channels;
    if (png_get_rowbytes(png, info) != stride)
        png_error(png, "unexpected row size after the conversion to 8-bit samples");
    dlc__grow_buf *buf = dlc__codec_pixels(c);
    const dlc_status rc = dlc__buf_reserve(buf, stride * h);
    if (rc < 0)
        return rc;
    /* With interlacing each pass adds pixels to rows that the earlier passes filled. */
    for (int pass = 0; pass < passes; pass++)
        for (uint32_t y = 0; y < h; y++)
            png_read_row(png, buf->p + stride * y, NULL);
    png_read_end(png, NULL);
    *out = (dlc_image){buf->p, w, h, channels, stride};
    return DLC_OK;
}

static dlc_status check_input(dlc_codec *c, const void *png, size_t size, const char *what)
{
    if (!c || (!png && size))
        return dlc__errorf(DLC_EINVAL, "%s: NULL codec or data", what);
    if (size < 8 || png_sig_cmp(png, 0, 8) != 0)
        return dlc__errorf(DLC_EDECODE, "%s (%zu bytes): not a PNG (no PNG signature)", what, size);
    return DLC_OK;
}

dlc_status dlc_png_info(dlc_codec *c, const void *png, size_t size, uint32_t *width,
                        uint32_t *height, uint32_t *channels)
{
    const png_ctx ctx = {"PNG header", size};
    dlc_status rc = check_input(c, png, size, ctx.what);
    if (rc < 0)
        return rc;
    png_src src = {png, size, 0};
    png_structp p = read_struct(&ctx);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!info) {
        png_destroy_read_struct(&p, NULL, NULL);
        return dlc__errorf(-ENOMEM, "%s: out of memory", ctx.what);
    }
    if (setjmp(png_jmpbuf(p))) {
        png_destroy_read_struct(&p, &info, NULL);
        return DLC_EDECODE; /* on_error recorded the message. */
    }
    png_set_user_limits(p, DLC__IMAGE_MAX_SIDE, DLC__IMAGE_MAX_SIDE);
    png_set_read_fn(p, &src, on_read);
    uint32_t w, h;
    const uint32_t ch = read_header(p, info, 0, &w, &h);
    png_destroy_read_struct(&p, &info, NULL);
    if (width)
        *width = w;
    if (height)
        *height = h;
    if (channels)
        *channels = ch;
    return DLC_OK;
}

/* dlc_png_decode() and dlc_png_decode_ids(). */
static dlc_status decode(dlc_codec *c, const void *png, size_t size, int ids, dlc_image *out)
{
    const png_ctx ctx = {"PNG decode", size};
    dlc_status rc = check_input(c, png, size, ctx.what);
    if (rc < 0)
        return rc;
    if (!out)
        return dlc__errorf(DLC_EINVAL, "%s: out is NULL", ctx.what);
    png_src src = {png, size, 0};
    png_structp p = read_struct(&ctx);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!info) {
        png_destroy_read_struct(&p, NULL, NULL);
        return dlc__errorf(-ENOMEM, "%s: out of memory", ctx.what);
    }
    if (setjmp(png_jmpbuf(p))) {
        png_destroy_read_struct(&p, &info, NULL);
        return DLC_EDECODE;
    }
    png_set_user_limits(p, DLC__IMAGE_MAX_SIDE, DLC__IMAGE_MAX_SIDE);
    png_set_read_fn(p, &src, on_read);
    uint32_t w, h;
    const uint32_t ch = read_header(p, info, ids, &w, &h);
    rc = read_rows(p, info, c, ch, out);
    png_destroy_read_struct(&p, &info, NULL);
    return rc;
}

dlc_status dlc_png_decode(dlc_codec *c, const void *png, size_t size, dlc_image *out)
{
    return decode(c, png, size, 0, out);
}

dlc_status dlc_png_decode_ids(dlc_codec *c, const void *png, size_t size, dlc_image *out)
{
    return decode(c, png, size, 1, out);
}

/* Write the header and rows of @p img. May longjmp. */
static void write_image(png_structp png, png_infop info, const dlc_image *img)
{
    static const int color_of[] = {0, PNG_COLOR_TYPE_GRAY, 0, PNG_COLOR_TYPE_RGB,
                                   PNG_COLOR_TYPE_RGB_ALPHA};
    png_set_IHDR(png, info, img->width, img->height, 8, color_of[img->channels], PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(png, PNG_ZLIB_LEVEL);
    png_write_info(png, info);
    for (uint32_t y = 0; y < img->height; y++)
        png_write_row(png, img->data + img->stride * y);
    png_write_end(png, NULL);
}

dlc_status dlc_png_encode(dlc_codec *c, const dlc_image *img, const uint8_t **png, size_t *size)
{
    const png_ctx ctx = {"PNG encode", 0};
    if (!c || !img || !img->data || !png || !size)
        return dlc__errorf(DLC_EINVAL, "%s: NULL argument", ctx.what);
    if (img->channels != 1 && img->channels != 3 && img->channels != 4)
        return dlc__errorf(DLC_EINVAL, "%s: %u channels (1, 3 or 4 supported)", ctx.what,
                           img->channels);
    if (!img->width || !img->height || img->width > DLC__IMAGE_MAX_SIDE ||
        img->height > DLC__IMAGE_MAX_SIDE || img->stride < (size_t)img->width * img->channels)
        return dlc__errorf(DLC_EINVAL, "%s: bad image geometry %ux%u (height x width) stride %zu",
                           ctx.what, img->height, img->width, img->stride);
    /* deflate's worst case is its input plus 5 bytes per 16 KiB block; each row has a filter
     * byte; libpng cuts IDAT into chunks of at least 8 KiB with 12 bytes around each; signature,
     * IHDR and IEND take 57. Generous, so the sink never runs out. */
    const uint64_t filtered = ((uint64_t)img->width * img->channels + 1) * img->height;
    const uint64_t bound = filtered + filtered / 256 + 4096;
    if (bound > (uint64_t)SIZE_MAX / 2)
        return dlc__errorf(DLC_EINVAL, "%s: %ux%u (height x width) is too large", ctx.what,
                           img->height, img->width);
    dlc__grow_buf *buf = dlc__codec_png(c);
    dlc_status rc = dlc__buf_reserve(buf, (size_t)bound);
    if (rc < 0)
        return rc;
    png_sink sink = {buf->p, buf->cap, 0};
    png_structp p =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, (png_voidp)&ctx, on_error, on_warning);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!info) {
        png_destroy_write_struct(&p, NULL);
        return dlc__errorf(-ENOMEM, "%s: out of memory", ctx.what);
    }
    if (setjmp(png_jmpbuf(p))) {
        png_destroy_write_struct(&p, &info);
        return DLC_EINVAL;
    }
    png_set_write_fn(p, &sink, on_write, on_flush);
    write_image(p, info, img);
    png_destroy_write_struct(&p, &info);
    *png = sink.p;
    *size = sink.len;
    return DLC_OK;
}
