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
    cr_assert_eq(dlc_loader_num_sources(NULL), 0);
    /* Failed opens leave their out NULL, also when the failure is the NULL argument. */
    dlc_loader *l = (dlc_loader *)&st;
    cr_assert_eq(dlc_loader_open_mix(NULL, 1, NULL, NULL, &l), DLC_EINVAL);
    cr_assert_null(l);
    dlc_store *s = (dlc_store *)&st;
    cr_assert_eq(dlc_loader_open_store(NULL, NULL, &s), DLC_EINVAL);
    cr_assert_null(s);
}

/* config.net is read at open (the plan's progress callback) also for a local store: a struct
 * without dlc_warm_options_init() is refused there, not accepted and read past its size. */
Test(loader_options, net_options_are_checked_on_a_local_path_too)
{
    dlc_loader_config c = fx_config();
    dlc_warm_options net;
    dlc_warm_options_init(&net);
    c.net = &net;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(fx.path, &c, &l), DLC_OK, "%s", dlc_errmsg());
    dlc_loader_close(l);
    l = NULL;
    net.struct_size = 0;
    REFUSED(dlc_loader_open(fx.path, &c, &l), "dlc_loader_config.net", "dlc_warm_options_init");
    cr_assert_null(l);
    dlc_loader_plan_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    REFUSED(dlc_loader_plan(fx.path, &c, &pi), "dlc_loader_config.net");
    /* A NULL config is the defaults, as for dlc_loader_open(). */
    cr_assert_eq(dlc_loader_plan(fx.path, NULL, &pi), DLC_OK, "%s", dlc_errmsg());
    cr_assert_gt(pi.batches_per_rank, 0);
}

/* A result's struct_size must be one the struct had: 12 is inside the double lam, whose first
 * half was written. */
Test(loader_options, mixup_params_take_only_a_size_the_struct_had)
{
    dlc_mixup_params p;
    memset(&p, 0x5a, sizeof p);
    p.struct_size = 12;
    REFUSED(dlc_mixup_draw(0.2f, 1.0f, 1.0f, 0.5f, 1, 0, 0, 1, 0, 8, 8, &p), "dlc_mixup_draw",
            "dlc_mixup_params", "struct_size 12");
    cr_assert_eq(p.mode, 0x5a5a5a5au, "nothing written");
    p.struct_size = sizeof p;
    cr_assert_eq(dlc_mixup_draw(0.2f, 1.0f, 1.0f, 0.5f, 1, 0, 0, 1, 0, 8, 8, &p), DLC_OK, "%s",
                 dlc_errmsg());
    cr_assert_eq(p.struct_size, sizeof p);
}
