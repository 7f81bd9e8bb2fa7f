/* Private to the store: the on-disk layout of a dlcache store, shared by the
 * reader and the writer. docs/FORMAT.md describes the same bytes for people;
 * a change here is a format change and needs a new DLC_STORE_FORMAT_VERSION.
 * Version 1 (one image and one label per record) is kept for reading; the
 * writer writes version 2 (records of named fields under a schema).
 *
 * Every multi-byte field is little-endian and is read and written with the
 * explicit byte-order helpers of common.h: values inside the LMDB
 * map have no alignment promise, so mapped bytes are never cast to a struct. */
#ifndef DLCACHE_STORE_FORMAT_H
#define DLCACHE_STORE_FORMAT_H

#include "common.h"

#include <dlcache/store.h>

#include <stdint.h>
#include <string.h>

/* Names of the two LMDB databases of a store. */
#define DLC__DB_META "meta"
#define DLC__DB_SAMPLES "samples"
/* The store uses exactly these two named databases; readers and writers ask
 * LMDB for room for a few more so a future format can add one. */
#define DLC__MAX_DBS 4u

/* Keys of the meta database (ASCII, no terminating NUL in the key). */
#define DLC__META_FORMAT "format"
#define DLC__META_LABELS "labels"
#define DLC__META_LABEL_COUNTS "label_counts"
#define DLC__META_BUILD "build"
#define DLC__META_SOURCE_DIGEST "source_digest"
#define DLC__META_SCHEMA "schema" /* Version 2: the field entries. */
#define DLC__META_INDEX "index"   /* Version 2: record i's file offset, count x u64. */
/* Version 2, optional: the smallest image of each VARIABLE image field and the first records that
 * have it (below). A key of its own, not the schema's reserved words, which every reader before
 * it requires to be zero: those readers ignore a key they do not know, so they still open stores
 * that have it. */
#define DLC__META_MIN_DIMS "min_dims"

/* Label values must be below this; it bounds the label tables that the
 * writer and the reader allocate, whatever a file claims. */
#define DLC__MAX_LABELS (1u << 24)

/* ---- samples: key = record index as 8 bytes big-endian, so that LMDB's
 * memcmp order is numeric order and records are appended in key order. ---- */
#define DLC__KEY_SIZE 8u

/* ---- samples, version 1: value = this header, then the payload. ---- */
#define DLC__RECORD_MAGIC 0x52434C44u /* The bytes 'D' 'L' 'C' 'R' read as LE u32. */
#define DLC__RECORD_HEADER_SIZE 48u

/* The header as a struct, for the size check and for readers of this file;
 * the code encodes and decodes it field by field (dlc__record_header_load). */
typedef struct dlc__record_header {
    uint32_t magic;        /**< off 0: DLC__RECORD_MAGIC. */
    uint16_t header_size;  /**< off 4: DLC__RECORD_HEADER_SIZE. */
    uint16_t encoding;     /**< off 6: a dlc_encoding. */
    int64_t label;         /**< off 8: 0..num_labels-1. */
    uint32_t height;       /**< off 16: pixels. */
    uint32_t width;        /**< off 20: pixels. */
    uint32_t channels;     /**< off 24: interleaved channels. */
    uint32_t flags;        /**< off 28: 0 in format 1. */
    uint64_t payload_size; /**< off 32: bytes after the header. */
    uint64_t xxh3;         /**< off 40: XXH3_64bits(payload), seed 0. */
} dlc__record_header;
_Static_assert(sizeof(dlc__record_header) == DLC__RECORD_HEADER_SIZE,
               "the record header is 48 bytes on disk");

/* LMDB places a value larger than about a quarter page on overflow pages; the
 * value starts right after the 16-byte page header (PAGEHDRSZ in mdb.c), so
 * the payload starts at page + 16 + 48 = page + 64. That is the reason the
 * header is 48 bytes: the payload's file offset is then a multiple of 64. */
#define DLC__LMDB_PAGEHDRSZ 16u
_Static_assert((DLC__LMDB_PAGEHDRSZ + DLC__RECORD_HEADER_SIZE) % DLC_STORE_PAYLOAD_ALIGN == 0,
               "payloads on overflow pages start at a 64-byte boundary");

/* ---- meta "format": fixed binary info block, hashed. The first 12 bytes
 * (magic, version) are common to every version; the rest is read per version. ---- */
#define DLC__INFO_MAGIC "DLCSTORE"
#define DLC__INFO_SIZE 104u
#define DLC__INFO_HASHED 96u /* The XXH3 at offset 96 covers bytes 0..95. */

typedef struct dlc__store_info_disk {
    char magic[8];           /**< off 0: "DLCSTORE". */
    uint32_t format_version; /**< off 8: 1 (this layout; version 2 below). */
    uint32_t encoding;       /**< off 12: the records' dlc_encoding. */
    uint64_t count;          /**< off 16: records, keys 0..count-1. */
    uint32_t height;         /**< off 24: 0 when records differ. */
    uint32_t width;          /**< off 28: 0 when records differ. */
    uint32_t channels;       /**< off 32: 0 when records differ. */
    uint32_t num_labels;     /**< off 36: entries of "labels" and "label_counts". */
    uint64_t skipped;        /**< off 40: items the builder skipped. */
    uint64_t payload_bytes;  /**< off 48: sum of payload sizes. */
    uint64_t content_digest; /**< off 56: see docs/FORMAT.md. */
    uint64_t reserved[4];    /**< off 64: zero. */
    uint64_t xxh3;           /**< off 96: XXH3_64bits(bytes 0..95). */
} dlc__store_info_disk;
_Static_assert(sizeof(dlc__store_info_disk) == DLC__INFO_SIZE, "the info block is 104 bytes");

/* Record keys are big-endian so that byte order equals numeric order. */
static inline void dlc__record_key(uint8_t key[DLC__KEY_SIZE], uint64_t index)
{
    for (int i = 0; i < 8; i++)
        key[i] = (uint8_t)(index >> (56 - 8 * i));
}
static inline uint64_t dlc__record_key_value(const uint8_t key[DLC__KEY_SIZE])
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | key[i];
    return v;
}

static inline void dlc__record_header_store(uint8_t *p, const dlc__record_header *h)
{
    dlc__st32(p + 0, h->magic);
    dlc__st16(p + 4, h->header_size);
    dlc__st16(p + 6, h->encoding);
    dlc__st64(p + 8, (uint64_t)h->label);
    dlc__st32(p + 16, h->height);
    dlc__st32(p + 20, h->width);
    dlc__st32(p + 24, h->channels);
    dlc__st32(p + 28, h->flags);
    dlc__st64(p + 32, h->payload_size);
    dlc__st64(p + 40, h->xxh3);
}

static inline void dlc__record_header_load(const uint8_t *p, dlc__record_header *h)
{
    h->magic = dlc__ld32(p + 0);
    h->header_size = dlc__ld16(p + 4);
    h->encoding = dlc__ld16(p + 6);
    h->label = (int64_t)dlc__ld64(p + 8);
    h->height = dlc__ld32(p + 16);
    h->width = dlc__ld32(p + 20);
    h->channels = dlc__ld32(p + 24);
    h->flags = dlc__ld32(p + 28);
    h->payload_size = dlc__ld64(p + 32);
    h->xxh3 = dlc__ld64(p + 40);
}

/* Encodes everything but the trailing hash; the caller hashes bytes 0..95. */
static inline void dlc__info_store(uint8_t *p, const dlc__store_info_disk *in)
{
    memset(p, 0, DLC__INFO_SIZE);
    memcpy(p, DLC__INFO_MAGIC, 8);
    dlc__st32(p + 8, in->format_version);
    dlc__st32(p + 12, in->encoding);
    dlc__st64(p + 16, in->count);
    dlc__st32(p + 24, in->height);
    dlc__st32(p + 28, in->width);
    dlc__st32(p + 32, in->channels);
    dlc__st32(p + 36, in->num_labels);
    dlc__st64(p + 40, in->skipped);
    dlc__st64(p + 48, in->payload_bytes);
    dlc__st64(p + 56, in->content_digest);
    for (int i = 0; i < 4; i++)
        dlc__st64(p + 64 + 8 * i, in->reserved[i]);
    dlc__st64(p + 96, in->xxh3);
}

static inline void dlc__info_load(const uint8_t *p, dlc__store_info_disk *out)
{
    memcpy(out->magic, p, 8);
    out->format_version = dlc__ld32(p + 8);
    out->encoding = dlc__ld32(p + 12);
    out->count = dlc__ld64(p + 16);
    out->height = dlc__ld32(p + 24);
    out->width = dlc__ld32(p + 28);
    out->channels = dlc__ld32(p + 32);
    out->num_labels = dlc__ld32(p + 36);
    out->skipped = dlc__ld64(p + 40);
    out->payload_bytes = dlc__ld64(p + 48);
    out->content_digest = dlc__ld64(p + 56);
    for (int i = 0; i < 4; i++)
        out->reserved[i] = dlc__ld64(p + 64 + 8 * i);
    out->xxh3 = dlc__ld64(p + 96);
}

/* ==== Version 2 ==================================================================================
 * The "format" block keeps its size, magic, version and hash; the fields that described the one
 * image of version 1 give way to the schema's size and the label field. */
typedef struct dlc__store_info2_disk {
    char magic[8];           /**< off 0: "DLCSTORE". */
    uint32_t format_version; /**< off 8: 2. */
    uint32_t num_fields;     /**< off 12: entries of "schema", 1..DLC_MAX_FIELDS. */
    uint64_t count;          /**< off 16: records, keys 0..count-1. */
    uint32_t label_field;    /**< off 24: index of the DLC_FIELD_LABEL field, or DLC_NO_FIELD. */
    uint32_t flags;          /**< off 28: 0. */
    uint32_t reserved0;      /**< off 32: 0. */
    uint32_t num_labels;     /**< off 36: entries of "labels" and "label_counts". */
    uint64_t skipped;        /**< off 40: items the builder skipped. */
    uint64_t payload_bytes; /**< off 48: sum of every payload field's size (scalars not counted). */
    uint64_t content_digest; /**< off 56: see docs/FORMAT.md. */
    uint64_t reserved[4];    /**< off 64: zero. */
    uint64_t xxh3;           /**< off 96: XXH3_64bits(bytes 0..95). */
} dlc__store_info2_disk;
_Static_assert(sizeof(dlc__store_info2_disk) == DLC__INFO_SIZE, "the v2 info block is 104 bytes");

/* Encodes everything but the trailing hash; the caller hashes bytes 0..95. */
static inline void dlc__info2_store(uint8_t *p, const dlc__store_info2_disk *in)
{
    memset(p, 0, DLC__INFO_SIZE);
    memcpy(p, DLC__INFO_MAGIC, 8);
    dlc__st32(p + 8, in->format_version);
    dlc__st32(p + 12, in->num_fields);
    dlc__st64(p + 16, in->count);
    dlc__st32(p + 24, in->label_field);
    dlc__st32(p + 28, in->flags);
    dlc__st32(p + 32, in->reserved0);
    dlc__st32(p + 36, in->num_labels);
    dlc__st64(p + 40, in->skipped);
    dlc__st64(p + 48, in->payload_bytes);
    dlc__st64(p + 56, in->content_digest);
    for (int i = 0; i < 4; i++)
        dlc__st64(p + 64 + 8 * i, in->reserved[i]);
    dlc__st64(p + 96, in->xxh3);
}

static inline void dlc__info2_load(const uint8_t *p, dlc__store_info2_disk *out)
{
    memcpy(out->magic, p, 8);
    out->format_version = dlc__ld32(p + 8);
    out->num_fields = dlc__ld32(p + 12);
    out->count = dlc__ld64(p + 16);
    out->label_field = dlc__ld32(p + 24);
    out->flags = dlc__ld32(p + 28);
    out->reserved0 = dlc__ld32(p + 32);
    out->num_labels = dlc__ld32(p + 36);
    out->skipped = dlc__ld64(p + 40);
    out->payload_bytes = dlc__ld64(p + 48);
    out->content_digest = dlc__ld64(p + 56);
    for (int i = 0; i < 4; i++)
        out->reserved[i] = dlc__ld64(p + 64 + 8 * i);
    out->xxh3 = dlc__ld64(p + 96);
}

/* ---- meta "schema": num_fields entries of 128 bytes, each hashed on its own. ---- */
#define DLC__SCHEMA_ENTRY_SIZE 128u
#define DLC__SCHEMA_ENTRY_HASHED 120u /* The XXH3 at offset 120 covers bytes 0..119. */
#define DLC__FIELD_NAME_SIZE 32u      /* Up to 31 characters and at least one NUL. */

typedef struct dlc__schema_entry_disk {
    char name[DLC__FIELD_NAME_SIZE]; /**< off 0: NUL-padded; byte 31 is 0. */
    uint32_t kind;                   /**< off 32: a dlc_field_kind. */
    uint32_t dtype;                  /**< off 36: a dlc_dtype. */
    uint32_t encoding;               /**< off 40: a dlc_encoding (images), else 0. */
    uint32_t flags;                  /**< off 44: dlc_field_flags. */
    uint32_t ndim;                   /**< off 48: 3 (image), 1..6 (ndarray), 0. */
    uint32_t shape[DLC_MAX_DIMS];    /**< off 52: 0 where VARIABLE and past ndim. */
    uint32_t link;                   /**< off 76: BOXES: the class field, else DLC_NO_FIELD. */
    uint32_t max_dim0;               /**< off 80. */
    uint32_t max_dim1;               /**< off 84. */
    uint64_t max_size;               /**< off 88. */
    uint64_t reserved[3];            /**< off 96: zero. */
    uint64_t xxh3;                   /**< off 120: XXH3_64bits(bytes 0..119). */
} dlc__schema_entry_disk;
_Static_assert(sizeof(dlc__schema_entry_disk) == DLC__SCHEMA_ENTRY_SIZE,
               "a schema entry is 128 bytes on disk");

/* Encode field @p f as a schema entry with its hash. The name is NUL-padded: the bytes after it
 * are zero, so equal schemas are equal bytes. */
static inline void dlc__schema_entry_store(uint8_t *p, const dlc_field *f)
{
    memset(p, 0, DLC__SCHEMA_ENTRY_SIZE);
    memcpy(p, f->name, strnlen(f->name, DLC__FIELD_NAME_SIZE - 1));
    dlc__st32(p + 32, f->kind);
    dlc__st32(p + 36, f->dtype);
    dlc__st32(p + 40, f->encoding);
    dlc__st32(p + 44, f->flags);
    dlc__st32(p + 48, f->ndim);
    for (unsigned d = 0; d < DLC_MAX_DIMS; d++)
        dlc__st32(p + 52 + 4 * d, f->shape[d]);
    dlc__st32(p + 76, f->link);
    dlc__st32(p + 80, f->max_dim0);
    dlc__st32(p + 84, f->max_dim1);
    dlc__st64(p + 88, f->max_size);
}

/* Decode an entry into @p f; the reserved words and the hash go to the caller, who checks them.
 * The name is copied as stored (31 bytes and a NUL): the schema check judges it. */
static inline void dlc__schema_entry_load(const uint8_t *p, dlc_field *f, uint64_t reserved[3],
                                          uint64_t *xxh3)
{
    memcpy(f->name, p, DLC__FIELD_NAME_SIZE - 1);
    f->name[DLC__FIELD_NAME_SIZE - 1] = '\0';
    f->kind = dlc__ld32(p + 32);
    f->dtype = dlc__ld32(p + 36);
    f->encoding = dlc__ld32(p + 40);
    f->flags = dlc__ld32(p + 44);
    f->ndim = dlc__ld32(p + 48);
    for (unsigned d = 0; d < DLC_MAX_DIMS; d++)
        f->shape[d] = dlc__ld32(p + 52 + 4 * d);
    f->link = dlc__ld32(p + 76);
    f->max_dim0 = dlc__ld32(p + 80);
    f->max_dim1 = dlc__ld32(p + 84);
    f->max_size = dlc__ld64(p + 88);
    f->min_dim0 = f->min_dim1 = 0; /* Not in the schema: "min_dims" holds them. */
    f->min_record0 = f->min_record1 = 0;
    for (int i = 0; i < 3; i++)
        reserved[i] = dlc__ld64(p + 96 + 8 * i);
    *xxh3 = dlc__ld64(p + 120);
}

/* ---- meta "min_dims": num_fields entries of 24 bytes in schema order, then the XXH3-64 of the
 * entries (dlc__min_dims_encode/decode, store_schema.c). An entry is all zero except for a
 * VARIABLE image field of a store with records:
 *   +0 u32 min_dim0   the smallest height of any record
 *   +4 u32 min_dim1   the smallest width of any record
 *   +8 u64 record0    the first record whose height is min_dim0
 *   +16 u64 record1   the first record whose width is min_dim1 ---- */
#define DLC__MIN_DIMS_ENTRY 24u
#define DLC__MIN_DIMS_SIZE(nf) ((size_t)(nf)*DLC__MIN_DIMS_ENTRY + 8u)

/* ---- samples, version 2: value = record header (fixed part, one entry per field, zero padding
 * up to header_size), then the payloads of image, ndarray and bytes fields in field order, each
 * at the first value offset >= the end of the one before (header_size for the first) that is
 * 48 mod 64. The layout is a pure function of the values: a reader checks each payload's offset
 * exactly, and the value ends where the last payload does (at header_size without one). ---- */
#define DLC__RECORD2_MAGIC 0x32524C44u /* The bytes 'D' 'L' 'R' '2' read as LE u32. */
#define DLC__RECORD2_FIXED 16u         /* magic, header_size, num_fields, index. */
#define DLC__FIELD_ENTRY_SIZE 32u

typedef struct dlc__field_entry {
    uint64_t off_or_value; /**< +0: payload offset from the value start; int: the int64; float:
                                the float64's bits. */
    uint64_t size;         /**< +8: payload bytes (scalars: 8). */
    uint32_t dim0;         /**< +16: image height; ndarray leading dimension; else 0. */
    uint32_t dim1;         /**< +20: image width; else 0. */
    uint64_t xxh3;         /**< +24: XXH3_64bits of the payload (scalars: of the 8 LE bytes). */
} dlc__field_entry;
_Static_assert(sizeof(dlc__field_entry) == DLC__FIELD_ENTRY_SIZE, "a field entry is 32 bytes");

/* The first offset >= @p off that is 48 mod 64: LMDB's overflow values start 16 bytes into a
 * page, so such a payload sits at a file offset that is a multiple of DLC_STORE_PAYLOAD_ALIGN. */
static inline uint64_t dlc__payload_at(uint64_t off)
{
    return off + ((48u - off % 64u) & 63u);
}
_Static_assert((DLC__LMDB_PAGEHDRSZ + 48u) % DLC_STORE_PAYLOAD_ALIGN == 0,
               "payloads 48 mod 64 into an overflow value start 64-byte aligned in the file");

/* header_size for @p num_fields fields: room for the entries, rounded up to 48 mod 64 so that
 * the first payload follows the header without padding. */
static inline uint32_t dlc__record2_header_size(uint32_t num_fields)
{
    return (uint32_t)dlc__payload_at(DLC__RECORD2_FIXED + DLC__FIELD_ENTRY_SIZE * num_fields);
}

static inline void dlc__field_entry_store(uint8_t *p, const dlc__field_entry *e)
{
    dlc__st64(p + 0, e->off_or_value);
    dlc__st64(p + 8, e->size);
    dlc__st32(p + 16, e->dim0);
    dlc__st32(p + 20, e->dim1);
    dlc__st64(p + 24, e->xxh3);
}

static inline void dlc__field_entry_load(const uint8_t *p, dlc__field_entry *e)
{
    e->off_or_value = dlc__ld64(p + 0);
    e->size = dlc__ld64(p + 8);
    e->dim0 = dlc__ld32(p + 16);
    e->dim1 = dlc__ld32(p + 20);
    e->xxh3 = dlc__ld64(p + 24);
}

/* The 24 bytes of one field of one record that the v2 content digest hashes: its checksum, size
 * and dimensions, which stand for its bytes (up to XXH3 collisions) without rehashing them. */
#define DLC__DIGEST_ITEM 24u
static inline void dlc__digest_item(uint8_t *p, uint64_t xxh3, uint64_t size, uint32_t dim0,
                                    uint32_t dim1)
{
    dlc__st64(p, xxh3);
    dlc__st64(p + 8, size);
    dlc__st32(p + 16, dim0);
    dlc__st32(p + 20, dim1);
}

/* ---- LMDB's own layout (mdb.c of LMDB 0.9, native byte order, which is
 * little-endian on every machine we build for). The reader checks these
 * structures itself before LMDB walks them, because LMDB trusts its file and
 * a damaged page would make it read outside the map. ---- */

/* Where the store's two databases are, from the LMDB meta pages and the
 * main database. */
typedef struct dlc__lmdb_db {
    uint16_t flags;     /* md_flags: 0 for the plain databases of a store. */
    uint16_t depth;     /* md_depth: levels of the B-tree. */
    uint64_t entries;   /* md_entries: key/value pairs. */
    uint64_t root;      /* md_root: root page, or UINT64_MAX when empty. */
    uint64_t max_value; /* The largest value the page walk found (not on disk). */
} dlc__lmdb_db;

typedef struct dlc__lmdb_layout {
    uint64_t psize;   /* Page size of the file. */
    uint64_t last_pg; /* Last page in use; the file must hold pages 0..last_pg. */
    uint64_t txnid;   /* Of the meta page in use. */
    dlc__lmdb_db main_db;
} dlc__lmdb_layout;

/* Read and check both LMDB meta pages of @p fd with pread, pick the newer
 * one as LMDB does, and check that the file holds every page it names.
 * DLC_EVERSION when this is not an LMDB file; DLC_ECORRUPT when it is one
 * that cannot be right (truncated, impossible sizes). */
dlc_status dlc__lmdb_read_layout(const char *path, int fd, uint64_t file_size,
                                 dlc__lmdb_layout *out);

/* Walk every branch and leaf page of the main database and of the named
 * databases "meta" and "samples" in @p map (file_size bytes, pages 0..last_pg
 * present), checking that each node, key and value lies inside its page or
 * inside the file, that no page is reached twice and that depths and entry
 * counts agree, so that LMDB's own walks cannot leave the map. Overflow pages
 * are not read (that would cost one page per record); the values' extents
 * are checked against the file size instead. Fills @p meta_db and
 * @p samples_db, and the file extents of up to @p meta_cap pairs of "meta"
 * (more is DLC_ECORRUPT); DLC_EVERSION when either database is missing.
 * Without @p walk_samples the pages of "samples" are not walked, only its
 * record checked (root page inside the file, depth, a count): for a store
 * whose reads never go through LMDB, until something walks that tree
 * (dlc_store_verify() then calls this with @p walk_samples). */
/* Where one key/value pair of the "meta" database lies in the file. */
typedef struct dlc__lmdb_entry {
    uint64_t key_off;
    uint64_t key_len;
    uint64_t val_off;
    uint64_t val_len;
} dlc__lmdb_entry;

dlc_status dlc__lmdb_check_trees(const char *path, const uint8_t *map, uint64_t file_size,
                                 const dlc__lmdb_layout *layout, dlc__lmdb_db *meta_db,
                                 dlc__lmdb_db *samples_db, dlc__lmdb_entry *meta_entries,
                                 size_t meta_cap, size_t *num_meta, int walk_samples);

#endif /* DLCACHE_STORE_FORMAT_H */
