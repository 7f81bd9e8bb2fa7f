/* The loader's report (loader/report.c): the verdict in staged situations (model, cpu, storage
 * with O_DIRECT reads), shares that add up, windows, the struct_size rule, the text;
 * threads="auto"; and the verdict's rules on staged figures for what a unit test cannot stage
 * (page faults from a slow disk, a slow copy to a GPU, stalled downloads: tests/python).
 * dlc-test-label: threads */
#include "internal.h"
#include "loader_fixture.h"

#include <fcntl.h>
#include <math.h>
#include <time.h>
#include <unistd.h>

static dlc_loader *open_ok(const char *path, const dlc_loader_config *c)
{
    dlc_loader *l = NULL;
    const dlc_status rc = dlc_loader_open(path, c, &l);
    cr_assert_eq(rc, DLC_OK, "open: %d %s", rc, dlc_errmsg());
    return l;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Take @p n batches, spending @p step_ms of "model" time after each. */
static void consume(dlc_loader *l, uint32_t n, long step_ms)
{
    dlc_batch b;
    for (uint32_t i = 0; i < n; i++) {
        cr_assert_eq(dlc_loader_next(l, &b), DLC_OK, "%s", dlc_errmsg());
        if (step_ms)
            sleep_ms(step_ms);
    }
}

static dlc_loader_report get_report(dlc_loader *l, uint32_t last)
{
    dlc_loader_report r;
    memset(&r, 0xab, sizeof r);
    r.struct_size = sizeof r;
    cr_assert_eq(dlc_loader_get_report(l, last, &r), DLC_OK, "%s", dlc_errmsg());
    return r;
}

/* Every share in [0, 1]; the consumer's wait and time away add up to the window within 5 %;
 * since open, a stage's parts add up to at most its whole (a window's edges may cut a wait,
 * which is counted when it ends). */
static void check_invariants(const dlc_loader_report *r, int since_open)
{
    const double shares[] = {r->input_share,        r->io_busy_share,      r->io_read_share,
                             r->io_stall_share,     r->io_held_share,      r->io_full_share,
                             r->io_idle_share,      r->workers_busy_share, r->workers_io_share,
                             r->workers_idle_share, r->workers_cpu_share,  r->copy_busy_share,
                             r->copy_idle_share};
    for (size_t i = 0; i < sizeof shares / sizeof shares[0]; i++)
        cr_assert(shares[i] >= 0 && shares[i] <= 1, "share %zu = %g", i, shares[i]);
    cr_assert_leq(r->io_read_share + r->io_stall_share, r->io_busy_share + 1e-9);
    const double step = r->wait_seconds + r->away_seconds;
    cr_assert(r->wall_seconds > 0);
    cr_assert(fabs(step - r->wall_seconds) <= 0.05 * r->wall_seconds,
              "wait %g + away %g vs wall %g", r->wait_seconds, r->away_seconds, r->wall_seconds);
    if (!since_open)
        return;
    cr_assert_leq(r->io_busy_share + r->io_held_share + r->io_full_share + r->io_idle_share, 1.05);
    cr_assert_leq(r->workers_busy_share + r->workers_io_share + r->workers_idle_share, 1.05);
}

Test(report, model_bound_when_the_consumer_sleeps)
{
    fx_dir d;
    fx_make_store(&d, 200, 32, 32, 4, 0);
    dlc_loader_config c = fx_config();
    c.batch_size = 16;
    c.crop_h = c.crop_w = 24;
    c.prefetch = 4;
    dlc_loader *l = open_ok(d.path, &c);
    consume(l, 10, 50);
    const dlc_loader_report r = get_report(l, 8);
    cr_assert_eq(r.batches, 8);
    cr_assert_eq(r.samples, 8 * 16);
    check_invariants(&r, 0);
    cr_assert_eq(r.bound, DLC_BOUND_MODEL, "%s: %s", dlc_bound_name(r.bound), r.reason);
    cr_assert_lt(r.input_share, 0.1);
    const dlc_loader_report all = get_report(l, 0);
    cr_assert_eq(all.batches, 10);
    check_invariants(&all, 1);
    char text[2048];
    const size_t n = dlc_loader_report_text(&r, text, sizeof text);
    cr_assert(n > 0 && n < sizeof text);
    cr_assert_not_null(strstr(text, "bound: model"), "%s", text);
    cr_assert_eq(dlc_loader_report_text(&r, NULL, 0), n);
    cr_log_info("%s", text);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

Test(report, cpu_bound_with_rrc_float32_on_one_thread)
{
    fx_dir d;
    fx_make_store(&d, 64, 256, 256, 4, 0);
    dlc_loader_config c = fx_config();
    c.batch_size = 8;
    c.threads = 1;
    c.crop_h = c.crop_w = 224;
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.dtype = DLC_DTYPE_FLOAT32;
    dlc_loader *l = open_ok(d.path, &c);
    consume(l, 8, 0);
    const dlc_loader_report r = get_report(l, 6);
    check_invariants(&r, 0);
    cr_assert_eq(r.bound, DLC_BOUND_CPU, "%s: %s", dlc_bound_name(r.bound), r.reason);
    cr_assert_gt(r.input_share, 0.5);
    cr_assert_gt(r.sample_seconds, 0);
    cr_assert_eq(r.threads, 1);
    char text[2048];
    dlc_loader_report_text(&r, text, sizeof text);
    cr_log_info("%s", text);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

Test(report, struct_size_bounds_what_is_written)
{
    fx_dir d;
    fx_make_store(&d, 40, 16, 16, 4, 0);
    dlc_loader_config c = fx_config();
    dlc_loader *l = open_ok(d.path, &c);
    consume(l, 2, 0);
    /* A size no header gave the struct (status.h, "How structs grow": older callers' sizes are
     * the released ones, checked by tests/abi): refused, and nothing is written. */
    unsigned char buf[sizeof(dlc_loader_report) + 8];
    memset(buf, 0x5a, sizeof buf);
    dlc_loader_report *r = (dlc_loader_report *)buf;
    const uint32_t small = offsetof(dlc_loader_report, input_share);
    r->struct_size = small;
    cr_assert_eq(dlc_loader_get_report(l, 0, r), DLC_EINVAL);
    for (size_t i = sizeof r->struct_size; i < sizeof buf; i++)
        cr_assert_eq(buf[i], 0x5a, "byte %zu written", i);
    /* The library's own size: filled. */
    r->struct_size = sizeof(dlc_loader_report);
    cr_assert_eq(dlc_loader_get_report(l, 0, r), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(r->batches, 2);
    for (size_t i = sizeof(dlc_loader_report); i < sizeof buf; i++)
        cr_assert_eq(buf[i], 0x5a, "byte %zu written", i);
    r->struct_size = 0;
    cr_assert_eq(dlc_loader_get_report(l, 0, r), DLC_EINVAL);
    r->struct_size = sizeof(dlc_loader_report) + 4;
    cr_assert_eq(dlc_loader_get_report(l, 0, r), DLC_EINVAL);
    cr_assert_eq(dlc_loader_get_report(NULL, 0, r), DLC_EINVAL);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

Test(report, unknown_before_the_first_batch)
{
    fx_dir d;
    fx_make_store(&d, 40, 16, 16, 4, 0);
    dlc_loader_config c = fx_config();
    dlc_loader *l = open_ok(d.path, &c);
    const dlc_loader_report r = get_report(l, 4);
    cr_assert_eq(r.bound, DLC_BOUND_UNKNOWN);
    cr_assert_eq(r.batches, 0);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

/* ---- The rules, on staged figures ---- */

static dlc_loader_report waiting(void)
{
    dlc_loader_report r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    r.batches = 100;
    r.samples = 100 * 256;
    r.threads = 8;
    r.device = -1;
    r.wall_seconds = 10;
    r.wait_seconds = 6;
    r.away_seconds = 4;
    r.input_share = 0.6;
    r.step_seconds = 0.1;
    r.workers_cpu_share = 0.95;
    return r;
}

Test(report_rules, storage_when_the_io_thread_waits_for_reads)
{
    dlc_loader_report r = waiting();
    r.io_busy_share = 0.9;
    r.io_read_share = 0.8;
    r.workers_io_share = 0.7;
    r.workers_busy_share = 0.2;
    dlc__report_decide(&r);
    cr_assert_eq(r.bound, DLC_BOUND_STORAGE, "%s", r.reason);
    cr_assert_not_null(strstr(r.advice, "SSD"));
}

Test(report_rules, storage_when_workers_fault_pages_in)
{
    dlc_loader_report r = waiting();
    r.workers_busy_share = 0.9;
    r.workers_cpu_share = 0.2;
    r.major_faults = r.samples;
    dlc__report_decide(&r);
    cr_assert_eq(r.bound, DLC_BOUND_STORAGE, "%s", r.reason);
}

Test(report_rules, network_when_downloads_stall)
{
    dlc_loader_report r = waiting();
    r.io_busy_share = 0.8;
    r.io_stall_share = 0.7;
    r.workers_io_share = 0.6;
    dlc__report_decide(&r);
    cr_assert_eq(r.bound, DLC_BOUND_NETWORK, "%s", r.reason);
}

Test(report_rules, copy_when_the_copy_thread_is_busy)
{
    dlc_loader_report r = waiting();
    r.device = 0;
    r.copy_busy_share = 0.97;
    r.io_full_share = 0.8;
    r.workers_idle_share = 0.7;
    r.workers_busy_share = 0.2;
    dlc__report_decide(&r);
    cr_assert_eq(r.bound, DLC_BOUND_COPY, "%s", r.reason);
    r.device = -1; /* No device path: no copy to blame. */
    dlc__report_decide(&r);
    cr_assert_neq(r.bound, DLC_BOUND_COPY);
}

Test(report_rules, consumer_when_held_slots_block_the_io_thread)
{
    dlc_loader_report r = waiting();
    r.io_held_share = 0.7;
    r.workers_idle_share = 0.8;
    r.workers_busy_share = 0.15;
    dlc__report_decide(&r);
    cr_assert_eq(r.bound, DLC_BOUND_CONSUMER, "%s", r.reason);
}

Test(report_rules, cpu_and_model)
{
    dlc_loader_report r = waiting();
    r.workers_busy_share = 0.97;
    dlc__report_decide(&r);
    cr_assert_eq(r.bound, DLC_BOUND_CPU, "%s", r.reason);
    r.input_share = 0.02;
    dlc__report_decide(&r);
    cr_assert_eq(r.bound, DLC_BOUND_MODEL, "%s", r.reason);
    cr_assert_str_eq(dlc_bound_name(DLC_BOUND_CONSUMER), "consumer");
    cr_assert_str_eq(dlc_bound_name(99), "unknown");
}

/* Issue 34: a 2-source mixture at batch 10 said "cpu ... add threads" while the workers idled
 * 70 % of the time: small batches are bound by what each batch costs beyond its samples. */
Test(report_rules, batch_when_workers_idle_at_small_batches)
{
    dlc_loader_report r = waiting();
    r.samples = 100 * 10;
    r.threads = 2;
    r.workers_busy_share = 0.3;
    r.workers_idle_share = 0.7;
    r.io_busy_share = 0.02;
    r.sample_seconds = 4e-6;
    dlc__report_decide(&r);
    cr_assert_eq(r.bound, DLC_BOUND_BATCH, "%s: %s", dlc_bound_name(r.bound), r.reason);
    cr_assert(strstr(r.reason, "batch of 10 samples"), "%s", r.reason);
    cr_assert(strstr(r.advice, "larger batches") && !strstr(r.advice, "add threads"), "%s",
              r.advice);
    cr_assert_str_eq(dlc_bound_name(DLC_BOUND_BATCH), "batch");
    /* Busy workers are still the CPU's verdict. */
    r.workers_busy_share = 0.9;
    r.workers_idle_share = 0.1;
    dlc__report_decide(&r);
    cr_assert_eq(r.bound, DLC_BOUND_CPU, "%s", r.reason);
}

/* ---- threads="auto" ---- */

static uint64_t epochs_hash(dlc_loader *l, int epochs, uint32_t *most)
{
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    dlc_batch b;
    for (int e = 0; e < epochs; e++) {
        cr_assert_eq(dlc_loader_set_epoch(l, (uint64_t)e), DLC_OK);
        dlc_status rc;
        while ((rc = dlc_loader_next(l, &b)) == DLC_OK) {
            XXH3_64bits_update(st, b.data, b.bytes);
            XXH3_64bits_update(st, b.labels, b.count * sizeof *b.labels);
            dlc_loader_stats s;
            dlc_loader_get_stats(l, &s);
            if (most && s.threads > *most)
                *most = s.threads;
        }
        cr_assert_eq(rc, DLC_END, "%s", dlc_errmsg());
    }
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

/* The batches within which threads="auto" makes its first decision: the first batch, the
 * batches in the ring then (at most prefetch) and the first window; and the batches after a
 * change within which it decides again: those in the ring at the change and a window. */
#define AUTO_FIRST_AT(prefetch) (1 + (prefetch) + DLC__AUTO_FIRST)
#define AUTO_NEXT_AFTER(prefetch) ((prefetch) + DLC__AUTO_WINDOW)

/* Take @p n batches (@p step_ms of "model" time after each), the working threads after each in
 * @p counts; hash their bytes into @p h when it is not NULL. */
static void consume_counting(dlc_loader *l, uint32_t n, long step_ms, uint32_t *counts,
                             XXH3_state_t *h)
{
    dlc_batch b;
    for (uint32_t i = 0; i < n; i++) {
        dlc_status rc = dlc_loader_next(l, &b);
        if (rc == DLC_END) {
            cr_assert_eq(dlc_loader_set_epoch(l, l->sampler.epoch + 1), DLC_OK);
            rc = dlc_loader_next(l, &b);
        }
        cr_assert_eq(rc, DLC_OK, "%s", dlc_errmsg());
        if (h) {
            XXH3_64bits_update(h, b.data, b.bytes);
            XXH3_64bits_update(h, b.labels, b.count * sizeof *b.labels);
        }
        if (step_ms)
            sleep_ms(step_ms);
        dlc_loader_stats s;
        dlc_loader_get_stats(l, &s);
        counts[i] = s.threads;
    }
}

/* The first of @p n counts equal to @p want, or n. */
static uint32_t first_at(const uint32_t *counts, uint32_t n, uint32_t want)
{
    uint32_t i = 0;
    while (i < n && counts[i] != want)
        i++;
    return i;
}

Test(report, auto_threads_jumps_to_its_cap_and_keeps_the_bytes)
{
    fx_dir d;
    /* RandomResizedCrop from 192 x 192 to uint8 64 x 64: much work for few bytes, so that the
     * consumer's hashing of them costs little beside the workers' work. */
    fx_make_store(&d, 320, 192, 192, 4, 0);
    dlc_loader_config c = fx_config();
    c.batch_size = 8;
    c.crop_h = c.crop_w = 64;
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.threads = 1;
    dlc_loader *l = open_ok(d.path, &c);
    const uint64_t want = epochs_hash(l, 1, NULL);
    dlc_loader_close(l);
    /* A consumer that does nothing waits for most of its batches, and the workers wait for no
     * read: each decision asks for about n / (1 - wait share), at most twice as many, so the
     * 2 workers it starts with reach the cap (threads with auto_threads; on this 2-core machine,
     * more than the cores: the cap of threads="auto" without a count is the cores) in two or
     * three changes, not six. */
    c.threads = 8;
    c.auto_threads = 1;
    c.prefetch = 4;
    l = open_ok(d.path, &c);
    dlc_loader_stats s;
    dlc_loader_get_stats(l, &s);
    cr_assert_eq(s.threads, 2, "starts with 2");
    enum { N = 40 }; /* One epoch, hashed as epochs_hash() does. */
    uint32_t counts[N];
    XXH3_state_t *h = XXH3_createState();
    XXH3_64bits_reset(h);
    consume_counting(l, N, 0, counts, h);
    const uint64_t got = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    dlc_batch end;
    cr_assert_eq(dlc_loader_next(l, &end), DLC_END, "the epoch is %u batches", N);
    /* Reaching the cap is timed by windows of batches, and on two cores shared with other jobs
     * (ctest -j2 runs end-to-end tests beside this one) a window may find its batches ready and
     * the consumer waiting only for the lock, which is no reason to add workers: a window may
     * pass without a change (CI saw 8 workers from batch 25 and, under a CPU hog, 34). So the
     * cap must be reached within the epoch, and what tells a jump from one worker at a time is
     * the number of changes, below: one at a time from 2 would take 6. */
    const uint32_t at8 = first_at(counts, N, 8);
    cr_assert_lt(at8, N, "8 workers were never reached in %u batches", N);
    uint32_t changes = 0;
    for (uint32_t i = 1; i <= at8; i++) {
        cr_assert(counts[i] >= counts[i - 1] && counts[i] <= 2 * counts[i - 1],
                  "batch %u: %u workers after %u", i + 1, counts[i], counts[i - 1]);
        changes += counts[i] != counts[i - 1];
    }
    cr_assert_leq(changes, 3, "%u changes to reach 8", changes);
    /* The bytes do not depend on the count, which changed in this epoch. */
    cr_assert_eq(got, want, "the bytes differ from threads=1's");
    dlc_loader_close(l);
    fx_rmdir(&d);
}

Test(report, auto_threads_gives_back_one_at_a_time_and_stays_at_one)
{
    fx_dir d;
    /* 220 batches: the whole test in one epoch (a plan's start, where the ring refills while the
     * consumer waits, is no part of what this test shows). */
    fx_make_store(&d, 1760, 96, 96, 4, 0);
    dlc_loader_config c = fx_config();
    c.batch_size = 8;
    c.crop_h = c.crop_w = 80;
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.dtype = DLC_DTYPE_FLOAT32;
    c.threads = 4;
    c.auto_threads = 1;
    dlc_loader *l = open_ok(d.path, &c);
    /* Up to the cap with a consumer that does nothing, */
    uint32_t up[AUTO_FIRST_AT(4) + AUTO_NEXT_AFTER(4)];
    const uint32_t nup = sizeof up / sizeof up[0];
    consume_counting(l, nup, 0, up, NULL);
    cr_assert_eq(up[nup - 1], 4, "%u workers after %u batches of a waiting consumer", up[nup - 1],
                 nup);
    /* then a consumer whose step is 30 ms: it never waits, and the workers idle (one worker
     * keeps ahead of it even under ASan on a loaded machine). Each worker is given back after 2
     * calm windows, after the batches in the ring at the last change (at most prefetch, 4), and
     * the first window may have begun before the consumer slowed down: 1 from batch 44 of the
     * slow consumer at the latest in a quiet run, then 1 for good. On a loaded machine (the
     * sanitizers, ctest -j2) a window where the one worker fell behind may add one back; the
     * patience doubles then, and the count goes back down. The test asks for 1 worker during
     * STAY batches in a row within BUDGET batches, one at a time down, at most one add. */
    enum { STAY = 40, BUDGET = 200 };
    uint32_t down[BUDGET];
    uint32_t n = 0, run = 0;
    while (n < BUDGET && run < STAY) {
        consume_counting(l, 1, 30, &down[n], NULL);
        run = down[n] == 1 ? run + 1 : 0;
        n++;
    }
    cr_assert_eq(run, STAY, "%u workers after %u batches of the slow consumer", down[n - 1], n);
    uint32_t adds = 0, prev = 4;
    for (uint32_t i = 0; i < n; i++) {
        cr_assert(down[i] + 1 >= prev, "batch %u: %u workers after %u", i + 1, down[i], prev);
        adds += down[i] > prev;
        prev = down[i];
    }
    cr_assert_leq(adds, 1, "%u workers added back over %u batches of the slow consumer", adds, n);
    cr_log_info("4 -> 1 in %u batches of a slow consumer, %u added back", n - STAY, adds);
    const dlc_loader_report r = get_report(l, 8);
    cr_assert_eq(r.threads, 1);
    check_invariants(&r, 0);
    dlc_loader_close(l);
    c.auto_threads = 2;
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_EINVAL);
    fx_rmdir(&d);
}

/* ---- threads="auto"'s decision, on synthetic tallies ---- */

/* A window of 10 batches of 100 ms of the consumer's time, @p wait_share of it inside next()
 * waiting for batches not ready,
 * @p n workers working the whole window, busy @p busy and waiting for I/O @p io of their time,
 * the I/O thread waiting for shards @p stall of the wall time. */
static void window(uint32_t n, double wait_share, double busy, double io, double stall,
                   dlc__tally *a, dlc__tally *b)
{
    memset(a, 0, sizeof *a);
    memset(b, 0, sizeof *b);
    const double wall = 1e9;
    a->t = 5000;
    b->t = a->t + (uint64_t)wall;
    b->batches = 10;
    b->cons_wait = b->cons_starved = (uint64_t)(wall * wait_share);
    b->cons_away = (uint64_t)wall - b->cons_wait;
    b->w_avail = (uint64_t)(wall * n);
    b->w_busy = (uint64_t)(wall * n * busy);
    b->w_iowait = (uint64_t)(wall * n * io);
    b->w_idle = b->w_avail - b->w_busy - b->w_iowait;
    b->io_stall = (uint64_t)(wall * stall);
}

static uint32_t decide(uint32_t n, uint32_t cap, double wait, double busy, double io, double stall,
                       dlc__auto *st)
{
    dlc__tally a, b;
    window(n, wait, busy, io, stall, &a, &b);
    return dlc__auto_decide(&a, &b, n, cap, st);
}

Test(report_auto, adds_about_n_over_one_minus_the_wait_share)
{
    dlc__auto st;
    dlc__auto_init(&st);
    /* Waiting 20 %: 1 / 0.8 = 1.25 times the rate, so 5 workers where 4 work. */
    cr_assert_eq(decide(4, 16, 0.20, 0.95, 0, 0, &st), 5);
    /* 1 / 0.9 = 1.11 times, of 4: ceil(4.44) = 5; of 8: ceil(8.89) = 9. */
    cr_assert_eq(decide(4, 16, 0.10, 0.95, 0, 0, &st), 5);
    cr_assert_eq(decide(8, 64, 0.10, 0.95, 0, 0, &st), 9);
    /* At least one more: 1 / 0.94 of 2 is 2.13. */
    cr_assert_eq(decide(2, 16, 0.06, 0.95, 0, 0, &st), 3);
    /* Waiting 40 % of 2: ceil(3.33) = 4. */
    cr_assert_eq(decide(2, 16, 0.40, 0.95, 0, 0, &st), 4);
    /* At most twice as many at once: waiting 75 % asks 4 times, 90 % ten times. */
    cr_assert_eq(decide(2, 16, 0.75, 0.95, 0, 0, &st), 4);
    cr_assert_eq(decide(4, 16, 0.90, 0.95, 0, 0, &st), 8);
    cr_assert_eq(decide(1, 16, 1.00, 1.00, 0, 0, &st), 2);
    /* Never past the cap. */
    cr_assert_eq(decide(12, 16, 0.90, 0.95, 0, 0, &st), 16);
    cr_assert_eq(decide(16, 16, 0.90, 0.95, 0, 0, &st), 16);
    cr_assert_eq(decide(1, 1, 0.90, 0.95, 0, 0, &st), 1);
    /* Idle hand-offs between batches count as the workers' limit too (another worker overlaps
     * them): waiting while the workers are busy only half the time still adds. */
    cr_assert_eq(decide(2, 16, 0.50, 0.50, 0, 0, &st), 4);
}

Test(report_auto, from_two_to_sixteen_in_three_decisions)
{
    /* The 16-core situation of docs/WAITING.md: a loop that needs every core waits most of its
     * step while the count is low; one worker a window took 14 windows, this takes 3. */
    dlc__auto st;
    dlc__auto_init(&st);
    uint32_t n = 2, decisions = 0;
    while (n < 16 && decisions < 20) {
        n = decide(n, 16, 1.0 - (double)n / 16 * 0.9, 0.97, 0.01, 0, &st);
        decisions++;
    }
    cr_assert_eq(n, 16);
    cr_assert_eq(decisions, 3);
}

Test(report_auto, which_waits_count)
{
    /* The consumer was inside next() 40 % of its step, but every batch was ready when it took
     * the lock: with the workers idle that is the lock or a preemption, not them; with them
     * busy, they hold the lock or the CPU it waited for, and more of them would help. */
    dlc__auto st;
    dlc__auto_init(&st);
    dlc__tally a, b;
    window(4, 0.40, 0.05, 0, 0, &a, &b);
    b.cons_starved = 0;
    cr_assert_eq(dlc__auto_decide(&a, &b, 4, 16, &st), 4);
    window(4, 0.40, 0.60, 0, 0, &a, &b);
    b.cons_starved = 0;
    cr_assert_eq(dlc__auto_decide(&a, &b, 4, 16, &st), 7);
    /* With the workers idle, time inside next() with every batch ready is calm: the second
     * such window gives one back. */
    window(4, 0.08, 0.05, 0, 0, &a, &b);
    b.cons_starved = 0;
    cr_assert_eq(dlc__auto_decide(&a, &b, 4, 16, &st), 4);
    cr_assert_eq(dlc__auto_decide(&a, &b, 4, 16, &st), 3);
}

Test(report_auto, holds_while_the_wait_is_for_reads_or_downloads)
{
    dlc__auto st;
    dlc__auto_init(&st);
    cr_assert_eq(decide(4, 16, 0.80, 0.20, 0.60, 0, &st), 4, "workers wait for I/O");
    cr_assert_eq(decide(4, 16, 0.80, 0.05, 0, 0.70, &st), 4, "the I/O thread waits for shards");
    /* Between adding and giving back (the consumer waits 1 to 5 %): hold. */
    cr_assert_eq(decide(4, 16, 0.03, 0.20, 0, 0, &st), 4);
    cr_assert_eq(decide(4, 16, 0.03, 0.20, 0, 0, &st), 4);
}

Test(report_auto, gives_back_one_at_a_time_after_calm_windows)
{
    dlc__auto st;
    dlc__auto_init(&st);
    /* Calm: no wait, and 3 would be busy 0.3 * 4 / 3 = 40 %: the second calm window in a row
     * gives one back, one only. */
    cr_assert_eq(decide(4, 16, 0.0, 0.30, 0, 0, &st), 4);
    cr_assert_eq(decide(4, 16, 0.0, 0.30, 0, 0, &st), 3);
    cr_assert_eq(decide(3, 16, 0.0, 0.10, 0, 0, &st), 3);
    /* A window that is not calm starts the count again. */
    cr_assert_eq(decide(3, 16, 0.02, 0.10, 0, 0, &st), 3);
    cr_assert_eq(decide(3, 16, 0.0, 0.10, 0, 0, &st), 3);
    cr_assert_eq(decide(3, 16, 0.0, 0.10, 0, 0, &st), 2);
    /* n - 1 would be too busy: 0.5 * 2 / 1 = 100 %: keep 2 however calm. */
    for (int i = 0; i < 8; i++)
        cr_assert_eq(decide(2, 16, 0.0, 0.50, 0, 0, &st), 2);
    /* One is the least. */
    dlc__auto_init(&st);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(decide(1, 16, 0.0, 0.01, 0, 0, &st), 1);
}

Test(report_auto, a_give_back_undone_doubles_the_patience)
{
    /* A consumer at the edge: calm with 4 workers, waiting with 3. Each give-back that has to
     * be undone makes the next one wait twice as long: 4 -> 3 -> 4 changes get rarer, and stop
     * at the longest patience. */
    dlc__auto st;
    dlc__auto_init(&st);
    uint32_t n = 4, changes = 0, windows = 0;
    uint32_t gaps[8], ngaps = 0, last_change = 0;
    while (windows < 200) {
        const uint32_t m =
            n == 4 ? decide(4, 16, 0.0, 0.40, 0, 0, &st) : decide(3, 16, 0.20, 0.95, 0, 0, &st);
        windows++;
        if (m != n) {
            changes++;
            if (m < n && ngaps < 8) {
                gaps[ngaps++] = windows - last_change;
            }
            last_change = windows;
        }
        n = m;
    }
    cr_assert_geq(ngaps, 4);
    cr_assert_eq(gaps[0], 2);
    for (uint32_t i = 1; i < ngaps; i++) {
        const uint32_t want = 2u << i < DLC__AUTO_PATIENCE_MAX ? 2u << i : DLC__AUTO_PATIENCE_MAX;
        cr_assert_eq(gaps[i], want, "give-back %u came %u windows after the add, not %u", i,
                     gaps[i], want);
    }
    /* 200 windows: 2, 4, 8, 16, 32, 32, ... calm windows before each give-back, each undone by
     * the next window: 9 give-backs and 9 adds, where a controller without memory would change
     * the count every other window (100 pairs). */
    cr_assert_leq(changes, 18, "%u changes in 200 windows", changes);
}

/* A store read with O_DIRECT, a loop that does nothing and uint8 crops that cost the workers
 * little: every batch waits for the disk. Skipped where the store's file system refuses
 * O_DIRECT (tmpfs: the reads then come from the page cache). */
Test(report, storage_bound_reading_direct)
{
    fx_dir d;
    fx_make_store(&d, 96, 256, 256, 4, 0);
    const int fd = open(d.path, O_RDONLY | O_DIRECT);
    if (fd < 0) {
        fx_rmdir(&d);
        cr_skip_test("the temporary folder's file system refuses O_DIRECT");
    }
    close(fd);
    dlc_loader_config c = fx_config();
    c.batch_size = 16;
    c.crop_h = c.crop_w = 224;
    c.prefetch = 4;
    c.io = DLC_IO_DIRECT;
    dlc_loader *l = open_ok(d.path, &c);
    dlc_loader_stats s;
    dlc_loader_get_stats(l, &s);
    cr_assert_eq(s.io_mode, DLC_IO_DIRECT);
    for (int e = 0; e < 3; e++) {
        cr_assert_eq(dlc_loader_set_epoch(l, (uint64_t)e), DLC_OK);
        dlc_batch b;
        while (dlc_loader_next(l, &b) == DLC_OK)
            ;
    }
    const dlc_loader_report r = get_report(l, 0);
    char text[2048];
    dlc_loader_report_text(&r, text, sizeof text);
    cr_log_info("%s", text);
    check_invariants(&r, 1);
    cr_assert_eq(r.bound, DLC_BOUND_STORAGE, "%s", text);
    cr_assert_gt(r.io_read_share, 0);
    dlc_loader_close(l);
    fx_rmdir(&d);
}
