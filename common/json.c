/* The one JSON reader and string writer of the library and its tools: a walk over a text that
 * reports each value to a callback, the lookups built on it, and the escaping of a string. The
 * walk allocates nothing and recurses at most DLC__JSON_MAX_DEPTH levels, so hostile text (an
 * object server's answer, a store's metadata) can neither exhaust the stack nor the heap. */
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The state of one dlc__json_walk(). */
typedef struct walker {
    dlc__json_visit visit;
    void *user;
    int stopped; /* The callback asked to stop. */
} walker;

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static int hex_digit(char h)
{
    if (h >= '0' && h <= '9')
        return h - '0';
    if (h >= 'a' && h <= 'f')
        return h - 'a' + 10;
    if (h >= 'A' && h <= 'F')
        return h - 'A' + 10;
    return -1;
}

/* Four hex digits at p (before end) as *v; -1 when they are not. */
static int hex4(const char *p, const char *end, uint32_t *v)
{
    *v = 0;
    if (end - p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        const int d = hex_digit(p[i]);
        if (d < 0)
            return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* The code point that the escape after a backslash at *pp stands for (*pp moves past it; a
 * surrogate pair is one code point, a lone surrogate U+FFFD), or -1 when it is no JSON
 * escape. */
static int32_t unescape(const char **pp, const char *end)
{
    const char *p = *pp;
    if (p >= end)
        return -1;
    const char e = *p++;
    uint32_t c;
    switch (e) {
    case '"':
    case '\\':
    case '/':
        c = (uint32_t)e;
        break;
    case 'b':
        c = '\b';
        break;
    case 'f':
        c = '\f';
        break;
    case 'n':
        c = '\n';
        break;
    case 'r':
        c = '\r';
        break;
    case 't':
        c = '\t';
        break;
    case 'u':
        if (hex4(p, end, &c) != 0)
            return -1;
        p += 4;
        if (c >= 0xD800 && c < 0xDC00) {
            uint32_t lo;
            if (end - p >= 6 && p[0] == '\\' && p[1] == 'u' && hex4(p + 2, end, &lo) == 0 &&
                lo >= 0xDC00 && lo < 0xE000) {
                c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            } else {
                c = 0xFFFD;
            }
        } else if (c >= 0xDC00 && c < 0xE000) {
            c = 0xFFFD;
        }
        break;
    default:
        return -1;
    }
    *pp = p;
    return (int32_t)c;
}

/* Code point @p c as UTF-8 into @p u; its length (1 to 4). */
static size_t utf8(uint32_t c, char u[4])
{
    if (c < 0x80) {
        u[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        u[0] = (char)(0xC0 | c >> 6);
        u[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        u[0] = (char)(0xE0 | c >> 12);
        u[1] = (char)(0x80 | (c >> 6 & 0x3F));
        u[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    u[0] = (char)(0xF0 | c >> 18);
    u[1] = (char)(0x80 | (c >> 12 & 0x3F));
    u[2] = (char)(0x80 | (c >> 6 & 0x3F));
    u[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

const char *dlc__json_string(const char *p, const char *end, char *out, size_t cap, size_t *len)
{
    size_t n = 0;
    if (p >= end || *p != '"')
        return NULL;
    p++;
    while (p < end && *p != '"') {
        char u[4];
        size_t k = 1;
        u[0] = *p++;
        if ((unsigned char)u[0] < 0x20)
            return NULL;
        if (u[0] == '\\') {
            const int32_t c = unescape(&p, end);
            if (c < 0)
                return NULL;
            k = utf8((uint32_t)c, u);
        }
        for (size_t i = 0; i < k; i++, n++)
            if (out && n + 1 < cap)
                out[n] = u[i];
    }
    if (p >= end)
        return NULL;
    if (out && cap)
        out[n < cap ? n : cap - 1] = '\0';
    if (len)
        *len = n;
    return p + 1;
}

static int emit(walker *w, const dlc__json_item *it)
{
    if (w->visit && w->visit(w->user, it) != 0) {
        w->stopped = 1;
        return 1;
    }
    return 0;
}

static const char *walk_value(walker *w, const char *p, const char *end, const char *key,
                              int depth);

/* An object or an array at p (which points at '{' or '['), its members walked in order. */
static const char *walk_container(walker *w, const char *p, const char *end, const char *key,
                                  int depth)
{
    const int obj = *p == '{';
    const char close = obj ? '}' : ']';
    dlc__json_item it = {
        .kind = obj ? DLC__JSON_OBJECT : DLC__JSON_ARRAY, .depth = depth, .key = key, .raw = p};
    if (emit(w, &it))
        return NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p == close) {
        p++;
    } else {
        for (;;) {
            char k[DLC__JSON_KEY_MAX];
            if (obj) {
                p = dlc__json_string(skip_ws(p, end), end, k, sizeof k, NULL);
                if (!p)
                    return NULL;
                p = skip_ws(p, end);
                if (p >= end || *p != ':')
                    return NULL;
                p++;
            }
            p = walk_value(w, p, end, obj ? k : NULL, depth + 1);
            if (!p)
                return NULL;
            p = skip_ws(p, end);
            if (p < end && *p == ',') {
                p++;
                continue;
            }
            if (p < end && *p == close) {
                p++;
                break;
            }
            return NULL;
        }
    }
    it.kind = obj ? DLC__JSON_OBJECT_END : DLC__JSON_ARRAY_END;
    it.raw_end = p;
    return emit(w, &it) ? NULL : p;
}

/* A string value at p, decoded for the callback only when there is one. */
static const char *walk_string(walker *w, const char *p, const char *end, dlc__json_item *it)
{
    char s[DLC__JSON_STR_MAX];
    const char *q = dlc__json_string(p, end, w->visit ? s : NULL, sizeof s, NULL);
    if (!q)
        return NULL;
    it->kind = DLC__JSON_STRING;
    it->str = s;
    it->raw_end = q;
    return emit(w, it) ? NULL : q;
}

/* Digits at p: how many (0: none). */
static size_t digits(const char *p, const char *end)
{
    size_t n = 0;
    while (p + n < end && p[n] >= '0' && p[n] <= '9')
        n++;
    return n;
}

/* The length of RFC 8259's number at p: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, or 0 when
 * there is none. "+1", "007", "1." and ".5" are not JSON: strtod() would take them, and a reader
 * that takes what other JSON readers refuse reads a file two ways. */
static size_t number_length(const char *p, const char *end)
{
    const char *q = p;
    if (q < end && *q == '-')
        q++;
    size_t d = digits(q, end);
    if (d == 0 || (d > 1 && *q == '0'))
        return 0;
    q += d;
    if (q < end && *q == '.') {
        if ((d = digits(q + 1, end)) == 0)
            return 0;
        q += 1 + d;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < end && (*q == '+' || *q == '-'))
            q++;
        if ((d = digits(q, end)) == 0)
            return 0;
        q += d;
    }
    return (size_t)(q - p);
}

/* A number at p: an integer stays an integer, anything with a fraction or an exponent is a
 * double, and so is an integer beyond 64 bits: it is JSON all the same (Python reads a 26-digit
 * id), and its reader, not the grammar, says what it cannot hold. */
static const char *walk_number(walker *w, const char *p, const char *end, dlc__json_item *it)
{
    char small[64];
    const size_t n = number_length(p, end);
    if (n == 0)
        return NULL;
    char *num = n < sizeof small ? small : malloc(n + 1);
    if (!num)
        return NULL;
    memcpy(num, p, n);
    num[n] = '\0';
    char *e;
    int ok = 1;
    errno = 0;
    if (!strpbrk(num, ".eE")) {
        it->kind = DLC__JSON_INT;
        it->i = strtoll(num, &e, 10);
        ok = !*e;
    }
    if (strpbrk(num, ".eE") || errno == ERANGE) {
        it->kind = DLC__JSON_DOUBLE;
        it->d = strtod(num, &e);
        ok = !*e;
    }
    if (num != small)
        free(num);
    if (!ok)
        return NULL;
    it->raw_end = p + n;
    return emit(w, it) ? NULL : p + n;
}

static const char *walk_value(walker *w, const char *p, const char *end, const char *key, int depth)
{
    p = skip_ws(p, end);
    if (p >= end || depth > DLC__JSON_MAX_DEPTH)
        return NULL;
    if (*p == '{' || *p == '[')
        return walk_container(w, p, end, key, depth);
    dlc__json_item it = {.depth = depth, .key = key, .raw = p};
    if (*p == '"')
        return walk_string(w, p, end, &it);
    static const char *const words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        const size_t n = strlen(words[k]);
        if ((size_t)(end - p) >= n && memcmp(p, words[k], n) == 0) {
            it.kind = k < 2 ? DLC__JSON_BOOL : DLC__JSON_NULL;
            it.b = k == 0;
            it.raw_end = p + n;
            return emit(w, &it) ? NULL : p + n;
        }
    }
    return walk_number(w, p, end, &it);
}

int dlc__json_walk(const char *p, const char *end, dlc__json_visit visit, void *user,
                   const char **after)
{
    walker w = {.visit = visit, .user = user};
    const char *q = walk_value(&w, p, end, NULL, 0);
    if (w.stopped)
        return 1;
    if (!q)
        return -1;
    if (after)
        *after = q;
    return 0;
}

int dlc__json_valid(const char *p, size_t n)
{
    const char *after;
    return dlc__json_walk(p, p + n, NULL, NULL, &after) == 0 && skip_ws(after, p + n) == p + n;
}

/* What dlc__json_member() and dlc__json_find_string() look for, and what they found. */
typedef struct finder {
    const char *key;
    int any_depth;  /* A member at any depth, else one of the top-level object. */
    int open_depth; /* > 0: the container that matched starts here; its end is awaited. */
    const char *vs; /* The value found: its text, */
    const char *ve; /* and one past it. */
    dlc__json_kind kind;
    int found;
    int whole; /* Walk on after the member to find another of its name (dup). */
    int dup;
} finder;

static int on_find(void *user, const dlc__json_item *it)
{
    finder *f = user;
    if (f->open_depth > 0) {
        if (it->depth != f->open_depth ||
            (it->kind != DLC__JSON_OBJECT_END && it->kind != DLC__JSON_ARRAY_END))
            return 0;
        f->ve = it->raw_end;
        f->found = 1;
        f->open_depth = 0;
        return !f->whole;
    }
    if (!it->key || it->kind == DLC__JSON_OBJECT_END || it->kind == DLC__JSON_ARRAY_END ||
        (!f->any_depth && it->depth != 1) || strcmp(it->key, f->key) != 0)
        return 0;
    if (f->found) {
        f->dup = 1; /* Only when whole: a walk that is not stops at the first. */
        return 1;
    }
    f->kind = it->kind;
    f->vs = it->raw;
    if ((it->kind == DLC__JSON_OBJECT || it->kind == DLC__JSON_ARRAY) && !f->any_depth) {
        f->open_depth = it->depth;
        return 0;
    }
    f->ve = it->raw_end;
    f->found = 1;
    return !f->whole;
}

int dlc__json_member(const char *p, const char *end, const char *key, const char **vs,
                     const char **ve)
{
    finder f = {.key = key, .whole = 1};
    dlc__json_walk(p, end, on_find, &f, NULL);
    if (f.dup)
        return -2;
    if (!f.found)
        return -1;
    *vs = f.vs;
    *ve = f.ve;
    return 0;
}

int dlc__json_find_string(const char *p, size_t n, const char *key, int any_depth, char *out,
                          size_t cap)
{
    finder f = {.key = key, .any_depth = any_depth};
    dlc__json_walk(p, p + n, on_find, &f, NULL);
    if (!f.found || f.kind != DLC__JSON_STRING || cap == 0)
        return 0;
    size_t len = 0;
    return dlc__json_string(f.vs, f.ve, out, cap, &len) != NULL && len < cap;
}

/* Bytes of the well-formed UTF-8 sequence at @p c (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *c)
{
    const unsigned char u = c[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (u >= 0xC2 && u <= 0xDF)
        n = 2;
    else if (u >= 0xE0 && u <= 0xEF)
        n = 3, lo = u == 0xE0 ? 0xA0 : 0x80, hi = u == 0xED ? 0x9F : 0xBF;
    else if (u >= 0xF0 && u <= 0xF4)
        n = 4, lo = u == 0xF0 ? 0x90 : 0x80, hi = u == 0xF4 ? 0x8F : 0xBF;
    else
        return 0;
    if (c[1] < lo || c[1] > hi)
        return 0;
    for (size_t k = 2; k < n; k++)
        if (c[k] < 0x80 || c[k] > 0xBF)
            return 0;
    return n;
}

size_t dlc__utf8_check(const char *p, size_t n)
{
    const unsigned char *c = (const unsigned char *)p;
    size_t i = 0;
    while (i < n) {
        if (c[i] < 0x80) {
            i++;
            continue;
        }
        /* utf8_len() reads up to 4 bytes: near the end, from a copy padded with NULs (which no
         * sequence continues with). */
        unsigned char tail[4] = {0};
        const unsigned char *at = c + i;
        if (n - i < 4) {
            memcpy(tail, at, n - i);
            at = tail;
        }
        const size_t len = utf8_len(at);
        if (len == 0)
            return i;
        i += len;
    }
    return n;
}

void dlc__json_quote(const char *s, dlc__json_put put, void *user)
{
    put(user, "\"", 1);
    const char *run = s; /* Bytes written as they are, not yet handed to put. */
    for (const char *c = s; *c; c++) {
        const unsigned char u = (unsigned char)*c;
        char esc[8];
        size_t n = 2;
        esc[0] = '\\';
        if (u >= 0x80) {
            /* A file name is bytes: one that is not UTF-8 (0xFF in a folder's name) would
             * make the whole document invalid JSON, so each such byte is U+FFFD. */
            const size_t len = utf8_len((const unsigned char *)c);
            if (len > 0) {
                c += len - 1;
                continue;
            }
            n = (size_t)snprintf(esc, sizeof esc, "\\ufffd");
        } else if (u == '"' || u == '\\')
            esc[1] = (char)u;
        else if (u == '\n')
            esc[1] = 'n';
        else if (u == '\r')
            esc[1] = 'r';
        else if (u == '\t')
            esc[1] = 't';
        else if (u < 0x20)
            n = (size_t)snprintf(esc, sizeof esc, "\\u%04x", u);
        else
            continue;
        if (c > run)
            put(user, run, (size_t)(c - run));
        put(user, esc, n);
        run = c + 1;
    }
    if (*run)
        put(user, run, strlen(run));
    put(user, "\"", 1);
}
