/* The transfer engine of the warm part (warm_xfer.h): slots on libcurl's multi interface, the
 * retry rule with its backoff, progress and cancellation, and the loop that turns them. What a
 * request is and what its answer means belong to the drivers (warm_fetch.c, warm_push_*.c). */
#include "common.h"
#include "warm_internal.h"
#include "warm_xfer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct dlc__xfer {
    dlc__xfer_config cfg;
    const dlc__xfer_ops *ops;
    CURLM *m;
    dlc__xfer_slot *slots; /* cfg.slots of them. */
    uint32_t max_retries;
    uint64_t rng; /* Backoff jitter. */
    double last_progress;
    double first_progress; /* The first call of the progress callback (a probe's seconds). */
};

size_t dlc__xfer_slot_count(const dlc__xfer *e)
{
    return e->cfg.slots;
}

dlc__xfer_slot *dlc__xfer_slot_at(const dlc__xfer *e, size_t i)
{
    return &e->slots[i];
}

void dlc__xfer_header_copy(const char *value, size_t len, char *out, size_t cap)
{
    if (len >= cap)
        len = cap - 1;
    memcpy(out, value, len);
    out[len] = '\0';
}

/* ---- libcurl's callbacks, handed on to the driver's hooks --------------------------------- */

static size_t on_header(char *p, size_t size, size_t n, void *user)
{
    dlc__xfer_slot *s = user;
    const dlc__xfer *e = s->e;
    const size_t len = size * n;
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', len);
        s->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        s->errbody = 0;
        s->errbody_cut = 0;
        e->ops->response(e->cfg.drv, s);
        return len;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon)
        return len;
    const size_t klen = (size_t)(colon - p);
    const char *v = colon + 1;
    size_t vlen = len - klen - 1;
    while (vlen > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        vlen--;
    }
    while (vlen > 0 && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
        vlen--;
    e->ops->header(e->cfg.drv, s, p, klen, v, vlen);
    return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
    dlc__xfer_slot *s = user;
    const size_t len = size * n;
    /* Status 0: no HTTP status line (a file:// transfer of the engine's own tests). */
    if ((s->status >= 200 && s->status < 300) || s->status == 0)
        return s->e->ops->sink(s->e->cfg.drv, s, p, len);
    /* An error answer: its start is kept for the message, and nothing past what is kept is
     * read, however long the server goes on (issue 32: an endless error body held cachewarm and
     * the loader until killed). Returning short stops the transfer; collect() then hands the
     * done hook the answer as if it had ended. */
    const size_t room = DLC__WARM_ERRBODY_MAX - s->errbody;
    if (len <= room) {
        s->errbody += len;
        return s->e->ops->sink(s->e->cfg.drv, s, p, len);
    }
    if (room > 0 && s->e->ops->sink(s->e->cfg.drv, s, p, room) != room)
        return 0;
    s->errbody += room;
    s->errbody_cut = 1;
    return 0;
}

/* libcurl reads the body of a redirect it follows without handing it to on_body() (to reuse the
 * connection), for as long as the server sends it: a redirect with an endless chunked body held
 * a download without end (issue 32). dlnow counts the current response's body. */
static int on_xferinfo(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    dlc__xfer_slot *s = user;
    (void)dltotal, (void)ultotal, (void)ulnow;
    if (s->status >= 300 && s->status < 400 && dlnow > DLC__XFER_REDIRECT_BODY_MAX) {
        s->redirect_cut = 1;
        return 1;
    }
    return 0;
}

static size_t on_read(char *buf, size_t size, size_t n, void *user)
{
    dlc__xfer_slot *s = user;
    return s->e->ops->source(s->e->cfg.drv, s, buf, size * n);
}

/* libcurl rewinds a body it must send again on the same request (a redirect, a connection that
 * closed before the answer). */
static int on_seek(void *user, curl_off_t offset, int origin)
{
    dlc__xfer_slot *s = user;
    if (offset != 0 || origin != SEEK_SET)
        return CURL_SEEKFUNC_CANTSEEK;
    return s->e->ops->rewind(s->e->cfg.drv, s) == 0 ? CURL_SEEKFUNC_OK : CURL_SEEKFUNC_FAIL;
}

/* ---- The loop ----------------------------------------------------------------------------- */

static dlc_status start_attempt(dlc__xfer *e, dlc__xfer_slot *s)
{
    s->status = 0;
    s->errbody = 0;
    s->errbody_cut = 0;
    s->redirect_cut = 0;
    s->errbuf[0] = '\0';
    const dlc_status rc = e->ops->request(e->cfg.drv, s);
    if (rc < 0)
        return rc;
    CURL *h = s->h;
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, s);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
    /* libcurl reads a body only for a request the driver made an upload (or a POST without
     * fields), so these are harmless on the others. */
    if (e->ops->source) {
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, s);
        if (e->ops->rewind) {
            curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
            curl_easy_setopt(h, CURLOPT_SEEKDATA, s);
        }
    }
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, s);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, s->errbuf);
    curl_easy_setopt(h, CURLOPT_PRIVATE, s);
    const CURLMcode mc = curl_multi_add_handle(e->m, h);
    if (mc != CURLM_OK)
        return dlc__errorf(-ENOMEM, "%s: curl_multi_add_handle: %s", e->cfg.name,
                           curl_multi_strerror(mc));
    s->active = 1;
    s->started = dlc__now_s();
    return DLC_OK;
}

/* Every idle slot takes the next transfer, and starts its attempt once its retry is due. */
static dlc_status start_due(dlc__xfer *e)
{
    const double now = dlc__now_s();
    for (size_t i = 0; i < e->cfg.slots; i++) {
        dlc__xfer_slot *s = &e->slots[i];
        if (s->active)
            continue;
        if (!s->assigned) {
            const int got = e->ops->next(e->cfg.drv, s);
            if (got < 0)
                return got;
            if (got == 0)
                continue;
            s->assigned = 1;
            s->attempts = 0;
            s->retry_at = 0;
        }
        if (now >= s->retry_at) {
            const dlc_status rc = start_attempt(e, s);
            if (rc < 0)
                return rc;
        }
    }
    return DLC_OK;
}

/* Send the transfer of @p s again after a backoff, or give up. */
static dlc_status schedule_retry(dlc__xfer *e, dlc__xfer_slot *s, const char *why)
{
    const dlc_warm_options *net = e->cfg.net;
    s->attempts = s->progressed ? 1 : s->attempts + 1;
    if (e->cfg.retries)
        (*e->cfg.retries)++;
    /* As long as dlc_errmsg()'s buffer: the messages are cut where they would be anyway. */
    char what[1024];
    e->ops->describe(e->cfg.drv, s, what, sizeof what);
    if (s->attempts > e->max_retries)
        return dlc__errorf(s->give_up < 0 ? s->give_up : DLC_ENETWORK,
                           "%s: gave up after %u attempts: %s", what, s->attempts, why);
    if (e->ops->before_retry) {
        const dlc_status rc = e->ops->before_retry(e->cfg.drv, s);
        if (rc < 0)
            return rc;
    }
    const double delay = dlc__warm_backoff(s->attempts, &e->rng);
    const double now = dlc__now_s();
    s->retry_at = now + delay;
    if (now - s->notice_from >= DLC__XFER_NOTICE_WINDOW_S) {
        s->notice_from = now;
        s->notices = 0;
    }
    if (s->notices >= DLC__XFER_NOTICES) {
        s->hidden++;
        return DLC_OK;
    }
    s->notices++;
    char held[96] = "";
    if (s->hidden)
        snprintf(held, sizeof held, " (%u earlier retr%s on this connection not shown)", s->hidden,
                 s->hidden == 1 ? "y" : "ies");
    s->hidden = 0;
    dlc__logf(net->log, net->log_user, DLC_LOG_WARN, "%s: %s; retry %u in %.2f s%s", what, why,
              s->attempts, delay, held);
    return DLC_OK;
}

/* Judge every attempt that libcurl reports finished. *freed says whether a slot became free, so
 * that its next transfer starts without sleeping. */
static dlc_status collect(dlc__xfer *e, int *freed)
{
    CURLMsg *msg;
    int left;
    *freed = 0;
    while ((msg = curl_multi_info_read(e->m, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        dlc__xfer_slot *s = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
        /* A body the engine stopped reading (on_body()) ended the answer, not the transfer; a
         * followed redirect's that went on (on_xferinfo()) is the server's failure. */
        CURLcode res =
            msg->data.result == CURLE_WRITE_ERROR && s->errbody_cut ? CURLE_OK : msg->data.result;
        if (res == CURLE_ABORTED_BY_CALLBACK && s->redirect_cut) {
            res = CURLE_WEIRD_SERVER_REPLY;
            snprintf(s->errbuf, sizeof s->errbuf,
                     "the body of a redirect (HTTP %ld) went on past %d KiB; not read further",
                     s->status, DLC__XFER_REDIRECT_BODY_MAX >> 10);
        }
        curl_multi_remove_handle(e->m, s->h);
        s->active = 0;
        *freed = 1;
        s->progressed = 0;
        s->give_up = DLC_OK;
        char why[800] = "";
        const dlc_status v = e->ops->done(e->cfg.drv, s, res, why, sizeof why);
        if (v < 0)
            return v;
        if (v == DLC__XFER_RETRY) {
            const dlc_status rc = schedule_retry(e, s, why);
            if (rc < 0)
                return rc;
            continue;
        }
        s->assigned = 0;
    }
    return DLC_OK;
}

/* Report progress when due; 1 when the callback asks to cancel. A driver without a progress
 * hook (the probe) still asks the callback, with what it knows (nothing but the time): the
 * callback is also how a caller stops a run (a loader's close(), Ctrl-C), and a probe of a server
 * that accepts and never answers would otherwise hold it for every attempt's timeout. */
static int want_cancel(dlc__xfer *e)
{
    const dlc_warm_options *net = e->cfg.net;
    if (!net->progress)
        return 0;
    const double now = dlc__now_s();
    if (now - e->last_progress < 0.1)
        return 0;
    if (e->last_progress == 0)
        e->first_progress = now;
    e->last_progress = now;
    dlc_warm_progress p;
    memset(&p, 0, sizeof p);
    if (e->ops->progress)
        e->ops->progress(e->cfg.drv, e, now, &p);
    else
        p.seconds = now - e->first_progress;
    return net->progress(net->progress_user, &p) != 0;
}

/* Sleep until a socket is ready, a retry is due, or 100 ms pass (the progress callback's
 * pace). */
static dlc_status wait_for_work(dlc__xfer *e)
{
    double wait = 0.1;
    const double now = dlc__now_s();
    int any = 0;
    for (size_t i = 0; i < e->cfg.slots; i++) {
        const dlc__xfer_slot *s = &e->slots[i];
        any |= s->assigned;
        if (s->assigned && !s->active && s->retry_at - now < wait)
            wait = s->retry_at - now;
    }
    if (!any)
        return dlc__errorf(DLC_ESTATE, "%s: no transfer left, yet the work is not finished",
                           e->cfg.name);
    if (wait <= 0)
        return DLC_OK;
    const CURLMcode mc = curl_multi_poll(e->m, NULL, 0, (int)(wait * 1000.0) + 1, NULL);
    if (mc != CURLM_OK)
        return dlc__errorf(DLC_ENETWORK, "%s: curl_multi_poll: %s", e->cfg.name,
                           curl_multi_strerror(mc));
    return DLC_OK;
}

/* One turn of the loop. */
static dlc_status step(dlc__xfer *e)
{
    dlc_status rc = start_due(e);
    if (rc < 0)
        return rc;
    int running = 0;
    const CURLMcode mc = curl_multi_perform(e->m, &running);
    if (mc != CURLM_OK)
        return dlc__errorf(DLC_ENETWORK, "%s: curl_multi_perform: %s", e->cfg.name,
                           curl_multi_strerror(mc));
    int freed = 0;
    rc = collect(e, &freed);
    if (rc == DLC_OK && e->ops->check)
        rc = e->ops->check(e->cfg.drv);
    if (rc < 0)
        return rc;
    if (want_cancel(e))
        return e->ops->canceled ? e->ops->canceled(e->cfg.drv)
                                : dlc__errorf(DLC_ECANCELED,
                                              "%s: canceled by the progress "
                                              "callback",
                                              e->cfg.name);
    if (e->ops->finished(e->cfg.drv))
        return DLC_OK;
    /* A freed slot takes its next transfer at once, and what finished may have made work for
     * other slots (a push's set index after its last shard): look again before sleeping. */
    return freed ? DLC_OK : wait_for_work(e);
}

dlc_status dlc__xfer_run(dlc__xfer *e)
{
    dlc_status rc = DLC_OK;
    while (rc == DLC_OK && !e->ops->finished(e->cfg.drv))
        rc = step(e);
    return rc;
}

dlc_status dlc__xfer_open(const dlc__xfer_config *cfg, dlc__xfer **out)
{
    *out = NULL;
    dlc__xfer *e = calloc(1, sizeof *e);
    if (!e)
        return dlc__errorf(-ENOMEM, "%s: out of memory", cfg->name);
    e->cfg = *cfg;
    e->ops = cfg->ops;
    e->max_retries = (cfg->net->flags & DLC_WARM_NO_RETRY) ? 0
                     : cfg->net->max_retries               ? cfg->net->max_retries
                                                           : DLC__WARM_DEFAULT_RETRIES;
    e->rng = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(dlc__now_s() * 1e9);
    e->m = curl_multi_init();
    e->slots = calloc(cfg->slots, sizeof *e->slots);
    int ok = e->m && e->slots;
    if (ok)
        curl_multi_setopt(e->m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)cfg->slots);
    for (size_t i = 0; ok && i < cfg->slots; i++) {
        e->slots[i].e = e;
        e->slots[i].h = curl_easy_init();
        ok = e->slots[i].h != NULL;
    }
    if (!ok) {
        dlc__xfer_close(e);
        return dlc__errorf(-ENOMEM, "%s: out of memory", cfg->name);
    }
    *out = e;
    return DLC_OK;
}

void dlc__xfer_close(dlc__xfer *e)
{
    if (!e)
        return;
    for (size_t i = 0; e->slots && i < e->cfg.slots; i++) {
        dlc__xfer_slot *s = &e->slots[i];
        if (s->active)
            curl_multi_remove_handle(e->m, s->h);
        if (s->h)
            curl_easy_cleanup(s->h);
    }
    free(e->slots);
    if (e->m)
        curl_multi_cleanup(e->m);
    free(e);
}
