/* The transfer engine of the warm part (cache/warm/warm_xfer.c) on its own, with a small driver of
 * file:// transfers, so that no server is needed: every transfer is done once across the slots,
 * bodies go to the sink and come from the source, a retry waits its backoff and is logged, the
 * attempts run out into the driver's failure, an attempt that made progress starts the count
 * over, and a progress callback that answers nonzero cancels, also the probe of dlc_warm() held
 * by a server that accepts and never answers (issue 23: a loader's close() waited out every
 * attempt's timeout); retry notices are rate-limited per slot (issue 32). */
#include "common.h"
#include "tmpdir_util.h"
#include "warm_xfer.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

TMPDIR_SUITE(warm_xfer);

enum { NT = 10, BODY = 1000 };

/* The test's driver: NT transfers, each a file:// URL to read or to write. */
typedef struct driver {
    char urls[NT][512];
    int upload;         /* Write each file from the source hook, else read it. */
    size_t next;        /* The next transfer to hand out. */
    size_t done;        /* Transfers done. */
    int done_count[NT]; /* Times each was done. */
    uint64_t received;  /* Body bytes the sink took. */
    int retry_always;   /* Every attempt fails with a retry, */
    int progress_for;   /* the first this many of them having made progress. */
    unsigned retried;   /* Attempts judged a retry. */
    unsigned before;    /* Calls of before_retry. */
    int progress_calls;
} driver;

/* One slot's transfer. */
typedef struct job {
    size_t i;
    size_t sent;
} job;

static int t_next(void *drv, dlc__xfer_slot *s)
{
    driver *d = drv;
    if (d->next == NT)
        return 0;
    ((job *)s->t)->i = d->next++;
    return 1;
}

static dlc_status t_request(void *drv, dlc__xfer_slot *s)
{
    const driver *d = drv;
    job *j = s->t;
    j->sent = 0;
    curl_easy_setopt(s->h, CURLOPT_URL, d->urls[j->i]);
    curl_easy_setopt(s->h, CURLOPT_UPLOAD, (long)d->upload);
    if (d->upload)
        curl_easy_setopt(s->h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)BODY);
    return DLC_OK;
}

static void t_response(void *drv, dlc__xfer_slot *s) {}

static void t_header(void *drv, dlc__xfer_slot *s, const char *name, size_t nlen, const char *value,
                     size_t vlen)
{
}

static size_t t_sink(void *drv, dlc__xfer_slot *s, const char *p, size_t n)
{
    driver *d = drv;
    d->received += n;
    return n;
}

static size_t t_source(void *drv, dlc__xfer_slot *s, char *buf, size_t n)
{
    job *j = s->t;
    const size_t left = BODY - j->sent;
    const size_t take = n < left ? n : left;
    memset(buf, 'a' + (int)j->i, take);
    j->sent += take;
    return take;
}

static int t_rewind(void *drv, dlc__xfer_slot *s)
{
    ((job *)s->t)->sent = 0;
    return 0;
}

static dlc_status t_done(void *drv, dlc__xfer_slot *s, CURLcode res, char *why, size_t cap)
{
    driver *d = drv;
    const job *j = s->t;
    if (d->retry_always) {
        d->retried++;
        s->progressed = (int)d->retried <= d->progress_for;
        s->give_up = DLC_ECORRUPT;
        snprintf(why, cap, "failure %u", d->retried);
        return DLC__XFER_RETRY;
    }
    cr_assert_eq(res, CURLE_OK, "%s: %s", d->urls[j->i], s->errbuf);
    d->done_count[j->i]++;
    d->done++;
    return DLC_OK;
}

static const char *t_describe(void *drv, const dlc__xfer_slot *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "transfer %zu", ((const job *)s->t)->i);
    return buf;
}

static dlc_status t_before_retry(void *drv, dlc__xfer_slot *s)
{
    ((driver *)drv)->before++;
    return DLC_OK;
}

static int t_finished(void *drv)
{
    return ((const driver *)drv)->done == NT;
}

static void t_progress(void *drv, const dlc__xfer *e, double now, dlc_warm_progress *p)
{
    driver *d = drv;
    d->progress_calls++;
    p->total = NT;
    p->done = d->done;
}

static dlc_status t_canceled(void *drv)
{
    return dlc__errorf(DLC_ECANCELED, "test canceled");
}

static const dlc__xfer_ops ops = {
    .next = t_next,
    .request = t_request,
    .response = t_response,
    .header = t_header,
    .sink = t_sink,
    .source = t_source,
    .rewind = t_rewind,
    .done = t_done,
    .describe = t_describe,
    .before_retry = t_before_retry,
    .finished = t_finished,
    .progress = t_progress,
    .canceled = t_canceled,
};

/* Log lines, kept in order. */
typedef struct log_lines {
    char text[8][256];
    int n;
} log_lines;

static void on_log(void *user, dlc_log_level level, const char *msg)
{
    log_lines *l = user;
    cr_assert_eq(level, DLC_LOG_WARN);
    if (l->n < 8)
        snprintf(l->text[l->n++], sizeof l->text[0], "%s", msg);
}

static int cancel_now(void *user, const dlc_warm_progress *p)
{
    return 1;
}

/* Run @p d on @p slots slots with @p net; returns what the run returned. */
static dlc_status run(driver *d, size_t slots, const dlc_warm_options *net, uint32_t *retries)
{
    job jobs[4] = {{0}};
    cr_assert(slots <= 4);
    const dlc__xfer_config cfg = {
        .ops = &ops, .drv = d, .slots = slots, .net = net, .name = "test", .retries = retries};
    dlc__xfer *e = NULL;
    cr_assert_eq(dlc__xfer_open(&cfg, &e), DLC_OK);
    cr_assert_eq(dlc__xfer_slot_count(e), slots);
    for (size_t i = 0; i < slots; i++)
        dlc__xfer_slot_at(e, i)->t = &jobs[i];
    const dlc_status rc = dlc__xfer_run(e);
    dlc__xfer_close(e);
    return rc;
}

static void make_urls(driver *d, int create)
{
    for (size_t i = 0; i < NT; i++) {
        char name[32];
        snprintf(name, sizeof name, "f%zu", i);
        char *path = tmp_path(dir, name);
        if (create) {
            FILE *f = fopen(path, "wb");
            cr_assert(f);
            for (int k = 0; k < BODY; k++)
                fputc('x', f);
            fclose(f);
        }
        snprintf(d->urls[i], sizeof d->urls[i], "file://%s", path);
        free(path);
    }
}

Test(warm_xfer, every_transfer_once_across_the_slots)
{
    static driver d;
    memset(&d, 0, sizeof d);
    make_urls(&d, 1);
    dlc_warm_options net;
    dlc_warm_options_init(&net);
    uint32_t retries = 0;
    cr_assert_eq(run(&d, 3, &net, &retries), DLC_OK, "%s", dlc_errmsg());
    for (size_t i = 0; i < NT; i++)
        cr_assert_eq(d.done_count[i], 1, "transfer %zu done %d times", i, d.done_count[i]);
    cr_assert_eq(d.received, (uint64_t)NT * BODY);
    cr_assert_eq(retries, 0);
    cr_assert_eq(d.progress_calls, 0, "no progress callback in the options: no progress hook");
}

Test(warm_xfer, the_source_gives_the_bodies)
{
    static driver d;
    memset(&d, 0, sizeof d);
    d.upload = 1;
    make_urls(&d, 0);
    dlc_warm_options net;
    dlc_warm_options_init(&net);
    cr_assert_eq(run(&d, 4, &net, NULL), DLC_OK, "%s", dlc_errmsg());
    for (size_t i = 0; i < NT; i++) {
        struct stat st;
        cr_assert_eq(stat(d.urls[i] + strlen("file://"), &st), 0);
        cr_assert_eq(st.st_size, BODY, "transfer %zu", i);
        FILE *f = fopen(d.urls[i] + strlen("file://"), "rb");
        cr_assert_eq(fgetc(f), 'a' + (int)i);
        fclose(f);
    }
}

Test(warm_xfer, retries_are_logged_then_the_attempts_run_out)
{
    static driver d;
    memset(&d, 0, sizeof d);
    make_urls(&d, 1);
    d.retry_always = 1;
    dlc_warm_options net;
    dlc_warm_options_init(&net);
    net.max_retries = 2;
    log_lines lines = {.n = 0};
    net.log = on_log;
    net.log_user = &lines;
    uint32_t retries = 0;
    const double t0 = dlc__now_s();
    cr_assert_eq(run(&d, 1, &net, &retries), DLC_ECORRUPT, "the driver's give_up code");
    /* The backoffs: at least half of 0.1 s and of 0.2 s. */
    cr_assert_geq(dlc__now_s() - t0, 0.15);
    cr_assert_str_eq(dlc_errmsg(), "transfer 0: gave up after 3 attempts: failure 3");
    cr_assert_eq(retries, 3);
    cr_assert_eq(d.before, 2, "before_retry runs only for a retry that will happen");
    cr_assert_eq(lines.n, 2);
    cr_assert(strncmp(lines.text[0], "transfer 0: failure 1; retry 1 in 0.", 36) == 0, "%s",
              lines.text[0]);
    cr_assert(strncmp(lines.text[1], "transfer 0: failure 2; retry 2 in 0.", 36) == 0, "%s",
              lines.text[1]);
}

Test(warm_xfer, progress_starts_the_count_over)
{
    static driver d;
    memset(&d, 0, sizeof d);
    make_urls(&d, 1);
    d.retry_always = 1;
    d.progress_for = 3;
    dlc_warm_options net;
    dlc_warm_options_init(&net);
    net.max_retries = 1;
    uint32_t retries = 0;
    cr_assert_eq(run(&d, 1, &net, &retries), DLC_ECORRUPT);
    /* Attempts 1, 1, 1 (each made progress), then 2: more than one retry in a row. */
    cr_assert_str_eq(dlc_errmsg(), "transfer 0: gave up after 2 attempts: failure 4");
    cr_assert_eq(retries, 4);
}

/* Issue 32: a server that drops every connection after some progress made a notice per attempt
 * (1,510 lines a minute). At most DLC__XFER_NOTICES per slot in DLC__XFER_NOTICE_WINDOW_S. */
Test(warm_xfer, retry_notices_are_rate_limited)
{
    static driver d;
    memset(&d, 0, sizeof d);
    make_urls(&d, 1);
    d.retry_always = 1;
    d.progress_for = 12; /* Attempt 1 each time: backoffs of 0.05-0.1 s, well inside a window. */
    dlc_warm_options net;
    dlc_warm_options_init(&net);
    net.max_retries = 1;
    log_lines lines = {.n = 0};
    net.log = on_log;
    net.log_user = &lines;
    uint32_t retries = 0;
    cr_assert_eq(run(&d, 1, &net, &retries), DLC_ECORRUPT);
    cr_assert_str_eq(dlc_errmsg(), "transfer 0: gave up after 2 attempts: failure 13");
    cr_assert_eq(retries, 13, "every retry is still counted");
    cr_assert_eq(lines.n, DLC__XFER_NOTICES, "%d notices", lines.n);
    cr_assert(strncmp(lines.text[0], "transfer 0: failure 1; retry 1 in 0.", 36) == 0, "%s",
              lines.text[0]);
}

Test(warm_xfer, a_progress_callback_cancels)
{
    static driver d;
    memset(&d, 0, sizeof d);
    make_urls(&d, 1);
    d.retry_always = 1; /* Never finishes on its own. */
    dlc_warm_options net;
    dlc_warm_options_init(&net);
    net.progress = cancel_now;
    cr_assert_eq(run(&d, 2, &net, NULL), DLC_ECANCELED);
    cr_assert_str_eq(dlc_errmsg(), "test canceled");
    cr_assert_eq(d.progress_calls, 1);
}

static int cancel_after_first(void *user, const dlc_warm_progress *p)
{
    (void)p;
    int *calls = user;
    return ++*calls > 1;
}

/* A socket on loopback that listens and never accepts: the kernel completes the connections, and
 * no byte ever comes back, as from a dead endpoint behind a live balancer. */
Test(warm_xfer, a_progress_callback_cancels_a_probe_that_hangs)
{
    const int ls = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(ls >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(ls, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(ls, 16), 0);
    socklen_t len = sizeof a;
    cr_assert_eq(getsockname(ls, (struct sockaddr *)&a, &len), 0);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/set/index.dlcset", ntohs(a.sin_port));
    dlc_warm_options net;
    dlc_warm_options_init(&net);
    net.timeout_s = 2; /* Without the cancel: 2 attempts of 2 s, then DLC_ENETWORK. */
    net.max_retries = 1;
    int calls = 0;
    net.progress = cancel_after_first;
    net.progress_user = &calls;
    char *dest = tmp_path(dir, "hang.dlc");
    const dlc_status rc = dlc_warm(url, dest, &net, NULL);
    cr_assert_eq(rc, DLC_ECANCELED, "%d: %s", rc, dlc_errmsg());
    cr_assert_eq(calls, 2);
    free(dest);
    close(ls);
}
