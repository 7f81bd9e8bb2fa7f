/* Fuzz the store reader: the input is a whole store file. It is opened,
 * its metadata, schema, label names and counts looked at, records read
 * (every field through the offset table, and the version 1 view) and
 * hashed, and the whole store verified, as cacheinfo --verify and the loader
 * would. Any outcome but a crash, a sanitizer report or a leak is fine; an
 * error must come with a message.
 *
 * Seeds: small real stores written by this harness when it runs with
 * DLC_FUZZ_SEED_DIR set (tests/fuzz/make_seeds.sh): format 2 stores of a
 * field of every kind (tests/lib/store_kinds.h), of the version 1 API's two
 * fields, and format 1 stores (tests/lib/store_v1.h). */
#include "fuzz_util.h"

#include "store_kinds.h"
#include "store_v1.h"
#include "store_compat.h"

#include <dlcache/store.h>

/* Enough records to reach overflow pages and the end of the samples tree,
 * few enough that a claimed count of 2^40 does not turn one input into a
 * long scan. */
#define MAX_READS 512u

/* Write a store of @p n records of h x w x 3 (0: shapes that alternate
 * between LMDB leaf values and overflow pages) to DIR/NAME. */
static void seed_store(const char *dir, const char *name, uint32_t n, uint32_t h, uint32_t w)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    dlc__store_writer *wr = NULL;
    if (dlc__store_writer_open(path, 1, 0, &wr) != DLC_OK)
        abort();
    static uint8_t px[48 * 48 * 3];
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t rh = h ? h : (i % 2 ? 40 : 2), rw = w ? w : (i % 2 ? 41 : 3);
        const size_t bytes = (size_t)rh * rw * 3;
        for (size_t j = 0; j < bytes; j++)
            px[j] = (uint8_t)(i * 31 + j * 7);
        if (dlc__store_writer_put(wr, i % 2, rh, rw, 3, DLC_ENCODING_RAW, px, bytes) != DLC_OK)
            abort();
    }
    static const char *const names[] = {"cat", "dog"};
    const dlc__store_meta meta = {
        .label_names = names, .num_labels = 2, .skipped = 1, .build_json = "{\"tool\":\"fuzz\"}"};
    if (dlc__store_writer_finish(wr, &meta) != DLC_OK)
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("DLC_FUZZ_SEED_DIR");
    if (dir) {
        seed_store(dir, "inline3", 3, 2, 2);
        seed_store(dir, "mixed4", 4, 0, 0);
        seed_store(dir, "empty", 0, 1, 1);
        char path[1024];
        snprintf(path, sizeof path, "%s/kinds2", dir);
        if (sk_write_store(path, 2, 1) != DLC_OK)
            abort();
        snprintf(path, sizeof path, "%s/kinds1", dir);
        if (sk_write_store(path, 1, 1) != DLC_OK)
            abort();
        const tv1_options v1 = {.count = 4, .channels = 3, .num_labels = 2};
        snprintf(path, sizeof path, "%s/version1", dir);
        if (tv1_write_store(path, &v1) != DLC_OK)
            abort();
    }
    return 0;
}

static void check_msg(dlc_status rc)
{
    /* Every failure explains itself (docs/ARCHITECTURE.md: errors name file, record, reason). */
    if (rc < 0 && dlc_errmsg()[0] == '\0')
        abort();
}

static int on_verify(void *user, const dlc_verify_progress *p)
{
    (void)user;
    if (p->bad_status != 0 && (!p->bad_msg || !p->bad_msg[0]))
        abort();
    return p->done > 4 * MAX_READS; /* Stop long scans: verify is the same code per record. */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[512];
    if (!path[0])
        fz_path(path, sizeof path, "store.dlc");
    fz_write_file(path, data, size);

    dlc_store *s = NULL;
    dlc_status rc = dlc_store_open(path, size & 1 ? DLC_STORE_SEQUENTIAL : DLC_STORE_RANDOM, &s);
    check_msg(rc);
    if (rc != DLC_OK)
        return 0;
    const dlc_store_info *info = dlc_store_get_info(s);
    const uint64_t *counts = dlc_store_label_counts(s);
    uint64_t sum = 0;
    for (uint32_t i = 0; i < info->num_labels; i++) {
        const char *name = dlc_store_label_name(s, i);
        if (!name)
            abort();
        sum += strlen(name) + (counts ? counts[i] : 0);
    }
    if (dlc_store_label_name(s, info->num_labels) != NULL)
        abort();
    const void *mv = NULL;
    size_t ms = 0;
    if (dlc_store_meta(s, "build", &mv, &ms) == DLC_OK && ms > 0)
        sum += ((const uint8_t *)mv)[ms - 1];
    (void)dlc_store_meta(s, "no-such-key", &mv, &ms);

    const dlc_field *fields = dlc_store_fields(s);
    for (uint32_t f = 0; f < info->num_fields; f++)
        if (dlc_store_find_field(s, fields[f].name) != (int)f)
            abort();

    dlc_store_reader *r = NULL;
    rc = dlc_store_reader_open(s, &r);
    check_msg(rc);
    if (rc == DLC_OK) {
        dlc_value v[DLC_MAX_FIELDS];
        const uint64_t nv = info->count < MAX_READS ? info->count : MAX_READS;
        for (uint64_t i = 0; i <= nv; i++) {
            rc = dlc_store_read_values(r, i, v);
            check_msg(rc);
            for (uint32_t f = 0; rc == DLC_OK && f < info->num_fields; f++) {
                /* Every view lies inside the map; its checksum is checked or refused. */
                if (v[f].size)
                    sum += v[f].data[0] + v[f].data[v[f].size - 1];
                check_msg(dlc_value_verify(s, i, f, &v[f]));
            }
        }
        const uint64_t n = info->count < MAX_READS ? info->count : MAX_READS;
        for (uint64_t i = 0; i <= n; i++) {
            /* i == n past a small store asks for one record beyond the end. */
            dlc_record rec;
            rc = dlc_store_read(r, i == n ? info->count : i, &rec);
            check_msg(rc);
            if (rc == DLC_OK) {
                /* Touch the first and last byte: the view must be inside the map. */
                if (rec.size)
                    sum += rec.data[0] + rec.data[rec.size - 1];
                check_msg(dlc_record_verify(s, &rec));
            }
        }
        dlc_store_reader_close(r);
    }
    uint64_t bad = 0;
    check_msg(dlc_store_verify(s, on_verify, NULL, &bad));
    dlc_store_close(s);
    /* Keep the compiler from dropping the reads. */
    volatile uint64_t sink = sum + bad;
    (void)sink;
    return 0;
}
