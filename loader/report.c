/* Where the time goes: the threads' counters summed into tallies, one tally per delivered batch
 * in a ring, a report over a window of two tallies, and the verdict that names what bounds the
 * step (dlc_loader_get_report()). */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* threads="auto": the share of its step the consumer lost to input (see dlc__auto_decide():
 * AUTO_BUSY says which of its waits count) above which workers are added, unless the workers
 * or the I/O thread waited for reads or downloads AUTO_IO of the time; a window is calm (one
 * toward giving a worker back) when that share is under AUTO_CALM and the others would be busy
 * less than AUTO_IDLE. The gap between the two shares and the patience (calm windows in a row,
 * AUTO_PATIENCE at first) are the hysteresis. */
#define AUTO_WAIT 0.05
#define AUTO_CALM 0.01
#define AUTO_BUSY 0.25
#define AUTO_IO 0.25
#define AUTO_IDLE 0.60
#define AUTO_PATIENCE 2u

dlc_status dlc__report_open(dlc_loader *l)
{
    const size_t n = l->nworkers ? l->nworkers : 1;
    l->wcnt = aligned_alloc(64, n * sizeof *l->wcnt);
    l->tally = calloc(DLC__REPORT_RING, sizeof *l->tally);
    if (!l->wcnt || !l->tally)
        return dlc__errorf(-ENOMEM, "%s: out of memory for the loader's counters", l->path);
    memset(l->wcnt, 0, n * sizeof *l->wcnt);
    for (uint32_t i = 0; i < l->nworkers; i++)
        l->workers[i].cnt = &l->wcnt[i];
    l->t_open = l->cons_out = l->t_avail = dlc__now_ns();
    dlc__auto_init(&l->auto_st); /* auto_threads() sets the first window at the first batch. */
    return DLC_OK;
}

void dlc__report_close(dlc_loader *l)
{
    free(l->wcnt);
    free(l->tally);
    l->wcnt = NULL;
    l->tally = NULL;
}

void dlc__thread_usage(uint64_t *cpu_ns, uint64_t *majflt)
{
    struct timespec ts;
    struct rusage ru;
    *cpu_ns = clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0
                  ? (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec
                  : 0;
    *majflt = getrusage(RUSAGE_THREAD, &ru) == 0 ? (uint64_t)ru.ru_majflt : 0;
}

static uint64_t ld(const dlc__cnt *c)
{
    return atomic_load_explicit((dlc__cnt *)c, memory_order_relaxed);
}

void dlc__report_tally(const dlc_loader *l, dlc__tally *t)
{
    memset(t, 0, sizeof *t);
    t->t = dlc__now_ns();
    dlc_loader *m = (dlc_loader *)l; /* Atomic loads need a non-const object in C11. */
    t->batches = atomic_load_explicit(&m->st_batches, memory_order_relaxed);
    t->samples = atomic_load_explicit(&m->st_samples, memory_order_relaxed);
    t->bytes = atomic_load_explicit(&m->st_bytes, memory_order_relaxed);
    t->w_avail = l->w_avail;
    t->cons_wait = l->cons_wait;
    t->cons_away = l->cons_away;
    t->cons_starved = atomic_load_explicit(&m->st_wait_ns, memory_order_relaxed);
    t->io_busy = ld(&l->io_busy);
    t->io_read = ld(&l->io_read);
    t->io_stall = ld(&l->io_stall);
    t->io_held = ld(&l->io_held);
    t->io_full = ld(&l->io_full);
    t->io_idle = ld(&l->io_idle);
    t->copy_busy = ld(&l->copy_busy);
    t->copy_idle = ld(&l->copy_idle);
    for (uint32_t i = 0; l->wcnt && i < l->nworkers; i++) {
        const dlc__wcnt *w = &l->wcnt[i];
        t->w_busy += ld(&w->busy);
        t->w_cpu += ld(&w->cpu);
        t->w_iowait += ld(&w->iowait);
        t->w_idle += ld(&w->idle);
        t->w_samples += ld(&w->samples);
        t->w_majflt += ld(&w->majflt);
    }
}

void dlc__auto_init(dlc__auto *st)
{
    st->calm = 0;
    st->patience = AUTO_PATIENCE;
    st->last = 0;
    st->decisions = 0;
}

uint32_t dlc__auto_decide(const dlc__tally *a, const dlc__tally *b, uint32_t n, uint32_t cap,
                          dlc__auto *st)
{
    assert(n >= 1 && n <= cap);
    st->decisions++;
    /* The consumer's step; of it, its time inside next() and the time it waited there for a
     * batch that was not ready. */
    const double wait = b->cons_wait > a->cons_wait ? (double)(b->cons_wait - a->cons_wait) : 0;
    const double away = b->cons_away > a->cons_away ? (double)(b->cons_away - a->cons_away) : 0;
    const double starved =
        b->cons_starved > a->cons_starved ? (double)(b->cons_starved - a->cons_starved) : 0;
    const double inside = wait + away > 0 ? wait / (wait + away) : 0;
    const double avail = b->w_avail > a->w_avail ? (double)(b->w_avail - a->w_avail) : 0;
    const double busy =
        avail > 0 && b->w_busy > a->w_busy ? (double)(b->w_busy - a->w_busy) / avail : 0;
    const double io =
        avail > 0 && b->w_iowait > a->w_iowait ? (double)(b->w_iowait - a->w_iowait) / avail : 0;
    const double wall = b->t > a->t ? (double)(b->t - a->t) : 0;
    const double stall =
        wall > 0 && b->io_stall > a->io_stall ? (double)(b->io_stall - a->io_stall) / wall : 0;
    /* The share of the step lost to input: with the workers busy AUTO_BUSY of their time or
     * more, all of the consumer's time inside next() (a batch ready when it took the lock may
     * still have cost it the lock, or the CPU, which the workers hold); with them idle, only
     * its waits for batches not ready (the rest is a preemption on a loaded machine). */
    const double input = busy >= AUTO_BUSY ? inside : wait + away > 0 ? starved / (wait + away) : 0;
    /* The consumer waits, and not for reads or downloads (more workers would not help there):
     * the workers are the limit, busy or losing their time to hand-offs between batches, which
     * another worker overlaps. It needs a batch every `away` where it gets one every
     * `wait + away`: 1 / (1 - input) times the rate, so about that many times the workers, at
     * most twice as many at once (the estimate assumes they scale), and one more at least. */
    if (input > AUTO_WAIT && io < AUTO_IO && stall < AUTO_IO) {
        st->calm = 0;
        if (n >= cap)
            return n;
        double want = 2.0 * n;
        if (input < 0.5)
            want = ceil((double)n / (1 - input) - 1e-9);
        uint32_t m = want >= 2.0 * n ? 2 * n : (uint32_t)want;
        m = m < n + 1 ? n + 1 : m > cap ? cap : m;
        /* Adding right after giving one back: the give-back was a mistake; the next one waits
         * for twice as many calm windows. */
        if (st->last < 0 && st->patience < DLC__AUTO_PATIENCE_MAX)
            st->patience *= 2;
        st->last = 1;
        return m;
    }
    /* Calm: the consumer lost (next to) nothing to input, as counted above, and n - 1 workers
     * would do the work at under AUTO_IDLE busy. Give one back, one at a time, after
     * st->patience calm windows in a row. */
    if (input < AUTO_CALM && n > 1 && busy * n / (n - 1) < AUTO_IDLE) {
        if (++st->calm < st->patience)
            return n;
        st->calm = 0;
        st->last = -1;
        return n - 1;
    }
    st->calm = 0;
    return n;
}

/* Batches in the ring beside the consumer's (being read, built or ready); under mu. */
static uint32_t ring_ahead(const dlc_loader *l)
{
    uint32_t ahead = 0;
    for (uint32_t i = 0; i < l->nslots; i++)
        ahead += l->slots[i].state == DLC__SLOT_IO || l->slots[i].state == DLC__SLOT_FILL ||
                 l->slots[i].state == DLC__SLOT_READY;
    return ahead;
}

/* threads="auto", on the consumer's thread once a batch: decide over the window that ends with
 * this batch. A window holds only batches made by the count it judges: it starts after the
 * batches that were in the ring when the count changed (made, or begun, by the old count), and
 * after those in the ring when a plan's first batch was delivered (open, set_epoch, restore:
 * the ring was filling while the consumer was not asking, and its first batch waited for the
 * pipeline to start). The workers park and wake on cv_work; no output byte depends on their
 * number. */
static void auto_threads(dlc_loader *l)
{
    if (!l->auto_max)
        return;
    if (l->cons_next == 1) {
        pthread_mutex_lock(&l->mu);
        l->auto_from = l->ntally + ring_ahead(l);
        pthread_mutex_unlock(&l->mu);
        l->auto_next = l->auto_from + (l->auto_st.decisions ? DLC__AUTO_WINDOW : DLC__AUTO_FIRST);
        return;
    }
    if (l->ntally < l->auto_next)
        return;
    assert(l->ntally - l->auto_from < DLC__REPORT_RING && l->auto_from < l->ntally);
    const dlc__tally *a = &l->tally[l->auto_from % DLC__REPORT_RING];
    const dlc__tally *b = &l->tally[l->ntally % DLC__REPORT_RING];
    const uint32_t n = dlc__auto_decide(a, b, l->nactive, l->auto_max, &l->auto_st);
    l->auto_from = l->ntally;
    if (n != l->nactive) {
        pthread_mutex_lock(&l->mu);
        l->nactive = n;
        l->auto_from += ring_ahead(l);
        pthread_cond_broadcast(&l->cv_work);
        pthread_mutex_unlock(&l->mu);
    }
    l->auto_next = l->auto_from + DLC__AUTO_WINDOW;
}

void dlc__report_pending(dlc_loader *l, uint64_t t_in)
{
    if (!l->cons_in)
        l->cons_in = t_in;
}

void dlc__report_consumer(dlc_loader *l, uint64_t t_in, uint64_t t_out, int delivered)
{
    /* A wait cut into slices (dlc_loader_next_wait()) is one call from its first slice: the
     * consumer was waiting between the slices too, never away. */
    if (l->cons_in) {
        t_in = l->cons_in;
        l->cons_in = 0;
    }
    l->w_avail += (uint64_t)l->nactive * (t_out > l->t_avail ? t_out - l->t_avail : 0);
    l->t_avail = t_out;
    l->cons_away += t_in > l->cons_out ? t_in - l->cons_out : 0;
    l->cons_wait += t_out > t_in ? t_out - t_in : 0;
    l->cons_out = t_out;
    if (!delivered || !l->tally)
        return;
    if (l->trace)
        dlc__trace_span(l, DLC__TRACK_CONSUMER, DLC__SPAN_NEXT, l->sampler.epoch,
                        l->batch_base + l->cons_next - 1, t_in, t_out);
    /* One tally per batch, taken on the consumer's thread: the counters of the other threads
     * are read, never written, so this costs the hot path a few dozen loads a batch. */
    l->ntally++;
    dlc__report_tally(l, &l->tally[l->ntally % DLC__REPORT_RING]);
    l->tally[l->ntally % DLC__REPORT_RING].t = t_out;
    auto_threads(l);
}

static double share(uint64_t part, double whole)
{
    const double s = whole > 0 ? (double)part / whole : 0;
    return s < 0 ? 0 : s > 1 ? 1 : s;
}

void dlc__report_fill(const dlc__tally *a, const dlc__tally *b, uint32_t threads, int device,
                      dlc_loader_report *r)
{
    const uint32_t size = r->struct_size;
    memset(r, 0, sizeof *r);
    r->struct_size = size;
    r->threads = threads;
    r->device = device;
    r->batches = b->batches - a->batches;
    r->samples = b->samples - a->samples;
    r->bytes_read = b->bytes - a->bytes;
    const double wall = b->t > a->t ? (double)(b->t - a->t) : 0;
    /* Worker time available: wall x workers, or with threads="auto" the integral of the number
     * working (parked workers count no wait). */
    const double wthreads = b->w_avail > a->w_avail ? (double)(b->w_avail - a->w_avail)
                                                    : wall * (threads ? threads : 1);
    r->wall_seconds = wall * 1e-9;
    r->wait_seconds = (double)(b->cons_wait - a->cons_wait) * 1e-9;
    r->away_seconds = (double)(b->cons_away - a->cons_away) * 1e-9;
    const double step = r->wait_seconds + r->away_seconds;
    r->input_share = step > 0 ? r->wait_seconds / step : 0;
    r->step_seconds = r->batches ? step / (double)r->batches : 0;
    r->io_busy_share = share(b->io_busy - a->io_busy, wall);
    r->io_read_share = share(b->io_read - a->io_read, wall);
    r->io_stall_share = share(b->io_stall - a->io_stall, wall);
    r->io_held_share = share(b->io_held - a->io_held, wall);
    r->io_full_share = share(b->io_full - a->io_full, wall);
    r->io_idle_share = share(b->io_idle - a->io_idle, wall);
    r->workers_busy_share = share(b->w_busy - a->w_busy, wthreads);
    r->workers_io_share = share(b->w_iowait - a->w_iowait, wthreads);
    r->workers_idle_share = share(b->w_idle - a->w_idle, wthreads);
    r->workers_cpu_share = share(b->w_cpu - a->w_cpu, (double)(b->w_busy - a->w_busy));
    const uint64_t ws = b->w_samples - a->w_samples;
    r->sample_seconds = ws ? (double)(b->w_busy - a->w_busy) * 1e-9 / (double)ws : 0;
    r->major_faults = b->w_majflt - a->w_majflt;
    r->copy_busy_share = share(b->copy_busy - a->copy_busy, wall);
    r->copy_idle_share = share(b->copy_idle - a->copy_idle, wall);
    r->stall_seconds = (double)(b->io_stall - a->io_stall) * 1e-9;
    dlc__report_decide(r);
}

/* The consumer lost less than this share of its step to waiting: the model bounds it. */
#define INPUT_SMALL 0.10
/* A stage that took at least this share of the window explains the consumer's wait. */
#define STAGE_LARGE 0.25
/* Workers busy at least this share of the window: the CPU bounds. */
#define WORKERS_BUSY 0.60
/* Workers idle at least this share of the window while the consumer waited and the I/O thread
 * was not busy: the work on the samples is not what holds the batches back, but what each batch
 * costs beyond it (handing it between threads, waking the consumer). Small batches show it: at
 * batch 10, 10 samples are tens of microseconds of work, about what a hand-off costs. */
#define WORKERS_IDLE 0.50

static void say(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

void dlc__report_decide(dlc_loader_report *r)
{
    const double pct = 100 * r->input_share, ms = 1e3 * r->step_seconds;
    const double wait_ms = r->batches ? 1e3 * r->wait_seconds / (double)r->batches : 0;
    const double faults = r->samples ? (double)r->major_faults / (double)r->samples : 0;
    if (r->batches == 0) {
        r->bound = DLC_BOUND_UNKNOWN;
        say(r->reason, sizeof r->reason, "no batch was delivered in the window");
        say(r->advice, sizeof r->advice, "take batches first");
        return;
    }
    if (r->input_share < INPUT_SMALL) {
        r->bound = DLC_BOUND_MODEL;
        say(r->reason, sizeof r->reason,
            "batches were ready: the consumer waited %.1f%% of its %.1f ms step (%.2f ms a "
            "batch); its own work is the limit",
            pct, ms, wait_ms);
        say(r->advice, sizeof r->advice, "nothing to change on the input side%s",
            r->workers_idle_share > 0.5 ? " (the workers idle: fewer threads would do)" : "");
        return;
    }
    /* The consumer waits: name the stage that held the batches back, the most specific first
     * (a stalled download or held slots leave the workers idle, a slow disk leaves them
     * waiting for I/O). */
    if (r->io_stall_share >= STAGE_LARGE) {
        r->bound = DLC_BOUND_NETWORK;
        say(r->reason, sizeof r->reason,
            "the consumer waited %.1f%% of its step while the I/O thread waited %.0f%% of the "
            "time for shards to arrive from object storage",
            pct, 100 * r->io_stall_share);
        say(r->advice, sizeof r->advice,
            "raise downloads= and cache_limit= (more shards ahead), warm the node's cache with "
            "cachewarm, or read a local copy");
        return;
    }
    /* Held slots starve the workers only when they are left without work: a consumer that
     * keeps a batch or two while the workers are busy is not the limit. */
    if (r->io_held_share >= STAGE_LARGE && r->workers_busy_share < WORKERS_BUSY / 2) {
        r->bound = DLC_BOUND_CONSUMER;
        say(r->reason, sizeof r->reason,
            "the consumer waited %.1f%% of its step, and the I/O thread waited %.0f%% of the "
            "time for slots the consumer still held",
            pct, 100 * r->io_held_share);
        say(r->advice, sizeof r->advice,
            "give batches back sooner (release, max_lent=1; keep no tensor of a batch past its "
            "step), or raise prefetch");
        return;
    }
    if (r->device >= 0 && r->copy_busy_share >= 1 - INPUT_SMALL) {
        r->bound = DLC_BOUND_COPY;
        say(r->reason, sizeof r->reason,
            "the consumer waited %.1f%% of its step while the device copy thread was busy "
            "%.0f%% of the time",
            pct, 100 * r->copy_busy_share);
        say(r->advice, sizeof r->advice,
            "send uint8 and convert on the device (device_layout), crop smaller, or check the "
            "GPU's PCIe link (cachebench --device)");
        return;
    }
    if (r->io_read_share >= STAGE_LARGE || r->workers_io_share >= STAGE_LARGE ||
        (faults >= 0.5 && r->workers_cpu_share < 0.5)) {
        r->bound = DLC_BOUND_STORAGE;
        say(r->reason, sizeof r->reason,
            "the consumer waited %.1f%% of its step on reads: the I/O thread waited %.0f%% of "
            "the time for the disk, the workers %.0f%% for I/O (%.2f major faults a sample)",
            pct, 100 * r->io_read_share, 100 * r->workers_io_share, faults);
        if (r->io_read_share >= STAGE_LARGE)
            say(r->advice, sizeof r->advice,
                "the direct reads (io=\"direct\") are the limit: a store that fits in memory "
                "reads faster through the page cache (io=\"mmap\"); else a faster local SSD");
        else
            say(r->advice, sizeof r->advice,
                "move the store to local SSD, warm the page cache before the run (or use "
                "io=\"direct\" for a store larger than memory)");
        return;
    }
    if (r->workers_idle_share >= WORKERS_IDLE && r->workers_busy_share < WORKERS_BUSY &&
        r->io_busy_share < STAGE_LARGE) {
        const double per_batch = (double)r->samples / (double)r->batches;
        r->bound = DLC_BOUND_BATCH;
        say(r->reason, sizeof r->reason,
            "the consumer waited %.1f%% of its %.3f ms step while the %u workers idled %.0f%% of "
            "the time: a batch of %.0f samples is %.0f us of their work, and what each batch "
            "costs beyond it (handing it between threads) is the limit",
            pct, ms, r->threads, 100 * r->workers_idle_share, per_batch,
            1e6 * r->sample_seconds * per_batch);
        say(r->advice, sizeof r->advice,
            "take larger batches (batch_size), or raise prefetch; more threads would idle too");
        return;
    }
    if (r->workers_busy_share >= WORKERS_BUSY || r->workers_busy_share >= r->io_busy_share) {
        r->bound = DLC_BOUND_CPU;
        say(r->reason, sizeof r->reason,
            "the consumer waited %.1f%% of its step while the %u workers were busy %.0f%% of "
            "the time (%.1f us a sample)",
            pct, r->threads, 100 * r->workers_busy_share, 1e6 * r->sample_seconds);
        say(r->advice, sizeof r->advice,
            "add threads if cores are free, take uint8 batches and normalize on the device, or "
            "use a lighter augmentation (crop rather than RandomResizedCrop)");
        return;
    }
    r->bound = DLC_BOUND_STORAGE;
    say(r->reason, sizeof r->reason,
        "the consumer waited %.1f%% of its step while the I/O thread was busy %.0f%% of the "
        "time looking records up and reading them",
        pct, 100 * r->io_busy_share);
    say(r->advice, sizeof r->advice,
        "move the store to local SSD or warm the page cache; larger records (fewer per batch) "
        "cost fewer lookups");
}

dlc_status dlc_loader_get_report(const dlc_loader *l, uint32_t last, dlc_loader_report *r)
{
    if (!l || !r)
        return dlc__errorf(DLC_EINVAL, "loader: dlc_loader_get_report() needs a loader and a "
                                       "report");
    dlc__tally zero;
    memset(&zero, 0, sizeof zero);
    zero.t = l->t_open;
    const dlc__tally *a = &zero, *b = &zero;
    if (l->ntally) {
        b = &l->tally[l->ntally % DLC__REPORT_RING];
        if (last && last < l->ntally && last < DLC__REPORT_RING)
            a = &l->tally[(l->ntally - last) % DLC__REPORT_RING];
    }
    dlc_loader_report all;
    all.struct_size = sizeof all;
    dlc__report_fill(a, b, l->nactive, l->dev ? dlc_loader_device(l, NULL) : -1, &all);
    return dlc__result_give(r, &all, sizeof all, "dlc_loader_report");
}

const char *dlc_bound_name(uint32_t bound)
{
    static const char *const names[] = {"unknown", "model", "cpu",      "storage",
                                        "network", "copy",  "consumer", "batch"};
    return bound < sizeof names / sizeof names[0] ? names[bound] : "unknown";
}

size_t dlc_loader_report_text(const dlc_loader_report *r, char *buf, size_t cap)
{
    if (!r)
        return 0;
    const int n =
        snprintf(buf, cap,
                 "dlcache loader report: %llu batches, %.3f s, %u workers\n"
                 "  consumer   step %8.2f ms   waiting %5.1f%%   away %5.1f%%\n"
                 "  I/O thread busy %5.1f%% (reads %5.1f%%, downloads %5.1f%%)   "
                 "waiting: held slots %5.1f%%, ring full %5.1f%%   idle %5.1f%%\n"
                 "  workers    busy %5.1f%% (on CPU %5.1f%%, %.1f us a sample)   "
                 "waiting I/O %5.1f%%   idle %5.1f%%\n"
                 "  copy       busy %5.1f%%   idle %5.1f%%\n"
                 "bound: %s: %s.\n"
                 "what to do: %s.\n",
                 (unsigned long long)r->batches, r->wall_seconds, r->threads, 1e3 * r->step_seconds,
                 100 * r->input_share, 100 * (1 - r->input_share) * (r->batches > 0),
                 100 * r->io_busy_share, 100 * r->io_read_share, 100 * r->io_stall_share,
                 100 * r->io_held_share, 100 * r->io_full_share, 100 * r->io_idle_share,
                 100 * r->workers_busy_share, 100 * r->workers_cpu_share, 1e6 * r->sample_seconds,
                 100 * r->workers_io_share, 100 * r->workers_idle_share, 100 * r->copy_busy_share,
                 100 * r->copy_idle_share, dlc_bound_name(r->bound), r->reason, r->advice);
    return n < 0 ? 0 : (size_t)n;
}
