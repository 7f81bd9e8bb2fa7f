/* The growth rule of the public structs that carry their size (include/dlcache/status.h, "How
 * structs grow"), applied in one place each way:
 *   - dlc__options_init(): an options struct's _init() writes the defaults into the caller's
 *     struct, never past the caller's size;
 *   - dlc__options_take(): a call that takes options checks struct_size and copies the caller's
 *     bytes over this library's defaults;
 *   - dlc__result_give(): a call that fills a result copies out as many bytes as the caller's
 *     struct_size says, never more.
 * A struct_size is accepted when it is this library's sizeof or a size that some released header
 * gave the struct (abi_sizes.h, written by tests/abi/update.sh); anything else (memory that no
 * _init() set, a size cutting a field in half) is DLC_EINVAL naming the struct. */
#include "abi_sizes.h"
#include "common.h"

#include <stdio.h>
#include <string.h>

/* Every (type, size) a released header had, from abi_sizes.h. The sizes there are those of the
 * LP64 Linux ABI the table was made on; elsewhere only this library's own sizes are accepted. */
typedef struct {
    const char *type;
    uint32_t size;
} known_size;
#if UINTPTR_MAX == UINT64_MAX && defined(__linux__)
#define DLC__KNOWN_ROW(type, version, size) {#type, size},
static const known_size known[] = {DLC__ABI_SIZES(DLC__KNOWN_ROW){NULL, 0}};
#undef DLC__KNOWN_ROW
#else
static const known_size known[] = {{NULL, 0}};
#endif

/* DLC_OK when @p given is a size the struct @p type had (@p size is this library's sizeof): its
 * own, or one of @p older (0-terminated), or with @p older NULL one of the table's. */
static dlc_status check_size(uint32_t given, size_t size, const char *type, const char *init,
                             const uint32_t *older)
{
    if (given == 0)
        return dlc__errorf(DLC_EINVAL, "%s: struct_size is 0: %s, which sets it", type, init);
    if (given > size)
        return dlc__errorf(DLC_EINVAL,
                           "%s: struct_size is %u bytes, more than the %zu of this library's: the "
                           "program was built against a newer dlcache header than the library "
                           "it runs with",
                           type, given, size);
    if (given == size)
        return DLC_OK;
    if (older) {
        for (const uint32_t *o = older; *o; o++)
            if (*o == given)
                return DLC_OK;
    } else {
        for (const known_size *k = known; k->type; k++)
            if (k->size == given && strcmp(k->type, type) == 0)
                return DLC_OK;
    }
    return dlc__errorf(DLC_EINVAL,
                       "%s: struct_size %u is no size this struct had in any dlcache header "
                       "(this library's is %zu): %s, which sets it",
                       type, given, size, init);
}

void dlc__options_init(void *dst, size_t dst_size, const void *defaults, size_t size)
{
    /* Too small to hold even struct_size: nothing can be written safely. */
    if (!dst || dst_size < sizeof(uint32_t))
        return;
    const size_t n = dst_size < size ? dst_size : size;
    memcpy(dst, defaults, n);
    /* Fields of a newer header than this library: zero, and the struct_size below makes every
     * call refuse the struct, naming both sizes. */
    if (dst_size > n)
        memset((char *)dst + n, 0, dst_size - n);
    const uint32_t given = dst_size > UINT32_MAX ? UINT32_MAX : (uint32_t)dst_size;
    memcpy(dst, &given, sizeof given);
}

dlc_status dlc__options_take(void *dst, size_t size, const void *src, const char *type,
                             const char *init)
{
    return dlc__options_take_as(dst, size, src, type, init, NULL);
}

dlc_status dlc__options_take_as(void *dst, size_t size, const void *src, const char *type,
                                const char *init, const uint32_t *older)
{
    /* memcpy: the caller's struct has the struct's alignment, but this reads it as bytes. */
    uint32_t given;
    memcpy(&given, src, sizeof given);
    char how[96];
    snprintf(how, sizeof how, "start from %s()", init);
    const dlc_status rc = check_size(given, size, type, how, older);
    if (rc != DLC_OK)
        return rc;
    memcpy(dst, src, given);
    const uint32_t now = (uint32_t)size;
    memcpy(dst, &now, sizeof now);
    return DLC_OK;
}

dlc_status dlc__result_give(void *dst, const void *src, size_t size, const char *type)
{
    return dlc__result_give_as(dst, src, size, type, NULL);
}

dlc_status dlc__result_give_as(void *dst, const void *src, size_t size, const char *type,
                               const uint32_t *older)
{
    uint32_t given;
    memcpy(&given, dst, sizeof given);
    char how[96];
    snprintf(how, sizeof how, "set it to sizeof(%s) before the call", type);
    const dlc_status rc = check_size(given, size, type, how, older);
    if (rc != DLC_OK)
        return rc;
    /* The caller's struct_size stays: it is the caller's, and says what it can read. */
    memcpy((char *)dst + sizeof given, (const char *)src + sizeof given, given - sizeof given);
    return DLC_OK;
}
