/* The monotonic clock, the usable core count and directory syncs. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t dlc__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double dlc__now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint32_t dlc__cpu_count(void)
{
    /* The affinity mask, not the online count: under taskset, cgroups' cpusets or a container
     * the process may use fewer cores than the machine has. */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return (uint32_t)CPU_COUNT(&set);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1u;
}

dlc_status dlc__fsync_dir(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return dlc__errorf(-ENOMEM, "%s: out of memory", path);
    const char *dir = dirname(copy);
    dlc_status rc = DLC_OK;
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        rc = dlc__errorf(-errno, "%s: cannot open the directory to sync it: %s", dir,
                         strerror(errno));
    else if (fsync(fd) != 0 && errno != EINVAL)
        rc = dlc__errorf(-errno, "%s: fsync of the directory: %s", dir, strerror(errno));
    if (fd >= 0)
        close(fd);
    free(copy);
    return rc;
}

dlc_status dlc__replace_file_at(int dirfd, const char *path, const void *p, size_t len)
{
    const size_t cap = strlen(path) + 32;
    char *tmp = malloc(cap);
    if (!tmp)
        return dlc__errorf(-ENOMEM, "%s: out of memory", path);
    snprintf(tmp, cap, "%s.tmp-%ld", path, (long)getpid());
    int fd = -1;
    dlc_status rc = dlc__create_own_at(dirfd, tmp, O_WRONLY, &fd);
    if (rc < 0) {
        free(tmp);
        return rc;
    }
    for (size_t done = 0; done < len && rc == DLC_OK;) {
        const ssize_t w = write(fd, (const char *)p + done, len - done);
        if (w > 0)
            done += (size_t)w;
        else if (w == 0 || errno != EINTR)
            rc = dlc__errorf(w == 0 ? -EIO : -errno, "%s: write: %s", tmp,
                             strerror(w == 0 ? EIO : errno));
    }
    if (rc == DLC_OK && fsync(fd) != 0)
        rc = dlc__errorf(-errno, "%s: fsync: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rc == DLC_OK)
        rc = dlc__errorf(-errno, "%s: close: %s", tmp, strerror(errno));
    if (rc == DLC_OK &&
        renameat(dirfd, dlc__at_name(dirfd, tmp), dirfd, dlc__at_name(dirfd, path)) != 0)
        rc = dlc__errorf(-errno, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    if (rc != DLC_OK)
        unlinkat(dirfd, dlc__at_name(dirfd, tmp), 0);
    free(tmp);
    return rc == DLC_OK ? dlc__fsync_dir_at(dirfd, path) : rc;
}

dlc_status dlc__replace_file(const char *path, const void *p, size_t len)
{
    return dlc__replace_file_at(AT_FDCWD, path, p, len);
}

dlc_status dlc__make_dirs(const char *path, unsigned mode, const char *what)
{
    char buf[4096];
    if ((size_t)snprintf(buf, sizeof buf, "%s", path) >= sizeof buf)
        return dlc__errorf(DLC_EINVAL, "%s: %s: path too long", path, what);
    for (char *p = buf + 1;; p++) {
        const char ch = *p;
        if (ch != '/' && ch != '\0')
            continue;
        *p = '\0';
        if (mkdir(buf, (mode_t)mode) < 0 && errno != EEXIST) {
            const int e = errno;
            return dlc__errorf(-e, "%s: cannot create %s: %s", buf, what, strerror(e));
        }
        *p = ch;
        if (ch == '\0')
            break;
    }
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
        return dlc__errorf(DLC_EINVAL, "%s: %s is not a directory", path, what);
    return DLC_OK;
}

const char *dlc__file_kind(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG:
        return "a regular file";
    case S_IFDIR:
        return "a directory";
    case S_IFIFO:
        return "a FIFO";
    case S_IFSOCK:
        return "a socket";
    case S_IFCHR:
        return "a character device";
    case S_IFBLK:
        return "a block device";
    case S_IFLNK:
        return "a symbolic link";
    default:
        return "an unknown kind of file";
    }
}

int dlc__open_regular(const char *path, int extra, const char *what, struct stat *st)
{
    const char *const sep = what ? " " : "";
    what = what ? what : "";
    /* O_NONBLOCK makes opening a FIFO return at once (a blocking open waits for a writer,
     * forever); O_NOCTTY keeps a terminal from becoming ours. Both only matter for what is
     * refused below. */
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | extra);
    if (fd < 0)
        return dlc__errorf(-errno, "%s: cannot open%s%s: %s", path, sep, what, strerror(errno));
    int rc = DLC_OK;
    if (fstat(fd, st) != 0)
        rc = dlc__errorf(-errno, "%s: cannot stat%s%s: %s", path, sep, what, strerror(errno));
    else if (!S_ISREG(st->st_mode))
        rc = dlc__errorf(DLC_EINVAL, "%s: %s, not a regular file%s%s%s", path,
                         dlc__file_kind((unsigned)st->st_mode), what[0] ? " (a " : "", what,
                         what[0] ? " must be one)" : "");
    else {
        const int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
            rc = dlc__errorf(-errno, "%s: fcntl: %s", path, strerror(errno));
    }
    if (rc != DLC_OK) {
        close(fd);
        return rc;
    }
    return fd;
}

dlc_status dlc__open_own_at(int dirfd, const char *path, int flags, int *fd_out)
{
    *fd_out = -1;
    const int fd =
        openat(dirfd, dlc__at_name(dirfd, path), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
        const int e = errno;
        if (e == ELOOP)
            return dlc__errorf(-ELOOP,
                               "%s: is a symbolic link where dlcache keeps a file of its own; "
                               "links are never followed there (remove it if it is yours)",
                               path);
        return dlc__errorf(-e, "%s: open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return dlc__errorf(DLC_EINVAL,
                           "%s: is not a regular file where dlcache keeps a file of its own; "
                           "refused (remove it if it is yours)",
                           path);
    }
    /* O_NONBLOCK was for the open alone (a FIFO would have blocked it). */
    const int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *fd_out = fd;
    return DLC_OK;
}

dlc_status dlc__create_own_at(int dirfd, const char *path, int flags, int *fd_out)
{
    const char *name = dlc__at_name(dirfd, path);
    *fd_out = -1;
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
        return dlc__errorf(-ELOOP,
                           "%s: is a symbolic link where dlcache keeps a file of its own; "
                           "links are never followed there (remove it if it is yours)",
                           path);
    /* What else has the name is ours to replace; a link planted from here on fails O_EXCL. */
    if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
        return dlc__errorf(-errno, "%s: unlink: %s", path, strerror(errno));
    return dlc__open_own_at(dirfd, path, (flags & ~O_TRUNC) | O_CREAT | O_EXCL, fd_out);
}

const char *dlc__at_name(int dirfd, const char *path)
{
    if (dirfd == AT_FDCWD)
        return path;
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

dlc_status dlc__fsync_dir_at(int dirfd, const char *path)
{
    if (dirfd == AT_FDCWD)
        return dlc__fsync_dir(path);
    if (fsync(dirfd) != 0 && errno != EINVAL)
        return dlc__errorf(-errno, "%s: fsync of its directory: %s", path, strerror(errno));
    return DLC_OK;
}

/* The checks of a directory we hold for a run, on its open descriptor (dlc__open_parent_dir()). */
static dlc_status check_held_dir(int fd, const char *shown, const char *what)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return dlc__errorf(-errno, "%s: stat: %s", shown, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return dlc__errorf(DLC_EINVAL, "%s: the folder of %s is %s, not a directory", shown, what,
                           dlc__file_kind(st.st_mode));
    /* Its owner is not checked: a project folder shared by a group is common, and what the
     * folder holds is reached only by name under this descriptor, with O_NOFOLLOW and O_EXCL,
     * so another user who can write there can make a run fail but not redirect its writes. */
    return DLC_OK;
}

static dlc_status open_held_dir(int dirfd, const char *name, const char *shown, const char *what,
                                int *fd_out)
{
    *fd_out = -1;
    const int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        struct stat st;
        /* O_DIRECTORY is checked on a link itself: a link says ENOTDIR, not ELOOP. */
        if (e == ELOOP || (e == ENOTDIR && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                           S_ISLNK(st.st_mode)))
            return dlc__errorf(-ELOOP,
                               "%s: the folder of %s is a symbolic link; links are never followed "
                               "there (name the folder it points to)",
                               shown, what);
        if (e == ENOTDIR)
            return dlc__errorf(DLC_EINVAL, "%s: the folder of %s is not a directory", shown, what);
        return dlc__errorf(-e, "%s: cannot open the folder of %s: %s", shown, what, strerror(e));
    }
    const dlc_status rc = check_held_dir(fd, shown, what);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    *fd_out = fd;
    return DLC_OK;
}

dlc_status dlc__open_parent_dir(const char *path, const char *what, int *fd_out)
{
    char dir[4096];
    if ((size_t)snprintf(dir, sizeof dir, "%s", path) >= sizeof dir)
        return dlc__errorf(DLC_EINVAL, "%s: path too long", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    return open_held_dir(AT_FDCWD, dir, dir, what, fd_out);
}

dlc_status dlc__open_dir_at(int dirfd, const char *path, const char *what, int *fd_out)
{
    return open_held_dir(dirfd, dlc__at_name(dirfd, path), path, what, fd_out);
}
