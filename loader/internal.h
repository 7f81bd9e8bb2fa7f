/* Private to loader/: the loader's slot ring, its threads and its I/O (loader.c, pipeline.c,
 * io.c). The pure parts are in sampler.h and augment.h, the plumbing in common.h. */
#ifndef DLCACHE_LOADER_INTERNAL_H
#define DLCACHE_LOADER_INTERNAL_H

#include "augment.h"
#include "common.h"
#include "sampler.h"

#include <dlcache/image.h>
#include <dlcache/loader.h>
#include <dlcache/status.h>
#include <dlcache/store.h>

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* ---- The loader, its slot ring and its threads (loader.c, pipeline.c, io.c) ------------------ */
/* A slot goes FREE -> IO (the I/O thread resolves its records and starts their reads) -> FILL
 * (workers claim samples in chunks) -> READY -> LENT (to the consumer) -> FREE. Every transition
 * happens under loader.mu: one handshake per batch, none per sample. */
enum { DLC__SLOT_FREE, DLC__SLOT_IO, DLC__SLOT_FILL, DLC__SLOT_READY, DLC__SLOT_LENT };

/** What the I/O thread found for one sample of a batch. */
typedef struct dlc__sample_io {
    dlc_record rec;         /**< Header of the record (data points into the map). */
    const uint8_t *payload; /**< Where workers read it: the map, or a direct-I/O buffer. */
    uint64_t pos;           /**< Global position in the epoch's extended order. */
    dlc_status status;      /**< Of the lookup or the read. */
} dlc__sample_io;

typedef struct dlc__slot {
    int state;            /**< DLC__SLOT_*; under mu. */
    uint64_t batch;       /**< Batch number in the current plan. */
    uint32_t count;       /**< Samples in it. */
    uint64_t seed, epoch; /**< Keys of its augmentation. */
    uint8_t *data;        /**< batch_size * sample_bytes, 64-byte aligned. */
    int64_t *labels;
    uint64_t *indices;
    dlc__sample_io *io;
    uint8_t *iobuf;    /**< Direct mode: batch_size * io_cap bytes, 4096-aligned. */
    atomic_uint claim; /**< Next sample to hand to a worker (a chunk at a time). */
    atomic_uint done;  /**< Samples finished; the worker that completes the batch marks it READY. */
    uint32_t active;   /**< Workers inside the slot; under mu. */
    dlc_status err;    /**< First failure (lowest sample index); under mu. */
    uint32_t err_at;
    char errmsg[512];
    uint32_t io_err_at; /**< Lowest sample whose lookup failed; its message is io_msg. */
    char io_msg[512];
} dlc__slot;

typedef struct dlc__worker {
    struct dlc_loader *l;
    uint32_t id;
    pthread_t thread;
    int started;
    dlc_store_reader *reader; /**< Opened and closed on the worker's thread. */
    dlc_codec *codec;         /**< JPEG stores only. */
    uint8_t *tmp;             /**< out_h x out_w x C staging for resized crops. */
    void *scratch;            /**< dlc_resize() scratch; grows to the largest box seen. */
    size_t scratch_size;
} dlc__worker;

struct dlc_loader {
    dlc_loader_config cfg;
    double *weights;
    dlc_store *store;
    const dlc_store_info *info;
    const char *path; /**< dlc_store_path(store). */
    dlc__sampler sampler;
    dlc__shard shard;
    dlc__convert cv;
    uint32_t out_h, out_w, out_c;
    size_t sample_bytes;
    uint64_t batch_base; /**< batch_index of the plan's first batch. */

    uint32_t nslots;
    dlc__slot *slots;
    pthread_mutex_t mu;
    pthread_cond_t cv_io;   /**< The I/O thread waits here for a free slot. */
    pthread_cond_t cv_work; /**< Workers wait here for a slot to fill. */
    pthread_cond_t cv_done; /**< The consumer waits here for READY slots and quiet workers. */
    uint64_t fill_next;     /**< Next batch the I/O thread takes. */
    uint64_t cons_next;     /**< Next batch the consumer takes. */
    int lent;               /**< Slot lent to the consumer, or -1. */
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
    int direct_fd; /**< O_DIRECT descriptor (or a plain one where O_DIRECT is refused). */
    size_t io_cap; /**< Bytes of direct buffer per sample. */
    int bufs_registered;
    uint32_t madvise_inflight;

    /* Checksum bookkeeping for DLC_VERIFY_FIRST: one bit per record. */
    _Atomic uint64_t *verified_ok;
    _Atomic uint64_t *verified_bad;

    _Atomic uint64_t st_batches, st_samples, st_replaced, st_bytes, st_wait_ns, st_io_wait_ns;
};

/** Choose the I/O mode, set up io_uring and the direct buffers. */
dlc_status dlc__io_open(struct dlc_loader *l);
void dlc__io_close(struct dlc_loader *l);
/** The I/O thread's body. */
void *dlc__io_main(void *arg);
/* Has the store file shrunk below its size at open (truncated in place)? Then a touch of a page
 * past its new end would raise SIGBUS, so the caller must not read records: returns 1 and the
 * current size in *now. One fstat; called once per batch by the I/O thread and once per claimed
 * chunk by the workers. */
int dlc__store_shrunk(const struct dlc_loader *l, uint64_t *now);
/** A worker's body. */
void *dlc__worker_main(void *arg);
/** Stop the threads' work on the current plan and start a new plan at global position @p start.*/
void dlc__pipeline_reset(struct dlc_loader *l, uint64_t seed, uint64_t epoch, uint64_t start);

#endif /* DLCACHE_LOADER_INTERNAL_H */
