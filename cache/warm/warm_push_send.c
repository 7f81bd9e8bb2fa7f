/* A push as a driver of the warm part's transfer engine (warm_xfer.h): the engine owns the
 * connections, the retries with the downloads' backoff and the cancellation; this file hands it
 * the requests that a protocol (warm_push_s3.c, warm_push_gcs.c) asks for on behalf of one file,
 * and hands each answer back to that protocol. Bodies come from the file by pread() at the part's
 * offset and are hashed (MD5) as they are handed to libcurl, so the digest that is checked
 * against the server's ETag is the digest of exactly the bytes sent. The first failure that is
 * not worth another try ends the push, leaving the journals with every part that the servers
 * confirmed. */
#include "common.h"
#include "warm_internal.h"
#include "warm_xfer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RESP_MAX (16u << 20) /* A ListParts page of 1000 parts is about 300 KB. */

/* What one engine slot is sending: a request of the push, and the digest of its body. */
typedef struct sender {
    struct curl_slist *hdrs; /* The source's headers and the request's own. */
    dlc__push_req r;
    dlc__md5 md5;
    int io_errno;    /* Reading the file failed. */
    size_t received; /* Bytes of the answer's body (kept or not). */
    int too_long;    /* The answer went past RESP_MAX: reading it stopped there. */
} sender;

/* The state of one dlc__push_run(). */
typedef struct pusher {
    dlc__push_ctx *c;
    dlc__xfer *e;
    sender *ss; /* One per engine slot. */
    size_t n;
} pusher;

void dlc__push_req_free(dlc__push_req *r)
{
    free(r->url);
    curl_slist_free_all(r->extra);
    free(r->body);
    free(r->resp);
    /* A GCS session URI may be in the url and the location. */
    memset(r, 0, sizeof *r);
}

const char *dlc__push_step_name(const dlc__push_req *r, char *buf, size_t cap)
{
    static const char *const names[] = {
        [DLC__PUSH_CREATE] = "CreateMultipartUpload",
        [DLC__PUSH_LIST] = "ListParts",
        [DLC__PUSH_PART] = "UploadPart",
        [DLC__PUSH_COMPLETE] = "CompleteMultipartUpload",
        [DLC__PUSH_HEAD] = "HeadObject after completing",
        [DLC__PUSH_CHECK] = "HeadObject",
        [DLC__PUSH_PROBE] = "HeadObject before completing",
        [DLC__PUSH_ABORT] = "AbortMultipartUpload",
        [DLC__PUSH_DELETE] = "DeleteObject",
        [DLC__PUSH_GCS_START] = "starting a resumable upload",
        [DLC__PUSH_GCS_QUERY] = "asking the upload session for its progress",
        [DLC__PUSH_GCS_CHUNK] = "uploading",
        [DLC__PUSH_GCS_CHECK] = "reading the object's metadata",
        [DLC__PUSH_GCS_DELETE] = "deleting the object",
    };
    if (r->step == DLC__PUSH_PART)
        snprintf(buf, cap, "UploadPart %u of %u", r->part, r->file->nparts);
    else if (r->step == DLC__PUSH_GCS_CHUNK)
        snprintf(buf, cap, "uploading bytes %" PRIu64 "-%" PRIu64, r->off, r->off + r->len);
    else
        snprintf(buf, cap, "%s", names[r->step]);
    return buf;
}

dlc_status dlc__push_http_error(const dlc__push_req *r, const char *what, char *why, size_t cap)
{
    char said[1200], step[128];
    dlc__warm_describe_answer(r->status, r->location, r->file->src.follow_redirects, r->resp,
                              r->resp_len, said, sizeof said);
    if (!what)
        what = dlc__push_step_name(r, step, sizeof step);
    if (dlc__warm_retryable_http(r->status)) {
        snprintf(why, cap, "HTTP %ld: %s", r->status, said);
        return DLC__PUSH_RETRY;
    }
    return dlc__errorf(DLC_EHTTP, "%s: %s: HTTP %ld: %s", r->file->src.name, what, r->status, said);
}

/* ---- The request's body and the answer ---------------------------------------------------- */

static void reset_answer(dlc__push_req *r)
{
    r->status = 0;
    r->etag[0] = r->range[0] = r->location[0] = r->sse[0] = '\0';
    r->meta_part_size = 0;
    r->content_length = -1;
    r->resp_len = 0;
    if (r->resp)
        r->resp[0] = '\0';
}

/* A new response (after a 100 Continue): forget the previous. */
static void on_response(void *drv, dlc__xfer_slot *s)
{
    reset_answer(&((sender *)s->t)->r);
    ((sender *)s->t)->received = 0;
}

static void on_header(void *drv, dlc__xfer_slot *s, const char *k, size_t klen, const char *v,
                      size_t vlen)
{
    dlc__push_req *r = &((sender *)s->t)->r;
    char num[64];
    if (dlc__xfer_header_is(k, klen, "ETag")) {
        dlc__xfer_header_copy(v, vlen, r->etag, sizeof r->etag);
    } else if (dlc__xfer_header_is(k, klen, "Range")) {
        dlc__xfer_header_copy(v, vlen, r->range, sizeof r->range);
    } else if (dlc__xfer_header_is(k, klen, "Location")) {
        dlc__xfer_header_copy(v, vlen, r->location, sizeof r->location);
    } else if (dlc__xfer_header_is(k, klen, "Content-Length")) {
        dlc__xfer_header_copy(v, vlen, num, sizeof num);
        r->content_length = strtoll(num, NULL, 10);
    } else if (dlc__xfer_header_is(k, klen, "x-amz-server-side-encryption")) {
        dlc__xfer_header_copy(v, vlen, r->sse, sizeof r->sse);
    } else if (dlc__xfer_header_is(k, klen, "x-amz-server-side-encryption-customer-algorithm")) {
        snprintf(r->sse, sizeof r->sse, "customer");
    } else if (dlc__xfer_header_is(k, klen, "x-amz-meta-" DLC__PUSH_META)) {
        dlc__xfer_header_copy(v, vlen, num, sizeof num);
        r->meta_part_size = strtoull(num, NULL, 10);
    }
}

static size_t on_body(void *drv, dlc__xfer_slot *s, const char *p, size_t len)
{
    sender *sd = s->t;
    dlc__push_req *r = &sd->r;
    /* No answer of the protocols comes near RESP_MAX: one that goes past it is not read to its
     * end, which a server need never send (issue 32). */
    if (len >= RESP_MAX - sd->received) {
        sd->too_long = 1;
        return 0;
    }
    sd->received += len;
    if (r->resp_len + len + 1 > r->resp_cap && r->resp_cap < RESP_MAX) {
        size_t cap = r->resp_cap ? r->resp_cap : 4096;
        while (cap < r->resp_len + len + 1 && cap < RESP_MAX)
            cap *= 2;
        char *b = realloc(r->resp, cap);
        if (b) {
            r->resp = b;
            r->resp_cap = cap;
        }
    }
    if (r->resp && r->resp_len + len + 1 <= r->resp_cap) {
        memcpy(r->resp + r->resp_len, p, len);
        r->resp_len += len;
        r->resp[r->resp_len] = '\0';
    }
    return len; /* Out of memory: the answer is cut; the parsers then find it wanting. */
}

static size_t on_read(void *drv, dlc__xfer_slot *s, char *buf, size_t n)
{
    const pusher *p = drv;
    sender *sd = s->t;
    dlc__push_req *r = &sd->r;
    const uint64_t total = r->from_file ? r->len : r->body_len;
    uint64_t want = n;
    if (want > total - r->sent)
        want = total - r->sent;
    if (want == 0)
        return 0;
    if (!r->from_file) {
        memcpy(buf, r->body + r->sent, (size_t)want);
        r->sent += want;
        return (size_t)want;
    }
    ssize_t got;
    do
        got = pread(r->file->fd, buf, (size_t)want, (off_t)(r->off + r->sent));
    while (got < 0 && errno == EINTR);
    if (got <= 0) {
        sd->io_errno = got < 0 ? errno : ESTALE; /* Shorter than when the push began. */
        return CURL_READFUNC_ABORT;
    }
    dlc__md5_update(&sd->md5, buf, (size_t)got);
    r->sent += (uint64_t)got;
    p->c->r->bytes_uploaded += (uint64_t)got;
    return (size_t)got;
}

/* The body is sent again from its start: so is its digest. */
static int on_rewind(void *drv, dlc__xfer_slot *s)
{
    sender *sd = s->t;
    sd->r.sent = 0;
    return sd->r.from_file && dlc__md5_begin(&sd->md5) < 0 ? -1 : 0;
}

/* ---- One attempt ------------------------------------------------------------------------- */

static dlc_status set_method(dlc__xfer_slot *s)
{
    const dlc__push_req *r = &((const sender *)s->t)->r;
    CURL *h = s->h;
    const char *m = r->method;
    if (strcmp(m, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(m, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (strcmp(m, "DELETE") == 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    } else if (strcmp(m, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? r->body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    } else if (strcmp(m, "PUT") == 0) {
        /* The body comes from the engine's source hook, on_read(). */
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
                         (curl_off_t)(r->from_file ? r->len : r->body_len));
    } else {
        return dlc__errorf(DLC_EINVAL, "push: method %s", m);
    }
    return DLC_OK;
}

/* The source's headers (credentials, x-amz-content-sha256) and the request's. */
static dlc_status set_headers(dlc__xfer_slot *s)
{
    sender *sd = s->t;
    curl_slist_free_all(sd->hdrs);
    sd->hdrs = NULL;
    const struct curl_slist *lists[2] = {sd->r.file->src.headers, sd->r.extra};
    for (int k = 0; k < 2; k++)
        for (const struct curl_slist *l = lists[k]; l; l = l->next) {
            struct curl_slist *n = curl_slist_append(sd->hdrs, l->data);
            if (!n)
                return dlc__errorf(-ENOMEM, "push: out of memory");
            sd->hdrs = n;
        }
    curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, sd->hdrs);
    return DLC_OK;
}

/* How long an answer to CompleteMultipartUpload may take: COMPLETE_TIMEOUTS x timeout_s (10
 * minutes by default). S3's documentation says joining the parts "could take several minutes";
 * a bucket that takes longer needs a larger timeout_s. */
#define COMPLETE_TIMEOUTS 20
static double complete_deadline_s(const dlc__push_ctx *c)
{
    return COMPLETE_TIMEOUTS * (c->net.timeout_s > 0 ? c->net.timeout_s : 30.0);
}

/* Every request of a push may go to another file's destination: the handle starts afresh. */
static dlc_status push_request(void *drv, dlc__xfer_slot *s)
{
    const pusher *p = drv;
    sender *sd = s->t;
    dlc__push_req *r = &sd->r;
    curl_easy_reset(s->h);
    dlc_status rc = dlc__warm_easy_setup(s->h, &r->file->src, &p->c->net);
    if (rc == DLC_OK)
        rc = set_headers(s);
    if (rc == DLC_OK)
        rc = set_method(s);
    if (rc == DLC_OK && r->from_file)
        rc = dlc__md5_begin(&sd->md5);
    if (rc < 0)
        return rc;
    /* S3 may join the parts for minutes, keeping the connection alive meanwhile with a space
     * now and then: for this answer silence, not the minimum rate, ends the wait, and since a
     * server could send spaces for ever, a deadline ends it too. */
    if (r->step == DLC__PUSH_COMPLETE) {
        curl_easy_setopt(s->h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(s->h, CURLOPT_TIMEOUT_MS, (long)(complete_deadline_s(p->c) * 1000.0));
    }
    curl_easy_setopt(s->h, CURLOPT_URL, r->url);
    reset_answer(r);
    r->sent = 0;
    r->bad_digest = 0;
    sd->io_errno = 0;
    sd->received = 0;
    sd->too_long = 0;
    return DLC_OK;
}

/* The verdict on a finished attempt: DLC_OK, DLC__PUSH_RETRY with @p why, or a failure. */
static dlc_status judge(dlc__push_ctx *c, dlc__xfer_slot *s, CURLcode res, char *why, size_t cap)
{
    sender *sd = s->t;
    dlc__push_req *r = &sd->r;
    char step[128];
    if (sd->io_errno) {
        const int e = sd->io_errno;
        if (e == ESTALE)
            return dlc__errorf(DLC_ECHANGED, "%s: shorter than when the push began", r->file->path);
        return dlc__errorf(-e, "%s: read: %s", r->file->path, strerror(e));
    }
    if (sd->too_long)
        return dlc__errorf(DLC_EHTTP, "%s: %s: HTTP %ld: an answer longer than %u MiB",
                           r->file->src.name, dlc__push_step_name(r, step, sizeof step), s->status,
                           RESP_MAX >> 20);
    if (res != CURLE_OK) {
        char detail[1400];
        dlc__warm_describe_failure(s->h, res, s->errbuf, detail, sizeof detail);
        const double deadline = complete_deadline_s(c);
        if (r->step == DLC__PUSH_COMPLETE && res == CURLE_OPERATION_TIMEDOUT &&
            dlc__now_s() - s->started >= deadline - 0.5)
            snprintf(detail, sizeof detail,
                     "no answer in %.0f s (%d x timeout_s; S3 may take minutes to join the parts, "
                     "so a bucket that takes longer needs a larger timeout_s)",
                     deadline, COMPLETE_TIMEOUTS);
        snprintf(why, cap, "%s", detail);
        if (dlc__warm_retryable_curl(res))
            return DLC__PUSH_RETRY;
        return dlc__errorf(DLC_ENETWORK, "%s: %s: %s", r->file->src.name,
                           dlc__push_step_name(r, step, sizeof step), detail);
    }
    r->status = s->status;
    long code = 0;
    if (curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code)
        r->status = code;
    if (r->from_file) {
        if (r->sent != r->len)
            return dlc__errorf(DLC_ENETWORK, "%s: %s: the server answered before the body was sent",
                               r->file->src.name, dlc__push_step_name(r, step, sizeof step));
        dlc__md5_end(&sd->md5, r->md5);
    }
    return r->file->src.kind == DLC__WARM_GCS ? dlc__push_gcs_done(c, r, why, cap)
                                              : dlc__push_s3_done(c, r, why, cap);
}

static dlc_status push_done(void *drv, dlc__xfer_slot *s, CURLcode res, char *why, size_t cap)
{
    const pusher *p = drv;
    dlc__push_req *r = &((sender *)s->t)->r;
    if (r->step == DLC__PUSH_COMPLETE)
        p->c->r->complete_seconds += dlc__now_s() - s->started;
    const dlc_status v = judge(p->c, s, res, why, cap);
    if (v == DLC__PUSH_RETRY) {
        /* An ETag that is not the MD5 sent, again and again: the bytes arrive corrupted. */
        s->give_up = r->bad_digest ? DLC_ECORRUPT : DLC_ENETWORK;
        return DLC__XFER_RETRY;
    }
    if (v == DLC_OK)
        dlc__push_req_free(r);
    return v;
}

static const char *push_describe(void *drv, const dlc__xfer_slot *s, char *buf, size_t cap)
{
    const dlc__push_req *r = &((const sender *)s->t)->r;
    char step[128];
    snprintf(buf, cap, "%s: %s", r->file->src.name, dlc__push_step_name(r, step, sizeof step));
    return buf;
}

/* GCS may have persisted part of a chunk that failed: ask the session rather than send the same
 * bytes again. */
static dlc_status push_before_retry(void *drv, dlc__xfer_slot *s)
{
    return dlc__push_gcs_requery(&((sender *)s->t)->r);
}

/* ---- Which request goes next ------------------------------------------------------------- */

static int others_finished(const dlc__push_ctx *c, const dlc__push_file *f)
{
    for (size_t i = 0; i < c->nfiles; i++)
        if (&c->files[i] != f && !c->files[i].finished)
            return 0;
    return 1;
}

/* Give idle slot @p s the next request any file needs; 0 when none does now. */
static int next_request(void *drv, dlc__xfer_slot *s)
{
    const pusher *p = drv;
    dlc__push_ctx *c = p->c;
    dlc__push_req *r = &((sender *)s->t)->r;
    for (size_t i = 0; i < c->nfiles; i++) {
        dlc__push_file *f = &c->files[i];
        if (f->finished || (f->last && !others_finished(c, f)))
            continue;
        memset(r, 0, sizeof *r);
        r->file = f;
        const int got =
            f->src.kind == DLC__WARM_GCS ? dlc__push_gcs_next(c, f, r) : dlc__push_s3_next(c, f, r);
        if (got != 0)
            return got;
        dlc__push_req_free(r);
    }
    return 0;
}

static int all_finished(void *drv)
{
    const dlc__push_ctx *c = ((const pusher *)drv)->c;
    for (size_t i = 0; i < c->nfiles; i++)
        if (!c->files[i].finished)
            return 0;
    return 1;
}

static void push_progress(void *drv, const dlc__xfer *e, double now, dlc_warm_progress *p)
{
    const dlc__push_ctx *c = ((const pusher *)drv)->c;
    uint64_t done = 0;
    for (size_t i = 0; i < c->nfiles; i++)
        done += c->files[i].bytes_done;
    for (size_t i = 0; i < dlc__xfer_slot_count(e); i++) {
        const dlc__xfer_slot *s = dlc__xfer_slot_at(e, i);
        const dlc__push_req *r = &((const sender *)s->t)->r;
        if (s->active && r->from_file)
            done += r->sent;
    }
    p->total = c->r->bytes;
    p->done = done < c->r->bytes ? done : c->r->bytes;
    p->downloaded = c->r->bytes_uploaded;
    p->seconds = now - c->t0;
}

static dlc_status push_canceled(void *drv)
{
    return dlc__errorf(DLC_ECANCELED, "push canceled; a rerun resumes it");
}

static const dlc__xfer_ops push_ops = {
    .next = next_request,
    .request = push_request,
    .response = on_response,
    .header = on_header,
    .sink = on_body,
    .source = on_read,
    .rewind = on_rewind,
    .done = push_done,
    .describe = push_describe,
    .before_retry = push_before_retry,
    .finished = all_finished,
    .progress = push_progress,
    .canceled = push_canceled,
};

dlc_status dlc__push_run(dlc__push_ctx *c)
{
    pusher p = {.c = c};
    p.n = c->net.connections ? c->net.connections : DLC__WARM_DEFAULT_CONNECTIONS;
    p.ss = calloc(p.n, sizeof *p.ss);
    dlc_status rc = p.ss ? DLC_OK : dlc__errorf(-ENOMEM, "push: out of memory");
    const dlc__xfer_config cfg = {.ops = &push_ops,
                                  .drv = &p,
                                  .slots = p.n,
                                  .net = &c->net,
                                  .name = "push",
                                  .retries = &c->r->retries};
    if (rc == DLC_OK)
        rc = dlc__xfer_open(&cfg, &p.e);
    for (size_t i = 0; rc == DLC_OK && i < p.n; i++)
        dlc__xfer_slot_at(p.e, i)->t = &p.ss[i];
    if (rc == DLC_OK)
        rc = dlc__xfer_run(p.e);
    dlc__xfer_close(p.e);
    for (size_t i = 0; p.ss && i < p.n; i++) {
        curl_slist_free_all(p.ss[i].hdrs);
        dlc__md5_free(&p.ss[i].md5);
        dlc__push_req_free(&p.ss[i].r);
    }
    free(p.ss);
    return rc;
}
