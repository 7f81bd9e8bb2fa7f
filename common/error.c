/* Status strings and the thread-local error detail shared by every part: the message, and in
 * debug builds the site where it was raised (see common.h). */
#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The only mutable state of the library outside of handles: one message per
 * thread, so shared read-only handles can report errors without locking. */
static _Thread_local char dlc__msg[1024];
/* Where the message was raised and the CHECKs it passed ("" when unknown or in a release build),
 * and the status it was raised with: a CHECK adds its line only to the site of its own status. */
static _Thread_local char dlc__site[sizeof(((dlc__errsave *)0)->site)];
static _Thread_local dlc_status dlc__site_status;
/* dlc_errmsg() with the site appended, under DLCACHE_ERROR_SITES=1. */
static _Thread_local char dlc__msg_sited[sizeof dlc__msg + sizeof dlc__site + 4];

/* @p file relative to the source root: __FILE__ is what the compiler was given, an absolute path
 * under CMake, and this file's own tells where the root is. */
static const char *site_path(const char *file)
{
    static const char self[] = __FILE__, tail[] = "common/error.c";
    const size_t n = strlen(self), t = sizeof tail - 1;
    if (n < t || strcmp(self + n - t, tail) != 0)
        return file;
    const size_t root = n - t;
    return strncmp(file, self, root) == 0 ? file + root : file;
}

const char *dlc_version(void)
{
    return DLC_VERSION_STRING;
}

uint32_t dlc_version_number(void)
{
    return DLC_VERSION_NUMBER;
}

const char *dlc_strerror(dlc_status status)
{
    switch (status) {
    case DLC_OK:
        return "success";
    case DLC_END:
        return "end of epoch";
    case DLC_AGAIN:
        return "no batch ready yet";
#define DLC__ERR_CASE(name, value, text)                                                           \
    case DLC_##name:                                                                               \
        return text;
        DLC_ERRORS(DLC__ERR_CASE)
#undef DLC__ERR_CASE
    default:
        break;
    }
    if (status < 0 && status > -4096) {
        /* strerrordesc_np() is thread-safe and allocation-free, unlike strerror(). */
        const char *s = strerrordesc_np(-status);
        if (s)
            return s;
    }
    return "unknown error";
}

const char *dlc_errmsg(void)
{
    /* A developer's switch, read only when there is a site to show (never in release builds).
     * Messages the library copies into others then carry their sites too. */
    if (!dlc__site[0] || !dlc__msg[0])
        return dlc__msg;
    const char *env = getenv("DLCACHE_ERROR_SITES");
    if (!env || strcmp(env, "1") != 0)
        return dlc__msg;
    snprintf(dlc__msg_sited, sizeof dlc__msg_sited, "%s [%s]", dlc__msg, dlc__site);
    return dlc__msg_sited;
}

/* @p at, or the start of the UTF-8 character @p at is inside of (@p up: of the next one), so
 * that a cut never splits a character. */
static size_t char_edge(const char *s, size_t at, int up)
{
    while (at > 0 && s[at] && ((unsigned char)s[at] & 0xC0) == 0x80)
        at = up ? at + 1 : at - 1;
    return at;
}

/* The message of @p fmt, redacted, into @p out of @p cap bytes. One longer than that keeps its
 * head and its tail, joined by " ... ": a message names what it is about first and says why
 * last, so a long path or URL at its start no longer pushes its reason ("path too long") out.
 * The whole text is redacted before anything is cut, so no piece of a secret survives the cut
 * (a tail starting inside a query string would not be seen as one). Allocates only for a message
 * that does not fit; without memory the message is cut at its end, as before. */
static void format_redacted(char *out, size_t cap, const char *fmt, va_list ap)
{
    enum { HEAD = 300 };
    char raw[1024];
    va_list again;
    va_copy(again, ap);
    const int n = vsnprintf(raw, sizeof raw, fmt, ap);
    if (n < 0 || (size_t)n < sizeof raw || cap <= HEAD + 64) {
        va_end(again);
        dlc__redact_text(raw, out, cap);
        return;
    }
    /* "REDACTED" replaces a secret of a byte or more: eight times the text always holds it. */
    const size_t full_cap = (size_t)n + 1, red_cap = 8 * full_cap;
    char *full = malloc(full_cap), *red = full ? malloc(red_cap) : NULL;
    if (!red) {
        va_end(again);
        free(full);
        dlc__redact_text(raw, out, cap);
        return;
    }
    vsnprintf(full, full_cap, fmt, again);
    va_end(again);
    dlc__redact_text(full, red, red_cap);
    const size_t len = strlen(red);
    if (len < cap) {
        memcpy(out, red, len + 1);
    } else {
        static const char gap[] = " ... ";
        const size_t head = char_edge(red, HEAD, 0);
        const size_t tail = char_edge(red, len - (cap - 1 - head - (sizeof gap - 1)), 1);
        const size_t tail_len = len - tail;
        memcpy(out, red, head);
        memcpy(out + head, gap, sizeof gap - 1);
        memcpy(out + head + sizeof gap - 1, red + tail, tail_len + 1);
    }
    free(red);
    free(full);
}

dlc_status dlc__errorf_at(const char *file, int line, dlc_status status, const char *fmt, ...)
{
    /* Every message passes the redactor: a secret that reaches one by any road (a URL a caller
     * gave, a server's error body echoing the request) is cut here, whoever formatted it. */
    va_list ap;
    va_start(ap, fmt);
    format_redacted(dlc__msg, sizeof dlc__msg, fmt, ap);
    va_end(ap);
    dlc__site[0] = '\0';
    if (file)
        snprintf(dlc__site, sizeof dlc__site, "%s:%d", site_path(file), line);
    dlc__site_status = status;
    return status;
}

void dlc__err_forward(dlc_status status, const char *file, int line)
{
    const size_t n = dlc__site[0] && status == dlc__site_status ? strlen(dlc__site) : 0;
    if (n == 0) {
        /* The status came without a message of its own (a plain -errno, say). */
        snprintf(dlc__site, sizeof dlc__site, "?");
        dlc__site_status = status;
    }
    const size_t at = n ? n : 1;
    /* A site cut at its end still names the raise and the first CHECKs, the useful part. */
    if (at < sizeof dlc__site)
        snprintf(dlc__site + at, sizeof dlc__site - at, " <- %s:%d", site_path(file), line);
}

const char *dlc__errsite(void)
{
    return dlc__site;
}

void dlc__clear_error(void)
{
    dlc__msg[0] = '\0';
    dlc__site[0] = '\0';
}

void dlc__logf(dlc_log_fn log, void *user, dlc_log_level level, const char *fmt, ...)
{
    if (!log)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    format_redacted(line, sizeof line, fmt, ap);
    va_end(ap);
    log(user, level, line);
}

void dlc__err_save(dlc__errsave *es)
{
    snprintf(es->msg, sizeof es->msg, "%s", dlc__msg);
    snprintf(es->site, sizeof es->site, "%s", dlc__site);
}

dlc_status dlc__err_restore(const dlc__errsave *es, dlc_status status)
{
    snprintf(dlc__msg, sizeof dlc__msg, "%s", es->msg);
    snprintf(dlc__site, sizeof dlc__site, "%s", es->site);
    dlc__site_status = status;
    return status;
}
