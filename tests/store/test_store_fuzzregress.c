/* Inputs that once crashed the store reader under fuzzing (tests/fuzz/regress/store/), replayed
 * in the normal and ASan builds too: each must be refused with a message, without a signal. */
#include <dlcache/store.h>

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>

Test(store_fuzzregress, every_saved_input_is_refused_with_a_message)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/regress/store", DLC_TEST_SOURCE_DIR);
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        dlc_store *s = NULL;
        const dlc_status rc = dlc_store_open(path, 0, &s);
        cr_assert_neq(rc, DLC_OK, "%s opened", e->d_name);
        cr_assert_null(s);
        cr_assert_neq(dlc_errmsg()[0], '\0', "%s: no message", e->d_name);
        cr_assert_not_null(strstr(dlc_errmsg(), path), "%s", dlc_errmsg());
        n++;
    }
    closedir(d);
    cr_assert_gt(n, 0);
}

Test(store_fuzzregress, meta_pages_that_disagree_on_the_page_size)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fuzz/regress/store/meta1-page-size", DLC_TEST_SOURCE_DIR);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_ECORRUPT);
    cr_assert_not_null(strstr(dlc_errmsg(), "page size"), "%s", dlc_errmsg());
}
