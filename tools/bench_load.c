/* `cachebench load`: the loader's timed window between the two references (the memcpy ceiling
 * and the JPEG path, each half before and half after it), then an untimed pass that hashes the
 * batches of a second loader of the same configuration. Hashing is never inside a timed window:
 * it would be charged to the loader, and a consumer that reads every byte of every batch is not
 * what the loader's delivery rate means. With --device the loader's device path runs in the same
 * window, between two windows of its own ceiling (bench_device.c). */
#include "bench.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* Read the store's files once (a set's shards, each), unless they are resident already, so
 * that the loader is measured at memory speed rather than at the disk's (the store lives on local
 * SSD and in the page cache in the steady state README.md describes). Skipped when the files
 * would take more than half the RAM. Returns the seconds it took. */
static double prewarm_store(const dlc_store *store, uint64_t resident_before)
{
    const dlc_store_info *info = dlc_store_get_info(store);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (resident_before >= info->file_bytes ||
        (pages > 0 && page > 0 && info->file_bytes > (uint64_t)pages * (uint64_t)page / 2))
        return 0;
    const double t0 = dlc__now_s();
    const size_t chunk = (size_t)4 << 20;
    uint8_t *buf = malloc(chunk);
    if (!buf)
        return 0;
    for (uint32_t f = 0; f < dlc_store_num_files(store); f++) {
        const int fd = dlc_store_file_fd(store, f);
        const uint64_t bytes = dlc_store_file_bytes(store, f);
        for (uint64_t off = 0; fd >= 0 && off < bytes; off += chunk) {
            if (pread(fd, buf, chunk, (off_t)off) <= 0)
                break;
        }
    }
    free(buf);
    return dlc__now_s() - t0;
}

/* The host path's consumer: the batch stays lent until the next call, which hands it back, as a
 * training loop that uses each batch within its step does. */
static dlc_status host_next(void *ctx, dlc_loader *l, uint32_t *count, size_t *bytes)
{
    (void)ctx;
    dlc_batch b;
    const dlc_status rc = dlc_loader_next(l, &b);
    if (rc == DLC_OK) {
        *count = b.count;
        *bytes = bench_batch_bytes(&b);
    }
    return rc;
}

/* Open the loader and take the first batch, which is not timed: after it the workers run and the
 * ring fills, as in the steady state of a training run. Returns 0 or -1 (printed). */
static int open_and_warm_up(const bench_load_opts *o, const bench_consumer *c,
                            bench_loader_result *res, dlc_loader **out)
{
    uint32_t count = 0;
    size_t bytes = 0;
    bench_memory_now(&res->rss_open, &res->anon_open);
    const double t0 = dlc__now_s();
    dlc_status rc = bench_open_loader(o, &o->cfg, out);
    res->open_seconds = dlc__now_s() - t0;
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, "opening the loader");
        return -1;
    }
    if (o->cfg.device >= 0 && bench_device_check_loader(o, *out) != 0)
        return -1;
    rc = c->next(c->ctx, *out, &count, &bytes);
    if (rc == DLC_OK && c->drain)
        rc = c->drain(c->ctx);
    res->first_batch_seconds = dlc__now_s() - t0;
    if (rc == DLC_END) {
        fprintf(stderr, TOOL ": error: %s: epoch %llu has no batch for rank %u\n", o->shown,
                (unsigned long long)o->cfg.epoch, o->cfg.rank);
        return -1;
    }
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, "first batch");
        return -1;
    }
    bench_memory_now(&res->rss_first_batch, &res->anon_first_batch);
    dlc_loader_get_stats(*out, &res->stats_warm);
    res->copy_event_seconds_warm = dlc_loader_device_copy_event_seconds(*out);
    res->warmup_samples = count;
    return 0;
}

/* The timed window: --seconds, exactly --batches, or whole --epochs after the warm-up batch. The
 * host consumer only counts; it never reads the batch. The device consumer's work is drained
 * before the window closes. Returns 0 or -1 (printed). */
static int timed_window(const bench_load_opts *o, const bench_consumer *c, dlc_loader *l,
                        bench_loader_result *res)
{
    uint64_t epoch = o->cfg.epoch;
    uint32_t count = 0;
    size_t bytes = 0;
    tool_progress prog;
    tool_progress_init(&prog, 4);
    const double w0 = dlc__now_s();
    for (;;) {
        if (o->batches && res->batches >= o->batches)
            break;
        if (!o->batches && !o->epochs && dlc__now_s() - w0 >= o->seconds)
            break;
        dlc_status rc = c->next(c->ctx, l, &count, &bytes);
        if (rc == DLC_END) {
            res->epochs_done++;
            if (o->epochs && res->epochs_done >= o->epochs)
                break;
            if ((rc = dlc_loader_set_epoch(l, ++epoch)) == DLC_OK)
                continue;
            tool_report(TOOL, rc, "starting the next epoch");
            return -1;
        }
        if (rc != DLC_OK) {
            tool_report(TOOL, rc, "next batch");
            return -1;
        }
        res->batches++;
        res->samples += count;
        res->bytes += bytes;
        tool_progress_line(&prog, 0, "load: %llu batches, %.0f samples/s",
                           (unsigned long long)res->batches,
                           (double)res->samples / (dlc__now_s() - w0));
    }
    const dlc_status rc = c->drain ? c->drain(c->ctx) : DLC_OK;
    res->seconds = dlc__now_s() - w0;
    tool_progress_end(&prog);
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, "waiting for the device at the end of the window");
        return -1;
    }
    return 0;
}

static int measure_loader(const bench_load_opts *o, const bench_consumer *c,
                          bench_loader_result *res)
{
    memset(res, 0, sizeof *res);
    dlc_loader *l = NULL;
    if (open_and_warm_up(o, c, res, &l) != 0 || timed_window(o, c, l, res) != 0) {
        dlc_loader_close(l);
        return -1;
    }
    bench_memory_now(&res->rss_end, &res->anon_end);
    dlc_loader_get_stats(l, &res->stats);
    res->copy_event_seconds = dlc_loader_device_copy_event_seconds(l);
    res->stream.struct_size = sizeof res->stream;
    dlc_loader_get_stream_stats(l, &res->stream);
    /* The window's batches (the warm-up one left out), or its last ones the loader keeps. */
    res->report.struct_size = sizeof res->report;
    dlc_loader_get_report(l, res->batches < 1023 ? (uint32_t)res->batches : 1023, &res->report);
    dlc_loader_close(l);
    if (res->batches == 0) {
        fprintf(stderr,
                TOOL ": error: %s: no batch after the warm-up one to time "
                     "(the epoch is one batch long; use a smaller --batch or --epochs 2)\n",
                o->shown);
        return -1;
    }
    return 0;
}

/* Hash the batches of a new loader of the same configuration, untimed: o->digest_batches
 * batches, or o->digest_epochs whole epochs, from the first batch of the first epoch. The
 * stream is a pure function of the configuration (docs/ARCHITECTURE.md), so the digest does not
 * depend on --threads, --prefetch or timing. Every selected output is hashed (bench_fields.c).
 * Returns 0 or -1 (printed). */
static int digest_pass(const bench_load_opts *o, uint32_t label_field, bench_digest *d)
{
    const double t0 = dlc__now_s();
    XXH3_state_t *st = XXH3_createState();
    if (!st) {
        fprintf(stderr, TOOL ": error: out of memory for the digest\n");
        return -1;
    }
    dlc_loader *l = NULL;
    uint64_t epoch = o->cfg.epoch, epochs = 0, in_epoch = 0;
    /* The host path's bytes, which the device path's equal by the loader's contract. */
    dlc_loader_config cfg = o->cfg;
    cfg.device = -1;
    dlc_status rc = bench_open_loader(o, &cfg, &l);
    if (rc != DLC_OK)
        goto fail;
    XXH3_64bits_reset(st);
    while (!o->digest_batches || d->batches < o->digest_batches) {
        dlc_batch b;
        if ((rc = dlc_loader_next(l, &b)) == DLC_END) {
            /* An epoch with no batch would never reach the count. */
            if ((o->digest_epochs && ++epochs >= o->digest_epochs) || in_epoch == 0)
                break;
            in_epoch = 0;
            if ((rc = dlc_loader_set_epoch(l, ++epoch)) == DLC_OK)
                continue;
        }
        if (rc != DLC_OK)
            goto fail;
        bench_digest_batch(st, &b, label_field);
        d->batches++;
        d->samples += b.count;
        in_epoch++;
    }
    d->value = XXH3_64bits_digest(st);
    d->seconds = dlc__now_s() - t0;
    d->done = 1;
    dlc_loader_close(l);
    XXH3_freeState(st);
    return 0;
fail:
    tool_report(TOOL, rc, "the digest pass");
    dlc_loader_close(l);
    XXH3_freeState(st);
    return -1;
}

/* --crop 0 (the store's square size) and the JPEG path's needs, for the selected outputs.
 * Returns 0, or the exit status after saying why not. */
static int check_crop(bench_load_opts *o, const bench_load_run *run, const dlc_store *s)
{
    const int square = run->info.height != 0 && run->info.width == run->info.height;
    if (o->cfg.crop_h == 0 && run->has_image) {
        if (!square) {
            fprintf(stderr, TOOL ": error: %s: --crop 0 needs a store of square images\n",
                    o->shown);
            return 2;
        }
        o->cfg.crop_h = o->cfg.crop_w = run->info.height;
    }
    if (!o->jpeg_dir)
        return 0;
    if (!square) {
        fprintf(stderr,
                TOOL ": error: %s: the JPEG path needs a store of square images "
                     "(built with a center crop) to know the resize target\n",
                o->shown);
        return 1;
    }
    const uint32_t img = run->info.image_field;
    if (!run->image_bytes || dlc_store_fields(s)[img].shape[2] != 3) {
        fprintf(stderr,
                TOOL ": error: %s: the JPEG path decodes RGB images: the store's first image "
                     "field must have 3 channels and be among --fields\n",
                o->shown);
        return 2;
    }
    return 0;
}

/* Open the store for its metadata (the selected outputs' sample size, the JPEG path's resize
 * target) and its page cache state, resolve --crop 0, and prewarm. Returns 0, 1 or 2 as the exit
 * status says. */
static int prepare_store(bench_load_opts *o, bench_load_run *run, dlc_store **out)
{
    const dlc_status rc = dlc_loader_open_store(o->store, &o->cfg, out);
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, "opening the store");
        return 1;
    }
    run->info = *dlc_store_get_info(*out);
    /* Resolve first for has_image, again after --crop 0 for the sizes at the crop. */
    if (bench_fields_resolve(*out, o, run) != 0)
        return 2;
    const int status = check_crop(o, run, *out);
    if (status != 0)
        return status;
    bench_fields_resolve(*out, o, run);
    if (o->cfg.device >= 0 && bench_device_prepare(o, *out, &run->dev) != 0)
        return 1;
    if (dlc_store_resident(*out, &run->resident_before) != DLC_OK)
        run->resident_before = 0;
    run->prewarm_seconds = o->prewarm ? prewarm_store(*out, run->resident_before) : 0;
    /* A mixture's other sources are read once as well (their residency is not reported). */
    for (uint32_t i = 1; o->prewarm && i < o->nmix; i++) {
        if (bench_is_url(o->mix[i]))
            continue; /* Streamed: nothing local to read ahead. */
        dlc_store *s = NULL;
        if (dlc_loader_open_store(o->mix[i], &o->cfg, &s) != DLC_OK) {
            tool_report(TOOL, DLC_EINVAL, "opening a source of the mixture");
            return 1;
        }
        uint64_t res = 0;
        if (dlc_store_resident(s, &res) != DLC_OK)
            res = 0;
        run->prewarm_seconds += prewarm_store(s, res);
        dlc_store_close(s);
    }
    if (dlc_store_resident(*out, &run->resident_after) != DLC_OK)
        run->resident_after = 0;
    return 0;
}

/* The device path between two windows of its own ceiling, the pinned host-to-device copy of one
 * batch (the host references measure the CPU side, which --device leaves as it is). The output
 * buffers are freed after the loader has closed, which waits for the conversions into them.
 * Returns 0 or -1 (printed). */
static int measure_device(const bench_load_opts *o, bench_load_run *run)
{
    bench_consumer c;
    bench_device_consumer(o, &run->dev_out, &c);
    int status = -1;
    if (bench_device_ceiling(o, &run->dev, &run->dev.ceil_before) == 0 &&
        measure_loader(o, &c, &run->lr) == 0 &&
        bench_device_ceiling(o, &run->dev, &run->dev.ceil_after) == 0)
        status = 0;
    bench_device_out_free(&run->dev_out);
    return status;
}

/* The references are measured on both sides of the loader, half their window each, and pooled:
 * on a shared machine the load changes within seconds, and a reference taken on one side only
 * would move the ratio with it. The order is symmetric around the loader. Files, codecs and
 * buffers are all made before the first window. Returns 0 or -1 (printed). */
static int measure_all(const bench_load_opts *o, bench_load_run *run)
{
    if (o->cfg.device >= 0)
        return measure_device(o, run);
    const bench_consumer host = {.next = host_next, .drain = NULL, .ctx = NULL};
    const int threads = (int)o->cfg.threads;
    const double half = o->seconds / 2 > 0.5 ? o->seconds / 2 : 0.5;
    bench_ceiling *cl = NULL;
    bench_jpeg *jb = NULL;
    int status = -1;
    if (o->jpeg_dir && bench_jpeg_open(o->jpeg_dir, threads, &o->cfg, run->info.height,
                                       run->image_bytes, &jb) != 0)
        goto out;
    if (bench_ceiling_open(threads, o->cfg.batch_size, run->sample_bytes, &cl) != 0)
        goto out;
    if (jb && bench_jpeg_run(jb, half, &run->jpeg_before) != 0)
        goto out;
    bench_ceiling_run(cl, half, &run->ceil_before);
    if (measure_loader(o, &host, &run->lr) != 0)
        goto out;
    bench_ceiling_run(cl, half, &run->ceil_after);
    if (jb && bench_jpeg_run(jb, half, &run->jpeg_after) != 0)
        goto out;
    run->jpeg_files = bench_jpeg_files(jb);
    run->ceil_source_bytes = bench_ceiling_source_bytes(cl);
    status = 0;
out:
    bench_jpeg_close(jb);
    bench_ceiling_close(cl);
    return status;
}

/* A mixture's shares of epoch 0 per source, on stderr (the JSON on stdout stays one object). */
static int mix_shares(const bench_load_opts *o)
{
    dlc_loader_config cfg = o->cfg;
    cfg.threads = 1, cfg.prefetch = 1, cfg.device = -1;
    dlc_loader *l = NULL;
    const dlc_status rc = bench_open_loader(o, &cfg, &l);
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, "opening the mixture");
        return 1;
    }
    for (uint32_t s = 0; s < dlc_loader_num_sources(l); s++) {
        dlc_mix_source_info in = {.struct_size = sizeof in};
        if (dlc_loader_source_info(l, s, &in) != DLC_OK)
            continue;
        fprintf(stderr,
                TOOL ": mixture: source %u %s: %llu samples per epoch (quota %u/%u) of %llu "
                     "records: %.3f passes per epoch\n",
                s, o->mix[s], (unsigned long long)in.epoch_samples, in.quota, in.period,
                (unsigned long long)in.count, (double)in.epoch_samples / (double)in.count);
    }
    dlc_loader_close(l);
    return 0;
}

int bench_cmd_load(int argc, char **argv)
{
    bench_load_opts o;
    const int prc = bench_load_parse(argc, argv, &o);
    if (prc != 0)
        return prc > 0 ? 0 : 2;
    bench_load_run run;
    memset(&run, 0, sizeof run);
    run.o = &o;
    dlc_store *store = NULL;
    int status = prepare_store(&o, &run, &store);
    if (status == 0 && measure_all(&o, &run) != 0)
        status = 1;
    dlc_store_close(store);
    /* After every timed window, so that it disturbs none of them. */
    if (status == 0 && (o.digest_batches || o.digest_epochs) &&
        digest_pass(&o, run.info.label_field, &run.digest) != 0)
        status = 1;
    if (status == 0)
        bench_load_report(&run);
    if (status == 0 && o.nmix > 1)
        status = mix_shares(&o);
    return status;
}
