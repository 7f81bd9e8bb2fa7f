/* The store reader: open and check a store, lend records as views into the
 * LMDB map, verify checksums (include/dlcache/store.h, docs/FORMAT.md). */
#include "common.h"
#include "store_format.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* More metadata keys than this is not a store we wrote. */
#define MAX_META_KEYS 256u
/* dlc_store_verify() reports progress after each this many payload bytes. */
#define VERIFY_PROGRESS_BYTES (64ull << 20)

typedef struct meta_entry {
    const uint8_t *key; /* Into the map. */
    size_t key_len;
    const uint8_t *val; /* Into the map. */
    size_t val_len;
} meta_entry;

struct dlc_store {
    char *path;
    int fd; /* Our own O_RDONLY descriptor, for pread and io_uring. */
    uint64_t file_size;
    MDB_env *env;
    MDB_dbi dbi_samples;
    const uint8_t *map; /* LMDB's map of the whole file. */
    dlc_store_info info;
    char *labels; /* Copy of the "labels" value. */
    const char **label_names;
    uint64_t *label_counts;
    meta_entry *meta;
    size_t num_meta;
};

struct dlc_store_reader {
    const dlc_store *s;
    MDB_txn *txn;
};

static dlc_status lmdb_status(int rc)
{
    if (rc > 0)
        return -rc;
    if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH)
        return DLC_EVERSION;
    return DLC_ECORRUPT;
}

/* Is [p, p+len) inside the file's part of the map? */
static int in_file(const dlc_store *s, const void *p, size_t len)
{
    const uintptr_t a = (uintptr_t)p, base = (uintptr_t)s->map;
    return a >= base && a - base <= s->file_size && len <= s->file_size - (a - base);
}

static const meta_entry *find_meta(const dlc_store *s, const char *key)
{
    const size_t n = strlen(key);
    for (size_t i = 0; i < s->num_meta; i++)
        if (s->meta[i].key_len == n && memcmp(s->meta[i].key, key, n) == 0)
            return &s->meta[i];
    return NULL;
}

/* Decode and check the "format", "labels" and "label_counts" values. */
static dlc_status load_info(dlc_store *s, uint64_t samples_entries)
{
    dlc_status rc = DLC_OK;
    const meta_entry *e = find_meta(s, DLC__META_FORMAT);
    FAIL_IF(!e || e->val_len < 12 || memcmp(e->val, DLC__INFO_MAGIC, 8) != 0, DLC_EVERSION,
            "%s: not a dlcache store (no \"format\" record in its metadata)", s->path);
    const uint32_t version = dlc__ld32(e->val + 8);
    FAIL_IF(version > DLC_STORE_FORMAT_VERSION || version == 0, DLC_EVERSION,
            "%s: store format version %u, this library reads version %u", s->path, version,
            DLC_STORE_FORMAT_VERSION);
    FAIL_IF(e->val_len != DLC__INFO_SIZE, DLC_ECORRUPT,
            "%s: corrupt: format record of %zu bytes, expected %u", s->path, e->val_len,
            DLC__INFO_SIZE);
    dlc__store_info_disk d;
    dlc__info_load(e->val, &d);
    const uint64_t h = XXH3_64bits(e->val, DLC__INFO_HASHED);
    FAIL_IF(h != d.xxh3, DLC_ECORRUPT,
            "%s: corrupt: format record checksum mismatch "
            "(stored %016" PRIx64 ", computed %016" PRIx64 ")",
            s->path, d.xxh3, h);
    FAIL_IF(d.encoding > DLC_ENCODING_JPEG, DLC_ECORRUPT, "%s: corrupt: unknown encoding %u",
            s->path, d.encoding);
    FAIL_IF(d.count != samples_entries, DLC_ECORRUPT,
            "%s: corrupt: metadata counts %" PRIu64 " records, the samples database holds %" PRIu64,
            s->path, d.count, samples_entries);
    FAIL_IF(d.num_labels > DLC__MAX_LABELS || (d.count > 0 && d.num_labels == 0), DLC_ECORRUPT,
            "%s: corrupt: %u labels for %" PRIu64 " records", s->path, d.num_labels, d.count);
    FAIL_IF(d.payload_bytes > s->file_size, DLC_ECORRUPT,
            "%s: corrupt: %" PRIu64 " payload bytes in a file of %" PRIu64, s->path,
            d.payload_bytes, s->file_size);

    /* labels: num_labels NUL-terminated names filling the value exactly. */
    const meta_entry *le = find_meta(s, DLC__META_LABELS);
    FAIL_IF(!le, DLC_ECORRUPT, "%s: corrupt: no \"labels\" metadata", s->path);
    size_t nuls = 0;
    for (size_t i = 0; i < le->val_len; i++)
        nuls += le->val[i] == '\0';
    FAIL_IF(nuls != d.num_labels || (le->val_len > 0 && le->val[le->val_len - 1] != '\0'),
            DLC_ECORRUPT, "%s: corrupt: \"labels\" holds %zu names, expected %u", s->path, nuls,
            d.num_labels);
    s->labels = malloc(le->val_len + 1);
    s->label_names = calloc(d.num_labels + 1u, sizeof *s->label_names);
    FAIL_IF(!s->labels || !s->label_names, -ENOMEM, "%s: out of memory", s->path);
    memcpy(s->labels, le->val, le->val_len);
    for (size_t i = 0, off = 0; i < d.num_labels; i++) {
        s->label_names[i] = s->labels + off;
        off += strlen(s->labels + off) + 1;
    }

    const meta_entry *ce = find_meta(s, DLC__META_LABEL_COUNTS);
    FAIL_IF(!ce || ce->val_len != (size_t)d.num_labels * 8, DLC_ECORRUPT,
            "%s: corrupt: \"label_counts\" of %zu bytes, expected %u", s->path,
            ce ? ce->val_len : 0, d.num_labels * 8);
    s->label_counts = calloc(d.num_labels + 1u, sizeof *s->label_counts);
    FAIL_IF(!s->label_counts, -ENOMEM, "%s: out of memory", s->path);
    uint64_t sum = 0;
    for (uint32_t i = 0; i < d.num_labels; i++) {
        s->label_counts[i] = dlc__ld64(ce->val + (size_t)i * 8);
        sum += s->label_counts[i];
    }
    FAIL_IF(sum != d.count, DLC_ECORRUPT,
            "%s: corrupt: label counts add up to %" PRIu64 ", not %" PRIu64, s->path, sum, d.count);

    s->info = (dlc_store_info){
        .format_version = d.format_version,
        .encoding = d.encoding,
        .count = d.count,
        .height = d.height,
        .width = d.width,
        .channels = d.channels,
        .num_labels = d.num_labels,
        .skipped = d.skipped,
        .payload_bytes = d.payload_bytes,
        .content_digest = d.content_digest,
        .file_bytes = s->file_size,
    };
fail:
    return rc;
}

dlc_status dlc_store_open(const char *path, uint32_t flags, dlc_store **out)
{
    dlc_status rc = DLC_OK;
    dlc_store *s = NULL;
    MDB_txn *txn = NULL;
    uint8_t *own_map = MAP_FAILED;
    dlc__lmdb_entry *entries = NULL;
    int mrc;
    if (out)
        *out = NULL;
    FAIL_IF(!path || !out, DLC_EINVAL, "dlc_store_open: NULL argument");
    FAIL_IF(flags & ~(uint32_t)DLC_STORE_SEQUENTIAL, DLC_EINVAL, "%s: unknown flags 0x%x", path,
            flags);

    s = calloc(1, sizeof *s);
    FAIL_IF(!s, -ENOMEM, "%s: out of memory", path);
    s->fd = -1;
    const size_t plen = strlen(path) + 1;
    s->path = malloc(plen);
    FAIL_IF(!s->path, -ENOMEM, "%s: out of memory", path);
    memcpy(s->path, path, plen);

    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    FAIL_IF(s->fd < 0, -errno, "%s: %s", path, strerror(errno));
    struct stat st;
    FAIL_IF(fstat(s->fd, &st) != 0, -errno, "%s: %s", path, strerror(errno));
    FAIL_IF(!S_ISREG(st.st_mode), DLC_EINVAL, "%s: not a regular file", path);
    s->file_size = (uint64_t)st.st_size;
    FAIL_IF(s->file_size == 0, DLC_EVERSION, "%s: not a dlcache store (empty file)", path);

    /* Check the LMDB meta pages with pread before LMDB maps the file: LMDB
     * would map as much as they claim, and touching a page past the end of
     * a truncated file kills the process with SIGBUS. */
    dlc__lmdb_layout layout;
    CHECK(dlc__lmdb_read_layout(path, s->fd, s->file_size, &layout));

    /* Walk LMDB's pages on a private map before LMDB does (store_check.c),
     * and learn where each metadata value lies in the file. */
    own_map = mmap(NULL, (size_t)s->file_size, PROT_READ, MAP_SHARED, s->fd, 0);
    FAIL_IF(own_map == MAP_FAILED, -errno, "%s: mmap: %s", path, strerror(errno));
    s->meta = calloc(MAX_META_KEYS, sizeof *s->meta);
    entries = calloc(MAX_META_KEYS, sizeof *entries);
    FAIL_IF(!s->meta || !entries, -ENOMEM, "%s: out of memory", path);
    dlc__lmdb_db meta_db, samples_db;
    CHECK(dlc__lmdb_check_trees(path, own_map, s->file_size, &layout, &meta_db, &samples_db,
                                entries, MAX_META_KEYS, &s->num_meta));

    mrc = mdb_env_create(&s->env);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: %s", path, mdb_strerror(mrc));
    mdb_env_set_maxdbs(s->env, DLC__MAX_DBS);
    /* Map exactly the file: LMDB raises the size to what its meta page
     * needs, which the check above proved is inside the file. */
    mdb_env_set_mapsize(s->env, (size_t)s->file_size);
    /* RDONLY+NOLOCK: no lock file, so stores on read-only or shared media
     * open, and readers never contend. NOTLS: a reader is a plain object
     * that any thread may own. NORDAHEAD: training reads are random, and
     * kernel readahead would fill the page cache with neighbours. */
    unsigned env_flags = MDB_RDONLY | MDB_NOLOCK | MDB_NOSUBDIR | MDB_NOTLS;
    if (!(flags & DLC_STORE_SEQUENTIAL))
        env_flags |= MDB_NORDAHEAD;
    mrc = mdb_env_open(s->env, path, env_flags, 0444);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: %s", path,
            mrc == MDB_INVALID ? "not a dlcache store (not an LMDB file)" : mdb_strerror(mrc));

    /* The same size check with LMDB's own view of the file, and proof that
     * LMDB opened the file we checked, not one renamed over it meanwhile. */
    MDB_envinfo ei;
    MDB_stat ms;
    mdb_env_info(s->env, &ei);
    mdb_env_stat(s->env, &ms);
    const uint64_t need = ((uint64_t)ei.me_last_pgno + 1) * ms.ms_psize;
    FAIL_IF(s->file_size < need, DLC_ECORRUPT,
            "%s: truncated: file has %" PRIu64 " bytes, LMDB needs %" PRIu64, path, s->file_size,
            need);
    int lfd = -1;
    struct stat lst;
    mdb_env_get_fd(s->env, &lfd);
    FAIL_IF(ms.ms_psize != layout.psize || ei.me_last_pgno != layout.last_pg ||
                fstat(lfd, &lst) != 0 || lst.st_ino != st.st_ino || lst.st_dev != st.st_dev,
            -EAGAIN, "%s: the file changed while it was opened; open it again", path);

    mrc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: %s", path, mdb_strerror(mrc));
    MDB_dbi dbi_meta;
    mrc = mdb_dbi_open(txn, DLC__DB_META, 0, &dbi_meta);
    if (mrc == 0)
        mrc = mdb_dbi_open(txn, DLC__DB_SAMPLES, 0, &s->dbi_samples);
    FAIL_IF(mrc == MDB_NOTFOUND || mrc == MDB_INCOMPATIBLE, DLC_EVERSION,
            "%s: not a dlcache store (no \"meta\" and \"samples\" databases)", path);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: %s", path, mdb_strerror(mrc));

    /* LMDB does not tell where its map is (mdb_env_info's me_mapaddr is the
     * fixed address recorded in the file, NULL for us). The "format" value's
     * file offset is known from the walk, so LMDB's pointer to it gives the
     * base that turns record pointers into file offsets. */
    const dlc__lmdb_entry *fmt = NULL;
    for (size_t i = 0; i < s->num_meta; i++) {
        const dlc__lmdb_entry *e = &entries[i];
        if (e->key_len == strlen(DLC__META_FORMAT) &&
            memcmp(own_map + e->key_off, DLC__META_FORMAT, e->key_len) == 0)
            fmt = e;
    }
    FAIL_IF(!fmt, DLC_EVERSION,
            "%s: not a dlcache store (no \"format\" record in its "
            "metadata)",
            path);
    MDB_val fk = {.mv_size = strlen(DLC__META_FORMAT), .mv_data = (void *)DLC__META_FORMAT}, fv;
    mrc = mdb_get(txn, dbi_meta, &fk, &fv);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: metadata: %s", path, mdb_strerror(mrc));
    const uintptr_t base = (uintptr_t)fv.mv_data - (uintptr_t)fmt->val_off;
    const long os_page = sysconf(_SC_PAGESIZE);
    FAIL_IF(base % (uintptr_t)(os_page > 0 ? os_page : 4096) != 0 || fv.mv_size != fmt->val_len,
            DLC_ECORRUPT, "%s: corrupt: LMDB and the page walk disagree on the metadata", path);
    s->map = (const uint8_t *)base;
    if (flags & DLC_STORE_SEQUENTIAL)
        (void)madvise((void *)s->map, (size_t)s->file_size, MADV_SEQUENTIAL);
    for (size_t i = 0; i < s->num_meta; i++)
        s->meta[i] = (meta_entry){s->map + entries[i].key_off, (size_t)entries[i].key_len,
                                  s->map + entries[i].val_off, (size_t)entries[i].val_len};
    CHECK(load_info(s, samples_db.entries));
    /* Database handles outlive the transaction that opened them only when
     * it commits (an abort closes them). The values indexed above stay valid
     * as long as the map, because nobody writes a store open read-only. */
    mrc = mdb_txn_commit(txn);
    txn = NULL;
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: %s", path, mdb_strerror(mrc));
    munmap(own_map, (size_t)s->file_size);
    free(entries);
    dlc__clear_error();
    *out = s;
    return DLC_OK;

fail:
    if (txn)
        mdb_txn_abort(txn);
    if (own_map != MAP_FAILED)
        munmap(own_map, (size_t)s->file_size);
    free(entries);
    dlc_store_close(s);
    return rc;
}

void dlc_store_close(dlc_store *s)
{
    if (!s)
        return;
    if (s->env)
        mdb_env_close(s->env);
    if (s->fd >= 0)
        close(s->fd);
    free(s->meta);
    free(s->labels);
    free(s->label_names);
    free(s->label_counts);
    free(s->path);
    free(s);
}

const dlc_store_info *dlc_store_get_info(const dlc_store *s)
{
    return &s->info;
}

const char *dlc_store_path(const dlc_store *s)
{
    return s->path;
}

const char *dlc_store_label_name(const dlc_store *s, uint32_t label)
{
    return label < s->info.num_labels ? s->label_names[label] : NULL;
}

const uint64_t *dlc_store_label_counts(const dlc_store *s)
{
    return s->label_counts;
}

dlc_status dlc_store_meta(const dlc_store *s, const char *key, const void **data, size_t *size)
{
    if (!s || !key || !data || !size)
        return dlc__errorf(DLC_EINVAL, "dlc_store_meta: NULL argument");
    const meta_entry *e = find_meta(s, key);
    if (!e)
        return dlc__errorf(DLC_ENOTFOUND, "%s: no metadata key \"%s\"", s->path, key);
    *data = e->val;
    *size = e->val_len;
    return DLC_OK;
}

int dlc_store_fd(const dlc_store *s)
{
    return s->fd;
}

dlc_status dlc_store_resident(const dlc_store *s, uint64_t *resident)
{
    if (!s || !resident)
        return dlc__errorf(DLC_EINVAL, "dlc_store_resident: NULL argument");
    const long pg = sysconf(_SC_PAGESIZE);
    const uint64_t page = pg > 0 ? (uint64_t)pg : 4096;
    const uint64_t pages = (s->file_size + page - 1) / page;
    /* A fixed vector on the stack, reused chunk by chunk: no allocation,
     * whatever the size of the store. */
    unsigned char vec[4096];
    uint64_t n = 0;
    for (uint64_t first = 0; first < pages; first += sizeof vec) {
        const uint64_t count = pages - first < sizeof vec ? pages - first : sizeof vec;
        if (mincore((void *)(s->map + first * page), (size_t)(count * page), vec) != 0)
            return dlc__errorf(-errno, "%s: mincore: %s", s->path, strerror(errno));
        for (uint64_t i = 0; i < count; i++)
            n += vec[i] & 1u;
    }
    uint64_t bytes = n * page;
    /* The last page may be partly past the end of the file. */
    *resident = bytes > s->file_size ? s->file_size : bytes;
    return DLC_OK;
}

dlc_status dlc_store_reader_open(const dlc_store *s, dlc_store_reader **out)
{
    if (!s || !out)
        return dlc__errorf(DLC_EINVAL, "dlc_store_reader_open: NULL argument");
    *out = NULL;
    dlc_store_reader *r = malloc(sizeof *r);
    if (!r)
        return dlc__errorf(-ENOMEM, "%s: out of memory", s->path);
    r->s = s;
    const int mrc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &r->txn);
    if (mrc != 0) {
        free(r);
        return dlc__errorf(lmdb_status(mrc), "%s: read transaction: %s", s->path,
                           mdb_strerror(mrc));
    }
    *out = r;
    return DLC_OK;
}

void dlc_store_reader_close(dlc_store_reader *r)
{
    if (!r)
        return;
    mdb_txn_abort(r->txn);
    free(r);
}

/* Check the value of record @p index and fill @p rec. Every field comes from
 * the file and is checked before it is believed. */
static dlc_status parse_record(const dlc_store *s, uint64_t index, const MDB_val *v,
                               dlc_record *rec)
{
    const uint8_t *p = v->mv_data;
    if (!in_file(s, p, v->mv_size))
        return dlc__errorf(DLC_ECORRUPT, "%s: record %" PRIu64 ": value outside the file", s->path,
                           index);
    if (v->mv_size < DLC__RECORD_HEADER_SIZE)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: record %" PRIu64 ": %zu bytes, shorter than "
                           "its header",
                           s->path, index, v->mv_size);
    dlc__record_header h;
    dlc__record_header_load(p, &h);
    if (h.magic != DLC__RECORD_MAGIC)
        return dlc__errorf(DLC_ECORRUPT, "%s: record %" PRIu64 ": bad header magic 0x%08x", s->path,
                           index, h.magic);
    if (h.header_size != DLC__RECORD_HEADER_SIZE)
        return dlc__errorf(DLC_ECORRUPT, "%s: record %" PRIu64 ": header size %u, expected %u",
                           s->path, index, h.header_size, DLC__RECORD_HEADER_SIZE);
    if (h.encoding != s->info.encoding)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: record %" PRIu64 ": encoding %u in a store of "
                           "encoding %u",
                           s->path, index, h.encoding, s->info.encoding);
    if (h.payload_size != v->mv_size - DLC__RECORD_HEADER_SIZE)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: record %" PRIu64 ": header says %" PRIu64
                           " payload bytes, the value holds %zu",
                           s->path, index, h.payload_size, v->mv_size - DLC__RECORD_HEADER_SIZE);
    if (h.flags != 0)
        return dlc__errorf(DLC_ECORRUPT, "%s: record %" PRIu64 ": unknown flags 0x%x", s->path,
                           index, h.flags);
    if (h.label < 0 || h.label >= (int64_t)s->info.num_labels)
        return dlc__errorf(DLC_ECORRUPT, "%s: record %" PRIu64 ": label %" PRId64 " outside 0..%u",
                           s->path, index, h.label,
                           s->info.num_labels ? s->info.num_labels - 1 : 0);
    if ((s->info.height && h.height != s->info.height) ||
        (s->info.width && h.width != s->info.width) ||
        (s->info.channels && h.channels != s->info.channels))
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: record %" PRIu64 ": shape %ux%ux%u in a store "
                           "of %ux%ux%u",
                           s->path, index, h.height, h.width, h.channels, s->info.height,
                           s->info.width, s->info.channels);
    if (h.encoding == DLC_ENCODING_RAW) {
        uint64_t px;
        if (__builtin_mul_overflow((uint64_t)h.height, (uint64_t)h.width, &px) ||
            __builtin_mul_overflow(px, (uint64_t)h.channels, &px) || px != h.payload_size)
            return dlc__errorf(DLC_ECORRUPT,
                               "%s: record %" PRIu64 ": %" PRIu64 " bytes cannot "
                               "be %ux%ux%u raw pixels",
                               s->path, index, h.payload_size, h.height, h.width, h.channels);
    }
    rec->data = p + DLC__RECORD_HEADER_SIZE;
    rec->size = (size_t)h.payload_size;
    rec->offset = (uint64_t)(rec->data - s->map);
    rec->index = index;
    rec->label = h.label;
    rec->height = h.height;
    rec->width = h.width;
    rec->channels = h.channels;
    rec->encoding = h.encoding;
    rec->xxh3 = h.xxh3;
    return DLC_OK;
}

dlc_status dlc_store_read(dlc_store_reader *r, uint64_t index, dlc_record *rec)
{
    const dlc_store *s = r->s;
    if (index >= s->info.count)
        return dlc__errorf(DLC_ENOTFOUND,
                           "%s: record %" PRIu64 ": no such record (the store "
                           "has %" PRIu64 ")",
                           s->path, index, s->info.count);
    uint8_t key[DLC__KEY_SIZE];
    dlc__record_key(key, index);
    MDB_val k = {.mv_size = sizeof key, .mv_data = key}, v;
    const int mrc = mdb_get(r->txn, s->dbi_samples, &k, &v);
    if (mrc == MDB_NOTFOUND)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: record %" PRIu64 ": missing from the samples "
                           "database",
                           s->path, index);
    if (mrc != 0)
        return dlc__errorf(lmdb_status(mrc), "%s: record %" PRIu64 ": %s", s->path, index,
                           mdb_strerror(mrc));
    return parse_record(s, index, &v, rec);
}

dlc_status dlc_record_verify(const dlc_store *s, const dlc_record *rec)
{
    const uint64_t h = XXH3_64bits(rec->data, rec->size);
    if (h != rec->xxh3)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: record %" PRIu64 ": checksum mismatch (stored %016" PRIx64
                           ", computed %016" PRIx64 ")",
                           s ? s->path : "store", rec->index, rec->xxh3, h);
    return DLC_OK;
}

typedef struct verify_state {
    const dlc_store *s;
    dlc_verify_fn fn;
    void *user;
    dlc_verify_progress p;
    char first[512]; /* The first problem, for dlc_errmsg() at the end. */
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

dlc_status dlc_store_verify(const dlc_store *s, dlc_verify_fn fn, void *user, uint64_t *bad)
{
    dlc_status rc = DLC_OK;
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    XXH3_state_t *digest = NULL;
    uint64_t *counts = NULL;
    verify_state *vs = NULL;
    if (bad)
        *bad = 0;
    FAIL_IF(!s, DLC_EINVAL, "dlc_store_verify: NULL store");
    vs = calloc(1, sizeof *vs);
    counts = calloc(s->info.num_labels + 1u, sizeof *counts);
    digest = XXH3_createState();
    FAIL_IF(!vs || !counts || !digest, -ENOMEM, "%s: out of memory", s->path);
    XXH3_64bits_reset(digest);
    vs->s = s;
    vs->fn = fn;
    vs->user = user;
    vs->p.total = s->info.count;

    int mrc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: read transaction: %s", s->path, mdb_strerror(mrc));
    mrc = mdb_cursor_open(txn, s->dbi_samples, &cur);
    FAIL_IF(mrc != 0, lmdb_status(mrc), "%s: cursor: %s", s->path, mdb_strerror(mrc));

    uint64_t next_report = VERIFY_PROGRESS_BYTES;
    uint64_t i = 0;
    MDB_val k, v;
    for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == 0;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), i++) {
        dlc_record rec;
        dlc_status st;
        if (k.mv_size != DLC__KEY_SIZE || dlc__record_key_value(k.mv_data) != i)
            st = dlc__errorf(DLC_ECORRUPT,
                             "%s: record %" PRIu64 ": wrong key (records must "
                             "be keyed 0..count-1 in order)",
                             s->path, i);
        else
            st = parse_record(s, i, &v, &rec);
        if (st == DLC_OK) {
            st = dlc_record_verify(s, &rec);
            uint8_t label_le[8];
            dlc__st64(label_le, (uint64_t)rec.label);
            XXH3_64bits_update(digest, label_le, sizeof label_le);
            XXH3_64bits_update(digest, rec.data, rec.size);
            counts[rec.label]++;
            vs->p.bytes_done += rec.size;
        }
        vs->p.done = i + 1;
        if (st != DLC_OK && verify_bad(vs, i, st))
            FAIL_IF(1, DLC_ECANCELED, "%s: verification canceled", s->path);
        if (fn && vs->p.bytes_done >= next_report) {
            next_report = vs->p.bytes_done + VERIFY_PROGRESS_BYTES;
            FAIL_IF(fn(user, &vs->p), DLC_ECANCELED, "%s: verification canceled", s->path);
        }
    }
    FAIL_IF(mrc != MDB_NOTFOUND, lmdb_status(mrc), "%s: record %" PRIu64 ": %s", s->path, i,
            mdb_strerror(mrc));
    if (fn)
        FAIL_IF(fn(user, &vs->p), DLC_ECANCELED, "%s: verification canceled", s->path);

    int problem = vs->p.bad > 0;
    if (i != s->info.count) {
        dlc__errorf(DLC_ECORRUPT, "%s: %" PRIu64 " records, the metadata says %" PRIu64, s->path, i,
                    s->info.count);
        note_first(vs);
        problem = 1;
    }
    for (uint32_t l = 0; l < s->info.num_labels; l++) {
        if (counts[l] != s->label_counts[l]) {
            dlc__errorf(DLC_ECORRUPT,
                        "%s: label %u: %" PRIu64 " records, the metadata says %" PRIu64, s->path, l,
                        counts[l], s->label_counts[l]);
            note_first(vs);
            problem = 1;
            break;
        }
    }
    const uint64_t d = XXH3_64bits_digest(digest);
    if (d != s->info.content_digest) {
        dlc__errorf(DLC_ECORRUPT,
                    "%s: content digest %016" PRIx64 " does not match the "
                    "metadata's %016" PRIx64,
                    s->path, d, s->info.content_digest);
        note_first(vs);
        problem = 1;
    }
    if (problem)
        rc = dlc__errorf(DLC_ECORRUPT, "%s", vs->first);

fail:
    if (bad && vs)
        *bad = vs->p.bad;
    if (cur)
        mdb_cursor_close(cur);
    if (txn)
        mdb_txn_abort(txn);
    if (digest)
        XXH3_freeState(digest);
    free(counts);
    free(vs);
    return rc;
}
