/* Fuzz the JPEG ingest (cache/image/image_codec.c, cache/image/image_resize.c): the
 * input is a whole file as cachebuild would read it. It goes through
 * dlc_jpeg_info() and the builder's heavy transform dlc_jpeg_decode_resize()
 * (decode with DCT scaling, antialiased resize, center crop), with a target
 * size and crop flag taken from the input's length so that the same bytes
 * meet several sizes across the corpus. One codec serves every input, as one
 * builder thread's codec serves every file: its scratch buffers must survive
 * any sequence of good and bad images. */
#include "fuzz_util.h"

#include <dlcache/image.h>

static dlc_codec *codec;

/* Seeds: small JPEGs made by our own encoder from a real photo (4:2:0 and
 * 4:4:4, landscape and portrait), so the fuzzer starts from files that
 * decode and mutates their markers and entropy data. */
static void write_seeds(const char *dir)
{
    static const char photo[] = "/usr/share/backgrounds/mate/nature/Aqua.jpg";
    FILE *f = fopen(photo, "rb");
    if (!f)
        return; /* No photo on this machine: the committed seeds must do. */
    static uint8_t src[4u << 20];
    const size_t n = fread(src, 1, sizeof src, f);
    fclose(f);
    dlc_image img;
    if (dlc_jpeg_decode_resize(codec, src, n, 24, 0, &img) != DLC_OK)
        abort();
    /* Keep the pixels: encoding reuses the codec's scratch. */
    const size_t bytes = img.stride * img.height;
    uint8_t *px = malloc(bytes);
    memcpy(px, img.data, bytes);
    img.data = px;
    static const int quality[] = {40, 95};
    for (int q = 0; q < 2; q++) {
        for (int portrait = 0; portrait < 2; portrait++) {
            dlc_image v = img;
            if (portrait) { /* The left 16 columns: taller than wide. */
                v.width = 16;
            }
            const uint8_t *jpeg = NULL;
            size_t size = 0;
            if (dlc_jpeg_encode(codec, &v, quality[q], &jpeg, &size) != DLC_OK)
                abort();
            char path[1024];
            snprintf(path, sizeof path, "%s/q%d%s.jpg", dir, quality[q], portrait ? "p" : "l");
            fz_write_file(path, jpeg, size);
        }
    }
    free(px);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (dlc_codec_create(&codec) != DLC_OK)
        abort();
    const char *dir = getenv("DLC_FUZZ_SEED_DIR");
    if (dir)
        write_seeds(dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t sides[] = {1, 7, 16, 32, 64, 257};
    uint32_t w = 0, h = 0;
    dlc_status rc = dlc_jpeg_info(codec, data, size, &w, &h);
    if (rc < 0 && dlc_errmsg()[0] == '\0')
        abort();
    if (rc != DLC_OK)
        return 0;
    dlc_image img;
    const uint32_t side = sides[size % (sizeof sides / sizeof sides[0])];
    const int crop = (int)(size / 6 % 2);
    rc = dlc_jpeg_decode_resize(codec, data, size, side, crop, &img);
    if (rc < 0 && dlc_errmsg()[0] == '\0')
        abort();
    if (rc == DLC_OK) {
        /* The result must be the size asked for and every byte readable. */
        if (img.channels != 3 || (img.width != side && img.height != side))
            abort();
        if (crop && (img.width != side || img.height != side))
            abort();
        uint64_t sum = 0;
        for (uint32_t y = 0; y < img.height; y++)
            sum += img.data[(size_t)y * img.stride + (size_t)img.width * 3 - 1];
        volatile uint64_t sink = sum;
        (void)sink;
    }
    return 0;
}
