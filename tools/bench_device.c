/* `cachebench load --device N`: the loader's device path, timed as the host path is (the same
 * warm-up batch and window, bench_load.c), between two windows of its ceiling.
 *
 * What runs. By default each batch goes through dlc_loader_device_emit() on the legacy default
 * stream (NULL) into device memory of cachebench's own (dlc_cuda_alloc, made at the warm-up
 * batch): the wait for the batch's copy, the conversion kernel of every image output (uint8
 * NHWC to --dtype, normalized, in --device-layout) and a device-to-device copy of every other
 * output, lengths, offsets and record numbers; then the release. That is what a training step
 * gets. (uint8 NHWC images, the library's default layout for uint8, are copied as staged: no
 * kernel; --device-layout nchw or a float --dtype runs it.) --device-lend keeps the older
 * measurement: each staged batch is waited for on the same stream and released at once, so the
 * workers, the copy thread, the copies to the staging ring and the events run, but no kernel.
 *
 * The window. Nothing in the window waits for the device on the host but the loader's own
 * throttle (a staging buffer is reused only after the release that the consumer enqueued has
 * completed); the window is opened after the warm-up batch's work has completed and closed by
 * dlc_cuda_stream_sync(device, NULL), so it holds exactly its batches' copies and conversions.
 *
 * What is reported. Samples/s and GB/s of the outputs written on the device (lend mode: of the
 * staged bytes) over the window; the copies' own GB/s, the loader's device_bytes over its
 * device_copy_seconds (the window's difference of the two counters); the same bytes over
 * device_copy_event_seconds, the copies' own time on the device between CUDA events recorded
 * around them on the loader's stream (0 where the backend times none); and their ceiling,
 * dlc_cuda_copy_ceiling() on one batch's staged bytes, measured before and after the loader,
 * pooled, with the ratio of each. */
#include "bench.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
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
    fprintf(stderr, TOOL ": error: %s: the loader's device path is off: %s\n", o->shown,
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

/* ---- The consumer ---------------------------------------------------------------------------- */

/* Device memory of @p bytes at *@p p, once. */
static dlc_status alloc_once(bench_device_out *out, void **p, size_t bytes)
{
    if (*p)
        return DLC_OK;
    const dlc_status rc = dlc_cuda_alloc(out->device, bytes, p);
    if (rc == DLC_OK)
        out->allocated += bytes;
    return rc;
}

/* Make @p b's buffer hold at least @p need bytes. Growing happens only for outputs whose size
 * varies by batch; the old buffer may still be written by the previous batch's conversion, so
 * the stream is drained before it is freed (cudaFree would wait too, for the whole device). */
static dlc_status grow(bench_device_out *out, bench_device_buf *b, size_t need, int first)
{
    if (need <= b->cap)
        return DLC_OK;
    size_t cap = need;
    if (b->data) {
        const dlc_status rc = dlc_cuda_stream_sync(out->device, NULL);
        if (rc != DLC_OK)
            return rc;
        dlc_cuda_free(out->device, b->data);
        b->data = NULL;
        out->allocated -= b->cap;
        b->cap = 0;
        /* A quarter more, so that a slowly growing output is not reallocated every batch. */
        cap = need + need / 4;
    }
    if (!first)
        out->reallocs++;
    const dlc_status rc = dlc_cuda_alloc(out->device, cap, &b->data);
    if (rc != DLC_OK)
        return rc;
    b->cap = cap;
    out->allocated += cap;
    return DLC_OK;
}

/* The first batch: one buffer and destination per output, and what its images are. */
static dlc_status first_batch(bench_device_out *out, const dlc_device_batch *b)
{
    out->num = b->num_fields;
    out->bufs = calloc(b->num_fields ? b->num_fields : 1, sizeof *out->bufs);
    out->dst = calloc(b->num_fields ? b->num_fields : 1, sizeof *out->dst);
    if (!out->bufs || !out->dst) {
        fprintf(stderr, TOOL ": error: out of memory for the device outputs\n");
        return -ENOMEM;
    }
    for (uint32_t k = 0; k < b->num_fields && !out->has_image; k++) {
        const dlc_device_field *f = &b->fields[k];
        if (f->kind != DLC_FIELD_IMAGE)
            continue;
        out->has_image = 1;
        out->image_dtype = out->lend ? DLC_DTYPE_UINT8 : f->dtype;
        out->image_layout = out->lend ? DLC_LAYOUT_NHWC : f->layout;
    }
    return out->lend ? DLC_OK
                     : alloc_once(out, &out->indices, (size_t)out->batch * sizeof(uint64_t));
}

/* Point the destinations at buffers big enough for @p b. */
static dlc_status place(bench_device_out *out, const dlc_device_batch *b, int first)
{
    /* Every selected output, in schema order, in every batch (loader.h). */
    assert(b->num_fields == out->num);
    for (uint32_t k = 0; k < b->num_fields; k++) {
        const dlc_device_field *f = &b->fields[k];
        bench_device_buf *buf = &out->bufs[k];
        dlc_status rc = grow(out, buf, f->bytes, first);
        if (rc == DLC_OK && f->lengths)
            rc = alloc_once(out, &buf->lengths, (size_t)out->batch * sizeof(int64_t));
        if (rc == DLC_OK && f->offsets)
            rc = alloc_once(out, &buf->offsets, ((size_t)out->batch + 1) * sizeof(int64_t));
        if (rc != DLC_OK)
            return rc;
        out->dst[k] = (dlc_device_dst){.data = f->bytes ? buf->data : NULL,
                                       .lengths = f->lengths ? buf->lengths : NULL,
                                       .offsets = f->offsets ? buf->offsets : NULL};
    }
    return DLC_OK;
}

static dlc_status emit_next(void *ctx, dlc_loader *l, uint32_t *count, size_t *bytes)
{
    bench_device_out *out = ctx;
    dlc_device_batch b;
    dlc_status rc = dlc_loader_next_device(l, &b);
    if (rc != DLC_OK)
        return rc;
    const int first = !out->bufs;
    if (first)
        rc = first_batch(out, &b);
    if (rc == DLC_OK)
        rc = place(out, &b, first);
    if (rc != DLC_OK) {
        /* The batch is still lent: hand it back untouched, keeping the first error's text. */
        dlc_loader_device_release(l, &b, NULL);
        return rc;
    }
    /* The loader's contract: the outputs are ready for work enqueued on the stream after this
     * call; nothing waits on the host. */
    rc = dlc_loader_device_emit(l, &b, NULL, out->dst, out->indices);
    if (rc != DLC_OK)
        return rc;
    size_t n = 0;
    for (uint32_t k = 0; k < b.num_fields; k++)
        n += b.fields[k].bytes;
    *count = b.count;
    *bytes = n;
    return DLC_OK;
}

static dlc_status lend_next(void *ctx, dlc_loader *l, uint32_t *count, size_t *bytes)
{
    bench_device_out *out = ctx;
    dlc_device_batch b;
    const dlc_status rc = dlc_loader_next_device(l, &b);
    if (rc != DLC_OK)
        return rc;
    if (!out->bufs) {
        const dlc_status frc = first_batch(out, &b);
        if (frc != DLC_OK) {
            dlc_loader_device_release(l, &b, NULL);
            return frc;
        }
    }
    size_t n = 0;
    for (uint32_t k = 0; k < b.num_fields; k++)
        n += b.fields[k].staged_bytes;
    *count = b.count;
    *bytes = n;
    /* Lend mode's protocol, with nothing enqueued between the two calls. The wait is on the
     * legacy default stream, so that the drain below covers the batch's copy. */
    const dlc_status wrc = dlc_loader_device_wait(l, &b, NULL);
    const dlc_status rrc = dlc_loader_device_release(l, &b, NULL);
    return wrc != DLC_OK ? wrc : rrc;
}

static dlc_status drain(void *ctx)
{
    const bench_device_out *out = ctx;
    return dlc_cuda_stream_sync(out->device, NULL);
}

void bench_device_consumer(const bench_load_opts *o, bench_device_out *out, bench_consumer *c)
{
    memset(out, 0, sizeof *out);
    out->device = o->cfg.device;
    out->lend = o->device_lend;
    out->batch = o->cfg.batch_size;
    c->next = out->lend ? lend_next : emit_next;
    c->drain = drain;
    c->ctx = out;
}

void bench_device_out_free(bench_device_out *out)
{
    for (uint32_t k = 0; out->bufs && k < out->num; k++) {
        dlc_cuda_free(out->device, out->bufs[k].data);
        dlc_cuda_free(out->device, out->bufs[k].lengths);
        dlc_cuda_free(out->device, out->bufs[k].offsets);
    }
    dlc_cuda_free(out->device, out->indices);
    free(out->bufs);
    free(out->dst);
    out->bufs = NULL;
    out->dst = NULL;
    out->indices = NULL;
}

/* ---- The report ------------------------------------------------------------------------------ */

typedef struct device_figures {
    double sps, gbps;     /* the window: samples and bytes delivered on the device */
    uint64_t copy_bytes;  /* device_bytes over the window */
    double copy_seconds;  /* device_copy_seconds over the window */
    double copy_gbps;     /* their ratio */
    double event_seconds; /* device_copy_event_seconds over the window */
    double event_gbps;    /* copy_bytes over event_seconds */
    double ceil_gbps;     /* the two ceiling windows pooled (same bytes and reps) */
    double ratio;         /* copy_gbps / ceil_gbps */
    double event_ratio;   /* event_gbps / ceil_gbps */
} device_figures;

static void device_compute(const bench_load_run *r, device_figures *f)
{
    const bench_loader_result *lr = &r->lr;
    f->sps = lr->seconds > 0 ? (double)lr->samples / lr->seconds : NAN;
    f->gbps = lr->seconds > 0 ? (double)lr->bytes / lr->seconds / 1e9 : NAN;
    f->copy_bytes = lr->stats.device_bytes - lr->stats_warm.device_bytes;
    f->copy_seconds = lr->stats.device_copy_seconds - lr->stats_warm.device_copy_seconds;
    f->copy_gbps = f->copy_seconds > 0 ? (double)f->copy_bytes / f->copy_seconds / 1e9 : NAN;
    f->event_seconds = lr->copy_event_seconds - lr->copy_event_seconds_warm;
    f->event_gbps = f->event_seconds > 0 ? (double)f->copy_bytes / f->event_seconds / 1e9 : NAN;
    const double a = r->dev.ceil_before, b = r->dev.ceil_after;
    f->ceil_gbps = a > 0 && b > 0 ? 2.0 / (1.0 / a + 1.0 / b) : NAN;
    f->ratio = f->copy_gbps / f->ceil_gbps;
    f->event_ratio = f->event_gbps / f->ceil_gbps;
}

/* Did the conversion kernel run? emit copies uint8 NHWC images as they are, device to device. */
static int kernel_ran(const bench_device_out *out)
{
    return !out->lend && out->has_image &&
           !(out->image_dtype == DLC_DTYPE_UINT8 && out->image_layout == DLC_LAYOUT_NHWC);
}

static const char *layout_name(uint32_t layout)
{
    return layout == DLC_LAYOUT_NCHW ? "nchw" : layout == DLC_LAYOUT_NHWC ? "nhwc" : "default";
}

void bench_device_json(tool_json *j, const bench_load_run *r)
{
    const bench_device_out *out = &r->dev_out;
    device_figures f;
    device_compute(r, &f);
    tool_json_str(j, "device_mode", out->lend ? "lend" : "emit");
    tool_json_bool(j, "device_conversion_run", kernel_ran(out));
    tool_json_str(j, "device_layout_requested", layout_name(r->o->cfg.device_layout));
    tool_json_str(j, "device_image_dtype",
                  out->has_image ? dlc_dtype_name(out->image_dtype) : NULL);
    tool_json_str(j, "device_image_layout", out->has_image ? layout_name(out->image_layout) : NULL);
    tool_json_f64(j, "device_samples_per_s", f.sps);
    tool_json_f64(j, "device_gbytes_per_s", f.gbps);
    tool_json_u64(j, "device_output_buffer_bytes", out->allocated);
    tool_json_u64(j, "device_output_reallocs", out->reallocs);
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
    tool_json_f64(j, "device_copy_event_seconds", f.event_seconds);
    tool_json_f64(j, "device_copy_event_gbytes_per_s", f.event_gbps);
    tool_json_f64(j, "device_copy_event_ratio_to_ceiling", f.event_ratio);
}

void bench_device_text(const bench_load_run *r)
{
    const bench_device_out *out = &r->dev_out;
    device_figures f;
    device_compute(r, &f);
    char b1[32], b2[32];
    if (out->lend)
        printf(
            "device:  GPU %d, lend mode (--device-lend): staged uint8 batches waited for on the\n"
            "         default stream and released; no conversion kernel\n",
            r->o->cfg.device);
    else
        printf("device:  GPU %d, emit on the default stream: %s\n"
               "         into %s of cachebench's device memory (%u regrown); %.2f GB/s of "
               "outputs; window closed by a stream sync\n",
               r->o->cfg.device,
               kernel_ran(out)  ? "images by the conversion kernel"
               : out->has_image ? "uint8 NHWC images copied as staged, no kernel"
                                : "no image output, no kernel",
               tool_human_bytes(out->allocated, b1, sizeof b1), out->reallocs, f.gbps);
    printf("copy:    %.2f GB/s per copy (%s in %.3f s of copies); ceiling %.2f GB/s "
           "(pinned copies of %s, %.2f before, %.2f after): copy at %.0f%%\n",
           f.copy_gbps, tool_human_bytes(f.copy_bytes, b1, sizeof b1), f.copy_seconds, f.ceil_gbps,
           tool_human_bytes(r->dev.batch_bytes, b2, sizeof b2), r->dev.ceil_before,
           r->dev.ceil_after, 100.0 * f.ratio);
    if (f.event_seconds > 0)
        printf("         by CUDA events on the copy stream: %.2f GB/s in %.3f s of copies on the "
               "device: %.0f%% of the ceiling\n",
               f.event_gbps, f.event_seconds, 100.0 * f.event_ratio);
    else
        printf("         by CUDA events on the copy stream: not timed (this backend has no timed "
               "events)\n");
}
