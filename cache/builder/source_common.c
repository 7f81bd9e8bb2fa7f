/* The source item list: storage, source dispatch, and reading an item. */
#include "source.h"

#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

const char *dlc__skip_reason(dlc__skip_code code)
{
    switch (code) {
    case DLC__SKIP_NONE:
        return "not skipped";
    case DLC__SKIP_NOT_JPEG:
        return "not a JPEG (only .jpg/.jpeg images are stored)";
    case DLC__SKIP_NO_CLS:
        return "no KEY.cls label member for this sample";
    case DLC__SKIP_BAD_CLS:
        return "the KEY.cls member is not a label number";
    case DLC__SKIP_NO_JPEG:
        return "no KEY.jpg or KEY.jpeg member for this sample";
    }
    return "skipped";
}

void dlc__source_init(dlc__source_set *s)
{
    memset(s, 0, sizeof *s);
    s->max_label = -1;
}

void dlc__source_free(dlc__source_set *s)
{
    for (uint32_t i = 0; i < s->nshards; i++)
        close(s->shards[i].fd);
    free(s->shards);
    free(s->items);
    free(s->arena);
    free(s->class_names);
    free(s->cells);
    free(s->list_at);
    free(s->list_vals);
    memset(s, 0, sizeof *s);
    s->max_label = -1;
}

dlc_status dlc__source_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return DLC_OK;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    if (n > SIZE_MAX / elem)
        return dlc__errorf(-ENOMEM, "source list: too many items");
    void *q = realloc(*p, n * elem);
    if (!q)
        return dlc__errorf(-ENOMEM, "source list: out of memory for %zu items", n);
    *p = q;
    *cap = n;
    return DLC_OK;
}

static dlc_status grow(void **p, size_t *cap, size_t need, size_t elem)
{
    return dlc__source_grow(p, cap, need, elem);
}

dlc_status dlc__source_intern(dlc__source_set *s, const char *str, size_t len, uint64_t *off)
{
    const dlc_status rc = grow((void **)&s->arena, &s->arena_cap, s->arena_len + len + 1, 1);
    if (rc < 0)
        return rc;
    memcpy(s->arena + s->arena_len, str, len);
    s->arena[s->arena_len + len] = '\0';
    *off = s->arena_len;
    s->arena_len += len + 1;
    return DLC_OK;
}

dlc_status dlc__source_push(dlc__source_set *s, const dlc__item *it)
{
    const dlc_status rc = grow((void **)&s->items, &s->cap, s->count + 1, sizeof *it);
    if (rc < 0)
        return rc;
    s->items[s->count++] = *it;
    if (it->label > s->max_label)
        s->max_label = it->label;
    return DLC_OK;
}

/* "path, label, weight" into @p buf. */
static void column_list(const dlc__column *cols, uint32_t n, char *buf, size_t cap)
{
    size_t at = (size_t)snprintf(buf, cap, "path");
    for (uint32_t c = 0; c < n && at < cap; c++)
        at += (size_t)snprintf(buf + at, cap - at, ", %s", cols[c].name);
}

dlc_status dlc__source_set_columns(dlc__source_set *s, const char *path, const dlc__column *cols,
                                   uint32_t n)
{
    if (s->cols_set) {
        int same = n == s->ncols;
        for (uint32_t c = 0; same && c < n; c++)
            same = strcmp(cols[c].name, s->cols[c].name) == 0 && cols[c].kind == s->cols[c].kind;
        if (same)
            return DLC_OK;
        char have[512], want[512];
        column_list(s->cols, s->ncols, have, sizeof have);
        column_list(cols, n, want, sizeof want);
        return dlc__errorf(DLC_EINVAL,
                           "%s: its columns (%s) are not those of the first source (%s); every "
                           "source of a build has the same columns",
                           path, want, have);
    }
    if (n > DLC__SOURCE_MAX_COLS)
        return dlc__errorf(DLC_EINVAL, "%s: %u columns besides the path, at most %u", path, n,
                           DLC__SOURCE_MAX_COLS);
    s->nscalars = s->nlists = 0;
    for (uint32_t c = 0; c < n; c++) {
        s->cols[c] = cols[c];
        const uint32_t k = cols[c].kind;
        s->cols[c].is_float = k == DLC__COL_FLOAT || k == DLC__COL_FLOATS;
        if (k == DLC__COL_INTS || k == DLC__COL_FLOATS)
            s->cols[c].index = s->nlists++;
        else if (k != DLC__COL_LABEL)
            s->cols[c].index = s->nscalars++;
    }
    s->ncols = n;
    s->cols_set = 1;
    return DLC_OK;
}

int dlc__source_has_label(const dlc__source_set *s)
{
    for (uint32_t c = 0; c < s->ncols; c++)
        if (s->cols[c].kind == DLC__COL_LABEL)
            return 1;
    return 0;
}

const uint64_t *dlc__source_list(const dlc__source_set *s, size_t i, uint32_t k, size_t *n)
{
    const size_t at = i * s->nlists + k;
    const uint64_t start = s->list_at[at];
    const uint64_t end = at + 1 < s->count * s->nlists ? s->list_at[at + 1] : s->nlist_vals;
    *n = (size_t)(end - start);
    return *n ? s->list_vals + start : NULL;
}

/* The one column of an ImageFolder tree and of a tar shard. */
static dlc_status label_column(dlc__source_set *s, const char *path)
{
    const dlc__column label = {.name = "label", .kind = DLC__COL_LABEL};
    return dlc__source_set_columns(s, path, &label, 1);
}

static int ends_with_ci(const char *s, const char *suffix)
{
    const size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

dlc_status dlc__source_add(dlc__source_set *s, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return dlc__errorf(-errno, "%s: cannot open source: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        if (s->kind != DLC__SOURCE_NONE)
            return dlc__errorf(DLC_EINVAL, "%s: an ImageFolder directory must be the only source",
                               path);
        s->kind = DLC__SOURCE_FOLDER;
        const dlc_status rc = label_column(s, path);
        return rc < 0 ? rc : dlc__source_scan_folder(s, path);
    }
    if (s->kind == DLC__SOURCE_FOLDER)
        return dlc__errorf(DLC_EINVAL, "%s: an ImageFolder directory must be the only source",
                           path);
    s->kind = DLC__SOURCE_LIST;
    if (ends_with_ci(path, ".tar")) {
        const dlc_status rc = label_column(s, path);
        return rc < 0 ? rc : dlc__source_scan_tar(s, path);
    }
    return dlc__source_scan_manifest(s, path);
}

uint32_t dlc__source_num_labels(const dlc__source_set *s)
{
    if (s->kind == DLC__SOURCE_FOLDER)
        return s->nclasses;
    return (uint32_t)(s->max_label + 1);
}

const char *dlc__source_label_name(const dlc__source_set *s, uint32_t i, char *buf, size_t size)
{
    if (s->kind == DLC__SOURCE_FOLDER)
        return i < s->nclasses ? s->arena + s->class_names[i] : NULL;
    snprintf(buf, size, "%" PRIu32, i);
    return buf;
}

int64_t dlc__source_pread(int fd, void *dst, size_t size, uint64_t offset)
{
    size_t got = 0;
    while (got < size) {
        const ssize_t n = pread(fd, (uint8_t *)dst + got, size - got, (off_t)(offset + got));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (int64_t)got;
}

static int64_t mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

void dlc__source_stat(const dlc__source_set *s, size_t index, dlc__source_data *out)
{
    const dlc__item *it = &s->items[index];
    memset(out, 0, sizeof *out);
    out->file_size = it->size;
    out->mtime_ns = it->mtime_ns;
    struct stat st;
    if (it->shard == UINT32_MAX && stat(dlc__source_path(s, it), &st) == 0) {
        out->file_size = (uint64_t)st.st_size;
        out->mtime_ns = mtime_ns(&st);
    }
}

static dlc_status ensure_buf(uint8_t **buf, size_t *cap, size_t need, const char *path)
{
    if (need <= *cap)
        return DLC_OK;
    /* Round up so that a stream of slightly growing files does not realloc each time. */
    const size_t n = (need + 65535) & ~(size_t)65535;
    uint8_t *p = realloc(*buf, n);
    if (!p)
        return dlc__errorf(-ENOMEM, "%s: out of memory for a %zu-byte read buffer", path, n);
    *buf = p;
    *cap = n;
    return DLC_OK;
}

/* A tar member: its bytes lie at a known offset of the shard, which the set keeps open. */
static dlc_status read_member(const dlc__source_set *s, const dlc__item *it, uint8_t **buf,
                              size_t *cap, dlc__source_data *out, char *why, size_t why_size)
{
    out->file_size = it->size;
    out->mtime_ns = it->mtime_ns;
    if (it->size == 0) {
        snprintf(why, why_size, "empty member");
        return DLC_EDECODE;
    }
    if (it->size > DLC__SOURCE_MAX_FILE) {
        snprintf(why, why_size, "member of %" PRIu64 " bytes is too large for an image", it->size);
        return DLC_EDECODE;
    }
    const dlc_status rc = ensure_buf(buf, cap, (size_t)it->size, dlc__source_path(s, it));
    if (rc < 0)
        return rc;
    const int64_t n =
        dlc__source_pread(s->shards[it->shard].fd, *buf, (size_t)it->size, it->offset);
    if (n < 0) {
        snprintf(why, why_size, "cannot read the shard: %s", strerror((int)-n));
        return DLC_EDECODE;
    }
    out->data = *buf;
    out->size = (size_t)n;
    return DLC_OK;
}

/* A file: opened, checked to be a regular file of a sane size, and read whole. */
dlc_status dlc__source_read_path(const char *path, uint8_t **buf, size_t *cap,
                                 dlc__source_data *out, char *why, size_t why_size)
{
    memset(out, 0, sizeof *out);
    /* O_NONBLOCK: a FIFO that torchvision would list as a file must not hang the build. */
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        snprintf(why, why_size, "cannot open: %s", strerror(errno));
        return DLC_EDECODE;
    }
    dlc_status rc = DLC_EDECODE;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(why, why_size, "cannot stat: %s", strerror(errno));
        goto done;
    }
    out->file_size = (uint64_t)st.st_size;
    out->mtime_ns = mtime_ns(&st);
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_size, "not a regular file");
        goto done;
    }
    if (st.st_size == 0) {
        snprintf(why, why_size, "empty file");
        goto done;
    }
    if ((uint64_t)st.st_size > DLC__SOURCE_MAX_FILE) {
        snprintf(why, why_size, "file of %" PRIu64 " bytes is too large for an image",
                 (uint64_t)st.st_size);
        goto done;
    }
    if ((rc = ensure_buf(buf, cap, (size_t)st.st_size, path)) < 0)
        goto done;
    const int64_t n = dlc__source_pread(fd, *buf, (size_t)st.st_size, 0);
    if (n < 0) {
        snprintf(why, why_size, "cannot read: %s", strerror((int)-n));
        rc = DLC_EDECODE;
        goto done;
    }
    out->data = *buf;
    out->size = (size_t)n;
    rc = DLC_OK;
done:
    close(fd);
    return rc;
}

dlc_status dlc__source_read(const dlc__source_set *s, size_t index, uint8_t **buf, size_t *cap,
                            dlc__source_data *out, char *why, size_t why_size)
{
    const dlc__item *it = &s->items[index];
    memset(out, 0, sizeof *out);
    if (it->shard != UINT32_MAX)
        return read_member(s, it, buf, cap, out, why, why_size);
    return dlc__source_read_path(dlc__source_path(s, it), buf, cap, out, why, why_size);
}
