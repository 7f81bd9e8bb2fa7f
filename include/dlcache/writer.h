/**
 * @file writer.h
 * @brief Write a store of records with many fields: field by field, record by record.
 *
 * The writer is what cachebuild, dlcache.write() in Python and any program of the user's
 * write stores with. A store's schema (a list of named fields, include/dlcache/store.h) is fixed
 * at open; records are appended in order, each with a value for every field.
 *
 * Two objects share the work so that the heavy part runs on every core while the bytes of the
 * store stay independent of the number of threads:
 *   - a ::dlc_record_builder (one per thread) takes one record's values, encodes them (JPEG and
 *     PNG images), hashes them and lays the record out in its own buffer: dlc_record_seal();
 *   - the ::dlc_writer (one thread at a time) appends sealed records as the next record number:
 *     dlc_writer_append(). The caller appends in its own record order; a record's bytes depend
 *     only on its values, so the store is identical at any number of builder threads.
 *
 * Guarantees, the same as cachebuild's: the store is written to PATH.tmp-PID beside PATH and
 * renamed over PATH only by dlc_writer_finish(), after it is synced; a crash, a kill, a full
 * disk or dlc_writer_abort() leaves the previous PATH (or none) and never a store that opens and
 * lies. A full disk is reported as -ENOSPC with the space needed and free. Stale PATH.tmp-PID
 * files of dead processes are removed by the next writer of PATH.
 *
 * A variable field (::DLC_FIELD_VARIABLE) whose records all turn out to have the same leading
 * dimension (or image size) is written with that fixed shape: fixed shapes stack into batches.
 *
 * Thread safety: a ::dlc_writer belongs to one thread at a time. Builders are independent of
 * each other and of the writer (they only read its schema), so each thread may seal records
 * while another appends; a builder belongs to one thread at a time.
 *
 * Errors: DLC_OK, DLC_EINVAL (a bad schema or value, with the field and the reason in
 * dlc_errmsg()), DLC_EEXIST (PATH exists and force is not set), DLC_ESTATE (a call out of
 * order), -ENOSPC, -errno.
 */
#ifndef DLCACHE_WRITER_H
#define DLCACHE_WRITER_H

#include <dlcache/image.h>
#include <dlcache/status.h>
#include <dlcache/store.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A store being written: its schema, its temporary file and the records appended so far. */
typedef struct dlc_writer dlc_writer;
/** One record's values being set, encoded and laid out; one per thread. */
typedef struct dlc_record_builder dlc_record_builder;

/** One field of the schema to write. Fields not named here keep the zero of their type. */
typedef struct dlc_field_spec {
    const char *name;  /**< [A-Za-z_][A-Za-z0-9_]*, 1 to 31 characters, unique. */
    uint32_t kind;     /**< A ::dlc_field_kind. */
    uint32_t dtype;    /**< ndarray: the ::dlc_dtype of its elements; ignored for the others
                            (images uint8, int int64, float float64, bytes uint8). */
    uint32_t encoding; /**< Images: a ::dlc_encoding (masks: RAW or PNG); others 0. */
    uint32_t flags;    /**< ::dlc_field_flags: VARIABLE, MASK (images), BOXES (ndarray N x 4
                            float32, with link), LABEL (one int field). */
    uint32_t ndim;     /**< ndarray: 1..DLC_MAX_DIMS. */
    uint32_t shape[DLC_MAX_DIMS]; /**< ndarray: the dimensions, shape[0] = 0 with VARIABLE.
                                       Image: {height, width, channels}; height = width = 0
                                       with VARIABLE; channels 1, 3 or 4. */
    const char *link;             /**< DLC_FIELD_BOXES: the name of the field of per-box classes. */
    int quality;                  /**< JPEG quality 1..100 (0: 90). */
} dlc_field_spec;

/** Writer options; dlc_writer_config_init() sets struct_size and every other field to 0, its
 *  default. */
typedef struct dlc_writer_config {
    uint32_t struct_size;           /**< sizeof(dlc_writer_config) as the caller's header has it;
                                         set by dlc_writer_config_init() (status.h, "How structs grow"). */
    const dlc_field_spec *fields;   /**< num_fields fields, in record order; copied at open. */
    uint32_t num_fields;            /**< 1..DLC_MAX_FIELDS. */
    const char *const *label_names; /**< With a DLC_FIELD_LABEL field: num_labels names of its
                                         values (UTF-8, no NUL inside); copied at open. */
    uint32_t num_labels;            /**< Values of the label field must be below this. 0 with a
                                         LABEL field (and label_names NULL): the labels are
                                         counted as they come, each in 0..2^24-1, and finish
                                         decides K = the largest + 1, named "0".."K-1" (for
                                         writers that do not know their labels up front, such
                                         as dlcache.write() in Python). */
    int force;                      /**< Replace an existing store at the path. */
    uint64_t size_hint;     /**< Expected payload bytes (0: unknown), to reserve disk space up front
                                 so that a full disk fails early and clearly. */
    const char *build_json; /**< The "build" metadata (JSON text), or NULL; copied at open. */
    uint64_t source_digest; /**< Written as the "source_digest" metadata (0: none). */
} dlc_writer_config;

/** @brief Fill the caller's @p c with the defaults, never writing past @p size; called
 *         through the macro dlc_writer_config_init(), which passes the caller's sizeof.
 *  @param[out] c The options to fill (NULL, or smaller than a uint32_t: nothing is written).
 *  @param[in] size sizeof(dlc_writer_config) in the header the caller was built with: the bytes of
 *                  @p c that are written; struct_size is set to it (status.h, "How structs
 *                  grow"). */
DLC_API void dlc_writer_config_init_sized(dlc_writer_config *c, size_t size);

/** Fill @p c (a ::dlc_writer_config, not a pointer to void) with the defaults, its struct_size
 *  with the caller's sizeof: every field the caller's header has is written. */
#define dlc_writer_config_init(c) dlc_writer_config_init_sized((c), sizeof *(c))

/**
 * @brief Check the schema and create PATH.tmp-PID beside @p path.
 * @param[in] path The store to write; not retained.
 * @param[in] config The schema and options, filled by dlc_writer_config_init() then set; copied
 *            (what it points to too) at open.
 * @param[out] out Release with dlc_writer_finish() or dlc_writer_abort().
 * @return DLC_OK, DLC_EINVAL (a NULL argument; a struct_size of 0, larger than the library's or
 *         no size it had (status.h, "How structs grow"); the schema, named; label names without
 * num_labels, or num_labels without a LABEL field), DLC_EEXIST, -ENOSPC, -errno.
 */
DLC_API dlc_status dlc_writer_open(const char *path, const dlc_writer_config *config,
                                   dlc_writer **out);

/** @brief Find a field of the writer's schema by name.
 *  @param[in] w The writer.
 *  @param[in] name The field's name.
 *  @return Its index (the @c field argument of the dlc_record_set_* calls), or -1 when there is
 *          none (or @p w or @p name is NULL). */
DLC_API int dlc_writer_find_field(const dlc_writer *w, const char *name);

/** @brief Records appended so far: the number the next record gets.
 *  @param[in] w The writer.
 *  @return The count (0 for a NULL @p w); cannot fail. */
DLC_API uint64_t dlc_writer_count(const dlc_writer *w);

/**
 * @brief Count source items that did not become records (the store's "skipped" metadata).
 * @param[in] w The writer (NULL: nothing happens).
 * @param[in] n Items to add to the count.
 */
DLC_API void dlc_writer_add_skipped(dlc_writer *w, uint64_t n);

/**
 * @brief Append the record sealed in @p b as record number dlc_writer_count(); @p b is then
 *        empty and ready for the next record.
 * @param[in] w The writer.
 * @param[in] b A builder of @p w holding a sealed record (dlc_record_seal()).
 * @return DLC_OK, DLC_ESTATE (b is not sealed, or belongs to another writer's schema; or an
 *         earlier write failed), DLC_EINVAL (a label value not below num_labels), -ENOSPC,
 *         -errno. After a write failure only dlc_writer_abort() is accepted.
 */
DLC_API dlc_status dlc_writer_append(dlc_writer *w, dlc_record_builder *b);

/**
 * @brief Write the schema and metadata, commit, sync, and rename the store into place. Frees
 *        @p w in every case; on failure the temporary file is removed and the previous store
 *        (if any) is untouched.
 * @param[in] w The writer; not used after, whatever the result.
 * @return DLC_OK, DLC_EINVAL (no record, or a NULL @p w), DLC_ESTATE (an earlier write failed),
 *         DLC_EEXIST (without force, a file appeared at PATH while the store was written: it is
 *         left as it is, never replaced), -ENOSPC, -errno.
 */
DLC_API dlc_status dlc_writer_finish(dlc_writer *w);

/**
 * @brief Add a metadata key of the caller's, written by dlc_writer_finish() beside the store's
 *        own (how a token store's "tokens" and "token_offsets" are written: tokens.h).
 * @param[in] w The writer.
 * @param[in] key 1 to 31 characters of [A-Za-z0-9_]; not one of the store's own keys
 *            (docs/FORMAT.md, "meta"). Putting a key twice keeps the last value.
 * @param[in] data The value; copied. NULL only with a @p size of 0 (an empty value).
 * @param[in] size Bytes at @p data, below 4 GiB.
 * @return DLC_OK, DLC_EINVAL (a NULL writer or key, NULL data with a size above 0, a bad or
 *         reserved key, a value too large),
 *         DLC_ESTATE (an earlier write failed), -ENOMEM.
 */
DLC_API dlc_status dlc_writer_put_meta(dlc_writer *w, const char *key, const void *data,
                                       size_t size);

/** Remove the temporary file and free @p w.
 *  @param[in] w The writer, or NULL (nothing happens). */
DLC_API void dlc_writer_abort(dlc_writer *w);

/**
 * @brief A record builder for @p w's schema.
 * @param[in] w The writer; it must outlive the builder.
 * @param[out] out Release with dlc_record_builder_destroy(); NULL on failure.
 * @return DLC_OK, DLC_EINVAL (a NULL argument), -ENOMEM.
 */
DLC_API dlc_status dlc_record_builder_create(const dlc_writer *w, dlc_record_builder **out);

/** Free @p b.
 *  @param[in] b The builder, or NULL (nothing happens). */
DLC_API void dlc_record_builder_destroy(dlc_record_builder *b);

/* Values of the record being built. Every setter checks the value against the field's schema and
 * returns DLC_EINVAL naming the field and the reason; the data pointers must stay valid until
 * dlc_record_seal() returns (the builder copies at seal, once). Setting a field twice keeps the
 * last value. Each setter returns DLC_OK; DLC_EINVAL (a NULL builder, no such field, a setter of
 * another kind than the field's, or a value the field refuses: dlc_errmsg() names the field and
 * the reason); DLC_ESTATE (the record is sealed: append it or reset the builder). The builder
 * keeps its other values after a failure. */

/** @brief Pixels of an image field: @p img (height x width x channels, rows img->stride bytes
 *         apart), encoded as the field says (JPEG with its quality, PNG, or raw). The channels
 *         must be the field's; fixed-size fields need their height and width.
 *  @param[in] b The builder.
 *  @param[in] field The field's index in the schema (dlc_writer_find_field()).
 *  @param[in] img The image; the struct is copied, its pixels are read at dlc_record_seal().
 *  @return DLC_OK, DLC_EINVAL, DLC_ESTATE, as above. */
DLC_API dlc_status dlc_record_set_image(dlc_record_builder *b, uint32_t field,
                                        const dlc_image *img);

/** @brief An already encoded image (a JPEG for a JPEG field, a PNG for a PNG field) of
 *         @p height x @p width pixels, stored as it is; its header is checked, not decoded.
 *  @param[in] b The builder.
 *  @param[in] field The field's index in the schema (not a raw image field).
 *  @param[in] data The encoded bytes; read again at dlc_record_seal().
 *  @param[in] size Bytes at @p data, at least 1.
 *  @param[in] height The image's height, which its header must say.
 *  @param[in] width The image's width, which its header must say.
 *  @return DLC_OK, DLC_EINVAL (also a header that is not the field's encoding or size),
 *          DLC_ESTATE, as above; -ENOMEM (the builder's codec). */
DLC_API dlc_status dlc_record_set_encoded(dlc_record_builder *b, uint32_t field, const void *data,
                                          size_t size, uint32_t height, uint32_t width);

/** @brief An ndarray field: @p bytes bytes of elements in C order whose leading dimension is
 *         @p dim0 (the field's shape[0] unless VARIABLE; 0 allowed for VARIABLE).
 *  @param[in] b The builder.
 *  @param[in] field The field's index in the schema.
 *  @param[in] data The elements; read at dlc_record_seal().
 *  @param[in] bytes Bytes at @p data: @p dim0 times the field's row size.
 *  @param[in] dim0 The leading dimension.
 *  @return DLC_OK, DLC_EINVAL, DLC_ESTATE, as above. */
DLC_API dlc_status dlc_record_set_array(dlc_record_builder *b, uint32_t field, const void *data,
                                        size_t bytes, uint32_t dim0);

/** @brief An int field.
 *  @param[in] b The builder.
 *  @param[in] field The field's index in the schema.
 *  @param[in] value The value (a LABEL field's must be below num_labels, checked at append).
 *  @return DLC_OK, DLC_EINVAL, DLC_ESTATE, as above. */
DLC_API dlc_status dlc_record_set_int(dlc_record_builder *b, uint32_t field, int64_t value);

/** @brief A float field.
 *  @param[in] b The builder.
 *  @param[in] field The field's index in the schema.
 *  @param[in] value The value, stored bit for bit.
 *  @return DLC_OK, DLC_EINVAL, DLC_ESTATE, as above. */
DLC_API dlc_status dlc_record_set_float(dlc_record_builder *b, uint32_t field, double value);

/** @brief A bytes field (any length, 0 included).
 *  @param[in] b The builder.
 *  @param[in] field The field's index in the schema.
 *  @param[in] data The bytes (NULL only with @p size 0); read at dlc_record_seal().
 *  @param[in] size Bytes at @p data, below 4 GiB.
 *  @return DLC_OK, DLC_EINVAL, DLC_ESTATE, as above. */
DLC_API dlc_status dlc_record_set_bytes(dlc_record_builder *b, uint32_t field, const void *data,
                                        size_t size);

/**
 * @brief Check that every field has a value, encode and hash them, and lay out the record in
 *        the builder's buffer (reused from record to record: a steady stream allocates
 *        nothing). The heavy work of writing; run it on as many threads as there are builders.
 * @param[in] b The builder; after DLC_OK, give it to dlc_writer_append().
 * @return DLC_OK, DLC_EINVAL (a field without a value, or an image the encoder refuses,
 *         named; or a NULL @p b), DLC_ESTATE (already sealed), -ENOMEM.
 */
DLC_API dlc_status dlc_record_seal(dlc_record_builder *b);

/** @brief Forget the values set so far (after an error, or to skip a record).
 *  @param[in] b The builder (NULL: nothing happens). */
DLC_API void dlc_record_builder_reset(dlc_record_builder *b);

#ifdef __cplusplus
}
#endif
#endif /* DLCACHE_WRITER_H */
