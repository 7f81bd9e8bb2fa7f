/* The loader's options through the growth rule (include/dlcache/status.h, "How structs grow";
 * the rule itself: tests/common/test_common_options.c): a program built against an older, shorter
 * dlc_loader_config gets the defaults for the fields it did not know; one that forgot
 * dlc_loader_config_init() (struct_size 0) is refused naming the struct and its _init(); one
 * built against a newer header than the library is refused; a result (the stream stats) is
 * written only up to the caller's size. */
#include "common.h"
#include "loader_fixture.h"

#include <criterion/criterion.h>
#include <stddef.h>
#include <string.h>

#define REFUSED(call, ...)                                                                         \
    do {                                                                                           \
        cr_assert_eq((call), DLC_EINVAL);                                                          \
        const char *const want_[] = {__VA_ARGS__, NULL};                                           \
        for (int i_ = 0; want_[i_]; i_++)                                                          \
            cr_assert(strstr(dlc_errmsg(), want_[i_]) != NULL, "'%s' not in: %s", want_[i_],       \
                      dlc_errmsg());                                                               \
    } while (0)

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

/* A size no header had (before 1.0 the library took any multiple of 4, and one cutting a pointer
 * in half crashed): refused naming the struct. Sizes of older headers are accepted from 1.1 on,
 * through the table tests/abi/update.sh writes; tests/abi/old_caller.c is such a program. */
Test(loader_options, a_size_no_header_had_is_refused)
{
    dlc_loader_config c = fx_config();
    c.max_lent = 99;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(fx.path, &c, &l), DLC_EINVAL, "the current size reads max_lent");
    cr_assert(strstr(dlc_errmsg(), "max_lent") != NULL, "%s", dlc_errmsg());
    c.struct_size = offsetof(dlc_loader_config, device_staging) + sizeof c.device_staging;
    REFUSED(dlc_loader_open(fx.path, &c, &l), "dlc_loader_config: struct_size", "no size");
    c.struct_size = offsetof(dlc_loader_config, fields) + 4; /* half of the pointer */
    REFUSED(dlc_loader_open(fx.path, &c, &l), "dlc_loader_config: struct_size", "no size");
    cr_assert_null(l);
}

Test(loader_options, the_current_size_is_taken)
{
    dlc_loader_config c = fx_config();
    dlc_loader *l = NULL;
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

Test(loader_options, stream_stats_are_written_up_to_the_callers_size)
{
    dlc_loader_config c = fx_config();
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(fx.path, &c, &l), DLC_OK, "%s", dlc_errmsg());
    dlc_loader_stream_stats st;
    for (uint32_t bad = 1; bad < 4; bad++) { /* once a wrap to a huge memcpy */
        memset(&st, 0xa5, sizeof st);
        st.struct_size = bad;
        REFUSED(dlc_loader_get_stream_stats(l, &st), "dlc_loader_stream_stats: struct_size");
    }
    memset(&st, 0xa5, sizeof st);
    st.struct_size = sizeof st;
    cr_assert_eq(dlc_loader_get_stream_stats(l, &st), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(st.hits, 0);
    cr_assert_eq(st.downloads, 0);
    cr_assert_eq(dlc_loader_get_stream_stats(l, NULL), DLC_EINVAL);
    dlc_loader_close(l);
}

Test(loader_options, null_is_answered_not_a_crash)
{
    dlc_loader_stats st;
    memset(&st, 0xa5, sizeof st);
    dlc_loader_get_stats(NULL, &st);
    cr_assert_eq(st.batches, 0);
    cr_assert_eq(st.device, -1);
    dlc_loader_get_stats(NULL, NULL);
    cr_assert_eq(dlc_loader_batches_per_epoch(NULL), 0);
    cr_assert_eq(dlc_loader_store_count(NULL), 0);
    cr_assert_null(dlc_loader_store(NULL));
    cr_assert_eq(dlc_loader_host_slots(NULL, NULL, NULL, 0), 0);
    cr_assert_null(dlc_store_get_info(NULL));
    cr_assert_null(dlc_store_fields(NULL));
    cr_assert_null(dlc_store_path(NULL));
    cr_assert_eq(dlc_store_fd(NULL), -1);
    cr_assert_eq(dlc_store_num_files(NULL), 0);
    cr_assert_eq(dlc_store_record_file(NULL, 0), UINT32_MAX);
    dlc_value v[4];
    cr_assert_eq(dlc_store_read_values(NULL, 0, v), DLC_EINVAL);
}
