/* `cachebench load --device N`: the loader's device path, timed as the host path is (the same
 * warm-up batch and window, bench_load.c), between two windows of its ceiling.
 *
 * What runs. cachebench links no CUDA and has no device memory of its own, so it uses lend mode:
 * each staged batch is waited for on the legacy default stream (dlc_loader_device_wait) and
 * released at once (dlc_loader_device_release with no stream, as nothing read it). The workers'
 * crops into the page-locked slots, the copy thread, the copies to the staging ring and the
 * events between them all run; the conversion kernel of dlc_loader_device_emit() does not, as
 * it writes into caller-owned device memory. The report says so.
 *
 * What is reported. Samples/s and GB/s of staged bytes over the window; the copies' own GB/s,
 * the loader's device_bytes over its device_copy_seconds (the window's difference of the two
 * counters); and their ceiling, dlc_cuda_copy_ceiling() on one batch's staged bytes, measured
 * before and after the loader, pooled, with the ratio. The window closes when the last batch's
 * copy has been issued: at most config.device_staging copies are still in flight then, a small
 * part of a window of tens of batches. */
#include "bench.h"

#include <math.h>
#include <string.h>

/* Copies per ceiling window: one batch of 224 x 224 x 3 x 256 bytes takes under a millisecond
 * at PCIe 5 speed, so this is a few tens of milliseconds, and a few seconds under
 * compute-sanitizer. */
#define CEILING_REPS 32u

int bench_device_prepare(const bench_load_opts *o, const dlc_store *s, bench_device_refs *refs)
{
    char why[512] = "";
    const dlc_status rc = dlc_cuda_probe(o->cfg.device, why, sizeof why);
    if (rc != DLC_OK) {
        const char *detail = why[0] ? why : dlc_errmsg();
        fprintf(stderr, TOOL ": error: load --device %d: the device path cannot run: %s%s%s\n",
                o->cfg.device, dlc_strerror(rc), detail && *detail ? ": " : "",
                detail ? detail : "");
        return -1;
    }
    /* The slots and the staging ring hold images as stored (uint8) whatever --dtype says: the
     * conversion is the device's. */
    bench_load_opts u8 = *o;
    u8.cfg.dtype = DLC_DTYPE_UINT8;
    bench_load_run tmp;
    memset(&tmp, 0, sizeof tmp);
    if (bench_fields_resolve(s, &u8, &tmp) != 0)
        return -1;
    refs->sample_bytes = tmp.sample_bytes;
    refs->batch_bytes = tmp.sample_bytes * o->cfg.batch_size;
    refs->reps = CEILING_REPS;
    return 0;
}

int bench_device_check_loader(const bench_load_opts *o, const dlc_loader *l)
{
    const char *why = NULL;
    if (dlc_loader_device(l, &why) == o->cfg.device)
        return 0;
    fprintf(stderr, TOOL ": error: %s: the loader's device path is off: %s\n", o->store,
            why ? why : "no reason given");
    return -1;
}

int bench_device_ceiling(const bench_load_opts *o, const bench_device_refs *refs, double *gbps)
{
    const dlc_status rc = dlc_cuda_copy_ceiling(o->cfg.device, refs->batch_bytes, refs->reps, gbps);
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, "the device copy ceiling");
        return -1;
    }
    return 0;
}

dlc_status bench_device_next(dlc_loader *l, uint32_t *count, size_t *bytes)
{
    dlc_device_batch b;
    const dlc_status rc = dlc_loader_next_device(l, &b);
    if (rc != DLC_OK)
        return rc;
    size_t n = 0;
    for (uint32_t k = 0; k < b.num_fields; k++)
        n += b.fields[k].staged_bytes;
    *count = b.count;
    *bytes = n;
    /* Lend mode's protocol, with nothing enqueued between the two calls. */
    const dlc_status wrc = dlc_loader_device_wait(l, &b, NULL);
    const dlc_status rrc = dlc_loader_device_release(l, &b, NULL);
    return wrc != DLC_OK ? wrc : rrc;
}

/* ---- The report ------------------------------------------------------------------------------ */

typedef struct device_figures {
    double sps, gbps;    /* the window: samples and staged bytes delivered */
    uint64_t copy_bytes; /* device_bytes over the window */
    double copy_seconds; /* device_copy_seconds over the window */
    double copy_gbps;    /* their ratio */
    double ceil_gbps;    /* the two ceiling windows pooled (same bytes and reps) */
    double ratio;        /* copy_gbps / ceil_gbps */
} device_figures;

static void device_compute(const bench_load_run *r, device_figures *f)
{
    const bench_loader_result *lr = &r->lr;
    f->sps = lr->seconds > 0 ? (double)lr->samples / lr->seconds : NAN;
    f->gbps = lr->seconds > 0 ? (double)lr->bytes / lr->seconds / 1e9 : NAN;
    f->copy_bytes = lr->stats.device_bytes - lr->stats_warm.device_bytes;
    f->copy_seconds = lr->stats.device_copy_seconds - lr->stats_warm.device_copy_seconds;
    f->copy_gbps = f->copy_seconds > 0 ? (double)f->copy_bytes / f->copy_seconds / 1e9 : NAN;
    const double a = r->dev.ceil_before, b = r->dev.ceil_after;
    f->ceil_gbps = a > 0 && b > 0 ? 2.0 / (1.0 / a + 1.0 / b) : NAN;
    f->ratio = f->copy_gbps / f->ceil_gbps;
}

void bench_device_json(tool_json *j, const bench_load_run *r)
{
    device_figures f;
    device_compute(r, &f);
    tool_json_str(j, "device_mode", BENCH_DEVICE_MODE);
    tool_json_bool(j, "device_conversion_run", 0);
    tool_json_f64(j, "device_samples_per_s", f.sps);
    tool_json_f64(j, "device_gbytes_per_s", f.gbps);
    tool_json_u64(j, "device_sample_bytes", r->dev.sample_bytes);
    tool_json_u64(j, "device_bytes", f.copy_bytes);
    tool_json_f64(j, "device_copy_seconds", f.copy_seconds);
    tool_json_f64(j, "device_copy_gbytes_per_s", f.copy_gbps);
    tool_json_f64(j, "device_copy_ceiling_gbytes_per_s", f.ceil_gbps);
    tool_json_f64(j, "device_copy_ceiling_before_gbytes_per_s", r->dev.ceil_before);
    tool_json_f64(j, "device_copy_ceiling_after_gbytes_per_s", r->dev.ceil_after);
    tool_json_u64(j, "device_copy_ceiling_bytes", r->dev.batch_bytes);
    tool_json_u64(j, "device_copy_ceiling_reps", r->dev.reps);
    tool_json_f64(j, "device_copy_ratio_to_ceiling", f.ratio);
}

void bench_device_text(const bench_load_run *r)
{
    device_figures f;
    device_compute(r, &f);
    char b1[32], b2[32];
    printf("device:  GPU %d, %s mode: staged uint8 batches waited for and released; emit's\n"
           "         conversion to %s is not run (cachebench has no device memory)\n",
           r->o->cfg.device, BENCH_DEVICE_MODE, bench_dtype_name(r->o->cfg.dtype));
    printf("copy:    %.2f GB/s per copy (%s in %.3f s of copies); ceiling %.2f GB/s "
           "(pinned copies of %s, %.2f before, %.2f after): copy at %.0f%%\n",
           f.copy_gbps, tool_human_bytes(f.copy_bytes, b1, sizeof b1), f.copy_seconds, f.ceil_gbps,
           tool_human_bytes(r->dev.batch_bytes, b2, sizeof b2), r->dev.ceil_before,
           r->dev.ceil_after, 100.0 * f.ratio);
}
