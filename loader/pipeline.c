/* Workers: claim samples of the oldest filling slot in chunks with an atomic counter, and write
 * each one, cropped, flipped and converted, straight to its place in the batch. */
#include "internal.h"
#include "sample_aug.h"
#include "sample.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A claim counter at or beyond this value means "abandoned" (set by a reset). */
#define CLAIM_KILLED 0x40000000u
/* Claims alone never reach it: a batch of at most 2^24 samples, and past its end one more chunk
 * (at most 64) by each of at most 1024 workers (check_config(), dlc__outputs_plan()). */
_Static_assert((1u << 24) + 1024u * 64u < CLAIM_KILLED, "claims cannot pass for a kill");

static int test_bit(_Atomic uint64_t *bits, uint64_t i)
{
    return (atomic_load_explicit(&bits[i / 64], memory_order_relaxed) >> (i % 64)) & 1u;
}

static void set_bit(_Atomic uint64_t *bits, uint64_t i)
{
    atomic_fetch_or_explicit(&bits[i / 64], 1ull << (i % 64), memory_order_relaxed);
}

/* Checksum policy for one record: every selected field, hashed where the worker will read it. */
static dlc_status check_record(dlc_loader *l, const dlc__sample_view *sv)
{
    const uint32_t mode = l->cfg.verify;
    if (mode == DLC_VERIFY_OFF)
        return DLC_OK;
    if (test_bit(l->verified_bad, sv->index))
        return dlc__errorf(DLC_ECORRUPT, "%s: record %llu: checksum mismatch (found earlier)",
                           l->path, (unsigned long long)sv->index);
    if (mode == DLC_VERIFY_FIRST && test_bit(l->verified_ok, sv->index))
        return DLC_OK;
    dlc_status rc = DLC_OK;
    for (uint32_t f = 0; rc == DLC_OK && f < l->info->num_fields; f++) {
        if (!l->selected[f])
            continue;
        dlc_value v = sv->v[f];
        /* In direct mode the bytes that will be used are the buffer's. */
        if (l->fields[f].kind != DLC_FIELD_INT && l->fields[f].kind != DLC_FIELD_FLOAT)
            v.data = dlc__payload(sv, &sv->v[f]);
        rc = dlc_value_verify(l->store, sv->index, f, &v);
    }
    set_bit(rc == DLC_OK ? l->verified_ok : l->verified_bad, sv->index);
    return rc;
}

/* A deterministic good stand-in for the corrupt sample at global position @p pos, read from the
 * map into the worker's own values. */
static dlc_status replace(dlc_loader *l, dlc__worker *w, const dlc__slot *s, uint64_t pos,
                          uint64_t bad_index, dlc__sample_view *sv)
{
    dlc__rng r = {dlc__key4(DLC__KEY_REPLACE, s->seed, s->epoch, pos), 0};
    for (int attempt = 0; attempt < 64; attempt++) {
        /* Streamed, only the batch's shards are on disk: a stand-in from the batch itself, or,
         * where every shard of the batch was refused, from the healthy shard pinned for it. */
        const uint64_t idx =
            !l->stream ? dlc__rng_below(&r, l->info->count)
            : s->standin_count
                ? s->standin_first + dlc__rng_below(&r, s->standin_count)
                : dlc__sampler_at(&l->sampler,
                                  dlc__shard_pos(&l->shard, s->batch * l->shard.batch +
                                                                dlc__rng_below(&r, s->count)));
        /* A set of many shards checked only the batch's for shrinking; a stand-in may be in
         * another, which is checked before its map is touched. */
        uint64_t now;
        if (idx == bad_index ||
            (dlc__io_lists(l) && dlc__file_shrunk(l, dlc_store_record_file(l->store, idx), &now)))
            continue;
        if (dlc_store_read_values(w->reader, idx, w->rvalues) != DLC_OK)
            continue;
        *sv = (dlc__sample_view){w->rvalues, NULL, 0, idx};
        if (check_record(l, sv) != DLC_OK)
            continue;
        atomic_fetch_add_explicit(&l->st_replaced, 1, memory_order_relaxed);
        return DLC_OK;
    }
    return dlc__errorf(DLC_ECORRUPT,
                       "%s: record %llu is corrupt and 64 candidate replacements failed too",
                       l->path, (unsigned long long)bad_index);
}

void dlc__slot_fail(dlc_loader *l, dlc__slot *s, uint32_t j, dlc_status rc, const char *msg)
{
    pthread_mutex_lock(&l->mu);
    if (s->err == DLC_OK || j < s->err_at) {
        s->err = rc;
        s->err_at = j;
        snprintf(s->errmsg, sizeof s->errmsg, "%s", msg);
    }
    pthread_mutex_unlock(&l->mu);
}

/* Payload bytes of the selected fields of a record (the stats' bytes_read). */
static uint64_t selected_bytes(const dlc_loader *l, const dlc_value *v)
{
    uint64_t off;
    size_t len;
    dlc__selected_span(l, v, &off, &len);
    return len;
}

/* Find sample @p j's record, where the I/O thread left that to the workers. */
static void lookup(dlc_loader *l, dlc__worker *w, dlc__slot *s, uint32_t j)
{
    const dlc__shard *sh = &l->shard;
    dlc__sample_io *si = &s->io[j];
    si->pos = dlc__shard_pos(sh, s->batch * sh->batch + j);
    si->index = dlc__sampler_at(&l->sampler, si->pos);
    si->v = s->values + (size_t)j * l->info->num_fields;
    si->span = NULL;
    si->span_off = si->span_len = 0;
    si->status = dlc_store_read_values(w->reader, si->index, si->v);
    /* Counted per worker and added to the stats once per claimed chunk: an atomic add per
     * sample would bounce its cache line between the cores millions of times a second. */
    if (si->status == DLC_OK)
        w->bytes_read += selected_bytes(l, si->v);
}

static void process(dlc_loader *l, dlc__worker *w, dlc__slot *s, uint32_t j)
{
    if (s->lookup_by_workers)
        lookup(l, w, s, j);
    const dlc__sample_io *si = &s->io[j];
    dlc__sample_view sv = {si->v, si->span, si->span_off, si->index};
    dlc_status rc = si->status;
    const char *msg = NULL;
    if (rc != DLC_OK && j == s->io_err_at)
        msg = s->io_msg;
    if (rc == DLC_OK)
        rc = check_record(l, &sv);
    if (rc == DLC_ECORRUPT && l->cfg.on_corrupt == DLC_CORRUPT_REPLACE) {
        /* The first replacement of the loader is said at once (rare: the copy of its message
         * costs nothing in the hot path); the rest are counted, and each epoch's count is said
         * at its end (dlc__epoch_end()). */
        char why[512] = "";
        const int first = !atomic_load_explicit(&l->replace_said, memory_order_relaxed);
        if (first)
            snprintf(why, sizeof why, "%s", msg ? msg : dlc_errmsg());
        rc = replace(l, w, s, si->pos, si->index, &sv);
        if (rc == DLC_OK && first && !atomic_exchange(&l->replace_said, 1))
            dlc__logf(l->cfg.log, l->cfg.log_user, DLC_LOG_WARN,
                      "%s; replaced by record %llu (on_corrupt = replace: further replacements "
                      "are counted, and each epoch's count is logged at its end)",
                      why, (unsigned long long)sv.index);
        msg = NULL;
    }
    if (rc == DLC_OK)
        rc = dlc__build_sample(l, w, s, j, si->pos, &sv);
    if (rc != DLC_OK)
        dlc__slot_fail(l, s, j, rc, msg ? msg : dlc_errmsg());
}

/* A codec for each selected field that is stored encoded: two encoded fields of one record are
 * decoded into two scratches. */
static dlc_status worker_codecs(dlc_loader *l, dlc__worker *w)
{
    w->codecs = calloc(l->info->num_fields, sizeof *w->codecs);
    if (!w->codecs)
        return dlc__errorf(-ENOMEM, "loader: out of memory for a worker");
    for (uint32_t f = 0; f < l->info->num_fields; f++) {
        const dlc_field *fd = &l->fields[f];
        if (!l->selected[f] || fd->kind != DLC_FIELD_IMAGE || fd->encoding == DLC_ENCODING_RAW)
            continue;
        const dlc_status rc = dlc_codec_create(&w->codecs[f]);
        if (rc != DLC_OK)
            return rc;
    }
    return DLC_OK;
}

static dlc_status worker_start(dlc_loader *l, dlc__worker *w)
{
    dlc_status rc = dlc_store_reader_open(l->store, &w->reader);
    if (rc != DLC_OK || (rc = worker_codecs(l, w)) != DLC_OK)
        return rc;
    w->tmp = malloc(l->tmp_bytes ? l->tmp_bytes : 1);
    w->rvalues = calloc(l->info->num_fields, sizeof *w->rvalues);
    w->keep = malloc(l->max_boxes ? l->max_boxes : 1);
    w->views = calloc(l->nviews, sizeof *w->views);
    if (!w->tmp || !w->rvalues || !w->keep || !w->views)
        return dlc__errorf(-ENOMEM, "loader: out of memory for a worker");
    rc = dlc__aug_worker_alloc(l, w);
    if (rc != DLC_OK)
        return rc;
    /* Fixed-size raw images under RandomResizedCrop: the scratch for the largest box, now. */
    size_t need = 0;
    for (uint32_t i = 0; i < l->nout; i++) {
        const dlc__output *o = &l->out[i];
        if (o->op != DLC__OUT_IMAGE)
            continue;
        const dlc_field *fd = &l->fields[o->field];
        if (fd->encoding != DLC_ENCODING_RAW || !fd->shape[0] ||
            l->groups[o->group].augment != DLC_AUGMENT_RANDOM_RESIZED_CROP)
            continue;
        const size_t b =
            dlc_resize_scratch_bound(fd->shape[1], fd->shape[0], o->out_w, o->out_h, o->out_c);
        need = b > need ? b : need;
    }
    return need ? dlc__ensure_scratch(w, need) : DLC_OK;
}

void *dlc__worker_main(void *arg)
{
    dlc__worker *w = arg;
    dlc_loader *l = w->l;
    const dlc_status src = worker_start(l, w);
    dlc__thread_usage(&w->cpu_mark, &w->flt_mark);
    pthread_mutex_lock(&l->mu);
    l->ready_workers++;
    if (src != DLC_OK && l->start_rc == DLC_OK) {
        l->start_rc = src;
        snprintf(l->start_msg, sizeof l->start_msg, "%s", dlc_errmsg());
    }
    pthread_cond_broadcast(&l->cv_done);
    /* The worker's time between batches is all waiting, counted from when it left the last
     * batch to when it joins the next (the lock's hand-offs included, which on a loaded machine
     * are no small part): for I/O when a batch was in its I/O stage at its last wait, else idle;
     * nothing while parked by threads="auto". So busy + waits = the worker's whole time. */
    uint64_t t_mark = dlc__now_ns();
    int waited_io = 0, was_parked = 0;
    for (;;) {
        dlc__slot *s = NULL;
        while (!l->stop) {
            /* A worker parked by threads="auto" takes no work and counts no wait. */
            const int parked = w->id >= l->nactive;
            was_parked |= parked;
            for (uint32_t i = 0; !parked && i < l->nslots; i++) {
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
            const uint64_t t0 = dlc__now_ns();
            pthread_cond_wait(&l->cv_work, &l->mu);
            const uint64_t waited = dlc__now_ns() - t0;
            if (io_pending && !parked)
                atomic_fetch_add_explicit(&l->st_io_wait_ns, waited, memory_order_relaxed);
            waited_io = io_pending;
        }
        if (l->stop)
            break;
        assert(s->state == DLC__SLOT_FILL);
        assert(s->count >= 1 && s->count <= l->cfg.batch_size);
        assert(l->chunk >= 1 && l->chunk <= 64);
        s->active++;
        assert(s->active <= l->nworkers);
        const uint32_t count = s->count;
        pthread_mutex_unlock(&l->mu);
        /* Where the time goes: a clock read as the worker joins a batch, and the clock and the
         * thread's CPU time and faults as it leaves, none per sample. */
        const uint64_t t_join = dlc__now_ns();
        if (w->cnt && !was_parked)
            dlc__cnt_add(waited_io ? &w->cnt->iowait : &w->cnt->idle, t_join - t_mark);
        waited_io = was_parked = 0;
        uint32_t built = 0;

        /* The I/O stage checked the store's size before this batch; check once more as this
         * worker joins it, since a batch may wait in the ring (see resolve()). Once per batch
         * and worker, not per sample: the hot path makes no system call. */
        uint64_t now = 0;
        uint32_t file = 0;
        const int shrunk = dlc__store_shrunk(l, s, &file, &now);
        int finished = 0;
        for (;;) {
            const uint32_t i = atomic_fetch_add(&s->claim, l->chunk);
            /* Past the end by at most a chunk per worker inside, unless a reset killed it. */
            assert(i >= CLAIM_KILLED || (uint64_t)i < count + (uint64_t)l->nworkers * l->chunk);
            if (i >= count)
                break;
            const uint32_t n = count - i < l->chunk ? count - i : l->chunk;
            assert(n >= 1 && i + n <= count);
            if (shrunk) {
                char msg[512];
                dlc__shrunk_msg(l, file, now, s->io[i].index, msg, sizeof msg);
                dlc__slot_fail(l, s, i, DLC_ECHANGED, msg);
            } else {
                for (uint32_t j = i; j < i + n; j++)
                    process(l, w, s, j);
            }
            built += n;
            if (w->bytes_read) {
                atomic_fetch_add_explicit(&l->st_bytes, w->bytes_read, memory_order_relaxed);
                w->bytes_read = 0;
            }
            /* Every sample is counted once: done never passes count, and one worker sees it
             * reach count. */
            const uint32_t done = atomic_fetch_add(&s->done, n) + n;
            assert(done <= count);
            if (done == count)
                finished = 1;
        }
        /* Every sample is in (the other workers' writes happened before their increments of
         * done, which this worker's increment followed): pack the variable outputs once. */
        if (finished && l->variable)
            dlc__outputs_pack(l, s);
        if (finished)
            dlc__batchaug_complete(l, s); /* MixUp, CutMix, soft targets. */
        if (w->cnt) {
            /* CPU time and faults since the last batch left: a wait in between sleeps and
             * costs next to nothing, so this is the batch's (one read per batch, not two). */
            uint64_t cpu, flt;
            dlc__thread_usage(&cpu, &flt);
            const uint64_t t_leave = dlc__now_ns();
            dlc__cnt_add(&w->cnt->busy, t_leave - t_join);
            t_mark = t_leave;
            if (l->trace)
                dlc__trace_span(l, DLC__TRACK_WORKER0 + w->id, DLC__SPAN_WORK, s->epoch,
                                l->batch_base + s->batch, t_join, t_leave);
            dlc__cnt_add(&w->cnt->cpu, cpu - w->cpu_mark);
            dlc__cnt_add(&w->cnt->majflt, flt - w->flt_mark);
            dlc__cnt_add(&w->cnt->samples, built);
            w->cpu_mark = cpu;
            w->flt_mark = flt;
        }

        pthread_mutex_lock(&l->mu);
        /* Neither a reset nor the I/O thread touches a slot a worker is inside; the worker that
         * completed the batch makes it READY, and the others may find it READY, LENT or even
         * FREE again (the consumer does not wait for them). */
        assert(s->active > 0 && s->state != DLC__SLOT_IO);
        s->active--;
        if (finished) {
            assert(s->state == DLC__SLOT_FILL);
            s->state = DLC__SLOT_READY; /* FILL -> READY */
        }
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
    /* Once per plan (epoch, restore), on the consumer's thread and before the lock: is the store
     * all in memory, so that readahead hints would cost a system call per record for nothing? */
    const int resident = dlc__io_resident(l);
    pthread_mutex_lock(&l->mu);
    l->paused = 1;
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
        busy |= dlc__dev_busy_locked(l);
        if (!busy)
            break;
        pthread_cond_wait(&l->cv_done, &l->mu);
    }
    /* Batches the consumer holds stay lent: it gives them back as usual (the next dlc_loader_next()
     * when it holds max_lent, or dlc_loader_release()), so a batch a program still uses across
     * set_epoch() is never overwritten and need not be copied. The new plan starts at the slot
     * after the newest lent one, so its first batches go to free slots and reach the held ones
     * only after they have been given back. */
    dlc__assert_lent(l);
    for (uint32_t i = 0; i < l->nslots; i++) {
        assert(l->slots[i].active == 0 && l->slots[i].state != DLC__SLOT_IO);
        if (l->slots[i].state != DLC__SLOT_LENT)
            l->slots[i].state = DLC__SLOT_FREE;
    }
    l->slot_base = l->nlent ? (l->lent[l->nlent - 1] + 1) % l->nslots : 0;
    dlc__dev_reset_locked(l);
    /* No thread is inside a slot now; the I/O thread reads this after taking the next one. */
    l->resident = resident;
    dlc__batchaug_reset(l); /* A resolution set for this plan. */
    if (l->mixl)
        dlc__mixload_apply(l);
    dlc__sampler_set_epoch(&l->sampler, seed, epoch);
    dlc__shard_plan(&l->shard, l->sampler.len, start, l->cfg.rank, l->cfg.world_size,
                    l->cfg.batch_size, l->cfg.drop_last);
    (void)dlc__stream_plan(l, NULL); /* Never canceled: under mu, on the consumer's thread. */
    const uint64_t per_batch = (uint64_t)l->cfg.world_size * l->cfg.batch_size;
    l->batch_base = start / per_batch;
    l->fill_next = l->cons_next = 0;
    l->io_hold = 0;
    l->end_said = 0;
    l->cons_in = 0; /* A wait given up in its slices (Ctrl-C) ends with the plan it waited in. */
    l->replaced_mark = atomic_load(&l->st_replaced);
    l->paused = 0;
    pthread_cond_broadcast(&l->cv_io);
    pthread_cond_broadcast(&l->cv_done); /* The copy thread waits there. */
    pthread_mutex_unlock(&l->mu);
}
