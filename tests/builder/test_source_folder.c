/* The ImageFolder scan: classes, labels and item order exactly as
 * torchvision.datasets.ImageFolder gives them (sorted class folders, a
 * sorted walk of each class folder including subfolders and folder links,
 * torchvision's extension list, case-insensitive). */
#include "source.h"
#include "build_test_util.h"

#include <dlcache/status.h>

#include <criterion/criterion.h>

TMPDIR_SUITE(source_folder);

static void touch(const char *rel)
{
    char *p = tmp_path(dir, rel);
    btu_write_str(p, "x");
    free(p);
}

/* The item paths relative to dir, joined by spaces, with their labels. */
static char *listing(const dlc__source_set *s)
{
    size_t cap = 64;
    for (size_t i = 0; i < s->count; i++)
        cap += strlen(dlc__source_path(s, &s->items[i])) + 16;
    char *out = calloc(1, cap);
    const size_t skip = strlen(dir) + 1;
    for (size_t i = 0; i < s->count; i++) {
        const char *p = dlc__source_path(s, &s->items[i]);
        cr_assert(strncmp(p, dir, skip - 1) == 0);
        char one[512];
        snprintf(one, sizeof one, "%s%s=%lld%s", i ? " " : "", p + skip,
                 (long long)s->items[i].label, s->items[i].skip ? "!" : "");
        strcat(out, one);
    }
    return out;
}

Test(source_folder, torchvision_order)
{
    /* Class folders sort by byte value: "B" < "a" < "a b" < "a_". */
    btu_mkdir(dir, "a");
    btu_mkdir(dir, "B");
    btu_mkdir(dir, "a b");
    btu_mkdir(dir, "a_");
    touch("a/2.jpg");
    touch("a/10.JPG");
    touch("a/.hidden.jpeg");
    touch("a/notes.txt");
    touch("a/z.png");
    /* Subfolders: sorted(os.walk()) orders by the full folder path, so
     * "a/s t" (space) comes before "a/s/x" ('/' > ' '), and "a/s" before both. */
    btu_mkdir(dir, "a/s");
    btu_mkdir(dir, "a/s/x");
    btu_mkdir(dir, "a/s t");
    touch("a/s/1.jpg");
    touch("a/s/x/0.jpg");
    touch("a/s t/5.jpg");
    /* A folder named like an image is walked into, not taken as a file. */
    btu_mkdir(dir, "a/dir.jpg");
    touch("a/dir.jpg/in.jpeg");
    touch("B/b.jpg");
    touch("a b/c.webp");
    touch("a_/d.Jpeg");
    touch("top-level.jpg"); /* files next to the class folders are not samples */

    dlc__source_set s;
    dlc__source_init(&s);
    cr_assert_eq(dlc__source_add(&s, dir), DLC_OK, "%s", dlc_errmsg());
    char *got = listing(&s);
    cr_assert_str_eq(got, "B/b.jpg=0 "
                          "a/.hidden.jpeg=1 a/10.JPG=1 a/2.jpg=1 a/z.png=1! "
                          "a/dir.jpg/in.jpeg=1 "
                          "a/s/1.jpg=1 a/s t/5.jpg=1 a/s/x/0.jpg=1 "
                          "a b/c.webp=2! "
                          "a_/d.Jpeg=3");
    cr_assert_eq(dlc__source_num_labels(&s), 4);
    char buf[24];
    cr_assert_str_eq(dlc__source_label_name(&s, 0, buf, sizeof buf), "B");
    cr_assert_str_eq(dlc__source_label_name(&s, 2, buf, sizeof buf), "a b");
    cr_assert_eq(s.items[4].skip, DLC__SKIP_NOT_JPEG);
    free(got);
    dlc__source_free(&s);
}

Test(source_folder, links_and_empty_classes)
{
    btu_mkdir(dir, "c0");
    btu_mkdir(dir, "c1");
    btu_mkdir(dir, "elsewhere");
    btu_mkdir(dir, "elsewhere/inner");
    touch("elsewhere/inner/e.jpg");
    touch("c0/a.jpg");
    /* A dangling link is a "file" for os.walk, so it is an item (skipped later). */
    char *p = tmp_path(dir, "c0/b.jpg");
    cr_assert(symlink("/nonexistent/b.jpg", p) == 0);
    free(p);
    /* A link to a folder is followed (followlinks=True), also as a class. */
    p = tmp_path(dir, "c0/linked");
    cr_assert(symlink("../elsewhere/inner", p) == 0);
    free(p);
    /* A link to its own folder would loop forever; it is not followed. */
    p = tmp_path(dir, "c0/loop");
    cr_assert(symlink(".", p) == 0);
    free(p);
    /* c1 has no image: it keeps label 1, with no items. */
    touch("c1/readme.txt");

    dlc__source_set s;
    dlc__source_init(&s);
    cr_assert_eq(dlc__source_add(&s, dir), DLC_OK, "%s", dlc_errmsg());
    char *got = listing(&s);
    cr_assert_str_eq(got, "c0/a.jpg=0 c0/b.jpg=0 c0/linked/e.jpg=0 elsewhere/inner/e.jpg=2");
    cr_assert_eq(dlc__source_num_labels(&s), 3);
    free(got);
    dlc__source_free(&s);
}

Test(source_folder, no_class_folder)
{
    touch("a.jpg");
    dlc__source_set s;
    dlc__source_init(&s);
    cr_assert_eq(dlc__source_add(&s, dir), DLC_ENOIMAGES);
    cr_assert(strstr(dlc_errmsg(), "no class folder") != NULL, "%s", dlc_errmsg());
    dlc__source_free(&s);
}

Test(source_folder, folder_is_the_only_source)
{
    btu_mkdir(dir, "c");
    char *m = tmp_path(dir, "m.tsv");
    btu_write_str(m, "x.jpg\t0\n");
    dlc__source_set s;
    dlc__source_init(&s);
    cr_assert_eq(dlc__source_add(&s, m), DLC_OK);
    cr_assert_eq(dlc__source_add(&s, dir), DLC_EINVAL);
    dlc__source_free(&s);
    free(m);
}

Test(source_folder, relative_paths_for_masks)
{
    btu_mkdir(dir, "cat");
    btu_mkdir(dir, "cat/sub");
    touch("cat/sub/1.jpg");
    /* A trailing slash on the root changes nothing: the relative path starts at the class. */
    char *root = malloc(strlen(dir) + 3);
    sprintf(root, "%s//", dir);
    dlc__source_set s;
    dlc__source_init(&s);
    cr_assert_eq(dlc__source_add(&s, root), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(s.count, 1);
    const char *p = dlc__source_path(&s, &s.items[0]);
    cr_assert_str_eq(dlc__item_rel(&s.items[0], p), "cat/sub/1.jpg");
    cr_assert_eq(s.ncols, 1);
    cr_assert_eq(s.cols[0].kind, DLC__COL_LABEL);
    dlc__source_free(&s);
    free(root);
}
