/* The manifest reader: PATH<TAB>LABEL lines, paths relative to the manifest,
 * comments, and errors that name the manifest and the line. */
#include "source.h"
#include "build_test_util.h"

#include <dlcache/status.h>

#include <errno.h>

#include <criterion/criterion.h>

TMPDIR_SUITE(source_manifest);

/* Scan a manifest with @p text; returns the status, the set stays for checks. */
static dlc_status scan(dlc__source_set *s, const char *text)
{
    char *m = tmp_path(dir, "list.tsv");
    btu_write_str(m, text);
    dlc__source_init(s);
    const dlc_status rc = dlc__source_add(s, m);
    free(m);
    return rc;
}

Test(source_manifest, paths_labels_and_comments)
{
    dlc__source_set s;
    cr_assert_eq(scan(&s, "# a comment\n"
                          "a.jpg\t3\n"
                          "\n"
                          "   \t  \n"
                          "  # indented comment\n"
                          "sub/b c.jpg\t0\r\n"
                          "/abs/x.jpg\t 7 \n"
                          "with\ttab.jpg\t1"),
                 DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(s.count, 4);
    char *a = tmp_path(dir, "a.jpg"), *b = tmp_path(dir, "sub/b c.jpg"),
         *t = tmp_path(dir, "with\ttab.jpg");
    cr_assert_str_eq(dlc__source_path(&s, &s.items[0]), a);
    cr_assert_str_eq(dlc__source_path(&s, &s.items[1]), b, "relative to the manifest's folder");
    cr_assert_str_eq(dlc__source_path(&s, &s.items[2]), "/abs/x.jpg", "absolute kept");
    cr_assert_str_eq(dlc__source_path(&s, &s.items[3]), t, "split at the last tab");
    cr_assert_eq(s.items[0].label, 3);
    cr_assert_eq(s.items[1].label, 0);
    cr_assert_eq(s.items[2].label, 7);
    cr_assert_eq(s.items[3].label, 1);
    cr_assert_eq(s.items[0].shard, UINT32_MAX);
    cr_assert_eq(dlc__source_num_labels(&s), 8, "K = max label + 1");
    char buf[24];
    cr_assert_str_eq(dlc__source_label_name(&s, 5, buf, sizeof buf), "5");
    free(a);
    free(b);
    free(t);
    dlc__source_free(&s);
}

static void expect_error(const char *text, const char *where, const char *what)
{
    dlc__source_set s;
    cr_assert_eq(scan(&s, text), DLC_EINVAL, "accepted: %s", text);
    cr_assert(strstr(dlc_errmsg(), "list.tsv") != NULL, "no manifest name in: %s", dlc_errmsg());
    cr_assert(strstr(dlc_errmsg(), where) != NULL, "no '%s' in: %s", where, dlc_errmsg());
    cr_assert(strstr(dlc_errmsg(), what) != NULL, "no '%s' in: %s", what, dlc_errmsg());
    dlc__source_free(&s);
}

Test(source_manifest, malformed_lines_name_the_line)
{
    expect_error("a.jpg\t1\nb.jpg 2\n", ":2:", "no tab");
    expect_error("a.jpg\t1\n\n# c\nb.jpg\tcat\n", ":4:", "not an integer");
    expect_error("a.jpg\t-1\n", ":1:", "not an integer");
    expect_error("a.jpg\t\n", ":1:", "not an integer");
    expect_error("a.jpg\t1.5\n", ":1:", "not an integer");
    expect_error("a.jpg\t99999999999\n", ":1:", "not an integer");
    expect_error("\t4\n", ":1:", "empty path");
}

Test(source_manifest, nul_byte_is_an_error)
{
    dlc__source_set s;
    char *m = tmp_path(dir, "list.tsv");
    btu_write(m, "a.jpg\t1\nb\0.jpg\t2\n", 17);
    dlc__source_init(&s);
    cr_assert_eq(dlc__source_add(&s, m), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), ":2:") != NULL, "%s", dlc_errmsg());
    dlc__source_free(&s);
    free(m);
}

Test(source_manifest, empty_manifest_has_no_items)
{
    dlc__source_set s;
    cr_assert_eq(scan(&s, "# nothing here\n\n"), DLC_OK);
    cr_assert_eq(s.count, 0);
    cr_assert_eq(dlc__source_num_labels(&s), 0);
    dlc__source_free(&s);
}

Test(source_manifest, missing_manifest)
{
    dlc__source_set s;
    dlc__source_init(&s);
    char *m = tmp_path(dir, "nope.tsv");
    cr_assert_eq(dlc__source_add(&s, m), -ENOENT);
    cr_assert(strstr(dlc_errmsg(), "nope.tsv") != NULL);
    free(m);
    dlc__source_free(&s);
}

Test(source_manifest, manifests_concatenate)
{
    char *m1 = tmp_path(dir, "one.tsv"), *m2 = tmp_path(dir, "two.tsv");
    btu_write_str(m1, "a.jpg\t0\nb.jpg\t1\n");
    btu_write_str(m2, "c.jpg\t5\n");
    dlc__source_set s;
    dlc__source_init(&s);
    cr_assert_eq(dlc__source_add(&s, m1), DLC_OK);
    cr_assert_eq(dlc__source_add(&s, m2), DLC_OK);
    cr_assert_eq(s.count, 3);
    cr_assert_eq(s.items[2].label, 5);
    cr_assert_eq(dlc__source_num_labels(&s), 6);
    /* An ImageFolder cannot join a list of manifests. */
    cr_assert_eq(dlc__source_add(&s, dir), DLC_EINVAL);
    dlc__source_free(&s);
    free(m1);
    free(m2);
}

/* The column named @p name, or NULL. */
static const dlc__column *column(const dlc__source_set *s, const char *name)
{
    for (uint32_t c = 0; c < s->ncols; c++)
        if (strcmp(s->cols[c].name, name) == 0)
            return &s->cols[c];
    return NULL;
}

static double as_double(uint64_t bits)
{
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

Test(source_manifest, named_and_typed_columns)
{
    dlc__source_set s;
    cr_assert_eq(scan(&s, "# made by hand\n"
                          "#columns: path label labels weight n id:int box:floats tags:ints\n"
                          "a.jpg\t3\t3,17,42\t0.5\t7\t-9\t1,2.5,3,4\t\n"
                          "b.jpg\t0\t\t2\t-1\t9223372036854775807\t\t 5 , 6 \n"),
                 DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(s.count, 2);
    cr_assert_eq(s.ncols, 7);
    cr_assert(dlc__source_has_label(&s));
    cr_assert_eq(column(&s, "label")->kind, DLC__COL_LABEL);
    cr_assert_eq(column(&s, "labels")->kind, DLC__COL_INTS, "labels are a list by name");
    cr_assert_eq(column(&s, "weight")->kind, DLC__COL_NUMBER);
    cr_assert(column(&s, "weight")->is_float, "0.5 makes the column float64");
    cr_assert(!column(&s, "n")->is_float, "integers only: int64");
    cr_assert_eq(column(&s, "id")->kind, DLC__COL_INT);
    cr_assert_eq(column(&s, "box")->kind, DLC__COL_FLOATS);
    cr_assert_eq(s.items[0].label, 3);
    cr_assert_eq(dlc__source_num_labels(&s), 4);
    /* Scalars. */
    cr_assert_eq(as_double(dlc__source_cell(&s, 0, column(&s, "weight")->index)), 0.5);
    cr_assert_eq(as_double(dlc__source_cell(&s, 1, column(&s, "weight")->index)), 2.0);
    cr_assert_eq((int64_t)dlc__source_cell(&s, 1, column(&s, "n")->index), -1);
    cr_assert_eq((int64_t)dlc__source_cell(&s, 0, column(&s, "id")->index), -9);
    cr_assert_eq((int64_t)dlc__source_cell(&s, 1, column(&s, "id")->index), INT64_MAX);
    /* Lists, empty ones included. */
    size_t n;
    const uint64_t *v = dlc__source_list(&s, 0, column(&s, "labels")->index, &n);
    cr_assert_eq(n, 3);
    cr_assert(v[0] == 3 && v[1] == 17 && v[2] == 42);
    dlc__source_list(&s, 1, column(&s, "labels")->index, &n);
    cr_assert_eq(n, 0);
    v = dlc__source_list(&s, 0, column(&s, "box")->index, &n);
    cr_assert_eq(n, 4);
    cr_assert_eq(as_double(v[1]), 2.5);
    dlc__source_list(&s, 0, column(&s, "tags")->index, &n);
    cr_assert_eq(n, 0, "an empty last cell is an empty list");
    v = dlc__source_list(&s, 1, column(&s, "tags")->index, &n);
    cr_assert(n == 2 && v[0] == 5 && v[1] == 6, "blanks around entries are dropped");
    dlc__source_free(&s);
}

Test(source_manifest, number_column_turns_float_when_a_fraction_comes)
{
    dlc__source_set s;
    cr_assert_eq(scan(&s, "#columns: path score\na.jpg\t2\nb.jpg\t-3\nc.jpg\t1e-3\nd.jpg\t4\n"),
                 DLC_OK, "%s", dlc_errmsg());
    const dlc__column *c = column(&s, "score");
    cr_assert(c->is_float);
    cr_assert_eq(as_double(dlc__source_cell(&s, 0, c->index)), 2.0, "earlier cells converted");
    cr_assert_eq(as_double(dlc__source_cell(&s, 1, c->index)), -3.0);
    cr_assert_eq(as_double(dlc__source_cell(&s, 2, c->index)), 1e-3);
    cr_assert_eq(as_double(dlc__source_cell(&s, 3, c->index)), 4.0, "later integers as floats");
    cr_assert(!dlc__source_has_label(&s), "no label column, no label");
    cr_assert_eq(s.items[0].label, -1);
    cr_assert_eq(dlc__source_num_labels(&s), 0);
    dlc__source_free(&s);
}

Test(source_manifest, path_only_and_tabs_in_paths)
{
    dlc__source_set s;
    cr_assert_eq(scan(&s, "#columns: path\na\tb.jpg\n#columns: path\n"), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), ":3:") != NULL, "%s", dlc_errmsg());
    dlc__source_free(&s);
    cr_assert_eq(scan(&s, "#columns: path w\nx\ty.jpg\t1\n"), DLC_OK, "%s", dlc_errmsg());
    char *p = tmp_path(dir, "x\ty.jpg");
    cr_assert_str_eq(dlc__source_path(&s, &s.items[0]), p, "split at the last tabs");
    free(p);
    dlc__source_free(&s);
}

Test(source_manifest, bad_cells_name_line_and_column)
{
    const char *h = "#columns: path label w id:int tags:ints box:floats\n";
    char text[512];
    static const char *const bad[][3] = {
        {"a.jpg\t1\tx\t1\t\t\n", "column 3 (w)", "a number"},
        {"a.jpg\t1\t1\t1.5\t\t\n", "column 4 (id)", "an integer (int64)"},
        {"a.jpg\t1\t1\t99999999999999999999\t\t\n", "column 4 (id)", "int64"},
        {"a.jpg\t1\t1\t1\t3,,4\t\n", "column 5 (tags)", "entry 2"},
        {"a.jpg\t1\t1\t1\t3,\t\n", "column 5 (tags)", "ends with a comma"},
        {"a.jpg\t1\t1\t1\t\t1,nope\n", "column 6 (box)", "entry 2 is 'nope'"},
        {"a.jpg\t16777216\t1\t1\t\t\n", "column 2 (label)", "0..16777215"},
        {"a.jpg\t-1\t1\t1\t\t\n", "column 2 (label)", "0..16777215"},
        {"a.jpg\t1\t1\t1\n", ":2:", "found 4"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "%s%s", h, bad[i][0]);
        expect_error(text, bad[i][1], bad[i][2]);
        expect_error(text, ":2:", "");
    }
}

Test(source_manifest, bad_headers)
{
    expect_error("#columns: label path\n", ":1:", "first column must be 'path'");
    expect_error("#columns:\n", ":1:", "names no column");
    expect_error("#columns: path a a\n", ":1:", "named twice");
    expect_error("#columns: path image\n", ":1:", "cannot be named 'image'");
    expect_error("#columns: path mask\n", ":1:", "cannot be named 'mask'");
    expect_error("#columns: path 2x\n", ":1:", "column name '2x'");
    expect_error("#columns: path w:double\n", ":1:", "unknown type");
    expect_error("#columns: path label cls:label\n", ":1:", "two label columns");
    expect_error("a.jpg\t1\n#columns: path label\n", ":2:", "before the first item");
}

Test(source_manifest, several_labels_without_a_header_say_how)
{
    expect_error("a.jpg\t3,17,42\n", ":1:", "#columns: path labels");
}

Test(source_manifest, sources_must_have_the_same_columns)
{
    char *m1 = tmp_path(dir, "one.tsv"), *m2 = tmp_path(dir, "two.tsv"),
         *m3 = tmp_path(dir, "three.tsv");
    btu_write_str(m1, "#columns: path label w\na.jpg\t0\t1\n");
    btu_write_str(m2, "#columns: path label w\nb.jpg\t1\t2.5\n");
    btu_write_str(m3, "c.jpg\t1\n");
    dlc__source_set s;
    dlc__source_init(&s);
    cr_assert_eq(dlc__source_add(&s, m1), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc__source_add(&s, m2), DLC_OK, "%s", dlc_errmsg());
    cr_assert(s.cols[1].is_float, "the second manifest's fraction turns the shared column float");
    cr_assert_eq(dlc__source_add(&s, m3), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "three.tsv") && strstr(dlc_errmsg(), "path, label, w"), "%s",
              dlc_errmsg());
    dlc__source_free(&s);
    /* A headerless manifest is "path label": it mixes with one that says so. */
    btu_write_str(m1, "#columns: path label\na.jpg\t0\n");
    dlc__source_init(&s);
    cr_assert_eq(dlc__source_add(&s, m3), DLC_OK);
    cr_assert_eq(dlc__source_add(&s, m1), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(s.count, 2);
    dlc__source_free(&s);
    free(m1);
    free(m2);
    free(m3);
}

Test(source_manifest, relative_paths_for_masks)
{
    dlc__source_set s;
    cr_assert_eq(scan(&s, "sub/a.jpg\t1\n/abs/b.jpg\t2\n"), DLC_OK);
    const char *p0 = dlc__source_path(&s, &s.items[0]);
    cr_assert_str_eq(dlc__item_rel(&s.items[0], p0), "sub/a.jpg", "the path as written");
    cr_assert_null(dlc__item_rel(&s.items[1], dlc__source_path(&s, &s.items[1])),
                   "an absolute path has no relative path");
    dlc__source_free(&s);
}
