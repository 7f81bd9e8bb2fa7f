/* dlc_warm(): lock, look for a complete copy, probe, resume or start the
 * download, verify the store, and publish it under its final name. */
#include "common.h"
#include "warm_internal.h"

#include <dlcache/store.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The defaults, at this library's size: dlc_warm_options_init_sized() gives the caller its part. */
static void warm_options_defaults(dlc_warm_options *o)
{
    memset(o, 0, sizeof *o);
    o->connections = DLC__WARM_DEFAULT_CONNECTIONS;
    o->chunk_size = DLC__WARM_DEFAULT_CHUNK;
    o->max_retries = DLC__WARM_DEFAULT_RETRIES;
    o->timeout_s = 30.0;
    o->connect_timeout_s = 10.0;
}

void dlc_warm_options_init_sized(dlc_warm_options *o, size_t size)
{
    dlc_warm_options d;
    warm_options_defaults(&d);
    dlc__options_init(o, size, &d, sizeof d);
}

typedef struct paths {
    char lock[4096];
    char part[4096];
    char journal[4096];
    char sidecar[4096];
    /* The directories they are in, held open for the whole call and checked once
     * (dlc__open_parent_dir()): every create, rename and unlink goes relative to them, so a
     * co-tenant who renames a folder or swaps it for a link mid-run reaches nothing (issue 23's
     * leftover). dir_fd holds the part file and DEST, state_fd the lock, journal and sidecar;
     * they are one descriptor unless a set's bookkeeping folder holds the state. */
    int dir_fd;
    int state_fd;
    int own_dir_fd; /* This call opened them and closes them. */
    int own_state_fd;
} paths;

/* Remove the part file and its journal (a download not worth keeping). */
static void drop_part(const paths *p)
{
    unlinkat(p->dir_fd, dlc__at_name(p->dir_fd, p->part), 0);
    unlinkat(p->state_fd, dlc__at_name(p->state_fd, p->journal), 0);
}

/* The partial file is always beside DEST, since publishing it is a rename within DEST's directory;
 * the lock, journal and sidecar are named after @p state (DEST itself, or a set's shard's name in
 * the set's bookkeeping folder, dlc__warm_file()). */
static dlc_status make_paths(const char *dest, const char *state, paths *p)
{
    const size_t cap = sizeof p->lock;
    if ((size_t)snprintf(p->lock, cap, "%s.lock", state) >= cap ||
        (size_t)snprintf(p->part, cap, "%s.warm-part", dest) >= cap ||
        (size_t)snprintf(p->journal, cap, "%s.warm-journal", state) >= cap ||
        (size_t)snprintf(p->sidecar, cap, "%s.warm", state) >= cap)
        return dlc__errorf(DLC_EINVAL, "%s: path too long", dest);
    return DLC_OK;
}

/* DEST is a complete copy of @p source (size and, when @p etag is not NULL,
 * ETag) if the sidecar says so and DEST is still the file it describes. */
static int complete_copy(const char *dest, const paths *p, const char *source, const char *etag,
                         const uint64_t *size, dlc__warm_sidecar *sc)
{
    if (dlc__warm_sidecar_read_at(p->state_fd, p->sidecar, sc) != DLC_OK)
        return 0;
    if (strcmp(sc->source, source) != 0 || (etag && strcmp(sc->etag, etag) != 0) ||
        (size && sc->size != *size))
        return 0;
    dlc__warm_sidecar now = *sc;
    if (dlc__warm_sidecar_stat_at(p->dir_fd, dest, &now) != DLC_OK)
        return 0;
    return now.inode == sc->inode && now.mtime_ns == sc->mtime_ns;
}

typedef struct verify_ctx {
    const dlc_warm_options *opt;
    uint64_t size;
    uint64_t downloaded;
    double t0;
    double last;
} verify_ctx;

static int on_verify(void *user, const dlc_verify_progress *vp)
{
    verify_ctx *v = user;
    if (!v->opt->progress || vp->bad_status != 0)
        return 0;
    const double now = dlc__now_s();
    if (now - v->last < 0.1 && vp->done != vp->total)
        return 0;
    v->last = now;
    dlc_warm_progress p = {.total = v->size,
                           .done = v->size,
                           .downloaded = v->downloaded,
                           .seconds = now - v->t0,
                           .verifying = 1};
    return v->opt->progress(v->opt->progress_user, &p);
}

/* The part file is read through its open descriptor's own name, never by its path again: the
 * bytes verified are those that publish() renames. */
static dlc_status verify_store(int part_fd, const dlc__warm_source *src, verify_ctx *v)
{
    char part[64];
    snprintf(part, sizeof part, "/proc/self/fd/%d", part_fd);
    dlc_store *s = NULL;
    dlc_status rc = dlc_store_open(part, DLC_STORE_SEQUENTIAL, &s);
    if (rc == DLC_OK) {
        uint64_t bad = 0;
        rc = dlc_store_verify(s, on_verify, v, &bad);
        dlc_store_close(s);
    }
    if (rc < 0 && rc != DLC_ECANCELED) {
        char detail[1024];
        snprintf(detail, sizeof detail, "%s", dlc_errmsg());
        return dlc__errorf(rc, "%s: the download is not a valid store%s: %s", src->shown,
                           rc == DLC_EVERSION ? " (use --no-verify for other files)" : "", detail);
    }
    return rc;
}

static dlc_status open_part(const paths *p, uint64_t size, int *fd_out)
{
    dlc_status rc = DLC_OK;
    /* A journal describes one particular part file: it goes first. */
    if (unlinkat(p->state_fd, dlc__at_name(p->state_fd, p->journal), 0) < 0 && errno != ENOENT)
        return dlc__errorf(-errno, "%s: unlink: %s", p->journal, strerror(errno));
    /* Made afresh, never through a link planted under its name (issue 23, item 10). */
    int fd = -1;
    rc = dlc__create_own_at(p->dir_fd, p->part, O_RDWR, &fd);
    if (rc < 0)
        return rc;
    if (size > 0 && fallocate(fd, 0, 0, (off_t)size) < 0) {
        const int e = errno;
        if (e == EOPNOTSUPP || e == ENOSYS) {
            /* No preallocation on this file system: a sparse file of the
             * right size still takes every chunk at its offset. */
            FAIL_IF(ftruncate(fd, (off_t)size) < 0, -errno, "%s: truncate to %" PRIu64 ": %s",
                    p->part, size, strerror(errno));
        } else {
            FAIL_IF(1, -e, "%s: cannot reserve %" PRIu64 " bytes: %s", p->part, size, strerror(e));
        }
    }
    *fd_out = fd;
    return DLC_OK;
fail:
    close(fd);
    unlinkat(p->dir_fd, dlc__at_name(p->dir_fd, p->part), 0);
    return rc;
}

static dlc_status publish(const char *dest, const paths *p, int fd, const dlc__warm_source *src,
                          const dlc__warm_object *obj)
{
    /* The data must be durable before the name points at it. The sidecar is written before the
     * rename, naming the part file's inode and mtime, which the rename keeps: it vouches for
     * DEST only once DEST is that file (complete_copy() compares them), and a process killed
     * between the two leaves a shard in a set's folder that the rerun knows as ours (a set's
     * check_dest_folder() looks for its sidecar) instead of a stranger it must refuse. */
    if (fsync(fd) < 0)
        return dlc__errorf(-errno, "%s: fsync: %s", p->part, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0)
        return dlc__errorf(-errno, "%s: fstat: %s", p->part, strerror(errno));
    if ((uint64_t)st.st_size != obj->size)
        return dlc__errorf(DLC_ECHANGED, "%s: %" PRIu64 " bytes where %" PRIu64 " were fetched",
                           p->part, (uint64_t)st.st_size, obj->size);
    dlc__warm_sidecar sc;
    memset(&sc, 0, sizeof sc);
    snprintf(sc.source, sizeof sc.source, "%s", src->name);
    snprintf(sc.etag, sizeof sc.etag, "%s", obj->etag);
    sc.size = obj->size;
    sc.inode = (uint64_t)st.st_ino;
    sc.mtime_ns = dlc__warm_mtime_ns(&st);
    dlc_status rc = dlc__warm_sidecar_write_at(p->state_fd, p->sidecar, &sc);
    if (rc < 0)
        return rc;
    if (renameat(p->dir_fd, dlc__at_name(p->dir_fd, p->part), p->dir_fd,
                 dlc__at_name(p->dir_fd, dest)) < 0)
        return dlc__errorf(-errno, "%s: rename to %s: %s", p->part, dest, strerror(errno));
    rc = dlc__fsync_dir_at(p->dir_fd, dest);
    if (rc < 0)
        return rc;
    unlinkat(p->state_fd, dlc__at_name(p->state_fd, p->journal), 0);
    return DLC_OK;
}

/* The state of one dlc_warm() call, shared by its stages. */
typedef struct warm_call {
    const char *dest;
    const char *state; /* What the lock, journal and sidecar are named after (make_paths()). */
    dlc_warm_options opt;
    dlc_warm_result r;
    double t0;
    dlc__warm_source src;
    paths *p;
    dlc__warm_object obj;
    int lock_fd;     /* DEST.lock, held from lock_or_wait() on. */
    int part_fd;     /* >= 0: this call holds the lock and made or reopened the part file. */
    int journal_fd;  /* -1: no journal (not resumable). */
    int curl_inited; /* curl_global_init() succeeded and needs its cleanup. */
    /* The caller's progress callback: opt.progress is heartbeat() once the lock is ours. */
    dlc_warm_progress_fn user_progress;
    void *user_progress_user;
    double touched;             /* When heartbeat() last touched DEST.lock (dlc__now_s()). */
    struct timespec lock_mtime; /* A waiter: DEST.lock's mtime when last looked at. */
    /* The plan of the download (open_download()). */
    int resumable;
    uint64_t chunk;
    uint64_t nchunks;
    dlc__warm_ranges have; /* Bytes in place from earlier runs, as the journal says. */
    uint64_t have_bytes;
    dlc__warm_journal_id jid;
    uint64_t max_size;    /* 0, or the most bytes the object may have (checked after the probe). */
    const char *max_what; /* What the object is, for the refusal. */
} warm_call;

/* Fill in the defaults and refuse options out of range. */
static dlc_status check_options(dlc_warm_options *opt, const char *url, const char *dest)
{
    if (!url || !dest || !*dest)
        return dlc__errorf(DLC_EINVAL, "dlc_warm: url and dest are required");
    if (opt->connections == 0)
        opt->connections = DLC__WARM_DEFAULT_CONNECTIONS;
    if (opt->chunk_size == 0)
        opt->chunk_size = DLC__WARM_DEFAULT_CHUNK;
    if (opt->connections > DLC__WARM_MAX_CONNECTIONS)
        return dlc__errorf(DLC_EINVAL, "dlc_warm: %u connections (at most %d)", opt->connections,
                           DLC__WARM_MAX_CONNECTIONS);
    if (opt->chunk_size < DLC__WARM_MIN_CHUNK)
        return dlc__errorf(DLC_EINVAL,
                           "dlc_warm: chunk size %" PRIu64 " is below the minimum of %llu bytes",
                           opt->chunk_size, (unsigned long long)DLC__WARM_MIN_CHUNK);
    return dlc__warm_check_net(opt, "dlc_warm");
}

/* A regular file at DEST is replaced by the rename that publishes the download, so it must be
 * one this library published there, or DLC_WARM_FORCE must say to replace it: a user's file or
 * a store built in place would be lost to a mistyped -o. Ours means the sidecar names it (inode
 * and mtime, as publish() records them), or names the part file still beside it: a run killed
 * between writing the sidecar and the rename. Checked before the lock, so that a refusal leaves
 * nothing beside DEST. The holder of the lock changes DEST only by publishing (the sidecar, then
 * the rename): DEST is looked at between two reads of the sidecar, and again when the sidecar
 * changed between them, so that a publish under way is not taken for a stranger. */
static dlc_status check_dest_ours(const warm_call *w)
{
    const paths *p = w->p;
    const char *name = dlc__at_name(p->dir_fd, w->dest);
    for (int attempt = 0; attempt < 3; attempt++) {
        dlc__warm_sidecar sc, again;
        struct stat dst, pst;
        if (dlc__warm_sidecar_read_at(p->state_fd, p->sidecar, &sc) != DLC_OK)
            break;
        /* The part file before DEST: a rename between the two is then seen at DEST. */
        const int part =
            fstatat(p->dir_fd, dlc__at_name(p->dir_fd, p->part), &pst, AT_SYMLINK_NOFOLLOW) == 0;
        if (fstatat(p->dir_fd, name, &dst, AT_SYMLINK_NOFOLLOW) != 0)
            return DLC_OK; /* Gone since prepare() looked: nothing to replace. */
        if (dlc__warm_sidecar_read_at(p->state_fd, p->sidecar, &again) != DLC_OK ||
            again.inode != sc.inode || again.mtime_ns != sc.mtime_ns)
            continue; /* A publish between the reads: look again. */
        if (dlc__warm_sidecar_names(&sc, &dst) || (part && dlc__warm_sidecar_names(&sc, &pst)))
            return DLC_OK;
        break;
    }
    return dlc__errorf(DLC_EEXIST,
                       "%s: a file that is not a download of cachewarm's (no sidecar %s names "
                       "this file): publishing the download would replace it; name a new file, "
                       "remove it, or pass --force (DLC_WARM_FORCE) to replace it",
                       w->dest, p->sidecar);
}

/* The names beside DEST and their directories, libcurl and the resolved source. */
static dlc_status prepare(warm_call *w, const char *url, int dest_dir, int state_dir)
{
    w->p = malloc(sizeof *w->p);
    if (!w->p)
        return dlc__errorf(-ENOMEM, "dlc_warm: out of memory");
    paths *p = w->p;
    p->dir_fd = dest_dir;
    p->state_fd = state_dir;
    p->own_dir_fd = p->own_state_fd = 0;
    dlc_status rc = make_paths(w->dest, w->state, p);
    if (rc == DLC_OK && p->dir_fd < 0) {
        rc = dlc__open_parent_dir(w->dest, "the destination", &p->dir_fd);
        p->own_dir_fd = rc == DLC_OK;
    }
    /* Before any file is made beside DEST (its lock, journal, part): a DEST that exists must be
     * a regular file or a set's folder. /dev/null (the habit of curl -o /dev/null), a FIFO or a
     * link would be replaced by the rename that publishes the download. */
    struct stat st;
    const int exists = rc == DLC_OK && fstatat(p->dir_fd, dlc__at_name(p->dir_fd, w->dest), &st,
                                               AT_SYMLINK_NOFOLLOW) == 0;
    if (exists && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        rc = dlc__errorf(DLC_EINVAL,
                         "%s: is %s, not a regular file: a download is published by renaming "
                         "it over its destination, which would replace it; name a new file, a "
                         "regular one or a set's folder",
                         w->dest, dlc__file_kind(st.st_mode));
    if (rc == DLC_OK && p->state_fd < 0) {
        if (strcmp(w->state, w->dest) == 0) {
            p->state_fd = p->dir_fd;
        } else {
            rc = dlc__open_parent_dir(w->state, "the download's bookkeeping", &p->state_fd);
            p->own_state_fd = rc == DLC_OK;
        }
    }
    /* A set's shards and index: its folder was checked as a whole (warm_set.c). */
    if (rc == DLC_OK && exists && S_ISREG(st.st_mode) && dest_dir < 0 &&
        !(w->opt.flags & DLC_WARM_FORCE))
        rc = check_dest_ours(w);
    if (rc < 0)
        return rc;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return dlc__errorf(DLC_ENOSYS, "dlc_warm: libcurl failed to initialize");
    w->curl_inited = 1;
    return dlc__warm_source_init(&w->src, url, &w->opt);
}

/* The holder's sign of life: every progress report (the engine asks about ten times a second,
 * stalled or not; verifying and a set's shards report too) touches DEST.lock's mtime, at most once
 * a second, so that a waiter can tell a holder at work from one that only holds the lock. */
static int heartbeat(void *user, const dlc_warm_progress *p)
{
    warm_call *w = user;
    const double now = dlc__now_s();
    if (now - w->touched >= 1.0) {
        w->touched = now;
        (void)futimens(w->lock_fd, NULL); /* A lock file we may not touch: waiters time out. */
    }
    return w->user_progress ? w->user_progress(w->user_progress_user, p) : 0;
}

/* A waiter asks the caller's progress callback between its tries: Ctrl-C (cachewarm's SIGINT
 * and SIGTERM, Python's) ends the wait. */
static int wait_canceled(void *user)
{
    warm_call *w = user;
    if (!w->user_progress)
        return 0;
    dlc_warm_progress p;
    memset(&p, 0, sizeof p);
    p.seconds = dlc__now_s() - w->t0;
    return w->user_progress(w->user_progress_user, &p) != 0;
}

/* The holder touched DEST.lock since the last look (heartbeat()). */
static int holder_alive(void *user)
{
    warm_call *w = user;
    struct stat st;
    if (fstat(w->lock_fd, &st) < 0)
        return 0;
    const int moved =
        st.st_mtim.tv_sec != w->lock_mtime.tv_sec || st.st_mtim.tv_nsec != w->lock_mtime.tv_nsec;
    w->lock_mtime = st.st_mtim;
    return moved;
}

/* One process per node downloads; the others queue here. A call that waited
 * finds DEST published by the holder and sets r.already_complete. The wait is bounded: it ends
 * on the caller's progress callback (Ctrl-C) and when the holder has shown no sign of life
 * (heartbeat()) for timeout_s * (max_retries + 1) seconds, the longest its own requests may go
 * without a byte; then -ETIMEDOUT names DEST.lock and its holder. */
static dlc_status lock_or_wait_once(warm_call *w)
{
    const paths *p = w->p;
    const dlc_warm_options *opt = &w->opt;
    const dlc_status orc = dlc__open_own_at(p->state_fd, p->lock, O_RDWR | O_CREAT, &w->lock_fd);
    if (orc < 0)
        return orc;
    if (flock(w->lock_fd, LOCK_EX | LOCK_NB) == 0)
        return DLC_OK;
    if (errno != EWOULDBLOCK)
        return dlc__errorf(-errno, "%s: flock: %s", p->lock, strerror(errno));
    dlc__logf(opt->log, opt->log_user, DLC_LOG_INFO,
              "%s: another process is warming it; waiting for it to finish", w->dest);
    struct stat lst;
    if (fstat(w->lock_fd, &lst) == 0)
        w->lock_mtime = lst.st_mtim;
    const double bound = (opt->timeout_s > 0 ? opt->timeout_s : 30.0) * (opt->max_retries + 1.0);
    const dlc_status wrc = dlc__flock_wait(
        w->lock_fd, LOCK_EX, p->lock, bound, wait_canceled, holder_alive, w,
        "it is held without a sign of work (a download holding it touches it every second; "
        "this one has not for timeout x (retries + 1)): a process stopped with Ctrl-Z, or one "
        "that only holds the lock; end it, or warm to another destination");
    if (wrc < 0)
        return wrc;
    w->r.waited = 1;
    /* The holder just probed the object and published it: trust that
     * rather than sending every rank's probe to the server. */
    dlc__warm_sidecar sc;
    if (complete_copy(w->dest, p, w->src.name, NULL, NULL, &sc)) {
        struct stat st;
        w->r.is_set = fstatat(p->dir_fd, dlc__at_name(p->dir_fd, w->dest), &st, 0) == 0 &&
                      S_ISDIR(st.st_mode);
        w->r.bytes = sc.size;
        w->r.already_complete = 1;
        w->r.verified = !(opt->flags & DLC_WARM_NO_VERIFY);
        snprintf(w->r.etag, sizeof w->r.etag, "%s", sc.etag);
        return DLC_OK;
    }
    dlc__logf(opt->log, opt->log_user, DLC_LOG_INFO,
              "%s: the other process did not finish it; continuing here", w->dest);
    return DLC_OK;
}

/* lock_or_wait_once(); once the lock is ours, every progress report is a heartbeat. */
static dlc_status lock_or_wait(warm_call *w)
{
    const dlc_status rc = lock_or_wait_once(w);
    if (rc == DLC_OK) {
        w->touched = dlc__now_s();
        (void)futimens(w->lock_fd, NULL);
        w->opt.progress = heartbeat;
        w->opt.progress_user = w;
    }
    return rc;
}

/* Learn the object's size and ETag; DEST may already be a complete copy. */
static dlc_status probe_object(warm_call *w)
{
    const dlc_status rc = dlc__warm_probe(&w->src, &w->opt, &w->obj, &w->r.retries);
    if (rc < 0)
        return rc;
    w->r.bytes = w->obj.size;
    if (w->max_size && w->obj.size > w->max_size)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: the server says it is %" PRIu64 " bytes; %s is at most %" PRIu64
                           ": refused before downloading it",
                           w->src.shown, w->obj.size, w->max_what, w->max_size);
    snprintf(w->r.etag, sizeof w->r.etag, "%s", w->obj.etag);
    dlc__warm_sidecar sc;
    if (*w->obj.etag && complete_copy(w->dest, w->p, w->src.name, w->obj.etag, &w->obj.size, &sc)) {
        w->r.already_complete = 1;
        w->r.verified = !(w->opt.flags & DLC_WARM_NO_VERIFY);
    }
    return DLC_OK;
}

/* Reopen the part file of an earlier run and its journal, when both describe
 * this object; otherwise start a fresh part file and journal. The journal
 * records byte ranges, so what an earlier run fetched counts whatever chunk
 * size and connections it had. */
static dlc_status resume_or_start(warm_call *w)
{
    const paths *p = w->p;
    /* A part file of an earlier run, if any, and not a link: dlc__create_own_at() below refuses
     * one that is, and replaces anything else. */
    w->part_fd = openat(p->dir_fd, dlc__at_name(p->dir_fd, p->part),
                        O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (w->part_fd >= 0 && (fstat(w->part_fd, &st) < 0 || !S_ISREG(st.st_mode) ||
                            (uint64_t)st.st_size != w->obj.size)) {
        close(w->part_fd);
        w->part_fd = -1;
    }
    const int reopened = w->part_fd >= 0;
    dlc_status rc = reopened ? DLC_OK : open_part(p, w->obj.size, &w->part_fd);
    if (rc < 0)
        return rc;
    rc = dlc__warm_journal_open_at(p->state_fd, p->journal, &w->jid, &w->have, &w->have_bytes,
                                   &w->journal_fd);
    if (rc < 0)
        return rc;
    if (reopened && w->have_bytes > 0) {
        uint64_t pieces = 0, complete = 0;
        dlc__warm_gaps_count(&w->have, w->obj.size, w->chunk, &pieces, &complete);
        dlc__logf(w->opt.log, w->opt.log_user, DLC_LOG_INFO,
                  "%s: resuming: %" PRIu64 " of %" PRIu64 " bytes are already here (%" PRIu64
                  " of %" PRIu64 " chunks complete)",
                  w->dest, w->have_bytes, w->obj.size, complete, w->nchunks);
    }
    return DLC_OK;
}

/* Plan the chunks and open the part file (and the journal when resumable). */
static dlc_status open_download(warm_call *w)
{
    const dlc__warm_object *obj = &w->obj;
    /* A server without ranges gets one whole-object GET, which cannot be
     * resumed. */
    w->resumable = obj->ranges && *obj->etag && !(w->opt.flags & DLC_WARM_NO_RESUME);
    w->chunk = obj->ranges ? w->opt.chunk_size : (obj->size ? obj->size : 1);
    w->nchunks = (obj->size + w->chunk - 1) / w->chunk;
    w->r.chunks = w->nchunks;
    w->jid.size = obj->size;
    w->jid.id = dlc__warm_journal_key(w->src.name, obj->etag);
    const dlc_status rc =
        w->resumable ? resume_or_start(w) : open_part(w->p, obj->size, &w->part_fd);
    if (rc == DLC_OK)
        w->r.resumed = w->have_bytes > 0;
    return rc;
}

/* Fetch every byte not yet in place. */
static dlc_status fetch_missing(warm_call *w)
{
    dlc__warm_fetch_job job = {.src = &w->src,
                               .opt = &w->opt,
                               .obj = &w->obj,
                               .fd = w->part_fd,
                               .part_path = w->p->part,
                               .journal_fd = w->journal_fd,
                               .journal_path = w->p->journal,
                               .jid = &w->jid,
                               .chunk_size = w->chunk,
                               .have = &w->have,
                               .done_bytes = w->have_bytes,
                               .t0 = w->t0};
    const dlc_status rc = dlc__warm_fetch(&job);
    w->r.bytes_downloaded = job.downloaded;
    w->r.chunks_fetched = job.chunks_fetched;
    w->r.retries += job.retries;
    /* A full disk or an unresumable download leaves nothing worth keeping;
     * anything else is kept for the rerun. */
    if (rc < 0 && (rc == -ENOSPC || rc == -EDQUOT || !w->resumable))
        drop_part(w->p);
    return rc;
}

/* The MD5 of the part file is the one the object says (dlc__warm_check_md5(), the check the
 * streaming cache runs too); bad bytes are removed so that a rerun fetches them again. */
static dlc_status check_md5(warm_call *w)
{
    const double t = dlc__now_s();
    int checked = 0;
    const dlc_status rc =
        dlc__warm_check_md5(&w->obj, w->part_fd, w->p->part, w->src.shown, &checked);
    w->r.verify_seconds += dlc__now_s() - t;
    if (rc == DLC_ECORRUPT)
        drop_part(w->p);
    if (rc == DLC_OK)
        w->r.md5_checked = checked;
    return rc;
}

/* The part file has the object's size and, unless DLC_WARM_NO_VERIFY, every
 * record's checksum is right. */
static dlc_status check_download(warm_call *w)
{
    const paths *p = w->p;
    struct stat st;
    if (fstat(w->part_fd, &st) < 0)
        return dlc__errorf(-errno, "%s: stat: %s", p->part, strerror(errno));
    if ((uint64_t)st.st_size != w->obj.size)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: is %lld bytes after the download, the object has %" PRIu64, p->part,
                           (long long)st.st_size, w->obj.size);
    dlc_status mrc = check_md5(w);
    if (mrc < 0 || (w->opt.flags & DLC_WARM_NO_VERIFY))
        return mrc;
    if (fdatasync(w->part_fd) < 0)
        return dlc__errorf(-errno, "%s: fdatasync: %s", p->part, strerror(errno));
    verify_ctx v = {
        .opt = &w->opt, .size = w->obj.size, .downloaded = w->r.bytes_downloaded, .t0 = w->t0};
    const double tv = dlc__now_s();
    const dlc_status rc = verify_store(w->part_fd, &w->src, &v);
    w->r.verify_seconds = dlc__now_s() - tv;
    if (rc == DLC_ECORRUPT)
        drop_part(p); /* Bad bytes: the rerun must fetch them again, not trust them. */
    if (rc < 0)
        return rc;
    w->r.verified = 1;
    return DLC_OK;
}

/* The stages in order; the first that fails ends the call. */
static dlc_status run_stages(warm_call *w, const char *url, int dest_dir, int state_dir)
{
    dlc_status rc = check_options(&w->opt, url, w->dest);
    if (rc == DLC_OK)
        rc = prepare(w, url, dest_dir, state_dir);
    if (rc == DLC_OK)
        rc = lock_or_wait(w);
    if (rc == DLC_OK && !w->r.already_complete)
        rc = probe_object(w);
    if (rc == DLC_EHTTP && w->obj.status == 404) {
        /* No such object: a store set has its index under the URL as a prefix (https too: the
         * index's URL keeps the set URL's query string, dlc__url_child()). */
        dlc__errsave es;
        dlc__err_save(&es);
        char index_url[4200];
        if (dlc__url_child(url, DLC__WARM_SET_INDEX, index_url, sizeof index_url) >=
            sizeof index_url)
            return dlc__err_restore(&es, rc); /* Cut short, it would name another object. */
        dlc__warm_source isrc;
        dlc__warm_object iobj;
        memset(&iobj, 0, sizeof iobj);
        uint32_t retries = 0;
        dlc_status irc = dlc__warm_source_init(&isrc, index_url, &w->opt);
        if (irc == DLC_OK)
            irc = dlc__warm_probe(&isrc, &w->opt, &iobj, &retries);
        dlc__warm_source_free(&isrc);
        if (irc == DLC_OK)
            return dlc__warm_set(url, w->dest, w->p->dir_fd, &w->opt, &w->r, w->t0);
        /* No index either (404, or a URL that names none): the object's 404 is the answer.
         * An index that is there but refused (401, 403), or a server that failed or stalled
         * on it, is what the user must hear about: "HTTP 404" of the prefix hid it. */
        if ((irc == DLC_EHTTP && iobj.status == 404) || irc == DLC_EINVAL || irc == -ENOMEM)
            return dlc__err_restore(&es, rc);
        char why[1024];
        snprintf(why, sizeof why, "%s", dlc_errmsg());
        return dlc__errorf(irc,
                           "%s: no object there (HTTP 404), and the set index beside it "
                           "could not be read: %s",
                           url, why);
    }
    if (rc < 0 || w->r.already_complete)
        return rc;
    /* One object, and DEST a folder: the rename that publishes it would fail, but only after the
     * whole download. (A set's shards are files its own folder check let through.) */
    struct stat st;
    if (dest_dir < 0 &&
        fstatat(w->p->dir_fd, dlc__at_name(w->p->dir_fd, w->dest), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISDIR(st.st_mode))
        return dlc__errorf(
            DLC_EINVAL,
            "%s: is a folder, and %s is one object, not a store set (no " DLC__WARM_SET_INDEX
            " under it): the download is published by renaming it to its "
            "destination; name a file, inside the folder if it should hold it",
            w->dest, w->src.shown);
    rc = open_download(w);
    if (rc == DLC_OK)
        rc = fetch_missing(w);
    if (rc == DLC_OK)
        rc = check_download(w);
    if (rc == DLC_OK)
        rc = publish(w->dest, w->p, w->part_fd, &w->src, &w->obj);
    return rc;
}

/* Close and free what the stages opened. The lock goes last. */
static void release(warm_call *w, dlc_status rc)
{
    /* A full disk leaves nothing worth keeping wherever it struck (the journal's header, the
     * sync before publishing), not only during the fetch: the partial file would hold on to the
     * space the user must free. part_fd >= 0 means this call holds the lock and made the part
     * (found by tests/e2e/fault_warm.sh: ENOSPC on the journal header left both behind). */
    if ((rc == -ENOSPC || rc == -EDQUOT) && w->part_fd >= 0)
        drop_part(w->p);
    if (w->part_fd >= 0)
        close(w->part_fd);
    if (w->journal_fd >= 0)
        close(w->journal_fd);
    /* Closing the lock file releases the lock: the next rank goes on. */
    if (w->lock_fd >= 0)
        close(w->lock_fd);
    dlc__warm_ranges_free(&w->have);
    if (w->p && w->p->own_state_fd)
        close(w->p->state_fd);
    if (w->p && w->p->own_dir_fd)
        close(w->p->dir_fd);
    free(w->p);
    dlc__warm_source_free(&w->src);
    if (w->curl_inited)
        curl_global_cleanup();
}

dlc_status dlc_warm(const char *url, const char *dest, const dlc_warm_options *opt_in,
                    dlc_warm_result *res)
{
    return dlc__warm_file(url, dest, dest, -1, -1, opt_in, res);
}

dlc_status dlc__warm_file(const char *url, const char *dest, const char *state, int dest_dir,
                          int state_dir, const dlc_warm_options *opt_in, dlc_warm_result *res)
{
    return dlc__warm_file_capped(url, dest, state, dest_dir, state_dir, opt_in, 0, NULL, res);
}

dlc_status dlc__warm_file_capped(const char *url, const char *dest, const char *state, int dest_dir,
                                 int state_dir, const dlc_warm_options *opt_in, uint64_t max_size,
                                 const char *what, dlc_warm_result *res)
{
    warm_call w;
    memset(&w, 0, sizeof w);
    w.max_size = max_size;
    w.max_what = what ? what : "the object";
    w.dest = dest;
    w.state = state ? state : dest;
    dlc_warm_options_init(&w.opt);
    if (opt_in) {
        const dlc_status rc = dlc__options_take(&w.opt, sizeof w.opt, opt_in, "dlc_warm_options",
                                                "dlc_warm_options_init");
        if (rc < 0) {
            if (res)
                memset(res, 0, sizeof *res);
            return rc;
        }
    }
    w.t0 = dlc__now_s();
    w.lock_fd = w.part_fd = w.journal_fd = -1;
    w.user_progress = w.opt.progress;
    w.user_progress_user = w.opt.progress_user;

    const dlc_status rc = run_stages(&w, url, dest_dir, state_dir);
    if (!w.r.is_set)
        w.r.files = 1;
    w.r.seconds = dlc__now_s() - w.t0;
    if (rc == DLC_OK && w.opt.progress) {
        dlc_warm_progress pr = {.total = w.r.bytes,
                                .done = w.r.bytes,
                                .downloaded = w.r.bytes_downloaded,
                                .seconds = w.r.seconds,
                                .verifying = 0};
        w.opt.progress(w.opt.progress_user, &pr);
    }
    release(&w, rc);
    if (res)
        *res = w.r;
    return rc;
}
