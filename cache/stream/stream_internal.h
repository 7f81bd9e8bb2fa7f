/* Private to the stream part (cache/stream/stream_*.c): the pure planning pieces of the shard
 * cache (stream_plan.c: the schedule and its next uses, the choice of the shard to evict, the
 * accounting of a file's bytes), which the unit tests check alone, and the cache's state shared
 * by its files (stream_disk.c: the file system under the cache-wide lock; stream_cache.c: the
 * calls, the background downloads). */
#ifndef DLCACHE_STREAM_INTERNAL_H
#define DLCACHE_STREAM_INTERNAL_H

#include "stream_cache.h"
#include "warm_internal.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* The unit of the byte accounting: a file counts at least its size rounded up to this. */
#define DLC__SCACHE_BLOCK 4096u
/* No use ahead: a shard that no schedule names from now on. */
#define DLC__SCACHE_NEVER UINT64_MAX
/* The suffix of a download under way: NAME.PID.dlcs-tmp. */
#define DLC__SCACHE_TMP ".dlcs-tmp"
/* The cache-wide lock file in DIR. */
#define DLC__SCACHE_LOCK ".dlcs.lock"
/* The most records a streamed set may hold (2^36, twelve times LAION-5B): a plan walks each. */
#define DLC__SCACHE_MAX_RECORDS (1ull << 36)

/* ---- Pure pieces (stream_plan.c) ----------------------------------------------------------- */

/* @p size rounded up to DLC__SCACHE_BLOCK. */
uint64_t dlc__scache_round(uint64_t size);
/* The bytes a file counts: its allocated blocks, and never less than its rounded size. */
uint64_t dlc__scache_file_bytes(const struct stat *st);

/* Without a cache_limit, the free bytes of the cache's disk kept for the file system's own
 * blocks (a directory entry, an index block) when the cache fills it. */
#define DLC__SCACHE_FREE_MARGIN (256u << 10)

/* The schedule: entries in order, each consumed by the first acquire of its shard; the next use
 * of a shard is its first unconsumed entry. head/next_same make both O(1). */
typedef struct dlc__scache_plan {
    uint32_t *sched; /* n shard numbers. */
    size_t n;
    size_t *next_same; /* n: the next entry with the same shard, or n. */
    size_t *head;      /* num_shards: the shard's first unconsumed entry, or n. */
    uint8_t *consumed; /* n flags. */
    size_t cursor;     /* Every entry before it is consumed. */
    uint32_t num_shards;
} dlc__scache_plan;

/* Build @p p for @p n entries of @p sched (each < num_shards; copied). -ENOMEM. Frees the plan
 * @p p held before (a zeroed plan holds nothing). */
dlc_status dlc__scache_plan_set(dlc__scache_plan *p, uint32_t num_shards, const uint32_t *sched,
                                size_t n);
void dlc__scache_plan_free(dlc__scache_plan *p);
/* The next use of shard @p k: the index of its first unconsumed entry, or DLC__SCACHE_NEVER. */
uint64_t dlc__scache_plan_next(const dlc__scache_plan *p, uint32_t k);
/* An acquire of @p k: consume its first unconsumed entry (none: nothing changes). */
void dlc__scache_plan_consume(dlc__scache_plan *p, uint32_t k);

/* One file the cache may evict, as a scan found it. */
typedef struct dlc__scache_cand {
    uint64_t next_use; /* DLC__SCACHE_NEVER for unscheduled shards and other sets' shards. */
    uint64_t bytes;    /* What it counts (dlc__scache_file_bytes()). */
    uint64_t ino;      /* Its inode when scanned: eviction removes that file only. */
    uint32_t folder;   /* Index into the scan's folders. */
    uint32_t shard;    /* Its number in that folder's index. */
    int skip;          /* Pinned (by this process, or a lock another holds) or gone. */
} dlc__scache_cand;

/* The candidate to evict for a download: the one not skipped with the furthest next use (ties:
 * the larger file, then the first found), among those whose next use is at or after @p after.
 * A download ahead of need, at schedule entry p, passes p + 1, so that it never evicts a shard
 * needed before it; a shard an acquire waits for passes 0. Returns its index, or @p n when none
 * may go. */
size_t dlc__scache_pick_victim(const dlc__scache_cand *v, size_t n, uint64_t after);

/* ---- The cache ------------------------------------------------------------------------------ */

/* Flags of a shard in this process (dlc__scache.flags). */
enum {
    DLC__SC_FETCHING = 1u << 0,  /* One of our threads is downloading it. */
    DLC__SC_ELSEWHERE = 1u << 1, /* Another process is downloading it (a live temporary file). */
    DLC__SC_FAILED = 1u << 2,    /* Our download failed; err holds why until the acquires waiting
                                    for it have all taken it. */
    DLC__SC_PRESENT = 1u << 3,   /* Published, as our last look at the folder saw it (a hint). */
    DLC__SC_REFUSED = 1u << 4,   /* Its download failed (refused as damaged, or given up): never
                                    fetched ahead again; only an acquire waiting for it fetches it
                                    again. */
};

/* A set's shard names sorted, to find a file's shard by name. */
typedef struct dlc__scache_names {
    uint64_t set_id;
    uint32_t n;
    char (*names)[DLC__SET_NAME_SIZE]; /* n names, sorted with strcmp. */
    uint32_t *shard;                   /* n: the shard number of each. */
    uint64_t *file_bytes;              /* n: the index's size of each. */
} dlc__scache_names;

/* What a scan of DIR found (stream_disk.c). */
typedef struct dlc__scache_scan {
    uint64_t usage;          /* Bytes of every file the cache wrote. */
    dlc__scache_cand *cands; /* Evictable files, cap entries allocated. */
    size_t ncand, cap;
    uint64_t *folders; /* The set_id of each folder with candidates, nfold of them. */
    size_t nfold, fcap;
} dlc__scache_scan;

struct dlc__scache {
    char *dir;       /* The cache directory. */
    char *url;       /* The set's URL without a trailing '/'. */
    char *shown;     /* The same, redacted: for messages. */
    char *set_dir;   /* DIR/SETID. */
    char *lock_path; /* DIR/.dlcs.lock. */
    int dir_fd;      /* DIR, open (DIR itself may be a link: the user named it). */
    int set_fd;      /* DIR/SETID, opened relative to dir_fd without following a link: every
                        file of the set is created, renamed and removed relative to it. */
    uint64_t limit;  /* 0: none. */
    dlc_warm_options net;
    char *endpoint, *region; /* net's strings, copied. */
    int curl_inited;

    dlc__set_index x;
    uint64_t index_bytes; /* The index file's counted bytes. */
    uint8_t *index_buf;   /* Its bytes, index_len of them. */
    size_t index_len;
    char **paths;              /* num_shards: DIR/SETID/NAME. */
    dlc__warm_object **probed; /* num_shards: the server's answer about the shard's object,
                                  kept from its probe to its download; NULL: not probed. Only
                                  the worker downloading the shard touches its entry. */
    dlc__scache_names names;   /* Ours, sorted. */
    dlc__scache_names *other;  /* Other sets' names met in DIR, nother of them. */
    size_t nother;

    /* The file system side. fs_mu makes this process's threads take the cache-wide flock one
     * at a time (a flock belongs to the open file, which they share).
     * Lock order: the loader's l->mu (loader/internal.h: held around dlc__scache_schedule() and
     * dlc__scache_release()), then fs_mu (with the flock), then mu, then log_mu. Nothing here
     * calls into the loader; dlc__scache_acquire() drops mu before it takes fs_mu. */
    pthread_mutex_t fs_mu;
    int lock_fd;   /* DIR/.dlcs.lock; DIR itself where it is read-only and has none. */
    int read_only; /* DIR cannot be written by this process: only shards already there are read. */
    dlc__scache_scan scan;
    int free_noted;    /* The log said once that a disk short of free space acts as the limit. */
    uint8_t *seen_tmp; /* num_shards: the scan found another process's live temporary file. */
    /* num_shards, under mu: of that file, the PID its name gives, a digest of its inode, size
     * and times, and since when (dlc__now_s()) the scans have seen that digest unchanged; 0:
     * no such file. An acquire stops waiting for a download elsewhere that does not move. */
    long *tmp_pid;
    uint64_t *tmp_sig;
    double *tmp_since;

    /* The state, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* Broadcast on every change a waiter or a worker may wait for. */
    pthread_mutex_t log_mu;
    dlc__scache_plan plan;
    uint8_t *flags;        /* num_shards DLC__SC_*. */
    uint32_t *pins;        /* num_shards: acquires not yet released. */
    int *pin_fd;           /* num_shards: the file open with LOCK_SH, or -1. */
    uint32_t *want;        /* num_shards: acquires waiting for it. */
    dlc_status *err_rc;    /* num_shards: with DLC__SC_FAILED, the failure, */
    char **err_msg;        /* and its message (malloc'd). */
    uint64_t pinned_bytes; /* Counted bytes of the shards with pin_fd >= 0. */
    uint64_t gen;          /* Bumped on each change: a blocked worker waits for the next. */
    uint32_t reserving;    /* Workers between picking a shard and having its room (or not). */
    uint64_t blocked_at;   /* The schedule entry whose download ahead found no room at */
    uint64_t blocked_gen;  /* this gen: no later entry is picked until something changes. */
    uint64_t seen_usage;   /* The folder's bytes at the last reservation's scan. */
    uint64_t disk_free;    /* Without a cache_limit: the disk's free bytes when room_limit() last
                              found them too few for a shard; 0: never. */
    double stuck_since;    /* Since when a shard an acquire waits for has found no room while */
    uint64_t stuck_usage;  /* the folder held these bytes (nothing moved); 0: not stuck. */
    int stop;
    /* The caller's progress callback (cfg->net's), asked too by every download: how a binding
     * stops them from outside (Ctrl-C in Python), as close() does with stop (issue 23). */
    dlc_warm_progress_fn user_progress;
    void *user_progress_user;
    pthread_t *threads;
    uint32_t nthreads;
    uint32_t next_thread;         /* The number the next download thread to start takes. */
    int joined;                   /* dlc__scache_join() joined the threads. */
    dlc__scache_observer observe; /* dlc__scache_observe(); under mu. */
    void *observe_user;
    dlc__scache_stats st;
};

/* ---- The file system side (stream_disk.c); each call takes the cache-wide lock itself ------- */

/* The lock: fs_mu, then flock(LOCK_EX) on DIR/.dlcs.lock, waited for at most
 * dlc__scache_lock_timeout() seconds (-ETIMEDOUT naming the lock file and its holder) and never
 * past dlc__scache_canceled() (DLC_ECANCELED). */
dlc_status dlc__scache_fs_lock(dlc__scache *c);
/* The bound of a wait for the cache-wide lock: the network options' timeout_s. */
double dlc__scache_lock_timeout(const dlc__scache *c);
/* The bound of a wait for another process's download of a shard (its temporary file, locked by
 * it): as long as the file shows no change, timeout_s * (max_retries + 1) seconds, the longest
 * its own requests may go without a byte. */
double dlc__scache_elsewhere_timeout(const dlc__scache *c);
/* 1 when a wait must end now: the cache is closing, or the caller's progress callback says stop
 * (Ctrl-C in Python). Takes mu: call without it. */
int dlc__scache_canceled(dlc__scache *c);
void dlc__scache_fs_unlock(dlc__scache *c);

/* A digest of a temporary file's inode, size and times: a download at work changes it. */
uint64_t dlc__scache_tmp_sig(const struct stat *st);

/* Scan DIR (lock held): count every file of the cache, list the evictable shards, remove the
 * temporary files whose process is dead, and refresh our shards' DLC__SC_PRESENT and
 * seen_tmp. */
dlc_status dlc__scache_scan_dir(dlc__scache *c);

/* Outcome of dlc__scache_reserve() besides failures. */
enum {
    DLC__SC_RESERVED = 0, /* *fd is the temporary file, locked and allocated. */
    DLC__SC_IS_PRESENT = 1,
    DLC__SC_IS_ELSEWHERE = 2,
    DLC__SC_NO_ROOM = 3, /* Nothing more may be evicted for it now. */
};

/* Make room for shard @p k, evicting only shards whose next use is at or after @p after (see
 * dlc__scache_pick_victim()), and create its temporary file named @p tmp in the set's folder
 * (new, locked, allocated to the shard's size). Returns a failure, DLC__SC_RESERVED (*fd set)
 * or another DLC__SC_* outcome. */
dlc_status dlc__scache_reserve(dlc__scache *c, uint32_t k, uint64_t after, const char *tmp,
                               int *fd);
/* Publish the verified temporary file named @p tmp in the set's folder (open as @p fd, closed
 * here) as shard @p k; pin it for the acquires waiting for it. */
dlc_status dlc__scache_publish(dlc__scache *c, uint32_t k, const char *tmp, int fd);
/* Pin shard @p k if it is published: *fd the file open with LOCK_SH, or -1 when it is not. */
dlc_status dlc__scache_try_pin(dlc__scache *c, uint32_t k, int *fd);
/* At open: keep the index @p buf at DIR/SETID/index.dlcset, replacing a different one (and the
 * shards it does not describe). */
dlc_status dlc__scache_put_index(dlc__scache *c, const uint8_t *buf, size_t len);

/* Build @p out from index @p x. -ENOMEM. */
dlc_status dlc__scache_names_make(const dlc__set_index *x, dlc__scache_names *out);
void dlc__scache_names_free(dlc__scache_names *n);
/* The shard named @p name, or UINT32_MAX. */
uint32_t dlc__scache_names_find(const dlc__scache_names *n, const char *name);

/* Send a notice to the log of the options, one call at a time. */
void dlc__scache_log(dlc__scache *c, dlc_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* DLCACHE_STREAM_INTERNAL_H */
