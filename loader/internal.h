/* Private to loader/: the loader's outputs, slot ring, threads and I/O (loader.c, outputs.c,
 * pipeline.c, io.c). The pure parts are in sampler.h and augment.h, the plumbing in common.h. */
#ifndef DLCACHE_LOADER_INTERNAL_H
#define DLCACHE_LOADER_INTERNAL_H

#include "augment.h"
#include "augment/aug_internal.h"
#include "batchaug.h"
#include "common.h"
#include "convert_hd.h"
#include "sampler.h"

#include <dlcache/image.h>
#include <dlcache/loader.h>
#include <dlcache/status.h>
#include <dlcache/store.h>

#include <assert.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* ---- Outputs (outputs.c) -----------------------------------------------------------------------
 * At open the store's schema and the configuration become a list of outputs: what a batch
 * carries, one per selected field (and per view group for images and masks), with everything a
 * worker needs to fill its part of a sample computed once. */

/* What an output does with each sample. */
enum {
    DLC__OUT_IMAGE,  /* Crop or resized crop (antialiased bilinear), flip, convert. */
    DLC__OUT_MASK,   /* Crop or resized crop (nearest neighbour), flip; uint8 as stored. */
    DLC__OUT_BOXES,  /* Moved, scaled, flipped and clipped with the crop; emptied ones dropped. */
    DLC__OUT_ARRAY,  /* Copied (the classes of boxes: those of the boxes kept). */
    DLC__OUT_SCALAR, /* An int64 or float64 per sample. */
    DLC__OUT_BYTES,  /* Bytes, end to end with offsets. */
    DLC__OUT_PARAMS, /* What the views of a group drew (config.return_params): one of DLC__PAR_*. */
};

/* How the rows of a variable output are laid out in a finished batch. */
enum {
    DLC__VAR_FIXED = 0xff, /* Not variable: every sample has the same size. */
};

/* The most batches a consumer may hold at once (config.max_lent). */
#define DLC__MAX_LENT 16u
#define DLC__MAX_AUG_REPEATS 256u /* config.aug_repeats: more than any recipe uses (3, 4). */

/* The most views per sample over all groups, and the most groups. */
#define DLC__MAX_VIEWS 256u
#define DLC__MAX_GROUPS 16u

/* A group of views as the loader runs it. */
typedef struct dlc__group {
    char name[32];  /* "": the default group, whose outputs keep the field's name and shape. */
    uint32_t count; /* Views in the group. */
    uint32_t first; /* Number of its first view among all views: keys its random streams. */
    uint32_t augment, crop_h, crop_w;
    float scale[2], ratio[2], flip;
    /* Its per-sample ops (sample_aug.c): drawn after the crop and flip of each view. */
    int aug_on;            /* Some uint8 op is configured: aug is drawn and applied. */
    uint32_t aug_channels; /* Of its image outputs (one count: the draw depends on it). */
    dlc__aug_config aug;   /* The ops, as dlc__aug_draw() takes them. */
    float erase_p, erase_scale[2], erase_ratio[2]; /* RandomErasing (erase_p 0: off). */
    uint32_t erase_value;                          /* A dlc_erase_value. */
    float erase_constant[DLC__MAX_CHANNELS];
} dlc__group;

typedef struct dlc__output {
    char name[72];     /* The field's name, or FIELD_GROUP. */
    uint32_t field;    /* Index in the schema. */
    uint32_t kind;     /* The field's dlc_field_kind. */
    uint32_t op;       /* DLC__OUT_*. */
    uint32_t group;    /* IMAGE, MASK: the view group. */
    uint32_t var;      /* A dlc_variable_mode, or DLC__VAR_FIXED. */
    uint32_t max_len;  /* DLC_VARIABLE_PAD_TO: rows of every sample. */
    uint32_t rows_cap; /* Variable outputs: the most rows one sample can hold. */
    size_t row_bytes;  /* Variable outputs: bytes of one row (bytes fields: 1). */
    size_t sample_cap; /* Bytes of the slot per sample (variable: rows_cap rows, staged there
                          by the workers and packed when the batch is complete). */
    size_t view_bytes; /* IMAGE, MASK: bytes of one view of one sample. */
    uint32_t out_h, out_w, out_c; /* IMAGE, MASK: the group's crop and the channels. */
    uint32_t dtype;               /* Of the output's elements. */
    uint32_t layout;              /* A dlc_layout. */
    uint32_t ndim;                /* Of one sample (ARRAY, BOXES: the field's; IMAGE, MASK: 3). */
    uint64_t dims[DLC_MAX_DIMS];  /* Of one sample; variable outputs: dims[0] is decided per
                                     batch. */
    int link;                     /* BOXES: the output of its classes, or -1. */
    int filtered_by;              /* ARRAY: the BOXES output whose kept boxes it follows, or -1. */
    dlc__convert cv;              /* IMAGE and MASK (uint8 for masks). */
    dlc__convert cv_u8;           /* IMAGE of a group with ops: the uint8 copy they work on. */
    uint32_t param;               /* PARAMS: which (DLC__PAR_*). */
    size_t arena_data;            /* Offsets of the output's parts in a slot's arena: the data, */
    size_t arena_lengths;         /* the lengths and the offsets (SIZE_MAX: none). */
    size_t arena_offsets;
} dlc__output;

/* ---- The loader, its slot ring and its threads (loader.c, pipeline.c, io.c) ------------------ */
/* A slot goes FREE -> IO (the I/O thread resolves its records and starts their reads) -> FILL
 * (workers claim samples in chunks) -> READY -> LENT (to the consumer) -> FREE. Every transition
 * happens under loader.mu: one handshake per batch, none per sample. */
enum { DLC__SLOT_FREE, DLC__SLOT_IO, DLC__SLOT_FILL, DLC__SLOT_READY, DLC__SLOT_LENT };

/** What the I/O thread found for one sample of a batch. */
typedef struct dlc__sample_io {
    dlc_value *v;        /**< The record's num_fields values (a slice of the slot's array). */
    const uint8_t *span; /**< Where workers read the selected payloads: the map, or a direct-I/O
                              buffer holding the file's bytes from span_off on. */
    uint64_t span_off;   /**< File offset of span[0]. */
    size_t span_len;     /**< Bytes from span_off that hold every selected payload. */
    uint64_t index;      /**< Record number. */
    uint64_t pos;        /**< Global position in the epoch's extended order. */
    dlc_status status;   /**< Of the lookup or the read. */
} dlc__sample_io;

/** One output's part of a slot. */
typedef struct dlc__slot_out {
    uint8_t *data;    /**< batch_size * sample_cap bytes, 64-byte aligned. */
    int64_t *lengths; /**< Variable outputs: rows of each sample. */
    int64_t *offsets; /**< DLC_VARIABLE_OFFSETS: batch_size + 1 row offsets. */
    uint64_t rows;    /**< After packing: PAD, PAD_TO: rows per sample; OFFSETS: total rows. */
} dlc__slot_out;

typedef struct dlc__slot {
    int state;            /**< DLC__SLOT_*; under mu. */
    uint8_t *arena;       /**< Every output, the labels and the record numbers of the batch in
                               one block of l->arena_bytes (see dlc__arena_plan()); page-locked
                               with the device path. labels, indices and out[] point into it. */
    uint64_t batch;       /**< Batch number in the current plan. */
    uint32_t count;       /**< Samples in it. */
    uint64_t seed, epoch; /**< Keys of its augmentation. */
    dlc__slot_out *out;   /**< One per output. */
    dlc_batch_field *bf;  /**< One per output: what dlc_loader_next() lends. */
    dlc_value *values;    /**< batch_size * num_fields values found by the I/O thread. */
    int64_t *labels;
    uint64_t *indices;
    dlc__sample_io *io;
    uint8_t *iobuf;    /**< Direct mode: batch_size * io_cap bytes, 4096-aligned. */
    uint8_t *hdr;      /**< Direct mode: batch_size * hdr_bytes, the records' headers (pread). */
    atomic_uint claim; /**< Next sample to hand to a worker (a chunk at a time). */
    atomic_uint done;  /**< Samples finished; the worker that completes the batch packs its
                            variable outputs and marks it READY. */
    uint32_t active;   /**< Workers inside the slot; under mu. */
    dlc_status err;    /**< First failure (lowest sample index); under mu. */
    uint32_t err_at;
    char errmsg[512];
    uint32_t *files; /**< The store's files this batch reads (a set of more than
                          DLC__SHRINK_ALL_FILES shards): the shrink check's files. */
    uint32_t nfiles;
    uint64_t standin_first; /**< Streaming, every shard of the batch refused: the first record */
    uint64_t standin_count; /**< and the records of the healthy shard whose records stand in for
                                 its damaged ones (dlc__stream_pin()); 0: none. */
    uint32_t io_err_at;     /**< Lowest sample whose lookup failed; its message is io_msg. */
    int lookup_by_workers;  /**< The workers find the records themselves (a store all in memory:
                                 nothing to read ahead, and the lookups spread over them). */
    char io_msg[512];
} dlc__slot;

/** One view's geometry, drawn for one sample (in the primary image's pixels). */
typedef struct dlc__view_params {
    dlc__box box;
    int flip;
} dlc__view_params;

/** What one view drew beyond its crop and flip (sample_aug.c). */
typedef struct dlc__view_aug {
    dlc__aug_record rec;          /**< Its uint8 ops, in order (rec.n may be 0). */
    uint32_t etop, eleft, eh, ew; /**< RandomErasing's box in the output; eh = ew = 0: none. */
    uint64_t noise_key;           /**< DLC_ERASE_NOISE: the key of the erased values' stream. */
} dlc__view_aug;

typedef struct dlc__worker {
    struct dlc_loader *l;
    uint32_t id;
    pthread_t thread;
    int started;
    dlc_store_reader *reader; /**< Opened and closed on the worker's thread. */
    dlc_codec **codecs;       /**< Per field: a codec for JPEG and PNG images, else NULL (two
                                   encoded fields of a record are decoded into two scratches). */
    uint8_t *tmp;             /**< Staging for resized uint8 views before flip and convert. */
    void *scratch;            /**< dlc_resize() scratch; grows to the largest box seen. */
    size_t scratch_size;
    dlc_value *rvalues;      /**< num_fields values of a replacement record. */
    uint8_t *keep;           /**< Per box of a sample: kept by the crop. */
    dlc__view_params *views; /**< Of the sample being built: one per view. */
    dlc__view_aug *vaug;     /**< Of the sample being built: one per view (sample_aug.c). */
    uint8_t *aug_img;        /**< A view in uint8 while its ops run (l->aug_img_bytes). */
    void *aug_scratch;       /**< The ops' scratch (l->aug_scratch_bytes). */
    uint64_t bytes_read;     /**< Not yet added to the loader's stats. */
    struct dlc__wcnt *cnt;   /**< Its counters of where the time goes (report.c). */
    uint64_t cpu_mark;       /**< Its CPU time and major faults when it last left a batch. */
    uint64_t flt_mark;
} dlc__worker;

/* ---- Where the time goes (report.c) ----------------------------------------------------------
 * Each thread owns its counters: one writer adds with a relaxed load and store (no locked
 * instruction, no lock), and the consumer's report reads them with relaxed loads. Clocks are read
 * per batch and stage (a worker: when it joins and leaves a batch), never per sample. */

/** A counter with one writing thread (nanoseconds unless said). */
typedef _Atomic uint64_t dlc__cnt;

/** Add @p d to the calling thread's own counter @p c. */
static inline void dlc__cnt_add(dlc__cnt *c, uint64_t d)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + d,
                          memory_order_relaxed);
}

/** A worker's counters, one cache line each so that workers never share one. */
typedef struct dlc__wcnt {
    dlc__cnt busy;    /**< Inside batches: looking up, cropping, converting. */
    dlc__cnt cpu;     /**< Of busy, on the CPU (the rest: page faults, preemption). */
    dlc__cnt iowait;  /**< Waiting for work while a batch was in its I/O stage. */
    dlc__cnt idle;    /**< Waiting for work with no batch in I/O. */
    dlc__cnt samples; /**< Samples built (a count). */
    dlc__cnt majflt;  /**< Major page faults inside batches (a count). */
    uint8_t pad[16];
} dlc__wcnt;
_Static_assert(sizeof(dlc__wcnt) == 64, "a worker's counters fill one cache line");

/** The counters summed at one moment: what a report subtracts. */
typedef struct dlc__tally {
    uint64_t t;                /**< dlc__now_ns() when taken. */
    uint64_t batches, samples; /**< Delivered. */
    uint64_t cons_wait;        /**< The consumer inside next(). */
    uint64_t cons_away;        /**< The consumer between calls of next(). */
    uint64_t cons_starved;     /**< Of cons_wait, waiting for a batch that was not ready. */
    uint64_t io_busy, io_read; /**< The I/O thread on batches; of that, waiting for reads, */
    uint64_t io_stall;         /**< and for shards to arrive (streaming). */
    uint64_t io_held, io_full; /**< Waiting for a slot: one the consumer holds; one in work. */
    uint64_t io_idle;          /**< Nothing to do (the plan's end, a reset). */
    uint64_t w_busy, w_cpu, w_iowait, w_idle, w_samples, w_majflt; /**< Over the workers. */
    uint64_t copy_busy, copy_idle;                                 /**< The device copy thread. */
    uint64_t bytes;                                                /**< Payload bytes read. */
    uint64_t w_avail; /**< Worker time available: the integral of nactive. */
} dlc__tally;

/** Batches of counters kept: the longest window a report covers (beside "since open"). */
#define DLC__REPORT_RING 1024u

/* threads="auto" (report.c) decides over windows of batches: the first of DLC__AUTO_FIRST
 * batches, the others of DLC__AUTO_WINDOW, each starting after the batches that were in the
 * ring when the count last changed (made, or begun, by the old count) or when a plan's first
 * batch was delivered (the ring filled while the consumer was not asking). */
#define DLC__AUTO_FIRST 2u
#define DLC__AUTO_WINDOW 4u
/* The most calm windows a give-back may have to wait for (its patience doubles each time a
 * give-back is undone). */
#define DLC__AUTO_PATIENCE_MAX 32u

/** threads="auto"'s memory between decisions (report.c). */
typedef struct dlc__auto {
    uint32_t calm;      /**< Windows in a row that would give a worker back. */
    uint32_t patience;  /**< Calm windows a give-back needs; doubled each time one is undone. */
    int last;           /**< The last change: 1 added workers, -1 gave one back, 0 none yet. */
    uint64_t decisions; /**< Taken so far. */
} dlc__auto;

struct dlc__trace;

/* dlc_loader.alive while the loader is open (loader.c): close clears it first, so a call with the
 * pointer soon after close (a use after free, loader.h) usually finds it cleared and fails. */
#define DLC__LOADER_ALIVE 0x6f70656e6c6f6164ull

struct dlc_loader {
    uint64_t alive; /**< DLC__LOADER_ALIVE from a successful open until dlc_loader_close(). */
    dlc_loader_config cfg;
    double *weights;
    dlc_store *store;
    const dlc_store_info *info;
    const dlc_field *fields; /**< The store's schema. */
    const char *path;        /**< dlc_store_path(store). */
    dlc__sampler sampler;
    dlc__shard shard;
    uint64_t batch_base; /**< batch_index of the plan's first batch. */

    /* Outputs (outputs.c). */
    uint32_t nout;
    dlc__output *out;
    uint32_t ngroups, nviews;
    dlc__group groups[DLC__MAX_GROUPS];
    uint8_t selected[DLC_MAX_FIELDS]; /**< Fields whose payloads are read. */
    uint32_t primary;                 /**< The image (or mask) whose size the crops are drawn on, or
                                           DLC_NO_FIELD when no output is spatial. */
    int spatial;                      /**< Some output needs the views' geometry. */
    int variable;                     /**< Some output is packed when its batch completes. */
    int first_image;                  /**< Output described by dlc_batch.data..., or -1. */
    size_t tmp_bytes;                 /**< Worker staging bytes. */
    uint32_t max_boxes;               /**< The most boxes of a sample over the BOXES outputs. */
    uint32_t chunk;                   /**< Samples a worker claims at a time. */
    int aug_any;                      /**< Some group draws ops or erases, or return_params:
                                           the views' dlc__view_aug are drawn. */
    size_t aug_img_bytes;             /**< Worker bytes for a uint8 view under its ops (float
                                           outputs; a uint8 one is its own staging), */
    size_t aug_scratch_bytes;         /**< and for the ops' scratch (0: no group has ops). */
    int erase_dev;                    /**< The device path erases its float images after their
                                           conversion (sample_aug.c): the workers write each
                                           sample's boxes at arena_erase instead of erasing. */

    uint32_t nslots;
    dlc__slot *slots;
    uint32_t slot_base;   /**< Batch b of the plan fills slot (b + slot_base) % nslots: a new plan
                               starts after the slots the consumer still holds (see
                               dlc__pipeline_reset()); under mu. */
    size_t arena_bytes;   /**< Of one slot's arena. */
    size_t arena_labels;  /**< Offsets in the arena of the labels, */
    size_t arena_indices; /**< the record numbers, */
    size_t arena_erase;   /**< the erase boxes (erase_dev: nviews dlc__hd_erase_box per sample;
                               else SIZE_MAX), */
    size_t arena_meta;    /**< and the end of the small arrays (the data of the outputs follow). */
    struct dlc__devpath *dev;    /**< The device path, or NULL (loader/device.c). */
    struct dlc__lstream *stream; /**< Streaming from object storage, or NULL (loader/stream.c). */
    char *dev_why;               /**< Why the device path is off although config.device >= 0. */
    /* Lock order across parts: mu, then the stream cache's own (cache/stream/stream_internal.h:
     * its fs_mu, then its mu, then its log_mu). A reset (pipeline.c: dlc__stream_plan() ->
     * dlc__scache_schedule()) and the I/O thread's unpinning (stream.c:
     * dlc__stream_unpin_locked() -> dlc__scache_release()) call into the cache with mu held;
     * the cache never calls into the loader but for the trace's observer (trace.c), which takes
     * no lock, and dlc__scache_acquire(), which may wait for a
     * download, is called without mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv_io;   /**< The I/O thread waits here for a free slot. */
    pthread_cond_t cv_work; /**< Workers wait here for a slot to fill. */
    pthread_cond_t cv_done; /**< The consumer waits here for READY slots and quiet workers. */
    uint64_t fill_next;     /**< Next batch the I/O thread takes. */
    uint64_t cons_next;     /**< Next batch the consumer takes. */
    /** Streaming: 1 + a batch that failed because a shard it reads could not be downloaded.
     *  While fill_next is the batch after it and the consumer has not taken it, the I/O thread
     *  starts nothing: the next batches would download that shard again, past the attempts the
     *  caller allowed, before the caller has even seen the failure. 0: none. */
    uint64_t io_hold;
    uint32_t lent[DLC__MAX_LENT]; /**< Slots lent to the consumer, oldest first. */
    uint32_t nlent;               /**< Entries of lent. */
    int paused, stop;
    uint32_t ready_workers; /**< Workers that finished starting up. */
    dlc_status start_rc;    /**< First start-up failure of a worker. */
    char start_msg[512];

    pthread_t io_thread;
    int io_started;
    dlc_store_reader *io_reader; /**< The I/O thread's reader. */
    uint32_t nworkers;
    dlc__worker *workers;

    /* I/O (io.c). */
    uint32_t io_mode; /**< DLC_IO_MMAP or DLC_IO_DIRECT. */
    int uring_ok;
    struct io_uring ring;
    uint32_t nfiles;  /**< dlc_store_num_files(): 1, or a set's shards. */
    int *direct_fds;  /**< Direct mode: per file, an O_DIRECT descriptor (or a plain one where
                           O_DIRECT is refused), opened at dlc__io_open(). */
    uint64_t *stamps; /**< A set of many files: per file, the last resolve() that listed it in a
                           slot's files (the I/O thread's own). */
    uint64_t resolves;
    size_t io_cap;    /**< Bytes of direct buffer per sample. */
    size_t hdr_bytes; /**< Direct mode: bytes of a record's header read with pread (the lookups
                           never touch the map); 0 for a version 1 store (through LMDB's map). */
    int bufs_registered;
    uint32_t madvise_inflight;
    int resident; /**< The whole store was in the page cache when the epoch started: no
                       readahead hints (they cost a system call per record for nothing). */

    /* Checksum bookkeeping for DLC_VERIFY_FIRST: one bit per record. */
    _Atomic uint64_t *verified_ok;
    _Atomic uint64_t *verified_bad;

    _Atomic uint64_t st_batches, st_samples, st_replaced, st_bytes, st_wait_ns, st_io_wait_ns;
    atomic_int replace_said; /**< The first replacement of a damaged record was logged. */
    int end_said;            /**< This plan's end was reached (and its replacements logged);
                                  the consumer's. */
    uint64_t replaced_mark;  /**< st_replaced when the plan started; the consumer's. */

    /* Where the time goes (report.c). */
    dlc__cnt io_busy, io_read, io_stall, io_held, io_full, io_idle; /**< The I/O thread's. */
    dlc__cnt copy_busy, copy_idle;                                  /**< The copy thread's. */
    dlc__wcnt *wcnt;           /**< One per worker (64-byte aligned). */
    uint64_t cons_wait;        /**< The consumer's own: time inside next(), */
    uint64_t cons_away;        /**< time between its calls, */
    uint64_t cons_out;         /**< and when the last call returned (open, at first); */
    uint64_t cons_in;          /**< when the first slice of a wait dlc_loader_next_wait() cut
                                    into slices began: 0 when none is pending. */
    uint64_t t_open;           /**< dlc__now_ns() at open: the base of "since open". */
    dlc__tally *tally;         /**< DLC__REPORT_RING snapshots, one per delivered batch; the
                                    consumer's. */
    uint64_t ntally;           /**< Snapshots taken (batch k's at tally[k % DLC__REPORT_RING]). */
    uint32_t nactive;          /**< Workers that may take work (the others are parked): all of them,
                                    or threads="auto"'s choice; written by the consumer under mu. */
    uint32_t auto_max;         /**< threads="auto": the most workers; 0 when off. */
    uint64_t auto_from;        /**< threads="auto": the tally its window starts at, */
    uint64_t auto_next;        /**< and the one at which it decides next. */
    dlc__auto auto_st;         /**< Its memory between decisions. */
    uint64_t w_avail;          /**< The consumer's integral of nactive over time (ns), */
    uint64_t t_avail;          /**< up to this time. */
    struct dlc__trace *trace;  /**< The timeline being recorded, or NULL (trace.c). */
    struct dlc__mixload *mixl; /**< A mixture of sources (loader/mix.c), or NULL. */
    dlc__batchaug ba;          /**< MixUp, CutMix, soft targets, resizing (batchaug.c). */
};

struct dlc__devops;

/* ---- Mixtures (mix.c) ----------------------------------------------------------------------- */
/** What a mixture loader knows of its sources beside the order (sampler.h, "Mixtures"). */
typedef struct dlc__mixload {
    uint32_t n;
    char *name;                               /**< "mixture of N sources (A, B, ...)". */
    char *paths[DLC__MIX_MAX_SOURCES];        /**< As given. */
    uint64_t path_hash[DLC__MIX_MAX_SOURCES]; /**< XXH3 of each path: a state matches by it. */
    int64_t label_offset[DLC__MIX_MAX_SOURCES];
    uint64_t first[DLC__MIX_MAX_SOURCES + 1]; /**< Global numbers of each source's first record. */
    uint64_t digest[DLC__MIX_MAX_SOURCES];
    double weight[DLC__MIX_MAX_SOURCES];
    int64_t *file_label; /**< Per file of the union: its source's offset. */
    uint64_t samples_per_epoch;
    /* One source whose epoch is its record count: the loader's sampler is the plain loader's
     * (sampler_open()), so the order and the augmentations are byte for byte a plain loader's.
     * alt is the mixture's sampler, kept for a state saved by another mixture (shuffled or
     * sequential passes only, else NULL): restoring one switches to it (pend_switch 1), and
     * restoring a plain state back (pend_switch -1; plain_open: it was opened plain). */
    int plain, plain_open;
    struct dlc__mix *alt;
    int pend_switch;
    /* A segment to begin at the next plan (set_epoch, restore), applied by dlc__pipeline_reset()
     * once the threads are paused: the I/O thread reads the schedule. Consumer's thread. */
    int pending;
    uint64_t pend_epoch, pend_pos;
    uint64_t pend_base[DLC__MIX_MAX_SOURCES];
    /* The streamed sources (URLs): their sets, opened lazily, are l->stream's. */
    uint8_t url[DLC__MIX_MAX_SOURCES];
    uint32_t nurl;
    dlc_store *url_set[DLC__MIX_MAX_SOURCES];
} dlc__mixload;

/** Open the union of the sources into l->store and fill l->mixl (the loader's path names it). */
dlc_status dlc__mixload_open(struct dlc_loader *l, const dlc_mix_source *sources, uint32_t n,
                             const dlc_mix_options *mix);
/** The mixture's sampler in l->sampler (shuffled or sequential passes); for a plain one-source
 *  mixture only its spare (l->mixl->alt), the caller having opened the plain sampler. */
dlc_status dlc__mixload_sampler(struct dlc_loader *l);
/** dlc_loader_state_save() of a plain one-source mixture's embedded state, and the checks of
 *  dlc_loader_state_restore() before it resets the pipeline to it (loader.c). */
dlc_status dlc__loader_state_save(const struct dlc_loader *l, uint8_t *buf);
dlc_status dlc__loader_state_check(const struct dlc_loader *l, const void *buf, size_t size);
void dlc__mixload_free(struct dlc_loader *l);
/** dlc_loader_set_epoch() of a mixture: an epoch before a restored segment's end replays the
 *  order of a run never restored. */
void dlc__mixload_set_epoch(struct dlc_loader *l, uint64_t epoch);
/** Begin the pending segment, if any (dlc__pipeline_reset(), threads paused, under mu). */
void dlc__mixload_apply(struct dlc_loader *l);
/** Open a loader over @p path, or over a mixture when @p sources is not NULL. */
dlc_status dlc__loader_open_any(const char *path, const dlc_mix_source *sources, uint32_t n,
                                const dlc_mix_options *mix, const dlc_loader_config *config,
                                const struct dlc__devops *ops, dlc_loader **out);

/* outputs.c */
/** Plan the outputs from the schema and the configuration (fields, options, views, crop,
 *  dtype), checking every choice: DLC_EINVAL names the field or option. */
dlc_status dlc__outputs_plan(struct dlc_loader *l);
/** Lay out a slot's arena: l->arena_* and every output's arena_* offsets. */
void dlc__arena_plan(struct dlc_loader *l);
/** Point slot @p s's outputs into @p arena (once, at open; the caller owns the arena). */
dlc_status dlc__slot_outputs_alloc(struct dlc_loader *l, dlc__slot *s, uint8_t *arena);
/** Point slot @p s's outputs into @p arena, without allocating: at open, and when
 *  dlc_loader_keep() gives a lent slot new memory. */
void dlc__slot_outputs_point(struct dlc_loader *l, dlc__slot *s, uint8_t *arena);
void dlc__slot_outputs_free(struct dlc_loader *l, dlc__slot *s);
/** Pack the variable outputs of a complete batch (by the worker that completed it). */
void dlc__outputs_pack(struct dlc_loader *l, dlc__slot *s);
/** Fill s->bf, the batch's description, and the compatibility fields of @p batch. */
void dlc__outputs_describe(struct dlc_loader *l, dlc__slot *s, dlc_batch *batch);

/* io.c */
/** Choose the I/O mode, set up io_uring and the direct buffers. */
dlc_status dlc__io_open(struct dlc_loader *l);
void dlc__io_close(struct dlc_loader *l);
/** Is the whole store in the page cache (mmap mode)? Then an epoch needs no readahead hints. */
int dlc__io_resident(const struct dlc_loader *l);
/** The I/O thread's body. */
void *dlc__io_main(void *arg);
/* Whether the slots list the files of their batches (a set of many files, or streamed). */
#define dlc__io_lists(l) ((l)->nfiles > DLC__SHRINK_ALL_FILES || (l)->stream != NULL)

/* A set of at most this many files has every file checked for shrinking once per batch; a
 * larger one only the files the batch reads (s->files), so the cost stays a few fstat calls
 * per batch however many shards there are. */
#define DLC__SHRINK_ALL_FILES 64u
/* Has a file of the store that batch slot @p s reads shrunk below its size at open (truncated
 * in place)? Then a touch of a page past its new end would raise SIGBUS, so the caller must not
 * read records: returns 1, the file in *file and its current size in *now. One fstat per file
 * checked (every file of the store, or the batch's, see DLC__SHRINK_ALL_FILES); called once per
 * batch by the I/O thread and once per batch by each worker that joins it. */
int dlc__store_shrunk(const struct dlc_loader *l, const dlc__slot *s, uint32_t *file,
                      uint64_t *now);
/* Has file @p file shrunk? One fstat (a replacement record's file, outside its batch's). */
int dlc__file_shrunk(const struct dlc_loader *l, uint32_t file, uint64_t *now);
/* "STORE: record I: the store shrank from X to Y bytes while the loader was reading it (...)",
 * naming a set's shard, into @p buf. */
void dlc__shrunk_msg(const struct dlc_loader *l, uint32_t file, uint64_t now, uint64_t index,
                     char *buf, size_t cap);
/** The file span that holds @p v's selected payloads: [*off, *off + *len). */
void dlc__selected_span(const struct dlc_loader *l, const dlc_value *v, uint64_t *off, size_t *len);

/* device.c: the device path (see its opening comment). Without config.device >= 0 or a usable
 * GPU, l->dev is NULL and each of these does nothing but the host arenas' part. */
struct dlc__devops;
/** Choose the device path before the outputs are planned (images then stay uint8 in the slots):
 *  on @p ops, or the CUDA plugin when NULL. A missing plugin, driver or GPU leaves it off, said
 *  once through the log; an ordinal beyond the GPUs is DLC_EINVAL. */
dlc_status dlc__dev_select(struct dlc_loader *l, const struct dlc__devops *ops);
/** Make the stream, the staging ring and its events (after dlc__arena_plan()). */
dlc_status dlc__dev_open(struct dlc_loader *l);
/** One slot's arena: page-locked with the device path, else aligned host memory; zeroed. NULL
 *  with the message set on failure. */
uint8_t *dlc__dev_host_alloc(struct dlc_loader *l);
/** Start the copy thread (after the other threads). */
dlc_status dlc__dev_start(struct dlc_loader *l);
/** Join the copy thread (after l->stop was set and cv_done broadcast). */
void dlc__dev_join(struct dlc_loader *l);
/** Wait for the device work that reads the loader's memory, then free the ring and the slots'
 *  arenas (the threads are stopped). */
void dlc__dev_close(struct dlc_loader *l);
/** The copy thread holds a slot (a reset waits for it); under mu. */
int dlc__dev_busy_locked(const struct dlc_loader *l);
/** Drop the staged batches of the old plan and release a lent one; under mu, threads quiet. */
void dlc__dev_reset_locked(struct dlc_loader *l);
/** The image dtype the caller gets: config.dtype, which the device path keeps for its
 *  conversion while the slots hold uint8. */
uint32_t dlc__dev_dtype(const struct dlc_loader *l);
/** The device part of the stats. */
void dlc__dev_stats(const struct dlc_loader *l, dlc_loader_stats *st);
/** dlc_loader_open() on device operations @p ops (NULL: the CUDA plugin; the tests pass their CPU
 *  stand-in, tests/lib/devsim.c, which must outlive the loader). */
dlc_status dlc__loader_open_with(const char *path, const dlc_loader_config *config,
                                 const struct dlc__devops *ops, struct dlc_loader **out);

/** The first record of each of store @p s's @p n files (a set's shards) and the count after them
 *  (n + 1 entries, malloc'd), found through the public calls: a binary search each. */
dlc_status dlc__shard_firsts(const dlc_store *s, uint32_t n, uint64_t **out);

/* stream.c: a store set read from object storage through the shard cache. */
/** Whether @p path names a set in object storage (s3://, gs://, http(s)://). */
int dlc__stream_is_url(const char *path);
/** Open the cache of the set at @p url and the set lazily into l->store (config checked). */
dlc_status dlc__stream_open(struct dlc_loader *l, const char *url);
/** A mixture's streamed source @p url: its cache (one more in l->stream) and its set opened lazily
 *  from the index into *set, which the stream owns from then on (also on failure:
 *  dlc__stream_close()). */
dlc_status dlc__stream_open_source(struct dlc_loader *l, const char *url, dlc_store **set);
/** The cache bytes mixture source @p src needs (dlc_mix_source_info.cache_needed_bytes): 0 for
 *  a local one. */
uint64_t dlc__stream_source_need(const struct dlc_loader *l, uint32_t src);
/** Once the mixture's union is l->store: the next streamed set not yet bound (in the order they
 *  were opened) is its source @p src, its shards the union's files @p file0 .., its records the
 *  union's @p rec0 ..; makes the plan's tables. */
dlc_status dlc__stream_bind(struct dlc_loader *l, uint32_t src, uint32_t file0, uint64_t rec0,
                            const char *url);
/** After the sampler: can the cache hold what the windows need? DLC_EINVAL with the bytes. */
dlc_status dlc__stream_check(const struct dlc_loader *l);
/** A new plan (open, reset; under mu or before the threads): the shards' last batches and the
 *  cache's schedule. With @p net (at open, on the caller's thread) its progress callback is asked
 *  about ten times a second whether to stop: DLC_ECANCELED; else DLC_OK. */
dlc_status dlc__stream_plan(struct dlc_loader *l, const dlc_warm_options *net);
/** The I/O thread, before a batch's lookups: pin and attach the shards slot @p s reads (its
 *  files). A shard the cache refused as damaged (DLC_ECORRUPT) with on_corrupt = replace is not
 *  an error of the batch: it is marked refused for the rest of the loader's life (never fetched
 *  again), *refused is set, and only its records fail (dlc__stream_record_ok()). When every
 *  shard of the batch is refused, a healthy one is pinned for the stand-ins (s->standin_*). */
dlc_status dlc__stream_pin(struct dlc_loader *l, dlc__slot *s, int *refused);
/** DLC_OK, or DLC_ECORRUPT with the refusal's message when record @p index is in a shard the
 *  cache refused (see dlc__stream_pin()). */
dlc_status dlc__stream_record_ok(const struct dlc_loader *l, uint64_t index);
/** Shards refused so far (dlc__stream_pin()); 0 for a local store. */
uint32_t dlc__stream_refused(const struct dlc_loader *l);
/** The I/O thread, under mu: unpin and detach the shards no batch still reads. */
void dlc__stream_unpin_locked(struct dlc_loader *l);
/** The streaming counters into @p st (nothing for a local store). */
void dlc__stream_stats(const struct dlc_loader *l, dlc_loader_stream_stats *st);
/** Closing: end the downloads under way and the I/O thread's waits for shards now. */
void dlc__stream_stop(struct dlc_loader *l);
/** Release everything, close the store and the cache (threads stopped). */
void dlc__stream_close(struct dlc_loader *l);

/* loader.c */
/** The consumer reached the plan's end: log the replacements of damaged records it had. */
void dlc__epoch_end(struct dlc_loader *l);

/* The slot of batch @p b of the current plan; under mu (or by the thread that owns b). */
static inline uint32_t dlc__slot_of(const struct dlc_loader *l, uint64_t b)
{
    assert(l->slot_base < l->nslots);
    return (uint32_t)((b + l->slot_base) % l->nslots);
}

/* The consumer's list of lent slots: at most max_lent, each a slot in state LENT (the device path
 * lends stages, never slots: its list stays empty). Under mu; O(max_lent), at most 16. */
static inline void dlc__assert_lent(const struct dlc_loader *l)
{
#ifndef NDEBUG
    assert(l->nlent <= l->cfg.max_lent && l->cfg.max_lent <= DLC__MAX_LENT);
    assert(!l->dev || l->nlent == 0);
    for (uint32_t k = 0; k < l->nlent; k++)
        assert(l->lent[k] < l->nslots && l->slots[l->lent[k]].state == DLC__SLOT_LENT);
#else
    (void)l;
#endif
}

/* report.c */
/** Allocate the counters and the snapshot ring (at open, before the threads). */
dlc_status dlc__report_open(struct dlc_loader *l);
void dlc__report_close(struct dlc_loader *l);
/** The consumer entered next() (at @p t_in) and is leaving it (@p t_out, a batch delivered or
 *  not): its wait and its time away. */
void dlc__report_consumer(struct dlc_loader *l, uint64_t t_in, uint64_t t_out, int delivered);
/* A slice of a wait returned with no batch at @p t_in's call: the wait goes on (see cons_in). */
void dlc__report_pending(struct dlc_loader *l, uint64_t t_in);
/* The end of a wait of @p wait_ns (UINT64_MAX: none) from @p t_in, on dlc__now_ns()'s clock. */
uint64_t dlc__next_deadline(uint64_t t_in, uint64_t wait_ns);
/* One wait on cv_done under mu, at most until @p deadline (UINT64_MAX: no limit); 0 once the
 * deadline has passed. */
int dlc__done_wait(struct dlc_loader *l, uint64_t deadline);
/** The counters now. */
void dlc__report_tally(const struct dlc_loader *l, dlc__tally *t);
/** threads="auto"'s memory before its first decision. */
void dlc__auto_init(dlc__auto *st);
/** threads="auto"'s decision over the window from tally @p a to tally @p b, taken with @p n
 *  workers working (1 <= n <= cap): the count for the next window, in 1..@p cap. Adds workers
 *  when the consumer waited and the workers did not wait for reads or downloads, to about
 *  n / (1 - the consumer's wait share) at most doubling; gives one back after st->patience
 *  windows in a row where the consumer did not wait and the others would absorb the work. A
 *  pure function of its arguments and @p st, which it updates. */
uint32_t dlc__auto_decide(const dlc__tally *a, const dlc__tally *b, uint32_t n, uint32_t cap,
                          dlc__auto *st);
/** Fill @p r's shares from two tallies, then its verdict (dlc__report_decide()). */
void dlc__report_fill(const dlc__tally *a, const dlc__tally *b, uint32_t threads, int device,
                      dlc_loader_report *r);
/** The verdict of a report whose shares are filled: bound, reason and advice. Pure. */
void dlc__report_decide(dlc_loader_report *r);
/** The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID: exact, where getrusage() counts
 *  in ticks) and major page faults. */
void dlc__thread_usage(uint64_t *cpu_ns, uint64_t *majflt);

/* trace.c: the timeline (config.trace). Tracks: */
enum {
    DLC__TRACK_IO,       /* The I/O thread: "io" (a batch's lookups and reads), "download". */
    DLC__TRACK_COPY,     /* The device copy thread: "copy". */
    DLC__TRACK_CONSUMER, /* The consumer: "next" (its wait for a batch). */
    DLC__TRACK_WORKER0,  /* Worker i is track DLC__TRACK_WORKER0 + i: "work". The download
                            threads of streamed sets follow (dlc__trace_downloads()): "fetch". */
};
/* Names of spans. */
enum {
    DLC__SPAN_IO,
    DLC__SPAN_DOWNLOAD,
    DLC__SPAN_WORK,
    DLC__SPAN_COPY,
    DLC__SPAN_NEXT,
    DLC__SPAN_FETCH
};
/** Start recording when config.trace or $DLCACHE_TRACE names a file (after the workers are
 *  counted, before they or a stream cache start); l->trace stays NULL otherwise. */
dlc_status dlc__trace_open(struct dlc_loader *l);
struct dlc__scache;
/** Give the download threads of stream cache @p cache tracks of their own (one span per shard
 *  downloaded: its name, bytes, ahead of need or waited for): right after the cache opens,
 *  before anything is scheduled. Nothing without a trace. The cache must stay open until
 *  dlc__trace_close(), which joins its threads. @return DLC_OK or -ENOMEM. */
dlc_status dlc__trace_downloads(struct dlc_loader *l, struct dlc__scache *cache);
/** Record a span on track @p trk, by that track's own thread only (no lock). */
void dlc__trace_span(struct dlc_loader *l, uint32_t trk, uint32_t name, uint64_t epoch,
                     uint64_t batch, uint64_t t0, uint64_t t1);
/** Join the traced caches' download threads, write the file when @p write (the loader's
 *  threads are joined) and free the rings; a failure to write is logged. */
void dlc__trace_close(struct dlc_loader *l, int write);

/* pipeline.c */
/** A worker's body. */
void *dlc__worker_main(void *arg);
/** Stop the threads' work on the current plan and start a new plan at global position @p start.*/
void dlc__pipeline_reset(struct dlc_loader *l, uint64_t seed, uint64_t epoch, uint64_t start);
/** Fail slot @p s at its sample @p j with @p rc and @p msg, under mu: the lowest sample's failure
 *  wins, so the error a batch reports does not depend on which worker saw its failure first. */
void dlc__slot_fail(struct dlc_loader *l, dlc__slot *s, uint32_t j, dlc_status rc, const char *msg);

#endif /* DLCACHE_LOADER_INTERNAL_H */
