/* Temporary directories for the Criterion tests: tests/lib/test_util.h's helpers with Criterion's
 * assertions, so a test reads `dir = tmp_mkdtemp();`. Header-only, so each test program stays one
 * file. */
#ifndef DLCACHE_TEST_TMPDIR_UTIL_H
#define DLCACHE_TEST_TMPDIR_UTIL_H

#include "test_util.h"

#include <criterion/criterion.h>
#include <stdlib.h>

/* A fresh directory under /tmp; remove it with tmp_rmdir(). */
static inline char *tmp_mkdtemp(void)
{
    char *d = tu_mkdtemp();
    cr_assert(d != NULL, "mkdtemp under /tmp failed");
    return d;
}

/* Remove @p d and everything under it, and free the name. Accepts NULL. */
static inline void tmp_rmdir(char *d)
{
    tu_rmtree(d);
    free(d);
}

/* "dir/name", malloc'd. */
static inline char *tmp_path(const char *dir, const char *name)
{
    char *p = tu_path(dir, name);
    cr_assert(p != NULL);
    return p;
}

/* A Criterion suite whose every test finds a fresh temporary directory in `dir`, removed after
 * the test, whatever it left there. */
#define TMPDIR_SUITE(suite)                                                                        \
    static char *dir;                                                                              \
    static void suite##_setup(void)                                                                \
    {                                                                                              \
        dir = tmp_mkdtemp();                                                                       \
    }                                                                                              \
    static void suite##_teardown(void)                                                             \
    {                                                                                              \
        tmp_rmdir(dir);                                                                            \
        dir = NULL;                                                                                \
    }                                                                                              \
    TestSuite(suite, .init = suite##_setup, .fini = suite##_teardown)

#endif /* DLCACHE_TEST_TMPDIR_UTIL_H */
