/* The warm part's small pieces: Content-Range parsing, URL redaction and
 * encoding, error-body descriptions, retry classes, backoff bounds, the
 * resume journal (torn tails, foreign headers) and the sidecar. */
#include "tmpdir_util.h"
#include "warm_internal.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

Test(warm_parse, content_range)
{
    uint64_t a, b, t;
    cr_assert_eq(dlc__warm_parse_content_range("bytes 0-9/100", &a, &b, &t), 0);
    cr_assert(a == 0 && b == 9 && t == 100);
    cr_assert_eq(dlc__warm_parse_content_range(" bytes 90-99/100\r\n", &a, &b, &t), 0);
    cr_assert(a == 90 && b == 99 && t == 100);
    cr_assert_eq(dlc__warm_parse_content_range("bytes 5-9/*", &a, &b, &t), 0);
    cr_assert(t == UINT64_MAX);
    cr_assert_eq(dlc__warm_parse_content_range("bytes */42", &a, &b, &t), 0);
    cr_assert(a == UINT64_MAX && t == 42);
    /* Malformed or impossible. */
    cr_assert_eq(dlc__warm_parse_content_range("bytes 9-5/100", &a, &b, &t), -1);
    cr_assert_eq(dlc__warm_parse_content_range("bytes 0-100/100", &a, &b, &t), -1);
    cr_assert_eq(dlc__warm_parse_content_range("bytes */*", &a, &b, &t), -1);
    cr_assert_eq(dlc__warm_parse_content_range("items 0-9/100", &a, &b, &t), -1);
    cr_assert_eq(dlc__warm_parse_content_range("bytes 0-9/100x", &a, &b, &t), -1);
    cr_assert_eq(dlc__warm_parse_content_range("bytes 0-99999999999999999999/1", &a, &b, &t), -1);
    cr_assert_eq(dlc__warm_parse_content_range("", &a, &b, &t), -1);
}

Test(warm_parse, redact_url)
{
    char buf[256];
    cr_assert_str_eq(
        dlc_warm_redact_url("https://h/p/o.dlc?X-Amz-Signature=abc&x=1", buf, sizeof buf),
        "https://h/p/o.dlc?REDACTED");
    cr_assert_str_eq(dlc_warm_redact_url("https://user:pw@h:8443/o#frag", buf, sizeof buf),
                     "https://REDACTED@h:8443/o");
    cr_assert_str_eq(dlc_warm_redact_url("s3://b/k", buf, sizeof buf), "s3://b/k");
    cr_assert_str_eq(dlc_warm_redact_url("http://h/a@b", buf, sizeof buf), "http://h/a@b");
    /* Truncation never leaks the query. */
    char small[12];
    dlc_warm_redact_url("https://h/?secret", small, sizeof small);
    cr_assert_null(strstr(small, "secret"));
}

Test(warm_parse, urlencode)
{
    char *s = dlc__warm_urlencode("a b/c+d~e.f_g-h%", 1);
    cr_assert_str_eq(s, "a%20b/c%2Bd~e.f_g-h%25");
    free(s);
    s = dlc__warm_urlencode("a/b", 0);
    cr_assert_str_eq(s, "a%2Fb");
    free(s);
    s = dlc__warm_urlencode("\xc3\xa9", 0);
    cr_assert_str_eq(s, "%C3%A9");
    free(s);
}

Test(warm_parse, describe_body)
{
    char out[256];
    const char *xml = "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>The "
                      "specified key does not exist.</Message><Key>k</Key></Error>";
    dlc__warm_describe_body(xml, strlen(xml), out, sizeof out);
    cr_assert_str_eq(out, "NoSuchKey: The specified key does not exist.");
    const char *json = "{\"error\": {\"code\": 403, \"message\": \"Invalid \\\"x\\\"\"}}";
    dlc__warm_describe_body(json, strlen(json), out, sizeof out);
    cr_assert_str_eq(out, "Invalid \"x\"");
    /* Another body: its first line only (a proxy may echo the request's headers after it). */
    const char *text = "plain\r\ntext";
    dlc__warm_describe_body(text, strlen(text), out, sizeof out);
    cr_assert_str_eq(out, "plain");
    dlc__warm_describe_body("", 0, out, sizeof out);
    cr_assert_str_eq(out, "");
    /* An unterminated tag is not read past the body. */
    const char *cut = "<Code>NoSuch";
    dlc__warm_describe_body(cut, strlen(cut), out, sizeof out);
    cr_assert_str_eq(out, "<Code>NoSuch");
}

Test(warm_parse, retry_classes_and_backoff)
{
    cr_assert(dlc__warm_retryable_http(500));
    cr_assert(dlc__warm_retryable_http(503));
    cr_assert(dlc__warm_retryable_http(429));
    cr_assert_not(dlc__warm_retryable_http(403));
    cr_assert_not(dlc__warm_retryable_http(404));
    cr_assert_not(dlc__warm_retryable_http(416));
    cr_assert(dlc__warm_retryable_curl(CURLE_OPERATION_TIMEDOUT));
    cr_assert(dlc__warm_retryable_curl(CURLE_RECV_ERROR));
    cr_assert_not(dlc__warm_retryable_curl(CURLE_PEER_FAILED_VERIFICATION));
    uint64_t rng = 1;
    for (unsigned a = 1; a < 20; a++) {
        double cap = 0.1;
        for (unsigned i = 1; i < a && cap < 5.0; i++)
            cap *= 2;
        if (cap > 5.0)
            cap = 5.0;
        for (int k = 0; k < 50; k++) {
            const double d = dlc__warm_backoff(a, &rng);
            cr_assert(d >= cap * 0.5 && d <= cap, "attempt %u: %f", a, d);
        }
    }
}

static off_t file_size(const char *p)
{
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    return st.st_size;
}

/* Does @p have hold exactly the runs [off, off + len) listed in @p want? */
static int ranges_are(const dlc__warm_ranges *have, const dlc__warm_range *want, size_t n)
{
    if (have->n != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (have->v[i].off != want[i].off || have->v[i].len != want[i].len)
            return 0;
    return 1;
}

Test(warm_parse, journal_resume_torn_tail_and_foreign_header)
{
    char *dir = tmp_mkdtemp();
    char path[512];
    snprintf(path, sizeof path, "%s/x.warm-journal", dir);
    const dlc__warm_journal_id id = {.size = 1000,
                                     .id = dlc__warm_journal_key("s3://b/k", "\"e1\"")};
    dlc__warm_ranges have = {0};
    uint64_t resumed = 99;
    int fd = -1;
    cr_assert_eq(dlc__warm_journal_open(path, &id, &have, &resumed, &fd), DLC_OK);
    cr_assert_eq(resumed, 0);
    const dlc__warm_range chunks[] = {{300, 100}, {700, 100}, {0, 100}};
    cr_assert_eq(dlc__warm_journal_append(fd, path, &id, chunks, 3), DLC_OK);
    close(fd);
    cr_assert_eq(file_size(path), 32 + 3 * 24);

    /* A crash in the middle of an append leaves a torn record: ignored and cut. */
    const int a = open(path, O_WRONLY | O_APPEND);
    cr_assert_eq(write(a, "\x05\x00\x00\x00\x00\x00\x00\x00\x01\x02", 10), 10);
    close(a);
    cr_assert_eq(dlc__warm_journal_open(path, &id, &have, &resumed, &fd), DLC_OK);
    cr_assert_eq(resumed, 300);
    const dlc__warm_range three[] = {{0, 100}, {300, 100}, {700, 100}};
    cr_assert(ranges_are(&have, three, 3));
    cr_assert_eq(file_size(path), 32 + 3 * 24);
    const dlc__warm_range more[] = {{500, 100}};
    cr_assert_eq(dlc__warm_journal_append(fd, path, &id, more, 1), DLC_OK);
    close(fd);
    cr_assert_eq(dlc__warm_journal_open(path, &id, &have, &resumed, &fd), DLC_OK);
    cr_assert_eq(resumed, 400);
    close(fd);

    /* Another ETag (the object changed): the journal is started over. */
    const dlc__warm_journal_id other = {.size = 1000,
                                        .id = dlc__warm_journal_key("s3://b/k", "\"e2\"")};
    cr_assert_eq(dlc__warm_journal_open(path, &other, &have, &resumed, &fd), DLC_OK);
    cr_assert_eq(resumed, 0);
    cr_assert_eq(have.n, 0);
    cr_assert_eq(file_size(path), 32);
    cr_assert_eq(dlc__warm_journal_append(fd, path, &other, more, 1), DLC_OK);
    close(fd);
    /* Another size: also started over. (Another chunk size no longer is: the
     * records are byte ranges; see test_warm_journal.c.) */
    const dlc__warm_journal_id resized = {.size = 2000, .id = other.id};
    cr_assert_eq(dlc__warm_journal_open(path, &resized, &have, &resumed, &fd), DLC_OK);
    cr_assert_eq(resumed, 0);
    cr_assert_eq(file_size(path), 32);
    close(fd);
    dlc__warm_ranges_free(&have);
    tmp_rmdir(dir);
}

Test(warm_parse, sidecar_round_trip)
{
    char *dir = tmp_mkdtemp();
    char dest[512], sidecar[512];
    snprintf(dest, sizeof dest, "%s/d.dlc", dir);
    snprintf(sidecar, sizeof sidecar, "%s/d.dlc.warm", dir);
    FILE *f = fopen(dest, "w");
    fputs("12345", f);
    fclose(f);
    dlc__warm_sidecar sc;
    memset(&sc, 0, sizeof sc);
    strcpy(sc.source, "s3://b/k");
    strcpy(sc.etag, "\"abc\"");
    sc.size = 5;
    cr_assert_eq(dlc__warm_sidecar_stat(dest, &sc), DLC_OK);
    cr_assert_eq(dlc__warm_sidecar_write(sidecar, &sc), DLC_OK);
    dlc__warm_sidecar back;
    cr_assert_eq(dlc__warm_sidecar_read(sidecar, &back), DLC_OK);
    cr_assert_str_eq(back.source, "s3://b/k");
    cr_assert_str_eq(back.etag, "\"abc\"");
    cr_assert_eq(back.size, 5);
    cr_assert_eq(back.inode, sc.inode);
    cr_assert_eq(back.mtime_ns, sc.mtime_ns);
    /* The size no longer matches once the file changes. */
    back.size = 6;
    cr_assert_eq(dlc__warm_sidecar_stat(dest, &back), DLC_ECHANGED);
    /* Garbage is not a sidecar. */
    f = fopen(sidecar, "w");
    fputs("dlcache-warm 1\nsource x\n", f);
    fclose(f);
    cr_assert_eq(dlc__warm_sidecar_read(sidecar, &back), DLC_ENOTFOUND);
    tmp_rmdir(dir);
}

/* A long ETag is kept as a digest of the whole value, never cut: two that share their first 200
 * bytes stay different, and neither equals the 127-byte cut that versions before this one kept
 * (in a sidecar or a journal's key), so such old records are never taken for a match. */
Test(warm_parse, long_etag_kept_whole_as_a_digest)
{
    char a[301], b[301], ka[DLC__WARM_ETAG_MAX], kb[DLC__WARM_ETAG_MAX], again[DLC__WARM_ETAG_MAX];
    memset(a, 'p', 300);
    a[0] = a[299] = '"';
    a[300] = '\0';
    memcpy(b, a, sizeof a);
    b[250] = 'q';
    dlc__warm_etag_keep(a, 300, ka);
    dlc__warm_etag_keep(b, 300, kb);
    dlc__warm_etag_keep(a, 300, again);
    cr_assert_str_neq(ka, kb);
    cr_assert_str_eq(ka, again);
    cr_assert(strncmp(ka, DLC__WARM_ETAG_DIGEST, strlen(DLC__WARM_ETAG_DIGEST)) == 0, "%s", ka);
    cr_assert_eq(strlen(ka), strlen(DLC__WARM_ETAG_DIGEST) + 32);
    cr_assert(strncmp(ka, a, 127) != 0);
    /* A change past byte 127 only: what a cut would have hidden. */
    b[250] = 'p';
    b[200] = 'r';
    dlc__warm_etag_keep(b, 300, kb);
    cr_assert_str_neq(ka, kb);

    /* One that fits is kept as it is, also at the largest size; one byte more is a digest. */
    char k[DLC__WARM_ETAG_MAX];
    dlc__warm_etag_keep("\"abc\"", 5, k);
    cr_assert_str_eq(k, "\"abc\"");
    dlc__warm_etag_keep(a, DLC__WARM_ETAG_MAX - 1, k);
    cr_assert_eq(strlen(k), DLC__WARM_ETAG_MAX - 1);
    cr_assert(memcmp(k, a, DLC__WARM_ETAG_MAX - 1) == 0);
    dlc__warm_etag_keep(a, DLC__WARM_ETAG_MAX, k);
    cr_assert(strncmp(k, DLC__WARM_ETAG_DIGEST, strlen(DLC__WARM_ETAG_DIGEST)) == 0, "%s", k);
    /* A server's short ETag shaped like the digest form is hashed too: it cannot pose as the
     * kept form of a long one. */
    dlc__warm_etag_keep(ka, strlen(ka), k);
    cr_assert_str_neq(k, ka);
    cr_assert(strncmp(k, DLC__WARM_ETAG_DIGEST, strlen(DLC__WARM_ETAG_DIGEST)) == 0, "%s", k);
    dlc__warm_etag_keep("", 0, k);
    cr_assert_str_eq(k, "");

    /* The digest form is never sent back (If-Match) and is not an S3 MD5 ETag. */
    cr_assert_eq(dlc__warm_etag_sendable(ka), 0);
    cr_assert_eq(dlc__warm_etag_sendable("W/\"abc\""), 0);
    cr_assert_eq(dlc__warm_etag_sendable(""), 0);
    cr_assert_eq(dlc__warm_etag_sendable("\"abc\""), 1);
    uint8_t md5[16];
    uint32_t parts;
    cr_assert_eq(dlc__warm_etag_parse(ka, md5, &parts), -1);
    cr_assert_eq(
        dlc__warm_etag_parse(DLC__WARM_ETAG_DIGEST "900150983cd24fb0d6963f7d28e17f72", md5, &parts),
        -1);

    /* The request headers: If-Match for a server's ETag, none for the digest form. */
    dlc__warm_source src;
    memset(&src, 0, sizeof src);
    src.send_if_match = 1;
    struct curl_slist *h = NULL;
    cr_assert_eq(dlc__warm_request_headers(&src, 0, 9, "\"abc\"", &h), DLC_OK);
    int if_match = 0;
    for (const struct curl_slist *s = h; s; s = s->next)
        if_match += strcmp(s->data, "If-Match: \"abc\"") == 0;
    curl_slist_free_all(h);
    cr_assert_eq(if_match, 1);
    cr_assert_eq(dlc__warm_request_headers(&src, 0, 9, ka, &h), DLC_OK);
    for (const struct curl_slist *s = h; s; s = s->next)
        cr_assert(strncmp(s->data, "If-Match", 8) != 0, "sent %s", s->data);
    curl_slist_free_all(h);
}

/* Shard names a set's index may not use in cachewarm: those of its own files in and beside the
 * set's folder (X and X.warm-next would share X.warm-next.warm-part; index.dlcset would be
 * written over the index). */
Test(warm_parse, shard_names_kept_for_bookkeeping)
{
    static const char *const kept[] = {"index.dlcset",   "index.dlcset.warm-new",
                                       "index.dlcsetx",  "a.warm",
                                       "a.lock",         "a.warm-part",
                                       "a.warm-journal", "part-00000-of-00002.dlc.warm-next"};
    static const char *const shards[] = {
        "part-00000-of-00002.dlc", "a", "warm", ".lock.dlc", "a.warmth", "lock", "index.dlc"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        cr_assert(dlc__warm_set_name_kept(kept[i]), "%s", kept[i]);
    for (size_t i = 0; i < sizeof shards / sizeof shards[0]; i++)
        cr_assert(!dlc__warm_set_name_kept(shards[i]), "%s", shards[i]);
}
