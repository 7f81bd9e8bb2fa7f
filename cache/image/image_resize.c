/*
 * The antialiased bilinear resampler shared by the builder (Resize + CenterCrop)
 * and the loader (RandomResizedCrop).
 *
 * It reproduces Pillow's Image.resize(size, BILINEAR, box) bit for bit
 * (src/libImaging/Resample.c, Pillow 9.4 as in Debian 12), because that is
 * what torchvision's Resize and RandomResizedCrop run on PIL images, and a
 * model trained on dlcache should see the pixels it would have seen with
 * torchvision:
 *   - per output pixel xx, center = in0 + (xx + 0.5) * scale with
 *     scale = (in1 - in0) / out; the triangle filter's support is
 *     max(scale, 1), so a reduction averages every source pixel it covers
 *     (antialiasing) instead of sampling two of them;
 *   - the window [xmin, xmax) is rounded by truncation of center -+ support
 *     + 0.5 and clipped to the image, the weights are normalised to sum 1 in
 *     double, then converted to fixed point with 22 fractional bits
 *     (PRECISION_BITS = 32 - 8 - 2);
 *   - the horizontal pass runs first, over only the rows the vertical pass
 *     reads, and its result is rounded and clipped to uint8 before the
 *     vertical pass, exactly as Pillow keeps an 8-bit intermediate image;
 *   - the box is single precision (Pillow parses it as C floats), and a pass
 *     whose axis is unchanged (same size, box covering the whole axis) is
 *     skipped, as in ImagingResampleInner.
 *
 * Coefficients live in the caller's scratch, so a call allocates nothing.
 * Unlike Pillow, the vertical pass walks the taps in the outer loop and the
 * row in the inner loop (int32 accumulators over a contiguous row), which the
 * compiler vectorises, and with AVX2 (chosen at run time with
 * __builtin_cpu_supports) hand-written kernels keep the accumulators in
 * registers; integer addition is associative, so the sums are the same as
 * Pillow's per-pixel loop.
 */
#include "image_internal.h"
#include "common.h"

#include <math.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)

/* The two passes get an AVX2 clone chosen at load time (an ifunc): it has
 * the 32-bit vector multiply (vpmulld) that the vertical pass's int32
 * accumulators need and SSE2 lacks, and wider registers. The results are the
 * same integers either way. */
/* ThreadSanitizer's runtime is not ready when the ifunc resolver runs at
 * load time and the program crashes before main, so TSan builds go without. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) &&                              \
    (!defined(__clang__) || __clang_major__ >= 14) && !defined(__SANITIZE_THREAD__)
#define HOT_CLONES __attribute__((target_clones("default", "avx2")))
#else
#define HOT_CLONES
#endif
#define SCRATCH_ALIGN 64u

/* One axis of the resample: where the region lies in the source and how
 * wide the filter is. in0 and scale are doubles computed from the single
 * precision box exactly as Pillow's precompute_coeffs does. */
typedef struct axis {
    double in0;
    double scale;
    double support;
    double inv_filterscale;
    uint32_t in_size; /* pixels of the whole source along this axis */
    uint32_t ksize;   /* coefficient slots per output pixel */
} axis;

static void axis_setup(axis *a, float in0, float in1, uint32_t out_size, uint32_t in_size)
{
    /* The subtraction is in single precision on purpose: Pillow computes
     * (double)(in1 - in0) with float operands. */
    const float span = in1 - in0;
    const double scale = (double)span / out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    a->in0 = in0;
    a->scale = scale;
    a->support = 1.0 * filterscale; /* BILINEAR's support is 1 */
    a->inv_filterscale = 1.0 / filterscale;
    a->in_size = in_size;
    a->ksize = (uint32_t)ceil(a->support) * 2 + 1;
}

/* The source window of output pixel @p xx: first pixel and tap count. */
static void axis_bounds(const axis *a, uint32_t xx, int32_t *first, int32_t *count)
{
    const double center = a->in0 + (xx + 0.5) * a->scale;
    int32_t xmin = (int32_t)(center - a->support + 0.5);
    int32_t xmax = (int32_t)(center + a->support + 0.5);
    if (xmin < 0)
        xmin = 0;
    if (xmax > (int32_t)a->in_size)
        xmax = (int32_t)a->in_size;
    *first = xmin;
    *count = xmax - xmin;
}

static double bilinear(double x)
{
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Fixed-point weights and windows of output pixels [o0, o0 + n) into
 * bounds[2 * i] (first source pixel), bounds[2 * i + 1] (taps) and
 * kk[i * ksize ...]. The weights are computed twice (once for their sum, once
 * to normalise) instead of being stored as doubles: the same expression gives
 * the same double, and no per-call buffer of ksize doubles is needed.
 *
 * With @p pad, every window is widened to the same number of taps K, the
 * largest window of the n pixels (moved left at the right edge so it stays
 * inside the image), and the extra taps get weight 0. Adding zero products
 * leaves every sum unchanged, and a tap count known at compile time lets the
 * horizontal pass unroll its loop. K is below ksize when the windows are
 * smaller than the filter's bound: an upscale has 2 taps per pixel, not the
 * 3 of ksize, and the third would be a third more work for nothing.
 *
 * Returns the weights' stride in kk: K when padded (*padded = 1), else ksize
 * with each window's own count in bounds. */
static uint32_t axis_coeffs(const axis *a, uint32_t o0, uint32_t n, int pad, int32_t *bounds,
                            int32_t *kk, int *padded)
{
    uint32_t K = a->ksize;
    if (pad) {
        int32_t most = 1;
        for (uint32_t i = 0; i < n; i++) {
            int32_t xmin, count;
            axis_bounds(a, o0 + i, &xmin, &count);
            if (count > most)
                most = count;
        }
        K = (uint32_t)most;
    }
    pad = pad && a->in_size >= K;
    *padded = pad;
    if (!pad)
        K = a->ksize;
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t xx = o0 + i;
        const double center = a->in0 + (xx + 0.5) * a->scale;
        int32_t xmin, count;
        axis_bounds(a, xx, &xmin, &count);
        double ww = 0.0;
        for (int32_t x = 0; x < count; x++)
            ww += bilinear((x + xmin - center + 0.5) * a->inv_filterscale);
        int32_t *k = kk + (size_t)i * K;
        for (uint32_t x = 0; x < K; x++)
            k[x] = 0;
        int32_t first = xmin, shift = 0;
        if (pad) {
            const int32_t over = xmin + (int32_t)K - (int32_t)a->in_size;
            shift = over > 0 ? over : 0;
            first = xmin - shift;
        }
        for (int32_t x = 0; x < count; x++) {
            double w = bilinear((x + xmin - center + 0.5) * a->inv_filterscale);
            if (ww != 0.0)
                w /= ww;
            /* normalize_coeffs_8bpc: round half away from zero. */
            k[shift + x] = w < 0 ? (int32_t)(-0.5 + w * (1 << PRECISION_BITS))
                                 : (int32_t)(0.5 + w * (1 << PRECISION_BITS));
        }
        bounds[2 * i] = first;
        bounds[2 * i + 1] = pad ? (int32_t)K : count;
    }
    return K;
}

static inline uint8_t clip8(int32_t acc)
{
    const int32_t v = acc >> PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Horizontal pass over one row, generic: any channel count, any window. */
static void hpass_any(uint32_t channels, const uint8_t *restrict in, uint8_t *restrict out,
                      uint32_t out_w, const int32_t *restrict bounds, const int32_t *restrict kk,
                      uint32_t ksize)
{
    for (uint32_t xx = 0; xx < out_w; xx++) {
        const uint8_t *p = in + (size_t)bounds[2 * xx] * channels;
        const int32_t n = bounds[2 * xx + 1];
        const int32_t *k = kk + (size_t)xx * ksize;
        int32_t s[4];
        for (uint32_t c = 0; c < channels; c++)
            s[c] = 1 << (PRECISION_BITS - 1);
        for (int32_t t = 0; t < n; t++)
            for (uint32_t c = 0; c < channels; c++)
                s[c] += p[t * channels + c] * k[t];
        for (uint32_t c = 0; c < channels; c++)
            out[xx * channels + c] = clip8(s[c]);
    }
}

/* Horizontal pass over one RGB row with padded windows of exactly K taps
 * (see axis_coeffs): the compiler unrolls the tap loop and keeps the three
 * accumulators in registers. Small K is the common case: upscaling and
 * reductions up to 3x, which is every random-resized crop of a stored
 * image. */
#define DEFINE_HPASS_RGB(K)                                                                        \
    HOT_CLONES static void hpass_rgb_##K(const uint8_t *restrict in, uint8_t *restrict out,        \
                                         uint32_t out_w, const int32_t *restrict bounds,           \
                                         const int32_t *restrict kk)                               \
    {                                                                                              \
        for (uint32_t xx = 0; xx < out_w; xx++) {                                                  \
            const uint8_t *p = in + (size_t)bounds[2 * xx] * 3;                                    \
            const int32_t *k = kk + (size_t)xx * (K);                                              \
            int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;                              \
            _Pragma("GCC unroll 9") for (int t = 0; t < (K); t++)                                  \
            {                                                                                      \
                s0 += p[3 * t] * k[t];                                                             \
                s1 += p[3 * t + 1] * k[t];                                                         \
                s2 += p[3 * t + 2] * k[t];                                                         \
            }                                                                                      \
            out[3 * xx] = clip8(s0);                                                               \
            out[3 * xx + 1] = clip8(s1);                                                           \
            out[3 * xx + 2] = clip8(s2);                                                           \
        }                                                                                          \
    }
DEFINE_HPASS_RGB(2)
DEFINE_HPASS_RGB(3)
DEFINE_HPASS_RGB(5)
DEFINE_HPASS_RGB(7)
DEFINE_HPASS_RGB(9)

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HPASS_AVX2 1
#include <immintrin.h>

/*
 * The horizontal pass on RGB with AVX2, for padded windows of K taps.
 *
 * The scalar loop above costs about 15 multiply-adds and three clips per
 * output pixel in three dependent chains, and was half of a build's time.
 * Here one 256-bit register of eight int32 lanes holds two output pixels:
 * (R, G, B, 0) of pixel xx in the low 128 bits, of pixel xx + 1 in the high
 * 128 bits. Each half is loaded from its own window (16 bytes cover five
 * taps); per tap a byte shuffle zero-extends the tap's three bytes into the
 * lanes of both halves, and vpmulld multiplies them by the tap's
 * coefficients, which expand_hcoeffs() laid out as (k_xx[t] x 4,
 * k_xx+1[t] x 4) so that they are one aligned load. Every product and sum is
 * the same int32 as in Pillow's loop (integer addition is associative), so
 * the result is bit-identical. The 16-bit madd of Pillow-SIMD would need the
 * 22-bit coefficients cut to 16 bits and would not be.
 *
 * The loads reach up to 15 bytes past a window (a 16-byte load for the last
 * one to five taps). A pair whose loads would pass the end of the source row
 * (the last few pixels of a row whose windows touch the right edge), and the
 * odd pixel of an odd width, take the scalar loop, so nothing outside the
 * caller's row is read. A pair stores 8 bytes, the last 2 being overwritten
 * by the next pixel; the row's last pair stores 6.
 */
#define Z (char)0x80 /* a shuffle index that yields a zero byte */
/* Tap u (0..4) of a 16-byte load, zero-extended into lanes 0..2 of both
 * halves. */
#define TAP_MASK(u)                                                                                \
    _mm256_setr_epi8(3 * (u), Z, Z, Z, 3 * (u) + 1, Z, Z, Z, 3 * (u) + 2, Z, Z, Z, Z, Z, Z, Z,     \
                     3 * (u), Z, Z, Z, 3 * (u) + 1, Z, Z, Z, 3 * (u) + 2, Z, Z, Z, Z, Z, Z, Z)

/* Scalar sums of one output pixel. */
static inline void hpass_rgb_pixel(const uint8_t *restrict p, const int32_t *restrict k, uint32_t K,
                                   uint8_t *restrict out)
{
    int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
    for (uint32_t t = 0; t < K; t++) {
        s0 += p[3 * t] * k[t];
        s1 += p[3 * t + 1] * k[t];
        s2 += p[3 * t + 2] * k[t];
    }
    out[0] = clip8(s0);
    out[1] = clip8(s1);
    out[2] = clip8(s2);
}

/* Bytes the loads of a K-tap window reach from its first byte. */
static size_t avx2_reach(uint32_t K)
{
    return (size_t)15 * ((K - 1) / 5) + 16;
}

/* The coefficients of output pixels 2i and 2i + 1 as K vectors of eight
 * int32 (k_2i[t] x 4, k_2i+1[t] x 4), into @p hx (32-byte aligned). */
static void expand_hcoeffs(const int32_t *restrict kk, uint32_t K, uint32_t out_w,
                           int32_t *restrict hx)
{
    for (uint32_t i = 0; i + 1 < out_w; i += 2) {
        const int32_t *ka = kk + (size_t)i * K, *kb = ka + K;
        int32_t *x = hx + (size_t)i / 2 * K * 8;
        for (uint32_t t = 0; t < K; t++)
            for (int l = 0; l < 4; l++) {
                x[8 * t + l] = ka[t];
                x[8 * t + 4 + l] = kb[t];
            }
    }
}

__attribute__((target("avx2"), always_inline)) static inline void
hpass_rgb_avx2_k(const uint8_t *restrict in, size_t in_bytes, uint8_t *restrict out, uint32_t out_w,
                 const int32_t *restrict bounds, const int32_t *restrict kk,
                 const int32_t *restrict hx, const uint32_t K)
{
    const __m256i round = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
    const size_t reach = avx2_reach(K);
    uint32_t xx = 0;
    if (K <= 5) {
        /* Four pixels per step while 16 more output bytes fit in the row:
         * two accumulators packed together, one byte shuffle to drop the
         * zero lanes and one 16-byte store (its last 4 bytes are the next
         * step's), instead of a pack and a scalar merge per pair. */
        const __m128i squeeze = _mm_setr_epi8(0, 1, 2, 8, 9, 10, 4, 5, 6, 12, 13, 14, Z, Z, Z, Z);
        for (; xx + 6 <= out_w; xx += 4) {
            const size_t o0 = (size_t)bounds[2 * xx] * 3, o1 = (size_t)bounds[2 * xx + 2] * 3;
            const size_t o2 = (size_t)bounds[2 * xx + 4] * 3, o3 = (size_t)bounds[2 * xx + 6] * 3;
            if (o3 + reach > in_bytes)
                break; /* windows only move right: o0..o2 are inside too */
            const __m256i *c = (const __m256i *)(const void *)(hx + (size_t)xx / 2 * K * 8);
            const __m256i v0 = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(in + o0))),
                _mm_loadu_si128((const __m128i *)(const void *)(in + o1)), 1);
            const __m256i v1 = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(in + o2))),
                _mm_loadu_si128((const __m128i *)(const void *)(in + o3)), 1);
            __m256i a0 = round, a1 = round;
            for (uint32_t u = 0; u < K; u++) {
                __m256i mask;
                switch (u) {
                case 0:
                    mask = TAP_MASK(0);
                    break;
                case 1:
                    mask = TAP_MASK(1);
                    break;
                case 2:
                    mask = TAP_MASK(2);
                    break;
                case 3:
                    mask = TAP_MASK(3);
                    break;
                default:
                    mask = TAP_MASK(4);
                    break;
                }
                a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(_mm256_shuffle_epi8(v0, mask),
                                                             _mm256_load_si256(c + u)));
                a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(_mm256_shuffle_epi8(v1, mask),
                                                             _mm256_load_si256(c + K + u)));
            }
            a0 = _mm256_srai_epi32(a0, PRECISION_BITS);
            a1 = _mm256_srai_epi32(a1, PRECISION_BITS);
            /* Bytes: low half (p0, p2), high half (p1, p3), each (R, G, B, 0). */
            const __m256i w = _mm256_packus_epi16(_mm256_packs_epi32(a0, a1), a0);
            const __m128i q = _mm256_castsi256_si128(_mm256_permute4x64_epi64(w, 0x08));
            _mm_storeu_si128((__m128i *)(void *)(out + (size_t)xx * 3),
                             _mm_shuffle_epi8(q, squeeze));
        }
    }
    for (; xx + 1 < out_w; xx += 2) {
        const size_t oa = (size_t)bounds[2 * xx] * 3, ob = (size_t)bounds[2 * xx + 2] * 3;
        if (oa + reach > in_bytes || ob + reach > in_bytes)
            break; /* windows only move right: the rest of the row is near its end */
        const uint8_t *pa = in + oa, *pb = in + ob;
        const __m256i *c = (const __m256i *)(const void *)(hx + (size_t)xx / 2 * K * 8);
        __m256i acc = round;
        for (uint32_t g = 0; g < K; g += 5) {
            const __m256i v = _mm256_inserti128_si256(
                _mm256_castsi128_si256(
                    _mm_loadu_si128((const __m128i *)(const void *)(pa + 3 * g))),
                _mm_loadu_si128((const __m128i *)(const void *)(pb + 3 * g)), 1);
            for (uint32_t u = 0; u < 5 && g + u < K; u++) {
                __m256i mask;
                switch (u) {
                case 0:
                    mask = TAP_MASK(0);
                    break;
                case 1:
                    mask = TAP_MASK(1);
                    break;
                case 2:
                    mask = TAP_MASK(2);
                    break;
                case 3:
                    mask = TAP_MASK(3);
                    break;
                default:
                    mask = TAP_MASK(4);
                    break;
                }
                const __m256i px = _mm256_shuffle_epi8(v, mask);
                acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(px, _mm256_load_si256(c + g + u)));
            }
        }
        acc = _mm256_srai_epi32(acc, PRECISION_BITS);
        /* Signed then unsigned saturation clamps to 0..255, as clip8. */
        acc = _mm256_packus_epi16(_mm256_packs_epi32(acc, acc), acc);
        const uint32_t a = (uint32_t)_mm256_cvtsi256_si32(acc);
        const uint32_t b = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(acc, 1));
        const uint64_t ab = (a & 0xffffffu) | (uint64_t)b << 24;
        if (xx + 2 < out_w)
            memcpy(out + (size_t)xx * 3, &ab, 8); /* bytes 6, 7: the next pixel's */
        else
            memcpy(out + (size_t)xx * 3, &ab, 6);
    }
    for (; xx < out_w; xx++)
        hpass_rgb_pixel(in + (size_t)bounds[2 * xx] * 3, kk + (size_t)xx * K, K,
                        out + (size_t)xx * 3);
}

/* One function per common K so that the loops unroll, and a generic one. */
#define DEFINE_HPASS_AVX2(NAME, KEXPR)                                                             \
    __attribute__((target("avx2"))) static void NAME(                                              \
        const uint8_t *restrict in, size_t in_bytes, uint8_t *restrict out, uint32_t out_w,        \
        const int32_t *restrict bounds, const int32_t *restrict kk, const int32_t *restrict hx,    \
        uint32_t ksize)                                                                            \
    {                                                                                              \
        hpass_rgb_avx2_k(in, in_bytes, out, out_w, bounds, kk, hx, KEXPR);                         \
    }
DEFINE_HPASS_AVX2(hpass_rgb_avx2_2, 2)
DEFINE_HPASS_AVX2(hpass_rgb_avx2_3, 3)
DEFINE_HPASS_AVX2(hpass_rgb_avx2_5, 5)
DEFINE_HPASS_AVX2(hpass_rgb_avx2_7, 7)
DEFINE_HPASS_AVX2(hpass_rgb_avx2_9, 9)
DEFINE_HPASS_AVX2(hpass_rgb_avx2_any, ksize)
#undef Z
#undef TAP_MASK
#endif

/* Which horizontal kernel a resize uses, chosen once per call. */
typedef struct hpass_ctx {
    uint32_t channels;
    int padded;            /* every window has exactly ksize taps (axis_coeffs with pad) */
    int avx2;              /* the AVX2 kernel runs (RGB, padded, CPU has AVX2) */
    const int32_t *hx;     /* its coefficients, from expand_hcoeffs() */
    const void *dense;     /* 2-tap tables from dense2_setup(), or NULL */
    uint32_t dense_groups; /* groups of 8 output bytes the 2-tap kernel may compute */
    uint32_t ksize;        /* taps per window when padded, else the weights' stride */
    size_t in_bytes;       /* bytes of one source row the pass may read (width x channels) */
} hpass_ctx;

#ifdef HAVE_HPASS_AVX2
static void hpass_rgb_dense2(const hpass_ctx *h, const uint8_t *in, uint8_t *out, uint32_t out_w,
                             const int32_t *bounds, const int32_t *kk);
#endif

static void hpass(const hpass_ctx *h, const uint8_t *in, uint8_t *out, uint32_t out_w,
                  const int32_t *bounds, const int32_t *kk)
{
    const uint32_t ksize = h->ksize;
    if (h->channels == 3 && h->padded) {
#ifdef HAVE_HPASS_AVX2
        if (h->dense) {
            hpass_rgb_dense2(h, in, out, out_w, bounds, kk);
            return;
        }
        if (h->avx2) {
            switch (ksize) {
            case 2:
                hpass_rgb_avx2_2(in, h->in_bytes, out, out_w, bounds, kk, h->hx, ksize);
                return;
            case 3:
                hpass_rgb_avx2_3(in, h->in_bytes, out, out_w, bounds, kk, h->hx, ksize);
                return;
            case 5:
                hpass_rgb_avx2_5(in, h->in_bytes, out, out_w, bounds, kk, h->hx, ksize);
                return;
            case 7:
                hpass_rgb_avx2_7(in, h->in_bytes, out, out_w, bounds, kk, h->hx, ksize);
                return;
            case 9:
                hpass_rgb_avx2_9(in, h->in_bytes, out, out_w, bounds, kk, h->hx, ksize);
                return;
            default:
                hpass_rgb_avx2_any(in, h->in_bytes, out, out_w, bounds, kk, h->hx, ksize);
                return;
            }
        }
#endif
        switch (ksize) {
        case 2:
            hpass_rgb_2(in, out, out_w, bounds, kk);
            return;
        case 3:
            hpass_rgb_3(in, out, out_w, bounds, kk);
            return;
        case 5:
            hpass_rgb_5(in, out, out_w, bounds, kk);
            return;
        case 7:
            hpass_rgb_7(in, out, out_w, bounds, kk);
            return;
        case 9:
            hpass_rgb_9(in, out, out_w, bounds, kk);
            return;
        default:
            break;
        }
    }
    hpass_any(h->channels, in, out, out_w, bounds, kk, ksize);
}

static int cpu_has_avx2(void)
{
#ifdef HAVE_HPASS_AVX2
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

/* Vertical pass for one output row of @p n bytes: taps outside, bytes
 * inside, two taps per sweep to halve the accumulator traffic. */
HOT_CLONES static void vpass_row(const uint8_t *restrict in, size_t in_stride, int32_t taps,
                                 const int32_t *restrict k, int32_t *restrict acc,
                                 uint8_t *restrict out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        acc[i] = 1 << (PRECISION_BITS - 1);
    int32_t t = 0;
    for (; t + 1 < taps; t += 2) {
        const uint8_t *restrict r0 = in + (size_t)t * in_stride;
        const uint8_t *restrict r1 = r0 + in_stride;
        const int32_t k0 = k[t], k1 = k[t + 1];
        for (size_t i = 0; i < n; i++)
            acc[i] += r0[i] * k0 + r1[i] * k1;
    }
    if (t < taps) {
        const uint8_t *restrict r0 = in + (size_t)t * in_stride;
        const int32_t k0 = k[t];
        for (size_t i = 0; i < n; i++)
            acc[i] += r0[i] * k0;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = clip8(acc[i]);
}

#ifdef HAVE_HPASS_AVX2
/*
 * The vertical pass on one output row with AVX2: 32 bytes of the row at a
 * time, in four registers of eight int32 that stay in registers across all
 * taps (the portable loop above keeps its accumulators in memory and makes
 * a second sweep to clip them). Each tap zero-extends 8 bytes per register
 * (vpmovzxbd) and adds their vpmulld products with the tap's coefficient:
 * the same int32 products and sums as Pillow's loop, so the result is
 * bit-identical. Two and three taps (upscaling and mild reductions, every
 * random-resized crop) get their own unrolled loops.
 */
__attribute__((target("avx2"), always_inline)) static inline __m256i vtap8(const uint8_t *p,
                                                                           __m256i k)
{
    return _mm256_mullo_epi32(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)), k);
}

__attribute__((target("avx2"), always_inline)) static inline void
vstore32(uint8_t *out, __m256i a0, __m256i a1, __m256i a2, __m256i a3)
{
    a0 = _mm256_srai_epi32(a0, PRECISION_BITS);
    a1 = _mm256_srai_epi32(a1, PRECISION_BITS);
    a2 = _mm256_srai_epi32(a2, PRECISION_BITS);
    a3 = _mm256_srai_epi32(a3, PRECISION_BITS);
    /* Signed then unsigned saturation clamps to 0..255, as clip8; the packs
     * work within 128-bit halves, and the permutation puts the bytes back in
     * order. */
    const __m256i w = _mm256_packus_epi16(_mm256_packs_epi32(a0, a1), _mm256_packs_epi32(a2, a3));
    _mm256_storeu_si256((__m256i *)(void *)out,
                        _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

__attribute__((target("avx2"))) static void vpass_row_avx2(const uint8_t *restrict in,
                                                           size_t in_stride, int32_t taps,
                                                           const int32_t *restrict k,
                                                           uint8_t *restrict out, size_t n)
{
    const __m256i round = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
    size_t i = 0;
    if (taps == 2) {
        const __m256i k0 = _mm256_set1_epi32(k[0]), k1 = _mm256_set1_epi32(k[1]);
        const uint8_t *r0 = in, *r1 = in + in_stride;
        for (; i + 32 <= n; i += 32) {
            __m256i a[4];
            for (int j = 0; j < 4; j++)
                a[j] = _mm256_add_epi32(_mm256_add_epi32(round, vtap8(r0 + i + 8 * j, k0)),
                                        vtap8(r1 + i + 8 * j, k1));
            vstore32(out + i, a[0], a[1], a[2], a[3]);
        }
    } else if (taps == 3) {
        const __m256i k0 = _mm256_set1_epi32(k[0]), k1 = _mm256_set1_epi32(k[1]),
                      k2 = _mm256_set1_epi32(k[2]);
        const uint8_t *r0 = in, *r1 = in + in_stride, *r2 = r1 + in_stride;
        for (; i + 32 <= n; i += 32) {
            __m256i a[4];
            for (int j = 0; j < 4; j++)
                a[j] = _mm256_add_epi32(
                    _mm256_add_epi32(_mm256_add_epi32(round, vtap8(r0 + i + 8 * j, k0)),
                                     vtap8(r1 + i + 8 * j, k1)),
                    vtap8(r2 + i + 8 * j, k2));
            vstore32(out + i, a[0], a[1], a[2], a[3]);
        }
    } else {
        for (; i + 32 <= n; i += 32) {
            __m256i a[4] = {round, round, round, round};
            for (int32_t t = 0; t < taps; t++) {
                const uint8_t *r = in + (size_t)t * in_stride + i;
                const __m256i kt = _mm256_set1_epi32(k[t]);
                for (int j = 0; j < 4; j++)
                    a[j] = _mm256_add_epi32(a[j], vtap8(r + 8 * j, kt));
            }
            vstore32(out + i, a[0], a[1], a[2], a[3]);
        }
    }
    /* The last bytes of a row that is not a multiple of 32 wide. */
    for (; i < n; i++) {
        int32_t s = 1 << (PRECISION_BITS - 1);
        for (int32_t t = 0; t < taps; t++)
            s += in[(size_t)t * in_stride + i] * k[t];
        out[i] = clip8(s);
    }
}

/*
 * The horizontal pass on RGB for windows of 2 taps (every upscale), with
 * no idle lane: a register of eight int32 holds eight consecutive output
 * bytes (R, G, B, R, ...), four per 128-bit half, each half loaded from the
 * source at the window of its first output byte. A per-group byte shuffle,
 * made once per call, gathers each output byte's two source bytes as a pair
 * of 16-bit words, and vpmaddwd multiplies and adds the pair. Its 16-bit
 * factors cannot hold a 22-bit weight, so each weight k is split as
 * k = hi * 2^11 + lo (hi <= 2^11, lo < 2^11) and the sum is
 * (sum p * hi) * 2^11 + sum p * lo: the same int32 as Pillow's sum of
 * p * k, so the result is bit-identical. Four groups (32 output bytes) are
 * then packed and stored as in the vertical pass.
 */
typedef struct dense2_group {
    __m256i mask; /* per half: byte pairs (tap 0, tap 1) zero-extended to words */
    __m256i hi;   /* per lane: (k0 >> 11, k1 >> 11) as int16 */
    __m256i lo;   /* per lane: (k0 & 2047, k1 & 2047) as int16 */
} dense2_group;

/* Bytes dense2_setup() needs for @p out_w RGB output pixels. */
static size_t dense2_bytes(uint32_t out_w)
{
    const size_t groups = ((size_t)out_w * 3 + 7) / 8;
    return groups * (sizeof(dense2_group) + 2 * sizeof(int32_t));
}

/* Build the tables of the 2-tap kernel into @p mem (32-byte aligned, at
 * least dense2_bytes()). Returns how many leading groups the kernel can
 * compute with loads inside a source row of @p in_bytes, or 0 when some
 * window lies too far from its half's load (or a weight is negative) and
 * the kernel cannot be used at all. */
static uint32_t dense2_setup(const int32_t *restrict bounds, const int32_t *restrict kk,
                             uint32_t out_w, size_t in_bytes, void *mem)
{
    const size_t nbytes = (size_t)out_w * 3, groups = (nbytes + 7) / 8;
    dense2_group *g = mem;
    int32_t *base = (int32_t *)(void *)(g + groups);
    uint32_t usable = (uint32_t)groups;
    for (size_t i = 0; i < groups; i++) {
        uint8_t mask[32];
        int16_t hi[16], lo[16];
        for (int h = 0; h < 2; h++) {
            const size_t j0 = 8 * i + 4 * (size_t)h;
            const size_t x0 = (j0 < nbytes ? j0 : nbytes - 1) / 3;
            const int32_t b = bounds[2 * x0] * 3;
            base[2 * i + h] = b;
            if (usable == groups && (size_t)b + 16 > in_bytes)
                usable = (uint32_t)i;
            for (int l = 0; l < 4; l++) {
                const size_t j = j0 + (size_t)l;
                uint8_t *m = mask + 16 * h + 4 * l;
                int16_t *ch = hi + 8 * h + 2 * l, *cl = lo + 8 * h + 2 * l;
                if (j >= nbytes) {
                    m[0] = m[1] = m[2] = m[3] = 0x80;
                    ch[0] = ch[1] = cl[0] = cl[1] = 0;
                    continue;
                }
                const size_t x = j / 3;
                const int32_t o = bounds[2 * x] * 3 + (int32_t)(j % 3) - b;
                const int32_t k0 = kk[2 * x], k1 = kk[2 * x + 1];
                if (o < 0 || o + 3 > 15 || k0 < 0 || k1 < 0 || k0 > (1 << PRECISION_BITS) ||
                    k1 > (1 << PRECISION_BITS))
                    return 0;
                m[0] = (uint8_t)o;
                m[2] = (uint8_t)(o + 3);
                m[1] = m[3] = 0x80;
                ch[0] = (int16_t)(k0 >> 11);
                ch[1] = (int16_t)(k1 >> 11);
                cl[0] = (int16_t)(k0 & 2047);
                cl[1] = (int16_t)(k1 & 2047);
            }
        }
        memcpy(&g[i].mask, mask, 32);
        memcpy(&g[i].hi, hi, 32);
        memcpy(&g[i].lo, lo, 32);
    }
    return usable;
}

__attribute__((target("avx2"), always_inline)) static inline __m256i
dense2_one(const uint8_t *in, const dense2_group *g, const int32_t *base, __m256i round)
{
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(in + base[0]))),
        _mm_loadu_si128((const __m128i *)(const void *)(in + base[1])), 1);
    const __m256i p = _mm256_shuffle_epi8(v, _mm256_load_si256(&g->mask));
    const __m256i h = _mm256_madd_epi16(p, _mm256_load_si256(&g->hi));
    const __m256i l = _mm256_madd_epi16(p, _mm256_load_si256(&g->lo));
    return _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h, 11), l), round);
}

__attribute__((target("avx2"))) static void
hpass_rgb_dense2(const hpass_ctx *h, const uint8_t *restrict in, uint8_t *restrict out,
                 uint32_t out_w, const int32_t *restrict bounds, const int32_t *restrict kk)
{
    const __m256i round = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
    const dense2_group *g = h->dense;
    const size_t nbytes = (size_t)out_w * 3, groups = (nbytes + 7) / 8;
    const int32_t *base = (const int32_t *)(const void *)(g + groups);
    size_t i = 0;
    /* Four groups at a time while they are usable and their 32 bytes fit. */
    for (; i + 4 <= h->dense_groups && 8 * i + 32 <= nbytes; i += 4)
        vstore32(out + 8 * i, dense2_one(in, g + i, base + 2 * i, round),
                 dense2_one(in, g + i + 1, base + 2 * i + 2, round),
                 dense2_one(in, g + i + 2, base + 2 * i + 4, round),
                 dense2_one(in, g + i + 3, base + 2 * i + 6, round));
    /* The rest byte by byte: near the row's end, where a 16-byte load would
     * pass the end of the source row, or an output not a multiple of 32. */
    for (size_t j = 8 * i; j < nbytes; j++) {
        const size_t x = j / 3;
        const uint8_t *p = in + (size_t)bounds[2 * x] * 3 + j % 3;
        out[j] = clip8((1 << (PRECISION_BITS - 1)) + p[0] * kk[2 * x] + p[3] * kk[2 * x + 1]);
    }
}
#endif

static size_t align_up(size_t n)
{
    return (n + SCRATCH_ALIGN - 1) & ~(size_t)(SCRATCH_ALIGN - 1);
}

/* Scratch layout, each part 64-byte aligned: horizontal bounds and weights,
 * vertical bounds and weights, one int32 accumulator row, then the
 * intermediate image of the rows the vertical pass reads. */
typedef struct layout {
    size_t hb, hk, hx, vb, vk, acc, tmp, total;
} layout;

static void make_layout(layout *l, uint32_t dst_w, uint32_t dst_h, uint32_t ks_h, uint32_t ks_v,
                        uint32_t channels, size_t tmp_rows)
{
    size_t off = 0;
    l->hb = off;
    off += align_up((size_t)dst_w * 2 * sizeof(int32_t));
    l->hk = off;
    off += align_up((size_t)dst_w * ks_h * sizeof(int32_t));
    /* The AVX2 kernel's expanded coefficients: eight int32 per tap per pair
     * of RGB output pixels (expand_hcoeffs). */
    l->hx = off;
#ifdef HAVE_HPASS_AVX2
    /* The same room holds the 2-tap kernel's tables (dense2_setup). */
    if (channels == 3) {
        const size_t pairs = align_up((size_t)(dst_w / 2) * ks_h * 8 * sizeof(int32_t));
        const size_t dense = align_up(dense2_bytes(dst_w));
        off += pairs > dense ? pairs : dense;
    }
#else
    if (channels == 3)
        off += align_up((size_t)(dst_w / 2) * ks_h * 8 * sizeof(int32_t));
#endif
    l->vb = off;
    off += align_up((size_t)dst_h * 2 * sizeof(int32_t));
    l->vk = off;
    off += align_up((size_t)dst_h * ks_v * sizeof(int32_t));
    l->acc = off;
    off += align_up((size_t)dst_w * channels * sizeof(int32_t));
    l->tmp = off;
    off += align_up((size_t)dst_w * channels * tmp_rows);
    l->total = off + SCRATCH_ALIGN; /* room to align an unaligned scratch pointer */
}

size_t dlc_resize_scratch_bound(uint32_t src_w, uint32_t src_h, uint32_t dst_w, uint32_t dst_h,
                                uint32_t channels)
{
    if (!src_w || !src_h || !dst_w || !dst_h || !channels || channels > 4 ||
        src_w > DLC__IMAGE_MAX_SIDE || src_h > DLC__IMAGE_MAX_SIDE || dst_w > DLC__IMAGE_MAX_SIDE ||
        dst_h > DLC__IMAGE_MAX_SIDE)
        return 0;
    /* One extra source pixel per axis covers a fractional region whose
     * rounded-down size the caller passed; two extra taps and rows cover the
     * rounding of the window bounds. */
    const double sh = (double)(src_w + 1) / dst_w, sv = (double)(src_h + 1) / dst_h;
    const uint32_t ks_h = (uint32_t)ceil(sh < 1.0 ? 1.0 : sh) * 2 + 3;
    const uint32_t ks_v = (uint32_t)ceil(sv < 1.0 ? 1.0 : sv) * 2 + 3;
    layout l;
    make_layout(&l, dst_w, dst_h, ks_h, ks_v, channels, (size_t)src_h + 1 + ks_v);
    return l.total;
}

static dlc_status check_image(const dlc_image *im, const char *what)
{
    if (!im || !im->data)
        return dlc__errorf(DLC_EINVAL, "resize: %s image is NULL", what);
    if (!im->width || !im->height || im->width > DLC__IMAGE_MAX_SIDE ||
        im->height > DLC__IMAGE_MAX_SIDE)
        return dlc__errorf(DLC_EINVAL,
                           "resize: %s image is %ux%u (height x width; each side must be 1..%u)",
                           what, im->height, im->width, DLC__IMAGE_MAX_SIDE);
    if (im->channels < 1 || im->channels > 4)
        return dlc__errorf(DLC_EINVAL, "resize: %s image has %u channels (1..4 supported)", what,
                           im->channels);
    if (im->stride < (size_t)im->width * im->channels)
        return dlc__errorf(DLC_EINVAL, "resize: %s image stride %zu is below width %u x %u", what,
                           im->stride, im->width, im->channels);
    return DLC_OK;
}

/* Validate the arguments and set up both axes and the layout. */
static dlc_status plan(const dlc_image *src, double x, double y, double w, double h, uint32_t out_w,
                       uint32_t out_h, uint32_t ox, uint32_t oy, const dlc_image *dst, axis *ah,
                       axis *av, int *need_h, int *need_v, int32_t *row_first, size_t *tmp_rows,
                       layout *l)
{
    dlc_status rc = check_image(src, "source");
    if (rc < 0)
        return rc;
    rc = check_image(dst, "destination");
    if (rc < 0)
        return rc;
    if (src->channels != dst->channels)
        return dlc__errorf(DLC_EINVAL, "resize: source has %u channels, destination %u",
                           src->channels, dst->channels);
    if (!out_w || !out_h || out_w > DLC__IMAGE_MAX_SIDE || out_h > DLC__IMAGE_MAX_SIDE ||
        ox > out_w || oy > out_h || dst->width > out_w - ox || dst->height > out_h - oy)
        return dlc__errorf(DLC_EINVAL,
                           "resize: window %ux%u at (x %u, y %u) is not inside the %ux%u output "
                           "(height x width)",
                           dst->height, dst->width, ox, oy, out_h, out_w);
    /* The !(a <= b) forms also reject NaN. */
    if (!(x >= 0.0) || !(y >= 0.0) || !(w > 0.0) || !(h > 0.0) || !(x + w <= src->width) ||
        !(y + h <= src->height))
        return dlc__errorf(DLC_EINVAL,
                           "resize: region (x %g, y %g) %gx%g is empty or not inside the %ux%u "
                           "source (height x width)",
                           x, y, h, w, src->height, src->width);

    /* Pillow's box is (x0, y0, x1, y1) in single precision. */
    const float x0 = (float)x, y0 = (float)y, x1 = (float)(x + w), y1 = (float)(y + h);
    if (!(x1 > x0) || !(y1 > y0))
        return dlc__errorf(DLC_EINVAL, "resize: region (%g, %g) %gx%g is empty in single precision",
                           x, y, w, h);
    axis_setup(ah, x0, x1, out_w, src->width);
    axis_setup(av, y0, y1, out_h, src->height);
    /* ImagingResampleInner's test, including its comparison of the box's
     * right edge with the output size: a pass is skipped only when it would
     * be the identity. */
    *need_h = out_w != src->width || x0 != 0.0f || x1 != (float)out_w;
    *need_v = out_h != src->height || y0 != 0.0f || y1 != (float)out_h;

    int32_t f0, n0, f1, n1;
    axis_bounds(av, oy, &f0, &n0);
    axis_bounds(av, oy + dst->height - 1, &f1, &n1);
    *row_first = f0;
    *tmp_rows = (size_t)(f1 + n1 - f0);
    make_layout(l, dst->width, dst->height, ah->ksize, av->ksize, src->channels,
                *need_h && *need_v ? *tmp_rows : 0);
    return DLC_OK;
}

size_t dlc__resize_window_need(const dlc_image *src, double x, double y, double w, double h,
                               uint32_t out_w, uint32_t out_h, uint32_t oy, const dlc_image *dst)
{
    /* Zeroed only to quiet -Wmaybe-uninitialized: plan() sets them all
     * before returning DLC_OK. */
    axis ah = {0}, av = {0};
    int need_h = 0, need_v = 0;
    int32_t row_first = 0;
    size_t tmp_rows = 0;
    layout l = {0};
    if (plan(src, x, y, w, h, out_w, out_h, 0, oy, dst, &ah, &av, &need_h, &need_v, &row_first,
             &tmp_rows, &l) < 0)
        return 0;
    return l.total;
}

dlc_status dlc__resize_window(const dlc_image *src, double x, double y, double w, double h,
                              uint32_t out_w, uint32_t out_h, uint32_t ox, uint32_t oy,
                              const dlc_image *dst, void *scratch, size_t scratch_size)
{
    /* Zeroed only to quiet -Wmaybe-uninitialized: plan() sets them all
     * before returning DLC_OK. */
    axis ah = {0}, av = {0};
    int need_h = 0, need_v = 0;
    int32_t row_first = 0;
    size_t tmp_rows = 0;
    layout l = {0};
    const dlc_status rc = plan(src, x, y, w, h, out_w, out_h, ox, oy, dst, &ah, &av, &need_h,
                               &need_v, &row_first, &tmp_rows, &l);
    if (rc < 0)
        return rc;
    if (!scratch || scratch_size < l.total)
        return dlc__errorf(DLC_EINVAL, "resize: scratch of %zu bytes is below the %zu needed",
                           scratch_size, l.total);

    const uint32_t C = src->channels;
    const uint32_t dw = dst->width, dh = dst->height;
    const size_t row_bytes = (size_t)dw * C;
    uint8_t *base =
        (uint8_t *)(((uintptr_t)scratch + SCRATCH_ALIGN - 1) & ~(uintptr_t)(SCRATCH_ALIGN - 1));
    int32_t *hb = (int32_t *)(void *)(base + l.hb), *hk = (int32_t *)(void *)(base + l.hk);
    int32_t *vb = (int32_t *)(void *)(base + l.vb), *vk = (int32_t *)(void *)(base + l.vk);
    int32_t *acc = (int32_t *)(void *)(base + l.acc);
    uint8_t *tmp = base + l.tmp;

    if (!need_h && !need_v) {
        /* Same size, whole image: Pillow copies. */
        for (uint32_t r = 0; r < dh; r++)
            memcpy(dst->data + r * dst->stride,
                   src->data + (size_t)(oy + r) * src->stride + (size_t)ox * C, row_bytes);
        return DLC_OK;
    }
    hpass_ctx hc = {
        .channels = C,
        .ksize = ah.ksize,
        .in_bytes = (size_t)src->width * C,
    };
    if (need_h) {
        hc.ksize = axis_coeffs(&ah, ox, dw, 1, hb, hk, &hc.padded);
#ifdef HAVE_HPASS_AVX2
        hc.avx2 = C == 3 && hc.padded && cpu_has_avx2();
        if (hc.avx2 && hc.ksize == 2) {
            hc.dense_groups = dense2_setup(hb, hk, dw, hc.in_bytes, base + l.hx);
            if (hc.dense_groups)
                hc.dense = base + l.hx;
        }
        if (hc.avx2 && !hc.dense) {
            int32_t *hx = (int32_t *)(void *)(base + l.hx);
            expand_hcoeffs(hk, hc.ksize, dw, hx);
            hc.hx = hx;
        }
#endif
    }
    if (!need_v) {
        /* Output row oy + r is source row oy + r, resampled horizontally. */
        for (uint32_t r = 0; r < dh; r++)
            hpass(&hc, src->data + (size_t)(oy + r) * src->stride, dst->data + r * dst->stride, dw,
                  hb, hk);
        return DLC_OK;
    }

    int vpadded;
    const uint32_t vstride = axis_coeffs(&av, oy, dh, 0, vb, vk, &vpadded);
    const uint8_t *in;
    size_t in_stride;
    if (need_h) {
        /* Only the rows the vertical taps reach are resampled horizontally
         * (Pillow's ybox_first..ybox_last); the vertical bounds become
         * relative to the first of them. */
        for (size_t r = 0; r < tmp_rows; r++)
            hpass(&hc, src->data + (size_t)(row_first + (int32_t)r) * src->stride,
                  tmp + r * row_bytes, dw, hb, hk);
        for (uint32_t i = 0; i < dh; i++)
            vb[2 * i] -= row_first;
        in = tmp;
        in_stride = row_bytes;
    } else {
        in = src->data + (size_t)ox * C;
        in_stride = src->stride;
    }
#ifdef HAVE_HPASS_AVX2
    if (cpu_has_avx2()) {
        for (uint32_t r = 0; r < dh; r++)
            vpass_row_avx2(in + (size_t)vb[2 * r] * in_stride, in_stride, vb[2 * r + 1],
                           vk + (size_t)r * vstride, dst->data + r * dst->stride, row_bytes);
        return DLC_OK;
    }
#endif
    for (uint32_t r = 0; r < dh; r++)
        vpass_row(in + (size_t)vb[2 * r] * in_stride, in_stride, vb[2 * r + 1],
                  vk + (size_t)r * vstride, acc, dst->data + r * dst->stride, row_bytes);
    return DLC_OK;
}

dlc_status dlc_resize(const dlc_image *src, double x, double y, double w, double h,
                      const dlc_image *dst, void *scratch, size_t scratch_size)
{
    if (!dst)
        return dlc__errorf(DLC_EINVAL, "resize: destination image is NULL");
    return dlc__resize_window(src, x, y, w, h, dst->width, dst->height, 0, 0, dst, scratch,
                              scratch_size);
}
