/* The builder's bookkeeping around the pipeline: the "build" metadata text,
 * the report. */
#include "build_internal.h"

#include "common.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The defaults, at this library's size: dlc_build_options_init_sized() gives the caller its part.
 */
static void build_options_defaults(dlc_build_options *o)
{
    memset(o, 0, sizeof *o);
    o->size = 256;
    o->center_crop = 1;
    o->encoding = DLC_ENCODING_RAW;
    o->quality = 90;
    o->channels = 3;
    o->mask_encoding = -1;
}

void dlc_build_options_init_sized(dlc_build_options *o, size_t size)
{
    dlc_build_options d;
    build_options_defaults(&d);
    dlc__options_init(o, size, &d, sizeof d);
}

void dlc_build_report_free(dlc_build_report *r)
{
    if (!r)
        return;
    for (uint64_t i = 0; i < r->skipped; i++) {
        free((char *)r->skips[i].path);
        free((char *)r->skips[i].reason);
    }
    free(r->skips);
    free(r->built);
    free(r);
}

dlc_status dlc__skips_add(dlc_build_skip **skips, size_t *n, size_t *cap, const char *path,
                          const char *reason)
{
    if (*n == *cap) {
        const size_t c = *cap ? *cap * 2 : 16;
        dlc_build_skip *p = realloc(*skips, c * sizeof *p);
        if (!p)
            return dlc__errorf(-ENOMEM, "build report: out of memory");
        *skips = p;
        *cap = c;
    }
    char *a = strdup(path), *b = strdup(reason);
    if (!a || !b) {
        free(a);
        free(b);
        return dlc__errorf(-ENOMEM, "build report: out of memory");
    }
    (*skips)[*n].path = a;
    (*skips)[*n].reason = b;
    (*n)++;
    return DLC_OK;
}

/* A growable text buffer for the JSON document. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* dlc__json_quote()'s writer into an sbuf. */
static void sb_put_cb(void *user, const char *p, size_t n)
{
    sb_put(user, p, n);
}

/* A JSON string, quoted as every other JSON the library and the tools write (common/json.c). */
static void sb_json_str(sbuf *b, const char *s)
{
    dlc__json_quote(s ? s : "", sb_put_cb, b);
}

/* The options of the fields, only where they are not the defaults: the "build" text of a store
 * of RGB images and labels stays what it was. */
static void json_field_options(sbuf *b, const dlc_build_options *f)
{
    if (f->channels == DLC_BUILD_CHANNELS_KEEP)
        sb_printf(b, ",\"channels\":\"keep\"");
    else if (f->channels != 3)
        sb_printf(b, ",\"channels\":%u", f->channels);
    if (!f->masks)
        return;
    char abs[PATH_MAX];
    sb_put(b, ",\"masks\":", 9);
    sb_json_str(b, realpath(f->masks, abs) ? abs : f->masks);
    if (f->mask_encoding >= 0)
        sb_printf(b, ",\"mask_encoding\":\"%s\"",
                  f->mask_encoding == DLC_ENCODING_PNG ? "png" : "raw");
}

/* Where this store stands in its set: part, parts, set_id and its items. */
static void json_set(sbuf *b, const dlc__build_job *job, const dlc__build_part *part)
{
    if (!job->parts)
        return;
    sb_printf(b,
              ",\"set\":{\"part\":%u,\"parts\":%u,\"set_id\":\"%016llx\",\"first_item\":%llu,"
              "\"end_item\":%llu,\"items\":%llu}",
              part->index, job->parts, (unsigned long long)job->set_id,
              (unsigned long long)part->first, (unsigned long long)part->end,
              (unsigned long long)job->src.count);
}

char *dlc__build_json(const dlc__build_job *job, const dlc__build_part *part, double seconds)
{
    const dlc_build_options *o = &job->o;
    sbuf b = {0};
    /* SOURCE_DATE_EPOCH lets a reproducible build pin the date it records. */
    time_t now = time(NULL);
    const char *sde = getenv("SOURCE_DATE_EPOCH");
    if (sde && *sde) {
        char *end;
        const long long v = strtoll(sde, &end, 10);
        if (*end == '\0' && v >= 0)
            now = (time_t)v;
    }
    struct tm tm;
    char date[32] = "";
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);

    sb_put(&b, "{\"tool\":", 8);
    sb_json_str(&b, "dlc_build");
    sb_put(&b, ",\"version\":", 11);
    sb_json_str(&b, dlc_version());
    sb_put(&b, ",\"command\":", 11);
    if (o->command)
        sb_json_str(&b, o->command);
    else
        sb_put(&b, "null", 4);
    sb_put(&b, ",\"date\":", 8);
    sb_json_str(&b, date);
    sb_printf(&b, ",\"options\":{\"size\":%u,\"crop\":\"%s\",\"encoding\":\"%s\"", o->size,
              o->center_crop ? "center" : "none",
              o->encoding == DLC_ENCODING_JPEG ? "jpeg" : "raw");
    if (o->encoding == DLC_ENCODING_JPEG)
        sb_printf(&b, ",\"quality\":%d", o->quality);
    json_field_options(&b, &job->o);
    sb_printf(&b, ",\"strict\":%s,\"threads\":%u}", o->strict ? "true" : "false", job->threads);
    sb_put(&b, ",\"sources\":[", 12);
    for (size_t i = 0; i < job->nsources; i++) {
        char abs[PATH_MAX];
        if (i)
            sb_put(&b, ",", 1);
        sb_json_str(&b, realpath(job->sources[i], abs) ? abs : job->sources[i]);
    }
    sb_printf(&b, "],\"items\":%llu,\"count\":%llu,\"skipped\":%llu,\"seconds\":%.3f",
              (unsigned long long)(part->end - part->first), (unsigned long long)part->count,
              (unsigned long long)part->skipped, seconds);
    json_set(&b, job, part);
    sb_put(&b, "}", 1);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
