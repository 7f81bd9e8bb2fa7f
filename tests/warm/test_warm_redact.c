/* The library's one redaction (common/redact.c, exported as dlc_warm_redact_text(); here under
 * tests/warm/ beside the URL rule it shares): what each rule cuts, what it keeps (file names,
 * ordinary words), that running it twice changes nothing, that a cut buffer never ends in half a
 * secret, and that every error message and log line passes it (dlc__errorf(), dlc__logf()).
 * The inputs are what an endpoint that echoes the request's headers sends back. */
#include "common.h"
#include "warm_internal.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static const char *redact(const char *s)
{
    static char buf[2048];
    return dlc_warm_redact_text(s, buf, sizeof buf);
}

/* Neither @p text nor its redaction twice holds any of the secrets. */
static void assert_clean(const char *text)
{
    static const char *const secrets[] = {
        "PWSECRET",         "SIGSECRET",          "GCSBEARERTOKEN", "SESSIONTOKENXYZ",
        "AKIAEXAMPLEKEYID", "dXNlcjpQV1NFQ1JFVA", "c0ffee5ign",     "SECRETSECRET"};
    char once[2048], twice[2048];
    dlc_warm_redact_text(text, once, sizeof once);
    dlc_warm_redact_text(once, twice, sizeof twice);
    cr_assert_str_eq(once, twice, "not idempotent: '%s' then '%s'", once, twice);
    for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
        cr_assert_null(strstr(once, secrets[i]), "'%s' kept %s", once, secrets[i]);
}

Test(warm_redact, urls_in_text)
{
    cr_assert_str_eq(redact("http://user:PWSECRET@host/b/set?X-Amz-Signature=SIGSECRET"),
                     "http://REDACTED@host/b/set?REDACTED");
    cr_assert_str_eq(redact("fetching https://h/o?sig=1: HTTP 403"),
                     "fetching https://h/o?REDACTED: HTTP 403");
    cr_assert_str_eq(redact("s3://bucket/key: no such key"), "s3://bucket/key: no such key");
    assert_clean("a http://u:PWSECRET@h:1/p?X-Amz-Signature=SIGSECRET, then");
}

Test(warm_redact, echoed_headers)
{
    /* As a proxy echoes them, line by line, and after a description flattened the lines. */
    const char *s3 = "GET /b/set?X-Amz-Signature=SIGSECRET&X-Amz-Credential=AKIAEXAMPLEKEYID0001\n"
                     "Authorization: AWS4-HMAC-SHA256 Credential=AKIAEXAMPLEKEYID0001/20261128/"
                     "us-east-1/s3/aws4_request, SignedHeaders=host, Signature=c0ffee5ign\n"
                     "x-amz-security-token: SESSIONTOKENXYZ\nHost: 127.0.0.1\n";
    assert_clean(s3);
    cr_assert_not_null(strstr(redact(s3), "Host: 127.0.0.1"), "%s", redact(s3));
    assert_clean("Authorization: Bearer GCSBEARERTOKEN Range: bytes=0-9");
    assert_clean("Authorization: Basic dXNlcjpQV1NFQ1JFVA== User-Agent: x");
    /* HTTP Digest's parameters, flattened into a description without their header name. */
    cr_assert_null(
        strstr(redact("you sent Digest username=SECRETUSER, realm=\"r\""), "SECRETUSER"));
    assert_clean("{\"access_token\": \"GCSBEARERTOKEN\", \"headers\": \"x-amz-security-token: "
                 "SESSIONTOKENXYZ\"}");
    assert_clean("you sent Bearer GCSBEARERTOKEN and key AKIAEXAMPLEKEYID0001");
    assert_clean("<Message>password=SECRETSECRET</Message>");
    /* A key whose name starts with an AWS access key id (found by fuzz_warm: the first pass cut
     * the id and kept the value, which the second pass then cut). */
    assert_clean("AKIAYYZAKIAYKIAYYZAK____token=SECRETSECRET rest");
    cr_assert_str_eq(redact("AKIAYYZAKIAYKIAYYZAK_token=SECRETSECRET rest"),
                     "REDACTED_token=REDACTED rest");
    cr_assert_str_eq(redact("AKIAYYZAKIAYKIAYYZAK_name=kept"), "REDACTED_name=kept");
    /* A value that merely starts with the mark is no mark. */
    assert_clean("token=REDACTEDSESSIONTOKENXYZ; Authorization: Bearer REDACTEDGCSBEARERTOKEN");
    cr_assert_str_eq(redact("Authorization: Bearer GCSBEARERTOKEN"), "Authorization: REDACTED");
    cr_assert_str_eq(redact("x-amz-security-token: SESSIONTOKENXYZ\nHost: h"),
                     "x-amz-security-token: REDACTED\nHost: h");
    /* A key ending in "token", in any case. */
    assert_clean("HF_TOKEN=SECRETSECRET SessionToken: SESSIONTOKENXYZ id_token=PWSECRET");
}

Test(warm_redact, keeps_ordinary_words)
{
    const char *const kept[] = {
        "/data/token.dlc: record 5: checksum mismatch",
        "/tmp/secret/shard-0001.dlc: truncated",
        "the session token was not set; retry 2 in 0.40 s",
        "HTTP 503: SlowDown: Please reduce your request rate.",
        /* Our messages name a field in quotes: a field may be called "tokens". */
        "/tmp/k.dlc: record 9: field \"tokens\": leading dimension disagrees with the schema",
        "/tmp/r.dlc: field 8 \"tokens\": 1 bytes; 0 rows of 4 bytes (uint16) are 0",
        "/tmp/t.dlc: record 3: field \"tokens\": checksum mismatch (stored 0123456789abcdef, "
        "computed fedcba9876543210)",
        /* "token" inside a word names tokens of text: the token path's messages lost the word
         * after their function's name. */
        "dlc_tokens_open: NULL argument",
        "dlc_token_loader_config: seq_len is 0",
        "dlc_token_writer_add: document 3: token 5 is id 70000, not below 65536",
        "/tmp/a.jsonl: line 3: tokenizer: unknown piece",
        "num_tokens: 5; tokens: 12 of 13; tokenizer=/models/m",
        "write(): field lengths differ: fields={'tokens': 'ndarray'}",
        /* A content digest is a hash of what was checked, not a credential. */
        ("/tmp/set/index.dlcset: shard 3: content digest 0123456789abcdef, the index says "
         "fedcba9876543210"),
    };
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        cr_assert_str_eq(redact(kept[i]), kept[i]);
}

Test(warm_redact, cut_buffer_and_null)
{
    char small[24];
    dlc_warm_redact_text("Authorization: Bearer GCSBEARERTOKEN", small, sizeof small);
    cr_assert_null(strstr(small, "GCS"), "%s", small);
    dlc_warm_redact_text("https://h/?SIGSECRET", small, 12);
    cr_assert_null(strstr(small, "SIG"));
    char buf[16];
    cr_assert_str_eq(dlc_warm_redact_text(NULL, buf, sizeof buf), "(null)");
    cr_assert_eq(dlc_warm_redact_text("x", buf, 0), buf);
}

static char logged[1024];

static void on_log(void *user, dlc_log_level level, const char *msg)
{
    (void)user;
    (void)level;
    snprintf(logged, sizeof logged, "%s", msg);
}

Test(warm_redact, every_message_and_log_line)
{
    dlc__errorf(DLC_EHTTP, "%s: HTTP 403: %s", "https://u:PWSECRET@h/o?X-Amz-Signature=SIGSECRET",
                "Authorization: Bearer GCSBEARERTOKEN");
    cr_assert_str_eq(dlc_errmsg(), "https://REDACTED@h/o?REDACTED: HTTP 403: Authorization: "
                                   "REDACTED");
    dlc__logf(on_log, NULL, DLC_LOG_WARN, "retry: x-amz-security-token: %s", "SESSIONTOKENXYZ");
    cr_assert_str_eq(logged, "retry: x-amz-security-token: REDACTED");
}

Test(warm_redact, server_body_is_code_and_message)
{
    char out[512];
    const char *xml = "<Error><Code>AccessDenied</Code><Message>you sent Authorization: Bearer "
                      "GCSBEARERTOKEN</Message><Headers>x-amz-security-token: SESSIONTOKENXYZ"
                      "</Headers></Error>";
    dlc__warm_describe_body(xml, strlen(xml), out, sizeof out);
    cr_assert_str_eq(out, "AccessDenied: you sent Authorization: REDACTED");
    const char *text = "Denied. You sent:\nGET /b\nAuthorization: Basic dXNlcjpQV1NFQ1JFVA==\n";
    dlc__warm_describe_body(text, strlen(text), out, sizeof out);
    cr_assert_str_eq(out, "Denied. You sent:");
}

/* A server may quote the credential it was sent with no key or scheme before it: the values in
 * use are cut wherever they stand (dlc__redact_add_secret()), in every wording the S3, GCS and
 * proxy answers use; short values and other words are left alone. */
Test(warm_redact, credentials_in_use_are_cut_by_value)
{
    dlc__redact_add_secret("FQoGZXIvYXdzSESSIONSECRET9");
    dlc__redact_add_secret("ya29.BEARERSECRET8");
    dlc__redact_add_secret("short"); /* under 8 bytes: never a cut */
    static const char *const bodies[] = {
        "HTTP 403: The security token FQoGZXIvYXdzSESSIONSECRET9 included in the request is "
        "expired",
        "<Error><Code>ExpiredToken</Code><Message>FQoGZXIvYXdzSESSIONSECRET9 "
        "expired</Message></Error>",
        "{\"error\": {\"message\": \"bad credential ya29.BEARERSECRET8 for bucket\"}}",
        "[\"x-amz-security-token\", \"FQoGZXIvYXdzSESSIONSECRET9\"]",
        "the header was ya29.BEARERSECRET8ya29.BEARERSECRET8, twice",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        const char *out = redact(bodies[i]);
        cr_assert_null(strstr(out, "SESSIONSECRET"), "'%s'", out);
        cr_assert_null(strstr(out, "BEARERSECRET"), "'%s'", out);
        cr_assert_not_null(strstr(out, "REDACTED"), "'%s'", out);
    }
    cr_assert_str_eq(redact("a short word and expired tokens stay"),
                     "a short word and expired tokens stay");
    cr_assert_str_eq(redact("HTTP 403: The security token FQoGZXIvYXdzSESSIONSECRET9 included"),
                     "HTTP 403: The security token REDACTED included");
}
