/* The writer's state, shared by the two halves of the store writer: cache/store/store_writer.c (the
 * schema, the records and what finish writes about them) and cache/store/store_writer_file.c (the
 * file under them: paths, the LMDB environment, room on disk, transactions, the final seal).
 * Private to the store part (cache/store/). */
#ifndef DLCACHE_STORE_WRITER_IMPL_H
#define DLCACHE_STORE_WRITER_IMPL_H

#include "common.h"
#include "store_format.h"
#include "store_internal.h"
#include "store_set.h"

#include <lmdb.h>
#include <stdint.h>
#include <xxhash.h>

/* A write transaction is committed after this many payload bytes or records.
 * LMDB copies a transaction's dirty pages into the page cache at commit, on the
 * writer's thread; with 16 MiB commits that copy overlaps the workers' decoding
 * instead of stalling them behind one long commit (3000 demo images, 1 worker:
 * 552/609/493 images/s with 256 MiB commits, 647/782/616 with 16 MiB). It also
 * keeps LMDB's dirty-page list (MDB_IDL_UM_MAX pages) far from full. */
#define TXN_MAX_BYTES (16ull << 20)
#define TXN_MAX_RECORDS 4096u
/* Smallest map; also the slack added to every estimate of the map we need. */
#define MAP_MIN (64ull << 20)
/* JPEG quality of a field whose spec says 0. */
#define DEFAULT_QUALITY 90

/* What the writer learns about one field from the records appended. */
typedef struct field_stats {
    uint32_t dim0, dim1; /* Of the first record. */
    int uniform;         /* Every record so far has dim0, dim1. */
    uint32_t max_dim0, max_dim1;
    uint32_t min_dim0, min_dim1; /* Images: the smallest height and width, */
    uint64_t min_record0;        /* the first record of that height, */
    uint64_t min_record1;        /* and of that width. */
    uint64_t max_size;
} field_stats;

struct dlc_writer {
    char *final_path;            /* Where the store goes at finish. */
    char *temp_path;             /* FINAL.tmp-PID: ".tmp-" marks it as never a store. */
    uint64_t temp_dev, temp_ino; /* The file created there: what every later open of the path
                                    must find (a co-tenant may rename it and plant a link). */
    char *dir_path;              /* Directory of both, for statvfs and the final fsync. */
    int force;                   /* FINAL may be replaced; else the rename never replaces. */
    MDB_env *env;
    MDB_txn *txn; /* The open write transaction, or NULL. */
    MDB_dbi dbi_meta;
    MDB_dbi dbi_samples;
    uint64_t psize;     /* LMDB page size. */
    uint64_t mapsize;   /* Current map size. */
    uint64_t used;      /* File bytes used by committed transactions. */
    uint64_t pending;   /* Estimated file bytes of the open transaction. */
    uint64_t txn_bytes; /* Payload bytes in the open transaction. */
    uint32_t txn_records;
    uint64_t prealloc; /* Bytes reserved with fallocate (0: none). */
    int writemap;      /* MDB_WRITEMAP over blocks reserved for the whole map (create_file()). */
    int fd;            /* LMDB's file descriptor, for dlc__wfile_put_value()'s pwrite; -1: none. */
    int no_pwrite;     /* DLCACHE_WRITER_NO_PWRITE is set: copy through the map (benchmarks). */
    int no_flush;      /* DLCACHE_WRITER_NO_FLUSH is set: no early write-back (benchmarks). */
    uint64_t flushed;  /* File bytes whose write-back dlc__wfile_txn_commit() has started. */
    uint64_t size_hint;
    int failed;      /* A write failed: only abort is valid now. */
    int deferred;    /* The version 1 API: schema at the first record, labels checked at finish. */
    int auto_labels; /* num_labels = 0 with a LABEL field: "0".."K-1" named at finish. */

    int has_schema;
    uint32_t nf;
    uint64_t token; /* XXH3 of the schema as given: builders carry it to append. */
    uint32_t label_field;
    dlc_field fields[DLC_MAX_FIELDS];
    int quality[DLC_MAX_FIELDS];
    field_stats stats[DLC_MAX_FIELDS];

    char *labels; /* The "labels" value: names, each followed by NUL. */
    size_t labels_len;
    uint32_t num_labels;
    uint64_t skipped;
    char *build_json;
    uint64_t source_digest;

    uint64_t count;
    uint64_t payload_bytes;
    int64_t max_label;
    uint64_t max_label_index;
    uint64_t *label_counts;
    size_t label_cap;
    XXH3_state_t *digest; /* content_digest: 24 bytes per field per record. */

    int has_set_part; /* A part of a store set: finish writes "set_part" and may have no record. */
    uint8_t set_part[DLC__SET_PART_SIZE];

    /* Metadata keys of the caller's (dlc_writer_put_meta()): written by finish. */
    struct dlc__extra_meta {
        char key[32];
        uint8_t *data;
        size_t size;
    } * extra;
    uint32_t num_extra;
};

/* ---- The file (store_writer_file.c) ---------------------------------------------------------- */

/* An LMDB return code as a dlc_status: LMDB returns errno values as they are and its own codes
 * as negative numbers in its own range (a full map is -EFBIG). */
dlc_status dlc__wfile_lmdb_status(int rc);
/* The bytes LMDB will use in the file for one record of @p value_len bytes. */
uint64_t dlc__wfile_record_cost(const dlc_writer *w, uint64_t value_len);
/* A failed LMDB write as the message a user can act on (a full disk says so). */
dlc_status dlc__wfile_write_error(dlc_writer *w, int rc, const char *what);
/* Begin and commit the write transaction that records are appended in. */
dlc_status dlc__wfile_txn_begin(dlc_writer *w);
dlc_status dlc__wfile_txn_commit(dlc_writer *w);
/* Put the sealed record @p src of @p size bytes, number @p record, where mdb_put(MDB_RESERVE)
 * placed it (@p dst, in the map or in a dirty page of LMDB's). */
dlc_status dlc__wfile_put_value(dlc_writer *w, uint8_t *dst, const uint8_t *src, size_t size,
                                uint64_t record);
/* Make sure @p extra more bytes fit in the map: commit, grow (blocks reserved first under
 * MDB_WRITEMAP), begin again. */
dlc_status dlc__wfile_ensure_room(dlc_writer *w, uint64_t extra);
/* A writer with FINAL.tmp-PID created and its databases open, no schema yet. DLC_EEXIST when
 * FINAL exists and !force; -ENOSPC when @p size_hint cannot fit. */
dlc_status dlc__wfile_writer_create(const char *path, int force, uint64_t size_hint,
                                    dlc_writer **out);
/* Trim the file to @p used bytes, sync it, rename it over the final path, sync the directory. */
dlc_status dlc__wfile_seal_file(dlc_writer *w, uint64_t used);
/* Close the environment and remove the temporary file (after a failure); the caller frees. */
void dlc__wfile_remove_temp(dlc_writer *w);
/* Free @p w and everything it owns (an open transaction is aborted). */
void dlc__wfile_writer_free(dlc_writer *w);

#endif /* DLCACHE_STORE_WRITER_IMPL_H */
