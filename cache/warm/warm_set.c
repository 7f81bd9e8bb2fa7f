/* Store sets on object storage: which files a set's index names (decoded by the store part's
 * reader of the index, cache/store/store_set.h), and the warm of a whole set: the index first into
 * a temporary name, the shards in parallel with dlc__warm_file() each, the index published last.
 * The shards' bookkeeping (locks, resume journals, sidecars) goes into one folder beside the set,
 * DEST.warm-set/, never into the set's directory, which a fetch leaves holding the set alone.
 *
 * A new version over an older set at DEST keeps the older one whole until the new one is in: a
 * shard whose name the older index holds is fetched to NAME.warm-next (plan_refresh()), and only
 * once every shard is fetched and checked are the older index retired, the staged shards renamed
 * over their names and the new index published (a few renames, not the whole download, during
 * which DEST is no set). A rerun after a kill in that window moves the staged shards its sidecars
 * vouch for before fetching what is missing. */
#include "common.h"
#include "store_set.h"
#include "warm_internal.h"

#include <dlcache/store.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

_Static_assert(sizeof(((dlc__warm_set_list *)0)->names[0]) == DLC__SET_NAME_SIZE,
               "a shard name of the list holds one of the index");

void dlc__warm_set_list_free(dlc__warm_set_list *l)
{
    free(l->names);
    free(l->bytes);
    free(l->digests);
    memset(l, 0, sizeof *l);
}

/* dlc__warm_set_list_file() of the file at @p path, named @p shown in messages. */
static dlc_status list_index(const char *path, const char *shown, dlc__warm_set_list *out)
{
    memset(out, 0, sizeof *out);
    uint8_t *buf = NULL;
    size_t len = 0;
    dlc__set_index x;
    memset(&x, 0, sizeof x);
    dlc_status rc = dlc__set_index_read(path, &buf, &len);
    if (rc == DLC_OK)
        rc = dlc__set_index_decode(buf, len, shown, &x);
    if (rc == DLC_OK) {
        out->n = x.num_shards;
        out->set_id = x.set_id;
        out->names = calloc(x.num_shards, sizeof *out->names);
        out->bytes = calloc(x.num_shards, sizeof *out->bytes);
        out->digests = calloc(x.num_shards, sizeof *out->digests);
        if (!out->names || !out->bytes || !out->digests)
            rc = dlc__errorf(-ENOMEM, "%s: out of memory", shown);
    }
    for (uint32_t i = 0; rc == DLC_OK && i < x.num_shards; i++) {
        memcpy(out->names[i], x.shards[i].name, DLC__SET_NAME_SIZE);
        out->names[i][DLC__SET_NAME_SIZE - 1] = '\0';
        out->bytes[i] = x.shards[i].file_bytes;
        out->digests[i] = x.shards[i].content_digest;
    }
    dlc__set_index_free(&x);
    free(buf);
    if (rc < 0)
        dlc__warm_set_list_free(out);
    return rc;
}

dlc_status dlc__warm_set_list_file(const char *path, dlc__warm_set_list *out)
{
    return list_index(path, path, out);
}

/* The name through which the file @p name in the directory open at @p dirfd is read by the
 * readers that take a path (the store's, the index's): the descriptor's own, so that they read
 * the file we hold, whatever was renamed since (as store_open.c gives LMDB its file). */
static const char *fd_path(int dirfd, const char *name, char *buf, size_t cap)
{
    if (name && *name)
        snprintf(buf, cap, "/proc/self/fd/%d/%s", dirfd, name);
    else
        snprintf(buf, cap, "/proc/self/fd/%d", dirfd);
    return buf;
}

dlc_status dlc__warm_set_list_read(const char *dir, dlc__warm_set_list *out)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/" DLC__WARM_SET_INDEX, dir) >= sizeof path)
        return dlc__errorf(DLC_EINVAL, "%s: path too long", dir);
    struct stat st;
    if (stat(path, &st) < 0 && errno == ENOENT)
        return dlc__errorf(DLC_EINVAL,
                           "%s: a directory without %s is not a store set (join its parts first: "
                           "dlc_set_join)",
                           dir, DLC__WARM_SET_INDEX);
    return dlc__warm_set_list_file(path, out);
}

/* ---- Fetching a set ---------------------------------------------------------------------- */

/* What a shard of a new version is fetched as while the older set at DEST stays whole. */
#define STAGED ".warm-next"

/* The shards' downloads: worker threads take the next shard and run dlc_warm() on it; the
 * calling thread sums their progress for the caller. */
typedef struct set_fetch {
    const char *url;
    const char *dest;
    const char *state; /* DEST.warm-set: the shards' locks, journals and sidecars. */
    int set_fd;        /* DEST and DEST.warm-set, held open (set_paths). */
    int state_fd;
    const dlc_warm_options *opt;
    const dlc__warm_set_list *list;
    const uint8_t *staged;      /* Per shard: fetched to NAME.warm-next (a refresh; see the top). */
    dlc_warm_options shard_opt; /* The caller's, with connections split and our callbacks. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t next;          /* The next shard to start. */
    uint32_t running;       /* Workers still running. */
    int stop;               /* A shard failed or the caller canceled: the others stop. */
    dlc_status rc;          /* The first failure, */
    char msg[1024];         /* and its message. */
    dlc_warm_result *res;   /* One per shard. */
    dlc_warm_progress *pr;  /* The latest progress of each shard. */
    pthread_mutex_t log_mu; /* One log call at a time. */
} set_fetch;

typedef struct shard_ctx {
    set_fetch *sf;
    uint32_t i;
} shard_ctx;

static int on_shard_progress(void *user, const dlc_warm_progress *p)
{
    const shard_ctx *s = user;
    pthread_mutex_lock(&s->sf->mu);
    s->sf->pr[s->i] = *p;
    const int stop = s->sf->stop;
    pthread_mutex_unlock(&s->sf->mu);
    return stop;
}

static void on_shard_log(void *user, dlc_log_level level, const char *msg)
{
    set_fetch *sf = ((const shard_ctx *)user)->sf;
    pthread_mutex_lock(&sf->log_mu);
    sf->opt->log(sf->opt->log_user, level, msg);
    pthread_mutex_unlock(&sf->log_mu);
}

static dlc_status fetch_shard(set_fetch *sf, uint32_t i)
{
    char url[4096], dest[4096], state[4096];
    const char *name = sf->list->names[i];
    if (dlc__url_child(sf->url, name, url, sizeof url) >= sizeof url ||
        (size_t)snprintf(dest, sizeof dest, "%s/%s%s", sf->dest, name,
                         sf->staged[i] ? STAGED : "") >= sizeof dest ||
        (size_t)snprintf(state, sizeof state, "%s/%s", sf->state, name) >= sizeof state)
        return dlc__errorf(DLC_EINVAL, "%s: path too long", sf->dest);
    shard_ctx ctx = {sf, i};
    dlc_warm_options o = sf->shard_opt;
    o.progress = on_shard_progress;
    o.progress_user = &ctx;
    o.log = sf->opt->log ? on_shard_log : NULL;
    o.log_user = &ctx;
    return dlc__warm_file(url, dest, state, sf->set_fd, sf->state_fd, &o, &sf->res[i]);
}

static void *shard_worker(void *arg)
{
    set_fetch *sf = arg;
    pthread_mutex_lock(&sf->mu);
    while (!sf->stop && sf->next < sf->list->n) {
        const uint32_t i = sf->next++;
        pthread_mutex_unlock(&sf->mu);
        const dlc_status rc = fetch_shard(sf, i);
        pthread_mutex_lock(&sf->mu);
        if (rc < 0 && (sf->rc == DLC_OK || (sf->rc == DLC_ECANCELED && rc != DLC_ECANCELED))) {
            /* A shard stopped because another failed says ECANCELED: keep the real cause. */
            sf->rc = rc;
            snprintf(sf->msg, sizeof sf->msg, "%s", dlc_errmsg());
        }
        if (rc < 0)
            sf->stop = 1;
    }
    sf->running--;
    pthread_cond_signal(&sf->cv);
    pthread_mutex_unlock(&sf->mu);
    return NULL;
}

/* The caller's progress with the shards' summed, about ten times a second, until the workers
 * are done; a non-zero answer stops them. */
static void report_progress(set_fetch *sf, uint64_t total, double t0)
{
    const dlc_warm_options *opt = sf->opt;
    pthread_mutex_lock(&sf->mu);
    while (sf->running > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&sf->cv, &sf->mu, &ts);
        if (!opt->progress || sf->running == 0)
            continue;
        dlc_warm_progress p = {.total = total, .seconds = dlc__now_s() - t0};
        for (uint32_t i = 0; i < sf->list->n; i++) {
            p.done += sf->pr[i].done;
            p.downloaded += sf->pr[i].downloaded;
            p.verifying |= sf->pr[i].verifying;
        }
        pthread_mutex_unlock(&sf->mu);
        const int stop = opt->progress(opt->progress_user, &p);
        pthread_mutex_lock(&sf->mu);
        if (stop && !sf->stop) {
            sf->stop = 1;
            if (sf->rc == DLC_OK) {
                sf->rc = DLC_ECANCELED;
                snprintf(sf->msg, sizeof sf->msg, "%s: canceled; a rerun resumes it", sf->dest);
            }
        }
    }
    pthread_mutex_unlock(&sf->mu);
}

/* Fetch every shard, up to one worker per connection, each with its share of them. */
static dlc_status fetch_shards(set_fetch *sf, uint64_t total, double t0)
{
    const uint32_t conns = sf->opt->connections ? sf->opt->connections : 8;
    uint32_t nw = conns < sf->list->n ? conns : sf->list->n;
    if (nw > 64)
        nw = 64;
    sf->shard_opt = *sf->opt;
    sf->shard_opt.connections = conns / nw ? conns / nw : 1;
    pthread_t th[64];
    pthread_mutex_init(&sf->mu, NULL);
    pthread_mutex_init(&sf->log_mu, NULL);
    pthread_cond_init(&sf->cv, NULL);
    uint32_t started = 0;
    pthread_mutex_lock(&sf->mu);
    for (; started < nw; started++) {
        if (pthread_create(&th[started], NULL, shard_worker, sf) != 0)
            break;
        sf->running++;
    }
    pthread_mutex_unlock(&sf->mu);
    if (started == 0) {
        sf->running = 1;
        shard_worker(sf);
    }
    report_progress(sf, total, t0);
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&sf->mu);
    pthread_mutex_destroy(&sf->log_mu);
    pthread_cond_destroy(&sf->cv);
    return sf->rc < 0 ? dlc__errorf(sf->rc, "%s", sf->msg) : DLC_OK;
}

/* Every shard is the one the index names: its size and its content digest (from its info block;
 * dlc_warm() has verified its records against it). A staged shard is checked under its staged
 * name, before anything of the older set is touched. */
static dlc_status check_shards(const char *dest, int set_fd, const dlc__warm_set_list *list,
                               const uint8_t *staged)
{
    for (uint32_t i = 0; i < list->n; i++) {
        char path[4096], held[4200], name[DLC__SET_NAME_SIZE + 16];
        snprintf(name, sizeof name, "%s%s", list->names[i], staged[i] ? STAGED : "");
        snprintf(path, sizeof path, "%s/%s", dest, name);
        dlc_store *s = NULL;
        dlc_status rc = dlc_store_open(fd_path(set_fd, name, held, sizeof held), 0, &s);
        if (rc < 0)
            return rc;
        const dlc_store_info *info = dlc_store_get_info(s);
        if (info->file_bytes != list->bytes[i] || info->content_digest != list->digests[i])
            rc = dlc__errorf(DLC_ECORRUPT,
                             "%s: %" PRIu64 " bytes with content digest %016" PRIx64
                             ", the set's index names %" PRIu64 " bytes and %016" PRIx64
                             ": the server's shard is not the one its index was joined with",
                             path, info->file_bytes, info->content_digest, list->bytes[i],
                             list->digests[i]);
        dlc_store_close(s);
        if (rc < 0)
            return rc;
    }
    return DLC_OK;
}

/* Do files @p a and @p b hold the same bytes? (Indexes are small.) */
static int same_bytes(const char *a, const char *b)
{
    uint8_t *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    const int same = dlc__set_index_read(a, &x, &nx) == DLC_OK &&
                     dlc__set_index_read(b, &y, &ny) == DLC_OK && nx == ny && memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    dlc__clear_error();
    return same;
}

typedef struct set_paths {
    char url[4096];  /* The set's prefix, without a trailing '/'. */
    char name[2048]; /* The same, redacted: what the sidecar names (its source). */
    char index_url[4096];
    char index[4096];   /* DEST/index.dlcset */
    char tmp[4096];     /* DEST/index.dlcset.warm-new: the new index until the shards are in. */
    char sidecar[4096]; /* DEST.warm */
    char state[4096];   /* DEST.warm-set: the folder of the shards' and the index's bookkeeping, */
    char index_state[4096]; /* and what the index's is named after: DEST.warm-set/index.dlcset. */
    /* The folders, held open from their check to the end (every create, rename and unlink goes
     * relative to them, issue 23's leftover): DEST's parent (the caller's: DEST.lock, DEST.warm),
     * DEST and DEST.warm-set. */
    int parent_fd;
    int set_fd;
    int state_fd;
} set_paths;

static dlc_status make_set_paths(const char *url, const char *dest, set_paths *p)
{
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    const size_t cap = sizeof p->url;
    if (n >= cap || (size_t)snprintf(p->index, cap, "%s/" DLC__WARM_SET_INDEX, dest) >= cap ||
        (size_t)snprintf(p->tmp, cap, "%s.warm-new", p->index) >= cap ||
        (size_t)snprintf(p->sidecar, cap, "%s.warm", dest) >= cap ||
        (size_t)snprintf(p->state, cap, "%s.warm-set", dest) >= cap ||
        (size_t)snprintf(p->index_state, cap, "%s/" DLC__WARM_SET_INDEX, p->state) >= cap)
        return dlc__errorf(DLC_EINVAL, "%s: path too long", dest);
    snprintf(p->url, cap, "%.*s", (int)n, url);
    dlc_warm_redact_url(p->url, p->name, sizeof p->name);
    if (dlc__url_child(p->url, DLC__WARM_SET_INDEX, p->index_url, cap) >= cap)
        return dlc__errorf(DLC_EINVAL, "%s: URL too long", p->name);
    return DLC_OK;
}

/* DEST is the set the server has: the sidecar names this set and the index at DEST, and the
 * server's index has the ETag and size it recorded (one request). When it is, *held_list is the
 * index at DEST, decoded (the caller frees it). */
static int set_is_current(const set_paths *p, const dlc_warm_options *opt, dlc_warm_result *r,
                          dlc__warm_set_list *held_list)
{
    dlc__warm_sidecar sc, now;
    if (dlc__warm_sidecar_read_at(p->parent_fd, p->sidecar, &sc) != DLC_OK ||
        strcmp(sc.source, p->name) != 0 || !*sc.etag)
        return 0;
    now = sc;
    if (dlc__warm_sidecar_stat_at(p->set_fd, p->index, &now) != DLC_OK || now.inode != sc.inode ||
        now.mtime_ns != sc.mtime_ns)
        return 0;
    dlc__warm_source src;
    dlc__warm_object obj;
    int current = 0;
    if (dlc__warm_source_init(&src, p->index_url, opt) == DLC_OK &&
        dlc__warm_probe(&src, opt, &obj, &r->retries) == DLC_OK)
        current = obj.size == sc.size && strcmp(obj.etag, sc.etag) == 0;
    dlc__warm_source_free(&src);
    dlc__clear_error();
    char held[4200];
    if (current && list_index(fd_path(p->set_fd, DLC__WARM_SET_INDEX, held, sizeof held), p->index,
                              held_list) == DLC_OK) {
        snprintf(r->etag, sizeof r->etag, "%s", sc.etag);
        r->bytes = sc.size;
        for (uint32_t i = 0; i < held_list->n; i++)
            r->bytes += held_list->bytes[i];
        r->files = held_list->n + 1;
        return 1;
    }
    dlc__clear_error();
    return 0;
}

/* What the set's fetch did, from the index's and the shards' results. */
static void sum_results(dlc_warm_result *r, const dlc_warm_result *ir, const dlc_warm_result *sr,
                        uint32_t n)
{
    r->bytes = ir->bytes;
    r->bytes_downloaded = ir->bytes_downloaded;
    r->retries += ir->retries;
    r->chunks = ir->chunks;
    r->chunks_fetched = ir->chunks_fetched;
    r->verified = 1;
    r->md5_checked = ir->md5_checked;
    r->resumed = 0;
    for (uint32_t i = 0; i < n; i++) {
        r->bytes += sr[i].bytes;
        r->bytes_downloaded += sr[i].bytes_downloaded;
        r->verify_seconds += sr[i].verify_seconds;
        r->retries += sr[i].retries;
        r->chunks += sr[i].chunks;
        r->chunks_fetched += sr[i].chunks_fetched;
        r->resumed |= sr[i].resumed;
        r->verified &= sr[i].verified;
        r->md5_checked &= sr[i].md5_checked;
    }
    r->files = n + 1;
    snprintf(r->etag, sizeof r->etag, "%s", ir->etag);
}

/* The new index under its final name, the set opened whole (or the index taken away again),
 * and the sidecar that vouches for it. */
static dlc_status publish_index(const set_paths *p, const char *dest, const dlc_warm_result *ir)
{
    /* dlc_warm() synced the index's bytes; the rename and the directory make it the set's. */
    if (renameat(p->set_fd, dlc__at_name(p->set_fd, p->tmp), p->set_fd, DLC__WARM_SET_INDEX) < 0)
        return dlc__errorf(-errno, "%s: rename to %s: %s", p->tmp, p->index, strerror(errno));
    dlc_status rc = dlc__fsync_dir_at(p->set_fd, p->index);
    if (rc < 0)
        return rc;
    (void)dest;
    dlc_store *s = NULL;
    char held[64];
    rc = dlc_store_open(fd_path(p->set_fd, NULL, held, sizeof held), 0, &s);
    dlc_store_close(s);
    if (rc < 0) {
        /* Every shard passed its own checks, so this is a set the server holds wrongly: DEST must
         * not stay a set that does not open. */
        dlc__errsave es;
        dlc__err_save(&es);
        unlinkat(p->set_fd, DLC__WARM_SET_INDEX, 0);
        dlc__fsync_dir_at(p->set_fd, p->index);
        return dlc__err_restore(&es, rc);
    }
    dlc__warm_sidecar sc;
    memset(&sc, 0, sizeof sc);
    snprintf(sc.source, sizeof sc.source, "%s", p->name);
    snprintf(sc.etag, sizeof sc.etag, "%s", ir->etag);
    sc.size = ir->bytes;
    rc = dlc__warm_sidecar_stat_at(p->set_fd, p->index, &sc);
    if (rc < 0)
        return dlc__errorf(rc, "%s: stat after rename failed", p->index);
    return dlc__warm_sidecar_write_at(p->parent_fd, p->sidecar, &sc);
}

/* Fetch the new index into its temporary name and decode it. */
static dlc_status fetch_index(const set_paths *p, const dlc_warm_options *opt, dlc_warm_result *ir,
                              dlc__warm_set_list *list)
{
    dlc_warm_options o = *opt;
    o.flags |= DLC_WARM_NO_VERIFY; /* Not a store: its own decoder checks it below. */
    o.progress = NULL;
    /* An index's size is checked before a byte of it is fetched (issue 23, item 12): a bucket
     * that says 2 GB is refused at once, as the reader would refuse the file. */
    dlc_status rc =
        dlc__warm_file_capped(p->index_url, p->tmp, p->index_state, p->set_fd, p->state_fd, &o,
                              DLC__SET_MAX_INDEX_BYTES, "a store set's index", ir);
    char held[4200];
    if (rc == DLC_OK)
        rc = list_index(fd_path(p->set_fd, dlc__at_name(p->set_fd, p->tmp), held, sizeof held),
                        p->tmp, list);
    if (rc == DLC_ECORRUPT || rc == DLC_EVERSION) {
        dlc__errsave es;
        dlc__err_save(&es);
        unlinkat(p->set_fd, dlc__at_name(p->set_fd, p->tmp), 0);
        rc = dlc__err_restore(&es, rc);
    }
    return rc;
}

/* Which shards are staged (see the top): every shard whose name the older index at DEST holds.
 * Not only those it holds with another size or digest: each shard carries its set's set_id, a
 * hash of all the set's items, so a new version's shard of the same bytes of records is still
 * another file, which the older index refuses ("built from other sources"). Without an older
 * index, or with the same one, none. */
static void plan_refresh(const set_paths *p, const dlc__warm_set_list *list, uint8_t *staged,
                         uint32_t *nstaged)
{
    *nstaged = 0;
    memset(staged, 0, list->n);
    struct stat st;
    char a[4200], b[4200];
    if (fstatat(p->set_fd, DLC__WARM_SET_INDEX, &st, 0) < 0 ||
        same_bytes(fd_path(p->set_fd, DLC__WARM_SET_INDEX, a, sizeof a),
                   fd_path(p->set_fd, dlc__at_name(p->set_fd, p->tmp), b, sizeof b)))
        return;
    dlc__warm_set_list old;
    if (list_index(a, p->index, &old) < 0) {
        /* An index that does not decode (taken with DLC_WARM_FORCE) makes no set to keep. */
        dlc__clear_error();
        return;
    }
    for (uint32_t i = 0; i < list->n; i++) {
        /* Shard i of both is the usual match (part-I-of-N): looked at first, so that a set of
         * many shards costs no quadratic search. */
        for (uint32_t k = 0; k <= old.n; k++) {
            const uint32_t j = k == 0 ? i : k - 1;
            if (j < old.n && strcmp(old.names[j], list->names[i]) == 0) {
                staged[i] = 1;
                break;
            }
        }
        *nstaged += staged[i];
    }
    dlc__warm_set_list_free(&old);
}

/* Bytes the file @p name in the folder open at @p dirfd has on disk (0 if none). */
static uint64_t allocated(int dirfd, const char *name)
{
    struct stat st;
    return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)
               ? (uint64_t)st.st_blocks * 512
               : 0;
}

/* A refresh holds the older set and the new one at once: refused before a byte is fetched when
 * the disk cannot hold both, rather than failing on a full disk midway. What the new version's
 * files (staged, in place, or partial) of an earlier run already take counts as there. Only for
 * a refresh: a first fetch is not checked (file systems that compress report fewer blocks, and
 * a wrong refusal would stop a fetch that fits), and fails cleanly on a full disk. */
static dlc_status check_room(const set_paths *p, const char *dest, const dlc__warm_set_list *list,
                             const uint8_t *staged)
{
    uint64_t need = 0, have = 0;
    for (uint32_t i = 0; i < list->n; i++) {
        char name[DLC__SET_NAME_SIZE + 32], part[DLC__SET_NAME_SIZE + 48];
        snprintf(name, sizeof name, "%s%s", list->names[i], staged[i] ? STAGED : "");
        snprintf(part, sizeof part, "%s.warm-part", name);
        const uint64_t done = allocated(p->set_fd, name) + allocated(p->set_fd, part);
        need += list->bytes[i];
        have += done < list->bytes[i] ? done : list->bytes[i];
    }
    struct statvfs sv;
    if (need == have || fstatvfs(p->set_fd, &sv) != 0)
        return DLC_OK;
    const uint64_t free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
    if (free_bytes >= need - have)
        return DLC_OK;
    return dlc__errorf(-ENOSPC,
                       "%s: the new version's shards need %" PRIu64
                       " bytes more and the disk has %" PRIu64
                       " free: a refresh keeps the older set whole, and readable, until the new "
                       "one is in, so both must fit; free space, or remove %s to warm the new "
                       "version in its place",
                       dest, need - have, free_bytes, dest);
}

/* With no index at DEST, a staged shard that its sidecar vouches for (a run killed after retiring
 * the older index and before every staged shard was moved) goes to its name, where the fetch
 * then finds it complete, or refetches it if the server's has changed since. */
static void finish_moves(const set_paths *p, const dlc__warm_set_list *list)
{
    for (uint32_t i = 0; i < list->n; i++) {
        char next[DLC__SET_NAME_SIZE + 16], sidecar[DLC__SET_NAME_SIZE + 16];
        snprintf(next, sizeof next, "%s" STAGED, list->names[i]);
        snprintf(sidecar, sizeof sidecar, "%s.warm", list->names[i]);
        dlc__warm_sidecar sc;
        struct stat st;
        if (fstatat(p->set_fd, next, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            dlc__warm_sidecar_read_at(p->state_fd, sidecar, &sc) == DLC_OK &&
            dlc__warm_sidecar_names(&sc, &st))
            (void)renameat(p->set_fd, next, p->set_fd, list->names[i]);
    }
    dlc__clear_error();
}

/* The staged shards over their names: the older index is gone by now (retire_old_index()). */
static dlc_status move_staged(const set_paths *p, const char *dest, const dlc__warm_set_list *list,
                              const uint8_t *staged, uint32_t nstaged)
{
    for (uint32_t i = 0; i < list->n; i++) {
        char next[DLC__SET_NAME_SIZE + 16];
        snprintf(next, sizeof next, "%s" STAGED, list->names[i]);
        if (staged[i] && renameat(p->set_fd, next, p->set_fd, list->names[i]) < 0)
            return dlc__errorf(-errno, "%s/%s: rename to %s: %s", dest, next, list->names[i],
                               strerror(errno));
    }
    return nstaged ? dlc__fsync_dir_at(p->set_fd, p->index) : DLC_OK;
}

/* An older index at DEST that differs goes once the new shards are in, before any of its shards
 * is replaced. */
static dlc_status retire_old_index(const set_paths *p)
{
    struct stat st;
    char a[4200], b[4200];
    if (fstatat(p->set_fd, DLC__WARM_SET_INDEX, &st, 0) < 0 ||
        same_bytes(fd_path(p->set_fd, DLC__WARM_SET_INDEX, a, sizeof a),
                   fd_path(p->set_fd, dlc__at_name(p->set_fd, p->tmp), b, sizeof b)))
        return DLC_OK;
    /* The index first: a kill between the two leaves a sidecar naming no index (harmless:
     * set_is_current() stats the index), never an older index whose sidecar, the proof it was
     * warmed from this URL, is gone (a rerun would refuse it as another set's). */
    if (unlinkat(p->set_fd, DLC__WARM_SET_INDEX, 0) < 0)
        return dlc__errorf(-errno, "%s: unlink: %s", p->index, strerror(errno));
    const dlc_status rc = dlc__fsync_dir_at(p->set_fd, p->index);
    if (rc < 0)
        return rc;
    if (unlinkat(p->parent_fd, dlc__at_name(p->parent_fd, p->sidecar), 0) < 0 && errno != ENOENT)
        return dlc__errorf(-errno, "%s: unlink: %s", p->sidecar, strerror(errno));
    return DLC_OK;
}

/* DEST, or the folder of its bookkeeping (@p what says which, for the message), as a directory in
 * the folder open at @p parent_fd: made and its entry synced when new, so that a journal written
 * into it survives a crash, then opened and held in *fd_out (dlc__open_dir_at()'s checks). */
static dlc_status make_dir(int parent_fd, const char *path, const char *what, int *fd_out)
{
    struct stat st;
    const char *name = dlc__at_name(parent_fd, path);
    if (mkdirat(parent_fd, name, 0755) == 0) {
        const dlc_status rc = dlc__fsync_dir_at(parent_fd, path);
        return rc < 0 ? rc : dlc__open_dir_at(parent_fd, path, what, fd_out);
    }
    if (errno != EEXIST)
        return dlc__errorf(-errno, "%s: mkdir: %s", path, strerror(errno));
    /* A link where our folder should be is refused, not followed (issue 23, item 10): a
     * co-tenant could point it anywhere we may write. */
    if (fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
        return dlc__errorf(-ELOOP,
                           "%s: is a symbolic link where dlcache keeps %s; links are never "
                           "followed there (remove it if it is yours)",
                           path, what);
    if (fstatat(parent_fd, name, &st, 0) < 0 || !S_ISDIR(st.st_mode))
        return dlc__errorf(DLC_EINVAL, "%s: the source is a store set, %s is a file", path, what);
    return dlc__open_dir_at(parent_fd, path, what, fd_out);
}

/* @p name is longer than @p suffix and ends with it. */
static int ends_with(const char *name, const char *suffix)
{
    const size_t n = strlen(name), m = strlen(suffix);
    return n > m && strcmp(name + n - m, suffix) == 0;
}

int dlc__warm_set_name_kept(const char *name)
{
    static const char *const suffixes[] = {".warm", ".lock", ".warm-part", ".warm-journal", STAGED};
    if (strncmp(name, DLC__WARM_SET_INDEX, strlen(DLC__WARM_SET_INDEX)) == 0)
        return 1;
    for (size_t k = 0; k < sizeof suffixes / sizeof suffixes[0]; k++)
        if (ends_with(name, suffixes[k]))
            return 1;
    return 0;
}

/* @p name (@p n < DLC__SET_NAME_SIZE characters) and @p suffix (a short literal) into @p buf of
 * DLC__SET_NAME_SIZE + 16 bytes: a copy, not snprintf, whose bound GCC cannot see through strlen
 * at -O2. */
static void with_suffix(char *buf, const char *name, size_t n, const char *suffix)
{
    memcpy(buf, name, n);
    memcpy(buf + n, suffix, strlen(suffix) + 1);
}

/* DEST.warm-set/, opened (a descriptor of the caller's own), or -1 when it is not there or not a
 * folder: before dlc__warm_set() makes it, and for the checks that only read it. */
static int open_state_dir(const set_paths *p)
{
    return p->state_fd >= 0 ? dup(p->state_fd)
                            : openat(p->parent_fd, dlc__at_name(p->parent_fd, p->state),
                                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* DEST's entries, listed from the start through a descriptor of their own (closedir() closes it),
 * or NULL. */
static DIR *list_dir(int set_fd)
{
    const int dfd = dup(set_fd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d && dfd >= 0) {
        const int e = errno; /* For the caller's message. */
        close(dfd);
        errno = e;
    }
    if (d)
        rewinddir(d);
    return d;
}

/* Whether the entry @p name of DEST is of ours: the index and its temporary names, a shard we
 * published (its sidecar is in DEST.warm-set/, or beside it in DEST as versions before that
 * folder kept it), or the bookkeeping those versions left in DEST. */
static int ours(int set_fd, int state_fd, const char *name)
{
    if (dlc__warm_set_name_kept(name))
        return 1;
    const size_t n = strlen(name);
    char sidecar[DLC__SET_NAME_SIZE + 16];
    struct stat st;
    if (n >= DLC__SET_NAME_SIZE)
        return 0;
    with_suffix(sidecar, name, n, ".warm");
    return (state_fd >= 0 && fstatat(state_fd, sidecar, &st, AT_SYMLINK_NOFOLLOW) == 0) ||
           fstatat(set_fd, sidecar, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* A destination folder that exists must be this set's (an earlier or interrupted warm of it), or
 * empty: the shards and the index are renamed into it, over any file of the same name, and a
 * user's folder would end up mixed with a set. Without DLC_WARM_FORCE anything else is refused,
 * naming the first entry in the way, before anything is written into the folder. *has_index says
 * whether DEST/index.dlcset exists (its identity is compared once the new index is in). */
static dlc_status check_dest_folder(const set_paths *p, const char *dest, int *has_index)
{
    *has_index = 0;
    DIR *d = list_dir(p->set_fd);
    if (!d) {
        const int e = errno;
        return dlc__errorf(-e, "%s: cannot list the folder: %s", dest, strerror(e));
    }
    const int state_fd = open_state_dir(p);
    char first[256] = "";
    uint64_t others = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (strcmp(e->d_name, DLC__WARM_SET_INDEX) == 0)
            *has_index = 1;
        else if (ours(p->set_fd, state_fd, e->d_name))
            continue;
        else if (!*first)
            snprintf(first, sizeof first, "%s", e->d_name);
        else
            others++;
    }
    if (state_fd >= 0)
        close(state_fd);
    closedir(d);
    if (!*first)
        return DLC_OK;
    char more[48] = "";
    if (others)
        snprintf(more, sizeof more, " and %" PRIu64 " other entr%s", others,
                 others == 1 ? "y" : "ies");
    return dlc__errorf(DLC_EEXIST,
                       "%s: the folder holds %s%s that %s not this set's: a set's shards and "
                       "index are renamed into its destination, over files of the same names; "
                       "name an empty or new folder, or pass --force (DLC_WARM_FORCE) to write "
                       "there anyway",
                       dest, first, more, others ? "are" : "is");
}

/* DEST/index.dlcset, when it was there before, must be this set's: the same set_id, or warmed
 * from this URL before (its sidecar says so: a set rebuilt at the same place is an update). */
static dlc_status check_old_index(const set_paths *p, const dlc__warm_set_list *list)
{
    dlc__warm_set_list old;
    char held[4200];
    dlc_status rc =
        list_index(fd_path(p->set_fd, DLC__WARM_SET_INDEX, held, sizeof held), p->index, &old);
    if (rc < 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", dlc_errmsg()); /* dlc__errorf() writes where it is. */
        return dlc__errorf(DLC_EEXIST,
                           "%s: is not the index of a store set (%s): the folder is not this "
                           "set's; name an empty or new folder, or pass --force (DLC_WARM_FORCE)",
                           p->index, why);
    }
    const uint64_t was = old.set_id;
    dlc__warm_set_list_free(&old);
    dlc__warm_sidecar sc;
    if (was == list->set_id ||
        (dlc__warm_sidecar_read_at(p->parent_fd, p->sidecar, &sc) == DLC_OK &&
         strcmp(sc.source, p->name) == 0)) {
        dlc__clear_error();
        return DLC_OK;
    }
    return dlc__errorf(DLC_EEXIST,
                       "%s: is another set's index (set_id %016" PRIx64 ", this set's %016" PRIx64
                       ", not warmed from this URL): its shards would be overwritten; name an "
                       "empty or new folder, or pass --force (DLC_WARM_FORCE)",
                       p->index, was, list->set_id);
}

/* What a refresh leaves in DEST under names of ours: its staged shards, their partial files and
 * its temporary index (the folder check counts them as ours). */
static int is_staged(const char *name)
{
    return ends_with(name, STAGED) || ends_with(name, STAGED ".warm-part") ||
           strcmp(name, DLC__WARM_SET_INDEX ".warm-new") == 0 ||
           strcmp(name, DLC__WARM_SET_INDEX ".warm-new.warm-part") == 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* DEST's entry @p name (not a name of ours, not in the index) is a shard of an older version
 * that we published from this set's URL and that is still that file: its sidecar in the trusted
 * DEST.warm-set/ open at @p state_fd (named @p sidecar) is the caller's and names it. */
static int is_retired(const set_paths *p, int state_fd, const char *name, const char *sidecar)
{
    dlc__warm_sidecar sc;
    struct stat st;
    char url[4096], shown[4096];
    if (fstatat(state_fd, sidecar, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != geteuid() ||
        dlc__warm_sidecar_read_at(state_fd, sidecar, &sc) != DLC_OK ||
        fstatat(p->set_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !dlc__warm_sidecar_names(&sc, &st) ||
        dlc__url_child(p->url, name, url, sizeof url) >= sizeof url)
        return 0;
    dlc_warm_redact_url(url, shown, sizeof shown);
    /* A source the sidecar could not hold whole was cut when written: never a match. */
    return strlen(shown) < sizeof sc.source - 1 && strcmp(shown, sc.source) == 0;
}

/* DEST tidied in one pass, once the set @p list names is in it (after a fetch, and when a rerun
 * finds the set current: a refresh that failed, was killed or was left off under another version
 * finds the server back at the set DEST holds, or a kill came between a publish and this):
 * - what a refresh left under names of ours (is_staged()) goes;
 * - the shards of an older version the index no longer names go: a version with another number
 *   of shards names none of them (part-I-of-N), so each refresh would leave a whole set behind.
 *   A file goes only when its sidecar says we published it from this set's URL and it is still
 *   that file (is_retired()): a user's file, one from another URL (DLC_WARM_FORCE) or one changed
 *   since stays, and so does every file when DEST.warm-set/ is not the caller's own.
 * Called with DEST.lock held: the lock files of the shards in DEST.warm-set/ are taken only under
 * it. A failure leaves the file for the next run (no error: the set is whole either way). */
static void tidy_dest(const set_paths *p, const dlc__warm_set_list *list)
{
    const int state_fd = open_state_dir(p);
    /* The sidecars are the only proof a file is ours, so they must be: a folder of another user
     * or that others may write could hold one written to name any of the user's files in DEST
     * (a co-tenant who can write DEST's parent could make DEST.warm-set). Then no shard goes. A
     * group that may write it must be one that may write DEST too (a umask of 002 makes both so):
     * it could remove DEST's files itself. */
    struct stat sst, dst;
    const int trusted =
        state_fd >= 0 && fstat(state_fd, &sst) == 0 && S_ISDIR(sst.st_mode) &&
        sst.st_uid == geteuid() && !(sst.st_mode & S_IWOTH) && fstat(p->set_fd, &dst) == 0 &&
        (!(sst.st_mode & S_IWGRP) || ((dst.st_mode & S_IWGRP) && dst.st_gid == sst.st_gid));
    char **names = trusted ? malloc((list->n ? list->n : 1) * sizeof *names) : NULL;
    for (uint32_t i = 0; names && i < list->n; i++)
        names[i] = list->names[i];
    if (names)
        qsort(names, list->n, sizeof *names, cmp_names);
    DIR *d = list_dir(p->set_fd);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        const size_t n = strlen(name);
        char sidecar[DLC__SET_NAME_SIZE + 16], lock[DLC__SET_NAME_SIZE + 16];
        if (is_staged(name)) {
            unlinkat(p->set_fd, name, 0);
            continue;
        }
        if (!names || n >= DLC__SET_NAME_SIZE || strcmp(name, ".") == 0 ||
            strcmp(name, "..") == 0 || dlc__warm_set_name_kept(name) ||
            bsearch(&name, names, list->n, sizeof *names, cmp_names) != NULL)
            continue;
        with_suffix(sidecar, name, n, ".warm");
        with_suffix(lock, name, n, ".lock");
        if (is_retired(p, state_fd, name, sidecar) && unlinkat(p->set_fd, name, 0) == 0) {
            unlinkat(state_fd, sidecar, 0);
            unlinkat(state_fd, lock, 0);
        }
    }
    if (d)
        closedir(d);
    if (state_fd >= 0)
        close(state_fd);
    free(names);
    dlc__clear_error();
}

/* The lock and sidecar of the index's own warm, which describe a temporary name that is gone,
 * what tidy_dest() removes, and the locks and sidecars that versions before DEST.warm-set/ left
 * inside DEST beside each shard. */
static void remove_leftovers(const set_paths *p, const dlc__warm_set_list *list)
{
    char name[DLC__SET_NAME_SIZE + 16];
    unlinkat(p->state_fd, DLC__WARM_SET_INDEX ".warm", 0);
    unlinkat(p->state_fd, DLC__WARM_SET_INDEX ".lock", 0);
    tidy_dest(p, list);
    for (uint32_t i = 0; i < list->n; i++) {
        snprintf(name, sizeof name, "%s.warm", list->names[i]);
        unlinkat(p->set_fd, name, 0);
        snprintf(name, sizeof name, "%s.lock", list->names[i]);
        unlinkat(p->set_fd, name, 0);
    }
}

dlc_status dlc__warm_set(const char *url, const char *dest, int parent_fd,
                         const dlc_warm_options *opt, dlc_warm_result *r, double t0)
{
    set_paths *p = malloc(sizeof *p);
    if (p) {
        p->parent_fd = parent_fd;
        p->set_fd = p->state_fd = -1;
    }
    dlc__warm_set_list list;
    memset(&list, 0, sizeof list);
    dlc_warm_result ir;
    memset(&ir, 0, sizeof ir);
    set_fetch sf = {.dest = dest, .state = p ? p->state : NULL, .opt = opt, .list = &list};
    r->is_set = 1;
    dlc_status rc = p ? make_set_paths(url, dest, p) : dlc__errorf(-ENOMEM, "warm: out of memory");
    if (rc == DLC_OK)
        rc = make_dir(parent_fd, dest, "the destination", &p->set_fd);
    dlc__warm_set_list held;
    if (rc == DLC_OK && set_is_current(p, opt, r, &held)) {
        tidy_dest(p, &held);
        dlc__warm_set_list_free(&held);
        r->already_complete = 1;
        r->verified = !(opt->flags & DLC_WARM_NO_VERIFY);
        close(p->set_fd);
        free(p);
        return DLC_OK;
    }
    int has_index = 0;
    const int force = (opt->flags & DLC_WARM_FORCE) != 0;
    if (rc == DLC_OK && !force)
        rc = check_dest_folder(p, dest, &has_index);
    if (rc == DLC_OK)
        rc = make_dir(parent_fd, p->state, "the folder of its bookkeeping", &p->state_fd);
    if (rc == DLC_OK) {
        sf.set_fd = p->set_fd;
        sf.state_fd = p->state_fd;
    }
    if (rc == DLC_OK)
        rc = fetch_index(p, opt, &ir, &list);
    /* The index's decoder keeps names to [A-Za-z0-9._-] and unique; a shard may not take a name
     * of cachewarm's own files either (X and X.warm-next would share a part file, a shard named
     * index.dlcset would be written over the index). */
    for (uint32_t i = 0; rc == DLC_OK && i < list.n; i++) {
        if (dlc__warm_set_name_kept(list.names[i])) {
            rc = dlc__errorf(DLC_ECORRUPT,
                             "%s: the set's index names a shard \"%s\", a name cachewarm keeps "
                             "for its own files (index.dlcset*, *.warm, *.lock, *.warm-part, "
                             "*.warm-journal, *.warm-next): refused",
                             p->name, list.names[i]);
            unlinkat(p->set_fd, dlc__at_name(p->set_fd, p->tmp), 0);
        }
    }
    if (rc == DLC_OK && has_index) {
        rc = check_old_index(p, &list);
        if (rc < 0)
            unlinkat(p->set_fd, dlc__at_name(p->set_fd, p->tmp), 0);
    }
    uint8_t *staged = NULL;
    uint32_t nstaged = 0;
    if (rc == DLC_OK) {
        sf.url = p->url;
        sf.res = calloc(list.n, sizeof *sf.res);
        sf.pr = calloc(list.n, sizeof *sf.pr);
        staged = calloc(list.n ? list.n : 1, 1);
        rc = sf.res && sf.pr && staged ? DLC_OK : dlc__errorf(-ENOMEM, "warm: out of memory");
        sf.staged = staged;
    }
    if (rc == DLC_OK)
        plan_refresh(p, &list, staged, &nstaged);
    if (rc == DLC_OK && nstaged) {
        rc = check_room(p, dest, &list, staged);
        if (rc < 0)
            unlinkat(p->set_fd, dlc__at_name(p->set_fd, p->tmp), 0);
    }
    struct stat ist;
    if (rc == DLC_OK && fstatat(p->set_fd, DLC__WARM_SET_INDEX, &ist, AT_SYMLINK_NOFOLLOW) < 0)
        finish_moves(p, &list);
    uint64_t total = ir.bytes;
    for (uint32_t i = 0; i < list.n; i++)
        total += list.bytes[i];
    if (rc == DLC_OK)
        rc = fetch_shards(&sf, total, t0);
    if (rc == DLC_OK)
        rc = check_shards(dest, p->set_fd, &list, staged);
    /* The commit: the older set goes, the staged shards take their names, the new index comes. */
    if (rc == DLC_OK)
        rc = retire_old_index(p);
    if (rc == DLC_OK)
        rc = move_staged(p, dest, &list, staged, nstaged);
    if (rc == DLC_OK)
        rc = publish_index(p, dest, &ir);
    free(staged);
    if (sf.res)
        sum_results(r, &ir, sf.res, list.n);
    else
        r->bytes_downloaded += ir.bytes_downloaded; /* What the index cost, also when refused. */
    if (rc == DLC_OK)
        remove_leftovers(p, &list);
    free(sf.res);
    free(sf.pr);
    dlc__warm_set_list_free(&list);
    if (p && p->set_fd >= 0)
        close(p->set_fd);
    if (p && p->state_fd >= 0)
        close(p->state_fd);
    free(p);
    return rc;
}
