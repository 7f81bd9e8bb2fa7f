/* Helpers shared by the store's unit tests: temporary directories and
 * deterministic stores written with the real writer. Header-only, so each
 * test program stays one file. */
#ifndef DLCACHE_TEST_STORE_UTIL_H
#define DLCACHE_TEST_STORE_UTIL_H

#include "store_compat.h"

#include <dlcache/store.h>

#include "tmpdir_util.h"

#include <criterion/criterion.h>
#include <ftw.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The deterministic byte j of record i's payload. */
static inline uint8_t tsu_byte(uint64_t i, uint64_t j)
{
    return (uint8_t)((i * 131u + j * 7u + (j >> 8) * 13u) ^ (i >> 3));
}

static inline void tsu_fill(uint8_t *p, uint64_t i, size_t n)
{
    for (size_t j = 0; j < n; j++)
        p[j] = tsu_byte(i, j);
}

/* Shapes that cover inline values (a few bytes, under LMDB's ~2 KiB node
 * limit), values just over it, and large ones on many overflow pages. */
static const uint32_t tsu_shapes[][3] = {
    {2, 2, 3}, {10, 10, 3}, {20, 30, 3}, {24, 30, 3}, {256, 256, 3}, {1, 1, 3}, {100, 200, 3},
};
#define TSU_NSHAPES (sizeof tsu_shapes / sizeof tsu_shapes[0])

static const char *const tsu_labels[] = {"cat", "dog", "emu"};

/* Bytes of the record header of a store of two fields (image, label): the image payload
 * follows it (docs/FORMAT.md). */
#define TSU_HEADER 112u

/* Shape of record i in a store written by tsu_write_store(). */
static inline const uint32_t *tsu_shape(uint64_t i, int uniform)
{
    return uniform ? tsu_shapes[4] : tsu_shapes[i % TSU_NSHAPES];
}

/* Write @p n raw records (label i % 3) to @p path with the real writer. */
static inline void tsu_write_store(const char *path, uint64_t n, int uniform, int force)
{
    dlc__store_writer *w = NULL;
    dlc_status rc = dlc__store_writer_open(path, force, 0, &w);
    cr_assert_eq(rc, DLC_OK, "writer_open: %s", dlc_errmsg());
    uint8_t *buf = malloc(256 * 256 * 3);
    for (uint64_t i = 0; i < n; i++) {
        const uint32_t *s = tsu_shape(i, uniform);
        const size_t size = (size_t)s[0] * s[1] * s[2];
        tsu_fill(buf, i, size);
        rc = dlc__store_writer_put(w, (int64_t)(i % 3), s[0], s[1], s[2], DLC_ENCODING_RAW, buf,
                                   size);
        cr_assert_eq(rc, DLC_OK, "put %llu: %s", (unsigned long long)i, dlc_errmsg());
    }
    free(buf);
    const dlc__store_meta meta = {
        .label_names = tsu_labels,
        .num_labels = 3,
        .skipped = 5,
        .build_json = "{\"tool\":\"test\"}",
        .source_digest = 0xdeadbeefull,
    };
    rc = dlc__store_writer_finish(w, &meta);
    cr_assert_eq(rc, DLC_OK, "finish: %s", dlc_errmsg());
}

/* The 24 bytes of one field of one record that the version 2 content digest hashes: xxh3 and
 * size as u64, dim0 and dim1 as u32, little-endian (docs/FORMAT.md). Written out here rather than
 * taken from cache/store/store_format.h, so the test checks the format, not the code against
 * itself. */
static inline void tsu_digest_item(uint8_t *p, uint64_t xxh3, uint64_t size, uint32_t dim0,
                                   uint32_t dim1)
{
    for (int b = 0; b < 8; b++) {
        p[b] = (uint8_t)(xxh3 >> (8 * b));
        p[8 + b] = (uint8_t)(size >> (8 * b));
    }
    for (int b = 0; b < 4; b++) {
        p[16 + b] = (uint8_t)(dim0 >> (8 * b));
        p[20 + b] = (uint8_t)(dim1 >> (8 * b));
    }
}

/* Copy file @p from to @p to. */
static inline void tsu_copy(const char *from, const char *to)
{
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "cp '%s' '%s'", from, to) > 0);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
}

static inline uint64_t tsu_file_size(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

/* Set the value of metadata key @p key of the store at @p path to @p size bytes of @p data, or
 * delete the key when @p data is NULL, through LMDB itself: the store another writer (an older
 * library) or damage would have left. */
static inline void tsu_put_meta(const char *path, const char *key, const void *data, size_t size)
{
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 4), 0);
    cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR | MDB_NOLOCK, 0644), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
    MDB_val k = {.mv_size = strlen(key), .mv_data = (void *)key};
    MDB_val v = {.mv_size = size, .mv_data = (void *)data};
    const int rc = data ? mdb_put(txn, dbi, &k, &v, 0) : mdb_del(txn, dbi, &k, NULL);
    cr_assert_eq(rc, 0, "%s: %s", key, mdb_strerror(rc));
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

/* Does any entry of @p dir contain ".tmp-"? */
static inline int tsu_has_temp(const char *dir)
{
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "ls -a '%s' | grep -q '\\.tmp-'", dir) > 0);
    const int found = system(cmd) == 0;
    free(cmd);
    return found;
}

#endif /* DLCACHE_TEST_STORE_UTIL_H */
