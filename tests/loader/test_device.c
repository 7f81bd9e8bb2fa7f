/* The loader's device path (loader/device.c) on the CPU stand-in of the device (devsim.c): every
 * device batch equals the host path's batch of the same configuration, for every dtype and
 * device layout, every field kind and view groups; no two device operations run unordered (the
 * sim's hazard detector) under random delays on the loader's stream and the caller's; lend
 * mode; closing, resetting and restoring with work in flight; injected failures reach the
 * caller as DLC_ECUDA; and nothing leaks, and no call is made from a thread without a device.
 *
 * The test's own device calls (allocating its destinations, its stream, synchronizing) are made
 * between device_enter and device_leave, so that the test thread has no current device while it
 * calls the loader: a loader call that forgets to make its device current shows up as a stray
 * call. dlc-test-label: threads */
#include "devsim.h"
#include "internal.h"
#include "loader_fixture.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define MAXF 16

/* Where a check failed: the test's loop ("dtype 1 layout 2") and the batch. */
static char where[160];

typedef struct rig {
    devsim *sim;
    const dlc__devops *o;
    void *ctx;
    void *stream; /* The caller's stream. */
    int device;
    uint64_t rng; /* The consumer's jitter. */
} rig;

static void rig_open_opts(rig *r, const devsim_opts *opts, int device)
{
    memset(r, 0, sizeof *r);
    r->sim = devsim_create(opts);
    cr_assert_not_null(r->sim);
    r->o = devsim_ops(r->sim);
    r->ctx = r->o->ctx;
    r->device = device;
    r->rng = opts ? opts->seed * 7919u + 1 : 1;
    if (opts && device >= opts->devices)
        return;
    void *saved;
    cr_assert_eq(r->o->device_enter(r->ctx, device, &saved), 0);
    cr_assert_eq(r->o->stream_create(r->ctx, &r->stream), 0);
    r->o->device_leave(r->ctx, saved);
}

static void rig_open(rig *r, uint64_t seed, uint32_t delay_us)
{
    devsim_opts opts;
    devsim_opts_init(&opts);
    opts.seed = seed;
    opts.max_delay_us = delay_us;
    rig_open_opts(r, &opts, 0);
}

/* After the loader is closed: no hazard, no stray call, nothing left; the sim's counts in @p st. */
static void rig_close_stats(rig *r, devsim_stats *st)
{
    if (r->stream) {
        void *saved;
        cr_assert_eq(r->o->device_enter(r->ctx, r->device, &saved), 0);
        r->o->stream_destroy(r->ctx, r->stream);
        r->o->device_leave(r->ctx, saved);
    }
    char buf[1024];
    devsim_problems(r->sim, buf, sizeof buf);
    devsim_destroy(r->sim, st);
    cr_assert_str_empty(buf, "%s: %s", where, buf);
    cr_assert_eq(st->hazards, 0);
    cr_assert_eq(st->stray_calls, 0);
    cr_assert_eq(st->live_dev_blocks + st->live_host_blocks + st->live_streams + st->live_events,
                 0);
}

static void rig_close(rig *r)
{
    devsim_stats st;
    rig_close_stats(r, &st);
}

static void *dalloc(rig *r, size_t bytes)
{
    void *saved, *p = NULL;
    cr_assert_eq(r->o->device_enter(r->ctx, r->device, &saved), 0);
    cr_assert_eq(r->o->dev_alloc(r->ctx, bytes ? bytes : 1, &p), 0);
    r->o->device_leave(r->ctx, saved);
    return p;
}

static void dfree(rig *r, void *p)
{
    void *saved;
    cr_assert_eq(r->o->device_enter(r->ctx, r->device, &saved), 0);
    r->o->dev_free(r->ctx, p);
    r->o->device_leave(r->ctx, saved);
}

static int dsync(rig *r)
{
    void *saved;
    cr_assert_eq(r->o->device_enter(r->ctx, r->device, &saved), 0);
    const int e = r->o->stream_sync(r->ctx, r->stream);
    r->o->device_leave(r->ctx, saved);
    return e;
}

static void nap_us(uint32_t us)
{
    const struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000};
    nanosleep(&ts, NULL);
}

/* 0..max_us of the consumer's own jitter. */
static void jitter(rig *r, uint32_t max_us)
{
    if (!max_us)
        return;
    r->rng ^= r->rng << 13, r->rng ^= r->rng >> 7, r->rng ^= r->rng << 17;
    nap_us((uint32_t)(r->rng % (max_us + 1u)));
}

static dlc_loader *open_host(const char *path, dlc_loader_config c)
{
    c.device = -1;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(path, &c, &l), DLC_OK, "%s", dlc_errmsg());
    return l;
}

static dlc_loader *open_dev(rig *r, const char *path, dlc_loader_config c)
{
    c.device = r->device;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc__loader_open_with(path, &c, devsim_ops(r->sim), &l), DLC_OK, "%s",
                 dlc_errmsg());
    const char *why = "";
    cr_assert_eq(dlc_loader_device(l, &why), r->device, "%s", why ? why : "");
    return l;
}

/* The description of output @p df of a lent device batch against the host batch's @p bf: name,
 * dtype, shape (in the device's layout), bytes, and the host copies of lengths and offsets.
 * Called while the batch is lent: after emit or release it belongs to the loader again. */
static void check_desc(const dlc_batch_field *bf, const dlc_device_field *df, uint32_t count)
{
    cr_assert_str_eq(df->name, bf->name);
    cr_assert_eq(df->field, bf->field);
    cr_assert_eq(df->kind, bf->kind);
    cr_assert_eq(df->dtype, bf->dtype, "%s %s: dtype %u, host %u", where, bf->name, df->dtype,
                 bf->dtype);
    cr_assert_eq(df->ndim, bf->ndim, "%s %s", where, bf->name);
    cr_assert_eq(df->bytes, bf->bytes, "%s %s: %zu bytes, host %zu", where, bf->name, df->bytes,
                 bf->bytes);
    cr_assert_eq(!df->lengths, !bf->lengths, "%s %s", where, bf->name);
    cr_assert_eq(!df->offsets, !bf->offsets, "%s %s", where, bf->name);
    cr_assert_eq(!df->staged_lengths, !bf->lengths, "%s %s", where, bf->name);
    cr_assert_eq(!df->staged_offsets, !bf->offsets, "%s %s", where, bf->name);
    if (bf->lengths)
        cr_assert_eq(memcmp(df->lengths, bf->lengths, count * sizeof(int64_t)), 0, "%s %s lengths",
                     where, bf->name);
    if (bf->offsets)
        cr_assert_eq(memcmp(df->offsets, bf->offsets, (count + 1) * sizeof(int64_t)), 0,
                     "%s %s offsets", where, bf->name);
    if (df->layout == bf->layout) {
        cr_assert_eq(memcmp(df->shape, bf->shape, df->ndim * sizeof *df->shape), 0, "%s %s", where,
                     bf->name);
        return;
    }
    /* An image in the other layout: [lead..., C, H, W] against [lead..., H, W, C]. */
    cr_assert_geq(df->ndim, 4);
    const uint32_t k = df->ndim - 3;
    const int host_nchw = bf->layout == DLC_LAYOUT_NCHW;
    cr_assert(host_nchw ? df->layout == DLC_LAYOUT_NHWC
                        : (bf->layout == DLC_LAYOUT_NHWC && df->layout == DLC_LAYOUT_NCHW),
              "%s %s: layouts %u / %u", where, bf->name, df->layout, bf->layout);
    const uint64_t *hs = bf->shape + k;
    const uint64_t want[3] = {host_nchw ? hs[1] : hs[2], host_nchw ? hs[2] : hs[0],
                              host_nchw ? hs[0] : hs[1]};
    cr_assert_eq(memcmp(df->shape, bf->shape, k * sizeof *df->shape), 0);
    cr_assert_eq(memcmp(df->shape + k, want, sizeof want), 0, "%s %s: shape", where, bf->name);
}

/* What the device wrote for output @p bf (in layout @p layout; lengths and offsets where not
 * NULL) against the host batch. */
static void check_data(const dlc_batch_field *bf, uint32_t layout, const void *data,
                       const int64_t *lengths, const int64_t *offsets, uint32_t count)
{
    if (layout == bf->layout) {
        size_t at = 0;
        while (at < bf->bytes && ((const uint8_t *)data)[at] == ((const uint8_t *)bf->data)[at])
            at++;
        cr_assert_eq(at, bf->bytes,
                     "%s %s: the device's bytes differ from byte %zu of %zu (%u, host %u)", where,
                     bf->name, at, bf->bytes, at < bf->bytes ? ((const uint8_t *)data)[at] : 0,
                     at < bf->bytes ? ((const uint8_t *)bf->data)[at] : 0);
    } else {
        const uint32_t k = bf->ndim - 3;
        const int host_nchw = bf->layout == DLC_LAYOUT_NCHW;
        const uint64_t C = host_nchw ? bf->shape[k] : bf->shape[k + 2];
        const uint64_t H = host_nchw ? bf->shape[k + 1] : bf->shape[k];
        const uint64_t W = host_nchw ? bf->shape[k + 2] : bf->shape[k + 1];
        uint64_t lead = 1;
        for (uint32_t j = 0; j < k; j++)
            lead *= bf->shape[j];
        const size_t es = dlc_dtype_size(bf->dtype);
        const uint8_t *hp = bf->data, *dp = data;
        for (uint64_t l = 0; l < lead; l++)
            for (uint64_t ch = 0; ch < C; ch++)
                for (uint64_t y = 0; y < H; y++)
                    for (uint64_t x = 0; x < W; x++) {
                        const uint64_t chw = ((l * C + ch) * H + y) * W + x;
                        const uint64_t hwc = ((l * H + y) * W + x) * C + ch;
                        const uint64_t hi = host_nchw ? chw : hwc, di = host_nchw ? hwc : chw;
                        cr_assert_eq(memcmp(hp + hi * es, dp + di * es, es), 0,
                                     "%s %s: element (%llu, %llu, %llu, %llu) differs", where,
                                     bf->name, (unsigned long long)l, (unsigned long long)ch,
                                     (unsigned long long)y, (unsigned long long)x);
                    }
    }
    if (lengths)
        cr_assert_eq(memcmp(lengths, bf->lengths, count * sizeof(int64_t)), 0,
                     "%s %s: emitted lengths", where, bf->name);
    if (offsets)
        cr_assert_eq(memcmp(offsets, bf->offsets, (count + 1) * sizeof(int64_t)), 0,
                     "%s %s: emitted offsets", where, bf->name);
}

static void check_meta(const dlc_batch *hb, const dlc_device_batch *db, int device)
{
    cr_assert_eq(db->count, hb->count);
    cr_assert_eq(db->device, device);
    cr_assert_eq(db->epoch, hb->epoch);
    cr_assert_eq(db->batch_index, hb->batch_index);
    cr_assert_eq(db->num_fields, hb->num_fields);
    cr_assert_not_null(db->ready_event);
    cr_assert_eq(memcmp(db->labels, hb->labels, hb->count * sizeof *hb->labels), 0, "labels");
    cr_assert_eq(memcmp(db->indices, hb->indices, hb->count * sizeof *hb->indices), 0, "indices");
}

/* Emit @p db into fresh device memory on the caller's stream, wait, and compare with @p hb. */
static void emit_and_check(rig *r, dlc_loader *dl, const dlc_device_batch *db, const dlc_batch *hb,
                           uint32_t jitter_us)
{
    check_meta(hb, db, r->device);
    cr_assert_leq(db->num_fields, MAXF);
    dlc_device_dst dst[MAXF];
    uint32_t layouts[MAXF];
    memset(dst, 0, sizeof dst);
    for (uint32_t i = 0; i < db->num_fields; i++) {
        const dlc_device_field *f = &db->fields[i];
        check_desc(&hb->fields[i], f, hb->count);
        layouts[i] = f->layout;
        dst[i].data = dalloc(r, f->bytes);
        if (f->lengths)
            dst[i].lengths = dalloc(r, db->count * sizeof(int64_t));
        if (f->offsets)
            dst[i].offsets = dalloc(r, (db->count + 1) * sizeof(int64_t));
    }
    const uint32_t nf = db->num_fields;
    void *indices = dalloc(r, db->count * sizeof(uint64_t));
    jitter(r, jitter_us);
    cr_assert_eq(dlc_loader_device_emit(dl, db, r->stream, dst, indices), DLC_OK, "%s",
                 dlc_errmsg());
    /* From here on the batch is the loader's again. */
    jitter(r, jitter_us);
    cr_assert_eq(dsync(r), 0);
    for (uint32_t i = 0; i < nf; i++)
        check_data(&hb->fields[i], layouts[i], dst[i].data, dst[i].lengths, dst[i].offsets,
                   hb->count);
    cr_assert_eq(memcmp(indices, hb->indices, hb->count * sizeof(uint64_t)), 0,
                 "emitted record numbers");
    for (uint32_t i = 0; i < nf; i++) {
        dfree(r, dst[i].data);
        if (dst[i].lengths)
            dfree(r, dst[i].lengths);
        if (dst[i].offsets)
            dfree(r, dst[i].offsets);
    }
    dfree(r, indices);
}

/* One epoch of both loaders in step, every device batch emitted and compared; the count. */
static uint64_t epoch_compare(rig *r, dlc_loader *dl, dlc_loader *hl, uint32_t jitter_us)
{
    uint64_t n = 0;
    for (;;) {
        dlc_batch hb;
        dlc_device_batch db;
        const dlc_status hrc = dlc_loader_next(hl, &hb);
        jitter(r, jitter_us);
        const dlc_status drc = dlc_loader_next_device(dl, &db);
        cr_assert_eq(drc, hrc, "device %d (%s), host %d", drc, dlc_errmsg(), hrc);
        if (hrc == DLC_END)
            return n;
        cr_assert_eq(hrc, DLC_OK);
        char *const tail = strstr(where, " | ");
        if (tail)
            *tail = 0;
        const size_t len = strlen(where);
        snprintf(where + len, sizeof where - len, " | epoch %llu batch %llu",
                 (unsigned long long)hb.epoch, (unsigned long long)hb.batch_index);
        emit_and_check(r, dl, &db, &hb, jitter_us);
        n++;
    }
}

static dlc_loader_config dev_config(void)
{
    dlc_loader_config c = fx_config();
    c.mean[0] = 0.4f, c.mean[1] = 0.5f, c.mean[2] = 0.6f;
    c.std[0] = 0.2f, c.std[1] = 0.25f, c.std[2] = 0.3f;
    return c;
}

Test(device, batches_equal_the_host_path_for_every_dtype_and_layout)
{
    fx_dir d;
    fx_make_store(&d, 37, 20, 18, 5, 0); /* 37 = 4 x 8 + 5: a short last batch. */
    const uint32_t dtypes[] = {DLC_DTYPE_UINT8, DLC_DTYPE_FLOAT32, DLC_DTYPE_FLOAT16};
    const uint32_t layouts[] = {DLC_LAYOUT_NONE, DLC_LAYOUT_NCHW, DLC_LAYOUT_NHWC};
    for (int di = 0; di < 3; di++)
        for (int li = 0; li < 3; li++) {
            rig r;
            rig_open(&r, (uint64_t)(di * 3 + li + 1), 50);
            snprintf(where, sizeof where, "dtype %u layout %u", dtypes[di], layouts[li]);
            dlc_loader_config c = dev_config();
            c.dtype = dtypes[di];
            c.device_layout = layouts[li];
            dlc_loader *hl = open_host(d.path, c), *dl = open_dev(&r, d.path, c);
            for (uint64_t ep = 0; ep < 2; ep++) {
                cr_assert_eq(dlc_loader_set_epoch(hl, ep), DLC_OK);
                cr_assert_eq(dlc_loader_set_epoch(dl, ep), DLC_OK);
                cr_assert_eq(epoch_compare(&r, dl, hl, 0), 5);
            }
            dlc_loader_stats st;
            dlc_loader_get_stats(dl, &st);
            cr_assert_eq(st.device, 0);
            cr_assert_gt(st.device_bytes, 0);
            cr_assert_eq(st.batches, 10);
            dlc_loader_close(dl);
            dlc_loader_close(hl);
            rig_close(&r);
        }
    fx_rmdir(&d);
}

/* device_copy_event_seconds: the copies' own time between the timed events recorded around them
 * on the loader's one stream. The stream runs its operations one after another, so their sum
 * lies within the wall-clock time of the epochs that made them; with the sim's delays on every
 * operation it is above zero. */
Test(device, copies_are_timed_by_events_on_the_loaders_stream)
{
    fx_dir d;
    fx_make_store(&d, 37, 20, 18, 5, 0);
    rig r;
    rig_open(&r, 7, 200);
    snprintf(where, sizeof where, "timed copies");
    const dlc_loader_config c = dev_config();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    dlc_loader *hl = open_host(d.path, c), *dl = open_dev(&r, d.path, c);
    cr_assert_eq(epoch_compare(&r, dl, hl, 0), 5);
    dlc_loader_stats st;
    dlc_loader_get_stats(dl, &st);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    const double ev = dlc_loader_device_copy_event_seconds(dl);
    cr_assert_gt(ev, 0.0);
    cr_assert_leq(ev, wall, "%g s of copies in %g s", ev, wall);
    cr_assert_eq(dlc_loader_device_copy_event_seconds(hl), 0.0, "no device path, no copies");
    cr_assert_eq(dlc_loader_device_copy_event_seconds(NULL), 0.0);
    cr_assert_gt(st.device_copy_seconds, 0.0);
    dlc_loader_close(dl);
    dlc_loader_close(hl);
    rig_close(&r);
    fx_rmdir(&d);
}

/* dlc_loader_next_device_wait() on a batch whose worker is held (the log callback of a damaged
 * record's replacement, fx_hold_at_replace()): DLC_AGAIN while it is, then the batch, staged as
 * the host path makes it; the slices are one wait in the report. */
Test(device, next_device_wait_says_not_yet_then_stages_the_batch)
{
    fx_dir d;
    fx_make_store(&d, 37, 20, 18, 5, 0);
    fx_corrupt_record(d.path, 17);
    rig r;
    rig_open(&r, 3, 0);
    snprintf(where, sizeof where, "sliced wait");
    dlc_loader_config c = dev_config();
    c.sampler = DLC_SAMPLER_SEQUENTIAL; /* Batch 2 holds record 17. */
    c.verify = DLC_VERIFY_ALWAYS;
    c.on_corrupt = DLC_CORRUPT_REPLACE;
    c.log = fx_hold_at_replace;
    c.log_user = NULL; /* The host path's: nothing held. */
    dlc_loader *hl = open_host(d.path, c);
    fx_gate g = {.open = 0};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    c.log_user = &g;
    dlc_loader *dl = open_dev(&r, d.path, c);
    uint32_t got = 0, again_at_2 = 0;
    for (;;) {
        dlc_batch hb;
        dlc_device_batch db;
        const dlc_status hrc = dlc_loader_next(hl, &hb);
        dlc_status drc;
        while ((drc = dlc_loader_next_device_wait(dl, &db, 50)) == DLC_AGAIN) {
            cr_assert_eq(db.count, 0);
            if (got == 2 && ++again_at_2 == 8) {
                pthread_mutex_lock(&g.mu);
                cr_assert_eq(g.held, 1, "the replacing worker is held");
                g.open = 1;
                pthread_cond_broadcast(&g.cv);
                pthread_mutex_unlock(&g.mu);
            }
        }
        cr_assert_eq(drc, hrc, "device %d (%s), host %d", drc, dlc_errmsg(), hrc);
        if (hrc == DLC_END)
            break;
        cr_assert_eq(db.batch_index, got);
        emit_and_check(&r, dl, &db, &hb, 0);
        got++;
    }
    cr_assert_eq(got, 5);
    cr_assert_geq(again_at_2, 8);
    dlc_loader_report rep = {.struct_size = sizeof rep};
    cr_assert_eq(dlc_loader_get_report(dl, 0, &rep), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(rep.batches, 5);
    cr_assert_geq(rep.wait_seconds, 0.4, "wait %.3f s, away %.3f s", rep.wait_seconds,
                  rep.away_seconds);
    cr_assert_lt(rep.away_seconds, rep.wait_seconds);
    cr_assert_eq(dlc_loader_next_device_wait(NULL, NULL, 0), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "dlc_loader_next_device_wait"), "%s", dlc_errmsg());
    dlc_loader_close(dl);
    dlc_loader_close(hl);
    pthread_cond_destroy(&g.cv);
    pthread_mutex_destroy(&g.mu);
    rig_close(&r);
    fx_rmdir(&d);
}

Test(device, no_hazards_under_random_delays_on_both_sides)
{
    fx_dir d;
    fx_make_store(&d, 23, 16, 16, 3, 0);
    uint64_t seed = 100;
    for (uint32_t staging = 1; staging <= 2; staging++)
        for (uint32_t prefetch = 1; prefetch <= 4; prefetch++) {
            const uint32_t batch = prefetch % 2 ? 5 : 7; /* 23 leaves 3 or 2 in the last. */
            devsim_opts opts;
            devsim_opts_init(&opts);
            opts.seed = ++seed;
            opts.max_delay_us = 300;
            opts.call_delay_us = 100;
            rig r;
            rig_open_opts(&r, &opts, 0);
            snprintf(where, sizeof where, "staging %u prefetch %u", staging, prefetch);
            devsim_stream_delay(r.sim, r.stream, 800); /* A slow consumer on the device. */
            dlc_loader_config c = dev_config();
            c.batch_size = batch;
            c.prefetch = prefetch;
            c.device_staging = staging;
            c.dtype = prefetch % 2 ? DLC_DTYPE_FLOAT32 : DLC_DTYPE_UINT8;
            c.device_layout = staging == 1 ? DLC_LAYOUT_NHWC : DLC_LAYOUT_NONE;
            dlc_loader *hl = open_host(d.path, c), *dl = open_dev(&r, d.path, c);
            for (uint64_t ep = 0; ep < 3; ep++) {
                cr_assert_eq(dlc_loader_set_epoch(hl, ep), DLC_OK);
                cr_assert_eq(dlc_loader_set_epoch(dl, ep), DLC_OK);
                epoch_compare(&r, dl, hl, 300);
            }
            devsim_stats st;
            devsim_get_stats(r.sim, &st);
            cr_assert_eq(st.hazards, 0, "staging %u prefetch %u: %s", staging, prefetch,
                         devsim_first_hazard(r.sim));
            dlc_loader_close(dl);
            dlc_loader_close(hl);
            rig_close(&r);
        }
    fx_rmdir(&d);
}

Test(device, a_consumer_that_holds_batches_still_gets_them_right)
{
    fx_dir d;
    fx_make_store(&d, 30, 16, 16, 3, 0);
    rig r;
    rig_open(&r, 9, 100);
    dlc_loader_config c = dev_config();
    c.dtype = DLC_DTYPE_FLOAT16;
    c.prefetch = 3;
    c.device_staging = 2;
    dlc_loader *hl = open_host(d.path, c), *dl = open_dev(&r, d.path, c);
    dlc_batch hb;
    dlc_device_batch db;
    for (int k = 0; dlc_loader_next(hl, &hb) == DLC_OK; k++) {
        cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_OK, "%s", dlc_errmsg());
        /* Hold the batch while the workers and the copy thread run ahead and stall. */
        nap_us(k % 2 ? 20000 : 2000);
        emit_and_check(&r, dl, &db, &hb, 0);
    }
    cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_END);
    dlc_loader_close(dl);
    dlc_loader_close(hl);
    rig_close(&r);
    fx_rmdir(&d);
}

/* Lend mode: wait, read the staged pointers on the caller's stream, release. */
static void lend_epoch(rig *r, dlc_loader *dl, dlc_loader *hl, int release_without_stream)
{
    dlc_batch hb;
    dlc_device_batch db;
    while (dlc_loader_next(hl, &hb) == DLC_OK) {
        cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_OK, "%s", dlc_errmsg());
        check_meta(&hb, &db, r->device);
        cr_assert_eq(dlc_loader_device_wait(dl, &db, r->stream), DLC_OK, "%s", dlc_errmsg());
        void *data[MAXF], *lengths[MAXF], *offsets[MAXF];
        void *labels = dalloc(r, db.count * 8), *indices = dalloc(r, db.count * 8);
        void *saved;
        cr_assert_eq(r->o->device_enter(r->ctx, r->device, &saved), 0);
        for (uint32_t i = 0; i < db.num_fields; i++) {
            const dlc_device_field *f = &db.fields[i];
            /* uint8 NHWC on both sides: the staged bytes are the host batch's. */
            check_desc(&hb.fields[i], f, hb.count);
            cr_assert_eq(f->staged_bytes, hb.fields[i].bytes);
            cr_assert(devsim_is_device(r->sim, f->staged, f->staged_bytes));
            cr_assert_eq(r->o->dev_alloc(r->ctx, f->staged_bytes + 1, &data[i]), 0);
            cr_assert_eq(r->o->copy_d2d(r->ctx, data[i], f->staged, f->staged_bytes, r->stream), 0);
            lengths[i] = offsets[i] = NULL;
            if (f->staged_lengths) {
                cr_assert_eq(r->o->dev_alloc(r->ctx, db.count * 8, &lengths[i]), 0);
                cr_assert_eq(
                    r->o->copy_d2d(r->ctx, lengths[i], f->staged_lengths, db.count * 8, r->stream),
                    0);
            }
            if (f->staged_offsets) {
                cr_assert_eq(r->o->dev_alloc(r->ctx, (db.count + 1) * 8, &offsets[i]), 0);
                cr_assert_eq(r->o->copy_d2d(r->ctx, offsets[i], f->staged_offsets,
                                            (db.count + 1) * 8, r->stream),
                             0);
            }
        }
        cr_assert_eq(r->o->copy_d2d(r->ctx, labels, db.staged_labels, db.count * 8, r->stream), 0);
        cr_assert_eq(r->o->copy_d2d(r->ctx, indices, db.staged_indices, db.count * 8, r->stream),
                     0);
        r->o->device_leave(r->ctx, saved);
        cr_assert_eq(dlc_loader_device_release(dl, &db, release_without_stream ? NULL : r->stream),
                     DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dsync(r), 0);
        for (uint32_t i = 0; i < hb.num_fields; i++) {
            check_data(&hb.fields[i], hb.fields[i].layout, data[i], lengths[i], offsets[i],
                       hb.count);
            dfree(r, data[i]);
            if (lengths[i])
                dfree(r, lengths[i]);
            if (offsets[i])
                dfree(r, offsets[i]);
        }
        cr_assert_eq(memcmp(labels, hb.labels, hb.count * 8), 0, "staged labels");
        cr_assert_eq(memcmp(indices, hb.indices, hb.count * 8), 0, "staged indices");
        dfree(r, labels);
        dfree(r, indices);
    }
    cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_END);
}

Test(device, lend_mode_wait_read_release)
{
    fx_dir d;
    fx_make_store(&d, 29, 16, 16, 3, 0);
    for (int variant = 0; variant < 2; variant++) {
        rig r;
        rig_open(&r, 21 + (uint64_t)variant, 200);
        devsim_stream_delay(r.sim, r.stream, 1000);
        dlc_loader_config c = dev_config();
        c.device_staging = 1; /* The next copy goes into the buffer just read. */
        c.prefetch = 3;
        dlc_loader *hl = open_host(d.path, c), *dl = open_dev(&r, d.path, c);
        /* Variant 1 releases with no stream: the loader must still order the next copy after
         * the stream given to wait. */
        lend_epoch(&r, dl, hl, variant);
        cr_assert_eq(dlc_loader_set_epoch(hl, 1), DLC_OK);
        cr_assert_eq(dlc_loader_set_epoch(dl, 1), DLC_OK);
        lend_epoch(&r, dl, hl, variant);
        dlc_loader_close(dl);
        dlc_loader_close(hl);
        rig_close(&r);
    }
    fx_rmdir(&d);
}

Test(device, close_with_work_in_flight)
{
    fx_dir d;
    fx_make_store(&d, 40, 16, 16, 3, 0);
    dlc_loader_config c = dev_config();
    c.dtype = DLC_DTYPE_FLOAT32;
    c.prefetch = 4;
    for (int mode = 0; mode < 4; mode++) {
        rig r;
        rig_open(&r, 40 + (uint64_t)mode, 300);
        devsim_stream_delay(r.sim, r.stream, 20000); /* The conversion is still queued. */
        dlc_loader *hl = open_host(d.path, c), *dl = open_dev(&r, d.path, c);
        dlc_batch hb;
        dlc_device_batch db;
        cr_assert_eq(dlc_loader_next(hl, &hb), DLC_OK);
        cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_OK, "%s", dlc_errmsg());
        dlc_device_dst dst[MAXF];
        memset(dst, 0, sizeof dst);
        void *out = NULL;
        if (mode == 0) {
            /* Emit, then close at once: close waits for the conversion on the caller's stream
             * before it frees the staging buffer it reads. */
            check_desc(&hb.fields[0], &db.fields[0], hb.count);
            out = dst[0].data = dalloc(&r, db.fields[0].bytes);
            cr_assert_eq(dlc_loader_device_emit(dl, &db, r.stream, dst, NULL), DLC_OK, "%s",
                         dlc_errmsg());
        } else if (mode == 1) {
            /* Lent, never released. */
        } else if (mode == 2) {
            /* Lend mode with a read in flight, never released. */
            cr_assert_eq(dlc_loader_device_wait(dl, &db, r.stream), DLC_OK);
            out = dalloc(&r, db.fields[0].staged_bytes);
            void *saved;
            cr_assert_eq(r.o->device_enter(r.ctx, 0, &saved), 0);
            cr_assert_eq(
                r.o->copy_d2d(r.ctx, out, db.fields[0].staged, db.fields[0].staged_bytes, r.stream),
                0);
            r.o->device_leave(r.ctx, saved);
        } else {
            /* Several batches emitted back to back, the last one lent. */
            for (int k = 0; k < 3; k++) {
                cr_assert_eq(dlc_loader_device_emit(dl, &db, NULL, dst, NULL), DLC_OK);
                cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_OK, "%s", dlc_errmsg());
            }
        }
        const uint32_t layout0 = db.fields[0].layout;
        dlc_loader_close(dl);
        devsim_stats st;
        devsim_get_stats(r.sim, &st);
        if (mode == 0) {
            cr_assert_eq(st.busy_frees, 0, "close freed a buffer that the conversion still read");
            cr_assert_eq(dsync(&r), 0);
            check_data(&hb.fields[0], layout0, out, NULL, NULL, hb.count);
        }
        if (mode == 2)
            cr_assert_eq(dsync(&r), 0);
        if (out)
            dfree(&r, out);
        dlc_loader_close(hl);
        rig_close(&r);
    }
    fx_rmdir(&d);
}

Test(device, set_epoch_and_restore_mid_epoch)
{
    fx_dir d;
    fx_make_store(&d, 45, 16, 16, 3, 0);
    dlc_loader_config c = dev_config();
    c.dtype = DLC_DTYPE_FLOAT32;
    c.device_layout = DLC_LAYOUT_NHWC;
    c.prefetch = 3;
    c.threads = 2;
    rig r;
    rig_open(&r, 77, 200);
    devsim_stream_delay(r.sim, r.stream, 2000);
    dlc_loader *hl = open_host(d.path, c), *dl = open_dev(&r, d.path, c);
    dlc_batch hb;
    dlc_device_batch db;
    /* One batch emitted (still converting), one lent, then a reset with copies in flight. */
    cr_assert_eq(dlc_loader_next(hl, &hb), DLC_OK);
    cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_OK);
    emit_and_check(&r, dl, &db, &hb, 0);
    cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_OK);
    dlc_device_dst dst[MAXF];
    memset(dst, 0, sizeof dst);
    cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_OK);
    cr_assert_eq(dlc_loader_device_emit(dl, &db, r.stream, dst, NULL), DLC_OK); /* Nothing. */
    cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_OK);
    cr_assert_eq(dlc_loader_device_wait(dl, &db, r.stream), DLC_OK);
    cr_assert_eq(dlc_loader_set_epoch(dl, 3), DLC_OK);
    cr_assert_eq(dlc_loader_device_emit(dl, &db, r.stream, dst, NULL), DLC_EINVAL,
                 "a batch of the old plan is dead");
    cr_assert_eq(dlc_loader_set_epoch(hl, 3), DLC_OK);
    cr_assert_eq(epoch_compare(&r, dl, hl, 0), 6); /* 45 = 5 x 8 + 5. */

    /* Save after 4 batches of epoch 4, restore into a new device loader and a host loader. */
    cr_assert_eq(dlc_loader_set_epoch(dl, 4), DLC_OK);
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_OK);
        if (k % 2)
            cr_assert_eq(dlc_loader_device_emit(dl, &db, r.stream, dst, NULL), DLC_OK);
    }
    uint8_t state[DLC_LOADER_STATE_SIZE];
    cr_assert_eq(dlc_loader_state_save(dl, state), DLC_OK);
    dlc_loader_close(dl);
    dlc_loader_close(hl);
    dl = open_dev(&r, d.path, c);
    hl = open_host(d.path, c);
    cr_assert_eq(dlc_loader_state_restore(dl, state, sizeof state), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_loader_state_restore(hl, state, sizeof state), DLC_OK);
    cr_assert_eq(epoch_compare(&r, dl, hl, 100), 2);
    /* And a restore while the device loader has batches staged and one lent. */
    cr_assert_eq(dlc_loader_set_epoch(dl, 0), DLC_OK);
    cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_OK);
    nap_us(20000);
    cr_assert_eq(dlc_loader_state_restore(dl, state, sizeof state), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_loader_state_restore(hl, state, sizeof state), DLC_OK);
    cr_assert_eq(epoch_compare(&r, dl, hl, 0), 2);
    dlc_loader_close(dl);
    dlc_loader_close(hl);
    rig_close(&r);
    fx_rmdir(&d);
}

/* Run the device path with @p op failing in @p mode at its @p nth call; the failure must reach
 * the caller as DLC_ECUDA naming the sim's text, later calls must not hang, and close must free
 * everything. */
/* A rig on a slow device (3-4 ms an operation): work enqueued before a failure is still
 * pending when the loader goes on, so that a buffer handed back before the work that reads it
 * has run is refilled or freed under it. The config for it in @p c. */
static void slow_rig_open(rig *r, uint64_t seed, dlc_loader_config *c)
{
    devsim_opts opts;
    devsim_opts_init(&opts);
    opts.seed = seed;
    opts.min_delay_us = 3000;
    opts.max_delay_us = 4000;
    rig_open_opts(r, &opts, 0);
    *c = dev_config();
    c->dtype = DLC_DTYPE_FLOAT32;
    c->prefetch = 2;
}

static void fault_case(const char *path, devsim_op op, uint64_t nth, devsim_fault_mode mode)
{
    rig r;
    dlc_loader_config c;
    slow_rig_open(&r, 300 + (uint64_t)op * 3 + mode, &c);
    snprintf(where, sizeof where, "%s failing (mode %d) at call %llu", devsim_op_name(op), mode,
             (unsigned long long)nth);
    dlc_loader *dl = open_dev(&r, path, c);
    /* The test's own destination, made before the failure: later calls may all fail. */
    void *out = dalloc(&r, (size_t)c.batch_size * c.crop_h * c.crop_w * 3 * 4);
    devsim_fault(r.sim, op, nth, mode);
    int failures = 0, calls = 0;
    uint64_t epoch = 0;
    char msg[1024] = "";
    /* An asynchronous failure surfaces at a later call, possibly past the end of the epoch:
     * go on into the next epochs until it has, then to the end of that epoch (no hang). */
    for (; calls < 60; calls++) {
        dlc_device_batch db;
        dlc_status rc = dlc_loader_next_device(dl, &db);
        if (rc == DLC_END) {
            if (failures || epoch == 3)
                break;
            rc = dlc_loader_set_epoch(dl, ++epoch);
            cr_assert(rc == DLC_OK || rc == DLC_ECUDA, "%d %s", rc, dlc_errmsg());
            continue;
        }
        if (rc == DLC_OK) {
            dlc_device_dst dst[MAXF];
            memset(dst, 0, sizeof dst);
            dst[0].data = out;
            /* No call of the test's own until close: a one-shot asynchronous error goes to
             * the next call of any operation, and must be the loader's to report. */
            rc = dlc_loader_device_emit(dl, &db, r.stream, dst, NULL);
        }
        if (rc != DLC_OK) {
            cr_assert_eq(rc, DLC_ECUDA, "%s: %d %s", where, rc, dlc_errmsg());
            if (!failures++)
                snprintf(msg, sizeof msg, "%s", dlc_errmsg());
        }
    }
    cr_assert_lt(calls, 60, "%s: the loader never ended the epoch", where);
    cr_assert_gt(failures, 0, "%s: the injected failure (%s) never reached the caller", where,
                 devsim_last_fault(r.sim));
    cr_assert(strstr(msg, "cpu-sim"), "the message names the backend's text: %s", msg);
    dlc_loader_close(dl);
    devsim_clear_error(r.sim); /* The test's own clean-up calls. */
    dfree(&r, out);
    rig_close(&r);
}

Test(device, injected_failures_reach_the_caller_and_close_cleanly)
{
    fx_dir d;
    fx_make_store(&d, 40, 16, 16, 3, 0);
    const devsim_op ops[] = {DEVSIM_OP_COPY_H2D, DEVSIM_OP_CONVERT, DEVSIM_OP_EVENT_RECORD,
                             DEVSIM_OP_STREAM_WAIT};
    /* The first call of each is deterministic (the first event_record is the copy thread's, the
     * first stream_wait and convert are emit's); the third falls wherever the threads put it. */
    for (int k = 0; k < 4; k++)
        for (int mode = DEVSIM_FAULT_SYNC; mode <= DEVSIM_FAULT_STICKY; mode++)
            for (uint64_t nth = 1; nth <= 3; nth += 2)
                fault_case(d.path, ops[k], nth, (devsim_fault_mode)mode);
    fx_rmdir(&d);
}

/* The copy thread's wait for a copy fails without having waited (the backend returns an error,
 * or another call's asynchronous one, at once): the slot the copy reads must still not go back
 * to the I/O thread before the copy has run. The device is slow (fault_case()), so a slot handed
 * back at once is refilled under the pending copy, which the simulator reports as a hazard. */
Test(device, a_failed_wait_for_a_copy_keeps_its_slot_until_it_ran)
{
    fx_dir d;
    fx_make_store(&d, 40, 16, 16, 3, 0);
    for (uint64_t nth = 1; nth <= 3; nth++)
        fault_case(d.path, DEVSIM_OP_EVENT_SYNC, nth, DEVSIM_FAULT_SYNC);
    fx_rmdir(&d);
}

typedef struct held_stream {
    rig *r;
    pthread_t thread;
} held_stream;

/* Let the caller's stream run again after 400 ms. */
static void *release_later(void *arg)
{
    held_stream *h = arg;
    usleep(400 * 1000);
    devsim_stream_pause(h->r->sim, h->r->stream, 0);
    return NULL;
}

/* close() waits for the caller's stream to be done with each staging buffer before it frees
 * them; a wait that fails without having waited must not let it free a buffer still read. The
 * epoch is run to its end first, so that the copy thread is idle and close's waits are the only
 * event_syncs after the fault is armed; the caller's stream is held for 400 ms from the last
 * batch on, so its last conversions still read a staging buffer when close() begins. The
 * @p nth wait of close fails (one of them is the held buffer's). */
static void close_case(const char *path, uint64_t nth)
{
    rig r;
    dlc_loader_config c;
    slow_rig_open(&r, 377 + nth, &c);
    snprintf(where, sizeof where, "event_sync failing at close's wait %llu",
             (unsigned long long)nth);
    dlc_loader *dl = open_dev(&r, path, c);
    void *out = dalloc(&r, (size_t)c.batch_size * c.crop_h * c.crop_w * 3 * 4);
    const uint64_t n = dlc_loader_batches_per_epoch(dl);
    cr_assert_gt(n, 1);
    held_stream h = {.r = &r};
    dlc_device_batch db;
    dlc_status rc;
    for (uint64_t b = 0; (rc = dlc_loader_next_device(dl, &db)) == DLC_OK; b++) {
        dlc_device_dst dst[MAXF];
        memset(dst, 0, sizeof dst);
        dst[0].data = out;
        if (b == n - 1) { /* The last batch's conversions wait until close() has begun. */
            devsim_stream_pause(r.sim, r.stream, 1);
            cr_assert_eq(pthread_create(&h.thread, NULL, release_later, &h), 0);
        }
        cr_assert_eq(dlc_loader_device_emit(dl, &db, r.stream, dst, NULL), DLC_OK, "%s",
                     dlc_errmsg());
    }
    cr_assert_eq(rc, DLC_END, "%s", dlc_errmsg());
    /* The copy thread's own wait for the last copy (3-4 ms) is over by then, so the fault is
     * close's. */
    usleep(50 * 1000);
    devsim_fault(r.sim, DEVSIM_OP_EVENT_SYNC, nth, DEVSIM_FAULT_SYNC);
    dlc_loader_close(dl);
    pthread_join(h.thread, NULL);
    void *saved;
    cr_assert_eq(r.o->device_enter(r.ctx, r.device, &saved), 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.stream), 0);
    r.o->device_leave(r.ctx, saved);
    dfree(&r, out);
    devsim_stats st;
    rig_close_stats(&r, &st);
    cr_assert_eq(st.busy_frees, 0, "%s: close freed %llu buffer(s) the caller's stream still read",
                 where, (unsigned long long)st.busy_frees);
    cr_assert_eq(st.hazards, 0, "%s", where);
}

Test(device, a_failed_wait_at_close_frees_nothing_still_read)
{
    fx_dir d;
    fx_make_store(&d, 40, 16, 16, 3, 0);
    for (uint64_t nth = 1; nth <= 4; nth++)
        close_case(d.path, nth);
    fx_rmdir(&d);
}

Test(device, every_field_kind_and_view_groups)
{
    char *dir = tu_mkdtemp();
    cr_assert_not_null(dir);
    char *path = tu_path(dir, "fields.dlc");
    cr_assert_eq(tu_make_fields_store(path, 26, 24, 20), DLC_OK, "%s", dlc_errmsg());
    for (uint32_t mode = DLC_VARIABLE_PAD; mode <= DLC_VARIABLE_OFFSETS; mode++) {
        rig r;
        rig_open(&r, 500 + mode, 150);
        snprintf(where, sizeof where, "variable mode %u", mode);
        dlc_loader_config c = dev_config();
        c.batch_size = 6;
        c.crop_h = 16;
        c.crop_w = 12;
        c.dtype = mode == DLC_VARIABLE_PAD ? DLC_DTYPE_FLOAT16 : DLC_DTYPE_FLOAT32;
        c.device_layout = mode == DLC_VARIABLE_PAD_TO ? DLC_LAYOUT_NHWC : DLC_LAYOUT_NONE;
        const dlc_field_option opt[] = {{.name = "tokens", .variable = mode, .max_len = 4},
                                        {.name = "boxes", .variable = mode, .max_len = 2}};
        c.field_options = opt;
        c.num_field_options = 2;
        dlc_loader *hl = open_host(path, c), *dl = open_dev(&r, path, c);
        for (uint64_t ep = 0; ep < 2; ep++) {
            cr_assert_eq(dlc_loader_set_epoch(hl, ep), DLC_OK);
            cr_assert_eq(dlc_loader_set_epoch(dl, ep), DLC_OK);
            cr_assert_eq(epoch_compare(&r, dl, hl, 100), 5);
        }
        dlc_loader_close(dl);
        dlc_loader_close(hl);
        rig_close(&r);
    }
    /* Two view groups of the image and the mask: the conversion covers samples x views. */
    const dlc_view_spec views[] = {
        {.name = "g",
         .count = 2,
         .augment = DLC_AUGMENT_RANDOM_RESIZED_CROP,
         .crop_h = 12,
         .crop_w = 10,
         .rrc_scale = {0.3f, 1},
         .rrc_ratio = {0.75f, 1.33f},
         .flip_prob = 0.5f},
        {.name = "l",
         .count = 3,
         .augment = DLC_AUGMENT_RANDOM_CROP,
         .crop_h = 8,
         .crop_w = 6,
         .flip_prob = 0.5f},
    };
    const char *sel[] = {"image", "mask", "label", "text"};
    for (uint32_t layout = DLC_LAYOUT_NHWC; layout <= DLC_LAYOUT_NONE; layout++) {
        rig r;
        rig_open(&r, 600 + layout, 150);
        snprintf(where, sizeof where, "views, device layout %u", layout);
        dlc_loader_config c = dev_config();
        c.batch_size = 4;
        c.views = views;
        c.num_views = 2;
        c.fields = sel;
        c.num_fields = 4;
        c.dtype = DLC_DTYPE_FLOAT32;
        c.device_layout = layout;
        dlc_loader *hl = open_host(path, c), *dl = open_dev(&r, path, c);
        cr_assert_eq(epoch_compare(&r, dl, hl, 50), 7);
        dlc_loader_close(dl);
        dlc_loader_close(hl);
        rig_close(&r);
    }
    tu_rmtree(dir);
    free(dir);
    free(path);
}

Test(device, keeps_the_callers_device_and_refuses_bad_ordinals)
{
    fx_dir d;
    fx_make_store(&d, 20, 16, 16, 3, 0);
    devsim_opts opts;
    devsim_opts_init(&opts);
    opts.devices = 2;
    opts.seed = 5;
    rig r;
    rig_open_opts(&r, &opts, 1); /* The loader on device 1, the test thread on device 0. */
    dlc_loader_config c = dev_config();
    c.dtype = DLC_DTYPE_FLOAT16;
    c.device = 1;
    dlc_loader *hl = open_host(d.path, c), *dl = open_dev(&r, d.path, c);
    cr_assert_eq(r.o->set_device(r.ctx, 0), 0);
    dlc_batch hb;
    dlc_device_batch db;
    while (dlc_loader_next(hl, &hb) == DLC_OK) {
        cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(devsim_current_device(r.sim), 0, "next_device changed the current device");
        emit_and_check(&r, dl, &db, &hb, 0);
        cr_assert_eq(devsim_current_device(r.sim), 0, "emit changed the current device");
    }
    dlc_loader_close(dl);
    cr_assert_eq(devsim_current_device(r.sim), 0, "close changed the current device");
    devsim_stats st;
    devsim_get_stats(r.sim, &st);
    cr_assert_eq(st.wrong_device, 0, "device work enqueued with device 0 current");

    /* Beyond the devices present: refused at open, by name. */
    c.device = 2;
    dlc_loader *bad = NULL;
    cr_assert_eq(dlc__loader_open_with(d.path, &c, devsim_ops(r.sim), &bad), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "device"), "%s", dlc_errmsg());
    dlc_loader_close(hl);
    rig_close(&r);

    /* No device at all: the loader serves host batches and says why. */
    opts.devices = 0;
    rig_open_opts(&r, &opts, 0);
    c.device = 0;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc__loader_open_with(d.path, &c, devsim_ops(r.sim), &l), DLC_OK, "%s",
                 dlc_errmsg());
    const char *why = NULL;
    cr_assert_eq(dlc_loader_device(l, &why), -1);
    cr_assert(why && strstr(why, "no devices"), "%s", why ? why : "(null)");
    cr_assert_eq(dlc_loader_next_device(l, &db), DLC_ESTATE);
    cr_assert_eq(dlc_loader_next(l, &hb), DLC_OK);
    dlc_loader_close(l);
    rig_close(&r);
    fx_rmdir(&d);
}

/* MixUp, CutMix and soft targets on the device path: the targets made on the host and the images
 * mixed on the device after their conversion equal the host path's mixed batch, bit for bit, for
 * every float dtype and both layouts (the kernel's function is the host's, convert_hd.h). */
Test(device, mixup_and_cutmix_equal_the_host_path)
{
    fx_dir d;
    fx_make_store(&d, 37, 20, 18, 5, 0);
    const uint32_t dtypes[] = {DLC_DTYPE_FLOAT32, DLC_DTYPE_FLOAT16, DLC_DTYPE_BFLOAT16};
    const uint32_t layouts[] = {DLC_LAYOUT_NONE, DLC_LAYOUT_NHWC};
    for (int di = 0; di < 3; di++)
        for (int li = 0; li < 2; li++) {
            rig r;
            rig_open(&r, (uint64_t)(100 + di * 2 + li), 50);
            snprintf(where, sizeof where, "mix dtype %u layout %u", dtypes[di], layouts[li]);
            dlc_loader_config c = dev_config();
            c.dtype = dtypes[di];
            c.device_layout = layouts[li];
            c.mixup_alpha = 0.8f;
            c.cutmix_alpha = 1.0f;
            c.label_smoothing = 0.1;
            dlc_loader *hl = open_host(d.path, c), *dl = open_dev(&r, d.path, c);
            uint32_t modes[3] = {0, 0, 0};
            for (uint64_t ep = 0; ep < 2; ep++) {
                cr_assert_eq(dlc_loader_set_epoch(hl, ep), DLC_OK);
                cr_assert_eq(dlc_loader_set_epoch(dl, ep), DLC_OK);
                cr_assert_eq(epoch_compare(&r, dl, hl, 0), 5);
                for (uint64_t b = 0; b < 5; b++) {
                    dlc_mixup_params p = {.struct_size = sizeof p};
                    cr_assert_eq(dlc_loader_mixup_params(dl, ep, b, 12, 10, &p), DLC_OK);
                    modes[p.mode]++;
                }
            }
            /* Both kinds of mixing ran (seed 42): the comparison covered each. */
            cr_assert(modes[1] > 0 && modes[2] > 0, "%s: modes %u %u %u", where, modes[0], modes[1],
                      modes[2]);
            dlc_loader_close(dl);
            dlc_loader_close(hl);
            rig_close(&r);
        }
    fx_rmdir(&d);
}

/* RandomErasing on the device path: the boxes drawn by the workers and passed with the batch,
 * the float images erased on the device after their conversion (and before MixUp / CutMix), equal
 * the host path's batch bit for bit, for every float dtype, both layouts and every erase value,
 * the noise included (a counter-based generator both sides compute the same way, convert_hd.h);
 * then with two view groups that erase differently, and with uint8 (erased in the slot). */
Test(device, random_erasing_equals_the_host_path)
{
    fx_dir d;
    fx_make_store(&d, 37, 20, 18, 5, 0);
    const uint32_t dtypes[] = {DLC_DTYPE_FLOAT32, DLC_DTYPE_FLOAT16, DLC_DTYPE_BFLOAT16};
    const uint32_t layouts[] = {DLC_LAYOUT_NONE, DLC_LAYOUT_NHWC};
    const uint32_t values[] = {DLC_ERASE_ZERO, DLC_ERASE_NOISE, DLC_ERASE_CONSTANT};
    uint64_t erased = 0;
    for (int di = 0; di < 3; di++)
        for (int li = 0; li < 2; li++)
            for (int vi = 0; vi < 3; vi++) {
                rig r;
                rig_open(&r, (uint64_t)(700 + di * 6 + li * 3 + vi), 30);
                snprintf(where, sizeof where, "erase dtype %u layout %u value %u", dtypes[di],
                         layouts[li], values[vi]);
                dlc_loader_config c = dev_config();
                c.dtype = dtypes[di];
                c.device_layout = layouts[li];
                c.return_params = 1;
                if (vi == 1) /* Mixing too: erased first, as on the host. */
                    c.mixup_alpha = 0.8f, c.cutmix_alpha = 1.0f;
                dlc_augment_spec a;
                dlc_augment_spec_init(&a);
                a.erase_prob = 0.7f;
                a.erase_value = values[vi];
                const float k[4] = {0.5f, -1.25f, 2.0f, 0};
                memcpy(a.erase_constant, k, sizeof k);
                c.augment_specs = &a;
                c.num_augment_specs = 1;
                dlc_loader *hl = open_host(d.path, c), *dl = open_dev(&r, d.path, c);
                for (uint64_t ep = 0; ep < 2; ep++) {
                    cr_assert_eq(dlc_loader_set_epoch(hl, ep), DLC_OK);
                    cr_assert_eq(dlc_loader_set_epoch(dl, ep), DLC_OK);
                    cr_assert_eq(epoch_compare(&r, dl, hl, 0), 5);
                }
                /* The host's boxes: some views were erased, so the comparison covered them. */
                dlc_batch hb;
                cr_assert_eq(dlc_loader_set_epoch(hl, 0), DLC_OK);
                cr_assert_eq(dlc_loader_next(hl, &hb), DLC_OK);
                for (uint32_t i = 0; i < hb.num_fields; i++)
                    if (strcmp(hb.fields[i].name, "params_erase") == 0)
                        for (uint32_t s = 0; s < hb.count; s++)
                            erased += ((const int32_t *)hb.fields[i].data)[4 * s + 2] > 0;
                dlc_loader_close(dl);
                dlc_loader_close(hl);
                rig_close(&r);
            }
    cr_assert_gt(erased, 18 * 3, "%llu views erased", (unsigned long long)erased);
    fx_rmdir(&d);

    /* Two view groups, erasing with noise in one and a constant in the other: each image's box is
     * its own view's (the table is samples x all views). And uint8, erased in the slot. */
    char *dir = tu_mkdtemp();
    cr_assert_not_null(dir);
    char *path = tu_path(dir, "fields.dlc");
    cr_assert_eq(tu_make_fields_store(path, 26, 24, 20), DLC_OK, "%s", dlc_errmsg());
    const dlc_view_spec views[] = {
        {.name = "g",
         .count = 2,
         .augment = DLC_AUGMENT_RANDOM_RESIZED_CROP,
         .crop_h = 12,
         .crop_w = 10,
         .rrc_scale = {0.3f, 1},
         .rrc_ratio = {0.75f, 1.33f},
         .flip_prob = 0.5f},
        {.name = "l", .count = 3, .augment = DLC_AUGMENT_RANDOM_CROP, .crop_h = 8, .crop_w = 6},
    };
    const char *sel[] = {"image", "label"};
    for (uint32_t layout = DLC_LAYOUT_NHWC; layout <= DLC_LAYOUT_NONE; layout++)
        for (int u8 = 0; u8 < 2; u8++) {
            rig r;
            rig_open(&r, 800 + layout * 2 + u8, 50);
            snprintf(where, sizeof where, "erase views, device layout %u uint8 %d", layout, u8);
            dlc_loader_config c = dev_config();
            c.batch_size = 4;
            c.views = views;
            c.num_views = 2;
            c.fields = sel;
            c.num_fields = 2;
            c.dtype = u8 ? DLC_DTYPE_UINT8 : DLC_DTYPE_FLOAT32;
            c.device_layout = layout;
            dlc_augment_spec a[2];
            dlc_augment_spec_init(&a[0]);
            dlc_augment_spec_init(&a[1]);
            a[0].erase_prob = 0.9f;
            a[0].erase_value = u8 ? DLC_ERASE_ZERO : DLC_ERASE_NOISE;
            a[1].erase_prob = 0.6f;
            a[1].erase_value = DLC_ERASE_CONSTANT;
            a[1].erase_constant[0] = 7, a[1].erase_constant[1] = 200, a[1].erase_constant[2] = 3;
            c.augment_specs = a;
            c.num_augment_specs = 2;
            dlc_loader *hl = open_host(path, c), *dl = open_dev(&r, path, c);
            cr_assert_eq(epoch_compare(&r, dl, hl, 50), 7);
            dlc_loader_close(dl);
            dlc_loader_close(hl);
            rig_close(&r);
        }
    tu_rmtree(dir);
    free(dir);
    free(path);
}
