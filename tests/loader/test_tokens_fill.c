/* The concat loader's copy kernels (loader/tokens/tokens_fill.c): every piece of a window, at
 * every position and length, from an unaligned payload, gives the inputs and labels a scalar
 * reference gives, in the portable and the AVX2 versions, for uint16 and 32-bit ids into int64
 * and int32; runs of position ids count from 0; nothing outside the piece's cells is written. */
#include "tokens/tokens_internal.h"

#include <criterion/criterion.h>
#include <string.h>

#define S 37u
#define GUARD 0x5a5a5a5a5a5a5a5aull

/* The stored tokens: ids with high bits set (so a sign-extension shows), one byte off alignment.
 */
static void payload(uint8_t *buf, int u16, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t v = u16 ? 0xff00u + i * 131u % 256u : 0xfffff000u + i * 7919u % 4096u;
        if (u16) {
            const uint16_t w = (uint16_t)v;
            memcpy(buf + 1 + 2 * i, &w, 2);
        } else {
            memcpy(buf + 1 + 4 * i, &v, 4);
        }
    }
}

static int64_t token(const uint8_t *buf, int u16, uint32_t i)
{
    if (u16) {
        uint16_t w;
        memcpy(&w, buf + 1 + 2 * i, 2);
        return w;
    }
    uint32_t v;
    memcpy(&v, buf + 1 + 4 * i, 4);
    return v;
}

static int64_t cell(const uint8_t *base, size_t es, size_t i)
{
    if (es == 8) {
        int64_t v;
        memcpy(&v, base + i * 8, 8);
        return v;
    }
    int32_t v;
    memcpy(&v, base + i * 4, 4);
    return (int64_t)(uint32_t)v; /* The ids are below 2^32: compare them unsigned. */
}

static void check_kernels(int u16, size_t es, int portable)
{
    dlc__tl_kernels k;
    dlc__tl_kernels_pick(&k, u16, es, portable);
    if (!portable && !k.avx2)
        cr_skip_test("this CPU has no AVX2: the portable kernels are the only ones");
    uint8_t src[1 + 4 * (S + 1)];
    payload(src, u16, S + 1);
    /* One cell of guard on each side of a row. */
    uint64_t in[S + 2], lab[S + 2];
    for (uint32_t at = 0; at <= S; at++) {
        for (uint32_t n = 1; at + n <= S + 1; n++) {
            memset(in, 0x5a, sizeof in);
            memset(lab, 0x5a, sizeof lab);
            uint8_t *in0 = (uint8_t *)(in + 1), *lab0 = (uint8_t *)(lab + 1);
            k.piece(src + 1 + (size_t)at * (u16 ? 2 : 4), at, n, S, in0, lab0);
            /* Token i of the piece is token at + i of the payload (the piece starts at its at). */
            for (uint32_t j = 0; j < S; j++) {
                const int has_in = j >= at && j < at + n, has_lab = j + 1 >= at && j + 1 < at + n;
                if (has_in)
                    cr_assert_eq(cell(in0, es, j), token(src, u16, j), "at %u n %u input %u", at, n,
                                 j);
                if (has_lab)
                    cr_assert_eq(cell(lab0, es, j), token(src, u16, j + 1), "at %u n %u label %u",
                                 at, n, j);
            }
            /* Cells outside the piece keep the guard bytes. */
            for (uint32_t j = 0; j < S; j++) {
                const int has_in = j >= at && j < at + n, has_lab = j + 1 >= at && j + 1 < at + n;
                if (!has_in)
                    cr_assert_eq(memcmp(in0 + j * es, (const uint8_t *)&in[0], es), 0,
                                 "at %u n %u: input %u written", at, n, j);
                if (!has_lab)
                    cr_assert_eq(memcmp(lab0 + j * es, (const uint8_t *)&lab[0], es), 0,
                                 "at %u n %u: label %u written", at, n, j);
            }
            cr_assert_eq(in[0], GUARD);
            cr_assert_eq(lab[0], GUARD);
            cr_assert_eq(memcmp((uint8_t *)(in + 1) + S * es, (const uint8_t *)&in[0], es), 0);
            cr_assert_eq(memcmp((uint8_t *)(lab + 1) + S * es, (const uint8_t *)&lab[0], es), 0);
        }
    }
    for (uint32_t n = 0; n <= S; n++) {
        uint64_t pos[S + 1];
        memset(pos, 0x5a, sizeof pos);
        k.run(pos, n);
        for (uint32_t j = 0; j < n; j++)
            cr_assert_eq(cell((const uint8_t *)pos, es, j), j, "run of %u: cell %u", n, j);
        cr_assert_eq(memcmp((uint8_t *)pos + n * es, (const uint8_t *)&in[0], es), 0,
                     "run of %u writes past its end", n);
    }
}

Test(tokens_fill, u16_to_int64)
{
    check_kernels(1, 8, 1);
    check_kernels(1, 8, 0);
}

Test(tokens_fill, u16_to_int32)
{
    check_kernels(1, 4, 1);
    check_kernels(1, 4, 0);
}

Test(tokens_fill, u32_to_int64)
{
    check_kernels(0, 8, 1);
    check_kernels(0, 8, 0);
}

Test(tokens_fill, u32_to_int32)
{
    check_kernels(0, 4, 1);
    check_kernels(0, 4, 0);
}
