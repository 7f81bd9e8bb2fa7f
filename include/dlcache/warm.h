/**
 * @file warm.h
 * @brief Fill a node's local SSD with a store from object storage: S3, Google
 *        Cloud Storage or a plain (possibly pre-signed) https URL.
 *
 * dlc_warm() downloads one object with parallel ranged GETs (libcurl's multi
 * interface) into a preallocated temporary file beside the destination, each
 * chunk written at its own offset. The byte ranges of completed chunks are
 * journaled and synced, so a rerun after a crash, SIGKILL or a network failure
 * fetches only the bytes that are missing, whatever its chunk size and number
 * of connections, provided the object is unchanged (same size and ETag);
 * otherwise it starts over. After the last byte it checks the size, verifies
 * every record of the store (dlc_store_verify()) unless ::DLC_WARM_NO_VERIFY,
 * syncs and renames into place, then syncs the directory. Nothing half-copied
 * ever carries the destination's name.
 *
 * Files beside DEST (all in the destination's directory):
 *   - `DEST.lock`: an flock(2) lock file. Several processes (the ranks of one
 *     node) may warm the same destination at once: one downloads, the others
 *     wait for the lock and return success once the first has published.
 *     The lock file stays behind; deleting it while nobody holds it is safe.
 *     The holder touches it (its mtime) every second while it works; a waiter
 *     tries the lock (every 1 to 50 ms), ends on the progress callback (DLC_ECANCELED)
 *     and gives up with -ETIMEDOUT, naming the lock file and its holder, once
 *     it has not been touched for timeout_s * (max_retries + 1) seconds.
 *   - `DEST.warm-part` and `DEST.warm-journal`: the partial download and its
 *     journal; removed after publishing.
 *   - `DEST.warm`: a small text sidecar recording the source (URL without its
 *     query string), size and ETag of the published file. When it matches the
 *     object and DEST, dlc_warm() returns at once without downloading.
 *
 * Store sets (docs/FORMAT.md, "Store sets"): when URL names no object but URL/index.dlcset
 * exists, URL is a set and DEST becomes its directory. The index is fetched first, to
 * DEST/index.dlcset.warm-new, and decoded by the library's own reader; the shards are fetched in
 * parallel, each exactly as a single store above (its own journal, resume, verification and
 * atomic publishing, as DEST/NAME), with the connections split among them; each is checked
 * against the index (size, content digest); then the index is published last (rename,
 * directory sync) and the set is opened once as a whole. A new version over an older set keeps
 * the older one whole and readable until the new one is in: a shard whose name the older index
 * holds is fetched to DEST/NAME.warm-next (each shard carries its set's set_id, so a new
 * version's shard is another file even where its records are the same), and once every shard
 * is fetched and checked, the older index is removed, the staged shards renamed to their names and
 * the new index published (DEST is no set only for those renames, never a set whose shards disagree
 * with its index; a rerun after a kill there finishes the moves; a rerun that finds DEST current
 * again, the server having gone back to it, removes the staged files; the older version's shards
 * the new index does not name are removed once it is in, each only when its sidecar says it is
 * the file cachewarm published there from this URL). Both versions' shards
 * must fit on the disk at once: that is checked before a byte is fetched (-ENOSPC, naming the bytes
 * needed and free; remove DEST to warm the new version in its place). DEST.lock and DEST.warm work
 * as for a file, so the ranks of a node fetch a set once. The set's directory holds the set's files
 * alone: the locks, resume journals and sidecars of its shards and of its index are kept in one
 * folder beside it, `DEST.warm-set/` (NAME.lock, NAME.warm-journal, NAME.warm); only the partial
 * files of a fetch under way are inside DEST (NAME.warm-part, NAME.warm-next,
 * index.dlcset.warm-new), since each is published by a rename in DEST's directory. DEST.warm-set/
 * stays after the fetch: its sidecars let a rerun of a fetch cut short keep the shards it
 * finished. Deleting it while nobody warms the set is safe; the next fetch then downloads every
 * shard again. For a set, the log callback runs on the threads fetching
 * the shards, one call at a time. An https URL's query string (a token valid for the set's prefix)
 * stays on every object's URL, after the object's name (URL/index.dlcset?QUERY).
 *
 * DEST's directory is opened once, before anything is created, and checked: a directory, not a
 * symbolic link (-ELOOP or DLC_EINVAL naming it; its owner is not checked, so a folder a group
 * shares works); a set's DEST/ and DEST.warm-set/ likewise. Every file above is created, renamed
 * and removed relative to those open directories, so renaming one of them during the call, or
 * swapping it for a link, does not move the call's work elsewhere (docs/SECURITY.md).
 *
 * An object made by dlc_warm_push() carries metadata saying so (x-amz-meta-dlcache-part-size,
 * GCS's metadata), and its ETag (S3) or x-goog-hash md5 (GCS) is then the MD5 of its bytes (or
 * S3's MD5 of its parts' MD5s, "-N"): the downloaded file is hashed, on one thread per core, and
 * compared before publishing (DLC_ECORRUPT when it differs).
 *
 * Sources and credentials (read from the environment at each call):
 *   - `s3://BUCKET/KEY`: AWS Signature V4 by libcurl with AWS_ACCESS_KEY_ID,
 *     AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (anonymous requests when no
 *     key is set). Region: dlc_warm_options::region, else AWS_REGION, else
 *     AWS_DEFAULT_REGION, else us-east-1. Endpoint: dlc_warm_options::endpoint,
 *     else AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL; a custom endpoint is
 *     addressed path-style (ENDPOINT/BUCKET/KEY), AWS itself virtual-host style
 *     (https://BUCKET.s3.REGION.amazonaws.com/KEY).
 *   - `gs://BUCKET/OBJECT`: the JSON API's media download with a bearer token
 *     from GOOGLE_OAUTH_ACCESS_TOKEN, else from the GCE metadata server
 *     (GCE_METADATA_HOST overrides metadata.google.internal), else anonymous.
 *     Endpoint: dlc_warm_options::endpoint, else DLCACHE_GCS_ENDPOINT, else
 *     https://storage.googleapis.com.
 *   - `https://...` (and `http://...`): public or pre-signed URLs, as given.
 *
 * Secrets never leave the library: error messages, log lines and results name
 * URLs with their query string replaced by "?REDACTED" and never contain keys,
 * tokens or Authorization headers. TLS peers are verified unless
 * ::DLC_WARM_INSECURE, against the system's CAs, or those of the PEM bundle
 * CURL_CA_BUNDLE (else SSL_CERT_FILE) names (a private or test CA).
 *
 * How long a request may take (the budget that no server can stretch without end; the same for
 * dlc_warm(), dlc_warm_push() and the streaming loader, whose downloads run on one engine):
 *   - timeout_s and connect_timeout_s are 0 (the default) or seconds from 0.1 to 86400; anything
 *     else (0.0009, NaN, infinities, negatives) is DLC_EINVAL, naming the value and the bounds.
 *     libcurl counts its low-speed time in whole seconds and reads a connect timeout of 0 ms as
 *     "its default", so a smaller value turned both checks off; values are rounded up to whole
 *     seconds for the low-speed check.
 *   - A connection that moves fewer than 1 KiB a second for timeout_s (silence included) is cut
 *     and retried ("Operation too slow"): a server that trickles a few bytes a second fails the
 *     attempt, not only one that says nothing. (CompleteMultipartUpload, which S3 may keep alive
 *     for minutes with a space now and then, is cut after timeout_s of silence, or when it has
 *     taken 20 x timeout_s in all: 10 minutes by default.)
 *   - max_retries counts the failed attempts of a transfer (a chunk's missing bytes, the probe,
 *     a request of the push) in a row. An attempt that brought 64 KiB or more of a chunk starts
 *     the count over, one that brought less does not: a server that sends a byte per connection
 *     runs out of attempts after max_retries + 1 of them, and a chunk of C bytes can be started
 *     over at most C / 64 KiB times, so every transfer ends.
 *   - Of an answer whose status is not 2xx, the first 4 KiB are kept for the message and no more
 *     is read: the attempt is judged (retried for 5xx, 408 and 429, else failed) as soon as they
 *     are in, however long the server would go on. A push's answer is read up to 16 MiB, the
 *     body of a redirect that an https source follows (libcurl reads it and drops it) 64 KiB.
 *   - Each retry is a notice on the log callback, at most 3 per connection in 10 seconds; the
 *     next one shown after some were held back says how many.
 *   - Messages say what an answer was: a redirect that is not followed, and where it pointed
 *     (redacted; s3:// and gs:// sources never follow redirects, https ones follow up to 5); a
 *     response header larger than libcurl accepts (100 KiB) rather than "out of memory".
 *
 * Errors: DLC_OK; DLC_EINVAL (bad URL or option); DLC_EHTTP (the server
 * refused: 403, 404, 416...; dlc_errmsg() names the URL and what the server
 * said, such as S3's error Code and Message); DLC_ENETWORK (retries exhausted
 * on timeouts, resets or 5xx); DLC_ECHANGED (the object changed during the
 * download; a rerun starts over); DLC_ECORRUPT (size, Content-Range or a
 * record checksum disagree); DLC_ECANCELED (the progress callback said stop;
 * the partial download is kept for a rerun); -errno from the file system
 * (-ENOSPC when the destination is full; the partial file is then removed).
 */
#ifndef DLCACHE_WARM_H
#define DLCACHE_WARM_H

#include <dlcache/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** dlc_warm_options::flags. */
enum dlc_warm_flags {
    /** Skip dlc_store_verify() before publishing (for objects that are not
     *  stores, or when the caller verifies itself). Sizes are still checked. */
    DLC_WARM_NO_VERIFY = 1u << 0,
    /** Do not verify the server's TLS certificate or host name. */
    DLC_WARM_INSECURE = 1u << 1,
    /** Do not resume: discard any partial download and start over. */
    DLC_WARM_NO_RESUME = 1u << 2,
    /** Fail fast: no request is tried again, whatever max_retries says (a zero max_retries
     *  means the default, so this flag is how a caller asks for none). */
    DLC_WARM_NO_RETRY = 1u << 3,
    /** Replace a regular file at dest that this library did not download there (no
     *  `dest.warm` sidecar names it), or write a set into a folder that holds files that are
     *  not this set's. Without it either is refused with DLC_EEXIST before anything is made
     *  beside dest, naming the file or what is in the way. A file an earlier dlc_warm()
     *  published at dest is ours and is refreshed without it. */
    DLC_WARM_FORCE = 1u << 4,
};

/** Progress of a download, passed to ::dlc_warm_progress_fn. */
typedef struct dlc_warm_progress {
    uint64_t total;      /**< Object size in bytes (0 until known). */
    uint64_t done;       /**< Bytes in place, including those resumed from an earlier run. */
    uint64_t downloaded; /**< Bytes received by this call (excluding discarded retries). */
    double seconds;      /**< Since the call started. */
    int verifying;       /**< 1 while the store's checksums are being verified. */
} dlc_warm_progress;

/** Called about ten times a second from the calling thread. Return non-zero to
 *  stop: dlc_warm() then returns DLC_ECANCELED and keeps what it has. */
typedef int (*dlc_warm_progress_fn)(void *user, const dlc_warm_progress *p);

/** How to download. Start from dlc_warm_options_init(); zero fields mean the
 *  default. Strings are not retained after dlc_warm() returns. */
typedef struct dlc_warm_options {
    uint32_t struct_size; /**< sizeof(dlc_warm_options) as the caller's header has it; set by
                               dlc_warm_options_init() (status.h, "How structs grow"). */
    uint32_t connections; /**< Parallel ranged GETs; default 8, at most 256. */
    uint64_t chunk_size;  /**< Bytes per ranged GET; default 16 MiB, at least 64 KiB. */
    const char *endpoint; /**< S3 or GCS endpoint URL ("http://127.0.0.1:4568"); NULL: from the
                             environment. */
    const char *region;   /**< S3 region; NULL: from the environment. */
    uint32_t flags;       /**< ::dlc_warm_flags. */
    uint32_t max_retries; /**< Failed attempts in a row after the first; default 8 (see above;
                               none with ::DLC_WARM_NO_RETRY). */
    double timeout_s; /**< Retry a transfer under 1 KiB/s this long; default 30; 0.1 to 86400. */
    double connect_timeout_s;      /**< Default 10; 0.1 to 86400 (0: the default). */
    dlc_warm_progress_fn progress; /**< May be NULL. */
    void *progress_user;           /**< Passed to progress. */
    dlc_log_fn log; /**< Notices (retries, resume, waiting for the lock); may be NULL. */
    void *log_user; /**< Passed to log. */
} dlc_warm_options;

/** What dlc_warm() did. */
typedef struct dlc_warm_result {
    uint64_t bytes;            /**< Size of the object and of the destination. */
    uint64_t bytes_downloaded; /**< Payload bytes received by this call (retried bytes included). */
    double seconds;            /**< Wall time of the call. */
    double verify_seconds;     /**< Of which spent in dlc_store_verify(). */
    int resumed;               /**< 1: continued a partial download of an earlier run. */
    int already_complete;      /**< 1: DEST was complete and unchanged; nothing was fetched. */
    int waited;                /**< 1: another process held DEST.lock and published DEST. */
    int verified;              /**< 1: every record's checksum was verified. */
    uint32_t retries;          /**< Requests that were retried. */
    uint64_t chunks;           /**< Chunks of the object. */
    uint64_t chunks_fetched;   /**< Chunks (or parts of chunks) fetched by this call. */
    char etag[128];  /**< The object's ETag (quotes kept), "" when the server sent none; a set's:
                          its index's. An ETag of 128 bytes or more (or one that starts with
                          "dlcache-xxh3:") is shown as "dlcache-xxh3:" and the XXH3-128 of the
                          whole value in hex: cutting it could hide a change. */
    uint32_t files;  /**< 1, or a set's shards plus its index. */
    int is_set;      /**< 1: URL was a store set, DEST its directory. */
    int md5_checked; /**< 1: the bytes were hashed and matched the object's MD5 (an
                          object made by dlc_warm_push()); a set: every file's. */
    uint64_t reserved[8]; /**< Zero; fields added in later 1.x versions take these words, so
                               the struct keeps its size (status.h, "How structs grow"). */
} dlc_warm_result;

/** @brief Fill the caller's @p o with the defaults, never writing past @p size; called
 *         through the macro dlc_warm_options_init(), which passes the caller's sizeof.
 *  @param[out] o The options to fill (NULL, or smaller than a uint32_t: nothing is written).
 *  @param[in] size sizeof(dlc_warm_options) in the header the caller was built with: the bytes of
 *                  @p o that are written; struct_size is set to it (status.h, "How structs
 *                  grow"). */
DLC_API void dlc_warm_options_init_sized(dlc_warm_options *o, size_t size);

/** Fill @p o (a ::dlc_warm_options, not a pointer to void) with the defaults, its struct_size
 *  with the caller's sizeof: every field the caller's header has is written. */
#define dlc_warm_options_init(o) dlc_warm_options_init_sized((o), sizeof *(o))

/**
 * @brief Download @p url to the local file @p dest, resuming, verifying and
 *        publishing atomically as described in the file comment.
 * @param[in] url `s3://BUCKET/KEY`, `gs://BUCKET/OBJECT`, `https://...` or
 *        `http://...`; not retained.
 * @param[in] dest Destination path; its directory must exist. Not retained.
 * @param[in] opt Options filled by dlc_warm_options_init() then changed, or NULL for the
 *            defaults.
 * @param[out] res Filled on success and, as far as known, on failure (may be NULL).
 * @return DLC_OK or an error listed in the file comment (DLC_EINVAL also for a struct_size of 0,
 *         larger than the library's or no size it had (status.h, "How structs grow")); dlc_errmsg()
 * has the detail (with secrets redacted). Thread safety: any number of threads and processes may
 * call dlc_warm() at once, also for the same destination (each call opens DEST.lock itself, and
 * flock locks belong to the open file, so calls exclude each other). The log
 * and progress callbacks run on the calling thread.
 */
DLC_API dlc_status dlc_warm(const char *url, const char *dest, const dlc_warm_options *opt,
                            dlc_warm_result *res);

/** How to upload (dlc_warm_push()). Start from dlc_warm_push_options_init(). */
typedef struct dlc_warm_push_options {
    /** sizeof(dlc_warm_push_options) as the caller's header has it; set by
     *  dlc_warm_push_options_init() (status.h, "How structs grow"). */
    uint32_t struct_size;
    /** The network part, or NULL (default): dlc_warm_options_init()'s defaults. Filled by
     *  dlc_warm_options_init() and checked like any options; a pointer, not a member, so that
     *  each of the two structs grows on its own. Its connections (parallel part uploads, shared
     *  by all the files of a set), endpoint, region, DLC_WARM_INSECURE, DLC_WARM_NO_RESUME
     *  (abort an earlier run's upload and start over), max_retries, timeouts, progress (done and
     *  downloaded count bytes uploaded) and log. chunk_size and DLC_WARM_NO_VERIFY are not used.
     *  Not retained. */
    const dlc_warm_options *net;
    /** Bytes per part; default 16 MiB; 64 KiB to 5 GiB. Raised for a file that would need more
     *  than S3's 10,000 parts; for GCS rounded up to a multiple of 256 KiB (the chunk of the
     *  upload session). S3 refuses parts under 5 MiB but the last (EntityTooSmall). A resumed
     *  upload keeps the part size it began with. */
    uint64_t part_size;
    /** Directory of the resume journals; NULL: DLCACHE_STATE_DIR, else $XDG_STATE_HOME/dlcache,
     *  else $HOME/.local/state/dlcache (made with mode 0700). Not retained. */
    const char *state_dir;
} dlc_warm_push_options;

/** What dlc_warm_push() did. */
typedef struct dlc_warm_push_result {
    uint64_t bytes;          /**< Bytes of the files (a set: its shards and index). */
    uint64_t bytes_uploaded; /**< Part bytes sent by this call (retried bytes included). */
    double seconds;          /**< Wall time of the call. */
    double verify_seconds;   /**< Of which spent hashing whole files for servers whose ETag is a
                                  plain MD5 (s3rver) and for GCS's md5Hash. */
    double complete_seconds; /**< Time CompleteMultipartUpload requests took (the server joining
                                  the parts; several files' overlap). */
    uint32_t files;          /**< 1, or a set's shards plus its index. */
    uint32_t files_skipped;  /**< Files an earlier, interrupted call had completed and checked. */
    uint64_t parts;          /**< Parts of all the files. */
    uint64_t parts_uploaded; /**< Parts (GCS: chunks) sent and confirmed by this call. */
    uint64_t parts_resumed;  /**< Parts an earlier call sent that the server still had. */
    uint32_t retries;        /**< Requests that were sent again. */
    int resumed;             /**< 1: continued the upload of an earlier call. */
    int is_set;              /**< 1: PATH was a store set's directory. */
    char etag[128];       /**< The object's ETag as the server reports it (a set: the index's). */
    uint64_t reserved[8]; /**< Zero; fields added in later 1.x versions take these words, so
                               the struct keeps its size (status.h, "How structs grow"). */
} dlc_warm_push_result;

/** @brief Fill the caller's @p o with the defaults, never writing past @p size; called
 *         through the macro dlc_warm_push_options_init(), which passes the caller's sizeof.
 *  @param[out] o The options to fill (NULL, or smaller than a uint32_t: nothing is written).
 *  @param[in] size sizeof(dlc_warm_push_options) in the header the caller was built with: the bytes
 * of
 *                  @p o that are written; struct_size is set to it (status.h, "How structs
 *                  grow"). */
DLC_API void dlc_warm_push_options_init_sized(dlc_warm_push_options *o, size_t size);

/** Fill @p o (a ::dlc_warm_push_options, not a pointer to void) with the defaults, its struct_size
 *  with the caller's sizeof: every field the caller's header has is written. */
#define dlc_warm_push_options_init(o) dlc_warm_push_options_init_sized((o), sizeof *(o))

/**
 * @brief Upload the store file, or the store set directory, @p path to object storage so that
 *        every node can dlc_warm() it.
 *
 * A file goes to @p url (`s3://BUCKET/KEY` or `gs://BUCKET/OBJECT`; a URL ending in '/' gets the
 * file's name appended). A set's shards go to URL/NAME, every one that its index names (each
 * must have the size the index says), in parallel; URL/index.dlcset goes last, once every shard
 * is on the server and checked, so that a reader never finds an index naming a shard that is not
 * there.
 *
 * S3: a multipart upload per file (CreateMultipartUpload with x-amz-meta-dlcache-part-size,
 * UploadPart for each range of the file, several at once, CompleteMultipartUpload), signed by
 * libcurl (SigV4) with the credentials and endpoint of dlc_warm(). Each part's MD5 is computed
 * from the bytes sent and compared with the ETag the server returns (a mismatch sends the part
 * again; DLC_ECORRUPT after the retries); after completing, a HEAD checks the object's size and
 * its ETag (S3's MD5 of the part MD5s, "-N"; or the plain MD5 of the file where the server
 * reports that); an object that fails is deleted and the call fails with DLC_ECORRUPT.
 * GCS: the JSON API's resumable upload session, one chunk after another; the object's md5Hash
 * and size are checked likewise.
 *
 * Resuming: a journal per file (see dlc_warm_push_options::state_dir) records the upload id and
 * every part the server confirmed, with its MD5, synced as each is confirmed. A rerun after a
 * crash or SIGKILL of the same file (size, inode, modification time) to the same destination
 * asks the server which parts it still has (ListParts; a server without it is trusted to, and a
 * part it lacks fails the completion) and sends only the others; an upload the server no longer
 * knows starts over; a file an earlier run completed is checked with a HEAD and not sent again.
 * A journal of an older version of the file has its upload aborted and is started over. The
 * journals are removed when the whole call succeeds.
 *
 * @param[in] path A store file or a set's directory; not retained.
 * @param[in] url The destination; not retained.
 * @param[in] opt Options filled by dlc_warm_push_options_init() then changed, or NULL for the
 *            defaults.
 * @param[out] res Filled on success and, as far as known, on failure (may be NULL).
 * @return DLC_OK; DLC_EINVAL (bad URL or option, a directory that is not a set; a struct_size of
 *         0, larger than the library's or no size it had, in @p opt or its net
 *         (status.h, "How structs grow")); DLC_EHTTP (the
 *         server refused: dlc_errmsg() names the object, the request and the server's Code and
 *         Message); DLC_ENETWORK (retries exhausted); DLC_ECORRUPT (the server holds other bytes
 *         than those sent; a shard that is not the one its index names); DLC_ECHANGED (the file
 *         changed during the push: the upload is not completed); DLC_ESTATE (another push of the
 *         same file to the same place is running); DLC_ECANCELED (the progress callback said
 *         stop; a rerun resumes); -errno reading the file or writing the journal.
 * Thread safety: as dlc_warm(). Secrets (keys, tokens, a GCS session URI) are never in a
 * message; the journal holds the session URI and is readable by its owner only.
 */
DLC_API dlc_status dlc_warm_push(const char *path, const char *url,
                                 const dlc_warm_push_options *opt, dlc_warm_push_result *res);

/**
 * @brief Copy @p url into @p buf with its query string and any user:password
 *        replaced by "REDACTED", for showing to people.
 * @param[in] url The URL, or NULL (written as "(null)").
 * @param[out] buf Receives a NUL-terminated string, truncated to @p cap.
 * @param[in] cap Bytes at @p buf; with 0 (or a NULL @p buf) nothing is written.
 * @return @p buf; cannot fail.
 * Thread safety: safe from any thread.
 */
DLC_API const char *dlc_warm_redact_url(const char *url, char *buf, size_t cap);

/**
 * @brief Copy the text @p text (a message, a URL, a server's words) into @p buf with every
 *        secret it shows replaced by "REDACTED", for showing to people.
 *
 * The library's own redaction, which every error message (dlc_errmsg()) and log line passes
 * through: in a URL, its user:password and query string; the credentials after an
 * authorization scheme (Bearer, Basic, Digest, Negotiate, AWS); the value after a key named
 * like a secret (a name holding token, signature, credential, secret, password, passwd,
 * apikey, api-key or api_key, then ':' or '='; after Authorization or Cookie, the rest of the
 * line); AWS access key ids. Running it over its own output changes nothing
 * (docs/SECURITY.md).
 * @param[in] text The text, or NULL (written as "(null)").
 * @param[out] buf Receives a NUL-terminated string, truncated to @p cap.
 * @param[in] cap Bytes at @p buf; with 0 (or a NULL @p buf) nothing is written.
 * @return @p buf; cannot fail.
 * Thread safety: safe from any thread.
 */
DLC_API const char *dlc_warm_redact_text(const char *text, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* DLCACHE_WARM_H */
