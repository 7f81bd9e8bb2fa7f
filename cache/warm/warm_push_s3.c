/* The S3 side of a push: a multipart upload per file (CreateMultipartUpload, UploadPart for each
 * part, CompleteMultipartUpload), resumed from the journal after checking with ListParts what the
 * server still has, and checked at every step: each part's ETag against the MD5 of the bytes
 * sent, then the completed object's size and ETag (S3's MD5 of the part MD5s with "-N"; the
 * plain MD5 of the whole file on servers that report that, such as s3rver) with a HEAD.
 *
 * Query strings are written already in SigV4's canonical form (keys sorted, every key with '=',
 * values percent-encoded): libcurl 7.88 signs the query exactly as given, so a query in any other
 * form would be signed wrongly (checked against AWS's published example in test_warm_sigv4.c). */
#include "common.h"
#include "warm_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

enum s3_state {
    S3_START = 0, /* Abort a stale upload, then check, list or create. */
    S3_CREATE,
    S3_LIST,
    S3_PARTS,
    S3_COMPLETE,
    S3_HEAD,
    S3_DELETE, /* The completed object failed its check: delete it, then fail. */
    S3_PROBE,  /* Every part is journaled but the upload cannot be seen: completed already? */
};

/* ---- Requests ---------------------------------------------------------------------------- */

static int make_req(dlc__push_file *f, dlc__push_req *r, dlc__push_step step, const char *method,
                    const char *query)
{
    r->file = f;
    r->step = step;
    r->method = method;
    const size_t n = strlen(f->src.url) + (query ? strlen(query) + 2 : 1);
    r->url = malloc(n);
    if (!r->url)
        return dlc__errorf(-ENOMEM, "push: out of memory");
    snprintf(r->url, n, "%s%s%s", f->src.url, query ? "?" : "", query ? query : "");
    /* Parts go out side by side; every other request is the only one of its file. */
    if (step != DLC__PUSH_PART)
        f->busy = 1;
    return 1;
}

static int add_header(dlc__push_req *r, const char *line)
{
    struct curl_slist *l = curl_slist_append(r->extra, line);
    if (!l)
        return dlc__errorf(-ENOMEM, "push: out of memory");
    r->extra = l;
    return 1;
}

/* A request on the upload @p upload_id: the query is @p prefix (keys that sort before
 * "uploadId", each with its '&') and the encoded id. */
static int upload_req(dlc__push_file *f, dlc__push_req *r, dlc__push_step step, const char *method,
                      const char *prefix, const char *upload_id)
{
    char *eid = dlc__warm_urlencode(upload_id, 0);
    char *q = eid ? malloc(strlen(prefix) + strlen(eid) + 16) : NULL;
    int rc = dlc__errorf(-ENOMEM, "push: out of memory");
    if (q) {
        sprintf(q, "%suploadId=%s", prefix, eid);
        rc = make_req(f, r, step, method, q);
    }
    free(q);
    free(eid);
    return rc;
}

static int list_req(dlc__push_file *f, dlc__push_req *r)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "max-parts=1000&part-number-marker=%u&", f->list_marker);
    return upload_req(f, r, DLC__PUSH_LIST, "GET", prefix, f->j.upload_id);
}

static int create_req(dlc__push_file *f, dlc__push_req *r)
{
    char meta[128];
    snprintf(meta, sizeof meta, "x-amz-meta-" DLC__PUSH_META ": %" PRIu64, f->part_size);
    int rc = make_req(f, r, DLC__PUSH_CREATE, "POST", "uploads=");
    if (rc > 0)
        rc = add_header(r, meta);
    /* The object's type; libcurl would otherwise send a form's for the empty POST. */
    return rc > 0 ? add_header(r, "Content-Type: application/octet-stream") : rc;
}

static int part_req(dlc__push_file *f, dlc__push_req *r, uint32_t i)
{
    r->part = i + 1;
    r->from_file = 1;
    r->off = (uint64_t)i * f->part_size;
    r->len = f->id.size - r->off < f->part_size ? f->id.size - r->off : f->part_size;
    f->out[i] = 1;
    f->inflight++;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "partNumber=%u&", r->part);
    return upload_req(f, r, DLC__PUSH_PART, "PUT", prefix, f->j.upload_id);
}

/* The part list of CompleteMultipartUpload, with the ETags the parts were checked against. */
static int complete_req(dlc__push_file *f, dlc__push_req *r)
{
    const size_t cap = 64 + (size_t)f->nparts * 96;
    char *x = malloc(cap);
    if (!x)
        return dlc__errorf(-ENOMEM, "push: out of memory");
    size_t n = (size_t)snprintf(x, cap, "<CompleteMultipartUpload>");
    for (uint32_t i = 0; i < f->nparts; i++) {
        char hex[33];
        dlc__md5_hex(f->j.md5s + 16 * (size_t)i, hex);
        n += (size_t)snprintf(x + n, cap - n,
                              "<Part><PartNumber>%u</PartNumber><ETag>\"%s\"</ETag></Part>", i + 1,
                              hex);
    }
    n += (size_t)snprintf(x + n, cap - n, "</CompleteMultipartUpload>");
    r->body = x;
    r->body_len = n;
    const int rc = upload_req(f, r, DLC__PUSH_COMPLETE, "POST", "", f->j.upload_id);
    return rc < 0 ? rc : add_header(r, "Content-Type: application/xml");
}

/* ---- Choosing the next request ----------------------------------------------------------- */

/* The file must be the one the push began with, or the object would mix two versions. */
static dlc_status check_unchanged(const dlc__push_file *f)
{
    struct stat st;
    if (fstat(f->fd, &st) < 0)
        return dlc__errorf(-errno, "%s: stat: %s", f->path, strerror(errno));
    const int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    if ((uint64_t)st.st_size != f->id.size || mt != f->id.mtime_ns)
        return dlc__errorf(DLC_ECHANGED,
                           "%s: changed during the push (size or time): not completing %s; a "
                           "rerun uploads the new file",
                           f->path, f->src.name);
    return DLC_OK;
}

/* The next part to send, or COMPLETE once every part is on the server. */
static int next_part(dlc__push_file *f, dlc__push_req *r)
{
    for (; f->next_part < f->nparts; f->next_part++) {
        const uint32_t i = f->next_part;
        if (!f->j.have[i] && !f->out[i]) {
            f->next_part++;
            return part_req(f, r, i);
        }
    }
    if (f->inflight > 0)
        return 0;
    /* A part whose check failed for good went back to missing: look once more. */
    for (uint32_t i = 0; i < f->nparts; i++)
        if (!f->j.have[i] && !f->out[i])
            return part_req(f, r, i);
    const dlc_status rc = check_unchanged(f);
    if (rc < 0)
        return rc;
    f->state = S3_COMPLETE;
    return complete_req(f, r);
}

/* The tables of the upload's parts, sized by the journal (a resumed upload keeps its size). */
static dlc_status plan_tables(dlc__push_file *f)
{
    free(f->out);
    free(f->listed);
    f->nparts = f->j.nparts;
    f->part_size = f->j.part_size;
    f->out = calloc(f->nparts, 1);
    f->listed = calloc(f->nparts, 1);
    f->inflight = 0;
    if (!f->out || !f->listed)
        return dlc__errorf(-ENOMEM, "push: out of memory");
    return DLC_OK;
}

static int start_req(dlc__push_file *f, dlc__push_req *r)
{
    if (f->stale[0])
        return upload_req(f, r, DLC__PUSH_ABORT, "DELETE", "", f->stale);
    if (f->resumable && f->j.complete) {
        f->state = S3_HEAD;
        return make_req(f, r, DLC__PUSH_CHECK, "HEAD", NULL);
    }
    if (f->resumable) {
        const dlc_status rc = plan_tables(f);
        if (rc < 0)
            return rc;
        f->state = S3_LIST;
        f->list_marker = 0;
        return list_req(f, r);
    }
    f->state = S3_CREATE;
    return create_req(f, r);
}

int dlc__push_s3_next(dlc__push_ctx *c, dlc__push_file *f, dlc__push_req *r)
{
    (void)c;
    if (f->busy)
        return 0;
    switch (f->state) {
    case S3_START:
        return start_req(f, r);
    case S3_CREATE:
        return create_req(f, r);
    case S3_LIST:
        return list_req(f, r);
    case S3_PARTS:
        return next_part(f, r);
    case S3_HEAD:
        return make_req(f, r, DLC__PUSH_HEAD, "HEAD", NULL);
    case S3_PROBE:
        return make_req(f, r, DLC__PUSH_PROBE, "HEAD", NULL);
    case S3_DELETE:
        return make_req(f, r, DLC__PUSH_DELETE, "DELETE", NULL);
    default:
        return 0;
    }
}

/* ---- Answers ----------------------------------------------------------------------------- */

/* An ETag as S3 writes it in XML ("&quot;HEX&quot;") or a header, made "\"HEX\"". */
static void clean_etag(const char *in, char *out, size_t cap)
{
    char t[DLC__WARM_ETAG_MAX - 2]; /* Room for the quotes around it. */
    size_t n = 0;
    for (const char *p = in; *p && n + 1 < sizeof t;) {
        if (strncmp(p, "&quot;", 6) == 0)
            p += 6;
        else if (strncmp(p, "&#34;", 5) == 0)
            p += 5;
        else if (*p == '"')
            p++;
        else
            t[n++] = *p++;
    }
    t[n] = '\0';
    if (cap >= sizeof t + 2) {
        out[0] = '"';
        memcpy(out + 1, t, n);
        out[n + 1] = '"';
        out[n + 2] = '\0';
    }
}

static void enter_parts(dlc__push_ctx *c, dlc__push_file *f)
{
    uint32_t have = 0;
    f->bytes_done = 0;
    for (uint32_t i = 0; i < f->nparts; i++)
        if (f->j.have[i]) {
            have++;
            f->bytes_done += i + 1 < f->nparts ? f->part_size : f->id.size - i * f->part_size;
        }
    if (have > 0) {
        c->r->resumed = 1;
        c->r->parts_resumed += have;
        dlc__logf(c->net.log, c->net.log_user, DLC_LOG_INFO,
                  "%s: resuming: %u of %u parts are on the server", f->src.name, have, f->nparts);
    }
    f->state = S3_PARTS;
    f->next_part = 0;
    /* A run killed after CompleteMultipartUpload reached the server but before its answer did
     * has journaled every part, and the server has dropped the upload (or cannot list it): the
     * object may already be the file. A HEAD tells, before completing or starting over. */
    if (have == f->nparts && (f->upload_gone || f->list_unsupported))
        f->state = S3_PROBE;
}

static dlc_status on_created(dlc__push_ctx *c, dlc__push_req *r)
{
    dlc__push_file *f = r->file;
    char id[DLC__PUSH_ID_MAX];
    if (!dlc__warm_xml_field(r->resp, r->resp_len, "UploadId", id, sizeof id) || !*id)
        return dlc__errorf(DLC_EHTTP, "%s: CreateMultipartUpload: no UploadId in the answer",
                           f->src.name);
    dlc_status rc = dlc__push_journal_start(&f->j, f->part_size, id);
    if (rc == DLC_OK)
        rc = plan_tables(f);
    if (rc == DLC_OK)
        enter_parts(c, f);
    return rc;
}

/* Keep the journaled parts that one ListParts page shows with the same ETag and size. */
static void take_listed(dlc__push_file *f, const char *b, size_t len)
{
    const char *end = b + len;
    for (const char *p = b; (p = memmem(p, (size_t)(end - p), "<Part>", 6));) {
        const char *q = memmem(p, (size_t)(end - p), "</Part>", 7);
        if (!q)
            break;
        char num[32], etag[DLC__WARM_ETAG_MAX], size[32], clean[DLC__WARM_ETAG_MAX];
        const size_t n = (size_t)(q - p);
        uint8_t md5[16];
        uint32_t parts;
        if (dlc__warm_xml_field(p, n, "PartNumber", num, sizeof num) &&
            dlc__warm_xml_field(p, n, "ETag", etag, sizeof etag) &&
            dlc__warm_xml_field(p, n, "Size", size, sizeof size)) {
            clean_etag(etag, clean, sizeof clean);
            const unsigned long k = strtoul(num, NULL, 10);
            if (k >= 1 && k <= f->nparts && f->j.have[k - 1] &&
                dlc__warm_etag_parse(clean, md5, &parts) == 0 && parts == 0 &&
                memcmp(md5, f->j.md5s + 16 * (k - 1), 16) == 0 &&
                strtoull(size, NULL, 10) ==
                    (k < f->nparts ? f->part_size : f->id.size - (k - 1) * f->part_size))
                f->listed[k - 1] = 1;
        }
        p = q;
    }
}

/* After the last page: journaled parts the server does not have are sent again. */
static void end_listing(dlc__push_ctx *c, dlc__push_file *f)
{
    uint32_t lost = 0;
    for (uint32_t i = 0; i < f->nparts; i++)
        if (f->j.have[i] && !f->listed[i]) {
            f->j.have[i] = 0;
            lost++;
        }
    if (lost)
        dlc__logf(c->net.log, c->net.log_user, DLC_LOG_WARN,
                  "%s: %u journaled parts are not on the server as journaled; sending them again",
                  f->src.name, lost);
    enter_parts(c, f);
}

static dlc_status on_listed(dlc__push_ctx *c, dlc__push_req *r, char *why, size_t cap)
{
    dlc__push_file *f = r->file;
    if (r->status == 404) {
        /* NoSuchUpload: aborted, expired, or completed by a run killed before it heard so. */
        f->upload_gone = 1;
        for (uint32_t i = 0; i < f->nparts; i++)
            if (!f->j.have[i]) {
                dlc__logf(c->net.log, c->net.log_user, DLC_LOG_INFO,
                          "%s: the server no longer knows the upload of an earlier run; "
                          "starting over",
                          f->src.name);
                f->state = S3_CREATE;
                return DLC_OK;
            }
        enter_parts(c, f);
        return DLC_OK;
    }
    if (r->status == 405 || r->status == 501) {
        dlc__logf(c->net.log, c->net.log_user, DLC_LOG_INFO,
                  "%s: the server cannot list the parts of an upload (HTTP %ld); trusting the "
                  "journal",
                  f->src.name, r->status);
        f->list_unsupported = 1;
        enter_parts(c, f);
        return DLC_OK;
    }
    if (r->status != 200)
        return dlc__push_http_error(r, NULL, why, cap);
    take_listed(f, r->resp, r->resp_len);
    char more[16] = "", marker[32] = "";
    dlc__warm_xml_field(r->resp, r->resp_len, "IsTruncated", more, sizeof more);
    dlc__warm_xml_field(r->resp, r->resp_len, "NextPartNumberMarker", marker, sizeof marker);
    const unsigned long next = strtoul(marker, NULL, 10);
    if (strcmp(more, "true") == 0 && next > f->list_marker && next < f->nparts) {
        f->list_marker = (uint32_t)next;
        return DLC_OK;
    }
    end_listing(c, f);
    return DLC_OK;
}

static dlc_status on_part(dlc__push_ctx *c, dlc__push_req *r, char *why, size_t cap)
{
    dlc__push_file *f = r->file;
    const uint32_t i = r->part - 1;
    if (r->status == 404) {
        f->forget = 1;
        return dlc__errorf(DLC_EHTTP,
                           "%s: UploadPart %u: the server no longer knows the upload (HTTP 404); "
                           "a rerun starts over",
                           f->src.name, r->part);
    }
    if (r->status != 200)
        return dlc__push_http_error(r, NULL, why, cap);
    uint8_t md5[16];
    uint32_t parts = 0;
    char hex[33];
    dlc__md5_hex(r->md5, hex);
    if (strncmp(r->sse, "aws:kms", 7) == 0 || strcmp(r->sse, "customer") == 0) {
        f->forget = 1;
        return dlc__errorf(DLC_ENOSYS,
                           "%s: the bucket encrypts with %s keys, whose ETags are not the MD5 of "
                           "the bytes: a push cannot check what the server holds, and does not "
                           "upload there",
                           f->src.name, strcmp(r->sse, "customer") == 0 ? "customer" : "KMS");
    }
    if (dlc__warm_etag_parse(r->etag, md5, &parts) < 0 || parts != 0 ||
        memcmp(md5, r->md5, 16) != 0) {
        /* The server holds other bytes than those sent: send the part again, over it. */
        snprintf(why, cap, "the part's ETag %s is not the MD5 of the bytes sent (\"%s\")",
                 *r->etag ? r->etag : "(none)", hex);
        r->bad_digest = 1;
        return DLC__PUSH_RETRY;
    }
    const dlc_status rc = dlc__push_journal_part(&f->j, r->part, r->len, r->md5);
    if (rc < 0)
        return rc;
    f->out[i] = 0;
    f->inflight--;
    f->bytes_done += r->len;
    c->r->parts_uploaded++;
    return DLC_OK;
}

static dlc_status on_completed(dlc__push_ctx *c, dlc__push_req *r, char *why, size_t cap)
{
    dlc__push_file *f = r->file;
    char code[128] = "", etag[DLC__WARM_ETAG_MAX] = "";
    (void)c;
    if (r->status == 404) {
        /* The upload is gone: completed by an attempt whose answer was lost, or aborted. The
         * HEAD tells which. */
        f->state = S3_HEAD;
        return DLC_OK;
    }
    if (r->status == 400 && dlc__warm_xml_field(r->resp, r->resp_len, "Code", code, sizeof code) &&
        strncmp(code, "InvalidPart", 11) == 0)
        f->forget = 1; /* A journaled part is not on the server: the rerun starts over. */
    if (r->status != 200)
        return dlc__push_http_error(r, NULL, why, cap);
    /* S3 may answer 200 and put an error in the body once the parts are being assembled. */
    if (memmem(r->resp, r->resp_len, "<Error>", 7)) {
        r->status = 500;
        dlc__warm_xml_field(r->resp, r->resp_len, "Code", code, sizeof code);
        if (strcmp(code, "InternalError") == 0 || strcmp(code, "SlowDown") == 0)
            return dlc__push_http_error(r, NULL, why, cap);
        r->status = 200;
        return dlc__errorf(DLC_EHTTP, "%s: CompleteMultipartUpload: %s", f->src.name, code);
    }
    if (dlc__warm_xml_field(r->resp, r->resp_len, "ETag", etag, sizeof etag))
        clean_etag(etag, f->etag, sizeof f->etag);
    f->state = S3_HEAD;
    return DLC_OK;
}

/* The ETag the completed object must have: S3's multipart form from the journaled part MD5s, or,
 * when the server reports a plain MD5 (s3rver does), the MD5 of the whole file, hashed now. */
static dlc_status expected_etag(dlc__push_ctx *c, dlc__push_file *f, uint32_t server_parts,
                                char out[DLC__WARM_ETAG_MAX])
{
    if (server_parts > 0) {
        dlc__warm_multipart_etag(f->j.md5s, f->nparts, out);
        return DLC_OK;
    }
    const double t = dlc__now_s();
    const dlc_status rc = dlc__warm_file_etag(f->fd, f->path, f->id.size, 0, 0, out);
    c->r->verify_seconds += dlc__now_s() - t;
    return rc;
}

/* An object an earlier run completed is no longer what it journaled: upload it again. */
static void upload_again(dlc__push_ctx *c, dlc__push_file *f, const char *why)
{
    dlc__logf(c->net.log, c->net.log_user, DLC_LOG_INFO, "%s: %s; uploading it again", f->src.name,
              why);
    f->resumable = 0;
    f->j.complete = 0;
    f->bytes_done = 0;
    f->state = S3_CREATE;
}

static void finish(dlc__push_ctx *c, dlc__push_file *f, const char *etag, int skipped)
{
    snprintf(f->etag, sizeof f->etag, "%s", etag);
    f->finished = 1;
    f->skipped = skipped;
    f->bytes_done = f->id.size;
    c->r->files_skipped += (uint32_t)skipped;
}

/* HEAD of an object an earlier run completed: the same size and ETag, or upload it again. */
static dlc_status check_earlier(dlc__push_ctx *c, dlc__push_req *r, char *why, size_t cap)
{
    dlc__push_file *f = r->file;
    char etag[DLC__WARM_ETAG_MAX];
    uint8_t md5[16];
    uint32_t parts = 0;
    if (r->status == 404) {
        upload_again(c, f, "the object an earlier run completed is gone");
        return DLC_OK;
    }
    if (r->status != 200)
        return dlc__push_http_error(r, NULL, why, cap);
    clean_etag(r->etag, etag, sizeof etag);
    if (r->content_length != (int64_t)f->id.size || dlc__warm_etag_parse(etag, md5, &parts) < 0 ||
        parts != f->j.final_parts || memcmp(md5, f->j.final_md5, 16) != 0) {
        upload_again(c, f, "the object changed on the server since an earlier run completed it");
        return DLC_OK;
    }
    finish(c, f, etag, 1);
    return DLC_OK;
}

/* HEAD after CompleteMultipartUpload: the size and the ETag of the bytes sent, or the object is
 * deleted and the push fails. */
static dlc_status check_completed(dlc__push_ctx *c, dlc__push_req *r, char *why, size_t cap)
{
    dlc__push_file *f = r->file;
    char etag[DLC__WARM_ETAG_MAX], want[DLC__WARM_ETAG_MAX] = "";
    uint8_t md5[16];
    uint32_t parts = 0;
    if (r->status != 200)
        return dlc__push_http_error(r, "HeadObject after completing", why, cap);
    clean_etag(r->etag, etag, sizeof etag);
    if (r->content_length != (int64_t)f->id.size) {
        f->bad = dlc__errorf(DLC_ECORRUPT,
                             "%s: the completed object has %" PRId64 " bytes, the file %" PRIu64
                             "; the object was deleted",
                             f->src.name, r->content_length, f->id.size);
    } else if (dlc__warm_etag_parse(etag, md5, &parts) < 0 || (parts != 0 && parts != f->nparts)) {
        f->bad = dlc__errorf(DLC_ECORRUPT,
                             "%s: the completed object's ETag %s is not the MD5 of "
                             "%u parts (server-side encryption with KMS keys?); the object was "
                             "deleted",
                             f->src.name, etag, f->nparts);
    } else {
        const dlc_status rc = expected_etag(c, f, parts, want);
        if (rc < 0)
            return rc;
        if (strcasecmp(want, etag) == 0) {
            const dlc_status jr = dlc__push_journal_complete(&f->j, md5, parts);
            if (jr < 0)
                return jr;
            finish(c, f, etag, 0);
            return DLC_OK;
        }
        f->bad = dlc__errorf(DLC_ECORRUPT,
                             "%s: the completed object's ETag is %s, the bytes sent "
                             "make %s: the server holds other bytes; the object was deleted",
                             f->src.name, etag, want);
    }
    snprintf(f->bad_msg, sizeof f->bad_msg, "%s", dlc_errmsg());
    f->forget = 1;
    f->state = S3_DELETE;
    return DLC_OK;
}

/* HEAD before completing an upload whose every part is journaled: an object with the size and
 * ETag those parts make was completed by the earlier run; otherwise complete it, or start over
 * when the server no longer knows the upload. */
static dlc_status on_probed(dlc__push_ctx *c, dlc__push_req *r, char *why, size_t cap)
{
    dlc__push_file *f = r->file;
    char etag[DLC__WARM_ETAG_MAX], want[DLC__WARM_ETAG_MAX];
    uint8_t md5[16];
    uint32_t parts = 0;
    if (r->status != 200 && r->status != 404)
        return dlc__push_http_error(r, NULL, why, cap);
    clean_etag(r->etag, etag, sizeof etag);
    if (r->status == 200 && r->content_length == (int64_t)f->id.size &&
        dlc__warm_etag_parse(etag, md5, &parts) == 0 && (parts == 0 || parts == f->nparts)) {
        const dlc_status rc = expected_etag(c, f, parts, want);
        if (rc < 0)
            return rc;
        if (strcasecmp(want, etag) == 0) {
            dlc__logf(c->net.log, c->net.log_user, DLC_LOG_INFO,
                      "%s: an earlier run completed the upload; the object is the file",
                      f->src.name);
            const dlc_status jr = dlc__push_journal_complete(&f->j, md5, parts);
            if (jr < 0)
                return jr;
            finish(c, f, etag, 1);
            return DLC_OK;
        }
    }
    if (f->upload_gone) {
        c->r->parts_resumed -= f->nparts; /* Counted when every part seemed to be there. */
        dlc__logf(c->net.log, c->net.log_user, DLC_LOG_INFO,
                  "%s: the server no longer knows the upload of an earlier run; starting over",
                  f->src.name);
        f->state = S3_CREATE;
    } else {
        f->state = S3_PARTS; /* Nothing left to send: completes. */
    }
    return DLC_OK;
}

dlc_status dlc__push_s3_done(dlc__push_ctx *c, dlc__push_req *r, char *why, size_t cap)
{
    dlc__push_file *f = r->file;
    dlc_status rc = DLC_OK;
    switch (r->step) {
    case DLC__PUSH_ABORT:
        if (r->status != 204 && r->status != 200 && r->status != 404)
            dlc__logf(c->net.log, c->net.log_user, DLC_LOG_INFO,
                      "%s: the upload of an older version of the file could not be aborted "
                      "(HTTP %ld); its parts stay until the bucket's lifecycle rules remove them",
                      f->src.name, r->status);
        f->stale[0] = '\0';
        f->busy = 0;
        return DLC_OK;
    case DLC__PUSH_CREATE:
        rc = r->status == 200 ? on_created(c, r) : dlc__push_http_error(r, NULL, why, cap);
        break;
    case DLC__PUSH_LIST:
        rc = on_listed(c, r, why, cap);
        break;
    case DLC__PUSH_PART:
        return on_part(c, r, why, cap);
    case DLC__PUSH_COMPLETE:
        rc = on_completed(c, r, why, cap);
        break;
    case DLC__PUSH_HEAD:
        rc = check_completed(c, r, why, cap);
        break;
    case DLC__PUSH_CHECK:
        rc = check_earlier(c, r, why, cap);
        break;
    case DLC__PUSH_PROBE:
        rc = on_probed(c, r, why, cap);
        break;
    case DLC__PUSH_DELETE:
        return dlc__errorf(f->bad, "%s", f->bad_msg);
    default:
        return dlc__errorf(DLC_EINVAL, "push: an S3 answer to a GCS request");
    }
    if (rc != DLC__PUSH_RETRY)
        f->busy = 0;
    return rc;
}
