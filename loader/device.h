/* Private to loader/: the operations the loader's device path runs on, as a table.
 *
 * The ring of pinned slots, the device staging buffers and the events between them are written
 * once (loader/device.c) against this table, which has two implementations:
 *   - the CUDA plugin, libdlcache_cuda.so (loader/cuda/plugin.cu), compiled by nvcc with the CUDA
 *     runtime linked statically and loaded with dlopen, so that libdlcache.so never depends on
 *     CUDA;
 *   - a CPU stand-in (tests/lib/devsim.c) whose streams are queues drained by threads with
 *     random delays and whose events are sequence numbers, so that the ordering logic runs under
 *     ThreadSanitizer and AddressSanitizer on machines without a GPU.
 *
 * Handles (streams, events, memory) are opaque pointers of the backend. Every operation returns
 * 0 or a backend error code whose text is errstr(code); event_query returns 1 while the event is
 * pending. Asynchronous failures (a copy that faults on the device) surface at the next call, as
 * in CUDA. The plugin and the library agree on the layout through DLC__DEVOPS_ABI: a plugin of
 * another ABI is refused by name, never called. */
#ifndef DLCACHE_LOADER_DEVICE_H
#define DLCACHE_LOADER_DEVICE_H

#include "convert_hd.h"

#include <stddef.h>
#include <stdint.h>

/* Bumped whenever the table below changes (2: mix, and the copies' events; 3: erase). */
#define DLC__DEVOPS_ABI 3u

/* The symbol the plugin exports: returns its table for @p abi, or NULL (wrong ABI). */
#define DLC__DEVOPS_SYMBOL "dlc_cuda_plugin_ops"

typedef struct dlc__devops {
    uint32_t abi;     /* DLC__DEVOPS_ABI. */
    uint32_t size;    /* sizeof(dlc__devops). */
    const char *name; /* "cuda 13.0" (with the runtime's version), "cpu-sim"... */
    void *ctx;        /* Passed back to every operation. */

    /* Text of a code an operation returned (static storage). */
    const char *(*errstr)(void *ctx, int code);
    /* Devices present; 0 with a reason in @p why when there are none or no driver. */
    int (*device_count)(void *ctx, int *count, char *why, size_t cap);
    /* Make @p device current for the calling thread (a loader thread, once at its start). */
    int (*set_device)(void *ctx, int device);
    /* Make @p device current for the caller's thread until device_leave(), which restores
     * exactly what was current before (possibly no context at all), so that a call on the
     * caller's thread never leaves a stray context on another GPU. */
    int (*device_enter)(void *ctx, int device, void **saved);
    void (*device_leave)(void *ctx, void *saved);

    /* Page-locked host memory (the batch slots) and device memory (the staging ring). */
    int (*host_alloc)(void *ctx, size_t bytes, void **p);
    void (*host_free)(void *ctx, void *p);
    int (*dev_alloc)(void *ctx, size_t bytes, void **p);
    void (*dev_free)(void *ctx, void *p);

    /* A non-blocking stream of the loader's own, and its synchronization (close only). */
    int (*stream_create)(void *ctx, void **s);
    void (*stream_destroy)(void *ctx, void *s);
    int (*stream_sync)(void *ctx, void *s);

    /* Events (no timing; a host wait on one yields the CPU instead of spinning). */
    int (*event_create)(void *ctx, void **e);
    void (*event_destroy)(void *ctx, void *e);
    int (*event_record)(void *ctx, void *e, void *s);
    int (*stream_wait)(void *ctx, void *s, void *e); /* Work on s after this waits for e. */
    int (*event_query)(void *ctx, void *e);          /* 0 done, 1 pending, else an error. */
    int (*event_sync)(void *ctx, void *e);
    /* Events that keep the time the stream reached them, and the milliseconds between two such
     * events once both have completed: the copies' own time on the device, beside the copy
     * thread's host-timed wait. NULL in a backend without them; the loader then times none. */
    int (*event_create_timed)(void *ctx, void **e);
    int (*event_elapsed_ms)(void *ctx, void *start, void *stop, float *ms);

    /* Asynchronous copies on @p s: from page-locked host memory, and within the device. */
    int (*copy_h2d)(void *ctx, void *dst, const void *src, size_t bytes, void *s);
    int (*copy_d2d)(void *ctx, void *dst, const void *src, size_t bytes, void *s);
    /* The image conversion (convert_hd.h) on @p s. */
    int (*convert)(void *ctx, const dlc__hd_conv *cv, void *s);
    /* The copy's ceiling: @p reps copies of @p bytes from page-locked memory to the current
     * device on a stream of its own, timed with events; *seconds for all of them. */
    int (*bench_h2d)(void *ctx, size_t bytes, uint32_t reps, double *seconds);
    /* MixUp or CutMix of converted images in place (convert_hd.h) on @p s. */
    int (*mix)(void *ctx, const dlc__hd_mix *mx, void *s);
    /* RandomErasing of converted images in place (convert_hd.h) on @p s; er->boxes is device
     * memory (the staged batch's table). */
    int (*erase)(void *ctx, const dlc__hd_erase *er, void *s);
} dlc__devops;

/* The plugin's export: the table for @p abi (its ctx is NULL), or NULL. */
typedef const dlc__devops *(*dlc__devops_fn)(uint32_t abi);

#endif /* DLCACHE_LOADER_DEVICE_H */
