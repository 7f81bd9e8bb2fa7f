/* The geometry of the builder's resize and center crop, and the nearest-neighbour resample that
 * masks take through it.
 *
 * A mask (class ids, a label map) must land on exactly the pixels of its image: the same resized
 * size, the same crop window. dlc_jpeg_decode_resize() takes its geometry from
 * dlc_resize_geometry_get(), so a mask resized to the same geometry aligns pixel for pixel
 * whatever the DCT scaling of the image's decode (a reduced decode still stands for the whole
 * original). Nearest neighbour, because a blended class id is another class.
 *
 * The resample is Pillow's NEAREST (Image.resize(size, NEAREST), ImagingScaleAffine in
 * libImaging/Geometry.c), so that it is torchvision's Resize(size, InterpolationMode.NEAREST) on a
 * PIL mask: output column x takes source column (int)xo, where xo starts at scale / 2 and grows by
 * scale = src_w / out_w from one column to the next, added up in double precision as Pillow adds
 * it (not (x + 0.5) * scale, which rounds differently at a few exact boundaries); rows alike. */
#include "image_internal.h"

#include "common.h"

#include <string.h>

/* torchvision 0.14 _compute_resized_output_size for Resize(N) with an int N:
 * the shorter side becomes N, the longer int(N * long / short) (truncated). */
static void resized_size(uint32_t w, uint32_t h, uint32_t n, uint32_t *ow, uint32_t *oh)
{
    const uint32_t shorter = w <= h ? w : h, longer = w <= h ? h : w;
    const uint32_t new_long = (uint32_t)((double)n * longer / shorter);
    *ow = w <= h ? n : new_long;
    *oh = w <= h ? new_long : n;
}

/* torchvision's CenterCrop offset int(round(d / 2.0)): Python rounds half to
 * even, so an odd d gives whichever of d/2 -+ 0.5 is even. */
static uint32_t center_offset(uint32_t d)
{
    uint32_t q = d / 2;
    if ((d & 1u) && (q & 1u))
        q++;
    return q;
}

dlc_status dlc_resize_geometry_get(uint32_t src_w, uint32_t src_h, uint32_t short_side,
                                   int center_crop, dlc_resize_geometry *out)
{
    if (!out)
        return dlc__errorf(DLC_EINVAL, "resize geometry: out is NULL");
    memset(out, 0, sizeof *out);
    if (!src_w || !src_h || !short_side || short_side > DLC__IMAGE_MAX_SIDE)
        return dlc__errorf(DLC_EINVAL,
                           "resize geometry: %ux%u (height x width) to a short side of %u", src_h,
                           src_w, short_side);
    uint32_t rw, rh;
    resized_size(src_w, src_h, short_side, &rw, &rh);
    out->resized_w = rw;
    out->resized_h = rh;
    if (rw == 0 || rh == 0 || rw > DLC__IMAGE_MAX_SIDE || rh > DLC__IMAGE_MAX_SIDE)
        return dlc__errorf(DLC_EINVAL,
                           "resize geometry: %ux%u to a short side of %u gives %ux%u (height x "
                           "width)",
                           src_h, src_w, short_side, rh, rw);
    out->width = rw;
    out->height = rh;
    if (center_crop) {
        /* With the shorter side equal to N only the longer side is cut;
         * torchvision pads when the crop is larger, which cannot happen here. */
        out->width = rw < short_side ? rw : short_side;
        out->height = rh < short_side ? rh : short_side;
        out->x = center_offset(rw - out->width);
        out->y = center_offset(rh - out->height);
    }
    return DLC_OK;
}

/* Pillow's source position of output index @p i: the running sum of @p i steps of @p step,
 * started at half a step (see the top of the file). */
static double nearest_start(double step, uint32_t i)
{
    double p = step * 0.5;
    for (uint32_t k = 0; k < i; k++)
        p += step;
    return p;
}

/* The source index of a position; a sum that rounding pushed to the end stays inside. */
static uint32_t clamp_index(double pos, uint32_t n)
{
    const uint32_t i = (uint32_t)pos;
    return i < n ? i : n - 1;
}

dlc_status dlc_resize_nearest(const dlc_image *src, uint32_t out_w, uint32_t out_h, uint32_t x,
                              uint32_t y, const dlc_image *dst)
{
    if (!src || !dst || !src->data || !dst->data)
        return dlc__errorf(DLC_EINVAL, "nearest resize: NULL image");
    const uint32_t c = src->channels;
    if (c < 1 || c > 4 || dst->channels != c)
        return dlc__errorf(DLC_EINVAL, "nearest resize: %u channels to %u (1 to 4, the same)", c,
                           dst->channels);
    if (!src->width || !src->height || !out_w || !out_h || !dst->width || !dst->height ||
        src->stride < (size_t)src->width * c || dst->stride < (size_t)dst->width * c ||
        (uint64_t)x + dst->width > out_w || (uint64_t)y + dst->height > out_h)
        return dlc__errorf(DLC_EINVAL,
                           "nearest resize: %ux%u to the window (x %u, y %u) %ux%u of %ux%u "
                           "(height x width)",
                           src->height, src->width, x, y, dst->height, dst->width, out_h, out_w);
    const double sx = (double)src->width / out_w, sy = (double)src->height / out_h;
    double ypos = nearest_start(sy, y);
    const double x0 = nearest_start(sx, x);
    for (uint32_t j = 0; j < dst->height; j++, ypos += sy) {
        const uint8_t *in = src->data + (size_t)clamp_index(ypos, src->height) * src->stride;
        uint8_t *o = dst->data + (size_t)j * dst->stride;
        double xpos = x0;
        if (c == 1) {
            for (uint32_t i = 0; i < dst->width; i++, xpos += sx)
                o[i] = in[clamp_index(xpos, src->width)];
        } else {
            for (uint32_t i = 0; i < dst->width; i++, xpos += sx)
                memcpy(o + (size_t)i * c, in + (size_t)clamp_index(xpos, src->width) * c, c);
        }
    }
    return DLC_OK;
}
