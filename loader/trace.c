/* The timeline (config.trace, $DLCACHE_TRACE): each thread of the loader keeps its own ring of
 * spans (a batch's stage: the I/O thread's resolve and its wait for shards, a worker's part of
 * a batch, the copy, the consumer's wait in next(); a streamed set's download threads: one span
 * per shard downloaded), written without a lock or an atomic by its one owner; at close, once
 * every thread has been joined, the rings become a Chrome trace-event JSON file (Perfetto,
 * chrome://tracing), one track per thread. The rings hold the last trace_batches spans of each
 * thread, so the file's size is bounded however long the run. */
#include "internal.h"
#include "stream_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One span. */
typedef struct span {
    uint64_t t0, t1; /* dlc__now_ns(). */
    uint64_t epoch;  /* The batch's epoch (a fetch: the shard's number), */
    uint64_t batch;  /* and its number in the epoch, dlc_batch.batch_index (a fetch: bytes). */
    uint32_t name;   /* An entry of names[]. */
    uint32_t flags;  /* A fetch: SPAN_AHEAD, SPAN_FAILED. */
} span;

enum { SPAN_AHEAD = 1u, SPAN_FAILED = 2u };

static const char *const names[] = {"io", "download", "work", "copy", "next", "fetch"};

/* The download threads of one stream cache: tracks base..base + n - 1. */
typedef struct dl_obs {
    dlc_loader *l;
    const dlc__scache *cache;
    uint32_t base, n;
} dl_obs;

/* The most stream caches (a mixture's streamed sources) and download tracks traced. */
#define MAX_CACHES 16u
#define MAX_DOWNLOADS 64u

/* A thread's ring. */
typedef struct track {
    span *ring;
    uint64_t n; /* Spans written; the last cap are kept. */
} track;

typedef struct dlc__trace dlc__trace;
struct dlc__trace {
    char *path;
    uint32_t cap;    /* Spans kept per track. */
    uint32_t nbase;  /* DLC__TRACK_WORKER0 + workers: the download tracks follow, */
    uint32_t ntrack; /* ntrack - nbase of them (at most MAX_DOWNLOADS; tracks has room). */
    track *tracks;   /* nbase + MAX_DOWNLOADS, never moved (download threads write theirs). */
    dl_obs obs[MAX_CACHES];
    uint32_t nobs;
    uint64_t t_open; /* dlc__now_ns() at dlc__trace_open(): the file's time 0. */
};

dlc_status dlc__trace_open(dlc_loader *l)
{
    const char *path = l->cfg.trace;
    if (!path || !*path)
        path = getenv("DLCACHE_TRACE");
    if (!path || !*path)
        return DLC_OK;
    /* The trace is written beside its name and renamed over it: over /dev/null (the habit of
     * DLCACHE_TRACE=/dev/null) or a FIFO that would replace the node with a regular file. */
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return dlc__errorf(DLC_EINVAL,
                           "%s: is %s, not a regular file: the trace (config.trace or "
                           "DLCACHE_TRACE) is written beside it and renamed over it, which would "
                           "replace it; name a new file or a regular one",
                           path, dlc__file_kind(st.st_mode));
    const uint32_t cap = l->cfg.trace_batches ? l->cfg.trace_batches : 256;
    dlc__trace *t = calloc(1, sizeof *t);
    if (!t)
        return dlc__errorf(-ENOMEM, "%s: out of memory for the trace", path);
    l->trace = t;
    t->t_open = dlc__now_ns();
    t->cap = cap;
    t->nbase = t->ntrack = DLC__TRACK_WORKER0 + l->nworkers;
    t->path = strdup(path);
    t->tracks = calloc(t->nbase + MAX_DOWNLOADS, sizeof *t->tracks);
    if (!t->path || !t->tracks)
        return dlc__errorf(-ENOMEM, "%s: out of memory for the trace", path);
    for (uint32_t i = 0; i < t->ntrack; i++) {
        t->tracks[i].ring = malloc((size_t)cap * sizeof(span));
        if (!t->tracks[i].ring)
            return dlc__errorf(-ENOMEM, "%s: out of memory for the trace of %u batches", path, cap);
    }
    l->cfg.trace = NULL; /* The caller's string need not outlive open. */
    return DLC_OK;
}

void dlc__trace_span(dlc_loader *l, uint32_t trk, uint32_t name, uint64_t epoch, uint64_t batch,
                     uint64_t t0, uint64_t t1)
{
    dlc__trace *t = l->trace;
    assert(t && trk < t->ntrack && name < sizeof names / sizeof names[0]);
    track *k = &t->tracks[trk];
    k->ring[k->n % t->cap] = (span){t0, t1, epoch, batch, name, 0};
    k->n++;
}

/* A download thread of a traced cache finished a shard (the cache's lock held: see
 * dlc__scache_observer). Its track is its own. */
static void on_fetch(void *user, uint32_t thread, uint32_t k, uint64_t bytes, int ahead,
                     dlc_status rc, uint64_t t0, uint64_t t1)
{
    const dl_obs *o = user;
    if (thread >= o->n)
        return;
    const dlc__trace *t = o->l->trace;
    track *tk = &t->tracks[o->base + thread];
    const uint32_t flags = (ahead ? SPAN_AHEAD : 0) | (rc != DLC_OK ? SPAN_FAILED : 0);
    tk->ring[tk->n % t->cap] = (span){t0, t1, k, bytes, DLC__SPAN_FETCH, flags};
    tk->n++;
}

dlc_status dlc__trace_downloads(dlc_loader *l, struct dlc__scache *cache)
{
    dlc__trace *t = l->trace;
    if (!t || !cache)
        return DLC_OK;
    const uint32_t room = t->nbase + MAX_DOWNLOADS - t->ntrack;
    uint32_t n = dlc__scache_threads(cache);
    n = n < room ? n : room;
    if (t->nobs == MAX_CACHES || n == 0)
        return DLC_OK; /* Traced no further: the file says which tracks it has. */
    for (uint32_t i = t->ntrack; i < t->ntrack + n; i++) {
        t->tracks[i].ring = malloc((size_t)t->cap * sizeof(span));
        if (!t->tracks[i].ring)
            return dlc__errorf(-ENOMEM, "%s: out of memory for the trace of %u batches", t->path,
                               t->cap);
    }
    dl_obs *o = &t->obs[t->nobs++];
    *o = (dl_obs){l, cache, t->ntrack, n};
    t->ntrack += n;
    /* The cache's lock orders these writes before the threads' first call. */
    dlc__scache_observe(cache, on_fetch, o);
    return DLC_OK;
}

static void track_name(const dlc__trace *t, uint32_t i, char *buf, size_t cap)
{
    if (i == DLC__TRACK_IO)
        snprintf(buf, cap, "dlcache I/O");
    else if (i == DLC__TRACK_COPY)
        snprintf(buf, cap, "dlcache copy");
    else if (i == DLC__TRACK_CONSUMER)
        snprintf(buf, cap, "consumer (waits in next)");
    else if (i < t->nbase)
        snprintf(buf, cap, "dlcache worker %u", i - DLC__TRACK_WORKER0);
    else
        snprintf(buf, cap, "dlcache download %u", i - t->nbase);
}

/* The cache whose download thread writes track @p i (>= nbase). */
static const dl_obs *obs_of(const dlc__trace *t, uint32_t i)
{
    for (uint32_t j = 0; j < t->nobs; j++)
        if (i >= t->obs[j].base && i < t->obs[j].base + t->obs[j].n)
            return &t->obs[j];
    return NULL;
}

/* @p s as a JSON string's contents: a shard's name from a bucket's index is checked to be
 * [A-Za-z0-9._-] (store_set_index.c), escaped here all the same. */
static void json_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
}

/* Write the JSON to @p f. Times in microseconds from the trace's open (the loader's). */
static int write_json(const dlc_loader *l, const dlc__trace *t, FILE *f)
{
    fprintf(f,
            "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"source\": \"dlcache\", "
            "\"batches_kept\": %u}, \"traceEvents\": [\n",
            t->cap);
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 0, "
               "\"args\": {\"name\": \"dlcache loader\"}}");
    for (uint32_t i = 0; i < t->ntrack; i++) {
        const track *k = &t->tracks[i];
        if (!k->n)
            continue;
        char name[64];
        track_name(t, i, name, sizeof name);
        fprintf(f,
                ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %u, "
                "\"args\": {\"name\": \"%s\"}}",
                i + 1, name);
        fprintf(f,
                ",\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 1, \"tid\": %u, "
                "\"args\": {\"sort_index\": %u}}",
                i + 1, i);
        const uint64_t first = k->n > t->cap ? k->n - t->cap : 0;
        const dl_obs *o = i >= t->nbase ? obs_of(t, i) : NULL;
        for (uint64_t j = first; j < k->n; j++) {
            const span *s = &k->ring[j % t->cap];
            const double ts = s->t0 > t->t_open ? (double)(s->t0 - t->t_open) * 1e-3 : 0;
            const double dur = s->t1 > s->t0 ? (double)(s->t1 - s->t0) * 1e-3 : 0;
            if (s->name == DLC__SPAN_FETCH) {
                const dlc__set_index *x = o ? dlc__scache_index(o->cache) : NULL;
                fprintf(f,
                        ",\n{\"name\": \"fetch\", \"cat\": \"dlcache\", \"ph\": \"X\", "
                        "\"pid\": 1, \"tid\": %u, \"ts\": %.3f, \"dur\": %.3f, \"args\": "
                        "{\"shard\": \"",
                        i + 1, ts, dur);
                json_str(f, x && s->epoch < x->num_shards ? x->shards[s->epoch].name : "?");
                fprintf(f, "\", \"bytes\": %" PRIu64 ", \"ahead\": %s, \"ok\": %s}}", s->batch,
                        s->flags & SPAN_AHEAD ? "true" : "false",
                        s->flags & SPAN_FAILED ? "false" : "true");
                continue;
            }
            fprintf(f,
                    ",\n{\"name\": \"%s\", \"cat\": \"dlcache\", \"ph\": \"X\", \"pid\": 1, "
                    "\"tid\": %u, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"epoch\": %" PRIu64
                    ", \"batch\": %" PRIu64 "}}",
                    names[s->name], i + 1, ts, dur, s->epoch, s->batch);
        }
    }
    fprintf(f, "\n]}\n");
    return ferror(f) ? -EIO : 0;
}

/* Write the trace next to its name and rename it over that name, both relative to the
 * directory's descriptor and never through a link: a crash leaves the old file or none. */
static dlc_status write_file(const dlc_loader *l, const dlc__trace *t)
{
    char *dir = strdup(t->path);
    if (!dir)
        return -ENOMEM;
    char *slash = strrchr(dir, '/');
    const char *base = t->path;
    if (slash) {
        base = t->path + (slash - dir) + 1;
        *slash = '\0';
    }
    dlc_status rc = DLC_OK;
    const int dfd = open(slash ? (*dir ? dir : "/") : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char tmp[300];
    int fd = -1;
    FILE *f = NULL;
    if (dfd < 0 || !*base || strlen(base) > 200) {
        rc = dfd < 0 ? -errno : DLC_EINVAL;
        goto out;
    }
    snprintf(tmp, sizeof tmp, ".%s.tmp-%ld", base, (long)getpid());
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || !(f = fdopen(fd, "w"))) {
        rc = -errno;
        goto out;
    }
    fd = -1; /* f owns it. */
    rc = write_json(l, t, f);
    if (fclose(f) != 0 && rc == DLC_OK)
        rc = -errno;
    f = NULL;
    /* Checked at open; something else put there since is not ours to replace either. */
    struct stat st;
    if (rc == DLC_OK && fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
        rc = DLC_EINVAL;
    if (rc == DLC_OK && renameat(dfd, tmp, dfd, base) != 0)
        rc = -errno;
    if (rc != DLC_OK)
        unlinkat(dfd, tmp, 0);
out:
    if (fd >= 0)
        close(fd);
    if (dfd >= 0)
        close(dfd);
    free(dir);
    return rc;
}

void dlc__trace_close(dlc_loader *l, int write)
{
    dlc__trace *t = l->trace;
    if (!t)
        return;
    /* The download threads write their tracks until they are joined (the I/O thread and the
     * workers are). The cache stays open: the file names its shards. */
    for (uint32_t i = 0; i < t->nobs; i++)
        dlc__scache_join((dlc__scache *)t->obs[i].cache);
    if (write && t->tracks && t->path) {
        const dlc_status rc = write_file(l, t);
        if (rc != DLC_OK)
            dlc__logf(l->cfg.log, l->cfg.log_user, DLC_LOG_WARN,
                      "%s: the trace was not written to %s: %s", l->path, t->path,
                      dlc_strerror(rc));
    }
    /* Also the rings of a dlc__trace_downloads() that ran out of memory halfway. */
    for (uint32_t i = 0; t->tracks && i < t->nbase + MAX_DOWNLOADS; i++)
        free(t->tracks[i].ring);
    free(t->tracks);
    free(t->path);
    free(t);
    l->trace = NULL;
}
