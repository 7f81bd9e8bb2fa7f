/* The one check of a public options struct at a call's entry (include/dlcache/status.h, "How
 * options grow"): every such struct opens with its uint32_t struct_size, set by its _init(), and
 * every call that takes one passes it here before reading a field. A caller built against an
 * older header gives fewer bytes; they are copied over this library's defaults, so the fields it
 * did not know keep their defaults. */
#include "common.h"

#include <string.h>

dlc_status dlc__options_take(void *dst, size_t size, const void *src, const char *type,
                             const char *init)
{
    /* memcpy: the caller's struct has the struct's alignment, but this reads it as bytes. */
    uint32_t given;
    memcpy(&given, src, sizeof given);
    if (given == 0)
        return dlc__errorf(DLC_EINVAL,
                           "%s: struct_size is 0: start from %s(), which sets it and the defaults",
                           type, init);
    if (given > size)
        return dlc__errorf(DLC_EINVAL,
                           "%s: struct_size is %u bytes, more than the %zu of this library's: the "
                           "program was built against a newer dlcache header than the library "
                           "it runs with",
                           type, given, size);
    /* Every size a header ever gave is a sizeof of a struct that opens with a uint32_t and has
     * more after it; anything else is not one (memory that no _init() set). */
    if (given < 2 * sizeof(uint32_t) || given % sizeof(uint32_t) != 0)
        return dlc__errorf(DLC_EINVAL,
                           "%s: struct_size %u is no size it ever had: start from %s(), which "
                           "sets it",
                           type, given, init);
    memcpy(dst, src, given);
    const uint32_t now = (uint32_t)size;
    memcpy(dst, &now, sizeof now);
    return DLC_OK;
}
