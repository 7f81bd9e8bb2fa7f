/* The loader on records with many fields: every kind and layout of output, joint augmentation of
 * images, masks and boxes checked pixel by pixel, view groups, 1/3/4 channels, and the loader's
 * promises (bytes independent of threads and prefetch, selection independent of other fields,
 * direct I/O, corrupt-record replacement) for every field.
 *
 * The stores are real: written with the public writer (include/dlcache/writer.h). Their images
 * encode the coordinates of each pixel (R = x, G = y), and their masks hold (x, y, class(x, y)):
 * after any crop, resize or flip, what the image says about where a pixel came from must agree
 * with what the mask says. dlc-test-label: threads */
#include "augment.h"
#include "test_util.h"

#include <criterion/criterion.h>
#include <dlcache/loader.h>
#include <dlcache/writer.h>

#include <fcntl.h>
#include <lmdb.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define N 40u
#define H 48u
#define W 64u

/* The class a mask holds at (x, y): regions 16 pixels wide, changing along both axes. */
static uint8_t region(uint32_t x, uint32_t y)
{
    return (uint8_t)((x / 16 + 3 * (y / 16)) % 7 + 1);
}

/* Record i's number of tokens and boxes: both vary, some records have none. */
static uint32_t ntokens(uint64_t i)
{
    return (uint32_t)((i * 7) % 13);
}
static uint32_t nboxes(uint64_t i)
{
    return (uint32_t)(i % 4);
}

/* Box k of record i, inside the W x H image. */
static void box_of(uint64_t i, uint32_t k, float b[4])
{
    b[0] = (float)((i * 5 + k * 17) % (W - 10));
    b[1] = (float)((i * 3 + k * 11) % (H - 10));
    b[2] = b[0] + 4 + (float)((i + k) % 6);
    b[3] = b[1] + 4 + (float)((i + 2 * k) % 6);
}

typedef struct fstore {
    char *dir, *path;
} fstore;

enum { F_IMAGE, F_MASK, F_BOXES, F_CLASSES, F_TOKENS, F_LABEL, F_WEIGHT, F_TEXT, F_GRAY, F_RGBA };

/* A store with one field of every kind: image (RGB, raw or PNG), mask (x, y, class; PNG), boxes
 * with their classes, variable int32 tokens, an int label, a float weight, bytes, a gray image
 * and a 4-channel image. */
static void make_store(fstore *fs, uint32_t image_encoding)
{
    fs->dir = tu_mkdtemp();
    cr_assert_not_null(fs->dir);
    fs->path = tu_path(fs->dir, "fields.dlc");
    const dlc_field_spec spec[] = {
        {.name = "image", .kind = DLC_FIELD_IMAGE, .encoding = image_encoding, .shape = {H, W, 3}},
        {.name = "mask",
         .kind = DLC_FIELD_IMAGE,
         .encoding = DLC_ENCODING_PNG,
         .flags = DLC_FIELD_MASK,
         .shape = {H, W, 3}},
        {.name = "boxes",
         .kind = DLC_FIELD_NDARRAY,
         .dtype = DLC_DTYPE_FLOAT32,
         .flags = DLC_FIELD_BOXES | DLC_FIELD_VARIABLE,
         .ndim = 2,
         .shape = {0, 4},
         .link = "classes"},
        {.name = "classes",
         .kind = DLC_FIELD_NDARRAY,
         .dtype = DLC_DTYPE_INT64,
         .flags = DLC_FIELD_VARIABLE,
         .ndim = 1,
         .shape = {0}},
        {.name = "tokens",
         .kind = DLC_FIELD_NDARRAY,
         .dtype = DLC_DTYPE_INT32,
         .flags = DLC_FIELD_VARIABLE,
         .ndim = 1,
         .shape = {0}},
        {.name = "label", .kind = DLC_FIELD_INT, .flags = DLC_FIELD_LABEL},
        {.name = "weight", .kind = DLC_FIELD_FLOAT},
        {.name = "text", .kind = DLC_FIELD_BYTES},
        {.name = "gray", .kind = DLC_FIELD_IMAGE, .shape = {H, W, 1}},
        {.name = "rgba", .kind = DLC_FIELD_IMAGE, .shape = {H, W, 4}},
    };
    const char *names[] = {"a", "b", "c"};
    const dlc_writer_config cfg = {.struct_size = sizeof(dlc_writer_config),
                                   .fields = spec,
                                   .num_fields = sizeof spec / sizeof *spec,
                                   .label_names = names,
                                   .num_labels = 3};
    dlc_writer *wr = NULL;
    cr_assert_eq(dlc_writer_open(fs->path, &cfg, &wr), DLC_OK, "%s", dlc_errmsg());
    dlc_record_builder *b = NULL;
    cr_assert_eq(dlc_record_builder_create(wr, &b), DLC_OK);
    static uint8_t rgb[H * W * 3], mask[H * W * 3], gray[H * W], rgba[H * W * 4];
    for (uint64_t i = 0; i < N; i++) {
        for (uint32_t y = 0; y < H; y++)
            for (uint32_t x = 0; x < W; x++) {
                const size_t p = (size_t)y * W + x;
                rgb[3 * p] = (uint8_t)x, rgb[3 * p + 1] = (uint8_t)y, rgb[3 * p + 2] = (uint8_t)i;
                mask[3 * p] = (uint8_t)x, mask[3 * p + 1] = (uint8_t)y;
                mask[3 * p + 2] = region(x, y);
                gray[p] = tu_pixel(i, y, x, 0);
                for (uint32_t c = 0; c < 4; c++)
                    rgba[4 * p + c] = tu_pixel(i, y, x, c);
            }
        const dlc_image im = {rgb, W, H, 3, W * 3}, mk = {mask, W, H, 3, W * 3};
        const dlc_image gi = {gray, W, H, 1, W}, ri = {rgba, W, H, 4, W * 4};
        float boxes[4 * 4];
        int64_t classes[4];
        for (uint32_t k = 0; k < nboxes(i); k++) {
            box_of(i, k, boxes + 4 * k);
            classes[k] = (int64_t)(i * 10 + k);
        }
        int32_t tokens[16];
        for (uint32_t k = 0; k < ntokens(i); k++)
            tokens[k] = (int32_t)(i * 100 + k);
        char text[32];
        const int tl = snprintf(text, sizeof text, "record %llu", (unsigned long long)i);
        cr_assert_eq(dlc_record_set_image(b, F_IMAGE, &im), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_set_image(b, F_MASK, &mk), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_set_array(b, F_BOXES, boxes, nboxes(i) * 16, nboxes(i)), DLC_OK);
        cr_assert_eq(dlc_record_set_array(b, F_CLASSES, classes, nboxes(i) * 8, nboxes(i)), DLC_OK);
        cr_assert_eq(dlc_record_set_array(b, F_TOKENS, tokens, ntokens(i) * 4, ntokens(i)), DLC_OK);
        cr_assert_eq(dlc_record_set_int(b, F_LABEL, (int64_t)(i % 3)), DLC_OK);
        cr_assert_eq(dlc_record_set_float(b, F_WEIGHT, 0.5 + (double)i), DLC_OK);
        cr_assert_eq(dlc_record_set_bytes(b, F_TEXT, text, (size_t)tl), DLC_OK);
        cr_assert_eq(dlc_record_set_image(b, F_GRAY, &gi), DLC_OK);
        cr_assert_eq(dlc_record_set_image(b, F_RGBA, &ri), DLC_OK);
        cr_assert_eq(dlc_record_seal(b), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_writer_append(wr, b), DLC_OK, "%s", dlc_errmsg());
    }
    dlc_record_builder_destroy(b);
    cr_assert_eq(dlc_writer_finish(wr), DLC_OK, "%s", dlc_errmsg());
}

static void drop_store(fstore *fs)
{
    tu_rmtree(fs->dir);
    free(fs->dir);
    free(fs->path);
}

static dlc_loader_config base_config(void)
{
    dlc_loader_config c;
    dlc_loader_config_init(&c);
    c.batch_size = 7;
    c.threads = 2;
    c.prefetch = 2;
    c.seed = 7;
    c.crop_h = 24;
    c.crop_w = 32;
    c.io = DLC_IO_MMAP;
    return c;
}

static const dlc_batch_field *field(const dlc_batch *b, const char *name)
{
    for (uint32_t i = 0; i < b->num_fields; i++)
        if (strcmp(b->fields[i].name, name) == 0)
            return &b->fields[i];
    cr_assert_fail("no output \"%s\" in the batch", name);
    return NULL;
}

static dlc_loader *open_ok(const char *path, const dlc_loader_config *c)
{
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(path, c, &l), DLC_OK, "%s", dlc_errmsg());
    return l;
}

/* Check one uint8 NHWC view of image and mask against each other and against the record. For a
 * plain crop the coordinates must be exact. A resized crop blends neighbours in the image: on
 * these linear ramps the bilinear filter gives the coordinate of the sample's centre, rounded,
 * which is the pixel nearest neighbour picks, except where the filter's window is cut by the
 * image's edge; so every pixel may differ by one, and all but a few must agree exactly. */
static void check_view(const uint8_t *img, const uint8_t *mask, uint32_t oh, uint32_t ow,
                       uint64_t index, int resized)
{
    uint32_t off = 0;
    for (uint32_t y = 0; y < oh; y++)
        for (uint32_t x = 0; x < ow; x++) {
            const uint8_t *p = img + ((size_t)y * ow + x) * 3, *m = mask + ((size_t)y * ow + x) * 3;
            cr_assert_eq(p[2], (uint8_t)index, "image blue is the record");
            cr_assert_eq(m[2], region(m[0], m[1]), "mask class at (%u, %u)", m[0], m[1]);
            if (!resized) {
                cr_assert(p[0] == m[0] && p[1] == m[1], "(%u, %u): image (%u, %u) mask (%u, %u)", x,
                          y, p[0], p[1], m[0], m[1]);
            } else {
                cr_assert(abs((int)p[0] - m[0]) <= 1 && abs((int)p[1] - m[1]) <= 1,
                          "(%u, %u): image (%u, %u) mask (%u, %u)", x, y, p[0], p[1], m[0], m[1]);
                off += p[0] != m[0] || p[1] != m[1];
            }
        }
    cr_assert_leq(off, oh * ow / 5, "%u of %u pixels one off", off, oh * ow);
}

/* The source x of output column 0 and 1 and the flip, read back from a plain crop's image. */
static void crop_geometry(const uint8_t *img, uint32_t ow, int *x0, int *y0, int *flip)
{
    *flip = img[3] < img[0];
    *x0 = *flip ? img[(ow - 1) * 3] : img[0];
    *y0 = img[1];
}

Test(fields, joint_crop_flip_of_image_mask_and_boxes)
{
    fstore fs;
    make_store(&fs, DLC_ENCODING_RAW);
    dlc_loader_config c = base_config();
    c.flip_prob = 0.5f;
    const char *sel[] = {"image", "mask", "boxes", "classes"};
    c.fields = sel;
    c.num_fields = 4;
    dlc_loader *l = open_ok(fs.path, &c);
    dlc_batch b;
    int flips = 0, samples = 0, kept_total = 0;
    while (dlc_loader_next(l, &b) == DLC_OK) {
        const dlc_batch_field *im = field(&b, "image"), *mk = field(&b, "mask");
        const dlc_batch_field *bx = field(&b, "boxes"), *cl = field(&b, "classes");
        cr_assert_eq(b.num_fields, 4);
        cr_assert(im->shape[0] == b.count && im->shape[1] == 24 && im->shape[2] == 32 &&
                  im->shape[3] == 3);
        cr_assert(mk->dtype == DLC_DTYPE_UINT8 && mk->shape[3] == 3);
        cr_assert(bx->lengths && cl->lengths && bx->dtype == DLC_DTYPE_FLOAT32);
        const uint64_t rows = bx->shape[1];
        for (uint32_t s = 0; s < b.count; s++) {
            const uint8_t *img = (const uint8_t *)im->data + (size_t)s * 24 * 32 * 3;
            const uint8_t *msk = (const uint8_t *)mk->data + (size_t)s * 24 * 32 * 3;
            const uint64_t idx = b.indices[s];
            check_view(img, msk, 24, 32, idx, 0);
            int x0, y0, flip;
            crop_geometry(img, 32, &x0, &y0, &flip);
            flips += flip;
            samples++;
            /* Every input box, moved by hand, against the boxes the loader kept. */
            const float *out = (const float *)bx->data + (size_t)s * rows * 4;
            const int64_t *cls = (const int64_t *)cl->data + (size_t)s * cl->shape[1];
            int64_t kept = 0;
            for (uint32_t k = 0; k < nboxes(idx); k++) {
                float in[4];
                box_of(idx, k, in);
                double bx0 = in[0] - x0, bx1 = in[2] - x0, by0 = in[1] - y0, by1 = in[3] - y0;
                if (flip) {
                    const double t = bx0;
                    bx0 = 32 - bx1;
                    bx1 = 32 - t;
                }
                bx0 = fmin(fmax(bx0, 0), 32), bx1 = fmin(fmax(bx1, 0), 32);
                by0 = fmin(fmax(by0, 0), 24), by1 = fmin(fmax(by1, 0), 24);
                if (!((float)bx1 > (float)bx0 && (float)by1 > (float)by0))
                    continue; /* No area once in float32, as the model gets it. */
                cr_assert(kept < bx->lengths[s]);
                const float *o = out + 4 * kept;
                cr_assert(o[0] == (float)bx0 && o[1] == (float)by0 && o[2] == (float)bx1 &&
                              o[3] == (float)by1,
                          "record %llu box %u", (unsigned long long)idx, k);
                cr_assert_eq(cls[kept], (int64_t)(idx * 10 + k), "its class follows it");
                kept++;
            }
            cr_assert_eq(kept, bx->lengths[s]);
            cr_assert_eq(cl->lengths[s], kept);
            /* Padding past the kept boxes is zero. */
            for (uint64_t r = (uint64_t)kept; r < rows; r++)
                cr_assert(out[4 * r] == 0 && out[4 * r + 3] == 0);
            kept_total += (int)kept;
        }
    }
    cr_assert(flips > 0 && flips < samples, "some flipped, some not (%d of %d)", flips, samples);
    cr_assert_gt(kept_total, 0);
    dlc_loader_close(l);
    drop_store(&fs);
}

Test(fields, joint_random_resized_crop_of_image_and_mask)
{
    fstore fs;
    make_store(&fs, DLC_ENCODING_PNG);
    dlc_loader_config c = base_config();
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.crop_h = 20, c.crop_w = 20;
    const char *sel[] = {"image", "mask"};
    c.fields = sel;
    c.num_fields = 2;
    dlc_loader *l = open_ok(fs.path, &c);
    dlc_batch b;
    while (dlc_loader_next(l, &b) == DLC_OK) {
        const dlc_batch_field *im = field(&b, "image"), *mk = field(&b, "mask");
        for (uint32_t s = 0; s < b.count; s++)
            check_view((const uint8_t *)im->data + (size_t)s * 20 * 20 * 3,
                       (const uint8_t *)mk->data + (size_t)s * 20 * 20 * 3, 20, 20, b.indices[s],
                       1);
    }
    dlc_loader_close(l);
    drop_store(&fs);
}

Test(fields, views_have_their_own_parameters)
{
    fstore fs;
    make_store(&fs, DLC_ENCODING_RAW);
    dlc_loader_config c = base_config();
    const dlc_view_spec views[] = {
        {.name = "global",
         .count = 2,
         .augment = DLC_AUGMENT_RANDOM_CROP,
         .crop_h = 32,
         .crop_w = 40,
         .flip_prob = 0.5f},
        {.name = "local",
         .count = 3,
         .augment = DLC_AUGMENT_RANDOM_RESIZED_CROP,
         .crop_h = 12,
         .crop_w = 12,
         .rrc_scale = {0.05f, 0.4f},
         .rrc_ratio = {0.75f, 1.333f},
         .flip_prob = 0.5f},
    };
    c.views = views;
    c.num_views = 2;
    const char *sel[] = {"image", "mask", "label"};
    c.fields = sel;
    c.num_fields = 3;
    dlc_loader *l = open_ok(fs.path, &c);
    dlc_batch b;
    int differ = 0;
    while (dlc_loader_next(l, &b) == DLC_OK) {
        const dlc_batch_field *g = field(&b, "image_global"), *lo = field(&b, "image_local");
        const dlc_batch_field *mg = field(&b, "mask_global"), *ml = field(&b, "mask_local");
        cr_assert(g->ndim == 5 && g->shape[1] == 2 && g->shape[2] == 32 && g->shape[3] == 40);
        cr_assert(lo->ndim == 5 && lo->shape[1] == 3 && lo->shape[2] == 12);
        cr_assert_null(b.data, "no default-group image: nothing in the version 1 fields");
        for (uint32_t s = 0; s < b.count; s++) {
            for (uint32_t k = 0; k < 2; k++) {
                const size_t at = ((size_t)s * 2 + k) * 32 * 40 * 3;
                check_view((const uint8_t *)g->data + at, (const uint8_t *)mg->data + at, 32, 40,
                           b.indices[s], 0);
            }
            for (uint32_t k = 0; k < 3; k++) {
                const size_t at = ((size_t)s * 3 + k) * 12 * 12 * 3;
                check_view((const uint8_t *)lo->data + at, (const uint8_t *)ml->data + at, 12, 12,
                           b.indices[s], 1);
            }
            const uint8_t *v0 = (const uint8_t *)g->data + (size_t)s * 2 * 32 * 40 * 3;
            differ += memcmp(v0, v0 + 32 * 40 * 3, 32 * 40 * 3) != 0;
        }
        cr_assert_eq(field(&b, "label")->dtype, DLC_DTYPE_INT64);
    }
    cr_assert_gt(differ, (int)(N / 2), "the two global views of a sample differ");
    dlc_loader_close(l);
    drop_store(&fs);
}

Test(fields, variable_arrays_bytes_and_scalars_in_every_layout)
{
    fstore fs;
    make_store(&fs, DLC_ENCODING_RAW);
    for (uint32_t mode = DLC_VARIABLE_PAD; mode <= DLC_VARIABLE_OFFSETS; mode++) {
        dlc_loader_config c = base_config();
        c.sampler = DLC_SAMPLER_SHUFFLE;
        const char *sel[] = {"tokens", "label", "weight", "text"};
        c.fields = sel;
        c.num_fields = 4;
        const dlc_field_option opt = {.name = "tokens", .variable = mode, .max_len = 5};
        c.field_options = &opt;
        c.num_field_options = 1;
        dlc_loader *l = open_ok(fs.path, &c);
        dlc_batch b;
        uint64_t seen = 0;
        while (dlc_loader_next(l, &b) == DLC_OK) {
            const dlc_batch_field *t = field(&b, "tokens"), *tx = field(&b, "text");
            const int64_t *lab = field(&b, "label")->data;
            const double *wt = field(&b, "weight")->data;
            cr_assert_null(b.data);
            for (uint32_t s = 0; s < b.count; s++) {
                const uint64_t idx = b.indices[s];
                cr_assert_eq(lab[s], (int64_t)(idx % 3));
                cr_assert_eq(b.labels[s], (int64_t)(idx % 3));
                cr_assert(wt[s] == 0.5 + (double)idx);
                const int32_t *row;
                uint32_t len;
                if (mode == DLC_VARIABLE_OFFSETS) {
                    cr_assert_not_null(t->offsets);
                    row = (const int32_t *)t->data + t->offsets[s];
                    len = (uint32_t)(t->offsets[s + 1] - t->offsets[s]);
                    cr_assert_eq(len, ntokens(idx));
                } else {
                    row = (const int32_t *)t->data + (size_t)s * t->shape[1];
                    len = (uint32_t)t->lengths[s];
                    const uint32_t want =
                        mode == DLC_VARIABLE_PAD_TO && ntokens(idx) > 5 ? 5 : ntokens(idx);
                    cr_assert_eq(len, want);
                    if (mode == DLC_VARIABLE_PAD_TO)
                        cr_assert_eq(t->shape[1], 5);
                    for (uint64_t k = len; k < t->shape[1]; k++)
                        cr_assert_eq(row[k], 0, "padding");
                }
                for (uint32_t k = 0; k < len; k++)
                    cr_assert_eq(row[k], (int32_t)(idx * 100 + k));
                char want[32];
                const int wl = snprintf(want, sizeof want, "record %llu", (unsigned long long)idx);
                cr_assert_eq(tx->offsets[s + 1] - tx->offsets[s], wl);
                cr_assert(memcmp((const char *)tx->data + tx->offsets[s], want, (size_t)wl) == 0);
                seen++;
            }
            if (mode == DLC_VARIABLE_PAD) {
                int64_t longest = 0;
                for (uint32_t s = 0; s < b.count; s++)
                    longest = t->lengths[s] > longest ? t->lengths[s] : longest;
                cr_assert_eq((int64_t)t->shape[1], longest, "padded to the longest");
            }
        }
        cr_assert_eq(seen, N);
        dlc_loader_close(l);
    }
    drop_store(&fs);
}

Test(fields, channels_one_three_four_normalize_per_channel)
{
    fstore fs;
    make_store(&fs, DLC_ENCODING_RAW);
    dlc_loader_config c = base_config();
    c.augment = DLC_AUGMENT_CENTER_CROP;
    c.flip_prob = 0;
    const float mean[4] = {0.1f, 0.2f, 0.3f, 0.4f}, std[4] = {0.5f, 0.6f, 0.7f, 0.8f};
    memcpy(c.mean, mean, sizeof mean);
    memcpy(c.std, std, sizeof std);
    for (uint32_t dtype = DLC_DTYPE_UINT8; dtype <= DLC_DTYPE_FLOAT16; dtype++) {
        c.dtype = dtype;
        const char *sel[] = {"gray", "rgba"};
        c.fields = sel;
        c.num_fields = 2;
        dlc_loader *l = open_ok(fs.path, &c);
        dlc_batch b;
        const dlc__box box = dlc__center_box(W, H, 32, 24);
        while (dlc_loader_next(l, &b) == DLC_OK) {
            for (uint32_t f = 0; f < 2; f++) {
                const dlc_batch_field *bf = field(&b, f ? "rgba" : "gray");
                const uint32_t C = f ? 4 : 1;
                for (uint32_t s = 0; s < b.count; s++)
                    for (uint32_t ch = 0; ch < C; ch++)
                        for (uint32_t y = 0; y < 24; y++)
                            for (uint32_t x = 0; x < 32; x++) {
                                const uint8_t v =
                                    tu_pixel(b.indices[s], box.top + y, box.left + x, ch);
                                const float ref = ((float)v / 255.0f - mean[ch]) / std[ch];
                                if (dtype == DLC_DTYPE_UINT8) {
                                    const size_t at = (((size_t)s * 24 + y) * 32 + x) * C + ch;
                                    cr_assert_eq(((const uint8_t *)bf->data)[at], v);
                                    continue;
                                }
                                const size_t at = (((size_t)s * C + ch) * 24 + y) * 32 + x;
                                if (dtype == DLC_DTYPE_FLOAT32)
                                    cr_assert(((const float *)bf->data)[at] == ref);
                                else
                                    cr_assert_eq(((const uint16_t *)bf->data)[at],
                                                 dlc__f32_to_f16(ref));
                            }
            }
        }
        dlc_loader_close(l);
    }
    drop_store(&fs);
}

/* XXH3 of an epoch: every output's bytes, lengths and offsets, the labels and the indices. */
static uint64_t epoch_digest(const char *path, dlc_loader_config c)
{
    dlc_loader *l = open_ok(path, &c);
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    dlc_batch b;
    dlc_status rc;
    while ((rc = dlc_loader_next(l, &b)) == DLC_OK) {
        for (uint32_t i = 0; i < b.num_fields; i++) {
            const dlc_batch_field *f = &b.fields[i];
            XXH3_64bits_update(st, f->name, strlen(f->name));
            XXH3_64bits_update(st, f->data, f->bytes);
            XXH3_64bits_update(st, f->shape, sizeof f->shape);
            if (f->lengths)
                XXH3_64bits_update(st, f->lengths, b.count * sizeof *f->lengths);
            if (f->offsets)
                XXH3_64bits_update(st, f->offsets, (b.count + 1) * sizeof *f->offsets);
        }
        XXH3_64bits_update(st, b.indices, b.count * sizeof *b.indices);
        XXH3_64bits_update(st, b.labels, b.count * sizeof *b.labels);
    }
    cr_assert_eq(rc, DLC_END, "%s", dlc_errmsg());
    dlc_loader_close(l);
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

Test(fields, every_field_independent_of_threads_prefetch_and_io)
{
    fstore fs;
    make_store(&fs, DLC_ENCODING_PNG);
    dlc_loader_config c = base_config();
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.dtype = DLC_DTYPE_FLOAT16;
    const uint64_t ref = epoch_digest(fs.path, c);
    const uint32_t threads[] = {1, 3, 8}, prefetch[] = {1, 5, 2};
    for (int i = 0; i < 3; i++) {
        c.threads = threads[i];
        c.prefetch = prefetch[i];
        c.io = i == 2 ? DLC_IO_DIRECT : DLC_IO_MMAP;
        cr_assert_eq(epoch_digest(fs.path, c), ref, "threads %u prefetch %u io %u", c.threads,
                     c.prefetch, c.io);
    }
    drop_store(&fs);
}

Test(fields, selecting_fields_changes_no_other_field)
{
    fstore fs;
    make_store(&fs, DLC_ENCODING_RAW);
    dlc_loader_config c = base_config();
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    const char *all[] = {"image", "boxes", "classes", "tokens"};
    const char *one[] = {"image"};
    c.fields = one;
    c.num_fields = 1;
    dlc_loader *a = open_ok(fs.path, &c);
    c.fields = all;
    c.num_fields = 4;
    dlc_loader *b = open_ok(fs.path, &c);
    dlc_batch x, y;
    while (dlc_loader_next(a, &x) == DLC_OK) {
        cr_assert_eq(dlc_loader_next(b, &y), DLC_OK);
        cr_assert_eq(x.bytes, y.bytes);
        cr_assert(memcmp(x.data, y.data, x.bytes) == 0);
        cr_assert_eq(x.num_fields, 1);
        cr_assert_eq(y.num_fields, 4);
    }
    dlc_loader_close(a);
    dlc_loader_close(b);
    drop_store(&fs);
}

Test(fields, hostile_configurations_are_refused_by_name)
{
    fstore fs;
    make_store(&fs, DLC_ENCODING_RAW);
    dlc_loader *l = NULL;
    dlc_loader_config c = base_config();
    const char *bad[] = {"image", "nope"};
    c.fields = bad;
    c.num_fields = 2;
    cr_assert_eq(dlc_loader_open(fs.path, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "\"nope\"") && strstr(dlc_errmsg(), "tokens"), "%s",
              dlc_errmsg());
    const char *twice[] = {"image", "image"};
    c.fields = twice;
    cr_assert_eq(dlc_loader_open(fs.path, &c, &l), DLC_EINVAL);
    c = base_config();
    const dlc_field_option bytes_pad = {.name = "text", .variable = DLC_VARIABLE_PAD};
    c.field_options = &bytes_pad;
    c.num_field_options = 1;
    cr_assert_eq(dlc_loader_open(fs.path, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "text"), "%s", dlc_errmsg());
    c = base_config();
    const dlc_view_spec two[] = {{.name = "g", .count = 2, .crop_h = 8, .crop_w = 8}};
    c.views = two;
    c.num_views = 1;
    cr_assert_eq(dlc_loader_open(fs.path, &c, &l), DLC_EINVAL, "boxes with two views");
    cr_assert(strstr(dlc_errmsg(), "boxes"), "%s", dlc_errmsg());
    const dlc_view_spec unnamed[] = {{.name = "a b", .count = 1, .crop_h = 8, .crop_w = 8}};
    c.views = unnamed;
    cr_assert_eq(dlc_loader_open(fs.path, &c, &l), DLC_EINVAL);
    cr_assert_null(l);
    drop_store(&fs);
}

Test(fields, boxes_cut_to_max_len_keep_their_classes)
{
    fstore fs;
    make_store(&fs, DLC_ENCODING_RAW);
    dlc_loader_config c = base_config();
    c.crop_h = H, c.crop_w = W; /* The whole image: every box stays, and PAD_TO must cut. */
    c.flip_prob = 0;
    const char *sel[] = {"boxes", "classes"};
    c.fields = sel;
    c.num_fields = 2;
    const dlc_field_option opt[] = {
        {.name = "boxes", .variable = DLC_VARIABLE_PAD_TO, .max_len = 1},
        {.name = "classes", .variable = DLC_VARIABLE_OFFSETS}};
    c.field_options = opt;
    c.num_field_options = 2;
    dlc_loader *l = open_ok(fs.path, &c);
    dlc_batch b;
    while (dlc_loader_next(l, &b) == DLC_OK) {
        const dlc_batch_field *bx = field(&b, "boxes"), *cl = field(&b, "classes");
        cr_assert_eq(bx->shape[1], 1);
        for (uint32_t s = 0; s < b.count; s++) {
            const uint64_t idx = b.indices[s];
            const int64_t want = nboxes(idx) ? 1 : 0;
            cr_assert_eq(bx->lengths[s], want);
            cr_assert_eq(cl->offsets[s + 1] - cl->offsets[s], want, "classes follow the cut");
            if (want) {
                float in[4];
                box_of(idx, 0, in);
                cr_assert(memcmp((const float *)bx->data + 4 * s, in, sizeof in) == 0);
                cr_assert_eq(((const int64_t *)cl->data)[cl->offsets[s]], (int64_t)(idx * 10));
            }
        }
    }
    dlc_loader_close(l);
    drop_store(&fs);
}

/* Flip one byte of field @p f of record @p index in the file. */
static void corrupt_field(const char *path, uint64_t index, uint32_t f)
{
    dlc_store *s;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK);
    dlc_store_reader *r;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    dlc_value v[16];
    cr_assert_eq(dlc_store_read_values(r, index, v), DLC_OK);
    cr_assert_gt(v[f].size, 0);
    const uint64_t off = v[f].offset + v[f].size / 2;
    const uint8_t byte = v[f].data[v[f].size / 2] ^ 0x01;
    dlc_store_reader_close(r);
    dlc_store_close(s);
    const int fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, &byte, 1, (off_t)off), 1);
    close(fd);
}

/* A record whose tokens fail their checksum is replaced by another record, whose tokens have
 * another length: the packed batch still holds exactly each delivered record's tokens. */
Test(fields, corrupt_variable_field_is_replaced_whole)
{
    fstore fs;
    make_store(&fs, DLC_ENCODING_RAW);
    const uint64_t bad = 12; /* ntokens(12) = 6 */
    corrupt_field(fs.path, bad, F_TOKENS);
    const uint32_t ios[] = {DLC_IO_MMAP, DLC_IO_DIRECT};
    for (int io = 0; io < 2; io++) {
        dlc_loader_config c = base_config();
        c.io = ios[io];
        c.verify = DLC_VERIFY_ALWAYS;
        c.on_corrupt = DLC_CORRUPT_REPLACE;
        const char *sel[] = {"tokens", "label"};
        c.fields = sel;
        c.num_fields = 2;
        const dlc_field_option opt = {.name = "tokens", .variable = DLC_VARIABLE_OFFSETS};
        c.field_options = &opt;
        c.num_field_options = 1;
        dlc_loader *l = open_ok(fs.path, &c);
        dlc_batch b;
        uint64_t seen = 0;
        while (dlc_loader_next(l, &b) == DLC_OK) {
            const dlc_batch_field *t = field(&b, "tokens");
            for (uint32_t s = 0; s < b.count; s++) {
                const uint64_t idx = b.indices[s];
                cr_assert_neq(idx, bad);
                cr_assert_eq(t->offsets[s + 1] - t->offsets[s], ntokens(idx));
                for (uint32_t k = 0; k < ntokens(idx); k++)
                    cr_assert_eq(((const int32_t *)t->data)[t->offsets[s] + k],
                                 (int32_t)(idx * 100 + k));
                seen++;
            }
        }
        cr_assert_eq(seen, N, "the batch kept its size");
        dlc_loader_stats st;
        dlc_loader_get_stats(l, &st);
        cr_assert_eq(st.corrupt_replaced, 1);
        dlc_loader_close(l);
    }
    drop_store(&fs);
}

/* Records of the smallest-image test (height, width): 48x64 but record 7, 20x50 (the smallest
 * height), and record 9, 40x30 (the smallest width). */
static void min_size_of(uint64_t i, uint32_t *h, uint32_t *w)
{
    *h = i == 7 ? 20u : i == 9 ? 40u : H;
    *w = i == 7 ? 50u : i == 9 ? 30u : W;
}

/* A store of N records of a VARIABLE image and a VARIABLE mask of its size. */
static void make_variable_store(fstore *fs)
{
    fs->dir = tu_mkdtemp();
    cr_assert_not_null(fs->dir);
    fs->path = tu_path(fs->dir, "var.dlc");
    const dlc_field_spec spec[] = {
        {.name = "image", .kind = DLC_FIELD_IMAGE, .flags = DLC_FIELD_VARIABLE, .shape = {0, 0, 3}},
        {.name = "mask",
         .kind = DLC_FIELD_IMAGE,
         .flags = DLC_FIELD_VARIABLE | DLC_FIELD_MASK,
         .shape = {0, 0, 1}},
    };
    const dlc_writer_config cfg = {
        .struct_size = sizeof(dlc_writer_config), .fields = spec, .num_fields = 2};
    dlc_writer *wr = NULL;
    dlc_record_builder *b = NULL;
    cr_assert_eq(dlc_writer_open(fs->path, &cfg, &wr), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_record_builder_create(wr, &b), DLC_OK);
    static uint8_t px[H * W * 3];
    for (uint64_t i = 0; i < N; i++) {
        uint32_t h, w;
        min_size_of(i, &h, &w);
        for (size_t k = 0; k < (size_t)h * w * 3; k++)
            px[k] = (uint8_t)(k + i);
        const dlc_image im = {px, w, h, 3, (size_t)w * 3}, mk = {px, w, h, 1, w};
        cr_assert_eq(dlc_record_set_image(b, 0, &im), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_set_image(b, 1, &mk), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_seal(b), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_writer_append(wr, b), DLC_OK, "%s", dlc_errmsg());
    }
    cr_assert_eq(dlc_writer_finish(wr), DLC_OK, "%s", dlc_errmsg());
    dlc_record_builder_destroy(b);
}

/* Delete metadata key @p key of the store at @p path: a store an older library wrote. */
static void drop_meta(const char *path, const char *key)
{
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 4), 0);
    cr_assert_eq(mdb_env_open(env, path, MDB_NOSUBDIR | MDB_NOLOCK, 0644), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
    MDB_val k = {.mv_size = strlen(key), .mv_data = (void *)key};
    cr_assert_eq(mdb_del(txn, dbi, &k, NULL), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

/* Open with @p c; expect DLC_EINVAL and a message holding @p want. */
static void open_refused(const char *path, const dlc_loader_config *c, const char *want)
{
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(path, c, &l), DLC_EINVAL, "%s", dlc_errmsg());
    cr_assert_null(l);
    cr_assert_not_null(strstr(dlc_errmsg(), want), "\"%s\" not in: %s", want, dlc_errmsg());
}

/* Run an epoch; return how it ended. */
static dlc_status run_epoch(dlc_loader *l)
{
    dlc_batch b;
    dlc_status rc;
    while ((rc = dlc_loader_next(l, &b)) == DLC_OK)
        continue;
    return rc;
}

/* A plain or center crop larger than the smallest image the store records is refused at open,
 * naming the store, the field, a record of that size and the largest crop that fits; one that
 * fits, and RandomResizedCrop, open. A store without the record (built before it) opens, and the
 * record is named when its batch is built. */
Test(fields, crop_larger_than_the_smallest_image_is_refused_at_open)
{
    fstore fs;
    make_variable_store(&fs);
    char want[512];
    dlc_loader_config c = base_config();
    c.crop_h = c.crop_w = 32;
    snprintf(want, sizeof want,
             "%s: field \"image\": record 7 is 20x50 (height x width), smaller than the 32x32 "
             "crop; use a crop of at most 20x30, random_resized_crop, or rebuild",
             fs.path);
    open_refused(fs.path, &c, want);
    c.augment = DLC_AUGMENT_CENTER_CROP;
    c.crop_h = 16;
    c.crop_w = 40; /* High enough for every record; too wide for record 9. */
    open_refused(fs.path, &c,
                 "field \"image\": record 9 is 40x30 (height x width), smaller than "
                 "the 16x40 crop");
    const char *sel[] = {"mask"};
    c.fields = sel;
    c.num_fields = 1;
    open_refused(fs.path, &c, "field \"mask\": record 9 is 40x30");
    c.fields = NULL;
    c.num_fields = 0;
    const dlc_view_spec views[2] = {
        {.name = "global",
         .count = 1,
         .augment = DLC_AUGMENT_RANDOM_CROP,
         .crop_h = 20,
         .crop_w = 30},
        {.name = "local",
         .count = 2,
         .augment = DLC_AUGMENT_RANDOM_CROP,
         .crop_h = 21,
         .crop_w = 8},
    };
    c.views = views;
    c.num_views = 2;
    open_refused(fs.path, &c,
                 "record 7 is 20x50 (height x width), smaller than the 21x8 crop of "
                 "view group \"local\"");
    c.views = NULL;
    c.num_views = 0;

    /* The largest crop that fits every record, and RandomResizedCrop at any size, open and run. */
    c.crop_h = 20;
    c.crop_w = 30;
    dlc_loader *l = open_ok(fs.path, &c);
    cr_assert_eq(run_epoch(l), DLC_END, "%s", dlc_errmsg());
    dlc_loader_close(l);
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.crop_h = c.crop_w = 32;
    l = open_ok(fs.path, &c);
    cr_assert_eq(run_epoch(l), DLC_END, "%s", dlc_errmsg());
    dlc_loader_close(l);

    /* A store an older library wrote: no check at open, the batch names the record. */
    drop_meta(fs.path, "min_dims");
    c.augment = DLC_AUGMENT_RANDOM_CROP;
    c.crop_h = 21; /* Only record 7 is too small. */
    c.crop_w = 30;
    l = open_ok(fs.path, &c);
    cr_assert_eq(run_epoch(l), DLC_EINVAL);
    cr_assert_not_null(strstr(dlc_errmsg(), "record 7: its image of 20x50 (height x width) is "
                                            "smaller than the 21x30 crop"),
                       "%s", dlc_errmsg());
    dlc_loader_close(l);
    drop_store(&fs);
}
