/*
 * cachebuild: turn JPEG sources into a dlcache store, or a store set.
 *
 *   cachebuild SOURCE... -o STORE [--size N] [--crop center|none]
 *              [--encoding raw|jpeg] [--quality Q] [--channels 1|3|keep]
 *              [--masks DIR] [--mask-encoding raw|png] [--threads N]
 *              [--strict] [--force] [--json]
 *   cachebuild SOURCE... -o SET --shards N [options]   every part here, then the index
 *   cachebuild SOURCE... -o SET --part I/N [options]   part I only (one machine of many)
 *   cachebuild --join SET [--json]                     the index, once every part is there
 *
 * A thin shell over dlc_build() and dlc_set_join(): it parses
 * flags, draws a progress line, turns SIGINT/SIGTERM into a clean cancel (the library then
 * removes its temporary files) and prints the report.
 *
 * Exit status: 0 built, 1 failed (including no valid image, a bad image with --strict, and a
 * join that finds parts missing or foreign), 2 usage error or the output exists without
 * --force, 128+signal when interrupted.
 */
#include <dlcache/build.h>
#include <dlcache/set.h>
#include <dlcache/store.h>

#include "cachebuild_tokens.h"
#include "toolutil.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
          "       " TOOL " SOURCE... -o SET --shards N | --part I/N [options]\n"
          "       " TOOL " --join SET [--json]\n"
          "       " TOOL
          " --tokens SOURCE... -o STORE [options]   a token store (--tokens --help)\n"
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
          "  --shards N             write a store set: the directory SET with N parts,\n"
          "                         built at once (the threads shared), then its index;\n"
          "                         every tool, the loader and Python take SET\n"
          "  --part I/N             build part I (0..N-1) of the set SET only: one machine's\n"
          "                         share; every machine scans the same SOURCEs\n"
          "  --join SET             write SET's index once all its parts are there\n"
          "  --force                replace STORE (or the set in SET) if it exists\n"
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
    char shown[4096];
    fprintf(stderr, "%s%s: warning: %s\n", t->pg.drawn ? "\r\033[K" : "", TOOL,
            tool_printable(msg, shown, sizeof shown));
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

/* A set's part of the report: N, set_id, and each part built. */
static void print_json_set(tool_json *j, const dlc_build_report *r)
{
    tool_json_object_begin(j, "set");
    tool_json_u64(j, "parts", r->parts);
    tool_json_hex64(j, "set_id", r->set_id);
    tool_json_u64(j, "items", r->items);
    tool_json_array_begin(j, "built");
    for (uint32_t k = 0; k < r->num_built; k++) {
        const dlc_build_part *p = &r->built[k];
        char name[64];
        snprintf(name, sizeof name, "part-%05u-of-%05u.dlc", p->part, r->parts);
        tool_json_object_begin(j, NULL);
        tool_json_u64(j, "part", p->part);
        tool_json_str(j, "name", name);
        tool_json_u64(j, "first_item", p->first_item);
        tool_json_u64(j, "end_item", p->end_item);
        tool_json_u64(j, "count", p->count);
        tool_json_u64(j, "skipped", p->skipped);
        tool_json_u64(j, "file_bytes", p->file_bytes);
        tool_json_object_end(j);
    }
    tool_json_array_end(j);
    tool_json_object_end(j);
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
    if (r->parts)
        print_json_set(&j, r);
    tool_json_object_end(&j);
    tool_json_finish(&j);
}

/* What the command line asks for. */
typedef struct build_args {
    dlc_build_options o; /* a set's N and part too */
    int to_set;          /* --shards or --part */
    const char *join;    /* --join SET */
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
    O_SHARDS,
    O_PART,
    O_JOIN,
};

/* The options of the record's fields. Returns -1 to go on, or the exit status of a bad
 * value. */
static int apply_field_option(build_args *a, int c, const char *arg)
{
    switch (c) {
    case O_CHANNELS:
        if (strcmp(arg, "1") != 0 && strcmp(arg, "3") != 0 && strcmp(arg, "keep") != 0)
            return tool_usage_error(TOOL, NULL, "--channels is 1, 3 or keep, not '%s'", arg);
        a->o.channels = !strcmp(arg, "keep") ? DLC_BUILD_CHANNELS_KEEP : (uint32_t)atoi(arg);
        break;
    case O_MASKS:
        a->o.masks = arg;
        break;
    case O_MASK_ENC:
        if (strcmp(arg, "raw") != 0 && strcmp(arg, "png") != 0)
            return tool_usage_error(TOOL, NULL, "--mask-encoding is raw or png, not '%s'", arg);
        a->o.mask_encoding = strcmp(arg, "raw") == 0 ? DLC_ENCODING_RAW : DLC_ENCODING_PNG;
        break;
    }
    return -1;
}

/* --shards N, --part I/N, --join SET. Returns -1 to go on, or the exit status of a bad
 * value. */
static int apply_set_option(build_args *a, int c, const char *arg)
{
    uint64_t v, w;
    const char *slash = strchr(arg, '/');
    char num[32];
    switch (c) {
    case O_SHARDS:
        if (a->to_set || tool_parse_u64(arg, 65536, &v) != 0 || v == 0)
            return tool_usage_error(TOOL, NULL,
                                    a->to_set ? "--shards and --part go alone: one of them"
                                              : "--shards wants a number of parts in 1..65536, "
                                                "not '%s'",
                                    arg);
        a->o.parts = (uint32_t)v;
        a->to_set = 1;
        break;
    case O_PART:
        if (!slash || (size_t)(slash - arg) >= sizeof num)
            return tool_usage_error(TOOL, NULL, "--part wants I/N (part I of N), not '%s'", arg);
        memcpy(num, arg, (size_t)(slash - arg));
        num[slash - arg] = '\0';
        if (tool_parse_u64(num, 65535, &v) != 0 || tool_parse_u64(slash + 1, 65536, &w) != 0 ||
            w == 0 || v >= w)
            return tool_usage_error(TOOL, NULL,
                                    "--part wants I/N with N in 1..65536 and I in 0..N-1, not "
                                    "'%s'",
                                    arg);
        if (a->to_set)
            return tool_usage_error(TOOL, NULL, "--shards and --part go alone: one of them");
        a->o.parts = (uint32_t)w;
        a->o.part = (uint32_t)v;
        a->o.one_part = 1;
        a->to_set = 1;
        break;
    case O_JOIN:
        a->join = arg;
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
    case O_SHARDS:
    case O_PART:
    case O_JOIN:
        return apply_set_option(a, c, arg);
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
        {"shards", required_argument, NULL, O_SHARDS},
        {"part", required_argument, NULL, O_PART},
        {"join", required_argument, NULL, O_JOIN},
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
    if (a->o.mask_encoding >= 0 && !a->o.masks)
        return tool_usage_error(TOOL, NULL, "--mask-encoding goes with --masks DIR");
    if (a->join && (a->out || a->to_set || optind < argc))
        return tool_usage_error(TOOL, usage,
                                "--join SET goes alone (with --json): the parts are in SET");
    if (a->join)
        return -1;
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
    if (rc == DLC_ECANCELED && g_signal)
        return tool_interrupted(TOOL, out, g_signal);
    /* The library's message already ends with the system's words ("...: No such file or
     * directory"): said once, after the path, not again in front of it. */
    const char *msg = dlc_errmsg();
    if (rc < 0 && rc > -4096 && msg && strstr(msg, dlc_strerror(rc)))
        fprintf(stderr, "%s: error: %s\n", TOOL, msg);
    else
        tool_report(TOOL, rc, NULL);
    if (rc == DLC_EEXIST) {
        char shown[1024];
        fprintf(stderr, "%s: pass --force to replace %s\n", TOOL,
                tool_printable(out, shown, sizeof shown));
        return 2;
    }
    return 1;
}

/* Create the folders above @p out that are missing, as mkdir -p would: a build into
 * runs/today/train.dlc makes runs/today (a set's own folder is made by the build). Returns 0, or
 * 1 with the folder and the reason said once. */
static int make_parents(const char *out)
{
    char *p = strdup(out);
    if (!p) {
        fprintf(stderr, "%s: error: out of memory\n", TOOL);
        return 1;
    }
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
    char *const last = strrchr(p, '/');
    int status = 0;
    if (last && last != p) {
        *last = '\0';
        for (char *q = p + 1;; q++) {
            if (*q != '/' && *q != '\0')
                continue;
            const char c = *q;
            *q = '\0';
            struct stat st;
            if (stat(p, &st) != 0 && mkdir(p, 0777) != 0 && errno != EEXIST) {
                fprintf(stderr, "%s: error: cannot create %s, a folder of %s: %s\n", TOOL, p, out,
                        strerror(errno));
                status = 1;
                break;
            }
            *q = c;
            if (!c)
                break;
        }
    }
    free(p);
    return status;
}

/* The one line a finished build prints on stderr. */
static void print_summary(const dlc_build_report *r, const char *out_raw)
{
    char fb[32], el[32], what[96] = "", shown[1024];
    const char *out = tool_printable(out_raw, shown, sizeof shown); /* a name is not a command */
    if (r->parts && r->num_built == 1 && r->parts > 1)
        snprintf(what, sizeof what, "part %u of %u (items %llu..%llu): ", r->built[0].part,
                 r->parts, (unsigned long long)r->built[0].first_item,
                 (unsigned long long)r->built[0].end_item);
    else if (r->parts)
        snprintf(what, sizeof what, "a set of %u part%s: ", r->parts, r->parts == 1 ? "" : "s");
    fprintf(stderr,
            "%s: %s: %s%llu images (%llu skipped) in %s, %.0f img/s on %u threads, "
            "%.1f MB/s read, %s on disk, digest %016llx\n",
            TOOL, out, what, (unsigned long long)r->count, (unsigned long long)r->skipped,
            tool_human_seconds(r->seconds, el, sizeof el), r->images_per_s, r->threads,
            r->seconds > 0 ? (double)r->bytes_in / r->seconds / 1e6 : 0.0,
            tool_human_bytes(r->file_bytes, fb, sizeof fb), (unsigned long long)r->content_digest);
    if (r->parts && r->num_built == 1 && r->parts > 1)
        fprintf(stderr, "%s: set_id %016llx; once all %u parts are in %s: %s --join %s\n", TOOL,
                (unsigned long long)r->set_id, r->parts, out, TOOL, out);
}

/* --join SET: the index, then the retired files go. */
static int run_join(const char *dir, int json)
{
    dlc_set_join_report jr = {0};
    const dlc_status rc = dlc_set_join(dir, &jr);
    if (json) {
        tool_json j;
        tool_json_init(&j, stdout);
        tool_json_object_begin(&j, NULL);
        tool_json_bool(&j, "ok", rc == DLC_OK);
        if (rc != DLC_OK) {
            tool_json_str(&j, "error", dlc_strerror(rc));
            tool_json_str(&j, "message", dlc_errmsg());
        }
        tool_json_str(&j, "set", dir);
        tool_json_u64(&j, "parts", jr.num_shards);
        tool_json_u64(&j, "count", jr.count);
        tool_json_u64(&j, "file_bytes", jr.file_bytes);
        tool_json_hex64(&j, "set_id", jr.set_id);
        tool_json_bool(&j, "unchanged", jr.unchanged);
        tool_json_u64(&j, "temp_files", jr.temp_files);
        tool_json_object_end(&j);
        tool_json_finish(&j);
    }
    if (rc < 0) {
        tool_report(TOOL, rc, "join");
        return 1;
    }
    char fb[32], shown[1024];
    fprintf(stderr, "%s: %s: joined %u parts, %llu records, %s%s\n", TOOL,
            tool_printable(dir, shown, sizeof shown), jr.num_shards, (unsigned long long)jr.count,
            tool_human_bytes(jr.file_bytes, fb, sizeof fb),
            jr.unchanged ? " (the index was already this one)" : "");
    return 0;
}

int main(int argc, char **argv)
{
    if (cachebuild_tokens_wanted(argc, argv)) {
        catch_signals();
        return cachebuild_tokens_main(argc, argv, &g_signal);
    }
    build_args a = {.out = NULL};
    dlc_build_options_init(&a.o);
    /* Before getopt_long(), which permutes argv. */
    char *cmd = command_line(argc, argv);
    int status = parse_args(argc, argv, &a);
    if (status >= 0 || a.join) {
        free(cmd);
        return status >= 0 ? status : run_join(a.join, a.json);
    }
    if (make_parents(a.out)) {
        free(cmd);
        return 1;
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
    const char *const *sources = (const char *const *)argv + optind;
    const size_t nsources = (size_t)(argc - optind);
    const dlc_status rc = dlc_build(sources, nsources, a.out, &a.o, &r);
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
