/* Reading records: every field of a record as views into the map (dlc_store_read_values), the
 * version 1 view of one image and a label (dlc_store_read), and checksums on request
 * (include/dlcache/store.h, docs/FORMAT.md).
 *
 * A version 2 store is read through its offset table: one load gives the record's file offset,
 * so a read costs no B-tree search and no LMDB call, which is what lets small records (a 28x28
 * image and a label) be served at millions per second per thread. Everything in the record comes
 * from an untrusted file and is checked before it is believed: the header, that it is the record
 * asked for, and each field's offset, size and dimensions against the schema. The messages are
 * made only on the error path, so the checks cost a few compares per field. */
#include "common.h"
#include "store_format.h"
#include "store_internal.h"
#include "store_set.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <lmdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* Is [p, p+len) inside the file's part of the map? */
static int in_file(const dlc_store *s, const void *p, size_t len)
{
    const uintptr_t a = (uintptr_t)p, base = (uintptr_t)s->map;
    return a >= base && a - base <= s->file_size && len <= s->file_size - (a - base);
}

#if defined(__GNUC__)
__attribute__((cold, noinline, format(printf, 4, 5)))
#endif
static dlc_status
bad_record(const dlc_store *s, uint64_t index, int field, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (field < 0)
        return dlc__errorf(DLC_ECORRUPT, "%s: record %" PRIu64 ": %s", s->path, index, why);
    return dlc__errorf(DLC_ECORRUPT, "%s: record %" PRIu64 ": field \"%s\": %s", s->path, index,
                       s->fields[field].name, why);
}

/* The reason a payload field's size or dimensions disagree with its schema, or NULL. */
static const char *payload_fault(const dlc__field_rt *rt, uint64_t size, uint32_t d0, uint32_t d1)
{
    switch (rt->kind) {
    case DLC_FIELD_IMAGE:
        /* min_dim0 and min_dim1 are at least 1 when known, 0 when not. */
        if (rt->fixed ? d0 != rt->dim0 || d1 != rt->dim1
                      : d0 == 0 || d1 == 0 || d0 < rt->min_dim0 || d1 < rt->min_dim1 ||
                            d0 > rt->max_dim0 || d1 > rt->max_dim1)
            return "image size";
        /* d0, d1 <= 2^20 and unit <= 4 from here: the product cannot overflow. */
        if (rt->encoding == DLC_ENCODING_RAW ? size != (uint64_t)d0 * d1 * rt->unit
                                             : size == 0 || size > rt->max_size)
            return "payload size";
        return NULL;
    case DLC_FIELD_NDARRAY:
        if (d1 != 0 || (rt->fixed ? d0 != rt->dim0 : d0 > rt->max_dim0))
            return "leading dimension";
        /* unit < 2^32 and d0 < 2^32: the product fits in 64 bits. */
        return size != d0 * rt->unit ? "payload size" : NULL;
    default: /* bytes */
        return d0 || d1 || size > rt->max_size ? "payload size" : NULL;
    }
}

/* A payload field's message, with everything the schema says about it. */
#if defined(__GNUC__)
__attribute__((cold, noinline))
#endif
static dlc_status
bad_payload(const dlc_store *s, uint64_t index, uint32_t f, const char *what, uint64_t size,
            uint32_t d0, uint32_t d1)
{
    const dlc__field_rt *rt = &s->rt[f];
    return bad_record(s, index, (int)f,
                      "%s disagrees with the schema: %" PRIu64 " bytes, dimensions %u x %u (%s: "
                      "%u x %u, at least %u x %u, at most %u x %u, %" PRIu64
                      " bytes per row or pixel, at most %" PRIu64 " bytes)",
                      what, size, d0, d1, rt->fixed ? "fixed" : "variable", rt->dim0, rt->dim1,
                      rt->min_dim0, rt->min_dim1, rt->max_dim0, rt->max_dim1, rt->unit,
                      rt->max_size);
}

/* Check the fixed part of a version 2 record header at @p p, @p room bytes before the end of its
 * value (or of the file). */
static dlc_status check_header(const dlc_store *s, uint64_t index, const uint8_t *p, uint64_t room)
{
    const uint32_t magic = dlc__ld32(p);
    if (magic != DLC__RECORD2_MAGIC)
        return bad_record(s, index, -1, "bad header magic 0x%08x", magic);
    const uint32_t hsize = dlc__ld16(p + 4), nf = dlc__ld16(p + 6);
    if (hsize != s->header_size || nf != s->info.num_fields || room < hsize)
        return bad_record(s, index, -1,
                          "header of %u bytes and %u fields in %" PRIu64
                          " bytes; the schema has %u fields in %u",
                          hsize, nf, room, s->info.num_fields, s->header_size);
    const uint64_t at = dlc__ld64(p + 8);
    if (at != index)
        return bad_record(s, index, -1, "the header says record %" PRIu64, at);
    return DLC_OK;
}

/* Boxes and their classes agree in number; the label is in range. */
static dlc_status check_links(const dlc_store *s, uint64_t index, const dlc_value *values)
{
    for (uint32_t k = 0; k < s->num_boxes; k++) {
        const uint32_t b = s->boxes[k], c = s->rt[b].link;
        if (values[b].dim0 != values[c].dim0)
            return bad_record(s, index, (int)b, "%u boxes, but field \"%s\" has %u classes",
                              values[b].dim0, s->fields[c].name, values[c].dim0);
    }
    const uint32_t lf = s->info.label_field;
    if (lf != DLC_NO_FIELD && (values[lf].i < 0 || values[lf].i >= (int64_t)s->info.num_labels))
        return bad_record(s, index, (int)lf, "label %" PRId64 " outside 0..%u", values[lf].i,
                          s->info.num_labels ? s->info.num_labels - 1 : 0);
    return DLC_OK;
}

/* dlc__read_v2() on the record's header at @p p (in the map, or a copy of its header_size
 * bytes); payload views point at @p base + their value offset (the record in the map), or are
 * NULL when @p base is NULL. */
static dlc_status read_v2_at(const dlc_store *s, uint64_t index, uint64_t off, uint64_t len,
                             const uint8_t *p, const uint8_t *base, dlc_value *values);

dlc_status dlc__read_v2(const dlc_store *s, uint64_t index, uint64_t off, uint64_t len,
                        dlc_value *values)
{
    if (off > s->file_size || s->file_size - off < DLC__RECORD2_FIXED)
        return bad_record(s, index, -1,
                          "at offset %" PRIu64 ", outside the file of %" PRIu64 " bytes", off,
                          s->file_size);
    return read_v2_at(s, index, off, len, s->map + off, s->map + off, values);
}

static dlc_status read_v2_at(const dlc_store *s, uint64_t index, uint64_t off, uint64_t len,
                             const uint8_t *p, const uint8_t *base, dlc_value *values)
{
    const uint64_t room = len != UINT64_MAX ? len : s->file_size - off;
    dlc_status rc = check_header(s, index, p, room);
    if (rc < 0)
        return rc;
    uint64_t cursor = s->header_size;
    for (uint32_t f = 0; f < s->info.num_fields; f++) {
        const uint8_t *e = p + DLC__RECORD2_FIXED + (size_t)f * DLC__FIELD_ENTRY_SIZE;
        const dlc__field_rt *rt = &s->rt[f];
        dlc_value *v = &values[f];
        const uint64_t word = dlc__ld64(e), size = dlc__ld64(e + 8);
        const uint32_t d0 = dlc__ld32(e + 16), d1 = dlc__ld32(e + 20);
        v->xxh3 = dlc__ld64(e + 24);
        v->dim0 = d0;
        v->dim1 = d1;
        v->i = 0;
        v->f = 0;
        v->file = s->file_no;
        if (dlc__kind_is_scalar(rt->kind)) {
            if (size != 8 || d0 || d1)
                return bad_payload(s, index, f, "scalar", size, d0, d1);
            v->data = e;
            v->size = 8;
            v->offset = off + (uint64_t)(e - p);
            if (rt->kind == DLC_FIELD_INT)
                v->i = (int64_t)word;
            else
                memcpy(&v->f, &word, sizeof v->f);
            continue;
        }
        if (word != dlc__payload_at(cursor))
            return bad_record(s, index, (int)f,
                              "payload at value offset %" PRIu64 ", expected %" PRIu64, word,
                              dlc__payload_at(cursor));
        if (size > room || word > room - size)
            return bad_record(s, index, (int)f,
                              "payload of %" PRIu64 " bytes at value offset %" PRIu64
                              " runs past the end of the %s (%" PRIu64 " bytes)",
                              size, word, len != UINT64_MAX ? "value" : "file", room);
        const char *fault = payload_fault(rt, size, d0, d1);
        if (fault)
            return bad_payload(s, index, f, fault, size, d0, d1);
        v->data = base ? base + word : NULL;
        v->size = (size_t)size;
        v->offset = off + word;
        cursor = word + size;
    }
    if (len != UINT64_MAX && cursor != len)
        return bad_record(s, index, -1, "a value of %" PRIu64 " bytes whose fields end at %" PRIu64,
                          len, cursor);
    return check_links(s, index, values);
}

dlc_status dlc__read_v1(const dlc_store *s, uint64_t index, const MDB_val *v, dlc_record *rec,
                        dlc_value *values)
{
    const uint8_t *p = v->mv_data;
    if (!in_file(s, p, v->mv_size))
        return bad_record(s, index, -1, "value outside the file");
    if (v->mv_size < DLC__RECORD_HEADER_SIZE)
        return bad_record(s, index, -1, "%zu bytes, shorter than its header", v->mv_size);
    dlc__record_header h;
    dlc__record_header_load(p, &h);
    if (h.magic != DLC__RECORD_MAGIC)
        return bad_record(s, index, -1, "bad header magic 0x%08x", h.magic);
    if (h.header_size != DLC__RECORD_HEADER_SIZE)
        return bad_record(s, index, -1, "header size %u, expected %u", h.header_size,
                          DLC__RECORD_HEADER_SIZE);
    if (h.encoding != s->info.encoding)
        return bad_record(s, index, -1, "encoding %u in a store of encoding %u", h.encoding,
                          s->info.encoding);
    if (h.payload_size != v->mv_size - DLC__RECORD_HEADER_SIZE)
        return bad_record(s, index, -1,
                          "header says %" PRIu64 " payload bytes, the value holds %zu",
                          h.payload_size, v->mv_size - DLC__RECORD_HEADER_SIZE);
    if (h.flags != 0)
        return bad_record(s, index, -1, "unknown flags 0x%x", h.flags);
    if (h.label < 0 || h.label >= (int64_t)s->info.num_labels)
        return bad_record(s, index, -1, "label %" PRId64 " outside 0..%u", h.label,
                          s->info.num_labels ? s->info.num_labels - 1 : 0);
    if ((s->info.height && h.height != s->info.height) ||
        (s->info.width && h.width != s->info.width) ||
        (s->info.channels && h.channels != s->info.channels))
        return bad_record(s, index, -1, "shape %ux%ux%u in a store of %ux%ux%u", h.height, h.width,
                          h.channels, s->info.height, s->info.width, s->info.channels);
    if (h.encoding == DLC_ENCODING_RAW) {
        uint64_t px;
        if (__builtin_mul_overflow((uint64_t)h.height, (uint64_t)h.width, &px) ||
            __builtin_mul_overflow(px, (uint64_t)h.channels, &px) || px != h.payload_size)
            return bad_record(s, index, -1, "%" PRIu64 " bytes cannot be %ux%ux%u raw pixels",
                              h.payload_size, h.height, h.width, h.channels);
    }
    *rec = (dlc_record){
        .data = p + DLC__RECORD_HEADER_SIZE,
        .size = (size_t)h.payload_size,
        .offset = (uint64_t)(p + DLC__RECORD_HEADER_SIZE - s->map),
        .index = index,
        .label = h.label,
        .height = h.height,
        .width = h.width,
        .channels = h.channels,
        .encoding = h.encoding,
        .xxh3 = h.xxh3,
    };
    if (values) {
        values[0] =
            (dlc_value){rec->data, rec->size, rec->offset, h.height, h.width, h.xxh3, 0, 0, 0};
        /* The label's 8 bytes in the header, hashed here: version 1 keeps no checksum of them,
         * and dlc_value_verify() must accept them as they are. */
        values[1] = (dlc_value){
            p + 8, 8, (uint64_t)(p + 8 - s->map), 0, 0, XXH3_64bits(p + 8, 8), h.label, 0, 0};
    }
    return DLC_OK;
}

/* Record @p index of a version 1 store through LMDB's B-tree. */
static dlc_status get_v1(dlc_store_reader *r, uint64_t index, MDB_val *v)
{
    const dlc_store *s = r->s;
    uint8_t key[DLC__KEY_SIZE];
    dlc__record_key(key, index);
    MDB_val k = {.mv_size = sizeof key, .mv_data = key};
    const int mrc = mdb_get(r->txn, s->dbi_samples, &k, v);
    if (mrc == MDB_NOTFOUND)
        return bad_record(s, index, -1, "missing from the samples database");
    if (mrc != 0)
        return dlc__errorf(dlc__store_lmdb_status(mrc), "%s: record %" PRIu64 ": %s", s->path,
                           index, mdb_strerror(mrc));
    return DLC_OK;
}

#if defined(__GNUC__)
__attribute__((cold, noinline))
#endif
static dlc_status
no_record(const dlc_store *s, uint64_t index)
{
    return dlc__errorf(DLC_ENOTFOUND,
                       "%s: record %" PRIu64 ": no such record (the store has %" PRIu64 ")",
                       s->path, index, s->info.count);
}

/* Record @p index of a set: the shard's reader reads it under its own number there. */
static dlc_status set_read_values(dlc_store_reader *r, uint64_t index, dlc_value *values)
{
    const dlc_store *s = r->s;
    const uint32_t k = dlc__set_shard_of(s, index);
    dlc_store_reader lazy;
    dlc_store_reader *sr = s->lazy ? dlc__set_lazy_reader(s, k, index, &lazy) : r->shards[k];
    if (!sr)
        return DLC_EINVAL;
    const dlc_status rc = dlc_store_read_values(sr, index - s->firsts[k], values);
    return rc < 0 ? dlc__set_shard_error(s, k, index, rc) : rc;
}

dlc_status dlc_store_read_values(dlc_store_reader *r, uint64_t index, dlc_value *values)
{
    if (!r || !values)
        return dlc__errorf(DLC_EINVAL, "dlc_store_read_values: NULL reader or values");
    const dlc_store *s = r->s;
    if (index >= s->info.count)
        return no_record(s, index);
    if (s->shards)
        return set_read_values(r, index, values);
    if (s->index)
        return dlc__read_v2(s, index, dlc__ld64(s->index + index * 8), UINT64_MAX, values);
    MDB_val v;
    dlc_record rec;
    const dlc_status rc = get_v1(r, index, &v);
    return rc < 0 ? rc : dlc__read_v1(s, index, &v, &rec, values);
}

/* pread() all of @p len bytes at @p off of @p s's file, or say that the file ended first. */
static dlc_status pread_all(const dlc_store *s, uint64_t index, void *buf, size_t len, uint64_t off)
{
    size_t got = 0;
    while (got < len) {
        const ssize_t r = pread(s->fd, (uint8_t *)buf + got, len - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return dlc__errorf(-errno, "%s: record %" PRIu64 ": read at offset %" PRIu64 ": %s",
                               s->path, index, off + got, strerror(errno));
        if (r == 0) {
            struct stat st;
            const uint64_t now = fstat(s->fd, &st) == 0 ? (uint64_t)st.st_size : off + got;
            return dlc__errorf(DLC_ECORRUPT,
                               "%s: record %" PRIu64 ": the file ends at %" PRIu64
                               " bytes, inside the record (it had %" PRIu64
                               " at open: truncated in place)",
                               s->path, index, now, s->file_size);
        }
        got += (size_t)r;
    }
    return DLC_OK;
}

size_t dlc_store_header_bound(const dlc_store *s)
{
    if (!s)
        return 0;
    size_t most = s->header_size;
    for (uint32_t k = 0; k < s->num_shards; k++) {
        const dlc_store *sh = s->lazy ? dlc__set_shard_at(s, k) : s->shards[k];
        if (sh && sh->header_size > most)
            most = sh->header_size;
    }
    /* Every shard of a set has the set's schema, so one shard's size is every shard's; with none
     * attached (a lazy set) the schema gives it. */
    const size_t schema = dlc__record2_header_size(s->info.num_fields);
    return most > schema ? most : schema;
}

dlc_status dlc_store_read_values_pread(const dlc_store *s, uint64_t index, dlc_value *values,
                                       uint8_t *header, size_t cap)
{
    if (!s || !values || !header)
        return dlc__errorf(DLC_EINVAL, "dlc_store_read_values_pread: NULL argument");
    if (index >= s->info.count)
        return no_record(s, index);
    if (s->shards) {
        const uint32_t k = dlc__set_shard_of(s, index);
        const dlc_store *sh = s->lazy ? dlc__set_shard_at(s, k) : s->shards[k];
        if (!sh)
            return dlc__errorf(
                DLC_EINVAL, "%s: record %" PRIu64 ": its shard is not in the streaming cache now",
                s->path, index);
        const dlc_status rc =
            dlc_store_read_values_pread(sh, index - s->firsts[k], values, header, cap);
        return rc < 0 && rc != DLC_ENOSYS ? dlc__set_shard_error(s, k, index, rc) : rc;
    }
    if (!s->index)
        return dlc__errorf(
            DLC_ENOSYS, "%s: a version 1 store is read through LMDB's B-tree, in the map", s->path);
    if (cap < s->header_size)
        return dlc__errorf(DLC_EINVAL, "%s: a header buffer of %zu bytes, below %u", s->path, cap,
                           s->header_size);
    uint8_t entry[8];
    dlc_status rc =
        pread_all(s, index, entry, sizeof entry, (uint64_t)(s->index - s->map) + index * 8);
    if (rc < 0)
        return rc;
    const uint64_t off = dlc__ld64(entry);
    if (off > s->file_size || s->file_size - off < s->header_size)
        return bad_record(s, index, -1,
                          "at offset %" PRIu64 ", outside the file of %" PRIu64 " bytes", off,
                          s->file_size);
    rc = pread_all(s, index, header, s->header_size, off);
    if (rc < 0)
        return rc;
    return read_v2_at(s, index, off, UINT64_MAX, header, NULL, values);
}

dlc_status dlc_store_read(dlc_store_reader *r, uint64_t index, dlc_record *rec)
{
    const dlc_store *s = r->s;
    if (index >= s->info.count)
        return no_record(s, index);
    if (s->shards) {
        const uint32_t k = dlc__set_shard_of(s, index);
        dlc_store_reader lazy;
        dlc_store_reader *sr = s->lazy ? dlc__set_lazy_reader(s, k, index, &lazy) : r->shards[k];
        if (!sr)
            return DLC_EINVAL;
        const dlc_status rc = dlc_store_read(sr, index - s->firsts[k], rec);
        if (rc < 0)
            return dlc__set_shard_error(s, k, index, rc);
        rec->index = index;
        return rc;
    }
    if (!s->index) {
        MDB_val v;
        const dlc_status rc = get_v1(r, index, &v);
        return rc < 0 ? rc : dlc__read_v1(s, index, &v, rec, NULL);
    }
    const uint32_t img = s->info.image_field, lf = s->info.label_field;
    if (img == DLC_NO_FIELD)
        return dlc__errorf(DLC_EINVAL, "%s: the store has no image field to read as a record",
                           s->path);
    dlc_value values[DLC_MAX_FIELDS];
    const dlc_status rc =
        dlc__read_v2(s, index, dlc__ld64(s->index + index * 8), UINT64_MAX, values);
    if (rc < 0)
        return rc;
    const dlc_value *v = &values[img];
    *rec = (dlc_record){
        .data = v->data,
        .size = v->size,
        .offset = v->offset,
        .index = index,
        .label = lf == DLC_NO_FIELD ? 0 : values[lf].i,
        .height = v->dim0,
        .width = v->dim1,
        .channels = s->fields[img].shape[2],
        .encoding = s->fields[img].encoding,
        .xxh3 = v->xxh3,
    };
    return DLC_OK;
}

dlc_status dlc_record_verify(const dlc_store *s, const dlc_record *rec)
{
    const uint64_t h = XXH3_64bits(rec->data, rec->size);
    if (h == rec->xxh3)
        return DLC_OK;
    char where[PATH_MAX + 160];
    if (s && rec->index < s->info.count)
        dlc__record_where(s, s->shards ? dlc__set_shard_of(s, rec->index) : 0, rec->index, where,
                          sizeof where);
    else
        snprintf(where, sizeof where, "%s: record %" PRIu64, s ? s->path : "store", rec->index);
    return dlc__errorf(DLC_ECORRUPT,
                       "%s: checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64 ")",
                       where, rec->xxh3, h);
}

dlc_status dlc_value_verify(const dlc_store *s, uint64_t index, uint32_t field, const dlc_value *v)
{
    if (!s || !v || field >= s->info.num_fields)
        return dlc__errorf(DLC_EINVAL, "dlc_value_verify: %s",
                           !s || !v ? "NULL argument" : "no such field");
    const uint64_t h = XXH3_64bits(v->data, v->size);
    if (h == v->xxh3)
        return DLC_OK;
    char where[PATH_MAX + 160];
    dlc__record_where(s, v->file, index, where, sizeof where);
    return dlc__errorf(DLC_ECORRUPT,
                       "%s: field \"%s\": checksum mismatch (stored %016" PRIx64
                       ", computed %016" PRIx64 ")",
                       where, s->fields[field].name, v->xxh3, h);
}
