/* How options structs grow (common/options.c, include/dlcache/status.h "How options grow"): the
 * one entry check, dlc__options_take(), on a struct of its own, then through dlc_loader_open():
 * a program built against an older, shorter dlc_loader_config gets the defaults for the fields
 * it did not know; one that forgot dlc_loader_config_init() (struct_size 0) is refused naming
 * the struct and its _init(); one built against a newer header than the library is refused.
 * Here under tests/loader/ with test_common_error.c until the common part has a tests folder. */
#include "common.h"
#include "loader_fixture.h"

#include <criterion/criterion.h>
#include <stddef.h>
#include <string.h>

/* A struct as a header of two versions would have it: version 1 ended after b. */
typedef struct two_versions {
    uint32_t struct_size;
    uint32_t a;
    uint64_t b;
    uint64_t c; /* version 2 */
} two_versions;

static void defaults(two_versions *t)
{
    memset(t, 0, sizeof *t);
    t->struct_size = sizeof *t;
    t->a = 1, t->b = 2, t->c = 3;
}

#define REFUSED(call, ...)                                                                         \
    do {                                                                                           \
        cr_assert_eq((call), DLC_EINVAL);                                                          \
        const char *const want_[] = {__VA_ARGS__, NULL};                                           \
        for (int i_ = 0; want_[i_]; i_++)                                                          \
            cr_assert(strstr(dlc_errmsg(), want_[i_]) != NULL, "'%s' not in: %s", want_[i_],       \
                      dlc_errmsg());                                                               \
    } while (0)

Test(common_options, an_older_struct_keeps_the_defaults_of_what_it_did_not_know)
{
    two_versions given;
    defaults(&given);
    given.struct_size = offsetof(two_versions, b) + sizeof given.b;
    given.a = 10, given.b = 20, given.c = 99; /* c is past what this caller's header had */
    two_versions got;
    defaults(&got);
    cr_assert_eq(dlc__options_take(&got, sizeof got, &given, "two_versions", "two_init"), DLC_OK);
    cr_assert_eq(got.a, 10);
    cr_assert_eq(got.b, 20);
    cr_assert_eq(got.c, 3, "the default, not the caller's bytes beyond its struct");
    cr_assert_eq(got.struct_size, sizeof got, "the copy is of the library's size");
}

Test(common_options, the_current_size_is_taken_whole)
{
    two_versions given;
    defaults(&given);
    given.c = 30;
    two_versions got;
    defaults(&got);
    cr_assert_eq(dlc__options_take(&got, sizeof got, &given, "two_versions", "two_init"), DLC_OK);
    cr_assert_eq(got.c, 30);
}

Test(common_options, zero_larger_and_impossible_sizes_are_refused)
{
    two_versions given, got;
    defaults(&got);
    memset(&given, 0, sizeof given);
    REFUSED(dlc__options_take(&got, sizeof got, &given, "two_versions", "two_init"),
            "two_versions: struct_size is 0", "two_init()");
    given.struct_size = sizeof given + 8;
    REFUSED(dlc__options_take(&got, sizeof got, &given, "two_versions", "two_init"), "two_versions",
            "newer dlcache header");
    given.struct_size = 6;
    REFUSED(dlc__options_take(&got, sizeof got, &given, "two_versions", "two_init"),
            "no size it ever had", "two_init()");
    given.struct_size = 4;
    REFUSED(dlc__options_take(&got, sizeof got, &given, "two_versions", "two_init"),
            "no size it ever had");
    cr_assert_eq(got.a, 1, "a refused struct leaves the defaults");
}

static fx_dir fx;

static void setup(void)
{
    fx_make_store(&fx, 16, 16, 16, 2, 0);
}

static void teardown(void)
{
    fx_rmdir(&fx);
}

TestSuite(loader_options, .init = setup, .fini = teardown);

/* max_lent is the last field: a program built before it existed sends a struct that ends at
 * device_staging, and whatever its memory holds after that must not be read. 99 would be
 * refused (not below prefetch); the default, 1, is what the loader must use. */
Test(loader_options, an_older_config_gets_the_default_of_a_field_it_did_not_know)
{
    dlc_loader_config c = fx_config();
    c.max_lent = 99;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(fx.path, &c, &l), DLC_EINVAL, "the current size reads max_lent");
    cr_assert(strstr(dlc_errmsg(), "max_lent") != NULL, "%s", dlc_errmsg());
    c.struct_size = offsetof(dlc_loader_config, device_staging) + sizeof c.device_staging;
    cr_assert_eq(dlc_loader_open(fx.path, &c, &l), DLC_OK, "%s", dlc_errmsg());
    dlc_batch a, b;
    cr_assert_eq(dlc_loader_next(l, &a), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_loader_next(l, &b), DLC_OK, "%s", dlc_errmsg());
    /* max_lent 1: the second request gave back the first batch. */
    cr_assert_eq(dlc_loader_release(l, &a), DLC_EINVAL, "batch a is no longer lent");
    dlc_loader_close(l);
}

Test(loader_options, a_config_without_init_is_refused_by_name)
{
    dlc_loader_config c;
    memset(&c, 0, sizeof c);
    c.batch_size = 8;
    dlc_loader *l = NULL;
    REFUSED(dlc_loader_open(fx.path, &c, &l), "dlc_loader_config: struct_size is 0",
            "dlc_loader_config_init()");
    cr_assert_null(l);
}

Test(loader_options, a_config_from_a_newer_header_is_refused)
{
    dlc_loader_config c = fx_config();
    c.struct_size = sizeof c + 8;
    dlc_loader *l = NULL;
    REFUSED(dlc_loader_open(fx.path, &c, &l), "dlc_loader_config", "newer dlcache header");
    cr_assert_null(l);
}
