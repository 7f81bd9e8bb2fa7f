/* WebDataset tar shard scan.
 *
 * A shard is a tar file whose members are grouped into samples by key, as
 * webdataset's group_by_keys() does: the key is the member path up to the
 * first '.' of its file name, the extension is the rest, lower-cased;
 * consecutive members with the same key form one sample. A sample becomes an
 * item when it has a "jpg" or "jpeg" member; its label is the decimal number
 * in its "cls" member. Samples with a cls but no JPEG, or with another image
 * type (png, webp...), are items that the build skips with a reason, so they
 * are reported instead of silently lost. Members in tar order give the item
 * order; several shards are concatenated in the order given.
 *
 * Tar dialects: POSIX ustar (with the 155-byte name prefix), GNU (long names
 * in 'L' members, base-256 sizes), and pax extended headers ('x': path and
 * size records). Directories, links and other special members are ignored.
 * The scan reads only the 512-byte headers and the small cls members with
 * pread; image data is read later, by the workers, at the recorded offsets.
 *
 * A header with a bad checksum, or a member that runs past the end of the
 * file, is an error naming the shard and the byte offset: a damaged shard
 * cannot be trusted to say where its next member starts.
 */
#include "source.h"

#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 512u
/* GNU long names and pax headers larger than this are not names. */
#define MAX_META 65536u
/* A cls member is a short number; a larger one is not a label. */
#define MAX_CLS 64u

/* Read a numeric header field: octal ASCII (leading blanks, NUL or space
 * terminated), or GNU base-256 when the first byte has its high bit set. */
static int tar_number(const uint8_t *f, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (f[0] & 0x80) {
        if (f[0] & 0x40)
            return -1; /* negative */
        v = f[0] & 0x3f;
        for (size_t i = 1; i < n; i++) {
            if (v >> 56)
                return -1;
            v = v << 8 | f[i];
        }
        *out = v;
        return 0;
    }
    size_t i = 0;
    while (i < n && (f[i] == ' ' || f[i] == '\0'))
        i++;
    if (i == n) {
        *out = 0; /* An all-blank field is zero (seen in old writers' mtime). */
        return 0;
    }
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v >> 60)
            return -1;
        v = v << 3 | (uint64_t)(f[i] - '0');
    }
    for (; i < n; i++)
        if (f[i] != ' ' && f[i] != '\0')
            return -1;
    *out = v;
    return 0;
}

static int checksum_ok(const uint8_t *h)
{
    uint64_t want;
    if (tar_number(h + 148, 8, &want) != 0)
        return 0;
    /* The checksum field counts as eight spaces. Old writers summed signed
     * chars; accept either sum. */
    uint64_t u = 0;
    int64_t sgn = 0;
    for (size_t i = 0; i < BLOCK; i++) {
        const uint8_t c = (i >= 148 && i < 156) ? ' ' : h[i];
        u += c;
        sgn += (int8_t)c;
    }
    return u == want || (uint64_t)sgn == want;
}

static int all_zero(const uint8_t *h)
{
    for (size_t i = 0; i < BLOCK; i++)
        if (h[i])
            return 0;
    return 1;
}

/* The sample being assembled from consecutive members with one key. */
typedef struct group {
    char *key;   /* malloc'd; NULL when no group is open */
    char *jpg;   /* member name of the JPEG */
    char *other; /* member name of a non-JPEG image */
    uint64_t jpg_off, jpg_size;
    int64_t jpg_mtime_ns;
    int has_cls, cls_bad;
    int64_t label;
} group;

static void group_clear(group *g)
{
    free(g->key);
    free(g->jpg);
    free(g->other);
    memset(g, 0, sizeof *g);
    g->label = -1;
}

/* Extensions torchvision treats as images besides JPEG: reported as "not a JPEG". */
static int other_image_ext(const char *ext)
{
    static const char *const exts[] = {"png", "ppm", "bmp", "pgm", "tif", "tiff", "webp"};
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++)
        if (strcmp(ext, exts[i]) == 0)
            return 1;
    return 0;
}

static dlc_status push_member_item(dlc__source_set *s, const char *shard_path, const char *member,
                                   dlc__item *it)
{
    const size_t a = strlen(shard_path), b = strlen(member);
    char *p = malloc(a + b + 2);
    if (!p)
        return dlc__errorf(-ENOMEM, "%s: out of memory", shard_path);
    memcpy(p, shard_path, a);
    p[a] = ':';
    memcpy(p + a + 1, member, b + 1);
    dlc_status rc = dlc__source_intern(s, p, a + b + 1, &it->path);
    free(p);
    if (rc >= 0)
        rc = dlc__source_push(s, it);
    return rc;
}

/* Turn the finished group into an item (or nothing) and clear it. */
static dlc_status group_flush(dlc__source_set *s, const char *shard_path, uint32_t shard, group *g)
{
    dlc_status rc = DLC_OK;
    if (!g->key)
        return DLC_OK;
    dlc__item it = {.label = g->has_cls && !g->cls_bad ? g->label : -1, .shard = shard};
    if (g->jpg) {
        it.offset = g->jpg_off;
        it.size = g->jpg_size;
        it.mtime_ns = g->jpg_mtime_ns;
        if (!g->has_cls)
            it.skip = DLC__SKIP_NO_CLS;
        else if (g->cls_bad)
            it.skip = DLC__SKIP_BAD_CLS;
        rc = push_member_item(s, shard_path, g->jpg, &it);
    } else if (g->other) {
        it.skip = DLC__SKIP_NOT_JPEG;
        rc = push_member_item(s, shard_path, g->other, &it);
    } else if (g->has_cls) {
        it.skip = DLC__SKIP_NO_JPEG;
        rc = push_member_item(s, shard_path, g->key, &it);
    }
    group_clear(g);
    return rc;
}

/* Parse a cls member: a decimal number with optional surrounding whitespace. */
static int parse_cls(const char *p, size_t n, int64_t *out)
{
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    int64_t v = 0;
    size_t digits = 0;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++, digits++) {
        v = v * 10 + (p[i] - '0');
        if (v >= DLC__SOURCE_MAX_LABEL)
            return -1;
    }
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    if (!digits || i != n)
        return -1;
    *out = v;
    return 0;
}

/* Parse pax records "LEN key=value\n" for path and size. */
static int pax_parse(const char *p, size_t n, char **path, uint64_t *size, int *has_size)
{
    size_t i = 0;
    while (i < n) {
        size_t len = 0, j = i;
        while (j < n && p[j] >= '0' && p[j] <= '9') {
            len = len * 10 + (size_t)(p[j] - '0');
            if (len > n)
                return -1;
            j++;
        }
        if (j == i || j >= n || p[j] != ' ' || len < (j - i) + 2 || i + len > n ||
            p[i + len - 1] != '\n')
            return -1;
        const char *kv = p + j + 1, *end = p + i + len - 1;
        const char *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq)
            return -1;
        const size_t klen = (size_t)(eq - kv);
        if (klen == 4 && memcmp(kv, "path", 4) == 0) {
            free(*path);
            *path = strndup(eq + 1, (size_t)(end - eq - 1));
            if (!*path)
                return -1;
        } else if (klen == 4 && memcmp(kv, "size", 4) == 0) {
            uint64_t v = 0;
            const char *q = eq + 1;
            if (q == end)
                return -1;
            for (; q < end; q++) {
                if (*q < '0' || *q > '9' || v > (UINT64_MAX - 9) / 10)
                    return -1;
                v = v * 10 + (uint64_t)(*q - '0');
            }
            *size = v;
            *has_size = 1;
        }
        i += len;
    }
    return 0;
}

/* One shard's scan: where it stands, and what the headers before the current member said
 * (a GNU long name or pax records apply to the next member only). */
typedef struct tar_scan {
    dlc__source_set *s;
    const char *path;
    uint32_t shard; /* index in s->shards */
    int fd;         /* the shard's descriptor, owned by the set */
    uint64_t fsize;
    uint64_t pos; /* the next header */
    size_t members;
    group g;
    char *long_name; /* from a GNU 'L' member */
    char *pax_path;  /* from a pax 'x' member */
    uint64_t pax_size;
    int pax_has_size;
    char *meta; /* the last 'L' or 'x' member's data */
} tar_scan;

/* What a header says about its member. */
typedef struct tar_member {
    uint64_t size;  /* data bytes (a pax size record overrides the header's field) */
    uint64_t mtime; /* seconds; 0 when the field is unreadable */
    uint64_t data;  /* offset of the first data byte */
    char type;
} tar_member;

/* Open the shard and add it to the set's shard table, which owns its descriptor from then on. */
static dlc_status open_shard(tar_scan *ts)
{
    dlc__source_set *s = ts->s;
    const char *path = ts->path;
    dlc_status rc;
    struct stat st;
    /* Checked before it is read: a FIFO (or a device) is refused, never waited on. */
    int fd = dlc__open_regular(path, 0, "tar shard", &st);
    if (fd < 0)
        return fd;
    if (s->nshards == s->shards_cap) {
        const uint32_t cap = s->shards_cap ? s->shards_cap * 2 : 8;
        dlc__shard *p = realloc(s->shards, cap * sizeof *p);
        FAIL_IF(!p, -ENOMEM, "%s: out of memory", path);
        s->shards = p;
        s->shards_cap = cap;
    }
    ts->shard = s->nshards;
    ts->fd = fd;
    ts->fsize = (uint64_t)st.st_size;
    s->shards[ts->shard].fd = fd;
    s->shards[ts->shard].size = ts->fsize;
    CHECK(dlc__source_intern(s, path, strlen(path), &s->shards[ts->shard].path));
    s->nshards++;
    return DLC_OK;
fail:
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Read the header at ts->pos into @p h and step ts->pos past its member. *end is set at the
 * end of the archive (two zero blocks, or none at the end of the file). */
static dlc_status next_header(tar_scan *ts, uint8_t h[BLOCK], tar_member *m, int *end)
{
    const char *path = ts->path;
    const uint64_t pos = ts->pos, fsize = ts->fsize;
    *end = pos == fsize; /* Some writers omit the two zero blocks at the end. */
    if (*end)
        return DLC_OK;
    const int64_t got = dlc__source_pread(ts->fd, h, BLOCK, pos);
    if (got < 0)
        return dlc__errorf((dlc_status)got, "%s: cannot read at byte %" PRIu64 ": %s", path, pos,
                           strerror((int)-got));
    if (got < BLOCK)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: truncated: the file ends inside the header at byte %" PRIu64, path,
                           pos);
    *end = all_zero(h);
    if (*end)
        return DLC_OK;
    if (!checksum_ok(h))
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: bad tar header at byte %" PRIu64 " (checksum mismatch; not a tar "
                           "file, or damaged)",
                           path, pos);
    if (tar_number(h + 124, 12, &m->size) != 0)
        return dlc__errorf(DLC_ECORRUPT, "%s: bad size field in the tar header at byte %" PRIu64,
                           path, pos);
    if (tar_number(h + 136, 12, &m->mtime) != 0)
        m->mtime = 0;
    m->type = (char)h[156];
    if (ts->pax_has_size && m->type != 'x' && m->type != 'g' && m->type != 'L' && m->type != 'K')
        m->size = ts->pax_size;
    m->data = pos + BLOCK;
    if (m->size > fsize || m->data > fsize - m->size)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: truncated: the member at byte %" PRIu64 " needs %" PRIu64
                           " data bytes, the file ends %" PRIu64 " bytes after its header",
                           path, pos, m->size, fsize - m->data);
    const uint64_t next = m->data + ((m->size + BLOCK - 1) / BLOCK) * BLOCK;
    ts->pos = next > fsize ? fsize : next;
    return DLC_OK;
}

/* A GNU long-name ('L') or pax ('x') member: remember what it says about the next member. */
static dlc_status read_meta_member(tar_scan *ts, const tar_member *m)
{
    const char *path = ts->path;
    const uint64_t at = m->data - BLOCK;
    if (m->size > MAX_META)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: %s header at byte %" PRIu64 " is %" PRIu64 " bytes, too large",
                           path, m->type == 'L' ? "GNU long-name" : "pax", at, m->size);
    free(ts->meta);
    ts->meta = malloc(m->size + 1);
    if (!ts->meta)
        return dlc__errorf(-ENOMEM, "%s: out of memory", path);
    const int64_t n = dlc__source_pread(ts->fd, ts->meta, (size_t)m->size, m->data);
    if (n != (int64_t)m->size)
        return dlc__errorf(n < 0 ? (dlc_status)n : DLC_ECORRUPT,
                           "%s: cannot read the header at byte %" PRIu64, path, at);
    ts->meta[m->size] = '\0';
    if (m->type == 'L') {
        free(ts->long_name);
        ts->long_name = strndup(ts->meta, m->size);
        if (!ts->long_name)
            return dlc__errorf(-ENOMEM, "%s: out of memory", path);
    } else if (pax_parse(ts->meta, (size_t)m->size, &ts->pax_path, &ts->pax_size,
                         &ts->pax_has_size) != 0) {
        return dlc__errorf(DLC_ECORRUPT, "%s: malformed pax header at byte %" PRIu64, path, at);
    }
    return DLC_OK;
}

/* The member's name: the pax path, else the GNU long name, else the ustar prefix + name
 * (built in @p name). */
static const char *member_name(const tar_scan *ts, const uint8_t *h, char name[256 + 2])
{
    if (ts->pax_path)
        return ts->pax_path;
    if (ts->long_name)
        return ts->long_name;
    const size_t nlen = strnlen((const char *)h, 100);
    size_t off = 0;
    if (memcmp(h + 257, "ustar\0", 6) == 0 && h[345] != '\0') {
        const size_t plen = strnlen((const char *)h + 345, 155);
        memcpy(name, h + 345, plen);
        name[plen] = '/';
        off = plen + 1;
    }
    memcpy(name + off, h, nlen);
    name[off + nlen] = '\0';
    return name;
}

/* The lower-cased extension after @p dot into @p ext; "" when it is too long to be one we
 * know. */
static void member_ext(const char *dot, char ext[16])
{
    const size_t elen = strlen(dot + 1);
    if (elen >= 16) {
        ext[0] = '\0';
        return;
    }
    for (size_t i = 0; i <= elen; i++) {
        const char c = dot[1 + i];
        ext[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
}

/* Add a regular member to the sample being assembled; a new key, or a second JPEG or cls
 * under the same key, first turns the previous sample into an item. */
static dlc_status add_member(tar_scan *ts, const char *mname, const tar_member *m)
{
    const char *base = strrchr(mname, '/');
    base = base ? base + 1 : mname;
    const char *dot = strchr(base, '.');
    if (!dot || dot == base)
        return DLC_OK;
    const size_t klen = (size_t)(dot - mname);
    char ext[16];
    member_ext(dot, ext);
    const int is_jpg = strcmp(ext, "jpg") == 0 || strcmp(ext, "jpeg") == 0;
    const int is_cls = strcmp(ext, "cls") == 0;
    group *g = &ts->g;
    if (g->key && (strlen(g->key) != klen || memcmp(g->key, mname, klen) != 0 ||
                   (is_jpg && g->jpg) || (is_cls && g->has_cls))) {
        const dlc_status rc = group_flush(ts->s, ts->path, ts->shard, g);
        if (rc < 0)
            return rc;
    }
    if (!g->key) {
        g->key = strndup(mname, klen);
        if (!g->key)
            return dlc__errorf(-ENOMEM, "%s: out of memory", ts->path);
    }
    if (is_jpg) {
        g->jpg = strdup(mname);
        if (!g->jpg)
            return dlc__errorf(-ENOMEM, "%s: out of memory", ts->path);
        g->jpg_off = m->data;
        g->jpg_size = m->size;
        g->jpg_mtime_ns = (int64_t)(m->mtime > INT64_MAX / 1000000000 ? 0 : m->mtime) * 1000000000;
    } else if (is_cls) {
        g->has_cls = 1;
        char buf[MAX_CLS];
        if (m->size > MAX_CLS ||
            dlc__source_pread(ts->fd, buf, (size_t)m->size, m->data) != (int64_t)m->size ||
            parse_cls(buf, (size_t)m->size, &g->label) != 0)
            g->cls_bad = 1;
    } else if (other_image_ext(ext) && !g->other) {
        g->other = strdup(mname);
        if (!g->other)
            return dlc__errorf(-ENOMEM, "%s: out of memory", ts->path);
    }
    return DLC_OK;
}

dlc_status dlc__source_scan_tar(dlc__source_set *s, const char *path)
{
    dlc_status rc;
    tar_scan ts = {.s = s, .path = path, .fd = -1};
    group_clear(&ts.g);
    CHECK(open_shard(&ts));
    for (;;) {
        uint8_t h[BLOCK];
        tar_member m = {0};
        int end;
        CHECK(next_header(&ts, h, &m, &end));
        if (end)
            break;
        if (m.type == 'L' || m.type == 'x') {
            CHECK(read_meta_member(&ts, &m));
            continue;
        }
        if (m.type == 'g' || m.type == 'K')
            continue; /* Global pax defaults and long link names do not name members. */
        char name[256 + 2];
        const char *mname = member_name(&ts, h, name);
        ts.members++;
        if (m.type == '0' || m.type == '\0' || m.type == '7')
            CHECK(add_member(&ts, mname, &m));
        free(ts.long_name);
        free(ts.pax_path);
        ts.long_name = ts.pax_path = NULL;
        ts.pax_has_size = 0;
    }
    CHECK(group_flush(s, path, ts.shard, &ts.g));
    if (ts.members == 0)
        dlc__logf(s->log, s->log_user, DLC_LOG_WARN, "%s: no member in this tar shard", path);
    rc = DLC_OK;
fail:
    group_clear(&ts.g);
    free(ts.long_name);
    free(ts.pax_path);
    free(ts.meta);
    return rc;
}
