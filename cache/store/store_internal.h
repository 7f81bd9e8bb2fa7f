/* Private to the store part (cache/store/store_*.c): the schema rules shared by the writer, which
 * refuses a bad schema as DLC_EINVAL, and the reader, which refuses one read from a file as
 * DLC_ECORRUPT; the per-field facts the read path computes once at open; and the hooks the
 * version 1 writer API (cache/store/store_compat.h) uses to run on top of dlc_writer. */
#ifndef DLCACHE_STORE_INTERNAL_H
#define DLCACHE_STORE_INTERNAL_H

#include <dlcache/store.h>
#include <dlcache/writer.h>

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>

/* The largest record value LMDB can hold: its leaf nodes keep a value's size in 32 bits. Every
 * payload size a schema allows, and every record a builder lays out, stays within it. */
#define DLC__MAX_VALUE ((uint64_t)UINT32_MAX)
/* The largest image side a schema or a value may give (the image part's limit). */
#define DLC__MAX_SIDE (1u << 20)
/* libjpeg's own limit on a side (JPEG_MAX_DIMENSION). */
#define DLC__JPEG_MAX_SIDE 65500u

/* ---- Schema rules (store_schema.c) ---------------------------------------------------------- */

/* Check the rules of docs/FORMAT.md that concern the schema alone: names, kinds, dtypes,
 * encodings, flags, shapes and links. On the first bad field, record "PREFIX: field I "NAME":
 * reason" (the name only when it is a valid one) and return @p code. */
dlc_status dlc__schema_check(const dlc_field *fields, uint32_t n, dlc_status code,
                             const char *prefix);

/* Check max_dim0, max_dim1 and max_size of every field against its shape, as the reader does
 * (the writer computes them). Same message and return as dlc__schema_check(). */
dlc_status dlc__schema_check_maxes(const dlc_field *fields, uint32_t n, uint64_t count,
                                   dlc_status code, const char *prefix);

/* Decode and check the @p nf schema entries of @p p (the "schema" meta value, or a set index's
 * schema block) into @p out: each entry's hash, NUL padding and reserved words, then every rule
 * of dlc__schema_check() and dlc__schema_check_maxes() for @p count records. DLC_ECORRUPT names
 * @p path. */
dlc_status dlc__schema_decode(const uint8_t *p, uint32_t nf, uint64_t count, const char *path,
                              dlc_field *out);

/* The smallest image of each field (dlc_field.min_*; docs/FORMAT.md, "min_dims"). Readers fill
 * fixed images from their shape (dlc__schema_min_fixed) and VARIABLE ones from the "min_dims" meta
 * value when the store has one (dlc__min_dims_decode: its size, hash and that each entry fits the
 * schema's largest sizes and @p count records, else DLC_ECORRUPT naming @p path); without it
 * they stay 0, unknown. The writer encodes its fields' (dlc__min_dims_encode, @p p of
 * DLC__MIN_DIMS_SIZE(n) bytes) when dlc__min_dims_wanted() says some field has an entry. */
void dlc__schema_min_fixed(dlc_field *fields, uint32_t n, uint64_t count);
int dlc__min_dims_wanted(const dlc_field *fields, uint32_t n, uint64_t count);
void dlc__min_dims_encode(uint8_t *p, const dlc_field *fields, uint32_t n, uint64_t count);
dlc_status dlc__min_dims_decode(const uint8_t *v, size_t len, uint32_t n, uint64_t count,
                                const char *path, dlc_field *fields);

/* Bytes of one index of the leading dimension of ndarray @p f (the product of shape[1..] and the
 * element size); 0 for other kinds. Only for fields that passed dlc__schema_check(). */
uint64_t dlc__field_row_bytes(const dlc_field *f);

/* Does field kind @p kind keep its value in the record header (int, float) rather than in a
 * payload? */
static inline int dlc__kind_is_scalar(uint32_t kind)
{
    return kind == DLC_FIELD_INT || kind == DLC_FIELD_FLOAT;
}

/* The two fields a version 1 store reads as: "image" (of the store's encoding and shape, 0
 * where records differ) and "label". @p max_size: the largest payload found at open. */
void dlc__schema_v1(dlc_field out[2], uint32_t encoding, uint32_t height, uint32_t width,
                    uint32_t channels, uint64_t max_size);

/* ---- Per-field facts for the read path (store_read.c), computed once at open ---------------- */
typedef struct dlc__field_rt {
    uint32_t kind;
    uint32_t encoding;
    uint32_t fixed;    /* Not DLC_FIELD_VARIABLE: dim0 (and dim1) must equal the shape. */
    uint32_t dim0;     /* Fixed: shape[0] (image: height). */
    uint32_t dim1;     /* Fixed image: width. */
    uint32_t max_dim0; /* Variable: the largest dim0 allowed. */
    uint32_t max_dim1;
    uint32_t min_dim0; /* Variable image: the smallest dim0 allowed (0: unknown, any). */
    uint32_t min_dim1;
    uint32_t link; /* BOXES: the class field, whose dim0 must equal this one's; else DLC_NO_FIELD */
    uint64_t unit; /* Raw image: channels; ndarray: bytes per leading index; else 0. */
    uint64_t max_size; /* Encoded images and bytes: the largest payload allowed. */
} dlc__field_rt;

void dlc__field_rt_init(dlc__field_rt *rt, const dlc_field *f);

/* ---- The open store (store_open.c opens it; store_read.c and store_verify.c read it) ------- */

/* One key/value pair of the "meta" database, as views into the map. */
typedef struct dlc__meta_entry {
    const uint8_t *key;
    size_t key_len;
    const uint8_t *val;
    size_t val_len;
} dlc__meta_entry;

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
    dlc__meta_entry *meta;
    size_t num_meta;
    dlc_field fields[DLC_MAX_FIELDS]; /* The schema (version 1: image and label). */
    dlc__field_rt rt[DLC_MAX_FIELDS]; /* What the read path checks per field. */
    const uint8_t *index;             /* Version 2: count x u64 offsets, in the map. */
    uint32_t header_size;             /* Version 2: of every record. */
    uint32_t num_boxes;               /* Fields with DLC_FIELD_BOXES, */
    uint32_t boxes[DLC_MAX_FIELDS];   /* their indices. */
    uint32_t file_no; /* This file's number among the files of its set (dlc_value.file); 0 for a
                         single store. */

    /* A store set (store_set.c): the handle of the directory holds no LMDB environment of its
     * own (fd -1, env and map NULL); its records are its shards'. NULL and 0 for a single
     * store, and for a shard. */
    struct dlc_store **shards; /* num_shards open shards, in record order. */
    uint64_t *firsts;          /* num_shards + 1: firsts[k] is the global number of shard k's
                                  first record; firsts[num_shards] = count. */
    uint32_t num_shards;
    uint8_t *set_index; /* The index file's bytes as read at open (dlc_store_verify() compares). */
    size_t set_index_len;
    /* A set opened lazily (store_set_lazy.c, for streaming): its shards are attached one by one
     * as they arrive and detached when evicted, so shards[k] may be NULL, and is read and
     * written with atomics; the decoded index is kept to check each shard against. */
    int lazy;
    struct dlc__set_index *lazy_index;
};

struct dlc_store_reader {
    const dlc_store *s;
    MDB_txn *txn;              /* A single store's; NULL for a set. */
    dlc_store_reader **shards; /* A set's: one reader per shard, made at reader_open. */
};

/* Fill info's image fields (encoding, height, width, channels, image_field) from the first image
 * field of @p s's schema. */
void dlc__store_image_info(dlc_store *s);

/* Open the single store file @p path (dlc_store_open() without the check for a set directory;
 * the set opens its shards with it, so a shard can never be a directory). */
dlc_status dlc__store_open_file(const char *path, uint32_t flags, dlc_store **out);

/* An LMDB return code as a dlc_status for readers (store_open.c). */
dlc_status dlc__store_lmdb_status(int rc);

/* Check the value of record @p index of a version 2 store, which starts at file offset @p off
 * and holds @p len bytes (UINT64_MAX when unknown: the offset table does not say), and fill
 * @p values. Bounds, header, every field's size and dimensions against the schema, the label's
 * range; not the checksums (store_read.c). */
dlc_status dlc__read_v2(const dlc_store *s, uint64_t index, uint64_t off, uint64_t len,
                        dlc_value *values);

/* The same for the value of record @p index of a version 1 store, as LMDB gives it: @p rec and,
 * when @p values is not NULL, the two fields image and label. */
dlc_status dlc__read_v1(const dlc_store *s, uint64_t index, const MDB_val *v, dlc_record *rec,
                        dlc_value *values);

/* ---- Hooks for the version 1 writer API (store_compat.c over store_writer.c) ---------------- */

/* Create PATH.tmp-PID like dlc_writer_open(), with the schema left for later: the version 1 API
 * learns the image's encoding and channels from its first record. Such a writer also accepts
 * label values up to DLC__MAX_LABELS - 1 until finish (which checks them against the names it is
 * given then) and may finish with no record. */
dlc_status dlc__writer_open_deferred(const char *path, int force, uint64_t size_hint,
                                     dlc_writer **out);

/* Give a deferred writer its schema; before the first append only. DLC_EINVAL names the field. */
dlc_status dlc__writer_set_schema(dlc_writer *w, const dlc_field_spec *fields, uint32_t n);

/* Does @p w have a schema yet? */
int dlc__writer_has_schema(const dlc_writer *w);

/* The metadata a deferred writer learns at the end: label names (copied), skipped items, the
 * "build" JSON (copied) and the source digest. DLC_EINVAL when a label value already appended
 * is not below @p num_labels (naming the record), -ENOMEM. */
dlc_status dlc__writer_set_meta(dlc_writer *w, const char *const *label_names, uint32_t num_labels,
                                uint64_t skipped, const char *build_json, uint64_t source_digest);

/* Make @p w's store part @p part of @p parts of a store set (docs/FORMAT.md, "Store sets"):
 * finish writes the "set_part" meta record (I, N, set_id, the half-open range of source items
 * [first_item, end_item) it was built from), and accepts a part without records (every one of
 * its items skipped). Call before finish; a second call replaces the first. DLC_EINVAL when
 * part >= parts, parts is 0 or over 65536, or first_item > end_item. The part's path is
 * DIR/part-%05u-of-%05u.dlc (dlc__set_part_name() in store_set.h); dlc_set_join() then writes
 * the set's index. */
dlc_status dlc__writer_set_part(dlc_writer *w, uint32_t part, uint32_t parts, uint64_t set_id,
                                uint64_t first_item, uint64_t end_item);

/* PATH.tmp-PID, owned by @p w. */
const char *dlc__writer_temp_path(const dlc_writer *w);

/* The schema as a builder copies it, with the token that dlc_writer_append() compares. */
const dlc_field *dlc__writer_fields(const dlc_writer *w, uint32_t *n, uint64_t *token);
/* JPEG quality of field @p i (1..100). */
int dlc__writer_quality(const dlc_writer *w, uint32_t i);

/* ---- What a sealed builder hands to dlc_writer_append() (store_record.c) -------------------- */
typedef struct dlc__sealed {
    const uint8_t *value; /* The record value, index field 0; patched by append. */
    size_t size;          /* Bytes of value. */
    uint64_t token;       /* The schema token of the writer the builder was made for. */
    uint64_t payload;     /* Sum of the payload fields' sizes. */
} dlc__sealed;

/* The sealed record of @p b, or DLC_ESTATE when it is not sealed. */
dlc_status dlc__record_sealed(const dlc_record_builder *b, dlc__sealed *out);

/* Forget @p b's record after it was appended. */
void dlc__record_appended(dlc_record_builder *b);

/* Where the pixels of raw image field @p field will lie in @p b's sealed record, with room for
 * @p size bytes there: a caller that writes the image at that place (rows packed) and then names
 * it in dlc_record_set_image() saves the seal its copy (the builder resizes straight into the
 * record, build_item.c). NULL when the field has no place known before the seal (a field before
 * it with a payload, an encoded image, a sealed builder) or no memory: the caller then uses a
 * buffer of its own. The place stays valid until the builder is sealed, reset or destroyed, or
 * asked for another place. */
uint8_t *dlc__record_image_place(dlc_record_builder *b, uint32_t field, size_t size);

/* The most ids one document of a token store holds: its record's value stays below 4 GiB less
 * the record's 64 bytes of framing, with the end-of-document id that dlc_token_writer_add() may
 * append. */
#define DLC__TOKENS_DOC_MAX(esize) ((UINT32_MAX - 64u) / (esize)-1u)

#endif /* DLCACHE_STORE_INTERNAL_H */
