/* Workers: claim samples of the oldest filling slot in chunks with an atomic counter, and write
 * each one, cropped, flipped and converted, straight to its place in the batch. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Samples claimed at a time: few enough that the last batch spreads over the workers, enough
 * that the shared counter is touched rarely. */
#define CHUNK 4u
/* A claim counter at or beyond this value means "abandoned" (set by a reset). */
#define CLAIM_KILLED 0x40000000u

static int test_bit(_Atomic uint64_t *bits, uint64_t i)
{
    return (atomic_load_explicit(&bits[i / 64], memory_order_relaxed) >> (i % 64)) & 1u;
}

static void set_bit(_Atomic uint64_t *bits, uint64_t i)
{
    atomic_fetch_or_explicit(&bits[i / 64], 1ull << (i % 64), memory_order_relaxed);
}

/* Checksum policy for one record whose payload sits at @p payload. */
static dlc_status check_record(dlc_loader *l, const dlc_record *rec, const uint8_t *payload)
{
    const uint32_t mode = l->cfg.verify;
    if (mode == DLC_VERIFY_OFF)
        return DLC_OK;
    if (test_bit(l->verified_bad, rec->index))
        return dlc__errorf(DLC_ECORRUPT, "%s: record %llu: checksum mismatch (found earlier)",
                           l->path, (unsigned long long)rec->index);
    if (mode == DLC_VERIFY_FIRST && test_bit(l->verified_ok, rec->index))
        return DLC_OK;
    dlc_record r = *rec;
    r.data = payload; /* In direct mode the bytes that will be used are the buffer's. */
    const dlc_status rc = dlc_record_verify(l->store, &r);
    set_bit(rc == DLC_OK ? l->verified_ok : l->verified_bad, rec->index);
    return rc;
}

/* A deterministic good stand-in for the corrupt sample at global position @p pos. */
static dlc_status replace(dlc_loader *l, dlc__worker *w, const dlc__slot *s, uint64_t pos,
                          uint64_t bad_index, dlc_record *rec, const uint8_t **payload)
{
    dlc__rng r = {dlc__key4(DLC__KEY_REPLACE, s->seed, s->epoch, pos), 0};
    for (int attempt = 0; attempt < 64; attempt++) {
        const uint64_t idx = dlc__rng_below(&r, l->info->count);
        if (idx == bad_index)
            continue;
        if (dlc_store_read(w->reader, idx, rec) != DLC_OK)
            continue;
        if (l->cfg.verify != DLC_VERIFY_OFF && check_record(l, rec, rec->data) != DLC_OK)
            continue;
        *payload = rec->data;
        atomic_fetch_add_explicit(&l->st_replaced, 1, memory_order_relaxed);
        return DLC_OK;
    }
    return dlc__errorf(DLC_ECORRUPT,
                       "%s: record %llu is corrupt and 64 candidate replacements failed too",
                       l->path, (unsigned long long)bad_index);
}

static dlc_status ensure_scratch(dlc__worker *w, size_t need)
{
    if (need <= w->scratch_size)
        return DLC_OK;
    /* Grows to the largest box seen and stays: a steady stream allocates nothing. */
    void *p = NULL;
    if (posix_memalign(&p, 64, need))
        return dlc__errorf(-ENOMEM, "loader: out of memory for %zu bytes of resize scratch", need);
    free(w->scratch);
    w->scratch = p;
    w->scratch_size = need;
    return DLC_OK;
}

/* Crop, flip and convert one decoded image (@p src: width x height, rows @p stride apart). */
static dlc_status augment(dlc_loader *l, dlc__worker *w, const dlc__slot *s, uint64_t pos,
                          const dlc_record *rec, const uint8_t *src, uint32_t width,
                          uint32_t height, size_t stride, void *dst)
{
    const dlc_loader_config *c = &l->cfg;
    dlc__rng r = {dlc__key4(DLC__KEY_AUGMENT, s->seed, s->epoch, pos), 0};
    const uint32_t oh = l->out_h, ow = l->out_w, C = l->out_c;
    if (c->augment != DLC_AUGMENT_RANDOM_RESIZED_CROP) {
        if (width < ow || height < oh)
            return dlc__errorf(DLC_EINVAL,
                               "%s: record %llu: its %ux%u image is smaller than the %ux%u crop",
                               l->path, (unsigned long long)rec->index, width, height, ow, oh);
        const dlc__box box = c->augment == DLC_AUGMENT_CENTER_CROP
                                 ? dlc__center_box(width, height, ow, oh)
                                 : dlc__random_box(width, height, ow, oh, &r);
        const int flip = c->flip_prob > 0 && dlc__rng_uniform(&r) < c->flip_prob;
        dlc__crop_convert(src, stride, box, flip, &l->cv, dst);
        return DLC_OK;
    }
    const dlc__box box = dlc__rrc_params(width, height, c->rrc_scale, c->rrc_ratio, &r);
    const int flip = c->flip_prob > 0 && dlc__rng_uniform(&r) < c->flip_prob;
    dlc_status rc = ensure_scratch(w, dlc_resize_scratch_bound(box.w, box.h, ow, oh, C));
    if (rc != DLC_OK)
        return rc;
    const dlc_image in = {(uint8_t *)src, width, height, C, stride};
    /* Without flip or conversion the resize writes the final sample itself; otherwise it
     * writes a small staging image that the convert pass reads once. */
    const int direct = !flip && l->cv.dtype == DLC_DTYPE_UINT8;
    const dlc_image out = {direct ? dst : w->tmp, ow, oh, C, (size_t)ow * C};
    rc = dlc_resize(&in, box.left, box.top, box.w, box.h, &out, w->scratch, w->scratch_size);
    if (rc != DLC_OK)
        return rc;
    if (!direct) {
        const dlc__box all = {0, 0, oh, ow};
        dlc__crop_convert(w->tmp, (size_t)ow * C, all, flip, &l->cv, dst);
    }
    return DLC_OK;
}

static dlc_status decode_and_augment(dlc_loader *l, dlc__worker *w, const dlc__slot *s,
                                     uint64_t pos, const dlc_record *rec, const uint8_t *payload,
                                     void *dst)
{
    if (rec->encoding == DLC_ENCODING_RAW) {
        if (rec->channels != l->out_c)
            return dlc__errorf(DLC_ECORRUPT, "%s: record %llu: %u channels, the store says %u",
                               l->path, (unsigned long long)rec->index, rec->channels, l->out_c);
        return augment(l, w, s, pos, rec, payload, rec->width, rec->height,
                       (size_t)rec->width * rec->channels, dst);
    }
    /* JPEG: decode with DCT scaling where the crop allows it. The crop box is drawn on the
     * header's full-size dimensions, so the random stream is the same whatever the scale. */
    uint32_t min_w = 0, min_h = 0;
    if (l->cfg.augment == DLC_AUGMENT_RANDOM_RESIZED_CROP) {
        dlc__rng r = {dlc__key4(DLC__KEY_AUGMENT, s->seed, s->epoch, pos), 0};
        const dlc__box box =
            dlc__rrc_params(rec->width, rec->height, l->cfg.rrc_scale, l->cfg.rrc_ratio, &r);
        min_w = (uint32_t)(((uint64_t)rec->width * l->out_w + box.w - 1) / box.w);
        min_h = (uint32_t)(((uint64_t)rec->height * l->out_h + box.h - 1) / box.h);
    }
    dlc_image img;
    dlc_status rc = dlc_jpeg_decode(w->codec, payload, rec->size, min_w, min_h, &img);
    if (rc != DLC_OK)
        return dlc__errorf(rc, "%s: record %llu: %s", l->path, (unsigned long long)rec->index,
                           dlc_errmsg());
    if (img.width == rec->width && img.height == rec->height)
        return augment(l, w, s, pos, rec, img.data, img.width, img.height, img.stride, dst);
    if (!min_w || img.width > rec->width || img.height > rec->height)
        return dlc__errorf(
            DLC_ECORRUPT, "%s: record %llu: the JPEG is %ux%u, its header says %ux%u", l->path,
            (unsigned long long)rec->index, img.width, img.height, rec->width, rec->height);
    /* Scaled decode: map the box into the smaller image and resize from there. */
    const dlc_loader_config *c = &l->cfg;
    dlc__rng r = {dlc__key4(DLC__KEY_AUGMENT, s->seed, s->epoch, pos), 0};
    const dlc__box box = dlc__rrc_params(rec->width, rec->height, c->rrc_scale, c->rrc_ratio, &r);
    const int flip = c->flip_prob > 0 && dlc__rng_uniform(&r) < c->flip_prob;
    const double sx = (double)img.width / rec->width, sy = (double)img.height / rec->height;
    const uint32_t ow = l->out_w, oh = l->out_h, C = l->out_c;
    const uint32_t bw = (uint32_t)(box.w * sx + 1), bh = (uint32_t)(box.h * sy + 1);
    rc = ensure_scratch(w, dlc_resize_scratch_bound(bw, bh, ow, oh, C));
    if (rc != DLC_OK)
        return rc;
    const int direct = !flip && l->cv.dtype == DLC_DTYPE_UINT8;
    const dlc_image out = {direct ? dst : w->tmp, ow, oh, C, (size_t)ow * C};
    rc = dlc_resize(&img, box.left * sx, box.top * sy, box.w * sx, box.h * sy, &out, w->scratch,
                    w->scratch_size);
    if (rc != DLC_OK)
        return rc;
    if (!direct) {
        const dlc__box all = {0, 0, oh, ow};
        dlc__crop_convert(w->tmp, (size_t)ow * C, all, flip, &l->cv, dst);
    }
    return DLC_OK;
}

static void slot_fail(dlc_loader *l, dlc__slot *s, uint32_t j, dlc_status rc, const char *msg)
{
    pthread_mutex_lock(&l->mu);
    if (s->err == DLC_OK || j < s->err_at) {
        s->err = rc;
        s->err_at = j;
        snprintf(s->errmsg, sizeof s->errmsg, "%s", msg);
    }
    pthread_mutex_unlock(&l->mu);
}

static void process(dlc_loader *l, dlc__worker *w, dlc__slot *s, uint32_t j)
{
    const dlc__sample_io *si = &s->io[j];
    dlc_record rec = si->rec;
    const uint8_t *payload = si->payload;
    dlc_status rc = si->status;
    const char *msg = NULL;
    if (rc == DLC_OK && !payload) {
        rc = dlc__errorf(DLC_ECORRUPT, "%s: record %llu: no payload", l->path,
                         (unsigned long long)rec.index);
    }
    if (rc != DLC_OK && j == s->io_err_at)
        msg = s->io_msg;
    if (rc == DLC_OK)
        rc = check_record(l, &rec, payload);
    if (rc == DLC_ECORRUPT && l->cfg.on_corrupt == DLC_CORRUPT_REPLACE) {
        rc = replace(l, w, s, si->pos, rec.index, &rec, &payload);
        msg = NULL;
    }
    if (rc == DLC_OK)
        rc = decode_and_augment(l, w, s, si->pos, &rec, payload,
                                s->data + (size_t)j * l->sample_bytes);
    if (rc != DLC_OK) {
        slot_fail(l, s, j, rc, msg ? msg : dlc_errmsg());
        return;
    }
    s->labels[j] = rec.label;
    s->indices[j] = rec.index;
}

static dlc_status worker_start(dlc_loader *l, dlc__worker *w)
{
    dlc_status rc = dlc_store_reader_open(l->store, &w->reader);
    if (rc != DLC_OK)
        return rc;
    if (l->info->encoding == DLC_ENCODING_JPEG && (rc = dlc_codec_create(&w->codec)) != DLC_OK)
        return rc;
    const size_t tmp = (size_t)l->out_h * l->out_w * l->out_c;
    w->tmp = malloc(tmp ? tmp : 1);
    if (!w->tmp)
        return dlc__errorf(-ENOMEM, "loader: out of memory for a worker");
    if (l->info->height && l->info->width && l->info->encoding == DLC_ENCODING_RAW &&
        l->cfg.augment == DLC_AUGMENT_RANDOM_RESIZED_CROP)
        return ensure_scratch(w, dlc_resize_scratch_bound(l->info->width, l->info->height, l->out_w,
                                                          l->out_h, l->out_c));
    return DLC_OK;
}

void *dlc__worker_main(void *arg)
{
    dlc__worker *w = arg;
    dlc_loader *l = w->l;
    const dlc_status src = worker_start(l, w);
    pthread_mutex_lock(&l->mu);
    l->ready_workers++;
    if (src != DLC_OK && l->start_rc == DLC_OK) {
        l->start_rc = src;
        snprintf(l->start_msg, sizeof l->start_msg, "%s", dlc_errmsg());
    }
    pthread_cond_broadcast(&l->cv_done);
    for (;;) {
        dlc__slot *s = NULL;
        while (!l->stop) {
            for (uint32_t i = 0; i < l->nslots; i++) {
                dlc__slot *t = &l->slots[i];
                if (t->state == DLC__SLOT_FILL && atomic_load(&t->claim) < t->count &&
                    (!s || t->batch < s->batch))
                    s = t;
            }
            if (s)
                break;
            /* Waiting while a batch is still in the I/O stage is time lost to I/O. */
            int io_pending = 0;
            for (uint32_t i = 0; i < l->nslots; i++)
                io_pending |= l->slots[i].state == DLC__SLOT_IO;
            const uint64_t t0 = io_pending ? dlc__now_ns() : 0;
            pthread_cond_wait(&l->cv_work, &l->mu);
            if (io_pending)
                atomic_fetch_add_explicit(&l->st_io_wait_ns, dlc__now_ns() - t0,
                                          memory_order_relaxed);
        }
        if (l->stop)
            break;
        s->active++;
        const uint32_t count = s->count;
        pthread_mutex_unlock(&l->mu);

        /* The I/O stage checked the store's size before this batch; check once more as this
         * worker joins it, since a batch may wait in the ring (see resolve()). Once per batch
         * and worker, not per sample: the hot path makes no system call. */
        uint64_t now = 0;
        const int shrunk = dlc__store_shrunk(l, &now);
        int finished = 0;
        for (;;) {
            const uint32_t i = atomic_fetch_add(&s->claim, CHUNK);
            if (i >= count)
                break;
            const uint32_t n = count - i < CHUNK ? count - i : CHUNK;
            if (shrunk) {
                char msg[512];
                snprintf(msg, sizeof msg,
                         "%s: record %llu: the store shrank from %llu to %llu bytes while the "
                         "loader was reading it (truncated in place; replace a store by renaming "
                         "a new file over it)",
                         l->path, (unsigned long long)s->io[i].rec.index,
                         (unsigned long long)l->info->file_bytes, (unsigned long long)now);
                slot_fail(l, s, i, DLC_ECHANGED, msg);
            } else {
                for (uint32_t j = i; j < i + n; j++)
                    process(l, w, s, j);
            }
            if (atomic_fetch_add(&s->done, n) + n == count)
                finished = 1;
        }

        pthread_mutex_lock(&l->mu);
        s->active--;
        if (finished)
            s->state = DLC__SLOT_READY;
        if (finished || s->active == 0)
            pthread_cond_broadcast(&l->cv_done);
        if (s->active == 0)
            pthread_cond_broadcast(&l->cv_io);
    }
    pthread_mutex_unlock(&l->mu);
    dlc_store_reader_close(w->reader);
    w->reader = NULL;
    return NULL;
}

void dlc__pipeline_reset(dlc_loader *l, uint64_t seed, uint64_t epoch, uint64_t start)
{
    pthread_mutex_lock(&l->mu);
    l->paused = 1;
    if (l->lent >= 0) {
        l->slots[l->lent].state = DLC__SLOT_FREE;
        l->lent = -1;
    }
    /* Abandon the batches in flight: stop new claims, then wait until no thread is inside a
     * slot, since they write into its buffers. */
    for (;;) {
        int busy = 0;
        for (uint32_t i = 0; i < l->nslots; i++) {
            dlc__slot *s = &l->slots[i];
            if (s->state == DLC__SLOT_FILL)
                atomic_store(&s->claim, CLAIM_KILLED);
            busy |= s->state == DLC__SLOT_IO || s->active > 0;
        }
        if (!busy)
            break;
        pthread_cond_wait(&l->cv_done, &l->mu);
    }
    for (uint32_t i = 0; i < l->nslots; i++)
        l->slots[i].state = DLC__SLOT_FREE;
    dlc__sampler_set_epoch(&l->sampler, seed, epoch);
    dlc__shard_plan(&l->shard, l->sampler.len, start, l->cfg.rank, l->cfg.world_size,
                    l->cfg.batch_size, l->cfg.drop_last);
    const uint64_t per_batch = (uint64_t)l->cfg.world_size * l->cfg.batch_size;
    l->batch_base = start / per_batch;
    l->fill_next = l->cons_next = 0;
    l->paused = 0;
    pthread_cond_broadcast(&l->cv_io);
    pthread_mutex_unlock(&l->mu);
}
