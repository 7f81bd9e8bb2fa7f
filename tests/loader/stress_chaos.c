/* stress_chaos: the loader driven the way a careless training script drives it, under
 * ThreadSanitizer (a plain program: Criterion's runner cannot start under TSan). Each round
 * draws a random configuration (threads 1-6, prefetch 1-6, batch 1-9, mmap or direct I/O,
 * shuffled or sequential) and a random script of calls: next, next while still holding the
 * previous batch (abandoning it), an early release, a release of a batch that is not the one
 * lent, set_epoch mid-epoch, save, and restore into a second loader with another thread count
 * and prefetch depth, which must then deliver exactly the batches the first one delivers;
 * loaders are closed mid-epoch with a batch lent. The random seed comes from DLC_STRESS_SEED
 * (default 1), so a failure replays. Exit status 0 = pass. */
#include "test_util.h"

#include <dlcache/loader.h>
#include <dlcache/store.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define N 53
#define H 14
#define W 12
#define CLASSES 4

static char *dir, *path;
static unsigned round_no;
static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)((rng_state >> 33) % n);
}

/* Two stores: images and labels, and records of many fields whose variable outputs are packed
 * by whichever worker completes a batch. */
static char *fields_path;

static void make_store(void)
{
    dir = tu_mkdtemp();
    TU_REQUIRE(dir);
    path = tu_path(dir, "s.dlc");
    fields_path = tu_path(dir, "fields.dlc");
    TU_REQUIRE(path && fields_path);
    TU_REQUIRE(tu_make_store(path, N, H, W, CLASSES, 0) == DLC_OK);
    TU_REQUIRE(tu_make_fields_store(fields_path, N, H, W) == DLC_OK);
}

/* Every output's bytes, lengths and offsets, the indices and the labels. */
static uint64_t batch_hash(const dlc_batch *b)
{
    uint64_t h = XXH3_64bits(b->indices, b->count * sizeof *b->indices);
    h = XXH3_64bits_withSeed(b->labels, b->count * sizeof *b->labels, h ^ b->batch_index);
    for (uint32_t i = 0; i < b->num_fields; i++) {
        const dlc_batch_field *f = &b->fields[i];
        h = XXH3_64bits_withSeed(f->data, f->bytes, h);
        if (f->lengths)
            h = XXH3_64bits_withSeed(f->lengths, b->count * sizeof *f->lengths, h);
        if (f->offsets)
            h = XXH3_64bits_withSeed(f->offsets, (b->count + 1) * sizeof *f->offsets, h);
    }
    return h;
}

static const char *store_of_round;

static dlc_loader *open_random(dlc_loader_config *c)
{
    c->threads = 1 + rnd(6);
    c->prefetch = 1 + rnd(6);
    dlc_loader *l = NULL;
    TU_REQUIRE(dlc_loader_open(store_of_round, c, &l) == DLC_OK);
    return l;
}

static void one_round(void)
{
    dlc_loader_config c;
    dlc_loader_config_init(&c);
    c.batch_size = 1 + rnd(9);
    c.crop_h = 8;
    c.crop_w = 8;
    c.seed = rnd(1000);
    c.sampler = rnd(2) ? DLC_SAMPLER_SHUFFLE : DLC_SAMPLER_SEQUENTIAL;
    c.io = rnd(3) == 0 ? DLC_IO_DIRECT : DLC_IO_MMAP;
    c.drop_last = (int)rnd(2);
    c.dtype = rnd(3) == 0 ? DLC_DTYPE_FLOAT32 : DLC_DTYPE_UINT8;
    /* Half the rounds on the store of many fields, its variable fields in a random layout. */
    dlc_field_option opts[2] = {{.name = "tokens", .variable = (uint32_t)rnd(3), .max_len = 4},
                                {.name = "boxes", .variable = (uint32_t)rnd(3), .max_len = 2}};
    store_of_round = path;
    if (rnd(2)) {
        store_of_round = fields_path;
        c.field_options = opts;
        c.num_field_options = 2;
        c.augment = rnd(2) ? DLC_AUGMENT_RANDOM_RESIZED_CROP : DLC_AUGMENT_RANDOM_CROP;
    }
    dlc_loader *l = open_random(&c);
    dlc_batch b, held;
    int holding = 0;
    const unsigned steps = 10 + rnd(40);
    for (unsigned k = 0; k < steps; k++) {
        switch (rnd(8)) {
        case 0:
        case 1:
        case 2: {
            /* next; sometimes keep the batch "held" and ask again, abandoning it. */
            const dlc_status rc = dlc_loader_next(l, &b);
            TU_REQUIRE(rc == DLC_OK || rc == DLC_END);
            if (rc == DLC_END) {
                TU_REQUIRE(dlc_loader_set_epoch(l, rnd(3)) == DLC_OK);
                holding = 0;
            } else {
                TU_REQUIRE(b.count >= 1 && b.count <= c.batch_size);
                held = b;
                holding = 1;
            }
            break;
        }
        case 3:
            if (holding) {
                TU_REQUIRE(dlc_loader_release(l, &held) == DLC_OK);
                holding = 0;
            }
            break;
        case 4: {
            /* A batch that is not the one lent is refused without harm. */
            dlc_batch fake = {0};
            TU_REQUIRE(dlc_loader_release(l, &fake) == DLC_EINVAL);
            break;
        }
        case 5:
            TU_REQUIRE(dlc_loader_set_epoch(l, rnd(4)) == DLC_OK);
            holding = 0;
            break;
        case 6: {
            /* Save, restore into another loader with other threads and prefetch, and compare
             * the next few batches of both. */
            uint8_t st[DLC_LOADER_STATE_SIZE];
            TU_REQUIRE(dlc_loader_state_save(l, st) == DLC_OK);
            dlc_loader *m = open_random(&c);
            TU_REQUIRE(dlc_loader_state_restore(m, st, sizeof st) == DLC_OK);
            holding = 0;
            for (int t = 0; t < 3; t++) {
                dlc_batch x, y;
                const dlc_status r1 = dlc_loader_next(l, &x);
                const dlc_status r2 = dlc_loader_next(m, &y);
                TU_REQUIRE(r1 == r2);
                if (r1 != DLC_OK)
                    break;
                TU_REQUIRE(x.count == y.count && x.batch_index == y.batch_index);
                TU_REQUIRE(batch_hash(&x) == batch_hash(&y));
            }
            /* Close the second one mid-epoch, sometimes with a batch lent. */
            if (rnd(2))
                (void)dlc_loader_next(m, &b);
            dlc_loader_close(m);
            break;
        }
        default: {
            /* Restore this loader's own saved state mid-epoch. */
            uint8_t st[DLC_LOADER_STATE_SIZE];
            TU_REQUIRE(dlc_loader_state_save(l, st) == DLC_OK);
            (void)dlc_loader_next(l, &b);
            TU_REQUIRE(dlc_loader_state_restore(l, st, sizeof st) == DLC_OK);
            holding = 0;
            break;
        }
        }
    }
    /* Closed mid-epoch, with or without a lent batch and with batches in flight. */
    dlc_loader_close(l);
}

int main(void)
{
    const char *s = getenv("DLC_STRESS_SEED");
    rng_state = s ? strtoull(s, NULL, 10) : 1;
    const char *r = getenv("DLC_STRESS_ROUNDS");
    const unsigned rounds = r ? (unsigned)strtoul(r, NULL, 10) : 60;
    make_store();
    for (round_no = 0; round_no < rounds; round_no++)
        one_round();
    tu_rmtree(dir);
    printf("stress_chaos: ok (%u rounds, seed %s)\n", rounds, s ? s : "1");
    return 0;
}
