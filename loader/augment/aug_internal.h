/* Private to loader/ (and the tests): the per-sample ops on uint8 pixels and the augmentation
 * policies of issue 33, items 1, 2 and 7.
 *
 * Augmentation as data (docs/DESIGN.md): a sample's augmentation is a small record of ops with
 * their parameters (dlc__aug_record), drawn from the sample's random stream by dlc__aug_draw(),
 * then applied in place to the sample's uint8 HWC pixels by dlc__aug_apply(), or one op at a time
 * by dlc__aug_apply_op(): the two give the same bytes. The record can be copied out to the user
 * and applied again later; it holds no pointer.
 *
 * Every op follows torchvision 0.14's TENSOR path (torchvision.transforms.functional on a uint8
 * tensor) with the same parameters: color and histogram ops within 1 per channel value of it,
 * geometric ops identical on all but rare pixels whose source coordinate (nearest) or value
 * (bilinear, then within 1) lies on a rounding tie. Where the tensor path and the PIL path differ,
 * the comments of aug_color.c and aug_geom.c say where and follow the tensor path.
 *
 * No op allocates: the caller gives a scratch buffer of at least dlc__aug_scratch_bound() bytes
 * (the loader makes one per worker at open). The functions keep no state; different threads may
 * run them at once on different images and scratch buffers. */
#ifndef DLCACHE_LOADER_AUG_INTERNAL_H
#define DLCACHE_LOADER_AUG_INTERNAL_H

#include "common.h"

#include <stddef.h>
#include <stdint.h>

/* The ops. Values are stable (they go into records returned to users); new ones are appended
 * before DLC__AUG_OP_COUNT. What each op reads from dlc__aug_op.arg: */
typedef enum dlc__aug_op_id {
    DLC__AUG_IDENTITY = 0,     /* Nothing. */
    DLC__AUG_BRIGHTNESS = 1,   /* adjust_brightness: arg[0] brightness_factor >= 0. */
    DLC__AUG_CONTRAST = 2,     /* adjust_contrast: arg[0] contrast_factor >= 0. */
    DLC__AUG_SATURATION = 3,   /* adjust_saturation ("Color" of the policies): arg[0] >= 0. */
    DLC__AUG_HUE = 4,          /* adjust_hue: arg[0] hue_factor in [-0.5, 0.5]. */
    DLC__AUG_SHARPNESS = 5,    /* adjust_sharpness: arg[0] sharpness_factor >= 0. */
    DLC__AUG_POSTERIZE = 6,    /* posterize: arg[0] bits, an integer in 0..8. */
    DLC__AUG_SOLARIZE = 7,     /* solarize: arg[0] threshold (pixels >= it are inverted). */
    DLC__AUG_AUTOCONTRAST = 8, /* autocontrast: no argument. */
    DLC__AUG_EQUALIZE = 9,     /* equalize: no argument. */
    DLC__AUG_INVERT = 10,      /* invert: no argument. */
    DLC__AUG_GRAYSCALE = 11,   /* rgb_to_grayscale(num_output_channels=3): no argument. */
    DLC__AUG_BLUR = 12,        /* gaussian_blur: arg[0], arg[1] kernel width and height (odd
                                  integers >= 1), arg[2], arg[3] sigma x and y (> 0). */
    DLC__AUG_ROTATE = 13,      /* rotate: arg[0] angle in degrees, counter-clockwise, about the
                                  center (arg[6], arg[7]) with DLC__AUG_F_CENTER; fill. */
    /* The affine family: F.affine(angle=arg[0] (clockwise), translate=[arg[1], arg[2]] (pixels),
     * scale=arg[3] (> 0), shear=[arg[4], arg[5]] (degrees)), center (arg[6], arg[7]) in pixels
     * when flags has DLC__AUG_F_CENTER, else the image's center; fill. The policies' ShearX/Y
     * and TranslateX/Y are this op under their own ids (so a record says which op was drawn),
     * with the arguments torchvision's _apply_op gives F.affine. */
    DLC__AUG_AFFINE = 14,
    DLC__AUG_SHEAR_X = 15,
    DLC__AUG_SHEAR_Y = 16,
    DLC__AUG_TRANSLATE_X = 17,
    DLC__AUG_TRANSLATE_Y = 18,
    /* timm's SolarizeAdd: arg[0] addition (added, saturating at 255, to the values below
     * arg[1]), arg[1] threshold. A color op after the geometric ones (ids are stable). */
    DLC__AUG_SOLARIZE_ADD = 19,
    DLC__AUG_OP_COUNT
} dlc__aug_op_id;

/* dlc__aug_op.flags. */
enum {
    DLC__AUG_F_CENTER = 1u, /* Rotate and affine: arg[6], arg[7] are the center, in pixels. */
    /* The blends (brightness, contrast, saturation, sharpness): arg[1] is the other image's
     * weight, 1 - factor as torch computes it, (float)(1.0 - factor) of the factor in double
     * (Python's float); without the flag it is (float)(1.0 - arg[0]). The two differ in the last
     * bit when the factor is not a float32 (the policies' 1 + magnitude), which can move a
     * truncated value by 1. */
    DLC__AUG_F_WEIGHT = 2u,
    /* Rotate and affine: bilinear interpolation (torchvision's InterpolationMode.BILINEAR);
     * without it, nearest. */
    DLC__AUG_F_BILINEAR = 4u,
    /* Rotate and affine, bilinear: the fill was given (torchvision's fill=[...], even of zeros),
     * so it is blended in by the weight of the outside; without it the outside counts 0, as
     * torchvision's fill=None. Nearest takes fill[] outside either way. */
    DLC__AUG_F_FILL = 8u,
};

/* One op with its parameters, ready to apply: 44 bytes, no pointer. */
typedef struct dlc__aug_op {
    uint8_t op;          /* dlc__aug_op_id. */
    uint8_t flags;       /* DLC__AUG_F_*. */
    uint8_t fill[4];     /* Geometric ops: the value of channel k outside the source is fill[k]
                            (torchvision's fill). */
    uint8_t reserved[2]; /* Zero. */
    float magnitude;     /* What the policy drew, in torchvision's units before _apply_op turned it
                            into arg[] (signed; e.g. 0.3 for Brightness where arg[0] = 1.3), kept for
                            return_params; 0 for ops not drawn by a policy. Never read by apply. */
    float arg[8];        /* The functional parameters (dlc__aug_op_id says which). */
} dlc__aug_op;

/* The most ops of one sample: a policy's (DLC__AUG_RAND_MAX_OPS at most), color jitter's 4,
 * grayscale, blur and solarize. */
#define DLC__AUG_MAX_OPS 16u
/* The most ops RandAugment may apply to one sample (num_ops). */
#define DLC__AUG_RAND_MAX_OPS 8u
/* The largest Gaussian blur kernel side (torchvision has no limit; the reflect padding needs
 * kernel/2 < the image's side anyway). */
#define DLC__AUG_MAX_KERNEL 255u

/* The ops drawn for one sample, in the order they apply. */
typedef struct dlc__aug_record {
    uint32_t n; /* Ops used in ops[], <= DLC__AUG_MAX_OPS. */
    dlc__aug_op ops[DLC__AUG_MAX_OPS];
} dlc__aug_record;

/* The policies (dlc__aug_config.policy). */
typedef enum dlc__aug_policy {
    DLC__AUG_POLICY_NONE = 0,
    DLC__AUG_POLICY_TRIVIAL_WIDE = 1,  /* torchvision TrivialAugmentWide(num_magnitude_bins). */
    DLC__AUG_POLICY_RAND = 2,          /* torchvision RandAugment(num_ops, magnitude,
                                          num_magnitude_bins), plus timm's mstd. */
    DLC__AUG_POLICY_AUTO_IMAGENET = 3, /* torchvision AutoAugment(AutoAugmentPolicy.IMAGENET). */
    DLC__AUG_POLICY_TIMM_RAND = 4,     /* timm's rand_augment_transform (aug_timm.c): num_ops,
                                          magnitude, mstd, magnitude_max, increasing, op_prob. */
} dlc__aug_policy;

/* What to draw for each sample. All zero draws nothing. The ops apply in this order: the policy's,
 * color jitter's (in the drawn order of ColorJitter), grayscale, blur, solarize; it is the order of
 * the recipes that use them (torchvision's and timm's policy after the crop and flip; SimCLR's,
 * BYOL's and DINO's RandomApply(ColorJitter), RandomGrayscale, GaussianBlur, RandomSolarize). */
typedef struct dlc__aug_config {
    uint32_t policy;  /* dlc__aug_policy. */
    uint32_t num_ops; /* RAND: ops per sample, 1..DLC__AUG_RAND_MAX_OPS (torchvision 2). */
    float magnitude;  /* RAND: magnitude bin, 0..num_magnitude_bins-1 (torchvision 9);
                         with mstd, the center of timm's normal draw. */
    uint32_t num_magnitude_bins; /* TRIVIAL_WIDE and RAND: >= 2 (torchvision 31). */
    float mstd;                  /* RAND: timm's magnitude noise: each op's bin is drawn from
                                    normal(magnitude, mstd) clipped to [0, num_magnitude_bins-1]
                                    (continuous); INFINITY: uniform in [0, magnitude]; 0: none
                                    (torchvision's RandAugment). */
    uint8_t fill[4];             /* Geometric ops' fill per channel (torchvision's default: 0). */
    uint32_t bilinear;           /* Geometric ops: 1 bilinear, 0 nearest (torchvision's
                                    interpolation). */
    uint32_t has_fill;           /* Bilinear: the fill was given (DLC__AUG_F_FILL). */
    /* ColorJitter as torchvision resolves it: factors drawn uniformly in [lo, hi]; a range
     * lo == hi == 1 (0 for hue) is an absent jitter (not drawn, not applied), as ColorJitter's
     * None. Applied with probability jitter_p (RandomApply; 1 = always, 0 = never). */
    float jitter_p;
    float brightness[2];      /* >= 0. */
    float contrast[2];        /* >= 0. */
    float saturation[2];      /* >= 0. */
    float hue[2];             /* In [-0.5, 0.5]. */
    float grayscale_p;        /* RandomGrayscale(p), 3 output channels. */
    float blur_p;             /* GaussianBlur with probability blur_p (RandomApply). */
    float blur_sigma[2];      /* sigma drawn uniformly in [lo, hi], the same for x and y. */
    uint32_t blur_kernel[2];  /* kernel width and height, odd, 1..DLC__AUG_MAX_KERNEL. */
    float solarize_p;         /* RandomSolarize(threshold, p). */
    float solarize_threshold; /* Pixels >= it are inverted. */
    /* TIMM_RAND beside num_ops (timm's n), magnitude (m, on timm's 0..10 scale) and mstd: */
    float magnitude_max; /* mmax: the magnitudes are clipped to [0, magnitude_max] (10). */
    uint32_t increasing; /* inc: _RAND_INCREASING_TRANSFORMS instead of _RAND_TRANSFORMS. */
    float op_prob;       /* p: each chosen op applies with this probability (0.5). */
} dlc__aug_config;

/* Check @p cfg before any draw (at the loader's open): DLC_OK, or DLC_EINVAL with a message that
 * starts with @p what (e.g. "loader config: view 2") and names the field and the reason. */
dlc_status dlc__aug_config_check(const dlc__aug_config *cfg, const char *what);

/* Check that every op @p cfg can draw applies to images of @p width x @p height x @p channels
 * (the loader's output size, at open): color ops need 1 or 3 channels, the blur kernel's half
 * must be less than each side (torchvision's reflect padding). DLC_OK, or DLC_EINVAL with a
 * message that starts with @p what. @p cfg must have passed dlc__aug_config_check(). */
dlc_status dlc__aug_config_check_image(const dlc__aug_config *cfg, uint32_t width, uint32_t height,
                                       uint32_t channels, const char *what);

/* Draw one sample's ops from @p rng into @p rec (rec->n may be 0; the entries past n are zeroed,
 * so the whole struct is a pure function of the stream's position and compares as bytes):
 * torchvision's distribution for each op and magnitude. @p width and
 * @p height are those of the image the ops will apply to (RandAugment's and AutoAugment's
 * translations are a fraction of them); @p channels (1 or 3) only tells whether color ops
 * apply. @p cfg must have passed dlc__aug_config_check(). Never fails, never allocates. */
void dlc__aug_draw(const dlc__aug_config *cfg, uint32_t width, uint32_t height, uint32_t channels,
                   dlc__rng *rng, dlc__aug_record *rec);

/* The policy alone: append its ops for one sample to @p rec (as dlc__aug_draw does first).
 * Exposed for the tests' chi-square checks. */
/* timm's RandAugment (aug_timm.c): the ops of one view, appended to @p rec. */
void dlc__aug_draw_timm(const dlc__aug_config *cfg, uint32_t width, uint32_t height, dlc__rng *rng,
                        dlc__aug_record *rec);

void dlc__aug_draw_policy(const dlc__aug_config *cfg, uint32_t width, uint32_t height,
                          dlc__rng *rng, dlc__aug_record *rec);

/* Bytes of scratch any op or record needs on a @p width x @p height image of @p channels
 * channels (1..DLC__MAX_CHANNELS). */
size_t dlc__aug_scratch_bound(uint32_t width, uint32_t height, uint32_t channels);

/* Check one op against an image's shape: DLC_OK, or DLC_EINVAL with a message naming the op
 * (torchvision's function name, dlc__aug_op_name()) and the parameter. */
dlc_status dlc__aug_op_check(const dlc__aug_op *op, uint32_t width, uint32_t height,
                             uint32_t channels);

/* torchvision's name of @p op ("adjust_brightness", "rotate", "shear_x"...); "?" if unknown. */
const char *dlc__aug_op_name(uint32_t op);

/* Apply @p op in place to the @p width x @p height image @p img of @p channels interleaved uint8
 * channels (1 or 3 for color ops; 1..DLC__MAX_CHANNELS for geometric ones), rows @p stride bytes
 * apart (>= width * channels). @p scratch: @p scratch_size >= dlc__aug_scratch_bound() bytes, any
 * alignment. Color ops on a 1-channel image do what torchvision does on one (saturation, hue and
 * grayscale leave it). Checks the op (dlc__aug_op_check) and returns DLC_EINVAL with a message
 * when it is bad or the scratch is short; never allocates. */
dlc_status dlc__aug_apply_op(const dlc__aug_op *op, uint8_t *img, size_t stride, uint32_t width,
                             uint32_t height, uint32_t channels, void *scratch,
                             size_t scratch_size);

/* Apply the ops of @p rec in order, as dlc__aug_apply_op() one at a time would. */
dlc_status dlc__aug_apply(const dlc__aug_record *rec, uint8_t *img, size_t stride, uint32_t width,
                          uint32_t height, uint32_t channels, void *scratch, size_t scratch_size);

/* Whether the ops of @p rec commute exactly with a horizontal flip: applying them and then
 * flipping gives the bytes of flipping and then applying them. True when every op is a function
 * of each pixel's values and of statistics of the whole image (the color and histogram ops) or,
 * for sharpness, of a neighbourhood that is its own mirror image summed in integers; false for
 * the geometric ops and the blur (whose float sums would add the taps in the mirrored order).
 * The loader then flips in its conversion pass instead of in a copy of its own. */
int dlc__aug_record_commutes_with_flip(const dlc__aug_record *rec);

#endif /* DLCACHE_LOADER_AUG_INTERNAL_H */
