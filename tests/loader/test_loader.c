/* The loader end to end on real small stores: determinism under any thread count and prefetch
 * depth, sharding, save/restore, corruption, output conversion and I/O modes.
 * dlc-test-label: threads
 * (Under TSan, Criterion cannot start, Snaipe/Criterion#274; loader_stress.c drives the same
 * pipeline paths there as a plain program.) */
#include "augment.h"
#include "common.h"
#include "loader_fixture.h"

#include <fcntl.h>
#include <sys/stat.h>

#define N 50
#define H 16
#define W 14
#define CLASSES 5

static dlc_loader *open_ok(const char *path, const dlc_loader_config *c)
{
    dlc_loader *l = NULL;
    const dlc_status rc = dlc_loader_open(path, c, &l);
    cr_assert_eq(rc, DLC_OK, "open: %d %s", rc, dlc_errmsg());
    return l;
}

static uint64_t run_hash(const char *path, const dlc_loader_config *c)
{
    dlc_loader *l = open_ok(path, c);
    const uint64_t h = fx_epoch_hash(l, NULL, NULL, 0);
    dlc_loader_close(l);
    return h;
}

Test(loader, identical_bytes_for_any_threads_and_prefetch)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    const uint32_t augments[] = {DLC_AUGMENT_RANDOM_CROP, DLC_AUGMENT_RANDOM_RESIZED_CROP};
    const uint32_t dtypes[] = {DLC_DTYPE_UINT8, DLC_DTYPE_FLOAT32};
    for (int a = 0; a < 2; a++) {
        dlc_loader_config c = fx_config();
        c.augment = augments[a];
        c.dtype = dtypes[a];
        const uint32_t threads[] = {1, 2, 8}, prefetch[] = {1, 8};
        uint64_t first = 0;
        for (int t = 0; t < 3; t++)
            for (int p = 0; p < 2; p++) {
                c.threads = threads[t];
                c.prefetch = prefetch[p];
                const uint64_t h = run_hash(d.path, &c);
                if (t == 0 && p == 0)
                    first = h;
                cr_assert_eq(h, first, "threads %u prefetch %u differ", threads[t], prefetch[p]);
            }
    }
    fx_rmdir(&d);
}

Test(loader, epochs_differ_and_repeat_exactly)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    dlc_loader_config c = fx_config();
    dlc_loader *l = open_ok(d.path, &c);
    uint64_t idx0[N], idx1[N], n0, n1;
    const uint64_t h0 = fx_epoch_hash(l, idx0, &n0, N);
    cr_assert_eq(n0, N);
    cr_assert_eq(dlc_loader_set_epoch(l, 1), DLC_OK);
    const uint64_t h1 = fx_epoch_hash(l, idx1, &n1, N);
    cr_assert_neq(h0, h1);
    cr_assert_neq(memcmp(idx0, idx1, sizeof idx0), 0, "epoch 1 has another order");
    cr_assert_eq(dlc_loader_set_epoch(l, 0), DLC_OK);
    cr_assert_eq(fx_epoch_hash(l, NULL, NULL, 0), h0, "epoch 0 again gives the same bytes");
    /* A permutation: each record exactly once, and labels belong to the records. */
    int seen[N] = {0};
    for (int i = 0; i < N; i++)
        seen[idx0[i]]++;
    for (int i = 0; i < N; i++)
        cr_assert_eq(seen[i], 1);
    cr_assert_eq(dlc_loader_batches_per_epoch(l), (N + 7) / 8);
    cr_assert_eq(dlc_loader_store_count(l), N);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

/* Indices of every rank for an epoch, concatenated. */
static uint64_t collect_ranks(const char *path, dlc_loader_config c, uint32_t world, uint32_t *hits)
{
    uint64_t total = 0;
    for (uint32_t r = 0; r < world; r++) {
        c.rank = r;
        c.world_size = world;
        dlc_loader *l = open_ok(path, &c);
        dlc_batch b;
        dlc_status rc;
        while ((rc = dlc_loader_next(l, &b)) == DLC_OK) {
            for (uint32_t i = 0; i < b.count; i++) {
                cr_assert_eq(b.labels[i], (int64_t)(b.indices[i] % CLASSES));
                hits[b.indices[i]]++;
            }
            total += b.count;
            if (c.drop_last)
                cr_assert_eq(b.count, c.batch_size);
        }
        cr_assert_eq(rc, DLC_END);
        dlc_loader_close(l);
    }
    return total;
}

Test(loader, world_sizes_cover_every_sample_once_plus_padding)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    const uint32_t worlds[] = {1, 3, 4};
    for (int w = 0; w < 3; w++) {
        for (int drop = 0; drop < 2; drop++) {
            dlc_loader_config c = fx_config();
            c.drop_last = drop;
            c.batch_size = 4;
            uint32_t hits[N] = {0};
            const uint64_t total = collect_ranks(d.path, c, worlds[w], hits);
            const uint32_t world = worlds[w];
            if (!drop) {
                const uint64_t padded = (N + world - 1) / world * world;
                cr_assert_eq(total, padded);
                uint64_t twice = 0;
                for (int i = 0; i < N; i++) {
                    cr_assert(hits[i] == 1 || hits[i] == 2);
                    twice += hits[i] == 2;
                }
                cr_assert_eq(twice, padded - N);
            } else {
                cr_assert_eq(total, (N / world) / 4 * 4 * world);
                for (int i = 0; i < N; i++)
                    cr_assert_leq(hits[i], 1);
            }
        }
    }
    fx_rmdir(&d);
}

Test(loader, restore_continues_exactly_under_the_same_world_size)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    dlc_loader_config c = fx_config();
    c.world_size = 2;
    c.rank = 1;
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.epoch = 3;
    /* The uninterrupted run: one hash per batch. */
    uint64_t full[16];
    int nfull = 0;
    dlc_loader *l = open_ok(d.path, &c);
    dlc_batch b;
    while (dlc_loader_next(l, &b) == DLC_OK)
        full[nfull++] = XXH3_64bits(b.data, b.bytes) ^ XXH3_64bits(b.indices, b.count * 8);
    dlc_loader_close(l);
    cr_assert_eq(nfull, 4); /* 25 samples for this rank, batches of 8 */

    for (int k = 0; k <= nfull; k++) {
        l = open_ok(d.path, &c);
        for (int i = 0; i < k; i++)
            cr_assert_eq(dlc_loader_next(l, &b), DLC_OK);
        uint8_t state[DLC_LOADER_STATE_SIZE];
        cr_assert_eq(dlc_loader_state_save(l, state), DLC_OK);
        dlc_loader_close(l);

        dlc_loader_config c2 = c;
        c2.seed = 999; /* The state's seed wins. */
        c2.epoch = 0;
        c2.threads = 3;
        l = open_ok(d.path, &c2);
        cr_assert_eq(dlc_loader_state_restore(l, state, sizeof state), DLC_OK, "%s", dlc_errmsg());
        int i = k;
        while (dlc_loader_next(l, &b) == DLC_OK) {
            cr_assert_lt(i, nfull);
            cr_assert_eq(b.epoch, 3);
            cr_assert_eq(b.batch_index, (uint64_t)i);
            cr_assert_eq(XXH3_64bits(b.data, b.bytes) ^ XXH3_64bits(b.indices, b.count * 8),
                         full[i], "batch %d after a restore at %d", i, k);
            i++;
        }
        cr_assert_eq(i, nfull);
        dlc_loader_close(l);
    }
    fx_rmdir(&d);
}

Test(loader, restore_under_another_world_size_covers_exactly_the_remainder)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    dlc_loader_config c = fx_config();
    c.batch_size = 4;
    uint32_t hits[N] = {0};
    uint8_t state[DLC_LOADER_STATE_SIZE], state1[DLC_LOADER_STATE_SIZE];
    /* Two ranks take 3 batches each, in lockstep; both save the same state. */
    for (uint32_t r = 0; r < 2; r++) {
        c.world_size = 2;
        c.rank = r;
        dlc_loader *l = open_ok(d.path, &c);
        dlc_batch b;
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(dlc_loader_next(l, &b), DLC_OK);
            for (uint32_t j = 0; j < b.count; j++)
                hits[b.indices[j]]++;
        }
        cr_assert_eq(dlc_loader_state_save(l, r ? state1 : state), DLC_OK);
        dlc_loader_close(l);
    }
    cr_assert_eq(memcmp(state, state1, sizeof state), 0, "ranks in lockstep save one state");
    /* Three ranks continue. */
    uint64_t after = 0;
    for (uint32_t r = 0; r < 3; r++) {
        c.world_size = 3;
        c.rank = r;
        dlc_loader *l = open_ok(d.path, &c);
        cr_assert_eq(dlc_loader_state_restore(l, state, sizeof state), DLC_OK, "%s", dlc_errmsg());
        dlc_batch b;
        while (dlc_loader_next(l, &b) == DLC_OK) {
            for (uint32_t j = 0; j < b.count; j++)
                hits[b.indices[j]]++;
            after += b.count;
        }
        dlc_loader_close(l);
    }
    /* 24 delivered before; 26 left, padded to 27 for three ranks. */
    cr_assert_eq(after, 27);
    int twice = 0;
    for (int i = 0; i < N; i++) {
        cr_assert(hits[i] == 1 || hits[i] == 2, "record %d seen %u times", i, hits[i]);
        twice += hits[i] == 2;
    }
    cr_assert_eq(twice, 1);
    fx_rmdir(&d);
}

Test(loader, restore_rejects_bad_states)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    dlc_loader_config c = fx_config();
    dlc_loader *l = open_ok(d.path, &c);
    uint8_t st[DLC_LOADER_STATE_SIZE];
    cr_assert_eq(dlc_loader_state_save(l, st), DLC_OK);
    cr_assert_eq(dlc_loader_state_restore(l, st, sizeof st - 1), DLC_EINVAL);
    for (size_t i = 0; i < sizeof st; i++) {
        uint8_t bad[DLC_LOADER_STATE_SIZE];
        memcpy(bad, st, sizeof bad);
        bad[i] ^= 0x10;
        cr_assert_eq(dlc_loader_state_restore(l, bad, sizeof bad), DLC_EINVAL, "byte %zu", i);
    }
    /* Random bytes never pass. */
    dlc__rng r = {3, 0};
    for (int k = 0; k < 1000; k++) {
        uint8_t junk[DLC_LOADER_STATE_SIZE];
        for (size_t i = 0; i < sizeof junk; i++)
            junk[i] = (uint8_t)dlc__rng_next(&r);
        cr_assert_eq(dlc_loader_state_restore(l, junk, sizeof junk), DLC_EINVAL);
    }
    /* A valid state for a store of another size is refused, naming the reason. */
    dlc_loader_close(l);
    fx_dir d2;
    fx_make_store(&d2, N + 1, H, W, CLASSES, 0);
    l = open_ok(d2.path, &c);
    cr_assert_eq(dlc_loader_state_restore(l, st, sizeof st), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "50 records"), "%s", dlc_errmsg());
    /* The loader still works after refusals. */
    uint64_t n;
    fx_epoch_hash(l, NULL, &n, 0);
    cr_assert_eq(n, N + 1);
    dlc_loader_close(l);
    fx_rmdir(&d2);
    fx_rmdir(&d);
}

/* Re-seal a state after an edit: the checksum is no secret, so the checks behind it must hold. */
static void reseal(uint8_t *st)
{
    dlc__st64(st + 56, XXH3_64bits(st, 56));
}

Test(loader, a_state_names_its_store_and_its_fields_are_checked)
{
    fx_dir d, other;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    fx_make_store(&other, N, H, W, CLASSES + 1, 0); /* As many records, other labels. */
    dlc_loader_config c = fx_config();
    dlc_loader *l = open_ok(d.path, &c);
    uint8_t st[DLC_LOADER_STATE_SIZE];
    cr_assert_eq(dlc_loader_state_save(l, st), DLC_OK);
    const uint64_t mine = dlc_store_get_info(dlc_loader_store(l))->content_digest;
    cr_assert_eq(dlc__ld64(st + 8), mine, "the state holds its store's content digest");
    /* Another store of as many records refuses it, naming both digests. */
    dlc_loader *o = open_ok(other.path, &c);
    const uint64_t theirs = dlc_store_get_info(dlc_loader_store(o))->content_digest;
    cr_assert_neq(mine, theirs);
    cr_assert_eq(dlc_loader_state_restore(o, st, sizeof st), DLC_EINVAL);
    char want[2][24];
    snprintf(want[0], sizeof want[0], "%016llx", (unsigned long long)mine);
    snprintf(want[1], sizeof want[1], "%016llx", (unsigned long long)theirs);
    cr_assert(strstr(dlc_errmsg(), want[0]) && strstr(dlc_errmsg(), want[1]), "%s", dlc_errmsg());
    /* An epoch past 2^63 (a negative one written as unsigned) is refused, re-sealed or not. */
    uint8_t bad[DLC_LOADER_STATE_SIZE];
    memcpy(bad, st, sizeof bad);
    dlc__st64(bad + 24, (uint64_t)-5);
    reseal(bad);
    cr_assert_eq(dlc_loader_state_restore(l, bad, sizeof bad), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "epoch"), "%s", dlc_errmsg());
    /* A version 1 state (magic, version, sampler; no digest) is still read, by its count. */
    uint8_t v1[DLC_LOADER_STATE_SIZE];
    memcpy(v1, st, sizeof v1);
    dlc__st64(v1, 0x31545344434c44ull);
    dlc__st32(v1 + 8, 1);
    dlc__st32(v1 + 12, dlc__ld32(st + 4));
    reseal(v1);
    cr_assert_eq(dlc_loader_state_restore(l, v1, sizeof v1), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_loader_state_restore(o, v1, sizeof v1), DLC_OK, "%s", dlc_errmsg());
    dlc_loader_close(o);
    dlc_loader_close(l);
    fx_rmdir(&other);
    fx_rmdir(&d);
}

/* The loader's notices about replaced records, kept for the test to read. */
typedef struct notices {
    int first, per_epoch[2];
    char text[1024];
} notices;

static void keep_notice(void *user, dlc_log_level level, const char *msg)
{
    notices *n = user;
    if (level != DLC_LOG_WARN)
        return;
    if (strstr(msg, "replaced by record") && strstr(msg, "record 17")) {
        n->first++;
        snprintf(n->text, sizeof n->text, "%s", msg);
    }
    for (int e = 0; e < 2; e++) {
        char want[64];
        snprintf(want, sizeof want, "epoch %d: 1 damaged record was replaced", e);
        if (strstr(msg, want))
            n->per_epoch[e]++;
    }
}

Test(loader, corrupt_record_is_replaced_and_counted_or_named)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    fx_corrupt_record(d.path, 17);
    const uint32_t ios[] = {DLC_IO_MMAP, DLC_IO_DIRECT};
    for (int io = 0; io < 2; io++) {
        dlc_loader_config c = fx_config();
        c.io = ios[io];
        c.verify = DLC_VERIFY_FIRST;
        c.on_corrupt = DLC_CORRUPT_REPLACE;
        notices said = {0};
        c.log = keep_notice;
        c.log_user = &said;
        dlc_loader *l = open_ok(d.path, &c);
        for (int epoch = 0; epoch < 2; epoch++) {
            cr_assert_eq(dlc_loader_set_epoch(l, (uint64_t)epoch), DLC_OK);
            dlc_batch b;
            uint64_t total = 0;
            int batches = 0;
            while (dlc_loader_next(l, &b) == DLC_OK) {
                if (++batches < 7)
                    cr_assert_eq(b.count, 8, "the batch keeps its size");
                for (uint32_t j = 0; j < b.count; j++)
                    cr_assert_neq(b.indices[j], 17);
                total += b.count;
            }
            cr_assert_eq(total, N);
        }
        dlc_loader_stats st;
        dlc_loader_get_stats(l, &st);
        cr_assert_eq(st.corrupt_replaced, 2, "once per epoch");
        /* Said: the first replacement at once, naming the record, and each epoch's count. */
        cr_assert_eq(said.first, 1, "%s", said.text);
        cr_assert(strstr(said.text, d.path), "%s", said.text);
        cr_assert_eq(said.per_epoch[0], 1);
        cr_assert_eq(said.per_epoch[1], 1);
        c.log = NULL;
        cr_assert_eq(st.io_mode, ios[io]);
        dlc_loader_close(l);

        /* Replacement is deterministic. */
        cr_assert_eq(run_hash(d.path, &c), run_hash(d.path, &c));

        c.on_corrupt = DLC_CORRUPT_FAIL;
        c.verify = DLC_VERIFY_ALWAYS;
        c.sampler = DLC_SAMPLER_SEQUENTIAL;
        l = open_ok(d.path, &c);
        dlc_batch b;
        for (int i = 0; i < 2; i++)
            cr_assert_eq(dlc_loader_next(l, &b), DLC_OK);
        cr_assert_eq(dlc_loader_next(l, &b), DLC_ECORRUPT, "batch 2 holds record 17");
        cr_assert(strstr(dlc_errmsg(), "record 17"), "%s", dlc_errmsg());
        cr_assert(strstr(dlc_errmsg(), d.path), "%s", dlc_errmsg());
        cr_assert_eq(dlc_loader_next(l, &b), DLC_OK, "the stream goes on after it");
        dlc_loader_close(l);
    }
    /* Verification off: the bad bytes are not looked at (headers still are). */
    dlc_loader_config c = fx_config();
    c.on_corrupt = DLC_CORRUPT_FAIL;
    uint64_t n;
    dlc_loader *l = open_ok(d.path, &c);
    fx_epoch_hash(l, NULL, &n, 0);
    cr_assert_eq(n, N);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

Test(loader, truncated_store_fails_at_open_with_a_message)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    struct stat sb;
    cr_assert_eq(stat(d.path, &sb), 0);
    cr_assert_eq(truncate(d.path, sb.st_size / 2), 0);
    dlc_loader_config c = fx_config();
    dlc_loader *l = (dlc_loader *)1;
    const dlc_status rc = dlc_loader_open(d.path, &c, &l);
    cr_assert_lt(rc, 0);
    cr_assert_null(l);
    cr_assert(strstr(dlc_errmsg(), d.path), "message names the file: %s", dlc_errmsg());
    fx_rmdir(&d);
}

Test(loader, float_outputs_equal_a_reference_computation)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    for (uint32_t dtype = DLC_DTYPE_FLOAT32; dtype <= DLC_DTYPE_FLOAT16; dtype++) {
        for (int flip = 0; flip < 2; flip++) {
            dlc_loader_config c = fx_config();
            c.dtype = dtype;
            c.augment = DLC_AUGMENT_CENTER_CROP;
            c.flip_prob = (float)flip;
            c.mean[1] = 0.5f;
            c.std[2] = 0.3f;
            dlc_loader *l = open_ok(d.path, &c);
            const dlc__box box = dlc__center_box(W, H, c.crop_w, c.crop_h);
            dlc_batch b;
            while (dlc_loader_next(l, &b) == DLC_OK) {
                cr_assert_eq(b.layout, DLC_LAYOUT_NCHW);
                cr_assert(b.shape[1] == 3 && b.shape[2] == c.crop_h && b.shape[3] == c.crop_w);
                cr_assert_eq((uintptr_t)b.data % 64, 0);
                for (uint32_t s = 0; s < b.count; s++)
                    for (uint32_t ch = 0; ch < 3; ch++)
                        for (uint32_t y = 0; y < c.crop_h; y++)
                            for (uint32_t x = 0; x < c.crop_w; x++) {
                                const uint32_t sx = box.left + (flip ? c.crop_w - 1 - x : x);
                                const uint8_t v = tu_pixel(b.indices[s], box.top + y, sx, ch);
                                const float ref = ((float)v / 255.0f - c.mean[ch]) / c.std[ch];
                                const size_t at =
                                    (((size_t)s * 3 + ch) * c.crop_h + y) * c.crop_w + x;
                                if (dtype == DLC_DTYPE_FLOAT32) {
                                    cr_assert_eq(((const float *)b.data)[at], ref);
                                } else {
                                    /* dlc__f32_to_f16 is checked against the CPU's own
                                     * conversion in test_augment.c. */
                                    cr_assert_eq(((const uint16_t *)b.data)[at],
                                                 dlc__f32_to_f16(ref));
                                }
                            }
            }
            dlc_loader_close(l);
        }
    }
    fx_rmdir(&d);
}

Test(loader, random_resized_crop_is_the_box_resized)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    dlc_loader_config c = fx_config();
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.sampler = DLC_SAMPLER_SEQUENTIAL;
    c.flip_prob = 0;
    c.epoch = 2;
    dlc_loader *l = open_ok(d.path, &c);
    uint8_t src[H * W * 3], ref[12 * 10 * 3];
    void *scratch = aligned_alloc(16, 1 << 20);
    dlc_batch b;
    while (dlc_loader_next(l, &b) == DLC_OK) {
        for (uint32_t s = 0; s < b.count; s++) {
            const uint64_t idx = b.indices[s]; /* Sequential, one rank: position = index. */
            for (uint32_t y = 0; y < H; y++)
                for (uint32_t x = 0; x < W; x++)
                    for (uint32_t ch = 0; ch < 3; ch++)
                        src[(y * W + x) * 3 + ch] = tu_pixel(idx, y, x, ch);
            dlc__rng r = {dlc__key4(DLC__KEY_AUGMENT, c.seed, c.epoch, idx), 0};
            const dlc__box box = dlc__rrc_params(W, H, c.rrc_scale, c.rrc_ratio, &r);
            const dlc_image in = {src, W, H, 3, W * 3}, out = {ref, 10, 12, 3, 30};
            cr_assert_eq(dlc_resize(&in, box.left, box.top, box.w, box.h, &out, scratch, 1 << 20),
                         DLC_OK);
            cr_assert_eq(memcmp((const uint8_t *)b.data + s * sizeof ref, ref, sizeof ref), 0,
                         "record %llu", (unsigned long long)idx);
        }
    }
    free(scratch);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

Test(loader, mmap_and_direct_give_identical_bytes)
{
    fx_dir d;
    /* 64 x 64 x 3 = 12 KiB records: on LMDB overflow pages, spanning several 4 KiB blocks. */
    fx_make_store(&d, 40, 64, 64, CLASSES, 0);
    dlc_loader_config c = fx_config();
    c.crop_h = c.crop_w = 48;
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.io = DLC_IO_MMAP;
    const uint64_t hm = run_hash(d.path, &c);
    c.io = DLC_IO_DIRECT;
    c.threads = 3;
    dlc_loader *l = open_ok(d.path, &c);
    const uint64_t hd = fx_epoch_hash(l, NULL, NULL, 0);
    dlc_loader_stats st;
    dlc_loader_get_stats(l, &st);
    cr_assert_eq(st.io_mode, DLC_IO_DIRECT);
    cr_assert_eq(st.bytes_read, 40ull * 64 * 64 * 3);
    cr_assert_eq(st.batches, 5);
    cr_assert_eq(st.samples, 40);
    dlc_loader_close(l);
    cr_assert_eq(hm, hd);
    /* Small records inside leaf pages go the same way. */
    fx_dir d2;
    fx_make_store(&d2, N, H, W, CLASSES, 0);
    c = fx_config();
    const uint64_t a = run_hash(d2.path, &c);
    c.io = DLC_IO_DIRECT;
    cr_assert_eq(run_hash(d2.path, &c), a);
    fx_rmdir(&d2);
    fx_rmdir(&d);
}

Test(loader, weighted_sampler_through_the_loader)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    dlc_loader_config c = fx_config();
    const double weights[CLASSES] = {1, 0, 3, 0, 4};
    c.sampler = DLC_SAMPLER_WEIGHTED;
    c.class_weights = weights;
    c.num_class_weights = CLASSES;
    c.num_samples = 4000;
    c.batch_size = 100;
    dlc_loader *l = open_ok(d.path, &c);
    cr_assert_eq(dlc_loader_batches_per_epoch(l), 40);
    uint64_t counts[CLASSES] = {0};
    dlc_batch b;
    while (dlc_loader_next(l, &b) == DLC_OK)
        for (uint32_t i = 0; i < b.count; i++)
            counts[b.labels[i]]++;
    dlc_loader_close(l);
    /* Equal class sizes: proportions 1/8, 0, 3/8, 0, 4/8; sigma < 0.008 over 4000 draws. */
    cr_assert_eq(counts[1] + counts[3], 0);
    cr_assert_float_eq(counts[0] / 4000.0, 0.125, 0.04);
    cr_assert_float_eq(counts[2] / 4000.0, 0.375, 0.04);
    cr_assert_float_eq(counts[4] / 4000.0, 0.5, 0.04);
    c.num_class_weights = 2;
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "class_weights"));
    fx_rmdir(&d);
}

Test(loader, jpeg_store_decodes_deterministically)
{
    fx_dir d;
    fx_make_store(&d, 24, 40, 36, CLASSES, 1);
    dlc_loader_config c = fx_config();
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.crop_h = c.crop_w = 8; /* Small output: DCT scaling kicks in for large boxes. */
    c.threads = 1;
    const uint64_t a = run_hash(d.path, &c);
    c.threads = 4;
    c.prefetch = 3;
    cr_assert_eq(run_hash(d.path, &c), a);
    c.augment = DLC_AUGMENT_CENTER_CROP;
    c.crop_h = 32, c.crop_w = 30;
    dlc_loader *l = open_ok(d.path, &c);
    uint64_t n;
    fx_epoch_hash(l, NULL, &n, 0);
    cr_assert_eq(n, 24);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

static int cuda_notices;
static void count_log(void *user, dlc_log_level level, const char *msg)
{
    (void)user, (void)level;
    if (strstr(msg, "the GPU path is off") && strstr(msg, "/nonexistent/libdlcache_cuda.so"))
        __atomic_add_fetch(&cuda_notices, 1, __ATOMIC_RELAXED);
}

Test(loader, config_errors_are_named_and_device_falls_back_to_host)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    dlc_loader_config c = fx_config();
    dlc_loader *l = NULL;
    c.rank = 3;
    c.world_size = 3;
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "rank"), "%s", dlc_errmsg());
    c = fx_config();
    c.crop_h = 100;
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "crop"), "%s", dlc_errmsg());
    c = fx_config();
    c.prefetch = 0;
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_EINVAL);
    /* No plugin (each Criterion test is a process of its own, which loads it at most once). */
    setenv("DLCACHE_CUDA_PLUGIN", "/nonexistent/libdlcache_cuda.so", 1);
    c = fx_config();
    c.device = 0;
    c.log = count_log;
    l = open_ok(d.path, &c);
    const char *why = NULL;
    cr_assert_eq(dlc_loader_device(l, &why), -1);
    cr_assert(why && strstr(why, "/nonexistent/libdlcache_cuda.so"), "%s", why ? why : "NULL");
    dlc_device_batch db;
    cr_assert_eq(dlc_loader_next_device(l, &db), DLC_ESTATE);
    cr_assert(strstr(dlc_errmsg(), "device path is off"), "%s", dlc_errmsg());
    char pwhy[512];
    cr_assert_eq(dlc_cuda_probe(0, pwhy, sizeof pwhy), DLC_ENOSYS);
    cr_assert(strstr(pwhy, "/nonexistent/libdlcache_cuda.so"), "%s", pwhy);
    dlc_batch b;
    cr_assert_eq(dlc_loader_next(l, &b), DLC_OK);
    cr_assert_eq(dlc_loader_release(l, &b), DLC_OK);
    cr_assert_eq(dlc_loader_release(l, &b), DLC_EINVAL, "released twice");
    dlc_loader_close(l);
    cr_assert_eq(cuda_notices, 1);
    /* crop 0 = the store's size, uint8 NHWC. */
    c = fx_config();
    c.crop_h = c.crop_w = 0;
    c.augment = DLC_AUGMENT_CENTER_CROP;
    c.flip_prob = 0;
    c.sampler = DLC_SAMPLER_SEQUENTIAL;
    l = open_ok(d.path, &c);
    cr_assert_eq(dlc_loader_next(l, &b), DLC_OK);
    cr_assert(b.shape[1] == H && b.shape[2] == W && b.shape[3] == 3 && b.layout == DLC_LAYOUT_NHWC);
    for (uint32_t y = 0; y < H; y++)
        for (uint32_t x = 0; x < W; x++)
            cr_assert_eq(((uint8_t *)b.data)[((size_t)H * W * 3) + (y * W + x) * 3 + 1],
                         tu_pixel(1, y, x, 1));
    dlc_loader_close(l);
    fx_rmdir(&d);
}

/* In a debug build a configuration error names the FAIL_IF that raised it (the line that tests
 * config.batch_size in loader/loader.c) and the CHECK it left through, beside a message that
 * stays as written. */
Test(loader, config_error_records_the_fail_if_that_raised_it)
{
    dlc_loader_config c = fx_config();
    c.batch_size = 0;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open("/nonexistent/store.dlc", &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "config.batch_size = 0 must be in 1..16777216"), "%s",
              dlc_errmsg());
    cr_assert_null(strchr(dlc_errmsg(), '['), "no site in the message: %s", dlc_errmsg());
#ifdef NDEBUG
    cr_assert_str_eq(dlc__errsite(), "", "a release build records no site");
#else
    const char *site = dlc__errsite();
    int line = 0, check = 0, used = 0;
    cr_assert_eq(sscanf(site, "loader/loader.c:%d <- loader/loader.c:%d%n", &line, &check, &used),
                 2, "site: %s", site);
    cr_assert_eq(site[used], '\0', "site: %s", site);
    /* The lines named are the FAIL_IF on config.batch_size and the CHECK of check_config(). */
    FILE *f = fopen(DLC_TEST_SOURCE_DIR "/loader/loader.c", "r");
    cr_assert(f);
    char text[256], raised[256] = "", checked[256] = "";
    for (int n = 1; fgets(text, sizeof text, f); n++) {
        if (n == line)
            snprintf(raised, sizeof raised, "%s", text);
        if (n == check)
            snprintf(checked, sizeof checked, "%s", text);
    }
    fclose(f);
    cr_assert(strstr(raised, "FAIL_IF(c->batch_size == 0"), "line %d: %s", line, raised);
    cr_assert(strstr(checked, "CHECK(check_config("), "line %d: %s", check, checked);
#endif
}

/* Batches the caller holds stay lent, and unchanged, across set_epoch() and a restore, until it
 * gives them back; the new plan's batches are right meanwhile (max_lent 2, and the default 1). */
Test(loader, held_batches_survive_a_new_plan)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    for (uint32_t max_lent = 1; max_lent <= 2; max_lent++) {
        for (uint32_t prefetch = max_lent == 1 ? 1 : 3; prefetch <= 4; prefetch++) {
            dlc_loader_config c = fx_config();
            c.max_lent = max_lent;
            c.prefetch = prefetch;
            const uint64_t want = run_hash(d.path, &c); /* Epoch 0, untouched. */
            dlc_loader *l = open_ok(d.path, &c);
            dlc_batch a, b;
            cr_assert_eq(dlc_loader_next(l, &a), DLC_OK);
            const uint64_t ha = XXH3_64bits(a.data, a.bytes);
            if (max_lent == 2) {
                cr_assert_eq(dlc_loader_next(l, &b), DLC_OK);
                cr_assert_eq(XXH3_64bits(a.data, a.bytes), ha, "two lent at once");
            }
            const uint64_t hb = max_lent == 2 ? XXH3_64bits(b.data, b.bytes) : 0;
            cr_assert_eq(dlc_loader_set_epoch(l, 0), DLC_OK);
            /* Held over the reset: still lent, still the same bytes. */
            cr_assert_eq(XXH3_64bits(a.data, a.bytes), ha);
            if (max_lent == 2) {
                cr_assert_eq(XXH3_64bits(b.data, b.bytes), hb);
                cr_assert_eq(dlc_loader_release(l, &a), DLC_OK);
                cr_assert_eq(dlc_loader_release(l, &b), DLC_OK);
            }
            cr_assert_eq(fx_epoch_hash(l, NULL, NULL, 0), want, "max_lent %u prefetch %u", max_lent,
                         prefetch);
            dlc_loader_close(l);
        }
    }
    dlc_loader_config c = fx_config();
    c.max_lent = 2;
    c.prefetch = 2;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_EINVAL, "max_lent must be below prefetch");
    cr_assert(strstr(dlc_errmsg(), "max_lent"), "%s", dlc_errmsg());
    fx_rmdir(&d);
}

/* dlc_loader_keep(): the kept batch's bytes stay as they were while the slot, refilled in new
 * memory, serves the rest of the epoch unchanged; they outlive the loader; a batch not lent is
 * refused. */
Test(loader, kept_batch_outlives_its_slot_and_the_loader)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    for (uint32_t prefetch = 1; prefetch <= 3; prefetch += 2) {
        dlc_loader_config c = fx_config();
        c.prefetch = prefetch;
        c.dtype = DLC_DTYPE_FLOAT32;
        const uint64_t want = run_hash(d.path, &c);
        dlc_loader *l = open_ok(d.path, &c);
        dlc_batch a;
        cr_assert_eq(dlc_loader_next(l, &a), DLC_OK);
        const void *const data = a.data;
        const size_t bytes = a.bytes;
        const uint64_t ha = XXH3_64bits(data, bytes);
        const int64_t label0 = a.labels[0];
        const int64_t *const labels = a.labels;
        void *mem = (void *)1;
        cr_assert_eq(dlc_loader_keep(l, NULL, &mem), DLC_EINVAL);
        cr_assert_null(mem);
        cr_assert_eq(dlc_loader_keep(l, &a, &mem), DLC_OK, "%s", dlc_errmsg());
        cr_assert(mem && (const uint8_t *)data >= (const uint8_t *)mem, "the batch's memory");
        void *again = (void *)1;
        cr_assert_eq(dlc_loader_keep(l, &a, &again), DLC_EINVAL, "kept twice");
        cr_assert_null(again);
        cr_assert_eq(dlc_loader_release(l, &a), DLC_EINVAL, "no longer lent");
        /* The rest of the epoch, in the slot's new memory, next to the kept bytes. */
        dlc_batch b;
        while (dlc_loader_next(l, &b) == DLC_OK)
            cr_assert(b.data != data, "a kept batch's memory is never refilled");
        cr_assert_eq(XXH3_64bits(data, bytes), ha);
        cr_assert_eq(dlc_loader_set_epoch(l, 0), DLC_OK);
        cr_assert_eq(fx_epoch_hash(l, NULL, NULL, 0), want, "prefetch %u", prefetch);
        dlc_loader_close(l);
        cr_assert_eq(XXH3_64bits(data, bytes), ha, "kept past dlc_loader_close()");
        cr_assert_eq(labels[0], label0);
        dlc_loader_kept_free(mem);
        dlc_loader_kept_free(NULL);
    }
    fx_rmdir(&d);
}

/* A batch put back is lent again by the next next(), the same bytes, and a state saved in
 * between does not count it; only the newest lend can be put back. */
Test(loader, a_batch_put_back_comes_again_and_is_not_consumed)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    for (uint32_t max_lent = 1; max_lent <= 2; max_lent++) {
        dlc_loader_config c = fx_config();
        c.prefetch = 3;
        c.max_lent = max_lent;
        const uint64_t want = run_hash(d.path, &c);
        dlc_loader *l = open_ok(d.path, &c);
        dlc_batch a, b;
        cr_assert_eq(dlc_loader_next(l, &a), DLC_OK);
        uint8_t before[DLC_LOADER_STATE_SIZE], after[DLC_LOADER_STATE_SIZE];
        cr_assert_eq(dlc_loader_state_save(l, before), DLC_OK);
        cr_assert_eq(dlc_loader_next(l, &b), DLC_OK);
        const uint64_t hb = XXH3_64bits(b.data, b.bytes), index = b.indices[0];
        if (max_lent == 2)
            cr_assert_eq(dlc_loader_put_back(l, &a), DLC_EINVAL, "not the newest lend");
        cr_assert_eq(dlc_loader_put_back(l, NULL), DLC_EINVAL);
        cr_assert_eq(dlc_loader_put_back(l, &b), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_loader_put_back(l, &b), DLC_EINVAL, "put back twice");
        cr_assert_eq(dlc_loader_state_save(l, after), DLC_OK);
        cr_assert_eq(memcmp(after, before, sizeof after), 0,
                     "the state counts the batch before, not the one put back");
        dlc_loader_close(l);
        l = open_ok(d.path, &c);
        cr_assert_eq(dlc_loader_next(l, &a), DLC_OK);
        cr_assert_eq(dlc_loader_next(l, &b), DLC_OK);
        cr_assert_eq(dlc_loader_put_back(l, &b), DLC_OK);
        dlc_batch again;
        cr_assert_eq(dlc_loader_next(l, &again), DLC_OK);
        cr_assert_eq(again.indices[0], index);
        cr_assert_eq(XXH3_64bits(again.data, again.bytes), hb, "the same bytes");
        cr_assert_eq(dlc_loader_set_epoch(l, 0), DLC_OK);
        cr_assert_eq(fx_epoch_hash(l, NULL, NULL, 0), want, "max_lent %u", max_lent);
        dlc_loader_close(l);
    }
    fx_rmdir(&d);
}

Test(loader, next_wait_says_not_yet_then_gives_the_same_bytes)
{
    fx_dir d;
    fx_make_store(&d, N, H, W, CLASSES, 0);
    fx_corrupt_record(d.path, 17);
    dlc_loader_config c = fx_config();
    c.sampler = DLC_SAMPLER_SEQUENTIAL; /* Batch 2 holds record 17. */
    c.verify = DLC_VERIFY_ALWAYS;
    c.on_corrupt = DLC_CORRUPT_REPLACE;
    c.log = fx_hold_at_replace;
    c.log_user = NULL; /* The digest's run: nothing held. */
    const uint64_t want = run_hash(d.path, &c);

    fx_gate g = {.open = 0};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    c.log_user = &g;
    dlc_loader *l = open_ok(d.path, &c);
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    dlc_batch b;
    dlc_status rc;
    uint32_t got = 0, again = 0, again_at_2 = 0;
    while ((rc = dlc_loader_next_wait(l, &b, 50)) != DLC_END) {
        if (rc == DLC_AGAIN) {
            /* Not yet: nothing lent, nothing moved. */
            cr_assert_eq(b.count, 0);
            cr_assert_null(b.data);
            again++;
            if (got == 2 && ++again_at_2 == 8) {
                /* Eight slices said batch 2 is not ready while its worker is held: now let
                 * it go, and the next slices give it. */
                pthread_mutex_lock(&g.mu);
                cr_assert_eq(g.held, 1, "the replacing worker is held");
                g.open = 1;
                pthread_cond_broadcast(&g.cv);
                pthread_mutex_unlock(&g.mu);
            }
            continue;
        }
        cr_assert_eq(rc, DLC_OK, "%d %s", rc, dlc_errmsg());
        cr_assert_eq(b.batch_index, got, "the batches in order, none skipped by a slice");
        XXH3_64bits_update(st, b.data, b.bytes);
        XXH3_64bits_update(st, b.labels, b.count * sizeof *b.labels);
        XXH3_64bits_update(st, b.indices, b.count * sizeof *b.indices);
        got++;
    }
    cr_assert_eq(got, (N + 7) / 8);
    cr_assert_geq(again_at_2, 8, "batch 2 was never reported as not ready (%u)", again);
    cr_assert_eq(XXH3_64bits_digest(st), want, "the sliced wait gives dlc_loader_next()'s bytes");
    XXH3_freeState(st);

    /* The slices of batch 2's wait are one wait in the report: the consumer waited through all
     * of them (eight slices that each ran out their 50 ms), and was never away for them. */
    dlc_loader_report r = {.struct_size = sizeof r};
    cr_assert_eq(dlc_loader_get_report(l, 0, &r), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(r.batches, got, "a slice that returned nothing is no batch");
    cr_assert_geq(r.wait_seconds, 0.4, "wait %.3f s, away %.3f s", r.wait_seconds, r.away_seconds);
    cr_assert_lt(r.away_seconds, r.wait_seconds, "wait %.3f s, away %.3f s", r.wait_seconds,
                 r.away_seconds);
    dlc_loader_stats s;
    dlc_loader_get_stats(l, &s);
    cr_assert_eq(s.batches, got);
    cr_assert_geq(s.wait_seconds, 0.4, "%.3f", s.wait_seconds);

    /* 0 ms takes only a batch that is ready; the plain call and the sliced one agree on END. */
    cr_assert_eq(dlc_loader_next_wait(l, &b, 0), DLC_END);
    cr_assert_eq(dlc_loader_next(l, &b), DLC_END);
    dlc_loader_close(l);
    pthread_cond_destroy(&g.cv);
    pthread_mutex_destroy(&g.mu);

    cr_assert_eq(dlc_loader_next_wait(NULL, &b, 10), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "dlc_loader_next_wait"), "%s", dlc_errmsg());
    cr_assert_eq(strcmp(dlc_strerror(DLC_AGAIN), "no batch ready yet"), 0);
    fx_rmdir(&d);
}
