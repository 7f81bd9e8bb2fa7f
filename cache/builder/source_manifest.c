/* Manifest scan: one item per line, in file order.
 *
 * Without a header a manifest is today's `PATH<TAB>LABEL` lines. PATH is absolute or relative
 * to the folder that holds the manifest (not to the working directory, so a manifest can travel
 * with its images). LABEL is a decimal integer 0..2^24-1. The line is split at its last tab, so
 * a path may itself contain tabs. Blank lines (only spaces and tabs) and lines whose first
 * non-blank character is '#' are ignored; a CR before the newline is dropped (manifests written
 * on Windows). Anything else is an error that names the manifest and the line: a build must not
 * silently lose part of a data set to a typo.
 *
 * Named columns. A line that starts with `#columns:` before the first item names the columns:
 *
 *     #columns: path label labels weight bbox:floats
 *
 * The names are separated by blanks; the first is `path`. Each other column becomes a field of
 * the store with its name ([A-Za-z_][A-Za-z0-9_]*, at most 31 characters, unique; not image or
 * mask, the builder's own fields). A type may follow the name after a colon; without one, the
 * name decides:
 *   label  (or NAME:label) the store's label: an integer 0..2^24-1 (at most one such column);
 *   labels (or NAME:ints)  integers, comma-separated, any number of them (none: an empty cell):
 *                          an int64 ndarray field whose length varies per record;
 *   NAME:floats            numbers the same way: a float64 ndarray field;
 *   NAME:int, NAME:float   one int64, one float64;
 *   NAME                   one number: the field is int64 when every value of the column is an
 *                          integer, else float64.
 * Each line then has exactly as many cells, tab-separated; it is split at its last tabs, so a
 * path may still contain tabs. A cell that is not what its column holds is an error naming the
 * manifest, the line and the column. Several manifests (and tar shards) of one build must have
 * the same columns; a manifest without a header has the columns `path label`. */
#include "source.h"

#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER "#columns:"
/* A number longer than this is no number. */
#define MAX_NUMBER 64

static int blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Trim blanks at both ends of [*p, *end). */
static void trim(const char **p, const char **end)
{
    while (*p < *end && blank(**p))
        (*p)++;
    while (*end > *p && blank((*end)[-1]))
        (*end)--;
}

/* Parse a whole decimal label with optional surrounding blanks. */
static int parse_label(const char *p, const char *end, int64_t *out)
{
    trim(&p, &end);
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

/* A whole int64: optional sign, decimal digits, optional surrounding blanks. */
static int parse_int(const char *p, const char *end, int64_t *out)
{
    trim(&p, &end);
    const int neg = p < end && *p == '-';
    if (p < end && (*p == '-' || *p == '+'))
        p++;
    if (p == end)
        return -1;
    uint64_t v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        const uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (v > (uint64_t)INT64_MAX + (uint64_t)neg)
        return -1;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* A whole number as strtod() reads it (C locale), with optional surrounding blanks. */
static int parse_float(const char *p, const char *end, double *out)
{
    trim(&p, &end);
    char num[MAX_NUMBER + 1];
    const size_t n = (size_t)(end - p);
    if (n == 0 || n > MAX_NUMBER)
        return -1;
    memcpy(num, p, n);
    num[n] = '\0';
    char *e;
    const double v = strtod(num, &e);
    if (*e != '\0')
        return -1;
    *out = v;
    return 0;
}

static uint64_t float_bits(double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

/* ---- The header ------------------------------------------------------------------------------ */

static int valid_name(const char *p, size_t n)
{
    if (n == 0 || n > 31 || (*p >= '0' && *p <= '9'))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!(p[i] == '_' || (p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'z') ||
              (p[i] >= 'A' && p[i] <= 'Z')))
            return 0;
    return 1;
}

/* The kind a column's type word (after its colon) or, without one, its name gives. */
static uint32_t column_kind(const char *name, const char *type, size_t tlen)
{
    static const char *const types[] = {"label", "int", "float", "ints", "floats"};
    static const uint32_t kinds[] = {DLC__COL_LABEL, DLC__COL_INT, DLC__COL_FLOAT, DLC__COL_INTS,
                                     DLC__COL_FLOATS};
    if (!type)
        return strcmp(name, "label") == 0    ? DLC__COL_LABEL
               : strcmp(name, "labels") == 0 ? DLC__COL_INTS
                                             : DLC__COL_NUMBER;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strlen(types[i]) == tlen && memcmp(type, types[i], tlen) == 0)
            return kinds[i];
    return 0;
}

/* One column word NAME[:TYPE] of the header into @p col. */
static dlc_status parse_column(const char *mpath, unsigned long long lineno, const char *w,
                               size_t n, const dlc__column *cols, uint32_t ncols, dlc__column *col)
{
    const char *colon = memchr(w, ':', n);
    const size_t nlen = colon ? (size_t)(colon - w) : n;
    if (!valid_name(w, nlen))
        return dlc__errorf(DLC_EINVAL,
                           "%s:%llu: column name '%.*s' is not 1 to 31 of [A-Za-z0-9_] starting "
                           "with a letter or '_'",
                           mpath, lineno, (int)nlen, w);
    memcpy(col->name, w, nlen);
    col->name[nlen] = '\0';
    if (!strcmp(col->name, "path") || !strcmp(col->name, "image") || !strcmp(col->name, "mask"))
        return dlc__errorf(DLC_EINVAL,
                           "%s:%llu: a column cannot be named '%s' (path comes first; image and "
                           "mask are the builder's own fields)",
                           mpath, lineno, col->name);
    for (uint32_t c = 0; c < ncols; c++)
        if (strcmp(cols[c].name, col->name) == 0)
            return dlc__errorf(DLC_EINVAL, "%s:%llu: column '%s' is named twice", mpath, lineno,
                               col->name);
    col->kind = column_kind(col->name, colon ? colon + 1 : NULL, colon ? n - nlen - 1 : 0);
    if (!col->kind)
        return dlc__errorf(DLC_EINVAL,
                           "%s:%llu: column '%.*s': unknown type (label, int, float, ints or "
                           "floats)",
                           mpath, lineno, (int)n, w);
    for (uint32_t c = 0; c < ncols; c++)
        if (col->kind == DLC__COL_LABEL && cols[c].kind == DLC__COL_LABEL)
            return dlc__errorf(DLC_EINVAL, "%s:%llu: two label columns ('%s' and '%s')", mpath,
                               lineno, cols[c].name, col->name);
    return DLC_OK;
}

/* The `#columns:` line @p line into the set's columns. */
static dlc_status parse_header(dlc__source_set *s, const char *mpath, unsigned long long lineno,
                               const char *line)
{
    dlc__column cols[DLC__SOURCE_MAX_COLS + 1];
    uint32_t n = 0;
    int seen_path = 0;
    const char *p = line + strlen(HEADER);
    for (;;) {
        while (blank(*p))
            p++;
        if (!*p)
            break;
        const char *w = p;
        while (*p && !blank(*p))
            p++;
        const size_t len = (size_t)(p - w);
        if (!seen_path) {
            if (len != 4 || memcmp(w, "path", 4) != 0)
                return dlc__errorf(DLC_EINVAL,
                                   "%s:%llu: the first column must be 'path', not "
                                   "'%.*s'",
                                   mpath, lineno, (int)len, w);
            seen_path = 1;
            continue;
        }
        if (n == DLC__SOURCE_MAX_COLS)
            return dlc__errorf(DLC_EINVAL, "%s:%llu: more than %u columns besides the path", mpath,
                               lineno, DLC__SOURCE_MAX_COLS);
        const dlc_status rc = parse_column(mpath, lineno, w, len, cols, n, &cols[n]);
        if (rc < 0)
            return rc;
        n++;
    }
    if (!seen_path)
        return dlc__errorf(DLC_EINVAL,
                           "%s:%llu: '" HEADER "' names no column (the first is 'path')", mpath,
                           lineno);
    return dlc__source_set_columns(s, mpath, cols, n);
}

/* ---- Lines ----------------------------------------------------------------------------------- */

/* One manifest being read. */
typedef struct mscan {
    dlc__source_set *s;
    const char *mpath;
    unsigned long long lineno;
    int header;      /* the manifest has a `#columns:` line */
    size_t base_len; /* bytes of the manifest's folder, slash included */
    char *full;      /* the item's path, resolved against the manifest's folder */
    size_t full_cap;
} mscan;

/* An error about cell @p c of the line. */
static dlc_status bad_cell(const mscan *m, uint32_t c, const char *p, const char *end,
                           const char *what)
{
    trim(&p, &end);
    return dlc__errorf(DLC_EINVAL, "%s:%llu: column %u (%s): '%.*s'%s is not %s", m->mpath,
                       m->lineno, c + 2, m->s->cols[c].name, (int)(end - p > 64 ? 64 : end - p), p,
                       end - p > 64 ? "..." : "", what);
}

/* A NUMBER column's cells so far become float64: a value that is not an integer came. */
static void column_to_float(dlc__source_set *s, dlc__column *col)
{
    for (size_t i = 0; i < s->count; i++) {
        uint64_t *cell = &s->cells[i * s->nscalars + col->index];
        *cell = float_bits((double)(int64_t)*cell);
    }
    col->is_float = 1;
}

/* One scalar cell of column @p c into @p bits. */
static dlc_status scalar_cell(const mscan *m, uint32_t c, const char *p, const char *end,
                              uint64_t *bits)
{
    dlc__column *col = &m->s->cols[c];
    int64_t i;
    double f;
    if (col->kind == DLC__COL_INT) {
        if (parse_int(p, end, &i) != 0)
            return bad_cell(m, c, p, end, "an integer (int64)");
        *bits = (uint64_t)i;
    } else if (!col->is_float && parse_int(p, end, &i) == 0) {
        *bits = (uint64_t)i;
    } else if (parse_float(p, end, &f) == 0) {
        if (!col->is_float)
            column_to_float(m->s, col);
        *bits = float_bits(f);
    } else {
        return bad_cell(m, c, p, end, "a number");
    }
    return DLC_OK;
}

/* One list cell of column @p c: its comma-separated values appended to the set's list values. */
static dlc_status list_cell(const mscan *m, uint32_t c, const char *cell, const char *cell_end)
{
    dlc__source_set *s = m->s;
    const int flt = s->cols[c].kind == DLC__COL_FLOATS;
    const char *p = cell, *end = cell_end;
    trim(&p, &end);
    for (uint32_t k = 1; p < end; k++) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        int64_t i = 0;
        double f = 0;
        if (flt ? parse_float(p, e, &f) != 0 : parse_int(p, e, &i) != 0) {
            char what[96];
            snprintf(what, sizeof what, "a comma-separated list of %s (entry %u is '%.*s')",
                     flt ? "numbers" : "integers", k, (int)(e - p > 32 ? 32 : e - p), p);
            return bad_cell(m, c, cell, cell_end, what);
        }
        const dlc_status rc = dlc__source_grow((void **)&s->list_vals, &s->list_vals_cap,
                                               s->nlist_vals + 1, sizeof *s->list_vals);
        if (rc < 0)
            return rc;
        s->list_vals[s->nlist_vals++] = flt ? float_bits(f) : (uint64_t)i;
        if (!comma)
            break;
        p = comma + 1;
        if (p == end)
            return bad_cell(m, c, cell, cell_end, "a comma-separated list (it ends with a comma)");
    }
    return DLC_OK;
}

/* Find the cells of the line: the last ncols tabs split it into the path and one cell per
 * column; cell c is [at[c], at[c + 1] - 1), the last one ends at the end of the line. */
static dlc_status split_line(const mscan *m, const char *line, size_t len, const char **at)
{
    const uint32_t nc = m->s->ncols;
    const char *q = line + len;
    for (uint32_t c = nc; c-- > 0;) {
        const char *tab = memrchr(line, '\t', (size_t)(q - line));
        if (!tab && !m->header)
            return dlc__errorf(DLC_EINVAL, "%s:%llu: expected PATH<TAB>LABEL, found no tab",
                               m->mpath, m->lineno);
        if (!tab)
            return dlc__errorf(DLC_EINVAL,
                               "%s:%llu: expected %u tab-separated cells (path and %u columns), "
                               "found %u",
                               m->mpath, m->lineno, nc + 1, nc, nc - c);
        at[c] = tab + 1;
        q = tab;
    }
    at[nc] = line + len + 1;
    return DLC_OK;
}

/* The label cell [p, end) into @p label. */
static dlc_status label_cell(const mscan *m, uint32_t c, const char *p, const char *end,
                             int64_t *label)
{
    if (parse_label(p, end, label) == 0)
        return DLC_OK;
    if (m->header)
        return bad_cell(m, c, p, end, "an integer in 0..16777215");
    /* Keep the message of manifests without a header as it always was. */
    const int list = memchr(p, ',', (size_t)(end - p)) != NULL;
    return dlc__errorf(DLC_EINVAL, "%s:%llu: the label '%.*s' is not an integer in 0..%lld%s",
                       m->mpath, m->lineno, (int)(end - p), p, (long long)DLC__SOURCE_MAX_LABEL - 1,
                       list ? " (for several labels per image, start the manifest with the line "
                              "'#columns: path labels')"
                            : "");
}

/* The cells of the line's columns: the label into @p label, scalars into the set's next cells,
 * lists into its list values, with where each starts in the set's next list_at entries. */
static dlc_status parse_cells(mscan *m, const char **at, int64_t *label)
{
    dlc__source_set *s = m->s;
    dlc_status rc = DLC_OK;
    CHECK(dlc__source_grow((void **)&s->cells, &s->cells_cap, (s->count + 1) * s->nscalars,
                           sizeof *s->cells));
    CHECK(dlc__source_grow((void **)&s->list_at, &s->list_at_cap, (s->count + 1) * s->nlists,
                           sizeof *s->list_at));
    *label = -1;
    for (uint32_t c = 0; c < s->ncols; c++) {
        const dlc__column *col = &s->cols[c];
        const char *p = at[c], *end = at[c + 1] - 1;
        if (col->kind == DLC__COL_LABEL) {
            CHECK(label_cell(m, c, p, end, label));
        } else if (col->kind == DLC__COL_INTS || col->kind == DLC__COL_FLOATS) {
            s->list_at[s->count * s->nlists + col->index] = s->nlist_vals;
            CHECK(list_cell(m, c, p, end));
        } else {
            CHECK(scalar_cell(m, c, p, end, &s->cells[s->count * s->nscalars + col->index]));
        }
    }
fail:
    return rc;
}

/* One item line (@p len bytes, NUL-terminated). */
static dlc_status item_line(mscan *m, const char *line, size_t len)
{
    dlc_status rc = DLC_OK;
    const char *at[DLC__SOURCE_MAX_COLS + 1];
    int64_t label;
    CHECK(split_line(m, line, len, at));
    CHECK(parse_cells(m, at, &label));
    const size_t plen = (size_t)(at[0] - 1 - line);
    FAIL_IF(plen == 0, DLC_EINVAL, "%s:%llu: empty path", m->mpath, m->lineno);

    const size_t pre = line[0] == '/' ? 0 : m->base_len;
    if (pre + plen + 1 > m->full_cap) {
        m->full_cap = (pre + plen + 1) * 2;
        char *p = realloc(m->full, m->full_cap);
        FAIL_IF(!p, -ENOMEM, "%s: out of memory", m->mpath);
        m->full = p;
    }
    memcpy(m->full, m->mpath, pre);
    memcpy(m->full + pre, line, plen);
    dlc__item it = {.label = label, .shard = UINT32_MAX};
    /* The path as written is the one a mask is found by; an absolute one has none. */
    if (line[0] != '/' && pre < UINT16_MAX)
        it.rel = (uint16_t)(pre + 1);
    CHECK(dlc__source_intern(m->s, m->full, pre + plen, &it.path));
    CHECK(dlc__source_push(m->s, &it));
fail:
    return rc;
}

/* The columns of a manifest without a header: path and label. */
static dlc_status default_columns(const mscan *m)
{
    const dlc__column label = {.name = "label", .kind = DLC__COL_LABEL};
    return dlc__source_set_columns(m->s, m->mpath, &label, 1);
}

/* One line of the manifest (@p len bytes, NUL-terminated, newline removed). */
static dlc_status scan_line(mscan *m, const char *line, size_t len, uint64_t *items)
{
    size_t first = 0;
    while (first < len && blank(line[first]))
        first++;
    if (first == len)
        return DLC_OK;
    if (strncmp(line, HEADER, strlen(HEADER)) == 0) {
        if (m->header || *items)
            return dlc__errorf(DLC_EINVAL,
                               "%s:%llu: a '" HEADER "' line must come once, before "
                               "the first item",
                               m->mpath, m->lineno);
        m->header = 1;
        return parse_header(m->s, m->mpath, m->lineno, line);
    }
    if (line[first] == '#')
        return DLC_OK;
    if (!m->header && *items == 0) {
        const dlc_status rc = default_columns(m);
        if (rc < 0)
            return rc;
    }
    ++*items;
    return item_line(m, line, len);
}

dlc_status dlc__source_scan_manifest(dlc__source_set *s, const char *mpath)
{
    dlc_status rc = DLC_OK;
    char *line = NULL;
    size_t line_cap = 0;
    mscan m = {.s = s, .mpath = mpath};
    /* Checked before it is read: a FIFO (or a device) is refused, never waited on. */
    struct stat st;
    const int fd = dlc__open_regular(mpath, 0, "manifest", &st);
    if (fd < 0)
        return fd;
    FILE *f = fdopen(fd, "r");
    if (!f)
        close(fd);
    FAIL_IF(!f, -errno, "%s: cannot open manifest: %s", mpath, strerror(errno));

    /* Relative paths are resolved against the manifest's folder. */
    const char *slash = strrchr(mpath, '/');
    m.base_len = slash ? (size_t)(slash - mpath) + 1 : 0;
    uint64_t items = 0;
    ssize_t n;
    errno = 0;
    while ((n = getline(&line, &line_cap, f)) >= 0) {
        m.lineno++;
        size_t len = (size_t)n;
        if (len && line[len - 1] == '\n')
            len--;
        if (len && line[len - 1] == '\r')
            len--;
        line[len] = '\0';
        FAIL_IF(memchr(line, '\0', len) != NULL, DLC_EINVAL,
                "%s:%llu: a NUL byte in the line (is this a manifest?)", mpath, m.lineno);
        CHECK(scan_line(&m, line, len, &items));
    }
    FAIL_IF(ferror(f), -EIO, "%s: cannot read manifest", mpath);
    if (!m.header && items == 0)
        CHECK(default_columns(&m));
    rc = DLC_OK;
fail:
    if (f)
        fclose(f);
    free(line);
    free(m.full);
    return rc;
}
