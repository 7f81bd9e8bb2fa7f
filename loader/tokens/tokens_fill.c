/* The copies that bound the concat loader (tokens_loader.c): a document's piece of stored tokens
 * (uint16 or 32-bit, little-endian like the host) widened into a row's input_ids and labels in
 * one read pass, and the position ids of a run. Plain C that the compiler vectorizes for any
 * target, and AVX2 versions chosen once at open when the CPU has it. No branch per token: the
 * two ends of a piece are the only scalar steps besides the vector loops' tails. */
#include "tokens_internal.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TF_X86 1
#define TF_AVX2 __attribute__((target("avx2")))
#endif

/* A piece's tokens src[0..n) sit at window positions at .. at + n - 1 of a window of S + 1
 * positions: input j is position j (j < S), label j is position j + 1. So token i of the piece
 * is input at + i when at + i < S and label at + i - 1 when at + i >= 1. The fused loops cover
 * the positions that are both, [lo, hi); the first position of the window is an input only and
 * the last a label only. */
#define PIECE_RANGE                                                                                \
    const uint32_t lo = at > 0 ? at : 1;                                                           \
    const uint32_t end = at + n, hi = end < S ? end : S;                                           \
    const int first_in = at == 0, last_label = end == S + 1

/* ---- Portable ---------------------------------------------------------------------------- */

/* Token @p i of a payload that may be unaligned for its element type (a small record's value):
 * memcpy, which compilers turn into plain loads and vectorize. */
static inline uint32_t LD_uint16_t(const uint8_t *p, uint32_t i)
{
    uint16_t v;
    memcpy(&v, p + (size_t)i * 2, 2);
    return v;
}

static inline uint32_t LD_uint32_t(const uint8_t *p, uint32_t i)
{
    uint32_t v;
    memcpy(&v, p + (size_t)i * 4, 4);
    return v;
}

/* The positions [J, hi) one by one, then the window's two ends: all of a portable piece, and
 * the tail after an AVX2 piece's vector loop. */
#define PIECE_FINISH(SRC_T, OUT_T, J)                                                              \
    do {                                                                                           \
        for (uint32_t j_ = (J); j_ < hi; j_++) {                                                   \
            const OUT_T v_ = (OUT_T)LD_##SRC_T(src8, j_ - at);                                     \
            in[j_] = v_;                                                                           \
            lab[j_ - 1] = v_;                                                                      \
        }                                                                                          \
        if (first_in)                                                                              \
            in[0] = (OUT_T)LD_##SRC_T(src8, 0);                                                    \
        if (last_label)                                                                            \
            lab[S - 1] = (OUT_T)LD_##SRC_T(src8, S - at);                                          \
    } while (0)

#define PLAIN_PIECE(NAME, SRC_T, OUT_T)                                                            \
    static void NAME(const uint8_t *src8, uint32_t at, uint32_t n, uint32_t S, void *in_v,         \
                     void *lab_v)                                                                  \
    {                                                                                              \
        PIECE_RANGE;                                                                               \
        OUT_T *restrict in = in_v;                                                                 \
        OUT_T *restrict lab = lab_v;                                                               \
        PIECE_FINISH(SRC_T, OUT_T, lo);                                                            \
    }

PLAIN_PIECE(piece_u16_i64, uint16_t, int64_t)
PLAIN_PIECE(piece_u16_i32, uint16_t, int32_t)
PLAIN_PIECE(piece_u32_i64, uint32_t, int64_t)
PLAIN_PIECE(piece_u32_i32, uint32_t, int32_t)

static void run_i64(void *pos_v, uint32_t n)
{
    int64_t *restrict pos = pos_v;
    for (uint32_t j = 0; j < n; j++)
        pos[j] = j;
}

static void run_i32(void *pos_v, uint32_t n)
{
    int32_t *restrict pos = pos_v;
    for (uint32_t j = 0; j < n; j++)
        pos[j] = (int32_t)j;
}

/* ---- AVX2 ---------------------------------------------------------------------------------- */

#ifdef TF_X86
/* uint16 -> int64: 8 tokens a step, one 16-byte load, two 32-byte stores to each output. */
static TF_AVX2 void piece_u16_i64_avx2(const uint8_t *src8, uint32_t at, uint32_t n, uint32_t S,
                                       void *in_v, void *lab_v)
{
    PIECE_RANGE;
    int64_t *restrict in = in_v;
    int64_t *restrict lab = lab_v;
    uint32_t j = lo;
    for (; j + 8 <= hi; j += 8) {
        const __m128i a =
            _mm_loadu_si128((const __m128i *)(const void *)(src8 + (size_t)(j - at) * 2));
        const __m256i v0 = _mm256_cvtepu16_epi64(a);
        const __m256i v1 = _mm256_cvtepu16_epi64(_mm_unpackhi_epi64(a, a));
        _mm256_storeu_si256((__m256i *)(void *)(in + j), v0);
        _mm256_storeu_si256((__m256i *)(void *)(in + j + 4), v1);
        _mm256_storeu_si256((__m256i *)(void *)(lab + j - 1), v0);
        _mm256_storeu_si256((__m256i *)(void *)(lab + j + 3), v1);
    }
    PIECE_FINISH(uint16_t, int64_t, j);
}

/* uint16 -> int32: 8 tokens a step, one 16-byte load, one 32-byte store to each output. */
static TF_AVX2 void piece_u16_i32_avx2(const uint8_t *src8, uint32_t at, uint32_t n, uint32_t S,
                                       void *in_v, void *lab_v)
{
    PIECE_RANGE;
    int32_t *restrict in = in_v;
    int32_t *restrict lab = lab_v;
    uint32_t j = lo;
    for (; j + 8 <= hi; j += 8) {
        const __m256i v = _mm256_cvtepu16_epi32(
            _mm_loadu_si128((const __m128i *)(const void *)(src8 + (size_t)(j - at) * 2)));
        _mm256_storeu_si256((__m256i *)(void *)(in + j), v);
        _mm256_storeu_si256((__m256i *)(void *)(lab + j - 1), v);
    }
    PIECE_FINISH(uint16_t, int32_t, j);
}

/* 32-bit ids -> int64 (zero-extended, as the portable loop does): 4 tokens a step. */
static TF_AVX2 void piece_u32_i64_avx2(const uint8_t *src8, uint32_t at, uint32_t n, uint32_t S,
                                       void *in_v, void *lab_v)
{
    PIECE_RANGE;
    int64_t *restrict in = in_v;
    int64_t *restrict lab = lab_v;
    uint32_t j = lo;
    for (; j + 4 <= hi; j += 4) {
        const __m256i v = _mm256_cvtepu32_epi64(
            _mm_loadu_si128((const __m128i *)(const void *)(src8 + (size_t)(j - at) * 4)));
        _mm256_storeu_si256((__m256i *)(void *)(in + j), v);
        _mm256_storeu_si256((__m256i *)(void *)(lab + j - 1), v);
    }
    PIECE_FINISH(uint32_t, int64_t, j);
}

static TF_AVX2 void run_i64_avx2(void *pos_v, uint32_t n)
{
    int64_t *restrict pos = pos_v;
    __m256i v = _mm256_setr_epi64x(0, 1, 2, 3);
    const __m256i four = _mm256_set1_epi64x(4);
    uint32_t j = 0;
    for (; j + 4 <= n; j += 4) {
        _mm256_storeu_si256((__m256i *)(void *)(pos + j), v);
        v = _mm256_add_epi64(v, four);
    }
    for (; j < n; j++)
        pos[j] = j;
}

static TF_AVX2 void run_i32_avx2(void *pos_v, uint32_t n)
{
    int32_t *restrict pos = pos_v;
    __m256i v = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i eight = _mm256_set1_epi32(8);
    uint32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        _mm256_storeu_si256((__m256i *)(void *)(pos + j), v);
        v = _mm256_add_epi32(v, eight);
    }
    for (; j < n; j++)
        pos[j] = (int32_t)j;
}
#endif

void dlc__tl_kernels_pick(dlc__tl_kernels *k, int u16, size_t esize, int portable)
{
    k->piece = u16 ? (esize == 8 ? piece_u16_i64 : piece_u16_i32)
                   : (esize == 8 ? piece_u32_i64 : piece_u32_i32);
    k->run = esize == 8 ? run_i64 : run_i32;
    k->avx2 = 0;
#ifdef TF_X86
    /* 32-bit ids into int32 are two memcpy-like loops already; everything else widens. */
    if (!portable && __builtin_cpu_supports("avx2")) {
        k->avx2 = 1;
        if (u16)
            k->piece = esize == 8 ? piece_u16_i64_avx2 : piece_u16_i32_avx2;
        else if (esize == 8)
            k->piece = piece_u32_i64_avx2;
        k->run = esize == 8 ? run_i64_avx2 : run_i32_avx2;
    }
#else
    (void)portable;
#endif
}
