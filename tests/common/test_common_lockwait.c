/* Bounded lock waits (common/lockwait.c, issue 32): dlc__flock_wait() takes a free lock at once,
 * ends a wait for a lock another process holds at its bound or when its cancel hook says stop,
 * and names the lock file and the holder (its PID, from /proc/locks). The holder is a real child
 * process holding flock(LOCK_EX). */
#include "common.h"
#include "tmpdir_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

TMPDIR_SUITE(lockwait);

/* A child that holds flock(LOCK_EX) on @p path until killed; returns once it holds it. */
static pid_t hold(const char *path)
{
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    const pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        const int fd = open(path, O_RDWR | O_CREAT, 0644);
        if (fd < 0 || flock(fd, LOCK_EX) < 0)
            _exit(1);
        if (write(ready[1], "x", 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    char c = 0;
    cr_assert_eq(read(ready[0], &c, 1), 1, "the holder did not take the lock");
    close(ready[0]);
    close(ready[1]);
    return pid;
}

static void end(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static int cancel_after_three(void *user)
{
    int *calls = user;
    return ++*calls >= 3;
}

Test(lockwait, a_free_lock_is_taken_at_once)
{
    char *path = tmp_path(dir, "free.lock");
    const int fd = open(path, O_RDWR | O_CREAT, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(dlc__flock_wait(fd, LOCK_EX, path, 0.0, NULL, NULL, NULL, "why"), DLC_OK);
    close(fd);
    free(path);
}

Test(lockwait, a_held_lock_ends_at_the_bound_naming_file_and_holder)
{
    char *path = tmp_path(dir, "held.lock");
    const pid_t pid = hold(path);
    const int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    const dlc_status rc =
        dlc__flock_wait(fd, LOCK_EX, path, 0.2, NULL, NULL, NULL, "something holds it");
    char want[64];
    snprintf(want, sizeof want, "process %ld", (long)pid);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", dlc_errmsg());
    end(pid);
    close(fd);
    cr_assert_eq(rc, -ETIMEDOUT, "%d: %s", rc, msg);
    const int named = strstr(msg, path) && strstr(msg, want) && strstr(msg, "something holds it");
    free(path);
    cr_assert(named, "%s", msg);
}

Test(lockwait, the_cancel_hook_ends_the_wait)
{
    char *path = tmp_path(dir, "cancel.lock");
    const pid_t pid = hold(path);
    const int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    int calls = 0;
    /* The bound (an hour) is past the test's: only the hook can end the wait. */
    const dlc_status rc =
        dlc__flock_wait(fd, LOCK_SH, path, 3600.0, cancel_after_three, NULL, &calls, "why");
    end(pid);
    close(fd);
    free(path);
    cr_assert_eq(rc, DLC_ECANCELED, "%d: %s", rc, dlc_errmsg());
    cr_assert_eq(calls, 3);
}

Test(lockwait, the_holder_is_named_or_unknown)
{
    char *path = tmp_path(dir, "who.lock");
    const int fd = open(path, O_RDWR | O_CREAT, 0644);
    cr_assert_geq(fd, 0);
    char who[128];
    dlc__lock_holder(fd, who, sizeof who);
    cr_assert_str_eq(who, "an unknown process"); /* Nobody holds it. */
    const pid_t pid = hold(path);
    dlc__lock_holder(fd, who, sizeof who);
    end(pid);
    close(fd);
    free(path);
    char want[64];
    snprintf(want, sizeof want, "process %ld", (long)pid);
    cr_assert(strncmp(who, want, strlen(want)) == 0, "%s", who);
}
