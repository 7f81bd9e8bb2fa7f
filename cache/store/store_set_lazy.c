/* A store set opened lazily, for streaming (store_set.h): the union comes from the index alone,
 * and each shard is attached when the streaming cache has it on disk and detached before the
 * cache removes it. Attaching runs every check that opening a whole set runs on a shard, except
 * that its source items follow the shard before it (which may never be local at the same time);
 * the content digest and size against the index catch a shard that is not the one the index
 * describes. */
#include "common.h"
#include "store_format.h"
#include "store_set.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

dlc_status dlc__set_open_lazy(const char *dir, dlc_store **out)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    char *ipath = dlc__set_path(dir, "/", DLC__SET_INDEX_NAME);
    *out = NULL;
    if (!ipath)
        return dlc__errorf(-ENOMEM, "%s: out of memory", dir);
    dlc_status rc = dlc__set_index_read(ipath, &bytes, &len);
    free(ipath);
    if (rc == DLC_OK)
        rc = dlc__set_open_lazy_bytes(dir, bytes, len, out);
    free(bytes);
    return rc;
}

dlc_status dlc__set_open_lazy_bytes(const char *dir, const uint8_t *index, size_t len,
                                    dlc_store **out)
{
    dlc_status rc = DLC_OK;
    dlc_store *s = NULL;
    char *ipath = NULL;
    uint8_t *bytes = NULL;
    dlc__set_index *x = calloc(1, sizeof *x);
    *out = NULL;
    FAIL_IF(!x, -ENOMEM, "%s: out of memory", dir);
    FAIL_IF(!(ipath = dlc__set_path(dir, "/", DLC__SET_INDEX_NAME)), -ENOMEM, "%s: out of memory",
            dir);
    FAIL_IF(!(bytes = malloc(len ? len : 1)), -ENOMEM, "%s: out of memory", dir);
    memcpy(bytes, index, len);
    CHECK(dlc__set_index_decode(bytes, len, ipath, x));
    s = calloc(1, sizeof *s);
    FAIL_IF(!s, -ENOMEM, "%s: out of memory", dir);
    s->fd = -1;
    s->lazy = 1;
    s->path = strdup(dir);
    s->shards = calloc(x->num_shards, sizeof *s->shards);
    s->firsts = calloc(x->num_shards + 1u, sizeof *s->firsts);
    FAIL_IF(!s->path || !s->shards || !s->firsts, -ENOMEM, "%s: out of memory for %u shards", dir,
            x->num_shards);
    s->num_shards = x->num_shards;
    s->set_index = bytes;
    s->set_index_len = len;
    bytes = NULL;
    memcpy(s->fields, x->fields, (size_t)x->num_fields * sizeof *s->fields);
    for (uint32_t k = 0; k < x->num_shards; k++)
        s->firsts[k] = x->shards[k].first;
    s->firsts[x->num_shards] = x->count;
    CHECK(dlc__set_index_info(s, x));
    s->lazy_index = x;
    x = NULL;
    free(ipath);
    dlc__clear_error();
    *out = s;
    return DLC_OK;
fail:;
    dlc__errsave es;
    dlc__err_save(&es);
    dlc_store_close(s);
    if (x) {
        dlc__set_index_free(x);
        free(x);
    }
    free(bytes);
    free(ipath);
    return dlc__err_restore(&es, rc);
}

dlc_status dlc__set_attach(dlc_store *s, uint32_t k, const char *path)
{
    dlc_status rc = DLC_OK;
    dlc_store *sh = NULL;
    dlc__set_part part;
    FAIL_IF(!s->lazy || k >= s->num_shards, DLC_EINVAL, "%s: no shard %u to attach", s->path, k);
    if (dlc__set_attached(s, k))
        return DLC_OK;
    rc = dlc__store_open_file(path, 0, &sh);
    if (rc < 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dlc_errmsg());
        FAIL_IF(1, rc, "%s: shard %s: %s", s->path, s->lazy_index->shards[k].name, msg);
    }
    sh->file_no = k;
    CHECK(dlc__set_check_shard(s, sh, s->lazy_index, k, &part, NULL, 0));
    __atomic_store_n(&s->shards[k], sh, __ATOMIC_RELEASE);
    return DLC_OK;
fail:
    dlc_store_close(sh);
    return rc;
}

void dlc__set_detach(dlc_store *s, uint32_t k)
{
    if (!s->lazy || k >= s->num_shards)
        return;
    dlc_store *sh = __atomic_exchange_n(&s->shards[k], NULL, __ATOMIC_ACQ_REL);
    dlc_store_close(sh);
}

int dlc__set_attached(const dlc_store *s, uint32_t k)
{
    return k < s->num_shards && dlc__set_shard_at(s, k) != NULL;
}

dlc_store_reader *dlc__set_lazy_reader(const dlc_store *s, uint32_t k, uint64_t index,
                                       dlc_store_reader *tmp)
{
    const dlc_store *sh = dlc__set_shard_at(s, k);
    if (!sh) {
        if (s->lazy_index)
            dlc__errorf(DLC_EINVAL,
                        "%s: record %" PRIu64 ": its shard %s is not in the streaming cache now",
                        s->path, index, s->lazy_index->shards[k].name);
        else /* A mixture's union: file k is a streamed source's shard. */
            dlc__errorf(DLC_EINVAL,
                        "%s: record %" PRIu64
                        ": its file %u, a streamed shard, is not in the streaming cache now",
                        s->path, index, k);
        return NULL;
    }
    /* A version 2 shard reads through its offset table and map: no transaction to hold. */
    *tmp = (dlc_store_reader){.s = sh};
    return tmp;
}
