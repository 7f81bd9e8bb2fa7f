/* stream_cache_drive: a test program of the stream part (not a tool): open the shard cache
 * (cache/stream/stream_cache.h) on a store set's URL, give it a schedule, walk the schedule
 * acquiring each shard, opening it as a store and releasing it, and print the cache's counters
 * as JSON on stdout. tests/e2e/stream_cache.sh runs it against a real S3 server.
 *
 *   stream_cache_drive --url URL --dir DIR [--limit BYTES] [--endpoint URL] [--downloads N]
 *                      [--epochs E] [--order 3,1,2] [--hold-ms MS] [--retries R]
 *                      [--timeout S] [--together T] [--verbose]
 *
 * The schedule is the shards in --order (default 0..N-1), --epochs times over. --hold-ms keeps
 * each shard pinned that long (so that a test can watch the cache at work). --together T starts
 * T threads that acquire the schedule's first shard at once, before the walk: every one of them
 * must get the same outcome from one download (a failure is each waiter's, not a reason for the
 * next to fetch again). Exits 0, or 1 with "stream_cache_drive: CODE: MESSAGE" on stderr. */
#include "stream_cache.h"

#include <dlcache/store.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void on_log(void *user, dlc_log_level level, const char *msg)
{
    fprintf(stderr, "stream_cache_drive: log %d: %s\n", (int)level, msg);
}

static int failed(dlc_status rc)
{
    fprintf(stderr, "stream_cache_drive: %s: %s\n", dlc_strerror(rc), dlc_errmsg());
    return 1;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct together {
    dlc__scache *c;
    uint32_t k;
    dlc_status rc;
    char msg[512];
} together;

static void *acquire_one(void *arg)
{
    together *t = arg;
    const char *path = NULL;
    t->rc = dlc__scache_acquire(t->c, t->k, &path);
    snprintf(t->msg, sizeof t->msg, "%s", t->rc < 0 ? dlc_errmsg() : "");
    if (t->rc == DLC_OK)
        dlc__scache_release(t->c, t->k);
    return NULL;
}

/* --together: @p n threads acquire shard @p k at once; 0 when all succeeded, else 1 after
 * printing each failure (the first one's code is returned in *rc). */
static int acquire_together(dlc__scache *c, uint32_t k, unsigned n, dlc_status *rc)
{
    together t[64];
    pthread_t th[64];
    unsigned started = 0, bad = 0;
    for (unsigned i = 0; i < n && i < 64; i++) {
        t[i] = (together){.c = c, .k = k};
        if (pthread_create(&th[i], NULL, acquire_one, &t[i]) != 0)
            break;
        started++;
    }
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    *rc = started == n ? DLC_OK : -EAGAIN;
    for (unsigned i = 0; i < started; i++) {
        if (t[i].rc < 0) {
            fprintf(stderr, "stream_cache_drive: together %u: %s: %s\n", i, dlc_strerror(t[i].rc),
                    t[i].msg);
            if (*rc == DLC_OK)
                *rc = t[i].rc;
            bad++;
        }
    }
    return bad > 0 || started != n;
}

int main(int argc, char **argv)
{
    dlc__scache_config cfg = {0};
    dlc_warm_options net;
    dlc_warm_options_init(&net);
    unsigned epochs = 1, hold_ms = 0, together_n = 0;
    unsigned retries = 2;
    const char *order = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--verbose") == 0) {
            net.log = on_log;
            continue;
        }
        if (!v) {
            fprintf(stderr, "stream_cache_drive: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--url") == 0)
            cfg.url = v;
        else if (strcmp(a, "--dir") == 0)
            cfg.dir = v;
        else if (strcmp(a, "--limit") == 0)
            cfg.limit = strtoull(v, NULL, 10);
        else if (strcmp(a, "--endpoint") == 0)
            net.endpoint = v;
        else if (strcmp(a, "--downloads") == 0)
            cfg.downloads = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--epochs") == 0)
            epochs = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--order") == 0)
            order = v;
        else if (strcmp(a, "--hold-ms") == 0)
            hold_ms = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--retries") == 0)
            retries = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--timeout") == 0)
            net.timeout_s = strtod(v, NULL);
        else if (strcmp(a, "--together") == 0)
            together_n = (unsigned)strtoul(v, NULL, 10);
        else {
            fprintf(stderr, "stream_cache_drive: unknown option %s\n", a);
            return 2;
        }
    }
    if (together_n > 64) {
        fprintf(stderr, "stream_cache_drive: --together is at most 64\n");
        return 2;
    }
    net.max_retries = retries;
    cfg.net = &net;
    dlc__scache *c = NULL;
    dlc_status rc = dlc__scache_open(&cfg, &c);
    if (rc < 0)
        return failed(rc);
    const dlc__set_index *x = dlc__scache_index(c);
    uint32_t *one = malloc((x->num_shards ? x->num_shards : 1) * sizeof *one);
    size_t none = 0;
    if (order) {
        char *copy = strdup(order), *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t && none < x->num_shards;
             t = strtok_r(NULL, ",", &save))
            one[none++] = (uint32_t)strtoul(t, NULL, 10);
        free(copy);
    } else {
        for (uint32_t k = 0; k < x->num_shards; k++)
            one[none++] = k;
    }
    const size_t n = none * epochs;
    uint32_t *sched = malloc((n ? n : 1) * sizeof *sched);
    for (size_t i = 0; i < n; i++)
        sched[i] = one[i % none];
    rc = dlc__scache_schedule(c, sched, n);
    if (rc == DLC_OK && together_n > 0 && n > 0 && acquire_together(c, sched[0], together_n, &rc)) {
        dlc__scache_close(c);
        free(one);
        free(sched);
        return 1;
    }
    uint64_t records = 0;
    for (size_t i = 0; rc == DLC_OK && i < n; i++) {
        const char *path = NULL;
        rc = dlc__scache_acquire(c, sched[i], &path);
        if (rc < 0)
            break;
        dlc_store *s = NULL;
        rc = dlc_store_open(path, 0, &s);
        if (rc == DLC_OK)
            records += dlc_store_get_info(s)->count;
        dlc_store_close(s);
        if (hold_ms)
            sleep_ms(hold_ms);
        dlc__scache_release(c, sched[i]);
    }
    if (rc < 0) {
        const int r = failed(rc);
        dlc__scache_close(c);
        return r;
    }
    dlc__scache_stats st;
    dlc__scache_stats_get(c, &st);
    uint64_t set_bytes = 0;
    for (uint32_t k = 0; k < x->num_shards; k++)
        set_bytes += x->shards[k].file_bytes;
    printf("{\"stall_s\": %.6f, \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
           ", \"bytes_fetched\": %" PRIu64 ", \"requests\": %" PRIu64 ", \"peak_bytes\": %" PRIu64
           ", \"evictions\": %" PRIu64 ", \"downloads\": %" PRIu64 ", \"records\": %" PRIu64
           ", \"shards\": %u, \"set_bytes\": %" PRIu64 ", \"limit\": %" PRIu64
           ", \"needed_1_0\": %" PRIu64 ", \"set_dir\": \"%s\"}\n",
           st.stall_s, st.hits, st.misses, st.bytes_fetched, st.requests, st.peak_bytes,
           st.evictions, st.downloads, records, x->num_shards, set_bytes, cfg.limit,
           dlc__scache_needed(x, 1, 0), dlc__scache_set_dir(c));
    dlc__scache_close(c);
    free(one);
    free(sched);
    return 0;
}
