/* The push journal (layout in warm_internal.h): the upload id of a file's multipart upload (or
 * GCS session) and the parts the server confirmed, each with the MD5 that its ETag matched.
 *
 * It lives in a state directory of the user's, not beside the source, because the source may be
 * on a read-only or shared file system (a dataset mount, NFS seen by several pushers), because a
 * set's directory must hold exactly what the builder wrote (a journal there would be copied or
 * uploaded with it), and because a GCS session URI is a bearer capability for the object: the
 * directory is made 0700 and the journal 0600. The price is that a push resumed from another
 * account or machine starts over, which costs bandwidth, never correctness. */
#include "common.h"
#include "warm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static const char push_magic[8] = {'D', 'L', 'C', 'P', 'U', 'S', 'H', '1'};
enum { HEAD_FIXED = 56, RECORD = 40 };

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

dlc_status dlc__push_journal_path(const char *state_dir, const char *source, const char *dest,
                                  char *out, size_t cap)
{
    char dir[PATH_MAX];
    const char *base = state_dir && *state_dir ? state_dir : env("DLCACHE_STATE_DIR");
    int n;
    if (base)
        n = snprintf(dir, sizeof dir, "%s", base);
    else if (env("XDG_STATE_HOME"))
        n = snprintf(dir, sizeof dir, "%s/dlcache", env("XDG_STATE_HOME"));
    else if (env("HOME"))
        n = snprintf(dir, sizeof dir, "%s/.local/state/dlcache", env("HOME"));
    else
        return dlc__errorf(DLC_EINVAL, "push: no state directory: set DLCACHE_STATE_DIR or HOME");
    if (n < 0 || (size_t)n >= sizeof dir)
        return dlc__errorf(DLC_EINVAL, "push: state directory path too long");
    dlc_status rc = dlc__make_dirs(dir, 0700, "the push state directory");
    if (rc < 0)
        return rc;
    /* Name the journal by what it is about: the absolute path of the file and the destination. */
    char real[PATH_MAX];
    if (!realpath(source, real))
        return dlc__errorf(-errno, "%s: %s", source, strerror(errno));
    const uint64_t h = XXH3_64bits_withSeed(dest, strlen(dest), XXH3_64bits(real, strlen(real)));
    n = snprintf(out, cap, "%s/push-%016" PRIx64 ".journal", dir, h);
    if (n < 0 || (size_t)n >= cap)
        return dlc__errorf(DLC_EINVAL, "push: state directory path too long");
    return DLC_OK;
}

/* The header's bytes for @p j (id, part size, upload id); returns its length. */
static size_t header_bytes(const dlc__push_journal *j, uint8_t *h)
{
    const size_t idlen = strlen(j->upload_id);
    memcpy(h, push_magic, 8);
    dlc__st64(h + 8, j->id.size);
    dlc__st64(h + 16, j->part_size);
    dlc__st64(h + 24, j->id.inode);
    dlc__st64(h + 32, (uint64_t)j->id.mtime_ns);
    dlc__st64(h + 40, j->id.dest);
    dlc__st32(h + 48, (uint32_t)idlen);
    dlc__st32(h + 52, 0);
    memcpy(h + HEAD_FIXED, j->upload_id, idlen);
    dlc__st64(h + HEAD_FIXED + idlen, XXH3_64bits(h, HEAD_FIXED + idlen));
    return HEAD_FIXED + idlen + 8;
}

static void record_bytes(uint64_t seed, uint32_t part, uint32_t aux, uint64_t len,
                         const uint8_t md5[16], uint8_t b[RECORD])
{
    dlc__st32(b, part);
    dlc__st32(b + 4, aux);
    dlc__st64(b + 8, len);
    memcpy(b + 16, md5, 16);
    dlc__st64(b + 32, XXH3_64bits_withSeed(b, 32, seed));
}

static uint64_t part_len(const dlc__push_journal *j, uint32_t part)
{
    const uint64_t off = (uint64_t)(part - 1) * j->part_size;
    return j->id.size - off < j->part_size ? j->id.size - off : j->part_size;
}

/* Parts of a file of @p size in parts of @p part_size (> 0); 1 for an empty file. Written
 * without size + part_size - 1, which wraps for a part size read from a damaged journal. */
static uint64_t count_parts(uint64_t size, uint64_t part_size)
{
    const uint64_t n = size / part_size + (size % part_size != 0);
    return n == 0 ? 1 : n;
}

/* Size the part tables for the journal's part size. */
static dlc_status plan_parts(dlc__push_journal *j)
{
    const uint64_t n = count_parts(j->id.size, j->part_size);
    if (n > DLC__PUSH_MAX_PARTS)
        return dlc__errorf(DLC_EINVAL, "%s: %" PRIu64 " parts", j->path, n);
    free(j->have);
    free(j->md5s);
    j->nparts = (uint32_t)n;
    j->have = calloc(n, 1);
    j->md5s = calloc(n, 16);
    j->complete = 0;
    if (!j->have || !j->md5s)
        return dlc__errorf(-ENOMEM, "push: out of memory");
    return DLC_OK;
}

/* Take the records of @p b[off..len) up to the first bad one; returns where the good ones end. */
static size_t read_records(dlc__push_journal *j, const uint8_t *b, size_t off, size_t len)
{
    for (; off + RECORD <= len; off += RECORD) {
        const uint32_t part = dlc__ld32(b + off), aux = dlc__ld32(b + off + 4);
        const uint64_t plen = dlc__ld64(b + off + 8);
        uint8_t want[RECORD];
        record_bytes(j->seed, part, aux, plen, b + off + 16, want);
        if (memcmp(want, b + off, RECORD) != 0 || part > j->nparts ||
            (part > 0 && plen != part_len(j, part)) || (part == 0 && plen != j->id.size))
            break;
        if (part == 0) {
            j->complete = 1;
            j->final_parts = aux;
            memcpy(j->final_md5, b + off + 16, 16);
        } else {
            j->have[part - 1] = 1;
            memcpy(j->md5s + 16 * (size_t)(part - 1), b + off + 16, 16);
        }
    }
    return off;
}

/* Parse the journal's bytes; *matched when its header is one of @p id. */
static dlc_status parse(dlc__push_journal *j, const uint8_t *b, size_t len,
                        const dlc__push_ident *id, int *matched, char *stale, size_t stale_cap)
{
    if (len < HEAD_FIXED + 8 || memcmp(b, push_magic, 8) != 0)
        return DLC_OK;
    const uint32_t idlen = dlc__ld32(b + 48);
    if (idlen == 0 || idlen >= DLC__PUSH_ID_MAX || HEAD_FIXED + (size_t)idlen + 8 > len ||
        dlc__ld64(b + HEAD_FIXED + idlen) != XXH3_64bits(b, HEAD_FIXED + idlen))
        return DLC_OK;
    const dlc__push_ident got = {.size = dlc__ld64(b + 8),
                                 .inode = dlc__ld64(b + 24),
                                 .mtime_ns = (int64_t)dlc__ld64(b + 32),
                                 .dest = dlc__ld64(b + 40)};
    const uint64_t part_size = dlc__ld64(b + 16);
    if (got.dest != id->dest)
        return DLC_OK;
    if (got.size != id->size || got.inode != id->inode || got.mtime_ns != id->mtime_ns ||
        part_size == 0 || count_parts(got.size, part_size) > DLC__PUSH_MAX_PARTS) {
        /* The same destination, an older version of the file (or a header no push of ours
         * writes): its upload is abandoned. */
        if (stale && (size_t)idlen < stale_cap)
            snprintf(stale, stale_cap, "%.*s", (int)idlen, (const char *)b + HEAD_FIXED);
        return DLC_OK;
    }
    j->part_size = part_size;
    snprintf(j->upload_id, sizeof j->upload_id, "%.*s", (int)idlen, (const char *)b + HEAD_FIXED);
    j->seed = XXH3_64bits(b, HEAD_FIXED + idlen + 8);
    const dlc_status rc = plan_parts(j);
    if (rc < 0)
        return rc;
    j->end = read_records(j, b, HEAD_FIXED + idlen + 8, len);
    *matched = 1;
    return DLC_OK;
}

/* Read the whole journal (small: a header and at most 10,001 records) and parse it. */
static dlc_status load(dlc__push_journal *j, const dlc__push_ident *id, int *matched, char *stale,
                       size_t stale_cap)
{
    struct stat st;
    if (fstat(j->fd, &st) < 0)
        return dlc__errorf(-errno, "%s: stat: %s", j->path, strerror(errno));
    const size_t max = HEAD_FIXED + DLC__PUSH_ID_MAX + 8 + (DLC__PUSH_MAX_PARTS + 2) * RECORD;
    const size_t len = (size_t)st.st_size < max ? (size_t)st.st_size : max;
    uint8_t *b = malloc(len + 1);
    if (!b)
        return dlc__errorf(-ENOMEM, "push: out of memory");
    dlc_status rc = DLC_OK;
    if (pread(j->fd, b, len, 0) != (ssize_t)len)
        rc = dlc__errorf(-EIO, "%s: short read", j->path);
    else
        rc = parse(j, b, len, id, matched, stale, stale_cap);
    free(b);
    /* Cut a torn or damaged tail, so that new records follow the good ones and the good records
     * that happen to lie behind a bad one are not read back after them. */
    if (rc == DLC_OK && *matched && j->end < (uint64_t)st.st_size &&
        ftruncate(j->fd, (off_t)j->end) < 0)
        rc = dlc__errorf(-errno, "%s: truncate: %s", j->path, strerror(errno));
    return rc;
}

dlc_status dlc__push_journal_open(dlc__push_journal *j, const char *path, const dlc__push_ident *id,
                                  int *matched, char *stale, size_t stale_cap)
{
    memset(j, 0, sizeof *j);
    j->fd = j->dir_fd = -1;
    *matched = 0;
    if (stale && stale_cap)
        stale[0] = '\0';
    if ((size_t)snprintf(j->path, sizeof j->path, "%s", path) >= sizeof j->path)
        return dlc__errorf(DLC_EINVAL, "%s: path too long", path);
    j->id = *id;
    /* Opened, and at the end removed, under its folder held open, never via a link (a regular
     * file only): a folder swapped meanwhile moves neither elsewhere. Owner-only before a byte
     * is written: a GCS session URI is a secret. */
    dlc_status orc = dlc__open_parent_dir(path, "the push journal", &j->dir_fd);
    if (orc == DLC_OK)
        orc = dlc__open_own_at(j->dir_fd, path, O_RDWR | O_CREAT, &j->fd);
    if (orc == DLC_OK && fchmod(j->fd, 0600) < 0)
        orc = dlc__errorf(-errno, "%s: chmod of the push journal: %s", path, strerror(errno));
    if (orc < 0) {
        dlc__push_journal_close(j, 0);
        return orc;
    }
    /* Two pushes of one file to one place would each journal the other's parts as theirs. */
    if (flock(j->fd, LOCK_EX | LOCK_NB) < 0) {
        const int e = errno;
        dlc__push_journal_close(j, 0);
        if (e == EWOULDBLOCK)
            return dlc__errorf(DLC_ESTATE,
                               "another push of this file to this destination is running (%s "
                               "is locked)",
                               path);
        return dlc__errorf(-e, "%s: flock: %s", path, strerror(e));
    }
    const dlc_status rc = load(j, id, matched, stale, stale_cap);
    if (rc < 0) {
        /* One owner: a failed open leaves no lock held and nothing for the caller to free (the
         * fuzzer found the descriptor, and its lock, left open here). */
        dlc__push_journal_close(j, 0);
        *matched = 0;
    }
    return rc;
}

static dlc_status write_all(const dlc__push_journal *j, const uint8_t *p, size_t n, off_t off)
{
    while (n > 0) {
        const ssize_t w = pwrite(j->fd, p, n, off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return dlc__errorf(-errno, "%s: write: %s", j->path, strerror(errno));
        p += w;
        n -= (size_t)w;
        off += w;
    }
    return DLC_OK;
}

dlc_status dlc__push_journal_start(dlc__push_journal *j, uint64_t part_size, const char *upload_id)
{
    const size_t idlen = strlen(upload_id);
    if (idlen == 0 || idlen >= sizeof j->upload_id)
        return dlc__errorf(DLC_EINVAL, "%s: an upload id of %zu bytes", j->path, idlen);
    j->part_size = part_size;
    memcpy(j->upload_id, upload_id, idlen + 1);
    dlc_status rc = plan_parts(j);
    if (rc < 0)
        return rc;
    uint8_t h[HEAD_FIXED + DLC__PUSH_ID_MAX + 8];
    const size_t n = header_bytes(j, h);
    j->seed = XXH3_64bits(h, n);
    /* Truncate in place rather than recreate, so that the lock stays with this descriptor. */
    if (ftruncate(j->fd, 0) < 0)
        return dlc__errorf(-errno, "%s: truncate: %s", j->path, strerror(errno));
    rc = write_all(j, h, n, 0);
    if (rc < 0)
        return rc;
    if (fdatasync(j->fd) < 0)
        return dlc__errorf(-errno, "%s: fdatasync: %s", j->path, strerror(errno));
    j->end = n;
    return dlc__fsync_dir(j->path);
}

static dlc_status append(dlc__push_journal *j, uint32_t part, uint32_t aux, uint64_t len,
                         const uint8_t md5[16])
{
    uint8_t b[RECORD];
    record_bytes(j->seed, part, aux, len, md5, b);
    const dlc_status rc = write_all(j, b, RECORD, (off_t)j->end);
    if (rc < 0)
        return rc;
    if (fdatasync(j->fd) < 0)
        return dlc__errorf(-errno, "%s: fdatasync: %s", j->path, strerror(errno));
    j->end += RECORD;
    return DLC_OK;
}

dlc_status dlc__push_journal_part(dlc__push_journal *j, uint32_t part, uint64_t len,
                                  const uint8_t md5[16])
{
    if (part == 0 || part > j->nparts || len != part_len(j, part))
        return dlc__errorf(DLC_EINVAL, "%s: part %u of %u, %" PRIu64 " bytes", j->path, part,
                           j->nparts, len);
    const dlc_status rc = append(j, part, 0, len, md5);
    if (rc == DLC_OK) {
        j->have[part - 1] = 1;
        memcpy(j->md5s + 16 * (size_t)(part - 1), md5, 16);
    }
    return rc;
}

dlc_status dlc__push_journal_complete(dlc__push_journal *j, const uint8_t md5[16], uint32_t parts)
{
    const dlc_status rc = append(j, 0, parts, j->id.size, md5);
    if (rc == DLC_OK) {
        j->complete = 1;
        j->final_parts = parts;
        memcpy(j->final_md5, md5, 16);
    }
    return rc;
}

void dlc__push_journal_close(dlc__push_journal *j, int remove)
{
    if (j->fd >= 0) {
        /* Unlink while the lock is held, so that no other push opens the name meanwhile. */
        if (remove)
            unlinkat(j->dir_fd, dlc__at_name(j->dir_fd, j->path), 0);
        close(j->fd);
    }
    if (j->dir_fd >= 0)
        close(j->dir_fd);
    j->dir_fd = -1;
    free(j->have);
    free(j->md5s);
    /* The session URI of GCS is a credential for the object. */
    memset(j->upload_id, 0, sizeof j->upload_id);
    j->fd = -1;
    j->have = NULL;
    j->md5s = NULL;
}
