/* Record builders (include/dlcache/writer.h): check one record's values against the schema,
 * encode its images (JPEG through the image part's codec, PNG through libpng), hash every field
 * and lay the record out (docs/FORMAT.md, "samples") in a buffer reused from record to record.
 * This is the heavy part of writing, done on as many threads as there are builders; the writer
 * only copies the finished bytes. A record's bytes depend on its values alone (its number is
 * filled in by dlc_writer_append()), so a store is the same at any number of builder threads. */
#include "common.h"
#include "store_format.h"
#include "store_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* One field's value as the setters leave it: views of the caller's memory until seal. */
typedef struct value_in {
    int set;
    int pixels;           /* From dlc_record_set_image(): img is encoded (or copied) at seal. */
    dlc_image img;        /* Pixels of an image field. */
    const uint8_t *data;  /* Bytes of an ndarray, a bytes field or an encoded image. */
    size_t size;          /* Bytes at data. */
    uint32_t dim0, dim1;  /* As the record stores them. */
    uint64_t scalar_bits; /* int64 or float64 bits. */
} value_in;

struct dlc_record_builder {
    char *path; /* The store's, for messages. */
    uint32_t nf;
    uint32_t header_size;
    uint64_t token;
    dlc_field fields[DLC_MAX_FIELDS];
    int quality[DLC_MAX_FIELDS];
    value_in v[DLC_MAX_FIELDS];
    dlc_codec *codec; /* Made on the first JPEG or PNG. */
    uint8_t *buf;     /* The record laid out; grows, never shrinks. */
    size_t cap;
    size_t len;
    uint64_t payload;
    int sealed;
};

dlc_status dlc_record_builder_create(const dlc_writer *w, dlc_record_builder **out)
{
    if (out)
        *out = NULL;
    if (!w || !out)
        return dlc__errorf(DLC_EINVAL, "dlc_record_builder_create: NULL argument");
    if (!dlc__writer_has_schema(w))
        return dlc__errorf(DLC_ESTATE, "%s: the writer has no schema yet",
                           dlc__writer_temp_path(w));
    dlc_record_builder *b = calloc(1, sizeof *b);
    const char *path = dlc__writer_temp_path(w);
    const size_t plen = strlen(path) + 1;
    if (b)
        b->path = malloc(plen);
    if (!b || !b->path) {
        free(b);
        return dlc__errorf(-ENOMEM, "%s: out of memory for a record builder", path);
    }
    /* Messages name the store, not its temporary file. */
    memcpy(b->path, path, plen);
    char *tmp = strstr(b->path, ".tmp-");
    if (tmp)
        *tmp = '\0';
    const dlc_field *f = dlc__writer_fields(w, &b->nf, &b->token);
    memcpy(b->fields, f, b->nf * sizeof *f);
    for (uint32_t i = 0; i < b->nf; i++)
        b->quality[i] = dlc__writer_quality(w, i);
    b->header_size = dlc__record2_header_size(b->nf);
    *out = b;
    return DLC_OK;
}

void dlc_record_builder_destroy(dlc_record_builder *b)
{
    if (!b)
        return;
    dlc_codec_destroy(b->codec);
    free(b->buf);
    free(b->path);
    free(b);
}

void dlc_record_builder_reset(dlc_record_builder *b)
{
    if (!b)
        return;
    for (uint32_t i = 0; i < b->nf; i++)
        b->v[i].set = 0;
    b->sealed = 0;
    b->len = 0;
    b->payload = 0;
}

/* ---- Setters --------------------------------------------------------------------------------- */

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static dlc_status
bad_value(const dlc_record_builder *b, uint32_t field, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return dlc__errorf(DLC_EINVAL, "%s: field %u \"%s\": %s", b->path, field, b->fields[field].name,
                       why);
}

/* The field @p field of a builder that takes values, if it is of @p kind. */
static dlc_status settable(dlc_record_builder *b, uint32_t field, uint32_t kind, const char *what)
{
    static const char *const kinds[] = {"?",      "an image", "an ndarray",
                                        "an int", "a float",  "a bytes field"};
    if (!b)
        return dlc__errorf(DLC_EINVAL, "%s: NULL builder", what);
    if (b->sealed)
        return dlc__errorf(DLC_ESTATE,
                           "%s: %s: the record is sealed; append it or reset the builder", b->path,
                           what);
    if (field >= b->nf)
        return dlc__errorf(DLC_EINVAL, "%s: %s: field %u, the schema has %u", b->path, what, field,
                           b->nf);
    const uint32_t k = b->fields[field].kind;
    if (k != kind)
        return bad_value(b, field, "%s is for %s, the field is %s", what, kinds[kind],
                         k < 6 ? kinds[k] : "?");
    return DLC_OK;
}

static dlc_status need_codec(dlc_record_builder *b)
{
    return b->codec ? DLC_OK : dlc_codec_create(&b->codec);
}

/* Height, width and channels of an image value against its field. */
static dlc_status check_image_dims(const dlc_record_builder *b, uint32_t field, uint32_t height,
                                   uint32_t width, uint32_t channels)
{
    const dlc_field *f = &b->fields[field];
    const uint32_t max =
        f->encoding == DLC_ENCODING_JPEG ? DLC__JPEG_MAX_SIDE : (uint32_t)DLC__MAX_SIDE;
    if (channels != f->shape[2])
        return bad_value(b, field, "%u channels; the field has %u", channels, f->shape[2]);
    if (!(f->flags & DLC_FIELD_VARIABLE) && (height != f->shape[0] || width != f->shape[1]))
        return bad_value(b, field, "%ux%u pixels; the field is fixed at %ux%u", height, width,
                         f->shape[0], f->shape[1]);
    if (height == 0 || width == 0 || height > max || width > max)
        return bad_value(b, field, "%ux%u pixels; each side is 1 to %u", height, width, max);
    if ((uint64_t)height * width * channels > DLC__MAX_VALUE)
        return bad_value(b, field, "%ux%ux%u pixels are over LMDB's 4 GiB value limit", height,
                         width, channels);
    return DLC_OK;
}

dlc_status dlc_record_set_image(dlc_record_builder *b, uint32_t field, const dlc_image *img)
{
    dlc_status rc = settable(b, field, DLC_FIELD_IMAGE, "dlc_record_set_image");
    if (rc < 0)
        return rc;
    if (!img || !img->data)
        return bad_value(b, field, "no pixels (NULL image)");
    rc = check_image_dims(b, field, img->height, img->width, img->channels);
    if (rc < 0)
        return rc;
    if (img->stride < (size_t)img->width * img->channels)
        return bad_value(b, field, "rows of %zu bytes are shorter than %u pixels of %u channels",
                         img->stride, img->width, img->channels);
    b->v[field] =
        (value_in){.set = 1, .pixels = 1, .img = *img, .dim0 = img->height, .dim1 = img->width};
    return DLC_OK;
}

/* PNG's own header (IHDR right after the signature): bit depth at byte 24, colour type at 25. */
static dlc_status check_png(dlc_record_builder *b, uint32_t field, const uint8_t *p, size_t size,
                            uint32_t height, uint32_t width)
{
    uint32_t w, h, c;
    dlc_status rc = dlc_png_info(b->codec, p, size, &w, &h, &c);
    if (rc < 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dlc_errmsg());
        return bad_value(b, field, "not a PNG: %s", msg);
    }
    static const uint32_t channels_of[7] = {1, 0, 3, 0, 0, 0, 4};
    const uint32_t depth = p[24], color = p[25];
    if (depth != 8 || color > 6 || channels_of[color] == 0)
        return bad_value(b, field,
                         "a PNG of colour type %u with %u-bit samples; the store keeps 8-bit gray, "
                         "RGB or RGBA exactly (1, 3 or 4 channels)",
                         color, depth);
    if (w != width || h != height)
        return bad_value(b, field, "the PNG is %ux%u, not the %ux%u given", h, w, height, width);
    return check_image_dims(b, field, h, w, channels_of[color]);
}

static dlc_status check_jpeg(dlc_record_builder *b, uint32_t field, const uint8_t *p, size_t size,
                             uint32_t height, uint32_t width)
{
    uint32_t w, h, c;
    const dlc_status rc = dlc_jpeg_header(b->codec, p, size, &w, &h, &c);
    if (rc < 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dlc_errmsg());
        return bad_value(b, field, "not a JPEG: %s", msg);
    }
    if (w != width || h != height)
        return bad_value(b, field, "the JPEG is %ux%u, not the %ux%u given", h, w, height, width);
    return check_image_dims(b, field, h, w, c);
}

dlc_status dlc_record_set_encoded(dlc_record_builder *b, uint32_t field, const void *data,
                                  size_t size, uint32_t height, uint32_t width)
{
    dlc_status rc = settable(b, field, DLC_FIELD_IMAGE, "dlc_record_set_encoded");
    if (rc < 0)
        return rc;
    const uint32_t enc = b->fields[field].encoding;
    if (enc == DLC_ENCODING_RAW)
        return bad_value(b, field, "a raw image field takes pixels (dlc_record_set_image)");
    if (!data || size == 0 || size > DLC__MAX_VALUE)
        return bad_value(b, field, "an encoded image of %zu bytes", data ? size : 0);
    rc = need_codec(b);
    if (rc < 0)
        return rc;
    rc = enc == DLC_ENCODING_JPEG ? check_jpeg(b, field, data, size, height, width)
                                  : check_png(b, field, data, size, height, width);
    if (rc < 0)
        return rc;
    b->v[field] = (value_in){.set = 1, .data = data, .size = size, .dim0 = height, .dim1 = width};
    return DLC_OK;
}

dlc_status dlc_record_set_array(dlc_record_builder *b, uint32_t field, const void *data,
                                size_t bytes, uint32_t dim0)
{
    const dlc_status rc = settable(b, field, DLC_FIELD_NDARRAY, "dlc_record_set_array");
    if (rc < 0)
        return rc;
    const dlc_field *f = &b->fields[field];
    if (!(f->flags & DLC_FIELD_VARIABLE) && dim0 != f->shape[0])
        return bad_value(b, field, "leading dimension %u; the field's is %u", dim0, f->shape[0]);
    /* row < 2^32 and dim0 < 2^32: the product fits. */
    const uint64_t row = dlc__field_row_bytes(f);
    const uint64_t want = (uint64_t)dim0 * row;
    if (want > DLC__MAX_VALUE)
        return bad_value(b, field, "%u rows of %" PRIu64 " bytes are over LMDB's 4 GiB value limit",
                         dim0, row);
    if (bytes != want)
        return bad_value(b, field, "%zu bytes; %u rows of %" PRIu64 " bytes (%s) are %" PRIu64,
                         bytes, dim0, row, dlc_dtype_name(f->dtype), want);
    if (!data && bytes)
        return bad_value(b, field, "NULL data");
    b->v[field] = (value_in){.set = 1, .data = data, .size = bytes, .dim0 = dim0};
    return DLC_OK;
}

dlc_status dlc_record_set_int(dlc_record_builder *b, uint32_t field, int64_t value)
{
    const dlc_status rc = settable(b, field, DLC_FIELD_INT, "dlc_record_set_int");
    if (rc < 0)
        return rc;
    b->v[field] = (value_in){.set = 1, .scalar_bits = (uint64_t)value};
    return DLC_OK;
}

dlc_status dlc_record_set_float(dlc_record_builder *b, uint32_t field, double value)
{
    const dlc_status rc = settable(b, field, DLC_FIELD_FLOAT, "dlc_record_set_float");
    if (rc < 0)
        return rc;
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    b->v[field] = (value_in){.set = 1, .scalar_bits = bits};
    return DLC_OK;
}

dlc_status dlc_record_set_bytes(dlc_record_builder *b, uint32_t field, const void *data,
                                size_t size)
{
    const dlc_status rc = settable(b, field, DLC_FIELD_BYTES, "dlc_record_set_bytes");
    if (rc < 0)
        return rc;
    if (size > DLC__MAX_VALUE)
        return bad_value(b, field, "%zu bytes are over LMDB's 4 GiB value limit", size);
    if (!data && size)
        return bad_value(b, field, "NULL data");
    b->v[field] = (value_in){.set = 1, .data = data, .size = size};
    return DLC_OK;
}

/* ---- Seal ------------------------------------------------------------------------------------ */

/* Make the buffer hold @p need bytes, keeping what is in it. */
static dlc_status reserve(dlc_record_builder *b, uint64_t need)
{
    if (need > DLC__MAX_VALUE)
        return dlc__errorf(DLC_EINVAL,
                           "%s: a record of %" PRIu64 " bytes is over LMDB's 4 GiB "
                           "value limit",
                           b->path, need);
    if (need <= b->cap)
        return DLC_OK;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? (size_t)need : cap * 2;
    uint8_t *p = realloc(b->buf, cap);
    if (!p)
        return dlc__errorf(-ENOMEM, "%s: out of memory for a record of %" PRIu64 " bytes", b->path,
                           need);
    b->buf = p;
    b->cap = cap;
    return DLC_OK;
}

/* The encoded bytes of image value @p v of field @p i (JPEG or PNG from pixels), in the codec's
 * scratch; raw pixels are copied by place_payload() itself. */
static dlc_status encode_image(dlc_record_builder *b, uint32_t i, const value_in *v,
                               const uint8_t **data, size_t *size)
{
    dlc_status rc = need_codec(b);
    if (rc < 0)
        return rc;
    if (b->fields[i].encoding == DLC_ENCODING_JPEG)
        rc = dlc_jpeg_encode(b->codec, &v->img, b->quality[i], data, size);
    else
        rc = dlc_png_encode(b->codec, &v->img, data, size);
    if (rc < 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dlc_errmsg());
        return bad_value(b, i, "cannot encode the image: %s", msg);
    }
    return DLC_OK;
}

/* Lay out field @p i's payload at the next offset that is 48 mod 64 after @p *cursor, and fill
 * its entry. */
static dlc_status place_payload(dlc_record_builder *b, uint32_t i, uint64_t *cursor,
                                dlc__field_entry *e)
{
    const value_in *v = &b->v[i];
    const dlc_field *f = &b->fields[i];
    const uint8_t *src = v->data;
    size_t size = v->size;
    const int raw_pixels = v->pixels && f->encoding == DLC_ENCODING_RAW;
    if (raw_pixels)
        size = (size_t)v->img.height * v->img.width * v->img.channels;
    else if (v->pixels) {
        const dlc_status rc = encode_image(b, i, v, &src, &size);
        if (rc < 0)
            return rc;
    }
    const uint64_t off = dlc__payload_at(*cursor);
    const dlc_status rc = reserve(b, off + size);
    if (rc < 0)
        return rc;
    memset(b->buf + *cursor, 0, (size_t)(off - *cursor));
    uint8_t *dst = b->buf + off;
    if (raw_pixels) {
        const size_t row = (size_t)v->img.width * v->img.channels;
        /* Pixels written in place (dlc__record_image_place()) are where they belong already. */
        if (v->img.data != dst || v->img.stride != row)
            for (uint32_t y = 0; y < v->img.height; y++)
                memcpy(dst + row * y, v->img.data + v->img.stride * y, row);
    } else if (size) {
        memcpy(dst, src, size);
    }
    *e = (dlc__field_entry){
        .off_or_value = off,
        .size = size,
        .dim0 = v->dim0,
        .dim1 = v->dim1,
        .xxh3 = XXH3_64bits(dst, size),
    };
    *cursor = off + size;
    b->payload += size;
    return DLC_OK;
}

/* Every field has a value; boxes have as many classes. */
static dlc_status check_complete(const dlc_record_builder *b)
{
    for (uint32_t i = 0; i < b->nf; i++) {
        if (!b->v[i].set)
            return bad_value(b, i, "no value was set for this record");
        const dlc_field *f = &b->fields[i];
        if ((f->flags & DLC_FIELD_BOXES) && b->v[f->link].set && b->v[f->link].dim0 != b->v[i].dim0)
            return bad_value(b, i, "%u boxes, but its class field \"%s\" has %u entries",
                             b->v[i].dim0, b->fields[f->link].name, b->v[f->link].dim0);
    }
    return DLC_OK;
}

dlc_status dlc_record_seal(dlc_record_builder *b)
{
    dlc_status rc = DLC_OK;
    if (!b)
        return dlc__errorf(DLC_EINVAL, "dlc_record_seal: NULL builder");
    if (b->sealed)
        return dlc__errorf(DLC_ESTATE, "%s: the record is already sealed", b->path);
    CHECK(check_complete(b));
    b->payload = 0;
    CHECK(reserve(b, b->header_size));
    uint8_t *h = b->buf;
    memset(h, 0, b->header_size);
    dlc__st32(h, DLC__RECORD2_MAGIC);
    dlc__st16(h + 4, (uint16_t)b->header_size);
    dlc__st16(h + 6, (uint16_t)b->nf);
    /* Bytes 8..15, the record number, are written by dlc_writer_append(). */
    uint64_t cursor = b->header_size;
    for (uint32_t i = 0; i < b->nf; i++) {
        dlc__field_entry e;
        if (dlc__kind_is_scalar(b->fields[i].kind)) {
            uint8_t le[8];
            dlc__st64(le, b->v[i].scalar_bits);
            e = (dlc__field_entry){
                .off_or_value = b->v[i].scalar_bits, .size = 8, .xxh3 = XXH3_64bits(le, 8)};
        } else {
            CHECK(place_payload(b, i, &cursor, &e));
        }
        /* The buffer may have moved while a payload was placed. */
        dlc__field_entry_store(b->buf + DLC__RECORD2_FIXED + (size_t)i * DLC__FIELD_ENTRY_SIZE, &e);
    }
    b->len = (size_t)cursor;
    b->sealed = 1;
    return DLC_OK;
fail:
    b->payload = 0;
    return rc;
}

dlc_status dlc__record_sealed(const dlc_record_builder *b, dlc__sealed *out)
{
    if (!b->sealed)
        return dlc__errorf(DLC_ESTATE, "%s: the record is not sealed (dlc_record_seal)", b->path);
    *out = (dlc__sealed){.value = b->buf, .size = b->len, .token = b->token, .payload = b->payload};
    return DLC_OK;
}

void dlc__record_appended(dlc_record_builder *b)
{
    dlc_record_builder_reset(b);
}

uint8_t *dlc__record_image_place(dlc_record_builder *b, uint32_t field, size_t size)
{
    if (!b || b->sealed || field >= b->nf || b->fields[field].kind != DLC_FIELD_IMAGE ||
        b->fields[field].encoding != DLC_ENCODING_RAW)
        return NULL;
    /* The seal lays the payloads out in field order, right after the header: the first field
     * with a payload has its place known now; scalars live in their entries. */
    for (uint32_t i = 0; i < field; i++)
        if (!dlc__kind_is_scalar(b->fields[i].kind))
            return NULL;
    const uint64_t off = dlc__payload_at(b->header_size);
    if (size > DLC__MAX_VALUE || off + size > DLC__MAX_VALUE)
        return NULL;
    if (off + size > b->cap) {
        /* As reserve(), without its message: a place that cannot be had is not an error. */
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < off + size)
            cap *= 2;
        uint8_t *p = realloc(b->buf, cap);
        if (!p)
            return NULL;
        b->buf = p;
        b->cap = cap;
    }
    return b->buf + off;
}
