/* Shared by every test program: the Criterion tests, the plain stress programs (which run under
 * ThreadSanitizer, where Criterion cannot start) and the fuzz harnesses. Temporary directories and
 * small real stores, written once. Plain C without Criterion: failures are returned and the
 * caller asserts in its own way (cr_assert, REQUIRE, abort). Header-only, so that each test
 * program stays one file; the store fixture needs the store and image parts at link time only
 * where it is called. */
#ifndef DLCACHE_TEST_UTIL_H
#define DLCACHE_TEST_UTIL_H

#include "common.h"
#include "store_compat.h"

#include <dlcache/image.h>
#include <dlcache/status.h>
#include <dlcache/writer.h>

#include <errno.h>

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* For the plain test programs (no Criterion): stop with the file, line, condition and the
 * library's last message. */
#define TU_REQUIRE(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: failed: %s (%s)\n", __FILE__, __LINE__, #cond, dlc_errmsg());  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static inline int tu_rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(p);
}

/* A fresh directory BASE/dlc-test-XXXXXX (BASE "/tmp" when NULL), malloc'd; NULL on failure. */
static inline char *tu_mkdtemp_in(const char *base)
{
    char *d = NULL;
    if (asprintf(&d, "%s/dlc-test-XXXXXX", base ? base : "/tmp") < 0)
        return NULL;
    if (!mkdtemp(d)) {
        free(d);
        return NULL;
    }
    return d;
}

static inline char *tu_mkdtemp(void)
{
    return tu_mkdtemp_in(NULL);
}

/* Remove @p dir and everything under it. Accepts NULL. */
static inline void tu_rmtree(const char *dir)
{
    if (dir)
        nftw(dir, tu_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* "dir/name", malloc'd; NULL on failure. */
static inline char *tu_path(const char *dir, const char *name)
{
    char *p = NULL;
    return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

/* Pixel (y, x, c) of record i in a tu_make_store() store: deterministic, varied and
 * record-specific, so that a wrong record, row, column or channel changes the bytes. */
static inline uint8_t tu_pixel(uint64_t i, uint32_t y, uint32_t x, uint32_t c)
{
    return (uint8_t)(dlc__mix64(i * 1000003u + y * 1009u + x * 3u + c) >> 56);
}

/* Write a store of @p n records of h x w x 3 tu_pixel() pixels at @p path, label i % classes
 * (classes <= 64, named "class00"...). With @p jpeg the records are JPEGs of the same pixels
 * (quality 95). Returns DLC_OK or the failing call's status (dlc_errmsg() has the detail). */
static inline dlc_status tu_make_store(const char *path, uint64_t n, uint32_t h, uint32_t w,
                                       uint32_t classes, int jpeg)
{
    dlc_status rc = DLC_OK;
    dlc__store_writer *wr = NULL;
    dlc_codec *codec = NULL;
    const size_t bytes = (size_t)h * w * 3;
    uint8_t *px = malloc(bytes ? bytes : 1);
    if (!px || classes == 0 || classes > 64)
        return dlc__errorf(DLC_EINVAL, "tu_make_store: bad arguments or out of memory");
    CHECK(dlc__store_writer_open(path, 1, n * bytes, &wr));
    if (jpeg)
        CHECK(dlc_codec_create(&codec));
    for (uint64_t i = 0; i < n; i++) {
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++)
                for (uint32_t c = 0; c < 3; c++)
                    px[((size_t)y * w + x) * 3 + c] = tu_pixel(i, y, x, c);
        const void *payload = px;
        size_t size = bytes;
        if (jpeg) {
            const dlc_image img = {px, w, h, 3, (size_t)w * 3};
            const uint8_t *j;
            CHECK(dlc_jpeg_encode(codec, &img, 95, &j, &size));
            payload = j;
        }
        CHECK(dlc__store_writer_put(wr, (int64_t)(i % classes), h, w, 3,
                                    jpeg ? DLC_ENCODING_JPEG : DLC_ENCODING_RAW, payload, size));
    }
    char names[64][16];
    const char *ptrs[64];
    for (uint32_t c = 0; c < classes; c++) {
        snprintf(names[c], sizeof names[c], "class%02u", c);
        ptrs[c] = names[c];
    }
    const dlc__store_meta meta = {ptrs, classes, 0, NULL, 0};
    rc = dlc__store_writer_finish(wr, &meta);
    wr = NULL; /* finish frees the writer, also when it fails. */
fail:
    dlc__store_writer_abort(wr);
    dlc_codec_destroy(codec);
    free(px);
    return rc;
}

/* Write a store of @p n records of several fields with the public writer: "image" (h x w x 3
 * tu_pixel() pixels), "mask" (h x w x 1, class (x / 4 + y / 4) % 5), "boxes" (i % 4 boxes inside
 * the image) with their "classes", "tokens" (i % 9 int32), "label" (i % 3, the store's label)
 * and "text" (bytes). Returns DLC_OK or the failing call's status. */
static inline dlc_status tu_make_fields_store(const char *path, uint64_t n, uint32_t h, uint32_t w)
{
    const dlc_field_spec spec[] = {
        {.name = "image", .kind = DLC_FIELD_IMAGE, .shape = {h, w, 3}},
        {.name = "mask", .kind = DLC_FIELD_IMAGE, .flags = DLC_FIELD_MASK, .shape = {h, w, 1}},
        {.name = "boxes",
         .kind = DLC_FIELD_NDARRAY,
         .dtype = DLC_DTYPE_FLOAT32,
         .flags = DLC_FIELD_BOXES | DLC_FIELD_VARIABLE,
         .ndim = 2,
         .shape = {0, 4},
         .link = "classes"},
        {.name = "classes",
         .kind = DLC_FIELD_NDARRAY,
         .dtype = DLC_DTYPE_INT64,
         .flags = DLC_FIELD_VARIABLE,
         .ndim = 1},
        {.name = "tokens",
         .kind = DLC_FIELD_NDARRAY,
         .dtype = DLC_DTYPE_INT32,
         .flags = DLC_FIELD_VARIABLE,
         .ndim = 1},
        {.name = "label", .kind = DLC_FIELD_INT, .flags = DLC_FIELD_LABEL},
        {.name = "text", .kind = DLC_FIELD_BYTES},
    };
    const char *names[] = {"a", "b", "c"};
    const dlc_writer_config cfg = {.struct_size = sizeof(dlc_writer_config),
                                   .fields = spec,
                                   .num_fields = sizeof spec / sizeof *spec,
                                   .label_names = names,
                                   .num_labels = 3,
                                   .force = 1};
    dlc_status rc = DLC_OK;
    dlc_writer *wr = NULL;
    dlc_record_builder *b = NULL;
    uint8_t *px = malloc((size_t)h * w * 4 + 1);
    if (!px)
        return dlc__errorf(-ENOMEM, "tu_make_fields_store: out of memory");
    uint8_t *mask = px + (size_t)h * w * 3;
    CHECK(dlc_writer_open(path, &cfg, &wr));
    CHECK(dlc_record_builder_create(wr, &b));
    for (uint64_t i = 0; i < n; i++) {
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++) {
                for (uint32_t c = 0; c < 3; c++)
                    px[((size_t)y * w + x) * 3 + c] = tu_pixel(i, y, x, c);
                mask[(size_t)y * w + x] = (uint8_t)((x / 4 + y / 4) % 5);
            }
        const dlc_image im = {px, w, h, 3, (size_t)w * 3}, mk = {mask, w, h, 1, w};
        float boxes[4 * 4];
        int64_t classes[4];
        int32_t tokens[8];
        const uint32_t nb = (uint32_t)(i % 4), nt = (uint32_t)(i % 9);
        for (uint32_t k = 0; k < nb; k++) {
            boxes[4 * k] = (float)((i + 3 * k) % (w / 2)), boxes[4 * k + 1] = (float)(k % (h / 2));
            boxes[4 * k + 2] = boxes[4 * k] + (float)(w / 2);
            boxes[4 * k + 3] = boxes[4 * k + 1] + (float)(h / 2);
            classes[k] = (int64_t)(i + k);
        }
        for (uint32_t k = 0; k < nt; k++)
            tokens[k] = (int32_t)(i * 16 + k);
        char text[24];
        const int tl = snprintf(text, sizeof text, "r%llu", (unsigned long long)i);
        CHECK(dlc_record_set_image(b, 0, &im));
        CHECK(dlc_record_set_image(b, 1, &mk));
        CHECK(dlc_record_set_array(b, 2, boxes, (size_t)nb * 16, nb));
        CHECK(dlc_record_set_array(b, 3, classes, (size_t)nb * 8, nb));
        CHECK(dlc_record_set_array(b, 4, tokens, (size_t)nt * 4, nt));
        CHECK(dlc_record_set_int(b, 5, (int64_t)(i % 3)));
        CHECK(dlc_record_set_bytes(b, 6, text, (size_t)tl));
        CHECK(dlc_record_seal(b));
        CHECK(dlc_writer_append(wr, b));
    }
    rc = dlc_writer_finish(wr);
    wr = NULL; /* finish frees the writer, also when it fails. */
fail:
    dlc_record_builder_destroy(b);
    dlc_writer_abort(wr);
    free(px);
    return rc;
}

#endif /* DLCACHE_TEST_UTIL_H */
