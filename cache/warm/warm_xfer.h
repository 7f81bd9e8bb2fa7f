/* Private to the warm part: the one transfer engine that a download (warm_fetch.c), a push
 * (warm_push_send.c) and the probe before a download drive, so that connections, retries and
 * cancellation behave the same everywhere and a fix to them is made once.
 *
 * The engine owns libcurl's multi handle and a fixed pool of slots, one easy handle each (one
 * per connection). A driver supplies the work through hooks (dlc__xfer_ops): which transfer an
 * idle slot takes next, how one attempt of it is set up (URL, method, headers: the HTTP and the
 * signing stay in the driver's files), where the response's headers and body go and where the
 * request's body comes from, and what a finished attempt means. The engine decides the rest the
 * same way for every driver:
 *   - a failure the driver calls worth another try is sent again after dlc__warm_backoff()
 *     (exponential from 0.1 s, capped at 5 s, half of it random so that ranks that failed
 *     together do not retry together), up to the options' max_retries in a row; an attempt that
 *     moved the transfer on substantially (the driver says so: for a download, at least
 *     DLC__WARM_MIN_PROGRESS bytes) starts the count over;
 *   - the body of an answer whose status is not 2xx goes to the sink up to DLC__WARM_ERRBODY_MAX
 *     bytes, which is all any driver keeps of it; then the engine stops reading and the done hook
 *     judges the attempt as if the body had ended there (a server's endless error body cannot
 *     hold a transfer); the body of a redirect that libcurl follows (and reads without handing
 *     it on) is cut after DLC__XFER_REDIRECT_BODY_MAX bytes, a failure worth another try;
 *   - a retry is logged as "WHAT: WHY; retry N in S s", at most DLC__XFER_NOTICES of them per
 *     slot in DLC__XFER_NOTICE_WINDOW_S seconds; the next one shown after some were held back
 *     says how many; the last attempt fails as "WHAT: gave up after N attempts: WHY", WHAT
 *     being the driver's description of the slot;
 *   - progress is reported at most every 0.1 s through the options' callback, and a nonzero
 *     answer from it cancels the run;
 *   - the loop sleeps in curl_multi_poll() until a socket is ready, a retry is due or the
 *     progress callback is due, and not at all after a slot was freed.
 * One engine belongs to one thread; its hooks run on that thread, inside dlc__xfer_run(). */
#ifndef DLCACHE_WARM_XFER_H
#define DLCACHE_WARM_XFER_H

#include <dlcache/warm.h>

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

typedef struct dlc__xfer dlc__xfer;

/* The verdict of a done hook on an attempt that should be sent again after a backoff. */
#define DLC__XFER_RETRY 1

/* Retry notices: at most this many per slot in this many seconds (a server that drops every
 * connection at once made 1,510 lines a minute). */
#define DLC__XFER_NOTICES 3
/* The most bytes of a followed redirect's body the engine lets libcurl read (and discard). */
#define DLC__XFER_REDIRECT_BODY_MAX (64 * 1024)
#define DLC__XFER_NOTICE_WINDOW_S 10.0

/* One slot: a connection's easy handle and the transfer it holds. The engine owns the handle
 * and the bookkeeping; the driver keeps its own state for the slot in t. */
typedef struct dlc__xfer_slot {
    CURL *h;                      /* Made at open; the request hook sets a request's options. */
    void *t;                      /* The driver's state for this slot (set after open). */
    char errbuf[CURL_ERROR_SIZE]; /* libcurl's detail of a failed attempt. */
    long status;                  /* The current response's HTTP status (0 before its line). */
    int active;                   /* Added to the multi handle. */
    int assigned;                 /* Holds a transfer (active, or waiting for its retry time). */
    unsigned attempts;            /* Failed attempts of the transfer, in a row. */
    double retry_at;              /* When its next attempt may start (dlc__now_s()). */
    double started;               /* When the current attempt went out. */
    /* Set by the done hook with DLC__XFER_RETRY: */
    int progressed;      /* The attempt moved the transfer on: the count starts over at 1. */
    dlc_status give_up;  /* The failure when the attempts run out (DLC_ENETWORK unless set). */
    struct dlc__xfer *e; /* The engine. */
    size_t errbody;      /* Bytes of the current error answer's body given to the sink. */
    int errbody_cut;     /* The engine stopped reading that body (the done hook sees CURLE_OK). */
    int redirect_cut;    /* The engine stopped reading the body of a redirect libcurl follows. */
    double notice_from;  /* When this slot's window of retry notices began. */
    unsigned notices;    /* Retry notices shown in that window. */
    unsigned hidden;     /* Retry notices held back since the last one shown. */
} dlc__xfer_slot;

/* What a driver supplies. Hooks marked optional may be NULL; @p drv is the config's. */
typedef struct dlc__xfer_ops {
    /* Give idle slot @p s its next transfer (into s->t): 1, 0 when there is none now, or < 0. */
    int (*next)(void *drv, dlc__xfer_slot *s);
    /* Set up s->h for one attempt: URL, method, headers, the body's size. The engine then sets
     * its own callbacks, the error buffer and CURLOPT_PRIVATE. */
    dlc_status (*request)(void *drv, dlc__xfer_slot *s);
    /* A response begins (the first, or the next after a redirect or a 100 Continue): forget what
     * the previous one said. s->status is already the new one's. */
    void (*response)(void *drv, dlc__xfer_slot *s);
    /* A header of the response: its name and its value without surrounding white space (neither
     * NUL-terminated; see dlc__xfer_header_is() and dlc__xfer_header_copy()). */
    void (*header)(void *drv, dlc__xfer_slot *s, const char *name, size_t name_len,
                   const char *value, size_t value_len);
    /* Bytes of the response's body, as CURLOPT_WRITEFUNCTION: @p n to go on, else it stops. */
    size_t (*sink)(void *drv, dlc__xfer_slot *s, const char *p, size_t n);
    /* Optional: bytes of the request's body into @p buf, as CURLOPT_READFUNCTION. */
    size_t (*source)(void *drv, dlc__xfer_slot *s, char *buf, size_t n);
    /* With source: the body starts over (libcurl sends it again); 0, or -1 when it cannot. */
    int (*rewind)(void *drv, dlc__xfer_slot *s);
    /* Judge a finished attempt (@p res is libcurl's result): DLC_OK (the slot is free again),
     * DLC__XFER_RETRY with the reason in @p why (and s->progressed, s->give_up), or a failure,
     * which ends the run. */
    dlc_status (*done)(void *drv, dlc__xfer_slot *s, CURLcode res, char *why, size_t cap);
    /* What the slot's transfer is, for the retry messages ("s3://b/k: bytes 0-99"). */
    const char *(*describe)(void *drv, const dlc__xfer_slot *s, char *buf, size_t cap);
    /* Optional: the transfer is about to wait for a retry; may change its next request. */
    dlc_status (*before_retry)(void *drv, dlc__xfer_slot *s);
    /* Whether all work is done; the run ends when it is. */
    int (*finished)(void *drv);
    /* Optional: a failure from outside the transfers, checked after every turn. */
    dlc_status (*check)(void *drv);
    /* Optional: fill @p p (total, done, downloaded, seconds at @p now) for the progress
     * callback. Without it the callback still runs (with the seconds only), so that every run
     * can be canceled. */
    void (*progress)(void *drv, const dlc__xfer *e, double now, dlc_warm_progress *p);
    /* Optional: the failure to return when the callback cancels (DLC_ECANCELED without it). */
    dlc_status (*canceled)(void *drv);
} dlc__xfer_ops;

typedef struct dlc__xfer_config {
    const dlc__xfer_ops *ops;
    void *drv;                   /* Handed to every hook. */
    size_t slots;                /* Connections (>= 1). */
    const dlc_warm_options *net; /* max_retries, the progress callback and the log. */
    const char *name;            /* "warm", "push": names the engine in its own failures. */
    uint32_t *retries;           /* Counts every retry (a result's figure). */
} dlc__xfer_config;

/* Make an engine with @p cfg->slots slots and their easy handles (no request is out yet).
 * @p cfg is copied; what it points at must outlive the engine. Returns DLC_OK or -ENOMEM; *out is
 * NULL on failure. */
dlc_status dlc__xfer_open(const dlc__xfer_config *cfg, dlc__xfer **out);
/* Turn the loop until the finished hook says so or something fails: the first failure (a hook's,
 * retries run out, libcurl's, a cancel) is returned, with its message in dlc_errmsg(). Transfers
 * still out are left for dlc__xfer_close(). */
dlc_status dlc__xfer_run(dlc__xfer *e);
/* Stop whatever is out and free the engine and its handles (the slots' t is the driver's to
 * free, after this). Accepts NULL. */
void dlc__xfer_close(dlc__xfer *e);

size_t dlc__xfer_slot_count(const dlc__xfer *e);
dlc__xfer_slot *dlc__xfer_slot_at(const dlc__xfer *e, size_t i);

/* Whether a header's name is @p want, ignoring case. */
static inline int dlc__xfer_header_is(const char *name, size_t len, const char *want)
{
    return len == strlen(want) && strncasecmp(name, want, len) == 0;
}

/* Copy a header's value into @p out, cut to @p cap bytes with its NUL (cap > 0). */
void dlc__xfer_header_copy(const char *value, size_t len, char *out, size_t cap);

#endif /* DLCACHE_WARM_XFER_H */
