/* cachebuild --tokens (include/dlcache/tokens.h, dlc_tokens_build()): documents from JSON lines
 * (lists of ids, or text tokenized by a SentencePiece model through the plugin of spm/), flat
 * nanoGPT token files, .npy arrays and Megatron-LM indexed datasets, written in source order
 * through the token writer. Every source is untrusted: each size is checked against the file
 * before it is used, and a bad one is named with the file, the line or record and the reason. */
#include "build_internal.h"
#include "common.h"
#include "spm/spm_api.h"
#include "store_set.h"
#include "store_internal.h"

#include <dlcache/set.h>
#include <dlcache/tokens.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define SPM_PLUGIN "libdlcache_spm.so"

/* Return a failure at once (for helpers without a cleanup ladder), keeping its message. */
#define CHECK_RC(expr)                                                                             \
    do {                                                                                           \
        const dlc_status rc_ = (expr);                                                             \
        if (rc_ < 0)                                                                               \
            return rc_;                                                                            \
    } while (0)

typedef struct tb {
    const dlc_tokens_build_options *o;
    dlc_token_writer *w;
    uint32_t eos;
    uint32_t *ids; /* One document's ids, grown as needed. */
    size_t cap;
    uint64_t skipped;
    /* A store set (options.shards): the first pass only counts the source documents (items);
     * the second writes item i to the part whose range holds it, opening each part in turn. */
    int counting;
    uint64_t read; /* Source documents read in this pass and the one before (progress). */
    uint64_t item, nitems;
    uint32_t part;              /* The part being written (parts: none yet). */
    uint64_t documents, tokens; /* Of the parts finished. */
    dlc_token_writer_config wc;
    /* The tokenizer, when there is one. */
    void *dl;
    const dlc__spm_api *spm;
    void *model;
} tb;

/* A whole file mapped read-only (an empty file maps to NULL with size 0). */
typedef struct mapped {
    const uint8_t *p;
    size_t size;
} mapped;

/* The file at @p path mapped, named @p what in a refusal. */
static dlc_status map_file_as(const char *path, const char *what, mapped *m)
{
    m->p = NULL;
    m->size = 0;
    struct stat st;
    /* Never blocks on a FIFO or a device: a regular file or a named refusal. */
    const int fd = dlc__open_regular(path, 0, what, &st);
    if (fd < 0)
        return fd;
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int e = errno;
            close(fd);
            return dlc__errorf(-e, "%s: cannot map: %s", path, strerror(e));
        }
        m->p = p;
        m->size = (size_t)st.st_size;
        madvise(p, m->size, MADV_SEQUENTIAL);
    }
    close(fd);
    return DLC_OK;
}

static dlc_status map_file(const char *path, mapped *m)
{
    return map_file_as(path, "token source", m);
}

static void unmap_file(mapped *m)
{
    if (m->p)
        munmap((void *)m->p, m->size);
    m->p = NULL;
}

static dlc_status grow(tb *b, size_t n)
{
    if (n <= b->cap)
        return DLC_OK;
    /* A size no allocation could hold is refused before the doubling or the multiplication
     * can wrap (a wrapped capacity of 0 looped for ever, or made realloc() free the buffer). */
    if (n > SIZE_MAX / 2 / sizeof *b->ids)
        return dlc__errorf(-ENOMEM, "out of memory for a document of %zu tokens", n);
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < n)
        cap *= 2;
    uint32_t *p = realloc(b->ids, cap * sizeof *p);
    if (!p)
        return dlc__errorf(-ENOMEM, "out of memory for a document of %zu tokens", n);
    b->ids = p;
    b->cap = cap;
    return DLC_OK;
}

/* Part I of N takes the items [I*n/N, (I+1)*n/N), as a store set's parts do (docs/SETS.md). */
static uint64_t part_first(const tb *b, uint32_t part)
{
    return (uint64_t)((unsigned __int128)b->nitems * part / b->o->shards);
}

/* Open the parts in order until the open one holds @p item, finishing each one passed; with
 * UINT64_MAX, finish every part (those left get no document). */
static dlc_status next_part(tb *b, uint64_t item)
{
    const uint32_t n = b->o->shards;
    for (;;) {
        if (b->w && item != UINT64_MAX && item < part_first(b, b->part + 1))
            return DLC_OK;
        if (b->w) {
            b->documents += dlc_token_writer_count(b->w);
            b->tokens += dlc_token_writer_tokens(b->w);
            const dlc_status rc = dlc_token_writer_finish(b->w);
            b->w = NULL;
            if (rc != DLC_OK)
                return rc;
        }
        const uint32_t next = b->part == UINT32_MAX ? 0 : b->part + 1;
        if (next >= n) {
            if (item == UINT64_MAX)
                return DLC_OK;
            return dlc__errorf(DLC_ECHANGED,
                               "%s: the sources hold more than the %" PRIu64
                               " documents counted a moment ago: they changed while read",
                               b->o->output, b->nitems);
        }
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/part-%05u-of-%05u.dlc", b->o->output, next, n);
        dlc_token_writer_config wc = b->wc;
        wc.part = next;
        wc.parts = n;
        wc.first_item = part_first(b, next);
        wc.end_item = part_first(b, next + 1);
        CHECK_RC(dlc_token_writer_open(path, &wc, &b->w));
        b->part = next;
    }
}

/* Append one document; @p where names it in an error ("FILE: line 3"). */
static dlc_status emit(tb *b, const uint32_t *ids, uint64_t n, const char *file, const char *what,
                       uint64_t number)
{
    if (b->o->progress && (++b->read & 255) == 0 && b->o->progress(b->o->progress_user, b->read))
        return dlc__errorf(DLC_ECANCELED, "%s: canceled at %s %" PRIu64, file, what, number);
    if (b->counting) {
        b->item++;
        return DLC_OK;
    }
    if (b->o->shards && b->o->one_part) {
        /* One part of many: the items of the others are read (they must be counted) and left. */
        const uint64_t i = b->item++;
        if (i < part_first(b, b->o->part) || i >= part_first(b, b->o->part + 1))
            return DLC_OK;
    } else {
        if (b->o->shards)
            CHECK_RC(next_part(b, b->item));
        b->item++;
    }
    if (n == 0)
        b->skipped++;
    const dlc_status rc = dlc_token_writer_add(b->w, ids, n);
    if (rc != DLC_OK) {
        /* The writer names the store's document ("document 7: "); the place in the source,
         * named here, is the one the user can find, and the two together read as a repeat. */
        const char *m = dlc_errmsg();
        size_t d = strncmp(m, "document ", 9) == 0 ? strspn(m + 9, "0123456789") : 0;
        if (d > 0 && strncmp(m + 9 + d, ": ", 2) == 0)
            m += 9 + d + 2;
        char why[512];
        snprintf(why, sizeof why, "%s", m);
        return dlc__errorf(rc, "%s: %s %" PRIu64 ": %s", file, what, number, why);
    }
    return DLC_OK;
}

/* ---- Flat ids, split after each end-of-document id (nanoGPT .bin, 1-D .npy) ------------------ */

/* @p n elements of @p esize bytes (1, 2, 4, 8), signed or not, little-endian, at @p p. */
static dlc_status split_flat(tb *b, const char *file, const uint8_t *p, uint64_t n, size_t esize,
                             int is_signed)
{
    uint64_t doc = 0, start = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v = 0;
        const uint8_t *e = p + i * esize;
        for (size_t k = 0; k < esize; k++)
            v |= (uint64_t)e[k] << (8 * k);
        if (is_signed && esize < 8 && (v >> (8 * esize - 1)) & 1)
            v |= ~0ull << (8 * esize); /* Sign-extend: a negative id is refused below. */
        if (v > UINT32_MAX)
            return dlc__errorf(DLC_EINVAL, "%s: token %" PRIu64 " is %" PRId64 ", not an id", file,
                               i, (int64_t)v);
        CHECK_RC(grow(b, (size_t)(i - start + 1)));
        b->ids[i - start] = (uint32_t)v;
        if (v == b->eos) {
            CHECK_RC(emit(b, b->ids, i - start + 1, file, "document", doc));
            doc++;
            start = i + 1;
        }
    }
    if (start < n)
        CHECK_RC(emit(b, b->ids, n - start, file, "document", doc));
    return DLC_OK;
}

static dlc_status read_bin(tb *b, const char *file)
{
    mapped m;
    CHECK_RC(map_file(file, &m));
    const size_t esize = b->o->bin_dtype == DLC_DTYPE_INT32 ? 4 : 2;
    dlc_status rc = DLC_OK;
    if (m.size % esize)
        rc = dlc__errorf(DLC_EINVAL, "%s: %zu bytes, not a whole number of %s tokens", file, m.size,
                         esize == 2 ? "uint16" : "uint32");
    else
        rc = split_flat(b, file, m.p, m.size / esize, esize, 0);
    unmap_file(&m);
    return rc;
}

/* ---- .npy ------------------------------------------------------------------------------------ */

/* The text after 'KEY': in the header dict, or NULL. */
static const char *npy_key(const char *h, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s':", key);
    const char *p = strstr(h, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    return p;
}

static dlc_status read_npy(tb *b, const char *file)
{
    mapped m;
    CHECK_RC(map_file(file, &m));
    dlc_status rc = DLC_OK;
    char h[4096];
    FAIL_IF(m.size < 10 || memcmp(m.p, "\x93NUMPY", 6) != 0, DLC_EINVAL,
            "%s: not a .npy file (no \\x93NUMPY magic)", file);
    const unsigned major = m.p[6];
    size_t hlen, hoff;
    if (major == 1) {
        hlen = (size_t)m.p[8] | (size_t)m.p[9] << 8;
        hoff = 10;
    } else {
        FAIL_IF(major > 3 || m.size < 12, DLC_EINVAL, "%s: .npy version %u.%u is not read", file,
                major, m.p[7]);
        hlen = dlc__ld32(m.p + 8);
        hoff = 12;
    }
    FAIL_IF(hlen >= sizeof h || hoff + hlen > m.size, DLC_EINVAL,
            "%s: .npy header of %zu bytes does not fit the file or 4 KiB", file, hlen);
    memcpy(h, m.p + hoff, hlen);
    h[hlen] = 0;
    const char *d = npy_key(h, "descr"), *fo = npy_key(h, "fortran_order"),
               *sh = npy_key(h, "shape");
    FAIL_IF(!d || !fo || !sh || *d != '\'' || *sh != '(', DLC_EINVAL,
            "%s: .npy header without descr, fortran_order and shape: %.200s", file, h);
    FAIL_IF(strncmp(fo, "False", 5) != 0, DLC_EINVAL, "%s: a Fortran-order .npy is not read", file);
    const char order = d[1], kind = d[2];
    const int esize = d[3] - '0';
    FAIL_IF((order != '<' && order != '|') || (kind != 'u' && kind != 'i') ||
                (esize != 1 && esize != 2 && esize != 4 && esize != 8) || d[4] != '\'',
            DLC_EINVAL, "%s: .npy of %.8s: token ids are little-endian integers (<u2, <i4...)",
            file, d);
    uint64_t dims[2] = {0, 0};
    int ndim = 0;
    const char *s = sh + 1;
    while (*s && *s != ')') {
        while (*s == ' ' || *s == ',')
            s++;
        if (*s == ')')
            break;
        char *end = (char *)s;
        /* Digits only: strtoull() would take "-1" as 2^64 - 1. */
        const unsigned long long v = *s >= '0' && *s <= '9' ? strtoull(s, &end, 10) : 0;
        FAIL_IF(end == s || ndim == 2, DLC_EINVAL,
                "%s: .npy shape %.40s: token arrays are 1-D (split at the end-of-document id) or "
                "2-D (a document per row)",
                file, sh);
        dims[ndim++] = v;
        s = end;
    }
    FAIL_IF(ndim == 0, DLC_EINVAL, "%s: a 0-d .npy holds no tokens", file);
    /* Rows of no tokens take no bytes, so the size check below cannot bound their number: a
     * shape of (2^64 - 1, 0) would be read as that many empty documents. */
    FAIL_IF(ndim == 2 && dims[1] == 0, DLC_EINVAL,
            "%s: .npy shape (%" PRIu64 ", 0): rows of no tokens hold no documents", file, dims[0]);
    FAIL_IF(ndim == 2 && dims[0] > UINT64_MAX / dims[1], DLC_EINVAL,
            "%s: .npy shape (%" PRIu64 ", %" PRIu64 ") is larger than any file", file, dims[0],
            dims[1]);
    const uint64_t count = ndim == 1 ? dims[0] : dims[0] * dims[1];
    FAIL_IF(count > (m.size - hoff - hlen) / (uint64_t)esize ||
                count * (uint64_t)esize != m.size - hoff - hlen,
            DLC_EINVAL, "%s: .npy data is %zu bytes, the shape wants %" PRIu64 " x %d", file,
            m.size - hoff - hlen, count, esize);
    const uint8_t *data = m.p + hoff + hlen;
    if (ndim == 1) {
        rc = split_flat(b, file, data, count, (size_t)esize, kind == 'i');
    } else if (dims[0] > 0) {
        /* With rows, the size check above bounds a row's length by the file's; (0, 2^62)
         * holds nothing, whatever it says a row would hold. */
        CHECK(grow(b, (size_t)dims[1] + 1));
        for (uint64_t r = 0; r < dims[0]; r++) {
            const uint8_t *row = data + r * dims[1] * (uint64_t)esize;
            for (uint64_t i = 0; i < dims[1]; i++) {
                uint64_t v = 0;
                for (int k = 0; k < esize; k++)
                    v |= (uint64_t)row[i * (uint64_t)esize + (uint64_t)k] << (8 * k);
                if (kind == 'i' && esize < 8 && (v >> (8 * esize - 1)) & 1)
                    v |= ~0ull << (8 * esize);
                FAIL_IF(v > UINT32_MAX, DLC_EINVAL,
                        "%s: row %" PRIu64 ": token %" PRIu64 " is %" PRId64 ", not an id", file, r,
                        i, (int64_t)v);
                b->ids[i] = (uint32_t)v;
            }
            CHECK(emit(b, b->ids, dims[1], file, "row", r));
        }
    }
fail:
    unmap_file(&m);
    return rc;
}

/* ---- Megatron-LM indexed dataset (MMIDIDX) ----------------------------------------------------
 */

/* Megatron's DType codes (megatron/core/datasets/indexed_dataset.py): element size and sign. */
static int megatron_dtype(unsigned code, size_t *esize, int *is_signed)
{
    static const struct {
        uint8_t size, sign;
    } t[9] = {{0, 0}, {1, 0}, {1, 1}, {2, 1}, {4, 1}, {8, 1}, {0, 0}, {0, 0}, {2, 0}};
    if (code >= 9 || t[code].size == 0)
        return -1; /* 6 float64, 7 float32: not token ids. */
    *esize = t[code].size;
    *is_signed = t[code].sign;
    return 0;
}

/* PATH.idx and PATH.bin from a source named PREFIX.idx, PREFIX.bin or PREFIX. */
static void megatron_paths(const char *src, char *idx, char *bin, size_t cap)
{
    size_t n = strlen(src);
    if (n >= 4 && (strcmp(src + n - 4, ".idx") == 0 || strcmp(src + n - 4, ".bin") == 0))
        n -= 4;
    snprintf(idx, cap, "%.*s.idx", (int)n, src);
    snprintf(bin, cap, "%.*s.bin", (int)n, src);
}

static dlc_status read_megatron(tb *b, const char *src)
{
    char idx[PATH_MAX], bin[PATH_MAX];
    megatron_paths(src, idx, bin, sizeof idx);
    mapped mi = {0}, mb = {0};
    dlc_status rc = DLC_OK;
    CHECK(map_file(idx, &mi));
    CHECK(map_file(bin, &mb));
    FAIL_IF(mi.size < 34 || memcmp(mi.p, "MMIDIDX\0\0", 9) != 0, DLC_EINVAL,
            "%s: not a Megatron index (no MMIDIDX magic)", idx);
    FAIL_IF(dlc__ld64(mi.p + 9) != 1, DLC_EINVAL,
            "%s: Megatron index version %" PRIu64 ", this reader knows 1", idx,
            dlc__ld64(mi.p + 9));
    size_t esize;
    int is_signed;
    FAIL_IF(megatron_dtype(mi.p[17], &esize, &is_signed) != 0, DLC_EINVAL,
            "%s: Megatron dtype code %u is not an integer type", idx, mi.p[17]);
    const uint64_t nseq = dlc__ld64(mi.p + 18), ndoc = dlc__ld64(mi.p + 26);
    const uint64_t room = (mi.size - 34);
    FAIL_IF(nseq > room / 12 || ndoc > (room - nseq * 12) / 8 ||
                34 + nseq * 12 + ndoc * 8 > mi.size,
            DLC_EINVAL,
            "%s: %" PRIu64 " sequences and %" PRIu64 " document indices do not fit %zu"
            " bytes",
            idx, nseq, ndoc, mi.size);
    const uint8_t *lens = mi.p + 34, *ptrs = lens + nseq * 4, *docs = ptrs + nseq * 8;
    FAIL_IF(ndoc < 1 || dlc__ld64(docs) != 0 || dlc__ld64(docs + (ndoc - 1) * 8) != nseq,
            DLC_EINVAL, "%s: document indices do not run from 0 to the %" PRIu64 " sequences", idx,
            nseq);
    for (uint64_t d = 0; d + 1 < ndoc; d++) {
        const uint64_t s0 = dlc__ld64(docs + d * 8), s1 = dlc__ld64(docs + (d + 1) * 8);
        FAIL_IF(s1 < s0 || s1 > nseq, DLC_EINVAL,
                "%s: document %" PRIu64 ": sequences %" PRIu64 "..%" PRIu64 " of %" PRIu64, idx, d,
                s0, s1, nseq);
        uint64_t n = 0;
        for (uint64_t q = s0; q < s1; q++) {
            const uint32_t len = dlc__ld32(lens + q * 4);
            const uint64_t ptr = dlc__ld64(ptrs + q * 8);
            FAIL_IF(len > INT32_MAX || ptr > mb.size || len * (uint64_t)esize > mb.size - ptr,
                    DLC_EINVAL,
                    "%s: sequence %" PRIu64 " (document %" PRIu64 "): %u tokens at byte %" PRIu64
                    " lie outside %s (%zu bytes)",
                    idx, q, d, len, ptr, bin, mb.size);
            /* Sequences may share bytes of the .bin, so its size does not bound a document's:
             * refuse one larger than any record holds (one of uint16 ids, the smallest) before
             * reading it, not after. */
            FAIL_IF(n + len > DLC__TOKENS_DOC_MAX(2), DLC_EINVAL,
                    "%s: document %" PRIu64 ": more than %" PRIu64 " tokens (sequences %" PRIu64
                    "..%" PRIu64 "), more than a record holds",
                    idx, d, (uint64_t)DLC__TOKENS_DOC_MAX(2), s0, s1);
            CHECK(grow(b, (size_t)(n + len)));
            for (uint32_t i = 0; i < len; i++) {
                uint64_t v = 0;
                const uint8_t *e = mb.p + ptr + (uint64_t)i * esize;
                for (size_t k = 0; k < esize; k++)
                    v |= (uint64_t)e[k] << (8 * k);
                if (is_signed && esize < 8 && (v >> (8 * esize - 1)) & 1)
                    v |= ~0ull << (8 * esize);
                FAIL_IF(v > UINT32_MAX, DLC_EINVAL,
                        "%s: sequence %" PRIu64 " (document %" PRIu64 "): token %u is %" PRId64
                        ", not an id",
                        bin, q, d, i, (int64_t)v);
                b->ids[n + i] = (uint32_t)v;
            }
            n += len;
        }
        CHECK(emit(b, b->ids, n, idx, "document", d));
    }
fail:
    unmap_file(&mb);
    unmap_file(&mi);
    return rc;
}

/* ---- JSON lines ------------------------------------------------------------------------------ */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
        p++;
    return p;
}

/* A JSON array of non-negative integers below 2^32 at [p, end) into b->ids. */
static dlc_status parse_ids(tb *b, const char *p, const char *end, const char *file, uint64_t line,
                            uint64_t *n)
{
    const char *field = b->o->field ? b->o->field : "tokens";
    *n = 0;
    p = skip_ws(p, end);
    if (p == end || *p != '[')
        return dlc__errorf(DLC_EINVAL, "%s: line %" PRIu64 ": \"%s\" is not a list of token ids",
                           file, line, field);
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']')
        return DLC_OK;
    for (;;) {
        p = skip_ws(p, end);
        uint64_t v = 0;
        const char *d = p;
        while (p < end && *p >= '0' && *p <= '9' && v <= UINT32_MAX)
            v = v * 10 + (uint64_t)(*p++ - '0');
        if (p == d || v > UINT32_MAX || (p < end && (*p == '.' || *p == 'e' || *p == 'E'))) {
            const char *e = d;
            while (e < end && *e != ',' && *e != ']' && *e != '\n')
                e++;
            /* Shown whole up to 40 bytes, else cut with "..." (a cut number reads as another). */
            const int cut = e - d > 40;
            return dlc__errorf(DLC_EINVAL,
                               "%s: line %" PRIu64 ": \"%s\"[%" PRIu64 "]: %.*s%s is not a token "
                               "id (an integer 0..2^32-1)",
                               file, line, field, *n, cut ? 37 : (int)(e - d), d, cut ? "..." : "");
        }
        CHECK_RC(grow(b, (size_t)*n + 1));
        b->ids[(*n)++] = (uint32_t)v;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (p < end && *p == ']')
            return DLC_OK;
        return dlc__errorf(DLC_EINVAL, "%s: line %" PRIu64 ": \"%s\": the list is malformed", file,
                           line, field);
    }
}

static dlc_status tokenize(tb *b, const char *text, size_t len, const char *file, uint64_t line,
                           uint64_t *n)
{
    char err[256] = "";
    size_t got = 0;
    for (;;) {
        if (b->spm->encode(b->model, text, len, b->ids, b->cap, &got, err, sizeof err) != 0)
            return dlc__errorf(DLC_EINVAL, "%s: line %" PRIu64 ": tokenizer: %s", file, line, err);
        if (got <= b->cap)
            break;
        CHECK_RC(grow(b, got));
    }
    *n = got;
    return DLC_OK;
}

static dlc_status read_jsonl(tb *b, const char *file)
{
    const char *field = b->o->field ? b->o->field : b->model ? "text" : "tokens";
    struct stat st;
    const int fd = dlc__open_regular(file, 0, "token source", &st);
    if (fd < 0)
        return fd;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return dlc__errorf(-ENOMEM, "%s: cannot read", file);
    }
    dlc_status rc = DLC_OK;
    char *line = NULL, *text = NULL;
    size_t cap = 0, text_cap = 0;
    uint64_t no = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) >= 0) {
        no++;
        const char *end = line + got, *p = skip_ws(line, end);
        if (p == end)
            continue; /* A blank line, the last one most often. */
        FAIL_IF(!dlc__json_valid(line, (size_t)got), DLC_EINVAL,
                "%s: line %" PRIu64
                ": not one JSON value (malformed, or nested deeper than %d levels)",
                file, no, DLC__JSON_MAX_DEPTH);
        /* JSON text is UTF-8 (RFC 8259): a line Python's json.loads() cannot decode is not
         * read another way here. */
        const size_t bad = dlc__utf8_check(line, (size_t)got);
        FAIL_IF(bad < (size_t)got, DLC_EINVAL,
                "%s: line %" PRIu64 ": byte %zu (0x%02x) is not UTF-8, which JSON text is", file,
                no, bad + 1, (unsigned)(unsigned char)line[bad]);
        const char *vs = NULL, *ve = NULL;
        const int m = *p == '{' ? dlc__json_member(line, end, field, &vs, &ve) : -1;
        FAIL_IF(m == -2, DLC_EINVAL,
                "%s: line %" PRIu64 ": the object has two \"%s\" members: which one is meant? "
                "(readers differ: Python's json takes the last)",
                file, no, field);
        FAIL_IF(m != 0, DLC_EINVAL, "%s: line %" PRIu64 ": an object without a \"%s\" member", file,
                no, field);
        uint64_t n = 0;
        if (b->counting) {
            /* The first pass of a set counts documents; their ids wait for the second. */
        } else if (b->model) {
            /* Decoding never lengthens a JSON string: its bytes and a NUL always fit. */
            if ((size_t)(ve - vs) + 1 > text_cap) {
                free(text);
                text_cap = (size_t)(ve - vs) + 1;
                text = malloc(text_cap);
                FAIL_IF(!text, -ENOMEM, "%s: line %" PRIu64 ": out of memory", file, no);
            }
            size_t tl = 0;
            FAIL_IF(!dlc__json_string(vs, ve, text, text_cap, &tl), DLC_EINVAL,
                    "%s: line %" PRIu64 ": \"%s\" is not a string of text", file, no, field);
            CHECK(tokenize(b, text, tl, file, no, &n));
        } else {
            CHECK(parse_ids(b, vs, ve, file, no, &n));
        }
        CHECK(emit(b, b->ids, n, file, "line", no));
    }
    FAIL_IF(ferror(f), -EIO, "%s: read error after line %" PRIu64, file, no);
fail:
    free(text);
    free(line);
    fclose(f);
    return rc;
}

/* ---- The tokenizer plugin ---------------------------------------------------------------------
 */

static void *open_plugin(char *why, size_t cap)
{
    const char *env = getenv("DLCACHE_SPM_PLUGIN");
    if (env && *env) {
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            snprintf(why, cap, "DLCACHE_SPM_PLUGIN=%s: %s", env, dlerror());
        return h;
    }
    /* Beside the library (or program) holding this code, then in ../lib beside a tool of build/bin,
     * then the loader's search path. */
    Dl_info info;
    char path[PATH_MAX];
    if (dladdr((void *)&dlc_tokens_build, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        const int dn = slash ? (int)(slash - info.dli_fname) : 1;
        const char *dir = slash ? info.dli_fname : ".";
        const char *const rel[] = {"/" SPM_PLUGIN, "/../lib/" SPM_PLUGIN};
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%.*s%s", dn, dir, rel[i]);
            if (access(path, R_OK) == 0) {
                void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
                if (h)
                    return h;
                snprintf(why, cap, "%s: %s", path, dlerror());
                return NULL;
            }
        }
    }
    void *h = dlopen(SPM_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        snprintf(why, cap,
                 "%s not found (dlcache was built without libsentencepiece-dev, or set "
                 "DLCACHE_SPM_PLUGIN)",
                 SPM_PLUGIN);
    return h;
}

static dlc_status load_tokenizer(tb *b, const char *model_path, uint64_t *digest)
{
    char why[PATH_MAX + 128] = "";
    b->dl = open_plugin(why, sizeof why);
    if (!b->dl)
        return dlc__errorf(DLC_ENOSYS, "--tokenizer %s: no SentencePiece plugin: %s", model_path,
                           why);
    const dlc__spm_entry_fn entry = (dlc__spm_entry_fn)dlsym(b->dl, DLC__SPM_ENTRY);
    b->spm = entry ? entry() : NULL;
    if (!b->spm || b->spm->version != DLC__SPM_API_VERSION)
        return dlc__errorf(DLC_ENOSYS, "%s: not a SentencePiece plugin of interface version %u",
                           SPM_PLUGIN, DLC__SPM_API_VERSION);
    /* Read once, as a regular file (a FIFO never stalls the build): the model is loaded from the
     * very bytes its digest is of. */
    mapped m;
    CHECK_RC(map_file_as(model_path, "SentencePiece model", &m));
    /* A private copy: a map shows later writes to the file, and the digest must be of the
     * bytes loaded (a model is a few MB). */
    uint8_t *copy = malloc(m.size ? m.size : 1);
    if (!copy) {
        unmap_file(&m);
        return dlc__errorf(-ENOMEM, "%s: out of memory for %zu bytes", model_path, m.size);
    }
    if (m.size)
        memcpy(copy, m.p, m.size);
    unmap_file(&m);
    char err[512] = "";
    b->model = m.size ? b->spm->load(copy, m.size, err, sizeof err) : NULL;
    *digest = XXH3_64bits(copy, m.size);
    free(copy);
    if (!b->model)
        return dlc__errorf(DLC_EINVAL, "%s: not a SentencePiece model: %s", model_path,
                           *err ? err : "an empty file");
    return DLC_OK;
}

/* ---- The build --------------------------------------------------------------------------------
 */

void dlc_tokens_build_options_init_sized(dlc_tokens_build_options *o, size_t size)
{
    if (!o || size < sizeof(uint32_t))
        return;
    const size_t n = size < sizeof *o ? size : sizeof *o;
    memset(o, 0, n);
    o->struct_size = (uint32_t)n;
    if (n >= offsetof(dlc_tokens_build_options, eos_id) + sizeof o->eos_id)
        o->eos_id = -1;
    if (n >= offsetof(dlc_tokens_build_options, bin_dtype) + sizeof o->bin_dtype)
        o->bin_dtype = DLC_DTYPE_UINT16;
}

static int ends_with(const char *s, const char *suffix)
{
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static uint32_t source_format(const char *src)
{
    if (ends_with(src, ".jsonl") || ends_with(src, ".json"))
        return DLC_TOKENS_FORMAT_JSONL;
    if (ends_with(src, ".npy"))
        return DLC_TOKENS_FORMAT_NPY;
    if (ends_with(src, ".idx"))
        return DLC_TOKENS_FORMAT_MEGATRON;
    if (ends_with(src, ".bin")) {
        char idx[PATH_MAX], bin[PATH_MAX];
        megatron_paths(src, idx, bin, sizeof idx);
        char magic[9];
        struct stat st;
        const int fd = dlc__open_regular(idx, 0, NULL, &st);
        const int mm =
            fd >= 0 && pread(fd, magic, 9, 0) == 9 && memcmp(magic, "MMIDIDX\0\0", 9) == 0;
        if (fd >= 0)
            close(fd);
        dlc__clear_error();
        return mm ? DLC_TOKENS_FORMAT_MEGATRON : DLC_TOKENS_FORMAT_BIN;
    }
    return DLC_TOKENS_FORMAT_AUTO;
}

/* Every source, in order, through its reader (a pass: counting or writing). */
static dlc_status read_sources(tb *b)
{
    const dlc_tokens_build_options *o = b->o;
    dlc_status rc = DLC_OK;
    for (uint32_t i = 0; i < o->num_sources; i++) {
        const char *src = o->sources[i];
        const uint32_t f = o->format ? o->format : source_format(src);
        FAIL_IF(b->model && f != DLC_TOKENS_FORMAT_JSONL, DLC_EINVAL,
                "%s: a tokenizer reads text from JSON lines (.jsonl), not token files", src);
        switch (f) {
        case DLC_TOKENS_FORMAT_JSONL:
            CHECK(read_jsonl(b, src));
            break;
        case DLC_TOKENS_FORMAT_BIN:
            CHECK(read_bin(b, src));
            break;
        case DLC_TOKENS_FORMAT_NPY:
            CHECK(read_npy(b, src));
            break;
        case DLC_TOKENS_FORMAT_MEGATRON:
            CHECK(read_megatron(b, src));
            break;
        default:
            FAIL_IF(1, DLC_EINVAL,
                    "%s: which format? .jsonl/.json, .npy, .bin (flat, or Megatron with its .idx)"
                    " or .idx",
                    src);
        }
    }
fail:
    return rc;
}

/* A set's identity: what changes its records (the sources' names, sizes and times, the options
 * that change the stored ids, the tokenizer's digest) and its number of parts and documents. */
static uint64_t set_id(const tb *b, uint64_t tokenizer_digest)
{
    const dlc_tokens_build_options *o = b->o;
    XXH3_state_t *h = XXH3_createState();
    if (!h)
        return 0;
    XXH3_64bits_reset(h);
    const uint64_t words[] = {0x544f4b53455431ull, o->shards,   b->nitems, b->eos,
                              b->wc.vocab_size,    b->wc.dtype, o->format, o->bin_dtype,
                              tokenizer_digest};
    XXH3_64bits_update(h, words, sizeof words);
    if (o->field)
        XXH3_64bits_update(h, o->field, strlen(o->field) + 1);
    for (uint32_t i = 0; i < o->num_sources; i++) {
        struct stat st;
        memset(&st, 0, sizeof st);
        stat(o->sources[i], &st);
        const uint64_t w[2] = {(uint64_t)st.st_size, (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
                                                         (uint64_t)st.st_mtim.tv_nsec};
        XXH3_64bits_update(h, o->sources[i], strlen(o->sources[i]) + 1);
        XXH3_64bits_update(h, w, sizeof w);
    }
    const uint64_t id = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return id;
}

dlc_status dlc_tokens_build(const dlc_tokens_build_options *o, dlc_tokens_build_report *report)
{
    if (!o || !o->output || !o->sources || o->num_sources == 0)
        return dlc__errorf(DLC_EINVAL, "dlc_tokens_build: no options, output or source");
    if (o->struct_size != sizeof *o)
        return dlc__errorf(DLC_EINVAL,
                           "dlc_tokens_build: struct_size %u is not %zu: fill the options with "
                           "dlc_tokens_build_options_init()",
                           o->struct_size, sizeof *o);
    for (uint32_t i = 0; i < o->num_sources; i++)
        if (!o->sources[i])
            return dlc__errorf(DLC_EINVAL, "%s: sources[%u] is NULL (of %u)", o->output, i,
                               o->num_sources);
    for (uint32_t i = 0; i < o->num_sources; i++) {
        /* PREFIX.idx and PREFIX.bin, as a shell's PREFIX.* gives them, are one data set: read
         * for each, its documents were stored twice. */
        if ((o->format ? o->format : source_format(o->sources[i])) != DLC_TOKENS_FORMAT_MEGATRON)
            continue;
        char idx[PATH_MAX], bin[PATH_MAX], idx2[PATH_MAX];
        megatron_paths(o->sources[i], idx, bin, sizeof idx);
        struct stat a, b2;
        const int have = stat(idx, &a) == 0;
        for (uint32_t j = 0; j < i; j++) {
            if ((o->format ? o->format : source_format(o->sources[j])) !=
                DLC_TOKENS_FORMAT_MEGATRON)
                continue;
            megatron_paths(o->sources[j], idx2, bin, sizeof idx2);
            const int same = have && stat(idx2, &b2) == 0
                                 ? a.st_dev == b2.st_dev && a.st_ino == b2.st_ino
                                 : strcmp(idx, idx2) == 0;
            if (same)
                return dlc__errorf(DLC_EINVAL,
                                   "%s: sources %u (%s) and %u (%s) name one Megatron data set "
                                   "(%s and its .bin): give it once",
                                   o->output, j, o->sources[j], i, o->sources[i], idx);
        }
    }
    if (o->shards > 65536)
        return dlc__errorf(DLC_EINVAL, "%s: %u shards, at most 65536", o->output, o->shards);
    if (o->shards && o->one_part && o->part >= o->shards)
        return dlc__errorf(DLC_EINVAL, "%s: part %u of %u (parts are 0..%u)", o->output, o->part,
                           o->shards, o->shards - 1);
    if (o->bin_dtype != DLC_DTYPE_UINT16 && o->bin_dtype != DLC_DTYPE_INT32)
        return dlc__errorf(DLC_EINVAL, "%s: flat token files are uint16 or uint32, not %s",
                           o->output, dlc_dtype_name(o->bin_dtype));
    if (o->format > DLC_TOKENS_FORMAT_MEGATRON)
        return dlc__errorf(DLC_EINVAL, "%s: unknown source format %u", o->output, o->format);
    tb b = {.o = o};
    dlc_status rc = DLC_OK;
    int made_dir = 0;
    uint64_t digest = 0;
    uint32_t vocab = o->vocab_size;
    int64_t eos = o->eos_id;
    char name[DLC_TOKENS_NAME_MAX];
    snprintf(name, sizeof name, "%s", DLC_TOKENS_PRETOKENIZED);
    if (o->tokenizer) {
        CHECK(load_tokenizer(&b, o->tokenizer, &digest));
        if (!vocab)
            vocab = (uint32_t)b.spm->vocab_size(b.model);
        if (eos < 0)
            eos = b.spm->eos_id(b.model);
        const char *base = strrchr(o->tokenizer, '/');
        base = base ? base + 1 : o->tokenizer;
        snprintf(name, sizeof name, "sentencepiece:%.32s", base);
        FAIL_IF(eos < 0, DLC_EINVAL, "%s: the model has no end-of-sentence id: give --eos ID",
                o->tokenizer);
    }
    FAIL_IF(eos < 0 || eos > UINT32_MAX, DLC_EINVAL,
            "%s: an end-of-document id is needed (--eos ID)", o->output);
    b.eos = (uint32_t)eos;
    dlc_token_writer_config wc;
    dlc_token_writer_config_init(&wc);
    wc.dtype = o->out_dtype;
    if (!wc.dtype && !vocab && o->bin_dtype == DLC_DTYPE_UINT16 && !o->tokenizer) {
        /* A vocabulary not given: flat uint16 sources keep uint16; others are int32. */
        int all_u16 = 1;
        for (uint32_t i = 0; i < o->num_sources; i++) {
            const uint32_t f = o->format ? o->format : source_format(o->sources[i]);
            all_u16 &= f == DLC_TOKENS_FORMAT_BIN;
        }
        wc.dtype = all_u16 ? DLC_DTYPE_UINT16 : 0;
    }
    wc.vocab_size = vocab;
    wc.eos_id = b.eos;
    wc.force = o->force;
    wc.tokenizer = name;
    wc.tokenizer_digest = digest;
    wc.build_json = o->build_json;
    b.wc = wc;
    if (o->shards) {
        /* Made here, it goes again if the build fails before a part is in it (rmdir() takes
         * only an empty one: parts other builders wrote into it stay). */
        CHECK(dlc__build_set_dir_check(o->output, o->force, o->one_part, &made_dir, NULL, NULL));
        b.counting = 1;
        CHECK(read_sources(&b));
        b.counting = 0;
        /* Before the first part is written over a name the old index holds: the old set is
         * retired (readable under retired names until the new index replaces it), as an image
         * set is (build_setdir.c). A failed or interrupted rebuild kept nothing readable. */
        CHECK(dlc__build_retire(o->output, NULL, NULL));
        if (!o->one_part)
            (void)dlc__build_tidy(o->output, NULL, NULL);
        b.nitems = b.item;
        b.item = 0;
        b.part = UINT32_MAX;
        b.wc.set_id = set_id(&b, digest);
        if (o->one_part) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/part-%05u-of-%05u.dlc", o->output, o->part, o->shards);
            dlc_token_writer_config pc = b.wc;
            pc.part = o->part;
            pc.parts = o->shards;
            pc.first_item = part_first(&b, o->part);
            pc.end_item = part_first(&b, o->part + 1);
            CHECK(dlc_token_writer_open(path, &pc, &b.w));
            b.part = o->part;
        }
        CHECK(read_sources(&b));
        FAIL_IF(b.item != b.nitems, DLC_ECHANGED,
                "%s: the sources hold %" PRIu64 " documents, %" PRIu64
                " counted a moment ago: they changed while read",
                o->output, b.item, b.nitems);
        if (o->one_part) {
            b.documents = dlc_token_writer_count(b.w);
            b.tokens = dlc_token_writer_tokens(b.w);
            rc = dlc_token_writer_finish(b.w);
            b.w = NULL;
            CHECK(rc);
        } else {
            CHECK(next_part(&b, UINT64_MAX));
            FAIL_IF(b.documents == 0, DLC_EINVAL, "%s: the sources hold no document", o->output);
            CHECK(dlc_set_join(o->output, NULL));
            (void)dlc__build_tidy(o->output, NULL, NULL); /* the retired old set */
        }
        if (report) {
            memset(report, 0, sizeof *report);
            report->documents = b.documents;
            report->tokens = b.tokens;
            report->skipped = b.skipped;
            report->eos_id = b.eos;
            report->vocab_size = vocab;
            report->dtype = wc.dtype                       ? wc.dtype
                            : vocab >= 1 && vocab <= 65536 ? DLC_DTYPE_UINT16
                                                           : DLC_DTYPE_INT32;
        }
        goto fail; /* rc is DLC_OK: the common cleanup. */
    }
    CHECK(dlc_token_writer_open(o->output, &wc, &b.w));
    CHECK(read_sources(&b));
    if (report) {
        memset(report, 0, sizeof *report);
        report->documents = dlc_token_writer_count(b.w);
        report->tokens = dlc_token_writer_tokens(b.w);
        report->skipped = b.skipped;
        report->eos_id = b.eos;
        report->vocab_size = vocab;
        report->dtype = wc.dtype                       ? wc.dtype
                        : vocab >= 1 && vocab <= 65536 ? DLC_DTYPE_UINT16
                                                       : DLC_DTYPE_INT32;
    }
    FAIL_IF(dlc_token_writer_count(b.w) == 0, DLC_EINVAL, "%s: the sources hold no document",
            o->output);
    rc = dlc_token_writer_finish(b.w);
    b.w = NULL;
fail:
    dlc_token_writer_abort(b.w);
    if (rc < 0 && made_dir)
        (void)rmdir(o->output);
    if (b.model)
        b.spm->free(b.model);
    if (b.dl)
        dlclose(b.dl);
    free(b.ids);
    return rc;
}
