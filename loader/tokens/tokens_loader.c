/* Packed sequences of a token store (include/dlcache/tokens.h, docs/TOKENS.md): the documents
 * concatenated in a seeded order, cut into windows of seq_len + 1 tokens overlapping by one, the
 * windows dealt per epoch as DistributedSampler deals samples (loader/sampler.h), each batch
 * filled by one worker straight into a slot made at open. */
#include "store_tokens.h"
#include "tokens_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token stores hold little-endian ids, read here with the host's loads"
#endif

void dlc_token_loader_config_init_sized(dlc_token_loader_config *c, size_t size)
{
    if (!c || size < sizeof(uint32_t))
        return;
    dlc_token_loader_config d;
    memset(&d, 0, sizeof d);
    d.seq_len = 2048;
    d.world_size = 1;
    d.threads = 2;
    d.out_dtype = DLC_DTYPE_INT64;
    d.shuffle = 1;
    const size_t n = size < sizeof d ? size : sizeof d;
    memcpy(c, &d, n);
    c->struct_size = (uint32_t)n;
}

/* What messages call the loader: its store, or "token mixture". */
static const char *loader_name(const dlc_token_loader *l)
{
    return l->nsrc ? "token mixture" : dlc_store_path(l->store);
}

/* ---- The documents' order ------------------------------------------------------------------- */

/* Where the concatenation stands: the block in place p of the blocks' order (its first document
 * and size), the step t inside it, and its x_b. Without shuffle, record order: d is the document.
 */
typedef struct tl_cursor {
    uint64_t p, first, d;
    uint32_t t, m, x;
} tl_cursor;

static uint32_t blk_xor(const dlc_token_loader *l, uint64_t b)
{
    return (uint32_t)(dlc__mix64(l->blk_key ^ b) % DLC__TL_BLOCK);
}

/* Enter the block in place @p p at its first document (p < nblocks). */
static void blk_enter(const dlc_token_loader *l, tl_cursor *c, uint64_t p)
{
    const uint64_t b = dlc__perm_apply(&l->blk_perm, p);
    const uint64_t n = l->info.num_docs, first = b * DLC__TL_BLOCK;
    c->p = p;
    c->first = first;
    c->m = (uint32_t)(n - first < DLC__TL_BLOCK ? n - first : DLC__TL_BLOCK);
    c->x = blk_xor(l, b);
    c->t = 0;
    while (c->t < DLC__TL_BLOCK && (uint32_t)(l->blk_sigma[c->t] ^ c->x) >= c->m)
        c->t++; /* Only the last block is short. */
    c->d = first + (l->blk_sigma[c->t] ^ c->x);
}

/* Step to the next document; 0 past the last one. */
static int cursor_next(const dlc_token_loader *l, tl_cursor *c)
{
    if (!l->c.shuffle) {
        c->d++;
        return c->d < l->info.num_docs;
    }
    do
        c->t++;
    while (c->t < DLC__TL_BLOCK && (uint32_t)(l->blk_sigma[c->t] ^ c->x) >= c->m);
    if (c->t < DLC__TL_BLOCK) {
        c->d = c->first + (l->blk_sigma[c->t] ^ c->x);
        return 1;
    }
    if (c->p + 1 >= l->nblocks)
        return 0;
    blk_enter(l, c, c->p + 1);
    return 1;
}

uint64_t dlc_token_loader_doc_at(const dlc_token_loader *l, uint64_t k)
{
    if (!l || k >= l->info.num_docs || l->nsrc)
        return UINT64_MAX;
    if (!l->c.shuffle)
        return k;
    /* Every block but the last (in record order) holds DLC__TL_BLOCK documents. */
    const uint64_t G = DLC__TL_BLOCK, n = l->info.num_docs, last = l->nblocks - 1;
    const uint64_t q = dlc__perm_invert(&l->blk_perm, last), m_last = n - last * G;
    uint64_t p, r;
    if (k < q * G) {
        p = k / G;
        r = k % G;
    } else if (k < q * G + m_last) {
        p = q;
        r = k - q * G;
    } else {
        p = q + 1 + (k - q * G - m_last) / G;
        r = (k - q * G - m_last) % G;
    }
    tl_cursor c;
    blk_enter(l, &c, p);
    while (r--)
        cursor_next(l, &c);
    return c.d;
}

/* Ask the kernel to read @p size bytes at @p data of the store's map now, in large reads: the
 * store is mapped for random access (MDB_NORDAHEAD), which on a cold page cache faults the pages
 * of a table read whole one at a time (2 s for the 80 MB offsets of 10^7 documents). Linux reads
 * at most its readahead window (128 KiB by default) per MADV_WILLNEED and returns without waiting,
 * so the table is asked for window by window: the reads are all queued before the first fault. */
static void read_ahead(const void *data, size_t size)
{
    const long pg = sysconf(_SC_PAGESIZE);
    const uintptr_t page = pg > 0 ? (uintptr_t)pg : 4096u, chunk = 128u << 10;
    const uintptr_t e = (uintptr_t)data + size;
    for (uintptr_t a = (uintptr_t)data & ~(page - 1); a < e; a += chunk) {
        /* A hint: nothing fails without it. */
        (void)madvise((void *)a, (size_t)(e - a < chunk ? e - a : chunk), MADV_WILLNEED);
    }
}

/* The blocks' prefix sums in their order: once, at the first batch, never at open (8 bytes and
 * one Feistel evaluation per block of DLC__TL_BLOCK documents). Each block's tokens are taken in
 * record order first, so that the offsets are read front to back (and read ahead), not in the
 * blocks' order, which would touch their pages at random; the sums then follow in memory. */
static void make_blk_sums(dlc_token_loader *l)
{
    const uint64_t nb = l->nblocks, n = l->info.num_docs;
    uint64_t *p = malloc((nb + 1) * sizeof *p);
    uint64_t *len = malloc(nb * sizeof *len);
    if (!p || !len) {
        l->perm_rc = dlc__errorf(-ENOMEM, "%s: out of memory for the order of %" PRIu64 " blocks",
                                 dlc_store_path(l->store), nb);
        goto fail;
    }
    if (l->offsets)
        read_ahead(l->offsets, (size_t)(n + 1) * 8);
    for (uint64_t b = 0; b < nb; b++) {
        const uint64_t first = b * DLC__TL_BLOCK;
        const uint64_t end = n - first < DLC__TL_BLOCK ? n : first + DLC__TL_BLOCK;
        const uint64_t a = tl_doc_start(l, first), e = tl_doc_start(l, end);
        if (e <= a || e - a > (end - first) * l->info.max_doc_tokens) {
            l->perm_rc = dlc__errorf(DLC_ECORRUPT,
                                     "%s: token offsets: documents %" PRIu64 " to %" PRIu64
                                     " run from %" PRIu64 " to %" PRIu64,
                                     dlc_store_path(l->store), first, end - 1, a, e);
            goto fail;
        }
        len[b] = e - a;
    }
    p[0] = 0;
    for (uint64_t k = 0; k < nb; k++)
        p[k + 1] = p[k] + len[dlc__perm_apply(&l->blk_perm, k)];
    if (p[nb] != l->info.num_tokens) {
        l->perm_rc = dlc__errorf(DLC_ECORRUPT,
                                 "%s: token offsets add up to %" PRIu64 " tokens, not %" PRIu64,
                                 dlc_store_path(l->store), p[nb], l->info.num_tokens);
        goto fail;
    }
    free(len);
    l->blk_sums = p;
    return;
fail:
    free(len);
    free(p);
}

static dlc_status ensure_order(dlc_token_loader *l)
{
    for (uint32_t k = 0; k < l->nsrc; k++) {
        const dlc_status rc = ensure_order(l->src[k]);
        if (rc != DLC_OK)
            return rc;
    }
    if (l->nsrc)
        return DLC_OK;
    if (!l->c.shuffle || l->c.packing != DLC_TOKEN_PACK_CONCAT)
        return DLC_OK;
    /* Only next() calls this, on the one consumer thread, before any worker starts. */
    if (!l->blk_sums && l->perm_rc == DLC_OK)
        make_blk_sums(l);
    return l->perm_rc;
}

/* Point @p c at the document holding concatenation position @p pos; its first position in
 * @p start. O(log n) over the blocks, then at most DLC__TL_BLOCK lengths. */
static dlc_status find_place(const dlc_token_loader *l, uint64_t pos, tl_cursor *c, uint64_t *start)
{
    if (!l->c.shuffle) {
        uint64_t d;
        if (!l->offsets) {
            d = dlc_tokens_find(l->tokens, pos); /* A set in record order: through its shards. */
        } else {
            uint64_t lo = 0, hi = l->info.num_docs;
            while (hi - lo > 1) {
                const uint64_t mid = lo + (hi - lo) / 2;
                if (l->offsets[mid] <= pos)
                    lo = mid;
                else
                    hi = mid;
            }
            d = lo;
        }
        c->d = d;
        *start = tl_doc_start(l, d);
        return DLC_OK;
    }
    const uint64_t *p = l->blk_sums;
    uint64_t lo = 0, hi = l->nblocks;
    while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (p[mid] <= pos)
            lo = mid;
        else
            hi = mid;
    }
    blk_enter(l, c, lo);
    uint64_t at = p[lo];
    const uint64_t block = c->p;
    do {
        const uint64_t len = tl_doc_start(l, c->d + 1) - tl_doc_start(l, c->d);
        if (pos - at < len) {
            *start = at;
            return DLC_OK;
        }
        at += len;
    } while (cursor_next(l, c) && c->p == block);
    return dlc__errorf(DLC_ECORRUPT, "%s: token offsets: position %" PRIu64 " is in no document",
                       dlc_store_path(l->store), pos);
}

/* ---- Filling a batch ------------------------------------------------------------------------ */

static inline void put(uint8_t *base, size_t esize, size_t i, int64_t v)
{
    if (esize == 8) {
        memcpy(base + i * 8, &v, 8);
    } else {
        const int32_t w = (int32_t)v;
        memcpy(base + i * 4, &w, 4);
    }
}

/* Document @p d's tokens, as dlc_tokens_doc(), with its checksum checked as c.verify says (the
 * image loader's verify=: the store's XXH3 of the field, checked where the bytes are read). */
static dlc_status tl_doc(const dlc_token_loader *l, dlc_store_reader *reader, uint64_t d,
                         const void **data, uint64_t *n)
{
    dlc_value v;
    dlc_status rc = dlc__tokens_doc_value(l->tokens, reader, d, &v);
    if (rc != DLC_OK)
        return rc;
    *data = v.data;
    *n = v.dim0;
    if (l->c.verify == DLC_VERIFY_OFF)
        return DLC_OK;
    const uint64_t bit = 1ull << (d % 64);
    if (atomic_load_explicit(&l->verified_bad[d / 64], memory_order_relaxed) & bit)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: record %" PRIu64 ": field \"tokens\": checksum mismatch (found at "
                           "an earlier read)",
                           dlc_store_path(l->store), d);
    if (l->c.verify == DLC_VERIFY_FIRST &&
        (atomic_load_explicit(&l->verified_ok[d / 64], memory_order_relaxed) & bit))
        return DLC_OK;
    /* The value as read, hashed where the window's tokens will be copied from. */
    rc = dlc_value_verify(l->store, d, l->info.field, &v);
    if (rc == DLC_ECORRUPT)
        atomic_fetch_or_explicit(&l->verified_bad[d / 64], bit, memory_order_relaxed);
    else if (rc == DLC_OK && l->verified_ok)
        atomic_fetch_or_explicit(&l->verified_ok[d / 64], bit, memory_order_relaxed);
    return rc;
}

/* Window @p w's seq_len + 1 tokens as pieces of its documents, in the worker's list. */
static dlc_status gather(const dlc_token_loader *l, dlc_store_reader *reader, tl_piece *pieces,
                         uint64_t w, uint32_t *npieces)
{
    const uint32_t S = l->c.seq_len;
    const uint32_t need = S + 1;
    const size_t tsize = l->info.dtype == DLC_DTYPE_UINT16 ? 2 : 4;
    dlc_status rc = DLC_OK;
    tl_cursor c;
    uint64_t start = 0;
    CHECK(find_place(l, w * S, &c, &start));
    uint64_t off = w * S - start;
    uint32_t j = 0, ns = 0;
    for (;;) {
        const void *data;
        uint64_t n;
        CHECK(tl_doc(l, reader, c.d, &data, &n));
        FAIL_IF(off >= n, DLC_ECORRUPT,
                "%s: window %" PRIu64 ": document %" PRIu64 " has %" PRIu64
                " tokens, not more than %" PRIu64 " as the prefix sums say",
                dlc_store_path(l->store), w, c.d, n, off);
        const uint32_t m = n - off < need - j ? (uint32_t)(n - off) : need - j;
        pieces[ns++] = (tl_piece){(const uint8_t *)data + off * tsize, j, m};
        j += m;
        off = 0;
        if (j == need)
            break;
        FAIL_IF(!cursor_next(l, &c), DLC_ECORRUPT,
                "%s: window %" PRIu64 " runs past the last document", dlc_store_path(l->store), w);
    }
    *npieces = ns;
fail:
    return rc;
}

/* Row @p r of slot @p s from best-fit row @p bin: its items, then padding. */
static dlc_status fill_bestfit_row(const dlc_token_loader *l, tl_worker *wk, tl_slot *s,
                                   uint64_t bin, uint32_t r, uint32_t *ncu, uint32_t *maxlen)
{
    const uint32_t S = l->c.seq_len;
    const size_t es = l->esize, row = (size_t)r * S;
    uint32_t j = 0, ns = 0;
    for (uint64_t i = l->bf_starts[bin]; i < l->bf_starts[bin + 1]; i++) {
        const uint8_t *it = l->bf_items + i * 16;
        const uint64_t d = dlc__ld64(it);
        const uint32_t off = dlc__ld32(it + 8), len = dlc__ld32(it + 12);
        const void *data;
        uint64_t n;
        const dlc_status rc = tl_doc(l, wk->reader, d, &data, &n);
        if (rc != DLC_OK)
            return rc;
        if ((uint64_t)off + len > n || j + len > S)
            return dlc__errorf(DLC_ECORRUPT,
                               "%s: best-fit row %" PRIu64 ": a piece of document %" PRIu64
                               " beyond it or the row",
                               dlc_store_path(l->store), bin, d);
        const uint8_t *b = (const uint8_t *)data;
        for (uint32_t k = 0; k < len; k++)
            wk->tok[j + k] = l->info.dtype == DLC_DTYPE_UINT16
                                 ? (uint32_t)b[2 * (off + k)] | (uint32_t)b[2 * (off + k) + 1] << 8
                                 : dlc__ld32(b + 4 * ((size_t)off + k));
        wk->segs[ns++] = j;
        j += len;
    }
    const uint32_t used = j;
    if (used < S)
        wk->segs[ns++] = used; /* The padding: a segment of its own. */
    for (uint32_t i = 0; i < ns; i++) {
        const uint32_t a = wk->segs[i], e = i + 1 < ns ? wk->segs[i + 1] : S;
        for (uint32_t k = a; k < e; k++) {
            const int pad = k >= used;
            put(s->input_ids, es, row + k, pad ? l->c.pad_id : (int64_t)wk->tok[k]);
            put(s->labels, es, row + k,
                pad || k + 1 >= e ? DLC_TOKEN_IGNORE : (int64_t)wk->tok[k + 1]);
            put(s->position_ids, es, row + k, k - a);
        }
        if (l->c.document_mask) {
            s->cu[(*ncu)++] = (int32_t)(row + a);
            *maxlen = e - a > *maxlen ? e - a : *maxlen;
        }
    }
    return DLC_OK;
}

/* The source of a mixture's global window @p w, and its window there. */
static uint32_t mix_source(const dlc_token_loader *l, uint64_t w, uint64_t *local)
{
    uint32_t k = 0;
    while (k + 1 < l->nsrc && l->src_first[k + 1] <= w)
        k++;
    *local = w - l->src_first[k];
    return k;
}

/* A concat row on its way: the source it comes from and its window's pieces. */
typedef struct tl_row {
    const dlc_token_loader *src;
    tl_piece *pieces;
    uint32_t n;
} tl_row;

/* Find row @p r's pieces (window @p w of the loader or of a mixture's source) and prefetch their
 * tokens: the copies of the row before it run while those lines arrive. */
static dlc_status gather_row(const dlc_token_loader *l, tl_worker *wk, uint64_t w, tl_row *row)
{
    const dlc_token_loader *src = l;
    dlc_store_reader *reader = wk->reader;
    if (l->nsrc) {
        uint64_t local;
        const uint32_t k = mix_source(l, w, &local);
        src = l->src[k];
        reader = l->mreaders[(size_t)(wk - l->workers) * l->nsrc + k];
        w = local;
    }
    row->src = src;
    const dlc_status rc = gather(src, reader, row->pieces, w, &row->n);
    if (rc != DLC_OK)
        return rc;
    const size_t tsize = src->info.dtype == DLC_DTYPE_UINT16 ? 2 : 4;
    for (uint32_t i = 0; i < row->n; i++) {
        const tl_piece *pc = &row->pieces[i];
        for (size_t b = 0; b < (size_t)pc->n * tsize; b += 64)
            __builtin_prefetch(pc->src + b);
    }
    return DLC_OK;
}

/* Row @p r of slot @p s from its pieces: inputs and labels, position ids, the document mask. */
static void put_row(const dlc_token_loader *l, const tl_row *rw, tl_slot *s, uint32_t r,
                    uint32_t *ncu, uint32_t *maxlen)
{
    const uint32_t S = l->c.seq_len;
    const size_t es = l->esize, row = (size_t)r * S;
    const dlc__tl_kernels *k = &rw->src->k;
    uint8_t *in = s->input_ids + row * es, *lab = s->labels + row * es;
    uint8_t *pos = s->position_ids + row * es;
    for (uint32_t i = 0; i < rw->n; i++) {
        const tl_piece *pc = &rw->pieces[i];
        k->piece(pc->src, pc->at, pc->n, S, in, lab);
    }
    for (uint32_t i = 0; i < rw->n; i++) {
        const uint32_t a = rw->pieces[i].at, e0 = a + rw->pieces[i].n;
        if (l->c.document_mask && a > 0)
            put(s->labels, es, row + a - 1, DLC_TOKEN_IGNORE);
        if (a >= S)
            continue; /* The window's last token starts a document: a label only. */
        const uint32_t e = e0 < S ? e0 : S;
        k->run(pos + (size_t)a * es, e - a);
        if (l->c.document_mask) {
            s->cu[(*ncu)++] = (int32_t)(row + a);
            *maxlen = e - a > *maxlen ? e - a : *maxlen;
        }
    }
}

static dlc_status fill_batch(dlc_token_loader *l, tl_worker *wk, tl_slot *s, uint64_t batch)
{
    const uint32_t S = l->c.seq_len, B = l->c.batch_size;
    const uint64_t first = batch * B;
    const uint64_t left = l->shard.per_rank - first;
    const uint32_t rows = left < B ? (uint32_t)left : B;
    uint32_t ncu = 0, maxlen = 0;
    dlc_status rc = DLC_OK;
    if (l->c.packing == DLC_TOKEN_PACK_BEST_FIT) {
        const size_t widx = (size_t)(wk - l->workers);
        for (uint32_t r = 0; r < rows; r++) {
            const uint64_t w = dlc__sampler_at(&l->sampler, dlc__shard_pos(&l->shard, first + r));
            if (l->nsrc) {
                uint64_t local;
                const uint32_t k = mix_source(l, w, &local);
                /* The source's data, this worker's buffers and its reader of that source. */
                tl_worker sw = {.reader = l->mreaders[widx * l->nsrc + k],
                                .tok = wk->tok,
                                .segs = wk->segs,
                                .pieces = wk->pieces};
                CHECK(fill_bestfit_row(l->src[k], &sw, s, local, r, &ncu, &maxlen));
            } else {
                CHECK(fill_bestfit_row(l, wk, s, w, r, &ncu, &maxlen));
            }
        }
    } else {
        /* Two rows in flight: row r + 1's documents are found and prefetched before row r is
         * copied. */
        tl_row rw[2] = {{.pieces = wk->pieces}, {.pieces = wk->pieces + S + 1}};
        for (uint32_t r = 0; r < rows; r++) {
            if (r == 0)
                CHECK(gather_row(
                    l, wk, dlc__sampler_at(&l->sampler, dlc__shard_pos(&l->shard, first)), &rw[0]));
            if (r + 1 < rows)
                CHECK(gather_row(
                    l, wk, dlc__sampler_at(&l->sampler, dlc__shard_pos(&l->shard, first + r + 1)),
                    &rw[(r + 1) % 2]));
            put_row(l, &rw[r % 2], s, r, &ncu, &maxlen);
        }
    }
    if (l->c.document_mask)
        s->cu[ncu++] = (int32_t)((size_t)rows * S);
    s->num_cu = ncu;
    s->max_seqlen = maxlen;
    s->rows = rows;
fail:
    return rc;
}

/* ---- The pipeline --------------------------------------------------------------------------- */

typedef struct tl_arg {
    dlc_token_loader *l;
    uint32_t index;
} tl_arg;

/* The slot rule (mu held): a batch is left to claim, and fillers stay depth - 1 batches ahead of
 * the one lent, so the slot of next_fill is free. Workers and a waiting next() both follow it. */
static int claimable(const dlc_token_loader *l)
{
    return l->next_fill < l->shard.batches && l->next_fill + 1 < l->delivered + l->depth;
}

static void *worker_main(void *p)
{
    dlc_token_loader *l = ((tl_arg *)p)->l;
    tl_worker *wk = &l->workers[((tl_arg *)p)->index];
    free(p);
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && l->error == DLC_OK && !claimable(l))
            pthread_cond_wait(&l->work, &l->mu);
        if (l->stop || l->error != DLC_OK)
            break;
        const uint64_t k = l->next_fill++;
        tl_slot *s = &l->slots[k % l->depth];
        pthread_mutex_unlock(&l->mu);
        const dlc_status rc = fill_batch(l, wk, s, k);
        pthread_mutex_lock(&l->mu);
        if (rc != DLC_OK && l->error == DLC_OK) {
            l->error = rc;
            dlc__err_save(&l->error_msg);
        }
        s->batch = k;
        pthread_cond_signal(&l->done); /* Only the consumer waits on it. */
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void stop_workers(dlc_token_loader *l)
{
    if (!l->running)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
    for (uint32_t i = 0; i < l->c.threads; i++)
        pthread_join(l->threads[i], NULL);
    l->running = 0;
    l->stop = 0;
}

static dlc_status start_workers(dlc_token_loader *l)
{
    l->next_fill = l->delivered;
    l->error = DLC_OK;
    for (uint32_t i = 0; i < l->depth; i++)
        l->slots[i].batch = UINT64_MAX;
    for (uint32_t i = 0; i < l->c.threads; i++) {
        tl_arg *a = malloc(sizeof *a);
        int e = a ? 0 : ENOMEM;
        if (a) {
            *a = (tl_arg){l, i};
            e = pthread_create(&l->threads[i], NULL, worker_main, a);
            if (e)
                free(a);
        }
        if (e) {
            l->running = 1;
            const uint32_t made = i;
            l->c.threads = made; /* Join the ones made, then give the count back. */
            stop_workers(l);
            return dlc__errorf(-e, "%s: cannot start a worker thread", loader_name(l));
        }
    }
    l->running = 1;
    return DLC_OK;
}

/* ---- The API -------------------------------------------------------------------------------- */

uint64_t dlc_token_loader_num_windows(const dlc_token_loader *l)
{
    return l ? l->windows : 0;
}

dlc_status dlc_token_loader_packing(const dlc_token_loader *l, uint64_t *rows, uint64_t *pad_tokens,
                                    int *saved)
{
    if (!l)
        return dlc__errorf(DLC_EINVAL, "dlc_token_loader_packing: NULL loader");
    if (rows)
        *rows = l->windows;
    if (pad_tokens)
        *pad_tokens = l->bf_pad;
    if (saved)
        *saved = l->bf_saved;
    return DLC_OK;
}

uint32_t dlc_token_loader_host_slots(const dlc_token_loader *l, void **bases, size_t *sizes,
                                     uint32_t cap)
{
    if (!l || !l->slots)
        return 0;
    const size_t cells = (size_t)l->c.batch_size * l->c.seq_len;
    uint32_t n = 0;
    for (uint32_t i = 0; i < l->depth; i++) {
        const tl_slot *s = &l->slots[i];
        void *const b[4] = {s->input_ids, s->labels, s->position_ids, s->cu};
        const size_t z[4] = {cells * l->esize, cells * l->esize, cells * l->esize,
                             (cells + 1) * sizeof *s->cu};
        for (int j = 0; j < 4; j++, n++) {
            if (bases && sizes && n < cap) {
                bases[n] = b[j];
                sizes[n] = z[j];
            }
        }
    }
    return n;
}

uint64_t dlc_token_loader_len(const dlc_token_loader *l)
{
    return l ? l->shard.batches : 0;
}

uint64_t dlc_token_loader_position(const dlc_token_loader *l, uint64_t *epoch)
{
    if (!l)
        return 0;
    if (epoch)
        *epoch = l->epoch;
    const uint64_t p = l->shard.start + l->delivered * (uint64_t)l->c.batch_size * l->c.world_size;
    return p < l->windows ? p : l->windows;
}

dlc_status dlc_token_loader_seek(dlc_token_loader *l, uint64_t epoch, uint64_t start)
{
    if (!l)
        return dlc__errorf(DLC_EINVAL, "dlc_token_loader_seek: NULL loader");
    if (start > l->windows)
        return dlc__errorf(DLC_EINVAL,
                           "%s: position %" PRIu64 " is beyond the %" PRIu64 " windows of an epoch",
                           loader_name(l), start, l->windows);
    stop_workers(l);
    l->epoch = epoch;
    dlc__sampler_set_epoch(&l->sampler, l->c.seed, epoch);
    dlc__shard_plan(&l->shard, l->windows, start, l->c.rank, l->c.world_size, l->c.batch_size,
                    l->c.drop_last);
    l->delivered = 0;
    return DLC_OK;
}

static void lend(const dlc_token_loader *l, const tl_slot *s, uint64_t index, dlc_token_batch *b)
{
    memset(b, 0, sizeof *b);
    b->rows = s->rows;
    b->seq_len = l->c.seq_len;
    b->dtype = l->c.out_dtype;
    b->num_cu = s->num_cu;
    b->input_ids = s->input_ids;
    b->labels = s->labels;
    b->position_ids = s->position_ids;
    b->cu_seqlens = l->c.document_mask ? s->cu : NULL;
    b->max_seqlen = s->max_seqlen;
    b->epoch = l->epoch;
    b->index = index;
}

dlc_status dlc_token_loader_next(dlc_token_loader *l, dlc_token_batch *batch)
{
    if (!l || !batch)
        return dlc__errorf(DLC_EINVAL, "dlc_token_loader_next: NULL argument");
    if (l->delivered >= l->shard.batches)
        return DLC_END;
    dlc_status rc = ensure_order(l);
    if (rc != DLC_OK)
        return rc;
    const uint64_t k = l->delivered;
    if (l->c.threads == 0) {
        rc = fill_batch(l, &l->workers[0], &l->slots[0], k);
        if (rc != DLC_OK)
            return rc;
        lend(l, &l->slots[0], k, batch);
        l->delivered++;
        return DLC_OK;
    }
    if (!l->running)
        CHECK(start_workers(l));
    pthread_mutex_lock(&l->mu);
    /* The batch lent before is given back: one slot, so one worker to wake. */
    pthread_cond_signal(&l->work);
    tl_slot *s = &l->slots[k % l->depth];
    while (s->batch != k && l->error == DLC_OK) {
        if (claimable(l)) {
            /* Fill the next unclaimed batch here, under the workers' slot rule, with the caller's
             * own buffers and reader, rather than sleep: batch k itself when no worker has claimed
             * it (they are behind or not scheduled), else a later one while a worker has k in
             * hand. A batch of a few microseconds of copying costs less than the two context
             * switches of a sleep and a wake-up, and the caller's thread is one more filler while
             * it waits. */
            const uint64_t j = l->next_fill++;
            tl_slot *sj = &l->slots[j % l->depth];
            pthread_mutex_unlock(&l->mu);
            const dlc_status frc = fill_batch(l, &l->workers[l->c.threads], sj, j);
            pthread_mutex_lock(&l->mu);
            if (frc != DLC_OK && l->error == DLC_OK) {
                l->error = frc;
                dlc__err_save(&l->error_msg);
            }
            sj->batch = j;
            continue;
        }
        pthread_cond_wait(&l->done, &l->mu);
    }
    if (s->batch == k && l->error == DLC_OK) {
        lend(l, s, k, batch);
        l->delivered++;
    } else {
        rc = dlc__err_restore(&l->error_msg, l->error);
    }
    pthread_mutex_unlock(&l->mu);
fail:
    return rc;
}

/* ---- A set opened by its URL ----------------------------------------------------------------- */

/* The set at @p url through the streaming cache in c->cache_dir: its index fetched, the set
 * opened lazily from it, then every part downloaded (c->downloads at a time, in the order of the
 * parts), checked, pinned and attached, so that dlc_tokens_open() reads the set as a local one.
 * The cache checks each part before publishing it (size, content digest, place in the set and
 * every record's checksum), and processes sharing the folder download each part once. */
static dlc_status open_streamed(dlc_token_loader *l, const char *url,
                                const dlc_token_loader_config *c)
{
    dlc_status rc = DLC_OK;
    FAIL_IF(!c->cache_dir || !*c->cache_dir, DLC_EINVAL,
            "%s: streaming from object storage needs config.cache_dir, the local folder that "
            "holds the set's parts",
            url);
    const dlc__scache_config sc = {
        .dir = c->cache_dir,
        .limit = c->cache_limit,
        .url = url,
        .net = c->net,
        .downloads = c->downloads,
    };
    int refused = 0;
    rc = dlc__scache_open(&sc, &l->cache);
    if (rc == DLC_EINVAL && sc.limit) {
        /* Below even the index and one part: the check below names what the parts need. */
        dlc__errsave es;
        dlc__err_save(&es);
        dlc__scache_config uncapped = sc;
        uncapped.limit = 0;
        uncapped.plan_only = 1;
        if (dlc__scache_open(&uncapped, &l->cache) != DLC_OK)
            CHECK(dlc__err_restore(&es, rc));
        refused = 1;
        rc = DLC_OK;
    }
    CHECK(rc);
    const dlc__set_index *x = dlc__scache_index(l->cache);
    /* Every part is held at once: the documents' order spans them all. */
    const uint64_t need = dlc__scache_needed(x, x->num_shards, 0);
    FAIL_IF(refused || (c->cache_limit && c->cache_limit < need), DLC_EINVAL,
            "%s: cache_limit %" PRIu64 " bytes is below the %" PRIu64
            " bytes of the set's %u parts and index, which a token loader holds while it is open "
            "(the order of the documents spans every part)",
            url, c->cache_limit, need, x->num_shards);
    CHECK(dlc__set_open_lazy(dlc__scache_set_dir(l->cache), &l->store));
    uint32_t *order = malloc((x->num_shards ? x->num_shards : 1) * sizeof *order);
    FAIL_IF(!order, -ENOMEM, "%s: out of memory", url);
    for (uint32_t k = 0; k < x->num_shards; k++)
        order[k] = k;
    rc = dlc__scache_schedule(l->cache, order, x->num_shards);
    free(order);
    CHECK(rc);
    for (uint32_t k = 0; k < x->num_shards; k++) {
        const char *part = NULL;
        CHECK(dlc__scache_acquire(l->cache, k, &part));
        l->pinned = k + 1;
        CHECK(dlc__set_attach(l->store, k, part));
    }
fail:
    return rc;
}

/* Detach and unpin the parts, close the cache (its files stay for the next open). */
static void close_streamed(dlc_token_loader *l)
{
    for (uint32_t k = 0; k < l->pinned; k++) {
        dlc__set_detach(l->store, k);
        dlc__scache_release(l->cache, k);
    }
    l->pinned = 0;
    dlc__scache_close(l->cache);
    l->cache = NULL;
}

static void add_stream_stats(const dlc_token_loader *l, dlc_loader_stream_stats *all)
{
    for (uint32_t k = 0; k < l->nsrc; k++)
        add_stream_stats(l->src[k], all);
    if (!l->cache)
        return;
    dlc__scache_stats st;
    dlc__scache_stats_get(l->cache, &st);
    all->stall_seconds += st.stall_s;
    all->hits += st.hits;
    all->misses += st.misses;
    all->bytes_fetched += st.bytes_fetched;
    all->requests += st.requests;
    all->peak_cache_bytes =
        st.peak_bytes > all->peak_cache_bytes ? st.peak_bytes : all->peak_cache_bytes;
    all->evictions += st.evictions;
    all->downloads += st.downloads;
}

dlc_status dlc_token_loader_stream_stats(const dlc_token_loader *l, dlc_loader_stream_stats *st)
{
    if (!l || !st)
        return dlc__errorf(DLC_EINVAL, "dlc_token_loader_stream_stats: NULL argument");
    dlc_loader_stream_stats all;
    memset(&all, 0, sizeof all);
    add_stream_stats(l, &all);
    return dlc__result_give(st, &all, sizeof all, "dlc_loader_stream_stats");
}

void dlc_token_loader_close(dlc_token_loader *l)
{
    if (!l)
        return;
    stop_workers(l);
    for (uint32_t i = 0; l->slots && i < l->depth; i++) {
        free(l->slots[i].input_ids);
        free(l->slots[i].labels);
        free(l->slots[i].position_ids);
        free(l->slots[i].cu);
    }
    for (uint32_t i = 0; l->workers && i < l->nworkers; i++) {
        dlc_store_reader_close(l->workers[i].reader);
        free(l->workers[i].tok);
        free(l->workers[i].segs);
        free(l->workers[i].pieces);
    }
    for (size_t i = 0; l->mreaders && i < (size_t)l->nworkers * l->nsrc; i++)
        dlc_store_reader_close(l->mreaders[i]);
    free(l->mreaders);
    for (uint32_t k = 0; l->src && k < l->nsrc; k++)
        dlc_token_loader_close(l->src[k]);
    free(l->src);
    free(l->src_first);
    free(l->slots);
    free(l->workers);
    free(l->threads);
    free(l->blk_sums);
    free(l->bf_starts);
    free(l->bf_items);
    free((void *)l->verified_ok);
    free((void *)l->verified_bad);
    dlc__sampler_free(&l->sampler);
    dlc_tokens_close(l->tokens);
    if (l->cache)
        close_streamed(l);
    dlc_store_close(l->store);
    if (l->locks_made) {
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->work);
        pthread_cond_destroy(&l->done);
    }
    free(l);
}

/* The batch slots and the workers' buffers (and, for one store, their readers). */
static dlc_status make_slots(dlc_token_loader *l, const char *path, int readers)
{
    dlc_status rc = DLC_OK;
    const dlc_token_loader_config *c = &l->c;
    l->depth = c->threads ? c->threads + 2 : 1;
    l->nworkers = c->threads + 1; /* The threads', then the caller's (it fills a batch too). */
    l->slots = calloc(l->depth, sizeof *l->slots);
    l->workers = calloc(l->nworkers, sizeof *l->workers);
    l->threads = calloc(l->nworkers, sizeof *l->threads);
    FAIL_IF(!l->slots || !l->workers || !l->threads, -ENOMEM, "%s: out of memory", path);
    const size_t cells = (size_t)c->batch_size * c->seq_len;
    for (uint32_t i = 0; i < l->depth; i++) {
        tl_slot *s = &l->slots[i];
        s->input_ids = malloc(cells * l->esize);
        s->labels = malloc(cells * l->esize);
        s->position_ids = malloc(cells * l->esize);
        s->cu = malloc((cells + 1) * sizeof *s->cu);
        s->batch = UINT64_MAX;
        FAIL_IF(!s->input_ids || !s->labels || !s->position_ids || !s->cu, -ENOMEM,
                "%s: out of memory for %u batch slots of %zu tokens", path, l->depth, cells);
    }
    for (uint32_t i = 0; i < l->nworkers; i++) {
        tl_worker *w = &l->workers[i];
        w->tok = malloc(((size_t)c->seq_len + 1) * sizeof *w->tok);
        w->segs = malloc(((size_t)c->seq_len + 1) * sizeof *w->segs);
        w->pieces = malloc(2 * ((size_t)c->seq_len + 1) * sizeof *w->pieces);
        FAIL_IF(!w->tok || !w->segs || !w->pieces, -ENOMEM, "%s: out of memory", path);
        if (readers)
            CHECK(dlc_store_reader_open(l->store, &w->reader));
    }
fail:
    return rc;
}

/* The options every token loader checks, named with @p path. */
/* The caller's options over the defaults into @p out: its struct_size is this header's, or the
 * size before the streaming fields (56 bytes), whose callers get the defaults for those. */
static dlc_status take_config(const char *path, const dlc_token_loader_config *config,
                              dlc_token_loader_config *out)
{
    static const uint32_t older[] = {offsetof(dlc_token_loader_config, cache_dir), 0};
    _Static_assert(offsetof(dlc_token_loader_config, cache_dir) == 56,
                   "the streaming fields follow the 1.x fields");
    dlc_token_loader_config_init(out);
    const dlc_status rc = dlc__options_take_as(out, sizeof *out, config, "dlc_token_loader_config",
                                               "dlc_token_loader_config_init", older);
    if (rc != DLC_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dlc_errmsg());
        return dlc__errorf(rc, "%s: token loader: %s", path, msg);
    }
    return DLC_OK;
}

static dlc_status check_config(const char *path, const dlc_token_loader_config *config)
{
    const dlc_token_loader_config *c = config;
    if (c->batch_size == 0 || c->seq_len == 0 || c->world_size == 0 || c->rank >= c->world_size ||
        c->threads > 256 || (c->out_dtype != DLC_DTYPE_INT64 && c->out_dtype != DLC_DTYPE_INT32) ||
        c->packing > DLC_TOKEN_PACK_BEST_FIT || c->verify > DLC_VERIFY_ALWAYS ||
        (uint64_t)c->batch_size * c->seq_len > INT32_MAX - 1)
        return dlc__errorf(
            DLC_EINVAL,
            "%s: token loader: batch_size %u, seq_len %u (batch x seq_len below "
            "2^31), rank %u of world_size %u, threads %u (0..256), out_dtype %s "
            "(int64 or int32), packing %u (concat or best_fit), verify %u (0..2): one of them "
            "is out of range",
            path, c->batch_size, c->seq_len, c->rank, c->world_size, c->threads,
            dlc_dtype_name(c->out_dtype), c->packing, c->verify);
    return DLC_OK;
}

dlc_status dlc_token_loader_open(const char *path, const dlc_token_loader_config *config,
                                 dlc_token_loader **out)
{
    if (out)
        *out = NULL;
    if (!path || !config || !out)
        return dlc__errorf(DLC_EINVAL, "dlc_token_loader_open: NULL argument");
    dlc_token_loader_config taken;
    if (take_config(path, config, &taken) != DLC_OK || check_config(path, &taken) != DLC_OK)
        return DLC_EINVAL;
    /* config.net is checked on any path (a streamed set's cache takes its own copy of it), so
     * that a bad struct_size is refused where it is given. */
    dlc_warm_options net;
    const dlc_status nrc = dlc__scache_net_take(&taken.net, &net, "dlc_token_loader_config.net");
    if (nrc != DLC_OK)
        return nrc;
    const dlc_token_loader_config *c = &taken;
    dlc_status rc = DLC_OK;
    dlc_token_loader *l = calloc(1, sizeof *l);
    FAIL_IF(!l, -ENOMEM, "%s: out of memory", path);
    l->c = *c;
    /* Not retained: read at open only. */
    l->c.cache_dir = NULL;
    l->c.net = NULL;
    l->esize = c->out_dtype == DLC_DTYPE_INT64 ? 8 : 4;
    FAIL_IF(pthread_mutex_init(&l->mu, NULL) != 0, -ENOMEM, "%s: no lock", path);
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->done, NULL);
    l->locks_made = 1;
    if (dlc__stream_is_url(path))
        CHECK(open_streamed(l, path, c));
    else
        CHECK(dlc_store_open(path, 0, &l->store));
    CHECK(dlc_tokens_open(l->store, &l->tokens));
    l->info = *dlc_tokens_get_info(l->tokens);
    l->offsets = dlc_tokens_offsets(l->tokens);
    if (c->verify != DLC_VERIFY_OFF) {
        /* A bit per document each: 125 MB per 10^9 documents; "always" needs no record of
         * the documents that passed. */
        const size_t words = (size_t)(l->info.num_docs / 64 + 1);
        if (c->verify == DLC_VERIFY_FIRST)
            l->verified_ok = calloc(words, sizeof *l->verified_ok);
        l->verified_bad = calloc(words, sizeof *l->verified_bad);
        FAIL_IF((c->verify == DLC_VERIFY_FIRST && !l->verified_ok) || !l->verified_bad, -ENOMEM,
                "%s: out of memory for verify's bits of %" PRIu64 " documents", path,
                l->info.num_docs);
    }
    /* Best-fit's padding is an input id, and no embedding looks up a negative one. It may be at
     * or above the store's vocab_size: a model often has rows beyond its tokenizer's ids (a
     * vocabulary padded to a multiple of 64, a pad token of its own). */
    FAIL_IF(c->packing == DLC_TOKEN_PACK_BEST_FIT && c->pad_id < 0, DLC_EINVAL,
            "%s: pad_id %" PRId32 " is not an id (0 or more)", path, c->pad_id);
    FAIL_IF(c->packing == DLC_TOKEN_PACK_CONCAT && l->info.num_tokens < (uint64_t)c->seq_len + 1,
            DLC_EINVAL, "%s: %" PRIu64 " tokens, fewer than one window of seq_len + 1 = %u", path,
            l->info.num_tokens, c->seq_len + 1);
    l->windows = (l->info.num_tokens - 1) / c->seq_len;
    dlc__tl_kernels_pick(&l->k, l->info.dtype == DLC_DTYPE_UINT16, l->esize, 0);
    l->nblocks = (l->info.num_docs + DLC__TL_BLOCK - 1) / DLC__TL_BLOCK;
    if (c->shuffle) {
        dlc__perm_init(&l->doc_perm, l->info.num_docs,
                       dlc__key4(DLC__KEY_TOKEN_DOCS, c->seed, 0, 0));
        /* The blocks' order, the order inside a block (a table of DLC__TL_BLOCK), and x_b. */
        dlc__perm_init(&l->blk_perm, l->nblocks, dlc__key4(DLC__KEY_TOKEN_DOCS, c->seed, 1, 0));
        dlc__perm sigma;
        dlc__perm_init(&sigma, DLC__TL_BLOCK, dlc__key4(DLC__KEY_TOKEN_DOCS, c->seed, 2, 0));
        for (uint32_t t = 0; t < DLC__TL_BLOCK; t++)
            l->blk_sigma[t] = (uint8_t)dlc__perm_apply(&sigma, t);
        l->blk_key = dlc__key4(DLC__KEY_TOKEN_DOCS, c->seed, 3, 0);
    }
    if (c->packing == DLC_TOKEN_PACK_BEST_FIT) {
        CHECK(dlc__bf_plan(l));
        l->windows = l->bf_bins;
    }
    CHECK(dlc__sampler_init(&l->sampler, c->shuffle ? DLC_SAMPLER_SHUFFLE : DLC_SAMPLER_SEQUENTIAL,
                            l->windows, 0, 0, NULL, 0, NULL));
    CHECK(make_slots(l, path, 1));
    CHECK(dlc_token_loader_seek(l, 0, 0));
    *out = l;
    return DLC_OK;
fail:
    dlc_token_loader_close(l);
    return rc;
}

/* ---- Mixtures ------------------------------------------------------------------------------- */

dlc_status dlc_token_loader_open_mix(const char *const *paths, const double *weights, uint32_t n,
                                     uint64_t rows_per_epoch, const dlc_token_loader_config *config,
                                     dlc_token_loader **out)
{
    if (!paths || !weights || !config || !out || n == 0 || n > DLC__MIX_MAX_SOURCES)
        return dlc__errorf(DLC_EINVAL,
                           "token mixture: 1 to %u sources with weights, options and "
                           "a result",
                           DLC__MIX_MAX_SOURCES);
    *out = NULL;
    dlc_token_loader_config taken;
    if (take_config("token mixture", config, &taken) != DLC_OK ||
        check_config("token mixture", &taken) != DLC_OK)
        return DLC_EINVAL;
    config = &taken;
    dlc_status rc = DLC_OK;
    dlc_token_loader *l = calloc(1, sizeof *l);
    FAIL_IF(!l, -ENOMEM, "token mixture: out of memory");
    l->c = *config;
    l->c.cache_dir = NULL;
    l->c.net = NULL;
    l->esize = config->out_dtype == DLC_DTYPE_INT64 ? 8 : 4;
    FAIL_IF(pthread_mutex_init(&l->mu, NULL) != 0, -ENOMEM, "token mixture: no lock");
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->done, NULL);
    l->locks_made = 1;
    l->src = calloc(n, sizeof *l->src);
    l->src_first = calloc((size_t)n + 1, sizeof *l->src_first);
    FAIL_IF(!l->src || !l->src_first, -ENOMEM, "token mixture: out of memory");
    /* Each source: a loader of its own without threads, for its store, order and plan. */
    dlc_token_loader_config sc = *config;
    sc.threads = 0;
    sc.batch_size = 1;
    sc.rank = 0;
    sc.world_size = 1;
    dlc__mix_source ms[DLC__MIX_MAX_SOURCES];
    for (uint32_t k = 0; k < n; k++) {
        CHECK(dlc_token_loader_open(paths[k], &sc, &l->src[k]));
        l->nsrc = k + 1; /* Closed with the mixture from here on. */
        const dlc_token_loader *s = l->src[k];
        ms[k] = (dlc__mix_source){.count = s->windows,
                                  .first = l->src_first[k],
                                  .tag = dlc_store_get_info(s->store)->content_digest,
                                  .weight = weights[k]};
        l->src_first[k + 1] = l->src_first[k] + s->windows;
    }
    l->windows = rows_per_epoch ? rows_per_epoch : l->src_first[n];
    l->sampler.kind = config->shuffle ? DLC_SAMPLER_SHUFFLE : DLC_SAMPLER_SEQUENTIAL;
    l->sampler.count = l->src_first[n];
    l->sampler.len = l->windows;
    l->sampler.mix = calloc(1, sizeof *l->sampler.mix);
    FAIL_IF(!l->sampler.mix, -ENOMEM, "token mixture: out of memory");
    CHECK(dlc__mix_init(l->sampler.mix, ms, n, l->windows, config->world_size, config->drop_last,
                        !config->shuffle, paths));
    l->sampler.mix->batch = config->batch_size;
    CHECK(make_slots(l, "token mixture", 0));
    l->mreaders = calloc((size_t)l->nworkers * n, sizeof *l->mreaders);
    FAIL_IF(!l->mreaders, -ENOMEM, "token mixture: out of memory");
    for (uint32_t w = 0; w < l->nworkers; w++)
        for (uint32_t k = 0; k < n; k++)
            CHECK(dlc_store_reader_open(l->src[k]->store, &l->mreaders[(size_t)w * n + k]));
    CHECK(dlc_token_loader_seek(l, 0, 0));
    *out = l;
    return DLC_OK;
fail:
    dlc_token_loader_close(l);
    return rc;
}

#define MIX_MAGIC "DLCTMIX1"
#define MIX_HEAD 72u
#define MIX_ENTRY 40u

dlc_status dlc_token_loader_mix_state(const dlc_token_loader *l, uint8_t *buf, size_t cap,
                                      size_t *len)
{
    if (!l || !buf || !len || !l->nsrc)
        return dlc__errorf(DLC_EINVAL, "dlc_token_loader_mix_state: not a token mixture");
    const dlc__mix *m = l->sampler.mix;
    const size_t need = MIX_HEAD + (size_t)MIX_ENTRY * l->nsrc + 8;
    if (cap < need)
        return dlc__errorf(DLC_EINVAL, "token mixture: a state needs %zu bytes, not %zu", need,
                           cap);
    uint64_t epoch;
    const uint64_t pos = dlc_token_loader_position(l, &epoch);
    uint64_t draws[DLC__MIX_MAX_SOURCES];
    dlc__mix_draws(m, epoch, pos, draws);
    memset(buf, 0, need);
    memcpy(buf, MIX_MAGIC, 8);
    dlc__st32(buf + 8, l->nsrc);
    dlc__st32(buf + 12, l->c.world_size);
    dlc__st64(buf + 16, l->c.seed);
    dlc__st64(buf + 24, epoch);
    dlc__st64(buf + 32, pos);
    dlc__st64(buf + 40, m->seg_epoch);
    dlc__st64(buf + 48, m->seg_pos);
    dlc__st64(buf + 56, l->windows);
    dlc__st32(buf + 64, (l->c.drop_last ? 1u : 0u) | (l->c.shuffle ? 0u : 2u));
    dlc__st32(buf + 68, l->c.batch_size);
    for (uint32_t k = 0; k < l->nsrc; k++) {
        uint8_t *e = buf + MIX_HEAD + (size_t)MIX_ENTRY * k;
        dlc__st64(e, m->src[k].tag);
        dlc__st64(e + 8, m->src[k].count);
        dlc__st64(e + 16, m->base[k]);
        dlc__st64(e + 24, draws[k]);
        dlc__st32(e + 32, m->quota[k]);
    }
    dlc__st64(buf + need - 8, XXH3_64bits(buf, need - 8));
    *len = need;
    return DLC_OK;
}

dlc_status dlc_token_loader_mix_restore(dlc_token_loader *l, const uint8_t *p, size_t len)
{
    if (!l || !p || !l->nsrc)
        return dlc__errorf(DLC_EINVAL, "dlc_token_loader_mix_restore: not a token mixture");
    const uint32_t n = len >= MIX_HEAD ? dlc__ld32(p + 8) : 0;
    const size_t need = MIX_HEAD + (size_t)MIX_ENTRY * n + 8;
    if (len < MIX_HEAD || memcmp(p, MIX_MAGIC, 8) != 0 || n == 0 || n > DLC__MIX_MAX_SOURCES ||
        len != need || dlc__ld64(p + need - 8) != XXH3_64bits(p, need - 8))
        return dlc__errorf(DLC_EINVAL, "token mixture: not a state of a token mixture, or damaged");
    dlc__mix *m = l->sampler.mix;
    const uint64_t seed = dlc__ld64(p + 16), epoch = dlc__ld64(p + 24), pos = dlc__ld64(p + 32);
    if (seed != l->c.seed)
        return dlc__errorf(DLC_EINVAL,
                           "token mixture: the state has seed %" PRIu64 ", this loader %" PRIu64,
                           seed, l->c.seed);
    int same = n == l->nsrc && dlc__ld32(p + 12) == l->c.world_size &&
               dlc__ld64(p + 56) == l->windows && dlc__ld32(p + 68) == l->c.batch_size &&
               dlc__ld32(p + 64) == ((l->c.drop_last ? 1u : 0u) | (l->c.shuffle ? 0u : 2u));
    uint64_t base[DLC__MIX_MAX_SOURCES], now[DLC__MIX_MAX_SOURCES];
    int used[DLC__MIX_MAX_SOURCES] = {0};
    for (uint32_t k = 0; k < l->nsrc; k++) {
        int j = -1;
        for (uint32_t i = 0; i < n && j < 0; i++) {
            const uint8_t *e = p + MIX_HEAD + (size_t)MIX_ENTRY * i;
            if (!used[i] && dlc__ld64(e) == m->src[k].tag && dlc__ld64(e + 8) == m->src[k].count)
                j = (int)i;
        }
        if (j >= 0) {
            const uint8_t *e = p + MIX_HEAD + (size_t)MIX_ENTRY * j;
            used[j] = 1;
            base[k] = dlc__ld64(e + 16);
            now[k] = dlc__ld64(e + 24);
            same = same && dlc__ld32(e + 32) == m->quota[k];
        } else {
            base[k] = now[k] = 0; /* A source new to the mixture starts its first pass. */
        }
        same = same && j == (int)k;
    }
    if (pos > l->windows)
        return dlc__errorf(DLC_EINVAL, "token mixture: position %" PRIu64 " beyond %" PRIu64, pos,
                           l->windows);
    /* The same schedule continues exactly; another one (weights, sources, world size) begins
     * here with every source's pass where it stood. */
    if (same)
        dlc__mix_segment(m, dlc__ld64(p + 40), dlc__ld64(p + 48), base);
    else
        dlc__mix_segment(m, epoch, pos, now);
    return dlc_token_loader_seek(l, epoch, pos);
}
