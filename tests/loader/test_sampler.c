/* The epoch's order and sharding: bijections, coverage across ranks, DistributedSampler's
 * padding, and weighted proportions. Pure functions: no store needed. */
#include "sampler.h"

#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

static void assert_permutation(const dlc__sampler *s)
{
    uint8_t *seen = calloc(s->count, 1);
    for (uint64_t p = 0; p < s->count; p++) {
        const uint64_t r = dlc__sampler_at(s, p);
        cr_assert_lt(r, s->count);
        cr_assert_eq(seen[r], 0, "record %llu twice (n=%llu)", (unsigned long long)r,
                     (unsigned long long)s->count);
        seen[r] = 1;
    }
    free(seen);
}

Test(sampler, feistel_is_a_bijection_with_a_working_inverse)
{
    const uint64_t sizes[] = {1, 2, 3, 5, 16, 17, 1000, 4097, 65537};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        dlc__perm p;
        dlc__perm_init(&p, sizes[k], 1234 + k);
        uint8_t *seen = calloc(sizes[k], 1);
        for (uint64_t i = 0; i < sizes[k]; i++) {
            const uint64_t j = dlc__perm_apply(&p, i);
            cr_assert_lt(j, sizes[k]);
            cr_assert_eq(seen[j], 0);
            seen[j] = 1;
            cr_assert_eq(dlc__perm_invert(&p, j), i);
        }
        free(seen);
    }
}

Test(sampler, shuffle_and_quasi_random_are_permutations)
{
    const uint64_t sizes[] = {1, 7, 64, 65, 1000, 5000};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        for (uint32_t kind = 0; kind <= DLC_SAMPLER_QUASI_RANDOM; kind++) {
            if (kind == DLC_SAMPLER_WEIGHTED)
                continue;
            dlc__sampler s;
            cr_assert_eq(dlc__sampler_init(&s, kind, sizes[k], 0, 16, NULL, 0, NULL), DLC_OK);
            dlc__sampler_set_epoch(&s, 7, 3);
            assert_permutation(&s);
            dlc__sampler_free(&s);
        }
    }
}

Test(sampler, sequential_is_the_identity)
{
    dlc__sampler s;
    cr_assert_eq(dlc__sampler_init(&s, DLC_SAMPLER_SEQUENTIAL, 100, 0, 0, NULL, 0, NULL), DLC_OK);
    for (uint64_t p = 0; p < 100; p++)
        cr_assert_eq(dlc__sampler_at(&s, p), p);
    cr_assert_eq(dlc__sampler_at(&s, 103), 3, "padding repeats the order from its start");
}

static int same_order(dlc__sampler *s, uint64_t e1, uint64_t e2)
{
    int same = 1;
    dlc__sampler_set_epoch(s, 1, e1);
    uint64_t *a = malloc(s->count * sizeof *a);
    for (uint64_t p = 0; p < s->count; p++)
        a[p] = dlc__sampler_at(s, p);
    dlc__sampler_set_epoch(s, 1, e2);
    for (uint64_t p = 0; p < s->count; p++)
        same &= a[p] == dlc__sampler_at(s, p);
    free(a);
    return same;
}

Test(sampler, epochs_give_different_orders_and_the_same_epoch_the_same)
{
    for (uint32_t kind = DLC_SAMPLER_SHUFFLE; kind <= DLC_SAMPLER_QUASI_RANDOM; kind += 2) {
        dlc__sampler s;
        cr_assert_eq(dlc__sampler_init(&s, kind, 1000, 0, 8, NULL, 0, NULL), DLC_OK);
        cr_assert(same_order(&s, 4, 4));
        cr_assert_not(same_order(&s, 4, 5));
        cr_assert_not(same_order(&s, 0, 1));
        dlc__sampler_free(&s);
    }
}

Test(sampler, quasi_random_keeps_groups_together)
{
    /* Within a window the records come from whole groups: sorting a window's records gives
     * runs of exactly `group` consecutive numbers (except at the short last group). */
    dlc__sampler s;
    cr_assert_eq(dlc__sampler_init(&s, DLC_SAMPLER_QUASI_RANDOM, 64 * 40, 0, 64, NULL, 0, NULL),
                 DLC_OK);
    dlc__sampler_set_epoch(&s, 9, 0);
    uint64_t groups_hit[40] = {0};
    for (uint64_t p = 0; p < s.window; p++)
        groups_hit[dlc__sampler_at(&s, p) / 64]++;
    int full = 0;
    for (int g = 0; g < 40; g++) {
        cr_assert(groups_hit[g] == 0 || groups_hit[g] == 64);
        full += groups_hit[g] == 64;
    }
    cr_assert_eq(full, 16);
}

Test(sampler, first_position_of_imagenet_sized_store_is_constant_time)
{
    /* No per-epoch array: positions deep into a 1,281,167-record order cost the same. */
    dlc__sampler s;
    cr_assert_eq(dlc__sampler_init(&s, DLC_SAMPLER_SHUFFLE, 1281167, 0, 0, NULL, 0, NULL), DLC_OK);
    dlc__sampler_set_epoch(&s, 1, 1);
    uint8_t *seen = calloc(1281167, 1);
    for (uint64_t p = 0; p < 1281167; p++) {
        const uint64_t r = dlc__sampler_at(&s, p);
        cr_assert(r < 1281167 && !seen[r]);
        seen[r] = 1;
    }
    free(seen);
}

/* Every rank's positions, as DistributedSampler gives them. */
static void check_sharding(uint64_t len, uint32_t world, uint32_t batch, int drop_last)
{
    dlc__sampler s;
    cr_assert_eq(dlc__sampler_init(&s, DLC_SAMPLER_SHUFFLE, len, 0, 0, NULL, 0, NULL), DLC_OK);
    dlc__sampler_set_epoch(&s, 5, 2);
    uint32_t *hits = calloc(len, sizeof *hits);
    uint64_t total = 0, per_rank0 = 0;
    for (uint32_t r = 0; r < world; r++) {
        dlc__shard sh;
        dlc__shard_plan(&sh, len, 0, r, world, batch, drop_last);
        if (r == 0)
            per_rank0 = sh.per_rank;
        cr_assert_eq(sh.per_rank, per_rank0, "every rank gets as many samples");
        for (uint64_t j = 0; j < sh.per_rank; j++)
            hits[dlc__sampler_at(&s, dlc__shard_pos(&sh, j))]++;
        total += sh.per_rank;
        const uint64_t expect_batches =
            drop_last ? (len / world) / batch : ((len + world - 1) / world + batch - 1) / batch;
        cr_assert_eq(sh.batches, expect_batches);
    }
    if (!drop_last) {
        /* Padded to a multiple of world by repeating the order's first entries. */
        const uint64_t padded = (len + world - 1) / world * world;
        cr_assert_eq(total, padded);
        for (uint64_t p = 0; p < len; p++) {
            const uint64_t rec = dlc__sampler_at(&s, p);
            const uint32_t expect = 1 + (p < padded - len);
            cr_assert_eq(hits[rec], expect, "record at position %llu seen %u times",
                         (unsigned long long)p, hits[rec]);
        }
    } else {
        uint64_t seen = 0;
        for (uint64_t i = 0; i < len; i++) {
            cr_assert_leq(hits[i], 1);
            seen += hits[i];
        }
        cr_assert_eq(seen, total);
        cr_assert_eq(total, (len / world) / batch * batch * world);
    }
    free(hits);
}

Test(sampler, every_sample_once_per_epoch_across_ranks_with_padding)
{
    const uint32_t worlds[] = {1, 3, 4};
    for (int w = 0; w < 3; w++)
        for (int drop = 0; drop < 2; drop++) {
            check_sharding(101, worlds[w], 8, drop);
            check_sharding(96, worlds[w], 8, drop);
            check_sharding(2, worlds[w], 3, drop);
        }
}

Test(sampler, weighted_draws_reach_the_asked_class_proportions)
{
    /* 3 classes with 100, 200 and 700 records; weights 6, 2, 0.5 per record: class masses
     * 600, 400, 350 of 1350. Over 200,000 draws the standard error of a proportion is below
     * 0.0012, so 0.01 is a tolerance of more than 8 sigma. */
    const uint64_t n = 1000;
    int64_t *labels = malloc(n * sizeof *labels);
    for (uint64_t i = 0; i < n; i++)
        labels[i] = i < 100 ? 0 : i < 300 ? 1 : 2;
    const double weights[3] = {6, 2, 0.5};
    dlc__sampler s;
    cr_assert_eq(dlc__sampler_init(&s, DLC_SAMPLER_WEIGHTED, n, 200000, 0, labels, 3, weights),
                 DLC_OK);
    dlc__sampler_set_epoch(&s, 3, 0);
    cr_assert_eq(s.len, 200000);
    uint64_t counts[3] = {0};
    for (uint64_t p = 0; p < s.len; p++) {
        const uint64_t r = dlc__sampler_at(&s, p);
        cr_assert_lt(r, n);
        counts[labels[r]]++;
    }
    const double expect[3] = {600.0 / 1350, 400.0 / 1350, 350.0 / 1350};
    for (int c = 0; c < 3; c++)
        cr_assert_float_eq((double)counts[c] / s.len, expect[c], 0.01, "class %d: %f vs %f", c,
                           (double)counts[c] / s.len, expect[c]);
    dlc__sampler_free(&s);
    free(labels);
}

Test(sampler, weighted_rejects_bad_weights)
{
    int64_t labels[4] = {0, 1, 0, 1};
    const double zero[2] = {0, 0}, neg[2] = {1, -1};
    dlc__sampler s;
    cr_assert_eq(dlc__sampler_init(&s, DLC_SAMPLER_WEIGHTED, 4, 0, 0, labels, 2, zero), DLC_EINVAL);
    cr_assert_eq(dlc__sampler_init(&s, DLC_SAMPLER_WEIGHTED, 4, 0, 0, labels, 2, neg), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "class_weights[1]"));
    /* No labels or weights at all, and a label out of range: refused before or after the
     * tables are allocated, with nothing leaked (ASan runs this). */
    const double one[2] = {1, 1};
    cr_assert_eq(dlc__sampler_init(&s, DLC_SAMPLER_WEIGHTED, 4, 0, 0, NULL, 2, one), DLC_EINVAL);
    labels[2] = 2;
    cr_assert_eq(dlc__sampler_init(&s, DLC_SAMPLER_WEIGHTED, 4, 0, 0, labels, 2, one),
                 DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "record 2: label 2 is not below 2"), "%s", dlc_errmsg());
}

Test(sampler, rng_below_stays_in_range_and_covers_it)
{
    dlc__rng r = {99, 0};
    int seen[7] = {0};
    for (int i = 0; i < 7000; i++) {
        const uint64_t v = dlc__rng_below(&r, 7);
        cr_assert_lt(v, 7);
        seen[v]++;
    }
    for (int i = 0; i < 7; i++)
        cr_assert_gt(seen[i], 800);
}

/* Repeated augmentation, as torchvision's RASampler builds it: the order with each record
 * repeated, padded from its start, dealt by stride: every rank's j-th sample is what the
 * RASampler's list holds at rank + j * world. */
Test(sampler, repeats_deal_each_record_to_consecutive_positions_as_rasampler)
{
    const uint32_t kinds[] = {DLC_SAMPLER_SEQUENTIAL, DLC_SAMPLER_SHUFFLE,
                              DLC_SAMPLER_QUASI_RANDOM};
    const uint64_t counts[] = {1, 10, 101, 1000};
    const uint32_t reps[] = {2, 3, 4};
    for (size_t k = 0; k < 3; k++)
        for (size_t c = 0; c < 4; c++)
            for (size_t r = 0; r < 3; r++) {
                const uint64_t n = counts[c];
                dlc__sampler plain, rep;
                cr_assert_eq(dlc__sampler_init(&plain, kinds[k], n, 0, 16, NULL, 0, NULL), DLC_OK);
                cr_assert_eq(dlc__sampler_init(&rep, kinds[k], n, 0, 16, NULL, 0, NULL), DLC_OK);
                rep.repeats = reps[r];
                dlc__sampler_set_epoch(&plain, 5, 2);
                dlc__sampler_set_epoch(&rep, 5, 2);
                /* The RASampler's list, n + world - 1 long at most (the most any world size
                 * pads): the order with each entry repeated, from its start again after
                 * n * reps entries. */
                const uint64_t total = n + 8;
                uint64_t *list = malloc(total * sizeof *list);
                for (uint64_t p = 0; p < total; p++)
                    list[p] = dlc__sampler_at(&plain, p / reps[r] % n);
                for (uint32_t world = 1; world <= 8; world *= 2)
                    for (uint32_t rank = 0; rank < world; rank++) {
                        dlc__shard sh;
                        dlc__shard_plan(&sh, rep.len, 0, rank, world, 4, 0);
                        for (uint64_t j = 0; j < sh.per_rank; j++)
                            cr_assert_eq(dlc__sampler_at(&rep, dlc__shard_pos(&sh, j)),
                                         list[rank + j * world],
                                         "kind %u n %llu reps %u world %u rank %u j %llu", kinds[k],
                                         (unsigned long long)n, reps[r], world, rank,
                                         (unsigned long long)j);
                    }
                /* Each record of the order's first ceil(n / reps) holds reps positions (the
                 * last fewer when reps does not divide n), the rest none. */
                uint32_t *hits = calloc(n, sizeof *hits);
                for (uint64_t p = 0; p < n; p++)
                    hits[dlc__sampler_at(&rep, p)]++;
                const uint64_t distinct = (n + reps[r] - 1) / reps[r];
                for (uint64_t q = 0; q < distinct; q++) {
                    const uint64_t rec = dlc__sampler_at(&plain, q);
                    const uint64_t want = q + 1 < distinct ? reps[r] : n - q * reps[r];
                    cr_assert_eq(hits[rec], want, "n %llu reps %u: order[%llu] held %u",
                                 (unsigned long long)n, reps[r], (unsigned long long)q, hits[rec]);
                }
                free(hits);
                free(list);
                dlc__sampler_free(&plain);
                dlc__sampler_free(&rep);
            }
}
