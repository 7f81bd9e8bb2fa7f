/* Best-fit packing of a token store (docs/TOKENS.md, "best_fit"): documents placed whole into rows
 * of seq_len tokens by best-fit decreasing, those longer than seq_len cut into pieces of seq_len
 * (and a remainder); the rest of a row is padding. The plan is a pure function of (the store,
 * seq_len, seed), made once and kept beside the store in STORE.bestfit-S-SEED, checked by its
 * digests at every open; never made per epoch. */
#include "tokens_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define BF_MAGIC "DLCBFIT1"
/* 2: the seed word no longer tells "not shuffled" (it was UINT64_MAX, a seed too): the version
 * word's BF_ORDERED does. A plan of version 1 is made again once. */
#define BF_VERSION 2u
#define BF_ORDERED 0x10000u
#define BF_HEADER 80u
#define BF_ITEM 16u

/* ---- Making the plan ------------------------------------------------------------------------ */

/* Best-fit decreasing over the documents in the seeded order: items (pieces of at most S tokens)
 * sorted by length, longest first, ties in the seeded order (a stable counting sort); each goes
 * to the open row with the least room that holds it (a bitset over room 0..S finds it in S/64
 * words), else to a new row. */
static dlc_status bf_build(dlc_token_loader *l)
{
    const uint32_t S = l->c.seq_len;
    const uint64_t n = l->info.num_docs;
    dlc_status rc = DLC_OK;
    uint64_t nitems = 0;
    uint64_t *count = NULL, *bin_of = NULL, *room_head = NULL, *next = NULL, *bits = NULL;
    uint64_t *starts = NULL;
    uint8_t *items = NULL, *sorted = NULL;
    uint32_t *room = NULL;
    for (uint64_t d = 0; d < n; d++) {
        const uint64_t a = tl_doc_start(l, d), b = tl_doc_start(l, d + 1);
        FAIL_IF(b < a, DLC_ECORRUPT,
                "%s: token offsets: document %" PRIu64 " ends (%" PRIu64
                ") before it starts (%" PRIu64 "): the offsets are damaged",
                dlc_store_path(l->store), d, b, a);
        FAIL_IF(b == a, DLC_ECORRUPT, "%s: token offsets: document %" PRIu64 " is empty",
                dlc_store_path(l->store), d);
        const uint64_t len = b - a;
        nitems += (len + S - 1) / S;
    }
    count = calloc((size_t)S + 2, sizeof *count);
    items = malloc(nitems * BF_ITEM);
    sorted = malloc(nitems * BF_ITEM);
    bin_of = malloc(nitems * sizeof *bin_of);
    room_head = malloc(((size_t)S + 1) * sizeof *room_head);
    next = malloc((nitems + 1) * sizeof *next); /* Rows: at most one per item. */
    room = malloc((nitems + 1) * sizeof *room);
    bits = calloc((size_t)S / 64 + 1, sizeof *bits);
    FAIL_IF(!count || !items || !sorted || !bin_of || !room_head || !next || !room || !bits,
            -ENOMEM, "%s: out of memory for best-fit packing of %" PRIu64 " pieces",
            dlc_store_path(l->store), nitems);
    uint64_t m = 0;
    for (uint64_t k = 0; k < n; k++) {
        const uint64_t d = l->c.shuffle ? dlc__perm_apply(&l->doc_perm, k) : k;
        const uint64_t len = tl_doc_start(l, d + 1) - tl_doc_start(l, d);
        for (uint64_t off = 0; off < len; off += S) {
            const uint32_t piece = (uint32_t)(len - off < S ? len - off : S);
            uint8_t *it = items + m++ * BF_ITEM;
            dlc__st64(it, d);
            dlc__st32(it + 8, (uint32_t)off);
            dlc__st32(it + 12, piece);
            count[piece]++;
        }
    }
    /* Longest first: the position of each length's first item. */
    uint64_t at = 0;
    for (uint32_t len = S; len >= 1; len--) {
        const uint64_t c = count[len];
        count[len] = at;
        at += c;
    }
    for (uint64_t i = 0; i < nitems; i++) {
        const uint8_t *it = items + i * BF_ITEM;
        memcpy(sorted + count[dlc__ld32(it + 12)]++ * BF_ITEM, it, BF_ITEM);
    }
    for (uint32_t r = 0; r <= S; r++)
        room_head[r] = UINT64_MAX;
    uint64_t nbins = 0, pad = 0;
    for (uint64_t i = 0; i < nitems; i++) {
        const uint32_t len = dlc__ld32(sorted + i * BF_ITEM + 12);
        /* The least room >= len among open rows. */
        uint32_t r = len;
        uint64_t found = UINT64_MAX;
        while (r <= S) {
            const uint64_t word = bits[r / 64] >> (r % 64);
            if (word) {
                r += (uint32_t)__builtin_ctzll(word);
                found = r <= S ? room_head[r] : UINT64_MAX;
                break;
            }
            r = (r / 64 + 1) * 64;
        }
        uint64_t bin;
        if (found == UINT64_MAX) {
            bin = nbins++;
            room[bin] = S;
        } else {
            bin = found;
            room_head[r] = next[bin];
            if (room_head[r] == UINT64_MAX)
                bits[r / 64] &= ~(1ull << (r % 64));
        }
        room[bin] -= len;
        const uint32_t nr = room[bin];
        next[bin] = room_head[nr];
        room_head[nr] = bin;
        bits[nr / 64] |= 1ull << (nr % 64);
        bin_of[i] = bin;
    }
    for (uint64_t b = 0; b < nbins; b++)
        pad += room[b];
    /* Items grouped by row, each row's in placement order (longest first). */
    starts = calloc(nbins + 1, sizeof *starts);
    FAIL_IF(!starts, -ENOMEM, "%s: out of memory", dlc_store_path(l->store));
    for (uint64_t i = 0; i < nitems; i++)
        starts[bin_of[i] + 1]++;
    for (uint64_t b = 0; b < nbins; b++)
        starts[b + 1] += starts[b];
    for (uint64_t i = 0; i < nitems; i++)
        memcpy(items + starts[bin_of[i]]++ * BF_ITEM, sorted + i * BF_ITEM, BF_ITEM);
    for (uint64_t b = nbins; b > 0; b--)
        starts[b] = starts[b - 1];
    starts[0] = 0;
    l->bf_items = items;
    items = NULL;
    l->bf_starts = starts;
    starts = NULL;
    l->bf_bins = nbins;
    l->bf_nitems = nitems;
    l->bf_pad = pad;
fail:
    free(count);
    free(items);
    free(sorted);
    free(bin_of);
    free(room_head);
    free(next);
    free(room);
    free(bits);
    free(starts);
    return rc;
}

/* ---- The file beside the store -------------------------------------------------------------- */

static void bf_header(const dlc_token_loader *l, uint8_t h[BF_HEADER], uint64_t body_hash)
{
    memset(h, 0, BF_HEADER);
    memcpy(h, BF_MAGIC, 8);
    dlc__st32(h + 8, BF_VERSION | (l->c.shuffle ? 0u : BF_ORDERED));
    dlc__st32(h + 12, l->c.seq_len);
    dlc__st64(h + 16, l->c.shuffle ? l->c.seed : 0);
    dlc__st64(h + 24, dlc_store_get_info(l->store)->content_digest);
    dlc__st64(h + 32, l->info.offsets_digest);
    dlc__st64(h + 40, l->bf_bins);
    dlc__st64(h + 48, l->bf_nitems);
    dlc__st64(h + 56, l->bf_pad);
    dlc__st64(h + 64, body_hash);
    dlc__st64(h + 72, XXH3_64bits(h, 72));
}

static void bf_name(const dlc_token_loader *l, char *out, size_t cap)
{
    const char *path = dlc_store_path(l->store);
    const char *base = strrchr(path, '/');
    if (l->c.shuffle)
        snprintf(out, cap, "%s.bestfit-%u-%016" PRIx64, base ? base + 1 : path, l->c.seq_len,
                 l->c.seed);
    else
        snprintf(out, cap, "%s.bestfit-%u-ordered", base ? base + 1 : path, l->c.seq_len);
}

/* Every row's items against the store: a document, a piece of it, rows within seq_len. */
static int bf_valid(const dlc_token_loader *l)
{
    if (l->bf_starts[0] != 0 || l->bf_starts[l->bf_bins] != l->bf_nitems)
        return 0;
    for (uint64_t b = 0; b < l->bf_bins; b++) {
        if (l->bf_starts[b + 1] <= l->bf_starts[b])
            return 0;
        uint64_t used = 0;
        for (uint64_t i = l->bf_starts[b]; i < l->bf_starts[b + 1]; i++) {
            const uint8_t *it = l->bf_items + i * BF_ITEM;
            const uint64_t d = dlc__ld64(it), off = dlc__ld32(it + 8), len = dlc__ld32(it + 12);
            if (d >= l->info.num_docs || len == 0 ||
                off + len > tl_doc_start(l, d + 1) - tl_doc_start(l, d))
                return 0;
            used += len;
        }
        if (used > l->c.seq_len)
            return 0;
    }
    return 1;
}

/* Read the plan from @p fd; 1 when it is the plan of this store, seq_len and seed. */
static int bf_read(dlc_token_loader *l, int fd)
{
    uint8_t h[BF_HEADER], want[BF_HEADER];
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || pread(fd, h, BF_HEADER, 0) != BF_HEADER)
        return 0;
    l->bf_bins = dlc__ld64(h + 40);
    l->bf_nitems = dlc__ld64(h + 48);
    l->bf_pad = dlc__ld64(h + 56);
    bf_header(l, want, dlc__ld64(h + 64));
    if (memcmp(h, want, BF_HEADER) != 0 || l->bf_bins > l->bf_nitems ||
        l->bf_nitems > l->info.num_tokens)
        return 0;
    const uint64_t sbytes = (l->bf_bins + 1) * 8, ibytes = l->bf_nitems * BF_ITEM;
    if ((uint64_t)st.st_size != BF_HEADER + sbytes + ibytes)
        return 0;
    uint8_t *body = malloc(sbytes + ibytes);
    if (!body)
        return 0;
    size_t got = 0;
    while (got < sbytes + ibytes) {
        const ssize_t r = pread(fd, body + got, sbytes + ibytes - got, (off_t)(BF_HEADER + got));
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got != sbytes + ibytes || XXH3_64bits(body, got) != dlc__ld64(h + 64)) {
        free(body);
        return 0;
    }
    l->bf_starts = malloc(sbytes);
    l->bf_items = malloc(ibytes ? ibytes : 1);
    if (!l->bf_starts || !l->bf_items) {
        free(body);
        return 0;
    }
    for (uint64_t b = 0; b <= l->bf_bins; b++)
        l->bf_starts[b] = dlc__ld64(body + b * 8);
    memcpy(l->bf_items, body + sbytes, ibytes);
    free(body);
    return bf_valid(l);
}

static void bf_forget(dlc_token_loader *l)
{
    free(l->bf_starts);
    free(l->bf_items);
    l->bf_starts = NULL;
    l->bf_items = NULL;
    l->bf_bins = l->bf_nitems = l->bf_pad = 0;
}

/* Write the plan as NAME.tmp-PID, sync, rename over NAME, sync the directory; relative to the
 * checked directory, never through a link. A failure leaves no file and is not an error: the
 * plan stays in memory (a read-only medium). */
static void bf_write(dlc_token_loader *l, int dirfd, const char *name)
{
    const uint64_t sbytes = (l->bf_bins + 1) * 8, ibytes = l->bf_nitems * BF_ITEM;
    uint8_t *body = malloc(sbytes + ibytes);
    if (!body)
        return;
    for (uint64_t b = 0; b <= l->bf_bins; b++)
        dlc__st64(body + b * 8, l->bf_starts[b]);
    memcpy(body + sbytes, l->bf_items, ibytes);
    uint8_t h[BF_HEADER];
    bf_header(l, h, XXH3_64bits(body, sbytes + ibytes));
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", name, (long)getpid());
    /* O_EXCL: a file already at the temporary name (a FIFO would stall a plain open) is not ours
     * to truncate; the plan then stays in memory. */
    const int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    int ok = fd >= 0;
    if (ok)
        ok = write(fd, h, BF_HEADER) == BF_HEADER;
    size_t done = 0;
    while (ok && done < sbytes + ibytes) {
        const ssize_t w = write(fd, body + done, sbytes + ibytes - done);
        ok = w > 0;
        done += ok ? (size_t)w : 0;
    }
    ok = ok && fsync(fd) == 0;
    if (fd >= 0)
        close(fd);
    /* Over nothing, or over an earlier plan that did not read back: not over another kind of
     * file with the plan's name. */
    struct stat st;
    ok = ok && (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISREG(st.st_mode));
    if (ok && renameat(dirfd, tmp, dirfd, name) == 0) {
        fsync(dirfd);
        l->bf_saved = 1;
    } else if (fd >= 0) {
        unlinkat(dirfd, tmp, 0);
    }
    free(body);
}

dlc_status dlc__bf_plan(dlc_token_loader *l)
{
    char name[512];
    bf_name(l, name, sizeof name);
    int dirfd = -1;
    const dlc_status drc =
        dlc__open_parent_dir(dlc_store_path(l->store), "the packing plan", &dirfd);
    if (drc == DLC_OK) {
        const int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
            const int ok = bf_read(l, fd);
            close(fd);
            if (ok) {
                l->bf_saved = 1;
                close(dirfd);
                return DLC_OK;
            }
            bf_forget(l); /* Another store's, seq_len's, seed's, or damaged: made again. */
        }
    }
    dlc_status rc = bf_build(l);
    if (rc == DLC_OK && dirfd >= 0)
        bf_write(l, dirfd, name);
    if (dirfd >= 0)
        close(dirfd);
    return rc;
}
