/* The thread-local error detail of common/error.c: in a debug build (no NDEBUG)
 * a failure raised by FAIL_IF or dlc__errorf() records its file and line, each CHECK it passes adds
 * its own, and the message itself stays as written; a release build records nothing. Cleanup that
 * saves and restores the message keeps the site, and DLCACHE_ERROR_SITES=1 shows it after the
 * message. A message or log line longer than its buffer keeps its head and its end (the reason),
 * redacted whole before the cut, with no character split. */
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

/* 1 when @p s is well-formed UTF-8 (no character cut in two). */
static int utf8_whole(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        const int n = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : 4;
        if ((*p & 0xC0) == 0x80)
            return 0;
        for (int i = 1; i < n; i++)
            if ((p[i] & 0xC0) != 0x80)
                return 0;
        p += n;
    }
    return 1;
}

/* @p len bytes of @p c (or the two-byte "é" when @p c is 0), malloc'd. */
static char *repeat(char c, size_t len)
{
    char *s = malloc(len + 1);
    cr_assert_not_null(s);
    for (size_t i = 0; i < len; i++)
        s[i] = c ? c : (char)(i % 2 ? 0xA9 : 0xC3);
    s[len] = '\0';
    return s;
}

static int ends_with(const char *s, const char *end)
{
    const size_t n = strlen(s), e = strlen(end);
    return n >= e && strcmp(s + n - e, end) == 0;
}

Test(common_error, a_message_too_long_keeps_its_head_and_its_reason)
{
    /* A path near PATH_MAX fills the message buffer: cut at its end (before issue H7), the
     * message lost what it was saying about the path. */
    char *path = repeat('d', 4000);
    cr_assert_eq(dlc__errorf(DLC_EINVAL, "%s: path too long", path), DLC_EINVAL);
    const char *m = dlc_errmsg();
    cr_assert_lt(strlen(m), 1024);
    cr_assert(strncmp(m, "dddddddd", 8) == 0, "the head is gone: %.80s", m);
    cr_assert(strstr(m, "d ... d"), "no gap in %.80s", m);
    cr_assert(ends_with(m, "dddd: path too long"), "the reason is gone: ...%s", m + strlen(m) - 40);
    /* A message that fits is as written. */
    dlc__errorf(DLC_EINVAL, "%.1000s: path too long", path);
    cr_assert_eq(strlen(dlc_errmsg()), 1000 + strlen(": path too long"));
    cr_assert_null(strstr(dlc_errmsg(), " ... "));
    free(path);
}

Test(common_error, a_cut_never_shows_a_piece_of_a_secret_nor_splits_a_character)
{
    /* Redacted whole before the cut: the tail kept starts inside the query string, where
     * the redactor, seeing only the tail, would not know it for a secret. */
    char *pad = repeat('p', 500), *sig = repeat('S', 3000);
    dlc__errorf(-EIO, "https://example.com/%s?X-Amz-Signature=%s: HTTP 403", pad, sig);
    const char *m = dlc_errmsg();
    cr_assert_lt(strlen(m), 1024);
    cr_assert_null(strstr(m, "SSSS"), "a piece of the secret shows: %s", m);
    cr_assert(ends_with(m, ": HTTP 403"), "%s", m);
    free(pad);
    free(sig);
    /* Two-byte characters: neither edge of the gap splits one. */
    for (size_t odd = 0; odd < 2; odd++) {
        char *name = repeat(0, 4000);
        dlc__errorf(DLC_EINVAL, "%s%s: path too long", odd ? "x" : "", name);
        cr_assert(utf8_whole(dlc_errmsg()), "a character cut in two (offset %zu)", odd);
        cr_assert(ends_with(dlc_errmsg(), ": path too long"));
        free(name);
    }
}

static void keep_line(void *user, dlc_log_level level, const char *msg)
{
    (void)level;
    snprintf(user, 1024, "%s", msg);
}

Test(common_error, a_log_line_too_long_keeps_its_head_and_its_end)
{
    char line[1024] = "", *path = repeat('d', 3000);
    dlc__logf(keep_line, line, DLC_LOG_INFO, "%s: removed", path);
    cr_assert(strncmp(line, "dddd", 4) == 0 && ends_with(line, "dddd: removed"), "%s", line);
    cr_assert(strstr(line, " ... "));
    free(path);
}
