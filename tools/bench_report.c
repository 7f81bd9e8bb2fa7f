/* The report of `cachebench load`: one JSON object (fields in docs/BENCHMARKS.md) or a few lines
 * of text. The ratios are computed here, from windows measured in the same run. */
#include "bench.h"

#include <math.h>
#include <string.h>

/* The figures that the ratios are made of. */
typedef struct figures {
    double sps, gbps;           /* the loader */
    double ceil_gbps, ceil_sps; /* the ceiling, both windows pooled */
    double ceil_before_gbps, ceil_after_gbps;
    double jpeg_sps; /* the JPEG path, pooled; NaN without --jpeg-dir */
    double jpeg_before_sps, jpeg_after_sps;
} figures;

static double rate(uint64_t n, double seconds)
{
    return seconds > 0 ? (double)n / seconds : NAN;
}

static void compute(const bench_load_run *r, figures *f)
{
    const double sb = (double)r->sample_bytes;
    const uint64_t ceil_samples = r->ceil_before.samples + r->ceil_after.samples;
    const double ceil_seconds = r->ceil_before.seconds + r->ceil_after.seconds;
    f->sps = rate(r->lr.samples, r->lr.seconds);
    f->gbps = (double)r->lr.bytes / r->lr.seconds / 1e9;
    f->ceil_sps = rate(ceil_samples, ceil_seconds);
    f->ceil_gbps = f->ceil_sps * sb / 1e9;
    f->ceil_before_gbps = rate(r->ceil_before.samples, r->ceil_before.seconds) * sb / 1e9;
    f->ceil_after_gbps = rate(r->ceil_after.samples, r->ceil_after.seconds) * sb / 1e9;
    f->jpeg_sps = f->jpeg_before_sps = f->jpeg_after_sps = NAN;
    if (r->o->jpeg_dir) {
        f->jpeg_sps = rate(r->jpeg_before.samples + r->jpeg_after.samples,
                           r->jpeg_before.seconds + r->jpeg_after.seconds);
        f->jpeg_before_sps = rate(r->jpeg_before.samples, r->jpeg_before.seconds);
        f->jpeg_after_sps = rate(r->jpeg_after.samples, r->jpeg_after.seconds);
    }
}

/* The configuration, echoed so that a JSON file says what it measured. */
static void json_config(tool_json *j, const bench_load_run *r)
{
    const bench_load_opts *o = r->o;
    tool_json_u64(j, "batch", o->cfg.batch_size);
    tool_json_u64(j, "threads", o->cfg.threads);
    tool_json_bool(j, "auto_threads", (int)o->cfg.auto_threads);
    tool_json_u64(j, "loader_threads", r->lr.stats.threads);
    tool_json_u64(j, "prefetch", o->cfg.prefetch);
    tool_json_u64(j, "crop", o->cfg.crop_h);
    tool_json_str(j, "augment",
                  o->cfg.augment == DLC_AUGMENT_RANDOM_RESIZED_CROP ? "random_resized_crop"
                                                                    : "random_crop");
    tool_json_f64(j, "flip", o->cfg.flip_prob);
    tool_json_str(j, "dtype", dlc_dtype_name(o->cfg.dtype));
    tool_json_u64(j, "sample_bytes", r->sample_bytes);
    /* The selected outputs, in schema order (field_list is "a, b, c"). */
    tool_json_array_begin(j, "fields");
    char names[sizeof r->field_list];
    memcpy(names, r->field_list, sizeof names);
    for (char *p = names, *save = NULL, *t; (t = strtok_r(p, ", ", &save)); p = NULL)
        tool_json_str(j, NULL, t);
    tool_json_array_end(j);
    tool_json_str(j, "io_requested", bench_io_name(o->cfg.io));
    tool_json_str(j, "io", bench_io_name(r->lr.stats.io_mode));
    tool_json_u64(j, "seed", o->cfg.seed);
    tool_json_u64(j, "epoch", o->cfg.epoch);
    tool_json_u64(j, "rank", o->cfg.rank);
    tool_json_u64(j, "world_size", o->cfg.world_size);
    static const char *const samplers[] = {"sequential", "shuffle", "weighted", "quasi_random",
                                           "windows"};
    tool_json_str(j, "sampler", o->cfg.sampler < 5 ? samplers[o->cfg.sampler] : "?");
    if (o->cfg.sampler == DLC_SAMPLER_SHARD_WINDOWS) {
        tool_json_u64(j, "window_shards", o->cfg.window_shards);
        tool_json_u64(j, "streams", o->cfg.streams ? o->cfg.streams : o->cfg.world_size);
    }
    tool_json_i64(j, "device", o->cfg.device);
    if (o->epochs)
        tool_json_u64(j, "epochs", o->epochs);
    else
        tool_json_str(j, "epochs", NULL);
    if (o->batches)
        tool_json_u64(j, "batches_requested", o->batches);
    else
        tool_json_str(j, "batches_requested", NULL);
}

/* What the timed window held, the loader's counters, and its memory growth from just before
 * dlc_loader_open: its own (anonymous) allocations, and the resident total, which adds the pages
 * of the store's map it touched. The ceiling's buffers exist during the loader's run and are not
 * counted. */
static void json_window(tool_json *j, const bench_loader_result *lr)
{
    tool_json_u64(j, "batches", lr->batches);
    tool_json_u64(j, "samples", lr->samples);
    tool_json_u64(j, "warmup_samples", lr->warmup_samples);
    tool_json_u64(j, "bytes", lr->bytes);
    tool_json_f64(j, "seconds", lr->seconds);
    tool_json_f64(j, "wait_seconds", lr->stats.wait_seconds);
    tool_json_f64(j, "io_wait_seconds", lr->stats.io_wait_seconds);
    tool_json_u64(j, "bytes_read", lr->stats.bytes_read);
    tool_json_u64(j, "corrupt_replaced", lr->stats.corrupt_replaced);
    tool_json_i64(j, "loader_anon_first_batch_bytes",
                  (int64_t)lr->anon_first_batch - (int64_t)lr->anon_open);
    tool_json_i64(j, "loader_rss_first_batch_bytes",
                  (int64_t)lr->rss_first_batch - (int64_t)lr->rss_open);
    tool_json_i64(j, "loader_anon_end_bytes", (int64_t)lr->anon_end - (int64_t)lr->anon_open);
    tool_json_i64(j, "loader_rss_end_bytes", (int64_t)lr->rss_end - (int64_t)lr->rss_open);
}

/* Streaming's counters over the timed loader's life (open, warm-up and window), beside the
 * digest as top-level keys: null for a local store. */
static void json_stream(tool_json *j, const bench_load_run *r)
{
    static const char *const keys[] = {
        "cache_dir",        "cache_limit", "stall_s",      "bytes_fetched", "requests",
        "peak_cache_bytes", "cache_hits",  "cache_misses", "evictions",     "downloads"};
    const dlc_loader_stream_stats *s = &r->lr.stream;
    if (!r->o->streamed) {
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            tool_json_str(j, keys[i], NULL);
        return;
    }
    tool_json_str(j, "cache_dir", r->o->cfg.cache_dir);
    tool_json_u64(j, "cache_limit", r->o->cfg.cache_limit);
    tool_json_f64(j, "stall_s", s->stall_seconds);
    tool_json_u64(j, "bytes_fetched", s->bytes_fetched);
    tool_json_u64(j, "requests", s->requests);
    tool_json_u64(j, "peak_cache_bytes", s->peak_cache_bytes);
    tool_json_u64(j, "cache_hits", s->hits);
    tool_json_u64(j, "cache_misses", s->misses);
    tool_json_u64(j, "evictions", s->evictions);
    tool_json_u64(j, "downloads", s->downloads);
}

/* The loader's report over the window (docs/WAITING.md): the verdict and every share. */
static void json_report(tool_json *j, const dlc_loader_report *r)
{
    tool_json_object_begin(j, "report");
    tool_json_str(j, "bound", dlc_bound_name(r->bound));
    tool_json_str(j, "reason", r->reason);
    tool_json_str(j, "advice", r->advice);
    tool_json_u64(j, "batches", r->batches);
    tool_json_u64(j, "threads", r->threads);
    tool_json_f64(j, "wall_seconds", r->wall_seconds);
    tool_json_f64(j, "wait_seconds", r->wait_seconds);
    tool_json_f64(j, "away_seconds", r->away_seconds);
    tool_json_f64(j, "input_share", r->input_share);
    tool_json_f64(j, "step_seconds", r->step_seconds);
    tool_json_f64(j, "io_busy_share", r->io_busy_share);
    tool_json_f64(j, "io_read_share", r->io_read_share);
    tool_json_f64(j, "io_stall_share", r->io_stall_share);
    tool_json_f64(j, "io_held_share", r->io_held_share);
    tool_json_f64(j, "io_full_share", r->io_full_share);
    tool_json_f64(j, "io_idle_share", r->io_idle_share);
    tool_json_f64(j, "workers_busy_share", r->workers_busy_share);
    tool_json_f64(j, "workers_io_share", r->workers_io_share);
    tool_json_f64(j, "workers_idle_share", r->workers_idle_share);
    tool_json_f64(j, "workers_cpu_share", r->workers_cpu_share);
    tool_json_f64(j, "sample_seconds", r->sample_seconds);
    tool_json_u64(j, "major_faults", r->major_faults);
    tool_json_f64(j, "copy_busy_share", r->copy_busy_share);
    tool_json_f64(j, "copy_idle_share", r->copy_idle_share);
    tool_json_f64(j, "stall_seconds", r->stall_seconds);
    tool_json_object_end(j);
}

/* The untimed digest pass: null fields when none was asked for. */
static void json_digest(tool_json *j, const bench_digest *d)
{
    if (!d->done) {
        tool_json_str(j, "digest", NULL);
        tool_json_str(j, "digest_batches", NULL);
        tool_json_str(j, "digest_samples", NULL);
        tool_json_str(j, "digest_seconds", NULL);
        return;
    }
    tool_json_hex64(j, "digest", d->value);
    tool_json_u64(j, "digest_batches", d->batches);
    tool_json_u64(j, "digest_samples", d->samples);
    tool_json_f64(j, "digest_seconds", d->seconds);
}

static void json_references(tool_json *j, const bench_load_run *r, const figures *f)
{
    tool_json_f64(j, "ceiling_seconds", r->ceil_before.seconds + r->ceil_after.seconds);
    tool_json_f64(j, "ceiling_before_gbytes_per_s", f->ceil_before_gbps);
    tool_json_f64(j, "ceiling_after_gbytes_per_s", f->ceil_after_gbps);
    tool_json_u64(j, "ceiling_source_bytes", r->ceil_source_bytes);
    if (!r->o->jpeg_dir)
        return;
    tool_json_str(j, "jpeg_dir", r->o->jpeg_dir);
    tool_json_u64(j, "jpeg_files", r->jpeg_files);
    tool_json_u64(j, "jpeg_samples", r->jpeg_before.samples + r->jpeg_after.samples);
    tool_json_f64(j, "jpeg_seconds", r->jpeg_before.seconds + r->jpeg_after.seconds);
    tool_json_f64(j, "jpeg_before_samples_per_s", f->jpeg_before_sps);
    tool_json_f64(j, "jpeg_after_samples_per_s", f->jpeg_after_sps);
}

static void json_store(tool_json *j, const bench_load_run *r)
{
    tool_json_object_begin(j, "store_info");
    tool_json_u64(j, "count", r->info.count);
    tool_json_u64(j, "height", r->info.height);
    tool_json_u64(j, "width", r->info.width);
    tool_json_u64(j, "encoding", r->info.encoding);
    tool_json_u64(j, "file_bytes", r->info.file_bytes);
    tool_json_u64(j, "resident_before_bytes", r->resident_before);
    tool_json_u64(j, "resident_after_prewarm_bytes", r->resident_after);
    tool_json_f64(j, "prewarm_seconds", r->prewarm_seconds);
    tool_json_object_end(j);
}

static void print_json(const bench_load_run *r, const figures *f)
{
    tool_json j;
    tool_json_init(&j, stdout);
    tool_json_object_begin(&j, NULL);
    tool_json_str(&j, "command", "load");
    tool_json_str(&j, "store", r->o->shown);
    tool_json_f64(&j, "samples_per_s", f->sps);
    tool_json_f64(&j, "gbytes_per_s", f->gbps);
    tool_json_f64(&j, "ceiling_gbytes_per_s", f->ceil_gbps);
    tool_json_f64(&j, "ceiling_samples_per_s", f->ceil_sps);
    tool_json_f64(&j, "ratio_to_ceiling", f->gbps / f->ceil_gbps);
    tool_json_f64(&j, "jpeg_samples_per_s", f->jpeg_sps);
    tool_json_f64(&j, "speedup_vs_jpeg", f->sps / f->jpeg_sps);
    tool_json_f64(&j, "open_seconds", r->lr.open_seconds);
    tool_json_f64(&j, "first_batch_seconds", r->lr.first_batch_seconds);
    if (r->o->cfg.device >= 0)
        bench_device_json(&j, r);
    json_digest(&j, &r->digest);
    json_stream(&j, r);
    json_config(&j, r);
    json_window(&j, &r->lr);
    json_references(&j, r, f);
    json_store(&j, r);
    json_report(&j, &r->lr.report);
    tool_json_object_end(&j);
    tool_json_finish(&j);
}

static void print_text(const bench_load_run *r, const figures *f)
{
    const bench_load_opts *o = r->o;
    const bench_loader_result *lr = &r->lr;
    char b1[32];
    printf("store:   %s, %llu records of %ux%u (height x width), %s, %.0f%% in the page cache\n",
           o->shown, (unsigned long long)r->info.count, r->info.height, r->info.width,
           tool_human_bytes(r->info.file_bytes, b1, sizeof b1),
           r->info.file_bytes ? 100.0 * (double)r->resident_after / (double)r->info.file_bytes
                              : 0.0);
    char crops[80] = "";
    const bench_device_out *dev = &r->dev_out;
    if (r->has_image && o->cfg.device >= 0)
        snprintf(crops, sizeof crops, ", images %s %s %ux%u %s GPU %d",
                 dlc_dtype_name(dev->image_dtype),
                 dev->image_layout == DLC_LAYOUT_NCHW ? "NCHW" : "NHWC", o->cfg.crop_h,
                 o->cfg.crop_w, dev->lend ? "staged on" : "written on", o->cfg.device);
    else if (r->has_image)
        snprintf(crops, sizeof crops, ", images %s %ux%u", dlc_dtype_name(o->cfg.dtype),
                 o->cfg.crop_h, o->cfg.crop_w);
    printf("loader:  %.0f samples/s, %.2f GB/s of %s%s (%llu batches of %u, %.2f s, "
           "%u threads, io %s)\n",
           f->sps, f->gbps, r->field_list, crops, (unsigned long long)lr->batches,
           o->cfg.batch_size, lr->seconds, lr->stats.threads, bench_io_name(lr->stats.io_mode));
    if (o->cfg.device >= 0)
        bench_device_text(r);
    else
        printf("ceiling: %.2f GB/s memcpy of the same bytes (%.0f samples/s): loader at %.0f%%\n",
               f->ceil_gbps, f->ceil_sps, 100.0 * f->gbps / f->ceil_gbps);
    if (o->jpeg_dir)
        printf("jpeg:    %.0f samples/s decoding every epoch: loader %.1fx faster\n", f->jpeg_sps,
               f->sps / f->jpeg_sps);
    printf("open:    %.3f s; first batch %.3f s after open began\n", lr->open_seconds,
           lr->first_batch_seconds);
    if (o->streamed)
        printf("stream:  %.2f s stalled for shards, %llu bytes in %llu requests, %llu hits and "
               "%llu misses, %llu evictions, peak cache %llu bytes of %llu\n",
               lr->stream.stall_seconds, (unsigned long long)lr->stream.bytes_fetched,
               (unsigned long long)lr->stream.requests, (unsigned long long)lr->stream.hits,
               (unsigned long long)lr->stream.misses, (unsigned long long)lr->stream.evictions,
               (unsigned long long)lr->stream.peak_cache_bytes,
               (unsigned long long)o->cfg.cache_limit);
    if (r->digest.done)
        printf("digest:  %016llx over %llu batches (%llu samples), hashed untimed after the run\n",
               (unsigned long long)r->digest.value, (unsigned long long)r->digest.batches,
               (unsigned long long)r->digest.samples);
    char text[2048];
    dlc_loader_report_text(&r->lr.report, text, sizeof text);
    fputs(text, stdout);
}

void bench_load_report(const bench_load_run *run)
{
    figures f;
    compute(run, &f);
    if (run->o->json)
        print_json(run, &f);
    else
        print_text(run, &f);
}
