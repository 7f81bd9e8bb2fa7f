/**
 * @file ops.h
 * @brief The loader's per-sample augmentation ops, one at a time, on a uint8 image.
 *
 * The loader applies these ops to each sample's pixels after the crop and flip (color jitter,
 * grayscale, blur, solarize, and the ops of TrivialAugmentWide, RandAugment and AutoAugment).
 * This header applies one of them with fixed parameters to an image of the caller's, so that a
 * user can check the loader's output against a reference, reproduce a sample from the
 * parameters the loader returned, or reuse the ops elsewhere.
 *
 * Each op is torchvision 0.14's function of the same name (torchvision.transforms.functional)
 * on a uint8 tensor, with the same parameters: the color and histogram ops agree with it within
 * 1 per channel value, the geometric ops with nearest interpolation on all pixels but those whose
 * source coordinate lies on a rounding tie, with bilinear interpolation on all values but those
 * that lie on a rounding tie (which may differ by 1). Where torchvision's tensor and PIL paths
 * differ (its grayscale and blends truncate, PIL rounds; its hue works in float HSV; its blur is a
 * true Gaussian), these follow the tensor path.
 *
 * Images are interleaved uint8 (::dlc_image): 1 or 3 (RGB) channels for the color ops, 1 to 4
 * for gaussian_blur and the geometric ops. No call allocates: the caller passes scratch memory
 * of dlc_op_scratch_bound() bytes.
 *
 * Thread safety: every call is safe from any thread; calls on different images and scratch
 * buffers may run at once.
 */
#ifndef DLCACHE_OPS_H
#define DLCACHE_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <dlcache/image.h>
#include <dlcache/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The ops, by torchvision's function names. The values are stable: they also name the ops in
 *  the parameters the loader returns for each sample. */
typedef enum dlc_op {
    DLC_OP_IDENTITY = 0,          /**< Copies the image. */
    DLC_OP_ADJUST_BRIGHTNESS = 1, /**< adjust_brightness(brightness_factor = factor). */
    DLC_OP_ADJUST_CONTRAST = 2,   /**< adjust_contrast(contrast_factor = factor). */
    DLC_OP_ADJUST_SATURATION = 3, /**< adjust_saturation(saturation_factor = factor). */
    DLC_OP_ADJUST_HUE = 4,        /**< adjust_hue(hue_factor = factor), factor in [-0.5, 0.5]. */
    DLC_OP_ADJUST_SHARPNESS = 5,  /**< adjust_sharpness(sharpness_factor = factor). */
    DLC_OP_POSTERIZE = 6,         /**< posterize(bits), bits in 0..8. */
    DLC_OP_SOLARIZE = 7,          /**< solarize(threshold), threshold <= 255. */
    DLC_OP_AUTOCONTRAST = 8,      /**< autocontrast(). */
    DLC_OP_EQUALIZE = 9,          /**< equalize(). */
    DLC_OP_INVERT = 10,           /**< invert(). */
    DLC_OP_RGB_TO_GRAYSCALE = 11, /**< rgb_to_grayscale(num_output_channels). */
    DLC_OP_GAUSSIAN_BLUR = 12,    /**< gaussian_blur(kernel_size, sigma). */
    DLC_OP_ROTATE = 13,           /**< rotate(angle, fill, center), nearest, no expand. */
    DLC_OP_AFFINE = 14,           /**< affine(angle, translate, scale, shear, fill, center). */
    DLC_OP_SHEAR_X = 15,          /**< The policies' ShearX: affine() as torchvision's _apply_op
                                       calls it for a shear of magnitude tan(shear[0] degrees):
                                       center (0, 0); the fields are affine()'s. */
    DLC_OP_SHEAR_Y = 16,          /**< The policies' ShearY, as ::DLC_OP_SHEAR_X. */
    DLC_OP_TRANSLATE_X = 17,      /**< The policies' TranslateX: affine() with translate only. */
    DLC_OP_TRANSLATE_Y = 18,      /**< The policies' TranslateY: affine() with translate only. */
    DLC_OP_SOLARIZE_ADD = 19,     /**< timm's SolarizeAdd (no torchvision function):
                                       solarize_add(addition, threshold): each value below
                                       threshold gets min(255, value + addition); addition an
                                       integer in 0..255. */
} dlc_op;

/** The interpolation of rotate and affine (torchvision's InterpolationMode). */
typedef enum dlc_interpolation {
    DLC_INTERP_NEAREST = 0,  /**< NEAREST: the source pixel at the coordinate rounded half to
                                  even (grid_sample mode="nearest"). */
    DLC_INTERP_BILINEAR = 1, /**< BILINEAR: the four source pixels around the coordinate weighed
                                  as grid_sample mode="bilinear" does, rounded half to even. */
} dlc_interpolation;

/**
 * One op and its parameters (size-carried options, status.h "How structs grow"): fill it with
 * dlc_op_params_init(), then set `op` and the fields that op reads; the others are ignored.
 */
typedef struct dlc_op_params {
    uint32_t struct_size;         /**< Set by dlc_op_params_init(). */
    uint32_t op;                  /**< A ::dlc_op. Default ::DLC_OP_IDENTITY. */
    double factor;                /**< brightness_factor, contrast_factor, saturation_factor,
                                       sharpness_factor (>= 0) or hue_factor ([-0.5, 0.5]). Default 1. */
    uint32_t bits;                /**< posterize: bits kept, 0..8. Default 8. */
    uint32_t num_output_channels; /**< rgb_to_grayscale: 1 or 3 (the destination's channels).
                                       Default 3. */
    double threshold;             /**< solarize: values >= it are inverted; solarize_add:
                                       values below it are raised. Default 128. */
    uint32_t kernel_size[2];      /**< gaussian_blur: width and height, odd, 1..255, with
                                       kernel_size / 2 less than the image's side (the reflect
                                       padding's rule). Default 3. */
    double sigma[2];              /**< gaussian_blur: sigma x and y, > 0. Default 0.8 (torchvision's
                                       for kernel 3: 0.3 * ((3 - 1) * 0.5 - 1) + 0.8). */
    double angle;           /**< rotate: degrees, counter-clockwise; affine: degrees, clockwise. */
    double translate[2];    /**< affine: pixels, x then y (after the rotation). Default 0. */
    double scale;           /**< affine: > 0. Default 1. */
    double shear[2];        /**< affine: degrees along x then y, each in (-90, 90). Default 0. */
    uint32_t has_center;    /**< rotate and affine: 1 to turn about `center`, 0 (default) about
                                 the image's center. */
    double center[2];       /**< rotate and affine: x, y in pixels from the top-left corner. */
    uint8_t fill[4];        /**< rotate and affine: the value of each channel where the source is
                                 outside the image (fill[k] for channel k). Default 0. */
    uint32_t interpolation; /**< rotate and affine: a ::dlc_interpolation. Default
                                 ::DLC_INTERP_NEAREST. */
    uint32_t has_fill;      /**< rotate and affine with ::DLC_INTERP_BILINEAR: 1 when `fill` was
                                 given (torchvision's fill=[...], also of zeros): it is blended in
                                 by the weight of the outside; 0 (default) with a fill of zeros:
                                 torchvision's fill=None, the outside counts 0 (a nonzero fill is
                                 given). Nearest takes `fill` outside either way. */
    double addition;        /**< solarize_add: added to the values below `threshold` (whose
                                 default, 128, is timm's). Default 0. */
} dlc_op_params;

/**
 * @brief Write the defaults into @p p (at most @p size bytes) and set its struct_size; call it
 *        through dlc_op_params_init().
 * @param[out] p The params to fill.
 * @param[in] size sizeof *p of the caller's header.
 */
DLC_API void dlc_op_params_init_sized(dlc_op_params *p, size_t size);
/** Fill @p p with the defaults and its size (see dlc_op_params_init_sized()). */
#define dlc_op_params_init(p) dlc_op_params_init_sized((p), sizeof *(p))

/**
 * @brief Bytes of scratch dlc_op_apply() needs for any op on an image of this shape.
 * @param[in] width Pixels.
 * @param[in] height Pixels.
 * @param[in] channels 1 to 4.
 * @return The bound, in bytes.
 */
DLC_API size_t dlc_op_scratch_bound(uint32_t width, uint32_t height, uint32_t channels);

/**
 * @brief Apply one op to @p src, writing @p dst.
 * @param[in] params The op and its parameters (dlc_op_params_init() first).
 * @param[in] src The image; read only. May be the same image as @p dst (in place).
 * @param[out] dst An image of the same width, height and channels (for rgb_to_grayscale, of
 *             num_output_channels channels); its pixels are written, nothing else.
 * @param scratch Work memory, any alignment; its contents on return are undefined.
 * @param[in] scratch_size Bytes at @p scratch, at least dlc_op_scratch_bound().
 * @return DLC_OK; DLC_EINVAL (a NULL pointer, a struct_size not from dlc_op_params_init(), an
 *         unknown op, a parameter out of its range, images whose shapes disagree or that
 *         overlap without being the same, a color op on an image of neither 1 nor 3 channels,
 *         too little scratch) with dlc_errmsg() naming the op (torchvision's name) and the
 *         parameter. On failure @p dst may have been written only for in-range parameters; a
 *         check failure writes nothing.
 */
DLC_API dlc_status dlc_op_apply(const dlc_op_params *params, const dlc_image *src,
                                const dlc_image *dst, void *scratch, size_t scratch_size);

/**
 * @brief torchvision's name of an op ("adjust_brightness", "gaussian_blur", "shear_x"...).
 * @param[in] op A ::dlc_op.
 * @return A static string; "?" for a value that is no op.
 */
DLC_API const char *dlc_op_name(uint32_t op);

#ifdef __cplusplus
}
#endif

#endif /* DLCACHE_OPS_H */
