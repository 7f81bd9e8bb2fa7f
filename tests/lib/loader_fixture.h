/* Shared by the loader's Criterion tests: a store from tests/lib/test_util.h in a temporary
 * directory, the tests' usual configuration, and a helper that hashes a whole epoch's output. */
#ifndef DLC_TEST_LOADER_FIXTURE_H
#define DLC_TEST_LOADER_FIXTURE_H

#include "test_util.h"

#include <criterion/criterion.h>
#include <dlcache/image.h>
#include <dlcache/loader.h>
#include <dlcache/store.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

typedef struct fx_dir {
    char *dir;  /**< The temporary directory (tu_mkdtemp). */
    char *path; /**< dir/store.dlc. */
} fx_dir;

static inline void fx_rmdir(fx_dir *d)
{
    tu_rmtree(d->dir);
    free(d->dir);
    free(d->path);
    d->dir = d->path = NULL;
}

/* A store of @p n records of h x w x 3 tu_pixel() pixels, label i % classes, in a fresh
 * temporary directory. With @p jpeg, the records are JPEGs of the same pixels (quality 95). */
static inline void fx_make_store(fx_dir *d, uint64_t n, uint32_t h, uint32_t w, uint32_t classes,
                                 int jpeg)
{
    d->dir = tu_mkdtemp();
    cr_assert_not_null(d->dir);
    d->path = tu_path(d->dir, "store.dlc");
    cr_assert_not_null(d->path);
    cr_assert_eq(tu_make_store(d->path, n, h, w, classes, jpeg), DLC_OK, "%s", dlc_errmsg());
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

/* Flip one payload byte of record @p index in the file. */
static inline void fx_corrupt_record(const char *path, uint64_t index)
{
    dlc_store *s;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK);
    dlc_store_reader *r;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    dlc_record rec;
    cr_assert_eq(dlc_store_read(r, index, &rec), DLC_OK);
    const uint64_t off = rec.offset + rec.size / 2;
    uint8_t byte = rec.data[rec.size / 2] ^ 0x01;
    dlc_store_reader_close(r);
    dlc_store_close(s);
    const int fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, &byte, 1, (off_t)off), 1);
    close(fd);
}

/* A log callback that holds the worker which replaces a damaged record until the test opens the
 * gate: a batch that stalls as long as the test wants, whatever the machine's speed. */
typedef struct fx_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open, held;
} fx_gate;

static inline void fx_hold_at_replace(void *user, dlc_log_level level, const char *msg)
{
    (void)level;
    fx_gate *g = user;
    if (!g || !strstr(msg, "replaced by record"))
        return;
    pthread_mutex_lock(&g->mu);
    g->held++;
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

#endif
