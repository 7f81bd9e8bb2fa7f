/* Private to cacheinfo: what its files share. cacheinfo.c holds main, the report of the store and
 * the reader of its "build" text; info_fields.c the schema and the per-field sizes; info_dump.c
 * --dump, which writes one field of one record as PNG, PPM/PGM, .npy, raw bytes or text. */
#ifndef DLCACHE_TOOLS_INFO_H
#define DLCACHE_TOOLS_INFO_H

#include "toolutil.h"

#include <dlcache/store.h>

#include <stdint.h>

#define TOOL "cacheinfo"

/* Payload bytes of each field over the whole store (scalars: 8 per record, kept in the record's
 * header). */
typedef struct info_sizes {
    uint64_t total[DLC_MAX_FIELDS];
    int known; /* 0 when a record could not be read (a warning was printed) */
} info_sizes;

/* Fill @p sz. Fields whose payload has one size come from the schema; a single field whose size
 * varies from the store's payload total; only with several such fields is every record's header
 * read (no payload is). */
void info_field_sizes(const dlc_store *s, info_sizes *sz);

/* cacheinfo STORE|URL --plan ... (info_plan.c): the whole command; returns its exit status. */
int info_plan_main(int argc, char **argv);

/* "image", "ndarray", "int", "float", "bytes". */
const char *info_kind_name(uint32_t kind);
/* "raw", "jpeg", "png". */
const char *info_encoding_name(uint32_t encoding);

/* The "fields" lines of the text report, and the "fields" array of the JSON one. */
void info_print_fields_text(const dlc_store *s, const info_sizes *sz);
void info_print_fields_json(tool_json *j, const dlc_store *s, const info_sizes *sz);

/* --dump: write field @p field (NULL: the first image field) of record @p index to @p path, in
 * the format its kind and the file name's extension ask for. Returns the exit status: 0, 1 (a
 * damaged record) or 2 (a usage error: no such record or field, a format that cannot hold it). */
int info_dump(const dlc_store *s, const char *store, uint64_t index, const char *field,
              const char *path);

#endif /* DLCACHE_TOOLS_INFO_H */
