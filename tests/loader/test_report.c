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

Test(report, auto_threads_grows_to_its_cap_and_keeps_the_bytes)
{
    fx_dir d;
    fx_make_store(&d, 48, 128, 128, 4, 0);
    dlc_loader_config c = fx_config();
    c.batch_size = 2;
    c.crop_h = c.crop_w = 112;
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.dtype = DLC_DTYPE_FLOAT32;
    c.threads = 1;
    dlc_loader *l = open_ok(d.path, &c);
    const uint64_t want = epochs_hash(l, 3, NULL);
    dlc_loader_close(l);
    /* A consumer that does nothing waits for every batch: the workers are added one at a time,
     * a decision every 4 batches, up to the cap (threads with auto_threads), never beyond. */
    c.threads = 4;
    c.auto_threads = 1;
    l = open_ok(d.path, &c);
    dlc_loader_stats s;
    dlc_loader_get_stats(l, &s);
    cr_assert_eq(s.threads, 2, "starts with 2");
    uint32_t most = 0;
    cr_assert_eq(epochs_hash(l, 3, &most), want, "the bytes do not depend on the count");
    cr_assert_eq(most, 4, "reached %u of 4 in 72 batches", most);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

Test(report, auto_threads_gives_workers_back_to_a_slow_consumer)
{
    fx_dir d;
    fx_make_store(&d, 800, 32, 32, 4, 0);
    dlc_loader_config c = fx_config();
    c.batch_size = 8;
    c.crop_h = c.crop_w = 24;
    c.threads = 4;
    c.auto_threads = 1;
    dlc_loader *l = open_ok(d.path, &c);
    /* Parking waits for the workers to idle, which a loaded machine (the sanitizers, -j2) can
     * delay by some batches: the bound is a count of batches, never a time. */
    dlc_loader_stats s;
    uint32_t batches = 0;
    do {
        consume(l, 8, 10);
        batches += 8;
        dlc_loader_get_stats(l, &s);
    } while (s.threads > 1 && batches < 96);
    cr_assert_eq(s.threads, 1,
                 "a consumer that never waits needs one worker, has %u after %u batches", s.threads,
                 batches);
    const dlc_loader_report r = get_report(l, 8);
    cr_assert_eq(r.threads, 1);
    check_invariants(&r, 0);
    dlc_loader_close(l);
    c.auto_threads = 2;
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_EINVAL);
    fx_rmdir(&d);
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
