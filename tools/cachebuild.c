/*
 * cachebuild: turn JPEG sources into a dlcache store.
 *
 *   cachebuild SOURCE... -o STORE [--size N] [--crop center|none]
 *              [--encoding raw|jpeg] [--quality Q] [--channels 1|3|keep]
 *              [--masks DIR] [--mask-encoding raw|png] [--threads N]
 *              [--strict] [--force] [--json]
 *
 * A thin shell over dlc_build_with_fields(): it parses flags, draws a progress line,
 * turns SIGINT/SIGTERM into a clean cancel (the library then removes its
 * temporary file) and prints the report.
 *
 * Exit status: 0 built, 1 failed (including no valid image, and a bad image
 * with --strict), 2 usage error or the output exists without --force,
 * 128+signal when interrupted.
 */
#include <dlcache/build.h>
#include <dlcache/store.h>

#include "toolutil.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOOL "cachebuild"
/* Skips printed as warnings; the report (--json) lists all of them. */
#define MAX_SKIP_LINES 20

static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
    if (g_signal) {
        /* A second Ctrl-C: the user does not want to wait for cleanup. */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_signal = sig;
}

static void usage(FILE *f)
{
    fputs("usage: " TOOL " SOURCE... -o STORE [options]\n"
          "\n"
          "Decode, resize and store JPEG images once, for fast training input.\n"
          "\n"
          "SOURCE is an ImageFolder directory (one folder per class; labels numbered\n"
          "like torchvision's ImageFolder), a manifest (PATH<TAB>LABEL lines, paths\n"
          "relative to the manifest), or WebDataset .tar shards (KEY.jpg + KEY.cls).\n"
          "A manifest whose first line is '#columns: path NAME...' has named columns,\n"
          "each a field of the store: label (the label), labels or NAME:ints (comma-\n"
          "separated integers, any number), NAME:floats, NAME:int, NAME:float, and a\n"
          "plain NAME (int64 if every value is an integer, else float64).\n"
          "\n"
          "options:\n"
          "  -o, --output STORE     store file to write (required)\n"
          "  --size N               shorter side after resize, pixels (default 256)\n"
          "  --crop center|none     center crop to N x N (default), or keep the aspect\n"
          "  --encoding raw|jpeg    raw uint8 pixels (default), or re-encoded JPEG\n"
          "  --quality Q            JPEG quality with --encoding jpeg (default 90)\n"
          "  --channels 1|3|keep    gray, RGB (default), or those of the first image\n"
          "                         (a gray data set stays gray; images of the other kind\n"
          "                         are converted, and counted)\n"
          "  --masks DIR            segmentation masks: for the image REL/STEM.jpg of the\n"
          "                         tree (or manifest path), DIR/REL/STEM.png, as large as\n"
          "                         the image; resized with nearest neighbour to exactly\n"
          "                         the image's pixels. No mask: the item is skipped\n"
          "  --mask-encoding raw|png  masks stored raw or as PNG (default: raw with\n"
          "                         --encoding raw, png with --encoding jpeg)\n"
          "  --threads N            decoding threads (default: all cores)\n"
          "  --strict               stop at the first bad image instead of skipping it\n"
          "  --force                replace STORE if it exists\n"
          "  --json                 print the report as JSON on stdout\n"
          "  -h, --help             this text\n",
          f);
}

typedef struct tool_state {
    tool_progress pg;
    int json;
    unsigned warned;
} tool_state;

static int on_progress(void *user, const dlc_build_progress *p)
{
    tool_state *t = user;
    const double rate = p->seconds > 0 ? (double)p->done / p->seconds : 0;
    const double mbs = p->seconds > 0 ? (double)p->bytes_in / p->seconds / 1e6 : 0;
    char eta[32], skipped[48] = "";
    tool_human_eta(p->done, p->total, rate, eta, sizeof eta);
    if (p->skipped)
        snprintf(skipped, sizeof skipped, "  (%llu skipped)", (unsigned long long)p->skipped);
    tool_progress_line(
        &t->pg, p->done == p->total, "%llu/%llu images  %.0f img/s  %.1f MB/s  ETA %s%s",
        (unsigned long long)p->done, (unsigned long long)p->total, rate, mbs, eta, skipped);
    return g_signal != 0;
}

static void on_log(void *user, dlc_log_level level, const char *msg)
{
    tool_state *t = user;
    if (level < DLC_LOG_WARN)
        return;
    if (t->warned++ >= MAX_SKIP_LINES) {
        if (t->warned == MAX_SKIP_LINES + 1)
            fprintf(stderr, "%s%s: warning: more warnings not shown%s\n",
                    t->pg.drawn ? "\r\033[K" : "", TOOL,
                    t->json ? "" : " (--json lists every skipped file)");
        return;
    }
    fprintf(stderr, "%s%s: warning: %s\n", t->pg.drawn ? "\r\033[K" : "", TOOL, msg);
    t->pg.drawn = 0;
}

/* The command line, shell-quoted where needed, for the store's metadata. */
static char *command_line(int argc, char **argv)
{
    size_t n = 1;
    for (int i = 0; i < argc; i++)
        n += 4 * strlen(argv[i]) + 3;
    char *s = malloc(n), *p = s;
    if (!s)
        return NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const int plain = *a && strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789-_./=:,+@%") == strlen(a);
        if (i)
            *p++ = ' ';
        if (plain) {
            p += sprintf(p, "%s", a);
            continue;
        }
        *p++ = '\'';
        for (; *a; a++) {
            if (*a == '\'') {
                memcpy(p, "'\\''", 4);
                p += 4;
            } else {
                *p++ = *a;
            }
        }
        *p++ = '\'';
    }
    *p = '\0';
    return s;
}

static void print_json(const dlc_build_report *r, const char *store, dlc_status rc)
{
    tool_json j;
    tool_json_init(&j, stdout);
    tool_json_object_begin(&j, NULL);
    tool_json_bool(&j, "ok", rc == DLC_OK);
    if (rc != DLC_OK) {
        tool_json_str(&j, "error", dlc_strerror(rc));
        tool_json_str(&j, "message", dlc_errmsg());
    }
    tool_json_str(&j, "store", store);
    tool_json_u64(&j, "count", r->count);
    tool_json_u64(&j, "skipped_count", r->skipped);
    tool_json_array_begin(&j, "skipped");
    for (uint64_t i = 0; i < r->skipped; i++) {
        tool_json_object_begin(&j, NULL);
        tool_json_str(&j, "path", r->skips[i].path);
        tool_json_str(&j, "reason", r->skips[i].reason);
        tool_json_object_end(&j);
    }
    tool_json_array_end(&j);
    tool_json_u64(&j, "bytes_in", r->bytes_in);
    tool_json_u64(&j, "bytes_out", r->bytes_out);
    tool_json_u64(&j, "file_bytes", r->file_bytes);
    tool_json_f64(&j, "seconds", r->seconds);
    tool_json_f64(&j, "images_per_s", r->images_per_s);
    tool_json_u64(&j, "threads", r->threads);
    tool_json_u64(&j, "channels", r->channels);
    tool_json_u64(&j, "converted", r->converted);
    if (rc == DLC_OK)
        tool_json_hex64(&j, "content_digest", r->content_digest);
    else
        tool_json_str(&j, "content_digest", NULL);
    tool_json_object_end(&j);
    tool_json_finish(&j);
}

/* What the command line asks for. */
typedef struct build_args {
    dlc_build_options o;
    dlc_build_fields f;
    const char *out;
    int json;
} build_args;

enum {
    O_SIZE = 256,
    O_CROP,
    O_ENC,
    O_QUALITY,
    O_THREADS,
    O_STRICT,
    O_FORCE,
    O_JSON,
    O_CHANNELS,
    O_MASKS,
    O_MASK_ENC,
};

/* The options of the record's fields. Returns -1 to go on, or the exit status of a bad
 * value. */
static int apply_field_option(build_args *a, int c, const char *arg)
{
    switch (c) {
    case O_CHANNELS:
        if (strcmp(arg, "1") != 0 && strcmp(arg, "3") != 0 && strcmp(arg, "keep") != 0)
            return tool_usage_error(TOOL, NULL, "--channels is 1, 3 or keep, not '%s'", arg);
        a->f.channels = !strcmp(arg, "keep") ? DLC_BUILD_CHANNELS_KEEP : (uint32_t)atoi(arg);
        break;
    case O_MASKS:
        a->f.masks = arg;
        break;
    case O_MASK_ENC:
        if (strcmp(arg, "raw") != 0 && strcmp(arg, "png") != 0)
            return tool_usage_error(TOOL, NULL, "--mask-encoding is raw or png, not '%s'", arg);
        a->f.mask_encoding = strcmp(arg, "raw") == 0 ? DLC_ENCODING_RAW : DLC_ENCODING_PNG;
        break;
    }
    return -1;
}

/* Apply option @p c with value @p arg. Returns -1 to go on, or the exit status of a bad
 * value. */
static int apply_option(build_args *a, int c, const char *arg)
{
    uint64_t v;
    switch (c) {
    case 'o':
        a->out = arg;
        break;
    case O_SIZE:
        if (tool_parse_u64(arg, 8192, &v) != 0 || v == 0)
            return tool_usage_error(TOOL, NULL,
                                    "--size wants a number of pixels in 1..8192, not '%s'", arg);
        a->o.size = (uint32_t)v;
        break;
    case O_CROP:
        if (strcmp(arg, "center") != 0 && strcmp(arg, "none") != 0)
            return tool_usage_error(TOOL, NULL, "--crop is center or none, not '%s'", arg);
        a->o.center_crop = strcmp(arg, "center") == 0;
        break;
    case O_ENC:
        if (strcmp(arg, "raw") != 0 && strcmp(arg, "jpeg") != 0)
            return tool_usage_error(TOOL, NULL, "--encoding is raw or jpeg, not '%s'", arg);
        a->o.encoding = strcmp(arg, "raw") == 0 ? DLC_ENCODING_RAW : DLC_ENCODING_JPEG;
        break;
    case O_QUALITY:
        if (tool_parse_u64(arg, 100, &v) != 0 || v == 0)
            return tool_usage_error(TOOL, NULL, "--quality is 1..100, not '%s'", arg);
        a->o.quality = (int)v;
        break;
    case O_THREADS:
        if (tool_parse_u64(arg, 256, &v) != 0)
            return tool_usage_error(TOOL, NULL, "--threads is 0..256 (0: all cores), not '%s'",
                                    arg);
        a->o.threads = (uint32_t)v;
        break;
    case O_STRICT:
        a->o.strict = 1;
        break;
    case O_FORCE:
        a->o.force = 1;
        break;
    case O_JSON:
        a->json = 1;
        break;
    default:
        return apply_field_option(a, c, arg);
    }
    return -1;
}

/* Parse the command line into @p a. Returns -1 to go on with the build, or the exit status
 * (0 after --help). */
static int parse_args(int argc, char **argv, build_args *a)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"size", required_argument, NULL, O_SIZE},
        {"crop", required_argument, NULL, O_CROP},
        {"encoding", required_argument, NULL, O_ENC},
        {"quality", required_argument, NULL, O_QUALITY},
        {"threads", required_argument, NULL, O_THREADS},
        {"strict", no_argument, NULL, O_STRICT},
        {"force", no_argument, NULL, O_FORCE},
        {"json", no_argument, NULL, O_JSON},
        {"channels", required_argument, NULL, O_CHANNELS},
        {"masks", required_argument, NULL, O_MASKS},
        {"mask-encoding", required_argument, NULL, O_MASK_ENC},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c == '?')
            return tool_usage_error(TOOL, usage, "unknown option or missing value: %s",
                                    argv[optind - 1]);
        const int status = apply_option(a, c, optarg);
        if (status >= 0)
            return status;
    }
    if (a->f.mask_encoding >= 0 && !a->f.masks)
        return tool_usage_error(TOOL, NULL, "--mask-encoding goes with --masks DIR");
    if (!a->out || optind >= argc)
        return tool_usage_error(TOOL, usage, "%s",
                                !a->out ? "-o STORE is required" : "no SOURCE given");
    return -1;
}

/* SIGINT and SIGTERM cancel the build through the progress callback. */
static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* Say why the build failed; returns the exit status. */
static int report_failure(dlc_status rc, const char *out)
{
    if (rc == DLC_ECANCELED && g_signal) {
        fprintf(stderr, "%s: interrupted; %s was not written\n", TOOL, out);
        return 128 + g_signal;
    }
    tool_report(TOOL, rc, NULL);
    if (rc == DLC_EEXIST) {
        fprintf(stderr, "%s: pass --force to replace %s\n", TOOL, out);
        return 2;
    }
    return 1;
}

/* The one line a finished build prints on stderr. */
static void print_summary(const dlc_build_report *r, const char *out)
{
    char fb[32], el[32];
    fprintf(stderr,
            "%s: %s: %llu images (%llu skipped) in %s, %.0f img/s on %u threads, "
            "%.1f MB/s read, %s on disk, digest %016llx\n",
            TOOL, out, (unsigned long long)r->count, (unsigned long long)r->skipped,
            tool_human_seconds(r->seconds, el, sizeof el), r->images_per_s, r->threads,
            r->seconds > 0 ? (double)r->bytes_in / r->seconds / 1e6 : 0.0,
            tool_human_bytes(r->file_bytes, fb, sizeof fb), (unsigned long long)r->content_digest);
}

int main(int argc, char **argv)
{
    build_args a = {.out = NULL};
    dlc_build_options_init(&a.o);
    dlc_build_fields_init(&a.f);
    /* Before getopt_long(), which permutes argv. */
    char *cmd = command_line(argc, argv);
    int status = parse_args(argc, argv, &a);
    if (status >= 0) {
        free(cmd);
        return status;
    }
    catch_signals();

    tool_state t = {.json = a.json};
    tool_progress_init(&t.pg, 10);
    a.o.command = cmd;
    a.o.progress = on_progress;
    a.o.progress_user = &t;
    a.o.log = on_log;
    a.o.log_user = &t;
    dlc_build_report *r = NULL;
    const dlc_status rc = dlc_build_with_fields((const char *const *)argv + optind,
                                                (size_t)(argc - optind), a.out, &a.o, &a.f, &r);
    tool_progress_end(&t.pg);
    status = rc == DLC_OK ? 0 : report_failure(rc, a.out);
    if (r && t.json)
        print_json(r, a.out, rc);
    if (rc == DLC_OK)
        print_summary(r, a.out);
    dlc_build_report_free(r);
    free(cmd);
    return status;
}
