/* Token stores (cache/store/store_tokens.c): the token writer's records, "tokens" block and prefix
 * sums against an independent count; dlc_tokens_find() against a linear scan; the checks at open
 * (a damaged block, offsets of the wrong size or end) and per document; dlc_writer_put_meta()'s
 * refusals. Real LMDB files in a temporary directory. */
#include "store_internal.h"
#include "store_set.h"
#include "store_test_util.h"

#include <dlcache/tokens.h>
#include <dlcache/writer.h>

#include <sys/stat.h>
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

TestSuite(store_tokens, .init = setup, .fini = teardown);

/* Document d has d % 5 ids (0: skipped) of value 7 * d + k + 1, some ending with the EOS (0). */
static uint64_t write_docs(const char *path, uint32_t vocab, uint32_t n, uint64_t *lens)
{
    dlc_token_writer_config c;
    dlc_token_writer_config_init(&c);
    c.vocab_size = vocab;
    c.eos_id = 0;
    c.force = 1;
    dlc_token_writer *w = NULL;
    cr_assert_eq(dlc_token_writer_open(path, &c, &w), DLC_OK, "%s", dlc_errmsg());
    uint32_t ids[8];
    uint64_t docs = 0;
    for (uint32_t d = 0; d < n; d++) {
        const uint32_t len = d % 5;
        for (uint32_t k = 0; k < len; k++)
            ids[k] = (7 * d + k + 1) % (vocab - 1) + 1;
        if (len && d % 3 == 0)
            ids[len - 1] = 0; /* Ends with EOS already: nothing appended. */
        cr_assert_eq(dlc_token_writer_add(w, ids, len), DLC_OK, "%s", dlc_errmsg());
        if (len)
            lens[docs++] = len + (d % 3 != 0);
    }
    cr_assert_eq(dlc_token_writer_count(w), docs);
    cr_assert_eq(dlc_token_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
    return docs;
}

Test(store_tokens, round_trip_offsets_and_find)
{
    char *path = tmp_path(dir, "t.dlc");
    uint64_t lens[500];
    const uint64_t docs = write_docs(path, 1000, 500, lens);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    dlc_tokens *t = NULL;
    cr_assert_eq(dlc_tokens_open(s, &t), DLC_OK, "%s", dlc_errmsg());
    const dlc_tokens_info *in = dlc_tokens_get_info(t);
    cr_assert_eq(in->num_docs, docs);
    cr_assert_eq(in->dtype, DLC_DTYPE_UINT16);
    cr_assert_str_eq(in->tokenizer, DLC_TOKENS_PRETOKENIZED);
    cr_assert_eq(dlc_store_get_info(s)->skipped, 100, "the empty documents are counted");
    const uint64_t *off = dlc_tokens_offsets(t);
    uint64_t sum = 0;
    dlc_store_reader *r = NULL;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    for (uint64_t d = 0; d < docs; d++) {
        cr_assert_eq(off[d], sum, "document %lu", (unsigned long)d);
        for (uint64_t p = sum; p < sum + lens[d]; p++)
            cr_assert_eq(dlc_tokens_find(t, p), d, "position %lu", (unsigned long)p);
        const void *data;
        uint64_t n;
        cr_assert_eq(dlc_tokens_doc(t, r, d, &data, &n), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(n, lens[d]);
        const uint8_t *b = data;
        cr_assert_eq(b[2 * (n - 1)] | b[2 * (n - 1) + 1] << 8, 0, "ends with EOS");
        sum += lens[d];
    }
    cr_assert_eq(off[docs], sum);
    cr_assert_eq(in->num_tokens, sum);
    cr_assert_eq(dlc_tokens_find(t, sum), UINT64_MAX);
    cr_assert_eq(dlc_tokens_verify(t, s), DLC_OK, "%s", dlc_errmsg());
    dlc_store_reader_close(r);
    dlc_tokens_close(t);
    dlc_store_close(s);
    free(path);
}

Test(store_tokens, large_vocabulary_is_int32_and_ids_are_checked)
{
    char *path = tmp_path(dir, "big.dlc");
    dlc_token_writer_config c;
    dlc_token_writer_config_init(&c);
    c.vocab_size = 100000;
    c.eos_id = 99999;
    dlc_token_writer *w = NULL;
    cr_assert_eq(dlc_token_writer_open(path, &c, &w), DLC_OK, "%s", dlc_errmsg());
    const uint32_t ids[3] = {70000, 1, 100000};
    cr_assert_eq(dlc_token_writer_add(w, ids, 3), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "document 0: token 2 is id 100000"), "%s", dlc_errmsg());
    cr_assert_eq(dlc_token_writer_add(w, ids, 2), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_token_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    dlc_tokens *t = NULL;
    cr_assert_eq(dlc_tokens_open(s, &t), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_tokens_get_info(t)->dtype, DLC_DTYPE_INT32);
    cr_assert_eq(dlc_tokens_get_info(t)->num_tokens, 3);
    dlc_tokens_close(t);
    dlc_store_close(s);
    free(path);
}

/* A plain store is not a token store; a store whose block or offsets disagree is refused. */
static dlc_status open_with_meta(const char *path, const uint8_t *block, size_t bsize,
                                 const uint64_t *off, size_t osize)
{
    const dlc_field_spec spec = {.name = "tokens",
                                 .kind = DLC_FIELD_NDARRAY,
                                 .dtype = DLC_DTYPE_UINT16,
                                 .ndim = 1,
                                 .flags = DLC_FIELD_VARIABLE};
    dlc_writer_config wc;
    dlc_writer_config_init(&wc);
    wc.fields = &spec;
    wc.num_fields = 1;
    wc.force = 1;
    dlc_writer *w = NULL;
    dlc_record_builder *b = NULL;
    cr_assert_eq(dlc_writer_open(path, &wc, &w), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_record_builder_create(w, &b), DLC_OK);
    const uint16_t ids[2][3] = {{5, 6, 0}, {7, 0, 0}};
    for (int d = 0; d < 2; d++) {
        cr_assert_eq(dlc_record_set_array(b, 0, ids[d], (size_t)(3 - d) * 2, (uint32_t)(3 - d)),
                     DLC_OK);
        cr_assert_eq(dlc_record_seal(b), DLC_OK);
        cr_assert_eq(dlc_writer_append(w, b), DLC_OK);
    }
    dlc_record_builder_destroy(b);
    if (block)
        cr_assert_eq(dlc_writer_put_meta(w, DLC_TOKENS_META, block, bsize), DLC_OK);
    if (off)
        cr_assert_eq(dlc_writer_put_meta(w, DLC_TOKENS_META_OFFSETS, off, osize), DLC_OK);
    cr_assert_eq(dlc_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    dlc_tokens *t = NULL;
    const dlc_status rc = dlc_tokens_open(s, &t);
    dlc_tokens_close(t);
    dlc_store_close(s);
    return rc;
}

/* The block as docs/FORMAT.md lays it out, with its hash. */
static void make_block(uint8_t b[128], uint64_t docs, uint64_t tokens, const uint64_t *off)
{
    memset(b, 0, 128);
    memcpy(b, "DLCTOK01", 8);
    dlc__st32(b + 8, 1);
    dlc__st32(b + 12, DLC_DTYPE_UINT16);
    dlc__st64(b + 16, docs);
    dlc__st64(b + 24, tokens);
    dlc__st32(b + 36, 100);
    dlc__st64(b + 48, 3);
    dlc__st64(b + 56, XXH3_64bits(off, (docs + 1) * 8));
    memcpy(b + 64, "pretokenized", 12);
    dlc__st64(b + 120, XXH3_64bits(b, 120));
}

Test(store_tokens, open_checks_block_and_offsets)
{
    char *path = tmp_path(dir, "m.dlc");
    const uint64_t off[3] = {0, 3, 5};
    uint8_t b[128];
    make_block(b, 2, 5, off);
    cr_assert_eq(open_with_meta(path, b, 128, off, sizeof off), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(open_with_meta(path, NULL, 0, NULL, 0), DLC_ENOTFOUND);
    cr_assert(strstr(dlc_errmsg(), "not a token store"), "%s", dlc_errmsg());
    cr_assert_eq(open_with_meta(path, b, 128, off, 16), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "token offsets: 16 bytes"), "%s", dlc_errmsg());
    const uint64_t short_end[3] = {0, 3, 4};
    cr_assert_eq(open_with_meta(path, b, 128, short_end, sizeof short_end), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "not from 0 to 5"), "%s", dlc_errmsg());
    uint8_t bad[128];
    memcpy(bad, b, 128);
    bad[30] ^= 1;
    cr_assert_eq(open_with_meta(path, bad, 128, off, sizeof off), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "checksum mismatch"), "%s", dlc_errmsg());
    make_block(bad, 3, 5, off);
    cr_assert_eq(open_with_meta(path, bad, 128, off, sizeof off), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "3 documents, the store has 2 records"), "%s", dlc_errmsg());
    /* Offsets of the right size and ends but a wrong middle: a document read is refused. */
    const uint64_t wrong[3] = {0, 2, 5};
    make_block(bad, 2, 5, wrong);
    cr_assert_eq(open_with_meta(path, bad, 128, wrong, sizeof wrong), DLC_OK);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK);
    dlc_tokens *t = NULL;
    cr_assert_eq(dlc_tokens_open(s, &t), DLC_OK);
    dlc_store_reader *r = NULL;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    const void *data;
    uint64_t n;
    cr_assert_eq(dlc_tokens_doc(t, r, 0, &data, &n), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "document 0: 3 tokens, the prefix sums say 2 - 0"), "%s",
              dlc_errmsg());
    cr_assert_eq(dlc_tokens_verify(t, s), DLC_ECORRUPT);
    dlc_store_reader_close(r);
    dlc_tokens_close(t);
    dlc_store_close(s);
    free(path);
}

Test(store_tokens, put_meta_refuses_own_and_bad_keys)
{
    char *path = tmp_path(dir, "k.dlc");
    const dlc_field_spec spec = {.name = "x", .kind = DLC_FIELD_INT};
    dlc_writer_config wc;
    dlc_writer_config_init(&wc);
    wc.fields = &spec;
    wc.num_fields = 1;
    dlc_writer *w = NULL;
    cr_assert_eq(dlc_writer_open(path, &wc, &w), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_writer_put_meta(w, "index", "x", 1), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "the store's own key"), "%s", dlc_errmsg());
    cr_assert_eq(dlc_writer_put_meta(w, "a-b", "x", 1), DLC_EINVAL);
    cr_assert_eq(dlc_writer_put_meta(w, "", "x", 1), DLC_EINVAL);
    cr_assert_eq(dlc_writer_put_meta(w, "mine", "x", 1), DLC_OK);
    cr_assert_eq(dlc_writer_put_meta(w, "mine", "yz", 2), DLC_OK, "the last value wins");
    dlc_writer_abort(w);
    free(path);
}

/* A set of 3 token parts opened lazily (as streaming opens it, from the index alone): refused
 * while a part is not attached, naming it; with every part attached, the same documents, tokens,
 * positions and bytes as the set opened whole. */
Test(store_tokens, lazy_set_reads_once_every_part_is_attached)
{
    char *set = tmp_path(dir, "set");
    cr_assert_eq(mkdir(set, 0755), 0);
    const uint32_t parts = 3;
    for (uint32_t k = 0; k < parts; k++) {
        char name[DLC__SET_NAME_SIZE];
        dlc__set_part_name(name, k, parts);
        char *path = dlc__set_path(set, "/", name);
        dlc_token_writer_config c;
        dlc_token_writer_config_init(&c);
        c.vocab_size = 500;
        c.force = 1;
        c.part = k;
        c.parts = parts;
        c.set_id = 77;
        c.first_item = 40 * k;
        c.end_item = 40 * (k + 1);
        dlc_token_writer *w = NULL;
        cr_assert_eq(dlc_token_writer_open(path, &c, &w), DLC_OK, "%s", dlc_errmsg());
        uint32_t ids[9];
        for (uint32_t d = 40 * k; d < 40 * (k + 1); d++) {
            const uint32_t n = 1 + d % 9;
            for (uint32_t j = 0; j < n; j++)
                ids[j] = 1 + (d * 13 + j) % 498;
            cr_assert_eq(dlc_token_writer_add(w, ids, n), DLC_OK, "%s", dlc_errmsg());
        }
        cr_assert_eq(dlc_token_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
        free(path);
    }
    cr_assert_eq(dlc__set_join(set, NULL), DLC_OK, "%s", dlc_errmsg());
    dlc_store *whole = NULL, *lazy = NULL;
    cr_assert_eq(dlc_store_open(set, 0, &whole), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc__set_open_lazy(set, &lazy), DLC_OK, "%s", dlc_errmsg());
    dlc_tokens *tw = NULL, *tl = NULL;
    cr_assert_eq(dlc_tokens_open(whole, &tw), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc__set_attach(lazy, 0, dlc_store_file_path(whole, 0)), DLC_OK, "%s",
                 dlc_errmsg());
    cr_assert_eq(dlc_tokens_open(lazy, &tl), DLC_ENOSYS);
    cr_assert(strstr(dlc_errmsg(), "part-00001-of-00003.dlc is not"), "%s", dlc_errmsg());
    for (uint32_t k = 1; k < parts; k++)
        cr_assert_eq(dlc__set_attach(lazy, k, dlc_store_file_path(whole, k)), DLC_OK, "%s",
                     dlc_errmsg());
    cr_assert_eq(dlc_tokens_open(lazy, &tl), DLC_OK, "%s", dlc_errmsg());
    const dlc_tokens_info *a = dlc_tokens_get_info(tw), *b = dlc_tokens_get_info(tl);
    cr_assert_eq(a->num_docs, 120);
    cr_assert_eq(b->num_docs, a->num_docs);
    cr_assert_eq(b->num_tokens, a->num_tokens);
    cr_assert_eq(b->offsets_digest, a->offsets_digest);
    cr_assert_eq(b->max_doc_tokens, a->max_doc_tokens);
    dlc_store_reader *rw = NULL, *rl = NULL;
    cr_assert_eq(dlc_store_reader_open(whole, &rw), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_reader_open(lazy, &rl), DLC_OK, "%s", dlc_errmsg());
    for (uint64_t d = 0; d <= a->num_docs; d++)
        cr_assert_eq(dlc_tokens_doc_start(tl, d), dlc_tokens_doc_start(tw, d));
    for (uint64_t p = 0; p < a->num_tokens; p += 7)
        cr_assert_eq(dlc_tokens_find(tl, p), dlc_tokens_find(tw, p));
    for (uint64_t d = 0; d < a->num_docs; d++) {
        const void *x, *y;
        uint64_t nx, ny;
        cr_assert_eq(dlc_tokens_doc(tw, rw, d, &x, &nx), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_tokens_doc(tl, rl, d, &y, &ny), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(nx, ny);
        cr_assert_eq(memcmp(x, y, nx * 2), 0, "document %lu", (unsigned long)d);
    }
    cr_assert_eq(dlc_tokens_verify(tl, lazy), DLC_OK, "%s", dlc_errmsg());
    dlc_store_reader_close(rl);
    dlc_store_reader_close(rw);
    dlc_tokens_close(tl);
    dlc_tokens_close(tw);
    for (uint32_t k = 0; k < parts; k++)
        dlc__set_detach(lazy, k);
    dlc_store_close(lazy);
    dlc_store_close(whole);
    free(set);
}

/* A failed open leaves its out NULL, also when the failure is the NULL argument. */
Test(store_tokens, a_refused_open_leaves_out_null)
{
    int any;
    dlc_tokens *t = (dlc_tokens *)&any;
    cr_assert_eq(dlc_tokens_open(NULL, &t), DLC_EINVAL);
    cr_assert_null(t);
    dlc_record_builder *b = (dlc_record_builder *)&any;
    cr_assert_eq(dlc_record_builder_create(NULL, &b), DLC_EINVAL);
    cr_assert_null(b);
}
