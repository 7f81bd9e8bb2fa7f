/* Private to the builder (cache/build_*.c, cache/source_*.c): the list of
 * source items that a build turns into records.
 *
 * A scan turns the sources (an ImageFolder tree, manifests, WebDataset tar
 * shards) into one flat, ordered list of items. The order is the record
 * order of the store, so it must be a pure function of the sources: folder
 * entries are sorted, manifest lines and tar members keep their file order.
 *
 * Every item the source names is in the list, also those that cannot become
 * a record (a .png in an ImageFolder, a tar sample without its .cls): they
 * carry a skip reason from the scan and the build reports them, so the item
 * numbering is the numbering torchvision's ImageFolder would give the same
 * tree, and a report names every file that did not make it into the store.
 *
 * Memory: one small fixed struct per item plus its path in one arena; no
 * pixel data. Thread safety: a scan runs on one thread; once scanned, the
 * set is read-only and dlc__source_read() may run on any number of threads
 * (each with its own buffer).
 */
#ifndef DLCACHE_SOURCE_H
#define DLCACHE_SOURCE_H

#include <dlcache/status.h>

#include <stddef.h>
#include <stdint.h>

/* Labels are below this (the store's limit, DLC__MAX_LABELS in store_format.h). */
#define DLC__SOURCE_MAX_LABEL ((int64_t)1 << 24)
/* A source file larger than this is skipped ("too large for an image"): it
 * keeps the per-thread read buffers bounded by something sane. */
#define DLC__SOURCE_MAX_FILE ((uint64_t)1 << 30)

/* Why the scan already knows an item cannot become a record. */
typedef enum dlc__skip_code {
    DLC__SKIP_NONE = 0,
    DLC__SKIP_NOT_JPEG, /* an image extension torchvision accepts, but not .jpg/.jpeg */
    DLC__SKIP_NO_CLS,   /* tar sample with an image but no KEY.cls */
    DLC__SKIP_BAD_CLS,  /* tar KEY.cls that is not a label number */
    DLC__SKIP_NO_JPEG,  /* tar sample with a KEY.cls but no KEY.jpg/KEY.jpeg */
} dlc__skip_code;

/* The sentence for a scan-time skip. */
const char *dlc__skip_reason(dlc__skip_code code);

/* One item of the sources. */
typedef struct dlc__item {
    uint64_t path;    /* Offset of the NUL-terminated display path in the arena: an openable
                         path for files, "SHARD:MEMBER" for tar members. */
    uint64_t offset;  /* Tar members: first data byte in the shard. Files: 0. */
    uint64_t size;    /* Tar members: data bytes. Files: 0 (known after open). */
    int64_t mtime_ns; /* Tar members: the header's mtime. Files: 0 (known after open). */
    int64_t label;    /* 0..DLC__SOURCE_MAX_LABEL-1; -1 when unknown (skipped). */
    uint32_t shard;   /* Tar members: index into the shard table; UINT32_MAX for files. */
    uint32_t skip;    /* A dlc__skip_code. */
} dlc__item;

/* A tar shard, open for the whole build so members are read with pread. */
typedef struct dlc__shard {
    int fd;        /* O_RDONLY; owned. */
    uint64_t size; /* Bytes when scanned. */
    uint64_t path; /* Arena offset of the path as given. */
} dlc__shard;

typedef enum dlc__source_kind {
    DLC__SOURCE_NONE = 0,
    DLC__SOURCE_FOLDER, /* exactly one ImageFolder tree */
    DLC__SOURCE_LIST,   /* manifests and tar shards, concatenated */
} dlc__source_kind;

typedef struct dlc__source_set {
    dlc__item *items;
    size_t count, cap;
    char *arena; /* Paths and class names, NUL-terminated, addressed by offset. */
    size_t arena_len, arena_cap;
    dlc__shard *shards;
    uint32_t nshards, shards_cap;
    uint64_t *class_names; /* FOLDER: arena offsets of the class names, in label order. */
    uint32_t nclasses, classes_cap;
    int64_t max_label; /* LIST: the largest label seen, -1 when none. */
    dlc__source_kind kind;
    dlc_log_fn log; /* Notices from the scan (empty classes...); may be NULL. */
    void *log_user;
} dlc__source_set;

/* Start an empty set. */
void dlc__source_init(dlc__source_set *s);
/* Close the shards and free everything. Accepts a zeroed or initialised set. */
void dlc__source_free(dlc__source_set *s);

/* Add one source: a directory is an ImageFolder tree, a file whose name ends
 * in ".tar" is a WebDataset shard, any other file is a manifest. An
 * ImageFolder cannot be combined with other sources (DLC_EINVAL).
 * Returns DLC_OK, DLC_EINVAL (malformed manifest line, bad tar structure,
 * mixed sources), DLC_ECORRUPT (a tar shard that ends inside a member),
 * -errno, -ENOMEM. dlc_errmsg() names the file and line or member. */
dlc_status dlc__source_add(dlc__source_set *s, const char *path);

/* The scanners behind dlc__source_add(), for tests. */
dlc_status dlc__source_scan_folder(dlc__source_set *s, const char *dir);
dlc_status dlc__source_scan_manifest(dlc__source_set *s, const char *path);
dlc_status dlc__source_scan_tar(dlc__source_set *s, const char *path);

/* Number of labels (ImageFolder: classes, including classes without any
 * image; lists: largest label + 1) and the name of label @p i ("0", "1"...
 * for lists). @p buf (>= 24 bytes) holds generated names. */
uint32_t dlc__source_num_labels(const dlc__source_set *s);
const char *dlc__source_label_name(const dlc__source_set *s, uint32_t i, char *buf, size_t size);

static inline const char *dlc__source_path(const dlc__source_set *s, const dlc__item *it)
{
    return s->arena + it->path;
}

/* What dlc__source_read() found. */
typedef struct dlc__source_data {
    const uint8_t *data; /* The item's bytes, in *buf. */
    size_t size;
    uint64_t file_size; /* For the source digest. */
    int64_t mtime_ns;
} dlc__source_data;

/* Size and mtime of item @p index for the source digest, without reading it (for items the
 * scan already skipped): tar members carry them from their header; a file is stat()ed, and one
 * that cannot be keeps 0 for both. out->data is NULL and out->size 0. */
void dlc__source_stat(const dlc__source_set *s, size_t index, dlc__source_data *out);

/*
 * Read item @p index whole into *buf (grown with realloc to *cap as needed;
 * the caller frees it) with one pread. For a file that cannot be read, a
 * reason sentence goes into @p why and the call returns DLC_EDECODE (the
 * build skips the item); -ENOMEM is the only hard failure.
 */
dlc_status dlc__source_read(const dlc__source_set *s, size_t index, uint8_t **buf, size_t *cap,
                            dlc__source_data *out, char *why, size_t why_size);

/* Internal helpers shared by the scanners. */
dlc_status dlc__source_intern(dlc__source_set *s, const char *str, size_t len, uint64_t *off);
dlc_status dlc__source_push(dlc__source_set *s, const dlc__item *it);
/* pread all of [offset, offset + size) into @p dst, retrying short and interrupted reads.
 * Returns the bytes read (fewer only at the end of the file) or -errno. */
int64_t dlc__source_pread(int fd, void *dst, size_t size, uint64_t offset);

#endif /* DLCACHE_SOURCE_H */
