/* dlc__url_child(): the URL of a set's object from the set's URL (common/url_child.c). The name
 * goes into the path, before an https URL's query string, which is kept. */
#include "common.h"

#include <criterion/criterion.h>
#include <string.h>

static void expect(const char *base, const char *name, const char *want)
{
    char buf[256];
    const size_t n = dlc__url_child(base, name, buf, sizeof buf);
    cr_expect_str_eq(buf, want, "%s + %s", base, name);
    cr_expect_eq(n, strlen(want), "%s + %s: length %zu", base, name, n);
}

Test(url_child, s3_and_gs_prefixes)
{
    expect("s3://bucket/sets/a", "shard-0.dlc", "s3://bucket/sets/a/shard-0.dlc");
    expect("s3://bucket/sets/a/", "index.dlcset", "s3://bucket/sets/a/index.dlcset");
    expect("gs://bucket/a//", "x", "gs://bucket/a/x");
    expect("gs://bucket", "x", "gs://bucket/x");
}

Test(url_child, object_store_keys_may_hold_a_question_mark)
{
    /* In s3:// and gs:// URLs everything after the bucket is the key; '?' included. */
    expect("s3://bucket/what?/now#1", "x", "s3://bucket/what?/now#1/x");
}

Test(url_child, https_without_a_query)
{
    expect("https://host:8443/sets/a", "x.dlc", "https://host:8443/sets/a/x.dlc");
    expect("https://host/sets/a///", "x.dlc", "https://host/sets/a/x.dlc");
    expect("https://host", "x.dlc", "https://host/x.dlc");
    expect("https://host/", "x.dlc", "https://host/x.dlc");
}

Test(url_child, https_query_stays_after_the_name)
{
    expect("https://host/sets/a?token=T&x=1", "x.dlc", "https://host/sets/a/x.dlc?token=T&x=1");
    expect("https://host/sets/a/?token=T", "index.dlcset",
           "https://host/sets/a/index.dlcset?token=T");
    expect("HTTP://host/a?t=1/2", "x", "HTTP://host/a/x?t=1/2");
    expect("https://host/a#frag", "x", "https://host/a/x#frag");
    expect("https://host/a?q#frag", "x", "https://host/a/x?q#frag");
    expect("https://host?t=1", "x", "https://host/x?t=1");
}

Test(url_child, redacted_urls_join_the_same_way)
{
    /* The shown URL of a message is built from the redacted set URL: the secret stays out. */
    char shown[256], url[256];
    dlc__redact_url("https://host/sets/a?token=s3cr3t", shown, sizeof shown);
    dlc__url_child(shown, "x.dlc", url, sizeof url);
    cr_expect_null(strstr(url, "s3cr3t"), "%s", url);
    cr_expect_not_null(strstr(url, "/sets/a/x.dlc?"), "%s", url);
}

Test(url_child, reports_a_cut)
{
    char buf[16];
    const size_t n = dlc__url_child("https://host/sets/a?token=T", "x.dlc", buf, sizeof buf);
    cr_expect_eq(n, strlen("https://host/sets/a/x.dlc?token=T"));
    cr_expect_geq(n, sizeof buf);
    cr_expect_eq(strlen(buf), sizeof buf - 1);
}
