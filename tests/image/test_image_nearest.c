/* The geometry of the builder's resize and crop, and the nearest-neighbour resample of masks:
 * Pillow's NEAREST index tables (taken from Pillow 9.4), windows equal to the same part of the
 * whole output, ids never blended, and the JPEG decoder using the very same geometry. */
#include <dlcache/image.h>

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

/* The source column each output column of a 1-row resize from @p sw to @p ow takes. */
static void row_indices(uint32_t sw, uint32_t ow, uint32_t x, uint32_t n, uint8_t *got)
{
    uint8_t *src = malloc(sw);
    for (uint32_t i = 0; i < sw; i++)
        src[i] = (uint8_t)i;
    const dlc_image in = {.data = src, .width = sw, .height = 1, .channels = 1, .stride = sw};
    const dlc_image out = {.data = got, .width = n, .height = 1, .channels = 1, .stride = n};
    cr_assert_eq(dlc_resize_nearest(&in, ow, 1, x, 0, &out), DLC_OK, "%s", dlc_errmsg());
    free(src);
}

Test(image_nearest, pillow_index_tables)
{
    /* Image.fromarray(arange(sw)).resize((ow, 1), NEAREST) in Pillow 9.4. */
    static const struct {
        uint32_t sw, ow;
        uint8_t want[8];
    } cases[] = {
        {7, 3, {1, 3, 5}},
        {3, 7, {0, 0, 1, 1, 1, 2, 2}},
        {10, 4, {1, 3, 6, 8}},
        {5, 5, {0, 1, 2, 3, 4}},
        {255, 85, {1, 4, 7, 10, 13, 16, 19, 22}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint8_t got[8];
        const uint32_t n = cases[k].ow < 8 ? cases[k].ow : 8;
        row_indices(cases[k].sw, cases[k].ow, 0, n, got);
        cr_assert_arr_eq(got, cases[k].want, n, "%u -> %u", cases[k].sw, cases[k].ow);
    }
}

Test(image_nearest, window_is_that_part_of_the_whole)
{
    /* Three channels: an id in R, the source row in G, the source column in B. */
    const uint32_t sw = 37, sh = 23, ow = 17, oh = 29;
    uint8_t *src = malloc((size_t)sw * sh * 3), *full = malloc((size_t)ow * oh * 3);
    for (uint32_t y = 0; y < sh; y++)
        for (uint32_t x = 0; x < sw; x++) {
            uint8_t *p = src + ((size_t)y * sw + x) * 3;
            p[0] = (uint8_t)((x / 5 + y / 4) % 7);
            p[1] = (uint8_t)y;
            p[2] = (uint8_t)x;
        }
    const dlc_image in = {.data = src, .width = sw, .height = sh, .channels = 3, .stride = sw * 3};
    const dlc_image all = {
        .data = full, .width = ow, .height = oh, .channels = 3, .stride = ow * 3};
    cr_assert_eq(dlc_resize_nearest(&in, ow, oh, 0, 0, &all), DLC_OK, "%s", dlc_errmsg());
    uint8_t win[5 * 6 * 3];
    const dlc_image w = {.data = win, .width = 5, .height = 6, .channels = 3, .stride = 5 * 3};
    cr_assert_eq(dlc_resize_nearest(&in, ow, oh, 9, 13, &w), DLC_OK, "%s", dlc_errmsg());
    for (uint32_t y = 0; y < 6; y++)
        cr_assert_arr_eq(win + y * 15, full + ((size_t)(y + 13) * ow + 9) * 3, 15, "row %u", y);
    /* Every output pixel is a source pixel: ids are copied, never blended. */
    for (size_t i = 0; i < (size_t)ow * oh; i++) {
        const uint8_t *p = full + i * 3;
        cr_assert(p[1] < sh && p[2] < sw);
        cr_assert_eq(p[0], src[((size_t)p[1] * sw + p[2]) * 3]);
    }
    free(src);
    free(full);
}

Test(image_nearest, bad_arguments)
{
    uint8_t a[16] = {0}, b[16] = {0};
    const dlc_image in = {.data = a, .width = 4, .height = 4, .channels = 1, .stride = 4};
    dlc_image out = {.data = b, .width = 2, .height = 2, .channels = 1, .stride = 2};
    cr_assert_eq(dlc_resize_nearest(&in, 2, 2, 1, 0, &out), DLC_EINVAL, "window outside");
    out.channels = 3;
    cr_assert_eq(dlc_resize_nearest(&in, 2, 2, 0, 0, &out), DLC_EINVAL, "channels differ");
    out.channels = 1;
    cr_assert_eq(dlc_resize_nearest(&in, 0, 2, 0, 0, &out), DLC_EINVAL);
    cr_assert_eq(dlc_resize_nearest(NULL, 2, 2, 0, 0, &out), DLC_EINVAL);
}

Test(image_nearest, geometry_is_torchvision_resize_and_center_crop)
{
    dlc_resize_geometry g;
    /* 500x375 to 256: 341x256, 85 columns cut, int(round(42.5)) = 42 on the left. */
    cr_assert_eq(dlc_resize_geometry_get(500, 375, 256, 1, &g), DLC_OK);
    cr_assert(g.resized_w == 341 && g.resized_h == 256);
    cr_assert(g.x == 42 && g.y == 0 && g.width == 256 && g.height == 256);
    /* 375x501: 256x342, 86 rows cut, 43 on top. */
    cr_assert_eq(dlc_resize_geometry_get(375, 501, 256, 1, &g), DLC_OK);
    cr_assert(g.resized_h == 342 && g.y == 43 && g.x == 0);
    /* 375x503: 256x343, 87 rows cut, int(round(43.5)) = 44 (half to even). */
    cr_assert_eq(dlc_resize_geometry_get(375, 503, 256, 1, &g), DLC_OK);
    cr_assert(g.resized_h == 343 && g.y == 44);
    cr_assert_eq(dlc_resize_geometry_get(500, 375, 256, 0, &g), DLC_OK);
    cr_assert(g.width == 341 && g.height == 256 && g.x == 0);
    cr_assert_eq(dlc_resize_geometry_get(0, 375, 256, 1, &g), DLC_EINVAL);
    cr_assert_eq(dlc_resize_geometry_get(1, 100000, 256, 1, &g), DLC_EINVAL, "2^20 limit");
    cr_assert_eq(g.resized_h, 25600000u, "the size it would give");
}

Test(image_nearest, decoder_uses_the_same_geometry)
{
    dlc_codec *c = NULL;
    cr_assert_eq(dlc_codec_create(&c), DLC_OK);
    static const uint32_t sizes[][2] = {{500, 375}, {375, 503}, {64, 64}, {97, 31}};
    for (size_t k = 0; k < 4; k++) {
        const uint32_t w = sizes[k][0], h = sizes[k][1];
        uint8_t *px = calloc((size_t)w * h, 3);
        const dlc_image img = {.data = px, .width = w, .height = h, .channels = 3, .stride = w * 3};
        const uint8_t *jpeg;
        size_t size;
        cr_assert_eq(dlc_jpeg_encode(c, &img, 90, &jpeg, &size), DLC_OK);
        uint8_t *copy = malloc(size);
        memcpy(copy, jpeg, size);
        for (int crop = 0; crop < 2; crop++) {
            dlc_resize_geometry g;
            dlc_image out;
            cr_assert_eq(dlc_resize_geometry_get(w, h, 24, crop, &g), DLC_OK);
            cr_assert_eq(dlc_jpeg_decode_resize(c, copy, size, 24, crop, &out), DLC_OK);
            cr_assert(out.width == g.width && out.height == g.height, "%ux%u crop %d", w, h, crop);
        }
        free(copy);
        free(px);
    }
    dlc_codec_destroy(c);
}
