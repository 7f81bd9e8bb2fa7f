/* The files of a store set's directory around a build (docs/SETS.md, "Replacing a set").
 *
 * The index is the commit point of a set: a reader opens DIR/index.dlcset and then the shards it
 * names. Part files have fixed names (part-IIIII-of-NNNNN.dlc), so the parts of a new set of the
 * same N land on the very names the old index holds; writing them there would leave the old
 * index naming files it does not describe. So before the first new part is written the old set
 * is retired: each of its part files gets a second name, retired-NAME (a hard link: no data is
 * copied), an index naming those replaces the old one (the same set, the same bytes, other
 * names: written to a temporary file, synced, renamed), and only then are the part names
 * removed. At every moment DIR/index.dlcset names files that are there and whole: the old set
 * under its old names, the old set under its retired names, then (after the join) the new set;
 * and only after the new index is in place are the retired files removed (dlc__build_tidy()).
 * A file system without hard links gets the old index removed instead: the old set, then none,
 * then the new one, never an index that lies.
 *
 * Retiring takes every part at once, so that machines retiring the same set at the same time
 * all write the same index. A part rebuilt alone (one part of a joined set, run again) thus finds
 * its siblings under their retired names; the join takes back a retired part whose name is
 * missing when it belongs to the same set as the parts present (dlc__build_restore()). */
#include "build_internal.h"
#include "common.h"
#include "store_set.h"

#include <dlcache/store.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RETIRED "retired-"
/* A part's name and its retired name: the writer's names are 23 characters (5-digit numbers);
 * longer ones are not ours, and their retired names might not fit an index entry. */
#define PART_NAME_MAX 40u

/* "part-<digits>-of-<digits>.dlc", the names dlc__set_part_name() gives. */
static int is_part_name(const char *name)
{
    const char *p = name;
    if (strlen(name) > PART_NAME_MAX || strncmp(p, "part-", 5) != 0)
        return 0;
    p += 5;
    if (*p < '0' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    if (strncmp(p, "-of-", 4) != 0)
        return 0;
    p += 4;
    if (*p < '0' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    return strcmp(p, ".dlc") == 0;
}

static int is_retired_name(const char *name)
{
    return strncmp(name, RETIRED, strlen(RETIRED)) == 0 && is_part_name(name + strlen(RETIRED));
}

/* Read and decode @p dir's index into @p x: DLC_OK, -ENOENT when there is none, or the
 * decoder's refusal. @p x must be freed with dlc__set_index_free() in every case. */
static dlc_status read_index(const char *dir, dlc__set_index *x)
{
    char *path = dlc__set_path(dir, "/", DLC__SET_INDEX_NAME);
    uint8_t *bytes = NULL;
    size_t len = 0;
    memset(x, 0, sizeof *x);
    dlc_status rc = path ? dlc__set_index_read(path, &bytes, &len)
                         : dlc__errorf(-ENOMEM, "%s: out of memory", dir);
    if (rc == DLC_OK)
        rc = dlc__set_index_decode(bytes, len, path, x);
    free(bytes);
    free(path);
    return rc;
}

/* Write @p len bytes @p p as @p dir's index: a crash leaves the old index or the new one. */
static dlc_status write_index(const char *dir, const uint8_t *p, size_t len)
{
    char *path = dlc__set_path(dir, "/", DLC__SET_INDEX_NAME);
    if (!path)
        return dlc__errorf(-ENOMEM, "%s: out of memory", dir);
    const dlc_status rc = dlc__replace_file(path, p, len);
    free(path);
    return rc;
}

/* Are @p a and @p b (names in @p dfd) one file? */
static int same_file(int dfd, const char *a, const char *b)
{
    struct stat sa, sb;
    return fstatat(dfd, a, &sa, AT_SYMLINK_NOFOLLOW) == 0 &&
           fstatat(dfd, b, &sb, AT_SYMLINK_NOFOLLOW) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* Give part file @p name the second name retired-NAME. A retired-NAME of another file is left
 * by an older retirement that no index names any more: it is replaced (a link under a
 * temporary name renamed over it). 1 when done, 0 when the file system has no hard links,
 * -errno otherwise. */
static int link_retired(int dfd, const char *dir, const char *name, const char *alias)
{
    if (linkat(dfd, name, dfd, alias, 0) == 0)
        return 1;
    if (errno == EEXIST && same_file(dfd, name, alias))
        return 1;
    if (errno == EEXIST) {
        char tmp[DLC__SET_NAME_SIZE + 48];
        snprintf(tmp, sizeof tmp, "%s.tmp-%ld", alias, (long)getpid());
        (void)unlinkat(dfd, tmp, 0);
        if (linkat(dfd, name, dfd, tmp, 0) == 0 && renameat(dfd, tmp, dfd, alias) == 0)
            return 1;
        (void)unlinkat(dfd, tmp, 0);
    }
    if (errno == EPERM || errno == EOPNOTSUPP || errno == ENOSYS || errno == EMLINK)
        return 0;
    return dlc__errorf(-errno, "%s: cannot link %s to %s: %s", dir, name, alias, strerror(errno));
}

/* No hard links here: the old set cannot stay readable while its names are reused, so its
 * index goes first (the set is then gone, never wrong). */
static dlc_status drop_index(const char *dir, const char *why, dlc_log_fn log, void *user)
{
    char *path = dlc__set_path(dir, "/", DLC__SET_INDEX_NAME);
    if (!path)
        return dlc__errorf(-ENOMEM, "%s: out of memory", dir);
    dlc_status rc = DLC_OK;
    if (unlink(path) != 0 && errno != ENOENT)
        rc = dlc__errorf(-errno, "%s: cannot remove: %s", path, strerror(errno));
    else
        rc = dlc__fsync_dir(path);
    if (rc == DLC_OK)
        dlc__logf(log, user, DLC_LOG_WARN,
                  "%s: the set there was removed before the new one is "
                  "built: %s",
                  dir, why);
    free(path);
    return rc;
}

/* Link every part of the old set to its retired name; 0 when a link could not be made for want
 * of hard links. */
static dlc_status link_all(int dfd, const char *dir, dlc__set_index *x, int *linked)
{
    *linked = 1;
    for (uint32_t k = 0; k < x->num_shards; k++) {
        const char *name = x->shards[k].name;
        if (!is_part_name(name))
            continue;
        char alias[DLC__SET_NAME_SIZE + 16];
        snprintf(alias, sizeof alias, RETIRED "%s", name);
        const int r = link_retired(dfd, dir, name, alias);
        if (r < 0)
            return r;
        if (r == 0) {
            *linked = 0;
            return DLC_OK;
        }
    }
    return DLC_OK;
}

/* The first part file @p x names that is not in @p dfd, or NULL. */
static const char *first_missing(int dfd, const dlc__set_index *x)
{
    struct stat st;
    for (uint32_t k = 0; k < x->num_shards; k++)
        if (fstatat(dfd, x->shards[k].name, &st, 0) != 0)
            return x->shards[k].name;
    return NULL;
}

/* The index names the retired links now: the part names go (each only while it is still the
 * old part, the same file as its link). */
static void unlink_parts(int dfd, const dlc__set_index *x)
{
    for (uint32_t k = 0; k < x->num_shards; k++) {
        const char *alias = x->shards[k].name;
        if (!is_retired_name(alias))
            continue;
        const char *name = alias + strlen(RETIRED);
        if (same_file(dfd, name, alias))
            (void)unlinkat(dfd, name, 0);
    }
}

int dlc__build_has_index(const char *dir)
{
    char *index = dlc__set_path(dir, "/", DLC__SET_INDEX_NAME);
    struct stat st;
    const int has = index && stat(index, &st) == 0;
    free(index);
    return has;
}

dlc_status dlc__build_set_dir_check(const char *dir, int force, int one_part, int *made,
                                    uint64_t *dev, uint64_t *ino)
{
    struct stat st;
    *made = mkdir(dir, 0777) == 0; /* EEXIST is the usual answer. */
    if (!*made && errno != EEXIST)
        return dlc__errorf(-errno, "%s: cannot create the set's directory: %s", dir,
                           strerror(errno));
    if (stat(dir, &st) != 0)
        return dlc__errorf(-errno, "%s: %s", dir, strerror(errno));
    if (dev)
        *dev = (uint64_t)st.st_dev;
    if (ino)
        *ino = (uint64_t)st.st_ino;
    if (!S_ISDIR(st.st_mode))
        return dlc__errorf(DLC_EINVAL,
                           "%s: is a file (a single store?), not a set's directory: remove it or "
                           "choose another path",
                           dir);
    if (force)
        return DLC_OK;
    if (!one_part && (dlc__build_has_index(dir) || dlc__build_set_files(dir) > 0))
        return dlc__errorf(DLC_EEXIST,
                           "%s: holds a set (or parts of one); it is replaced only with --force "
                           "(force in the options)",
                           dir);
    if (one_part && dlc__build_has_index(dir))
        return dlc__errorf(DLC_EEXIST,
                           "%s: holds a joined set; building the parts of a new one there needs "
                           "--force (force in the options; the old set stays readable until the "
                           "new one is joined)",
                           dir);
    return DLC_OK;
}

dlc_status dlc__build_retire(const char *dir, dlc_log_fn log, void *user)
{
    dlc_status rc;
    dlc__set_index x;
    uint8_t *bytes = NULL;
    size_t len = 0;
    int dfd = -1, linked, parts = 0;
    rc = read_index(dir, &x);
    if (rc == -ENOENT)
        goto done;
    if (rc < 0) {
        /* A damaged index opens as nothing already; it must not stop its replacement. */
        char why[512];
        snprintf(why, sizeof why, "its index cannot be read (%s)", dlc_errmsg());
        rc = drop_index(dir, why, log, user);
        goto done;
    }
    for (uint32_t k = 0; k < x.num_shards; k++)
        parts += is_part_name(x.shards[k].name);
    if (parts == 0)
        goto done; /* retired already */
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    FAIL_IF(dfd < 0, -errno, "%s: %s", dir, strerror(errno));
    const char *missing = first_missing(dfd, &x);
    if (missing) {
        /* The old set does not open any more: nothing readable to keep. */
        char why[128];
        snprintf(why, sizeof why, "its part %s is missing", missing);
        rc = drop_index(dir, why, log, user);
        goto done;
    }
    CHECK(link_all(dfd, dir, &x, &linked));
    if (!linked) {
        rc = drop_index(dir, "the file system has no hard links", log, user);
        goto done;
    }
    for (uint32_t k = 0; k < x.num_shards; k++) {
        char *name = x.shards[k].name;
        if (is_part_name(name)) {
            char alias[DLC__SET_NAME_SIZE + 16];
            snprintf(alias, sizeof alias, RETIRED "%.*s", (int)PART_NAME_MAX, name);
            memcpy(name, alias, strlen(alias) + 1);
        }
    }
    CHECK(dlc__set_index_encode(&x, &bytes, &len));
    /* write_index() syncs the directory after its rename, which makes the links durable too. */
    CHECK(write_index(dir, bytes, len));
    unlink_parts(dfd, &x);
    dlc__logf(log, user, DLC_LOG_INFO,
              "%s: the set there stays readable under retired names until the new one is joined",
              dir);
done:
fail:
    if (dfd >= 0)
        close(dfd);
    free(bytes);
    dlc__set_index_free(&x);
    return rc == -ENOENT ? DLC_OK : rc;
}

/* Is @p name among the shards @p x names? */
static int named(const dlc__set_index *x, const char *name)
{
    for (uint32_t k = 0; k < x->num_shards; k++)
        if (strcmp(x->shards[k].name, name) == 0)
            return 1;
    return 0;
}

/* A dead writer's temporary file of a part: NAME.tmp-PID (or NAME.tmp-PID-lock) with NAME a
 * part's name and PID no process. A build SIGKILLed leaves one; its part's next writer removes
 * it, but a next build of another N writes other names and never would. */
static int dead_part_temp(const char *name)
{
    const char *t = strstr(name, ".tmp-");
    char part[PART_NAME_MAX + 1];
    const size_t n = t ? (size_t)(t - name) : 0;
    if (!t || n > PART_NAME_MAX)
        return 0;
    memcpy(part, name, n);
    part[n] = '\0';
    if (!is_part_name(part))
        return 0;
    char *end;
    errno = 0;
    const long pid = strtol(t + 5, &end, 10);
    if (end == t + 5 || errno || pid <= 0 || pid == (long)getpid() ||
        (*end && strcmp(end, "-lock") != 0))
        return 0;
    /* ESRCH only when no such process exists: a live one (even one we may not signal) keeps
     * its file. */
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Visit the part and retired files of @p dir that its index does not name; @p remove them or
 * only count them (with @p remove, dead writers' temporary files of parts go too). An index
 * that cannot be read protects everything. */
static uint32_t sweep(const char *dir, int remove, dlc_log_fn log, void *user)
{
    dlc__set_index x;
    const dlc_status rc = read_index(dir, &x);
    uint32_t n = 0;
    DIR *d = rc == DLC_OK || rc == -ENOENT ? opendir(dir) : NULL;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        if (remove && dead_part_temp(e->d_name)) {
            if (unlinkat(dirfd(d), e->d_name, 0) == 0)
                dlc__logf(log, user, DLC_LOG_INFO, "%s/%s: removed (a dead build's temporary file)",
                          dir, e->d_name);
            continue;
        }
        if ((!is_part_name(e->d_name) && !is_retired_name(e->d_name)) || named(&x, e->d_name))
            continue;
        if (!remove) {
            n++;
        } else if (unlinkat(dirfd(d), e->d_name, 0) == 0) {
            n++;
            dlc__logf(log, user, DLC_LOG_INFO, "%s/%s: removed (no index names it)", dir,
                      e->d_name);
        }
    }
    if (d)
        closedir(d);
    dlc__set_index_free(&x);
    dlc__clear_error();
    return n;
}

uint32_t dlc__build_tidy(const char *dir, dlc_log_fn log, void *user)
{
    return sweep(dir, 1, log, user);
}

uint32_t dlc__build_set_files(const char *dir)
{
    return sweep(dir, 0, NULL, NULL);
}

/* The set_id of the part file @p name in @p dir, or 0 when it is not a readable part. */
static uint64_t part_set_id(const char *dir, const char *name)
{
    char *path = dlc__set_path(dir, "/", name);
    dlc_store *s = NULL;
    uint64_t id = 0;
    const void *v;
    size_t n;
    dlc__set_part sp;
    if (path && dlc_store_open(path, 0, &s) == DLC_OK &&
        dlc_store_meta(s, DLC__META_SET_PART, &v, &n) == DLC_OK &&
        dlc__set_part_decode(v, n, path, &sp) == DLC_OK)
        id = sp.set_id;
    dlc_store_close(s);
    free(path);
    dlc__clear_error();
    return id;
}

/* The set_id of some part present in @p d (the first found), or 0. */
static uint64_t present_set_id(const char *dir, DIR *d)
{
    rewinddir(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (is_part_name(e->d_name)) {
            const uint64_t id = part_set_id(dir, e->d_name);
            if (id)
                return id;
        }
    return 0;
}

uint32_t dlc__build_restore(const char *dir, dlc_log_fn log, void *user)
{
    DIR *d = opendir(dir);
    uint32_t n = 0;
    const uint64_t id = d ? present_set_id(dir, d) : 0;
    if (id) {
        rewinddir(d);
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (!is_retired_name(e->d_name))
                continue;
            const char *name = e->d_name + strlen(RETIRED);
            struct stat st;
            if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) == 0 ||
                part_set_id(dir, e->d_name) != id)
                continue;
            /* A link, not a rename: the index may still name the retired file. */
            if (linkat(dirfd(d), e->d_name, dirfd(d), name, 0) == 0) {
                n++;
                dlc__logf(log, user, DLC_LOG_INFO, "%s/%s: taken back from %s (the same set)", dir,
                          name, e->d_name);
            }
        }
    }
    if (d)
        closedir(d);
    return n;
}
