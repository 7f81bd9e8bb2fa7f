/* Opening a store set (docs/FORMAT.md, "Store sets"): its index, then every shard with all the
 * checks of a store, then each shard against the index, so that the union presented through
 * include/dlcache/store.h is exactly what the index promises. Reads go through
 * cache/store/store_read.c, which finds the shard of a record with dlc__set_shard_of(). */
#include "common.h"
#include "store_format.h"
#include "store_set.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* The shard's name: its path after the set's directory and the slash. */
static const char *shard_name(const dlc_store *s, uint32_t k)
{
    const dlc_store *sh = dlc__set_shard_at(s, k);
    if (!sh && s->lazy_index) /* Streamed, and not attached now: the index names it. */
        return s->lazy_index->shards[k].name;
    if (!sh)
        return "?";
    /* A union's files are not under its name: they are named by their own paths. */
    const size_t n = strlen(s->path);
    return strncmp(sh->path, s->path, n) == 0 && sh->path[n] == '/' ? sh->path + n + 1 : sh->path;
}

/* @p msg without a leading "PATH: ", when it has one: the caller names the file itself. */
static const char *after_path(const char *msg, const char *path)
{
    const size_t n = strlen(path);
    return strncmp(msg, path, n) == 0 && strncmp(msg + n, ": ", 2) == 0 ? msg + n + 2 : msg;
}

void dlc__record_where(const dlc_store *s, uint32_t file, uint64_t index, char *buf, size_t cap)
{
    if (!s->shards || file >= s->num_shards) {
        snprintf(buf, cap, "%s: record %" PRIu64, s->path, index);
        return;
    }
    snprintf(buf, cap, "%s: record %" PRIu64 " (record %" PRIu64 " of shard %s)", s->path, index,
             index - s->firsts[file], shard_name(s, file));
}

dlc_status dlc__set_shard_msg(const dlc_store *s, uint32_t k, const char *msg, dlc_status rc)
{
    /* The shard said "SHARD: record L: reason"; say "SET: record G (record L of shard NAME):
     * reason", or "SET: shard NAME: reason" for what is not about one record. Copied first:
     * @p msg may be dlc_errmsg()'s buffer, which dlc__errorf() writes. */
    char copy[1024], where[PATH_MAX + 160];
    snprintf(copy, sizeof copy, "%s", msg);
    const dlc_store *sh = dlc__set_shard_at(s, k);
    const char *rest = sh ? after_path(copy, sh->path) : copy;
    if (rest != copy && strncmp(rest, "record ", 7) == 0) {
        char *end = NULL;
        const unsigned long long local = strtoull(rest + 7, &end, 10);
        if (end && end != rest + 7 && strncmp(end, ": ", 2) == 0 && local < sh->info.count) {
            dlc__record_where(s, k, s->firsts[k] + local, where, sizeof where);
            return dlc__errorf(rc, "%s: %s", where, end + 2);
        }
    }
    return dlc__errorf(rc, "%s: shard %s: %s", s->path, shard_name(s, k), rest);
}

dlc_status dlc__set_shard_error(const dlc_store *s, uint32_t k, uint64_t index, dlc_status rc)
{
    char copy[1024], lead[PATH_MAX + 64], where[PATH_MAX + 160];
    snprintf(copy, sizeof copy, "%s", dlc_errmsg());
    const dlc_store *sh = dlc__set_shard_at(s, k);
    if (!sh)
        return dlc__errorf(rc, "%s: shard %s: %s", s->path, shard_name(s, k), copy);
    snprintf(lead, sizeof lead, "%s: record %" PRIu64 ": ", sh->path, index - s->firsts[k]);
    const size_t n = strlen(lead);
    const char *why = strncmp(copy, lead, n) == 0 ? copy + n : after_path(copy, sh->path);
    dlc__record_where(s, k, index, where, sizeof where);
    return dlc__errorf(rc, "%s: %s", where, why);
}

/* A directory without an index: say so, and what to do when it holds parts. */
static dlc_status no_index(const char *dir)
{
    int parts = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        parts += strncmp(e->d_name, "part-", 5) == 0 && !strstr(e->d_name, ".tmp-");
    if (d)
        closedir(d);
    if (parts)
        return dlc__errorf(DLC_EVERSION,
                           "%s: not a store or a set: no %s in it (it holds %d part-* files: "
                           "join them into a set with dlc_set_join() once every part is built)",
                           dir, DLC__SET_INDEX_NAME, parts);
    return dlc__errorf(DLC_EVERSION, "%s: not a store or a set: no %s in %s", dir,
                       DLC__SET_INDEX_NAME, dir);
}

/* The shard's labels are the index's, byte for byte. */
static dlc_status check_labels(const dlc_store *s, const dlc_store *sh, const dlc__set_index *x,
                               uint32_t k)
{
    const void *v = NULL;
    size_t n = 0;
    (void)dlc_store_meta(sh, DLC__META_LABELS, &v, &n);
    if (sh->info.num_labels != x->num_labels || n != x->labels_bytes ||
        (n && memcmp(v, x->labels, n) != 0))
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: shard %s: its %u labels (%zu bytes of names) differ from the "
                           "index's %u (%u bytes)",
                           s->path, shard_name(s, k), sh->info.num_labels, n, x->num_labels,
                           x->labels_bytes);
    return DLC_OK;
}

dlc_status dlc__set_check_shard(const dlc_store *s, const dlc_store *sh, const dlc__set_index *x,
                                uint32_t k, dlc__set_part *part, const dlc__set_part *prev,
                                int follow)
{
    dlc_status rc = DLC_OK;
    const dlc__set_shard *e = &x->shards[k];
    const char *name = shard_name(s, k);
    FAIL_IF(sh->info.format_version != DLC_STORE_FORMAT_VERSION, DLC_ECORRUPT,
            "%s: shard %s: a version %u store cannot be a shard", s->path, name,
            sh->info.format_version);
    const void *v = NULL;
    size_t n = 0;
    FAIL_IF(dlc_store_meta(sh, DLC__META_SET_PART, &v, &n) != DLC_OK, DLC_ECORRUPT,
            "%s: shard %s: not a part of a set (no \"%s\" record): another store put in its place?",
            s->path, name, DLC__META_SET_PART);
    CHECK(dlc__set_part_decode(v, n, sh->path, part));
    FAIL_IF(part->part != k || part->parts != x->num_shards, DLC_ECORRUPT,
            "%s: shard %s: it is part %u of %u, the index lists it as shard %u of %u", s->path,
            name, part->part, part->parts, k, x->num_shards);
    FAIL_IF(part->set_id != x->set_id, DLC_ECORRUPT,
            "%s: shard %s: built from other sources or options than the set (set_id %016" PRIx64
            ", the index's %016" PRIx64 ")",
            s->path, name, part->set_id, x->set_id);
    FAIL_IF(follow && !dlc__set_items_follow(prev, part), DLC_ECORRUPT,
            "%s: shard %s: built from source items [%" PRIu64 ", %" PRIu64
            "), which do not follow the shard before it (ending at %" PRIu64 ")",
            s->path, name, part->first_item, part->end_item, prev ? prev->end_item : 0);
    FAIL_IF(sh->info.count != e->count, DLC_ECORRUPT,
            "%s: shard %s: %" PRIu64 " records, the index says %" PRIu64, s->path, name,
            sh->info.count, e->count);
    FAIL_IF(sh->info.content_digest != e->content_digest, DLC_ECORRUPT,
            "%s: shard %s: content digest %016" PRIx64 ", the index says %016" PRIx64
            " (the shard was rebuilt or replaced after the set was joined)",
            s->path, name, sh->info.content_digest, e->content_digest);
    FAIL_IF(sh->file_size != e->file_bytes, DLC_ECORRUPT,
            "%s: shard %s: %" PRIu64 " bytes, the index says %" PRIu64, s->path, name,
            sh->file_size, e->file_bytes);
    CHECK(check_labels(s, sh, x, k));
fail:
    return rc;
}

/* The index's schema must be the union of the shards' (the union is what a single store of
 * the same records would have, and what join wrote). */
static dlc_status check_schema(const dlc_store *s, const dlc__set_index *x,
                               const dlc__schema_merge *m)
{
    if (m->num_fields != x->num_fields)
        return dlc__errorf(DLC_ECORRUPT, "%s: corrupt: %s: %u fields, the shards have %u", s->path,
                           DLC__SET_INDEX_NAME, x->num_fields, m->num_fields);
    for (uint32_t i = 0; i < x->num_fields; i++) {
        uint8_t a[DLC__SCHEMA_ENTRY_SIZE], b[DLC__SCHEMA_ENTRY_SIZE];
        dlc__schema_entry_store(a, &x->fields[i]);
        dlc__schema_entry_store(b, &m->fields[i]);
        if (memcmp(a, b, sizeof a) != 0)
            return dlc__errorf(DLC_ECORRUPT,
                               "%s: corrupt: %s: field %u \"%s\" is not the union of the shards' "
                               "(flags 0x%x, max %ux%u, %" PRIu64 " bytes; the shards make flags "
                               "0x%x, max %ux%u, %" PRIu64 " bytes)",
                               s->path, DLC__SET_INDEX_NAME, i, x->fields[i].name,
                               x->fields[i].flags, x->fields[i].max_dim0, x->fields[i].max_dim1,
                               x->fields[i].max_size, m->fields[i].flags, m->fields[i].max_dim0,
                               m->fields[i].max_dim1, m->fields[i].max_size);
    }
    return DLC_OK;
}

/* Open every shard the index lists, in order, and check each one against it. */
static dlc_status open_shards(dlc_store *s, const dlc__set_index *x, uint32_t flags)
{
    dlc_status rc = DLC_OK;
    char *path = NULL;
    dlc__schema_merge m = {0};
    dlc__set_part prev = {0}, part;
    for (uint32_t k = 0; k < x->num_shards; k++) {
        const char *name = x->shards[k].name;
        free(path);
        path = NULL;
        FAIL_IF(!(path = dlc__set_path(s->path, "/", name)), -ENOMEM, "%s: out of memory", s->path);
        rc = dlc__store_open_file(path, flags, &s->shards[k]);
        FAIL_IF(rc == -ENOENT, rc, "%s: shard %s is missing (%s lists %u shards)", s->path, name,
                DLC__SET_INDEX_NAME, x->num_shards);
        if (rc < 0) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", after_path(dlc_errmsg(), path));
            FAIL_IF(1, rc, "%s: shard %s: %s", s->path, name, msg);
        }
        s->shards[k]->file_no = k;
        s->firsts[k] = x->shards[k].first;
        CHECK(dlc__set_check_shard(s, s->shards[k], x, k, &part, k ? &prev : NULL, 1));
        CHECK(dlc__set_merge_add(&m, s->shards[k], s->path, name, DLC_ECORRUPT));
        prev = part;
    }
    s->firsts[x->num_shards] = x->count;
    CHECK(check_schema(s, x, &m));
    /* The index's schema, which is the merge's but for the smallest images: the index does not
     * record them (an old library reads a new set), the shards do. */
    memcpy(s->fields, m.fields, (size_t)m.num_fields * sizeof *s->fields);
fail:
    free(path);
    return rc;
}

dlc_status dlc__set_index_info(dlc_store *s, const dlc__set_index *x)
{
    const uint32_t nl = x->num_labels;
    s->labels = calloc(1, x->labels_bytes + 1u);
    s->label_names = calloc(nl + 1u, sizeof *s->label_names);
    s->label_counts = calloc(nl + 1u, sizeof *s->label_counts);
    if (!s->labels || !s->label_names || !s->label_counts)
        return dlc__errorf(-ENOMEM, "%s: out of memory for %u labels", s->path, nl);
    if (x->labels_bytes)
        memcpy(s->labels, x->labels, x->labels_bytes);
    for (size_t i = 0, off = 0; i < nl; i++) {
        s->label_names[i] = s->labels + off;
        off += strlen(s->labels + off) + 1;
    }
    s->info = (dlc_store_info){
        .format_version = DLC_STORE_FORMAT_VERSION,
        .count = x->count,
        .num_labels = nl,
        .num_fields = x->num_fields,
        .label_field = DLC_NO_FIELD,
    };
    for (uint32_t i = 0; i < x->num_fields; i++)
        if (s->fields[i].flags & DLC_FIELD_LABEL)
            s->info.label_field = i;
    dlc__store_image_info(s);
    /* XXH3 over the shards' digests, and their bytes: the index's, which every shard is checked
     * against before it is used. */
    XXH3_state_t *digest = XXH3_createState();
    if (!digest)
        return dlc__errorf(-ENOMEM, "%s: out of memory", s->path);
    XXH3_64bits_reset(digest);
    for (uint32_t k = 0; k < x->num_shards; k++) {
        uint8_t le[8];
        dlc__st64(le, x->shards[k].content_digest);
        XXH3_64bits_update(digest, le, sizeof le);
        s->info.file_bytes += x->shards[k].file_bytes;
    }
    s->info.content_digest = XXH3_64bits_digest(digest);
    XXH3_freeState(digest);
    s->file_size = s->info.file_bytes;
    return DLC_OK;
}

/* The union of a set opened whole: what the index says, and what only the shards know (skipped
 * items, payload bytes, label counts), summed. */
static dlc_status set_info(dlc_store *s, const dlc__set_index *x)
{
    const dlc_status rc = dlc__set_index_info(s, x);
    if (rc != DLC_OK)
        return rc;
    for (uint32_t k = 0; k < s->num_shards; k++) {
        const dlc_store *sh = s->shards[k];
        s->info.skipped += sh->info.skipped;
        s->info.payload_bytes += sh->info.payload_bytes;
        const uint64_t *counts = dlc_store_label_counts(sh);
        for (uint32_t l = 0; l < x->num_labels; l++)
            s->label_counts[l] += counts[l];
    }
    return DLC_OK;
}

dlc_status dlc__set_open(const char *dir, uint32_t flags, dlc_store **out)
{
    dlc_status rc = DLC_OK;
    dlc_store *s = NULL;
    char *ipath = NULL;
    uint8_t *bytes = NULL;
    size_t len = 0;
    dlc__set_index x = {0};
    *out = NULL;
    FAIL_IF(flags & ~(uint32_t)DLC_STORE_SEQUENTIAL, DLC_EINVAL, "%s: unknown flags 0x%x", dir,
            flags);
    FAIL_IF(!(ipath = dlc__set_path(dir, "/", DLC__SET_INDEX_NAME)), -ENOMEM, "%s: out of memory",
            dir);
    rc = dlc__set_index_read(ipath, &bytes, &len);
    if (rc == -ENOENT) {
        rc = no_index(dir);
        goto fail;
    }
    CHECK(rc);
    CHECK(dlc__set_index_decode(bytes, len, ipath, &x));

    s = calloc(1, sizeof *s);
    FAIL_IF(!s, -ENOMEM, "%s: out of memory", dir);
    s->fd = -1;
    s->path = strdup(dir);
    s->shards = calloc(x.num_shards, sizeof *s->shards);
    s->firsts = calloc(x.num_shards + 1u, sizeof *s->firsts);
    FAIL_IF(!s->path || !s->shards || !s->firsts, -ENOMEM, "%s: out of memory for %u shards", dir,
            x.num_shards);
    s->num_shards = x.num_shards;
    s->set_index = bytes;
    s->set_index_len = len;
    bytes = NULL;
    CHECK(open_shards(s, &x, flags));
    CHECK(set_info(s, &x));
    dlc__set_index_free(&x);
    free(ipath);
    dlc__clear_error();
    *out = s;
    return DLC_OK;
fail:;
    dlc__errsave es;
    dlc__err_save(&es);
    dlc_store_close(s);
    dlc__set_index_free(&x);
    free(bytes);
    free(ipath);
    return dlc__err_restore(&es, rc);
}

void dlc__set_close(dlc_store *s)
{
    for (uint32_t k = 0; k < s->num_shards; k++)
        dlc_store_close(s->shards[k]);
    free(s->shards);
    free(s->firsts);
    free(s->set_index);
    if (s->lazy_index) {
        dlc__set_index_free(s->lazy_index);
        free(s->lazy_index);
        s->lazy_index = NULL;
    }
    s->shards = NULL;
    s->firsts = NULL;
    s->set_index = NULL;
    s->num_shards = 0;
}
