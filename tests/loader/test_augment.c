/* Crop parameters against torchvision's algorithms, the half-float conversion, and the one-pass
 * crop/flip/convert kernel against a straightforward reference. */
#include "augment.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
/* The float16 reference is the CPU's own conversion (F16C's VCVTPS2PH, round to nearest even),
 * independent of dlcache's code. gcc's _Float16 would do too, but clang 14 lacks it on x86-64. */
__attribute__((target("f16c"))) static uint16_t hw_f16(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
static int have_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#else
static uint16_t hw_f16(float f)
{
    const _Float16 h = (_Float16)f;
    uint16_t bits;
    memcpy(&bits, &h, 2);
    return bits;
}
static int have_f16c(void)
{
    return 1;
}
#endif

/* torchvision 0.14 RandomResizedCrop.get_params, transcribed line by line, drawing from the
 * same counter-based stream in the same order (scale, then log-ratio, then i, then j). */
static void reference_rrc(uint32_t width, uint32_t height, const float scale[2],
                          const float ratio[2], dlc__rng *rng, uint32_t out[4])
{
    const double area = (double)height * width;
    const double lr0 = log(ratio[0]), lr1 = log(ratio[1]);
    for (int k = 0; k < 10; k++) {
        const double target_area =
            area * (scale[0] + (scale[1] - scale[0]) * dlc__rng_uniform(rng));
        const double aspect_ratio = exp(lr0 + (lr1 - lr0) * dlc__rng_uniform(rng));
        const long w = lrint(sqrt(target_area * aspect_ratio));
        const long h = lrint(sqrt(target_area / aspect_ratio));
        if (0 < w && w <= (long)width && 0 < h && h <= (long)height) {
            out[0] = (uint32_t)dlc__rng_below(rng, height - h + 1);
            out[1] = (uint32_t)dlc__rng_below(rng, width - w + 1);
            out[2] = (uint32_t)h;
            out[3] = (uint32_t)w;
            return;
        }
    }
    const double in_ratio = (double)width / height;
    long w, h;
    if (in_ratio < fmin(ratio[0], ratio[1])) {
        w = width;
        h = lrint(w / fmin(ratio[0], ratio[1]));
    } else if (in_ratio > fmax(ratio[0], ratio[1])) {
        h = height;
        w = lrint(h * fmax(ratio[0], ratio[1]));
    } else {
        w = width;
        h = height;
    }
    out[0] = (uint32_t)((height - h) / 2);
    out[1] = (uint32_t)((width - w) / 2);
    out[2] = (uint32_t)h;
    out[3] = (uint32_t)w;
}

Test(augment, rrc_params_follow_torchvision)
{
    const float scale[2] = {0.08f, 1.0f}, ratio[2] = {3.0f / 4, 4.0f / 3};
    const uint32_t dims[][2] = {{256, 256}, {500, 375}, {32, 20}, {7, 300}};
    int fallbacks = 0;
    for (size_t d = 0; d < sizeof dims / sizeof *dims; d++) {
        for (uint64_t k = 0; k < 2000; k++) {
            dlc__rng a = {k * 77 + d, 0}, b = a;
            const dlc__box box = dlc__rrc_params(dims[d][0], dims[d][1], scale, ratio, &a);
            uint32_t ref[4];
            reference_rrc(dims[d][0], dims[d][1], scale, ratio, &b, ref);
            cr_assert_eq(box.top, ref[0]);
            cr_assert_eq(box.left, ref[1]);
            cr_assert_eq(box.h, ref[2]);
            cr_assert_eq(box.w, ref[3]);
            cr_assert(box.w >= 1 && box.h >= 1);
            cr_assert_leq(box.left + box.w, dims[d][0]);
            cr_assert_leq(box.top + box.h, dims[d][1]);
            fallbacks += a.ctr == 20;
        }
    }
    /* A 7 x 300 strip has no crop of aspect 3/4..4/3 bigger than 7 x 9: it mostly falls back. */
    cr_assert_gt(fallbacks, 100);
}

Test(augment, rrc_fallback_is_torchvision_central_crop)
{
    /* scale > 1 can never fit: every attempt fails and the fallback decides. */
    const float scale[2] = {2.0f, 3.0f}, ratio[2] = {3.0f / 4, 4.0f / 3};
    dlc__rng r = {1, 0};
    dlc__box b = dlc__rrc_params(400, 100, scale, ratio, &r); /* in_ratio 4 > 4/3 */
    cr_assert_eq(b.h, 100);
    cr_assert_eq(b.w, 133); /* round(100 * 4/3) */
    cr_assert_eq(b.top, 0);
    cr_assert_eq(b.left, (400 - 133) / 2);
    b = dlc__rrc_params(100, 400, scale, ratio, &r); /* in_ratio 1/4 < 3/4 */
    cr_assert_eq(b.w, 100);
    cr_assert_eq(b.h, 133);
    cr_assert_eq(b.top, (400 - 133) / 2);
    b = dlc__rrc_params(120, 100, scale, ratio, &r);
    cr_assert(b.w == 120 && b.h == 100 && b.top == 0 && b.left == 0);
}

Test(augment, center_box_rounds_like_python)
{
    dlc__box b = dlc__center_box(256, 256, 224, 224);
    cr_assert(b.top == 16 && b.left == 16);
    /* (13 - 10) / 2 = 1.5 rounds to 2; (12 - 7) / 2 = 2.5 rounds to 2 (half to even). */
    b = dlc__center_box(13, 12, 10, 7);
    cr_assert_eq(b.left, 2);
    cr_assert_eq(b.top, 2);
}

Test(augment, random_box_stays_inside_and_reaches_every_offset)
{
    int seen[4][3] = {{0}};
    for (uint64_t k = 0; k < 2000; k++) {
        dlc__rng r = {k, 0};
        const dlc__box b = dlc__random_box(12, 13, 10, 10, &r);
        cr_assert(b.top <= 3 && b.left <= 2 && b.h == 10 && b.w == 10);
        seen[b.top][b.left]++;
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            cr_assert_gt(seen[i][j], 50);
}

Test(augment, f16_conversion_matches_the_cpu)
{
    /* The CPU's own conversion rounds to nearest even, like torch's .half(). */
    if (!have_f16c())
        cr_skip_test("the CPU has no F16C: no hardware reference for float16");
    const float special[] = {0.0f,     -0.0f,    1.0f,  -2.5f,    65504.0f,
                             65519.0f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f,
                             6.1e-5f,  3.14159f, -1e6f, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) {
        const uint16_t bits = hw_f16(special[i]);
        cr_assert_eq(dlc__f32_to_f16(special[i]), bits, "%g: %04x vs %04x", special[i],
                     dlc__f32_to_f16(special[i]), bits);
    }
    dlc__rng r = {5, 0};
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)dlc__rng_next(&r);
        float f;
        memcpy(&f, &u, 4);
        if (f != f)
            continue;
        const uint16_t bits = hw_f16(f);
        cr_assert_eq(dlc__f32_to_f16(f), bits, "%a", f);
    }
}

static void fill(uint8_t *img, uint32_t w, uint32_t h)
{
    for (uint32_t i = 0; i < w * h * 3; i++)
        img[i] = (uint8_t)(dlc__mix64(i) >> 40);
}

Test(augment, crop_convert_equals_reference_for_every_dtype_and_flip)
{
    if (!have_f16c())
        cr_skip_test("the CPU has no F16C: no hardware reference for float16");
    const uint32_t W = 17, H = 11;
    uint8_t img[17 * 11 * 3];
    fill(img, W, H);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    const dlc__box box = {2, 3, 7, 9};
    for (uint32_t dtype = 0; dtype <= DLC_DTYPE_FLOAT16; dtype++) {
        dlc__convert cv;
        dlc__convert_init(&cv, dtype, 3, mean, std);
        for (int flip = 0; flip < 2; flip++) {
            float out32[3 * 7 * 9];
            uint16_t *out16 = (uint16_t *)out32;
            uint8_t *out8 = (uint8_t *)out32;
            dlc__crop_convert(img, W * 3, box, flip, &cv, out32);
            for (uint32_t y = 0; y < box.h; y++)
                for (uint32_t x = 0; x < box.w; x++)
                    for (uint32_t c = 0; c < 3; c++) {
                        const uint32_t sx = box.left + (flip ? box.w - 1 - x : x);
                        const uint8_t v = img[((box.top + y) * W + sx) * 3 + c];
                        const float ref = ((float)v / 255.0f - mean[c]) / std[c];
                        if (dtype == DLC_DTYPE_UINT8) {
                            cr_assert_eq(out8[(y * box.w + x) * 3 + c], v);
                        } else if (dtype == DLC_DTYPE_FLOAT32) {
                            const float got = out32[(c * box.h + y) * box.w + x];
                            cr_assert(memcmp(&got, &ref, 4) == 0, "%g vs %g", got, ref);
                        } else {
                            const uint16_t bits = hw_f16(ref);
                            cr_assert_eq(out16[(c * box.h + y) * box.w + x], bits);
                        }
                    }
        }
    }
}

Test(augment, flip_row_matches_the_definition_for_every_width)
{
    uint8_t in[3 * 300], out[3 * 300];
    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (uint8_t)(dlc__mix64(i + 17) >> 32);
    for (uint32_t w = 1; w <= 300; w++) {
        memset(out, 0xEE, sizeof out);
        dlc__flip_row_rgb(in, out, w);
        for (uint32_t x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                cr_assert_eq(out[x * 3 + c], in[(w - 1 - x) * 3 + c], "w %u x %u", w, x);
        for (size_t k = (size_t)w * 3; k < sizeof out; k++)
            cr_assert_eq(out[k], 0xEE, "no write past the row (w %u)", w);
    }
}

/* The float kernels against the reference expression for every box width from 1 to 40 (the
 * vector path takes 8 pixels at a time and leaves a tail of up to 7), mirrored or not, with the
 * vector path on (where the CPU has it) and forced off. */
Test(augment, float_kernels_equal_reference_for_every_width)
{
    if (!have_f16c())
        cr_skip_test("the CPU has no F16C: no hardware reference for float16");
    enum { W = 45, H = 4 };
    static uint8_t img[W * H * 3];
    fill(img, W, H);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    static float out32[3 * 40 * 3];
    for (uint32_t dtype = DLC_DTYPE_FLOAT32; dtype <= DLC_DTYPE_FLOAT16; dtype++) {
        dlc__convert cv;
        dlc__convert_init(&cv, dtype, 3, mean, std);
        for (int simd = cv.simd; simd >= 0; simd--) {
            cv.simd = simd;
            for (uint32_t w = 1; w <= 40; w++) {
                for (int flip = 0; flip < 2; flip++) {
                    const dlc__box box = {1, 2, 3, w};
                    memset(out32, 0xEE, sizeof out32);
                    dlc__crop_convert(img, W * 3, box, flip, &cv, out32);
                    const uint16_t *out16 = (const uint16_t *)out32;
                    for (uint32_t c = 0; c < 3; c++)
                        for (uint32_t y = 0; y < box.h; y++)
                            for (uint32_t x = 0; x < w; x++) {
                                const uint32_t sx = box.left + (flip ? w - 1 - x : x);
                                const uint8_t v = img[((box.top + y) * W + sx) * 3 + c];
                                const float ref = ((float)v / 255.0f - mean[c]) / std[c];
                                const size_t i = (c * box.h + y) * w + x;
                                if (dtype == DLC_DTYPE_FLOAT32) {
                                    cr_assert(memcmp(&out32[i], &ref, 4) == 0,
                                              "simd %d w %u flip %d: %a vs %a", simd, w, flip,
                                              out32[i], ref);
                                } else {
                                    const uint16_t bits = hw_f16(ref);
                                    cr_assert_eq(out16[i], bits, "simd %d w %u flip %d", simd, w,
                                                 flip);
                                }
                            }
                    /* Nothing is written past the three planes. */
                    const size_t used =
                        (size_t)3 * box.h * w * (dtype == DLC_DTYPE_FLOAT32 ? 4 : 2);
                    for (size_t k = used; k < sizeof out32; k++)
                        cr_assert_eq(((const uint8_t *)out32)[k], 0xEE);
                }
            }
        }
    }
}

/* The vector path is kept only when it reproduces the tables on every input; with the ImageNet
 * constants it must, or the loader silently runs at the tables' speed. */
Test(augment, vector_convert_is_used_where_the_cpu_has_it)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__builtin_cpu_supports("avx2") || !__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_FMA) ||
        !(c & bit_F16C))
        cr_skip_test("the CPU has no AVX2, FMA or F16C");
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    const float mean1[3] = {0.5f, 0.5f, 0.5f}, std1[3] = {0.5f, 0.5f, 0.5f};
    dlc__convert cv;
    for (uint32_t dtype = DLC_DTYPE_FLOAT32; dtype <= DLC_DTYPE_FLOAT16; dtype++) {
        dlc__convert_init(&cv, dtype, 3, mean, std);
        cr_assert(cv.simd, "dtype %u, ImageNet constants", dtype);
        dlc__convert_init(&cv, dtype, 3, mean1, std1);
        cr_assert(cv.simd, "dtype %u, mean = std = 0.5", dtype);
    }
    dlc__convert_init(&cv, DLC_DTYPE_UINT8, 3, mean, std);
    cr_assert(!cv.simd);
#else
    cr_skip_test("not x86-64");
#endif
}

Test(augment, a_box_left_empty_in_float32_is_dropped)
{
    /* A crop of 49 source pixels resized to 128: the crop's right edge maps to
     * 49 * (128 / 49) = 127.99999999999999 in double, 128 in float32. A box that starts on that
     * edge has an area in double and none in float32; models refuse such a box, so it goes. */
    const dlc__geom g = {.x0 = 0, .y0 = 0, .sx = 128.0 / 49, .sy = 1, .out_w = 128, .out_h = 64};
    const float in[8] = {49, 10, 60, 20, /* on the edge: dropped */ 10, 10, 30, 20};
    float out[8] = {0};
    uint8_t keep[2] = {9, 9};
    cr_assert_eq(dlc__boxes_transform((const uint8_t *)in, 2, &g, out, keep), 1);
    cr_assert(keep[0] == 0 && keep[1] == 1);
    cr_assert(out[0] == (float)(10 * (128.0 / 49)) && out[2] > out[0] && out[3] == 20,
              "the kept box is the second one");
}
