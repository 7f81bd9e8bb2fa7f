/* The color ops' vector kernels (loader/augment/aug_color_avx2.c) give the bytes of their scalar
 * twins (aug_color.c): the same pixels applied as a wide image (rows long enough for the vector
 * kernels) and as a 7-pixel-wide one (rows too short for any of them, all scalar) must agree,
 * which holds for every op whose result is a function of the pixel's values and of statistics
 * of the whole image (the same pixels in another shape have the same statistics). Sharpness and
 * the blur, whose results depend on the neighbours, are compared with plain reference loops of
 * the same float operations. On a CPU without AVX2 both shapes run the scalar code, and the
 * tests still check the scalar loops against the references. */
#include "aug_ops.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Shapes: the vector kernels do rows of 96 values (maps, extremes), 32 (solarize), 16 or 32
 * (sharpness) or 8 pixels (RGB kernels); 7 pixels of up to 4 channels are shorter than all, and
 * the wide rows end in a part the scalar code does. */
enum { NARROW = 7, WIDE = 96 * 7 + 5, PIXELS = NARROW * WIDE * 2 };

typedef struct {
    uint8_t *px;
    void *scratch;
    size_t scratch_size;
} bufs;

static bufs bufs_make(uint32_t c)
{
    bufs b;
    b.px = malloc((size_t)PIXELS * c);
    b.scratch_size = dlc__aug_scratch_bound(WIDE, PIXELS / NARROW, c);
    const size_t n2 = dlc__aug_scratch_bound(NARROW, PIXELS / NARROW, c);
    b.scratch_size = n2 > b.scratch_size ? n2 : b.scratch_size;
    b.scratch = malloc(b.scratch_size);
    cr_assert(b.px && b.scratch);
    return b;
}

static void bufs_free(bufs *b)
{
    free(b->px);
    free(b->scratch);
}

/* Random pixels; @p range < 256 keeps them in [lo, lo + range) (low-contrast images, where
 * autocontrast and equalize have work to do). */
static void fill(uint8_t *p, size_t n, dlc__rng *r, uint32_t range)
{
    const uint32_t lo = range < 256 ? (uint32_t)dlc__rng_below(r, 256 - range + 1) : 0;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(lo + dlc__rng_below(r, range));
}

/* @p op on the pixels as a wide image and as a narrow one: the same bytes. */
static void same_both_shapes(const dlc__aug_op *op, const uint8_t *px, uint32_t c, bufs *b,
                             const char *what)
{
    const size_t n = (size_t)PIXELS * c;
    uint8_t *wide = malloc(n), *narrow = malloc(n);
    cr_assert(wide && narrow);
    memcpy(wide, px, n);
    memcpy(narrow, px, n);
    cr_assert_eq(dlc__aug_apply_op(op, wide, (size_t)WIDE * c, WIDE, PIXELS / WIDE, c, b->scratch,
                                   b->scratch_size),
                 DLC_OK, "%s: %s", what, dlc_errmsg());
    cr_assert_eq(dlc__aug_apply_op(op, narrow, (size_t)NARROW * c, NARROW, PIXELS / NARROW, c,
                                   b->scratch, b->scratch_size),
                 DLC_OK, "%s: %s", what, dlc_errmsg());
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(wide[i], narrow[i], "%s (op %u, arg %g, %u channels): value %zu (input %u)",
                     what, op->op, (double)op->arg[0], c, i, px[i]);
    free(wide);
    free(narrow);
}

Test(aug_color, per_pixel_and_histogram_ops_vector_equals_scalar)
{
    dlc__rng r = {.key = 33, .ctr = 0};
    static const uint32_t ops[] = {
        DLC__AUG_BRIGHTNESS,   DLC__AUG_CONTRAST, DLC__AUG_SATURATION, DLC__AUG_HUE,
        DLC__AUG_POSTERIZE,    DLC__AUG_SOLARIZE, DLC__AUG_INVERT,     DLC__AUG_GRAYSCALE,
        DLC__AUG_AUTOCONTRAST, DLC__AUG_EQUALIZE,
    };
    for (uint32_t c = 1; c <= 3; c += 2) {
        bufs b = bufs_make(c);
        for (int round = 0; round < 12; round++) {
            fill(b.px, (size_t)PIXELS * c, &r, round % 3 == 0 ? 256 : 8 + 40 * (round % 4));
            for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
                dlc__aug_op op = {.op = (uint8_t)ops[k]};
                const double u = dlc__rng_uniform(&r);
                switch (ops[k]) {
                case DLC__AUG_HUE:
                    op.arg[0] = (float)(u - 0.5);
                    break;
                case DLC__AUG_POSTERIZE:
                    op.arg[0] = (float)(round % 9);
                    break;
                case DLC__AUG_SOLARIZE:
                    op.arg[0] = round == 0 ? 0.0f : round == 1 ? 255.0f : (float)(u * 256.0 - 1.0);
                    break;
                default:
                    op.arg[0] = (float)(u * 3.0);
                    /* The policies' weight, 1 - factor in double, in half the rounds. */
                    if (round & 1) {
                        op.flags = DLC__AUG_F_WEIGHT;
                        op.arg[1] = (float)(1.0 - (1.0 + u));
                        op.arg[0] = (float)(1.0 + u);
                    }
                }
                same_both_shapes(&op, b.px, c, &b, dlc__aug_op_name(op.op));
            }
        }
        bufs_free(&b);
    }
}

Test(aug_color, hue_vector_equals_scalar_across_the_color_cube)
{
    /* Every color of the cube on a grid of step 5 (52^3 colors, the grays, the primaries and the
     * extremes among them), under hue factors that wrap both ways. */
    bufs b = bufs_make(3);
    static const float factors[] = {-0.5f, -0.31f, -0.1f, 0.0f, 0.07f, 0.25f, 0.5f};
    for (size_t f = 0; f < sizeof factors / sizeof factors[0]; f++) {
        uint32_t color = 0;
        for (uint32_t chunk = 0; chunk * PIXELS < 52u * 52u * 52u; chunk++) {
            for (uint32_t i = 0; i < PIXELS; i++, color++) {
                const uint32_t v = color % (52u * 52u * 52u);
                b.px[3 * i] = (uint8_t)(5 * (v % 52));
                b.px[3 * i + 1] = (uint8_t)(5 * (v / 52 % 52));
                b.px[3 * i + 2] = (uint8_t)(5 * (v / 2704));
            }
            const dlc__aug_op op = {.op = DLC__AUG_HUE, .arg = {factors[f]}};
            same_both_shapes(&op, b.px, 3, &b, "adjust_hue");
        }
    }
    bufs_free(&b);
}

Test(aug_color, autocontrast_and_equalize_vector_equals_scalar_any_channels)
{
    dlc__rng r = {.key = 7, .ctr = 0};
    for (uint32_t c = 1; c <= 4; c++) {
        bufs b = bufs_make(c);
        const size_t n = (size_t)PIXELS * c;
        uint8_t *wide = malloc(n), *narrow = malloc(n);
        cr_assert(wide && narrow);
        for (int round = 0; round < 6; round++) {
            fill(b.px, n, &r, round < 2 ? 256 : 30);
            for (int op = 0; op < 2; op++) {
                memcpy(wide, b.px, n);
                memcpy(narrow, b.px, n);
                if (op == 0) {
                    dlc__aug_autocontrast(wide, (size_t)WIDE * c, WIDE, PIXELS / WIDE, c);
                    dlc__aug_autocontrast(narrow, (size_t)NARROW * c, NARROW, PIXELS / NARROW, c);
                } else {
                    dlc__aug_equalize(wide, (size_t)WIDE * c, WIDE, PIXELS / WIDE, c);
                    dlc__aug_equalize(narrow, (size_t)NARROW * c, NARROW, PIXELS / NARROW, c);
                }
                cr_assert_arr_eq(wide, narrow, n, "%s, %u channels, round %d",
                                 op ? "equalize" : "autocontrast", c, round);
            }
        }
        free(wide);
        free(narrow);
        bufs_free(&b);
    }
}

Test(aug_color, sharpness_rounding_is_the_integer_quotient)
{
    /* What the vector sharpness computes instead of the float quotient, for every 3x3 sum. */
    for (uint32_t s = 0; s <= 13 * 255; s++) {
        const int32_t f = (int32_t)((float)s / 13.0f + 0.5f);
        cr_assert_eq(f, (int32_t)((s + 6) / 13), "sum %u", s);
        cr_assert_eq(f, (int32_t)(((s + 6) * 5042u) >> 16), "sum %u", s);
    }
}

static uint8_t trunc_ref(float v)
{
    return !(v > 0.0f) ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
}

Test(aug_color, sharpness_equals_reference)
{
    dlc__rng r = {.key = 5, .ctr = 0};
    static const uint32_t widths[] = {3, 7, 33, 64, 101};
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
        for (uint32_t c = 1; c <= 3; c += 2) {
            const uint32_t w = widths[wi], h = 9;
            const size_t row = (size_t)w * c, n = row * h;
            uint8_t *px = malloc(n), *got = malloc(n);
            void *scratch = malloc(dlc__aug_scratch_bound(w, h, c));
            cr_assert(px && got && scratch);
            fill(px, n, &r, 256);
            memcpy(got, px, n);
            const float f = (float)(dlc__rng_uniform(&r) * 5.0), q = (float)(1.0 - (double)f);
            dlc__aug_sharpness(got, row, w, h, c, f, q, scratch);
            for (uint32_t y = 0; y < h; y++)
                for (size_t i = 0; i < row; i++) {
                    const uint8_t *m = px + y * row;
                    float deg = (float)m[i];
                    if (y > 0 && y + 1 < h && i >= c && i + c < row) {
                        const uint8_t *u = m - row, *d = m + row;
                        const int32_t s = u[i - c] + u[i] + u[i + c] + m[i - c] + 5 * m[i] +
                                          m[i + c] + d[i - c] + d[i] + d[i + c];
                        deg = nearbyintf((float)s / 13.0f);
                    }
                    const float fx = f * (float)m[i], qd = q * deg;
                    cr_assert_eq(got[y * row + i], trunc_ref(fx + qd),
                                 "%ux%ux%u factor %g: row %u value %zu", w, h, c, (double)f, y, i);
                }
            free(px);
            free(got);
            free(scratch);
        }
}

/* torchvision's _get_gaussian_kernel1d, as aug_color.c computes it. */
static void kernel_ref(float *k, uint32_t size, float sigma)
{
    const float half = (float)((size - 1) * 0.5);
    float sum = 0.0f;
    for (uint32_t i = 0; i < size; i++) {
        const float t = (-half + (float)i) / sigma;
        k[i] = expf(-0.5f * (t * t));
        sum += k[i];
    }
    for (uint32_t i = 0; i < size; i++)
        k[i] /= sum;
}

static uint32_t reflect_ref(int64_t i, uint32_t n)
{
    return (uint32_t)(i < 0 ? -i : i >= (int64_t)n ? 2 * (int64_t)n - 2 - i : i);
}

Test(aug_color, blur_equals_reference)
{
    /* Each value's taps summed from 0.0 in kernel order, horizontally then vertically, rounded
     * half to even: the reference loops, on sizes where every column or none has a reflected
     * tap, kernels up to twice the side. */
    dlc__rng r = {.key = 9, .ctr = 0};
    static const uint32_t sizes[][4] = {{40, 9, 3, 3},  {40, 9, 23, 5}, {12, 12, 23, 23},
                                        {5, 31, 9, 1},  {70, 3, 1, 5},  {33, 17, 31, 15},
                                        {100, 4, 7, 7}, {64, 8, 127, 9}};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (uint32_t c = 1; c <= 4; c++) {
            const uint32_t w = sizes[si][0], h = sizes[si][1], kx = sizes[si][2], ky = sizes[si][3];
            if (kx / 2 >= w || ky / 2 >= h)
                continue;
            const size_t row = (size_t)w * c, n = row * h;
            uint8_t *px = malloc(n), *got = malloc(n);
            float *t = malloc(n * sizeof(float));
            void *scratch = malloc(dlc__aug_scratch_bound(w, h, c) + 16);
            cr_assert(px && got && t && scratch);
            fill(px, n, &r, 256);
            memcpy(got, px, n);
            const float sx = (float)(0.1 + 3.0 * dlc__rng_uniform(&r));
            const float sy = (float)(0.1 + 3.0 * dlc__rng_uniform(&r));
            /* dlc__aug_blur wants its scratch aligned for floats. */
            float *fs = (float *)(((uintptr_t)scratch + 15) & ~(uintptr_t)15);
            dlc__aug_blur(got, row, w, h, c, kx, ky, sx, sy, fs);
            float kxv[DLC__AUG_MAX_KERNEL], kyv[DLC__AUG_MAX_KERNEL];
            kernel_ref(kxv, kx, sx);
            kernel_ref(kyv, ky, sy);
            for (uint32_t y = 0; y < h; y++)
                for (uint32_t x = 0; x < w; x++)
                    for (uint32_t k = 0; k < c; k++) {
                        float a = 0.0f;
                        for (uint32_t j = 0; j < kx; j++)
                            a += kxv[j] *
                                 (float)
                                     px[y * row + reflect_ref((int64_t)x + j - kx / 2, w) * c + k];
                        t[y * row + (size_t)x * c + k] = a;
                    }
            for (uint32_t y = 0; y < h; y++)
                for (size_t i = 0; i < row; i++) {
                    float a = 0.0f;
                    for (uint32_t j = 0; j < ky; j++)
                        a += kyv[j] * t[reflect_ref((int64_t)y + j - ky / 2, h) * row + i];
                    const float v = nearbyintf(a);
                    const uint8_t want = v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
                    cr_assert_eq(got[y * row + i], want,
                                 "%ux%ux%u kernel %ux%u: row %u value %zu (%.9g)", w, h, c, kx, ky,
                                 y, i, (double)a);
                }
            free(px);
            free(got);
            free(t);
            free(scratch);
        }
}
