/* The color and histogram ops of aug_internal.h on interleaved uint8 pixels, in place.
 *
 * Each follows torchvision 0.14's tensor path (functional_tensor.py) on a uint8 tensor, step by
 * step in float32 as torch computes it, so that the results agree within 1 (most are identical):
 *   - _blend() (brightness, contrast, saturation, sharpness) computes ratio * a + (1 - ratio) * b
 *     in float32, clamps to [0, 255] and TRUNCATES to uint8 (.to(torch.uint8)); PIL's
 *     ImageEnhance rounds instead: a difference of the two paths, we truncate.
 *   - rgb_to_grayscale is 0.2989 R + 0.587 G + 0.114 B in float32, truncated (PIL's "L" is
 *     (19595 R + 38470 G + 7471 B + 0x8000) >> 16, rounded: we follow the tensor path).
 *   - adjust_contrast's mean is the mean of that truncated grayscale, as a float.
 *   - adjust_hue converts to HSV in float32 (x / 255) and back, then truncates x * 255; PIL works
 *     on 8-bit HSV instead, so the two paths differ by a few values: we follow the tensor path.
 *   - adjust_sharpness's smoothed image is rounded (half to even) and keeps the border pixels;
 *     gaussian_blur rounds too, after a reflect padding (PIL's GaussianBlur is a box
 *     approximation: the paths differ, we follow the tensor path's true Gaussian).
 *   - solarize inverts values >= threshold; equalize and autocontrast work per channel, with the
 *     tensor path's integer step and float scale.
 * The only difference left is the order of float sums (torch's conv2d and mean), which can move a
 * value that sits on a rounding boundary by 1.
 *
 * Speed (issue 33: the ops run per sample in the loader's workers): on x86 CPUs with AVX2 the
 * bulk of each row goes through aug_color_avx2.c's kernels, which compute the same float32
 * operations in the same order 8 lanes at a time, so the bytes do not depend on the CPU; the
 * scalar loops here do the rest of each row, and all of it elsewhere. The blur's loops are
 * compiled twice instead (blur_passes()), once for AVX2. */
#include "aug_ops.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#define ROW(img, stride, y) ((img) + (size_t)(y) * (stride))

static inline uint8_t trunc_u8(float v)
{
    /* clamp(0, 255) then .to(uint8), which truncates toward zero. A NaN cannot arise from finite
     * factors; it is mapped to 0 like the clamp's comparison would leave it to the cast. */
    if (!(v > 0.0f))
        return 0;
    if (v >= 255.0f)
        return 255;
    return (uint8_t)v;
}

/* rgb_to_grayscale's (0.2989 * r + 0.587 * g + 0.114 * b).to(uint8), each scalar product in
 * float32, as tables of the three products per byte value: summed in the same order, they give
 * torch's float32 sum, truncated. */
typedef struct gray_tables {
    float r[256], g[256], b[256];
} gray_tables;

static void gray_init(gray_tables *t)
{
    for (int v = 0; v < 256; v++) {
        t->r[v] = 0.2989f * (float)v;
        t->g[v] = 0.587f * (float)v;
        t->b[v] = 0.114f * (float)v;
    }
}

static inline uint8_t gray_lut(const gray_tables *t, const uint8_t *p)
{
    return (uint8_t)(t->r[p[0]] + t->g[p[1]] + t->b[p[2]]);
}

/* Map every channel value through the tables @p lut (value i of a row through lut[i % c]): the
 * ops whose result depends on the value alone compute their expression once per byte value and
 * channel (the same float operations, so the same result) and then cost a table look-up per
 * value. With AVX2 the bulk of each row computes the expression itself instead, which is faster
 * than the look-ups: a[k] * x + b[k] (@p sub_first 0) or (x - a[k]) * b[k] (1), clamped and
 * truncated, what the tables hold. */
static void map_lut(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                    const uint8_t (*lut)[256], int sub_first, const float a[DLC__AUG_MAX_CHANNELS],
                    const float b[DLC__AUG_MAX_CHANNELS])
{
    const size_t n = (size_t)w * c;
    const int vec = dlc__aug_have_avx2();
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *p = ROW(img, stride, y);
        size_t i = 0;
        if (vec)
            i = dlc__aug_map_avx2(p, n, c, sub_first, a, b);
        if (c == 1) {
            for (; i < n; i++)
                p[i] = lut[0][p[i]];
        } else {
            /* i is a multiple of c: a pixel's first value. */
            for (; i < n; i += c)
                for (uint32_t k = 0; k < c; k++)
                    p[i + k] = lut[k][p[i + k]];
        }
    }
}

void dlc__aug_blend_const(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, float r,
                          float q, float other)
{
    const float rest = q * other;
    uint8_t lut[1][256];
    for (int v = 0; v < 256; v++)
        lut[0][v] = trunc_u8(r * (float)v + rest);
    const float a[DLC__AUG_MAX_CHANNELS] = {r, r, r, r};
    const float b[DLC__AUG_MAX_CHANNELS] = {rest, rest, rest, rest};
    /* Every channel alike: a row is w * c values of one channel. */
    map_lut(img, stride, w * c, h, 1, lut, 0, a, b);
}

void dlc__aug_brightness(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, float r,
                         float q)
{
    /* _blend(img, zeros_like(img), factor). */
    dlc__aug_blend_const(img, stride, w, h, c, r, q, 0.0f);
}

void dlc__aug_contrast(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, float r,
                       float q)
{
    /* The mean of the grayscale image (of the image itself for one channel), then a blend with it.
     * The integer sum is exact; torch sums floats, which can differ in the last bits. */
    uint64_t sum = 0;
    gray_tables gt;
    gray_init(&gt);
    const int vec = dlc__aug_have_avx2();
    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *p = ROW(img, stride, y);
        if (c == 3) {
            uint32_t x = 0;
            if (vec)
                x = (uint32_t)dlc__aug_gray_sum_avx2(p, w, &sum);
            for (; x < w; x++)
                sum += gray_lut(&gt, p + 3 * (size_t)x);
        } else {
            for (size_t i = 0; i < (size_t)w * c; i++)
                sum += p[i];
        }
    }
    const size_t n = (size_t)w * h * (c == 3 ? 1 : c);
    const float mean = (float)((double)sum / (double)n);
    dlc__aug_blend_const(img, stride, w, h, c, r, q, mean);
}

/* clamp(0, 255).to(uint8) of a finite float, written as selects that vectorize. */
static inline float clamp255(float v)
{
    /* NaN (a factor near FLT_MAX makes inf - inf) goes to 0, as x86's conversion of torch's NaN
     * to uint8 does: a NaN cast to int is undefined. */
    v = v > 0.0f ? v : 0.0f;
    return v > 255.0f ? 255.0f : v;
}

void dlc__aug_saturation(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, float r,
                         float q)
{
    if (c != 3)
        return; /* torchvision: "Match PIL behaviour". */
    /* r * x + (1 - r) * gray in float32, gray truncated to uint8 first; per row in chunks of
     * deinterleaved floats, so the loop vectorizes. */
    enum { CHUNK = 256 };
    float cr[CHUNK], cg[CHUNK], cb[CHUNK];
    const int vec = dlc__aug_have_avx2();
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *row = ROW(img, stride, y);
        uint32_t start = 0;
        if (vec)
            start = (uint32_t)dlc__aug_saturation_avx2(row, w, r, q);
        for (uint32_t x0 = start; x0 < w; x0 += CHUNK) {
            const size_t n = w - x0 < CHUNK ? w - x0 : CHUNK;
            uint8_t *p = row + 3 * (size_t)x0;
            for (size_t k = 0; k < n; k++) {
                cr[k] = (float)p[3 * k];
                cg[k] = (float)p[3 * k + 1];
                cb[k] = (float)p[3 * k + 2];
            }
            for (size_t k = 0; k < n; k++) {
                const float l = 0.2989f * cr[k] + 0.587f * cg[k] + 0.114f * cb[k];
                const float g = q * (float)(int32_t)l; /* l in [0, 255]: .to(uint8). */
                cr[k] = clamp255(r * cr[k] + g);
                cg[k] = clamp255(r * cg[k] + g);
                cb[k] = clamp255(r * cb[k] + g);
            }
            for (size_t k = 0; k < n; k++) {
                p[3 * k] = (uint8_t)(int32_t)cr[k];
                p[3 * k + 1] = (uint8_t)(int32_t)cg[k];
                p[3 * k + 2] = (uint8_t)(int32_t)cb[k];
            }
        }
    }
}

void dlc__aug_grayscale(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c)
{
    if (c != 3)
        return; /* torchvision clones a 1-channel image. */
    gray_tables gt;
    gray_init(&gt);
    const int vec = dlc__aug_have_avx2();
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *p = ROW(img, stride, y);
        uint32_t x = 0;
        if (vec)
            x = (uint32_t)dlc__aug_grayscale_avx2(p, w);
        for (p += 3 * (size_t)x; x < w; x++, p += 3)
            p[0] = p[1] = p[2] = gray_lut(&gt, p);
    }
}

static inline float clamp01(float v)
{
    return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
}

/* adjust_hue on one chunk of n <= HUE_CHUNK pixels, deinterleaved into r, g, b (values 0..255 as
 * floats), with selects instead of libm calls (fmodf, floorf), every operation being the one
 * functional_tensor.py's _rgb2hsv, the hue shift and _hsv2rgb do in float32:
 *   - fmod(h / 6 + 1, 1) with h / 6 + 1 in (0, 2) is x - 1 for x >= 1, else x (exact);
 *   - (h + hue_factor) % 1 (torch's remainder) with the sum in [-0.5, 1.5) is x - 1, x + 1 or x;
 *   - floor(h * 6) of a non-negative value is its truncation. */
#define HUE_CHUNK 256
static void hue_chunk(float *r, float *g, float *b, size_t n, float hf)
{
    for (size_t k = 0; k < n; k++) {
        const float rr = r[k] / 255.0f, gg = g[k] / 255.0f, bb = b[k] / 255.0f;
        /* No NaN here: plain comparisons (fmaxf's NaN rule keeps GCC from vectorizing). */
        const float mgb = gg > bb ? gg : bb, ngb = gg < bb ? gg : bb;
        const float maxc = rr > mgb ? rr : mgb, minc = rr < ngb ? rr : ngb;
        const int eqc = maxc == minc;
        const float cr = maxc - minc;
        const float s = cr / (eqc ? 1.0f : maxc);
        const float crd = eqc ? 1.0f : cr;
        const float rc = (maxc - rr) / crd, gc = (maxc - gg) / crd, bc = (maxc - bb) / crd;
        const float hr = bc - gc, hg = 2.0f + rc - bc, hb = 4.0f + gc - rc;
        float hh = maxc == rr ? hr : (maxc == gg ? hg : hb);
        float x = hh / 6.0f + 1.0f;
        hh = x >= 1.0f ? x - 1.0f : x;
        x = hh + hf;
        hh = x >= 1.0f ? x - 1.0f : (x < 0.0f ? x + 1.0f : x);
        const float v = maxc;
        const float h6 = hh * 6.0f;
        int i = (int)h6;
        const float f = h6 - (float)i;
        i = i >= 6 ? i - 6 : i;
        const float pp = clamp01(v * (1.0f - s));
        const float qq = clamp01(v * (1.0f - s * f));
        const float tt = clamp01(v * (1.0f - s * (1.0f - f)));
        /* The rows of _hsv2rgb's table for i = 0..5. */
        const float o0 = ((i == 0) | (i == 5)) ? v : i == 1 ? qq : ((i == 2) | (i == 3)) ? pp : tt;
        const float o1 = ((i == 1) | (i == 2)) ? v : i == 0 ? tt : i == 3 ? qq : pp;
        const float o2 = ((i == 3) | (i == 4)) ? v : ((i == 0) | (i == 1)) ? pp : i == 2 ? tt : qq;
        r[k] = o0 * 255.0f;
        g[k] = o1 * 255.0f;
        b[k] = o2 * 255.0f;
    }
}

void dlc__aug_hue(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, double factor)
{
    if (c != 3)
        return; /* torchvision: "Match PIL behaviour". */
    const float hf = (float)factor;
    float r[HUE_CHUNK], g[HUE_CHUNK], b[HUE_CHUNK];
    const int vec = dlc__aug_have_avx2();
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *row = ROW(img, stride, y);
        uint32_t start = 0;
        if (vec)
            start = (uint32_t)dlc__aug_hue_avx2(row, w, hf);
        for (uint32_t x0 = start; x0 < w; x0 += HUE_CHUNK) {
            const size_t n = w - x0 < HUE_CHUNK ? w - x0 : HUE_CHUNK;
            uint8_t *p = row + 3 * (size_t)x0;
            for (size_t k = 0; k < n; k++) {
                r[k] = (float)p[3 * k];
                g[k] = (float)p[3 * k + 1];
                b[k] = (float)p[3 * k + 2];
            }
            hue_chunk(r, g, b, n, hf);
            /* (img * 255.0).to(uint8): truncation, values within [0, 255]. */
            for (size_t k = 0; k < n; k++) {
                p[3 * k] = trunc_u8(r[k]);
                p[3 * k + 1] = trunc_u8(g[k]);
                p[3 * k + 2] = trunc_u8(b[k]);
            }
        }
    }
}

void dlc__aug_posterize(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                        uint32_t bits)
{
    const uint8_t mask = (uint8_t)(0xffu << (8 - bits));
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *p = ROW(img, stride, y);
        for (size_t i = 0; i < (size_t)w * c; i++)
            p[i] &= mask;
    }
}

void dlc__aug_solarize(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                       double threshold)
{
    /* img >= threshold compares in float32 (a uint8 tensor against a float scalar). */
    const float t = (float)threshold;
    uint8_t lut[256];
    uint32_t from = 256; /* The first value inverted: the comparison holds from it on. */
    for (int v = 255; v >= 0; v--) {
        lut[v] = (float)v >= t ? (uint8_t)(255 - v) : (uint8_t)v;
        from = (float)v >= t ? (uint32_t)v : from;
    }
    const int vec = dlc__aug_have_avx2();
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *p = ROW(img, stride, y);
        const size_t n = (size_t)w * c;
        size_t i = 0;
        if (vec)
            i = dlc__aug_solarize_avx2(p, n, from);
        for (; i < n; i++)
            p[i] = lut[p[i]];
    }
}

void dlc__aug_invert(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c)
{
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *p = ROW(img, stride, y);
        for (size_t i = 0; i < (size_t)w * c; i++)
            p[i] = (uint8_t)(255 - p[i]);
    }
}

void dlc__aug_autocontrast(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c)
{
    uint8_t lo[DLC__AUG_MAX_CHANNELS], hi[DLC__AUG_MAX_CHANNELS];
    for (uint32_t k = 0; k < c; k++)
        lo[k] = 255, hi[k] = 0;
    /* With AVX2, the bulk of each row folds into the extremes of the 96 positions of a vector
     * step (96 is a multiple of every c, so position j holds channel j % c). */
    uint8_t lo96[96], hi96[96];
    memset(lo96, 255, sizeof lo96);
    memset(hi96, 0, sizeof hi96);
    const int vec = dlc__aug_have_avx2();
    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *p = ROW(img, stride, y);
        uint32_t x0 = 0;
        if (vec)
            x0 = (uint32_t)(dlc__aug_minmax_avx2(p, (size_t)w * c, lo96, hi96) / c);
        for (uint32_t x = x0; x < w; x++)
            for (uint32_t k = 0; k < c; k++) {
                const uint8_t v = p[(size_t)x * c + k];
                lo[k] = v < lo[k] ? v : lo[k];
                hi[k] = v > hi[k] ? v : hi[k];
            }
    }
    for (uint32_t j = 0; j < 96; j++) {
        const uint32_t k = j % c;
        lo[k] = lo96[j] < lo[k] ? lo96[j] : lo[k];
        hi[k] = hi96[j] > hi[k] ? hi96[j] : hi[k];
    }
    float mn[DLC__AUG_MAX_CHANNELS], sc[DLC__AUG_MAX_CHANNELS];
    for (uint32_t k = 0; k < c; k++) {
        /* scale = bound / (max - min) in float32, which torch evaluates as Tensor.__rtruediv__:
         * reciprocal(max - min) * bound (and that can differ from the quotient in the last bit,
         * moving a value by 1); not finite (max == min): min 0, scale 1. */
        if (hi[k] == lo[k]) {
            mn[k] = 0.0f, sc[k] = 1.0f;
        } else {
            mn[k] = (float)lo[k];
            sc[k] = (1.0f / ((float)hi[k] - (float)lo[k])) * 255.0f;
        }
    }
    uint8_t lut[DLC__AUG_MAX_CHANNELS][256];
    for (uint32_t k = 0; k < c; k++)
        for (int v = 0; v < 256; v++)
            lut[k][v] = trunc_u8(((float)v - mn[k]) * sc[k]);
    map_lut(img, stride, w, h, c, (const uint8_t(*)[256])lut, 1, mn, sc);
}

/* The histogram of each channel, into @p hist (c x 256 counts). Two sets of counts (even and
 * odd pixels) and 32-bit counters: a run of equal values then increments two counters in turn
 * rather than one over and over, which waits on the previous store each time. A block of rows
 * holds less than 2^31 pixels, so that a set's counts fit 32 bits before they are added up. */
static void channel_histogram(const uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c,
                              uint64_t hist[][256])
{
    uint32_t sub[2][DLC__AUG_MAX_CHANNELS][256];
    memset(hist, 0, sizeof(hist[0]) * c);
    const uint32_t block = w >= (1u << 31) ? 1u : (1u << 31) / w;
    for (uint32_t y0 = 0; y0 < h; y0 += block) {
        memset(sub, 0, sizeof sub);
        const uint32_t y1 = h - y0 < block ? h : y0 + block;
        for (uint32_t y = y0; y < y1; y++) {
            const uint8_t *p = ROW(img, stride, y);
            uint32_t x = 0;
            if (c == 3) {
                for (; x + 2 <= w; x += 2, p += 6) {
                    sub[0][0][p[0]]++, sub[0][1][p[1]]++, sub[0][2][p[2]]++;
                    sub[1][0][p[3]]++, sub[1][1][p[4]]++, sub[1][2][p[5]]++;
                }
            } else if (c == 1) {
                for (; x + 2 <= w; x += 2, p += 2)
                    sub[0][0][p[0]]++, sub[1][0][p[1]]++;
            }
            for (; x < w; x++, p += c)
                for (uint32_t k = 0; k < c; k++)
                    sub[0][k][p[k]]++;
        }
        for (uint32_t k = 0; k < c; k++)
            for (int v = 0; v < 256; v++)
                hist[k][v] += (uint64_t)sub[0][k][v] + sub[1][k][v];
    }
}

void dlc__aug_equalize(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c)
{
    /* _scale_channel, per channel: the histogram, step = (the count of every nonzero bin but the
     * last) // 255, lut = (cumsum + step // 2) // step shifted right by one bin; step 0 leaves
     * the channel as it is (an identity table). */
    uint64_t hist[DLC__AUG_MAX_CHANNELS][256];
    channel_histogram(img, stride, w, h, c, hist);
    uint8_t lut[DLC__AUG_MAX_CHANNELS][256];
    int identity = 1;
    for (uint32_t k = 0; k < c; k++) {
        uint64_t total = 0, last = 0;
        for (int v = 0; v < 256; v++) {
            total += hist[k][v];
            if (hist[k][v])
                last = hist[k][v];
        }
        const uint64_t step = (total - last) / 255;
        if (step == 0) {
            for (int v = 0; v < 256; v++)
                lut[k][v] = (uint8_t)v;
            continue;
        }
        identity = 0;
        uint64_t cum = 0;
        lut[k][0] = 0;
        for (int v = 0; v < 255; v++) {
            cum += hist[k][v];
            const uint64_t l = (cum + step / 2) / step;
            lut[k][v + 1] = (uint8_t)(l > 255 ? 255 : l);
        }
    }
    if (identity)
        return;
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *p = ROW(img, stride, y);
        if (c == 3) {
            for (uint32_t x = 0; x < w; x++, p += 3) {
                const uint8_t a = lut[0][p[0]], b = lut[1][p[1]], d = lut[2][p[2]];
                p[0] = a, p[1] = b, p[2] = d;
            }
        } else {
            for (uint32_t x = 0; x < w; x++, p += c)
                for (uint32_t k = 0; k < c; k++)
                    p[k] = lut[k][p[k]];
        }
    }
}

void dlc__aug_sharpness(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, float r,
                        float q, void *scratch)
{
    if (w <= 2 || h <= 2)
        return; /* torchvision returns the image unchanged. */
    /* The smoothed image ("degenerate"): the 3x3 kernel [1 1 1; 1 5 1; 1 1 1] / 13 on the interior,
     * rounded half to even; on the border it is the pixel itself, still blended with it
     * (r * x + (1 - r) * x in float32 is not always x: it truncates to x - 1 at times). Needs the
     * original rows around each output row: a copy of the image in scratch (w * h * c bytes). */
    const size_t row = (size_t)w * c;
    uint8_t *orig = scratch;
    for (uint32_t y = 0; y < h; y++)
        memcpy(orig + y * row, ROW(img, stride, y), row);
    /* The smoothing of a sum s is s / 13 rounded; s / 13 is never within 1/26 of a tie, so the
     * float quotient plus 0.5, truncated, rounds it exactly as torch.round() does. */
    uint8_t self[256]; /* The border's blend of x with itself. */
    for (int v = 0; v < 256; v++)
        self[v] = trunc_u8(r * (float)v + q * (float)v);
    for (uint32_t y = 0; y < h; y++) {
        uint8_t *out = ROW(img, stride, y);
        if (y == 0 || y == h - 1) {
            for (size_t i = 0; i < row; i++)
                out[i] = self[out[i]];
        } else {
            for (uint32_t k = 0; k < c; k++) {
                out[k] = self[out[k]];
                out[row - c + k] = self[out[row - c + k]];
            }
        }
    }
    const int vec = dlc__aug_have_avx2();
    for (uint32_t y = 1; y + 1 < h; y++) {
        const uint8_t *up = orig + (y - 1) * row, *mid = orig + y * row, *dn = orig + (y + 1) * row;
        uint8_t *out = ROW(img, stride, y);
        size_t i = c;
        if (vec)
            i = dlc__aug_sharpness_avx2(up, mid, dn, out, row, c, r, q);
        for (; i < row - c; i++) {
            const int32_t s = (int32_t)up[i - c] + up[i] + up[i + c] + mid[i - c] + 5 * mid[i] +
                              mid[i + c] + dn[i - c] + dn[i] + dn[i + c];
            const float deg = (float)(int32_t)((float)s / 13.0f + 0.5f);
            out[i] = (uint8_t)(int32_t)clamp255(r * (float)mid[i] + q * deg);
        }
    }
}

/* torchvision's _get_gaussian_kernel1d in float32. */
static void gauss_kernel(float *k, uint32_t size, double sigma)
{
    const float half = (float)((size - 1) * 0.5);
    const float sg = (float)sigma;
    float sum = 0.0f;
    for (uint32_t i = 0; i < size; i++) {
        const float x = -half + (float)i; /* linspace(-half, half, size): step 1, exact. */
        const float t = x / sg;
        k[i] = expf(-0.5f * (t * t));
        sum += k[i];
    }
    for (uint32_t i = 0; i < size; i++)
        k[i] /= sum;
}

static inline uint32_t reflect(int64_t i, uint32_t n)
{
    /* torch's "reflect" padding (the edge pixel is not repeated); the pad is < n. */
    if (i < 0)
        return (uint32_t)-i;
    if (i >= (int64_t)n)
        return (uint32_t)(2 * (int64_t)n - 2 - i);
    return (uint32_t)i;
}

/* The blur's sums a block of values at a time over all the taps, in tap order: the block's
 * partial sums stay in registers (GCC's and clang's vector types: a product, then a sum, lane by
 * lane) instead of going to memory and back at each tap. */
#define BLUR_BLOCK 32
typedef float blur_vec __attribute__((vector_size(32)));

/* Tap j's source starts at rows[j] + at, or at src + j * step when @p rows is NULL (the
 * horizontal pass: one row, taps c floats apart). Always inlined with a constant @p rows, so the
 * choice costs nothing in the loop. */
static inline __attribute__((always_inline)) void blur_block(float *out, const float *src,
                                                             size_t step, const float *const *rows,
                                                             size_t at, const float *k,
                                                             uint32_t taps)
{
    blur_vec a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (uint32_t j = 0; j < taps; j++) {
        const float *s = rows ? rows[j] + at : src + j * step;
        const blur_vec kj = {k[j], k[j], k[j], k[j], k[j], k[j], k[j], k[j]};
        blur_vec x0, x1, x2, x3; /* Through memcpy: unaligned loads. */
        memcpy(&x0, s, sizeof x0);
        memcpy(&x1, s + 8, sizeof x1);
        memcpy(&x2, s + 16, sizeof x2);
        memcpy(&x3, s + 24, sizeof x3);
        a0 += kj * x0;
        a1 += kj * x1;
        a2 += kj * x2;
        a3 += kj * x3;
    }
    memcpy(out, &a0, sizeof a0);
    memcpy(out + 8, &a1, sizeof a1);
    memcpy(out + 16, &a2, sizeof a2);
    memcpy(out + 24, &a3, sizeof a3);
}

/* The two passes of dlc__aug_blur() with the kernels @p kxv and @p kyv. Inlined twice: as it is,
 * and into blur_avx2(), where the compiler vectorizes the same loops 8 floats wide; every value
 * keeps its operations and their order, so both give the same bytes. */
static inline __attribute__((always_inline)) void
blur_passes(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, uint32_t kx,
            uint32_t ky, const float *kxv, const float *kyv, void *scratch)
{
    const int64_t px = kx / 2, py = ky / 2;
    const size_t row = (size_t)w * c;
    float *tmp = scratch;
    float *acc = tmp + (size_t)h * row;
    /* A side's reflected source row of at most 4 px pixels (px <= DLC__AUG_MAX_KERNEL / 2): a
     * side is px columns wide, or all w <= 2 px columns when no column has all its taps inside,
     * plus px on each end. */
    float pad[4 * (DLC__AUG_MAX_KERNEL / 2) * DLC__AUG_MAX_CHANNELS];
    /* Columns whose taps all fall inside the row: [px, w - px). */
    const size_t in0 = (size_t)px * c, in1 = px < (int64_t)w - px ? row - (size_t)px * c : in0;
    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *p = ROW(img, stride, y);
        float *t = tmp + y * row;
        /* The row as floats once (in acc, free until the vertical pass), not once per tap. */
        for (size_t i = 0; i < row; i++)
            acc[i] = (float)p[i];
        const size_t mid = in0 + (in1 - in0) / BLUR_BLOCK * BLUR_BLOCK;
        for (size_t i = in0; i < mid; i += BLUR_BLOCK)
            blur_block(t + i, acc + i - in0, (size_t)c, NULL, 0, kxv, kx);
        for (size_t i = mid; i < in1; i++)
            t[i] = 0.0f;
        for (uint32_t j = 0; j < kx; j++) {
            const float kj = kxv[j];
            const float *q = acc + ((int64_t)j - px) * (int64_t)c;
            for (size_t i = mid; i < in1; i++)
                t[i] += kj * q[i];
        }
        /* The columns with a reflected tap: [0, px) and [w - px, w), or all of them. The taps
         * go in the same order, but over all the columns of a side at once: one sum per column
         * at a time would wait on each addition. */
        const uint32_t sides[2][2] = {{0, in1 > in0 ? (uint32_t)px : w},
                                      {in1 > in0 ? w - (uint32_t)px : w, w}};
        for (int e = 0; e < 2; e++) {
            const uint32_t x0 = sides[e][0], x1 = sides[e][1];
            /* The side's source pixels x0 - px .. x1 + px - 1, reflected, in a row of their own:
             * then its sums run over contiguous values like the interior's. */
            const size_t n = (size_t)(x1 - x0) + 2 * (size_t)px;
            assert(n <= 4 * (size_t)(DLC__AUG_MAX_KERNEL / 2));
            for (size_t m = 0; m < n; m++)
                memcpy(pad + m * c, acc + (size_t)reflect((int64_t)x0 - px + (int64_t)m, w) * c,
                       c * sizeof(float));
            float *te = t + (size_t)x0 * c;
            const size_t ne = (size_t)(x1 - x0) * c;
            for (size_t i = 0; i < ne; i++)
                te[i] = 0.0f;
            for (uint32_t j = 0; j < kx; j++) {
                const float kj = kxv[j];
                const float *q = pad + (size_t)j * c;
                for (size_t i = 0; i < ne; i++)
                    te[i] += kj * q[i];
            }
        }
    }
    for (uint32_t y = 0; y < h; y++) {
        const float *taps[DLC__AUG_MAX_KERNEL];
        for (uint32_t j = 0; j < ky; j++)
            taps[j] = tmp + (size_t)reflect((int64_t)y + j - py, h) * row;
        const size_t mid = row / BLUR_BLOCK * BLUR_BLOCK;
        for (size_t i = 0; i < mid; i += BLUR_BLOCK)
            blur_block(acc + i, NULL, 0, taps, i, kyv, ky);
        for (size_t i = mid; i < row; i++)
            acc[i] = 0.0f;
        for (uint32_t j = 0; j < ky; j++) {
            const float kj = kyv[j];
            const float *t = taps[j];
            for (size_t i = mid; i < row; i++)
                acc[i] += kj * t[i];
        }
        uint8_t *out = ROW(img, stride, y);
        for (size_t i = 0; i < row; i++)
            out[i] = (uint8_t)(int32_t)clamp255(dlc__aug_round_even(acc[i]));
    }
}

#if DLC__AUG_X86
static __attribute__((target("avx2"), noinline)) void
blur_avx2(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, uint32_t kx, uint32_t ky,
          const float *kxv, const float *kyv, void *scratch)
{
    blur_passes(img, stride, w, h, c, kx, ky, kxv, kyv, scratch);
}
#endif

void dlc__aug_blur(uint8_t *img, size_t stride, uint32_t w, uint32_t h, uint32_t c, uint32_t kx,
                   uint32_t ky, double sx, double sy, void *scratch)
{
    /* Separable: the 2D kernel is the outer product of the two 1D kernels, as in torchvision; the
     * horizontal pass goes to floats in scratch (w * h * c), the vertical one accumulates a row
     * (w * c more floats) and rounds half to even (torch.round) into the image. Each output
     * value sums its taps in kernel order, so the loops over a row vectorize without changing
     * a result. */
    float kxv[DLC__AUG_MAX_KERNEL], kyv[DLC__AUG_MAX_KERNEL];
    gauss_kernel(kxv, kx, sx);
    gauss_kernel(kyv, ky, sy);
#if DLC__AUG_X86
    if (dlc__aug_have_avx2()) {
        blur_avx2(img, stride, w, h, c, kx, ky, kxv, kyv, scratch);
        return;
    }
#endif
    blur_passes(img, stride, w, h, c, kx, ky, kxv, kyv, scratch);
}
