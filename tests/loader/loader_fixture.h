/* Shared by the loader's tests: small real stores of tiny images in a temp dir, made with the
 * store's private writer, and a helper that hashes a whole epoch's output. */
#ifndef DLC_TEST_LOADER_FIXTURE_H
#define DLC_TEST_LOADER_FIXTURE_H

#include "store_writer.h"
#include "common.h"

#include <criterion/criterion.h>
#include <dlcache/image.h>
#include <dlcache/loader.h>
#include <dlcache/store.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

typedef struct fx_dir {
    char dir[256];
    char path[300];
} fx_dir;

/* Pixel value of record i at (y, x, c): deterministic, varied, and record-specific. */
static inline uint8_t fx_pixel(uint64_t i, uint32_t y, uint32_t x, uint32_t c)
{
    return (uint8_t)(dlc__mix64(i * 1000003u + y * 1009u + x * 3u + c) >> 56);
}

static inline void fx_rmdir(fx_dir *d)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
    cr_assert_eq(system(cmd), 0);
}

/* A raw store of @p n records of h x w x 3 pixels, label i % classes. With @p jpeg, the
 * records are JPEGs of the same pixels (quality 95). */
static inline void fx_make_store(fx_dir *d, uint64_t n, uint32_t h, uint32_t w, uint32_t classes,
                                 int jpeg)
{
    snprintf(d->dir, sizeof d->dir, "/tmp/dlc-loader-test-XXXXXX");
    cr_assert_not_null(mkdtemp(d->dir));
    snprintf(d->path, sizeof d->path, "%s/store.dlc", d->dir);
    dlc__store_writer *wr = NULL;
    cr_assert_eq(dlc__store_writer_open(d->path, 0, n * h * w * 3, &wr), DLC_OK, "%s",
                 dlc_errmsg());
    uint8_t *px = malloc((size_t)h * w * 3);
    dlc_codec *codec = NULL;
    if (jpeg)
        cr_assert_eq(dlc_codec_create(&codec), DLC_OK);
    for (uint64_t i = 0; i < n; i++) {
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++)
                for (uint32_t c = 0; c < 3; c++)
                    px[((size_t)y * w + x) * 3 + c] = fx_pixel(i, y, x, c);
        const void *payload = px;
        size_t size = (size_t)h * w * 3;
        if (jpeg) {
            const dlc_image img = {px, w, h, 3, (size_t)w * 3};
            const uint8_t *j;
            cr_assert_eq(dlc_jpeg_encode(codec, &img, 95, &j, &size), DLC_OK);
            payload = j;
        }
        cr_assert_eq(dlc__store_writer_put(wr, (int64_t)(i % classes), h, w, 3,
                                           jpeg ? DLC_ENCODING_JPEG : DLC_ENCODING_RAW, payload,
                                           size),
                     DLC_OK, "%s", dlc_errmsg());
    }
    dlc_codec_destroy(codec);
    free(px);
    char names[64][16];
    const char *ptrs[64];
    cr_assert(classes <= 64);
    for (uint32_t c = 0; c < classes; c++) {
        snprintf(names[c], sizeof names[c], "class%02u", c);
        ptrs[c] = names[c];
    }
    dlc__store_meta meta = {ptrs, classes, 0, NULL, 0};
    cr_assert_eq(dlc__store_writer_finish(wr, &meta), DLC_OK, "%s", dlc_errmsg());
}

static inline dlc_loader_config fx_config(void)
{
    dlc_loader_config c;
    dlc_loader_config_init(&c);
    c.batch_size = 8;
    c.crop_h = 12;
    c.crop_w = 10;
    c.threads = 2;
    c.prefetch = 2;
    c.seed = 42;
    c.io = DLC_IO_MMAP;
    return c;
}

/* Run one epoch; hash every batch's data, labels and indices; optionally collect indices. */
static inline uint64_t fx_epoch_hash(dlc_loader *l, uint64_t *indices, uint64_t *n_out,
                                     uint64_t cap)
{
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    uint64_t n = 0;
    dlc_batch b;
    dlc_status rc;
    while ((rc = dlc_loader_next(l, &b)) == DLC_OK) {
        XXH3_64bits_update(st, b.data, b.bytes);
        XXH3_64bits_update(st, b.labels, b.count * sizeof *b.labels);
        XXH3_64bits_update(st, b.indices, b.count * sizeof *b.indices);
        for (uint32_t i = 0; i < b.count; i++) {
            if (indices && n < cap)
                indices[n] = b.indices[i];
            n++;
        }
    }
    cr_assert_eq(rc, DLC_END, "%d %s", rc, dlc_errmsg());
    if (n_out)
        *n_out = n;
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

#endif
