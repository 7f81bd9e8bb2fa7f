/* The shard cache's file system side: the cache-wide lock, the scan that counts every file the
 * cache wrote in DIR and lists what it may evict, eviction, the reservation of a download's bytes
 * (its temporary file, created and allocated under the lock so that every process sees it),
 * publishing, pinning, and the index at open. Everything processes share is here and guarded by
 * flock locks, which die with their process: no shared memory, nothing a crash leaves behind
 * that the next scan cannot judge (a temporary file whose lock it can take is a dead process's). */
#include "common.h"
#include "stream_internal.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

void dlc__scache_log(dlc__scache *c, dlc_log_level level, const char *fmt, ...)
{
    if (!c->net.log)
        return;
    char raw[1024], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    dlc__redact_text(raw, msg, sizeof msg); /* As dlc__logf(): every log line is redacted. */
    pthread_mutex_lock(&c->log_mu);
    c->net.log(c->net.log_user, level, msg);
    pthread_mutex_unlock(&c->log_mu);
}

/* ---- Names -------------------------------------------------------------------------------- */

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

dlc_status dlc__scache_names_make(const dlc__set_index *x, dlc__scache_names *out)
{
    memset(out, 0, sizeof *out);
    const uint32_t n = x->num_shards;
    const char **order = malloc((n ? n : 1) * sizeof *order);
    out->names = malloc((n ? n : 1) * sizeof *out->names);
    out->shard = malloc((n ? n : 1) * sizeof *out->shard);
    out->file_bytes = malloc((n ? n : 1) * sizeof *out->file_bytes);
    if (!order || !out->names || !out->shard || !out->file_bytes) {
        free(order);
        dlc__scache_names_free(out);
        return dlc__errorf(-ENOMEM, "stream cache: out of memory");
    }
    for (uint32_t k = 0; k < n; k++)
        order[k] = x->shards[k].name;
    qsort(order, n, sizeof *order, cmp_name);
    for (uint32_t i = 0; i < n; i++) {
        /* The entry's place in the index is its shard number. */
        const uint32_t k = (uint32_t)(((const char *)order[i] - (const char *)x->shards[0].name) /
                                      (ptrdiff_t)sizeof x->shards[0]);
        snprintf(out->names[i], DLC__SET_NAME_SIZE, "%s", order[i]);
        out->shard[i] = k;
        out->file_bytes[i] = x->shards[k].file_bytes;
    }
    free(order);
    out->n = n;
    out->set_id = x->set_id;
    return DLC_OK;
}

void dlc__scache_names_free(dlc__scache_names *n)
{
    free(n->names);
    free(n->shard);
    free(n->file_bytes);
    memset(n, 0, sizeof *n);
}

uint32_t dlc__scache_names_find(const dlc__scache_names *n, const char *name)
{
    size_t lo = 0, hi = n->n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const int d = strcmp(n->names[mid], name);
        if (d == 0)
            return (uint32_t)mid;
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return UINT32_MAX;
}

/* The names of the set in folder @p path (@p set_id), read from its index once per open; NULL
 * when it has no index we can read (its shards are then neither counted nor evicted). */
static const dlc__scache_names *other_names(dlc__scache *c, uint64_t set_id, const char *path)
{
    for (size_t i = 0; i < c->nother; i++)
        if (c->other[i].set_id == set_id)
            return c->other[i].n ? &c->other[i] : NULL;
    dlc__scache_names *grown = realloc(c->other, (c->nother + 1) * sizeof *c->other);
    if (!grown)
        return NULL;
    c->other = grown;
    dlc__scache_names *n = &c->other[c->nother++];
    memset(n, 0, sizeof *n);
    n->set_id = set_id;
    char ipath[4200];
    /* A path too long for the buffer names no index we can read. */
    const int plen = snprintf(ipath, sizeof ipath, "%s/" DLC__SET_INDEX_NAME, path);
    if (plen < 0 || (size_t)plen >= sizeof ipath)
        return NULL;
    uint8_t *buf = NULL;
    size_t len = 0;
    dlc__set_index x;
    memset(&x, 0, sizeof x);
    if (dlc__set_index_read(ipath, &buf, &len) == DLC_OK &&
        dlc__set_index_decode(buf, len, ipath, &x) == DLC_OK && x.set_id == set_id)
        dlc__scache_names_make(&x, n);
    n->set_id = set_id;
    dlc__set_index_free(&x);
    free(buf);
    dlc__clear_error();
    return n->n ? n : NULL;
}

/* ---- The lock ----------------------------------------------------------------------------- */

static int fs_lock_canceled(void *user)
{
    return dlc__scache_canceled(user);
}

dlc_status dlc__scache_fs_lock(dlc__scache *c)
{
    pthread_mutex_lock(&c->fs_mu);
    /* Caches at work hold it for an instant: a wait as long as the network timeout means
     * something else holds it (anyone who can read the file can take it), and a wait must never
     * outlast the caller's bounds, close() or Ctrl-C (issue 32). */
    const dlc_status rc = dlc__flock_wait(
        c->lock_fd, LOCK_EX, c->lock_path, dlc__scache_lock_timeout(c), fs_lock_canceled, NULL, c,
        "the stream cache's folder-wide lock, which caches at work hold for an instant at a time; "
        "something else holds it (end it, or use another cache_dir)");
    if (rc < 0)
        pthread_mutex_unlock(&c->fs_mu);
    return rc;
}

void dlc__scache_fs_unlock(dlc__scache *c)
{
    flock(c->lock_fd, LOCK_UN);
    pthread_mutex_unlock(&c->fs_mu);
}

/* ---- The scan ----------------------------------------------------------------------------- */

/* Is @p name NAME.PID.dlcs-tmp? *name_len gets NAME's length, *pid the PID. */
static int is_temp(const char *name, size_t *name_len, long *pid)
{
    const size_t n = strlen(name), sl = strlen(DLC__SCACHE_TMP);
    if (n <= sl || strcmp(name + n - sl, DLC__SCACHE_TMP) != 0)
        return 0;
    size_t i = n - sl;
    const size_t end = i;
    while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
        i--;
    if (i == end || i < 2 || name[i - 1] != '.')
        return 0;
    *pid = strtol(name + i, NULL, 10);
    *name_len = i - 1;
    return 1;
}

static int is_set_folder(const char *name, uint64_t *set_id)
{
    if (strlen(name) != 16 || strspn(name, "0123456789abcdef") != 16)
        return 0;
    *set_id = strtoull(name, NULL, 16);
    return 1;
}

static dlc_status add_cand(dlc__scache_scan *s, const dlc__scache_cand *cand)
{
    if (s->ncand == s->cap) {
        const size_t cap = s->cap ? 2 * s->cap : 256;
        dlc__scache_cand *v = realloc(s->cands, cap * sizeof *v);
        if (!v)
            return dlc__errorf(-ENOMEM, "stream cache: out of memory");
        s->cands = v;
        s->cap = cap;
    }
    s->cands[s->ncand++] = *cand;
    return DLC_OK;
}

static dlc_status add_folder(dlc__scache_scan *s, uint64_t set_id, uint32_t *idx)
{
    if (s->nfold == s->fcap) {
        const size_t cap = s->fcap ? 2 * s->fcap : 16;
        uint64_t *v = realloc(s->folders, cap * sizeof *v);
        if (!v)
            return dlc__errorf(-ENOMEM, "stream cache: out of memory");
        s->folders = v;
        s->fcap = cap;
    }
    *idx = (uint32_t)s->nfold;
    s->folders[s->nfold++] = set_id;
    return DLC_OK;
}

uint64_t dlc__scache_tmp_sig(const struct stat *st)
{
    /* A download at work writes its file: its size or times change. */
    return ((uint64_t)st->st_ino * 0x9E3779B97F4A7C15ull) ^ (uint64_t)st->st_size ^
           ((uint64_t)st->st_mtim.tv_sec << 30) ^ (uint64_t)st->st_mtim.tv_nsec ^
           ((uint64_t)st->st_ctim.tv_nsec << 17) ^ (uint64_t)st->st_blocks;
}

/* A temporary file: a dead process's is removed (its lock is free: we hold the cache-wide lock,
 * so nobody is between creating and locking one), a live one counts. */
static dlc_status scan_temp(dlc__scache *c, int dfd, const char *folder, const char *name,
                            const struct stat *st, int ours, size_t name_len, long pid)
{
    const int fd = openat(dfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return DLC_OK; /* Gone since readdir. */
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        unlinkat(dfd, name, 0);
        close(fd);
        dlc__scache_log(c, DLC_LOG_INFO,
                        "%s/%s: removed a download that process %ld left unfinished", folder, name,
                        pid);
        return DLC_OK;
    }
    close(fd);
    c->scan.usage += dlc__scache_file_bytes(st);
    if (ours && pid != (long)getpid()) {
        char shard[DLC__SET_NAME_SIZE];
        if (name_len < sizeof shard) {
            memcpy(shard, name, name_len);
            shard[name_len] = '\0';
            const uint32_t i = dlc__scache_names_find(&c->names, shard);
            if (i != UINT32_MAX) {
                const uint32_t k = c->names.shard[i];
                const uint64_t sig = dlc__scache_tmp_sig(st);
                if (!c->seen_tmp[k] &&
                    (c->tmp_since[k] == 0 || c->tmp_sig[k] != sig || c->tmp_pid[k] != pid)) {
                    c->tmp_since[k] = dlc__now_s();
                    c->tmp_sig[k] = sig;
                    c->tmp_pid[k] = pid;
                }
                c->seen_tmp[k] = 1;
            }
        }
    }
    return DLC_OK;
}

/* The folder @p path (its name @p name in DIR), opened relative to DIR without following a link:
 * a link planted where a set's folder should be is neither read, counted nor written through. */
static dlc_status scan_folder(dlc__scache *c, const char *path, const char *name, uint64_t set_id)
{
    const int ours = set_id == c->x.set_id;
    const int fd = openat(c->dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ELOOP || errno == ENOTDIR
                   ? DLC_OK
                   : dlc__errorf(-errno, "%s: open: %s", path, strerror(errno));
    DIR *d = fdopendir(fd);
    if (!d) {
        const int e = errno;
        close(fd);
        return dlc__errorf(-e, "%s: opendir: %s", path, strerror(e));
    }
    const dlc__scache_names *names = ours ? &c->names : other_names(c, set_id, path);
    const int dfd = dirfd(d);
    uint32_t folder = UINT32_MAX;
    dlc_status rc = DLC_OK;
    struct dirent *e;
    while (rc == DLC_OK && (e = readdir(d)) != NULL) {
        struct stat st;
        if (e->d_name[0] == '.' || fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(st.st_mode))
            continue;
        size_t name_len = 0;
        long pid = 0;
        if (strcmp(e->d_name, DLC__SET_INDEX_NAME) == 0) {
            c->scan.usage += dlc__scache_file_bytes(&st);
        } else if (is_temp(e->d_name, &name_len, &pid)) {
            rc = scan_temp(c, dfd, path, e->d_name, &st, ours, name_len, pid);
        } else if (names) {
            const uint32_t i = dlc__scache_names_find(names, e->d_name);
            if (i == UINT32_MAX)
                continue; /* Not a file the cache wrote: never counted, never removed. */
            const uint32_t k = names->shard[i];
            c->scan.usage += dlc__scache_file_bytes(&st);
            if (folder == UINT32_MAX)
                rc = add_folder(&c->scan, set_id, &folder);
            const int whole = (uint64_t)st.st_size == names->file_bytes[i];
            const dlc__scache_cand cand = {
                .next_use = DLC__SCACHE_NEVER, /* Ours get theirs in rank_cands(). */
                .bytes = dlc__scache_file_bytes(&st),
                .ino = (uint64_t)st.st_ino,
                .folder = folder,
                .shard = k};
            if (rc == DLC_OK)
                rc = add_cand(&c->scan, &cand);
            if (ours && whole)
                c->flags[k] |= DLC__SC_PRESENT;
        }
    }
    closedir(d);
    return rc;
}

dlc_status dlc__scache_scan_dir(dlc__scache *c)
{
    c->scan.usage = 0;
    c->scan.ncand = 0;
    c->scan.nfold = 0;
    memset(c->seen_tmp, 0, c->x.num_shards);
    pthread_mutex_lock(&c->mu);
    for (uint32_t k = 0; k < c->x.num_shards; k++)
        c->flags[k] &= (uint8_t)~DLC__SC_PRESENT;
    pthread_mutex_unlock(&c->mu);
    const int dfd = openat(c->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        const int e = errno;
        if (dfd >= 0)
            close(dfd);
        return dlc__errorf(-e, "%s: opendir: %s", c->dir, strerror(e));
    }
    dlc_status rc = DLC_OK;
    struct dirent *e;
    while (rc == DLC_OK && (e = readdir(d)) != NULL) {
        uint64_t set_id = 0;
        if (!is_set_folder(e->d_name, &set_id))
            continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", c->dir, e->d_name);
        /* The scan writes flags under mu only for our folder; take it around the folder. */
        pthread_mutex_lock(&c->mu);
        rc = scan_folder(c, path, e->d_name, set_id);
        pthread_mutex_unlock(&c->mu);
    }
    closedir(d);
    if (rc == DLC_OK) {
        pthread_mutex_lock(&c->mu);
        for (uint32_t k = 0; k < c->x.num_shards; k++) {
            if (c->seen_tmp[k]) {
                c->flags[k] |= DLC__SC_ELSEWHERE;
            } else {
                c->flags[k] &= (uint8_t)~DLC__SC_ELSEWHERE;
                c->tmp_since[k] = 0;
            }
        }
        if (c->scan.usage > c->st.peak_bytes)
            c->st.peak_bytes = c->scan.usage;
        pthread_mutex_unlock(&c->mu);
    }
    return rc;
}

/* ---- Eviction and reservation ------------------------------------------------------------- */

/* The path of candidate @p v (for messages), its folder's name in DIR and its own name. */
static void cand_path(dlc__scache *c, const dlc__scache_cand *v, char *out, size_t cap,
                      char folder[17], const char **file)
{
    const uint64_t set_id = c->scan.folders[v->folder];
    const char *name = NULL;
    if (set_id == c->x.set_id) {
        name = c->x.shards[v->shard].name;
    } else {
        for (size_t i = 0; i < c->nother && !name; i++)
            if (c->other[i].set_id == set_id)
                for (uint32_t j = 0; j < c->other[i].n && !name; j++)
                    if (c->other[i].shard[j] == v->shard)
                        name = c->other[i].names[j];
    }
    snprintf(folder, 17, "%016" PRIx64, set_id);
    snprintf(out, cap, "%s/%s/%s", c->dir, folder, name ? name : "");
    *file = name;
}

/* Remove candidate @p v unless someone pins it (a shared lock) or it is another file now.
 * Returns 1 when it went. */
static int evict(dlc__scache *c, const dlc__scache_cand *v)
{
    char path[4300], folder[17];
    const char *file = NULL;
    cand_path(c, v, path, sizeof path, folder, &file);
    if (!file)
        return 0;
    /* Relative to the folder opened without following a link, the file too: nothing is ever
     * removed through a link planted since the scan. */
    const int dfd = openat(c->dir_fd, folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return 0;
    /* O_NONBLOCK: a FIFO planted at the name must not hold the cache-wide lock for ever. */
    const int fd = openat(dfd, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        close(dfd);
        return 0;
    }
    struct stat st;
    int gone = 0;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)st.st_ino == v->ino && unlinkat(dfd, file, 0) == 0)
        gone = 1;
    close(fd);
    close(dfd);
    if (gone)
        dlc__scache_log(c, DLC_LOG_DEBUG, "%s: evicted (%" PRIu64 " bytes)", path, v->bytes);
    return gone;
}

/* Give the scan's candidates their next uses and skip ours that are pinned here (a pinned file's
 * LOCK_EX would fail anyway; skipping spares the attempt) or that an acquire is pinning. */
static void rank_cands(dlc__scache *c)
{
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->scan.ncand; i++) {
        dlc__scache_cand *v = &c->scan.cands[i];
        if (c->scan.folders[v->folder] != c->x.set_id)
            continue;
        v->next_use = dlc__scache_plan_next(&c->plan, v->shard);
        /* An acquire that is about to pin a shard has already consumed its schedule entry: the
         * shard looks unneeded until its next use, but is needed now. */
        v->skip = c->pin_fd[v->shard] >= 0 || c->want[v->shard] > 0;
    }
    pthread_mutex_unlock(&c->mu);
}

/* The limit a reservation of @p need bytes works to: the caller's; without one, none while the
 * disk has room for it, else what the cache holds plus what the disk has free (less a margin for
 * the file system's own blocks), so that a disk smaller than the set evicts as a limit would
 * instead of failing mid-epoch (issue 32). Said once, in the log. */
static uint64_t room_limit(dlc__scache *c, uint64_t need)
{
    if (c->limit)
        return c->limit;
    struct statvfs sv;
    if (fstatvfs(c->dir_fd, &sv) != 0)
        return 0;
    const uint64_t avail = (uint64_t)sv.f_bavail * (sv.f_frsize ? sv.f_frsize : sv.f_bsize);
    const uint64_t margin = DLC__SCACHE_FREE_MARGIN;
    if (need + margin <= avail)
        return 0;
    const uint64_t lim = c->scan.usage + (avail > margin ? avail - margin : 0);
    pthread_mutex_lock(&c->mu);
    c->disk_free = avail;
    pthread_mutex_unlock(&c->mu);
    if (!c->free_noted) {
        c->free_noted = 1;
        dlc__scache_log(c, DLC_LOG_WARN,
                        "%s: no cache_limit, and the disk has %" PRIu64 " bytes free, too few for "
                        "the next shard (%" PRIu64 " bytes) and a margin of %" PRIu64 " for the "
                        "file system: the cache now works as if its limit "
                        "were what it holds plus what is free (%" PRIu64
                        " bytes), evicting as it goes; set cache_limit to choose",
                        c->dir, avail, need, margin, lim);
    }
    return lim;
}

/* Evict along the schedule until @p need more bytes fit. DLC__SC_NO_ROOM when they do not. */
static dlc_status make_room(dlc__scache *c, uint64_t need, uint64_t after)
{
    const uint64_t limit = room_limit(c, need);
    if (limit == 0 || c->scan.usage + need <= limit)
        return DLC_OK;
    rank_cands(c);
    uint64_t evicted = 0;
    while (c->scan.usage + need > limit) {
        const size_t i = dlc__scache_pick_victim(c->scan.cands, c->scan.ncand, after);
        if (i == c->scan.ncand)
            break;
        dlc__scache_cand *v = &c->scan.cands[i];
        v->skip = 1;
        if (!evict(c, v))
            continue;
        c->scan.usage -= v->bytes;
        evicted++;
        if (c->scan.folders[v->folder] == c->x.set_id) {
            pthread_mutex_lock(&c->mu);
            c->flags[v->shard] &= (uint8_t)~DLC__SC_PRESENT;
            pthread_mutex_unlock(&c->mu);
        }
    }
    pthread_mutex_lock(&c->mu);
    c->st.evictions += evicted;
    pthread_mutex_unlock(&c->mu);
    return c->scan.usage + need <= limit ? DLC_OK : DLC__SC_NO_ROOM;
}

/* Create @p tmp (a name) in the set's folder, new (O_EXCL, never through a link), lock it and
 * allocate @p size bytes to it. */
static dlc_status create_temp(dlc__scache *c, const char *tmp, uint64_t size, int *fd_out)
{
    dlc_status rc = DLC_OK;
    /* Ours by its PID: an earlier attempt of this process that failed midway. */
    unlinkat(c->set_fd, tmp, 0);
    const int fd = openat(c->set_fd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM))
        return dlc__errorf(-errno,
                           "%s/%s: create: %s: the cache folder is read-only to this process, so "
                           "it can only read the shards already there (a read-only cache must be "
                           "filled first by a process that can write it)",
                           c->set_dir, tmp, strerror(errno));
    if (fd < 0)
        return dlc__errorf(-errno, "%s/%s: create: %s", c->set_dir, tmp, strerror(errno));
    FAIL_IF(flock(fd, LOCK_EX | LOCK_NB) < 0, -errno, "%s/%s: flock: %s", c->set_dir, tmp,
            strerror(errno));
    if (size > 0) {
        const int e = posix_fallocate(fd, 0, (off_t)size);
        FAIL_IF(e != 0, -e, "%s/%s: cannot reserve %" PRIu64 " bytes: %s", c->set_dir, tmp, size,
                strerror(e));
    }
    *fd_out = fd;
    return DLC_OK;
fail:
    unlinkat(c->set_fd, tmp, 0);
    close(fd);
    return rc;
}

dlc_status dlc__scache_reserve(dlc__scache *c, uint32_t k, uint64_t after, const char *tmp, int *fd)
{
    dlc_status rc = dlc__scache_fs_lock(c);
    if (rc < 0)
        return rc;
    rc = dlc__scache_scan_dir(c);
    pthread_mutex_lock(&c->mu);
    const uint8_t f = c->flags[k];
    c->seen_usage = c->scan.usage;
    pthread_mutex_unlock(&c->mu);
    if (rc == DLC_OK && (f & DLC__SC_PRESENT))
        rc = DLC__SC_IS_PRESENT;
    else if (rc == DLC_OK && (f & DLC__SC_ELSEWHERE))
        rc = DLC__SC_IS_ELSEWHERE;
    const uint64_t need = dlc__scache_round(c->x.shards[k].file_bytes);
    if (rc == DLC_OK)
        rc = make_room(c, need, after);
    if (rc == DLC_OK)
        rc = create_temp(c, tmp, c->x.shards[k].file_bytes, fd);
    if (rc == DLC_OK) {
        struct stat st;
        const uint64_t got = fstat(*fd, &st) == 0 ? dlc__scache_file_bytes(&st) : need;
        pthread_mutex_lock(&c->mu);
        if (c->scan.usage + got > c->st.peak_bytes)
            c->st.peak_bytes = c->scan.usage + got;
        pthread_mutex_unlock(&c->mu);
    }
    dlc__scache_fs_unlock(c);
    return rc;
}

/* Open shard @p k with a shared lock, the pin: -1 when it is not there whole. Lock held. */
static int open_pinned(const dlc__scache *c, uint32_t k)
{
    /* O_NONBLOCK: a FIFO planted at the name would block this open, under the cache-wide lock,
     * until a writer came; it is refused below as not a regular file. */
    const int fd =
        openat(c->set_fd, c->x.shards[k].name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return -1;
    struct stat st;
    /* Nobody holds LOCK_EX here: evictors take it under the cache-wide lock, which we hold. The
     * flag goes once the file is known regular: io_uring would answer EAGAIN on an O_NONBLOCK
     * file where it should wait for the disk. */
    const int fl = fcntl(fd, F_GETFL);
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size != c->x.shards[k].file_bytes || fl < 0 ||
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0 || flock(fd, LOCK_SH | LOCK_NB) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void keep_pin(dlc__scache *c, uint32_t k, int fd)
{
    assert(fd >= 0);
    if (c->pin_fd[k] >= 0) {
        close(fd);
        return;
    }
    c->pin_fd[k] = fd;
    c->pinned_bytes += dlc__scache_round(c->x.shards[k].file_bytes);
    c->flags[k] |= DLC__SC_PRESENT;
}

dlc_status dlc__scache_publish(dlc__scache *c, uint32_t k, const char *tmp, int fd)
{
    dlc_status rc = dlc__scache_fs_lock(c);
    if (rc < 0) {
        unlinkat(c->set_fd, tmp, 0);
        close(fd);
        return rc;
    }
    const char *path = c->paths[k];
    /* The bytes are durable before the name points at them (the caller synced them). The rename
     * is within the folder we opened without following a link. */
    if (renameat(c->set_fd, tmp, c->set_fd, c->x.shards[k].name) < 0) {
        rc = dlc__errorf(-errno, "%s/%s: rename to %s: %s", c->set_dir, tmp, path, strerror(errno));
        unlinkat(c->set_fd, tmp, 0);
    } else if (fsync(c->set_fd) < 0) {
        rc = dlc__errorf(-errno, "%s: fsync: %s", c->set_dir, strerror(errno));
    }
    /* The temporary file's lock goes with its close; an acquire waiting for the shard gets its
     * pin before the cache-wide lock is let go, so no eviction comes between. */
    close(fd);
    pthread_mutex_lock(&c->mu);
    if (rc == DLC_OK) {
        c->flags[k] |= DLC__SC_PRESENT;
        if (c->want[k] > 0 && c->pin_fd[k] < 0) {
            const int pfd = open_pinned(c, k);
            if (pfd >= 0)
                keep_pin(c, k, pfd);
        }
    }
    pthread_mutex_unlock(&c->mu);
    dlc__scache_fs_unlock(c);
    return rc;
}

dlc_status dlc__scache_try_pin(dlc__scache *c, uint32_t k, int *fd)
{
    *fd = -1;
    const dlc_status rc = dlc__scache_fs_lock(c);
    if (rc < 0)
        return rc;
    const int pfd = open_pinned(c, k);
    pthread_mutex_lock(&c->mu);
    if (pfd >= 0)
        keep_pin(c, k, pfd);
    else
        c->flags[k] &= (uint8_t)~DLC__SC_PRESENT;
    *fd = c->pin_fd[k];
    pthread_mutex_unlock(&c->mu);
    dlc__scache_fs_unlock(c);
    return DLC_OK;
}

/* ---- The index at open -------------------------------------------------------------------- */

/* Remove the shards in our folder that the index does not describe by size and content digest
 * (an index of the same set_id with other bytes: a set rebuilt or joined again). */
static void drop_stale_shards(dlc__scache *c)
{
    for (uint32_t k = 0; k < c->x.num_shards; k++) {
        const int fd =
            openat(c->set_fd, c->x.shards[k].name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0)
            continue;
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
            close(fd); /* Not a shard: open_pinned() refuses it, a download renames over it. */
            continue;
        }
        int keep = 0;
        dlc_store *s = NULL;
        if (dlc_store_open(c->paths[k], 0, &s) == DLC_OK) {
            const dlc_store_info *info = dlc_store_get_info(s);
            keep = info->file_bytes == c->x.shards[k].file_bytes &&
                   info->content_digest == c->x.shards[k].content_digest;
        }
        dlc_store_close(s);
        dlc__clear_error();
        if (!keep && flock(fd, LOCK_EX | LOCK_NB) == 0) {
            unlinkat(c->set_fd, c->x.shards[k].name, 0);
            dlc__scache_log(c, DLC_LOG_INFO, "%s: removed: the set's new index names another shard",
                            c->paths[k]);
        }
        close(fd);
    }
}

dlc_status dlc__scache_put_index(dlc__scache *c, const uint8_t *buf, size_t len)
{
    char path[4200], tmp[128];
    snprintf(path, sizeof path, "%s/" DLC__SET_INDEX_NAME, c->set_dir);
    snprintf(tmp, sizeof tmp, DLC__SET_INDEX_NAME ".%ld" DLC__SCACHE_TMP, (long)getpid());
    dlc_status rc = dlc__scache_fs_lock(c);
    if (rc < 0)
        return rc;
    uint8_t *old = NULL;
    size_t olen = 0;
    int fd = -1;
    const int same = dlc__set_index_read(path, &old, &olen) == DLC_OK && olen == len &&
                     memcmp(old, buf, len) == 0;
    free(old);
    dlc__clear_error();
    CHECK(dlc__scache_scan_dir(c));
    if (same)
        goto fail; /* rc is DLC_OK: the index is there; the ladder only unlocks. */
    FAIL_IF(c->read_only, DLC_EINVAL,
            "%s: the cache folder is read-only to this process, and its copy of the set's index "
            "is missing or is not the bucket's: a read-only cache must be filled first, with "
            "this index, by a process that can write it",
            path);
    drop_stale_shards(c);
    CHECK(dlc__scache_scan_dir(c));
    FAIL_IF(make_room(c, dlc__scache_round(len), 0) != DLC_OK, DLC_EINVAL,
            "%s: the cache's limit of %" PRIu64 " bytes has no room for the set's index (%zu "
            "bytes) beside the shards other processes have pinned",
            c->dir, c->limit, len);
    CHECK(create_temp(c, tmp, len, &fd));
    size_t done = 0;
    while (done < len) {
        const ssize_t w = pwrite(fd, buf + done, len - done, (off_t)done);
        if (w < 0 && errno == EINTR)
            continue;
        FAIL_IF(w < 0, -errno, "%s/%s: write: %s", c->set_dir, tmp, strerror(errno));
        done += (size_t)w;
    }
    FAIL_IF(fsync(fd) < 0, -errno, "%s/%s: fsync: %s", c->set_dir, tmp, strerror(errno));
    FAIL_IF(renameat(c->set_fd, tmp, c->set_fd, DLC__SET_INDEX_NAME) < 0, -errno,
            "%s/%s: rename: %s", c->set_dir, tmp, strerror(errno));
    FAIL_IF(fsync(c->set_fd) < 0, -errno, "%s: fsync: %s", c->set_dir, strerror(errno));
fail:
    if (fd >= 0) {
        if (rc < 0)
            unlinkat(c->set_fd, tmp, 0);
        close(fd);
    }
    dlc__scache_fs_unlock(c);
    return rc;
}
