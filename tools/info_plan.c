/* cacheinfo --plan: what a shard-window run of a set would need and do, from its index alone
 * (dlc_loader_plan()): the cache it needs, the bytes all nodes download in an epoch, and the
 * shuffle's quality. A set's URL is planned without downloading a shard. */
#include "info.h"

#include <dlcache/loader.h>
#include <dlcache/warm.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void plan_usage(FILE *f)
{
    fputs("usage: " TOOL " STORE|URL --plan [options] [--json]\n"
          "\n"
          "Plan reading a store set in shard windows (the order a streamed set is read in),\n"
          "without reading a record: the cache it needs, the bytes downloaded per epoch by\n"
          "all nodes together, and the shuffle's quality. A URL (s3://, gs://, https://) is\n"
          "planned from its index alone (nothing is written in --cache-dir).\n"
          "\n"
          "options:\n"
          "  --batch B            samples per batch (default 256)\n"
          "  --window-shards W    shards shuffled together (default 4)\n"
          "  --streams V          streams interleaved (default: the world size)\n"
          "  --world-size N       ranks (default 1)\n"
          "  --cache-ranks R      ranks per node, sharing its cache (default 1)\n"
          "  --prefetch P         batches in flight (default 4): they bound the shards pinned\n"
          "  --downloads D        shards each rank downloads at once (default 2)\n"
          "  --cache-limit SIZE   say whether a cache of SIZE bytes (50G, 500M) is enough\n"
          "                       (K, M, G, KiB... are powers of 1024, kB, MB, GB of 1000)\n"
          "  --seed S --epoch E   the order's seed and epoch (default 0, 0)\n"
          "  --cache-dir DIR      the cache a URL is planned for (required for a URL)\n"
          "  --endpoint URL --region R  the S3 or GCS endpoint and region of a URL\n"
          "  --timeout SECONDS    retry a request slower than 1 KiB/s this long (default 30, min "
          "0.1)\n"
          "  --retries N          attempts per request after the first, 0..1000 (default 8;\n"
          "                       0: fail fast)\n"
          "  --json               one JSON object on stdout\n"
          "\n"
          "Several STOREs (or --weights) plan a mixture of them instead (dlc_loader_open_mix):\n"
          "each source's samples per epoch and what that is in passes of its records.\n"
          "  --weights W,W,...    one weight per STORE (default equal)\n"
          "  --samples-per-epoch N  the mixture's epoch (default: its records)\n",
          f);
}

/* The plan of a mixture: open it (one thread, nothing read) and ask each source. */
static int plan_mix(char **paths, uint32_t n, const double *weights, uint32_t nweights,
                    uint64_t per_epoch, dlc_loader_config *cfg, int json)
{
    if (n > 64)
        return tool_usage_error(TOOL, NULL, "a mixture has at most 64 sources");
    if (nweights && nweights != n)
        return tool_usage_error(TOOL, NULL, "--weights has %u numbers for %u STOREs", nweights, n);
    dlc_mix_source src[64];
    for (uint32_t i = 0; i < n; i++) {
        dlc_mix_source_init(&src[i]);
        src[i].path = paths[i];
        src[i].weight = nweights ? weights[i] : 1.0;
    }
    dlc_mix_options mo;
    dlc_mix_options_init(&mo);
    mo.samples_per_epoch = per_epoch;
    cfg->sampler = DLC_SAMPLER_SHUFFLE;
    /* Little is read (a streamed source's first shards are fetched); the batches in flight stay
     * --prefetch's, which a streamed source's cache need counts. */
    cfg->threads = 1, cfg->crop_h = cfg->crop_w = 1;
    dlc_loader *l = NULL;
    const dlc_status rc = dlc_loader_open_mix(src, n, &mo, cfg, &l);
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, "cannot plan the mixture");
        return 2;
    }
    const uint64_t batches = dlc_loader_batches_per_epoch(l);
    tool_json j;
    if (json) {
        tool_json_init(&j, stdout);
        tool_json_object_begin(&j, NULL);
        tool_json_u64(&j, "sources", n);
        tool_json_u64(&j, "batch", cfg->batch_size);
        tool_json_u64(&j, "world_size", cfg->world_size);
        tool_json_u64(&j, "batches_per_rank", batches);
        tool_json_array_begin(&j, "mixture");
    } else {
        printf("mixture: %u sources, world size %u, batch %u: %llu batches per rank per epoch\n", n,
               cfg->world_size, cfg->batch_size, (unsigned long long)batches);
    }
    uint64_t total = 0, cache = 0;
    for (uint32_t i = 0; i < n; i++) {
        dlc_mix_source_info in = {.struct_size = sizeof in};
        if (dlc_loader_source_info(l, i, &in) != DLC_OK)
            continue;
        total += in.epoch_samples;
        cache += in.cache_needed_bytes;
        const double passes = (double)in.epoch_samples / (double)in.count;
        char shown[4096];
        dlc_warm_redact_text(paths[i], shown, sizeof shown);
        if (json) {
            tool_json_object_begin(&j, NULL);
            tool_json_str(&j, "path", shown);
            tool_json_f64(&j, "weight", src[i].weight);
            tool_json_u64(&j, "records", in.count);
            tool_json_u64(&j, "quota", in.quota);
            tool_json_u64(&j, "period", in.period);
            tool_json_u64(&j, "samples_per_epoch", in.epoch_samples);
            tool_json_f64(&j, "passes_per_epoch", passes);
            if (in.cache_needed_bytes)
                tool_json_u64(&j, "cache_needed_bytes", in.cache_needed_bytes);
            tool_json_object_end(&j);
        } else {
            printf("source %u %s: weight %g (%u of every %u), %llu of %llu records per epoch: "
                   "%s %.3f %s\n",
                   i, shown, src[i].weight, in.quota, in.period,
                   (unsigned long long)in.epoch_samples, (unsigned long long)in.count,
                   passes > 1 ? "repeats its passes," : "spreads a pass over",
                   passes > 1 ? passes : (passes > 0 ? 1 / passes : 0),
                   passes > 1 ? "passes per epoch" : "epochs");
            if (in.cache_needed_bytes)
                printf("  streamed: its shards need %llu bytes of the cache folder\n",
                       (unsigned long long)in.cache_needed_bytes);
        }
    }
    if (json) {
        tool_json_array_end(&j);
        tool_json_u64(&j, "epoch_samples", total);
        if (cache)
            tool_json_u64(&j, "cache_needed_bytes", cache);
        tool_json_object_end(&j);
        tool_json_finish(&j);
    } else {
        printf("epoch:   %llu samples over all ranks\n", (unsigned long long)total);
        if (cache)
            printf("cache:   %llu bytes for the streamed sources (cache_limit at least that)\n",
                   (unsigned long long)cache);
    }
    dlc_loader_close(l);
    return 0;
}

int info_plan_main(int argc, char **argv)
{
    enum {
        O_PLAN = 256,
        O_JSON,
        O_BATCH,
        O_WINDOW,
        O_STREAMS,
        O_WORLD,
        O_RANKS,
        O_PREFETCH,
        O_DOWNLOADS,
        O_LIMIT,
        O_SEED,
        O_EPOCH,
        O_CACHE_DIR,
        O_ENDPOINT,
        O_REGION,
        O_WEIGHTS,
        O_SPE,
        O_TIMEOUT,
        O_RETRIES,
    };
    static const struct option longopts[] = {
        {"plan", no_argument, NULL, O_PLAN},
        {"json", no_argument, NULL, O_JSON},
        {"batch", required_argument, NULL, O_BATCH},
        {"window-shards", required_argument, NULL, O_WINDOW},
        {"streams", required_argument, NULL, O_STREAMS},
        {"world-size", required_argument, NULL, O_WORLD},
        {"cache-ranks", required_argument, NULL, O_RANKS},
        {"prefetch", required_argument, NULL, O_PREFETCH},
        {"downloads", required_argument, NULL, O_DOWNLOADS},
        {"cache-limit", required_argument, NULL, O_LIMIT},
        {"seed", required_argument, NULL, O_SEED},
        {"epoch", required_argument, NULL, O_EPOCH},
        {"cache-dir", required_argument, NULL, O_CACHE_DIR},
        {"endpoint", required_argument, NULL, O_ENDPOINT},
        {"region", required_argument, NULL, O_REGION},
        {"weights", required_argument, NULL, O_WEIGHTS},
        {"samples-per-epoch", required_argument, NULL, O_SPE},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"retries", required_argument, NULL, O_RETRIES},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    dlc_loader_config cfg;
    dlc_loader_config_init(&cfg);
    cfg.sampler = DLC_SAMPLER_SHARD_WINDOWS;
    dlc_warm_options net;
    dlc_warm_options_init(&net);
    int json = 0;
    uint64_t limit = 0, v = 0, per_epoch = 0;
    double weights[64];
    uint32_t nweights = 0;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        const int u32 = c >= O_BATCH && c <= O_DOWNLOADS;
        if (u32 && (tool_parse_u64(optarg, 1u << 24, &v) != 0 || (v == 0 && c != O_STREAMS)))
            return tool_usage_error(TOOL, NULL, "%s wants a positive number, not '%s'",
                                    argv[optind - 2], optarg);
        switch (c) {
        case O_PLAN:
            break;
        case O_JSON:
            json = 1;
            break;
        case O_BATCH:
            cfg.batch_size = (uint32_t)v;
            break;
        case O_WINDOW:
            cfg.window_shards = (uint32_t)v;
            break;
        case O_STREAMS:
            cfg.streams = (uint32_t)v;
            break;
        case O_WORLD:
            cfg.world_size = (uint32_t)v;
            break;
        case O_RANKS:
            cfg.cache_ranks = (uint32_t)v;
            break;
        case O_PREFETCH:
            cfg.prefetch = (uint32_t)v;
            break;
        case O_DOWNLOADS:
            cfg.downloads = (uint32_t)v;
            break;
        case O_LIMIT:
            if (tool_parse_size(optarg, &limit) != 0)
                return tool_usage_error(TOOL, NULL, "--cache-limit wants a size, not '%s'", optarg);
            break;
        case O_SEED:
        case O_EPOCH:
            if (tool_parse_u64(optarg, UINT64_MAX / 2, c == O_SEED ? &cfg.seed : &cfg.epoch))
                return tool_usage_error(TOOL, NULL, "%s wants a number, not '%s'", argv[optind - 2],
                                        optarg);
            break;
        case O_CACHE_DIR:
            cfg.cache_dir = optarg;
            break;
        case O_ENDPOINT:
            net.endpoint = optarg, cfg.net = &net;
            break;
        case O_REGION:
            net.region = optarg, cfg.net = &net;
            break;
        case O_WEIGHTS:
            for (const char *q = optarg; *q;) {
                char *end = NULL;
                const double w = strtod(q, &end);
                if (end == q || nweights == 64 || (*end && *end != ','))
                    return tool_usage_error(TOOL, NULL,
                                            "--weights wants numbers separated by "
                                            "commas, not '%s'",
                                            optarg);
                weights[nweights++] = w;
                q = *end ? end + 1 : end;
            }
            break;
        case O_SPE:
            if (tool_parse_u64(optarg, UINT64_MAX / 2, &per_epoch) || per_epoch == 0)
                return tool_usage_error(TOOL, NULL,
                                        "--samples-per-epoch wants a positive number, "
                                        "not '%s'",
                                        optarg);
            break;
        case O_TIMEOUT: {
            char *end = NULL;
            const double t = strtod(optarg, &end);
            if (!*optarg || *end || !(t > 0 && t <= 86400))
                return tool_usage_error(TOOL, NULL, "--timeout wants seconds, not '%s'", optarg);
            net.timeout_s = t, cfg.net = &net;
            if (t < net.connect_timeout_s)
                net.connect_timeout_s = t;
            break;
        }
        case O_RETRIES:
            if (tool_parse_u64(optarg, 1000, &v) != 0)
                return tool_usage_error(TOOL, NULL, "--retries wants 0..1000, not '%s'", optarg);
            net.max_retries = (uint32_t)v, cfg.net = &net;
            if (v == 0)
                net.flags |= DLC_WARM_NO_RETRY;
            break;
        case 'h':
            plan_usage(stdout);
            return 0;
        default:
            return tool_usage_error(TOOL, plan_usage, "unknown option or missing value: %s",
                                    argv[optind - 1]);
        }
    }
    if (optind < argc && (argc - optind > 1 || nweights || per_epoch))
        return plan_mix(argv + optind, (uint32_t)(argc - optind), weights, nweights, per_epoch,
                        &cfg, json);
    if (optind + 1 != argc)
        return tool_usage_error(TOOL, plan_usage, "exactly one STORE or URL is needed");
    const char *path = argv[optind];
    char shown[4096]; /* path for people: a URL's password and query string redacted. */
    dlc_warm_redact_text(path, shown, sizeof shown);
    dlc_loader_plan_info p = {.struct_size = sizeof p};
    const dlc_status rc = dlc_loader_plan(path, &cfg, &p);
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, "cannot plan");
        return 2;
    }
    const int fits = !limit || limit >= p.cache_needed_bytes;
    if (json) {
        tool_json j;
        tool_json_init(&j, stdout);
        tool_json_object_begin(&j, NULL);
        tool_json_str(&j, "path", shown);
        tool_json_u64(&j, "shards", p.shards);
        tool_json_u64(&j, "set_bytes", p.set_bytes);
        tool_json_u64(&j, "largest_shard_bytes", p.largest_shard_bytes);
        tool_json_u64(&j, "batch", cfg.batch_size);
        tool_json_u64(&j, "window_shards", cfg.window_shards);
        tool_json_u64(&j, "streams", p.streams);
        tool_json_u64(&j, "world_size", cfg.world_size);
        tool_json_u64(&j, "nodes", p.nodes);
        tool_json_u64(&j, "epoch_samples", p.epoch_samples);
        tool_json_u64(&j, "samples_per_rank", p.samples_per_rank);
        tool_json_u64(&j, "batches_per_rank", p.batches_per_rank);
        tool_json_u64(&j, "cache_needed_bytes", p.cache_needed_bytes);
        tool_json_u64(&j, "egress_bytes_per_epoch", p.egress_bytes);
        tool_json_f64(&j, "egress_copies_per_epoch",
                      p.set_bytes ? (double)p.egress_bytes / (double)p.set_bytes : 0);
        tool_json_f64(&j, "batch_same_shard", p.batch_same_shard);
        tool_json_f64(&j, "neighbour_same_shard", p.neighbour_same_shard);
        if (limit) {
            tool_json_u64(&j, "cache_limit", limit);
            tool_json_bool(&j, "cache_limit_fits", fits);
        }
        tool_json_object_end(&j);
        tool_json_finish(&j);
    } else {
        char a[32], b[32], e[32];
        printf("%s: %u shards, %s (largest %s)\n", shown, p.shards,
               tool_human_bytes(p.set_bytes, a, sizeof a),
               tool_human_bytes(p.largest_shard_bytes, b, sizeof b));
        printf("order:   windows of %u shards, %u streams, world size %u on %u nodes, batch %u\n",
               cfg.window_shards, p.streams, cfg.world_size, p.nodes, cfg.batch_size);
        printf("epoch:   %llu positions, %llu samples and %llu batches per rank\n",
               (unsigned long long)p.epoch_samples, (unsigned long long)p.samples_per_rank,
               (unsigned long long)p.batches_per_rank);
        printf("cache:   %s needed per node (%llu bytes)%s%s\n",
               tool_human_bytes(p.cache_needed_bytes, a, sizeof a),
               (unsigned long long)p.cache_needed_bytes,
               limit ? (fits ? "; --cache-limit " : "; too small: --cache-limit ") : "",
               limit ? tool_human_bytes(limit, b, sizeof b) : "");
        printf("egress:  %s per epoch for all nodes, %.2f copies of the set\n",
               tool_human_bytes(p.egress_bytes, e, sizeof e),
               p.set_bytes ? (double)p.egress_bytes / (double)p.set_bytes : 0);
        printf("shuffle: two samples of a batch share a shard with chance %.4f; neighbours "
               "%.4f\n",
               p.batch_same_shard, p.neighbour_same_shard);
    }
    return fits ? 0 : 1;
}
