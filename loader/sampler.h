/* Private to loader/: the epoch's order and a rank's share of it (sampler.c). Pure functions of
 * (seed, epoch, rank, world, position) with no threads and no I/O, so tools and tests include
 * this without liburing or pthreads. */
#ifndef DLCACHE_LOADER_SAMPLER_H
#define DLCACHE_LOADER_SAMPLER_H

#include "common.h"

#include <dlcache/loader.h>

#include <stdint.h>

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

/* ---- Shard windows (sampler_windows.c) --------------------------------------------------------
 * The order a store set is streamed in: shards permuted and dealt to streams, windows of shards
 * permuted record by record, streams interleaved (the file's comment has the whole rule). */
typedef struct dlc__swin dlc__swin;
#define DLC__SWIN_MAX 4095u /* Largest window and stream count: both fit 12 bits of the state. */
/** Make the tables for a store of @p nshards shards whose first records are @p firsts
 *  (nshards + 1 entries, the last being the count; copied), keyed to epoch 0. DLC_OK, DLC_EINVAL
 *  (named) or -ENOMEM; *out is NULL on failure. */
dlc_status dlc__swin_init(dlc__swin **out, const uint64_t *firsts, uint32_t nshards,
                          uint32_t window, uint32_t streams);
void dlc__swin_free(dlc__swin *w);
/** Refill the tables for (seed, epoch); allocates nothing. */
void dlc__swin_set_epoch(dlc__swin *w, uint64_t seed, uint64_t epoch);
/** The epoch's length: streams x the longest stream (it changes with the epoch). */
uint64_t dlc__swin_len(const dlc__swin *w);
/** Streams in effect: the configured count, or the shards with records when fewer. */
uint32_t dlc__swin_streams(const dlc__swin *w);
/** Record at position @p pos < dlc__swin_len(). */
uint64_t dlc__swin_at(const dlc__swin *w, uint64_t pos);
/** The fewest records of a shard that has any. */
uint64_t dlc__swin_min_count(const dlc__swin *w);
/**
 * The most shards a rank can hold pinned at once while streaming: @p slots batches of @p batch
 * samples in flight, spread over @p per_rank streams, each run of a stream's samples touching
 * every shard of each window it enters (a window's records are fully permuted), plus the
 * window the next batch enters.
 */
uint32_t dlc__swin_pinned_bound(const dlc__swin *w, uint32_t slots, uint32_t batch,
                                uint32_t per_rank);
/** The shard holding record @p record < count. */
uint32_t dlc__swin_shard_of(const dlc__swin *w, uint64_t record);
/**
 * Per shard, the first and the last of a rank's samples j (0..per_rank-1, at positions
 * start + rank + j * world of an epoch of @p len positions, wrapped past it as the sampler
 * wraps) that fall in the shard's window: every shard of a window is taken to be read from the
 * rank's first sample in it to its last. In O(shards + windows), whatever the records: a plan
 * from it holds shards as long as a walk of every record would, or a little longer, and lists
 * no fewer. @p first gets UINT64_MAX for a shard the rank never reaches; both arrays have
 * dlc__swin's nshards entries.
 */
void dlc__swin_plan(const dlc__swin *w, uint64_t len, uint64_t start, uint32_t rank, uint32_t world,
                    uint64_t per_rank, uint64_t *first, uint64_t *last);

/* ---- The epoch's global order (sampler.c) ---------------------------------------------------- */
typedef struct dlc__sampler {
    uint32_t kind;  /**< A ::dlc_sampler. */
    uint64_t count; /**< Records in the store. */
    uint64_t len;   /**< Length of one epoch's order (count, or num_samples when weighted). */
    uint64_t seed;
    uint64_t epoch;
    uint32_t repeats; /**< Repeated augmentation: positions per record of the order (0, 1: one). */
    dlc__perm perm;   /**< Shuffle: the permutation; quasi-random: the permutation of groups. */
    /* Quasi-random. */
    uint64_t group;    /**< Records per group. */
    uint64_t ngroups;  /**< ceil(count / group). */
    uint64_t tail;     /**< Records in the last, short group (0 when it is full). */
    uint64_t tail_pos; /**< Position of the short group in the permuted order of groups. */
    uint64_t window;   /**< Positions shuffled together in the second stage. */
    /* Weighted: records grouped by class, and a Walker alias table over classes. Owned by the
     * sampler (allocated by dlc__sampler_init). */
    uint32_t nclasses;
    uint64_t *by_class;    /**< count record numbers, class 0's first. */
    uint64_t *class_start; /**< nclasses + 1 offsets into by_class. */
    double *alias_prob;    /**< nclasses acceptance probabilities. */
    uint32_t *alias_idx;   /**< nclasses alias classes. */
    /* Shard windows. Owned by the sampler. */
    dlc__swin *swin;
    /* A mixture (sampler_mix.c): positions go to it. Owned by the sampler. */
    struct dlc__mix *mix;
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
/**
 * Prepare a DLC_SAMPLER_SHARD_WINDOWS sampler over a store of @p nshards shards whose first
 * records are @p firsts (nshards + 1 entries; copied). Returns DLC_OK, DLC_EINVAL (named) or
 * -ENOMEM.
 */
dlc_status dlc__sampler_init_windows(dlc__sampler *s, const uint64_t *firsts, uint32_t nshards,
                                     uint32_t window, uint32_t streams);
/** Key the order to (seed, epoch). */
void dlc__sampler_set_epoch(dlc__sampler *s, uint64_t seed, uint64_t epoch);
/** Record at position @p pos of the epoch's order extended cyclically (pos may be >= len: that
 *  is DistributedSampler's padding, which repeats the order from its start). With repeats above
 *  1, positions k * repeats .. k * repeats + repeats - 1 of the epoch all hold the order's k-th
 *  record of the order, k taken modulo len (torchvision's RASampler: each record repeated, the
 *  padding going on along that list). */
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

/* ---- Mixtures (sampler_mix.c) -----------------------------------------------------------------
 * Several sources (stores or sets) read as one loader, by weight. Each source walks passes: pass
 * k of a source is a permutation of its records (keyed by (seed, k, its tag)) that it finishes
 * before pass k + 1 starts. A fixed cycle of `period` slots, quota[s] of them for source s, laid
 * out by the largest deficit (slot i goes to the source furthest behind its share (i + 1) x
 * quota / period, the lowest number on a tie), says which source each row of positions draws
 * from; a row is `world` consecutive positions, one per rank, so every rank sees the same
 * low-discrepancy sequence of sources. Every prefix of the sequence holds each source's share
 * within less than 1, so every window of it (a rank's batch) within less than 2, and within less
 * than 1 with two sources (the cycle is then a Bresenham line). Exact windows within 1 for three
 * or more sources of distinct rates do not exist in general (Fraenkel's problem).
 *
 * The schedule runs on across epochs: its index t counts the positions drawn since the segment
 * began. A segment begins at (epoch 0, position 0) with no draws, or where a state was restored
 * under other weights, sources or world size, with each source's draws before it (base[]): the
 * new schedule continues every source's pass exactly where it stood. An epoch draws len positions
 * rounded up to a multiple of world (down with drop_last), so the padding DistributedSampler
 * repeats is made of new draws here and no draw is ever skipped; with drop_last the epoch is
 * cut to a multiple of world x batch, exactly what the ranks deliver. */
#define DLC__MIX_MAX_SOURCES 64u
#define DLC__MIX_MAX_PERIOD 65536u

typedef struct dlc__mix_source {
    uint64_t count; /**< Records of the source. */
    uint64_t first; /**< Global number of its first record in the loader's union. */
    uint64_t tag;   /**< Keys its passes (its content digest: not its place in the list). */
    double weight;  /**< Non-negative, finite. */
} dlc__mix_source;

typedef struct dlc__mix {
    uint32_t n;
    dlc__mix_source src[DLC__MIX_MAX_SOURCES];
    uint32_t quota[DLC__MIX_MAX_SOURCES]; /**< Slots of each source per cycle. */
    uint32_t period;                      /**< Slots per cycle: the sum of the quotas. */
    uint8_t *slot_src;                    /**< period: the source of each slot. */
    uint32_t *slot_rank;                  /**< period: slots of the same source before it. */
    uint64_t len;                         /**< Positions per epoch as asked (samples_per_epoch). */
    uint32_t world;
    int drop_last;
    uint32_t batch; /**< With drop_last a rank's short last batch is cut too: an epoch then draws
                         a multiple of world x batch (1 unless the caller sets it). */
    int sequential; /**< Passes in record order (DLC_SAMPLER_SEQUENTIAL), else permuted. */
    uint64_t seed;
    uint64_t seg_epoch, seg_pos;         /**< Where the segment began. */
    uint64_t base[DLC__MIX_MAX_SOURCES]; /**< Each source's draws before it. */
    /** Streamed sources (dlc__mix_set_windows()): their passes in shard windows, the tables of
     *  the passes the current epoch draws (dlc__mix_prepare()); NULL: permuted passes. Owned. */
    struct dlc__mix_win *win[DLC__MIX_MAX_SOURCES];
} dlc__mix;

/**
 * Prepare a mixture of @p n sources with weights (quotas from them: the smallest period up to
 * DLC__MIX_MAX_PERIOD that gives every weight exactly, else that period by largest remainders).
 * @p names (may be NULL) name the sources in messages. DLC_OK, DLC_EINVAL (no source, too many, a
 * source without records, a weight negative, NaN or infinite, all weights 0, a weight too small
 * for the largest period: named) or -ENOMEM. The segment is (0, 0) with no draws.
 */
dlc_status dlc__mix_init(dlc__mix *m, const dlc__mix_source *src, uint32_t n, uint64_t len,
                         uint32_t world, int drop_last, int sequential, const char *const *names);
/** The same with the quotas given (a state's); DLC_EINVAL when they are all 0 or sum above the
 *  largest period. */
dlc_status dlc__mix_init_quotas(dlc__mix *m, const dlc__mix_source *src, uint32_t n,
                                const uint32_t *quota, uint64_t len, uint32_t world, int drop_last,
                                int sequential);
void dlc__mix_free(dlc__mix *m);
/** Positions of epoch @p epoch that the schedule draws (from the segment's start in its first
 *  epoch): what is left, rounded to a multiple of world. */
uint64_t dlc__mix_epoch_span(const dlc__mix *m, uint64_t epoch);
/** Source and draw of position @p pos of epoch @p epoch (not before the segment): returns the
 *  global record, with the source and the record's number within it. */
uint64_t dlc__mix_at(const dlc__mix *m, uint64_t epoch, uint64_t pos, uint32_t *source,
                     uint64_t *local);
/** Draw number (of its source, returned in @p source: its pass is the draw / count) of position
 *  @p pos of epoch @p epoch (not before the segment). */
uint64_t dlc__mix_draw(const dlc__mix *m, uint64_t epoch, uint64_t pos, uint32_t *source);
/** Each source's draws before position @p pos of epoch @p epoch (n entries into @p draws). */
void dlc__mix_draws(const dlc__mix *m, uint64_t epoch, uint64_t pos, uint64_t *draws);
/** Begin a segment at (@p epoch, @p pos) with @p base draws per source (NULL: none). */
void dlc__mix_segment(dlc__mix *m, uint64_t epoch, uint64_t pos, const uint64_t *base);
/** The record of draw @p k of source @p s: its pass k / count permuted (in shard windows for a
 *  streamed source: the pass must be one the current epoch draws), or in order. */
uint64_t dlc__mix_record(const dlc__mix *m, uint32_t s, uint64_t k);

/* A streamed source walks its passes in shard windows: pass k is the shard-window order of its
 * shards with ONE stream (so without padding: exactly count positions, each record once) and
 * windows of @p window shards, keyed by (seed, its tag) and k. An epoch draws few passes of a
 * source; their tables are made by dlc__mix_prepare() when the epoch is keyed (the pipeline's
 * threads are stopped then) and only read while it runs. */
#define DLC__MIX_MAX_WIN_PASSES 64u
/** Make source @p s of @p m (initialised, with its world, length and batch set) walk passes in
 *  shard windows over its @p nshards shards whose first records (source-relative) are
 *  @p firsts (nshards + 1, copied). DLC_EINVAL (named by @p name) when an epoch could draw more
 *  than DLC__MIX_MAX_WIN_PASSES of its passes, or -ENOMEM. */
dlc_status dlc__mix_set_windows(dlc__mix *m, uint32_t s, const uint64_t *firsts, uint32_t nshards,
                                uint32_t window, const char *name);
/** Key the streamed sources' tables to the passes epoch @p epoch draws (m->seed set). */
void dlc__mix_prepare(dlc__mix *m, uint64_t epoch);
/** The shard-window tables of streamed source @p s (any pass: for its shard and window sizes), or
 *  NULL when its passes are permuted. */
const dlc__swin *dlc__mix_swin(const dlc__mix *m, uint32_t s);

#endif /* DLCACHE_LOADER_SAMPLER_H */
