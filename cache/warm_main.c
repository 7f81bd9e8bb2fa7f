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
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

void dlc_warm_options_init(dlc_warm_options *o)
{
    memset(o, 0, sizeof *o);
    o->connections = DLC__WARM_DEFAULT_CONNECTIONS;
    o->chunk_size = DLC__WARM_DEFAULT_CHUNK;
    o->max_retries = DLC__WARM_DEFAULT_RETRIES;
    o->timeout_s = 30.0;
    o->connect_timeout_s = 10.0;
}

typedef struct paths {
    char lock[4096];
    char part[4096];
    char journal[4096];
    char sidecar[4096];
} paths;

static dlc_status make_paths(const char *dest, paths *p)
{
    const size_t cap = sizeof p->lock;
    if ((size_t)snprintf(p->lock, cap, "%s.lock", dest) >= cap ||
        (size_t)snprintf(p->part, cap, "%s.warm-part", dest) >= cap ||
        (size_t)snprintf(p->journal, cap, "%s.warm-journal", dest) >= cap ||
        (size_t)snprintf(p->sidecar, cap, "%s.warm", dest) >= cap)
        return dlc__errorf(DLC_EINVAL, "%s: path too long", dest);
    return DLC_OK;
}

/* DEST is a complete copy of @p source (size and, when @p etag is not NULL,
 * ETag) if the sidecar says so and DEST is still the file it describes. */
static int complete_copy(const char *dest, const paths *p, const char *source, const char *etag,
                         const uint64_t *size, dlc__warm_sidecar *sc)
{
    if (dlc__warm_sidecar_read(p->sidecar, sc) != DLC_OK)
        return 0;
    if (strcmp(sc->source, source) != 0 || (etag && strcmp(sc->etag, etag) != 0) ||
        (size && sc->size != *size))
        return 0;
    dlc__warm_sidecar now = *sc;
    if (dlc__warm_sidecar_stat(dest, &now) != DLC_OK)
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

static dlc_status verify_store(const char *part, const dlc__warm_source *src, verify_ctx *v)
{
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
    if (unlink(p->journal) < 0 && errno != ENOENT)
        return dlc__errorf(-errno, "%s: unlink: %s", p->journal, strerror(errno));
    const int fd = open(p->part, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return dlc__errorf(-errno, "%s: create: %s", p->part, strerror(errno));
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
    unlink(p->part);
    return rc;
}

static dlc_status publish(const char *dest, const paths *p, int fd, const dlc__warm_source *src,
                          const dlc__warm_object *obj)
{
    /* The data must be durable before the name points at it, and the name
     * before the sidecar vouches for it. */
    if (fsync(fd) < 0)
        return dlc__errorf(-errno, "%s: fsync: %s", p->part, strerror(errno));
    if (rename(p->part, dest) < 0)
        return dlc__errorf(-errno, "%s: rename to %s: %s", p->part, dest, strerror(errno));
    dlc_status rc = dlc__fsync_dir(dest);
    if (rc < 0)
        return rc;
    dlc__warm_sidecar sc;
    memset(&sc, 0, sizeof sc);
    snprintf(sc.source, sizeof sc.source, "%s", src->name);
    snprintf(sc.etag, sizeof sc.etag, "%s", obj->etag);
    sc.size = obj->size;
    rc = dlc__warm_sidecar_stat(dest, &sc);
    if (rc < 0)
        return dlc__errorf(rc, "%s: stat after rename failed", dest);
    rc = dlc__warm_sidecar_write(p->sidecar, &sc);
    if (rc < 0)
        return rc;
    unlink(p->journal);
    return DLC_OK;
}

dlc_status dlc_warm(const char *url, const char *dest, const dlc_warm_options *opt_in,
                    dlc_warm_result *res)
{
    dlc_status rc = DLC_OK;
    dlc_warm_options opt;
    if (opt_in)
        opt = *opt_in;
    else
        dlc_warm_options_init(&opt);
    dlc_warm_result r;
    memset(&r, 0, sizeof r);
    const double t0 = dlc__now_s();
    dlc__warm_source src;
    memset(&src, 0, sizeof src);
    paths *p = NULL;
    uint8_t *done = NULL;
    int lock_fd = -1, part_fd = -1, journal_fd = -1, curl_inited = 0;
    dlc__warm_object obj;
    memset(&obj, 0, sizeof obj);

    FAIL_IF(!url || !dest || !*dest, DLC_EINVAL, "dlc_warm: url and dest are required");
    if (opt.connections == 0)
        opt.connections = DLC__WARM_DEFAULT_CONNECTIONS;
    if (opt.chunk_size == 0)
        opt.chunk_size = DLC__WARM_DEFAULT_CHUNK;
    FAIL_IF(opt.connections > DLC__WARM_MAX_CONNECTIONS, DLC_EINVAL,
            "dlc_warm: %u connections (at most %d)", opt.connections, DLC__WARM_MAX_CONNECTIONS);
    FAIL_IF(opt.chunk_size < DLC__WARM_MIN_CHUNK, DLC_EINVAL,
            "dlc_warm: chunk size %" PRIu64 " is below the minimum of %llu bytes", opt.chunk_size,
            (unsigned long long)DLC__WARM_MIN_CHUNK);
    p = malloc(sizeof *p);
    FAIL_IF(!p, -ENOMEM, "dlc_warm: out of memory");
    CHECK(make_paths(dest, p));
    FAIL_IF(curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK, DLC_ENOSYS,
            "dlc_warm: libcurl failed to initialize");
    curl_inited = 1;
    CHECK(dlc__warm_source_init(&src, url, &opt));

    /* One process per node downloads; the others queue here. */
    lock_fd = open(p->lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    FAIL_IF(lock_fd < 0, -errno, "%s: cannot create the lock file: %s", p->lock, strerror(errno));
    if (flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
        FAIL_IF(errno != EWOULDBLOCK, -errno, "%s: flock: %s", p->lock, strerror(errno));
        dlc__logf(opt.log, opt.log_user, DLC_LOG_INFO,
                  "%s: another process is warming it; waiting for it to finish", dest);
        while (flock(lock_fd, LOCK_EX) < 0)
            FAIL_IF(errno != EINTR, -errno, "%s: flock: %s", p->lock, strerror(errno));
        r.waited = 1;
        /* The holder just probed the object and published it: trust that
         * rather than sending every rank's probe to the server. */
        dlc__warm_sidecar sc;
        if (complete_copy(dest, p, src.name, NULL, NULL, &sc)) {
            r.bytes = sc.size;
            r.already_complete = 1;
            r.verified = !(opt.flags & DLC_WARM_NO_VERIFY);
            snprintf(r.etag, sizeof r.etag, "%s", sc.etag);
            goto done;
        }
        dlc__logf(opt.log, opt.log_user, DLC_LOG_INFO,
                  "%s: the other process did not finish it; continuing here", dest);
    }

    CHECK(dlc__warm_probe(&src, &opt, &obj, &r.retries));
    r.bytes = obj.size;
    snprintf(r.etag, sizeof r.etag, "%s", obj.etag);
    {
        dlc__warm_sidecar sc;
        if (*obj.etag && complete_copy(dest, p, src.name, obj.etag, &obj.size, &sc)) {
            r.already_complete = 1;
            r.verified = !(opt.flags & DLC_WARM_NO_VERIFY);
            goto done;
        }
    }

    /* Plan the chunks. A server without ranges gets one whole-object GET,
     * which cannot be resumed. */
    const int resumable = obj.ranges && *obj.etag && !(opt.flags & DLC_WARM_NO_RESUME);
    const uint64_t chunk = obj.ranges ? opt.chunk_size : (obj.size ? obj.size : 1);
    const uint64_t nchunks = (obj.size + chunk - 1) / chunk;
    r.chunks = nchunks;
    done = calloc(nchunks ? nchunks : 1, 1);
    FAIL_IF(!done, -ENOMEM, "dlc_warm: out of memory");
    const dlc__warm_journal_id jid = {
        .size = obj.size, .chunk_size = chunk, .id = dlc__warm_journal_key(src.name, obj.etag)};
    uint64_t resumed_chunks = 0;
    if (resumable) {
        part_fd = open(p->part, O_RDWR | O_CLOEXEC);
        struct stat st;
        if (part_fd >= 0 && (fstat(part_fd, &st) < 0 || (uint64_t)st.st_size != obj.size)) {
            close(part_fd);
            part_fd = -1;
        }
        if (part_fd >= 0) {
            CHECK(dlc__warm_journal_open(p->journal, &jid, done, nchunks, &resumed_chunks,
                                         &journal_fd));
            if (resumed_chunks > 0)
                dlc__logf(opt.log, opt.log_user, DLC_LOG_INFO,
                          "%s: resuming: %" PRIu64 " of %" PRIu64 " chunks are already here", dest,
                          resumed_chunks, nchunks);
        } else {
            CHECK(open_part(p, obj.size, &part_fd));
            CHECK(dlc__warm_journal_open(p->journal, &jid, done, nchunks, &resumed_chunks,
                                         &journal_fd));
        }
    } else {
        CHECK(open_part(p, obj.size, &part_fd));
    }
    r.resumed = resumed_chunks > 0;

    dlc__warm_fetch_job job = {.src = &src,
                               .opt = &opt,
                               .obj = &obj,
                               .fd = part_fd,
                               .part_path = p->part,
                               .journal_fd = journal_fd,
                               .journal_path = p->journal,
                               .jid = &jid,
                               .chunk_size = chunk,
                               .nchunks = nchunks,
                               .done = done,
                               .done_bytes = 0,
                               .t0 = t0};
    for (uint64_t c = 0; c < nchunks; c++)
        if (done[c])
            job.done_bytes += (c + 1 == nchunks) ? obj.size - c * chunk : chunk;
    rc = dlc__warm_fetch(&job);
    r.bytes_downloaded = job.downloaded;
    r.chunks_fetched = job.chunks_fetched;
    r.retries += job.retries;
    if (rc < 0) {
        /* A full disk or an unresumable download leaves nothing worth
         * keeping; anything else is kept for the rerun. */
        if (rc == -ENOSPC || rc == -EDQUOT || !resumable) {
            unlink(p->part);
            unlink(p->journal);
        }
        goto fail;
    }

    struct stat st;
    FAIL_IF(fstat(part_fd, &st) < 0, -errno, "%s: stat: %s", p->part, strerror(errno));
    FAIL_IF((uint64_t)st.st_size != obj.size, DLC_ECORRUPT,
            "%s: is %lld bytes after the download, the object has %" PRIu64, p->part,
            (long long)st.st_size, obj.size);
    if (!(opt.flags & DLC_WARM_NO_VERIFY)) {
        FAIL_IF(fdatasync(part_fd) < 0, -errno, "%s: fdatasync: %s", p->part, strerror(errno));
        verify_ctx v = {.opt = &opt, .size = obj.size, .downloaded = job.downloaded, .t0 = t0};
        const double tv = dlc__now_s();
        rc = verify_store(p->part, &src, &v);
        r.verify_seconds = dlc__now_s() - tv;
        if (rc == DLC_ECORRUPT) {
            /* Bad bytes: the rerun must fetch them again, not trust them. */
            unlink(p->part);
            unlink(p->journal);
        }
        if (rc < 0)
            goto fail;
        r.verified = 1;
    }
    CHECK(publish(dest, p, part_fd, &src, &obj));

done:
    r.seconds = dlc__now_s() - t0;
    if (opt.progress) {
        dlc_warm_progress pr = {.total = r.bytes,
                                .done = r.bytes,
                                .downloaded = r.bytes_downloaded,
                                .seconds = r.seconds,
                                .verifying = 0};
        opt.progress(opt.progress_user, &pr);
    }
    rc = DLC_OK;
fail:
    if (rc < 0)
        r.seconds = dlc__now_s() - t0;
    /* A full disk leaves nothing worth keeping wherever it struck (the journal's header, the
     * sync before publishing), not only during the fetch: the partial file would hold on to the
     * space the user must free. part_fd >= 0 means this call holds the lock and made the part
     * (found by tests/e2e/fault_warm.sh: ENOSPC on the journal header left both behind). */
    if ((rc == -ENOSPC || rc == -EDQUOT) && part_fd >= 0) {
        unlink(p->part);
        unlink(p->journal);
    }
    if (part_fd >= 0)
        close(part_fd);
    if (journal_fd >= 0)
        close(journal_fd);
    /* Closing the lock file releases the lock: the next rank goes on. */
    if (lock_fd >= 0)
        close(lock_fd);
    free(done);
    free(p);
    dlc__warm_source_free(&src);
    if (curl_inited)
        curl_global_cleanup();
    if (res)
        *res = r;
    return rc;
}
