/* devsim: the CPU stand-in of the device operations (devsim.h has the model).
 *
 * One mutex (devsim.mu) guards everything: the block list, the streams' queues, the events, the
 * global list of operations not finished yet (in enqueue order, what the hazard check scans) and
 * the counters. A stream's thread takes the operation at the head of its queue under the mutex,
 * sleeps its random delay, waits (stream_wait) or checks for hazards, marks it running, and
 * executes it with the mutex released; it takes the mutex again to finish it (an event's mark
 * completes, the operation leaves both lists) and wakes every host wait through one condition
 * variable. An operation stays at its queue's head until it has finished, so a stream runs one
 * operation at a time and stream_sync only has to look at the head. */
#include "devsim.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

typedef struct sim_block {
    uint8_t *base;
    size_t size; /* As asked: the range checks use it, not the rounded allocation. */
    uint32_t id;
    int device; /* -1 for pinned host blocks. */
    int pinned;
    struct sim_block *next;
} sim_block;

/* A byte range an operation touches, with the block it lies in (for the messages). */
typedef struct sim_range {
    const uint8_t *p;
    size_t n;
    uint32_t block;
    int pinned;
} sim_range;

typedef enum sim_kind {
    K_COPY_H2D,
    K_COPY_D2D,
    K_CONVERT,
    K_MARK,
    K_WAIT,
    K_MIX,
    K_ERASE
} sim_kind;

static const char *const kind_names[] = {"copy_h2d",    "copy_d2d", "convert", "event_record",
                                         "stream_wait", "mix",      "erase"};

struct sim_stream;
struct sim_event;

typedef struct sim_op {
    sim_kind kind;
    uint64_t seq; /* Global enqueue number. */
    struct sim_stream *stream;
    int fault; /* 0, or DEVSIM_FAULT_ASYNC / DEVSIM_FAULT_STICKY. */
    int running;
    sim_range rd, wr;
    void *dst;
    const void *src;
    size_t bytes;
    uint64_t src_hash; /* copy_h2d: XXH3 of the host source when enqueued. */
    dlc__hd_conv cv;   /* convert: copied at enqueue, as a kernel's arguments are. */
    dlc__hd_mix mx;    /* mix: likewise. */
    dlc__hd_erase er;  /* erase: likewise. */
    struct sim_event *ev;
    uint64_t ticket;              /* The event's record (mark) or the one waited for (wait). */
    struct sim_op *qnext;         /* In the stream's queue. */
    struct sim_op *gprev, *gnext; /* In the sim's list of unfinished operations. */
} sim_op;

typedef struct sim_stream {
    devsim *sim;
    uint32_t id; /* 0: the default stream. */
    int device;  /* -1: the default stream (any device). */
    pthread_t thread;
    pthread_cond_t cv; /* Work, pause or stop changed. */
    sim_op *head, *tail;
    int stop, paused;
    uint64_t rng;
    uint32_t max_delay_us;
    struct sim_stream *next;
} sim_stream;

typedef struct sim_event {
    uint32_t id;
    int device;
    uint64_t last;     /* Ticket of the most recent record; 0: never recorded. */
    uint64_t *pending; /* Tickets recorded and not executed yet, ascending. */
    size_t npending, cap;
    int refs;      /* The user's (until event_destroy) and one per operation naming it. */
    double t_mark; /* now_s() when its latest record ran (event_elapsed_ms). */
    struct sim_event *next;
} sim_event;

typedef struct sim_fault {
    uint64_t left; /* Calls until it fires; 0: none. */
    devsim_fault_mode mode;
} sim_fault;

struct devsim {
    dlc__devops ops;
    devsim_opts opts;
    uint64_t id; /* Tells this sim's current-device marks from another sim's. */
    pthread_mutex_t mu;
    pthread_cond_t done_cv; /* An operation finished, or an error was set. */
    sim_block *blocks;
    sim_stream *streams; /* The user's; the default stream is dflt. */
    sim_stream *dflt;
    sim_event *events;
    sim_op *ghead, *gtail; /* Unfinished operations, ascending seq. */
    uint64_t seq;
    uint32_t next_block, next_stream, next_event;
    uint64_t call_rng;
    int async_pending, sticky;
    sim_fault faults[DEVSIM_OP_COUNT];
    devsim_stats st;
    char first_hazard[512];
    char last_fault[160];
};

/* The device current on this thread, and the sim it belongs to. */
static _Thread_local uint64_t tls_sim;
static _Thread_local int tls_device = -1;

static const char *const op_names[DEVSIM_OP_COUNT] = {
    "device_count", "set_device",   "device_enter",  "device_leave",  "host_alloc",
    "host_free",    "dev_alloc",    "dev_free",      "stream_create", "stream_destroy",
    "stream_sync",  "event_create", "event_destroy", "event_record",  "stream_wait",
    "event_query",  "event_sync",   "copy_h2d",      "copy_d2d",      "convert",
    "bench_h2d",    "mix",          "erase"};

const char *devsim_op_name(devsim_op op)
{
    return (unsigned)op < DEVSIM_OP_COUNT ? op_names[op] : "?";
}

static uint64_t xorshift(uint64_t *x)
{
    uint64_t v = *x;
    v ^= v << 13;
    v ^= v >> 7;
    v ^= v << 17;
    *x = v;
    return v;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void sleep_us(uint32_t us)
{
    if (!us)
        return;
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int current_device(const devsim *s)
{
    return tls_sim == s->id ? tls_device : -1;
}

/* ---- Errors and faults (under mu) ------------------------------------------------------------ */

static int ret(devsim *s, int rc)
{
    if (rc != 0)
        s->st.errors++;
    return rc;
}

/* The start of every call that can fail: count it, note a stray context, fire an injected
 * fault, and return a pending asynchronous or sticky error. *fault gets the mode of an
 * asynchronous fault that fired on this call (0 when none). */
static int begin(devsim *s, devsim_op op, int needs_context, int *fault)
{
    s->st.calls[op]++;
    if (needs_context && current_device(s) < 0)
        s->st.stray_calls++;
    if (fault)
        *fault = 0;
    sim_fault *f = &s->faults[op];
    if (f->left && --f->left == 0) {
        s->st.faults_fired++;
        snprintf(s->last_fault, sizeof s->last_fault, "injected %s fault in call %llu of %s",
                 f->mode == DEVSIM_FAULT_SYNC    ? "synchronous"
                 : f->mode == DEVSIM_FAULT_ASYNC ? "asynchronous"
                                                 : "sticky",
                 (unsigned long long)s->st.calls[op], op_names[op]);
        if (f->mode == DEVSIM_FAULT_SYNC)
            return ret(s, DEVSIM_EFAULT);
        if (fault)
            *fault = (int)f->mode;
    }
    /* Making a device current reports no earlier error: the sim then tells a call made without a
     * device (stray) apart from an error path, and close paths can still run on the right
     * device after a sticky error. */
    if (op == DEVSIM_OP_SET_DEVICE || op == DEVSIM_OP_DEVICE_ENTER)
        return 0;
    if (s->sticky)
        return ret(s, DEVSIM_ESTICKY);
    if (s->async_pending) {
        s->async_pending = 0;
        return ret(s, DEVSIM_EASYNC);
    }
    return 0;
}

/* An asynchronous fault has happened: later calls report it. */
static void set_async_error(devsim *s, int mode)
{
    if (mode == DEVSIM_FAULT_STICKY)
        s->sticky = 1;
    else
        s->async_pending = 1;
    pthread_cond_broadcast(&s->done_cv);
}

/* After a host wait: the error that a fault during it left. */
static int wait_error(devsim *s)
{
    if (s->sticky)
        return ret(s, DEVSIM_ESTICKY);
    if (s->async_pending) {
        s->async_pending = 0;
        return ret(s, DEVSIM_EASYNC);
    }
    return 0;
}

/* Random host-side jitter before an enqueue; takes and gives back mu. */
static void call_delay(devsim *s)
{
    if (!s->opts.call_delay_us)
        return;
    const uint32_t d = (uint32_t)(xorshift(&s->call_rng) % (s->opts.call_delay_us + 1u));
    pthread_mutex_unlock(&s->mu);
    sleep_us(d);
    pthread_mutex_lock(&s->mu);
}

/* ---- Blocks ---------------------------------------------------------------------------------- */

/* The live block of the given kind that holds all of [p, p + n), or NULL. */
static sim_block *find_block(const devsim *s, const void *p, size_t n, int pinned)
{
    const uint8_t *q = p;
    for (sim_block *b = s->blocks; b; b = b->next)
        if (b->pinned == pinned && q >= b->base && q < b->base + b->size &&
            n <= (size_t)(b->base + b->size - q))
            return b;
    return NULL;
}

static int range_of(const devsim *s, const void *p, size_t n, int pinned, sim_range *r)
{
    memset(r, 0, sizeof *r);
    if (n == 0)
        return 0;
    const sim_block *b = find_block(s, p, n, pinned);
    if (!b)
        return DEVSIM_EPTR;
    *r = (sim_range){p, n, b->id, pinned};
    return 0;
}

static int overlap(const sim_range *a, const sim_range *b)
{
    return a->n && b->n && a->p < b->p + b->n && b->p < a->p + a->n;
}

static int block_busy(const devsim *s, const sim_block *b)
{
    const sim_range whole = {b->base, b->size, b->id, b->pinned};
    for (const sim_op *o = s->ghead; o; o = o->gnext)
        if (overlap(&o->rd, &whole) || overlap(&o->wr, &whole))
            return 1;
    return 0;
}

static int do_alloc(devsim *s, devsim_op op, size_t bytes, void **p, int pinned)
{
    pthread_mutex_lock(&s->mu);
    int fault;
    int rc = begin(s, op, 1, &fault);
    if (rc || !p) {
        rc = rc ? rc : ret(s, DEVSIM_EINVAL);
        goto out;
    }
    *p = NULL;
    if (bytes == 0)
        goto out; /* As cudaMalloc: success, no memory. */
    const size_t align = pinned ? 4096 : 256;
    sim_block *b = calloc(1, sizeof *b);
    uint8_t *mem = bytes <= SIZE_MAX - align
                       ? aligned_alloc(align, (bytes + align - 1) / align * align)
                       : NULL;
    if (!b || !mem) {
        free(b);
        free(mem);
        rc = ret(s, DEVSIM_ENOMEM);
        goto out;
    }
    /* Neither cudaMalloc nor cudaHostAlloc zeroes: garbage shows reads of unwritten bytes. */
    memset(mem, pinned ? 0xAB : 0xCD, bytes);
    *b = (sim_block){mem,    bytes,    ++s->next_block, pinned ? -1 : current_device(s),
                     pinned, s->blocks};
    s->blocks = b;
    if (pinned)
        s->st.live_host_blocks++;
    else
        s->st.live_dev_blocks++;
    *p = mem;
    if (fault)
        set_async_error(s, fault);
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Free a block once no unfinished operation touches it (cudaFree synchronizes too). */
static void do_free(devsim *s, devsim_op op, void *p, int pinned)
{
    pthread_mutex_lock(&s->mu);
    s->st.calls[op]++;
    if (current_device(s) < 0)
        s->st.stray_calls++;
    if (!p)
        goto out;
    sim_block **pp = &s->blocks;
    while (*pp && !((*pp)->base == p && (*pp)->pinned == pinned))
        pp = &(*pp)->next;
    if (!*pp) {
        s->st.bad_frees++;
        goto out;
    }
    sim_block *const b = *pp;
    if (block_busy(s, b))
        s->st.busy_frees++;
    while (block_busy(s, b))
        pthread_cond_wait(&s->done_cv, &s->mu);
    for (pp = &s->blocks; *pp != b; pp = &(*pp)->next)
        ;
    *pp = b->next;
    if (pinned)
        s->st.live_host_blocks--;
    else
        s->st.live_dev_blocks--;
    free(b->base);
    free(b);
out:
    pthread_mutex_unlock(&s->mu);
}

/* ---- Events ---------------------------------------------------------------------------------- */

static int event_done(const sim_event *e, uint64_t ticket)
{
    for (size_t i = 0; i < e->npending; i++)
        if (e->pending[i] == ticket)
            return 0;
    return 1;
}

static void event_unref(devsim *s, sim_event *e)
{
    (void)s;
    if (--e->refs == 0) {
        free(e->pending);
        free(e);
    }
}

static sim_event *find_event(const devsim *s, const void *p)
{
    for (sim_event *e = s->events; e; e = e->next)
        if (e == p)
            return e;
    return NULL;
}

/* ---- Streams --------------------------------------------------------------------------------- */

static sim_stream *find_stream(const devsim *s, const void *p)
{
    if (!p)
        return s->dflt;
    for (sim_stream *t = s->streams; t; t = t->next)
        if (t == p)
            return t;
    return NULL;
}

static const char *verb(const sim_op *o, const sim_range *r)
{
    return r == &o->wr ? "writing" : "reading";
}

static void describe(const devsim *s, char *buf, size_t cap, const sim_op *o, const sim_range *r)
{
    size_t off = 0;
    for (const sim_block *b = s->blocks; b; b = b->next)
        if (b->id == r->block)
            off = (size_t)(r->p - b->base);
    snprintf(buf, cap, "%s #%llu on stream %u, %s %s block %u [%zu, %zu)", kind_names[o->kind],
             (unsigned long long)o->seq, o->stream->id, verb(o, r), r->pinned ? "pinned" : "device",
             r->block, off, off + r->n);
}

static void note_hazard(devsim *s, const char *what)
{
    if (s->st.hazards++ == 0)
        snprintf(s->first_hazard, sizeof s->first_hazard, "%s", what);
}

/* Under mu, as @p o starts: every unfinished operation of another stream enqueued before it
 * that writes what it touches, or touches what it writes. */
static void check_hazards(devsim *s, const sim_op *o)
{
    for (const sim_op *y = s->ghead; y && y->seq < o->seq; y = y->gnext) {
        if (y->stream == o->stream)
            continue;
        const sim_range *mine = NULL, *theirs = NULL;
        if (overlap(&o->wr, &y->wr))
            mine = &o->wr, theirs = &y->wr;
        else if (overlap(&o->wr, &y->rd))
            mine = &o->wr, theirs = &y->rd;
        else if (overlap(&o->rd, &y->wr))
            mine = &o->rd, theirs = &y->wr;
        if (!mine)
            continue;
        char a[200], b[200], msg[512];
        describe(s, a, sizeof a, o, mine);
        describe(s, b, sizeof b, y, theirs);
        snprintf(msg, sizeof msg, "%s ran while %s, enqueued before it, had not finished", a, b);
        note_hazard(s, msg);
        return; /* One per operation is enough. */
    }
}

/* Run @p o with mu released. */
static void execute(devsim *s, sim_op *o)
{
    switch (o->kind) {
    case K_COPY_H2D:
        if (o->bytes && XXH3_64bits(o->src, o->bytes) != o->src_hash) {
            char msg[512];
            snprintf(msg, sizeof msg,
                     "host slot changed while its copy was pending: copy_h2d #%llu on stream %u "
                     "from pinned block %u (%zu bytes) into device block %u",
                     (unsigned long long)o->seq, o->stream->id, o->rd.block, o->bytes, o->wr.block);
            pthread_mutex_lock(&s->mu);
            note_hazard(s, msg);
            pthread_mutex_unlock(&s->mu);
        }
        if (!o->fault && o->bytes)
            memcpy(o->dst, o->src, o->bytes);
        break;
    case K_COPY_D2D:
        if (!o->fault && o->bytes)
            memmove(o->dst, o->src, o->bytes);
        break;
    case K_CONVERT:
        if (!o->fault) {
            const uint64_t n = dlc__hd_conv_elements(&o->cv);
            for (uint64_t i = 0; i < n; i++)
                dlc__hd_convert_at(&o->cv, i);
        }
        break;
    case K_MIX:
        if (!o->fault) {
            const uint64_t n = dlc__hd_mix_elements(&o->mx);
            for (uint64_t i = 0; i < n; i++)
                dlc__hd_mix_at(&o->mx, i);
        }
        break;
    case K_ERASE:
        if (!o->fault)
            for (uint64_t img = 0; img < o->er.n; img++) {
                const uint64_t n = dlc__hd_erase_items(&o->er, img);
                for (uint64_t j = 0; j < n; j++)
                    dlc__hd_erase_at(&o->er, img, j);
            }
        break;
    case K_MARK:
    case K_WAIT:
        break;
    }
}

/* Under mu: @p o has run; take it off both lists. */
static void finish(devsim *s, sim_op *o)
{
    sim_stream *const t = o->stream;
    if (o->kind == K_MARK) {
        sim_event *e = o->ev;
        e->t_mark = now_s();
        for (size_t i = 0; i < e->npending; i++)
            if (e->pending[i] == o->ticket) {
                memmove(e->pending + i, e->pending + i + 1,
                        (e->npending - i - 1) * sizeof *e->pending);
                e->npending--;
                break;
            }
    }
    if (o->fault)
        set_async_error(s, o->fault);
    if (o->ev)
        event_unref(s, o->ev);
    t->head = o->qnext;
    if (!t->head)
        t->tail = NULL;
    if (o->gprev)
        o->gprev->gnext = o->gnext;
    else
        s->ghead = o->gnext;
    if (o->gnext)
        o->gnext->gprev = o->gprev;
    else
        s->gtail = o->gprev;
    s->st.executed++;
    free(o);
    pthread_cond_broadcast(&s->done_cv);
}

static void *stream_main(void *arg)
{
    sim_stream *const t = arg;
    devsim *const s = t->sim;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!(t->head && !t->paused) && !(t->stop && !t->head))
            pthread_cond_wait(&t->cv, &s->mu);
        if (!t->head)
            break;
        sim_op *const o = t->head;
        const uint32_t lo = s->opts.min_delay_us < t->max_delay_us ? s->opts.min_delay_us : 0;
        const uint32_t d =
            t->max_delay_us ? lo + (uint32_t)(xorshift(&t->rng) % (t->max_delay_us - lo + 1u)) : 0;
        if (d) {
            pthread_mutex_unlock(&s->mu);
            sleep_us(d);
            pthread_mutex_lock(&s->mu);
        }
        if (o->kind == K_WAIT)
            while (!event_done(o->ev, o->ticket))
                pthread_cond_wait(&s->done_cv, &s->mu);
        /* After a sticky error the context is dead: as on a GPU, queued work is dropped. */
        const int dead = s->sticky;
        if (!dead)
            check_hazards(s, o);
        o->running = 1;
        pthread_mutex_unlock(&s->mu);
        if (!dead)
            execute(s, o);
        pthread_mutex_lock(&s->mu);
        finish(s, o);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Under mu: a new stream with its thread; NULL when out of memory or threads. */
static sim_stream *stream_new(devsim *s, uint32_t id, int device)
{
    sim_stream *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->sim = s;
    t->id = id;
    t->device = device;
    t->rng = mix(s->opts.seed * 1000003u + id) | 1u;
    t->max_delay_us = s->opts.max_delay_us;
    pthread_cond_init(&t->cv, NULL);
    if (pthread_create(&t->thread, NULL, stream_main, t) != 0) {
        pthread_cond_destroy(&t->cv);
        free(t);
        return NULL;
    }
    return t;
}

/* Drain, stop and free @p t; takes and gives back mu. */
static void stream_stop(devsim *s, sim_stream *t)
{
    t->stop = 1;
    t->paused = 0;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(t->thread, NULL);
    pthread_mutex_lock(&s->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

/* Under mu: append @p o to @p t's queue and the list of unfinished operations. */
static void enqueue(devsim *s, sim_stream *t, sim_op *o)
{
    o->seq = ++s->seq;
    o->stream = t;
    if (t->tail)
        t->tail->qnext = o;
    else
        t->head = o;
    t->tail = o;
    o->gprev = s->gtail;
    if (s->gtail)
        s->gtail->gnext = o;
    else
        s->ghead = o;
    s->gtail = o;
    pthread_cond_signal(&t->cv);
}

static void check_device(devsim *s, int device)
{
    const int cur = current_device(s);
    if (cur >= 0 && device >= 0 && device != cur)
        s->st.wrong_device++;
}

/* ---- The operations -------------------------------------------------------------------------- */

static const char *sim_errstr(void *ctx, int code)
{
    (void)ctx;
    switch (code) {
    case 0:
        return "no error";
    case 1:
        return "not ready";
    case DEVSIM_EINVAL:
        return "cpu-sim: invalid argument";
    case DEVSIM_EHANDLE:
        return "cpu-sim: invalid resource handle (not a live stream or event of the sim)";
    case DEVSIM_EPTR:
        return "cpu-sim: invalid pointer (not inside a live device or pinned block)";
    case DEVSIM_EDEVICE:
        return "cpu-sim: invalid device ordinal";
    case DEVSIM_ENOMEM:
        return "cpu-sim: out of memory";
    case DEVSIM_EFAULT:
        return "cpu-sim: injected failure";
    case DEVSIM_EASYNC:
        return "cpu-sim: an earlier asynchronous operation failed (injected)";
    case DEVSIM_ESTICKY:
        return "cpu-sim: sticky error, the context is unusable (injected)";
    default:
        return "cpu-sim: unknown error code";
    }
}

static int sim_device_count(void *ctx, int *count, char *why, size_t cap)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int rc = begin(s, DEVSIM_OP_DEVICE_COUNT, 0, NULL);
    if (!rc && !count)
        rc = ret(s, DEVSIM_EINVAL);
    if (!rc) {
        *count = s->opts.devices;
        if (s->opts.devices == 0 && why && cap)
            snprintf(why, cap, "cpu-sim: configured with no devices");
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_set_device(void *ctx, int device)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int fault;
    int rc = begin(s, DEVSIM_OP_SET_DEVICE, 0, &fault);
    if (!rc && (device < 0 || device >= s->opts.devices))
        rc = ret(s, DEVSIM_EDEVICE);
    if (!rc) {
        tls_sim = s->id;
        tls_device = device;
        if (fault)
            set_async_error(s, fault);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_device_enter(void *ctx, int device, void **saved)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int fault;
    int rc = begin(s, DEVSIM_OP_DEVICE_ENTER, 0, &fault);
    if (!rc && (device < 0 || device >= s->opts.devices))
        rc = ret(s, DEVSIM_EDEVICE);
    if (!rc && !saved)
        rc = ret(s, DEVSIM_EINVAL);
    if (!rc) {
        /* The previous device + 1, so that "none" is NULL. */
        *saved = (void *)(uintptr_t)(current_device(s) + 1);
        tls_sim = s->id;
        tls_device = device;
        s->st.enter_depth++;
        if (fault)
            set_async_error(s, fault);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static void sim_device_leave(void *ctx, void *saved)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->st.calls[DEVSIM_OP_DEVICE_LEAVE]++;
    s->st.enter_depth--;
    tls_sim = s->id;
    tls_device = (int)(uintptr_t)saved - 1;
    pthread_mutex_unlock(&s->mu);
}

static int sim_host_alloc(void *ctx, size_t bytes, void **p)
{
    return do_alloc(ctx, DEVSIM_OP_HOST_ALLOC, bytes, p, 1);
}

static void sim_host_free(void *ctx, void *p)
{
    do_free(ctx, DEVSIM_OP_HOST_FREE, p, 1);
}

static int sim_dev_alloc(void *ctx, size_t bytes, void **p)
{
    return do_alloc(ctx, DEVSIM_OP_DEV_ALLOC, bytes, p, 0);
}

static void sim_dev_free(void *ctx, void *p)
{
    do_free(ctx, DEVSIM_OP_DEV_FREE, p, 0);
}

static int sim_stream_create(void *ctx, void **out)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int fault;
    int rc = begin(s, DEVSIM_OP_STREAM_CREATE, 1, &fault);
    if (!rc && !out)
        rc = ret(s, DEVSIM_EINVAL);
    if (!rc) {
        const int cur = current_device(s);
        sim_stream *t = stream_new(s, ++s->next_stream, cur < 0 ? 0 : cur);
        if (!t) {
            rc = ret(s, DEVSIM_ENOMEM);
        } else {
            t->next = s->streams;
            s->streams = t;
            s->st.live_streams++;
            *out = t;
            if (fault)
                set_async_error(s, fault);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static void sim_stream_destroy(void *ctx, void *p)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->st.calls[DEVSIM_OP_STREAM_DESTROY]++;
    if (current_device(s) < 0)
        s->st.stray_calls++;
    sim_stream **pp = &s->streams;
    while (*pp && *pp != p)
        pp = &(*pp)->next;
    if (!p || !*pp) {
        s->st.bad_frees++;
    } else {
        sim_stream *const t = *pp;
        *pp = t->next;
        s->st.live_streams--;
        stream_stop(s, t);
    }
    pthread_mutex_unlock(&s->mu);
}

static int sim_stream_sync(void *ctx, void *p)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int rc = begin(s, DEVSIM_OP_STREAM_SYNC, 1, NULL);
    sim_stream *const t = rc ? NULL : find_stream(s, p);
    if (!rc && !t)
        rc = ret(s, DEVSIM_EHANDLE);
    if (!rc) {
        /* The work enqueued before this call: a queue runs in seq order. */
        const uint64_t upto = s->seq;
        while (t->head && t->head->seq <= upto && !s->sticky)
            pthread_cond_wait(&s->done_cv, &s->mu);
        rc = wait_error(s);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_event_create(void *ctx, void **out)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int fault;
    int rc = begin(s, DEVSIM_OP_EVENT_CREATE, 1, &fault);
    if (!rc && !out)
        rc = ret(s, DEVSIM_EINVAL);
    if (!rc) {
        sim_event *e = calloc(1, sizeof *e);
        if (!e) {
            rc = ret(s, DEVSIM_ENOMEM);
        } else {
            e->id = ++s->next_event;
            e->device = current_device(s);
            e->refs = 1;
            e->next = s->events;
            s->events = e;
            s->st.live_events++;
            *out = e;
            if (fault)
                set_async_error(s, fault);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static void sim_event_destroy(void *ctx, void *p)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->st.calls[DEVSIM_OP_EVENT_DESTROY]++;
    if (current_device(s) < 0)
        s->st.stray_calls++;
    sim_event **pp = &s->events;
    while (*pp && *pp != p)
        pp = &(*pp)->next;
    if (!p || !*pp) {
        s->st.bad_frees++;
    } else {
        /* As in CUDA, records still pending complete; the memory goes with the last of them. */
        sim_event *const e = *pp;
        *pp = e->next;
        s->st.live_events--;
        event_unref(s, e);
    }
    pthread_mutex_unlock(&s->mu);
}

static int sim_event_record(void *ctx, void *ep, void *sp)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    call_delay(s);
    int fault;
    int rc = begin(s, DEVSIM_OP_EVENT_RECORD, 1, &fault);
    sim_event *const e = rc ? NULL : find_event(s, ep);
    sim_stream *const t = rc ? NULL : find_stream(s, sp);
    if (!rc && (!e || !t))
        rc = ret(s, DEVSIM_EHANDLE);
    sim_op *o = NULL;
    if (!rc && !(o = calloc(1, sizeof *o)))
        rc = ret(s, DEVSIM_ENOMEM);
    if (!rc && e->npending == e->cap) {
        const size_t cap = e->cap ? 2 * e->cap : 8;
        uint64_t *pend = realloc(e->pending, cap * sizeof *pend);
        if (!pend)
            rc = ret(s, DEVSIM_ENOMEM);
        else
            e->pending = pend, e->cap = cap;
    }
    if (!rc) {
        check_device(s, t->device);
        o->kind = K_MARK;
        o->fault = fault;
        o->ev = e;
        o->ticket = ++e->last;
        e->refs++;
        e->pending[e->npending++] = o->ticket;
        enqueue(s, t, o);
        o = NULL;
    }
    free(o);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_stream_wait(void *ctx, void *sp, void *ep)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    call_delay(s);
    int fault;
    int rc = begin(s, DEVSIM_OP_STREAM_WAIT, 1, &fault);
    sim_event *const e = rc ? NULL : find_event(s, ep);
    sim_stream *const t = rc ? NULL : find_stream(s, sp);
    if (!rc && (!e || !t))
        rc = ret(s, DEVSIM_EHANDLE);
    if (!rc) {
        check_device(s, t->device);
        /* A wait for an event never recorded waits for nothing, but is still an operation of
         * the stream (it may carry an injected fault). */
        sim_op *o = calloc(1, sizeof *o);
        if (!o) {
            rc = ret(s, DEVSIM_ENOMEM);
        } else {
            o->kind = K_WAIT;
            o->fault = fault;
            o->ev = e;
            o->ticket = e->last;
            e->refs++;
            enqueue(s, t, o);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_event_query(void *ctx, void *ep)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int fault;
    int rc = begin(s, DEVSIM_OP_EVENT_QUERY, 1, &fault);
    sim_event *const e = rc ? NULL : find_event(s, ep);
    if (!rc && !e)
        rc = ret(s, DEVSIM_EHANDLE);
    if (!rc) {
        rc = event_done(e, e->last) ? 0 : 1;
        if (fault)
            set_async_error(s, fault);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_event_sync(void *ctx, void *ep)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int fault;
    int rc = begin(s, DEVSIM_OP_EVENT_SYNC, 1, &fault);
    sim_event *const e = rc ? NULL : find_event(s, ep);
    if (!rc && !e)
        rc = ret(s, DEVSIM_EHANDLE);
    if (!rc) {
        const uint64_t ticket = e->last;
        e->refs++; /* Another thread may destroy it while this one waits. */
        while (!event_done(e, ticket) && !s->sticky)
            pthread_cond_wait(&s->done_cv, &s->mu);
        event_unref(s, e);
        if (fault)
            set_async_error(s, fault);
        rc = wait_error(s);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* cudaEventElapsedTime: both events recorded and complete, else an error. Not counted as an
 * operation of its own (devsim_op has no row for it): the timed events are made by
 * sim_event_create, as every sim event keeps the time its record ran. */
static int sim_event_elapsed_ms(void *ctx, void *a, void *b, float *ms)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    const sim_event *const ea = find_event(s, a), *const eb = find_event(s, b);
    int rc = 0;
    if (!ea || !eb)
        rc = ret(s, DEVSIM_EHANDLE);
    else if (!ms || !ea->last || !eb->last || ea->npending || eb->npending)
        rc = ret(s, DEVSIM_EINVAL);
    else
        *ms = (float)((eb->t_mark - ea->t_mark) * 1e3);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* The common part of the copies and the conversion: validate the stream, fill and enqueue. */
static int enqueue_work(devsim *s, devsim_op op, sim_op *proto, void *sp)
{
    call_delay(s);
    int fault;
    int rc = begin(s, op, 1, &fault);
    if (rc)
        return rc;
    sim_stream *const t = find_stream(s, sp);
    if (!t)
        return ret(s, DEVSIM_EHANDLE);
    const int src_pinned = proto->kind == K_COPY_H2D;
    size_t src_bytes = proto->kind == K_CONVERT
                           ? (size_t)(proto->cv.n * proto->cv.h * proto->cv.w * proto->cv.c)
                           : proto->bytes;
    if (proto->kind == K_ERASE) /* Reads the boxes, writes the images. */
        src_bytes = (size_t)((proto->er.n - 1) / proto->er.per * proto->er.stride + proto->er.per) *
                    sizeof(dlc__hd_erase_box);
    size_t dst_bytes = proto->bytes;
    if (proto->kind == K_CONVERT) {
        const size_t esize = proto->cv.dtype == DLC__HD_UINT8     ? 1
                             : proto->cv.dtype == DLC__HD_FLOAT32 ? 4
                                                                  : 2;
        dst_bytes = (size_t)dlc__hd_conv_elements(&proto->cv) * esize;
    }
    if (range_of(s, proto->src, src_bytes, src_pinned, &proto->rd) ||
        range_of(s, proto->dst, dst_bytes, 0, &proto->wr))
        return ret(s, DEVSIM_EPTR);
    check_device(s, t->device);
    for (const sim_block *b = s->blocks; b; b = b->next)
        if (!b->pinned && (b->id == proto->rd.block || b->id == proto->wr.block) &&
            (proto->rd.n || proto->wr.n))
            check_device(s, b->device);
    sim_op *o = malloc(sizeof *o);
    if (!o)
        return ret(s, DEVSIM_ENOMEM);
    *o = *proto;
    o->fault = fault;
    if (o->kind == K_COPY_H2D && o->bytes)
        o->src_hash = XXH3_64bits(o->src, o->bytes);
    enqueue(s, t, o);
    return 0;
}

static int sim_copy(void *ctx, void *dst, const void *src, size_t bytes, void *sp, int h2d)
{
    devsim *s = ctx;
    sim_op proto = {.kind = h2d ? K_COPY_H2D : K_COPY_D2D, .dst = dst, .src = src, .bytes = bytes};
    pthread_mutex_lock(&s->mu);
    const int rc = enqueue_work(s, h2d ? DEVSIM_OP_COPY_H2D : DEVSIM_OP_COPY_D2D, &proto, sp);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_copy_h2d(void *ctx, void *dst, const void *src, size_t bytes, void *sp)
{
    return sim_copy(ctx, dst, src, bytes, sp, 1);
}

static int sim_copy_d2d(void *ctx, void *dst, const void *src, size_t bytes, void *sp)
{
    return sim_copy(ctx, dst, src, bytes, sp, 0);
}

static int sim_convert(void *ctx, const dlc__hd_conv *cv, void *sp)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int rc;
    if (!cv || cv->c < 1 || cv->c > 4 ||
        (cv->dtype > DLC__HD_FLOAT16 && cv->dtype != DLC__HD_BFLOAT16) ||
        cv->layout > DLC__HD_NCHW) {
        s->st.calls[DEVSIM_OP_CONVERT]++;
        rc = ret(s, DEVSIM_EINVAL);
    } else {
        sim_op proto = {.kind = K_CONVERT, .cv = *cv, .dst = cv->dst, .src = cv->src};
        rc = enqueue_work(s, DEVSIM_OP_CONVERT, &proto, sp);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_mix(void *ctx, const dlc__hd_mix *mx, void *sp)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int rc;
    if (!mx || mx->c < 1 || mx->c > 4 || mx->layout > DLC__HD_NCHW ||
        (mx->mode != DLC__HD_MIXUP && mx->mode != DLC__HD_CUTMIX) ||
        (mx->dtype != DLC__HD_FLOAT32 && mx->dtype != DLC__HD_FLOAT16 &&
         mx->dtype != DLC__HD_BFLOAT16)) {
        s->st.calls[DEVSIM_OP_MIX]++;
        rc = ret(s, DEVSIM_EINVAL);
    } else {
        /* Reads and writes the images in place: one range for both. */
        const size_t bytes =
            (size_t)(mx->n * mx->h * mx->w * mx->c) * (mx->dtype == DLC__HD_FLOAT32 ? 4 : 2);
        sim_op proto = {.kind = K_MIX, .mx = *mx, .dst = mx->data, .src = mx->data, .bytes = bytes};
        rc = enqueue_work(s, DEVSIM_OP_MIX, &proto, sp);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_erase(void *ctx, const dlc__hd_erase *er, void *sp)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int rc;
    if (!er || er->c < 1 || er->c > 4 || er->layout > DLC__HD_NCHW || er->per == 0 ||
        er->stride < er->per || er->value > DLC__HD_ERASE_CONSTANT ||
        (er->dtype > DLC__HD_FLOAT16 && er->dtype != DLC__HD_BFLOAT16)) {
        s->st.calls[DEVSIM_OP_ERASE]++;
        rc = ret(s, DEVSIM_EINVAL);
    } else if (er->n == 0) {
        s->st.calls[DEVSIM_OP_ERASE]++;
        rc = 0;
    } else {
        const size_t es = er->dtype == DLC__HD_UINT8 ? 1 : er->dtype == DLC__HD_FLOAT32 ? 4 : 2;
        sim_op proto = {.kind = K_ERASE,
                        .er = *er,
                        .dst = er->data,
                        .src = er->boxes,
                        .bytes = (size_t)(er->n * er->h * er->w * er->c) * es};
        rc = enqueue_work(s, DEVSIM_OP_ERASE, &proto, sp);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_bench_h2d(void *ctx, size_t bytes, uint32_t reps, double *seconds)
{
    devsim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int fault;
    int rc = begin(s, DEVSIM_OP_BENCH_H2D, 1, &fault);
    pthread_mutex_unlock(&s->mu);
    if (rc)
        return rc;
    if (!seconds || !bytes || !reps)
        return DEVSIM_EINVAL;
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        free(a);
        free(b);
        return DEVSIM_ENOMEM;
    }
    memset(a, 1, bytes);
    const double t0 = now_s();
    for (uint32_t r = 0; r < reps; r++) {
        a[r % bytes] = (uint8_t)r;
        memcpy(b, a, bytes);
    }
    *seconds = now_s() - t0;
    free(a);
    free(b);
    if (fault) {
        pthread_mutex_lock(&s->mu);
        set_async_error(s, fault);
        pthread_mutex_unlock(&s->mu);
    }
    return 0;
}

/* ---- Lifetime and inspection ----------------------------------------------------------------- */

void devsim_opts_init(devsim_opts *o)
{
    *o = (devsim_opts){.devices = 1, .seed = 1, .max_delay_us = 200, .call_delay_us = 0};
}

devsim *devsim_create(const devsim_opts *o)
{
    devsim *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (o)
        s->opts = *o;
    else
        devsim_opts_init(&s->opts);
    s->id = mix((uint64_t)(uintptr_t)s ^ (uint64_t)(now_s() * 1e9)) | 1u;
    s->call_rng = mix(s->opts.seed ^ 0x5eedull) | 1u;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    s->ops = (dlc__devops){
        .abi = DLC__DEVOPS_ABI,
        .size = sizeof(dlc__devops),
        .name = "cpu-sim",
        .ctx = s,
        .errstr = sim_errstr,
        .device_count = sim_device_count,
        .set_device = sim_set_device,
        .device_enter = sim_device_enter,
        .device_leave = sim_device_leave,
        .host_alloc = sim_host_alloc,
        .host_free = sim_host_free,
        .dev_alloc = sim_dev_alloc,
        .dev_free = sim_dev_free,
        .stream_create = sim_stream_create,
        .stream_destroy = sim_stream_destroy,
        .stream_sync = sim_stream_sync,
        .event_create = sim_event_create,
        .event_destroy = sim_event_destroy,
        .event_record = sim_event_record,
        .stream_wait = sim_stream_wait,
        .event_query = sim_event_query,
        .event_sync = sim_event_sync,
        .event_create_timed = sim_event_create,
        .event_elapsed_ms = sim_event_elapsed_ms,
        .copy_h2d = sim_copy_h2d,
        .copy_d2d = sim_copy_d2d,
        .convert = sim_convert,
        .bench_h2d = sim_bench_h2d,
        .mix = sim_mix,
        .erase = sim_erase,
    };
    pthread_mutex_lock(&s->mu);
    s->dflt = stream_new(s, 0, -1);
    pthread_mutex_unlock(&s->mu);
    if (!s->dflt) {
        pthread_cond_destroy(&s->done_cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    return s;
}

const dlc__devops *devsim_ops(devsim *s)
{
    return &s->ops;
}

void devsim_get_stats(devsim *s, devsim_stats *st)
{
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    pthread_mutex_unlock(&s->mu);
}

const char *devsim_first_hazard(devsim *s)
{
    pthread_mutex_lock(&s->mu);
    const char *h = s->first_hazard;
    pthread_mutex_unlock(&s->mu);
    return h;
}

const char *devsim_last_fault(devsim *s)
{
    pthread_mutex_lock(&s->mu);
    const char *f = s->last_fault;
    pthread_mutex_unlock(&s->mu);
    return f;
}

const char *devsim_problems(devsim *s, char *buf, size_t cap)
{
    devsim_stats st;
    pthread_mutex_lock(&s->mu);
    st = s->st;
    const uint64_t bad = st.bad_frees;
    pthread_mutex_unlock(&s->mu);
    if (!cap)
        return buf;
    buf[0] = 0;
    size_t len = 0;
#define DEVSIM_NOTE(cond, ...)                                                                     \
    do {                                                                                           \
        if ((cond) && len < cap) {                                                                 \
            const int k = snprintf(buf + len, cap - len, __VA_ARGS__);                             \
            len += k > 0 ? (size_t)k : 0;                                                          \
        }                                                                                          \
    } while (0)
    DEVSIM_NOTE(st.hazards, "%llu hazard(s), the first: %s; ", (unsigned long long)st.hazards,
                devsim_first_hazard(s));
    DEVSIM_NOTE(st.stray_calls, "%llu call(s) from a thread with no current device; ",
                (unsigned long long)st.stray_calls);
    DEVSIM_NOTE(st.wrong_device, "%llu call(s) on another device than the current one; ",
                (unsigned long long)st.wrong_device);
    DEVSIM_NOTE(st.enter_depth, "device_enter minus device_leave = %lld; ",
                (long long)st.enter_depth);
    DEVSIM_NOTE(bad, "%llu free(s) or destroy(s) of something not live; ", (unsigned long long)bad);
    DEVSIM_NOTE(st.live_dev_blocks || st.live_host_blocks || st.live_streams || st.live_events,
                "live: %llu device block(s), %llu pinned block(s), %llu stream(s), %llu "
                "event(s); ",
                (unsigned long long)st.live_dev_blocks, (unsigned long long)st.live_host_blocks,
                (unsigned long long)st.live_streams, (unsigned long long)st.live_events);
#undef DEVSIM_NOTE
    return buf;
}

void devsim_fault(devsim *s, devsim_op op, uint64_t nth, devsim_fault_mode mode)
{
    if ((unsigned)op >= DEVSIM_OP_COUNT)
        return;
    pthread_mutex_lock(&s->mu);
    s->faults[op] = (sim_fault){nth, mode};
    pthread_mutex_unlock(&s->mu);
}

void devsim_clear_error(devsim *s)
{
    pthread_mutex_lock(&s->mu);
    s->async_pending = s->sticky = 0;
    pthread_mutex_unlock(&s->mu);
}

void devsim_stream_delay(devsim *s, void *stream, uint32_t max_us)
{
    pthread_mutex_lock(&s->mu);
    sim_stream *t = find_stream(s, stream);
    if (t)
        t->max_delay_us = max_us;
    pthread_mutex_unlock(&s->mu);
}

void devsim_stream_pause(devsim *s, void *stream, int paused)
{
    pthread_mutex_lock(&s->mu);
    sim_stream *t = find_stream(s, stream);
    if (t) {
        t->paused = paused != 0;
        pthread_cond_signal(&t->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

int devsim_current_device(devsim *s)
{
    pthread_mutex_lock(&s->mu);
    const int d = current_device(s);
    pthread_mutex_unlock(&s->mu);
    return d;
}

int devsim_is_device(devsim *s, const void *p, size_t bytes)
{
    pthread_mutex_lock(&s->mu);
    const int yes = find_block(s, p, bytes ? bytes : 1, 0) != NULL;
    pthread_mutex_unlock(&s->mu);
    return yes;
}

int devsim_is_pinned(devsim *s, const void *p, size_t bytes)
{
    pthread_mutex_lock(&s->mu);
    const int yes = find_block(s, p, bytes ? bytes : 1, 1) != NULL;
    pthread_mutex_unlock(&s->mu);
    return yes;
}

void devsim_destroy(devsim *s, devsim_stats *final)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    /* Let every queue drain: a held stream could keep another's wait from ever finishing. */
    for (sim_stream *t = s->streams; t; t = t->next)
        t->paused = 0, pthread_cond_signal(&t->cv);
    s->dflt->paused = 0;
    pthread_cond_signal(&s->dflt->cv);
    while (s->ghead)
        pthread_cond_wait(&s->done_cv, &s->mu);
    if (final)
        *final = s->st;
    while (s->streams) {
        sim_stream *const t = s->streams;
        s->streams = t->next;
        stream_stop(s, t);
    }
    stream_stop(s, s->dflt);
    while (s->events) {
        sim_event *const e = s->events;
        s->events = e->next;
        event_unref(s, e);
    }
    while (s->blocks) {
        sim_block *const b = s->blocks;
        s->blocks = b->next;
        free(b->base);
        free(b);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_cond_destroy(&s->done_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
