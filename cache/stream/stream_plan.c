/* The pure pieces of the shard cache: how a file's bytes are counted, the schedule with the next
 * use of each shard, the choice of the shard to evict (Belady: furthest next use first), and the
 * bytes a cache needs. Nothing here touches the file system or a lock, so the unit tests
 * (tests/stream/test_stream_plan.c) check them alone. */
#include "common.h"
#include "stream_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

uint64_t dlc__scache_round(uint64_t size)
{
    return (size + DLC__SCACHE_BLOCK - 1) / DLC__SCACHE_BLOCK * DLC__SCACHE_BLOCK;
}

uint64_t dlc__scache_file_bytes(const struct stat *st)
{
    const uint64_t blocks = (uint64_t)st->st_blocks * 512u;
    const uint64_t rounded = dlc__scache_round((uint64_t)st->st_size);
    return blocks > rounded ? blocks : rounded;
}

void dlc__scache_plan_free(dlc__scache_plan *p)
{
    free(p->sched);
    free(p->next_same);
    free(p->head);
    free(p->consumed);
    memset(p, 0, sizeof *p);
}

dlc_status dlc__scache_plan_set(dlc__scache_plan *p, uint32_t num_shards, const uint32_t *sched,
                                size_t n)
{
    dlc__scache_plan q;
    memset(&q, 0, sizeof q);
    q.n = n;
    q.num_shards = num_shards;
    q.sched = malloc((n ? n : 1) * sizeof *q.sched);
    q.next_same = malloc((n ? n : 1) * sizeof *q.next_same);
    q.consumed = calloc(n ? n : 1, 1);
    q.head = malloc((num_shards ? num_shards : 1) * sizeof *q.head);
    if (!q.sched || !q.next_same || !q.consumed || !q.head) {
        dlc__scache_plan_free(&q);
        return dlc__errorf(-ENOMEM, "stream cache: out of memory for a schedule of %zu shards", n);
    }
    if (n)
        memcpy(q.sched, sched, n * sizeof *sched);
    for (uint32_t k = 0; k < num_shards; k++)
        q.head[k] = n;
    /* Backwards, so that each entry learns the next one of its shard. */
    for (size_t i = n; i-- > 0;) {
        const uint32_t k = q.sched[i];
        assert(k < num_shards);
        q.next_same[i] = q.head[k];
        q.head[k] = i;
    }
    dlc__scache_plan_free(p);
    *p = q;
    return DLC_OK;
}

uint64_t dlc__scache_plan_next(const dlc__scache_plan *p, uint32_t k)
{
    if (k >= p->num_shards || p->head[k] >= p->n)
        return DLC__SCACHE_NEVER;
    return p->head[k];
}

void dlc__scache_plan_consume(dlc__scache_plan *p, uint32_t k)
{
    if (k >= p->num_shards || p->head[k] >= p->n)
        return;
    const size_t i = p->head[k];
    p->consumed[i] = 1;
    p->head[k] = p->next_same[i];
    while (p->cursor < p->n && p->consumed[p->cursor])
        p->cursor++;
}

size_t dlc__scache_pick_victim(const dlc__scache_cand *v, size_t n, uint64_t after)
{
    size_t best = n;
    for (size_t i = 0; i < n; i++) {
        if (v[i].skip || v[i].next_use < after)
            continue;
        if (best == n || v[i].next_use > v[best].next_use ||
            (v[i].next_use == v[best].next_use && v[i].bytes > v[best].bytes))
            best = i;
    }
    return best;
}

static int cmp_desc(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

uint64_t dlc__scache_needed(const dlc__set_index *x, uint32_t pinned, uint32_t ahead)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    if (!x || dlc__set_index_encode(x, &buf, &len) != DLC_OK) {
        dlc__clear_error();
        return 0;
    }
    free(buf);
    uint64_t need = dlc__scache_round(len);
    uint64_t *sizes = malloc((x->num_shards ? x->num_shards : 1) * sizeof *sizes);
    if (!sizes)
        return 0;
    for (uint32_t k = 0; k < x->num_shards; k++)
        sizes[k] = dlc__scache_round(x->shards[k].file_bytes);
    qsort(sizes, x->num_shards, sizeof *sizes, cmp_desc);
    /* The largest shards, as many as may be pinned or downloading at once: a shard is never
     * both, so more than the set holds is the whole set. */
    const uint64_t m = (uint64_t)pinned + ahead;
    for (uint64_t i = 0; i < m && i < x->num_shards; i++)
        need += sizes[i];
    free(sizes);
    return need;
}
