/* Checking and dispatching the ops of aug_internal.h: one op, or a sample's record in order. */
#include "aug_ops.h"

#include <math.h>

/* Records are copied out to users as they are (return_params): their layout is fixed. */
_Static_assert(sizeof(dlc__aug_op) == 44 && sizeof(dlc__aug_record) == 4 + 44 * DLC__AUG_MAX_OPS,
               "dlc__aug_op is 44 bytes, a record 708");

static const char *const op_names[DLC__AUG_OP_COUNT] = {
    [DLC__AUG_IDENTITY] = "identity",
    [DLC__AUG_BRIGHTNESS] = "adjust_brightness",
    [DLC__AUG_CONTRAST] = "adjust_contrast",
    [DLC__AUG_SATURATION] = "adjust_saturation",
    [DLC__AUG_HUE] = "adjust_hue",
    [DLC__AUG_SHARPNESS] = "adjust_sharpness",
    [DLC__AUG_POSTERIZE] = "posterize",
    [DLC__AUG_SOLARIZE] = "solarize",
    [DLC__AUG_AUTOCONTRAST] = "autocontrast",
    [DLC__AUG_EQUALIZE] = "equalize",
    [DLC__AUG_INVERT] = "invert",
    [DLC__AUG_GRAYSCALE] = "rgb_to_grayscale",
    [DLC__AUG_BLUR] = "gaussian_blur",
    [DLC__AUG_ROTATE] = "rotate",
    [DLC__AUG_AFFINE] = "affine",
    [DLC__AUG_SHEAR_X] = "shear_x",
    [DLC__AUG_SHEAR_Y] = "shear_y",
    [DLC__AUG_TRANSLATE_X] = "translate_x",
    [DLC__AUG_TRANSLATE_Y] = "translate_y",
    [DLC__AUG_SOLARIZE_ADD] = "solarize_add",
};

const char *dlc__aug_op_name(uint32_t op)
{
    return op < DLC__AUG_OP_COUNT ? op_names[op] : "?";
}

size_t dlc__aug_scratch_bound(uint32_t width, uint32_t height, uint32_t channels)
{
    /* The largest user is the blur: one float per channel value for its horizontal pass and a
     * row of floats for its vertical one; the copies of the geometric ops and sharpness (one
     * byte per value) fit in it. The rest aligns the floats. */
    const size_t row = (size_t)width * channels;
    return (row * height + row) * sizeof(float) + 64;
}

static int is_color(uint32_t op)
{
    return (op != DLC__AUG_IDENTITY && op != DLC__AUG_BLUR && op < DLC__AUG_ROTATE) ||
           op == DLC__AUG_SOLARIZE_ADD;
}

static int is_geometric(uint32_t op)
{
    return op >= DLC__AUG_ROTATE && op <= DLC__AUG_TRANSLATE_Y;
}

/* The factor-like parameter of each op, by torchvision's name. */
static const char *arg0_name(uint32_t op)
{
    switch (op) {
    case DLC__AUG_BRIGHTNESS:
        return "brightness_factor";
    case DLC__AUG_CONTRAST:
        return "contrast_factor";
    case DLC__AUG_SATURATION:
        return "saturation_factor";
    case DLC__AUG_HUE:
        return "hue_factor";
    case DLC__AUG_SHARPNESS:
        return "sharpness_factor";
    case DLC__AUG_POSTERIZE:
        return "bits";
    case DLC__AUG_SOLARIZE:
        return "threshold";
    default:
        return "angle";
    }
}

/* The inverse matrix of a geometric op on a w x h image (rotate's angle is counter-clockwise:
 * F.rotate passes -angle). */
static void geom_matrix(const dlc__aug_op *op, uint32_t w, uint32_t h, double m[6])
{
    const float *a = op->arg;
    double center[2] = {0.0, 0.0};
    if (op->flags & DLC__AUG_F_CENTER) {
        center[0] = (double)a[6] - w * 0.5;
        center[1] = (double)a[7] - h * 0.5;
    }
    if (op->op == DLC__AUG_ROTATE) {
        const double zero[2] = {0.0, 0.0};
        dlc__aug_inverse_affine(center, -(double)a[0], zero, 1.0, zero, m);
    } else {
        const double t[2] = {a[1], a[2]};
        const double sh[2] = {a[4], a[5]};
        dlc__aug_inverse_affine(center, a[0], t, a[3], sh, m);
    }
}

dlc_status dlc__aug_op_check(const dlc__aug_op *op, uint32_t width, uint32_t height,
                             uint32_t channels)
{
    const char *name = dlc__aug_op_name(op->op);
    const float *a = op->arg;
    if (op->op >= DLC__AUG_OP_COUNT)
        return dlc__errorf(DLC_EINVAL, "augment: unknown op %u", (unsigned)op->op);
    if (width == 0 || height == 0)
        return dlc__errorf(DLC_EINVAL, "%s: the image is %ux%u pixels, an empty image", name, width,
                           height);
    if (channels < 1 || channels > DLC__AUG_MAX_CHANNELS)
        return dlc__errorf(DLC_EINVAL, "%s: the image has %u channels, not 1 to %u", name, channels,
                           DLC__AUG_MAX_CHANNELS);
    if (is_color(op->op) && channels != 1 && channels != 3)
        return dlc__errorf(DLC_EINVAL,
                           "%s: the image has %u channels; the op takes 1 or 3 (RGB) channels",
                           name, channels);
    if (op->flags &
        ~(unsigned)(DLC__AUG_F_CENTER | DLC__AUG_F_WEIGHT | DLC__AUG_F_BILINEAR | DLC__AUG_F_FILL))
        return dlc__errorf(DLC_EINVAL, "%s: unknown flags 0x%x", name, (unsigned)op->flags);
    switch (op->op) {
    case DLC__AUG_BRIGHTNESS:
    case DLC__AUG_CONTRAST:
    case DLC__AUG_SATURATION:
    case DLC__AUG_SHARPNESS:
        if (!(a[0] >= 0.0f) || !isfinite(a[0]))
            return dlc__errorf(DLC_EINVAL, "%s: %s (%g) is not a finite non-negative number", name,
                               arg0_name(op->op), (double)a[0]);
        if ((op->flags & DLC__AUG_F_WEIGHT) && !isfinite(a[1]))
            return dlc__errorf(DLC_EINVAL, "%s: the weight 1 - %s (%g) is not finite", name,
                               arg0_name(op->op), (double)a[1]);
        break;
    case DLC__AUG_HUE:
        if (!(a[0] >= -0.5f && a[0] <= 0.5f))
            return dlc__errorf(DLC_EINVAL, "%s: hue_factor (%g) is not in [-0.5, 0.5]", name,
                               (double)a[0]);
        break;
    case DLC__AUG_POSTERIZE:
        if (!(a[0] >= 0.0f && a[0] <= 8.0f) || a[0] != floorf(a[0]))
            return dlc__errorf(DLC_EINVAL, "%s: bits (%g) is not an integer in 0..8", name,
                               (double)a[0]);
        break;
    case DLC__AUG_SOLARIZE:
        if (isnan(a[0]))
            return dlc__errorf(DLC_EINVAL, "%s: threshold is NaN, not a number", name);
        if (a[0] > 255.0f)
            return dlc__errorf(DLC_EINVAL,
                               "%s: threshold (%g) is above 255, the bound of uint8 pixels", name,
                               (double)a[0]);
        break;
    case DLC__AUG_SOLARIZE_ADD:
        if (!(a[0] >= 0.0f && a[0] <= 255.0f) || a[0] != floorf(a[0]))
            return dlc__errorf(DLC_EINVAL, "%s: addition (%g) is not an integer in 0..255", name,
                               (double)a[0]);
        if (isnan(a[1]))
            return dlc__errorf(DLC_EINVAL, "%s: threshold is NaN", name);
        break;
    case DLC__AUG_BLUR:
        for (int i = 0; i < 2; i++) {
            const float k = a[i];
            const uint32_t side = i == 0 ? width : height;
            if (!(k >= 1.0f && k <= (float)DLC__AUG_MAX_KERNEL) || k != floorf(k) ||
                ((uint32_t)k & 1u) == 0)
                return dlc__errorf(DLC_EINVAL,
                                   "%s: kernel_size[%d] (%g) is not an odd integer in 1..%u", name,
                                   i, (double)k, DLC__AUG_MAX_KERNEL);
            if ((uint32_t)k / 2 >= side)
                return dlc__errorf(DLC_EINVAL,
                                   "%s: kernel_size[%d] (%u) needs a reflect padding of %u, not "
                                   "less than the image's %s (%u)",
                                   name, i, (unsigned)k, (unsigned)k / 2,
                                   i == 0 ? "width" : "height", side);
            if (!(a[2 + i] > 0.0f) || !isfinite(a[2 + i]))
                return dlc__errorf(DLC_EINVAL, "%s: sigma[%d] (%g) is not a finite positive number",
                                   name, i, (double)a[2 + i]);
        }
        break;
    default:
        break;
    }
    if (is_geometric(op->op)) {
        if (!isfinite(a[0]))
            return dlc__errorf(DLC_EINVAL, "%s: angle (%g) is not finite", name, (double)a[0]);
        if (op->op != DLC__AUG_ROTATE) {
            if (!isfinite(a[1]) || !isfinite(a[2]))
                return dlc__errorf(DLC_EINVAL, "%s: translate (%g, %g) is not finite", name,
                                   (double)a[1], (double)a[2]);
            if (!(a[3] > 0.0f) || !isfinite(a[3]))
                return dlc__errorf(DLC_EINVAL, "%s: scale (%g) is not a finite positive number",
                                   name, (double)a[3]);
            if (!(fabsf(a[4]) < 90.0f) || !(fabsf(a[5]) < 90.0f))
                return dlc__errorf(DLC_EINVAL, "%s: shear (%g, %g) is not within (-90, 90) degrees",
                                   name, (double)a[4], (double)a[5]);
        }
        if ((op->flags & DLC__AUG_F_CENTER) && (!isfinite(a[6]) || !isfinite(a[7])))
            return dlc__errorf(DLC_EINVAL, "%s: center (%g, %g) is not finite", name, (double)a[6],
                               (double)a[7]);
        double m[6];
        geom_matrix(op, width, height, m);
        for (int i = 0; i < 6; i++)
            if (!isfinite(m[i]))
                return dlc__errorf(DLC_EINVAL, "%s: the parameters give no invertible transform",
                                   name);
    }
    return DLC_OK;
}

dlc_status dlc__aug_apply_op(const dlc__aug_op *op, uint8_t *img, size_t stride, uint32_t width,
                             uint32_t height, uint32_t channels, void *scratch, size_t scratch_size)
{
    dlc_status rc = dlc__aug_op_check(op, width, height, channels);
    if (rc < 0)
        return rc;
    const size_t need = dlc__aug_scratch_bound(width, height, channels);
    if (scratch_size < need || (scratch == NULL && need > 0))
        return dlc__errorf(DLC_EINVAL, "%s: scratch of %zu bytes, %zu needed for %ux%ux%u",
                           dlc__aug_op_name(op->op), scratch_size, need, width, height, channels);
    if (stride < (size_t)width * channels)
        return dlc__errorf(DLC_EINVAL, "%s: row stride %zu is below width * channels (%zu)",
                           dlc__aug_op_name(op->op), stride, (size_t)width * channels);
    /* The slack of the bound aligns the scratch for floats. */
    uint8_t *s = scratch;
    s += (16 - ((uintptr_t)s & 15)) & 15;
    const float *a = op->arg;
    const uint32_t w = width, h = height, c = channels;
    const float r = a[0];
    const float q = (op->flags & DLC__AUG_F_WEIGHT) ? a[1] : (float)(1.0 - (double)a[0]);
    switch (op->op) {
    case DLC__AUG_IDENTITY:
        break;
    case DLC__AUG_BRIGHTNESS:
        dlc__aug_brightness(img, stride, w, h, c, r, q);
        break;
    case DLC__AUG_CONTRAST:
        dlc__aug_contrast(img, stride, w, h, c, r, q);
        break;
    case DLC__AUG_SATURATION:
        dlc__aug_saturation(img, stride, w, h, c, r, q);
        break;
    case DLC__AUG_HUE:
        dlc__aug_hue(img, stride, w, h, c, a[0]);
        break;
    case DLC__AUG_SHARPNESS:
        dlc__aug_sharpness(img, stride, w, h, c, r, q, s);
        break;
    case DLC__AUG_POSTERIZE:
        dlc__aug_posterize(img, stride, w, h, c, (uint32_t)a[0]);
        break;
    case DLC__AUG_SOLARIZE:
        dlc__aug_solarize(img, stride, w, h, c, a[0]);
        break;
    case DLC__AUG_AUTOCONTRAST:
        dlc__aug_autocontrast(img, stride, w, h, c);
        break;
    case DLC__AUG_EQUALIZE:
        dlc__aug_equalize(img, stride, w, h, c);
        break;
    case DLC__AUG_INVERT:
        dlc__aug_invert(img, stride, w, h, c);
        break;
    case DLC__AUG_GRAYSCALE:
        dlc__aug_grayscale(img, stride, w, h, c);
        break;
    case DLC__AUG_SOLARIZE_ADD:
        dlc__aug_solarize_add(img, stride, w, h, c, a[0], a[1]);
        break;
    case DLC__AUG_BLUR:
        dlc__aug_blur(img, stride, w, h, c, (uint32_t)a[0], (uint32_t)a[1], a[2], a[3], s);
        break;
    default: {
        double m[6];
        geom_matrix(op, w, h, m);
        const uint32_t mode = (op->flags & DLC__AUG_F_BILINEAR)
                                  ? DLC__AUG_WARP_BILINEAR |
                                        ((op->flags & DLC__AUG_F_FILL) ? DLC__AUG_WARP_BLEND : 0u)
                                  : 0u;
        dlc__aug_warp(img, stride, w, h, c, m, op->fill, mode, s);
        break;
    }
    }
    return DLC_OK;
}

dlc_status dlc__aug_apply(const dlc__aug_record *rec, uint8_t *img, size_t stride, uint32_t width,
                          uint32_t height, uint32_t channels, void *scratch, size_t scratch_size)
{
    for (uint32_t i = 0; i < rec->n; i++) {
        const dlc_status rc = dlc__aug_apply_op(&rec->ops[i], img, stride, width, height, channels,
                                                scratch, scratch_size);
        if (rc < 0)
            return rc;
    }
    return DLC_OK;
}

int dlc__aug_record_commutes_with_flip(const dlc__aug_record *rec)
{
    for (uint32_t i = 0; i < rec->n; i++) {
        const uint32_t op = rec->ops[i].op;
        if (op == DLC__AUG_BLUR || !(op == DLC__AUG_IDENTITY || is_color(op)))
            return 0;
    }
    return 1;
}
