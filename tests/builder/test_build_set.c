/* Store sets from the builder (cache/builder/build_set.c, build_setdir.c, build_run.c): the split
 * of the items among the parts, the set's identity, and dlc_build() of a set end to end on small
 * trees of real JPEGs: a set gives the records of a single store built from the same sources, parts
 * built one by one join into the same set, a foreign part is refused, a part without records of
 * some class still has every label, an empty part is a part, and a set is replaced only with
 * force, through retired names.
 *
 * dlc-test-label: threads (the build runs worker and writer threads; TSan checks them). */
#include "build_internal.h"
#include "build_test_util.h"
#include "source.h"

#include <dlcache/build.h>
#include <dlcache/set.h>
#include <dlcache/store.h>

#include <criterion/criterion.h>
#include <dirent.h>
#include <sys/stat.h>

TMPDIR_SUITE(build_set);

/* ---- The split ----------------------------------------------------------------------------- */

Test(build_set, split_covers_the_items_in_order)
{
    const uint64_t ns[] = {0, 1, 2, 7, 10, 1000, 1281167, 14197122};
    const uint32_t parts[] = {1, 2, 3, 7, 8, 13, 64, 1000};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        for (size_t b = 0; b < sizeof parts / sizeof parts[0]; b++) {
            const uint64_t n = ns[a];
            const uint32_t N = parts[b];
            uint64_t prev_end = 0, lo = UINT64_MAX, hi = 0;
            for (uint32_t i = 0; i < N; i++) {
                uint64_t first, end;
                dlc__build_split(n, N, i, &first, &end);
                cr_assert_eq(first, prev_end, "n %llu N %u part %u", (unsigned long long)n, N, i);
                cr_assert_leq(first, end);
                /* Exactly floor(I*n/N), the rule docs/FORMAT.md gives. */
                cr_assert_eq(first, (uint64_t)((unsigned __int128)i * n / N));
                const uint64_t size = end - first;
                lo = size < lo ? size : lo;
                hi = size > hi ? size : hi;
                prev_end = end;
            }
            cr_assert_eq(prev_end, n);
            cr_assert_leq(hi - lo, 1, "parts differ by at most one item");
        }
    }
}

Test(build_set, split_of_huge_counts_does_not_overflow)
{
    const uint64_t n = UINT64_MAX - 5;
    const uint32_t N = 65536;
    uint64_t first, end;
    dlc__build_split(n, N, N - 1, &first, &end);
    cr_assert_eq(end, n);
    cr_assert_eq(first, (uint64_t)((unsigned __int128)(N - 1) * n / N));
    dlc__build_split(n, N, 12345, &first, &end);
    cr_assert_eq(first, (uint64_t)((unsigned __int128)12345 * n / N));
    cr_assert_eq(end, (uint64_t)((unsigned __int128)12346 * n / N));
}

/* ---- Trees and builds ---------------------------------------------------------------------- */

/* dir/NAME/{cat,dog,eel}/NNN.jpg: @p per class images of varied sizes. */
static char *make_tree(const char *name, int per_class)
{
    static const char *const classes[] = {"cat", "dog", "eel"};
    btu_mkdir(dir, name);
    char *train = tmp_path(dir, name);
    for (int c = 0; c < 3; c++) {
        btu_mkdir(train, classes[c]);
        char *cdir = tmp_path(train, classes[c]);
        for (int i = 0; i < per_class; i++) {
            char file[32];
            snprintf(file, sizeof file, "%03d.jpg", i);
            btu_jpeg(cdir, file, 40 + (uint32_t)(i * 7 % 50), 30 + (uint32_t)(i * 11 % 60),
                     (unsigned)(c * 100 + i));
        }
        free(cdir);
    }
    return train;
}

static dlc_build_options opts(uint32_t threads, uint32_t size)
{
    dlc_build_options o;
    dlc_build_options_init(&o);
    o.size = size;
    o.threads = threads;
    return o;
}

static dlc_status build_set(const char *src, const char *out, const dlc_build_options *o,
                            uint32_t parts, int one_part, uint32_t part, dlc_build_report **r)
{
    const char *srcs[] = {src};
    dlc_build_options s = *o;
    s.parts = parts;
    s.one_part = one_part;
    s.part = part;
    return dlc_build(srcs, 1, out, &s, r);
}

/* Every record of @p a and @p b has the same fields, byte for byte. */
static void same_records(const char *a, const char *b)
{
    dlc_store *sa = NULL, *sb = NULL;
    cr_assert_eq(dlc_store_open(a, 0, &sa), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_open(b, 0, &sb), DLC_OK, "%s", dlc_errmsg());
    const dlc_store_info *ia = dlc_store_get_info(sa), *ib = dlc_store_get_info(sb);
    cr_assert_eq(ia->count, ib->count);
    cr_assert_eq(ia->num_fields, ib->num_fields);
    cr_assert_eq(ia->num_labels, ib->num_labels);
    cr_assert_eq(ia->skipped, ib->skipped);
    cr_assert_eq(ia->payload_bytes, ib->payload_bytes);
    cr_assert_eq(
        memcmp(dlc_store_fields(sa), dlc_store_fields(sb), ia->num_fields * sizeof(dlc_field)), 0,
        "the schemas differ");
    for (uint32_t l = 0; l < ia->num_labels; l++) {
        cr_assert_str_eq(dlc_store_label_name(sa, l), dlc_store_label_name(sb, l));
        cr_assert_eq(dlc_store_label_counts(sa)[l], dlc_store_label_counts(sb)[l]);
    }
    dlc_store_reader *ra = NULL, *rb = NULL;
    cr_assert_eq(dlc_store_reader_open(sa, &ra), DLC_OK);
    cr_assert_eq(dlc_store_reader_open(sb, &rb), DLC_OK);
    for (uint64_t i = 0; i < ia->count; i++) {
        dlc_value va[DLC_MAX_FIELDS], vb[DLC_MAX_FIELDS];
        cr_assert_eq(dlc_store_read_values(ra, i, va), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_store_read_values(rb, i, vb), DLC_OK, "%s", dlc_errmsg());
        for (uint32_t f = 0; f < ia->num_fields; f++) {
            cr_assert_eq(va[f].size, vb[f].size, "record %llu", (unsigned long long)i);
            cr_assert_eq(va[f].xxh3, vb[f].xxh3, "record %llu", (unsigned long long)i);
            cr_assert_eq(va[f].i, vb[f].i, "record %llu", (unsigned long long)i);
            cr_assert_eq(memcmp(va[f].data, vb[f].data, va[f].size), 0);
        }
    }
    dlc_store_reader_close(ra);
    dlc_store_reader_close(rb);
    dlc_store_close(sa);
    dlc_store_close(sb);
}

static uint64_t digest_of(const char *path)
{
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    const uint64_t d = dlc_store_get_info(s)->content_digest;
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, NULL), DLC_OK, "%s", dlc_errmsg());
    dlc_store_close(s);
    return d;
}

Test(build_set, a_set_holds_the_records_of_a_single_store)
{
    char *train = make_tree("train", 7);
    char *single = tmp_path(dir, "one.dlc"), *set = tmp_path(dir, "set");
    const char *srcs[] = {train};
    dlc_build_options o = opts(3, 24);
    dlc_build_report *r = NULL;
    cr_assert_eq(dlc_build(srcs, 1, single, &o, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    cr_assert_eq(build_set(train, set, &o, 4, 0, 0, &r), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(r->count, 21);
    cr_assert_eq(r->parts, 4);
    cr_assert_eq(r->num_built, 4);
    cr_assert_eq(r->items, 21);
    uint64_t prev = 0;
    for (uint32_t k = 0; k < 4; k++) {
        cr_assert_eq(r->built[k].part, k);
        cr_assert_eq(r->built[k].first_item, prev);
        prev = r->built[k].end_item;
    }
    cr_assert_eq(prev, 21);
    cr_assert_eq(r->content_digest, digest_of(set));
    same_records(single, set);
    dlc_build_report_free(r);
    free(single);
    free(set);
    free(train);
}

Test(build_set, parts_built_one_by_one_join_into_the_same_set)
{
    char *train = make_tree("train", 5);
    char *all = tmp_path(dir, "all"), *each = tmp_path(dir, "each");
    dlc_build_options o = opts(2, 24);
    dlc_build_report *r = NULL;
    cr_assert_eq(build_set(train, all, &o, 3, 0, 0, &r), DLC_OK, "%s", dlc_errmsg());
    const uint64_t set_id = r->set_id;
    dlc_build_report_free(r);
    for (uint32_t k = 0; k < 3; k++) {
        dlc_build_options ok = opts(1 + k, 24); /* the threads do not change a part */
        cr_assert_eq(build_set(train, each, &ok, 3, 1, k, &r), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(r->num_built, 1);
        cr_assert_eq(r->built[0].part, k);
        cr_assert_eq(r->set_id, set_id);
        dlc_build_report_free(r);
        dlc_store *s = NULL;
        cr_assert_neq(dlc_store_open(each, 0, &s), DLC_OK, "no index before the join");
    }
    dlc_set_join_report jr;
    cr_assert_eq(dlc_set_join(each, &jr), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(jr.num_shards, 3);
    cr_assert_eq(jr.count, 15);
    cr_assert_eq(jr.set_id, set_id);
    cr_assert_eq(digest_of(each), digest_of(all));
    same_records(all, each);
    free(all);
    free(each);
    free(train);
}

Test(build_set, a_part_of_other_options_is_foreign)
{
    char *train = make_tree("train", 4);
    char *set = tmp_path(dir, "set");
    dlc_build_options o = opts(2, 24), other = opts(2, 32);
    dlc_build_report *r = NULL;
    cr_assert_eq(build_set(train, set, &o, 3, 1, 0, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    cr_assert_eq(build_set(train, set, &other, 3, 1, 1, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    cr_assert_eq(build_set(train, set, &o, 3, 1, 2, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    dlc_set_join_report jr;
    cr_assert_eq(dlc_set_join(set, &jr), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "part-00001-of-00003.dlc") != NULL, "%s", dlc_errmsg());
    cr_assert(strstr(dlc_errmsg(), "other sources or options") != NULL, "%s", dlc_errmsg());
    char *index = tmp_path(set, "index.dlcset");
    cr_assert(!btu_exists(index));
    /* The part again, as the others: the join takes it (force replaces the part). */
    o.force = 1;
    cr_assert_eq(build_set(train, set, &o, 3, 1, 1, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    cr_assert_eq(dlc_set_join(set, &jr), DLC_OK, "%s", dlc_errmsg());
    cr_assert(btu_exists(index));
    free(index);
    free(set);
    free(train);
}

Test(build_set, set_id_follows_sources_options_and_parts)
{
    char *train = make_tree("train", 3);
    char *a = tmp_path(dir, "a"), *b = tmp_path(dir, "b");
    dlc_build_options o = opts(1, 24);
    dlc_build_report *r = NULL;
    uint64_t ids[6];
    cr_assert_eq(build_set(train, a, &o, 2, 1, 0, &r), DLC_OK, "%s", dlc_errmsg());
    ids[0] = r->set_id;
    dlc_build_report_free(r);
    dlc_build_options o8 = opts(8, 24); /* the threads change no byte */
    cr_assert_eq(build_set(train, b, &o8, 2, 1, 1, &r), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(r->set_id, ids[0]);
    dlc_build_report_free(r);
    o.force = 1;
    o.quality = 50; /* a raw store's bytes do not depend on the quality */
    cr_assert_eq(build_set(train, b, &o, 2, 1, 1, &r), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(r->set_id, ids[0]);
    dlc_build_report_free(r);
    cr_assert_eq(build_set(train, b, &o, 3, 1, 1, &r), DLC_OK, "%s", dlc_errmsg());
    ids[1] = r->set_id;
    dlc_build_report_free(r);
    o.encoding = DLC_ENCODING_JPEG;
    cr_assert_eq(build_set(train, b, &o, 2, 1, 1, &r), DLC_OK, "%s", dlc_errmsg());
    ids[2] = r->set_id;
    dlc_build_report_free(r);
    o.quality = 60;
    cr_assert_eq(build_set(train, b, &o, 2, 1, 1, &r), DLC_OK, "%s", dlc_errmsg());
    ids[3] = r->set_id;
    dlc_build_report_free(r);
    o = opts(1, 24);
    o.force = 1;
    o.center_crop = 0;
    cr_assert_eq(build_set(train, b, &o, 2, 1, 1, &r), DLC_OK, "%s", dlc_errmsg());
    ids[4] = r->set_id;
    dlc_build_report_free(r);
    /* A source file touched: another set. */
    char *f = tmp_path(train, "dog/001.jpg");
    const struct timespec ts[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
    cr_assert_eq(utimensat(AT_FDCWD, f, ts, 0), 0);
    o = opts(1, 24);
    o.force = 1;
    cr_assert_eq(build_set(train, b, &o, 2, 1, 1, &r), DLC_OK, "%s", dlc_errmsg());
    ids[5] = r->set_id;
    dlc_build_report_free(r);
    for (int i = 0; i < 6; i++)
        for (int j = i + 1; j < 6; j++)
            cr_assert_neq(ids[i], ids[j], "set_id %d and %d agree", i, j);
    free(f);
    free(a);
    free(b);
    free(train);
}

Test(build_set, items_digest_does_not_depend_on_threads)
{
    char *train = make_tree("train", 6);
    dlc__source_set src;
    dlc__source_init(&src);
    cr_assert_eq(dlc__source_add(&src, train), DLC_OK, "%s", dlc_errmsg());
    uint64_t d1, d3, d16;
    cr_assert_eq(dlc__build_items_digest(&src, NULL, 1, &d1), DLC_OK);
    cr_assert_eq(dlc__build_items_digest(&src, NULL, 3, &d3), DLC_OK);
    cr_assert_eq(dlc__build_items_digest(&src, NULL, 16, &d16), DLC_OK);
    cr_assert_eq(d1, d3);
    cr_assert_eq(d1, d16);
    dlc__source_free(&src);
    free(train);
}

Test(build_set, parts_carry_every_label_and_may_be_empty)
{
    /* 3 classes of 2 images, 8 parts: parts 0..1 see only "cat", some parts have no item. */
    char *train = make_tree("train", 2);
    char *set = tmp_path(dir, "set");
    dlc_build_options o = opts(2, 24);
    dlc_build_report *r = NULL;
    cr_assert_eq(build_set(train, set, &o, 8, 0, 0, &r), DLC_OK, "%s", dlc_errmsg());
    uint32_t empty = 0;
    for (uint32_t k = 0; k < 8; k++)
        empty += r->built[k].count == 0;
    cr_assert_eq(empty, 2);
    dlc_build_report_free(r);
    char *part0 = tmp_path(set, "part-00000-of-00008.dlc");
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(part0, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_get_info(s)->num_labels, 3);
    cr_assert_str_eq(dlc_store_label_name(s, 2), "eel");
    dlc_store_close(s);
    cr_assert_eq(dlc_store_open(set, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_get_info(s)->count, 6);
    cr_assert_eq(dlc_store_label_counts(s)[2], 2);
    dlc_store_close(s);
    free(part0);
    free(set);
    free(train);
}

/* Files of @p d whose names start with @p prefix. */
static int count_files(const char *d, const char *prefix)
{
    int n = 0;
    DIR *dd = opendir(d);
    cr_assert(dd != NULL);
    for (struct dirent *e; (e = readdir(dd)) != NULL;)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(dd);
    return n;
}

Test(build_set, a_set_is_replaced_only_with_force)
{
    char *train = make_tree("train", 4);
    char *set = tmp_path(dir, "set");
    dlc_build_options o = opts(2, 24);
    dlc_build_report *r = NULL;
    cr_assert_eq(build_set(train, set, &o, 3, 0, 0, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    const uint64_t old = digest_of(set);
    o.size = 16;
    cr_assert_eq(build_set(train, set, &o, 3, 0, 0, &r), DLC_EEXIST);
    cr_assert_null(r);
    cr_assert_eq(build_set(train, set, &o, 3, 1, 1, &r), DLC_EEXIST, "a joined set, no force");
    cr_assert_eq(digest_of(set), old);
    /* The same N: every name is reused; and another N. */
    o.force = 1;
    cr_assert_eq(build_set(train, set, &o, 3, 0, 0, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    cr_assert_neq(digest_of(set), old);
    cr_assert_eq(count_files(set, "retired-"), 0);
    o.size = 20;
    cr_assert_eq(build_set(train, set, &o, 2, 0, 0, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    cr_assert_eq(count_files(set, "part-"), 2, "the old set's parts are gone");
    cr_assert_eq(count_files(set, "retired-"), 0);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(set, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_get_info(s)->height, 20);
    dlc_store_close(s);
    free(set);
    free(train);
}

Test(build_set, retired_set_stays_readable_until_the_join)
{
    char *train = make_tree("train", 4);
    char *set = tmp_path(dir, "set");
    dlc_build_options o = opts(2, 24);
    dlc_build_report *r = NULL;
    cr_assert_eq(build_set(train, set, &o, 2, 0, 0, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    const uint64_t old = digest_of(set);
    /* A new build across machines begins: the first part written retires the old set. */
    o.force = 1;
    o.size = 16;
    cr_assert_eq(build_set(train, set, &o, 2, 1, 0, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    cr_assert_eq(count_files(set, "retired-part-"), 2);
    cr_assert_eq(digest_of(set), old, "the old set, under its retired names");
    cr_assert_eq(build_set(train, set, &o, 2, 1, 1, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    cr_assert_eq(digest_of(set), old);
    dlc_set_join_report jr;
    cr_assert_eq(dlc_set_join(set, &jr), DLC_OK, "%s", dlc_errmsg());
    cr_assert_neq(digest_of(set), old);
    cr_assert_eq(count_files(set, "retired-"), 0, "the join removes the retired parts");
    free(set);
    free(train);
}

Test(build_set, one_part_of_a_joined_set_is_rebuilt_alone)
{
    char *train = make_tree("train", 4);
    char *set = tmp_path(dir, "set");
    dlc_build_options o = opts(2, 24);
    dlc_build_report *r = NULL;
    cr_assert_eq(build_set(train, set, &o, 3, 0, 0, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    const uint64_t d = digest_of(set);
    o.force = 1;
    cr_assert_eq(build_set(train, set, &o, 3, 1, 1, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    cr_assert_eq(digest_of(set), d, "the set, retired, reads as before");
    dlc_set_join_report jr;
    cr_assert_eq(dlc_set_join(set, &jr), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(digest_of(set), d);
    cr_assert_eq(count_files(set, "retired-"), 0);
    cr_assert_eq(count_files(set, "part-"), 3);
    free(set);
    free(train);
}

Test(build_set, no_record_at_all_is_no_set)
{
    btu_mkdir(dir, "train");
    char *train = tmp_path(dir, "train");
    btu_mkdir(train, "cat");
    char *cat = tmp_path(train, "cat");
    char *png = tmp_path(cat, "a.png");
    btu_write_str(png, "not an image");
    char *set = tmp_path(dir, "set");
    dlc_build_options o = opts(1, 24);
    dlc_build_report *r = NULL;
    cr_assert_eq(build_set(train, set, &o, 2, 0, 0, &r), DLC_ENOIMAGES, "%s", dlc_errmsg());
    cr_assert_not_null(r, "ENOIMAGES comes with the report");
    cr_assert_eq(r->skipped, 1);
    dlc_build_report_free(r);
    char *index = tmp_path(set, "index.dlcset");
    cr_assert(!btu_exists(set), "a failed build removes its parts and the directory it made");
    /* One part alone may be empty: every item of its range skipped. */
    cr_assert_eq(build_set(train, set, &o, 2, 1, 1, &r), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(r->count, 0);
    dlc_build_report_free(r);
    free(index);
    free(set);
    free(png);
    free(cat);
    free(train);
}

Test(build_set, strict_stops_every_part_and_names_the_image)
{
    char *train = make_tree("train", 6);
    char *bad = tmp_path(train, "eel/zz.jpg");
    btu_write_str(bad, "not a jpeg");
    char *set = tmp_path(dir, "set");
    dlc_build_options o = opts(3, 24);
    o.strict = 1;
    dlc_build_report *r = NULL;
    cr_assert_eq(build_set(train, set, &o, 3, 0, 0, &r), DLC_EDECODE);
    cr_assert(strstr(dlc_errmsg(), "eel/zz.jpg") != NULL, "%s", dlc_errmsg());
    cr_assert_not_null(r, "strict EDECODE comes with the report");
    dlc_build_report_free(r);
    cr_assert(!btu_exists(set), "a failed build removes its parts and the directory it made");
    /* Into a directory that was there: the directory stays, the parts go. */
    btu_mkdir(dir, "set");
    cr_assert_eq(build_set(train, set, &o, 3, 0, 0, &r), DLC_EDECODE);
    dlc_build_report_free(r);
    cr_assert_eq(count_files(set, "part-"), 0, "the parts of a failed build are removed");
    free(set);
    free(bad);
    free(train);
}

Test(build_set, bad_set_options)
{
    char *train = make_tree("train", 1);
    char *set = tmp_path(dir, "set");
    dlc_build_options o = opts(1, 24);
    dlc_build_report *r = NULL;
    /* parts 0 is one store, which has no part to build alone. */
    cr_assert_eq(build_set(train, set, &o, 0, 1, 0, &r), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "one_part") != NULL, "%s", dlc_errmsg());
    cr_assert_eq(build_set(train, set, &o, 65537, 0, 0, &r), DLC_EINVAL);
    cr_assert_eq(build_set(train, set, &o, 3, 1, 3, &r), DLC_EINVAL);
    char *file = tmp_path(dir, "file.dlc");
    btu_write_str(file, "x");
    cr_assert_eq(build_set(train, file, &o, 2, 0, 0, &r), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "not a set's directory") != NULL, "%s", dlc_errmsg());
    free(file);
    free(set);
    free(train);
}
