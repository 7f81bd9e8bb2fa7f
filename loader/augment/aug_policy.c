/* Drawing one sample's ops: torchvision 0.14's TrivialAugmentWide, RandAugment (with timm's
 * magnitude noise) and AutoAugment's ImageNet policy (autoaugment.py), then ColorJitter,
 * RandomGrayscale, GaussianBlur and RandomSolarize (transforms.py), from the sample's counter-based
 * stream instead of torch's generator: the same distributions, not the same numbers.
 *
 * Each drawn op becomes the record entry that torchvision's _apply_op would run: Brightness,
 * Color, Contrast and Sharpness give the factor 1 + magnitude, ShearX/Y an affine shear of
 * degrees(atan(magnitude)) about the corner (0, 0), TranslateX/Y a translation of int(magnitude)
 * pixels, Posterize int(magnitude) bits. The signed magnitude itself is kept in the entry (a
 * negative sign of a zero magnitude as -0.0, so a record shows every draw). */
#include "aug_internal.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* The op names of torchvision's _augmentation_space() dicts, in their order (the order is what
 * torch.randint indexes). */
enum {
    P_IDENTITY,
    P_SHEAR_X,
    P_SHEAR_Y,
    P_TRANSLATE_X,
    P_TRANSLATE_Y,
    P_ROTATE,
    P_BRIGHTNESS,
    P_COLOR,
    P_CONTRAST,
    P_SHARPNESS,
    P_POSTERIZE,
    P_SOLARIZE,
    P_AUTOCONTRAST,
    P_EQUALIZE,
    P_INVERT, /* AutoAugment only. */
};

/* The 14 ops of RandAugment and TrivialAugmentWide, in dict order. */
#define N_SPACE 14u

static int signed_op(int p)
{
    return p >= P_SHEAR_X && p <= P_SHARPNESS;
}

static int has_magnitude(int p)
{
    return p >= P_SHEAR_X && p <= P_SOLARIZE;
}

/* torch.linspace(start, end, steps)[i] in float32, as ATen's scalar loop computes it: from the
 * start for the first half, from the end for the second. Its vectorized loop (AVX2, AVX-512) adds
 * the step to each chunk's first value instead, so some magnitudes differ there by one float ulp,
 * and from one machine's torch to another's: within the ops' tolerance of 1 on a pixel. */
static float linspace_f32(float start, float end, uint32_t steps, uint32_t i)
{
    if (steps == 1)
        return start;
    const float step = (end - start) / (float)(steps - 1);
    const uint32_t halfway = steps / 2;
    return i < halfway ? start + step * (float)i : end - step * (float)(steps - i - 1);
}

/* The largest magnitude of op @p p: the end of its linspace (Solarize's start). */
static float space_max(uint32_t policy, int p, uint32_t width, uint32_t height)
{
    const int wide = policy == DLC__AUG_POLICY_TRIVIAL_WIDE;
    switch (p) {
    case P_SHEAR_X:
    case P_SHEAR_Y:
        return wide ? 0.99f : 0.3f;
    case P_TRANSLATE_X:
        return wide ? 32.0f : (float)(150.0 / 331.0 * width);
    case P_TRANSLATE_Y:
        return wide ? 32.0f : (float)(150.0 / 331.0 * height);
    case P_ROTATE:
        return wide ? 135.0f : 30.0f;
    default:
        return wide ? 0.99f : 0.9f; /* Brightness, Color, Contrast, Sharpness. */
    }
}

/* The unsigned magnitude of op @p p at bin @p level of @p bins (a whole bin: torchvision's
 * table entry; a fraction, with timm's noise: the table's line between the bins, Posterize's
 * rounding at the fractional position). */
static float magnitude_at(uint32_t policy, int p, double level, uint32_t bins, uint32_t width,
                          uint32_t height)
{
    const int whole = level == floor(level);
    const uint32_t i = (uint32_t)level;
    if (p == P_POSTERIZE) {
        /* 8 - (arange(bins) / ((bins - 1) / d)).round().int(), d = 6 (wide) or 4; the division
         * of an integer tensor by a Python float is float32. */
        const float d = (float)((bins - 1) / (policy == DLC__AUG_POLICY_TRIVIAL_WIDE ? 6.0 : 4.0));
        const float q = whole ? (float)i / d : (float)(level / (double)d);
        return 8.0f - nearbyintf(q);
    }
    if (p == P_SOLARIZE) {
        if (whole)
            return linspace_f32(255.0f, 0.0f, bins, i);
        return (float)(255.0 - 255.0 * level / (bins - 1));
    }
    const float mx = space_max(policy, p, width, height);
    if (whole)
        return linspace_f32(0.0f, mx, bins, i);
    return (float)((double)mx * level / (bins - 1));
}

/* The record entry torchvision's _apply_op runs for op @p p with signed magnitude @p m. */
static void push_policy_op(dlc__aug_record *rec, int p, float m, const dlc__aug_config *cfg)
{
    if (rec->n >= DLC__AUG_MAX_OPS)
        return;
    dlc__aug_op *op = &rec->ops[rec->n++];
    memset(op, 0, sizeof *op);
    op->magnitude = m;
    const double md = m;
    switch (p) {
    case P_IDENTITY:
        op->op = DLC__AUG_IDENTITY;
        break;
    case P_SHEAR_X:
    case P_SHEAR_Y: {
        op->op = p == P_SHEAR_X ? DLC__AUG_SHEAR_X : DLC__AUG_SHEAR_Y;
        op->flags = DLC__AUG_F_CENTER; /* center=[0, 0]: the top-left corner. */
        op->arg[3] = 1.0f;
        op->arg[p == P_SHEAR_X ? 4 : 5] = (float)(atan(md) * (180.0 / 3.14159265358979323846));
        break;
    }
    case P_TRANSLATE_X:
    case P_TRANSLATE_Y:
        op->op = p == P_TRANSLATE_X ? DLC__AUG_TRANSLATE_X : DLC__AUG_TRANSLATE_Y;
        op->arg[3] = 1.0f;
        op->arg[p == P_TRANSLATE_X ? 1 : 2] = (float)trunc(md); /* int(magnitude) */
        break;
    case P_ROTATE:
        op->op = DLC__AUG_ROTATE;
        op->arg[0] = m;
        break;
    case P_BRIGHTNESS:
    case P_COLOR:
    case P_CONTRAST:
    case P_SHARPNESS:
        op->op = p == P_BRIGHTNESS ? DLC__AUG_BRIGHTNESS
                 : p == P_COLOR    ? DLC__AUG_SATURATION
                 : p == P_CONTRAST ? DLC__AUG_CONTRAST
                                   : DLC__AUG_SHARPNESS;
        /* _apply_op passes 1.0 + magnitude, a double: _blend weighs the other image by
         * (float)(1.0 - (1.0 + m)) = -m exactly, not by 1 - (float)(1 + m). */
        op->flags = DLC__AUG_F_WEIGHT;
        op->arg[0] = (float)(1.0 + md);
        op->arg[1] = (float)-md;
        break;
    case P_POSTERIZE:
        op->op = DLC__AUG_POSTERIZE;
        op->arg[0] = (float)trunc(md);
        break;
    case P_SOLARIZE:
        op->op = DLC__AUG_SOLARIZE;
        op->arg[0] = m;
        break;
    case P_AUTOCONTRAST:
        op->op = DLC__AUG_AUTOCONTRAST;
        break;
    case P_EQUALIZE:
        op->op = DLC__AUG_EQUALIZE;
        break;
    default:
        op->op = DLC__AUG_INVERT;
        break;
    }
    if (op->op >= DLC__AUG_ROTATE && op->op <= DLC__AUG_TRANSLATE_Y) {
        memcpy(op->fill, cfg->fill, sizeof op->fill);
        if (cfg->bilinear)
            op->flags |= DLC__AUG_F_BILINEAR | (cfg->has_fill ? DLC__AUG_F_FILL : 0u);
    }
}

/* A standard normal draw (Box-Muller, one of the pair). */
static double normal01(dlc__rng *rng)
{
    const double u1 = 1.0 - dlc__rng_uniform(rng); /* (0, 1]: log() stays finite. */
    const double u2 = dlc__rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

/* AutoAugmentPolicy.IMAGENET: 25 sub-policies of two (op, probability, magnitude bin; -1: none),
 * magnitudes from the 10-bin space. */
typedef struct sub_op {
    uint8_t op;
    float p;
    int8_t bin;
} sub_op;

static const sub_op imagenet[25][2] = {
    {{P_POSTERIZE, 0.4f, 8}, {P_ROTATE, 0.6f, 9}},
    {{P_SOLARIZE, 0.6f, 5}, {P_AUTOCONTRAST, 0.6f, -1}},
    {{P_EQUALIZE, 0.8f, -1}, {P_EQUALIZE, 0.6f, -1}},
    {{P_POSTERIZE, 0.6f, 7}, {P_POSTERIZE, 0.6f, 6}},
    {{P_EQUALIZE, 0.4f, -1}, {P_SOLARIZE, 0.2f, 4}},
    {{P_EQUALIZE, 0.4f, -1}, {P_ROTATE, 0.8f, 8}},
    {{P_SOLARIZE, 0.6f, 3}, {P_EQUALIZE, 0.6f, -1}},
    {{P_POSTERIZE, 0.8f, 5}, {P_EQUALIZE, 1.0f, -1}},
    {{P_ROTATE, 0.2f, 3}, {P_SOLARIZE, 0.6f, 8}},
    {{P_EQUALIZE, 0.6f, -1}, {P_POSTERIZE, 0.4f, 6}},
    {{P_ROTATE, 0.8f, 8}, {P_COLOR, 0.4f, 0}},
    {{P_ROTATE, 0.4f, 9}, {P_EQUALIZE, 0.6f, -1}},
    {{P_EQUALIZE, 0.0f, -1}, {P_EQUALIZE, 0.8f, -1}},
    {{P_INVERT, 0.6f, -1}, {P_EQUALIZE, 1.0f, -1}},
    {{P_COLOR, 0.6f, 4}, {P_CONTRAST, 1.0f, 8}},
    {{P_ROTATE, 0.8f, 8}, {P_COLOR, 1.0f, 2}},
    {{P_COLOR, 0.8f, 8}, {P_SOLARIZE, 0.8f, 7}},
    {{P_SHARPNESS, 0.4f, 7}, {P_INVERT, 0.6f, -1}},
    {{P_SHEAR_X, 0.6f, 5}, {P_EQUALIZE, 1.0f, -1}},
    {{P_COLOR, 0.4f, 0}, {P_EQUALIZE, 0.6f, -1}},
    {{P_EQUALIZE, 0.4f, -1}, {P_SOLARIZE, 0.2f, 4}},
    {{P_SOLARIZE, 0.6f, 5}, {P_AUTOCONTRAST, 0.6f, -1}},
    {{P_INVERT, 0.6f, -1}, {P_EQUALIZE, 1.0f, -1}},
    {{P_COLOR, 0.6f, 4}, {P_CONTRAST, 1.0f, 8}},
    {{P_EQUALIZE, 0.8f, -1}, {P_EQUALIZE, 0.6f, -1}},
};

void dlc__aug_draw_policy(const dlc__aug_config *cfg, uint32_t width, uint32_t height,
                          dlc__rng *rng, dlc__aug_record *rec)
{
    const uint32_t policy = cfg->policy;
    if (policy == DLC__AUG_POLICY_TRIVIAL_WIDE) {
        /* One op of 14, a bin of num_magnitude_bins, a sign. */
        const uint32_t bins = cfg->num_magnitude_bins;
        const int p = (int)dlc__rng_below(rng, N_SPACE);
        float m = 0.0f;
        if (has_magnitude(p))
            m = magnitude_at(policy, p, (double)dlc__rng_below(rng, bins), bins, width, height);
        if (signed_op(p) && dlc__rng_below(rng, 2))
            m = -m;
        push_policy_op(rec, p, m, cfg);
    } else if (policy == DLC__AUG_POLICY_RAND) {
        /* num_ops times: one op of 14 at the configured bin (timm: around it), a sign. */
        const uint32_t bins = cfg->num_magnitude_bins;
        for (uint32_t k = 0; k < cfg->num_ops; k++) {
            const int p = (int)dlc__rng_below(rng, N_SPACE);
            float m = 0.0f;
            if (has_magnitude(p)) {
                double level = cfg->magnitude;
                if (isinf(cfg->mstd)) {
                    level = dlc__rng_uniform(rng) * cfg->magnitude;
                } else if (cfg->mstd > 0.0f) {
                    level = cfg->magnitude + cfg->mstd * normal01(rng);
                    level = level < 0.0 ? 0.0 : level > bins - 1 ? bins - 1 : level;
                }
                m = magnitude_at(policy, p, level, bins, width, height);
            }
            if (signed_op(p) && dlc__rng_below(rng, 2))
                m = -m;
            push_policy_op(rec, p, m, cfg);
        }
    } else if (policy == DLC__AUG_POLICY_TIMM_RAND) {
        dlc__aug_draw_timm(cfg, width, height, rng, rec);
    } else if (policy == DLC__AUG_POLICY_AUTO_IMAGENET) {
        /* A sub-policy of 25; each of its two ops applies when rand <= p, with a sign drawn for
         * both (get_params draws two probabilities and two signs whatever is applied). */
        const uint32_t id = (uint32_t)dlc__rng_below(rng, 25);
        double u[2];
        uint32_t sign[2];
        u[0] = dlc__rng_uniform(rng);
        u[1] = dlc__rng_uniform(rng);
        sign[0] = (uint32_t)dlc__rng_below(rng, 2);
        sign[1] = (uint32_t)dlc__rng_below(rng, 2);
        for (int i = 0; i < 2; i++) {
            const sub_op *s = &imagenet[id][i];
            /* torch.rand is in [0, 1) and compared <= p: p = 0 still applies at exactly 0, so
             * ours compares < p, with the same probability and p = 0 never applying. */
            if (!(u[i] < s->p))
                continue;
            float m = 0.0f;
            if (s->bin >= 0)
                m = magnitude_at(policy, s->op, s->bin, 10, width, height);
            if (signed_op(s->op) && sign[i] == 0)
                m = -m;
            push_policy_op(rec, s->op, m, cfg);
        }
    }
}

static int jitter_on(const float r[2], float center)
{
    return !(r[0] == center && r[1] == center);
}

static float uniform_in(dlc__rng *rng, const float r[2])
{
    return (float)(r[0] + (r[1] - (double)r[0]) * dlc__rng_uniform(rng));
}

static dlc__aug_op *push(dlc__aug_record *rec, uint32_t id)
{
    /* The policy's DLC__AUG_RAND_MAX_OPS at most, then 4 + 3: the record always has room. */
    assert(rec->n < DLC__AUG_MAX_OPS);
    dlc__aug_op *op = &rec->ops[rec->n++];
    memset(op, 0, sizeof *op);
    op->op = (uint8_t)id;
    return op;
}

void dlc__aug_draw(const dlc__aug_config *cfg, uint32_t width, uint32_t height, uint32_t channels,
                   dlc__rng *rng, dlc__aug_record *rec)
{
    (void)channels; /* The draws never depend on it: a record is the same for any image. */
    /* The whole record is written, unused entries zero: records compare and copy as bytes. */
    memset(rec, 0, sizeof *rec);
    dlc__aug_draw_policy(cfg, width, height, rng, rec);
    /* RandomApply(ColorJitter, p): applied when rand < p; then ColorJitter.get_params: a
     * permutation of the four, a factor for each jitter present. */
    if (cfg->jitter_p > 0.0f && dlc__rng_uniform(rng) < cfg->jitter_p) {
        uint32_t perm[4] = {0, 1, 2, 3};
        for (uint32_t i = 3; i > 0; i--) {
            const uint32_t j = (uint32_t)dlc__rng_below(rng, i + 1);
            const uint32_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        const float *ranges[4] = {cfg->brightness, cfg->contrast, cfg->saturation, cfg->hue};
        static const uint32_t ids[4] = {DLC__AUG_BRIGHTNESS, DLC__AUG_CONTRAST, DLC__AUG_SATURATION,
                                        DLC__AUG_HUE};
        float factor[4] = {0};
        for (int k = 0; k < 4; k++)
            if (jitter_on(ranges[k], k == 3 ? 0.0f : 1.0f))
                factor[k] = uniform_in(rng, ranges[k]);
        for (int i = 0; i < 4; i++) {
            const uint32_t k = perm[i];
            if (jitter_on(ranges[k], k == 3 ? 0.0f : 1.0f))
                push(rec, ids[k])->arg[0] = factor[k];
        }
    }
    if (cfg->grayscale_p > 0.0f && dlc__rng_uniform(rng) < cfg->grayscale_p)
        push(rec, DLC__AUG_GRAYSCALE);
    if (cfg->blur_p > 0.0f && dlc__rng_uniform(rng) < cfg->blur_p) {
        /* GaussianBlur.get_params: one sigma for both directions. */
        const float sigma = uniform_in(rng, cfg->blur_sigma);
        dlc__aug_op *op = push(rec, DLC__AUG_BLUR);
        op->arg[0] = (float)cfg->blur_kernel[0];
        op->arg[1] = (float)cfg->blur_kernel[1];
        op->arg[2] = op->arg[3] = sigma;
    }
    if (cfg->solarize_p > 0.0f && dlc__rng_uniform(rng) < cfg->solarize_p)
        push(rec, DLC__AUG_SOLARIZE)->arg[0] = cfg->solarize_threshold;
}

static int prob_ok(float p)
{
    return p >= 0.0f && p <= 1.0f;
}

dlc_status dlc__aug_config_check(const dlc__aug_config *cfg, const char *what)
{
    if (cfg->policy > DLC__AUG_POLICY_TIMM_RAND)
        return dlc__errorf(DLC_EINVAL, "%s: auto_augment policy %u is none of the policies", what,
                           cfg->policy);
    if (cfg->bilinear > 1 || cfg->has_fill > 1)
        return dlc__errorf(DLC_EINVAL, "%s: interpolation (%u) or has_fill (%u) is not 0 or 1",
                           what, cfg->bilinear, cfg->has_fill);
    if (cfg->policy == DLC__AUG_POLICY_TRIVIAL_WIDE || cfg->policy == DLC__AUG_POLICY_RAND) {
        if (cfg->num_magnitude_bins < 2 || cfg->num_magnitude_bins > 1000000)
            return dlc__errorf(DLC_EINVAL, "%s: num_magnitude_bins (%u) is not in 2..1000000", what,
                               cfg->num_magnitude_bins);
    }
    if (cfg->policy == DLC__AUG_POLICY_RAND) {
        if (cfg->num_ops < 1 || cfg->num_ops > DLC__AUG_RAND_MAX_OPS)
            return dlc__errorf(DLC_EINVAL, "%s: num_ops (%u) is not in 1..%u", what, cfg->num_ops,
                               DLC__AUG_RAND_MAX_OPS);
        const float mx = (float)(cfg->num_magnitude_bins - 1);
        if (!(cfg->magnitude >= 0.0f && cfg->magnitude <= mx))
            return dlc__errorf(DLC_EINVAL,
                               "%s: magnitude (%g) is not a bin in 0..num_magnitude_bins - 1 (%g)",
                               what, (double)cfg->magnitude, (double)mx);
        if (isnan(cfg->mstd) || cfg->mstd < 0.0f)
            return dlc__errorf(DLC_EINVAL, "%s: mstd (%g) is not >= 0 (or inf)", what,
                               (double)cfg->mstd);
        if (cfg->mstd == 0.0f && cfg->magnitude != floorf(cfg->magnitude))
            return dlc__errorf(DLC_EINVAL,
                               "%s: magnitude (%g) is not a whole bin (a fraction needs mstd > 0)",
                               what, (double)cfg->magnitude);
    }
    if (cfg->policy == DLC__AUG_POLICY_TIMM_RAND) {
        if (cfg->num_ops < 1 || cfg->num_ops > DLC__AUG_RAND_MAX_OPS)
            return dlc__errorf(DLC_EINVAL, "%s: timm RandAugment n (num_ops %u) is not in 1..%u",
                               what, cfg->num_ops, DLC__AUG_RAND_MAX_OPS);
        if (!(cfg->magnitude >= 0.0f) || !isfinite(cfg->magnitude))
            return dlc__errorf(DLC_EINVAL, "%s: timm RandAugment m (magnitude %g) is not >= 0",
                               what, (double)cfg->magnitude);
        if (isnan(cfg->mstd) || cfg->mstd < 0.0f)
            return dlc__errorf(DLC_EINVAL, "%s: timm RandAugment mstd (%g) is not >= 0 (or inf)",
                               what, (double)cfg->mstd);
        if (!(cfg->magnitude_max > 0.0f) || !isfinite(cfg->magnitude_max))
            return dlc__errorf(DLC_EINVAL, "%s: timm RandAugment mmax (%g) is not > 0", what,
                               (double)cfg->magnitude_max);
        if (!prob_ok(cfg->op_prob))
            return dlc__errorf(DLC_EINVAL,
                               "%s: timm RandAugment p (%g) is not a probability in [0, 1]", what,
                               (double)cfg->op_prob);
        if (cfg->increasing > 1)
            return dlc__errorf(DLC_EINVAL, "%s: timm RandAugment inc (%u) is not 0 or 1", what,
                               cfg->increasing);
    }
    const struct {
        const char *name;
        float p;
    } probs[] = {{"color_jitter p", cfg->jitter_p},
                 {"grayscale", cfg->grayscale_p},
                 {"blur p", cfg->blur_p},
                 {"solarize p", cfg->solarize_p}};
    for (size_t i = 0; i < sizeof probs / sizeof probs[0]; i++)
        if (!prob_ok(probs[i].p))
            return dlc__errorf(DLC_EINVAL, "%s: %s (%g) is not a probability in [0, 1]", what,
                               probs[i].name, (double)probs[i].p);
    if (cfg->jitter_p > 0.0f) {
        const struct {
            const char *name;
            const float *r;
            float lo, hi;
        } jit[] = {{"brightness", cfg->brightness, 0.0f, INFINITY},
                   {"contrast", cfg->contrast, 0.0f, INFINITY},
                   {"saturation", cfg->saturation, 0.0f, INFINITY},
                   {"hue", cfg->hue, -0.5f, 0.5f}};
        for (size_t i = 0; i < 4; i++) {
            const float *r = jit[i].r;
            if (!(r[0] >= jit[i].lo && r[1] <= jit[i].hi && r[0] <= r[1]) || !isfinite(r[1]))
                return dlc__errorf(DLC_EINVAL,
                                   "%s: color_jitter %s range (%g, %g) is not a finite range "
                                   "within [%g, %g] with min <= max",
                                   what, jit[i].name, (double)r[0], (double)r[1], (double)jit[i].lo,
                                   (double)jit[i].hi);
        }
    }
    if (cfg->blur_p > 0.0f) {
        for (int i = 0; i < 2; i++)
            if (cfg->blur_kernel[i] < 1 || cfg->blur_kernel[i] > DLC__AUG_MAX_KERNEL ||
                cfg->blur_kernel[i] % 2 == 0)
                return dlc__errorf(DLC_EINVAL, "%s: blur kernel_size (%u) is not odd in 1..%u",
                                   what, cfg->blur_kernel[i], DLC__AUG_MAX_KERNEL);
        if (!(cfg->blur_sigma[0] > 0.0f && cfg->blur_sigma[0] <= cfg->blur_sigma[1]) ||
            !isfinite(cfg->blur_sigma[1]))
            return dlc__errorf(DLC_EINVAL,
                               "%s: blur sigma (%g, %g) is not a finite range of positive values "
                               "with min <= max",
                               what, (double)cfg->blur_sigma[0], (double)cfg->blur_sigma[1]);
    }
    if (cfg->solarize_p > 0.0f &&
        (!(cfg->solarize_threshold <= 255.0f) || isnan(cfg->solarize_threshold)))
        return dlc__errorf(DLC_EINVAL, "%s: solarize threshold (%g) is above 255", what,
                           (double)cfg->solarize_threshold);
    return DLC_OK;
}

dlc_status dlc__aug_config_check_image(const dlc__aug_config *cfg, uint32_t width, uint32_t height,
                                       uint32_t channels, const char *what)
{
    const int color = cfg->policy != DLC__AUG_POLICY_NONE || cfg->jitter_p > 0.0f ||
                      cfg->grayscale_p > 0.0f || cfg->solarize_p > 0.0f;
    if (color && channels != 1 && channels != 3)
        return dlc__errorf(DLC_EINVAL,
                           "%s: the images have %u channels; the color augmentations take 1 or 3 "
                           "(RGB), as torchvision's",
                           what, channels);
    if (cfg->blur_p > 0.0f) {
        for (int i = 0; i < 2; i++) {
            const uint32_t side = i == 0 ? width : height;
            if (cfg->blur_kernel[i] / 2 >= side)
                return dlc__errorf(DLC_EINVAL,
                                   "%s: blur kernel_size %u needs a reflect padding of %u, not "
                                   "less than the output's %s (%u)",
                                   what, cfg->blur_kernel[i], cfg->blur_kernel[i] / 2,
                                   i == 0 ? "width" : "height", side);
        }
    }
    return DLC_OK;
}
