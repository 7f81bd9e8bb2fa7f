/* The stores a build writes and the threads that write them (build_internal.h describes the
 * pipeline): one store, or the parts of a store set built on one machine.
 *
 * Threads. T workers (job->threads) make records. W writer threads (1 for a single store or a
 * part built alone; min(N, T) for the N parts of a set) each take the next part that has not
 * started, open its dlc_writer, append its records strictly in item order, finish it, and take
 * the next. Worker t helps writer t % W's part first and any other part being written when that
 * one has no item it may take (every item claimed, or its window full), so that no core idles
 * while some part has work, and a part that ends early hands its workers to the others. Each
 * part has its own writer because appending is the one serial step of a build: memcpy into the
 * map and the page faults of fresh page-cache pages, a fraction of a millisecond per 256 px
 * image; one writer would cap a machine of many cores at a few thousand images a second.
 * The calling thread watches: it calls the progress callback about ten times a second, sends
 * the skip notices to the log callback, and turns a cancel into a stop.
 *
 * Locking: one mutex guards the parts' claim counters, slot states, progress counts and skip
 * lists; it is taken a few times per item (an image costs milliseconds), never while decoding or
 * writing. A worker with nothing to claim waits on `space` (broadcast when a slot is freed and
 * when a part starts or ends); a writer that finds its next slot empty waits on its own `ready`
 * condition for its next slot, or, when the workers leave a core free for the writers, for a
 * batch of slots (a quarter of the window), which the worker that fills the last of them
 * signals: one sleep and one wake-up per batch instead of per item, which on a 1-thread build
 * cost 3-4% of its CPU (futex calls, and the wake-up's inter-processor interrupt, dear on a VM).
 * Not when the workers fill every core: a writer that sleeps through a batch then waits for a
 * CPU behind them once woken, and the window's workers wait on it (2-thread builds on 2 cores
 * ran up to twice as long by the clock; docs/BENCHMARKS.md, issue 25, "Again").
 * A failure or a cancel sets `stop`: workers finish the item in hand and leave, writers abort
 * their stores (the temporary files go) and leave; slots live until every thread is joined.
 *
 * Invariants, asserted where they change (under mu): a part goes WAITING -> ACTIVE -> DONE, or
 * WAITING -> DONE when its store cannot be opened; while it is ACTIVE, first <= write_next <=
 * next <= end and next - write_next <= window, so the items in flight map onto distinct slots;
 * a slot is FREE while its item is claimed and being made, set once by the worker, and FREE
 * again only by the writer, which takes the items strictly in order. A worker never holds a
 * slot of a part that has not started. tests/builder/build_stress.c runs these paths under
 * TSan. */
#include "build_internal.h"
#include "common.h"
#include "source.h"
#include "store_internal.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <xxhash.h>

#define MAX_THREADS 256u
#define PROGRESS_GAP 0.1
/* Skip notices passed to the log callback per part and round of the watching thread. */
#define NOTICES_PER_ROUND 64u
/* A part's rc when it stopped because another part failed or the build was canceled. */
#define STOPPED 1

typedef struct engine engine;

/* One writer thread. */
typedef struct part_writer {
    engine *e;
    uint32_t index;       /* its place in pipe.active */
    pthread_cond_t ready; /* a slot of the part it writes was filled */
    int ready_ok;
    pthread_t tid;
    int started;
} part_writer;

struct engine {
    dlc__build_pipe p;
    const dlc__build_job *job;
    part_writer *writers;
    dlc__build_worker *workers;
    uint32_t nworkers;
    int mu_ok, space_ok, done_ok;
    int failed;   /* the part whose failure stopped the build, or -1; mu */
    int canceled; /* the progress callback asked to stop */
};

/* Expected payload bytes per record, for the writer's space reservation. */
static uint64_t payload_estimate(const dlc_build_options *o, const dlc__build_plan *plan)
{
    const uint64_t px = (uint64_t)o->size * o->size;
    uint64_t raw = px * plan->channels;
    if (o->encoding == DLC_ENCODING_JPEG)
        raw /= o->quality >= 90 ? 4 : 8;
    if (plan->masks) /* class ids compress well */
        raw += px * plan->mask_channels / (plan->mask_encoding == DLC_ENCODING_PNG ? 8 : 1);
    return o->center_crop ? raw : raw * 4 / 3; /* photos are mostly 4:3 */
}

static void hash_item(XXH3_state_t *h, const char *path, uint64_t size, int64_t mtime_ns,
                      int64_t label)
{
    uint8_t b[24];
    dlc__st64(b, size);
    dlc__st64(b + 8, (uint64_t)mtime_ns);
    dlc__st64(b + 16, (uint64_t)label);
    XXH3_64bits_update(h, path, strlen(path) + 1);
    XXH3_64bits_update(h, b, sizeof b);
}

/* What the source digest adds to an item with masks (the mask file) and with manifest columns
 * besides the label (the item's values); nothing otherwise, so that stores of images and labels
 * keep the digest they always had. */
static void hash_extra(XXH3_state_t *h, const dlc__source_set *src, size_t i,
                       const dlc__build_slot *sl, int masks)
{
    if (masks) {
        uint8_t b[16];
        dlc__st64(b, sl->mask_size);
        dlc__st64(b + 8, (uint64_t)sl->mask_mtime_ns);
        XXH3_64bits_update(h, b, sizeof b);
    }
    for (uint32_t c = 0; c < src->nscalars; c++) {
        uint8_t b[8];
        dlc__st64(b, dlc__source_cell(src, i, c));
        XXH3_64bits_update(h, b, sizeof b);
    }
    for (uint32_t k = 0; k < src->nlists; k++) {
        size_t n;
        const uint64_t *v = dlc__source_list(src, i, k, &n);
        uint8_t b[8];
        dlc__st64(b, n);
        XXH3_64bits_update(h, b, sizeof b);
        for (size_t e = 0; e < n; e++) {
            dlc__st64(b, v[e]);
            XXH3_64bits_update(h, b, sizeof b);
        }
    }
}

/* Everyone leaves: workers after the item in hand, writers at their next wait. */
static void stop_all(engine *e)
{
    atomic_store(&e->p.stop, 1);
    pthread_mutex_lock(&e->p.mu);
    pthread_cond_broadcast(&e->p.space);
    pthread_cond_broadcast(&e->p.done);
    for (uint32_t k = 0; k < e->p.nwriters; k++)
        if (e->writers[k].ready_ok)
            pthread_cond_broadcast(&e->writers[k].ready);
    pthread_mutex_unlock(&e->p.mu);
}

/* ---- Workers ------------------------------------------------------------------------------- */

/* An item a worker may take, helping writer @p home first, and its part; NULL when every
 * active part has all its items claimed or its window full. Under mu. */
static dlc__build_part *claim(dlc__build_pipe *p, uint32_t home, size_t *item)
{
    for (uint32_t k = 0; k < p->nwriters; k++) {
        dlc__build_part *part = p->active[(home + k) % p->nwriters];
        if (part && part->state == DLC__PART_ACTIVE && part->next < part->end &&
            part->next < part->write_next + part->window) {
            assert(part->first <= part->write_next && part->write_next <= part->next);
            *item = part->next++;
            /* The window is what keeps two items in flight off the same slot. */
            assert(part->slots[(*item - part->first) % part->window].state == DLC__SLOT_FREE);
            return part;
        }
    }
    return NULL;
}

/* The items its writer waits for, [write_next, wake_end), are all made (or skipped, or failed).
 * Under mu. */
static int batch_made(const dlc__build_part *part)
{
    for (size_t j = part->write_next; j < part->wake_end; j++)
        if (part->slots[(j - part->first) % part->window].state == DLC__SLOT_FREE)
            return 0;
    return 1;
}

/* No item is left to claim, now or later: every part has all its items claimed or is done.
 * Under mu. Workers ask only when they found nothing to claim. */
static int all_claimed(const dlc__build_pipe *p)
{
    for (uint32_t k = 0; k < p->nparts; k++) {
        const dlc__build_part *part = &p->parts[k];
        if (part->state == DLC__PART_WAITING ||
            (part->state == DLC__PART_ACTIVE && part->next < part->end))
            return 0;
    }
    return 1;
}

void *dlc__build_worker_main(void *arg)
{
    dlc__build_worker *w = arg;
    dlc__build_pipe *p = w->p;
    pthread_mutex_lock(&p->mu);
    while (!atomic_load(&p->stop)) {
        size_t i;
        dlc__build_part *part = claim(p, w->home, &i);
        if (!part) {
            if (all_claimed(p))
                break;
            pthread_cond_wait(&p->space, &p->mu);
            continue;
        }
        dlc__build_slot *sl = &part->slots[(i - part->first) % part->window];
        pthread_mutex_unlock(&p->mu);
        const int state = dlc__build_item(w, i, sl);
        assert(state == DLC__SLOT_READY || state == DLC__SLOT_SKIP || state == DLC__SLOT_FATAL);
        pthread_mutex_lock(&p->mu);
        /* Only this worker writes the slot until the writer frees it; the writer cannot pass
         * item i (write_next <= i) before this state is set. The part may be DONE already when
         * the build stopped meanwhile (its slots live until every thread is joined). */
        assert(sl->state == DLC__SLOT_FREE && part->write_next <= i && i < part->next);
        assert(part->state != DLC__PART_WAITING);
        sl->state = state;
        /* Only the item that completes the writer's batch wakes it (part_write()). */
        if (i < part->wake_end && batch_made(part))
            pthread_cond_signal(part->ready);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- Writers ------------------------------------------------------------------------------- */

/* Open the part's store and its slots, and let the workers claim its items. */
static dlc_status part_open(part_writer *pw, dlc__build_part *part)
{
    const dlc__build_job *job = pw->e->job;
    dlc__build_pipe *p = &pw->e->p;
    dlc_status rc;
    const int labelled = job->plan.f_label != DLC_NO_FIELD;
    uint64_t to_write = 0;
    for (size_t i = part->first; i < part->end; i++)
        to_write += job->src.items[i].skip == DLC__SKIP_NONE;
    const dlc_writer_config cfg = {
        .struct_size = sizeof(dlc_writer_config),
        .fields = job->fields,
        .num_fields = job->nfields,
        .label_names = labelled ? job->names : NULL,
        .num_labels = labelled ? job->num_labels : 0,
        .force = job->o.force,
        .size_hint = to_write * payload_estimate(&job->o, &job->plan),
    };
    CHECK(dlc_writer_open(part->path, &cfg, &part->wr));
    part->slots = calloc(part->window, sizeof *part->slots);
    FAIL_IF(!part->slots, -ENOMEM, "%s: out of memory", part->path);
    for (size_t k = 0; k < part->window; k++)
        CHECK(dlc_record_builder_create(part->wr, &part->slots[k].rec));
    part->digest = XXH3_createState();
    FAIL_IF(!part->digest, -ENOMEM, "%s: out of memory", part->path);
    XXH3_64bits_reset(part->digest);
    part->ready = &pw->ready;
    pthread_mutex_lock(&p->mu);
    assert(part->state == DLC__PART_WAITING && p->active[pw->index] == NULL);
    part->next = part->write_next = part->first;
    part->state = DLC__PART_ACTIVE;
    p->active[pw->index] = part;
    pthread_cond_broadcast(&p->space);
    pthread_mutex_unlock(&p->mu);
fail:
    return rc;
}

/* Append item @p j's sealed record, or count its skip (with strict: fail on it); then give the
 * slot back to the workers. */
static dlc_status write_item(part_writer *pw, dlc__build_part *part, size_t j, dlc__build_slot *sl,
                             int state)
{
    const dlc__build_job *job = pw->e->job;
    dlc__build_pipe *p = &pw->e->p;
    const dlc__item *it = &job->src.items[j];
    const char *path = dlc__source_path(&job->src, it);
    dlc_status rc = DLC_OK;
    uint64_t out = 0;
    if (state == DLC__SLOT_FATAL)
        return dlc__errorf(sl->status, "%s: %s", path, sl->why);
    hash_item(part->digest, path, sl->file_size, sl->mtime_ns, it->label);
    hash_extra(part->digest, &job->src, j, sl, job->plan.masks != NULL);
    if (state == DLC__SLOT_READY) {
        dlc__sealed rec;
        CHECK(dlc__record_sealed(sl->rec, &rec));
        CHECK(dlc_writer_append(part->wr, sl->rec));
        out = rec.payload;
    } else {
        dlc_writer_add_skipped(part->wr, 1);
    }
    pthread_mutex_lock(&p->mu);
    /* Strictly in item order, and only items a worker finished. */
    assert(part->state == DLC__PART_ACTIVE && j == part->write_next && j < part->next);
    assert(sl->state == state && state != DLC__SLOT_FREE);
    if (state == DLC__SLOT_SKIP)
        rc = dlc__skips_add(&part->skips, &part->nskips, &part->skips_cap, path, sl->why);
    if (state == DLC__SLOT_READY && sl->converted && part->converted++ == 0) {
        part->conv_item = j;
        part->conv_channels = sl->src_channels;
    }
    part->skipped += state == DLC__SLOT_SKIP;
    part->done++;
    part->bytes_in += sl->bytes_in;
    part->bytes_out += out;
    sl->state = DLC__SLOT_FREE;
    part->write_next = j + 1;
    assert(part->done == part->write_next - part->first);
    pthread_cond_broadcast(&p->space);
    pthread_mutex_unlock(&p->mu);
    FAIL_IF(rc == DLC_OK && state == DLC__SLOT_SKIP && job->o.strict, DLC_EDECODE, "%s: %s", path,
            sl->why);
fail:
    return rc;
}

/* The part's items, in order. STOPPED when the build stops meanwhile. */
static dlc_status part_write(part_writer *pw, dlc__build_part *part)
{
    dlc__build_pipe *p = &pw->e->p;
    for (size_t j = part->first; j < part->end; j++) {
        dlc__build_slot *sl = &part->slots[(j - part->first) % part->window];
        pthread_mutex_lock(&p->mu);
        if (sl->state == DLC__SLOT_FREE && !atomic_load(&p->stop)) {
            /* Sleep until a batch is made rather than item j alone: the window holds batch
             * items beyond j (batch <= window), so they can all be claimed, and every claimed
             * item is filled, whatever happens to it. */
            assert(part->write_next == j && part->wake_end == 0);
            part->wake_end = part->end - j > part->batch ? j + part->batch : part->end;
            while (!batch_made(part) && !atomic_load(&p->stop))
                pthread_cond_wait(&pw->ready, &p->mu);
            part->wake_end = 0;
        }
        const int state = atomic_load(&p->stop) ? DLC__SLOT_FREE : sl->state;
        pthread_mutex_unlock(&p->mu);
        if (state == DLC__SLOT_FREE)
            return STOPPED;
        const dlc_status rc = write_item(pw, part, j, sl, state);
        if (rc < 0)
            return rc;
    }
    return DLC_OK;
}

/* Give the writer what is known only now (the "build" text, the source digest, the skipped
 * count, the part's place in its set) and publish the store. */
static dlc_status part_finish(part_writer *pw, dlc__build_part *part)
{
    const dlc__build_job *job = pw->e->job;
    dlc_status rc;
    char *json = NULL;
    part->count = dlc_writer_count(part->wr);
    /* A part of a set may hold no record (every item of its range skipped); a store may not. */
    FAIL_IF(part->count == 0 && !job->parts, DLC_ENOIMAGES,
            "%s: no valid image among %zu items (%llu skipped)", job->sources[0], job->src.count,
            (unsigned long long)part->skipped);
    json = dlc__build_json(job, part, dlc__now_s() - job->t0);
    FAIL_IF(!json, -ENOMEM, "build: out of memory");
    const int labelled = job->plan.f_label != DLC_NO_FIELD;
    CHECK(dlc__writer_set_meta(part->wr, labelled ? job->names : NULL,
                               labelled ? job->num_labels : 0, part->skipped, json,
                               XXH3_64bits_digest(part->digest)));
    if (job->parts)
        CHECK(dlc__writer_set_part(part->wr, part->index, job->parts, job->set_id, part->first,
                                   part->end));
    /* The rename goes by the part's path: not into a directory put in the set's place. */
    CHECK(dlc__build_dir_same(job));
    rc = dlc_writer_finish(part->wr);
    part->wr = NULL; /* finish frees it in every case */
    part->published = rc == DLC_OK;
    struct stat st;
    if (rc == DLC_OK && stat(part->path, &st) == 0)
        part->file_bytes = (uint64_t)st.st_size;
fail:
    free(json);
    return rc;
}

static void free_slots(dlc__build_part *part)
{
    if (!part->slots)
        return;
    for (size_t k = 0; k < part->window; k++)
        dlc_record_builder_destroy(part->slots[k].rec);
    free(part->slots);
    part->slots = NULL;
}

/* The part is over: on failure its store is aborted (its temporary file removed) and the first
 * real failure stops the build; the workers hear that the part is gone. */
static void part_end(part_writer *pw, dlc__build_part *part, dlc_status rc)
{
    engine *e = pw->e;
    if (rc < 0) {
        part->rc = rc;
        snprintf(part->msg, sizeof part->msg, "%s", dlc_errmsg());
    }
    dlc_writer_abort(part->wr);
    part->wr = NULL;
    XXH3_freeState(part->digest);
    part->digest = NULL;
    pthread_mutex_lock(&e->p.mu);
    assert(part->state != DLC__PART_DONE);
    /* A part that finished handed every item back: no worker holds one of its slots. */
    assert(rc != DLC_OK ||
           (part->next == part->end && part->write_next == part->end &&
            part->done == part->end - part->first && e->p.active[pw->index] == part));
    assert(e->p.active[pw->index] == part || e->p.active[pw->index] == NULL);
    part->state = DLC__PART_DONE;
    e->p.active[pw->index] = NULL;
    if (rc < 0 && e->failed < 0)
        e->failed = (int)(part - e->p.parts);
    pthread_cond_broadcast(&e->p.space);
    pthread_mutex_unlock(&e->p.mu);
    if (rc < 0)
        stop_all(e);
    /* Every item of a finished part was handed back: no worker holds one of its slots. After a
     * stop a worker may still, so those slots wait for the end of the build. */
    if (rc == DLC_OK)
        free_slots(part);
}

static void *writer_main(void *arg)
{
    part_writer *pw = arg;
    dlc__build_pipe *p = &pw->e->p;
    for (;;) {
        dlc__build_part *part = NULL;
        pthread_mutex_lock(&p->mu);
        if (!atomic_load(&p->stop) && p->next_part < p->nparts)
            part = &p->parts[p->next_part++];
        pthread_mutex_unlock(&p->mu);
        if (!part)
            break;
        dlc_status rc = part_open(pw, part);
        if (rc == DLC_OK)
            rc = part_write(pw, part);
        if (rc == DLC_OK)
            rc = part_finish(pw, part);
        part_end(pw, part, rc);
    }
    pthread_mutex_lock(&p->mu);
    assert(p->writers_left > 0);
    p->writers_left--;
    pthread_cond_broadcast(&p->done);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- The watching thread ------------------------------------------------------------------- */

/* Notices gathered under mu and sent to the log callback after it is released. */
typedef struct notices {
    const dlc_build_skip *skip[NOTICES_PER_ROUND];
    uint32_t n;
    int more; /* some part has notices left for the next round */
} notices;

/* Take the next skip notices of every part (their strings live until the parts are freed, so
 * the pointers stay good after mu is released). Under mu. */
static void take_notices(dlc__build_pipe *p, notices *nt)
{
    nt->n = 0;
    nt->more = 0;
    for (uint32_t k = 0; k < p->nparts; k++) {
        dlc__build_part *part = &p->parts[k];
        while (part->logged < part->nskips && nt->n < NOTICES_PER_ROUND)
            nt->skip[nt->n++] = &part->skips[part->logged++];
        nt->more |= part->logged < part->nskips;
    }
}

static void send_notices(const dlc__build_job *job, const notices *nt)
{
    /* With strict, a bad item is not skipped: it stops the build, and the error names it. A
     * "skipped" notice just before that error would say the opposite. */
    if (job->o.strict)
        return;
    for (uint32_t k = 0; k < nt->n; k++)
        dlc__logf(job->o.log, job->o.log_user, DLC_LOG_WARN, "%s: skipped: %s", nt->skip[k]->path,
                  nt->skip[k]->reason);
}

/* The first image stored with other channels than its source's says why, once. Under mu, which
 * it releases around the log call. */
static void note_converted(engine *e, int *noted)
{
    const dlc__build_job *job = e->job;
    for (uint32_t k = 0; k < e->p.nparts && !*noted; k++) {
        const dlc__build_part *part = &e->p.parts[k];
        if (!part->converted)
            continue;
        *noted = 1;
        const size_t i = part->conv_item, d = job->plan.keep_item;
        const uint32_t ch = part->conv_channels;
        pthread_mutex_unlock(&e->p.mu);
        dlc__logf(job->o.log, job->o.log_user, DLC_LOG_WARN,
                  "%s: %u channel%s, stored as %u like the first image (%s) decided; every such "
                  "image is converted and counted",
                  dlc__source_path(&job->src, &job->src.items[i]), ch, ch == 1 ? "" : "s",
                  job->plan.channels,
                  d < job->src.count ? dlc__source_path(&job->src, &job->src.items[d]) : "?");
        pthread_mutex_lock(&e->p.mu);
    }
}

/* The progress so far, summed over the parts. Under mu. */
static void sum_progress(const dlc__build_pipe *p, dlc_build_progress *prog)
{
    prog->done = prog->skipped = prog->bytes_in = prog->bytes_out = 0;
    for (uint32_t k = 0; k < p->nparts; k++) {
        prog->done += p->parts[k].done;
        prog->skipped += p->parts[k].skipped;
        prog->bytes_in += p->parts[k].bytes_in;
        prog->bytes_out += p->parts[k].bytes_out;
    }
}

/* Wait on `done` until @p when (dlc__now_s() seconds). Under mu. */
static void wait_until(dlc__build_pipe *p, double when)
{
    const double wait = when - dlc__now_s();
    if (wait <= 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)(wait * 1e9);
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    pthread_cond_timedwait(&p->done, &p->mu, &ts);
}

/* Until every writer has ended: progress about ten times a second, notices, cancel. */
static void watch(engine *e, dlc_build_progress *prog)
{
    const dlc__build_job *job = e->job;
    dlc__build_pipe *p = &e->p;
    double next = dlc__now_s() + PROGRESS_GAP;
    int noted = 0;
    notices nt;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        const int running = p->writers_left > 0;
        take_notices(p, &nt);
        note_converted(e, &noted);
        sum_progress(p, prog);
        pthread_mutex_unlock(&p->mu);
        send_notices(job, &nt);
        const double now = dlc__now_s();
        if (job->o.progress && running && now >= next && !e->canceled) {
            prog->seconds = now - job->t0;
            if (job->o.progress(job->o.progress_user, prog)) {
                e->canceled = 1;
                stop_all(e);
            }
        }
        if (now >= next)
            next = now + PROGRESS_GAP;
        pthread_mutex_lock(&p->mu);
        if (!running && !nt.more)
            break;
        if (running)
            wait_until(p, next);
    }
    pthread_mutex_unlock(&p->mu);
}

/* ---- Setting up and tearing down ----------------------------------------------------------- */

static dlc_status engine_init(engine *e, const dlc__build_job *job, dlc__build_part *parts,
                              uint32_t nparts, uint32_t nwriters)
{
    dlc_status rc = DLC_OK;
    dlc__build_pipe *p = &e->p;
    /* dlc_build() chose these: W = 1 for one store, min(N, T) for a set of N parts. */
    assert(nparts >= 1 && nwriters >= 1 && nwriters <= nparts);
    e->job = job;
    e->failed = -1;
    p->src = &job->src;
    p->opts = &job->o;
    p->plan = &job->plan;
    p->parts = parts;
    p->nparts = nparts;
    p->nwriters = nwriters;
    atomic_init(&p->stop, 0);
    /* Enough slots per part that a slow image does not stall the part's share of the workers
     * for long, few enough that memory stays at a few records per thread; and at least 32 in
     * all, so that a writer held up for a few tens of milliseconds (the page faults of fresh
     * page-cache pages come in storms; on a shared machine it loses its core) does not stop
     * the workers of a build on few threads: 4 interleaved pairs of 1-thread builds of the demo
     * data ran at 1,029 images/s with 8 slots and 1,137 with 32 (2 threads: 1,957 and 1,951). */
    const uint32_t share = (job->threads + nwriters - 1) / nwriters;
    const size_t floor = (32 + (size_t)nwriters - 1) / nwriters;
    for (uint32_t k = 0; k < nparts; k++) {
        parts[k].window = 4 * (size_t)share + 4 > floor ? 4 * (size_t)share + 4 : floor;
        parts[k].batch = job->threads < dlc__cpu_count() ? parts[k].window / 4 : 1;
        parts[k].conv_item = SIZE_MAX;
    }
    p->active = calloc(nwriters, sizeof *p->active);
    e->writers = calloc(nwriters, sizeof *e->writers);
    e->workers = calloc(job->threads, sizeof *e->workers);
    FAIL_IF(!p->active || !e->writers || !e->workers, -ENOMEM, "build: out of memory");
    FAIL_IF(pthread_mutex_init(&p->mu, NULL) != 0, -ENOMEM, "build: cannot create a mutex");
    e->mu_ok = 1;
    /* The watching thread's timed wait on `done` measures against the monotonic clock. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    e->done_ok = pthread_cond_init(&p->done, &ca) == 0;
    pthread_condattr_destroy(&ca);
    e->space_ok = pthread_cond_init(&p->space, NULL) == 0;
    for (uint32_t k = 0; k < nwriters; k++) {
        e->writers[k].e = e;
        e->writers[k].index = k;
        e->writers[k].ready_ok = pthread_cond_init(&e->writers[k].ready, NULL) == 0;
        FAIL_IF(!e->writers[k].ready_ok, -ENOMEM, "build: cannot create a condition variable");
    }
    FAIL_IF(!e->done_ok || !e->space_ok, -ENOMEM, "build: cannot create a condition variable");
fail:
    return rc;
}

/* A codec per worker, then the threads; fewer threads than asked for are slower, not wrong,
 * so only a first thread of each kind that cannot start is a failure. */
static dlc_status start_threads(engine *e)
{
    dlc_status rc = DLC_OK;
    e->nworkers = e->job->threads;
    for (uint32_t t = 0; t < e->nworkers; t++) {
        e->workers[t].p = &e->p;
        e->workers[t].home = t % e->p.nwriters;
        CHECK(dlc_codec_create(&e->workers[t].codec));
    }
    for (uint32_t k = 0; k < e->p.nwriters; k++) {
        /* Counted before it starts: a writer whose part fails at once may end before
         * pthread_create() returns, and must not find itself uncounted. */
        pthread_mutex_lock(&e->p.mu);
        e->p.writers_left++;
        pthread_mutex_unlock(&e->p.mu);
        const int err = pthread_create(&e->writers[k].tid, NULL, writer_main, &e->writers[k]);
        if (err != 0) {
            pthread_mutex_lock(&e->p.mu);
            e->p.writers_left--;
            pthread_mutex_unlock(&e->p.mu);
        }
        FAIL_IF(err != 0 && k == 0, -err, "build: cannot start a writer thread: %s", strerror(err));
        if (err != 0)
            break;
        e->writers[k].started = 1;
    }
    for (uint32_t t = 0; t < e->nworkers; t++) {
        const int err =
            pthread_create(&e->workers[t].tid, NULL, dlc__build_worker_main, &e->workers[t]);
        FAIL_IF(err != 0 && t == 0, -err, "build: cannot start a worker thread: %s", strerror(err));
        if (err != 0)
            break;
        e->workers[t].started = 1;
    }
fail:
    return rc;
}

/* Stop what runs, join every thread, free what the engine made (not the parts' results). */
static void engine_end(engine *e)
{
    if (e->mu_ok && e->space_ok && e->done_ok && e->writers)
        stop_all(e);
    for (uint32_t k = 0; e->writers && k < e->p.nwriters; k++)
        if (e->writers[k].started)
            pthread_join(e->writers[k].tid, NULL);
    for (uint32_t t = 0; e->workers && t < e->job->threads; t++) {
        if (e->workers[t].started)
            pthread_join(e->workers[t].tid, NULL);
        dlc__build_worker_free(&e->workers[t]);
    }
    for (uint32_t k = 0; k < e->p.nparts; k++)
        free_slots(&e->p.parts[k]);
    for (uint32_t k = 0; e->writers && k < e->p.nwriters; k++)
        if (e->writers[k].ready_ok)
            pthread_cond_destroy(&e->writers[k].ready);
    if (e->space_ok)
        pthread_cond_destroy(&e->p.space);
    if (e->done_ok)
        pthread_cond_destroy(&e->p.done);
    if (e->mu_ok)
        pthread_mutex_destroy(&e->p.mu);
    free(e->writers);
    free(e->workers);
    free(e->p.active);
}

/* The outcome: the first real failure, else a cancel, else OK; and the closing notice about
 * converted images. */
static dlc_status outcome(const engine *e)
{
    const dlc__build_job *job = e->job;
    if (e->failed >= 0) {
        const dlc__build_part *part = &e->p.parts[e->failed];
        return dlc__errorf(part->rc, "%s", part->msg);
    }
    /* A cancel that came after every part had published its store is too late: the build is
     * done (saying "canceled" then would call a replaced store the old one). */
    int published = 1;
    for (uint32_t k = 0; k < e->p.nparts; k++)
        published &= e->p.parts[k].published;
    if (e->canceled && !published)
        return dlc__errorf(DLC_ECANCELED, "%s: build canceled", job->out);
    uint64_t converted = 0;
    for (uint32_t k = 0; k < e->p.nparts; k++)
        converted += e->p.parts[k].converted;
    if (converted > 1)
        dlc__logf(job->o.log, job->o.log_user, DLC_LOG_WARN,
                  "%llu images had other channels than the first and were converted to %u",
                  (unsigned long long)converted, job->plan.channels);
    return DLC_OK;
}

dlc_status dlc__build_write(const dlc__build_job *job, dlc__build_part *parts, uint32_t nparts,
                            uint32_t nwriters)
{
    dlc_status rc;
    engine e;
    memset(&e, 0, sizeof e);
    dlc_build_progress prog = {0};
    for (uint32_t k = 0; k < nparts; k++)
        prog.total += parts[k].end - parts[k].first;
    CHECK(engine_init(&e, job, parts, nparts, nwriters));
    /* A first call before any record shows the total at once and lets a caller cancel at any
     * point. */
    if (job->o.progress) {
        prog.seconds = dlc__now_s() - job->t0;
        FAIL_IF(job->o.progress(job->o.progress_user, &prog), DLC_ECANCELED, "%s: build canceled",
                job->out);
    }
    rc = start_threads(&e);
    if (rc < 0)
        stop_all(&e);
    watch(&e, &prog);
    if (rc == DLC_OK)
        rc = outcome(&e);
fail:;
    dlc__errsave saved;
    if (rc < 0)
        dlc__err_save(&saved);
    engine_end(&e);
    if (rc < 0)
        dlc__err_restore(&saved, rc);
    return rc;
}

void dlc__build_parts_free(dlc__build_part *parts, uint32_t nparts)
{
    for (uint32_t k = 0; parts && k < nparts; k++) {
        for (size_t i = 0; i < parts[k].nskips; i++) {
            free((char *)parts[k].skips[i].path);
            free((char *)parts[k].skips[i].reason);
        }
        free(parts[k].skips);
        free(parts[k].path);
    }
    free(parts);
}
