/* Bounded lock waits: flock with LOCK_NB and short sleeps, a deadline, a cancel hook, and the
 * holder named from /proc/locks (issue 32: a lock held by someone else held training jobs, their
 * close() and Ctrl-C for as long as it was held). */
#include "common.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

/* Between two tries: from 1 ms (a lock held for an instant, as the stream cache's is, is taken
 * about as soon as it is free), doubling up to 50 ms (short enough that close() and Ctrl-C are
 * answered at once, long enough that a long wait costs nothing). */
#define LOCK_POLL_FIRST_NS 1000000L
#define LOCK_POLL_NS 50000000L

void dlc__lock_holder(int fd, char *out, size_t cap)
{
    snprintf(out, cap, "an unknown process");
    struct stat st;
    FILE *f = fstat(fd, &st) == 0 ? fopen("/proc/locks", "re") : NULL;
    if (!f)
        return;
    char line[512];
    long pid = -1;
    while (fgets(line, sizeof line, f)) {
        /* "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's line has "->" after the
         * number: it does not hold the lock. */
        char kind[16], mode[16], rw[16];
        long p = 0;
        unsigned maj = 0, min = 0;
        unsigned long long ino = 0;
        if (strstr(line, "->"))
            continue;
        const char *colon = strchr(line, ':');
        if (!colon || sscanf(colon + 1, "%15s %15s %15s %ld %x:%x:%llu", kind, mode, rw, &p, &maj,
                             &min, &ino) != 7)
            continue;
        if (ino == (unsigned long long)st.st_ino && maj == major(st.st_dev) &&
            min == minor(st.st_dev) && p > 0) {
            pid = p;
            break;
        }
    }
    fclose(f);
    if (pid <= 0)
        return;
    char path[64], comm[64] = "";
    snprintf(path, sizeof path, "/proc/%ld/comm", pid);
    FILE *c = fopen(path, "re");
    if (c) {
        if (!fgets(comm, sizeof comm, c))
            comm[0] = '\0';
        fclose(c);
    }
    comm[strcspn(comm, "\n")] = '\0';
    const char *self = pid == (long)getpid() ? "this process, " : "";
    if (comm[0])
        snprintf(out, cap, "%sprocess %ld (%s)", self, pid, comm);
    else
        snprintf(out, cap, "%sprocess %ld", self, pid);
}

dlc_status dlc__flock_wait(int fd, int op, const char *path, double timeout_s,
                           dlc__lock_cancel_fn cancel, dlc__lock_alive_fn alive, void *user,
                           const char *why)
{
    const double t0 = dlc__now_s();
    double since = t0;
    long pause_ns = LOCK_POLL_FIRST_NS;
    for (;;) {
        if (flock(fd, op | LOCK_NB) == 0)
            return DLC_OK;
        if (errno != EWOULDBLOCK && errno != EINTR)
            return dlc__errorf(-errno, "%s: flock: %s", path, strerror(errno));
        if (cancel && cancel(user))
            return dlc__errorf(DLC_ECANCELED, "%s: waiting for the lock: canceled", path);
        const double now = dlc__now_s();
        if (alive && alive(user))
            since = now;
        if (now - since >= timeout_s) {
            char holder[128];
            dlc__lock_holder(fd, holder, sizeof holder);
            return dlc__errorf(-ETIMEDOUT, "%s: locked by %s; gave up after %.0f s: %s", path,
                               holder, now - t0, why);
        }
        const struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        pause_ns = pause_ns * 2 < LOCK_POLL_NS ? pause_ns * 2 : LOCK_POLL_NS;
    }
}
