/* faultinject: an LD_PRELOAD interposer that makes chosen write-side system
 * calls fail, so that the end-to-end tests (tests/e2e/fault_*.sh) can show
 * what cachebuild and cachewarm do when a write, a sync, a preallocation or
 * the final rename fails at any point, on a disk that is in fact fine.
 *
 * Interposed: write, pwrite(64), writev, pwritev(64), fsync, fdatasync,
 * rename, renameat, fallocate(64), posix_fallocate(64). Calls reach the real
 * libc functions through dlsym(RTLD_NEXT) unless a fault is due.
 *
 * Environment (read once, at the first interposed call):
 *   DLC_FAULT_CALLS  comma-separated names of the calls that may fail
 *                    ("pwrite,fsync"); "pwrite" also covers pwrite64,
 *                    pwritev and pwritev64, "write" also writev,
 *                    "fallocate" also posix_fallocate. Unset: no fault.
 *   DLC_FAULT_PATH   only calls on a file whose path contains this text
 *                    (the fd's /proc/self/fd link, or rename's old or new
 *                    name); unset: every file. Calls on descriptors that are
 *                    not files (pipes, sockets, terminals) never match, so
 *                    stdout and stderr keep working.
 *   DLC_FAULT_AT     the matching call, counted from 1 across all threads,
 *                    that fails (default 1).
 *   DLC_FAULT_STICKY 1: every matching call after that one fails too (a
 *                    disk that stays full); default 0: only that one.
 *   DLC_FAULT_ERRNO  ENOSPC (default), EIO, EDQUOT, EFBIG or EROFS.
 *   DLC_FAULT_KILL   1: the call that is due does not fail; it is made, and then the process
 *                    is killed with SIGKILL: a crash just after that call, at an exact point
 *                    (rename and renameat only; other calls fail as above).
 *   DLC_FAULT_LOG    a file that gets one line per injected fault and, at
 *                    exit, "matched N" (how many calls matched), so a test
 *                    can check that the fault really happened and learn how
 *                    many points it can fail at.
 *
 * A failed call has no effect at all (nothing written), like ENOSPC before
 * the first byte. This is a test tool: it is not installed. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define DLC_FI_API __attribute__((visibility("default")))

static struct {
    char calls[256];
    char path[512];
    unsigned long at;
    int sticky;
    int err;
    int kill;
    char log[512];
} cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static atomic_ulong matched;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off64_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_fallocate64)(int, int, off64_t, off64_t);
static int (*real_posix_fallocate)(int, off_t, off_t);
static int (*real_posix_fallocate64)(int, off64_t, off64_t);

/* The real function, looked up once. dlsym cannot fail for these in a
 * process linked with libc; if it did, abort is the honest answer. */
#define REAL(name)                                                                                 \
    do {                                                                                           \
        if (!real_##name) {                                                                        \
            *(void **)&real_##name = dlsym(RTLD_NEXT, #name);                                      \
            if (!real_##name)                                                                      \
                abort();                                                                           \
        }                                                                                          \
    } while (0)

static void log_line(const char *fmt, ...)
{
    if (!cfg.log[0])
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n <= 0)
        return;
    /* Our own descriptor and the real write: a log line must never be a
     * candidate for a fault, nor recurse into this file. */
    const int fd = open(cfg.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    REAL(write);
    (void)!real_write(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    close(fd);
}

static void at_exit_summary(void)
{
    log_line("matched %lu\n", (unsigned long)atomic_load(&matched));
}

static void load_cfg(void)
{
    const char *v = getenv("DLC_FAULT_CALLS");
    if (v)
        snprintf(cfg.calls, sizeof cfg.calls, ",%s,", v);
    v = getenv("DLC_FAULT_PATH");
    if (v)
        snprintf(cfg.path, sizeof cfg.path, "%s", v);
    v = getenv("DLC_FAULT_AT");
    cfg.at = v ? strtoul(v, NULL, 10) : 1;
    v = getenv("DLC_FAULT_STICKY");
    cfg.sticky = v && *v == '1';
    v = getenv("DLC_FAULT_ERRNO");
    cfg.err = ENOSPC;
    if (v && strcmp(v, "EIO") == 0)
        cfg.err = EIO;
    else if (v && strcmp(v, "EDQUOT") == 0)
        cfg.err = EDQUOT;
    else if (v && strcmp(v, "EFBIG") == 0)
        cfg.err = EFBIG;
    else if (v && strcmp(v, "EROFS") == 0)
        cfg.err = EROFS;
    v = getenv("DLC_FAULT_KILL");
    cfg.kill = v && *v == '1';
    v = getenv("DLC_FAULT_LOG");
    if (v) {
        snprintf(cfg.log, sizeof cfg.log, "%s", v);
        atexit(at_exit_summary);
    }
}

static int wants(const char *family)
{
    char key[64];
    snprintf(key, sizeof key, ",%s,", family);
    return cfg.calls[0] && strstr(cfg.calls, key) != NULL;
}

/* Does descriptor @p fd name a regular file whose path matches? */
static int fd_matches(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
        return 0;
    if (!cfg.path[0])
        return 1;
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0)
        return 0;
    target[n] = '\0';
    return strstr(target, cfg.path) != NULL;
}

/* Should this call fail? @p fd >= 0 for calls on a descriptor; else the
 * names of a rename. Sets errno when it says yes. */
static int fault(const char *family, const char *name, int fd, const char *a, const char *b)
{
    pthread_once(&cfg_once, load_cfg);
    if (!wants(family))
        return 0;
    int match;
    if (fd >= 0)
        match = fd_matches(fd);
    else
        match = !cfg.path[0] || (a && strstr(a, cfg.path)) || (b && strstr(b, cfg.path));
    if (!match)
        return 0;
    const unsigned long n = atomic_fetch_add(&matched, 1) + 1;
    if (n == cfg.at || (cfg.sticky && n > cfg.at)) {
        log_line("fault %s call %lu fd %d %s: %s\n", name, n, fd, a ? a : "", strerror(cfg.err));
        errno = cfg.err;
        return 1;
    }
    return 0;
}

DLC_FI_API ssize_t write(int fd, const void *buf, size_t n)
{
    REAL(write);
    if (fault("write", "write", fd, NULL, NULL))
        return -1;
    return real_write(fd, buf, n);
}

DLC_FI_API ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    REAL(writev);
    if (fault("write", "writev", fd, NULL, NULL))
        return -1;
    return real_writev(fd, iov, cnt);
}

DLC_FI_API ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    REAL(pwrite);
    if (fault("pwrite", "pwrite", fd, NULL, NULL))
        return -1;
    return real_pwrite(fd, buf, n, off);
}

DLC_FI_API ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
    REAL(pwrite64);
    if (fault("pwrite", "pwrite64", fd, NULL, NULL))
        return -1;
    return real_pwrite64(fd, buf, n, off);
}

DLC_FI_API ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    REAL(pwritev);
    if (fault("pwrite", "pwritev", fd, NULL, NULL))
        return -1;
    return real_pwritev(fd, iov, cnt, off);
}

DLC_FI_API ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off)
{
    REAL(pwritev64);
    if (fault("pwrite", "pwritev64", fd, NULL, NULL))
        return -1;
    return real_pwritev64(fd, iov, cnt, off);
}

DLC_FI_API int fsync(int fd)
{
    REAL(fsync);
    if (fault("fsync", "fsync", fd, NULL, NULL))
        return -1;
    return real_fsync(fd);
}

DLC_FI_API int fdatasync(int fd)
{
    REAL(fdatasync);
    if (fault("fdatasync", "fdatasync", fd, NULL, NULL))
        return -1;
    return real_fdatasync(fd);
}

/* A rename that is due with DLC_FAULT_KILL: made, then the process dies at once (no atexit
 * handler runs, as in a crash). */
static int killed_after(int rc)
{
    log_line("killed after the call (it returned %d)\n", rc);
    raise(SIGKILL);
    return rc;
}

DLC_FI_API int rename(const char *from, const char *to)
{
    REAL(rename);
    if (fault("rename", "rename", -1, from, to)) {
        if (!cfg.kill)
            return -1;
        return killed_after(real_rename(from, to));
    }
    return real_rename(from, to);
}

DLC_FI_API int renameat(int dfd1, const char *from, int dfd2, const char *to)
{
    REAL(renameat);
    if (fault("rename", "renameat", -1, from, to)) {
        if (!cfg.kill)
            return -1;
        return killed_after(real_renameat(dfd1, from, dfd2, to));
    }
    return real_renameat(dfd1, from, dfd2, to);
}

DLC_FI_API int fallocate(int fd, int mode, off_t off, off_t len)
{
    REAL(fallocate);
    if (fault("fallocate", "fallocate", fd, NULL, NULL))
        return -1;
    return real_fallocate(fd, mode, off, len);
}

DLC_FI_API int fallocate64(int fd, int mode, off64_t off, off64_t len)
{
    REAL(fallocate64);
    if (fault("fallocate", "fallocate64", fd, NULL, NULL))
        return -1;
    return real_fallocate64(fd, mode, off, len);
}

/* posix_fallocate returns the error instead of setting errno. */
DLC_FI_API int posix_fallocate(int fd, off_t off, off_t len)
{
    REAL(posix_fallocate);
    if (fault("fallocate", "posix_fallocate", fd, NULL, NULL))
        return errno;
    return real_posix_fallocate(fd, off, len);
}

DLC_FI_API int posix_fallocate64(int fd, off64_t off, off64_t len)
{
    REAL(posix_fallocate64);
    if (fault("fallocate", "posix_fallocate64", fd, NULL, NULL))
        return errno;
    return real_posix_fallocate64(fd, off, len);
}
