/* The loader's lifecycle under abuse: opened and closed 10,000 times with
 * file descriptors and memory staying flat, and a store truncated in place
 * while a loader reads it (an error naming the store and the record, not a
 * SIGBUS). Random thread counts, prefetch depths, abandoned batches and
 * restores under ThreadSanitizer are in tests/loader/stress_chaos.c. */
#include "loader_fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include <sys/stat.h>

/* Open descriptors of this process. */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* The directory's own descriptor. */
}

/* Resident set size in KiB (VmRSS of /proc/self/status). */
static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    cr_assert_not_null(f);
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

static int sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    return 1;
#endif
#endif
    return 0;
}

static void open_use_close(const char *path, uint32_t i)
{
    dlc_loader_config c = fx_config();
    c.threads = 1 + i % 2;
    c.prefetch = 1 + i % 3;
    c.seed = i;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(path, &c, &l), DLC_OK, "open %u: %s", i, dlc_errmsg());
    /* Every fourth loader lends a batch and is closed while it is lent. */
    if (i % 4 == 0) {
        dlc_batch b;
        cr_assert_eq(dlc_loader_next(l, &b), DLC_OK, "%s", dlc_errmsg());
    }
    dlc_loader_close(l);
}

Test(stress_lifecycle, open_close_10000_times_fds_and_rss_flat, .timeout = 900)
{
    fx_dir d;
    fx_make_store(&d, 40, 16, 16, 4, 0);
    /* Warm up: the first loaders fill malloc's arenas and the libraries' caches. */
    for (uint32_t i = 0; i < 50; i++)
        open_use_close(d.path, i);
    const int fds0 = count_fds();
    const long rss0 = rss_kib();
    const uint32_t rounds = 10000;
    for (uint32_t i = 0; i < rounds; i++) {
        open_use_close(d.path, i);
        if (i % 1000 == 999)
            cr_assert_eq(count_fds(), fds0, "after %u loaders: %d descriptors, %d at the start",
                         i + 1, count_fds(), fds0);
    }
    const long rss1 = rss_kib();
    cr_log_info("%u loaders: descriptors %d -> %d, RSS %ld -> %ld KiB", rounds, fds0, count_fds(),
                rss0, rss1);
    cr_assert_eq(count_fds(), fds0);
    /* A leak of even one small allocation per loader would show as rounds x its size; the
     * bound allows for allocator noise, not for per-loader growth of 400 bytes or more. Under
     * ASan the quarantine keeps freed memory resident on purpose, so RSS says nothing there;
     * LeakSanitizer checks every allocation at exit instead. */
    if (!sanitized())
        cr_assert_lt(rss1 - rss0, 4 * 1024, "RSS grew by %ld KiB over %u loaders", rss1 - rss0,
                     rounds);
    fx_rmdir(&d);
}

/* Truncate the store in place while a loader holds a batch of it. prefetch 1: the ring's only
 * slot is lent, so no later batch is looked up before the truncation, and the next batch must
 * fail cleanly instead of touching a page past the new end of the file. */
static void truncate_under_loader(uint32_t io_mode)
{
    fx_dir d;
    fx_make_store(&d, 64, 40, 40, 4, 0);
    dlc_loader_config c = fx_config();
    c.prefetch = 1;
    c.io = io_mode;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_OK, "%s", dlc_errmsg());
    dlc_batch b;
    cr_assert_eq(dlc_loader_next(l, &b), DLC_OK, "%s", dlc_errmsg());
    struct stat st;
    cr_assert_eq(stat(d.path, &st), 0);
    cr_assert_eq(truncate(d.path, st.st_size / 3), 0);
    const dlc_status rc = dlc_loader_next(l, &b);
    cr_assert_eq(rc, DLC_ECHANGED, "next after truncation: %d (%s)", rc, dlc_errmsg());
    cr_assert_not_null(strstr(dlc_errmsg(), d.path), "%s", dlc_errmsg());
    cr_assert_not_null(strstr(dlc_errmsg(), "record "), "%s", dlc_errmsg());
    cr_assert_not_null(strstr(dlc_errmsg(), "shrank"), "%s", dlc_errmsg());
    /* The loader stays usable: every later batch fails the same way, and close is clean. */
    cr_assert_eq(dlc_loader_next(l, &b), DLC_ECHANGED, "%s", dlc_errmsg());
    cr_assert_eq(dlc_loader_set_epoch(l, 1), DLC_OK);
    cr_assert_eq(dlc_loader_next(l, &b), DLC_ECHANGED, "%s", dlc_errmsg());
    dlc_loader_close(l);
    /* Opening the truncated store is refused at open, by the size check. */
    cr_assert_neq(dlc_loader_open(d.path, &c, &l), DLC_OK);
    cr_assert_not_null(strstr(dlc_errmsg(), "truncated"), "%s", dlc_errmsg());
    fx_rmdir(&d);
}

Test(stress_lifecycle, store_truncated_under_mmap_loader_fails_the_batch)
{
    truncate_under_loader(DLC_IO_MMAP);
}

Test(stress_lifecycle, store_truncated_under_direct_loader_fails_the_batch)
{
    truncate_under_loader(DLC_IO_DIRECT);
}

/* A store replaced by a rename (what cachebuild --force and cachewarm do) is no hazard: the
 * loader keeps reading the old file, whole, to the end of its epoch. */
Test(stress_lifecycle, store_renamed_over_keeps_serving_the_old_file)
{
    fx_dir d;
    fx_make_store(&d, 48, 16, 16, 4, 0);
    dlc_loader_config c = fx_config();
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_OK, "%s", dlc_errmsg());
    const uint64_t ref = fx_epoch_hash(l, NULL, NULL, 0);
    cr_assert_eq(dlc_loader_set_epoch(l, 0), DLC_OK);
    dlc_batch b;
    cr_assert_eq(dlc_loader_next(l, &b), DLC_OK);
    char other[400];
    snprintf(other, sizeof other, "%s/other.dlc", d.dir);
    const int fd = open(other, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "not a store", 11), 11);
    close(fd);
    cr_assert_eq(rename(other, d.path), 0);
    cr_assert_eq(dlc_loader_set_epoch(l, 0), DLC_OK);
    cr_assert_eq(fx_epoch_hash(l, NULL, NULL, 0), ref);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

/* Truncate the store at a random moment while a direct-mode loader reads it with batches in
 * flight, many times (issue 23, item 13: 1 run in 30 raised SIGBUS: the I/O thread looked records
 * up in the map between a batch's size check and its reads). Every run ends in an error naming
 * the store, or, when the truncation came after the last batch, in success; the test process
 * never dies (a SIGBUS is a crash of this test). */
#define RUNS 200u

typedef struct cut_job {
    const char *path;
    uint32_t delay_us;
    int failed; /* Criterion asserts on the test's thread only. */
} cut_job;

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    cr_assert(in && out);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        cr_assert_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    cr_assert_eq(fclose(out), 0);
}

static void *cut_later(void *arg)
{
    cut_job *j = arg;
    struct stat st;
    usleep(j->delay_us);
    j->failed = stat(j->path, &st) != 0 || truncate(j->path, st.st_size / 3) != 0;
    return NULL;
}

Test(stress_lifecycle, store_truncated_at_random_under_a_direct_loader_is_an_error)
{
    fx_dir d;
    fx_make_store(&d, 512, 48, 48, 4, 0);
    char *copy = tu_path(d.dir, "cut.dlc");
    uint32_t errors = 0, whole = 0;
    for (uint32_t run = 0; run < RUNS; run++) {
        copy_file(d.path, copy);
        dlc_loader_config c = fx_config();
        c.io = DLC_IO_DIRECT;
        c.prefetch = 8;
        c.threads = 2;
        c.batch_size = 4;
        c.seed = run;
        dlc_loader *l = NULL;
        cr_assert_eq(dlc_loader_open(copy, &c, &l), DLC_OK, "%s", dlc_errmsg());
        cut_job job = {copy, (run * 7919u) % 3000u, 0};
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, cut_later, &job), 0);
        dlc_status rc = DLC_OK;
        for (uint32_t epoch = 0; epoch < 4 && rc >= 0; epoch++) {
            cr_assert_eq(dlc_loader_set_epoch(l, epoch), DLC_OK);
            dlc_batch b;
            while ((rc = dlc_loader_next(l, &b)) == DLC_OK)
                ;
        }
        pthread_join(t, NULL);
        cr_assert(!job.failed, "run %u: the truncation failed", run);
        if (rc < 0) {
            cr_assert(rc == DLC_ECHANGED || rc == DLC_ECORRUPT, "run %u: %d (%s)", run, rc,
                      dlc_errmsg());
            cr_assert_not_null(strstr(dlc_errmsg(), copy), "%s", dlc_errmsg());
            cr_assert_not_null(strstr(dlc_errmsg(), "record "), "%s", dlc_errmsg());
            errors++;
        } else {
            whole++;
        }
        dlc_loader_close(l);
    }
    cr_log_info("%u runs: %u ended in an error naming the store, %u read whole", RUNS, errors,
                whole);
    cr_assert_gt(errors, 0, "no truncation landed while the loader read");
    free(copy);
    fx_rmdir(&d);
}
