/* Fuzz what the warm part parses from the outside world (cache/warm/warm_*.c):
 * the server's Content-Range values, error bodies (S3's XML, GCS's JSON,
 * anything else) turned into one line of an error message, the URL redactor
 * that stands between pre-signed URLs and every message, and the two small
 * files a download leaves beside its destination (the sidecar and the
 * resume journal) and the journal a push keeps in its state directory, which
 * a crash or another program may have mangled.
 *
 * The first input byte picks the surface; the rest is its input. Besides
 * "no crash", the harness checks the promises: a parsed range is ordered and
 * inside its total; a described body is one printable line; a redacted URL
 * keeps no byte of its query string or password; the byte ranges read from a
 * journal are sorted, apart and inside the object, and with the pieces that a
 * rerun of any chunk size would fetch they make up the object exactly; a push
 * journal that matches its file gives parts inside the file and an upload id
 * that is a string. */
#include "fuzz_util.h"

#include "warm_internal.h"

#define JOURNAL_SOURCE "http://127.0.0.1/x"
#define JOURNAL_ETAG "\"etag\""

static dlc__warm_journal_id journal_id(void)
{
    /* A 1 MiB object. */
    const dlc__warm_journal_id id = {
        .size = 1u << 20,
        .id = dlc__warm_journal_key(JOURNAL_SOURCE, JOURNAL_ETAG),
    };
    return id;
}

static char *cstr(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        abort();
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

static void fuzz_range(const uint8_t *p, size_t n)
{
    char *s = cstr(p, n);
    uint64_t a = 1, b = 2, t = 3;
    if (dlc__warm_parse_content_range(s, &a, &b, &t) == 0) {
        if (a == UINT64_MAX) {
            if (b != UINT64_MAX || t == UINT64_MAX)
                abort(); /* "bytes * /T" */
        } else if (b < a || (t != UINT64_MAX && b >= t)) {
            abort();
        }
    }
    free(s);
}

static void fuzz_body(const uint8_t *p, size_t n)
{
    char out[512];
    dlc__warm_describe_body((const char *)p, n, out, 1 + (n % sizeof out));
    for (const char *c = out; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            abort(); /* It goes into a one-line message. */
}

/* Does the text that dlc_warm_redact_url() kept contain @p needle? The markers it inserted
 * are cut out first: query text that merely joins with a marker is no leak (found:
 * "unte://r@hun?/REDAC" gives "unte://REDACTED@hun?REDACTED", where "/REDAC" spans the
 * kept "//" and the inserted "REDACTED@"). */
static int kept_contains(const char *out, const char *needle, size_t n)
{
    const char *s = out;
    for (;;) {
        const char *m = strstr(s, "REDACTED");
        const size_t len = m ? (size_t)(m - s) : strlen(s);
        if (n > 0 && len >= n && memmem(s, len, needle, n) != NULL)
            return 1;
        if (!m)
            return 0;
        s = m + 8;
    }
}

static void fuzz_redact(const uint8_t *p, size_t n)
{
    char *url = cstr(p, n);
    const size_t cap = 2 * n + 64;
    char *out = malloc(cap);
    if (!out)
        abort();
    dlc_warm_redact_url(url, out, cap);
    if (strlen(out) >= cap)
        abort();
    /* The query string (up to a fragment) must be gone, unless the same
     * bytes also occur in the part that is kept or in the marker itself. */
    static const char marker[] = "REDACTED@?REDACTED";
    const char *q = strchr(url, '?');
    /* Judge the kept text only: the marker at its end could join with it into the query. */
    const size_t olen = strlen(out);
    if (olen >= 9 && strcmp(out + olen - 9, "?REDACTED") == 0)
        out[olen - 9] = '\0';
    if (q) {
        const size_t qn = strcspn(q + 1, "#");
        if (qn >= 4 && kept_contains(out, q + 1, qn) &&
            memmem(url, (size_t)(q - url), q + 1, qn) == NULL &&
            memmem(marker, sizeof marker - 1, q + 1, qn) == NULL)
            abort();
    }
    /* So must a password in scheme://user:password@host. Only a "://" before the first '/',
     * '?' or '#' starts an authority; text that merely looks like one further on is a path. */
    const char *auth = strstr(url, "://");
    if (auth && (size_t)(auth - url) <= strcspn(url, "/?#")) {
        auth += 3;
        const size_t alen = strcspn(auth, "/?#");
        const char *at = memchr(auth, '@', alen);
        const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
        if (colon) {
            const size_t pn = (size_t)(at - colon - 1);
            if (pn >= 4 && kept_contains(out, colon + 1, pn) &&
                memmem(at, strlen(at), colon + 1, pn) == NULL &&
                memmem(url, (size_t)(colon - url), colon + 1, pn) == NULL &&
                memmem(marker, sizeof marker - 1, colon + 1, pn) == NULL)
                abort();
        }
    }
    /* The text redactor (every message passes it): a cut that fits, and idempotent, since
     * messages that quote other messages are redacted again. */
    const size_t tcap = 10 * n + 64;
    char *once = malloc(tcap), *twice = malloc(tcap);
    if (!once || !twice)
        abort();
    dlc_warm_redact_text(url, once, tcap);
    if (strlen(once) >= tcap)
        abort();
    dlc_warm_redact_text(once, twice, tcap);
    if (strcmp(once, twice) != 0)
        abort();
    free(twice);
    free(once);
    free(out);
    free(url);
}

static void fuzz_sidecar(const uint8_t *p, size_t n)
{
    static char path[512];
    if (!path[0])
        fz_path(path, sizeof path, "dest.warm");
    fz_write_file(path, p, n);
    dlc__warm_sidecar sc;
    if (dlc__warm_sidecar_read(path, &sc) == DLC_OK) {
        if (!memchr(sc.source, '\0', sizeof sc.source) || !memchr(sc.etag, '\0', sizeof sc.etag))
            abort();
    }
}

/* For a rerun with @p chunk-byte chunks, the pieces still to fetch and the
 * runs in place must tile the object exactly: in order, no byte twice, none
 * left out, and no piece across a chunk boundary. */
static void check_plan(const dlc__warm_ranges *have, uint64_t size, uint64_t chunk)
{
    dlc__warm_gaps g;
    dlc__warm_gaps_init(&g, have, size, chunk);
    dlc__warm_range piece;
    uint64_t pos = 0, pieces = 0;
    size_t i = 0;
    while (dlc__warm_gaps_next(&g, &piece)) {
        while (i < have->n && have->v[i].off == pos)
            pos += have->v[i++].len;
        if (piece.off != pos || piece.len == 0 ||
            piece.off / chunk != (piece.off + piece.len - 1) / chunk)
            abort();
        pos += piece.len;
        pieces++;
    }
    while (i < have->n && have->v[i].off == pos)
        pos += have->v[i++].len;
    if (pos != size || i != have->n)
        abort();
    uint64_t counted = 0, complete = 0;
    dlc__warm_gaps_count(have, size, chunk, &counted, &complete);
    if (counted != pieces || complete > (size + chunk - 1) / chunk)
        abort();
}

static void fuzz_journal(const uint8_t *p, size_t n)
{
    static char path[512];
    if (!path[0])
        fz_path(path, sizeof path, "dest.warm-journal");
    fz_write_file(path, p, n);
    const dlc__warm_journal_id id = journal_id();
    dlc__warm_ranges have = {0};
    uint64_t bytes = 0;
    int fd = -1;
    if (dlc__warm_journal_open(path, &id, &have, &bytes, &fd) == DLC_OK) {
        if (fd < 0)
            abort();
        close(fd);
        /* The runs are nonempty, inside the object, sorted, apart, and their
         * bytes are what the reader said. */
        uint64_t sum = 0;
        for (size_t i = 0; i < have.n; i++) {
            const dlc__warm_range r = have.v[i];
            if (r.len == 0 || r.off >= id.size || r.len > id.size - r.off)
                abort();
            if (i > 0 && r.off <= have.v[i - 1].off + have.v[i - 1].len)
                abort();
            sum += r.len;
        }
        if (sum != bytes)
            abort();
        /* The chunk sizes of a few reruns: the default's grid, one that cuts
         * every 64 KiB run, and one larger than the object. */
        check_plan(&have, id.size, 64u << 10);
        check_plan(&have, id.size, 100000);
        check_plan(&have, id.size, 16u << 20);
    }
    dlc__warm_ranges_free(&have);
}

/* The file a push journal describes in this harness: 1 MiB, and a fixed identity. */
static const dlc__push_ident push_id = {1u << 20, 1, 2, 3};

static void fuzz_push_journal(const uint8_t *p, size_t n)
{
    static char path[512];
    if (!path[0])
        fz_path(path, sizeof path, "push.journal");
    fz_write_file(path, p, n);
    dlc__push_journal j;
    int matched = 0;
    char stale[DLC__PUSH_ID_MAX];
    if (dlc__push_journal_open(&j, path, &push_id, &matched, stale, sizeof stale) != DLC_OK) {
        if (j.fd != -1 || j.have || j.md5s || matched)
            abort(); /* A failed open leaves nothing behind (the lock would block every rerun). */
        return;
    }
    if (memchr(stale, '\0', sizeof stale) == NULL)
        abort();
    if (matched) {
        if (!j.part_size || j.nparts > DLC__PUSH_MAX_PARTS ||
            j.nparts != push_id.size / j.part_size + (push_id.size % j.part_size != 0) ||
            memchr(j.upload_id, '\0', sizeof j.upload_id) == NULL)
            abort();
        for (uint32_t i = 0; i < j.nparts; i++)
            if (j.have[i] > 1)
                abort();
    }
    dlc__push_journal_close(&j, 0);
}

/* A push journal of push_id with parts 1 and 3 of 64 KiB recorded, the selector byte first. */
static void write_push_seed(const char *dir)
{
    char tmp[512], path[1024];
    fz_path(tmp, sizeof tmp, "seed.push");
    unlink(tmp);
    dlc__push_journal j;
    int matched = 0;
    char stale[DLC__PUSH_ID_MAX];
    const uint8_t md5[16] = {1, 2, 3};
    if (dlc__push_journal_open(&j, tmp, &push_id, &matched, stale, sizeof stale) != DLC_OK ||
        dlc__push_journal_start(&j, 64u << 10, "upload-id-1") != DLC_OK ||
        dlc__push_journal_part(&j, 1, 64u << 10, md5) != DLC_OK ||
        dlc__push_journal_part(&j, 3, 64u << 10, md5) != DLC_OK)
        abort();
    dlc__push_journal_close(&j, 0);
    uint8_t buf[4096];
    buf[0] = 5;
    const int fd = open(tmp, O_RDONLY);
    const ssize_t len = fd >= 0 ? pread(fd, buf + 1, sizeof buf - 1, 0) : -1;
    if (len <= 0)
        abort();
    close(fd);
    snprintf(path, sizeof path, "%s/push0", dir);
    fz_write_file(path, buf, (size_t)len + 1);
}

/* Seeds that need our own hashes: journals with a few ranges recorded (runs
 * of two chunk sizes), one with a torn tail, each prefixed with the selector
 * byte of fuzz_journal. */
static void write_seeds(const char *dir)
{
    const dlc__warm_journal_id id = journal_id();
    char tmp[512], path[1024];
    fz_path(tmp, sizeof tmp, "seed.journal");
    for (int k = 0; k < 3; k++) {
        unlink(tmp);
        dlc__warm_ranges have = {0};
        uint64_t bytes = 0;
        int fd = -1;
        if (dlc__warm_journal_open(tmp, &id, &have, &bytes, &fd) != DLC_OK)
            abort();
        dlc__warm_ranges_free(&have);
        const dlc__warm_range ranges[] = {
            {3u << 16, 1u << 16}, {0, 1u << 16}, {100000, 100000}, {15u << 16, 1u << 16}};
        if (k > 0 && dlc__warm_journal_append(fd, tmp, &id, ranges, k == 1 ? 2 : 4) != DLC_OK)
            abort();
        /* At the end: the appends use pwrite(), so the file position is still 0 (a write()
         * here used to overwrite the magic, which made this seed a foreign journal). */
        off_t len = lseek(fd, 0, SEEK_END);
        if (k == 2 && (pwrite(fd, "torn", 4, len) != 4 || (len += 4) <= 0))
            abort();
        uint8_t buf[256];
        buf[0] = 4;
        if (len <= 0 || len > (off_t)sizeof buf - 1 || pread(fd, buf + 1, (size_t)len, 0) != len)
            abort();
        close(fd);
        snprintf(path, sizeof path, "%s/journal%d", dir, k);
        fz_write_file(path, buf, (size_t)len + 1);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("DLC_FUZZ_SEED_DIR");
    if (dir) {
        write_seeds(dir);
        write_push_seed(dir);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const uint8_t *p = data + 1;
    const size_t n = size - 1;
    switch (data[0] % 6) {
    case 0:
        fuzz_range(p, n);
        break;
    case 1:
        fuzz_body(p, n);
        break;
    case 2:
        fuzz_redact(p, n);
        break;
    case 3:
        fuzz_sidecar(p, n);
        break;
    case 4:
        fuzz_journal(p, n);
        break;
    default:
        fuzz_push_journal(p, n);
        break;
    }
    return 0;
}
