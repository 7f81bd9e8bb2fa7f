/* Private to the warm part (cache/warm_*.c): source resolution, the resume
 * journal and the byte ranges it records, the sidecar and the parallel
 * fetcher. Tests include it to check the pieces one by one. */
#ifndef DLCACHE_WARM_INTERNAL_H
#define DLCACHE_WARM_INTERNAL_H

#include <dlcache/warm.h>

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

enum {
    DLC__WARM_ETAG_MAX = 128,     /* Longest ETag kept (S3's are 34-70 bytes). */
    DLC__WARM_ERRBODY_MAX = 4096, /* Bytes of an error response kept for the message. */
    DLC__WARM_DEFAULT_CONNECTIONS = 8,
    DLC__WARM_MAX_CONNECTIONS = 256,
    DLC__WARM_DEFAULT_RETRIES = 8,
};
#define DLC__WARM_DEFAULT_CHUNK (16ull << 20)
#define DLC__WARM_MIN_CHUNK (64ull << 10)

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
 * and If-Match. *out may be NULL (no header). Free with curl_slist_free_all(). */
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

/* What the first request learned about the object. */
typedef struct dlc__warm_object {
    uint64_t size;
    int ranges;                    /* The server answered the range request with 206. */
    char etag[DLC__WARM_ETAG_MAX]; /* "" when the server sent none. */
} dlc__warm_object;

/* Ask for the first bytes of the object and stop at the body: size, ETag and
 * whether ranges work. Retries like a chunk does. */
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

/* Fetch every missing piece, journaling each after its bytes are synced.
 * On failure the pieces completed so far stay journaled (resumable). */
dlc_status dlc__warm_fetch(dlc__warm_fetch_job *job);

/* Backoff before attempt @p attempt (1, 2, ...): exponential from 0.1 s,
 * capped at 5 s, with "equal jitter" (half fixed, half random) drawn from
 * @p rng so that ranks that failed together do not retry together. */
double dlc__warm_backoff(unsigned attempt, uint64_t *rng);

#endif /* DLCACHE_WARM_INTERNAL_H */
