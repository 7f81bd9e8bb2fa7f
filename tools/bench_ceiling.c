/* The memcpy ceiling: what "reading records into a batch" would cost if it were nothing but a copy
 * of the output bytes, measured on the same threads as the loader (docs/BENCHMARKS.md). */
#include "bench.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct ceiling_shared {
    bench_sync sync;
    const uint8_t *src;
    size_t slots;        /* sample-sized blocks in src */
    size_t slot_stride;  /* bytes between blocks (sample bytes rounded up to 64) */
    size_t sample_bytes; /* bytes copied per sample */
    uint32_t batch;
} ceiling_shared;

typedef struct ceiling_arg {
    ceiling_shared *sh;
    uint8_t *dst; /* one batch */
    dlc__rng rng; /* this thread's block order, continued from window to window */
    uint64_t samples;
} ceiling_arg;

struct bench_ceiling {
    ceiling_shared sh;
    ceiling_arg *args;
    uint8_t *src;
    size_t src_bytes;
    int threads;
};

static void *ceiling_worker(void *p)
{
    ceiling_arg *a = p;
    const ceiling_shared *sh = a->sh;
    pthread_barrier_wait(&a->sh->sync.start);
    /* The stop flag is read once a batch, like the loader's workers look for new work once a
     * sample at most; blocks come from random places in a buffer larger than the last-level
     * cache, as records do from the map. */
    while (!atomic_load_explicit(&a->sh->sync.stop, memory_order_relaxed)) {
        for (uint32_t i = 0; i < sh->batch; i++) {
            /* The modulo's bias is far below the noise, and it keeps the draw inline. */
            const size_t slot = (size_t)(dlc__rng_next(&a->rng) % sh->slots);
            memcpy(a->dst + (size_t)i * sh->sample_bytes, sh->src + slot * sh->slot_stride,
                   sh->sample_bytes);
        }
        a->samples += sh->batch;
    }
    return NULL;
}

/* Size of the source buffer: twice the last-level cache so that copies come from memory, never
 * less than 256 MiB, at most 1 GiB. */
static size_t source_bytes_wanted(void)
{
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0)
        llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    size_t want = llc > 0 ? (size_t)llc * 2 : 0;
    if (want < ((size_t)256 << 20))
        want = (size_t)256 << 20;
    if (want > ((size_t)1 << 30))
        want = (size_t)1 << 30;
    return want;
}

void bench_ceiling_close(bench_ceiling *c)
{
    if (!c)
        return;
    if (c->args)
        for (int t = 0; t < c->threads; t++)
            free(c->args[t].dst);
    free(c->args);
    free(c->src);
    free(c);
}

/* Write every page of the source now, so that page faults are not timed, with bytes that are not
 * all zero (no zero-page tricks). */
static void fill_source(uint8_t *src, size_t bytes)
{
    for (size_t i = 0; i < bytes; i += 8) {
        const uint64_t v = dlc__mix64(i);
        memcpy(src + i, &v, bytes - i < 8 ? bytes - i : 8);
    }
}

int bench_ceiling_open(int threads, uint32_t batch, size_t sample_bytes, bench_ceiling **out)
{
    *out = NULL;
    bench_ceiling *c = calloc(1, sizeof *c);
    if (!c)
        goto oom;
    const size_t stride = (sample_bytes + 63) & ~(size_t)63;
    c->threads = threads;
    c->src_bytes = source_bytes_wanted();
    if (c->src_bytes < stride * 4)
        c->src_bytes = stride * 4;
    c->src = bench_aligned(c->src_bytes);
    c->args = calloc((size_t)threads, sizeof *c->args);
    if (!c->src || !c->args)
        goto oom;
    fill_source(c->src, c->src_bytes);
    c->sh = (ceiling_shared){.src = c->src,
                             .slots = c->src_bytes / stride,
                             .slot_stride = stride,
                             .sample_bytes = sample_bytes,
                             .batch = batch};
    atomic_init(&c->sh.sync.failed, 0);
    for (int t = 0; t < threads; t++) {
        ceiling_arg *a = &c->args[t];
        a->sh = &c->sh;
        a->rng = (dlc__rng){dlc__mix64(0x5eed0000u + (uint64_t)t), 0};
        a->dst = bench_aligned((size_t)batch * sample_bytes);
        if (!a->dst)
            goto oom;
        memset(a->dst, 1, (size_t)batch * sample_bytes);
    }
    *out = c;
    return 0;
oom:
    fprintf(stderr, TOOL ": error: out of memory for the memcpy ceiling\n");
    bench_ceiling_close(c);
    return -1;
}

void bench_ceiling_run(bench_ceiling *c, double seconds, bench_window *res)
{
    for (int t = 0; t < c->threads; t++)
        c->args[t].samples = 0;
    res->seconds = bench_run_window(c->threads, ceiling_worker, c->args, sizeof *c->args,
                                    &c->sh.sync, seconds);
    res->samples = 0;
    for (int t = 0; t < c->threads; t++)
        res->samples += c->args[t].samples;
}

size_t bench_ceiling_source_bytes(const bench_ceiling *c)
{
    return c->src_bytes;
}
