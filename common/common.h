/* Private to libdlcache and its tools: the plumbing that every part uses, kept once, the way
 * zstd keeps lib/common and libuv uv-common.h. Nothing here is part of the public contract
 * (include/dlcache/); the parts reach this header through an include directory that CMake sets
 * for the library's own targets, the tools and the tests, never through a relative path.
 *
 * What lives here, and where its code is:
 *   - error detail and logging, CHECK/FAIL_IF, saving a message across cleanup (error.c);
 *   - little-endian loads and stores on unaligned bytes (inline);
 *   - the monotonic clock, the usable core count, syncing a directory (platform.c);
 *   - the counter-based random streams of the loader and the tools (inline, and rng.c);
 *   - IEEE binary16 conversion (half.c).
 * No function here allocates except dlc__fsync_dir and dlc__replace_file, and none keeps state
 * between calls. */
#ifndef DLCACHE_COMMON_H
#define DLCACHE_COMMON_H

#include <dlcache/status.h>

#include <stddef.h>
#include <stdint.h>

/* ---- Errors (error.c) --------------------------------------------------------------------------
 * One thread-local buffer for the whole library (dlc_errmsg()). */

/* Record a detail message for dlc_errmsg() and return @p status, so error paths read
 * `return dlc__errorf(DLC_ECORRUPT, "%s: record %llu: ...", ...)`. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
dlc_status
dlc__errorf(dlc_status status, const char *fmt, ...);
void dlc__clear_error(void);
/* Send a notice to @p log, if there is one. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
void dlc__logf(dlc_log_fn log, void *user, dlc_log_level level, const char *fmt, ...);

/* The message of a failure, kept while cleanup code runs calls that may overwrite it:
 *     dlc__errsave es; dlc__err_save(&es); ...cleanup...; return dlc__err_restore(&es, rc); */
typedef struct dlc__errsave {
    char msg[1024];
} dlc__errsave;
void dlc__err_save(dlc__errsave *es);
/* Put the saved message back and return @p status. */
dlc_status dlc__err_restore(const dlc__errsave *es, dlc_status status);

/* Propagate a failure to the `fail:` cleanup ladder, keeping its message. Needs a local
 * `dlc_status rc`. */
#define CHECK(expr)                                                                                \
    do {                                                                                           \
        rc = (expr);                                                                               \
        if (rc < 0)                                                                                \
            goto fail;                                                                             \
    } while (0)

/* Fail with @p code and a message when @p cond holds. */
#define FAIL_IF(cond, code, ...)                                                                   \
    do {                                                                                           \
        if (cond) {                                                                                \
            rc = dlc__errorf((code), __VA_ARGS__);                                                 \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* ---- Little-endian loads and stores on unaligned bytes -----------------------------------------
 * Bytes inside an LMDB map or a file have no alignment promise, so they are never cast to a
 * struct; these compile to single loads and stores on x86-64. */
static inline uint16_t dlc__ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}
static inline uint32_t dlc__ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t dlc__ld64(const uint8_t *p)
{
    return (uint64_t)dlc__ld32(p) | (uint64_t)dlc__ld32(p + 4) << 32;
}
static inline void dlc__st16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void dlc__st32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void dlc__st64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- Clock, cores, directories (platform.c) ----------------------------------------------------
 */

/* CLOCK_MONOTONIC in nanoseconds and in seconds. */
uint64_t dlc__now_ns(void);
double dlc__now_s(void);
/* Cores this process may run on (its affinity mask, else the online count); at least 1. */
uint32_t dlc__cpu_count(void);
/* fsync the directory that holds @p path, so that a rename or a create in it survives a crash.
 * EINVAL from fsync (a file system that cannot sync directories) is not an error. Returns
 * DLC_OK, -ENOMEM or -errno with the directory named. */
dlc_status dlc__fsync_dir(const char *path);
/* Replace @p path with the @p len bytes at @p p, all or nothing: PATH.tmp-PID written, fsynced,
 * renamed over @p path, the directory synced. A crash leaves the old file or the new one, and
 * the new one only once it is on disk; a failure removes the temporary file. Returns DLC_OK,
 * -ENOMEM or -errno with the file named. */
dlc_status dlc__replace_file(const char *path, const void *p, size_t len);

/* ---- Counter-based random streams (rng.c) ------------------------------------------------------
 * Every random choice of the loader is a pure function of a key made from (seed, epoch, position,
 * purpose) and a counter, so it does not depend on which thread asks or when. splitmix64's
 * finalizer is a bijection of 64-bit words with full avalanche, which is all a counter-based
 * generator needs. */

/* splitmix64: the finalizer applied to x + the golden-ratio increment. */
static inline uint64_t dlc__mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A key from four words; different argument orders give unrelated keys. */
static inline uint64_t dlc__key4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    uint64_t h = dlc__mix64(a ^ 0x6a09e667f3bcc909ull);
    h = dlc__mix64(h ^ b);
    h = dlc__mix64(h ^ c);
    return dlc__mix64(h ^ d);
}

/* Purposes that separate the loader's random streams (the first word of dlc__key4). */
enum {
    DLC__KEY_SHUFFLE = 1,  /**< The epoch's permutation. */
    DLC__KEY_GROUPS = 2,   /**< Quasi-random: order of groups. */
    DLC__KEY_WINDOW = 3,   /**< Quasi-random: order within a window. */
    DLC__KEY_WEIGHTED = 4, /**< Weighted draws. */
    DLC__KEY_AUGMENT = 5,  /**< Crop and flip of one sample. */
    DLC__KEY_REPLACE = 6,  /**< Choice of a replacement for a corrupt record. */
};

/* A counter-based stream: the n-th output is mix64(key ^ n * odd constant). */
typedef struct dlc__rng {
    uint64_t key;
    uint64_t ctr;
} dlc__rng;

static inline uint64_t dlc__rng_next(dlc__rng *r)
{
    r->ctr++;
    return dlc__mix64(r->key ^ (r->ctr * 0xd1b54a32d192ed03ull));
}

/* Uniform double in [0, 1) with 53 random bits. */
static inline double dlc__rng_uniform(dlc__rng *r)
{
    return (double)(dlc__rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n), n > 0, without modulo bias (Lemire's method). */
uint64_t dlc__rng_below(dlc__rng *r, uint64_t n);

/* ---- IEEE binary16 (half.c) --------------------------------------------------------------------
 */

/* Binary16 bits of @p f, rounded to nearest even (what torch's .half() does); NaN stays a quiet
 * NaN, values beyond the largest half become infinities. */
uint16_t dlc__f32_to_f16(float f);

#endif /* DLCACHE_COMMON_H */
