/* The outputs of a batch: planned once at open from the store's schema and the configuration,
 * allocated in every slot, packed when a batch is complete, and described when it is lent.
 *
 * Fixed-size outputs (images, masks, fixed arrays, scalars) have one place per sample in the
 * slot, written by the workers in their final layout. Variable outputs (arrays whose leading
 * dimension varies, boxes, whose number the crop changes, and bytes) are staged by the workers
 * at a fixed stride of the most rows a sample can have, and the worker that completes the batch
 * packs them: to the longest sample with zero padding (PAD), to a fixed length (PAD_TO), or end
 * to end with offsets (OFFSETS). Packing once per batch, after every sample is known, is what
 * lets the crop drop boxes and a corrupt record be replaced by one of another length without any
 * coordination between workers. */
#include "internal.h"
#include "sample_aug.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A slot's buffers may not exceed this (a batch of 16 GiB is a configuration mistake). */
#define MAX_SLOT_BYTES ((size_t)1 << 34)

static int valid_group_name(const char *n)
{
    size_t len = 0;
    for (; n[len]; len++)
        if (!(n[len] == '_' || (n[len] >= '0' && n[len] <= '9') ||
              (n[len] >= 'a' && n[len] <= 'z') || (n[len] >= 'A' && n[len] <= 'Z')))
            return 0;
    return len >= 1 && len < sizeof(((dlc__group *)0)->name);
}

static dlc_status check_group(const dlc_loader *l, const dlc_view_spec *v, uint32_t i)
{
    dlc_status rc = DLC_OK;
    FAIL_IF(!v->name || !valid_group_name(v->name), DLC_EINVAL,
            "%s: config.views[%u].name must be 1 to 31 of [A-Za-z0-9_]", l->path, i);
    FAIL_IF(v->count < 1 || v->count > 64, DLC_EINVAL,
            "%s: config.views[%u] (%s): count = %u must be in 1..64", l->path, i, v->name,
            v->count);
    FAIL_IF(v->augment > DLC_AUGMENT_RANDOM_RESIZED_CROP, DLC_EINVAL,
            "%s: config.views[%u] (%s): augment = %u is not a dlc_augment", l->path, i, v->name,
            v->augment);
    FAIL_IF(!v->crop_h || !v->crop_w || v->crop_h > 65536 || v->crop_w > 65536, DLC_EINVAL,
            "%s: config.views[%u] (%s): crop %ux%u (height x width) must be 1..65536 on each "
            "side",
            l->path, i, v->name, v->crop_h, v->crop_w);
    FAIL_IF(!(v->flip_prob >= 0 && v->flip_prob <= 1), DLC_EINVAL,
            "%s: config.views[%u] (%s): flip_prob = %g must be in [0, 1]", l->path, i, v->name,
            v->flip_prob);
    if (v->augment == DLC_AUGMENT_RANDOM_RESIZED_CROP)
        FAIL_IF(!(v->rrc_scale[0] > 0 && v->rrc_scale[0] <= v->rrc_scale[1] &&
                  v->rrc_scale[1] <= 1e6f && v->rrc_ratio[0] > 0 &&
                  v->rrc_ratio[0] <= v->rrc_ratio[1] && v->rrc_ratio[1] <= 1e6f),
                DLC_EINVAL,
                "%s: config.views[%u] (%s): rrc_scale (%g, %g) and rrc_ratio (%g, %g) must "
                "satisfy 0 < lo <= hi <= 1e6",
                l->path, i, v->name, v->rrc_scale[0], v->rrc_scale[1], v->rrc_ratio[0],
                v->rrc_ratio[1]);
fail:
    return rc;
}

/* The configured view groups, or the default one made of the loader's own crop options. */
static dlc_status plan_groups(dlc_loader *l)
{
    const dlc_loader_config *c = &l->cfg;
    dlc_status rc = DLC_OK;
    if (!c->views || c->num_views == 0) {
        l->groups[0] = (dlc__group){.count = 1,
                                    .augment = c->augment,
                                    .crop_h = c->crop_h,
                                    .crop_w = c->crop_w,
                                    .scale = {c->rrc_scale[0], c->rrc_scale[1]},
                                    .ratio = {c->rrc_ratio[0], c->rrc_ratio[1]},
                                    .flip = c->flip_prob};
        l->ngroups = l->nviews = 1;
        return DLC_OK;
    }
    FAIL_IF(c->num_views > DLC__MAX_GROUPS, DLC_EINVAL,
            "%s: config.num_views = %u: at most %u view groups", l->path, c->num_views,
            DLC__MAX_GROUPS);
    l->nviews = 0;
    for (uint32_t i = 0; i < c->num_views; i++) {
        const dlc_view_spec *v = &c->views[i];
        CHECK(check_group(l, v, i));
        for (uint32_t k = 0; k < i; k++)
            FAIL_IF(strcmp(l->groups[k].name, v->name) == 0, DLC_EINVAL,
                    "%s: config.views: two groups are named \"%s\"", l->path, v->name);
        dlc__group *g = &l->groups[i];
        *g = (dlc__group){.count = v->count,
                          .first = l->nviews,
                          .augment = v->augment,
                          .crop_h = v->crop_h,
                          .crop_w = v->crop_w,
                          .scale = {v->rrc_scale[0], v->rrc_scale[1]},
                          .ratio = {v->rrc_ratio[0], v->rrc_ratio[1]},
                          .flip = v->flip_prob};
        snprintf(g->name, sizeof g->name, "%s", v->name);
        l->nviews += v->count;
    }
    FAIL_IF(l->nviews > DLC__MAX_VIEWS, DLC_EINVAL, "%s: config.views: %u views, at most %u",
            l->path, l->nviews, DLC__MAX_VIEWS);
    l->ngroups = c->num_views;
fail:
    return rc;
}

/* The schema's field names, for messages: "a, b, c". */
static void field_list(const dlc_loader *l, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t f = 0; f < l->info->num_fields && at < cap; f++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", f ? ", " : "", l->fields[f].name);
}

/* Which fields the batches carry: config.fields, or all of them. */
static dlc_status select_fields(dlc_loader *l)
{
    const dlc_loader_config *c = &l->cfg;
    dlc_status rc = DLC_OK;
    memset(l->selected, 0, sizeof l->selected);
    if (!c->fields || c->num_fields == 0) {
        memset(l->selected, 1, l->info->num_fields);
        return DLC_OK;
    }
    for (uint32_t i = 0; i < c->num_fields; i++) {
        const char *name = c->fields[i];
        const int f = name ? dlc_store_find_field(l->store, name) : -1;
        if (f < 0) {
            char have[1024];
            field_list(l, have, sizeof have);
            FAIL_IF(1, DLC_EINVAL,
                    "%s: config.fields[%u]: no field \"%s\" in the store (it has: %s)", l->path, i,
                    name ? name : "(null)", have);
        }
        FAIL_IF(l->selected[f], DLC_EINVAL, "%s: config.fields names \"%s\" twice", l->path, name);
        l->selected[f] = 1;
    }
fail:
    return rc;
}

/* The option given for field @p f, or NULL. */
static const dlc_field_option *option_for(const dlc_loader *l, uint32_t f)
{
    for (uint32_t i = 0; i < l->cfg.num_field_options; i++)
        if (l->cfg.field_options[i].name &&
            strcmp(l->cfg.field_options[i].name, l->fields[f].name) == 0)
            return &l->cfg.field_options[i];
    return NULL;
}

static dlc_status check_options(const dlc_loader *l)
{
    dlc_status rc = DLC_OK;
    for (uint32_t i = 0; i < l->cfg.num_field_options; i++) {
        const dlc_field_option *o = &l->cfg.field_options[i];
        const int f = o->name ? dlc_store_find_field(l->store, o->name) : -1;
        FAIL_IF(f < 0, DLC_EINVAL, "%s: config.field_options[%u]: no field \"%s\" in the store",
                l->path, i, o->name ? o->name : "(null)");
        FAIL_IF(!l->selected[f], DLC_EINVAL,
                "%s: config.field_options[%u]: field \"%s\" is not among config.fields", l->path, i,
                o->name);
        FAIL_IF(o->variable > DLC_VARIABLE_OFFSETS, DLC_EINVAL,
                "%s: config.field_options[%u] (%s): variable = %u is not a dlc_variable_mode",
                l->path, i, o->name, o->variable);
        FAIL_IF(o->variable == DLC_VARIABLE_PAD_TO && (o->max_len == 0 || o->max_len > (1u << 24)),
                DLC_EINVAL, "%s: config.field_options[%u] (%s): PAD_TO needs max_len in 1..2^24",
                l->path, i, o->name);
        const dlc_field *fd = &l->fields[f];
        FAIL_IF(fd->kind == DLC_FIELD_BYTES && o->variable != DLC_VARIABLE_OFFSETS, DLC_EINVAL,
                "%s: config.field_options[%u] (%s): a bytes field comes as values + offsets "
                "(DLC_VARIABLE_OFFSETS)",
                l->path, i, o->name);
    }
fail:
    return rc;
}

/* The image (or, without one, the mask) whose size the crops are drawn on. It does not depend
 * on the selection, so that choosing fields never changes another field's bytes. */
static uint32_t primary_field(const dlc_loader *l)
{
    uint32_t mask = DLC_NO_FIELD;
    for (uint32_t f = 0; f < l->info->num_fields; f++) {
        if (l->fields[f].kind != DLC_FIELD_IMAGE)
            continue;
        if (!(l->fields[f].flags & DLC_FIELD_MASK))
            return f;
        if (mask == DLC_NO_FIELD)
            mask = f;
    }
    return mask;
}

static dlc_status add_output(dlc_loader *l, const dlc__output *o)
{
    dlc__output *n = realloc(l->out, (l->nout + 1) * sizeof *n);
    if (!n)
        return dlc__errorf(-ENOMEM, "%s: out of memory", l->path);
    l->out = n;
    l->out[l->nout++] = *o;
    return DLC_OK;
}

/* Height and width of field @p f of record @p index, or 0 x 0 when it cannot be read. */
static void record_size(const dlc_loader *l, uint32_t f, uint64_t index, uint32_t *h, uint32_t *w)
{
    dlc_store_reader *r = NULL;
    dlc_value v[DLC_MAX_FIELDS];
    *h = *w = 0;
    if (dlc_store_reader_open(l->store, &r) == DLC_OK &&
        dlc_store_read_values(r, index, v) == DLC_OK) {
        *h = v[f].dim0;
        *w = v[f].dim1;
    }
    dlc_store_reader_close(r);
}

/* A plain or center crop of @p oh x @p ow fits every record of variable image field @p f when
 * the store knows its smallest image (stores written before it was recorded do not: their
 * records are checked as their batches are built). Refused here, at open, rather than hours into
 * an epoch, naming one record too small. RandomResizedCrop resizes, so any size fits it. */
static dlc_status check_min_size(const dlc_loader *l, uint32_t f, const dlc__group *gr, uint32_t oh,
                                 uint32_t ow)
{
    const dlc_field *fd = &l->fields[f];
    if (gr->augment == DLC_AUGMENT_RANDOM_RESIZED_CROP || !fd->min_dim0 || !fd->min_dim1 ||
        (oh <= fd->min_dim0 && ow <= fd->min_dim1))
        return DLC_OK;
    const uint64_t rec = oh > fd->min_dim0 ? fd->min_record0 : fd->min_record1;
    uint32_t h, w;
    record_size(l, f, rec, &h, &w);
    char size[48], group[64] = "";
    if (h && w)
        snprintf(size, sizeof size, "%ux%u (height x width)", h, w);
    else if (oh > fd->min_dim0)
        snprintf(size, sizeof size, "%u pixels high", fd->min_dim0);
    else
        snprintf(size, sizeof size, "%u pixels wide", fd->min_dim1);
    if (gr->name[0])
        snprintf(group, sizeof group, " of view group \"%s\"", gr->name);
    return dlc__errorf(DLC_EINVAL,
                       "%s: field \"%s\": record %llu is %s, smaller than the %ux%u crop%s; use a "
                       "crop of at most %ux%u, random_resized_crop, or rebuild the store with "
                       "larger images",
                       l->path, fd->name, (unsigned long long)rec, size, oh, ow, group,
                       fd->min_dim0, fd->min_dim1);
}

/* An image or mask field in group @p g. */
static dlc_status plan_image(dlc_loader *l, uint32_t f, uint32_t g)
{
    dlc_status rc = DLC_OK;
    const dlc_field *fd = &l->fields[f];
    const dlc__group *gr = &l->groups[g];
    const dlc_loader_config *c = &l->cfg;
    const int mask = (fd->flags & DLC_FIELD_MASK) != 0;
    dlc__output o = {.field = f,
                     .kind = fd->kind,
                     .group = g,
                     .var = DLC__VAR_FIXED,
                     .link = -1,
                     .filtered_by = -1};
    o.op = mask ? DLC__OUT_MASK : DLC__OUT_IMAGE;
    if (gr->name[0])
        snprintf(o.name, sizeof o.name, "%s_%s", fd->name, gr->name);
    else
        snprintf(o.name, sizeof o.name, "%s", fd->name);
    o.out_c = fd->shape[2];
    o.out_h = gr->crop_h ? gr->crop_h : fd->shape[0];
    o.out_w = gr->crop_w ? gr->crop_w : fd->shape[1];
    FAIL_IF(!o.out_h || !o.out_w, DLC_EINVAL,
            "%s: config.crop_h/crop_w = 0 asks for the size of field \"%s\", but its records "
            "differ in size (a variable-size field, or a mixture of stores of other sizes): "
            "give the size of the crop (crop= in Python; RandomResizedCrop takes any size)",
            l->path, fd->name);
    FAIL_IF(gr->augment != DLC_AUGMENT_RANDOM_RESIZED_CROP && fd->shape[0] && fd->shape[1] &&
                (o.out_h > fd->shape[0] || o.out_w > fd->shape[1]),
            DLC_EINVAL,
            "%s: config.crop_h x crop_w = %ux%u is larger than field \"%s\"'s %ux%u: give a "
            "crop of at most that (crop= in Python), or resize with RandomResizedCrop "
            "(random_resized_crop=True), or build the store at a larger size",
            l->path, o.out_h, o.out_w, fd->name, fd->shape[0], fd->shape[1]);
    CHECK(check_min_size(l, f, gr, o.out_h, o.out_w));
    o.dtype = mask ? DLC_DTYPE_UINT8 : c->dtype;
    if (o.dtype != DLC_DTYPE_UINT8)
        for (uint32_t ch = 0; ch < o.out_c; ch++)
            FAIL_IF(!(c->std[ch] > 0 || c->std[ch] < 0) || c->mean[ch] != c->mean[ch], DLC_EINVAL,
                    "%s: config.std[%u] = %g / mean = %g cannot normalize field \"%s\"", l->path,
                    ch, c->std[ch], c->mean[ch], fd->name);
    dlc__convert_init(&o.cv, o.dtype, o.out_c, c->mean, c->std);
    o.layout = o.dtype == DLC_DTYPE_UINT8 ? DLC_LAYOUT_NHWC : DLC_LAYOUT_NCHW;
    o.view_bytes = (size_t)o.out_h * o.out_w * o.out_c * dlc_dtype_size(o.dtype);
    o.sample_cap = o.view_bytes * gr->count;
    const uint64_t hwc[3] = {o.out_h, o.out_w, o.out_c}, chw[3] = {o.out_c, o.out_h, o.out_w};
    const uint64_t *d = o.layout == DLC_LAYOUT_NHWC ? hwc : chw;
    o.ndim = 0;
    if (gr->name[0])
        o.dims[o.ndim++] = gr->count;
    for (int i = 0; i < 3; i++)
        o.dims[o.ndim++] = d[i];
    const size_t staging = (size_t)o.out_h * o.out_w * o.out_c;
    if (staging > l->tmp_bytes)
        l->tmp_bytes = staging;
    CHECK(add_output(l, &o));
fail:
    return rc;
}

/* The variable layout of output @p o: rows of row_bytes bytes, at most rows_cap per sample. */
static void make_variable(dlc__output *o, const dlc_field_option *opt, uint32_t default_mode,
                          uint32_t most_rows)
{
    o->var = opt ? opt->variable : default_mode;
    o->max_len = opt ? opt->max_len : 0;
    o->rows_cap = o->var == DLC_VARIABLE_PAD_TO ? o->max_len : most_rows;
    assert(o->var != DLC__VAR_FIXED);
    o->sample_cap = (size_t)o->rows_cap * o->row_bytes;
}

/* An ndarray field: boxes, classes of boxes, or a plain array. */
static dlc_status plan_array(dlc_loader *l, uint32_t f)
{
    const dlc_field *fd = &l->fields[f];
    const dlc_field_option *opt = option_for(l, f);
    dlc__output o = {.field = f,
                     .kind = fd->kind,
                     .op = DLC__OUT_ARRAY,
                     .var = DLC__VAR_FIXED,
                     .dtype = fd->dtype,
                     .layout = DLC_LAYOUT_NONE,
                     .link = -1,
                     .filtered_by = -1};
    snprintf(o.name, sizeof o.name, "%s", fd->name);
    o.ndim = fd->ndim;
    o.row_bytes = dlc_dtype_size(fd->dtype);
    for (uint32_t i = 0; i < fd->ndim; i++) {
        o.dims[i] = fd->shape[i];
        if (i > 0)
            o.row_bytes *= fd->shape[i];
    }
    /* Boxes move with the image, so the crop may drop some: always variable. So are the classes
     * of selected boxes, which follow them. */
    const int boxes = (fd->flags & DLC_FIELD_BOXES) && l->primary != DLC_NO_FIELD;
    int classes = 0;
    for (uint32_t b = 0; b < l->info->num_fields; b++)
        classes |= l->selected[b] && (l->fields[b].flags & DLC_FIELD_BOXES) &&
                   l->fields[b].link == f && l->primary != DLC_NO_FIELD;
    if (boxes) {
        o.op = DLC__OUT_BOXES;
        o.dtype = DLC_DTYPE_FLOAT32;
        if (fd->max_dim0 > l->max_boxes)
            l->max_boxes = fd->max_dim0;
    }
    if (boxes || classes || (fd->flags & DLC_FIELD_VARIABLE))
        make_variable(&o, opt, DLC_VARIABLE_PAD, fd->max_dim0);
    else
        o.sample_cap = (size_t)fd->shape[0] * o.row_bytes;
    /* The crop moves all of a sample's boxes into the slot before PAD_TO cuts them to max_len,
     * so their staging room is the most boxes of any record. */
    if (boxes && fd->max_dim0 > o.rows_cap)
        o.sample_cap = (size_t)fd->max_dim0 * o.row_bytes;
    return add_output(l, &o);
}

static dlc_status plan_field(dlc_loader *l, uint32_t f)
{
    dlc_status rc = DLC_OK;
    const dlc_field *fd = &l->fields[f];
    dlc__output o = {.field = f,
                     .kind = fd->kind,
                     .layout = DLC_LAYOUT_NONE,
                     .link = -1,
                     .filtered_by = -1,
                     .var = DLC__VAR_FIXED};
    snprintf(o.name, sizeof o.name, "%s", fd->name);
    switch (fd->kind) {
    case DLC_FIELD_IMAGE:
        for (uint32_t g = 0; g < l->ngroups; g++)
            CHECK(plan_image(l, f, g));
        return DLC_OK;
    case DLC_FIELD_NDARRAY:
        return plan_array(l, f);
    case DLC_FIELD_INT:
    case DLC_FIELD_FLOAT:
        o.op = DLC__OUT_SCALAR;
        o.dtype = fd->kind == DLC_FIELD_INT ? DLC_DTYPE_INT64 : DLC_DTYPE_FLOAT64;
        o.sample_cap = 8;
        return add_output(l, &o);
    case DLC_FIELD_BYTES:
        o.op = DLC__OUT_BYTES;
        o.dtype = DLC_DTYPE_UINT8;
        o.ndim = 1;
        o.row_bytes = 1;
        FAIL_IF(fd->max_size > UINT32_MAX, DLC_EINVAL,
                "%s: field \"%s\": values of up to %llu bytes do not fit a batch", l->path,
                fd->name, (unsigned long long)fd->max_size);
        make_variable(&o, NULL, DLC_VARIABLE_OFFSETS, (uint32_t)fd->max_size);
        return add_output(l, &o);
    default:
        FAIL_IF(1, DLC_ECORRUPT, "%s: field \"%s\" of unknown kind %u", l->path, fd->name,
                fd->kind);
    }
fail:
    return rc;
}

/* Tie each BOXES output to the output of its classes, and check what the views allow. */
static dlc_status link_outputs(dlc_loader *l)
{
    dlc_status rc = DLC_OK;
    for (uint32_t i = 0; i < l->nout; i++) {
        dlc__output *o = &l->out[i];
        if (o->op != DLC__OUT_BOXES)
            continue;
        FAIL_IF(l->nviews > 1, DLC_EINVAL,
                "%s: field \"%s\": boxes follow one view of the image; with %u views, leave them "
                "out of config.fields or configure one view",
                l->path, o->name, l->nviews);
        for (uint32_t k = 0; k < l->nout; k++)
            if (l->out[k].field == l->fields[o->field].link) {
                o->link = (int)k;
                l->out[k].filtered_by = (int)i;
            }
    }
    for (uint32_t i = 0; i < l->nout; i++) {
        const dlc__output *o = &l->out[i];
        l->spatial |= o->op == DLC__OUT_IMAGE || o->op == DLC__OUT_MASK ||
                      o->op == DLC__OUT_BOXES || o->op == DLC__OUT_PARAMS;
        l->variable |= o->var != DLC__VAR_FIXED;
        FAIL_IF(o->sample_cap > MAX_SLOT_BYTES / l->cfg.batch_size, DLC_EINVAL,
                "%s: field \"%s\": a batch of %u samples of up to %zu bytes is too large", l->path,
                o->name, l->cfg.batch_size, o->sample_cap);
        if ((o->op == DLC__OUT_IMAGE || o->op == DLC__OUT_MASK) && l->first_image < 0 &&
            l->groups[o->group].name[0] == '\0' && o->op == DLC__OUT_IMAGE)
            l->first_image = (int)i;
    }
fail:
    return rc;
}

dlc_status dlc__outputs_plan(dlc_loader *l)
{
    dlc_status rc = DLC_OK;
    l->first_image = -1;
    CHECK(plan_groups(l));
    CHECK(dlc__aug_plan_groups(l));
    CHECK(select_fields(l));
    CHECK(check_options(l));
    l->primary = primary_field(l);
    for (uint32_t f = 0; f < l->info->num_fields; f++)
        if (l->selected[f])
            CHECK(plan_field(l, f));
    CHECK(dlc__aug_plan_outputs(l));
    CHECK(link_outputs(l));
    /* Claim enough samples at a time that the shared counter is touched rarely (small records
     * come by the million per second), and few enough that a batch spreads over the workers. */
    size_t per_sample = 0;
    for (uint32_t i = 0; i < l->nout; i++)
        per_sample += l->out[i].sample_cap;
    size_t chunk = per_sample ? (32u << 10) / per_sample : 64;
    chunk = chunk < 4 ? 4 : chunk > 64 ? 64 : chunk;
    l->chunk = (uint32_t)chunk;
fail:
    return rc;
}

/* Round @p n up to a multiple of @p a (a power of two). */
static size_t round_up(size_t n, size_t a)
{
    return (n + a - 1) & ~(a - 1);
}

void dlc__arena_plan(dlc_loader *l)
{
    const size_t B = l->cfg.batch_size;
    /* The small arrays first, so that the device path copies them with the data in one piece:
     * labels, record numbers, then every variable output's lengths and offsets. */
    size_t at = 0;
    l->arena_labels = at;
    at = round_up(at + B * sizeof(int64_t), 64);
    l->arena_indices = at;
    at = round_up(at + B * sizeof(uint64_t), 64);
    for (uint32_t i = 0; i < l->nout; i++) {
        dlc__output *o = &l->out[i];
        o->arena_lengths = o->arena_offsets = SIZE_MAX;
        if (o->var != DLC__VAR_FIXED) {
            o->arena_lengths = at;
            at = round_up(at + B * sizeof(int64_t), 64);
        }
        if (o->var == DLC_VARIABLE_OFFSETS) {
            o->arena_offsets = at;
            at = round_up(at + (B + 1) * sizeof(int64_t), 64);
        }
    }
    l->arena_erase = SIZE_MAX;
    if (l->erase_dev) {
        l->arena_erase = at;
        at = round_up(at + B * l->nviews * sizeof(dlc__hd_erase_box), 64);
    }
    l->arena_meta = at;
    /* Then the outputs' data, 256-byte aligned (what cudaMalloc gives, so that a staged output
     * on the device is as aligned as the caller's own buffers). */
    for (uint32_t i = 0; i < l->nout; i++) {
        dlc__output *o = &l->out[i];
        at = round_up(at, 256);
        o->arena_data = at;
        /* link_outputs() bounded every output by MAX_SLOT_BYTES: no overflow below. */
        assert(o->sample_cap <= MAX_SLOT_BYTES / B);
        at += o->sample_cap * B;
    }
    l->arena_bytes = round_up(at ? at : 1, 4096);
    assert(l->arena_labels % 64 == 0 && l->arena_indices % 64 == 0 && l->arena_meta % 64 == 0);
    assert(at <= l->arena_bytes && l->arena_bytes % 4096 == 0);
}

dlc_status dlc__slot_outputs_alloc(dlc_loader *l, dlc__slot *s, uint8_t *arena)
{
    s->out = calloc(l->nout ? l->nout : 1, sizeof *s->out);
    s->bf = calloc(l->nout ? l->nout : 1, sizeof *s->bf);
    if (!s->out || !s->bf)
        return dlc__errorf(-ENOMEM, "%s: out of memory", l->path);
    dlc__slot_outputs_point(l, s, arena);
    return DLC_OK;
}

void dlc__slot_outputs_point(dlc_loader *l, dlc__slot *s, uint8_t *arena)
{
    assert(arena && (uintptr_t)arena % 256 == 0);
    s->arena = arena;
    s->labels = (int64_t *)(arena + l->arena_labels);
    s->indices = (uint64_t *)(arena + l->arena_indices);
    for (uint32_t i = 0; i < l->nout; i++) {
        const dlc__output *o = &l->out[i];
        dlc__slot_out *so = &s->out[i];
        /* Each part inside the arena, aligned: the data after the small arrays. */
        assert(o->arena_data % 256 == 0 && o->arena_data >= l->arena_meta);
        assert(o->arena_data + o->sample_cap * l->cfg.batch_size <= l->arena_bytes);
        so->data = arena + o->arena_data;
        if (o->var != DLC__VAR_FIXED) {
            assert(o->arena_lengths % 64 == 0 && o->arena_lengths < l->arena_meta);
            so->lengths = (int64_t *)(arena + o->arena_lengths);
        }
        if (o->var == DLC_VARIABLE_OFFSETS) {
            assert(o->arena_offsets % 64 == 0 && o->arena_offsets < l->arena_meta);
            so->offsets = (int64_t *)(arena + o->arena_offsets);
        }
    }
}

void dlc__slot_outputs_free(dlc_loader *l, dlc__slot *s)
{
    free(s->out);
    free(s->bf);
    s->out = NULL;
    s->bf = NULL;
    s->labels = NULL;
    s->indices = NULL;
}

void dlc__outputs_pack(dlc_loader *l, dlc__slot *s)
{
    const uint32_t n = s->count;
    assert(n >= 1 && n <= l->cfg.batch_size);
    for (uint32_t i = 0; i < l->nout; i++) {
        const dlc__output *o = &l->out[i];
        dlc__slot_out *so = &s->out[i];
        if (o->var == DLC__VAR_FIXED)
            continue;
        const size_t rb = o->row_bytes;
        /* Boxes stage every box before PAD_TO cuts them: their room may exceed rows_cap rows. */
        assert(so->lengths && o->sample_cap >= (size_t)o->rows_cap * rb);
        /* Every move goes to a place at or before its source (rows <= rows_cap, and the packed
         * offset of sample j is at most j * rows_cap), so one forward pass is safe. */
        if (o->var == DLC_VARIABLE_OFFSETS) {
            uint64_t at = 0;
            for (uint32_t j = 0; j < n; j++) {
                /* The workers wrote at most rows_cap rows of each sample. */
                assert(so->lengths[j] >= 0 && (uint64_t)so->lengths[j] <= o->rows_cap);
                so->offsets[j] = (int64_t)at;
                memmove(so->data + at * rb, so->data + (size_t)j * o->sample_cap,
                        (size_t)so->lengths[j] * rb);
                at += (uint64_t)so->lengths[j];
            }
            so->offsets[n] = (int64_t)at;
            assert(at * rb <= (uint64_t)n * o->sample_cap); /* Never past the staged rows. */
            so->rows = at;
            continue;
        }
        uint64_t rows = o->max_len;
        if (o->var == DLC_VARIABLE_PAD) {
            rows = 0;
            for (uint32_t j = 0; j < n; j++)
                rows = (uint64_t)so->lengths[j] > rows ? (uint64_t)so->lengths[j] : rows;
        }
        /* Sample j's packed rows end at (j + 1) * rows <= (j + 1) * rows_cap: inside the slot. */
        assert(rows <= o->rows_cap);
        for (uint32_t j = 0; j < n; j++) {
            assert(so->lengths[j] >= 0 && (uint64_t)so->lengths[j] <= rows);
            uint8_t *dst = so->data + (size_t)j * rows * rb;
            const size_t used = (size_t)so->lengths[j] * rb;
            memmove(dst, so->data + (size_t)j * o->sample_cap, used);
            memset(dst + used, 0, (size_t)rows * rb - used);
        }
        so->rows = rows;
    }
}

/* The lent description of output @p i. */
static void describe_one(const dlc_loader *l, const dlc__slot *s, uint32_t i)
{
    const dlc__output *o = &l->out[i];
    const dlc__slot_out *so = &s->out[i];
    dlc_batch_field *bf = &s->bf[i];
    /* Packed rows (variable outputs) fit the output's part of the arena. */
    assert(o->var == DLC__VAR_FIXED ||
           so->rows * o->row_bytes <= (uint64_t)s->count * o->sample_cap);
    memset(bf, 0, sizeof *bf);
    bf->name = o->name;
    bf->field = o->field;
    bf->kind = o->kind;
    bf->data = so->data;
    bf->dtype = o->dtype;
    bf->layout = o->layout;
    const uint32_t n = s->count;
    if (o->var == DLC_VARIABLE_OFFSETS) {
        /* The batch's rows end to end: [total, trailing dimensions...]. */
        bf->ndim = o->ndim ? o->ndim : 1;
        bf->shape[0] = so->rows;
        for (uint32_t d = 1; d < o->ndim; d++)
            bf->shape[d] = o->dims[d];
        bf->bytes = (size_t)so->rows * o->row_bytes;
        bf->offsets = so->offsets;
        return;
    }
    bf->ndim = 1 + o->ndim;
    bf->shape[0] = n;
    for (uint32_t d = 0; d < o->ndim; d++)
        bf->shape[1 + d] = o->dims[d];
    if (o->var == DLC__VAR_FIXED) {
        bf->bytes = (size_t)n * o->sample_cap;
    } else {
        bf->shape[1] = so->rows;
        bf->bytes = (size_t)n * so->rows * o->row_bytes;
        bf->lengths = so->lengths;
    }
}

void dlc__outputs_describe(dlc_loader *l, dlc__slot *s, dlc_batch *batch)
{
    for (uint32_t i = 0; i < l->nout; i++)
        describe_one(l, s, i);
    batch->num_fields = l->nout;
    batch->fields = s->bf;
    if (l->first_image < 0)
        return;
    const dlc_batch_field *img = &s->bf[l->first_image];
    batch->data = img->data;
    batch->dtype = img->dtype;
    batch->layout = img->layout;
    for (int d = 0; d < 4; d++)
        batch->shape[d] = (uint32_t)img->shape[d];
    batch->bytes = img->bytes;
}
