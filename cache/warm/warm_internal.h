/* Private to the warm part (cache/warm/warm_*.c): source resolution, the resume
 * journal and the byte ranges it records, the sidecar, the parallel fetcher
 * and the push (both on the transfer engine of warm_xfer.h). Tests include it
 * to check the pieces one by one. */
#ifndef DLCACHE_WARM_INTERNAL_H
#define DLCACHE_WARM_INTERNAL_H

#include <dlcache/warm.h>

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

enum {
    DLC__WARM_ETAG_MAX = 128,     /* Room for an ETag (S3's are 34-70 bytes); a longer one is
                                     kept as a digest (dlc__warm_etag_keep()). */
    DLC__WARM_ERRBODY_MAX = 4096, /* Bytes of an error response kept for the message. */
    DLC__WARM_DEFAULT_CONNECTIONS = 8,
    DLC__WARM_MAX_CONNECTIONS = 256,
    DLC__WARM_DEFAULT_RETRIES = 8,
};
#define DLC__WARM_DEFAULT_CHUNK (16ull << 20)
#define DLC__WARM_MIN_CHUNK (64ull << 10)

/* The budget of one request (issue 32, include/dlcache/warm.h "How long a request may take"):
 * timeouts below DLC__WARM_MIN_TIMEOUT_S are refused (libcurl counts its low-speed time in whole
 * seconds and a connect timeout of 0 ms as "the default": a smaller value turned both off), and so
 * are those above DLC__WARM_MAX_TIMEOUT_S; a connection that moves fewer than DLC__WARM_MIN_RATE
 * bytes per second for timeout_s is cut and retried; an attempt resets its transfer's count of
 * attempts only when it brought DLC__WARM_MIN_PROGRESS bytes (or the rest of its piece), so a
 * server that sends a byte per connection runs out of retries. */
#define DLC__WARM_MIN_TIMEOUT_S 0.1
#define DLC__WARM_MAX_TIMEOUT_S 86400.0
#define DLC__WARM_MIN_RATE 1024L
#define DLC__WARM_MIN_PROGRESS (64ull << 10)

/* Refuse the timeouts of @p o that are neither 0 (the default) nor finite seconds in
 * [DLC__WARM_MIN_TIMEOUT_S, DLC__WARM_MAX_TIMEOUT_S] (NaN, infinities, negatives, 0.0009):
 * DLC_EINVAL naming the field, the value and the bounds, @p who leading the message. The one
 * check of the network options' values, which dlc_warm(), dlc_warm_push() and the stream cache
 * (the loader, cacheinfo --plan) all run, so the tools and Python get it from here. */
dlc_status dlc__warm_check_net(const dlc_warm_options *o, const char *who);

typedef enum dlc__warm_kind {
    DLC__WARM_S3 = 0,
    DLC__WARM_GCS = 1,
    DLC__WARM_HTTP = 2,
} dlc__warm_kind;

/* A resolved source: where the requests go and how they are authorized. The
 * fields marked secret must never be copied into a message or a log line. */
typedef struct dlc__warm_source {
    dlc__warm_kind kind;
    char *url;        /* The http(s) URL of the object's bytes (secret: may carry a signature). */
    char *shown;      /* url with the query string redacted: for messages. */
    char *name;       /* The caller's URL, redacted ("s3://b/k"): names the object in
                       * the journal and the sidecar, whichever endpoint served it. */
    char *sigv4;      /* "aws:amz:REGION:s3" for CURLOPT_AWS_SIGV4, or NULL. */
    char *access_key; /* Secret. NULL for anonymous requests. */
    char *secret_key; /* Secret. */
    struct curl_slist *headers; /* Sent with every request (secret: tokens). */
    int follow_redirects;       /* Plain URLs may redirect (CDNs); S3 and GCS do not. */
    int send_if_match;          /* The server honours If-Match on GET (S3). */
    char *bucket;               /* s3:// and gs://: the bucket, */
    char *key;                  /* the object's name (not encoded), */
    char *endpoint;             /* and gs://: the endpoint, without a trailing '/'. */
} dlc__warm_source;

/* Resolve @p url (s3://, gs://, http(s)://) with the options and the
 * environment; for gs:// without a token in the environment this asks the GCE
 * metadata server. Free with dlc__warm_source_free() (also after failure). */
dlc_status dlc__warm_source_init(dlc__warm_source *src, const char *url,
                                 const dlc_warm_options *opt);
void dlc__warm_source_free(dlc__warm_source *src);

/* Set the options every request of @p src shares (URL, auth, TLS, timeouts).
 * The caller adds its own header list built with dlc__warm_request_headers(). */
dlc_status dlc__warm_easy_setup(CURL *h, const dlc__warm_source *src, const dlc_warm_options *opt);

/* *out = src->headers plus "Range: bytes=START-END" (END inclusive; UINT64_MAX
 * for an open end, no header at all when START is 0 and END is UINT64_MAX)
 * and If-Match (only for an ETag that dlc__warm_etag_sendable() allows). *out
 * may be NULL (no header). Free with curl_slist_free_all(). */
dlc_status dlc__warm_request_headers(const dlc__warm_source *src, uint64_t start, uint64_t end,
                                     const char *if_match, struct curl_slist **out);

/* Percent-encode @p s (RFC 3986 unreserved characters stay; '/' stays when
 * @p keep_slash). Returns a malloc'd string or NULL when out of memory. */
char *dlc__warm_urlencode(const char *s, int keep_slash);

/* Parse a Content-Range value: "bytes A-B/T" (sets all three), "bytes A-B/ *"
 * (total UINT64_MAX) or "bytes * /T" (start = end = UINT64_MAX). Returns 0 on
 * success and -1 when malformed. */
int dlc__warm_parse_content_range(const char *v, uint64_t *start, uint64_t *end, uint64_t *total);

/* Say in one line what an error response body means: S3's XML
 * "<Code>: <Message>", GCS's JSON "message", or the start of the text with
 * control characters replaced. Writes "" for an empty body. */
void dlc__warm_describe_body(const char *body, size_t len, char *out, size_t cap);

/* What a finished answer with the error status @p status says, in one line for a message,
 * never empty: the server's words (dlc__warm_describe_body() of the kept @p body), for a redirect
 * that was not followed where it points (@p to, its Location or libcurl's
 * CURLINFO_REDIRECT_URL, redacted; NULL or "" when it had none) and that redirects are not
 * followed (@p follow: the source follows them, so this one had no usable Location), else "no
 * detail from the server". */
void dlc__warm_describe_answer(long status, const char *to, int follow, const char *body,
                               size_t len, char *out, size_t cap);

/* libcurl's failure @p res of an attempt on @p h in one line, its error buffer @p errbuf first
 * (may be empty): what libcurl calls running out of memory while it reads a response is said to
 * be a response header over its limit; after a redirect, the (redacted) URL that answered. */
void dlc__warm_describe_failure(CURL *h, CURLcode res, const char *errbuf, char *out, size_t cap);

/* Which failures of one request are worth another try. */
int dlc__warm_retryable_http(long status);
int dlc__warm_retryable_curl(CURLcode code);

/* A run of bytes [off, off + len) of the object. */
typedef struct dlc__warm_range {
    uint64_t off;
    uint64_t len;
} dlc__warm_range;

/* A set of byte runs. After dlc__warm_ranges_normalize() the runs are sorted,
 * nonempty, and no two overlap or touch. */
typedef struct dlc__warm_ranges {
    dlc__warm_range *v; /* malloc'd; free with dlc__warm_ranges_free(). */
    size_t n;
    size_t cap;
} dlc__warm_ranges;

/* Append [off, off + len) (len > 0); -ENOMEM when out of memory. */
dlc_status dlc__warm_ranges_add(dlc__warm_ranges *s, uint64_t off, uint64_t len);
/* Sort and merge the runs; returns the number of bytes they cover. */
uint64_t dlc__warm_ranges_normalize(dlc__warm_ranges *s);
void dlc__warm_ranges_free(dlc__warm_ranges *s);

/* The pieces of [0, size) that a normalized set does not cover, in order, cut
 * at every multiple of @p chunk: each piece lies inside one chunk, so a chunk
 * partly in place fetches only its missing bytes. */
typedef struct dlc__warm_gaps {
    const dlc__warm_ranges *have;
    uint64_t size;
    uint64_t chunk;
    uint64_t pos; /* Everything before pos has been given out or is covered. */
    size_t i;     /* The first run of have that ends after pos. */
} dlc__warm_gaps;

void dlc__warm_gaps_init(dlc__warm_gaps *g, const dlc__warm_ranges *have, uint64_t size,
                         uint64_t chunk);
/* The next missing piece into *piece; 0 when none is left. */
int dlc__warm_gaps_next(dlc__warm_gaps *g, dlc__warm_range *piece);
/* How many pieces the gaps give, and how many chunks of @p chunk bytes none of
 * them touches (the chunks already complete). */
void dlc__warm_gaps_count(const dlc__warm_ranges *have, uint64_t size, uint64_t chunk,
                          uint64_t *pieces, uint64_t *complete_chunks);

/* The journal: which bytes of DEST.warm-part are complete and synced, as byte
 * ranges, so that a rerun with any chunk size keeps them.
 * Layout (little-endian): a 32-byte header {magic "DLCWARM2", object size,
 * id = XXH3(etag) seeded with XXH3(source, NUL), XXH3 of the preceding 24
 * bytes}, then 24-byte records {offset, length, XXH3 of the 16 bytes before it
 * seeded with id}. A torn record at the end (a crash during the append) fails
 * its check and is dropped with everything after it. Version 1 journals
 * ("DLCWARM1", chunk indices) fail the header check and are started over. */
typedef struct dlc__warm_journal_id {
    uint64_t size;
    uint64_t id;
} dlc__warm_journal_id;

uint64_t dlc__warm_journal_key(const char *source, const char *etag);

/* Open the journal at @p path and, when its header matches @p id, put the
 * ranges it records into @p have (emptied first, then normalized) and their
 * bytes into *have_bytes. A journal of another object, of another version, or
 * none, is replaced by a fresh one (synced, with its directory). *fd_out is
 * then open for appends. */
dlc_status dlc__warm_journal_open(const char *path, const dlc__warm_journal_id *id,
                                  dlc__warm_ranges *have, uint64_t *have_bytes, int *fd_out);
/* The same for the last component of @p path in the directory open at @p dirfd (AT_FDCWD: as
 * above); @p path names it in messages. */
dlc_status dlc__warm_journal_open_at(int dirfd, const char *path, const dlc__warm_journal_id *id,
                                     dlc__warm_ranges *have, uint64_t *have_bytes, int *fd_out);
/* Append records for @p n completed ranges (each inside the object) and
 * fdatasync. The caller syncs the data they name first. */
dlc_status dlc__warm_journal_append(int fd, const char *path, const dlc__warm_journal_id *id,
                                    const dlc__warm_range *ranges, size_t n);

/* The sidecar DEST.warm: what the published DEST is a copy of. */
typedef struct dlc__warm_sidecar {
    char source[2048];
    uint64_t size;
    char etag[DLC__WARM_ETAG_MAX];
    uint64_t inode;
    int64_t mtime_ns;
} dlc__warm_sidecar;

/* Read @p path; DLC_ENOTFOUND when absent or unreadable as a sidecar. */
dlc_status dlc__warm_sidecar_read(const char *path, dlc__warm_sidecar *sc);
/* Write atomically (temporary file, fsync, rename, fsync of the directory). */
dlc_status dlc__warm_sidecar_write(const char *path, const dlc__warm_sidecar *sc);
/* Fill inode and mtime_ns from the file at @p dest; -errno when it is absent. */
dlc_status dlc__warm_sidecar_stat(const char *dest, dlc__warm_sidecar *sc);
/* The three above for the last component of their path in the directory open at @p dirfd
 * (AT_FDCWD: the path as it is); the path names the file in messages. */
dlc_status dlc__warm_sidecar_read_at(int dirfd, const char *path, dlc__warm_sidecar *sc);
dlc_status dlc__warm_sidecar_write_at(int dirfd, const char *path, const dlc__warm_sidecar *sc);
dlc_status dlc__warm_sidecar_stat_at(int dirfd, const char *dest, dlc__warm_sidecar *sc);
struct stat;
/* A file's mtime in nanoseconds, as a sidecar records it. */
int64_t dlc__warm_mtime_ns(const struct stat *st);
/* 1 when @p st (an lstat) is the regular file @p sc names: its inode and mtime. */
int dlc__warm_sidecar_names(const dlc__warm_sidecar *sc, const struct stat *st);

/* How an ETag that does not fit DLC__WARM_ETAG_MAX is kept: this prefix, then the XXH3-128 of the
 * whole header value in 32 lowercase hex digits. */
#define DLC__WARM_ETAG_DIGEST "dlcache-xxh3:"

/* Keep the ETag header value @p v (@p len bytes, not NUL-terminated) in @p out. A value that
 * fits is kept as it is; a longer one, or one that already starts with DLC__WARM_ETAG_DIGEST,
 * becomes DLC__WARM_ETAG_DIGEST and the XXH3-128 hex of the whole value. Cutting it instead
 * would make two long ETags that share their first bytes compare equal: a changed object would
 * pass for the one a download started with (or resumed). Every ETag read from a response goes
 * through here, so the comparisons of the kept forms still tell versions apart. */
void dlc__warm_etag_keep(const char *v, size_t len, char out[DLC__WARM_ETAG_MAX]);
/* 1 when @p etag is a server's own ETag that may be sent back (If-Match): not empty, not weak
 * ("W/"), and not the digest form of dlc__warm_etag_keep(), which no server would match. */
int dlc__warm_etag_sendable(const char *etag);

/* What the first request learned about the object. */
typedef struct dlc__warm_object {
    uint64_t size;
    int ranges;                    /* The server answered the range request with 206. */
    char etag[DLC__WARM_ETAG_MAX]; /* "" when the server sent none. */
    int pushed;              /* The object has dlcache-part-size metadata: a push made it, and */
    uint64_t push_part_size; /* its ETag is the MD5 of its bytes (or of their parts of this
                                size, "-N"); checked after the download. */
    char goog_md5[32];       /* GCS: the x-goog-hash md5 (base64), checked likewise. */
    long status;             /* The probe's last HTTP status (404: no such object). */
} dlc__warm_object;

/* Ask for the first bytes of the object and stop at the body: size, ETag and
 * whether ranges work. Retries like a chunk does (the same engine, warm_xfer.h). */
dlc_status dlc__warm_probe(const dlc__warm_source *src, const dlc_warm_options *opt,
                           dlc__warm_object *obj, uint32_t *retries);

/* The parallel download of the bytes not yet in place. */
typedef struct dlc__warm_fetch_job {
    const dlc__warm_source *src;
    const dlc_warm_options *opt;
    const dlc__warm_object *obj;
    int fd;                /* DEST.warm-part, preallocated to obj->size. */
    const char *part_path; /* For messages. */
    int journal_fd;        /* -1: no journal (the server cannot do ranges). */
    const char *journal_path;
    const dlc__warm_journal_id *jid;
    uint64_t chunk_size;          /* One request covers at most one aligned chunk of this size. */
    const dlc__warm_ranges *have; /* Normalized: bytes already in place (resumed). */
    uint64_t done_bytes;          /* In: the bytes of have; out: plus those fetched. */
    double t0;                    /* Start of the dlc_warm() call (progress seconds). */
    /* Out: */
    uint64_t downloaded;
    uint64_t chunks_fetched; /* Pieces (chunks or their missing parts) fetched. */
    uint32_t retries;
} dlc__warm_fetch_job;

/* Fetch every missing piece on the transfer engine (warm_xfer.h), journaling
 * each after its bytes are synced. On failure the pieces completed so far stay
 * journaled (resumable). */
dlc_status dlc__warm_fetch(dlc__warm_fetch_job *job);

/* Backoff before attempt @p attempt (1, 2, ...): exponential from 0.1 s,
 * capped at 5 s, with "equal jitter" (half fixed, half random) drawn from
 * @p rng so that ranks that failed together do not retry together. */
double dlc__warm_backoff(unsigned attempt, uint64_t *rng);

/* ---- Publishing: dlc_warm_push() (warm_md5.c, warm_push_*.c) ----------------------------------
 * A push uploads a file (or each file of a set) to S3 with a multipart upload, or to GCS with a
 * resumable upload session, on libcurl's multi interface, signed and authorized by the same
 * source code as a download (dlc__warm_source, dlc__warm_easy_setup()). */

enum {
    DLC__PUSH_MAX_PARTS = 10000, /* S3's limit of parts per upload. */
    DLC__PUSH_ID_MAX = 4096,     /* Longest upload id or GCS session URI kept. */
};
#define DLC__PUSH_DEFAULT_PART (16ull << 20)
/* GCS wants every chunk but the last to be a multiple of 256 KiB. */
#define DLC__PUSH_GCS_QUANTUM (256ull << 10)
/* The object metadata that says a push made the object and with which part size, so that a
 * download knows how the ETag was computed (x-amz-meta-..., or GCS's metadata map). */
#define DLC__PUSH_META "dlcache-part-size"

/* MD5 by OpenSSL's libcrypto (warm_md5.c). A context is made by the first begin and reused by
 * later ones; free it with dlc__md5_free() (also after a failed begin). */
typedef struct dlc__md5 {
    void *ctx; /* EVP_MD_CTX, kept opaque so that this header does not pull in OpenSSL's. */
} dlc__md5;
dlc_status dlc__md5_begin(dlc__md5 *m);
void dlc__md5_update(dlc__md5 *m, const void *p, size_t n);
void dlc__md5_end(dlc__md5 *m, uint8_t out[16]);
void dlc__md5_free(dlc__md5 *m);
void dlc__md5_hex(const uint8_t md5[16], char out[33]);
void dlc__md5_base64(const uint8_t md5[16], char out[25]);
/* 0 when @p b64 is the 24-character base64 of 16 bytes (GCS's md5Hash), else -1. */
int dlc__md5_from_base64(const char *b64, uint8_t md5[16]);
/* MD5 of bytes [off, off + len) of @p fd. */
dlc_status dlc__md5_file_range(int fd, const char *path, uint64_t off, uint64_t len,
                               uint8_t out[16]);

/* An S3 ETag ("hex" or "hex-N", quotes optional, case ignored): its 16 digest bytes and N (0 for
 * a plain MD5). Returns -1 for anything else (a weak ETag, GCS's, an SSE-KMS one...). */
int dlc__warm_etag_parse(const char *etag, uint8_t md5[16], uint32_t *parts);
/* S3's ETag of a multipart object: "\"HEX-N\"", HEX the MD5 of the @p n parts' binary MD5s
 * (@p md5s, 16 bytes each, in part order). */
void dlc__warm_multipart_etag(const uint8_t *md5s, size_t n, char out[DLC__WARM_ETAG_MAX]);
/* The ETag S3 gives the file at @p fd when uploaded in parts of @p part_size (@p multipart), or
 * the plain MD5 of its bytes, quoted; the parts are hashed on up to one thread per core. */
dlc_status dlc__warm_file_etag(int fd, const char *path, uint64_t size, uint64_t part_size,
                               int multipart, char out[DLC__WARM_ETAG_MAX]);

/* The one check of downloaded bytes against what the server says of them, shared by dlc_warm()
 * (warm_run.c) and the streaming shard cache (stream_cache.c), so that both refuse the same
 * bytes: for an object a push made (@p o->pushed), the MD5 of the @p o->size bytes of @p fd
 * (@p path, for messages) must be its ETag (or, on GCS, its x-goog-hash md5). *checked (may be
 * NULL) gets 1 when the check ran, 0 when the object carries no MD5 we can trust. DLC_OK;
 * DLC_ECORRUPT naming @p shown (the redacted URL) with both digests; -errno reading @p fd. */
dlc_status dlc__warm_check_md5(const dlc__warm_object *o, int fd, const char *path,
                               const char *shown, int *checked);

/* The push journal (warm_push_journal.c): which parts of which upload of which version of a
 * local file are on the server, so that a rerun after a crash sends only the others. One file
 * per (source file, destination) in the state directory, mode 0600 (a GCS session URI lets its
 * holder write the object), flock'ed while a push uses it. Layout (little-endian):
 *   header: "DLCPUSH1", u64 file size, u64 part size, u64 inode, i64 mtime_ns,
 *           u64 destination key (XXH3 of the destination's name), u32 id length L (<= 4095),
 *           u32 0, L bytes of upload id (S3) or session URI (GCS), u64 XXH3 of the bytes before;
 *   records of 40 bytes: u32 part (1..N; 0: the whole object was completed and verified),
 *           u32 aux (with part 0: the ETag's part count, 0 for a plain MD5), u64 length,
 *           16 bytes MD5 (of the part; with part 0, the ETag's digest), u64 XXH3 of the 32
 *           bytes before seeded with the header's hash.
 * A record whose check fails (a torn append) is dropped with everything after it. A journal
 * whose header does not match the file (size, inode, mtime) and destination is started over. */
typedef struct dlc__push_ident {
    uint64_t size;
    uint64_t inode;
    int64_t mtime_ns;
    uint64_t dest; /* XXH3 of the destination's name ("s3://bucket/key"). */
} dlc__push_ident;

typedef struct dlc__push_journal {
    int fd;     /* Open and locked (flock) from open to close; -1 when closed. */
    int dir_fd; /* Its folder, held as long: the file is opened and removed under it. */
    char path[4096];
    dlc__push_ident id;
    uint64_t part_size;               /* The upload's, from the header. */
    char upload_id[DLC__PUSH_ID_MAX]; /* Secret for GCS: never in a message. */
    uint64_t seed;                    /* The header's hash: seeds the records' checks. */
    uint32_t nparts;                  /* Parts of the file at part_size. */
    uint8_t *have;                    /* nparts flags: part i + 1 is journaled. */
    uint8_t *md5s;                    /* nparts x 16 bytes: their MD5s. */
    int complete;                     /* A record 0: the object was completed and verified. */
    uint8_t final_md5[16];            /* Its ETag's digest, */
    uint32_t final_parts;             /* and part count (0: a plain MD5). */
    uint64_t end;                     /* Where the next record goes. */
} dlc__push_journal;

/* The journal's path for pushing @p source (made absolute) to @p dest: STATE/push-HASH.journal
 * under @p state_dir, else DLCACHE_STATE_DIR, else $XDG_STATE_HOME/dlcache, else
 * $HOME/.local/state/dlcache. Creates the directory (mode 0700) when missing. */
dlc_status dlc__push_journal_path(const char *state_dir, const char *source, const char *dest,
                                  char *out, size_t cap);
/* Open and lock the journal at @p path (DLC_ESTATE when another push holds it). *matched is 1
 * when it is a journal of @p id: its upload, part size and records are then in @p j. When it is
 * a journal of an older version of the file for the same destination, its upload id goes into
 * @p stale (so that the caller can abort that upload), else stale is "". On failure nothing is
 * left open or allocated (dlc__push_journal_close() is still harmless). */
dlc_status dlc__push_journal_open(dlc__push_journal *j, const char *path, const dlc__push_ident *id,
                                  int *matched, char *stale, size_t stale_cap);
/* Start the journal over for a new upload @p upload_id in parts of @p part_size: truncate,
 * write the header, fdatasync, and sync the directory. */
dlc_status dlc__push_journal_start(dlc__push_journal *j, uint64_t part_size, const char *upload_id);
/* Append the record of part @p part (1-based) with @p md5 and fdatasync. */
dlc_status dlc__push_journal_part(dlc__push_journal *j, uint32_t part, uint64_t len,
                                  const uint8_t md5[16]);
/* Append the record of the completed, verified object and fdatasync. */
dlc_status dlc__push_journal_complete(dlc__push_journal *j, const uint8_t md5[16], uint32_t parts);
/* Close (and with @p remove, delete first) the journal; the lock goes with the close. */
void dlc__push_journal_close(dlc__push_journal *j, int remove);

/* What a request of a push is for. */
typedef enum dlc__push_step {
    DLC__PUSH_CREATE,     /* S3 CreateMultipartUpload. */
    DLC__PUSH_LIST,       /* S3 ListParts (one page). */
    DLC__PUSH_PART,       /* S3 UploadPart. */
    DLC__PUSH_COMPLETE,   /* S3 CompleteMultipartUpload. */
    DLC__PUSH_HEAD,       /* S3 HeadObject after completing. */
    DLC__PUSH_CHECK,      /* S3 HeadObject of an object an earlier run completed. */
    DLC__PUSH_PROBE,      /* S3 HeadObject of an object an earlier run may have completed. */
    DLC__PUSH_ABORT,      /* S3 AbortMultipartUpload of an upload nobody will finish. */
    DLC__PUSH_DELETE,     /* S3 DeleteObject of an object that failed its check. */
    DLC__PUSH_GCS_START,  /* GCS: POST uploadType=resumable (a new session). */
    DLC__PUSH_GCS_QUERY,  /* GCS: how much of the session's bytes are persisted. */
    DLC__PUSH_GCS_CHUNK,  /* GCS: PUT one chunk with Content-Range. */
    DLC__PUSH_GCS_CHECK,  /* GCS: the object's metadata (an earlier run completed it). */
    DLC__PUSH_GCS_DELETE, /* GCS: delete an object that failed its check. */
} dlc__push_step;

struct dlc__push_file;

/* One HTTP request of a push: what the protocol (warm_push_s3.c, warm_push_gcs.c) asks for, and
 * what came back, as warm_push_send.c hands it to the transfer engine (warm_xfer.h). */
typedef struct dlc__push_req {
    struct dlc__push_file *file;
    dlc__push_step step;
    uint32_t part;            /* PART: the S3 part number, 1-based. */
    const char *method;       /* "GET", "HEAD", "PUT", "POST" or "DELETE" (a static string). */
    char *url;                /* malloc'd; a GCS session URI is secret. */
    struct curl_slist *extra; /* Headers besides the source's; freed with the request. */
    int from_file;            /* The body is the file's bytes [off, off + len), hashed as sent. */
    uint64_t off;
    uint64_t len;
    char *body; /* Else a body from memory (malloc'd), body_len bytes, or none. */
    size_t body_len;
    /* The answer. */
    long status;
    char etag[DLC__WARM_ETAG_MAX];
    char range[128];                 /* GCS: the Range header of a 308. */
    char location[DLC__PUSH_ID_MAX]; /* GCS: the session URI (secret). */
    uint64_t meta_part_size;         /* The object's dlcache-part-size metadata (HEAD). */
    int64_t content_length;          /* -1 when absent. */
    char *resp;                      /* The body (malloc'd, NUL-terminated), resp_len bytes. */
    size_t resp_len;
    size_t resp_cap;
    uint8_t md5[16]; /* from_file: the MD5 of the bytes sent. */
    uint64_t sent;   /* from_file: bytes read into the request by this attempt. */
    int bad_digest;  /* The retry is for an answer whose ETag is not the MD5 sent. */
    char sse[32];    /* x-amz-server-side-encryption (or "customer" for SSE-C): KMS and
                        customer keys make ETags that are not MD5s. */
} dlc__push_req;

/* One local file of a push and the state of its upload. */
typedef struct dlc__push_file {
    char *path; /* The local file (malloc'd). */
    int fd;
    dlc__push_ident id;
    dlc__warm_source src; /* Where it goes. */
    dlc__push_journal j;
    int resumable;                /* The journal matched: an earlier run's upload goes on. */
    char stale[DLC__PUSH_ID_MAX]; /* An upload of an older version of the file, to abort. */
    int last;                     /* A set's index: waits until every other file is done. */
    uint64_t part_size;
    uint32_t nparts;
    int state;                     /* The protocol's. */
    int busy;                      /* A request other than a part is out. */
    uint32_t next_part;            /* The next part (0-based) to look at for sending. */
    uint32_t inflight;             /* Parts out. */
    uint8_t *out;                  /* nparts flags: part i + 1 is out. */
    uint32_t list_marker;          /* ListParts: the next page's part-number-marker. */
    uint8_t *listed;               /* ListParts: part i + 1 is on the server as journaled. */
    int list_unsupported;          /* The server does not list parts: the journal is trusted. */
    int restarted;                 /* The upload was started over once already. */
    int upload_gone;               /* ListParts: the server no longer knows the upload. */
    uint64_t offset;               /* GCS: bytes the session has persisted. */
    uint64_t bytes_done;           /* Bytes of parts in place (sent or resumed). */
    int finished;                  /* Uploaded and verified. */
    int skipped;                   /* An earlier run had completed it. */
    char etag[DLC__WARM_ETAG_MAX]; /* The object's, once finished. */
    int forget;                    /* The upload is gone: the journal must not be resumed. */
    dlc_status bad;     /* The object failed its check: the failure, after deleting it, */
    char bad_msg[1024]; /* and its message. */
} dlc__push_file;

/* The state of one dlc_warm_push() call. */
typedef struct dlc__push_ctx {
    dlc_warm_options net; /* The options' network part, defaults filled in. */
    const dlc_warm_push_options *opt;
    dlc__push_file *files;
    size_t nfiles;
    dlc_warm_push_result *r;
    double t0;
} dlc__push_ctx;

/* The answer of a protocol to a finished request that should be sent again after a backoff. */
#define DLC__PUSH_RETRY 1

/* The protocols: the next request @p f needs (1, with @p r filled; 0: none now, or < 0), and
 * the verdict on a finished one (DLC_OK, DLC__PUSH_RETRY with the reason in @p why, or < 0). */
int dlc__push_s3_next(dlc__push_ctx *c, dlc__push_file *f, dlc__push_req *r);
dlc_status dlc__push_s3_done(dlc__push_ctx *c, dlc__push_req *r, char *why, size_t cap);
int dlc__push_gcs_next(dlc__push_ctx *c, dlc__push_file *f, dlc__push_req *r);
/* Make a failed chunk of @p r, about to be retried, a query of the session instead: the server
 * may have persisted some of it, and the next chunk starts where the answer says. */
dlc_status dlc__push_gcs_requery(dlc__push_req *r);
dlc_status dlc__push_gcs_done(dlc__push_ctx *c, dlc__push_req *r, char *why, size_t cap);

/* An HTTP answer the protocol did not expect: DLC__PUSH_RETRY for 5xx, 408 and 429 (with the
 * reason in @p why), else DLC_EHTTP naming the object, @p what and the server's Code/Message. */
dlc_status dlc__push_http_error(const dlc__push_req *r, const char *what, char *why, size_t cap);
/* Send every file's requests on the transfer engine until all are finished; the first failure
 * ends it. */
dlc_status dlc__push_run(dlc__push_ctx *c);
/* Release what a request owns and zero it. */
void dlc__push_req_free(dlc__push_req *r);
/* What @p r is, for messages: "UploadPart 3 of 12", "CompleteMultipartUpload"... */
const char *dlc__push_step_name(const dlc__push_req *r, char *buf, size_t cap);

/* ---- Store sets (warm_set.c) ------------------------------------------------------------------
 * A set on the server is a prefix holding index.dlcset and the shards it names. */
#define DLC__WARM_SET_INDEX "index.dlcset"

/* The shards a set's index names, decoded by the store part's own reader of the index
 * (dlc__set_index_decode(), cache/store/store_set.h): never a second parser. */
typedef struct dlc__warm_set_list {
    uint32_t n;
    char (*names)[64]; /* n shard names, in record order (malloc'd). */
    uint64_t *bytes;   /* Their file sizes, */
    uint64_t *digests; /* and content digests, as the index says (malloc'd). */
    uint64_t set_id;   /* The set's identity (its build's), as the index says. */
} dlc__warm_set_list;

/* Read and decode DIR/index.dlcset. */
dlc_status dlc__warm_set_list_read(const char *dir, dlc__warm_set_list *out);
/* Decode the index file at @p path. */
dlc_status dlc__warm_set_list_file(const char *path, dlc__warm_set_list *out);
void dlc__warm_set_list_free(dlc__warm_set_list *l);
/* 1 when @p name is one cachewarm keeps for its own files in and beside a set's folder
 * (index.dlcset*, *.warm, *.lock, *.warm-part, *.warm-journal, *.warm-next): no shard may have
 * it. */
int dlc__warm_set_name_kept(const char *name);

/* dlc_warm() with its bookkeeping named after @p state rather than @p dest: the lock, journal and
 * sidecar are STATE.lock, STATE.warm-journal and STATE.warm, while the partial file stays
 * DEST.warm-part, beside DEST, since publishing it is a rename within DEST's directory.
 * dlc_warm() is this with STATE = DEST (NULL says the same); a set's shards and its index name a
 * file in the set's bookkeeping folder (dlc__warm_set()), so that the set's directory holds only
 * the set. @p dest_dir and @p state_dir: the directories open that hold DEST and STATE, which
 * every create, rename and unlink of the call goes relative to; -1: the call opens and checks
 * them itself (dlc__open_parent_dir()) and holds them until it returns. */
dlc_status dlc__warm_file(const char *url, const char *dest, const char *state, int dest_dir,
                          int state_dir, const dlc_warm_options *opt, dlc_warm_result *res);
/* dlc__warm_file() of an object that may not exceed @p max_size bytes (@p what names it in the
 * refusal): the size the server reports is checked before any byte is downloaded, and a larger
 * object is refused with DLC_ECORRUPT. */
dlc_status dlc__warm_file_capped(const char *url, const char *dest, const char *state, int dest_dir,
                                 int state_dir, const dlc_warm_options *opt, uint64_t max_size,
                                 const char *what, dlc_warm_result *res);

/* Warm the set at @p url (a prefix) into the directory @p dest; the caller holds DEST.lock.
 * The index is fetched first into DEST/index.dlcset.warm-new and decoded; a shard an older
 * index at DEST names is fetched beside it as NAME.warm-next (the older set stays whole until
 * the new one is in; warm_set.c, plan_refresh()); the shards are fetched in parallel by
 * dlc__warm_file() each (their own resume journals, verification and atomic publishing inside
 * DEST), the connections split among them; every shard is checked against the index; then the older
 * index goes, the staged shards are renamed over their names, the index is published last (rename
 * and directory sync), the set opened once as a whole, and the older version's shards it does not
 * name are removed. The shards' and the index's locks, journals and sidecars are kept in one folder
 * beside DEST, DEST.warm-set/ (NAME.lock, NAME.warm-journal, NAME.warm), so that DEST holds the
 * set's files and, during a fetch, the partial files being fetched into it (NAME.warm-part,
 * index.dlcset.warm-new). @p parent_fd: the directory holding DEST, open and checked by the caller;
 * DEST and DEST.warm-set are opened in it once, checked, and every create, rename and unlink of the
 * fetch goes relative to the three. */
dlc_status dlc__warm_set(const char *url, const char *dest, int parent_fd,
                         const dlc_warm_options *opt, dlc_warm_result *r, double t0);

/* The small XML parser of warm_source.c, for S3's answers (JSON ones go to the library's one
 * reader, dlc__json_find_string() of common.h). */
int dlc__warm_xml_field(const char *body, size_t len, const char *tag, char *out, size_t cap);

#endif /* DLCACHE_WARM_INTERNAL_H */
