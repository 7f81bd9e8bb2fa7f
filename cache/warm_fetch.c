/* The download itself: a probe for size and ETag, then parallel ranged GETs on
 * libcurl's multi interface, each written at its offset with pwrite(), each
 * response checked (status, Content-Range, ETag, length), failures retried
 * with backoff, and completed byte ranges journaled by a thread of their own
 * once their bytes are synced. What is fetched are the pieces of the object
 * that no earlier run put in place, each inside one chunk (dlc__warm_gaps). */
#include "common.h"
#include "warm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Why a write callback stopped a transfer (libcurl then says WRITE_ERROR). */
enum abort_reason {
    ABORT_NONE = 0,
    ABORT_RANGE,   /* Content-Range is not the range we asked for. */
    ABORT_IGNORED, /* 200 (whole object) to a request for a part. */
    ABORT_LONG,    /* More bytes than asked for. */
    ABORT_CHANGED, /* The ETag is not the one the download started with. */
    ABORT_IO,      /* pwrite() failed: errno in io_errno. */
    ABORT_PROBE,   /* The probe has its headers and stops on purpose. */
};

/* One transfer slot: an easy handle and the piece it is working on. */
typedef struct xfer {
    CURL *h;
    struct curl_slist *hdrs;
    dlc__warm_fetch_job *job;
    char errbuf[CURL_ERROR_SIZE];
    int active;     /* Added to the multi handle. */
    int assigned;   /* Holds a piece (active, or waiting for its retry time). */
    uint64_t piece; /* The piece's first byte. */
    uint64_t start; /* This attempt's first byte (after bytes of earlier attempts). */
    uint64_t end;   /* Inclusive last byte of the piece. */
    uint64_t got;   /* Bytes written by this attempt. */
    unsigned attempts;
    double retry_at;
    /* The response, from the header callback. */
    long status;
    int have_range;
    uint64_t cr_start, cr_end, cr_total;
    int64_t content_length;
    char etag[DLC__WARM_ETAG_MAX];
    int pushed;              /* dlcache-part-size metadata: the object was pushed by dlcache, */
    uint64_t push_part_size; /* with parts of this size. */
    char goog_md5[32];       /* x-goog-hash md5=, base64. */
    int checked;             /* Headers checked at the first body byte. */
    enum abort_reason why;
    int io_errno;
    char body[DLC__WARM_ERRBODY_MAX];
    size_t body_len;
} xfer;

static void trim_value(const char *v, size_t n, char *out, size_t cap)
{
    while (n > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        n--;
    }
    while (n > 0 && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
        n--;
    if (n >= cap)
        n = cap - 1;
    memcpy(out, v, n);
    out[n] = '\0';
}

static void reset_response(xfer *x)
{
    x->status = 0;
    x->have_range = 0;
    x->content_length = -1;
    x->etag[0] = '\0';
    x->pushed = 0;
    x->push_part_size = 0;
    x->goog_md5[0] = '\0';
    x->checked = 0;
    x->why = ABORT_NONE;
    x->body_len = 0;
    x->body[0] = '\0';
}

static size_t on_header(char *p, size_t size, size_t n, void *user)
{
    xfer *x = user;
    const size_t len = size * n;
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        /* A new response (after a redirect or a 100): forget the previous. */
        reset_response(x);
        const char *sp = memchr(p, ' ', len);
        if (sp)
            x->status = strtol(sp + 1, NULL, 10);
        return len;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon)
        return len;
    const size_t klen = (size_t)(colon - p);
    const char *v = colon + 1;
    const size_t vlen = len - klen - 1;
    char val[256];
    if (klen == 13 && strncasecmp(p, "Content-Range", 13) == 0) {
        trim_value(v, vlen, val, sizeof val);
        x->have_range =
            dlc__warm_parse_content_range(val, &x->cr_start, &x->cr_end, &x->cr_total) == 0;
    } else if (klen == 14 && strncasecmp(p, "Content-Length", 14) == 0) {
        trim_value(v, vlen, val, sizeof val);
        char *end = NULL;
        const unsigned long long cl = strtoull(val, &end, 10);
        x->content_length = (end && *end == '\0' && end != val) ? (int64_t)cl : -1;
    } else if (klen == 4 && strncasecmp(p, "ETag", 4) == 0) {
        trim_value(v, vlen, x->etag, sizeof x->etag);
    } else if ((klen == strlen("x-amz-meta-" DLC__PUSH_META) &&
                strncasecmp(p, "x-amz-meta-" DLC__PUSH_META, klen) == 0) ||
               (klen == strlen("x-goog-meta-" DLC__PUSH_META) &&
                strncasecmp(p, "x-goog-meta-" DLC__PUSH_META, klen) == 0)) {
        trim_value(v, vlen, val, sizeof val);
        x->pushed = 1;
        x->push_part_size = strtoull(val, NULL, 10);
    } else if (klen == 11 && strncasecmp(p, "x-goog-hash", 11) == 0) {
        /* "crc32c=...,md5=..." (one header or several). */
        trim_value(v, vlen, val, sizeof val);
        const char *m = strstr(val, "md5=");
        if (m)
            snprintf(x->goog_md5, sizeof x->goog_md5, "%.*s", (int)strcspn(m + 4, ", "), m + 4);
    }
    return len;
}

static int is_ok_status(long s)
{
    return s == 200 || s == 206;
}

/* Check a response's headers against the request before its first byte is
 * written anywhere. */
static enum abort_reason check_headers(xfer *x)
{
    const dlc__warm_fetch_job *job = x->job;
    const uint64_t size = job->obj->size;
    const char *want_etag = job->obj->etag;
    if (*want_etag && *x->etag && strcmp(want_etag, x->etag) != 0)
        return ABORT_CHANGED;
    if (x->status == 200) {
        /* A whole-object answer is only right when the whole object is what
         * this attempt asked for. */
        if (x->start != 0 || x->end + 1 != size)
            return ABORT_IGNORED;
        if (x->content_length >= 0 && (uint64_t)x->content_length != size)
            return ABORT_CHANGED;
        return ABORT_NONE;
    }
    if (!x->have_range || x->cr_start != x->start || x->cr_end != x->end ||
        (x->cr_total != UINT64_MAX && x->cr_total != size))
        return x->have_range && x->cr_total != UINT64_MAX && x->cr_total != size ? ABORT_CHANGED
                                                                                 : ABORT_RANGE;
    if (x->content_length >= 0 && (uint64_t)x->content_length != x->end - x->start + 1)
        return ABORT_RANGE;
    return ABORT_NONE;
}

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
    xfer *x = user;
    const size_t len = size * n;
    if (!is_ok_status(x->status)) {
        /* An error answer: keep its start for the message, write nothing. */
        const size_t room = sizeof x->body - 1 - x->body_len;
        const size_t take = len < room ? len : room;
        memcpy(x->body + x->body_len, p, take);
        x->body_len += take;
        x->body[x->body_len] = '\0';
        return len;
    }
    if (!x->job) {
        /* The probe: headers are all it wanted. */
        x->why = ABORT_PROBE;
        return 0;
    }
    if (!x->checked) {
        x->why = check_headers(x);
        if (x->why != ABORT_NONE)
            return 0;
        x->checked = 1;
    }
    const uint64_t want = x->end - x->start + 1;
    if (x->got + len > want) {
        x->why = ABORT_LONG;
        return 0;
    }
    const char *b = p;
    size_t left = len;
    off_t off = (off_t)(x->start + x->got);
    while (left > 0) {
        const ssize_t w = pwrite(x->job->fd, b, left, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            x->why = ABORT_IO;
            x->io_errno = errno;
            return 0;
        }
        b += w;
        left -= (size_t)w;
        off += w;
    }
    x->got += len;
    x->job->downloaded += len;
    return len;
}

/* ------------------------------------------------------------------------ */
/* The journal thread: fdatasync the data, then record the pieces that the
 * sync made durable. Syncing on the transfer thread would stop every
 * connection for the length of each sync. */

typedef struct syncer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    dlc__warm_fetch_job *job;
    dlc__warm_range *pending; /* Pieces complete in the page cache, not yet journaled. */
    size_t npending;
    dlc__warm_range *batch; /* The syncer's own copy while it works. */
    int stop;
    dlc_status rc; /* First failure; the transfer thread stops on it. */
    char msg[1024];
} syncer;

/* Journal at most this often: each fdatasync stalls writers on pages under
 * writeback, and a rerun loses at most this much work. */
#define SYNC_INTERVAL_S 0.5

static void *sync_main(void *arg)
{
    syncer *s = arg;
    dlc__warm_fetch_job *job = s->job;
    size_t nbatch = 0;
    double last_sync = dlc__now_s();
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->npending == 0 && nbatch == 0 && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->npending == 0 && nbatch == 0 && s->stop)
            break;
        const size_t n = s->npending;
        memcpy(s->batch + nbatch, s->pending, n * sizeof *s->batch);
        s->npending = 0;
        const int stopping = s->stop;
        pthread_mutex_unlock(&s->mu);
        /* Start writing the new pieces back now, so that the checkpoint's
         * fdatasync (and the final fsync) find little left to do. */
        for (size_t i = nbatch; i < nbatch + n; i++)
            sync_file_range(job->fd, (off_t)s->batch[i].off, (off_t)s->batch[i].len,
                            SYNC_FILE_RANGE_WRITE);
        nbatch += n;
        const double due = last_sync + SYNC_INTERVAL_S;
        if (!stopping && dlc__now_s() < due) {
            pthread_mutex_lock(&s->mu);
            const double wait = due - dlc__now_s();
            if (wait > 0 && !s->stop) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                const long ns = ts.tv_nsec + (long)(wait * 1e9);
                ts.tv_sec += ns / 1000000000L;
                ts.tv_nsec = ns % 1000000000L;
                pthread_cond_timedwait(&s->cv, &s->mu, &ts);
            }
            continue;
        }
        dlc_status rc = DLC_OK;
        /* Data first, then the record that claims it: a journal entry must
         * never name bytes that a power cut could still lose. */
        if (fdatasync(job->fd) < 0)
            rc = dlc__errorf(-errno, "%s: fdatasync: %s", job->part_path, strerror(errno));
        else
            rc = dlc__warm_journal_append(job->journal_fd, job->journal_path, job->jid, s->batch,
                                          nbatch);
        nbatch = 0;
        last_sync = dlc__now_s();
        pthread_mutex_lock(&s->mu);
        if (rc < 0 && s->rc == DLC_OK) {
            s->rc = rc;
            snprintf(s->msg, sizeof s->msg, "%s", dlc_errmsg());
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void sync_push(syncer *s, uint64_t off, uint64_t len)
{
    pthread_mutex_lock(&s->mu);
    s->pending[s->npending].off = off;
    s->pending[s->npending].len = len;
    s->npending++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static dlc_status sync_failed(syncer *s)
{
    pthread_mutex_lock(&s->mu);
    const dlc_status rc = s->rc;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ------------------------------------------------------------------------ */

static dlc_status start_attempt(CURLM *m, xfer *x)
{
    dlc__warm_fetch_job *job = x->job;
    curl_slist_free_all(x->hdrs);
    x->hdrs = NULL;
    const int whole = x->start == 0 && x->end + 1 == job->obj->size && !job->obj->ranges;
    dlc_status rc = dlc__warm_request_headers(job->src, x->start, whole ? UINT64_MAX : x->end,
                                              job->obj->etag, &x->hdrs);
    if (rc < 0)
        return rc;
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->hdrs);
    reset_response(x);
    x->got = 0;
    x->errbuf[0] = '\0';
    const CURLMcode mc = curl_multi_add_handle(m, x->h);
    if (mc != CURLM_OK)
        return dlc__errorf(-ENOMEM, "warm: curl_multi_add_handle: %s", curl_multi_strerror(mc));
    x->active = 1;
    return DLC_OK;
}

static const char *reason_text(enum abort_reason r)
{
    switch (r) {
    case ABORT_RANGE:
        return "the Content-Range or length of the answer is not the range asked for";
    case ABORT_IGNORED:
        return "the server ignored the Range header and sent the whole object";
    case ABORT_LONG:
        return "the server sent more bytes than asked for";
    case ABORT_CHANGED:
        return "the object changed during the download (ETag or size differ); run again to "
               "start over";
    default:
        return "transfer stopped";
    }
}

/* Decide what a finished attempt means: DLC_OK with *complete set, a
 * retry (returns 1), or a fatal error. */
static int finish_attempt(xfer *x, CURLcode res, dlc_status *fatal, char *why, size_t whycap)
{
    dlc__warm_fetch_job *job = x->job;
    const char *shown = job->src->shown;
    why[0] = '\0';
    if (res == CURLE_OK && is_ok_status(x->status)) {
        if (x->got == x->end - x->start + 1)
            return 0;
        snprintf(why, whycap, "short answer: %" PRIu64 " of %" PRIu64 " bytes", x->got,
                 x->end - x->start + 1);
        return 1;
    }
    if (res == CURLE_WRITE_ERROR && x->why != ABORT_NONE) {
        if (x->why == ABORT_IO) {
            *fatal = dlc__errorf(-x->io_errno, "%s: write at offset %" PRIu64 ": %s",
                                 job->part_path, x->start + x->got, strerror(x->io_errno));
        } else {
            *fatal = dlc__errorf(x->why == ABORT_CHANGED ? DLC_ECHANGED : DLC_ECORRUPT,
                                 "%s: bytes %" PRIu64 "-%" PRIu64 ": %s", shown, x->start, x->end,
                                 reason_text(x->why));
        }
        return -1;
    }
    if (res == CURLE_OK) {
        char said[600];
        dlc__warm_describe_body(x->body, x->body_len, said, sizeof said);
        if (dlc__warm_retryable_http(x->status)) {
            snprintf(why, whycap, "HTTP %ld%s%s", x->status, *said ? ": " : "", said);
            return 1;
        }
        *fatal =
            dlc__errorf(x->status == 412 ? DLC_ECHANGED : DLC_EHTTP, "%s: HTTP %ld%s%s", shown,
                        x->status, *said ? ": " : "", *said ? said : "(no detail from the server)");
        return -1;
    }
    const char *detail = x->errbuf[0] ? x->errbuf : curl_easy_strerror(res);
    if (dlc__warm_retryable_curl(res)) {
        snprintf(why, whycap, "%s", detail);
        return 1;
    }
    *fatal = dlc__errorf(DLC_ENETWORK, "%s: %s", shown, detail);
    return -1;
}

static int want_cancel(dlc__warm_fetch_job *job, const xfer *xs, size_t nx, double *last)
{
    const dlc_warm_options *opt = job->opt;
    if (!opt->progress)
        return 0;
    const double now = dlc__now_s();
    if (now - *last < 0.1)
        return 0;
    *last = now;
    uint64_t partial = 0;
    for (size_t i = 0; i < nx; i++)
        if (xs[i].assigned)
            partial += xs[i].start - xs[i].piece + (xs[i].active ? xs[i].got : 0);
    dlc_warm_progress p = {.total = job->obj->size,
                           .done = job->done_bytes + partial,
                           .downloaded = job->downloaded,
                           .seconds = now - job->t0,
                           .verifying = 0};
    return opt->progress(opt->progress_user, &p) != 0;
}

/* The state of one dlc__warm_fetch() call, shared by its stages. */
typedef struct fetcher {
    dlc__warm_fetch_job *job;
    CURLM *m;
    xfer *xs; /* nx transfer slots. */
    size_t nx;
    syncer sy;
    int sync_started; /* The journal thread runs and must be joined. */
    uint32_t max_retries;
    uint64_t rng;        /* Backoff jitter. */
    uint64_t missing;    /* Pieces not yet complete. */
    dlc__warm_gaps gaps; /* The pieces not yet assigned. */
    double last_progress;
} fetcher;

/* One easy handle per slot, all sharing the source's settings. */
static dlc_status open_transfers(fetcher *f)
{
    f->m = curl_multi_init();
    f->xs = calloc(f->nx, sizeof *f->xs);
    if (!f->m || !f->xs)
        return dlc__errorf(-ENOMEM, "warm: out of memory");
    curl_multi_setopt(f->m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)f->nx);
    for (size_t i = 0; i < f->nx; i++) {
        xfer *x = &f->xs[i];
        x->job = f->job;
        x->h = curl_easy_init();
        if (!x->h)
            return dlc__errorf(-ENOMEM, "warm: out of memory");
        const dlc_status rc = dlc__warm_easy_setup(x->h, f->job->src, f->job->opt);
        if (rc < 0)
            return rc;
        curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
        curl_easy_setopt(x->h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(x->h, CURLOPT_HEADERDATA, x);
        curl_easy_setopt(x->h, CURLOPT_ERRORBUFFER, x->errbuf);
        curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
    }
    return DLC_OK;
}

/* Start the journal thread when there is a journal. */
static dlc_status start_syncer(fetcher *f)
{
    dlc__warm_fetch_job *job = f->job;
    syncer *sy = &f->sy;
    if (job->journal_fd < 0)
        return DLC_OK;
    sy->job = job;
    /* Each piece is pushed once. */
    sy->pending = malloc(f->missing * sizeof *sy->pending);
    sy->batch = malloc(f->missing * sizeof *sy->batch);
    if (!sy->pending || !sy->batch)
        return dlc__errorf(-ENOMEM, "warm: out of memory");
    pthread_mutex_init(&sy->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sy->cv, &ca);
    pthread_condattr_destroy(&ca);
    const int e = pthread_create(&sy->thread, NULL, sync_main, sy);
    if (e != 0) {
        pthread_mutex_destroy(&sy->mu);
        pthread_cond_destroy(&sy->cv);
        return dlc__errorf(-e, "warm: cannot start the journal thread: %s", strerror(e));
    }
    f->sync_started = 1;
    return DLC_OK;
}

/* Give @p x the next missing piece; 0 when none is left. */
static int assign_next_piece(fetcher *f, xfer *x)
{
    dlc__warm_range piece;
    if (!dlc__warm_gaps_next(&f->gaps, &piece))
        return 0;
    x->assigned = 1;
    x->piece = piece.off;
    x->start = piece.off;
    x->end = piece.off + piece.len - 1;
    x->attempts = 0;
    x->retry_at = 0;
    f->job->chunks_fetched++;
    return 1;
}

/* Every idle slot takes a piece, and starts its request once its retry is due. */
static dlc_status start_due_attempts(fetcher *f)
{
    const double now = dlc__now_s();
    for (size_t i = 0; i < f->nx; i++) {
        xfer *x = &f->xs[i];
        if (x->active)
            continue;
        if (!x->assigned && !assign_next_piece(f, x))
            continue;
        if (now >= x->retry_at) {
            const dlc_status rc = start_attempt(f->m, x);
            if (rc < 0)
                return rc;
        }
    }
    return DLC_OK;
}

/* All bytes of the piece of @p x are in place: count it and hand it to the journal. */
static void complete_piece(fetcher *f, xfer *x)
{
    const uint64_t len = x->end - x->piece + 1;
    f->job->done_bytes += len;
    x->assigned = 0;
    f->missing--;
    if (f->sync_started)
        sync_push(&f->sy, x->piece, len);
}

/* Retry what is still missing of the piece of @p x after a backoff, or give up. */
static dlc_status schedule_retry(fetcher *f, xfer *x, const char *why)
{
    dlc__warm_fetch_job *job = f->job;
    const dlc_warm_options *opt = job->opt;
    /* Bytes that arrived in a checked answer are in place, so the next attempt
     * asks for the rest only; an attempt that made progress resets the count. */
    x->attempts = (x->got > 0 && job->obj->ranges) ? 1 : x->attempts + 1;
    /* A server without ranges can only send the whole object again. */
    if (job->obj->ranges)
        x->start += x->got;
    job->retries++;
    if (x->attempts > f->max_retries)
        return dlc__errorf(DLC_ENETWORK,
                           "%s: bytes %" PRIu64 "-%" PRIu64 ": gave up after %u attempts: %s",
                           job->src->shown, x->start, x->end, x->attempts, why);
    const double delay = dlc__warm_backoff(x->attempts, &f->rng);
    x->retry_at = dlc__now_s() + delay;
    dlc__logf(opt->log, opt->log_user, DLC_LOG_WARN,
              "%s: bytes %" PRIu64 "-%" PRIu64 ": %s; retry %u in %.2f s", job->src->shown,
              x->start, x->end, why, x->attempts, delay);
    return DLC_OK;
}

/* Judge every transfer that libcurl reports finished. *freed says whether a
 * slot became free, so that its next request starts without sleeping. */
static dlc_status collect_finished(fetcher *f, int *freed)
{
    CURLMsg *msg;
    int left;
    *freed = 0;
    while ((msg = curl_multi_info_read(f->m, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        xfer *x = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        const CURLcode res = msg->data.result;
        curl_multi_remove_handle(f->m, x->h);
        x->active = 0;
        *freed = 1;
        dlc_status fatal = DLC_OK;
        char why[700];
        const int verdict = finish_attempt(x, res, &fatal, why, sizeof why);
        if (verdict < 0)
            return fatal;
        if (verdict == 0) {
            complete_piece(f, x);
            continue;
        }
        const dlc_status rc = schedule_retry(f, x, why);
        if (rc < 0)
            return rc;
    }
    return DLC_OK;
}

/* Sleep until a socket is ready, a retry is due, or 100 ms pass (the progress
 * callback's pace); not at all when a slot was freed. */
static dlc_status wait_for_work(fetcher *f, int freed)
{
    double wait = freed ? 0.0 : 0.1;
    const double now = dlc__now_s();
    for (size_t i = 0; i < f->nx; i++)
        if (f->xs[i].assigned && !f->xs[i].active) {
            const double d = f->xs[i].retry_at - now;
            if (d < wait)
                wait = d;
        }
    if (wait <= 0)
        return DLC_OK;
    const CURLMcode mc = curl_multi_poll(f->m, NULL, 0, (int)(wait * 1000.0) + 1, NULL);
    if (mc != CURLM_OK)
        return dlc__errorf(DLC_ENETWORK, "warm: curl_multi_poll: %s", curl_multi_strerror(mc));
    return DLC_OK;
}

/* One turn of the transfer loop. */
static dlc_status fetch_step(fetcher *f)
{
    dlc_status rc = start_due_attempts(f);
    if (rc < 0)
        return rc;
    int running = 0;
    const CURLMcode mc = curl_multi_perform(f->m, &running);
    if (mc != CURLM_OK)
        return dlc__errorf(DLC_ENETWORK, "warm: curl_multi_perform: %s", curl_multi_strerror(mc));
    int freed = 0;
    rc = collect_finished(f, &freed);
    if (rc == DLC_OK && f->sync_started)
        rc = sync_failed(&f->sy);
    if (rc < 0)
        return rc;
    if (want_cancel(f->job, f->xs, f->nx, &f->last_progress))
        return dlc__errorf(DLC_ECANCELED, "%s: download canceled; a rerun resumes it",
                           f->job->src->shown);
    return f->missing == 0 ? DLC_OK : wait_for_work(f, freed);
}

/* Free the transfers and stop the journal thread; returns @p rc, or the
 * journal's failure when everything else went well. */
static dlc_status close_fetcher(fetcher *f, dlc_status rc)
{
    if (f->xs) {
        for (size_t i = 0; i < f->nx; i++) {
            if (f->xs[i].active)
                curl_multi_remove_handle(f->m, f->xs[i].h);
            if (f->xs[i].h)
                curl_easy_cleanup(f->xs[i].h);
            curl_slist_free_all(f->xs[i].hdrs);
        }
    }
    syncer *sy = &f->sy;
    if (f->sync_started) {
        /* Let the journal catch up with every piece that did complete, also
         * on failure: that is what the rerun resumes from. */
        pthread_mutex_lock(&sy->mu);
        sy->stop = 1;
        pthread_cond_signal(&sy->cv);
        pthread_mutex_unlock(&sy->mu);
        pthread_join(sy->thread, NULL);
        if (rc == DLC_OK && sy->rc < 0)
            rc = dlc__errorf(sy->rc, "%s", sy->msg);
        pthread_mutex_destroy(&sy->mu);
        pthread_cond_destroy(&sy->cv);
    }
    free(sy->pending);
    free(sy->batch);
    free(f->xs);
    if (f->m)
        curl_multi_cleanup(f->m);
    return rc;
}

dlc_status dlc__warm_fetch(dlc__warm_fetch_job *job)
{
    const dlc_warm_options *opt = job->opt;
    fetcher f;
    memset(&f, 0, sizeof f);
    f.job = job;
    f.max_retries = opt->max_retries ? opt->max_retries : DLC__WARM_DEFAULT_RETRIES;
    uint64_t complete_chunks = 0;
    dlc__warm_gaps_count(job->have, job->obj->size, job->chunk_size, &f.missing, &complete_chunks);
    if (f.missing == 0)
        return DLC_OK;
    f.nx = opt->connections ? opt->connections : DLC__WARM_DEFAULT_CONNECTIONS;
    if (f.nx > f.missing)
        f.nx = (size_t)f.missing;
    dlc__warm_gaps_init(&f.gaps, job->have, job->obj->size, job->chunk_size);
    f.rng = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(dlc__now_s() * 1e9);

    dlc_status rc = open_transfers(&f);
    if (rc == DLC_OK)
        rc = start_syncer(&f);
    while (rc == DLC_OK && f.missing > 0)
        rc = fetch_step(&f);
    return close_fetcher(&f, rc);
}

/* ------------------------------------------------------------------------ */

/* What a probe's answer says about the object. *learned is 1 when it says
 * (size, ETag, ranges in @p obj), 0 when it is a failure for
 * probe_retry_or_fail() to judge. */
static dlc_status read_probe_answer(const xfer *x, CURLcode res, const dlc__warm_source *src,
                                    dlc__warm_object *obj, int *learned)
{
    *learned = 0;
    obj->status = x->status;
    if ((res == CURLE_OK || res == CURLE_WRITE_ERROR) && is_ok_status(x->status)) {
        snprintf(obj->etag, sizeof obj->etag, "%s", x->etag);
        obj->pushed = x->pushed;
        obj->push_part_size = x->push_part_size;
        snprintf(obj->goog_md5, sizeof obj->goog_md5, "%s", x->goog_md5);
        if (x->status == 206) {
            if (!x->have_range || x->cr_total == UINT64_MAX)
                return dlc__errorf(DLC_EHTTP,
                                   "%s: a 206 answer without the object's size in Content-Range",
                                   src->shown);
            if (x->cr_start != 0)
                return dlc__errorf(DLC_ECORRUPT,
                                   "%s: asked for bytes from 0, the server sent from %" PRIu64,
                                   src->shown, x->cr_start);
            obj->size = x->cr_total;
            obj->ranges = 1;
        } else {
            if (x->content_length < 0)
                return dlc__errorf(DLC_EHTTP,
                                   "%s: the server neither does ranges nor says the size (no "
                                   "Content-Length)",
                                   src->shown);
            obj->size = (uint64_t)x->content_length;
            obj->ranges = 0;
        }
        *learned = 1;
    } else if (res == CURLE_OK && x->status == 416 && x->have_range && x->cr_start == UINT64_MAX &&
               x->cr_total == 0) {
        obj->size = 0; /* An empty object: nothing to range over. */
        snprintf(obj->etag, sizeof obj->etag, "%s", x->etag);
        *learned = 1;
    }
    return DLC_OK;
}

/* A failed probe: DLC_OK with the reason in @p why when it is worth another
 * try, else the error. */
static dlc_status probe_retry_or_fail(const xfer *x, CURLcode res, const dlc__warm_source *src,
                                      unsigned attempt, uint32_t max_retries, char *why,
                                      size_t whycap)
{
    if (res == CURLE_OK) {
        char said[600];
        dlc__warm_describe_body(x->body, x->body_len, said, sizeof said);
        snprintf(why, whycap, "HTTP %ld%s%s", x->status, *said ? ": " : "",
                 *said ? said : "(no detail from the server)");
        if (!dlc__warm_retryable_http(x->status))
            return dlc__errorf(DLC_EHTTP, "%s: %s", src->shown, why);
    } else {
        snprintf(why, whycap, "%s", x->errbuf[0] ? x->errbuf : curl_easy_strerror(res));
        if (!dlc__warm_retryable_curl(res))
            return dlc__errorf(DLC_ENETWORK, "%s: %s", src->shown, why);
    }
    if (attempt > max_retries)
        return dlc__errorf(DLC_ENETWORK, "%s: gave up after %u attempts: %s", src->shown, attempt,
                           why);
    return DLC_OK;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

dlc_status dlc__warm_probe(const dlc__warm_source *src, const dlc_warm_options *opt,
                           dlc__warm_object *obj, uint32_t *retries)
{
    dlc_status rc = DLC_OK;
    memset(obj, 0, sizeof *obj);
    const uint32_t max_retries = opt->max_retries ? opt->max_retries : DLC__WARM_DEFAULT_RETRIES;
    const uint64_t chunk = opt->chunk_size ? opt->chunk_size : DLC__WARM_DEFAULT_CHUNK;
    uint64_t rng = (uint64_t)getpid() ^ (uint64_t)(dlc__now_s() * 1e9);
    xfer *x = calloc(1, sizeof *x);
    CURL *h = curl_easy_init();
    FAIL_IF(!x || !h, -ENOMEM, "warm: out of memory");
    CHECK(dlc__warm_easy_setup(h, src, opt));
    /* Ask for the first chunk and stop at the first body byte: this works
     * for pre-signed GET URLs, where a HEAD would not match the signature. */
    CHECK(dlc__warm_request_headers(src, 0, chunk - 1, NULL, &x->hdrs));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    /* Without a job, on_body() stops at the first byte of a 2xx answer. */
    for (unsigned attempt = 1;; attempt++) {
        reset_response(x);
        x->errbuf[0] = '\0';
        x->job = NULL;
        const CURLcode res = curl_easy_perform(h);
        int learned = 0;
        CHECK(read_probe_answer(x, res, src, obj, &learned));
        if (learned)
            break;
        char why[700];
        CHECK(probe_retry_or_fail(x, res, src, attempt, max_retries, why, sizeof why));
        const double delay = dlc__warm_backoff(attempt, &rng);
        dlc__logf(opt->log, opt->log_user, DLC_LOG_WARN, "%s: %s; retry %u in %.2f s", src->shown,
                  why, attempt, delay);
        (*retries)++;
        sleep_s(delay);
    }
fail:
    if (h)
        curl_easy_cleanup(h);
    if (x)
        curl_slist_free_all(x->hdrs);
    free(x);
    return rc;
}
