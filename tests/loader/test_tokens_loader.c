/* Packed sequences (loader/tokens/tokens_loader.c) through the C API: the bytes of an epoch are the
 * same at 0, 1 and 3 worker threads and across a close and reopen; a seek to a saved position
 * continues the stream; a store whose prefix sums disagree with its records is refused when the
 * window reaches the document, naming it. dlc-test-label: threads */
#include "store_test_util.h"

#include <dlcache/tokens.h>

#include <xxhash.h>

static char *dir;

static void setup(void)
{
    dir = tmp_mkdtemp();
}

static void teardown(void)
{
    tmp_rmdir(dir);
    dir = NULL;
}

TestSuite(tokens_loader, .init = setup, .fini = teardown);

static void write_corpus(const char *path, uint32_t ndocs)
{
    dlc_token_writer_config c;
    dlc_token_writer_config_init(&c);
    c.vocab_size = 1000;
    c.force = 1;
    dlc_token_writer *w = NULL;
    cr_assert_eq(dlc_token_writer_open(path, &c, &w), DLC_OK, "%s", dlc_errmsg());
    uint32_t ids[40];
    for (uint32_t d = 0; d < ndocs; d++) {
        const uint32_t n = 1 + (d * 7919u) % 39;
        for (uint32_t k = 0; k < n; k++)
            ids[k] = 1 + (d * 31 + k * 17) % 999;
        cr_assert_eq(dlc_token_writer_add(w, ids, n), DLC_OK, "%s", dlc_errmsg());
    }
    cr_assert_eq(dlc_token_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
}

/* XXH3 of every array of every batch of epoch @p epoch from @p start on, and their count. */
static uint64_t epoch_digest(const char *path, uint32_t threads, uint64_t epoch, uint64_t start,
                             uint64_t *batches)
{
    dlc_token_loader_config c;
    dlc_token_loader_config_init(&c);
    c.batch_size = 3;
    c.seq_len = 17;
    c.seed = 11;
    c.threads = threads;
    c.document_mask = 1;
    c.world_size = 2;
    c.rank = 1;
    dlc_token_loader *l = NULL;
    cr_assert_eq(dlc_token_loader_open(path, &c, &l), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_token_loader_seek(l, epoch, start), DLC_OK, "%s", dlc_errmsg());
    XXH3_state_t *h = XXH3_createState();
    XXH3_64bits_reset(h);
    dlc_token_batch b;
    dlc_status rc;
    uint64_t n = 0;
    while ((rc = dlc_token_loader_next(l, &b)) == DLC_OK) {
        const size_t cells = (size_t)b.rows * b.seq_len * 8;
        XXH3_64bits_update(h, b.input_ids, cells);
        XXH3_64bits_update(h, b.labels, cells);
        XXH3_64bits_update(h, b.position_ids, cells);
        XXH3_64bits_update(h, b.cu_seqlens, b.num_cu * sizeof(int32_t));
        cr_assert_eq(b.index, n);
        n++;
    }
    cr_assert_eq(rc, DLC_END, "%s", dlc_errmsg());
    cr_assert_eq(n, dlc_token_loader_len(l));
    cr_assert_eq(dlc_token_loader_position(l, NULL), dlc_token_loader_num_windows(l));
    const uint64_t d = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    dlc_token_loader_close(l);
    *batches = n;
    return d;
}

Test(tokens_loader, same_bytes_at_any_thread_count)
{
    char *path = tmp_path(dir, "c.dlc");
    write_corpus(path, 400);
    uint64_t n0, n1, n3, m;
    const uint64_t d0 = epoch_digest(path, 0, 2, 0, &n0);
    cr_assert_gt(n0, 10);
    cr_assert_eq(epoch_digest(path, 1, 2, 0, &n1), d0);
    cr_assert_eq(epoch_digest(path, 3, 2, 0, &n3), d0);
    cr_assert_eq(n1, n0);
    cr_assert_eq(n3, n0);
    cr_assert_neq(epoch_digest(path, 2, 3, 0, &m), d0, "another epoch, another order");
    /* A seek past the first 4 batches of both ranks leaves this rank 4 fewer. */
    epoch_digest(path, 2, 2, 4 * 3 * 2, &m);
    cr_assert_eq(m, n0 - 4);
    free(path);
}

Test(tokens_loader, options_are_checked)
{
    char *path = tmp_path(dir, "c.dlc");
    write_corpus(path, 20);
    dlc_token_loader_config c;
    dlc_token_loader_config_init(&c);
    dlc_token_loader *l = NULL;
    cr_assert_eq(dlc_token_loader_open(path, &c, &l), DLC_EINVAL, "batch_size 0");
    c.batch_size = 2;
    cr_assert_eq(dlc_token_loader_open(path, &c, &l), DLC_EINVAL, "2048 tokens per window");
    cr_assert(strstr(dlc_errmsg(), "fewer than one window"), "%s", dlc_errmsg());
    c.seq_len = 8;
    c.rank = 1;
    cr_assert_eq(dlc_token_loader_open(path, &c, &l), DLC_EINVAL, "rank 1 of 1");
    c.rank = 0;
    cr_assert_eq(dlc_token_loader_open(path, &c, &l), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_token_loader_seek(l, 0, dlc_token_loader_num_windows(l) + 1), DLC_EINVAL);
    dlc_token_loader_close(l);
    free(path);
}

/* config.verify: a bit flipped inside document 7 (ids 1500.., found by their bytes) is read as
 * another id without it, and is DLC_ECORRUPT naming the record with it, from the workers (three
 * threads: the bitmaps are shared) as from the caller's thread; a mode past DLC_VERIFY_ALWAYS is
 * refused. */
static uint64_t next_until_error(const char *path, uint32_t verify, uint32_t threads,
                                 dlc_status *rc)
{
    dlc_token_loader_config c;
    dlc_token_loader_config_init(&c);
    c.batch_size = 2;
    c.seq_len = 8;
    c.threads = threads;
    c.verify = verify;
    dlc_token_loader *l = NULL;
    cr_assert_eq(dlc_token_loader_open(path, &c, &l), DLC_OK, "%s", dlc_errmsg());
    dlc_token_batch b;
    uint64_t n = 0;
    while ((*rc = dlc_token_loader_next(l, &b)) == DLC_OK)
        n++;
    dlc_token_loader_close(l);
    return n;
}

Test(tokens_loader, verify_names_a_flipped_document)
{
    char *path = tmp_path(dir, "flip.dlc");
    dlc_token_writer_config wc;
    dlc_token_writer_config_init(&wc);
    wc.vocab_size = 2000;
    dlc_token_writer *w = NULL;
    cr_assert_eq(dlc_token_writer_open(path, &wc, &w), DLC_OK, "%s", dlc_errmsg());
    uint32_t ids[20];
    for (uint32_t d = 0; d < 40; d++) {
        for (uint32_t k = 0; k < 20; k++)
            ids[k] = d == 7 ? 1500 + k : 1 + (d * 31 + k * 17) % 999;
        cr_assert_eq(dlc_token_writer_add(w, ids, 20), DLC_OK, "%s", dlc_errmsg());
    }
    cr_assert_eq(dlc_token_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
    dlc_status rc;
    const uint64_t all = next_until_error(path, DLC_VERIFY_ALWAYS, 3, &rc);
    cr_assert_eq(rc, DLC_END, "a clean store passes: %s", dlc_errmsg());

    FILE *f = fopen(path, "r+b");
    cr_assert_not_null(f);
    static uint8_t buf[1 << 20];
    const size_t len = fread(buf, 1, sizeof buf, f);
    const uint16_t want[4] = {1500, 1501, 1502, 1503};
    uint8_t *at = memmem(buf, len, want, sizeof want);
    cr_assert_not_null(at, "document 7's ids are in the file");
    cr_assert_eq(fseek(f, (long)(at - buf) + 4, SEEK_SET), 0);
    const uint8_t flipped = at[4] ^ 1;
    cr_assert_eq(fwrite(&flipped, 1, 1, f), 1);
    cr_assert_eq(fclose(f), 0);

    cr_assert_eq(next_until_error(path, DLC_VERIFY_OFF, 3, &rc), all);
    cr_assert_eq(rc, DLC_END, "without verify the flipped id is read as another");
    for (uint32_t threads = 0; threads <= 3; threads += 3) {
        for (uint32_t mode = DLC_VERIFY_FIRST; mode <= DLC_VERIFY_ALWAYS; mode++) {
            next_until_error(path, mode, threads, &rc);
            cr_assert_eq(rc, DLC_ECORRUPT, "verify %u, %u threads", mode, threads);
            cr_assert(strstr(dlc_errmsg(), "flip.dlc: record 7: field \"tokens\": checksum "
                                           "mismatch"),
                      "%s", dlc_errmsg());
        }
    }
    dlc_token_loader_config c;
    dlc_token_loader_config_init(&c);
    c.batch_size = 2;
    c.seq_len = 8;
    c.verify = DLC_VERIFY_ALWAYS + 1;
    dlc_token_loader *l = NULL;
    cr_assert_eq(dlc_token_loader_open(path, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "verify 3 (0..2)"), "%s", dlc_errmsg());
    free(path);
}

/* Every array of every lent batch lies inside a block dlc_token_loader_host_slots() names: what
 * the Python device path page-locks covers what it copies. */
static int inside(const void *p, size_t bytes, void **bases, const size_t *sizes, uint32_t n)
{
    for (uint32_t k = 0; k < n; k++) {
        const uint8_t *b = bases[k];
        if ((const uint8_t *)p >= b && (const uint8_t *)p + bytes <= b + sizes[k])
            return 1;
    }
    return 0;
}

Test(tokens_loader, host_slots_hold_every_lent_batch)
{
    char *path = tmp_path(dir, "c.dlc");
    write_corpus(path, 300);
    cr_assert_eq(dlc_token_loader_host_slots(NULL, NULL, NULL, 0), 0);
    for (uint32_t threads = 0; threads <= 2; threads += 2) {
        dlc_token_loader_config c;
        dlc_token_loader_config_init(&c);
        c.batch_size = 4;
        c.seq_len = 13;
        c.threads = threads;
        c.document_mask = 1;
        c.out_dtype = DLC_DTYPE_INT32;
        dlc_token_loader *l = NULL;
        cr_assert_eq(dlc_token_loader_open(path, &c, &l), DLC_OK, "%s", dlc_errmsg());
        const uint32_t n = dlc_token_loader_host_slots(l, NULL, NULL, 0);
        cr_assert_eq(n, 4 * (threads ? threads + 2 : 1), "4 arrays per slot");
        void *bases[16];
        size_t sizes[16];
        cr_assert_eq(dlc_token_loader_host_slots(l, bases, sizes, 2), n, "counts beyond cap");
        cr_assert_eq(dlc_token_loader_host_slots(l, bases, sizes, n), n);
        for (uint32_t k = 0; k < n; k++)
            cr_assert(bases[k] && sizes[k] >= 4 * 13 * 4);
        dlc_token_batch b;
        uint64_t seen = 0;
        while (dlc_token_loader_next(l, &b) == DLC_OK) {
            const size_t bytes = (size_t)b.rows * b.seq_len * 4;
            cr_assert(inside(b.input_ids, bytes, bases, sizes, n));
            cr_assert(inside(b.labels, bytes, bases, sizes, n));
            cr_assert(inside(b.position_ids, bytes, bases, sizes, n));
            cr_assert(inside(b.cu_seqlens, b.num_cu * sizeof(int32_t), bases, sizes, n));
            seen++;
        }
        cr_assert_eq(seen, dlc_token_loader_len(l));
        dlc_token_loader_close(l);
    }
    free(path);
}

/* The options grow by the rule of status.h: a caller built before the streaming fields (56
 * bytes) opens with their defaults; a size no header had is refused, naming the struct. A URL
 * without cache_dir is refused before anything is fetched. */
Test(tokens_loader, options_grow_at_the_end)
{
    char *path = tmp_path(dir, "c.dlc");
    write_corpus(path, 50);
    dlc_token_loader_config c;
    dlc_token_loader_config_init(&c);
    c.batch_size = 2;
    c.seq_len = 8;
    c.cache_dir = "/nonexistent/never/read"; /* Beyond an old caller's size: never read. */
    c.struct_size = 56;
    dlc_token_loader *l = NULL;
    cr_assert_eq(dlc_token_loader_open(path, &c, &l), DLC_OK, "%s", dlc_errmsg());
    dlc_loader_stream_stats st;
    st.struct_size = sizeof st;
    cr_assert_eq(dlc_token_loader_stream_stats(l, &st), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(st.downloads + st.requests + st.bytes_fetched, 0, "a local store streams nothing");
    dlc_token_loader_close(l);
    c.struct_size = 60;
    cr_assert_eq(dlc_token_loader_open(path, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "dlc_token_loader_config"), "%s", dlc_errmsg());
    dlc_token_loader_config_init(&c);
    c.batch_size = 2;
    c.seq_len = 8;
    cr_assert_eq(dlc_token_loader_open("s3://bucket/set", &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "cache_dir"), "%s", dlc_errmsg());
    free(path);
}
