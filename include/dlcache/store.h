/**
 * @file store.h
 * @brief Read-only access to a dlcache store: one LMDB file of pre-decoded
 *        samples (docs/FORMAT.md gives the byte layout).
 *
 * A record is a fixed list of named fields described by the store's schema
 * (format version 2): images of 1, 3 or 4 channels (raw, JPEG or PNG), masks,
 * n-d arrays with a fixed shape or a leading dimension that varies per record
 * (boxes N x 4, token ids L), int and float scalars, and opaque bytes. A
 * version 1 store, made before schemas, reads as the fields "image" and
 * "label". include/dlcache/writer.h writes stores.
 *
 * A store is opened once per process and shared by every thread. Records are
 * returned as views into the memory map: no copy, no allocation, and the same
 * physical pages for every process on the node. Each thread that reads
 * records takes its own ::dlc_store_reader (an LMDB read transaction); opening
 * one costs a few microseconds and is done once per thread, not per record.
 *
 * The store is untrusted input. Open checks the file size against what LMDB's
 * meta pages claim, the format version and the metadata; every read checks
 * the record header and that every payload lies inside the file. Per-field
 * checksums (XXH3-64) are checked on request with dlc_value_verify(), because
 * hashing every read would cost as much as the read itself.
 *
 * A store set (docs/FORMAT.md, "Store sets") is a directory of N version 2 stores, its shards,
 * and an index, index.dlcset, written last by dlc_set_join() (include/dlcache/set.h). Every call
 * here takes a set where it takes a store: dlc_store_open() of the directory presents the union
 * of the shards, with records numbered globally in shard order, so a set delivers exactly the
 * records of one store built from the same items. A store's files (one for a single store, N
 * for a set) are named by number: dlc_value.file, dlc_store_num_files() and the dlc_store_file_*
 * calls, for readers that read the files themselves (O_DIRECT, fadvise).
 *
 * Errors: DLC_OK, -errno from the system, DLC_EVERSION (not a dlcache store
 * or a newer format), DLC_ECORRUPT (a structure that cannot be right),
 * DLC_ENOTFOUND (no such record or meta key), DLC_EINVAL (bad argument).
 * dlc_errmsg() names the file, the record and the reason.
 */
#ifndef DLCACHE_STORE_H
#define DLCACHE_STORE_H

#include <dlcache/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The store format this library writes; it also reads every earlier one (version 1 stores read
 *  as the two fields "image" and "label"). */
#define DLC_STORE_FORMAT_VERSION 2u
/** Every record payload starts at a file offset that is a multiple of this
 *  when LMDB stores the record on overflow pages (records over about 2 KiB);
 *  smaller records live inside LMDB leaf pages at no particular alignment. */
#define DLC_STORE_PAYLOAD_ALIGN 64u

/** How an image field's payload is encoded. */
typedef enum dlc_encoding {
    DLC_ENCODING_RAW = 0,  /**< uint8 pixels, height x width x channels, row-major (HWC). */
    DLC_ENCODING_JPEG = 1, /**< A baseline JPEG of height x width x channels pixels (lossy). */
    DLC_ENCODING_PNG = 2,  /**< A PNG of height x width x channels 8-bit pixels (lossless: masks
                                and label maps keep their class ids bit for bit). */
} dlc_encoding;

/** Element types, of a stored field and of a batch. The first three are the loader's output
 *  types of images and keep their version 1 values. */
typedef enum dlc_dtype {
    DLC_DTYPE_UINT8 = 0,   /**< 1 byte, unsigned. */
    DLC_DTYPE_FLOAT32 = 1, /**< IEEE binary32. */
    DLC_DTYPE_FLOAT16 = 2, /**< IEEE binary16. */
    DLC_DTYPE_INT8 = 3,    /**< 1 byte, signed. */
    DLC_DTYPE_UINT16 = 4,  /**< 2 bytes, unsigned. */
    DLC_DTYPE_INT16 = 5,   /**< 2 bytes, signed. */
    DLC_DTYPE_INT32 = 6,   /**< 4 bytes, signed. */
    DLC_DTYPE_INT64 = 7,   /**< 8 bytes, signed. */
    DLC_DTYPE_FLOAT64 = 8, /**< IEEE binary64. */
    /** bfloat16: the upper 16 bits of a binary32, rounded to nearest even. A loader output type
     *  only (dlc_loader_config.dtype); store fields cannot hold it. */
    DLC_DTYPE_BFLOAT16 = 9,
} dlc_dtype;

/** Bytes of one element of @p dtype.
 *  @param[in] dtype A ::dlc_dtype, or any value.
 *  @return The size in bytes, or 0 for an unknown type. */
DLC_API size_t dlc_dtype_size(uint32_t dtype);
/** The name of @p dtype: "uint8", "float32"... (numpy's names).
 *  @param[in] dtype A ::dlc_dtype, or any value.
 *  @return Static storage, never NULL; "?" for an unknown type. */
DLC_API const char *dlc_dtype_name(uint32_t dtype);

/** What a field of a record holds (format version 2). */
typedef enum dlc_field_kind {
    DLC_FIELD_IMAGE = 1,   /**< uint8 HWC pixels, 1, 3 or 4 channels; raw, JPEG or PNG. */
    DLC_FIELD_NDARRAY = 2, /**< An array of dtype with a fixed shape, or one whose leading
                                dimension varies per record. */
    DLC_FIELD_INT = 3,     /**< One int64 (a label, an id). */
    DLC_FIELD_FLOAT = 4,   /**< One float64 (a weight, a score). */
    DLC_FIELD_BYTES = 5,   /**< Opaque bytes of any length (a caption, JSON). */
} dlc_field_kind;

/** ::dlc_field flags. */
enum dlc_field_flags {
    /** The leading dimension (ndarray) or the height and width (image) vary per record; the
     *  schema's shape holds 0 there. */
    DLC_FIELD_VARIABLE = 1u << 0,
    /** An image of class ids (segmentation mask, label map): resized and cropped with nearest
     *  neighbour, never blended, never normalized; stored raw or PNG, never JPEG. */
    DLC_FIELD_MASK = 1u << 1,
    /** An N x 4 float32 ndarray of boxes (x0, y0, x1, y1) in pixels of the record's image: moved,
     *  scaled, flipped and clipped with the image's crop; ::dlc_field.link names the field of
     *  their per-box classes (an ndarray of N), whose entries are dropped with their boxes. */
    DLC_FIELD_BOXES = 1u << 2,
    /** The store's label: an int field whose values are 0..num_labels-1, with names in
     *  dlc_store_label_name() and counts in dlc_store_label_counts(). At most one field. */
    DLC_FIELD_LABEL = 1u << 3,
};

/** The most fields a record may have. */
#define DLC_MAX_FIELDS 64u
/** The most dimensions of an ndarray field. */
#define DLC_MAX_DIMS 6u
/** ::dlc_field.link of a field that names no other. */
#define DLC_NO_FIELD UINT32_MAX

/** One field of the store's schema, read from the store at open. */
typedef struct dlc_field {
    char name[32];     /**< [A-Za-z_][A-Za-z0-9_]*, 1 to 31 characters, unique. */
    uint32_t kind;     /**< A ::dlc_field_kind. */
    uint32_t dtype;    /**< A ::dlc_dtype: the element type (images: uint8; int: int64; float:
                            float64; bytes: uint8). */
    uint32_t encoding; /**< Images: a ::dlc_encoding; others DLC_ENCODING_RAW. */
    uint32_t flags;    /**< ::dlc_field_flags. */
    uint32_t ndim;     /**< ndarray: 1..DLC_MAX_DIMS; image: 3 (height, width, channels);
                            scalars and bytes: 0. */
    uint32_t shape[DLC_MAX_DIMS]; /**< The dimensions; 0 where DLC_FIELD_VARIABLE says they vary
                                       (ndarray: shape[0]; image: shape[0] and shape[1]). */
    uint32_t max_dim0; /**< The largest leading dimension (image: height) of any record (0 in a
                            version 1 store whose images differ in size: not recorded there). */
    uint32_t max_dim1; /**< Images: the largest width of any record (as max_dim0); else 0. */
    uint64_t max_size; /**< The largest payload of any record, in bytes. */
    uint32_t link;     /**< DLC_FIELD_BOXES: index of the per-box class field; else
                            DLC_NO_FIELD. */
    /* The smallest image, so that a crop too large for some record is refused at open rather
     * than when its batch is built. Images only (0 for other kinds). Fixed images: the shape and
     * record 0. 0 where unknown: no record, a version 1 store whose images differ in size, or a
     * store built before these were recorded (docs/FORMAT.md, "min_dims"); then min_record0 and
     * min_record1 are 0 too. */
    uint32_t min_dim0;    /**< The smallest height of any record, or 0: unknown. */
    uint32_t min_dim1;    /**< The smallest width of any record, or 0: unknown. */
    uint64_t min_record0; /**< When min_dim0 is known: the first record whose height is min_dim0
                               (a set: its global number). */
    uint64_t min_record1; /**< When min_dim1 is known: the first record whose width is
                               min_dim1. */
} dlc_field;

/** One field of one record: a view into the map. */
typedef struct dlc_value {
    const uint8_t *data; /**< Payload (scalars: their 8 little-endian bytes in the record's
                              header); points into the map: never write or free. */
    size_t size;         /**< Bytes of data. */
    uint64_t offset;     /**< File offset of data[0]. */
    uint32_t dim0;       /**< Image: height; ndarray: leading dimension; else 0. */
    uint32_t dim1;       /**< Image: width; else 0. */
    uint64_t xxh3;       /**< XXH3-64 of data as written by the writer. */
    int64_t i;           /**< DLC_FIELD_INT: the value. */
    double f;            /**< DLC_FIELD_FLOAT: the value. */
    uint32_t file;       /**< The file that holds the record, whose offsets @c offset is in:
                              0 for a single store, the shard for a set (dlc_store_file_fd()). */
} dlc_value;

/** Read-only handle on a store file; safe to share between threads. */
typedef struct dlc_store dlc_store;

/** Per-thread read handle (an LMDB read transaction). */
typedef struct dlc_store_reader dlc_store_reader;

/** What a store holds, read from its metadata at open. */
typedef struct dlc_store_info {
    uint32_t format_version; /**< 1 or 2 (::DLC_STORE_FORMAT_VERSION). */
    uint32_t encoding;       /**< The first image field's ::dlc_encoding (DLC_ENCODING_RAW when
                                  there is no image field). */
    uint64_t count;          /**< Records, keyed 0..count-1. */
    uint32_t height;         /**< First image field: pixels; 0 when records differ in size. */
    uint32_t width;          /**< First image field: pixels; 0 when records differ in size. */
    uint32_t channels;       /**< First image field: 1, 3 or 4 (0 without an image field). */
    uint32_t num_labels;     /**< Values of the label field are 0..num_labels-1 (0: no labels). */
    uint64_t skipped;        /**< Source items the builder skipped as unreadable. */
    uint64_t payload_bytes;  /**< Sum of every record's payload sizes. */
    uint64_t content_digest; /**< Version 1: XXH3-64 over each record's label (int64 LE) and
                                  payload, in order; version 2: docs/FORMAT.md. A set: XXH3-64
                                  over its shards' digests (u64 LE, in order), which is not the
                                  digest of a single store of the same records. */
    uint64_t file_bytes;     /**< Size of the store file (a set: the sum of its shards'). */
    uint32_t num_fields;     /**< Fields of every record (2 for a version 1 store). */
    uint32_t image_field;    /**< Index of the first image field, or DLC_NO_FIELD. */
    uint32_t label_field;    /**< Index of the DLC_FIELD_LABEL field, or DLC_NO_FIELD. */
} dlc_store_info;

/** One record's first image field and its label, as a view into the map (the version 1 view,
 *  kept for stores of images and labels). Nothing in it is owned by the caller. */
typedef struct dlc_record {
    const uint8_t *data; /**< Payload; points into the map: never write or free. */
    size_t size;         /**< Payload bytes. */
    uint64_t offset;     /**< File offset of data[0] (for pread/O_DIRECT/io_uring). */
    uint64_t index;      /**< Record number. */
    int64_t label;       /**< Class label, 0..num_labels-1. */
    uint32_t height;     /**< Pixels. */
    uint32_t width;      /**< Pixels. */
    uint32_t channels;   /**< Interleaved channels per pixel. */
    uint32_t encoding;   /**< A ::dlc_encoding. */
    uint64_t xxh3;       /**< XXH3-64 of the payload as written by the builder. */
} dlc_record;

/** dlc_store_open() flags. */
enum dlc_store_flags {
    /** Advise the kernel that reads are random (MADV_RANDOM, MDB_NORDAHEAD).
     *  This is the default; the flag exists to say so in calling code. */
    DLC_STORE_RANDOM = 0u,
    /** Advise sequential access (whole-store scans such as verify). */
    DLC_STORE_SEQUENTIAL = 1u << 0,
};

/**
 * @brief Open and map the store at @p path read-only.
 * @param[in] path Store file, or a store set's directory; not retained. A set's index is
 *            checked (size, checksum, names, record numbers) and every shard is opened with
 *            every check of a store, then checked against the index: its schema, its place
 *            in the set (part I of N, the set's id), its record count, content digest, file
 *            size and labels. The set's schema is the union of the shards' (docs/FORMAT.md).
 *            A set holds one open file and one map per shard.
 * @param[in] flags Zero or more ::dlc_store_flags.
 * @param[out] out Handle; release with dlc_store_close(). NULL on failure.
 * @return DLC_OK, -errno (-ENOENT..., a set's missing shard named), DLC_EVERSION (not a store;
 *         a directory without index.dlcset), DLC_ECORRUPT (a set: a damaged index, or a shard
 *         that disagrees with it, named with the reason).
 * Thread safety: the handle may be shared by any number of threads.
 */
DLC_API dlc_status dlc_store_open(const char *path, uint32_t flags, dlc_store **out);

/** Unmap and free @p s. Every reader must be closed first.
 *  @param[in] s A store from dlc_store_open(), or NULL (nothing happens). */
DLC_API void dlc_store_close(dlc_store *s);

/** @brief The metadata read at open.
 *  @param[in] s The store; NULL is a misuse answered as @return says.
 *  @return Owned by @p s, valid until dlc_store_close(); NULL only when @p s is NULL. */
DLC_API const dlc_store_info *dlc_store_get_info(const dlc_store *s);

/** @brief The schema: info->num_fields fields, owned by @p s, valid until dlc_store_close().
 *  A version 1 store has two: "image" (DLC_FIELD_IMAGE) and "label" (DLC_FIELD_INT,
 *  DLC_FIELD_LABEL).
 *  @param[in] s The store; NULL is a misuse answered as @return says.
 *  @return The array; NULL only when @p s is NULL. */
DLC_API const dlc_field *dlc_store_fields(const dlc_store *s);

/** @brief Find a field of the schema by name.
 *  @param[in] s The store.
 *  @param[in] name The field's name.
 *  @return Its index in dlc_store_fields(), or -1 when there is none (or @p s or @p name is
 *          NULL). */
DLC_API int dlc_store_find_field(const dlc_store *s, const char *name);

/** @brief The path the store was opened with: a set's directory.
 *  @param[in] s The store; NULL is a misuse answered as @return says.
 *  @return A copy owned by @p s, valid until dlc_store_close(); NULL only when @p s is NULL. */
DLC_API const char *dlc_store_path(const dlc_store *s);

/** @brief Name of class @p label ("n01440764"...).
 *  @param[in] s The store; NULL is a misuse answered as @return says.
 *  @param[in] label 0..info->num_labels-1.
 *  @return Owned by @p s, valid until dlc_store_close(); NULL when @p label is out of range
 *          or @p s is NULL. */
DLC_API const char *dlc_store_label_name(const dlc_store *s, uint32_t label);

/** @brief Records per label.
 *  @param[in] s The store; NULL is a misuse answered as @return says.
 *  @return An array of info->num_labels counts owned by @p s, valid until dlc_store_close();
 *          NULL only when @p s is NULL. */
DLC_API const uint64_t *dlc_store_label_counts(const dlc_store *s);

/**
 * @brief Raw value of metadata key @p key (for example "build", a JSON text
 *        that says how the store was built). A set answers with its first shard's metadata.
 * @param[in] s The store.
 * @param[in] key The metadata key.
 * @param[out] data Points into the map; never write or free; valid until close.
 * @param[out] size Bytes.
 * @return DLC_OK, DLC_ENOTFOUND (no such key; @p data and @p size untouched), DLC_EINVAL (a
 *         NULL argument).
 */
DLC_API dlc_status dlc_store_meta(const dlc_store *s, const char *key, const void **data,
                                  size_t *size);

/** @brief The file descriptor of the store (opened O_RDONLY, owned by @p s);
 *  for readahead and io_uring reads. Never close it. A set's first shard's: read a set's
 *  files with dlc_store_file_fd().
 *  @param[in] s The store; NULL is a misuse answered as @return says.
 *  @return The descriptor; -1 when @p s is NULL (or a streamed set's first shard is absent). */
DLC_API int dlc_store_fd(const dlc_store *s);

/** @brief Files of the store: 1 for a single store, the number of shards for a set. Files are
 *  numbered 0..n-1 in record order; dlc_value.file names one.
 *  @param[in] s The store; NULL is a misuse answered as @return says.
 *  @return The count, at least 1; 0 when @p s is NULL. */
DLC_API uint32_t dlc_store_num_files(const dlc_store *s);

/** @brief The descriptor of file @p file, for pread, readahead and io_uring reads at
 *  dlc_value.offset.
 *  @param[in] s The store; NULL is a misuse answered as @return says.
 *  @param[in] file 0..dlc_store_num_files()-1.
 *  @return The descriptor (opened O_RDONLY, owned by @p s; never close it), or -1 when there is
 *          no such file or @p s is NULL. */
DLC_API int dlc_store_file_fd(const dlc_store *s, uint32_t file);

/** @brief The path of file @p file, to open it again with other flags (O_DIRECT).
 *  @param[in] s The store; NULL is a misuse answered as @return says.
 *  @param[in] file 0..dlc_store_num_files()-1.
 *  @return Owned by @p s, valid until dlc_store_close(); NULL when there is no such file or
 *          @p s is NULL. */
DLC_API const char *dlc_store_file_path(const dlc_store *s, uint32_t file);

/** @brief The size of file @p file when it was opened. A file found smaller later was truncated
 *  in place: reading its map past the new end raises SIGBUS, so a long-running reader compares
 *  with fstat() of dlc_store_file_fd().
 *  @param[in] s The store; NULL is a misuse answered as @return says.
 *  @param[in] file 0..dlc_store_num_files()-1.
 *  @return Bytes, or 0 when there is no such file or @p s is NULL. */
DLC_API uint64_t dlc_store_file_bytes(const dlc_store *s, uint32_t file);

/** @brief The file that holds record @p index, found without touching the map (a binary
 *  search over a set's shards).
 *  @param[in] s The store; NULL is a misuse answered as @return says.
 *  @param[in] index A record number.
 *  @return The file's number, or UINT32_MAX when @p index >= count or @p s is NULL. */
DLC_API uint32_t dlc_store_record_file(const dlc_store *s, uint64_t index);

/**
 * @brief Bytes of the store file that are in the page cache now (mincore); a set's files
 *        summed.
 * @param[in] s The store.
 * @param[out] resident Bytes resident.
 * @return DLC_OK, DLC_EINVAL (a NULL argument) or -errno.
 */
DLC_API dlc_status dlc_store_resident(const dlc_store *s, uint64_t *resident);

/**
 * @brief Start a per-thread read handle (a set's holds one per shard, made here, so that
 *        reads allocate nothing).
 * @param[in] s The store; it must outlive the reader.
 * @param[out] out Release with dlc_store_reader_close(), on the thread that opened it.
 * @return DLC_OK, DLC_EINVAL (a NULL argument), -ENOMEM, DLC_ECORRUPT.
 * Thread safety: a reader belongs to the thread that opened it.
 */
DLC_API dlc_status dlc_store_reader_open(const dlc_store *s, dlc_store_reader **out);

/** Close @p r. Views it returned remain valid until dlc_store_close().
 *  @param[in] r A reader from dlc_store_reader_open(), or NULL (nothing happens). */
DLC_API void dlc_store_reader_close(dlc_store_reader *r);

/**
 * @brief Find record @p index without copying or allocating: every field of it, as views.
 *        Checks the header (that it is record @p index), each field's offset, size and
 *        dimensions against the schema, boxes against their classes, the label's range, and
 *        that each payload lies inside the file; not the checksums. A version 2 store finds the
 *        record through its offset table (one load, no B-tree search; dlc_store_verify()
 *        checks the table against the B-tree); a version 1 store through LMDB; a set through
 *        the shard that holds @p index (a binary search over the shards' first records), whose
 *        file each value names in dlc_value.file. A record that fails is named with its set,
 *        its global number, its shard and its number there.
 * @param[in] r The calling thread's reader.
 * @param[in] index The record number, 0..count-1.
 * @param[out] values info->num_fields views, in schema order; valid until dlc_store_close().
 * @return DLC_OK, DLC_ENOTFOUND (index >= count), DLC_ECORRUPT (bad header, a payload out of
 *         the file, a size or shape that disagrees with the schema), DLC_EINVAL (@p r or
 *         @p values NULL).
 */
DLC_API dlc_status dlc_store_read_values(dlc_store_reader *r, uint64_t index, dlc_value *values);

/**
 * @brief dlc_store_read_values() without touching the store's map: the record's offset-table
 *        entry and header are read with pread() from its file, so that a file truncated in place
 *        under the caller is an error, never SIGBUS (a read of the map past the file's new end).
 *        The same checks; payload views are NULL (read each at its dlc_value.offset in file
 *        dlc_value.file, as the loader's direct I/O does); scalar fields (int, float) point into
 *        @p header.
 * @param[in] s The store or set (not a reader: no transaction is needed); safe from any thread.
 * @param[in] index The record number, 0..count-1.
 * @param[out] values info->num_fields values, in schema order.
 * @param[out] header @p cap bytes for the record's header; scalar views point into it.
 * @param[in] cap At least dlc_store_header_bound().
 * @return What dlc_store_read_values() returns; DLC_ECORRUPT naming the store (and shard) and
 *         the record when the file now ends inside the record (truncated in place); DLC_ENOSYS
 *         for a version 1 store (its records are found through LMDB's B-tree, in the map: use
 *         dlc_store_read_values()); DLC_EINVAL (NULL, @p cap too small, a streamed shard not in
 *         the cache); -errno from pread().
 */
DLC_API dlc_status dlc_store_read_values_pread(const dlc_store *s, uint64_t index,
                                               dlc_value *values, uint8_t *header, size_t cap);

/** @brief Bytes of the largest record header of @p s (see dlc_store_read_values_pread()).
 *  @param[in] s The store, or NULL (0).
 *  @return Bytes; cannot fail. */
DLC_API size_t dlc_store_header_bound(const dlc_store *s);

/**
 * @brief Hash field @p field of record @p index (as read into @p v) and compare with its stored
 *        checksum.
 * @param[in] s The store @p v was read from (it names the file in the message).
 * @param[in] index The record number @p v was read as.
 * @param[in] field The field's index in the schema.
 * @param[in] v The value dlc_store_read_values() gave for that field.
 * @return DLC_OK or DLC_ECORRUPT, with "STORE: record I: field NAME: checksum mismatch (stored
 *         X, computed Y)" in dlc_errmsg(); DLC_EINVAL (a NULL argument, no such field).
 */
DLC_API dlc_status dlc_value_verify(const dlc_store *s, uint64_t index, uint32_t field,
                                    const dlc_value *v);

/** Called by dlc_store_verify() for progress and for each bad record. A set's shards are
 *  verified in parallel and their progress summed. */
typedef struct dlc_verify_progress {
    uint64_t done;         /**< Records checked so far. */
    uint64_t total;        /**< Records in the store. */
    uint64_t bytes_done;   /**< Payload bytes hashed so far. */
    uint64_t bad;          /**< Bad records found so far. */
    uint64_t bad_index;    /**< With bad_status != 0: the record that failed (a set: its global
                                number; bad_msg names the shard and its number there). */
    dlc_status bad_status; /**< 0 for a progress call; the error for a bad record. */
    const char *bad_msg;   /**< With bad_status != 0: the reason, valid during the call. */
} dlc_verify_progress;

/** Return non-zero to stop the verification early (dlc_store_verify() then
 *  returns DLC_ECANCELED). */
typedef int (*dlc_verify_fn)(void *user, const dlc_verify_progress *p);

/**
 * @brief Re-hash every field of every record and check headers, the record count, the label
 *        counts, the offset table and the content digest against the metadata. LMDB's tree of
 *        the records is walked with bounds checks first (a version 2 store's: dlc_store_open()
 *        checks only its root, as reads go through the offset table). A set: its
 *        index is read again and compared with the one opened, and every shard is verified,
 *        in parallel on up to one thread per core (never more threads than shards).
 * @param[in] s The store.
 * @param[in] fn Called about every 64 MiB hashed and once per bad record; may be NULL. On a
 *            set it is called from the verifying threads, one call at a time, with the
 *            shards' progress summed.
 * @param[in] user Passed to @p fn as its first argument.
 * @param[out] bad Number of bad records (may be NULL).
 * @return DLC_OK when everything matches, DLC_ECORRUPT when something does not
 *         (dlc_errmsg() names the first), DLC_ECANCELED, DLC_EINVAL (@p s is NULL), or -errno.
 */
DLC_API dlc_status dlc_store_verify(const dlc_store *s, dlc_verify_fn fn, void *user,
                                    uint64_t *bad);

/* ---- Experimental ----------------------------------------------------------------------------
 * The version 1 view of a record (its first image and its label, a ::dlc_record): the one way to
 * read a record is dlc_store_read_values(), and to check a field, dlc_value_verify().
 * Declared only when the program defines DLC_EXPERIMENTAL before including this header (zstd's
 * ZSTD_STATIC_LINKING_ONLY is the model; the tree's own build defines it): exported, in the
 * DLCACHE_EXPERIMENTAL node of the symbol map, but outside the frozen ABI: they may change or go
 * in any release (CONTRIBUTING.md, "The ABI"). */
#ifdef DLC_EXPERIMENTAL

/**
 * @brief Find record @p index's first image field and its label without copying or allocating
 *        (dlc_store_read_values() reads every field). Checks the header and bounds, not the
 *        payload checksum. In a set, rec->offset is in file dlc_store_record_file(s, index).
 * @param[in] r The calling thread's reader.
 * @param[in] index The record number, 0..count-1.
 * @param[out] rec Filled on success; its views stay valid until dlc_store_close(). The label
 *             is 0 in a store without a label field.
 * @return DLC_OK, DLC_ENOTFOUND (index >= count), DLC_ECORRUPT (bad header,
 *         payload out of the file, size that disagrees with the shape), DLC_EINVAL (the store
 *         has no image field).
 */
DLC_API dlc_status dlc_store_read(dlc_store_reader *r, uint64_t index, dlc_record *rec);

/**
 * @brief Hash @p rec's image payload and compare with its stored checksum.
 * @param[in] s The store @p rec was read from, or NULL (the message then says "store").
 * @param[in] rec A record from dlc_store_read() (not NULL).
 * @return DLC_OK or DLC_ECORRUPT, with "STORE: record I: checksum mismatch
 *         (stored X, computed Y)" in dlc_errmsg(). @p s names the file.
 */
DLC_API dlc_status dlc_record_verify(const dlc_store *s, const dlc_record *rec);

#endif /* DLC_EXPERIMENTAL */

#ifdef __cplusplus
}
#endif
#endif /* DLCACHE_STORE_H */
