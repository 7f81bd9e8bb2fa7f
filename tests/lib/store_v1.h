/* A small writer of format version 1 stores (one image and one label per record, a 48-byte
 * record header; docs/FORMAT.md, "Version 1"), written here with LMDB directly, independently of
 * the library's writer, which only writes version 2 now. The tests use it to show that stores made
 * before version 2 keep opening and reading exactly as before; the fuzz seeds and the read
 * benchmark use it too. Plain C without Criterion, header-only, as tests/lib/test_util.h.
 *
 * Record i: label i % num_labels, height x width x channels from tv1_shape(), raw byte
 * j = tv1_byte(i, j); or, with jpeg, that image as a JPEG of quality 90 from the codec. */
#ifndef DLCACHE_TEST_STORE_V1_H
#define DLCACHE_TEST_STORE_V1_H

#include "common.h"

#include <dlcache/image.h>
#include <dlcache/store.h>

#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

typedef struct tv1_options {
    uint64_t count;
    uint32_t height, width; /* Of every record; 0: sizes that vary per record. */
    uint32_t channels;
    uint32_t num_labels; /* Names "class0"...; at most 16. */
    int jpeg;
} tv1_options;

static inline uint8_t tv1_byte(uint64_t i, uint64_t j)
{
    return (uint8_t)((i * 131u + j * 7u + (j >> 8) * 13u) ^ (i >> 3));
}

/* Record i's size: fixed, or alternating between LMDB leaf values and overflow pages. */
static inline void tv1_shape(const tv1_options *o, uint64_t i, uint32_t *h, uint32_t *w)
{
    *h = o->height ? o->height : 2 + (uint32_t)(i % 5) * 9;
    *w = o->width ? o->width : 3 + (uint32_t)(i % 7) * 13;
}

static inline dlc_status tv1_put(MDB_txn *txn, MDB_dbi dbi, const char *key, const void *v,
                                 size_t n)
{
    MDB_val k = {strlen(key), (void *)key}, d = {n, (void *)v};
    const int rc = mdb_put(txn, dbi, &k, &d, 0);
    return rc ? dlc__errorf(DLC_ECORRUPT, "tv1: put %s: %s", key, mdb_strerror(rc)) : DLC_OK;
}

/* One record: the 48-byte header and the payload; the digest and counts follow it. */
static inline dlc_status tv1_record(MDB_txn *txn, MDB_dbi dbi, uint64_t i, int64_t label,
                                    uint32_t h, uint32_t w, uint32_t c, uint32_t enc,
                                    const uint8_t *payload, size_t size, XXH3_state_t *digest)
{
    uint8_t key[8];
    for (int b = 0; b < 8; b++)
        key[b] = (uint8_t)(i >> (56 - 8 * b));
    MDB_val k = {8, key}, v = {48 + size, NULL};
    const int rc = mdb_put(txn, dbi, &k, &v, MDB_APPEND | MDB_RESERVE);
    if (rc)
        return dlc__errorf(DLC_ECORRUPT, "tv1: record %llu: %s", (unsigned long long)i,
                           mdb_strerror(rc));
    uint8_t *p = v.mv_data;
    dlc__st32(p, 0x52434C44u);
    dlc__st16(p + 4, 48);
    dlc__st16(p + 6, (uint16_t)enc);
    dlc__st64(p + 8, (uint64_t)label);
    dlc__st32(p + 16, h);
    dlc__st32(p + 20, w);
    dlc__st32(p + 24, c);
    dlc__st32(p + 28, 0);
    dlc__st64(p + 32, size);
    dlc__st64(p + 40, XXH3_64bits(payload, size));
    memcpy(p + 48, payload, size);
    uint8_t le[8];
    dlc__st64(le, (uint64_t)label);
    XXH3_64bits_update(digest, le, 8);
    XXH3_64bits_update(digest, payload, size);
    return DLC_OK;
}

/* The metadata of version 1: the 104-byte "format" block, labels, counts, digest, build. */
static inline dlc_status tv1_meta(MDB_txn *txn, MDB_dbi meta, const tv1_options *o,
                                  uint64_t payload_bytes, uint64_t digest, const uint64_t *counts)
{
    dlc_status rc = DLC_OK;
    uint8_t f[104] = {0};
    memcpy(f, "DLCSTORE", 8);
    dlc__st32(f + 8, 1);
    dlc__st32(f + 12, o->jpeg ? DLC_ENCODING_JPEG : DLC_ENCODING_RAW);
    dlc__st64(f + 16, o->count);
    dlc__st32(f + 24, o->height);
    dlc__st32(f + 28, o->width);
    dlc__st32(f + 32, o->channels);
    dlc__st32(f + 36, o->num_labels);
    dlc__st64(f + 40, 1);
    dlc__st64(f + 48, payload_bytes);
    dlc__st64(f + 56, digest);
    dlc__st64(f + 96, XXH3_64bits(f, 96));
    char names[16 * 8];
    size_t len = 0;
    uint8_t cnt[16 * 8];
    for (uint32_t l = 0; l < o->num_labels; l++) {
        len += (size_t)snprintf(names + len, sizeof names - len, "class%u", l) + 1;
        dlc__st64(cnt + 8 * l, counts[l]);
    }
    CHECK(tv1_put(txn, meta, "format", f, sizeof f));
    CHECK(tv1_put(txn, meta, "labels", names, len));
    CHECK(tv1_put(txn, meta, "label_counts", cnt, 8u * o->num_labels));
    CHECK(tv1_put(txn, meta, "source_digest", "00000000cafef00d", 16));
    CHECK(tv1_put(txn, meta, "build", "{\"tool\":\"tv1\"}", 14));
fail:
    return rc;
}

/* Write the version 1 store @p o describes at @p path (replacing it). */
static inline dlc_status tv1_write_store(const char *path, const tv1_options *o)
{
    dlc_status rc = DLC_OK;
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    dlc_codec *codec = NULL;
    XXH3_state_t *digest = XXH3_createState();
    uint8_t *px = malloc(256u * 256u * 4u);
    uint64_t counts[16] = {0}, payload_bytes = 0;
    MDB_dbi meta, samples;
    if (!digest || !px || o->num_labels == 0 || o->num_labels > 16)
        return dlc__errorf(DLC_EINVAL, "tv1: bad options or out of memory");
    XXH3_64bits_reset(digest);
    unlink(path);
    if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 4) ||
        mdb_env_set_mapsize(env, (size_t)1 << 32) ||
        mdb_env_open(env, path, MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0644) ||
        mdb_txn_begin(env, NULL, 0, &txn) || mdb_dbi_open(txn, "meta", MDB_CREATE, &meta) ||
        mdb_dbi_open(txn, "samples", MDB_CREATE, &samples))
        FAIL_IF(1, DLC_ECORRUPT, "tv1: %s: cannot create", path);
    if (o->jpeg)
        CHECK(dlc_codec_create(&codec));
    for (uint64_t i = 0; i < o->count; i++) {
        uint32_t h, w;
        tv1_shape(o, i, &h, &w);
        size_t size = (size_t)h * w * o->channels;
        FAIL_IF(size > 256u * 256u * 4u, DLC_EINVAL, "tv1: record too large");
        for (size_t j = 0; j < size; j++)
            px[j] = tv1_byte(i, j);
        const uint8_t *payload = px;
        if (o->jpeg) {
            const dlc_image img = {px, w, h, o->channels, (size_t)w * o->channels};
            CHECK(dlc_jpeg_encode(codec, &img, 90, &payload, &size));
        }
        const int64_t label = (int64_t)(i % o->num_labels);
        CHECK(tv1_record(txn, samples, i, label, h, w, o->channels,
                         o->jpeg ? DLC_ENCODING_JPEG : DLC_ENCODING_RAW, payload, size, digest));
        counts[label]++;
        payload_bytes += size;
    }
    CHECK(tv1_meta(txn, meta, o, payload_bytes, XXH3_64bits_digest(digest), counts));
    FAIL_IF(mdb_txn_commit(txn) != 0, DLC_ECORRUPT, "tv1: %s: commit failed", path);
    txn = NULL;
    FAIL_IF(mdb_env_sync(env, 1) != 0, DLC_ECORRUPT, "tv1: %s: sync failed", path);
fail:
    if (txn)
        mdb_txn_abort(txn);
    if (env)
        mdb_env_close(env);
    dlc_codec_destroy(codec);
    XXH3_freeState(digest);
    free(px);
    return rc;
}

#endif /* DLCACHE_TEST_STORE_V1_H */
