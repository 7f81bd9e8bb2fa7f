/* cachewarm: fill a node's local SSD with a store from S3, GCS or https.
 * A thin shell over dlc_warm() (include/dlcache/warm.h): flags, a progress
 * line, a summary or a JSON report. */
#include <dlcache/warm.h>

#include "toolutil.h"

#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const tool = "cachewarm";

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: cachewarm URL -o DEST [options]\n"
        "       cachewarm push PATH URL [options]\n"
        "Download a store or a store set (or any object with --no-verify) to local disk with\n"
        "parallel ranged GETs; resumable, verified and published atomically. 'push' uploads\n"
        "a store or a set's directory (see cachewarm push --help).\n"
        "\n"
        "  URL                  s3://BUCKET/KEY, gs://BUCKET/OBJECT, https://... or http://...;\n"
        "                       a prefix holding index.dlcset is a store set\n"
        "  -o, --output DEST    destination file, or directory for a set (its parent must exist)\n"
        "  --connections N      parallel requests (default 8)\n"
        "  --chunk-size SIZE    bytes per request: 4M, 64M... (default 16M; K, M, G, MiB...\n"
        "                       are powers of 1024, kB, MB, GB of 1000)\n"
        "  --endpoint URL       S3 or GCS endpoint (default: AWS_ENDPOINT_URL or\n"
        "                       DLCACHE_GCS_ENDPOINT, else the cloud's own)\n"
        "  --region REGION      S3 region (default: AWS_REGION, else us-east-1)\n"
        "  --no-verify          do not check the store's record checksums\n"
        "  --no-resume          discard an earlier partial download\n"
        "  --insecure           do not verify TLS certificates\n"
        "  --force              replace a file at DEST that cachewarm did not download there;\n"
        "                       a set: write into a folder that holds other files\n"
        "  --timeout SECONDS    retry a request slower than 1 KiB/s this long (default 30, min "
        "0.1)\n"
        "  --retries N          attempts per request after the first, 0..1000 (default 8;\n"
        "                       0: fail fast)\n"
        "  --json               print a JSON report on stdout\n"
        "  -q, --quiet          no progress line, notices or summary\n"
        "  -h, --help           this text\n"
        "\n"
        "Credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN for s3://;\n"
        "GOOGLE_OAUTH_ACCESS_TOKEN or the GCE metadata server for gs://.\n"
        "Several processes warming the same DEST at once download it once.\n");
}

typedef struct ui {
    tool_progress bar;
    int quiet;
} ui;

static void on_log(void *user, dlc_log_level level, const char *msg)
{
    ui *u = user;
    if (u->quiet && level < DLC_LOG_WARN)
        return;
    tool_progress_end(&u->bar);
    char shown[4096];
    fprintf(stderr, "%s: %s%s\n", tool, level == DLC_LOG_WARN ? "warning: " : "",
            tool_printable(msg, shown, sizeof shown));
}

static int on_progress(void *user, const dlc_warm_progress *p)
{
    ui *u = user;
    if (!u->quiet) {
        char done[32], total[32], eta[32];
        const double rate = p->seconds > 0 ? (double)p->downloaded / p->seconds : 0.0;
        const double left = p->total > p->done ? (double)(p->total - p->done) : 0.0;
        tool_human_bytes(p->done, done, sizeof done);
        tool_human_bytes(p->total, total, sizeof total);
        if (p->verifying)
            tool_progress_line(&u->bar, 0, "verifying %s", total);
        else
            tool_progress_line(&u->bar, 0, "%s / %s  %.1f MB/s  ETA %s", done, total, rate / 1e6,
                               tool_human_seconds(rate > 0 ? left / rate : -1.0, eta, sizeof eta));
    }
    return interrupted != 0;
}

/* What the command line asked for, besides the library's options. */
typedef struct cli {
    dlc_warm_options opt;
    const char *url;
    const char *dest;
    int json;
    ui u;
} cli;

enum {
    OPT_CONNECTIONS = 256,
    OPT_CHUNK,
    OPT_ENDPOINT,
    OPT_REGION,
    OPT_NO_VERIFY,
    OPT_NO_RESUME,
    OPT_INSECURE,
    OPT_TIMEOUT,
    OPT_RETRIES,
    OPT_JSON,
    OPT_FORCE,
};

/* Flags that take a number. Returns 0, or the exit status 2 after saying why. */
static int parse_number(cli *c, int flag, const char *arg)
{
    uint64_t v = 0;
    switch (flag) {
    case OPT_CONNECTIONS:
        if (tool_parse_u64(arg, 256, &v) < 0 || v == 0) {
            fprintf(stderr, "%s: error: --connections wants 1..256, not '%s'\n", tool, arg);
            return 2;
        }
        c->opt.connections = (uint32_t)v;
        return 0;
    case OPT_CHUNK:
        if (tool_parse_size(arg, &v) < 0 || v < (64u << 10)) {
            fprintf(stderr, "%s: error: --chunk-size wants a size of 64K or more, not '%s'\n", tool,
                    arg);
            return 2;
        }
        c->opt.chunk_size = v;
        return 0;
    case OPT_TIMEOUT: {
        char *end = NULL;
        const double t = strtod(arg, &end);
        if (!end || *end || !(t > 0) || t > 3600) {
            fprintf(stderr, "%s: error: --timeout wants seconds, not '%s'\n", tool, arg);
            return 2;
        }
        c->opt.timeout_s = t;
        return 0;
    }
    default: /* OPT_RETRIES */
        if (tool_parse_u64(arg, 1000, &v) < 0) {
            fprintf(stderr, "%s: error: --retries wants 0..1000, not '%s'\n", tool, arg);
            return 2;
        }
        c->opt.max_retries = (uint32_t)v;
        if (v == 0)
            c->opt.flags |= DLC_WARM_NO_RETRY;
        return 0;
    }
}

/* Fill @p c from the command line. Returns -1 to go on, else the exit status
 * (0 after --help, 2 after a usage error). */
static int parse_args(int argc, char **argv, cli *c)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"connections", required_argument, NULL, OPT_CONNECTIONS},
        {"chunk-size", required_argument, NULL, OPT_CHUNK},
        {"endpoint", required_argument, NULL, OPT_ENDPOINT},
        {"region", required_argument, NULL, OPT_REGION},
        {"no-verify", no_argument, NULL, OPT_NO_VERIFY},
        {"no-resume", no_argument, NULL, OPT_NO_RESUME},
        {"insecure", no_argument, NULL, OPT_INSECURE},
        {"force", no_argument, NULL, OPT_FORCE},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"retries", required_argument, NULL, OPT_RETRIES},
        {"json", no_argument, NULL, OPT_JSON},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int f;
    while ((f = getopt_long(argc, argv, "o:qh", longopts, NULL)) != -1) {
        switch (f) {
        case 'o':
            c->dest = optarg;
            break;
        case OPT_CONNECTIONS:
        case OPT_CHUNK:
        case OPT_TIMEOUT:
        case OPT_RETRIES:
            if (parse_number(c, f, optarg) != 0)
                return 2;
            break;
        case OPT_ENDPOINT:
            c->opt.endpoint = optarg;
            break;
        case OPT_REGION:
            c->opt.region = optarg;
            break;
        case OPT_NO_VERIFY:
            c->opt.flags |= DLC_WARM_NO_VERIFY;
            break;
        case OPT_NO_RESUME:
            c->opt.flags |= DLC_WARM_NO_RESUME;
            break;
        case OPT_INSECURE:
            c->opt.flags |= DLC_WARM_INSECURE;
            break;
        case OPT_FORCE:
            c->opt.flags |= DLC_WARM_FORCE;
            break;
        case OPT_JSON:
            c->json = 1;
            break;
        case 'q':
            c->u.quiet = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1 || !c->dest) {
        usage(stderr);
        return 2;
    }
    c->url = argv[optind];
    return -1;
}

/* SIGINT and SIGTERM stop the download through the progress callback, so
 * that the partial download and its journal are kept for a rerun. */
static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void print_json(const cli *c, dlc_status rc, const dlc_warm_result *r, const char *shown,
                       double rate)
{
    tool_json j;
    tool_json_init(&j, stdout);
    tool_json_object_begin(&j, NULL);
    tool_json_str(&j, "tool", tool);
    tool_json_str(&j, "url", shown);
    tool_json_str(&j, "dest", c->dest);
    tool_json_bool(&j, "ok", rc == 0);
    if (rc != 0) {
        tool_json_str(&j, "error", dlc_strerror(rc));
        tool_json_str(&j, "detail", dlc_errmsg());
    }
    tool_json_u64(&j, "bytes", r->bytes);
    tool_json_u64(&j, "bytes_downloaded", r->bytes_downloaded);
    tool_json_f64(&j, "seconds", r->seconds);
    tool_json_f64(&j, "verify_seconds", r->verify_seconds);
    tool_json_f64(&j, "mb_per_s", rate);
    tool_json_bool(&j, "resumed", r->resumed);
    tool_json_bool(&j, "already_complete", r->already_complete);
    tool_json_bool(&j, "waited", r->waited);
    tool_json_bool(&j, "verified", r->verified);
    tool_json_u64(&j, "retries", r->retries);
    tool_json_u64(&j, "chunks", r->chunks);
    tool_json_u64(&j, "chunks_fetched", r->chunks_fetched);
    tool_json_u64(&j, "connections", c->opt.connections);
    tool_json_u64(&j, "chunk_size", c->opt.chunk_size);
    tool_json_str(&j, "etag", r->etag);
    tool_json_bool(&j, "is_set", r->is_set);
    tool_json_u64(&j, "files", r->files);
    tool_json_bool(&j, "md5_checked", r->md5_checked);
    tool_json_object_end(&j);
    tool_json_finish(&j);
    fflush(stdout);
}

static void print_summary(const cli *c, const dlc_warm_result *r, const char *shown, double rate)
{
    char total[32], got[32], dest_buf[1024];
    const char *dest = tool_printable(c->dest, dest_buf, sizeof dest_buf);
    tool_human_bytes(r->bytes, total, sizeof total);
    tool_human_bytes(r->bytes_downloaded, got, sizeof got);
    if (r->already_complete)
        fprintf(stderr, "%s: %s is already complete (%s from %s)%s\n", tool, dest, total, shown,
                r->waited ? "; another process downloaded it" : "");
    else
        fprintf(stderr, "%s: %s -> %s: %s, downloaded %s in %.2f s (%.1f MB/s)%s%s\n", tool, shown,
                dest, total, got, r->seconds, rate, r->resumed ? ", resumed" : "",
                r->verified ? ", verified" : "");
}

/* ---- cachewarm push ---------------------------------------------------------------------- */

static void push_usage(FILE *f)
{
    fprintf(f,
            "usage: cachewarm push PATH URL [options]\n"
            "Upload a store file, or a store set's directory, so that every node can warm it:\n"
            "parallel multipart uploads (S3) or a resumable upload session (GCS), each part's\n"
            "MD5 checked against the server's ETag and the object's size and ETag checked after\n"
            "completing. A set's shards go first, in parallel, its index.dlcset last. A rerun\n"
            "after a crash sends only the parts the server does not have.\n"
            "\n"
            "  PATH                 a store file, or a set's directory (with index.dlcset)\n"
            "  URL                  s3://BUCKET/KEY or gs://BUCKET/OBJECT; a set: the prefix its\n"
            "                       files go under; a URL ending in / gets the file's name\n"
            "  --connections N      parallel part uploads, shared by a set's files (default 8)\n"
            "  --part-size SIZE     bytes per part: 8M, 64M... (default 16M; S3 wants >= 5M)\n"
            "  --state-dir DIR      resume journals (default: DLCACHE_STATE_DIR, else\n"
            "                       $XDG_STATE_HOME/dlcache or ~/.local/state/dlcache)\n"
            "  --endpoint URL       S3 or GCS endpoint (default: from the environment)\n"
            "  --region REGION      S3 region (default: AWS_REGION, else us-east-1)\n"
            "  --no-resume          abort an earlier run's upload and start over\n"
            "  --insecure           do not verify TLS certificates\n"
            "  --timeout SECONDS    retry a request slower than 1 KiB/s this long (default 30, min "
            "0.1)\n"
            "  --retries N          attempts per request after the first, 0..1000 (default 8;\n"
            "                       0: fail fast)\n"
            "  --json               print a JSON report on stdout\n"
            "  -q, --quiet          no progress line, notices or summary\n"
            "  -h, --help           this text\n");
}

typedef struct push_cli {
    dlc_warm_push_options opt; /* its net points to net */
    dlc_warm_options net;
    const char *path;
    const char *url;
    int json;
    ui u;
} push_cli;

enum { OPT_PART_SIZE = 300, OPT_STATE_DIR };

/* The options that push shares with a download; 0 when @p f is not one of them, 1 when taken,
 * or the exit status 2. */
static int push_common_flag(push_cli *c, int f, const char *arg)
{
    cli tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.opt = c->net;
    switch (f) {
    case OPT_CONNECTIONS:
    case OPT_TIMEOUT:
    case OPT_RETRIES:
        if (parse_number(&tmp, f, arg) != 0)
            return 2;
        c->net = tmp.opt;
        return 1;
    case OPT_ENDPOINT:
        c->net.endpoint = arg;
        return 1;
    case OPT_REGION:
        c->net.region = arg;
        return 1;
    case OPT_NO_RESUME:
        c->net.flags |= DLC_WARM_NO_RESUME;
        return 1;
    case OPT_INSECURE:
        c->net.flags |= DLC_WARM_INSECURE;
        return 1;
    default:
        return 0;
    }
}

static int push_args(int argc, char **argv, push_cli *c)
{
    static const struct option longopts[] = {
        {"connections", required_argument, NULL, OPT_CONNECTIONS},
        {"part-size", required_argument, NULL, OPT_PART_SIZE},
        {"state-dir", required_argument, NULL, OPT_STATE_DIR},
        {"endpoint", required_argument, NULL, OPT_ENDPOINT},
        {"region", required_argument, NULL, OPT_REGION},
        {"no-resume", no_argument, NULL, OPT_NO_RESUME},
        {"insecure", no_argument, NULL, OPT_INSECURE},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"retries", required_argument, NULL, OPT_RETRIES},
        {"json", no_argument, NULL, OPT_JSON},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int f;
    uint64_t v = 0;
    while ((f = getopt_long(argc, argv, "qh", longopts, NULL)) != -1) {
        const int common = push_common_flag(c, f, optarg);
        if (common == 2)
            return 2;
        if (common)
            continue;
        if (f == OPT_PART_SIZE) {
            if (tool_parse_size(optarg, &v) < 0 || v < (64u << 10) || v > (5ull << 30))
                return tool_usage_error(tool, NULL, "--part-size wants 64K..5G, not '%s'", optarg);
            c->opt.part_size = v;
        } else if (f == OPT_STATE_DIR) {
            c->opt.state_dir = optarg;
        } else if (f == OPT_JSON) {
            c->json = 1;
        } else if (f == 'q') {
            c->u.quiet = 1;
        } else if (f == 'h') {
            push_usage(stdout);
            return 0;
        } else {
            push_usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 2) {
        push_usage(stderr);
        return 2;
    }
    c->path = argv[optind];
    c->url = argv[optind + 1];
    return -1;
}

static void push_json(const push_cli *c, dlc_status rc, const dlc_warm_push_result *r,
                      const char *shown, double rate)
{
    tool_json j;
    tool_json_init(&j, stdout);
    tool_json_object_begin(&j, NULL);
    tool_json_str(&j, "tool", "cachewarm push");
    tool_json_str(&j, "path", c->path);
    tool_json_str(&j, "url", shown);
    tool_json_bool(&j, "ok", rc == 0);
    if (rc != 0) {
        tool_json_str(&j, "error", dlc_strerror(rc));
        tool_json_str(&j, "detail", dlc_errmsg());
    }
    tool_json_u64(&j, "bytes", r->bytes);
    tool_json_u64(&j, "bytes_uploaded", r->bytes_uploaded);
    tool_json_f64(&j, "seconds", r->seconds);
    tool_json_f64(&j, "verify_seconds", r->verify_seconds);
    tool_json_f64(&j, "complete_seconds", r->complete_seconds);
    tool_json_f64(&j, "mb_per_s", rate);
    tool_json_bool(&j, "is_set", r->is_set);
    tool_json_u64(&j, "files", r->files);
    tool_json_u64(&j, "files_skipped", r->files_skipped);
    tool_json_u64(&j, "parts", r->parts);
    tool_json_u64(&j, "parts_uploaded", r->parts_uploaded);
    tool_json_u64(&j, "parts_resumed", r->parts_resumed);
    tool_json_u64(&j, "retries", r->retries);
    tool_json_bool(&j, "resumed", r->resumed);
    tool_json_u64(&j, "connections", c->net.connections);
    tool_json_u64(&j, "part_size", c->opt.part_size);
    tool_json_str(&j, "etag", r->etag);
    tool_json_object_end(&j);
    tool_json_finish(&j);
    fflush(stdout);
}

static int push_main(int argc, char **argv)
{
    push_cli c;
    memset(&c, 0, sizeof c);
    dlc_warm_push_options_init(&c.opt);
    dlc_warm_options_init(&c.net);
    c.opt.net = &c.net;
    const int status = push_args(argc, argv, &c);
    if (status >= 0)
        return status;
    catch_signals();
    tool_progress_init(&c.u.bar, 10);
    c.net.progress = on_progress;
    c.net.progress_user = &c.u;
    c.net.log = on_log;
    c.net.log_user = &c.u;
    dlc_warm_push_result r;
    const dlc_status rc = dlc_warm_push(c.path, c.url, &c.opt, &r);
    tool_progress_end(&c.u.bar);
    char shown[2048], got[32], total[32], path_buf[1024];
    dlc_warm_redact_url(c.url, shown, sizeof shown);
    const double rate = r.seconds > 0 ? (double)r.bytes_uploaded / r.seconds / 1e6 : 0.0;
    if (c.json)
        push_json(&c, rc, &r, shown, rate);
    if (rc != 0) {
        tool_report(tool, rc, NULL);
        return rc == DLC_ECANCELED ? 130 : 1;
    }
    if (!c.u.quiet)
        fprintf(stderr, "%s: %s -> %s: %s%s, uploaded %s in %.2f s (%.1f MB/s)%s, checked\n", tool,
                tool_printable(c.path, path_buf, sizeof path_buf), shown,
                tool_human_bytes(r.bytes, total, sizeof total), r.is_set ? " (a set)" : "",
                tool_human_bytes(r.bytes_uploaded, got, sizeof got), r.seconds, rate,
                r.resumed ? ", resumed" : "");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "push") == 0)
        return push_main(argc - 1, argv + 1);
    cli c;
    memset(&c, 0, sizeof c);
    dlc_warm_options_init(&c.opt);
    const int status = parse_args(argc, argv, &c);
    if (status >= 0)
        return status;
    catch_signals();
    tool_progress_init(&c.u.bar, 10);
    c.opt.progress = on_progress;
    c.opt.progress_user = &c.u;
    c.opt.log = on_log;
    c.opt.log_user = &c.u;

    dlc_warm_result r;
    const dlc_status rc = dlc_warm(c.url, c.dest, &c.opt, &r);
    tool_progress_end(&c.u.bar);
    char shown[2048];
    dlc_warm_redact_url(c.url, shown, sizeof shown);
    const double rate = r.seconds > 0 ? (double)r.bytes_downloaded / r.seconds / 1e6 : 0.0;
    if (c.json)
        print_json(&c, rc, &r, shown, rate);
    if (rc != 0) {
        tool_report(tool, rc, NULL);
        return rc == DLC_ECANCELED ? 130 : 1;
    }
    if (!c.u.quiet)
        print_summary(&c, &r, shown, rate);
    return 0;
}
