/* The loader on a store set (loader/io.c): a set and a single store built from the same records
 * deliver the same bytes, in mmap and direct mode, with every sampler, at world sizes 1 and 3,
 * and across a state save and restore; a shard truncated under the loader fails the batch that
 * reads it, naming the shard. */
#include "loader_fixture.h"
#include "set_fixture.h"

#include <criterion/criterion.h>
#include <dlcache/loader.h>
#include <dlcache/store.h>
#include <sys/stat.h>
#include <xxhash.h>

#define N_ITEMS 120u
#define SET_ID 0xabcu

typedef struct both {
    char *dir, *set, *single;
} both;

/* DIR/set of @p parts parts and DIR/single.dlc of the same N_ITEMS items. */
static both make_both(uint32_t parts)
{
    both b = {tu_mkdtemp(), NULL, NULL};
    cr_assert_not_null(b.dir);
    b.set = tu_path(b.dir, "set");
    b.single = tu_path(b.dir, "single.dlc");
    cr_assert_eq(sf_make_set(b.set, N_ITEMS, parts, SET_ID, sf_skip_some), DLC_OK, "%s",
                 dlc_errmsg());
    cr_assert_eq(sf_make_single(b.single, N_ITEMS, sf_skip_some), DLC_OK, "%s", dlc_errmsg());
    return b;
}

static void free_both(both *b)
{
    tu_rmtree(b->dir);
    free(b->dir);
    free(b->set);
    free(b->single);
}

static dlc_loader_config config(uint32_t sampler, uint32_t io)
{
    static const double weights[3] = {1.0, 2.0, 3.0};
    dlc_loader_config c = fx_config();
    c.crop_h = c.crop_w = 6; /* Images are 8x8 to 12x12. */
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.sampler = sampler;
    c.io = io;
    c.quasi_group = 4;
    if (sampler == DLC_SAMPLER_WEIGHTED) {
        c.class_weights = weights;
        c.num_class_weights = 3;
    }
    return c;
}

static dlc_loader *open_ok(const char *path, const dlc_loader_config *c)
{
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(path, c, &l), DLC_OK, "%s: %s", path, dlc_errmsg());
    return l;
}

/* Every output of batch @p b: data, lengths and offsets of each field, labels and indices. */
static uint64_t batch_hash(const dlc_batch *b)
{
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    for (uint32_t i = 0; i < b->num_fields; i++) {
        const dlc_batch_field *f = &b->fields[i];
        XXH3_64bits_update(st, f->name, strlen(f->name));
        XXH3_64bits_update(st, f->shape, sizeof f->shape);
        XXH3_64bits_update(st, f->data, f->bytes);
        if (f->lengths)
            XXH3_64bits_update(st, f->lengths, b->count * sizeof *f->lengths);
        if (f->offsets)
            XXH3_64bits_update(st, f->offsets, (b->count + 1) * sizeof *f->offsets);
    }
    XXH3_64bits_update(st, b->labels, b->count * sizeof *b->labels);
    XXH3_64bits_update(st, b->indices, b->count * sizeof *b->indices);
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

/* Two epochs of one rank: the hash of every batch, and how many. */
static uint64_t run_hash(const char *path, const dlc_loader_config *c, uint64_t *batches)
{
    dlc_loader *l = open_ok(path, c);
    uint64_t h = 0, n = 0;
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        cr_assert_eq(dlc_loader_set_epoch(l, epoch), DLC_OK);
        dlc_batch b;
        dlc_status rc;
        while ((rc = dlc_loader_next(l, &b)) == DLC_OK) {
            h = dlc__mix64(h ^ batch_hash(&b));
            n++;
        }
        cr_assert_eq(rc, DLC_END, "%s: %d %s", path, rc, dlc_errmsg());
    }
    dlc_loader_close(l);
    *batches = n;
    return h;
}

/* The set and the single store give the same batches for every sampler, I/O mode and rank. */
static void same_as_single(uint32_t parts)
{
    both b = make_both(parts);
    static const uint32_t samplers[] = {DLC_SAMPLER_SEQUENTIAL, DLC_SAMPLER_SHUFFLE,
                                        DLC_SAMPLER_WEIGHTED, DLC_SAMPLER_QUASI_RANDOM};
    static const uint32_t ios[] = {DLC_IO_MMAP, DLC_IO_DIRECT};
    static const uint32_t worlds[] = {1, 3};
    for (size_t io = 0; io < 2; io++)
        for (size_t sm = 0; sm < 4; sm++)
            for (size_t w = 0; w < 2; w++)
                for (uint32_t rank = 0; rank < worlds[w]; rank++) {
                    dlc_loader_config c = config(samplers[sm], ios[io]);
                    c.world_size = worlds[w];
                    c.rank = rank;
                    uint64_t na = 0, nb = 0;
                    const uint64_t ha = run_hash(b.set, &c, &na);
                    const uint64_t hb = run_hash(b.single, &c, &nb);
                    cr_assert_gt(na, 2);
                    cr_assert_eq(na, nb);
                    cr_assert_eq(ha, hb, "sampler %u, io %u, rank %u of %u: the set differs",
                                 samplers[sm], ios[io], rank, worlds[w]);
                }
    free_both(&b);
}

Test(loader_set, four_shards_deliver_the_batches_of_a_single_store)
{
    same_as_single(4);
}

Test(loader_set, seventy_shards_deliver_the_batches_of_a_single_store)
{
    /* More shards than DLC__SHRINK_ALL_FILES: each batch checks only its own files. */
    same_as_single(70);
}

/* A state names its store by the content digest, and a set's is not that of the one store of
 * the same records (docs/FORMAT.md): each resumes its own, in either I/O mode, and refuses the
 * other, naming both digests. */
Test(loader_set, a_state_restores_on_its_store_and_is_refused_by_its_twin)
{
    both b = make_both(4);
    dlc_loader_config c = config(DLC_SAMPLER_SHUFFLE, DLC_IO_MMAP);
    c.epoch = 2;
    uint64_t full[32];
    uint32_t nfull = 0;
    dlc_loader *l = open_ok(b.single, &c);
    dlc_batch bt;
    while (dlc_loader_next(l, &bt) == DLC_OK)
        full[nfull++] = batch_hash(&bt);
    dlc_loader_close(l);
    cr_assert_gt(nfull, 4);
    const char *paths[2] = {b.set, b.single};
    for (int from = 0; from < 2; from++)
        for (uint32_t k = 1; k < nfull; k += 3) {
            l = open_ok(paths[from], &c);
            for (uint32_t i = 0; i < k; i++)
                cr_assert_eq(dlc_loader_next(l, &bt), DLC_OK);
            uint8_t state[DLC_LOADER_STATE_SIZE];
            cr_assert_eq(dlc_loader_state_save(l, state), DLC_OK);
            dlc_loader_close(l);
            dlc_loader_config c2 = c;
            c2.io = from ? DLC_IO_DIRECT : DLC_IO_MMAP;
            l = open_ok(paths[1 - from], &c2);
            cr_assert_eq(dlc_loader_state_restore(l, state, sizeof state), DLC_EINVAL);
            cr_assert(strstr(dlc_errmsg(), "content_digest"), "%s", dlc_errmsg());
            dlc_loader_close(l);
            l = open_ok(paths[from], &c2);
            cr_assert_eq(dlc_loader_state_restore(l, state, sizeof state), DLC_OK, "%s",
                         dlc_errmsg());
            uint32_t i = k;
            while (dlc_loader_next(l, &bt) == DLC_OK) {
                cr_assert_lt(i, nfull);
                cr_assert_eq(batch_hash(&bt), full[i], "batch %u after a restore at %u", i, k);
                i++;
            }
            cr_assert_eq(i, nfull);
            dlc_loader_close(l);
        }
    free_both(&b);
}

/* A shard that the next batch reads is truncated in place while a loader holds a batch. */
static void truncate_shard_under_loader(uint32_t parts, uint32_t io)
{
    both b = make_both(parts);
    dlc_loader_config c = config(DLC_SAMPLER_SEQUENTIAL, io);
    c.prefetch = 1;
    dlc_loader *l = open_ok(b.set, &c);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(b.set, 0, &s), DLC_OK);
    dlc_batch bt;
    cr_assert_eq(dlc_loader_next(l, &bt), DLC_OK, "%s", dlc_errmsg());
    /* The next batch starts at record batch_size: truncate its shard. */
    const uint32_t file = dlc_store_record_file(s, c.batch_size);
    char *shard = strdup(dlc_store_file_path(s, file));
    dlc_store_close(s);
    struct stat st;
    cr_assert_eq(stat(shard, &st), 0);
    cr_assert_eq(truncate(shard, st.st_size / 3), 0);
    const dlc_status rc = dlc_loader_next(l, &bt);
    cr_assert_eq(rc, DLC_ECHANGED, "next after truncation: %d (%s)", rc, dlc_errmsg());
    cr_assert_not_null(strstr(dlc_errmsg(), shard), "%s", dlc_errmsg());
    cr_assert_not_null(strstr(dlc_errmsg(), "shrank"), "%s", dlc_errmsg());
    /* Later batches fail the same way when they read that shard, and are whole otherwise. */
    uint32_t later = 0;
    dlc_status r2;
    while ((r2 = dlc_loader_next(l, &bt)) != DLC_END && later++ < 64)
        cr_assert(r2 == DLC_OK || r2 == DLC_ECHANGED, "%d %s", r2, dlc_errmsg());
    dlc_loader_close(l);
    free(shard);
    free_both(&b);
}

Test(loader_set, a_shard_truncated_under_the_loader_fails_the_batch_naming_it)
{
    truncate_shard_under_loader(4, DLC_IO_MMAP);
    truncate_shard_under_loader(4, DLC_IO_DIRECT);
    truncate_shard_under_loader(70, DLC_IO_MMAP);
    truncate_shard_under_loader(70, DLC_IO_DIRECT);
}

/* The indices of every sample of every rank of one epoch, counted per record. */
static void count_epoch(const char *path, dlc_loader_config c, uint32_t world, uint32_t *seen,
                        uint64_t count)
{
    for (uint32_t r = 0; r < world; r++) {
        c.world_size = world, c.rank = r;
        dlc_loader *l = open_ok(path, &c);
        dlc_batch bt;
        dlc_status rc;
        while ((rc = dlc_loader_next(l, &bt)) == DLC_OK)
            for (uint32_t i = 0; i < bt.count; i++) {
                cr_assert_lt(bt.indices[i], count);
                seen[bt.indices[i]]++;
            }
        cr_assert_eq(rc, DLC_END, "%s", dlc_errmsg());
        dlc_loader_close(l);
    }
}

Test(loader_set, shard_windows_read_every_record_of_a_set_and_ranks_read_disjoint_shards)
{
    both b = make_both(8);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(b.set, 0, &s), DLC_OK);
    const uint64_t count = dlc_store_get_info(s)->count;
    dlc_loader_config c = config(DLC_SAMPLER_SHARD_WINDOWS, DLC_IO_MMAP);
    c.window_shards = 2;
    c.streams = 4;
    c.batch_size = 4;
    for (uint32_t world = 1; world <= 4; world *= 2) {
        uint32_t *seen = calloc(count, sizeof *seen);
        count_epoch(b.set, c, world, seen, count);
        for (uint64_t i = 0; i < count; i++)
            cr_assert_geq(seen[i], 1, "world %u: record %llu never read", world,
                          (unsigned long long)i);
        free(seen);
        /* Each shard is read by one rank. */
        int owner[8];
        memset(owner, -1, sizeof owner);
        for (uint32_t r = 0; r < world; r++) {
            c.world_size = world, c.rank = r;
            dlc_loader *l = open_ok(b.set, &c);
            dlc_batch bt;
            while (dlc_loader_next(l, &bt) == DLC_OK)
                for (uint32_t i = 0; i < bt.count; i++) {
                    const uint32_t k = dlc_store_record_file(s, bt.indices[i]);
                    cr_assert(owner[k] == -1 || owner[k] == (int)r,
                              "world %u: shard %u read by ranks %d and %u", world, k, owner[k], r);
                    owner[k] = (int)r;
                }
            dlc_loader_close(l);
        }
    }
    dlc_store_close(s);
    free_both(&b);
}

Test(loader_set, shard_windows_refuse_repeated_augmentation)
{
    both b = make_both(4);
    dlc_loader_config c = config(DLC_SAMPLER_SHARD_WINDOWS, DLC_IO_MMAP);
    c.aug_repeats = 2;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(b.set, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "aug_repeats = 2") && strstr(dlc_errmsg(), "shard windows"),
              "%s", dlc_errmsg());
    cr_assert_null(l);
    c.sampler = DLC_SAMPLER_SHUFFLE; /* The same set read in a permutation takes it. */
    l = open_ok(b.set, &c);
    dlc_batch bt;
    cr_assert_eq(dlc_loader_next(l, &bt), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(bt.indices[0], bt.indices[1], "a record's two copies are neighbours");
    dlc_loader_close(l);
    c.aug_repeats = 257;
    cr_assert_eq(dlc_loader_open(b.set, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "aug_repeats = 257 must be in 0..256"), "%s", dlc_errmsg());
    free_both(&b);
}

Test(loader_set, shard_windows_resume_into_another_world_size_exactly_once)
{
    both b = make_both(6);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(b.set, 0, &s), DLC_OK);
    const uint64_t count = dlc_store_get_info(s)->count;
    dlc_store_close(s);
    dlc_loader_config c = config(DLC_SAMPLER_SHARD_WINDOWS, DLC_IO_MMAP);
    c.window_shards = 2;
    c.streams = 2;
    c.batch_size = 3;
    c.epoch = 1;
    /* The epoch as positions: world 1 reads it whole, in order. */
    dlc_loader *l = open_ok(b.set, &c);
    const uint64_t len = dlc_loader_batches_per_epoch(l) * 3;
    uint64_t *order = calloc(len, sizeof *order);
    uint64_t n = 0;
    dlc_batch bt;
    while (dlc_loader_next(l, &bt) == DLC_OK)
        for (uint32_t i = 0; i < bt.count; i++)
            order[n++] = bt.indices[i];
    dlc_loader_close(l);
    /* Two ranks read 2 batches each and save; three ranks resume. */
    uint8_t state[DLC_LOADER_STATE_SIZE];
    uint32_t *seen = calloc(count, sizeof *seen);
    for (uint32_t r = 0; r < 2; r++) {
        c.world_size = 2, c.rank = r;
        l = open_ok(b.set, &c);
        for (int k = 0; k < 2; k++) {
            cr_assert_eq(dlc_loader_next(l, &bt), DLC_OK);
            for (uint32_t i = 0; i < bt.count; i++)
                seen[bt.indices[i]]++;
        }
        cr_assert_eq(dlc_loader_state_save(l, state), DLC_OK);
        dlc_loader_close(l);
    }
    /* Opening with the default streams (the world size, 3) is refused, naming both. */
    c.world_size = 3, c.rank = 0, c.streams = 0;
    l = open_ok(b.set, &c);
    cr_assert_eq(dlc_loader_state_restore(l, state, sizeof state), DLC_EINVAL);
    cr_assert_not_null(strstr(dlc_errmsg(), "streams = 2"), "%s", dlc_errmsg());
    dlc_loader_close(l);
    c.streams = 2;
    for (uint32_t r = 0; r < 3; r++) {
        c.rank = r;
        l = open_ok(b.set, &c);
        cr_assert_eq(dlc_loader_state_restore(l, state, sizeof state), DLC_OK, "%s", dlc_errmsg());
        while (dlc_loader_next(l, &bt) == DLC_OK)
            for (uint32_t i = 0; i < bt.count; i++)
                seen[bt.indices[i]]++;
        dlc_loader_close(l);
    }
    /* Every position of the epoch once: the records as often as the order has them, and at most
     * two more (world 3 pads what is left with the epoch's start, as DistributedSampler does). */
    uint32_t *want = calloc(count, sizeof *want);
    for (uint64_t i = 0; i < n; i++)
        want[order[i]]++;
    uint64_t extra = 0;
    for (uint64_t i = 0; i < count; i++) {
        cr_assert_geq(seen[i], want[i], "record %llu read %u times, the epoch has it %u times",
                      (unsigned long long)i, seen[i], want[i]);
        extra += seen[i] - want[i];
    }
    cr_assert_leq(extra, 2);
    free(want), free(seen), free(order);
    free_both(&b);
}
