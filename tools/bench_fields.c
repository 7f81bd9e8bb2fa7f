/* `cachebench load --fields a,b,...`: which outputs the loader makes, how many bytes a sample of
 * them is (the memcpy ceiling copies as many), and how a batch of them is counted and hashed.
 * Every selected field counts, so that a store of one-channel images, of masks or of tokens only
 * is measured by what the loader delivers, not by a 224 x 224 x 3 image it does not have. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

int bench_fields_parse(const char *v, bench_load_opts *o)
{
    const size_t n = strlen(v);
    if (n == 0 || n >= sizeof o->fields_buf)
        return -1;
    memcpy(o->fields_buf, v, n + 1);
    o->cfg.num_fields = 0;
    for (char *p = o->fields_buf, *save = NULL, *t; (t = strtok_r(p, ",", &save)); p = NULL) {
        if (o->cfg.num_fields == DLC_MAX_FIELDS)
            return -1;
        o->field_names[o->cfg.num_fields++] = t;
    }
    o->cfg.fields = o->cfg.num_fields ? o->field_names : NULL;
    return o->cfg.num_fields ? 0 : -1;
}

/* Bytes of one sample of field @p f's output. Images at the crop (the output dtype; masks stay
 * uint8), fixed arrays at their shape, variable ones and bytes at their largest length (what
 * padding to the longest of a batch approaches), scalars 8. */
static size_t output_bytes(const dlc_field *f, const dlc_loader_config *cfg)
{
    if (f->kind == DLC_FIELD_INT || f->kind == DLC_FIELD_FLOAT)
        return 8;
    if (f->kind == DLC_FIELD_BYTES)
        return (size_t)f->max_size;
    if (f->kind == DLC_FIELD_IMAGE) {
        const size_t px = (size_t)cfg->crop_h * cfg->crop_w * f->shape[2];
        return f->flags & DLC_FIELD_MASK ? px : px * dlc_dtype_size(cfg->dtype);
    }
    size_t n =
        dlc_dtype_size(f->dtype) * (f->flags & DLC_FIELD_VARIABLE ? f->max_dim0 : f->shape[0]);
    for (uint32_t d = 1; d < f->ndim; d++)
        n *= f->shape[d];
    return n;
}

/* "image, label" into @p buf. */
static void field_list(const dlc_store *s, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t f = 0; f < dlc_store_get_info(s)->num_fields && at < cap; f++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", f ? ", " : "",
                               dlc_store_fields(s)[f].name);
}

int bench_fields_resolve(const dlc_store *s, const bench_load_opts *o, bench_load_run *run)
{
    const dlc_store_info *info = dlc_store_get_info(s);
    const dlc_field *fs = dlc_store_fields(s);
    memset(run->selected, 0, sizeof run->selected);
    for (uint32_t i = 0; i < o->cfg.num_fields; i++) {
        const int f = dlc_store_find_field(s, o->field_names[i]);
        if (f < 0) {
            char have[1024];
            field_list(s, have, sizeof have);
            fprintf(stderr, TOOL ": error: %s: --fields: no field \"%s\" (it has: %s)\n", o->shown,
                    o->field_names[i], have);
            return -1;
        }
        run->selected[f] = 1;
    }
    run->sample_bytes = run->image_bytes = 0;
    run->has_image = 0;
    size_t at = 0;
    run->field_list[0] = '\0';
    for (uint32_t f = 0; f < info->num_fields; f++) {
        if (o->cfg.num_fields && !run->selected[f])
            continue;
        run->selected[f] = 1;
        if (at < sizeof run->field_list)
            at += (size_t)snprintf(run->field_list + at, sizeof run->field_list - at, "%s%s",
                                   at ? ", " : "", fs[f].name);
        run->sample_bytes += output_bytes(&fs[f], &o->cfg);
        if (fs[f].kind == DLC_FIELD_IMAGE)
            run->has_image = 1;
        if (f == info->image_field)
            run->image_bytes = output_bytes(&fs[f], &o->cfg);
    }
    return 0;
}

size_t bench_batch_bytes(const dlc_batch *b)
{
    size_t n = 0;
    for (uint32_t k = 0; k < b->num_fields; k++)
        n += b->fields[k].bytes;
    return n;
}

void bench_digest_batch(XXH3_state_t *st, const dlc_batch *b, uint32_t label_field)
{
    /* The label field's values are the batch's labels, hashed last as they always were: a store
     * of images and labels keeps the digest it had before fields could be chosen. */
    for (uint32_t k = 0; k < b->num_fields; k++) {
        const dlc_batch_field *f = &b->fields[k];
        if (f->field == label_field && f->kind == DLC_FIELD_INT)
            continue;
        XXH3_64bits_update(st, f->data, f->bytes);
        if (f->lengths)
            XXH3_64bits_update(st, f->lengths, (size_t)b->count * sizeof *f->lengths);
        if (f->offsets)
            XXH3_64bits_update(st, f->offsets, ((size_t)b->count + 1) * sizeof *f->offsets);
    }
    XXH3_64bits_update(st, b->labels, (size_t)b->count * sizeof *b->labels);
}
