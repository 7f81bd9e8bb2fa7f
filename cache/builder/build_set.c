/* A store set's share of the builder: how the items are split among the parts, and the set's
 * identity (docs/SETS.md). Both are pure functions of the scanned sources and the options, so
 * that every machine of a build across machines, scanning the same sources, computes the same
 * ones without talking to the others. */
#include "build_internal.h"
#include "common.h"
#include "source.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

/* Items per chunk of the items' digest: each chunk is hashed on its own (by any thread) and the
 * digest is the hash of the chunks' hashes in order, so it does not depend on the threads. */
#define DIGEST_CHUNK 16384u

void dlc__build_split(uint64_t n, uint32_t parts, uint32_t part, uint64_t *first, uint64_t *end)
{
    /* I*n/N as q*I + r*I/N with n = q*N + r: exact, and no product exceeds n. */
    const uint64_t q = n / parts, r = n % parts;
    *first = q * part + r * part / parts;
    *end = q * (part + 1) + r * (part + 1) / parts;
}

/* The item's name in the digest: its path relative to its source (an ImageFolder's root, the
 * manifest's folder), which does not depend on where the sources are mounted; a tar member as
 * SHARD:MEMBER with the shard's file name alone; an absolute manifest path as written. */
static void hash_name(XXH3_state_t *h, const dlc__source_set *src, const dlc__item *it)
{
    const char *path = dlc__source_path(src, it);
    const char *rel = dlc__item_rel(it, path);
    if (!rel && it->shard != UINT32_MAX) {
        const char *shard = src->arena + src->shards[it->shard].path;
        const char *base = strrchr(shard, '/');
        base = base ? base + 1 : shard;
        XXH3_64bits_update(h, base, strlen(base));
        rel = path + strlen(shard); /* ":MEMBER" */
    }
    if (!rel)
        rel = path;
    XXH3_64bits_update(h, rel, strlen(rel) + 1);
}

static int64_t stat_mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* The mask's size and mtime, as the source digest takes them (0 when it has none). */
static dlc_status mask_stat(const char *masks, const dlc__item *it, const char *path, char **buf,
                            size_t *cap, uint8_t out[16])
{
    const char *rel = dlc__item_rel(it, path);
    struct stat st;
    memset(out, 0, 16);
    if (it->skip != DLC__SKIP_NONE || !rel)
        return DLC_OK;
    const dlc_status rc = dlc__build_mask_path(masks, rel, buf, cap);
    if (rc < 0)
        return rc;
    if (stat(*buf, &st) == 0) {
        dlc__st64(out, (uint64_t)st.st_size);
        dlc__st64(out + 8, (uint64_t)stat_mtime_ns(&st));
    }
    return DLC_OK;
}

/* One item: name, size, mtime and label; the mask; the column values. */
static dlc_status hash_one(XXH3_state_t *h, const dlc__source_set *src, const char *masks, size_t i,
                           char **mbuf, size_t *mcap)
{
    const dlc__item *it = &src->items[i];
    dlc__source_data d;
    uint8_t b[24];
    dlc__source_stat(src, i, &d);
    hash_name(h, src, it);
    dlc__st64(b, d.file_size);
    dlc__st64(b + 8, (uint64_t)d.mtime_ns);
    dlc__st64(b + 16, (uint64_t)it->label);
    XXH3_64bits_update(h, b, sizeof b);
    if (masks) {
        const dlc_status rc = mask_stat(masks, it, dlc__source_path(src, it), mbuf, mcap, b);
        if (rc < 0)
            return rc;
        XXH3_64bits_update(h, b, 16);
    }
    for (uint32_t c = 0; c < src->nscalars; c++) {
        dlc__st64(b, dlc__source_cell(src, i, c));
        XXH3_64bits_update(h, b, 8);
    }
    for (uint32_t k = 0; k < src->nlists; k++) {
        size_t n;
        const uint64_t *v = dlc__source_list(src, i, k, &n);
        dlc__st64(b, n);
        XXH3_64bits_update(h, b, 8);
        for (size_t e = 0; e < n; e++) {
            dlc__st64(b, v[e]);
            XXH3_64bits_update(h, b, 8);
        }
    }
    return DLC_OK;
}

typedef struct digest_run {
    const dlc__source_set *src;
    const char *masks;
    size_t nchunks;
    uint64_t *chunks; /* each chunk's hash */
    atomic_size_t next;
    atomic_int failed; /* out of memory */
} digest_run;

static void *digest_thread(void *arg)
{
    digest_run *r = arg;
    XXH3_state_t *h = XXH3_createState();
    char *mbuf = NULL;
    size_t mcap = 0;
    if (!h)
        atomic_store(&r->failed, 1);
    while (h && !atomic_load(&r->failed)) {
        const size_t c = atomic_fetch_add(&r->next, 1);
        if (c >= r->nchunks)
            break;
        const size_t lo = c * DIGEST_CHUNK;
        const size_t hi = lo + DIGEST_CHUNK < r->src->count ? lo + DIGEST_CHUNK : r->src->count;
        XXH3_64bits_reset(h);
        for (size_t i = lo; i < hi; i++)
            if (hash_one(h, r->src, r->masks, i, &mbuf, &mcap) < 0)
                atomic_store(&r->failed, 1);
        r->chunks[c] = XXH3_64bits_digest(h);
    }
    XXH3_freeState(h);
    free(mbuf);
    return NULL;
}

dlc_status dlc__build_items_digest(const dlc__source_set *src, const char *masks, uint32_t threads,
                                   uint64_t *digest)
{
    dlc_status rc = DLC_OK;
    digest_run r = {.src = src, .masks = masks};
    r.nchunks = (src->count + DIGEST_CHUNK - 1) / DIGEST_CHUNK;
    atomic_init(&r.next, 0);
    atomic_init(&r.failed, 0);
    r.chunks = calloc(r.nchunks ? r.nchunks : 1, sizeof *r.chunks);
    if (!r.chunks)
        return dlc__errorf(-ENOMEM, "build: out of memory");
    /* stat() waits on the file system (a network one above all), so threads help even where
     * the data is small; more threads than chunks would have nothing to do. */
    uint32_t t = threads ? threads : 1;
    if (t > r.nchunks)
        t = r.nchunks ? (uint32_t)r.nchunks : 1;
    pthread_t tid[256];
    uint32_t started = 0;
    for (uint32_t k = 1; k < t && k < 256; k++)
        started += pthread_create(&tid[started], NULL, digest_thread, &r) == 0;
    digest_thread(&r);
    for (uint32_t k = 0; k < started; k++)
        pthread_join(tid[k], NULL);
    uint8_t b[8];
    XXH3_state_t *h = XXH3_createState();
    if (!h || atomic_load(&r.failed)) {
        rc = dlc__errorf(-ENOMEM, "build: out of memory");
    } else {
        XXH3_64bits_reset(h);
        for (size_t c = 0; c < r.nchunks; c++) {
            dlc__st64(b, r.chunks[c]);
            XXH3_64bits_update(h, b, 8);
        }
        *digest = XXH3_64bits_digest(h);
    }
    XXH3_freeState(h);
    free(r.chunks);
    return rc;
}

/* Append a u32 to the set_id's hash. */
static void put32(XXH3_state_t *h, uint32_t v)
{
    uint8_t b[4];
    dlc__st32(b, v);
    XXH3_64bits_update(h, b, 4);
}

static void put_str(XXH3_state_t *h, const char *s)
{
    XXH3_64bits_update(h, s ? s : "", s ? strlen(s) + 1 : 1);
}

/* The record's fields as the writers get them. */
static void put_fields(XXH3_state_t *h, const dlc__build_job *job)
{
    put32(h, job->nfields);
    for (uint32_t i = 0; i < job->nfields; i++) {
        const dlc_field_spec *f = &job->fields[i];
        put_str(h, f->name);
        put32(h, f->kind);
        put32(h, f->dtype);
        put32(h, f->encoding);
        put32(h, f->flags);
        put32(h, f->ndim);
        for (uint32_t d = 0; d < DLC_MAX_DIMS; d++)
            put32(h, f->shape[d]);
        put_str(h, f->link);
        /* The quality changes the bytes of a JPEG field only. */
        put32(h, f->encoding == DLC_ENCODING_JPEG ? (uint32_t)f->quality : 0);
    }
}

dlc_status dlc__build_set_id(uint64_t items_digest, const dlc__build_job *job, uint64_t *out)
{
    XXH3_state_t *h = XXH3_createState();
    if (!h)
        return dlc__errorf(-ENOMEM, "build: out of memory");
    const dlc_build_options *o = &job->o;
    uint8_t b[16];
    XXH3_64bits_reset(h);
    put_str(h, "dlcache set_id 1");
    dlc__st64(b, items_digest);
    dlc__st64(b + 8, job->src.count);
    XXH3_64bits_update(h, b, 16);
    put32(h, job->parts);
    put32(h, o->size);
    put32(h, (uint32_t)o->center_crop);
    put32(h, o->encoding);
    put32(h, o->encoding == DLC_ENCODING_JPEG ? (uint32_t)o->quality : 0);
    put32(h, o->channels);
    put32(h, job->plan.channels);
    put32(h, job->plan.masks != NULL);
    put32(h, job->plan.masks ? job->plan.mask_encoding : 0);
    put32(h, job->plan.masks ? job->plan.mask_channels : 0);
    put_fields(h, job);
    put32(h, job->num_labels);
    for (uint32_t l = 0; l < job->num_labels; l++)
        put_str(h, job->names[l]);
    *out = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return DLC_OK;
}
