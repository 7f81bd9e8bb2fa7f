/* Private to the builder (cache/build_*.c): the pipeline's shared types, the per-item work of the
 * workers (build_item.c) and the bookkeeping around them (build_meta.c).
 *
 * The pipeline (build_main.c). Worker threads claim item numbers in increasing order from one
 * atomic counter; item i owns slot i % window of a ring of slots, and each slot owns a
 * dlc_record_builder. The worker reads the item's source bytes, decodes and resizes them in its
 * own codec, sets the record's values in the slot's builder and seals it there (encode, hash, lay
 * out: the heavy part of writing). The calling thread appends the sealed records to the
 * dlc_writer strictly in item order. A record's bytes depend only on its values, so the store is
 * the same at any number of threads; memory is bounded by the window whatever the data set.
 *
 * Why a builder per slot rather than per worker: a worker whose builder holds a sealed record
 * cannot start its next item until the writer has appended that record, so with one builder per
 * worker every worker would wait for the slowest item before it; with one per slot a worker
 * moves on at once, and the record is copied once (by the writer, into the store's map). */
#ifndef DLCACHE_BUILD_INTERNAL_H
#define DLCACHE_BUILD_INTERNAL_H

#include "source.h"

#include <dlcache/build.h>
#include <dlcache/image.h>
#include <dlcache/store.h>
#include <dlcache/writer.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define DLC__BUILD_WHY 512

enum dlc__slot_state {
    DLC__SLOT_FREE = 0, /* being worked on, or not claimed yet */
    DLC__SLOT_READY,    /* the record is sealed in the slot's builder */
    DLC__SLOT_SKIP,     /* item skipped; why says why */
    DLC__SLOT_FATAL,    /* a failure that stops the build; status and why */
};

/* One place of the reorder window. Everything but state is written by the worker that owns the
 * item and read by the writer after it saw the state change under the pipe's mutex. */
typedef struct dlc__build_slot {
    int state;               /* enum dlc__slot_state; guarded by dlc__build_pipe.mu */
    dlc_record_builder *rec; /* owned; holds the sealed record when READY */
    uint64_t bytes_in;       /* source bytes read for this item (image and mask) */
    uint64_t file_size;      /* for the source digest */
    int64_t mtime_ns;
    uint64_t mask_size; /* the mask file's, for the source digest (0: none) */
    int64_t mask_mtime_ns;
    uint32_t src_channels;    /* with a channel conversion: the source image's channels */
    int converted;            /* the image had other channels than the store's and was converted */
    dlc_status status;        /* DLC__SLOT_FATAL */
    char why[DLC__BUILD_WHY]; /* DLC__SLOT_SKIP reason, DLC__SLOT_FATAL message */
} dlc__build_slot;

/* What every record holds, decided before the workers start; read-only while they run. */
typedef struct dlc__build_plan {
    uint32_t channels;      /* of the image field: 1 or 3 */
    int keep;               /* DLC_BUILD_CHANNELS_KEEP: the channels came from the first image */
    size_t keep_item;       /* the item whose image decided them (SIZE_MAX: none did) */
    const char *masks;      /* root of the mask tree, or NULL */
    uint32_t mask_channels; /* of the mask field (the first mask's) */
    uint32_t mask_encoding; /* DLC_ENCODING_RAW or DLC_ENCODING_PNG */
    uint32_t f_image;       /* field indices in the writer's schema */
    uint32_t f_mask;        /* DLC_NO_FIELD without masks */
    uint32_t f_label;       /* DLC_NO_FIELD without a label column */
    uint32_t f_col[DLC__SOURCE_MAX_COLS]; /* the field of each source column */
} dlc__build_plan;

/* Decide what every record holds (the image's channels, looking at the first readable image
 * for DLC_BUILD_CHANNELS_KEEP; the masks' channels, from the first readable mask) and write the
 * schema into @p fields (DLC_MAX_FIELDS entries; their names point into @p src or are static).
 * DLC_EINVAL for masks with a tar source (build_plan.c). */
dlc_status dlc__build_plan_make(const dlc__source_set *src, const dlc_build_options *o,
                                const dlc_build_fields *f, dlc__build_plan *plan,
                                dlc_field_spec *fields, uint32_t *nfields);

/* The mask of the item whose relative path is @p rel: MASKS/DIR/STEM.png (build.h, "Masks"),
 * into *buf (grown with realloc to *cap). DLC_OK or -ENOMEM. */
dlc_status dlc__build_mask_path(const char *masks, const char *rel, char **buf, size_t *cap);

typedef struct dlc__build_pipe {
    const dlc__source_set *src;
    const dlc_build_options *opts;
    const dlc__build_plan *plan;
    size_t n;      /* items */
    size_t window; /* slots */
    dlc__build_slot *slots;
    atomic_size_t next; /* next item to claim */
    atomic_int stop;    /* set by the writer: workers finish their item and leave */
    pthread_mutex_t mu;
    pthread_cond_t ready; /* a slot was filled (the writer waits) */
    pthread_cond_t space; /* write_next moved or stop was set (workers wait) */
    size_t write_next;    /* the item the writer needs next; guarded by mu */
} dlc__build_pipe;

/* One worker thread and its buffers, reused from item to item. */
typedef struct dlc__build_worker {
    dlc__build_pipe *p;
    dlc_codec *codec;
    uint8_t *buf; /* source bytes of the current item */
    size_t cap;
    uint8_t *mbuf; /* the mask file's bytes */
    size_t mcap;
    uint8_t *mask; /* the resized mask's pixels */
    size_t mask_cap;
    char *mpath; /* the mask's path */
    size_t mpath_cap;
    pthread_t tid;
    int started;
} dlc__build_worker;

/* The worker thread: claim items until there are none or stop is set (build_item.c). */
void *dlc__build_worker_main(void *arg);

/* Free what a worker allocated (not the worker itself). */
void dlc__build_worker_free(dlc__build_worker *w);

/* The "build" metadata: a JSON object saying how the store was made.
 * Returns a malloc'd string, or NULL when out of memory. */
char *dlc__build_json(const char *const *sources, size_t nsources, const dlc_build_options *o,
                      const dlc_build_fields *f, uint32_t threads, uint64_t items, uint64_t count,
                      uint64_t skipped, double seconds);

/* Remove OUT.tmp-PID files (and OUT.tmp-PID-lock) whose process is gone: a
 * build killed with SIGKILL cannot clean up after itself. Best effort. */
void dlc__build_remove_stale_temps(const char *out, dlc_log_fn log, void *user);

/* Append a skipped item to @p r (its skips array has *cap entries). */
dlc_status dlc__report_add_skip(dlc_build_report *r, size_t *cap, const char *path,
                                const char *reason);

#endif /* DLCACHE_BUILD_INTERNAL_H */
