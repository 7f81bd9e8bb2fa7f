/* How structs that carry their size grow (common/options.c, include/dlcache/status.h "How structs
 * grow"), on a struct of its own that had two versions: an _init() never writes past the caller's
 * size; dlc__options_take() gives an older, shorter struct the defaults of the fields it did not
 * know and refuses 0, a newer size and a size no version had; dlc__result_give() writes only the
 * caller's size. The loader's use of them is in tests/loader/test_loader_options.c, the table of
 * released sizes in tests/abi/. */
#include "common.h"

#include <criterion/criterion.h>
#include <stddef.h>
#include <string.h>

/* The sizes of two_versions before this one: version 1 ended after b. */
static const uint32_t older[] = {16, 0};

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
    cr_assert_eq(dlc__options_take_as(&got, sizeof got, &given, "two_versions", "two_init", older),
                 DLC_OK);
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
    cr_assert_eq(dlc__options_take_as(&got, sizeof got, &given, "two_versions", "two_init", older),
                 DLC_OK);
    cr_assert_eq(got.c, 30);
}

Test(common_options, zero_larger_and_impossible_sizes_are_refused)
{
    two_versions given, got;
    defaults(&got);
    memset(&given, 0, sizeof given);
    REFUSED(dlc__options_take_as(&got, sizeof got, &given, "two_versions", "two_init", older),
            "two_versions: struct_size is 0", "two_init()");
    given.struct_size = sizeof given + 8;
    REFUSED(dlc__options_take_as(&got, sizeof got, &given, "two_versions", "two_init", older),
            "two_versions", "newer dlcache header");
    given.struct_size = 6;
    REFUSED(dlc__options_take_as(&got, sizeof got, &given, "two_versions", "two_init", older),
            "no size this struct had", "two_init()");
    given.struct_size = 12; /* a multiple of 4 that cuts b in half */
    REFUSED(dlc__options_take_as(&got, sizeof got, &given, "two_versions", "two_init", older),
            "two_versions: struct_size 12");
    given.struct_size = 4;
    REFUSED(dlc__options_take_as(&got, sizeof got, &given, "two_versions", "two_init", older),
            "no size this struct had");
    cr_assert_eq(got.a, 1, "a refused struct leaves the defaults");
}

Test(common_options, a_size_from_no_table_is_refused_even_if_plausible)
{
    /* Without the older list, only the table (abi_sizes.h) counts: two_versions is not in it. */
    two_versions given, got;
    defaults(&given);
    defaults(&got);
    given.struct_size = 16;
    cr_assert_eq(dlc__options_take(&got, sizeof got, &given, "two_versions", "two_init"),
                 DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "two_versions: struct_size 16 is no size") != NULL, "%s",
              dlc_errmsg());
}

/* What a caller built against version 1 has: its struct, then memory that is not the struct. */
typedef struct old_caller {
    uint32_t struct_size;
    uint32_t a;
    uint64_t b;
    uint8_t canary[32];
} old_caller;

Test(common_options, init_writes_only_the_callers_size)
{
    two_versions d;
    defaults(&d);
    old_caller o;
    memset(&o, 0xa5, sizeof o);
    dlc__options_init(&o, offsetof(old_caller, canary), &d, sizeof d);
    cr_assert_eq(o.struct_size, 16, "struct_size is the caller's size");
    cr_assert_eq(o.a, 1);
    cr_assert_eq(o.b, 2);
    for (size_t i = 0; i < sizeof o.canary; i++)
        cr_assert_eq(o.canary[i], 0xa5, "byte %zu past the caller's struct was written", i);
    two_versions got;
    defaults(&got);
    got.a = 7;
    cr_assert_eq(dlc__options_take_as(&got, sizeof got, &o, "two_versions", "two_init", older),
                 DLC_OK);
    cr_assert_eq(got.a, 1);
    cr_assert_eq(got.c, 3);
}

Test(common_options, init_of_a_newer_header_zeroes_its_tail_and_is_refused_later)
{
    two_versions d;
    defaults(&d);
    struct {
        two_versions t;
        uint64_t newer;
    } n;
    memset(&n, 0xa5, sizeof n);
    dlc__options_init(&n, sizeof n, &d, sizeof d);
    cr_assert_eq(n.t.c, 3);
    cr_assert_eq(n.newer, 0);
    cr_assert_eq(n.t.struct_size, sizeof n);
    two_versions got;
    defaults(&got);
    REFUSED(dlc__options_take_as(&got, sizeof got, &n, "two_versions", "two_init", older),
            "newer dlcache header");
    dlc__options_init(NULL, 64, &d, sizeof d); /* nothing to write: no crash */
    uint8_t three[3] = {9, 9, 9};
    dlc__options_init(three, sizeof three, &d, sizeof d);
    cr_assert(three[0] == 9 && three[1] == 9 && three[2] == 9, "too small for struct_size");
}

Test(common_options, a_result_is_written_up_to_the_callers_size_only)
{
    two_versions all;
    defaults(&all);
    all.a = 10, all.b = 20, all.c = 30;
    old_caller o;
    memset(&o, 0xa5, sizeof o);
    o.struct_size = offsetof(old_caller, canary);
    cr_assert_eq(dlc__result_give_as(&o, &all, sizeof all, "two_versions", older), DLC_OK);
    cr_assert_eq(o.struct_size, 16, "the caller's struct_size is kept");
    cr_assert_eq(o.a, 10);
    cr_assert_eq(o.b, 20);
    for (size_t i = 0; i < sizeof o.canary; i++)
        cr_assert_eq(o.canary[i], 0xa5, "byte %zu past the caller's struct was written", i);
    /* 1 to 3 once wrapped to a huge copy (loader.c, 0.x); 0, 12 and newer are refused whole. */
    for (uint32_t bad = 0; bad <= 12; bad++) {
        if (bad == 0 || bad % 4 != 0 || bad == 12 || bad == 4 || bad == 8) {
            memset(&o, 0xa5, sizeof o);
            o.struct_size = bad;
            cr_assert_eq(dlc__result_give_as(&o, &all, sizeof all, "two_versions", older),
                         DLC_EINVAL, "struct_size %u", bad);
            cr_assert_eq(o.a, 0xa5a5a5a5u, "nothing written for struct_size %u", bad);
        }
    }
    two_versions n;
    n.struct_size = sizeof n + 8;
    REFUSED(dlc__result_give_as(&n, &all, sizeof all, "two_versions", older),
            "newer dlcache header");
    n.struct_size = sizeof n;
    cr_assert_eq(dlc__result_give(&n, &all, sizeof all, "two_versions"), DLC_OK);
    cr_assert_eq(n.c, 30);
}
