/* Shared by the store set tests (tests/store/test_store_set.c, tests/loader/test_loader_set.c)
 * and tests/e2e/set_fixture.c: a list of source items made into records of several fields,
 * written as one single store and as the N parts of a store set with the writer API (each part
 * with its "set_part" record), then joined with dlc__set_join(). The set and the single store
 * hold the same records in the same order, so everything read through them must agree.
 * Plain C without Criterion, like test_util.h: failures are returned. Header-only. */
#ifndef DLCACHE_TEST_SET_FIXTURE_H
#define DLCACHE_TEST_SET_FIXTURE_H

#include "store_internal.h"
#include "store_set.h"
#include "test_util.h"

#include <dlcache/set.h>
#include <dlcache/writer.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* Which source items become no record (unreadable images, as a builder would skip them). */
typedef int (*sf_skip_fn)(uint64_t item, uint64_t n);

/* Every seventh item, from the fourth on. */
static inline int sf_skip_some(uint64_t item, uint64_t n)
{
    (void)n;
    return item % 7 == 3;
}

/* The fields of the records: an image whose size varies in half of the items (so some parts
 * are fixed 8x8 and others VARIABLE, and the set's schema must be the union), the label, a
 * token list of varying length, rows of four floats whose count is fixed within each half (the
 * parts of each half fixed, at different sizes), a pair that is declared VARIABLE but always
 * has two entries (fixed everywhere), a float and a caption. */
static const dlc_field_spec sf_fields[] = {
    {.name = "image", .kind = DLC_FIELD_IMAGE, .flags = DLC_FIELD_VARIABLE, .shape = {0, 0, 3}},
    {.name = "label", .kind = DLC_FIELD_INT, .flags = DLC_FIELD_LABEL},
    {.name = "tokens",
     .kind = DLC_FIELD_NDARRAY,
     .dtype = DLC_DTYPE_INT32,
     .flags = DLC_FIELD_VARIABLE,
     .ndim = 1},
    {.name = "emb",
     .kind = DLC_FIELD_NDARRAY,
     .dtype = DLC_DTYPE_FLOAT32,
     .flags = DLC_FIELD_VARIABLE,
     .ndim = 2,
     .shape = {0, 4}},
    {.name = "pair",
     .kind = DLC_FIELD_NDARRAY,
     .dtype = DLC_DTYPE_INT16,
     .flags = DLC_FIELD_VARIABLE,
     .ndim = 1},
    {.name = "score", .kind = DLC_FIELD_FLOAT},
    {.name = "caption", .kind = DLC_FIELD_BYTES},
};
#define SF_NUM_FIELDS (sizeof sf_fields / sizeof sf_fields[0])
static const char *const sf_labels[] = {"cat", "dog", "emu"};

/* The image side of item @p i of @p n: 8 in the first half, 8 or 12 in the second. */
static inline uint32_t sf_side(uint64_t i, uint64_t n)
{
    return i < n / 2 ? 8u : 8u + 4u * (uint32_t)(i % 2);
}

/* Set every field of item @p i's record in @p b. */
static inline dlc_status sf_record(dlc_record_builder *b, uint64_t i, uint64_t n)
{
    dlc_status rc = DLC_OK;
    const uint32_t side = sf_side(i, n);
    uint8_t px[12 * 12 * 3];
    for (uint32_t y = 0; y < side; y++)
        for (uint32_t x = 0; x < side; x++)
            for (uint32_t c = 0; c < 3; c++)
                px[((size_t)y * side + x) * 3 + c] = tu_pixel(i, y, x, c);
    const dlc_image im = {px, side, side, 3, (size_t)side * 3};
    int32_t tokens[5];
    const uint32_t nt = (uint32_t)(i % 5);
    for (uint32_t k = 0; k < nt; k++)
        tokens[k] = (int32_t)(i * 10 + k);
    float emb[3 * 4];
    const uint32_t rows = i < n / 2 ? 2u : 3u;
    for (uint32_t k = 0; k < rows * 4; k++)
        emb[k] = (float)i + 0.25f * (float)k;
    const int16_t pair[2] = {(int16_t)i, (int16_t)(-(int16_t)i)};
    char caption[32];
    const int cl = snprintf(caption, sizeof caption, "item %llu", (unsigned long long)i);
    CHECK(dlc_record_set_image(b, 0, &im));
    CHECK(dlc_record_set_int(b, 1, (int64_t)(i % 3)));
    CHECK(dlc_record_set_array(b, 2, tokens, (size_t)nt * 4, nt));
    CHECK(dlc_record_set_array(b, 3, emb, (size_t)rows * 16, rows));
    CHECK(dlc_record_set_array(b, 4, pair, sizeof pair, 2));
    CHECK(dlc_record_set_float(b, 5, (double)i / 8.0));
    CHECK(dlc_record_set_bytes(b, 6, caption, (size_t)cl));
    CHECK(dlc_record_seal(b));
fail:
    return rc;
}

/* Write the records of items [first, end) of @p n to @p path; with @p parts > 0 as part
 * @p part of @p parts of set @p set_id. */
static inline dlc_status sf_write(const char *path, uint64_t first, uint64_t end, uint64_t n,
                                  uint32_t part, uint32_t parts, uint64_t set_id, sf_skip_fn skip)
{
    dlc_status rc = DLC_OK;
    dlc_writer *w = NULL;
    dlc_record_builder *b = NULL;
    const dlc_writer_config cfg = {.struct_size = sizeof(dlc_writer_config),
                                   .fields = sf_fields,
                                   .num_fields = SF_NUM_FIELDS,
                                   .label_names = sf_labels,
                                   .num_labels = 3,
                                   .force = 1};
    CHECK(dlc_writer_open(path, &cfg, &w));
    CHECK(dlc_record_builder_create(w, &b));
    for (uint64_t i = first; i < end; i++) {
        if (skip && skip(i, n)) {
            dlc_writer_add_skipped(w, 1);
            continue;
        }
        CHECK(sf_record(b, i, n));
        CHECK(dlc_writer_append(w, b));
    }
    if (parts)
        CHECK(dlc__writer_set_part(w, part, parts, set_id, first, end));
    rc = dlc_writer_finish(w);
    w = NULL; /* finish frees the writer, also when it fails. */
fail:
    dlc_record_builder_destroy(b);
    dlc_writer_abort(w);
    return rc;
}

/* The single store of items 0..n-1. */
static inline dlc_status sf_make_single(const char *path, uint64_t n, sf_skip_fn skip)
{
    return sf_write(path, 0, n, n, 0, 0, 0, skip);
}

/* DIR/part-I-of-N.dlc, malloc'd. */
static inline char *sf_part_path(const char *dir, uint32_t part, uint32_t parts)
{
    char name[DLC__SET_NAME_SIZE];
    dlc__set_part_name(name, part, parts);
    return tu_path(dir, name);
}

/* Write part @p part of @p parts of items 0..n-1 into @p dir, split as a builder splits them:
 * part I takes items [I*n/N, (I+1)*n/N). */
static inline dlc_status sf_write_part(const char *dir, uint64_t n, uint32_t part, uint32_t parts,
                                       uint64_t set_id, sf_skip_fn skip)
{
    char *path = sf_part_path(dir, part, parts);
    if (!path)
        return dlc__errorf(-ENOMEM, "sf_write_part: out of memory");
    const dlc_status rc =
        sf_write(path, part * n / parts, (part + 1) * n / parts, n, part, parts, set_id, skip);
    free(path);
    return rc;
}

/* Make @p dir (it may exist) a set of @p parts parts of items 0..n-1, joined. */
static inline dlc_status sf_make_set(const char *dir, uint64_t n, uint32_t parts, uint64_t set_id,
                                     sf_skip_fn skip)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return dlc__errorf(-errno, "%s: mkdir failed", dir);
    for (uint32_t k = 0; k < parts; k++) {
        const dlc_status rc = sf_write_part(dir, n, k, parts, set_id, skip);
        if (rc < 0)
            return rc;
    }
    return dlc__set_join(dir, NULL);
}

#endif /* DLCACHE_TEST_SET_FIXTURE_H */
