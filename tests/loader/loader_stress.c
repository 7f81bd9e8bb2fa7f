/* The loader's threads under ThreadSanitizer, without Criterion: Criterion's runner cannot start
 * under TSan (its inheritable arena fails to map: Snaipe/Criterion#274), so this plain program
 * drives the same pipeline paths (many workers, prefetch 1 and 8, resets mid-epoch, restore,
 * corrupt-record replacement, direct I/O, the token loader whose caller fills batches while it
 * waits) and checks that the bytes do not depend on threading.
 * Exit status 0 = pass. Run by ctest with the label "threads" (cmake/loader.cmake). */
#include "test_util.h"

#include <dlcache/loader.h>
#include <dlcache/store.h>
#include <dlcache/tokens.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define N 60
#define H 20
#define W 18
#define CLASSES 3

static char *dir, *path;

static void make_store(void)
{
    dir = tu_mkdtemp();
    TU_REQUIRE(dir);
    path = tu_path(dir, "s.dlc");
    TU_REQUIRE(path);
    TU_REQUIRE(tu_make_store(path, N, H, W, CLASSES, 0) == DLC_OK);
}

/* The next batch, taken in turn by dlc_loader_next() and by dlc_loader_next_wait() in slices of
 * 0 and 1 ms (many DLC_AGAIN while the workers fill the slot): the same bytes either way. */
static dlc_status next_any(dlc_loader *l, dlc_batch *b)
{
    static unsigned turn;
    const unsigned t = turn++ % 3;
    if (t == 0)
        return dlc_loader_next(l, b);
    dlc_status rc;
    while ((rc = dlc_loader_next_wait(l, b, t - 1)) == DLC_AGAIN)
        TU_REQUIRE(b->count == 0);
    return rc;
}

static uint64_t epoch_hash(dlc_loader *l, int stop_after)
{
    XXH64_hash_t h = 0;
    dlc_batch b;
    int n = 0;
    dlc_status rc;
    while ((rc = next_any(l, &b)) == DLC_OK) {
        h = XXH3_64bits_withSeed(b.data, b.bytes, h);
        h = XXH3_64bits_withSeed(b.indices, b.count * sizeof *b.indices, h);
        if (++n == stop_after)
            return h;
    }
    TU_REQUIRE(rc == DLC_END);
    return h;
}

static uint64_t run(dlc_loader_config c)
{
    dlc_loader *l;
    TU_REQUIRE(dlc_loader_open(path, &c, &l) == DLC_OK);
    /* Reset in the middle of an epoch, with batches still in flight. */
    epoch_hash(l, 2);
    TU_REQUIRE(dlc_loader_set_epoch(l, 1) == DLC_OK);
    uint64_t h = epoch_hash(l, 0);
    TU_REQUIRE(dlc_loader_set_epoch(l, 2) == DLC_OK);
    h ^= epoch_hash(l, 0) * 3;
    dlc_loader_close(l);
    return h;
}

/* XXH3 of every array of the token loader's batches of @p epoch from window @p start on, at
 * @p threads workers (batches of 2 x 9 tokens: many, each short, so that the caller often fills
 * one while a worker has the batch it waits for). */
static uint64_t token_epoch(const char *tpath, uint32_t threads, uint64_t epoch, uint64_t start)
{
    dlc_token_loader_config c;
    dlc_token_loader_config_init(&c);
    c.batch_size = 2;
    c.seq_len = 9;
    c.seed = 3;
    c.threads = threads;
    c.document_mask = 1;
    dlc_token_loader *l = NULL;
    TU_REQUIRE(dlc_token_loader_open(tpath, &c, &l) == DLC_OK);
    TU_REQUIRE(dlc_token_loader_seek(l, epoch, start) == DLC_OK);
    uint64_t h = 0, n = 0;
    dlc_token_batch b;
    dlc_status rc;
    while ((rc = dlc_token_loader_next(l, &b)) == DLC_OK) {
        const size_t cells = (size_t)b.rows * b.seq_len * 8;
        TU_REQUIRE(b.index == n++);
        h = XXH3_64bits_withSeed(b.input_ids, cells, h);
        h = XXH3_64bits_withSeed(b.labels, cells, h);
        h = XXH3_64bits_withSeed(b.position_ids, cells, h);
        h = XXH3_64bits_withSeed(b.cu_seqlens, b.num_cu * sizeof(int32_t), h);
    }
    TU_REQUIRE(rc == DLC_END && n == dlc_token_loader_len(l));
    dlc_token_loader_close(l);
    return h;
}

static void token_stress(void)
{
    char *tpath = tu_path(dir, "tokens.dlc");
    TU_REQUIRE(tpath);
    dlc_token_writer_config wc;
    dlc_token_writer_config_init(&wc);
    wc.vocab_size = 1000;
    dlc_token_writer *w = NULL;
    TU_REQUIRE(dlc_token_writer_open(tpath, &wc, &w) == DLC_OK);
    uint32_t ids[40];
    for (uint32_t d = 0; d < 300; d++) {
        const uint32_t n = 1 + (d * 7919u) % 39;
        for (uint32_t k = 0; k < n; k++)
            ids[k] = 1 + (d * 31 + k * 17) % 999;
        TU_REQUIRE(dlc_token_writer_add(w, ids, n) == DLC_OK);
    }
    TU_REQUIRE(dlc_token_writer_finish(w) == DLC_OK);
    const uint32_t threads[] = {1, 2, 5};
    for (uint64_t e = 0; e < 2; e++) {
        const uint64_t ref = token_epoch(tpath, 0, e, 0), part = token_epoch(tpath, 0, e, 40);
        for (int t = 0; t < 3; t++) {
            TU_REQUIRE(token_epoch(tpath, threads[t], e, 0) == ref);
            TU_REQUIRE(token_epoch(tpath, threads[t], e, 40) == part);
        }
    }
    free(tpath);
}

int main(void)
{
    make_store();
    /* Flip a payload byte of record 11 so replacement runs in the workers. */
    dlc_store *s;
    TU_REQUIRE(dlc_store_open(path, 0, &s) == DLC_OK);
    dlc_store_reader *r;
    TU_REQUIRE(dlc_store_reader_open(s, &r) == DLC_OK);
    dlc_record rec;
    TU_REQUIRE(dlc_store_read(r, 11, &rec) == DLC_OK);
    const uint8_t bad = rec.data[5] ^ 0x80;
    const uint64_t off = rec.offset + 5;
    dlc_store_reader_close(r);
    dlc_store_close(s);
    const int fd = open(path, O_WRONLY);
    TU_REQUIRE(fd >= 0 && pwrite(fd, &bad, 1, (off_t)off) == 1);
    close(fd);

    dlc_loader_config c;
    dlc_loader_config_init(&c);
    c.batch_size = 7;
    c.crop_h = c.crop_w = 12;
    c.seed = 5;
    c.verify = DLC_VERIFY_FIRST;
    c.on_corrupt = DLC_CORRUPT_REPLACE;
    const uint32_t augments[] = {DLC_AUGMENT_RANDOM_CROP, DLC_AUGMENT_RANDOM_RESIZED_CROP};
    const uint32_t ios[] = {DLC_IO_MMAP, DLC_IO_DIRECT};
    for (int a = 0; a < 2; a++)
        for (int io = 0; io < 2; io++) {
            c.augment = augments[a];
            c.io = ios[io];
            c.dtype = a ? DLC_DTYPE_FLOAT16 : DLC_DTYPE_UINT8;
            c.threads = 1, c.prefetch = 1;
            const uint64_t ref = run(c);
            const uint32_t threads[] = {2, 8}, prefetch[] = {1, 8};
            for (int t = 0; t < 2; t++)
                for (int p = 0; p < 2; p++) {
                    c.threads = threads[t], c.prefetch = prefetch[p];
                    TU_REQUIRE(run(c) == ref);
                }
        }

    /* The per-sample ops (policy, color jitter, blur) and RandomErasing drawn and applied in the
     * workers' own buffers: the same bytes with any threads and prefetch. */
    dlc_augment_spec aug;
    dlc_augment_spec_init(&aug);
    aug.auto_augment = DLC_AUTO_AUGMENT_TRIVIAL_WIDE;
    aug.brightness[0] = 0.6f, aug.brightness[1] = 1.4f;
    aug.hue[0] = -0.1f, aug.hue[1] = 0.1f;
    aug.blur_prob = 0.5f;
    aug.blur_kernel[0] = aug.blur_kernel[1] = 3;
    aug.erase_prob = 0.5f;
    aug.erase_value = DLC_ERASE_NOISE;
    c.augment_specs = &aug;
    c.num_augment_specs = 1;
    c.return_params = 1;
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.dtype = DLC_DTYPE_FLOAT16;
    c.io = DLC_IO_MMAP;
    c.threads = 1, c.prefetch = 1;
    const uint64_t aug_ref = run(c);
    c.threads = 8, c.prefetch = 8;
    TU_REQUIRE(run(c) == aug_ref);
    c.augment_specs = NULL;
    c.num_augment_specs = 0;
    c.return_params = 0;

    /* Save and restore while workers run ahead. */
    c.threads = 6, c.prefetch = 4, c.io = DLC_IO_MMAP;
    dlc_loader *l;
    TU_REQUIRE(dlc_loader_open(path, &c, &l) == DLC_OK);
    const uint64_t full = epoch_hash(l, 0);
    TU_REQUIRE(dlc_loader_set_epoch(l, c.epoch) == DLC_OK);
    uint64_t h = epoch_hash(l, 3);
    uint8_t st[DLC_LOADER_STATE_SIZE];
    TU_REQUIRE(dlc_loader_state_save(l, st) == DLC_OK);
    dlc_loader_close(l);
    TU_REQUIRE(dlc_loader_open(path, &c, &l) == DLC_OK);
    TU_REQUIRE(dlc_loader_state_restore(l, st, sizeof st) == DLC_OK);
    dlc_batch b;
    dlc_status rc;
    while ((rc = dlc_loader_next(l, &b)) == DLC_OK) {
        h = XXH3_64bits_withSeed(b.data, b.bytes, h);
        h = XXH3_64bits_withSeed(b.indices, b.count * sizeof *b.indices, h);
    }
    TU_REQUIRE(rc == DLC_END && h == full);
    /* Every other batch kept (dlc_loader_keep()) while the workers refill the ring: the kept
     * memory is never written again, and the epoch is the same. */
    TU_REQUIRE(dlc_loader_set_epoch(l, c.epoch) == DLC_OK);
    h = 0;
    uint64_t n = 0;
    while ((rc = dlc_loader_next(l, &b)) == DLC_OK) {
        h = XXH3_64bits_withSeed(b.data, b.bytes, h);
        h = XXH3_64bits_withSeed(b.indices, b.count * sizeof *b.indices, h);
        if (n++ % 2)
            continue;
        const uint64_t mine = XXH3_64bits(b.data, b.bytes);
        const void *const data = b.data;
        const size_t bytes = b.bytes;
        void *kept = NULL;
        TU_REQUIRE(dlc_loader_keep(l, &b, &kept) == DLC_OK && kept);
        dlc_batch later;
        if (dlc_loader_next(l, &later) == DLC_OK) {
            h = XXH3_64bits_withSeed(later.data, later.bytes, h);
            h = XXH3_64bits_withSeed(later.indices, later.count * sizeof *later.indices, h);
            n++;
        }
        TU_REQUIRE(XXH3_64bits(data, bytes) == mine);
        dlc_loader_kept_free(kept);
    }
    TU_REQUIRE(rc == DLC_END && h == full);
    dlc_loader_stats stats;
    dlc_loader_get_stats(l, &stats);
    TU_REQUIRE(stats.threads == 6);
    dlc_loader_close(l);

    /* A mixture (loader/mix.c): the same bytes whatever the threads, and its state saved while
     * workers run ahead, restored exactly (same weights) and under other weights (a new schedule
     * begins, applied by the reset while the threads are paused). */
    char *path2 = tu_path(dir, "t.dlc");
    TU_REQUIRE(path2 && tu_make_store(path2, 23, H, W, CLASSES, 0) == DLC_OK);
    dlc_mix_source src[2];
    dlc_mix_source_init(&src[0]);
    dlc_mix_source_init(&src[1]);
    src[0].path = path, src[0].weight = 2;
    src[1].path = path2;
    c.threads = 1, c.prefetch = 1;
    TU_REQUIRE(dlc_loader_open_mix(src, 2, NULL, &c, &l) == DLC_OK);
    const uint64_t mix_ref = epoch_hash(l, 0);
    dlc_loader_close(l);
    c.threads = 6, c.prefetch = 4;
    TU_REQUIRE(dlc_loader_open_mix(src, 2, NULL, &c, &l) == DLC_OK);
    TU_REQUIRE(epoch_hash(l, 0) == mix_ref);
    TU_REQUIRE(dlc_loader_set_epoch(l, c.epoch) == DLC_OK);
    epoch_hash(l, 3);
    uint8_t mst[DLC_LOADER_MIX_STATE_MAX];
    size_t mn = 0;
    TU_REQUIRE(dlc_loader_mix_state_save(l, mst, sizeof mst, &mn) == DLC_OK);
    const uint64_t rest = epoch_hash(l, 0);
    TU_REQUIRE(dlc_loader_mix_state_restore(l, mst, mn) == DLC_OK);
    TU_REQUIRE(epoch_hash(l, 0) == rest);
    dlc_loader_close(l);
    src[1].weight = 3;
    TU_REQUIRE(dlc_loader_open_mix(src, 2, NULL, &c, &l) == DLC_OK);
    epoch_hash(l, 2);
    TU_REQUIRE(dlc_loader_mix_state_restore(l, mst, mn) == DLC_OK);
    epoch_hash(l, 0);
    TU_REQUIRE(dlc_loader_set_epoch(l, 1) == DLC_OK);
    epoch_hash(l, 0);
    dlc_loader_close(l);
    free(path2);

    /* threads="auto" parks and wakes workers from the consumer's thread while they run, the
     * report reads every thread's counters, and the trace's rings are written by their threads
     * and read at close: the same bytes, and no race. */
    char trace[600];
    snprintf(trace, sizeof trace, "%s/trace.json", dir);
    c.threads = 6, c.prefetch = 3, c.auto_threads = 1, c.trace = trace, c.trace_batches = 8;
    TU_REQUIRE(dlc_loader_open(path, &c, &l) == DLC_OK);
    for (int e = 0; e < 3; e++) {
        TU_REQUIRE(dlc_loader_set_epoch(l, c.epoch) == DLC_OK);
        TU_REQUIRE(epoch_hash(l, 0) == full);
        dlc_loader_report rep;
        rep.struct_size = sizeof rep;
        TU_REQUIRE(dlc_loader_get_report(l, 5, &rep) == DLC_OK);
        TU_REQUIRE(rep.threads >= 1 && rep.threads <= 6 && rep.bound != DLC_BOUND_UNKNOWN);
    }
    dlc_loader_close(l);
    TU_REQUIRE(access(trace, F_OK) == 0);

    token_stress();

    tu_rmtree(dir);
    puts("loader_stress: ok");
    return 0;
}
