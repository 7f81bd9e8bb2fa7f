#include "toolutil.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tool_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end = NULL;
    const unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0' || v > max)
        return -1;
    *out = v;
    return 0;
}

int tool_parse_size(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end = NULL;
    const unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    /* The usual rule, as the Python package's sizes: kB, MB, GB, TB are powers of 1000; KiB,
     * MiB, GiB, TiB and the bare K, M, G, T are powers of 1024. */
    static const char letters[] = "kmgt";
    const char *const at = *end ? strchr(letters, tolower((unsigned char)*end)) : NULL;
    unsigned power = 0;
    uint64_t base = 1024;
    if (at) {
        power = (unsigned)(at - letters) + 1;
        end++;
        if (*end == 'i') {
            end++;
            if (*end == 'b' || *end == 'B')
                end++;
        } else if (*end == 'b' || *end == 'B') {
            base = 1000;
            end++;
        }
    } else if (*end == 'b' || *end == 'B') {
        end++;
    }
    if (*end != '\0')
        return -1;
    uint64_t n = v;
    for (unsigned i = 0; i < power; i++) {
        if (n > UINT64_MAX / base)
            return -1;
        n *= base;
    }
    *out = n;
    return 0;
}

const char *tool_human_bytes(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, size, "%.*f %s", v < 10 ? 2 : 1, v, units[u]);
    return buf;
}

const char *tool_human_seconds(double s, char *buf, size_t size)
{
    if (!isfinite(s) || s < 0) {
        snprintf(buf, size, "?");
        return buf;
    }
    const unsigned long long t = (unsigned long long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, size, "%lluh%02llum", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(buf, size, "%llum%02llus", t / 60, t % 60);
    else
        snprintf(buf, size, "%llus", t);
    return buf;
}

const char *tool_human_eta(uint64_t done, uint64_t total, double rate, char *buf, size_t size)
{
    return tool_human_seconds(rate > 0 ? (double)(total - done) / rate : -1, buf, size);
}

const char *tool_printable(const char *s, char *buf, size_t cap)
{
    if (!s)
        return "";
    const char *c = s;
    while (*c && (unsigned char)*c >= 0x20 && *c != 0x7f)
        c++;
    if (!*c || cap < 8)
        return s;
    size_t n = 0;
    for (c = s; *c; c++) {
        const unsigned char u = (unsigned char)*c;
        const size_t need = u < 0x20 || u == 0x7f ? 4 : 1;
        if (n + need + 4 > cap) {
            memcpy(buf + n, "...", 4);
            return buf;
        }
        if (need == 4)
            snprintf(buf + n, 5, "\\x%02x", u);
        else
            buf[n] = (char)u;
        n += need;
    }
    buf[n] = '\0';
    return buf;
}

/* "TOOL: error: " + the message + "\n" formatted first, so that the line reaches the
 * unbuffered stderr in one write and does not interleave with another process's. */
static void verror(const char *tool, const char *fmt, va_list ap)
{
    char small[1024];
    va_list again;
    va_copy(again, ap);
    const int n = vsnprintf(small, sizeof small, fmt, ap);
    char *msg = small;
    if (n >= (int)sizeof small && (msg = malloc((size_t)n + 1)) != NULL)
        vsnprintf(msg, (size_t)n + 1, fmt, again);
    va_end(again);
    char shown[4096];
    fprintf(stderr, "%s: error: %s\n", tool,
            tool_printable(msg ? msg : small, shown, sizeof shown));
    if (msg != small)
        free(msg);
}

void tool_error(const char *tool, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(tool, fmt, ap);
    va_end(ap);
}

int tool_usage_error(const char *tool, void (*usage)(FILE *), const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(tool, fmt, ap);
    va_end(ap);
    if (usage)
        usage(stderr);
    return 2;
}

void tool_report(const char *tool, dlc_status rc, const char *what)
{
    char shown[4096];
    const char *detail = tool_printable(dlc_errmsg(), shown, sizeof shown);
    /* A message that names the file itself is not given its name twice. */
    const size_t n = what ? strlen(what) : 0;
    if (detail && n && strncmp(detail, what, n) == 0 && detail[n] == ':')
        fprintf(stderr, "%s: error: %s\n", tool, detail);
    else if (detail && *detail)
        fprintf(stderr, "%s: error: %s: %s\n", tool, what ? what : dlc_strerror(rc), detail);
    else
        fprintf(stderr, "%s: error: %s%s%s\n", tool, what ? what : "", what ? ": " : "",
                dlc_strerror(rc));
}

int tool_interrupted(const char *tool, const char *out, int sig)
{
    fprintf(stderr, "%s: interrupted; %s was not written\n", tool, out);
    return 128 + sig;
}

void tool_progress_init(tool_progress *p, double hz)
{
    p->tty = isatty(STDERR_FILENO);
    p->last = 0;
    p->min_gap = hz > 0 ? 1.0 / hz : 0.1;
    p->drawn = 0;
}

void tool_progress_line(tool_progress *p, int force, const char *fmt, ...)
{
    if (!p->tty)
        return;
    const double now = dlc__now_s();
    if (!force && p->drawn && now - p->last < p->min_gap)
        return;
    p->last = now;
    va_list ap;
    va_start(ap, fmt);
    fputs("\r", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\033[K", stderr); /* clear what a longer previous line left */
    va_end(ap);
    fflush(stderr);
    p->drawn = 1;
}

void tool_progress_end(tool_progress *p)
{
    if (p->tty && p->drawn)
        fputs("\n", stderr);
    p->drawn = 0;
}

void tool_json_init(tool_json *j, FILE *out)
{
    memset(j, 0, sizeof *j);
    j->out = out;
    j->first[0] = 1;
}

static void put_file(void *out, const char *p, size_t n)
{
    fwrite(p, 1, n, out);
}

static void json_string(FILE *out, const char *s)
{
    dlc__json_quote(s, put_file, out);
}

/* Comma, newline, indentation and key before a member at the current depth. */
static void json_member(tool_json *j, const char *key)
{
    if (j->depth == 0)
        return;
    fputs(j->first[j->depth] ? "\n" : ",\n", j->out);
    j->first[j->depth] = 0;
    for (int i = 0; i < j->depth; i++)
        fputs("  ", j->out);
    if (!j->in_array[j->depth] && key) {
        json_string(j->out, key);
        fputs(": ", j->out);
    }
}

static void json_open(tool_json *j, const char *key, char c, int array)
{
    json_member(j, key);
    fputc(c, j->out);
    if (j->depth + 1 < 32) {
        j->depth++;
        j->first[j->depth] = 1;
        j->in_array[j->depth] = array;
    }
}

static void json_close(tool_json *j, char c)
{
    const int empty = j->first[j->depth];
    if (j->depth > 0)
        j->depth--;
    if (!empty) {
        fputc('\n', j->out);
        for (int i = 0; i < j->depth; i++)
            fputs("  ", j->out);
    }
    fputc(c, j->out);
}

void tool_json_object_begin(tool_json *j, const char *key)
{
    json_open(j, key, '{', 0);
}
void tool_json_object_end(tool_json *j)
{
    json_close(j, '}');
}
void tool_json_array_begin(tool_json *j, const char *key)
{
    json_open(j, key, '[', 1);
}
void tool_json_array_end(tool_json *j)
{
    json_close(j, ']');
}

void tool_json_str(tool_json *j, const char *key, const char *value)
{
    json_member(j, key);
    if (value)
        json_string(j->out, value);
    else
        fputs("null", j->out);
}

void tool_json_u64(tool_json *j, const char *key, uint64_t value)
{
    json_member(j, key);
    fprintf(j->out, "%llu", (unsigned long long)value);
}

void tool_json_i64(tool_json *j, const char *key, int64_t value)
{
    json_member(j, key);
    fprintf(j->out, "%lld", (long long)value);
}

void tool_json_f64(tool_json *j, const char *key, double value)
{
    json_member(j, key);
    if (isfinite(value))
        fprintf(j->out, "%.6g", value);
    else
        fputs("null", j->out);
}

void tool_json_bool(tool_json *j, const char *key, int value)
{
    json_member(j, key);
    fputs(value ? "true" : "false", j->out);
}

void tool_json_hex64(tool_json *j, const char *key, uint64_t value)
{
    json_member(j, key);
    fprintf(j->out, "\"%016llx\"", (unsigned long long)value);
}

void tool_json_finish(tool_json *j)
{
    fputc('\n', j->out);
    fflush(j->out);
}
