/* The store reader (cache/store/store_open.c, cache/store/store_check.c): checksums,
 * verification, and files that are damaged, truncated, foreign or hostile.
 * Every bad file must give an error naming the file (and the record), never
 * a crash. The last test reads from several threads at once.
 * dlc-test-label: threads */
#include "store_test_util.h"

#include <dlcache/tokens.h>

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
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

TestSuite(store_open, .init = setup, .fini = teardown);

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void copy_file(const char *from, const char *to)
{
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "cp '%s' '%s'", from, to) > 0);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

/* File offset of record @p index's payload, through the reader. */
static uint64_t record_offset(const char *path, uint64_t index)
{
    dlc_store *s = NULL;
    dlc_store_reader *r = NULL;
    dlc_record rec;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    cr_assert_eq(dlc_store_read(r, index, &rec), DLC_OK);
    dlc_store_reader_close(r);
    dlc_store_close(s);
    return rec.offset;
}

static void xor_byte(const char *path, uint64_t off, uint8_t mask)
{
    const int fd = open(path, O_RDWR);
    cr_assert(fd >= 0);
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
    b ^= mask;
    cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

typedef struct calls {
    uint64_t progress;
    uint64_t bad;
    uint64_t bad_index;
    uint64_t last_done;
    char msg[512];
    int stop_on_bad;
} calls;

static int on_verify(void *user, const dlc_verify_progress *p)
{
    calls *c = user;
    if (p->bad_status != 0) {
        c->bad++;
        c->bad_index = p->bad_index;
        snprintf(c->msg, sizeof c->msg, "%s", p->bad_msg);
        return c->stop_on_bad;
    }
    c->progress++;
    c->last_done = p->done;
    return 0;
}

Test(store_open, verify_passes_then_names_a_flipped_payload_byte)
{
    char *path = tmp_path(dir, "v.dlc");
    tsu_write_store(path, 20, 0, 0);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, DLC_STORE_SEQUENTIAL, &s), DLC_OK, "%s", dlc_errmsg());
    calls c = {0};
    uint64_t bad = 99;
    cr_assert_eq(dlc_store_verify(s, on_verify, &c, &bad), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(bad, 0);
    cr_assert_eq(c.bad, 0);
    cr_assert(c.progress >= 1, "a final progress call");
    cr_assert_eq(c.last_done, 20);
    dlc_store_close(s);

    /* Record 4 is 256x256x3: flip a byte in the middle of its payload. */
    xor_byte(path, record_offset(path, 4) + 1000, 0x40);
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "a payload byte does not stop open");
    dlc_store_reader *r = NULL;
    dlc_record rec;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    cr_assert_eq(dlc_store_read(r, 4, &rec), DLC_OK);
    cr_assert_eq(dlc_record_verify(s, &rec), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "record 4: checksum mismatch"), "%s", dlc_errmsg());
    cr_assert(strstr(dlc_errmsg(), path), "%s", dlc_errmsg());
    dlc_store_reader_close(r);

    memset(&c, 0, sizeof c);
    cr_assert_eq(dlc_store_verify(s, on_verify, &c, &bad), DLC_ECORRUPT);
    cr_assert_eq(bad, 1);
    cr_assert_eq(c.bad, 1);
    cr_assert_eq(c.bad_index, 4);
    cr_assert(strstr(c.msg, "record 4"), "%s", c.msg);
    cr_assert(strstr(dlc_errmsg(), "record 4: field \"image\": checksum mismatch"),
              "first problem: %s", dlc_errmsg());

    /* A callback that returns non-zero stops the scan. */
    memset(&c, 0, sizeof c);
    c.stop_on_bad = 1;
    cr_assert_eq(dlc_store_verify(s, on_verify, &c, NULL), DLC_ECANCELED);
    dlc_store_close(s);
    free(path);
}

Test(store_open, damaged_record_header_is_named)
{
    char *path = tmp_path(dir, "h.dlc");
    tsu_write_store(path, 12, 0, 0);
    /* The header (TSU_HEADER bytes for the two fields image and label) sits right before the
     * image payload: break record 11's magic. */
    xor_byte(path, record_offset(path, 11) - TSU_HEADER, 0x01);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    dlc_store_reader *r = NULL;
    dlc_record rec;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    cr_assert_eq(dlc_store_read(r, 10, &rec), DLC_OK);
    cr_assert_eq(dlc_store_read(r, 11, &rec), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "record 11: bad header magic"), "%s", dlc_errmsg());
    dlc_store_reader_close(r);
    uint64_t bad = 0;
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, &bad), DLC_ECORRUPT);
    cr_assert_eq(bad, 1);
    dlc_store_close(s);

    /* The image's payload size in its field entry (16 bytes into the header, size at +8) must
     * match its dimensions. */
    xor_byte(path, record_offset(path, 4) - TSU_HEADER + 16 + 8, 0x01);
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK);
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    cr_assert_eq(dlc_store_read(r, 4, &rec), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "record 4: field \"image\": payload size disagrees"), "%s",
              dlc_errmsg());
    dlc_store_reader_close(r);
    dlc_store_close(s);
    free(path);
}

Test(store_open, truncated_file_fails_at_open)
{
    char *path = tmp_path(dir, "t.dlc");
    tsu_write_store(path, 20, 0, 0);
    const uint64_t size = file_size(path);
    cr_assert_eq(truncate(path, (off_t)(size - 3 * 4096)), 0);
    dlc_store *s = (dlc_store *)1;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_ECORRUPT);
    cr_assert_null(s);
    cr_assert(strstr(dlc_errmsg(), "truncated: file has"), "%s", dlc_errmsg());
    cr_assert(strstr(dlc_errmsg(), path), "%s", dlc_errmsg());
    /* Cut inside the second meta page. */
    cr_assert_eq(truncate(path, 4096 + 100), 0);
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "truncated"), "%s", dlc_errmsg());
    free(path);
}

Test(store_open, foreign_files_fail_cleanly)
{
    dlc_store *s = NULL;
    char *missing = tmp_path(dir, "missing.dlc");
    cr_assert_eq(dlc_store_open(missing, 0, &s), -ENOENT);
    cr_assert(strstr(dlc_errmsg(), missing), "%s", dlc_errmsg());
    /* A directory is a store set only with an index. */
    cr_assert_eq(dlc_store_open(dir, 0, &s), DLC_EVERSION, "a directory without index.dlcset");
    cr_assert(strstr(dlc_errmsg(), "not a store or a set: no index.dlcset"), "%s", dlc_errmsg());

    char *empty = tmp_path(dir, "empty.dlc");
    write_bytes(empty, "", 0);
    cr_assert_eq(dlc_store_open(empty, 0, &s), DLC_EVERSION);
    cr_assert(strstr(dlc_errmsg(), "not a dlcache store"), "%s", dlc_errmsg());

    char *garbage = tmp_path(dir, "garbage.dlc");
    uint8_t *junk = malloc(1 << 16);
    for (size_t i = 0; i < (1u << 16); i++)
        junk[i] = (uint8_t)(i * 2654435761u >> 13);
    write_bytes(garbage, junk, 1 << 16);
    cr_assert_eq(dlc_store_open(garbage, 0, &s), DLC_EVERSION);
    cr_assert(strstr(dlc_errmsg(), "not a dlcache store"), "%s", dlc_errmsg());
    write_bytes(garbage, junk, 100);
    cr_assert_eq(dlc_store_open(garbage, 0, &s), DLC_EVERSION);
    free(junk);

    /* A valid LMDB file that is not a store: plain keys in the main database. */
    char *plain = tmp_path(dir, "plain.mdb");
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    cr_assert_eq(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 4);
    cr_assert_eq(mdb_env_open(env, plain, MDB_NOSUBDIR | MDB_NOLOCK, 0644), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
    MDB_val k = {5, "hello"}, v = {5, "world"};
    cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    cr_assert_eq(dlc_store_open(plain, 0, &s), DLC_EVERSION);
    cr_assert(strstr(dlc_errmsg(), "not a dlcache store"), "%s", dlc_errmsg());

    /* Both databases, but no "format" record. */
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_del(txn, dbi, &k, NULL), 0);
    cr_assert_eq(mdb_dbi_open(txn, "meta", MDB_CREATE, &dbi), 0);
    cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
    cr_assert_eq(mdb_dbi_open(txn, "samples", MDB_CREATE, &dbi), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    cr_assert_eq(dlc_store_open(plain, 0, &s), DLC_EVERSION);
    cr_assert(strstr(dlc_errmsg(), "no \"format\""), "%s", dlc_errmsg());
    cr_assert_null(s);
    free(missing);
    free(empty);
    free(garbage);
    free(plain);
}

/* A FIFO, a device or a socket in a store's place is refused at once, named, never waited on:
 * opening a FIFO for reading blocks until a writer comes, so the check must come first (issue
 * 23, item 8: Loader(fifo) and cacheinfo fifo hung forever). The timeout turns a hang into a
 * failure. */
Test(store_open, fifo_and_devices_are_refused_without_blocking, .timeout = 60)
{
    dlc_store *s = NULL;
    char *fifo = tmp_path(dir, "fifo.dlc");
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    cr_assert_eq(dlc_store_open(fifo, 0, &s), DLC_EINVAL);
    cr_assert_null(s);
    cr_assert(strstr(dlc_errmsg(), fifo) && strstr(dlc_errmsg(), "a FIFO, not a regular file"),
              "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_open("/dev/null", 0, &s), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "/dev/null: a character device"), "%s", dlc_errmsg());
    free(fifo);
}

/* Random bytes are "not a dlcache store"; the short text of their code must not call them a
 * store of another version (issue 17: that is for real stores of another version). */
Test(store_open, random_bytes_are_not_called_a_version)
{
    char *junk = tmp_path(dir, "junk.dlc");
    uint8_t bytes[8192];
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (uint8_t)(i * 2246822519u >> 11);
    write_bytes(junk, bytes, sizeof bytes);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(junk, 0, &s), DLC_EVERSION);
    cr_assert(strstr(dlc_errmsg(), "not a dlcache store"), "%s", dlc_errmsg());
    const char *text = dlc_strerror(DLC_EVERSION);
    cr_assert(strstr(text, "not a store"), "%s", text);
    cr_assert_null(strstr(text, "unsupported store format version"), "%s", text);
    free(junk);
}

static void *fail_open_elsewhere(void *path)
{
    dlc_store *s = NULL;
    return (void *)(intptr_t)dlc_store_open(path, 0, &s);
}

/* status.h: dlc_errmsg() holds the detail of the failure just returned (a success leaves it as
 * it was), per thread. */
Test(store_open, errmsg_is_the_failure_just_returned)
{
    char *path = tmp_path(dir, "e.dlc");
    char *missing = tmp_path(dir, "first-missing.dlc");
    char *other = tmp_path(dir, "other-thread.dlc");
    tsu_write_store(path, 3, 0, 0);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(missing, 0, &s), -ENOENT);
    cr_assert(strstr(dlc_errmsg(), "first-missing.dlc"), "%s", dlc_errmsg());

    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    dlc_store_reader *r = NULL;
    dlc_value values[DLC_MAX_FIELDS];
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    cr_assert_eq(dlc_store_read_values(r, 1, values), DLC_OK);
    /* The next failure records its own detail, not the earlier one. */
    cr_assert_eq(dlc_store_read_values(r, 7, values), DLC_ENOTFOUND);
    cr_assert(strstr(dlc_errmsg(), "record 7: no such record"), "%s", dlc_errmsg());
    cr_assert_null(strstr(dlc_errmsg(), "first-missing"), "%s", dlc_errmsg());

    /* A failure on another thread is that thread's. */
    pthread_t t;
    void *ret = NULL;
    cr_assert_eq(pthread_create(&t, NULL, fail_open_elsewhere, other), 0);
    cr_assert_eq(pthread_join(t, &ret), 0);
    cr_assert_eq((int)(intptr_t)ret, -ENOENT);
    cr_assert(strstr(dlc_errmsg(), "record 7"), "%s", dlc_errmsg());
    dlc_store_reader_close(r);
    dlc_store_close(s);
    free(path);
    free(missing);
    free(other);
}

/* Find the first occurrence of @p needle in the file. */
static uint64_t find_in_file(const char *path, const void *needle, size_t n)
{
    const uint64_t size = file_size(path);
    uint8_t *buf = malloc(size);
    FILE *f = fopen(path, "rb");
    cr_assert_eq(fread(buf, 1, size, f), size);
    fclose(f);
    const uint8_t *hit = memmem(buf, size, needle, n);
    cr_assert_not_null(hit);
    const uint64_t off = (uint64_t)(hit - buf);
    free(buf);
    return off;
}

Test(store_open, damaged_or_newer_metadata_is_refused)
{
    char *path = tmp_path(dir, "m.dlc");
    char *copy = tmp_path(dir, "m2.dlc");
    tsu_write_store(path, 6, 0, 0);
    const uint64_t info = find_in_file(path, "DLCSTORE", 8);
    dlc_store *s = NULL;

    copy_file(path, copy);
    xor_byte(copy, info + 16, 0x01); /* count */
    cr_assert_eq(dlc_store_open(copy, 0, &s), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "format record checksum mismatch"), "%s", dlc_errmsg());

    copy_file(path, copy);
    xor_byte(copy, info + 8, 0x01); /* version 2 -> 3 */
    cr_assert_eq(dlc_store_open(copy, 0, &s), DLC_EVERSION);
    cr_assert(strstr(dlc_errmsg(), "format version 3"), "%s", dlc_errmsg());

    copy_file(path, copy);
    const uint64_t labels = find_in_file(path, "cat\0dog\0emu", 12);
    xor_byte(copy, labels + 3, 'x'); /* "catxdog": one name fewer */
    cr_assert_eq(dlc_store_open(copy, 0, &s), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "\"labels\" holds 2 names"), "%s", dlc_errmsg());
    free(path);
    free(copy);
}

/* Mutations of LMDB's own branch and leaf pages: LMDB would follow them out
 * of the map; the page walk at open must refuse every one that matters, and
 * whatever opens must read and verify without crashing. */

/* A copy of the store's @p size bytes at @p orig with damage @p m (0..5) on page @p pg, whose
 * first node is at @p node: the page header's lower bound, the first node's offset, its key size,
 * its data size, the page number, its node flags. The caller frees it. */
static uint8_t *damaged_page(const uint8_t *orig, size_t size, uint64_t pg, uint16_t node, int m)
{
    uint8_t *mut = malloc(size);
    cr_assert_not_null(mut);
    memcpy(mut, orig, size);
    uint8_t *q = mut + pg * 4096;
    switch (m) {
    case 0:
        q[12] = 0xfe;
        q[13] = 0xff;
        break; /* lower */
    case 1:
        q[16] = 0xfc;
        q[17] = 0x0f;
        break; /* node at page end */
    case 2:
        q[node + 6] = 0xff;
        q[node + 7] = 0xff;
        break; /* key size */
    case 3:
        q[node + 0] = 0xff;
        q[node + 2] = 0xff;
        q[node + 3] = 0x7f;
        break;
    case 4:
        q[0] ^= 0x01;
        break; /* page number */
    case 5:
        q[node + 4] = 0x04;
        break; /* node flags */
    }
    return mut;
}

Test(store_open, hostile_lmdb_pages_never_crash)
{
    char *path = tmp_path(dir, "p.dlc");
    char *copy = tmp_path(dir, "p2.dlc");
    /* Enough small records for a two-level samples tree. */
    dlc__store_writer *w = NULL;
    cr_assert_eq(dlc__store_writer_open(path, 0, 0, &w), DLC_OK);
    uint8_t buf[300];
    for (uint64_t i = 0; i < 400; i++) {
        tsu_fill(buf, i, sizeof buf);
        cr_assert_eq(dlc__store_writer_put(w, (int64_t)(i % 3), 10, 10, 3, DLC_ENCODING_RAW, buf,
                                           sizeof buf),
                     DLC_OK);
    }
    const dlc__store_meta meta = {.label_names = tsu_labels, .num_labels = 3};
    cr_assert_eq(dlc__store_writer_finish(w, &meta), DLC_OK, "%s", dlc_errmsg());

    const uint64_t size = file_size(path);
    const uint64_t pages = size / 4096;
    uint8_t *orig = malloc(size);
    FILE *f = fopen(path, "rb");
    cr_assert_eq(fread(orig, 1, size, f), size);
    fclose(f);

    /* (offset in page, value) pairs, applied to the page header and to the
     * first node of the page. */
    int detected[6] = {0};
    for (uint64_t pg = 2; pg < pages; pg++) {
        uint8_t *p = orig + pg * 4096;
        const uint16_t flags = (uint16_t)(p[10] | p[11] << 8);
        if (flags != 1 && flags != 2)
            continue;
        const uint16_t node = (uint16_t)(p[16] | p[17] << 8);
        for (int m = 0; m < 6; m++) {
            uint8_t *mut = damaged_page(orig, size, pg, node, m);
            write_bytes(copy, mut, size);
            free(mut);
            dlc_store *s = NULL;
            const dlc_status rc = dlc_store_open(copy, 0, &s);
            cr_assert(rc == DLC_OK || rc == DLC_ECORRUPT || rc == DLC_EVERSION,
                      "page %llu mutation %d: %d %s", (unsigned long long)pg, m, rc, dlc_errmsg());
            if (rc != DLC_OK) {
                cr_assert(strstr(dlc_errmsg(), copy), "%s", dlc_errmsg());
                detected[m]++;
                continue;
            }
            dlc_store_reader *r = NULL;
            cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
            for (uint64_t i = 0; i < dlc_store_get_info(s)->count; i++) {
                dlc_record rec;
                (void)dlc_store_read(r, i, &rec);
            }
            dlc_store_reader_close(r);
            (void)dlc_store_verify(s, NULL, NULL, NULL);
            dlc_store_close(s);
        }
    }
    for (int m = 0; m < 6; m++)
        cr_assert(detected[m] > 0, "mutation %d never detected", m);
    free(orig);
    free(path);
    free(copy);
}

/* A version 2 store is read through its offset table, never through LMDB's samples tree, so open
 * checks that tree's record but not its pages (it would read every leaf page: the whole file of a
 * store of short documents); dlc_store_verify() walks them before its cursor does. The same
 * mutations as above, on every branch and leaf page of a token store of 3000 short documents (a
 * samples tree of two levels): whatever opens reads every record and verifies without crashing,
 * damage to the samples tree is found by verify, and damage to the other trees still at open. */
Test(store_open, hostile_samples_pages_of_a_version2_store_are_found_by_verify)
{
    char *path = tmp_path(dir, "t.dlc");
    char *copy = tmp_path(dir, "t2.dlc");
    dlc_token_writer_config c;
    dlc_token_writer_config_init(&c);
    c.vocab_size = 1000;
    c.eos_id = 0;
    dlc_token_writer *tw = NULL;
    cr_assert_eq(dlc_token_writer_open(path, &c, &tw), DLC_OK, "%s", dlc_errmsg());
    for (uint32_t d = 0; d < 3000; d++) {
        const uint32_t ids[3] = {d % 997 + 1, d % 13 + 1, 0};
        cr_assert_eq(dlc_token_writer_add(tw, ids, 1 + d % 3), DLC_OK, "%s", dlc_errmsg());
    }
    cr_assert_eq(dlc_token_writer_finish(tw), DLC_OK, "%s", dlc_errmsg());

    const uint64_t size = file_size(path);
    const uint64_t pages = size / 4096;
    uint8_t *orig = malloc(size);
    FILE *f = fopen(path, "rb");
    cr_assert_eq(fread(orig, 1, size, f), size);
    fclose(f);

    int at_open = 0, at_verify = 0, samples_pages = 0;
    for (uint64_t pg = 2; pg < pages; pg++) {
        uint8_t *p = orig + pg * 4096;
        const uint16_t flags = (uint16_t)(p[10] | p[11] << 8);
        if (flags != 1 && flags != 2)
            continue;
        const uint16_t lower = (uint16_t)(p[12] | p[13] << 8);
        const uint16_t node = (uint16_t)(p[16] | p[17] << 8);
        if (lower < 18 || node < 18 || node > 4096 - 8)
            continue; /* No node to damage (an empty page's first offset is free space). */
        int samples_page = 0;
        for (int m = 0; m < 6; m++) {
            uint8_t *mut = damaged_page(orig, size, pg, node, m);
            write_bytes(copy, mut, size);
            free(mut);
            dlc_store *s = NULL;
            dlc_status rc = dlc_store_open(copy, 0, &s);
            cr_assert(rc == DLC_OK || rc == DLC_ECORRUPT || rc == DLC_EVERSION,
                      "page %llu mutation %d: %d %s", (unsigned long long)pg, m, rc, dlc_errmsg());
            if (rc != DLC_OK) {
                cr_assert(strstr(dlc_errmsg(), copy), "%s", dlc_errmsg());
                cr_assert(!strstr(dlc_errmsg(), "samples database"), "%s", dlc_errmsg());
                at_open++;
                continue;
            }
            dlc_store_reader *r = NULL;
            cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
            for (uint64_t i = 0; i < dlc_store_get_info(s)->count; i++) {
                dlc_value v[DLC_MAX_FIELDS];
                (void)dlc_store_read_values(r, i, v);
            }
            dlc_store_reader_close(r);
            rc = dlc_store_verify(s, NULL, NULL, NULL);
            if (rc != DLC_OK && strstr(dlc_errmsg(), "samples database")) {
                at_verify++;
                samples_page = 1;
            }
            dlc_store_close(s);
        }
        samples_pages += samples_page;
    }
    cr_assert(samples_pages > 1, "a samples tree of %d pages", samples_pages);
    cr_assert(at_verify > 0 && at_open > 0, "%d found at open, %d by verify", at_open, at_verify);
    free(orig);
    free(path);
    free(copy);
}

Test(store_open, resident_bytes_are_sane)
{
    char *path = tmp_path(dir, "r.dlc");
    tsu_write_store(path, 14, 0, 0);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    dlc_store_reader *r = NULL;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < 14; i++) {
        dlc_record rec;
        cr_assert_eq(dlc_store_read(r, i, &rec), DLC_OK);
        for (size_t j = 0; j < rec.size; j += 4096)
            sum += rec.data[j]; /* Touch every page of every payload. */
    }
    dlc_store_reader_close(r);
    uint64_t res = 0;
    cr_assert_eq(dlc_store_resident(s, &res), DLC_OK);
    const uint64_t fb = dlc_store_get_info(s)->file_bytes;
    cr_assert(res > 0 && res <= fb, "resident %llu of %llu (%llu)", (unsigned long long)res,
              (unsigned long long)fb, (unsigned long long)sum);
    cr_assert(res % 4096 == 0 || res == fb);
    dlc_store_close(s);
    free(path);
}

typedef struct thread_arg {
    const dlc_store *s;
    uint64_t digest;
    dlc_status rc;
} thread_arg;

static void *read_all(void *p)
{
    thread_arg *a = p;
    dlc_store_reader *r = NULL;
    a->rc = dlc_store_reader_open(a->s, &r);
    if (a->rc != DLC_OK)
        return NULL;
    uint64_t d = 0;
    const uint64_t n = dlc_store_get_info(a->s)->count;
    for (int pass = 0; pass < 3; pass++) {
        for (uint64_t k = 0; k < n; k++) {
            const uint64_t i = (k * 7 + (uint64_t)pass) % n;
            dlc_record rec;
            a->rc = dlc_store_read(r, i, &rec);
            if (a->rc == DLC_OK)
                a->rc = dlc_record_verify(a->s, &rec);
            if (a->rc != DLC_OK)
                break;
            d += XXH3_64bits(rec.data, rec.size) ^ i;
        }
    }
    a->digest = d;
    dlc_store_reader_close(r);
    return NULL;
}

Test(store_open, one_store_many_reader_threads)
{
    char *path = tmp_path(dir, "th.dlc");
    tsu_write_store(path, 30, 0, 0);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    pthread_t t[4];
    thread_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (thread_arg){.s = s};
        cr_assert_eq(pthread_create(&t[i], NULL, read_all, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(a[i].rc, DLC_OK);
        cr_assert_eq(a[i].digest, a[0].digest);
    }
    dlc_store_close(s);
    free(path);
}
