/* The thread-local error detail of common/error.c: in a debug build (no NDEBUG)
 * a failure raised by FAIL_IF or dlc__errorf() records its file and line, each CHECK it passes adds
 * its own, and the message itself stays as written; a release build records nothing. Cleanup that
 * saves and restores the message keeps the site, and DLCACHE_ERROR_SITES=1 shows it after the
 * message. */
#include "common.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int raise_line, check_line;

static dlc_status raise_if(int bad)
{
    dlc_status rc = DLC_OK;
    raise_line = __LINE__ + 1;
    FAIL_IF(bad, DLC_EINVAL, "raise_if: bad = %d", bad);
    return DLC_OK;
fail:
    return rc;
}

static dlc_status forward(dlc_status (*f)(int), int arg)
{
    dlc_status rc = DLC_OK;
    check_line = __LINE__ + 1;
    CHECK(f(arg));
    return DLC_OK;
fail:
    return rc;
}

/* A status returned without a message of its own. */
static dlc_status plain_errno(int e)
{
    return -e;
}

/* This file as the library names it: relative to the source root. */
static const char *this_file(void)
{
    const char *file = __FILE__; /* Not `__FILE__ + n`: clang's -Wstring-plus-int. */
    return file + strlen(DLC_TEST_SOURCE_DIR) + 1;
}

/* The site expected: raised at line @p raised of this file (0: "?", no message), then through
 * the CHECK at line @p checked (0: none). */
static void expect_site(int raised, int checked)
{
    char want[512];
    const int n = raised ? snprintf(want, sizeof want, "%s:%d", this_file(), raised)
                         : snprintf(want, sizeof want, "?");
    if (checked)
        snprintf(want + n, sizeof want - (size_t)n, " <- %s:%d", this_file(), checked);
#ifdef NDEBUG
    cr_assert_str_eq(dlc__errsite(), "", "a release build records no site");
#else
    cr_assert_str_eq(dlc__errsite(), want);
#endif
}

Test(common_error, fail_if_records_its_file_and_line_and_check_adds_its_own)
{
    dlc__clear_error();
    cr_assert_eq(raise_if(1), DLC_EINVAL);
    expect_site(raise_line, 0);
    cr_assert_eq(forward(raise_if, 1), DLC_EINVAL);
    expect_site(raise_line, check_line);
    /* The message is the caller's as written: no site in it. */
    cr_assert_str_eq(dlc_errmsg(), "raise_if: bad = 1");
    dlc__clear_error();
    cr_assert_str_eq(dlc__errsite(), "");
    cr_assert_str_eq(dlc_errmsg(), "");
}

Test(common_error, a_status_without_a_message_starts_its_site_at_the_check)
{
    dlc__clear_error();
    cr_assert_eq(forward(plain_errno, ENOENT), -ENOENT);
    expect_site(0, check_line);
    /* An older message of another status is not this failure's origin. */
    cr_assert_eq(raise_if(1), DLC_EINVAL);
    cr_assert_eq(forward(plain_errno, EIO), -EIO);
    expect_site(0, check_line);
}

Test(common_error, save_and_restore_keep_the_site_across_cleanup)
{
    cr_assert_eq(raise_if(1), DLC_EINVAL);
    dlc__errsave es;
    dlc__err_save(&es);
    dlc__errorf(DLC_ECORRUPT, "cleanup failed too");
    cr_assert_eq(dlc__err_restore(&es, DLC_EINVAL), DLC_EINVAL);
    cr_assert_str_eq(dlc_errmsg(), "raise_if: bad = 1");
    expect_site(raise_line, 0);
    /* The restored failure goes on through CHECKs as before. */
    dlc_status rc = DLC_OK;
    const int line = __LINE__ + 1;
    CHECK(dlc__err_restore(&es, DLC_EINVAL));
fail:
    cr_assert_eq(rc, DLC_EINVAL);
    expect_site(raise_line, line);
}

Test(common_error, sites_follow_the_message_only_when_asked)
{
    cr_assert_eq(forward(raise_if, 1), DLC_EINVAL);
    cr_assert_str_eq(dlc_errmsg(), "raise_if: bad = 1");
    cr_assert_eq(setenv("DLCACHE_ERROR_SITES", "1", 1), 0);
    char want[512];
#ifdef NDEBUG
    snprintf(want, sizeof want, "raise_if: bad = 1");
#else
    snprintf(want, sizeof want, "raise_if: bad = 1 [%s:%d <- %s:%d]", this_file(), raise_line,
             this_file(), check_line);
#endif
    cr_assert_str_eq(dlc_errmsg(), want);
    /* No message, no site shown. */
    dlc__clear_error();
    cr_assert_str_eq(dlc_errmsg(), "");
    cr_assert_eq(setenv("DLCACHE_ERROR_SITES", "0", 1), 0);
    cr_assert_eq(raise_if(1), DLC_EINVAL);
    cr_assert_str_eq(dlc_errmsg(), "raise_if: bad = 1");
}
