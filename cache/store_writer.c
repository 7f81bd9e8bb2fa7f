/* The store writer: appends records to FINAL.tmp-PID, then writes the
 * metadata, syncs, trims and renames (cache/store_writer.h). */
#include "store_writer.h"

#include "common.h"
#include "store_format.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

/* A write transaction is committed after this many payload bytes or records.
 * LMDB copies a transaction's dirty pages into the page cache at commit, on the
 * writer's thread; with 16 MiB commits that copy overlaps the workers' decoding
 * instead of stalling them behind one long commit (3000 demo images, 1 worker:
 * 552/609/493 images/s with 256 MiB commits, 647/782/616 with 16 MiB). It also
 * keeps LMDB's dirty-page list (MDB_IDL_UM_MAX pages) far from full. */
#define TXN_MAX_BYTES (16ull << 20)
#define TXN_MAX_RECORDS 4096u
/* Smallest map; also the slack added to every estimate of the map we need. */
#define MAP_MIN (64ull << 20)

struct dlc__store_writer {
    char *final_path; /* Where the store goes at finish. */
    char *temp_path;  /* FINAL.tmp-PID: ".tmp-" marks it as never a store. */
    char *dir_path;   /* Directory of both, for statvfs and the final fsync. */
    MDB_env *env;
    MDB_txn *txn; /* The open write transaction, or NULL. */
    MDB_dbi dbi_meta;
    MDB_dbi dbi_samples;
    uint64_t psize;     /* LMDB page size. */
    uint64_t mapsize;   /* Current map size. */
    uint64_t used;      /* File bytes used by committed transactions. */
    uint64_t pending;   /* Estimated file bytes of the open transaction. */
    uint64_t txn_bytes; /* Payload bytes in the open transaction. */
    uint32_t txn_records;
    uint64_t prealloc; /* Bytes reserved with fallocate (0: none). */
    uint64_t size_hint;
    int failed; /* A put failed: only abort is valid now. */

    uint64_t count;
    uint64_t payload_bytes;
    uint32_t encoding;
    uint32_t height, width, channels; /* Of record 0; 0 once records differ. */
    int64_t max_label;
    uint64_t max_label_index;
    uint64_t *label_counts;
    size_t label_cap;
    XXH3_state_t *digest; /* content_digest: label (i64 LE) then payload, per record. */
};

/* An LMDB return code as a dlc_status: LMDB returns errno values as they are
 * and its own codes as negative numbers in its own range. */
static dlc_status lmdb_status(int rc)
{
    if (rc > 0)
        return -rc;
    if (rc == MDB_MAP_FULL)
        return -EFBIG;
    return DLC_ECORRUPT;
}

static char *str_dup(const char *s)
{
    const size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Free bytes for an unprivileged user on the file system holding the store. */
static uint64_t free_bytes(const dlc__store_writer *w)
{
    struct statvfs sv;
    if (statvfs(w->dir_path, &sv) != 0)
        return UINT64_MAX;
    return (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
}

/* The bytes LMDB will use in the file for one record of @p value_len bytes:
 * a value over LMDB's node limit (a quarter page less headers) gets its own
 * overflow pages, a small one shares a leaf page. Either way the leaf node
 * (8-byte node header, 8-byte key, 2-byte pointer) costs about 24 bytes. */
static uint64_t record_cost(const dlc__store_writer *w, uint64_t value_len)
{
    const uint64_t node_max = ((w->psize - DLC__LMDB_PAGEHDRSZ) / 2 & ~(uint64_t)1) - 2;
    if (8 + DLC__KEY_SIZE + value_len <= node_max)
        return value_len + 24;
    const uint64_t pages = (DLC__LMDB_PAGEHDRSZ + value_len + w->psize - 1) / w->psize;
    return pages * w->psize + 24;
}

/* Turn a failed write into the message a user can act on: LMDB reports a
 * full disk as ENOSPC or, from a short pwrite, as EIO. */
static dlc_status write_error(dlc__store_writer *w, int rc, const char *what)
{
    const uint64_t avail = free_bytes(w);
    const uint64_t need =
        w->size_hint > w->payload_bytes ? w->size_hint - w->payload_bytes : w->pending + (1u << 20);
    if (rc == ENOSPC || ((rc == EIO || rc == EFBIG) && avail < need + (16u << 20)))
        return dlc__errorf(-ENOSPC,
                           "%s: disk full: need about %" PRIu64 " more bytes, %" PRIu64 " free",
                           w->temp_path, need, avail);
    return dlc__errorf(lmdb_status(rc), "%s: %s: %s", w->temp_path, what, mdb_strerror(rc));
}

static dlc_status txn_begin(dlc__store_writer *w)
{
    const int rc = mdb_txn_begin(w->env, NULL, 0, &w->txn);
    if (rc != 0) {
        w->txn = NULL;
        return write_error(w, rc, "begin write transaction");
    }
    w->pending = 0;
    w->txn_bytes = 0;
    w->txn_records = 0;
    return DLC_OK;
}

static dlc_status txn_commit(dlc__store_writer *w)
{
    const int rc = mdb_txn_commit(w->txn);
    w->txn = NULL; /* Commit frees the transaction even when it fails. */
    if (rc != 0)
        return write_error(w, rc, "commit");
    MDB_envinfo ei;
    mdb_env_info(w->env, &ei);
    w->used = ((uint64_t)ei.me_last_pgno + 1) * w->psize;
    w->pending = 0;
    return DLC_OK;
}

/* Make sure @p extra more bytes fit in the map. LMDB can only grow the map
 * between transactions, and MDB_MAP_FULL inside one would lose every record
 * of it, so grow early: commit, resize, begin again. */
static dlc_status ensure_room(dlc__store_writer *w, uint64_t extra)
{
    /* Branch pages copied on write and the free list add a little to the
     * estimate; an eighth plus a fixed slack covers them with room to spare. */
    const uint64_t need = w->used + (w->pending + extra) + (w->pending + extra) / 8 + (4u << 20);
    if (need <= w->mapsize)
        return DLC_OK;
    dlc_status rc = txn_commit(w);
    if (rc < 0)
        return rc;
    uint64_t size = w->mapsize * 2;
    if (size < need * 2)
        size = need * 2;
    const int mrc = mdb_env_set_mapsize(w->env, (size_t)size);
    if (mrc != 0)
        return dlc__errorf(lmdb_status(mrc), "%s: cannot grow the map to %" PRIu64 " bytes: %s",
                           w->temp_path, size, mdb_strerror(mrc));
    w->mapsize = size;
    return txn_begin(w);
}

static void remove_temp(dlc__store_writer *w);

static void writer_free(dlc__store_writer *w)
{
    if (w->txn)
        mdb_txn_abort(w->txn);
    if (w->env)
        mdb_env_close(w->env);
    if (w->digest)
        XXH3_freeState(w->digest);
    free(w->label_counts);
    free(w->final_path);
    free(w->temp_path);
    free(w->dir_path);
    free(w);
}

dlc_status dlc__store_writer_open(const char *final_path, int force, uint64_t size_hint,
                                  dlc__store_writer **out)
{
    dlc_status rc = DLC_OK;
    dlc__store_writer *w = NULL;
    int mrc;
    if (out)
        *out = NULL;
    FAIL_IF(!final_path || !*final_path || !out, DLC_EINVAL, "store writer: no output path");

    struct stat st;
    if (stat(final_path, &st) == 0) {
        FAIL_IF(!force, DLC_EEXIST, "%s: exists; use --force to replace it", final_path);
        FAIL_IF(S_ISDIR(st.st_mode), DLC_EINVAL, "%s: is a directory, not a store file",
                final_path);
    }

    w = calloc(1, sizeof *w);
    FAIL_IF(!w, -ENOMEM, "%s: out of memory", final_path);
    w->size_hint = size_hint;
    w->final_path = str_dup(final_path);
    const size_t tlen = strlen(final_path) + 32;
    w->temp_path = malloc(tlen);
    w->dir_path = str_dup(final_path);
    w->digest = XXH3_createState();
    FAIL_IF(!w->final_path || !w->temp_path || !w->dir_path || !w->digest, -ENOMEM,
            "%s: out of memory", final_path);
    snprintf(w->temp_path, tlen, "%s.tmp-%ld", final_path, (long)getpid());
    char *slash = strrchr(w->dir_path, '/');
    if (!slash)
        strcpy(w->dir_path, ".");
    else if (slash == w->dir_path)
        slash[1] = '\0';
    else
        *slash = '\0';
    XXH3_64bits_reset(w->digest);
    w->max_label = -1;

    struct statvfs sv;
    FAIL_IF(statvfs(w->dir_path, &sv) != 0, -errno, "%s: directory: %s", w->dir_path,
            strerror(errno));
    /* The cheap early answer; fallocate below gives the exact one. */
    const uint64_t want = size_hint + size_hint / 16 + (1u << 20);
    const uint64_t avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    FAIL_IF(size_hint > 0 && want > avail, -ENOSPC,
            "%s: disk full: need about %" PRIu64 " bytes, %" PRIu64 " free", final_path, want,
            avail);

    /* A temporary file of this PID can only be a leftover of a process that
     * died with our PID long ago: it is garbage. */
    FAIL_IF(unlink(w->temp_path) != 0 && errno != ENOENT, -errno, "%s: cannot remove: %s",
            w->temp_path, strerror(errno));

    mrc = mdb_env_create(&w->env);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: %s", w->temp_path, mdb_strerror(mrc));
    mdb_env_set_maxdbs(w->env, DLC__MAX_DBS);
    w->mapsize = size_hint + size_hint / 8 + MAP_MIN;
    mdb_env_set_mapsize(w->env, (size_t)w->mapsize);
    /* NOSYNC/NOMETASYNC: one fsync at finish is all the durability a build
     * needs, since the file is not the store until the rename. NOLOCK: the
     * temporary file has one writer and no readers, and no lock file is left
     * behind. No WRITEMAP: a full disk then fails a write() instead of
     * killing the process with SIGBUS on a sparse page of the map. */
    mrc = mdb_env_open(w->env, w->temp_path,
                       MDB_NOSUBDIR | MDB_NOSYNC | MDB_NOMETASYNC | MDB_NOLOCK | MDB_NOTLS, 0644);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: cannot create: %s", w->temp_path, mdb_strerror(mrc));
    MDB_stat ms;
    mdb_env_stat(w->env, &ms);
    w->psize = ms.ms_psize;
    w->used = 2 * w->psize; /* The two meta pages. */

    if (size_hint > 0) {
        /* Reserve the blocks now so that a disk too small fails here with a
         * clear message rather than hours into the build. KEEP_SIZE leaves
         * the file size to LMDB; finish releases what was not used. */
        int fd = -1;
        mdb_env_get_fd(w->env, &fd);
        if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)want) == 0) {
            w->prealloc = want;
        } else if (errno == ENOSPC) {
            rc = dlc__errorf(-ENOSPC,
                             "%s: disk full: need about %" PRIu64 " bytes, %" PRIu64 " free",
                             w->temp_path, want, free_bytes(w));
            goto fail;
        }
        /* Other errors (EOPNOTSUPP on some file systems) only lose the early
         * warning; the build still reports a full disk when it happens. */
    }

    CHECK(txn_begin(w));
    mrc = mdb_dbi_open(w->txn, DLC__DB_META, MDB_CREATE, &w->dbi_meta);
    if (mrc == 0)
        mrc = mdb_dbi_open(w->txn, DLC__DB_SAMPLES, MDB_CREATE, &w->dbi_samples);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: cannot create databases: %s", w->temp_path,
            mdb_strerror(mrc));
    *out = w;
    return DLC_OK;

fail:
    if (w) {
        if (w->env)
            remove_temp(w);
        writer_free(w);
    }
    return rc;
}

/* Remove the temporary file after a failure; the caller frees w. */
static void remove_temp(dlc__store_writer *w)
{
    if (w->txn) {
        mdb_txn_abort(w->txn);
        w->txn = NULL;
    }
    if (w->env) {
        mdb_env_close(w->env);
        w->env = NULL;
    }
    unlink(w->temp_path);
}

static dlc_status grow_label_counts(dlc__store_writer *w, size_t label)
{
    size_t cap = w->label_cap ? w->label_cap : 64;
    while (cap <= label)
        cap *= 2;
    uint64_t *counts = realloc(w->label_counts, cap * sizeof *counts);
    if (!counts)
        return dlc__errorf(-ENOMEM, "%s: out of memory", w->temp_path);
    memset(counts + w->label_cap, 0, (cap - w->label_cap) * sizeof *counts);
    w->label_counts = counts;
    w->label_cap = cap;
    return DLC_OK;
}

dlc_status dlc__store_writer_put(dlc__store_writer *w, int64_t label, uint32_t height,
                                 uint32_t width, uint32_t channels, uint32_t encoding,
                                 const void *payload, size_t size)
{
    dlc_status rc = DLC_OK;
    if (!w)
        return dlc__errorf(DLC_EINVAL, "store writer: NULL writer");
    if (w->failed)
        return dlc__errorf(DLC_ESTATE, "%s: an earlier write failed; abort the writer",
                           w->temp_path);
    const uint64_t index = w->count;
    if (label < 0 || label >= (int64_t)DLC__MAX_LABELS)
        return dlc__errorf(DLC_EINVAL,
                           "%s: record %" PRIu64 ": label %" PRId64 " out of range 0..%u",
                           w->temp_path, index, label, DLC__MAX_LABELS - 1);
    if (encoding > DLC_ENCODING_JPEG)
        return dlc__errorf(DLC_EINVAL, "%s: record %" PRIu64 ": unknown encoding %u", w->temp_path,
                           index, encoding);
    if (index > 0 && encoding != w->encoding)
        return dlc__errorf(DLC_EINVAL,
                           "%s: record %" PRIu64 ": encoding %u, but the store's "
                           "records are encoding %u",
                           w->temp_path, index, encoding, w->encoding);
    if (!payload && size > 0)
        return dlc__errorf(DLC_EINVAL, "%s: record %" PRIu64 ": NULL payload", w->temp_path, index);
    if (size > UINT32_MAX - DLC__RECORD_HEADER_SIZE)
        return dlc__errorf(DLC_EINVAL,
                           "%s: record %" PRIu64 ": payload of %zu bytes is over "
                           "LMDB's 4 GiB value limit",
                           w->temp_path, index, size);
    if (encoding == DLC_ENCODING_RAW) {
        uint64_t px;
        if (__builtin_mul_overflow((uint64_t)height, (uint64_t)width, &px) ||
            __builtin_mul_overflow(px, (uint64_t)channels, &px) || px != size)
            return dlc__errorf(DLC_EINVAL,
                               "%s: record %" PRIu64 ": raw payload of %zu bytes "
                               "is not %ux%ux%u",
                               w->temp_path, index, size, height, width, channels);
    }
    if ((size_t)label >= w->label_cap) {
        rc = grow_label_counts(w, (size_t)label);
        if (rc < 0)
            return rc;
    }

    const uint64_t value_len = DLC__RECORD_HEADER_SIZE + (uint64_t)size;
    const uint64_t cost = record_cost(w, value_len);
    /* From here on a failure leaves LMDB's transaction in an unknown state. */
    CHECK(ensure_room(w, cost));

    uint8_t key[DLC__KEY_SIZE];
    dlc__record_key(key, index);
    MDB_val k = {.mv_size = sizeof key, .mv_data = key};
    MDB_val v = {.mv_size = (size_t)value_len, .mv_data = NULL};
    /* APPEND: keys arrive in order, so LMDB fills leaf pages completely
     * instead of splitting them in half. RESERVE: copy the payload once,
     * straight into the page that gets written. */
    const int mrc = mdb_put(w->txn, w->dbi_samples, &k, &v, MDB_APPEND | MDB_RESERVE);
    if (mrc != 0) {
        rc = write_error(w, mrc, "write record");
        goto fail;
    }
    const dlc__record_header h = {
        .magic = DLC__RECORD_MAGIC,
        .header_size = DLC__RECORD_HEADER_SIZE,
        .encoding = (uint16_t)encoding,
        .label = label,
        .height = height,
        .width = width,
        .channels = channels,
        .flags = 0,
        .payload_size = size,
        .xxh3 = XXH3_64bits(payload, size),
    };
    dlc__record_header_store(v.mv_data, &h);
    if (size > 0)
        memcpy((uint8_t *)v.mv_data + DLC__RECORD_HEADER_SIZE, payload, size);

    uint8_t label_le[8];
    dlc__st64(label_le, (uint64_t)label);
    XXH3_64bits_update(w->digest, label_le, sizeof label_le);
    XXH3_64bits_update(w->digest, payload, size);
    if (index == 0) {
        w->encoding = encoding;
        w->height = height;
        w->width = width;
        w->channels = channels;
    } else {
        if (height != w->height || width != w->width) {
            w->height = 0;
            w->width = 0;
        }
        if (channels != w->channels)
            w->channels = 0;
    }
    if (label > w->max_label) {
        w->max_label = label;
        w->max_label_index = index;
    }
    w->label_counts[label]++;
    w->payload_bytes += size;
    w->count++;
    w->pending += cost;
    w->txn_bytes += size;
    w->txn_records++;

    if (w->txn_bytes >= TXN_MAX_BYTES || w->txn_records >= TXN_MAX_RECORDS) {
        CHECK(txn_commit(w));
        CHECK(txn_begin(w));
    }
    return DLC_OK;

fail:
    w->failed = 1;
    return rc;
}

static dlc_status put_meta(dlc__store_writer *w, const char *key, const void *data, size_t size)
{
    MDB_val k = {.mv_size = strlen(key), .mv_data = (void *)key};
    MDB_val v = {.mv_size = size, .mv_data = (void *)data};
    const int mrc = mdb_put(w->txn, w->dbi_meta, &k, &v, 0);
    if (mrc != 0)
        return write_error(w, mrc, "write metadata");
    return DLC_OK;
}

/* Fill the meta database in the open transaction. */
static dlc_status write_meta(dlc__store_writer *w, const dlc__store_meta *meta)
{
    dlc_status rc = DLC_OK;
    uint8_t *labels = NULL;
    uint8_t *counts = NULL;
    const uint32_t n = meta->num_labels;

    size_t labels_len = 0;
    for (uint32_t i = 0; i < n; i++) {
        FAIL_IF(!meta->label_names || !meta->label_names[i], DLC_EINVAL,
                "%s: label name %u is NULL", w->temp_path, i);
        labels_len += strlen(meta->label_names[i]) + 1;
    }
    const size_t build_len = meta->build_json ? strlen(meta->build_json) : 0;
    CHECK(ensure_room(w, labels_len + (size_t)n * 8 + build_len + 4 * w->psize));

    labels = malloc(labels_len ? labels_len : 1);
    counts = malloc(n ? (size_t)n * 8 : 1);
    FAIL_IF(!labels || !counts, -ENOMEM, "%s: out of memory", w->temp_path);
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        const size_t len = strlen(meta->label_names[i]) + 1;
        memcpy(labels + off, meta->label_names[i], len);
        off += len;
        dlc__st64(counts + (size_t)i * 8, i < w->label_cap ? w->label_counts[i] : 0);
    }

    const dlc__store_info_disk info = {
        .format_version = DLC_STORE_FORMAT_VERSION,
        .encoding = w->count ? w->encoding : DLC_ENCODING_RAW,
        .count = w->count,
        .height = w->height,
        .width = w->width,
        .channels = w->channels,
        .num_labels = n,
        .skipped = meta->skipped,
        .payload_bytes = w->payload_bytes,
        .content_digest = XXH3_64bits_digest(w->digest),
    };
    uint8_t block[DLC__INFO_SIZE];
    dlc__info_store(block, &info);
    dlc__st64(block + DLC__INFO_HASHED, XXH3_64bits(block, DLC__INFO_HASHED));

    char digest_hex[17];
    snprintf(digest_hex, sizeof digest_hex, "%016" PRIx64, meta->source_digest);

    CHECK(put_meta(w, DLC__META_FORMAT, block, sizeof block));
    CHECK(put_meta(w, DLC__META_LABELS, labels, labels_len));
    CHECK(put_meta(w, DLC__META_LABEL_COUNTS, counts, (size_t)n * 8));
    CHECK(put_meta(w, DLC__META_SOURCE_DIGEST, digest_hex, 16));
    if (meta->build_json)
        CHECK(put_meta(w, DLC__META_BUILD, meta->build_json, build_len));

fail:
    free(labels);
    free(counts);
    return rc;
}

/* Drop the bytes past the last used page (preallocated blocks included),
 * make the file durable, and move it over the final path. */
static dlc_status seal_file(dlc__store_writer *w, uint64_t used)
{
    dlc_status rc = DLC_OK;
    const int fd = open(w->temp_path, O_RDWR | O_CLOEXEC);
    FAIL_IF(fd < 0, -errno, "%s: cannot reopen: %s", w->temp_path, strerror(errno));
    FAIL_IF(ftruncate(fd, (off_t)used) != 0, -errno, "%s: cannot trim to %" PRIu64 " bytes: %s",
            w->temp_path, used, strerror(errno));
    /* Truncating to the current size does not free blocks that fallocate
     * reserved beyond the end; punching them out does. Failure only wastes
     * space, so it is not an error. */
    if (w->prealloc > used)
        (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)used,
                        (off_t)(w->prealloc - used));
    FAIL_IF(fsync(fd) != 0, -errno, "%s: fsync: %s", w->temp_path, strerror(errno));
    /* The rename is the commit point: before it FINAL is the old store (or
     * absent), after it the new one, whole and synced. */
    FAIL_IF(rename(w->temp_path, w->final_path) != 0, -errno, "%s: cannot rename to %s: %s",
            w->temp_path, w->final_path, strerror(errno));
    /* Without this fsync a crash could forget the rename itself. */
    CHECK(dlc__fsync_dir(w->final_path));

fail:
    if (fd >= 0)
        close(fd);
    return rc;
}

dlc_status dlc__store_writer_finish(dlc__store_writer *w, const dlc__store_meta *meta)
{
    dlc_status rc = DLC_OK;
    if (!w)
        return dlc__errorf(DLC_EINVAL, "store writer: NULL writer");
    FAIL_IF(w->failed, DLC_ESTATE, "%s: an earlier write failed; the store is not complete",
            w->temp_path);
    FAIL_IF(!meta, DLC_EINVAL, "%s: no metadata", w->temp_path);
    FAIL_IF(meta->num_labels > DLC__MAX_LABELS, DLC_EINVAL, "%s: %u labels, at most %u",
            w->temp_path, meta->num_labels, DLC__MAX_LABELS);
    FAIL_IF(w->max_label >= (int64_t)meta->num_labels, DLC_EINVAL,
            "%s: record %" PRIu64 ": label %" PRId64 " is not below the %u label names",
            w->temp_path, w->max_label_index, w->max_label, meta->num_labels);

    CHECK(write_meta(w, meta));
    CHECK(txn_commit(w));
    int mrc = mdb_env_sync(w->env, 1);
    if (mrc != 0) {
        rc = write_error(w, mrc, "sync");
        goto fail;
    }
    MDB_envinfo ei;
    mdb_env_info(w->env, &ei);
    const uint64_t used = ((uint64_t)ei.me_last_pgno + 1) * w->psize;
    mdb_env_close(w->env);
    w->env = NULL;
    CHECK(seal_file(w, used));
    writer_free(w);
    return DLC_OK;

fail:
    remove_temp(w);
    writer_free(w);
    return rc;
}

void dlc__store_writer_abort(dlc__store_writer *w)
{
    if (!w)
        return;
    remove_temp(w);
    writer_free(w);
}

uint64_t dlc__store_writer_count(const dlc__store_writer *w)
{
    return w ? w->count : 0;
}

const char *dlc__store_writer_temp_path(const dlc__store_writer *w)
{
    return w ? w->temp_path : NULL;
}
