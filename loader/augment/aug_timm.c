/* timm's RandAugment (timm/data/auto_augment.py: rand_augment_transform, RandAugment, AugmentOp,
 * _RAND_TRANSFORMS, _RAND_INCREASING_TRANSFORMS and the level_to_arg functions), drawn from the
 * view's counter-based stream instead of Python's random: the same distributions, not the same
 * numbers. And its one op torchvision lacks, SolarizeAdd.
 *
 * Per view, num_ops times: one of the 15 ops, uniformly and with replacement (np.random.choice);
 * it applies with probability op_prob (AugmentOp's prob, 0.5); its magnitude is m, or with mstd
 * a normal draw around m (uniform in [0, m] when mstd is infinite), clipped to [0, mmax]; the
 * level functions turn it into the op's argument, with a random sign for Rotate, ShearX/Y,
 * TranslateX/YRel and the increasing enhance ops. The argument is recorded as the op's
 * magnitude (signed), and the op runs as torchvision's tensor path does: timm runs PIL, whose
 * enhance ops round where torch truncates and whose affine resamples bilinear or bicubic (timm
 * picks one at random per op) on another pixel grid, where ours is nearest. */
#include "aug_ops.h"

#include <math.h>
#include <string.h>

/* _RAND_TRANSFORMS (the increasing set differs in the Posterize, Solarize and enhance ops). */
enum {
    T_AUTOCONTRAST,
    T_EQUALIZE,
    T_INVERT,
    T_ROTATE,
    T_POSTERIZE,
    T_SOLARIZE,
    T_SOLARIZE_ADD,
    T_COLOR,
    T_CONTRAST,
    T_BRIGHTNESS,
    T_SHARPNESS,
    T_SHEAR_X,
    T_SHEAR_Y,
    T_TRANSLATE_X_REL,
    T_TRANSLATE_Y_REL,
    T_COUNT
};

/* _LEVEL_DENOM: timm's magnitudes are on a 0..10 scale. */
#define LEVEL_DENOM 10.0

/* _randomly_negate(): -v with probability one half. */
static double negate_half(dlc__rng *rng, double v)
{
    return dlc__rng_below(rng, 2) ? -v : v;
}

/* random.gauss(0, 1), by Box-Muller. */
static double normal01(dlc__rng *rng)
{
    const double u1 = 1.0 - dlc__rng_uniform(rng); /* (0, 1]: log() stays finite. */
    const double u2 = dlc__rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

static dlc__aug_op *push_op(dlc__aug_record *rec, uint32_t id, double magnitude)
{
    if (rec->n >= DLC__AUG_MAX_OPS)
        return NULL;
    dlc__aug_op *op = &rec->ops[rec->n++];
    memset(op, 0, sizeof *op);
    op->op = (uint8_t)id;
    op->magnitude = (float)magnitude;
    return op;
}

/* An enhance op (PIL's ImageEnhance, torchvision's adjust_*) of factor @p f: as adjust_*()
 * with the float32 factor (no DLC__AUG_F_WEIGHT: the other image's weight is 1 - that float,
 * so that the recorded op replays through dlc_op_apply() exactly). */
static void push_enhance(dlc__aug_record *rec, uint32_t id, double f)
{
    dlc__aug_op *op = push_op(rec, id, f);
    if (op)
        op->arg[0] = (float)f;
}

/* An affine op: PIL's transform(AFFINE, (1, sx, tx, sy, 1, ty)) samples the source at
 * (x + sx y + tx, sy x + y + ty). torchvision's ShearX of magnitude sx is that shear about the
 * corner (its _apply_op), and its translation t moves the content by +t where PIL's tx moves it
 * by -tx. */
/* The fill and the policy's interpolation of a geometric op (timm resamples with PIL, bilinear
 * or bicubic; ours is nearest unless the policy asks bilinear). */
static void set_geom(dlc__aug_op *op, const dlc__aug_config *cfg)
{
    memcpy(op->fill, cfg->fill, sizeof op->fill);
    if (cfg->bilinear)
        op->flags |= DLC__AUG_F_BILINEAR | (cfg->has_fill ? DLC__AUG_F_FILL : 0u);
}

static void push_affine(dlc__aug_record *rec, uint32_t id, double magnitude, double shear_deg,
                        double translate, const dlc__aug_config *cfg)
{
    dlc__aug_op *op = push_op(rec, id, magnitude);
    if (!op)
        return;
    op->arg[3] = 1.0f;
    if (id == DLC__AUG_SHEAR_X || id == DLC__AUG_SHEAR_Y) {
        op->flags = DLC__AUG_F_CENTER; /* center=[0, 0]: the top-left corner. */
        op->arg[id == DLC__AUG_SHEAR_X ? 4 : 5] = (float)shear_deg;
    } else {
        op->arg[id == DLC__AUG_TRANSLATE_X ? 1 : 2] = (float)translate;
    }
    set_geom(op, cfg);
}

void dlc__aug_draw_timm(const dlc__aug_config *cfg, uint32_t width, uint32_t height, dlc__rng *rng,
                        dlc__aug_record *rec)
{
    static const uint32_t enhance[4] = {DLC__AUG_SATURATION, DLC__AUG_CONTRAST, DLC__AUG_BRIGHTNESS,
                                        DLC__AUG_SHARPNESS};
    const int inc = cfg->increasing != 0;
    for (uint32_t k = 0; k < cfg->num_ops; k++) {
        const int t = (int)dlc__rng_below(rng, T_COUNT);
        /* AugmentOp.__call__: skipped when prob < 1 and random() > prob. */
        if (cfg->op_prob < 1.0f && !(dlc__rng_uniform(rng) < cfg->op_prob))
            continue;
        double level = cfg->magnitude;
        if (isinf(cfg->mstd))
            level = dlc__rng_uniform(rng) * cfg->magnitude; /* random.uniform(0, magnitude) */
        else if (cfg->mstd > 0.0f)
            level = cfg->magnitude + cfg->mstd * normal01(rng);
        level = level < 0.0 ? 0.0 : level > cfg->magnitude_max ? cfg->magnitude_max : level;
        const double frac = level / LEVEL_DENOM;
        switch (t) {
        case T_AUTOCONTRAST:
            push_op(rec, DLC__AUG_AUTOCONTRAST, 0.0);
            break;
        case T_EQUALIZE:
            push_op(rec, DLC__AUG_EQUALIZE, 0.0);
            break;
        case T_INVERT:
            push_op(rec, DLC__AUG_INVERT, 0.0);
            break;
        case T_ROTATE: {
            const double deg = negate_half(rng, frac * 30.0);
            dlc__aug_op *op = push_op(rec, DLC__AUG_ROTATE, deg);
            if (op) {
                op->arg[0] = (float)deg;
                set_geom(op, cfg);
            }
            break;
        }
        case T_POSTERIZE: {
            /* int(frac * 4) bits, or 4 - that; PIL keeps the image from 8 bits on, and a count
             * below 0 clears every bit as 0 does. */
            double bits = trunc(frac * 4.0);
            if (inc)
                bits = 4.0 - bits;
            const double kept = bits < 0.0 ? 0.0 : bits > 8.0 ? 8.0 : bits;
            dlc__aug_op *op = push_op(rec, DLC__AUG_POSTERIZE, bits);
            if (op)
                op->arg[0] = (float)kept;
            break;
        }
        case T_SOLARIZE: {
            double thresh = fmin(256.0, trunc(frac * 256.0));
            if (inc)
                thresh = 256.0 - thresh;
            /* 256 inverts nothing (and is beyond torchvision's solarize): the identity. */
            dlc__aug_op *op =
                push_op(rec, thresh >= 256.0 ? DLC__AUG_IDENTITY : DLC__AUG_SOLARIZE, thresh);
            if (op && thresh < 256.0)
                op->arg[0] = (float)thresh;
            break;
        }
        case T_SOLARIZE_ADD: {
            const double add = fmin(128.0, trunc(frac * 110.0));
            dlc__aug_op *op = push_op(rec, DLC__AUG_SOLARIZE_ADD, add);
            if (op) {
                op->arg[0] = (float)add;
                op->arg[1] = 128.0f;
            }
            break;
        }
        case T_COLOR:
        case T_CONTRAST:
        case T_BRIGHTNESS:
        case T_SHARPNESS: {
            double f;
            if (inc) {
                f = 1.0 + negate_half(rng, frac * 0.9);
                f = f < 0.1 ? 0.1 : f;
            } else {
                f = frac * 1.8 + 0.1;
            }
            push_enhance(rec, enhance[t - T_COLOR], f);
            break;
        }
        case T_SHEAR_X:
        case T_SHEAR_Y: {
            const double s = negate_half(rng, frac * 0.3);
            push_affine(rec, t == T_SHEAR_X ? DLC__AUG_SHEAR_X : DLC__AUG_SHEAR_Y, s,
                        atan(s) * (180.0 / 3.14159265358979323846), 0.0, cfg);
            break;
        }
        default: { /* TranslateXRel, TranslateYRel: a fraction of the side (translate_pct). */
            const double pct = negate_half(rng, frac * 0.45);
            const int x = t == T_TRANSLATE_X_REL;
            const double pixels = pct * (x ? width : height);
            push_affine(rec, x ? DLC__AUG_TRANSLATE_X : DLC__AUG_TRANSLATE_Y, pct, 0.0, -pixels,
                        cfg);
            break;
        }
        }
    }
}

void dlc__aug_solarize_add(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                           double addition, double threshold)
{
    /* timm's lut: i < thresh -> min(255, i + add), else i. */
    uint8_t lut[256];
    const int add = (int)addition;
    for (int v = 0; v < 256; v++)
        lut[v] = (double)v < threshold ? (uint8_t)(v + add > 255 ? 255 : v + add) : (uint8_t)v;
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *p = img + (size_t)y * stride;
        for (size_t i = 0; i < (size_t)w * c; i++)
            p[i] = lut[p[i]];
    }
}
