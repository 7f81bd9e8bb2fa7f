/* Where the bytes of a warm source live and how requests for them are
 * authorized: s3:// (SigV4 by libcurl), gs:// (bearer token) and plain URLs.
 * Also the small parsers shared by the probe and the fetcher. */
#include "common.h"
#include "warm_internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <xxhash.h>

double dlc__warm_backoff(unsigned attempt, uint64_t *rng)
{
    double d = 0.1;
    for (unsigned i = 1; i < attempt && d < 5.0; i++)
        d *= 2.0;
    if (d > 5.0)
        d = 5.0;
    /* xorshift64*: a per-call generator, so no global state is touched. */
    uint64_t x = *rng ? *rng : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *rng = x;
    const double u = (double)((x * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
    return d * (0.5 + 0.5 * u);
}

const char *dlc_warm_redact_url(const char *url, char *buf, size_t cap)
{
    return dlc__redact_url(url, buf, cap);
}

const char *dlc_warm_redact_text(const char *text, char *buf, size_t cap)
{
    return dlc__redact_text(text, buf, cap);
}

char *dlc__warm_urlencode(const char *s, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    const size_t n = strlen(s);
    char *out = malloc(3 * n + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
            (keep_slash && c == '/')) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
    return out;
}

static int parse_u64(const char **pp, uint64_t *v)
{
    const char *p = *pp;
    if (*p < '0' || *p > '9')
        return -1;
    uint64_t x = 0;
    while (*p >= '0' && *p <= '9') {
        const uint64_t d = (uint64_t)(*p - '0');
        if (x > (UINT64_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
        p++;
    }
    *pp = p;
    *v = x;
    return 0;
}

int dlc__warm_parse_content_range(const char *v, uint64_t *start, uint64_t *end, uint64_t *total)
{
    while (*v == ' ' || *v == '\t')
        v++;
    if (strncasecmp(v, "bytes", 5) != 0)
        return -1;
    v += 5;
    while (*v == ' ' || *v == '=')
        v++;
    if (*v == '*') {
        *start = *end = UINT64_MAX;
        v++;
    } else {
        /* A start of UINT64_MAX would pass for the "*" form below, and no byte can be there
         * anyway (found by fuzz_warm). */
        if (parse_u64(&v, start) < 0 || *start == UINT64_MAX || *v++ != '-' ||
            parse_u64(&v, end) < 0 || *end < *start)
            return -1;
    }
    if (*v++ != '/')
        return -1;
    if (*v == '*') {
        if (*start == UINT64_MAX)
            return -1;
        *total = UINT64_MAX;
        v++;
    } else if (parse_u64(&v, total) < 0 || (*start != UINT64_MAX && *end >= *total)) {
        return -1;
    }
    while (*v == ' ' || *v == '\t' || *v == '\r' || *v == '\n')
        v++;
    return *v == '\0' ? 0 : -1;
}

/* Copy the text between <tag> and </tag> in @p body, or return 0. */
int dlc__warm_xml_field(const char *body, size_t len, const char *tag, char *out, size_t cap)
{
    char open[64], close[64];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = memmem(body, len, open, strlen(open));
    if (!a)
        return 0;
    a += strlen(open);
    const char *b = memmem(a, len - (size_t)(a - body), close, strlen(close));
    if (!b)
        return 0;
    snprintf(out, cap, "%.*s", (int)(b - a), a);
    return 1;
}

static void printable(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
            *s = ' ';
}

void dlc__warm_describe_body(const char *body, size_t len, char *out, size_t cap)
{
    out[0] = '\0';
    if (!body || len == 0 || cap == 0)
        return;
    /* Only the Code and Message of S3's XML, GCS's JSON message, or the first line of any other
     * body, and those redacted: a proxy or a server may echo the request's headers (its
     * Authorization, tokens) anywhere in the body. The redaction runs before the line breaks
     * are flattened, so that a header's value ends where its line does. */
    char code[128], msg[512], said[768];
    if (dlc__warm_xml_field(body, len, "Code", code, sizeof code)) {
        if (dlc__warm_xml_field(body, len, "Message", msg, sizeof msg))
            snprintf(said, sizeof said, "%s: %s", code, msg);
        else
            snprintf(said, sizeof said, "%s", code);
    } else if (dlc__json_find_string(body, len, "message", 1, msg, sizeof msg)) {
        snprintf(said, sizeof said, "%s", msg);
    } else {
        size_t line = 0;
        while (line < len && line < 200 && body[line] != '\n' && body[line] != '\r')
            line++;
        snprintf(said, sizeof said, "%.*s", (int)line, body);
    }
    dlc__redact_text(said, out, cap);
    printable(out);
}

void dlc__warm_describe_answer(long status, const char *to, int follow, const char *body,
                               size_t len, char *out, size_t cap)
{
    if (status >= 300 && status < 400) {
        char shown[1024];
        if (to && *to)
            dlc__redact_url(to, shown, sizeof shown);
        else
            snprintf(shown, sizeof shown, "nowhere (no Location)");
        snprintf(out, cap, "a redirect to %s, which is not followed%s", shown,
                 follow ? "" : " (s3:// and gs:// sources are read from their endpoint only)");
        return;
    }
    dlc__warm_describe_body(body, len, out, cap);
    if (!*out)
        snprintf(out, cap, "no detail from the server");
}

void dlc__warm_describe_failure(CURL *h, CURLcode res, const char *errbuf, char *out, size_t cap)
{
    const char *said = errbuf && *errbuf ? errbuf : curl_easy_strerror(res);
    long redirects = 0;
    const char *where = NULL;
    char from[1100] = "";
    if (h && curl_easy_getinfo(h, CURLINFO_REDIRECT_COUNT, &redirects) == CURLE_OK &&
        redirects > 0 && curl_easy_getinfo(h, CURLINFO_EFFECTIVE_URL, &where) == CURLE_OK &&
        where) {
        char shown[1024];
        snprintf(from, sizeof from, " (at %s, after %ld redirect%s)",
                 dlc__redact_url(where, shown, sizeof shown), redirects, redirects == 1 ? "" : "s");
    }
    if (res == CURLE_OUT_OF_MEMORY) {
        /* libcurl 7.88 gives up on a response header over CURL_MAX_HTTP_HEADER (100 KiB) with
         * "out of memory" and no detail: a server's doing far more often than the allocator's. */
        snprintf(out, cap,
                 "a response header larger than libcurl accepts (%d KiB), or libcurl ran out of "
                 "memory reading the response%s",
                 CURL_MAX_HTTP_HEADER >> 10, from);
        return;
    }
    snprintf(out, cap, "%s%s", said, from);
}

int dlc__warm_retryable_http(long status)
{
    return status >= 500 || status == 408 || status == 429;
}

int dlc__warm_retryable_curl(CURLcode code)
{
    switch (code) {
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
        return 1;
    default:
        return 0;
    }
}

void dlc__warm_source_free(dlc__warm_source *src)
{
    if (!src)
        return;
    free(src->url);
    free(src->shown);
    free(src->name);
    free(src->sigv4);
    free(src->bucket);
    free(src->key);
    free(src->endpoint);
    /* Wipe the secret before the memory goes back to the allocator. */
    if (src->secret_key)
        memset(src->secret_key, 0, strlen(src->secret_key));
    free(src->access_key);
    free(src->secret_key);
    curl_slist_free_all(src->headers);
    memset(src, 0, sizeof *src);
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static dlc_status add_header(dlc__warm_source *src, const char *fmt, const char *value)
{
    char line[8192];
    const int n = snprintf(line, sizeof line, fmt, value);
    if (n < 0 || (size_t)n >= sizeof line)
        return dlc__errorf(DLC_EINVAL, "warm: a credential header is longer than %zu bytes",
                           sizeof line);
    struct curl_slist *l = curl_slist_append(src->headers, line);
    memset(line, 0, sizeof line);
    if (!l)
        return -ENOMEM;
    src->headers = l;
    return DLC_OK;
}

/* Split "BUCKET/KEY" after the scheme into two malloc'd strings. */
static dlc_status split_bucket(const char *url, const char *rest, char **bucket, char **key)
{
    const char *slash = strchr(rest, '/');
    if (!slash || slash == rest || slash[1] == '\0')
        return dlc__errorf(DLC_EINVAL, "%s: expected SCHEME://BUCKET/OBJECT", url);
    *bucket = strndup(rest, (size_t)(slash - rest));
    *key = strdup(slash + 1);
    if (!*bucket || !*key)
        return -ENOMEM;
    return DLC_OK;
}

static int is_http_url(const char *u)
{
    return strncasecmp(u, "http://", 7) == 0 || strncasecmp(u, "https://", 8) == 0;
}

static char *trim_endpoint(const char *e)
{
    char *s = strdup(e);
    if (s) {
        size_t n = strlen(s);
        while (n > 0 && s[n - 1] == '/')
            s[--n] = '\0';
    }
    return s;
}

static dlc_status resolve_s3(dlc__warm_source *src, const char *url, const dlc_warm_options *opt)
{
    dlc_status rc = DLC_OK;
    char *bucket = NULL, *key = NULL, *ekey = NULL, *endpoint = NULL;
    CHECK(split_bucket(url, url + 5, &bucket, &key));
    const char *region = opt->region && *opt->region ? opt->region : NULL;
    if (!region)
        region = env("AWS_REGION");
    if (!region)
        region = env("AWS_DEFAULT_REGION");
    if (!region)
        region = "us-east-1";
    const char *ep = opt->endpoint && *opt->endpoint ? opt->endpoint : NULL;
    if (!ep)
        ep = env("AWS_ENDPOINT_URL_S3");
    if (!ep)
        ep = env("AWS_ENDPOINT_URL");
    FAIL_IF(ep && !is_http_url(ep), DLC_EINVAL,
            "%s: the endpoint '%s' is not an http:// or https:// URL", url, ep);
    ekey = dlc__warm_urlencode(key, 1);
    FAIL_IF(!ekey, -ENOMEM, "warm: out of memory");
    char buf[4096];
    int n;
    if (ep) {
        endpoint = trim_endpoint(ep);
        FAIL_IF(!endpoint, -ENOMEM, "warm: out of memory");
        n = snprintf(buf, sizeof buf, "%s/%s/%s", endpoint, bucket, ekey);
    } else if (strchr(bucket, '.')) {
        /* A dotted bucket name breaks the wildcard certificate of
         * virtual-host addressing, so AWS's advice is path style. */
        n = snprintf(buf, sizeof buf, "https://s3.%s.amazonaws.com/%s/%s", region, bucket, ekey);
    } else {
        n = snprintf(buf, sizeof buf, "https://%s.s3.%s.amazonaws.com/%s", bucket, region, ekey);
    }
    FAIL_IF(n < 0 || (size_t)n >= sizeof buf, DLC_EINVAL, "%s: URL too long", url);
    src->url = strdup(buf);
    n = snprintf(buf, sizeof buf, "aws:amz:%s:s3", region);
    FAIL_IF(n < 0 || (size_t)n >= sizeof buf, DLC_EINVAL, "warm: region name too long");
    src->sigv4 = strdup(buf);
    FAIL_IF(!src->url || !src->sigv4, -ENOMEM, "warm: out of memory");

    const char *ak = env("AWS_ACCESS_KEY_ID"), *sk = env("AWS_SECRET_ACCESS_KEY");
    if (ak && sk) {
        /* Cut from every message by value: an error body may quote one without its key. */
        dlc__redact_add_secret(sk);
        src->access_key = strdup(ak);
        src->secret_key = strdup(sk);
        FAIL_IF(!src->access_key || !src->secret_key, -ENOMEM, "warm: out of memory");
        /* libcurl 7.88 signs the headers it is given but does not add
         * x-amz-content-sha256, which S3 requires; a GET has no payload to
         * hash, so the unsigned-payload marker is the honest value. */
        CHECK(add_header(src, "x-amz-content-sha256: %s", "UNSIGNED-PAYLOAD"));
        const char *token = env("AWS_SESSION_TOKEN");
        dlc__redact_add_secret(token);
        if (token)
            CHECK(add_header(src, "x-amz-security-token: %s", token));
    } else {
        free(src->sigv4);
        src->sigv4 = NULL;
        CHECK(add_header(src, "x-amz-content-sha256: %s", "UNSIGNED-PAYLOAD"));
    }
    src->send_if_match = 1;
    /* Kept for the push, which addresses the object's uploads by query strings. */
    src->bucket = bucket;
    src->key = key;
    bucket = key = NULL;
fail:
    free(bucket);
    free(key);
    free(ekey);
    free(endpoint);
    return rc;
}

typedef struct membuf {
    char data[8192];
    size_t len;
} membuf;

static size_t membuf_write(char *p, size_t size, size_t n, void *user)
{
    membuf *m = user;
    const size_t len = size * n;
    const size_t room = sizeof m->data - 1 - m->len;
    const size_t take = len < room ? len : room;
    memcpy(m->data + m->len, p, take);
    m->len += take;
    m->data[m->len] = '\0';
    return len;
}

/* Ask the GCE metadata server for the default service account's token. Off
 * GCE the name does not resolve (or the port is closed) and the request fails
 * quickly; the caller then goes on without a token. */
static dlc_status gce_token(const dlc_warm_options *opt, char *token, size_t cap)
{
    const char *host = env("GCE_METADATA_HOST");
    if (!host)
        host = "metadata.google.internal";
    /* Sized from the host: cut short in a fixed buffer, the URL would ask some other path. */
    static const char path[] = "/computeMetadata/v1/instance/service-accounts/default/token";
    const size_t ucap = strlen("http://") + strlen(host) + sizeof path;
    char *url = malloc(ucap);
    if (!url)
        return -ENOMEM;
    snprintf(url, ucap, "http://%s%s", host, path);
    CURL *h = curl_easy_init();
    if (!h) {
        free(url);
        return -ENOMEM;
    }
    membuf *m = calloc(1, sizeof *m);
    struct curl_slist *hdr = curl_slist_append(NULL, "Metadata-Flavor: Google");
    dlc_status rc = DLC_ENOTFOUND;
    if (m && hdr) {
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_PROXY, "");
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 3000L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, membuf_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, m);
        long status = 0;
        if (curl_easy_perform(h) == CURLE_OK &&
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status == 200 &&
            dlc__json_find_string(m->data, m->len, "access_token", 1, token, cap))
            rc = DLC_OK;
        memset(m, 0, sizeof *m);
    }
    curl_slist_free_all(hdr);
    free(m);
    curl_easy_cleanup(h);
    free(url);
    (void)opt;
    return rc;
}

static dlc_status resolve_gcs(dlc__warm_source *src, const char *url, const dlc_warm_options *opt)
{
    dlc_status rc = DLC_OK;
    char *bucket = NULL, *key = NULL, *ekey = NULL, *ebucket = NULL, *endpoint = NULL;
    char token[4096] = "";
    CHECK(split_bucket(url, url + 5, &bucket, &key));
    const char *ep = opt->endpoint && *opt->endpoint ? opt->endpoint : NULL;
    if (!ep)
        ep = env("DLCACHE_GCS_ENDPOINT");
    if (!ep)
        ep = "https://storage.googleapis.com";
    FAIL_IF(!is_http_url(ep), DLC_EINVAL, "%s: the endpoint '%s' is not an http:// or https:// URL",
            url, ep);
    endpoint = trim_endpoint(ep);
    ekey = dlc__warm_urlencode(key, 0);
    ebucket = dlc__warm_urlencode(bucket, 0);
    FAIL_IF(!endpoint || !ekey || !ebucket, -ENOMEM, "warm: out of memory");
    char buf[4096];
    const int n =
        snprintf(buf, sizeof buf, "%s/storage/v1/b/%s/o/%s?alt=media", endpoint, ebucket, ekey);
    FAIL_IF(n < 0 || (size_t)n >= sizeof buf, DLC_EINVAL, "%s: URL too long", url);
    src->url = strdup(buf);
    FAIL_IF(!src->url, -ENOMEM, "warm: out of memory");

    const char *t = env("GOOGLE_OAUTH_ACCESS_TOKEN");
    if (t) {
        dlc__redact_add_secret(t);
        CHECK(add_header(src, "Authorization: Bearer %s", t));
    } else if (gce_token(opt, token, sizeof token) == DLC_OK) {
        dlc__redact_add_secret(token);
        CHECK(add_header(src, "Authorization: Bearer %s", token));
    } else {
        dlc__logf(opt->log, opt->log_user, DLC_LOG_INFO,
                  "%s: no GOOGLE_OAUTH_ACCESS_TOKEN and no GCE metadata server: "
                  "reading without credentials",
                  url);
    }
    /* Kept for the push, whose uploads go to ENDPOINT/upload/storage/v1/b/BUCKET/o. */
    src->bucket = bucket;
    src->key = key;
    src->endpoint = endpoint;
    bucket = key = endpoint = NULL;
fail:
    memset(token, 0, sizeof token);
    free(bucket);
    free(key);
    free(ekey);
    free(ebucket);
    free(endpoint);
    return rc;
}

dlc_status dlc__warm_source_init(dlc__warm_source *src, const char *url,
                                 const dlc_warm_options *opt)
{
    memset(src, 0, sizeof *src);
    dlc_status rc = DLC_OK;
    if (strncmp(url, "s3://", 5) == 0) {
        src->kind = DLC__WARM_S3;
        CHECK(resolve_s3(src, url, opt));
    } else if (strncmp(url, "gs://", 5) == 0) {
        src->kind = DLC__WARM_GCS;
        CHECK(resolve_gcs(src, url, opt));
    } else if (strncasecmp(url, "https://", 8) == 0 || strncasecmp(url, "http://", 7) == 0) {
        src->kind = DLC__WARM_HTTP;
        src->url = strdup(url);
        FAIL_IF(!src->url, -ENOMEM, "warm: out of memory");
        src->follow_redirects = 1;
    } else {
        char shown[1024];
        FAIL_IF(1, DLC_EINVAL, "%s: not an s3://, gs://, https:// or http:// URL",
                dlc_warm_redact_url(url, shown, sizeof shown));
    }
    const size_t cap = strlen(src->url) + 32;
    src->shown = malloc(cap);
    FAIL_IF(!src->shown, -ENOMEM, "warm: out of memory");
    dlc_warm_redact_url(src->url, src->shown, cap);
    src->name = malloc(strlen(url) + 32);
    FAIL_IF(!src->name, -ENOMEM, "warm: out of memory");
    dlc_warm_redact_url(url, src->name, strlen(url) + 32);
    return DLC_OK;
fail:
    dlc__warm_source_free(src);
    return rc;
}

static dlc_status check_seconds(double v, const char *field, const char *who)
{
    if (v == 0)
        return DLC_OK; /* The default. */
    /* Written so that NaN fails too. */
    if (v >= DLC__WARM_MIN_TIMEOUT_S && v <= DLC__WARM_MAX_TIMEOUT_S)
        return DLC_OK;
    if (v > 0 && v < DLC__WARM_MIN_TIMEOUT_S)
        return dlc__errorf(DLC_EINVAL,
                           "%s: %s of %g s is below the minimum of %g s (a shorter one cannot be "
                           "told to libcurl, whose checks it would turn off)",
                           who, field, v, DLC__WARM_MIN_TIMEOUT_S);
    return dlc__errorf(DLC_EINVAL,
                       "%s: %s of %g s: want seconds from %g s to %g s (0: the default)", who,
                       field, v, DLC__WARM_MIN_TIMEOUT_S, DLC__WARM_MAX_TIMEOUT_S);
}

dlc_status dlc__warm_check_net(const dlc_warm_options *o, const char *who)
{
    const dlc_status rc = check_seconds(o->timeout_s, "the timeout (timeout_s)", who);
    return rc < 0 ? rc
                  : check_seconds(o->connect_timeout_s, "the connect timeout (connect_timeout_s)",
                                  who);
}

/* Whole seconds for libcurl's low-speed time, at least 1 (0 would turn the check off). */
static long whole_seconds(double t)
{
    const long s = (long)t;
    return s < 1 ? 1 : (double)s < t ? s + 1 : s;
}

dlc_status dlc__warm_easy_setup(CURL *h, const dlc__warm_source *src, const dlc_warm_options *opt)
{
    CURLcode c = CURLE_OK;
#define SET(o, v)                                                                                  \
    do {                                                                                           \
        if (c == CURLE_OK)                                                                         \
            c = curl_easy_setopt(h, o, v);                                                         \
    } while (0)
    SET(CURLOPT_URL, src->url);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_USERAGENT, "dlcache-cachewarm/" DLC_VERSION_STRING);
    SET(CURLOPT_TCP_KEEPALIVE, 1L);
    /* The values were checked (dlc__warm_check_net()); the floors here only keep a value that
     * slipped past from meaning "off" to libcurl. */
    const double ct = opt->connect_timeout_s > 0 ? opt->connect_timeout_s : 10.0;
    const long ct_ms = (long)(ct * 1000.0);
    SET(CURLOPT_CONNECTTIMEOUT_MS, ct_ms < 100 ? 100L : ct_ms);
    /* A transfer that moves fewer than DLC__WARM_MIN_RATE bytes a second for timeout_s is cut
     * and retried: a stalled connection must not hold a chunk hostage, nor one that trickles a
     * few bytes a second (a limit of 1 byte/s let those run for hours). */
    const double to = opt->timeout_s > 0 ? opt->timeout_s : 30.0;
    SET(CURLOPT_LOW_SPEED_LIMIT, DLC__WARM_MIN_RATE);
    SET(CURLOPT_LOW_SPEED_TIME, whole_seconds(to));
    /* Larger receive buffers mean fewer, larger pwrite() calls. */
    SET(CURLOPT_BUFFERSIZE, 512L * 1024L);
    if (opt->flags & DLC_WARM_INSECURE) {
        SET(CURLOPT_SSL_VERIFYPEER, 0L);
        SET(CURLOPT_SSL_VERIFYHOST, 0L);
    } else {
        SET(CURLOPT_SSL_VERIFYPEER, 1L);
        SET(CURLOPT_SSL_VERIFYHOST, 2L);
        /* A private CA (a company's, a test's): the bundle the curl tool and OpenSSL are told of
         * by the environment replaces the system's. */
        const char *ca = env("CURL_CA_BUNDLE");
        if (!ca)
            ca = env("SSL_CERT_FILE");
        if (ca)
            SET(CURLOPT_CAINFO, ca);
    }
    if (src->follow_redirects) {
        SET(CURLOPT_FOLLOWLOCATION, 1L);
        SET(CURLOPT_MAXREDIRS, 5L);
        SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    }
    if (src->sigv4 && src->access_key) {
        SET(CURLOPT_AWS_SIGV4, src->sigv4);
        SET(CURLOPT_USERNAME, src->access_key);
        SET(CURLOPT_PASSWORD, src->secret_key);
    }
#undef SET
    if (c != CURLE_OK)
        return dlc__errorf(DLC_ENOSYS, "warm: libcurl refused an option: %s",
                           curl_easy_strerror(c));
    return DLC_OK;
}

void dlc__warm_etag_keep(const char *v, size_t len, char out[DLC__WARM_ETAG_MAX])
{
    static const char digest[] = DLC__WARM_ETAG_DIGEST;
    const size_t plen = sizeof digest - 1;
    if (len < DLC__WARM_ETAG_MAX && !(len >= plen && memcmp(v, digest, plen) == 0)) {
        memcpy(out, v, len);
        out[len] = '\0';
        return;
    }
    /* A value of the digest form's own shape is hashed too, so that a server cannot send a
     * short ETag equal to the kept form of a long one. */
    const XXH128_hash_t h = XXH3_128bits(v, len);
    snprintf(out, DLC__WARM_ETAG_MAX, "%s%016" PRIx64 "%016" PRIx64, digest, (uint64_t)h.high64,
             (uint64_t)h.low64);
}

int dlc__warm_etag_sendable(const char *etag)
{
    static const char digest[] = DLC__WARM_ETAG_DIGEST;
    return *etag && strncmp(etag, "W/", 2) != 0 && strncmp(etag, digest, sizeof digest - 1) != 0;
}

dlc_status dlc__warm_request_headers(const dlc__warm_source *src, uint64_t start, uint64_t end,
                                     const char *if_match, struct curl_slist **out)
{
    *out = NULL;
    struct curl_slist *l = NULL;
    for (const struct curl_slist *s = src->headers; s; s = s->next) {
        struct curl_slist *n = curl_slist_append(l, s->data);
        if (!n)
            goto fail;
        l = n;
    }
    char line[256];
    if (!(start == 0 && end == UINT64_MAX)) {
        /* Range is sent as a header of our own rather than CURLOPT_RANGE so
         * that libcurl's SigV4 signer covers it, as S3 expects. */
        if (end == UINT64_MAX)
            snprintf(line, sizeof line, "Range: bytes=%" PRIu64 "-", start);
        else
            snprintf(line, sizeof line, "Range: bytes=%" PRIu64 "-%" PRIu64, start, end);
        struct curl_slist *n = curl_slist_append(l, line);
        if (!n)
            goto fail;
        l = n;
    }
    if (if_match && src->send_if_match && dlc__warm_etag_sendable(if_match)) {
        snprintf(line, sizeof line, "If-Match: %s", if_match);
        struct curl_slist *n = curl_slist_append(l, line);
        if (!n)
            goto fail;
        l = n;
    }
    /* No Accept-Encoding is sent (CURLOPT_ACCEPT_ENCODING stays unset), so
     * servers answer with the bytes as stored, which is what ranges count. */
    *out = l;
    return DLC_OK;
fail:
    curl_slist_free_all(l);
    return dlc__errorf(-ENOMEM, "warm: out of memory");
}
