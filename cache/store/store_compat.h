/* Private to the store part (cache/store/): the writer API of stores of one image and one label
 * per record, kept for the tests (the builder writes through the public writer). It runs on the
 * public writer (include/dlcache/writer.h, cache/store/store_compat.c) and writes
 * format version 2 stores of two fields: "image" (the encoding and channels of
 * the first record; VARIABLE, made fixed at finish when every record has one
 * size) and "label" (int, DLC_FIELD_LABEL). Records go in index order to a
 * temporary LMDB file next to the final path; finish writes the metadata,
 * syncs, trims and renames, so that the final path holds either the previous
 * store or a complete new one (docs/FORMAT.md gives the layout).
 *
 * Thread safety: a writer belongs to one thread at a time. */
#ifndef DLCACHE_STORE_COMPAT_H
#define DLCACHE_STORE_COMPAT_H

#include <dlcache/store.h>

#include <stddef.h>
#include <stdint.h>

typedef struct dlc__store_writer dlc__store_writer;

typedef struct dlc__store_meta {
    const char *const *label_names; /* num_labels names (UTF-8, no NUL inside) */
    uint32_t num_labels;
    uint64_t skipped;       /* items the builder skipped */
    const char *build_json; /* "build" meta value, may be NULL */
    uint64_t source_digest; /* written as 16 hex chars */
} dlc__store_meta;

/* Create FINAL.tmp-PID next to FINAL. DLC_EEXIST when FINAL exists and !force.
 * size_hint: expected total payload bytes (0 = unknown), used to size the map and
 * reserve disk space up front (fallocate with FALLOC_FL_KEEP_SIZE) so a full disk is
 * reported as -ENOSPC "...: disk full: need about X, Y free" instead of LMDB's EIO. */
dlc_status dlc__store_writer_open(const char *final_path, int force, uint64_t size_hint,
                                  dlc__store_writer **out);

/* Append record number w->count (a record builder lays it out, the writer copies it into
 * LMDB). Commits a write txn every 16 MiB or 4096 records. Grows the map before it can
 * fill. The label must be in 0..2^24-1 here and below num_labels at finish; a raw payload
 * must hold exactly height*width*channels bytes, a JPEG or PNG one must have a header of
 * height x width pixels, and every record shares the first record's encoding and channels
 * (1, 3 or 4). A record refused for its arguments (DLC_EINVAL) leaves the writer usable;
 * after a write failure (disk full, I/O error) the writer only accepts
 * dlc__store_writer_abort() (finish then fails with DLC_ESTATE). */
dlc_status dlc__store_writer_put(dlc__store_writer *w, int64_t label, uint32_t height,
                                 uint32_t width, uint32_t channels, uint32_t encoding,
                                 const void *payload, size_t size);

/* Write meta (schema, offset table, label names and counts, content digest, build JSON,
 * source digest unless 0), commit, mdb_env_sync(force), close env, trim the file to the
 * pages used, fsync the file, rename over FINAL, fsync the directory. A store of no record
 * is allowed here. On any failure: remove the temp file and return the error. Frees w in
 * every case. */
dlc_status dlc__store_writer_finish(dlc__store_writer *w, const dlc__store_meta *meta);

/* Remove the temp file and free w. Accepts NULL. */
void dlc__store_writer_abort(dlc__store_writer *w);

/* Records appended so far (the index the next put gets). */
uint64_t dlc__store_writer_count(const dlc__store_writer *w);

/* The temporary file's path (FINAL.tmp-PID), owned by w; for messages and tests. */
const char *dlc__store_writer_temp_path(const dlc__store_writer *w);

#endif /* DLCACHE_STORE_COMPAT_H */
