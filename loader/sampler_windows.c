/* The shard-window order (DLC_SAMPLER_SHARD_WINDOWS): the order that a store set streamed from
 * object storage is read in, usable on a local set as well, so that a run streams exactly the
 * batches it would read from a copy on disk.
 *
 * Per epoch, a pure function of (seed, epoch, the shards' record counts, window, streams):
 *   1. the shards with records are permuted;
 *   2. in that order each goes to the stream with the fewest records so far (the lowest number on
 *      a tie), so that the streams' lengths differ by less than one shard;
 *   3. each stream's shards are cut into windows of `window` shards, stream v's first window
 *      being shorter by v * window / streams shards, so that the streams do not all cross into
 *      new windows (and need new shards) at the same moment;
 *   4. the records of a window are fully permuted;
 *   5. the epoch's order interleaves the streams: position p is record p / streams of stream
 *      p % streams. A stream shorter than the longest is padded with its last window's records
 *      again (DistributedSampler pads with the epoch's start instead, which here would fetch a
 *      shard that left the cache long ago), so every stream has the same length and the
 *      epoch's length is streams * the longest.
 * The loader deals the epoch round-robin to ranks (position start + rank + j * world), so with a
 * world size that divides `streams` a rank reads the streams v with v % world == rank only, and
 * nodes read disjoint shards: the cluster downloads about one copy of the set per epoch. What is
 * cached, the bandwidth and the thread count take no part in it.
 *
 * Memory: O(shards + streams) arrays made at init and refilled per epoch; positions are mapped
 * in O(log) time without a per-epoch array of records. */
#include "sampler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct swin_window {
    uint32_t lo, hi; /* Positions in order[] of its shards. */
    uint64_t first;  /* Stream-relative number of its first record. */
    uint64_t count;  /* Its records. */
    dlc__perm perm;  /* Over [0, count). */
} swin_window;

struct dlc__swin {
    uint32_t nshards;  /* Of the store, empty ones included. */
    uint32_t nfull;    /* Shards with records. */
    uint32_t window;   /* Shards per window. */
    uint32_t streams;  /* Effective: at most nfull. */
    uint64_t *firsts;  /* nshards + 1: global number of each shard's first record. */
    uint32_t *full;    /* nfull: the shards with records, in shard order. */
    uint32_t *perm_of; /* nfull: scratch, the permuted order. */
    uint32_t *assign;  /* nfull: scratch, the stream of each permuted shard. */
    uint32_t *order;   /* nfull: the shards, stream after stream. */
    uint64_t *cum;     /* nfull: stream-relative number of the first record of order[i]. */
    uint32_t *sbegin;  /* streams + 1: stream v's shards are order[sbegin[v] .. sbegin[v+1]). */
    uint64_t *slen;    /* streams: records of each stream. */
    uint32_t *wbegin;  /* streams + 1: stream v's windows are wins[wbegin[v] .. wbegin[v+1]). */
    swin_window *wins; /* At most nfull + streams. */
    uint64_t longest;  /* The longest stream's records. */
};

void dlc__swin_free(dlc__swin *w)
{
    if (!w)
        return;
    free(w->firsts), free(w->full), free(w->perm_of), free(w->assign), free(w->order);
    free(w->cum), free(w->sbegin), free(w->slen), free(w->wbegin), free(w->wins);
    free(w);
}

dlc_status dlc__swin_init(dlc__swin **out, const uint64_t *firsts, uint32_t nshards,
                          uint32_t window, uint32_t streams)
{
    dlc_status rc = DLC_OK;
    *out = NULL;
    dlc__swin *w = calloc(1, sizeof *w);
    FAIL_IF(!w, -ENOMEM, "loader: out of memory for the shard-window sampler");
    FAIL_IF(nshards == 0, DLC_EINVAL, "loader: the shard-window sampler needs a store");
    FAIL_IF(window == 0 || window > DLC__SWIN_MAX, DLC_EINVAL,
            "loader: config.window_shards = %u: must be 1 to %u", window, DLC__SWIN_MAX);
    FAIL_IF(streams == 0 || streams > DLC__SWIN_MAX, DLC_EINVAL,
            "loader: config.streams = %u: must be 1 to %u", streams, DLC__SWIN_MAX);
    w->nshards = nshards;
    w->window = window;
    w->firsts = malloc(((size_t)nshards + 1) * sizeof *w->firsts);
    w->full = malloc((size_t)nshards * sizeof *w->full);
    FAIL_IF(!w->firsts || !w->full, -ENOMEM, "loader: out of memory for %u shards", nshards);
    memcpy(w->firsts, firsts, ((size_t)nshards + 1) * sizeof *w->firsts);
    for (uint32_t k = 0; k < nshards; k++)
        if (firsts[k + 1] > firsts[k])
            w->full[w->nfull++] = k;
    FAIL_IF(w->nfull == 0, DLC_EINVAL, "loader: the store has no records");
    /* More streams than shards with records would leave streams empty: they are as many as the
     * shards then, which is still a pure function of the run's inputs. */
    w->streams = streams < w->nfull ? streams : w->nfull;
    const size_t n = w->nfull, v = w->streams;
    w->perm_of = malloc(n * sizeof *w->perm_of);
    w->assign = malloc(n * sizeof *w->assign);
    w->order = malloc(n * sizeof *w->order);
    w->cum = malloc(n * sizeof *w->cum);
    w->sbegin = malloc((v + 1) * sizeof *w->sbegin);
    w->slen = malloc(v * sizeof *w->slen);
    w->wbegin = malloc((v + 1) * sizeof *w->wbegin);
    w->wins = malloc((n + v) * sizeof *w->wins);
    FAIL_IF(!w->perm_of || !w->assign || !w->order || !w->cum || !w->sbegin || !w->slen ||
                !w->wbegin || !w->wins,
            -ENOMEM, "loader: out of memory for %u shards", nshards);
    dlc__swin_set_epoch(w, 0, 0);
    *out = w;
    return DLC_OK;
fail:
    dlc__swin_free(w);
    return rc;
}

static uint64_t shard_count(const dlc__swin *w, uint32_t k)
{
    return w->firsts[k + 1] - w->firsts[k];
}

void dlc__swin_set_epoch(dlc__swin *w, uint64_t seed, uint64_t epoch)
{
    const uint32_t n = w->nfull, nv = w->streams;
    /* 1. The shards, permuted. */
    dlc__perm p;
    dlc__perm_init(&p, n, dlc__key4(DLC__KEY_SWIN_SHARDS, seed, epoch, 0));
    for (uint32_t i = 0; i < n; i++)
        w->perm_of[i] = w->full[dlc__perm_apply(&p, i)];
    /* 2. Each to the shortest stream. O(shards x streams) once per epoch. */
    memset(w->slen, 0, nv * sizeof *w->slen);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t best = 0;
        for (uint32_t v = 1; v < nv; v++)
            if (w->slen[v] < w->slen[best])
                best = v;
        w->assign[i] = best;
        w->slen[best] += shard_count(w, w->perm_of[i]);
    }
    /* Stream after stream, each in the permuted order (a stable counting sort). */
    memset(w->sbegin, 0, (nv + 1) * sizeof *w->sbegin);
    for (uint32_t i = 0; i < n; i++)
        w->sbegin[w->assign[i] + 1]++;
    for (uint32_t v = 0; v < nv; v++)
        w->sbegin[v + 1] += w->sbegin[v];
    uint32_t *fill = w->wbegin; /* Scratch until the windows are made. */
    memcpy(fill, w->sbegin, nv * sizeof *fill);
    for (uint32_t i = 0; i < n; i++)
        w->order[fill[w->assign[i]]++] = w->perm_of[i];
    /* 3, 4. Staggered windows, each with its permutation. */
    w->longest = 0;
    uint32_t nw = 0;
    for (uint32_t v = 0; v < nv; v++) {
        uint64_t c = 0;
        for (uint32_t i = w->sbegin[v]; i < w->sbegin[v + 1]; i++) {
            w->cum[i] = c;
            c += shard_count(w, w->order[i]);
        }
        if (w->slen[v] > w->longest)
            w->longest = w->slen[v];
        w->wbegin[v] = nw;
        const uint32_t stagger = (uint32_t)((uint64_t)v * w->window / nv);
        uint32_t lo = w->sbegin[v], size = w->window - stagger;
        while (lo < w->sbegin[v + 1]) {
            const uint32_t left = w->sbegin[v + 1] - lo;
            const uint32_t hi = lo + (size < left ? size : left);
            swin_window *x = &w->wins[nw];
            x->lo = lo, x->hi = hi;
            x->first = w->cum[lo];
            x->count = (hi < w->sbegin[v + 1] ? w->cum[hi] : w->slen[v]) - x->first;
            dlc__perm_init(&x->perm, x->count,
                           dlc__key4(DLC__KEY_SWIN_WINDOW, seed, epoch, (uint64_t)v << 32 | nw));
            nw++;
            lo = hi;
            size = w->window;
        }
    }
    w->wbegin[nv] = nw;
}

uint64_t dlc__swin_len(const dlc__swin *w)
{
    return w->longest * w->streams;
}

uint32_t dlc__swin_streams(const dlc__swin *w)
{
    return w->streams;
}

uint64_t dlc__swin_at(const dlc__swin *w, uint64_t pos)
{
    const uint32_t v = (uint32_t)(pos % w->streams);
    uint64_t j = pos / w->streams;
    const swin_window *a = &w->wins[w->wbegin[v]], *b = &w->wins[w->wbegin[v + 1] - 1];
    if (j >= w->slen[v]) /* 5. Padding: the last window's records again. */
        j = b->first + (j - w->slen[v]) % b->count;
    /* The window holding j: the last one whose first record is at most j. */
    while (a < b) {
        const swin_window *m = a + (b - a + 1) / 2;
        if (m->first <= j)
            a = m;
        else
            b = m - 1;
    }
    const uint64_t k = a->first + dlc__perm_apply(&a->perm, j - a->first);
    /* The shard holding stream record k: the last of the window's whose first is at most k. */
    uint32_t lo = a->lo, hi = a->hi - 1;
    while (lo < hi) {
        const uint32_t m = lo + (hi - lo + 1) / 2;
        if (w->cum[m] <= k)
            lo = m;
        else
            hi = m - 1;
    }
    return w->firsts[w->order[lo]] + (k - w->cum[lo]);
}

uint64_t dlc__swin_min_count(const dlc__swin *w)
{
    uint64_t least = UINT64_MAX;
    for (uint32_t i = 0; i < w->nfull; i++)
        if (shard_count(w, w->full[i]) < least)
            least = shard_count(w, w->full[i]);
    return least;
}

uint32_t dlc__swin_pinned_bound(const dlc__swin *w, uint32_t slots, uint32_t batch,
                                uint32_t per_rank)
{
    /* A stream's samples in flight; the windows a run of them can enter (one more for the
     * staggered first window, shorter than the rest, one for the next batch's); each window
     * pins all its shards. */
    const uint64_t run = ((uint64_t)slots * batch + per_rank - 1) / per_rank + 1;
    const uint64_t window = (uint64_t)w->window * dlc__swin_min_count(w);
    const uint64_t windows = (run + window - 1) / window + 2;
    uint64_t shards = windows * w->window * per_rank;
    if (shards > w->nfull)
        shards = w->nfull;
    return (uint32_t)shards;
}

/* Floor and ceiling of a / b for b > 0 and any a. */
static int64_t div_floor(int64_t a, int64_t b)
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

static int64_t div_ceil(int64_t a, int64_t b)
{
    return -div_floor(-a, b);
}

/* The inverse of @p a modulo @p m (gcd 1, m >= 1). */
static int64_t inverse_mod(int64_t a, int64_t m)
{
    int64_t r0 = m, r1 = a % m, t0 = 0, t1 = 1;
    while (r1) {
        const int64_t q = r0 / r1, r2 = r0 - q * r1, t2 = t0 - q * t1;
        r0 = r1, r1 = r2, t0 = t1, t1 = t2;
    }
    return ((t0 % m) + m) % m;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        const int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

void dlc__swin_plan(const dlc__swin *w, uint64_t len, uint64_t start, uint32_t rank, uint32_t world,
                    uint64_t per_rank, uint64_t *first, uint64_t *last)
{
    for (uint32_t k = 0; k < w->nshards; k++)
        first[k] = UINT64_MAX, last[k] = 0;
    if (!len || !per_rank || !world)
        return;
    /* Counts are bounded far below 2^62 (the index: 2^36 records), so signed 64 bits hold every
     * position and difference below. */
    const int64_t S = w->streams, W = world, g = gcd64(W % S, S), m = S / g;
    const int64_t inv = inverse_mod((W / g) % m, m);
    const int64_t end = (int64_t)per_rank; /* j < end */
    /* Segment s: the positions that wrap s times, at (a + j * W) - s * len. */
    for (int64_t s = 0;; s++) {
        const int64_t a = (int64_t)(start + rank) - s * (int64_t)len;
        const int64_t jlo_seg = div_ceil(-a, W) > 0 ? div_ceil(-a, W) : 0;
        int64_t jhi_seg = div_ceil((int64_t)len - a, W) - 1; /* Last j before the next wrap. */
        if (jlo_seg >= end)
            break;
        if (jhi_seg > end - 1)
            jhi_seg = end - 1;
        for (uint32_t v = 0; v < w->streams; v++) {
            /* j * W = v - a (mod S): solvable when g divides it, then j = j0 (mod m). */
            const int64_t r = (((int64_t)v - a) % S + S) % S;
            if (r % g)
                continue;
            const int64_t j0 = (r / g) % m * inv % m;
            for (uint32_t i = w->wbegin[v]; i < w->wbegin[v + 1]; i++) {
                const swin_window *x = &w->wins[i];
                /* Stream records [qa, qb): the last window also takes the padding. */
                const int64_t qa = (int64_t)x->first;
                const int64_t qb =
                    i + 1 == w->wbegin[v + 1] ? (int64_t)w->longest : qa + (int64_t)x->count;
                int64_t lo = div_ceil(qa * S + v - a, W), hi = div_floor((qb - 1) * S + v - a, W);
                lo = lo > jlo_seg ? lo : jlo_seg;
                hi = hi < jhi_seg ? hi : jhi_seg;
                if (lo > hi)
                    continue;
                const int64_t f = lo + ((j0 - lo) % m + m) % m;
                const int64_t l = hi - ((hi - j0) % m + m) % m;
                if (f > hi)
                    continue;
                for (uint32_t o = x->lo; o < x->hi; o++) {
                    const uint32_t k = w->order[o];
                    if ((uint64_t)f < first[k])
                        first[k] = (uint64_t)f;
                    if ((uint64_t)l > last[k])
                        last[k] = (uint64_t)l;
                }
            }
        }
    }
}

uint32_t dlc__swin_shard_of(const dlc__swin *w, uint64_t record)
{
    uint32_t lo = 0, hi = w->nshards - 1;
    while (lo < hi) {
        const uint32_t m = lo + (hi - lo + 1) / 2;
        if (w->firsts[m] <= record)
            lo = m;
        else
            hi = m - 1;
    }
    /* An empty shard shares its first with the next: the last of equal firsts has the record. */
    return lo;
}
