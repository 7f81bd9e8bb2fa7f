/* The CPU stand-in of the device (devsim.c) on its own: its ordering primitives follow CUDA's
 * semantics, its hazard detector catches a missing event and a refilled host source, its faults
 * surface synchronously, asynchronously and stickily, and it counts leaks and stray contexts.
 * Streams are held with devsim_stream_pause() where an order must be forced, so that no check
 * depends on timing. */
#include "devsim.h"

#include <criterion/criterion.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SZ 4096u

typedef struct rig {
    devsim *sim;
    const dlc__devops *o;
    void *ctx;
    void *saved;
    uint8_t *host;  /* Pinned, SZ. */
    uint8_t *a, *b; /* Device, SZ each. */
    void *s1, *s2;  /* Streams. */
    void *e;        /* Event. */
} rig;

static void rig_open(rig *r, uint32_t delay_us)
{
    devsim_opts opts;
    devsim_opts_init(&opts);
    opts.max_delay_us = delay_us;
    opts.seed = 3;
    r->sim = devsim_create(&opts);
    cr_assert_not_null(r->sim);
    r->o = devsim_ops(r->sim);
    r->ctx = r->o->ctx;
    cr_assert_eq(r->o->abi, DLC__DEVOPS_ABI);
    cr_assert_eq(r->o->size, sizeof(dlc__devops));
    cr_assert_eq(r->o->device_enter(r->ctx, 0, &r->saved), 0);
    cr_assert_eq(r->o->host_alloc(r->ctx, SZ, (void **)&r->host), 0);
    cr_assert_eq(r->o->dev_alloc(r->ctx, SZ, (void **)&r->a), 0);
    cr_assert_eq(r->o->dev_alloc(r->ctx, SZ, (void **)&r->b), 0);
    cr_assert_eq(r->o->stream_create(r->ctx, &r->s1), 0);
    cr_assert_eq(r->o->stream_create(r->ctx, &r->s2), 0);
    cr_assert_eq(r->o->event_create(r->ctx, &r->e), 0);
    for (uint32_t i = 0; i < SZ; i++)
        r->host[i] = (uint8_t)(i * 7 + 1);
}

/* Free everything, then check that the sim saw no leak, no stray call and @p hazards hazards. */
static void rig_close(rig *r, uint64_t hazards)
{
    r->o->event_destroy(r->ctx, r->e);
    r->o->stream_destroy(r->ctx, r->s1);
    r->o->stream_destroy(r->ctx, r->s2);
    r->o->dev_free(r->ctx, r->a);
    r->o->dev_free(r->ctx, r->b);
    r->o->host_free(r->ctx, r->host);
    r->o->device_leave(r->ctx, r->saved);
    devsim_stats st;
    devsim_destroy(r->sim, &st);
    cr_assert_eq(st.hazards, hazards, "hazards %llu", (unsigned long long)st.hazards);
    cr_assert_eq(st.live_dev_blocks + st.live_host_blocks + st.live_streams + st.live_events, 0);
    cr_assert_eq(st.stray_calls, 0);
    cr_assert_eq(st.enter_depth, 0);
}

static void nap_ms(int ms)
{
    const struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

Test(devsim, record_query_sync_and_wait_order_streams)
{
    rig r;
    rig_open(&r, 50);
    void *e2;
    cr_assert_eq(r.o->event_create(r.ctx, &e2), 0);
    cr_assert_eq(r.o->event_query(r.ctx, r.e), 0, "an event never recorded is complete");
    cr_assert_eq(r.o->event_sync(r.ctx, r.e), 0);

    /* s1 is held: its copy and its record cannot have run, and s2's wait holds s2 behind them. */
    devsim_stream_pause(r.sim, r.s1, 1);
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a, r.host, SZ, r.s1), 0);
    cr_assert_eq(r.o->event_record(r.ctx, r.e, r.s1), 0);
    cr_assert_eq(r.o->stream_wait(r.ctx, r.s2, r.e), 0);
    cr_assert_eq(r.o->copy_d2d(r.ctx, r.b, r.a, SZ, r.s2), 0);
    cr_assert_eq(r.o->event_record(r.ctx, e2, r.s2), 0);
    nap_ms(20);
    cr_assert_eq(r.o->event_query(r.ctx, r.e), 1, "s1 is held");
    cr_assert_eq(r.o->event_query(r.ctx, e2), 1, "s2 waits for s1");
    cr_assert_eq(r.b[0], 0xCD, "device memory starts as garbage, and nothing wrote it yet");
    devsim_stream_pause(r.sim, r.s1, 0);
    cr_assert_eq(r.o->event_sync(r.ctx, e2), 0);
    cr_assert_eq(r.o->event_query(r.ctx, r.e), 0, "s2 ran after s1's record");
    cr_assert_eq(memcmp(r.b, r.host, SZ), 0);

    /* A query refers to the most recent record: a new record on a held stream is pending even
     * though the earlier one has completed. */
    devsim_stream_pause(r.sim, r.s1, 1);
    cr_assert_eq(r.o->event_record(r.ctx, r.e, r.s1), 0);
    cr_assert_eq(r.o->event_query(r.ctx, r.e), 1);
    /* A wait enqueued now refers to that record; recording again elsewhere does not free it. */
    cr_assert_eq(r.o->stream_wait(r.ctx, r.s2, r.e), 0);
    cr_assert_eq(r.o->event_record(r.ctx, e2, r.s2), 0);
    cr_assert_eq(r.o->event_record(r.ctx, r.e, NULL), 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, NULL), 0);
    cr_assert_eq(r.o->event_query(r.ctx, r.e), 0, "the latest record (default stream) ran");
    nap_ms(20);
    cr_assert_eq(r.o->event_query(r.ctx, e2), 1, "s2 still waits for the record on s1");
    devsim_stream_pause(r.sim, r.s1, 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s2), 0);
    cr_assert_eq(r.o->event_query(r.ctx, e2), 0);
    r.o->event_destroy(r.ctx, e2);
    rig_close(&r, 0);
}

Test(devsim, stream_sync_covers_work_enqueued_before_it)
{
    rig r;
    rig_open(&r, 200);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(r.o->copy_h2d(r.ctx, r.a + i * 100, r.host + i * 100, 100, r.s1), 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s1), 0);
    cr_assert_eq(memcmp(r.a, r.host, 2000), 0);
    devsim_stats st;
    devsim_get_stats(r.sim, &st);
    cr_assert_eq(st.calls[DEVSIM_OP_COPY_H2D], 20);
    cr_assert_geq(st.executed, 20);
    rig_close(&r, 0);
}

Test(devsim, convert_is_the_reference_arithmetic)
{
    rig r;
    rig_open(&r, 0);
    /* Two 4 x 5 images of 3 channels, into float32 NCHW and float16 NHWC. */
    const uint32_t n = 2, h = 4, w = 5, c = 3, total = n * h * w * c;
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a, r.host, total, r.s1), 0);
    dlc__hd_conv cv = {.src = r.a, .dst = r.b, .n = n, .h = h, .w = w, .c = c};
    cv.dtype = DLC__HD_FLOAT32;
    cv.layout = DLC__HD_NCHW;
    for (int k = 0; k < 4; k++)
        cv.mean[k] = 0.25f * (float)k, cv.std[k] = 0.5f + 0.1f * (float)k;
    cr_assert_eq(r.o->convert(r.ctx, &cv, r.s1), 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s1), 0);
    const float *f = (const float *)r.b;
    for (uint32_t img = 0; img < n; img++)
        for (uint32_t ch = 0; ch < c; ch++)
            for (uint32_t p = 0; p < h * w; p++) {
                const uint8_t x = r.host[(img * h * w + p) * c + ch];
                const float want = dlc__hd_norm(x, cv.mean[ch], cv.std[ch]);
                cr_assert_eq(memcmp(&f[(img * c + ch) * h * w + p], &want, 4), 0);
            }
    cv.dtype = DLC__HD_FLOAT16;
    cv.layout = DLC__HD_NHWC;
    cr_assert_eq(r.o->convert(r.ctx, &cv, r.s1), 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s1), 0);
    const uint16_t *hf = (const uint16_t *)r.b;
    for (uint32_t i = 0; i < total; i++)
        cr_assert_eq(hf[i],
                     dlc__hd_f32_to_f16(dlc__hd_norm(r.host[i], cv.mean[i % c], cv.std[i % c])));
    /* A destination past the end of its block is refused, as a bad pointer. */
    cv.dst = r.b + SZ - 16;
    cr_assert_eq(r.o->convert(r.ctx, &cv, r.s1), DEVSIM_EPTR);
    cv.dst = r.b;
    cv.c = 5;
    cr_assert_eq(r.o->convert(r.ctx, &cv, r.s1), DEVSIM_EINVAL);
    rig_close(&r, 0);
}

Test(devsim, catches_a_missing_event_between_streams)
{
    rig r;
    rig_open(&r, 50);
    dlc__hd_conv cv = {.src = r.a, .dst = r.b, .n = 1, .h = 8, .w = 8, .c = 3};
    /* A convert reading A on s1 (held, so it is slow), then a copy into A on s2 without a wait:
     * the copy overwrites what the convert has not read yet. */
    devsim_stream_pause(r.sim, r.s1, 1);
    cr_assert_eq(r.o->convert(r.ctx, &cv, r.s1), 0);
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a, r.host, 64, r.s2), 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s2), 0);
    devsim_stream_pause(r.sim, r.s1, 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s1), 0);
    devsim_stats st;
    devsim_get_stats(r.sim, &st);
    cr_assert_eq(st.hazards, 1);
    const char *msg = devsim_first_hazard(r.sim);
    cr_assert(strstr(msg, "copy_h2d") && strstr(msg, "convert") && strstr(msg, "writing device"),
              "%s", msg);

    /* The same with the convert's event waited for on s2: ordered, no hazard. */
    devsim_stream_pause(r.sim, r.s1, 1);
    cr_assert_eq(r.o->convert(r.ctx, &cv, r.s1), 0);
    cr_assert_eq(r.o->event_record(r.ctx, r.e, r.s1), 0);
    cr_assert_eq(r.o->stream_wait(r.ctx, r.s2, r.e), 0);
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a, r.host, 64, r.s2), 0);
    nap_ms(10);
    devsim_stream_pause(r.sim, r.s1, 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s2), 0);
    devsim_get_stats(r.sim, &st);
    cr_assert_eq(st.hazards, 1, "no new hazard: %s", devsim_first_hazard(r.sim));

    /* Reads of the same bytes on two streams do not conflict; disjoint writes neither. */
    devsim_stream_pause(r.sim, r.s1, 1);
    cr_assert_eq(r.o->copy_d2d(r.ctx, r.b, r.a, 64, r.s1), 0);
    cr_assert_eq(r.o->copy_d2d(r.ctx, r.b + 64, r.a, 64, r.s2), 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s2), 0);
    devsim_stream_pause(r.sim, r.s1, 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s1), 0);
    devsim_get_stats(r.sim, &st);
    cr_assert_eq(st.hazards, 1);
    rig_close(&r, 1);
}

Test(devsim, catches_a_host_source_changed_before_its_copy_ran)
{
    rig r;
    rig_open(&r, 0);
    devsim_stream_pause(r.sim, r.s1, 1);
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a, r.host, SZ, r.s1), 0);
    cr_assert_eq(r.o->event_record(r.ctx, r.e, r.s1), 0);
    r.host[100] ^= 1; /* Refilled before the copy's event. */
    devsim_stream_pause(r.sim, r.s1, 0);
    cr_assert_eq(r.o->event_sync(r.ctx, r.e), 0);
    cr_assert(strstr(devsim_first_hazard(r.sim), "host slot changed"), "%s",
              devsim_first_hazard(r.sim));
    /* Changed after the event: fine. */
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a, r.host, SZ, r.s1), 0);
    cr_assert_eq(r.o->event_record(r.ctx, r.e, r.s1), 0);
    cr_assert_eq(r.o->event_sync(r.ctx, r.e), 0);
    r.host[100] ^= 1;
    rig_close(&r, 1);
}

Test(devsim, refuses_memory_and_handles_it_does_not_own)
{
    rig r;
    rig_open(&r, 0);
    uint8_t *plain = malloc(SZ);
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a, plain, SZ, r.s1), DEVSIM_EPTR, "not pinned");
    cr_assert_eq(r.o->copy_h2d(r.ctx, plain, r.host, SZ, r.s1), DEVSIM_EPTR, "not device");
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a + 1, r.host, SZ, r.s1), DEVSIM_EPTR, "past the end");
    cr_assert_eq(r.o->copy_d2d(r.ctx, r.a, r.host, 16, r.s1), DEVSIM_EPTR, "host as device");
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a, r.host, SZ, plain), DEVSIM_EHANDLE);
    cr_assert_eq(r.o->event_record(r.ctx, plain, r.s1), DEVSIM_EHANDLE);
    cr_assert_eq(r.o->event_query(r.ctx, plain), DEVSIM_EHANDLE);
    cr_assert(strstr(r.o->errstr(r.ctx, DEVSIM_EPTR), "pointer"));
    cr_assert(devsim_is_pinned(r.sim, r.host + 10, 10));
    cr_assert(devsim_is_device(r.sim, r.a, SZ));
    cr_assert_not(devsim_is_device(r.sim, r.a, SZ + 1));
    free(plain);
    rig_close(&r, 0);
}

Test(devsim, faults_surface_sync_async_and_sticky)
{
    rig r;
    rig_open(&r, 20);
    /* Synchronous: the second call fails and does nothing, the third works. */
    devsim_fault(r.sim, DEVSIM_OP_COPY_H2D, 2, DEVSIM_FAULT_SYNC);
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a, r.host, SZ, r.s1), 0);
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a, r.host, SZ, r.s1), DEVSIM_EFAULT);
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a, r.host, SZ, r.s1), 0);
    cr_assert(strstr(r.o->errstr(r.ctx, DEVSIM_EFAULT), "injected"));
    cr_assert(strstr(devsim_last_fault(r.sim), "copy_h2d"), "%s", devsim_last_fault(r.sim));

    /* Asynchronous: the convert returns 0, writes nothing when it runs, and the next call
     * reports it once. */
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s1), 0);
    memset(r.host, 0, SZ);
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.b, r.host, SZ, r.s1), 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s1), 0);
    devsim_fault(r.sim, DEVSIM_OP_CONVERT, 1, DEVSIM_FAULT_ASYNC);
    dlc__hd_conv cv = {.src = r.a, .dst = r.b, .n = 1, .h = 8, .w = 8, .c = 3};
    cr_assert_eq(r.o->convert(r.ctx, &cv, r.s1), 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s1), DEVSIM_EASYNC);
    cr_assert_eq(r.b[0], 0, "the failed convert wrote nothing");
    cr_assert_eq(r.o->event_query(r.ctx, r.e), 0, "reported once");

    /* An asynchronous error reaches the next call of any operation, from any thread. */
    devsim_fault(r.sim, DEVSIM_OP_COPY_D2D, 1, DEVSIM_FAULT_ASYNC);
    devsim_stream_pause(r.sim, r.s2, 1);
    cr_assert_eq(r.o->copy_d2d(r.ctx, r.b, r.a, 16, r.s2), 0);
    cr_assert_eq(r.o->event_record(r.ctx, r.e, r.s2), 0);
    devsim_stream_pause(r.sim, r.s2, 0);
    cr_assert_eq(r.o->event_sync(r.ctx, r.e), DEVSIM_EASYNC);

    /* Sticky: every later call fails, host waits return at once, frees still work. */
    devsim_fault(r.sim, DEVSIM_OP_EVENT_RECORD, 1, DEVSIM_FAULT_STICKY);
    devsim_stream_pause(r.sim, r.s2, 1);
    cr_assert_eq(r.o->event_record(r.ctx, r.e, r.s1), 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s1), DEVSIM_ESTICKY);
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a, r.host, SZ, r.s2), DEVSIM_ESTICKY);
    cr_assert_eq(r.o->event_query(r.ctx, r.e), DEVSIM_ESTICKY);
    void *p;
    cr_assert_eq(r.o->dev_alloc(r.ctx, 16, &p), DEVSIM_ESTICKY);
    devsim_stats st;
    devsim_get_stats(r.sim, &st);
    cr_assert_eq(st.faults_fired, 4);
    cr_assert_geq(st.errors, 7);
    devsim_stream_pause(r.sim, r.s2, 0);
    devsim_clear_error(r.sim);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s2), 0);
    rig_close(&r, 0);
}

Test(devsim, leaks_and_bad_frees_are_counted)
{
    devsim *sim = devsim_create(NULL);
    const dlc__devops *o = devsim_ops(sim);
    cr_assert_eq(o->set_device(o->ctx, 0), 0);
    void *d, *h, *s, *e, *d2;
    cr_assert_eq(o->dev_alloc(o->ctx, 100, &d), 0);
    cr_assert_eq(o->dev_alloc(o->ctx, 100, &d2), 0);
    cr_assert_eq(o->host_alloc(o->ctx, 100, &h), 0);
    cr_assert_eq(o->stream_create(o->ctx, &s), 0);
    cr_assert_eq(o->event_create(o->ctx, &e), 0);
    cr_assert_eq(o->copy_h2d(o->ctx, d, h, 100, s), 0);
    o->dev_free(o->ctx, d2);
    o->dev_free(o->ctx, d2); /* Twice. */
    char buf[512];
    cr_assert(strstr(devsim_problems(sim, buf, sizeof buf), "not live"), "%s", buf);
    devsim_stats st;
    devsim_destroy(sim, &st);
    cr_assert_eq(st.live_dev_blocks, 1);
    cr_assert_eq(st.live_host_blocks, 1);
    cr_assert_eq(st.live_streams, 1);
    cr_assert_eq(st.live_events, 1);
    cr_assert_eq(st.stray_calls, 0);
}

static void *stray_thread(void *arg)
{
    const dlc__devops *o = arg;
    void *e;
    if (o->event_create(o->ctx, &e) == 0)
        o->event_destroy(o->ctx, e);
    return NULL;
}

Test(devsim, stray_contexts_devices_and_enter_leave)
{
    devsim_opts opts;
    devsim_opts_init(&opts);
    opts.devices = 2;
    devsim *sim = devsim_create(&opts);
    const dlc__devops *o = devsim_ops(sim);
    int n = -1;
    char why[64] = "";
    cr_assert_eq(o->device_count(o->ctx, &n, why, sizeof why), 0);
    cr_assert_eq(n, 2);
    cr_assert_eq(o->set_device(o->ctx, 2), DEVSIM_EDEVICE);

    /* A thread that never made a device current: both of its calls are stray. */
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, stray_thread, (void *)o), 0);
    pthread_join(t, NULL);
    devsim_stats st;
    devsim_get_stats(sim, &st);
    cr_assert_eq(st.stray_calls, 2);

    /* enter/leave restore exactly what was current, including nothing. */
    void *outer, *inner, *ev;
    cr_assert_eq(o->device_enter(o->ctx, 1, &outer), 0);
    cr_assert_eq(o->device_enter(o->ctx, 0, &inner), 0);
    cr_assert_eq(o->event_create(o->ctx, &ev), 0);
    o->device_leave(o->ctx, inner);
    /* Back on device 1: a record on a stream of device 1 is on the right device. */
    void *s1;
    cr_assert_eq(o->stream_create(o->ctx, &s1), 0);
    cr_assert_eq(o->event_record(o->ctx, ev, s1), 0);
    cr_assert_eq(o->event_sync(o->ctx, ev), 0);
    devsim_get_stats(sim, &st);
    cr_assert_eq(st.wrong_device, 0);
    /* And device 0 current with a stream of device 1: counted. */
    cr_assert_eq(o->device_enter(o->ctx, 0, &inner), 0);
    cr_assert_eq(o->event_record(o->ctx, ev, s1), 0);
    o->device_leave(o->ctx, inner);
    devsim_get_stats(sim, &st);
    cr_assert_eq(st.wrong_device, 1);
    cr_assert_eq(st.enter_depth, 1);
    o->event_destroy(o->ctx, ev);
    o->stream_destroy(o->ctx, s1);
    o->device_leave(o->ctx, outer);
    devsim_get_stats(sim, &st);
    cr_assert_eq(st.enter_depth, 0);
    cr_assert_eq(st.stray_calls, 2);
    /* No device current again: this call is stray. */
    double secs = -1;
    cr_assert_eq(o->bench_h2d(o->ctx, 1 << 16, 4, &secs), 0);
    cr_assert_geq(secs, 0);
    devsim_destroy(sim, &st);
    cr_assert_eq(st.stray_calls, 3);
    cr_assert_eq(st.live_streams + st.live_events, 0);

    opts.devices = 0;
    sim = devsim_create(&opts);
    o = devsim_ops(sim);
    cr_assert_eq(o->device_count(o->ctx, &n, why, sizeof why), 0);
    cr_assert_eq(n, 0);
    cr_assert(strstr(why, "no devices"), "%s", why);
    devsim_destroy(sim, NULL);
}

Test(devsim, event_destroyed_with_records_pending)
{
    rig r;
    rig_open(&r, 100);
    void *e2;
    cr_assert_eq(r.o->event_create(r.ctx, &e2), 0);
    cr_assert_eq(r.o->copy_h2d(r.ctx, r.a, r.host, SZ, r.s1), 0);
    cr_assert_eq(r.o->event_record(r.ctx, e2, r.s1), 0);
    cr_assert_eq(r.o->stream_wait(r.ctx, r.s2, e2), 0);
    r.o->event_destroy(r.ctx, e2);
    cr_assert_eq(r.o->copy_d2d(r.ctx, r.b, r.a, SZ, r.s2), 0);
    cr_assert_eq(r.o->stream_sync(r.ctx, r.s2), 0);
    cr_assert_eq(memcmp(r.b, r.host, SZ), 0);
    rig_close(&r, 0);
}
