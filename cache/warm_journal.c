/* The resume journal of a partial download and the sidecar of a published one.
 * Both are small files beside the destination; both are written so that a
 * crash at any point leaves something that is either right or detectably
 * wrong (and then ignored), never something that lies. */
#include "common.h"
#include "warm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static const char journal_magic[8] = {'D', 'L', 'C', 'W', 'A', 'R', 'M', '1'};
enum { JOURNAL_HEADER = 40, JOURNAL_RECORD = 16 };

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
    dlc__st64(h + 16, id->chunk_size);
    dlc__st64(h + 24, id->id);
    dlc__st64(h + 32, XXH3_64bits(h, 32));
}

static uint64_t record_check(const dlc__warm_journal_id *id, uint64_t chunk)
{
    uint8_t b[8];
    dlc__st64(b, chunk);
    return XXH3_64bits_withSeed(b, 8, id->id);
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

dlc_status dlc__warm_journal_open(const char *path, const dlc__warm_journal_id *id, uint8_t *done,
                                  uint64_t nchunks, uint64_t *resumed_chunks, int *fd_out)
{
    dlc_status rc = DLC_OK;
    uint8_t *buf = NULL;
    *resumed_chunks = 0;
    *fd_out = -1;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        struct stat st;
        FAIL_IF(fstat(fd, &st) < 0, -errno, "%s: stat: %s", path, strerror(errno));
        uint8_t want[JOURNAL_HEADER], have[JOURNAL_HEADER];
        header_bytes(id, want);
        const size_t len = (size_t)st.st_size;
        if (st.st_size >= JOURNAL_HEADER && pread(fd, have, JOURNAL_HEADER, 0) == JOURNAL_HEADER &&
            memcmp(want, have, JOURNAL_HEADER) == 0) {
            buf = malloc(len);
            FAIL_IF(!buf, -ENOMEM, "%s: out of memory", path);
            FAIL_IF(pread(fd, buf, len, 0) != (ssize_t)len, -EIO, "%s: short read", path);
            size_t off = JOURNAL_HEADER;
            for (; off + JOURNAL_RECORD <= len; off += JOURNAL_RECORD) {
                const uint64_t chunk = dlc__ld64(buf + off);
                if (chunk >= nchunks || dlc__ld64(buf + off + 8) != record_check(id, chunk))
                    break; /* A torn append: everything after it is unsynced. */
                if (!done[chunk]) {
                    done[chunk] = 1;
                    (*resumed_chunks)++;
                }
            }
            /* Drop a torn tail so that new records follow good ones. */
            if (off != len && ftruncate(fd, (off_t)off) < 0)
                FAIL_IF(1, -errno, "%s: truncate: %s", path, strerror(errno));
            *fd_out = fd;
            free(buf);
            return DLC_OK;
        }
        close(fd);
        fd = -1;
    } else if (errno != ENOENT) {
        return dlc__errorf(-errno, "%s: open: %s", path, strerror(errno));
    }
    /* No journal of this object: start a fresh one. */
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FAIL_IF(fd < 0, -errno, "%s: create: %s", path, strerror(errno));
    uint8_t h[JOURNAL_HEADER];
    header_bytes(id, h);
    CHECK(write_all(fd, h, sizeof h, 0, path));
    FAIL_IF(fdatasync(fd) < 0, -errno, "%s: fdatasync: %s", path, strerror(errno));
    CHECK(dlc__fsync_dir(path));
    *fd_out = fd;
    return DLC_OK;
fail:
    free(buf);
    if (fd >= 0)
        close(fd);
    return rc;
}

dlc_status dlc__warm_journal_append(int fd, const char *path, const dlc__warm_journal_id *id,
                                    const uint64_t *chunks, size_t n)
{
    uint8_t rec[64 * JOURNAL_RECORD];
    struct stat st;
    if (fstat(fd, &st) < 0)
        return dlc__errorf(-errno, "%s: stat: %s", path, strerror(errno));
    off_t off = st.st_size;
    while (n > 0) {
        const size_t k = n < 64 ? n : 64;
        for (size_t i = 0; i < k; i++) {
            dlc__st64(rec + i * JOURNAL_RECORD, chunks[i]);
            dlc__st64(rec + i * JOURNAL_RECORD + 8, record_check(id, chunks[i]));
        }
        const dlc_status rc = write_all(fd, rec, k * JOURNAL_RECORD, off, path);
        if (rc < 0)
            return rc;
        off += (off_t)(k * JOURNAL_RECORD);
        chunks += k;
        n -= k;
    }
    if (fdatasync(fd) < 0)
        return dlc__errorf(-errno, "%s: fdatasync: %s", path, strerror(errno));
    return DLC_OK;
}

dlc_status dlc__warm_sidecar_stat(const char *dest, dlc__warm_sidecar *sc)
{
    struct stat st;
    if (stat(dest, &st) < 0)
        return -errno;
    sc->inode = (uint64_t)st.st_ino;
    sc->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    if (!S_ISREG(st.st_mode))
        return -EISDIR;
    if ((uint64_t)st.st_size != sc->size)
        return DLC_ECHANGED;
    return DLC_OK;
}

dlc_status dlc__warm_sidecar_read(const char *path, dlc__warm_sidecar *sc)
{
    memset(sc, 0, sizeof *sc);
    FILE *f = fopen(path, "re");
    if (!f)
        return DLC_ENOTFOUND;
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
    dlc_status rc = DLC_OK;
    char tmp[4096];
    int fd = -1;
    FAIL_IF((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp, DLC_EINVAL,
            "%s: path too long", path);
    char text[4096];
    const int n = snprintf(text, sizeof text,
                           "dlcache-warm 1\nsource %s\nsize %" PRIu64 "\netag %s\ninode %" PRIu64
                           "\nmtime_ns %" PRId64 "\n",
                           sc->source, sc->size, sc->etag, sc->inode, sc->mtime_ns);
    FAIL_IF(n < 0 || (size_t)n >= sizeof text, DLC_EINVAL, "%s: sidecar too long", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FAIL_IF(fd < 0, -errno, "%s: create: %s", tmp, strerror(errno));
    CHECK(write_all(fd, text, (size_t)n, 0, tmp));
    FAIL_IF(fsync(fd) < 0, -errno, "%s: fsync: %s", tmp, strerror(errno));
    close(fd);
    fd = -1;
    FAIL_IF(rename(tmp, path) < 0, -errno, "%s: rename: %s", path, strerror(errno));
    return dlc__fsync_dir(path);
fail:
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    return rc;
}
