/* MixUp and CutMix on complete batches, soft targets, and progressive resizing (batchaug.h).
 *
 * The draw of a batch (mixed or not, MixUp or CutMix, lambda, the box) is a pure function of
 * (seed, epoch, rank, world size, batch index) on its own random stream, so it never changes a
 * sample's crop or flip, and the same draw serves the host path (here, by the worker that
 * completes the batch), the device path (loader/device.c, on the device after conversion) and
 * the caller (dlc_loader_mixup_params()). The arithmetic per element is common/convert_hd.h's,
 * shared with the CUDA kernel. */
#include "convert_hd.h"
#include "internal.h"

#include <assert.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <math.h>
#include <stdio.h>
#include <string.h>

/* A uniform double in (0, 1]: a safe argument for log(). */
static double uniform_open0(dlc__rng *r)
{
    return 1.0 - dlc__rng_uniform(r);
}

/* A standard normal draw (Box-Muller, one value per two uniforms). */
static double normal_draw(dlc__rng *r)
{
    const double u1 = uniform_open0(r), u2 = dlc__rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Gamma(a, 1) by Marsaglia and Tsang's method; a < 1 through Gamma(a + 1) * U^(1/a). */
static double gamma_draw(dlc__rng *r, double a)
{
    double boost = 1.0;
    if (a < 1.0) {
        boost = pow(uniform_open0(r), 1.0 / a);
        a += 1.0;
    }
    const double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    /* Accepts with probability above 0.95 per round; the bound only keeps the loop finite. */
    for (int round = 0; round < 1000; round++) {
        double x, v;
        do {
            x = normal_draw(r);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        const double u = uniform_open0(r);
        if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            return d * v * boost;
    }
    return d * boost;
}

/* Beta(a, a) as X / (X + Y) of two Gamma(a) draws. */
static double beta_draw(dlc__rng *r, double a)
{
    const double x = gamma_draw(r, a), y = gamma_draw(r, a);
    if (!(x + y > 0.0)) /* Both underflowed (a tiny alpha): the mass sits at 0 and 1. */
        return dlc__rng_uniform(r) < 0.5 ? 0.0 : 1.0;
    return x / (x + y);
}

/* The draw itself, on its arguments only. */
static void draw(float mixup, float cutmix, float mix_prob, float switch_prob, uint64_t seed,
                 uint64_t epoch, uint32_t rank, uint32_t world, uint64_t batch_index, uint32_t h,
                 uint32_t w, dlc_mixup_params *out)
{
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->lam = 1.0;
    if (!(mixup > 0) && !(cutmix > 0))
        return;
    const uint64_t who = (uint64_t)rank << 32 | world;
    dlc__rng r = {dlc__key4(DLC__KEY_MIXUP, seed, epoch, dlc__key4(batch_index, who, 0, 0)), 0};
    /* timm's Mixup._params_per_batch(), in its order of draws. */
    if (!(dlc__rng_uniform(&r) < mix_prob))
        return;
    int cut;
    double lam;
    if (mixup > 0 && cutmix > 0) {
        cut = dlc__rng_uniform(&r) < switch_prob;
        lam = beta_draw(&r, cut ? cutmix : mixup);
    } else if (mixup > 0) {
        cut = 0;
        lam = beta_draw(&r, mixup);
    } else {
        cut = 1;
        lam = beta_draw(&r, cutmix);
    }
    if (lam == 1.0) /* timm mixes nothing then. */
        return;
    if (!cut) {
        out->mode = 1;
        out->lam = lam;
        return;
    }
    /* timm's rand_bbox() and cutmix_bbox_and_lam(correct_lam=True). */
    const double ratio = sqrt(1.0 - lam);
    const int64_t cut_h = (int64_t)(h * ratio), cut_w = (int64_t)(w * ratio);
    const int64_t cy = (int64_t)dlc__rng_below(&r, h), cx = (int64_t)dlc__rng_below(&r, w);
#define CLIP(v, hi) ((v) < 0 ? 0 : (v) > (int64_t)(hi) ? (int64_t)(hi) : (v))
    const int64_t yl = CLIP(cy - cut_h / 2, h), yh = CLIP(cy + cut_h / 2, h);
    const int64_t xl = CLIP(cx - cut_w / 2, w), xh = CLIP(cx + cut_w / 2, w);
#undef CLIP
    out->mode = 2;
    out->box[0] = (uint32_t)yl, out->box[1] = (uint32_t)yh;
    out->box[2] = (uint32_t)xl, out->box[3] = (uint32_t)xh;
    out->lam = 1.0 - (double)((yh - yl) * (xh - xl)) / ((double)h * (double)w);
}

void dlc__mixup_draw(const dlc_loader *l, uint64_t seed, uint64_t epoch, uint64_t batch_index,
                     uint32_t h, uint32_t w, dlc_mixup_params *out)
{
    const dlc_loader_config *c = &l->cfg;
    draw(c->mixup_alpha, c->cutmix_alpha, c->mix_prob, c->switch_prob, seed, epoch, c->rank,
         c->world_size, batch_index, h, w, out);
}

/* Copy @p p into the caller's @p out, up to its struct_size, which must be one the struct had
 * (status.h, "How structs grow"): a size between two fields would write half of one. */
static dlc_status give_params(const dlc_mixup_params *p, dlc_mixup_params *out, const char *fn)
{
    const dlc_status rc = dlc__result_give(out, p, sizeof *p, "dlc_mixup_params");
    if (rc != DLC_OK) {
        char why[256];
        snprintf(why, sizeof why, "%s", dlc_errmsg());
        return dlc__errorf(rc, "%s: %s", fn, why);
    }
    return DLC_OK;
}

dlc_status dlc_loader_mixup_params(const dlc_loader *l, uint64_t epoch, uint64_t batch_index,
                                   uint32_t height, uint32_t width, dlc_mixup_params *out)
{
    if (!l || !out || !height || !width)
        return dlc__errorf(DLC_EINVAL, "dlc_loader_mixup_params: a loader, a size and out needed");
    dlc_mixup_params p;
    dlc__mixup_draw(l, l->sampler.seed, epoch, batch_index, height, width, &p);
    return give_params(&p, out, "dlc_loader_mixup_params");
}

dlc_status dlc_mixup_draw(float mixup_alpha, float cutmix_alpha, float mix_prob, float switch_prob,
                          uint64_t seed, uint64_t epoch, uint32_t rank, uint32_t world_size,
                          uint64_t batch_index, uint32_t height, uint32_t width,
                          dlc_mixup_params *out)
{
    if (!out || !height || !width || !world_size || rank >= world_size)
        return dlc__errorf(DLC_EINVAL, "dlc_mixup_draw: out, a size and a rank below the world "
                                       "size needed");
    if (!(mixup_alpha >= 0 && mixup_alpha <= 1e6f) ||
        !(cutmix_alpha >= 0 && cutmix_alpha <= 1e6f) || !(mix_prob >= 0 && mix_prob <= 1) ||
        !(switch_prob >= 0 && switch_prob <= 1))
        return dlc__errorf(DLC_EINVAL, "dlc_mixup_draw: alphas in [0, 1e6], probabilities in "
                                       "[0, 1]");
    dlc_mixup_params p;
    draw(mixup_alpha, cutmix_alpha, mix_prob, switch_prob, seed, epoch, rank, world_size,
         batch_index, height, width, &p);
    return give_params(&p, out, "dlc_mixup_draw");
}

/* The outputs of the default view group that resizing changes (images and masks). */
static int resized(const dlc__output *o)
{
    return (o->op == DLC__OUT_IMAGE || o->op == DLC__OUT_MASK) && o->group == 0;
}

/* Give the outputs of the default group @p h x @p w (within the room planned at open). */
static void apply_resolution(dlc_loader *l, uint32_t h, uint32_t w)
{
    dlc__batchaug *ba = &l->ba;
    assert(h <= ba->max_h && w <= ba->max_w);
    l->groups[0].crop_h = h;
    l->groups[0].crop_w = w;
    for (uint32_t i = 0; i < l->nout; i++) {
        dlc__output *o = &l->out[i];
        if (!resized(o))
            continue;
        o->out_h = h;
        o->out_w = w;
        o->view_bytes = (size_t)h * w * o->out_c * dlc_dtype_size(o->dtype);
        o->sample_cap = o->view_bytes * l->groups[0].count;
        const uint64_t hwc[3] = {h, w, o->out_c}, chw[3] = {o->out_c, h, w};
        memcpy(o->dims, o->layout == DLC_LAYOUT_NHWC ? hwc : chw, sizeof hwc);
    }
    ba->cur_h = h;
    ba->cur_w = w;
}

dlc_status dlc__batchaug_prepare(dlc_loader *l)
{
    dlc_loader_config *c = &l->cfg;
    dlc__batchaug *ba = &l->ba;
    dlc_status rc = DLC_OK;
    ba->label_out = -1;
    if (!c->max_crop_h && !c->max_crop_w)
        return DLC_OK;
    FAIL_IF(c->views && c->num_views, DLC_EINVAL,
            "%s: config.max_crop_h/max_crop_w (progressive resizing) apply to one view group; "
            "config.views has %u",
            l->path, c->num_views);
    FAIL_IF(!c->crop_h || !c->crop_w, DLC_EINVAL,
            "%s: config.max_crop_h/max_crop_w (progressive resizing) need a crop size, not the "
            "store's (crop_h/crop_w = 0)",
            l->path);
    ba->max_h = c->max_crop_h ? c->max_crop_h : c->crop_h;
    ba->max_w = c->max_crop_w ? c->max_crop_w : c->crop_w;
    FAIL_IF(ba->max_h > 65536 || ba->max_w > 65536 || ba->max_h < c->crop_h ||
                ba->max_w < c->crop_w,
            DLC_EINVAL,
            "%s: config.max_crop_h x max_crop_w = %ux%u must hold the crop %ux%u and be at most "
            "65536 a side",
            l->path, ba->max_h, ba->max_w, c->crop_h, c->crop_w);
    ba->cur_h = c->crop_h;
    ba->cur_w = c->crop_w;
    /* Planned (and checked against the store) at the largest size; shrunk after the arena. */
    c->crop_h = ba->max_h;
    c->crop_w = ba->max_w;
fail:
    return rc;
}

/* The image dtype the caller gets (the device path converts uint8 slots on the device). */
static uint32_t image_dtype(const dlc_loader *l)
{
    return dlc__dev_dtype(l);
}

dlc_status dlc__batchaug_plan(dlc_loader *l)
{
    dlc_loader_config *c = &l->cfg;
    dlc__batchaug *ba = &l->ba;
    dlc_status rc = DLC_OK;
#if defined(__x86_64__) || defined(__i386__)
    /* Once, at open: CPUID is a VM exit under a hypervisor, too dear per image pair; and
     * clang's __builtin_cpu_supports() knows no "f16c". */
    unsigned ca, cb, cc, cd;
    ba->simd16 = __builtin_cpu_supports("avx2") && __get_cpuid(1, &ca, &cb, &cc, &cd) &&
                 (cc & bit_F16C) != 0;
#endif
    FAIL_IF(!(c->mixup_alpha >= 0 && c->mixup_alpha <= 1e6f) ||
                !(c->cutmix_alpha >= 0 && c->cutmix_alpha <= 1e6f),
            DLC_EINVAL, "%s: config.mixup_alpha = %g and cutmix_alpha = %g must be in [0, 1e6]",
            l->path, c->mixup_alpha, c->cutmix_alpha);
    FAIL_IF(!(c->mix_prob >= 0 && c->mix_prob <= 1) ||
                !(c->switch_prob >= 0 && c->switch_prob <= 1),
            DLC_EINVAL, "%s: config.mix_prob = %g and switch_prob = %g must be in [0, 1]", l->path,
            c->mix_prob, c->switch_prob);
    FAIL_IF(!(c->label_smoothing >= 0 && c->label_smoothing < 1), DLC_EINVAL,
            "%s: config.label_smoothing = %g must be in [0, 1)", l->path, c->label_smoothing);
    ba->mixing = c->mixup_alpha > 0 || c->cutmix_alpha > 0;
    ba->soft = ba->mixing || c->label_smoothing > 0;
    if (!ba->soft) {
        FAIL_IF(c->num_classes, DLC_EINVAL,
                "%s: config.num_classes = %u is for soft targets: set mixup_alpha, cutmix_alpha "
                "or label_smoothing",
                l->path, c->num_classes);
        return DLC_OK;
    }
    const uint32_t lf = l->info->label_field;
    FAIL_IF(lf == DLC_NO_FIELD, DLC_EINVAL,
            "%s: MixUp, CutMix and label smoothing make soft targets from the label, and the "
            "store has no label field",
            l->path);
    for (uint32_t i = 0; i < l->nout; i++)
        if (l->out[i].field == lf && l->out[i].op == DLC__OUT_SCALAR)
            ba->label_out = (int)i;
    FAIL_IF(ba->label_out < 0, DLC_EINVAL,
            "%s: MixUp, CutMix and label smoothing make soft targets from field \"%s\", which "
            "config.fields leaves out",
            l->path, l->fields[lf].name);
    ba->classes = c->num_classes ? c->num_classes : l->info->num_labels;
    FAIL_IF(ba->classes < 2 || ba->classes > 65536, DLC_EINVAL,
            "%s: soft targets need num_classes in 2..65536 (config.num_classes = %u, the store "
            "has %u labels)",
            l->path, c->num_classes, l->info->num_labels);
    if (ba->mixing) {
        FAIL_IF(image_dtype(l) == DLC_DTYPE_UINT8, DLC_EINVAL,
                "%s: MixUp and CutMix mix normalized images: set config.dtype to float32, "
                "float16 or bfloat16 (uint8 pixels are not mixed)",
                l->path);
        FAIL_IF(l->ngroups != 1 || l->groups[0].name[0], DLC_EINVAL,
                "%s: MixUp and CutMix mix one view per sample; config.views has %u groups", l->path,
                l->ngroups);
    }
    /* timm's mixup_target(): the values as Python computes them in double, then float32. */
    const double off = c->label_smoothing / ba->classes;
    ba->off = (float)off;
    ba->on = (float)(1.0 - c->label_smoothing + off);
    /* The workers still write the int64 label (8 bytes, inside the 4 x classes of a sample);
     * the worker completing the batch writes the targets over them. */
    dlc__output *o = &l->out[ba->label_out];
    o->dtype = DLC_DTYPE_FLOAT32;
    o->ndim = 1;
    o->dims[0] = ba->classes;
    o->sample_cap = (size_t)ba->classes * 4;
fail:
    return rc;
}

void dlc__batchaug_sized(dlc_loader *l)
{
    dlc__batchaug *ba = &l->ba;
    if (!ba->max_h)
        return;
    l->cfg.crop_h = ba->cur_h;
    l->cfg.crop_w = ba->cur_w;
    apply_resolution(l, ba->cur_h, ba->cur_w);
}

void dlc__batchaug_reset(dlc_loader *l)
{
    dlc__batchaug *ba = &l->ba;
    if (!ba->pend_h)
        return;
    apply_resolution(l, ba->pend_h, ba->pend_w);
    ba->pend_h = ba->pend_w = 0;
}

dlc_status dlc_loader_set_resolution(dlc_loader *l, uint32_t height, uint32_t width)
{
    if (!l)
        return dlc__errorf(DLC_EINVAL, "dlc_loader_set_resolution: NULL loader");
    dlc__batchaug *ba = &l->ba;
    if (!ba->max_h)
        return dlc__errorf(DLC_EINVAL,
                           "%s: dlc_loader_set_resolution() needs config.max_crop_h/max_crop_w "
                           "(the largest size, which the slots are sized for) at open",
                           l->path);
    if (!height || !width || height > ba->max_h || width > ba->max_w)
        return dlc__errorf(DLC_EINVAL,
                           "%s: resolution %ux%u (height x width) must be 1..%u x 1..%u "
                           "(config.max_crop_h x max_crop_w)",
                           l->path, height, width, ba->max_h, ba->max_w);
    /* The ops were checked at open against the largest size: a blur kernel too large for a
     * smaller one is refused here, not at the first record of that epoch. */
    if (l->groups[0].aug_on) {
        for (uint32_t i = 0; i < l->nout; i++) {
            const dlc__output *o = &l->out[i];
            if (!resized(o) || o->op != DLC__OUT_IMAGE)
                continue;
            char label[160];
            snprintf(label, sizeof label, "%s: resolution %ux%u: field \"%s\"", l->path, height,
                     width, l->fields[o->field].name);
            const dlc_status rc =
                dlc__aug_config_check_image(&l->groups[0].aug, width, height, o->out_c, label);
            if (rc != DLC_OK)
                return rc;
        }
    }
    ba->pend_h = height;
    ba->pend_w = width;
    return DLC_OK;
}

/* Swap @p n bytes at @p a and @p b (not overlapping). */
static void swap_bytes(uint8_t *a, uint8_t *b, size_t n)
{
    uint8_t t[1024];
    for (size_t at = 0; at < n; at += sizeof t) {
        const size_t k = n - at < sizeof t ? n - at : sizeof t;
        memcpy(t, a + at, k);
        memcpy(a + at, b + at, k);
        memcpy(b + at, t, k);
    }
}

/* MixUp of float32 images @p a and @p b (n elements each): both written from both old values;
 * @p a == @p b is the middle image of an odd batch, mixed with itself. */
static void mix_f32_pair(float *a, float *b, size_t n, float lam, float oml)
{
    if (a == b) {
        for (size_t i = 0; i < n; i++)
            a[i] = dlc__hd_mix_f32(a[i], a[i], lam, oml);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const float x = a[i], y = b[i];
        a[i] = dlc__hd_mix_f32(x, y, lam, oml);
        b[i] = dlc__hd_mix_f32(y, x, lam, oml);
    }
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "simd16.h"
#define MIX_TARGET DLC__SIMD16_TARGET

/* Eight 16-bit values as floats: exact for both types. */
static inline MIX_TARGET __m256 dec16x8(__m128i v, const int bf)
{
    if (!bf)
        return _mm256_cvtph_ps(v);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

/* Eight floats rounded to nearest even to binary16 (F16C) or bfloat16 (dlc__hd_f32_to_bf16()'s
 * integer rounding; mixed normalized pixels are never NaN). */

/* dlc__hd_mix_16(x, y) for eight values: each product rounded to the type, then the sum. */
static inline MIX_TARGET __m128i mix16x8(__m256 x, __m256 y, __m256 l, __m256 m, const int bf)
{
    const __m256 px = dec16x8(dlc__f32x8_to_16(_mm256_mul_ps(x, l), bf), bf);
    const __m256 py = dec16x8(dlc__f32x8_to_16(_mm256_mul_ps(y, m), bf), bf);
    return dlc__f32x8_to_16(_mm256_add_ps(px, py), bf);
}

static MIX_TARGET void mix16_pair_avx2(uint16_t *a, uint16_t *b, size_t n, float lam, float oml,
                                       uint32_t dtype)
{
    const int bf = dtype == DLC__HD_BFLOAT16;
    const __m256 l = _mm256_set1_ps(lam), m = _mm256_set1_ps(oml);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i va = _mm_loadu_si128((const __m128i *)(a + i));
        const __m128i vb = _mm_loadu_si128((const __m128i *)(b + i));
        const __m256 x = dec16x8(va, bf), y = dec16x8(vb, bf);
        const __m128i ra = mix16x8(x, y, l, m, bf);
        if (a != b)
            _mm_storeu_si128((__m128i *)(b + i), mix16x8(y, x, l, m, bf));
        _mm_storeu_si128((__m128i *)(a + i), ra);
    }
    for (; i < n; i++) {
        const uint16_t x = a[i], y = b[i];
        a[i] = dlc__hd_mix_16(x, y, lam, oml, dtype);
        b[i] = a == b ? a[i] : dlc__hd_mix_16(y, x, lam, oml, dtype);
    }
}
#endif

/* MixUp of 16-bit images @p a and @p b, as mix_f32_pair(). */
static void mix16_pair(uint16_t *a, uint16_t *b, size_t n, float lam, float oml, uint32_t dtype,
                       int simd)
{
#if defined(__x86_64__) || defined(__i386__)
    if (simd) {
        mix16_pair_avx2(a, b, n, lam, oml, dtype);
        return;
    }
#else
    (void)simd;
#endif
    for (size_t i = 0; i < n; i++) {
        const uint16_t x = a[i], y = b[i];
        a[i] = dlc__hd_mix_16(x, y, lam, oml, dtype);
        if (a != b)
            b[i] = dlc__hd_mix_16(y, x, lam, oml, dtype);
    }
}

/* MixUp or CutMix of one image output of a complete host batch, in place: the values of
 * dlc__hd_mix_at() (the device's function), in loops over whole images and box rows. */
static void mix_images(const dlc__output *o, uint8_t *data, uint32_t n, const dlc_mixup_params *p,
                       int simd)
{
    const size_t es = dlc_dtype_size(o->dtype);
    const size_t per = (size_t)o->out_h * o->out_w * o->out_c;
    assert(o->sample_cap == per * es);
    const float lam = (float)p->lam, oml = (float)(1.0 - p->lam);
    if (p->mode == 1) {
        for (uint32_t k = 0; k < (n + 1) / 2; k++) {
            uint8_t *a = data + (size_t)k * per * es, *b = data + (size_t)(n - 1 - k) * per * es;
            if (o->dtype == DLC_DTYPE_FLOAT32)
                mix_f32_pair((float *)a, (float *)b, per, lam, oml);
            else
                mix16_pair((uint16_t *)a, (uint16_t *)b, per, lam, oml, o->dtype, simd);
        }
        return;
    }
    /* CutMix: the box's rows of every plane (NCHW) or of the pixels (NHWC) are swapped. */
    const uint32_t y0 = p->box[0], y1 = p->box[1], x0 = p->box[2], x1 = p->box[3];
    if (x1 <= x0 || y1 <= y0)
        return;
    const int nchw = o->layout == DLC_LAYOUT_NCHW;
    const uint32_t planes = nchw ? o->out_c : 1, C = nchw ? 1 : o->out_c;
    const size_t row = (size_t)o->out_w * C * es, plane = row * o->out_h;
    const size_t span = (size_t)(x1 - x0) * C * es, skip = (size_t)x0 * C * es;
    for (uint32_t k = 0; k < n / 2; k++) {
        uint8_t *a = data + (size_t)k * per * es, *b = data + (size_t)(n - 1 - k) * per * es;
        for (uint32_t pl = 0; pl < planes; pl++)
            for (uint32_t y = y0; y < y1; y++) {
                const size_t at = pl * plane + y * row + skip;
                swap_bytes(a + at, b + at, span);
            }
    }
}

void dlc__batchaug_complete(dlc_loader *l, dlc__slot *s)
{
    const dlc__batchaug *ba = &l->ba;
    if (!ba->soft)
        return;
    const uint32_t n = s->count, K = ba->classes;
    for (uint32_t j = 0; j < n; j++) {
        if (s->labels[j] >= 0 && s->labels[j] < (int64_t)K)
            continue;
        char msg[512];
        snprintf(msg, sizeof msg,
                 "%s: record %llu: label %lld is outside 0..%u, the classes of the soft targets "
                 "(num_classes)",
                 l->path, (unsigned long long)s->indices[j], (long long)s->labels[j], K - 1);
        dlc__slot_fail(l, s, j, DLC_EINVAL, msg);
        return;
    }
    uint32_t h = ba->cur_h, w = ba->cur_w;
    if (!h && l->first_image >= 0)
        h = l->out[l->first_image].out_h, w = l->out[l->first_image].out_w;
    dlc_mixup_params p;
    dlc__mixup_draw(l, s->seed, s->epoch, l->batch_base + s->batch, h ? h : 1, w ? w : 1, &p);
    const float lam = (float)p.lam, oml = (float)(1.0 - p.lam);
    float *t = (float *)s->out[ba->label_out].data;
    for (uint32_t j = 0; j < n; j++) {
        const int64_t a = s->labels[j], b = s->labels[n - 1 - j];
        for (uint32_t k = 0; k < K; k++)
            t[(size_t)j * K + k] =
                dlc__hd_mix_f32(k == a ? ba->on : ba->off, k == b ? ba->on : ba->off, lam, oml);
    }
    if (!p.mode || l->dev)
        return; /* The device path mixes the images after converting them (device.c). */
    for (uint32_t i = 0; i < l->nout; i++)
        if (l->out[i].op == DLC__OUT_IMAGE)
            mix_images(&l->out[i], s->out[i].data, n, &p, l->ba.simd16);
}
