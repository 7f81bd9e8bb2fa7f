/* device_stress: the loader's device path on the CPU stand-in of the device (devsim.c) under
 * ThreadSanitizer, without Criterion (its runner cannot start under TSan, Snaipe/Criterion#274).
 * Each round draws a configuration (staging 1-3, prefetch 1-4, threads 1-3, batch 3-9, dtype,
 * device layout, a store of images or one of many fields) and runs several epochs with random
 * delays on the sim's streams, on the caller's stream and on the consumer's thread; each batch
 * is emitted or read in lend mode, at random, and compared byte for byte with the host loader's
 * batch; some epochs are cut short by set_epoch, and loaders are closed with work in flight. The
 * sim must report no hazard, no stray call and nothing left after close. The random seed comes
 * from DLC_STRESS_SEED (default 1), so a failure replays. Exit status 0 = pass. Run by ctest
 * with the labels "unit;threads" (cmake/devsim.cmake). */
#include "devsim.h"
#include "internal.h"
#include "test_util.h"

#include <dlcache/loader.h>
#include <dlcache/store.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXF 16
#define ROUNDS 16

static char *dir, *img_path, *fields_path;
static uint64_t rng_state;
static char where[200];
static uint64_t total_batches, total_ops;
static devsim *current_sim; /* For the hazards behind a wrong byte. */

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fail(__FILE__, __LINE__, #cond);                                                       \
    } while (0)

static void fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "%s:%d: failed: %s [%s] (%s)\n", file, line, what, where, dlc_errmsg());
    if (current_sim) {
        char buf[1024];
        fprintf(stderr, "the sim: %s\n", devsim_problems(current_sim, buf, sizeof buf));
    }
    exit(1);
}

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)((rng_state >> 33) % n);
}

static void nap_us(uint32_t us)
{
    const struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000};
    nanosleep(&ts, NULL);
}

typedef struct rig {
    devsim *sim;
    const dlc__devops *o;
    void *ctx;
    void *stream;
} rig;

static void enter(rig *r, void **saved)
{
    REQUIRE(r->o->device_enter(r->ctx, 0, saved) == 0);
}

static void *dalloc(rig *r, size_t bytes)
{
    void *saved, *p = NULL;
    enter(r, &saved);
    REQUIRE(r->o->dev_alloc(r->ctx, bytes ? bytes : 1, &p) == 0);
    r->o->device_leave(r->ctx, saved);
    return p;
}

static void dfree(rig *r, void *p)
{
    void *saved;
    enter(r, &saved);
    r->o->dev_free(r->ctx, p);
    r->o->device_leave(r->ctx, saved);
}

static void dsync(rig *r)
{
    void *saved;
    enter(r, &saved);
    REQUIRE(r->o->stream_sync(r->ctx, r->stream) == 0);
    r->o->device_leave(r->ctx, saved);
}

/* Output @p bf of the host batch against @p data, written by the device in @p layout. */
static void compare(const dlc_batch_field *bf, uint32_t layout, const uint8_t *data)
{
    if (layout == bf->layout) {
        REQUIRE(memcmp(data, bf->data, bf->bytes) == 0);
        return;
    }
    const uint32_t k = bf->ndim - 3;
    const int host_nchw = bf->layout == DLC_LAYOUT_NCHW;
    const uint64_t C = host_nchw ? bf->shape[k] : bf->shape[k + 2];
    const uint64_t H = host_nchw ? bf->shape[k + 1] : bf->shape[k];
    const uint64_t W = host_nchw ? bf->shape[k + 2] : bf->shape[k + 1];
    uint64_t lead = 1;
    for (uint32_t j = 0; j < k; j++)
        lead *= bf->shape[j];
    const size_t es = dlc_dtype_size(bf->dtype);
    const uint8_t *hp = bf->data;
    for (uint64_t l = 0; l < lead; l++)
        for (uint64_t ch = 0; ch < C; ch++)
            for (uint64_t y = 0; y < H; y++)
                for (uint64_t x = 0; x < W; x++) {
                    const uint64_t chw = ((l * C + ch) * H + y) * W + x;
                    const uint64_t hwc = ((l * H + y) * W + x) * C + ch;
                    REQUIRE(memcmp(hp + (host_nchw ? chw : hwc) * es,
                                   data + (host_nchw ? hwc : chw) * es, es) == 0);
                }
}

/* Emit @p db (all outputs, lengths, offsets, record numbers) and compare after a sync. */
static void emit_batch(rig *r, dlc_loader *dl, const dlc_device_batch *db, const dlc_batch *hb)
{
    dlc_device_dst dst[MAXF];
    uint32_t layout[MAXF];
    memset(dst, 0, sizeof dst);
    REQUIRE(db->num_fields <= MAXF && db->num_fields == hb->num_fields);
    const uint32_t nf = db->num_fields, n = db->count;
    for (uint32_t i = 0; i < nf; i++) {
        const dlc_device_field *f = &db->fields[i];
        REQUIRE(f->bytes == hb->fields[i].bytes && f->dtype == hb->fields[i].dtype);
        layout[i] = f->layout;
        dst[i].data = dalloc(r, f->bytes);
        if (f->lengths)
            dst[i].lengths = dalloc(r, n * sizeof(int64_t));
        if (f->offsets)
            dst[i].offsets = dalloc(r, (n + 1) * sizeof(int64_t));
    }
    void *indices = dalloc(r, n * sizeof(uint64_t));
    nap_us(rnd(200));
    REQUIRE(dlc_loader_device_emit(dl, db, rnd(4) ? r->stream : NULL, dst, indices) == DLC_OK);
    nap_us(rnd(200));
    dsync(r);
    void *saved;
    enter(r, &saved);
    REQUIRE(r->o->stream_sync(r->ctx, NULL) == 0); /* The default stream, when it was used. */
    r->o->device_leave(r->ctx, saved);
    for (uint32_t i = 0; i < nf; i++) {
        const dlc_batch_field *bf = &hb->fields[i];
        compare(bf, layout[i], dst[i].data);
        if (dst[i].lengths)
            REQUIRE(memcmp(dst[i].lengths, bf->lengths, n * sizeof(int64_t)) == 0);
        if (dst[i].offsets)
            REQUIRE(memcmp(dst[i].offsets, bf->offsets, (n + 1) * sizeof(int64_t)) == 0);
        dfree(r, dst[i].data);
        if (dst[i].lengths)
            dfree(r, dst[i].lengths);
        if (dst[i].offsets)
            dfree(r, dst[i].offsets);
    }
    REQUIRE(memcmp(indices, hb->indices, n * sizeof(uint64_t)) == 0);
    dfree(r, indices);
}

/* Lend mode: wait, copy the staged bytes on the caller's stream, release, compare (uint8 NHWC
 * staging against the host batch, only for outputs the host also has as uint8). */
static void lend_batch(rig *r, dlc_loader *dl, const dlc_device_batch *db, const dlc_batch *hb)
{
    REQUIRE(dlc_loader_device_wait(dl, db, r->stream) == DLC_OK);
    const uint32_t nf = db->num_fields, n = db->count;
    void *copies[MAXF];
    int same[MAXF];
    void *saved;
    enter(r, &saved);
    for (uint32_t i = 0; i < nf; i++) {
        const dlc_device_field *f = &db->fields[i];
        same[i] = hb->fields[i].dtype == DLC_DTYPE_UINT8 || f->kind != DLC_FIELD_IMAGE;
        REQUIRE(r->o->dev_alloc(r->ctx, f->staged_bytes + 1, &copies[i]) == 0);
        REQUIRE(r->o->copy_d2d(r->ctx, copies[i], f->staged, f->staged_bytes, r->stream) == 0);
    }
    void *labels;
    REQUIRE(r->o->dev_alloc(r->ctx, n * 8, &labels) == 0);
    REQUIRE(r->o->copy_d2d(r->ctx, labels, db->staged_labels, n * 8, r->stream) == 0);
    r->o->device_leave(r->ctx, saved);
    nap_us(rnd(300));
    REQUIRE(dlc_loader_device_release(dl, db, rnd(3) ? r->stream : NULL) == DLC_OK);
    dsync(r);
    for (uint32_t i = 0; i < nf; i++) {
        if (same[i])
            REQUIRE(memcmp(copies[i], hb->fields[i].data, hb->fields[i].bytes) == 0);
        dfree(r, copies[i]);
    }
    REQUIRE(memcmp(labels, hb->labels, n * 8) == 0);
    dfree(r, labels);
}

static void round_run(unsigned round)
{
    devsim_opts opts;
    devsim_opts_init(&opts);
    opts.seed = rng_state ^ round;
    opts.max_delay_us = 50 + rnd(400);
    opts.call_delay_us = rnd(2) ? rnd(150) : 0;
    rig r = {0};
    r.sim = current_sim = devsim_create(&opts);
    REQUIRE(r.sim);
    r.o = devsim_ops(r.sim);
    r.ctx = r.o->ctx;
    void *saved;
    enter(&r, &saved);
    REQUIRE(r.o->stream_create(r.ctx, &r.stream) == 0);
    r.o->device_leave(r.ctx, saved);
    devsim_stream_delay(r.sim, r.stream, rnd(1000));

    const int fields = rnd(3) == 0;
    dlc_loader_config c;
    dlc_loader_config_init(&c);
    c.batch_size = 3 + rnd(7);
    c.prefetch = 1 + rnd(4);
    c.threads = 1 + rnd(3);
    c.device_staging = 1 + rnd(3);
    c.seed = round;
    c.crop_h = 12;
    c.crop_w = 10;
    c.io = DLC_IO_MMAP;
    c.sampler = rnd(2) ? DLC_SAMPLER_SHUFFLE : DLC_SAMPLER_SEQUENTIAL;
    const uint32_t dtypes[] = {DLC_DTYPE_UINT8, DLC_DTYPE_FLOAT32, DLC_DTYPE_FLOAT16};
    c.dtype = dtypes[rnd(3)];
    c.device_layout = rnd(3);
    dlc_field_option opt = {.name = "tokens", .variable = rnd(3), .max_len = 4};
    if (fields) {
        c.field_options = &opt;
        c.num_field_options = 1;
    }
    snprintf(where, sizeof where,
             "round %u: %s batch %u prefetch %u threads %u staging %u dtype %u layout %u", round,
             fields ? "fields" : "images", c.batch_size, c.prefetch, c.threads, c.device_staging,
             c.dtype, c.device_layout);
    const char *path = fields ? fields_path : img_path;
    dlc_loader *hl, *dl;
    c.device = -1;
    REQUIRE(dlc_loader_open(path, &c, &hl) == DLC_OK);
    c.device = 0;
    REQUIRE(dlc__loader_open_with(path, &c, r.o, &dl) == DLC_OK);
    REQUIRE(dlc_loader_device(dl, NULL) == 0);

    const uint32_t epochs = 2 + rnd(2);
    for (uint64_t ep = 0; ep < epochs; ep++) {
        REQUIRE(dlc_loader_set_epoch(hl, ep) == DLC_OK);
        REQUIRE(dlc_loader_set_epoch(dl, ep) == DLC_OK);
        /* Some epochs stop early: the next set_epoch drops what is in flight. */
        const uint32_t stop = rnd(4) == 0 ? 1 + rnd(4) : UINT32_MAX;
        dlc_batch hb;
        dlc_device_batch db;
        dlc_status rc;
        uint32_t k = 0;
        while ((rc = dlc_loader_next(hl, &hb)) == DLC_OK && k++ < stop) {
            if (rnd(2))
                nap_us(rnd(300));
            if (rnd(2)) {
                REQUIRE(dlc_loader_next_device(dl, &db) == DLC_OK);
            } else {
                /* The sliced wait, in slices of 0 or 1 ms: DLC_AGAIN while the batch stages. */
                while ((rc = dlc_loader_next_device_wait(dl, &db, rnd(2))) == DLC_AGAIN)
                    REQUIRE(db.count == 0);
                REQUIRE(rc == DLC_OK);
            }
            REQUIRE(db.count == hb.count && db.batch_index == hb.batch_index);
            REQUIRE(memcmp(db.indices, hb.indices, hb.count * 8) == 0);
            REQUIRE(memcmp(db.labels, hb.labels, hb.count * 8) == 0);
            total_batches++;
            switch (rnd(6)) {
            case 0:
            case 1:
                lend_batch(&r, dl, &db, &hb);
                break;
            case 2:
                nap_us(2000 + rnd(5000)); /* Hold it while the others run ahead. */
                emit_batch(&r, dl, &db, &hb);
                break;
            default:
                emit_batch(&r, dl, &db, &hb);
            }
        }
        if (stop == UINT32_MAX) {
            REQUIRE(rc == DLC_END);
            REQUIRE(dlc_loader_next_device(dl, &(dlc_device_batch){0}) == DLC_END);
        }
    }
    /* Close with work in flight: a batch emitted into memory still being converted, or lent. */
    dlc_device_batch db;
    void *last = NULL;
    if (dlc_loader_next_device(dl, &db) == DLC_OK && rnd(2)) {
        dlc_device_dst dst[MAXF];
        memset(dst, 0, sizeof dst);
        last = dst[0].data = dalloc(&r, db.fields[0].bytes);
        REQUIRE(dlc_loader_device_emit(dl, &db, r.stream, dst, NULL) == DLC_OK);
    }
    dlc_loader_close(dl);
    dlc_loader_close(hl);
    dsync(&r);
    if (last)
        dfree(&r, last);
    enter(&r, &saved);
    r.o->stream_destroy(r.ctx, r.stream);
    r.o->device_leave(r.ctx, saved);
    char buf[1024];
    devsim_problems(r.sim, buf, sizeof buf);
    devsim_stats st;
    devsim_destroy(r.sim, &st);
    current_sim = NULL;
    total_ops += st.executed;
    if (buf[0]) {
        fprintf(stderr, "%s: %s\n", where, buf);
        exit(1);
    }
    REQUIRE(st.hazards == 0 && st.stray_calls == 0 && st.busy_frees == 0);
}

int main(void)
{
    const char *seed = getenv("DLC_STRESS_SEED");
    rng_state = seed ? strtoull(seed, NULL, 10) : 1;
    dir = tu_mkdtemp();
    TU_REQUIRE(dir);
    img_path = tu_path(dir, "images.dlc");
    fields_path = tu_path(dir, "fields.dlc");
    TU_REQUIRE(img_path && fields_path);
    TU_REQUIRE(tu_make_store(img_path, 41, 16, 14, 4, 0) == DLC_OK);
    TU_REQUIRE(tu_make_fields_store(fields_path, 29, 16, 14) == DLC_OK);
    for (unsigned round = 0; round < ROUNDS; round++)
        round_run(round);
    tu_rmtree(dir);
    free(dir);
    free(img_path);
    free(fields_path);
    printf("device_stress: ok (%llu batches, %llu device operations)\n",
           (unsigned long long)total_batches, (unsigned long long)total_ops);
    return 0;
}
