/* `cachebench load` options: flags, valued options, then the checks between them and the digest
 * pass they imply. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

static void log_to_stderr(void *user, dlc_log_level level, const char *msg)
{
    (void)user;
    static const char *const names[] = {"debug", "info", "warning"};
    if (level == DLC_LOG_DEBUG && !getenv("CACHEBENCH_DEBUG"))
        return;
    fprintf(stderr, TOOL ": loader %s: %s\n", names[level <= DLC_LOG_WARN ? level : 0], msg);
}

/* What the options said before they are resolved into bench_load_opts' digest fields. */
typedef struct digest_request {
    int digest;              /* --digest 1, --no-digest 0, neither -1 */
    uint64_t digest_batches; /* --digest-batches K, else 0 */
} digest_request;

static int parse_u32(const char *v, uint32_t max, uint32_t *out)
{
    uint64_t x;
    if (tool_parse_u64(v, max, &x) != 0)
        return -1;
    *out = (uint32_t)x;
    return 0;
}

static int parse_float(const char *v, float lo, float hi, float *out)
{
    char *end;
    const float x = strtof(v, &end);
    if (!*v || *end || !(x >= lo && x <= hi))
        return -1;
    *out = x;
    return 0;
}

/* Index of @p v in the NULL-ended @p names, or -1. */
static int pick(const char *v, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (!strcmp(v, names[i]))
            return i;
    return -1;
}

/* An option without a value. Returns 1 when @p a was one, 0 when it was not. */
static int parse_flag(const char *a, bench_load_opts *o, digest_request *d)
{
    if (!strcmp(a, "--json"))
        o->json = 1;
    else if (!strcmp(a, "--random-resized-crop"))
        o->cfg.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    else if (!strcmp(a, "--digest"))
        d->digest = 1;
    else if (!strcmp(a, "--no-digest"))
        d->digest = 0;
    else if (!strcmp(a, "--no-prewarm"))
        o->prewarm = 0;
    else if (!strcmp(a, "--device-lend"))
        o->device_lend = 1;
    else
        return 0;
    return 1;
}

/* The options that shape the loader's configuration. Returns 0 on a good value, 1 on a bad
 * one, -1 when @p a is none of them. */
static int parse_config_option(const char *a, const char *v, dlc_loader_config *cfg)
{
    static const char *const dtypes[] = {"uint8", "float32", "float16", "bfloat16", NULL};
    static const char *const ios[] = {"auto", "mmap", "direct", NULL};
    static const char *const layouts[] = {"nchw", "nhwc", NULL};
    static const uint32_t layout_of[] = {DLC_LAYOUT_NCHW, DLC_LAYOUT_NHWC};
    static const uint32_t dtype_of[] = {DLC_DTYPE_UINT8, DLC_DTYPE_FLOAT32, DLC_DTYPE_FLOAT16,
                                        DLC_DTYPE_BFLOAT16};
    static const uint32_t io_of[] = {DLC_IO_AUTO, DLC_IO_MMAP, DLC_IO_DIRECT};
    uint32_t u32 = 0;
    int k;
    if (!strcmp(a, "--batch"))
        return parse_u32(v, 1u << 20, &cfg->batch_size) || cfg->batch_size == 0;
    if (!strcmp(a, "--threads")) {
        /* auto: the loader tunes its workers (up to the cores); the references use them all. */
        cfg->auto_threads = !strcmp(v, "auto");
        if (cfg->auto_threads) {
            cfg->threads = dlc__cpu_count();
            return 0;
        }
        if (parse_u32(v, 4096, &cfg->threads))
            return 1;
        if (cfg->threads == 0)
            cfg->threads = dlc__cpu_count();
        return 0;
    }
    if (!strcmp(a, "--prefetch"))
        return parse_u32(v, 1024, &cfg->prefetch) || cfg->prefetch == 0;
    if (!strcmp(a, "--crop")) {
        const int bad = parse_u32(v, 1u << 16, &u32);
        cfg->crop_h = cfg->crop_w = u32;
        return bad;
    }
    if (!strcmp(a, "--dtype")) {
        if ((k = pick(v, dtypes)) >= 0)
            cfg->dtype = dtype_of[k];
        return k < 0;
    }
    if (!strcmp(a, "--io")) {
        if ((k = pick(v, ios)) >= 0)
            cfg->io = io_of[k];
        return k < 0;
    }
    if (!strcmp(a, "--seed"))
        return tool_parse_u64(v, UINT64_MAX, &cfg->seed) != 0;
    if (!strcmp(a, "--epoch"))
        return tool_parse_u64(v, UINT64_MAX / 2, &cfg->epoch) != 0;
    if (!strcmp(a, "--rank"))
        return parse_u32(v, UINT32_MAX, &cfg->rank);
    if (!strcmp(a, "--world-size"))
        return parse_u32(v, UINT32_MAX, &cfg->world_size) || cfg->world_size == 0;
    if (!strcmp(a, "--device")) {
        const int bad = parse_u32(v, INT32_MAX, &u32);
        cfg->device = (int32_t)u32;
        return bad;
    }
    if (!strcmp(a, "--device-layout")) {
        if ((k = pick(v, layouts)) >= 0)
            cfg->device_layout = layout_of[k];
        return k < 0;
    }
    if (!strcmp(a, "--flip"))
        return parse_float(v, 0.0f, 1.0f, &cfg->flip_prob);
    if (!strcmp(a, "--window-shards"))
        return parse_u32(v, 4095, &cfg->window_shards) || cfg->window_shards == 0;
    if (!strcmp(a, "--streams"))
        return parse_u32(v, 4095, &cfg->streams);
    if (!strcmp(a, "--cache-dir")) {
        cfg->cache_dir = v;
        return 0;
    }
    if (!strcmp(a, "--cache-limit"))
        return tool_parse_size(v, &cfg->cache_limit) != 0;
    if (!strcmp(a, "--cache-ranks"))
        return parse_u32(v, 1u << 16, &cfg->cache_ranks) || cfg->cache_ranks == 0;
    if (!strcmp(a, "--downloads"))
        return parse_u32(v, 64, &cfg->downloads) || cfg->downloads == 0;
    return -1;
}

/* The options that shape the measurement. Same returns as parse_config_option(). */
static int parse_run_option(const char *a, const char *v, bench_load_opts *o, digest_request *d)
{
    if (!strcmp(a, "--epochs"))
        return tool_parse_u64(v, 1u << 20, &o->epochs) || o->epochs == 0;
    if (!strcmp(a, "--batches"))
        return tool_parse_u64(v, UINT64_MAX / 2, &o->batches) || o->batches == 0;
    if (!strcmp(a, "--seconds"))
        return bench_parse_seconds(v, &o->seconds) != 0;
    if (!strcmp(a, "--digest-batches"))
        return tool_parse_u64(v, UINT64_MAX / 2, &d->digest_batches) || d->digest_batches == 0;
    if (!strcmp(a, "--jpeg-dir")) {
        o->jpeg_dir = v;
        return 0;
    }
    if (!strcmp(a, "--fields"))
        return bench_fields_parse(v, o) != 0;
    if (!strcmp(a, "--sampler")) {
        static const char *const names[] = {"sequential", "shuffle", "windows", NULL};
        static const uint32_t of[] = {DLC_SAMPLER_SEQUENTIAL, DLC_SAMPLER_SHUFFLE,
                                      DLC_SAMPLER_SHARD_WINDOWS};
        const int k = pick(v, names);
        if (k >= 0)
            o->cfg.sampler = of[k], o->sampler_set = 1;
        return k < 0;
    }
    if (!strcmp(a, "--endpoint")) {
        o->net.endpoint = v;
        o->cfg.net = &o->net;
        return 0;
    }
    if (!strcmp(a, "--region")) {
        o->net.region = v;
        o->cfg.net = &o->net;
        return 0;
    }
    if (!strcmp(a, "--timeout")) {
        o->cfg.net = &o->net;
        if (bench_parse_seconds(v, &o->net.timeout_s) != 0 || o->net.timeout_s > 86400)
            return 1;
        /* A connection that is not made within the timeout is a timeout too. */
        if (o->net.timeout_s < o->net.connect_timeout_s)
            o->net.connect_timeout_s = o->net.timeout_s;
        return 0;
    }
    if (!strcmp(a, "--retries")) {
        uint64_t n = 0;
        if (tool_parse_u64(v, 1000, &n))
            return 1;
        o->net.max_retries = (uint32_t)n;
        if (n == 0)
            o->net.flags |= DLC_WARM_NO_RETRY;
        o->cfg.net = &o->net;
        return 0;
    }
    return -1;
}

/* The checks between options, and what the digest pass hashes: by default, with a fixed-length
 * run, the same batches the timed run delivered (its --epochs, or the warm-up batch and its
 * --batches), so that its digest is the one earlier versions printed; with a time-based window,
 * one epoch when --digest asks for it; exactly K batches with --digest-batches K. */
/* --weights W,W,...: one non-negative number per STORE (the library checks the rest). */
static int parse_weights(const char *v, bench_load_opts *o)
{
    const char *p = v;
    o->nweights = 0;
    while (*p) {
        char *end = NULL;
        const double w = strtod(p, &end);
        if (end == p || o->nweights == sizeof o->weights / sizeof *o->weights ||
            (*end && *end != ',')) {
            fprintf(stderr, TOOL ": error: load: --weights %s: give numbers separated by commas\n",
                    v);
            return -1;
        }
        o->weights[o->nweights++] = w;
        p = *end ? end + 1 : end;
    }
    return 0;
}

int bench_is_url(const char *path)
{
    return !strncmp(path, "s3://", 5) || !strncmp(path, "gs://", 5) ||
           !strncmp(path, "http://", 7) || !strncmp(path, "https://", 8);
}

dlc_status bench_open_loader(const bench_load_opts *o, const dlc_loader_config *cfg,
                             dlc_loader **out)
{
    if (o->nmix <= 1 && !o->nweights && !o->samples_per_epoch)
        return dlc_loader_open(o->store, cfg, out);
    dlc_mix_source src[64];
    for (uint32_t i = 0; i < o->nmix; i++) {
        dlc_mix_source_init(&src[i]);
        src[i].path = o->mix[i];
        src[i].weight = o->nweights ? o->weights[i] : 1.0;
    }
    dlc_mix_options mo;
    dlc_mix_options_init(&mo);
    mo.samples_per_epoch = o->samples_per_epoch;
    return dlc_loader_open_mix(src, o->nmix, &mo, cfg, out);
}

static int resolve(bench_load_opts *o, const digest_request *d)
{
    if (!o->store) {
        fprintf(stderr, TOOL ": error: load: missing STORE\n");
        bench_usage(stderr);
        return -1;
    }
    if (o->nweights && o->nweights != o->nmix) {
        fprintf(stderr, TOOL ": error: load: --weights has %u numbers for %u STOREs\n", o->nweights,
                o->nmix);
        return -1;
    }
    if (o->epochs && o->batches) {
        fprintf(stderr, TOOL ": error: load: give --epochs or --batches, not both\n");
        return -1;
    }
    if (d->digest == 0 && d->digest_batches) {
        fprintf(stderr, TOOL ": error: load: give --digest-batches or --no-digest, not both\n");
        return -1;
    }
    dlc_warm_redact_text(o->store, o->shown, sizeof o->shown);
    /* A mixture streams when one of its sources is a URL (docs/MIXTURES.md). */
    o->streamed = bench_is_url(o->store);
    for (uint32_t i = 0; i < o->nmix; i++)
        o->streamed |= bench_is_url(o->mix[i]);
    if (o->streamed) {
        if (!o->cfg.cache_dir) {
            fprintf(stderr,
                    TOOL ": error: load: %s is streamed: give --cache-dir DIR (and "
                         "--cache-limit SIZE)\n",
                    o->shown);
            return -1;
        }
        /* A streamed set is read in shard windows unless told otherwise (and the loader
         * refuses another order, saying why). */
        if (!o->sampler_set && o->nmix <= 1)
            o->cfg.sampler = DLC_SAMPLER_SHARD_WINDOWS; /* A mixture's source does so itself. */
        if (bench_is_url(o->store))
            o->prewarm = 0; /* Nothing is local to read ahead of the run. */
    }
    if (o->cfg.rank >= o->cfg.world_size) {
        fprintf(stderr, TOOL ": error: load: --rank %u is not below --world-size %u\n", o->cfg.rank,
                o->cfg.world_size);
        return -1;
    }
    if (o->cfg.device >= 0 && o->jpeg_dir) {
        fprintf(stderr, TOOL ": error: load: --jpeg-dir is a host reference; not with --device\n");
        return -1;
    }
    const int layout = o->cfg.device_layout != DLC_LAYOUT_NONE;
    if (o->cfg.device < 0 && (layout || o->device_lend)) {
        fprintf(stderr, TOOL ": error: load: %s is for the device path: give --device N too\n",
                layout ? "--device-layout" : "--device-lend");
        return -1;
    }
    if (layout && o->device_lend) {
        fprintf(stderr, TOOL ": error: load: --device-layout is the conversion's, which lend mode "
                             "(--device-lend) does not run\n");
        return -1;
    }
    /* The device path's batches are on the GPU, where cachebench cannot read them: a digest is
     * of the host path's bytes (the same by the loader's contract) and is made only on request. */
    const int fixed = (o->epochs || o->batches) && o->cfg.device < 0;
    const int digest = d->digest_batches || (d->digest < 0 ? fixed : d->digest);
    if (!digest)
        return 0;
    if (d->digest_batches)
        o->digest_batches = d->digest_batches;
    else if (o->batches)
        o->digest_batches = o->batches + 1;
    else
        o->digest_epochs = o->epochs ? o->epochs : 1;
    return 0;
}

static void set_defaults(bench_load_opts *o)
{
    memset(o, 0, sizeof *o);
    dlc_loader_config_init(&o->cfg);
    o->cfg.batch_size = 256;
    o->cfg.threads = dlc__cpu_count();
    o->cfg.crop_h = o->cfg.crop_w = 224;
    o->cfg.augment = DLC_AUGMENT_RANDOM_CROP;
    o->cfg.log = log_to_stderr;
    o->seconds = BENCH_DEFAULT_SECONDS;
    o->prewarm = 1;
    dlc_warm_options_init(&o->net);
}

int bench_load_parse(int argc, char **argv, bench_load_opts *o)
{
    digest_request d = {.digest = -1};
    set_defaults(o);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (parse_flag(a, o, &d))
            continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            return 1;
        }
        if (a[0] != '-') {
            /* More than one STORE is a mixture of them. */
            if (o->nmix == sizeof o->mix / sizeof *o->mix) {
                fprintf(stderr, TOOL ": error: load: more than 64 STOREs: %s\n", a);
                return -1;
            }
            o->mix[o->nmix++] = a;
            if (!o->store)
                o->store = a;
            continue;
        }
        if (!v) {
            fprintf(stderr, TOOL ": error: load: %s needs a value\n", a);
            return -1;
        }
        if (!strcmp(a, "--weights")) {
            if (parse_weights(v, o) != 0)
                return -1;
            i++;
            continue;
        }
        if (!strcmp(a, "--samples-per-epoch")) {
            if (tool_parse_u64(v, UINT64_MAX / 2, &o->samples_per_epoch) ||
                o->samples_per_epoch == 0) {
                fprintf(stderr, TOOL ": error: load: bad value for %s: %s\n", a, v);
                return -1;
            }
            i++;
            continue;
        }
        int bad = parse_config_option(a, v, &o->cfg);
        if (bad < 0)
            bad = parse_run_option(a, v, o, &d);
        if (bad < 0) {
            fprintf(stderr, TOOL ": error: load: unknown option %s (see --help)\n", a);
            return -1;
        }
        if (bad) {
            fprintf(stderr, TOOL ": error: load: bad value for %s: %s\n", a, v);
            return -1;
        }
        i++;
    }
    return resolve(o, &d);
}
