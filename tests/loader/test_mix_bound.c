/* Why a mixture of three or more sources promises less than 1 per prefix but less than 2 per
 * window (docs/MIXTURES.md, "What the shares guarantee"): for some weights no order at all
 * keeps every window within 1 of weight x n. An exhaustive search proves it for two weight
 * vectors; the schedule the loader uses is then checked against the bound it does promise. */
#include "sampler.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAXLEN 64
#define MAXSRC 4

struct search {
    const uint32_t *q; /* integer weights: source s has share q[s] / period */
    uint32_t n, period;
    uint32_t pre[MAXLEN + 1][MAXSRC]; /* pre[k][s]: draws of s among the first k */
    uint32_t longest;                 /* the longest order found that keeps the bound */
};

/* Does every window ending at position k hold each source's count within 1 of its share? */
static int windows_ok(const struct search *x, uint32_t k)
{
    for (uint32_t a = 0; a < k; a++)
        for (uint32_t s = 0; s < x->n; s++) {
            const int64_t got = (int64_t)(x->pre[k][s] - x->pre[a][s]) * x->period;
            const int64_t want = (int64_t)x->q[s] * (k - a);
            if (got - want > (int64_t)x->period || want - got > (int64_t)x->period)
                return 0;
        }
    return 1;
}

/* Depth-first over every order of @p len positions (any number of draws per source). */
static int extend(struct search *x, uint32_t k, uint32_t len)
{
    if (k > x->longest)
        x->longest = k;
    if (k == len)
        return 1;
    for (uint32_t s = 0; s < x->n; s++) {
        memcpy(x->pre[k + 1], x->pre[k], sizeof x->pre[k]);
        x->pre[k + 1][s]++;
        if (windows_ok(x, k + 1) && extend(x, k + 1, len))
            return 1;
    }
    return 0;
}

static uint32_t longest_within_1(const uint32_t *q, uint32_t n, uint32_t len)
{
    struct search x = {.q = q, .n = n};
    for (uint32_t s = 0; s < n; s++)
        x.period += q[s];
    memset(x.pre[0], 0, sizeof x.pre[0]);
    extend(&x, 0, len);
    return x.longest;
}

Test(mix_bound, no_order_keeps_every_window_within_1_for_some_three_weights)
{
    /* Two sources always can (a Bresenham line), and so can some three: the search must find
     * those, or it proves nothing about the others. */
    const uint32_t two[] = {7, 3}, easy[] = {5, 3, 2};
    cr_assert_eq(longest_within_1(two, 2, 40), 40);
    cr_assert_eq(longest_within_1(easy, 3, 40), 40);
    /* 6/13, 4/13, 3/13: every order of 12 samples has a window off by more than 1. */
    const uint32_t hard[] = {6, 4, 3}, hard2[] = {9, 6, 4};
    cr_assert_eq(longest_within_1(hard, 3, 40), 11);
    cr_assert_eq(longest_within_1(hard2, 3, 40), 10);
}

Test(mix_bound, the_schedule_keeps_prefixes_within_1_and_windows_within_2_there)
{
    const double w[] = {6, 4, 3};
    dlc__mix_source src[3];
    uint64_t first = 0;
    for (uint32_t s = 0; s < 3; s++) {
        src[s] = (dlc__mix_source){.count = 1000, .first = first, .tag = 10 + s, .weight = w[s]};
        first += 1000;
    }
    dlc__mix m;
    cr_assert_eq(dlc__mix_init(&m, src, 3, 3000, 1, 0, 0, NULL), DLC_OK, "%s", dlc_errmsg());
    enum { LEN = 13 * 20 };
    uint32_t pre[LEN + 1][3];
    memset(pre, 0, sizeof pre);
    for (uint64_t t = 0; t < LEN; t++) {
        uint32_t s;
        dlc__mix_at(&m, 0, t, &s, NULL);
        memcpy(pre[t + 1], pre[t], sizeof pre[t]);
        pre[t + 1][s]++;
    }
    double worst = 0;
    for (uint32_t s = 0; s < 3; s++)
        for (uint32_t b = 0; b <= LEN; b++) {
            cr_assert_lt(fabs(pre[b][s] - w[s] / 13 * b), 1.0, "source %u, prefix of %u", s, b);
            for (uint32_t a = 0; a < b; a++)
                worst = fmax(worst, fabs((double)(pre[b][s] - pre[a][s]) - w[s] / 13 * (b - a)));
        }
    cr_assert_lt(worst, 2.0);
    /* Above 1, as the search says every order must be somewhere. */
    cr_assert_gt(worst, 1.0);
    dlc__mix_free(&m);
}
