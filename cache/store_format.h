/* Private to the store: the on-disk layout of a dlcache store, shared by the
 * reader and the writer. docs/FORMAT.md describes the same bytes for people;
 * a change here is a format change and needs a new DLC_STORE_FORMAT_VERSION.
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

/* Label values must be below this; it bounds the label tables that the
 * writer and the reader allocate, whatever a file claims. */
#define DLC__MAX_LABELS (1u << 24)

/* ---- samples: key = record index as 8 bytes big-endian, so that LMDB's
 * memcmp order is numeric order and records are appended in key order. ---- */
#define DLC__KEY_SIZE 8u

/* ---- samples: value = this header, then the payload. ---- */
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

/* ---- meta "format": fixed binary info block, hashed. ---- */
#define DLC__INFO_MAGIC "DLCSTORE"
#define DLC__INFO_SIZE 104u
#define DLC__INFO_HASHED 96u /* The XXH3 at offset 96 covers bytes 0..95. */

typedef struct dlc__store_info_disk {
    char magic[8];           /**< off 0: "DLCSTORE". */
    uint32_t format_version; /**< off 8: 1. */
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

/* ---- LMDB's own layout (mdb.c of LMDB 0.9, native byte order, which is
 * little-endian on every machine we build for). The reader checks these
 * structures itself before LMDB walks them, because LMDB trusts its file and
 * a damaged page would make it read outside the map. ---- */

/* Where the store's two databases are, from the LMDB meta pages and the
 * main database. */
typedef struct dlc__lmdb_db {
    uint16_t flags;   /* md_flags: 0 for the plain databases of a store. */
    uint16_t depth;   /* md_depth: levels of the B-tree. */
    uint64_t entries; /* md_entries: key/value pairs. */
    uint64_t root;    /* md_root: root page, or UINT64_MAX when empty. */
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
 * (more is DLC_ECORRUPT); DLC_EVERSION when either database is missing. */
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
                                 size_t meta_cap, size_t *num_meta);

#endif /* DLCACHE_STORE_FORMAT_H */
