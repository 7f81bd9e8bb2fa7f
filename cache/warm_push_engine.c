/* The engine of a push: a pool of transfer slots on libcurl's multi interface (one per
 * connection), each sending one request that a protocol (warm_push_s3.c, warm_push_gcs.c) asked
 * for on behalf of one file. Bodies come from the file by pread() at the part's offset and are
 * hashed (MD5) as they are handed to libcurl, so the digest that is checked against the server's
 * ETag is the digest of exactly the bytes sent. Failures worth another try are retried with the
 * downloads' backoff (dlc__warm_backoff()); the first other failure ends the push, leaving the
 * journals with every part that the servers confirmed. */
#include "common.h"
#include "warm_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define RESP_MAX (16u << 20) /* A ListParts page of 1000 parts is about 300 KB. */

typedef struct slot {
    CURL *h;
    struct curl_slist *hdrs; /* The source's headers and the request's own. */
    dlc__push_ctx *c;
    dlc__push_req r;
    dlc__md5 md5;
    char errbuf[CURL_ERROR_SIZE];
    int active;   /* Added to the multi handle. */
    int assigned; /* Holds a request (active, or waiting for its retry). */
    int io_errno; /* Reading the file failed. */
    unsigned attempts;
    double retry_at;
    double started; /* When this attempt went out. */
} slot;

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
    char said[600], step[128];
    dlc__warm_describe_body(r->resp, r->resp_len, said, sizeof said);
    if (!what)
        what = dlc__push_step_name(r, step, sizeof step);
    if (dlc__warm_retryable_http(r->status)) {
        snprintf(why, cap, "HTTP %ld%s%s", r->status, *said ? ": " : "", said);
        return DLC__PUSH_RETRY;
    }
    return dlc__errorf(DLC_EHTTP, "%s: %s: HTTP %ld: %s", r->file->src.name, what, r->status,
                       *said ? said : "(no detail from the server)");
}

/* ---- libcurl callbacks ------------------------------------------------------------------- */

static void header_value(const char *v, size_t n, char *out, size_t cap)
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

static size_t on_header(char *p, size_t size, size_t n, void *user)
{
    dlc__push_req *r = &((slot *)user)->r;
    const size_t len = size * n;
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        reset_answer(r); /* A new response (after a 100 Continue). */
        const char *sp = memchr(p, ' ', len);
        if (sp)
            r->status = strtol(sp + 1, NULL, 10);
        return len;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon)
        return len;
    const size_t k = (size_t)(colon - p), vlen = len - k - 1;
    char num[64];
    if (k == 4 && strncasecmp(p, "ETag", 4) == 0) {
        header_value(colon + 1, vlen, r->etag, sizeof r->etag);
    } else if (k == 5 && strncasecmp(p, "Range", 5) == 0) {
        header_value(colon + 1, vlen, r->range, sizeof r->range);
    } else if (k == 8 && strncasecmp(p, "Location", 8) == 0) {
        header_value(colon + 1, vlen, r->location, sizeof r->location);
    } else if (k == 14 && strncasecmp(p, "Content-Length", 14) == 0) {
        header_value(colon + 1, vlen, num, sizeof num);
        r->content_length = strtoll(num, NULL, 10);
    } else if (k == 28 && strncasecmp(p, "x-amz-server-side-encryption", 28) == 0) {
        header_value(colon + 1, vlen, r->sse, sizeof r->sse);
    } else if (k == 47 &&
               strncasecmp(p, "x-amz-server-side-encryption-customer-algorithm", 47) == 0) {
        snprintf(r->sse, sizeof r->sse, "customer");
    } else if (k == strlen("x-amz-meta-" DLC__PUSH_META) &&
               strncasecmp(p, "x-amz-meta-" DLC__PUSH_META, k) == 0) {
        header_value(colon + 1, vlen, num, sizeof num);
        r->meta_part_size = strtoull(num, NULL, 10);
    }
    return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
    dlc__push_req *r = &((slot *)user)->r;
    const size_t len = size * n;
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
    return len; /* An answer longer than RESP_MAX is cut; the parsers then find it wanting. */
}

static size_t on_read(char *buf, size_t size, size_t n, void *user)
{
    slot *s = user;
    dlc__push_req *r = &s->r;
    const uint64_t total = r->from_file ? r->len : r->body_len;
    uint64_t want = size * n;
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
        s->io_errno = got < 0 ? errno : ESTALE; /* Shorter than when the push began. */
        return CURL_READFUNC_ABORT;
    }
    dlc__md5_update(&s->md5, buf, (size_t)got);
    r->sent += (uint64_t)got;
    s->c->r->bytes_uploaded += (uint64_t)got;
    return (size_t)got;
}

/* libcurl rewinds a body it must send again on the same request (a redirect, a connection that
 * closed before the answer); the digest starts over with it. */
static int on_seek(void *user, curl_off_t offset, int origin)
{
    slot *s = user;
    if (offset != 0 || origin != SEEK_SET)
        return CURL_SEEKFUNC_CANTSEEK;
    s->r.sent = 0;
    if (s->r.from_file && dlc__md5_begin(&s->md5) < 0)
        return CURL_SEEKFUNC_FAIL;
    return CURL_SEEKFUNC_OK;
}

/* ---- One attempt ------------------------------------------------------------------------- */

static dlc_status set_method(slot *s)
{
    const dlc__push_req *r = &s->r;
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
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, s);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, s);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
                         (curl_off_t)(r->from_file ? r->len : r->body_len));
    } else {
        return dlc__errorf(DLC_EINVAL, "push: method %s", m);
    }
    return DLC_OK;
}

/* The source's headers (credentials, x-amz-content-sha256) and the request's. */
static dlc_status set_headers(slot *s)
{
    curl_slist_free_all(s->hdrs);
    s->hdrs = NULL;
    const struct curl_slist *lists[2] = {s->r.file->src.headers, s->r.extra};
    for (int k = 0; k < 2; k++)
        for (const struct curl_slist *l = lists[k]; l; l = l->next) {
            struct curl_slist *n = curl_slist_append(s->hdrs, l->data);
            if (!n)
                return dlc__errorf(-ENOMEM, "push: out of memory");
            s->hdrs = n;
        }
    curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, s->hdrs);
    return DLC_OK;
}

static dlc_status start_attempt(CURLM *m, slot *s)
{
    dlc__push_req *r = &s->r;
    curl_easy_reset(s->h);
    dlc_status rc = dlc__warm_easy_setup(s->h, &r->file->src, &s->c->net);
    if (rc == DLC_OK)
        rc = set_headers(s);
    if (rc == DLC_OK)
        rc = set_method(s);
    if (rc == DLC_OK && r->from_file)
        rc = dlc__md5_begin(&s->md5);
    if (rc < 0)
        return rc;
    curl_easy_setopt(s->h, CURLOPT_URL, r->url);
    curl_easy_setopt(s->h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(s->h, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(s->h, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->h, CURLOPT_ERRORBUFFER, s->errbuf);
    curl_easy_setopt(s->h, CURLOPT_PRIVATE, s);
    reset_answer(r);
    r->sent = 0;
    r->bad_digest = 0;
    s->io_errno = 0;
    s->errbuf[0] = '\0';
    const CURLMcode mc = curl_multi_add_handle(m, s->h);
    if (mc != CURLM_OK)
        return dlc__errorf(-ENOMEM, "push: curl_multi_add_handle: %s", curl_multi_strerror(mc));
    s->active = 1;
    s->started = dlc__now_s();
    return DLC_OK;
}

/* The verdict on a finished attempt: DLC_OK, DLC__PUSH_RETRY with @p why, or a failure. */
static dlc_status judge(slot *s, CURLcode res, char *why, size_t cap)
{
    dlc__push_req *r = &s->r;
    char step[128];
    if (s->io_errno) {
        const int e = s->io_errno;
        if (e == ESTALE)
            return dlc__errorf(DLC_ECHANGED, "%s: shorter than when the push began", r->file->path);
        return dlc__errorf(-e, "%s: read: %s", r->file->path, strerror(e));
    }
    if (res != CURLE_OK) {
        const char *detail = s->errbuf[0] ? s->errbuf : curl_easy_strerror(res);
        snprintf(why, cap, "%s", detail);
        if (dlc__warm_retryable_curl(res))
            return DLC__PUSH_RETRY;
        return dlc__errorf(DLC_ENETWORK, "%s: %s: %s", r->file->src.name,
                           dlc__push_step_name(r, step, sizeof step), detail);
    }
    long code = 0;
    if (curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code)
        r->status = code;
    if (r->from_file) {
        if (r->sent != r->len)
            return dlc__errorf(DLC_ENETWORK, "%s: %s: the server answered before the body was sent",
                               r->file->src.name, dlc__push_step_name(r, step, sizeof step));
        dlc__md5_end(&s->md5, r->md5);
    }
    return r->file->src.kind == DLC__WARM_GCS ? dlc__push_gcs_done(s->c, r, why, cap)
                                              : dlc__push_s3_done(s->c, r, why, cap);
}

/* ---- The loop ---------------------------------------------------------------------------- */

typedef struct engine {
    dlc__push_ctx *c;
    CURLM *m;
    slot *slots;
    size_t n;
    uint32_t max_retries;
    double last_progress;
} engine;

static int others_finished(const dlc__push_ctx *c, const dlc__push_file *f)
{
    for (size_t i = 0; i < c->nfiles; i++)
        if (&c->files[i] != f && !c->files[i].finished)
            return 0;
    return 1;
}

/* Give idle slot @p s the next request any file needs; 0 when none does now. */
static int assign(engine *e, slot *s)
{
    dlc__push_ctx *c = e->c;
    for (size_t i = 0; i < c->nfiles; i++) {
        dlc__push_file *f = &c->files[i];
        if (f->finished || (f->last && !others_finished(c, f)))
            continue;
        memset(&s->r, 0, sizeof s->r);
        s->r.file = f;
        const int got = f->src.kind == DLC__WARM_GCS ? dlc__push_gcs_next(c, f, &s->r)
                                                     : dlc__push_s3_next(c, f, &s->r);
        if (got < 0)
            return got;
        if (got > 0) {
            s->assigned = 1;
            s->attempts = 0;
            s->retry_at = 0;
            return 1;
        }
        dlc__push_req_free(&s->r);
    }
    return 0;
}

static dlc_status start_due(engine *e)
{
    const double now = dlc__now_s();
    for (size_t i = 0; i < e->n; i++) {
        slot *s = &e->slots[i];
        if (s->active)
            continue;
        if (!s->assigned) {
            const int got = assign(e, s);
            if (got < 0)
                return got;
            if (got == 0)
                continue;
        }
        if (now >= s->retry_at) {
            const dlc_status rc = start_attempt(e->m, s);
            if (rc < 0)
                return rc;
        }
    }
    return DLC_OK;
}

static dlc_status schedule_retry(engine *e, slot *s, const char *why)
{
    const dlc__push_ctx *c = e->c;
    char step[128];
    s->attempts++;
    c->r->retries++;
    dlc__push_step_name(&s->r, step, sizeof step);
    if (s->attempts > e->max_retries)
        return dlc__errorf(s->r.bad_digest ? DLC_ECORRUPT : DLC_ENETWORK,
                           "%s: %s: gave up after %u attempts: %s", s->r.file->src.name, step,
                           s->attempts, why);
    /* GCS may have persisted part of a chunk that failed: ask the session rather than send the
     * same bytes again. */
    const dlc_status rc = dlc__push_gcs_requery(&s->r);
    if (rc < 0)
        return rc;
    const double delay = dlc__warm_backoff(s->attempts, &e->c->rng);
    s->retry_at = dlc__now_s() + delay;
    dlc__logf(c->net.log, c->net.log_user, DLC_LOG_WARN, "%s: %s: %s; retry %u in %.2f s",
              s->r.file->src.name, step, why, s->attempts, delay);
    return DLC_OK;
}

static dlc_status collect(engine *e, int *freed)
{
    CURLMsg *msg;
    int left;
    *freed = 0;
    while ((msg = curl_multi_info_read(e->m, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        slot *s = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
        const CURLcode res = msg->data.result;
        curl_multi_remove_handle(e->m, s->h);
        s->active = 0;
        *freed = 1;
        if (s->r.step == DLC__PUSH_COMPLETE)
            e->c->r->complete_seconds += dlc__now_s() - s->started;
        char why[800] = "";
        const dlc_status v = judge(s, res, why, sizeof why);
        if (v < 0)
            return v;
        if (v == DLC__PUSH_RETRY) {
            const dlc_status rc = schedule_retry(e, s, why);
            if (rc < 0)
                return rc;
            continue;
        }
        dlc__push_req_free(&s->r);
        s->assigned = 0;
    }
    return DLC_OK;
}

static int want_cancel(engine *e)
{
    const dlc__push_ctx *c = e->c;
    if (!c->net.progress)
        return 0;
    const double now = dlc__now_s();
    if (now - e->last_progress < 0.1)
        return 0;
    e->last_progress = now;
    uint64_t done = 0;
    for (size_t i = 0; i < c->nfiles; i++)
        done += c->files[i].bytes_done;
    for (size_t i = 0; i < e->n; i++)
        if (e->slots[i].active && e->slots[i].r.from_file)
            done += e->slots[i].r.sent;
    const dlc_warm_progress p = {.total = c->r->bytes,
                                 .done = done < c->r->bytes ? done : c->r->bytes,
                                 .downloaded = c->r->bytes_uploaded,
                                 .seconds = now - c->t0};
    return c->net.progress(c->net.progress_user, &p) != 0;
}

static int all_finished(const dlc__push_ctx *c)
{
    for (size_t i = 0; i < c->nfiles; i++)
        if (!c->files[i].finished)
            return 0;
    return 1;
}

static dlc_status wait_for_work(engine *e, int freed)
{
    double wait = freed ? 0.0 : 0.1;
    const double now = dlc__now_s();
    int any = 0;
    for (size_t i = 0; i < e->n; i++) {
        const slot *s = &e->slots[i];
        any |= s->assigned;
        if (s->assigned && !s->active && s->retry_at - now < wait)
            wait = s->retry_at - now;
    }
    if (!any)
        return dlc__errorf(DLC_ESTATE, "push: no request left, yet files are not finished");
    if (wait <= 0)
        return DLC_OK;
    const CURLMcode mc = curl_multi_poll(e->m, NULL, 0, (int)(wait * 1000.0) + 1, NULL);
    if (mc != CURLM_OK)
        return dlc__errorf(DLC_ENETWORK, "push: curl_multi_poll: %s", curl_multi_strerror(mc));
    return DLC_OK;
}

static dlc_status step(engine *e)
{
    dlc_status rc = start_due(e);
    if (rc < 0)
        return rc;
    int running = 0;
    const CURLMcode mc = curl_multi_perform(e->m, &running);
    if (mc != CURLM_OK)
        return dlc__errorf(DLC_ENETWORK, "push: curl_multi_perform: %s", curl_multi_strerror(mc));
    int freed = 0;
    rc = collect(e, &freed);
    if (rc < 0)
        return rc;
    if (want_cancel(e))
        return dlc__errorf(DLC_ECANCELED, "push canceled; a rerun resumes it");
    if (all_finished(e->c))
        return DLC_OK;
    /* A request that finished may have made work for other files (the index after the last
     * shard): look again before sleeping. */
    return freed ? DLC_OK : wait_for_work(e, 0);
}

dlc_status dlc__push_run(dlc__push_ctx *c)
{
    engine e = {.c = c};
    e.n = c->net.connections ? c->net.connections : DLC__WARM_DEFAULT_CONNECTIONS;
    e.max_retries = c->net.max_retries ? c->net.max_retries : DLC__WARM_DEFAULT_RETRIES;
    e.m = curl_multi_init();
    e.slots = calloc(e.n, sizeof *e.slots);
    dlc_status rc = e.m && e.slots ? DLC_OK : dlc__errorf(-ENOMEM, "push: out of memory");
    if (rc == DLC_OK)
        curl_multi_setopt(e.m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)e.n);
    for (size_t i = 0; rc == DLC_OK && i < e.n; i++) {
        e.slots[i].c = c;
        e.slots[i].h = curl_easy_init();
        if (!e.slots[i].h)
            rc = dlc__errorf(-ENOMEM, "push: out of memory");
    }
    while (rc == DLC_OK && !all_finished(c))
        rc = step(&e);
    for (size_t i = 0; e.slots && i < e.n; i++) {
        slot *s = &e.slots[i];
        if (s->active)
            curl_multi_remove_handle(e.m, s->h);
        if (s->h)
            curl_easy_cleanup(s->h);
        curl_slist_free_all(s->hdrs);
        dlc__md5_free(&s->md5);
        dlc__push_req_free(&s->r);
    }
    free(e.slots);
    if (e.m)
        curl_multi_cleanup(e.m);
    return rc;
}
