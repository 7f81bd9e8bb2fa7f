/* A loader over a mixture of stores and sets (loader/mix.c): shares and labels per source,
 * identical batches across threads and prefetch, a state that resumes exactly, resumes under new
 * weights with a source added (every source's passes whole), and the refusals that name the
 * source. Real stores in a temporary directory. */
#include "loader_fixture.h"
#include "set_fixture.h"

#include <criterion/criterion.h>
#include <dlcache/loader.h>
#include <math.h>

#define CLASSES 5u

typedef struct mixdir {
    char *dir;
    char *path[4];
    uint64_t count[4];
} mixdir;

/* Three stores of 40, 25 and 15 records (4 x 4 pixels, label i % CLASSES), and a set of 30
 * records of another schema (set_fixture.h). */
static mixdir make_mix(void)
{
    mixdir m = {tu_mkdtemp(), {0}, {40, 25, 15, 30}};
    cr_assert_not_null(m.dir);
    const char *names[] = {"a.dlc", "b.dlc", "c.dlc"};
    for (int i = 0; i < 3; i++) {
        m.path[i] = tu_path(m.dir, names[i]);
        cr_assert_eq(tu_make_store(m.path[i], m.count[i], 4, 4, CLASSES, 0), DLC_OK, "%s",
                     dlc_errmsg());
    }
    m.path[3] = tu_path(m.dir, "other");
    cr_assert_eq(sf_make_set(m.path[3], 30, 2, 7, NULL), DLC_OK, "%s", dlc_errmsg());
    return m;
}

static void free_mix(mixdir *m)
{
    tu_rmtree(m->dir);
    free(m->dir);
    for (int i = 0; i < 4; i++)
        free(m->path[i]);
}

static dlc_loader_config mix_config(void)
{
    dlc_loader_config c = fx_config();
    c.crop_h = c.crop_w = 4;
    c.batch_size = 10;
    return c;
}

static dlc_loader *open_mix(const mixdir *m, const uint32_t *which, const double *w, uint32_t n,
                            uint64_t per_epoch, const dlc_loader_config *c)
{
    dlc_mix_source src[4];
    for (uint32_t i = 0; i < n; i++) {
        dlc_mix_source_init(&src[i]);
        src[i].path = m->path[which[i]];
        src[i].weight = w[i];
        src[i].label_offset = 100 * which[i];
    }
    dlc_mix_options o;
    dlc_mix_options_init(&o);
    o.samples_per_epoch = per_epoch;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open_mix(src, n, &o, c, &l), DLC_OK, "%s", dlc_errmsg());
    return l;
}

/* Source of global record @p g, and its number within the source. */
static uint32_t source_of(dlc_loader *l, uint64_t g, uint64_t *local)
{
    for (uint32_t s = 0; s < dlc_loader_num_sources(l); s++) {
        dlc_mix_source_info in = {.struct_size = sizeof in};
        cr_assert_eq(dlc_loader_source_info(l, s, &in), DLC_OK, "%s", dlc_errmsg());
        if (g >= in.first && g < in.first + in.count) {
            *local = g - in.first;
            return s;
        }
    }
    cr_assert_fail("record %llu is in no source", (unsigned long long)g);
    return 0;
}

Test(loader_mix, shares_labels_and_every_batch)
{
    mixdir m = make_mix();
    const uint32_t which[] = {0, 1};
    const double w[] = {0.7, 0.3};
    dlc_loader_config c = mix_config();
    dlc_loader *l = open_mix(&m, which, w, 2, 100, &c);
    cr_assert_eq(dlc_loader_batches_per_epoch(l), 10);
    cr_assert_eq(dlc_store_get_info(dlc_loader_store(l))->count, 65);
    dlc_batch b;
    uint32_t total[2] = {0};
    while (dlc_loader_next(l, &b) == DLC_OK) {
        uint32_t in_batch[2] = {0};
        for (uint32_t i = 0; i < b.count; i++) {
            uint64_t local;
            const uint32_t s = source_of(l, b.indices[i], &local);
            in_batch[s]++;
            cr_assert_eq(b.labels[i], (int64_t)(local % CLASSES) + 100 * which[s],
                         "source %u record %llu", s, (unsigned long long)local);
        }
        cr_assert_eq(in_batch[0], 7, "a batch of 10 holds 7 of the source of weight 0.7");
        /* The label field's own output carries the offset too. */
        for (uint32_t f = 0; f < b.num_fields; f++)
            if (!strcmp(b.fields[f].name, "label"))
                cr_assert_eq(memcmp(b.fields[f].data, b.labels, b.count * sizeof *b.labels), 0);
        total[0] += in_batch[0], total[1] += in_batch[1];
    }
    cr_assert_eq(total[0], 70);
    cr_assert_eq(total[1], 30);
    dlc_mix_source_info in = {.struct_size = sizeof in};
    cr_assert_eq(dlc_loader_source_info(l, 1, &in), DLC_OK);
    cr_assert_eq(in.epoch_samples, 30);
    cr_assert_eq(in.count, 25);
    cr_assert_eq(in.quota, 3);
    cr_assert_eq(in.period, 10);
    dlc_loader_close(l);
    free_mix(&m);
}

Test(loader_mix, identical_across_threads_and_prefetch)
{
    mixdir m = make_mix();
    const uint32_t which[] = {0, 1, 2};
    const double w[] = {0.5, 0.3, 0.2};
    dlc_loader_config c = mix_config();
    c.threads = 1, c.prefetch = 1;
    dlc_loader *a = open_mix(&m, which, w, 3, 0, &c);
    c.threads = 3, c.prefetch = 4;
    dlc_loader *b = open_mix(&m, which, w, 3, 0, &c);
    c.io = DLC_IO_DIRECT; /* O_DIRECT reads of every source's file. */
    dlc_loader *d = open_mix(&m, which, w, 3, 0, &c);
    for (uint64_t e = 0; e < 2; e++) {
        cr_assert_eq(dlc_loader_set_epoch(a, e), DLC_OK);
        cr_assert_eq(dlc_loader_set_epoch(b, e), DLC_OK);
        cr_assert_eq(dlc_loader_set_epoch(d, e), DLC_OK);
        uint64_t na = 0, nb = 0;
        const uint64_t h = fx_epoch_hash(a, NULL, &na, 0);
        cr_assert_eq(h, fx_epoch_hash(b, NULL, &nb, 0));
        cr_assert_eq(h, fx_epoch_hash(d, NULL, NULL, 0));
        cr_assert_eq(na, 80);
        cr_assert_eq(nb, 80);
    }
    dlc_loader_stats st;
    dlc_loader_get_stats(d, &st);
    cr_assert_eq(st.io_mode, DLC_IO_DIRECT);
    dlc_loader_close(a);
    dlc_loader_close(b);
    dlc_loader_close(d);
    free_mix(&m);
}

/* The rest of the epoch, hashed. */
static uint64_t rest_hash(dlc_loader *l)
{
    return fx_epoch_hash(l, NULL, NULL, 0);
}

Test(loader_mix, a_state_resumes_exactly)
{
    mixdir m = make_mix();
    const uint32_t which[] = {0, 1, 2};
    const double w[] = {0.5, 0.3, 0.2};
    dlc_loader_config c = mix_config();
    /* 77 per epoch: the save falls mid-cycle (position 184 of the schedule, slot 4 of 10). */
    dlc_loader *a = open_mix(&m, which, w, 3, 77, &c);
    dlc_batch b;
    uint8_t st[DLC_LOADER_MIX_STATE_MAX];
    size_t n = 0;
    uint8_t old[DLC_LOADER_STATE_SIZE];
    cr_assert_eq(dlc_loader_state_save(a, old), DLC_EINVAL, "a mixture has its own state");
    cr_assert_eq(dlc_loader_set_epoch(a, 2), DLC_OK);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(dlc_loader_next(a, &b), DLC_OK);
    cr_assert_eq(dlc_loader_mix_state_save(a, st, sizeof st, &n), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(n, 80 + 3 * 40 + 8);
    const uint64_t want = rest_hash(a);
    dlc_loader_set_epoch(a, 3);
    const uint64_t want3 = rest_hash(a);
    dlc_loader *r = open_mix(&m, which, w, 3, 77, &c);
    cr_assert_eq(dlc_loader_mix_state_restore(r, st, n), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(rest_hash(r), want);
    dlc_loader_set_epoch(r, 3);
    cr_assert_eq(rest_hash(r), want3);
    st[20] ^= 1;
    cr_assert_eq(dlc_loader_mix_state_restore(r, st, n), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "checksum"), "%s", dlc_errmsg());
    dlc_loader_close(a);
    dlc_loader_close(r);
    free_mix(&m);
}

/* Each source's records in the order the loader delivered them (world 1: its draw order), cut
 * into passes of its count: every pass but the last a permutation, the last without repeats. */
static void check_passes(uint64_t *seq, uint64_t n, uint64_t count, uint32_t s)
{
    uint8_t *seen = calloc(count, 1);
    for (uint64_t i = 0; i < n; i++) {
        if (i % count == 0)
            memset(seen, 0, count);
        cr_assert_eq(seen[seq[i]], 0, "source %u: record %llu twice in pass %llu", s,
                     (unsigned long long)seq[i], (unsigned long long)(i / count));
        seen[seq[i]] = 1;
    }
    free(seen);
}

Test(loader_mix, resume_with_new_weights_and_a_source_added_keeps_passes_whole)
{
    mixdir m = make_mix();
    const uint32_t w2[] = {0, 1}, w3[] = {1, 0, 2};
    const double first[] = {0.7, 0.3}, then[] = {0.3, 0.7, 0.5};
    dlc_loader_config c = mix_config();
    c.threads = 2;
    dlc_loader *a = open_mix(&m, w2, first, 2, 0, &c);
    uint64_t *seq[3];
    uint64_t nseq[3] = {0};
    for (int s = 0; s < 3; s++)
        seq[s] = calloc(4096, sizeof **seq);
    dlc_batch b;
    /* Epoch 0 whole and 4 batches of epoch 1 at 0.7/0.3. */
    for (uint64_t e = 0; e < 2; e++) {
        dlc_loader_set_epoch(a, e);
        for (int i = 0; (e == 0 || i < 4) && dlc_loader_next(a, &b) == DLC_OK; i++)
            for (uint32_t j = 0; j < b.count; j++) {
                uint64_t local;
                const uint32_t s = source_of(a, b.indices[j], &local);
                seq[w2[s]][nseq[w2[s]]++] = local;
            }
    }
    uint8_t st[DLC_LOADER_MIX_STATE_MAX];
    size_t n = 0;
    cr_assert_eq(dlc_loader_mix_state_save(a, st, sizeof st, &n), DLC_OK);
    dlc_loader_close(a);
    /* The rest at 0.3/0.7 with a third source, listed in another order, for three epochs. */
    dlc_loader *r = open_mix(&m, w3, then, 3, 0, &c);
    cr_assert_eq(dlc_loader_mix_state_restore(r, st, n), DLC_OK, "%s", dlc_errmsg());
    for (uint64_t e = 1; e < 4; e++) {
        if (e > 1)
            dlc_loader_set_epoch(r, e);
        while (dlc_loader_next(r, &b) == DLC_OK)
            for (uint32_t j = 0; j < b.count; j++) {
                uint64_t local;
                const uint32_t s = source_of(r, b.indices[j], &local);
                seq[w3[s]][nseq[w3[s]]++] = local;
            }
    }
    for (uint32_t s = 0; s < 3; s++) {
        cr_assert_gt(nseq[s], m.count[s], "source %u: more than a pass", s);
        check_passes(seq[s], nseq[s], m.count[s], s);
        free(seq[s]);
    }
    dlc_loader_close(r);
    free_mix(&m);
}

Test(loader_mix, refusals_name_the_source)
{
    mixdir m = make_mix();
    dlc_loader_config c = mix_config();
    dlc_mix_source src[2];
    dlc_mix_source_init(&src[0]);
    dlc_mix_source_init(&src[1]);
    src[0].path = m.path[0];
    src[1].path = m.path[3];
    dlc_loader *l = NULL;
    /* Another schema. */
    cr_assert_eq(dlc_loader_open_mix(src, 2, NULL, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), m.path[3]) && strstr(dlc_errmsg(), "field"), "%s", dlc_errmsg());
    cr_assert_null(l);
    src[1].path = m.path[1];
    src[1].weight = NAN;
    cr_assert_eq(dlc_loader_open_mix(src, 2, NULL, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), m.path[1]) && strstr(dlc_errmsg(), "weight"), "%s",
              dlc_errmsg());
    src[1].weight = -1;
    cr_assert_eq(dlc_loader_open_mix(src, 2, NULL, &c, &l), DLC_EINVAL);
    src[0].weight = src[1].weight = 0;
    cr_assert_eq(dlc_loader_open_mix(src, 2, NULL, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "all 0"), "%s", dlc_errmsg());
    src[0].weight = src[1].weight = 1;
    src[1].path = "/nonexistent/x.dlc";
    cr_assert_neq(dlc_loader_open_mix(src, 2, NULL, &c, &l), DLC_OK);
    cr_assert(strstr(dlc_errmsg(), "/nonexistent/x.dlc"), "%s", dlc_errmsg());
    c.sampler = DLC_SAMPLER_QUASI_RANDOM;
    src[1].path = m.path[1];
    cr_assert_eq(dlc_loader_open_mix(src, 2, NULL, &c, &l), DLC_EINVAL);
    c.sampler = DLC_SAMPLER_SHUFFLE;
    c.aug_repeats = 3; /* Each position is a draw of the schedule: no repeats. */
    cr_assert_eq(dlc_loader_open_mix(src, 2, NULL, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "aug_repeats = 3") && strstr(dlc_errmsg(), "mixture"), "%s",
              dlc_errmsg());
    cr_assert_null(l);
    c.aug_repeats = 0;
    /* A source whose records changed since the save. */
    const uint32_t which[] = {0, 1};
    const double w[] = {1, 1};
    l = open_mix(&m, which, w, 2, 0, &c);
    dlc_batch b;
    cr_assert_eq(dlc_loader_next(l, &b), DLC_OK);
    uint8_t st[DLC_LOADER_MIX_STATE_MAX];
    size_t n = 0;
    cr_assert_eq(dlc_loader_mix_state_save(l, st, sizeof st, &n), DLC_OK);
    dlc_loader_close(l);
    cr_assert_eq(tu_make_store(m.path[1], 26, 4, 4, CLASSES, 0), DLC_OK, "%s", dlc_errmsg());
    l = open_mix(&m, which, w, 2, 0, &c);
    cr_assert_eq(dlc_loader_mix_state_restore(l, st, n), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), m.path[1]) && strstr(dlc_errmsg(), "changed"), "%s",
              dlc_errmsg());
    dlc_loader_close(l);
    free_mix(&m);
}

/* Streamed sources (s3://, gs://, https://) are taken beside local ones (tests/python/
 * test_mix.py streams them from s3rver, tests/e2e/mix_stream.sh from gs://): they need
 * config.cache_dir as a streamed set does, refused before anything is fetched, the URL redacted. */
Test(loader_mix, streamed_sources_need_a_cache)
{
    mixdir m = make_mix();
    dlc_loader_config c = mix_config();
    dlc_mix_source src[3];
    for (int i = 0; i < 3; i++)
        dlc_mix_source_init(&src[i]);
    src[0].path = m.path[0];
    src[1].path = "https://user:secret@127.0.0.1:1/sets/a";
    src[2].path = "s3://b/sets/b";
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open_mix(src, 3, NULL, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "cache_dir") && strstr(dlc_errmsg(), "127.0.0.1:1/sets/a") &&
                  !strstr(dlc_errmsg(), "secret"),
              "%s", dlc_errmsg());
    cr_assert_null(l);
    free_mix(&m);
}

Test(loader_mix, a_set_is_a_source)
{
    /* The set fixture's records as one source and its single store as another: the same
     * schema, files taken over from the set. */
    char *dir = tu_mkdtemp();
    char *set = tu_path(dir, "set"), *single = tu_path(dir, "single.dlc");
    cr_assert_eq(sf_make_set(set, 50, 3, 9, NULL), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(sf_make_single(single, 20, NULL), DLC_OK, "%s", dlc_errmsg());
    dlc_mix_source src[2];
    dlc_mix_source_init(&src[0]);
    dlc_mix_source_init(&src[1]);
    src[0].path = set, src[1].path = single;
    src[1].label_offset = 3;
    dlc_loader_config c = fx_config();
    c.crop_h = c.crop_w = 6;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open_mix(src, 2, NULL, &c, &l), DLC_OK, "%s", dlc_errmsg());
    const dlc_store *s = dlc_loader_store(l);
    cr_assert_eq(dlc_store_num_files(s), 4);
    cr_assert_eq(dlc_store_get_info(s)->num_labels, 6);
    cr_assert_str_eq(dlc_store_label_name(s, 4), "dog");
    uint64_t n = 0;
    fx_epoch_hash(l, NULL, &n, 0);
    cr_assert_eq(n, 70);
    dlc_loader_close(l);
    tu_rmtree(dir);
    free(dir), free(set), free(single);
}

/* Every record of @p l's batches until the epoch ends (or @p batches of them), by source. */
static void take(dlc_loader *l, const uint32_t *which, int batches, uint64_t **seq, uint64_t *nseq)
{
    dlc_batch b;
    for (int i = 0; (batches < 0 || i < batches) && dlc_loader_next(l, &b) == DLC_OK; i++)
        for (uint32_t j = 0; j < b.count; j++) {
            uint64_t local;
            const uint32_t s = source_of(l, b.indices[j], &local);
            seq[which[s]][nseq[which[s]]++] = local;
        }
}

Test(loader_mix, resume_from_two_ranks_into_three_and_into_one)
{
    /* Two ranks at 0.7/0.3 take 2 batches each of epoch 0; the state goes to 3 ranks at
     * 0.5/0.5 for the rest of the epoch and the next, then to 1 rank for one more. Records of a
     * source are counted per pass over all ranks: none twice before its pass ends. */
    mixdir m = make_mix();
    const uint32_t which[] = {0, 1};
    const double w1[] = {0.7, 0.3}, w2[] = {0.5, 0.5};
    dlc_loader_config c = mix_config();
    uint64_t *seq[2];
    uint64_t nseq[2] = {0};
    for (int s = 0; s < 2; s++)
        seq[s] = calloc(4096, sizeof **seq);
    dlc_loader *r2[2];
    c.world_size = 2;
    for (uint32_t r = 0; r < 2; r++) {
        c.rank = r;
        r2[r] = open_mix(&m, which, w1, 2, 0, &c);
        take(r2[r], which, 2, seq, nseq);
    }
    uint8_t st[DLC_LOADER_MIX_STATE_MAX], st1[DLC_LOADER_MIX_STATE_MAX];
    size_t n = 0, n1 = 0;
    cr_assert_eq(dlc_loader_mix_state_save(r2[0], st, sizeof st, &n), DLC_OK);
    dlc_loader_close(r2[0]), dlc_loader_close(r2[1]);
    c.world_size = 3;
    for (uint32_t r = 0; r < 3; r++) {
        c.rank = r;
        dlc_loader *l = open_mix(&m, which, w2, 2, 0, &c);
        cr_assert_eq(dlc_loader_mix_state_restore(l, st, n), DLC_OK, "%s", dlc_errmsg());
        take(l, which, -1, seq, nseq);
        cr_assert_eq(dlc_loader_set_epoch(l, 1), DLC_OK);
        take(l, which, -1, seq, nseq);
        if (r == 0)
            cr_assert_eq(dlc_loader_mix_state_save(l, st1, sizeof st1, &n1), DLC_OK);
        dlc_loader_close(l);
    }
    c.world_size = 1, c.rank = 0;
    dlc_loader *one = open_mix(&m, which, w2, 2, 0, &c);
    cr_assert_eq(dlc_loader_mix_state_restore(one, st1, n1), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_loader_set_epoch(one, 2), DLC_OK);
    take(one, which, -1, seq, nseq);
    dlc_loader_close(one);
    /* Across ranks the delivery order is not the draw order, so count per pass: the draws of a
     * source are numbered 0, 1, 2, ... over the run, and pass k holds draws k x count .. */
    for (uint32_t s = 0; s < 2; s++) {
        const uint64_t count = m.count[s], total = nseq[s];
        uint32_t *seen = calloc(count, sizeof *seen);
        for (uint64_t i = 0; i < total; i++)
            seen[seq[s][i]]++;
        const uint64_t full = total / count;
        uint64_t more = 0;
        for (uint64_t r = 0; r < count; r++) {
            cr_assert(seen[r] == full || seen[r] == full + 1, "source %u record %llu: %u of %llu",
                      s, (unsigned long long)r, seen[r], (unsigned long long)total);
            more += seen[r] == full + 1;
        }
        cr_assert_eq(more, total % count);
        cr_assert_gt(total, count);
        free(seen);
        free(seq[s]);
    }
    free_mix(&m);
}

Test(loader_mix, drop_last_skips_no_draw)
{
    /* 65 samples per epoch in batches of 10 over 2 ranks with drop_last: each epoch delivers 60
     * (the ranks' short batches cut), and the next epoch's draws follow on from exactly those:
     * over 4 epochs each source's records come in whole passes. */
    mixdir m = make_mix();
    const uint32_t which[] = {0, 1};
    const double w[] = {0.6, 0.4};
    dlc_loader_config c = mix_config();
    c.drop_last = 1;
    c.world_size = 2;
    uint64_t *seq[2][2];
    uint64_t nseq[2][2] = {{0}};
    for (uint32_t r = 0; r < 2; r++) {
        seq[r][0] = calloc(1024, sizeof **seq[r]);
        seq[r][1] = calloc(1024, sizeof **seq[r]);
        c.rank = r;
        dlc_loader *l = open_mix(&m, which, w, 2, 65, &c);
        cr_assert_eq(dlc_loader_batches_per_epoch(l), 3);
        for (uint64_t e = 0; e < 4; e++) {
            cr_assert_eq(dlc_loader_set_epoch(l, e), DLC_OK);
            take(l, which, -1, seq[r], nseq[r]);
        }
        dlc_loader_close(l);
    }
    for (uint32_t s = 0; s < 2; s++) {
        const uint64_t count = m.count[s];
        const uint64_t total = nseq[0][s] + nseq[1][s];
        uint32_t *seen = calloc(count, sizeof *seen);
        for (uint32_t r = 0; r < 2; r++)
            for (uint64_t i = 0; i < nseq[r][s]; i++)
                seen[seq[r][s][i]]++;
        cr_assert_eq(total, s == 0 ? 144 : 96, "source %u: %llu", s, (unsigned long long)total);
        for (uint64_t i = 0; i < count; i++)
            cr_assert(seen[i] == total / count || seen[i] == total / count + 1,
                      "source %u record %llu seen %u times in %llu draws", s, (unsigned long long)i,
                      seen[i], (unsigned long long)total);
        free(seen);
        free(seq[0][s]), free(seq[1][s]);
    }
    free_mix(&m);
}

/* Two epochs of @p l (epochs @p e and e + 1) as one digest. */
static uint64_t two_epochs(dlc_loader *l, uint64_t e)
{
    cr_assert_eq(dlc_loader_set_epoch(l, e), DLC_OK);
    const uint64_t h0 = fx_epoch_hash(l, NULL, NULL, 0);
    cr_assert_eq(dlc_loader_set_epoch(l, e + 1), DLC_OK);
    return h0 ^ (fx_epoch_hash(l, NULL, NULL, 0) * 0x9e3779b97f4a7c15ull);
}

Test(loader_mix, a_single_source_equals_the_plain_loader_byte_for_byte)
{
    /* Orders, augmentations (random crops and flips), padding of 3 ranks over 40 records,
     * drop_last, sequential and shard-window samplers, a store and a set: a mixture of one
     * source (any weight) is today's loader. */
    mixdir m = make_mix();
    const uint32_t src_of[] = {0, 3};
    for (int k = 0; k < 2; k++)
        for (int v = 0; v < 5; v++) {
            dlc_loader_config c = mix_config();
            if (src_of[k] == 3)
                c.crop_h = c.crop_w = 5;
            c.batch_size = 7;
            if (v == 1)
                c.world_size = 3, c.rank = 1;
            if (v == 2)
                c.world_size = 3, c.rank = 2, c.drop_last = 1;
            if (v == 3)
                c.sampler = DLC_SAMPLER_SEQUENTIAL;
            if (v == 4)
                c.sampler = src_of[k] == 3 ? DLC_SAMPLER_SHARD_WINDOWS : DLC_SAMPLER_QUASI_RANDOM;
            dlc_loader *plain = NULL;
            cr_assert_eq(dlc_loader_open(m.path[src_of[k]], &c, &plain), DLC_OK, "%s",
                         dlc_errmsg());
            dlc_mix_source one;
            dlc_mix_source_init(&one);
            one.path = m.path[src_of[k]];
            one.weight = 0.25;
            dlc_loader *mix = NULL;
            cr_assert_eq(dlc_loader_open_mix(&one, 1, NULL, &c, &mix), DLC_OK, "%s", dlc_errmsg());
            cr_assert_eq(two_epochs(mix, 3), two_epochs(plain, 3), "source %u, case %d", src_of[k],
                         v);
            dlc_loader_close(mix);
            dlc_loader_close(plain);
        }
    free_mix(&m);
}

Test(loader_mix, a_single_source_resumes_as_the_plain_loader_and_changes_mix)
{
    mixdir m = make_mix();
    dlc_loader_config c = mix_config();
    c.batch_size = 6;
    const uint32_t one[] = {0}, two[] = {0, 1};
    const double w1[] = {1}, w2[] = {0.5, 0.5};
    dlc_loader *plain = NULL;
    cr_assert_eq(dlc_loader_open(m.path[0], &c, &plain), DLC_OK, "%s", dlc_errmsg());
    dlc_loader *a = open_mix(&m, one, w1, 1, 0, &c);
    dlc_batch b;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(dlc_loader_next(plain, &b), DLC_OK);
        cr_assert_eq(dlc_loader_next(a, &b), DLC_OK);
    }
    uint8_t st[DLC_LOADER_MIX_STATE_MAX], plain_st[DLC_LOADER_MIX_STATE_MAX];
    size_t n = 0, plain_n = 0;
    cr_assert_eq(dlc_loader_mix_state_save(a, st, sizeof st, &n), DLC_OK, "%s", dlc_errmsg());
    memcpy(plain_st, st, plain_n = n);
    dlc_loader_close(a);
    /* Into a fresh one-source mixture: the plain loader's remaining batches. */
    dlc_loader *r = open_mix(&m, one, w1, 1, 0, &c);
    cr_assert_eq(dlc_loader_mix_state_restore(r, st, n), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(fx_epoch_hash(r, NULL, NULL, 0), fx_epoch_hash(plain, NULL, NULL, 0));
    dlc_loader_close(r);
    dlc_loader_close(plain);
    /* Its pass is the plain loader's, which no mixture's schedule continues: refused. */
    dlc_loader *t = open_mix(&m, two, w2, 2, 0, &c);
    cr_assert_neq(dlc_loader_mix_state_restore(t, st, n), DLC_OK);
    cr_assert(strstr(dlc_errmsg(), "one source"), "%s", dlc_errmsg());
    /* A two-source state into the one source left: it continues that source's pass, each record
     * once, in the mixture's schedule. */
    for (int i = 0; i < 2; i++)
        cr_assert_eq(dlc_loader_next(t, &b), DLC_OK);
    cr_assert_eq(dlc_loader_mix_state_save(t, st, sizeof st, &n), DLC_OK, "%s", dlc_errmsg());
    uint64_t s0[200], s1[200], *seq[4] = {s0, s1, NULL, NULL}, nseq[4] = {0};
    take(t, two, 2, seq, nseq); /* What the two-source run would have drawn next. */
    dlc_loader_close(t);
    const uint64_t drawn0 = nseq[0];
    nseq[0] = nseq[1] = 0;
    dlc_loader *u = open_mix(&m, one, w1, 1, 0, &c);
    cr_assert_eq(dlc_loader_mix_state_restore(u, st, n), DLC_OK, "%s", dlc_errmsg());
    uint64_t u0[200], *useq[4] = {u0, NULL, NULL, NULL}, un[4] = {0};
    take(u, one, -1, useq, un);
    cr_assert_geq(un[0], drawn0);
    for (uint64_t i = 0; i < drawn0; i++)
        cr_assert_eq(u0[i], s0[i], "draw %llu", (unsigned long long)i);
    /* And back: the plain state restored into it gives the plain loader's batches again. */
    cr_assert_eq(dlc_loader_mix_state_restore(u, plain_st, plain_n), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_loader_open(m.path[0], &c, &plain), DLC_OK, "%s", dlc_errmsg());
    for (int i = 0; i < 3; i++)
        cr_assert_eq(dlc_loader_next(plain, &b), DLC_OK);
    cr_assert_eq(fx_epoch_hash(u, NULL, NULL, 0), fx_epoch_hash(plain, NULL, NULL, 0));
    dlc_loader_close(plain);
    dlc_loader_close(u);
    free_mix(&m);
}
