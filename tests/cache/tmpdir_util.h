/* Temporary directories for the Criterion tests of cache/: one copy, shared by
 * store_test_util.h and build_test_util.h. Header-only, so each test program
 * stays one file. */
#ifndef DLCACHE_TEST_TMPDIR_UTIL_H
#define DLCACHE_TEST_TMPDIR_UTIL_H

#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static inline int tmp_rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(p);
}

/* A fresh directory under /tmp; remove it with tmp_rmdir(). */
static inline char *tmp_mkdtemp(void)
{
    char *d = strdup("/tmp/dlc-test-XXXXXX");
    cr_assert(d && mkdtemp(d) != NULL);
    return d;
}

/* Remove @p d and everything under it, and free the name. Accepts NULL. */
static inline void tmp_rmdir(char *d)
{
    if (d)
        nftw(d, tmp_rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(d);
}

/* "dir/name", malloc'd. */
static inline char *tmp_path(const char *dir, const char *name)
{
    char *p = NULL;
    cr_assert(asprintf(&p, "%s/%s", dir, name) > 0);
    return p;
}

#endif /* DLCACHE_TEST_TMPDIR_UTIL_H */
