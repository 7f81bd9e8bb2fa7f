/* Helpers shared by the builder's unit tests (test_build_*.c, test_source_*.c):
 * temporary directories, small files, real JPEGs made with dlcache's encoder.
 * Header-only, so each test program stays one file. */
#ifndef DLCACHE_TEST_BUILD_UTIL_H
#define DLCACHE_TEST_BUILD_UTIL_H

#include <dlcache/image.h>

#include "tmpdir_util.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline void btu_write(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f != NULL, "cannot create %s", path);
    cr_assert(fwrite(data, 1, size, f) == size);
    cr_assert(fclose(f) == 0);
}

static inline void btu_write_str(const char *path, const char *text)
{
    btu_write(path, text, strlen(text));
}

static inline void btu_mkdir(const char *dir, const char *name)
{
    char *p = tmp_path(dir, name);
    cr_assert(mkdir(p, 0755) == 0, "mkdir %s", p);
    free(p);
}

/* Encode a w x h image of @p channels (1: a grayscale JPEG, 3: colour) whose content depends on
 * @p seed as a JPEG at dir/name. */
static inline void btu_jpeg_channels(const char *dir, const char *name, uint32_t w, uint32_t h,
                                     unsigned seed, uint32_t channels)
{
    dlc_codec *c = NULL;
    cr_assert(dlc_codec_create(&c) == DLC_OK);
    uint8_t *px = malloc((size_t)w * h * channels);
    cr_assert(px != NULL);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (uint32_t k = 0; k < channels; k++)
                px[((size_t)y * w + x) * channels + k] = (uint8_t)(x * 3 + y * 5 + k * 70 + seed);
    const dlc_image img = {
        .data = px, .width = w, .height = h, .channels = channels, .stride = (size_t)w * channels};
    const uint8_t *jpeg;
    size_t size;
    cr_assert(dlc_jpeg_encode(c, &img, 90, &jpeg, &size) == DLC_OK);
    char *path = tmp_path(dir, name);
    btu_write(path, jpeg, size);
    free(path);
    free(px);
    dlc_codec_destroy(c);
}

/* Write @p img as a PNG at dir/name. */
static inline void btu_png(const char *dir, const char *name, const dlc_image *img)
{
    dlc_codec *c = NULL;
    cr_assert(dlc_codec_create(&c) == DLC_OK);
    const uint8_t *png;
    size_t size;
    cr_assert(dlc_png_encode(c, img, &png, &size) == DLC_OK, "%s", dlc_errmsg());
    char *path = tmp_path(dir, name);
    btu_write(path, png, size);
    free(path);
    dlc_codec_destroy(c);
}

/* Encode a w x h image whose content depends on @p seed as a JPEG at
 * dir/name. Real JPEG bytes: the builder decodes them with libjpeg-turbo. */
static inline void btu_jpeg(const char *dir, const char *name, uint32_t w, uint32_t h,
                            unsigned seed)
{
    dlc_codec *c = NULL;
    cr_assert(dlc_codec_create(&c) == DLC_OK);
    uint8_t *px = malloc((size_t)w * h * 3);
    cr_assert(px != NULL);
    uint32_t r = seed * 2654435761u + 1;
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            r = r * 1664525u + 1013904223u;
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(x * 255 / (w ? w : 1) + seed * 40);
            p[1] = (uint8_t)(y * 255 / (h ? h : 1) ^ (seed * 17));
            p[2] = (uint8_t)(r >> 24);
        }
    const dlc_image img = {
        .data = px, .width = w, .height = h, .channels = 3, .stride = (size_t)w * 3};
    const uint8_t *jpeg;
    size_t size;
    cr_assert(dlc_jpeg_encode(c, &img, 90, &jpeg, &size) == DLC_OK);
    char *path = tmp_path(dir, name);
    btu_write(path, jpeg, size);
    free(path);
    free(px);
    dlc_codec_destroy(c);
}

static inline int btu_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

#endif /* DLCACHE_TEST_BUILD_UTIL_H */
