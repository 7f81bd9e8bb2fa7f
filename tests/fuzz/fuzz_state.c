/* Fuzz the loader's state restore (dlc_loader_state_restore() in
 * loader/loader.c): a checkpoint is a file the user hands back to us, so its
 * 64 bytes are untrusted. One small real store and one loader are made once;
 * each input is restored twice: as given (almost always refused by the
 * checksum), and with its checksum recomputed, so that the fuzzer reaches
 * the field checks and the pipeline restart behind them (a position beyond
 * the epoch, a huge epoch number, another sampler). After a restore that is
 * accepted, batches are drawn until the epoch ends or a few have come: a
 * state that was accepted must give a stream that works. Each input starts
 * from the same loader state, so a crash replays from its input alone.
 *
 * Each input also goes to a second loader over a store set of 5 shards in
 * shard windows (DLC_SAMPLER_SHARD_WINDOWS, the order a streamed set is read
 * in), whose state carries its streams and window in the sampler word and
 * whose epoch length changes with the epoch.
 *
 * And to a third, a mixture of the store and a second one of 23 records at weights 2 and 1
 * (dlc_loader_mix_state_restore(): a state of 80 + 40 per source + 8 bytes), whose restore
 * rebuilds the saved schedule from its quotas and matches sources by path and digest.
 *
 * Seeds: states saved by this harness at a few positions when it runs with
 * DLC_FUZZ_SEED_DIR set (tests/fuzz/make_seeds.sh does that). */
#include "fuzz_util.h"
#include "set_fixture.h"

#include <dlcache/loader.h>

#include <xxhash.h>

#define RECORDS 37u
#define SIDE 8u

#define SET_RECORDS 41u
#define MIX_RECORDS (RECORDS + 23u)

static dlc_loader *loader, *windows, *mixture, *single;
static uint8_t initial[DLC_LOADER_STATE_SIZE], initial_w[DLC_LOADER_STATE_SIZE];
static uint8_t initial_m[DLC_LOADER_MIX_STATE_MAX];
static size_t initial_m_size;
/* A one-source mixture, the plain loader's order until another mixture's state switches it. */
static uint8_t initial_1[DLC_LOADER_MIX_STATE_MAX];
static size_t initial_1_size;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_state: %s: %s\n", what, dlc_errmsg());
    abort();
}

static void write_store(const char *path)
{
    if (tu_make_store(path, RECORDS, SIDE, SIDE, 3, 0) != DLC_OK)
        die("tu_make_store");
}

static void save_seed(const char *dir, const char *name)
{
    uint8_t st[DLC_LOADER_STATE_SIZE];
    if (dlc_loader_state_save(loader, st) != DLC_OK)
        die("state_save");
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    fz_write_file(p, st, sizeof st);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char path[512];
    fz_path(path, sizeof path, "state.dlc");
    write_store(path);
    dlc_loader_config c;
    dlc_loader_config_init(&c);
    c.batch_size = 5;
    c.threads = 1;
    c.prefetch = 2;
    c.crop_h = c.crop_w = 4;
    c.seed = 7;
    if (dlc_loader_open(path, &c, &loader) != DLC_OK)
        die("loader_open");
    if (dlc_loader_state_save(loader, initial) != DLC_OK)
        die("state_save");
    char set[512];
    fz_path(set, sizeof set, "state-set");
    if (sf_make_set(set, SET_RECORDS, 5, 0x51ed, NULL) != DLC_OK)
        die("sf_make_set");
    c.sampler = DLC_SAMPLER_SHARD_WINDOWS;
    c.window_shards = 2;
    c.streams = 2;
    c.crop_h = c.crop_w = 6;
    if (dlc_loader_open(set, &c, &windows) != DLC_OK)
        die("loader_open of the set");
    if (dlc_loader_state_save(windows, initial_w) != DLC_OK)
        die("state_save of the set");
    char second[512];
    fz_path(second, sizeof second, "state-2.dlc");
    if (tu_make_store(second, MIX_RECORDS - RECORDS, SIDE, SIDE, 3, 0) != DLC_OK)
        die("tu_make_store");
    dlc_mix_source src[2];
    dlc_mix_source_init(&src[0]);
    dlc_mix_source_init(&src[1]);
    src[0].path = path, src[0].weight = 2;
    src[1].path = second;
    c.sampler = DLC_SAMPLER_SHUFFLE;
    c.crop_h = c.crop_w = 4;
    if (dlc_loader_open_mix(src, 2, NULL, &c, &mixture) != DLC_OK)
        die("loader_open_mix");
    if (dlc_loader_mix_state_save(mixture, initial_m, sizeof initial_m, &initial_m_size) != DLC_OK)
        die("mix_state_save");
    if (dlc_loader_open_mix(src, 1, NULL, &c, &single) != DLC_OK)
        die("loader_open_mix of one source");
    if (dlc_loader_mix_state_save(single, initial_1, sizeof initial_1, &initial_1_size) != DLC_OK)
        die("mix_state_save of one source");
    const char *seeds = getenv("DLC_FUZZ_SEED_DIR");
    if (seeds) {
        /* The start, mid-epoch, the last batch, the end, and a later epoch. */
        dlc_batch b;
        save_seed(seeds, "start");
        for (int i = 0; i < 3; i++)
            if (dlc_loader_next(loader, &b) != DLC_OK)
                die("next");
        save_seed(seeds, "mid");
        while (dlc_loader_next(loader, &b) == DLC_OK)
            ;
        save_seed(seeds, "end");
        if (dlc_loader_set_epoch(loader, 5) != DLC_OK)
            die("set_epoch");
        save_seed(seeds, "epoch5");
        if (dlc_loader_state_restore(loader, initial, sizeof initial) != DLC_OK)
            die("restore initial");
        char p[1024];
        snprintf(p, sizeof p, "%s/windows-start", seeds);
        fz_write_file(p, initial_w, sizeof initial_w);
        snprintf(p, sizeof p, "%s/mix-start", seeds);
        fz_write_file(p, initial_m, initial_m_size);
        for (int i = 0; i < 4; i++)
            if (dlc_loader_next(mixture, &b) != DLC_OK)
                die("next of the mixture");
        uint8_t st[DLC_LOADER_MIX_STATE_MAX];
        size_t n = 0;
        if (dlc_loader_mix_state_save(mixture, st, sizeof st, &n) != DLC_OK)
            die("mix_state_save");
        snprintf(p, sizeof p, "%s/mix-mid", seeds);
        fz_write_file(p, st, n);
        snprintf(p, sizeof p, "%s/mix-one-start", seeds);
        fz_write_file(p, initial_1, initial_1_size);
        if (dlc_loader_mix_state_restore(mixture, initial_m, initial_m_size) != DLC_OK)
            die("restore the mixture's initial state");
    }
    return 0;
}

/* Batches of @p l until the epoch ends or a few have come, each checked: a count of 1..5, records
 * below @p records and, with @p labels, the label tu_make_store gave each (index % 3). */
static void draw(dlc_loader *l, uint64_t records, int labels)
{
    dlc_batch b;
    for (int i = 0; i < 12; i++) {
        const dlc_status rc = dlc_loader_next(l, &b);
        if (rc == DLC_END)
            break;
        if (rc != DLC_OK)
            die("next after an accepted restore");
        if (b.count == 0 || b.count > 5 || b.shape[0] != b.count)
            abort();
        for (uint32_t k = 0; k < b.count; k++)
            if (b.indices[k] >= records || (labels && b.labels[k] != (int64_t)(b.indices[k] % 3)))
                abort();
    }
}

/* Restore @p data into @p l as given, and with its checksum recomputed; draw after each restore
 * that is accepted; then put @p l back at @p initial. */
static void restore(dlc_loader *l, const uint8_t *initial_state, uint64_t records, int labels,
                    const uint8_t *data, size_t size)
{
    dlc_status rc = dlc_loader_state_restore(l, data, size);
    if (rc < 0 && dlc_errmsg()[0] == '\0')
        abort();
    if (rc == DLC_OK)
        draw(l, records, labels);
    if (size == DLC_LOADER_STATE_SIZE) {
        uint8_t fixed[DLC_LOADER_STATE_SIZE];
        memcpy(fixed, data, size);
        const uint64_t h = XXH3_64bits(fixed, 56);
        for (int i = 0; i < 8; i++)
            fixed[56 + i] = (uint8_t)(h >> (8 * i));
        rc = dlc_loader_state_restore(l, fixed, sizeof fixed);
        if (rc < 0 && dlc_errmsg()[0] == '\0')
            abort();
        if (rc == DLC_OK)
            draw(l, records, labels);
    }
    if (dlc_loader_state_restore(l, initial_state, DLC_LOADER_STATE_SIZE) != DLC_OK)
        die("restore initial");
}

/* The same for a mixture @p mix of @p records: its state's checksum is its last 8 bytes,
 * whatever its size. */
static void restore_mix(dlc_loader *mix, uint64_t records, const uint8_t *init, size_t init_size,
                        const uint8_t *data, size_t size)
{
    dlc_status rc = dlc_loader_mix_state_restore(mix, data, size);
    if (rc < 0 && dlc_errmsg()[0] == '\0')
        abort();
    if (rc == DLC_OK)
        draw(mix, records, 0);
    if (size >= 8 && size <= DLC_LOADER_MIX_STATE_MAX) {
        uint8_t fixed[DLC_LOADER_MIX_STATE_MAX];
        memcpy(fixed, data, size);
        const uint64_t h = XXH3_64bits(fixed, size - 8);
        for (int i = 0; i < 8; i++)
            fixed[size - 8 + i] = (uint8_t)(h >> (8 * i));
        rc = dlc_loader_mix_state_restore(mix, fixed, size);
        if (rc < 0 && dlc_errmsg()[0] == '\0')
            abort();
        if (rc == DLC_OK)
            draw(mix, records, 0);
    }
    if (dlc_loader_mix_state_restore(mix, init, init_size) != DLC_OK)
        die("restore the mixture's initial state");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    restore(loader, initial, RECORDS, 1, data, size);
    restore(windows, initial_w, SET_RECORDS, 0, data, size);
    restore_mix(mixture, MIX_RECORDS, initial_m, initial_m_size, data, size);
    restore_mix(single, RECORDS, initial_1, initial_1_size, data, size);
    return 0;
}
