/* The download itself: a probe for size and ETag, then parallel ranged GETs,
 * each written at its offset with pwrite(), each response checked (status,
 * Content-Range, ETag, length), and completed byte ranges journaled by a
 * thread of their own once their bytes are synced. What is fetched are the
 * pieces of the object that no earlier run put in place, each inside one chunk
 * (dlc__warm_gaps). Both the probe and the pieces run on the warm part's
 * transfer engine (warm_xfer.h), which owns the connections, the retries with
 * their backoff, progress and cancellation; this file says what to ask for
 * and what an answer means. */
#include "common.h"
#include "warm_internal.h"
#include "warm_xfer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* What one engine slot is working on: a piece, or the probe. */
typedef struct xfer {
    struct curl_slist *hdrs;
    dlc__warm_fetch_job *job; /* NULL for the probe. */
    uint64_t piece;           /* The piece's first byte. */
    uint64_t start;           /* This attempt's first byte (after bytes of earlier attempts). */
    uint64_t end;             /* Inclusive last byte of the piece. */
    uint64_t got;             /* Bytes written by this attempt. */
    /* The response, from the header hook (its status is the slot's). */
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

static void reset_response(xfer *x)
{
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

/* A new response (the first, or the next after a redirect or a 100): forget the previous. */
static void on_response(void *drv, dlc__xfer_slot *s)
{
    reset_response(s->t);
}

static void on_header(void *drv, dlc__xfer_slot *s, const char *k, size_t klen, const char *v,
                      size_t vlen)
{
    xfer *x = s->t;
    char val[256];
    if (dlc__xfer_header_is(k, klen, "Content-Range")) {
        dlc__xfer_header_copy(v, vlen, val, sizeof val);
        x->have_range =
            dlc__warm_parse_content_range(val, &x->cr_start, &x->cr_end, &x->cr_total) == 0;
    } else if (dlc__xfer_header_is(k, klen, "Content-Length")) {
        dlc__xfer_header_copy(v, vlen, val, sizeof val);
        char *end = NULL;
        const unsigned long long cl = strtoull(val, &end, 10);
        x->content_length = (end && *end == '\0' && end != val) ? (int64_t)cl : -1;
    } else if (dlc__xfer_header_is(k, klen, "ETag")) {
        dlc__warm_etag_keep(v, vlen, x->etag);
    } else if (dlc__xfer_header_is(k, klen, "x-amz-meta-" DLC__PUSH_META) ||
               dlc__xfer_header_is(k, klen, "x-goog-meta-" DLC__PUSH_META)) {
        dlc__xfer_header_copy(v, vlen, val, sizeof val);
        x->pushed = 1;
        x->push_part_size = strtoull(val, NULL, 10);
    } else if (dlc__xfer_header_is(k, klen, "x-goog-hash")) {
        /* "crc32c=...,md5=..." (one header or several). */
        dlc__xfer_header_copy(v, vlen, val, sizeof val);
        const char *m = strstr(val, "md5=");
        if (m)
            snprintf(x->goog_md5, sizeof x->goog_md5, "%.*s", (int)strcspn(m + 4, ", "), m + 4);
    }
}

static int is_ok_status(long s)
{
    return s == 200 || s == 206;
}

/* Check a response's headers against the request before its first byte is
 * written anywhere. */
static enum abort_reason check_headers(const dlc__xfer_slot *s, const xfer *x)
{
    const dlc__warm_fetch_job *job = x->job;
    const uint64_t size = job->obj->size;
    const char *want_etag = job->obj->etag;
    if (*want_etag && *x->etag && strcmp(want_etag, x->etag) != 0)
        return ABORT_CHANGED;
    if (s->status == 200) {
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

static size_t on_body(void *drv, dlc__xfer_slot *s, const char *p, size_t len)
{
    xfer *x = s->t;
    if (!is_ok_status(s->status)) {
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
        x->why = check_headers(s, x);
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
/* The pieces, as the engine's driver. */

/* The state of one dlc__warm_fetch() call, shared by its stages. */
typedef struct fetcher {
    dlc__warm_fetch_job *job;
    dlc__xfer *e;
    xfer *xs; /* One per engine slot. */
    size_t nx;
    syncer sy;
    int sync_started;    /* The journal thread runs and must be joined. */
    uint64_t missing;    /* Pieces not yet complete. */
    dlc__warm_gaps gaps; /* The pieces not yet assigned. */
} fetcher;

/* Give slot @p s the next missing piece; 0 when none is left. */
static int next_piece(void *drv, dlc__xfer_slot *s)
{
    fetcher *f = drv;
    xfer *x = s->t;
    dlc__warm_range piece;
    if (!dlc__warm_gaps_next(&f->gaps, &piece))
        return 0;
    x->piece = piece.off;
    x->start = piece.off;
    x->end = piece.off + piece.len - 1;
    f->job->chunks_fetched++;
    return 1;
}

/* One attempt: the rest of the piece, from the first byte no earlier attempt wrote. */
static dlc_status piece_request(void *drv, dlc__xfer_slot *s)
{
    xfer *x = s->t;
    const dlc__warm_fetch_job *job = x->job;
    curl_slist_free_all(x->hdrs);
    x->hdrs = NULL;
    const int whole = x->start == 0 && x->end + 1 == job->obj->size && !job->obj->ranges;
    const dlc_status rc = dlc__warm_request_headers(job->src, x->start, whole ? UINT64_MAX : x->end,
                                                    job->obj->etag, &x->hdrs);
    if (rc < 0)
        return rc;
    curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, x->hdrs);
    reset_response(x);
    x->got = 0;
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

/* Where a redirect that was not followed points, or NULL. */
static const char *redirect_to(const dlc__xfer_slot *s)
{
    const char *to = NULL;
    if (s->status < 300 || s->status >= 400 ||
        curl_easy_getinfo(s->h, CURLINFO_REDIRECT_URL, &to) != CURLE_OK)
        return NULL;
    return to;
}

/* Decide what a finished attempt means: 0 (the piece is complete), 1 (a
 * retry, the reason in @p why) or -1 (*fatal is the failure). */
static int finish_attempt(const dlc__xfer_slot *s, CURLcode res, dlc_status *fatal, char *why,
                          size_t whycap)
{
    const xfer *x = s->t;
    const dlc__warm_fetch_job *job = x->job;
    const char *shown = job->src->shown;
    why[0] = '\0';
    if (res == CURLE_OK && is_ok_status(s->status)) {
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
        char said[1200];
        dlc__warm_describe_answer(s->status, redirect_to(s), job->src->follow_redirects, x->body,
                                  x->body_len, said, sizeof said);
        if (dlc__warm_retryable_http(s->status)) {
            snprintf(why, whycap, "HTTP %ld: %s", s->status, said);
            return 1;
        }
        *fatal = dlc__errorf(s->status == 412 ? DLC_ECHANGED : DLC_EHTTP, "%s: HTTP %ld: %s", shown,
                             s->status, said);
        return -1;
    }
    char detail[1400];
    dlc__warm_describe_failure(s->h, res, s->errbuf, detail, sizeof detail);
    if (dlc__warm_retryable_curl(res)) {
        snprintf(why, whycap, "%s", detail);
        return 1;
    }
    *fatal = dlc__errorf(DLC_ENETWORK, "%s: %s", shown, detail);
    return -1;
}

static dlc_status piece_done(void *drv, dlc__xfer_slot *s, CURLcode res, char *why, size_t cap)
{
    fetcher *f = drv;
    xfer *x = s->t;
    dlc_status fatal = DLC_OK;
    const int verdict = finish_attempt(s, res, &fatal, why, cap);
    if (verdict < 0)
        return fatal;
    if (verdict == 0) {
        /* All bytes of the piece are in place: count it and hand it to the journal. */
        const uint64_t len = x->end - x->piece + 1;
        f->job->done_bytes += len;
        f->missing--;
        if (f->sync_started)
            sync_push(&f->sy, x->piece, len);
        return DLC_OK;
    }
    /* Bytes that arrived in a checked answer are in place, so the next attempt
     * asks for the rest only, and an attempt that made substantial progress starts
     * the count over: DLC__WARM_MIN_PROGRESS bytes at least, so that a server that
     * sends a byte per connection runs out of attempts (issue 32: it reset the count
     * on every attempt and never did), while the resets a piece can take stay
     * bounded by its size. A server without ranges can only send the whole object
     * again. */
    const int ranges = f->job->obj->ranges;
    s->progressed = x->got >= DLC__WARM_MIN_PROGRESS && ranges;
    if (ranges)
        x->start += x->got;
    return DLC__XFER_RETRY;
}

static const char *piece_describe(void *drv, const dlc__xfer_slot *s, char *buf, size_t cap)
{
    const fetcher *f = drv;
    const xfer *x = s->t;
    snprintf(buf, cap, "%s: bytes %" PRIu64 "-%" PRIu64, f->job->src->shown, x->start, x->end);
    return buf;
}

static int all_pieces_done(void *drv)
{
    const fetcher *f = drv;
    return f->missing == 0;
}

/* The journal thread's failure stops the transfers. */
static dlc_status journal_failed(void *drv)
{
    fetcher *f = drv;
    return f->sync_started ? sync_failed(&f->sy) : DLC_OK;
}

static void fetch_progress(void *drv, const dlc__xfer *e, double now, dlc_warm_progress *p)
{
    const fetcher *f = drv;
    const dlc__warm_fetch_job *job = f->job;
    uint64_t partial = 0;
    for (size_t i = 0; i < dlc__xfer_slot_count(e); i++) {
        const dlc__xfer_slot *s = dlc__xfer_slot_at(e, i);
        const xfer *x = s->t;
        if (s->assigned)
            partial += x->start - x->piece + (s->active ? x->got : 0);
    }
    p->total = job->obj->size;
    p->done = job->done_bytes + partial;
    p->downloaded = job->downloaded;
    p->seconds = now - job->t0;
}

static dlc_status fetch_canceled(void *drv)
{
    const fetcher *f = drv;
    return dlc__errorf(DLC_ECANCELED, "%s: download canceled; a rerun resumes it",
                       f->job->src->shown);
}

static const dlc__xfer_ops piece_ops = {
    .next = next_piece,
    .request = piece_request,
    .response = on_response,
    .header = on_header,
    .sink = on_body,
    .done = piece_done,
    .describe = piece_describe,
    .finished = all_pieces_done,
    .check = journal_failed,
    .progress = fetch_progress,
    .canceled = fetch_canceled,
};

/* The engine, with one slot per connection, each sharing the source's settings. */
static dlc_status open_transfers(fetcher *f)
{
    f->xs = calloc(f->nx, sizeof *f->xs);
    if (!f->xs)
        return dlc__errorf(-ENOMEM, "warm: out of memory");
    const dlc__xfer_config cfg = {.ops = &piece_ops,
                                  .drv = f,
                                  .slots = f->nx,
                                  .net = f->job->opt,
                                  .name = "warm",
                                  .retries = &f->job->retries};
    dlc_status rc = dlc__xfer_open(&cfg, &f->e);
    for (size_t i = 0; rc == DLC_OK && i < f->nx; i++) {
        dlc__xfer_slot *s = dlc__xfer_slot_at(f->e, i);
        f->xs[i].job = f->job;
        s->t = &f->xs[i];
        rc = dlc__warm_easy_setup(s->h, f->job->src, f->job->opt);
    }
    return rc;
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

/* Free the transfers and stop the journal thread; returns @p rc, or the
 * journal's failure when everything else went well. */
static dlc_status close_fetcher(fetcher *f, dlc_status rc)
{
    dlc__xfer_close(f->e);
    for (size_t i = 0; f->xs && i < f->nx; i++)
        curl_slist_free_all(f->xs[i].hdrs);
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
    return rc;
}

dlc_status dlc__warm_fetch(dlc__warm_fetch_job *job)
{
    const dlc_warm_options *opt = job->opt;
    fetcher f;
    memset(&f, 0, sizeof f);
    f.job = job;
    uint64_t complete_chunks = 0;
    dlc__warm_gaps_count(job->have, job->obj->size, job->chunk_size, &f.missing, &complete_chunks);
    if (f.missing == 0)
        return DLC_OK;
    f.nx = opt->connections ? opt->connections : DLC__WARM_DEFAULT_CONNECTIONS;
    if (f.nx > f.missing)
        f.nx = (size_t)f.missing;
    dlc__warm_gaps_init(&f.gaps, job->have, job->obj->size, job->chunk_size);

    dlc_status rc = open_transfers(&f);
    if (rc == DLC_OK)
        rc = start_syncer(&f);
    if (rc == DLC_OK)
        rc = dlc__xfer_run(f.e);
    return close_fetcher(&f, rc);
}

/* ------------------------------------------------------------------------ */
/* The probe: one request on a one-slot engine, which retries it like a piece. */

typedef struct prober {
    const dlc__warm_source *src;
    const dlc_warm_options *opt;
    dlc__warm_object *obj;
    uint32_t *retries;
    xfer x;
    int ready;   /* The easy handle is set up. */
    int taken;   /* The slot holds the probe. */
    int learned; /* The answer said what the object is. */
} prober;

static int probe_next(void *drv, dlc__xfer_slot *s)
{
    prober *pr = drv;
    if (pr->taken)
        return 0;
    pr->taken = 1;
    return 1;
}

static dlc_status probe_request(void *drv, dlc__xfer_slot *s)
{
    prober *pr = drv;
    xfer *x = s->t;
    if (!pr->ready) {
        const uint64_t chunk = pr->opt->chunk_size ? pr->opt->chunk_size : DLC__WARM_DEFAULT_CHUNK;
        dlc_status rc = dlc__warm_easy_setup(s->h, pr->src, pr->opt);
        /* Ask for the first chunk and stop at the first body byte: this works
         * for pre-signed GET URLs, where a HEAD would not match the signature. */
        if (rc == DLC_OK)
            rc = dlc__warm_request_headers(pr->src, 0, chunk - 1, NULL, &x->hdrs);
        if (rc < 0)
            return rc;
        curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, x->hdrs);
        pr->ready = 1;
    }
    /* Without a job, on_body() stops at the first byte of a 2xx answer. */
    reset_response(x);
    return DLC_OK;
}

/* What a probe's answer says about the object. *learned is 1 when it says
 * (size, ETag, ranges in @p obj), 0 when it is a failure for
 * probe_retry_or_fail() to judge. */
static dlc_status read_probe_answer(const dlc__xfer_slot *s, CURLcode res,
                                    const dlc__warm_source *src, dlc__warm_object *obj,
                                    int *learned)
{
    const xfer *x = s->t;
    *learned = 0;
    obj->status = s->status;
    if ((res == CURLE_OK || res == CURLE_WRITE_ERROR) && is_ok_status(s->status)) {
        snprintf(obj->etag, sizeof obj->etag, "%s", x->etag);
        obj->pushed = x->pushed;
        obj->push_part_size = x->push_part_size;
        snprintf(obj->goog_md5, sizeof obj->goog_md5, "%s", x->goog_md5);
        if (s->status == 206) {
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
    } else if (res == CURLE_OK && s->status == 416 && x->have_range && x->cr_start == UINT64_MAX &&
               x->cr_total == 0) {
        obj->size = 0; /* An empty object: nothing to range over. */
        snprintf(obj->etag, sizeof obj->etag, "%s", x->etag);
        *learned = 1;
    }
    return DLC_OK;
}

/* A failed probe: DLC_OK with the reason in @p why when it is worth another
 * try, else the error. */
static dlc_status probe_retry_or_fail(const dlc__xfer_slot *s, CURLcode res,
                                      const dlc__warm_source *src, char *why, size_t whycap)
{
    const xfer *x = s->t;
    if (res == CURLE_OK) {
        char said[1200];
        dlc__warm_describe_answer(s->status, redirect_to(s), src->follow_redirects, x->body,
                                  x->body_len, said, sizeof said);
        snprintf(why, whycap, "HTTP %ld: %s", s->status, said);
        if (!dlc__warm_retryable_http(s->status))
            return dlc__errorf(DLC_EHTTP, "%s: %s", src->shown, why);
    } else {
        dlc__warm_describe_failure(s->h, res, s->errbuf, why, whycap);
        if (!dlc__warm_retryable_curl(res))
            return dlc__errorf(DLC_ENETWORK, "%s: %s", src->shown, why);
    }
    return DLC_OK;
}

static dlc_status probe_done(void *drv, dlc__xfer_slot *s, CURLcode res, char *why, size_t cap)
{
    prober *pr = drv;
    int learned = 0;
    dlc_status rc = read_probe_answer(s, res, pr->src, pr->obj, &learned);
    if (rc == DLC_OK && learned)
        pr->learned = 1;
    else if (rc == DLC_OK)
        rc = probe_retry_or_fail(s, res, pr->src, why, cap);
    return rc < 0 || learned ? rc : DLC__XFER_RETRY;
}

static const char *probe_describe(void *drv, const dlc__xfer_slot *s, char *buf, size_t cap)
{
    const prober *pr = drv;
    snprintf(buf, cap, "%s", pr->src->shown);
    return buf;
}

/* The probe counts the retries it makes, not the attempt it gives up on. */
static dlc_status probe_before_retry(void *drv, dlc__xfer_slot *s)
{
    prober *pr = drv;
    (*pr->retries)++;
    return DLC_OK;
}

static int probe_finished(void *drv)
{
    const prober *pr = drv;
    return pr->learned;
}

/* No progress hook: a probe reports no progress and cannot be canceled. */
static const dlc__xfer_ops probe_ops = {
    .next = probe_next,
    .request = probe_request,
    .response = on_response,
    .header = on_header,
    .sink = on_body,
    .done = probe_done,
    .describe = probe_describe,
    .before_retry = probe_before_retry,
    .finished = probe_finished,
};

dlc_status dlc__warm_probe(const dlc__warm_source *src, const dlc_warm_options *opt,
                           dlc__warm_object *obj, uint32_t *retries)
{
    memset(obj, 0, sizeof *obj);
    prober *pr = calloc(1, sizeof *pr);
    if (!pr)
        return dlc__errorf(-ENOMEM, "warm: out of memory");
    pr->src = src;
    pr->opt = opt;
    pr->obj = obj;
    pr->retries = retries;
    const dlc__xfer_config cfg = {
        .ops = &probe_ops, .drv = pr, .slots = 1, .net = opt, .name = "warm"};
    dlc__xfer *e = NULL;
    dlc_status rc = dlc__xfer_open(&cfg, &e);
    if (rc == DLC_OK) {
        dlc__xfer_slot_at(e, 0)->t = &pr->x;
        rc = dlc__xfer_run(e);
    }
    dlc__xfer_close(e);
    curl_slist_free_all(pr->x.hdrs);
    free(pr);
    return rc;
}
