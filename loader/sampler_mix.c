/* The order of a mixture of sources (the rule is in sampler.h, "Mixtures"): a pure function of
 * (seed, epoch, the weights, the sources' record counts and tags, world, drop_last) and of the
 * segment a restored state began, computed per position in O(1) from a cycle table made at open
 * (period bytes and words), with no per-epoch array. */
#include "sampler.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A streamed source's passes in shard windows: the tables of passes p0 .. p0 + np - 1. */
typedef struct dlc__mix_win {
    dlc__swin **tab; /* cap of them; tab[i] is keyed to pass p0 + i. */
    uint32_t cap, np;
    uint64_t p0;
    uint64_t key; /* The seed the tables were keyed with (UINT64_MAX with np 0: none yet). */
} dlc__mix_win;

static void win_free(dlc__mix_win *w)
{
    if (!w)
        return;
    for (uint32_t i = 0; w->tab && i < w->cap; i++)
        dlc__swin_free(w->tab[i]);
    free(w->tab);
    free(w);
}

void dlc__mix_free(dlc__mix *m)
{
    for (uint32_t s = 0; s < DLC__MIX_MAX_SOURCES; s++) {
        win_free(m->win[s]);
        m->win[s] = NULL;
    }
    free(m->slot_src);
    free(m->slot_rank);
    m->slot_src = NULL;
    m->slot_rank = NULL;
}

/* The cycle: slot i goes to the source furthest behind its share (i + 1) x quota / period. The
 * deficits sum to period > 0 before each choice, so the chosen one is behind and no source ever
 * exceeds its quota; after period slots each has exactly its quota. */
static dlc_status build_cycle(dlc__mix *m)
{
    const uint32_t T = m->period;
    m->slot_src = malloc(T * sizeof *m->slot_src);
    m->slot_rank = malloc(T * sizeof *m->slot_rank);
    if (!m->slot_src || !m->slot_rank) {
        dlc__mix_free(m);
        return dlc__errorf(-ENOMEM, "loader: out of memory for a mixture's cycle of %u slots", T);
    }
    uint32_t have[DLC__MIX_MAX_SOURCES] = {0};
    for (uint32_t i = 0; i < T; i++) {
        uint32_t best = 0;
        int64_t best_d = INT64_MIN;
        for (uint32_t s = 0; s < m->n; s++) {
            if (!m->quota[s])
                continue;
            const int64_t d = (int64_t)(i + 1) * m->quota[s] - (int64_t)have[s] * T;
            if (d > best_d)
                best_d = d, best = s;
        }
        m->slot_src[i] = (uint8_t)best;
        m->slot_rank[i] = have[best]++;
    }
    return DLC_OK;
}

static void init_common(dlc__mix *m, const dlc__mix_source *src, uint32_t n, uint64_t len,
                        uint32_t world, int drop_last, int sequential)
{
    memset(m, 0, sizeof *m);
    m->n = n;
    memcpy(m->src, src, n * sizeof *src);
    m->len = len;
    m->world = world ? world : 1;
    m->drop_last = drop_last;
    m->batch = 1;
    m->sequential = sequential;
}

dlc_status dlc__mix_init_quotas(dlc__mix *m, const dlc__mix_source *src, uint32_t n,
                                const uint32_t *quota, uint64_t len, uint32_t world, int drop_last,
                                int sequential)
{
    if (n == 0 || n > DLC__MIX_MAX_SOURCES)
        return dlc__errorf(DLC_EINVAL, "loader: a mixture of %u sources: 1 to %u", n,
                           DLC__MIX_MAX_SOURCES);
    init_common(m, src, n, len, world, drop_last, sequential);
    uint64_t T = 0;
    for (uint32_t s = 0; s < n; s++)
        m->quota[s] = quota[s], T += quota[s];
    if (T == 0 || T > DLC__MIX_MAX_PERIOD)
        return dlc__errorf(DLC_EINVAL, "loader: a mixture's quotas sum to %llu: 1 to %u",
                           (unsigned long long)T, DLC__MIX_MAX_PERIOD);
    m->period = (uint32_t)T;
    return build_cycle(m);
}

dlc_status dlc__mix_init(dlc__mix *m, const dlc__mix_source *src, uint32_t n, uint64_t len,
                         uint32_t world, int drop_last, int sequential, const char *const *names)
{
    char who[64];
#define NAME(s) (names && names[s] ? names[s] : (snprintf(who, sizeof who, "source %u", s), who))
    if (n == 0 || n > DLC__MIX_MAX_SOURCES)
        return dlc__errorf(DLC_EINVAL, "loader: a mixture of %u sources: 1 to %u", n,
                           DLC__MIX_MAX_SOURCES);
    init_common(m, src, n, len, world, drop_last, sequential);
    double top = 0;
    for (uint32_t s = 0; s < n; s++) {
        const double w = src[s].weight;
        if (!(w >= 0) || !isfinite(w))
            return dlc__errorf(DLC_EINVAL,
                               "loader: %s: weight %g is not a weight (a finite "
                               "number, 0 or more)",
                               NAME(s), w);
        if (src[s].count == 0)
            return dlc__errorf(DLC_EINVAL, "loader: %s: the source has no records", NAME(s));
        top = w > top ? w : top;
    }
    if (!(top > 0))
        return dlc__errorf(DLC_EINVAL, "loader: a mixture whose weights are all 0 draws nothing");
    /* A pass is keyed by its source's content, not its place in the list: two sources of the
     * same records would walk the same permutations in step, and each batch would hold every
     * draw twice, side by side. */
    for (uint32_t s = 1; s < n; s++)
        for (uint32_t t = 0; t < s; t++)
            if (src[s].tag == src[t].tag && src[s].count == src[t].count) {
                char first[64];
                snprintf(first, sizeof first, "%s", NAME(t));
                return dlc__errorf(DLC_EINVAL,
                                   "loader: %s holds the same records as %s (content digest "
                                   "%016llx): the two would draw the same samples in step; "
                                   "list it once, with the sum of their weights",
                                   NAME(s), first, (unsigned long long)src[s].tag);
            }
    /* Shares of the weights scaled by the largest: each is then in [0, 1] and their sum at most
     * n, where a sum of the weights as given overflows to infinity (two of 1e308 made every
     * share 0 and gave the first source every draw) or loses a weight below its precision. */
    double w[DLC__MIX_MAX_SOURCES], sum = 0;
    for (uint32_t s = 0; s < n; s++)
        w[s] = src[s].weight / top, sum += w[s];
    /* The smallest period that holds every share exactly (0.7/0.3 gives 10 slots: 7 and 3). */
    uint32_t T = 0;
    for (uint32_t t = 1; t <= DLC__MIX_MAX_PERIOD && !T; t++) {
        uint64_t total = 0;
        int exact = 1;
        for (uint32_t s = 0; s < n && exact; s++) {
            const double want = w[s] / sum * t;
            const double q = floor(want + 0.5);
            exact = fabs(want - q) <= 1e-9 * t && (q > 0) == (w[s] > 0);
            total += (uint64_t)q;
        }
        if (exact && total == t)
            T = t;
    }
    if (T) {
        for (uint32_t s = 0; s < n; s++)
            m->quota[s] = (uint32_t)floor(w[s] / sum * T + 0.5);
    } else {
        /* Largest remainders at the largest period: shares off by less than 1 / period. */
        T = DLC__MIX_MAX_PERIOD;
        double rem[DLC__MIX_MAX_SOURCES];
        uint32_t given = 0;
        for (uint32_t s = 0; s < n; s++) {
            const double want = w[s] / sum * T;
            m->quota[s] = (uint32_t)floor(want);
            rem[s] = want - m->quota[s];
            given += m->quota[s];
        }
        while (given < T) {
            uint32_t best = 0;
            for (uint32_t s = 1; s < n; s++)
                if (rem[s] > rem[best])
                    best = s;
            m->quota[best]++, rem[best] = -1, given++;
        }
        for (uint32_t s = 0; s < n; s++)
            if (w[s] > 0 && m->quota[s] == 0)
                return dlc__errorf(DLC_EINVAL,
                                   "loader: %s: weight %g is below 1/%u of the total: too small "
                                   "to draw from",
                                   NAME(s), src[s].weight, DLC__MIX_MAX_PERIOD);
    }
#undef NAME
    m->period = T;
    return build_cycle(m);
}

void dlc__mix_segment(dlc__mix *m, uint64_t epoch, uint64_t pos, const uint64_t *base)
{
    m->seg_epoch = epoch;
    m->seg_pos = pos;
    for (uint32_t s = 0; s < m->n; s++)
        m->base[s] = base ? base[s] : 0;
}

static uint64_t round_world(const dlc__mix *m, uint64_t left)
{
    /* drop_last cuts each rank's short last batch too (dlc__shard_plan()): an epoch's draws are
     * what the ranks deliver, or the cut ones would be skipped by the next epoch's. */
    const uint64_t w = m->world, unit = w * (m->batch ? m->batch : 1);
    return m->drop_last ? left / unit * unit : (left + w - 1) / w * w;
}

uint64_t dlc__mix_epoch_span(const dlc__mix *m, uint64_t epoch)
{
    const uint64_t from = epoch == m->seg_epoch ? m->seg_pos : 0;
    return round_world(m, m->len > from ? m->len - from : 0);
}

/* The schedule's index of position @p pos of epoch @p epoch: positions drawn since the segment
 * began. */
static uint64_t sched_index(const dlc__mix *m, uint64_t epoch, uint64_t pos)
{
    if (epoch == m->seg_epoch)
        return pos - m->seg_pos;
    return dlc__mix_epoch_span(m, m->seg_epoch) +
           (epoch - m->seg_epoch - 1) * round_world(m, m->len) + pos;
}

uint64_t dlc__mix_record(const dlc__mix *m, uint32_t s, uint64_t k)
{
    const dlc__mix_source *x = &m->src[s];
    const uint64_t pass = k / x->count, at = k % x->count;
    if (m->sequential)
        return at;
    const dlc__mix_win *w = m->win[s];
    if (w) {
        /* The epoch's draws are within the passes dlc__mix_prepare() keyed. */
        assert(w->np > 0 && pass >= w->p0 && pass - w->p0 < w->np);
        uint64_t i = pass >= w->p0 ? pass - w->p0 : 0;
        if (i >= w->np)
            i = w->np ? w->np - 1 : 0;
        return dlc__swin_at(w->tab[i], at);
    }
    dlc__perm p;
    dlc__perm_init(&p, x->count, dlc__key4(DLC__KEY_MIX_PASS, m->seed, pass, x->tag));
    return dlc__perm_apply(&p, at);
}

uint64_t dlc__mix_draw(const dlc__mix *m, uint64_t epoch, uint64_t pos, uint32_t *source)
{
    const uint64_t t = sched_index(m, epoch, pos);
    const uint64_t row = t / m->world, lane = t % m->world;
    const uint32_t slot = (uint32_t)(row % m->period);
    const uint32_t s = m->slot_src[slot];
    *source = s;
    /* Every lane of a row draws from the same source, so the rows before hold world draws per
     * slot of s, and this row's earlier lanes one each. */
    return m->base[s] + m->world * ((row / m->period) * m->quota[s] + m->slot_rank[slot]) + lane;
}

uint64_t dlc__mix_at(const dlc__mix *m, uint64_t epoch, uint64_t pos, uint32_t *source,
                     uint64_t *local)
{
    uint32_t s;
    const uint64_t k = dlc__mix_draw(m, epoch, pos, &s);
    const uint64_t r = dlc__mix_record(m, s, k);
    if (source)
        *source = s;
    if (local)
        *local = r;
    return m->src[s].first + r;
}

void dlc__mix_draws(const dlc__mix *m, uint64_t epoch, uint64_t pos, uint64_t *draws)
{
    const uint64_t t = sched_index(m, epoch, pos);
    const uint64_t row = t / m->world, lane = t % m->world;
    const uint32_t slot = (uint32_t)(row % m->period);
    for (uint32_t s = 0; s < m->n; s++)
        draws[s] = m->base[s] + m->world * (row / m->period) * m->quota[s];
    for (uint32_t i = 0; i < slot; i++)
        draws[m->slot_src[i]] += m->world;
    if (lane)
        draws[m->slot_src[slot]] += lane;
}

dlc_status dlc__mix_set_windows(dlc__mix *m, uint32_t s, const uint64_t *firsts, uint32_t nshards,
                                uint32_t window, const char *name)
{
    dlc_status rc = DLC_OK;
    dlc__mix_win *w = NULL;
    FAIL_IF(s >= m->n || m->win[s], DLC_EINVAL, "loader: %s: no streamed source %u", name, s);
    /* The most passes of s an epoch can touch: the rows it draws (one more where a restored
     * segment began within a row), the draws of s in them, each pass of count, and the passes
     * begun before and after. */
    const uint64_t span = round_world(m, m->len);
    const uint64_t rows = span / m->world + 1;
    const uint64_t draws = (uint64_t)m->world * (rows / m->period + 1) * m->quota[s];
    const uint64_t cap = draws / m->src[s].count + 2;
    FAIL_IF(cap > DLC__MIX_MAX_WIN_PASSES, DLC_EINVAL,
            "loader: %s: a streamed source of %llu records could walk %llu of its passes in one "
            "epoch (%llu samples of it): at most %u; lower samples_per_epoch or its weight",
            name, (unsigned long long)m->src[s].count, (unsigned long long)cap,
            (unsigned long long)draws, DLC__MIX_MAX_WIN_PASSES);
    w = calloc(1, sizeof *w);
    FAIL_IF(!w, -ENOMEM, "loader: %s: out of memory", name);
    w->cap = (uint32_t)cap;
    w->key = UINT64_MAX;
    w->tab = calloc(w->cap, sizeof *w->tab);
    FAIL_IF(!w->tab, -ENOMEM, "loader: %s: out of memory", name);
    /* One stream: the pass has no padding, exactly count positions. */
    for (uint32_t i = 0; i < w->cap; i++)
        CHECK(dlc__swin_init(&w->tab[i], firsts, nshards, window, 1));
    FAIL_IF(dlc__swin_len(w->tab[0]) != m->src[s].count, DLC_EINVAL,
            "loader: %s: its shards hold %llu records, the source %llu", name,
            (unsigned long long)dlc__swin_len(w->tab[0]), (unsigned long long)m->src[s].count);
    m->win[s] = w;
    return DLC_OK;
fail:
    win_free(w);
    return rc;
}

void dlc__mix_prepare(dlc__mix *m, uint64_t epoch)
{
    int any = 0;
    for (uint32_t s = 0; s < m->n; s++)
        any |= m->win[s] != NULL;
    if (!any || epoch < m->seg_epoch)
        return;
    uint64_t d0[DLC__MIX_MAX_SOURCES], d1[DLC__MIX_MAX_SOURCES];
    dlc__mix_draws(m, epoch, epoch == m->seg_epoch ? m->seg_pos : 0, d0);
    dlc__mix_draws(m, epoch + 1, 0, d1);
    for (uint32_t s = 0; s < m->n; s++) {
        dlc__mix_win *w = m->win[s];
        if (!w)
            continue;
        const uint64_t count = m->src[s].count;
        const uint64_t p0 = d0[s] / count, p1 = d1[s] > d0[s] ? (d1[s] - 1) / count : p0;
        const uint64_t key = dlc__key4(DLC__KEY_MIX_WINDOWS, m->seed, m->src[s].tag, 0);
        uint64_t np = p1 - p0 + 1;
        assert(np <= w->cap);
        if (np > w->cap)
            np = w->cap;
        if (w->key == key && w->p0 == p0 && w->np == np)
            continue;
        for (uint32_t i = 0; i < np; i++)
            dlc__swin_set_epoch(w->tab[i], key, p0 + i);
        w->p0 = p0, w->np = (uint32_t)np, w->key = key;
    }
}

const dlc__swin *dlc__mix_swin(const dlc__mix *m, uint32_t s)
{
    return s < m->n && m->win[s] ? m->win[s]->tab[0] : NULL;
}
