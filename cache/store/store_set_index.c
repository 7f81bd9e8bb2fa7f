/* The bytes of a store set: its index, index.dlcset, and a shard's "set_part" record
 * (docs/FORMAT.md, "Store sets"), and the merge of the shards' schemas into the set's.
 *
 * The index is untrusted input like a store: the decoder checks its size against the counts in
 * its header before it reads an entry, its checksum before it believes a word, and then every
 * rule (names, record numbers, schema, labels), so that the code that opens the shards works on
 * facts. */
#include "common.h"
#include "store_format.h"
#include "store_set.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- set_part ---------------------------------------------------------------------------- */

void dlc__set_part_encode(uint8_t out[DLC__SET_PART_SIZE], const dlc__set_part *p)
{
    memset(out, 0, DLC__SET_PART_SIZE);
    memcpy(out, DLC__SET_PART_MAGIC, 8);
    dlc__st32(out + 8, p->part);
    dlc__st32(out + 12, p->parts);
    dlc__st64(out + 16, p->set_id);
    dlc__st64(out + 24, p->first_item);
    dlc__st64(out + 32, p->end_item);
    dlc__st64(out + DLC__SET_PART_HASHED, XXH3_64bits(out, DLC__SET_PART_HASHED));
}

dlc_status dlc__set_part_decode(const uint8_t *v, size_t len, const char *who, dlc__set_part *out)
{
    if (len != DLC__SET_PART_SIZE || memcmp(v, DLC__SET_PART_MAGIC, 8) != 0)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: corrupt: \"set_part\" record of %zu bytes without its magic "
                           "(expected %u bytes starting \"%s\")",
                           who, len, DLC__SET_PART_SIZE, DLC__SET_PART_MAGIC);
    const uint64_t stored = dlc__ld64(v + DLC__SET_PART_HASHED);
    const uint64_t h = XXH3_64bits(v, DLC__SET_PART_HASHED);
    if (h != stored)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: corrupt: \"set_part\" checksum mismatch (stored %016" PRIx64
                           ", computed %016" PRIx64 ")",
                           who, stored, h);
    *out = (dlc__set_part){dlc__ld32(v + 8), dlc__ld32(v + 12), dlc__ld64(v + 16),
                           dlc__ld64(v + 24), dlc__ld64(v + 32)};
    if (out->parts == 0 || out->parts > DLC__SET_MAX_SHARDS || out->part >= out->parts ||
        out->first_item > out->end_item)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: corrupt: \"set_part\" says part %u of %u, items [%" PRIu64
                           ", %" PRIu64 ")",
                           who, out->part, out->parts, out->first_item, out->end_item);
    return DLC_OK;
}

void dlc__set_part_name(char out[DLC__SET_NAME_SIZE], uint32_t part, uint32_t parts)
{
    snprintf(out, DLC__SET_NAME_SIZE, "part-%05u-of-%05u.dlc", part, parts);
}

int dlc__set_items_follow(const dlc__set_part *prev, const dlc__set_part *p)
{
    return p->first_item == (prev ? prev->end_item : 0);
}

/* ---- The index ------------------------------------------------------------------------------ */

static uint64_t index_size(uint32_t num_shards, uint32_t num_fields, uint32_t labels_bytes)
{
    return DLC__SET_HEADER + (uint64_t)DLC__SET_ENTRY * num_shards +
           (uint64_t)DLC__SCHEMA_ENTRY_SIZE * num_fields + labels_bytes + 8;
}

void dlc__set_index_free(dlc__set_index *x)
{
    free(x->shards);
    free(x->labels);
    x->shards = NULL;
    x->labels = NULL;
}

dlc_status dlc__set_index_encode(const dlc__set_index *x, uint8_t **out, size_t *len)
{
    const uint64_t n = index_size(x->num_shards, x->num_fields, x->labels_bytes);
    uint8_t *p = calloc(1, (size_t)n);
    if (!p)
        return dlc__errorf(-ENOMEM, "out of memory for a set index of %" PRIu64 " bytes", n);
    memcpy(p, DLC__SET_MAGIC, 8);
    dlc__st32(p + 8, DLC__SET_VERSION);
    dlc__st32(p + 12, x->num_shards);
    dlc__st64(p + 16, x->count);
    dlc__st64(p + 24, x->set_id);
    dlc__st32(p + 40, x->num_fields);
    dlc__st32(p + 44, x->num_labels);
    dlc__st32(p + 48, x->labels_bytes);
    uint8_t *e = p + DLC__SET_HEADER;
    for (uint32_t k = 0; k < x->num_shards; k++, e += DLC__SET_ENTRY) {
        const dlc__set_shard *sh = &x->shards[k];
        memcpy(e, sh->name, strnlen(sh->name, DLC__SET_NAME_SIZE - 1));
        dlc__st64(e + 64, sh->count);
        dlc__st64(e + 72, sh->first);
        dlc__st64(e + 80, sh->content_digest);
        dlc__st64(e + 88, sh->file_bytes);
    }
    uint8_t *schema = e;
    for (uint32_t i = 0; i < x->num_fields; i++, e += DLC__SCHEMA_ENTRY_SIZE) {
        dlc__schema_entry_store(e, &x->fields[i]);
        dlc__st64(e + DLC__SCHEMA_ENTRY_HASHED, XXH3_64bits(e, DLC__SCHEMA_ENTRY_HASHED));
    }
    dlc__st64(p + 32, XXH3_64bits(schema, (size_t)(e - schema)));
    if (x->labels_bytes)
        memcpy(e, x->labels, x->labels_bytes);
    e += x->labels_bytes;
    dlc__st64(e, XXH3_64bits(p, (size_t)(e - p)));
    *out = p;
    *len = (size_t)n;
    return DLC_OK;
}

/* A shard's name: 1 to 63 characters of [A-Za-z0-9._-], then NUL bytes only; never "." or
 * "..", which would name the set's directory or its parent. */
static int name_ok(const uint8_t *e)
{
    size_t len = 0;
    while (len < DLC__SET_NAME_SIZE && e[len])
        len++;
    if (len == 0 || len == DLC__SET_NAME_SIZE)
        return 0;
    for (size_t i = len; i < DLC__SET_NAME_SIZE; i++)
        if (e[i])
            return 0;
    for (size_t i = 0; i < len; i++) {
        const uint8_t c = e[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return !(len == 1 && e[0] == '.') && !(len == 2 && e[0] == '.' && e[1] == '.');
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The shard entries: names valid and unique (sorted copies: 65536 names are too many to
 * compare pairwise), firsts the prefix sums of the counts, and their sum the set's count. */
static dlc_status decode_shards(const uint8_t *p, const char *path, dlc__set_index *x)
{
    dlc_status rc = DLC_OK;
    const char **sorted = NULL;
    x->shards = calloc(x->num_shards, sizeof *x->shards);
    sorted = calloc(x->num_shards, sizeof *sorted);
    FAIL_IF(!x->shards || !sorted, -ENOMEM, "%s: out of memory for %u shard entries", path,
            x->num_shards);
    uint64_t sum = 0;
    for (uint32_t k = 0; k < x->num_shards; k++) {
        const uint8_t *e = p + DLC__SET_HEADER + (size_t)k * DLC__SET_ENTRY;
        dlc__set_shard *sh = &x->shards[k];
        FAIL_IF(!name_ok(e), DLC_ECORRUPT,
                "%s: corrupt: shard %u: its name is not 1 to 63 characters of [A-Za-z0-9._-] "
                "padded with NUL bytes",
                path, k);
        memcpy(sh->name, e, DLC__SET_NAME_SIZE);
        sh->count = dlc__ld64(e + 64);
        sh->first = dlc__ld64(e + 72);
        sh->content_digest = dlc__ld64(e + 80);
        sh->file_bytes = dlc__ld64(e + 88);
        FAIL_IF(sh->first != sum, DLC_ECORRUPT,
                "%s: corrupt: shard %u (%s): first record %" PRIu64
                ", but the shards before it hold %" PRIu64,
                path, k, sh->name, sh->first, sum);
        /* Every record takes at least its header in the file: a count beyond what the size can
         * hold is a lie, refused here before anything walks it (a count of 2^32 would cost
         * minutes of planning at open). */
        FAIL_IF(sh->count > sh->file_bytes / DLC__RECORD_HEADER_SIZE, DLC_ECORRUPT,
                "%s: corrupt: shard %u (%s): %" PRIu64 " records cannot fit in its %" PRIu64
                " bytes (each takes at least %u)",
                path, k, sh->name, sh->count, sh->file_bytes, DLC__RECORD_HEADER_SIZE);
        FAIL_IF(sh->count > UINT64_MAX - sum, DLC_ECORRUPT,
                "%s: corrupt: shard %u (%s): %" PRIu64 " records overflow the count", path, k,
                sh->name, sh->count);
        sum += sh->count;
        sorted[k] = sh->name;
    }
    FAIL_IF(sum != x->count, DLC_ECORRUPT,
            "%s: corrupt: the shards hold %" PRIu64 " records, the header says %" PRIu64, path, sum,
            x->count);
    qsort(sorted, x->num_shards, sizeof *sorted, cmp_names);
    for (uint32_t k = 1; k < x->num_shards; k++)
        FAIL_IF(strcmp(sorted[k - 1], sorted[k]) == 0, DLC_ECORRUPT,
                "%s: corrupt: two shards are named %s", path, sorted[k]);
fail:
    free(sorted);
    return rc;
}

/* The label block: exactly num_labels NUL-terminated names; a label field exactly when there
 * are labels (a set of no record may have a label field and no names). */
static dlc_status decode_labels(const uint8_t *p, const char *path, dlc__set_index *x)
{
    uint32_t nuls = 0;
    for (uint32_t i = 0; i < x->labels_bytes; i++)
        nuls += p[i] == 0;
    if (nuls != x->num_labels || (x->labels_bytes && p[x->labels_bytes - 1] != 0))
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: corrupt: the label block of %u bytes holds %u names, expected %u",
                           path, x->labels_bytes, nuls, x->num_labels);
    int has_label = 0;
    for (uint32_t i = 0; i < x->num_fields; i++)
        has_label |= (x->fields[i].flags & DLC_FIELD_LABEL) != 0;
    if ((!has_label && x->num_labels) || (has_label && x->count && !x->num_labels))
        return dlc__errorf(DLC_ECORRUPT, "%s: corrupt: %u labels for %" PRIu64 " records %s", path,
                           x->num_labels, x->count,
                           has_label ? "with a label field" : "without a label field");
    if (x->labels_bytes) {
        x->labels = malloc(x->labels_bytes);
        if (!x->labels)
            return dlc__errorf(-ENOMEM, "%s: out of memory for the label names", path);
        memcpy(x->labels, p, x->labels_bytes);
    }
    return DLC_OK;
}

dlc_status dlc__set_index_decode(const uint8_t *p, size_t len, const char *path, dlc__set_index *x)
{
    dlc_status rc = DLC_OK;
    memset(x, 0, sizeof *x);
    FAIL_IF(len < 12 || memcmp(p, DLC__SET_MAGIC, 8) != 0, DLC_EVERSION,
            "%s: not a store set index (no \"%s\" magic)", path, DLC__SET_MAGIC);
    const uint32_t version = dlc__ld32(p + 8);
    FAIL_IF(version != DLC__SET_VERSION, DLC_EVERSION,
            "%s: store set index version %u, this library reads version %u", path, version,
            DLC__SET_VERSION);
    FAIL_IF(len < DLC__SET_HEADER + 8, DLC_ECORRUPT,
            "%s: corrupt: %zu bytes, shorter than an index header", path, len);
    x->num_shards = dlc__ld32(p + 12);
    x->count = dlc__ld64(p + 16);
    x->set_id = dlc__ld64(p + 24);
    x->schema_hash = dlc__ld64(p + 32);
    x->num_fields = dlc__ld32(p + 40);
    x->num_labels = dlc__ld32(p + 44);
    x->labels_bytes = dlc__ld32(p + 48);
    const uint64_t want = index_size(x->num_shards, x->num_fields, x->labels_bytes);
    FAIL_IF(want != len, DLC_ECORRUPT,
            "%s: corrupt: %zu bytes, but %u shards, %u fields and %u bytes of labels make "
            "%" PRIu64,
            path, len, x->num_shards, x->num_fields, x->labels_bytes, want);
    const uint64_t stored = dlc__ld64(p + len - 8), h = XXH3_64bits(p, len - 8);
    FAIL_IF(h != stored, DLC_ECORRUPT,
            "%s: corrupt: checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64 ")", path,
            stored, h);
    FAIL_IF(dlc__ld32(p + 52) != 0, DLC_ECORRUPT, "%s: corrupt: reserved word not zero", path);
    FAIL_IF(x->num_shards == 0 || x->num_shards > DLC__SET_MAX_SHARDS, DLC_ECORRUPT,
            "%s: corrupt: %u shards, a set has 1 to %u", path, x->num_shards, DLC__SET_MAX_SHARDS);
    FAIL_IF(x->num_fields == 0 || x->num_fields > DLC_MAX_FIELDS, DLC_ECORRUPT,
            "%s: corrupt: %u fields, a record has 1 to %u", path, x->num_fields, DLC_MAX_FIELDS);
    FAIL_IF(x->num_labels > DLC__MAX_LABELS, DLC_ECORRUPT, "%s: corrupt: %u labels, at most %u",
            path, x->num_labels, DLC__MAX_LABELS);
    CHECK(decode_shards(p, path, x));
    const uint8_t *schema = p + DLC__SET_HEADER + (size_t)DLC__SET_ENTRY * x->num_shards;
    const size_t schema_len = (size_t)DLC__SCHEMA_ENTRY_SIZE * x->num_fields;
    const uint64_t sh = XXH3_64bits(schema, schema_len);
    FAIL_IF(sh != x->schema_hash, DLC_ECORRUPT,
            "%s: corrupt: schema hash mismatch (stored %016" PRIx64 ", computed %016" PRIx64 ")",
            path, x->schema_hash, sh);
    CHECK(dlc__schema_decode(schema, x->num_fields, x->count, path, x->fields));
    CHECK(decode_labels(schema + schema_len, path, x));
    return DLC_OK;
fail:
    dlc__set_index_free(x);
    return rc;
}

dlc_status dlc__set_index_read(const char *path, uint8_t **out, size_t *len)
{
    dlc_status rc = DLC_OK;
    uint8_t *buf = NULL;
    *out = NULL;
    *len = 0;
    struct stat st;
    const int fd = dlc__open_regular(path, 0, "set index", &st); /* A FIFO is not waited on. */
    if (fd < 0)
        return fd != DLC_EINVAL ? dlc__errorf(fd, "%s: %s", path, strerror(-fd))
                                : dlc__errorf(DLC_ECORRUPT, "%s: corrupt: %s, not a regular file",
                                              path, dlc__file_kind((unsigned)st.st_mode));
    FAIL_IF((uint64_t)st.st_size > DLC__SET_MAX_INDEX_BYTES, DLC_ECORRUPT,
            "%s: corrupt: %" PRIu64 " bytes, larger than any set index (%u)", path,
            (uint64_t)st.st_size, DLC__SET_MAX_INDEX_BYTES);
    const size_t n = (size_t)st.st_size;
    buf = malloc(n ? n : 1);
    FAIL_IF(!buf, -ENOMEM, "%s: out of memory for %zu bytes", path, n);
    size_t got = 0;
    while (got < n) {
        const ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        FAIL_IF(r < 0, -errno, "%s: read: %s", path, strerror(errno));
        FAIL_IF(r == 0, DLC_ECHANGED, "%s: the file shrank while it was read", path);
        got += (size_t)r;
    }
    *out = buf;
    *len = n;
    buf = NULL;
fail:
    if (fd >= 0)
        close(fd);
    free(buf);
    return rc;
}

/* ---- The set's schema ----------------------------------------------------------------------- */

/* What differs between field @p a of the merge and @p b of a shard, beyond the sizes that
 * depend on the records (VARIABLE, the varying dimensions, max_*); NULL when nothing does. */
static const char *static_mismatch(const dlc_field *a, const dlc_field *b)
{
    if (strcmp(a->name, b->name) != 0)
        return "name";
    if (a->kind != b->kind || a->dtype != b->dtype || a->encoding != b->encoding)
        return "kind, element type or encoding";
    if ((a->flags & ~(uint32_t)DLC_FIELD_VARIABLE) != (b->flags & ~(uint32_t)DLC_FIELD_VARIABLE) ||
        a->link != b->link)
        return "flags or link";
    if (a->ndim != b->ndim)
        return "number of dimensions";
    /* The dimensions that never vary: an image's channels, an ndarray's trailing ones. */
    const uint32_t from = a->kind == DLC_FIELD_IMAGE ? 2 : 1;
    for (uint32_t d = from; d < DLC_MAX_DIMS; d++)
        if (a->shape[d] != b->shape[d])
            return "shape";
    return NULL;
}

static uint32_t max32(uint32_t a, uint32_t b)
{
    return a > b ? a : b;
}

static uint64_t max64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* The smallest image of field @p b of a shard whose first record is @p first, as a set's. */
static void move_min(dlc_field *b, uint64_t first)
{
    if (b->min_dim0)
        b->min_record0 += first;
    if (b->min_dim1)
        b->min_record1 += first;
}

/* The smaller of two smallest images, each with the first record that has it: @p b's records
 * come after @p a's, so a tie keeps @p a's. Unknown (0) when either is. */
static void merge_min(dlc_field *a, const dlc_field *b)
{
    if (!a->min_dim0 || !b->min_dim0 || !a->min_dim1 || !b->min_dim1) {
        a->min_dim0 = a->min_dim1 = 0;
        a->min_record0 = a->min_record1 = 0;
        return;
    }
    if (b->min_dim0 < a->min_dim0) {
        a->min_dim0 = b->min_dim0;
        a->min_record0 = b->min_record0;
    }
    if (b->min_dim1 < a->min_dim1) {
        a->min_dim1 = b->min_dim1;
        a->min_record1 = b->min_record1;
    }
}

/* Merge the sizes of field @p b (of a shard with records, its min_record0/1 already global) into
 * @p a, as the writer would have made them over all the records (cache/store/store_writer.c,
 * final_schema): fixed while every shard has one and the same fixed shape, else VARIABLE with
 * the largest sizes and the smallest image. */
static void merge_sizes(dlc_field *a, const dlc_field *b)
{
    const int image = a->kind == DLC_FIELD_IMAGE, array = a->kind == DLC_FIELD_NDARRAY;
    if (!image && !array) {
        a->max_size = max64(a->max_size, b->max_size); /* bytes: the longest; scalars: 8. */
        return;
    }
    const int same = !(a->flags & DLC_FIELD_VARIABLE) && !(b->flags & DLC_FIELD_VARIABLE) &&
                     a->shape[0] == b->shape[0] && (!image || a->shape[1] == b->shape[1]);
    if (!same) {
        a->flags |= DLC_FIELD_VARIABLE;
        a->shape[0] = 0;
        if (image)
            a->shape[1] = 0;
    }
    a->max_dim0 = max32(a->max_dim0, b->max_dim0);
    a->max_dim1 = max32(a->max_dim1, b->max_dim1);
    if (image)
        merge_min(a, b);
    a->max_size =
        array ? (uint64_t)a->max_dim0 * dlc__field_row_bytes(a) : max64(a->max_size, b->max_size);
}

dlc_status dlc__set_merge_add(dlc__schema_merge *m, const dlc_store *shard, const char *dir,
                              const char *name, dlc_status code)
{
    const dlc_store_info *in = dlc_store_get_info(shard);
    const dlc_field *f = dlc_store_fields(shard);
    if (!m->started) {
        memcpy(m->fields, f, (size_t)in->num_fields * sizeof *f);
        m->num_fields = in->num_fields;
        m->have_records = in->count > 0;
        m->started = 1;
        m->records = in->count;
        return DLC_OK;
    }
    if (in->num_fields != m->num_fields) {
        /* The first field that one side has and the other lacks (by name), to act on. */
        const dlc_field *more = in->num_fields > m->num_fields ? f : m->fields;
        const dlc_field *less = in->num_fields > m->num_fields ? m->fields : f;
        const uint32_t nmore = in->num_fields > m->num_fields ? in->num_fields : m->num_fields;
        const uint32_t nless = in->num_fields > m->num_fields ? m->num_fields : in->num_fields;
        uint32_t i = 0;
        for (; i < nmore; i++) {
            uint32_t j = 0;
            while (j < nless && strcmp(less[j].name, more[i].name) != 0)
                j++;
            if (j == nless)
                break;
        }
        return dlc__errorf(code,
                           "%s: shard %s: %u fields, the shards before it have %u (field \"%s\" "
                           "is only in %s)",
                           dir, name, in->num_fields, m->num_fields, i < nmore ? more[i].name : "?",
                           more == f ? "this one" : "the shards before it");
    }
    for (uint32_t i = 0; i < m->num_fields; i++) {
        const char *what = static_mismatch(&m->fields[i], &f[i]);
        if (what)
            return dlc__errorf(code,
                               "%s: shard %s: field %u \"%s\": its %s differs from the shards "
                               "before it (field \"%s\")",
                               dir, name, i, f[i].name, what, m->fields[i].name);
    }
    /* A shard without records says nothing about the sizes; the first one with records
     * replaces whatever a shard without had. */
    if (in->count == 0)
        return DLC_OK;
    dlc_field b[DLC_MAX_FIELDS];
    memcpy(b, f, (size_t)m->num_fields * sizeof *f);
    for (uint32_t i = 0; i < m->num_fields; i++)
        move_min(&b[i], m->records);
    m->records += in->count;
    if (!m->have_records) {
        memcpy(m->fields, b, (size_t)m->num_fields * sizeof *b);
        m->have_records = 1;
        return DLC_OK;
    }
    for (uint32_t i = 0; i < m->num_fields; i++)
        merge_sizes(&m->fields[i], &b[i]);
    return DLC_OK;
}
