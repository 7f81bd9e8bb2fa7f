/* Tests of the JPEG codec and the builder's decode + resize + crop
 * (cache/image/image_codec.c), on JPEGs made here with TurboJPEG and on a real
 * photograph from mate-backgrounds. */
#include <dlcache/image.h>

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#define PHOTO "/usr/share/backgrounds/mate/nature/Garden.jpg"

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

TestSuite(image_codec, .init = setup, .fini = teardown);

/* Smooth colour gradients with a little texture: compresses well and
 * survives JPEG with a high PSNR. */
static uint8_t *gradient(uint32_t w, uint32_t h, uint32_t ch)
{
    uint8_t *p = malloc((size_t)w * h * ch);
    cr_assert_not_null(p);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (uint32_t c = 0; c < ch; c++)
                p[((size_t)y * w + x) * ch + c] =
                    (uint8_t)((x * 255 / w) * (c == 0) + (y * 255 / h) * (c == 1) +
                              ((x + y) * 127 / (w + h)) * (c >= 2) + 40 * (c == 3));
    return p;
}

/* Pixels a JPEG cannot compress: a truncated copy misses real data. */
static uint8_t *noise(uint32_t w, uint32_t h)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    cr_assert_not_null(p);
    uint32_t s = 12345;
    for (size_t i = 0; i < (size_t)w * h * 3; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (uint8_t)(s >> 24);
    }
    return p;
}

/* Compress with TurboJPEG directly (not through the code under test). */
static unsigned char *tj_encode(const uint8_t *pix, uint32_t w, uint32_t h, int pf, int subsamp,
                                int quality, unsigned long *size)
{
    tjhandle t = tjInitCompress();
    cr_assert_not_null(t);
    unsigned char *jpeg = NULL;
    *size = 0;
    cr_assert_eq(tjCompress2(t, pix, (int)w, 0, (int)h, pf, &jpeg, size, subsamp, quality, 0), 0,
                 "%s", tjGetErrorStr2(t));
    tjDestroy(t);
    return jpeg;
}

static double psnr(const uint8_t *a, size_t a_stride, const uint8_t *b, size_t b_stride, uint32_t w,
                   uint32_t h, uint32_t ch)
{
    double sse = 0;
    for (uint32_t y = 0; y < h; y++)
        for (size_t i = 0; i < (size_t)w * ch; i++) {
            const double d = (double)a[y * a_stride + i] - b[y * b_stride + i];
            sse += d * d;
        }
    if (sse == 0)
        return INFINITY;
    return 10 * log10(255.0 * 255.0 * w * h * ch / sse);
}

static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)n);
    cr_assert_not_null(p);
    cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return p;
}

Test(image_codec, encode_then_decode)
{
    uint8_t *pix = gradient(64, 48, 3);
    const dlc_image img = {pix, 64, 48, 3, 64 * 3};
    const uint8_t *jpeg;
    size_t size;
    cr_assert_eq(dlc_jpeg_encode(codec, &img, 95, &jpeg, &size), DLC_OK, "%s", dlc_errmsg());
    cr_assert_gt(size, 100);
    /* The encoded bytes live in the codec; decoding reads them in place. */
    uint8_t *copy = malloc(size);
    memcpy(copy, jpeg, size);
    uint32_t w = 0, h = 0;
    cr_assert_eq(dlc_jpeg_info(codec, copy, size, &w, &h), DLC_OK);
    cr_assert_eq(w, 64);
    cr_assert_eq(h, 48);
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode(codec, copy, size, 0, 0, &out), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(out.width, 64);
    cr_assert_eq(out.height, 48);
    cr_assert_eq(out.channels, 3);
    const double p = psnr(out.data, out.stride, pix, 64 * 3, 64, 48, 3);
    cr_assert_gt(p, 35.0, "PSNR %.2f dB", p);
    /* A second decode of the same size reuses the buffer. */
    const uint8_t *first = out.data;
    cr_assert_eq(dlc_jpeg_decode(codec, copy, size, 0, 0, &out), DLC_OK);
    cr_assert_eq(out.data, first);
    free(copy);
    free(pix);
}

Test(image_codec, decodes_what_turbojpeg_encodes)
{
    uint8_t *pix = gradient(120, 80, 3);
    unsigned long size;
    unsigned char *jpeg = tj_encode(pix, 120, 80, TJPF_RGB, TJSAMP_420, 90, &size);
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, 0, 0, &out), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(out.width, 120);
    cr_assert_eq(out.height, 80);
    const double p = psnr(out.data, out.stride, pix, 120 * 3, 120, 80, 3);
    cr_assert_gt(p, 30.0, "PSNR %.2f dB", p);
    tjFree(jpeg);
    free(pix);
}

Test(image_codec, grayscale_becomes_rgb)
{
    uint8_t *gray = gradient(50, 40, 1);
    unsigned long size;
    unsigned char *jpeg = tj_encode(gray, 50, 40, TJPF_GRAY, TJSAMP_GRAY, 95, &size);
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, 0, 0, &out), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(out.channels, 3);
    for (size_t i = 0; i < 50 * 40; i++) {
        const uint8_t *p = out.data + 3 * i;
        cr_assert(p[0] == p[1] && p[1] == p[2], "pixel %zu is not gray", i);
        cr_assert_leq(abs((int)p[0] - gray[i]), 6, "pixel %zu: %d vs %d", i, p[0], gray[i]);
    }
    tjFree(jpeg);
    free(gray);
}

/* Pillow reads CMYK JPEGs as Adobe-inverted (stored = 255 - ink) and
 * converts with R = (255 - K) - C (255 - K) / 255; for stored values
 * (C, M, Y, K) = (200, 100, 50, 180) that is (141, 71, 35). */
Test(image_codec, cmyk_becomes_rgb_like_pillow)
{
    const uint32_t w = 32, h = 24;
    uint8_t *cmyk = malloc((size_t)w * h * 4);
    for (size_t i = 0; i < (size_t)w * h; i++) {
        cmyk[4 * i + 0] = 200;
        cmyk[4 * i + 1] = 100;
        cmyk[4 * i + 2] = 50;
        cmyk[4 * i + 3] = 180;
    }
    unsigned long size;
    unsigned char *jpeg = tj_encode(cmyk, w, h, TJPF_CMYK, TJSAMP_444, 100, &size);
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, 0, 0, &out), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(out.width, w);
    cr_assert_eq(out.channels, 3);
    static const int want[3] = {141, 71, 35};
    for (size_t i = 0; i < (size_t)w * h; i++)
        for (int c = 0; c < 3; c++)
            cr_assert_leq(abs((int)out.data[3 * i + c] - want[c]), 2, "pixel %zu channel %d: %d", i,
                          c, out.data[3 * i + c]);
    tjFree(jpeg);
    free(cmyk);
}

Test(image_codec, truncated_is_edecode)
{
    uint8_t *pix = noise(256, 256);
    unsigned long size;
    unsigned char *jpeg = tj_encode(pix, 256, 256, TJPF_RGB, TJSAMP_444, 90, &size);
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, 0, 0, &out), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size / 2, 0, 0, &out), DLC_EDECODE);
    cr_assert(strstr(dlc_errmsg(), "remature end") != NULL, "message: %s", dlc_errmsg());
    cr_assert_eq(dlc_jpeg_decode_resize(codec, jpeg, size - 10, 64, 1, &out), DLC_EDECODE);
    /* Cut inside the headers: even the size cannot be read. */
    cr_assert_eq(dlc_jpeg_info(codec, jpeg, 20, NULL, NULL), DLC_EDECODE);
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, 20, 0, 0, &out), DLC_EDECODE);
    tjFree(jpeg);
    free(pix);
}

Test(image_codec, garbage_is_edecode)
{
    uint8_t *junk = noise(100, 10);
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode(codec, junk, 3000, 0, 0, &out), DLC_EDECODE);
    cr_assert_str_not_empty(dlc_errmsg());
    cr_assert_eq(dlc_jpeg_info(codec, junk, 3000, NULL, NULL), DLC_EDECODE);
    cr_assert_eq(dlc_jpeg_decode_resize(codec, junk, 3000, 256, 1, &out), DLC_EDECODE);
    /* A JPEG signature followed by garbage. */
    junk[0] = 0xff;
    junk[1] = 0xd8;
    junk[2] = 0xff;
    cr_assert_eq(dlc_jpeg_decode(codec, junk, 3000, 0, 0, &out), DLC_EDECODE);
    cr_assert_eq(dlc_jpeg_decode(codec, junk, 0, 0, 0, &out), DLC_EDECODE);
    free(junk);
}

/* The offset of the first segment with marker @p m (0xda: SOS, 0xc0: SOF0) in @p jpeg. */
static size_t find_marker(const unsigned char *jpeg, unsigned long size, unsigned char m)
{
    for (size_t i = 2; i + 4 < size;) {
        cr_assert_eq(jpeg[i], 0xff);
        if (jpeg[i + 1] == m)
            return i;
        i += 2 + (((size_t)jpeg[i + 2] << 8) | jpeg[i + 3]);
    }
    cr_assert_fail("no marker 0x%02x", m);
    return 0;
}

/* The first SOS's entropy-coded data starts after its header: its offset in @p jpeg. */
static size_t scan_start(const unsigned char *jpeg, unsigned long size)
{
    const size_t sos = find_marker(jpeg, size, 0xda);
    return sos + 2 + (((size_t)jpeg[sos + 2] << 8) | jpeg[sos + 3]);
}

/* Damaged entropy data (bytes flipped through the scan) makes libjpeg-turbo warn ("Corrupt JPEG
 * data: bad Huffman code", an unknown marker) and decode on into garbage, and such an image was
 * stored as if whole: only warnings that leave every pixel decoded pass now. (JPEG has no
 * checksum: damage that decodes as valid codes cannot be told from an image.) */
Test(image_codec, damaged_entropy_data_is_edecode)
{
    uint8_t *pix = noise(128, 128);
    unsigned long size;
    unsigned char *jpeg = tj_encode(pix, 128, 128, TJPF_RGB, TJSAMP_444, 90, &size);
    for (size_t k = scan_start(jpeg, size) + 50; k + 10 < size; k += 97)
        jpeg[k] ^= 0x55;
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, 0, 0, &out), DLC_EDECODE, "decoded as whole");
    cr_assert(strstr(dlc_errmsg(), "JPEG decode") != NULL, "message: %s", dlc_errmsg());
    tjFree(jpeg);
    free(pix);
}

/* A header claiming more blocks than the file could code is refused before any decode: a
 * progressive decode holds every block's coefficients, and a 213-byte file claiming
 * 13370 x 13370 took 1.4 GB. */
Test(image_codec, a_size_the_data_cannot_hold_is_refused_at_the_header)
{
    uint8_t *pix = gradient(16, 16, 3);
    unsigned long size;
    unsigned char *jpeg = tj_encode(pix, 16, 16, TJPF_RGB, TJSAMP_444, 90, &size);
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, 0, 0, &out), DLC_OK, "%s", dlc_errmsg());
    const size_t sof = find_marker(jpeg, size, 0xc0);
    jpeg[sof + 5] = 4000 >> 8, jpeg[sof + 6] = 4000 & 0xff; /* height */
    jpeg[sof + 7] = 4000 >> 8, jpeg[sof + 8] = 4000 & 0xff; /* width */
    uint32_t w = 0, h = 0;
    cr_assert_eq(dlc_jpeg_info(codec, jpeg, size, &w, &h), DLC_EDECODE);
    cr_assert(strstr(dlc_errmsg(), "4000x4000 (height x width) needs at least 31250 bytes"),
              "message: %s", dlc_errmsg());
    cr_assert_eq(dlc_jpeg_decode_resize(codec, jpeg, size, 64, 1, &out), DLC_EDECODE);
    tjFree(jpeg);
    free(pix);
}

Test(image_codec, dct_scaling_picks_the_largest_reduction)
{
    uint8_t *pix = gradient(800, 600, 3);
    unsigned long size;
    unsigned char *jpeg = tj_encode(pix, 800, 600, TJPF_RGB, TJSAMP_420, 85, &size);
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, 200, 150, &out), DLC_OK);
    cr_assert_eq(out.width, 200);
    cr_assert_eq(out.height, 150);
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, 201, 150, &out), DLC_OK);
    cr_assert_eq(out.width, 400);
    cr_assert_eq(out.height, 300);
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, 10, 0, &out), DLC_OK);
    cr_assert_eq(out.width, 100);
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, 5000, 10, &out), DLC_OK);
    cr_assert_eq(out.width, 800);
    tjFree(jpeg);
    free(pix);
}

static void check_resized_size(uint32_t w, uint32_t h, uint32_t n, uint32_t want_w, uint32_t want_h)
{
    uint8_t *pix = gradient(w, h, 3);
    unsigned long size;
    unsigned char *jpeg = tj_encode(pix, w, h, TJPF_RGB, TJSAMP_420, 85, &size);
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode_resize(codec, jpeg, size, n, 0, &out), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(out.width, want_w, "%ux%u -> Resize(%u): width %u, want %u", w, h, n, out.width,
                 want_w);
    cr_assert_eq(out.height, want_h, "%ux%u -> Resize(%u): height %u, want %u", w, h, n, out.height,
                 want_h);
    cr_assert_eq(dlc_jpeg_decode_resize(codec, jpeg, size, n, 1, &out), DLC_OK);
    cr_assert_eq(out.width, want_w < n ? want_w : n);
    cr_assert_eq(out.height, want_h < n ? want_h : n);
    tjFree(jpeg);
    free(pix);
}

/* torchvision: shorter side N, longer side int(N * long / short). */
Test(image_codec, resized_sizes_follow_torchvision)
{
    check_resized_size(300, 500, 256, 256, 426);  /* portrait: 426.67 truncated */
    check_resized_size(500, 300, 256, 426, 256);  /* landscape */
    check_resized_size(257, 1000, 256, 256, 996); /* 996.1 */
    check_resized_size(400, 400, 256, 256, 256);
    check_resized_size(100, 150, 256, 256, 384); /* upscale */
    check_resized_size(256, 300, 256, 256, 300); /* unchanged size */
}

/* CenterCrop's offset is int(round((w - N) / 2.0)) with Python's half to
 * even: 501x300 resizes to 427x256, (427 - 256) / 2 = 85.5 -> 86;
 * 499x300 -> 425x256, 84.5 -> 84. */
static void check_center_offset(uint32_t w, uint32_t h, uint32_t want_x)
{
    uint8_t *pix = noise(w, h);
    unsigned long size;
    unsigned char *jpeg = tj_encode(pix, w, h, TJPF_RGB, TJSAMP_444, 90, &size);
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode_resize(codec, jpeg, size, 256, 0, &out), DLC_OK);
    const size_t stride = out.stride;
    uint8_t *whole = malloc(stride * out.height);
    memcpy(whole, out.data, stride * out.height);
    cr_assert_eq(dlc_jpeg_decode_resize(codec, jpeg, size, 256, 1, &out), DLC_OK);
    cr_assert_eq(out.width, 256);
    cr_assert_eq(out.height, 256);
    for (uint32_t y = 0; y < 256; y++)
        cr_assert_arr_eq(out.data + y * out.stride, whole + y * stride + want_x * 3, 256 * 3,
                         "%ux%u: row %u is not the crop at x = %u", w, h, y, want_x);
    free(whole);
    tjFree(jpeg);
    free(pix);
}

Test(image_codec, center_crop_rounds_half_to_even)
{
    check_center_offset(501, 300, 86);
    check_center_offset(499, 300, 84);
}

Test(image_codec, decode_resize_rejects_zero_size)
{
    uint8_t *pix = gradient(40, 30, 3);
    unsigned long size;
    unsigned char *jpeg = tj_encode(pix, 40, 30, TJPF_RGB, TJSAMP_420, 85, &size);
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode_resize(codec, jpeg, size, 0, 1, &out), DLC_EINVAL);
    tjFree(jpeg);
    free(pix);
}

/* decode_resize of @p w x @p h to a short side of 256 equals a decode at
 * the DCT scale whose minimum size is @p min_w x @p min_h (0, 0: full size)
 * followed by dlc_resize, pixel for pixel: that pins which scale the
 * builder's rule picks. */
static void check_scale_rule(uint32_t w, uint32_t h, uint32_t min_w, uint32_t min_h,
                             uint32_t want_dec_w)
{
    uint8_t *pix = noise(w, h);
    unsigned long size;
    unsigned char *jpeg = tj_encode(pix, w, h, TJPF_RGB, TJSAMP_420, 90, &size);
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode_resize(codec, jpeg, size, 256, 0, &out), DLC_OK, "%s",
                 dlc_errmsg());
    const uint32_t ow = out.width, oh = out.height;
    const size_t stride = out.stride;
    uint8_t *got = malloc(stride * oh);
    memcpy(got, out.data, stride * oh);
    dlc_image dec;
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, min_w, min_h, &dec), DLC_OK);
    cr_assert_eq(dec.width, want_dec_w, "%ux%u: decoded at width %u, want %u", w, h, dec.width,
                 want_dec_w);
    uint8_t *ref = malloc((size_t)ow * oh * 3);
    const dlc_image dst = {ref, ow, oh, 3, (size_t)ow * 3};
    const size_t n = dlc_resize_scratch_bound(dec.width, dec.height, ow, oh, 3);
    void *scratch = aligned_alloc(64, (n + 63) & ~(size_t)63);
    cr_assert_eq(dlc_resize(&dec, 0, 0, dec.width, dec.height, &dst, scratch, n), DLC_OK);
    for (uint32_t y = 0; y < oh; y++)
        cr_assert_arr_eq(got + y * stride, ref + (size_t)y * dst.stride, (size_t)ow * 3,
                         "%ux%u: row %u differs from decode at width %u + resize", w, h, y,
                         want_dec_w);
    free(scratch);
    free(ref);
    free(got);
    tjFree(jpeg);
    free(pix);
}

/* DCT scaling applies when the image is at least twice the resize target
 * on both axes, and then keeps the decode at least as large as the target. */
Test(image_codec, dct_scaling_rule_of_decode_resize)
{
    check_scale_rule(800, 600, 341, 256, 400);    /* 2.3x: 1/2 -> 400x300 */
    check_scale_rule(2100, 1100, 488, 256, 525);  /* 4.3x: 1/4 -> 525x275 */
    check_scale_rule(2200, 2100, 268, 256, 275);  /* 8.2x: 1/8 -> 275x263 */
    check_scale_rule(2000, 1000, 512, 256, 1000); /* 3.9x: 1/4 = 500 < 512, 1/2 */
    check_scale_rule(600, 500, 0, 0, 600);        /* 1.95x: full size */
    check_scale_rule(1024, 511, 0, 0, 1024);      /* 2x wide, 1.996x high: full size */
}

/* The DCT-scaled path (decode at 1/2 or 1/4, then resize) against a full
 * decode followed by the same resize, on a real photograph. */
Test(image_codec, dct_scaled_path_is_close_to_full_decode)
{
    size_t size;
    uint8_t *jpeg = slurp(PHOTO, &size);
    if (!jpeg)
        cr_skip_test("%s is missing (install mate-backgrounds)", PHOTO);
    uint32_t w, h;
    cr_assert_eq(dlc_jpeg_info(codec, jpeg, size, &w, &h), DLC_OK);
    dlc_image out;
    cr_assert_eq(dlc_jpeg_decode_resize(codec, jpeg, size, 256, 0, &out), DLC_OK, "%s",
                 dlc_errmsg());
    cr_assert_eq(out.height, 256);
    cr_assert_eq(out.width, (uint32_t)(256.0 * w / h));
    const size_t stride = out.stride;
    uint8_t *scaled = malloc(stride * out.height);
    memcpy(scaled, out.data, stride * out.height);
    const uint32_t ow = out.width, oh = out.height;
    /* The photo is at least 4x the target, so the scaled path did reduce. */
    cr_assert_geq(w, 4 * ow);

    dlc_image full;
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, 0, 0, &full), DLC_OK);
    cr_assert_eq(full.width, w);
    uint8_t *ref = malloc((size_t)ow * oh * 3);
    const dlc_image dst = {ref, ow, oh, 3, (size_t)ow * 3};
    const size_t n = dlc_resize_scratch_bound(w, h, ow, oh, 3);
    void *scratch = aligned_alloc(64, (n + 63) & ~(size_t)63);
    cr_assert_eq(dlc_resize(&full, 0, 0, w, h, &dst, scratch, n), DLC_OK, "%s", dlc_errmsg());
    const double p = psnr(scaled, stride, ref, dst.stride, ow, oh, 3);
    cr_log_info("DCT-scaled decode_resize vs full decode + resize: %.2f dB", p);
    cr_assert_gt(p, 40.0, "PSNR %.2f dB", p);
    free(scratch);
    free(ref);
    free(scaled);
    free(jpeg);
}

Test(image_codec, encode_rejects_bad_arguments)
{
    uint8_t pix[12] = {0};
    const uint8_t *jpeg;
    size_t size;
    dlc_image img = {pix, 2, 2, 3, 6};
    cr_assert_eq(dlc_jpeg_encode(codec, &img, 0, &jpeg, &size), DLC_EINVAL);
    cr_assert_eq(dlc_jpeg_encode(codec, &img, 101, &jpeg, &size), DLC_EINVAL);
    img.channels = 2;
    cr_assert_eq(dlc_jpeg_encode(codec, &img, 90, &jpeg, &size), DLC_EINVAL);
    img.channels = 3;
    img.stride = 3;
    cr_assert_eq(dlc_jpeg_encode(codec, &img, 90, &jpeg, &size), DLC_EINVAL);
    dlc_codec_destroy(NULL);
}

/* A JPEG cut inside its Huffman tables fails at the header, and must not break the codec for
 * the JPEGs after it (libjpeg-turbo 2.1 leaves its decompressor inside the marker reader: every
 * later header failed with "Bogus Huffman table definition", so a builder worker skipped every
 * file after one bad one). Every cut of the first 400 bytes is tried. */
Test(image_codec, a_bad_header_does_not_break_the_codec)
{
    uint8_t *pix = gradient(48, 32, 3);
    unsigned long size;
    unsigned char *jpeg = tj_encode(pix, 48, 32, TJPF_RGB, TJSAMP_420, 90, &size);
    int refused = 0;
    for (unsigned long cut = 1; cut < 400 && cut < size; cut++) {
        uint32_t w = 0, h = 0;
        refused += dlc_jpeg_info(codec, jpeg, cut, &w, &h) != DLC_OK;
        cr_assert_eq(dlc_jpeg_info(codec, jpeg, size, &w, &h), DLC_OK, "after a cut at %lu: %s",
                     cut, dlc_errmsg());
        cr_assert(w == 48 && h == 32);
        dlc_image out;
        cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, 0, 0, &out), DLC_OK,
                     "after a cut at %lu: %s", cut, dlc_errmsg());
    }
    cr_assert_gt(refused, 0);
    tjFree(jpeg);
    free(pix);
}

/* One channel: a grayscale JPEG's own samples, the Y of a YCbCr one, Pillow's L of RGB. */
Test(image_codec, decodes_to_one_channel)
{
    uint8_t *gray = gradient(50, 40, 1);
    unsigned long size;
    unsigned char *jpeg = tj_encode(gray, 50, 40, TJPF_GRAY, TJSAMP_GRAY, 95, &size);
    uint32_t w, h, comps;
    cr_assert_eq(dlc_jpeg_header(codec, jpeg, size, &w, &h, &comps), DLC_OK);
    cr_assert(w == 50 && h == 40 && comps == 1);
    dlc_image g1, g3;
    cr_assert_eq(dlc_jpeg_decode_as(codec, jpeg, size, 1, 0, 0, &g1), DLC_OK, "%s", dlc_errmsg());
    cr_assert(g1.channels == 1 && g1.stride == 50 && g1.width == 50 && g1.height == 40);
    uint8_t *keep = malloc(50 * 40);
    memcpy(keep, g1.data, 50 * 40);
    cr_assert_eq(dlc_jpeg_decode(codec, jpeg, size, 0, 0, &g3), DLC_OK);
    for (size_t i = 0; i < 50 * 40; i++)
        cr_assert_eq(keep[i], g3.data[3 * i], "pixel %zu: gray is the replicated sample", i);
    tjFree(jpeg);

    uint8_t *rgb = gradient(64, 48, 3);
    jpeg = tj_encode(rgb, 64, 48, TJPF_RGB, TJSAMP_444, 98, &size);
    cr_assert_eq(dlc_jpeg_header(codec, jpeg, size, NULL, NULL, &comps), DLC_OK);
    cr_assert_eq(comps, 3);
    cr_assert_eq(dlc_jpeg_decode_as(codec, jpeg, size, 1, 0, 0, &g1), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(g1.channels, 1);
    for (size_t i = 0; i < 64 * 48; i++) {
        const uint8_t *p = rgb + 3 * i;
        const int l = (p[0] * 299 + p[1] * 587 + p[2] * 114 + 500) / 1000;
        cr_assert_leq(abs((int)g1.data[i] - l), 3, "pixel %zu: %d vs L %d", i, g1.data[i], l);
    }
    dlc_image r1;
    cr_assert_eq(dlc_jpeg_decode_resize_as(codec, jpeg, size, 1, 24, 1, &r1), DLC_OK, "%s",
                 dlc_errmsg());
    cr_assert(r1.channels == 1 && r1.width == 24 && r1.height == 24 && r1.stride == 24);
    cr_assert_eq(dlc_jpeg_decode_as(codec, jpeg, size, 4, 0, 0, &g1), DLC_EINVAL);
    cr_assert_eq(dlc_jpeg_decode_resize_as(codec, jpeg, size, 2, 24, 1, &r1), DLC_EINVAL);
    free(keep);
    free(rgb);
    free(gray);
    tjFree(jpeg);
}
