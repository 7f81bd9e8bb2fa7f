/* The resume journal of a partial download and the sidecar of a published one.
 * Both are small files beside the destination; both are written so that a
 * crash at any point leaves something that is either right or detectably
 * wrong (and then ignored), never something that lies. */
#include "common.h"
#include "warm_internal.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- Byte ranges ------------------------------------------------------------------------------
 * The journal records what is in place as byte ranges rather than chunk
 * indices, so that what one run fetched counts for a rerun with another chunk
 * size: the rerun cuts only the bytes nobody has fetched into requests. */

dlc_status dlc__warm_ranges_add(dlc__warm_ranges *s, uint64_t off, uint64_t len)
{
    assert(len > 0 && off + len > off);
    if (s->n == s->cap) {
        const size_t cap = s->cap ? 2 * s->cap : 16;
        dlc__warm_range *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return dlc__errorf(-ENOMEM, "warm: out of memory");
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n].off = off;
    s->v[s->n].len = len;
    s->n++;
    return DLC_OK;
}

static int range_cmp(const void *a, const void *b)
{
    const dlc__warm_range *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

uint64_t dlc__warm_ranges_normalize(dlc__warm_ranges *s)
{
    if (s->n == 0)
        return 0;
    qsort(s->v, s->n, sizeof *s->v, range_cmp);
    size_t out = 0;
    for (size_t i = 1; i < s->n; i++) {
        dlc__warm_range *cur = &s->v[out];
        const uint64_t end = cur->off + cur->len;
        if (s->v[i].off <= end) {
            /* Overlapping or touching: one run. */
            const uint64_t e = s->v[i].off + s->v[i].len;
            if (e > end)
                cur->len = e - cur->off;
        } else {
            s->v[++out] = s->v[i];
        }
    }
    s->n = out + 1;
    uint64_t bytes = 0;
    for (size_t i = 0; i < s->n; i++)
        bytes += s->v[i].len;
    return bytes;
}

void dlc__warm_ranges_free(dlc__warm_ranges *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

void dlc__warm_gaps_init(dlc__warm_gaps *g, const dlc__warm_ranges *have, uint64_t size,
                         uint64_t chunk)
{
    assert(chunk > 0);
    g->have = have;
    g->size = size;
    g->chunk = chunk;
    g->pos = 0;
    g->i = 0;
}

int dlc__warm_gaps_next(dlc__warm_gaps *g, dlc__warm_range *piece)
{
    const dlc__warm_ranges *h = g->have;
    /* Pass the runs that end before pos, and jump over any that covers it. */
    while (g->i < h->n) {
        const dlc__warm_range *r = &h->v[g->i];
        if (r->off > g->pos)
            break;
        if (r->off + r->len > g->pos)
            g->pos = r->off + r->len;
        g->i++;
    }
    if (g->pos >= g->size)
        return 0;
    /* The piece ends at the chunk's end, the object's end or the next run,
     * whichever comes first (the chunk's end may wrap for sizes near 2^64). */
    uint64_t end = (g->pos / g->chunk + 1) * g->chunk;
    if (end > g->size || end <= g->pos)
        end = g->size;
    if (g->i < h->n && h->v[g->i].off < end)
        end = h->v[g->i].off;
    piece->off = g->pos;
    piece->len = end - g->pos;
    g->pos = end;
    return 1;
}

void dlc__warm_gaps_count(const dlc__warm_ranges *have, uint64_t size, uint64_t chunk,
                          uint64_t *pieces, uint64_t *complete_chunks)
{
    const uint64_t nchunks = size / chunk + (size % chunk != 0);
    uint64_t touched = 0, last = UINT64_MAX;
    dlc__warm_gaps g;
    dlc__warm_gaps_init(&g, have, size, chunk);
    dlc__warm_range piece;
    *pieces = 0;
    while (dlc__warm_gaps_next(&g, &piece)) {
        (*pieces)++;
        /* Pieces come in order, so those of one chunk are neighbours. */
        const uint64_t c = piece.off / chunk;
        touched += c != last;
        last = c;
    }
    *complete_chunks = nchunks - touched;
}

/* ---- The journal ------------------------------------------------------------------------------
 */

static const char journal_magic[8] = {'D', 'L', 'C', 'W', 'A', 'R', 'M', '2'};
enum { JOURNAL_HEADER = 32, JOURNAL_RECORD = 24 };

uint64_t dlc__warm_journal_key(const char *source, const char *etag)
{
    /* Chained rather than streamed: the seed carries the source's hash. */
    const uint64_t h = XXH3_64bits(source, strlen(source) + 1);
    return XXH3_64bits_withSeed(etag, strlen(etag), h);
}

static void header_bytes(const dlc__warm_journal_id *id, uint8_t h[JOURNAL_HEADER])
{
    memcpy(h, journal_magic, 8);
    dlc__st64(h + 8, id->size);
    dlc__st64(h + 16, id->id);
    dlc__st64(h + 24, XXH3_64bits(h, 24));
}

/* The check of a record is seeded with the journal's id, so that records
 * copied from the journal of another object fail it too. */
static void record_bytes(const dlc__warm_journal_id *id, const dlc__warm_range *r,
                         uint8_t b[JOURNAL_RECORD])
{
    dlc__st64(b, r->off);
    dlc__st64(b + 8, r->len);
    dlc__st64(b + 16, XXH3_64bits_withSeed(b, 16, id->id));
}

static dlc_status write_all(int fd, const void *p, size_t n, off_t off, const char *path)
{
    const uint8_t *b = p;
    while (n > 0) {
        const ssize_t w = pwrite(fd, b, n, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return dlc__errorf(-errno, "%s: write: %s", path, strerror(errno));
        }
        b += w;
        n -= (size_t)w;
        off += w;
    }
    return DLC_OK;
}

/* Add the records of @p buf (the whole journal, @p len bytes) to @p have, up
 * to the first bad one; returns the length of the good part. A record is bad
 * when its check fails (a torn append: everything after it is unsynced) or
 * when it does not lie inside the object (only a damaged file says that). */
static dlc_status read_records(const uint8_t *buf, size_t len, const dlc__warm_journal_id *id,
                               dlc__warm_ranges *have, size_t *good)
{
    size_t off = JOURNAL_HEADER;
    for (; off + JOURNAL_RECORD <= len; off += JOURNAL_RECORD) {
        const dlc__warm_range r = {.off = dlc__ld64(buf + off), .len = dlc__ld64(buf + off + 8)};
        uint8_t want[JOURNAL_RECORD];
        record_bytes(id, &r, want);
        if (memcmp(want, buf + off, JOURNAL_RECORD) != 0 || r.len == 0 || r.off >= id->size ||
            r.len > id->size - r.off)
            break;
        const dlc_status rc = dlc__warm_ranges_add(have, r.off, r.len);
        if (rc < 0)
            return rc;
    }
    *good = off;
    return DLC_OK;
}

/* Read the journal open at @p fd; *matched is 0 when it belongs to another
 * object or version (then nothing is read). A torn tail is cut off so that new
 * records follow good ones. */
static dlc_status resume_journal(int fd, const char *path, const dlc__warm_journal_id *id,
                                 dlc__warm_ranges *have, int *matched)
{
    dlc_status rc = DLC_OK;
    uint8_t *buf = NULL;
    *matched = 0;
    struct stat st;
    FAIL_IF(fstat(fd, &st) < 0, -errno, "%s: stat: %s", path, strerror(errno));
    uint8_t want[JOURNAL_HEADER], have_h[JOURNAL_HEADER];
    header_bytes(id, want);
    if (st.st_size < JOURNAL_HEADER || pread(fd, have_h, JOURNAL_HEADER, 0) != JOURNAL_HEADER ||
        memcmp(want, have_h, JOURNAL_HEADER) != 0)
        return DLC_OK;
    const size_t len = (size_t)st.st_size;
    buf = malloc(len);
    FAIL_IF(!buf, -ENOMEM, "%s: out of memory", path);
    FAIL_IF(pread(fd, buf, len, 0) != (ssize_t)len, -EIO, "%s: short read", path);
    size_t good = 0;
    CHECK(read_records(buf, len, id, have, &good));
    if (good != len && ftruncate(fd, (off_t)good) < 0)
        FAIL_IF(1, -errno, "%s: truncate: %s", path, strerror(errno));
    *matched = 1;
fail:
    free(buf);
    return rc;
}

/* Create (or empty) the journal and write its header, synced with its directory. */
static dlc_status start_journal(int dirfd, const char *path, const dlc__warm_journal_id *id,
                                int *fd_out)
{
    dlc_status rc = DLC_OK;
    int fd = -1;
    rc = dlc__create_own_at(dirfd, path, O_RDWR, &fd);
    if (rc < 0)
        return rc;
    uint8_t h[JOURNAL_HEADER];
    header_bytes(id, h);
    CHECK(write_all(fd, h, sizeof h, 0, path));
    FAIL_IF(fdatasync(fd) < 0, -errno, "%s: fdatasync: %s", path, strerror(errno));
    CHECK(dlc__fsync_dir_at(dirfd, path));
    *fd_out = fd;
    return DLC_OK;
fail:
    close(fd);
    return rc;
}

dlc_status dlc__warm_journal_open(const char *path, const dlc__warm_journal_id *id,
                                  dlc__warm_ranges *have, uint64_t *have_bytes, int *fd_out)
{
    return dlc__warm_journal_open_at(AT_FDCWD, path, id, have, have_bytes, fd_out);
}

dlc_status dlc__warm_journal_open_at(int dirfd, const char *path, const dlc__warm_journal_id *id,
                                     dlc__warm_ranges *have, uint64_t *have_bytes, int *fd_out)
{
    have->n = 0;
    *have_bytes = 0;
    *fd_out = -1;
    int fd = -1;
    const dlc_status orc = dlc__open_own_at(dirfd, path, O_RDWR, &fd);
    if (orc < 0 && orc != -ENOENT)
        return orc;
    if (fd >= 0) {
        int matched = 0;
        const dlc_status rc = resume_journal(fd, path, id, have, &matched);
        if (rc == DLC_OK && matched) {
            *have_bytes = dlc__warm_ranges_normalize(have);
            *fd_out = fd;
            return DLC_OK;
        }
        have->n = 0;
        close(fd);
        if (rc < 0)
            return rc;
    }
    /* No journal of this object: start a fresh one. */
    return start_journal(dirfd, path, id, fd_out);
}

dlc_status dlc__warm_journal_append(int fd, const char *path, const dlc__warm_journal_id *id,
                                    const dlc__warm_range *ranges, size_t n)
{
    uint8_t rec[64 * JOURNAL_RECORD];
    struct stat st;
    if (fstat(fd, &st) < 0)
        return dlc__errorf(-errno, "%s: stat: %s", path, strerror(errno));
    off_t off = st.st_size;
    while (n > 0) {
        const size_t k = n < 64 ? n : 64;
        for (size_t i = 0; i < k; i++) {
            assert(ranges[i].len > 0 && ranges[i].off + ranges[i].len <= id->size);
            record_bytes(id, &ranges[i], rec + i * JOURNAL_RECORD);
        }
        const dlc_status rc = write_all(fd, rec, k * JOURNAL_RECORD, off, path);
        if (rc < 0)
            return rc;
        off += (off_t)(k * JOURNAL_RECORD);
        ranges += k;
        n -= k;
    }
    if (fdatasync(fd) < 0)
        return dlc__errorf(-errno, "%s: fdatasync: %s", path, strerror(errno));
    return DLC_OK;
}

dlc_status dlc__warm_sidecar_stat(const char *dest, dlc__warm_sidecar *sc)
{
    return dlc__warm_sidecar_stat_at(AT_FDCWD, dest, sc);
}

int64_t dlc__warm_mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

int dlc__warm_sidecar_names(const dlc__warm_sidecar *sc, const struct stat *st)
{
    return S_ISREG(st->st_mode) && sc->inode == (uint64_t)st->st_ino &&
           sc->mtime_ns == dlc__warm_mtime_ns(st);
}

dlc_status dlc__warm_sidecar_stat_at(int dirfd, const char *dest, dlc__warm_sidecar *sc)
{
    struct stat st;
    const char *name = dlc__at_name(dirfd, dest);
    if (fstatat(dirfd, name, &st, 0) < 0)
        return -errno;
    if (S_ISDIR(st.st_mode)) {
        /* A store set: its index, published last, is what stands for the whole. */
        char index[4200];
        snprintf(index, sizeof index, "%s/" DLC__WARM_SET_INDEX, name);
        if (fstatat(dirfd, index, &st, 0) < 0)
            return -errno;
    }
    sc->inode = (uint64_t)st.st_ino;
    sc->mtime_ns = dlc__warm_mtime_ns(&st);
    if (!S_ISREG(st.st_mode))
        return -EISDIR;
    if ((uint64_t)st.st_size != sc->size)
        return DLC_ECHANGED;
    return DLC_OK;
}

dlc_status dlc__warm_sidecar_read(const char *path, dlc__warm_sidecar *sc)
{
    return dlc__warm_sidecar_read_at(AT_FDCWD, path, sc);
}

dlc_status dlc__warm_sidecar_read_at(int dirfd, const char *path, dlc__warm_sidecar *sc)
{
    memset(sc, 0, sizeof *sc);
    int fd = -1;
    if (dlc__open_own_at(dirfd, path, O_RDONLY, &fd) < 0)
        return DLC_ENOTFOUND; /* Absent, a link or not a file: no sidecar of ours. */
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return DLC_ENOTFOUND;
    }
    char line[4096];
    int have = 0;
    if (!fgets(line, sizeof line, f) || strcmp(line, "dlcache-warm 1\n") != 0)
        goto bad;
    while (fgets(line, sizeof line, f)) {
        const size_t n = strlen(line);
        if (n == 0 || line[n - 1] != '\n')
            goto bad;
        line[n - 1] = '\0';
        char *sp = strchr(line, ' ');
        if (!sp)
            goto bad;
        *sp = '\0';
        const char *v = sp + 1;
        if (strcmp(line, "source") == 0 && strlen(v) < sizeof sc->source) {
            strcpy(sc->source, v);
            have |= 1;
        } else if (strcmp(line, "size") == 0 && sscanf(v, "%" SCNu64, &sc->size) == 1) {
            have |= 2;
        } else if (strcmp(line, "etag") == 0 && strlen(v) < sizeof sc->etag) {
            strcpy(sc->etag, v);
            have |= 4;
        } else if (strcmp(line, "inode") == 0 && sscanf(v, "%" SCNu64, &sc->inode) == 1) {
            have |= 8;
        } else if (strcmp(line, "mtime_ns") == 0 && sscanf(v, "%" SCNd64, &sc->mtime_ns) == 1) {
            have |= 16;
        }
    }
    fclose(f);
    return have == 31 ? DLC_OK : DLC_ENOTFOUND;
bad:
    fclose(f);
    return DLC_ENOTFOUND;
}

dlc_status dlc__warm_sidecar_write(const char *path, const dlc__warm_sidecar *sc)
{
    return dlc__warm_sidecar_write_at(AT_FDCWD, path, sc);
}

dlc_status dlc__warm_sidecar_write_at(int dirfd, const char *path, const dlc__warm_sidecar *sc)
{
    char text[4096];
    const int n = snprintf(text, sizeof text,
                           "dlcache-warm 1\nsource %s\nsize %" PRIu64 "\netag %s\ninode %" PRIu64
                           "\nmtime_ns %" PRId64 "\n",
                           sc->source, sc->size, sc->etag, sc->inode, sc->mtime_ns);
    if (n < 0 || (size_t)n >= sizeof text)
        return dlc__errorf(DLC_EINVAL, "%s: sidecar too long", path);
    return dlc__replace_file_at(dirfd, path, text, (size_t)n);
}
