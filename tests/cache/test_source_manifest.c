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
