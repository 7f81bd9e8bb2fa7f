/* Private to the builder (cache/builder/build_*.c, cache/builder/source_*.c): the list of
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
 * A manifest may name columns besides the path and the label (`#columns:`,
 * source_manifest.c): every source of a set has the same columns, and each
 * item's values are kept beside the items (cells and lists, below). An
 * ImageFolder tree and a tar shard have one column, the label.
 *
 * Memory: one small fixed struct per item plus its path in one arena and its
 * column values (8 bytes each); no pixel data. Thread safety: a scan runs on one thread; once
 * scanned, the set is read-only and dlc__source_read() may run on any number of threads (each with
 * its own buffer).
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
    int64_t label;    /* 0..DLC__SOURCE_MAX_LABEL-1; -1 when unknown (skipped) or when the
                         source has no label column. */
    uint32_t shard;   /* Tar members: index into the shard table; UINT32_MAX for files. */
    uint16_t skip;    /* A dlc__skip_code. */
    uint16_t rel;     /* 1 + the offset in the path where the path relative to its tree
                         starts (ImageFolder: after the root; manifest: the path as written);
                         0 when there is none (an absolute manifest path, a tar member). The
                         mask of an item is found by this relative path. */
} dlc__item;

/* The relative path of @p it inside @p path, or NULL when it has none. */
static inline const char *dlc__item_rel(const dlc__item *it, const char *path)
{
    return it->rel ? path + it->rel - 1 : NULL;
}

/* Most columns a source may have besides the path: a record also holds an image and a mask. */
#define DLC__SOURCE_MAX_COLS 48u

/* What a column holds (source_manifest.c gives the syntax). */
typedef enum dlc__col_kind {
    DLC__COL_LABEL = 1, /* The store's label: one int in 0..DLC__SOURCE_MAX_LABEL-1, kept in
                           dlc__item.label (at most one such column). */
    DLC__COL_INT,       /* One int64. */
    DLC__COL_FLOAT,     /* One float64. */
    DLC__COL_NUMBER,    /* One number: int64 when every value of the set is an integer, else
                           float64 (dlc__column.is_float). */
    DLC__COL_INTS,      /* Any number of int64, comma-separated. */
    DLC__COL_FLOATS,    /* Any number of float64, comma-separated. */
} dlc__col_kind;

typedef struct dlc__column {
    char name[32];  /* [A-Za-z_][A-Za-z0-9_]*, unique; the store's field name. */
    uint32_t kind;  /* A dlc__col_kind. */
    uint32_t index; /* INT, FLOAT, NUMBER: its place among an item's cells; INTS, FLOATS:
                       among an item's lists. */
    int is_float;   /* FLOAT, FLOATS, and NUMBER once a value that is not an integer was seen:
                       its cells hold float64 bits, else int64. */
} dlc__column;

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
    /* The columns after the path, fixed by the first source (by default one, the label). */
    dlc__column cols[DLC__SOURCE_MAX_COLS];
    uint32_t ncols, nscalars, nlists;
    int cols_set;        /* The first source has set the columns. */
    uint64_t *cells;     /* count x nscalars int64 or float64 bits, item by item. */
    size_t cells_cap;    /* In values. */
    uint64_t *list_at;   /* count x nlists: where each list starts in list_vals. */
    size_t list_at_cap;  /* In values. */
    uint64_t *list_vals; /* The lists' values end to end (int64 or float64 bits). */
    size_t nlist_vals, list_vals_cap;
    dlc_log_fn log; /* Notices from the scan (empty classes...); may be NULL. */
    void *log_user;
    int strict; /* A folder the scan cannot search (unlistable, too deep) fails it, as a bad
                   file fails a strict build, instead of a warning. */
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

/* Give @p s its columns (the first source), or check that a later source has the same ones:
 * DLC_EINVAL naming @p path and both lists otherwise. */
dlc_status dlc__source_set_columns(dlc__source_set *s, const char *path, const dlc__column *cols,
                                   uint32_t n);

/* Does the set have a label column? */
int dlc__source_has_label(const dlc__source_set *s);

/* Cell @p c (a dlc__column.index of a scalar column) of item @p i, as int64 or float64 bits. */
static inline uint64_t dlc__source_cell(const dlc__source_set *s, size_t i, uint32_t c)
{
    return s->cells[i * s->nscalars + c];
}

/* List @p k (a dlc__column.index of a list column) of item @p i: @p *n values (bits) at the
 * returned address, which may be NULL when *n is 0. */
const uint64_t *dlc__source_list(const dlc__source_set *s, size_t i, uint32_t k, size_t *n);

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

/*
 * Read the file at @p path whole, as dlc__source_read() reads a file item (the builder reads
 * masks with it): DLC_EDECODE with a reason in @p why when it cannot be read, -ENOMEM.
 */
dlc_status dlc__source_read_path(const char *path, uint8_t **buf, size_t *cap,
                                 dlc__source_data *out, char *why, size_t why_size);

/* Internal helpers shared by the scanners. */
dlc_status dlc__source_intern(dlc__source_set *s, const char *str, size_t len, uint64_t *off);
/* Grow the array *p of *cap elements of @p elem bytes to hold at least @p need. */
dlc_status dlc__source_grow(void **p, size_t *cap, size_t need, size_t elem);
dlc_status dlc__source_push(dlc__source_set *s, const dlc__item *it);
/* pread all of [offset, offset + size) into @p dst, retrying short and interrupted reads.
 * Returns the bytes read (fewer only at the end of the file) or -errno. */
int64_t dlc__source_pread(int fd, void *dst, size_t size, uint64_t offset);

#endif /* DLCACHE_SOURCE_H */
