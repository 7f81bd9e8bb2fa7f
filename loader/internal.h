/* Private to loader/. */
#ifndef DLCACHE_LOADER_INTERNAL_H
#define DLCACHE_LOADER_INTERNAL_H

#include <dlcache/loader.h>
#include <dlcache/status.h>

#include <stdint.h>

/* The error-detail helpers live in cache/error.c (one thread-local buffer for
 * the whole library); loader/ may not include cache/ headers, so the two
 * prototypes are repeated here. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
dlc_status dlc__errorf(dlc_status status, const char *fmt, ...);
void dlc__clear_error(void);
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
void dlc__logf(dlc_log_fn log, void *user, dlc_log_level level, const char *fmt, ...);

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        rc = (expr);                                                                               \
        if (rc < 0)                                                                                \
            goto fail;                                                                             \
    } while (0)

#define FAIL_IF(cond, code, ...)                                                                   \
    do {                                                                                           \
        if (cond) {                                                                                \
            rc = dlc__errorf((code), __VA_ARGS__);                                                 \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* ---- Counter-based random numbers (sampler.c) -------------------------------------------------
 * Every random choice is a pure function of a key made from (seed, epoch, position, purpose) and
 * a counter, so it does not depend on which thread asks or when. splitmix64's finalizer is a
 * bijection of 64-bit words with full avalanche, which is all a counter-based generator needs. */

/** splitmix64 finalizer. */
static inline uint64_t dlc__mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/** A key from four words; different argument orders give unrelated keys. */
static inline uint64_t dlc__key4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    uint64_t h = dlc__mix64(a ^ 0x6a09e667f3bcc909ull);
    h = dlc__mix64(h ^ b);
    h = dlc__mix64(h ^ c);
    return dlc__mix64(h ^ d);
}

/** Purposes that separate the random streams of one sample. */
enum {
    DLC__KEY_SHUFFLE = 1,   /**< The epoch's permutation. */
    DLC__KEY_GROUPS = 2,    /**< Quasi-random: order of groups. */
    DLC__KEY_WINDOW = 3,    /**< Quasi-random: order within a window. */
    DLC__KEY_WEIGHTED = 4,  /**< Weighted draws. */
    DLC__KEY_AUGMENT = 5,   /**< Crop and flip of one sample. */
    DLC__KEY_REPLACE = 6,   /**< Choice of a replacement for a corrupt record. */
};

/** A counter-based stream: the n-th output is mix64(key + n * odd constant). */
typedef struct dlc__rng {
    uint64_t key;
    uint64_t ctr;
} dlc__rng;

static inline uint64_t dlc__rng_next(dlc__rng *r)
{
    r->ctr++;
    return dlc__mix64(r->key ^ (r->ctr * 0xd1b54a32d192ed03ull));
}

/** Uniform double in [0, 1) with 53 random bits. */
static inline double dlc__rng_uniform(dlc__rng *r)
{
    return (double)(dlc__rng_next(r) >> 11) * 0x1.0p-53;
}

/** Uniform integer in [0, n), n > 0, without modulo bias (Lemire's method). */
uint64_t dlc__rng_below(dlc__rng *r, uint64_t n);

/* ---- Bijective shuffle of [0, n) (sampler.c) --------------------------------------------------
 * A balanced Feistel network over the smallest even number of bits that covers n, made a
 * permutation of [0, n) by cycle walking (re-applying it while the result is >= n). The domain is
 * at most 4n, so a walk takes fewer than 4 rounds on average. O(1) memory whatever n is. */
typedef struct dlc__perm {
    uint64_t n;
    uint32_t half_bits;
    uint64_t half_mask;
    uint64_t keys[4];
} dlc__perm;

void dlc__perm_init(dlc__perm *p, uint64_t n, uint64_t key);
uint64_t dlc__perm_apply(const dlc__perm *p, uint64_t i);
uint64_t dlc__perm_invert(const dlc__perm *p, uint64_t i);

/* ---- The epoch's global order (sampler.c) ---------------------------------------------------- */
typedef struct dlc__sampler {
    uint32_t kind;  /**< A ::dlc_sampler. */
    uint64_t count; /**< Records in the store. */
    uint64_t len;   /**< Length of one epoch's order (count, or num_samples when weighted). */
    uint64_t seed;
    uint64_t epoch;
    dlc__perm perm; /**< Shuffle: the permutation; quasi-random: the permutation of groups. */
    /* Quasi-random. */
    uint64_t group;     /**< Records per group. */
    uint64_t ngroups;   /**< ceil(count / group). */
    uint64_t tail;      /**< Records in the last, short group (0 when it is full). */
    uint64_t tail_pos;  /**< Position of the short group in the permuted order of groups. */
    uint64_t window;    /**< Positions shuffled together in the second stage. */
    /* Weighted: records grouped by class, and a Walker alias table over classes. Owned by the
     * sampler (allocated by dlc__sampler_init). */
    uint32_t nclasses;
    uint64_t *by_class;    /**< count record numbers, class 0's first. */
    uint64_t *class_start; /**< nclasses + 1 offsets into by_class. */
    double *alias_prob;    /**< nclasses acceptance probabilities. */
    uint32_t *alias_idx;   /**< nclasses alias classes. */
} dlc__sampler;

/**
 * Prepare a sampler. For DLC_SAMPLER_WEIGHTED, @p labels gives each record's label (count of
 * them, each < nclasses) and @p weights one non-negative weight per class; both are only read
 * during the call. Returns DLC_OK, DLC_EINVAL (named) or -ENOMEM.
 */
dlc_status dlc__sampler_init(dlc__sampler *s, uint32_t kind, uint64_t count, uint64_t num_samples,
                             uint32_t quasi_group, const int64_t *labels, uint32_t nclasses,
                             const double *weights);
void dlc__sampler_free(dlc__sampler *s);
/** Key the order to (seed, epoch). */
void dlc__sampler_set_epoch(dlc__sampler *s, uint64_t seed, uint64_t epoch);
/** Record at position @p pos of the epoch's order extended cyclically (pos may be >= len: that
 *  is DistributedSampler's padding, which repeats the order from its start). */
uint64_t dlc__sampler_at(const dlc__sampler *s, uint64_t pos);

/**
 * One rank's share of what is left of an epoch. Positions are in the epoch's cyclically extended
 * order; what is left is [start, len). It is padded to a multiple of world (or cut, with
 * drop_last), and rank r takes positions start + r, start + r + world, ...
 */
typedef struct dlc__shard {
    uint64_t start;    /**< First global position not yet consumed. */
    uint64_t per_rank; /**< Samples this rank delivers (after drop_last cuts a short batch). */
    uint64_t batches;  /**< Batches this rank delivers. */
    uint32_t rank, world, batch;
} dlc__shard;

void dlc__shard_plan(dlc__shard *sh, uint64_t len, uint64_t start, uint32_t rank, uint32_t world,
                     uint32_t batch, int drop_last);
/** Global position of this rank's @p j-th sample. */
static inline uint64_t dlc__shard_pos(const dlc__shard *sh, uint64_t j)
{
    return sh->start + sh->rank + j * sh->world;
}

/* ---- Augmentation (augment.c) ---------------------------------------------------------------- */

/** A crop region in source pixels: rows top..top+h-1, columns left..left+w-1. */
typedef struct dlc__box {
    uint32_t top, left, h, w;
} dlc__box;

/** torchvision 0.14 RandomResizedCrop.get_params on a width x height image. */
dlc__box dlc__rrc_params(uint32_t width, uint32_t height, const float scale[2],
                         const float ratio[2], dlc__rng *rng);
/** torchvision CenterCrop offsets (round half to even, like Python's round()). */
dlc__box dlc__center_box(uint32_t width, uint32_t height, uint32_t crop_w, uint32_t crop_h);
/** torchvision RandomCrop offsets: uniform top in [0, height-crop_h], then left. */
dlc__box dlc__random_box(uint32_t width, uint32_t height, uint32_t crop_w, uint32_t crop_h,
                         dlc__rng *rng);

/** IEEE binary16 of @p f, rounded to nearest even (what torch's .half() does). */
uint16_t dlc__f32_to_f16(float f);

/** Output conversion tables, made once at open: one entry per channel and byte value, computed
 *  exactly like the reference expression ((float)x / 255 - mean) / std. */
typedef struct dlc__convert {
    uint32_t dtype;    /**< A ::dlc_dtype. */
    uint32_t channels; /**< Channels per pixel. */
    float f32[3][256];
    uint16_t f16[3][256];
    float mean[3], std[3]; /**< As configured: the vector path computes with them. */
    int simd; /**< Float outputs use the AVX2 + FMA + F16C kernel: the CPU has it and, tried on
                   every byte value of every channel at init, it gave exactly the tables' bits. */
} dlc__convert;

void dlc__convert_init(dlc__convert *cv, uint32_t dtype, uint32_t channels, const float mean[3],
                       const float std[3]);

/** Mirror a row of @p w RGB pixels into @p out (no overlap): SSSE3 where the CPU has it. */
void dlc__flip_row_rgb(const uint8_t *in, uint8_t *out, uint32_t w);

/**
 * The one pass of the loader: copy the @p box of an interleaved uint8 image (rows @p stride bytes
 * apart), mirrored left-right when @p flip, converted as @p cv says, to @p dst: box.h x box.w x C
 * (uint8, NHWC sample) or C planes of box.h x box.w (float32/float16, NCHW sample).
 */
void dlc__crop_convert(const uint8_t *src, size_t stride, dlc__box box, int flip,
                       const dlc__convert *cv, void *dst);

/* ---- The loader, its slot ring and its threads (loader.c, pipeline.c, io.c) ------------------ */
#include <dlcache/image.h>
#include <dlcache/store.h>

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>

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
    int state;        /**< DLC__SLOT_*; under mu. */
    uint64_t batch;   /**< Batch number in the current plan. */
    uint32_t count;   /**< Samples in it. */
    uint64_t seed, epoch; /**< Keys of its augmentation. */
    uint8_t *data;    /**< batch_size * sample_bytes, 64-byte aligned. */
    int64_t *labels;
    uint64_t *indices;
    dlc__sample_io *io;
    uint8_t *iobuf;   /**< Direct mode: batch_size * io_cap bytes, 4096-aligned. */
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
    uint32_t io_mode;  /**< DLC_IO_MMAP or DLC_IO_DIRECT. */
    int uring_ok;
    struct io_uring ring;
    int direct_fd;     /**< O_DIRECT descriptor (or a plain one where O_DIRECT is refused). */
    size_t io_cap;     /**< Bytes of direct buffer per sample. */
    int bufs_registered;
    uint32_t madvise_inflight;

    /* Checksum bookkeeping for DLC_VERIFY_FIRST: one bit per record. */
    _Atomic uint64_t *verified_ok;
    _Atomic uint64_t *verified_bad;

    _Atomic uint64_t st_batches, st_samples, st_replaced, st_bytes, st_wait_ns, st_io_wait_ns;
};

uint64_t dlc__now_ns(void);
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
