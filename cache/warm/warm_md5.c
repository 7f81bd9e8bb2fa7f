/* MD5 for the checks of object storage: S3's ETags (the MD5 of a part; the MD5 of the parts'
 * MD5s with "-N" for a multipart object; the plain MD5 where a server reports that instead) and
 * GCS's md5Hash. libcurl offers no digests, so these come from OpenSSL's libcrypto (EVP), the
 * library libcurl itself is built on in Debian (libcurl4-openssl-dev): no second crypto library
 * is loaded into the process, and EVP is OpenSSL's maintained interface (the MD5_* calls are
 * deprecated in OpenSSL 3). MD5 here is an integrity check against the server's own MD5, never
 * a security measure. */
#include "common.h"
#include "warm_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

dlc_status dlc__md5_begin(dlc__md5 *m)
{
    EVP_MD_CTX *ctx = m->ctx ? m->ctx : EVP_MD_CTX_new();
    if (!ctx)
        return dlc__errorf(-ENOMEM, "warm: out of memory");
    m->ctx = ctx;
    if (EVP_DigestInit_ex(ctx, EVP_md5(), NULL) != 1)
        return dlc__errorf(DLC_ENOSYS, "warm: libcrypto refused MD5 (a FIPS-only configuration?)");
    return DLC_OK;
}

void dlc__md5_update(dlc__md5 *m, const void *p, size_t n)
{
    if (n > 0)
        EVP_DigestUpdate(m->ctx, p, n);
}

void dlc__md5_end(dlc__md5 *m, uint8_t out[16])
{
    unsigned int len = 16;
    EVP_DigestFinal_ex(m->ctx, out, &len);
}

void dlc__md5_free(dlc__md5 *m)
{
    EVP_MD_CTX_free(m->ctx);
    m->ctx = NULL;
}

void dlc__md5_hex(const uint8_t md5[16], char out[33])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[md5[i] >> 4];
        out[2 * i + 1] = hex[md5[i] & 15];
    }
    out[32] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int dlc__warm_etag_parse(const char *etag, uint8_t md5[16], uint32_t *parts)
{
    const char *p = etag;
    if (strncmp(p, "W/", 2) == 0)
        return -1; /* A weak ETag promises nothing about the bytes. */
    if (strncmp(p, DLC__WARM_ETAG_DIGEST, sizeof DLC__WARM_ETAG_DIGEST - 1) == 0)
        return -1; /* dlcache's digest of a long ETag, which no MD5 form is. */
    size_t n = strlen(p);
    if (n >= 2 && p[0] == '"' && p[n - 1] == '"') {
        p++;
        n -= 2;
    }
    if (n < 32)
        return -1;
    for (int i = 0; i < 16; i++) {
        const int hi = hexval(p[2 * i]), lo = hexval(p[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        md5[i] = (uint8_t)(hi << 4 | lo);
    }
    *parts = 0;
    if (n == 32)
        return 0;
    if (p[32] != '-' || n == 33 || n > 33 + 5)
        return -1;
    uint32_t v = 0;
    for (size_t i = 33; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (uint32_t)(p[i] - '0');
    }
    if (v == 0 || v > DLC__PUSH_MAX_PARTS)
        return -1;
    *parts = v;
    return 0;
}

void dlc__warm_multipart_etag(const uint8_t *md5s, size_t n, char out[DLC__WARM_ETAG_MAX])
{
    uint8_t d[16];
    unsigned int len = 16;
    /* EVP_Digest() does init, update and final in one call; it cannot fail for MD5 once
     * dlc__md5_begin() has worked in this process, and callers hold part MD5s made with it. */
    EVP_Digest(md5s, n * 16, d, &len, EVP_md5(), NULL);
    char hex[33];
    dlc__md5_hex(d, hex);
    snprintf(out, DLC__WARM_ETAG_MAX, "\"%s-%zu\"", hex, n);
}

dlc_status dlc__md5_file_range(int fd, const char *path, uint64_t off, uint64_t len,
                               uint8_t out[16])
{
    enum { BUF = 1 << 20 };
    dlc__md5 m = {0};
    uint8_t *buf = malloc(BUF);
    dlc_status rc = buf ? dlc__md5_begin(&m) : dlc__errorf(-ENOMEM, "warm: out of memory");
    while (rc == DLC_OK && len > 0) {
        const size_t want = len < BUF ? (size_t)len : BUF;
        const ssize_t got = pread(fd, buf, want, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            rc = got < 0 ? dlc__errorf(-errno, "%s: read: %s", path, strerror(errno))
                         : dlc__errorf(DLC_ECHANGED, "%s: shorter than expected (changed?)", path);
            break;
        }
        dlc__md5_update(&m, buf, (size_t)got);
        off += (uint64_t)got;
        len -= (uint64_t)got;
    }
    if (rc == DLC_OK)
        dlc__md5_end(&m, out);
    dlc__md5_free(&m);
    free(buf);
    return rc;
}

/* Parts hashed by several threads: each takes the next part number from a shared counter. */
typedef struct etag_work {
    int fd;
    const char *path;
    uint64_t size;
    uint64_t part_size;
    uint32_t nparts;
    uint8_t *md5s;
    pthread_mutex_t mu;
    uint32_t next;
    dlc_status rc;
    char msg[1024];
} etag_work;

static void *etag_thread(void *arg)
{
    etag_work *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        const uint32_t i = w->rc == DLC_OK && w->next < w->nparts ? w->next++ : UINT32_MAX;
        pthread_mutex_unlock(&w->mu);
        if (i == UINT32_MAX)
            return NULL;
        const uint64_t off = (uint64_t)i * w->part_size;
        const uint64_t len = w->size - off < w->part_size ? w->size - off : w->part_size;
        const dlc_status rc = dlc__md5_file_range(w->fd, w->path, off, len, w->md5s + 16 * i);
        if (rc < 0) {
            pthread_mutex_lock(&w->mu);
            if (w->rc == DLC_OK) {
                w->rc = rc;
                snprintf(w->msg, sizeof w->msg, "%s", dlc_errmsg());
            }
            pthread_mutex_unlock(&w->mu);
        }
    }
}

/* The MD5 of each part of @p part_size bytes, on up to one thread per core. */
static dlc_status hash_parts(etag_work *w)
{
    pthread_t th[64];
    uint32_t n = dlc__cpu_count();
    if (n > 64)
        n = 64;
    if (n > w->nparts)
        n = w->nparts;
    pthread_mutex_init(&w->mu, NULL);
    uint32_t started = 0;
    for (; started < n; started++)
        if (pthread_create(&th[started], NULL, etag_thread, w) != 0)
            break;
    if (started == 0)
        etag_thread(w);
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&w->mu);
    return w->rc < 0 ? dlc__errorf(w->rc, "%s", w->msg) : DLC_OK;
}

dlc_status dlc__warm_file_etag(int fd, const char *path, uint64_t size, uint64_t part_size,
                               int multipart, char out[DLC__WARM_ETAG_MAX])
{
    char hex[33];
    uint8_t d[16];
    if (!multipart) {
        const dlc_status rc = dlc__md5_file_range(fd, path, 0, size, d);
        if (rc < 0)
            return rc;
        dlc__md5_hex(d, hex);
        snprintf(out, DLC__WARM_ETAG_MAX, "\"%s\"", hex);
        return DLC_OK;
    }
    if (part_size == 0 || size == 0)
        return dlc__errorf(DLC_EINVAL, "%s: no parts to hash", path);
    const uint64_t nparts = (size + part_size - 1) / part_size;
    if (nparts > DLC__PUSH_MAX_PARTS)
        return dlc__errorf(DLC_EINVAL, "%s: %llu parts, more than S3's %d", path,
                           (unsigned long long)nparts, DLC__PUSH_MAX_PARTS);
    etag_work w = {.fd = fd,
                   .path = path,
                   .size = size,
                   .part_size = part_size,
                   .nparts = (uint32_t)nparts,
                   .md5s = malloc((size_t)nparts * 16)};
    if (!w.md5s)
        return dlc__errorf(-ENOMEM, "warm: out of memory");
    const dlc_status rc = hash_parts(&w);
    if (rc == DLC_OK)
        dlc__warm_multipart_etag(w.md5s, w.nparts, out);
    free(w.md5s);
    return rc;
}

void dlc__md5_base64(const uint8_t md5[16], char out[25])
{
    EVP_EncodeBlock((unsigned char *)out, md5, 16);
}

int dlc__md5_from_base64(const char *b64, uint8_t md5[16])
{
    /* 16 bytes are 22 characters and "==": EVP_DecodeBlock() counts the padding as bytes. */
    uint8_t d[24];
    if (strlen(b64) != 24 || b64[22] != '=' || b64[23] != '=')
        return -1;
    if (EVP_DecodeBlock(d, (const unsigned char *)b64, 24) != 18)
        return -1;
    memcpy(md5, d, 16);
    return 0;
}

dlc_status dlc__warm_check_md5(const dlc__warm_object *o, int fd, const char *path,
                               const char *shown, int *checked)
{
    char want[DLC__WARM_ETAG_MAX], got[DLC__WARM_ETAG_MAX];
    uint8_t md5[16];
    uint32_t parts = 0;
    dlc_status rc = DLC_OK;
    if (checked)
        *checked = 0;
    if (!o->pushed)
        return DLC_OK;
    if (*o->goog_md5) {
        snprintf(want, sizeof want, "%s", o->goog_md5);
        rc = dlc__md5_file_range(fd, path, 0, o->size, md5);
        dlc__md5_base64(md5, got);
    } else if (dlc__warm_etag_parse(o->etag, md5, &parts) == 0 &&
               (parts == 0 || (o->push_part_size > 0 &&
                               (o->size + o->push_part_size - 1) / o->push_part_size == parts))) {
        snprintf(want, sizeof want, "%s", o->etag);
        rc = dlc__warm_file_etag(fd, path, o->size, o->push_part_size, parts > 0, got);
    } else {
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: pushed in parts of %" PRIu64 " bytes, but its ETag %s is not "
                           "the MD5 of such parts",
                           shown, o->push_part_size, o->etag);
    }
    if (rc < 0)
        return rc;
    if (strcasecmp(want, got) != 0)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: the downloaded bytes hash to %s, the object says %s: refused",
                           shown, got, want);
    if (checked)
        *checked = 1;
    return DLC_OK;
}
