/* The CUDA plugin, libdlcache_cuda.so (loader/cuda/plugin.cu), through its one export as the
 * library sees it: dlopen, never a link to CUDA. $DLCACHE_CUDA_PLUGIN, when set, names the file
 * (as for the library: a bundle moved to another machine points it at its own copy); else
 * cmake/cuda.cmake passes the built file as DLC_TEST_CUDA_PLUGIN; without either every test
 * skips with the reason. On a machine without a GPU
 * or a driver, the table and device_count's reason are checked and the GPU tests skip with that
 * reason. With a GPU: the conversion kernel against dlc__hd_convert_at() byte for byte, copies
 * ordered through events, device_enter/device_leave against the driver's own view of the current
 * context, and the copy benchmark. Device memory is read back with the driver's cuMemcpyDtoH
 * (libcuda.so.1, opened here too), since the table has no device-to-host copy. The MixUp /
 * CutMix kernel likewise against dlc__hd_mix_at(), the RandomErasing kernel against
 * dlc__hd_erase_at() (its noise included), and the bfloat16 conversion. */
#include "device.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef DLC_TEST_CUDA_PLUGIN_WHY
#define DLC_TEST_CUDA_PLUGIN_WHY "cmake/cuda.cmake did not say why"
#endif

/* The plugin's file: $DLCACHE_CUDA_PLUGIN first, as the library looks there first too, then the
 * one this build made; or a skip saying why there is none. */
static const char *plugin_path(void)
{
    const char *env = getenv("DLCACHE_CUDA_PLUGIN");
    if (env && *env)
        return env;
#ifdef DLC_TEST_CUDA_PLUGIN
    return DLC_TEST_CUDA_PLUGIN;
#else
    cr_skip_test("the CUDA plugin is not built (%s) and DLCACHE_CUDA_PLUGIN is not set",
                 DLC_TEST_CUDA_PLUGIN_WHY);
    return NULL;
#endif
}

/* The plugin's export, from a handle that is never closed: a statically linked CUDA runtime is
 * not meant to be unloaded. */
static dlc__devops_fn plugin_fn(void)
{
    const char *path = plugin_path();
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(lib, "dlopen(%s): %s", path, dlerror());
    const dlc__devops_fn fn = (dlc__devops_fn)dlsym(lib, DLC__DEVOPS_SYMBOL);
    cr_assert_not_null(fn, "%s does not export %s", path, DLC__DEVOPS_SYMBOL);
    return fn;
}

/* The plugin's table; its ABI and layout are checked by table_is_exported. */
static const dlc__devops *plugin(void)
{
    const dlc__devops *ops = plugin_fn()(DLC__DEVOPS_ABI);
    cr_assert_not_null(ops, "the plugin refused ABI %u", DLC__DEVOPS_ABI);
    return ops;
}

/* The driver's calls that the test reads the device through (CUresult is an int, CUcontext and
 * CUdeviceptr as the driver's headers define them). */
typedef struct cu_driver {
    int (*ctx_get)(void **ctx);
    int (*dtoh)(void *dst, unsigned long long src, size_t bytes);
} cu_driver;

/* The plugin with at least one GPU, device 0 current on this thread, and the driver's calls; or
 * a skip saying why there is no GPU. */
static const dlc__devops *gpu(cu_driver *drv)
{
    const dlc__devops *ops = plugin();
    int count = -1;
    char why[512] = "";
    cr_assert_eq(ops->device_count(ops->ctx, &count, why, sizeof why), 0);
    if (count == 0)
        cr_skip_test("no GPU: %s", why);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(cuda, "a GPU is there but not libcuda.so.1: %s", dlerror());
    drv->ctx_get = (int (*)(void **))dlsym(cuda, "cuCtxGetCurrent");
    drv->dtoh = (int (*)(void *, unsigned long long, size_t))dlsym(cuda, "cuMemcpyDtoH_v2");
    cr_assert(drv->ctx_get != NULL && drv->dtoh != NULL);
    const int rc = ops->set_device(ops->ctx, 0);
    cr_assert_eq(rc, 0, "set_device(0): %s", ops->errstr(ops->ctx, rc));
    return ops;
}

#define CHECK_OP(ops, call)                                                                        \
    do {                                                                                           \
        const int rc_ = (call);                                                                    \
        cr_assert_eq(rc_, 0, "%s: %s", #call, (ops)->errstr((ops)->ctx, rc_));                     \
    } while (0)

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

Test(cuda_plugin, table_is_exported)
{
    const dlc__devops *ops = plugin();
    const dlc__devops_fn fn = plugin_fn();
    cr_assert_null(fn(DLC__DEVOPS_ABI + 1), "a table for another ABI");
    cr_assert_null(fn(0), "a table for ABI 0");
    cr_assert_eq(fn(DLC__DEVOPS_ABI), ops, "one table, made once");
    cr_assert_eq(ops->abi, DLC__DEVOPS_ABI);
    cr_assert_eq(ops->size, sizeof(dlc__devops));
    cr_assert_null(ops->ctx);
    cr_assert_not_null(ops->name);
    cr_assert_eq(strncmp(ops->name, "cuda ", 5), 0, "name \"%s\"", ops->name);
    cr_log_info("plugin: %s", ops->name);
    const void *const fns[] = {
        (void *)ops->errstr,
        (void *)ops->device_count,
        (void *)ops->set_device,
        (void *)ops->device_enter,
        (void *)ops->device_leave,
        (void *)ops->host_alloc,
        (void *)ops->host_free,
        (void *)ops->dev_alloc,
        (void *)ops->dev_free,
        (void *)ops->stream_create,
        (void *)ops->stream_destroy,
        (void *)ops->stream_sync,
        (void *)ops->event_create,
        (void *)ops->event_destroy,
        (void *)ops->event_record,
        (void *)ops->stream_wait,
        (void *)ops->event_query,
        (void *)ops->event_sync,
        (void *)ops->copy_h2d,
        (void *)ops->copy_d2d,
        (void *)ops->convert,
        (void *)ops->bench_h2d,
        (void *)ops->mix,
        (void *)ops->erase,
    };
    for (size_t k = 0; k < sizeof fns / sizeof *fns; k++)
        cr_assert_not_null(fns[k], "operation %zu is missing", k);
    cr_assert_str_not_empty(ops->errstr(ops->ctx, 1));
}

Test(cuda_plugin, device_count_answers_or_says_why)
{
    const dlc__devops *ops = plugin();
    int count = -1;
    char why[512];
    memset(why, 'x', sizeof why);
    why[0] = '\0';
    cr_assert_eq(ops->device_count(ops->ctx, &count, why, sizeof why), 0);
    cr_assert_geq(count, 0);
    if (count == 0) {
        cr_assert_str_not_empty(why, "no device and no reason");
        cr_assert_lt(strlen(why), sizeof why);
        cr_log_info("no GPU: %s", why);
        /* The reason is optional for the caller, and fits any buffer it gives. */
        char small[8];
        count = -1;
        cr_assert_eq(ops->device_count(ops->ctx, &count, small, sizeof small), 0);
        cr_assert_eq(count, 0);
        cr_assert_lt(strlen(small), sizeof small);
        cr_assert_eq(ops->device_count(ops->ctx, &count, NULL, 0), 0);
    } else {
        cr_log_info("%d GPU(s)", count);
    }
}

/* One conversion on the device against dlc__hd_convert_at() on the CPU, byte for byte. */
static void check_convert(const dlc__devops *ops, const cu_driver *drv, void *stream, uint64_t n,
                          uint32_t h, uint32_t w, uint32_t c, uint32_t dtype, uint32_t layout,
                          const float mean[4], const float std[4], uint64_t seed)
{
    static const size_t esize[] = {1, 4, 2, 0, 0, 0, 0, 0, 0, 2}; /* By dtype (9: bfloat16). */
    const size_t elements = (size_t)n * h * w * c, bytes = elements * esize[dtype];
    uint8_t *src = malloc(elements + 1), *want = malloc(bytes + 1), *got = malloc(bytes + 1);
    cr_assert(src != NULL && want != NULL && got != NULL);
    for (size_t i = 0; i < elements; i++)
        src[i] = (uint8_t)(xorshift(&seed) >> 32);
    dlc__hd_conv cv = {
        .src = src, .dst = want, .n = n, .h = h, .w = w, .c = c, .dtype = dtype, .layout = layout};
    memcpy(cv.mean, mean, sizeof cv.mean);
    memcpy(cv.std, std, sizeof cv.std);
    for (uint64_t i = 0; i < elements; i++)
        dlc__hd_convert_at(&cv, i);

    void *pinned = NULL, *dsrc = NULL, *ddst = NULL;
    CHECK_OP(ops, ops->host_alloc(ops->ctx, elements + 1, &pinned));
    CHECK_OP(ops, ops->dev_alloc(ops->ctx, elements + 1, &dsrc));
    CHECK_OP(ops, ops->dev_alloc(ops->ctx, bytes + 1, &ddst));
    memcpy(pinned, src, elements);
    CHECK_OP(ops, ops->copy_h2d(ops->ctx, dsrc, pinned, elements, stream));
    cv.src = dsrc;
    cv.dst = ddst;
    CHECK_OP(ops, ops->convert(ops->ctx, &cv, stream));
    CHECK_OP(ops, ops->stream_sync(ops->ctx, stream));
    cr_assert_eq(drv->dtoh(got, (unsigned long long)(uintptr_t)ddst, bytes), 0);
    if (memcmp(got, want, bytes) != 0) {
        size_t i = 0;
        while (memcmp(got + i * esize[dtype], want + i * esize[dtype], esize[dtype]) == 0)
            i++;
        cr_assert_fail("n=%llu h=%u w=%u c=%u dtype=%u layout=%u: element %zu of %zu differs",
                       (unsigned long long)n, h, w, c, dtype, layout, i, elements);
    }
    ops->dev_free(ops->ctx, ddst);
    ops->dev_free(ops->ctx, dsrc);
    ops->host_free(ops->ctx, pinned);
    free(got);
    free(want);
    free(src);
}

Test(cuda_plugin, convert_matches_the_cpu_bit_for_bit)
{
    cu_driver drv;
    const dlc__devops *ops = gpu(&drv);
    void *stream = NULL;
    CHECK_OP(ops, ops->stream_create(ops->ctx, &stream));
    /* ImageNet's statistics; then ones that reach half's infinities (std 1e-4), its subnormals
     * (std 3e3) and a negative std. */
    static const float means[2][4] = {{0.485f, 0.456f, 0.406f, 0.5f}, {0.5f, 0.1f, 0.9f, 0.3f}};
    static const float stds[2][4] = {{0.229f, 0.224f, 0.225f, 0.25f}, {1e-4f, 3e3f, -0.5f, 7.f}};
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (uint32_t dtype = DLC__HD_UINT8; dtype <= DLC__HD_FLOAT16; dtype++)
        for (uint32_t layout = DLC__HD_NHWC; layout <= DLC__HD_NCHW; layout++)
            for (uint32_t c = 1; c <= 4; c++)
                for (int p = 0; p < 2; p++)
                    check_convert(ops, &drv, stream, 3, 17, 29, c, dtype, layout, means[p], stds[p],
                                  seed++);
    /* More images than one block's share and rows of several blocks: the grid's strides. */
    check_convert(ops, &drv, stream, 21, 67, 131, 3, DLC__HD_FLOAT16, DLC__HD_NCHW, means[0],
                  stds[0], seed++);
    check_convert(ops, &drv, stream, 21, 67, 131, 4, DLC__HD_FLOAT32, DLC__HD_NHWC, means[1],
                  stds[1], seed++);
    check_convert(ops, &drv, stream, 1, 1, 1, 3, DLC__HD_FLOAT32, DLC__HD_NCHW, means[0], stds[0],
                  seed++);
    for (uint32_t layout = DLC__HD_NHWC; layout <= DLC__HD_NCHW; layout++)
        for (uint32_t c = 1; c <= 4; c++)
            check_convert(ops, &drv, stream, 3, 17, 29, c, DLC__HD_BFLOAT16, layout, means[c & 1],
                          stds[c & 1], seed++);

    /* Nothing to do is not an error; a channel count beyond 4 is. */
    dlc__hd_conv empty = {.n = 0, .h = 17, .w = 29, .c = 3, .dtype = DLC__HD_FLOAT32};
    CHECK_OP(ops, ops->convert(ops->ctx, &empty, stream));
    dlc__hd_conv bad = empty;
    bad.n = 1;
    bad.c = 5;
    cr_assert_neq(ops->convert(ops->ctx, &bad, stream), 0);
    CHECK_OP(ops, ops->stream_sync(ops->ctx, stream));
    ops->stream_destroy(ops->ctx, stream);
}

/* MixUp or CutMix @p mx (its data NULL) of random images, on the device and with
 * dlc__hd_mix_at() on the CPU: the same bytes. */
static void check_mix(const dlc__devops *ops, cu_driver *drv, void *stream, dlc__hd_mix mx,
                      uint64_t seed)
{
    const size_t es = mx.dtype == DLC__HD_FLOAT32 ? 4 : 2;
    const size_t elements = (size_t)mx.n * mx.h * mx.w * mx.c, bytes = elements * es;
    uint8_t *want = malloc(bytes + 1), *got = malloc(bytes + 1);
    cr_assert(want != NULL && got != NULL);
    for (size_t i = 0; i < elements; i++) {
        /* Normalized pixels: about -2.2..2.7. */
        const float v = (float)(xorshift(&seed) >> 40) / (float)(1 << 24) * 4.9f - 2.2f;
        if (es == 4)
            memcpy(want + 4 * i, &v, 4);
        else {
            const uint16_t b = dlc__hd_f32_to_16(v, mx.dtype);
            memcpy(want + 2 * i, &b, 2);
        }
    }
    void *pinned = NULL, *dev = NULL;
    CHECK_OP(ops, ops->host_alloc(ops->ctx, bytes + 1, &pinned));
    CHECK_OP(ops, ops->dev_alloc(ops->ctx, bytes + 1, &dev));
    memcpy(pinned, want, bytes);
    CHECK_OP(ops, ops->copy_h2d(ops->ctx, dev, pinned, bytes, stream));
    mx.data = want;
    for (uint64_t i = 0; i < dlc__hd_mix_elements(&mx); i++)
        dlc__hd_mix_at(&mx, i);
    mx.data = dev;
    CHECK_OP(ops, ops->mix(ops->ctx, &mx, stream));
    CHECK_OP(ops, ops->stream_sync(ops->ctx, stream));
    cr_assert_eq(drv->dtoh(got, (unsigned long long)(uintptr_t)dev, bytes), 0);
    cr_assert_eq(memcmp(got, want, bytes), 0, "n=%llu h=%u w=%u c=%u dtype=%u layout=%u mode=%u",
                 (unsigned long long)mx.n, mx.h, mx.w, mx.c, mx.dtype, mx.layout, mx.mode);
    ops->dev_free(ops->ctx, dev);
    ops->host_free(ops->ctx, pinned);
    free(got);
    free(want);
}

Test(cuda_plugin, mix_matches_the_cpu_bit_for_bit)
{
    cu_driver drv;
    const dlc__devops *ops = gpu(&drv);
    void *stream = NULL;
    CHECK_OP(ops, ops->stream_create(ops->ctx, &stream));
    static const uint32_t dtypes[] = {DLC__HD_FLOAT32, DLC__HD_FLOAT16, DLC__HD_BFLOAT16};
    uint64_t seed = 7;
    for (int d = 0; d < 3; d++)
        for (uint32_t layout = DLC__HD_NHWC; layout <= DLC__HD_NCHW; layout++)
            for (uint32_t mode = DLC__HD_MIXUP; mode <= DLC__HD_CUTMIX; mode++)
                for (uint64_t n = 1; n <= 8; n += 7) { /* An odd batch (1) and an even one. */
                    const double lam = 0.3712;
                    dlc__hd_mix mx = {.n = n,
                                      .h = 19,
                                      .w = 23,
                                      .c = 3,
                                      .dtype = dtypes[d],
                                      .layout = layout,
                                      .mode = mode,
                                      .lam = (float)lam,
                                      .oml = (float)(1.0 - lam),
                                      .y0 = 3,
                                      .y1 = 15,
                                      .x0 = 0,
                                      .x1 = 11};
                    check_mix(ops, &drv, stream, mx, seed++);
                }
    dlc__hd_mix bad = {
        .n = 2, .h = 1, .w = 1, .c = 3, .dtype = DLC__HD_UINT8, .mode = DLC__HD_MIXUP};
    cr_assert_neq(ops->mix(ops->ctx, &bad, stream), 0, "uint8 is not mixed");
    CHECK_OP(ops, ops->stream_sync(ops->ctx, stream));
    ops->stream_destroy(ops->ctx, stream);
}

/* RandomErasing @p er (its data and boxes NULL) of random images with random boxes, on the
 * device and with dlc__hd_erase_at() on the CPU: the same bytes, the noise included. */
static void check_erase(const dlc__devops *ops, cu_driver *drv, void *stream, dlc__hd_erase er,
                        uint64_t seed)
{
    const size_t es = er.dtype == DLC__HD_FLOAT32 ? 4 : er.dtype == DLC__HD_UINT8 ? 1 : 2;
    const size_t elements = (size_t)er.n * er.h * er.w * er.c, bytes = elements * es;
    const size_t nbox = (size_t)((er.n - 1) / er.per * er.stride + er.per);
    dlc__hd_erase_box *boxes = calloc(nbox, sizeof *boxes);
    uint8_t *want = malloc(bytes + 1), *got = malloc(bytes + 1);
    cr_assert(want != NULL && got != NULL && boxes != NULL);
    for (size_t i = 0; i < bytes; i++)
        want[i] = (uint8_t)(xorshift(&seed) >> 56);
    for (size_t b = 0; b < nbox; b++) {
        if (b % 5 == 4)
            continue; /* Not erased. */
        const uint32_t h = 1 + (uint32_t)(xorshift(&seed) % (er.h - 1));
        const uint32_t w = 1 + (uint32_t)(xorshift(&seed) % (er.w - 1));
        boxes[b] = (dlc__hd_erase_box){(uint32_t)(xorshift(&seed) % (er.h - h + 1)),
                                       (uint32_t)(xorshift(&seed) % (er.w - w + 1)), h, w,
                                       xorshift(&seed)};
    }
    void *pinned = NULL, *dev = NULL, *dboxes = NULL;
    const size_t box_bytes = nbox * sizeof *boxes;
    CHECK_OP(ops, ops->host_alloc(ops->ctx, bytes + box_bytes, &pinned));
    CHECK_OP(ops, ops->dev_alloc(ops->ctx, bytes + 1, &dev));
    CHECK_OP(ops, ops->dev_alloc(ops->ctx, box_bytes, &dboxes));
    memcpy(pinned, want, bytes);
    memcpy((uint8_t *)pinned + bytes, boxes, box_bytes);
    CHECK_OP(ops, ops->copy_h2d(ops->ctx, dev, pinned, bytes, stream));
    CHECK_OP(ops, ops->copy_h2d(ops->ctx, dboxes, (uint8_t *)pinned + bytes, box_bytes, stream));
    er.data = want;
    er.boxes = boxes;
    for (uint64_t img = 0; img < er.n; img++)
        for (uint64_t j = 0; j < dlc__hd_erase_items(&er, img); j++)
            dlc__hd_erase_at(&er, img, j);
    er.data = dev;
    er.boxes = dboxes;
    CHECK_OP(ops, ops->erase(ops->ctx, &er, stream));
    CHECK_OP(ops, ops->stream_sync(ops->ctx, stream));
    cr_assert_eq(drv->dtoh(got, (unsigned long long)(uintptr_t)dev, bytes), 0);
    cr_assert_eq(memcmp(got, want, bytes), 0, "n=%llu h=%u w=%u c=%u dtype=%u layout=%u value=%u",
                 (unsigned long long)er.n, er.h, er.w, er.c, er.dtype, er.layout, er.value);
    ops->dev_free(ops->ctx, dboxes);
    ops->dev_free(ops->ctx, dev);
    ops->host_free(ops->ctx, pinned);
    free(boxes);
    free(got);
    free(want);
}

Test(cuda_plugin, erase_matches_the_cpu_bit_for_bit)
{
    cu_driver drv;
    const dlc__devops *ops = gpu(&drv);
    void *stream = NULL;
    CHECK_OP(ops, ops->stream_create(ops->ctx, &stream));
    static const uint32_t dtypes[] = {DLC__HD_UINT8, DLC__HD_FLOAT32, DLC__HD_FLOAT16,
                                      DLC__HD_BFLOAT16};
    uint64_t seed = 11;
    for (int d = 0; d < 4; d++)
        for (uint32_t layout = DLC__HD_NHWC; layout <= DLC__HD_NCHW; layout++)
            for (uint32_t value = DLC__HD_ERASE_ZERO; value <= DLC__HD_ERASE_CONSTANT; value++) {
                if (dtypes[d] == DLC__HD_UINT8 && value == DLC__HD_ERASE_NOISE)
                    continue; /* Refused at open: noise has no uint8 value. */
                const int u8 = dtypes[d] == DLC__HD_UINT8;
                /* 3 samples of 2 views of this output among 3 views per sample; large images
                 * too, so that a box spans several blocks. */
                for (uint32_t side = 17; side <= 300; side += 283) {
                    dlc__hd_erase er = {
                        .n = 6,
                        .h = side,
                        .w = side + 6,
                        .c = 3,
                        .dtype = dtypes[d],
                        .layout = layout,
                        .value = value,
                        .per = 2,
                        .stride = 3,
                        .constant = {u8 ? 7.0f : 0.5f, u8 ? 200.0f : -1.25f, u8 ? 3.0f : 2.0f, 0}};
                    check_erase(ops, &drv, stream, er, seed++);
                }
            }
    dlc__hd_erase bad = {.n = 2, .h = 1, .w = 1, .c = 5, .per = 1, .stride = 1};
    cr_assert_neq(ops->erase(ops->ctx, &bad, stream), 0, "5 channels");
    CHECK_OP(ops, ops->stream_sync(ops->ctx, stream));
    ops->stream_destroy(ops->ctx, stream);
}

Test(cuda_plugin, copies_round_trip_in_event_order)
{
    cu_driver drv;
    const dlc__devops *ops = gpu(&drv);
    const size_t bytes = (size_t)8 << 20;
    void *s1 = NULL, *s2 = NULL, *copied = NULL, *moved = NULL, *host = NULL, *a = NULL, *b = NULL;
    CHECK_OP(ops, ops->stream_create(ops->ctx, &s1));
    CHECK_OP(ops, ops->stream_create(ops->ctx, &s2));
    CHECK_OP(ops, ops->event_create(ops->ctx, &copied));
    CHECK_OP(ops, ops->event_create(ops->ctx, &moved));
    CHECK_OP(ops, ops->host_alloc(ops->ctx, bytes, &host));
    CHECK_OP(ops, ops->dev_alloc(ops->ctx, bytes, &a));
    CHECK_OP(ops, ops->dev_alloc(ops->ctx, bytes, &b));
    /* An event never recorded counts as done. */
    cr_assert_eq(ops->event_query(ops->ctx, copied), 0);

    uint64_t seed = 42;
    for (size_t i = 0; i < bytes / 8; i++)
        ((uint64_t *)host)[i] = xorshift(&seed);
    CHECK_OP(ops, ops->copy_h2d(ops->ctx, a, host, bytes, s1));
    CHECK_OP(ops, ops->event_record(ops->ctx, copied, s1));
    /* The device-to-device copy on the other stream starts only after the first copy. */
    CHECK_OP(ops, ops->stream_wait(ops->ctx, s2, copied));
    CHECK_OP(ops, ops->copy_d2d(ops->ctx, b, a, bytes, s2));
    CHECK_OP(ops, ops->event_record(ops->ctx, moved, s2));
    int q;
    while ((q = ops->event_query(ops->ctx, moved)) == 1)
        ;
    cr_assert_eq(q, 0, "event_query: %s", ops->errstr(ops->ctx, q));
    CHECK_OP(ops, ops->event_sync(ops->ctx, moved));
    CHECK_OP(ops, ops->event_sync(ops->ctx, copied));
    cr_assert_eq(ops->event_query(ops->ctx, copied), 0);

    uint8_t *back = malloc(bytes);
    cr_assert_not_null(back);
    cr_assert_eq(drv.dtoh(back, (unsigned long long)(uintptr_t)b, bytes), 0);
    cr_assert_eq(memcmp(back, host, bytes), 0, "the round trip changed the bytes");
    free(back);

    CHECK_OP(ops, ops->stream_sync(ops->ctx, s1));
    CHECK_OP(ops, ops->stream_sync(ops->ctx, s2));
    ops->dev_free(ops->ctx, b);
    ops->dev_free(ops->ctx, a);
    ops->host_free(ops->ctx, host);
    ops->event_destroy(ops->ctx, moved);
    ops->event_destroy(ops->ctx, copied);
    ops->stream_destroy(ops->ctx, s2);
    ops->stream_destroy(ops->ctx, s1);
    /* NULL handles are accepted by the release operations. */
    ops->dev_free(ops->ctx, NULL);
    ops->host_free(ops->ctx, NULL);
    ops->event_destroy(ops->ctx, NULL);
    ops->stream_destroy(ops->ctx, NULL);
}

/* What a thread that never used CUDA sees around device_enter/device_leave. */
typedef struct enter_probe {
    const dlc__devops *ops;
    const cu_driver *drv;
    int device;
    int rc_before, rc_enter, rc_inside, rc_after;
    void *before, *saved, *inside, *after;
} enter_probe;

static void *enter_on_fresh_thread(void *arg)
{
    enter_probe *p = arg;
    p->rc_before = p->drv->ctx_get(&p->before);
    p->rc_enter = p->ops->device_enter(p->ops->ctx, p->device, &p->saved);
    p->rc_inside = p->drv->ctx_get(&p->inside);
    if (p->rc_enter == 0)
        p->ops->device_leave(p->ops->ctx, p->saved);
    p->rc_after = p->drv->ctx_get(&p->after);
    return NULL;
}

Test(cuda_plugin, device_enter_and_leave_restore_the_callers_context)
{
    cu_driver drv;
    const dlc__devops *ops = gpu(&drv);
    int count = 0;
    char why[256];
    CHECK_OP(ops, ops->device_count(ops->ctx, &count, why, sizeof why));

    /* A thread with no context keeps none: no stray primary context left behind. */
    enter_probe p = {.ops = ops, .drv = &drv, .device = count - 1};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, enter_on_fresh_thread, &p), 0);
    pthread_join(t, NULL);
    cr_assert_eq(p.rc_before, 0);
    cr_assert_null(p.before, "a new thread already had a context");
    cr_assert_eq(p.rc_enter, 0, "device_enter: %s", ops->errstr(ops->ctx, p.rc_enter));
    cr_assert_null(p.saved);
    cr_assert_eq(p.rc_inside, 0);
    cr_assert_not_null(p.inside, "device_enter made no context current");
    cr_assert_eq(p.rc_after, 0);
    cr_assert_null(p.after, "device_leave left a context current on a thread that had none");

    /* A thread with device 0's context (gpu() made it current) gets it back, also from a visit
     * to another device where there is one, and from nested visits. */
    void *mine = NULL, *now = NULL, *outer = NULL, *inner = NULL;
    cr_assert_eq(drv.ctx_get(&mine), 0);
    cr_assert_not_null(mine);
    CHECK_OP(ops, ops->device_enter(ops->ctx, count - 1, &outer));
    cr_assert_eq(outer, mine);
    CHECK_OP(ops, ops->device_enter(ops->ctx, 0, &inner));
    ops->device_leave(ops->ctx, inner);
    ops->device_leave(ops->ctx, outer);
    cr_assert_eq(drv.ctx_get(&now), 0);
    cr_assert_eq(now, mine, "device_leave did not restore the caller's context");

    /* A device that does not exist fails and changes nothing. */
    void *saved = NULL;
    const int bad[] = {count, -1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const int rc = ops->device_enter(ops->ctx, bad[i], &saved);
        cr_assert_neq(rc, 0, "device_enter(%d) of %d devices succeeded", bad[i], count);
        cr_assert_not_null(strstr(ops->errstr(ops->ctx, rc), "ordinal"), "device %d: %s", bad[i],
                           ops->errstr(ops->ctx, rc));
        cr_assert_eq(drv.ctx_get(&now), 0);
        cr_assert_eq(now, mine);
    }
}

Test(cuda_plugin, bench_h2d_times_the_copies)
{
    cu_driver drv;
    const dlc__devops *ops = gpu(&drv);
    double seconds = -1;
    CHECK_OP(ops, ops->bench_h2d(ops->ctx, (size_t)32 << 20, 4, &seconds));
    cr_assert_gt(seconds, 0);
    cr_log_info("host to device: %.1f GB/s (%s)", 4.0 * (32 << 20) / seconds / 1e9, ops->name);
    const int rc = ops->bench_h2d(ops->ctx, 0, 4, &seconds);
    cr_assert_neq(rc, 0, "an empty benchmark succeeded");
    cr_assert_str_not_empty(ops->errstr(ops->ctx, rc));
}
