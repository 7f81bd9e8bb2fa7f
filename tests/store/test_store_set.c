/* Store sets (cache/store/store_set*.c, include/dlcache/set.h): sets written with the writer API
 * and joined, read against a single store of the same records; verify; every refusal of join and
 * open; a damaged index; shards replaced under the index. */
#include "set_fixture.h"
#include "store_format.h"
#include "store_test_util.h"
#include "tmpdir_util.h"

#include <criterion/criterion.h>
#include <dlcache/set.h>
#include <dlcache/store.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

TMPDIR_SUITE(store_set);

#define N_ITEMS 40u
#define PARTS 4u
#define SET_ID 0x5e7u

/* DIR/set (a set of PARTS parts of N_ITEMS items) and DIR/single.dlc, of the same records. */
static char *make_both(char **single, sf_skip_fn skip)
{
    char *set = tmp_path(dir, "set");
    *single = tmp_path(dir, "single.dlc");
    cr_assert_eq(sf_make_set(set, N_ITEMS, PARTS, SET_ID, skip), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(sf_make_single(*single, N_ITEMS, skip), DLC_OK, "%s", dlc_errmsg());
    return set;
}

static dlc_store *open_ok(const char *path)
{
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s: %s", path, dlc_errmsg());
    return s;
}

/* Open @p path, expect @p want and a message holding each of @p needles (NULL-terminated). */
static void open_fails(const char *path, dlc_status want, const char *const *needles)
{
    dlc_store *s = NULL;
    const dlc_status rc = dlc_store_open(path, 0, &s);
    cr_assert_eq(rc, want, "open %s: %d, expected %d (%s)", path, rc, want, dlc_errmsg());
    cr_assert_null(s);
    for (; needles && *needles; needles++)
        cr_assert_not_null(strstr(dlc_errmsg(), *needles), "\"%s\" not in: %s", *needles,
                           dlc_errmsg());
}

static void join_fails(const char *set, dlc_status want, const char *const *needles)
{
    const dlc_status rc = dlc__set_join(set, NULL);
    cr_assert_eq(rc, want, "join: %d, expected %d (%s)", rc, want, dlc_errmsg());
    for (; needles && *needles; needles++)
        cr_assert_not_null(strstr(dlc_errmsg(), *needles), "\"%s\" not in: %s", *needles,
                           dlc_errmsg());
}

/* Every record of @p a and @p b holds the same values; @p a's values name the files that
 * dlc_store_record_file() gives. */
static void same_records(const dlc_store *a, const dlc_store *b)
{
    const dlc_store_info *ia = dlc_store_get_info(a), *ib = dlc_store_get_info(b);
    cr_assert_eq(ia->count, ib->count);
    dlc_store_reader *ra = NULL, *rb = NULL;
    cr_assert_eq(dlc_store_reader_open(a, &ra), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_reader_open(b, &rb), DLC_OK, "%s", dlc_errmsg());
    dlc_value va[DLC_MAX_FIELDS], vb[DLC_MAX_FIELDS];
    for (uint64_t i = 0; i < ia->count; i++) {
        cr_assert_eq(dlc_store_read_values(ra, i, va), DLC_OK, "%llu: %s", (unsigned long long)i,
                     dlc_errmsg());
        cr_assert_eq(dlc_store_read_values(rb, i, vb), DLC_OK, "%s", dlc_errmsg());
        const uint32_t file = dlc_store_record_file(a, i);
        for (uint32_t f = 0; f < ia->num_fields; f++) {
            cr_assert_eq(va[f].size, vb[f].size, "record %llu field %u", (unsigned long long)i, f);
            cr_assert_eq(memcmp(va[f].data, vb[f].data, va[f].size), 0);
            cr_assert_eq(va[f].dim0, vb[f].dim0);
            cr_assert_eq(va[f].dim1, vb[f].dim1);
            cr_assert_eq(va[f].xxh3, vb[f].xxh3);
            cr_assert_eq(va[f].i, vb[f].i);
            cr_assert_eq(memcmp(&va[f].f, &vb[f].f, sizeof va[f].f), 0);
            cr_assert_eq(va[f].file, file);
            cr_assert_eq(dlc_value_verify(a, i, f, &va[f]), DLC_OK, "%s", dlc_errmsg());
            /* The offset is in that file: its bytes are there. */
            if (va[f].size) {
                uint8_t buf[512];
                const size_t n = va[f].size < sizeof buf ? va[f].size : sizeof buf;
                cr_assert_eq(pread(dlc_store_file_fd(a, file), buf, n, (off_t)va[f].offset),
                             (ssize_t)n);
                cr_assert_eq(memcmp(buf, va[f].data, n), 0);
            }
        }
        dlc_record ra1, rb1;
        cr_assert_eq(dlc_store_read(ra, i, &ra1), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_store_read(rb, i, &rb1), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(ra1.index, i);
        cr_assert_eq(ra1.label, rb1.label);
        cr_assert_eq(ra1.size, rb1.size);
        cr_assert_eq(memcmp(ra1.data, rb1.data, ra1.size), 0);
        cr_assert_eq(dlc_record_verify(a, &ra1), DLC_OK);
    }
    cr_assert_eq(dlc_store_read_values(ra, ia->count, va), DLC_ENOTFOUND);
    cr_assert_eq(dlc_store_record_file(a, ia->count), UINT32_MAX);
    dlc_store_reader_close(ra);
    dlc_store_reader_close(rb);
}

/* The schemas of @p a and @p b are the same bytes. */
static void same_schema(const dlc_store *a, const dlc_store *b)
{
    const uint32_t nf = dlc_store_get_info(a)->num_fields;
    cr_assert_eq(nf, dlc_store_get_info(b)->num_fields);
    for (uint32_t i = 0; i < nf; i++) {
        uint8_t ea[DLC__SCHEMA_ENTRY_SIZE], eb[DLC__SCHEMA_ENTRY_SIZE];
        dlc__schema_entry_store(ea, &dlc_store_fields(a)[i]);
        dlc__schema_entry_store(eb, &dlc_store_fields(b)[i]);
        cr_assert_eq(memcmp(ea, eb, sizeof ea), 0, "field %u (%s): flags %x/%x max %u/%u", i,
                     dlc_store_fields(a)[i].name, dlc_store_fields(a)[i].flags,
                     dlc_store_fields(b)[i].flags, dlc_store_fields(a)[i].max_dim0,
                     dlc_store_fields(b)[i].max_dim0);
    }
}

Test(store_set, reads_every_record_as_a_single_store_does)
{
    char *single = NULL;
    char *set = make_both(&single, sf_skip_some);
    dlc_store *a = open_ok(set), *b = open_ok(single);
    same_schema(a, b);
    /* The union: image and emb VARIABLE (parts differ), pair fixed (every part has 2). */
    const dlc_field *f = dlc_store_fields(a);
    cr_assert(f[0].flags & DLC_FIELD_VARIABLE);
    cr_assert_eq(f[0].max_dim0, 12);
    cr_assert(f[3].flags & DLC_FIELD_VARIABLE);
    cr_assert_eq(f[3].max_dim0, 3);
    cr_assert(!(f[4].flags & DLC_FIELD_VARIABLE));
    cr_assert_eq(f[4].shape[0], 2);
    same_records(a, b);

    const dlc_store_info *ia = dlc_store_get_info(a), *ib = dlc_store_get_info(b);
    cr_assert_eq(ia->format_version, 2);
    cr_assert_eq(ia->count, ib->count);
    cr_assert_eq(ia->skipped, ib->skipped);
    cr_assert_eq(ia->payload_bytes, ib->payload_bytes);
    cr_assert_eq(ia->num_labels, 3);
    cr_assert_eq(ia->label_field, ib->label_field);
    cr_assert_eq(ia->image_field, ib->image_field);
    cr_assert_eq(ia->channels, 3);
    for (uint32_t l = 0; l < 3; l++) {
        cr_assert_eq(dlc_store_label_counts(a)[l], dlc_store_label_counts(b)[l]);
        cr_assert_str_eq(dlc_store_label_name(a, l), sf_labels[l]);
    }
    cr_assert_str_eq(dlc_store_path(a), set);

    /* Files: the shards, their sizes summing to the set's, the digest over theirs. */
    cr_assert_eq(dlc_store_num_files(a), PARTS);
    cr_assert_eq(dlc_store_num_files(b), 1);
    cr_assert_eq(dlc_store_file_fd(b, 0), dlc_store_fd(b));
    cr_assert_eq(dlc_store_file_fd(a, PARTS), -1);
    cr_assert_null(dlc_store_file_path(a, PARTS));
    uint64_t bytes = 0;
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    for (uint32_t k = 0; k < PARTS; k++) {
        char *p = sf_part_path(set, k, PARTS);
        cr_assert_str_eq(dlc_store_file_path(a, k), p);
        cr_assert_eq(dlc_store_file_bytes(a, k), tsu_file_size(p));
        dlc_store *part = open_ok(p);
        uint8_t le[8];
        dlc__st64(le, dlc_store_get_info(part)->content_digest);
        XXH3_64bits_update(st, le, 8);
        dlc_store_close(part);
        bytes += tsu_file_size(p);
        free(p);
    }
    cr_assert_eq(ia->file_bytes, bytes);
    cr_assert_eq(ia->content_digest, XXH3_64bits_digest(st));
    XXH3_freeState(st);
    uint64_t resident = 0;
    cr_assert_eq(dlc_store_resident(a, &resident), DLC_OK);
    cr_assert_leq(resident, ia->file_bytes);
    /* The first shard's metadata. */
    const void *v;
    size_t n;
    cr_assert_eq(dlc_store_meta(a, DLC__META_SET_PART, &v, &n), DLC_OK);
    cr_assert_eq(n, DLC__SET_PART_SIZE);
    dlc__set_part sp;
    cr_assert_eq(dlc__set_part_decode(v, n, "x", &sp), DLC_OK);
    cr_assert_eq(sp.part, 0);
    cr_assert_eq(sp.parts, PARTS);
    cr_assert_eq(sp.set_id, SET_ID);
    cr_assert_eq(dlc_store_meta(b, DLC__META_SET_PART, &v, &n), DLC_ENOTFOUND);
    dlc_store_close(a);
    dlc_store_close(b);
    free(set);
    free(single);
}

/* Items of part 2 of 4 (items 20..29 of 40) and every seventh: part 2 has no record. */
static int skip_part2(uint64_t i, uint64_t n)
{
    return (i >= 2 * n / 4 && i < 3 * n / 4) || i % 7 == 3;
}

Test(store_set, an_empty_part_and_a_set_of_one_read_like_a_single_store)
{
    char *single = NULL;
    char *set = make_both(&single, skip_part2);
    dlc_store *a = open_ok(set), *b = open_ok(single);
    cr_assert_eq(dlc_store_file_bytes(a, 2) > 0, 1);
    cr_assert_eq(dlc_store_get_info(a)->count, dlc_store_get_info(b)->count);
    same_schema(a, b);
    same_records(a, b);
    dlc_store_close(a);

    /* One part: a set of one. */
    char *one = tmp_path(dir, "one");
    cr_assert_eq(sf_make_set(one, N_ITEMS, 1, 7, skip_part2), DLC_OK, "%s", dlc_errmsg());
    a = open_ok(one);
    cr_assert_eq(dlc_store_num_files(a), 1);
    same_schema(a, b);
    same_records(a, b);
    cr_assert_eq(dlc_store_verify(a, NULL, NULL, NULL), DLC_OK, "%s", dlc_errmsg());
    dlc_store_close(a);
    dlc_store_close(b);
    free(one);
    free(set);
    free(single);
}

typedef struct progress {
    uint64_t calls, last_done, total, bad_calls, bad_index, bytes;
    char bad_msg[1024];
} progress;

static int on_progress(void *user, const dlc_verify_progress *p)
{
    progress *pr = user;
    pr->calls++;
    cr_assert_geq(p->done, pr->last_done, "the sum never goes back");
    pr->last_done = p->done;
    pr->total = p->total;
    pr->bytes = p->bytes_done;
    if (p->bad_status) {
        pr->bad_calls++;
        pr->bad_index = p->bad_index;
        snprintf(pr->bad_msg, sizeof pr->bad_msg, "%s", p->bad_msg);
    }
    return 0;
}

/* Flip one byte of the first payload byte of field @p f of global record @p index. */
static void flip_payload(const char *set, uint64_t index, uint32_t f, uint32_t *file)
{
    dlc_store *s = open_ok(set);
    dlc_store_reader *r = NULL;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    dlc_value v[DLC_MAX_FIELDS];
    cr_assert_eq(dlc_store_read_values(r, index, v), DLC_OK, "%s", dlc_errmsg());
    *file = v[f].file;
    char *path = strdup(dlc_store_file_path(s, v[f].file));
    const uint64_t off = v[f].offset;
    dlc_store_reader_close(r);
    dlc_store_close(s);
    const int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    uint8_t c;
    cr_assert_eq(pread(fd, &c, 1, (off_t)off), 1);
    c ^= 0x40;
    cr_assert_eq(pwrite(fd, &c, 1, (off_t)off), 1);
    close(fd);
    free(path);
}

Test(store_set, verify_is_clean_then_names_a_flipped_byte_with_its_shard)
{
    char *single = NULL;
    char *set = make_both(&single, sf_skip_some);
    dlc_store *s = open_ok(set);
    const uint64_t count = dlc_store_get_info(s)->count;
    progress pr = {0};
    uint64_t bad = 99;
    cr_assert_eq(dlc_store_verify(s, on_progress, &pr, &bad), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(bad, 0);
    cr_assert_eq(pr.last_done, count, "progress summed over the shards");
    cr_assert_eq(pr.total, count);
    cr_assert_eq(pr.bytes, dlc_store_get_info(s)->payload_bytes);
    cr_assert_eq(pr.bad_calls, 0);
    dlc_store_close(s);

    /* A record in the last shard: the global record, its shard and its number there. */
    const uint64_t victim = count - 5;
    uint32_t file = 0;
    flip_payload(set, victim, 0, &file);
    cr_assert_eq(file, 3);
    s = open_ok(set); /* Open checks structure, not every payload's hash. */
    dlc_store_reader *r = NULL;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    dlc_value v[DLC_MAX_FIELDS];
    cr_assert_eq(dlc_store_read_values(r, victim, v), DLC_OK);
    cr_assert_eq(dlc_value_verify(s, victim, 0, &v[0]), DLC_ECORRUPT);
    char want[256];
    snprintf(want, sizeof want, "record %llu (record ", (unsigned long long)victim);
    cr_assert_not_null(strstr(dlc_errmsg(), want), "%s", dlc_errmsg());
    cr_assert_not_null(strstr(dlc_errmsg(), "of shard part-00003-of-00004.dlc"), "%s",
                       dlc_errmsg());
    dlc_store_reader_close(r);

    memset(&pr, 0, sizeof pr);
    cr_assert_eq(dlc_store_verify(s, on_progress, &pr, &bad), DLC_ECORRUPT);
    cr_assert_eq(bad, 1);
    cr_assert_eq(pr.bad_calls, 1);
    cr_assert_eq(pr.bad_index, victim, "the global record number");
    cr_assert_not_null(strstr(pr.bad_msg, want), "%s", pr.bad_msg);
    cr_assert_not_null(strstr(pr.bad_msg, "part-00003-of-00004.dlc"), "%s", pr.bad_msg);
    cr_assert_not_null(strstr(pr.bad_msg, "checksum mismatch"), "%s", pr.bad_msg);
    cr_assert_not_null(strstr(dlc_errmsg(), "part-00003-of-00004.dlc"), "%s", dlc_errmsg());
    cr_assert_not_null(strstr(dlc_errmsg(), set), "%s", dlc_errmsg());
    dlc_store_close(s);
    free(set);
    free(single);
}

/* DIR/set with its PARTS parts written, not joined. */
static char *parts_only(void)
{
    char *set = tmp_path(dir, "set");
    cr_assert_eq(mkdir(set, 0755), 0);
    for (uint32_t k = 0; k < PARTS; k++)
        cr_assert_eq(sf_write_part(set, N_ITEMS, k, PARTS, SET_ID, sf_skip_some), DLC_OK, "%s",
                     dlc_errmsg());
    return set;
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    fclose(f);
}

static uint8_t *read_file(const char *path, size_t *n)
{
    uint8_t *p = NULL;
    cr_assert_eq(dlc__set_index_read(path, &p, n), DLC_OK, "%s", dlc_errmsg());
    return p;
}

Test(store_set, join_writes_the_index_once_and_again_the_same_bytes)
{
    char *set = parts_only();
    /* Without an index the directory is neither a store nor a set, and says what to do. */
    open_fails(set, DLC_EVERSION,
               (const char *[]){"not a store or a set", "index.dlcset", "dlc_set_join", NULL});
    /* A part being written is not a part. */
    char *tmp = tmp_path(set, "part-00001-of-00004.dlc.tmp-99999999");
    write_file(tmp, "partial", 7);
    dlc_set_join_report rep;
    cr_assert_eq(dlc__set_join(set, &rep), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(rep.num_shards, PARTS);
    cr_assert_eq(rep.set_id, SET_ID);
    cr_assert_eq(rep.temp_files, 1);
    cr_assert_eq(rep.unchanged, 0);
    char *index = tmp_path(set, "index.dlcset");
    size_t n1, n2;
    uint8_t *first = read_file(index, &n1);
    struct stat st1, st2;
    cr_assert_eq(stat(index, &st1), 0);
    cr_assert_eq(dlc__set_join(set, &rep), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(rep.unchanged, 1, "a second join finds the same bytes");
    uint8_t *second = read_file(index, &n2);
    cr_assert_eq(n1, n2);
    cr_assert_eq(memcmp(first, second, n1), 0);
    cr_assert_eq(stat(index, &st2), 0);
    cr_assert_eq(st1.st_ino, st2.st_ino, "left in place");
    /* An index the same bytes as a fresh join of the same parts in another directory. */
    char *set2 = tmp_path(dir, "set2");
    cr_assert_eq(sf_make_set(set2, N_ITEMS, PARTS, SET_ID, sf_skip_some), DLC_OK);
    char *index2 = tmp_path(set2, "index.dlcset");
    uint8_t *third = read_file(index2, &n2);
    cr_assert_eq(n1, n2);
    cr_assert_eq(memcmp(first, third, n1), 0, "the index is a pure function of the parts");
    dlc_store *s = open_ok(set);
    cr_assert_eq(dlc_store_get_info(s)->count, rep.count);
    cr_assert_eq(dlc_store_get_info(s)->file_bytes, rep.file_bytes);
    dlc_store_close(s);
    cr_assert(!tsu_has_temp(set2), "no temporary file left by join");
    free(first);
    free(second);
    free(third);
    free(index);
    free(index2);
    free(set2);
    free(tmp);
    free(set);
}

Test(store_set, join_refuses_a_missing_part_and_names_it)
{
    char *set = parts_only();
    char *p2 = sf_part_path(set, 2, PARTS), *p3 = sf_part_path(set, 3, PARTS);
    cr_assert_eq(unlink(p2), 0);
    cr_assert_eq(unlink(p3), 0);
    join_fails(set, -ENOENT,
               (const char *[]){"2 of 4 parts missing", "part-00002-of-00004.dlc",
                                "part-00003-of-00004.dlc", NULL});
    /* Its temporary file is mentioned, not taken. */
    char *tmp = tmp_path(set, "part-00002-of-00004.dlc.tmp-123");
    write_file(tmp, "x", 1);
    join_fails(set, -ENOENT, (const char *[]){"still being written", NULL});
    char *index = tmp_path(set, "index.dlcset");
    cr_assert_neq(access(index, F_OK), 0, "no index written");
    free(index);
    free(tmp);
    free(p2);
    free(p3);
    free(set);
}

Test(store_set, join_refuses_duplicates_other_n_and_misnamed_parts)
{
    char *set = parts_only();
    char *p1 = sf_part_path(set, 1, PARTS), *p2 = sf_part_path(set, 2, PARTS);
    /* Two files for one part. */
    char *dup = tmp_path(set, "part-1-of-4.dlc");
    tsu_copy(p1, dup);
    join_fails(set, DLC_EINVAL,
               (const char *[]){"two files for part 1 of 4", "part-1-of-4.dlc",
                                "part-00001-of-00004.dlc", NULL});
    cr_assert_eq(unlink(dup), 0);
    /* A part of another N. */
    char *other = tmp_path(set, "part-00000-of-00003.dlc");
    tsu_copy(p1, other);
    join_fails(set, DLC_EINVAL,
               (const char *[]){"parts of different sets", "part-00000-of-00003.dlc", NULL});
    cr_assert_eq(unlink(other), 0);
    /* Part 1 copied over part 2: its set_part record says which it is. */
    char *save = tmp_path(dir, "save.dlc");
    tsu_copy(p2, save);
    tsu_copy(p1, p2);
    join_fails(set, DLC_EINVAL,
               (const char *[]){"part-00002-of-00004.dlc holds part 1 of 4", NULL});
    tsu_copy(save, p2);
    /* A part numbered past its N. */
    char *past = tmp_path(set, "part-00004-of-00004.dlc");
    tsu_copy(p1, past);
    join_fails(set, DLC_EINVAL, (const char *[]){"part 4 of 4 cannot exist", NULL});
    cr_assert_eq(unlink(past), 0);
    /* Nothing to join. */
    char *empty = tmp_path(dir, "empty");
    cr_assert_eq(mkdir(empty, 0755), 0);
    join_fails(empty, DLC_EINVAL, (const char *[]){"no part-*-of-*.dlc files", NULL});
    join_fails("/nonexistent/dlc-set", -ENOENT, NULL);
    cr_assert_eq(dlc__set_join(set, NULL), DLC_OK, "%s", dlc_errmsg());
    free(empty);
    free(past);
    free(save);
    free(other);
    free(dup);
    free(p1);
    free(p2);
    free(set);
}

Test(store_set, join_refuses_a_foreign_part_a_plain_store_and_a_corrupt_part)
{
    char *set = parts_only();
    char *p3 = sf_part_path(set, 3, PARTS), *p1 = sf_part_path(set, 1, PARTS);
    char *save = tmp_path(dir, "save.dlc");
    tsu_copy(p3, save);
    /* Part 3 of a build from other sources or options: another set_id. */
    cr_assert_eq(sf_write_part(set, N_ITEMS, 3, PARTS, SET_ID + 1, sf_skip_some), DLC_OK);
    join_fails(set, DLC_EINVAL,
               (const char *[]){"part-00003-of-00004.dlc was built from other sources or options",
                                "1 such part", NULL});
    /* A store written on its own in its place. */
    cr_assert_eq(sf_write(p3, 30, 40, N_ITEMS, 0, 0, 0, sf_skip_some), DLC_OK);
    join_fails(set, DLC_EINVAL,
               (const char *[]){"part-00003-of-00004.dlc", "not a part of a set", NULL});
    tsu_copy(save, p3);
    /* A damaged part: the real open's checks refuse it, named. */
    const uint64_t size = tsu_file_size(p1);
    cr_assert_eq(truncate(p1, (off_t)(size - 4096)), 0);
    join_fails(set, DLC_ECORRUPT,
               (const char *[]){"part part-00001-of-00004.dlc cannot be used", "truncated", NULL});
    /* Items that do not follow: part 1 rebuilt over other items, with the right id. */
    char *p1path = sf_part_path(set, 1, PARTS);
    cr_assert_eq(sf_write(p1path, 11, 20, N_ITEMS, 1, PARTS, SET_ID, sf_skip_some), DLC_OK);
    join_fails(set, DLC_EINVAL, (const char *[]){"do not follow the part before it", NULL});
    cr_assert_eq(sf_write_part(set, N_ITEMS, 1, PARTS, SET_ID, sf_skip_some), DLC_OK);
    cr_assert_eq(dlc__set_join(set, NULL), DLC_OK, "%s", dlc_errmsg());
    free(p1path);
    free(save);
    free(p1);
    free(p3);
    free(set);
}

Test(store_set, writer_refuses_bad_part_numbers)
{
    char *path = tmp_path(dir, "p.dlc");
    dlc_writer *w = NULL;
    const dlc_writer_config cfg = {.struct_size = sizeof(dlc_writer_config),
                                   .fields = sf_fields,
                                   .num_fields = SF_NUM_FIELDS,
                                   .label_names = sf_labels,
                                   .num_labels = 3};
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK);
    cr_assert_eq(dlc__writer_set_part(w, 4, 4, 1, 0, 1), DLC_EINVAL);
    cr_assert_eq(dlc__writer_set_part(w, 0, 0, 1, 0, 1), DLC_EINVAL);
    cr_assert_eq(dlc__writer_set_part(w, 0, 65537, 1, 0, 1), DLC_EINVAL);
    cr_assert_eq(dlc__writer_set_part(w, 0, 2, 1, 5, 4), DLC_EINVAL);
    cr_assert_eq(dlc__writer_set_part(w, 1, 2, 1, 4, 4), DLC_OK);
    /* A part may have no record. */
    cr_assert_eq(dlc_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
    dlc_store *s = open_ok(path);
    cr_assert_eq(dlc_store_get_info(s)->count, 0);
    dlc_store_close(s);
    free(path);
}

/* The index of @p set re-hashed after a change, so the structural checks behind the checksum
 * are reached. */
static void rehash(uint8_t *p, size_t n)
{
    dlc__st64(p + n - 8, XXH3_64bits(p, n - 8));
}

Test(store_set, every_flipped_byte_of_the_index_is_refused)
{
    char *set = tmp_path(dir, "set");
    cr_assert_eq(sf_make_set(set, N_ITEMS, PARTS, SET_ID, sf_skip_some), DLC_OK);
    char *index = tmp_path(set, "index.dlcset");
    size_t n = 0;
    uint8_t *good = read_file(index, &n);
    cr_assert_eq(n, 56 + 96 * PARTS + 128 * SF_NUM_FIELDS + sizeof "cat\0dog\0emu" + 8);
    uint8_t *bad = malloc(n);
    /* Every byte, each of its bits in turn over the test's bytes: the checksum covers all of
     * them, reserved word and name padding included, so nothing opens. */
    for (size_t i = 0; i < n; i++) {
        memcpy(bad, good, n);
        bad[i] ^= (uint8_t)(1u << (i % 8));
        write_file(index, bad, n);
        dlc_store *s = NULL;
        const dlc_status rc = dlc_store_open(set, 0, &s);
        cr_assert(rc == DLC_ECORRUPT || (i < 12 && rc == DLC_EVERSION), "byte %zu flipped: %d (%s)",
                  i, rc, dlc_errmsg());
        cr_assert_not_null(strstr(dlc_errmsg(), "index.dlcset"), "byte %zu: %s", i, dlc_errmsg());
    }
    /* Behind the checksum: the reserved word, a name's padding, a first, the schema hash, the
     * label block, a truncated or extended file. */
    struct {
        size_t at;
        uint8_t x;
        const char *why;
    } cases[] = {
        {52, 1, "reserved word"},
        {56 + 40, 'x', "its name is not"},
        {56 + 96 + 72, 1, "first record"},
        {56 + 96 * (PARTS - 1) + 64, 1, "the shards hold"},
        {32, 1, "schema hash"},
        {12, 0x7f, "bytes, but"},
        {n - 9, 'x', "label block"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(bad, good, n);
        bad[cases[c].at] ^= cases[c].x;
        rehash(bad, n);
        write_file(index, bad, n);
        open_fails(set, DLC_ECORRUPT, (const char *[]){cases[c].why, NULL});
    }
    memcpy(bad, good, n);
    memcpy(bad + 56, "../single.dlc", 13);
    rehash(bad, n);
    write_file(index, bad, n);
    open_fails(set, DLC_ECORRUPT, (const char *[]){"its name is not", NULL});
    write_file(index, good, n - 1);
    open_fails(set, DLC_ECORRUPT, (const char *[]){"bytes, but", NULL});
    write_file(index, "DLCSET01\2\0\0\0", 12);
    open_fails(set, DLC_EVERSION, (const char *[]){"version 2", NULL});
    write_file(index, good, n);
    dlc_store *s = open_ok(set);
    dlc_store_close(s);
    free(bad);
    free(good);
    free(index);
    free(set);
}

Test(store_set, a_shard_replaced_removed_or_damaged_is_refused_by_name)
{
    char *set = tmp_path(dir, "set");
    cr_assert_eq(sf_make_set(set, N_ITEMS, PARTS, SET_ID, sf_skip_some), DLC_OK);
    char *p1 = sf_part_path(set, 1, PARTS), *p2 = sf_part_path(set, 2, PARTS);
    char *save = tmp_path(dir, "save.dlc");
    tsu_copy(p1, save);
    /* Part 1 of another build. */
    cr_assert_eq(sf_write_part(set, N_ITEMS, 1, PARTS, SET_ID + 1, sf_skip_some), DLC_OK);
    open_fails(set, DLC_ECORRUPT,
               (const char *[]){"shard part-00001-of-00004.dlc", "other sources or options", NULL});
    /* The same part rebuilt from other records (same id, other content). */
    cr_assert_eq(sf_write(p1, 10, 20, N_ITEMS, 1, PARTS, SET_ID, NULL), DLC_OK);
    open_fails(set, DLC_ECORRUPT,
               (const char *[]){"shard part-00001-of-00004.dlc", "records, the index says", NULL});
    /* Part 2 in part 1's place. */
    tsu_copy(p2, p1);
    open_fails(set, DLC_ECORRUPT,
               (const char *[]){"shard part-00001-of-00004.dlc", "it is part 2 of 4", NULL});
    /* A plain store. */
    cr_assert_eq(sf_write(p1, 10, 20, N_ITEMS, 0, 0, 0, sf_skip_some), DLC_OK);
    open_fails(set, DLC_ECORRUPT,
               (const char *[]){"shard part-00001-of-00004.dlc", "not a part of a set", NULL});
    /* Not a store at all, then a truncated one, then none. */
    write_file(p1, "hello", 5);
    open_fails(set, DLC_EVERSION, (const char *[]){"shard part-00001-of-00004.dlc", NULL});
    tsu_copy(save, p1);
    cr_assert_eq(truncate(p1, (off_t)(tsu_file_size(save) - 4096)), 0);
    open_fails(set, DLC_ECORRUPT,
               (const char *[]){"shard part-00001-of-00004.dlc", "truncated", NULL});
    cr_assert_eq(unlink(p1), 0);
    open_fails(set, -ENOENT, (const char *[]){"shard part-00001-of-00004.dlc is missing", NULL});
    /* Put back: the set opens again. */
    tsu_copy(save, p1);
    dlc_store *s = open_ok(set);
    dlc_store_close(s);
    free(save);
    free(p1);
    free(p2);
    free(set);
}

/* A FIFO as a set's index or as one of its parts is refused by name at once, never waited on
 * (issue 23, item 8); the timeout turns a hang into a failure. */
Test(store_set, a_fifo_index_or_part_is_refused_without_blocking, .timeout = 60)
{
    char *set = tmp_path(dir, "set");
    cr_assert_eq(sf_make_set(set, N_ITEMS, PARTS, SET_ID, sf_skip_some), DLC_OK);
    char *p2 = sf_part_path(set, 2, PARTS);
    char *save = tmp_path(dir, "save.dlc");
    tsu_copy(p2, save);
    cr_assert_eq(unlink(p2), 0);
    cr_assert_eq(mkfifo(p2, 0644), 0);
    open_fails(set, DLC_EINVAL,
               (const char *[]){"part-00002-of-00004.dlc", "a FIFO, not a regular file", NULL});
    cr_assert_eq(unlink(p2), 0);
    tsu_copy(save, p2);
    char *index = tmp_path(set, "index.dlcset");
    cr_assert_eq(unlink(index), 0);
    cr_assert_eq(mkfifo(index, 0644), 0);
    open_fails(set, DLC_ECORRUPT, (const char *[]){"index.dlcset", "a FIFO", NULL});
    free(index);
    free(save);
    free(p2);
    free(set);
}

Test(store_set, a_damaged_record_is_named_with_the_set_and_its_shard)
{
    char *set = tmp_path(dir, "set");
    cr_assert_eq(sf_make_set(set, N_ITEMS, PARTS, SET_ID, sf_skip_some), DLC_OK);
    dlc_store *s = open_ok(set);
    dlc_store_reader *r = NULL;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    dlc_value v[DLC_MAX_FIELDS];
    const uint64_t victim = 12; /* In part 1, which starts at record 9. */
    cr_assert_eq(dlc_store_read_values(r, victim, v), DLC_OK);
    cr_assert_eq(v[0].file, 1);
    /* The record's header: its image payload is 48 mod 64 into the value, after a header of
     * 16 + 32 * 7 bytes rounded to 48 mod 64 (240): the value starts 240 bytes before it. */
    const uint64_t value = v[0].offset - 240;
    const char *path = dlc_store_file_path(s, 1);
    const int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    uint8_t m;
    cr_assert_eq(pread(fd, &m, 1, (off_t)value), 1);
    cr_assert_eq(m, 0x44, "the header's magic starts with 'D'");
    m ^= 0xff;
    cr_assert_eq(pwrite(fd, &m, 1, (off_t)value), 1);
    close(fd);
    cr_assert_eq(dlc_store_read_values(r, victim, v), DLC_ECORRUPT);
    char want[512];
    snprintf(want, sizeof want,
             "%s: record 12 (record 3 of shard part-00001-of-00004.dlc): bad header magic", set);
    cr_assert_not_null(strstr(dlc_errmsg(), want), "%s", dlc_errmsg());
    dlc_record rec;
    cr_assert_eq(dlc_store_read(r, victim, &rec), DLC_ECORRUPT);
    cr_assert_not_null(strstr(dlc_errmsg(), want), "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_read_values(r, 5000, v), DLC_ENOTFOUND);
    dlc_store_reader_close(r);
    dlc_store_close(s);
    free(set);
}

static int stop_at_once(void *user, const dlc_verify_progress *p)
{
    (void)p;
    ++*(int *)user;
    return 1;
}

Test(store_set, verify_names_an_index_changed_since_open_and_can_be_canceled)
{
    char *set = tmp_path(dir, "set");
    cr_assert_eq(sf_make_set(set, N_ITEMS, PARTS, SET_ID, sf_skip_some), DLC_OK);
    dlc_store *s = open_ok(set);
    int calls = 0;
    cr_assert_eq(dlc_store_verify(s, stop_at_once, &calls, NULL), DLC_ECANCELED, "%s",
                 dlc_errmsg());
    cr_assert_eq(calls, 1, "one call, then every shard stops");
    /* The index rewritten under the open set (here: its reserved word, re-hashed). */
    char *index = tmp_path(set, "index.dlcset");
    size_t n = 0;
    uint8_t *p = read_file(index, &n);
    p[52] = 1;
    rehash(p, n);
    write_file(index, p, n);
    uint64_t bad = 7;
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, &bad), DLC_ECORRUPT);
    cr_assert_eq(bad, 0, "the records are fine");
    cr_assert_not_null(strstr(dlc_errmsg(), "index.dlcset"), "%s", dlc_errmsg());
    p[52] = 0;
    rehash(p, n);
    write_file(index, p, n);
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, &bad), DLC_OK, "%s", dlc_errmsg());
    dlc_store_close(s);
    free(p);
    free(index);
    free(set);
}

/* Item sizes (height, width) for the smallest-image test: part 0 (items 0..3) all 40x40, fixed
 * in its shard; the smallest width, 12, first at item 6 (part 1); the smallest height, 9, first
 * at item 9 (part 2), with a later tie at item 10. */
static const uint32_t min_items[12][2] = {{40, 40}, {40, 40}, {40, 40}, {40, 40},
                                          {35, 30}, {33, 28}, {38, 12}, {33, 12},
                                          {36, 36}, {9, 40},  {9, 15},  {20, 20}};

/* Items [first, end) of min_items, with one VARIABLE image field, to @p path; as part @p part
 * of 3 when @p part >= 0. */
static void write_min_items(const char *path, uint64_t first, uint64_t end, int part)
{
    const dlc_field_spec spec = {
        .name = "image", .kind = DLC_FIELD_IMAGE, .flags = DLC_FIELD_VARIABLE, .shape = {0, 0, 3}};
    const dlc_writer_config cfg = {
        .struct_size = sizeof(dlc_writer_config), .fields = &spec, .num_fields = 1, .force = 1};
    dlc_writer *w = NULL;
    dlc_record_builder *b = NULL;
    static uint8_t px[40 * 40 * 3];
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_record_builder_create(w, &b), DLC_OK);
    for (uint64_t i = first; i < end; i++) {
        const uint32_t h = min_items[i][0], wd = min_items[i][1];
        const dlc_image img = {px, wd, h, 3, (size_t)wd * 3};
        cr_assert_eq(dlc_record_set_image(b, 0, &img), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_seal(b), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_writer_append(w, b), DLC_OK, "%s", dlc_errmsg());
    }
    if (part >= 0)
        cr_assert_eq(dlc__writer_set_part(w, (uint32_t)part, 3, SET_ID, first, end), DLC_OK);
    cr_assert_eq(dlc_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
    dlc_record_builder_destroy(b);
}

/* A set's smallest image is the smallest over its parts, each with the first record that has it
 * by its global number: what one store of the same records says. A part that does not know its
 * own (built before "min_dims") makes the set's unknown. */
Test(store_set, smallest_image_is_the_smallest_over_the_parts_with_global_records)
{
    char *set = tmp_path(dir, "set"), *single = tmp_path(dir, "single.dlc");
    cr_assert_eq(mkdir(set, 0755), 0);
    for (int k = 0; k < 3; k++) {
        char *part = sf_part_path(set, (uint32_t)k, 3);
        write_min_items(part, 4u * (uint64_t)k, 4u * (uint64_t)k + 4, k);
        free(part);
    }
    cr_assert_eq(dlc__set_join(set, NULL), DLC_OK, "%s", dlc_errmsg());
    write_min_items(single, 0, 12, -1);
    dlc_store *a = open_ok(set), *b = open_ok(single);
    same_schema(a, b);
    const dlc_field *fa = dlc_store_fields(a), *fb = dlc_store_fields(b);
    cr_assert(fa[0].flags & DLC_FIELD_VARIABLE);
    cr_assert_eq(fa[0].min_dim0, 9);
    cr_assert_eq(fa[0].min_dim1, 12);
    cr_assert_eq(fa[0].min_record0, 9, "record 1 of part 2: %llu",
                 (unsigned long long)fa[0].min_record0);
    cr_assert_eq(fa[0].min_record1, 6, "record 2 of part 1: %llu",
                 (unsigned long long)fa[0].min_record1);
    cr_assert_eq(memcmp(&fa[0], &fb[0], sizeof fa[0]), 0, "the single store's field");
    /* Each shard says its own, by its own record numbers. */
    const dlc_store *part0 = a->shards[0], *part2 = a->shards[2];
    cr_assert_eq(dlc_store_fields(part0)[0].flags & DLC_FIELD_VARIABLE, 0, "40x40 throughout");
    cr_assert_eq(dlc_store_fields(part0)[0].min_dim0, 40);
    cr_assert_eq(dlc_store_fields(part2)[0].min_record0, 1);
    cr_assert_eq(dlc_store_verify(a, NULL, NULL, NULL), DLC_OK, "%s", dlc_errmsg());
    dlc_store_close(a);
    dlc_store_close(b);

    /* Part 1 as an older library wrote it: the set's smallest size is unknown. */
    char *part1 = sf_part_path(set, 1, 3);
    write_min_items(part1, 4, 8, 1);
    tsu_put_meta(part1, "min_dims", NULL, 0);
    cr_assert_eq(dlc__set_join(set, NULL), DLC_OK, "%s", dlc_errmsg());
    a = open_ok(set);
    fa = dlc_store_fields(a);
    cr_assert_eq(fa[0].min_dim0 | fa[0].min_dim1, 0, "unknown: %ux%u", fa[0].min_dim0,
                 fa[0].min_dim1);
    cr_assert_eq(fa[0].min_record0 | fa[0].min_record1, 0);
    cr_assert_eq(fa[0].max_dim0, 40, "the rest of the union as before");
    dlc_store_close(a);
    free(part1);
    free(single);
    free(set);
}
