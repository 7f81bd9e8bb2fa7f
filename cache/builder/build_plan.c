/* What a record of dlc_build() holds: the schema made from the options and the sources' columns,
 * decided on the calling thread before any worker starts (build.h, "Records" and "Masks").
 *
 * Two choices depend on the data and are taken from the first item that answers, in item order,
 * so that they do not depend on the number of threads: the image's channels with
 * DLC_BUILD_CHANNELS_KEEP (the first source image with a readable JPEG header) and the masks'
 * channels (the first mask that reads as a PNG). Looking costs one read of a few files. */
#include "build_internal.h"

#include "common.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

dlc_status dlc__build_mask_path(const char *masks, const char *rel, char **buf, size_t *cap)
{
    const size_t mlen = strlen(masks), rlen = strlen(rel);
    const char *slash = strrchr(rel, '/');
    const char *dot = strrchr(slash ? slash + 1 : rel, '.');
    const size_t keep = dot ? (size_t)(dot - rel) : rlen;
    const size_t need = mlen + 1 + keep + sizeof ".png";
    if (need > *cap) {
        char *p = realloc(*buf, need);
        if (!p)
            return dlc__errorf(-ENOMEM, "build: out of memory for a mask path");
        *buf = p;
        *cap = need;
    }
    memcpy(*buf, masks, mlen);
    (*buf)[mlen] = '/';
    memcpy(*buf + mlen + 1, rel, keep);
    memcpy(*buf + mlen + 1 + keep, ".png", sizeof ".png");
    return DLC_OK;
}

/* The channels of the first item whose JPEG header reads: 1 for grayscale, else 3 (CMYK and
 * YCCK decode to RGB). Through @p item, which one decided (SIZE_MAX: none; 3 then). */
static dlc_status first_image_channels(const dlc__source_set *src, dlc_codec *codec,
                                       uint32_t *channels, size_t *item)
{
    dlc_status rc = DLC_OK;
    uint8_t *buf = NULL;
    size_t cap = 0;
    char why[256];
    *channels = 3;
    *item = SIZE_MAX;
    for (size_t i = 0; i < src->count; i++) {
        if (src->items[i].skip != DLC__SKIP_NONE)
            continue;
        dlc__source_data d;
        rc = dlc__source_read(src, i, &buf, &cap, &d, why, sizeof why);
        if (rc == DLC_EDECODE)
            continue;
        if (rc < 0)
            break;
        uint32_t w, h, comps;
        if (dlc_jpeg_header(codec, d.data, d.size, &w, &h, &comps) == DLC_OK) {
            *channels = comps == 1 ? 1 : 3;
            *item = i;
            break;
        }
    }
    free(buf);
    dlc__clear_error();
    return rc == DLC_EDECODE ? DLC_OK : rc;
}

/* The channels of the first mask that reads as a PNG (1 when none does: every item is then
 * skipped for its mask anyway). */
static dlc_status first_mask_channels(const dlc__source_set *src, const char *masks,
                                      dlc_codec *codec, uint32_t *channels)
{
    dlc_status rc = DLC_OK;
    uint8_t *buf = NULL;
    char *path = NULL;
    size_t cap = 0, path_cap = 0;
    char why[256];
    *channels = 1;
    for (size_t i = 0; i < src->count; i++) {
        const dlc__item *it = &src->items[i];
        const char *rel = dlc__item_rel(it, dlc__source_path(src, it));
        if (it->skip != DLC__SKIP_NONE || !rel)
            continue;
        if ((rc = dlc__build_mask_path(masks, rel, &path, &path_cap)) < 0)
            break;
        dlc__source_data d;
        rc = dlc__source_read_path(path, &buf, &cap, &d, why, sizeof why);
        if (rc == DLC_EDECODE)
            continue;
        if (rc < 0)
            break;
        /* A whole decode, not the header: a palette mask's channels are its indices' one. */
        dlc_image m;
        if (dlc_png_decode_ids(codec, d.data, d.size, &m) == DLC_OK) {
            *channels = m.channels;
            break;
        }
    }
    free(buf);
    free(path);
    dlc__clear_error();
    return rc == DLC_EDECODE ? DLC_OK : rc;
}

/* The field of source column @p col. */
static dlc_field_spec column_field(const dlc__column *col)
{
    dlc_field_spec f = {.name = col->name};
    switch (col->kind) {
    case DLC__COL_LABEL:
        f.kind = DLC_FIELD_INT;
        f.flags = DLC_FIELD_LABEL;
        break;
    case DLC__COL_INTS:
    case DLC__COL_FLOATS:
        f.kind = DLC_FIELD_NDARRAY;
        f.dtype = col->kind == DLC__COL_INTS ? DLC_DTYPE_INT64 : DLC_DTYPE_FLOAT64;
        f.flags = DLC_FIELD_VARIABLE;
        f.ndim = 1;
        break;
    default:
        f.kind = col->is_float ? DLC_FIELD_FLOAT : DLC_FIELD_INT;
        break;
    }
    return f;
}

/* The image's and the masks' channels, each from its first readable file where the data
 * decides them. */
static dlc_status decide_channels(const dlc__source_set *src, const dlc_build_options *f,
                                  dlc__build_plan *plan)
{
    dlc_status rc = DLC_OK;
    dlc_codec *codec = NULL;
    plan->channels = f->channels == DLC_BUILD_CHANNELS_KEEP ? 3 : f->channels;
    plan->keep = f->channels == DLC_BUILD_CHANNELS_KEEP;
    plan->keep_item = SIZE_MAX;
    plan->mask_channels = 1;
    if (!plan->keep && !f->masks)
        return DLC_OK;
    CHECK(dlc_codec_create(&codec));
    if (plan->keep)
        CHECK(first_image_channels(src, codec, &plan->channels, &plan->keep_item));
    if (f->masks)
        CHECK(first_mask_channels(src, f->masks, codec, &plan->mask_channels));
fail:
    dlc_codec_destroy(codec);
    return rc;
}

dlc_status dlc__build_plan_make(const dlc__source_set *src, const dlc_build_options *o,
                                dlc__build_plan *plan, dlc_field_spec *fields, uint32_t *nfields)
{
    const dlc_build_options *f = o; /* the options of the fields */
    dlc_status rc = DLC_OK;
    uint32_t n = 0;
    FAIL_IF(f->masks && src->nshards > 0, DLC_EINVAL,
            "%s: masks are found by an image's path in its tree, which the members of a tar "
            "shard do not have: build tar shards without masks",
            src->arena + src->shards[0].path);
    plan->masks = f->masks;
    CHECK(decide_channels(src, f, plan));
    plan->f_image = n;
    /* VARIABLE: without a crop the sizes differ; the writer makes the field fixed at finish
     * when every record turns out to have one size. */
    fields[n++] = (dlc_field_spec){.name = "image",
                                   .kind = DLC_FIELD_IMAGE,
                                   .encoding = o->encoding,
                                   .flags = DLC_FIELD_VARIABLE,
                                   .shape = {0, 0, plan->channels},
                                   .quality = o->quality};
    plan->f_mask = DLC_NO_FIELD;
    if (f->masks) {
        plan->mask_encoding = f->mask_encoding >= 0             ? (uint32_t)f->mask_encoding
                              : o->encoding == DLC_ENCODING_RAW ? DLC_ENCODING_RAW
                                                                : DLC_ENCODING_PNG;
        plan->f_mask = n;
        fields[n++] = (dlc_field_spec){.name = "mask",
                                       .kind = DLC_FIELD_IMAGE,
                                       .encoding = plan->mask_encoding,
                                       .flags = DLC_FIELD_VARIABLE | DLC_FIELD_MASK,
                                       .shape = {0, 0, plan->mask_channels}};
    }
    plan->f_label = DLC_NO_FIELD;
    for (uint32_t c = 0; c < src->ncols; c++) {
        if (src->cols[c].kind == DLC__COL_LABEL)
            plan->f_label = n;
        plan->f_col[c] = n;
        fields[n++] = column_field(&src->cols[c]);
    }
    *nfields = n;
fail:
    return rc;
}
