/* Private to cache/: the store writer used by the builder (cache/build_*.c).
 * It appends records in index order to a temporary LMDB file next to the
 * final path and, at finish, writes the metadata, syncs, trims and renames,
 * so that the final path holds either the previous store or a complete new
 * one (docs/FORMAT.md gives the layout).
 *
 * Thread safety: a writer belongs to one thread at a time. */
#ifndef DLCACHE_STORE_WRITER_H
#define DLCACHE_STORE_WRITER_H

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

/* Append record number w->count. Copies the payload into LMDB (MDB_RESERVE + memcpy of
 * header and payload). Commits a write txn every ~256 MiB or 4096 records. Grows the
 * map before it can fill. The label must be in 0..2^24-1 here and below num_labels at
 * finish; a raw payload must hold exactly height*width*channels bytes, and every record
 * shares the first record's encoding. A record refused for its arguments (DLC_EINVAL)
 * leaves the writer usable; after a write failure (disk full, I/O error) the writer only
 * accepts dlc__store_writer_abort() (finish then fails with DLC_ESTATE). */
dlc_status dlc__store_writer_put(dlc__store_writer *w, int64_t label, uint32_t height,
                                 uint32_t width, uint32_t channels, uint32_t encoding,
                                 const void *payload, size_t size);

/* Write meta (computes count, label_counts, content_digest, payload_bytes, uniform
 * height/width or 0), commit, mdb_env_sync(force), close env, trim the file to the pages
 * used, fsync the file, rename over FINAL, fsync the directory. On any failure: remove the
 * temp file and return the error. Frees w in every case. */
dlc_status dlc__store_writer_finish(dlc__store_writer *w, const dlc__store_meta *meta);

/* Remove the temp file and free w. Accepts NULL. */
void dlc__store_writer_abort(dlc__store_writer *w);

/* Records appended so far (the index the next put gets). */
uint64_t dlc__store_writer_count(const dlc__store_writer *w);

/* The temporary file's path (FINAL.tmp-PID), owned by w; for messages and tests. */
const char *dlc__store_writer_temp_path(const dlc__store_writer *w);

#endif /* DLCACHE_STORE_WRITER_H */
