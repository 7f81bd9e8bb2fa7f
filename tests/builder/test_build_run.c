/* dlc_build() end to end on small trees of real JPEGs: the store does not
 * depend on the thread count, bad files are skipped and named, strict mode
 * stops, nothing is replaced without force, a cancel leaves nothing behind.
 *
 * dlc-test-label: threads (the build runs worker threads; TSan checks them). */
#include "source.h"
#include "build_test_util.h"

#include <dlcache/build.h>
#include <dlcache/store.h>
#include <dlcache/tokens.h>

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <sys/wait.h>

TMPDIR_SUITE(build);

/* dir/train/{cat,dog,eel}/NNN.jpg: @p per class images of varied sizes. */
static char *make_tree(int per_class)
{
    static const char *const classes[] = {"cat", "dog", "eel"};
    btu_mkdir(dir, "train");
    char *train = tmp_path(dir, "train");
    for (int c = 0; c < 3; c++) {
        btu_mkdir(train, classes[c]);
        char *cdir = tmp_path(train, classes[c]);
        for (int i = 0; i < per_class; i++) {
            char name[32];
            snprintf(name, sizeof name, "%03d.jpg", i);
            btu_jpeg(cdir, name, 40 + (uint32_t)(i * 7 % 50), 30 + (uint32_t)(i * 11 % 60),
                     (unsigned)(c * 100 + i));
        }
        free(cdir);
    }
    return train;
}

static dlc_build_options opts(uint32_t threads)
{
    dlc_build_options o;
    dlc_build_options_init(&o);
    o.size = 24;
    o.threads = threads;
    return o;
}

static dlc_status build(const char *src, const char *out, const dlc_build_options *o,
                        dlc_build_report **r)
{
    const char *srcs[] = {src};
    return dlc_build(srcs, 1, out, o, r);
}

/* No OUT.tmp-* file is left in dir. */
static int temp_files(void)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return n;
}

Test(build, same_store_for_any_thread_count)
{
    char *train = make_tree(12);
    uint64_t digest[4];
    const uint32_t threads[4] = {1, 2, 3, 8};
    for (int k = 0; k < 4; k++) {
        char name[32];
        snprintf(name, sizeof name, "s%u.dlc", threads[k]);
        char *out = tmp_path(dir, name);
        dlc_build_options o = opts(threads[k]);
        dlc_build_report *r = NULL;
        cr_assert_eq(build(train, out, &o, &r), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(r->count, 36);
        cr_assert_eq(r->skipped, 0);
        cr_assert_eq(r->threads, threads[k]);
        cr_assert_eq(r->bytes_out, 36ull * 24 * 24 * 3);
        cr_assert(r->bytes_in > 0 && r->file_bytes > r->bytes_out);
        digest[k] = r->content_digest;

        dlc_store *s = NULL;
        cr_assert_eq(dlc_store_open(out, 0, &s), DLC_OK, "%s", dlc_errmsg());
        const dlc_store_info *info = dlc_store_get_info(s);
        cr_assert_eq(info->count, 36);
        cr_assert_eq(info->content_digest, r->content_digest);
        cr_assert_eq(info->height, 24);
        cr_assert_eq(info->width, 24);
        cr_assert_eq(info->num_labels, 3);
        cr_assert_str_eq(dlc_store_label_name(s, 2), "eel");
        cr_assert_eq(dlc_store_label_counts(s)[1], 12);
        /* Record order is item order: class by class. */
        dlc_store_reader *rd = NULL;
        cr_assert_eq(dlc_store_reader_open(s, &rd), DLC_OK);
        for (uint64_t i = 0; i < 36; i++) {
            dlc_record rec;
            cr_assert_eq(dlc_store_read(rd, i, &rec), DLC_OK);
            cr_assert_eq(rec.label, (int64_t)(i / 12));
        }
        dlc_store_reader_close(rd);
        const void *meta;
        size_t msize;
        cr_assert_eq(dlc_store_meta(s, "build", &meta, &msize), DLC_OK);
        cr_assert(memmem(meta, msize, "\"size\":24", 9) != NULL);
        cr_assert_eq(dlc_store_verify(s, NULL, NULL, NULL), DLC_OK, "%s", dlc_errmsg());
        dlc_store_close(s);
        dlc_build_report_free(r);
        free(out);
    }
    for (int k = 1; k < 4; k++)
        cr_assert_eq(digest[k], digest[0], "threads %u gave another store", threads[k]);
    cr_assert_eq(temp_files(), 0);
    free(train);
}

Test(build, crop_none_and_jpeg_encoding)
{
    char *train = make_tree(4);
    char *out = tmp_path(dir, "j.dlc");
    dlc_build_options o = opts(2);
    o.center_crop = 0;
    o.encoding = DLC_ENCODING_JPEG;
    o.quality = 80;
    dlc_build_report *r = NULL;
    cr_assert_eq(build(train, out, &o, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(out, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_get_info(s)->encoding, DLC_ENCODING_JPEG);
    dlc_store_reader *rd = NULL;
    cr_assert_eq(dlc_store_reader_open(s, &rd), DLC_OK);
    dlc_codec *c = NULL;
    cr_assert_eq(dlc_codec_create(&c), DLC_OK);
    for (uint64_t i = 0; i < r->count; i++) {
        dlc_record rec;
        cr_assert_eq(dlc_store_read(rd, i, &rec), DLC_OK);
        cr_assert(rec.width == 24 || rec.height == 24, "shorter side is the size");
        cr_assert(rec.width >= 24 && rec.height >= 24);
        dlc_image img;
        cr_assert_eq(dlc_jpeg_decode(c, rec.data, rec.size, 0, 0, &img), DLC_OK);
        cr_assert_eq(img.width, rec.width);
        cr_assert_eq(img.height, rec.height);
    }
    dlc_codec_destroy(c);
    dlc_store_reader_close(rd);
    dlc_store_close(s);
    dlc_build_report_free(r);
    free(out);
    free(train);
}

Test(build, bad_files_are_skipped_and_named)
{
    char *train = make_tree(3);
    char *cat = tmp_path(train, "cat");
    char *p = tmp_path(cat, "0text.jpg");
    btu_write_str(p, "this is not an image\n");
    free(p);
    p = tmp_path(cat, "1empty.jpg");
    btu_write_str(p, "");
    free(p);
    /* A JPEG cut in half. */
    char *good = tmp_path(cat, "000.jpg");
    FILE *f = fopen(good, "rb");
    uint8_t buf[65536];
    const size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    p = tmp_path(cat, "2trunc.jpg");
    btu_write(p, buf, n / 2);
    free(p);
    p = tmp_path(cat, "3gone.jpg");
    cr_assert(symlink("/nonexistent.jpg", p) == 0);
    free(p);
    p = tmp_path(cat, "4pic.png");
    btu_write_str(p, "png");
    free(p);

    char *out = tmp_path(dir, "s.dlc");
    dlc_build_options o = opts(2);
    dlc_build_report *r = NULL;
    cr_assert_eq(build(train, out, &o, &r), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(r->count, 9);
    cr_assert_eq(r->skipped, 5);
    static const char *const want[5][2] = {
        {"0text.jpg", "not a JPEG"},   {"1empty.jpg", "empty"},    {"2trunc.jpg", "decode"},
        {"3gone.jpg", "No such file"}, {"4pic.png", "not a JPEG"},
    };
    for (int i = 0; i < 5; i++) {
        cr_assert(strstr(r->skips[i].path, want[i][0]) != NULL, "%s", r->skips[i].path);
        cr_assert(strstr(r->skips[i].reason, want[i][1]) != NULL, "%s: %s", r->skips[i].path,
                  r->skips[i].reason);
    }
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(out, 0, &s), DLC_OK);
    cr_assert_eq(dlc_store_get_info(s)->skipped, 5);
    cr_assert_eq(dlc_store_label_counts(s)[0], 3);
    dlc_store_close(s);
    dlc_build_report_free(r);

    /* Strict: the first bad item in order stops the build; no store, no temp. */
    char *out2 = tmp_path(dir, "strict.dlc");
    o.strict = 1;
    cr_assert_eq(build(train, out2, &o, &r), DLC_EDECODE);
    cr_assert(strstr(dlc_errmsg(), "0text.jpg") != NULL, "%s", dlc_errmsg());
    cr_assert(r != NULL);
    cr_assert_eq(r->skipped, 1);
    cr_assert(!btu_exists(out2));
    cr_assert_eq(temp_files(), 0);
    dlc_build_report_free(r);
    free(out2);
    free(out);
    free(good);
    free(cat);
    free(train);
}

Test(build, no_valid_image)
{
    btu_mkdir(dir, "t");
    char *t = tmp_path(dir, "t");
    btu_mkdir(t, "a");
    btu_mkdir(t, "b");
    char *p = tmp_path(t, "a/x.jpg");
    btu_write_str(p, "nope");
    free(p);
    char *out = tmp_path(dir, "s.dlc");
    dlc_build_options o = opts(2);
    dlc_build_report *r = NULL;
    cr_assert_eq(build(t, out, &o, &r), DLC_ENOIMAGES, "%s", dlc_errmsg());
    cr_assert(r != NULL);
    cr_assert_eq(r->count, 0);
    cr_assert_eq(r->skipped, 1);
    dlc_build_report_free(r);
    cr_assert(!btu_exists(out));
    cr_assert_eq(temp_files(), 0);

    /* Class folders without any file at all. */
    p = tmp_path(t, "a/x.jpg");
    unlink(p);
    free(p);
    cr_assert_eq(build(t, out, &o, &r), DLC_ENOIMAGES);
    dlc_build_report_free(r);
    cr_assert(!btu_exists(out));
    free(out);
    free(t);
}

Test(build, existing_store_needs_force)
{
    char *train = make_tree(2);
    char *out = tmp_path(dir, "s.dlc");
    btu_write_str(out, "precious");
    dlc_build_options o = opts(1);
    dlc_build_report *r = NULL;
    cr_assert_eq(build(train, out, &o, &r), DLC_EEXIST);
    cr_assert_null(r);
    FILE *f = fopen(out, "r");
    char buf[16] = {0};
    cr_assert(fgets(buf, sizeof buf, f) != NULL);
    fclose(f);
    cr_assert_str_eq(buf, "precious");
    o.force = 1;
    cr_assert_eq(build(train, out, &o, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(out, 0, &s), DLC_OK);
    cr_assert_eq(dlc_store_get_info(s)->count, 6);
    dlc_store_close(s);
    dlc_build_report_free(r);
    free(out);
    free(train);
}

/* Cancel at the Nth progress call (the first comes before any record). */
typedef struct cancel_state {
    int calls, at;
    uint64_t done;
} cancel_state;

static int cancel_at(void *user, const dlc_build_progress *p)
{
    cancel_state *c = user;
    c->done = p->done;
    return ++c->calls >= c->at;
}

Test(build, cancel_leaves_nothing)
{
    char *train = make_tree(20);
    char *out = tmp_path(dir, "s.dlc");
    for (int at = 1; at <= 3; at++) {
        dlc_build_options o = opts(2);
        cancel_state c = {.at = at};
        o.progress = cancel_at;
        o.progress_user = &c;
        dlc_build_report *r = NULL;
        const dlc_status rc = build(train, out, &o, &r);
        if (rc == DLC_OK && at > 1) {
            /* The build finished before the at-th call: the final call's
             * answer is ignored and the store is complete. */
            cr_assert_eq(c.done, 60);
            dlc_build_report_free(r);
            cr_assert_eq(unlink(out), 0);
            continue;
        }
        cr_assert_eq(rc, DLC_ECANCELED, "at call %d: %s", at, dlc_errmsg());
        cr_assert_null(r);
        cr_assert(!btu_exists(out));
        cr_assert_eq(temp_files(), 0);
    }
    free(out);
    free(train);
}

Test(build, stale_temp_of_dead_build_is_removed)
{
    char *train = make_tree(2);
    char *out = tmp_path(dir, "s.dlc");
    /* The PID of a process that has exited: its temp file is stale. */
    const pid_t child = fork();
    if (child == 0)
        _exit(0);
    cr_assert(child > 0);
    cr_assert_eq(waitpid(child, NULL, 0), child);
    char name[64];
    snprintf(name, sizeof name, "s.dlc.tmp-%d", (int)child);
    char *stale = tmp_path(dir, name);
    btu_write_str(stale, "half a store");
    /* A live process's temp file (ours, pid 1) stays. */
    char *live = tmp_path(dir, "s.dlc.tmp-1");
    btu_write_str(live, "someone else's build");
    dlc_build_options o = opts(1);
    dlc_build_report *r = NULL;
    cr_assert_eq(build(train, out, &o, &r), DLC_OK, "%s", dlc_errmsg());
    cr_assert(!btu_exists(stale));
    cr_assert(btu_exists(live));
    dlc_build_report_free(r);
    free(live);
    free(stale);
    free(out);
    free(train);
}

Test(build, manifest_and_tar_labels)
{
    char *train = make_tree(2);
    char *m = tmp_path(dir, "list.tsv");
    btu_write_str(m, "train/cat/000.jpg\t4\ntrain/dog/001.jpg\t1\n# end\n");
    char *out = tmp_path(dir, "m.dlc");
    dlc_build_options o = opts(2);
    dlc_build_report *r = NULL;
    cr_assert_eq(build(m, out, &o, &r), DLC_OK, "%s", dlc_errmsg());
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(out, 0, &s), DLC_OK);
    cr_assert_eq(dlc_store_get_info(s)->count, 2);
    cr_assert_eq(dlc_store_get_info(s)->num_labels, 5);
    cr_assert_str_eq(dlc_store_label_name(s, 4), "4");
    dlc_store_reader *rd = NULL;
    cr_assert_eq(dlc_store_reader_open(s, &rd), DLC_OK);
    dlc_record rec;
    cr_assert_eq(dlc_store_read(rd, 0, &rec), DLC_OK);
    cr_assert_eq(rec.label, 4);
    cr_assert_eq(dlc_store_read(rd, 1, &rec), DLC_OK);
    cr_assert_eq(rec.label, 1);
    dlc_store_reader_close(rd);
    dlc_store_close(s);
    dlc_build_report_free(r);

    /* A malformed manifest is an error before anything is written. */
    btu_write_str(m, "train/cat/000.jpg\tcat\n");
    o.force = 1;
    cr_assert_eq(build(m, out, &o, &r), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "list.tsv:1") != NULL, "%s", dlc_errmsg());
    cr_assert_null(r);
    cr_assert_eq(temp_files(), 0);
    free(out);
    free(m);
    free(train);
}

Test(build, bad_options)
{
    char *out = tmp_path(dir, "s.dlc");
    dlc_build_options o = opts(1);
    o.size = 0;
    dlc_build_report *r = NULL;
    cr_assert_eq(build(dir, out, &o, &r), DLC_EINVAL);
    o = opts(1);
    o.encoding = 7;
    cr_assert_eq(build(dir, out, &o, &r), DLC_EINVAL);
    o = opts(1);
    cr_assert_eq(dlc_build(NULL, 0, out, &o, &r), DLC_EINVAL);
    free(out);
}

/* Options grow at their end (status.h, "How structs grow"), and a struct_size is taken only when
 * some header had it: one ending at log_user, which no released header had, is refused naming
 * the struct (the defaults an older size gets: tests/common/test_common_options.c). */
Test(build, a_size_no_header_had_is_refused)
{
    char *train = make_tree(1);
    char *out = tmp_path(dir, "old.dlc");
    dlc_build_options o = opts(1);
    dlc_build_report *r = NULL;
    o.struct_size = offsetof(dlc_build_options, log_user) + sizeof o.log_user;
    cr_assert_eq(build(train, out, &o, &r), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "dlc_build_options: struct_size") != NULL, "%s", dlc_errmsg());
    cr_assert_null(r);
    free(out);
    free(train);
}

Test(build, options_without_init_or_from_a_newer_header_are_refused)
{
    char *out = tmp_path(dir, "s.dlc");
    dlc_build_options o = opts(1);
    o.struct_size = 0;
    dlc_build_report *r = NULL;
    cr_assert_eq(build(dir, out, &o, &r), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "dlc_build_options: struct_size is 0") != NULL, "%s",
              dlc_errmsg());
    cr_assert(strstr(dlc_errmsg(), "dlc_build_options_init()") != NULL, "%s", dlc_errmsg());
    cr_assert_null(r);
    o.struct_size = sizeof o + 8;
    cr_assert_eq(build(dir, out, &o, &r), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "newer dlcache header") != NULL, "%s", dlc_errmsg());
    cr_assert(!btu_exists(out));
    free(out);
}

/* ---- Fields: channels, masks, manifest columns ------------------------------------------------
 */

static dlc_status build_fields(const char *src, const char *out, const dlc_build_options *o,
                               dlc_build_report **r)
{
    const char *srcs[] = {src};
    return dlc_build(srcs, 1, out, o, r);
}

/* Build @p src at 1 and 3 threads; the stores must be the same. Returns the 1-thread store's
 * report (the store at @p out). */
static dlc_build_report *build_twice(const char *src, const char *out, dlc_build_options o)
{
    dlc_build_report *r1 = NULL, *r3 = NULL;
    char *out3 = malloc(strlen(out) + 3);
    sprintf(out3, "%s.3", out);
    o.threads = 1;
    cr_assert_eq(build_fields(src, out, &o, &r1), DLC_OK, "%s", dlc_errmsg());
    o.threads = 3;
    cr_assert_eq(build_fields(src, out3, &o, &r3), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(r1->content_digest, r3->content_digest, "1 and 3 threads gave other stores");
    cr_assert_eq(r1->count, r3->count);
    dlc_build_report_free(r3);
    unlink(out3);
    free(out3);
    return r1;
}

/* The values of record @p i of the store at @p path, with the schema. */
typedef struct read_back {
    dlc_store *s;
    dlc_store_reader *rd;
    dlc_value v[DLC_MAX_FIELDS];
} read_back;

static void read_open(read_back *b, const char *path)
{
    cr_assert_eq(dlc_store_open(path, 0, &b->s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_reader_open(b->s, &b->rd), DLC_OK);
}

static const dlc_value *read_field(read_back *b, uint64_t i, const char *name)
{
    const int f = dlc_store_find_field(b->s, name);
    cr_assert(f >= 0, "no field %s", name);
    cr_assert_eq(dlc_store_read_values(b->rd, i, b->v), DLC_OK, "%s", dlc_errmsg());
    return &b->v[f];
}

static void read_close(read_back *b)
{
    cr_assert_eq(dlc_store_verify(b->s, NULL, NULL, NULL), DLC_OK, "%s", dlc_errmsg());
    dlc_store_reader_close(b->rd);
    dlc_store_close(b->s);
}

Test(build, gray_images)
{
    char *train = make_tree(3);
    char *out = tmp_path(dir, "g.dlc");
    dlc_build_options o = opts(1);
    o.channels = 1;
    dlc_build_report *r = build_twice(train, out, o);
    cr_assert_eq(r->channels, 1);
    cr_assert_eq(r->bytes_out, 9ull * 24 * 24, "one byte per pixel");
    read_back b;
    read_open(&b, out);
    cr_assert_eq(dlc_store_get_info(b.s)->channels, 1);
    /* Record 0 is cat/000.jpg, decoded to gray by the decoder's own 1-channel path. */
    char *p = tmp_path(train, "cat/000.jpg");
    FILE *fp = fopen(p, "rb");
    uint8_t jpeg[65536];
    const size_t n = fread(jpeg, 1, sizeof jpeg, fp);
    fclose(fp);
    dlc_codec *c = NULL;
    cr_assert_eq(dlc_codec_create(&c), DLC_OK);
    dlc_image img;
    cr_assert_eq(dlc_jpeg_decode_resize_as(c, jpeg, n, 1, 24, 1, &img), DLC_OK);
    const dlc_value *v = read_field(&b, 0, "image");
    cr_assert_eq(v->size, 24u * 24);
    for (uint32_t y = 0; y < 24; y++)
        cr_assert_arr_eq(v->data + y * 24, img.data + y * img.stride, 24, "row %u", y);
    dlc_codec_destroy(c);
    read_close(&b);
    dlc_build_report_free(r);
    free(p);
    free(out);
    free(train);
}

typedef struct log_capture {
    char text[4096];
    int warnings;
} log_capture;

static void capture_log(void *user, dlc_log_level level, const char *msg)
{
    log_capture *l = user;
    if (level < DLC_LOG_WARN)
        return;
    l->warnings++;
    strncat(l->text, msg, sizeof l->text - strlen(l->text) - 2);
    strcat(l->text, "\n");
}

/* Strict: a bad file stops the build and the error names it; no "skipped" notice about that
 * same file comes before (issue 17: cachebuild --strict printed "warning: ... skipped"). Without
 * strict the notice says it was skipped. */
Test(build, strict_does_not_call_the_bad_file_skipped)
{
    char *train = make_tree(2);
    char *cat = tmp_path(train, "cat");
    char *p = tmp_path(cat, "0text.jpg");
    btu_write_str(p, "this is not an image\n");
    char *out = tmp_path(dir, "strict-log.dlc");
    log_capture lc = {.text = ""};
    dlc_build_options o = opts(2);
    o.log = capture_log;
    o.log_user = &lc;
    o.strict = 1;
    dlc_build_report *r = NULL;
    cr_assert_eq(build(train, out, &o, &r), DLC_EDECODE);
    cr_assert(strstr(dlc_errmsg(), "0text.jpg"), "%s", dlc_errmsg());
    cr_assert_null(strstr(lc.text, "skipped"), "%s", lc.text);
    dlc_build_report_free(r);
    o.strict = 0;
    cr_assert_eq(build(train, out, &o, &r), DLC_OK, "%s", dlc_errmsg());
    cr_assert(strstr(lc.text, "0text.jpg: skipped: not a JPEG"), "%s", lc.text);
    dlc_build_report_free(r);
    free(out);
    free(p);
    free(cat);
    free(train);
}

Test(build, keep_channels_of_the_first_image)
{
    btu_mkdir(dir, "k");
    char *k = tmp_path(dir, "k");
    btu_mkdir(k, "a");
    btu_mkdir(k, "b");
    char *a = tmp_path(k, "a"), *bdir = tmp_path(k, "b");
    btu_jpeg_channels(a, "0.jpg", 40, 30, 1, 1);
    btu_jpeg_channels(a, "1.jpg", 40, 30, 2, 3);
    btu_jpeg_channels(bdir, "2.jpg", 30, 40, 3, 1);
    char *out = tmp_path(dir, "k.dlc");
    log_capture lc = {.text = ""};
    dlc_build_options o = opts(1);
    o.channels = DLC_BUILD_CHANNELS_KEEP;
    o.log = capture_log;
    o.log_user = &lc;
    dlc_build_report *r = build_twice(k, out, o);
    cr_assert_eq(r->channels, 1, "a gray first image makes a gray store");
    cr_assert_eq(r->converted, 1);
    cr_assert_eq(r->count, 3);
    cr_assert(strstr(lc.text, "1.jpg: 3 channels, stored as 1") != NULL, "%s", lc.text);
    cr_assert(strstr(lc.text, "0.jpg) decided") != NULL, "%s", lc.text);
    dlc_build_report_free(r);
    /* A colour first image makes a colour store; the gray ones are converted. */
    char *first = tmp_path(a, "0.jpg");
    unlink(first);
    btu_jpeg_channels(a, "0.jpg", 40, 30, 1, 3);
    unlink(out);
    r = build_twice(k, out, o);
    cr_assert_eq(r->channels, 3);
    cr_assert_eq(r->converted, 1);
    dlc_build_report_free(r);
    free(first);
    free(out);
    free(a);
    free(bdir);
    free(k);
}

/* An RGB mask whose pixel holds its own coordinates: red the column, green the row. */
static void coordinate_mask(const char *mdir, const char *name, uint32_t w, uint32_t h)
{
    uint8_t *px = malloc((size_t)w * h * 3);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)x;
            p[1] = (uint8_t)y;
            p[2] = 7;
        }
    const dlc_image img = {.data = px, .width = w, .height = h, .channels = 3, .stride = w * 3};
    btu_png(mdir, name, &img);
    free(px);
}

Test(build, masks_lie_on_their_images_pixels)
{
    /* Sizes below and above twice the target: with and without a DCT-scaled decode. */
    static const uint32_t sizes[][2] = {{61, 47}, {40, 90}, {100, 100}, {200, 57}, {33, 77}};
    btu_mkdir(dir, "seg");
    btu_mkdir(dir, "m");
    char *seg = tmp_path(dir, "seg"), *m = tmp_path(dir, "m");
    btu_mkdir(seg, "c");
    btu_mkdir(m, "c");
    char *sc = tmp_path(seg, "c"), *mc = tmp_path(m, "c");
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof name, "%d.jpg", i);
        btu_jpeg(sc, name, sizes[i][0], sizes[i][1], (unsigned)i);
        snprintf(name, sizeof name, "%d.png", i);
        coordinate_mask(mc, name, sizes[i][0], sizes[i][1]);
    }
    char *out = tmp_path(dir, "seg.dlc");
    for (int crop = 0; crop < 2; crop++) {
        dlc_build_options o = opts(1);
        o.masks = m;
        o.mask_encoding = crop ? DLC_ENCODING_PNG : -1;
        o.center_crop = crop;
        unlink(out);
        dlc_build_report *r = build_twice(seg, out, o);
        cr_assert_eq(r->count, 5);
        read_back b;
        read_open(&b, out);
        const dlc_field *mf = &dlc_store_fields(b.s)[dlc_store_find_field(b.s, "mask")];
        cr_assert(mf->flags & DLC_FIELD_MASK);
        cr_assert_eq(mf->shape[2], 3, "the first mask decides the channels");
        cr_assert_eq(mf->encoding, crop ? DLC_ENCODING_PNG : DLC_ENCODING_RAW);
        dlc_codec *c = NULL;
        cr_assert_eq(dlc_codec_create(&c), DLC_OK);
        for (uint64_t i = 0; i < 5; i++) {
            const uint32_t W = sizes[i][0], H = sizes[i][1];
            dlc_resize_geometry g;
            cr_assert_eq(dlc_resize_geometry_get(W, H, 24, crop, &g), DLC_OK);
            const dlc_value img = *read_field(&b, i, "image");
            const dlc_value *mv = read_field(&b, i, "mask");
            cr_assert(mv->dim0 == img.dim0 && mv->dim1 == img.dim1, "mask and image sizes");
            cr_assert(mv->dim0 == g.height && mv->dim1 == g.width);
            dlc_image px = {.data = (uint8_t *)mv->data, .stride = (size_t)g.width * 3};
            if (crop)
                cr_assert_eq(dlc_png_decode(c, mv->data, mv->size, &px), DLC_OK);
            /* Each mask pixel is the source pixel under the centre of its image pixel. */
            for (uint32_t y = 0; y < g.height; y++)
                for (uint32_t x = 0; x < g.width; x++) {
                    const uint8_t *p = px.data + y * px.stride + (size_t)x * 3;
                    const double cx = (x + g.x + 0.5) * W / g.resized_w;
                    const double cy = (y + g.y + 0.5) * H / g.resized_h;
                    cr_assert(p[0] <= cx + 1e-9 && cx < p[0] + 1 + 1e-9, "record %llu x %u",
                              (unsigned long long)i, x);
                    cr_assert(p[1] <= cy + 1e-9 && cy < p[1] + 1 + 1e-9, "record %llu y %u",
                              (unsigned long long)i, y);
                    cr_assert_eq(p[2], 7, "ids are never blended");
                }
        }
        dlc_codec_destroy(c);
        read_close(&b);
        dlc_build_report_free(r);
    }
    free(out);
    free(sc);
    free(mc);
    free(seg);
    free(m);
}

Test(build, items_without_a_good_mask_are_skipped)
{
    btu_mkdir(dir, "seg");
    btu_mkdir(dir, "m");
    char *seg = tmp_path(dir, "seg"), *m = tmp_path(dir, "m");
    btu_mkdir(seg, "c");
    btu_mkdir(m, "c");
    char *sc = tmp_path(seg, "c"), *mc = tmp_path(m, "c");
    uint8_t ids[30 * 20], rgb[30 * 20 * 3];
    memset(ids, 3, sizeof ids);
    memset(rgb, 3, sizeof rgb);
    const dlc_image gray = {.data = ids, .width = 30, .height = 20, .channels = 1, .stride = 30};
    const dlc_image small = {.data = ids, .width = 10, .height = 10, .channels = 1, .stride = 10};
    const dlc_image color = {.data = rgb, .width = 30, .height = 20, .channels = 3, .stride = 90};
    static const char *const names[] = {"a", "b", "c", "d", "e"};
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof name, "%s.jpeg", names[i]);
        btu_jpeg(sc, name, 30, 20, (unsigned)i);
    }
    btu_png(mc, "a.png", &gray);
    /* b has no mask */
    btu_png(mc, "c.png", &small);
    btu_png(mc, "d.png", &color);
    char *e = tmp_path(mc, "e.png");
    btu_write_str(e, "not a png");
    char *out = tmp_path(dir, "s.dlc");
    dlc_build_options o = opts(2);
    o.masks = m;
    dlc_build_report *r = NULL;
    cr_assert_eq(build_fields(seg, out, &o, &r), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(r->count, 1);
    cr_assert_eq(r->skipped, 4);
    static const char *const want[4][2] = {
        {"b.jpeg", "no mask: "},
        {"c.jpeg", "c.png is 10x10, its image 20x30 (height x width)"},
        {"d.jpeg", "has 3 channels; the store's masks have 1"},
        {"e.jpeg", "e.png cannot be decoded"},
    };
    for (int i = 0; i < 4; i++) {
        cr_assert(strstr(r->skips[i].path, want[i][0]) != NULL, "%s", r->skips[i].path);
        cr_assert(strstr(r->skips[i].reason, want[i][1]) != NULL, "%s", r->skips[i].reason);
    }
    cr_assert(strstr(r->skips[0].reason, "m/c/b.png") != NULL, "the mask's path: %s",
              r->skips[0].reason);
    dlc_build_report_free(r);
    /* Strict: the first item without its mask stops the build. */
    o.strict = 1;
    o.force = 1;
    cr_assert_eq(build_fields(seg, out, &o, &r), DLC_EDECODE);
    cr_assert(strstr(dlc_errmsg(), "b.jpeg: no mask") != NULL, "%s", dlc_errmsg());
    dlc_build_report_free(r);
    cr_assert_eq(temp_files(), 0);
    free(e);
    free(out);
    free(sc);
    free(mc);
    free(seg);
    free(m);
}

/* A ustar file of one member @p name holding @p text. */
static void one_member_tar(const char *path, const char *name, const char *text)
{
    uint8_t t[2048] = {0};
    snprintf((char *)t, 100, "%s", name);
    memcpy(t + 100, "0000644", 8);
    snprintf((char *)t + 124, 12, "%011o", (unsigned)strlen(text));
    snprintf((char *)t + 136, 12, "%011o", 0u);
    t[156] = '0';
    memcpy(t + 257, "ustar", 6);
    memcpy(t + 263, "00", 2);
    memset(t + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += t[i];
    snprintf((char *)t + 148, 8, "%06o", sum);
    memcpy(t + 512, text, strlen(text));
    btu_write(path, t, sizeof t);
}

Test(build, masks_need_a_folder_and_a_tree)
{
    char *train = make_tree(1);
    char *out = tmp_path(dir, "s.dlc");
    dlc_build_options o = opts(1);
    dlc_build_report *r = NULL;
    o.masks = "/nonexistent-masks";
    cr_assert_eq(build_fields(train, out, &o, &r), -ENOENT);
    cr_assert(strstr(dlc_errmsg(), "/nonexistent-masks") != NULL, "%s", dlc_errmsg());
    char *file = tmp_path(dir, "afile");
    btu_write_str(file, "x");
    o.masks = file;
    cr_assert_eq(build_fields(train, out, &o, &r), DLC_EINVAL);
    /* A tar member has no path in a tree to find its mask by. */
    char *tar = tmp_path(dir, "x.tar");
    one_member_tar(tar, "k.cls", "1");
    o.masks = dir;
    cr_assert_eq(build_fields(tar, out, &o, &r), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "x.tar: masks are found by an image's path") != NULL, "%s",
              dlc_errmsg());
    cr_assert(!btu_exists(out));
    o.channels = 2;
    cr_assert_eq(build_fields(train, out, &o, &r), DLC_EINVAL);
    o = opts(1);
    o.mask_encoding = DLC_ENCODING_JPEG;
    o.masks = dir;
    cr_assert_eq(build_fields(train, out, &o, &r), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "never JPEG") != NULL, "%s", dlc_errmsg());
    cr_assert_eq(temp_files(), 0);
    free(tar);
    free(file);
    free(out);
    free(train);
}

Test(build, manifest_columns_become_fields)
{
    char *train = make_tree(2);
    char *m = tmp_path(dir, "cols.tsv");
    btu_write_str(m, "#columns: path labels w id:int\n"
                     "train/cat/000.jpg\t3,17,42\t0.5\t-7\n"
                     "train/dog/001.jpg\t\t2\t8\n"
                     "train/eel/000.jpg\t9\t-1.25\t1000000000000\n");
    char *out = tmp_path(dir, "c.dlc");
    dlc_build_report *r = build_twice(m, out, opts(1));
    cr_assert_eq(r->count, 3);
    read_back b;
    read_open(&b, out);
    const dlc_store_info *info = dlc_store_get_info(b.s);
    cr_assert_eq(info->num_fields, 4);
    cr_assert_eq(info->label_field, DLC_NO_FIELD, "no label column, no label");
    cr_assert_eq(info->num_labels, 0);
    const dlc_field *fs = dlc_store_fields(b.s);
    cr_assert_str_eq(fs[1].name, "labels");
    cr_assert(fs[1].kind == DLC_FIELD_NDARRAY && fs[1].dtype == DLC_DTYPE_INT64);
    cr_assert(fs[1].flags & DLC_FIELD_VARIABLE, "lists of other lengths stay variable");
    cr_assert(fs[2].kind == DLC_FIELD_FLOAT && fs[3].kind == DLC_FIELD_INT);
    const dlc_value *v = read_field(&b, 0, "labels");
    cr_assert_eq(v->dim0, 3);
    int64_t l[3];
    memcpy(l, v->data, sizeof l);
    cr_assert(l[0] == 3 && l[1] == 17 && l[2] == 42);
    cr_assert_eq(read_field(&b, 1, "labels")->dim0, 0);
    cr_assert_eq(read_field(&b, 1, "w")->f, 2.0);
    cr_assert_eq(read_field(&b, 2, "w")->f, -1.25);
    cr_assert_eq(read_field(&b, 2, "id")->i, 1000000000000);
    const void *meta;
    size_t msize;
    cr_assert_eq(dlc_store_meta(b.s, "source_digest", &meta, &msize), DLC_OK);
    char digest1[17] = {0};
    memcpy(digest1, meta, 16);
    read_close(&b);
    dlc_build_report_free(r);

    /* A changed value changes the source digest: the store is stale. */
    btu_write_str(m, "#columns: path labels w id:int\n"
                     "train/cat/000.jpg\t3,17,42\t0.5\t-7\n"
                     "train/dog/001.jpg\t\t2\t8\n"
                     "train/eel/000.jpg\t9\t-1.5\t1000000000000\n");
    dlc_build_options o = opts(2);
    o.force = 1;
    cr_assert_eq(build(m, out, &o, &r), DLC_OK, "%s", dlc_errmsg());
    read_open(&b, out);
    cr_assert_eq(dlc_store_meta(b.s, "source_digest", &meta, &msize), DLC_OK);
    cr_assert(memcmp(digest1, meta, 16) != 0, "source digest unchanged");
    read_close(&b);
    dlc_build_report_free(r);
    free(out);
    free(m);
    free(train);
}

Test(build, manifest_label_and_labels_together)
{
    char *train = make_tree(1);
    char *m = tmp_path(dir, "both.tsv");
    btu_write_str(m, "#columns: path label labels\n"
                     "train/cat/000.jpg\t2\t1,2\n"
                     "train/dog/000.jpg\t0\t0\n");
    char *out = tmp_path(dir, "b.dlc");
    dlc_build_report *r = build_twice(m, out, opts(1));
    read_back b;
    read_open(&b, out);
    const dlc_store_info *info = dlc_store_get_info(b.s);
    cr_assert_eq(info->num_labels, 3);
    cr_assert_eq(dlc_store_label_counts(b.s)[2], 1);
    cr_assert_eq(read_field(&b, 0, "label")->i, 2);
    cr_assert_eq(read_field(&b, 0, "labels")->dim0, 2);
    read_close(&b);
    dlc_build_report_free(r);
    free(out);
    free(m);
    free(train);
}

/* dlc_tokens_build() and bad arguments: a NULL source is refused, not followed; a part past the
 * set's end is refused before the set's directory is made; a set build that fails while reading
 * removes the directory it made; the writer's "document N: " is not said twice. */
Test(build, token_build_bad_arguments_are_refused_cleanly)
{
    char *src = tmp_path(dir, "a.bin");
    const uint16_t ids[6] = {583, 1, 2, 0, 5, 0};
    FILE *f = fopen(src, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(ids, sizeof ids[0], 6, f), 6);
    fclose(f);
    char *out = tmp_path(dir, "set");
    const char *sources[2] = {src, NULL};
    dlc_tokens_build_options o;
    dlc_tokens_build_options_init(&o);
    o.sources = sources;
    o.num_sources = 2;
    o.output = out;
    o.eos_id = 0;
    cr_assert_eq(dlc_tokens_build(&o, NULL), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "sources[1] is NULL"), "%s", dlc_errmsg());
    o.num_sources = 1;
    o.shards = 2;
    o.one_part = 1;
    o.part = 5;
    cr_assert_eq(dlc_tokens_build(&o, NULL), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "part 5 of 2"), "%s", dlc_errmsg());
    struct stat st;
    cr_assert_neq(stat(out, &st), 0, "the refused build made %s", out);
    o.one_part = 0;
    o.vocab_size = 100;
    cr_assert_eq(dlc_tokens_build(&o, NULL), DLC_EINVAL);
    const char *m = dlc_errmsg();
    cr_assert(strstr(m, "document 0: token 0 is id 583"), "%s", m);
    cr_assert_null(strstr(m, "document 0: document 0"), "%s", m);
    cr_assert_neq(stat(out, &st), 0, "the failed build left %s", out);
    free(out);
    free(src);
}
