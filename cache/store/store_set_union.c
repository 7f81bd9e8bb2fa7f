/* The union of several stores and sets, for a mixture (include/dlcache/loader.h,
 * dlc_loader_open_mix()): one handle shaped like a set whose shards are every source's files in
 * order (a store is one file, a set's shards are taken over from it), so that the loader's
 * readers, I/O and per-file checks work on a mixture unchanged. Records are numbered globally:
 * source s holds records first_s .. first_s + count_s - 1. */
#include "common.h"
#include "store_set.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* The label names of the union: source s's label l is offset_s + l; a number that no source
 * gives is named "", and where sources overlap the first one's name is kept. */
static dlc_status union_labels(dlc_store *u, dlc_store *const *src, uint32_t n,
                               const int64_t *offsets)
{
    uint64_t nl = 0;
    size_t bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        const int64_t off = offsets ? offsets[i] : 0;
        const uint64_t end = (uint64_t)off + src[i]->info.num_labels;
        if (src[i]->info.num_labels && end > nl)
            nl = end;
        for (uint32_t l = 0; l < src[i]->info.num_labels; l++)
            bytes += strlen(dlc_store_label_name(src[i], l)) + 1;
    }
    if (nl > (1u << 24))
        return dlc__errorf(DLC_EINVAL, "%s: the mixture's labels reach %" PRIu64 ": at most %u",
                           u->path, nl, 1u << 24);
    u->labels = calloc(1, bytes + nl + 1);
    u->label_names = calloc(nl + 1, sizeof *u->label_names);
    u->label_counts = calloc(nl + 1, sizeof *u->label_counts);
    if (!u->labels || !u->label_names || !u->label_counts)
        return dlc__errorf(-ENOMEM, "%s: out of memory for %" PRIu64 " labels", u->path, nl);
    char *at = u->labels;
    for (uint32_t i = 0; i < n; i++) {
        const uint64_t off = offsets ? (uint64_t)offsets[i] : 0;
        const uint64_t *counts = dlc_store_label_counts(src[i]);
        for (uint32_t l = 0; l < src[i]->info.num_labels; l++) {
            u->label_counts[off + l] += counts ? counts[l] : 0;
            if (u->label_names[off + l])
                continue;
            const char *name = dlc_store_label_name(src[i], l);
            const size_t len = strlen(name) + 1;
            memcpy(at, name, len);
            u->label_names[off + l] = at;
            at += len;
        }
    }
    for (uint64_t l = 0; l < nl; l++)
        if (!u->label_names[l])
            u->label_names[l] = at; /* The "" after the names. */
    u->info.num_labels = (uint32_t)nl;
    return DLC_OK;
}

dlc_status dlc__store_open_union(const char *name, const char *const *paths, uint32_t n,
                                 const int64_t *label_offsets, uint32_t flags,
                                 dlc_store *const *lazy, dlc__union_part *parts, dlc_store **out)
{
    dlc_status rc = DLC_OK;
    dlc_store *u = NULL;
    dlc_store **src = NULL;
    dlc__schema_merge m = {0};
    *out = NULL;
    FAIL_IF(n == 0, DLC_EINVAL, "%s: a mixture needs at least one source", name);
    src = calloc(n, sizeof *src);
    u = calloc(1, sizeof *u);
    FAIL_IF(!src || !u, -ENOMEM, "%s: out of memory", name);
    u->fd = -1;
    FAIL_IF(!(u->path = strdup(name)), -ENOMEM, "%s: out of memory", name);
    uint32_t files = 0;
    for (uint32_t i = 0; i < n; i++) {
        FAIL_IF(!paths[i], DLC_EINVAL, "%s: source %u has no path", name, i);
        FAIL_IF(label_offsets && label_offsets[i] < 0, DLC_EINVAL,
                "%s: source %u (%s): label offset %lld is negative", name, i, paths[i],
                (long long)label_offsets[i]);
        if (lazy && lazy[i])
            src[i] = lazy[i]; /* The caller's: never closed here. */
        else
            CHECK(dlc_store_open(paths[i], flags, &src[i]));
        FAIL_IF(src[i]->info.format_version != DLC_STORE_FORMAT_VERSION, DLC_EINVAL,
                "%s: source %u (%s): a version %u store cannot be in a mixture (rebuild it)", name,
                i, paths[i], src[i]->info.format_version);
        FAIL_IF(src[i]->info.count == 0, DLC_EINVAL, "%s: source %u (%s): no records", name, i,
                paths[i]);
        files += src[i]->shards ? src[i]->num_shards : 1;
        /* The schemas must agree but for sizes: the merge names the source and the field. */
        CHECK(dlc__set_merge_add(&m, src[i], name, paths[i], DLC_EINVAL));
    }
    FAIL_IF(files > DLC__SET_MAX_SHARDS, DLC_EINVAL, "%s: %u files: at most %u", name, files,
            DLC__SET_MAX_SHARDS);
    u->shards = calloc(files, sizeof *u->shards);
    u->firsts = calloc(files + 1u, sizeof *u->firsts);
    FAIL_IF(!u->shards || !u->firsts, -ENOMEM, "%s: out of memory for %u files", name, files);
    uint64_t first = 0;
    XXH3_state_t *digest = XXH3_createState();
    FAIL_IF(!digest, -ENOMEM, "%s: out of memory", name);
    XXH3_64bits_reset(digest);
    for (uint32_t i = 0; i < n; i++) {
        dlc_store *s = src[i];
        parts[i] = (dlc__union_part){.first = first,
                                     .count = s->info.count,
                                     .digest = s->info.content_digest,
                                     .first_file = u->num_shards};
        uint8_t le[8];
        dlc__st64(le, s->info.content_digest);
        XXH3_64bits_update(digest, le, sizeof le);
        /* A set's shards move into the union; a store is one file of it; a lazy set's files
         * are the union's too, attached when the caller publishes them. */
        const uint32_t k = s->shards ? s->num_shards : 1;
        if (s->lazy)
            u->lazy = 1;
        for (uint32_t j = 0; j < k; j++) {
            dlc_store *leaf = s->lazy ? NULL : s->shards ? s->shards[j] : s;
            if (leaf)
                leaf->file_no = u->num_shards;
            u->firsts[u->num_shards] = first + (s->shards ? s->firsts[j] : 0);
            u->shards[u->num_shards++] = leaf;
        }
        parts[i].num_files = k;
        u->info.skipped += s->info.skipped;
        u->info.payload_bytes += s->info.payload_bytes;
        u->info.file_bytes += s->info.file_bytes;
        first += s->info.count;
    }
    u->info.content_digest = XXH3_64bits_digest(digest);
    XXH3_freeState(digest);
    u->firsts[u->num_shards] = first;
    memcpy(u->fields, m.fields, (size_t)m.num_fields * sizeof *u->fields);
    u->info.format_version = DLC_STORE_FORMAT_VERSION;
    u->info.count = first;
    u->info.num_fields = m.num_fields;
    u->info.label_field = DLC_NO_FIELD;
    for (uint32_t f = 0; f < m.num_fields; f++)
        if (u->fields[f].flags & DLC_FIELD_LABEL)
            u->info.label_field = f;
    dlc__store_image_info(u);
    u->file_size = u->info.file_bytes;
    CHECK(union_labels(u, src, n, label_offsets));
    /* The union owns every file now: the sets give up their shards, the stores themselves. */
    for (uint32_t i = 0; i < n; i++) {
        if (src[i]->lazy) {
            src[i] = NULL; /* The caller's. */
            continue;
        }
        if (src[i]->shards) {
            free(src[i]->shards);
            src[i]->shards = NULL;
            src[i]->num_shards = 0;
            dlc_store_close(src[i]);
        }
        src[i] = NULL;
    }
    free(src);
    dlc__clear_error();
    *out = u;
    return DLC_OK;
fail:;
    dlc__errsave es;
    dlc__err_save(&es);
    if (u) {
        /* Files already moved are the sources' still: the union lets go of them first. */
        free(u->shards);
        u->shards = NULL;
        u->num_shards = 0;
        dlc_store_close(u);
    }
    for (uint32_t i = 0; src && i < n; i++)
        if (!(lazy && lazy[i]))
            dlc_store_close(src[i]);
    free(src);
    return dlc__err_restore(&es, rc);
}

void dlc__union_attach(dlc_store *u, uint32_t file, dlc_store *set, uint32_t k)
{
    dlc_store *sh = (dlc_store *)dlc__set_shard_at(set, k);
    sh->file_no = file; /* Its values name the union's file; nothing reads it through the set. */
    __atomic_store_n(&u->shards[file], sh, __ATOMIC_RELEASE);
}

void dlc__union_detach(dlc_store *u, uint32_t file)
{
    __atomic_store_n(&u->shards[file], NULL, __ATOMIC_RELEASE);
}
