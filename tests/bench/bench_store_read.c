/* bench_store_read [COUNT [DIR]]: how fast dlc_store_read_values() finds small records.
 *
 * Writes COUNT (default 60,000) records of a 28x28x1 raw image and a label twice: as a format 2
 * store (public writer) and as a format 1 store (tests/lib/store_v1.h), both in DIR (default /tmp),
 * then reads every record in a random order, several passes, warm in the page cache:
 *   v2_table  dlc_store_read_values() on the format 2 store: one load from the offset table
 *   v2_btree  the same records of the same file found with LMDB's mdb_get() (a B-tree search)
 *             and checked by the same code: what the offset table saves, and nothing else
 *   v1_btree  dlc_store_read_values() on the format 1 store (mdb_get, the version 1 header)
 *   v2_table_2_threads  v2_table on 2 threads at once: ns per read of both together, and
 *             records per second in all
 *   v2_table_in_order   v2_table reading records 0, 1, 2...: the cost of the checks alone, without
 *             the cache and TLB misses of random reads
 * Prints one JSON object with ns per read and the ratios, measured in this one run. Built by
 * cmake/store.cmake; not a test (no timing is asserted). */
#include "common.h"
#include "store_format.h"
#include "store_internal.h"
#include "store_v1.h"

#include <dlcache/writer.h>

#include <pthread.h>

#define PASSES 5

static dlc_status write_v2(const char *path, uint64_t n)
{
    dlc_status rc = DLC_OK;
    static const char *const names[] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
    const dlc_field_spec fields[2] = {
        {.name = "image", .kind = DLC_FIELD_IMAGE, .shape = {28, 28, 1}},
        {.name = "label", .kind = DLC_FIELD_INT, .flags = DLC_FIELD_LABEL},
    };
    const dlc_writer_config cfg = {.struct_size = sizeof(dlc_writer_config),
                                   .fields = fields,
                                   .num_fields = 2,
                                   .label_names = names,
                                   .num_labels = 10,
                                   .force = 1};
    dlc_writer *w = NULL;
    dlc_record_builder *b = NULL;
    uint8_t px[28 * 28];
    CHECK(dlc_writer_open(path, &cfg, &w));
    CHECK(dlc_record_builder_create(w, &b));
    for (uint64_t i = 0; i < n; i++) {
        for (size_t j = 0; j < sizeof px; j++)
            px[j] = tv1_byte(i, j);
        const dlc_image img = {px, 28, 28, 1, 28};
        CHECK(dlc_record_set_image(b, 0, &img));
        CHECK(dlc_record_set_int(b, 1, (int64_t)(i % 10)));
        CHECK(dlc_record_seal(b));
        CHECK(dlc_writer_append(w, b));
    }
    rc = dlc_writer_finish(w);
    w = NULL;
fail:
    dlc_writer_abort(w);
    dlc_record_builder_destroy(b);
    return rc;
}

typedef enum mode { V2_TABLE, V2_BTREE, V1_BTREE } mode;

typedef struct job {
    const dlc_store *s;
    const uint64_t *order;
    uint64_t n;
    mode m;
    uint64_t sum; /* Of what was read, so the reads are not optimised away. */
    double seconds;
    dlc_status rc;
} job;

/* A format 2 record found through LMDB's B-tree and checked by the reader's own code. */
static dlc_status read_btree(dlc_store_reader *r, uint64_t i, dlc_value *v)
{
    uint8_t key[DLC__KEY_SIZE];
    dlc__record_key(key, i);
    MDB_val k = {sizeof key, key}, val;
    if (mdb_get(r->txn, r->s->dbi_samples, &k, &val) != 0)
        return DLC_ECORRUPT;
    const uint64_t off = (uint64_t)((const uint8_t *)val.mv_data - r->s->map);
    return dlc__read_v2(r->s, i, off, UINT64_MAX, v);
}

static void *run_job(void *p)
{
    job *j = p;
    dlc_store_reader *r = NULL;
    j->rc = dlc_store_reader_open(j->s, &r);
    if (j->rc != DLC_OK)
        return NULL;
    dlc_value v[2];
    const double t0 = dlc__now_s();
    for (int pass = 0; pass < PASSES; pass++)
        for (uint64_t k = 0; k < j->n; k++) {
            const uint64_t i = j->order[k];
            j->rc = j->m == V2_BTREE ? read_btree(r, i, v) : dlc_store_read_values(r, i, v);
            if (j->rc != DLC_OK)
                goto out;
            /* The fields' sizes and the label, not the pixels: the time of the lookup and its
             * checks, not of reading the payload that follows. */
            j->sum += v[0].size + v[0].offset + (uint64_t)v[1].i;
        }
out:
    j->seconds = dlc__now_s() - t0;
    dlc_store_reader_close(r);
    return NULL;
}

/* ns per read of @p m on @p threads threads (each reads every record PASSES times). */
static double measure(const dlc_store *s, const uint64_t *order, uint64_t n, mode m, int threads)
{
    job jobs[2];
    pthread_t t[2];
    for (int k = 0; k < threads; k++) {
        jobs[k] = (job){.s = s, .order = order, .n = n, .m = m};
        if (pthread_create(&t[k], NULL, run_job, &jobs[k]) != 0)
            abort();
    }
    double slowest = 0;
    for (int k = 0; k < threads; k++) {
        pthread_join(t[k], NULL);
        if (jobs[k].rc != DLC_OK) {
            fprintf(stderr, "bench_store_read: %s\n", dlc_errmsg());
            exit(1);
        }
        slowest = jobs[k].seconds > slowest ? jobs[k].seconds : slowest;
    }
    return slowest * 1e9 / ((double)n * PASSES * threads);
}

static dlc_store *open_store(const char *path)
{
    dlc_store *s = NULL;
    if (dlc_store_open(path, 0, &s) != DLC_OK) {
        fprintf(stderr, "bench_store_read: %s\n", dlc_errmsg());
        exit(1);
    }
    return s;
}

int main(int argc, char **argv)
{
    const uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 60000;
    const char *dir = argc > 2 ? argv[2] : "/tmp";
    char v2[1024], v1[1024];
    snprintf(v2, sizeof v2, "%s/bench-read-v2-%d.dlc", dir, (int)getpid());
    snprintf(v1, sizeof v1, "%s/bench-read-v1-%d.dlc", dir, (int)getpid());
    const tv1_options o = {.count = n, .height = 28, .width = 28, .channels = 1, .num_labels = 10};
    if (n == 0 || write_v2(v2, n) != DLC_OK || tv1_write_store(v1, &o) != DLC_OK) {
        fprintf(stderr, "bench_store_read: %s\n", dlc_errmsg());
        return 1;
    }
    uint64_t *order = malloc(n * sizeof *order);
    for (uint64_t i = 0; i < n; i++)
        order[i] = i;
    for (uint64_t i = n - 1; i > 0; i--) { /* Fisher-Yates with a fixed key. */
        const uint64_t j = dlc__mix64(i ^ 0x5eed) % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    dlc_store *s2 = open_store(v2), *s1 = open_store(v1);
    (void)measure(s2, order, n, V2_TABLE, 1); /* Warm the page cache and the branch predictor. */
    (void)measure(s1, order, n, V1_BTREE, 1);
    const double table = measure(s2, order, n, V2_TABLE, 1);
    const double btree = measure(s2, order, n, V2_BTREE, 1);
    const double v1_btree = measure(s1, order, n, V1_BTREE, 1);
    const double two = measure(s2, order, n, V2_TABLE, 2);
    uint64_t *seq = malloc(n * sizeof *seq);
    for (uint64_t i = 0; i < n; i++)
        seq[i] = i;
    const double sequential = measure(s2, seq, n, V2_TABLE, 1);
    free(seq);
    printf("{\"records\": %llu, \"record\": \"28x28x1 raw + label\", \"passes\": %d,\n"
           " \"ns_per_read\": {\"v2_table\": %.1f, \"v2_btree\": %.1f, \"v1_btree\": %.1f, "
           "\"v2_table_2_threads\": %.1f, \"v2_table_in_order\": %.1f},\n"
           " \"reads_per_s_2_threads\": %.0f,\n"
           " \"btree_over_table\": %.2f, \"v1_over_v2_table\": %.2f, \"file_bytes\": {\"v2\": "
           "%llu, \"v1\": %llu}}\n",
           (unsigned long long)n, PASSES, table, btree, v1_btree, two, sequential, 1e9 / two,
           btree / table, v1_btree / table, (unsigned long long)dlc_store_get_info(s2)->file_bytes,
           (unsigned long long)dlc_store_get_info(s1)->file_bytes);
    dlc_store_close(s2);
    dlc_store_close(s1);
    unlink(v2);
    unlink(v1);
    free(order);
    return 0;
}
