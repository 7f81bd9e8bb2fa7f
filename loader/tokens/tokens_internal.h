/* The loader's tokens room (loader/tokens/): packed sequences of a token store
 * (include/dlcache/tokens.h, docs/TOKENS.md). Private to loader/tokens/. */
#ifndef DLCACHE_LOADER_TOKENS_INTERNAL_H
#define DLCACHE_LOADER_TOKENS_INTERNAL_H

#include "common.h"
#include "sampler.h"
#include "stream_cache.h"

#include <dlcache/tokens.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* The key purpose of the documents' order (the first word of dlc__key4), apart from the loader's
 * own purposes (common.h). */
#define DLC__KEY_TOKEN_DOCS 0x544f4b454e44ull

/* The documents' seeded order for concat (docs/TOKENS.md): the documents in blocks of
 * DLC__TL_BLOCK consecutive records, the blocks in a Feistel order of the seed, the documents of
 * block b in the order i = sigma[t] ^ x_b (t = 0 .. DLC__TL_BLOCK - 1, skipping i beyond the
 * block), sigma a Feistel permutation of [0, DLC__TL_BLOCK) of the seed and x_b a word of (seed,
 * b). So the order costs one prefix sum per block, made at the first batch, and nothing per
 * document. */
#define DLC__TL_BLOCK 64u

/* The copy kernels (tokens_fill.c), picked once at open. */
typedef struct dlc__tl_kernels {
    /** A piece of @p n stored tokens at @p src landing at window positions @p at .. at + n - 1
     *  of a window of @p S + 1: into inputs @p in (positions below S) and labels @p lab
     *  (positions from 1, one to the left). */
    void (*piece)(const uint8_t *src, uint32_t at, uint32_t n, uint32_t S, void *in, void *lab);
    /** 0, 1, .. @p n - 1 into @p pos. */
    void (*run)(void *pos, uint32_t n);
    int avx2; /**< The AVX2 versions were picked. */
} dlc__tl_kernels;

/** Pick the kernels for stored uint16 (@p u16) or 32-bit ids into elements of @p esize bytes;
 *  @p portable forces the plain C ones. */
void dlc__tl_kernels_pick(dlc__tl_kernels *k, int u16, size_t esize, int portable);

/* A document's piece of a window: its tokens, where they land, how many. */
typedef struct tl_piece {
    const uint8_t *src;
    uint32_t at, n;
} tl_piece;

/* One batch's buffers, made at open and reused: a batch never allocates. */
typedef struct tl_slot {
    uint8_t *input_ids, *labels, *position_ids; /* batch x seq_len elements of esize bytes. */
    int32_t *cu;                                /* batch x seq_len + 1. */
    uint32_t num_cu, max_seqlen, rows;
    uint64_t batch; /* The batch it holds (UINT64_MAX: none). */
} tl_slot;

/* What one filling thread owns: its reader of the store and one window's tokens. */
typedef struct tl_worker {
    dlc_store_reader *reader;
    uint32_t *tok;    /* seq_len + 1 tokens of a window. */
    uint32_t *segs;   /* Where each document's piece starts in the window (seq_len + 1). */
    tl_piece *pieces; /* Two concat windows' pieces (2 x (seq_len + 1)). */
} tl_worker;

struct dlc_token_loader {
    dlc_token_loader_config c;
    dlc_store *store;
    /* A set opened by its URL: store is the set opened lazily from the index in the cache, whose
     * parts 0 .. pinned - 1 are acquired (pinned) and attached until close. NULL and 0 else. */
    dlc__scache *cache;
    uint32_t pinned;
    dlc_tokens *tokens;
    dlc_tokens_info info;
    const uint64_t *offsets;          /* The store's prefix sums. */
    size_t esize;                     /* Bytes of an output element: 4 or 8. */
    uint64_t windows;                 /* (num_tokens - 1) / seq_len. */
    dlc__perm doc_perm;               /* Best-fit's tie order of the documents (shuffle). */
    dlc__perm blk_perm;               /* Concat: the blocks' seeded order (shuffle). */
    uint8_t blk_sigma[DLC__TL_BLOCK]; /* Concat: the order inside a block, before x_b. */
    uint64_t blk_key;                 /* Concat: x_b = mix64(blk_key ^ b) % DLC__TL_BLOCK. */
    uint64_t nblocks;
    uint64_t *blk_sums; /* nblocks + 1 prefix sums of the blocks' tokens in their order, made at
                         * the first batch (8 bytes per block). */
    dlc_status perm_rc;
    dlc__tl_kernels k;
    dlc__sampler sampler; /* The epoch's order of windows. */
    dlc__shard shard;     /* This rank's share from the seek. */
    uint64_t epoch;
    uint64_t delivered; /* Batches handed out since the seek. */

    uint32_t depth; /* Slots. */
    tl_slot *slots;
    tl_worker *workers; /* threads, or 1 without threads (the caller's). */
    uint32_t nworkers;

    /* The pipeline (threads > 0): workers claim batches in order and fill their slots; the
     * consumer takes them in order. One lock and two condition variables, taken per batch. */
    pthread_t *threads;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    uint64_t next_fill; /* The next batch a worker claims. */
    int stop;
    dlc_status error;
    dlc__errsave error_msg;
    int locks_made;

    /* Best-fit packing (tokens_bestfit.c): row b holds items bf_starts[b] .. bf_starts[b+1]-1,
     * each 16 bytes: the document (u64), the piece's first token in it and its length (u32). */
    uint64_t *bf_starts;
    uint8_t *bf_items;
    uint64_t bf_bins, bf_nitems, bf_pad;
    int bf_saved; /* The plan is in its file beside the store. */

    /* A mixture (dlc_token_loader_open_mix()): nsrc sources, each a loader of its own (its store,
     * order and plan; no threads), whose windows are numbered src_first[k] .. in the schedule of
     * sampler.mix; every worker has a reader of each source. 0 and NULL for one store. */
    uint32_t nsrc;
    struct dlc_token_loader **src;

    /* c.verify: one bit per document, set once its checksum passed (DLC_VERIFY_FIRST only: NULL
     * else) or failed (NULL with DLC_VERIFY_OFF). Set from any worker, relaxed: a document checked
     * twice by two workers at once costs a hash, not a wrong answer. */
    _Atomic uint64_t *verified_ok;
    _Atomic uint64_t *verified_bad;
    uint64_t *src_first;         /* nsrc + 1. */
    dlc_store_reader **mreaders; /* nworkers x nsrc. */
};

/* Whether @p path is a URL that is streamed (loader/stream.c). */
int dlc__stream_is_url(const char *path);

/* Where document @p d starts: the store's prefix sums, or a set's through its shards. */
static inline uint64_t tl_doc_start(const dlc_token_loader *l, uint64_t d)
{
    return l->offsets ? l->offsets[d] : dlc_tokens_doc_start(l->tokens, d);
}

/* Read the best-fit plan beside the store, or make it (and save it there when the directory can
 * be written). DLC_OK, DLC_ECORRUPT (the store's prefix sums) or -ENOMEM. */
dlc_status dlc__bf_plan(dlc_token_loader *l);

#endif /* DLCACHE_LOADER_TOKENS_INTERNAL_H */
