/* dlc__url_child(): a set's object URL from the set's URL, the one place it is built (issue 23).
 * "%s/%s" on an https URL with a query string put the name after the query ("...?token=T/name"),
 * which the server sees as part of the token and answers with the prefix or a refusal. */
#include "common.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Where @p base's path ends: at its first '?' or '#' for http(s) (RFC 3986: they cannot stand
 * in the authority or the path), at its end for object-store schemes, whose keys may hold both. */
static size_t path_end(const char *base)
{
    const size_t len = strlen(base);
    if (strncasecmp(base, "http://", 7) != 0 && strncasecmp(base, "https://", 8) != 0)
        return len;
    return strcspn(base, "?#");
}

size_t dlc__url_child(const char *base, const char *name, char *buf, size_t cap)
{
    const size_t end = path_end(base);
    size_t head = end;
    /* Keep the '/' of "scheme://" itself: only the path's trailing '/'s go. */
    const char *authority = strstr(base, "://");
    const size_t min =
        authority && (size_t)(authority - base) + 3 <= end ? (size_t)(authority - base) + 3 : 0;
    while (head > min && base[head - 1] == '/')
        head--;
    const int n = snprintf(buf, cap, "%.*s/%s%s", (int)head, base, name, base + end);
    return n < 0 ? cap : (size_t)n;
}
