/* The pure pieces of the shard cache (cache/stream/stream_plan.c): the byte accounting of a file,
 * the schedule's next uses as acquires consume it (also out of order and with repeats), Belady's
 * choice of the shard to evict (unscheduled first, then the furthest next use; pinned ones never;
 * a download ahead of need never evicts a shard needed before it), and the bytes a cache needs
 * for P pins and A downloads. */
#include "stream_internal.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

Test(stream_plan, counts_whole_blocks)
{
    cr_assert_eq(dlc__scache_round(0), 0);
    cr_assert_eq(dlc__scache_round(1), 4096);
    cr_assert_eq(dlc__scache_round(4096), 4096);
    cr_assert_eq(dlc__scache_round(4097), 8192);
    struct stat st;
    memset(&st, 0, sizeof st);
    st.st_size = 100;
    st.st_blocks = 0; /* A sparse file still counts its size. */
    cr_assert_eq(dlc__scache_file_bytes(&st), 4096);
    st.st_blocks = 16; /* More allocated than its size: the blocks count. */
    cr_assert_eq(dlc__scache_file_bytes(&st), 8192);
}

Test(stream_plan, next_use_follows_consumption)
{
    dlc__scache_plan p;
    memset(&p, 0, sizeof p);
    const uint32_t s[] = {2, 0, 1, 2, 0};
    cr_assert_eq(dlc__scache_plan_set(&p, 4, s, 5), DLC_OK);
    cr_assert_eq(dlc__scache_plan_next(&p, 2), 0);
    cr_assert_eq(dlc__scache_plan_next(&p, 0), 1);
    cr_assert_eq(dlc__scache_plan_next(&p, 1), 2);
    cr_assert_eq(dlc__scache_plan_next(&p, 3), DLC__SCACHE_NEVER, "unscheduled");
    /* Out of order: shard 0 first consumes its own first entry, not entry 0. */
    dlc__scache_plan_consume(&p, 0);
    cr_assert_eq(dlc__scache_plan_next(&p, 0), 4);
    cr_assert_eq(p.cursor, 0, "entry 0 is still to come");
    dlc__scache_plan_consume(&p, 2);
    cr_assert_eq(p.cursor, 2, "entries 0 and 1 are the past");
    cr_assert_eq(dlc__scache_plan_next(&p, 2), 3);
    dlc__scache_plan_consume(&p, 3); /* Not scheduled: nothing changes. */
    dlc__scache_plan_consume(&p, 1);
    dlc__scache_plan_consume(&p, 2);
    dlc__scache_plan_consume(&p, 0);
    cr_assert_eq(p.cursor, 5);
    for (uint32_t k = 0; k < 4; k++)
        cr_assert_eq(dlc__scache_plan_next(&p, k), DLC__SCACHE_NEVER);
    /* A new schedule replaces the old one. */
    const uint32_t t[] = {3};
    cr_assert_eq(dlc__scache_plan_set(&p, 4, t, 1), DLC_OK);
    cr_assert_eq(dlc__scache_plan_next(&p, 3), 0);
    cr_assert_eq(dlc__scache_plan_next(&p, 0), DLC__SCACHE_NEVER);
    dlc__scache_plan_free(&p);
}

Test(stream_plan, victim_is_unscheduled_then_furthest)
{
    dlc__scache_cand v[4];
    memset(v, 0, sizeof v);
    v[0].next_use = 5;
    v[1].next_use = 9;
    v[2].next_use = DLC__SCACHE_NEVER;
    v[3].next_use = 2;
    for (size_t i = 0; i < 4; i++)
        v[i].bytes = 4096;
    cr_assert_eq(dlc__scache_pick_victim(v, 4, 0), 2, "unscheduled goes first");
    v[2].skip = 1; /* Pinned. */
    cr_assert_eq(dlc__scache_pick_victim(v, 4, 0), 1, "then the furthest next use");
    v[1].skip = 1;
    cr_assert_eq(dlc__scache_pick_victim(v, 4, 0), 0);
    /* A download ahead of need at entry 6 may evict only shards needed at 7 or later. */
    v[1].skip = 0;
    cr_assert_eq(dlc__scache_pick_victim(v, 4, 7), 1);
    v[1].skip = 1;
    cr_assert_eq(dlc__scache_pick_victim(v, 4, 7), 4, "nothing may go");
    /* Equal next uses: the larger file frees more with one eviction. */
    memset(v, 0, sizeof v);
    v[0].next_use = v[1].next_use = DLC__SCACHE_NEVER;
    v[0].bytes = 4096;
    v[1].bytes = 8192;
    cr_assert_eq(dlc__scache_pick_victim(v, 2, 0), 1);
    cr_assert_eq(dlc__scache_pick_victim(v, 0, 0), 0, "no candidates");
}

Test(stream_plan, needed_counts_the_largest_shards_and_the_index)
{
    dlc__set_index x;
    memset(&x, 0, sizeof x);
    dlc__set_shard sh[3];
    memset(sh, 0, sizeof sh);
    const uint64_t bytes[3] = {10000, 30000, 20000};
    uint64_t first = 0;
    for (uint32_t k = 0; k < 3; k++) {
        dlc__set_part_name(sh[k].name, k, 3);
        sh[k].file_bytes = bytes[k];
        sh[k].count = 1;
        sh[k].first = first++;
    }
    x.num_shards = 3;
    x.count = 3;
    x.set_id = 42;
    x.shards = sh;
    const uint64_t index = dlc__scache_needed(&x, 0, 0);
    cr_assert_gt(index, 0, "the index alone");
    cr_assert_eq(index % 4096, 0);
    cr_assert_eq(dlc__scache_needed(&x, 1, 0), index + 32768, "the largest shard, rounded");
    cr_assert_eq(dlc__scache_needed(&x, 1, 1), index + 32768 + 20480);
    cr_assert_eq(dlc__scache_needed(&x, 2, 5), index + 32768 + 20480 + 12288,
                 "never more than the whole set");
    cr_assert_eq(dlc__scache_needed(NULL, 1, 0), 0);
}
