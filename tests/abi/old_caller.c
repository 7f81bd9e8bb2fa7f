/* An old caller: a program compiled against the public headers of a released version, saved in
 * tests/abi/include/ by tests/abi/update.sh (1.0 today), and run against the library built from
 * the tree (ctest abi_old_caller; under ASan in the asan step). It passes every struct the API
 * takes or fills with canary bytes after it, and a heap copy of exactly the struct's size (which
 * ASan guards), and checks that the library wrote nothing past the size this program knows: the
 * growth rule of include/dlcache/status.h ("How structs grow") seen from outside. Before 1.0 the
 * _init()s wrote the library's size, so a library whose structs had grown overwrote the canary
 * of a program built against the older header. It must pass today and after every later growth. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp() */
#endif
#include <dlcache/build.h>
#include <dlcache/loader.h>
#include <dlcache/set.h>
#include <dlcache/status.h>
#include <dlcache/store.h>
#include <dlcache/warm.h>
#include <dlcache/writer.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CANARY 0xa5
#define CANARY_BYTES 64

static int failures;

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "old_caller: FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    failures++;
}

#define EXPECT_OK(call)                                                                            \
    do {                                                                                           \
        const dlc_status rc_ = (call);                                                             \
        if (rc_ != DLC_OK) {                                                                       \
            fail("%s: %s (%s)", #call, dlc_strerror(rc_), dlc_errmsg());                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* A struct of this program's header with canary bytes right after it. */
#define GUARDED(T)                                                                                 \
    struct {                                                                                       \
        T v;                                                                                       \
        unsigned char canary[CANARY_BYTES];                                                        \
    }

static void check_canary(const unsigned char *c, const char *what)
{
    for (int i = 0; i < CANARY_BYTES; i++)
        if (c[i] != CANARY) {
            fail("%s: the library wrote byte %d past the struct this program knows", what, i);
            return;
        }
}

#define ARM(g) memset(&(g), CANARY, sizeof(g))
#define CHECK(g, what) check_canary((g).canary, what)

/* Each options struct: its _init() on the stack with a canary after it, and on the heap at
 * exactly the header's size, so that ASan sees a write past it. */
#define CHECK_INIT(T, init)                                                                        \
    do {                                                                                           \
        GUARDED(T) g_;                                                                             \
        ARM(g_);                                                                                   \
        init(&g_.v);                                                                               \
        CHECK(g_, #init);                                                                          \
        if (g_.v.struct_size != sizeof(T))                                                         \
            fail("%s: struct_size %u, this program's sizeof is %zu", #init, g_.v.struct_size,      \
                 sizeof(T));                                                                       \
        T *h_ = malloc(sizeof(T));                                                                 \
        init(h_);                                                                                  \
        free(h_);                                                                                  \
    } while (0)

static char dir[] = "/tmp/dlc-old-caller-XXXXXX";

static void write_store(const char *path, uint32_t n)
{
    const dlc_field_spec spec[2] = {
        {.name = "image",
         .kind = DLC_FIELD_IMAGE,
         .encoding = DLC_ENCODING_RAW,
         .shape = {8, 8, 3}},
        {.name = "label", .kind = DLC_FIELD_INT, .flags = DLC_FIELD_LABEL},
    };
    const char *const labels[2] = {"a", "b"};
    GUARDED(dlc_writer_config) cfg;
    ARM(cfg);
    dlc_writer_config_init(&cfg.v);
    cfg.v.fields = spec;
    cfg.v.num_fields = 2;
    cfg.v.label_names = labels;
    cfg.v.num_labels = 2;
    dlc_writer *w = NULL;
    EXPECT_OK(dlc_writer_open(path, &cfg.v, &w));
    CHECK(cfg, "dlc_writer_open");
    dlc_record_builder *b = NULL;
    EXPECT_OK(dlc_record_builder_create(w, &b));
    uint8_t px[8 * 8 * 3];
    for (uint32_t i = 0; i < n; i++) {
        memset(px, (int)i, sizeof px);
        const dlc_image img = {.data = px, .width = 8, .height = 8, .channels = 3, .stride = 24};
        EXPECT_OK(dlc_record_set_image(b, 0, &img));
        EXPECT_OK(dlc_record_set_int(b, 1, i % 2));
        EXPECT_OK(dlc_record_seal(b));
        EXPECT_OK(dlc_writer_append(w, b));
    }
    dlc_record_builder_destroy(b);
    EXPECT_OK(dlc_writer_finish(w));
}

static void read_store(const char *path)
{
    dlc_store *s = NULL;
    EXPECT_OK(dlc_store_open(path, 0, &s));
    const dlc_store_info *info = dlc_store_get_info(s);
    if (!info || info->count != 16 || info->num_fields != 2)
        fail("dlc_store_get_info: not the store written");
    dlc_store_reader *r = NULL;
    EXPECT_OK(dlc_store_reader_open(s, &r));
    typedef dlc_value two_values[2];
    GUARDED(two_values) v;
    ARM(v);
    EXPECT_OK(dlc_store_read_values(r, 3, v.v));
    CHECK(v, "dlc_store_read_values");
    if (v.v[1].i != 1)
        fail("dlc_store_read_values: label %lld, want 1", (long long)v.v[1].i);
    dlc_store_reader_close(r);
    dlc_store_close(s);
}

static void load_store(const char *path)
{
    GUARDED(dlc_loader_config) cfg;
    ARM(cfg);
    dlc_loader_config_init(&cfg.v);
    CHECK(cfg, "dlc_loader_config_init");
    cfg.v.batch_size = 4;
    cfg.v.crop_h = 8;
    cfg.v.crop_w = 8;
    cfg.v.threads = 2;
    cfg.v.prefetch = 2;
    GUARDED(dlc_warm_options) net;
    ARM(net);
    dlc_warm_options_init(&net.v);
    CHECK(net, "dlc_warm_options_init");
    cfg.v.net = &net.v;

    GUARDED(dlc_loader_plan_info) plan;
    ARM(plan);
    plan.v.struct_size = sizeof plan.v;
    EXPECT_OK(dlc_loader_plan(path, &cfg.v, &plan.v));
    CHECK(plan, "dlc_loader_plan");

    dlc_loader *l = NULL;
    EXPECT_OK(dlc_loader_open(path, &cfg.v, &l));
    CHECK(cfg, "dlc_loader_open");
    uint64_t samples = 0;
    for (;;) {
        GUARDED(dlc_batch) b;
        ARM(b);
        const dlc_status rc = dlc_loader_next(l, &b.v);
        CHECK(b, "dlc_loader_next");
        if (rc == DLC_END)
            break;
        EXPECT_OK(rc);
        samples += b.v.count;
    }
    if (samples != 16)
        fail("one epoch gave %llu samples, want 16", (unsigned long long)samples);
    GUARDED(dlc_loader_stats) st;
    ARM(st);
    dlc_loader_get_stats(l, &st.v);
    CHECK(st, "dlc_loader_get_stats");
    if (st.v.samples != 16)
        fail("dlc_loader_get_stats: %llu samples", (unsigned long long)st.v.samples);
    GUARDED(dlc_loader_stream_stats) ss;
    ARM(ss);
    ss.v.struct_size = sizeof ss.v;
    EXPECT_OK(dlc_loader_get_stream_stats(l, &ss.v));
    CHECK(ss, "dlc_loader_get_stream_stats");
    uint8_t state[DLC_LOADER_STATE_SIZE + CANARY_BYTES];
    memset(state, CANARY, sizeof state);
    EXPECT_OK(dlc_loader_state_save(l, state));
    check_canary(state + DLC_LOADER_STATE_SIZE, "dlc_loader_state_save");
#ifdef DLC_VERSION_MAJOR
    GUARDED(dlc_loader_report) rep;
    ARM(rep);
    rep.v.struct_size = sizeof rep.v;
    EXPECT_OK(dlc_loader_get_report(l, 0, &rep.v));
    CHECK(rep, "dlc_loader_get_report");
    if (rep.v.batches != 4)
        fail("dlc_loader_get_report: %llu batches, want 4", (unsigned long long)rep.v.batches);
#endif
    dlc_loader_close(l);

#ifdef DLC_VERSION_MAJOR
    /* The store as a one-source mixture: its options, the source array and the source info. */
    GUARDED(dlc_mix_source) src;
    ARM(src);
    dlc_mix_source_init(&src.v);
    CHECK(src, "dlc_mix_source_init");
    src.v.path = path;
    GUARDED(dlc_mix_options) mo;
    ARM(mo);
    dlc_mix_options_init(&mo.v);
    CHECK(mo, "dlc_mix_options_init");
    EXPECT_OK(dlc_loader_open_mix(&src.v, 1, &mo.v, &cfg.v, &l));
    CHECK(src, "dlc_loader_open_mix");
    GUARDED(dlc_mix_source_info) si;
    ARM(si);
    si.v.struct_size = sizeof si.v;
    EXPECT_OK(dlc_loader_source_info(l, 0, &si.v));
    CHECK(si, "dlc_loader_source_info");
    if (si.v.count != 16)
        fail("dlc_loader_source_info: %llu records, want 16", (unsigned long long)si.v.count);
    dlc_loader_close(l);
#endif
}

int main(void)
{
#ifdef DLC_VERSION_MAJOR
    if (dlc_version_number() / 10000 != DLC_VERSION_MAJOR) {
        fprintf(stderr, "old_caller: library %s is not of this header's major version %d\n",
                dlc_version(), DLC_VERSION_MAJOR);
        return 1;
    }
    printf("old_caller: built against dlcache %d.%d.%d headers, running with library %s\n",
           DLC_VERSION_MAJOR, DLC_VERSION_MINOR, DLC_VERSION_PATCH, dlc_version());
#else /* Headers from before 1.0 (no version.h): how the test was shown failing on 0.1. */
    printf("old_caller: built against pre-1.0 headers, running with library %s\n", dlc_version());
#endif
    CHECK_INIT(dlc_loader_config, dlc_loader_config_init);
    CHECK_INIT(dlc_writer_config, dlc_writer_config_init);
    CHECK_INIT(dlc_build_options, dlc_build_options_init);
    CHECK_INIT(dlc_warm_options, dlc_warm_options_init);
    CHECK_INIT(dlc_warm_push_options, dlc_warm_push_options_init);
#ifdef DLC_VERSION_MAJOR
    CHECK_INIT(dlc_mix_source, dlc_mix_source_init);
    CHECK_INIT(dlc_mix_options, dlc_mix_options_init);
#endif

    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[128];
    snprintf(path, sizeof path, "%s/old.dlc", dir);
    write_store(path, 16);
    read_store(path);
    load_store(path);

    /* A directory that is no set: refused, and the report untouched past this program's size. */
    GUARDED(dlc_set_join_report) jr;
    ARM(jr);
    if (dlc_set_join(dir, &jr.v) == DLC_OK)
        fail("dlc_set_join of a directory without parts succeeded");
    CHECK(jr, "dlc_set_join");

    unlink(path);
    rmdir(dir);
    if (failures) {
        fprintf(stderr, "old_caller: %d failure(s)\n", failures);
        return 1;
    }
    printf("old_caller: every struct written within this program's sizes\n");
    return 0;
}
