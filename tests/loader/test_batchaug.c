/* loader/batchaug.c and the MixUp arithmetic of common/convert_hd.h: the per-batch draw follows
 * timm's Mixup (Beta's moments, mix_prob, switch_prob, CutMix's lambda corrected to the pasted
 * area) and is a pure function of its keys; soft targets and mixed images of a host batch; the
 * 16-bit conversions round as torch does; progressive resizing refuses what does not fit. */
#include "convert_hd.h"
#include "internal.h"
#include "loader_fixture.h"

#include <math.h>

static dlc_loader *open_mix(const char *path, float mixup, float cutmix, float prob, float sw)
{
    dlc_loader_config c = fx_config();
    c.dtype = DLC_DTYPE_FLOAT32;
    c.mixup_alpha = mixup;
    c.cutmix_alpha = cutmix;
    c.mix_prob = prob;
    c.switch_prob = sw;
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(path, &c, &l), DLC_OK, "%s", dlc_errmsg());
    return l;
}

static dlc_mixup_params draw(const dlc_loader *l, uint64_t epoch, uint64_t b, uint32_t h,
                             uint32_t w)
{
    dlc_mixup_params p = {.struct_size = sizeof p};
    cr_assert_eq(dlc_loader_mixup_params(l, epoch, b, h, w, &p), DLC_OK, "%s", dlc_errmsg());
    return p;
}

Test(batchaug, mixup_lambda_has_the_moments_of_beta)
{
    fx_dir d;
    fx_make_store(&d, 16, 20, 18, 5, 0);
    const float alphas[] = {0.2f, 0.8f, 1.0f, 4.0f};
    for (int k = 0; k < 4; k++) {
        dlc_loader *l = open_mix(d.path, alphas[k], 0, 1, 0.5f);
        const int n = 4000;
        double sum = 0, sq = 0;
        for (int i = 0; i < n; i++) {
            const dlc_mixup_params p = draw(l, 3, (uint64_t)i, 12, 10);
            cr_assert(p.mode == 1 || (p.mode == 0 && p.lam == 1.0));
            cr_assert(p.lam >= 0 && p.lam <= 1);
            sum += p.lam;
            sq += p.lam * p.lam;
        }
        const double mean = sum / n, var = sq / n - mean * mean;
        const double want_var = 1.0 / (4.0 * (2.0 * alphas[k] + 1.0));
        cr_assert(fabs(mean - 0.5) < 0.02, "alpha %g: mean %g", alphas[k], mean);
        cr_assert(fabs(var - want_var) < 0.1 * want_var, "alpha %g: variance %g, Beta's %g",
                  alphas[k], var, want_var);
        dlc_loader_close(l);
    }
    fx_rmdir(&d);
}

Test(batchaug, mix_prob_switch_prob_and_cutmix_area)
{
    fx_dir d;
    fx_make_store(&d, 16, 20, 18, 5, 0);
    dlc_loader *l = open_mix(d.path, 0.8f, 1.0f, 0.6f, 0.25f);
    const int n = 4000;
    int mixed = 0, cut = 0;
    for (int i = 0; i < n; i++) {
        const dlc_mixup_params p = draw(l, 0, (uint64_t)i, 31, 17);
        mixed += p.mode != 0;
        if (p.mode != 2)
            continue;
        cut++;
        const uint32_t *b = p.box;
        cr_assert(b[0] <= b[1] && b[1] <= 31 && b[2] <= b[3] && b[3] <= 17);
        /* timm's correct_lam: lambda is what is left of the image outside the pasted box. */
        cr_assert_eq(p.lam, 1.0 - (double)((b[1] - b[0]) * (b[3] - b[2])) / (31.0 * 17.0));
    }
    cr_assert(fabs((double)mixed / n - 0.6) < 0.03, "mixed %d of %d", mixed, n);
    cr_assert(fabs((double)cut / mixed - 0.25) < 0.03, "cutmix %d of %d", cut, mixed);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

Test(batchaug, the_draw_is_a_pure_function_of_its_keys)
{
    fx_dir d;
    fx_make_store(&d, 16, 20, 18, 5, 0);
    dlc_loader *a = open_mix(d.path, 0.8f, 1.0f, 1, 0.5f);
    dlc_loader *b = open_mix(d.path, 0.8f, 1.0f, 1, 0.5f);
    dlc_loader_config c = fx_config();
    c.dtype = DLC_DTYPE_FLOAT32;
    c.mixup_alpha = 0.8f;
    c.cutmix_alpha = 1.0f;
    c.world_size = 2;
    c.rank = 1;
    dlc_loader *r1 = NULL;
    cr_assert_eq(dlc_loader_open(d.path, &c, &r1), DLC_OK, "%s", dlc_errmsg());
    int differ_epoch = 0, differ_rank = 0;
    for (uint64_t i = 0; i < 64; i++) {
        const dlc_mixup_params x = draw(a, 1, i, 12, 10), y = draw(b, 1, i, 12, 10);
        cr_assert_eq(memcmp(&x, &y, sizeof x), 0, "batch %llu", (unsigned long long)i);
        differ_epoch += draw(a, 2, i, 12, 10).lam != x.lam;
        differ_rank += draw(r1, 1, i, 12, 10).lam != x.lam;
    }
    cr_assert_gt(differ_epoch, 48);
    cr_assert_gt(differ_rank, 48);
    dlc_loader_close(r1);
    dlc_loader_close(b);
    dlc_loader_close(a);
    fx_rmdir(&d);
}

/* A host batch: the targets sum to 1 with the smoothed one-hot values, and sample j's image is
 * lam x_j + (1 - lam) x_{N-1-j} of the unmixed loader's batch (MixUp only here). */
Test(batchaug, host_batch_targets_and_images)
{
    fx_dir d;
    fx_make_store(&d, 37, 20, 18, 5, 0);
    dlc_loader_config c = fx_config();
    c.dtype = DLC_DTYPE_FLOAT32;
    dlc_loader *plain = NULL, *mixed = NULL;
    cr_assert_eq(dlc_loader_open(d.path, &c, &plain), DLC_OK, "%s", dlc_errmsg());
    c.mixup_alpha = 0.5f;
    c.label_smoothing = 0.2;
    cr_assert_eq(dlc_loader_open(d.path, &c, &mixed), DLC_OK, "%s", dlc_errmsg());
    for (;;) {
        dlc_batch pb, mb;
        const dlc_status rc = dlc_loader_next(plain, &pb);
        cr_assert_eq(dlc_loader_next(mixed, &mb), rc);
        if (rc == DLC_END)
            break;
        cr_assert_eq(rc, DLC_OK);
        const dlc_mixup_params p = draw(mixed, mb.epoch, mb.batch_index, 12, 10);
        const float lam = (float)p.lam, oml = (float)(1.0 - p.lam);
        const uint32_t n = mb.count;
        const size_t per = 3 * 12 * 10;
        const float *x = pb.data, *y = mb.data;
        for (uint32_t j = 0; j < n; j++)
            for (size_t e = 0; e < per; e++) {
                const float want = x[j * per + e] * lam + x[(n - 1 - j) * per + e] * oml;
                cr_assert_eq(memcmp(&want, &y[j * per + e], 4), 0, "sample %u element %zu", j, e);
            }
        const dlc_batch_field *t = NULL;
        for (uint32_t i = 0; i < mb.num_fields; i++)
            if (mb.fields[i].kind == DLC_FIELD_INT)
                t = &mb.fields[i];
        cr_assert_not_null(t);
        cr_assert_eq(t->dtype, DLC_DTYPE_FLOAT32);
        cr_assert_eq(t->ndim, 2);
        cr_assert_eq(t->shape[1], 5);
        const float *tv = t->data;
        for (uint32_t j = 0; j < n; j++) {
            double sum = 0;
            for (int k = 0; k < 5; k++)
                sum += tv[j * 5 + k];
            cr_assert(fabs(sum - 1.0) < 1e-6, "sample %u sums to %g", j, sum);
            const float on = 1.0f - 0.2f + 0.04f, off = 0.04f;
            const int64_t a = mb.labels[j], b = mb.labels[n - 1 - j];
            const float want = (a == b ? on : off) * oml + on * lam;
            cr_assert(fabs(tv[j * 5 + a] - want) < 1e-6);
        }
    }
    dlc_loader_close(mixed);
    dlc_loader_close(plain);
    fx_rmdir(&d);
}

Test(batchaug, refusals_are_named)
{
    fx_dir d;
    fx_make_store(&d, 16, 20, 18, 5, 0);
    dlc_loader_config c = fx_config();
    dlc_loader *l = NULL;
    c.mixup_alpha = 0.2f; /* uint8 output */
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "uint8"), "%s", dlc_errmsg());
    c.dtype = DLC_DTYPE_FLOAT16;
    c.switch_prob = 1.5f;
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "switch_prob"), "%s", dlc_errmsg());
    c.switch_prob = 0.5f;
    c.num_classes = 1;
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "num_classes"), "%s", dlc_errmsg());
    /* Resizing: only with room planned at open, and within it. */
    c = fx_config();
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_loader_set_resolution(l, 8, 8), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "max_crop_h"), "%s", dlc_errmsg());
    dlc_loader_close(l);
    c.max_crop_h = 16;
    c.max_crop_w = 14;
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_loader_set_resolution(l, 17, 8), DLC_EINVAL);
    cr_assert_eq(dlc_loader_set_resolution(l, 16, 14), DLC_OK);
    cr_assert_eq(dlc_loader_set_epoch(l, 1), DLC_OK);
    dlc_batch b;
    cr_assert_eq(dlc_loader_next(l, &b), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(b.shape[1], 16);
    cr_assert_eq(b.shape[2], 14);
    cr_assert_eq(b.bytes, (size_t)b.count * 16 * 14 * 3);
    dlc_loader_close(l);
    c.max_crop_h = 24; /* A plain crop must fit the 20 x 18 images. */
    cr_assert_eq(dlc_loader_open(d.path, &c, &l), DLC_EINVAL);
    fx_rmdir(&d);
}

/* binary16 decoding is exact (every finite pattern round-trips); bfloat16 rounds to nearest
 * even, keeps NaN a NaN and overflows to infinity, as torch's .to(torch.bfloat16). */
Test(batchaug, sixteen_bit_conversions)
{
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
            continue; /* NaN payloads need not survive. */
        cr_assert_eq(dlc__hd_f32_to_f16(dlc__hd_f16_to_f32((uint16_t)h)), h, "0x%04x", h);
        cr_assert_eq(dlc__hd_f32_to_bf16(dlc__hd_16_to_f32((uint16_t)h, DLC__HD_BFLOAT16)), h,
                     "bf16 0x%04x", h);
    }
    const struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x3f808000u, 0x3f80u}, /* A tie to the even 0x3f80. */
        {0x3f818000u, 0x3f82u}, /* A tie to the even 0x3f82. */
        {0x3f808001u, 0x3f81u}, /* Above the tie. */
        {0x7f7fffffu, 0x7f80u}, /* The largest float rounds to infinity. */
        {0xff800000u, 0xff80u}, /* -inf */
        {0x00000001u, 0x0000u}, /* The smallest subnormal rounds to zero. */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float f;
        memcpy(&f, &cases[i].in, 4);
        cr_assert_eq(dlc__hd_f32_to_bf16(f), cases[i].out, "0x%08x", cases[i].in);
    }
    const float nan = NAN;
    const uint16_t b = dlc__hd_f32_to_bf16(nan);
    cr_assert((b & 0x7f80u) == 0x7f80u && (b & 0x7fu), "NaN gave 0x%04x", b);
}
