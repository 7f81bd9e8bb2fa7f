/* The GCS side of a push: the JSON API's resumable upload. A POST with uploadType=resumable opens
 * a session (its URI, in the Location header, is a credential for the object: it goes into the
 * journal, mode 0600, and never into a message); chunks of the file follow in order with
 * Content-Range, each answered 308 with the Range the server has persisted, the last one 200
 * with the object's metadata. A rerun asks the session how far it got ("bytes * /SIZE") and
 * goes on from there; a session the server no longer knows (404, 410) starts over. The object's
 * md5Hash and size are checked against the file's, hashed once the last chunk is in.
 *
 * One session takes its chunks one after the other, so a single file goes over one connection;
 * the files of a set go in parallel. (GCS's parallel composite uploads would give a single file
 * more connections, but a composite object has no MD5 to check.) */
#include "common.h"
#include "warm_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum gcs_state {
    G_START = 0, /* Check an earlier run's object, ask its session, or open one. */
    G_OPEN,
    G_QUERY,
    G_CHUNKS,
    G_DELETE, /* The object failed its check: delete it, then fail. */
};

static int gcs_req(dlc__push_file *f, dlc__push_req *r, dlc__push_step step, const char *method,
                   const char *url)
{
    r->file = f;
    r->step = step;
    r->method = method;
    r->url = strdup(url);
    f->busy = 1;
    return r->url ? 1 : dlc__errorf(-ENOMEM, "push: out of memory");
}

/* ENDPOINT/PATH/b/BUCKET/o[/OBJECT] into a malloc'd string. */
static char *object_url(const dlc__push_file *f, const char *path, int with_object)
{
    char *eb = dlc__warm_urlencode(f->src.bucket, 0), *ek = dlc__warm_urlencode(f->src.key, 0);
    char *u = NULL;
    if (eb && ek) {
        const size_t n = strlen(f->src.endpoint) + strlen(path) + strlen(eb) + strlen(ek) + 64;
        u = malloc(n);
        if (u && with_object)
            snprintf(u, n, "%s%s/b/%s/o/%s", f->src.endpoint, path, eb, ek);
        else if (u)
            snprintf(u, n, "%s%s/b/%s/o?uploadType=resumable&name=%s", f->src.endpoint, path, eb,
                     ek);
    }
    free(eb);
    free(ek);
    return u;
}

static int url_req(dlc__push_file *f, dlc__push_req *r, dlc__push_step step, const char *method,
                   char *url)
{
    if (!url)
        return dlc__errorf(-ENOMEM, "push: out of memory");
    const int rc = gcs_req(f, r, step, method, url);
    free(url);
    return rc;
}

static int add_header(dlc__push_req *r, const char *fmt, uint64_t v)
{
    char line[128];
    snprintf(line, sizeof line, fmt, v);
    struct curl_slist *l = curl_slist_append(r->extra, line);
    if (!l)
        return dlc__errorf(-ENOMEM, "push: out of memory");
    r->extra = l;
    return 1;
}

static int open_req(dlc__push_file *f, dlc__push_req *r)
{
    char body[128];
    /* The name is in the query; the body carries the metadata that marks the object as pushed. */
    const int n = snprintf(body, sizeof body, "{\"metadata\":{\"" DLC__PUSH_META "\":\"0\"}}");
    r->body = strdup(body);
    r->body_len = (size_t)n;
    int rc =
        r->body ? url_req(f, r, DLC__PUSH_GCS_START, "POST", object_url(f, "/upload/storage/v1", 0))
                : dlc__errorf(-ENOMEM, "push: out of memory");
    if (rc > 0)
        rc = add_header(r, "X-Upload-Content-Length: %" PRIu64, f->id.size);
    if (rc > 0) {
        struct curl_slist *l = curl_slist_append(r->extra, "Content-Type: application/json");
        rc = l ? (r->extra = l, 1) : dlc__errorf(-ENOMEM, "push: out of memory");
    }
    return rc;
}

static int query_req(dlc__push_file *f, dlc__push_req *r)
{
    const int rc = gcs_req(f, r, DLC__PUSH_GCS_QUERY, "PUT", f->j.upload_id);
    return rc < 0 ? rc : add_header(r, "Content-Range: bytes */%" PRIu64, f->id.size);
}

static int chunk_req(dlc__push_file *f, dlc__push_req *r)
{
    r->from_file = 1;
    r->off = f->offset;
    r->len = f->id.size - f->offset < f->part_size ? f->id.size - f->offset : f->part_size;
    int rc = gcs_req(f, r, DLC__PUSH_GCS_CHUNK, "PUT", f->j.upload_id);
    if (rc < 0)
        return rc;
    char line[128];
    snprintf(line, sizeof line, "Content-Range: bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, r->off,
             r->off + r->len - 1, f->id.size);
    struct curl_slist *l = curl_slist_append(r->extra, line);
    return l ? (r->extra = l, 1) : dlc__errorf(-ENOMEM, "push: out of memory");
}

dlc_status dlc__push_gcs_requery(dlc__push_req *r)
{
    if (r->step != DLC__PUSH_GCS_CHUNK)
        return DLC_OK;
    curl_slist_free_all(r->extra);
    r->extra = NULL;
    r->step = DLC__PUSH_GCS_QUERY;
    r->from_file = 0;
    r->off = r->len = 0;
    return add_header(r, "Content-Range: bytes */%" PRIu64, r->file->id.size) < 0 ? -ENOMEM
                                                                                  : DLC_OK;
}

int dlc__push_gcs_next(dlc__push_ctx *c, dlc__push_file *f, dlc__push_req *r)
{
    (void)c;
    if (f->busy)
        return 0;
    switch (f->state) {
    case G_START:
        if (f->resumable && f->j.complete)
            return url_req(f, r, DLC__PUSH_GCS_CHECK, "GET", object_url(f, "/storage/v1", 1));
        if (f->resumable) {
            f->part_size = f->j.part_size;
            f->state = G_QUERY;
            return query_req(f, r);
        }
        f->state = G_OPEN;
        return open_req(f, r);
    case G_OPEN:
        return open_req(f, r);
    case G_QUERY:
        return query_req(f, r);
    case G_CHUNKS:
        return chunk_req(f, r);
    case G_DELETE:
        return url_req(f, r, DLC__PUSH_GCS_DELETE, "DELETE", object_url(f, "/storage/v1", 1));
    default:
        return 0;
    }
}

/* ---- Answers ----------------------------------------------------------------------------- */

/* "bytes=0-N" of a 308: the session has N + 1 bytes; no Range: none. */
static dlc_status persisted(const dlc__push_req *r, uint64_t *offset)
{
    if (!r->range[0]) {
        *offset = 0;
        return DLC_OK;
    }
    unsigned long long a = 0, b = 0;
    if (sscanf(r->range, "bytes=%llu-%llu", &a, &b) != 2 || a != 0 || b >= r->file->id.size)
        return dlc__errorf(DLC_EHTTP, "%s: the upload session answered Range '%s'",
                           r->file->src.name, r->range);
    *offset = b + 1;
    return DLC_OK;
}

static dlc_status on_opened(dlc__push_ctx *c, dlc__push_req *r, char *why, size_t cap)
{
    dlc__push_file *f = r->file;
    (void)c;
    if (r->status != 200 && r->status != 201)
        return dlc__push_http_error(r, "starting a resumable upload", why, cap);
    if (!r->location[0])
        return dlc__errorf(DLC_EHTTP, "%s: the server opened no upload session (no Location)",
                           f->src.name);
    const dlc_status rc = dlc__push_journal_start(&f->j, f->part_size, r->location);
    if (rc < 0)
        return rc;
    f->offset = 0;
    f->bytes_done = 0;
    f->state = G_CHUNKS;
    return DLC_OK;
}

/* The object's md5Hash and size against the file's; a mismatch deletes the object. */
static dlc_status check_object(dlc__push_ctx *c, dlc__push_req *r)
{
    dlc__push_file *f = r->file;
    char b64[64] = "", size[32] = "", etag[DLC__WARM_ETAG_MAX] = "";
    uint8_t want[16], got[16];
    dlc__json_find_string(r->resp, r->resp_len, "md5Hash", 1, b64, sizeof b64);
    dlc__json_find_string(r->resp, r->resp_len, "size", 1, size, sizeof size);
    dlc__json_find_string(r->resp, r->resp_len, "etag", 1, etag, sizeof etag);
    const double t = dlc__now_s();
    const dlc_status rc = dlc__md5_file_range(f->fd, f->path, 0, f->id.size, want);
    c->r->verify_seconds += dlc__now_s() - t;
    if (rc < 0)
        return rc;
    if (dlc__md5_from_base64(b64, got) == 0 && memcmp(got, want, 16) == 0 &&
        strtoull(size, NULL, 10) == f->id.size) {
        const dlc_status jr = dlc__push_journal_complete(&f->j, got, 0);
        if (jr < 0)
            return jr;
        snprintf(f->etag, sizeof f->etag, "%s", etag);
        f->finished = 1;
        f->bytes_done = f->id.size;
        return DLC_OK;
    }
    char hex[33];
    dlc__md5_hex(want, hex);
    f->bad = dlc__errorf(DLC_ECORRUPT,
                         "%s: the uploaded object has md5Hash '%s' and size '%s', the file MD5 %s "
                         "and %" PRIu64 " bytes; the object was deleted",
                         f->src.name, b64, size, hex, f->id.size);
    snprintf(f->bad_msg, sizeof f->bad_msg, "%s", dlc_errmsg());
    f->forget = 1;
    f->state = G_DELETE;
    return DLC_OK;
}

/* A chunk or a query answered: 308 and how far the session got, or the finished object. */
static dlc_status on_progress(dlc__push_ctx *c, dlc__push_req *r, char *why, size_t cap)
{
    dlc__push_file *f = r->file;
    if ((r->status == 404 || r->status == 410) && !f->restarted) {
        dlc__logf(c->net.log, c->net.log_user, DLC_LOG_INFO,
                  "%s: the upload session is gone (HTTP %ld); starting over", f->src.name,
                  r->status);
        f->restarted = 1;
        f->state = G_OPEN;
        return DLC_OK;
    }
    if (r->status == 200 || r->status == 201)
        return check_object(c, r);
    if (r->status != 308)
        return dlc__push_http_error(r, NULL, why, cap);
    uint64_t off = 0;
    const dlc_status rc = persisted(r, &off);
    if (rc < 0)
        return rc;
    if (f->state == G_QUERY && off > 0) { /* The first question of a rerun. */
        c->r->resumed = 1;
        dlc__logf(c->net.log, c->net.log_user, DLC_LOG_INFO,
                  "%s: resuming: the upload session has %" PRIu64 " of %" PRIu64 " bytes",
                  f->src.name, off, f->id.size);
    }
    if (r->step == DLC__PUSH_GCS_CHUNK)
        c->r->parts_uploaded++;
    f->offset = off;
    f->bytes_done = off;
    f->state = G_CHUNKS;
    return DLC_OK;
}

/* The metadata of an object an earlier run completed: the same MD5 and size, or again. */
static dlc_status on_checked(dlc__push_ctx *c, dlc__push_req *r, char *why, size_t cap)
{
    dlc__push_file *f = r->file;
    char b64[64] = "", size[32] = "", etag[DLC__WARM_ETAG_MAX] = "";
    uint8_t got[16];
    if (r->status != 200 && r->status != 404)
        return dlc__push_http_error(r, NULL, why, cap);
    dlc__json_find_string(r->resp, r->resp_len, "md5Hash", 1, b64, sizeof b64);
    dlc__json_find_string(r->resp, r->resp_len, "size", 1, size, sizeof size);
    dlc__json_find_string(r->resp, r->resp_len, "etag", 1, etag, sizeof etag);
    if (r->status == 200 && dlc__md5_from_base64(b64, got) == 0 &&
        memcmp(got, f->j.final_md5, 16) == 0 && strtoull(size, NULL, 10) == f->id.size) {
        snprintf(f->etag, sizeof f->etag, "%s", etag);
        f->finished = f->skipped = 1;
        f->bytes_done = f->id.size;
        c->r->files_skipped++;
        return DLC_OK;
    }
    dlc__logf(c->net.log, c->net.log_user, DLC_LOG_INFO,
              "%s: the object an earlier run completed is gone or changed; uploading it again",
              f->src.name);
    f->resumable = 0;
    f->state = G_OPEN;
    return DLC_OK;
}

dlc_status dlc__push_gcs_done(dlc__push_ctx *c, dlc__push_req *r, char *why, size_t cap)
{
    dlc__push_file *f = r->file;
    dlc_status rc;
    switch (r->step) {
    case DLC__PUSH_GCS_START:
        rc = on_opened(c, r, why, cap);
        break;
    case DLC__PUSH_GCS_QUERY:
    case DLC__PUSH_GCS_CHUNK:
        rc = on_progress(c, r, why, cap);
        break;
    case DLC__PUSH_GCS_CHECK:
        rc = on_checked(c, r, why, cap);
        break;
    case DLC__PUSH_GCS_DELETE:
        return dlc__errorf(f->bad, "%s", f->bad_msg);
    default:
        return dlc__errorf(DLC_EINVAL, "push: a GCS answer to an S3 request");
    }
    if (rc != DLC__PUSH_RETRY)
        f->busy = 0;
    return rc;
}
