/* dlc_warm_push(): the files to upload (a store, or a set's shards and then its index), their
 * destinations, resume journals and part sizes; then warm_push_send.c sends them on the transfer
 * engine (warm_xfer.h); then the journals are removed once every file is on the server and
 * checked. */
#include "common.h"
#include "warm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define MAX_PART_SIZE (5ull << 30) /* S3's largest part. */

/* The defaults, at this library's size: dlc_warm_push_options_init_sized() gives the caller its
 * part. */
static void warm_push_options_defaults(dlc_warm_push_options *o)
{
    memset(o, 0, sizeof *o);
    o->part_size = DLC__PUSH_DEFAULT_PART;
}

void dlc_warm_push_options_init_sized(dlc_warm_push_options *o, size_t size)
{
    dlc_warm_push_options d;
    warm_push_options_defaults(&d);
    dlc__options_init(o, size, &d, sizeof d);
}

static dlc_status check_options(dlc__push_ctx *c, const char *path, const char *url)
{
    if (!path || !*path || !url || !*url)
        return dlc__errorf(DLC_EINVAL, "dlc_warm_push: path and url are required");
    if (strncmp(url, "s3://", 5) != 0 && strncmp(url, "gs://", 5) != 0) {
        char shown[1024];
        return dlc__errorf(DLC_EINVAL, "%s: a push goes to s3://BUCKET/KEY or gs://BUCKET/OBJECT",
                           dlc_warm_redact_url(url, shown, sizeof shown));
    }
    dlc_warm_options *n = &c->net;
    if (n->connections == 0)
        n->connections = DLC__WARM_DEFAULT_CONNECTIONS;
    if (n->connections > DLC__WARM_MAX_CONNECTIONS)
        return dlc__errorf(DLC_EINVAL, "dlc_warm_push: %u connections (at most %d)", n->connections,
                           DLC__WARM_MAX_CONNECTIONS);
    const uint64_t ps = c->opt->part_size ? c->opt->part_size : DLC__PUSH_DEFAULT_PART;
    if (ps < DLC__WARM_MIN_CHUNK || ps > MAX_PART_SIZE)
        return dlc__errorf(DLC_EINVAL,
                           "dlc_warm_push: part size %" PRIu64 " is outside 64 KiB .. 5 GiB", ps);
    return dlc__warm_check_net(n, "dlc_warm_push");
}

/* The part size of a new upload of @p size bytes: the option's, raised so that the file needs
 * at most S3's 10,000 parts, and for GCS a multiple of 256 KiB. */
static uint64_t plan_part_size(const dlc__push_ctx *c, const dlc__push_file *f)
{
    uint64_t ps = c->opt->part_size ? c->opt->part_size : DLC__PUSH_DEFAULT_PART;
    const uint64_t min = (f->id.size + DLC__PUSH_MAX_PARTS - 1) / DLC__PUSH_MAX_PARTS;
    if (ps < min) {
        ps = (min + (1u << 20) - 1) & ~((1ull << 20) - 1);
        dlc__logf(c->net.log, c->net.log_user, DLC_LOG_INFO,
                  "%s: %" PRIu64 " bytes: parts of %" PRIu64 " bytes, to stay within %d parts",
                  f->path, f->id.size, ps, DLC__PUSH_MAX_PARTS);
    }
    if (f->src.kind == DLC__WARM_GCS)
        ps = (ps + DLC__PUSH_GCS_QUANTUM - 1) / DLC__PUSH_GCS_QUANTUM * DLC__PUSH_GCS_QUANTUM;
    return ps;
}

/* Open file @p f->path, resolve its destination @p url and open its journal. */
static dlc_status prepare_file(dlc__push_ctx *c, dlc__push_file *f, const char *url)
{
    struct stat st;
    /* Checked before it is read: a FIFO (or a device) is refused, never waited on. */
    f->fd = dlc__open_regular(f->path, 0, NULL, &st);
    if (f->fd < 0) {
        const dlc_status rc = f->fd;
        f->fd = -1;
        return rc;
    }
    dlc_status rc = dlc__warm_source_init(&f->src, url, &c->net);
    if (rc < 0)
        return rc;
    f->id =
        (dlc__push_ident){.size = (uint64_t)st.st_size,
                          .inode = (uint64_t)st.st_ino,
                          .mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
                          .dest = XXH3_64bits(f->src.name, strlen(f->src.name))};
    char jpath[4096];
    rc = dlc__push_journal_path(c->opt->state_dir, f->path, f->src.name, jpath, sizeof jpath);
    int matched = 0;
    if (rc == DLC_OK)
        rc = dlc__push_journal_open(&f->j, jpath, &f->id, &matched, f->stale, sizeof f->stale);
    if (rc < 0)
        return rc;
    if (matched && (c->net.flags & DLC_WARM_NO_RESUME)) {
        /* Its upload is abandoned: abort it rather than leave its parts to be billed. */
        if (!f->j.complete)
            snprintf(f->stale, sizeof f->stale, "%s", f->j.upload_id);
        matched = 0;
    }
    f->resumable = matched;
    f->part_size = matched ? f->j.part_size : plan_part_size(c, f);
    if (f->src.kind == DLC__WARM_GCS)
        f->stale[0] = '\0'; /* A session nobody resumes expires by itself within a week. */
    const uint64_t n = f->id.size ? (f->id.size + f->part_size - 1) / f->part_size : 1;
    f->nparts = (uint32_t)n;
    c->r->bytes += f->id.size;
    c->r->parts += n;
    return DLC_OK;
}

/* Join the directory @p dir and @p name with one '/'. */
static char *join_path(const char *dir, const char *name)
{
    const size_t n = strlen(dir);
    char *u = malloc(n + strlen(name) + 2);
    if (u)
        sprintf(u, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name);
    return u;
}

/* The URL of the object @p name under @p url: the one URL join of the library,
 * dlc__url_child(), which the downloads use too (issue 32). */
static char *child_url(const char *url, const char *name)
{
    const size_t cap = strlen(url) + strlen(name) + 2;
    char *u = malloc(cap);
    if (u && dlc__url_child(url, name, u, cap) >= cap) {
        free(u);
        u = NULL;
    }
    return u;
}

static dlc_status add_file(dlc__push_ctx *c, const char *path, const char *url, int last)
{
    dlc__push_file *f = &c->files[c->nfiles++];
    f->fd = -1;
    f->j.fd = f->j.dir_fd = -1;
    f->last = last;
    f->path = strdup(path);
    if (!f->path)
        return dlc__errorf(-ENOMEM, "push: out of memory");
    return prepare_file(c, f, url);
}

/* A set: every shard the index names (each as big as the index says), then the index. */
static dlc_status plan_set(dlc__push_ctx *c, const char *dir, const char *url)
{
    dlc__warm_set_list list;
    dlc_status rc = dlc__warm_set_list_read(dir, &list);
    if (rc < 0)
        return rc;
    c->files = calloc(list.n + 1, sizeof *c->files);
    if (!c->files)
        rc = dlc__errorf(-ENOMEM, "push: out of memory");
    for (uint32_t i = 0; rc == DLC_OK && i <= list.n; i++) {
        const char *name = i < list.n ? list.names[i] : DLC__WARM_SET_INDEX;
        char *p = join_path(dir, name), *u = child_url(url, name);
        rc = p && u ? add_file(c, p, u, i == list.n) : dlc__errorf(-ENOMEM, "push: out of memory");
        if (rc == DLC_OK && i < list.n && c->files[i].id.size != list.bytes[i])
            rc = dlc__errorf(DLC_ECORRUPT,
                             "%s: %" PRIu64 " bytes, the set's index says %" PRIu64
                             ": not the shard the index was joined with",
                             p, c->files[i].id.size, list.bytes[i]);
        free(p);
        free(u);
    }
    dlc__warm_set_list_free(&list);
    c->r->is_set = 1;
    return rc;
}

/* A single file: to @p url, or under it by the file's name when @p url ends with '/'. */
static dlc_status plan_file(dlc__push_ctx *c, const char *path, const char *url)
{
    c->files = calloc(1, sizeof *c->files);
    if (!c->files)
        return dlc__errorf(-ENOMEM, "push: out of memory");
    if (url[strlen(url) - 1] != '/')
        return add_file(c, path, url, 0);
    const char *slash = strrchr(path, '/');
    char *u = child_url(url, slash ? slash + 1 : path);
    if (!u)
        return dlc__errorf(-ENOMEM, "push: out of memory");
    const dlc_status rc = add_file(c, path, u, 0);
    free(u);
    return rc;
}

static void release(dlc__push_ctx *c, dlc_status rc)
{
    for (size_t i = 0; c->files && i < c->nfiles; i++) {
        dlc__push_file *f = &c->files[i];
        /* The journals go once everything is on the server; after a failure they stay for the
         * rerun, except where the upload itself is gone. */
        dlc__push_journal_close(&f->j, rc == DLC_OK || f->forget);
        if (f->fd >= 0)
            close(f->fd);
        dlc__warm_source_free(&f->src);
        free(f->path);
        free(f->out);
        free(f->listed);
    }
    free(c->files);
}

dlc_status dlc_warm_push(const char *path, const char *url, const dlc_warm_push_options *opt_in,
                         dlc_warm_push_result *res)
{
    dlc_warm_push_options opt;
    dlc_warm_push_options_init(&opt);
    dlc_warm_push_result r;
    memset(&r, 0, sizeof r);
    dlc__push_ctx c = {.opt = &opt, .r = &r, .t0 = dlc__now_s()};
    dlc_warm_options_init(&c.net);
    dlc_status rc = DLC_OK;
    if (opt_in)
        rc = dlc__options_take(&opt, sizeof opt, opt_in, "dlc_warm_push_options",
                               "dlc_warm_push_options_init");
    if (rc == DLC_OK && opt.net)
        rc = dlc__options_take(&c.net, sizeof c.net, opt.net, "dlc_warm_push_options.net",
                               "dlc_warm_options_init");
    /* The caller's network options need not outlive this call; the copy in c.net is used. */
    opt.net = NULL;
    int curl_inited = 0;
    struct stat st;
    if (rc == DLC_OK)
        rc = check_options(&c, path, url);
    if (rc == DLC_OK && stat(path, &st) < 0)
        rc = dlc__errorf(-errno, "%s: %s", path, strerror(errno));
    if (rc == DLC_OK) {
        curl_inited = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
        if (!curl_inited)
            rc = dlc__errorf(DLC_ENOSYS, "dlc_warm_push: libcurl failed to initialize");
    }
    if (rc == DLC_OK)
        rc = S_ISDIR(st.st_mode) ? plan_set(&c, path, url) : plan_file(&c, path, url);
    r.files = (uint32_t)c.nfiles;
    if (rc == DLC_OK)
        rc = dlc__push_run(&c);
    if (c.nfiles > 0)
        snprintf(r.etag, sizeof r.etag, "%s", c.files[c.nfiles - 1].etag);
    dlc__errsave es;
    dlc__err_save(&es);
    release(&c, rc);
    if (curl_inited)
        curl_global_cleanup();
    r.seconds = dlc__now_s() - c.t0;
    if (res)
        *res = r;
    return rc < 0 ? dlc__err_restore(&es, rc) : rc;
}
