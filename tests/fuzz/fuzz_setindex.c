/* Fuzz the store set index decoder (cache/store/store_set_index.c): the input is an index.dlcset
 * file. It is decoded as it is, again with its trailing checksum made right, and again with the
 * schema's hashes made right too, so that mutations reach the checks behind the checksums
 * (sizes, names, firsts, the schema's rules, labels) instead of dying at them. The promise checked:
 * no crash, sanitizer report or leak; every refusal has a message; whatever is accepted encodes
 * back to exactly the same bytes (the index is canonical: one set, one byte string), and its first
 * 48 bytes decode or are refused as a "set_part" record.
 *
 * Seeds: the indexes of real sets (one shard, three, one with an empty shard) written with the
 * writer API and dlc__set_join() when the harness runs with DLC_FUZZ_SEED_DIR set
 * (tests/fuzz/make_seeds.sh). */
#include "fuzz_util.h"

#include "set_fixture.h"
#include "store_set.h"

#include <xxhash.h>

static void check_msg(dlc_status rc)
{
    if (rc < 0 && dlc_errmsg()[0] == '\0')
        abort();
}

static void decode_one(const uint8_t *p, size_t n)
{
    dlc__set_index x;
    const dlc_status rc = dlc__set_index_decode(p, n, "fuzz/index.dlcset", &x);
    check_msg(rc);
    if (rc == DLC_OK) {
        uint8_t *again = NULL;
        size_t len = 0;
        if (dlc__set_index_encode(&x, &again, &len) != DLC_OK || len != n ||
            memcmp(again, p, n) != 0)
            abort(); /* Accepted bytes that do not encode back to themselves. */
        free(again);
        if (x.count != (x.num_shards
                            ? x.shards[x.num_shards - 1].first + x.shards[x.num_shards - 1].count
                            : 0))
            abort();
    }
    dlc__set_index_free(&x);
    dlc__set_part part;
    check_msg(
        dlc__set_part_decode(p, n < DLC__SET_PART_SIZE ? n : DLC__SET_PART_SIZE, "fuzz", &part));
}

/* Make the hashes of the schema entries and of the schema block right too, where the header's
 * counts fit the size: mutated field entries then reach the schema's rules. */
static void fix_schema(uint8_t *p, size_t n)
{
    if (n < DLC__SET_HEADER + 8)
        return;
    const uint64_t shards = dlc__ld32(p + 12), nf = dlc__ld32(p + 40), lb = dlc__ld32(p + 48);
    if (shards > DLC__SET_MAX_SHARDS || nf > DLC_MAX_FIELDS ||
        DLC__SET_HEADER + 96 * shards + 128 * nf + lb + 8 != n)
        return;
    uint8_t *schema = p + DLC__SET_HEADER + 96 * shards;
    for (uint64_t i = 0; i < nf; i++)
        dlc__st64(schema + 128 * i + 120, XXH3_64bits(schema + 128 * i, 120));
    dlc__st64(p + 32, XXH3_64bits(schema, 128 * nf));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    decode_one(data, size);
    if (size < 8)
        return 0;
    uint8_t *fixed = malloc(size);
    if (!fixed)
        return 0;
    memcpy(fixed, data, size);
    dlc__st64(fixed + size - 8, XXH3_64bits(fixed, size - 8));
    decode_one(fixed, size);
    fix_schema(fixed, size);
    dlc__st64(fixed + size - 8, XXH3_64bits(fixed, size - 8));
    decode_one(fixed, size);
    free(fixed);
    return 0;
}

static int skip_middle(uint64_t i, uint64_t n)
{
    return i >= n / 3 && i < 2 * n / 3;
}

/* Join a set of @p parts parts of @p n items and copy its index to SEEDS/NAME. */
static void seed(const char *seeds, const char *name, uint64_t n, uint32_t parts, sf_skip_fn skip)
{
    char set[1024], from[1100], to[1100];
    snprintf(set, sizeof set, "%s/%s", fz_scratch(), name);
    if (sf_make_set(set, n, parts, 0x5eed, skip) != DLC_OK) {
        fprintf(stderr, "fuzz_setindex: %s\n", dlc_errmsg());
        abort();
    }
    snprintf(from, sizeof from, "%s/%s", set, DLC__SET_INDEX_NAME);
    snprintf(to, sizeof to, "%s/%s", seeds, name);
    uint8_t *p = NULL;
    size_t len = 0;
    if (dlc__set_index_read(from, &p, &len) != DLC_OK)
        abort();
    fz_write_file(to, p, len);
    free(p);
    tu_rmtree(set);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("DLC_FUZZ_SEED_DIR");
    if (!dir)
        return 0;
    seed(dir, "one", 6, 1, NULL);
    seed(dir, "three", 12, 3, sf_skip_some);
    seed(dir, "empty_middle", 9, 3, skip_middle);
    return 0;
}
