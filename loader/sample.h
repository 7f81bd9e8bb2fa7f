/* Private to loader/: building one sample of a batch (sample.c), called by the workers
 * (pipeline.c). */
#ifndef DLCACHE_LOADER_SAMPLE_H
#define DLCACHE_LOADER_SAMPLE_H

#include "internal.h"

/* A record as a worker reads it: its values, and where its selected payloads are. */
typedef struct dlc__sample_view {
    const dlc_value *v;  /* The record's num_fields values. */
    const uint8_t *span; /* Direct mode: the file's bytes from span_off on; NULL: the map. */
    uint64_t span_off;
    uint64_t index; /* Record number. */
} dlc__sample_view;

/* Where the bytes of value @p v are for this worker: in the map, or in the direct buffer. */
const uint8_t *dlc__payload(const dlc__sample_view *sv, const dlc_value *v);

/* Grow the worker's resize scratch to @p need bytes (it never shrinks). */
dlc_status dlc__ensure_scratch(dlc__worker *w, size_t need);

/* Write every output of sample @p j (global position @p pos) of slot @p s from record @p sv,
 * with its label and index. Errors name the store, the record and the field. */
dlc_status dlc__build_sample(const struct dlc_loader *l, dlc__worker *w, dlc__slot *s, uint32_t j,
                             uint64_t pos, const dlc__sample_view *sv);

#endif /* DLCACHE_LOADER_SAMPLE_H */
