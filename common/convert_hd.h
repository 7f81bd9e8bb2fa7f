/* The arithmetic of the loader's output conversion, written once for the CPU and the GPU.
 *
 * The CPU path builds its tables from dlc__hd_norm() and dlc__hd_f32_to_f16() (loader/augment.c,
 * common/half.c), the CUDA plugin's kernel (loader/cuda/) builds its table in shared memory with
 * the same functions,
 * and the CPU stand-in of the device (tests/lib/devsim.c) calls dlc__hd_convert_at(). So a
 * device batch is bit-identical to the host batch: float32 with 0 ulp of difference, float16
 * identical, uint8 identical. Only correctly rounded operations are used (IEEE division and
 * subtraction: nvcc's __fdiv_rn and __fsub_rn, which -use_fast_math cannot relax, and no
 * multiply that could be fused with an add), so no compiler flag can change a bit.
 *
 * Plain C11 and CUDA C++ alike: no libc, no library types. */
#ifndef DLCACHE_CONVERT_HD_H
#define DLCACHE_CONVERT_HD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DLC_HD static __host__ __device__ __forceinline__
#else
#define DLC_HD static inline
#endif
/* The intrinsics exist only in device code; on the host (x86-64 SSE, FLT_EVAL_METHOD 0) plain
 * float division and subtraction are the same correctly rounded operations. */
#ifdef __CUDA_ARCH__
#define DLC__FDIV(a, b) __fdiv_rn((a), (b))
#define DLC__FSUB(a, b) __fsub_rn((a), (b))
#define DLC__FMUL(a, b) __fmul_rn((a), (b))
#define DLC__FADD(a, b) __fadd_rn((a), (b))
#else
/* The host build is ISO C11 (no GNU extensions), where GCC and Clang never contract a * b + c
 * into a fused multiply-add: each product below is rounded, as __fmul_rn's is. */
#define DLC__FDIV(a, b) ((a) / (b))
#define DLC__FSUB(a, b) ((a) - (b))
#define DLC__FMUL(a, b) ((a) * (b))
#define DLC__FADD(a, b) ((a) + (b))
#endif

/* Element types and layouts, by the values of ::dlc_dtype and ::dlc_layout (store.h, loader.h),
 * which this header cannot include in CUDA code. */
#define DLC__HD_UINT8 0u
#define DLC__HD_FLOAT32 1u
#define DLC__HD_FLOAT16 2u
#define DLC__HD_BFLOAT16 9u
#define DLC__HD_NHWC 0u
#define DLC__HD_NCHW 1u

/* ((x / 255) - mean) / std in float, each step rounded to nearest: the reference expression. */
DLC_HD float dlc__hd_norm(uint32_t x, float mean, float std)
{
    return DLC__FDIV(DLC__FSUB(DLC__FDIV((float)x, 255.0f), mean), std);
}

/* Binary16 bits of @p f, rounded to nearest even (what torch's .half() does); NaN stays a quiet
 * NaN, values beyond the largest half become infinities. */
DLC_HD uint16_t dlc__hd_f32_to_f16(float f)
{
    union {
        float f;
        uint32_t u;
    } bits;
    bits.f = f;
    const uint32_t x = bits.u;
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* Inf or NaN (NaN stays a quiet NaN). */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    if (absx >= 0x477ff000u) /* Rounds to a value beyond the largest half: infinity. */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) {
        /* Subnormal half (or zero): shift the full significand into place, round to even. */
        if (absx < 0x33000000u)
            return (uint16_t)sign;
        const uint32_t e = absx >> 23;
        const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e; /* 14..24 */
        uint32_t h = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
    /* Normal: rebias the exponent and round the 13 dropped bits to nearest even; a carry into
     * the exponent is the correct result. */
    uint32_t h = ((absx - 0x38000000u) >> 13);
    const uint32_t rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

/* bfloat16 bits of @p f, rounded to nearest even (what torch's .to(torch.bfloat16) does: the
 * upper half of the binary32 after adding 0x7fff plus the lowest kept bit); NaN stays a quiet
 * NaN. A value that rounds past the largest bfloat16 becomes an infinity, as in torch. */
DLC_HD uint16_t dlc__hd_f32_to_bf16(float f)
{
    union {
        float f;
        uint32_t u;
    } bits;
    bits.f = f;
    const uint32_t x = bits.u;
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* The 16-bit output of @p v for @p dtype (DLC__HD_FLOAT16 or DLC__HD_BFLOAT16). */
DLC_HD uint16_t dlc__hd_f32_to_16(float v, uint32_t dtype)
{
    return dtype == DLC__HD_BFLOAT16 ? dlc__hd_f32_to_bf16(v) : dlc__hd_f32_to_f16(v);
}

/* One image conversion on the device: @p n images of h x w x c uint8 (NHWC, as the workers wrote
 * them into the slot and the copy moved them) into @p dst as @p dtype in @p layout. */
typedef struct dlc__hd_conv {
    const uint8_t *src; /* n * h * w * c bytes. */
    void *dst;          /* n * h * w * c elements of dtype. */
    uint64_t n;         /* Images (samples x views). */
    uint32_t h, w, c;   /* c in 1..4. */
    uint32_t dtype;     /* DLC__HD_UINT8, FLOAT32, FLOAT16 or BFLOAT16. */
    uint32_t layout;    /* DLC__HD_NHWC or DLC__HD_NCHW, of dst. */
    float mean[4], std[4];
} dlc__hd_conv;

/* Output element @p i (in dst's own order) of the conversion @p cv: the one function that the
 * kernel runs per thread and the CPU stand-in runs in a loop. */
DLC_HD void dlc__hd_convert_at(const dlc__hd_conv *cv, uint64_t i)
{
    const uint64_t hw = (uint64_t)cv->h * cv->w;
    const uint64_t img = i / (hw * cv->c);
    const uint64_t r = i - img * hw * cv->c;
    uint64_t pix;
    uint32_t ch;
    if (cv->layout == DLC__HD_NCHW) {
        ch = (uint32_t)(r / hw);
        pix = r - (uint64_t)ch * hw;
    } else {
        pix = r / cv->c;
        ch = (uint32_t)(r - pix * cv->c);
    }
    const uint8_t x = cv->src[(img * hw + pix) * cv->c + ch];
    if (cv->dtype == DLC__HD_UINT8) {
        ((uint8_t *)cv->dst)[i] = x;
        return;
    }
    const float v = dlc__hd_norm(x, cv->mean[ch], cv->std[ch]);
    if (cv->dtype == DLC__HD_FLOAT32)
        ((float *)cv->dst)[i] = v;
    else
        ((uint16_t *)cv->dst)[i] = dlc__hd_f32_to_16(v, cv->dtype);
}

/* Elements of dst. */
DLC_HD uint64_t dlc__hd_conv_elements(const dlc__hd_conv *cv)
{
    return cv->n * cv->h * cv->w * cv->c;
}

/* ---- MixUp and CutMix (include/dlcache/loader.h, "MixUp and CutMix") ----------------------
 * Written once for the host (loader/batchaug.c) and the device (the plugin's kernel, the CPU
 * stand-in): the draw is made on the host and passed in, so both compute the same bits. */

/* The float of binary16 bits @p h (exact). */
DLC_HD float dlc__hd_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1fu) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        u = sign | ((e + 112u) << 23) | (m << 13);
    } else if (!m) {
        u = sign;
    } else { /* Subnormal: normalize the significand. */
        e = 113u;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        u = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    union {
        uint32_t u;
        float f;
    } bits;
    bits.u = u;
    return bits.f;
}

/* The float of 16-bit output bits @p v of @p dtype (FLOAT16 or BFLOAT16). */
DLC_HD float dlc__hd_16_to_f32(uint16_t v, uint32_t dtype)
{
    if (dtype != DLC__HD_BFLOAT16)
        return dlc__hd_f16_to_f32(v);
    union {
        uint32_t u;
        float f;
    } bits;
    bits.u = (uint32_t)v << 16;
    return bits.f;
}

/* lam * a + oml * b as torch computes x.mul_(lam).add_(x.flip(0).mul_(1 - lam)) in float32. */
DLC_HD float dlc__hd_mix_f32(float a, float b, float lam, float oml)
{
    return DLC__FADD(DLC__FMUL(a, lam), DLC__FMUL(b, oml));
}

/* The same on float16 or bfloat16 tensors: each product rounded to the type, then the sum. */
DLC_HD uint16_t dlc__hd_mix_16(uint16_t a, uint16_t b, float lam, float oml, uint32_t dtype)
{
    const uint16_t pa = dlc__hd_f32_to_16(DLC__FMUL(dlc__hd_16_to_f32(a, dtype), lam), dtype);
    const uint16_t pb = dlc__hd_f32_to_16(DLC__FMUL(dlc__hd_16_to_f32(b, dtype), oml), dtype);
    return dlc__hd_f32_to_16(DLC__FADD(dlc__hd_16_to_f32(pa, dtype), dlc__hd_16_to_f32(pb, dtype)),
                             dtype);
}

#define DLC__HD_MIXUP 1u
#define DLC__HD_CUTMIX 2u

/* One mixing of @p n images (samples x views of one output), in place: image i with n-1-i. */
typedef struct dlc__hd_mix {
    void *data;       /* n images of h x w x c elements of dtype, in layout. */
    uint64_t n;       /* Images. */
    uint32_t h, w, c; /* c in 1..4. */
    uint32_t dtype;   /* DLC__HD_FLOAT32, FLOAT16 or BFLOAT16. */
    uint32_t layout;  /* DLC__HD_NHWC or DLC__HD_NCHW. */
    uint32_t mode;    /* DLC__HD_MIXUP or DLC__HD_CUTMIX. */
    float lam, oml;   /* (float)lam and (float)(1 - lam), lam in double. */
    uint32_t y0, y1;  /* CutMix: rows y0..y1-1, */
    uint32_t x0, x1;  /* columns x0..x1-1. */
} dlc__hd_mix;

/* The work items of @p mx: every element of the first (n + 1) / 2 images. */
DLC_HD uint64_t dlc__hd_mix_elements(const dlc__hd_mix *mx)
{
    return (mx->n + 1) / 2 * mx->h * mx->w * mx->c;
}

/* Work item @p i of @p mx: element r of image k = i / (h w c) and the same element of its
 * partner n-1-k, both written from both old values (MixUp; the middle image of an odd n is
 * mixed with itself, as torch does) or swapped inside the box (CutMix). */
DLC_HD void dlc__hd_mix_at(const dlc__hd_mix *mx, uint64_t i)
{
    const uint64_t hw = (uint64_t)mx->h * mx->w, per = hw * mx->c;
    const uint64_t k = i / per, r = i - k * per, p = mx->n - 1 - k;
    if (mx->mode == DLC__HD_CUTMIX) {
        const uint64_t pix = mx->layout == DLC__HD_NCHW ? r % hw : r / mx->c;
        const uint32_t y = (uint32_t)(pix / mx->w), x = (uint32_t)(pix % mx->w);
        if (k == p || y < mx->y0 || y >= mx->y1 || x < mx->x0 || x >= mx->x1)
            return;
        if (mx->dtype == DLC__HD_FLOAT32) {
            float *d = (float *)mx->data;
            const float t = d[k * per + r];
            d[k * per + r] = d[p * per + r];
            d[p * per + r] = t;
        } else {
            uint16_t *d = (uint16_t *)mx->data;
            const uint16_t t = d[k * per + r];
            d[k * per + r] = d[p * per + r];
            d[p * per + r] = t;
        }
        return;
    }
    if (mx->dtype == DLC__HD_FLOAT32) {
        float *d = (float *)mx->data;
        const float a = d[k * per + r], b = d[p * per + r];
        d[k * per + r] = dlc__hd_mix_f32(a, b, mx->lam, mx->oml);
        if (k != p)
            d[p * per + r] = dlc__hd_mix_f32(b, a, mx->lam, mx->oml);
    } else {
        uint16_t *d = (uint16_t *)mx->data;
        const uint16_t a = d[k * per + r], b = d[p * per + r];
        d[k * per + r] = dlc__hd_mix_16(a, b, mx->lam, mx->oml, mx->dtype);
        if (k != p)
            d[p * per + r] = dlc__hd_mix_16(b, a, mx->lam, mx->oml, mx->dtype);
    }
}

/* ---- RandomErasing (include/dlcache/loader.h, dlc_augment_spec.erase_*) ---------------------
 * Written once for the host (loader/sample_aug.c), the plugin's kernel and the CPU stand-in:
 * the boxes are drawn on the host per view and passed in, and the noise of DLC_ERASE_NOISE is
 * a counter-based function of (the view's key, the element's index in the box), computed with
 * correctly rounded operations only, so every side writes the same bits. */

#ifdef __CUDA_ARCH__
#define DLC__FSQRT(a) __fsqrt_rn(a)
#else
#define DLC__FSQRT(a) __builtin_sqrtf(a)
#endif

/* splitmix64's output mixer. */
DLC_HD uint64_t dlc__hd_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* log(m / 2^24) for an integer m in 1..2^24, in float: m = f 2^e with f in [sqrt(1/2), sqrt(2))
 * (exact), then log f = 2 atanh(t), t = (f - 1) / (f + 1), |t| < 0.172, by its odd series to
 * t^11 (the next term is below 2e-10). */
DLC_HD float dlc__hd_log_u24(uint32_t m)
{
    int e = 0;
    while ((m >> (e + 1)) != 0)
        e++;
    /* f = m / 2^e in [1, 2): exact, m has at most 25 significant bits and a power of two
     * divides exactly. */
    float f = DLC__FDIV((float)m, (float)(1u << e));
    if (f > 1.41421356f) {
        f = DLC__FMUL(f, 0.5f);
        e++;
    }
    const float t = DLC__FDIV(DLC__FSUB(f, 1.0f), DLC__FADD(f, 1.0f));
    const float t2 = DLC__FMUL(t, t);
    float p = 0.181818182f; /* 2/11 */
    p = DLC__FADD(DLC__FMUL(p, t2), 0.222222222f);
    p = DLC__FADD(DLC__FMUL(p, t2), 0.285714286f);
    p = DLC__FADD(DLC__FMUL(p, t2), 0.4f);
    p = DLC__FADD(DLC__FMUL(p, t2), 0.666666667f);
    p = DLC__FADD(DLC__FMUL(p, t2), 2.0f);
    const float lnf = DLC__FMUL(p, t);
    return DLC__FADD(DLC__FMUL((float)(e - 24), 0.693147181f), lnf);
}

/* cos(2 pi b / 2^24) for b in 0..2^24-1: the quadrant from the top two bits, then the Taylor
 * series of cos or sin on [0, pi/2) (to their x^14 and x^15 terms: error below 1e-10). */
DLC_HD float dlc__hd_cos_u24(uint32_t b)
{
    const uint32_t q = (b >> 22) & 3u;
    /* pi/2 / 2^22: the angle within the quadrant. */
    const float x = DLC__FMUL((float)(b & 0x3fffffu), 3.74507028e-7f);
    const float x2 = DLC__FMUL(x, x);
    float c = -1.14707456e-11f;                      /* -1/14! */
    c = DLC__FADD(DLC__FMUL(c, x2), 2.08767570e-9f); /* 1/12! */
    c = DLC__FSUB(DLC__FMUL(c, x2), 2.75573192e-7f); /* 1/10! */
    c = DLC__FADD(DLC__FMUL(c, x2), 2.48015873e-5f); /* 1/8! */
    c = DLC__FSUB(DLC__FMUL(c, x2), 1.38888889e-3f); /* 1/6! */
    c = DLC__FADD(DLC__FMUL(c, x2), 4.16666667e-2f); /* 1/4! */
    c = DLC__FSUB(DLC__FMUL(c, x2), 0.5f);           /* 1/2! */
    c = DLC__FADD(DLC__FMUL(c, x2), 1.0f);
    float s = -7.64716373e-13f;                       /* -1/15! */
    s = DLC__FADD(DLC__FMUL(s, x2), 1.60590438e-10f); /* 1/13! */
    s = DLC__FSUB(DLC__FMUL(s, x2), 2.50521084e-8f);  /* 1/11! */
    s = DLC__FADD(DLC__FMUL(s, x2), 2.75573192e-6f);  /* 1/9! */
    s = DLC__FSUB(DLC__FMUL(s, x2), 1.98412698e-4f);  /* 1/7! */
    s = DLC__FADD(DLC__FMUL(s, x2), 8.33333333e-3f);  /* 1/5! */
    s = DLC__FSUB(DLC__FMUL(s, x2), 0.166666667f);    /* 1/3! */
    s = DLC__FMUL(DLC__FADD(DLC__FMUL(s, x2), 1.0f), x);
    return q == 0 ? c : q == 1 ? -s : q == 2 ? -c : s;
}

/* Standard normal value number @p i of the stream keyed @p key: splitmix64's output i + 1 from
 * state @p key (a counter-based generator: any element is computed on its own, in any order),
 * then Box-Muller's cosine half on its two 24-bit uniforms, u1 in (0, 1] and the angle. */
DLC_HD float dlc__hd_normal(uint64_t key, uint64_t i)
{
    const uint64_t h = dlc__hd_mix64(key + (i + 1) * 0x9e3779b97f4a7c15ull);
    const uint32_t m = (uint32_t)(h >> 40) + 1u, b = (uint32_t)(h >> 16) & 0xffffffu;
    const float r = DLC__FSQRT(DLC__FMUL(-2.0f, dlc__hd_log_u24(m)));
    return DLC__FMUL(r, dlc__hd_cos_u24(b));
}

/* What one view's erasing writes: its box in the output's pixels (h = 0: none) and its noise
 * key. 24 bytes, the same layout in C and CUDA (a slot's table of them is copied as bytes). */
typedef struct dlc__hd_erase_box {
    uint32_t top, left, h, w;
    uint64_t key;
} dlc__hd_erase_box;

#define DLC__HD_ERASE_ZERO 0u
#define DLC__HD_ERASE_NOISE 1u
#define DLC__HD_ERASE_CONSTANT 2u

/* RandomErasing of @p n converted images (samples x views of one output), in place. */
typedef struct dlc__hd_erase {
    void *data;                     /* n images of h x w x c elements of dtype, in layout. */
    const dlc__hd_erase_box *boxes; /* Image i's box: boxes[(i / per) * stride + i % per]. */
    uint64_t n;                     /* Images. */
    uint32_t h, w, c;               /* c in 1..4. */
    uint32_t dtype;                 /* DLC__HD_UINT8, FLOAT32, FLOAT16 or BFLOAT16. */
    uint32_t layout;                /* DLC__HD_NHWC or DLC__HD_NCHW. */
    uint32_t value;                 /* DLC__HD_ERASE_*. */
    uint32_t per, stride;           /* Views of the output per sample; boxes per sample. */
    float constant[4];              /* DLC__HD_ERASE_CONSTANT: per channel (uint8: 0..255). */
} dlc__hd_erase;

/* The box of image @p img of @p er. */
DLC_HD const dlc__hd_erase_box *dlc__hd_erase_box_of(const dlc__hd_erase *er, uint64_t img)
{
    return &er->boxes[(img / er->per) * er->stride + img % er->per];
}

/* The value element @p j of a box (torch's order: channel, row, column) gets, as a float. */
DLC_HD float dlc__hd_erase_value(const dlc__hd_erase *er, const dlc__hd_erase_box *b, uint32_t ch,
                                 uint64_t j)
{
    if (er->value == DLC__HD_ERASE_NOISE)
        return dlc__hd_normal(b->key, j);
    return er->value == DLC__HD_ERASE_CONSTANT ? er->constant[ch] : 0.0f;
}

/* Element @p j (below c * box h * box w) of image @p img's box: written in dtype and layout. */
DLC_HD void dlc__hd_erase_at(const dlc__hd_erase *er, uint64_t img, uint64_t j)
{
    const dlc__hd_erase_box *b = dlc__hd_erase_box_of(er, img);
    const uint64_t area = (uint64_t)b->h * b->w;
    if (j >= area * er->c)
        return;
    const uint32_t ch = (uint32_t)(j / area);
    const uint64_t r = j - (uint64_t)ch * area;
    const uint32_t y = b->top + (uint32_t)(r / b->w), x = b->left + (uint32_t)(r % b->w);
    const uint64_t hw = (uint64_t)er->h * er->w;
    const uint64_t at =
        img * hw * er->c + (er->layout == DLC__HD_NCHW ? (uint64_t)ch * hw + (uint64_t)y * er->w + x
                                                       : ((uint64_t)y * er->w + x) * er->c + ch);
    const float v = dlc__hd_erase_value(er, b, ch, j);
    if (er->dtype == DLC__HD_UINT8)
        ((uint8_t *)er->data)[at] = (uint8_t)v;
    else if (er->dtype == DLC__HD_FLOAT32)
        ((float *)er->data)[at] = v;
    else
        ((uint16_t *)er->data)[at] = dlc__hd_f32_to_16(v, er->dtype);
}

/* The work items of image @p img: c x its box's area. */
DLC_HD uint64_t dlc__hd_erase_items(const dlc__hd_erase *er, uint64_t img)
{
    const dlc__hd_erase_box *b = dlc__hd_erase_box_of(er, img);
    return (uint64_t)b->h * b->w * er->c;
}

#endif /* DLCACHE_CONVERT_HD_H */
