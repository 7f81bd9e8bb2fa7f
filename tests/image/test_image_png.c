/* PNG encode and decode (cache/image/image_png.c): lossless round trips of 1, 3 and 4 channels,
 * deterministic bytes, conversions of the PNGs other programs write (palette, 16-bit, gray with
 * alpha, low bit depths, interlaced), made here with libpng directly, and damaged input refused
 * with DLC_EDECODE, never a crash. */
#include <dlcache/image.h>

#include <criterion/criterion.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>

static dlc_codec *codec;

static void setup(void)
{
    cr_assert_eq(dlc_codec_create(&codec), DLC_OK);
}

static void teardown(void)
{
    dlc_codec_destroy(codec);
    codec = NULL;
}

TestSuite(image_png, .init = setup, .fini = teardown);

static uint8_t *pattern(uint32_t w, uint32_t h, uint32_t ch, uint32_t seed)
{
    uint8_t *p = malloc((size_t)w * h * ch);
    for (size_t i = 0; i < (size_t)w * h * ch; i++)
        p[i] = (uint8_t)((i * 2654435761u + seed) >> 13);
    return p;
}

Test(image_png, lossless_round_trips_of_one_three_and_four_channels)
{
    const uint32_t chans[] = {1, 3, 4};
    for (size_t k = 0; k < 3; k++) {
        const uint32_t ch = chans[k], w = 37, h = 23;
        uint8_t *px = pattern(w, h, ch, (uint32_t)k);
        /* Rows with padding: the stride is honoured. */
        const size_t stride = (size_t)w * ch + 5;
        uint8_t *padded = calloc(h, stride);
        for (uint32_t y = 0; y < h; y++)
            memcpy(padded + y * stride, px + (size_t)y * w * ch, (size_t)w * ch);
        const dlc_image img = {padded, w, h, ch, stride};
        const uint8_t *png;
        size_t size;
        cr_assert_eq(dlc_png_encode(codec, &img, &png, &size), DLC_OK, "%s", dlc_errmsg());
        uint8_t *copy = malloc(size);
        memcpy(copy, png, size);
        uint32_t iw, ih, ic;
        cr_assert_eq(dlc_png_info(codec, copy, size, &iw, &ih, &ic), DLC_OK, "%s", dlc_errmsg());
        cr_assert(iw == w && ih == h && ic == ch);
        dlc_image out;
        cr_assert_eq(dlc_png_decode(codec, copy, size, &out), DLC_OK, "%s", dlc_errmsg());
        cr_assert(out.width == w && out.height == h && out.channels == ch);
        cr_assert_eq(out.stride, (size_t)w * ch);
        cr_assert_eq(memcmp(out.data, px, (size_t)w * h * ch), 0, "%u channels", ch);
        /* The same pixels give the same bytes. */
        const uint8_t *again;
        size_t size2;
        cr_assert_eq(dlc_png_encode(codec, &img, &again, &size2), DLC_OK);
        cr_assert(size2 == size && memcmp(again, copy, size) == 0);
        free(copy);
        free(padded);
        free(px);
    }
}

/* A PNG written by libpng with the given IHDR from @p rows (bytes as libpng wants them). */
static uint8_t *write_png(uint32_t w, uint32_t h, int depth, int color, int interlace,
                          const uint8_t *rows, size_t row_bytes, const png_color *palette, int npal,
                          const uint8_t *trns, int ntrns, size_t *size)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(p);
    cr_assert(p && info && f);
    cr_assert_eq(setjmp(png_jmpbuf(p)), 0);
    png_init_io(p, f);
    png_set_IHDR(p, info, w, h, depth, color, interlace, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (palette)
        png_set_PLTE(p, info, palette, npal);
    if (trns)
        png_set_tRNS(p, info, trns, ntrns, NULL);
    png_write_info(p, info);
    const int passes = png_set_interlace_handling(p);
    for (int pass = 0; pass < passes; pass++)
        for (uint32_t y = 0; y < h; y++)
            png_write_row(p, rows + y * row_bytes);
    png_write_end(p, NULL);
    png_destroy_write_struct(&p, &info);
    fclose(f);
    *size = len;
    return (uint8_t *)buf;
}

Test(image_png, other_formats_are_converted_to_8_bits)
{
    const uint32_t w = 6, h = 4;
    size_t size;
    dlc_image out;
    uint32_t ch;

    /* 16-bit gray: the high byte. */
    uint8_t g16[6 * 4 * 2];
    for (size_t i = 0; i < w * h; i++) {
        g16[2 * i] = (uint8_t)(i * 10);
        g16[2 * i + 1] = 0xab;
    }
    uint8_t *png = write_png(w, h, 16, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE, g16, 12, NULL, 0,
                             NULL, 0, &size);
    cr_assert_eq(dlc_png_decode(codec, png, size, &out), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(out.channels, 1);
    for (size_t i = 0; i < w * h; i++)
        cr_assert_eq(out.data[i], (uint8_t)(i * 10));
    free(png);

    /* A palette: RGB; with transparency: RGBA. */
    const png_color pal[3] = {{255, 0, 0}, {0, 255, 0}, {1, 2, 3}};
    uint8_t idx[6 * 4];
    for (size_t i = 0; i < w * h; i++)
        idx[i] = (uint8_t)(i % 3);
    png = write_png(w, h, 8, PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_NONE, idx, 6, pal, 3, NULL, 0,
                    &size);
    cr_assert_eq(dlc_png_info(codec, png, size, NULL, NULL, &ch), DLC_OK);
    cr_assert_eq(ch, 3);
    cr_assert_eq(dlc_png_decode(codec, png, size, &out), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(out.channels, 3);
    cr_assert(out.data[3 * 5 + 0] == 1 && out.data[3 * 5 + 1] == 2 && out.data[3 * 5 + 2] == 3);
    free(png);
    const uint8_t alpha[3] = {0, 128, 255};
    png = write_png(w, h, 8, PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_NONE, idx, 6, pal, 3, alpha, 3,
                    &size);
    cr_assert_eq(dlc_png_decode(codec, png, size, &out), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(out.channels, 4);
    cr_assert_eq(out.data[4 * 1 + 3], 128);
    free(png);

    /* Gray with alpha: RGBA. */
    uint8_t ga[6 * 4 * 2];
    for (size_t i = 0; i < w * h; i++) {
        ga[2 * i] = (uint8_t)(i * 7);
        ga[2 * i + 1] = (uint8_t)(255 - i);
    }
    png = write_png(w, h, 8, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_INTERLACE_NONE, ga, 12, NULL, 0, NULL,
                    0, &size);
    cr_assert_eq(dlc_png_decode(codec, png, size, &out), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(out.channels, 4);
    cr_assert(out.data[4 * 3] == 21 && out.data[4 * 3 + 2] == 21 && out.data[4 * 3 + 3] == 252);
    free(png);

    /* 1-bit gray: expanded to 0 and 255; interlaced RGB: the same pixels as not interlaced. */
    const uint8_t bits[4] = {0xa0, 0x50, 0xff, 0x00};
    png = write_png(w, h, 1, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE, bits, 1, NULL, 0, NULL, 0,
                    &size);
    cr_assert_eq(dlc_png_decode(codec, png, size, &out), DLC_OK, "%s", dlc_errmsg());
    cr_assert(out.channels == 1 && out.data[0] == 255 && out.data[1] == 0 && out.data[2] == 255);
    free(png);
    uint8_t *rgb = pattern(w, h, 3, 9);
    png = write_png(w, h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_ADAM7, rgb, 18, NULL, 0, NULL, 0,
                    &size);
    cr_assert_eq(dlc_png_decode(codec, png, size, &out), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(memcmp(out.data, rgb, w * h * 3), 0, "interlaced");
    free(png);
    free(rgb);
}

Test(image_png, damaged_input_is_edecode)
{
    uint8_t *px = pattern(40, 30, 3, 1);
    const dlc_image img = {px, 40, 30, 3, 120};
    const uint8_t *enc;
    size_t size;
    cr_assert_eq(dlc_png_encode(codec, &img, &enc, &size), DLC_OK);
    uint8_t *png = malloc(size);
    memcpy(png, enc, size);
    dlc_image out;
    cr_assert_eq(dlc_png_decode(codec, png, 5, &out), DLC_EDECODE);
    cr_assert(strstr(dlc_errmsg(), "not a PNG"), "%s", dlc_errmsg());
    for (size_t cut = 8; cut < size; cut += 97) {
        cr_assert_eq(dlc_png_decode(codec, png, cut, &out), DLC_EDECODE, "cut at %zu", cut);
        cr_assert(strstr(dlc_errmsg(), "PNG"), "%s", dlc_errmsg());
    }
    /* A flipped byte in the image data fails its CRC. */
    png[size / 2] ^= 0x10;
    cr_assert_eq(dlc_png_decode(codec, png, size, &out), DLC_EDECODE);
    png[size / 2] ^= 0x10;
    /* A header claiming 2^31 x 2^31 pixels is refused before any allocation. */
    uint8_t *big = malloc(size);
    memcpy(big, png, size);
    big[16] = 0x7f;
    big[20] = 0x7f;
    cr_assert_eq(dlc_png_info(codec, big, size, NULL, NULL, NULL), DLC_EDECODE);
    free(big);
    /* The codec still works. */
    cr_assert_eq(dlc_png_decode(codec, png, size, &out), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(memcmp(out.data, px, 40 * 30 * 3), 0);
    const dlc_image two = {px, 4, 4, 2, 8};
    cr_assert_eq(dlc_png_encode(codec, &two, &enc, &size), DLC_EINVAL);
    const dlc_image bad = {px, 4, 4, 3, 8};
    cr_assert_eq(dlc_png_encode(codec, &bad, &enc, &size), DLC_EINVAL);
    cr_assert_eq(dlc_png_decode(codec, NULL, 10, &out), DLC_EINVAL);
    free(png);
    free(px);
}

/* A palette mask (Pascal VOC's kind) gives its indices, the class ids, in one channel, also
 * from 4-bit palettes and with transparency; other PNGs decode as dlc_png_decode() does. */
Test(image_png, palette_masks_give_their_indices)
{
    const uint32_t w = 6, h = 4;
    size_t size;
    dlc_image out;
    png_color pal[16];
    for (int i = 0; i < 16; i++)
        pal[i] = (png_color){(png_byte)(i * 16), (png_byte)(255 - i), 7};
    uint8_t idx[6 * 4], packed[3 * 4];
    for (size_t i = 0; i < w * h; i++)
        idx[i] = (uint8_t)((i * 5) % 16);
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < w; x += 2)
            packed[y * 3 + x / 2] = (uint8_t)(idx[y * w + x] << 4 | idx[y * w + x + 1]);
    const uint8_t alpha[2] = {0, 200};
    for (int form = 0; form < 3; form++) {
        uint8_t *png = form == 0   ? write_png(w, h, 8, PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_NONE,
                                               idx, 6, pal, 16, NULL, 0, &size)
                       : form == 1 ? write_png(w, h, 4, PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_NONE,
                                               packed, 3, pal, 16, NULL, 0, &size)
                                   : write_png(w, h, 8, PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_ADAM7,
                                               idx, 6, pal, 16, alpha, 2, &size);
        cr_assert_eq(dlc_png_decode_ids(codec, png, size, &out), DLC_OK, "%s", dlc_errmsg());
        cr_assert(out.channels == 1 && out.width == w && out.height == h);
        for (size_t i = 0; i < w * h; i++)
            cr_assert_eq(out.data[(i / w) * out.stride + i % w], idx[i], "form %d pixel %zu", form,
                         i);
        free(png);
    }
    uint8_t *rgb = pattern(w, h, 3, 5);
    uint8_t *png = write_png(w, h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, rgb, 18, NULL, 0,
                             NULL, 0, &size);
    cr_assert_eq(dlc_png_decode_ids(codec, png, size, &out), DLC_OK);
    cr_assert(out.channels == 3 && memcmp(out.data, rgb, w * h * 3) == 0);
    free(png);
    free(rgb);
}
