/* include/dlcache/ops.h: the public face of the ops, over aug_apply.c. */
#include "aug_internal.h"

#include <dlcache/ops.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

_Static_assert((int)DLC_OP_TRANSLATE_Y == (int)DLC__AUG_TRANSLATE_Y &&
                   (int)DLC_OP_GAUSSIAN_BLUR == (int)DLC__AUG_BLUR &&
                   (int)DLC_OP_RGB_TO_GRAYSCALE == (int)DLC__AUG_GRAYSCALE &&
                   (int)DLC_OP_SOLARIZE_ADD == (int)DLC__AUG_SOLARIZE_ADD &&
                   DLC__AUG_OP_COUNT == 20,
               "the public op ids are the records' op ids");

static const dlc_op_params defaults = {
    .struct_size = sizeof(dlc_op_params),
    .op = DLC_OP_IDENTITY,
    .factor = 1.0,
    .bits = 8,
    .num_output_channels = 3,
    .threshold = 128.0,
    .kernel_size = {3, 3},
    .sigma = {0.8, 0.8},
    .scale = 1.0,
};

void dlc_op_params_init_sized(dlc_op_params *p, size_t size)
{
    dlc__options_init(p, size, &defaults, sizeof defaults);
}

size_t dlc_op_scratch_bound(uint32_t width, uint32_t height, uint32_t channels)
{
    return dlc__aug_scratch_bound(width, height, channels);
}

const char *dlc_op_name(uint32_t op)
{
    return dlc__aug_op_name(op);
}

/* A finite value the float kernels cannot carry, refused here and named as given: narrowed, it
 * would reach dlc__aug_op_check() as inf, or a positive one as 0, and be quoted so ("sigma[0] (0)
 * is not a finite positive number" for a sigma of 1e-50). @p positive: the field must be > 0 (a
 * subnormal scale or sigma makes no invertible matrix or kernel either). Thresholds are not
 * passed here: beyond a float's range they compare with uint8 pixels as its bound does. */
static dlc_status unfit(const char *op, const char *field, int i, double v, int positive)
{
    char at[8] = "";
    if (i >= 0)
        snprintf(at, sizeof at, "[%d]", i);
    if (isfinite(v) && fabs(v) > FLT_MAX)
        return dlc__errorf(DLC_EINVAL, "%s: %s%s (%g) is beyond a float's range (%g)", op, field,
                           at, v, (double)FLT_MAX);
    if (positive && v > 0 && v < FLT_MIN)
        return dlc__errorf(DLC_EINVAL, "%s: %s%s (%g) is below the smallest normal float (%g)", op,
                           field, at, v, (double)FLT_MIN);
    return DLC_OK;
}

/* The internal op for @p p; DLC_EINVAL for values a float cannot carry. */
static dlc_status to_op(const dlc_op_params *p, dlc__aug_op *op)
{
    memset(op, 0, sizeof *op);
    const char *name = dlc__aug_op_name(p->op);
    if (p->op >= DLC__AUG_OP_COUNT)
        return dlc__errorf(DLC_EINVAL, "dlc_op_apply: unknown op %u", (unsigned)p->op);
    dlc_status rc = DLC_OK;
    op->op = (uint8_t)p->op;
    memcpy(op->fill, p->fill, sizeof op->fill);
    switch (p->op) {
    case DLC_OP_ADJUST_BRIGHTNESS:
    case DLC_OP_ADJUST_CONTRAST:
    case DLC_OP_ADJUST_SATURATION:
    case DLC_OP_ADJUST_SHARPNESS: {
        /* torch's _blend takes the factor and 1 - factor from the double (Python's float). */
        char field[32];
        snprintf(field, sizeof field, "%s_factor", name + strlen("adjust_"));
        if ((rc = unfit(name, field, -1, p->factor, 0)) < 0)
            return rc;
        op->flags = DLC__AUG_F_WEIGHT;
        op->arg[0] = (float)p->factor;
        op->arg[1] = (float)(1.0 - p->factor);
        break;
    }
    case DLC_OP_ADJUST_HUE:
        if ((rc = unfit(name, "hue_factor", -1, p->factor, 0)) < 0)
            return rc;
        op->arg[0] = (float)p->factor;
        break;
    case DLC_OP_POSTERIZE:
        if (p->bits > 8)
            return dlc__errorf(DLC_EINVAL, "%s: bits (%u) is not in 0..8", name, p->bits);
        op->arg[0] = (float)p->bits;
        break;
    case DLC_OP_SOLARIZE:
        op->arg[0] = (float)p->threshold;
        break;
    case DLC_OP_SOLARIZE_ADD:
        if ((rc = unfit(name, "addition", -1, p->addition, 0)) < 0)
            return rc;
        op->arg[0] = (float)p->addition;
        op->arg[1] = (float)p->threshold;
        break;
    case DLC_OP_GAUSSIAN_BLUR:
        for (int i = 0; i < 2; i++) {
            if (p->kernel_size[i] > DLC__AUG_MAX_KERNEL)
                return dlc__errorf(DLC_EINVAL,
                                   "%s: kernel_size[%d] (%u) is not an odd integer in 1..%u", name,
                                   i, p->kernel_size[i], DLC__AUG_MAX_KERNEL);
            if ((rc = unfit(name, "sigma", i, p->sigma[i], 1)) < 0)
                return rc;
            op->arg[i] = (float)p->kernel_size[i];
            op->arg[2 + i] = (float)p->sigma[i];
        }
        break;
    case DLC_OP_ROTATE:
    case DLC_OP_AFFINE:
    case DLC_OP_SHEAR_X:
    case DLC_OP_SHEAR_Y:
    case DLC_OP_TRANSLATE_X:
    case DLC_OP_TRANSLATE_Y:
        /* Rotate reads neither translate, nor scale, nor shear. */
        for (int i = 0; i < 2 && rc == DLC_OK && p->has_center; i++)
            rc = unfit(name, "center", i, p->center[i], 0);
        for (int i = 0; i < 2 && rc == DLC_OK && p->op != DLC_OP_ROTATE; i++)
            if ((rc = unfit(name, "translate", i, p->translate[i], 0)) == DLC_OK)
                rc = unfit(name, "shear", i, p->shear[i], 0);
        if (rc < 0 || (p->op != DLC_OP_ROTATE && (rc = unfit(name, "scale", -1, p->scale, 1)) < 0))
            return rc;
        /* Reduced before the float narrowing, which an angle as large as 10000000.5 would
         * round to 10000000: torchvision takes its cosine and sine of the double. fmod() is
         * exact, and inf or NaN stay so for the check. */
        op->arg[0] = (float)(isfinite(p->angle) ? fmod(p->angle, 360.0) : p->angle);
        op->arg[1] = (float)p->translate[0];
        op->arg[2] = (float)p->translate[1];
        op->arg[3] = (float)p->scale;
        op->arg[4] = (float)p->shear[0];
        op->arg[5] = (float)p->shear[1];
        if (p->has_center) {
            op->flags = DLC__AUG_F_CENTER;
            op->arg[6] = (float)p->center[0];
            op->arg[7] = (float)p->center[1];
        }
        if (p->interpolation > DLC_INTERP_BILINEAR)
            return dlc__errorf(DLC_EINVAL,
                               "%s: interpolation (%u) is neither DLC_INTERP_NEAREST (0) nor "
                               "DLC_INTERP_BILINEAR (1)",
                               name, p->interpolation);
        if (p->interpolation == DLC_INTERP_BILINEAR)
            op->flags |= DLC__AUG_F_BILINEAR |
                         (p->has_fill || p->fill[0] || p->fill[1] || p->fill[2] || p->fill[3]
                              ? DLC__AUG_F_FILL
                              : 0u);
        break;
    default:
        break;
    }
    return DLC_OK;
}

static int overlap(const dlc_image *a, const dlc_image *b)
{
    const uint8_t *a0 = a->data, *b0 = b->data;
    const uint8_t *a1 = a0 + (a->height - 1) * a->stride + (size_t)a->width * a->channels;
    const uint8_t *b1 = b0 + (b->height - 1) * b->stride + (size_t)b->width * b->channels;
    return a0 < b1 && b0 < a1;
}

dlc_status dlc_op_apply(const dlc_op_params *params, const dlc_image *src, const dlc_image *dst,
                        void *scratch, size_t scratch_size)
{
    if (!params || !src || !dst || !src->data || !dst->data)
        return dlc__errorf(DLC_EINVAL, "dlc_op_apply: %s is NULL",
                           !params              ? "params"
                           : !src || !src->data ? "src"
                                                : "dst");
    dlc_op_params p;
    dlc_status rc = dlc__options_take(&p, sizeof p, params, "dlc_op_params", "dlc_op_params_init");
    if (rc < 0)
        return rc;
    const char *name = dlc__aug_op_name(p.op);
    dlc__aug_op op;
    rc = to_op(&p, &op);
    if (rc < 0)
        return rc;
    const uint32_t w = src->width, h = src->height, c = src->channels;
    rc = dlc__aug_op_check(&op, w, h, c);
    if (rc < 0)
        return rc;
    const int gray1 = p.op == DLC_OP_RGB_TO_GRAYSCALE && p.num_output_channels == 1;
    if (p.op == DLC_OP_RGB_TO_GRAYSCALE && p.num_output_channels != 1 && p.num_output_channels != 3)
        return dlc__errorf(DLC_EINVAL, "%s: num_output_channels (%u) is neither 1 nor 3", name,
                           p.num_output_channels);
    const uint32_t dc = gray1 ? 1 : c;
    if (dst->width != w || dst->height != h || dst->channels != dc)
        return dlc__errorf(DLC_EINVAL, "%s: dst is %ux%ux%u, src %ux%ux%u: the op writes %ux%ux%u",
                           name, dst->width, dst->height, dst->channels, w, h, c, w, h, dc);
    if (src->stride < (size_t)w * c || dst->stride < (size_t)w * dc)
        return dlc__errorf(DLC_EINVAL, "%s: a row stride is below width * channels", name);
    const int same = src->data == dst->data && src->stride == dst->stride && !gray1;
    if (!same && overlap(src, dst))
        return dlc__errorf(DLC_EINVAL, "%s: src and dst overlap without being the same image",
                           name);
    const size_t need = dlc__aug_scratch_bound(w, h, c);
    if (!scratch || scratch_size < need)
        return dlc__errorf(DLC_EINVAL,
                           "%s: scratch of %zu bytes, %zu needed (dlc_op_scratch_bound)", name,
                           scratch ? scratch_size : 0, need);
    if (gray1) {
        /* One output channel: the grayscale of a 3-channel image, a copy of a 1-channel one. */
        for (uint32_t y = 0; y < h; y++) {
            const uint8_t *s = src->data + (size_t)y * src->stride;
            uint8_t *d = dst->data + (size_t)y * dst->stride;
            for (uint32_t x = 0; x < w; x++) {
                if (c == 1) {
                    d[x] = s[x];
                } else {
                    const uint8_t *q = s + 3 * (size_t)x;
                    const float l =
                        0.2989f * (float)q[0] + 0.587f * (float)q[1] + 0.114f * (float)q[2];
                    d[x] = (uint8_t)l;
                }
            }
        }
        return DLC_OK;
    }
    if (!same)
        for (uint32_t y = 0; y < h; y++)
            memcpy(dst->data + (size_t)y * dst->stride, src->data + (size_t)y * src->stride,
                   (size_t)w * c);
    return dlc__aug_apply_op(&op, dst->data, dst->stride, w, h, c, scratch, scratch_size);
}
