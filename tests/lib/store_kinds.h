/* A store with a field of every kind, encoding, channel count and dtype, and deterministic values
 * for each record: written through the public writer (include/dlcache/writer.h) and checked
 * value by value through the reader. The Criterion tests, the fuzz seeds and the end-to-end
 * fixture (tests/lib/store_fixture.c, read again by tests/e2e/store_foreign.py, which computes
 * the same values in Python) share it. Plain C without Criterion: failures are returned with a
 * message and the caller asserts in its own way. Header-only, as tests/lib/test_util.h.
 *
 * Record i of a store of the fields below:
 *   image    raw RGB, VARIABLE: 8x8 for even i, (16 + 5i % 49) x (32 + 11i % 65) for odd i
 *            (inline values and overflow pages), byte j = (31 i + 7 j + (j >> 9)) & 255
 *   gray     raw, 1 channel, 16x12, byte j = (3 i + 5 j) & 255
 *   rgba     PNG, 4 channels, 10x12, byte j = (i + j * j) & 255 (noise: lossless or not)
 *   photo    JPEG quality 95, RGB 32x32, pixel (y, x, c) = 2x + 2y + 40c + 4 (i % 8) (smooth)
 *   thumb    JPEG, 1 channel, VARIABLE (8 + i % 9) x (8 + 3i % 13), the same formula with c = 0
 *   mask     PNG, 1 channel, MASK, VARIABLE, the size of image, class (y / 4 + x / 4 + i) % 5
 *   boxes    float32 N x 4, BOXES of classes, N = i % 4, box k = (k, k + 1, k + 10.5, i + 0.25)
 *   classes  int32 N, entry k = (i + k) % 3
 *   tokens   uint16 L x 2, VARIABLE, L = 7i % 5, element e = (100 i + e) & 0xffff
 *   a_<type> one fixed ndarray per dtype (shapes in SK_FIELDS), element e: the integer
 *            37 i + 11 e - 20 in the type's range (two's complement wrap), or for floats
 *            i + e / 4 - 3 (float16: its binary16 bits)
 *   id       int 1000003 i - 7
 *   weight   float i / 2 - 1.25
 *   caption  bytes: "record I" repeated i % 3 times (empty for i % 3 == 0)
 *   label    int, LABEL, i % 3, names "alpha", "beta", "gamma" */
#ifndef DLCACHE_TEST_STORE_KINDS_H
#define DLCACHE_TEST_STORE_KINDS_H

#include "common.h"

#include <dlcache/image.h>
#include <dlcache/store.h>
#include <dlcache/writer.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    SK_IMAGE,
    SK_GRAY,
    SK_RGBA,
    SK_PHOTO,
    SK_THUMB,
    SK_MASK,
    SK_BOXES,
    SK_CLASSES,
    SK_TOKENS,
    SK_A_U8,
    SK_A_I8,
    SK_A_U16,
    SK_A_I16,
    SK_A_I32,
    SK_A_I64,
    SK_A_F16,
    SK_A_F32,
    SK_A_F64,
    SK_ID,
    SK_WEIGHT,
    SK_CAPTION,
    SK_LABEL,
    SK_NUM_FIELDS
};

static const dlc_field_spec SK_FIELDS[SK_NUM_FIELDS] = {
    [SK_IMAGE] = {.name = "image",
                  .kind = DLC_FIELD_IMAGE,
                  .flags = DLC_FIELD_VARIABLE,
                  .shape = {0, 0, 3}},
    [SK_GRAY] = {.name = "gray", .kind = DLC_FIELD_IMAGE, .shape = {16, 12, 1}},
    [SK_RGBA] = {.name = "rgba",
                 .kind = DLC_FIELD_IMAGE,
                 .encoding = DLC_ENCODING_PNG,
                 .shape = {10, 12, 4}},
    [SK_PHOTO] = {.name = "photo",
                  .kind = DLC_FIELD_IMAGE,
                  .encoding = DLC_ENCODING_JPEG,
                  .shape = {32, 32, 3},
                  .quality = 95},
    [SK_THUMB] = {.name = "thumb",
                  .kind = DLC_FIELD_IMAGE,
                  .encoding = DLC_ENCODING_JPEG,
                  .flags = DLC_FIELD_VARIABLE,
                  .shape = {0, 0, 1}},
    [SK_MASK] = {.name = "mask",
                 .kind = DLC_FIELD_IMAGE,
                 .encoding = DLC_ENCODING_PNG,
                 .flags = DLC_FIELD_VARIABLE | DLC_FIELD_MASK,
                 .shape = {0, 0, 1}},
    [SK_BOXES] = {.name = "boxes",
                  .kind = DLC_FIELD_NDARRAY,
                  .dtype = DLC_DTYPE_FLOAT32,
                  .flags = DLC_FIELD_VARIABLE | DLC_FIELD_BOXES,
                  .ndim = 2,
                  .shape = {0, 4},
                  .link = "classes"},
    [SK_CLASSES] = {.name = "classes",
                    .kind = DLC_FIELD_NDARRAY,
                    .dtype = DLC_DTYPE_INT32,
                    .flags = DLC_FIELD_VARIABLE,
                    .ndim = 1},
    [SK_TOKENS] = {.name = "tokens",
                   .kind = DLC_FIELD_NDARRAY,
                   .dtype = DLC_DTYPE_UINT16,
                   .flags = DLC_FIELD_VARIABLE,
                   .ndim = 2,
                   .shape = {0, 2}},
    [SK_A_U8] = {.name = "a_u8", .kind = DLC_FIELD_NDARRAY, .ndim = 1, .shape = {3}},
    [SK_A_I8] = {.name = "a_i8",
                 .kind = DLC_FIELD_NDARRAY,
                 .dtype = DLC_DTYPE_INT8,
                 .ndim = 2,
                 .shape = {2, 2}},
    [SK_A_U16] = {.name = "a_u16",
                  .kind = DLC_FIELD_NDARRAY,
                  .dtype = DLC_DTYPE_UINT16,
                  .ndim = 1,
                  .shape = {5}},
    [SK_A_I16] = {.name = "a_i16",
                  .kind = DLC_FIELD_NDARRAY,
                  .dtype = DLC_DTYPE_INT16,
                  .ndim = 3,
                  .shape = {1, 3, 1}},
    [SK_A_I32] = {.name = "a_i32",
                  .kind = DLC_FIELD_NDARRAY,
                  .dtype = DLC_DTYPE_INT32,
                  .ndim = 1,
                  .shape = {2}},
    [SK_A_I64] = {.name = "a_i64",
                  .kind = DLC_FIELD_NDARRAY,
                  .dtype = DLC_DTYPE_INT64,
                  .ndim = 1,
                  .shape = {2}},
    [SK_A_F16] = {.name = "a_f16",
                  .kind = DLC_FIELD_NDARRAY,
                  .dtype = DLC_DTYPE_FLOAT16,
                  .ndim = 1,
                  .shape = {4}},
    [SK_A_F32] = {.name = "a_f32",
                  .kind = DLC_FIELD_NDARRAY,
                  .dtype = DLC_DTYPE_FLOAT32,
                  .ndim = 2,
                  .shape = {2, 3}},
    [SK_A_F64] = {.name = "a_f64",
                  .kind = DLC_FIELD_NDARRAY,
                  .dtype = DLC_DTYPE_FLOAT64,
                  .ndim = 1,
                  .shape = {3}},
    [SK_ID] = {.name = "id", .kind = DLC_FIELD_INT},
    [SK_WEIGHT] = {.name = "weight", .kind = DLC_FIELD_FLOAT},
    [SK_CAPTION] = {.name = "caption", .kind = DLC_FIELD_BYTES},
    [SK_LABEL] = {.name = "label", .kind = DLC_FIELD_INT, .flags = DLC_FIELD_LABEL},
};

static const char *const SK_LABELS[] = {"alpha", "beta", "gamma"};

/* The smallest PSNR, in dB, of the JPEG fields against their pixels (smooth gradients at
 * quality 95 and the writer's default 90 reach well over 40). */
#define SK_JPEG_MIN_PSNR 35.0

/* Buffers for one record's values, large enough for every field. */
typedef struct sk_record {
    uint8_t image[64 * 96 * 3];
    uint8_t gray[16 * 12];
    uint8_t rgba[10 * 12 * 4];
    uint8_t photo[32 * 32 * 3];
    uint8_t thumb[16 * 20];
    uint8_t mask[64 * 96];
    uint8_t arrays[SK_NUM_FIELDS][64]; /* Every ndarray but image-sized ones. */
    char caption[64];
    uint32_t h, w; /* Of image and mask. */
    uint32_t thumb_h, thumb_w;
    uint32_t dim0[SK_NUM_FIELDS]; /* Leading dimension of each ndarray. */
    size_t bytes[SK_NUM_FIELDS];  /* Bytes of each ndarray and of caption. */
} sk_record;

static inline uint32_t sk_image_h(uint64_t i)
{
    return i % 2 ? 16 + (uint32_t)(i * 5 % 49) : 8;
}
static inline uint32_t sk_image_w(uint64_t i)
{
    return i % 2 ? 32 + (uint32_t)(i * 11 % 65) : 8;
}
static inline uint8_t sk_smooth(uint64_t i, uint32_t y, uint32_t x, uint32_t c)
{
    return (uint8_t)(2 * x + 2 * y + 40 * c + 4 * (i % 8));
}

/* Element e of fixed array field @p f of record i, written at @p p in the field's dtype. */
static inline void sk_element(uint32_t dtype, uint64_t i, uint32_t e, uint8_t *p)
{
    const int64_t v = (int64_t)(37 * i + 11 * e) - 20;
    const double d = (double)i + e / 4.0 - 3.0;
    switch (dtype) {
    case DLC_DTYPE_UINT8:
    case DLC_DTYPE_INT8:
        p[0] = (uint8_t)v;
        break;
    case DLC_DTYPE_UINT16:
    case DLC_DTYPE_INT16:
        dlc__st16(p, (uint16_t)v);
        break;
    case DLC_DTYPE_INT32:
        dlc__st32(p, (uint32_t)v);
        break;
    case DLC_DTYPE_INT64:
        dlc__st64(p, (uint64_t)v);
        break;
    case DLC_DTYPE_FLOAT16:
        dlc__st16(p, dlc__f32_to_f16((float)d));
        break;
    case DLC_DTYPE_FLOAT32: {
        const float f = (float)d;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        dlc__st32(p, bits);
        break;
    }
    default: {
        uint64_t bits;
        memcpy(&bits, &d, 8);
        dlc__st64(p, bits);
    }
    }
}

static inline void sk_put_f32(uint8_t *p, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    dlc__st32(p, bits);
}

/* Fill @p r with record i's values (the pixels before any encoding). */
static inline void sk_make(sk_record *r, uint64_t i)
{
    r->h = sk_image_h(i);
    r->w = sk_image_w(i);
    const size_t n = (size_t)r->h * r->w * 3;
    for (size_t j = 0; j < n; j++)
        r->image[j] = (uint8_t)(31 * i + 7 * j + (j >> 9));
    for (size_t j = 0; j < sizeof r->gray; j++)
        r->gray[j] = (uint8_t)(3 * i + 5 * j);
    for (size_t j = 0; j < sizeof r->rgba; j++)
        r->rgba[j] = (uint8_t)(i + j * j);
    for (uint32_t y = 0; y < 32; y++)
        for (uint32_t x = 0; x < 32; x++)
            for (uint32_t c = 0; c < 3; c++)
                r->photo[(y * 32 + x) * 3 + c] = sk_smooth(i, y, x, c);
    r->thumb_h = 8 + (uint32_t)(i % 9);
    r->thumb_w = 8 + (uint32_t)(i * 3 % 13);
    for (uint32_t y = 0; y < r->thumb_h; y++)
        for (uint32_t x = 0; x < r->thumb_w; x++)
            r->thumb[y * r->thumb_w + x] = sk_smooth(i, y, x, 0);
    for (uint32_t y = 0; y < r->h; y++)
        for (uint32_t x = 0; x < r->w; x++)
            r->mask[y * r->w + x] = (uint8_t)((y / 4 + x / 4 + i) % 5);
    const uint32_t nb = (uint32_t)(i % 4);
    for (uint32_t k = 0; k < nb; k++) {
        const float box[4] = {(float)k, (float)k + 1, (float)k + 10.5f, (float)i + 0.25f};
        for (int c = 0; c < 4; c++)
            sk_put_f32(r->arrays[SK_BOXES] + 16 * k + 4 * c, box[c]);
        dlc__st32(r->arrays[SK_CLASSES] + 4 * k, (uint32_t)((i + k) % 3));
    }
    r->dim0[SK_BOXES] = r->dim0[SK_CLASSES] = nb;
    r->bytes[SK_BOXES] = 16 * nb;
    r->bytes[SK_CLASSES] = 4 * nb;
    const uint32_t len = (uint32_t)(i * 7 % 5);
    for (uint32_t e = 0; e < 2 * len; e++)
        dlc__st16(r->arrays[SK_TOKENS] + 2 * e, (uint16_t)(100 * i + e));
    r->dim0[SK_TOKENS] = len;
    r->bytes[SK_TOKENS] = 4 * len;
    for (uint32_t f = SK_A_U8; f <= SK_A_F64; f++) {
        const dlc_field_spec *s = &SK_FIELDS[f];
        uint32_t elems = 1;
        for (uint32_t d = 0; d < s->ndim; d++)
            elems *= s->shape[d];
        const size_t es = dlc_dtype_size(s->dtype);
        for (uint32_t e = 0; e < elems; e++)
            sk_element(s->dtype, i, e, r->arrays[f] + es * e);
        r->dim0[f] = s->shape[0];
        r->bytes[f] = es * elems;
    }
    r->caption[0] = '\0';
    for (uint64_t k = 0; k < i % 3; k++)
        snprintf(r->caption + strlen(r->caption), sizeof r->caption - strlen(r->caption),
                 "record %llu", (unsigned long long)i);
    r->bytes[SK_CAPTION] = strlen(r->caption);
}

static inline int64_t sk_id(uint64_t i)
{
    return (int64_t)(1000003 * i) - 7;
}
static inline double sk_weight(uint64_t i)
{
    return (double)i / 2 - 1.25;
}

/* Set record i's values in @p b (the pixels of @p r must stay until seal). */
static inline dlc_status sk_set(dlc_record_builder *b, sk_record *r, uint64_t i)
{
    dlc_status rc = DLC_OK;
    sk_make(r, i);
    const dlc_image images[] = {
        [SK_IMAGE] = {r->image, r->w, r->h, 3, (size_t)r->w * 3},
        [SK_GRAY] = {r->gray, 12, 16, 1, 12},
        [SK_RGBA] = {r->rgba, 12, 10, 4, 48},
        [SK_PHOTO] = {r->photo, 32, 32, 3, 96},
        [SK_THUMB] = {r->thumb, r->thumb_w, r->thumb_h, 1, r->thumb_w},
        [SK_MASK] = {r->mask, r->w, r->h, 1, r->w},
    };
    for (uint32_t f = SK_IMAGE; f <= SK_MASK; f++)
        CHECK(dlc_record_set_image(b, f, &images[f]));
    for (uint32_t f = SK_BOXES; f <= SK_A_F64; f++)
        CHECK(dlc_record_set_array(b, f, r->arrays[f], r->bytes[f], r->dim0[f]));
    CHECK(dlc_record_set_int(b, SK_ID, sk_id(i)));
    CHECK(dlc_record_set_float(b, SK_WEIGHT, sk_weight(i)));
    CHECK(dlc_record_set_bytes(b, SK_CAPTION, r->caption, r->bytes[SK_CAPTION]));
    CHECK(dlc_record_set_int(b, SK_LABEL, (int64_t)(i % 3)));
fail:
    return rc;
}

/* The writer's configuration of the kinds store. */
static inline dlc_writer_config sk_config(int force)
{
    dlc_writer_config c;
    dlc_writer_config_init(&c);
    c.fields = SK_FIELDS;
    c.num_fields = SK_NUM_FIELDS;
    c.label_names = SK_LABELS;
    c.num_labels = 3;
    c.force = force;
    c.build_json = "{\"tool\":\"store_kinds\"}";
    c.source_digest = 0x0123456789abcdefull;
    return c;
}

/* Write a kinds store of @p n records (n >= 1) at @p path, 2 items counted as skipped. */
static inline dlc_status sk_write_store(const char *path, uint64_t n, int force)
{
    dlc_status rc = DLC_OK;
    dlc_writer *w = NULL;
    dlc_record_builder *b = NULL;
    sk_record *r = malloc(sizeof *r);
    if (!r)
        return dlc__errorf(-ENOMEM, "sk_write_store: out of memory");
    const dlc_writer_config cfg = sk_config(force);
    CHECK(dlc_writer_open(path, &cfg, &w));
    CHECK(dlc_record_builder_create(w, &b));
    for (uint64_t i = 0; i < n; i++) {
        CHECK(sk_set(b, r, i));
        CHECK(dlc_record_seal(b));
        CHECK(dlc_writer_append(w, b));
    }
    dlc_writer_add_skipped(w, 2);
    rc = dlc_writer_finish(w);
    w = NULL;
fail:
    dlc_writer_abort(w);
    dlc_record_builder_destroy(b);
    free(r);
    return rc;
}

/* PSNR in dB of @p n bytes against the truth; INFINITY when equal. */
static inline double sk_psnr(const uint8_t *a, const uint8_t *b, size_t n)
{
    double se = 0;
    for (size_t j = 0; j < n; j++)
        se += ((double)a[j] - b[j]) * ((double)a[j] - b[j]);
    return se == 0 ? INFINITY : 10 * log10(255.0 * 255.0 * (double)n / se);
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline dlc_status
sk_fail(uint64_t i, uint32_t f, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return dlc__errorf(DLC_ECORRUPT, "record %llu: field %s: %s", (unsigned long long)i,
                       SK_FIELDS[f].name, why);
}

/* Compare image value @p v of field @p f with its pixels: bit for bit when raw or PNG, by PSNR
 * when JPEG. */
static inline dlc_status sk_check_image(dlc_codec *c, const dlc_value *v, uint64_t i, uint32_t f,
                                        const uint8_t *want, uint32_t h, uint32_t w, uint32_t ch)
{
    if (v->dim0 != h || v->dim1 != w)
        return sk_fail(i, f, "%ux%u, not %ux%u", v->dim0, v->dim1, h, w);
    const size_t n = (size_t)h * w * ch;
    const dlc_field_spec *s = &SK_FIELDS[f];
    if (s->encoding == DLC_ENCODING_RAW)
        return v->size == n && memcmp(v->data, want, n) == 0 ? DLC_OK
                                                             : sk_fail(i, f, "pixels differ");
    dlc_image img;
    const dlc_status rc = s->encoding == DLC_ENCODING_PNG
                              ? dlc_png_decode(c, v->data, v->size, &img)
                              : dlc_jpeg_decode_as(c, v->data, v->size, ch, 0, 0, &img);
    if (rc < 0)
        return rc;
    if (img.height != h || img.width != w || img.channels != ch || img.stride != (size_t)w * ch)
        return sk_fail(i, f, "decodes to %ux%ux%u", img.height, img.width, img.channels);
    if (s->encoding == DLC_ENCODING_PNG)
        return memcmp(img.data, want, n) == 0 ? DLC_OK : sk_fail(i, f, "PNG is not lossless");
    const double psnr = sk_psnr(img.data, want, n);
    return psnr >= SK_JPEG_MIN_PSNR ? DLC_OK : sk_fail(i, f, "JPEG PSNR %.1f dB", psnr);
}

/* Check every value of record i as read into @p v (SK_NUM_FIELDS values). */
static inline dlc_status sk_check(dlc_codec *c, sk_record *r, const dlc_value *v, uint64_t i)
{
    dlc_status rc = DLC_OK;
    sk_make(r, i);
    CHECK(sk_check_image(c, &v[SK_IMAGE], i, SK_IMAGE, r->image, r->h, r->w, 3));
    CHECK(sk_check_image(c, &v[SK_GRAY], i, SK_GRAY, r->gray, 16, 12, 1));
    CHECK(sk_check_image(c, &v[SK_RGBA], i, SK_RGBA, r->rgba, 10, 12, 4));
    CHECK(sk_check_image(c, &v[SK_PHOTO], i, SK_PHOTO, r->photo, 32, 32, 3));
    CHECK(sk_check_image(c, &v[SK_THUMB], i, SK_THUMB, r->thumb, r->thumb_h, r->thumb_w, 1));
    CHECK(sk_check_image(c, &v[SK_MASK], i, SK_MASK, r->mask, r->h, r->w, 1));
    for (uint32_t f = SK_BOXES; f <= SK_A_F64; f++)
        if (v[f].dim0 != r->dim0[f] || v[f].dim1 != 0 || v[f].size != r->bytes[f] ||
            memcmp(v[f].data, r->arrays[f], r->bytes[f]) != 0)
            return sk_fail(i, f, "array differs (dim0 %u, %zu bytes)", v[f].dim0, v[f].size);
    if (v[SK_ID].i != sk_id(i) || v[SK_LABEL].i != (int64_t)(i % 3))
        return sk_fail(i, SK_ID, "ints %lld %lld", (long long)v[SK_ID].i, (long long)v[SK_LABEL].i);
    if (memcmp(&v[SK_WEIGHT].f, &(double){sk_weight(i)}, 8) != 0)
        return sk_fail(i, SK_WEIGHT, "float %g", v[SK_WEIGHT].f);
    if (v[SK_CAPTION].size != r->bytes[SK_CAPTION] ||
        memcmp(v[SK_CAPTION].data, r->caption, r->bytes[SK_CAPTION]) != 0)
        return sk_fail(i, SK_CAPTION, "bytes differ");
fail:
    return rc;
}

#endif /* DLCACHE_TEST_STORE_KINDS_H */
