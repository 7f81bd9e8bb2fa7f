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

#endif /* DLCACHE_CONVERT_HD_H */
