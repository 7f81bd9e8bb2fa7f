/* The store writer (include/dlcache/writer.h): appends sealed records to PATH.tmp-PID, then
 * writes the schema, the offset table and the metadata, syncs, trims and renames
 * (docs/FORMAT.md). Records are laid out by record builders (store_record.c); this file only
 * copies their bytes into LMDB and keeps the per-field statistics the schema needs at finish.
 * The file under it (paths, LMDB's environment, room on disk, transactions, the final seal) is
 * cache/store/store_writer_file.c's. */
#include "store_writer_impl.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The defaults, at this library's size: dlc_writer_config_init_sized() gives the caller its part.
 */
static void writer_config_defaults(dlc_writer_config *c)
{
    memset(c, 0, sizeof *c);
}

void dlc_writer_config_init_sized(dlc_writer_config *c, size_t size)
{
    dlc_writer_config d;
    writer_config_defaults(&d);
    dlc__options_init(c, size, &d, sizeof d);
}

dlc_status dlc_writer_open(const char *path, const dlc_writer_config *config_in, dlc_writer **out)
{
    dlc_status rc = DLC_OK;
    dlc_writer *w = NULL;
    if (out)
        *out = NULL;
    FAIL_IF(!path || !*path || !config_in || !out, DLC_EINVAL, "dlc_writer_open: %s",
            !path || !*path ? "no output path" : "NULL argument");
    dlc_writer_config cfg;
    dlc_writer_config_init(&cfg);
    CHECK(dlc__options_take(&cfg, sizeof cfg, config_in, "dlc_writer_config",
                            "dlc_writer_config_init"));
    const dlc_writer_config *const config = &cfg;
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

    CHECK(dlc__wfile_writer_create(path, config->force, config->size_hint, &w));
    CHECK(set_schema(w, config->fields, config->num_fields));
    CHECK(set_labels(w, config->label_names, config->num_labels));
    w->auto_labels = has_label && config->num_labels == 0;
    if (config->build_json) {
        w->build_json = strdup(config->build_json);
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
    const dlc_status rc = dlc__wfile_writer_create(path, force, size_hint, out);
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
    w->build_json = build_json ? strdup(build_json) : NULL;
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
        /* Strictly smaller: the first record of the smallest size is kept, the one a store set
         * of the same records names too (its shards are merged in record order). */
        if (w->fields[f].kind == DLC_FIELD_IMAGE) {
            if (w->count == 0 || e.dim0 < st->min_dim0) {
                st->min_dim0 = e.dim0;
                st->min_record0 = w->count;
            }
            if (w->count == 0 || e.dim1 < st->min_dim1) {
                st->min_dim1 = e.dim1;
                st->min_record1 = w->count;
            }
        }
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

    const uint64_t cost = dlc__wfile_record_cost(w, rec.size);
    /* From here on a failure leaves LMDB's transaction in an unknown state. */
    CHECK(dlc__wfile_ensure_room(w, cost));
    uint8_t key[DLC__KEY_SIZE];
    dlc__record_key(key, w->count);
    MDB_val k = {.mv_size = sizeof key, .mv_data = key};
    MDB_val v = {.mv_size = rec.size, .mv_data = NULL};
    /* APPEND: keys arrive in order, so LMDB fills leaf pages completely
     * instead of splitting them in half. RESERVE: LMDB only places the value; the writer copies
     * the record once, straight into the page cache (dlc__wfile_put_value()). */
    const int mrc = mdb_put(w->txn, w->dbi_samples, &k, &v, MDB_APPEND | MDB_RESERVE);
    if (mrc != 0) {
        rc = dlc__wfile_write_error(w, mrc, "write record");
        goto fail;
    }
    CHECK(dlc__wfile_put_value(w, v.mv_data, rec.value, rec.size, w->count));
    account(w, rec.value, label);
    dlc__record_appended(b);
    w->payload_bytes += rec.payload;
    w->count++;
    w->pending += cost;
    w->txn_bytes += rec.size;
    w->txn_records++;
    if (w->txn_bytes >= TXN_MAX_BYTES || w->txn_records >= TXN_MAX_RECORDS) {
        CHECK(dlc__wfile_txn_commit(w));
        CHECK(dlc__wfile_txn_begin(w));
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
        if (image && w->count > 0) {
            f->min_dim0 = st->min_dim0;
            f->min_dim1 = st->min_dim1;
            f->min_record0 = st->min_record0;
            f->min_record1 = st->min_record1;
        }
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
    FAIL_IF(mrc != 0, dlc__wfile_lmdb_status(mrc), "%s: cursor: %s", w->temp_path,
            mdb_strerror(mrc));
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
    FAIL_IF(mrc != MDB_NOTFOUND, dlc__wfile_lmdb_status(mrc), "%s: cursor: %s", w->temp_path,
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
        return dlc__wfile_write_error(w, mrc, "write metadata");
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
    if (dlc__min_dims_wanted(w->fields, w->nf, w->count)) {
        uint8_t mins[DLC__MIN_DIMS_SIZE(DLC_MAX_FIELDS)];
        dlc__min_dims_encode(mins, w->fields, w->nf, w->count);
        CHECK(put_meta(w, DLC__META_MIN_DIMS, mins, DLC__MIN_DIMS_SIZE(w->nf)));
    }
    for (uint32_t i = 0; i < w->num_extra; i++)
        CHECK(put_meta(w, w->extra[i].key, w->extra[i].data, w->extra[i].size));
fail:
    free(counts);
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

/* Bytes of the caller's metadata values, each rounded up to whole pages (LMDB's overflow pages). */
static uint64_t extra_meta_bytes(const dlc_writer *w)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < w->num_extra; i++)
        n += (w->extra[i].size / w->psize + 2) * w->psize;
    return n;
}

/* The store's own keys, which dlc_writer_put_meta() refuses. */
static int reserved_meta_key(const char *key)
{
    static const char *const own[] = {
        DLC__META_FORMAT, DLC__META_LABELS,        DLC__META_LABEL_COUNTS,
        DLC__META_BUILD,  DLC__META_SOURCE_DIGEST, DLC__META_SCHEMA,
        DLC__META_INDEX,  DLC__META_SET_PART,      DLC__META_MIN_DIMS,
    };
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (strcmp(key, own[i]) == 0)
            return 1;
    return 0;
}

dlc_status dlc_writer_put_meta(dlc_writer *w, const char *key, const void *data, size_t size)
{
    if (!w || !key || (!data && size))
        return dlc__errorf(DLC_EINVAL, "dlc_writer_put_meta: NULL argument");
    if (w->failed)
        return dlc__errorf(DLC_ESTATE, "%s: an earlier write failed", w->temp_path);
    const size_t len = strlen(key);
    int ok = len >= 1 && len <= 31;
    for (size_t i = 0; ok && i < len; i++)
        ok = isalnum((unsigned char)key[i]) || key[i] == '_';
    if (!ok || reserved_meta_key(key))
        return dlc__errorf(DLC_EINVAL, "%s: metadata key '%.40s': %s", w->temp_path, key,
                           ok ? "the store's own key" : "not 1 to 31 characters of [A-Za-z0-9_]");
    if (size >= UINT32_MAX)
        return dlc__errorf(DLC_EINVAL, "%s: metadata key '%s': %zu bytes, at most 4 GiB",
                           w->temp_path, key, size);
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return dlc__errorf(-ENOMEM, "%s: out of memory for metadata '%s'", w->temp_path, key);
    if (size)
        memcpy(copy, data, size);
    for (uint32_t i = 0; i < w->num_extra; i++)
        if (strcmp(w->extra[i].key, key) == 0) {
            free(w->extra[i].data);
            w->extra[i].data = copy;
            w->extra[i].size = size;
            return DLC_OK;
        }
    struct dlc__extra_meta *grown = realloc(w->extra, (w->num_extra + 1) * sizeof *grown);
    if (!grown) {
        free(copy);
        return dlc__errorf(-ENOMEM, "%s: out of memory for metadata '%s'", w->temp_path, key);
    }
    w->extra = grown;
    struct dlc__extra_meta *e = &w->extra[w->num_extra++];
    memset(e->key, 0, sizeof e->key);
    memcpy(e->key, key, len);
    e->data = copy;
    e->size = size;
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
    CHECK(dlc__wfile_txn_commit(w));
    CHECK(dlc__wfile_txn_begin(w));
    const size_t index_len = (size_t)w->count * 8;
    CHECK(dlc__wfile_ensure_room(w, index_len + w->labels_len + (uint64_t)w->num_labels * 8 +
                                        (w->build_json ? strlen(w->build_json) : 0) +
                                        extra_meta_bytes(w) + 64 * w->psize));
    index = malloc(index_len ? index_len : 1);
    FAIL_IF(!index, -ENOMEM, "%s: out of memory for an offset table of %zu bytes", w->temp_path,
            index_len);
    CHECK(build_index(w, index));
    CHECK(write_meta(w, index));
    CHECK(dlc__wfile_txn_commit(w));
    const int mrc = mdb_env_sync(w->env, 1);
    if (mrc != 0) {
        rc = dlc__wfile_write_error(w, mrc, "sync");
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
    CHECK(dlc__wfile_seal_file(w, used));
    dlc__wfile_writer_free(w);
    return DLC_OK;
fail:
    dlc__wfile_remove_temp(w);
    dlc__wfile_writer_free(w);
    return rc;
}

void dlc_writer_abort(dlc_writer *w)
{
    if (!w)
        return;
    dlc__wfile_remove_temp(w);
    dlc__wfile_writer_free(w);
}
