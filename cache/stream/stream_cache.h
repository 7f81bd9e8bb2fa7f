/* Private to the library: the bounded shard cache of streaming (issue 19). A store set that
 * dlc_warm_push() put on S3, GCS or behind https is read shard by shard through a local cache
 * directory that never holds more than a byte limit. The loader (its epoch order and its
 * readers) is the one caller; it tells the cache the order in which it will need the shards
 * (the schedule), pins a shard while it reads it, and releases it after.
 *
 * On disk, in the cache directory DIR:
 *   DIR/.dlcs.lock              the cache-wide lock (empty; flock held briefly for each
 *                               accounting step: scan, eviction, reservation, publishing);
 *   DIR/SETID/index.dlcset      a set's index, SETID its set_id as 16 hex digits;
 *   DIR/SETID/NAME              a shard the cache downloaded and verified, NAME the index's;
 *   DIR/SETID/NAME.PID.dlcs-tmp a download under way by process PID (flock'ed LOCK_EX while
 *                               its process lives; a later scan removes the ones whose lock it
 *                               can take).
 * Once every shard is there, DIR/SETID is an ordinary local set that dlc_store_open() opens.
 *
 * The byte cap: the cache counts every regular file it wrote in DIR (indexes, shards, temporary
 * files) at its allocated size (st_blocks, and never less than the size rounded up to 4 KiB),
 * and reserves a shard's bytes before downloading it: under the cache-wide lock it scans DIR,
 * evicts until the shard fits, then creates the temporary file and posix_fallocate()s it to the
 * shard's size, so that every process sharing DIR sees the reservation in the file system.
 * Directories and files the cache did not write are neither counted nor ever removed; only the
 * shards named by the index of a DIR/SETID folder are evicted.
 *
 * Eviction follows the schedule (Belady): first a shard that no schedule of this process names
 * from now on (also every shard of another set), then the one whose next use is furthest away.
 * A download ahead of need never evicts a shard needed before it; a shard an acquire waits for
 * may evict any unpinned one. A pin is a shared flock on the published file, so pins are seen by
 * every process; eviction takes LOCK_EX|LOCK_NB first and skips what it cannot lock.
 *
 * Processes sharing DIR download each shard once: a process that finds another's live temporary
 * file for a shard waits for it to be published. Everything they share is in the file system
 * and guarded by flock locks, which die with their process: a process killed at any point
 * leaves nothing that the next one cannot clean up, and a shard is published (renamed to NAME)
 * only after its size, its content digest and set position against the index and every record's
 * checksum (dlc_store_verify()) passed.
 *
 * Downloads run on the warm part's transfer engine (dlc__warm_probe(), dlc__warm_fetch()) with
 * the retries, timeouts, endpoint and credentials of dlc_warm(), on background threads the
 * cache owns. */
#ifndef DLCACHE_STREAM_CACHE_H
#define DLCACHE_STREAM_CACHE_H

#include "store_set.h"

#include <dlcache/status.h>
#include <dlcache/warm.h>

#include <stddef.h>
#include <stdint.h>

/* An open cache of one store set. Thread-safe: every call but close may come from any thread
 * at any time. */
typedef struct dlc__scache dlc__scache;

/* How to open it. Strings and options are copied at open (not retained). */
typedef struct dlc__scache_config {
    const char *dir; /* The cache directory; made, with missing parents, if missing. */
    uint64_t limit;  /* Hard cap in bytes over every file the cache writes in dir, temporary
                        files included; 0: no cap (nothing is ever evicted). */
    const char *url; /* The set: s3://bucket/prefix, gs://bucket/prefix or http(s)://.../prefix,
                        the "directory" holding index.dlcset and the shards. */
    const dlc_warm_options *net; /* Endpoint, region, connections per download, chunk size,
                                    retries, timeouts, TLS, log; NULL: dlc_warm_options_init().
                                    Its progress callback is not used. The log callback is kept
                                    and called from the cache's threads, one call at a time. */
    uint32_t downloads;          /* Shards this process downloads at once (its background threads);
                                    0: 2. */
    /* For the fuzzer and tests only: the index's bytes, taken instead of fetching
     * URL/index.dlcset (nothing else is fetched until a shard is needed). NULL: fetch it. */
    const uint8_t *index;
    size_t index_len;
    /* For planning (dlc_loader_plan(), cacheinfo --plan): fetch and check the index only;
     * nothing in dir is made, written, locked or removed, and no download thread starts. Only
     * dlc__scache_index(), dlc__scache_index_bytes() and dlc__scache_close() may be called. */
    int plan_only;
} dlc__scache_config;

/* What the cache did in this process since open. */
typedef struct dlc__scache_stats {
    double stall_s;         /* Seconds acquire() spent waiting for a shard, over all threads. */
    uint64_t hits;          /* Acquires that found their shard published. */
    uint64_t misses;        /* Acquires that had to wait for it. */
    uint64_t bytes_fetched; /* Payload bytes received (index included, retried bytes counted). */
    uint64_t requests;      /* HTTP requests sent (probes, ranged GETs, retries). */
    uint64_t peak_bytes;    /* The largest usage of DIR seen by a scan of this process, with the
                               reservation it was making. */
    uint64_t evictions;     /* Shards this process evicted. */
    uint64_t downloads;     /* Shards this process downloaded and published. */
} dlc__scache_stats;

/* Open the cache of the set at cfg->url in cfg->dir: fetch URL/index.dlcset (every open: it is
 * small, and a set rebuilt under the same URL must be noticed), decode it, and keep it at
 * DIR/SETID/index.dlcset (replaced when its bytes differ; the shards there that the new index
 * does not describe by size and content digest are removed first). Removes the temporary files
 * of dead processes and starts the background downloads (idle until dlc__scache_schedule() or
 * an acquire gives them work).
 * @param[out] out The cache; free with dlc__scache_close().
 * @return DLC_OK; DLC_EINVAL (a missing field, a limit below what the index and the largest
 *         shard need: the message gives the bytes needed); DLC_EHTTP, DLC_ENETWORK (the index
 *         could not be fetched; the message names its URL); DLC_ECORRUPT, DLC_EVERSION (the
 *         index is not one); -errno from the file system. Detail in dlc_errmsg(). */
dlc_status dlc__scache_open(const dlc__scache_config *cfg, dlc__scache **out);

/* A caller's net options (config.net of a loader, a token loader or a plan), taken at open as
 * any options are (status.h: checked, read at the caller's own struct_size) into @p copy, and
 * *@p net pointed at it, on a local path as on a URL; NULL stays NULL. @p what names the field
 * in the message. The copy lives as long as the open that reads it; nothing keeps it after. */
dlc_status dlc__scache_net_take(const dlc_warm_options **net, dlc_warm_options *copy,
                                const char *what);

/* The set's decoded index: shard names, counts, firsts, bytes, digests, schema. Owned by the
 * cache, read-only, valid until dlc__scache_close(). Cannot fail. */
const dlc__set_index *dlc__scache_index(const dlc__scache *c);

/* The index's bytes, as fetched (@p *len of them): owned by the cache, valid until
 * dlc__scache_close(). Cannot fail. */
const uint8_t *dlc__scache_index_bytes(const dlc__scache *c, size_t *len);

/* DIR/SETID, the set's folder: owned by the cache, valid until dlc__scache_close(). Once every
 * shard is there it is an ordinary local set. Cannot fail. */
const char *dlc__scache_set_dir(const dlc__scache *c);

/* Replace the schedule: the shard numbers in the order this process will need them from now
 * on, repeats allowed (a shard needed again later appears again). The background threads
 * download along it as far as the cap allows, and eviction follows it. Each acquire consumes
 * the first occurrence of its shard that no earlier acquire consumed; entries before the first
 * unconsumed one are the past. @p shards is copied (not retained).
 * @return DLC_OK; DLC_EINVAL (a shard number >= the index's num_shards, or NULL with n > 0);
 *         -ENOMEM. Thread-safe. */
dlc_status dlc__scache_schedule(dlc__scache *c, const uint32_t *shards, size_t n);

/* Block until shard @p k is downloaded, verified and published in the set's folder, and pin it:
 * it is not evicted by this or any other process sharing DIR until the matching release.
 * Pins nest (acquire twice, release twice). A shard published when asked for is a hit; one
 * that had to be waited for is a miss, and the wait counts in stall_s.
 * @param[out] path DIR/SETID/NAME; owned by the cache, valid until dlc__scache_close() (the
 *        file stays while pinned).
 * @return DLC_OK; DLC_EINVAL (k out of range); DLC_ECORRUPT (the bucket's shard is not the one
 *         the index names: size, content digest, set position or a record checksum; the message
 *         names the URL, the shard and both values; nothing was published); DLC_EHTTP,
 *         DLC_ENETWORK (the download failed after its retries; the message names the URL);
 *         DLC_ESTATE (the shard cannot fit beside the shards this process has pinned: the
 *         message gives the bytes); -EDEADLK (no room came for it in 10 s while nothing in the
 *         folder moved: other processes sharing it pin the rest and wait too, so the limit was
 *         planned for fewer processes than share it; the message gives the bytes); -ENOSPC
 *         (the same with no limit set: the disk had too little free for 10 s; the message gives
 *         its free bytes); DLC_ECANCELED (the cache is being closed); -errno from the file
 *         system. A failed acquire pins nothing; the next
 * acquire of @p k tries again. Thread-safe; the error's detail is in the calling thread's
 * dlc_errmsg(). */
dlc_status dlc__scache_acquire(dlc__scache *c, uint32_t k, const char **path);

/* Undo one acquire of shard @p k. When its last pin goes, the shard becomes evictable (it stays
 * on disk until space is needed). Releasing a shard that is not pinned is ignored. Thread-safe. */
void dlc__scache_release(dlc__scache *c, uint32_t k);

/* The counters so far, into @p st. Thread-safe; cannot fail. */
void dlc__scache_stats_get(const dlc__scache *c, dlc__scache_stats *st);

/* Make every download under way end (canceled) and every dlc__scache_acquire() return
 * DLC_ECANCELED now, without waiting for anything: the first step of closing, so that threads
 * waiting on the cache can be joined before dlc__scache_close(). Accepts NULL. */
void dlc__scache_stop(dlc__scache *c);

/* What a download thread tells an observer of each download that ended (published, or failed:
 * the probe, the fetch or the checks; not one canceled by closing), by its number @p thread in
 * 0..dlc__scache_threads() - 1: shard @p k, the shard's bytes (0 for a failure), whether it was
 * fetched ahead of need (1) or for an acquire that waited for it (0), its outcome @p rc, and when
 * it began and ended (dlc__now_ns()). Called on that thread with the cache's lock held: it must
 * take no lock and call nothing of the cache (the loader's trace writes a ring that thread owns).
 */
typedef void (*dlc__scache_observer)(void *user, uint32_t thread, uint32_t k, uint64_t bytes,
                                     int ahead, dlc_status rc, uint64_t t0, uint64_t t1);

/* Tell @p fn (with @p user) of every download that ends from now on; NULL: none. Before the
 * first schedule or acquire, every download is told. Thread-safe. */
void dlc__scache_observe(dlc__scache *c, dlc__scache_observer fn, void *user);

/* The number of download threads (cfg->downloads, or 2); 0 for a plan-only cache. */
uint32_t dlc__scache_threads(const dlc__scache *c);

/* Stop (dlc__scache_stop()) and join the download threads: no observer call follows. Once;
 * later calls, and dlc__scache_close()'s, return at once. Accepts NULL. Not thread-safe
 * against itself or dlc__scache_close(). */
void dlc__scache_join(dlc__scache *c);

/* Stop the background downloads (a download under way is canceled and its temporary file
 * removed), drop every pin, free. The published files stay for the next run. Accepts NULL.
 * No other call on @p c may run or follow. */
void dlc__scache_close(dlc__scache *c);

/* The bytes a cache must be able to hold so that @p pinned shards, of the largest sizes, can be
 * pinned at once while @p ahead more are downloading (their temporary files counted), with the
 * index beside them; each file at its size rounded up to 4 KiB, as the cache counts it. For the
 * loader's check at open and the plan command. Cannot fail; 0 for an index it cannot encode. */
uint64_t dlc__scache_needed(const dlc__set_index *x, uint32_t pinned, uint32_t ahead);

#endif /* DLCACHE_STREAM_CACHE_H */
