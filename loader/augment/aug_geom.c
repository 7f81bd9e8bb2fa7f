/* The geometric ops of aug_internal.h (rotate and the affine family), as torchvision 0.14's tensor
 * path computes them: _get_inverse_affine_matrix in double (Python), the matrix cast to float32,
 * _gen_affine_grid's pixel-center grid divided by half the image's size, and grid_sample with
 * nearest interpolation and align_corners=False, whose source index is the float32 coordinate
 * (x + 1) * W / 2 - 0.5 rounded half to even. Outside the source, the fill.
 *
 * Where the paths differ: PIL's affine (Image.transform with the same inverse matrix) takes the
 * pixel at floor(coordinate + 0.5) of a grid shifted by half a pixel, so PIL and tensor results
 * differ on tie pixels and by a 0.5-pixel offset of the center for rotations; we follow the
 * tensor path. torch's batched matrix product may fuse a multiply-add where we do not, so a pixel
 * whose coordinate lies within a float rounding of a .5 tie can land on the neighbouring source
 * pixel: rare (the tests require 99 % identical and see far more). */
#include "aug_ops.h"

#include <math.h>
#include <string.h>

void dlc__aug_inverse_affine(const double center[2], double angle, const double translate[2],
                             double scale, const double shear[2], double m[6])
{
    const double pi = 3.14159265358979323846;
    const double rot = angle * pi / 180.0;
    const double sx = shear[0] * pi / 180.0;
    const double sy = shear[1] * pi / 180.0;
    const double cx = center[0], cy = center[1];
    const double tx = translate[0], ty = translate[1];
    const double a = cos(rot - sy) / cos(sy);
    const double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    const double c = sin(rot - sy) / cos(sy);
    const double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d / scale;
    m[1] = -b / scale;
    m[2] = 0.0 / scale;
    m[3] = -c / scale;
    m[4] = a / scale;
    m[5] = 0.0 / scale;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
}

void dlc__aug_warp(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                   const double m[6], const uint8_t fill[4], void *scratch)
{
    const size_t row = (size_t)w * c;
    uint8_t *src = scratch;
    for (uint32_t y = 0; y < h; y++)
        memcpy(src + y * row, img + (size_t)y * stride, row);
    /* rescaled_theta = theta^T / [0.5 w, 0.5 h], in float32. */
    const float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
    const float r00 = (float)m[0] / hw, r10 = (float)m[1] / hw, r20 = (float)m[2] / hw;
    const float r01 = (float)m[3] / hh, r11 = (float)m[4] / hh, r21 = (float)m[5] / hh;
    /* grid_sample's unnormalize, align_corners=False: (g + 1) * size / 2 - 0.5. */
    const float ux = (float)w / 2.0f, uy = (float)h / 2.0f;
    for (uint32_t y = 0; y < h; y++) {
        const float by = -(float)h * 0.5f + 0.5f + (float)y;
        uint8_t *out = img + (size_t)y * stride;
        for (uint32_t x = 0; x < w; x++) {
            const float bx = -(float)w * 0.5f + 0.5f + (float)x;
            const float gx = bx * r00 + by * r10 + r20;
            const float gy = bx * r01 + by * r11 + r21;
            /* A coordinate beyond 2^22 is far outside any image: -1 marks it so. */
            const float fx = (gx + 1.0f) * ux - 0.5f, fy = (gy + 1.0f) * uy - 0.5f;
            const float ix = fabsf(fx) < 4194304.0f ? dlc__aug_round_even(fx) : -1.0f;
            const float iy = fabsf(fy) < 4194304.0f ? dlc__aug_round_even(fy) : -1.0f;
            uint8_t *o = out + (size_t)x * c;
            if (ix >= 0.0f && ix < (float)w && iy >= 0.0f && iy < (float)h) {
                const uint8_t *s = src + (size_t)iy * row + (size_t)ix * c;
                for (uint32_t k = 0; k < c; k++)
                    o[k] = s[k];
            } else {
                for (uint32_t k = 0; k < c; k++)
                    o[k] = fill[k];
            }
        }
    }
}
