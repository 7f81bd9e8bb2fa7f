/* Checking and dispatching the ops of aug_internal.h: one op, or a sample's record in order. */
#include "aug_internal.h"

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
};

const char *dlc__aug_op_name(uint32_t op)
{
    return op < DLC__AUG_OP_COUNT ? op_names[op] : "?";
}

size_t dlc__aug_scratch_bound(uint32_t width, uint32_t height, uint32_t channels)
{
    /* The largest user is the blur's horizontal pass, one float per channel value; the copies of
     * the geometric ops and sharpness (one byte per value) fit in it. The rest is the kernel,
     * histograms and alignment. */
    return (size_t)width * height * channels * sizeof(float) + 4096;
}

dlc_status dlc__aug_op_check(const dlc__aug_op *op, uint32_t width, uint32_t height,
                             uint32_t channels)
{
    (void)op;
    (void)width;
    (void)height;
    (void)channels;
    return dlc__errorf(DLC_ENOSYS, "augment: ops are not implemented yet");
}

dlc_status dlc__aug_apply_op(const dlc__aug_op *op, uint8_t *img, size_t stride, uint32_t width,
                             uint32_t height, uint32_t channels, void *scratch, size_t scratch_size)
{
    (void)img;
    (void)stride;
    (void)scratch;
    (void)scratch_size;
    return dlc__aug_op_check(op, width, height, channels);
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
