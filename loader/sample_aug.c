/* The per-sample ops of a view group as the loader runs them (sample_aug.h): the public
 * dlc_augment_spec taken at open, each view's draw after its crop and flip, RandomErasing on the
 * converted output, and the drawn values as outputs of the batch (config.return_params). The ops
 * themselves and the policies' draws are augment/'s (aug_internal.h). */
#include "sample_aug.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void augment_spec_defaults(dlc_augment_spec *s)
{
    memset(s, 0, sizeof *s);
    s->jitter_prob = 1.0f;
    s->brightness[0] = s->brightness[1] = 1.0f;
    s->contrast[0] = s->contrast[1] = 1.0f;
    s->saturation[0] = s->saturation[1] = 1.0f;
    s->blur_sigma[0] = 0.1f, s->blur_sigma[1] = 2.0f;
    s->solarize_threshold = 128.0f;
    s->auto_augment = DLC_AUTO_AUGMENT_NONE;
    s->num_ops = 2;
    s->magnitude = 9.0f;
    s->num_magnitude_bins = 31;
    /* torchvision's RandomErasing(scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0). */
    s->erase_scale[0] = 0.02f, s->erase_scale[1] = 0.33f;
    s->erase_ratio[0] = 0.3f, s->erase_ratio[1] = 3.3f;
    s->erase_value = DLC_ERASE_ZERO;
    /* timm's rand_augment_transform defaults. */
    s->magnitude_max = 10.0f;
    s->op_prob = 0.5f;
}

void dlc_augment_spec_init_sized(dlc_augment_spec *s, size_t size)
{
    dlc_augment_spec d;
    augment_spec_defaults(&d);
    dlc__options_init(s, size, &d, sizeof d);
}

/* "view group \"NAME\"" or "the loader's view", for messages. */
static void group_label(const dlc__group *g, uint32_t i, char *buf, size_t cap)
{
    if (g->name[0])
        snprintf(buf, cap, "config.augment_specs[%u] (view group \"%s\")", i, g->name);
    else
        snprintf(buf, cap, "config.augment_specs[%u]", i);
}

static int prob_ok(float p)
{
    return p >= 0.0f && p <= 1.0f;
}

/* A jitter range that is not the identity: drawn and applied. */
static int jitter_part_on(const float r[2], float identity)
{
    return r[0] != identity || r[1] != identity;
}

/* The checks of the public spec that are not the ops' (dlc__aug_config_check() does theirs). */
static dlc_status check_spec(const dlc_loader *l, const dlc_augment_spec *a, const char *what)
{
    dlc_status rc = DLC_OK;
    FAIL_IF(!prob_ok(a->jitter_prob) || !prob_ok(a->grayscale_prob) || !prob_ok(a->blur_prob) ||
                !prob_ok(a->solarize_prob) || !prob_ok(a->erase_prob),
            DLC_EINVAL,
            "%s: %s: jitter_prob, grayscale_prob, blur_prob, solarize_prob and erase_prob must be "
            "probabilities in [0, 1] (they are %g, %g, %g, %g, %g)",
            l->path, what, a->jitter_prob, a->grayscale_prob, a->blur_prob, a->solarize_prob,
            a->erase_prob);
    FAIL_IF(a->auto_augment > DLC_AUTO_AUGMENT_TIMM_RAND, DLC_EINVAL,
            "%s: %s: auto_augment = %u is not a dlc_auto_augment", l->path, what, a->auto_augment);
    for (int c = 0; c < 3; c++)
        FAIL_IF(a->fill[c] > 255, DLC_EINVAL, "%s: %s: fill[%d] = %u must be in 0..255", l->path,
                what, c, a->fill[c]);
    if (a->erase_prob > 0) {
        FAIL_IF(!(a->erase_scale[0] > 0 && a->erase_scale[0] <= a->erase_scale[1] &&
                  a->erase_scale[1] <= 1),
                DLC_EINVAL, "%s: %s: erase_scale (%g, %g) must satisfy 0 < lo <= hi <= 1", l->path,
                what, a->erase_scale[0], a->erase_scale[1]);
        FAIL_IF(!(a->erase_ratio[0] > 0 && a->erase_ratio[0] <= a->erase_ratio[1] &&
                  a->erase_ratio[1] < 1e6f),
                DLC_EINVAL, "%s: %s: erase_ratio (%g, %g) must satisfy 0 < lo <= hi < 1e6", l->path,
                what, a->erase_ratio[0], a->erase_ratio[1]);
        FAIL_IF(a->erase_value > DLC_ERASE_CONSTANT, DLC_EINVAL,
                "%s: %s: erase_value = %u is not a dlc_erase_value", l->path, what, a->erase_value);
        for (int c = 0; c < 4; c++)
            FAIL_IF(!isfinite(a->erase_constant[c]), DLC_EINVAL,
                    "%s: %s: erase_constant[%d] must be finite", l->path, what, c);
    }
fail:
    return rc;
}

/* Group @p g takes spec @p a. */
static dlc_status take_spec(dlc_loader *l, dlc__group *g, const dlc_augment_spec *a,
                            const char *what)
{
    dlc_status rc = DLC_OK;
    CHECK(check_spec(l, a, what));
    dlc__aug_config *c = &g->aug;
    memset(c, 0, sizeof *c);
    static const uint32_t policy[] = {DLC__AUG_POLICY_NONE, DLC__AUG_POLICY_TRIVIAL_WIDE,
                                      DLC__AUG_POLICY_RAND, DLC__AUG_POLICY_AUTO_IMAGENET,
                                      DLC__AUG_POLICY_TIMM_RAND};
    c->policy = policy[a->auto_augment];
    c->num_ops = a->num_ops;
    c->magnitude = a->magnitude;
    c->num_magnitude_bins = a->num_magnitude_bins;
    c->mstd = a->magnitude_std;
    c->magnitude_max = a->magnitude_max;
    c->increasing = a->increasing;
    c->op_prob = a->op_prob;
    for (int k = 0; k < 3; k++)
        c->fill[k] = (uint8_t)a->fill[k];
    c->bilinear = a->interpolation;
    c->has_fill = a->has_fill || a->fill[0] || a->fill[1] || a->fill[2];
    const int jitter = jitter_part_on(a->brightness, 1.0f) || jitter_part_on(a->contrast, 1.0f) ||
                       jitter_part_on(a->saturation, 1.0f) || jitter_part_on(a->hue, 0.0f);
    c->jitter_p = jitter ? a->jitter_prob : 0.0f;
    memcpy(c->brightness, a->brightness, sizeof c->brightness);
    memcpy(c->contrast, a->contrast, sizeof c->contrast);
    memcpy(c->saturation, a->saturation, sizeof c->saturation);
    memcpy(c->hue, a->hue, sizeof c->hue);
    c->grayscale_p = a->grayscale_prob;
    c->blur_p = a->blur_prob;
    memcpy(c->blur_sigma, a->blur_sigma, sizeof c->blur_sigma);
    memcpy(c->blur_kernel, a->blur_kernel, sizeof c->blur_kernel);
    if (c->blur_p == 0) {
        /* Off: what the kernel and sigma say does not matter (and 0, 0 is no kernel). */
        c->blur_kernel[0] = c->blur_kernel[1] = 1;
        c->blur_sigma[0] = c->blur_sigma[1] = 1.0f;
    }
    c->solarize_p = a->solarize_prob;
    c->solarize_threshold = a->solarize_threshold;
    if (c->policy != DLC__AUG_POLICY_TIMM_RAND) {
        c->magnitude_max = 10.0f, c->increasing = 0, c->op_prob = 0.5f;
    }
    if (c->policy != DLC__AUG_POLICY_RAND && c->policy != DLC__AUG_POLICY_TIMM_RAND) {
        /* Only RandAugment reads them: a policy that does not use them is not refused for
         * them. */
        c->num_ops = 2;
        c->magnitude = 9.0f;
        c->mstd = 0.0f;
    }
    if (c->policy == DLC__AUG_POLICY_NONE || c->policy == DLC__AUG_POLICY_AUTO_IMAGENET ||
        c->policy == DLC__AUG_POLICY_TIMM_RAND)
        c->num_magnitude_bins = 31;
    g->aug_on = c->policy != DLC__AUG_POLICY_NONE || c->jitter_p > 0 || c->grayscale_p > 0 ||
                c->blur_p > 0 || c->solarize_p > 0;
    if (g->aug_on) {
        char label[160];
        snprintf(label, sizeof label, "%s: %s", l->path, what);
        CHECK(dlc__aug_config_check(c, label));
    }
    g->erase_p = a->erase_prob;
    memcpy(g->erase_scale, a->erase_scale, sizeof g->erase_scale);
    memcpy(g->erase_ratio, a->erase_ratio, sizeof g->erase_ratio);
    g->erase_value = a->erase_value;
    memcpy(g->erase_constant, a->erase_constant, sizeof g->erase_constant);
fail:
    return rc;
}

dlc_status dlc__aug_plan_groups(dlc_loader *l)
{
    const dlc_loader_config *c = &l->cfg;
    dlc_status rc = DLC_OK;
    l->aug_any = c->return_params != 0;
    FAIL_IF(c->return_params > 1, DLC_EINVAL, "%s: config.return_params = %u must be 0 or 1",
            l->path, c->return_params);
    if (!c->augment_specs || c->num_augment_specs == 0) {
        FAIL_IF(c->num_augment_specs != 0, DLC_EINVAL,
                "%s: config.num_augment_specs = %u with augment_specs NULL", l->path,
                c->num_augment_specs);
        return DLC_OK;
    }
    FAIL_IF(c->num_augment_specs != l->ngroups, DLC_EINVAL,
            "%s: config.num_augment_specs = %u: give one per view group (%u)%s", l->path,
            c->num_augment_specs, l->ngroups,
            c->views && c->num_views ? "" : ", one without config.views");
    /* Every entry has the first's size (the caller's header's), and the array steps by it. */
    uint32_t stride;
    memcpy(&stride, c->augment_specs, sizeof stride);
    for (uint32_t i = 0; i < l->ngroups; i++) {
        const uint8_t *at = (const uint8_t *)c->augment_specs + (size_t)i * stride;
        uint32_t size;
        memcpy(&size, at, sizeof size);
        FAIL_IF(size != stride, DLC_EINVAL,
                "%s: config.augment_specs[%u].struct_size = %u, but [0]'s is %u: fill every "
                "entry with dlc_augment_spec_init()",
                l->path, i, size, stride);
        dlc_augment_spec a;
        CHECK(dlc__options_take(&a, sizeof a, at, "dlc_augment_spec", "dlc_augment_spec_init"));
        char what[96];
        group_label(&l->groups[i], i, what, sizeof what);
        CHECK(take_spec(l, &l->groups[i], &a, what));
        l->aug_any |= l->groups[i].aug_on || l->groups[i].erase_p > 0;
    }
fail:
    return rc;
}

/* The output name NAME_SUFFIX of group @p g (NAME alone for the default group). */
static void param_name(const dlc__group *g, const char *name, char *buf, size_t cap)
{
    if (g->name[0])
        snprintf(buf, cap, "%s_%s", name, g->name);
    else
        snprintf(buf, cap, "%s", name);
}

static dlc_status add_param(dlc_loader *l, uint32_t g, uint32_t which)
{
    static const char *const names[DLC__PAR_COUNT] = {"params_box",       "params_flip",
                                                      "params_ops",       "params_args",
                                                      "params_magnitude", "params_erase"};
    static const uint32_t dtype[DLC__PAR_COUNT] = {DLC_DTYPE_INT32,   DLC_DTYPE_UINT8,
                                                   DLC_DTYPE_INT32,   DLC_DTYPE_FLOAT32,
                                                   DLC_DTYPE_FLOAT32, DLC_DTYPE_INT32};
    const dlc__group *gr = &l->groups[g];
    dlc__output o = {.field = DLC_NO_FIELD,
                     .kind = DLC_FIELD_NDARRAY,
                     .op = DLC__OUT_PARAMS,
                     .param = which,
                     .group = g,
                     .var = DLC__VAR_FIXED,
                     .dtype = dtype[which],
                     .layout = DLC_LAYOUT_NONE,
                     .link = -1,
                     .filtered_by = -1};
    param_name(gr, names[which], o.name, sizeof o.name);
    for (uint32_t i = 0; i < l->nout; i++)
        if (strcmp(l->out[i].name, o.name) == 0)
            return dlc__errorf(DLC_EINVAL,
                               "%s: config.return_params: output \"%s\" would have the name of "
                               "a field of the store: leave the field out with config.fields",
                               l->path, o.name);
    if (gr->name[0])
        o.dims[o.ndim++] = gr->count;
    switch (which) {
    case DLC__PAR_BOX:
    case DLC__PAR_ERASE:
        o.dims[o.ndim++] = 4;
        break;
    case DLC__PAR_OPS:
        o.dims[o.ndim++] = DLC_AUGMENT_MAX_OPS;
        o.dims[o.ndim++] = 2;
        break;
    case DLC__PAR_ARGS:
        o.dims[o.ndim++] = DLC_AUGMENT_MAX_OPS;
        o.dims[o.ndim++] = 8;
        break;
    case DLC__PAR_MAGNITUDE:
        o.dims[o.ndim++] = DLC_AUGMENT_MAX_OPS;
        break;
    default:
        break;
    }
    o.sample_cap = dlc_dtype_size(o.dtype);
    for (uint32_t d = 0; d < o.ndim; d++)
        o.sample_cap *= o.dims[d];
    dlc__output *n = realloc(l->out, (l->nout + 1) * sizeof *n);
    if (!n)
        return dlc__errorf(-ENOMEM, "%s: out of memory", l->path);
    l->out = n;
    l->out[l->nout++] = o;
    return DLC_OK;
}

dlc_status dlc__aug_plan_outputs(dlc_loader *l)
{
    dlc_status rc = DLC_OK;
    _Static_assert(DLC_AUGMENT_MAX_OPS == DLC__AUG_MAX_OPS, "the public and private op counts");
    l->erase_dev = 0;
    for (uint32_t g = 0; g < l->ngroups; g++) {
        dlc__group *gr = &l->groups[g];
        char what[96];
        group_label(gr, g, what, sizeof what);
        gr->aug_channels = 0;
        for (uint32_t i = 0; i < l->nout; i++) {
            dlc__output *o = &l->out[i];
            if (o->group != g ||
                (o->op != DLC__OUT_IMAGE && o->op != DLC__OUT_MASK && o->op != DLC__OUT_BOXES))
                continue;
            /* The policies move pixels (rotate, shear, translate); masks and boxes follow the
             * crop and flip only, so they would no longer match the image. */
            FAIL_IF(o->op != DLC__OUT_IMAGE && gr->aug.policy != DLC__AUG_POLICY_NONE, DLC_EINVAL,
                    "%s: %s: auto_augment moves the image's pixels but not those of field "
                    "\"%s\" (masks and boxes follow the crop and flip only): leave it out with "
                    "config.fields, or use no policy",
                    l->path, what, l->fields[o->field].name);
            if (o->op != DLC__OUT_IMAGE || (!gr->aug_on && gr->erase_p == 0))
                continue;
            FAIL_IF(gr->aug_on && o->out_c != 1 && o->out_c != 3, DLC_EINVAL,
                    "%s: %s: field \"%s\" has %u channels; the ops take 1 (gray) or 3 (RGB)",
                    l->path, what, l->fields[o->field].name, o->out_c);
            FAIL_IF(gr->aug_channels && gr->aug_channels != o->out_c, DLC_EINVAL,
                    "%s: %s: the images of the group have %u and %u channels; its ops are "
                    "drawn once per view for all of them, so they must agree",
                    l->path, what, gr->aug_channels, o->out_c);
            gr->aug_channels = o->out_c;
            if (gr->aug_on) {
                /* Refused at open rather than at the first sample: a blur kernel too large for
                 * the view, say. */
                char label[160];
                snprintf(label, sizeof label, "%s: %s: field \"%s\"", l->path, what,
                         l->fields[o->field].name);
                CHECK(dlc__aug_config_check_image(&gr->aug, o->out_w, o->out_h, o->out_c, label));
            }
            if (gr->erase_p > 0) {
                /* The device path converts on the device: a float output is erased there, after
                 * its conversion (dlc__aug_erase_boxes() passes the boxes with the batch); a
                 * uint8 one is erased in the slot, as the host path does. */
                const uint32_t dtype = l->dev ? dlc__dev_dtype(l) : o->dtype;
                if (l->dev && dtype != DLC_DTYPE_UINT8)
                    l->erase_dev = 1;
                FAIL_IF(dtype == DLC_DTYPE_UINT8 && gr->erase_value == DLC_ERASE_NOISE, DLC_EINVAL,
                        "%s: %s: erase_value DLC_ERASE_NOISE needs a float dtype (normal noise "
                        "has no uint8 value)",
                        l->path, what);
                for (uint32_t c = 0; dtype == DLC_DTYPE_UINT8 &&
                                     gr->erase_value == DLC_ERASE_CONSTANT && c < o->out_c;
                     c++)
                    FAIL_IF(!(gr->erase_constant[c] >= 0 && gr->erase_constant[c] <= 255 &&
                              gr->erase_constant[c] == floorf(gr->erase_constant[c])),
                            DLC_EINVAL,
                            "%s: %s: erase_constant[%u] = %g: with dtype uint8 the erased value "
                            "is a pixel value, an integer in 0..255",
                            l->path, what, c, gr->erase_constant[c]);
            }
            if (!gr->aug_on)
                continue;
            dlc__convert_init(&o->cv_u8, DLC_DTYPE_UINT8, o->out_c, l->cfg.mean, l->cfg.std);
            const size_t img = (size_t)o->out_h * o->out_w * o->out_c;
            const size_t scr = dlc__aug_scratch_bound(o->out_w, o->out_h, o->out_c);
            /* A uint8 output is its own staging (sample.c, image_view_ops()). */
            if (o->dtype != DLC_DTYPE_UINT8 && img > l->aug_img_bytes)
                l->aug_img_bytes = img;
            l->aug_scratch_bytes = scr > l->aug_scratch_bytes ? scr : l->aug_scratch_bytes;
        }
        if (!gr->aug_channels)
            gr->aug_channels = 3; /* No image to apply to: the draw only needs a count. */
    }
    if (!l->cfg.return_params)
        return DLC_OK;
    FAIL_IF(l->primary == DLC_NO_FIELD, DLC_EINVAL,
            "%s: config.return_params: the store has no image or mask field, so nothing is "
            "cropped or drawn",
            l->path);
    for (uint32_t g = 0; g < l->ngroups; g++)
        for (uint32_t p = 0; p < DLC__PAR_COUNT; p++)
            CHECK(add_param(l, g, p));
fail:
    return rc;
}

dlc_status dlc__aug_worker_alloc(const dlc_loader *l, dlc__worker *w)
{
    if (!l->aug_any)
        return DLC_OK;
    w->vaug = calloc(l->nviews, sizeof *w->vaug);
    if (l->aug_img_bytes)
        w->aug_img = malloc(l->aug_img_bytes);
    if (l->aug_scratch_bytes)
        w->aug_scratch = malloc(l->aug_scratch_bytes);
    if (!w->vaug || (l->aug_img_bytes && !w->aug_img) || (l->aug_scratch_bytes && !w->aug_scratch))
        return dlc__errorf(-ENOMEM, "loader: out of memory for a worker's augmentation buffers");
    return DLC_OK;
}

void dlc__aug_worker_free(dlc__worker *w)
{
    free(w->vaug);
    free(w->aug_img);
    free(w->aug_scratch);
    w->vaug = NULL;
    w->aug_img = NULL;
    w->aug_scratch = NULL;
}

/* torchvision 0.14 RandomErasing: with probability p, get_params() on the C x oh x ow output:
 * up to 10 tries of an area fraction uniform in scale and a log-uniform aspect, h = round(
 * sqrt(area * aspect)), w = round(sqrt(area / aspect)), kept when h < oh and w < ow, placed
 * uniformly; none kept: the image is left as it is. */
static void draw_erase(const dlc__group *gr, uint32_t ow, uint32_t oh, dlc__rng *r,
                       dlc__view_aug *va)
{
    va->etop = va->eleft = va->eh = va->ew = 0;
    if (gr->erase_p <= 0 || !(dlc__rng_uniform(r) < gr->erase_p))
        return;
    const double area = (double)oh * ow;
    const double lr0 = log((double)gr->erase_ratio[0]), lr1 = log((double)gr->erase_ratio[1]);
    const double s0 = gr->erase_scale[0], s1 = gr->erase_scale[1];
    for (int attempt = 0; attempt < 10; attempt++) {
        const double ea = area * (s0 + (s1 - s0) * dlc__rng_uniform(r));
        const double aspect = exp(lr0 + (lr1 - lr0) * dlc__rng_uniform(r));
        /* Python's round(): half to even, nearbyint() in the default rounding mode. */
        const double h = nearbyint(sqrt(ea * aspect)), w = nearbyint(sqrt(ea / aspect));
        if (!(h < oh && w < ow))
            continue;
        va->eh = (uint32_t)h;
        va->ew = (uint32_t)w;
        va->etop = (uint32_t)dlc__rng_below(r, (uint64_t)(oh - va->eh) + 1);
        va->eleft = (uint32_t)dlc__rng_below(r, (uint64_t)(ow - va->ew) + 1);
        return;
    }
}

void dlc__aug_draw_view(const dlc__group *gr, uint32_t v, uint32_t ow, uint32_t oh, uint64_t seed,
                        uint64_t epoch, uint64_t pos, dlc__rng *r, dlc__view_aug *va)
{
    va->rec.n = 0;
    if (gr->aug_on)
        dlc__aug_draw(&gr->aug, ow, oh, gr->aug_channels, r, &va->rec);
    draw_erase(gr, ow, oh, r, va);
    /* The erased values get a stream of their own (C x h x w of them), unrelated to the view's
     * (purpose bit 16 is unused by the crop's keys, whose view number is in bits 8..15). */
    va->noise_key = 0;
    if (va->eh && gr->erase_value == DLC_ERASE_NOISE)
        va->noise_key =
            dlc__key4(DLC__KEY_AUGMENT | ((uint64_t)v << 8) | (1ull << 16), seed, epoch, pos);
}

void dlc__aug_erase(const dlc__group *gr, const dlc__output *o, const dlc__view_aug *va,
                    uint8_t *dst)
{
    if (!va->eh || !va->ew)
        return;
    const uint32_t C = o->out_c, W = o->out_w, H = o->out_h;
    assert(va->etop + va->eh <= H && va->eleft + va->ew <= W);
    if (o->dtype == DLC_DTYPE_UINT8) {
        /* NHWC; zero or an integer constant (dlc__aug_plan_outputs() checked). */
        for (uint32_t y = va->etop; y < va->etop + va->eh; y++)
            for (uint32_t x = va->eleft; x < va->eleft + va->ew; x++)
                for (uint32_t c = 0; c < C; c++)
                    dst[((size_t)y * W + x) * C + c] =
                        gr->erase_value == DLC_ERASE_CONSTANT ? (uint8_t)gr->erase_constant[c] : 0;
        return;
    }
    /* NCHW planes. The noise is dlc__hd_normal() of the element's index in the box in torch's
     * order (channel, row, column), the function the device path runs (convert_hd.h). A
     * constant (or zero) is converted once per channel and its rows filled, so erasing costs
     * about a copy. */
    const size_t plane = (size_t)W * H, es = o->dtype == DLC_DTYPE_FLOAT32 ? 4 : 2;
    const uint32_t hd = o->dtype == DLC_DTYPE_BFLOAT16 ? DLC__HD_BFLOAT16 : DLC__HD_FLOAT16;
    uint64_t j = 0;
    for (uint32_t c = 0; c < C; c++) {
        const float k = gr->erase_value == DLC_ERASE_CONSTANT ? gr->erase_constant[c] : 0.0f;
        const uint16_t k16 = dlc__hd_f32_to_16(k, hd);
        for (uint32_t y = va->etop; y < va->etop + va->eh; y++) {
            uint8_t *row = dst + (c * plane + (size_t)y * W + va->eleft) * es;
            if (gr->erase_value == DLC_ERASE_NOISE) {
                for (uint32_t x = 0; x < va->ew; x++, j++) {
                    const float v = dlc__hd_normal(va->noise_key, j);
                    if (es == 2) {
                        const uint16_t h = dlc__hd_f32_to_16(v, hd);
                        memcpy(row + (size_t)x * 2, &h, 2);
                    } else {
                        memcpy(row + (size_t)x * 4, &v, 4);
                    }
                }
            } else if (es == 2) {
                for (uint32_t x = 0; x < va->ew; x++)
                    memcpy(row + (size_t)x * 2, &k16, 2);
            } else {
                for (uint32_t x = 0; x < va->ew; x++)
                    memcpy(row + (size_t)x * 4, &k, 4);
            }
        }
    }
}

void dlc__aug_erase_boxes(const dlc_loader *l, const dlc__worker *w, uint8_t *table)
{
    for (uint32_t v = 0; v < l->nviews; v++) {
        const dlc__view_aug *va = &w->vaug[v];
        const dlc__hd_erase_box b = {va->etop, va->eleft, va->ew ? va->eh : 0, va->ew,
                                     va->noise_key};
        memcpy(table + (size_t)v * sizeof b, &b, sizeof b);
    }
}

void dlc__aug_params_write(const dlc_loader *l, const dlc__worker *w, const dlc__output *o,
                           uint8_t *dst)
{
    const dlc__group *gr = &l->groups[o->group];
    for (uint32_t k = 0; k < gr->count; k++) {
        const uint32_t v = gr->first + k;
        const dlc__view_params *vp = &w->views[v];
        const dlc__view_aug *va = &w->vaug[v];
        switch (o->param) {
        case DLC__PAR_BOX: {
            const int32_t b[4] = {(int32_t)vp->box.top, (int32_t)vp->box.left, (int32_t)vp->box.h,
                                  (int32_t)vp->box.w};
            memcpy(dst + (size_t)k * sizeof b, b, sizeof b);
            break;
        }
        case DLC__PAR_FLIP:
            dst[k] = (uint8_t)(vp->flip != 0);
            break;
        case DLC__PAR_OPS: {
            int32_t rows[DLC_AUGMENT_MAX_OPS][2];
            for (uint32_t i = 0; i < DLC_AUGMENT_MAX_OPS; i++) {
                rows[i][0] = i < va->rec.n ? (int32_t)va->rec.ops[i].op : -1;
                rows[i][1] = i < va->rec.n ? (int32_t)va->rec.ops[i].flags : 0;
            }
            memcpy(dst + (size_t)k * sizeof rows, rows, sizeof rows);
            break;
        }
        case DLC__PAR_ARGS: {
            float args[DLC_AUGMENT_MAX_OPS][8];
            memset(args, 0, sizeof args);
            for (uint32_t i = 0; i < va->rec.n; i++)
                memcpy(args[i], va->rec.ops[i].arg, sizeof args[i]);
            memcpy(dst + (size_t)k * sizeof args, args, sizeof args);
            break;
        }
        case DLC__PAR_MAGNITUDE: {
            float m[DLC_AUGMENT_MAX_OPS];
            for (uint32_t i = 0; i < DLC_AUGMENT_MAX_OPS; i++)
                m[i] = i < va->rec.n ? va->rec.ops[i].magnitude : 0.0f;
            memcpy(dst + (size_t)k * sizeof m, m, sizeof m);
            break;
        }
        case DLC__PAR_ERASE: {
            const int32_t e[4] = {(int32_t)va->etop, (int32_t)va->eleft, (int32_t)va->eh,
                                  (int32_t)va->ew};
            memcpy(dst + (size_t)k * sizeof e, e, sizeof e);
            break;
        }
        default:
            assert(0);
        }
    }
}
