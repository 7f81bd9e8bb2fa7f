/* Private to the store part: store sets (docs/FORMAT.md, "Store sets"). A set is a directory of
 * N version 2 stores, the shards, and a checksummed index written last. This header has the
 * bytes of the index and of a shard's "set_part" record (store_set_index.c), the merge of the
 * shards' schemas into the set's (store_set_index.c), and the calls that dlc_store_open(),
 * the readers and dlc_store_verify() make when the store is a set (store_set.c,
 * store_set_verify.c). dlc__set_join() (store_set_join.c) writes the index.
 *
 * A set's records are numbered globally: shard k holds records first_k .. first_k + count_k - 1,
 * whose own numbers inside the shard are 0 .. count_k - 1. */
#ifndef DLCACHE_STORE_SET_H
#define DLCACHE_STORE_SET_H

#include "store_internal.h"

#include <dlcache/set.h>
#include <dlcache/store.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The file whose presence makes a directory a set. */
#define DLC__SET_INDEX_NAME "index.dlcset"
#define DLC__SET_MAGIC "DLCSET01"
#define DLC__SET_VERSION 1u
#define DLC__SET_HEADER 56u    /* Bytes before the shard entries. */
#define DLC__SET_ENTRY 96u     /* Bytes of one shard entry. */
#define DLC__SET_NAME_SIZE 64u /* A shard's name, NUL-padded: up to 63 characters. */
#define DLC__SET_MAX_SHARDS 65536u
/* An index larger than this is not one we wrote (65536 shards, 64 fields and 2^24 labels of
 * a few bytes each fit well inside): the reader refuses it before reading it into memory. */
#define DLC__SET_MAX_INDEX_BYTES (256u << 20)

/* The meta key of a shard's place in its set, and its 48 bytes. */
#define DLC__META_SET_PART "set_part"
#define DLC__SET_PART_MAGIC "DLCPART1"
#define DLC__SET_PART_SIZE 48u
#define DLC__SET_PART_HASHED 40u /* The XXH3 at offset 40 covers bytes 0..39. */

/* A shard's "set_part" record: which part of which set it is, and the source items it was
 * built from. */
typedef struct dlc__set_part {
    uint32_t part;       /* I, 0..parts-1. */
    uint32_t parts;      /* N, 1..DLC__SET_MAX_SHARDS. */
    uint64_t set_id;     /* The build's identity: equal in every part of one set. */
    uint64_t first_item; /* The half-open range of source items the part was built from. */
    uint64_t end_item;
} dlc__set_part;

/* Encode @p p with its hash into @p out. */
void dlc__set_part_encode(uint8_t out[DLC__SET_PART_SIZE], const dlc__set_part *p);

/* Decode and check a "set_part" value of @p len bytes: size, magic, hash, I < N <= max,
 * first_item <= end_item. DLC_ECORRUPT names @p who. */
dlc_status dlc__set_part_decode(const uint8_t *v, size_t len, const char *who, dlc__set_part *out);

/* "part-%05u-of-%05u.dlc": the name of part @p part of @p parts in its set's directory. */
void dlc__set_part_name(char out[DLC__SET_NAME_SIZE], uint32_t part, uint32_t parts);

/* "A/B" (B "" gives "A/"), malloc'd; NULL when out of memory. (asprintf() leaves its pointer
 * undefined on failure, which the cleanup ladders would then free.) */
static inline char *dlc__set_path(const char *a, const char *sep, const char *b)
{
    const size_t n = strlen(a) + strlen(sep) + strlen(b) + 1;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s%s%s", a, sep, b);
    return p;
}

/* One shard entry of the index. */
typedef struct dlc__set_shard {
    char name[DLC__SET_NAME_SIZE]; /* [A-Za-z0-9._-], 1..63 characters, NUL-padded. */
    uint64_t count;                /* Records of the shard. */
    uint64_t first;                /* Global number of its first record. */
    uint64_t content_digest;       /* Its dlc_store_info.content_digest. */
    uint64_t file_bytes;           /* Its file's size. */
} dlc__set_shard;

/* The decoded index. */
typedef struct dlc__set_index {
    uint32_t num_shards;
    uint64_t count;
    uint64_t set_id;
    uint64_t schema_hash; /* XXH3 of the schema block. */
    uint32_t num_fields;
    uint32_t num_labels;
    uint32_t labels_bytes;
    dlc__set_shard *shards;           /* num_shards entries; malloc'd. */
    dlc_field fields[DLC_MAX_FIELDS]; /* The set's schema (the merge of its shards'). */
    char *labels;                     /* labels_bytes bytes: num_labels NUL-terminated names;
                                         malloc'd (NULL when labels_bytes is 0). */
} dlc__set_index;

/* Decode and check every rule of the index (docs/FORMAT.md) in @p p, @p len bytes read from
 * @p path: magic and version (DLC_EVERSION), size, checksum, reserved words, names, firsts,
 * count, schema, labels (DLC_ECORRUPT naming @p path and what disagrees). @p out is filled on
 * success and must be released with dlc__set_index_free() in every case. */
dlc_status dlc__set_index_decode(const uint8_t *p, size_t len, const char *path,
                                 dlc__set_index *out);

/* Encode @p x (counts, firsts, fields and labels as given; schema_hash computed) into a
 * malloc'd buffer. DLC_OK or -ENOMEM. */
dlc_status dlc__set_index_encode(const dlc__set_index *x, uint8_t **out, size_t *len);

/* Free what @p x owns. Accepts a zeroed index. */
void dlc__set_index_free(dlc__set_index *x);

/* Check the parts in @p dir and write its index: dlc_set_join() (include/dlcache/set.h) as it
 * documents, without taking back retired parts before and removing garbage after, which belong
 * to the builder's way of replacing a set (cache/builder/build_setdir.c) that wraps this call.
 * The store part's tests and tools that write parts themselves join with this. */
dlc_status dlc__set_join(const char *dir, dlc_set_join_report *report);

/* Read the index file @p path whole into a malloc'd buffer: -errno (-ENOENT when there is
 * none), DLC_ECORRUPT when it is larger than any index. */
dlc_status dlc__set_index_read(const char *path, uint8_t **out, size_t *len);

/* The set's schema from its shards': fields that agree in everything but their sizes are
 * merged the way a single store of all the records would have them (fixed where every shard
 * with records has the same fixed shape, else VARIABLE with the largest sizes, and the smallest
 * image with the first record that has it, by its global number; unknown when a shard with
 * records does not know its own). Shards without
 * records must agree on the rest but do not change the sizes. Add the shards in order; @p code
 * (DLC_EINVAL joining, DLC_ECORRUPT opening) names @p dir, the shard and the field that
 * disagree. */
typedef struct dlc__schema_merge {
    dlc_field fields[DLC_MAX_FIELDS];
    uint32_t num_fields;
    int have_records; /* Some merged shard had records: the sizes are the records'. */
    int started;
    uint64_t records; /* Of the shards merged so far: the global number of the next one's first
                         record, which its min_record0/1 are moved by. */
} dlc__schema_merge;
dlc_status dlc__set_merge_add(dlc__schema_merge *m, const dlc_store *shard, const char *dir,
                              const char *name, dlc_status code);

/* Do the contiguous item ranges of @p prev (part k-1, or NULL for part 0) and @p p agree? */
int dlc__set_items_follow(const dlc__set_part *prev, const dlc__set_part *p);

/* ---- The open set (store_set.c) ----------------------------------------------------------- */

/* Shard @p k of set @p s, or NULL when a lazily opened set does not hold it now. */
static inline const dlc_store *dlc__set_shard_at(const dlc_store *s, uint32_t k)
{
    return s->lazy ? __atomic_load_n(&s->shards[k], __ATOMIC_ACQUIRE) : s->shards[k];
}

/* Shard @p sh, opened as shard @p k of set @p s, against the index @p x: its place in the set
 * (and, with @p follow, that its source items follow @p prev's), set_id, record count, content
 * digest, size and labels. DLC_ECORRUPT names the set, the shard and both values. */
dlc_status dlc__set_check_shard(const dlc_store *s, const dlc_store *sh, const dlc__set_index *x,
                                uint32_t k, dlc__set_part *part, const dlc__set_part *prev,
                                int follow);

/* The union of set @p s from its index @p x alone (its schema already in s->fields): labels
 * (copied), count, the content digest over the shards' and their bytes. Label counts are zero,
 * skipped items and payload bytes 0: only the shards know those. */
dlc_status dlc__set_index_info(dlc_store *s, const dlc__set_index *x);

/* ---- A set opened lazily, for streaming (store_set_lazy.c) ----------------------------------
 * The union is made from the index alone: count, schema, labels, the shards' record ranges, the
 * content digest and the bytes (the index's; the label counts, skipped items and payload bytes
 * are the shards' and read as 0). Shards are attached when they are local and detached before
 * they are removed; a read of a record whose shard is not attached fails with DLC_EINVAL naming
 * it (the streaming layer attaches every shard of a batch before its reads). Version 2 shards
 * only: their reads need no LMDB transaction, so one reader serves every shard. */
dlc_status dlc__set_open_lazy(const char *dir, dlc_store **out);
/* The same from the index's @p len bytes at @p index (copied), the set named @p dir, which need
 * not exist: nothing is read from the file system (planning a streamed set writes nothing). */
dlc_status dlc__set_open_lazy_bytes(const char *dir, const uint8_t *index, size_t len,
                                    dlc_store **out);
/* Open @p path as shard @p k, check it against the index (its place, set_id, record count,
 * content digest, size and labels; DLC_ECORRUPT naming the shard and both values) and attach
 * it. Thread safety: one attach or detach of a shard at a time; reads of other shards may run. */
dlc_status dlc__set_attach(dlc_store *s, uint32_t k, const char *path);
/* Close and detach shard @p k (nothing when it is not attached). The caller guarantees that
 * no read of it runs or follows until it is attached again. */
void dlc__set_detach(dlc_store *s, uint32_t k);
/* Whether shard @p k is attached now. */
int dlc__set_attached(const dlc_store *s, uint32_t k);
/* A reader for shard @p k in @p tmp, or NULL with DLC_EINVAL's message when it is not attached
 * (a read of record @p index came before its shard). */
dlc_store_reader *dlc__set_lazy_reader(const dlc_store *s, uint32_t k, uint64_t index,
                                       dlc_store_reader *tmp);

/* Open the set in directory @p dir: read and check the index, open every shard and check it
 * against the index, and fill @p *out with the union. */
dlc_status dlc__set_open(const char *dir, uint32_t flags, dlc_store **out);

/* Free the set's own parts (its shards and tables); dlc_store_close() frees the rest. Does
 * nothing to a single store. */
void dlc__set_close(dlc_store *s);

/* The shard that holds global record @p index < count: the last k with firsts[k] <= index. */
static inline uint32_t dlc__set_shard_of(const dlc_store *s, uint64_t index)
{
    uint32_t lo = 0, hi = s->num_shards;
    while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (s->firsts[mid] <= index)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* A failure of shard @p k reading its record for global record @p index, said again naming the
 * set, the global record, the shard and the shard's own record number; returns @p rc. Cold. */
dlc_status dlc__set_shard_error(const dlc_store *s, uint32_t k, uint64_t index, dlc_status rc);

/* Shard @p k's message @p msg ("SHARD: record L: reason", or "SHARD: reason") said again for the
 * set: "SET: record G (record L of shard NAME): reason" or "SET: shard NAME: reason". Records it
 * for dlc_errmsg() and returns @p rc. */
dlc_status dlc__set_shard_msg(const dlc_store *s, uint32_t k, const char *msg, dlc_status rc);

/* "SET: record G (record L of shard NAME)" or "STORE: record G" for a single store, for
 * messages about record @p index in file @p file. */
void dlc__record_where(const dlc_store *s, uint32_t file, uint64_t index, char *buf, size_t cap);

/* dlc_store_verify() of a set (store_set_verify.c). */
dlc_status dlc__set_verify(const dlc_store *s, dlc_verify_fn fn, void *user, uint64_t *bad);

/* ---- A union of stores and sets, for a mixture (store_set_union.c) --------------------------
 * Opened like a set whose shards are every source's files in order: a store is one file, a
 * set's shards are taken over from it. The sources must be version 2 stores or sets with records
 * whose schemas agree but for sizes (merged as a set's; DLC_EINVAL names @p name, the source's
 * path and the field). Labels: source s's label l is label_offsets[s] + l of the union (NULL:
 * no offsets), whose names are each source's at its offset (the first source's where they
 * overlap, "" where none). */
typedef struct dlc__union_part {
    uint64_t first;      /* Global number of the source's first record. */
    uint64_t count;      /* Its records. */
    uint64_t digest;     /* Its content digest. */
    uint32_t first_file; /* Its first file among the union's. */
    uint32_t num_files;  /* Its files. */
} dlc__union_part;
/* @p lazy (NULL: none) gives, per source, a set the caller opened lazily (a streamed source,
 * dlc__set_open_lazy()) or NULL: such a source's files are the union's but not attached (NULL)
 * until the caller publishes a shard attached to the lazy set (dlc__union_attach()), and the
 * union is then lazy itself (read with acquire loads). The caller keeps the lazy set, which must
 * outlive the union; every shard of it must be detached before the union is closed. */
dlc_status dlc__store_open_union(const char *name, const char *const *paths, uint32_t n,
                                 const int64_t *label_offsets, uint32_t flags,
                                 dlc_store *const *lazy, dlc__union_part *parts, dlc_store **out);
/* Shard @p k of lazy set @p set (attached there) becomes file @p file of union @p u; the
 * caller holds it attached until dlc__union_detach(). */
void dlc__union_attach(dlc_store *u, uint32_t file, dlc_store *set, uint32_t k);
/* File @p file of union @p u is no longer read (the caller then detaches it from its set). */
void dlc__union_detach(dlc_store *u, uint32_t file);

#endif /* DLCACHE_STORE_SET_H */
