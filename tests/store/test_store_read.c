/* Reading version 2 records (cache/store/store_read.c, cache/store/store_verify.c, and the schema
 * checks of cache/store/store_open.c): the offset table finds every record without a B-tree search
 * and agrees with a cursor walk; a damaged schema entry, record header, field entry or offset table
 * is refused at open or read with DLC_ECORRUPT naming the store, the record and the field, and
 * verify names it too. */
#include "store_kinds.h"
#include "store_test_util.h"

#include <fcntl.h>
#include <lmdb.h>
#include <xxhash.h>

static char *dir;
static char *path;

static void setup(void)
{
    dir = tmp_mkdtemp();
    path = tmp_path(dir, "k.dlc");
    cr_assert_eq(sk_write_store(path, 37, 0), DLC_OK, "%s", dlc_errmsg());
}

static void teardown(void)
{
    free(path);
    tmp_rmdir(dir);
    dir = NULL;
}

TestSuite(store_read, .init = setup, .fini = teardown);

/* File offset and size of metadata value @p key, and record @p i's header offset. */
static void locate(const char *key, uint64_t *off, size_t *len)
{
    dlc_store *s = NULL;
    dlc_store_reader *r = NULL;
    dlc_value v[SK_NUM_FIELDS];
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    cr_assert_eq(dlc_store_read_values(r, 0, v), DLC_OK);
    const uint8_t *base = v[0].data - v[0].offset;
    const void *data;
    cr_assert_eq(dlc_store_meta(s, key, &data, len), DLC_OK);
    *off = (uint64_t)((const uint8_t *)data - base);
    dlc_store_reader_close(r);
    dlc_store_close(s);
}

static uint64_t record_at(uint64_t i)
{
    uint64_t off;
    size_t len;
    locate("index", &off, &len);
    uint8_t b[8];
    const int fd = open(path, O_RDONLY);
    cr_assert_eq(pread(fd, b, 8, (off_t)(off + 8 * i)), 8);
    close(fd);
    return dlc__ld64(b);
}

static void patch(uint64_t off, const void *bytes, size_t n)
{
    const int fd = open(path, O_RDWR);
    cr_assert_eq(pwrite(fd, bytes, n, (off_t)off), (ssize_t)n);
    close(fd);
}

static void patch64(uint64_t off, uint64_t v)
{
    uint8_t b[8];
    dlc__st64(b, v);
    patch(off, b, 8);
}

/* Read record @p i: expect @p want and, on failure, @p msg in the message; verify must name the
 * record too. */
static void expect_read(uint64_t i, dlc_status want, const char *msg)
{
    dlc_store *s = NULL;
    dlc_store_reader *r = NULL;
    dlc_value v[SK_NUM_FIELDS];
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    const dlc_status rc = dlc_store_read_values(r, i, v);
    cr_assert_eq(rc, want, "%d: %s", rc, dlc_errmsg());
    if (rc != DLC_OK) {
        cr_assert(strstr(dlc_errmsg(), msg), "\"%s\" not in \"%s\"", msg, dlc_errmsg());
        cr_assert(strstr(dlc_errmsg(), path), "%s", dlc_errmsg());
        dlc_record rec;
        cr_assert_eq(dlc_store_read(r, i, &rec), rc, "the version 1 view fails the same way");
    }
    uint64_t bad = 0;
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, &bad), DLC_ECORRUPT);
    cr_assert_geq(bad, 1);
    dlc_store_reader_close(r);
    dlc_store_close(s);
}

Test(store_read, the_offset_table_agrees_with_a_cursor_walk)
{
    uint64_t table;
    size_t len;
    locate("index", &table, &len);
    cr_assert_eq(len, 37 * 8, "count x u64");
    dlc_store *s = NULL;
    dlc_store_reader *r = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    /* LMDB itself walks the records, on its own handle of the file. */
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *cur;
    cr_assert_eq(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 4);
    cr_assert_eq(mdb_env_open(env, path, MDB_RDONLY | MDB_NOLOCK | MDB_NOSUBDIR, 0), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "samples", 0, &dbi), 0);
    cr_assert_eq(mdb_cursor_open(txn, dbi, &cur), 0);
    MDB_val k, val;
    uint64_t i = 0;
    uint8_t *file = malloc(1 << 20);
    const int fd = dlc_store_fd(s);
    for (int rc = mdb_cursor_get(cur, &k, &val, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &val, MDB_NEXT), i++) {
        dlc_value v[SK_NUM_FIELDS];
        cr_assert_eq(dlc_store_read_values(r, i, v), DLC_OK, "%s", dlc_errmsg());
        const uint64_t at = record_at(i);
        /* The table's offset holds exactly the value LMDB holds for key i. */
        cr_assert_eq(pread(fd, file, val.mv_size, (off_t)at), (ssize_t)val.mv_size);
        cr_assert_eq(memcmp(file, val.mv_data, val.mv_size), 0, "record %llu",
                     (unsigned long long)i);
        for (uint32_t f = 0; f < SK_NUM_FIELDS; f++) {
            cr_assert(v[f].offset >= at && v[f].offset + v[f].size <= at + val.mv_size);
            cr_assert_eq(memcmp(v[f].data, file + (v[f].offset - at), v[f].size), 0);
        }
    }
    cr_assert_eq(i, 37);
    free(file);
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    dlc_store_reader_close(r);
    dlc_store_close(s);
}

/* Find key @p i in its leaf node (key size 8 as u16, then the big-endian key) in the file. */
static uint64_t find_key(uint64_t i)
{
    size_t n;
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n);
    cr_assert_eq(fread(buf, 1, n, f), n);
    fclose(f);
    uint8_t pat[10] = {8, 0};
    for (int b = 0; b < 8; b++)
        pat[2 + b] = (uint8_t)(i >> (56 - 8 * b));
    const uint8_t *hit = memmem(buf, n, pat, sizeof pat);
    cr_assert_not_null(hit);
    const uint64_t off = (uint64_t)(hit - buf) + 2;
    free(buf);
    return off;
}

/* With record 5's key changed in its leaf page, LMDB's B-tree can no longer find record 5 (its
 * keys are out of order), but the offset table still does: a read makes no B-tree search. The
 * cursor walk of verify sees the bad key. */
Test(store_read, a_read_makes_no_btree_search)
{
    patch(find_key(5) + 7, "\x63", 1);
    dlc_store *s = NULL;
    dlc_store_reader *r = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    dlc_codec *c = NULL;
    cr_assert_eq(dlc_codec_create(&c), DLC_OK);
    sk_record *want = malloc(sizeof *want);
    for (uint64_t i = 0; i < 37; i++) {
        dlc_value v[SK_NUM_FIELDS];
        cr_assert_eq(dlc_store_read_values(r, i, v), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(sk_check(c, want, v, i), DLC_OK, "%s", dlc_errmsg());
    }
    uint64_t bad = 0;
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, &bad), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "record 5: wrong key"), "%s", dlc_errmsg());
    free(want);
    dlc_codec_destroy(c);
    dlc_store_reader_close(r);
    dlc_store_close(s);
}

/* Rewrite schema entry @p f with @p edit applied and its hash recomputed (rehash 0: left stale). */
static void edit_schema(uint32_t f, uint32_t at, const void *bytes, size_t n, int rehash)
{
    uint64_t off;
    size_t len;
    locate("schema", &off, &len);
    cr_assert_eq(len, SK_NUM_FIELDS * 128);
    uint8_t e[128];
    const int fd = open(path, O_RDWR);
    cr_assert_eq(pread(fd, e, 128, (off_t)(off + 128 * f)), 128);
    memcpy(e + at, bytes, n);
    if (rehash)
        dlc__st64(e + 120, XXH3_64bits(e, 120));
    cr_assert_eq(pwrite(fd, e, 128, (off_t)(off + 128 * f)), 128);
    close(fd);
}

static void expect_open(dlc_status want, const char *msg)
{
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), want, "%s", dlc_errmsg());
    cr_assert_null(s);
    cr_assert(strstr(dlc_errmsg(), msg), "\"%s\" not in \"%s\"", msg, dlc_errmsg());
    cr_assert(strstr(dlc_errmsg(), path), "%s", dlc_errmsg());
}

Test(store_read, damaged_schema_entries_are_refused_at_open)
{
    char *copy = tmp_path(dir, "orig.dlc");
    tsu_copy(path, copy);
    edit_schema(SK_GRAY, 40, "\x02", 1, 0);
    expect_open(DLC_ECORRUPT, "schema field 1: checksum mismatch");
    const struct {
        uint32_t field, at;
        const char *bytes;
        size_t n;
        const char *msg;
    } cases[] = {
        {SK_GRAY, 32, "\x09", 1, "schema: field 1 \"gray\": unknown kind 9"},
        {SK_MASK, 40, "\x01", 1, "field 5 \"mask\": a MASK is stored raw or PNG"},
        {SK_PHOTO, 80, "\x21", 1, "field 3 \"photo\": max size 33x32 differs from the fixed"},
        {SK_A_F32, 88, "\x19", 1, "field 16 \"a_f32\": max_dim0 2, max_dim1 0 and max_size 25"},
        {SK_BOXES, 76, "\x00", 1, "field 6 \"boxes\": its class field 0 is not an ndarray"},
        {SK_ID, 0, "lab\0el", 6, "field 18: bytes after the name"},
        {SK_ID, 0, "label", 6, "field 21 \"label\": the name is also field 18's"},
        {SK_ID, 0, "9id", 3, "field 18: bad name"},
        {SK_ID, 44, "\x08", 1, "field 21 \"label\": a second LABEL field"},
        {SK_CAPTION, 100, "\x01", 1, "bytes after the name or reserved words not zero"},
        {SK_WEIGHT, 88, "\x09", 1, "field 19 \"weight\": max_dim0 0, max_dim1 0, max_size 9"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tsu_copy(copy, path);
        edit_schema(cases[k].field, cases[k].at, cases[k].bytes, cases[k].n, 1);
        expect_open(DLC_ECORRUPT, cases[k].msg);
    }
    free(copy);
}

Test(store_read, damaged_record_headers_and_field_entries_are_named)
{
    char *copy = tmp_path(dir, "orig.dlc");
    tsu_copy(path, copy);
    const uint64_t h = record_at(9), h12 = record_at(12);
    const uint64_t entry = 16 + 32 * SK_A_F32; /* a_f32: 2 x 3 float32, fixed. */
    const struct {
        uint64_t at;
        uint64_t value;
        int width; /* bytes */
        uint64_t record;
        const char *msg;
    } cases[] = {
        {h, 0x12345678, 4, 9, "record 9: bad header magic 0x12345678"},
        {h + 4, 848, 2, 9, "record 9: header of 848 bytes and 22 fields"},
        {h + 6, 21, 2, 9, "header of 752 bytes and 21 fields"},
        {h + 8, 3, 8, 9, "record 9: the header says record 3"},
        {h + entry + 8, 20, 8, 9, "record 9: field \"a_f32\": payload size disagrees"},
        {h + entry + 16, 3, 4, 9, "field \"a_f32\": leading dimension disagrees"},
        {h + entry, 64, 8, 9, "field \"a_f32\": payload at value offset 64, expected"},
        {h + 16 + 32 * SK_IMAGE + 16, 17, 4, 9, "field \"image\": payload size disagrees"},
        {h + 16 + 32 * SK_GRAY + 20, 13, 4, 9, "field \"gray\": image size disagrees"},
        {h + 16 + 32 * SK_RGBA + 8, 1u << 20, 8, 9,
         "field \"rgba\": payload of 1048576 bytes at value offset"},
        {h + 16 + 32 * SK_TOKENS + 16, 9, 4, 9, "field \"tokens\": leading dimension"},
        {h + 16 + 32 * SK_LABEL, 7, 8, 9, "record 9: field \"label\": label 7 outside 0..2"},
        {h + 16 + 32 * SK_ID + 8, 4, 8, 9, "field \"id\": scalar disagrees"},
        {h + 16 + 32 * SK_CAPTION + 8, 1u << 30, 8, 9,
         "field \"caption\": payload of 1073741824 bytes at value offset"},
        {h12 + 16 + 32 * SK_BOXES + 16, 1, 4, 12, "field \"boxes\": payload size disagrees"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tsu_copy(copy, path);
        uint8_t b[8];
        dlc__st64(b, cases[k].value);
        patch(cases[k].at, b, (size_t)cases[k].width);
        expect_read(cases[k].record, DLC_ECORRUPT, cases[k].msg);
    }
    free(copy);
}

Test(store_read, a_damaged_offset_table_is_refused_at_read_and_named_by_verify)
{
    char *copy = tmp_path(dir, "orig.dlc");
    tsu_copy(path, copy);
    uint64_t table;
    size_t len;
    locate("index", &table, &len);
    const uint64_t at3 = record_at(3), size = tsu_file_size(path);
    patch64(table + 8 * 4, at3);
    expect_read(4, DLC_ECORRUPT, "record 4: the header says record 3");
    tsu_copy(copy, path);
    patch64(table + 8 * 4, size - 8);
    expect_read(4, DLC_ECORRUPT, "record 4: at offset");
    tsu_copy(copy, path);
    patch64(table + 8 * 4, UINT64_MAX - 3);
    expect_read(4, DLC_ECORRUPT, "outside the file");
    tsu_copy(copy, path);
    patch64(table + 8 * 4, at3 + 64);
    expect_read(4, DLC_ECORRUPT, "record 4: bad header magic");

    /* A table that points at a faithful copy of the record elsewhere still disagrees with the
     * B-tree: only verify can tell, and it does. */
    tsu_copy(copy, path);
    patch64(table + 8 * 4, record_at(4) + 1);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    uint64_t bad = 0;
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, &bad), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "record 4: the offset table says"), "%s", dlc_errmsg());
    dlc_store_close(s);
    free(copy);
}

Test(store_read, flipped_payload_bytes_are_named_by_field)
{
    dlc_store *s = NULL;
    dlc_store_reader *r = NULL;
    dlc_value v[SK_NUM_FIELDS];
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    cr_assert_eq(dlc_store_read_values(r, 11, v), DLC_OK);
    const uint64_t mask = v[SK_MASK].offset, weight = v[SK_WEIGHT].offset;
    dlc_store_reader_close(r);
    dlc_store_close(s);
    patch(mask + 3, "\xee", 1);
    patch(weight + 7, "\x7f", 1); /* The float's own bytes, in the header. */
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    cr_assert_eq(dlc_store_read_values(r, 11, v), DLC_OK, "checksums are not checked on read");
    cr_assert_eq(dlc_value_verify(s, 11, SK_MASK, &v[SK_MASK]), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "record 11: field \"mask\": checksum mismatch"), "%s",
              dlc_errmsg());
    cr_assert_eq(dlc_value_verify(s, 11, SK_WEIGHT, &v[SK_WEIGHT]), DLC_ECORRUPT);
    cr_assert_eq(dlc_value_verify(s, 11, SK_ID, &v[SK_ID]), DLC_OK);
    uint64_t bad = 0;
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, &bad), DLC_ECORRUPT);
    cr_assert_eq(bad, 1);
    cr_assert(strstr(dlc_errmsg(), "record 11: field \"mask\": checksum mismatch"), "%s",
              dlc_errmsg());
    dlc_store_reader_close(r);
    dlc_store_close(s);
}

/* dlc_store_read_values_pread() gives what dlc_store_read_values() gives, without the map:
 * payload views are NULL, scalars point into the caller's header buffer; a file truncated in
 * place is DLC_ECORRUPT naming the store and the record, never SIGBUS (issue 23, item 13). */
Test(store_read, pread_lookup_matches_the_map_and_names_a_truncated_file)
{
    dlc_store *s = NULL;
    dlc_store_reader *r = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    const size_t cap = dlc_store_header_bound(s);
    cr_assert_gt(cap, 0);
    uint8_t *hdr = malloc(cap);
    dlc_value a[SK_NUM_FIELDS], b[SK_NUM_FIELDS];
    uint64_t end = 0;
    for (uint64_t i = 0; i < 37; i++) {
        cr_assert_eq(dlc_store_read_values(r, i, a), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_store_read_values_pread(s, i, b, hdr, cap), DLC_OK, "%s", dlc_errmsg());
        for (uint32_t f = 0; f < SK_NUM_FIELDS; f++) {
            cr_assert(a[f].offset == b[f].offset && a[f].size == b[f].size &&
                          a[f].xxh3 == b[f].xxh3 && a[f].dim0 == b[f].dim0 &&
                          a[f].dim1 == b[f].dim1 && a[f].i == b[f].i && a[f].file == b[f].file,
                      "record %llu field %u", (unsigned long long)i, f);
            const int scalar =
                a[f].size == 8 && b[f].data && b[f].data >= hdr && b[f].data < hdr + cap;
            cr_assert(scalar || !b[f].data, "a payload view is NULL, a scalar is in the header");
            if (a[f].offset + a[f].size > end)
                end = a[f].offset + a[f].size;
        }
    }
    cr_assert_eq(dlc_store_read_values_pread(s, 37, b, hdr, cap), DLC_ENOTFOUND);
    cr_assert_eq(dlc_store_read_values_pread(s, 0, b, hdr, 4), DLC_EINVAL, "a small buffer");
    /* Cut the file inside the records: the pread lookups say so, by name. */
    dlc_record rec;
    cr_assert_eq(dlc_store_read(r, 20, &rec), DLC_OK);
    cr_assert_eq(truncate(path, (off_t)(rec.offset & ~(uint64_t)4095)), 0);
    dlc_status rc = DLC_OK;
    uint64_t i = 0;
    for (; i < 37 && rc == DLC_OK; i++)
        rc = dlc_store_read_values_pread(s, i, b, hdr, cap);
    cr_assert_eq(rc, DLC_ECORRUPT, "%d %s", rc, dlc_errmsg());
    cr_assert(strstr(dlc_errmsg(), path) && strstr(dlc_errmsg(), "truncated in place") &&
                  strstr(dlc_errmsg(), "record "),
              "%s", dlc_errmsg());
    free(hdr);
    dlc_store_reader_close(r);
    dlc_store_close(s);
}
