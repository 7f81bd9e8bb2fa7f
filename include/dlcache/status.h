/**
 * @file status.h
 * @brief Status codes, error text and logging shared by every dlcache part.
 *
 * Every call that can fail returns a ::dlc_status:
 *   - ::DLC_OK (0) on success;
 *   - a negated errno value (-ENOENT, -ENOSPC, ...) when the system said no;
 *   - one of the DLC_E* codes below (all <= -1000) for dlcache's own reasons.
 * A few calls also return small positive values that are not errors (for
 * example ::DLC_END from dlc_loader_next()); their documentation says so.
 *
 * The library never sets errno and never prints. When a call fails it leaves a
 * sentence naming the file, the record and the reason in a thread-local buffer
 * that dlc_errmsg() returns; notices that are not errors go to the log
 * callback that the caller passes in its options.
 *
 * How structs grow (the ABI rule of every struct that crosses the API; 1.0
 * is the first version that keeps it, tests/abi/ checks it). A struct grows
 * only at its end, starting at or after the previous sizeof (never in its
 * tail padding), so every version of it has its own size; the library
 * accepts exactly the sizes some header had (a table written when a version
 * is frozen, tests/abi/update.sh) and its own. Each struct follows one of
 * four rules:
 *
 * 1. Options (size-carried, in): ::dlc_loader_config, ::dlc_writer_config,
 *    ::dlc_build_options, ::dlc_warm_options, ::dlc_warm_push_options and
 *    every options struct added later open with `uint32_t struct_size`. Their
 *    _init() is a macro passing the caller's `sizeof *(c)` to an exported
 *    `_init_sized()` function, which writes the defaults but never past the
 *    caller's size and sets struct_size to it: fill one with its _init(),
 *    then set the fields you need. Each call that takes one checks
 *    struct_size first:
 *    - 0 (the struct was not filled by its _init()): DLC_EINVAL, naming the
 *      struct and its _init();
 *    - a size an older header gave it (a program built against that header):
 *      accepted; those bytes are taken over the library's defaults, so the
 *      fields that program does not know have their defaults;
 *    - larger than the library's (a newer header than the library it runs
 *      with), or no size the struct ever had (one cutting a field in half):
 *      DLC_EINVAL naming the struct.
 *    Structs that the caller passes in arrays (::dlc_field_spec,
 *    ::dlc_field_option, ::dlc_view_spec) carry no size of their own: the
 *    struct_size of the options that point to them says which header the
 *    caller had, so when one of them grows, the options that hold it grow in
 *    the same version. ::dlc_augment_spec, passed in an array too, opens with
 *    its own struct_size (the same in every entry), and the library steps
 *    through the array by it, so it grows on its own.
 * 2. Results the caller allocates and the library fills (size-carried, out):
 *    ::dlc_loader_stream_stats, ::dlc_loader_plan_info and every such result
 *    added later open with `uint32_t struct_size`, which the caller sets to
 *    its sizeof before the call; the library writes only that many bytes and
 *    refuses a size it does not know exactly as for options.
 * 3. Results with a reserved tail: ::dlc_loader_stats, ::dlc_warm_result,
 *    ::dlc_warm_push_result and ::dlc_set_join_report end with `reserved`
 *    words, which the library zeroes; a new field takes reserved words, so
 *    the struct's size never changes.
 * 4. Frozen until the soname changes: the structs handed out or walked in
 *    arrays on the hot paths and in stores' schemas (::dlc_batch,
 *    ::dlc_batch_field, ::dlc_device_batch, ::dlc_device_field,
 *    ::dlc_device_dst, ::dlc_record, ::dlc_value, ::dlc_field, ::dlc_image,
 *    ::dlc_resize_geometry): a caller indexes their arrays by its own sizeof
 *    or the library writes them whole, so they cannot grow within a major
 *    version.
 * What the library allocates and only lends by pointer for reading
 * (::dlc_store_info, ::dlc_build_report, ::dlc_build_progress,
 * ::dlc_verify_progress and the other progress structs) may grow at its end:
 * a caller reads the fields it knows and never copies or allocates one.
 */
#ifndef DLCACHE_STATUS_H
#define DLCACHE_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include <dlcache/version.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Marks the symbols that libdlcache exports; everything else is hidden. */
#if defined(__GNUC__)
#define DLC_API __attribute__((visibility("default")))
#else
#define DLC_API
#endif

/** 0, a negated errno value, or a DLC_E* code (see the file comment). */
typedef int dlc_status;

/** Success. */
#define DLC_OK 0
/** Not an error: the epoch (or the stream) has no more batches. */
#define DLC_END 1
/** Not an error: no batch was ready within dlc_loader_next_wait()'s wait; ask again. */
#define DLC_AGAIN 2

/**
 * dlcache's own error codes: XX(name, value, text). One list gives the enum
 * and the strings of dlc_strerror(), so the two cannot drift apart.
 */
#define DLC_ERRORS(XX)                                                                             \
    XX(EINVAL, -1000, "invalid argument")                                                          \
    XX(ECORRUPT, -1001, "corrupt data")                                                            \
    XX(EVERSION, -1002, "not a store in a format this library reads")                              \
    XX(ENOTFOUND, -1003, "not found")                                                              \
    XX(EDECODE, -1004, "image cannot be decoded")                                                  \
    XX(ENOIMAGES, -1005, "no valid image in the sources")                                          \
    XX(EEXIST, -1006, "destination exists")                                                        \
    XX(EHTTP, -1007, "the server refused the request")                                             \
    XX(ENETWORK, -1008, "network failure")                                                         \
    XX(ECHANGED, -1009, "the source changed while it was read")                                    \
    XX(ECANCELED, -1010, "canceled")                                                               \
    XX(ESTATE, -1011, "call not valid in the current state")                                       \
    XX(ECUDA, -1012, "CUDA error")                                                                 \
    XX(ENOSYS, -1013, "not supported on this system")

/** dlcache's own error codes, DLC_EINVAL (-1000) to DLC_ENOSYS (-1013), made from DLC_ERRORS:
 *  one enumerator DLC_<name> = value per entry, so the list above is their documentation. */
enum dlc_error_code {
#define DLC__ERR_ENUM(name, value, text) DLC_##name = (value),
    DLC_ERRORS(DLC__ERR_ENUM)
#undef DLC__ERR_ENUM
};

/**
 * @brief A short static description of @p status ("corrupt data", "No space
 *        left on device", ...).
 * @param[in] status Any value: ::DLC_OK, ::DLC_END, ::DLC_AGAIN, a negated errno value or a
 *            DLC_E* code.
 * @return A string owned by the library, never NULL, valid forever.
 * Thread safety: safe from any thread.
 */
DLC_API const char *dlc_strerror(dlc_status status);

/**
 * @brief The detail of the last failure on the calling thread: a sentence that
 *        names the file, the record and the reason.
 *
 * Read it right after a call that returned a failure (a negative status): that
 * call recorded it. A call that succeeds need not clear it, so after a success
 * it may be "" or still hold the message of an earlier failure; it is
 * meaningful after a failure only. (Clearing it in every call would add a
 * thread-local store to the hot paths, dlc_loader_next() and dlc_store_read(),
 * for a message nobody reads after a success.)
 * @return A thread-local string owned by the library, never NULL, valid until
 *         the next dlcache call on this thread.
 * Thread safety: each thread has its own; a failure on one thread never shows
 * in another's.
 */
DLC_API const char *dlc_errmsg(void);

/** Severity of a log notice. */
typedef enum dlc_log_level {
    DLC_LOG_DEBUG = 0,
    DLC_LOG_INFO = 1,
    DLC_LOG_WARN = 2,
} dlc_log_level;

/**
 * Log callback. @p msg is a full sentence without a trailing newline, valid
 * only during the call. It may be called from any of the library's threads,
 * so it must be thread-safe. NULL callbacks mean "stay silent".
 */
typedef void (*dlc_log_fn)(void *user, dlc_log_level level, const char *msg);

/** The library's version, as text.
 *  @return "MAJOR.MINOR.PATCH" in static storage; never NULL, cannot fail. */
DLC_API const char *dlc_version(void);

/** The version of the library the program runs with, as a number to compare with
 *  ::DLC_VERSION_NUMBER (the version of the header it was built with).
 *  @return MAJOR * 10000 + MINOR * 100 + PATCH (10000 for 1.0.0); cannot fail. */
DLC_API uint32_t dlc_version_number(void);

#ifdef __cplusplus
}
#endif
#endif /* DLCACHE_STATUS_H */
