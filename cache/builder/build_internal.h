/* Private to the builder (cache/builder/build_*.c): the pipeline's shared types, the per-item work
 * of the workers (build_item.c), the parts and their threads (build_part.c), store sets
 * (build_set.c, build_setdir.c) and the bookkeeping around them (build_meta.c).
 *
 * The pipeline. A build writes one store or the N parts of a set; each store being written is a
 * dlc__build_part: a range of source items [first, end), its own dlc_writer, a reorder window of
 * slots each with its dlc_record_builder, and a writer thread that appends the part's sealed
 * records strictly in item order. T worker threads are shared by the parts being written at
 * once: a worker claims the next item of a part (preferring its own, see dlc__build_pipe), reads
 * the item's source bytes, decodes and resizes them in its own codec, sets the record's values
 * in the slot's builder and seals it there (encode, hash, lay out: the heavy part of writing),
 * then hands the slot to the part's writer. A record's bytes depend only on its values, so each
 * store is the same at any number of threads; memory is bounded by the windows whatever the
 * data set. The calling thread watches: progress, notices, cancel (build_part.c).
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
#include <xxhash.h>

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
                                dlc__build_plan *plan, dlc_field_spec *fields, uint32_t *nfields);

/* The mask of the item whose relative path is @p rel: MASKS/DIR/STEM.png (build.h, "Masks"),
 * into *buf (grown with realloc to *cap). DLC_OK or -ENOMEM. */
dlc_status dlc__build_mask_path(const char *masks, const char *rel, char **buf, size_t *cap);

/* Everything one build decides before its workers start (build_run.c); read-only while they
 * run. */
typedef struct dlc__build_job {
    const char *const *sources;
    size_t nsources;
    const char *out; /* the store, or the set's directory: for messages */
    /* A set: its directory as found at the start (stat() of out). Every step that writes a part
     * into it, or removes files there, goes by its path: one that holds another directory now
     * (moved aside, a link to someone else's set put in its place) is refused, never written
     * into or emptied (dlc__build_dir_same()). */
    int dir_known;
    uint64_t dir_dev, dir_ino;
    dlc_build_options o;
    double t0; /* dlc__now_s() at the start */
    dlc__source_set src;
    dlc__build_plan plan;
    dlc_field_spec fields[DLC_MAX_FIELDS]; /* the schema */
    uint32_t nfields;
    const char **names; /* the label names, num_labels of them */
    char *name_buf;     /* generated names ("0".."K-1"), NUL-separated */
    uint32_t num_labels;
    uint32_t threads; /* worker threads */
    uint32_t parts;   /* a set's N; 0 for a single store */
    uint64_t set_id;  /* a set's identity (dlc__build_set_id()) */
} dlc__build_job;

enum dlc__part_state {
    DLC__PART_WAITING = 0, /* not started */
    DLC__PART_ACTIVE,      /* its writer is open and its items may be claimed */
    DLC__PART_DONE,        /* finished, or given up after a failure */
};

/* One store the build writes: a single store, or part I of a set. Its writer thread opens it,
 * appends its items in order and finishes it. Fields marked "mu" are guarded by the pipe's
 * mutex; the rest belong to the writer thread while the part is ACTIVE. */
typedef struct dlc__build_part {
    uint32_t index;         /* I: its place in the set (0 for a single store) */
    size_t first, end;      /* its items */
    char *path;             /* the store file it writes; malloc'd */
    int state;              /* enum dlc__part_state; mu */
    size_t next;            /* the next item to claim; mu */
    size_t write_next;      /* the item its writer appends next; mu */
    size_t window;          /* slots */
    size_t batch;           /* items its writer waits for at once: window / 4 when the workers
                             * leave a core free, else 1 */
    size_t wake_end;        /* its writer sleeps until items [write_next, wake_end) are made;
                             * 0 while it is not waiting; mu */
    dlc__build_slot *slots; /* made when the part starts, freed when it is done */
    pthread_cond_t *ready;  /* its writer thread's condition: its batch of slots was filled */
    dlc_writer *wr;
    XXH3_state_t *digest;         /* the source digest of its items */
    uint64_t done, skipped;       /* items finished and skipped; mu */
    uint64_t bytes_in, bytes_out; /* mu */
    uint64_t converted;           /* images stored with other channels than their source's */
    size_t conv_item;             /* the first of them (SIZE_MAX: none); mu */
    uint32_t conv_channels;       /* its source's channels */
    dlc_build_skip *skips;        /* its skipped items, in item order; mu */
    size_t nskips, skips_cap;
    size_t logged;       /* skips already sent to the log callback (by the calling thread) */
    uint64_t count;      /* records written */
    uint64_t file_bytes; /* of the finished store */
    int published;       /* the finished store was renamed into place */
    dlc_status rc;       /* its failure, with msg */
    char msg[1024];
} dlc__build_part;

/* What every part of one build shares. Workers claim items under mu; a worker that finds no
 * item it may take waits on `space`, which writers broadcast when they free a slot and when a
 * part starts or ends. */
typedef struct dlc__build_pipe {
    const dlc__source_set *src;
    const dlc_build_options *opts;
    const dlc__build_plan *plan;
    dlc__build_part *parts; /* the stores to write, in part order */
    uint32_t nparts;
    uint32_t nwriters;        /* writer threads: parts written at once */
    dlc__build_part **active; /* nwriters entries: the part each writer writes now, or NULL */
    uint32_t next_part;       /* the next part a writer starts; mu */
    uint32_t writers_left;    /* writer threads still running; mu */
    atomic_int stop;          /* a failure or a cancel: everyone leaves */
    pthread_mutex_t mu;
    pthread_cond_t space; /* a slot was freed, a part started or ended, or stop */
    pthread_cond_t done;  /* a writer thread ended (the calling thread waits, with a timeout) */
} dlc__build_pipe;

/* One worker thread and its buffers, reused from item to item and from part to part. */
typedef struct dlc__build_worker {
    dlc__build_pipe *p;
    uint32_t home; /* the writer whose part it helps first */
    dlc_codec *codec;
    uint8_t *buf; /* source bytes of the current item */
    size_t cap;
    uint8_t *mbuf; /* the mask file's bytes */
    size_t mcap;
    uint8_t *mask; /* the resized mask's pixels */
    size_t mask_cap;
    uint8_t *pix; /* the resized image, when its record has no place for it (an encoded one) */
    size_t pix_cap;
    char *mpath; /* the mask's path */
    size_t mpath_cap;
    pthread_t tid;
    int started;
} dlc__build_worker;

/* Write @p nparts stores (one, or parts of a set) with job->threads workers and @p nwriters
 * writer threads, the calling thread watching (progress, notices, cancel). Each part's outcome is
 * in the part: count, skips, rc and msg; the first failure is returned with its message
 * (build_part.c). */
dlc_status dlc__build_write(const dlc__build_job *job, dlc__build_part *parts, uint32_t nparts,
                            uint32_t nwriters);

/* Free what the parts own (paths, skips). */
void dlc__build_parts_free(dlc__build_part *parts, uint32_t nparts);

/* Make item @p i in slot @p sl: read, decode, resize, set the values and seal, or say why it is
 * skipped; returns the slot's new state (build_item.c). Runs on a worker without the pipe's
 * lock. */
int dlc__build_item(dlc__build_worker *w, size_t i, dlc__build_slot *sl);

/* The worker thread: claim items of the active parts until there are none or stop is set
 * (build_part.c). */
void *dlc__build_worker_main(void *arg);

/* Free what a worker allocated (not the worker itself). */
void dlc__build_worker_free(dlc__build_worker *w);

/* ---- Store sets (build_set.c, build_setdir.c) --------------------------------------------- */

/* Part @p part of @p parts takes the source items [*first, *end) of @p n: [I*n/N, (I+1)*n/N),
 * computed without overflow for any n. */
void dlc__build_split(uint64_t n, uint32_t parts, uint32_t part, uint64_t *first, uint64_t *end);

/* XXH3-64 over every item of @p src in order (its path relative to its source, size, mtime and
 * label, its mask's size and mtime with @p masks, its column values): what the source digest
 * hashes, for the whole list, found by stat() on @p threads threads (no file is read). The
 * result does not depend on the number of threads. DLC_OK or -ENOMEM. */
dlc_status dlc__build_items_digest(const dlc__source_set *src, const char *masks, uint32_t threads,
                                   uint64_t *digest);

/* A set's identity: XXH3-64 over the items' digest, the options that change the stored bytes
 * (size, crop, encoding, quality, channels, masks and their encoding), the record's fields, the
 * label names and N (docs/SETS.md gives the bytes). DLC_OK or -ENOMEM. */
dlc_status dlc__build_set_id(uint64_t items_digest, const dlc__build_job *job, uint64_t *out);

/* Retire the set whose index is in @p dir before new parts are written there: every part file
 * the index names is linked to "retired-NAME" and an index naming those links replaces it, then
 * the part names are removed; the old set stays readable under its new names until a new index
 * replaces it. Without hard links the old index is removed instead (the old set is then gone).
 * Nothing to do without an index, or when it names no part file. DLC_OK or -errno. */
dlc_status dlc__build_retire(const char *dir, dlc_log_fn log, void *user);
/* DLC_OK when @p job's set directory (job->out) still is the one found at the start (or none
 * was recorded); else DLC_ECHANGED, naming it. */
dlc_status dlc__build_dir_same(const dlc__build_job *job);

/* Take back retired parts: a part name missing in @p dir whose retired-NAME belongs to the same
 * set as the parts present (the same set_id) gets its name again (a hard link), so that one part
 * of a joined set can be rebuilt alone and joined with the others. Returns how many. */
uint32_t dlc__build_restore(const char *dir, dlc_log_fn log, void *user);

/* @p dir as a set's directory, checked before a build (of images or tokens) writes there: made
 * when missing (*@p made says so; several machines may make it at once), refused when it is not a
 * directory, or, without @p force, when it holds a set or parts of one (building every part) or
 * a joined set (building one part, @p one_part). Its device and inode go to *@p dev and *@p ino
 * for dlc__build_dir_same() (either may be NULL). */
dlc_status dlc__build_set_dir_check(const char *dir, int force, int one_part, int *made,
                                    uint64_t *dev, uint64_t *ino);
/* Does @p dir hold a set's index? */
int dlc__build_has_index(const char *dir);

/* How many part files (part-*-of-*.dlc) and retired parts (retired-part-*) @p dir holds. */
uint32_t dlc__build_set_files(const char *dir);

/* Remove from @p dir the part files (part-*-of-*.dlc) and retired parts (retired-part-*) that
 * its index does not name, all of them when there is no index. Best effort; returns how many
 * were removed. */
uint32_t dlc__build_tidy(const char *dir, dlc_log_fn log, void *user);

/* The "build" metadata of @p part: a JSON object saying how the store was made (with a "set"
 * object for a part of a set). Returns a malloc'd string, or NULL when out of memory. */
char *dlc__build_json(const dlc__build_job *job, const dlc__build_part *part, double seconds);

/* Append a skipped item to the array *skips of *n entries and *cap places. */
dlc_status dlc__skips_add(dlc_build_skip **skips, size_t *n, size_t *cap, const char *path,
                          const char *reason);

#endif /* DLCACHE_BUILD_INTERNAL_H */
