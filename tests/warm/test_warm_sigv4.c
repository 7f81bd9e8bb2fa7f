/* The S3 request signing path of the warm part (libcurl's CURLOPT_AWS_SIGV4
 * set up by dlc__warm_easy_setup) against AWS's published SigV4 example:
 * GET /test.txt with Range bytes=0-9 on examplebucket, 2013-05-24, the
 * documentation's example key. The request goes to a loopback server of the
 * test's own; the Authorization header is read both from libcurl's debug
 * callback and from what the server received. Also the S3 and GCS URL
 * resolution from the environment. */
#include "warm_internal.h"

#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define EXAMPLE_SIGNATURE "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"

typedef struct one_shot {
    int listen_fd;
    int port;
    char request[8192];
    pthread_t thread;
} one_shot;

/* Accept one connection, keep the request head, answer 200 with 10 bytes. */
static void *serve_one(void *arg)
{
    one_shot *s = arg;
    const int c = accept(s->listen_fd, NULL, NULL);
    if (c < 0)
        return NULL;
    size_t len = 0;
    while (len + 1 < sizeof s->request) {
        const ssize_t n = read(c, s->request + len, sizeof s->request - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        s->request[len] = '\0';
        if (strstr(s->request, "\r\n\r\n"))
            break;
    }
    static const char reply[] = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/10\r\n"
                                "Content-Length: 10\r\nConnection: close\r\n\r\n0123456789";
    ssize_t w = write(c, reply, sizeof reply - 1);
    (void)w;
    close(c);
    return NULL;
}

static void one_shot_start(one_shot *s)
{
    memset(s, 0, sizeof *s);
    s->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(s->listen_fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(bind(s->listen_fd, (struct sockaddr *)&a, sizeof a) == 0);
    cr_assert(listen(s->listen_fd, 1) == 0);
    socklen_t al = sizeof a;
    cr_assert(getsockname(s->listen_fd, (struct sockaddr *)&a, &al) == 0);
    s->port = ntohs(a.sin_port);
    cr_assert(pthread_create(&s->thread, NULL, serve_one, s) == 0);
}

static void one_shot_stop(one_shot *s)
{
    pthread_join(s->thread, NULL);
    close(s->listen_fd);
}

typedef struct captured {
    char auth[1024];
} captured;

static int on_debug(CURL *h, curl_infotype type, char *data, size_t size, void *user)
{
    (void)h;
    captured *c = user;
    if (type != CURLINFO_HEADER_OUT)
        return 0;
    char *copy = strndup(data, size);
    char *a = strstr(copy, "Authorization: ");
    if (a) {
        a += strlen("Authorization: ");
        const size_t n = strcspn(a, "\r\n");
        snprintf(c->auth, sizeof c->auth, "%.*s", (int)n, a);
    }
    free(copy);
    return 0;
}

static size_t sink(char *p, size_t size, size_t n, void *user)
{
    (void)p;
    (void)user;
    return size * n;
}

Test(warm_sigv4, matches_the_aws_documentation_example)
{
    one_shot srv;
    one_shot_start(&srv);

    /* The source as resolve_s3() would make it, with the example's key and
     * the example's headers: the empty-payload hash and a fixed date, which
     * libcurl uses instead of the clock when the caller sends x-amz-date. */
    dlc__warm_source src;
    memset(&src, 0, sizeof src);
    src.kind = DLC__WARM_S3;
    src.url = strdup("http://examplebucket.s3.amazonaws.com/test.txt");
    src.shown = strdup(src.url);
    src.name = strdup("s3://examplebucket/test.txt");
    src.sigv4 = strdup("aws:amz:us-east-1:s3");
    src.access_key = strdup("AKIAIOSFODNN7EXAMPLE");
    src.secret_key = strdup("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
    src.headers = curl_slist_append(
        NULL,
        "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    src.headers = curl_slist_append(src.headers, "x-amz-date: 20130524T000000Z");

    dlc_warm_options opt;
    dlc_warm_options_init(&opt);
    CURL *h = curl_easy_init();
    cr_assert_not_null(h);
    cr_assert_eq(dlc__warm_easy_setup(h, &src, &opt), DLC_OK);
    struct curl_slist *hdrs = NULL;
    cr_assert_eq(dlc__warm_request_headers(&src, 0, 9, NULL, &hdrs), DLC_OK);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    /* Keep the Host header (and so the signed host) of the example while
     * connecting to the loopback server. */
    char connect_to[128];
    snprintf(connect_to, sizeof connect_to, "examplebucket.s3.amazonaws.com:80:127.0.0.1:%d",
             srv.port);
    struct curl_slist *ct = curl_slist_append(NULL, connect_to);
    curl_easy_setopt(h, CURLOPT_CONNECT_TO, ct);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    captured cap = {{0}};
    curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, on_debug);
    curl_easy_setopt(h, CURLOPT_DEBUGDATA, &cap);
    curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    const CURLcode res = curl_easy_perform(h);
    one_shot_stop(&srv);
    cr_assert_eq(res, CURLE_OK, "%s", curl_easy_strerror(res));

    cr_assert(strstr(cap.auth, "AWS4-HMAC-SHA256 ") == cap.auth, "%s", cap.auth);
    cr_assert_not_null(
        strstr(cap.auth, "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request"),
        "%s", cap.auth);
    cr_assert_not_null(strstr(cap.auth, "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date"),
                       "%s", cap.auth);
    cr_assert_not_null(strstr(cap.auth, "Signature=" EXAMPLE_SIGNATURE), "got %s", cap.auth);
    /* The server received the same header. */
    cr_assert_not_null(strstr(srv.request, "Signature=" EXAMPLE_SIGNATURE), "%s", srv.request);
    cr_assert_not_null(strstr(srv.request, "GET /test.txt HTTP/1.1"));
    cr_assert_not_null(strstr(srv.request, "Range: bytes=0-9"));

    curl_slist_free_all(ct);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    dlc__warm_source_free(&src);
}

/* libcurl 7.88 signs a query string exactly as it is given, so a push writes its queries in
 * SigV4's canonical form (keys sorted, each with '=', values encoded). AWS's published example
 * for a query (GET /?max-keys=2&prefix=J on examplebucket, 2013-05-24) shows that a query in
 * that form is signed as AWS computes it. */
Test(warm_sigv4, a_canonical_query_is_signed_as_aws_documents)
{
    one_shot srv;
    one_shot_start(&srv);
    dlc__warm_source src;
    memset(&src, 0, sizeof src);
    src.kind = DLC__WARM_S3;
    src.url = strdup("http://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J");
    src.sigv4 = strdup("aws:amz:us-east-1:s3");
    src.access_key = strdup("AKIAIOSFODNN7EXAMPLE");
    src.secret_key = strdup("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
    src.headers = curl_slist_append(
        NULL,
        "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    src.headers = curl_slist_append(src.headers, "x-amz-date: 20130524T000000Z");
    dlc_warm_options opt;
    dlc_warm_options_init(&opt);
    CURL *h = curl_easy_init();
    cr_assert_eq(dlc__warm_easy_setup(h, &src, &opt), DLC_OK);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, src.headers);
    char connect_to[128];
    snprintf(connect_to, sizeof connect_to, "examplebucket.s3.amazonaws.com:80:127.0.0.1:%d",
             srv.port);
    struct curl_slist *ct = curl_slist_append(NULL, connect_to);
    curl_easy_setopt(h, CURLOPT_CONNECT_TO, ct);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    captured cap = {{0}};
    curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, on_debug);
    curl_easy_setopt(h, CURLOPT_DEBUGDATA, &cap);
    curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    const CURLcode res = curl_easy_perform(h);
    one_shot_stop(&srv);
    cr_assert_eq(res, CURLE_OK, "%s", curl_easy_strerror(res));
    cr_assert_not_null(
        strstr(cap.auth,
               "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"),
        "got %s", cap.auth);
    cr_assert_not_null(strstr(srv.request, "GET /?max-keys=2&prefix=J HTTP/1.1"));
    curl_slist_free_all(ct);
    curl_easy_cleanup(h);
    dlc__warm_source_free(&src);
}

static int has_header(const struct curl_slist *l, const char *line)
{
    for (; l; l = l->next)
        if (strcmp(l->data, line) == 0)
            return 1;
    return 0;
}

Test(warm_sigv4, s3_custom_endpoint_is_path_style_with_signed_payload_header)
{
    setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "SECRET", 1);
    setenv("AWS_SESSION_TOKEN", "TOKEN", 1);
    setenv("AWS_REGION", "eu-west-1", 1);
    unsetenv("AWS_ENDPOINT_URL_S3");
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4568/", 1);
    dlc_warm_options opt;
    dlc_warm_options_init(&opt);
    dlc__warm_source src;
    cr_assert_eq(dlc__warm_source_init(&src, "s3://b/dir/train set+1.dlc", &opt), DLC_OK, "%s",
                 dlc_errmsg());
    cr_assert_str_eq(src.url, "http://127.0.0.1:4568/b/dir/train%20set%2B1.dlc");
    cr_assert_str_eq(src.sigv4, "aws:amz:eu-west-1:s3");
    cr_assert_str_eq(src.name, "s3://b/dir/train set+1.dlc");
    cr_assert(has_header(src.headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD"));
    cr_assert(has_header(src.headers, "x-amz-security-token: TOKEN"));
    dlc__warm_source_free(&src);

    /* --endpoint wins over the environment; --region over AWS_REGION. */
    opt.endpoint = "https://minio.example:9000";
    opt.region = "ap-south-1";
    cr_assert_eq(dlc__warm_source_init(&src, "s3://b/k", &opt), DLC_OK);
    cr_assert_str_eq(src.url, "https://minio.example:9000/b/k");
    cr_assert_str_eq(src.sigv4, "aws:amz:ap-south-1:s3");
    dlc__warm_source_free(&src);
}

Test(warm_sigv4, s3_on_aws_is_virtual_host_style)
{
    setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "SECRET", 1);
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_ENDPOINT_URL_S3");
    unsetenv("AWS_REGION");
    unsetenv("AWS_DEFAULT_REGION");
    dlc_warm_options opt;
    dlc_warm_options_init(&opt);
    dlc__warm_source src;
    cr_assert_eq(dlc__warm_source_init(&src, "s3://my-bucket/imagenet/train.dlc", &opt), DLC_OK);
    cr_assert_str_eq(src.url, "https://my-bucket.s3.us-east-1.amazonaws.com/imagenet/train.dlc");
    cr_assert_str_eq(src.sigv4, "aws:amz:us-east-1:s3");
    cr_assert_not(has_header(src.headers, "x-amz-security-token: TOKEN"));
    dlc__warm_source_free(&src);
    /* Dotted bucket names cannot use the wildcard certificate. */
    cr_assert_eq(dlc__warm_source_init(&src, "s3://my.bucket/k", &opt), DLC_OK);
    cr_assert_str_eq(src.url, "https://s3.us-east-1.amazonaws.com/my.bucket/k");
    dlc__warm_source_free(&src);
}

Test(warm_sigv4, gcs_media_url_and_bearer_token)
{
    setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.secret", 1);
    unsetenv("DLCACHE_GCS_ENDPOINT");
    dlc_warm_options opt;
    dlc_warm_options_init(&opt);
    dlc__warm_source src;
    cr_assert_eq(dlc__warm_source_init(&src, "gs://bkt/a/b c.dlc", &opt), DLC_OK);
    cr_assert_str_eq(src.url,
                     "https://storage.googleapis.com/storage/v1/b/bkt/o/a%2Fb%20c.dlc?alt=media");
    cr_assert(has_header(src.headers, "Authorization: Bearer ya29.secret"));
    cr_assert_null(src.sigv4);
    /* The query string is not shown. */
    cr_assert_str_eq(src.shown, "https://storage.googleapis.com/storage/v1/b/bkt/o/a%2Fb%20c.dlc"
                                "?REDACTED");
    dlc__warm_source_free(&src);
}

Test(warm_sigv4, rejects_unknown_schemes_and_bad_endpoints)
{
    dlc_warm_options opt;
    dlc_warm_options_init(&opt);
    dlc__warm_source src;
    cr_assert_eq(dlc__warm_source_init(&src, "ftp://x/y", &opt), DLC_EINVAL);
    cr_assert_eq(dlc__warm_source_init(&src, "s3://bucket-only", &opt), DLC_EINVAL);
    cr_assert_eq(dlc__warm_source_init(&src, "s3://b/", &opt), DLC_EINVAL);
    opt.endpoint = "127.0.0.1:4568";
    cr_assert_eq(dlc__warm_source_init(&src, "s3://b/k", &opt), DLC_EINVAL);
    cr_assert_not_null(strstr(dlc_errmsg(), "not an http:// or https:// URL"));
}
