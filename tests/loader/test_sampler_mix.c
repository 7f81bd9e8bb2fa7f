/* The order of a mixture (loader/sampler_mix.c): shares over every prefix, batch and epoch,
 * passes that each see every record of a source once, determinism, a resume under other weights,
 * another source list and another world size, and the refusals. Pure functions: no store. */
#include "sampler.h"

#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static dlc__mix make(const double *w, const uint64_t *count, uint32_t n, uint64_t len,
                     uint32_t world)
{
    dlc__mix_source src[DLC__MIX_MAX_SOURCES];
    uint64_t first = 0;
    for (uint32_t s = 0; s < n; s++) {
        src[s] =
            (dlc__mix_source){.count = count[s], .first = first, .tag = 1000 + s, .weight = w[s]};
        first += count[s];
    }
    dlc__mix m;
    cr_assert_eq(dlc__mix_init(&m, src, n, len, world, 0, 0, NULL), DLC_OK, "%s", dlc_errmsg());
    m.seed = 7;
    return m;
}

static double share(const dlc__mix *m, uint32_t s)
{
    double sum = 0;
    for (uint32_t i = 0; i < m->n; i++)
        sum += m->src[i].weight;
    return m->src[s].weight / sum;
}

/* Every prefix of the first @p len positions (world 1) within less than 1 of weight x n, every
 * window of @p batch within less than @p window_bound. */
static void check_shares(const dlc__mix *m, uint64_t len, uint32_t batch, double window_bound)
{
    uint64_t *pre = calloc((len + 1) * m->n, sizeof *pre);
    for (uint64_t t = 0; t < len; t++) {
        uint32_t s;
        dlc__mix_at(m, 0, t, &s, NULL);
        memcpy(pre + (t + 1) * m->n, pre + t * m->n, m->n * sizeof *pre);
        pre[(t + 1) * m->n + s]++;
    }
    for (uint32_t s = 0; s < m->n; s++) {
        const double w = share(m, s);
        for (uint64_t t = 0; t <= len; t++)
            cr_assert_lt(fabs((double)pre[t * m->n + s] - w * t), 1.0,
                         "source %u: %llu of the first %llu, weight %g", s,
                         (unsigned long long)pre[t * m->n + s], (unsigned long long)t, w);
        for (uint64_t a = 0; a + batch <= len; a++) {
            const double got = (double)(pre[(a + batch) * m->n + s] - pre[a * m->n + s]);
            cr_assert_lt(fabs(got - w * batch), window_bound,
                         "source %u: %g in the window of %u at %llu, weight %g", s, got, batch,
                         (unsigned long long)a, w);
        }
        if (m->src[s].weight == 0)
            cr_assert_eq(pre[len * m->n + s], 0, "a source of weight 0 was drawn");
    }
    free(pre);
}

Test(sampler_mix, shares_over_every_prefix_and_batch)
{
    const uint64_t counts[] = {500, 300, 200, 90};
    const double two[] = {0.7, 0.3}, three[] = {0.5, 0.3, 0.2}, thirds[] = {1, 1, 1};
    const double four[] = {0.1, 0.2, 0.3, 0.4}, zero[] = {0.6, 0, 0.4};
    struct {
        const double *w;
        uint32_t n;
        double window;
    } cases[] = {{two, 2, 1.0}, {three, 3, 2.0}, {thirds, 3, 2.0}, {four, 4, 2.0}, {zero, 3, 1.0}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        dlc__mix m = make(cases[c].w, counts, cases[c].n, 1000, 1);
        const uint32_t batches[] = {1, 7, 32, 100};
        for (size_t b = 0; b < 4; b++)
            check_shares(&m, 1000, batches[b], cases[c].window);
        dlc__mix_free(&m);
    }
}

Test(sampler_mix, inexact_weights_use_the_largest_period)
{
    const uint64_t counts[] = {100, 100};
    const double w[] = {M_PI, 1.0};
    dlc__mix m = make(w, counts, 2, 5000, 1);
    cr_assert_eq(m.period, DLC__MIX_MAX_PERIOD);
    check_shares(&m, 5000, 64, 1.0);
    dlc__mix_free(&m);
    const double exact[] = {0.7, 0.3};
    m = make(exact, counts, 2, 10, 1);
    cr_assert_eq(m.period, 10);
    cr_assert_eq(m.quota[0], 7);
    cr_assert_eq(m.quota[1], 3);
    dlc__mix_free(&m);
}

/* Collect the draws of @p npos positions of each of epochs [e0, e1) (from pos0 in e0), as
 * (source, local) pairs, counting per record. */
static void draw(const dlc__mix *m, uint64_t e0, uint64_t pos0, uint64_t e1, uint32_t **seen)
{
    for (uint64_t e = e0; e < e1; e++) {
        const uint64_t from = e == e0 ? pos0 : 0;
        const uint64_t span = dlc__mix_epoch_span(m, e);
        for (uint64_t p = from; p < from + span; p++) {
            uint32_t s;
            uint64_t local;
            const uint64_t g = dlc__mix_at(m, e, p, &s, &local);
            cr_assert_lt(local, m->src[s].count);
            cr_assert_eq(g, m->src[s].first + local);
            seen[s][local]++;
        }
    }
}

/* Every record of a source seen floor or ceil of draws / count times, and every one of the
 * records seen once more than the rest distinct: no record twice within a pass. */
static void check_passes(const dlc__mix *m, uint32_t s, uint32_t *seen, uint64_t draws)
{
    const uint64_t c = m->src[s].count, full = draws / c;
    uint64_t more = 0, total = 0;
    for (uint64_t r = 0; r < c; r++) {
        cr_assert(seen[r] == full || seen[r] == full + 1,
                  "source %u record %llu seen %u times in %llu draws of %llu records", s,
                  (unsigned long long)r, seen[r], (unsigned long long)draws, (unsigned long long)c);
        more += seen[r] == full + 1;
        total += seen[r];
    }
    cr_assert_eq(total, draws);
    cr_assert_eq(more, draws % c);
}

Test(sampler_mix, each_source_walks_whole_passes_across_epochs_and_ranks)
{
    /* Source 1 is smaller than its share (it repeats its passes within an epoch), source 0
     * larger (its pass spreads over epochs). */
    const uint64_t counts[] = {1000, 37, 250};
    const double w[] = {0.5, 0.25, 0.25};
    for (uint32_t world = 1; world <= 3; world++) {
        dlc__mix m = make(w, counts, 3, 400, world);
        uint32_t *seen[3];
        for (uint32_t s = 0; s < 3; s++)
            seen[s] = calloc(counts[s], sizeof **seen);
        draw(&m, 0, 0, 5, seen);
        uint64_t draws[3];
        dlc__mix_draws(&m, 5, 0, draws);
        uint64_t sum = 0;
        for (uint32_t s = 0; s < 3; s++) {
            check_passes(&m, s, seen[s], draws[s]);
            sum += draws[s];
            free(seen[s]);
        }
        cr_assert_eq(sum, 5 * dlc__mix_epoch_span(&m, 1));
        cr_assert_eq(dlc__mix_epoch_span(&m, 1) % world, 0);
        dlc__mix_free(&m);
    }
}

Test(sampler_mix, every_rank_batch_holds_the_shares)
{
    const uint64_t counts[] = {100, 100};
    const double w[] = {0.7, 0.3};
    const uint32_t world = 4, batch = 10;
    dlc__mix m = make(w, counts, 2, 4000, world);
    for (uint32_t r = 0; r < world; r++)
        for (uint64_t j0 = 0; j0 + batch <= 1000; j0 += batch) {
            uint32_t n0 = 0;
            for (uint64_t j = j0; j < j0 + batch; j++) {
                uint32_t s;
                dlc__mix_at(&m, 0, r + j * world, &s, NULL);
                n0 += s == 0;
            }
            cr_assert_eq(n0, 7, "rank %u batch at %llu: %u of source 0", r, (unsigned long long)j0,
                         n0);
        }
    dlc__mix_free(&m);
}

Test(sampler_mix, a_pure_function_of_its_inputs)
{
    const uint64_t counts[] = {300, 200};
    const double w[] = {0.6, 0.4};
    dlc__mix a = make(w, counts, 2, 500, 2), b = make(w, counts, 2, 500, 2);
    uint64_t differ_seed = 0, differ_epoch = 0;
    for (uint64_t p = 0; p < 500; p++) {
        cr_assert_eq(dlc__mix_at(&a, 3, p, NULL, NULL), dlc__mix_at(&b, 3, p, NULL, NULL));
        differ_epoch += dlc__mix_at(&a, 3, p, NULL, NULL) != dlc__mix_at(&a, 4, p, NULL, NULL);
    }
    b.seed = 8;
    for (uint64_t p = 0; p < 500; p++)
        differ_seed += dlc__mix_at(&a, 0, p, NULL, NULL) != dlc__mix_at(&b, 0, p, NULL, NULL);
    cr_assert_gt(differ_seed, 400);
    cr_assert_gt(differ_epoch, 400);
    /* A source's passes are keyed by its tag, not its place in the list. */
    dlc__mix_source swapped[2] = {b.src[1], b.src[0]};
    swapped[0].weight = 0.5, swapped[1].weight = 0.5;
    dlc__mix c;
    cr_assert_eq(dlc__mix_init(&c, swapped, 2, 500, 2, 0, 0, NULL), DLC_OK);
    c.seed = b.seed;
    for (uint64_t k = 0; k < 200; k++)
        cr_assert_eq(dlc__mix_record(&c, 0, k), dlc__mix_record(&b, 1, k));
    dlc__mix_free(&a), dlc__mix_free(&b), dlc__mix_free(&c);
}

Test(sampler_mix, resume_with_new_weights_a_new_source_and_another_world)
{
    /* Two sources at 0.7/0.3 over 2 ranks, stopped mid-epoch; continued at 0.3/0.7 with a third
     * source over 3 ranks, then over 1. Every source's records are seen once per pass across
     * the whole run. */
    const uint64_t counts[] = {230, 170, 90};
    const double w1[] = {0.7, 0.3}, w2[] = {0.3, 0.7, 0.5}, w3[] = {0.2, 0.2, 0.6};
    dlc__mix a = make(w1, counts, 2, 300, 2);
    uint32_t *seen[3];
    for (uint32_t s = 0; s < 3; s++)
        seen[s] = calloc(counts[s], sizeof **seen);
    draw(&a, 0, 0, 1, seen);
    /* Epoch 1 up to position 142 (a multiple of the old world size). */
    for (uint64_t p = 0; p < 142; p++) {
        uint32_t s;
        uint64_t local;
        dlc__mix_at(&a, 1, p, &s, &local);
        seen[s][local]++;
    }
    uint64_t base[3] = {0};
    dlc__mix_draws(&a, 1, 142, base);
    dlc__mix b = make(w2, counts, 3, 300, 3);
    dlc__mix_segment(&b, 1, 142, base);
    draw(&b, 1, 142, 3, seen);
    dlc__mix_draws(&b, 3, 77, base);
    for (uint64_t p = 0; p < 77; p++) {
        uint32_t s;
        uint64_t local;
        dlc__mix_at(&b, 3, p, &s, &local);
        seen[s][local]++;
    }
    dlc__mix c = make(w3, counts, 3, 300, 1);
    dlc__mix_segment(&c, 3, 77, base);
    draw(&c, 3, 77, 5, seen);
    uint64_t draws[3];
    dlc__mix_draws(&c, 5, 0, draws);
    for (uint32_t s = 0; s < 3; s++) {
        cr_assert_gt(draws[s], counts[s], "source %u: a whole pass at least", s);
        check_passes(&c, s, seen[s], draws[s]);
        free(seen[s]);
    }
    dlc__mix_free(&a), dlc__mix_free(&b), dlc__mix_free(&c);
}

Test(sampler_mix, bad_weights_and_sources_are_refused_by_name)
{
    const uint64_t counts[] = {10, 10};
    dlc__mix_source src[2] = {{.count = 10, .tag = 1, .weight = 1},
                              {.count = 10, .first = 10, .tag = 2, .weight = 1}};
    const char *names[] = {"a.dlc", "b.dlc"};
    dlc__mix m;
    const double bad[] = {-1, NAN, INFINITY};
    for (size_t i = 0; i < 3; i++) {
        src[1].weight = bad[i];
        cr_assert_eq(dlc__mix_init(&m, src, 2, 20, 1, 0, 0, names), DLC_EINVAL);
        cr_assert(strstr(dlc_errmsg(), "b.dlc") && strstr(dlc_errmsg(), "weight"), "%s",
                  dlc_errmsg());
    }
    src[0].weight = src[1].weight = 0;
    cr_assert_eq(dlc__mix_init(&m, src, 2, 20, 1, 0, 0, names), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "all 0"), "%s", dlc_errmsg());
    src[0].weight = src[1].weight = 1;
    src[0].count = 0;
    cr_assert_eq(dlc__mix_init(&m, src, 2, 20, 1, 0, 0, names), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "a.dlc") && strstr(dlc_errmsg(), "no records"), "%s",
              dlc_errmsg());
    src[0].count = 10;
    src[1].weight = 1e-9;
    cr_assert_eq(dlc__mix_init(&m, src, 2, 20, 1, 0, 0, names), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "too small"), "%s", dlc_errmsg());
    cr_assert_eq(dlc__mix_init(&m, src, 0, 20, 1, 0, 0, names), DLC_EINVAL);
    (void)counts;
}

/* A streamed source (dlc__mix_set_windows()): each pass is every record once, in windows of
 * shards (the records of `window` consecutive shards of the pass's shard order come before any
 * other's), the tables follow the epochs (prepared as the loader keys each), a pass differs from
 * the next, and the draws are the same whatever order the epochs are keyed in. */
Test(sampler_mix, a_streamed_source_walks_whole_passes_in_shard_windows)
{
    /* Source 1: 7 shards of uneven sizes (one empty), 50 records. */
    const uint64_t firsts[8] = {0, 9, 17, 17, 25, 33, 41, 50};
    const double w[2] = {0.5, 0.5};
    const uint64_t count[2] = {30, 50};
    dlc__mix m = make(w, count, 2, 45, 3);
    cr_assert_eq(dlc__mix_set_windows(&m, 1, firsts, 7, 2, "s"), DLC_OK, "%s", dlc_errmsg());
    cr_assert_not_null(dlc__mix_swin(&m, 1));
    cr_assert_null(dlc__mix_swin(&m, 0));
    const uint32_t epochs = 6;
    uint64_t *seq = malloc(sizeof *seq * 45 * epochs);
    uint64_t n = 0;
    for (uint64_t e = 0; e < epochs; e++) {
        dlc__mix_prepare(&m, e);
        const uint64_t span = dlc__mix_epoch_span(&m, e);
        for (uint64_t p = 0; p < span; p++) {
            uint32_t s;
            uint64_t local;
            const uint64_t g = dlc__mix_at(&m, e, p, &s, &local);
            if (s != 1)
                continue;
            cr_assert_eq(g, 30 + local);
            seq[n++] = local;
        }
    }
    cr_assert_geq(n, 100, "%llu draws: two passes at least", (unsigned long long)n);
    int differ = 0;
    for (uint64_t pass = 0; pass < n / 50; pass++) {
        const uint64_t *q = seq + pass * 50;
        uint8_t seen[50] = {0}, closed[7] = {0};
        uint32_t left[7], win[2], nwin = 0;
        for (uint32_t k = 0; k < 7; k++)
            left[k] = (uint32_t)(firsts[k + 1] - firsts[k]);
        for (uint32_t i = 0; i < 50; i++) {
            cr_assert_lt(q[i], 50);
            cr_assert_eq(seen[q[i]]++, 0, "pass %llu draws record %llu twice",
                         (unsigned long long)pass, (unsigned long long)q[i]);
            differ |= pass > 0 && q[i] != seq[(pass - 1) * 50 + i];
            uint32_t k = 0;
            while (firsts[k + 1] <= q[i])
                k++;
            cr_assert_eq(closed[k], 0, "pass %llu: shard %u read again after its window",
                         (unsigned long long)pass, k);
            if (!(nwin > 0 && win[0] == k) && !(nwin > 1 && win[1] == k)) {
                if (nwin == 2) { /* A new window: the last one's shards are all read. */
                    cr_assert_eq(left[win[0]] + left[win[1]], 0,
                                 "pass %llu: a window of 2 shards left before its end at %u",
                                 (unsigned long long)pass, i);
                    closed[win[0]] = closed[win[1]] = 1;
                    nwin = 0;
                }
                win[nwin++] = k;
            }
            left[k]--;
        }
    }
    cr_assert(differ, "every pass has the same order");
    /* Keyed again out of order (a set_epoch back), an epoch draws the same records. */
    for (uint64_t e = epochs; e-- > 0;) {
        dlc__mix_prepare(&m, e);
        uint64_t at = 0;
        for (uint64_t f = 0; f < e; f++)
            for (uint64_t p = 0; p < dlc__mix_epoch_span(&m, f); p++) {
                uint32_t s;
                dlc__mix_draw(&m, f, p, &s); /* No record: those passes are not keyed now. */
                at += s == 1;
            }
        for (uint64_t p = 0; p < dlc__mix_epoch_span(&m, e); p++) {
            uint32_t s;
            uint64_t local;
            dlc__mix_at(&m, e, p, &s, &local);
            if (s == 1)
                cr_assert_eq(local, seq[at++], "epoch %llu keyed again differs",
                             (unsigned long long)e);
        }
    }
    free(seq);
    dlc__mix_free(&m);
}

Test(sampler_mix, a_streamed_source_that_would_repeat_too_often_is_refused)
{
    const uint64_t firsts[3] = {0, 2, 4};
    const double w[2] = {0.5, 0.5};
    const uint64_t count[2] = {1000, 4};
    dlc__mix m = make(w, count, 2, 1000, 1);
    cr_assert_eq(dlc__mix_set_windows(&m, 1, firsts, 2, 1, "s3://b/tiny"), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "s3://b/tiny") && strstr(dlc_errmsg(), "passes"), "%s",
              dlc_errmsg());
    dlc__mix_free(&m);
}

/* Issue 32, item 10: the weights' sum overflowed (two of 1e308 made every share 0 and gave
 * the first source every draw). They are scaled by the largest first: equal weights are equal
 * shares whatever their size, and unequal ones keep their ratio. */
Test(sampler_mix, huge_and_tiny_weights_keep_their_shares)
{
    const uint64_t counts[] = {10, 10};
    const double equal[] = {1e308, 9e307, DBL_MAX, 5e-324};
    for (size_t i = 0; i < sizeof equal / sizeof *equal; i++) {
        const double w[] = {equal[i], equal[i]};
        dlc__mix m = make(w, counts, 2, 20, 1);
        cr_assert_eq(m.quota[0], m.quota[1], "weights %g: quotas %u and %u", equal[i], m.quota[0],
                     m.quota[1]);
        dlc__mix_free(&m);
    }
    const double ratio[] = {1.5e308, 5e307};
    dlc__mix m = make(ratio, counts, 2, 20, 1);
    cr_assert_eq(m.quota[0], 3 * m.quota[1], "quotas %u and %u", m.quota[0], m.quota[1]);
    dlc__mix_free(&m);
}
