/* Private to the builder (cache/build_*.c). */
#ifndef DLCACHE_BUILD_INTERNAL_H
#define DLCACHE_BUILD_INTERNAL_H

#include <dlcache/build.h>
#include <dlcache/store.h>

#include <stddef.h>
#include <stdint.h>

/* The "build" metadata: a JSON object saying how the store was made.
 * Returns a malloc'd string, or NULL when out of memory. */
char *dlc__build_json(const char *const *sources, size_t nsources, const dlc_build_options *o,
                      uint32_t threads, uint64_t items, uint64_t count, uint64_t skipped,
                      double seconds);

/* Remove OUT.tmp-PID files (and OUT.tmp-PID-lock) whose process is gone: a
 * build killed with SIGKILL cannot clean up after itself. Best effort. */
void dlc__build_remove_stale_temps(const char *out, dlc_log_fn log, void *user);

/* Append a skipped item to @p r (its skips array has *cap entries). */
dlc_status dlc__report_add_skip(dlc_build_report *r, size_t *cap, const char *path,
                                const char *reason);

#endif /* DLCACHE_BUILD_INTERNAL_H */
