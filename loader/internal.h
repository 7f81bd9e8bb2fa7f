/* Private to loader/. */
#ifndef DLCACHE_LOADER_INTERNAL_H
#define DLCACHE_LOADER_INTERNAL_H

#include <dlcache/status.h>

/* The error-detail helpers live in cache/error.c (one thread-local buffer for
 * the whole library); loader/ may not include cache/ headers, so the two
 * prototypes are repeated here. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
dlc_status dlc__errorf(dlc_status status, const char *fmt, ...);
void dlc__clear_error(void);
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
void dlc__logf(dlc_log_fn log, void *user, dlc_log_level level, const char *fmt, ...);

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        rc = (expr);                                                                               \
        if (rc < 0)                                                                                \
            goto fail;                                                                             \
    } while (0)

#define FAIL_IF(cond, code, ...)                                                                   \
    do {                                                                                           \
        if (cond) {                                                                                \
            rc = dlc__errorf((code), __VA_ARGS__);                                                 \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

#endif /* DLCACHE_LOADER_INTERNAL_H */
