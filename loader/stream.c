/* Streaming: a store set read from object storage through the bounded shard cache
 * (cache/stream/stream_cache.h, docs/STREAMING.md). The store is the set opened lazily from its
 * index (cache/store/store_set.h); this file holds the loader's side of the cache:
 *   - at each plan (open, set_epoch, restore) it walks this rank's share of the epoch once,
 *     and tells the cache the shards in the order of their first use (the schedule it downloads
 *     ahead along and evicts by) and keeps, per shard, the last batch that reads it;
 *   - the I/O thread, before it looks up a batch's records, pins every shard the batch reads
 *     (waiting for its download when it is not there yet) and attaches it to the store;
 *   - once no batch still reads a shard (every batch that reads it is READY: its outputs are in
 *     its slot), the I/O thread detaches and unpins it, and the cache may evict it.
 * The order is the sampler's: nothing here changes which record a batch holds, only when its
 * shards arrive. The I/O thread owns `held`; the plan's tables are written under mu while the
 * I/O thread is outside a slot (a reset waits for that) and read by it under mu.
 * A mixture (loader/mix.c) streams each of its URL sources so, each with its own cache in the one
 * folder: a source's shards are also files of the mixture's union store, published there when
 * attached (dlc__union_attach()), and the plan walks the mixture's draws. */
#include "internal.h"
#include "store_set.h"
#include "stream_cache.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A mixture's plan (per streamed source): a shard's uses are intervals of batches, one per pass
 * of the source that reads it (merged where they touch), since a shard read at the end of one
 * pass and again in the next must not stay pinned between them. */
typedef struct use_iv {
    uint64_t start, end; /* The first and last batch of the plan that read the shard. */
    uint32_t next;       /* The shard's next interval, or IV_NONE. */
} use_iv;
#define IV_NONE UINT32_MAX

/* One streamed set: its cache, its plan and its pins. */
typedef struct lsrc {
    dlc__scache *cache;
    /* The lazy set the shards are attached to: l->store, or a mixture's streamed source (owned
     * here; its shards are also published as files file0 .. of the union l->store, whose
     * records rec0 .. rec0 + its count are its records). */
    dlc_store *set;
    int mix;
    uint32_t src; /* The mixture's source number. */
    uint32_t file0;
    uint64_t rec0, rec_end;
    uint32_t nshards;
    uint8_t *held;     /* The I/O thread's: attached and pinned. */
    uint32_t *held_at; /* The held shards, nheld of them (the I/O thread's). */
    uint32_t nheld;
    uint64_t *last_use; /* Per shard: 1 + the last batch of the plan that reads it; 0: none. */
    uint32_t *sched;    /* The plan's shards in the order of their first use, */
    uint32_t nsched;    /* nsched of them. */
    uint8_t *seen;      /* Scratch of the plan walk. */
    int limit_refused;  /* The cache refused config.cache_limit at open; the check says why. */
    /* Shards the cache refused as damaged, with on_corrupt = replace: never asked for again;
     * their records fail and are replaced. Written by the I/O thread only, read by it. */
    uint8_t *refused;
    char **refused_msg; /* The refusal of each, malloc'd. */
    uint32_t nrefused;
    /* A mixture's plan: the intervals (niv of ivcap), per shard the first, the last and the
     * first not yet over (the I/O thread's cursor), the pass of the last; iv_lost: the plan
     * could not grow them, and each shard is held to its last use as in a plain plan. */
    use_iv *iv;
    uint32_t niv, ivcap;
    uint32_t *iv_head, *iv_tail, *iv_cur;
    uint64_t *iv_pass;
    int iv_lost;
    uint64_t *hold; /* Per shard: 1 + the last batch it stands in for (pin_standin()). */
    int bound;      /* dlc__stream_bind() has given it its place in the union. */
} lsrc;

/* The loader's streamed sets: one alone, or a mixture's streamed sources (each with its own
 * cache in the one folder, which counts every set's files against the one limit). */
struct dlc__lstream {
    uint32_t n;
    lsrc *src[DLC__MIX_MAX_SOURCES];
};

int dlc__stream_is_url(const char *path)
{
    return strncmp(path, "s3://", 5) == 0 || strncmp(path, "gs://", 5) == 0 ||
           strncmp(path, "http://", 7) == 0 || strncmp(path, "https://", 8) == 0;
}

/* A shard the index says holds no record is never read, so its arrival would never check the
 * index against it: an index re-sealed to say a shard is empty would drop its records quietly.
 * Fetch each such shard once now and check it (dlc__scache_acquire() and dlc__set_attach()
 * compare its count, size, digest and place with the index), refusing the set on a lie. */
static dlc_status check_empty_shards(lsrc *st)
{
    const dlc__set_index *x = dlc__scache_index(st->cache);
    for (uint32_t k = 0; k < x->num_shards; k++) {
        if (x->shards[k].count != 0)
            continue;
        const char *path = NULL;
        dlc_status rc = dlc__scache_acquire(st->cache, k, &path);
        if (rc == DLC_OK) {
            rc = dlc__set_attach(st->set, k, path);
            dlc__set_detach(st->set, k);
            dlc__errsave es;
            dlc__err_save(&es);
            dlc__scache_release(st->cache, k);
            dlc__err_restore(&es, rc);
        }
        /* The cache's refusal of a lie (DLC_ECORRUPT) names the shard, its URL (redacted) and
         * both counts already: it is the message. Any other failure says what was being done. */
        if (rc != DLC_OK && rc != DLC_ECORRUPT) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", dlc_errmsg());
            return dlc__errorf(rc,
                               "checking shard %u (%s), which the set's index says is empty: %s", k,
                               x->shards[k].name, msg);
        }
        if (rc != DLC_OK)
            return rc;
    }
    return DLC_OK;
}

/* The cache of @p url and its set opened lazily from the index, into *set. */
static dlc_status open_cache(dlc_loader *l, const char *url, dlc_store **set)
{
    dlc_status rc = DLC_OK;
    const dlc_loader_config *c = &l->cfg;
    FAIL_IF(!c->cache_dir || !*c->cache_dir, DLC_EINVAL,
            "%s: streaming from object storage needs config.cache_dir, the local folder that "
            "holds the shards while they are read",
            url);
    FAIL_IF(c->io == DLC_IO_DIRECT, DLC_EINVAL,
            "%s: a streamed set is read through its shards' maps: config.io must be auto or mmap",
            url);
    if (!l->stream)
        FAIL_IF(!(l->stream = calloc(1, sizeof *l->stream)), -ENOMEM, "%s: out of memory", url);
    FAIL_IF(l->stream->n == DLC__MIX_MAX_SOURCES, DLC_EINVAL, "%s: too many streamed sets", url);
    lsrc *st = calloc(1, sizeof *st);
    FAIL_IF(!st, -ENOMEM, "%s: out of memory", url);
    l->stream->src[l->stream->n++] = st;
    dlc__scache_config sc = {
        .dir = c->cache_dir,
        .limit = c->cache_limit,
        .url = url,
        .net = c->net,
        .downloads = c->downloads,
    };
    rc = dlc__scache_open(&sc, &st->cache);
    if (rc == DLC_EINVAL && sc.limit) {
        /* Too small even for the index and one shard: open it uncapped only to read the index
         * (nothing is scheduled before the check), so that the check names the bytes the
         * windows need, the number a user can act on. */
        dlc__errsave es;
        dlc__err_save(&es);
        sc.limit = 0;
        if (dlc__scache_open(&sc, &st->cache) != DLC_OK)
            CHECK(dlc__err_restore(&es, rc));
        st->limit_refused = 1;
        rc = DLC_OK;
    }
    CHECK(rc);
    CHECK(dlc__trace_downloads(l, st->cache)); /* Before the first download. */
    CHECK(dlc__set_open_lazy(dlc__scache_set_dir(st->cache), set));
    st->set = *set;
fail:
    return rc;
}

/* The plan's tables, for the set's shards; then the check of its empty shards. */
static dlc_status alloc_tables(lsrc *st, const char *url)
{
    dlc_status rc = DLC_OK;
    const uint32_t n = dlc_store_num_files(st->set);
    st->nshards = n;
    st->held = calloc(n, 1);
    st->seen = calloc(n, 1);
    st->held_at = calloc(n, sizeof *st->held_at);
    st->last_use = calloc(n, sizeof *st->last_use);
    st->sched = calloc(n, sizeof *st->sched);
    st->refused = calloc(n ? n : 1, 1);
    st->refused_msg = calloc(n ? n : 1, sizeof *st->refused_msg);
    st->hold = calloc(n ? n : 1, sizeof *st->hold);
    FAIL_IF(!st->held || !st->seen || !st->held_at || !st->last_use || !st->sched || !st->refused ||
                !st->refused_msg || !st->hold,
            -ENOMEM, "%s: out of memory for %u shards", url, n);
    if (st->mix) {
        st->iv_head = malloc((n ? n : 1) * sizeof *st->iv_head);
        st->iv_tail = malloc((n ? n : 1) * sizeof *st->iv_tail);
        st->iv_cur = malloc((n ? n : 1) * sizeof *st->iv_cur);
        st->iv_pass = malloc((n ? n : 1) * sizeof *st->iv_pass);
        FAIL_IF(!st->iv_head || !st->iv_tail || !st->iv_cur || !st->iv_pass, -ENOMEM,
                "%s: out of memory for %u shards", url, n);
        for (uint32_t k = 0; k < n; k++)
            st->iv_head[k] = st->iv_tail[k] = st->iv_cur[k] = IV_NONE;
    }
    CHECK(check_empty_shards(st));
fail:
    return rc;
}

dlc_status dlc__stream_open(dlc_loader *l, const char *url)
{
    dlc_status rc = DLC_OK;
    /* The cache folder is named first, as it always was; open_cache() checks it again. */
    FAIL_IF(!l->cfg.cache_dir || !*l->cfg.cache_dir, DLC_EINVAL,
            "%s: streaming from object storage needs config.cache_dir, the local folder that "
            "holds the shards while they are read",
            url);
    FAIL_IF(l->cfg.sampler != DLC_SAMPLER_SHARD_WINDOWS, DLC_EINVAL,
            "%s: a streamed set is read in shard windows: config.sampler must be "
            "DLC_SAMPLER_SHARD_WINDOWS (another order would need every shard at once)",
            url);
    CHECK(open_cache(l, url, &l->store));
    lsrc *st = l->stream->src[0];
    st->rec_end = dlc_store_get_info(l->store)->count; /* Every record is the set's. */
    st->bound = 1;
    CHECK(alloc_tables(st, url));
fail:
    return rc;
}

dlc_status dlc__stream_open_source(dlc_loader *l, const char *url, dlc_store **set)
{
    *set = NULL;
    const uint32_t before = l->stream ? l->stream->n : 0;
    const dlc_status rc = open_cache(l, url, set);
    if (l->stream && l->stream->n > before)
        l->stream->src[l->stream->n - 1]->mix = 1; /* Its set is the stream's to close. */
    return rc;
}

dlc_status dlc__stream_bind(dlc_loader *l, uint32_t src, uint32_t file0, uint64_t rec0,
                            const char *url)
{
    /* The streamed sources are bound in the order they were opened. */
    lsrc *st = NULL;
    for (uint32_t i = 0; i < l->stream->n && !st; i++)
        if (!l->stream->src[i]->bound)
            st = l->stream->src[i];
    if (!st)
        return dlc__errorf(DLC_EINVAL, "%s: no streamed source to bind", url);
    st->bound = 1;
    st->src = src;
    st->file0 = file0;
    st->rec0 = rec0;
    st->rec_end = rec0 + dlc_store_get_info(st->set)->count;
    return alloc_tables(st, url);
}

/* Attach shard @p k to the set, and in a mixture publish it as the union's file. */
static dlc_status attach_shard(dlc_loader *l, lsrc *st, uint32_t k, const char *path)
{
    const dlc_status rc = dlc__set_attach(st->set, k, path);
    if (rc == DLC_OK && st->mix)
        dlc__union_attach(l->store, st->file0 + k, st->set, k);
    return rc;
}

static void detach_shard(dlc_loader *l, lsrc *st, uint32_t k)
{
    if (st->mix && l->store)
        dlc__union_detach(l->store, st->file0 + k);
    dlc__set_detach(st->set, k);
}

/* What a node's cache must hold for config @p c with @p slots batches in flight: the shards
 * each rank's batches in flight can pin (a rank reads ceil(streams / world) streams, and its
 * batches pin every shard of the windows they touch, dlc__swin_pinned_bound()) and its downloads
 * ahead, for each of the cache_ranks processes sharing the folder. The one count behind the
 * loader's check at open and dlc_loader_plan(). */
typedef struct cache_need {
    uint32_t per_rank; /* Streams a rank reads. */
    uint32_t ranks;    /* Processes sharing the folder. */
    uint32_t pinned;   /* Shards pinned at once, all of them. */
    uint32_t ahead;    /* Downloads in flight, all of them. */
} cache_need;

static cache_need need_of(const dlc__swin *w, const dlc_loader_config *c, uint32_t slots)
{
    cache_need n;
    n.per_rank = (dlc__swin_streams(w) + c->world_size - 1) / c->world_size;
    n.ranks = c->cache_ranks ? c->cache_ranks : 1;
    n.pinned = dlc__swin_pinned_bound(w, slots, c->batch_size, n.per_rank) * n.ranks;
    n.ahead = (c->downloads ? c->downloads : 2) * n.ranks;
    return n;
}

/* A mixture's streamed source walks passes of one stream; a rank's slots x batch samples in
 * flight, were they all of this source, span world times as many positions of its pass (each row
 * of world positions gives one to each rank), and one window more where they cross into the next
 * pass. */
static cache_need need_of_mix(const dlc_loader *l, const lsrc *st, const dlc_loader_config *c)
{
    const dlc__swin *w = dlc__mix_swin(l->sampler.mix, st->src);
    cache_need n;
    n.per_rank = 1;
    n.ranks = c->cache_ranks ? c->cache_ranks : 1;
    uint64_t pinned =
        (uint64_t)dlc__swin_pinned_bound(w, l->nslots, c->batch_size * c->world_size, 1) +
        c->window_shards;
    if (pinned > st->nshards)
        pinned = st->nshards;
    n.pinned = (uint32_t)pinned * n.ranks;
    n.ahead = (c->downloads ? c->downloads : 2) * n.ranks;
    return n;
}

/* The bytes a mixture's streamed sources need together under @p c (they share the folder and its
 * limit, each cache counting every set's files), said per source into @p what. */
static uint64_t mix_need(const dlc_loader *l, const dlc_loader_config *c, char *what, size_t cap)
{
    uint64_t need = 0;
    size_t at = 0;
    if (cap)
        what[0] = 0;
    for (uint32_t i = 0; i < l->stream->n; i++) {
        const lsrc *st = l->stream->src[i];
        const cache_need n = need_of_mix(l, st, c);
        const uint64_t one = dlc__scache_needed(dlc__scache_index(st->cache), n.pinned, n.ahead);
        need += one;
        if (at < cap)
            at += (size_t)snprintf(what + at, cap - at,
                                   "%sstreamed source %u (%s): %llu bytes for %u shards pinned",
                                   i ? "; " : "", st->src, l->mixl->paths[st->src],
                                   (unsigned long long)one, n.pinned / n.ranks);
    }
    return need;
}

uint64_t dlc__stream_source_need(const dlc_loader *l, uint32_t src)
{
    for (uint32_t i = 0; l->stream && i < l->stream->n; i++) {
        const lsrc *st = l->stream->src[i];
        if (!st->mix || st->src != src || !l->sampler.mix)
            continue;
        const cache_need n = need_of_mix(l, st, &l->cfg);
        return dlc__scache_needed(dlc__scache_index(st->cache), n.pinned, n.ahead);
    }
    return 0;
}

dlc_status dlc__stream_check(const dlc_loader *l)
{
    const dlc_loader_config *c = &l->cfg;
    if (!l->stream || !c->cache_limit)
        return DLC_OK;
    const lsrc *st = l->stream->src[0];
    if (st->mix) {
        char what[2048];
        const uint64_t need = mix_need(l, c, what, sizeof what);
        int refused = 0;
        for (uint32_t i = 0; i < l->stream->n; i++)
            refused |= l->stream->src[i]->limit_refused;
        if (c->cache_limit < need || refused)
            return dlc__errorf(DLC_EINVAL,
                               "%s: config.cache_limit = %llu bytes is too small: %llu bytes are "
                               "needed (%s), for the shards the batches in flight can pin "
                               "(windows of %u shards, %u batches of %u on each of %u ranks), for "
                               "%u processes sharing %s, and %u downloads ahead per source (the "
                               "largest shards counted); raise cache_limit, or lower "
                               "window_shards, prefetch or batch_size",
                               l->path, (unsigned long long)c->cache_limit,
                               (unsigned long long)need, what, c->window_shards, l->nslots,
                               c->batch_size, c->world_size, c->cache_ranks ? c->cache_ranks : 1,
                               c->cache_dir, c->downloads ? c->downloads : 2);
        return DLC_OK;
    }
    const cache_need n = need_of(l->sampler.swin, c, l->nslots);
    const uint64_t need = dlc__scache_needed(dlc__scache_index(st->cache), n.pinned, n.ahead);
    if (c->cache_limit < need || st->limit_refused)
        return dlc__errorf(DLC_EINVAL,
                           "%s: config.cache_limit = %llu bytes is too small: %llu bytes are "
                           "needed for the %u shards the batches in flight can pin (windows of "
                           "%u shards on each of the %u streams this rank reads, %u batches of "
                           "%u), for %u processes sharing %s, and %u downloads ahead (the "
                           "largest shards counted); raise cache_limit, or lower window_shards, "
                           "prefetch or batch_size",
                           l->path, (unsigned long long)c->cache_limit, (unsigned long long)need,
                           n.pinned / n.ranks, c->window_shards, n.per_rank, l->nslots,
                           c->batch_size, n.ranks, c->cache_dir, n.ahead / n.ranks);
    return DLC_OK;
}

/* A plan walks every record of the share once (up to PLAN_WALK_MAX of a plain loader's, beyond
 * which its windows plan it; a mixture's always): an index's counts are bounded (by the shards'
 * sizes, and what the cache folder can hold: stream_cache.c), but a large set still takes
 * seconds. Every 2^16 records the walk asks the network options' progress callback, about ten
 * times a second, whether to stop (Python answers stop after Ctrl-C): DLC_ECANCELED. */
typedef struct plan_poll {
    const dlc_warm_options *net;
    double t0, last;
} plan_poll;

static dlc_status plan_poll_at(plan_poll *pp, uint64_t j, const char *path)
{
    if ((j & 0xffffu) != 0 || !pp->net || !pp->net->progress)
        return DLC_OK;
    const double now = dlc__now_s();
    if (now - pp->last < 0.1)
        return DLC_OK;
    pp->last = now;
    dlc_warm_progress p;
    memset(&p, 0, sizeof p);
    p.seconds = now - pp->t0;
    if (pp->net->progress(pp->net->progress_user, &p) == 0)
        return DLC_OK;
    return dlc__errorf(DLC_ECANCELED,
                       "%s: planning the epoch (%" PRIu64 " records walked): canceled", path, j);
}

/* A mixture's plan: a use of shard @p k by batch @p b in pass @p pass of the source. */
static void mix_use(lsrc *st, uint32_t k, uint64_t b, uint64_t pass)
{
    const uint32_t t = st->iv_tail[k];
    if (st->iv_lost)
        return;
    if (t != IV_NONE && (st->iv_pass[k] == pass || b <= st->iv[t].end)) {
        st->iv[t].end = b; /* The same pass, or touching the last interval. */
        st->iv_pass[k] = pass;
        return;
    }
    if (st->niv == st->ivcap) {
        const uint32_t cap = st->ivcap ? st->ivcap * 2 : 1024;
        use_iv *iv = cap > st->ivcap ? realloc(st->iv, (size_t)cap * sizeof *iv) : NULL;
        if (!iv) {
            st->iv_lost = 1; /* Held to the last use instead: more pinned, still correct. */
            return;
        }
        st->iv = iv, st->ivcap = cap;
    }
    const uint32_t i = st->niv++;
    st->iv[i] = (use_iv){.start = b, .end = b, .next = IV_NONE};
    if (t == IV_NONE)
        st->iv_head[k] = st->iv_cur[k] = i;
    else
        st->iv[t].next = i;
    st->iv_tail[k] = i;
    st->iv_pass[k] = pass;
}

/* Whether held shard @p k is still read by a batch from @p oldest on that the I/O thread has
 * taken (before fill_next): the first of its intervals not over began before fill_next. A use
 * that begins later pins it again then. */
static int mix_keep(const dlc_loader *l, lsrc *st, uint32_t k, uint64_t oldest)
{
    if (st->hold[k] > oldest)
        return 1;
    if (st->iv_lost)
        return st->last_use[k] > oldest;
    uint32_t c = st->iv_cur[k];
    while (c != IV_NONE && st->iv[c].end < oldest)
        c = st->iv[c].next;
    st->iv_cur[k] = c;
    return c != IV_NONE && st->iv[c].start < l->fill_next;
}

static void plan_reset(lsrc *st)
{
    memset(st->last_use, 0, st->nshards * sizeof *st->last_use);
    memset(st->hold, 0, st->nshards * sizeof *st->hold);
    memset(st->seen, 0, st->nshards);
    st->nsched = 0;
    if (st->mix) {
        st->niv = 0;
        st->iv_lost = 0;
        for (uint32_t k = 0; k < st->nshards; k++)
            st->iv_head[k] = st->iv_tail[k] = st->iv_cur[k] = IV_NONE;
    }
}

/* Shard @p k is read by batch @p b of the plan. */
static void plan_use(lsrc *st, uint32_t k, uint64_t b)
{
    st->last_use[k] = b + 1;
    if (!st->seen[k]) {
        st->seen[k] = 1;
        st->sched[st->nsched++] = k;
    }
}

/* Beyond this many samples in a rank's share, the shard-window order is planned from its windows
 * (dlc__swin_plan()), in time that follows the shards, not the records an index claims (issue
 * 32: 16 shards claiming 2^28 records each took minutes to walk); below it the walk is exact and
 * takes a fraction of a second. */
#define PLAN_WALK_MAX (1u << 22)
/* dlc_loader_plan()'s quality figures of a share beyond it: from rank 0's first this many
 * samples (milliseconds), an estimate of the whole's. */
#define PLAN_QUALITY_WALK (1u << 16)

typedef struct plan_first {
    uint64_t first; /* The rank's first sample in the shard's window. */
    uint32_t k;
} plan_first;

static int cmp_first(const void *a, const void *b)
{
    const plan_first *x = a, *y = b;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

/* The plan of a plain shard-window loader from its windows: DLC_OK, or -ENOMEM (the caller then
 * walks). */
static dlc_status plan_by_windows(dlc_loader *l, lsrc *st)
{
    const dlc__shard *sh = &l->shard;
    const uint32_t n = st->nshards;
    uint64_t *first = malloc((size_t)n * sizeof *first), *last = malloc((size_t)n * sizeof *last);
    plan_first *by = malloc((size_t)n * sizeof *by);
    if (!first || !last || !by) {
        free(first), free(last), free(by);
        return -ENOMEM;
    }
    dlc__swin_plan(l->sampler.swin, l->sampler.len, sh->start, sh->rank, sh->world, sh->per_rank,
                   first, last);
    uint32_t used = 0;
    for (uint32_t k = 0; k < n; k++)
        if (first[k] != UINT64_MAX)
            by[used++] = (plan_first){first[k], k};
    qsort(by, used, sizeof *by, cmp_first);
    for (uint32_t i = 0; i < used; i++) {
        const uint32_t k = by[i].k;
        st->seen[k] = 1;
        st->sched[st->nsched++] = k;
        st->last_use[k] = last[k] / sh->batch + 1;
    }
    free(first), free(last), free(by);
    return DLC_OK;
}

dlc_status dlc__stream_plan(dlc_loader *l, const dlc_warm_options *net)
{
    if (!l->stream)
        return DLC_OK;
    const dlc__shard *sh = &l->shard;
    const uint32_t nsrc = l->stream->n;
    for (uint32_t i = 0; i < nsrc; i++)
        plan_reset(l->stream->src[i]);
    plan_poll pp = {.net = net, .t0 = dlc__now_s()};
    pp.last = pp.t0;
    lsrc *first = l->stream->src[0];
    const dlc__mix *mx = first->mix ? l->sampler.mix : NULL;
    /* A mixture's sources by their number: the streamed ones, else NULL. */
    lsrc *by_src[DLC__MIX_MAX_SOURCES] = {0};
    for (uint32_t i = 0; mx && i < nsrc; i++)
        by_src[l->stream->src[i]->src] = l->stream->src[i];
    const int walk = mx || !l->sampler.swin || sh->per_rank <= PLAN_WALK_MAX ||
                     plan_by_windows(l, first) != DLC_OK;
    for (uint64_t j = 0; walk && j < sh->per_rank; j++) {
        const dlc_status rc = plan_poll_at(&pp, j, l->path);
        if (rc != DLC_OK)
            return rc;
        if (mx) {
            /* Only the streamed sources' draws; a draw's pass keys the intervals. */
            uint32_t src;
            const uint64_t d = dlc__mix_draw(mx, l->sampler.epoch, dlc__shard_pos(sh, j), &src);
            lsrc *st = by_src[src];
            if (!st)
                continue;
            const uint32_t k = dlc__set_shard_of(st->set, dlc__mix_record(mx, src, d));
            mix_use(st, k, j / sh->batch, d / (st->rec_end - st->rec0));
            plan_use(st, k, j / sh->batch);
        } else {
            const uint64_t rec = dlc__sampler_at(&l->sampler, dlc__shard_pos(sh, j));
            plan_use(first, dlc__swin_shard_of(l->sampler.swin, rec), j / sh->batch);
        }
    }
    /* The shards still held from before stay pinned until the I/O thread finds them unused;
     * the cache downloads along the new plan meanwhile. */
    for (uint32_t i = 0; i < nsrc; i++) {
        lsrc *st = l->stream->src[i];
        if (dlc__scache_schedule(st->cache, st->sched, st->nsched) != DLC_OK)
            dlc__logf(l->cfg.log, l->cfg.log_user, DLC_LOG_WARN, "%s: streaming schedule: %s",
                      l->path, dlc_errmsg());
    }
    return DLC_OK;
}

/* The cache found no room for a shard a batch needs (its message is dlc_errmsg()): the folder is
 * shared by more processes than config.cache_ranks says. Say what one more needs. */
static dlc_status shared_too_small(const dlc_loader *l)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dlc_errmsg());
    const dlc_loader_config *c = &l->cfg;
    dlc_loader_config more = *c;
    more.cache_ranks = (c->cache_ranks ? c->cache_ranks : 1) + 1;
    const lsrc *first = l->stream->src[0];
    uint64_t need;
    if (first->mix) {
        need = mix_need(l, &more, NULL, 0);
    } else {
        const cache_need n = need_of(l->sampler.swin, &more, l->nslots);
        need = dlc__scache_needed(dlc__scache_index(first->cache), n.pinned, n.ahead);
    }
    return dlc__errorf(DLC_ESTATE,
                       "%s; config.cache_ranks = %u, config.cache_limit = %llu bytes: set "
                       "cache_ranks to the number of processes (ranks and jobs) sharing %s "
                       "(LOCAL_WORLD_SIZE for the ranks of one job), and cache_limit to what the "
                       "loader then asks for (%llu bytes for cache_ranks = %u)",
                       msg, c->cache_ranks ? c->cache_ranks : 1, (unsigned long long)c->cache_limit,
                       c->cache_dir, (unsigned long long)need, more.cache_ranks);
}

/* Pin and attach shard @p k of @p st (held: nothing to do). *refused is set when the cache
 * refused it as damaged with on_corrupt = replace: it is marked refused for the loader's life. */
static dlc_status pin_shard(dlc_loader *l, lsrc *st, uint32_t k, int *refused)
{
    *refused = 0;
    if (st->refused[k]) {
        *refused = 1;
        return DLC_OK;
    }
    if (st->held[k])
        return DLC_OK;
    const char *path = NULL;
    dlc_status rc = dlc__scache_acquire(st->cache, k, &path);
    if (rc == DLC_ECORRUPT && l->cfg.on_corrupt == DLC_CORRUPT_REPLACE) {
        /* The bucket's shard is damaged: its records are replaced, the other shards' read,
         * and it is not fetched again (the cache does not fetch it ahead either). */
        st->refused_msg[k] = strdup(dlc_errmsg());
        st->refused[k] = 1;
        st->nrefused++;
        *refused = 1;
        dlc__logf(l->cfg.log, l->cfg.log_user, DLC_LOG_WARN,
                  "%s; its records are replaced by others (on_corrupt = replace) and it is not "
                  "fetched again by this loader",
                  st->refused_msg[k] ? st->refused_msg[k] : "a shard was refused");
        return DLC_OK;
    }
    if (rc == -EDEADLK)
        return shared_too_small(l);
    if (rc != DLC_OK)
        return rc;
    rc = attach_shard(l, st, k, path);
    if (rc != DLC_OK) {
        dlc__errsave es;
        dlc__err_save(&es);
        dlc__scache_release(st->cache, k);
        return dlc__err_restore(&es, rc);
    }
    st->held[k] = 1;
    st->held_at[st->nheld++] = k;
    return DLC_OK;
}

/* Every shard of batch @p s was refused: its records have no healthy one in the batch to stand
 * in for them. The stand-ins come from one healthy shard of @p st, pinned until the batch is
 * done: the first in the plan's order of first use that the plan still reads at or after this
 * batch (it is downloaded ahead anyway), else the first of the plan. A pure function of the plan
 * (seed, epoch, rank) and of which shards of the bucket are damaged, so every loader picks the
 * same; none when the plan's shards are all refused (the replacements then fail, naming the
 * record). */
static dlc_status pin_standin(dlc_loader *l, lsrc *st, dlc__slot *s)
{
    const dlc__set_index *x = dlc__scache_index(st->cache);
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < st->nsched; i++) {
            const uint32_t k = st->sched[i];
            if (st->refused[k] || x->shards[k].count == 0 ||
                (pass == 0 && st->last_use[k] <= s->batch))
                continue;
            int refused = 0;
            const dlc_status rc = pin_shard(l, st, k, &refused);
            if (rc != DLC_OK)
                return rc;
            if (refused)
                continue;
            pthread_mutex_lock(&l->mu);
            if (st->last_use[k] < s->batch + 1)
                st->last_use[k] = s->batch + 1; /* Held until this batch is done. */
            pthread_mutex_unlock(&l->mu);
            if (st->hold[k] < s->batch + 1)
                st->hold[k] = s->batch + 1;
            s->standin_first = st->rec0 + x->shards[k].first;
            s->standin_count = x->shards[k].count;
            return DLC_OK;
        }
    }
    return DLC_OK;
}

/* The streamed set whose shards include the loader's file @p file, with its shard in *k. */
static lsrc *src_of_file(const dlc_loader *l, uint32_t file, uint32_t *k)
{
    for (uint32_t i = 0; i < l->stream->n; i++) {
        lsrc *st = l->stream->src[i];
        if (file >= st->file0 && file - st->file0 < st->nshards) {
            *k = file - st->file0;
            return st;
        }
    }
    return NULL;
}

dlc_status dlc__stream_pin(dlc_loader *l, dlc__slot *s, int *refused)
{
    *refused = 0;
    s->standin_count = 0;
    uint32_t healthy = 0;
    lsrc *bad = NULL;
    for (uint32_t i = 0; i < s->nfiles; i++) {
        /* In a mixture the batch's files of local sources are always there. */
        uint32_t k;
        lsrc *st = src_of_file(l, s->files[i], &k);
        if (!st)
            continue;
        int r = 0;
        const dlc_status rc = pin_shard(l, st, k, &r);
        if (rc != DLC_OK)
            return rc;
        if (r && !bad)
            bad = st;
        *refused |= r;
        healthy += !r;
    }
    return *refused && healthy == 0 ? pin_standin(l, bad, s) : DLC_OK;
}

dlc_status dlc__stream_record_ok(const dlc_loader *l, uint64_t index)
{
    if (!l->stream)
        return DLC_OK;
    for (uint32_t i = 0; i < l->stream->n; i++) {
        const lsrc *st = l->stream->src[i];
        if (index < st->rec0 || index >= st->rec_end)
            continue;
        const uint32_t k = dlc_store_record_file(l->store, index) - st->file0;
        if (k >= st->nshards || !st->refused[k])
            return DLC_OK;
        return dlc__errorf(DLC_ECORRUPT, "record %llu: %s", (unsigned long long)index,
                           st->refused_msg[k] ? st->refused_msg[k] : "its shard was refused");
    }
    return DLC_OK;
}

uint32_t dlc__stream_refused(const dlc_loader *l)
{
    uint32_t n = 0;
    for (uint32_t i = 0; l->stream && i < l->stream->n; i++)
        n += l->stream->src[i]->nrefused;
    return n;
}

/* The oldest batch of the plan that still reads records: one the I/O thread or the workers are
 * inside, else the next the I/O thread takes. A batch once READY reads nothing more: its outputs
 * are in its slot, so the shards it came from may go even while the consumer holds it. */
static uint64_t oldest_reading(const dlc_loader *l)
{
    uint64_t oldest = l->fill_next;
    for (uint32_t i = 0; i < l->nslots; i++) {
        const dlc__slot *s = &l->slots[i];
        if ((s->state == DLC__SLOT_IO || s->state == DLC__SLOT_FILL || s->active) &&
            s->batch < oldest)
            oldest = s->batch;
    }
    return oldest;
}

void dlc__stream_unpin_locked(dlc_loader *l)
{
    if (!l->stream)
        return;
    int any = 0;
    for (uint32_t i = 0; i < l->stream->n; i++)
        any |= l->stream->src[i]->nheld != 0;
    if (!any)
        return;
    const uint64_t oldest = oldest_reading(l);
    for (uint32_t j = 0; j < l->stream->n; j++) {
        lsrc *st = l->stream->src[j];
        for (uint32_t i = 0; i < st->nheld;) {
            const uint32_t k = st->held_at[i];
            if (st->mix ? mix_keep(l, st, k, oldest) : st->last_use[k] > oldest) {
                i++; /* A batch in use or to come reads it. */
                continue;
            }
            detach_shard(l, st, k);
            dlc__scache_release(st->cache, k);
            st->held[k] = 0;
            st->held_at[i] = st->held_at[--st->nheld];
        }
    }
}

void dlc__stream_stats(const dlc_loader *l, dlc_loader_stream_stats *out)
{
    /* A mixture's streamed sources together; each cache counts the whole folder, so the peak is
     * the largest any saw. */
    for (uint32_t i = 0; l->stream && i < l->stream->n; i++) {
        dlc__scache_stats s;
        dlc__scache_stats_get(l->stream->src[i]->cache, &s);
        out->stall_seconds += s.stall_s;
        out->hits += s.hits;
        out->misses += s.misses;
        out->bytes_fetched += s.bytes_fetched;
        out->requests += s.requests;
        if (s.peak_bytes > out->peak_cache_bytes)
            out->peak_cache_bytes = s.peak_bytes;
        out->evictions += s.evictions;
        out->downloads += s.downloads;
    }
}

void dlc__stream_stop(dlc_loader *l)
{
    for (uint32_t i = 0; l->stream && i < l->stream->n; i++)
        dlc__scache_stop(l->stream->src[i]->cache);
}

static void src_free(lsrc *st)
{
    free(st->held), free(st->held_at), free(st->last_use), free(st->sched), free(st->seen);
    free(st->hold), free(st->iv), free(st->iv_head), free(st->iv_tail), free(st->iv_cur);
    free(st->iv_pass);
    for (uint32_t k = 0; st->refused_msg && k < st->nshards; k++)
        free(st->refused_msg[k]);
    free(st->refused), free(st->refused_msg);
    free(st);
}

void dlc__stream_close(dlc_loader *l)
{
    struct dlc__lstream *all = l->stream;
    if (!all)
        return;
    for (uint32_t j = 0; j < all->n; j++) {
        lsrc *st = all->src[j];
        for (uint32_t i = 0; i < st->nheld; i++) {
            if (st->set)
                detach_shard(l, st, st->held_at[i]);
            dlc__scache_release(st->cache, st->held_at[i]);
        }
    }
    /* The store's shards are detached: the caches may go first. In a mixture the union goes
     * before the streamed sets whose shards it published. */
    dlc_store_close(l->store);
    l->store = NULL;
    for (uint32_t j = 0; j < all->n; j++) {
        lsrc *st = all->src[j];
        if (st->mix)
            dlc_store_close(st->set);
        st->set = NULL;
        dlc__scache_close(st->cache);
        src_free(st);
    }
    free(all);
    l->stream = NULL;
}

/* ---- dlc_loader_open_store(), dlc_loader_plan() -----------------------------------------------
 */

/* The store at @p path for planning: a local store or set, or a streamed set opened from its
 * index (fetched into c->cache_dir; no shard is downloaded). */
static dlc_status plan_open(const char *path, const dlc_loader_config *c, dlc_store **out)
{
    if (!dlc__stream_is_url(path))
        return dlc_store_open(path, 0, out);
    if (!c->cache_dir || !*c->cache_dir)
        return dlc__errorf(DLC_EINVAL,
                           "%s: planning a streamed set needs config.cache_dir, where "
                           "its index is fetched",
                           path);
    /* Planning fetches the index and writes nothing: the cache folder is neither made nor
     * touched (no index kept, no stale shard or dead download removed). */
    const dlc__scache_config sc = {.dir = c->cache_dir, .url = path, .net = c->net, .plan_only = 1};
    dlc__scache *cache = NULL;
    dlc_status rc = dlc__scache_open(&sc, &cache);
    if (rc == DLC_OK) {
        size_t len = 0;
        const uint8_t *bytes = dlc__scache_index_bytes(cache, &len);
        char shown[4096];
        dlc_warm_redact_url(path, shown, sizeof shown);
        rc = dlc__set_open_lazy_bytes(shown, bytes, len, out);
    }
    dlc__errsave es;
    dlc__err_save(&es);
    dlc__scache_close(cache); /* The lazy store keeps nothing of it. */
    return dlc__err_restore(&es, rc);
}

/* The shards' bytes, and the bytes the cache needs for @p pinned pinned and @p ahead downloading
 * shards, from the set's index (a single store: one shard, the file). */
static dlc_status plan_bytes(const dlc_store *s, uint64_t *bytes, uint32_t pinned, uint32_t ahead,
                             uint64_t *need)
{
    const uint32_t n = dlc_store_num_files(s);
    if (!s->set_index) {
        bytes[0] = dlc_store_file_bytes(s, 0);
        *need = (bytes[0] + 4095) / 4096 * 4096;
        return DLC_OK;
    }
    dlc__set_index x = {0};
    const dlc_status rc = dlc__set_index_decode(s->set_index, s->set_index_len, s->path, &x);
    if (rc == DLC_OK) {
        for (uint32_t k = 0; k < n; k++)
            bytes[k] = x.shards[k].file_bytes;
        *need = dlc__scache_needed(&x, pinned, ahead);
    }
    dlc__set_index_free(&x);
    return rc;
}

dlc_status dlc_loader_open_store(const char *path, const dlc_loader_config *config, dlc_store **out)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return dlc__errorf(DLC_EINVAL, "dlc_loader_open_store: NULL argument");
    dlc_loader_config c;
    dlc_loader_config_init(&c);
    if (config) {
        const dlc_status rc =
            dlc__options_take(&c, sizeof c, config, "dlc_loader_config", "dlc_loader_config_init");
        if (rc != DLC_OK)
            return rc;
    }
    return plan_open(path, &c, out);
}

static int cmp_u32(const void *a, const void *b)
{
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

dlc_status dlc_loader_plan(const char *path, const dlc_loader_config *config,
                           dlc_loader_plan_info *out)
{
    dlc_status rc = DLC_OK;
    dlc_store *s = NULL;
    uint64_t *firsts = NULL, *bytes = NULL;
    uint8_t *seen = NULL;
    uint32_t *ks = NULL;
    dlc__sampler smp;
    memset(&smp, 0, sizeof smp);
    FAIL_IF(!path || !out, DLC_EINVAL, "dlc_loader_plan: NULL argument");
    /* The size is checked before the plan is made, so a bad one costs no download; the copy-out at
     * the end checks it again, through the same helper. */
    dlc_loader_plan_info none;
    memset(&none, 0, sizeof none);
    CHECK(dlc__result_give(out, &none, sizeof none, "dlc_loader_plan_info"));
    dlc_loader_config c;
    dlc_loader_config_init(&c);
    if (config) /* NULL: the defaults, as for dlc_loader_open(). */
        CHECK(
            dlc__options_take(&c, sizeof c, config, "dlc_loader_config", "dlc_loader_config_init"));
    dlc_warm_options net; /* As dlc_loader_open() takes it. */
    CHECK(dlc__scache_net_take(&c.net, &net, "dlc_loader_config.net"));
    FAIL_IF(c.world_size == 0 || c.batch_size == 0 || c.rank >= c.world_size, DLC_EINVAL,
            "%s: config: batch_size %u, rank %u of world_size %u", path, c.batch_size, c.rank,
            c.world_size);
    CHECK(plan_open(path, &c, &s));
    const uint32_t n = dlc_store_num_files(s);
    CHECK(dlc__shard_firsts(s, n, &firsts));
    const uint32_t streams = c.streams ? c.streams : c.world_size;
    CHECK(dlc__sampler_init_windows(&smp, firsts, n, c.window_shards, streams));
    dlc__sampler_set_epoch(&smp, c.seed, c.epoch);

    const uint32_t eff = dlc__swin_streams(smp.swin);
    /* The loader's slots are config.prefetch: the batches in flight. */
    const cache_need need = need_of(smp.swin, &c, c.prefetch);
    const uint32_t ranks = need.ranks;
    const uint32_t nodes = (c.world_size + ranks - 1) / ranks;
    dlc_loader_plan_info p;
    memset(&p, 0, sizeof p);
    bytes = calloc(n, sizeof *bytes);
    seen = calloc((size_t)nodes * n, 1);
    ks = malloc((size_t)c.batch_size * sizeof *ks);
    FAIL_IF(!bytes || !seen || !ks, -ENOMEM, "%s: out of memory", path);
    CHECK(plan_bytes(s, bytes, need.pinned, need.ahead, &p.cache_needed_bytes));
    for (uint32_t k = 0; k < n; k++) {
        p.set_bytes += bytes[k];
        if (bytes[k] > p.largest_shard_bytes)
            p.largest_shard_bytes = bytes[k];
    }
    p.shards = n, p.streams = eff, p.nodes = nodes, p.epoch_samples = smp.len;
    /* Every rank's share: what each node downloads, and rank 0's batches for the quality. */
    uint64_t same_pairs = 0, pairs = 0, same_next = 0, nexts = 0;
    plan_poll pp = {.net = c.net, .t0 = dlc__now_s()};
    pp.last = pp.t0;
    for (uint32_t r = 0; r < c.world_size; r++) {
        dlc__shard sh;
        dlc__shard_plan(&sh, smp.len, 0, r, c.world_size, c.batch_size, c.drop_last);
        uint8_t *mine = seen + (size_t)(r / ranks) * n;
        if (r == 0)
            p.samples_per_rank = sh.per_rank, p.batches_per_rank = sh.batches;
        /* A share beyond PLAN_WALK_MAX: its shards from the windows, and rank 0's first
         * PLAN_QUALITY_WALK samples walked for the quality (time that follows the shards). */
        uint64_t walked = sh.per_rank;
        if (sh.per_rank > PLAN_WALK_MAX) {
            uint64_t *first = malloc((size_t)n * sizeof *first);
            uint64_t *last = malloc((size_t)n * sizeof *last);
            if (!first || !last)
                free(first), free(last);
            FAIL_IF(!first || !last, -ENOMEM, "%s: out of memory", path);
            dlc__swin_plan(smp.swin, smp.len, sh.start, r, c.world_size, sh.per_rank, first, last);
            for (uint32_t k = 0; k < n; k++)
                if (first[k] != UINT64_MAX && !mine[k]) {
                    mine[k] = 1;
                    p.egress_bytes += bytes[k];
                }
            free(first), free(last);
            walked = r == 0 ? PLAN_QUALITY_WALK : 0;
        }
        for (uint64_t j = 0, in = 0; j < walked; j++) {
            CHECK(plan_poll_at(&pp, j, path));
            const uint32_t k =
                dlc__swin_shard_of(smp.swin, dlc__sampler_at(&smp, dlc__shard_pos(&sh, j)));
            if (!mine[k]) {
                mine[k] = 1;
                p.egress_bytes += bytes[k];
            }
            if (r != 0)
                continue;
            if (j > 0 && j % sh.batch != 0)
                same_next += k == ks[in - 1], nexts++;
            ks[in++] = k;
            if (in == sh.batch || j + 1 == walked) {
                /* Pairs within the batch that share a shard: runs of equal shards once sorted. */
                qsort(ks, in, sizeof *ks, cmp_u32);
                for (uint64_t a = 0, b; a < in; a = b) {
                    for (b = a + 1; b < in && ks[b] == ks[a]; b++)
                        ;
                    same_pairs += (b - a) * (b - a - 1) / 2;
                }
                pairs += in * (in - 1) / 2;
                in = 0;
            }
        }
    }
    p.batch_same_shard = pairs ? (double)same_pairs / (double)pairs : 0;
    p.neighbour_same_shard = nexts ? (double)same_next / (double)nexts : 0;
    CHECK(dlc__result_give(out, &p, sizeof p, "dlc_loader_plan_info"));
fail:
    dlc__sampler_free(&smp);
    free(firsts), free(bytes), free(seen), free(ks);
    if (s) {
        dlc__errsave es;
        dlc__err_save(&es);
        dlc_store_close(s);
        dlc__err_restore(&es, rc);
    }
    return rc;
}
