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

#include <dlcache/status.h>
#include <dlcache/store.h>

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
 * @param[in] s An open store; it must outlive the view. A store set is refused (DLC_ENOSYS:
 *            sets of token stores are not supported yet).
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

/** @brief The prefix sums: num_docs + 1 entries, entry d the position of document d's first
 *         token in the concatenation of the documents in record order, the last num_tokens.
 *  @param[in] t The view.
 *  @return A view into the store's map (or a copy owned by @p t when LMDB left the value
 *          unaligned), valid until dlc_tokens_close(); never write it. NULL when @p t is NULL. */
DLC_API const uint64_t *dlc_tokens_offsets(const dlc_tokens *t);

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

#ifdef __cplusplus
}
#endif
#endif /* DLCACHE_TOKENS_H */
