/* dlc_store_verify() of a store set: the index is read again and compared with the one opened,
 * and every shard is verified by dlc_store_verify() (cache/store/store_verify.c) on up to one
 * thread per core, never more threads than shards. The shards' progress is summed into one
 * dlc_verify_progress and handed to the caller's function one call at a time; a bad record is
 * named with the set, its global number, its shard and its number there. */
#include "common.h"
#include "store_set.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct set_verify {
    const dlc_store *s;
    dlc_verify_fn fn;
    void *user;
    pthread_mutex_t mu;
    dlc_verify_progress p; /* The shards' progress summed; under mu. */
    atomic_uint next;      /* The next shard a thread takes. */
    atomic_int stop;       /* The caller asked to stop. */
    uint32_t first_bad;    /* The lowest shard that failed, or UINT32_MAX; under mu. */
    dlc_status first_rc;
    char first_msg[1024];
} set_verify;

/* One shard being verified, as its progress function sees it. */
typedef struct shard_run {
    set_verify *sv;
    uint32_t k;
    uint64_t done, bytes; /* What this shard reported last. */
} shard_run;

/* The progress function each shard's verification calls: add its progress to the sum and call
 * the caller's function with the sum, under the lock, so that the caller sees one call at a
 * time and sums that only grow. */
static int on_shard_progress(void *user, const dlc_verify_progress *p)
{
    shard_run *r = user;
    set_verify *sv = r->sv;
    const dlc_store *s = sv->s;
    const char *msg = NULL;
    if (p->bad_status) {
        /* This thread's own message buffer: the shard's reason, said again for the set. */
        dlc__set_shard_msg(s, r->k, p->bad_msg ? p->bad_msg : "bad record", p->bad_status);
        msg = dlc_errmsg();
    }
    pthread_mutex_lock(&sv->mu);
    sv->p.done += p->done - r->done;
    sv->p.bytes_done += p->bytes_done - r->bytes;
    r->done = p->done;
    r->bytes = p->bytes_done;
    if (p->bad_status)
        sv->p.bad++;
    if (sv->fn && !atomic_load(&sv->stop)) {
        dlc_verify_progress q = sv->p;
        if (p->bad_status) {
            q.bad_index = s->firsts[r->k] + p->bad_index;
            q.bad_status = p->bad_status;
            q.bad_msg = msg;
        }
        if (sv->fn(sv->user, &q))
            atomic_store(&sv->stop, 1);
    }
    const int stop = atomic_load(&sv->stop);
    pthread_mutex_unlock(&sv->mu);
    return stop;
}

/* Keep the failure of shard @p k when it is the lowest so far: the set names the first. */
static void note_failure(set_verify *sv, uint32_t k, dlc_status rc)
{
    dlc__set_shard_msg(sv->s, k, dlc_errmsg(), rc);
    pthread_mutex_lock(&sv->mu);
    if (k < sv->first_bad) {
        sv->first_bad = k;
        sv->first_rc = rc;
        snprintf(sv->first_msg, sizeof sv->first_msg, "%s", dlc_errmsg());
    }
    pthread_mutex_unlock(&sv->mu);
}

static void *verify_main(void *arg)
{
    set_verify *sv = arg;
    const dlc_store *s = sv->s;
    for (;;) {
        const uint32_t k = atomic_fetch_add(&sv->next, 1);
        if (k >= s->num_shards || atomic_load(&sv->stop))
            break;
        shard_run r = {sv, k, 0, 0};
        const dlc_status rc = dlc_store_verify(s->shards[k], on_shard_progress, &r, NULL);
        if (rc < 0 && rc != DLC_ECANCELED)
            note_failure(sv, k, rc);
    }
    return NULL;
}

/* The index file as it is now against the bytes the set was opened with. */
static dlc_status check_index(const dlc_store *s)
{
    dlc_status rc = DLC_OK;
    char *path = NULL;
    uint8_t *now = NULL;
    size_t len = 0;
    dlc__set_index x = {0};
    FAIL_IF(!(path = dlc__set_path(s->path, "/", DLC__SET_INDEX_NAME)), -ENOMEM,
            "%s: out of memory", s->path);
    CHECK(dlc__set_index_read(path, &now, &len));
    CHECK(dlc__set_index_decode(now, len, path, &x));
    FAIL_IF(len != s->set_index_len || memcmp(now, s->set_index, len) != 0, DLC_ECORRUPT,
            "%s: changed since the set was opened (joined again, or written over): open the set "
            "again",
            path);
fail:
    dlc__set_index_free(&x);
    free(now);
    free(path);
    return rc;
}

/* Run verify_main on @p n threads, the caller's among them. A thread that cannot start leaves
 * its share to the others. */
static void run_threads(set_verify *sv, uint32_t n)
{
    pthread_t *t = calloc(n, sizeof *t);
    uint32_t started = 0;
    for (uint32_t i = 1; t && i < n; i++)
        if (pthread_create(&t[started], NULL, verify_main, sv) == 0)
            started++;
    verify_main(sv);
    for (uint32_t i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    free(t);
}

dlc_status dlc__set_verify(const dlc_store *s, dlc_verify_fn fn, void *user, uint64_t *bad)
{
    dlc_status rc = DLC_OK;
    set_verify *sv = calloc(1, sizeof *sv);
    if (!sv)
        return dlc__errorf(-ENOMEM, "%s: out of memory", s->path);
    sv->s = s;
    sv->fn = fn;
    sv->user = user;
    sv->first_bad = UINT32_MAX;
    sv->p.total = s->info.count;
    pthread_mutex_init(&sv->mu, NULL);
    atomic_init(&sv->next, 0);
    atomic_init(&sv->stop, 0);

    const dlc_status irc = check_index(s);
    char index_msg[1024];
    snprintf(index_msg, sizeof index_msg, "%s", irc < 0 ? dlc_errmsg() : "");
    const uint32_t cores = dlc__cpu_count();
    run_threads(sv, cores < s->num_shards ? cores : s->num_shards);

    if (bad)
        *bad = sv->p.bad;
    if (atomic_load(&sv->stop)) {
        rc = dlc__errorf(DLC_ECANCELED, "%s: verification canceled", s->path);
    } else {
        if (fn && fn(user, &sv->p))
            rc = dlc__errorf(DLC_ECANCELED, "%s: verification canceled", s->path);
        else if (irc < 0)
            rc = dlc__errorf(irc, "%s", index_msg);
        else if (sv->first_bad != UINT32_MAX)
            rc = dlc__errorf(sv->first_rc, "%s", sv->first_msg);
    }
    pthread_mutex_destroy(&sv->mu);
    free(sv);
    return rc;
}
