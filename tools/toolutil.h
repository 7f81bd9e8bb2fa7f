/* Shared by the command-line tools: sizes, progress lines, JSON output and
 * error reports. Tools use the public headers, this, and the library's common
 * part (common.h: clock, core count, random streams) for plumbing. */
#ifndef DLCACHE_TOOLUTIL_H
#define DLCACHE_TOOLUTIL_H

#include "common.h"

#include <dlcache/status.h>

#include <stdio.h>

/* Parse "123", "4K", "64MiB", "2G" (K, M, G, T and KiB... TiB: powers of 1024) or "50GB",
 * "500MB" (kB, MB, GB, TB: powers of 1000). Returns 0 on success, -1 on a malformed value. */
int tool_parse_size(const char *s, uint64_t *out);

/* Parse a whole non-negative decimal number that fits in @p max. */
int tool_parse_u64(const char *s, uint64_t max, uint64_t *out);

/* "1.5 GiB" into @p buf. */
const char *tool_human_bytes(uint64_t bytes, char *buf, size_t size);

/* "1h02m", "3m05s", "12s" into @p buf; "?" for a negative or non-finite value. */
const char *tool_human_seconds(double seconds, char *buf, size_t size);

/* "3m05s" (as tool_human_seconds()) for the time that @p done of @p total items still need
 * at @p rate items a second; "?" while the rate is not known. */
const char *tool_human_eta(uint64_t done, uint64_t total, double rate, char *buf, size_t size);

/* Print "TOOL: error: STRERROR: DETAIL" on stderr for a failed call. */
void tool_report(const char *tool, dlc_status rc, const char *what);

/* @p s as it may be printed on a terminal: itself when it holds no control character, else a
 * copy in @p buf (@p cap bytes, cut with "..." when longer) with each control character (a
 * newline or an escape sequence in a file's name) written as \xHH. Every line the tools print
 * from a message or a log passes it: a name must not split a warning or drive the terminal. */
const char *tool_printable(const char *s, char *buf, size_t cap);

/* A run that SIGINT or SIGTERM (@p sig) stopped before it wrote @p out: "TOOL: interrupted; OUT
 * was not written" on stderr. Returns 128 + @p sig, the exit status of a stopped tool. */
int tool_interrupted(const char *tool, const char *out, int sig);

/* Print "TOOL: error: MESSAGE" and a newline on stderr, in one write. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void tool_error(const char *tool, const char *fmt, ...);

/* A command-line mistake: tool_error(), then the tool's usage text on stderr when @p usage is
 * not NULL. Returns 2, the exit status of every tool for a usage error. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
int tool_usage_error(const char *tool, void (*usage)(FILE *), const char *fmt, ...);

/* A progress line on stderr: redrawn in place at most @p hz times a second
 * when stderr is a terminal, silent otherwise (the tool then prints one
 * summary line at the end). */
typedef struct tool_progress {
    int tty;        /* stderr is a terminal */
    double last;    /* dlc__now_s() of the last redraw */
    double min_gap; /* seconds between redraws */
    int drawn;      /* a line is on screen and must be ended */
} tool_progress;

void tool_progress_init(tool_progress *p, double hz);
/* Redraw with printf-style text when due (or when @p force). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void tool_progress_line(tool_progress *p, int force, const char *fmt, ...);
/* End the line on screen, if any. */
void tool_progress_end(tool_progress *p);

/* A streaming JSON writer with indentation and comma handling. Keys are
 * ignored inside arrays (pass NULL). Nesting is limited to 32 levels. */
typedef struct tool_json {
    FILE *out;
    int depth;
    int first[32]; /* no member written yet at this depth */
    int in_array[32];
} tool_json;

void tool_json_init(tool_json *j, FILE *out);
void tool_json_object_begin(tool_json *j, const char *key);
void tool_json_object_end(tool_json *j);
void tool_json_array_begin(tool_json *j, const char *key);
void tool_json_array_end(tool_json *j);
void tool_json_str(tool_json *j, const char *key, const char *value); /* NULL writes null */
void tool_json_u64(tool_json *j, const char *key, uint64_t value);
void tool_json_i64(tool_json *j, const char *key, int64_t value);
void tool_json_f64(tool_json *j, const char *key, double value); /* non-finite -> null */
void tool_json_bool(tool_json *j, const char *key, int value);
/* A 64-bit digest as 16 lower-case hex digits, quoted. */
void tool_json_hex64(tool_json *j, const char *key, uint64_t value);
/* Finish the document with a newline. */
void tool_json_finish(tool_json *j);

#endif /* DLCACHE_TOOLUTIL_H */
