/* A store set opened lazily for streaming (cache/store/store_set_lazy.c): the union from the
 * index alone agrees with the set opened whole; a record whose shard is not attached is refused
 * naming the shard; an attached shard reads the same bytes; a file that is not the shard the
 * index describes is refused naming both digests; a detached shard reads as absent again. */
#include "set_fixture.h"
#include "store_set.h"
#include "tmpdir_util.h"

#include <criterion/criterion.h>
#include <dlcache/store.h>
#include <string.h>

#define N_ITEMS 60u
#define PARTS 4u

static char *make(char **set)
{
    char *dir = tu_mkdtemp();
    cr_assert_not_null(dir);
    *set = tu_path(dir, "set");
    cr_assert_eq(sf_make_set(*set, N_ITEMS, PARTS, 0x77, sf_skip_some), DLC_OK, "%s", dlc_errmsg());
    return dir;
}

Test(store_set_lazy, the_union_from_the_index_and_reads_of_attached_shards_only)
{
    char *set, *dir = make(&set);
    dlc_store *whole = NULL, *lazy = NULL;
    cr_assert_eq(dlc_store_open(set, 0, &whole), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc__set_open_lazy(set, &lazy), DLC_OK, "%s", dlc_errmsg());
    const dlc_store_info *a = dlc_store_get_info(whole), *b = dlc_store_get_info(lazy);
    cr_assert_eq(a->count, b->count);
    cr_assert_eq(a->content_digest, b->content_digest);
    cr_assert_eq(a->file_bytes, b->file_bytes);
    cr_assert_eq(a->num_fields, b->num_fields);
    cr_assert_eq(a->num_labels, b->num_labels);
    cr_assert_eq(dlc_store_num_files(lazy), PARTS);
    for (uint32_t k = 0; k < PARTS; k++)
        cr_assert_eq(dlc_store_file_fd(lazy, k), -1);

    dlc_store_reader *rw = NULL, *rl = NULL;
    cr_assert_eq(dlc_store_reader_open(whole, &rw), DLC_OK);
    cr_assert_eq(dlc_store_reader_open(lazy, &rl), DLC_OK);
    dlc_value vw[DLC_MAX_FIELDS], vl[DLC_MAX_FIELDS];
    const uint64_t last = a->count - 1;
    const uint32_t k = dlc_store_record_file(whole, last);
    cr_assert_eq(dlc_store_read_values(rl, last, vl), DLC_EINVAL);
    cr_assert_not_null(strstr(dlc_errmsg(), "is not in the streaming cache"), "%s", dlc_errmsg());
    cr_assert_not_null(strstr(dlc_errmsg(), "part-00003-of-00004.dlc"), "%s", dlc_errmsg());

    cr_assert_eq(dlc__set_attach(lazy, k, dlc_store_file_path(whole, k)), DLC_OK, "%s",
                 dlc_errmsg());
    cr_assert(dlc__set_attached(lazy, k));
    cr_assert_neq(dlc_store_file_fd(lazy, k), -1);
    cr_assert_eq(dlc_store_read_values(rw, last, vw), DLC_OK);
    cr_assert_eq(dlc_store_read_values(rl, last, vl), DLC_OK, "%s", dlc_errmsg());
    for (uint32_t f = 0; f < a->num_fields; f++) {
        cr_assert_eq(vw[f].size, vl[f].size);
        cr_assert_eq(memcmp(vw[f].data, vl[f].data, vw[f].size), 0, "field %u differs", f);
        cr_assert_eq(vw[f].file, vl[f].file);
    }
    /* Another shard's file in shard 0's place is refused, named with both digests. */
    cr_assert_eq(dlc__set_attach(lazy, 0, dlc_store_file_path(whole, 1)), DLC_ECORRUPT);
    cr_assert_not_null(strstr(dlc_errmsg(), "part-00000-of-00004.dlc"), "%s", dlc_errmsg());
    cr_assert(!dlc__set_attached(lazy, 0));

    dlc__set_detach(lazy, k);
    cr_assert(!dlc__set_attached(lazy, k));
    cr_assert_eq(dlc_store_read_values(rl, last, vl), DLC_EINVAL);
    /* A whole verify is refused: the shards are checked as they arrive. */
    cr_assert_eq(dlc_store_verify(lazy, NULL, NULL, NULL), DLC_EINVAL);
    dlc_store_reader_close(rl);
    dlc_store_reader_close(rw);
    dlc_store_close(lazy);
    dlc_store_close(whole);
    tu_rmtree(dir);
    free(dir);
    free(set);
}
