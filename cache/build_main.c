/* dlc_build(): scan the sources, decide what a record holds, make and seal the records on every
 * core, append them in item order (build_internal.h describes the pipeline and its slots).
 *
 * Locking: one mutex guards the slot states and write_next; it is taken a few times per item
 * (an image costs milliseconds to decode), never while decoding or writing. Workers wait on
 * `space` (window full); the writer waits on `ready` with a timeout, so it can call the progress
 * callback about ten times a second.
 *
 * Stages: dlc_build() runs scan_sources(), plan_record(), open_writer(), pipe_init(),
 * start_workers(), write_items(), finish_store() and fill_report(); each keeps what it makes in
 * one build_run, and build_end() releases it on every path.
 *
 * The writer is the public one (include/dlcache/writer.h), opened with the schema and the label
 * names; only what is known at the end of the build (the "build" text, the source digest, the
 * skipped count) goes in through the store part's private hook dlc__writer_set_meta(). */
#include "build_internal.h"
#include "common.h"
#include "source.h"
#include "store_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define MAX_THREADS 256u
#define MAX_SIZE 8192u
#define PROGRESS_GAP 0.1

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

/* The fields' options: channels, a masks folder, their encoding. */
static dlc_status check_fields(const dlc_build_fields *f)
{
    struct stat st;
    if (f->channels != 1 && f->channels != 3 && f->channels != DLC_BUILD_CHANNELS_KEEP)
        return dlc__errorf(DLC_EINVAL, "build: %u channels; the image keeps 1, 3 or the source's",
                           f->channels);
    if (f->mask_encoding != -1 && f->mask_encoding != DLC_ENCODING_RAW &&
        f->mask_encoding != DLC_ENCODING_PNG)
        return dlc__errorf(DLC_EINVAL, "build: mask encoding %d; masks are raw or PNG, never JPEG",
                           f->mask_encoding);
    if (f->masks && stat(f->masks, &st) != 0)
        return dlc__errorf(-errno, "%s: cannot open the masks folder: %s", f->masks,
                           strerror(errno));
    if (f->masks && !S_ISDIR(st.st_mode))
        return dlc__errorf(DLC_EINVAL, "%s: the masks are a folder tree, not a file", f->masks);
    return DLC_OK;
}

static dlc_status check_options(const char *const *sources, size_t nsources, const char *out,
                                const dlc_build_options *o)
{
    if (!sources || nsources == 0)
        return dlc__errorf(DLC_EINVAL, "build: no source given");
    for (size_t i = 0; i < nsources; i++)
        if (!sources[i] || !*sources[i])
            return dlc__errorf(DLC_EINVAL, "build: source %zu is empty", i + 1);
    if (!out || !*out)
        return dlc__errorf(DLC_EINVAL, "build: no output path given");
    if (o->size < 1 || o->size > MAX_SIZE)
        return dlc__errorf(DLC_EINVAL, "build: size %u is outside 1..%u", o->size, MAX_SIZE);
    if (o->encoding != DLC_ENCODING_RAW && o->encoding != DLC_ENCODING_JPEG)
        return dlc__errorf(DLC_EINVAL, "build: unknown encoding %u", o->encoding);
    if (o->encoding == DLC_ENCODING_JPEG && (o->quality < 1 || o->quality > 100))
        return dlc__errorf(DLC_EINVAL, "build: JPEG quality %d is outside 1..100", o->quality);
    return DLC_OK;
}

/* Everything one dlc_build() call owns; build_end() releases it on every path. */
typedef struct build_run {
    const char *const *sources;
    size_t nsources;
    const char *out;
    dlc_build_options o;
    dlc_build_fields f;
    double t0; /* dlc__now_s() at the start */
    dlc__source_set src;
    dlc_build_report *rep;
    size_t skips_cap;  /* of rep->skips */
    int keep_report;   /* ENOIMAGES and strict EDECODE come with the report */
    uint64_t to_write; /* items not skipped by the scan, for the space reservation */
    dlc__build_plan plan;
    dlc_field_spec fields[DLC_MAX_FIELDS]; /* the schema */
    uint32_t nfields;
    const char **names; /* the label names, num_labels of them, alive until finish */
    char *name_buf;     /* generated names ("0".."K-1"), NUL-separated */
    uint32_t num_labels;
    dlc_writer *wr;
    dlc__build_pipe p;
    int mu_ok, ready_ok, space_ok; /* which of p's mutex and conditions exist */
    dlc__build_worker *workers;
    uint32_t nworkers;
    XXH3_state_t *digest; /* the source digest, over the items in order */
    dlc_build_progress prog;
    double next_progress; /* dlc__now_s() of the next progress call */
    dlc_store *store;     /* the finished store, opened again for the report */
} build_run;

/* Check the options, refuse to replace a store without force, scan the sources and choose
 * the number of workers. */
static dlc_status scan_sources(build_run *b)
{
    dlc_status rc;
    const dlc_build_options *o = &b->o;
    CHECK(check_options(b->sources, b->nsources, b->out, o));
    CHECK(check_fields(&b->f));
    struct stat st;
    FAIL_IF(!o->force && lstat(b->out, &st) == 0, DLC_EEXIST,
            "%s: a store (or another file) is already there; it is replaced only with force",
            b->out);
    dlc__build_remove_stale_temps(b->out, o->log, o->log_user);

    for (size_t i = 0; i < b->nsources; i++)
        CHECK(dlc__source_add(&b->src, b->sources[i]));
    b->rep = calloc(1, sizeof *b->rep);
    FAIL_IF(!b->rep, -ENOMEM, "build: out of memory");
    b->keep_report = 1; /* From here, ENOIMAGES and strict EDECODE come with a report. */
    FAIL_IF(b->src.count == 0, DLC_ENOIMAGES, "%s: no image file in the source%s%s", b->sources[0],
            b->nsources > 1 ? "s" : "",
            b->src.kind == DLC__SOURCE_LIST
                ? " (a tar sample is KEY.jpg with KEY.cls, and the key ends at the first '.' "
                  "of the member's file name)"
                : "");

    const uint32_t threads_want = o->threads ? o->threads : dlc__cpu_count();
    b->nworkers = threads_want < MAX_THREADS ? threads_want : MAX_THREADS;
    if (b->nworkers > b->src.count)
        b->nworkers = (uint32_t)b->src.count;
    b->rep->threads = b->nworkers;
    for (size_t i = 0; i < b->src.count; i++)
        b->to_write += b->src.items[i].skip == DLC__SKIP_NONE;
    return DLC_OK;
fail:
    return rc;
}

/* The label names the writer is opened with: class folder names, or "0".."K-1" for lists,
 * packed into one buffer. They stay alive until finish, which gives them again. */
static dlc_status label_names(build_run *b)
{
    dlc_status rc = DLC_OK;
    const uint32_t nl = dlc__source_num_labels(&b->src);
    size_t len = 0;
    if (b->src.kind != DLC__SOURCE_FOLDER)
        for (uint32_t l = 0; l < nl; l++)
            len += (size_t)snprintf(NULL, 0, "%" PRIu32, l) + 1;
    b->names = calloc(nl ? nl : 1, sizeof *b->names);
    b->name_buf = malloc(len ? len : 1);
    FAIL_IF(!b->names || !b->name_buf, -ENOMEM, "build: out of memory for %u label names", nl);
    char tmp[24];
    for (uint32_t l = 0, off = 0; l < nl; l++) {
        const char *name = dlc__source_label_name(&b->src, l, tmp, sizeof tmp);
        if (b->src.kind != DLC__SOURCE_FOLDER) {
            const size_t n = strlen(name) + 1;
            memcpy(b->name_buf + off, name, n);
            name = b->name_buf + off;
            off += (uint32_t)n;
        }
        b->names[l] = name;
    }
    b->num_labels = nl;
fail:
    return rc;
}

/* What a record holds, field by field, as the writer's schema; and the label names. */
static dlc_status plan_record(build_run *b)
{
    const dlc_status rc =
        dlc__build_plan_make(&b->src, &b->o, &b->f, &b->plan, b->fields, &b->nfields);
    if (rc < 0 || b->plan.f_label == DLC_NO_FIELD)
        return rc;
    return label_names(b);
}

/* The public writer, with the schema and the label names; a disk without room for the
 * estimated payload fails here. */
static dlc_status open_writer(build_run *b)
{
    const dlc_writer_config cfg = {
        .fields = b->fields,
        .num_fields = b->nfields,
        .label_names = b->plan.f_label != DLC_NO_FIELD ? b->names : NULL,
        .num_labels = b->plan.f_label != DLC_NO_FIELD ? b->num_labels : 0,
        .force = b->o.force,
        .size_hint = b->to_write * payload_estimate(&b->o, &b->plan),
    };
    return dlc_writer_open(b->out, &cfg, &b->wr);
}

/* The reorder window with a record builder per slot, its lock and conditions, and the source
 * digest. */
static dlc_status pipe_init(build_run *b)
{
    dlc_status rc;
    dlc__build_pipe *p = &b->p;
    /* Enough slots that a slow image does not stall the other workers for
     * long, few enough that memory stays at a few records per thread. */
    p->src = &b->src;
    p->opts = &b->o;
    p->plan = &b->plan;
    p->n = b->src.count;
    p->window = 4 * (size_t)b->nworkers + 4;
    atomic_init(&p->next, 0);
    atomic_init(&p->stop, 0);
    p->slots = calloc(p->window, sizeof *p->slots);
    FAIL_IF(!p->slots, -ENOMEM, "build: out of memory");
    for (size_t i = 0; i < p->window; i++)
        CHECK(dlc_record_builder_create(b->wr, &p->slots[i].rec));
    FAIL_IF(pthread_mutex_init(&p->mu, NULL) != 0, -ENOMEM, "build: cannot create a mutex");
    b->mu_ok = 1;
    /* The writer's timed wait on `ready` measures against the monotonic clock. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    b->ready_ok = pthread_cond_init(&p->ready, &ca) == 0;
    b->space_ok = pthread_cond_init(&p->space, NULL) == 0;
    pthread_condattr_destroy(&ca);
    FAIL_IF(!b->ready_ok || !b->space_ok, -ENOMEM, "build: cannot create a condition variable");
    b->digest = XXH3_createState();
    FAIL_IF(!b->digest, -ENOMEM, "build: out of memory");
    XXH3_64bits_reset(b->digest);
    return DLC_OK;
fail:
    return rc;
}

/* A codec per worker, then the threads; fewer threads than asked for are slower, not wrong,
 * so only a first thread that cannot start is a failure. */
static dlc_status start_workers(build_run *b)
{
    dlc_status rc;
    b->workers = calloc(b->nworkers, sizeof *b->workers);
    FAIL_IF(!b->workers, -ENOMEM, "build: out of memory");
    for (uint32_t t = 0; t < b->nworkers; t++) {
        b->workers[t].p = &b->p;
        CHECK(dlc_codec_create(&b->workers[t].codec));
    }
    for (uint32_t t = 0; t < b->nworkers; t++) {
        const int e =
            pthread_create(&b->workers[t].tid, NULL, dlc__build_worker_main, &b->workers[t]);
        if (e != 0) {
            FAIL_IF(t == 0, -e, "build: cannot start a worker thread: %s", strerror(e));
            break;
        }
        b->workers[t].started = 1;
    }
    return DLC_OK;
fail:
    return rc;
}

/* Join the workers that run; they leave once stop is set (and, if they wait, woken). */
static void join_workers(build_run *b)
{
    for (uint32_t t = 0; t < b->nworkers; t++) {
        if (b->workers[t].started)
            pthread_join(b->workers[t].tid, NULL);
        b->workers[t].started = 0;
    }
}

/* Call the progress callback with the figures so far; its non-zero answer cancels. */
static dlc_status call_progress(build_run *b, double now)
{
    b->prog.seconds = now - b->t0;
    const int cancel = b->o.progress(b->o.progress_user, &b->prog);
    b->next_progress = dlc__now_s() + PROGRESS_GAP;
    if (cancel)
        return dlc__errorf(DLC_ECANCELED, "%s: build canceled", b->out);
    return DLC_OK;
}

/* Wait until a worker has filled @p sl, calling the progress callback when it is due, and
 * return the slot's state through @p state. */
static dlc_status wait_slot(build_run *b, const dlc__build_slot *sl, int *state)
{
    dlc__build_pipe *p = &b->p;
    pthread_mutex_lock(&p->mu);
    while (sl->state == DLC__SLOT_FREE) {
        const double now = dlc__now_s();
        if (now >= b->next_progress && b->o.progress) {
            pthread_mutex_unlock(&p->mu);
            const dlc_status rc = call_progress(b, now);
            if (rc < 0)
                return rc;
            pthread_mutex_lock(&p->mu);
            continue;
        }
        if (now >= b->next_progress)
            b->next_progress = now + PROGRESS_GAP;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        const double wait = b->next_progress - now;
        ts.tv_nsec += (long)(wait * 1e9);
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&p->ready, &p->mu, &ts);
    }
    *state = sl->state;
    pthread_mutex_unlock(&p->mu);
    return DLC_OK;
}

/* Report item @p j's skip: in the report, as a notice, and as the store's skipped count; with
 * strict, as the error that stops the build. */
static dlc_status skip_item(build_run *b, const char *path, const dlc__build_slot *sl)
{
    dlc_status rc;
    CHECK(dlc__report_add_skip(b->rep, &b->skips_cap, path, sl->why));
    FAIL_IF(b->o.strict, DLC_EDECODE, "%s: %s", path, sl->why);
    dlc__logf(b->o.log, b->o.log_user, DLC_LOG_WARN, "%s: skipped: %s", path, sl->why);
    dlc_writer_add_skipped(b->wr, 1);
    b->prog.skipped++;
fail:
    return rc;
}

/* An image stored with other channels than its source's: the first says why, the report
 * counts them all. */
static void note_converted(build_run *b, const char *path, const dlc__build_slot *sl)
{
    if (b->rep->converted++ == 0) {
        const size_t k = b->plan.keep_item;
        dlc__logf(b->o.log, b->o.log_user, DLC_LOG_WARN,
                  "%s: %u channel%s, stored as %u like the first image (%s) decided; every such "
                  "image is converted and counted",
                  path, sl->src_channels, sl->src_channels == 1 ? "" : "s", b->plan.channels,
                  k < b->src.count ? dlc__source_path(&b->src, &b->src.items[k]) : "?");
    }
}

/* Append item @p j's sealed record, or report its skip; then give the slot back to the
 * workers. */
static dlc_status write_item(build_run *b, size_t j, dlc__build_slot *sl, int state)
{
    const dlc__item *it = &b->src.items[j];
    const char *path = dlc__source_path(&b->src, it);
    dlc_status rc;
    if (state == DLC__SLOT_FATAL)
        return dlc__errorf(sl->status, "%s: %s", path, sl->why);
    hash_item(b->digest, path, sl->file_size, sl->mtime_ns, it->label);
    hash_extra(b->digest, &b->src, j, sl, b->plan.masks != NULL);
    b->prog.bytes_in += sl->bytes_in;
    if (state == DLC__SLOT_SKIP) {
        CHECK(skip_item(b, path, sl));
    } else {
        dlc__sealed rec;
        CHECK(dlc__record_sealed(sl->rec, &rec));
        CHECK(dlc_writer_append(b->wr, sl->rec));
        b->prog.bytes_out += rec.payload;
        if (sl->converted)
            note_converted(b, path, sl);
    }
    b->prog.done++;
    pthread_mutex_lock(&b->p.mu);
    sl->state = DLC__SLOT_FREE;
    b->p.write_next = j + 1;
    pthread_cond_broadcast(&b->p.space);
    pthread_mutex_unlock(&b->p.mu);
    return DLC_OK;
fail:
    return rc;
}

/* The writer: items in order, on the calling thread. A first progress call before any
 * record shows the total at once and lets a caller cancel at any point. */
static dlc_status write_items(build_run *b)
{
    dlc_status rc;
    b->prog.total = b->src.count;
    if (b->o.progress)
        CHECK(call_progress(b, dlc__now_s()));
    b->next_progress = dlc__now_s() + PROGRESS_GAP;
    for (size_t j = 0; j < b->p.n; j++) {
        dlc__build_slot *sl = &b->p.slots[j % b->p.window];
        int state;
        CHECK(wait_slot(b, sl, &state));
        CHECK(write_item(b, j, sl, state));
        const double now = dlc__now_s();
        if (b->o.progress && now >= b->next_progress)
            CHECK(call_progress(b, now));
    }
    return DLC_OK;
fail:
    return rc;
}

/* Give the writer what is known only now (the "build" text, the source digest, the skipped
 * count) and publish the store. */
static dlc_status finish_store(build_run *b)
{
    dlc_status rc;
    dlc_build_report *rep = b->rep;
    char *json = NULL;
    rep->count = dlc_writer_count(b->wr);
    rep->bytes_in = b->prog.bytes_in;
    rep->bytes_out = b->prog.bytes_out;
    FAIL_IF(rep->count == 0, DLC_ENOIMAGES, "%s: no valid image among %zu items (%llu skipped)",
            b->sources[0], b->src.count, (unsigned long long)rep->skipped);
    if (rep->converted > 1)
        dlc__logf(b->o.log, b->o.log_user, DLC_LOG_WARN,
                  "%llu images had other channels than the first and were converted to %u",
                  (unsigned long long)rep->converted, b->plan.channels);
    json = dlc__build_json(b->sources, b->nsources, &b->o, &b->f, b->nworkers, b->src.count,
                           rep->count, rep->skipped, dlc__now_s() - b->t0);
    FAIL_IF(!json, -ENOMEM, "build: out of memory");
    const int labelled = b->plan.f_label != DLC_NO_FIELD;
    CHECK(dlc__writer_set_meta(b->wr, labelled ? b->names : NULL, labelled ? b->num_labels : 0,
                               rep->skipped, json, XXH3_64bits_digest(b->digest)));
    rc = dlc_writer_finish(b->wr);
    b->wr = NULL; /* finish frees it in every case */
fail:
    free(json);
    return rc;
}

/* Read back what the store says about itself: the report then shows the digest a reader
 * will compute, and the file is known to open. */
static dlc_status fill_report(build_run *b)
{
    const dlc_status rc = dlc_store_open(b->out, DLC_STORE_SEQUENTIAL, &b->store);
    if (rc < 0)
        return rc;
    const dlc_store_info *info = dlc_store_get_info(b->store);
    dlc_build_report *rep = b->rep;
    rep->content_digest = info->content_digest;
    rep->file_bytes = info->file_bytes;
    rep->channels = b->plan.channels;
    rep->seconds = dlc__now_s() - b->t0;
    rep->images_per_s = rep->seconds > 0 ? (double)b->src.count / rep->seconds : 0;
    if (b->o.progress) {
        b->prog.seconds = rep->seconds;
        (void)b->o.progress(b->o.progress_user, &b->prog);
    }
    return DLC_OK;
}

/* Stop and join the workers, free them and their codecs. */
static void stop_workers(build_run *b)
{
    atomic_store(&b->p.stop, 1);
    if (b->mu_ok) {
        pthread_mutex_lock(&b->p.mu);
        if (b->space_ok)
            pthread_cond_broadcast(&b->p.space);
        pthread_mutex_unlock(&b->p.mu);
    }
    if (!b->workers)
        return;
    join_workers(b);
    for (uint32_t t = 0; t < b->nworkers; t++)
        dlc__build_worker_free(&b->workers[t]);
    free(b->workers);
}

/* Free the slots, their builders, the lock and the conditions. */
static void pipe_free(build_run *b)
{
    if (b->p.slots) {
        for (size_t i = 0; i < b->p.window; i++)
            dlc_record_builder_destroy(b->p.slots[i].rec);
        free(b->p.slots);
    }
    if (b->ready_ok)
        pthread_cond_destroy(&b->p.ready);
    if (b->space_ok)
        pthread_cond_destroy(&b->p.space);
    if (b->mu_ok)
        pthread_mutex_destroy(&b->p.mu);
}

/* Release everything @p b holds and hand out the report where the contract gives one. */
static dlc_status build_end(build_run *b, dlc_status rc, dlc_build_report **report_out)
{
    if (rc < 0 && b->rep) {
        b->rep->seconds = dlc__now_s() - b->t0;
        b->rep->images_per_s = b->rep->seconds > 0 ? (double)b->rep->count / b->rep->seconds : 0;
    }
    stop_workers(b);
    /* Keep the message of the failure: abort and cleanup must not replace it. */
    dlc__errsave saved;
    if (rc < 0)
        dlc__err_save(&saved);
    dlc_writer_abort(b->wr);
    dlc_store_close(b->store);
    pipe_free(b);
    XXH3_freeState(b->digest);
    free(b->names);
    free(b->name_buf);
    dlc__source_free(&b->src);
    if (rc < 0)
        dlc__err_restore(&saved, rc);
    const int give_report =
        rc == DLC_OK || (b->keep_report && (rc == DLC_ENOIMAGES || rc == DLC_EDECODE));
    if (give_report && report_out)
        *report_out = b->rep;
    else
        dlc_build_report_free(b->rep);
    return rc;
}

dlc_status dlc_build_with_fields(const char *const *sources, size_t nsources, const char *out,
                                 const dlc_build_options *opts_in, const dlc_build_fields *fields,
                                 dlc_build_report **report_out)
{
    dlc_status rc;
    build_run b;
    memset(&b, 0, sizeof b);
    b.t0 = dlc__now_s();
    b.sources = sources;
    b.nsources = nsources;
    b.out = out;
    if (opts_in)
        b.o = *opts_in;
    else
        dlc_build_options_init(&b.o);
    if (fields)
        b.f = *fields;
    else
        dlc_build_fields_init(&b.f);
    dlc__source_init(&b.src);
    b.src.log = b.o.log;
    b.src.log_user = b.o.log_user;
    if (report_out)
        *report_out = NULL;

    CHECK(scan_sources(&b));
    CHECK(plan_record(&b));
    CHECK(open_writer(&b));
    CHECK(pipe_init(&b));
    CHECK(start_workers(&b));
    CHECK(write_items(&b));
    atomic_store(&b.p.stop, 1);
    join_workers(&b);
    CHECK(finish_store(&b));
    CHECK(fill_report(&b));
    rc = DLC_OK;
fail:
    return build_end(&b, rc, report_out);
}

dlc_status dlc_build(const char *const *sources, size_t nsources, const char *out,
                     const dlc_build_options *opts, dlc_build_report **report)
{
    return dlc_build_with_fields(sources, nsources, out, opts, NULL, report);
}
