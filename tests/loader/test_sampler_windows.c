/* The shard-window order (DLC_SAMPLER_SHARD_WINDOWS): every record once per epoch (and the
 * padding from the stream's last window), windows that hold the shards they say, ranks that read
 * disjoint shards, resume into another world size, and the shuffle's quality. Pure functions: no
 * store needed. */
#include "sampler.h"

#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

/* firsts[] of @p n shards of @p each records, with shard @p empty (if < n) holding none. */
static uint64_t *make_firsts(uint32_t n, uint64_t each, uint32_t empty)
{
    uint64_t *f = malloc((n + 1) * sizeof *f);
    f[0] = 0;
    for (uint32_t k = 0; k < n; k++)
        f[k + 1] = f[k] + (k == empty ? 0 : each + k % 3); /* Unequal sizes on purpose. */
    return f;
}

static dlc__sampler make(uint32_t n, uint64_t each, uint32_t empty, uint32_t window,
                         uint32_t streams, uint64_t **firsts)
{
    dlc__sampler s;
    *firsts = make_firsts(n, each, empty);
    cr_assert_eq(dlc__sampler_init_windows(&s, *firsts, n, window, streams), DLC_OK, "%s",
                 dlc_errmsg());
    return s;
}

Test(sampler_windows, every_record_once_per_epoch_and_the_padding_from_the_last_window)
{
    const uint32_t shapes[][3] = {{1, 1, 1}, {7, 2, 1}, {7, 3, 3}, {16, 4, 4}, {5, 8, 9}};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        uint64_t *f;
        dlc__sampler s = make(shapes[c][0], 50, 2, shapes[c][1], shapes[c][2], &f);
        for (uint64_t epoch = 0; epoch < 3; epoch++) {
            dlc__sampler_set_epoch(&s, 7, epoch);
            uint32_t *seen = calloc(s.count, sizeof *seen);
            cr_assert_geq(s.len, s.count);
            for (uint64_t p = 0; p < s.len; p++) {
                const uint64_t r = dlc__sampler_at(&s, p);
                cr_assert_lt(r, s.count);
                seen[r]++;
            }
            uint64_t extra = 0;
            for (uint64_t r = 0; r < s.count; r++) {
                cr_assert_geq(seen[r], 1, "case %zu epoch %llu: record %llu never read", c,
                              (unsigned long long)epoch, (unsigned long long)r);
                extra += seen[r] - 1;
            }
            cr_assert_eq(extra, s.len - s.count);
            /* The streams differ by less than one shard (each is at most 52 records). */
            cr_assert_lt(s.len - s.count, (uint64_t)dlc__swin_streams(s.swin) * 52);
            free(seen);
        }
        dlc__sampler_free(&s);
        free(f);
    }
}

Test(sampler_windows, a_pure_function_of_seed_and_epoch)
{
    uint64_t *fa, *fb;
    dlc__sampler a = make(12, 40, 99, 3, 2, &fa), b = make(12, 40, 99, 3, 2, &fb);
    dlc__sampler_set_epoch(&a, 1, 5);
    dlc__sampler_set_epoch(&b, 1, 4); /* Another epoch first: no state carries over. */
    dlc__sampler_set_epoch(&b, 1, 5);
    uint64_t differ = 0;
    for (uint64_t p = 0; p < a.len; p++)
        cr_assert_eq(dlc__sampler_at(&a, p), dlc__sampler_at(&b, p));
    dlc__sampler_set_epoch(&b, 1, 6);
    for (uint64_t p = 0; p < a.len && p < b.len; p++)
        differ += dlc__sampler_at(&a, p) != dlc__sampler_at(&b, p);
    cr_assert_gt(differ, a.len / 2, "epochs 5 and 6 share most positions");
    dlc__sampler_free(&a), dlc__sampler_free(&b);
    free(fa), free(fb);
}

Test(sampler_windows, a_window_reads_its_shards_only)
{
    /* One stream, window 3: positions [0, first window) use at most 3 shards, and so on; the
     * shards of consecutive windows differ. */
    uint64_t *f;
    dlc__sampler s = make(12, 40, 99, 3, 1, &f);
    dlc__sampler_set_epoch(&s, 3, 0);
    uint32_t shards_seen[12] = {0};
    uint64_t p = 0;
    int windows = 0;
    while (p < s.count) {
        /* The window starting at p: collect shards until 3 distinct ones are exhausted. */
        uint32_t in[3], n = 0;
        uint64_t records = 0;
        /* The window's records are the records of its shards: find them from the first one. */
        for (uint64_t q = p; q < s.count; q++) {
            const uint32_t k = dlc__swin_shard_of(s.swin, dlc__sampler_at(&s, q));
            int known = 0;
            for (uint32_t i = 0; i < n; i++)
                known |= in[i] == k;
            if (!known) {
                if (n == 3)
                    break;
                in[n++] = k;
                records += f[k + 1] - f[k];
            }
        }
        /* Every position of the window is from its shards, and the window is exactly them. */
        for (uint64_t q = p; q < p + records; q++) {
            const uint32_t k = dlc__swin_shard_of(s.swin, dlc__sampler_at(&s, q));
            cr_assert(k == in[0] || (n > 1 && k == in[1]) || (n > 2 && k == in[2]),
                      "position %llu reads shard %u, outside its window", (unsigned long long)q, k);
            shards_seen[k]++;
        }
        p += records;
        windows++;
    }
    cr_assert_eq(p, s.count);
    cr_assert_eq(windows, 4);
    for (uint32_t k = 0; k < 12; k++)
        cr_assert_eq(shards_seen[k], f[k + 1] - f[k]);
    dlc__sampler_free(&s);
    free(f);
}

Test(sampler_windows, ranks_of_a_world_that_divides_the_streams_read_disjoint_shards)
{
    uint64_t *f;
    dlc__sampler s = make(24, 30, 99, 2, 4, &f);
    for (uint32_t world = 1; world <= 4; world *= 2) {
        dlc__sampler_set_epoch(&s, 11, 2);
        int owner[24];
        memset(owner, -1, sizeof owner);
        for (uint32_t r = 0; r < world; r++) {
            dlc__shard sh;
            dlc__shard_plan(&sh, s.len, 0, r, world, 16, 0);
            for (uint64_t j = 0; j < sh.per_rank; j++) {
                const uint64_t rec = dlc__sampler_at(&s, dlc__shard_pos(&sh, j));
                const uint32_t k = dlc__swin_shard_of(s.swin, rec);
                cr_assert(owner[k] == -1 || owner[k] == (int)r,
                          "world %u: shard %u read by ranks %d and %u", world, k, owner[k], r);
                owner[k] = (int)r;
            }
        }
        for (uint32_t k = 0; k < 24; k++)
            cr_assert_neq(owner[k], -1, "world %u: shard %u never read", world, k);
    }
    dlc__sampler_free(&s);
    free(f);
}

Test(sampler_windows, resume_into_another_world_size_gives_the_rest_exactly_once)
{
    uint64_t *f;
    dlc__sampler s = make(10, 37, 99, 2, 4, &f);
    dlc__sampler_set_epoch(&s, 5, 1);
    uint32_t *seen = calloc(s.len, sizeof *seen); /* By position: each once. */
    /* 4 ranks consume 3 batches of 8 each; the state says position 3 * 8 * 4. */
    const uint64_t consumed = 3 * 8 * 4;
    for (uint32_t r = 0; r < 4; r++) {
        dlc__shard sh;
        dlc__shard_plan(&sh, s.len, 0, r, 4, 8, 0);
        for (uint64_t j = 0; j < 3 * 8; j++)
            seen[dlc__shard_pos(&sh, j)]++;
    }
    /* 3 ranks take the rest. */
    for (uint32_t r = 0; r < 3; r++) {
        dlc__shard sh;
        dlc__shard_plan(&sh, s.len, consumed, r, 3, 8, 1);
        for (uint64_t j = 0; j < sh.per_rank; j++)
            seen[dlc__shard_pos(&sh, j)]++;
    }
    uint64_t twice = 0, never = 0;
    for (uint64_t p = 0; p < s.len; p++)
        twice += seen[p] > 1, never += seen[p] == 0;
    cr_assert_eq(twice, 0);
    cr_assert_lt(never, 3 * 8, "drop_last cuts less than one batch per rank"); /* The cut tail. */
    free(seen);
    dlc__sampler_free(&s);
    free(f);
}

Test(sampler_windows, empty_shards_and_more_streams_than_shards)
{
    uint64_t *f;
    dlc__sampler s = make(3, 20, 1, 4, 10, &f); /* Shard 1 is empty: 2 streams in effect. */
    cr_assert_eq(dlc__swin_streams(s.swin), 2);
    dlc__sampler_set_epoch(&s, 0, 0);
    for (uint64_t p = 0; p < s.len; p++)
        cr_assert_neq(dlc__swin_shard_of(s.swin, dlc__sampler_at(&s, p)), 1);
    dlc__sampler_free(&s);
    free(f);
    uint64_t zero[3] = {0, 0, 0};
    dlc__sampler t;
    cr_assert_eq(dlc__sampler_init_windows(&t, zero, 2, 4, 1), DLC_EINVAL);
    uint64_t one[2] = {0, 5};
    cr_assert_eq(dlc__sampler_init_windows(&t, one, 1, 0, 1), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "window_shards"), "%s", dlc_errmsg());
    cr_assert_eq(dlc__sampler_init_windows(&t, one, 1, 1, 4096), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "streams"), "%s", dlc_errmsg());
}

Test(sampler_windows, two_samples_of_a_batch_share_a_shard_about_one_in_window_times_streams)
{
    /* Label-ordered data, one label per shard: two samples of one batch come from one shard (and
     * share its label) with a chance near 1 / (window x streams read by the rank). */
    const uint32_t windows[] = {2, 4, 8};
    const uint32_t batch = 64;
    for (size_t i = 0; i < 3; i++) {
        for (uint32_t streams = 1; streams <= 2; streams++) {
            uint64_t *f;
            dlc__sampler s = make(64, 200, 99, windows[i], streams, &f);
            dlc__sampler_set_epoch(&s, 9, 0);
            uint64_t same = 0, pairs = 0;
            uint32_t k[64];
            for (uint64_t b = 0; b + batch <= s.len; b += batch) {
                for (uint32_t j = 0; j < batch; j++)
                    k[j] = dlc__swin_shard_of(s.swin, dlc__sampler_at(&s, b + j));
                for (uint32_t x = 0; x < batch; x++)
                    for (uint32_t y = x + 1; y < batch; y++)
                        same += k[x] == k[y], pairs++;
            }
            const double got = (double)same / (double)pairs;
            const double want = 1.0 / windows[i] / streams;
            cr_assert(got > want * 0.7 && got < want * 1.3,
                      "window %u, %u streams: %.4f of a batch's pairs share a shard, expected "
                      "about %.4f",
                      windows[i], streams, got, want);
            dlc__sampler_free(&s);
            free(f);
        }
    }
}

/* dlc__swin_plan(), the plan of a large share from its windows (issue 32, item 5): for every
 * shard, its first and last sample span at least those a walk of every record finds, so a plan
 * from it lists every shard a walk lists and holds each as long. */
Test(sampler_windows, the_plan_from_the_windows_covers_every_read_of_a_walk)
{
    const uint32_t shapes[][3] = {{1, 1, 1},  {7, 2, 1}, {7, 3, 3},
                                  {16, 4, 4}, {5, 8, 9}, {9, 1, 4}};
    const uint32_t worlds[] = {1, 2, 3, 5};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        uint64_t *f;
        dlc__sampler s = make(shapes[c][0], 30, 2, shapes[c][1], shapes[c][2], &f);
        const uint32_t n = shapes[c][0];
        uint64_t *ef = malloc(n * sizeof *ef), *el = malloc(n * sizeof *el);
        uint64_t *af = malloc(n * sizeof *af), *al = malloc(n * sizeof *al);
        for (uint64_t epoch = 0; epoch < 2; epoch++) {
            dlc__sampler_set_epoch(&s, 11, epoch);
            for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; wi++) {
                const uint32_t world = worlds[wi];
                const uint64_t starts[] = {0, s.len / 3, s.len - 1};
                for (size_t si = 0; si < 3; si++) {
                    for (uint32_t rank = 0; rank < world; rank++) {
                        dlc__shard sh;
                        dlc__shard_plan(&sh, s.len, starts[si], rank, world, 4, 0);
                        for (uint32_t k = 0; k < n; k++)
                            ef[k] = UINT64_MAX, el[k] = 0;
                        for (uint64_t j = 0; j < sh.per_rank; j++) {
                            const uint64_t r = dlc__sampler_at(&s, dlc__shard_pos(&sh, j));
                            const uint32_t k = dlc__swin_shard_of(s.swin, r);
                            ef[k] = j < ef[k] ? j : ef[k];
                            el[k] = j > el[k] ? j : el[k];
                        }
                        dlc__swin_plan(s.swin, s.len, sh.start, rank, world, sh.per_rank, af, al);
                        for (uint32_t k = 0; k < n; k++) {
                            if (ef[k] == UINT64_MAX)
                                continue;
                            cr_assert_leq(af[k], ef[k],
                                          "case %zu world %u start %llu rank %u shard %u: "
                                          "first %llu, a walk %llu",
                                          c, world, (unsigned long long)starts[si], rank, k,
                                          (unsigned long long)af[k], (unsigned long long)ef[k]);
                            cr_assert_geq(al[k], el[k],
                                          "case %zu world %u start %llu rank %u shard %u: "
                                          "last %llu, a walk %llu",
                                          c, world, (unsigned long long)starts[si], rank, k,
                                          (unsigned long long)al[k], (unsigned long long)el[k]);
                            cr_assert_lt(al[k], sh.per_rank);
                        }
                        /* One rank of one: each shard's span is its window's, which a walk
                         * reaches at both ends (a window's records are permuted together). */
                        if (world == 1 && starts[si] == 0) {
                            uint64_t wide = 0, walk = 0;
                            for (uint32_t k = 0; k < n; k++) {
                                cr_assert((af[k] == UINT64_MAX) == (ef[k] == UINT64_MAX));
                                if (ef[k] != UINT64_MAX)
                                    wide += al[k] - af[k], walk += el[k] - ef[k];
                            }
                            /* Not everything for every shard: about the walk's spans. */
                            cr_assert_leq(wide, walk + walk / 4 + 8u * n, "case %zu: %llu, %llu", c,
                                          (unsigned long long)wide, (unsigned long long)walk);
                        }
                    }
                }
            }
        }
        free(ef), free(el), free(af), free(al);
        dlc__sampler_free(&s);
        free(f);
    }
}
