/* Tests of the Pillow-compatible resampler (cache/image/image_resize.c). */
#include <dlcache/image.h>

#include "image_internal.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A test image with its own pixels and stride. */
typedef struct owned {
    dlc_image img;
    uint8_t *buf;
} owned;

static owned make_image(uint32_t w, uint32_t h, size_t pad)
{
    owned o;
    o.img.width = w;
    o.img.height = h;
    o.img.channels = 3;
    o.img.stride = (size_t)w * 3 + pad;
    o.buf = calloc(o.img.stride * h, 1);
    cr_assert_not_null(o.buf);
    o.img.data = o.buf;
    return o;
}

static void fill_random(owned *o, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 1;
    for (uint32_t y = 0; y < o->img.height; y++)
        for (size_t i = 0; i < (size_t)o->img.width * 3; i++) {
            s = s * 1664525u + 1013904223u;
            o->img.data[y * o->img.stride + i] = (uint8_t)(s >> 24);
        }
}

static dlc_status resize(const owned *src, double x, double y, double w, double h, owned *dst)
{
    const size_t n = dlc_resize_scratch_bound((uint32_t)ceil(w), (uint32_t)ceil(h), dst->img.width,
                                              dst->img.height, 3);
    cr_assert_gt(n, 0);
    void *scratch = aligned_alloc(64, (n + 63) & ~(size_t)63);
    const dlc_status rc = dlc_resize(&src->img, x, y, w, h, &dst->img, scratch, n);
    free(scratch);
    return rc;
}

static int rows_equal(const owned *a, const owned *b)
{
    for (uint32_t y = 0; y < a->img.height; y++)
        if (memcmp(a->img.data + y * a->img.stride, b->img.data + y * b->img.stride,
                   (size_t)a->img.width * 3) != 0)
            return 0;
    return 1;
}

/* The 5x3 image below, resized by Pillow 9.4 (values printed by
 * PIL.Image.resize in Debian 12's python3-pil). */
static owned pillow_source(void)
{
    static const uint8_t a[3][5] = {
        {0, 100, 200, 40, 90}, {10, 20, 30, 40, 50}, {255, 0, 255, 0, 255}};
    owned o = make_image(5, 3, 0);
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 5; x++) {
            uint8_t *p = o.img.data + y * o.img.stride + x * 3;
            p[0] = a[y][x];
            p[1] = a[2 - y][x];
            p[2] = (uint8_t)(255 - a[y][x]);
        }
    return o;
}

Test(image_resize, matches_pillow_downscale)
{
    static const uint8_t want[] = {32, 97, 223, 100, 100, 155, 60,  109, 195,
                                   97, 32, 159, 100, 100, 155, 109, 60,  147};
    owned src = pillow_source(), dst = make_image(3, 2, 0);
    cr_assert_eq(resize(&src, 0, 0, 5, 3, &dst), DLC_OK, "%s", dlc_errmsg());
    cr_assert_arr_eq(dst.img.data, want, sizeof want);
    free(src.buf);
    free(dst.buf);
}

Test(image_resize, matches_pillow_fractional_box)
{
    /* Image.resize((2, 2), BILINEAR, box=(0.5, 0.25, 4.75, 2.5)) */
    static const uint8_t want[] = {72, 91, 183, 74, 103, 181, 69, 57, 186, 84, 64, 171};
    owned src = pillow_source(), dst = make_image(2, 2, 0);
    cr_assert_eq(resize(&src, 0.5, 0.25, 4.25, 2.25, &dst), DLC_OK, "%s", dlc_errmsg());
    cr_assert_arr_eq(dst.img.data, want, sizeof want);
    free(src.buf);
    free(dst.buf);
}

Test(image_resize, matches_pillow_upscale)
{
    static const uint8_t want[] = {
        0,   255, 255, 57,  109, 198, 129, 73,  126, 200, 255, 55,  86,  73,  169, 61,  109,
        194, 90,  255, 165, 6,   102, 249, 31,  51,  224, 63,  42,  192, 94,  114, 161, 55,
        51,  200, 50,  68,  205, 65,  127, 190, 102, 6,   153, 51,  31,  204, 42,  63,  213,
        114, 94,  141, 51,  55,  205, 68,  50,  187, 127, 65,  128, 255, 0,   0,   109, 57,
        146, 73,  129, 182, 255, 200, 0,   73,  86,  182, 109, 61,  146, 255, 90,  0};
    owned src = pillow_source(), dst = make_image(7, 4, 0);
    cr_assert_eq(resize(&src, 0, 0, 5, 3, &dst), DLC_OK, "%s", dlc_errmsg());
    cr_assert_arr_eq(dst.img.data, want, sizeof want);
    free(src.buf);
    free(dst.buf);
}

Test(image_resize, same_size_is_identity)
{
    owned src = make_image(37, 23, 5), dst = make_image(37, 23, 11);
    fill_random(&src, 1);
    cr_assert_eq(resize(&src, 0, 0, 37, 23, &dst), DLC_OK, "%s", dlc_errmsg());
    cr_assert(rows_equal(&src, &dst));
    free(src.buf);
    free(dst.buf);
}

Test(image_resize, integer_box_of_same_size_is_a_crop)
{
    owned src = make_image(40, 30, 0), dst = make_image(17, 9, 0);
    fill_random(&src, 2);
    cr_assert_eq(resize(&src, 5, 7, 17, 9, &dst), DLC_OK, "%s", dlc_errmsg());
    for (uint32_t y = 0; y < 9; y++)
        cr_assert_arr_eq(dst.img.data + y * dst.img.stride,
                         src.img.data + (y + 7) * src.img.stride + 5 * 3, 17 * 3);
    free(src.buf);
    free(dst.buf);
}

Test(image_resize, constant_stays_constant)
{
    owned src = make_image(100, 80, 3);
    for (uint32_t y = 0; y < 80; y++)
        for (uint32_t x = 0; x < 100; x++) {
            uint8_t *p = src.img.data + y * src.img.stride + x * 3;
            p[0] = 17;
            p[1] = 200;
            p[2] = 255;
        }
    static const struct {
        uint32_t w, h;
        double x, y, bw, bh;
    } cases[] = {{31, 7, 0, 0, 100, 80},
                 {250, 190, 0, 0, 100, 80},
                 {13, 29, 3.3, 1.7, 90.1, 70.2},
                 {1, 1, 0, 0, 100, 80},
                 {300, 2, 10.5, 20.25, 5.5, 0.75}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        owned dst = make_image(cases[i].w, cases[i].h, 0);
        cr_assert_eq(resize(&src, cases[i].x, cases[i].y, cases[i].bw, cases[i].bh, &dst), DLC_OK,
                     "%s", dlc_errmsg());
        for (size_t k = 0; k < (size_t)cases[i].w * cases[i].h; k++) {
            cr_assert_eq(dst.img.data[3 * k], 17, "case %zu pixel %zu", i, k);
            cr_assert_eq(dst.img.data[3 * k + 1], 200, "case %zu pixel %zu", i, k);
            cr_assert_eq(dst.img.data[3 * k + 2], 255, "case %zu pixel %zu", i, k);
        }
        free(dst.buf);
    }
    free(src.buf);
}

Test(image_resize, region_outside_is_einval)
{
    owned src = make_image(20, 10, 0), dst = make_image(8, 8, 0);
    const size_t n = dlc_resize_scratch_bound(20, 10, 8, 8, 3);
    void *scratch = aligned_alloc(64, (n + 63) & ~(size_t)63);
    static const double bad[][4] = {{-1, 0, 10, 5},  {0, -0.5, 10, 5},   {15, 0, 6, 5},
                                    {0, 5, 10, 5.5}, {0, 0, 0, 5},       {0, 0, 10, -1},
                                    {NAN, 0, 10, 5}, {0, 0, INFINITY, 5}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(
            dlc_resize(&src.img, bad[i][0], bad[i][1], bad[i][2], bad[i][3], &dst.img, scratch, n),
            DLC_EINVAL, "case %zu", i);
    cr_assert_str_not_empty(dlc_errmsg());
    free(scratch);
    free(src.buf);
    free(dst.buf);
}

Test(image_resize, bad_images_are_einval)
{
    owned src = make_image(20, 10, 0), dst = make_image(8, 8, 0);
    const size_t n = dlc_resize_scratch_bound(20, 10, 8, 8, 3);
    void *scratch = aligned_alloc(64, (n + 63) & ~(size_t)63);
    dlc_image d = dst.img;
    d.channels = 4;
    cr_assert_eq(dlc_resize(&src.img, 0, 0, 20, 10, &d, scratch, n), DLC_EINVAL);
    d = dst.img;
    d.stride = 5;
    cr_assert_eq(dlc_resize(&src.img, 0, 0, 20, 10, &d, scratch, n), DLC_EINVAL);
    d = dst.img;
    d.width = 0;
    cr_assert_eq(dlc_resize(&src.img, 0, 0, 20, 10, &d, scratch, n), DLC_EINVAL);
    cr_assert_eq(dlc_resize(NULL, 0, 0, 20, 10, &dst.img, scratch, n), DLC_EINVAL);
    cr_assert_eq(dlc_resize_scratch_bound(0, 10, 8, 8, 3), 0);
    free(scratch);
    free(src.buf);
    free(dst.buf);
}

Test(image_resize, small_scratch_is_einval)
{
    owned src = make_image(200, 100, 0), dst = make_image(64, 48, 0);
    fill_random(&src, 3);
    const size_t n = dlc_resize_scratch_bound(200, 100, 64, 48, 3);
    void *scratch = aligned_alloc(64, (n + 63) & ~(size_t)63);
    cr_assert_eq(dlc_resize(&src.img, 0, 0, 200, 100, &dst.img, scratch, 100), DLC_EINVAL);
    cr_assert_eq(dlc_resize(&src.img, 0, 0, 200, 100, &dst.img, NULL, n), DLC_EINVAL);
    cr_assert_eq(dlc_resize(&src.img, 0, 0, 200, 100, &dst.img, scratch, n), DLC_OK);
    free(scratch);
    free(src.buf);
    free(dst.buf);
}

/* The bound covers every region of the size it was asked for, wherever it
 * lies and however fractional it is, also for an unaligned scratch. */
Test(image_resize, bound_is_enough)
{
    owned src = make_image(300, 200, 0);
    fill_random(&src, 4);
    uint32_t s = 99;
    for (int i = 0; i < 300; i++) {
        s = s * 1664525u + 1013904223u;
        const double w = 1 + (s >> 8) % 299 + ((s >> 4) & 15) / 16.0;
        s = s * 1664525u + 1013904223u;
        const double h = 1 + (s >> 8) % 199 + ((s >> 4) & 15) / 16.0;
        s = s * 1664525u + 1013904223u;
        const double x = (300 - w) * ((s >> 8) & 1023) / 1023.0;
        const double y = (200 - h) * ((s >> 18) & 1023) / 1023.0;
        const uint32_t dw = 1 + (s >> 3) % 260, dh = 1 + (s >> 13) % 260;
        owned dst = make_image(dw, dh, 0);
        const size_t n = dlc_resize_scratch_bound((uint32_t)ceil(w), (uint32_t)ceil(h), dw, dh, 3);
        uint8_t *scratch = malloc(n + 1);
        cr_assert_eq(dlc_resize(&src.img, x, y, w, h, &dst.img, scratch + 1, n), DLC_OK,
                     "case %d: %s", i, dlc_errmsg());
        free(scratch);
        free(dst.buf);
    }
    free(src.buf);
}

/* A window of the virtual output is bit-identical to resizing the whole and
 * cropping, which decode_resize relies on for its center crop. */
Test(image_resize, window_equals_crop_of_whole)
{
    owned src = make_image(123, 77, 0);
    fill_random(&src, 5);
    owned whole = make_image(61, 90, 0);
    cr_assert_eq(resize(&src, 1.5, 2.25, 120, 70.5, &whole), DLC_OK, "%s", dlc_errmsg());
    owned win = make_image(20, 33, 0);
    const size_t n = dlc_resize_scratch_bound(123, 77, 61, 90, 3);
    void *scratch = aligned_alloc(64, (n + 63) & ~(size_t)63);
    cr_assert_eq(
        dlc__resize_window(&src.img, 1.5, 2.25, 120, 70.5, 61, 90, 13, 41, &win.img, scratch, n),
        DLC_OK, "%s", dlc_errmsg());
    for (uint32_t y = 0; y < 33; y++)
        cr_assert_arr_eq(win.img.data + y * win.img.stride,
                         whole.img.data + (y + 41) * whole.img.stride + 13 * 3, 20 * 3, "row %u",
                         y);
    cr_assert_eq(
        dlc__resize_window(&src.img, 1.5, 2.25, 120, 70.5, 61, 90, 50, 41, &win.img, scratch, n),
        DLC_EINVAL, "a window past the output's edge must be refused");
    free(scratch);
    free(src.buf);
    free(whole.buf);
    free(win.buf);
}

/* Pillow's ImagingResample, written per pixel as in Resample.c with no
 * padding, no windowing and no vector kernel: the reference for the
 * optimised passes. */
static void ref_coeffs(float in0, float in1, uint32_t in_size, uint32_t out_size, int32_t *bounds,
                       int32_t *kk, uint32_t *ksize_out)
{
    const double scale = (double)(in1 - in0) / out_size; /* float subtraction, as Pillow */
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = filterscale;
    const uint32_t ksize = (uint32_t)ceil(support) * 2 + 1;
    for (uint32_t xx = 0; xx < out_size; xx++) {
        const double center = in0 + (xx + 0.5) * scale;
        int32_t xmin = (int32_t)(center - support + 0.5), xmax = (int32_t)(center + support + 0.5);
        if (xmin < 0)
            xmin = 0;
        if (xmax > (int32_t)in_size)
            xmax = (int32_t)in_size;
        xmax -= xmin;
        double k[64], ww = 0.0;
        for (int32_t x = 0; x < xmax; x++) {
            double v = fabs((x + xmin - center + 0.5) / filterscale);
            k[x] = v < 1.0 ? 1.0 - v : 0.0;
            ww += k[x];
        }
        for (int32_t x = 0; x < xmax; x++) {
            const double w = ww != 0.0 ? k[x] / ww : k[x];
            kk[xx * ksize + x] =
                w < 0 ? (int32_t)(-0.5 + w * (1 << 22)) : (int32_t)(0.5 + w * (1 << 22));
        }
        bounds[2 * xx] = xmin;
        bounds[2 * xx + 1] = xmax;
    }
    *ksize_out = ksize;
}

static uint8_t ref_clip(int64_t s)
{
    s >>= 22;
    return (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
}

static void ref_resize(const owned *src, float x0, float y0, float x1, float y1, owned *dst)
{
    const uint32_t W = src->img.width, H = src->img.height;
    const uint32_t w = dst->img.width, h = dst->img.height;
    int32_t *hb = malloc(sizeof(int32_t) * 2 * w), *hk = malloc(sizeof(int32_t) * w * 64);
    int32_t *vb = malloc(sizeof(int32_t) * 2 * h), *vk = malloc(sizeof(int32_t) * h * 64);
    uint32_t ksh, ksv;
    ref_coeffs(x0, x1, W, w, hb, hk, &ksh);
    ref_coeffs(y0, y1, H, h, vb, vk, &ksv);
    const int need_h = w != W || x0 != 0.0f || x1 != (float)w;
    const int need_v = h != H || y0 != 0.0f || y1 != (float)h;
    /* Horizontal pass over every source row (Pillow limits it to the rows
     * the vertical pass reads, which gives the same values). */
    const uint32_t tw = need_h ? w : W;
    uint8_t *tmp = malloc((size_t)tw * 3 * H);
    for (uint32_t y = 0; y < H; y++)
        for (uint32_t xx = 0; xx < tw; xx++)
            for (int c = 0; c < 3; c++) {
                if (!need_h) {
                    tmp[((size_t)y * tw + xx) * 3 + c] =
                        src->img.data[y * src->img.stride + xx * 3 + c];
                    continue;
                }
                int64_t s = 1 << 21;
                for (int32_t t = 0; t < hb[2 * xx + 1]; t++)
                    s += (int64_t)src->img.data[y * src->img.stride + (hb[2 * xx] + t) * 3 + c] *
                         hk[xx * ksh + t];
                tmp[((size_t)y * tw + xx) * 3 + c] = ref_clip(s);
            }
    for (uint32_t yy = 0; yy < h; yy++)
        for (uint32_t xx = 0; xx < w; xx++)
            for (int c = 0; c < 3; c++) {
                uint8_t v;
                if (!need_v) {
                    v = tmp[((size_t)yy * tw + xx) * 3 + c];
                } else {
                    int64_t s = 1 << 21;
                    for (int32_t t = 0; t < vb[2 * yy + 1]; t++)
                        s += (int64_t)tmp[((size_t)(vb[2 * yy] + t) * tw + xx) * 3 + c] *
                             vk[yy * ksv + t];
                    v = ref_clip(s);
                }
                dst->img.data[yy * dst->img.stride + xx * 3 + c] = v;
            }
    free(tmp);
    free(hb);
    free(hk);
    free(vb);
    free(vk);
}

/* The vector kernels (AVX2 where the CPU has it) against the per-pixel
 * reference, on random pixels: every tap count from upscaling (3) to 30x
 * reductions (61), odd and even widths, windows at both edges, fractional
 * boxes and a source whose rows end exactly at the end of its buffer. */
Test(image_resize, matches_per_pixel_reference)
{
    uint32_t s = 12345;
    for (int i = 0; i < 200; i++) {
        s = s * 1664525u + 1013904223u;
        const uint32_t sw = 1 + (s >> 8) % 400, sh = 1 + (s >> 20) % 60;
        s = s * 1664525u + 1013904223u;
        const uint32_t dw = 1 + (s >> 8) % (sw * 2 > 300 ? 300 : sw * 2);
        const uint32_t dh = 1 + (s >> 20) % (sh * 2 > 40 ? 40 : sh * 2);
        const int frac = i % 3 == 0;
        s = s * 1664525u + 1013904223u;
        const double bx = frac ? ((s >> 8) % 100) / 400.0 * sw : 0;
        const double by = frac ? ((s >> 20) % 100) / 400.0 * sh : 0;
        const double bw = frac ? (sw - bx) * (0.5 + ((s >> 4) & 15) / 32.0) : sw;
        const double bh = frac ? (sh - by) * (0.5 + ((s >> 12) & 15) / 32.0) : sh;
        if (bw / dw > 30 || bh / dh > 30)
            continue; /* the reference keeps up to 64 taps */
        /* No stride padding: the last row ends where the allocation ends. */
        owned src = make_image(sw, sh, 0);
        fill_random(&src, (uint32_t)i);
        owned got = make_image(dw, dh, 0), want = make_image(dw, dh, 0);
        cr_assert_eq(resize(&src, bx, by, bw, bh, &got), DLC_OK, "case %d: %s", i, dlc_errmsg());
        ref_resize(&src, (float)bx, (float)by, (float)(bx + bw), (float)(by + bh), &want);
        for (uint32_t y = 0; y < dh; y++)
            cr_assert_arr_eq(got.img.data + y * got.img.stride, want.img.data + y * want.img.stride,
                             (size_t)dw * 3,
                             "case %d: %ux%u box (%g, %g) %gx%g -> %ux%u: row %u differs", i, sw,
                             sh, bx, by, bw, bh, dw, dh, y);
        free(src.buf);
        free(got.buf);
        free(want.buf);
    }
}

/* Random-resized crops as the loader makes them (a 256x256 record, boxes of
 * 8% to 100% of its area, 224x224 out) against the per-pixel reference:
 * mostly upscales, whose windows have 2 taps (the padded 2-tap kernels),
 * and some mild reductions (4 and 5 taps), with boxes touching every edge. */
Test(image_resize, random_resized_crops_match_reference)
{
    owned src = make_image(256, 256, 0);
    fill_random(&src, 7);
    owned got = make_image(224, 224, 0), want = make_image(224, 224, 0);
    uint32_t s = 777;
    for (int i = 0; i < 40; i++) {
        s = s * 1664525u + 1013904223u;
        const double area = 256.0 * 256.0 * (0.08 + 0.92 * ((s >> 8) & 0xffff) / 65535.0);
        s = s * 1664525u + 1013904223u;
        const double aspect = exp(log(3.0 / 4) + log(16.0 / 9) * ((s >> 8) & 0xffff) / 65535.0);
        uint32_t bw = (uint32_t)lround(sqrt(area * aspect)),
                 bh = (uint32_t)lround(sqrt(area / aspect));
        bw = bw < 1 ? 1 : bw > 256 ? 256 : bw;
        bh = bh < 1 ? 1 : bh > 256 ? 256 : bh;
        s = s * 1664525u + 1013904223u;
        /* Every fourth box sits at the right and bottom edges, every fourth at the origin. */
        const uint32_t bx = i % 4 == 1 ? 256 - bw : i % 4 == 2 ? 0 : (s >> 8) % (257 - bw);
        const uint32_t by = i % 4 == 1 ? 256 - bh : i % 4 == 2 ? 0 : (s >> 20) % (257 - bh);
        cr_assert_eq(resize(&src, bx, by, bw, bh, &got), DLC_OK, "case %d: %s", i, dlc_errmsg());
        ref_resize(&src, (float)bx, (float)by, (float)(bx + bw), (float)(by + bh), &want);
        for (uint32_t y = 0; y < 224; y++)
            cr_assert_arr_eq(got.img.data + y * got.img.stride, want.img.data + y * want.img.stride,
                             224 * 3, "case %d: box (%u, %u) %ux%u: row %u differs", i, bx, by, bw,
                             bh, y);
    }
    free(src.buf);
    free(got.buf);
    free(want.buf);
}
