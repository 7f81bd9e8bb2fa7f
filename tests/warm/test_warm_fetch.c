/* dlc_warm() end to end inside one process, against the project's own
 * loopback object server (tests/lib/gcsserver.py, Python stdlib): a real
 * store written by the store writer arrives bit-exact and verified; a
 * journaled partial download is resumed fetching only the missing bytes, also
 * with another chunk size than the run that left it; a cancel keeps the
 * partial file for a rerun; a 404, a corrupt store and a server without
 * ranges behave as documented; gs:// sends the bearer token. This is the part
 * of the warm code that the unit tests run under ASan. */
#include "warm_internal.h"
#include "store_test_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#ifndef DLC_TEST_SOURCE_DIR
#error DLC_TEST_SOURCE_DIR must name the source tree
#endif

static char *root; /* The server's --root. */
static char *work; /* Destinations. */
static pid_t server = -1;
static int port;
static char base[128]; /* http://127.0.0.1:PORT */

static void start_server(void)
{
    root = tmp_mkdtemp();
    work = tmp_mkdtemp();
    char *files = tmp_path(root, "files");
    char *bkt = tmp_path(root, "bkt");
    cr_assert_eq(mkdir(files, 0755), 0);
    cr_assert_eq(mkdir(bkt, 0755), 0);
    free(files);
    free(bkt);
    char *port_file = tmp_path(work, "port");
    server = fork();
    cr_assert(server >= 0);
    if (server == 0) {
        /* Gone with the test process, also when Criterion kills a test that hangs: an orphan
         * would hold ctest's pipes open, and ctest with them. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execl("/usr/bin/python3", "python3", DLC_TEST_SOURCE_DIR "/tests/lib/gcsserver.py",
              "--root", root, "--port-file", port_file, "--token", "tok123", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(port_file, "r");
        if (f) {
            const int n = fscanf(f, "%d", &port);
            fclose(f);
            if (n == 1)
                break;
        }
        const struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    free(port_file);
    cr_assert(port > 0, "the test server did not start");
    snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
}

static void stop_server(void)
{
    if (server > 0) {
        kill(server, SIGTERM);
        waitpid(server, NULL, 0);
    }
    tmp_rmdir(root);
    tmp_rmdir(work);
}

TestSuite(warm_fetch, .init = start_server, .fini = stop_server, .timeout = 120);

static char *put_store(const char *name, uint64_t records)
{
    char *p = NULL;
    cr_assert(asprintf(&p, "%s/files/%s", root, name) > 0);
    tsu_write_store(p, records, 1, 1);
    return p;
}

static void assert_same(const char *a, const char *b)
{
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "cmp -s '%s' '%s'", a, b) > 0);
    cr_assert_eq(system(cmd), 0, "%s and %s differ", a, b);
    free(cmd);
}

static int exists(const char *p)
{
    return access(p, F_OK) == 0;
}

static off_t size_of(const char *p)
{
    struct stat st;
    cr_assert_eq(stat(p, &st), 0, "%s", p);
    return st.st_size;
}

static dlc_warm_options small_chunks(void)
{
    dlc_warm_options o;
    dlc_warm_options_init(&o);
    o.chunk_size = 64 << 10;
    o.connections = 4;
    o.timeout_s = 10;
    return o;
}

Test(warm_fetch, store_arrives_verified_and_second_call_returns_at_once)
{
    char *src = put_store("s.dlc", 40);
    char *url = NULL, *dest = tmp_path(work, "s.dlc");
    cr_assert(asprintf(&url, "%s/files/s.dlc", base) > 0);
    const dlc_warm_options o = small_chunks();
    dlc_warm_result r;
    cr_assert_eq(dlc_warm(url, dest, &o, &r), DLC_OK, "%s", dlc_errmsg());
    assert_same(src, dest);
    cr_assert_eq(r.bytes, (uint64_t)size_of(src));
    cr_assert_eq(r.bytes_downloaded, r.bytes);
    cr_assert(r.verified);
    cr_assert_not(r.resumed);
    cr_assert_gt(r.chunks, 4);
    cr_assert_eq(r.chunks_fetched, r.chunks);
    cr_assert_neq(r.etag[0], '\0');

    cr_assert_eq(dlc_warm(url, dest, &o, &r), DLC_OK, "%s", dlc_errmsg());
    cr_assert(r.already_complete);
    cr_assert_eq(r.bytes_downloaded, 0);
    free(url);
    free(dest);
    free(src);
}

/* A partial download of @p url as a crash leaves it, made by a run with
 * @p chunk-byte chunks: the part file holds the right bytes of the even chunks
 * (which the journal records) and garbage elsewhere. Returns the bytes of the
 * odd chunks, which are missing; *journaled is the number of even chunks. */
static uint64_t write_partial(const char *src, const char *url, const char *dest, uint64_t chunk,
                              uint64_t *journaled)
{
    dlc_warm_options o = small_chunks();
    /* Learn the ETag the way dlc_warm() does. */
    dlc__warm_source s;
    cr_assert_eq(dlc__warm_source_init(&s, url, &o), DLC_OK);
    dlc__warm_object obj;
    uint32_t retries = 0;
    cr_assert_eq(dlc__warm_probe(&s, &o, &obj, &retries), DLC_OK, "%s", dlc_errmsg());
    cr_assert(obj.ranges);
    const uint64_t size = (uint64_t)size_of(src);
    cr_assert_eq(obj.size, size);
    const uint64_t nchunks = (size + chunk - 1) / chunk;

    char *part = NULL, *journal = NULL;
    cr_assert(asprintf(&part, "%s.warm-part", dest) > 0);
    cr_assert(asprintf(&journal, "%s.warm-journal", dest) > 0);
    FILE *in = fopen(src, "rb");
    FILE *out = fopen(part, "wb");
    uint8_t *buf = malloc(chunk);
    uint64_t missing_bytes = 0;
    *journaled = 0;
    dlc__warm_range *list = calloc(nchunks, sizeof *list);
    for (uint64_t c = 0; c < nchunks; c++) {
        const size_t n = fread(buf, 1, chunk, in);
        if (c % 2 == 1) {
            memset(buf, 0xee, n);
            missing_bytes += n;
        } else {
            list[(*journaled)++] = (dlc__warm_range){.off = c * chunk, .len = n};
        }
        cr_assert_eq(fwrite(buf, 1, n, out), n);
    }
    fclose(in);
    fclose(out);
    const dlc__warm_journal_id id = {.size = size, .id = dlc__warm_journal_key(s.name, obj.etag)};
    dlc__warm_ranges done = {0};
    uint64_t resumed = 0;
    int jfd = -1;
    cr_assert_eq(dlc__warm_journal_open(journal, &id, &done, &resumed, &jfd), DLC_OK);
    cr_assert_eq(dlc__warm_journal_append(jfd, journal, &id, list, *journaled), DLC_OK);
    close(jfd);
    free(list);
    dlc__warm_ranges_free(&done);
    free(buf);
    free(part);
    free(journal);
    dlc__warm_source_free(&s);
    return missing_bytes;
}

static void assert_no_leftovers(const char *dest)
{
    char *part = NULL, *journal = NULL;
    cr_assert(asprintf(&part, "%s.warm-part", dest) > 0);
    cr_assert(asprintf(&journal, "%s.warm-journal", dest) > 0);
    cr_assert_not(exists(part));
    cr_assert_not(exists(journal));
    free(part);
    free(journal);
}

Test(warm_fetch, resume_fetches_only_missing_chunks)
{
    char *src = put_store("r.dlc", 40);
    char *url = NULL, *dest = tmp_path(work, "r.dlc");
    cr_assert(asprintf(&url, "%s/files/r.dlc", base) > 0);
    const dlc_warm_options o = small_chunks();
    const uint64_t size = (uint64_t)size_of(src);
    const uint64_t chunk = o.chunk_size, nchunks = (size + chunk - 1) / chunk;
    uint64_t journaled = 0;
    const uint64_t missing_bytes = write_partial(src, url, dest, chunk, &journaled);

    dlc_warm_result r;
    cr_assert_eq(dlc_warm(url, dest, &o, &r), DLC_OK, "%s", dlc_errmsg());
    assert_same(src, dest);
    cr_assert(r.resumed);
    cr_assert(r.verified);
    cr_assert_eq(r.bytes_downloaded, missing_bytes);
    cr_assert_eq(r.chunks_fetched, nchunks - journaled);
    assert_no_leftovers(dest);
    free(url);
    free(dest);
    free(src);
}

/* The partial download was made with 64 KiB chunks; the rerun has 96 KiB
 * chunks and another number of connections. It keeps every journaled byte
 * and fetches exactly the missing ones: an odd 64 KiB chunk that straddles a
 * 96 KiB boundary becomes two requests, one for each chunk it touches. */
Test(warm_fetch, resume_with_another_chunk_size_fetches_only_missing_bytes)
{
    char *src = put_store("rc.dlc", 40);
    char *url = NULL, *dest = tmp_path(work, "rc.dlc");
    cr_assert(asprintf(&url, "%s/files/rc.dlc", base) > 0);
    const uint64_t old_chunk = 64 << 10, new_chunk = 96 << 10;
    uint64_t journaled = 0;
    const uint64_t missing_bytes = write_partial(src, url, dest, old_chunk, &journaled);
    const uint64_t size = (uint64_t)size_of(src);
    uint64_t pieces = 0;
    for (uint64_t off = old_chunk; off < size; off += 2 * old_chunk) {
        const uint64_t end = off + old_chunk < size ? off + old_chunk : size;
        pieces += (end - 1) / new_chunk - off / new_chunk + 1;
    }

    dlc_warm_options o = small_chunks();
    o.chunk_size = new_chunk;
    o.connections = 3;
    dlc_warm_result r;
    cr_assert_eq(dlc_warm(url, dest, &o, &r), DLC_OK, "%s", dlc_errmsg());
    assert_same(src, dest);
    cr_assert(r.resumed);
    cr_assert(r.verified);
    cr_assert_eq(r.bytes_downloaded, missing_bytes);
    cr_assert_lt(r.bytes_downloaded, size / 2 + old_chunk);
    cr_assert_eq(r.chunks, (size + new_chunk - 1) / new_chunk);
    cr_assert_eq(r.chunks_fetched, pieces);
    assert_no_leftovers(dest);
    free(url);
    free(dest);
    free(src);
}

static int cancel_after_half(void *user, const dlc_warm_progress *p)
{
    (void)user;
    return p->done > p->total / 2;
}

static int slow_and_cancel(void *user, const dlc_warm_progress *p)
{
    int *calls = user;
    (*calls)++;
    return cancel_after_half(NULL, p);
}

Test(warm_fetch, cancel_keeps_the_partial_download_for_a_rerun)
{
    char *src = put_store("c.dlc", 150);
    char *url = NULL, *dest = tmp_path(work, "c.dlc");
    cr_assert(asprintf(&url, "%s/files/c.dlc", base) > 0);
    dlc_warm_options o = small_chunks();
    o.connections = 1;
    int calls = 0;
    o.progress = slow_and_cancel;
    o.progress_user = &calls;
    dlc_warm_result r;
    const dlc_status rc = dlc_warm(url, dest, &o, &r);
    if (rc == DLC_OK) {
        /* Loopback was faster than the 0.1 s progress pace: nothing to test. */
        cr_skip_test("the download finished before the first progress call");
    }
    cr_assert_eq(rc, DLC_ECANCELED, "%s", dlc_errmsg());
    cr_assert_not(exists(dest));
    o.progress = NULL;
    cr_assert_eq(dlc_warm(url, dest, &o, &r), DLC_OK, "%s", dlc_errmsg());
    cr_assert(r.resumed);
    cr_assert_lt(r.bytes_downloaded, r.bytes);
    assert_same(src, dest);
    free(url);
    free(dest);
    free(src);
}

Test(warm_fetch, not_found_is_a_clear_error_and_leaves_nothing)
{
    char *url = NULL, *dest = tmp_path(work, "missing.dlc");
    cr_assert(asprintf(&url, "%s/files/missing.dlc?sig=secret", base) > 0);
    const dlc_warm_options o = small_chunks();
    dlc_warm_result r;
    cr_assert_eq(dlc_warm(url, dest, &o, &r), DLC_EHTTP);
    const char *msg = dlc_errmsg();
    cr_assert_not_null(strstr(msg, "HTTP 404: NoSuchKey"), "%s", msg);
    cr_assert_not_null(strstr(msg, "/files/missing.dlc?REDACTED"), "%s", msg);
    cr_assert_null(strstr(msg, "secret"), "%s", msg);
    cr_assert_not(exists(dest));
    free(url);
    free(dest);
}

Test(warm_fetch, corrupt_store_is_refused_and_removed)
{
    char *src = put_store("bad.dlc", 40);
    /* Flip bytes in several places so that one is surely in a payload. */
    const int fd = open(src, O_RDWR);
    const off_t n = size_of(src);
    for (int i = 1; i < 8; i++) {
        uint8_t b;
        cr_assert_eq(pread(fd, &b, 1, i * n / 8 + 777), 1);
        b ^= 0x55;
        cr_assert_eq(pwrite(fd, &b, 1, i * n / 8 + 777), 1);
    }
    close(fd);
    char *url = NULL, *dest = tmp_path(work, "bad.dlc"), *part = NULL;
    cr_assert(asprintf(&url, "%s/files/bad.dlc", base) > 0);
    cr_assert(asprintf(&part, "%s.warm-part", dest) > 0);
    const dlc_warm_options o = small_chunks();
    dlc_warm_result r;
    cr_assert_eq(dlc_warm(url, dest, &o, &r), DLC_ECORRUPT, "%s", dlc_errmsg());
    cr_assert_not_null(strstr(dlc_errmsg(), "not a valid store"), "%s", dlc_errmsg());
    cr_assert_not(exists(dest));
    cr_assert_not(exists(part));
    free(url);
    free(dest);
    free(part);
    free(src);
}

Test(warm_fetch, server_without_ranges_gets_one_whole_object_request)
{
    char *src = put_store("n.dlc", 20);
    char *url = NULL, *dest = tmp_path(work, "n.dlc");
    cr_assert(asprintf(&url, "%s/norange/n.dlc", base) > 0);
    const dlc_warm_options o = small_chunks();
    dlc_warm_result r;
    cr_assert_eq(dlc_warm(url, dest, &o, &r), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(r.chunks, 1);
    assert_same(src, dest);
    free(url);
    free(dest);
    free(src);
}

Test(warm_fetch, gcs_with_bearer_token)
{
    char *p = NULL;
    cr_assert(asprintf(&p, "%s/bkt/dir", root) > 0);
    cr_assert_eq(mkdir(p, 0755), 0);
    free(p);
    cr_assert(asprintf(&p, "%s/bkt/dir/g.dlc", root) > 0);
    tsu_write_store(p, 30, 0, 1);
    char *dest = tmp_path(work, "g.dlc");
    dlc_warm_options o = small_chunks();
    o.endpoint = base;
    dlc_warm_result r;
    setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "wrong", 1);
    cr_assert_eq(dlc_warm("gs://bkt/dir/g.dlc", dest, &o, &r), DLC_EHTTP);
    cr_assert_not_null(strstr(dlc_errmsg(), "HTTP 403: Invalid Credentials"), "%s", dlc_errmsg());
    cr_assert_null(strstr(dlc_errmsg(), "wrong"), "%s", dlc_errmsg());
    setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "tok123", 1);
    cr_assert_eq(dlc_warm("gs://bkt/dir/g.dlc", dest, &o, &r), DLC_OK, "%s", dlc_errmsg());
    cr_assert(r.verified);
    assert_same(p, dest);
    free(p);
    free(dest);
}

Test(warm_fetch, rejects_bad_options)
{
    char *dest = tmp_path(work, "x.dlc");
    dlc_warm_options o;
    dlc_warm_options_init(&o);
    o.chunk_size = 1000;
    cr_assert_eq(dlc_warm("http://127.0.0.1:1/x", dest, &o, NULL), DLC_EINVAL);
    dlc_warm_options_init(&o);
    o.connections = 100000;
    cr_assert_eq(dlc_warm("http://127.0.0.1:1/x", dest, &o, NULL), DLC_EINVAL);
    cr_assert_eq(dlc_warm(NULL, dest, NULL, NULL), DLC_EINVAL);
    /* Issue 32, item 4: a timeout that libcurl would read as "off" (or none at all). */
    const double bad[] = {0.0009, 1e-4, 1e-300, -1, NAN, INFINITY, 1e9};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int field = 0; field < 2; field++) {
            dlc_warm_options_init(&o);
            if (field)
                o.connect_timeout_s = bad[i];
            else
                o.timeout_s = bad[i];
            cr_assert_eq(dlc_warm("http://127.0.0.1:1/x", dest, &o, NULL), DLC_EINVAL, "%g",
                         bad[i]);
            cr_assert(strstr(dlc_errmsg(), field ? "connect_timeout_s" : "(timeout_s)"), "%s",
                      dlc_errmsg());
            cr_assert(strstr(dlc_errmsg(), "0.1 s"), "%s", dlc_errmsg());
        }
    }
    char *nodir = tmp_path(work, "no/such/dir/x.dlc");
    char *url = NULL;
    cr_assert(asprintf(&url, "%s/files/x", base) > 0);
    cr_assert_eq(dlc_warm(url, nodir, NULL, NULL), -ENOENT);
    free(url);
    free(nodir);
    free(dest);
}

/* Options grow at their end (status.h, "How structs grow"): both calls check struct_size before
 * anything else, dlc_warm_push() also in the network options its net points to. */
Test(warm_fetch, options_without_init_or_from_a_newer_header_are_refused)
{
    char *dest = tmp_path(work, "never.dlc");
    dlc_warm_options o = small_chunks();
    dlc_warm_result r;
    o.struct_size = 0;
    cr_assert_eq(dlc_warm("http://127.0.0.1:1/x", dest, &o, &r), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "dlc_warm_options: struct_size is 0") != NULL, "%s",
              dlc_errmsg());
    cr_assert(strstr(dlc_errmsg(), "dlc_warm_options_init()") != NULL, "%s", dlc_errmsg());
    o.struct_size = sizeof o + 8;
    cr_assert_eq(dlc_warm("http://127.0.0.1:1/x", dest, &o, &r), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "newer dlcache header") != NULL, "%s", dlc_errmsg());

    dlc_warm_push_options p;
    dlc_warm_push_options_init(&p);
    dlc_warm_options net;
    memset(&net, 0, sizeof net);
    p.net = &net;
    dlc_warm_push_result pr;
    cr_assert_eq(dlc_warm_push(dest, "s3://b/k", &p, &pr), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "dlc_warm_push_options.net: struct_size is 0") != NULL, "%s",
              dlc_errmsg());
    p.net = NULL;
    p.struct_size = 0;
    cr_assert_eq(dlc_warm_push(dest, "s3://b/k", &p, &pr), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "dlc_warm_push_options_init()") != NULL, "%s", dlc_errmsg());
    free(dest);
}

/* Start tests/lib/netserver.py in @p mode (its port into *port_out); kill with stop_hostile(). */
static pid_t start_hostile(const char *mode, int *port_out)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    const pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        /* Gone with the test, also when a hang makes Criterion kill it, and holding none of the
         * runner's pipes open meanwhile. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], 1);
        const int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        close(fds[0]);
        close(fds[1]);
        execl("/usr/bin/python3", "python3", DLC_TEST_SOURCE_DIR "/tests/lib/netserver.py",
              "--mode", mode, "--size", "1048576", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    cr_assert(f);
    int p = 0;
    cr_assert_eq(fscanf(f, "%d", &p), 1, "netserver.py --mode %s did not start", mode);
    fclose(f);
    *port_out = p;
    return pid;
}

static void stop_hostile(pid_t pid)
{
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

/* Issue 32, items 2 and 3, in-process (the engine's cut of an error body and the attempts that
 * progress no longer resets run under ASan here): each returned only when killed before. The
 * suite's timeout turns a hang into a failure. */
Test(warm_fetch, hostile_servers_run_out_of_attempts)
{
    static const struct {
        const char *mode, *says;
    } cases[] = {{"errbody", "gave up after 2 attempts: HTTP 503: Slow down: this error body"},
                 {"onebyte", "gave up after 2 attempts: transfer closed"},
                 {"trickle", "gave up after 2 attempts: Operation too slow"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int hport = 0;
        const pid_t pid = start_hostile(cases[i].mode, &hport);
        char url[128];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/x.dlc", hport);
        char *dest = tmp_path(work, cases[i].mode);
        dlc_warm_options o = small_chunks();
        o.connections = 1;
        o.max_retries = 1;
        o.timeout_s = 1;
        o.flags = DLC_WARM_NO_VERIFY;
        const dlc_status rc = dlc_warm(url, dest, &o, NULL);
        stop_hostile(pid);
        cr_assert_eq(rc, DLC_ENETWORK, "%s: %d %s", cases[i].mode, rc, dlc_errmsg());
        cr_assert(strstr(dlc_errmsg(), cases[i].says), "%s: %s", cases[i].mode, dlc_errmsg());
        free(dest);
    }
}
