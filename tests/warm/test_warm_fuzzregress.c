/* What fuzz_warm found in the warm part's parsers, as plain tests that run in the normal and
 * ASan builds: a Content-Range whose start is UINT64_MAX, and URLs whose first "://" lies in the
 * path or query, whose query the redactor used to copy out. */
#include "warm_internal.h"

#include <criterion/criterion.h>
#include <string.h>

Test(warm_fuzzregress, content_range_start_at_uint64_max_is_refused)
{
    uint64_t a, b, t;
    cr_assert_eq(
        dlc__warm_parse_content_range(
            "bytes 18446744073709551615-18446744073709551615/18446744073709551615", &a, &b, &t),
        -1);
    cr_assert_eq(dlc__warm_parse_content_range("bytes 0-99/1000", &a, &b, &t), 0);
    cr_assert(a == 0 && b == 99 && t == 1000);
    cr_assert_eq(dlc__warm_parse_content_range("bytes */1000", &a, &b, &t), 0);
    cr_assert(a == UINT64_MAX && b == UINT64_MAX && t == 1000);
    cr_assert_eq(dlc__warm_parse_content_range("bytes 5-4/10", &a, &b, &t), -1);
    cr_assert_eq(dlc__warm_parse_content_range("bytes 0-10/10", &a, &b, &t), -1);
}

static const char *redact(const char *url)
{
    static char buf[512];
    return dlc_warm_redact_url(url, buf, sizeof buf);
}

Test(warm_fuzzregress, a_scheme_like_text_in_the_query_does_not_expose_it)
{
    cr_assert_str_eq(redact("host/obj?X-Amz-Signature=s3cr3t&u=https://cdn"), "host/obj?REDACTED");
    cr_assert_str_eq(redact("https:r no//user:pw@host/p?token=s3cr3t&next=https://x"),
                     "https:r no//user:pw@host/p?REDACTED");
    cr_assert_str_eq(redact("https://user:hunter22@host:8080/path/obj?token=s3cr3t#frag"),
                     "https://REDACTED@host:8080/path/obj?REDACTED");
    cr_assert_str_eq(redact("s3://bucket/key"), "s3://bucket/key");
    cr_assert_str_eq(redact("https://h/p?a=b://c"), "https://h/p?REDACTED");
    /* fuzz_warm's false alarm redact-query-joins-authority-marker: the query "/REDAC" is gone;
     * only the kept "//" next to the inserted marker spells it. */
    cr_assert_str_eq(redact("unte://r@hun?/REDAC"), "unte://REDACTED@hun?REDACTED");
}
