/**
 * @file tokens.h
 * @brief Token stores: one document's token ids per record, the prefix sums of the documents'
 *        lengths and the tokenizer's identity in the store's metadata (docs/FORMAT.md, "Token
 *        stores").
 *
 * A token store is an ordinary version 2 store whose records have one field, "tokens", a 1-D
 * ndarray of uint16 (a vocabulary of at most 65536 ids) or int32 (larger ones) holding one
 * document, which always ends with the end-of-document id. Two metadata keys make it a token
 * store: "tokens" (a 128-byte block: element type, end-of-document id, vocabulary size, counts,
 * the tokenizer's name and the digest of its model file) and "token_offsets" (the prefix sums of
 * the documents' lengths, num_docs + 1 u64, from 0 to num_tokens). A library that predates them
 * ignores both keys and reads the store as records of one variable-length array.
 *
 * dlc_tokens_open() checks the block (hash, counts, the field) and the size, the first and the
 * last entry of the prefix sums, and maps them without reading them: any token position maps to
 * its document by a binary search (dlc_tokens_find()), so opening costs the same for a thousand
 * documents as for ten million. The table's own digest is checked by dlc_tokens_verify(), and
 * each document read through dlc_tokens_doc() is checked against its entry.
 *
 * Thread safety: a ::dlc_tokens is read-only after open and may be shared by any number of
 * threads; a ::dlc_token_writer belongs to one thread at a time.
 */
#ifndef DLCACHE_TOKENS_H
#define DLCACHE_TOKENS_H

#include <dlcache/loader.h>
#include <dlcache/status.h>
#include <dlcache/store.h>
#include <dlcache/warm.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The metadata key of a token store's 128-byte block. */
#define DLC_TOKENS_META "tokens"
/** The metadata key of the prefix sums of the documents' lengths (num_docs + 1 x u64). */
#define DLC_TOKENS_META_OFFSETS "token_offsets"
/** The name of the one field of a token store's records. */
#define DLC_TOKENS_FIELD "tokens"
/** Bytes of a tokenizer's name in the block, its terminating NUL included. */
#define DLC_TOKENS_NAME_MAX 48u
/** The tokenizer name of documents that came as token ids. */
#define DLC_TOKENS_PRETOKENIZED "pretokenized"

/** What a token store holds, read from its "tokens" block at open. */
typedef struct dlc_tokens_info {
    uint64_t num_docs;         /**< Documents: the store's records. */
    uint64_t num_tokens;       /**< Tokens of every document, end-of-document ids included. */
    uint32_t dtype;            /**< DLC_DTYPE_UINT16 or DLC_DTYPE_INT32: the stored element. */
    uint32_t eos_id;           /**< The end-of-document id: the last token of every document. */
    uint32_t vocab_size;       /**< Every id is below it; 0: not known (below 2^16 for uint16,
                                    2^31 for int32). */
    uint32_t field;            /**< The index of the "tokens" field in the schema. */
    uint64_t max_doc_tokens;   /**< The longest document, in tokens. */
    uint64_t offsets_digest;   /**< XXH3-64 of the prefix sums (checked by dlc_tokens_verify()). */
    uint64_t tokenizer_digest; /**< XXH3-64 of the tokenizer's model file; 0 when pretokenized. */
    char tokenizer[DLC_TOKENS_NAME_MAX]; /**< "sentencepiece:NAME" (the model file's base name)
                                              or ::DLC_TOKENS_PRETOKENIZED; NUL-terminated. */
} dlc_tokens_info;

/** A token store's view: the block and the prefix sums of one open store. */
typedef struct dlc_tokens dlc_tokens;

/**
 * @brief Read and check a token store's metadata.
 * @param[in] s An open store or store set; it must outlive the view. A set's shards are each
 *            opened as token stores and must agree (element type, end-of-document id,
 *            vocabulary, tokenizer); documents are numbered globally in shard order, and nothing
 *            per document is read. A streamed set is refused (DLC_ENOSYS).
 * @param[out] out The view; release with dlc_tokens_close(). NULL on failure.
 * @return DLC_OK; DLC_ENOTFOUND (not a token store: no "tokens" key); DLC_ECORRUPT (a block
 *         whose hash, magic, counts, element type or field disagree with the store, or prefix
 *         sums of the wrong size, not starting at 0 or not ending at num_tokens; named);
 *         DLC_EVERSION (a block of a newer version); DLC_EINVAL (a NULL argument); -ENOMEM.
 */
DLC_API dlc_status dlc_tokens_open(const dlc_store *s, dlc_tokens **out);

/** Free @p t (the store stays open).
 *  @param[in] t A view from dlc_tokens_open(), or NULL (nothing happens). */
DLC_API void dlc_tokens_close(dlc_tokens *t);

/** @brief The block read at open.
 *  @param[in] t The view.
 *  @return Owned by @p t, valid until dlc_tokens_close(); NULL only when @p t is NULL. */
DLC_API const dlc_tokens_info *dlc_tokens_get_info(const dlc_tokens *t);

/** @brief The prefix sums (a single store; NULL for a set: use dlc_tokens_doc_start()): num_docs +
 * 1 entries, entry d the position of document d's first token in the concatenation of the documents
 * in record order, the last num_tokens.
 *  @param[in] t The view.
 *  @return A view into the store's map (or a copy owned by @p t when LMDB left the value
 *          unaligned), valid until dlc_tokens_close(); never write it. NULL when @p t is NULL. */
DLC_API const uint64_t *dlc_tokens_offsets(const dlc_tokens *t);

/** @brief Where document @p doc starts in the concatenation: entry @p doc of the prefix sums,
 *         for a store or a set.
 *  @param[in] t The view.
 *  @param[in] doc 0..num_docs (num_docs: num_tokens).
 *  @return The position; UINT64_MAX when @p doc is out of range or @p t is NULL. */
DLC_API uint64_t dlc_tokens_doc_start(const dlc_tokens *t, uint64_t doc);

/** @brief The document that holds token position @p pos of the concatenation, by a binary
 *         search of the prefix sums (O(log num_docs), nothing allocated).
 *  @param[in] t The view.
 *  @param[in] pos 0..num_tokens-1.
 *  @return The document d with offsets[d] <= pos < offsets[d+1]; UINT64_MAX when @p pos is out of
 *          range or @p t is NULL. */
DLC_API uint64_t dlc_tokens_find(const dlc_tokens *t, uint64_t pos);

/**
 * @brief Document @p doc's tokens, as a view into the map, checked against the prefix sums.
 * @param[in] t The view.
 * @param[in] r The calling thread's reader of the store.
 * @param[in] doc 0..num_docs-1.
 * @param[out] data Its tokens, elements of info->dtype; valid until the store is closed.
 * @param[out] n Tokens at @p data.
 * @return DLC_OK; what dlc_store_read_values() returns; DLC_ECORRUPT when the record's length
 *         is not offsets[doc+1] - offsets[doc] or it does not end with the end-of-document id
 *         (named).
 */
DLC_API dlc_status dlc_tokens_doc(const dlc_tokens *t, dlc_store_reader *r, uint64_t doc,
                                  const void **data, uint64_t *n);

/**
 * @brief Check the prefix sums against their digest, that they increase, and that every record's
 *        length is its entry's (reads every record header, not the tokens' hashes:
 *        dlc_store_verify() does those).
 * @param[in] t The view.
 * @param[in] s The store @p t was opened on.
 * @return DLC_OK or DLC_ECORRUPT naming the store, the document and the reason; DLC_EINVAL.
 */
DLC_API dlc_status dlc_tokens_verify(const dlc_tokens *t, const dlc_store *s);

/** Options of a token store being written; dlc_token_writer_config_init() sets struct_size and
 *  every other field to 0, its default. */
typedef struct dlc_token_writer_config {
    uint32_t struct_size;      /**< sizeof(dlc_token_writer_config) as the caller's header has
                                    it; set by dlc_token_writer_config_init(). */
    uint32_t dtype;            /**< DLC_DTYPE_UINT16, DLC_DTYPE_INT32, or 0: uint16 when
                                    vocab_size is 1..65536, else int32. */
    uint32_t vocab_size;       /**< Every id must be below it; 0: not known. */
    uint32_t eos_id;           /**< The end-of-document id, appended to a document that does not
                                    end with it; below vocab_size and within dtype. */
    int force;                 /**< Replace an existing store at the path. */
    const char *tokenizer;     /**< The tokenizer's name (up to 47 bytes), or NULL:
                                    ::DLC_TOKENS_PRETOKENIZED. Copied at open. */
    uint64_t tokenizer_digest; /**< XXH3-64 of the tokenizer's model file, or 0. */
    const char *build_json;    /**< The "build" metadata (JSON text), or NULL; copied at open. */
    uint64_t source_digest;    /**< The "source_digest" metadata (0: none). */
    uint32_t part;             /**< With parts: this store is part @p part of a store set. */
    uint32_t parts;            /**< 0: a store alone; else the set's number of parts (the
                                    "set_part" metadata, docs/FORMAT.md; the part may hold no
                                    document). */
    uint64_t set_id;           /**< With parts: the set's identity, the same in every part. */
    uint64_t first_item;       /**< With parts: the first source document of the part, */
    uint64_t end_item;         /**< and one past its last. */
} dlc_token_writer_config;

/** @brief Fill the caller's @p c with the defaults, never writing past @p size; called through
 *         dlc_token_writer_config_init().
 *  @param[out] c The options to fill (NULL, or smaller than a uint32_t: nothing is written).
 *  @param[in] size sizeof(dlc_token_writer_config) in the caller's header. */
DLC_API void dlc_token_writer_config_init_sized(dlc_token_writer_config *c, size_t size);

/** Fill @p c (a ::dlc_token_writer_config) with the defaults and its struct_size. */
#define dlc_token_writer_config_init(c) dlc_token_writer_config_init_sized((c), sizeof *(c))

/** A token store being written: documents appended in order, then finished atomically. */
typedef struct dlc_token_writer dlc_token_writer;

/**
 * @brief Create PATH.tmp-PID for a token store (through ::dlc_writer, with its guarantees:
 *        renamed over @p path only by dlc_token_writer_finish()).
 * @param[in] path The store to write; not retained.
 * @param[in] config The options.
 * @param[out] out Release with dlc_token_writer_finish() or dlc_token_writer_abort().
 * @return DLC_OK; DLC_EINVAL (a NULL argument, a bad struct_size, an element type that is not
 *         uint16 or int32, a vocabulary too large for it, an end-of-document id out of range, a
 *         tokenizer name too long); DLC_EEXIST; -ENOSPC; -errno.
 */
DLC_API dlc_status dlc_token_writer_open(const char *path, const dlc_token_writer_config *config,
                                         dlc_token_writer **out);

/**
 * @brief Append one document: @p n ids, then the end-of-document id unless the last id is it. A
 *        document of no id is not written: it is counted as skipped.
 * @param[in] w The writer.
 * @param[in] ids The ids.
 * @param[in] n Ids at @p ids; the document with its end-of-document id fits in 2^32-1 bytes.
 * @return DLC_OK; DLC_EINVAL (an id not below vocab_size or beyond the element type, naming the
 *         document and the position); DLC_ESTATE (an earlier write failed); -ENOSPC; -errno.
 */
DLC_API dlc_status dlc_token_writer_add(dlc_token_writer *w, const uint32_t *ids, uint64_t n);

/** @brief Documents appended so far.
 *  @param[in] w The writer.
 *  @return The count (0 for NULL). */
DLC_API uint64_t dlc_token_writer_count(const dlc_token_writer *w);

/** @brief Tokens appended so far, end-of-document ids included.
 *  @param[in] w The writer.
 *  @return The count (0 for NULL). */
DLC_API uint64_t dlc_token_writer_tokens(const dlc_token_writer *w);

/**
 * @brief Write the "tokens" block and the prefix sums, then finish the store as
 *        dlc_writer_finish() does. Frees @p w in every case.
 * @param[in] w The writer; not used after.
 * @return What dlc_writer_finish() returns (DLC_EINVAL: no document).
 */
DLC_API dlc_status dlc_token_writer_finish(dlc_token_writer *w);

/** Remove the temporary file and free @p w.
 *  @param[in] w The writer, or NULL (nothing happens). */
DLC_API void dlc_token_writer_abort(dlc_token_writer *w);

/** Where dlc_tokens_build() reads its documents from (::dlc_tokens_build_options.format). */
typedef enum dlc_tokens_format {
    /** By the file's name: .jsonl/.json JSON lines, .npy a numpy array, .idx (or a .bin beside
     *  an .idx starting with MMIDIDX) a Megatron pair, another .bin a flat token file. */
    DLC_TOKENS_FORMAT_AUTO = 0,
    DLC_TOKENS_FORMAT_JSONL = 1,    /**< One JSON object per line; the member named
                                         ::dlc_tokens_build_options.field holds a list of ids, or
                                         a text string to tokenize (with a tokenizer). */
    DLC_TOKENS_FORMAT_BIN = 2,      /**< nanoGPT's flat file of ids (bin_dtype), documents
                                         split after each eos_id; a last document without it gets
                                         it. */
    DLC_TOKENS_FORMAT_NPY = 3,      /**< A .npy of integers: 1-D, split as a flat file; 2-D, one
                                         document per row. */
    DLC_TOKENS_FORMAT_MEGATRON = 4, /**< Megatron-LM's indexed dataset: PREFIX.idx (MMIDIDX,
                                         version 1) and PREFIX.bin; a document is its sequences,
                                         concatenated. */
} dlc_tokens_format;

/** dlc_tokens_build() options; dlc_tokens_build_options_init() sets struct_size and the
 *  defaults (0 or NULL unless said). */
typedef struct dlc_tokens_build_options {
    uint32_t struct_size;       /**< Set by dlc_tokens_build_options_init(). */
    uint32_t format;            /**< A ::dlc_tokens_format for every source (default AUTO). */
    const char *const *sources; /**< num_sources paths, read in this order. */
    uint32_t num_sources;       /**< At least 1. */
    const char *output;         /**< The store to write. */
    int force;                  /**< Replace an existing store. */
    const char *field;          /**< JSON lines: the member to read (default "tokens", or "text"
                                     with a tokenizer). */
    const char *tokenizer;      /**< A SentencePiece model file: JSON lines hold text, tokenized
                                     by it (needs libdlcache_spm.so, built where
                                     libsentencepiece-dev is found; DLC_ENOSYS otherwise). */
    int64_t eos_id;             /**< The end-of-document id; -1 (default): the tokenizer's EOS
                                     id (an error without a tokenizer or when it has none). */
    uint32_t vocab_size;        /**< Ids must be below it; 0: the tokenizer's, or not known. */
    uint32_t bin_dtype;         /**< Flat .bin files: DLC_DTYPE_UINT16 (default) or
                                     DLC_DTYPE_INT32 (read as unsigned 32-bit ids). */
    uint32_t out_dtype;         /**< The stored type: 0 (default) as dlc_token_writer_config.dtype
                                     says, or DLC_DTYPE_UINT16 / DLC_DTYPE_INT32. */
    const char *build_json;     /**< The "build" metadata, or NULL. */
    uint32_t shards;            /**< 0: write one store at output; N: a store set of N parts in
                                     the directory output (made if missing), the source
                                     documents split as a set's items are (part I takes
                                     [I*n/N, (I+1)*n/N) of the n documents), then joined
                                     (dlc_set_join()). */
    int one_part;               /**< With shards: write part @p part only, and no index (one
                                     machine of many; dlc_set_join() once every part is there). */
    uint32_t part;              /**< With one_part: the part to write, below shards. */
    /** Called from the calling thread every 256 source documents read (a set's counting pass
     *  included) with the count so far; non-zero cancels the build: it fails with
     *  DLC_ECANCELED and leaves no new store nor temporary file. A safe place to poll a flag
     *  set by a signal handler. May be NULL. */
    int (*progress)(void *user, uint64_t documents);
    void *progress_user; /**< Passed to progress as its first argument. */
} dlc_tokens_build_options;

/** @brief Fill @p o with the defaults, never writing past @p size.
 *  @param[out] o The options (NULL or too small: nothing is written).
 *  @param[in] size sizeof(dlc_tokens_build_options) in the caller's header. */
DLC_API void dlc_tokens_build_options_init_sized(dlc_tokens_build_options *o, size_t size);

/** Fill @p o (a ::dlc_tokens_build_options) with the defaults and its struct_size. */
#define dlc_tokens_build_options_init(o) dlc_tokens_build_options_init_sized((o), sizeof *(o))

/** What dlc_tokens_build() did. */
typedef struct dlc_tokens_build_report {
    uint64_t documents;   /**< Documents written. */
    uint64_t tokens;      /**< Tokens written, end-of-document ids included. */
    uint64_t skipped;     /**< Empty documents, not written. */
    uint32_t dtype;       /**< The stored element type. */
    uint32_t eos_id;      /**< The end-of-document id used. */
    uint32_t vocab_size;  /**< The vocabulary recorded (0: not known). */
    uint32_t reserved[7]; /**< Zero. */
} dlc_tokens_build_report;

/**
 * @brief Build a token store from token files or text (cachebuild --tokens).
 * @param[in] o The options.
 * @param[out] report What was written (may be NULL).
 * @return DLC_OK; DLC_EINVAL (bad options; a source that is not what its format says, named with
 *         the file, the line or record and the reason); DLC_ENOSYS (a tokenizer without the
 *         SentencePiece plugin); DLC_EEXIST; -errno (a source that cannot be read, named);
 *         -ENOSPC.
 */
DLC_API dlc_status dlc_tokens_build(const dlc_tokens_build_options *o,
                                    dlc_tokens_build_report *report);

/* ---- Packed sequences ---------------------------------------------------------------------- */

/** How documents become rows of seq_len tokens (::dlc_token_loader_config.packing). */
typedef enum dlc_token_packing {
    /** One concatenation of the documents in a seeded order (blocks of 64 consecutive
     *  documents in a seeded order, a seeded order inside each: docs/TOKENS.md), cut into
     *  windows of seq_len + 1 tokens that overlap by one; the windows are permuted per epoch.
     *  Every token but the tail (fewer than seq_len + 1 tokens after the last whole window) is
     *  an input exactly once per epoch. */
    DLC_TOKEN_PACK_CONCAT = 0,
    /** Documents placed whole into rows of seq_len tokens by best-fit decreasing (ties in a
     *  seeded permutation of the document numbers), those longer than seq_len cut into pieces
     *  of seq_len and a remainder; the rest of a row is pad_id with label DLC_TOKEN_IGNORE, and
     *  a piece's last token has label DLC_TOKEN_IGNORE too (its target is not in the row). The
     *  plan is a pure function of the store, seq_len and seed, made once and kept beside the store
     *  (STORE.bestfit-SEQ_LEN-SEED, checked by digest at each open; in memory only where the
     *  directory cannot be written); the rows are permuted per epoch like windows. */
    DLC_TOKEN_PACK_BEST_FIT = 1,
} dlc_token_packing;

/** The label of a target that is not predicted (PyTorch's cross-entropy ignore_index). */
#define DLC_TOKEN_IGNORE (-100)

/** dlc_token_loader_open() options; dlc_token_loader_config_init() sets struct_size and the
 *  defaults. */
typedef struct dlc_token_loader_config {
    uint32_t struct_size; /**< Set by dlc_token_loader_config_init(). */
    uint32_t batch_size;  /**< Rows per batch, at least 1. */
    uint32_t seq_len;     /**< Tokens per row, at least 1 (default 2048). */
    uint32_t rank;        /**< This process's rank, below world_size (default 0). */
    uint32_t world_size;  /**< Ranks sharing each epoch, at least 1 (default 1). */
    uint32_t threads;     /**< Worker threads filling batches ahead (default 2); 0: each batch
                               is filled by dlc_token_loader_next() on the caller's thread.
                               With workers, the caller's thread fills the batch it needs when
                               no worker has taken it up yet, and while a worker has it, a
                               later one, rather than sleep: the bytes are the same. */
    uint32_t out_dtype;   /**< DLC_DTYPE_INT64 (default) or DLC_DTYPE_INT32: the element type of
                               input_ids, labels and position_ids. */
    uint32_t packing;     /**< A ::dlc_token_packing (default DLC_TOKEN_PACK_CONCAT). */
    uint64_t seed;        /**< The documents' order and every epoch's order of windows are pure
                               functions of it. */
    int shuffle;          /**< 1 (default): documents in a seeded order, windows permuted per
                               epoch; 0: documents in record order, windows in order. */
    int drop_last;        /**< Cut each rank's share to whole batches (DistributedSampler's
                               drop_last); else the share is padded by repeating windows from the
                               epoch's start and the last batch may be short. */
    int document_mask;    /**< Also cu_seqlens and max_seqlen, and labels DLC_TOKEN_IGNORE where
                               the target lies in the next document. */
    int32_t pad_id;       /**< DLC_TOKEN_PACK_BEST_FIT: the input id of padding (default 0). */
    /* Streaming: a token set's URL as the path (s3://, gs://, http(s)://; docs/STREAMING.md). */
    const char *cache_dir;       /**< The local folder that holds the set's parts; required for a
                                      URL, shared by the ranks and jobs of a node (each part is
                                      downloaded once per node). Not retained. */
    uint64_t cache_limit;        /**< The most bytes the folder may hold (0, the default: no
                                      limit). Every part is held while the loader is open (the
                                      order of documents spans them all): a limit below the
                                      set's parts and index is refused at open, naming the
                                      bytes needed. */
    uint32_t downloads;          /**< Parts downloaded at once (0, the default: 2). */
    uint32_t verify;             /**< A ::dlc_verify_mode (default DLC_VERIFY_OFF): check each
                                      document's checksum (the store's XXH3 of its tokens) the
                                      first time this loader reads it, or at every read. A
                                      mismatch is DLC_ECORRUPT from dlc_token_loader_next(),
                                      naming the store, the record and both digests: there is
                                      no stand-in, a batch of other tokens would be wrong data.
                                      A streamed set's parts are checked whole when they are
                                      downloaded, whatever this says. (Was `reserved`, zero.) */
    const dlc_warm_options *net; /**< Endpoint, region, retries, timeouts, log of the downloads;
                                      NULL (default): dlc_warm_options_init()'s, which read the
                                      environment. Copied at open. */
} dlc_token_loader_config;

/** @brief Fill @p c with the defaults, never writing past @p size.
 *  @param[out] c The options (NULL or too small: nothing is written).
 *  @param[in] size sizeof(dlc_token_loader_config) in the caller's header. */
DLC_API void dlc_token_loader_config_init_sized(dlc_token_loader_config *c, size_t size);

/** Fill @p c (a ::dlc_token_loader_config) with the defaults and its struct_size. */
#define dlc_token_loader_config_init(c) dlc_token_loader_config_init_sized((c), sizeof *(c))

/** One batch of packed rows, lent by dlc_token_loader_next() until the next call, a seek or
 *  close. Row r's element j of each [rows x seq_len] array is at r * seq_len + j. */
typedef struct dlc_token_batch {
    uint32_t rows;             /**< Rows filled: batch_size, or fewer in a short last batch. */
    uint32_t seq_len;          /**< Tokens per row. */
    uint32_t dtype;            /**< The element type of the three arrays below. */
    uint32_t num_cu;           /**< Entries of cu_seqlens (0 without document_mask). */
    const void *input_ids;     /**< rows x seq_len token ids. */
    const void *labels;        /**< rows x seq_len: the next token of each input (its window's
                                    token j + 1); DLC_TOKEN_IGNORE with document_mask where that
                                    token starts another document. */
    const void *position_ids;  /**< rows x seq_len: 0 at the start of each row and of each
                                    document in it, then counting up. */
    const int32_t *cu_seqlens; /**< With document_mask: the start of each segment (a document's
                                    piece in a row) in the batch's flattened rows x seq_len
                                    tokens, then rows x seq_len. */
    uint32_t max_seqlen;       /**< With document_mask: the longest segment. */
    uint32_t reserved;         /**< Zero. */
    uint64_t epoch;            /**< The epoch it belongs to. */
    uint64_t index;            /**< Its number in this rank's share of the epoch. */
} dlc_token_batch;

/** Packed sequences of a token store for a language model (docs/TOKENS.md). */
typedef struct dlc_token_loader dlc_token_loader;

/**
 * @brief Open a token store for packed sequences, positioned at the start of epoch 0. Nothing
 *        is computed per document here; with shuffle, the prefix sums of the blocks of 64
 *        documents in their seeded order (8 bytes per block) are made at the first batch.
 *
 *        A URL (s3://, gs://, http(s)://) names a set of token stores that dlc_warm_push()
 *        uploaded: it is read through the streaming cache in config.cache_dir (the set's index is
 *        fetched; each part is downloaded once per node, checked against the index by size,
 *        content digest, place and every record's checksum before it is used, and reused from
 *        the folder by later opens and by other processes sharing it). The parts are fetched
 *        here, config.downloads at a time, and held (pinned) until close: the concatenation's
 *        order spans every part, and their prefix sums size the epoch. The batches are those of
 *        the same set read locally.
 * @param[in] path A token store, a set of them, or a set's URL (not retained).
 * @param[in] config The options.
 * @param[out] out Release with dlc_token_loader_close().
 * @return DLC_OK; DLC_EINVAL (bad options, named; a corpus shorter than one window of
 *         seq_len + 1 tokens; a URL without cache_dir, or a cache_limit below the bytes the
 *         parts need, which the message gives); what dlc_store_open() and dlc_tokens_open()
 *         return; for a URL, DLC_EHTTP, DLC_ENETWORK, DLC_ECORRUPT (a part that is not the one
 *         the index names) and the other errors of the streaming cache (docs/STREAMING.md);
 *         -ENOMEM.
 */
DLC_API dlc_status dlc_token_loader_open(const char *path, const dlc_token_loader_config *config,
                                         dlc_token_loader **out);

/** Stop the workers and free @p l.
 *  @param[in] l The loader, or NULL (nothing happens). */
DLC_API void dlc_token_loader_close(dlc_token_loader *l);

/** @brief Windows of an epoch (before padding or cutting to the world size).
 *  @param[in] l The loader.
 *  @return (num_tokens - 1) / seq_len; 0 when @p l is NULL. */
DLC_API uint64_t dlc_token_loader_num_windows(const dlc_token_loader *l);

/**
 * @brief Go to global position @p start of epoch @p epoch: the windows before it (of every
 *        rank: position p is rank p % world's) count as consumed; this rank's share of the rest
 *        is dealt as DistributedSampler deals an epoch. seek(e, 0) is set_epoch(e); a saved
 *        position (dlc_token_loader_position()) resumes exactly, under any world size.
 * @param[in] l The loader.
 * @param[in] epoch The epoch.
 * @param[in] start 0..num_windows (num_windows: the epoch is over).
 * @return DLC_OK, DLC_EINVAL (@p start beyond the epoch, or NULL).
 */
DLC_API dlc_status dlc_token_loader_seek(dlc_token_loader *l, uint64_t epoch, uint64_t start);

/** @brief Batches this rank delivers from the last seek to the end of its epoch.
 *  @param[in] l The loader.
 *  @return The count (0 for NULL). */
DLC_API uint64_t dlc_token_loader_len(const dlc_token_loader *l);

/** @brief The global position consumed: the seek's start plus batch_size x world_size per
 *         batch delivered since, at most num_windows (then the epoch is over).
 *  @param[in] l The loader.
 *  @param[out] epoch The current epoch (may be NULL).
 *  @return The position (0 for NULL). */
DLC_API uint64_t dlc_token_loader_position(const dlc_token_loader *l, uint64_t *epoch);

/**
 * @brief The next batch of this rank's share.
 * @param[in] l The loader; one consumer thread.
 * @param[out] batch Lent until the next call, a seek or close.
 * @return DLC_OK; DLC_END (the epoch's share is delivered: seek to go on); DLC_ECORRUPT (a
 *         document that disagrees with the prefix sums, named); DLC_EINVAL (NULL); -ENOMEM.
 */
DLC_API dlc_status dlc_token_loader_next(dlc_token_loader *l, dlc_token_batch *batch);

/**
 * @brief What the packing made: rows per epoch (windows with concat, rows of the plan with
 *        best_fit) and the padding among their rows x seq_len tokens (0 with concat).
 * @param[in] l The loader.
 * @param[out] rows Rows per epoch, before padding or cutting to the world size (may be NULL).
 * @param[out] pad_tokens Padding tokens in those rows (may be NULL).
 * @param[out] saved 1 when the best-fit plan is in its file beside the store, 0 when it is only
 *             in memory or there is none (may be NULL).
 * @return DLC_OK or DLC_EINVAL (NULL @p l).
 */
DLC_API dlc_status dlc_token_loader_packing(const dlc_token_loader *l, uint64_t *rows,
                                            uint64_t *pad_tokens, int *saved);

/**
 * @brief What streaming did since open (a token set opened by its URL): zeros for a local store
 *        or a mixture without a streamed source; a mixture's streamed sources summed.
 * @param[in] l The loader.
 * @param[in,out] st Its struct_size set by the caller; filled up to it.
 * @return DLC_OK; DLC_EINVAL (NULL, or a struct_size of 0 or larger than the library's).
 */
DLC_API dlc_status dlc_token_loader_stream_stats(const dlc_token_loader *l,
                                                 dlc_loader_stream_stats *st);

/**
 * @brief The memory of the batch slots, for a GPU runtime of the caller's own to page-lock
 *        (cudaHostRegister): torch's, in the Python package's device path. Every array a lent
 *        ::dlc_token_batch points to lies inside one of these blocks, which are allocated at
 *        open and freed by dlc_token_loader_close(); unregister them before closing. A batch
 *        whose copy is still reading its slot must not be handed back (by the next
 *        dlc_token_loader_next(), a seek or close) before the copy has completed.
 * @param[in] l The loader; NULL gives 0.
 * @param[out] bases Up to @p cap block addresses (may be NULL with @p cap 0).
 * @param[out] sizes Their sizes in bytes (may be NULL with @p cap 0).
 * @param[in] cap Entries at @p bases and @p sizes; 0 only counts.
 * @return The number of blocks, which may exceed @p cap; 0 when @p l is NULL.
 */
DLC_API uint32_t dlc_token_loader_host_slots(const dlc_token_loader *l, void **bases, size_t *sizes,
                                             uint32_t cap);

/**
 * @brief Open a mixture of token stores read by weight (docs/TOKENS.md, "Mixtures"): each store
 *        is cut into windows (or best-fit rows) as alone, and an epoch draws @p rows_per_epoch
 *        rows from the stores in proportion to @p weights through the loader's mixture schedule
 *        (docs/MIXTURES.md): each store walks whole passes of its rows, each pass permuted, so a
 *        small store weighted up is repeated while a large one is read once. Rows hold seq_len
 *        tokens whatever their store, so the weights are over tokens.
 * @param[in] paths @p n token stores (not retained).
 * @param[in] weights @p n non-negative weights, not all 0.
 * @param[in] n 1..64.
 * @param[in] rows_per_epoch Rows of an epoch (0: the sum of the stores' rows).
 * @param[in] config The options, as for dlc_token_loader_open(); every store gets them.
 * @param[out] out Release with dlc_token_loader_close().
 * @return What dlc_token_loader_open() returns, for the store named; DLC_EINVAL (bad weights).
 */
DLC_API dlc_status dlc_token_loader_open_mix(const char *const *paths, const double *weights,
                                             uint32_t n, uint64_t rows_per_epoch,
                                             const dlc_token_loader_config *config,
                                             dlc_token_loader **out);

/** Bytes of a mixture's state with @p n sources (at most 64). */
#define DLC_TOKEN_MIX_STATE_SIZE(n) (72u + 40u * (n) + 8u)

/**
 * @brief A mixture's position: the epoch, the rows consumed, every store's passes and the
 *        schedule, so that dlc_token_loader_mix_restore() continues exactly, also under other
 *        weights, other stores or another world size.
 * @param[in] l A mixture.
 * @param[out] buf DLC_TOKEN_MIX_STATE_SIZE(n) bytes.
 * @param[in] cap Bytes at @p buf.
 * @param[out] len Bytes written.
 * @return DLC_OK, DLC_EINVAL (not a mixture, @p cap too small).
 */
DLC_API dlc_status dlc_token_loader_mix_state(const dlc_token_loader *l, uint8_t *buf, size_t cap,
                                              size_t *len);

/**
 * @brief Continue from a mixture's state: with the same stores, weights, world size and rows
 *        per epoch, exactly as the saved run would have; otherwise a new schedule begins at the
 *        saved position, each store (found by its content digest) continuing its pass where it
 *        stood and a new store starting its first.
 * @param[in] l A mixture (with the same seed).
 * @param[in] buf A state from dlc_token_loader_mix_state().
 * @param[in] len Its bytes.
 * @return DLC_OK, DLC_EINVAL (not a state, damaged, another seed, a position beyond the epoch).
 */
DLC_API dlc_status dlc_token_loader_mix_restore(dlc_token_loader *l, const uint8_t *buf,
                                                size_t len);

/** @brief The document at place @p k of the seeded order of the concatenation (a bijection of
 *         0..num_docs-1; the identity without shuffle), for tests and tools; up to 64 steps.
 *  @param[in] l The loader.
 *  @param[in] k 0..num_docs-1.
 *  @return The document; UINT64_MAX when @p k is out of range or @p l is NULL. */
DLC_API uint64_t dlc_token_loader_doc_at(const dlc_token_loader *l, uint64_t k);

#ifdef __cplusplus
}
#endif
#endif /* DLCACHE_TOKENS_H */
