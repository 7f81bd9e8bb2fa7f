/* The writer API of version 1 stores (cache/store/store_compat.h: one image and one label per
 * record), kept for the tests, on top of dlc_writer: it writes version 2 stores of
 * two fields, "image" and "label". The image field takes the encoding and channels of the first
 * record and is VARIABLE, so records of different sizes are accepted; dlc_writer_finish() makes
 * it fixed when they all turn out to have one size. */
#include "store_compat.h"

#include "common.h"
#include "store_format.h"
#include "store_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

struct dlc__store_writer {
    dlc_writer *w;
    dlc_record_builder *b; /* Made with the schema, at the first record. */
    uint32_t encoding;     /* Of the first record. */
    uint32_t channels;
};

dlc_status dlc__store_writer_open(const char *final_path, int force, uint64_t size_hint,
                                  dlc__store_writer **out)
{
    if (out)
        *out = NULL;
    if (!out)
        return dlc__errorf(DLC_EINVAL, "store writer: NULL argument");
    dlc__store_writer *sw = calloc(1, sizeof *sw);
    if (!sw)
        return dlc__errorf(-ENOMEM, "%s: out of memory", final_path ? final_path : "store");
    const dlc_status rc = dlc__writer_open_deferred(final_path, force, size_hint, &sw->w);
    if (rc < 0) {
        free(sw);
        return rc;
    }
    *out = sw;
    return DLC_OK;
}

/* The schema, from the first record. */
static dlc_status first_record(dlc__store_writer *sw, uint32_t channels, uint32_t encoding)
{
    const dlc_field_spec fields[2] = {
        {.name = "image",
         .kind = DLC_FIELD_IMAGE,
         .encoding = encoding,
         .flags = DLC_FIELD_VARIABLE,
         .shape = {0, 0, channels}},
        {.name = "label", .kind = DLC_FIELD_INT, .flags = DLC_FIELD_LABEL},
    };
    dlc_status rc = dlc__writer_set_schema(sw->w, fields, 2);
    if (rc == DLC_OK)
        rc = dlc_record_builder_create(sw->w, &sw->b);
    if (rc < 0)
        return rc;
    sw->encoding = encoding;
    sw->channels = channels;
    return DLC_OK;
}

/* The arguments of a put, checked as the version 1 writer checked them. */
static dlc_status check_put(const dlc__store_writer *sw, uint64_t index, int64_t label,
                            uint32_t height, uint32_t width, uint32_t channels, uint32_t encoding,
                            const void *payload, size_t size)
{
    const char *path = dlc__writer_temp_path(sw->w);
    if (label < 0 || label >= (int64_t)DLC__MAX_LABELS)
        return dlc__errorf(DLC_EINVAL,
                           "%s: record %" PRIu64 ": label %" PRId64 " out of range 0..%u", path,
                           index, label, DLC__MAX_LABELS - 1);
    if (encoding > DLC_ENCODING_PNG)
        return dlc__errorf(DLC_EINVAL, "%s: record %" PRIu64 ": unknown encoding %u", path, index,
                           encoding);
    if (sw->b && encoding != sw->encoding)
        return dlc__errorf(DLC_EINVAL,
                           "%s: record %" PRIu64 ": encoding %u, but the store's "
                           "records are encoding %u",
                           path, index, encoding, sw->encoding);
    if (sw->b && channels != sw->channels)
        return dlc__errorf(DLC_EINVAL,
                           "%s: record %" PRIu64 ": %u channels, but the store's records have %u",
                           path, index, channels, sw->channels);
    if (!payload && size > 0)
        return dlc__errorf(DLC_EINVAL, "%s: record %" PRIu64 ": NULL payload", path, index);
    if (encoding == DLC_ENCODING_RAW) {
        uint64_t px;
        if (__builtin_mul_overflow((uint64_t)height, (uint64_t)width, &px) ||
            __builtin_mul_overflow(px, (uint64_t)channels, &px) || px != size)
            return dlc__errorf(DLC_EINVAL,
                               "%s: record %" PRIu64 ": raw payload of %zu bytes "
                               "is not %ux%ux%u",
                               path, index, size, height, width, channels);
    }
    return DLC_OK;
}

dlc_status dlc__store_writer_put(dlc__store_writer *sw, int64_t label, uint32_t height,
                                 uint32_t width, uint32_t channels, uint32_t encoding,
                                 const void *payload, size_t size)
{
    if (!sw)
        return dlc__errorf(DLC_EINVAL, "store writer: NULL writer");
    const uint64_t index = dlc_writer_count(sw->w);
    dlc_status rc = check_put(sw, index, label, height, width, channels, encoding, payload, size);
    if (rc == DLC_OK && !sw->b)
        rc = first_record(sw, channels, encoding);
    if (rc < 0)
        return rc;
    dlc_record_builder_reset(sw->b);
    if (encoding == DLC_ENCODING_RAW) {
        const dlc_image img = {(uint8_t *)payload, width, height, channels,
                               (size_t)width * channels};
        rc = dlc_record_set_image(sw->b, 0, &img);
    } else {
        rc = dlc_record_set_encoded(sw->b, 0, payload, size, height, width);
    }
    if (rc == DLC_OK)
        rc = dlc_record_set_int(sw->b, 1, label);
    if (rc == DLC_OK)
        rc = dlc_record_seal(sw->b);
    if (rc == DLC_OK)
        rc = dlc_writer_append(sw->w, sw->b);
    if (rc < 0)
        dlc_record_builder_reset(sw->b);
    return rc;
}

dlc_status dlc__store_writer_finish(dlc__store_writer *sw, const dlc__store_meta *meta)
{
    if (!sw)
        return dlc__errorf(DLC_EINVAL, "store writer: NULL writer");
    dlc_status rc = DLC_OK;
    if (!meta)
        rc = dlc__errorf(DLC_EINVAL, "%s: no metadata", dlc__writer_temp_path(sw->w));
    else
        rc = dlc__writer_set_meta(sw->w, meta->label_names, meta->num_labels, meta->skipped,
                                  meta->build_json, meta->source_digest);
    dlc_writer *w = sw->w;
    dlc_record_builder_destroy(sw->b);
    free(sw);
    if (rc < 0) {
        dlc__errsave es;
        dlc__err_save(&es);
        dlc_writer_abort(w);
        return dlc__err_restore(&es, rc);
    }
    return dlc_writer_finish(w);
}

void dlc__store_writer_abort(dlc__store_writer *sw)
{
    if (!sw)
        return;
    dlc_writer_abort(sw->w);
    dlc_record_builder_destroy(sw->b);
    free(sw);
}

uint64_t dlc__store_writer_count(const dlc__store_writer *sw)
{
    return sw ? dlc_writer_count(sw->w) : 0;
}

const char *dlc__store_writer_temp_path(const dlc__store_writer *sw)
{
    return sw ? dlc__writer_temp_path(sw->w) : NULL;
}
