/* The geometric ops' kernel (loader/augment/aug_geom.c): the block and vector paths give the bytes
 * of the one-pixel-at-a-time formula they replaced, for every kind of transform, channel count
 * and row stride; bilinear's vector and scalar paths agree, its values on a half-pixel shift are
 * the averages torchvision gives, with and without a fill, and its parameter is checked. The
 * values against torchvision itself are checked by tests/python/test_ops.py. */
#include "aug_ops.h"

#include <dlcache/ops.h>

#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The nearest warp as it was written first: one pixel at a time, every float operation of
 * torchvision's grid in order. The reference of the faster kernel. */
static void reference_warp(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                           const double m[6], const uint8_t fill[4], uint8_t *src)
{
    const size_t row = (size_t)w * c;
    for (uint32_t y = 0; y < h; y++)
        memcpy(src + y * row, img + (size_t)y * stride, row);
    const float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
    const float r00 = (float)m[0] / hw, r10 = (float)m[1] / hw, r20 = (float)m[2] / hw;
    const float r01 = (float)m[3] / hh, r11 = (float)m[4] / hh, r21 = (float)m[5] / hh;
    const float ux = (float)w / 2.0f, uy = (float)h / 2.0f;
    for (uint32_t y = 0; y < h; y++) {
        const float by = -(float)h * 0.5f + 0.5f + (float)y;
        uint8_t *out = img + (size_t)y * stride;
        for (uint32_t x = 0; x < w; x++) {
            const float bx = -(float)w * 0.5f + 0.5f + (float)x;
            const float gx = bx * r00 + by * r10 + r20;
            const float gy = bx * r01 + by * r11 + r21;
            const float fx = (gx + 1.0f) * ux - 0.5f, fy = (gy + 1.0f) * uy - 0.5f;
            const float ix = fabsf(fx) < 4194304.0f ? dlc__aug_round_even(fx) : -1.0f;
            const float iy = fabsf(fy) < 4194304.0f ? dlc__aug_round_even(fy) : -1.0f;
            uint8_t *o = out + (size_t)x * c;
            if (ix >= 0.0f && ix < (float)w && iy >= 0.0f && iy < (float)h) {
                const uint8_t *s = src + (size_t)iy * row + (size_t)ix * c;
                for (uint32_t k = 0; k < c; k++)
                    o[k] = s[k];
            } else {
                for (uint32_t k = 0; k < c; k++)
                    o[k] = fill[k];
            }
        }
    }
}

static double uniform(dlc__rng *r, double lo, double hi)
{
    return lo + (hi - lo) * (double)(dlc__rng_next(r) >> 11) * 0x1p-53;
}

/* A random transform of each kind the ops make: rotations, shears along x or y about the corner,
 * whole and fractional translations, and full affines with a scale and a center. */
static void random_matrix(dlc__rng *r, int kind, uint32_t w, uint32_t h, double m[6])
{
    double center[2] = {0.0, 0.0}, t[2] = {0.0, 0.0}, sh[2] = {0.0, 0.0};
    double angle = 0.0, scale = 1.0;
    kind %= 6;
    switch (kind) {
    case 0:
        angle = uniform(r, -180, 180);
        break;
    case 1:
    case 2:
        center[0] = -0.5 * w, center[1] = -0.5 * h;
        sh[kind - 1] = uniform(r, -45, 45);
        break;
    case 3:
        t[0] = floor(uniform(r, -0.6, 0.6) * w);
        t[1] = floor(uniform(r, -0.6, 0.6) * h);
        break;
    case 4:
        t[0] = uniform(r, -20, 20), t[1] = uniform(r, -20, 20);
        break;
    default:
        angle = uniform(r, -180, 180), scale = uniform(r, 0.3, 3);
        t[0] = uniform(r, -10, 10), t[1] = uniform(r, -10, 10);
        sh[0] = uniform(r, -40, 40), sh[1] = uniform(r, -40, 40);
        center[0] = uniform(r, -0.5, 0.5) * w, center[1] = uniform(r, -0.5, 0.5) * h;
        break;
    }
    dlc__aug_inverse_affine(center, angle, t, scale, sh, m);
}

/* Random pixels in an image with @p pad bytes of padding per row (set to 0xA5). */
static uint8_t *random_image(dlc__rng *r, uint32_t w, uint32_t h, uint32_t c, size_t pad,
                             size_t *stride)
{
    *stride = (size_t)w * c + pad;
    uint8_t *p = malloc(*stride * h);
    cr_assert_not_null(p);
    memset(p, 0xA5, *stride * h);
    for (uint32_t y = 0; y < h; y++)
        for (size_t i = 0; i < (size_t)w * c; i++)
            p[y * *stride + i] = (uint8_t)dlc__rng_next(r);
    return p;
}

Test(aug_geom, nearest_gives_the_bytes_of_the_per_pixel_formula)
{
    dlc__rng r = {.key = 33, .ctr = 0};
    size_t cases = 0;
    for (int it = 0; it < 900; it++) {
        const uint32_t w = it % 50 == 0 ? 224 : 1 + (uint32_t)(dlc__rng_next(&r) % 150);
        const uint32_t h = it % 50 == 0 ? 224 : 1 + (uint32_t)(dlc__rng_next(&r) % 90);
        const uint32_t c = 1 + (uint32_t)(it % 4);
        const size_t pad = (size_t)(it % 3) * 5;
        size_t stride;
        uint8_t *img = random_image(&r, w, h, c, pad, &stride);
        const size_t bytes = stride * h;
        uint8_t *ref = malloc(bytes), *vec = malloc(bytes), *sca = malloc(bytes);
        const size_t scr = dlc__aug_scratch_bound(w, h, c);
        uint8_t *scratch = malloc(scr);
        cr_assert(ref && vec && sca && scratch);
        double m[6];
        random_matrix(&r, it, w, h, m);
        const uint8_t fill[4] = {(uint8_t)it, 200, 17, 99};
        memcpy(ref, img, bytes), memcpy(vec, img, bytes), memcpy(sca, img, bytes);
        reference_warp(ref, stride, w, h, c, m, fill, scratch);
        dlc__aug_warp_with(vec, stride, w, h, c, m, fill, 0, scratch, 1);
        dlc__aug_warp_with(sca, stride, w, h, c, m, fill, 0, scratch, 0);
        cr_assert(memcmp(ref, vec, bytes) == 0, "case %d (%ux%ux%u, kind %d): vector path differs",
                  it, w, h, c, it % 6);
        cr_assert(memcmp(ref, sca, bytes) == 0, "case %d (%ux%ux%u, kind %d): scalar path differs",
                  it, w, h, c, it % 6);
        for (uint32_t y = 0; y < h; y++)
            for (size_t i = (size_t)w * c; i < stride; i++)
                cr_assert_eq(vec[y * stride + i], 0xA5, "padding written");
        cases++;
        free(img), free(ref), free(vec), free(sca), free(scratch);
    }
    cr_assert_eq(cases, 900);
}

Test(aug_geom, bilinear_vector_and_scalar_paths_agree)
{
    dlc__rng r = {.key = 34, .ctr = 0};
    for (int it = 0; it < 300; it++) {
        const uint32_t w = 1 + (uint32_t)(dlc__rng_next(&r) % 140);
        const uint32_t h = 1 + (uint32_t)(dlc__rng_next(&r) % 70);
        const uint32_t c = 1 + (uint32_t)(it % 4);
        size_t stride;
        uint8_t *img = random_image(&r, w, h, c, 3, &stride);
        const size_t bytes = stride * h;
        uint8_t *vec = malloc(bytes), *sca = malloc(bytes);
        uint8_t *scratch = malloc(dlc__aug_scratch_bound(w, h, c));
        cr_assert(vec && sca && scratch);
        double m[6];
        random_matrix(&r, it, w, h, m);
        const uint8_t fill[4] = {1, 2, 250, (uint8_t)it};
        const uint32_t mode = DLC__AUG_WARP_BILINEAR | (it & 1 ? DLC__AUG_WARP_BLEND : 0u);
        memcpy(vec, img, bytes), memcpy(sca, img, bytes);
        dlc__aug_warp_with(vec, stride, w, h, c, m, fill, mode, scratch, 1);
        dlc__aug_warp_with(sca, stride, w, h, c, m, fill, mode, scratch, 0);
        cr_assert(memcmp(vec, sca, bytes) == 0, "case %d (%ux%ux%u)", it, w, h, c);
        free(img), free(vec), free(sca), free(scratch);
    }
}

/* A shift of half a pixel to the right: each value is the mean of two neighbours, rounded half to
 * even; left of the image, torchvision's fill=None counts 0 in the mean (200 / 2), a given fill
 * is blended in by the outside's weight (100 * 0.5 + 0.5 * fill, also for a fill of 0). */
Test(aug_geom, bilinear_half_pixel_shift_known_values)
{
    uint8_t px[4] = {200, 10, 20, 31};
    uint8_t out[4];
    dlc_image src = {.data = px, .width = 4, .height = 1, .channels = 1, .stride = 4};
    dlc_image dst = {.data = out, .width = 4, .height = 1, .channels = 1, .stride = 4};
    uint8_t scratch[1024];
    cr_assert(dlc_op_scratch_bound(4, 1, 1) <= sizeof scratch);
    dlc_op_params p;
    dlc_op_params_init(&p);
    cr_assert_eq(p.interpolation, DLC_INTERP_NEAREST);
    cr_assert_eq(p.has_fill, 0);
    p.op = DLC_OP_AFFINE;
    p.translate[0] = 0.5;
    p.interpolation = DLC_INTERP_BILINEAR;
    const struct {
        uint32_t has_fill;
        uint8_t fill;
        uint8_t want[4];
    } cases[] = {
        {0, 0, {100, 105, 15, 26}}, /* fill=None; 25.5 rounds to 26. */
        {1, 0, {50, 105, 15, 26}},  /* fill=[0]: 100 * 0.5 + 0.5 * 0. */
        {0, 90, {95, 105, 15, 26}}, /* A nonzero fill is given: 100 * 0.5 + 0.5 * 90. */
        {1, 90, {95, 105, 15, 26}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        p.has_fill = cases[i].has_fill;
        p.fill[0] = cases[i].fill;
        cr_assert_eq(dlc_op_apply(&p, &src, &dst, scratch, sizeof scratch), DLC_OK, "%s",
                     dlc_errmsg());
        cr_assert(memcmp(out, cases[i].want, 4) == 0, "case %zu: %u %u %u %u", i, out[0], out[1],
                  out[2], out[3]);
    }
    /* Nearest at x - 0.5: -0.5 rounds to -0 (inside), 0.5 to 0, 1.5 to 2, 2.5 to 2. */
    p.interpolation = DLC_INTERP_NEAREST;
    cr_assert_eq(dlc_op_apply(&p, &src, &dst, scratch, sizeof scratch), DLC_OK, "%s", dlc_errmsg());
    const uint8_t nearest[4] = {200, 200, 20, 20};
    cr_assert(memcmp(out, nearest, 4) == 0, "%u %u %u %u", out[0], out[1], out[2], out[3]);
}

Test(aug_geom, bad_interpolation_is_refused)
{
    uint8_t px[12] = {0}, scratch[4096];
    dlc_image img = {.data = px, .width = 2, .height = 2, .channels = 3, .stride = 6};
    dlc_op_params p;
    dlc_op_params_init(&p);
    p.op = DLC_OP_ROTATE;
    p.angle = 10.0;
    p.interpolation = 2;
    cr_assert_eq(dlc_op_apply(&p, &img, &img, scratch, sizeof scratch), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "rotate") && strstr(dlc_errmsg(), "interpolation"), "%s",
              dlc_errmsg());
    p.interpolation = DLC_INTERP_BILINEAR;
    cr_assert_eq(dlc_op_apply(&p, &img, &img, scratch, sizeof scratch), DLC_OK, "%s", dlc_errmsg());
}
