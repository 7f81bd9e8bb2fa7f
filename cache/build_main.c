/* dlc_build(): scan the sources, decode and resize on every core, write the
 * records in item order.
 *
 * The pipeline. Worker threads claim item numbers in increasing order from
 * one atomic counter and each works on its own item: one pread of the source
 * bytes into a per-thread buffer, decode + resize (+ JPEG encode) in a
 * per-thread codec. Results go into a ring of `window` slots, slot i % window
 * for item i, and the calling thread writes them to the store strictly in
 * item order. So the store's bytes do not depend on the number of threads or
 * on timing, and memory is bounded by window x (one record) whatever the size
 * of the data set.
 *
 * Copies: when a worker finishes the very item the writer waits for, it lends
 * its codec's output to the writer (slot state BORROWED) and waits until the
 * writer has copied it into the store's map; otherwise it copies the output
 * into its slot once. The writer's put is the only other copy, into the file.
 *
 * Locking: one mutex guards the slot states and write_next; it is taken a few
 * times per image (an image costs milliseconds to decode), never while
 * decoding or writing. Workers wait on `space` (window full, or a lent output
 * not yet consumed); the writer waits on `ready` with a timeout, so it can
 * call the progress callback about ten times a second.
 *
 * Stages: dlc_build() runs scan_sources(), opens the writer, then pipe_init(),
 * start_workers(), write_items(), finish_store() and fill_report(); each keeps
 * what it makes in one build_run, and build_end() releases it on every path.
 */
#include "build_internal.h"
#include "common.h"
#include "source.h"
#include "store_writer.h"

#include <dlcache/image.h>

#include <errno.h>
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

#define WHY_SIZE 512
#define MAX_THREADS 256u
#define MAX_SIZE 8192u
#define PROGRESS_GAP 0.1

enum slot_state {
    SLOT_FREE = 0, /* being worked on, or not claimed yet */
    SLOT_READY,    /* payload copied into the slot's buffer */
    SLOT_BORROWED, /* payload in the worker's codec; the worker waits until write_next passes it */
    SLOT_SKIP,     /* item skipped; why says why */
    SLOT_FATAL,    /* a failure that stops the build; status and why */
};

typedef struct slot {
    int state;    /* enum slot_state; guarded by build_pipe.mu */
    uint8_t *buf; /* owned copy of a payload; grows to the largest record */
    size_t cap;
    const uint8_t *data; /* payload to write: buf, or the lending worker's codec output */
    size_t size;
    uint32_t height, width, channels;
    uint64_t bytes_in;  /* source bytes read for this item */
    uint64_t file_size; /* for the source digest */
    int64_t mtime_ns;
    dlc_status status;  /* SLOT_FATAL */
    char why[WHY_SIZE]; /* SLOT_SKIP reason, SLOT_FATAL message */
} slot;

typedef struct build_pipe {
    const dlc__source_set *src;
    const dlc_build_options *opts;
    size_t n;      /* items */
    size_t window; /* slots */
    slot *slots;
    atomic_size_t next; /* next item to claim */
    atomic_int stop;    /* set by the writer: workers finish their item and leave */
    pthread_mutex_t mu;
    pthread_cond_t ready; /* a slot was filled (the writer waits) */
    pthread_cond_t space; /* write_next moved or stop was set (workers wait) */
    size_t write_next;    /* the item the writer needs next; guarded by mu */
} build_pipe;

typedef struct worker {
    build_pipe *p;
    dlc_codec *codec;
    uint8_t *buf; /* source bytes of the current item */
    size_t cap;
    pthread_t tid;
    int started;
} worker;

/* Copy the payload into the slot's own buffer (rows packed). */
static dlc_status slot_copy(slot *sl, const uint8_t *data, size_t size, size_t row, size_t stride,
                            uint32_t rows)
{
    if (size > sl->cap) {
        uint8_t *b = realloc(sl->buf, size);
        if (!b)
            return dlc__errorf(-ENOMEM, "build: out of memory for a %zu-byte record", size);
        sl->buf = b;
        sl->cap = size;
    }
    if (stride == row) {
        memcpy(sl->buf, data, size);
    } else {
        for (uint32_t y = 0; y < rows; y++)
            memcpy(sl->buf + (size_t)y * row, data + (size_t)y * stride, row);
    }
    sl->data = sl->buf;
    sl->size = size;
    return DLC_OK;
}

/* Record a failure that stops the build in the slot; returns SLOT_FATAL. */
static int set_fatal(slot *sl, dlc_status rc)
{
    sl->status = rc;
    snprintf(sl->why, WHY_SIZE, "%s", dlc_errmsg());
    return SLOT_FATAL;
}

/* What a worker made of one item, for publish_item(). */
typedef struct item_out {
    int state;              /* SLOT_READY, SLOT_SKIP or SLOT_FATAL */
    const uint8_t *payload; /* SLOT_READY: in the worker's codec */
    size_t size;            /* payload bytes */
    size_t row, stride;     /* bytes per packed row, and between the payload's rows */
    uint32_t rows;
} item_out;

/* Read item @p i's source bytes into @p d. Returns SLOT_READY when they are worth decoding,
 * else SLOT_SKIP or SLOT_FATAL with the slot's why set. The slot's digest fields are set
 * either way. */
static int read_item(worker *w, size_t i, slot *sl, dlc__source_data *d)
{
    const dlc__source_set *src = w->p->src;
    const dlc__item *it = &src->items[i];
    sl->bytes_in = 0;
    sl->why[0] = '\0';
    if (it->skip != DLC__SKIP_NONE) {
        dlc__source_stat(src, i, d);
        sl->file_size = d->file_size;
        sl->mtime_ns = d->mtime_ns;
        snprintf(sl->why, WHY_SIZE, "%s", dlc__skip_reason((dlc__skip_code)it->skip));
        return SLOT_SKIP;
    }
    const dlc_status rc = dlc__source_read(src, i, &w->buf, &w->cap, d, sl->why, WHY_SIZE);
    sl->file_size = d->file_size;
    sl->mtime_ns = d->mtime_ns;
    if (rc == DLC_EDECODE)
        return SLOT_SKIP;
    if (rc < 0)
        return set_fatal(sl, rc);
    sl->bytes_in = d->size;
    /* Every JPEG starts with SOI and another marker; this names the common
     * mistakes (a PNG or a text file called .jpg) better than the decoder does. */
    if (d->size < 3 || d->data[0] != 0xFF || d->data[1] != 0xD8 || d->data[2] != 0xFF) {
        snprintf(sl->why, WHY_SIZE, "not a JPEG (the file does not start with a JPEG marker)");
        return SLOT_SKIP;
    }
    return SLOT_READY;
}

/* Decode and resize the item's bytes (and re-encode them with DLC_ENCODING_JPEG) in the
 * worker's codec. Returns the slot state, as read_item() does. */
static int convert_item(worker *w, const dlc__source_data *d, slot *sl, item_out *r)
{
    const dlc_build_options *o = w->p->opts;
    dlc_image img;
    dlc_status rc =
        dlc_jpeg_decode_resize(w->codec, d->data, d->size, o->size, o->center_crop, &img);
    if (rc == -ENOMEM)
        return set_fatal(sl, rc);
    if (rc < 0) {
        const char *m = dlc_errmsg();
        snprintf(sl->why, WHY_SIZE, "cannot decode: %s", *m ? m : dlc_strerror(rc));
        return SLOT_SKIP;
    }
    sl->height = img.height;
    sl->width = img.width;
    sl->channels = img.channels;
    if (o->encoding == DLC_ENCODING_JPEG) {
        rc = dlc_jpeg_encode(w->codec, &img, o->quality, &r->payload, &r->size);
        if (rc < 0)
            return set_fatal(sl, rc);
        r->row = r->stride = r->size;
        r->rows = 1;
    } else {
        r->payload = img.data;
        r->row = (size_t)img.width * img.channels;
        r->stride = img.stride;
        r->rows = img.height;
        r->size = r->row * img.height;
    }
    return SLOT_READY;
}

/* Hand item @p i's result to the writer: lent when the writer waits for exactly this item
 * and the output is packed, else copied into the slot. */
static void publish_item(worker *w, size_t i, slot *sl, const item_out *r)
{
    build_pipe *p = w->p;
    int state = r->state;
    pthread_mutex_lock(&p->mu);
    if (state == SLOT_READY && r->stride == r->row && p->write_next == i) {
        /* The writer wants exactly this item: lend it the codec's output
         * instead of copying it, and wait until it is in the store. */
        sl->data = r->payload;
        sl->size = r->size;
        sl->state = SLOT_BORROWED;
        pthread_cond_signal(&p->ready);
        /* Wait on write_next, not on the slot's state: once consumed, the
         * slot may be claimed and lent again for item i + window. */
        while (p->write_next <= i && !atomic_load(&p->stop))
            pthread_cond_wait(&p->space, &p->mu);
        pthread_mutex_unlock(&p->mu);
        return;
    }
    pthread_mutex_unlock(&p->mu);
    if (state == SLOT_READY) {
        const dlc_status rc = slot_copy(sl, r->payload, r->size, r->row, r->stride, r->rows);
        if (rc < 0)
            state = set_fatal(sl, rc);
    }
    pthread_mutex_lock(&p->mu);
    sl->state = state;
    pthread_cond_signal(&p->ready);
    pthread_mutex_unlock(&p->mu);
}

/* Decode item @p i into its slot and hand it to the writer. */
static void work_item(worker *w, size_t i)
{
    slot *sl = &w->p->slots[i % w->p->window];
    dlc__source_data d;
    item_out r = {.state = read_item(w, i, sl, &d)};
    if (r.state == SLOT_READY)
        r.state = convert_item(w, &d, sl, &r);
    publish_item(w, i, sl, &r);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    build_pipe *p = w->p;
    for (;;) {
        const size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n || atomic_load(&p->stop))
            break;
        /* Slot i % window is free once the writer is past item i - window. */
        pthread_mutex_lock(&p->mu);
        while (i >= p->write_next + p->window && !atomic_load(&p->stop))
            pthread_cond_wait(&p->space, &p->mu);
        pthread_mutex_unlock(&p->mu);
        if (atomic_load(&p->stop))
            break;
        work_item(w, i);
    }
    return NULL;
}

/* Expected payload bytes per record, for the writer's space reservation. */
static uint64_t payload_estimate(const dlc_build_options *o)
{
    const uint64_t sq = (uint64_t)o->size * o->size * 3;
    uint64_t raw = o->center_crop ? sq : sq * 4 / 3; /* photos are mostly 4:3 */
    if (o->encoding == DLC_ENCODING_JPEG)
        raw /= o->quality >= 90 ? 4 : 8;
    return raw;
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
    double t0; /* dlc__now_s() at the start */
    dlc__source_set src;
    dlc_build_report *rep;
    size_t skips_cap;  /* of rep->skips */
    int keep_report;   /* ENOIMAGES and strict EDECODE come with the report */
    uint64_t to_write; /* items not skipped by the scan, for the space reservation */
    dlc__store_writer *wr;
    build_pipe p;
    int mu_ok, ready_ok, space_ok; /* which of p's mutex and conditions exist */
    worker *workers;
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

/* The reorder window, its lock and conditions, and the source digest. */
static dlc_status pipe_init(build_run *b)
{
    dlc_status rc;
    build_pipe *p = &b->p;
    /* Enough slots that a slow image does not stall the other workers for
     * long, few enough that memory stays at a few records per thread. */
    p->src = &b->src;
    p->opts = &b->o;
    p->n = b->src.count;
    p->window = 4 * (size_t)b->nworkers + 4;
    atomic_init(&p->next, 0);
    atomic_init(&p->stop, 0);
    p->slots = calloc(p->window, sizeof *p->slots);
    FAIL_IF(!p->slots, -ENOMEM, "build: out of memory");
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
        const int e = pthread_create(&b->workers[t].tid, NULL, worker_main, &b->workers[t]);
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
static dlc_status wait_slot(build_run *b, const slot *sl, int *state)
{
    build_pipe *p = &b->p;
    pthread_mutex_lock(&p->mu);
    while (sl->state == SLOT_FREE) {
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

/* Write item @p j from its slot, or report its skip; then give the slot back to the workers. */
static dlc_status write_item(build_run *b, size_t j, slot *sl, int state)
{
    const dlc__item *it = &b->src.items[j];
    const char *path = dlc__source_path(&b->src, it);
    dlc_status rc;
    if (state == SLOT_FATAL)
        return dlc__errorf(sl->status, "%s: %s", path, sl->why);
    hash_item(b->digest, path, sl->file_size, sl->mtime_ns, it->label);
    b->prog.bytes_in += sl->bytes_in;
    if (state == SLOT_SKIP) {
        CHECK(dlc__report_add_skip(b->rep, &b->skips_cap, path, sl->why));
        FAIL_IF(b->o.strict, DLC_EDECODE, "%s: %s", path, sl->why);
        dlc__logf(b->o.log, b->o.log_user, DLC_LOG_WARN, "%s: skipped: %s", path, sl->why);
        b->prog.skipped++;
    } else {
        CHECK(dlc__store_writer_put(b->wr, it->label, sl->height, sl->width, sl->channels,
                                    b->o.encoding, sl->data, sl->size));
        b->prog.bytes_out += sl->size;
    }
    b->prog.done++;
    pthread_mutex_lock(&b->p.mu);
    sl->state = SLOT_FREE;
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
        slot *sl = &b->p.slots[j % b->p.window];
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

/* Write the metadata (label names, "build", source digest) and publish the store. */
static dlc_status finish_store(build_run *b)
{
    dlc_status rc;
    dlc_build_report *rep = b->rep;
    const char **names = NULL;
    char *name_buf = NULL, *json = NULL;
    rep->count = dlc__store_writer_count(b->wr);
    rep->bytes_in = b->prog.bytes_in;
    rep->bytes_out = b->prog.bytes_out;
    FAIL_IF(rep->count == 0, DLC_ENOIMAGES, "%s: no valid image among %zu items (%llu skipped)",
            b->sources[0], b->src.count, (unsigned long long)rep->skipped);

    /* Label names for the metadata; lists get "0".."K-1". */
    const uint32_t nl = dlc__source_num_labels(&b->src);
    names = calloc(nl ? nl : 1, sizeof *names);
    name_buf = malloc((size_t)(nl ? nl : 1) * 24);
    FAIL_IF(!names || !name_buf, -ENOMEM, "build: out of memory for %u label names", nl);
    for (uint32_t l = 0; l < nl; l++)
        names[l] = dlc__source_label_name(&b->src, l, name_buf + (size_t)l * 24, 24);
    json = dlc__build_json(b->sources, b->nsources, &b->o, b->nworkers, b->src.count, rep->count,
                           rep->skipped, dlc__now_s() - b->t0);
    FAIL_IF(!json, -ENOMEM, "build: out of memory");
    const dlc__store_meta meta = {
        .label_names = names,
        .num_labels = nl,
        .skipped = rep->skipped,
        .build_json = json,
        .source_digest = XXH3_64bits_digest(b->digest),
    };
    rc = dlc__store_writer_finish(b->wr, &meta);
    b->wr = NULL; /* finish frees it in every case */
fail:
    free(json);
    free(names);
    free(name_buf);
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
    for (uint32_t t = 0; t < b->nworkers; t++) {
        dlc_codec_destroy(b->workers[t].codec);
        free(b->workers[t].buf);
    }
    free(b->workers);
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
    dlc__store_writer_abort(b->wr);
    dlc_store_close(b->store);
    if (b->p.slots) {
        for (size_t i = 0; i < b->p.window; i++)
            free(b->p.slots[i].buf);
        free(b->p.slots);
    }
    if (b->ready_ok)
        pthread_cond_destroy(&b->p.ready);
    if (b->space_ok)
        pthread_cond_destroy(&b->p.space);
    if (b->mu_ok)
        pthread_mutex_destroy(&b->p.mu);
    XXH3_freeState(b->digest);
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

dlc_status dlc_build(const char *const *sources, size_t nsources, const char *out,
                     const dlc_build_options *opts_in, dlc_build_report **report_out)
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
    dlc__source_init(&b.src);
    b.src.log = b.o.log;
    b.src.log_user = b.o.log_user;
    if (report_out)
        *report_out = NULL;

    CHECK(scan_sources(&b));
    CHECK(dlc__store_writer_open(out, b.o.force, b.to_write * payload_estimate(&b.o), &b.wr));
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
