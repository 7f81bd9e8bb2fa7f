/* dlc_store_verify(): walk every record with an LMDB cursor, check its header and fields, rehash
 * every payload, and compare the record count, the label counts, the offset table and the
 * content digest with the metadata (cacheinfo --verify). The cursor walk is independent of the
 * offset table, so a table that points anywhere but at the B-tree's records is found here. */
#include "common.h"
#include "store_format.h"
#include "store_internal.h"
#include "store_set.h"

#include <errno.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* dlc_store_verify() reports progress after each this many payload bytes. */
#define VERIFY_PROGRESS_BYTES (64ull << 20)

typedef struct verify_state {
    const dlc_store *s;
    dlc_verify_fn fn;
    void *user;
    dlc_verify_progress p;
    XXH3_state_t *digest;
    uint64_t *counts;                 /* Records per label. */
    dlc_value values[DLC_MAX_FIELDS]; /* Of the record being checked. */
    uint8_t items[DLC_MAX_FIELDS * DLC__DIGEST_ITEM];
    dlc_field mins[DLC_MAX_FIELDS]; /* min_* over the records read (min_dim0 0: none yet). */
    char first[512];                /* The first problem, for dlc_errmsg() at the end. */
} verify_state;

/* Keep the message of the first problem found (dlc_errmsg() is overwritten
 * by every later one), so the final error names it. */
static void note_first(verify_state *vs)
{
    if (vs->first[0] == '\0')
        snprintf(vs->first, sizeof vs->first, "%s", dlc_errmsg());
}

/* Report bad record @p index; returns non-zero when the caller asks to stop. */
static int verify_bad(verify_state *vs, uint64_t index, dlc_status st)
{
    note_first(vs);
    vs->p.bad++;
    if (!vs->fn)
        return 0;
    vs->p.bad_index = index;
    vs->p.bad_status = st;
    vs->p.bad_msg = dlc_errmsg();
    const int stop = vs->fn(vs->user, &vs->p);
    vs->p.bad_status = 0;
    vs->p.bad_msg = NULL;
    return stop;
}

/* A version 1 record: header, payload hash, and its part of the digest (label, payload). */
static dlc_status verify_v1(verify_state *vs, uint64_t i, const MDB_val *v)
{
    dlc_record rec;
    dlc_status st = dlc__read_v1(vs->s, i, v, &rec, NULL);
    if (st < 0)
        return st;
    st = dlc_record_verify(vs->s, &rec);
    uint8_t label_le[8];
    dlc__st64(label_le, (uint64_t)rec.label);
    XXH3_64bits_update(vs->digest, label_le, sizeof label_le);
    XXH3_64bits_update(vs->digest, rec.data, rec.size);
    vs->counts[rec.label]++;
    vs->p.bytes_done += rec.size;
    return st;
}

/* A version 2 record: the offset table's entry, header and fields, every field's hash, and its
 * part of the digest (hash, size and dimensions of each field, hashed from the payloads). */
static dlc_status verify_v2(verify_state *vs, uint64_t i, const MDB_val *v)
{
    const dlc_store *s = vs->s;
    const uintptr_t a = (uintptr_t)v->mv_data, base = (uintptr_t)s->map;
    if (a < base || a - base > s->file_size || v->mv_size > s->file_size - (a - base))
        return dlc__errorf(DLC_ECORRUPT, "%s: record %" PRIu64 ": value outside the file", s->path,
                           i);
    const uint64_t off = (uint64_t)(a - base), listed = dlc__ld64(s->index + i * 8);
    if (listed != off)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: record %" PRIu64 ": the offset table says %" PRIu64
                           ", the samples database holds the record at %" PRIu64,
                           s->path, i, listed, off);
    dlc_status st = dlc__read_v2(s, i, off, v->mv_size, vs->values);
    if (st < 0)
        return st;
    for (uint32_t f = 0; f < s->info.num_fields; f++) {
        const dlc_value *fv = &vs->values[f];
        const uint64_t h = XXH3_64bits(fv->data, fv->size);
        if (h != fv->xxh3 && st == DLC_OK)
            st = dlc_value_verify(s, i, f, fv);
        dlc__digest_item(vs->items + (size_t)f * DLC__DIGEST_ITEM, h, fv->size, fv->dim0, fv->dim1);
        if (!dlc__kind_is_scalar(s->fields[f].kind))
            vs->p.bytes_done += fv->size;
    }
    XXH3_64bits_update(vs->digest, vs->items, (size_t)s->info.num_fields * DLC__DIGEST_ITEM);
    for (uint32_t f = 0; f < s->info.num_fields; f++) {
        dlc_field *m = &vs->mins[f];
        const dlc_value *fv = &vs->values[f];
        if (s->fields[f].kind != DLC_FIELD_IMAGE)
            continue;
        if (!m->min_dim0 || fv->dim0 < m->min_dim0) {
            m->min_dim0 = fv->dim0;
            m->min_record0 = i;
        }
        if (!m->min_dim1 || fv->dim1 < m->min_dim1) {
            m->min_dim1 = fv->dim1;
            m->min_record1 = i;
        }
    }
    if (s->info.label_field != DLC_NO_FIELD)
        vs->counts[vs->values[s->info.label_field].i]++;
    return st;
}

/* Walk the samples database in key order and check each record. */
static dlc_status walk_records(verify_state *vs, MDB_cursor *cur, uint64_t *n)
{
    dlc_status rc = DLC_OK;
    const dlc_store *s = vs->s;
    uint64_t next_report = VERIFY_PROGRESS_BYTES;
    uint64_t i = 0;
    MDB_val k, v;
    int mrc;
    for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == 0;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), i++) {
        dlc_status st;
        if (k.mv_size != DLC__KEY_SIZE || dlc__record_key_value(k.mv_data) != i ||
            i >= s->info.count)
            st = dlc__errorf(DLC_ECORRUPT,
                             "%s: record %" PRIu64 ": wrong key (records must "
                             "be keyed 0..count-1 in order)",
                             s->path, i);
        else
            st = s->index ? verify_v2(vs, i, &v) : verify_v1(vs, i, &v);
        vs->p.done = i + 1;
        if (st != DLC_OK && verify_bad(vs, i, st))
            FAIL_IF(1, DLC_ECANCELED, "%s: verification canceled", s->path);
        if (vs->fn && vs->p.bytes_done >= next_report) {
            next_report = vs->p.bytes_done + VERIFY_PROGRESS_BYTES;
            FAIL_IF(vs->fn(vs->user, &vs->p), DLC_ECANCELED, "%s: verification canceled", s->path);
        }
    }
    FAIL_IF(mrc != MDB_NOTFOUND, dlc__store_lmdb_status(mrc), "%s: record %" PRIu64 ": %s", s->path,
            i, mdb_strerror(mrc));
fail:
    *n = i;
    return rc;
}

/* The totals against the metadata; non-zero when something disagrees. */
static int check_totals(verify_state *vs, uint64_t n)
{
    const dlc_store *s = vs->s;
    int problem = 0;
    if (n != s->info.count) {
        dlc__errorf(DLC_ECORRUPT, "%s: %" PRIu64 " records, the metadata says %" PRIu64, s->path, n,
                    s->info.count);
        note_first(vs);
        problem = 1;
    }
    for (uint32_t l = 0; l < s->info.num_labels; l++) {
        if (vs->counts[l] != s->label_counts[l]) {
            dlc__errorf(DLC_ECORRUPT,
                        "%s: label %u: %" PRIu64 " records, the metadata says %" PRIu64, s->path, l,
                        vs->counts[l], s->label_counts[l]);
            note_first(vs);
            problem = 1;
            break;
        }
    }
    /* The smallest images, when every record was read (a bad one is not counted). */
    for (uint32_t f = 0; f < s->info.num_fields && s->index && !problem && !vs->p.bad; f++) {
        const dlc_field *want = &s->fields[f], *got = &vs->mins[f];
        if (!want->min_dim0 ||
            (want->min_dim0 == got->min_dim0 && want->min_dim1 == got->min_dim1 &&
             want->min_record0 == got->min_record0 && want->min_record1 == got->min_record1))
            continue;
        dlc__errorf(
            DLC_ECORRUPT,
            "%s: field \"%s\": the smallest image is %ux%u (height x width; records %" PRIu64
            " and %" PRIu64 "), the metadata says %ux%u (records %" PRIu64 " and %" PRIu64 ")",
            s->path, want->name, got->min_dim0, got->min_dim1, got->min_record0, got->min_record1,
            want->min_dim0, want->min_dim1, want->min_record0, want->min_record1);
        note_first(vs);
        problem = 1;
    }
    const uint64_t d = XXH3_64bits_digest(vs->digest);
    if (d != s->info.content_digest) {
        dlc__errorf(DLC_ECORRUPT,
                    "%s: content digest %016" PRIx64 " does not match the "
                    "metadata's %016" PRIx64,
                    s->path, d, s->info.content_digest);
        note_first(vs);
        problem = 1;
    }
    return problem;
}

/* A version 2 store's LMDB pages, walked as dlc_store_open() walks a version 1 store's before the
 * cursor below follows them: open walked its main and meta trees but not its samples tree, which
 * its reads never use (store_check.c). The same meta entries must be found as at open. */
static dlc_status check_samples_tree(const dlc_store *s)
{
    dlc_status rc = DLC_OK;
    dlc__lmdb_entry *entries = calloc(s->num_meta, sizeof *entries);
    FAIL_IF(!entries, -ENOMEM, "%s: out of memory", s->path);
    dlc__lmdb_layout layout;
    CHECK(dlc__lmdb_read_layout(s->path, s->fd, s->file_size, &layout));
    dlc__lmdb_db meta_db, samples_db;
    size_t n = 0;
    CHECK(dlc__lmdb_check_trees(s->path, s->map, s->file_size, &layout, &meta_db, &samples_db,
                                entries, s->num_meta, &n, 1));
    FAIL_IF(n != s->num_meta || samples_db.entries != s->info.count, DLC_ECORRUPT,
            "%s: corrupt: the file changed since it was opened (%zu metadata keys, %" PRIu64
            " records; %zu and %" PRIu64 " at open)",
            s->path, n, samples_db.entries, s->num_meta, s->info.count);
fail:
    free(entries);
    return rc;
}

dlc_status dlc_store_verify(const dlc_store *s, dlc_verify_fn fn, void *user, uint64_t *bad)
{
    dlc_status rc = DLC_OK;
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    verify_state *vs = NULL;
    if (bad)
        *bad = 0;
    FAIL_IF(!s, DLC_EINVAL, "dlc_store_verify: NULL store");
    FAIL_IF(s->lazy, DLC_EINVAL,
            "%s: a streamed set is verified shard by shard as each arrives, not whole", s->path);
    if (s->shards)
        return dlc__set_verify(s, fn, user, bad);
    vs = calloc(1, sizeof *vs);
    FAIL_IF(!vs, -ENOMEM, "%s: out of memory", s->path);
    vs->counts = calloc(s->info.num_labels + 1u, sizeof *vs->counts);
    vs->digest = XXH3_createState();
    FAIL_IF(!vs->counts || !vs->digest, -ENOMEM, "%s: out of memory", s->path);
    XXH3_64bits_reset(vs->digest);
    vs->s = s;
    vs->fn = fn;
    vs->user = user;
    vs->p.total = s->info.count;

    if (s->index)
        CHECK(check_samples_tree(s));
    int mrc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    FAIL_IF(mrc != 0, dlc__store_lmdb_status(mrc), "%s: read transaction: %s", s->path,
            mdb_strerror(mrc));
    mrc = mdb_cursor_open(txn, s->dbi_samples, &cur);
    FAIL_IF(mrc != 0, dlc__store_lmdb_status(mrc), "%s: cursor: %s", s->path, mdb_strerror(mrc));
    uint64_t n = 0;
    CHECK(walk_records(vs, cur, &n));
    if (fn)
        FAIL_IF(fn(user, &vs->p), DLC_ECANCELED, "%s: verification canceled", s->path);
    if (check_totals(vs, n) || vs->p.bad > 0)
        rc = dlc__errorf(DLC_ECORRUPT, "%s", vs->first);
fail:
    if (bad && vs)
        *bad = vs->p.bad;
    if (cur)
        mdb_cursor_close(cur);
    if (txn)
        mdb_txn_abort(txn);
    if (vs) {
        if (vs->digest)
            XXH3_freeState(vs->digest);
        free(vs->counts);
        free(vs);
    }
    return rc;
}
