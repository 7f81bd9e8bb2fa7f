/* The one redaction of the library: what a URL or a server's words may show to people. Every
 * error message (dlc__errorf()) and every log line (dlc__logf()) passes through
 * dlc__redact_text() before anyone can read it, so a secret that reaches a message by any road
 * (a URL a caller gave, an error body echoing the request's headers) is cut there; the warm
 * part also runs it over a server's error body before quoting it, and the tools and the Python
 * package over what they print themselves (dlc_warm_redact_text()).
 *
 * What is cut (docs/SECURITY.md):
 *   - in a URL (scheme://...), its user:password and its query string;
 *   - the word after an HTTP authorization scheme: Bearer, Basic, Negotiate, AWS, and Digest
 *     when that word is a parameter (username="..."): "content digest 0123abcd" stays;
 *   - the value after a key (followed by ':' or '=', quotes allowed) whose name holds "token",
 *     "signature", "credential", "secret", "password", "passwd", "apikey", "api-key",
 *     "api_key", "cookie" or "authorization" (for the last two, the whole rest of the line);
 *   - AWS access key ids (AKIA/ASIA and 16 capitals or digits), wherever they stand;
 *   - the credentials in use (dlc__redact_add_secret()), wherever they stand.
 * Each cut leaves "REDACTED", so that running the function over its own output changes nothing. */
#include "common.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char mark[] = "REDACTED";
#define MARK_LEN (sizeof mark - 1)

typedef struct out_buf {
    char *p;
    size_t cap; /* > 0 */
    size_t n;   /* Bytes written, at most cap - 1. */
} out_buf;

static void put(out_buf *o, const char *s, size_t n)
{
    const size_t room = o->cap - 1 - o->n;
    if (n > room)
        n = room;
    memcpy(o->p + o->n, s, n);
    o->n += n;
    o->p[o->n] = '\0';
}

/* The URL rule on url[0, len): scheme://[userinfo@]host[:port]/path[?query][#fragment]. */
static void put_url(out_buf *o, const char *url, size_t len)
{
    const char *end = url + len;
    const char *p = url;
    const char *authority = NULL;
    for (const char *q = url; q + 3 <= end; q++)
        if (q[0] == ':' && q[1] == '/' && q[2] == '/') {
            authority = q;
            break;
        }
    /* A "://" after the first '/', '?' or '#' is not the scheme's but part of the path or query
     * (a redirect parameter of a pre-signed URL, or a URL without a scheme): everything before
     * it would be shown as a "scheme", query string included (found by fuzz_warm). */
    if (authority) {
        const char *q = url;
        while (q < authority && *q != '/' && *q != '?' && *q != '#')
            q++;
        if (q < authority)
            authority = NULL;
    }
    if (authority) {
        authority += 3;
        const char *host_end = authority;
        while (host_end < end && *host_end != '/' && *host_end != '?' && *host_end != '#')
            host_end++;
        const char *at = NULL;
        for (const char *q = authority; q < host_end; q++)
            if (*q == '@')
                at = q; /* The last '@': a password may hold one. */
        put(o, url, (size_t)(authority - url));
        if (at) {
            put(o, mark, MARK_LEN);
            put(o, "@", 1);
        }
        p = at ? at + 1 : authority;
    }
    const char *keep = p;
    while (keep < end && *keep != '?' && *keep != '#')
        keep++;
    put(o, p, (size_t)(keep - p));
    if (keep < end && *keep == '?')
        put(o, "?REDACTED", 9);
}

const char *dlc__redact_url(const char *url, char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return buf;
    if (!url) {
        snprintf(buf, cap, "(null)");
        return buf;
    }
    out_buf o = {buf, cap, 0};
    buf[0] = '\0';
    put_url(&o, url, strlen(url));
    return buf;
}

static int is_word(unsigned char c)
{
    return isalnum(c) || c == '_' || c == '-';
}

/* Where a value that is one word ends: at white space, a quote, a separator of a list or a
 * header, or markup. */
static size_t value_len(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && !isspace((unsigned char)s[i]) && !strchr("\"'&,;<>()[]{}\\", s[i]))
        i++;
    return i;
}

/* Where the rest of a line ends (an Authorization or Cookie header's value). */
static size_t line_len(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && s[i] != '\n' && s[i] != '\r' && s[i] != '<' && s[i] != '"')
        i++;
    return i;
}

static int has_ci(const char *s, size_t n, const char *want)
{
    const size_t w = strlen(want);
    for (size_t i = 0; i + w <= n; i++)
        if (strncasecmp(s + i, want, w) == 0)
            return 1;
    return 0;
}

enum { KEY_NONE = 0, KEY_WORD = 1, KEY_LINE = 2 };

static int secret_key(const char *k, size_t n)
{
    if (has_ci(k, n, "authorization") || has_ci(k, n, "cookie"))
        return KEY_LINE;
    /* "token" only as the key's last part (token, access_token, x-amz-security-token,
     * HF_TOKEN, SessionToken): inside a word it names tokens of text, which our own messages
     * speak of ("dlc_tokens_open:", "tokenizer:", "num_tokens:"), and whatever followed the
     * colon was cut from them. */
    if (n >= 5 && strncasecmp(k + n - 5, "token", 5) == 0)
        return KEY_WORD;
    static const char *const words[] = {"signature", "credential", "secret",  "password",
                                        "passwd",    "apikey",     "api-key", "api_key"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (has_ci(k, n, words[i]))
            return KEY_WORD;
    return KEY_NONE;
}

static int is_scheme_word(const char *s, size_t n)
{
    static const char *const schemes[] = {"bearer", "basic", "digest", "negotiate", "aws"};
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (n == strlen(schemes[i]) && strncasecmp(s, schemes[i], n) == 0)
            return 1;
    return 0;
}

static int is_aws_key_id(const char *s, size_t n)
{
    if (n < 20 || (strncmp(s, "AKIA", 4) != 0 && strncmp(s, "ASIA", 4) != 0))
        return 0;
    for (size_t i = 4; i < 20; i++)
        if (!isupper((unsigned char)s[i]) && !isdigit((unsigned char)s[i]))
            return 0;
    return n == 20 || !isalnum((unsigned char)s[20]);
}

/* Text from a key's first byte on, with the AWS access key id it starts with (@p aws) shown
 * as the mark. */
static void put_key(out_buf *o, const char *s, size_t n, int aws)
{
    if (aws) {
        put(o, mark, MARK_LEN);
        s += 20;
        n -= 20;
    }
    put(o, s, n);
}

/* After a secret key at s[0, n): the separator (quotes, spaces, ':' or '='); its length, or 0
 * when there is none (the word is not a key here). A quoted key takes a quoted value only
 * ("access_token": "..." in JSON): a quoted name followed by words is our own messages' way of
 * naming a field (field "tokens": leading dimension ...), which holds no secret. */
static size_t separator_len(const char *s, size_t n)
{
    size_t i = 0;
    int key_quoted = 0;
    while (i < n && (s[i] == '"' || s[i] == '\''))
        i++, key_quoted = 1;
    while (i < n && s[i] == ' ')
        i++;
    if (i >= n || (s[i] != ':' && s[i] != '='))
        return 0;
    i++;
    int value_quoted = 0;
    while (i < n && (s[i] == ' ' || s[i] == '"' || s[i] == '\'')) {
        if (s[i] != ' ')
            value_quoted = 1;
        i++;
    }
    if (key_quoted && !value_quoted)
        return 0;
    return i;
}

/* The credentials in use, cut from any text by their value: the grammar below finds a secret by
 * the words around it, and a server's body may quote one with none ("The security token X
 * included in the request is expired"). */
#define MAX_SECRETS 16
#define MIN_SECRET 8 /* Shorter values would cut ordinary words. */
static pthread_mutex_t secrets_mu = PTHREAD_MUTEX_INITIALIZER;
static char *secrets[MAX_SECRETS];
static size_t secret_lens[MAX_SECRETS];
static size_t nsecrets;

void dlc__redact_add_secret(const char *value)
{
    const size_t n = value ? strlen(value) : 0;
    if (n < MIN_SECRET)
        return;
    pthread_mutex_lock(&secrets_mu);
    size_t k = 0;
    while (k < nsecrets && !(secret_lens[k] == n && memcmp(secrets[k], value, n) == 0))
        k++;
    char *copy = k == nsecrets ? strdup(value) : NULL;
    if (copy) {
        if (nsecrets == MAX_SECRETS) { /* The oldest goes: a refreshed token replaced it. */
            free(secrets[0]);
            memmove(secrets, secrets + 1, (MAX_SECRETS - 1) * sizeof *secrets);
            memmove(secret_lens, secret_lens + 1, (MAX_SECRETS - 1) * sizeof *secret_lens);
            nsecrets--;
        }
        secrets[nsecrets] = copy;
        secret_lens[nsecrets++] = n;
    }
    pthread_mutex_unlock(&secrets_mu);
}

/* @p in with every credential in use replaced by the mark, in memory to free; NULL when none
 * occurs in it (or there is no memory: the grammar still runs over @p in). */
static char *cut_secrets(const char *in, size_t n)
{
    char *out = NULL;
    pthread_mutex_lock(&secrets_mu);
    for (size_t k = 0; k < nsecrets && !out; k++)
        if (memmem(in, n, secrets[k], secret_lens[k]))
            out = malloc(n + 1); /* Each secret is at least as long as the mark. */
    if (out) {
        size_t i = 0, o = 0;
        while (i < n) {
            size_t k = 0;
            while (k < nsecrets &&
                   !(secret_lens[k] <= n - i && memcmp(in + i, secrets[k], secret_lens[k]) == 0))
                k++;
            if (k < nsecrets) {
                memcpy(out + o, mark, MARK_LEN);
                o += MARK_LEN, i += secret_lens[k];
            } else {
                out[o++] = in[i++];
            }
        }
        out[o] = '\0';
    }
    pthread_mutex_unlock(&secrets_mu);
    return out;
}

static void redact_grammar(const char *in, char *buf, size_t cap);

const char *dlc__redact_text(const char *in, char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return buf;
    if (!in) {
        snprintf(buf, cap, "(null)");
        return buf;
    }
    char *cut = cut_secrets(in, strlen(in));
    redact_grammar(cut ? cut : in, buf, cap);
    free(cut);
    return buf;
}

/* The words around a secret: URLs, schemes, keys, AWS key ids (the file's comment). */
static void redact_grammar(const char *in, char *buf, size_t cap)
{
    out_buf o = {buf, cap, 0};
    buf[0] = '\0';
    const size_t n = strlen(in);
    size_t i = 0;
    while (i < n && o.n + 1 < cap) {
        const int boundary = i == 0 || !is_word((unsigned char)in[i - 1]);
        if (!boundary || !isalpha((unsigned char)in[i])) {
            put(&o, in + i, 1);
            i++;
            continue;
        }
        size_t w = i;
        while (w < n && (is_word((unsigned char)in[w]) || in[w] == '.' || in[w] == '+'))
            w++;
        const size_t wl = w - i;
        /* A URL: scheme "://" and up to white space, a quote or markup. */
        if (w + 3 <= n && in[w] == ':' && in[w + 1] == '/' && in[w + 2] == '/') {
            size_t e = w + 3;
            while (e < n && !isspace((unsigned char)in[e]) && !strchr("\"'<>", in[e]))
                e++;
            /* A sentence's punctuation after the URL ("URL: HTTP 403") is not its query's. */
            while (e > w + 3 && strchr(":,.;)", in[e - 1]))
                e--;
            put_url(&o, in + i, e - i);
            i = e;
            continue;
        }
        /* A word that starts with an AWS access key id shows the mark in its place. It is
         * still judged as a key by its whole text: "AKIA..._token=V" must lose V on the first
         * pass, since the second sees "REDACTED_token=V" (found by fuzz_warm). */
        const int aws = is_aws_key_id(in + i, n - i);
        /* An authorization scheme and its credentials. */
        if (is_scheme_word(in + i, wl) && w < n && in[w] == ' ') {
            size_t v = w;
            while (v < n && in[v] == ' ')
                v++;
            const size_t vl = value_len(in + v, n - v);
            /* HTTP Digest credentials are parameters (username="...", response=...); our own
             * messages say "content digest 0123abcd...", a hash that is no secret and names
             * what was checked, so after "digest" only a parameter is cut. */
            const int digest_word =
                wl == 6 && strncasecmp(in + i, "digest", 6) == 0 && memchr(in + v, '=', vl) == NULL;
            if (vl > 0 && !digest_word &&
                !(vl == MARK_LEN && strncmp(in + v, mark, MARK_LEN) == 0)) {
                put(&o, in + i, v - i);
                put(&o, mark, MARK_LEN);
                i = v + vl;
                continue;
            }
        }
        /* A word holding a dot or after a slash is a file's name ("/tmp/token.dlc: record 3"),
         * never a key. */
        const int named = memchr(in + i, '.', wl) != NULL || (i > 0 && in[i - 1] == '/');
        const int key = named ? KEY_NONE : secret_key(in + i, wl);
        const size_t sep = key ? separator_len(in + w, n - w) : 0;
        if (sep) {
            const size_t v = w + sep;
            /* Redacted already (the whole value is the mark): kept. */
            if (value_len(in + v, n - v) == MARK_LEN && strncmp(in + v, mark, MARK_LEN) == 0) {
                put_key(&o, in + i, v + MARK_LEN - i, aws);
                i = v + MARK_LEN;
                continue;
            }
            /* "Authorization: Bearer REDACTED", redacted already: kept as it is. */
            if (key == KEY_LINE && is_scheme_word(in + v, value_len(in + v, n - v))) {
                size_t t = v + value_len(in + v, n - v);
                while (t < n && in[t] == ' ')
                    t++;
                if (value_len(in + t, n - t) == MARK_LEN && strncmp(in + t, mark, MARK_LEN) == 0) {
                    put_key(&o, in + i, t + MARK_LEN - i, aws);
                    i = t + MARK_LEN;
                    continue;
                }
            }
            const size_t vl = key == KEY_LINE ? line_len(in + v, n - v) : value_len(in + v, n - v);
            put_key(&o, in + i, v - i, aws);
            if (vl > 0)
                put(&o, mark, MARK_LEN);
            i = v + vl;
            continue;
        }
        if (aws) {
            /* The rest of the word passes one byte at a time, as it would after the mark. */
            put(&o, mark, MARK_LEN);
            i += 20;
            continue;
        }
        put(&o, in + i, wl);
        i = w;
    }
}
