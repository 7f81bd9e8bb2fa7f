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

static void set_fatal(slot *sl, dlc_status rc)
{
    sl->status = rc;
    snprintf(sl->why, WHY_SIZE, "%s", dlc_errmsg());
}

/* Decode item @p i into its slot and hand it to the writer. */
static void work_item(worker *w, size_t i)
{
    build_pipe *p = w->p;
    const dlc_build_options *o = p->opts;
    slot *sl = &p->slots[i % p->window];
    const dlc__item *it = &p->src->items[i];
    int state = SLOT_SKIP;
    const uint8_t *payload = NULL;
    size_t psize = 0, row = 0, stride = 0;
    dlc_status rc;

    sl->bytes_in = 0;
    sl->file_size = it->size;
    sl->mtime_ns = it->mtime_ns;
    sl->why[0] = '\0';
    if (it->skip != DLC__SKIP_NONE) {
        struct stat st;
        if (it->shard == UINT32_MAX && stat(dlc__source_path(p->src, it), &st) == 0) {
            sl->file_size = (uint64_t)st.st_size;
            sl->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        }
        snprintf(sl->why, WHY_SIZE, "%s", dlc__skip_reason((dlc__skip_code)it->skip));
        goto publish;
    }
    dlc__source_data d;
    rc = dlc__source_read(p->src, i, &w->buf, &w->cap, &d, sl->why, WHY_SIZE);
    sl->file_size = d.file_size;
    sl->mtime_ns = d.mtime_ns;
    if (rc == DLC_EDECODE)
        goto publish;
    if (rc < 0) {
        set_fatal(sl, rc);
        state = SLOT_FATAL;
        goto publish;
    }
    sl->bytes_in = d.size;
    /* Every JPEG starts with SOI and another marker; this names the common
     * mistakes (a PNG or a text file called .jpg) better than the decoder does. */
    if (d.size < 3 || d.data[0] != 0xFF || d.data[1] != 0xD8 || d.data[2] != 0xFF) {
        snprintf(sl->why, WHY_SIZE, "not a JPEG (the file does not start with a JPEG marker)");
        goto publish;
    }
    dlc_image img;
    rc = dlc_jpeg_decode_resize(w->codec, d.data, d.size, o->size, o->center_crop, &img);
    if (rc == -ENOMEM) {
        set_fatal(sl, rc);
        state = SLOT_FATAL;
        goto publish;
    }
    if (rc < 0) {
        const char *m = dlc_errmsg();
        snprintf(sl->why, WHY_SIZE, "cannot decode: %s", *m ? m : dlc_strerror(rc));
        goto publish;
    }
    sl->height = img.height;
    sl->width = img.width;
    sl->channels = img.channels;
    row = (size_t)img.width * img.channels;
    if (o->encoding == DLC_ENCODING_JPEG) {
        rc = dlc_jpeg_encode(w->codec, &img, o->quality, &payload, &psize);
        if (rc < 0) {
            set_fatal(sl, rc);
            state = SLOT_FATAL;
            goto publish;
        }
        row = stride = psize;
    } else {
        payload = img.data;
        stride = img.stride;
        psize = row * img.height;
    }
    state = SLOT_READY;

publish:
    pthread_mutex_lock(&p->mu);
    if (state == SLOT_READY && stride == row && p->write_next == i) {
        /* The writer wants exactly this item: lend it the codec's output
         * instead of copying it, and wait until it is in the store. */
        sl->data = payload;
        sl->size = psize;
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
        rc = slot_copy(sl, payload, psize, row, stride,
                       o->encoding == DLC_ENCODING_JPEG ? 1 : img.height);
        if (rc < 0) {
            set_fatal(sl, rc);
            state = SLOT_FATAL;
        }
    }
    pthread_mutex_lock(&p->mu);
    sl->state = state;
    pthread_cond_signal(&p->ready);
    pthread_mutex_unlock(&p->mu);
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
    const uint64_t v[3] = {size, (uint64_t)mtime_ns, (uint64_t)label};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 8; i++)
            b[8 * k + i] = (uint8_t)(v[k] >> (8 * i));
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

dlc_status dlc_build(const char *const *sources, size_t nsources, const char *out,
                     const dlc_build_options *opts_in, dlc_build_report **report_out)
{
    dlc_status rc;
    const double t0 = dlc__now_s();
    dlc_build_options o;
    if (opts_in)
        o = *opts_in;
    else
        dlc_build_options_init(&o);
    dlc__source_set src;
    dlc__source_init(&src);
    src.log = o.log;
    src.log_user = o.log_user;
    dlc__store_writer *wr = NULL;
    dlc_build_report *rep = NULL;
    size_t skips_cap = 0;
    build_pipe p;
    memset(&p, 0, sizeof p);
    int mu_ok = 0, ready_ok = 0, space_ok = 0;
    worker *workers = NULL;
    uint32_t nworkers = 0;
    XXH3_state_t *digest = NULL;
    char *json = NULL;
    const char **names = NULL;
    char *name_buf = NULL;
    dlc_store *store = NULL;
    int keep_report = 0;

    if (report_out)
        *report_out = NULL;
    CHECK(check_options(sources, nsources, out, &o));
    struct stat st;
    FAIL_IF(!o.force && lstat(out, &st) == 0, DLC_EEXIST,
            "%s: a store (or another file) is already there; it is replaced only with force", out);
    dlc__build_remove_stale_temps(out, o.log, o.log_user);

    for (size_t i = 0; i < nsources; i++)
        CHECK(dlc__source_add(&src, sources[i]));
    rep = calloc(1, sizeof *rep);
    FAIL_IF(!rep, -ENOMEM, "build: out of memory");
    keep_report = 1; /* From here, ENOIMAGES and strict EDECODE come with a report. */
    FAIL_IF(src.count == 0, DLC_ENOIMAGES, "%s: no image file in the source%s%s", sources[0],
            nsources > 1 ? "s" : "",
            src.kind == DLC__SOURCE_LIST
                ? " (a tar sample is KEY.jpg with KEY.cls, and the key ends at the first '.' "
                  "of the member's file name)"
                : "");

    const uint32_t threads_want = o.threads ? o.threads : dlc__cpu_count();
    nworkers = threads_want < MAX_THREADS ? threads_want : MAX_THREADS;
    if (nworkers > src.count)
        nworkers = (uint32_t)src.count;
    rep->threads = nworkers;

    uint64_t to_decode = 0;
    for (size_t i = 0; i < src.count; i++)
        to_decode += src.items[i].skip == DLC__SKIP_NONE;
    CHECK(dlc__store_writer_open(out, o.force, to_decode * payload_estimate(&o), &wr));

    /* Enough slots that a slow image does not stall the other workers for
     * long, few enough that memory stays at a few records per thread. */
    p.src = &src;
    p.opts = &o;
    p.n = src.count;
    p.window = 4 * (size_t)nworkers + 4;
    atomic_init(&p.next, 0);
    atomic_init(&p.stop, 0);
    p.slots = calloc(p.window, sizeof *p.slots);
    FAIL_IF(!p.slots, -ENOMEM, "build: out of memory");
    FAIL_IF(pthread_mutex_init(&p.mu, NULL) != 0, -ENOMEM, "build: cannot create a mutex");
    mu_ok = 1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    ready_ok = pthread_cond_init(&p.ready, &ca) == 0;
    space_ok = pthread_cond_init(&p.space, NULL) == 0;
    pthread_condattr_destroy(&ca);
    FAIL_IF(!ready_ok || !space_ok, -ENOMEM, "build: cannot create a condition variable");
    digest = XXH3_createState();
    FAIL_IF(!digest, -ENOMEM, "build: out of memory");
    XXH3_64bits_reset(digest);

    workers = calloc(nworkers, sizeof *workers);
    FAIL_IF(!workers, -ENOMEM, "build: out of memory");
    for (uint32_t t = 0; t < nworkers; t++) {
        workers[t].p = &p;
        CHECK(dlc_codec_create(&workers[t].codec));
    }
    for (uint32_t t = 0; t < nworkers; t++) {
        const int e = pthread_create(&workers[t].tid, NULL, worker_main, &workers[t]);
        if (e != 0) {
            FAIL_IF(t == 0, -e, "build: cannot start a worker thread: %s", strerror(e));
            break; /* Fewer threads are slower, not wrong. */
        }
        workers[t].started = 1;
    }

    /* The writer: items in order. A first progress call before any record
     * shows the total at once and lets a caller cancel at any point. */
    dlc_build_progress prog = {.total = src.count, .seconds = dlc__now_s() - t0};
    FAIL_IF(o.progress && o.progress(o.progress_user, &prog), DLC_ECANCELED, "%s: build canceled",
            out);
    double next_progress = dlc__now_s() + PROGRESS_GAP;
    for (size_t j = 0; j < p.n; j++) {
        slot *sl = &p.slots[j % p.window];
        pthread_mutex_lock(&p.mu);
        while (sl->state == SLOT_FREE) {
            double now = dlc__now_s();
            if (now >= next_progress && o.progress) {
                pthread_mutex_unlock(&p.mu);
                prog.seconds = now - t0;
                const int cancel = o.progress(o.progress_user, &prog);
                next_progress = dlc__now_s() + PROGRESS_GAP;
                FAIL_IF(cancel, DLC_ECANCELED, "%s: build canceled", out);
                pthread_mutex_lock(&p.mu);
                continue;
            }
            if (now >= next_progress)
                next_progress = now + PROGRESS_GAP;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            const double wait = next_progress - now;
            ts.tv_nsec += (long)(wait * 1e9);
            ts.tv_sec += ts.tv_nsec / 1000000000;
            ts.tv_nsec %= 1000000000;
            pthread_cond_timedwait(&p.ready, &p.mu, &ts);
        }
        const int state = sl->state;
        pthread_mutex_unlock(&p.mu);

        const dlc__item *it = &src.items[j];
        const char *path = dlc__source_path(&src, it);
        if (state == SLOT_FATAL) {
            rc = dlc__errorf(sl->status, "%s: %s", path, sl->why);
            goto fail;
        }
        hash_item(digest, path, sl->file_size, sl->mtime_ns, it->label);
        prog.bytes_in += sl->bytes_in;
        if (state == SLOT_SKIP) {
            if (o.strict) {
                rc = dlc__report_add_skip(rep, &skips_cap, path, sl->why);
                if (rc >= 0)
                    rc = dlc__errorf(DLC_EDECODE, "%s: %s", path, sl->why);
                goto fail;
            }
            CHECK(dlc__report_add_skip(rep, &skips_cap, path, sl->why));
            dlc__logf(o.log, o.log_user, DLC_LOG_WARN, "%s: skipped: %s", path, sl->why);
            prog.skipped++;
        } else {
            CHECK(dlc__store_writer_put(wr, it->label, sl->height, sl->width, sl->channels,
                                        o.encoding, sl->data, sl->size));
            prog.bytes_out += sl->size;
        }
        prog.done++;
        pthread_mutex_lock(&p.mu);
        sl->state = SLOT_FREE;
        p.write_next = j + 1;
        pthread_cond_broadcast(&p.space);
        pthread_mutex_unlock(&p.mu);

        const double now = dlc__now_s();
        if (o.progress && now >= next_progress) {
            prog.seconds = now - t0;
            FAIL_IF(o.progress(o.progress_user, &prog), DLC_ECANCELED, "%s: build canceled", out);
            next_progress = dlc__now_s() + PROGRESS_GAP;
        }
    }
    atomic_store(&p.stop, 1);
    for (uint32_t t = 0; t < nworkers; t++) {
        if (workers[t].started)
            pthread_join(workers[t].tid, NULL);
        workers[t].started = 0;
    }

    rep->count = dlc__store_writer_count(wr);
    rep->bytes_in = prog.bytes_in;
    rep->bytes_out = prog.bytes_out;
    FAIL_IF(rep->count == 0, DLC_ENOIMAGES, "%s: no valid image among %zu items (%llu skipped)",
            sources[0], src.count, (unsigned long long)rep->skipped);

    /* Label names for the metadata; lists get "0".."K-1". */
    const uint32_t nl = dlc__source_num_labels(&src);
    names = calloc(nl ? nl : 1, sizeof *names);
    name_buf = malloc((size_t)(nl ? nl : 1) * 24);
    FAIL_IF(!names || !name_buf, -ENOMEM, "build: out of memory for %u label names", nl);
    for (uint32_t l = 0; l < nl; l++)
        names[l] = dlc__source_label_name(&src, l, name_buf + (size_t)l * 24, 24);
    json = dlc__build_json(sources, nsources, &o, nworkers, src.count, rep->count, rep->skipped,
                           dlc__now_s() - t0);
    FAIL_IF(!json, -ENOMEM, "build: out of memory");
    const dlc__store_meta meta = {
        .label_names = names,
        .num_labels = nl,
        .skipped = rep->skipped,
        .build_json = json,
        .source_digest = XXH3_64bits_digest(digest),
    };
    rc = dlc__store_writer_finish(wr, &meta);
    wr = NULL; /* finish frees it in every case */
    CHECK(rc);

    /* Read back what the store says about itself: the report then shows the
     * digest a reader will compute, and the file is known to open. */
    CHECK(dlc_store_open(out, DLC_STORE_SEQUENTIAL, &store));
    const dlc_store_info *info = dlc_store_get_info(store);
    rep->content_digest = info->content_digest;
    rep->file_bytes = info->file_bytes;
    rep->seconds = dlc__now_s() - t0;
    rep->images_per_s = rep->seconds > 0 ? (double)src.count / rep->seconds : 0;
    if (o.progress) {
        prog.seconds = rep->seconds;
        (void)o.progress(o.progress_user, &prog);
    }
    rc = DLC_OK;

fail:
    if (rc < 0 && rep) {
        rep->seconds = dlc__now_s() - t0;
        rep->images_per_s = rep->seconds > 0 ? (double)rep->count / rep->seconds : 0;
    }
    atomic_store(&p.stop, 1);
    if (mu_ok) {
        pthread_mutex_lock(&p.mu);
        if (space_ok)
            pthread_cond_broadcast(&p.space);
        pthread_mutex_unlock(&p.mu);
    }
    if (workers) {
        for (uint32_t t = 0; t < nworkers; t++) {
            if (workers[t].started) {
                pthread_join(workers[t].tid, NULL);
                workers[t].started = 0;
            }
            dlc_codec_destroy(workers[t].codec);
            free(workers[t].buf);
        }
        free(workers);
    }
    /* Keep the message of the failure: abort and cleanup must not replace it. */
    dlc__errsave saved;
    if (rc < 0)
        dlc__err_save(&saved);
    dlc__store_writer_abort(wr);
    dlc_store_close(store);
    if (p.slots) {
        for (size_t i = 0; i < p.window; i++)
            free(p.slots[i].buf);
        free(p.slots);
    }
    if (ready_ok)
        pthread_cond_destroy(&p.ready);
    if (space_ok)
        pthread_cond_destroy(&p.space);
    if (mu_ok)
        pthread_mutex_destroy(&p.mu);
    XXH3_freeState(digest);
    free(json);
    free(names);
    free(name_buf);
    dlc__source_free(&src);
    if (rc < 0)
        dlc__err_restore(&saved, rc);
    const int give_report =
        rc == DLC_OK || (keep_report && (rc == DLC_ENOIMAGES || rc == DLC_EDECODE));
    if (give_report && report_out)
        *report_out = rep;
    else
        dlc_build_report_free(rep);
    return rc;
}
