/* The device path: page-locked slots, a copy thread, a ring of device staging buffers, and the
 * conversion into the caller's memory on the caller's stream (include/dlcache/loader.h, "The
 * device path").
 *
 * Everything here runs against the table of operations in device.h: the CUDA plugin in a real
 * run, the CPU stand-in of tests/lib/devsim.c in the tests, so that the ordering below is
 * checked under ThreadSanitizer and AddressSanitizer on machines without a GPU.
 *
 * The order of one batch b, slot s = b % nslots, staging buffer t = b % nstage:
 *   1. The workers finish s (READY). The copy thread takes it once t is FREE, that is once the
 *      consumer released t's previous batch and recorded t.done on the stream that read it.
 *   2. On the loader's stream: wait(t.done), copy s -> t, record t.copy. t is STAGED: the
 *      consumer may take it now, before the copy has run.
 *   3. The copy thread waits on the host for t.copy, then hands s back to the I/O thread (FREE).
 *      This host wait is on the loader's own thread: neither the device nor the consumer waits.
 *   4. dlc_loader_device_emit() on the caller's stream: wait(t.copy), convert and copy into the
 *      caller's memory, record t.done; t is FREE again.
 * So a slot is never refilled before its copy has completed (3), and a staging buffer is never
 * overwritten before the work that read it has completed (2 waits for the t.done of 4). */
#include "device.h"
#include "internal.h"

#include <assert.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Copies whose gap is at most this are merged: copying a few alignment bytes more is cheaper
 * than another copy call (a full batch of fixed-size outputs is then exactly one copy). */
#define MERGE_GAP ((size_t)64 << 10)
#define MAX_STAGES 16u

enum { STAGE_FREE, STAGE_STAGED, STAGE_LENT };

typedef struct dlc__stage {
    int state;            /* STAGE_*; under mu. */
    uint64_t batch;       /* Batch number in the plan; under mu. */
    uint8_t *dev;         /* Device buffer of l->arena_bytes, laid out as a slot's arena. */
    void *ev_copy;        /* Recorded after the copy into dev. */
    void *ev_done;        /* Recorded after the consumer's last use of dev. */
    void *ev_t0, *ev_t1;  /* Timed events around the copies (when the backend has them). */
    int timed;            /* ev_t0 and ev_t1 were recorded around this batch's copies. */
    int done_recorded;    /* ev_done was recorded at least once. */
    uint8_t *meta;        /* Host copy of the slot's small arrays (arena_meta bytes). */
    dlc_device_field *df; /* One per output: what dlc_loader_next_device() lends. */
    uint32_t count;
    uint64_t epoch;
    dlc_status err; /* The slot's failure, or the copy's; reported when the batch is taken. */
    char errmsg[512];
    void *wait_stream; /* Lend mode: the stream given to dlc_loader_device_wait(). */
    int waited;
} dlc__stage;

typedef struct dlc__devpath {
    const dlc__devops *ops;
    void *ctx;
    int device;
    uint32_t dtype, layout; /* Of the image outputs written by emit. */
    void *stream;           /* The loader's own. */
    uint32_t nstage;
    dlc__stage *stages;
    pthread_t thread;
    int started;
    uint64_t up_next;     /* Next batch the copy thread takes; under mu. */
    int up_busy;          /* The copy thread holds a slot; under mu. */
    int lent;             /* Stage lent to the consumer, or -1; the consumer's. */
    dlc_status async_err; /* A copy that failed after it was issued; under mu. */
    char async_msg[512];
    _Atomic uint64_t bytes, copy_ns;
    _Atomic uint64_t copy_event_ns; /* The copies' time on the device, by timed events. */
} dlc__devpath;

/* ---- The plugin ------------------------------------------------------------------------------
 * Loaded once per process and never unloaded: the CUDA runtime inside it keeps process-wide
 * state (its contexts, its atexit handlers) that does not survive dlclose. This is the library's
 * one piece of global mutable state besides the error buffer, written once under pthread_once. */

static pthread_once_t plugin_once = PTHREAD_ONCE_INIT;
static const dlc__devops *plugin_ops;
static char plugin_why[1024];

/* The directory of libdlcache.so (or of the program that links the library statically). */
static int self_dir(char *buf, size_t cap)
{
    Dl_info info;
    if (!dladdr((void *)&dlc_cuda_probe, &info) || !info.dli_fname)
        return 0;
    const char *slash = strrchr(info.dli_fname, '/');
    if (!slash)
        return 0;
    const size_t n = (size_t)(slash - info.dli_fname);
    if (n + 1 > cap)
        return 0;
    memcpy(buf, info.dli_fname, n);
    buf[n] = 0;
    return 1;
}

static const dlc__devops *plugin_try(const char *path, char *why, size_t cap)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, cap, "%s", e ? e : path);
        return NULL;
    }
    dlc__devops_fn fn;
    void *sym = dlsym(h, DLC__DEVOPS_SYMBOL);
    memcpy(&fn, &sym, sizeof fn); /* ISO C has no function-pointer cast from void *. */
    const dlc__devops *ops = sym ? fn(DLC__DEVOPS_ABI) : NULL;
    if (!ops || ops->abi != DLC__DEVOPS_ABI || ops->size < sizeof(dlc__devops)) {
        snprintf(why, cap, "%s: not a dlcache CUDA plugin of ABI %u (built for another version)",
                 path, DLC__DEVOPS_ABI);
        dlclose(h);
        return NULL;
    }
    return ops;
}

static void plugin_load(void)
{
    const char *env = getenv("DLCACHE_CUDA_PLUGIN");
    if (env && *env) {
        plugin_ops = plugin_try(env, plugin_why, sizeof plugin_why);
        return;
    }
    char dir[4096], path[4200], why1[384] = "", why2[384] = "";
    if (self_dir(dir, sizeof dir)) {
        /* Next to libdlcache.so; or, for a tool or test that links the library statically
         * (build/bin, build/tests), in the lib folder beside its own. */
        snprintf(path, sizeof path, "%s/libdlcache_cuda.so", dir);
        if ((plugin_ops = plugin_try(path, why1, sizeof why1)))
            return;
        snprintf(path, sizeof path, "%s/../lib/libdlcache_cuda.so", dir);
        if (access(path, F_OK) == 0 && (plugin_ops = plugin_try(path, why1, sizeof why1)))
            return;
    }
    if ((plugin_ops = plugin_try("libdlcache_cuda.so", why2, sizeof why2)))
        return;
    snprintf(plugin_why, sizeof plugin_why,
             "the CUDA plugin libdlcache_cuda.so was not found (%s%s%s); build dlcache with "
             "the CUDA toolkit (-DDLCACHE_CUDA=ON) or set DLCACHE_CUDA_PLUGIN",
             why1, *why1 ? "; " : "", why2);
}

/* The plugin's table, or NULL with the reason in @p why. */
static const dlc__devops *plugin_get(char *why, size_t cap)
{
    pthread_once(&plugin_once, plugin_load);
    if (!plugin_ops)
        snprintf(why, cap, "%s", plugin_why);
    return plugin_ops;
}

/* Can @p ops run on @p device? DLC_OK; DLC_ENOSYS with the reason (no driver, no GPU);
 * DLC_EINVAL for an ordinal beyond the GPUs present. */
static dlc_status ops_probe(const dlc__devops *ops, int device, char *why, size_t cap)
{
    int count = 0;
    char reason[512] = "";
    const int e = ops->device_count(ops->ctx, &count, reason, sizeof reason);
    if (e) {
        snprintf(why, cap, "%s: cannot count the GPUs: %s", ops->name, ops->errstr(ops->ctx, e));
        return DLC_ENOSYS;
    }
    if (count <= 0) {
        snprintf(why, cap, "%s: no GPU: %s", ops->name, *reason ? reason : "none found");
        return DLC_ENOSYS;
    }
    if (device < 0 || device >= count) {
        snprintf(why, cap, "CUDA device %d does not exist: %d GPU%s (ordinals 0..%d)", device,
                 count, count == 1 ? "" : "s", count - 1);
        return DLC_EINVAL;
    }
    return DLC_OK;
}

dlc_status dlc_cuda_probe(int device, char *why, size_t cap)
{
    char buf[1024];
    const dlc__devops *ops = plugin_get(buf, sizeof buf);
    dlc_status rc = ops ? ops_probe(ops, device, buf, sizeof buf) : DLC_ENOSYS;
    if (rc != DLC_OK) {
        if (why && cap)
            snprintf(why, cap, "%s", buf);
        return dlc__errorf(rc, "%s", buf);
    }
    if (why && cap)
        why[0] = 0;
    return DLC_OK;
}

dlc_status dlc_cuda_copy_ceiling(int device, size_t bytes, uint32_t reps, double *gbps)
{
    if (!gbps || !bytes || !reps)
        return dlc__errorf(DLC_EINVAL, "dlc_cuda_copy_ceiling: bytes, reps and gbps needed");
    const dlc_status rc = dlc_cuda_probe(device, NULL, 0);
    if (rc != DLC_OK)
        return rc;
    const dlc__devops *ops = plugin_ops;
    void *saved = NULL;
    int e = ops->device_enter(ops->ctx, device, &saved);
    if (e)
        return dlc__errorf(DLC_ECUDA, "CUDA device %d: %s", device, ops->errstr(ops->ctx, e));
    double s = 0;
    e = ops->bench_h2d(ops->ctx, bytes, reps, &s);
    ops->device_leave(ops->ctx, saved);
    if (e)
        return dlc__errorf(DLC_ECUDA, "CUDA device %d: copy of %zu bytes: %s", device, bytes,
                           ops->errstr(ops->ctx, e));
    *gbps = s > 0 ? (double)bytes * reps / s * 1e-9 : 0;
    return DLC_OK;
}

/* Run @p op on @p device from the caller's thread, its own context restored after. */
static dlc_status with_device(int device, const char *what, int (*op)(const dlc__devops *, void *),
                              void *arg)
{
    const dlc_status rc = dlc_cuda_probe(device, NULL, 0);
    if (rc != DLC_OK)
        return rc;
    const dlc__devops *ops = plugin_ops;
    void *saved = NULL;
    int e = ops->device_enter(ops->ctx, device, &saved);
    if (!e) {
        e = op(ops, arg);
        ops->device_leave(ops->ctx, saved);
    }
    if (e)
        return dlc__errorf(DLC_ECUDA, "CUDA device %d: %s: %s", device, what,
                           ops->errstr(ops->ctx, e));
    return DLC_OK;
}

typedef struct alloc_arg {
    size_t bytes;
    void **ptr;
} alloc_arg;

static int op_alloc(const dlc__devops *ops, void *arg)
{
    alloc_arg *a = arg;
    return ops->dev_alloc(ops->ctx, a->bytes, a->ptr);
}

static int op_free(const dlc__devops *ops, void *arg)
{
    ops->dev_free(ops->ctx, arg);
    return 0;
}

static int op_sync(const dlc__devops *ops, void *arg)
{
    return ops->stream_sync(ops->ctx, arg);
}

dlc_status dlc_cuda_alloc(int device, size_t bytes, void **ptr)
{
    if (!ptr)
        return dlc__errorf(DLC_EINVAL, "dlc_cuda_alloc: ptr must not be NULL");
    *ptr = NULL;
    alloc_arg a = {bytes ? bytes : 1, ptr};
    return with_device(device, "allocating device memory", op_alloc, &a);
}

void dlc_cuda_free(int device, void *ptr)
{
    if (ptr)
        with_device(device, "freeing device memory", op_free, ptr);
}

dlc_status dlc_cuda_stream_sync(int device, void *stream)
{
    return with_device(device, "waiting for a stream", op_sync, stream);
}

/* ---- Open and close ---------------------------------------------------------------------------
 */

#define DEV_FAIL(e, ...)                                                                           \
    do {                                                                                           \
        char what_[256];                                                                           \
        snprintf(what_, sizeof what_, __VA_ARGS__);                                                \
        rc = dlc__errorf(DLC_ECUDA, "%s: CUDA device %d: %s: %s", l->path, d->device, what_,       \
                         d->ops->errstr(d->ops->ctx, (e)));                                        \
        goto fail;                                                                                 \
    } while (0)

dlc_status dlc__dev_select(dlc_loader *l, const dlc__devops *ops)
{
    const int device = l->cfg.device;
    if (device < 0)
        return DLC_OK;
    char why[1024];
    if (!ops)
        ops = plugin_get(why, sizeof why);
    dlc_status rc = ops ? ops_probe(ops, device, why, sizeof why) : DLC_ENOSYS;
    if (rc == DLC_EINVAL)
        return dlc__errorf(DLC_EINVAL, "%s: config.device: %s", l->path, why);
    if (rc != DLC_OK) {
        /* Off, said once: the loader serves host batches. */
        l->dev_why = strdup(why);
        if (!l->dev_why)
            return dlc__errorf(-ENOMEM, "%s: out of memory", l->path);
        dlc__logf(l->cfg.log, l->cfg.log_user, DLC_LOG_WARN,
                  "%s: the GPU path is off, serving host batches: %s", l->path, why);
        return DLC_OK;
    }
    FAIL_IF(l->cfg.device_staging == 0 || l->cfg.device_staging > MAX_STAGES, DLC_EINVAL,
            "%s: config.device_staging = %u must be in 1..%u", l->path, l->cfg.device_staging,
            MAX_STAGES);
    FAIL_IF(l->cfg.device_layout > DLC_LAYOUT_NONE, DLC_EINVAL,
            "%s: config.device_layout = %u is not a dlc_layout", l->path, l->cfg.device_layout);
    dlc__devpath *d = calloc(1, sizeof *d);
    FAIL_IF(!d, -ENOMEM, "%s: out of memory", l->path);
    d->ops = ops;
    d->ctx = ops->ctx;
    d->device = device;
    d->lent = -1;
    d->dtype = l->cfg.dtype;
    d->layout = l->cfg.device_layout;
    if (d->layout == DLC_LAYOUT_NONE)
        d->layout = d->dtype == DLC_DTYPE_UINT8 ? DLC_LAYOUT_NHWC : DLC_LAYOUT_NCHW;
    l->dev = d;
    /* The workers write uint8 as stored; the conversion is the device's. */
    l->cfg.dtype = DLC_DTYPE_UINT8;
fail:
    return rc;
}

dlc_status dlc__dev_open(dlc_loader *l)
{
    dlc__devpath *d = l->dev;
    if (!d)
        return DLC_OK;
    dlc_status rc = DLC_OK;
    const dlc__devops *ops = d->ops;
    void *saved = NULL;
    int e = ops->device_enter(d->ctx, d->device, &saved);
    if (e) {
        rc = dlc__errorf(DLC_ECUDA, "%s: CUDA device %d: %s", l->path, d->device,
                         ops->errstr(d->ctx, e));
        return rc;
    }
    for (uint32_t i = 0; i < l->nout && d->dtype != DLC_DTYPE_UINT8; i++)
        for (uint32_t c = 0; l->out[i].op == DLC__OUT_IMAGE && c < l->out[i].out_c; c++)
            FAIL_IF(!(l->cfg.std[c] > 0 || l->cfg.std[c] < 0) || l->cfg.mean[c] != l->cfg.mean[c],
                    DLC_EINVAL, "%s: config.std[%u] = %g / mean = %g cannot normalize field \"%s\"",
                    l->path, c, l->cfg.std[c], l->cfg.mean[c], l->out[i].name);
    d->nstage = l->cfg.device_staging;
    d->stages = calloc(d->nstage, sizeof *d->stages);
    FAIL_IF(!d->stages, -ENOMEM, "%s: out of memory", l->path);
    if ((e = ops->stream_create(d->ctx, &d->stream)))
        DEV_FAIL(e, "creating the loader's stream");
    for (uint32_t i = 0; i < d->nstage; i++) {
        dlc__stage *t = &d->stages[i];
        t->meta = malloc(l->arena_meta ? l->arena_meta : 1);
        t->df = calloc(l->nout ? l->nout : 1, sizeof *t->df);
        FAIL_IF(!t->meta || !t->df, -ENOMEM, "%s: out of memory", l->path);
        if ((e = ops->dev_alloc(d->ctx, l->arena_bytes, (void **)&t->dev)))
            DEV_FAIL(e, "allocating a staging buffer of %zu bytes", l->arena_bytes);
        if ((e = ops->event_create(d->ctx, &t->ev_copy)) ||
            (e = ops->event_create(d->ctx, &t->ev_done)))
            DEV_FAIL(e, "creating events");
        if (ops->event_create_timed && ops->event_elapsed_ms &&
            ((e = ops->event_create_timed(d->ctx, &t->ev_t0)) ||
             (e = ops->event_create_timed(d->ctx, &t->ev_t1))))
            DEV_FAIL(e, "creating timed events");
    }
fail:
    ops->device_leave(d->ctx, saved);
    return rc;
}

uint8_t *dlc__dev_host_alloc(dlc_loader *l)
{
    dlc__devpath *d = l->dev;
    void *p = NULL;
    if (!d) {
        p = aligned_alloc(4096, l->arena_bytes);
    } else {
        void *saved = NULL;
        if (d->ops->device_enter(d->ctx, d->device, &saved))
            return NULL;
        const int e = d->ops->host_alloc(d->ctx, l->arena_bytes, &p);
        d->ops->device_leave(d->ctx, saved);
        if (e) {
            dlc__errorf(DLC_ECUDA, "%s: CUDA device %d: page-locking %zu bytes for a slot: %s",
                        l->path, d->device, l->arena_bytes, d->ops->errstr(d->ctx, e));
            return NULL;
        }
    }
    /* The outputs' offsets in the arena are 256-byte aligned (dlc__arena_plan()); the base must be
     * at least as aligned for the outputs to be. */
    assert((uintptr_t)p % 256 == 0);
    if (p)
        memset(p, 0, l->arena_bytes); /* Also faults the pages in now, not in the first epoch. */
    return p;
}

/* Wait on the host until @p stream has run what it was given, so that no buffer its work reads
 * is handed back early. A synchronize that fails may only be reporting an earlier asynchronous
 * error, without having waited (a one-shot error is returned by the next call of any kind, on
 * any thread): the work may still be pending, so it is asked once more. A sticky error fails
 * both, and a device in that state runs nothing more. */
static void drain(const dlc__devops *ops, void *ctx, void *stream)
{
    if (ops->stream_sync(ctx, stream) != 0)
        (void)ops->stream_sync(ctx, stream);
}

void dlc__dev_close(dlc_loader *l)
{
    dlc__devpath *d = l->dev;
    if (!d) {
        for (uint32_t i = 0; l->slots && i < l->nslots; i++)
            free(l->slots[i].arena);
        return;
    }
    const dlc__devops *ops = d->ops;
    void *saved = NULL;
    const int entered = ops->device_enter(d->ctx, d->device, &saved) == 0;
    /* The caller's streams may still read staging buffers (conversions enqueued and not yet
     * run): wait for them, and for the loader's own copies, before freeing anything. A wait
     * that fails is asked once more, as in drain(): it may not have waited. */
    for (uint32_t i = 0; d->stages && i < d->nstage; i++)
        if (d->stages[i].done_recorded && ops->event_sync(d->ctx, d->stages[i].ev_done) != 0)
            (void)ops->event_sync(d->ctx, d->stages[i].ev_done);
    if (d->stream)
        drain(ops, d->ctx, d->stream);
    for (uint32_t i = 0; d->stages && i < d->nstage; i++) {
        dlc__stage *t = &d->stages[i];
        if (t->ev_copy)
            ops->event_destroy(d->ctx, t->ev_copy);
        if (t->ev_done)
            ops->event_destroy(d->ctx, t->ev_done);
        if (t->ev_t0)
            ops->event_destroy(d->ctx, t->ev_t0);
        if (t->ev_t1)
            ops->event_destroy(d->ctx, t->ev_t1);
        if (t->dev)
            ops->dev_free(d->ctx, t->dev);
        free(t->meta);
        free(t->df);
    }
    free(d->stages);
    if (d->stream)
        ops->stream_destroy(d->ctx, d->stream);
    for (uint32_t i = 0; l->slots && i < l->nslots; i++)
        if (l->slots[i].arena)
            ops->host_free(d->ctx, l->slots[i].arena);
    if (entered)
        ops->device_leave(d->ctx, saved);
    free(d);
    l->dev = NULL;
}

/* ---- The copy thread --------------------------------------------------------------------------
 */

/* The device description of slot @p s's outputs, staged in @p t. Called by the copy thread. */
static void stage_describe(dlc_loader *l, dlc__slot *s, dlc__stage *t)
{
    const dlc__devpath *d = l->dev;
    assert(s->count >= 1 && s->count <= l->cfg.batch_size);
    dlc_batch hb;
    memset(&hb, 0, sizeof hb);
    dlc__outputs_describe(l, s, &hb);
    memcpy(t->meta, s->arena, l->arena_meta);
    for (uint32_t i = 0; i < l->nout; i++) {
        const dlc__output *o = &l->out[i];
        const dlc_batch_field *bf = &s->bf[i];
        dlc_device_field *f = &t->df[i];
        memset(f, 0, sizeof *f);
        f->name = bf->name;
        f->field = bf->field;
        f->kind = bf->kind;
        f->dtype = bf->dtype;
        f->layout = bf->layout;
        f->ndim = bf->ndim;
        memcpy(f->shape, bf->shape, sizeof f->shape);
        f->bytes = bf->bytes;
        assert(o->arena_data + bf->bytes <= l->arena_bytes);
        f->staged = t->dev + o->arena_data;
        f->staged_bytes = bf->bytes;
        if (bf->lengths) {
            f->lengths = (const int64_t *)(t->meta + o->arena_lengths);
            f->staged_lengths = (const int64_t *)(t->dev + o->arena_lengths);
        }
        if (bf->offsets) {
            f->offsets = (const int64_t *)(t->meta + o->arena_offsets);
            f->staged_offsets = (const int64_t *)(t->dev + o->arena_offsets);
        }
        if (o->op != DLC__OUT_IMAGE)
            continue;
        /* [N, (views,) H, W, C] as copied, written as the configured dtype and layout. */
        f->dtype = d->dtype;
        f->layout = d->layout;
        f->bytes = bf->bytes * dlc_dtype_size(d->dtype); /* Staged as one byte an element. */
        if (d->layout == DLC_LAYOUT_NCHW) {
            const uint32_t h = f->ndim - 3; /* Index of H in the NHWC shape. */
            f->shape[h] = o->out_c;
            f->shape[h + 1] = o->out_h;
            f->shape[h + 2] = o->out_w;
        }
    }
    t->count = s->count;
    t->epoch = s->epoch;
}

/* Issue the copy of slot @p s into stage @p t on the loader's stream. 0 or a backend code, with
 * what failed in @p what. */
static int stage_copy(dlc_loader *l, const dlc__slot *s, dlc__stage *t, const char **what)
{
    dlc__devpath *d = l->dev;
    const dlc__devops *ops = d->ops;
    int e = 0;
    *what = "waiting for the staging buffer's release";
    if (t->done_recorded && (e = ops->stream_wait(d->ctx, d->stream, t->ev_done)))
        return e;
    /* The copies' own time: from the stream reaching them (after the wait above) to their end. */
    t->timed = 0;
    *what = "recording the copy's timed events";
    if (t->ev_t0 && (e = ops->event_record(d->ctx, t->ev_t0, d->stream)))
        return e;
    /* The used ranges of the arena in order: the small arrays, then each output's data. */
    size_t lo = 0, hi = l->arena_meta;
    uint64_t bytes = 0;
    *what = "copying a batch to the device";
    for (uint32_t i = 0; i <= l->nout; i++) {
        size_t a = SIZE_MAX, b = 0;
        if (i < l->nout) {
            a = l->out[i].arena_data;
            b = a + s->bf[i].bytes;
            if (b == a)
                continue;
            if (a <= hi + MERGE_GAP) {
                hi = b;
                continue;
            }
        }
        if (hi > lo) {
            /* Ranges in order, inside the arena, that of the small arrays first. */
            assert(hi <= l->arena_bytes && (lo == 0 || lo >= l->arena_meta));
            if ((e = ops->copy_h2d(d->ctx, t->dev + lo, s->arena + lo, hi - lo, d->stream)))
                return e;
            bytes += hi - lo;
        }
        lo = a, hi = b;
    }
    *what = "recording the copy's timed events";
    if (t->ev_t1 && (e = ops->event_record(d->ctx, t->ev_t1, d->stream)))
        return e;
    t->timed = t->ev_t0 && t->ev_t1;
    *what = "recording the copy's event";
    if ((e = ops->event_record(d->ctx, t->ev_copy, d->stream)))
        return e;
    atomic_fetch_add_explicit(&d->bytes, bytes, memory_order_relaxed);
    return 0;
}

/* The next READY slot in order whose staging buffer is free, or NULL; under mu. */
static dlc__slot *copy_next(dlc_loader *l, dlc__stage **tp)
{
    dlc__devpath *d = l->dev;
    if (l->paused || d->up_next >= l->shard.batches)
        return NULL;
    dlc__slot *s = &l->slots[dlc__slot_of(l, d->up_next)];
    dlc__stage *t = &d->stages[d->up_next % d->nstage];
    if (s->state != DLC__SLOT_READY || s->batch != d->up_next || t->state != STAGE_FREE)
        return NULL;
    /* The copy thread follows the I/O thread and stays ahead of the consumer. */
    assert(d->up_next < l->fill_next && l->cons_next <= d->up_next);
    *tp = t;
    return s;
}

static void *copy_main(void *arg)
{
    dlc_loader *l = arg;
    dlc__devpath *d = l->dev;
    const dlc__devops *ops = d->ops;
    /* This thread's CUDA calls go to the loader's GPU, never to a context made on GPU 0. */
    const int set = ops->set_device(d->ctx, d->device);
    pthread_mutex_lock(&l->mu);
    for (;;) {
        dlc__slot *s = NULL;
        dlc__stage *t = NULL;
        const uint64_t t_wait = dlc__now_ns();
        while (!l->stop && !(s = copy_next(l, &t)))
            pthread_cond_wait(&l->cv_done, &l->mu);
        const uint64_t t_busy = dlc__now_ns();
        dlc__cnt_add(&l->copy_idle, t_busy - t_wait);
        if (l->stop)
            break;
        const uint64_t b = d->up_next;
        assert(!d->up_busy);
        d->up_busy = 1;
        assert(t->state == STAGE_FREE);
        pthread_mutex_unlock(&l->mu);

        const char *what = "making the loader's GPU current on its copy thread";
        int e = set;
        t->err = s->err;
        if (s->err != DLC_OK) {
            snprintf(t->errmsg, sizeof t->errmsg, "%s", s->errmsg);
        } else {
            /* The description first: the copy's ranges are the outputs' used bytes. */
            stage_describe(l, s, t);
            if (e == 0)
                e = stage_copy(l, s, t, &what);
        }
        if (s->err == DLC_OK && e) {
            t->err = DLC_ECUDA;
            snprintf(t->errmsg, sizeof t->errmsg, "%s: CUDA device %d: %s: %s", l->path, d->device,
                     what, ops->errstr(d->ctx, e));
            /* Part of the copy may have been issued before the failure: the slot must not be
             * refilled while it can still be read. */
            drain(ops, d->ctx, d->stream);
        }
        const uint64_t t0 = dlc__now_ns();

        pthread_mutex_lock(&l->mu);
        /* A reset waits while the copy thread is busy, and the consumer takes only STAGED
         * stages: stage, slot and counter are as this thread left them. */
        assert(d->up_busy && d->up_next == b && t->state == STAGE_FREE);
        t->state = STAGE_STAGED; /* FREE -> STAGED */
        t->batch = b;
        t->waited = 0;
        d->up_next++;
        pthread_cond_broadcast(&l->cv_done);
        pthread_mutex_unlock(&l->mu);

        /* The slot goes back to the I/O thread only once the copy has read it. */
        if (t->err == DLC_OK && (e = ops->event_sync(d->ctx, t->ev_copy))) {
            /* A failed event_sync need not have waited for the copy (it may be reporting
             * another call's asynchronous error): wait for the stream before the slot is
             * refilled under a copy that still reads it. */
            drain(ops, d->ctx, d->stream);
            pthread_mutex_lock(&l->mu);
            if (d->async_err == DLC_OK) {
                d->async_err = DLC_ECUDA;
                snprintf(d->async_msg, sizeof d->async_msg,
                         "%s: CUDA device %d: the copy of batch %llu failed on the device: %s",
                         l->path, d->device, (unsigned long long)b, ops->errstr(d->ctx, e));
            }
            pthread_mutex_unlock(&l->mu);
        }
        const uint64_t t_end = dlc__now_ns();
        atomic_fetch_add_explicit(&d->copy_ns, t_end - t0, memory_order_relaxed);
        /* ev_t1 precedes ev_copy on the loader's stream: complete once ev_copy is. */
        float ms = 0;
        if (t->err == DLC_OK && !e && t->timed &&
            ops->event_elapsed_ms(d->ctx, t->ev_t0, t->ev_t1, &ms) == 0 && ms > 0)
            atomic_fetch_add_explicit(&d->copy_event_ns, (uint64_t)((double)ms * 1e6),
                                      memory_order_relaxed);
        dlc__cnt_add(&l->copy_busy, t_end - t_busy);
        if (l->trace)
            dlc__trace_span(l, DLC__TRACK_COPY, DLC__SPAN_COPY, s->epoch, l->batch_base + b, t_busy,
                            t_end);

        pthread_mutex_lock(&l->mu);
        assert(s->state == DLC__SLOT_READY && s->batch == b && d->up_busy);
        s->state = DLC__SLOT_FREE; /* The device path's READY -> FREE. */
        d->up_busy = 0;
        pthread_cond_broadcast(&l->cv_io);
        pthread_cond_broadcast(&l->cv_done);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

dlc_status dlc__dev_start(dlc_loader *l)
{
    dlc__devpath *d = l->dev;
    if (!d)
        return DLC_OK;
    const int prc = pthread_create(&d->thread, NULL, copy_main, l);
    if (prc)
        return dlc__errorf(-prc, "%s: cannot start the copy thread: %s", l->path, strerror(prc));
    d->started = 1;
    return DLC_OK;
}

void dlc__dev_join(dlc_loader *l)
{
    dlc__devpath *d = l->dev;
    if (d && d->started) {
        pthread_join(d->thread, NULL);
        d->started = 0;
    }
}

/* ---- The consumer -----------------------------------------------------------------------------
 */

/* Give back stage @p i, ordered after the work enqueued on @p stream (NULL: none read it), and
 * wake the copy thread; under mu. Returns 0 or a backend code. */
static int stage_release_locked(dlc_loader *l, uint32_t i, void *stream, int have_stream)
{
    dlc__devpath *d = l->dev;
    dlc__stage *t = &d->stages[i];
    int e = 0;
    if (have_stream) {
        void *saved = NULL;
        e = d->ops->device_enter(d->ctx, d->device, &saved);
        if (!e) {
            e = d->ops->event_record(d->ctx, t->ev_done, stream);
            if (e) /* Nothing orders the next copy after the reader: wait for it here. */
                drain(d->ops, d->ctx, stream);
            else
                t->done_recorded = 1;
            d->ops->device_leave(d->ctx, saved);
        }
    }
    assert(t->state == STAGE_LENT && d->lent == (int)i);
    t->state = STAGE_FREE; /* LENT -> FREE */
    t->waited = 0;
    d->lent = -1;
    pthread_cond_broadcast(&l->cv_done);
    return e;
}

int dlc__dev_busy_locked(const dlc_loader *l)
{
    return l->dev && l->dev->up_busy;
}

void dlc__dev_reset_locked(dlc_loader *l)
{
    dlc__devpath *d = l->dev;
    if (!d)
        return;
    assert(!d->up_busy);
    if (d->lent >= 0) {
        const dlc__stage *t = &d->stages[d->lent];
        stage_release_locked(l, (uint32_t)d->lent, t->wait_stream, t->waited);
    }
    /* Staged batches of the old plan are dropped; their copies were ordered on the loader's
     * stream, so the next copy into the same buffer comes after them. */
    assert(d->lent < 0);
    for (uint32_t i = 0; i < d->nstage; i++)
        d->stages[i].state = STAGE_FREE;
    d->up_next = 0;
}

/* The stage lent as @p b, or -1. */

static dlc_status device_off(const dlc_loader *l)
{
    return dlc__errorf(DLC_ESTATE, "%s: the device path is off: %s", l->path,
                       l->dev_why ? l->dev_why : "config.device is -1");
}

/* The stage lent as @p b, or -1 with the error in *rc: the device path off, or @p b not the batch
 * lent (@p verb says what the caller did with it). The one check of emit, wait and release. */
static int lent_stage(dlc_loader *l, const dlc_device_batch *b, const char *verb, dlc_status *rc)
{
    const dlc__devpath *d = l ? l->dev : NULL;
    if (!l)
        *rc = dlc__errorf(DLC_EINVAL, "loader: NULL loader");
    else if (!d)
        *rc = device_off(l);
    else if (d->lent < 0 || !b || b->fields != d->stages[d->lent].df)
        *rc = dlc__errorf(DLC_EINVAL, "%s: the device batch %s is not the one lent", l->path, verb);
    else
        return d->lent;
    return -1;
}

/* dlc_loader_next_device() (@p wait_ns UINT64_MAX) and dlc_loader_next_device_wait() (@p name
 * says which). */
static dlc_status next_device(dlc_loader *l, dlc_device_batch *batch, uint64_t wait_ns,
                              const char *name)
{
    if (!l || !batch)
        return dlc__errorf(DLC_EINVAL, "loader: %s() needs a loader and a batch", name);
    memset(batch, 0, sizeof *batch);
    dlc__devpath *d = l->dev;
    if (!d)
        return device_off(l);
    const uint64_t t_in = dlc__now_ns();
    const uint64_t deadline = dlc__next_deadline(t_in, wait_ns);
    pthread_mutex_lock(&l->mu);
    int e = 0;
    if (d->lent >= 0) {
        const dlc__stage *lt = &d->stages[d->lent];
        e = stage_release_locked(l, (uint32_t)d->lent, lt->wait_stream, lt->waited);
    }
    if (e || d->async_err != DLC_OK) {
        char msg[600];
        if (e)
            snprintf(msg, sizeof msg, "%s: CUDA device %d: releasing the batch lent before: %s",
                     l->path, d->device, d->ops->errstr(d->ctx, e));
        else
            snprintf(msg, sizeof msg, "%s", d->async_msg);
        d->async_err = DLC_OK;
        pthread_mutex_unlock(&l->mu);
        dlc__report_consumer(l, t_in, dlc__now_ns(), 0);
        return dlc__errorf(DLC_ECUDA, "%s", msg);
    }
    if (l->cons_next >= l->shard.batches) {
        pthread_mutex_unlock(&l->mu);
        dlc__epoch_end(l);
        dlc__report_consumer(l, t_in, dlc__now_ns(), 0);
        return DLC_END;
    }
    const uint64_t b = l->cons_next;
    const uint32_t ti = (uint32_t)(b % d->nstage);
    dlc__stage *t = &d->stages[ti];
    if (!(t->state == STAGE_STAGED && t->batch == b)) {
        const uint64_t t0 = dlc__now_ns();
        while (!(t->state == STAGE_STAGED && t->batch == b) && dlc__done_wait(l, deadline))
            ;
        atomic_fetch_add_explicit(&l->st_wait_ns, dlc__now_ns() - t0, memory_order_relaxed);
        if (!(t->state == STAGE_STAGED && t->batch == b)) {
            /* Not yet: the batch lent before is given back, nothing else changed. */
            pthread_mutex_unlock(&l->mu);
            dlc__report_pending(l, t_in);
            return DLC_AGAIN;
        }
    }
    /* The copy thread staged batch b; it was released above, or never lent. */
    assert(b < d->up_next && d->lent < 0);
    l->cons_next++;
    if (t->err != DLC_OK) {
        const dlc_status err = t->err;
        dlc__errorf(err, "%s", t->errmsg);
        t->state = STAGE_FREE; /* STAGED -> FREE: a failed batch is never lent. */
        pthread_cond_broadcast(&l->cv_done);
        pthread_cond_broadcast(&l->cv_io); /* The I/O thread may hold for it (io_hold). */
        pthread_mutex_unlock(&l->mu);
        dlc__report_consumer(l, t_in, dlc__now_ns(), 0);
        return err;
    }
    assert(t->count >= 1 && t->count <= l->cfg.batch_size);
    t->state = STAGE_LENT; /* STAGED -> LENT */
    d->lent = (int)ti;
    pthread_mutex_unlock(&l->mu);

    batch->count = t->count;
    batch->device = d->device;
    batch->epoch = t->epoch;
    batch->batch_index = l->batch_base + b;
    batch->labels = (const int64_t *)(t->meta + l->arena_labels);
    batch->indices = (const uint64_t *)(t->meta + l->arena_indices);
    batch->staged_labels = (const int64_t *)(t->dev + l->arena_labels);
    batch->staged_indices = (const uint64_t *)(t->dev + l->arena_indices);
    batch->ready_event = t->ev_copy;
    batch->num_fields = l->nout;
    batch->fields = t->df;
    atomic_fetch_add_explicit(&l->st_batches, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->st_samples, t->count, memory_order_relaxed);
    dlc__report_consumer(l, t_in, dlc__now_ns(), 1);
    return DLC_OK;
}

dlc_status dlc_loader_next_device(dlc_loader *l, dlc_device_batch *batch)
{
    return next_device(l, batch, UINT64_MAX, "dlc_loader_next_device");
}

dlc_status dlc_loader_next_device_wait(dlc_loader *l, dlc_device_batch *batch, uint32_t timeout_ms)
{
    return next_device(l, batch, (uint64_t)timeout_ms * 1000000u, "dlc_loader_next_device_wait");
}

/* Enqueue output @p i of stage @p t into @p dst on @p stream. */
static int emit_one(dlc_loader *l, const dlc__stage *t, uint32_t i, const dlc_device_dst *dst,
                    void *stream, const char **what)
{
    const dlc__devpath *d = l->dev;
    const dlc__devops *ops = d->ops;
    const dlc__output *o = &l->out[i];
    const dlc_device_field *f = &t->df[i];
    int e = 0;
    if (dst->data && f->bytes) {
        if (o->op == DLC__OUT_IMAGE &&
            !(d->dtype == DLC_DTYPE_UINT8 && d->layout == DLC_LAYOUT_NHWC)) {
            dlc__hd_conv cv;
            memset(&cv, 0, sizeof cv);
            cv.src = f->staged;
            cv.dst = dst->data;
            const size_t view = (size_t)o->out_h * o->out_w * o->out_c;
            assert(view && f->staged_bytes % view == 0); /* Whole views of uint8, as staged. */
            cv.n = f->staged_bytes / view;
            cv.h = o->out_h;
            cv.w = o->out_w;
            cv.c = o->out_c;
            cv.dtype = d->dtype;
            cv.layout = d->layout == DLC_LAYOUT_NCHW ? DLC__HD_NCHW : DLC__HD_NHWC;
            for (uint32_t c = 0; c < o->out_c && c < 4; c++) {
                cv.mean[c] = l->cfg.mean[c];
                cv.std[c] = l->cfg.std[c];
            }
            *what = "converting an image output";
            e = ops->convert(d->ctx, &cv, stream);
            const dlc__group *gr = &l->groups[o->group];
            if (!e && l->erase_dev && gr->erase_p > 0 && d->dtype != DLC_DTYPE_UINT8) {
                /* RandomErasing after the conversion and before the mixing, as on the host
                 * (per sample in the worker, then per batch): the boxes the workers drew, staged
                 * with the batch's small arrays. */
                dlc__hd_erase er;
                memset(&er, 0, sizeof er);
                er.data = dst->data;
                er.boxes = (const dlc__hd_erase_box *)(t->dev + l->arena_erase) + gr->first;
                er.n = cv.n;
                er.h = cv.h, er.w = cv.w, er.c = cv.c;
                er.dtype = cv.dtype;
                er.layout = cv.layout;
                er.value = gr->erase_value == DLC_ERASE_NOISE      ? DLC__HD_ERASE_NOISE
                           : gr->erase_value == DLC_ERASE_CONSTANT ? DLC__HD_ERASE_CONSTANT
                                                                   : DLC__HD_ERASE_ZERO;
                er.per = gr->count;
                er.stride = l->nviews;
                for (uint32_t c = 0; c < o->out_c && c < 4; c++)
                    er.constant[c] = gr->erase_constant[c];
                *what = "erasing an image output (RandomErasing)";
                e = ops->erase(d->ctx, &er, stream);
            }
            if (!e && l->ba.mixing && d->dtype != DLC_DTYPE_UINT8) {
                /* The batch's draw, as the host path makes it (batchaug.c), then the same
                 * arithmetic on the device, after the conversion on the same stream. */
                dlc_mixup_params p;
                dlc__mixup_draw(l, l->sampler.seed, t->epoch, l->batch_base + t->batch, cv.h, cv.w,
                                &p);
                if (p.mode) {
                    dlc__hd_mix mx;
                    memset(&mx, 0, sizeof mx);
                    mx.data = dst->data;
                    mx.n = cv.n;
                    mx.h = cv.h, mx.w = cv.w, mx.c = cv.c;
                    mx.dtype = cv.dtype;
                    mx.layout = cv.layout;
                    mx.mode = p.mode == 1 ? DLC__HD_MIXUP : DLC__HD_CUTMIX;
                    mx.lam = (float)p.lam;
                    mx.oml = (float)(1.0 - p.lam);
                    mx.y0 = p.box[0], mx.y1 = p.box[1], mx.x0 = p.box[2], mx.x1 = p.box[3];
                    *what = "mixing an image output (MixUp / CutMix)";
                    e = ops->mix(d->ctx, &mx, stream);
                }
            }
        } else {
            *what = "copying an output";
            e = ops->copy_d2d(d->ctx, dst->data, f->staged, f->bytes, stream);
        }
    }
    if (!e && dst->lengths && f->staged_lengths) {
        *what = "copying lengths";
        e = ops->copy_d2d(d->ctx, dst->lengths, f->staged_lengths, t->count * sizeof(int64_t),
                          stream);
    }
    if (!e && dst->offsets && f->staged_offsets) {
        *what = "copying offsets";
        e = ops->copy_d2d(d->ctx, dst->offsets, f->staged_offsets,
                          ((size_t)t->count + 1) * sizeof(int64_t), stream);
    }
    return e;
}

dlc_status dlc_loader_device_emit(dlc_loader *l, const dlc_device_batch *batch, void *stream,
                                  const dlc_device_dst *dst, void *indices)
{
    dlc_status rc = DLC_OK;
    const int ti = lent_stage(l, batch, "emitted", &rc);
    if (ti < 0)
        return rc;
    if (!dst && batch->num_fields)
        return dlc__errorf(DLC_EINVAL, "%s: dlc_loader_device_emit() needs %u destinations",
                           l->path, batch->num_fields);
    dlc__devpath *d = l->dev;
    const dlc__devops *ops = d->ops;
    const dlc__stage *t = &d->stages[ti];
    void *saved = NULL;
    const char *what = "making the loader's GPU current";
    int e = ops->device_enter(d->ctx, d->device, &saved);
    const int entered = e == 0;
    if (!e) {
        what = "waiting for the batch's copy";
        e = ops->stream_wait(d->ctx, stream, t->ev_copy);
    }
    for (uint32_t i = 0; !e && i < l->nout; i++)
        e = emit_one(l, t, i, &dst[i], stream, &what);
    if (!e && indices) {
        what = "copying the record numbers";
        e = ops->copy_d2d(d->ctx, indices, batch->staged_indices, t->count * sizeof(uint64_t),
                          stream);
    }
    if (entered)
        ops->device_leave(d->ctx, saved);
    pthread_mutex_lock(&l->mu);
    int er = 0;
    if (e) {
        /* What was enqueued may still read the staging buffer: wait for it on the host. */
        if (entered && !ops->device_enter(d->ctx, d->device, &saved)) {
            drain(ops, d->ctx, stream);
            ops->device_leave(d->ctx, saved);
        }
        stage_release_locked(l, (uint32_t)ti, NULL, 0);
    } else {
        er = stage_release_locked(l, (uint32_t)ti, stream, 1);
        what = "recording the release";
    }
    pthread_mutex_unlock(&l->mu);
    if (e || er)
        return dlc__errorf(DLC_ECUDA, "%s: CUDA device %d: %s: %s", l->path, d->device, what,
                           ops->errstr(d->ctx, e ? e : er));
    return DLC_OK;
}

dlc_status dlc_loader_device_wait(dlc_loader *l, const dlc_device_batch *batch, void *stream)
{
    dlc_status rc = DLC_OK;
    const int ti = lent_stage(l, batch, "waited on", &rc);
    if (ti < 0)
        return rc;
    dlc__devpath *d = l->dev;
    dlc__stage *t = &d->stages[ti];
    void *saved = NULL;
    int e = d->ops->device_enter(d->ctx, d->device, &saved);
    if (!e) {
        e = d->ops->stream_wait(d->ctx, stream, t->ev_copy);
        d->ops->device_leave(d->ctx, saved);
    }
    if (e)
        return dlc__errorf(DLC_ECUDA, "%s: CUDA device %d: waiting for the batch's copy: %s",
                           l->path, d->device, d->ops->errstr(d->ctx, e));
    t->wait_stream = stream;
    t->waited = 1;
    return DLC_OK;
}

dlc_status dlc_loader_device_release(dlc_loader *l, const dlc_device_batch *batch, void *stream)
{
    dlc_status rc = DLC_OK;
    const int ti = lent_stage(l, batch, "released", &rc);
    if (ti < 0)
        return rc;
    dlc__devpath *d = l->dev;
    const dlc__stage *t = &d->stages[ti];
    /* A stream given to wait read the buffer even when release names none. */
    void *s = stream ? stream : t->wait_stream;
    const int have = stream != NULL || t->waited;
    pthread_mutex_lock(&l->mu);
    const int e = stage_release_locked(l, (uint32_t)ti, s, have);
    pthread_mutex_unlock(&l->mu);
    if (e)
        return dlc__errorf(DLC_ECUDA, "%s: CUDA device %d: recording the release: %s", l->path,
                           d->device, d->ops->errstr(d->ctx, e));
    return DLC_OK;
}

int dlc_loader_device(const dlc_loader *l, const char **why)
{
    if (why)
        *why = l && !l->dev ? (l->dev_why ? l->dev_why : "config.device is -1") : NULL;
    return l && l->dev ? l->dev->device : -1;
}

uint32_t dlc_loader_host_slots(const dlc_loader *l, void **bases, size_t *sizes, uint32_t cap)
{
    if (!l)
        return 0;
    for (uint32_t i = 0; i < l->nslots && i < cap; i++) {
        if (bases)
            bases[i] = l->slots[i].arena;
        if (sizes)
            sizes[i] = l->arena_bytes;
    }
    return l->nslots;
}

uint32_t dlc__dev_dtype(const dlc_loader *l)
{
    return l->dev ? l->dev->dtype : l->cfg.dtype;
}

void dlc__dev_stats(const dlc_loader *l, dlc_loader_stats *st)
{
    dlc__devpath *d = l->dev;
    st->device = d ? d->device : -1;
    if (!d)
        return;
    st->device_bytes = atomic_load(&d->bytes);
    st->device_copy_seconds = (double)atomic_load(&d->copy_ns) * 1e-9;
}

double dlc_loader_device_copy_event_seconds(const dlc_loader *l)
{
    const dlc__devpath *d = l ? l->dev : NULL;
    return d ? (double)atomic_load(&d->copy_event_ns) * 1e-9 : 0.0;
}
