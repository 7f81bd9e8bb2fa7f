/* Manifest scan: one `PATH<TAB>LABEL` item per line, in file order.
 *
 * PATH is absolute or relative to the folder that holds the manifest (not to
 * the working directory, so a manifest can travel with its images). LABEL is
 * a decimal integer 0..2^24-1. The line is split at its last tab, so a path
 * may itself contain tabs. Blank lines (only spaces and tabs) and lines whose
 * first non-blank character is '#' are ignored; a CR before the newline is
 * dropped (manifests written on Windows). Anything else is an error that
 * names the manifest and the line: a build must not silently lose part of a
 * data set to a typo.
 */
#include "source.h"

#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Parse a whole decimal label with optional surrounding blanks. */
static int parse_label(const char *p, const char *end, int64_t *out)
{
    while (p < end && blank(*p))
        p++;
    while (end > p && blank(end[-1]))
        end--;
    if (p == end)
        return -1;
    int64_t v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
        if (v >= DLC__SOURCE_MAX_LABEL)
            return -1;
    }
    *out = v;
    return 0;
}

dlc_status dlc__source_scan_manifest(dlc__source_set *s, const char *mpath)
{
    dlc_status rc = DLC_OK;
    char *line = NULL, *full = NULL;
    size_t line_cap = 0, full_cap = 0;
    FILE *f = fopen(mpath, "re");
    FAIL_IF(!f, -errno, "%s: cannot open manifest: %s", mpath, strerror(errno));

    /* Relative paths are resolved against the manifest's folder. */
    const char *slash = strrchr(mpath, '/');
    const size_t base_len = slash ? (size_t)(slash - mpath) + 1 : 0;

    uint64_t lineno = 0;
    ssize_t n;
    errno = 0;
    while ((n = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        if (len && line[len - 1] == '\n')
            len--;
        if (len && line[len - 1] == '\r')
            len--;
        line[len] = '\0';
        FAIL_IF(memchr(line, '\0', len) != NULL, DLC_EINVAL,
                "%s:%llu: a NUL byte in the line (is this a manifest?)", mpath,
                (unsigned long long)lineno);
        size_t first = 0;
        while (first < len && blank(line[first]))
            first++;
        if (first == len || line[first] == '#')
            continue;
        char *tab = strrchr(line, '\t');
        FAIL_IF(!tab, DLC_EINVAL, "%s:%llu: expected PATH<TAB>LABEL, found no tab", mpath,
                (unsigned long long)lineno);
        int64_t label;
        FAIL_IF(parse_label(tab + 1, line + len, &label) != 0, DLC_EINVAL,
                "%s:%llu: the label '%s' is not an integer in 0..%lld", mpath,
                (unsigned long long)lineno, tab + 1, (long long)DLC__SOURCE_MAX_LABEL - 1);
        const size_t plen = (size_t)(tab - line);
        FAIL_IF(plen == 0, DLC_EINVAL, "%s:%llu: empty path", mpath, (unsigned long long)lineno);

        const size_t pre = line[0] == '/' ? 0 : base_len;
        if (pre + plen + 1 > full_cap) {
            full_cap = (pre + plen + 1) * 2;
            char *p = realloc(full, full_cap);
            FAIL_IF(!p, -ENOMEM, "%s: out of memory", mpath);
            full = p;
        }
        memcpy(full, mpath, pre);
        memcpy(full + pre, line, plen);
        dlc__item it = {.label = label, .shard = UINT32_MAX};
        CHECK(dlc__source_intern(s, full, pre + plen, &it.path));
        CHECK(dlc__source_push(s, &it));
    }
    FAIL_IF(ferror(f), -EIO, "%s: cannot read manifest", mpath);
    rc = DLC_OK;
fail:
    if (f)
        fclose(f);
    free(line);
    free(full);
    return rc;
}
