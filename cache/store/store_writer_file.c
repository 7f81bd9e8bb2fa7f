/* The file under the store writer (include/dlcache/writer.h): FINAL.tmp-PID and its LMDB
 * environment, blocks reserved ahead of the map, the transactions records are appended in, and
 * at finish the trim, sync and rename that publish the store. The schema and the records are
 * cache/store/store_writer.c's. */
#include "store_writer_impl.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* An LMDB return code as a dlc_status: LMDB returns errno values as they are
 * and its own codes as negative numbers in its own range. */
dlc_status dlc__wfile_lmdb_status(int rc)
{
    if (rc > 0)
        return -rc;
    if (rc == MDB_MAP_FULL)
        return -EFBIG;
    return DLC_ECORRUPT;
}

/* Free bytes for an unprivileged user on the file system holding the store. */
static uint64_t free_bytes(const dlc_writer *w)
{
    struct statvfs sv;
    if (statvfs(w->dir_path, &sv) != 0)
        return UINT64_MAX;
    return (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
}

/* The bytes LMDB will use in the file for one record of @p value_len bytes:
 * a value over LMDB's node limit (a quarter page less headers) gets its own
 * overflow pages, a small one shares a leaf page. Either way the leaf node
 * (8-byte node header, 8-byte key, 2-byte pointer) costs about 24 bytes. */
uint64_t dlc__wfile_record_cost(const dlc_writer *w, uint64_t value_len)
{
    const uint64_t node_max = ((w->psize - DLC__LMDB_PAGEHDRSZ) / 2 & ~(uint64_t)1) - 2;
    if (8 + DLC__KEY_SIZE + value_len <= node_max)
        return value_len + 24;
    const uint64_t pages = (DLC__LMDB_PAGEHDRSZ + value_len + w->psize - 1) / w->psize;
    return pages * w->psize + 24;
}

/* Turn a failed write into the message a user can act on: LMDB reports a
 * full disk as ENOSPC or, from a short pwrite, as EIO. */
dlc_status dlc__wfile_write_error(dlc_writer *w, int rc, const char *what)
{
    const uint64_t avail = free_bytes(w);
    const uint64_t need =
        w->size_hint > w->payload_bytes ? w->size_hint - w->payload_bytes : w->pending + (1u << 20);
    if (rc == ENOSPC || ((rc == EIO || rc == EFBIG) && avail < need + (16u << 20)))
        return dlc__errorf(-ENOSPC,
                           "%s: disk full: need about %" PRIu64 " more bytes, %" PRIu64 " free",
                           w->temp_path, need, avail);
    return dlc__errorf(dlc__wfile_lmdb_status(rc), "%s: %s: %s", w->temp_path, what,
                       mdb_strerror(rc));
}

dlc_status dlc__wfile_txn_begin(dlc_writer *w)
{
    const int rc = mdb_txn_begin(w->env, NULL, 0, &w->txn);
    if (rc != 0) {
        w->txn = NULL;
        return dlc__wfile_write_error(w, rc, "begin write transaction");
    }
    w->pending = 0;
    w->txn_bytes = 0;
    w->txn_records = 0;
    return DLC_OK;
}

dlc_status dlc__wfile_txn_commit(dlc_writer *w)
{
    const int rc = mdb_txn_commit(w->txn);
    w->txn = NULL; /* Commit frees the transaction even when it fails. */
    if (rc != 0)
        return dlc__wfile_write_error(w, rc, "commit");
    MDB_envinfo ei;
    mdb_env_info(w->env, &ei);
    w->used = ((uint64_t)ei.me_last_pgno + 1) * w->psize;
    w->pending = 0;
    /* Start writing the committed pages to the disk now, without waiting for it. Left to the
     * final sync, the write-back of a whole store ran after the last record with the cores
     * idle: 0.34 s of a 1.6 s 2-thread build of the demo data (575 MiB), a fifth of its wall
     * time. Started commit by commit (16 MiB), the disk writes while the workers decode and the
     * final sync finds little left. Only a hint: the sync at finish is what makes the store
     * durable, so a failure here (a file system without it) changes nothing. The meta pages
     * (0 and 1) are rewritten at every commit and left to the final sync. */
    if (w->fd >= 0 && !w->no_flush && w->used > w->flushed) {
        const uint64_t from = w->flushed > 2 * w->psize ? w->flushed : 2 * w->psize;
        if (w->used > from)
            (void)sync_file_range(w->fd, (off_t)from, (off_t)(w->used - from),
                                  SYNC_FILE_RANGE_WRITE);
        w->flushed = w->used;
    }
    return DLC_OK;
}

/* A record reaches the page cache through pwrite() rather than through the map. Written
 * through MDB_WRITEMAP's shared map, every page of a new record is a first-touch fault on a
 * fresh page-cache page over unwritten blocks, which the kernel zeroes before the copy lands:
 * a fifth of a build's CPU in perf, on the writer's thread. tests/bench/bench_pagecache.c
 * writes the same bytes with pwrite() at a steady system time per GB from 1 to 2 threads,
 * where through a map 2 threads write less in all than 1 (docs/BENCHMARKS.md, "The builder at
 * the speed of decoding"). pwrite() of a whole record copies straight into new page-cache
 * folios, large ones where the file system has them, with no fault, and zeroes only the last
 * page's tail.
 *
 * Only a value on overflow pages under MDB_WRITEMAP goes this way: LMDB hands it out 16 bytes
 * (its page header) into the first page of its run, the run is the value's alone, and LMDB has
 * written nothing there but that header, which begins with the page's number: so the value's
 * place in the file is known and the map and the file are the same pages. LMDB's semantics are
 * unchanged (the pages are its dirty pages of the open transaction, committed and synced as
 * before), and so are the file's bytes. Anything else (a small value sharing a leaf page, the
 * writer without WRITEMAP, where @p dst is LMDB's own malloc'd page) is copied as before. */
dlc_status dlc__wfile_put_value(dlc_writer *w, uint8_t *dst, const uint8_t *src, size_t size,
                                uint64_t record)
{
    assert(size >= DLC__RECORD2_FIXED); /* a sealed record has its fixed part */
    /* The first page of the value's run holds LMDB's page header, so it is in the page cache
     * already: the record's fixed part goes there through the map. The record's number is known
     * only now: builders seal records before their order is. */
    memcpy(dst, src, DLC__RECORD2_FIXED);
    dlc__st64(dst + 8, record);
    const uintptr_t p = (uintptr_t)dst;
    if (w->writemap && w->fd >= 0 && !w->no_pwrite && size >= w->psize &&
        p % w->psize == DLC__LMDB_PAGEHDRSZ) {
        const uint64_t pgno = dlc__ld64(dst - DLC__LMDB_PAGEHDRSZ);
        const uint64_t off = pgno * w->psize + DLC__LMDB_PAGEHDRSZ;
        /* LMDB's own page, so these hold; checked rather than trusted all the same. */
        if (pgno >= 2 && pgno < w->mapsize / w->psize && off + size <= w->mapsize) {
            for (size_t done = DLC__RECORD2_FIXED; done < size;) {
                const ssize_t got = pwrite(w->fd, src + done, size - done, (off_t)(off + done));
                if (got < 0 && errno == EINTR)
                    continue;
                if (got <= 0)
                    return dlc__wfile_write_error(w, got < 0 ? errno : EIO, "write record");
                done += (size_t)got;
            }
            return DLC_OK;
        }
    }
    memcpy(dst + DLC__RECORD2_FIXED, src + DLC__RECORD2_FIXED, size - DLC__RECORD2_FIXED);
    return DLC_OK;
}

/* Make sure @p extra more bytes fit in the map. LMDB can only grow the map
 * between transactions, and MDB_MAP_FULL inside one would lose every record
 * of it, so grow early: commit, resize, begin again. */
dlc_status dlc__wfile_ensure_room(dlc_writer *w, uint64_t extra)
{
    /* Branch pages copied on write and the free list add a little to the
     * estimate; an eighth plus a fixed slack covers them with room to spare. */
    const uint64_t need = w->used + (w->pending + extra) + (w->pending + extra) / 8 + (4u << 20);
    if (need <= w->mapsize)
        return DLC_OK;
    dlc_status rc = dlc__wfile_txn_commit(w);
    if (rc < 0)
        return rc;
    /* A map of WRITEMAP is reserved block for block, so it grows by less than a sparse one. */
    uint64_t size = w->writemap ? w->mapsize + w->mapsize / 2 : w->mapsize * 2;
    const uint64_t floor = w->writemap ? need + need / 4 : need * 2;
    if (size < floor)
        size = floor;
    if (w->writemap) {
        int fd = -1;
        mdb_env_get_fd(w->env, &fd);
        /* Before LMDB extends the file and maps the new part: then no page of the map lacks
         * its block, and a full disk is this error rather than a SIGBUS later. */
        if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)size) != 0)
            return dlc__wfile_write_error(w, errno, "reserve blocks for the map");
        w->prealloc = size;
    }
    const int mrc = mdb_env_set_mapsize(w->env, (size_t)size);
    if (mrc != 0)
        return dlc__errorf(dlc__wfile_lmdb_status(mrc),
                           "%s: cannot grow the map to %" PRIu64 " bytes: %s", w->temp_path, size,
                           mdb_strerror(mrc));
    w->mapsize = size;
    return dlc__wfile_txn_begin(w);
}

void dlc__wfile_writer_free(dlc_writer *w)
{
    if (w->txn)
        mdb_txn_abort(w->txn);
    if (w->env)
        mdb_env_close(w->env);
    if (w->digest)
        XXH3_freeState(w->digest);
    free(w->label_counts);
    free(w->labels);
    free(w->build_json);
    for (uint32_t i = 0; i < w->num_extra; i++)
        free(w->extra[i].data);
    free(w->extra);
    free(w->final_path);
    free(w->temp_path);
    free(w->dir_path);
    free(w);
}

/* Remove the temporary file after a failure; the caller frees w. */
void dlc__wfile_remove_temp(dlc_writer *w)
{
    if (w->txn) {
        mdb_txn_abort(w->txn);
        w->txn = NULL;
    }
    if (w->env) {
        mdb_env_close(w->env);
        w->env = NULL;
    }
    unlink(w->temp_path);
}

/* Parse "PID" or "PID-lock" (LMDB's lock file, should a writer ever make one). */
static int temp_pid(const char *s, long *pid)
{
    long v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        if (v > INT_MAX)
            return -1;
    }
    if (p == s || (*p != '\0' && strcmp(p, "-lock") != 0))
        return -1;
    *pid = v;
    return 0;
}

/* Remove FINAL.tmp-PID (and FINAL.tmp-PID-lock) files whose process is gone: a writer killed
 * with SIGKILL cannot clean up after itself, and its file holds the disk space of a whole store.
 * A live process, even one we may not signal, keeps its file. Best effort. */
static void remove_stale_temps(const char *final_path)
{
    const char *slash = strrchr(final_path, '/');
    char dir[PATH_MAX];
    const char *base = final_path;
    if (slash) {
        const size_t n = slash == final_path ? 1 : (size_t)(slash - final_path);
        if (n >= sizeof dir)
            return;
        memcpy(dir, final_path, n);
        dir[n] = '\0';
        base = slash + 1;
    } else {
        strcpy(dir, ".");
    }
    const size_t blen = strlen(base);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, base, blen) != 0 || strncmp(e->d_name + blen, ".tmp-", 5) != 0)
            continue;
        long pid;
        if (temp_pid(e->d_name + blen + 5, &pid) != 0 || pid == (long)getpid())
            continue;
        /* kill(pid, 0) fails with ESRCH only when no such process exists; a
         * live process (even one we may not signal) keeps its file. */
        if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            (void)unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

/* What may stand at @p path for a writer to replace it: nothing, or with @p force a regular file
 * or a link (the link itself is replaced, never its target). A device, a FIFO or a socket is
 * never ours to replace: `cachebuild -o /dev/null --force` as root turned /dev/null into a
 * store. Checked at open and again just before the rename. */
static dlc_status check_destination(const char *path, int force)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return DLC_OK;
    if (S_ISDIR(st.st_mode))
        return dlc__errorf(DLC_EINVAL, "%s: is a directory, not a store file", path);
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        return dlc__errorf(DLC_EINVAL,
                           "%s: is a %s, not a store file: a store replaces only a file%s", path,
                           S_ISCHR(st.st_mode)    ? "character device"
                           : S_ISBLK(st.st_mode)  ? "block device"
                           : S_ISFIFO(st.st_mode) ? "FIFO"
                           : S_ISSOCK(st.st_mode) ? "socket"
                                                  : "special file",
                           force ? ", also with --force" : "");
    if (!force)
        return dlc__errorf(DLC_EEXIST, "%s: exists; use --force to replace it", path);
    return DLC_OK;
}

/* The paths of a writer of @p final_path, and the early checks that need no file yet. */
static dlc_status paths_init(dlc_writer *w, const char *final_path, int force)
{
    dlc_status rc = DLC_OK;
    CHECK(check_destination(final_path, force));
    w->force = force;
    w->final_path = strdup(final_path);
    const size_t tlen = strlen(final_path) + 32;
    w->temp_path = malloc(tlen);
    w->dir_path = strdup(final_path);
    w->digest = XXH3_createState();
    FAIL_IF(!w->final_path || !w->temp_path || !w->dir_path || !w->digest, -ENOMEM,
            "%s: out of memory", final_path);
    snprintf(w->temp_path, tlen, "%s.tmp-%ld", final_path, (long)getpid());
    char *slash = strrchr(w->dir_path, '/');
    if (!slash)
        strcpy(w->dir_path, ".");
    else if (slash == w->dir_path)
        slash[1] = '\0';
    else
        *slash = '\0';
    XXH3_64bits_reset(w->digest);
fail:
    return rc;
}

/* Create the temporary file, choose how LMDB writes it, and reserve its blocks up front, so
 * that a disk too small fails here with a clear message rather than hours into the build.
 *
 * With MDB_WRITEMAP, mdb_put(MDB_RESERVE) hands out a place in a shared map of the file, and a
 * record is copied once, by the writer, straight into the page cache. Without it LMDB copies
 * the record into a malloc'd dirty page and write()s that page at commit: on a 1-thread build
 * of the demo data the kernel's copy of those writes took 28% of the time and the faults of
 * the fresh anonymous pages malloc hands out after every commit another 6-9%. The danger of
 * WRITEMAP is a full disk: a store to a page of the map whose block the file system cannot
 * allocate kills the process with SIGBUS instead of failing a write(). So the map is never
 * larger than the blocks reserved for it with fallocate(): here for the first map, and in
 * dlc__wfile_ensure_room() before every growth (KEEP_SIZE: LMDB itself extends the file when it
 * maps it). Where the whole first map cannot be reserved (no fallocate on this file system, or a
 * disk with room for the estimated store but not for the map's slack) the writer goes without
 * WRITEMAP, reserving the estimate alone as before: slower, never wrong. Other fallocate errors
 * only lose the early warning; the build still reports a full disk when it happens. */
static dlc_status create_file(dlc_writer *w, uint64_t want)
{
    const int fd = open(w->temp_path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return dlc__errorf(-errno, "%s: cannot create: %s", w->temp_path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        close(fd);
        return dlc__errorf(-e, "%s: fstat: %s", w->temp_path, strerror(e));
    }
    w->temp_dev = (uint64_t)st.st_dev, w->temp_ino = (uint64_t)st.st_ino;
    dlc_status rc = DLC_OK;
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)w->mapsize) == 0) {
        w->writemap = 1;
        w->prealloc = w->mapsize;
    } else if (w->size_hint > 0 && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)want) == 0) {
        w->prealloc = want;
    } else if (w->size_hint > 0 && errno == ENOSPC) {
        rc = dlc__errorf(-ENOSPC, "%s: disk full: need about %" PRIu64 " bytes, %" PRIu64 " free",
                         w->temp_path, want, free_bytes(w));
    }
    close(fd);
    return rc;
}

/* Is @p fd (or, with -1, what the temporary name holds now, not following a link) the file that
 * create_file() made? DLC_EINVAL naming @p what otherwise. */
static dlc_status check_ours(const dlc_writer *w, int fd, const char *what)
{
    struct stat st;
    const int r = fd >= 0 ? fstat(fd, &st) : lstat(w->temp_path, &st);
    if (r != 0)
        return dlc__errorf(-errno, "%s: %s", w->temp_path, strerror(errno));
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_dev != w->temp_dev ||
        (uint64_t)st.st_ino != w->temp_ino)
        return dlc__errorf(DLC_EINVAL,
                           "%s: %s (another file or a link is at its name now; a process "
                           "sharing the folder moved it): nothing was written through it",
                           w->temp_path, what);
    return DLC_OK;
}

/* Create the temporary LMDB file and its two databases. */
static dlc_status files_open(dlc_writer *w, uint64_t size_hint)
{
    dlc_status rc = DLC_OK;
    int mrc;
    /* A temporary file of this PID can only be a leftover of a process that died with our PID
     * long ago: it is garbage. Those of other dead ones too. Removed before the free space is
     * judged: a killed build's file may be what fills the disk. */
    FAIL_IF(unlink(w->temp_path) != 0 && errno != ENOENT, -errno, "%s: cannot remove: %s",
            w->temp_path, strerror(errno));
    remove_stale_temps(w->final_path);
    struct statvfs sv;
    FAIL_IF(statvfs(w->dir_path, &sv) != 0, -errno, "%s: directory: %s", w->dir_path,
            strerror(errno));
    /* The cheap early answer; fallocate below gives the exact one. */
    const uint64_t want = size_hint + size_hint / 16 + (1u << 20);
    const uint64_t avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    FAIL_IF(size_hint > 0 && want > avail, -ENOSPC,
            "%s: disk full: need about %" PRIu64 " bytes, %" PRIu64 " free", w->final_path, want,
            avail);

    mrc = mdb_env_create(&w->env);
    FAIL_IF(mrc != 0, dlc__wfile_lmdb_status(mrc), "%s: %s", w->temp_path, mdb_strerror(mrc));
    mdb_env_set_maxdbs(w->env, DLC__MAX_DBS);
    w->size_hint = size_hint;
    w->mapsize = size_hint + size_hint / 8 + MAP_MIN;
    mdb_env_set_mapsize(w->env, (size_t)w->mapsize);
    CHECK(create_file(w, want));
    /* NOSYNC/NOMETASYNC: one fsync at finish is all the durability a build
     * needs, since the file is not the store until the rename. NOLOCK: the
     * temporary file has one writer and no readers, and no lock file is left
     * behind. WRITEMAP only over reserved blocks (create_file()). NORDAHEAD (MADV_RANDOM on the
     * map): LMDB's write of an overflow run's page header is a fault on a page not yet in the
     * page cache, and with readahead that fault read (zeroed, the blocks being unwritten) the
     * next 128 KiB or more, which dlc__wfile_put_value()'s pwrite() then overwrote: 11% of a
     * 1-thread build in the kernel's memset, against 0.1% with one page per fault. */
    const unsigned flags = MDB_NOSUBDIR | MDB_NOSYNC | MDB_NOMETASYNC | MDB_NOLOCK | MDB_NOTLS |
                           (w->writemap ? MDB_WRITEMAP | MDB_NORDAHEAD : 0u);
    mrc = mdb_env_open(w->env, w->temp_path, flags, 0644);
    FAIL_IF(mrc != 0, dlc__wfile_lmdb_status(mrc), "%s: cannot create: %s", w->temp_path,
            mdb_strerror(mrc));
    if (mdb_env_get_fd(w->env, &w->fd) != 0)
        w->fd = -1;
    /* LMDB opens the file by its name: it must be the one create_file() made. */
    CHECK(check_ours(w, w->fd, "was replaced before it was opened"));
    /* For measuring the copy through the map against pwrite() with the same binary. */
    w->no_pwrite = getenv("DLCACHE_WRITER_NO_PWRITE") != NULL;
    w->no_flush = getenv("DLCACHE_WRITER_NO_FLUSH") != NULL;
    MDB_stat ms;
    mdb_env_stat(w->env, &ms);
    w->psize = ms.ms_psize;
    w->used = 2 * w->psize; /* The two meta pages. */
    CHECK(dlc__wfile_txn_begin(w));
    mrc = mdb_dbi_open(w->txn, DLC__DB_META, MDB_CREATE, &w->dbi_meta);
    if (mrc == 0)
        mrc = mdb_dbi_open(w->txn, DLC__DB_SAMPLES, MDB_CREATE, &w->dbi_samples);
    FAIL_IF(mrc != 0, dlc__wfile_lmdb_status(mrc), "%s: cannot create databases: %s", w->temp_path,
            mdb_strerror(mrc));
fail:
    return rc;
}

/* A writer with its file open and no schema yet. */
dlc_status dlc__wfile_writer_create(const char *path, int force, uint64_t size_hint,
                                    dlc_writer **out)
{
    dlc_status rc = DLC_OK;
    dlc_writer *w = NULL;
    *out = NULL;
    w = calloc(1, sizeof *w);
    FAIL_IF(!w, -ENOMEM, "%s: out of memory", path);
    w->max_label = -1;
    w->label_field = DLC_NO_FIELD;
    w->fd = -1;
    CHECK(paths_init(w, path, force));
    CHECK(files_open(w, size_hint));
    *out = w;
    return DLC_OK;
fail:
    if (w) {
        if (w->env)
            dlc__wfile_remove_temp(w);
        dlc__wfile_writer_free(w);
    }
    return rc;
}

/* Move the sealed temporary file to FINAL. Without force, never over a file that appeared there
 * during the build (another run's store, a user's file): the check before is not enough, as
 * the name may be taken between it and the rename. renameat2(RENAME_NOREPLACE) where the file
 * system has it, else link() (which never replaces either) and unlink(), else, on a file system
 * with neither (vfat), the checked rename. */
static dlc_status publish(dlc_writer *w)
{
    if (w->force) {
        if (rename(w->temp_path, w->final_path) != 0)
            return dlc__errorf(-errno, "%s: cannot rename to %s: %s", w->temp_path, w->final_path,
                               strerror(errno));
        return DLC_OK;
    }
    int rc = renameat2(AT_FDCWD, w->temp_path, AT_FDCWD, w->final_path, RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
        rc = link(w->temp_path, w->final_path);
        if (rc == 0)
            (void)unlink(w->temp_path);
        else if (errno == EPERM || errno == EOPNOTSUPP)
            rc = rename(w->temp_path, w->final_path);
    }
    if (rc != 0 && errno == EEXIST)
        return dlc__errorf(DLC_EEXIST,
                           "%s: appeared while the store was written (another run's store, or "
                           "someone's file) and is left as it is; the new store was not kept: "
                           "build again to another name, or with --force to replace it",
                           w->final_path);
    if (rc != 0)
        return dlc__errorf(-errno, "%s: cannot rename to %s: %s", w->temp_path, w->final_path,
                           strerror(errno));
    return DLC_OK;
}

/* Drop the bytes past the last used page (preallocated blocks included),
 * make the file durable, and move it over the final path. */
dlc_status dlc__wfile_seal_file(dlc_writer *w, uint64_t used)
{
    dlc_status rc = DLC_OK;
    /* Reopened by its name, never through a link, and only if it is still the file this writer
     * made: in a folder others may write, the name can have been moved to another file, which a
     * truncation must never reach. */
    rc = check_ours(w, -1, "was replaced while the store was written");
    if (rc != DLC_OK)
        return rc;
    const int fd = open(w->temp_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    FAIL_IF(fd < 0, -errno, "%s: cannot reopen: %s", w->temp_path, strerror(errno));
    CHECK(check_ours(w, fd, "was replaced while the store was written"));
    FAIL_IF(ftruncate(fd, (off_t)used) != 0, -errno, "%s: cannot trim to %" PRIu64 " bytes: %s",
            w->temp_path, used, strerror(errno));
    /* Truncating to the current size does not free blocks that fallocate
     * reserved beyond the end; punching them out does. Failure only wastes
     * space, so it is not an error. */
    if (w->prealloc > used)
        (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)used,
                        (off_t)(w->prealloc - used));
    FAIL_IF(fsync(fd) != 0, -errno, "%s: fsync: %s", w->temp_path, strerror(errno));
    /* The rename is the commit point: before it FINAL is the old store (or
     * absent), after it the new one, whole and synced. What stands there now
     * is checked again: the build may have taken hours. */
    CHECK(check_destination(w->final_path, 1)); /* its kind; publish() refuses what exists */
    CHECK(check_ours(w, -1, "was replaced while the store was written"));
    CHECK(publish(w));
    /* Without this fsync a crash could forget the rename itself. */
    CHECK(dlc__fsync_dir(w->final_path));
fail:
    if (fd >= 0)
        close(fd);
    return rc;
}
