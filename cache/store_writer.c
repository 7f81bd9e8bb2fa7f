/* The store writer (include/dlcache/writer.h): appends sealed records to PATH.tmp-PID, then
 * writes the schema, the offset table and the metadata, syncs, trims and renames
 * (docs/FORMAT.md). Records are laid out by record builders (store_record.c); this file only
 * copies their bytes into LMDB and keeps the per-field statistics the schema needs at finish. */
#include "common.h"
#include "store_format.h"
#include "store_internal.h"
#include "store_set.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <lmdb.h>
#include <signal.h>
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
/* JPEG quality of a field whose spec says 0. */
#define DEFAULT_QUALITY 90

/* What the writer learns about one field from the records appended. */
typedef struct field_stats {
    uint32_t dim0, dim1; /* Of the first record. */
    int uniform;         /* Every record so far has dim0, dim1. */
    uint32_t max_dim0, max_dim1;
    uint64_t max_size;
} field_stats;

struct dlc_writer {
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
    int writemap;      /* MDB_WRITEMAP over blocks reserved for the whole map (create_file()). */
    uint64_t size_hint;
    int failed;      /* A write failed: only abort is valid now. */
    int deferred;    /* The version 1 API: schema at the first record, labels checked at finish. */
    int auto_labels; /* num_labels = 0 with a LABEL field: "0".."K-1" named at finish. */

    int has_schema;
    uint32_t nf;
    uint64_t token; /* XXH3 of the schema as given: builders carry it to append. */
    uint32_t label_field;
    dlc_field fields[DLC_MAX_FIELDS];
    int quality[DLC_MAX_FIELDS];
    field_stats stats[DLC_MAX_FIELDS];

    char *labels; /* The "labels" value: names, each followed by NUL. */
    size_t labels_len;
    uint32_t num_labels;
    uint64_t skipped;
    char *build_json;
    uint64_t source_digest;

    uint64_t count;
    uint64_t payload_bytes;
    int64_t max_label;
    uint64_t max_label_index;
    uint64_t *label_counts;
    size_t label_cap;
    XXH3_state_t *digest; /* content_digest: 24 bytes per field per record. */

    int has_set_part; /* A part of a store set: finish writes "set_part" and may have no record. */
    uint8_t set_part[DLC__SET_PART_SIZE];
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
static uint64_t free_bytes(const dlc_writer *w)
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
static uint64_t record_cost(const dlc_writer *w, uint64_t value_len)
{
    const uint64_t node_max = ((w->psize - DLC__LMDB_PAGEHDRSZ) / 2 & ~(uint64_t)1) - 2;
    if (8 + DLC__KEY_SIZE + value_len <= node_max)
        return value_len + 24;
    const uint64_t pages = (DLC__LMDB_PAGEHDRSZ + value_len + w->psize - 1) / w->psize;
    return pages * w->psize + 24;
}

/* Turn a failed write into the message a user can act on: LMDB reports a
 * full disk as ENOSPC or, from a short pwrite, as EIO. */
static dlc_status write_error(dlc_writer *w, int rc, const char *what)
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

static dlc_status txn_begin(dlc_writer *w)
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

static dlc_status txn_commit(dlc_writer *w)
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
static dlc_status ensure_room(dlc_writer *w, uint64_t extra)
{
    /* Branch pages copied on write and the free list add a little to the
     * estimate; an eighth plus a fixed slack covers them with room to spare. */
    const uint64_t need = w->used + (w->pending + extra) + (w->pending + extra) / 8 + (4u << 20);
    if (need <= w->mapsize)
        return DLC_OK;
    dlc_status rc = txn_commit(w);
    if (rc < 0)
        return rc;
    /* A map of WRITEMAP is reserved block for block, so it grows by less than a sparse one. */
    uint64_t size = w->writemap ? w->mapsize + w->mapsize / 2 : w->mapsize * 2;
    const uint64_t floor = w->writemap ? need + need / 4 : need * 2;
    if (size < floor)
        size = floor;
    if (w->writemap) {
        int fd = -1;
        mdb_env_get_fd(w->env, &fd);
        /* Before LMDB extends the file and maps the new part: then no page of the map lacks
         * its block, and a full disk is this error rather than a SIGBUS later. */
        if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)size) != 0)
            return write_error(w, errno, "reserve blocks for the map");
        w->prealloc = size;
    }
    const int mrc = mdb_env_set_mapsize(w->env, (size_t)size);
    if (mrc != 0)
        return dlc__errorf(lmdb_status(mrc), "%s: cannot grow the map to %" PRIu64 " bytes: %s",
                           w->temp_path, size, mdb_strerror(mrc));
    w->mapsize = size;
    return txn_begin(w);
}

static void writer_free(dlc_writer *w)
{
    if (w->txn)
        mdb_txn_abort(w->txn);
    if (w->env)
        mdb_env_close(w->env);
    if (w->digest)
        XXH3_freeState(w->digest);
    free(w->label_counts);
    free(w->labels);
    free(w->build_json);
    free(w->final_path);
    free(w->temp_path);
    free(w->dir_path);
    free(w);
}

/* Remove the temporary file after a failure; the caller frees w. */
static void remove_temp(dlc_writer *w)
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

/* Parse "PID" or "PID-lock" (LMDB's lock file, should a writer ever make one). */
static int temp_pid(const char *s, long *pid)
{
    long v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        if (v > INT_MAX)
            return -1;
    }
    if (p == s || (*p != '\0' && strcmp(p, "-lock") != 0))
        return -1;
    *pid = v;
    return 0;
}

void dlc__remove_stale_temps(const char *final_path, dlc_log_fn log, void *user)
{
    const char *slash = strrchr(final_path, '/');
    char dir[PATH_MAX];
    const char *base = final_path;
    if (slash) {
        const size_t n = slash == final_path ? 1 : (size_t)(slash - final_path);
        if (n >= sizeof dir)
            return;
        memcpy(dir, final_path, n);
        dir[n] = '\0';
        base = slash + 1;
    } else {
        strcpy(dir, ".");
    }
    const size_t blen = strlen(base);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, base, blen) != 0 || strncmp(e->d_name + blen, ".tmp-", 5) != 0)
            continue;
        long pid;
        if (temp_pid(e->d_name + blen + 5, &pid) != 0 || pid == (long)getpid())
            continue;
        /* kill(pid, 0) fails with ESRCH only when no such process exists; a
         * live process (even one we may not signal) keeps its file. */
        if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH &&
            unlinkat(dirfd(d), e->d_name, 0) == 0)
            dlc__logf(log, user, DLC_LOG_INFO,
                      "%s/%s: removed the temporary file of an interrupted build (pid %ld)", dir,
                      e->d_name, pid);
    }
    closedir(d);
}

/* The paths of a writer of @p final_path, and the early checks that need no file yet. */
static dlc_status paths_init(dlc_writer *w, const char *final_path, int force)
{
    dlc_status rc = DLC_OK;
    struct stat st;
    if (stat(final_path, &st) == 0) {
        FAIL_IF(!force, DLC_EEXIST, "%s: exists; use --force to replace it", final_path);
        FAIL_IF(S_ISDIR(st.st_mode), DLC_EINVAL, "%s: is a directory, not a store file",
                final_path);
    }
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
fail:
    return rc;
}

/* Create the temporary file, choose how LMDB writes it, and reserve its blocks up front, so
 * that a disk too small fails here with a clear message rather than hours into the build.
 *
 * With MDB_WRITEMAP, mdb_put(MDB_RESERVE) hands out a place in a shared map of the file, and a
 * record is copied once, by the writer, straight into the page cache. Without it LMDB copies
 * the record into a malloc'd dirty page and write()s that page at commit: on a 1-thread build
 * of the demo data the kernel's copy of those writes took 28% of the time and the faults of
 * the fresh anonymous pages malloc hands out after every commit another 6-9%. The danger of
 * WRITEMAP is a full disk: a store to a page of the map whose block the file system cannot
 * allocate kills the process with SIGBUS instead of failing a write(). So the map is never
 * larger than the blocks reserved for it with fallocate(): here for the first map, and in
 * ensure_room() before every growth (KEEP_SIZE: LMDB itself extends the file when it maps
 * it). Where the whole first map cannot be reserved (no fallocate on this file system, or a
 * disk with room for the estimated store but not for the map's slack) the writer goes without
 * WRITEMAP, reserving the estimate alone as before: slower, never wrong. Other fallocate errors
 * only lose the early warning; the build still reports a full disk when it happens. */
static dlc_status create_file(dlc_writer *w, uint64_t want)
{
    const int fd = open(w->temp_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return dlc__errorf(-errno, "%s: cannot create: %s", w->temp_path, strerror(errno));
    dlc_status rc = DLC_OK;
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)w->mapsize) == 0) {
        w->writemap = 1;
        w->prealloc = w->mapsize;
    } else if (w->size_hint > 0 && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)want) == 0) {
        w->prealloc = want;
    } else if (w->size_hint > 0 && errno == ENOSPC) {
        rc = dlc__errorf(-ENOSPC, "%s: disk full: need about %" PRIu64 " bytes, %" PRIu64 " free",
                         w->temp_path, want, free_bytes(w));
    }
    close(fd);
    return rc;
}

/* Create the temporary LMDB file and its two databases. */
static dlc_status files_open(dlc_writer *w, uint64_t size_hint)
{
    dlc_status rc = DLC_OK;
    int mrc;
    struct statvfs sv;
    FAIL_IF(statvfs(w->dir_path, &sv) != 0, -errno, "%s: directory: %s", w->dir_path,
            strerror(errno));
    /* The cheap early answer; fallocate below gives the exact one. */
    const uint64_t want = size_hint + size_hint / 16 + (1u << 20);
    const uint64_t avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    FAIL_IF(size_hint > 0 && want > avail, -ENOSPC,
            "%s: disk full: need about %" PRIu64 " bytes, %" PRIu64 " free", w->final_path, want,
            avail);
    /* A temporary file of this PID can only be a leftover of a process that
     * died with our PID long ago: it is garbage. Those of other dead ones too. */
    FAIL_IF(unlink(w->temp_path) != 0 && errno != ENOENT, -errno, "%s: cannot remove: %s",
            w->temp_path, strerror(errno));
    dlc__remove_stale_temps(w->final_path, NULL, NULL);

    mrc = mdb_env_create(&w->env);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: %s", w->temp_path, mdb_strerror(mrc));
    mdb_env_set_maxdbs(w->env, DLC__MAX_DBS);
    w->size_hint = size_hint;
    w->mapsize = size_hint + size_hint / 8 + MAP_MIN;
    mdb_env_set_mapsize(w->env, (size_t)w->mapsize);
    CHECK(create_file(w, want));
    /* NOSYNC/NOMETASYNC: one fsync at finish is all the durability a build
     * needs, since the file is not the store until the rename. NOLOCK: the
     * temporary file has one writer and no readers, and no lock file is left
     * behind. WRITEMAP only over reserved blocks (create_file()). */
    const unsigned flags = MDB_NOSUBDIR | MDB_NOSYNC | MDB_NOMETASYNC | MDB_NOLOCK | MDB_NOTLS |
                           (w->writemap ? MDB_WRITEMAP : 0u);
    mrc = mdb_env_open(w->env, w->temp_path, flags, 0644);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: cannot create: %s", w->temp_path, mdb_strerror(mrc));
    MDB_stat ms;
    mdb_env_stat(w->env, &ms);
    w->psize = ms.ms_psize;
    w->used = 2 * w->psize; /* The two meta pages. */
    CHECK(txn_begin(w));
    mrc = mdb_dbi_open(w->txn, DLC__DB_META, MDB_CREATE, &w->dbi_meta);
    if (mrc == 0)
        mrc = mdb_dbi_open(w->txn, DLC__DB_SAMPLES, MDB_CREATE, &w->dbi_samples);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: cannot create databases: %s", w->temp_path,
            mdb_strerror(mrc));
fail:
    return rc;
}

/* A writer with its file open and no schema yet. */
static dlc_status writer_create(const char *path, int force, uint64_t size_hint, dlc_writer **out)
{
    dlc_status rc = DLC_OK;
    dlc_writer *w = NULL;
    *out = NULL;
    w = calloc(1, sizeof *w);
    FAIL_IF(!w, -ENOMEM, "%s: out of memory", path);
    w->max_label = -1;
    w->label_field = DLC_NO_FIELD;
    CHECK(paths_init(w, path, force));
    CHECK(files_open(w, size_hint));
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

/* ---- The schema ------------------------------------------------------------------------------ */

/* Turn spec @p i into a field; names and links are resolved here, every other rule is
 * dlc__schema_check()'s. */
static dlc_status spec_to_field(const char *path, const dlc_field_spec *specs, uint32_t n,
                                uint32_t i, dlc_field *f, int *quality)
{
    const dlc_field_spec *s = &specs[i];
    memset(f, 0, sizeof *f);
    if (!s->name)
        return dlc__errorf(DLC_EINVAL, "%s: schema: field %u: no name", path, i);
    const size_t len = strlen(s->name);
    if (len >= sizeof f->name)
        return dlc__errorf(DLC_EINVAL,
                           "%s: schema: field %u: a name of %zu characters; at most %zu", path, i,
                           len, sizeof f->name - 1);
    memcpy(f->name, s->name, len);
    f->kind = s->kind;
    f->encoding = s->encoding;
    f->flags = s->flags;
    f->link = DLC_NO_FIELD;
    memcpy(f->shape, s->shape, sizeof f->shape);
    switch (s->kind) {
    case DLC_FIELD_IMAGE:
        f->dtype = DLC_DTYPE_UINT8;
        /* ndim says nothing new for an image: 0 (not given) or 3. */
        f->ndim = s->ndim ? s->ndim : 3;
        break;
    case DLC_FIELD_NDARRAY:
        f->dtype = s->dtype;
        f->ndim = s->ndim;
        break;
    default:
        f->dtype = s->kind == DLC_FIELD_INT     ? DLC_DTYPE_INT64
                   : s->kind == DLC_FIELD_FLOAT ? DLC_DTYPE_FLOAT64
                                                : DLC_DTYPE_UINT8;
        f->ndim = s->ndim;
    }
    if (s->link) {
        for (uint32_t j = 0; j < n; j++)
            if (specs[j].name && strcmp(specs[j].name, s->link) == 0)
                f->link = j;
        if (f->link == DLC_NO_FIELD)
            return dlc__errorf(DLC_EINVAL,
                               "%s: schema: field %u \"%s\": link \"%.64s\" names no field", path,
                               i, f->name, s->link);
    }
    *quality = s->quality ? s->quality : DEFAULT_QUALITY;
    if (s->kind == DLC_FIELD_IMAGE && s->encoding == DLC_ENCODING_JPEG &&
        (*quality < 1 || *quality > 100))
        return dlc__errorf(DLC_EINVAL,
                           "%s: schema: field %u \"%s\": JPEG quality %d is not in 1..100", path, i,
                           f->name, s->quality);
    return DLC_OK;
}

static dlc_status set_schema(dlc_writer *w, const dlc_field_spec *specs, uint32_t n)
{
    if (w->has_schema || w->count > 0)
        return dlc__errorf(DLC_ESTATE, "%s: the schema is already set", w->temp_path);
    if (!specs || n == 0 || n > DLC_MAX_FIELDS)
        return dlc__errorf(DLC_EINVAL, "%s: schema: %u fields; a record has 1 to %u", w->final_path,
                           specs ? n : 0, DLC_MAX_FIELDS);
    for (uint32_t i = 0; i < n; i++) {
        const dlc_status rc =
            spec_to_field(w->final_path, specs, n, i, &w->fields[i], &w->quality[i]);
        if (rc < 0)
            return rc;
    }
    char prefix[PATH_MAX + 16];
    snprintf(prefix, sizeof prefix, "%s: schema", w->final_path);
    const dlc_status rc = dlc__schema_check(w->fields, n, DLC_EINVAL, prefix);
    if (rc < 0)
        return rc;
    uint8_t entries[DLC_MAX_FIELDS * DLC__SCHEMA_ENTRY_SIZE];
    for (uint32_t i = 0; i < n; i++) {
        dlc__schema_entry_store(entries + (size_t)i * DLC__SCHEMA_ENTRY_SIZE, &w->fields[i]);
        if (w->fields[i].flags & DLC_FIELD_LABEL)
            w->label_field = i;
        w->stats[i] = (field_stats){.uniform = 1};
    }
    w->token = XXH3_64bits(entries, (size_t)n * DLC__SCHEMA_ENTRY_SIZE);
    w->nf = n;
    w->has_schema = 1;
    return DLC_OK;
}

/* Copy @p n label names into the "labels" value and size the label counts. */
static dlc_status set_labels(dlc_writer *w, const char *const *names, uint32_t n)
{
    if (n > DLC__MAX_LABELS)
        return dlc__errorf(DLC_EINVAL, "%s: %u labels, at most %u", w->final_path, n,
                           DLC__MAX_LABELS);
    size_t len = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!names || !names[i])
            return dlc__errorf(DLC_EINVAL, "%s: label name %u is NULL", w->final_path, i);
        len += strlen(names[i]) + 1;
    }
    char *blob = malloc(len ? len : 1);
    uint64_t *counts = calloc(n > w->label_cap ? n : w->label_cap ? w->label_cap : 1, 8);
    if (!blob || !counts) {
        free(blob);
        free(counts);
        return dlc__errorf(-ENOMEM, "%s: out of memory for %u label names", w->final_path, n);
    }
    for (size_t i = 0, off = 0; i < n; i++) {
        const size_t l = strlen(names[i]) + 1;
        memcpy(blob + off, names[i], l);
        off += l;
    }
    if (w->label_counts)
        memcpy(counts, w->label_counts, w->label_cap * 8);
    free(w->labels);
    free(w->label_counts);
    w->labels = blob;
    w->labels_len = len;
    w->num_labels = n;
    w->label_counts = counts;
    if (n > w->label_cap)
        w->label_cap = n;
    return DLC_OK;
}

dlc_status dlc_writer_open(const char *path, const dlc_writer_config *config, dlc_writer **out)
{
    dlc_status rc = DLC_OK;
    dlc_writer *w = NULL;
    if (out)
        *out = NULL;
    FAIL_IF(!path || !*path || !config || !out, DLC_EINVAL, "dlc_writer_open: %s",
            !path || !*path ? "no output path" : "NULL argument");
    /* Everything about the schema is checked before a file is made. */
    dlc_writer probe = {.final_path = (char *)path, .label_field = DLC_NO_FIELD};
    CHECK(set_schema(&probe, config->fields, config->num_fields));
    const int has_label = probe.label_field != DLC_NO_FIELD;
    FAIL_IF(has_label && config->num_labels == 0 && config->label_names, DLC_EINVAL,
            "%s: schema: field \"%s\" is the LABEL: label_names given without num_labels (0 "
            "with no names names the labels \"0\"..\"K-1\" at finish)",
            path, probe.fields[probe.label_field].name);
    FAIL_IF(!has_label && config->num_labels > 0, DLC_EINVAL,
            "%s: %u label names but no field is the LABEL", path, config->num_labels);

    CHECK(writer_create(path, config->force, config->size_hint, &w));
    CHECK(set_schema(w, config->fields, config->num_fields));
    CHECK(set_labels(w, config->label_names, config->num_labels));
    w->auto_labels = has_label && config->num_labels == 0;
    if (config->build_json) {
        w->build_json = str_dup(config->build_json);
        FAIL_IF(!w->build_json, -ENOMEM, "%s: out of memory", path);
    }
    w->source_digest = config->source_digest;
    *out = w;
    return DLC_OK;
fail:
    dlc_writer_abort(w);
    return rc;
}

dlc_status dlc__writer_open_deferred(const char *path, int force, uint64_t size_hint,
                                     dlc_writer **out)
{
    if (out)
        *out = NULL;
    if (!path || !*path || !out)
        return dlc__errorf(DLC_EINVAL, "store writer: no output path");
    const dlc_status rc = writer_create(path, force, size_hint, out);
    if (rc == DLC_OK)
        (*out)->deferred = 1;
    return rc;
}

dlc_status dlc__writer_set_schema(dlc_writer *w, const dlc_field_spec *fields, uint32_t n)
{
    return set_schema(w, fields, n);
}

int dlc__writer_has_schema(const dlc_writer *w)
{
    return w->has_schema;
}

dlc_status dlc__writer_set_meta(dlc_writer *w, const char *const *label_names, uint32_t num_labels,
                                uint64_t skipped, const char *build_json, uint64_t source_digest)
{
    if (num_labels > DLC__MAX_LABELS)
        return dlc__errorf(DLC_EINVAL, "%s: %u labels, at most %u", w->temp_path, num_labels,
                           DLC__MAX_LABELS);
    if (w->max_label >= (int64_t)num_labels)
        return dlc__errorf(
            DLC_EINVAL, "%s: record %" PRIu64 ": label %" PRId64 " is not below the %u label names",
            w->temp_path, w->max_label_index, w->max_label, num_labels);
    const dlc_status rc = set_labels(w, label_names, num_labels);
    if (rc < 0)
        return rc;
    w->skipped = skipped;
    free(w->build_json);
    w->build_json = build_json ? str_dup(build_json) : NULL;
    if (build_json && !w->build_json)
        return dlc__errorf(-ENOMEM, "%s: out of memory", w->temp_path);
    w->source_digest = source_digest;
    return DLC_OK;
}

dlc_status dlc__writer_set_part(dlc_writer *w, uint32_t part, uint32_t parts, uint64_t set_id,
                                uint64_t first_item, uint64_t end_item)
{
    if (!w)
        return dlc__errorf(DLC_EINVAL, "dlc__writer_set_part: NULL writer");
    if (parts == 0 || parts > DLC__SET_MAX_SHARDS || part >= parts || first_item > end_item)
        return dlc__errorf(DLC_EINVAL,
                           "%s: part %u of %u, items [%" PRIu64 ", %" PRIu64
                           "): a set has 1 to %u parts, numbered from 0, and a part's items "
                           "start before they end",
                           w->final_path, part, parts, first_item, end_item, DLC__SET_MAX_SHARDS);
    const dlc__set_part p = {part, parts, set_id, first_item, end_item};
    dlc__set_part_encode(w->set_part, &p);
    w->has_set_part = 1;
    return DLC_OK;
}

const char *dlc__writer_temp_path(const dlc_writer *w)
{
    return w ? w->temp_path : NULL;
}

const dlc_field *dlc__writer_fields(const dlc_writer *w, uint32_t *n, uint64_t *token)
{
    *n = w->nf;
    *token = w->token;
    return w->fields;
}

int dlc__writer_quality(const dlc_writer *w, uint32_t i)
{
    return w->quality[i];
}

int dlc_writer_find_field(const dlc_writer *w, const char *name)
{
    if (!w || !name)
        return -1;
    for (uint32_t i = 0; i < w->nf; i++)
        if (strcmp(w->fields[i].name, name) == 0)
            return (int)i;
    return -1;
}

uint64_t dlc_writer_count(const dlc_writer *w)
{
    return w ? w->count : 0;
}

void dlc_writer_add_skipped(dlc_writer *w, uint64_t n)
{
    if (w)
        w->skipped += n;
}

/* ---- Records --------------------------------------------------------------------------------- */

static dlc_status grow_label_counts(dlc_writer *w, size_t label)
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

/* The label value of sealed record @p value, checked; -1 when the schema has no label field. */
static dlc_status check_label(dlc_writer *w, const uint8_t *value, int64_t *label)
{
    *label = -1;
    if (w->label_field == DLC_NO_FIELD)
        return DLC_OK;
    const int64_t v = (int64_t)dlc__ld64(value + DLC__RECORD2_FIXED +
                                         (size_t)w->label_field * DLC__FIELD_ENTRY_SIZE);
    const int64_t limit =
        w->deferred || w->auto_labels ? (int64_t)DLC__MAX_LABELS : (int64_t)w->num_labels;
    if (v < 0 || v >= limit)
        return dlc__errorf(DLC_EINVAL,
                           "%s: record %" PRIu64 ": field \"%s\": label %" PRId64
                           " out of range 0..%" PRId64,
                           w->final_path, w->count, w->fields[w->label_field].name, v, limit - 1);
    if ((size_t)v >= w->label_cap) {
        const dlc_status rc = grow_label_counts(w, (size_t)v);
        if (rc < 0)
            return rc;
    }
    *label = v;
    return DLC_OK;
}

/* Per-field statistics, the content digest and the label count of the record just written. */
static void account(dlc_writer *w, const uint8_t *value, int64_t label)
{
    uint8_t items[DLC_MAX_FIELDS * DLC__DIGEST_ITEM];
    for (uint32_t f = 0; f < w->nf; f++) {
        dlc__field_entry e;
        dlc__field_entry_load(value + DLC__RECORD2_FIXED + (size_t)f * DLC__FIELD_ENTRY_SIZE, &e);
        dlc__digest_item(items + (size_t)f * DLC__DIGEST_ITEM, e.xxh3, e.size, e.dim0, e.dim1);
        field_stats *st = &w->stats[f];
        if (w->count == 0) {
            st->dim0 = e.dim0;
            st->dim1 = e.dim1;
        } else if (e.dim0 != st->dim0 || e.dim1 != st->dim1) {
            st->uniform = 0;
        }
        if (e.dim0 > st->max_dim0)
            st->max_dim0 = e.dim0;
        if (e.dim1 > st->max_dim1)
            st->max_dim1 = e.dim1;
        if (e.size > st->max_size)
            st->max_size = e.size;
    }
    XXH3_64bits_update(w->digest, items, (size_t)w->nf * DLC__DIGEST_ITEM);
    if (label >= 0) {
        w->label_counts[label]++;
        if (label > w->max_label) {
            w->max_label = label;
            w->max_label_index = w->count;
        }
    }
}

dlc_status dlc_writer_append(dlc_writer *w, dlc_record_builder *b)
{
    dlc_status rc = DLC_OK;
    if (!w || !b)
        return dlc__errorf(DLC_EINVAL, "dlc_writer_append: NULL argument");
    if (w->failed)
        return dlc__errorf(DLC_ESTATE, "%s: an earlier write failed; abort the writer",
                           w->temp_path);
    dlc__sealed rec;
    rc = dlc__record_sealed(b, &rec);
    if (rc < 0)
        return rc;
    if (!w->has_schema || rec.token != w->token)
        return dlc__errorf(DLC_ESTATE, "%s: the record was built for another schema",
                           w->final_path);
    int64_t label;
    rc = check_label(w, rec.value, &label);
    if (rc < 0)
        return rc;

    const uint64_t cost = record_cost(w, rec.size);
    /* From here on a failure leaves LMDB's transaction in an unknown state. */
    CHECK(ensure_room(w, cost));
    uint8_t key[DLC__KEY_SIZE];
    dlc__record_key(key, w->count);
    MDB_val k = {.mv_size = sizeof key, .mv_data = key};
    MDB_val v = {.mv_size = rec.size, .mv_data = NULL};
    /* APPEND: keys arrive in order, so LMDB fills leaf pages completely
     * instead of splitting them in half. RESERVE: copy the record once,
     * straight into the page that gets written. */
    const int mrc = mdb_put(w->txn, w->dbi_samples, &k, &v, MDB_APPEND | MDB_RESERVE);
    if (mrc != 0) {
        rc = write_error(w, mrc, "write record");
        goto fail;
    }
    memcpy(v.mv_data, rec.value, rec.size);
    /* The record's number is known only now: builders seal records before their order is. */
    dlc__st64((uint8_t *)v.mv_data + 8, w->count);
    account(w, rec.value, label);
    dlc__record_appended(b);
    w->payload_bytes += rec.payload;
    w->count++;
    w->pending += cost;
    w->txn_bytes += rec.size;
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

/* ---- Finish ---------------------------------------------------------------------------------- */

/* The schema as written: variable fields whose records all agree become fixed (fixed shapes
 * stack into batches), and the largest sizes seen are recorded. */
static dlc_status final_schema(dlc_writer *w)
{
    for (uint32_t i = 0; i < w->nf; i++) {
        dlc_field *f = &w->fields[i];
        const field_stats *st = &w->stats[i];
        const int image = f->kind == DLC_FIELD_IMAGE;
        if ((f->flags & DLC_FIELD_VARIABLE) && w->count > 0 && st->uniform && st->dim0 > 0) {
            f->flags &= ~(uint32_t)DLC_FIELD_VARIABLE;
            f->shape[0] = st->dim0;
            if (image)
                f->shape[1] = st->dim1;
        }
        const int fixed = !(f->flags & DLC_FIELD_VARIABLE);
        f->max_dim0 = fixed && (image || f->kind == DLC_FIELD_NDARRAY) ? f->shape[0] : st->max_dim0;
        f->max_dim1 = image ? (fixed ? f->shape[1] : st->max_dim1) : 0;
        if (dlc__kind_is_scalar(f->kind))
            f->max_size = 8;
        else if (f->kind == DLC_FIELD_NDARRAY)
            f->max_size = (uint64_t)f->max_dim0 * dlc__field_row_bytes(f);
        else if (image && f->encoding == DLC_ENCODING_RAW)
            f->max_size = fixed ? (uint64_t)f->shape[0] * f->shape[1] * f->shape[2] : st->max_size;
        else
            f->max_size = st->max_size;
    }
    /* What the reader will check, checked before anything is published: a failure here is a
     * bug of this file, not of the caller. */
    char prefix[PATH_MAX + 32];
    snprintf(prefix, sizeof prefix, "%s: internal error: final schema", w->temp_path);
    const dlc_status rc = dlc__schema_check(w->fields, w->nf, DLC_EINVAL, prefix);
    return rc < 0 ? rc : dlc__schema_check_maxes(w->fields, w->nf, w->count, DLC_EINVAL, prefix);
}

/* The offset table: the file offset of every record's value, found with a cursor in the open
 * transaction, which has not touched the samples database (so every value is on a page of the
 * map, at the place it will have in the file). LMDB does not tell where its map starts; a
 * value's page does: an overflow value starts 16 bytes after its page (at no other offset can a
 * leaf value sit, behind its node header and key), a leaf value inside its page, and every page
 * begins with its own page number. */
static dlc_status build_index(dlc_writer *w, uint8_t *index)
{
    dlc_status rc = DLC_OK;
    MDB_cursor *cur = NULL;
    int mrc = mdb_cursor_open(w->txn, w->dbi_samples, &cur);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: cursor: %s", w->temp_path, mdb_strerror(mrc));
    uintptr_t base = 0;
    uint64_t i = 0;
    MDB_val k, v;
    for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == 0;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), i++) {
        const uintptr_t p = (uintptr_t)v.mv_data;
        FAIL_IF(i >= w->count || dlc__record_key_value(k.mv_data) != i, DLC_ECORRUPT,
                "%s: record %" PRIu64 ": the samples database is out of order", w->temp_path, i);
        if (i == 0) {
            const uintptr_t page = p % w->psize == DLC__LMDB_PAGEHDRSZ
                                       ? p - DLC__LMDB_PAGEHDRSZ
                                       : p & ~(uintptr_t)(w->psize - 1);
            base = page - (uintptr_t)(dlc__ld64((const uint8_t *)page) * w->psize);
        }
        FAIL_IF(p < base || p - base + v.mv_size > w->used, DLC_ECORRUPT,
                "%s: record %" PRIu64 ": cannot place the value in the file", w->temp_path, i);
        dlc__st64(index + i * 8, (uint64_t)(p - base));
    }
    FAIL_IF(mrc != MDB_NOTFOUND, lmdb_status(mrc), "%s: cursor: %s", w->temp_path,
            mdb_strerror(mrc));
    FAIL_IF(i != w->count, DLC_ECORRUPT, "%s: %" PRIu64 " records in the file, %" PRIu64 " written",
            w->temp_path, i, w->count);
fail:
    if (cur)
        mdb_cursor_close(cur);
    return rc;
}

static dlc_status put_meta(dlc_writer *w, const char *key, const void *data, size_t size)
{
    MDB_val k = {.mv_size = strlen(key), .mv_data = (void *)key};
    MDB_val v = {.mv_size = size, .mv_data = (void *)data};
    const int mrc = mdb_put(w->txn, w->dbi_meta, &k, &v, 0);
    if (mrc != 0)
        return write_error(w, mrc, "write metadata");
    return DLC_OK;
}

/* The "format" block of version 2. */
static void format_block(const dlc_writer *w, uint8_t block[DLC__INFO_SIZE])
{
    const dlc__store_info2_disk info = {
        .format_version = DLC_STORE_FORMAT_VERSION,
        .num_fields = w->nf,
        .count = w->count,
        .label_field = w->label_field,
        .num_labels = w->num_labels,
        .skipped = w->skipped,
        .payload_bytes = w->payload_bytes,
        .content_digest = XXH3_64bits_digest(w->digest),
    };
    dlc__info2_store(block, &info);
    dlc__st64(block + DLC__INFO_HASHED, XXH3_64bits(block, DLC__INFO_HASHED));
}

/* Fill the meta database in the open transaction, which must have room (ensure_room). */
static dlc_status write_meta(dlc_writer *w, const uint8_t *index)
{
    dlc_status rc = DLC_OK;
    uint8_t *counts = malloc(w->num_labels ? (size_t)w->num_labels * 8 : 1);
    FAIL_IF(!counts, -ENOMEM, "%s: out of memory", w->temp_path);
    for (uint32_t i = 0; i < w->num_labels; i++)
        dlc__st64(counts + (size_t)i * 8, i < w->label_cap ? w->label_counts[i] : 0);
    uint8_t schema[DLC_MAX_FIELDS * DLC__SCHEMA_ENTRY_SIZE];
    for (uint32_t i = 0; i < w->nf; i++) {
        uint8_t *e = schema + (size_t)i * DLC__SCHEMA_ENTRY_SIZE;
        dlc__schema_entry_store(e, &w->fields[i]);
        dlc__st64(e + DLC__SCHEMA_ENTRY_HASHED, XXH3_64bits(e, DLC__SCHEMA_ENTRY_HASHED));
    }
    uint8_t block[DLC__INFO_SIZE];
    format_block(w, block);

    CHECK(put_meta(w, DLC__META_FORMAT, block, sizeof block));
    CHECK(put_meta(w, DLC__META_SCHEMA, schema, (size_t)w->nf * DLC__SCHEMA_ENTRY_SIZE));
    CHECK(put_meta(w, DLC__META_INDEX, index, (size_t)w->count * 8));
    CHECK(put_meta(w, DLC__META_LABELS, w->labels ? w->labels : "", w->labels_len));
    CHECK(put_meta(w, DLC__META_LABEL_COUNTS, counts, (size_t)w->num_labels * 8));
    if (w->source_digest) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, w->source_digest);
        CHECK(put_meta(w, DLC__META_SOURCE_DIGEST, hex, 16));
    }
    if (w->build_json)
        CHECK(put_meta(w, DLC__META_BUILD, w->build_json, strlen(w->build_json)));
    if (w->has_set_part)
        CHECK(put_meta(w, DLC__META_SET_PART, w->set_part, sizeof w->set_part));
fail:
    free(counts);
    return rc;
}

/* Drop the bytes past the last used page (preallocated blocks included),
 * make the file durable, and move it over the final path. */
static dlc_status seal_file(dlc_writer *w, uint64_t used)
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

/* A deferred writer that got no record writes the version 1 API's schema with defaults. */
static dlc_status default_schema(dlc_writer *w)
{
    const dlc_field_spec fields[2] = {
        {.name = "image", .kind = DLC_FIELD_IMAGE, .flags = DLC_FIELD_VARIABLE, .shape = {0, 0, 3}},
        {.name = "label", .kind = DLC_FIELD_INT, .flags = DLC_FIELD_LABEL},
    };
    return set_schema(w, fields, 2);
}

/* The labels of a writer opened with num_labels = 0: K = the largest label + 1, named by their
 * numbers. The blob is made directly: an array of 2^24 name pointers would cost more than it. */
static dlc_status name_labels_by_number(dlc_writer *w)
{
    const uint32_t k = (uint32_t)(w->max_label + 1);
    size_t len = 0;
    for (uint32_t i = 0; i < k; i++)
        len += (size_t)snprintf(NULL, 0, "%u", i) + 1;
    char *blob = malloc(len ? len : 1);
    if (!blob)
        return dlc__errorf(-ENOMEM, "%s: out of memory for %u label names", w->temp_path, k);
    size_t off = 0;
    for (uint32_t i = 0; i < k; i++)
        off += (size_t)snprintf(blob + off, len - off, "%u", i) + 1;
    free(w->labels);
    w->labels = blob;
    w->labels_len = len;
    w->num_labels = k; /* check_label() grew label_counts past every label seen. */
    return DLC_OK;
}

/* Everything of finish up to the closed, synced environment; returns the file bytes used. */
static dlc_status write_store(dlc_writer *w, uint64_t *used)
{
    dlc_status rc = DLC_OK;
    uint8_t *index = NULL;
    if (!w->has_schema && w->deferred)
        CHECK(default_schema(w));
    /* A part of a set may be empty: every item of its range may have been skipped. */
    FAIL_IF(w->count == 0 && !w->deferred && !w->has_set_part, DLC_EINVAL,
            "%s: no record was appended", w->final_path);
    if (w->auto_labels)
        CHECK(name_labels_by_number(w));
    CHECK(final_schema(w));
    /* The index is taken in a transaction of its own, after every record is committed: then no
     * samples page is dirty, and each value pointer is into the map. */
    CHECK(txn_commit(w));
    CHECK(txn_begin(w));
    const size_t index_len = (size_t)w->count * 8;
    CHECK(ensure_room(w, index_len + w->labels_len + (uint64_t)w->num_labels * 8 +
                             (w->build_json ? strlen(w->build_json) : 0) + 64 * w->psize));
    index = malloc(index_len ? index_len : 1);
    FAIL_IF(!index, -ENOMEM, "%s: out of memory for an offset table of %zu bytes", w->temp_path,
            index_len);
    CHECK(build_index(w, index));
    CHECK(write_meta(w, index));
    CHECK(txn_commit(w));
    const int mrc = mdb_env_sync(w->env, 1);
    if (mrc != 0) {
        rc = write_error(w, mrc, "sync");
        goto fail;
    }
    MDB_envinfo ei;
    mdb_env_info(w->env, &ei);
    *used = ((uint64_t)ei.me_last_pgno + 1) * w->psize;
    mdb_env_close(w->env);
    w->env = NULL;
fail:
    free(index);
    return rc;
}

dlc_status dlc_writer_finish(dlc_writer *w)
{
    dlc_status rc = DLC_OK;
    if (!w)
        return dlc__errorf(DLC_EINVAL, "dlc_writer_finish: NULL writer");
    FAIL_IF(w->failed, DLC_ESTATE, "%s: an earlier write failed; the store is not complete",
            w->temp_path);
    uint64_t used = 0;
    CHECK(write_store(w, &used));
    CHECK(seal_file(w, used));
    writer_free(w);
    return DLC_OK;
fail:
    remove_temp(w);
    writer_free(w);
    return rc;
}

void dlc_writer_abort(dlc_writer *w)
{
    if (!w)
        return;
    remove_temp(w);
    writer_free(w);
}
