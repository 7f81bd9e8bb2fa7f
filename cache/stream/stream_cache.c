/* The shard cache's calls (stream_cache.h): open (the index), the schedule, acquire and release,
 * and the background threads that download along the schedule. A download is the warm part's:
 * a probe and the ranged GETs of dlc__warm_fetch() on its transfer engine, into a temporary file
 * that stream_disk.c reserved under the cache-wide lock; the file is checked against the index
 * (size, content digest, set position) and every record's checksum before it is published. */
#include "common.h"
#include "stream_internal.h"
#include "warm_internal.h"

#include <dlcache/store.h>

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* How often a waiter looks again at what other processes may have done (published a shard it
 * waits for, freed space, died): they cannot signal our condition variable. */
#define POLL_S 0.05
/* How long a worker with nothing it may do waits before looking again. */
#define IDLE_S 0.25
/* How long a shard an acquire waits for may find no room, while nothing in the folder moves,
 * before the acquire is refused: the space is held by the pins of processes that wait too (two
 * jobs sharing a folder whose limit was planned for one), which no wait resolves. */
#define STUCK_S 10.0
/* The buffer every object's URL is built in; dlc__scache_open() refuses a set URL too long for it.
 */
#define URL_CAP 4300u

static void wait_for(dlc__scache *c, double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const long ns = ts.tv_nsec + (long)(seconds * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

/* ---- Invariants (asserted: they are ours, never the caller's or the files') ------------------ */

/* Shard @p k's state (mu held): a pinned shard has its file open with the shared lock. */
static void assert_shard(const dlc__scache *c, uint32_t k)
{
    assert(k < c->x.num_shards);
    assert(c->pins[k] == 0 || c->pin_fd[k] >= 0);
    (void)c, (void)k;
}

/* The whole state (mu held): pinned_bytes is the sum over the open pins. O(shards): at close. */
static void assert_state(const dlc__scache *c)
{
    uint64_t pinned = 0;
    for (uint32_t k = 0; k < c->x.num_shards; k++) {
        assert_shard(c, k);
        if (c->pin_fd[k] >= 0)
            pinned += dlc__scache_round(c->x.shards[k].file_bytes);
    }
    assert(pinned == c->pinned_bytes);
    assert(c->reserving <= c->nthreads);
    (void)pinned;
}

/* ---- Downloads ---------------------------------------------------------------------------- */

static int on_progress(void *user, const dlc_warm_progress *p)
{
    dlc__scache *c = user;
    pthread_mutex_lock(&c->mu);
    const int stop = c->stop;
    pthread_mutex_unlock(&c->mu);
    /* Cancel hook (issue 23, item 6): the caller's own callback may stop a download too. */
    if (!stop && c->user_progress)
        return c->user_progress(c->user_progress_user, p) != 0;
    return stop;
}

int dlc__scache_canceled(dlc__scache *c)
{
    dlc_warm_progress p;
    memset(&p, 0, sizeof p);
    return on_progress(c, &p);
}

double dlc__scache_lock_timeout(const dlc__scache *c)
{
    return c->net.timeout_s > 0 ? c->net.timeout_s : 30.0;
}

double dlc__scache_elsewhere_timeout(const dlc__scache *c)
{
    return dlc__scache_lock_timeout(c) * ((double)c->net.max_retries + 1.0);
}

/* Ask the server about the object of @p src (its size, ETag, push metadata). Counts requests. */
static dlc_status probe_object(dlc__scache *c, const dlc__warm_source *src, dlc__warm_object *obj)
{
    uint32_t retries = 0;
    const dlc_status rc = dlc__warm_probe(src, &c->net, obj, &retries);
    pthread_mutex_lock(&c->mu);
    c->st.requests += 1 + retries;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Fetch the object @p obj of @p src (@p shown: its URL as the user gave it, redacted) into @p fd
 * (@p fd_name, for messages), on the warm part's engine, and check its bytes against the MD5 the
 * server holds for them (the check dlc_warm() runs: dlc__warm_check_md5()). Counts requests and
 * bytes. */
static dlc_status fetch_into(dlc__scache *c, const dlc__warm_source *src,
                             const dlc__warm_object *obj, int fd, const char *fd_name,
                             const char *shown)
{
    dlc__warm_ranges have;
    memset(&have, 0, sizeof have);
    dlc__warm_fetch_job job = {.src = src,
                               .opt = &c->net,
                               .obj = obj,
                               .fd = fd,
                               .part_path = fd_name,
                               .journal_fd = -1,
                               .chunk_size = c->net.chunk_size,
                               .have = &have,
                               .t0 = dlc__now_s()};
    dlc_status rc = dlc__warm_fetch(&job);
    pthread_mutex_lock(&c->mu);
    c->st.requests += job.chunks_fetched + job.retries;
    c->st.bytes_fetched += job.downloaded;
    pthread_mutex_unlock(&c->mu);
    if (rc == DLC_OK)
        rc = dlc__warm_check_md5(obj, fd, fd_name, shown, NULL);
    return rc;
}

/* Probe shard @p k's object once per open (the answer is kept in probed[k] for its download and
 * the retries of its reservation): its size must be the index's before a byte is reserved or a
 * shard evicted for it, so that an index lying about a size costs nothing but the refusal. Only
 * the worker downloading @p k (DLC__SC_FETCHING) touches probed[k]. */
static dlc_status probe_shard(dlc__scache *c, uint32_t k, const dlc__warm_source *src,
                              const char *shown)
{
    if (c->probed[k])
        return DLC_OK;
    dlc__warm_object *obj = calloc(1, sizeof *obj);
    if (!obj)
        return dlc__errorf(-ENOMEM, "stream cache: out of memory");
    dlc_status rc = probe_object(c, src, obj);
    const uint64_t size = c->x.shards[k].file_bytes;
    if (rc == DLC_OK && obj->size != size)
        rc = dlc__errorf(DLC_ECORRUPT,
                         "%s: shard %u (%s): %" PRIu64 " bytes on the server, the set's index "
                         "says %" PRIu64 ": the bucket's shard is not the one the index names; "
                         "refused before anything was reserved or evicted for it",
                         shown, k, c->x.shards[k].name, obj->size, size);
    if (rc < 0) {
        free(obj);
        return rc;
    }
    c->probed[k] = obj;
    return DLC_OK;
}

/* The downloaded file @p tmp is shard @p k of the index: size, content digest, its set position
 * and every record's checksum. */
static dlc_status check_shard(dlc__scache *c, uint32_t k, const char *tmp, const char *url)
{
    const dlc__set_shard *e = &c->x.shards[k];
    dlc_store *s = NULL;
    dlc_status rc = dlc_store_open(tmp, DLC_STORE_SEQUENTIAL, &s);
    if (rc < 0) {
        char detail[1024];
        snprintf(detail, sizeof detail, "%s", dlc_errmsg());
        return dlc__errorf(rc == DLC_EVERSION ? DLC_ECORRUPT : rc,
                           "%s: shard %u (%s) is not a valid store: %s; refused", url, k, e->name,
                           detail);
    }
    const dlc_store_info *info = dlc_store_get_info(s);
    const void *v = NULL;
    size_t n = 0;
    dlc__set_part part;
    FAIL_IF(info->file_bytes != e->file_bytes || info->content_digest != e->content_digest,
            DLC_ECORRUPT,
            "%s: shard %u (%s): %" PRIu64 " bytes with content digest %016" PRIx64
            ", the set's index says %" PRIu64 " bytes and %016" PRIx64 ": refused",
            url, k, e->name, info->file_bytes, info->content_digest, e->file_bytes,
            e->content_digest);
    FAIL_IF(info->count != e->count, DLC_ECORRUPT,
            "%s: shard %u (%s) holds %" PRIu64 " records, the set's index says %" PRIu64
            " (first record %" PRIu64 "): the index does not describe the bucket's shard; refused",
            url, k, e->name, info->count, e->count, e->first);
    FAIL_IF(dlc_store_meta(s, DLC__META_SET_PART, &v, &n) != DLC_OK, DLC_ECORRUPT,
            "%s: shard %u (%s) is not a part of a set: refused", url, k, e->name);
    CHECK(dlc__set_part_decode(v, n, url, &part));
    FAIL_IF(part.part != k || part.parts != c->x.num_shards || part.set_id != c->x.set_id,
            DLC_ECORRUPT,
            "%s: shard %u (%s) is part %u of %u of set %016" PRIx64
            ", the index wants part %u of %u of set %016" PRIx64 ": refused",
            url, k, e->name, part.part, part.parts, part.set_id, k, c->x.num_shards, c->x.set_id);
    uint64_t bad = 0;
    rc = dlc_store_verify(s, NULL, NULL, &bad);
    if (rc < 0) {
        char detail[1024];
        snprintf(detail, sizeof detail, "%s", dlc_errmsg());
        FAIL_IF(1, rc, "%s: shard %u (%s): %s; refused", url, k, e->name, detail);
    }
fail:
    dlc_store_close(s);
    return rc;
}

/* Download shard @p k (a waiter's when @p after is 0, else ahead of need) and publish it.
 * Returns a failure, DLC_OK (published), or an outcome of dlc__scache_reserve(). */
static dlc_status download(dlc__scache *c, uint32_t k, uint64_t after)
{
    const char *name = c->x.shards[k].name;
    char tmp[4300], tmp_name[DLC__SET_NAME_SIZE + 64], url[URL_CAP], shown[URL_CAP];
    snprintf(tmp_name, sizeof tmp_name, "%s.%ld" DLC__SCACHE_TMP, name, (long)getpid());
    snprintf(tmp, sizeof tmp, "%s/%s", c->set_dir, tmp_name);
    dlc__url_child(c->url, name, url, sizeof url);
    dlc__url_child(c->shown, name, shown, sizeof shown);
    int fd = -1;
    dlc__warm_source src;
    dlc_status rc = dlc__warm_source_init(&src, url, &c->net);
    if (rc == DLC_OK)
        rc = probe_shard(c, k, &src, shown);
    if (rc == DLC_OK)
        rc = dlc__scache_reserve(c, k, after, tmp_name, &fd);
    pthread_mutex_lock(&c->mu);
    assert(c->reserving > 0);
    c->reserving--;
    if (rc == DLC__SC_NO_ROOM && after > 0 && after - 1 < c->blocked_at)
        c->blocked_at = after - 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (rc == DLC_OK)
        rc = fetch_into(c, &src, c->probed[k], fd, tmp, shown);
    if (rc == DLC_OK && fdatasync(fd) < 0)
        rc = dlc__errorf(-errno, "%s: fdatasync: %s", tmp, strerror(errno));
    if (rc == DLC_OK)
        rc = check_shard(c, k, tmp, shown);
    dlc__warm_source_free(&src); /* Also after a failed init. */
    if (rc < 0) {
        /* The object may change before the next try: probe it again then. */
        free(c->probed[k]);
        c->probed[k] = NULL;
        if (fd >= 0) {
            /* Nothing of a failed download is kept: we hold its lock, so nobody else uses it. */
            unlinkat(c->set_fd, tmp_name, 0);
            close(fd);
        }
        return rc;
    }
    if (rc != DLC_OK)
        return rc;
    rc = dlc__scache_publish(c, k, tmp_name, fd);
    dlc__scache_log(c, DLC_LOG_DEBUG, "%s: published (%s)", c->paths[k],
                    after ? "ahead of need" : "an acquire waited for it");
    if (rc == DLC_OK) {
        pthread_mutex_lock(&c->mu);
        c->st.downloads++;
        pthread_mutex_unlock(&c->mu);
    }
    return rc;
}

/* ---- The background threads --------------------------------------------------------------- */

static int may_fetch(const dlc__scache *c, uint32_t k)
{
    return !(c->flags[k] &
             (DLC__SC_FETCHING | DLC__SC_ELSEWHERE | DLC__SC_FAILED | DLC__SC_PRESENT)) &&
           c->pin_fd[k] < 0;
}

/* Ahead of need: a shard whose download failed (refused as damaged, or given up) is not fetched
 * again until an acquire asks. */
static int may_fetch_ahead(const dlc__scache *c, uint32_t k)
{
    return may_fetch(c, k) && !(c->flags[k] & DLC__SC_REFUSED);
}

/* The next shard to download (mu held): one an acquire waits for, else the first along the
 * schedule that is not there. *after is what it may evict (see dlc__scache_pick_victim()). */
static int pick(const dlc__scache *c, uint32_t *k, uint64_t *after)
{
    for (uint32_t i = 0; i < c->x.num_shards; i++) {
        if (c->want[i] > 0 && may_fetch(c, i)) {
            *k = i;
            *after = 0;
            return 1;
        }
    }
    const dlc__scache_plan *p = &c->plan;
    for (size_t i = p->cursor; i < p->n; i++) {
        const uint32_t j = p->sched[i];
        /* The entry that is its shard's next use; later ones repeat it. */
        if (p->consumed[i] || p->head[j] != i)
            continue;
        /* Room goes to the shards in the order they are needed: nothing later is reserved
         * while an earlier one is reserving (it might take the space the earlier one needs)
         * or found no room. */
        if (i >= c->blocked_at || c->reserving > 0)
            return 0;
        if (may_fetch_ahead(c, j)) {
            *k = j;
            *after = i + 1;
            return 1;
        }
    }
    return 0;
}

static void record_failure(dlc__scache *c, uint32_t k, dlc_status rc)
{
    c->flags[k] |= DLC__SC_FAILED;
    c->err_rc[k] = rc;
    free(c->err_msg[k]);
    c->err_msg[k] = strdup(dlc_errmsg());
}

/* A shard an acquire waits for found no room: is that for good? It is when it cannot fit beside
 * the index and the shards this process pins, which only the caller can release. */
static int never_fits(const dlc__scache *c, uint32_t k)
{
    const uint64_t need = dlc__scache_round(c->x.shards[k].file_bytes);
    return c->limit && need + c->index_bytes + c->pinned_bytes > c->limit;
}

/* Of the processes stuck together on a full folder, one refuses and the others wait for its pins
 * to go: the first to take a write lock on byte 1 of the lock file (an open file description
 * lock, independent of the flock on the same file) is that one, and keeps it until it closes. A
 * lock file opened read-only cannot take it: such a process refuses. */
static int may_refuse(dlc__scache *c)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1, .l_len = 1};
    return fcntl(c->lock_fd, F_OFD_SETLK, &fl) == 0 || errno == EBADF;
}

static void *worker(void *arg)
{
    dlc__scache *c = arg;
    pthread_mutex_lock(&c->mu);
    const uint32_t id = c->next_thread++;
    while (!c->stop) {
        if (c->blocked_gen != c->gen)
            c->blocked_at = UINT64_MAX;
        uint32_t k = 0;
        uint64_t after = 0;
        if (!pick(c, &k, &after)) {
            const uint64_t gen = c->gen;
            wait_for(c, IDLE_S);
            /* Time passing is a change too: other processes may have freed space. */
            if (c->gen == gen)
                c->blocked_at = UINT64_MAX;
            continue;
        }
        c->flags[k] |= DLC__SC_FETCHING;
        c->reserving++;
        int blocked = 0;
        pthread_mutex_unlock(&c->mu);
        const uint64_t t0 = dlc__now_ns();
        const dlc_status rc = download(c, k, after);
        const uint64_t t1 = dlc__now_ns();
        pthread_mutex_lock(&c->mu);
        /* A download made (or failed), not an outcome of the reservation: the trace's span. */
        if (c->observe && rc <= DLC_OK && !(rc == DLC_ECANCELED && c->stop))
            c->observe(c->observe_user, id, k, rc == DLC_OK ? c->x.shards[k].file_bytes : 0,
                       after > 0, rc, t0, t1);
        assert(c->flags[k] & DLC__SC_FETCHING);
        c->flags[k] &= (uint8_t)~DLC__SC_FETCHING;
        assert_shard(c, k);
        if (rc == DLC_OK || rc == DLC__SC_IS_PRESENT) {
            c->stuck_since = 0;
            c->flags[k] |= DLC__SC_PRESENT;
            c->flags[k] &= (uint8_t)~DLC__SC_REFUSED;
        } else if (rc == DLC__SC_IS_ELSEWHERE) {
            c->flags[k] |= DLC__SC_ELSEWHERE;
        } else if (rc == DLC__SC_NO_ROOM) {
            if (after == 0 && never_fits(c, k)) {
                dlc__errorf(DLC_ESTATE,
                            "%s: shard %u (%s) needs %" PRIu64 " bytes, which do not fit in the "
                            "cache's limit of %" PRIu64 " bytes beside the index (%" PRIu64
                            ") and the %" PRIu64 " bytes of shards this process has pinned",
                            c->dir, k, c->x.shards[k].name,
                            dlc__scache_round(c->x.shards[k].file_bytes), c->limit, c->index_bytes,
                            c->pinned_bytes);
                record_failure(c, k, DLC_ESTATE);
            } else if (after > 0) {
                blocked = 1; /* download() set blocked_at. */
            } else {
                /* Other processes' pins or downloads hold the space: look again soon, unless
                 * nothing has moved in the folder for STUCK_S (they wait for room too). */
                const double now = dlc__now_s();
                if (c->stuck_since == 0 || c->seen_usage != c->stuck_usage) {
                    c->stuck_since = now;
                    c->stuck_usage = c->seen_usage;
                }
                if (now - c->stuck_since >= STUCK_S && !may_refuse(c)) {
                    /* Another process stuck with us is refusing: its pins go with it. */
                    c->stuck_since = now;
                    wait_for(c, POLL_S);
                } else if (now - c->stuck_since >= STUCK_S && c->limit == 0) {
                    /* No limit of the caller's: the disk is what is full, not a limit planned
                     * for fewer processes (so not EDEADLK, which the loader explains so). */
                    dlc__errorf(-ENOSPC,
                                "%s: shard %u (%s) needs %" PRIu64 " bytes, and for %.0f s the "
                                "disk holding the cache has had too little free: %" PRIu64
                                " bytes, less a margin of %" PRIu64 " for the file system, while "
                                "the cache's folder holds %" PRIu64 " bytes it cannot evict "
                                "(indexes, and shards in use: %" PRIu64 " bytes pinned by this "
                                "process): free space on that disk, "
                                "choose a larger one for cache_dir, or read with fewer "
                                "window_shards or streams (dlcache.plan() gives the bytes a "
                                "plan needs)",
                                c->dir, k, c->x.shards[k].name,
                                dlc__scache_round(c->x.shards[k].file_bytes), now - c->stuck_since,
                                c->disk_free, (uint64_t)DLC__SCACHE_FREE_MARGIN, c->seen_usage,
                                c->pinned_bytes);
                    record_failure(c, k, -ENOSPC);
                    c->stuck_since = 0;
                } else if (now - c->stuck_since >= STUCK_S) {
                    dlc__errorf(-EDEADLK,
                                "%s: shard %u (%s) needs %" PRIu64 " bytes, and for %.0f s the "
                                "cache's limit of %" PRIu64 " bytes has been full (%" PRIu64
                                " bytes, %" PRIu64 " of them pinned by this process): the rest "
                                "is pinned by other processes sharing the folder, which wait "
                                "for room too; the limit was planned for fewer processes than "
                                "share it",
                                c->dir, k, c->x.shards[k].name,
                                dlc__scache_round(c->x.shards[k].file_bytes), now - c->stuck_since,
                                c->limit, c->seen_usage, c->pinned_bytes);
                    record_failure(c, k, -EDEADLK);
                    c->stuck_since = 0;
                } else {
                    wait_for(c, POLL_S);
                }
            }
        } else if (rc == DLC_ECANCELED && c->stop) {
            /* Closing. */
        } else if (rc < 0) {
            record_failure(c, k, rc);
            /* Not fetched ahead again, damaged or given up: the acquire waiting for it clears
             * FAILED once it has the failure, and a fetch ahead would then start the download
             * again before the caller has even seen it, past the attempts the caller allowed
             * (e2e_net_hostile: 10 requests where 9 are the most). An acquire still fetches it. */
            c->flags[k] |= DLC__SC_REFUSED;
            dlc__scache_log(c, DLC_LOG_WARN, "%s", c->err_msg[k] ? c->err_msg[k] : "");
        }
        c->gen++;
        /* Our own change does not unblock us; the next one may. */
        if (blocked)
            c->blocked_gen = c->gen;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- The calls ---------------------------------------------------------------------------- */

const dlc__set_index *dlc__scache_index(const dlc__scache *c)
{
    return &c->x;
}

const uint8_t *dlc__scache_index_bytes(const dlc__scache *c, size_t *len)
{
    *len = c->index_len;
    return c->index_buf;
}

const char *dlc__scache_set_dir(const dlc__scache *c)
{
    return c->set_dir;
}

dlc_status dlc__scache_schedule(dlc__scache *c, const uint32_t *shards, size_t n)
{
    if (!c || (!shards && n > 0))
        return dlc__errorf(DLC_EINVAL, "dlc__scache_schedule: NULL argument");
    for (size_t i = 0; i < n; i++)
        if (shards[i] >= c->x.num_shards)
            return dlc__errorf(DLC_EINVAL,
                               "%s: the schedule names shard %u at entry %zu; the set has %u",
                               c->shown, shards[i], i, c->x.num_shards);
    pthread_mutex_lock(&c->mu);
    const dlc_status rc = dlc__scache_plan_set(&c->plan, c->x.num_shards, shards, n);
    c->gen++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Has shard @p k's download by another process stopped moving (mu held)? It has when the scans
 * have seen its temporary file unchanged for dlc__scache_elsewhere_timeout() and a look now finds
 * it unchanged too (the scans run when a download thread reserves, which may be long after). */
static int elsewhere_stalled(dlc__scache *c, uint32_t k, const char *name)
{
    if (c->tmp_since[k] <= 0)
        return 0;
    const double now = dlc__now_s();
    if (now - c->tmp_since[k] < dlc__scache_elsewhere_timeout(c))
        return 0;
    struct stat st;
    if (fstatat(c->set_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        dlc__scache_tmp_sig(&st) != c->tmp_sig[k]) {
        c->tmp_sig[k] = dlc__scache_tmp_sig(&st);
        c->tmp_since[k] = now;
        return 0;
    }
    return 1;
}

/* Shard @p k's download by another process has not moved for dlc__scache_elsewhere_timeout()
 * (mu held): its temporary file @p name is locked by a process that does not write it (stopped
 * with Ctrl-Z, or one that only took the lock). The error names the file and its holder. */
static dlc_status elsewhere_stuck(dlc__scache *c, uint32_t k, const char *name)
{
    char holder[128] = "an unknown process";
    const int fd = openat(c->set_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd >= 0) {
        dlc__lock_holder(fd, holder, sizeof holder);
        close(fd);
    }
    return dlc__errorf(-ETIMEDOUT,
                       "%s/%s: shard %u is being downloaded by %s (it holds the file's lock), "
                       "and the file has not changed for %.0f s (timeout x (retries + 1)); gave "
                       "up waiting for it: a download that does not move (a process stopped "
                       "with Ctrl-Z, or one that only holds the lock) keeps the shard from "
                       "every cache sharing %s; end that process (the file goes with it)",
                       c->set_dir, name, k, holder, dlc__now_s() - c->tmp_since[k], c->dir);
}

dlc_status dlc__scache_acquire(dlc__scache *c, uint32_t k, const char **path)
{
    if (!c || !path)
        return dlc__errorf(DLC_EINVAL, "dlc__scache_acquire: NULL argument");
    if (k >= c->x.num_shards)
        return dlc__errorf(DLC_EINVAL, "%s: shard %u: the set has %u", c->shown, k,
                           c->x.num_shards);
    const double t0 = dlc__now_s();
    dlc_status rc = DLC_OK;
    int waited = 0, failed = 0;
    pthread_mutex_lock(&c->mu);
    dlc__scache_plan_consume(&c->plan, k);
    /* From here until the pin, want keeps the shard from eviction (rank_cands()). */
    c->want[k]++;
    c->gen++;
    for (;;) {
        if (c->pin_fd[k] >= 0)
            break;
        if (c->flags[k] & DLC__SC_FAILED) {
            /* Every acquire waiting for the shard gets the failure, not only the first to wake:
             * were the flag cleared here, a worker would start the download again for those
             * still waiting, past the attempts the caller allowed. The last one out clears it
             * (below), and the next acquire then tries afresh. */
            failed = 1;
            rc = dlc__errorf(c->err_rc[k], "%s", c->err_msg[k] ? c->err_msg[k] : "");
            break;
        }
        if (c->stop) {
            rc = dlc__errorf(DLC_ECANCELED, "%s: the cache is closing", c->shown);
            break;
        }
        pthread_mutex_unlock(&c->mu);
        int fd = -1;
        rc = dlc__scache_try_pin(c, k, &fd);
        /* Ctrl-C (the caller's progress callback) ends the wait too, not only close(). */
        const int canceled = rc == DLC_OK && dlc__scache_canceled(c);
        pthread_mutex_lock(&c->mu);
        if (rc < 0 || c->pin_fd[k] >= 0)
            break;
        if (canceled) {
            rc = dlc__errorf(DLC_ECANCELED, "%s: waiting for shard %u (%s): canceled", c->shown, k,
                             c->x.shards[k].name);
            break;
        }
        char tmp_name[DLC__SET_NAME_SIZE + 64];
        snprintf(tmp_name, sizeof tmp_name, "%s.%ld" DLC__SCACHE_TMP, c->x.shards[k].name,
                 c->tmp_pid[k]);
        if (elsewhere_stalled(c, k, tmp_name)) {
            rc = elsewhere_stuck(c, k, tmp_name);
            break;
        }
        /* A download elsewhere that we saw may have ended (or died): let a worker look again. */
        c->flags[k] &= (uint8_t)~DLC__SC_ELSEWHERE;
        waited = 1;
        c->gen++;
        pthread_cond_broadcast(&c->cv);
        wait_for(c, POLL_S);
    }
    assert(c->want[k] > 0);
    c->want[k]--;
    if (failed && c->want[k] == 0)
        c->flags[k] &= (uint8_t)~DLC__SC_FAILED;
    if (rc == DLC_OK) {
        assert(c->pin_fd[k] >= 0);
        c->pins[k]++;
        *path = c->paths[k];
        if (waited) {
            c->st.misses++;
            c->st.stall_s += dlc__now_s() - t0;
        } else {
            c->st.hits++;
        }
    } else if (c->pins[k] == 0 && c->want[k] == 0 && c->pin_fd[k] >= 0) {
        /* A pin a worker took for us while we gave up. */
        close(c->pin_fd[k]);
        c->pin_fd[k] = -1;
        assert(c->pinned_bytes >= dlc__scache_round(c->x.shards[k].file_bytes));
        c->pinned_bytes -= dlc__scache_round(c->x.shards[k].file_bytes);
    }
    assert_shard(c, k);
    c->gen++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void dlc__scache_release(dlc__scache *c, uint32_t k)
{
    if (!c || k >= c->x.num_shards)
        return;
    pthread_mutex_lock(&c->mu);
    if (c->pins[k] > 0 && --c->pins[k] == 0 && c->want[k] == 0 && c->pin_fd[k] >= 0) {
        /* The shared lock goes with the close: the shard may be evicted from now on. */
        close(c->pin_fd[k]);
        c->pin_fd[k] = -1;
        assert(c->pinned_bytes >= dlc__scache_round(c->x.shards[k].file_bytes));
        c->pinned_bytes -= dlc__scache_round(c->x.shards[k].file_bytes);
        c->gen++;
        pthread_cond_broadcast(&c->cv);
    }
    assert_shard(c, k);
    pthread_mutex_unlock(&c->mu);
}

void dlc__scache_stats_get(const dlc__scache *c, dlc__scache_stats *st)
{
    dlc__scache *m = (dlc__scache *)c; /* The lock is not part of the value. */
    pthread_mutex_lock(&m->mu);
    *st = c->st;
    pthread_mutex_unlock(&m->mu);
}

/* ---- Open and close ----------------------------------------------------------------------- */

/* Fetch URL/index.dlcset into memory (an anonymous file the engine writes into) and decode it.
 * Its size is checked before a byte of it is fetched, its bytes against the server's MD5. */
static dlc_status fetch_index(dlc__scache *c, uint8_t **buf, size_t *len)
{
    char url[URL_CAP];
    dlc__url_child(c->url, DLC__SET_INDEX_NAME, url, sizeof url);
    char shown[URL_CAP];
    dlc__url_child(c->shown, DLC__SET_INDEX_NAME, shown, sizeof shown);
    const int fd = memfd_create("dlcache-index", MFD_CLOEXEC);
    if (fd < 0)
        return dlc__errorf(-errno, "memfd_create: %s", strerror(errno));
    dlc__warm_source src;
    dlc__warm_object obj;
    uint8_t *b = NULL;
    dlc_status rc = dlc__warm_source_init(&src, url, &c->net);
    if (rc == DLC_OK)
        rc = probe_object(c, &src, &obj);
    if (rc == DLC_OK && obj.size > DLC__SET_MAX_INDEX_BYTES)
        rc = dlc__errorf(DLC_ECORRUPT, "%s: %" PRIu64 " bytes, larger than any set index", shown,
                         obj.size);
    if (rc == DLC_OK && ftruncate(fd, (off_t)obj.size) < 0)
        rc = dlc__errorf(-errno, "%s: truncate: %s", shown, strerror(errno));
    if (rc == DLC_OK)
        rc = fetch_into(c, &src, &obj, fd, shown, shown);
    if (rc == DLC_OK) {
        b = malloc(obj.size ? obj.size : 1);
        if (!b)
            rc = dlc__errorf(-ENOMEM, "%s: out of memory", shown);
    }
    if (rc == DLC_OK && pread(fd, b, obj.size, 0) != (ssize_t)obj.size)
        rc = dlc__errorf(DLC_ECORRUPT, "%s: short read of the fetched index", shown);
    if (rc == DLC_OK)
        rc = dlc__set_index_decode(b, obj.size, shown, &c->x);
    close(fd);
    dlc__warm_source_free(&src); /* Also after a failed init. */
    if (rc < 0) {
        free(b);
        return rc;
    }
    *buf = b;
    *len = obj.size;
    return DLC_OK;
}

dlc_status dlc__scache_net_take(const dlc_warm_options **net, dlc_warm_options *copy,
                                const char *what)
{
    if (!*net)
        return DLC_OK;
    dlc_warm_options_init(copy);
    const dlc_status rc =
        dlc__options_take(copy, sizeof *copy, *net, what, "dlc_warm_options_init");
    if (rc == DLC_OK)
        *net = copy;
    return rc;
}

static dlc_status copy_config(dlc__scache *c, const dlc__scache_config *cfg)
{
    /* The caller's net options are checked and taken at their own struct_size, like any options
     * (status.h): a whole copy would read past an older caller's smaller struct. */
    dlc_warm_options_init(&c->net);
    if (cfg->net) {
        const dlc_status rc = dlc__options_take(&c->net, sizeof c->net, cfg->net,
                                                "dlc_loader_config.net", "dlc_warm_options_init");
        if (rc != DLC_OK)
            return rc;
    }
    if (c->net.connections == 0)
        c->net.connections = DLC__WARM_DEFAULT_CONNECTIONS;
    if (c->net.chunk_size == 0)
        c->net.chunk_size = DLC__WARM_DEFAULT_CHUNK;
    if (c->net.chunk_size < DLC__WARM_MIN_CHUNK || c->net.connections > DLC__WARM_MAX_CONNECTIONS)
        return dlc__errorf(DLC_EINVAL, "stream cache: chunk size or connections out of range");
    const dlc_status checked = dlc__warm_check_net(&c->net, "dlc_loader_config.net");
    if (checked < 0)
        return checked;
    c->user_progress = c->net.progress;
    c->user_progress_user = c->net.progress_user;
    c->net.progress = on_progress;
    c->net.progress_user = c;
    c->endpoint = c->net.endpoint ? strdup(c->net.endpoint) : NULL;
    c->region = c->net.region ? strdup(c->net.region) : NULL;
    c->net.endpoint = c->endpoint;
    c->net.region = c->region;
    size_t n = strlen(cfg->url);
    while (n > 0 && cfg->url[n - 1] == '/')
        n--;
    c->url = strndup(cfg->url, n);
    c->dir = strdup(cfg->dir);
    c->shown = malloc(n + 64);
    c->lock_path = dlc__set_path(cfg->dir, "/", DLC__SCACHE_LOCK);
    if (!c->url || !c->dir || !c->shown || !c->lock_path ||
        (cfg->net && cfg->net->endpoint && !c->endpoint) ||
        (cfg->net && cfg->net->region && !c->region))
        return dlc__errorf(-ENOMEM, "stream cache: out of memory");
    dlc_warm_redact_url(c->url, c->shown, n + 64);
    /* Every object's URL is built in a buffer of URL_CAP (dlc__url_child()): refused here, a
     * longer one cannot be cut short there into the URL of some other object. */
    if (n + DLC__SET_NAME_SIZE + 2 > URL_CAP)
        return dlc__errorf(DLC_EINVAL, "%s: a URL of %zu bytes; the longest a stream reads is %u",
                           c->shown, n, URL_CAP - DLC__SET_NAME_SIZE - 2);
    c->limit = cfg->limit;
    return DLC_OK;
}

/* The per-shard state and paths, once the index is known. */
static dlc_status make_state(dlc__scache *c)
{
    const uint32_t n = c->x.num_shards;
    const size_t m = n ? n : 1;
    c->paths = calloc(m, sizeof *c->paths);
    c->flags = calloc(m, 1);
    c->seen_tmp = calloc(m, 1);
    c->pins = calloc(m, sizeof *c->pins);
    c->pin_fd = malloc(m * sizeof *c->pin_fd);
    c->want = calloc(m, sizeof *c->want);
    c->err_rc = calloc(m, sizeof *c->err_rc);
    c->err_msg = calloc(m, sizeof *c->err_msg);
    c->probed = calloc(m, sizeof *c->probed);
    c->tmp_pid = calloc(m, sizeof *c->tmp_pid);
    c->tmp_sig = calloc(m, sizeof *c->tmp_sig);
    c->tmp_since = calloc(m, sizeof *c->tmp_since);
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, c->x.set_id);
    c->set_dir = dlc__set_path(c->dir, "/", hex);
    if (!c->paths || !c->flags || !c->seen_tmp || !c->pins || !c->pin_fd || !c->want ||
        !c->err_rc || !c->err_msg || !c->probed || !c->set_dir || !c->tmp_pid || !c->tmp_sig ||
        !c->tmp_since)
        return dlc__errorf(-ENOMEM, "stream cache: out of memory");
    for (uint32_t k = 0; k < n; k++) {
        c->pin_fd[k] = -1;
        c->paths[k] = dlc__set_path(c->set_dir, "/", c->x.shards[k].name);
        if (!c->paths[k])
            return dlc__errorf(-ENOMEM, "stream cache: out of memory");
    }
    return dlc__scache_names_make(&c->x, &c->names);
}

/* A shard name from the index that the cache can hold without a collision or a hiding place:
 * not hidden (the scan skips dot files, so such a shard would never be counted or evicted), not
 * the index's name, not a temporary file's (NAME.PID.dlcs-tmp) nor the lock's. The index's own
 * rules (1 to 63 characters of [A-Za-z0-9._-], never "." or "..") were checked at decode. */
static dlc_status check_names(const dlc__scache *c)
{
    const size_t tl = strlen(DLC__SCACHE_TMP);
    for (uint32_t k = 0; k < c->x.num_shards; k++) {
        const char *name = c->x.shards[k].name;
        const size_t n = strlen(name);
        const char *why = NULL;
        if (name[0] == '.')
            why = "it starts with '.', which the cache's scan skips (it would be neither "
                  "counted nor evicted)";
        else if (strcmp(name, DLC__SET_INDEX_NAME) == 0)
            why = "it is the name of the set's index";
        else if (n >= tl && strcmp(name + n - tl, DLC__SCACHE_TMP) == 0)
            why = "it ends like the cache's temporary files (" DLC__SCACHE_TMP ")";
        if (why)
            return dlc__errorf(DLC_ECORRUPT,
                               "%s: the set's index names shard %u \"%s\": %s; the set is refused",
                               c->shown, k, name, why);
    }
    return DLC_OK;
}

/* The bytes of the file system that holds @p dir (or, for a folder not made yet, its nearest
 * existing parent); 0 when none can be asked (a path too long to ask is one). */
static uint64_t fs_bytes(const char *dir)
{
    char p[4096];
    /* Cut short, the path would name another folder, perhaps on another file system. */
    if ((size_t)snprintf(p, sizeof p, "%s", dir) >= sizeof p)
        return 0;
    struct statvfs sv;
    while (statvfs(p, &sv) != 0) {
        char *slash = strrchr(p, '/');
        if (errno != ENOENT || strcmp(p, "/") == 0 || strcmp(p, ".") == 0)
            return 0;
        if (!slash)
            snprintf(p, sizeof p, "."); /* "a" -> "." */
        else
            slash[slash == p] = '\0'; /* "/a" -> "/", "a/b" -> "a" */
    }
    return (uint64_t)sv.f_blocks * (sv.f_frsize ? sv.f_frsize : sv.f_bsize);
}

/* The index's sizes and counts, bounded before anything walks them (a plan walks every record):
 * the decoder bounds each shard's count by its size (a record header at least); here each size is
 * bounded by the cache folder's file system (a larger shard could never be downloaded; a cache
 * limit is check_limit()'s), and the set's records by DLC__SCACHE_MAX_RECORDS. So an index that
 * lies about both size and count is refused at once, naming the shard, instead of costing hours
 * of planning. */
static dlc_status check_sizes(const dlc__scache *c)
{
    const uint64_t room = fs_bytes(c->dir);
    uint64_t sum = 0;
    for (uint32_t k = 0; k < c->x.num_shards; k++) {
        const dlc__set_shard *e = &c->x.shards[k];
        if (room && e->file_bytes > room)
            return dlc__errorf(DLC_ECORRUPT,
                               "%s: the set's index says shard %u (%s) is %" PRIu64
                               " bytes, more than the file system of %s can ever hold (%" PRIu64
                               " bytes); the set is refused",
                               c->shown, k, e->name, e->file_bytes, c->dir, room);
        sum += e->count; /* No overflow: the decoder checked the sum. */
        if (sum > DLC__SCACHE_MAX_RECORDS)
            return dlc__errorf(DLC_ECORRUPT,
                               "%s: the set's index says %" PRIu64
                               " records up to shard %u (%s), more than the %" PRIu64
                               " a streamed set may hold; the set is refused",
                               c->shown, sum, k, e->name, (uint64_t)DLC__SCACHE_MAX_RECORDS);
    }
    return DLC_OK;
}

/* DIR, and its lock file, opened without following a link (one planted where the lock should be
 * is refused, naming it). A folder this process cannot write (others made it read-only: a shared
 * cache filled once) is read-only to the cache: nothing is created, removed or downloaded there,
 * only the shards already there are read. Its lock file is then opened read-only (flock() works
 * on it), or, where none was ever made, the folder's own flock serializes the readers: their pins
 * (shared flocks on the shards) keep a writer that comes later from evicting what they read. */
static dlc_status open_dir(dlc__scache *c)
{
    /* The cache folder itself is the caller's (cache_dir, trusted: it may well be a link such as
     * /scratch -> /nvme), so it is followed; everything inside it is ours and is reached through
     * this descriptor without following a link (docs/SECURITY.md). */
    c->dir_fd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (c->dir_fd < 0)
        return dlc__errorf(-errno, "%s: open: %s", c->dir, strerror(errno));
    int dir_lock = 0;
    c->lock_fd =
        openat(c->dir_fd, DLC__SCACHE_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (c->lock_fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM)) {
        /* A lock file of another user in a folder we may write is not a read-only folder. */
        c->read_only = faccessat(c->dir_fd, ".", W_OK, AT_EACCESS) != 0;
        /* O_NONBLOCK: a FIFO there would block this open until a writer came (it is refused
         * below, as one in a folder we may write is). */
        c->lock_fd =
            openat(c->dir_fd, DLC__SCACHE_LOCK, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (c->lock_fd < 0 && errno == ENOENT && c->read_only) {
            c->lock_fd = openat(c->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            dir_lock = 1;
        }
    }
    if (c->lock_fd < 0 && errno == ELOOP)
        return dlc__errorf(-ELOOP,
                           "%s: is a symbolic link: the cache's lock file must be its own; "
                           "refused (remove the link)",
                           c->lock_path);
    if (c->lock_fd < 0)
        return dlc__errorf(-errno, "%s: cannot create the lock file: %s", c->lock_path,
                           strerror(errno));
    struct stat st;
    if (fstat(c->lock_fd, &st) < 0 || !(dir_lock ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)))
        return dlc__errorf(DLC_EINVAL, "%s: not a regular file: refused", c->lock_path);
    if (c->read_only)
        dlc__scache_log(c, DLC_LOG_INFO,
                        "%s: read-only to this process: only the shards already there are read%s",
                        c->dir, dir_lock ? " (no lock file: the folder's own lock is used)" : "");
    return DLC_OK;
}

/* DIR/SETID, made if missing and opened relative to DIR without following a link; a link (or
 * anything but a regular file) where the index or a shard of ours should be is refused, naming
 * it: the cache never reads, writes, locks or removes through a link. */
static dlc_status open_set_dir(dlc__scache *c)
{
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, c->x.set_id);
    if (mkdirat(c->dir_fd, hex, 0755) < 0 && errno != EEXIST && errno != EACCES && errno != EROFS)
        return dlc__errorf(-errno, "%s: mkdir: %s", c->set_dir, strerror(errno));
    c->set_fd = openat(c->dir_fd, hex, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (c->set_fd < 0 && (errno == ELOOP || errno == ENOTDIR))
        return dlc__errorf(-ELOOP,
                           "%s: is a symbolic link or not a directory: the cache's folder of the "
                           "set must be its own; refused (remove it)",
                           c->set_dir);
    if (c->set_fd < 0 && errno == ENOENT && c->read_only)
        return dlc__errorf(-ENOENT,
                           "%s: the cache folder is read-only to this process and holds no copy "
                           "of %s (%s is missing): a read-only cache must be filled first by a "
                           "process that can write it",
                           c->dir, c->shown, c->set_dir);
    if (c->set_fd < 0)
        return dlc__errorf(-errno, "%s: open: %s", c->set_dir, strerror(errno));
    for (uint32_t k = 0; k <= c->x.num_shards; k++) {
        const char *name = k < c->x.num_shards ? c->x.shards[k].name : DLC__SET_INDEX_NAME;
        struct stat st;
        if (fstatat(c->set_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
            return dlc__errorf(
                -ELOOP, "%s/%s: is %s, not a file the cache wrote; refused (remove it)", c->set_dir,
                name, S_ISLNK(st.st_mode) ? "a symbolic link" : "not a regular file");
    }
    return DLC_OK;
}

/* The limit must hold the index and the largest shard. */
static dlc_status check_limit(dlc__scache *c)
{
    const uint64_t need = dlc__scache_needed(&c->x, 1, 0);
    if (c->limit == 0 || need <= c->limit)
        return DLC_OK;
    uint32_t big = 0;
    for (uint32_t k = 1; k < c->x.num_shards; k++)
        if (c->x.shards[k].file_bytes > c->x.shards[big].file_bytes)
            big = k;
    return dlc__errorf(
        DLC_EINVAL,
        "%s: a cache limit of %" PRIu64 " bytes is too small for %s: it needs at "
        "least %" PRIu64 " bytes (the index and its largest shard, %s of %" PRIu64 " bytes)",
        c->dir, c->limit, c->shown, need, c->x.num_shards ? c->x.shards[big].name : "-",
        c->x.num_shards ? c->x.shards[big].file_bytes : 0);
}

static dlc_status start_threads(dlc__scache *c, uint32_t n)
{
    c->threads = calloc(n, sizeof *c->threads);
    if (!c->threads)
        return dlc__errorf(-ENOMEM, "stream cache: out of memory");
    for (uint32_t i = 0; i < n; i++) {
        const int e = pthread_create(&c->threads[i], NULL, worker, c);
        if (e != 0)
            return dlc__errorf(-e, "stream cache: cannot start a download thread: %s", strerror(e));
        c->nthreads++;
    }
    return DLC_OK;
}

dlc_status dlc__scache_open(const dlc__scache_config *cfg, dlc__scache **out)
{
    dlc_status rc = DLC_OK;
    if (!out)
        return dlc__errorf(DLC_EINVAL, "dlc__scache_open: NULL out");
    *out = NULL;
    if (!cfg || !cfg->dir || !*cfg->dir || !cfg->url || !*cfg->url)
        return dlc__errorf(DLC_EINVAL, "dlc__scache_open: a cache directory and a URL are needed");
    dlc__scache *c = calloc(1, sizeof *c);
    if (!c)
        return dlc__errorf(-ENOMEM, "stream cache: out of memory");
    c->lock_fd = c->dir_fd = c->set_fd = -1;
    c->blocked_at = c->blocked_gen = UINT64_MAX;
    pthread_mutex_init(&c->fs_mu, NULL);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->log_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    uint8_t *ibuf = NULL;
    size_t ilen = 0;
    CHECK(copy_config(c, cfg));
    FAIL_IF(curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK, DLC_ENOSYS,
            "stream cache: libcurl failed to initialize");
    c->curl_inited = 1;
    if (!cfg->plan_only) {
        CHECK(dlc__make_dirs(c->dir, 0755, "the cache directory"));
        CHECK(open_dir(c));
    }
    if (cfg->index) {
        ibuf = malloc(cfg->index_len ? cfg->index_len : 1);
        FAIL_IF(!ibuf, -ENOMEM, "stream cache: out of memory");
        memcpy(ibuf, cfg->index, cfg->index_len);
        ilen = cfg->index_len;
        CHECK(dlc__set_index_decode(ibuf, ilen, c->url, &c->x));
    } else {
        CHECK(fetch_index(c, &ibuf, &ilen));
    }
    c->index_bytes = dlc__scache_round(ilen);
    c->index_buf = ibuf;
    c->index_len = ilen;
    ibuf = NULL;
    CHECK(check_names(c));
    CHECK(check_sizes(c));
    if (cfg->plan_only) {
        *out = c;
        return DLC_OK;
    }
    CHECK(make_state(c));
    CHECK(check_limit(c));
    CHECK(open_set_dir(c));
    CHECK(dlc__scache_put_index(c, c->index_buf, c->index_len));
    CHECK(dlc__scache_plan_set(&c->plan, c->x.num_shards, NULL, 0));
    CHECK(start_threads(c, cfg->downloads ? cfg->downloads : 2));
    *out = c;
    return DLC_OK;
fail:
    free(ibuf);
    {
        dlc__errsave es;
        dlc__err_save(&es);
        dlc__scache_close(c);
        return dlc__err_restore(&es, rc);
    }
}

void dlc__scache_stop(dlc__scache *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void dlc__scache_observe(dlc__scache *c, dlc__scache_observer fn, void *user)
{
    pthread_mutex_lock(&c->mu);
    c->observe = fn;
    c->observe_user = user;
    pthread_mutex_unlock(&c->mu);
}

uint32_t dlc__scache_threads(const dlc__scache *c)
{
    return c->nthreads;
}

void dlc__scache_join(dlc__scache *c)
{
    if (!c || c->joined)
        return;
    dlc__scache_stop(c);
    for (uint32_t i = 0; i < c->nthreads; i++)
        pthread_join(c->threads[i], NULL);
    c->joined = 1;
}

void dlc__scache_close(dlc__scache *c)
{
    if (!c)
        return;
    dlc__scache_join(c);
    free(c->threads);
    if (c->nthreads > 0) { /* The state is whole once the threads started. */
        pthread_mutex_lock(&c->mu);
        assert_state(c);
        for (uint32_t k = 0; k < c->x.num_shards; k++)
            assert(c->want[k] == 0 && !(c->flags[k] & DLC__SC_FETCHING));
        assert(c->reserving == 0);
        pthread_mutex_unlock(&c->mu);
    }
    for (uint32_t k = 0; c->pin_fd && k < c->x.num_shards; k++)
        if (c->pin_fd[k] >= 0)
            close(c->pin_fd[k]);
    for (uint32_t k = 0; c->paths && k < c->x.num_shards; k++)
        free(c->paths[k]);
    for (uint32_t k = 0; c->err_msg && k < c->x.num_shards; k++)
        free(c->err_msg[k]);
    for (uint32_t k = 0; c->probed && k < c->x.num_shards; k++)
        free(c->probed[k]);
    free(c->probed);
    free(c->paths);
    free(c->err_msg);
    free(c->err_rc);
    free(c->flags);
    free(c->seen_tmp);
    free(c->tmp_pid);
    free(c->tmp_sig);
    free(c->tmp_since);
    free(c->pins);
    free(c->pin_fd);
    free(c->want);
    dlc__scache_plan_free(&c->plan);
    dlc__scache_names_free(&c->names);
    for (size_t i = 0; i < c->nother; i++)
        dlc__scache_names_free(&c->other[i]);
    free(c->other);
    free(c->scan.cands);
    free(c->scan.folders);
    dlc__set_index_free(&c->x);
    free(c->index_buf);
    if (c->lock_fd >= 0)
        close(c->lock_fd);
    if (c->set_fd >= 0)
        close(c->set_fd);
    if (c->dir_fd >= 0)
        close(c->dir_fd);
    if (c->curl_inited)
        curl_global_cleanup();
    free(c->set_dir);
    free(c->lock_path);
    free(c->dir);
    free(c->url);
    free(c->shown);
    free(c->endpoint);
    free(c->region);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->log_mu);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->fs_mu);
    free(c);
}
