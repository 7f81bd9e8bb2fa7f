/* The store reader: open and check a store of format version 1 or 2 and its metadata
 * (include/dlcache/store.h, docs/FORMAT.md). Records are read by store_read.c and verified by
 * store_verify.c. */
#include "common.h"
#include "store_format.h"
#include "store_internal.h"
#include "store_set.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
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

typedef dlc__meta_entry meta_entry;

dlc_status dlc__store_lmdb_status(int rc)
{
    if (rc > 0)
        return -rc;
    if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH)
        return DLC_EVERSION;
    return DLC_ECORRUPT;
}

static const meta_entry *find_meta(const dlc_store *s, const char *key)
{
    const size_t n = strlen(key);
    for (size_t i = 0; i < s->num_meta; i++)
        if (s->meta[i].key_len == n && memcmp(s->meta[i].key, key, n) == 0)
            return &s->meta[i];
    return NULL;
}

/* "labels" (num_labels NUL-terminated names filling the value exactly) and "label_counts"
 * (num_labels x u64). Records per label add up to the count when there is a label field. */
static dlc_status load_labels(dlc_store *s, uint32_t num_labels, uint64_t count, int has_label)
{
    dlc_status rc = DLC_OK;
    const meta_entry *le = find_meta(s, DLC__META_LABELS);
    FAIL_IF(!le, DLC_ECORRUPT, "%s: corrupt: no \"labels\" metadata", s->path);
    size_t nuls = 0;
    for (size_t i = 0; i < le->val_len; i++)
        nuls += le->val[i] == '\0';
    FAIL_IF(nuls != num_labels || (le->val_len > 0 && le->val[le->val_len - 1] != '\0'),
            DLC_ECORRUPT, "%s: corrupt: \"labels\" holds %zu names, expected %u", s->path, nuls,
            num_labels);
    s->labels = malloc(le->val_len + 1);
    s->label_names = calloc(num_labels + 1u, sizeof *s->label_names);
    FAIL_IF(!s->labels || !s->label_names, -ENOMEM, "%s: out of memory", s->path);
    memcpy(s->labels, le->val, le->val_len);
    for (size_t i = 0, off = 0; i < num_labels; i++) {
        s->label_names[i] = s->labels + off;
        off += strlen(s->labels + off) + 1;
    }

    const meta_entry *ce = find_meta(s, DLC__META_LABEL_COUNTS);
    FAIL_IF(!ce || ce->val_len != (size_t)num_labels * 8, DLC_ECORRUPT,
            "%s: corrupt: \"label_counts\" of %zu bytes, expected %u", s->path,
            ce ? ce->val_len : 0, num_labels * 8);
    s->label_counts = calloc(num_labels + 1u, sizeof *s->label_counts);
    FAIL_IF(!s->label_counts, -ENOMEM, "%s: out of memory", s->path);
    uint64_t sum = 0;
    for (uint32_t i = 0; i < num_labels; i++) {
        s->label_counts[i] = dlc__ld64(ce->val + (size_t)i * 8);
        sum += s->label_counts[i];
    }
    FAIL_IF(has_label && sum != count, DLC_ECORRUPT,
            "%s: corrupt: label counts add up to %" PRIu64 ", not %" PRIu64, s->path, sum, count);
fail:
    return rc;
}

/* The "format" block of a version 1 store: one image and one label per record. */
static dlc_status load_info_v1(dlc_store *s, const uint8_t *block, uint64_t samples_entries,
                               uint64_t max_value)
{
    dlc_status rc = DLC_OK;
    dlc__store_info_disk d;
    dlc__info_load(block, &d);
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
    CHECK(load_labels(s, d.num_labels, d.count, 1));
    const uint64_t max_size =
        max_value > DLC__RECORD_HEADER_SIZE ? max_value - DLC__RECORD_HEADER_SIZE : 0;
    dlc__schema_v1(s->fields, d.encoding, d.height, d.width, d.channels, max_size);
    dlc__schema_min_fixed(s->fields, 2, d.count);
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
        .num_fields = 2,
        .image_field = 0,
        .label_field = 1,
    };
fail:
    return rc;
}

/* The "schema" of a version 2 store: every entry's hash and padding, then every rule. */
static dlc_status load_schema(dlc_store *s, uint32_t nf, uint32_t label_field, uint64_t count)
{
    dlc_status rc = DLC_OK;
    const meta_entry *e = find_meta(s, DLC__META_SCHEMA);
    FAIL_IF(!e || e->val_len != (size_t)nf * DLC__SCHEMA_ENTRY_SIZE, DLC_ECORRUPT,
            "%s: corrupt: \"schema\" of %zu bytes, expected %u fields of %u", s->path,
            e ? e->val_len : 0, nf, DLC__SCHEMA_ENTRY_SIZE);
    CHECK(dlc__schema_decode(e->val, nf, count, s->path, s->fields));
    dlc__schema_min_fixed(s->fields, nf, count);
    /* Absent from stores written before it: their variable images' smallest size is unknown. */
    const meta_entry *me = find_meta(s, DLC__META_MIN_DIMS);
    if (me)
        CHECK(dlc__min_dims_decode(me->val, me->val_len, nf, count, s->path, s->fields));
    uint32_t label = DLC_NO_FIELD;
    for (uint32_t i = 0; i < nf; i++) {
        if (s->fields[i].flags & DLC_FIELD_LABEL)
            label = i;
        if (s->fields[i].flags & DLC_FIELD_BOXES)
            s->boxes[s->num_boxes++] = i;
        dlc__field_rt_init(&s->rt[i], &s->fields[i]);
    }
    FAIL_IF(label != label_field, DLC_ECORRUPT,
            "%s: corrupt: the format block names field %d as the label, the schema field %d",
            s->path, (int)label_field, (int)label);
fail:
    return rc;
}

void dlc__store_image_info(dlc_store *s)
{
    dlc_store_info *in = &s->info;
    in->image_field = DLC_NO_FIELD;
    for (uint32_t i = 0; i < in->num_fields; i++) {
        const dlc_field *f = &s->fields[i];
        if (f->kind != DLC_FIELD_IMAGE)
            continue;
        in->image_field = i;
        in->encoding = f->encoding;
        in->height = f->shape[0];
        in->width = f->shape[1];
        in->channels = f->shape[2];
        return;
    }
}

/* The "format" block of a version 2 store, its schema and offset table. */
static dlc_status load_info_v2(dlc_store *s, const uint8_t *block, uint64_t samples_entries)
{
    dlc_status rc = DLC_OK;
    dlc__store_info2_disk d;
    dlc__info2_load(block, &d);
    FAIL_IF(d.num_fields == 0 || d.num_fields > DLC_MAX_FIELDS, DLC_ECORRUPT,
            "%s: corrupt: %u fields, a record has 1 to %u", s->path, d.num_fields, DLC_MAX_FIELDS);
    FAIL_IF(d.flags || d.reserved0 || d.reserved[0] || d.reserved[1] || d.reserved[2] ||
                d.reserved[3],
            DLC_ECORRUPT, "%s: corrupt: format block flags or reserved words not zero", s->path);
    FAIL_IF(d.count != samples_entries, DLC_ECORRUPT,
            "%s: corrupt: metadata counts %" PRIu64 " records, the samples database holds %" PRIu64,
            s->path, d.count, samples_entries);
    FAIL_IF(d.label_field != DLC_NO_FIELD && d.label_field >= d.num_fields, DLC_ECORRUPT,
            "%s: corrupt: label field %u of %u fields", s->path, d.label_field, d.num_fields);
    const int has_label = d.label_field != DLC_NO_FIELD;
    FAIL_IF(d.num_labels > DLC__MAX_LABELS || (has_label && d.count > 0 && d.num_labels == 0) ||
                (!has_label && d.num_labels > 0),
            DLC_ECORRUPT, "%s: corrupt: %u labels for %" PRIu64 " records %s a label field",
            s->path, d.num_labels, d.count, has_label ? "with" : "without");
    FAIL_IF(d.payload_bytes > s->file_size, DLC_ECORRUPT,
            "%s: corrupt: %" PRIu64 " payload bytes in a file of %" PRIu64, s->path,
            d.payload_bytes, s->file_size);
    CHECK(load_schema(s, d.num_fields, d.label_field, d.count));
    const meta_entry *ie = find_meta(s, DLC__META_INDEX);
    FAIL_IF(!ie || ie->val_len / 8 != d.count || ie->val_len % 8 != 0, DLC_ECORRUPT,
            "%s: corrupt: \"index\" of %zu bytes for %" PRIu64 " records", s->path,
            ie ? ie->val_len : 0, d.count);
    s->index = ie->val;
    s->header_size = dlc__record2_header_size(d.num_fields);
    CHECK(load_labels(s, d.num_labels, d.count, has_label));
    s->info = (dlc_store_info){
        .format_version = d.format_version,
        .count = d.count,
        .num_labels = d.num_labels,
        .skipped = d.skipped,
        .payload_bytes = d.payload_bytes,
        .content_digest = d.content_digest,
        .file_bytes = s->file_size,
        .num_fields = d.num_fields,
        .label_field = d.label_field,
    };
    dlc__store_image_info(s);
fail:
    return rc;
}

/* Decode and check the metadata: "format", then the version's own keys. */
static dlc_status load_info(dlc_store *s, const dlc__lmdb_db *samples_db)
{
    dlc_status rc = DLC_OK;
    const meta_entry *e = find_meta(s, DLC__META_FORMAT);
    FAIL_IF(!e || e->val_len < 12 || memcmp(e->val, DLC__INFO_MAGIC, 8) != 0, DLC_EVERSION,
            "%s: not a dlcache store (no \"format\" record in its metadata)", s->path);
    const uint32_t version = dlc__ld32(e->val + 8);
    FAIL_IF(version > DLC_STORE_FORMAT_VERSION || version == 0, DLC_EVERSION,
            "%s: store format version %u, this library reads versions 1 to %u", s->path, version,
            DLC_STORE_FORMAT_VERSION);
    FAIL_IF(e->val_len != DLC__INFO_SIZE, DLC_ECORRUPT,
            "%s: corrupt: format record of %zu bytes, expected %u", s->path, e->val_len,
            DLC__INFO_SIZE);
    const uint64_t stored = dlc__ld64(e->val + DLC__INFO_HASHED);
    const uint64_t h = XXH3_64bits(e->val, DLC__INFO_HASHED);
    FAIL_IF(h != stored, DLC_ECORRUPT,
            "%s: corrupt: format record checksum mismatch "
            "(stored %016" PRIx64 ", computed %016" PRIx64 ")",
            s->path, stored, h);
    if (version == 1)
        CHECK(load_info_v1(s, e->val, samples_db->entries, samples_db->max_value));
    else
        CHECK(load_info_v2(s, e->val, samples_db->entries));
fail:
    return rc;
}

dlc_status dlc_store_open(const char *path, uint32_t flags, dlc_store **out)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return dlc__errorf(DLC_EINVAL, "dlc_store_open: NULL argument");
    /* A directory is a store set: its index says which files are its shards. */
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return dlc__set_open(path, flags, out);
    return dlc__store_open_file(path, flags, out);
}

/* The file itself: open, a regular file, not empty. */
static dlc_status file_open(dlc_store *s, const char *path, struct stat *st)
{
    dlc_status rc = DLC_OK;
    const size_t plen = strlen(path) + 1;
    s->path = malloc(plen);
    FAIL_IF(!s->path, -ENOMEM, "%s: out of memory", path);
    memcpy(s->path, path, plen);
    /* Checked before anything could block on it: a FIFO is refused, not waited on. */
    const int fd = dlc__open_regular(path, 0, "store", st);
    if (fd < 0) /* "PATH: REASON", as before the check: the Python package's errors say that. */
        return fd == DLC_EINVAL ? fd : dlc__errorf(fd, "%s: %s", path, strerror(-fd));
    s->fd = fd;
    s->file_size = (uint64_t)st->st_size;
    FAIL_IF(s->file_size == 0, DLC_EVERSION, "%s: not a dlcache store (empty file)", path);
fail:
    return rc;
}

/* LMDB's environment over the file that the page walk checked (@p layout, @p st). */
static dlc_status env_open(dlc_store *s, const char *path, uint32_t flags,
                           const dlc__lmdb_layout *layout, const struct stat *st)
{
    dlc_status rc = DLC_OK;
    int mrc = mdb_env_create(&s->env);
    FAIL_IF(mrc != 0, dlc__store_lmdb_status(mrc), "%s: %s", path, mdb_strerror(mrc));
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
    /* LMDB opens by name: it is given the descriptor's own name (/proc/self/fd/N), the file
     * checked above, so that a FIFO or another file renamed over @p path meanwhile can neither
     * block the open nor be mapped. Without /proc, the name (and the inode check below). */
    char fdpath[32];
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", s->fd);
    const char *const open_path = access(fdpath, R_OK) == 0 ? fdpath : path;
    mrc = mdb_env_open(s->env, open_path, env_flags, 0444);
    FAIL_IF(mrc != 0, dlc__store_lmdb_status(mrc), "%s: %s", path,
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
    FAIL_IF(ms.ms_psize != layout->psize || ei.me_last_pgno != layout->last_pg ||
                fstat(lfd, &lst) != 0 || lst.st_ino != st->st_ino || lst.st_dev != st->st_dev,
            -EAGAIN, "%s: the file changed while it was opened; open it again", path);
fail:
    return rc;
}

/* Where LMDB mapped the file, and the metadata entries as pointers into that map. LMDB does not
 * tell where its map is (mdb_env_info's me_mapaddr is the fixed address recorded in the file,
 * NULL for us). The "format" value's file offset is known from the walk, so LMDB's pointer to it
 * gives the base that turns record pointers into file offsets. */
static dlc_status map_base(dlc_store *s, MDB_txn *txn, MDB_dbi dbi_meta, const uint8_t *own_map,
                           const dlc__lmdb_entry *entries)
{
    dlc_status rc = DLC_OK;
    const char *path = s->path;
    const dlc__lmdb_entry *fmt = NULL;
    for (size_t i = 0; i < s->num_meta; i++) {
        const dlc__lmdb_entry *e = &entries[i];
        if (e->key_len == strlen(DLC__META_FORMAT) &&
            memcmp(own_map + e->key_off, DLC__META_FORMAT, e->key_len) == 0)
            fmt = e;
    }
    FAIL_IF(!fmt, DLC_EVERSION, "%s: not a dlcache store (no \"format\" record in its metadata)",
            path);
    MDB_val fk = {.mv_size = strlen(DLC__META_FORMAT), .mv_data = (void *)DLC__META_FORMAT}, fv;
    const int mrc = mdb_get(txn, dbi_meta, &fk, &fv);
    FAIL_IF(mrc != 0, dlc__store_lmdb_status(mrc), "%s: metadata: %s", path, mdb_strerror(mrc));
    const uintptr_t base = (uintptr_t)fv.mv_data - (uintptr_t)fmt->val_off;
    const long os_page = sysconf(_SC_PAGESIZE);
    FAIL_IF(base % (uintptr_t)(os_page > 0 ? os_page : 4096) != 0 || fv.mv_size != fmt->val_len,
            DLC_ECORRUPT, "%s: corrupt: LMDB and the page walk disagree on the metadata", path);
    s->map = (const uint8_t *)base;
    for (size_t i = 0; i < s->num_meta; i++)
        s->meta[i] = (meta_entry){s->map + entries[i].key_off, (size_t)entries[i].key_len,
                                  s->map + entries[i].val_off, (size_t)entries[i].val_len};
fail:
    return rc;
}

/* The format version in the "format" value that the page walk found, 0 when there is none to read
 * (load_info() then names what is wrong). */
static uint32_t walked_version(const uint8_t *own_map, const dlc__lmdb_entry *entries, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const dlc__lmdb_entry *e = &entries[i];
        if (e->key_len == strlen(DLC__META_FORMAT) &&
            memcmp(own_map + e->key_off, DLC__META_FORMAT, e->key_len) == 0)
            return e->val_len >= 12 ? dlc__ld32(own_map + e->val_off + 8) : 0;
    }
    return 0;
}

dlc_status dlc__store_open_file(const char *path, uint32_t flags, dlc_store **out)
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
    struct stat st;
    CHECK(file_open(s, path, &st));

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
                                entries, MAX_META_KEYS, &s->num_meta, 0));
    /* A version 2 store is read through its offset table (checked per record as it is read), never
     * through LMDB's samples tree: walking that tree here would read every leaf page, the whole
     * file for a store of small records. dlc_store_verify() walks it before its cursor does.
     * Every other version is read through LMDB (or refused below): its tree is walked now. */
    if (walked_version(own_map, entries, s->num_meta) != 2)
        CHECK(dlc__lmdb_check_trees(path, own_map, s->file_size, &layout, &meta_db, &samples_db,
                                    entries, MAX_META_KEYS, &s->num_meta, 1));
    CHECK(env_open(s, path, flags, &layout, &st));

    mrc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    FAIL_IF(mrc != 0, dlc__store_lmdb_status(mrc), "%s: %s", path, mdb_strerror(mrc));
    MDB_dbi dbi_meta;
    mrc = mdb_dbi_open(txn, DLC__DB_META, 0, &dbi_meta);
    if (mrc == 0)
        mrc = mdb_dbi_open(txn, DLC__DB_SAMPLES, 0, &s->dbi_samples);
    FAIL_IF(mrc == MDB_NOTFOUND || mrc == MDB_INCOMPATIBLE, DLC_EVERSION,
            "%s: not a dlcache store (no \"meta\" and \"samples\" databases)", path);
    FAIL_IF(mrc != 0, dlc__store_lmdb_status(mrc), "%s: %s", path, mdb_strerror(mrc));
    CHECK(map_base(s, txn, dbi_meta, own_map, entries));
    if (flags & DLC_STORE_SEQUENTIAL)
        (void)madvise((void *)s->map, (size_t)s->file_size, MADV_SEQUENTIAL);
    CHECK(load_info(s, &samples_db));
    /* Database handles outlive the transaction that opened them only when
     * it commits (an abort closes them). The values indexed above stay valid
     * as long as the map, because nobody writes a store open read-only. */
    mrc = mdb_txn_commit(txn);
    txn = NULL;
    FAIL_IF(mrc != 0, dlc__store_lmdb_status(mrc), "%s: %s", path, mdb_strerror(mrc));
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
    dlc__set_close(s); /* A set's shards and tables; nothing for a single store. */
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
    return s ? &s->info : NULL;
}

const dlc_field *dlc_store_fields(const dlc_store *s)
{
    return s ? s->fields : NULL;
}

int dlc_store_find_field(const dlc_store *s, const char *name)
{
    if (!s || !name)
        return -1;
    for (uint32_t i = 0; i < s->info.num_fields; i++)
        if (strcmp(s->fields[i].name, name) == 0)
            return (int)i;
    return -1;
}

const char *dlc_store_path(const dlc_store *s)
{
    return s ? s->path : NULL;
}

const char *dlc_store_label_name(const dlc_store *s, uint32_t label)
{
    return s && label < s->info.num_labels ? s->label_names[label] : NULL;
}

const uint64_t *dlc_store_label_counts(const dlc_store *s)
{
    return s ? s->label_counts : NULL;
}

dlc_status dlc_store_meta(const dlc_store *s, const char *key, const void **data, size_t *size)
{
    if (!s || !key || !data || !size)
        return dlc__errorf(DLC_EINVAL, "dlc_store_meta: NULL argument");
    if (s->shards) { /* A set's metadata is its first shard's. */
        const dlc_store *first = dlc__set_shard_at(s, 0);
        if (!first)
            return dlc__errorf(DLC_ENOTFOUND,
                               "%s: no metadata key \"%s\" (streamed: its first "
                               "shard is not in the cache now)",
                               s->path, key);
        return dlc_store_meta(first, key, data, size);
    }
    const meta_entry *e = find_meta(s, key);
    if (!e)
        return dlc__errorf(DLC_ENOTFOUND, "%s: no metadata key \"%s\"", s->path, key);
    *data = e->val;
    *size = e->val_len;
    return DLC_OK;
}

int dlc_store_fd(const dlc_store *s)
{
    if (!s)
        return -1;
    if (!s->shards)
        return s->fd;
    const dlc_store *first = dlc__set_shard_at(s, 0);
    return first ? first->fd : -1;
}

uint32_t dlc_store_num_files(const dlc_store *s)
{
    return !s ? 0 : s->shards ? s->num_shards : 1;
}

/* File @p file of @p s, or NULL when there is no such file. */
static const dlc_store *file_of(const dlc_store *s, uint32_t file)
{
    if (!s)
        return NULL;
    if (s->shards)
        return file < s->num_shards ? dlc__set_shard_at(s, file) : NULL;
    return file == 0 ? s : NULL;
}

int dlc_store_file_fd(const dlc_store *s, uint32_t file)
{
    const dlc_store *f = file_of(s, file);
    return f ? f->fd : -1;
}

const char *dlc_store_file_path(const dlc_store *s, uint32_t file)
{
    const dlc_store *f = file_of(s, file);
    return f ? f->path : NULL;
}

uint64_t dlc_store_file_bytes(const dlc_store *s, uint32_t file)
{
    const dlc_store *f = file_of(s, file);
    return f ? f->file_size : 0;
}

uint32_t dlc_store_record_file(const dlc_store *s, uint64_t index)
{
    if (!s || index >= s->info.count)
        return UINT32_MAX;
    return s->shards ? dlc__set_shard_of(s, index) : 0;
}

dlc_status dlc_store_resident(const dlc_store *s, uint64_t *resident)
{
    if (!s || !resident)
        return dlc__errorf(DLC_EINVAL, "dlc_store_resident: NULL argument");
    if (s->shards) {
        uint64_t sum = 0;
        for (uint32_t k = 0; k < s->num_shards; k++) {
            uint64_t one = 0;
            const dlc_store *sh = dlc__set_shard_at(s, k);
            if (!sh) /* Streamed, and not in the cache now. */
                continue;
            const dlc_status rc = dlc_store_resident(sh, &one);
            if (rc < 0)
                return rc;
            sum += one;
        }
        *resident = sum;
        return DLC_OK;
    }
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

/* A set's reader: one reader per shard, so that a read allocates nothing. */
static dlc_status set_reader_open(dlc_store_reader *r)
{
    const dlc_store *s = r->s;
    r->shards = calloc(s->num_shards, sizeof *r->shards);
    if (!r->shards)
        return dlc__errorf(-ENOMEM, "%s: out of memory for %u shard readers", s->path,
                           s->num_shards);
    for (uint32_t k = 0; k < s->num_shards; k++) {
        const dlc_status rc = dlc_store_reader_open(s->shards[k], &r->shards[k]);
        if (rc < 0)
            return rc;
    }
    return DLC_OK;
}

dlc_status dlc_store_reader_open(const dlc_store *s, dlc_store_reader **out)
{
    if (out)
        *out = NULL;
    if (!s || !out)
        return dlc__errorf(DLC_EINVAL, "dlc_store_reader_open: NULL argument");
    dlc_store_reader *r = calloc(1, sizeof *r);
    if (!r)
        return dlc__errorf(-ENOMEM, "%s: out of memory", s->path);
    r->s = s;
    if (s->shards && s->lazy) { /* Reads go to the shards' maps directly (store_read.c). */
        *out = r;
        return DLC_OK;
    }
    if (s->shards) {
        const dlc_status rc = set_reader_open(r);
        if (rc < 0) {
            dlc__errsave es;
            dlc__err_save(&es);
            dlc_store_reader_close(r);
            return dlc__err_restore(&es, rc);
        }
        *out = r;
        return DLC_OK;
    }
    const int mrc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &r->txn);
    if (mrc != 0) {
        free(r);
        return dlc__errorf(dlc__store_lmdb_status(mrc), "%s: read transaction: %s", s->path,
                           mdb_strerror(mrc));
    }
    *out = r;
    return DLC_OK;
}

void dlc_store_reader_close(dlc_store_reader *r)
{
    if (!r)
        return;
    if (r->shards)
        for (uint32_t k = 0; k < r->s->num_shards; k++)
            dlc_store_reader_close(r->shards[k]);
    free(r->shards);
    if (r->txn)
        mdb_txn_abort(r->txn);
    free(r);
}
