/* Private to libdlcache and its tools: the plumbing that every part uses, kept once, the way
 * zstd keeps lib/common and libuv uv-common.h. Nothing here is part of the public contract
 * (include/dlcache/); the parts reach this header through an include directory that CMake sets
 * for the library's own targets, the tools and the tests, never through a relative path.
 *
 * What lives here, and where its code is:
 *   - error detail and logging, CHECK/FAIL_IF, saving a message across cleanup (error.c);
 *   - little-endian loads and stores on unaligned bytes (inline);
 *   - the monotonic clock, the usable core count, syncing a directory (platform.c);
 *   - the counter-based random streams of the loader and the tools (inline, and rng.c);
 *   - IEEE binary16 conversion (half.c);
 *   - reading JSON and writing a JSON string (json.c).
 * No function here allocates except dlc__fsync_dir and dlc__replace_file, and none keeps state
 * between calls. */
#ifndef DLCACHE_COMMON_H
#define DLCACHE_COMMON_H

#include <dlcache/status.h>

#include <stddef.h>
#include <stdint.h>

/* ---- Errors (error.c) --------------------------------------------------------------------------
 * One thread-local buffer for the whole library (dlc_errmsg()), and beside it, in builds with
 * assert() on (no NDEBUG: Debug, and RelWithDebInfo, the default), where the failure was raised
 * and the CHECKs it went through on its way out: "loader/loader.c:44 <- loader/loader.c:266".
 * The site is kept apart from the message rather than appended to it: RelWithDebInfo is what a
 * user builds, and the message is theirs (and the tests match it); the tests read the site with
 * dlc__errsite(), and a developer sees it after the message with DLCACHE_ERROR_SITES=1 in the
 * environment. Release builds (NDEBUG) record no site and pay nothing for it. */

#ifndef NDEBUG
#define DLC__SITE __FILE__, __LINE__
#define DLC__ERR_FORWARD(status) dlc__err_forward((status), __FILE__, __LINE__)
#else
#define DLC__SITE NULL, 0
#define DLC__ERR_FORWARD(status) ((void)0)
#endif

/* Record a detail message for dlc_errmsg() and return @p status, so error paths read
 * `return dlc__errorf(DLC_ECORRUPT, "%s: record %llu: ...", ...)`. The call's file and line
 * become the error's site (debug builds). */
#define dlc__errorf(...) dlc__errorf_at(DLC__SITE, __VA_ARGS__)
/* dlc__errorf() with the site given: @p file (__FILE__, or NULL for none) and @p line. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
dlc_status
dlc__errorf_at(const char *file, int line, dlc_status status, const char *fmt, ...);
/* Empty the message and the site. */
void dlc__clear_error(void);
/* A failure @p status passes the CHECK at @p file:@p line: add the place to the site when the
 * recorded message is this status's, else start the site here ("? <- file:line": the status
 * came without a message). Called by CHECK in debug builds only. */
void dlc__err_forward(dlc_status status, const char *file, int line);
/* Where the last failure of this thread was raised and the CHECKs it went through, paths from
 * the source root: "loader/loader.c:44 <- loader/loader.c:266"; "" in release builds and after
 * dlc__clear_error(). Valid until this thread's next error call. */
const char *dlc__errsite(void);
/* Send a notice to @p log, if there is one. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
void dlc__logf(dlc_log_fn log, void *user, dlc_log_level level, const char *fmt, ...);

/* Copy @p url into @p buf (@p cap bytes, cut to fit) with its user:password and query string
 * replaced by "REDACTED"; NULL gives "(null)". Returns @p buf. */
const char *dlc__redact_url(const char *url, char *buf, size_t cap);
/* The URL of the object @p name in the set (or prefix) at @p base, into @p buf (@p cap bytes):
 * the name joins the path with one '/' (trailing '/'s of the path dropped). In an http(s) URL the
 * path ends at the first '?' or '#': the name goes before it and the query string and fragment
 * follow unchanged (a token valid for the prefix is valid for its objects); in s3:// and gs://
 * URLs a '?' or '#' belongs to the key. Returns the length of the whole URL, as snprintf() does:
 * a result >= @p cap means it was cut. */
size_t dlc__url_child(const char *base, const char *name, char *buf, size_t cap);
/* Copy the text @p in into @p buf with every secret it shows replaced by "REDACTED": URLs' user
 * information and query strings, credentials after an authorization scheme or a key named like
 * a secret, AWS key ids (common/redact.c says which). Idempotent. Every message and log line of
 * the library passes through it. Returns @p buf. */
const char *dlc__redact_text(const char *in, char *buf, size_t cap);
/* Remember @p value (a credential read from the environment or a metadata server, 8 bytes or
 * more) as a secret in use: dlc__redact_text() cuts it wherever it stands, also where no key or
 * scheme names it (a server's error body quoting the token it was sent). The 16 latest are kept
 * for the process's life. Thread-safe. */
void dlc__redact_add_secret(const char *value);

/* The message of a failure and its site, kept while cleanup code runs calls that may overwrite
 * them:
 *     dlc__errsave es; dlc__err_save(&es); ...cleanup...; return dlc__err_restore(&es, rc); */
typedef struct dlc__errsave {
    char msg[1024];
    char site[256];
} dlc__errsave;
void dlc__err_save(dlc__errsave *es);
/* Put the saved message and site back and return @p status. */
dlc_status dlc__err_restore(const dlc__errsave *es, dlc_status status);

/* Propagate a failure to the `fail:` cleanup ladder, keeping its message (and adding this line to
 * its site in debug builds). Needs a local `dlc_status rc`. */
#define CHECK(expr)                                                                                \
    do {                                                                                           \
        rc = (expr);                                                                               \
        if (rc < 0) {                                                                              \
            DLC__ERR_FORWARD(rc);                                                                  \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* Fail with @p code and a message when @p cond holds; this line is the error's site. */
#define FAIL_IF(cond, code, ...)                                                                   \
    do {                                                                                           \
        if (cond) {                                                                                \
            rc = dlc__errorf((code), __VA_ARGS__);                                                 \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* ---- Structs that carry their size (options.c) ------------------------------------------------
 * status.h, "How structs grow": one helper each way, and one table of the sizes each released
 * header gave each struct (abi_sizes.h). */

/* An options struct's _init(): write @p defaults (@p size bytes, this library's sizeof, with any
 * struct_size) into the caller's @p dst of @p dst_size bytes (the sizeof of the caller's header,
 * which the header's _init() macro passes), never past dst_size; bytes of a newer header than
 * this library are zeroed; dst's struct_size becomes dst_size, which dlc__options_take() then
 * accepts or refuses. Nothing is written when dst is NULL or smaller than a uint32_t. */
void dlc__options_init(void *dst, size_t dst_size, const void *defaults, size_t size);

/* Take the caller's options @p src, a public struct of type @p type whose first member is its
 * uint32_t struct_size, into @p dst, which holds this library's defaults (from @p init, the
 * struct's _init()) and is @p size bytes, the library's sizeof. The caller's struct_size bytes
 * are copied over the defaults and dst's struct_size becomes @p size. DLC_EINVAL, naming
 * @p type and @p init, for a struct_size of 0 (no _init() call), one larger than @p size (a newer
 * header than this library) or one no version had. The one entry check of every call that takes
 * such a struct (status.h, "How structs grow"). */
dlc_status dlc__options_take(void *dst, size_t size, const void *src, const char *type,
                             const char *init);

/* Copy a result out: @p src is the library's whole struct of type @p type (@p size bytes, its
 * sizeof); the caller's @p dst opens with the struct_size the caller set, and only that many
 * bytes of dst are written (its struct_size is kept). DLC_EINVAL, naming @p type, and nothing
 * written, for a struct_size of 0, larger than @p size, or no size the struct ever had. The one
 * copy-out of every result that carries its size (the mirror of dlc__options_take()). */
dlc_status dlc__result_give(void *dst, const void *src, size_t size, const char *type);

/* dlc__options_take() and dlc__result_give() with the older sizes given as @p older
 * (0-terminated) instead of abi_sizes.h's rows for @p type: the rule apart from the table, which
 * the unit tests (tests/common/test_common_options.c) check on structs of their own. */
dlc_status dlc__options_take_as(void *dst, size_t size, const void *src, const char *type,
                                const char *init, const uint32_t *older);
dlc_status dlc__result_give_as(void *dst, const void *src, size_t size, const char *type,
                               const uint32_t *older);

/* ---- Little-endian loads and stores on unaligned bytes -----------------------------------------
 * Bytes inside an LMDB map or a file have no alignment promise, so they are never cast to a
 * struct; these compile to single loads and stores on x86-64. */
static inline uint16_t dlc__ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}
static inline uint32_t dlc__ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t dlc__ld64(const uint8_t *p)
{
    return (uint64_t)dlc__ld32(p) | (uint64_t)dlc__ld32(p + 4) << 32;
}
static inline void dlc__st16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void dlc__st32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void dlc__st64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- Clock, cores, directories (platform.c) ----------------------------------------------------
 */

/* CLOCK_MONOTONIC in nanoseconds and in seconds. */
uint64_t dlc__now_ns(void);
double dlc__now_s(void);
/* Cores this process may run on (its affinity mask, else the online count); at least 1. */
uint32_t dlc__cpu_count(void);
/* fsync the directory that holds @p path, so that a rename or a create in it survives a crash.
 * EINVAL from fsync (a file system that cannot sync directories) is not an error. Returns
 * DLC_OK, -ENOMEM or -errno with the directory named. */
dlc_status dlc__fsync_dir(const char *path);
/* Replace @p path with the @p len bytes at @p p, all or nothing: PATH.tmp-PID written, fsynced,
 * renamed over @p path, the directory synced. A crash leaves the old file or the new one, and
 * the new one only once it is on disk; a failure removes the temporary file. Returns DLC_OK,
 * -ENOMEM or -errno with the file named. */
dlc_status dlc__replace_file(const char *path, const void *p, size_t len);
/* mkdir -p: make @p path and its missing parents with @p mode (existing ones are kept as they
 * are), then check that @p path is a directory. @p what names the directory in a failure's
 * message ("the push state directory"). Returns DLC_OK, DLC_EINVAL (a path of 4096 bytes or
 * more, or one that is not a directory) or -errno with the part that failed named. */
dlc_status dlc__make_dirs(const char *path, unsigned mode, const char *what);
/* Open @p path read-only as a regular file, never blocking: with O_NONBLOCK, so that a FIFO
 * returns at once instead of waiting for a writer, then checked with fstat (into @p st) and
 * O_NONBLOCK cleared. @p extra: more open flags (O_DIRECT). Returns the descriptor, or -errno /
 * DLC_EINVAL ("PATH: a FIFO, not a regular file (a store must be one)") with the message set;
 * @p what names the file's role in it ("store", "tar shard"; NULL: none). */
struct stat;
int dlc__open_regular(const char *path, int extra, const char *what, struct stat *st);
/* "a directory", "a FIFO", "a socket", "a character device", "a block device", "a symbolic
 * link", "a regular file" or "an unknown kind of file", for a stat's st_mode. */
const char *dlc__file_kind(unsigned mode);
/* Open the last component of @p path in the directory open at @p dirfd (AT_FDCWD: @p path as
 * it is), a file dlcache keeps for itself (a partial download, a journal, a lock, a sidecar),
 * with @p flags (O_RDWR, O_CREAT, O_EXCL...; mode 0644) and never through a symbolic link, nor
 * blocking on a FIFO: a link, or anything but a regular file, is refused naming @p path, since a
 * co-tenant of a shared folder may plant one to have us truncate or overwrite its target
 * (docs/SECURITY.md); relative to a held directory, renaming it or swapping it for a link
 * between two steps reaches nothing either. *fd_out gets the descriptor (close-on-exec).
 * DLC_OK, -ELOOP (a link), DLC_EINVAL (not a regular file) or -errno. */
dlc_status dlc__open_own_at(int dirfd, const char *path, int flags, int *fd_out);
/* Make that file, a new one of ours, afresh: a symbolic link with its name is refused (-ELOOP,
 * naming it), anything else removed, then the file is created with O_EXCL (a link planted in
 * between fails it). As dlc__open_own_at(). */
dlc_status dlc__create_own_at(int dirfd, const char *path, int flags, int *fd_out);
/* dlc__replace_file() of the last component of @p path in the directory open at @p dirfd: the
 * temporary file made, renamed and removed there, @p dirfd synced. AT_FDCWD: as
 * dlc__replace_file(). */
dlc_status dlc__replace_file_at(int dirfd, const char *path, const void *p, size_t len);
/* What @p path is called relative to @p dirfd: its last component, or @p path itself for
 * AT_FDCWD. Points into @p path. */
const char *dlc__at_name(int dirfd, const char *path);
/* fsync the directory open at @p dirfd (AT_FDCWD: the one holding @p path, dlc__fsync_dir());
 * @p path names it in a failure. */
dlc_status dlc__fsync_dir_at(int dirfd, const char *path);
/* Open the directory that holds @p path (its parent; "." for a bare name) for a run that creates,
 * renames and deletes there only relative to it, checked once: not a symbolic link, a directory,
 * owned by this user or by root (a folder another user owns could be emptied or swapped under
 * us). @p what names @p path's role in a refusal ("the destination"). *fd_out gets the
 * descriptor (O_PATH is not used: fsync needs a real one). DLC_OK, -ELOOP, DLC_EINVAL, -EPERM
 * (another owner) or -errno, naming the directory. */
dlc_status dlc__open_parent_dir(const char *path, const char *what, int *fd_out);
/* Open the directory @p name (the last component of @p path) in the directory open at @p dirfd,
 * with the same checks as dlc__open_parent_dir(); @p path names it in a refusal. */
dlc_status dlc__open_dir_at(int dirfd, const char *path, const char *what, int *fd_out);

/* ---- Counter-based random streams (rng.c) ------------------------------------------------------
 * Every random choice of the loader is a pure function of a key made from (seed, epoch, position,
 * purpose) and a counter, so it does not depend on which thread asks or when. splitmix64's
 * finalizer is a bijection of 64-bit words with full avalanche, which is all a counter-based
 * generator needs. */

/* splitmix64: the finalizer applied to x + the golden-ratio increment. */
static inline uint64_t dlc__mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A key from four words; different argument orders give unrelated keys. */
static inline uint64_t dlc__key4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    uint64_t h = dlc__mix64(a ^ 0x6a09e667f3bcc909ull);
    h = dlc__mix64(h ^ b);
    h = dlc__mix64(h ^ c);
    return dlc__mix64(h ^ d);
}

/* Purposes that separate the loader's random streams (the first word of dlc__key4). */
enum {
    DLC__KEY_SHUFFLE = 1,      /**< The epoch's permutation. */
    DLC__KEY_GROUPS = 2,       /**< Quasi-random: order of groups. */
    DLC__KEY_WINDOW = 3,       /**< Quasi-random: order within a window. */
    DLC__KEY_WEIGHTED = 4,     /**< Weighted draws. */
    DLC__KEY_AUGMENT = 5,      /**< Crop and flip of one sample. */
    DLC__KEY_REPLACE = 6,      /**< Choice of a replacement for a corrupt record. */
    DLC__KEY_SWIN_SHARDS = 7,  /**< Shard windows: the order of the shards. */
    DLC__KEY_SWIN_WINDOW = 8,  /**< Shard windows: the order within one window. */
    DLC__KEY_MIX_PASS = 9,     /**< Mixtures: the permutation of one pass of one source. */
    DLC__KEY_MIX_WINDOWS = 10, /**< Mixtures: a streamed source's passes in shard windows. */
    DLC__KEY_MIXUP = 24,       /**< MixUp / CutMix: the draw of one batch of one rank. */
};

/* A counter-based stream: the n-th output is mix64(key ^ n * odd constant). */
typedef struct dlc__rng {
    uint64_t key;
    uint64_t ctr;
} dlc__rng;

static inline uint64_t dlc__rng_next(dlc__rng *r)
{
    r->ctr++;
    return dlc__mix64(r->key ^ (r->ctr * 0xd1b54a32d192ed03ull));
}

/* Uniform double in [0, 1) with 53 random bits. */
static inline double dlc__rng_uniform(dlc__rng *r)
{
    return (double)(dlc__rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n), n > 0, without modulo bias (Lemire's method). */
uint64_t dlc__rng_below(dlc__rng *r, uint64_t n);

/* ---- IEEE binary16 (half.c) --------------------------------------------------------------------
 */

/* Binary16 bits of @p f, rounded to nearest even (what torch's .half() does); NaN stays a quiet
 * NaN, values beyond the largest half become infinities. */
uint16_t dlc__f32_to_f16(float f);

/* ---- JSON (json.c) -----------------------------------------------------------------------------
 * One reader and one string writer for the JSON that the parts and the tools handle: a store's
 * "build" metadata (shown by cacheinfo), the tools' --json reports, an object server's answers
 * and error bodies (warm). The reader walks the text in place and reports each value to a
 * callback; it never allocates, and it refuses nesting deeper than DLC__JSON_MAX_DEPTH, so that
 * hostile text cannot exhaust the stack. */
enum {
    DLC__JSON_MAX_DEPTH = 16, /* Levels of containers below the top value (depth 0). */
    DLC__JSON_KEY_MAX = 256,  /* A member's name is cut to this many bytes, NUL included, */
    DLC__JSON_STR_MAX = 4096, /* and a string value handed to a callback to this many. */
};

typedef enum dlc__json_kind {
    DLC__JSON_NULL,
    DLC__JSON_BOOL,
    DLC__JSON_INT,    /* An integer that fits a long long (a larger one is malformed). */
    DLC__JSON_DOUBLE, /* A number with a fraction or an exponent. */
    DLC__JSON_STRING,
    DLC__JSON_OBJECT,     /* Its members follow, then DLC__JSON_OBJECT_END. */
    DLC__JSON_ARRAY,      /* Its elements follow, then DLC__JSON_ARRAY_END. */
    DLC__JSON_OBJECT_END, /* key, depth and raw are those of the container; raw_end is set. */
    DLC__JSON_ARRAY_END,
} dlc__json_kind;

/* One value as the walk meets it; valid during the callback only. */
typedef struct dlc__json_item {
    dlc__json_kind kind;
    int depth;           /* 0: the top value; a container's members are one deeper. */
    const char *key;     /* The member's name, decoded; NULL at the top and in an array. */
    const char *raw;     /* The value's text: its first byte, */
    const char *raw_end; /* and one past its last (NULL at the start of a container). */
    const char *str;     /* DLC__JSON_STRING: decoded, NUL-terminated, cut to STR_MAX. */
    long long i;         /* DLC__JSON_INT. */
    double d;            /* DLC__JSON_DOUBLE. */
    int b;               /* DLC__JSON_BOOL. */
} dlc__json_item;

/* Called for each value in text order; a nonzero return stops the walk. */
typedef int (*dlc__json_visit)(void *user, const dlc__json_item *item);

/* Walk the one value at @p p (white space before it is skipped) up to @p end, calling @p visit
 * (may be NULL: only check). Returns 0 when the value is whole (*after, when not NULL, is the
 * byte after it), 1 when @p visit stopped the walk, -1 when the text is not JSON there. Text
 * after a value the callback stopped at is never read, so a cut text still yields what came
 * before the cut. Strings decode \uXXXX beyond ASCII as '?'. An integer beyond 64 bits is
 * JSON and comes as a double (DLC__JSON_DOUBLE). */
int dlc__json_walk(const char *p, const char *end, dlc__json_visit visit, void *user,
                   const char **after);
/* The offset of the first byte of [p, p + n) that does not start a well-formed UTF-8 sequence
 * (RFC 3629), or @p n when all is UTF-8. */
size_t dlc__utf8_check(const char *p, size_t n);
/* 1 when the @p n bytes at @p p are exactly one JSON value, with white space around it. */
int dlc__json_valid(const char *p, size_t n);
/* Decode the string at @p p (which points at its '"') into @p out (may be NULL; cut to @p cap
 * bytes with its NUL), every \uXXXX (a surrogate pair as one character) as UTF-8, so the
 * result is never longer than the quoted text; its whole decoded length into *len (may be NULL).
 * Returns the byte after the closing quote, or NULL when malformed. */
const char *dlc__json_string(const char *p, const char *end, char *out, size_t cap, size_t *len);
/* The value of member @p key of the top-level object in [p, end): its text is [*vs, *ve).
 * Returns 0; -1 when there is none before the text ends or goes wrong; -2 when the object has
 * two members of that name (JSON readers differ on which counts: Python's takes the last). */
int dlc__json_member(const char *p, const char *end, const char *key, const char **vs,
                     const char **ve);
/* Copy the string value of the first member named @p key (of the top-level object, or with
 * @p any_depth of any object, in text order) into @p out. Returns 1, or 0 when there is no such
 * member before the text ends or goes wrong, when its value is not a string, or when the string
 * does not fit @p cap (@p out then holds its start). */
int dlc__json_find_string(const char *p, size_t n, const char *key, int any_depth, char *out,
                          size_t cap);

/* Where dlc__json_quote() writes: @p n bytes at @p p. */
typedef void (*dlc__json_put)(void *user, const char *p, size_t n);
/* Write @p s as a JSON string: quoted, with quotes, backslashes, \n, \r and \t escaped by name,
 * other control characters as \u00XX, well-formed UTF-8 as it is, and each byte of anything else
 * (a file name that is not UTF-8) as \ufffd, so that the document stays JSON. */
void dlc__json_quote(const char *s, dlc__json_put put, void *user);

/* ---- Bounded lock waits (lockwait.c) -----------------------------------------------------------
 * No flock wait of dlcache blocks: each polls with LOCK_NB, so that it ends at its deadline, on
 * close() and on Ctrl-C (issue 32), and its failure says what holds the lock. */

/* Asked between two tries of a lock wait: nonzero stops the wait (DLC_ECANCELED). */
typedef int (*dlc__lock_cancel_fn)(void *user);
/* Asked between two tries too: nonzero when the holder was seen at work since the last call, which
 * starts the wait's @p timeout_s again (a holder that shows it works may hold the lock for long).
 */
typedef int (*dlc__lock_alive_fn)(void *user);
/* Take flock(@p op) (LOCK_EX or LOCK_SH) on @p fd, the file @p path: at once when free, else by
 * tries (1 ms apart, doubling up to 50 ms) until it is taken, @p cancel says stop (DLC_ECANCELED),
 * or @p timeout_s passed since the wait began (or since @p alive last said the holder works):
 * -ETIMEDOUT, the message naming @p path, the holder (dlc__lock_holder()), the seconds waited and
 * @p why (what the lock guards and what to do). @p cancel and @p alive may be NULL. DLC_OK or
 * -errno. */
dlc_status dlc__flock_wait(int fd, int op, const char *path, double timeout_s,
                           dlc__lock_cancel_fn cancel, dlc__lock_alive_fn alive, void *user,
                           const char *why);
/* Who holds a lock on the file open as @p fd, from /proc/locks (the holder's PID) and
 * /proc/PID/comm: "process 1234 (python3)", "process 1234", or "an unknown process" where it
 * cannot be known (no /proc, another PID namespace, an open file description lock). */
void dlc__lock_holder(int fd, char *out, size_t cap);

#endif /* DLCACHE_COMMON_H */
