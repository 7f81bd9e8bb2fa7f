/* dlc_build() end to end on small trees of real JPEGs: the store does not
 * depend on the thread count, bad files are skipped and named, strict mode
 * stops, nothing is replaced without force, a cancel leaves nothing behind.
 *
 * dlc-test-label: threads (the build runs worker threads; TSan checks them). */
#include "source.h"
#include "build_test_util.h"

#include <dlcache/build.h>
#include <dlcache/store.h>

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
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
