/**
 * @file build.h
 * @brief Build a store from image sources: the library behind `cachebuild`.
 *
 * Sources are an ImageFolder tree (one folder per class; labels numbered as
 * torchvision's ImageFolder numbers them: class folder names sorted by byte
 * value), a manifest (`path<TAB>label` lines, or named columns: several
 * labels, numbers), or WebDataset .tar shards
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
 *   - Manifest with named columns: a first line `#columns: path label ...`
 *     names each cell of the lines (cache/builder/source_manifest.c gives the
 *     syntax): `label` the store's label, `labels` (or NAME:ints) a list of
 *     integers, NAME:floats a list of numbers, NAME:int, NAME:float, and a
 *     plain NAME one number (int64 when every value is an integer, else
 *     float64). A bad cell is DLC_EINVAL naming the manifest, line and
 *     column. Every manifest and shard of a build has the same columns.
 * A skipped item is named in the report ("SHARD:MEMBER" for tar members) and
 * counted in the store's `skipped` metadata; record numbers are dense over
 * the items that were stored.
 *
 * Records (format version 2). Each record has the fields, in this order:
 *   - "image": the decoded, resized, cropped image, raw or JPEG, of 3
 *     channels (RGB), 1 (gray) or, with ::DLC_BUILD_CHANNELS_KEEP, the
 *     channels of the first source image in item order that has a readable
 *     JPEG header (1 for a grayscale JPEG, else 3); an image of the other kind
 *     is converted (dlc_jpeg_decode_resize_as()), the first one with a
 *     notice, and counted in ::dlc_build_report.converted.
 *   - "mask", with ::dlc_build_options.masks: a segmentation mask (an image
 *     with DLC_FIELD_MASK), raw or PNG, never JPEG.
 *   - one field per column of the sources, named like it: "label" (int,
 *     DLC_FIELD_LABEL, names "0".."K-1" for lists, the class folders for an
 *     ImageFolder), int64 and float64 scalars, and int64 or float64 ndarrays
 *     whose length varies per record. An ImageFolder tree, a tar shard and a
 *     manifest without a header have one column, "label": their stores are
 *     exactly "image" and "label".
 *
 * Masks. For an item whose path relative to its tree is DIR/STEM.EXT (an
 * ImageFolder: relative to the root given; a manifest: the path as written
 * in the line), the mask is MASKS/DIR/STEM.png: the file name's last
 * extension replaced by ".png" (".png" appended when it has none), nothing
 * else tried. It is decoded with dlc_png_decode() (gray PNGs are class ids,
 * 1 channel; RGB and RGBA keep their channels, palettes become RGB), must be
 * exactly as large as the source image, and is resized with
 * dlc_resize_nearest() to the geometry dlc_resize_geometry_get() gives the
 * image: the mask aligns pixel for pixel with the stored image, and class
 * ids are never blended. The first mask in item order decides the mask
 * field's channels. An image without its mask, with an absolute manifest
 * path, or with a mask that cannot be read, has another size or other
 * channels, is an item skipped with that reason (DLC_EDECODE with strict).
 * WebDataset tar members have no path in a tree: a build with masks and a
 * tar source is DLC_EINVAL.
 *
 * The store's "source_digest" is XXH3-64 over every item in order: its path
 * as reported (NUL-terminated), then its size, mtime (ns) and label as
 * little-endian 64-bit values, so it changes when a source file does. With
 * masks, the mask file's size and mtime follow; with manifest columns besides
 * the label, the item's values (8 bytes each, lists as they are).
 *
 * The store is written to `OUT.tmp-PID`, synced, and renamed to OUT; the
 * directory is synced after the rename. A failure, a signal or a full disk
 * leaves the previous OUT (or no OUT) and removes the temporary file when the
 * process is still alive to do it; a later build of the same OUT removes
 * `OUT.tmp-PID` files whose process no longer exists. An existing OUT is
 * replaced only with ::dlc_build_options.force.
 *
 * Store sets (docs/SETS.md). With ::dlc_build_options.parts = N, dlc_build() writes a directory
 * of N parts
 * and its index instead of one file: part I holds the records of the source
 * items [I*n/N, (I+1)*n/N) (n items scanned), numbered on from the part before
 * it, so that the set delivers exactly the records of one store built from
 * the same sources. All N parts are built at once on one machine (each with
 * its own writer thread, the workers shared), or one part per call, on as many
 * machines as there are parts, each scanning the same sources; then
 * dlc_set_join() writes the index.
 *
 * Memory: one small entry per item, plus a window of 4 x threads + 4 records
 * in flight, at least 32 (for a set: per part being written, 4 x its share of
 * the threads + 4, at least 32 over the parts), whatever the size of the data
 * set.
 *
 * Thread safety: dlc_build() may run on any thread; it starts its own workers
 * and writer threads and joins them before it returns. Callbacks run on the
 * calling thread.
 */
#ifndef DLCACHE_BUILD_H
#define DLCACHE_BUILD_H

#include <dlcache/set.h>
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

/** ::dlc_build_options.channels: the image field takes the channels of the first source image. */
#define DLC_BUILD_CHANNELS_KEEP 0u

/** Options; dlc_build_options_init() sets the defaults named below. */
typedef struct dlc_build_options {
    uint32_t struct_size; /**< sizeof(dlc_build_options) as the caller's header has it; set by
                               dlc_build_options_init() (status.h, "How structs grow"). */
    uint32_t size;        /**< Shorter side after resize (default 256). */
    int center_crop;      /**< 1: crop to size x size (default); 0: keep the aspect. */
    uint32_t encoding;    /**< A ::dlc_encoding (default DLC_ENCODING_RAW). */
    int quality;          /**< JPEG quality with DLC_ENCODING_JPEG (default 90). */
    uint32_t threads;     /**< Worker threads; 0 = all online cores (default). */
    int strict;           /**< Stop at the first bad image instead of skipping it. */
    int force;            /**< Replace an existing output store (or set, or part). */
    const char *command;  /**< Command line to record in the store's "build" metadata, or NULL. */
    dlc_build_progress_fn progress; /**< May be NULL. */
    void *progress_user;            /**< Passed to progress as its first argument. */
    dlc_log_fn log;                 /**< Notices (skipped files...); may be NULL. */
    void *log_user;                 /**< Passed to log as its first argument. */
    /* What each record holds besides what the sources give. */
    uint32_t channels; /**< The image field's channels: 3 (RGB, the default), 1 (gray) or
                            DLC_BUILD_CHANNELS_KEEP. */
    const char *masks; /**< Root of a tree of PNG masks (see "Masks" above), or NULL (default). */
    int mask_encoding; /**< -1 (default): raw masks in a raw store, PNG in a JPEG one; else
                            DLC_ENCODING_RAW or DLC_ENCODING_PNG. */
    /* A store set (see "Store sets" above) instead of one store file. */
    uint32_t parts; /**< 0 (default): one store, the file OUT. N, 1..65536: a set of N parts in
                         the directory OUT. */
    int one_part;   /**< With parts: 0 (default): every part, at once, on this machine, then the
                         index. 1: part @c part alone (one machine's share of a build across
                         machines); dlc_set_join() writes the index once all parts are there. */
    uint32_t part;  /**< With one_part: I, 0..N-1. */
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
    uint32_t channels;       /**< Of the image field. */
    uint64_t converted;      /**< DLC_BUILD_CHANNELS_KEEP: images stored with other channels
                                  than their source's. */
    /* A set (::dlc_build_options.parts > 0) only; 0 and NULL for a single store. */
    uint32_t parts;               /**< N. */
    uint64_t set_id;              /**< The set's identity, the same in every part. */
    uint64_t items;               /**< Source items scanned, of which the parts built a share. */
    uint32_t num_built;           /**< Parts this call wrote: N, or 1 with one_part. */
    struct dlc_build_part *built; /**< num_built entries, in part order. */
} dlc_build_report;

/** One part of a set that dlc_build() wrote. */
typedef struct dlc_build_part {
    uint32_t part;       /**< I. */
    uint64_t first_item; /**< Its source items, [first_item, end_item). */
    uint64_t end_item;   /**< One past its last source item. */
    uint64_t count;      /**< Records. */
    uint64_t skipped;    /**< Items skipped. */
    uint64_t file_bytes; /**< Its file's size. */
} dlc_build_part;

/** @brief Fill the caller's @p o with the defaults, never writing past @p size; called
 *         through the macro dlc_build_options_init(), which passes the caller's sizeof.
 *  @param[out] o The options to fill (NULL, or smaller than a uint32_t: nothing is written).
 *  @param[in] size sizeof(dlc_build_options) in the header the caller was built with: the bytes of
 *                  @p o that are written; struct_size is set to it (status.h, "How structs
 *                  grow"). */
DLC_API void dlc_build_options_init_sized(dlc_build_options *o, size_t size);

/** Fill @p o (a ::dlc_build_options, not a pointer to void) with the defaults, its struct_size
 *  with the caller's sizeof: every field the caller's header has is written. */
#define dlc_build_options_init(o) dlc_build_options_init_sized((o), sizeof *(o))

/**
 * @brief Build the store @p out, or with @c parts the store set (or one part of it) in the
 *        directory @p out, from @p nsources sources.
 *
 * One store (parts 0): the file @p out, written as the file comment says.
 *
 * A set (parts N >= 1): its N parts, OUT/part-IIIII-of-NNNNN.dlc, and (all parts at once) its
 * index, OUT/index.dlcset (docs/SETS.md). Every call scans all the sources, whichever part it
 * builds, so that the split is the same on every machine: part I takes the items
 * [I*n/N, (I+1)*n/N) of the n scanned, its records numbered on from the part before it, and
 * every part gets the label names of the whole list. Each part records its place and the set's
 * identity, set_id: XXH3-64 over the whole item list (each item's path relative to its source,
 * size, mtime, label, mask and column values: found with stat(), nothing is read), the options
 * that change the stored bytes, the record's fields, the label names and N. A part built from
 * other sources, options or N has another set_id and is refused by the join. Every machine must
 * therefore see the same files (a shared file system, or copies that keep the times: rsync -a,
 * cp -p).
 *
 * All parts (one_part 0): the worker threads are shared by min(N, threads) parts written at
 * once, each by its own writer thread; then the join writes the index, the commit point, and
 * the files of a set it replaced are removed. A set already in @p out is replaced only with
 * force: before any new part is written its parts are hard-linked to retired-NAME and an index
 * naming those links takes the old index's place, so that until the new index is in place
 * @p out holds the old set, whole and readable, and after it the new one; a failure, a signal
 * or a kill never leaves an index naming a missing or half-written part (on a file system
 * without hard links the old index is removed first: the old set, then none, then the new).
 * A failed build removes the parts it wrote (and @p out when it made it).
 *
 * One part (one_part 1): writes OUT/part-I-of-N.dlc only, creating @p out when needed (several
 * machines may do so at once). The part's file is published atomically; a part whose every
 * item was skipped is a valid, empty part. A part file already there is replaced only with
 * force, and a directory that holds a joined set only with force (its set is retired as above).
 * dlc_set_join() writes the index once every part is there.
 *
 * @param[in] sources Paths: directories (ImageFolder), `.tar` files
 *            (WebDataset), other files (manifests). Several tar shards or
 *            manifests are concatenated in the order given; one ImageFolder
 *            may not be mixed with other sources. Not retained.
 * @param[in] nsources Entries of @p sources, at least 1.
 * @param[in] out Path of the store to write, or of the set's directory; not retained.
 * @param[in] opts Options, filled by dlc_build_options_init() then changed (NULL: its
 *            defaults); copied.
 * @param[out] report On DLC_OK and on DLC_ENOIMAGES/DLC_EDECODE (strict), what
 *             was done; NULL otherwise. Free with dlc_build_report_free(). A set's also has
 *             parts, set_id, items and one entry per part built; for all parts, content_digest
 *             and file_bytes are the set's (dlc_store_info of @p out).
 * @return DLC_OK, DLC_EEXIST (out exists, no force; a set's: a set or parts in @p out, or the
 *         part's file), DLC_ENOIMAGES (a set of all parts: no part has a record), DLC_EDECODE
 *         (strict mode: first bad image), DLC_EINVAL (a struct_size of 0, larger than the library's
 * or no size it had (status.h, "How structs grow"); bad source, manifest line, option; a masks root
 * that is not a folder, masks with a tar source, a bad channels or mask encoding; N
 * outside 1..65536, I >= N, an @p out for a set that is not a directory), DLC_ECANCELED, -ENOSPC
 * (disk full), -errno; for a set of all parts, also the join's refusals (dlc_set_join()).
 */
DLC_API dlc_status dlc_build(const char *const *sources, size_t nsources, const char *out,
                             const dlc_build_options *opts, dlc_build_report **report);

/** Free a report and everything it points to.
 *  @param[in] r A report from dlc_build(), or NULL. */
DLC_API void dlc_build_report_free(dlc_build_report *r);

#ifdef __cplusplus
}
#endif
#endif /* DLCACHE_BUILD_H */
