/* set_split STORE N DIR: write the records of STORE again as the N parts of a store set in DIR
 * and join them, so that tests and benchmarks have a set and a single store of exactly the same
 * records (tests/python/test_set.py; the loader figures of a set against a single store).
 * The records are the source items: part I takes records [I*n/N, (I+1)*n/N), each with every
 * field's value as stored (encoded images stay encoded, bit for bit). STORE's skipped count
 * goes to part 0. A test program of the store part, not a tool: cachebuild writes sets from
 * sources.
 *
 * Prints "SET: N parts, C records, B bytes" and exits 0, or the library's message and 1. */
#include "common.h"
#include "store_internal.h"
#include "store_set.h"

#include <dlcache/set.h>
#include <dlcache/store.h>
#include <dlcache/writer.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

/* The writer's schema of @p s's fields: as stored, links by name. */
static void specs_of(const dlc_store *s, dlc_field_spec *specs)
{
    const dlc_field *f = dlc_store_fields(s);
    const uint32_t nf = dlc_store_get_info(s)->num_fields;
    for (uint32_t i = 0; i < nf; i++) {
        specs[i] = (dlc_field_spec){.name = f[i].name,
                                    .kind = f[i].kind,
                                    .dtype = f[i].dtype,
                                    .encoding = f[i].encoding,
                                    .flags = f[i].flags,
                                    .ndim = f[i].ndim,
                                    .link = f[i].link == DLC_NO_FIELD ? NULL : f[i].name};
        memcpy(specs[i].shape, f[i].shape, sizeof specs[i].shape);
        if (f[i].link != DLC_NO_FIELD)
            specs[i].link = f[f[i].link].name;
    }
}

/* Set field @p i of @p b to value @p v of a field @p f. */
static dlc_status set_value(dlc_record_builder *b, uint32_t i, const dlc_field *f,
                            const dlc_value *v)
{
    switch (f->kind) {
    case DLC_FIELD_IMAGE:
        if (f->encoding != DLC_ENCODING_RAW)
            return dlc_record_set_encoded(b, i, v->data, v->size, v->dim0, v->dim1);
        /* The writer only reads the pixels. */
        const dlc_image im = {(uint8_t *)v->data, v->dim1, v->dim0, f->shape[2],
                              (size_t)v->dim1 * f->shape[2]};
        return dlc_record_set_image(b, i, &im);
    case DLC_FIELD_NDARRAY:
        return dlc_record_set_array(b, i, v->data, v->size, v->dim0);
    case DLC_FIELD_INT:
        return dlc_record_set_int(b, i, v->i);
    case DLC_FIELD_FLOAT:
        return dlc_record_set_float(b, i, v->f);
    default:
        return dlc_record_set_bytes(b, i, v->data, v->size);
    }
}

/* Part @p part of @p parts of @p s's records into DIR/part-I-of-N.dlc. */
static dlc_status write_part(const dlc_store *s, dlc_store_reader *r, const char *dir,
                             uint32_t part, uint32_t parts, uint64_t set_id)
{
    dlc_status rc = DLC_OK;
    dlc_writer *w = NULL;
    dlc_record_builder *b = NULL;
    const dlc_store_info *in = dlc_store_get_info(s);
    dlc_field_spec specs[DLC_MAX_FIELDS];
    specs_of(s, specs);
    const char **names = calloc(in->num_labels + 1u, sizeof *names);
    char path[4096], name[DLC__SET_NAME_SIZE];
    dlc__set_part_name(name, part, parts);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FAIL_IF(!names, -ENOMEM, "out of memory");
    for (uint32_t l = 0; l < in->num_labels; l++)
        names[l] = dlc_store_label_name(s, l);
    const dlc_writer_config cfg = {.struct_size = sizeof(dlc_writer_config),
                                   .fields = specs,
                                   .num_fields = in->num_fields,
                                   .label_names = in->num_labels ? names : NULL,
                                   .num_labels = in->num_labels,
                                   .force = 1};
    CHECK(dlc_writer_open(path, &cfg, &w));
    CHECK(dlc_record_builder_create(w, &b));
    const uint64_t first = part * in->count / parts, end = (part + 1) * in->count / parts;
    dlc_value v[DLC_MAX_FIELDS];
    for (uint64_t i = first; i < end; i++) {
        CHECK(dlc_store_read_values(r, i, v));
        for (uint32_t f = 0; f < in->num_fields; f++)
            CHECK(set_value(b, f, &dlc_store_fields(s)[f], &v[f]));
        CHECK(dlc_record_seal(b));
        CHECK(dlc_writer_append(w, b));
    }
    if (part == 0)
        dlc_writer_add_skipped(w, in->skipped);
    CHECK(dlc__writer_set_part(w, part, parts, set_id, first, end));
    rc = dlc_writer_finish(w);
    w = NULL;
fail:
    dlc_record_builder_destroy(b);
    dlc_writer_abort(w);
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: set_split STORE N DIR\n");
        return 2;
    }
    const unsigned long parts = strtoul(argv[2], NULL, 10);
    dlc_store *s = NULL;
    dlc_store_reader *r = NULL;
    dlc_status rc = DLC_OK;
    FAIL_IF(parts == 0 || parts > DLC__SET_MAX_SHARDS, DLC_EINVAL, "N must be 1..%u",
            DLC__SET_MAX_SHARDS);
    FAIL_IF(mkdir(argv[3], 0755) != 0 && errno != EEXIST, -errno, "%s: %s", argv[3],
            strerror(errno));
    CHECK(dlc_store_open(argv[1], DLC_STORE_SEQUENTIAL, &s));
    CHECK(dlc_store_reader_open(s, &r));
    /* The set's identity: the source store's content and the number of parts. */
    const uint64_t ident[2] = {dlc_store_get_info(s)->content_digest, parts};
    const uint64_t set_id = XXH3_64bits(ident, sizeof ident);
    for (uint32_t k = 0; k < parts; k++)
        CHECK(write_part(s, r, argv[3], k, (uint32_t)parts, set_id));
    dlc_set_join_report rep;
    CHECK(dlc__set_join(argv[3], &rep));
    printf("%s: %u parts, %llu records, %llu bytes\n", argv[3], rep.num_shards,
           (unsigned long long)rep.count, (unsigned long long)rep.file_bytes);
fail:
    dlc_store_reader_close(r);
    dlc_store_close(s);
    if (rc < 0) {
        fprintf(stderr, "set_split: %s\n", dlc_errmsg());
        return 1;
    }
    return 0;
}
