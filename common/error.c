/* Status strings and the thread-local error detail shared by every part. */
#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The only mutable state of the library outside of handles: one message per
 * thread, so shared read-only handles can report errors without locking. */
static _Thread_local char dlc__msg[1024];

const char *dlc_version(void)
{
    return DLC_VERSION_STRING;
}

const char *dlc_strerror(dlc_status status)
{
    switch (status) {
    case DLC_OK:
        return "success";
    case DLC_END:
        return "end of epoch";
#define DLC__ERR_CASE(name, value, text)                                                           \
    case DLC_##name:                                                                               \
        return text;
        DLC_ERRORS(DLC__ERR_CASE)
#undef DLC__ERR_CASE
    default:
        break;
    }
    if (status < 0 && status > -4096) {
        /* strerrordesc_np() is thread-safe and allocation-free, unlike strerror(). */
        const char *s = strerrordesc_np(-status);
        if (s)
            return s;
    }
    return "unknown error";
}

const char *dlc_errmsg(void)
{
    return dlc__msg;
}

dlc_status dlc__errorf(dlc_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dlc__msg, sizeof dlc__msg, fmt, ap);
    va_end(ap);
    return status;
}

void dlc__clear_error(void)
{
    dlc__msg[0] = '\0';
}

void dlc__logf(dlc_log_fn log, void *user, dlc_log_level level, const char *fmt, ...)
{
    if (!log)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    log(user, level, line);
}

void dlc__err_save(dlc__errsave *es)
{
    snprintf(es->msg, sizeof es->msg, "%s", dlc__msg);
}

dlc_status dlc__err_restore(const dlc__errsave *es, dlc_status status)
{
    return dlc__errorf(status, "%s", es->msg);
}
