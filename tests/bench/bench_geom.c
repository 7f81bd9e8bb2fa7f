/* Speed of the geometric ops (rotate, the policies' shears and translations, affine; nearest and
 * bilinear) on one image, in place through dlc_op_apply() as the loader's worker applies them
 * (no copy but the op's own): microseconds per image, the median of --repeat runs. Given two
 * libraries, it loads both and alternates them op by op and run by run, so that the load of other
 * jobs on a shared machine falls on both alike, and prints the ratio A / B. A program, not a
 * test:
 *
 *     cc -O2 -Iinclude tests/bench/bench_geom.c -o /tmp/bench_geom -ldl
 *     /tmp/bench_geom [--size 224] [--repeat 300] LIB_A.so [LIB_B.so]
 *
 * A library older than dlc_op_params.interpolation runs the nearest rows only. */
#define _GNU_SOURCE
#include <dlcache/ops.h>

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct lib {
    const char *path;
    void (*init_sized)(dlc_op_params *, size_t);
    size_t (*bound)(uint32_t, uint32_t, uint32_t);
    dlc_status (*apply)(const dlc_op_params *, const dlc_image *, const dlc_image *, void *,
                        size_t);
    size_t size; /* The dlc_op_params size it takes. */
} lib;

typedef struct cas {
    const char *name;
    uint32_t op;
    double angle, tx, ty, scale, shx, shy;
    int corner;   /* The policies' shears turn about (0, 0). */
    int bilinear; /* Needs a library with dlc_op_params.interpolation. */
} cas;

static const cas cases[] = {
    {"rotate 30", DLC_OP_ROTATE, 30, 0, 0, 1, 0, 0, 0, 0},
    {"shear_x 0.3", DLC_OP_SHEAR_X, 0, 0, 0, 1, 16.6992, 0, 1, 0},
    {"shear_y 0.3", DLC_OP_SHEAR_Y, 0, 0, 0, 1, 0, 16.6992, 1, 0},
    {"translate_x 30", DLC_OP_TRANSLATE_X, 0, 30, 0, 1, 0, 0, 0, 0},
    {"translate_y 30", DLC_OP_TRANSLATE_Y, 0, 0, 30, 1, 0, 0, 0, 0},
    {"affine", DLC_OP_AFFINE, 10, 3, 2, 1.1, 5, 0, 0, 0},
    {"rotate 30 bilinear", DLC_OP_ROTATE, 30, 0, 0, 1, 0, 0, 0, 1},
    {"affine bilinear", DLC_OP_AFFINE, 10, 3, 2, 1.1, 5, 0, 0, 1},
};

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int load(lib *l, const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "bench_geom: %s\n", dlerror());
        return -1;
    }
    l->path = path;
    *(void **)&l->init_sized = dlsym(h, "dlc_op_params_init_sized");
    *(void **)&l->bound = dlsym(h, "dlc_op_scratch_bound");
    *(void **)&l->apply = dlsym(h, "dlc_op_apply");
    if (!l->init_sized || !l->bound || !l->apply) {
        fprintf(stderr, "bench_geom: %s lacks the ops API\n", path);
        return -1;
    }
    /* The newest size it takes: this header's, or the one before interpolation was added. */
    uint8_t px[3] = {0}, scratch[256];
    dlc_image one = {.data = px, .width = 1, .height = 1, .channels = 3, .stride = 3};
    const size_t sizes[2] = {sizeof(dlc_op_params),
                             (offsetof(dlc_op_params, interpolation) + 7) & ~(size_t)7};
    for (int i = 0; i < 2; i++) {
        dlc_op_params p;
        memset(&p, 0, sizeof p);
        l->init_sized(&p, sizes[i]);
        if (l->apply(&p, &one, &one, scratch, sizeof scratch) == DLC_OK) {
            l->size = sizes[i];
            return 0;
        }
    }
    fprintf(stderr, "bench_geom: %s takes no dlc_op_params this program knows\n", path);
    return -1;
}

int main(int argc, char **argv)
{
    uint32_t size = 224;
    int repeat = 300, nlib = 0;
    lib libs[2];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (nlib < 2 && load(&libs[nlib], argv[i]) == 0)
            nlib++;
        else
            return 2;
    }
    if (nlib == 0 || size == 0 || repeat <= 0) {
        fprintf(stderr, "usage: bench_geom [--size N] [--repeat N] LIB_A.so [LIB_B.so]\n");
        return 2;
    }
    const size_t bytes = (size_t)size * size * 3;
    uint8_t *pristine = malloc(bytes), *work = malloc(bytes);
    const size_t sb = libs[0].bound(size, size, 3);
    void *scratch = malloc(sb);
    double *t = malloc(sizeof(double) * (size_t)repeat * 2);
    if (!pristine || !work || !scratch || !t)
        return 1;
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < bytes; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        pristine[i] = (uint8_t)s;
    }
    dlc_image img = {
        .data = work, .width = size, .height = size, .channels = 3, .stride = size * 3};
    printf("%ux%ux3, median of %d runs, microseconds per image\n", size, size, repeat);
    printf("%-20s %12s", "op", "A");
    if (nlib == 2)
        printf(" %12s %8s", "B", "A / B");
    printf("\n");
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const cas *c = &cases[k];
        double med[2] = {0, 0};
        int ran[2] = {0, 0};
        for (int r = 0; r < repeat; r++)
            for (int li = 0; li < nlib; li++) {
                const lib *l = &libs[li];
                if (c->bilinear && l->size < sizeof(dlc_op_params))
                    continue;
                dlc_op_params p;
                memset(&p, 0, sizeof p);
                l->init_sized(&p, l->size);
                p.op = c->op, p.angle = c->angle, p.scale = c->scale;
                p.translate[0] = c->tx, p.translate[1] = c->ty;
                p.shear[0] = c->shx, p.shear[1] = c->shy;
                p.has_center = (uint32_t)c->corner;
                if (c->bilinear)
                    p.interpolation = DLC_INTERP_BILINEAR;
                memcpy(work, pristine, bytes);
                const double t0 = now_us();
                const dlc_status rc = l->apply(&p, &img, &img, scratch, sb);
                const double t1 = now_us();
                if (rc != DLC_OK) {
                    fprintf(stderr, "bench_geom: %s: %s failed (%d)\n", l->path, c->name, rc);
                    return 1;
                }
                t[li * repeat + ran[li]++] = t1 - t0;
            }
        for (int li = 0; li < nlib; li++)
            if (ran[li]) {
                qsort(t + li * repeat, (size_t)ran[li], sizeof(double), cmp_double);
                med[li] = t[li * repeat + ran[li] / 2];
            }
        printf("%-20s", c->name);
        for (int li = 0; li < nlib; li++) {
            if (ran[li])
                printf(" %12.1f", med[li]);
            else
                printf(" %12s", "-");
        }
        if (nlib == 2 && ran[0] && ran[1])
            printf(" %8.2f", med[0] / med[1]);
        printf("\n");
    }
    free(pristine), free(work), free(scratch), free(t);
    return 0;
}
