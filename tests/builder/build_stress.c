/* The builder's threads under ThreadSanitizer, without Criterion (its runner cannot start under
 * TSan: Snaipe/Criterion#274): this plain program runs dlc_build()'s parallel path
 * (cache/builder/build_part.c: T workers, W writers, a reorder window per part) on small real
 * JPEGs with many threads and writers, more writers than parts and fewer, a bad file skipped, a
 * strict build stopped by it, and a build canceled from the progress callback while every thread
 * is busy; and checks that the bytes do not depend on threading (the same content digest at any
 * thread count) and that a stopped build leaves no file behind. Its asserts (build_part.c's
 * states and windows) stay on in the builds that run it. Exit status 0 = pass. Run by ctest with
 * the labels "unit;threads" (cmake/stress.cmake), so also in the ASan and TSan builds. */
#include "test_util.h"

#include <dlcache/build.h>
#include <dlcache/image.h>
#include <dlcache/store.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CLASSES 3
#define PER_CLASS 14
#define ROUNDS 3

static char *dir, *src;

static void write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    TU_REQUIRE(f != NULL);
    TU_REQUIRE(fwrite(data, 1, size, f) == size);
    TU_REQUIRE(fclose(f) == 0);
}

/* SRC/cK/NN.jpg: CLASSES x PER_CLASS small JPEGs of varied sizes and content. */
static void make_source(void)
{
    dlc_codec *c = NULL;
    TU_REQUIRE(dlc_codec_create(&c) == DLC_OK);
    TU_REQUIRE(mkdir(src, 0755) == 0);
    for (uint32_t k = 0; k < CLASSES; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/c%u", src, k);
        TU_REQUIRE(mkdir(path, 0755) == 0);
        for (uint32_t i = 0; i < PER_CLASS; i++) {
            const uint32_t w = 24 + (i * 7 + k * 5) % 29, h = 20 + (i * 11 + k) % 23;
            uint8_t *px = malloc((size_t)w * h * 3);
            TU_REQUIRE(px != NULL);
            for (uint32_t y = 0; y < h; y++)
                for (uint32_t x = 0; x < w; x++)
                    for (uint32_t ch = 0; ch < 3; ch++)
                        px[((size_t)y * w + x) * 3 + ch] = tu_pixel(k * 100 + i, y, x, ch);
            const dlc_image img = {
                .data = px, .width = w, .height = h, .channels = 3, .stride = (size_t)w * 3};
            const uint8_t *jpeg;
            size_t size;
            TU_REQUIRE(dlc_jpeg_encode(c, &img, 90, &jpeg, &size) == DLC_OK);
            snprintf(path, sizeof path, "%s/c%u/%02u.jpg", src, k, i);
            write_file(path, jpeg, size);
            free(px);
        }
    }
    dlc_codec_destroy(c);
}

/* No ".tmp-" file and no "retired-" link anywhere under @p d (one level of subfolders). */
static int leftovers(const char *d)
{
    DIR *dd = opendir(d);
    if (!dd)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dd)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        n += strstr(e->d_name, ".tmp-") != NULL || strncmp(e->d_name, "retired-", 8) == 0;
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%s", d, e->d_name);
        struct stat st;
        if (stat(sub, &st) == 0 && S_ISDIR(st.st_mode) && strcmp(sub, src) != 0)
            n += leftovers(sub);
    }
    closedir(dd);
    return n;
}

/* One build of SRC into DIR/NAME; its status, and its report's digest and counts. */
static dlc_status build(const char *name, uint32_t threads, uint32_t parts, int strict,
                        dlc_build_progress_fn progress, uint64_t *digest, uint64_t *count,
                        uint64_t *skipped)
{
    char *out = tu_path(dir, name);
    TU_REQUIRE(out != NULL);
    dlc_build_options o;
    dlc_build_options_init(&o);
    o.size = 16;
    o.threads = threads;
    o.parts = parts;
    o.strict = strict;
    o.force = 1;
    o.progress = progress;
    const char *sources[] = {src};
    dlc_build_report *r = NULL;
    const dlc_status rc = dlc_build(sources, 1, out, &o, &r);
    if (r) {
        *digest = r->content_digest;
        *count = r->count;
        *skipped = r->skipped;
    }
    dlc_build_report_free(r);
    free(out);
    return rc;
}

/* Stop as soon as one record is written: the workers and writers are all busy then. */
static int cancel_early(void *user, const dlc_build_progress *p)
{
    (void)user;
    return p->done > 0;
}

int main(void)
{
    dir = tu_mkdtemp();
    TU_REQUIRE(dir != NULL);
    src = tu_path(dir, "src");
    TU_REQUIRE(src != NULL);
    make_source();
    const uint64_t n = CLASSES * PER_CLASS;
    uint64_t d1, c, s;

    /* A single store: one writer, T workers sharing its window. */
    TU_REQUIRE(build("one.dlc", 1, 0, 0, NULL, &d1, &c, &s) == DLC_OK);
    TU_REQUIRE(c == n && s == 0);
    /* A set: W = min(N, T) writers, T workers; more parts than writers and fewer. */
    uint64_t dset;
    TU_REQUIRE(build("set", 1, 5, 0, NULL, &dset, &c, &s) == DLC_OK);
    TU_REQUIRE(c == n);
    for (int round = 0; round < ROUNDS; round++) {
        static const uint32_t threads[] = {2, 7, 16};
        for (size_t k = 0; k < sizeof threads / sizeof *threads; k++) {
            uint64_t d;
            TU_REQUIRE(build("one.dlc", threads[k], 0, 0, NULL, &d, &c, &s) == DLC_OK);
            TU_REQUIRE(d == d1 && c == n);
            TU_REQUIRE(build("set", threads[k], 5, 0, NULL, &d, &c, &s) == DLC_OK);
            TU_REQUIRE(d == dset && c == n);
        }
    }
    /* More parts than items per part would give: some parts get few items, writers move on. */
    uint64_t d16;
    TU_REQUIRE(build("set16", 3, 16, 0, NULL, &d16, &c, &s) == DLC_OK);
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t d;
        TU_REQUIRE(build("set16", 12, 16, 0, NULL, &d, &c, &s) == DLC_OK);
        TU_REQUIRE(d == d16 && c == n);
    }

    /* A file that is not a JPEG: skipped at any thread count, the same bytes either way. */
    char *bad = tu_path(src, "c1/07.jpg");
    TU_REQUIRE(bad != NULL);
    write_file(bad, "not a jpeg, only its name says so", 33);
    uint64_t dbad;
    TU_REQUIRE(build("bad.dlc", 1, 0, 0, NULL, &dbad, &c, &s) == DLC_OK);
    TU_REQUIRE(c == n - 1 && s == 1);
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t d;
        TU_REQUIRE(build("bad.dlc", 9, 0, 0, NULL, &d, &c, &s) == DLC_OK);
        TU_REQUIRE(d == dbad && s == 1);
        TU_REQUIRE(build("badset", 9, 4, 0, NULL, &d, &c, &s) == DLC_OK);
        TU_REQUIRE(c == n - 1 && s == 1);
    }
    /* Strict: the bad file stops every thread; the failed build leaves nothing behind. */
    for (int round = 0; round < ROUNDS; round++) {
        TU_REQUIRE(build("strict.dlc", 8, 0, 1, NULL, &d1, &c, &s) == DLC_EDECODE);
        TU_REQUIRE(build("strictset", 8, 6, 1, NULL, &d1, &c, &s) == DLC_EDECODE);
    }
    char *p = tu_path(dir, "strict.dlc");
    struct stat st;
    TU_REQUIRE(p != NULL && stat(p, &st) != 0);
    free(p);
    /* Canceled from the progress callback with every thread busy: a stop, or, when the build
     * finished first, a whole store. Either way no temporary file stays. */
    for (int round = 0; round < ROUNDS; round++) {
        dlc_status rc = build("cancel.dlc", 11, 0, 0, cancel_early, &d1, &c, &s);
        TU_REQUIRE(rc == DLC_ECANCELED || rc == DLC_OK);
        rc = build("cancelset", 11, 7, 0, cancel_early, &d1, &c, &s);
        TU_REQUIRE(rc == DLC_ECANCELED || rc == DLC_OK);
    }
    TU_REQUIRE(leftovers(dir) == 0);
    free(bad);
    tu_rmtree(dir);
    free(src);
    free(dir);
    printf("build_stress: ok\n");
    return 0;
}
