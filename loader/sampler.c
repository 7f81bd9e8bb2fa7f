/* The epoch's order and the rank's share of it: pure functions of (seed, epoch, position, rank,
 * world), computed per position in O(1) time and memory so that a 1.3M-record store's first batch
 * needs no per-epoch permutation array. */
#include "sampler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- Feistel permutation ---- */

void dlc__perm_init(dlc__perm *p, uint64_t n, uint64_t key)
{
    uint32_t bits = 2;
    while (bits < 64 && (1ull << bits) < n)
        bits++;
    bits += bits & 1u; /* A balanced network needs an even width. */
    p->n = n;
    p->half_bits = bits / 2;
    p->half_mask = (1ull << p->half_bits) - 1;
    for (int i = 0; i < 4; i++)
        p->keys[i] = dlc__mix64(key + (uint64_t)i * 0x632be59bd9b4e019ull);
}

static uint64_t perm_round(const dlc__perm *p, uint64_t x)
{
    /* Four rounds of a balanced Feistel network with a keyed mix as the round function: a
     * bijection of [0, 4^half) whatever the round function is. */
    uint64_t l = x >> p->half_bits, r = x & p->half_mask;
    for (int i = 0; i < 4; i++) {
        const uint64_t f = dlc__mix64(r ^ p->keys[i]) & p->half_mask;
        const uint64_t nl = r;
        r = l ^ f;
        l = nl;
    }
    return (l << p->half_bits) | r;
}

static uint64_t perm_round_inv(const dlc__perm *p, uint64_t x)
{
    uint64_t l = x >> p->half_bits, r = x & p->half_mask;
    for (int i = 3; i >= 0; i--) {
        const uint64_t f = dlc__mix64(l ^ p->keys[i]) & p->half_mask;
        const uint64_t nr = l;
        l = r ^ f;
        r = nr;
    }
    return (l << p->half_bits) | r;
}

uint64_t dlc__perm_apply(const dlc__perm *p, uint64_t i)
{
    if (p->n <= 1)
        return 0;
    /* Cycle walking: the cycle through i inside [0, 4^half) must come back into [0, n). */
    uint64_t x = i;
    do
        x = perm_round(p, x);
    while (x >= p->n);
    return x;
}

uint64_t dlc__perm_invert(const dlc__perm *p, uint64_t i)
{
    if (p->n <= 1)
        return 0;
    uint64_t x = i;
    do
        x = perm_round_inv(p, x);
    while (x >= p->n);
    return x;
}

/* ---- Sampler ---- */

/* Vose's alias tables from @p mass (per class, scaled here to a mean of 1; @p small and
 * @p large are scratch of nclasses each): one uniform draw and one coin pick a class in O(1). */
static void alias_build(dlc__sampler *s, double *mass, uint32_t *small, uint32_t *large,
                        double total, const double *weights)
{
    const uint32_t nclasses = s->nclasses;
    uint32_t ns = 0, nl = 0;
    for (uint32_t c = 0; c < nclasses; c++) {
        mass[c] = mass[c] * nclasses / total;
        if (mass[c] < 1.0)
            small[ns++] = c;
        else
            large[nl++] = c;
    }
    while (ns && nl) {
        const uint32_t a = small[--ns], b = large[--nl];
        s->alias_prob[a] = mass[a];
        s->alias_idx[a] = b;
        mass[b] = (mass[b] + mass[a]) - 1.0;
        if (mass[b] < 1.0)
            small[ns++] = b;
        else
            large[nl++] = b;
    }
    while (nl) {
        const uint32_t b = large[--nl];
        s->alias_prob[b] = 1.0, s->alias_idx[b] = b;
    }
    /* What is left is 1 up to rounding; a class without records must still never be drawn,
     * so it points at one that has mass. */
    uint32_t some = 0;
    while (some + 1 < nclasses &&
           !(weights[some] > 0 && s->class_start[some + 1] > s->class_start[some]))
        some++;
    while (ns) {
        const uint32_t a = small[--ns];
        const int empty = s->class_start[a + 1] == s->class_start[a];
        s->alias_prob[a] = empty ? 0.0 : 1.0, s->alias_idx[a] = empty ? some : a;
    }
}

/* The weighted sampler's tables: the records sorted by label and the alias tables of the
 * classes. On failure the caller frees what was allocated in @p s. */
static dlc_status weighted_init(dlc__sampler *s, uint64_t count, const int64_t *labels,
                                uint32_t nclasses, const double *weights)
{
    dlc_status rc = DLC_OK;
    double *mass = NULL;
    uint32_t *small = NULL, *large = NULL;
    FAIL_IF(!labels || !weights || nclasses == 0, DLC_EINVAL,
            "loader: config.class_weights: the weighted sampler needs one weight per label");
    s->nclasses = nclasses;
    s->by_class = malloc(count * sizeof *s->by_class);
    s->class_start = calloc((size_t)nclasses + 1, sizeof *s->class_start);
    s->alias_prob = malloc(nclasses * sizeof *s->alias_prob);
    s->alias_idx = malloc(nclasses * sizeof *s->alias_idx);
    mass = calloc(nclasses, sizeof *mass);
    small = malloc(nclasses * sizeof *small);
    large = malloc(nclasses * sizeof *large);
    FAIL_IF(!s->by_class || !s->class_start || !s->alias_prob || !s->alias_idx || !mass || !small ||
                !large,
            -ENOMEM, "loader: out of memory for the weighted sampler's tables");
    /* Counting sort of the records by label. */
    for (uint64_t i = 0; i < count; i++) {
        FAIL_IF(labels[i] < 0 || labels[i] >= (int64_t)nclasses, DLC_ECORRUPT,
                "loader: record %llu: label %lld is not below %u", (unsigned long long)i,
                (long long)labels[i], nclasses);
        s->class_start[labels[i] + 1]++;
    }
    for (uint32_t c = 0; c < nclasses; c++)
        s->class_start[c + 1] += s->class_start[c];
    uint64_t *fill = (uint64_t *)mass; /* Reused as a cursor array before it holds masses. */
    memcpy(fill, s->class_start, nclasses * sizeof *fill);
    for (uint64_t i = 0; i < count; i++)
        s->by_class[fill[labels[i]]++] = i;
    /* P(record) is proportional to its class's weight, so P(class) ~ weight * records. */
    double total = 0;
    for (uint32_t c = 0; c < nclasses; c++) {
        const double w = weights[c];
        FAIL_IF(!(w >= 0) || w > 1e300, DLC_EINVAL,
                "loader: config.class_weights[%u] = %g is not a weight", c, w);
        mass[c] = w * (double)(s->class_start[c + 1] - s->class_start[c]);
        total += mass[c];
    }
    FAIL_IF(!(total > 0), DLC_EINVAL, "loader: config.class_weights: every record has weight 0");
    alias_build(s, mass, small, large, total, weights);
fail:
    free(mass), free(small), free(large);
    return rc;
}

dlc_status dlc__sampler_init(dlc__sampler *s, uint32_t kind, uint64_t count, uint64_t num_samples,
                             uint32_t quasi_group, const int64_t *labels, uint32_t nclasses,
                             const double *weights)
{
    dlc_status rc = DLC_OK;
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->count = count;
    s->len = count;
    FAIL_IF(count == 0, DLC_EINVAL, "loader: the store has no records");
    switch (kind) {
    case DLC_SAMPLER_SEQUENTIAL:
    case DLC_SAMPLER_SHUFFLE:
        break;
    case DLC_SAMPLER_QUASI_RANDOM:
        s->group = quasi_group ? quasi_group : 64;
        s->ngroups = (count + s->group - 1) / s->group;
        s->tail = count % s->group;
        /* Sixteen groups per window: a batch draws from a few long runs of neighbouring records
         * instead of from everywhere, while the order of groups still spans the whole store. */
        s->window = s->group * 16;
        break;
    case DLC_SAMPLER_WEIGHTED:
        if (num_samples)
            s->len = num_samples;
        CHECK(weighted_init(s, count, labels, nclasses, weights));
        break;
    default:
        FAIL_IF(1, DLC_EINVAL, "loader: config.sampler = %u is not a dlc_sampler", kind);
    }
    dlc__sampler_set_epoch(s, 0, 0);
    return DLC_OK;
fail:
    dlc__sampler_free(s);
    return rc;
}

dlc_status dlc__sampler_init_windows(dlc__sampler *s, const uint64_t *firsts, uint32_t nshards,
                                     uint32_t window, uint32_t streams)
{
    memset(s, 0, sizeof *s);
    s->kind = DLC_SAMPLER_SHARD_WINDOWS;
    s->count = nshards ? firsts[nshards] : 0;
    const dlc_status rc = dlc__swin_init(&s->swin, firsts, nshards, window, streams);
    if (rc != DLC_OK)
        return rc;
    s->len = dlc__swin_len(s->swin);
    return DLC_OK;
}

void dlc__sampler_free(dlc__sampler *s)
{
    dlc__swin_free(s->swin);
    s->swin = NULL;
    if (s->mix) {
        dlc__mix_free(s->mix);
        free(s->mix);
        s->mix = NULL;
    }
    free(s->by_class);
    free(s->class_start);
    free(s->alias_prob);
    free(s->alias_idx);
    s->by_class = s->class_start = NULL;
    s->alias_prob = NULL;
    s->alias_idx = NULL;
}

void dlc__sampler_set_epoch(dlc__sampler *s, uint64_t seed, uint64_t epoch)
{
    s->seed = seed;
    s->epoch = epoch;
    if (s->mix) {
        s->mix->seed = seed;
        dlc__mix_prepare(s->mix, epoch); /* A streamed source's passes in shard windows. */
    }
    if (s->kind == DLC_SAMPLER_SHUFFLE) {
        dlc__perm_init(&s->perm, s->count, dlc__key4(DLC__KEY_SHUFFLE, seed, epoch, 0));
    } else if (s->kind == DLC_SAMPLER_QUASI_RANDOM) {
        dlc__perm_init(&s->perm, s->ngroups, dlc__key4(DLC__KEY_GROUPS, seed, epoch, 0));
        /* Where the short last group lands in the permuted order of groups: positions after it
         * are shifted by its size. */
        s->tail_pos = s->tail ? dlc__perm_invert(&s->perm, s->ngroups - 1) : s->ngroups;
    } else if (s->kind == DLC_SAMPLER_SHARD_WINDOWS) {
        dlc__swin_set_epoch(s->swin, seed, epoch);
        s->len = dlc__swin_len(s->swin);
    }
}

/* Quasi-random, first stage: the records of the permuted groups, one group after another. */
static uint64_t quasi_groups_at(const dlc__sampler *s, uint64_t p)
{
    const uint64_t g = s->group;
    uint64_t k, off;
    if (!s->tail || p < s->tail_pos * g) {
        k = p / g, off = p % g;
    } else if (p < s->tail_pos * g + s->tail) {
        k = s->tail_pos, off = p - s->tail_pos * g;
    } else {
        const uint64_t t = p - s->tail_pos * g - s->tail;
        k = s->tail_pos + 1 + t / g, off = t % g;
    }
    return dlc__perm_apply(&s->perm, k) * g + off;
}

uint64_t dlc__sampler_at(const dlc__sampler *s, uint64_t pos)
{
    /* A mixture's padding is made of new draws, not repeats (sampler.h, "Mixtures"). */
    if (s->mix)
        return dlc__mix_at(s->mix, s->epoch, pos, NULL, NULL);
    /* Repeated augmentation as torchvision's RASampler: the order's entries each repeated, and
     * padding that goes on along that list (it is as long as the epoch only in its first
     * len / repeats entries), then from its start. */
    if (s->repeats > 1)
        pos /= s->repeats;
    if (pos >= s->len)
        pos %= s->len;
    switch (s->kind) {
    case DLC_SAMPLER_SHUFFLE:
        return dlc__perm_apply(&s->perm, pos);
    case DLC_SAMPLER_QUASI_RANDOM: {
        /* Second stage: shuffle within each window of consecutive first-stage positions. */
        const uint64_t w = pos / s->window, base = w * s->window;
        const uint64_t size = s->count - base < s->window ? s->count - base : s->window;
        dlc__perm wp;
        dlc__perm_init(&wp, size, dlc__key4(DLC__KEY_WINDOW, s->seed, s->epoch, w));
        return quasi_groups_at(s, base + dlc__perm_apply(&wp, pos - base));
    }
    case DLC_SAMPLER_WEIGHTED: {
        dlc__rng r = {dlc__key4(DLC__KEY_WEIGHTED, s->seed, s->epoch, pos), 0};
        const uint32_t slot = (uint32_t)dlc__rng_below(&r, s->nclasses);
        const uint32_t c = dlc__rng_uniform(&r) < s->alias_prob[slot] ? slot : s->alias_idx[slot];
        const uint64_t n = s->class_start[c + 1] - s->class_start[c];
        return s->by_class[s->class_start[c] + dlc__rng_below(&r, n)];
    }
    case DLC_SAMPLER_SHARD_WINDOWS:
        return dlc__swin_at(s->swin, pos);
    default:
        return pos;
    }
}

void dlc__shard_plan(dlc__shard *sh, uint64_t len, uint64_t start, uint32_t rank, uint32_t world,
                     uint32_t batch, int drop_last)
{
    const uint64_t left = start < len ? len - start : 0;
    /* DistributedSampler: pad what is left to a multiple of world by repeating the order from
     * its start (the cyclic extension), or cut it with drop_last. */
    const uint64_t span = drop_last ? left / world * world : (left + world - 1) / world * world;
    uint64_t per_rank = span / world;
    uint64_t batches = (per_rank + batch - 1) / batch;
    if (drop_last) {
        batches = per_rank / batch;
        per_rank = batches * batch;
    }
    sh->start = start;
    sh->per_rank = per_rank;
    sh->batches = batches;
    sh->rank = rank;
    sh->world = world;
    sh->batch = batch;
}
