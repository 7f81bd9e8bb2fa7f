/**
 * @file build.h
 * @brief Build a store from image sources: the library behind `cachebuild`.
 *
 * Sources are an ImageFolder tree (one folder per class; labels numbered as
 * torchvision's ImageFolder numbers them: class folder names sorted by byte
 * value), a manifest (`path<TAB>label` lines), or WebDataset .tar shards
 * (`KEY.jpg`/`KEY.jpeg` with `KEY.cls`). Items are numbered in a
 * deterministic order, decoded and resized on all threads, and written in
 * that order, so the store's bytes do not depend on the number of threads.
 *
 * Items. Every file a source names is an item, numbered in source order,
 * also those that cannot become records; those are skipped and reported, so
 * an ImageFolder's item numbers are torchvision's sample numbers:
 *   - ImageFolder: exactly torchvision.datasets.ImageFolder's classes and
 *     samples (class folders sorted by byte value, each class folder walked
 *     recursively following folder links, in sorted full-path order, files
 *     sorted, torchvision's IMG_EXTENSIONS compared without case). Files with
 *     an image extension other than .jpg/.jpeg are items skipped as "not a
 *     JPEG". A class folder without any image keeps its label number (its
 *     position) with no records; torchvision would refuse such a tree.
 *   - Manifest: lines `PATH<TAB>LABEL` (split at the last tab), PATH absolute
 *     or relative to the manifest's folder, LABEL 0..2^24-1; blank lines and
 *     lines starting with '#' are ignored; anything else is DLC_EINVAL naming
 *     the manifest and line. Label names are "0".."K-1", K = largest label + 1.
 *   - WebDataset tar: members grouped into samples by key as webdataset does
 *     (key = member path up to the first '.' of its file name, extension
 *     lower-cased); a sample with a jpg/jpeg member is an item labelled by
 *     its cls member (decimal). A sample without cls, with a bad cls, with a
 *     cls but no JPEG, or with another image type is an item skipped with
 *     that reason. ustar, GNU (long names) and pax headers are read; a bad
 *     header checksum or a member past the end of the file is DLC_ECORRUPT.
 * A skipped item is named in the report ("SHARD:MEMBER" for tar members) and
 * counted in the store's `skipped` metadata; record numbers are dense over
 * the items that were stored.
 *
 * The store's "source_digest" is XXH3-64 over every item in order: its path
 * as reported (NUL-terminated), then its size, mtime (ns) and label as
 * little-endian 64-bit values, so it changes when a source file does.
 *
 * The store is written to `OUT.tmp-PID`, synced, and renamed to OUT; the
 * directory is synced after the rename. A failure, a signal or a full disk
 * leaves the previous OUT (or no OUT) and removes the temporary file when the
 * process is still alive to do it; a later build of the same OUT removes
 * `OUT.tmp-PID` files whose process no longer exists. An existing OUT is
 * replaced only with ::dlc_build_options.force.
 *
 * Memory: one small entry per item, plus a window of 4 x threads + 4 records
 * in flight, whatever the size of the data set.
 *
 * Thread safety: dlc_build() may run on any thread; it starts its own workers
 * and joins them before it returns. Callbacks run on the calling thread.
 */
#ifndef DLCACHE_BUILD_H
#define DLCACHE_BUILD_H

#include <dlcache/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Progress of a running build, for a progress line. */
typedef struct dlc_build_progress {
    uint64_t done;      /**< Items finished (written or skipped). */
    uint64_t total;     /**< Items found in the sources. */
    uint64_t skipped;   /**< Items skipped so far. */
    uint64_t bytes_in;  /**< Source bytes read so far. */
    uint64_t bytes_out; /**< Payload bytes written so far. */
    double seconds;     /**< Since the build started. */
} dlc_build_progress;

/** Called once before the first record, then about 10 times a second, and
 *  once at the end, from the calling thread; return non-zero to cancel (the
 *  build then fails with DLC_ECANCELED and leaves no new store). Safe place to
 *  poll a flag set by a signal handler. */
typedef int (*dlc_build_progress_fn)(void *user, const dlc_build_progress *p);

/** Options; dlc_build_options_init() sets the defaults named below. */
typedef struct dlc_build_options {
    uint32_t size;       /**< Shorter side after resize (default 256). */
    int center_crop;     /**< 1: crop to size x size (default); 0: keep the aspect. */
    uint32_t encoding;   /**< A ::dlc_encoding (default DLC_ENCODING_RAW). */
    int quality;         /**< JPEG quality with DLC_ENCODING_JPEG (default 90). */
    uint32_t threads;    /**< Worker threads; 0 = all online cores (default). */
    int strict;          /**< Stop at the first bad image instead of skipping it. */
    int force;           /**< Replace an existing output store. */
    const char *command; /**< Command line to record in the store's "build" metadata, or NULL. */
    dlc_build_progress_fn progress; /**< May be NULL. */
    void *progress_user;
    dlc_log_fn log; /**< Notices (skipped files...); may be NULL. */
    void *log_user;
} dlc_build_options;

/** One source item that was not stored, and why. */
typedef struct dlc_build_skip {
    const char *path;   /**< File, or "shard.tar:member" for tar members. */
    const char *reason; /**< One sentence. */
} dlc_build_skip;

/** What a build did. Owned by the caller; free with dlc_build_report_free(). */
typedef struct dlc_build_report {
    uint64_t count;          /**< Records written. */
    uint64_t skipped;        /**< Items skipped (see skips). */
    uint64_t bytes_in;       /**< Source bytes read. */
    uint64_t bytes_out;      /**< Payload bytes written. */
    uint64_t file_bytes;     /**< Size of the finished store file. */
    double seconds;          /**< Wall time of the whole build. */
    double images_per_s;     /**< Items (written + skipped) per second. */
    uint32_t threads;        /**< Worker threads used. */
    uint64_t content_digest; /**< Same as dlc_store_info.content_digest. */
    dlc_build_skip *skips;   /**< skipped entries. */
} dlc_build_report;

/** Fill @p o with the defaults. */
DLC_API void dlc_build_options_init(dlc_build_options *o);

/**
 * @brief Build the store @p out from @p nsources sources.
 * @param[in] sources Paths: directories (ImageFolder), `.tar` files
 *            (WebDataset), other files (manifests). Several tar shards or
 *            manifests are concatenated in the order given; one ImageFolder
 *            may not be mixed with other sources.
 * @param[out] report On DLC_OK and on DLC_ENOIMAGES/DLC_EDECODE (strict), what
 *             was done; NULL otherwise. Free with dlc_build_report_free().
 * @return DLC_OK, DLC_EEXIST (out exists, no force), DLC_ENOIMAGES, DLC_EDECODE
 *         (strict mode: first bad image), DLC_EINVAL (bad source, manifest line,
 *         option), DLC_ECANCELED, -ENOSPC (disk full), -errno.
 */
DLC_API dlc_status dlc_build(const char *const *sources, size_t nsources, const char *out,
                             const dlc_build_options *opts, dlc_build_report **report);

/** Free a report. Accepts NULL. */
DLC_API void dlc_build_report_free(dlc_build_report *r);

#ifdef __cplusplus
}
#endif
#endif /* DLCACHE_BUILD_H */
