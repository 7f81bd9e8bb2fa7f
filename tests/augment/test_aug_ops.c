/* The ops' C API (include/dlcache/ops.h) and the internal apply calls: refusals with messages
 * naming the op and the parameter, in-place and out-of-place results equal, rows' padding never
 * written, a record applied whole equal to its ops applied one by one. The ops' values against
 * torchvision are checked by tests/python/test_ops.py. */
#include "aug_internal.h"

#include <dlcache/ops.h>

#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *random_pixels(size_t n, uint64_t seed)
{
    uint8_t *p = malloc(n);
    cr_assert_not_null(p);
    dlc__rng r = {.key = seed, .ctr = 0};
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)dlc__rng_next(&r);
    return p;
}

static dlc_image image(uint8_t *data, uint32_t w, uint32_t h, uint32_t c)
{
    return (dlc_image){
        .data = data, .width = w, .height = h, .channels = c, .stride = (size_t)w * c};
}

/* Expect DLC_EINVAL and a message holding both needles. */
static void refused(dlc_status rc, const char *a, const char *b)
{
    cr_assert_eq(rc, DLC_EINVAL, "status %d", rc);
    cr_assert(strstr(dlc_errmsg(), a) != NULL, "'%s' lacks '%s'", dlc_errmsg(), a);
    if (b)
        cr_assert(strstr(dlc_errmsg(), b) != NULL, "'%s' lacks '%s'", dlc_errmsg(), b);
}

Test(aug_ops, bad_parameters_name_the_op_and_parameter)
{
    enum { W = 12, H = 9, C = 3 };
    uint8_t *px = random_pixels(W * H * C, 1);
    uint8_t out[W * H * C];
    const dlc_image src = image(px, W, H, C), dst = image(out, W, H, C);
    const size_t n = dlc_op_scratch_bound(W, H, C);
    void *scratch = malloc(n);
    dlc_op_params p;

    dlc_op_params_init(&p);
    p.op = DLC_OP_ADJUST_BRIGHTNESS;
    p.factor = -0.5;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "adjust_brightness", "brightness_factor");
    p.op = DLC_OP_ADJUST_CONTRAST;
    p.factor = NAN;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "adjust_contrast", "contrast_factor");
    p.op = DLC_OP_ADJUST_HUE;
    p.factor = 0.51;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "adjust_hue", "hue_factor");
    p.op = DLC_OP_ADJUST_SHARPNESS;
    p.factor = INFINITY;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "adjust_sharpness", "sharpness_factor");

    dlc_op_params_init(&p);
    p.op = DLC_OP_POSTERIZE;
    p.bits = 9;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "posterize", "bits");
    dlc_op_params_init(&p);
    p.op = DLC_OP_SOLARIZE;
    p.threshold = 255.5;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "solarize", "threshold");
    dlc_op_params_init(&p);
    p.op = DLC_OP_RGB_TO_GRAYSCALE;
    p.num_output_channels = 2;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "rgb_to_grayscale", "num_output_channels");

    dlc_op_params_init(&p);
    p.op = DLC_OP_GAUSSIAN_BLUR;
    p.kernel_size[0] = 4;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "gaussian_blur", "kernel_size[0]");
    p.kernel_size[0] = 3;
    p.kernel_size[1] = 19; /* A pad of 9 on a 9-pixel-high image. */
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "gaussian_blur", "kernel_size[1]");
    p.kernel_size[1] = 3;
    p.sigma[1] = 0.0;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "gaussian_blur", "sigma[1]");

    dlc_op_params_init(&p);
    p.op = DLC_OP_ROTATE;
    p.angle = NAN;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "rotate", "angle");
    dlc_op_params_init(&p);
    p.op = DLC_OP_AFFINE;
    p.scale = 0.0;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "affine", "scale");
    p.scale = 1.0;
    p.shear[1] = -90.0;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "affine", "shear");
    p.shear[1] = 0.0;
    p.translate[0] = INFINITY;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "affine", "translate");
    p.translate[0] = 0.0;
    p.has_center = 1;
    p.center[0] = NAN;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "affine", "center");

    dlc_op_params_init(&p);
    p.op = 99;
    refused(dlc_op_apply(&p, &src, &dst, scratch, n), "unknown op", "99");
    free(scratch);
    free(px);
}

Test(aug_ops, bad_calls_are_refused)
{
    enum { W = 8, H = 6 };
    uint8_t *px = random_pixels(W * H * 4, 2);
    uint8_t out[W * H * 4];
    const size_t n = dlc_op_scratch_bound(W, H, 4);
    void *scratch = malloc(n);
    dlc_op_params p;
    dlc_op_params_init(&p);
    p.op = DLC_OP_INVERT;
    dlc_image src = image(px, W, H, 3), dst = image(out, W, H, 3);

    refused(dlc_op_apply(NULL, &src, &dst, scratch, n), "params", NULL);
    refused(dlc_op_apply(&p, NULL, &dst, scratch, n), "src", NULL);
    refused(dlc_op_apply(&p, &src, NULL, scratch, n), "dst", NULL);
    dlc_op_params raw = p;
    raw.struct_size = 0;
    refused(dlc_op_apply(&raw, &src, &dst, scratch, n), "dlc_op_params", NULL);
    raw.struct_size = sizeof raw + 8;
    refused(dlc_op_apply(&raw, &src, &dst, scratch, n), "dlc_op_params", NULL);
    /* Too little scratch, and none. */
    refused(dlc_op_apply(&p, &src, &dst, scratch, dlc_op_scratch_bound(W, H, 3) - 1), "invert",
            "scratch");
    refused(dlc_op_apply(&p, &src, &dst, NULL, n), "invert", "scratch");
    /* Shapes that disagree, a short stride, overlapping images. */
    dlc_image small = image(out, W - 1, H, 3);
    refused(dlc_op_apply(&p, &src, &small, scratch, n), "invert", "dst is 7x6x3");
    dlc_image thin = src;
    thin.stride = W * 3 - 1;
    refused(dlc_op_apply(&p, &thin, &dst, scratch, n), "invert", "stride");
    dlc_image shifted = image(px + 3, W, H, 3);
    refused(dlc_op_apply(&p, &src, &shifted, scratch, n), "invert", "overlap");
    /* A color op on 4 channels (torchvision takes 1 or 3); a geometric one takes 4. */
    dlc_image four = image(px, W, H, 4), four_out = image(out, W, H, 4);
    p.op = DLC_OP_ADJUST_SATURATION;
    refused(dlc_op_apply(&p, &four, &four_out, scratch, n), "adjust_saturation", "channels");
    p.op = DLC_OP_ROTATE;
    p.angle = 10.0;
    cr_assert_eq(dlc_op_apply(&p, &four, &four_out, scratch, n), DLC_OK);
    dlc_image empty = image(px, 0, H, 3);
    p.op = DLC_OP_INVERT;
    refused(dlc_op_apply(&p, &empty, &empty, scratch, n), "invert", "empty");
    free(scratch);
    free(px);
}

/* Every op with its parameters: the cases of the apply tests. */
static dlc_op_params case_params(int i)
{
    dlc_op_params p;
    dlc_op_params_init(&p);
    switch (i) {
    case 0:
        p.op = DLC_OP_ADJUST_BRIGHTNESS, p.factor = 1.7;
        break;
    case 1:
        p.op = DLC_OP_ADJUST_CONTRAST, p.factor = 0.4;
        break;
    case 2:
        p.op = DLC_OP_ADJUST_SATURATION, p.factor = 1.9;
        break;
    case 3:
        p.op = DLC_OP_ADJUST_HUE, p.factor = -0.3;
        break;
    case 4:
        p.op = DLC_OP_ADJUST_SHARPNESS, p.factor = 2.5;
        break;
    case 5:
        p.op = DLC_OP_POSTERIZE, p.bits = 3;
        break;
    case 6:
        p.op = DLC_OP_SOLARIZE, p.threshold = 99.5;
        break;
    case 7:
        p.op = DLC_OP_AUTOCONTRAST;
        break;
    case 8:
        p.op = DLC_OP_EQUALIZE;
        break;
    case 9:
        p.op = DLC_OP_INVERT;
        break;
    case 10:
        p.op = DLC_OP_RGB_TO_GRAYSCALE;
        break;
    case 11:
        p.op = DLC_OP_GAUSSIAN_BLUR, p.kernel_size[0] = 7, p.kernel_size[1] = 5;
        p.sigma[0] = 1.5, p.sigma[1] = 0.7;
        break;
    case 12:
        p.op = DLC_OP_ROTATE, p.angle = 33.0, p.fill[0] = 9, p.fill[1] = 8, p.fill[2] = 7;
        break;
    default:
        p.op = DLC_OP_AFFINE, p.angle = -12.0, p.translate[0] = 3, p.translate[1] = -2;
        p.scale = 1.3, p.shear[0] = 10.0, p.shear[1] = 5.0;
        break;
    }
    return p;
}
#define N_CASES 14

Test(aug_ops, in_place_equals_out_of_place_and_padding_is_kept)
{
    enum { W = 23, H = 17, C = 3, PAD = 5 };
    const size_t stride = W * C + PAD;
    uint8_t *px = random_pixels(stride * H, 3);
    const size_t n = dlc_op_scratch_bound(W, H, C);
    void *scratch = malloc(n + 1);
    for (int i = 0; i < N_CASES; i++) {
        const dlc_op_params p = case_params(i);
        uint8_t a[W * C * H], b[stride * H];
        memcpy(b, px, sizeof b);
        const dlc_image src = {px, W, H, C, stride};
        const dlc_image dst = image(a, W, H, C);
        const dlc_image inplace = {b, W, H, C, stride};
        cr_assert_eq(dlc_op_apply(&p, &src, &dst, scratch, n), DLC_OK, "%s: %s", dlc_op_name(p.op),
                     dlc_errmsg());
        /* Scratch at an odd address works too (no alignment promise). */
        cr_assert_eq(dlc_op_apply(&p, &inplace, &inplace, (uint8_t *)scratch + 1, n), DLC_OK);
        for (uint32_t y = 0; y < H; y++) {
            cr_assert_eq(memcmp(a + y * W * C, b + y * stride, W * C), 0, "%s row %u",
                         dlc_op_name(p.op), y);
            cr_assert_eq(memcmp(b + y * stride + W * C, px + y * stride + W * C, PAD), 0,
                         "%s wrote a row's padding", dlc_op_name(p.op));
        }
    }
    free(scratch);
    free(px);
}

Test(aug_ops, known_values)
{
    uint8_t px[6] = {0, 100, 255, 17, 128, 200};
    uint8_t out[6];
    const dlc_image src = image(px, 2, 1, 3), dst = image(out, 2, 1, 3);
    char scratch[8192];
    dlc_op_params p;
    dlc_op_params_init(&p);
    p.op = DLC_OP_ADJUST_BRIGHTNESS;
    p.factor = 1.5; /* Truncated, clamped: 150, 382 -> 255, 25.5 -> 25, 192, 300 -> 255. */
    cr_assert_eq(dlc_op_apply(&p, &src, &dst, scratch, sizeof scratch), DLC_OK);
    const uint8_t bright[6] = {0, 150, 255, 25, 192, 255};
    cr_assert_eq(memcmp(out, bright, 6), 0);
    p.op = DLC_OP_POSTERIZE;
    p.bits = 2;
    cr_assert_eq(dlc_op_apply(&p, &src, &dst, scratch, sizeof scratch), DLC_OK);
    const uint8_t post[6] = {0, 64, 192, 0, 128, 192};
    cr_assert_eq(memcmp(out, post, 6), 0);
    p.op = DLC_OP_SOLARIZE;
    p.threshold = 128;
    cr_assert_eq(dlc_op_apply(&p, &src, &dst, scratch, sizeof scratch), DLC_OK);
    const uint8_t sol[6] = {0, 100, 0, 17, 127, 55};
    cr_assert_eq(memcmp(out, sol, 6), 0);
    /* timm's SolarizeAdd: below the threshold (128, the default) + 99, saturating. */
    dlc_op_params_init(&p);
    p.op = DLC_OP_SOLARIZE_ADD;
    p.addition = 99;
    cr_assert_eq(dlc_op_apply(&p, &src, &dst, scratch, sizeof scratch), DLC_OK);
    const uint8_t sadd[6] = {99, 199, 255, 116, 128, 200};
    cr_assert_eq(memcmp(out, sadd, 6), 0);
    p.threshold = 256; /* 255 too: 255 + 99 saturates. */
    cr_assert_eq(dlc_op_apply(&p, &src, &dst, scratch, sizeof scratch), DLC_OK);
    const uint8_t sadd2[6] = {99, 199, 255, 116, 227, 255};
    cr_assert_eq(memcmp(out, sadd2, 6), 0);
    cr_assert_str_eq(dlc_op_name(DLC_OP_SOLARIZE_ADD), "solarize_add");
    p.addition = 256;
    cr_assert_eq(dlc_op_apply(&p, &src, &dst, scratch, sizeof scratch), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "solarize_add") && strstr(dlc_errmsg(), "addition"), "%s",
              dlc_errmsg());
    dlc_op_params_init(&p);
    /* rgb_to_grayscale to one channel: 0.2989 * 0 + 0.587 * 100 + 0.114 * 255 = 87.77 -> 87. */
    uint8_t g[2];
    const dlc_image gray = image(g, 2, 1, 1);
    p.op = DLC_OP_RGB_TO_GRAYSCALE;
    p.num_output_channels = 1;
    cr_assert_eq(dlc_op_apply(&p, &src, &gray, scratch, sizeof scratch), DLC_OK);
    cr_assert_eq(g[0], 87);
    cr_assert_str_eq(dlc_op_name(DLC_OP_GAUSSIAN_BLUR), "gaussian_blur");
    cr_assert_str_eq(dlc_op_name(77), "?");
}

Test(aug_ops, a_record_applies_as_its_ops_one_by_one)
{
    enum { W = 40, H = 30, C = 3 };
    const dlc__aug_config cfgs[] = {
        {.policy = DLC__AUG_POLICY_TRIVIAL_WIDE, .num_magnitude_bins = 31, .fill = {1, 2, 3}},
        {.policy = DLC__AUG_POLICY_RAND,
         .num_ops = 4,
         .magnitude = 9,
         .num_magnitude_bins = 31,
         .mstd = 0.5f,
         .jitter_p = 0.8f,
         .brightness = {0.6f, 1.4f},
         .contrast = {0.6f, 1.4f},
         .saturation = {0.8f, 1.2f},
         .hue = {-0.1f, 0.1f},
         .grayscale_p = 0.2f,
         .blur_p = 0.5f,
         .blur_sigma = {0.1f, 2.0f},
         .blur_kernel = {9, 9},
         .solarize_p = 0.2f,
         .solarize_threshold = 128.0f},
        {.policy = DLC__AUG_POLICY_AUTO_IMAGENET},
        {.policy = DLC__AUG_POLICY_TIMM_RAND,
         .num_ops = 3,
         .magnitude = 9.0f,
         .mstd = 0.5f,
         .magnitude_max = 10.0f,
         .increasing = 1,
         .op_prob = 0.5f,
         .fill = {124, 116, 104}},
    };
    const size_t n = dlc__aug_scratch_bound(W, H, C);
    void *scratch = malloc(n);
    uint8_t *px = random_pixels(W * H * C, 4);
    uint8_t a[W * H * C], b[W * H * C];
    int ops_seen[DLC__AUG_OP_COUNT] = {0};
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        cr_assert_eq(dlc__aug_config_check(&cfgs[k], "test"), DLC_OK);
        for (uint64_t s = 0; s < 300; s++) {
            dlc__rng r = {.key = dlc__mix64(s * 31 + k), .ctr = 0};
            dlc__aug_record rec;
            dlc__aug_draw(&cfgs[k], W, H, C, &r, &rec);
            memcpy(a, px, sizeof a);
            memcpy(b, px, sizeof b);
            cr_assert_eq(dlc__aug_apply(&rec, a, W * C, W, H, C, scratch, n), DLC_OK, "%s",
                         dlc_errmsg());
            for (uint32_t i = 0; i < rec.n; i++) {
                ops_seen[rec.ops[i].op]++;
                cr_assert_eq(dlc__aug_apply_op(&rec.ops[i], b, W * C, W, H, C, scratch, n), DLC_OK);
            }
            cr_assert_eq(memcmp(a, b, sizeof a), 0);
        }
    }
    /* The draws reached every op but the general affine (the policies use its named forms). */
    for (int op = 0; op < DLC__AUG_OP_COUNT; op++)
        if (op != DLC__AUG_AFFINE)
            cr_assert_gt(ops_seen[op], 0, "%s never drawn", dlc__aug_op_name((uint32_t)op));
    free(px);
    free(scratch);
}

static void flip_rows(uint8_t *p, uint32_t w, uint32_t h, uint32_t c)
{
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w / 2; x++)
            for (uint32_t k = 0; k < c; k++) {
                uint8_t *l = p + ((size_t)y * w + x) * c + k;
                uint8_t *r = p + ((size_t)y * w + (w - 1 - x)) * c + k;
                const uint8_t t = *l;
                *l = *r;
                *r = t;
            }
}

Test(aug_ops, records_said_to_commute_with_a_flip_do)
{
    /* The loader flips after the ops when dlc__aug_record_commutes_with_flip() says so: the
     * bytes must be those of flipping first. Records of every policy and of the jitter ops, on
     * an image wide enough for the vector kernels; the geometric ops and the blur never
     * commute. */
    enum { W = 70, H = 23, C = 3 };
    const dlc__aug_config cfgs[] = {
        {.policy = DLC__AUG_POLICY_TRIVIAL_WIDE, .num_magnitude_bins = 31},
        {.policy = DLC__AUG_POLICY_AUTO_IMAGENET},
        {.jitter_p = 1.0f,
         .brightness = {0.6f, 1.4f},
         .contrast = {0.6f, 1.4f},
         .saturation = {0.8f, 1.2f},
         .hue = {-0.1f, 0.1f},
         .grayscale_p = 0.2f,
         .blur_p = 0.3f,
         .blur_sigma = {0.1f, 2.0f},
         .blur_kernel = {9, 9},
         .solarize_p = 0.2f,
         .solarize_threshold = 128.0f},
    };
    const size_t n = dlc__aug_scratch_bound(W, H, C);
    void *scratch = malloc(n);
    uint8_t *px = random_pixels(W * H * C, 5);
    uint8_t a[W * H * C], b[W * H * C];
    int commuting = 0, not_commuting = 0;
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++)
        for (uint64_t s = 0; s < 200; s++) {
            dlc__rng r = {.key = dlc__mix64(s * 17 + k), .ctr = 0};
            dlc__aug_record rec;
            dlc__aug_draw(&cfgs[k], W, H, C, &r, &rec);
            int geometric_or_blur = 0;
            for (uint32_t i = 0; i < rec.n; i++)
                geometric_or_blur |=
                    rec.ops[i].op >= DLC__AUG_ROTATE || rec.ops[i].op == DLC__AUG_BLUR;
            if (!dlc__aug_record_commutes_with_flip(&rec)) {
                cr_assert(geometric_or_blur, "a record of color ops only is said not to commute");
                not_commuting++;
                continue;
            }
            cr_assert(!geometric_or_blur);
            commuting++;
            memcpy(a, px, sizeof a);
            memcpy(b, px, sizeof b);
            cr_assert_eq(dlc__aug_apply(&rec, a, W * C, W, H, C, scratch, n), DLC_OK);
            flip_rows(a, W, H, C);
            flip_rows(b, W, H, C);
            cr_assert_eq(dlc__aug_apply(&rec, b, W * C, W, H, C, scratch, n), DLC_OK);
            cr_assert_eq(memcmp(a, b, sizeof a), 0, "config %zu draw %llu", k,
                         (unsigned long long)s);
        }
    cr_assert_gt(commuting, 100);
    cr_assert_gt(not_commuting, 50);
    free(px);
    free(scratch);
}
