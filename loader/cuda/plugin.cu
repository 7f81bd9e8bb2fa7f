/* libdlcache_cuda.so: the table of device operations (loader/device.h) on the CUDA runtime.
 *
 * Built by nvcc alone (cmake/cuda.cmake) with the runtime linked statically, and loaded by the
 * library with dlopen, so that libdlcache.so never depends on CUDA and this file is the only one
 * that sees a CUDA header. The one export is dlc_cuda_plugin_ops(); everything else is hidden.
 *
 * Every operation returns 0 or a cudaError_t, whose text errstr() gives. The only exception is
 * device_enter(), which can also pass on a CUresult of the driver's context calls: the driver's
 * codes and the runtime's share their values for those errors (3, 4, 201...), so errstr() still
 * names them. The table's ctx is NULL: the runtime keeps its own state. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "device.h"

#include <stdint.h>
#include <stdio.h>
#include <type_traits>

namespace {

/* Threads of a conversion block, and the images one block converts before the grid's y stride:
 * enough for each thread to reuse its block's value table on several pixels. */
constexpr unsigned kThreads = 256;
constexpr uint64_t kImagesPerBlock = 8;
/* The grid's own limit on y is 65535; x is capped too, and both dimensions are strided. */
constexpr uint64_t kMaxGridX = 1u << 16;
constexpr uint64_t kMaxGridY = 65535;

const char *op_errstr(void *ctx, int code)
{
    return cudaGetErrorString((cudaError_t)code);
}

int op_device_count(void *ctx, int *count, char *why, size_t cap)
{
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0) {
        *count = n;
        return 0;
    }
    /* A failed call leaves its error as the thread's last error: clear it, the answer here is
     * "no device", not a failure of a later call. */
    cudaGetLastError();
    *count = 0;
    if (why == NULL || cap == 0)
        return 0;
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (e == cudaSuccess) {
        snprintf(why, cap, "the CUDA driver (CUDA %d.%d) sees no GPU", driver / 1000,
                 driver % 1000 / 10);
    } else if (driver == 0) {
        snprintf(why, cap,
                 "no NVIDIA driver (libcuda.so.1 could not be loaded): cudaGetDeviceCount said "
                 "\"%s\" (%s; the plugin's runtime is CUDA %d.%d)",
                 cudaGetErrorString(e), cudaGetErrorName(e), runtime / 1000, runtime % 1000 / 10);
    } else {
        snprintf(why, cap,
                 "cudaGetDeviceCount said \"%s\" (%s; the driver supports CUDA %d.%d, the "
                 "plugin's runtime is %d.%d)",
                 cudaGetErrorString(e), cudaGetErrorName(e), driver / 1000, driver % 1000 / 10,
                 runtime / 1000, runtime % 1000 / 10);
    }
    return 0;
}

int op_set_device(void *ctx, int device)
{
    return cudaSetDevice(device);
}

/* The driver's current-context calls, looked up once through the runtime (the plugin never
 * links libcuda). The runtime's cudaGetDevice/cudaSetDevice cannot say "no context is current",
 * and cudaGetDevice would even create a primary context to answer. */
struct ctx_api {
    PFN_cuCtxGetCurrent_v4000 get;
    PFN_cuCtxSetCurrent_v4000 set;
    cudaError_t err; /* Why the lookup failed (no driver...), cached: it cannot change. */
};

void *driver_symbol(const char *name, cudaError_t *err)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, 4000, cudaEnableDefault, &q);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *err = e;
        return NULL;
    }
    if (q != cudaDriverEntryPointSuccess || fn == NULL) {
        *err = cudaErrorSymbolNotFound;
        return NULL;
    }
    return fn;
}

const ctx_api &ctx_functions()
{
    /* A function-local static: initialized once, thread-safe (C++11). */
    static const ctx_api api = [] {
        ctx_api a = {NULL, NULL, cudaSuccess};
        a.get = (PFN_cuCtxGetCurrent_v4000)driver_symbol("cuCtxGetCurrent", &a.err);
        if (a.get != NULL)
            a.set = (PFN_cuCtxSetCurrent_v4000)driver_symbol("cuCtxSetCurrent", &a.err);
        if (a.set == NULL)
            a.get = NULL;
        return a;
    }();
    return api;
}

int op_device_enter(void *ctx, int device, void **saved)
{
    const ctx_api &api = ctx_functions();
    if (api.get == NULL)
        return api.err;
    CUcontext cur = NULL;
    const CUresult r = api.get(&cur);
    /* Not initialized: no context can be current on any thread. */
    if (r == CUDA_ERROR_NOT_INITIALIZED)
        cur = NULL;
    else if (r != CUDA_SUCCESS)
        return (int)r;
    /* An ordinal past the machine's is refused before cudaSetDevice: the caller gets the same
     * "invalid device ordinal", and no CUDA API call fails (compute-sanitizer counts a failed
     * call as an error, so a caller's bad ordinal would read as a fault of ours). */
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess && (device < 0 || device >= count))
        e = cudaErrorInvalidDevice;
    if (e == cudaSuccess)
        e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        api.set(cur);
        return e;
    }
    *saved = (void *)cur;
    return 0;
}

void op_device_leave(void *ctx, void *saved)
{
    const ctx_api &api = ctx_functions();
    if (api.set != NULL)
        api.set((CUcontext)saved);
}

int op_host_alloc(void *ctx, size_t bytes, void **p)
{
    /* Portable: the slots are pinned for every context, whichever thread allocated them. */
    return cudaHostAlloc(p, bytes, cudaHostAllocPortable);
}

void op_host_free(void *ctx, void *p)
{
    if (p != NULL)
        cudaFreeHost(p);
}

int op_dev_alloc(void *ctx, size_t bytes, void **p)
{
    return cudaMalloc(p, bytes);
}

void op_dev_free(void *ctx, void *p)
{
    if (p != NULL)
        cudaFree(p);
}

int op_stream_create(void *ctx, void **s)
{
    cudaStream_t st = NULL;
    const cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    *s = e == cudaSuccess ? (void *)st : NULL;
    return e;
}

void op_stream_destroy(void *ctx, void *s)
{
    /* NULL would name the legacy default stream, which is not ours to destroy. */
    if (s != NULL)
        cudaStreamDestroy((cudaStream_t)s);
}

int op_stream_sync(void *ctx, void *s)
{
    return cudaStreamSynchronize((cudaStream_t)s);
}

int op_event_create(void *ctx, void **e)
{
    cudaEvent_t ev = NULL;
    const cudaError_t r =
        cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventBlockingSync);
    *e = r == cudaSuccess ? (void *)ev : NULL;
    return r;
}

void op_event_destroy(void *ctx, void *e)
{
    if (e != NULL)
        cudaEventDestroy((cudaEvent_t)e);
}

int op_event_record(void *ctx, void *e, void *s)
{
    return cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s);
}

int op_stream_wait(void *ctx, void *s, void *e)
{
    return cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0);
}

int op_event_query(void *ctx, void *e)
{
    const cudaError_t r = cudaEventQuery((cudaEvent_t)e);
    if (r == cudaErrorNotReady) {
        /* "Not ready" is an answer, not an error: it must not linger as the thread's last error
         * for the next launch check (ours or the caller's) to find. */
        cudaGetLastError();
        return 1;
    }
    return r;
}

int op_event_sync(void *ctx, void *e)
{
    return cudaEventSynchronize((cudaEvent_t)e);
}

int op_event_create_timed(void *ctx, void **e)
{
    cudaEvent_t ev = NULL;
    /* Timing kept, and a host wait on it yields the CPU as the loader's other events do. */
    const cudaError_t r = cudaEventCreateWithFlags(&ev, cudaEventBlockingSync);
    *e = r == cudaSuccess ? (void *)ev : NULL;
    return r;
}

int op_event_elapsed_ms(void *ctx, void *start, void *stop, float *ms)
{
    return cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)stop);
}

int op_copy_h2d(void *ctx, void *dst, const void *src, size_t bytes, void *s)
{
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)s);
}

int op_copy_d2d(void *ctx, void *dst, const void *src, size_t bytes, void *s)
{
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)s);
}

/* One output element from its normalized float: the float itself, or its binary16 bits. */
template <typename T> __device__ __forceinline__ T out_value(float v);
template <> __device__ __forceinline__ float out_value<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ uint16_t out_value<uint16_t>(float v)
{
    return dlc__hd_f32_to_f16(v);
}
/* bfloat16 bits, as a type of its own so that the kernels are instantiated for it. */
struct bf16_bits {
    uint16_t bits;
};
template <> __device__ __forceinline__ bf16_bits out_value<bf16_bits>(float v)
{
    return bf16_bits{dlc__hd_f32_to_bf16(v)};
}

/* The conversion of dlc__hd_convert_at(), one thread per pixel with its C channels: blockIdx.y
 * walks the images, blockIdx.x the pixels of each, so no thread divides. The values come from a
 * table of the 256 x C possible ones, made per block by dlc__hd_norm() and dlc__hd_f32_to_f16()
 * themselves: the same arithmetic as the CPU's, hence the same bits. uint8 (only NCHW reaches
 * here) is a reordering. @p hw is h * w. */
template <typename T, int C>
__global__ void __launch_bounds__(kThreads) convert_kernel(const dlc__hd_conv cv, const uint64_t hw)
{
    constexpr bool kNorm = !std::is_same<T, uint8_t>::value;
    __shared__ T table[kNorm ? C : 1][kNorm ? 256 : 1];
    if constexpr (kNorm) {
        for (unsigned k = threadIdx.x; k < 256u * C; k += blockDim.x) {
            const unsigned ch = k >> 8, x = k & 255u;
            table[ch][x] = out_value<T>(dlc__hd_norm(x, cv.mean[ch], cv.std[ch]));
        }
        __syncthreads();
    }
    const bool nchw = cv.layout == DLC__HD_NCHW;
    const uint64_t image = hw * C;
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t img = blockIdx.y; img < cv.n; img += gridDim.y) {
        const uint8_t *src = cv.src + img * image;
        T *dst = (T *)cv.dst + img * image;
        for (uint64_t p = first; p < hw; p += stride) {
            uint8_t px[C];
#pragma unroll
            for (int k = 0; k < C; k++)
                px[k] = src[p * C + k];
#pragma unroll
            for (int k = 0; k < C; k++) {
                T v;
                if constexpr (kNorm)
                    v = table[k][px[k]];
                else
                    v = px[k];
                dst[nchw ? (uint64_t)k * hw + p : p * C + k] = v;
            }
        }
    }
}

template <typename T, int C> cudaError_t launch(const dlc__hd_conv &cv, cudaStream_t s)
{
    const uint64_t hw = (uint64_t)cv.h * cv.w;
    uint64_t gx = (hw + kThreads - 1) / kThreads,
             gy = (cv.n + kImagesPerBlock - 1) / kImagesPerBlock;
    gx = gx < kMaxGridX ? gx : kMaxGridX;
    gy = gy < kMaxGridY ? gy : kMaxGridY;
    dlc__hd_conv arg = cv;
    uint64_t hw_arg = hw;
    void *args[] = {&arg, &hw_arg};
    /* cudaLaunchKernel returns the launch's own error, so that an earlier, already reported
     * error still recorded as the thread's last error cannot be taken for this launch's. */
    const cudaError_t e =
        cudaLaunchKernel((const void *)convert_kernel<T, C>, dim3((unsigned)gx, (unsigned)gy),
                         dim3(kThreads), args, 0, s);
    if (e != cudaSuccess)
        cudaGetLastError(); /* Reported here; do not leave it for the caller's next check. */
    return e;
}

template <typename T> cudaError_t launch_c(const dlc__hd_conv &cv, cudaStream_t s)
{
    switch (cv.c) {
    case 1:
        return launch<T, 1>(cv, s);
    case 2:
        return launch<T, 2>(cv, s);
    case 3:
        return launch<T, 3>(cv, s);
    default:
        return launch<T, 4>(cv, s);
    }
}

int op_convert(void *ctx, const dlc__hd_conv *cv, void *s)
{
    if (cv->c < 1 || cv->c > 4 || cv->layout > DLC__HD_NCHW ||
        (cv->dtype > DLC__HD_FLOAT16 && cv->dtype != DLC__HD_BFLOAT16))
        return cudaErrorInvalidValue;
    const uint64_t elements = dlc__hd_conv_elements(cv);
    if (elements == 0)
        return 0;
    const cudaStream_t st = (cudaStream_t)s;
    /* uint8 in the source's own layout (or one channel, where the layouts agree) is a copy. */
    if (cv->dtype == DLC__HD_UINT8 && (cv->layout == DLC__HD_NHWC || cv->c == 1))
        return cudaMemcpyAsync(cv->dst, cv->src, elements, cudaMemcpyDeviceToDevice, st);
    if (cv->dtype == DLC__HD_UINT8)
        return launch_c<uint8_t>(*cv, st);
    if (cv->dtype == DLC__HD_FLOAT32)
        return launch_c<float>(*cv, st);
    if (cv->dtype == DLC__HD_BFLOAT16)
        return launch_c<bf16_bits>(*cv, st);
    return launch_c<uint16_t>(*cv, st);
}

/* MixUp / CutMix in place: one thread per work item of dlc__hd_mix_at(), the function the
 * host runs, with the draw made on the host (so the same bits on both). */
__global__ void __launch_bounds__(kThreads) mix_kernel(const dlc__hd_mix mx, const uint64_t items)
{
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += stride)
        dlc__hd_mix_at(&mx, i);
}

int op_mix(void *ctx, const dlc__hd_mix *mx, void *s)
{
    (void)ctx;
    if (mx->c < 1 || mx->c > 4 || mx->layout > DLC__HD_NCHW ||
        (mx->mode != DLC__HD_MIXUP && mx->mode != DLC__HD_CUTMIX) ||
        (mx->dtype != DLC__HD_FLOAT32 && mx->dtype != DLC__HD_FLOAT16 &&
         mx->dtype != DLC__HD_BFLOAT16))
        return cudaErrorInvalidValue;
    const uint64_t items = dlc__hd_mix_elements(mx);
    if (items == 0)
        return 0;
    uint64_t gx = (items + kThreads - 1) / kThreads;
    gx = gx < kMaxGridX ? gx : kMaxGridX;
    dlc__hd_mix arg = *mx;
    uint64_t items_arg = items;
    void *args[] = {&arg, &items_arg};
    const cudaError_t e = cudaLaunchKernel((const void *)mix_kernel, dim3((unsigned)gx),
                                           dim3(kThreads), args, 0, (cudaStream_t)s);
    if (e != cudaSuccess)
        cudaGetLastError(); /* Reported here, as launch() does. */
    return e;
}

/* RandomErasing in place: blockIdx.y walks the images, the x threads the elements of each one's
 * box, through dlc__hd_erase_at(), the function the host's erasing matches (same values, same
 * noise from the same counter-based generator, hence the same bits). */
__global__ void __launch_bounds__(kThreads) erase_kernel(const dlc__hd_erase er)
{
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t img = blockIdx.y; img < er.n; img += gridDim.y) {
        const uint64_t items = dlc__hd_erase_items(&er, img);
        for (uint64_t j = first; j < items; j += stride)
            dlc__hd_erase_at(&er, img, j);
    }
}

int op_erase(void *ctx, const dlc__hd_erase *er, void *s)
{
    (void)ctx;
    if (er->c < 1 || er->c > 4 || er->layout > DLC__HD_NCHW || er->per == 0 ||
        er->stride < er->per || er->value > DLC__HD_ERASE_CONSTANT ||
        (er->dtype > DLC__HD_FLOAT16 && er->dtype != DLC__HD_BFLOAT16))
        return cudaErrorInvalidValue;
    if (er->n == 0)
        return 0;
    /* The largest box is below the image (RandomErasing keeps h < H and w < W): x covers it. */
    const uint64_t most = (uint64_t)er->h * er->w * er->c;
    uint64_t gx = (most + kThreads - 1) / kThreads, gy = er->n;
    gx = gx < kMaxGridX ? gx : kMaxGridX;
    gy = gy < kMaxGridY ? gy : kMaxGridY;
    dlc__hd_erase arg = *er;
    void *args[] = {&arg};
    const cudaError_t e =
        cudaLaunchKernel((const void *)erase_kernel, dim3((unsigned)gx, (unsigned)gy),
                         dim3(kThreads), args, 0, (cudaStream_t)s);
    if (e != cudaSuccess)
        cudaGetLastError(); /* Reported here, as launch() does. */
    return e;
}

int op_bench_h2d(void *ctx, size_t bytes, uint32_t reps, double *seconds)
{
    if (bytes == 0 || reps == 0)
        return cudaErrorInvalidValue;
    void *host = NULL, *dev = NULL;
    cudaStream_t st = NULL;
    cudaEvent_t start = NULL, stop = NULL;
    float ms = 0;
    cudaError_t e = cudaHostAlloc(&host, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess)
        goto fail;
    e = cudaMalloc(&dev, bytes);
    if (e != cudaSuccess)
        goto fail;
    e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        goto fail;
    /* Timing events (the loader's own have none), blocking so that the wait yields the CPU. */
    e = cudaEventCreateWithFlags(&start, cudaEventBlockingSync);
    if (e != cudaSuccess)
        goto fail;
    e = cudaEventCreateWithFlags(&stop, cudaEventBlockingSync);
    if (e != cudaSuccess)
        goto fail;
    /* The warm-up copy pays the first touch of the mappings outside the timed window. */
    e = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, st);
    if (e != cudaSuccess)
        goto fail;
    e = cudaEventRecord(start, st);
    for (uint32_t i = 0; i < reps && e == cudaSuccess; i++)
        e = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess)
        e = cudaEventRecord(stop, st);
    if (e == cudaSuccess)
        e = cudaEventSynchronize(stop);
    if (e == cudaSuccess)
        e = cudaEventElapsedTime(&ms, start, stop);
    if (e == cudaSuccess)
        *seconds = ms / 1e3;
fail:
    if (e != cudaSuccess)
        cudaGetLastError();
    if (stop != NULL)
        cudaEventDestroy(stop);
    if (start != NULL)
        cudaEventDestroy(start);
    if (st != NULL)
        cudaStreamDestroy(st);
    if (dev != NULL)
        cudaFree(dev);
    if (host != NULL)
        cudaFreeHost(host);
    return e;
}

dlc__devops make_ops()
{
    /* "cuda 13.0": the runtime linked in, which answers without a driver. */
    static char name[32];
    int v = 0;
    cudaRuntimeGetVersion(&v);
    snprintf(name, sizeof name, "cuda %d.%d", v / 1000, v % 1000 / 10);
    dlc__devops t = {};
    t.abi = DLC__DEVOPS_ABI;
    t.size = sizeof(dlc__devops);
    t.name = name;
    t.ctx = NULL;
    t.errstr = op_errstr;
    t.device_count = op_device_count;
    t.set_device = op_set_device;
    t.device_enter = op_device_enter;
    t.device_leave = op_device_leave;
    t.host_alloc = op_host_alloc;
    t.host_free = op_host_free;
    t.dev_alloc = op_dev_alloc;
    t.dev_free = op_dev_free;
    t.stream_create = op_stream_create;
    t.stream_destroy = op_stream_destroy;
    t.stream_sync = op_stream_sync;
    t.event_create = op_event_create;
    t.event_destroy = op_event_destroy;
    t.event_record = op_event_record;
    t.stream_wait = op_stream_wait;
    t.event_query = op_event_query;
    t.event_sync = op_event_sync;
    t.event_create_timed = op_event_create_timed;
    t.event_elapsed_ms = op_event_elapsed_ms;
    t.copy_h2d = op_copy_h2d;
    t.copy_d2d = op_copy_d2d;
    t.convert = op_convert;
    t.bench_h2d = op_bench_h2d;
    t.mix = op_mix;
    t.erase = op_erase;
    return t;
}

} // namespace

/* The plugin's one export (dlc__devops_fn): the table, filled once, or NULL for another ABI. */
extern "C" __attribute__((visibility("default"))) const dlc__devops *
dlc_cuda_plugin_ops(uint32_t abi)
{
    if (abi != DLC__DEVOPS_ABI)
        return NULL;
    static const dlc__devops ops = make_ops();
    return &ops;
}
