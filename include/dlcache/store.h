/**
 * @file store.h
 * @brief Read-only access to a dlcache store: one LMDB file of pre-decoded
 *        samples (docs/FORMAT.md gives the byte layout).
 *
 * A store is opened once per process and shared by every thread. Records are
 * returned as views into the memory map: no copy, no allocation, and the same
 * physical pages for every process on the node. Each thread that reads
 * records takes its own ::dlc_store_reader (an LMDB read transaction); opening
 * one costs a few microseconds and is done once per thread, not per record.
 *
 * The store is untrusted input. Open checks the file size against what LMDB's
 * meta pages claim, the format version and the metadata; every read checks
 * the record header and that the payload lies inside the file. Payload
 * checksums (XXH3-64) are checked on request with dlc_record_verify(), because
 * hashing every read would cost as much as the read itself.
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

/** The store format this library writes and reads. */
#define DLC_STORE_FORMAT_VERSION 1u
/** Every record payload starts at a file offset that is a multiple of this
 *  when LMDB stores the record on overflow pages (records over about 2 KiB);
 *  smaller records live inside LMDB leaf pages at no particular alignment. */
#define DLC_STORE_PAYLOAD_ALIGN 64u

/** How a record's payload is encoded. */
typedef enum dlc_encoding {
    DLC_ENCODING_RAW = 0,  /**< uint8 pixels, height x width x channels, row-major (HWC). */
    DLC_ENCODING_JPEG = 1, /**< A baseline JPEG of height x width x channels pixels. */
} dlc_encoding;

/** Read-only handle on a store file; safe to share between threads. */
typedef struct dlc_store dlc_store;

/** Per-thread read handle (an LMDB read transaction). */
typedef struct dlc_store_reader dlc_store_reader;

/** What a store holds, read from its metadata at open. */
typedef struct dlc_store_info {
    uint32_t format_version; /**< ::DLC_STORE_FORMAT_VERSION. */
    uint32_t encoding;       /**< A ::dlc_encoding. */
    uint64_t count;          /**< Records, keyed 0..count-1. */
    uint32_t height;         /**< Pixels; 0 when records differ in size (built with --crop none). */
    uint32_t width;          /**< Pixels; 0 when records differ in size. */
    uint32_t channels;       /**< 3 (RGB) for images. */
    uint32_t num_labels;     /**< Label values are 0..num_labels-1. */
    uint64_t skipped;        /**< Source files the builder skipped as unreadable. */
    uint64_t payload_bytes;  /**< Sum of every record's payload size. */
    uint64_t
        content_digest;  /**< XXH3-64 over each record's label (int64 LE) and payload, in order. */
    uint64_t file_bytes; /**< Size of the store file. */
} dlc_store_info;

/** One record, as a view into the map. Nothing in it is owned by the caller. */
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
 * @param[in] path Store file; not retained.
 * @param[in] flags Zero or more ::dlc_store_flags.
 * @param[out] out Handle; release with dlc_store_close(). NULL on failure.
 * @return DLC_OK, -errno (-ENOENT...), DLC_EVERSION, DLC_ECORRUPT.
 * Thread safety: the handle may be shared by any number of threads.
 */
DLC_API dlc_status dlc_store_open(const char *path, uint32_t flags, dlc_store **out);

/** Unmap and free @p s. Accepts NULL. Every reader must be closed first. */
DLC_API void dlc_store_close(dlc_store *s);

/** @brief The metadata read at open. Valid until dlc_store_close(). */
DLC_API const dlc_store_info *dlc_store_get_info(const dlc_store *s);

/** @brief The path the store was opened with (a copy owned by @p s). */
DLC_API const char *dlc_store_path(const dlc_store *s);

/** @brief Name of class @p label ("n01440764"...), or NULL when out of range.
 *  Valid until dlc_store_close(). */
DLC_API const char *dlc_store_label_name(const dlc_store *s, uint32_t label);

/** @brief Records per label; an array of info->num_labels counts owned by @p s. */
DLC_API const uint64_t *dlc_store_label_counts(const dlc_store *s);

/**
 * @brief Raw value of metadata key @p key (for example "build", a JSON text
 *        that says how the store was built).
 * @param[out] data Points into the map; never write or free; valid until close.
 * @param[out] size Bytes.
 * @return DLC_OK or DLC_ENOTFOUND.
 */
DLC_API dlc_status dlc_store_meta(const dlc_store *s, const char *key, const void **data,
                                  size_t *size);

/** @brief The file descriptor of the store (opened O_RDONLY, owned by @p s);
 *  for readahead and io_uring reads. Never close it. */
DLC_API int dlc_store_fd(const dlc_store *s);

/**
 * @brief Bytes of the store file that are in the page cache now (mincore).
 * @param[out] resident Bytes resident.
 * @return DLC_OK or -errno.
 */
DLC_API dlc_status dlc_store_resident(const dlc_store *s, uint64_t *resident);

/**
 * @brief Start a per-thread read handle.
 * @param[out] out Release with dlc_store_reader_close(), on the thread that opened it.
 * @return DLC_OK, -ENOMEM, DLC_ECORRUPT.
 * Thread safety: a reader belongs to the thread that opened it.
 */
DLC_API dlc_status dlc_store_reader_open(const dlc_store *s, dlc_store_reader **out);

/** Close @p r. Accepts NULL. Views it returned remain valid until dlc_store_close(). */
DLC_API void dlc_store_reader_close(dlc_store_reader *r);

/**
 * @brief Find record @p index without copying or allocating. Checks the
 *        header and bounds, not the payload checksum.
 * @param[out] rec Filled on success; its views stay valid until dlc_store_close().
 * @return DLC_OK, DLC_ENOTFOUND (index >= count), DLC_ECORRUPT (bad header,
 *         payload out of the file, size that disagrees with the shape).
 */
DLC_API dlc_status dlc_store_read(dlc_store_reader *r, uint64_t index, dlc_record *rec);

/**
 * @brief Hash @p rec's payload and compare with the checksum in its header.
 * @return DLC_OK or DLC_ECORRUPT, with "STORE: record I: checksum mismatch
 *         (stored X, computed Y)" in dlc_errmsg(). @p s names the file.
 */
DLC_API dlc_status dlc_record_verify(const dlc_store *s, const dlc_record *rec);

/** Called by dlc_store_verify() for progress and for each bad record. */
typedef struct dlc_verify_progress {
    uint64_t done;         /**< Records checked so far. */
    uint64_t total;        /**< Records in the store. */
    uint64_t bytes_done;   /**< Payload bytes hashed so far. */
    uint64_t bad;          /**< Bad records found so far. */
    uint64_t bad_index;    /**< With bad_status != 0: the record that failed. */
    dlc_status bad_status; /**< 0 for a progress call; the error for a bad record. */
    const char *bad_msg;   /**< With bad_status != 0: the reason, valid during the call. */
} dlc_verify_progress;

/** Return non-zero to stop the verification early (dlc_store_verify() then
 *  returns DLC_ECANCELED). */
typedef int (*dlc_verify_fn)(void *user, const dlc_verify_progress *p);

/**
 * @brief Re-hash every record and check headers, the record count, the label
 *        counts and the content digest against the metadata.
 * @param[in] fn Called about every 64 MiB hashed and once per bad record; may be NULL.
 * @param[out] bad Number of bad records (may be NULL).
 * @return DLC_OK when everything matches, DLC_ECORRUPT when something does not
 *         (dlc_errmsg() names the first), DLC_ECANCELED, or -errno.
 */
DLC_API dlc_status dlc_store_verify(const dlc_store *s, dlc_verify_fn fn, void *user,
                                    uint64_t *bad);

#ifdef __cplusplus
}
#endif
#endif /* DLCACHE_STORE_H */
