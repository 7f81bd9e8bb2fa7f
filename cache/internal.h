/* Private to cache/: helpers shared by the store, codec, builder and warmup. */
#ifndef DLCACHE_CACHE_INTERNAL_H
#define DLCACHE_CACHE_INTERNAL_H

#include <dlcache/status.h>

/* Record a detail message for dlc_errmsg() and return @p status, so error
 * paths read `return dlc__errorf(DLC_ECORRUPT, "%s: record %llu: ...", ...)`. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
dlc_status dlc__errorf(dlc_status status, const char *fmt, ...);
void dlc__clear_error(void);
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
void dlc__logf(dlc_log_fn log, void *user, dlc_log_level level, const char *fmt, ...);

/* Propagate a failure to the `fail:` cleanup ladder, keeping its message. */
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

#endif /* DLCACHE_CACHE_INTERNAL_H */
