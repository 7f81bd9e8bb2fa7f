/* One sample of a batch, built by a worker: the views' geometry drawn once from the sample's
 * random streams, then every output written into its place in the slot. Images, masks and boxes
 * of a record move together: one crop box and one flip per view, drawn on the primary image's
 * size, applied with antialiased bilinear to images, nearest neighbour to masks (class ids are
 * never blended) and as a coordinate map to boxes. */
#include "sample.h"
#include "sample_aug.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const uint8_t *dlc__payload(const dlc__sample_view *sv, const dlc_value *v)
{
    return sv->span ? sv->span + (v->offset - sv->span_off) : v->data;
}

dlc_status dlc__ensure_scratch(dlc__worker *w, size_t need)
{
    if (need <= w->scratch_size)
        return DLC_OK;
    /* Grows to the largest box seen and stays: a steady stream allocates nothing. */
    void *p = NULL;
    if (posix_memalign(&p, 64, need))
        return dlc__errorf(-ENOMEM, "loader: out of memory for %zu bytes of resize scratch", need);
    free(w->scratch);
    w->scratch = p;
    w->scratch_size = need;
    return DLC_OK;
}

/* The random stream of view @p v of the sample at global position @p pos. View 0 keeps the key
 * the loader has always used, so a loader with one view gives the bytes it always gave; the
 * others get unrelated keys. */
static dlc__rng view_rng(const dlc__slot *s, uint64_t pos, uint32_t v)
{
    const uint64_t purpose = DLC__KEY_AUGMENT | ((uint64_t)v << 8);
    dlc__rng r = {dlc__key4(purpose, s->seed, s->epoch, pos), 0};
    return r;
}

/* Draw every view's crop box and flip on the primary image's width x height. */
static dlc_status draw_views(const dlc_loader *l, dlc__worker *w, const dlc__slot *s, uint64_t pos,
                             uint64_t index, uint32_t W, uint32_t H)
{
    for (uint32_t g = 0; g < l->ngroups; g++) {
        const dlc__group *gr = &l->groups[g];
        const uint32_t cw = gr->crop_w ? gr->crop_w : W, ch = gr->crop_h ? gr->crop_h : H;
        assert(gr->first + gr->count <= l->nviews); /* w->views has nviews entries. */
        for (uint32_t k = 0; k < gr->count; k++) {
            dlc__view_params *vp = &w->views[gr->first + k];
            dlc__rng r = view_rng(s, pos, gr->first + k);
            if (gr->augment == DLC_AUGMENT_RANDOM_RESIZED_CROP) {
                vp->box = dlc__rrc_params(W, H, gr->scale, gr->ratio, &r);
            } else {
                if (W < cw || H < ch)
                    return dlc__errorf(DLC_EINVAL,
                                       "%s: record %llu: its image of %ux%u (height x width) "
                                       "is smaller than the %ux%u crop",
                                       l->path, (unsigned long long)index, H, W, ch, cw);
                vp->box = gr->augment == DLC_AUGMENT_CENTER_CROP
                              ? dlc__center_box(W, H, cw, ch)
                              : dlc__random_box(W, H, cw, ch, &r);
            }
            /* Every crop lies inside the image it is drawn on. */
            assert((uint64_t)vp->box.left + vp->box.w <= W &&
                   (uint64_t)vp->box.top + vp->box.h <= H);
            vp->flip = gr->flip > 0 && dlc__rng_uniform(&r) < gr->flip;
            /* The ops and the erasing come after, from the same stream: a loader without them
             * draws exactly what it always drew. */
            if (l->aug_any)
                dlc__aug_draw_view(gr, gr->first + k, cw, ch, s->seed, s->epoch, pos, &r,
                                   &w->vaug[gr->first + k]);
        }
    }
    return DLC_OK;
}

/* A decoded (or raw) image of a record: pixels, and the scale from the record's size to them
 * (below 1 when a JPEG was decoded DCT-scaled). */
typedef struct pixels {
    dlc_image img;
    double sx, sy;
} pixels;

/* The smallest decode of a JPEG that still gives every RandomResizedCrop view of group @p gr its
 * full resolution: libjpeg-turbo's DCT scaling then does most of the reduction for free. */
static void min_decode_size(const dlc__worker *w, const dlc__group *gr, uint32_t W, uint32_t H,
                            uint32_t ow, uint32_t oh, uint32_t *min_w, uint32_t *min_h)
{
    *min_w = *min_h = 0;
    if (gr->augment != DLC_AUGMENT_RANDOM_RESIZED_CROP)
        return;
    for (uint32_t k = 0; k < gr->count; k++) {
        const dlc__box *b = &w->views[gr->first + k].box;
        const uint32_t mw = (uint32_t)(((uint64_t)W * ow + b->w - 1) / b->w);
        const uint32_t mh = (uint32_t)(((uint64_t)H * oh + b->h - 1) / b->h);
        *min_w = mw > *min_w ? mw : *min_w;
        *min_h = mh > *min_h ? mh : *min_h;
    }
}

static dlc_status get_pixels(const dlc_loader *l, dlc__worker *w, const dlc__output *o,
                             const dlc__sample_view *sv, pixels *px)
{
    const dlc_field *fd = &l->fields[o->field];
    const dlc_value *v = &sv->v[o->field];
    const uint8_t *data = dlc__payload(sv, v);
    const uint32_t W = v->dim1, H = v->dim0, C = fd->shape[2];
    px->sx = px->sy = 1.0;
    if (fd->encoding == DLC_ENCODING_RAW) {
        px->img = (dlc_image){(uint8_t *)data, W, H, C, (size_t)W * C};
        return DLC_OK;
    }
    dlc_status rc;
    if (fd->encoding == DLC_ENCODING_PNG) {
        rc = dlc_png_decode(w->codecs[o->field], data, v->size, &px->img);
    } else {
        uint32_t mw, mh;
        min_decode_size(w, &l->groups[o->group], W, H, o->out_w, o->out_h, &mw, &mh);
        rc = dlc_jpeg_decode_as(w->codecs[o->field], data, v->size, C, mw, mh, &px->img);
    }
    if (rc != DLC_OK)
        return dlc__errorf(rc, "%s: record %llu: field \"%s\": %s", l->path,
                           (unsigned long long)sv->index, fd->name, dlc_errmsg());
    const dlc_image *im = &px->img;
    const int scaled = im->width != W || im->height != H;
    if (im->channels != C || im->width > W || im->height > H ||
        (scaled && (fd->encoding != DLC_ENCODING_JPEG || !im->width || !im->height)))
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: record %llu: field \"%s\": the encoded image is %ux%ux%u, its "
                           "header says %ux%ux%u",
                           l->path, (unsigned long long)sv->index, fd->name, im->width, im->height,
                           im->channels, W, H, C);
    px->sx = (double)im->width / W;
    px->sy = (double)im->height / H;
    return DLC_OK;
}

/* One view of an image under ops: crop (or resize) and flip into the worker's uint8 view, apply
 * the ops there, then convert into @p dst. */
static dlc_status image_view_ops(const dlc_loader *l, dlc__worker *w, const dlc__output *o,
                                 const pixels *px, const dlc__view_params *vp,
                                 const dlc__view_aug *va, uint64_t index, uint8_t *dst)
{
    const dlc__group *gr = &l->groups[o->group];
    const uint32_t ow = o->out_w, oh = o->out_h, C = o->out_c;
    const size_t row = (size_t)ow * C;
    /* A uint8 output (also every image of the device path) is its own staging: the ops run in
     * the slot, and no copy follows. */
    const int direct = o->cv.dtype == DLC_DTYPE_UINT8;
    uint8_t *img = direct ? dst : w->aug_img;
    assert(direct || (row * oh <= l->aug_img_bytes && w->aug_img));
    dlc_status rc = DLC_OK;
    /* A resized view whose ops commute with the flip is flipped by the conversion pass, as
     * image_view() does, rather than by a copy of its own before the ops. */
    int late_flip = 0;
    if (gr->augment != DLC_AUGMENT_RANDOM_RESIZED_CROP) {
        dlc__crop_convert(px->img.data, px->img.stride, vp->box, vp->flip, &o->cv_u8, img);
    } else {
        late_flip = vp->flip && !direct && dlc__aug_record_commutes_with_flip(&va->rec);
        const dlc__box *b = &vp->box;
        const uint32_t bw = (uint32_t)(b->w * px->sx + 1), bh = (uint32_t)(b->h * px->sy + 1);
        rc = dlc__ensure_scratch(w, dlc_resize_scratch_bound(bw, bh, ow, oh, C));
        if (rc != DLC_OK)
            return rc;
        const int early_flip = vp->flip && !late_flip;
        const dlc_image out = {early_flip ? w->tmp : img, ow, oh, C, row};
        rc = dlc_resize(&px->img, b->left * px->sx, b->top * px->sy, b->w * px->sx, b->h * px->sy,
                        &out, w->scratch, w->scratch_size);
        if (rc != DLC_OK)
            return rc;
        if (early_flip) {
            const dlc__box all = {0, 0, oh, ow};
            dlc__crop_convert(w->tmp, row, all, 1, &o->cv_u8, img);
        }
    }
    rc = dlc__aug_apply(&va->rec, img, row, ow, oh, C, w->aug_scratch, l->aug_scratch_bytes);
    if (rc != DLC_OK)
        return dlc__errorf(rc, "%s: record %llu: field \"%s\": %s", l->path,
                           (unsigned long long)index, l->fields[o->field].name, dlc_errmsg());
    if (!direct) {
        const dlc__box all = {0, 0, oh, ow};
        dlc__crop_convert(img, row, all, late_flip, &o->cv, dst);
    }
    return DLC_OK;
}

/* One view of an image: crop and convert, or resize the box and then flip and convert. */
static dlc_status image_view(const dlc_loader *l, dlc__worker *w, const dlc__output *o,
                             const pixels *px, const dlc__view_params *vp, uint8_t *dst)
{
    const dlc__group *gr = &l->groups[o->group];
    const uint32_t ow = o->out_w, oh = o->out_h, C = o->out_c;
    if (gr->augment != DLC_AUGMENT_RANDOM_RESIZED_CROP) {
        dlc__crop_convert(px->img.data, px->img.stride, vp->box, vp->flip, &o->cv, dst);
        return DLC_OK;
    }
    const dlc__box *b = &vp->box;
    const uint32_t bw = (uint32_t)(b->w * px->sx + 1), bh = (uint32_t)(b->h * px->sy + 1);
    dlc_status rc = dlc__ensure_scratch(w, dlc_resize_scratch_bound(bw, bh, ow, oh, C));
    if (rc != DLC_OK)
        return rc;
    /* Without flip or conversion the resize writes the final view itself; otherwise a small
     * staging image that the convert pass reads once. */
    const int direct = !vp->flip && o->cv.dtype == DLC_DTYPE_UINT8;
    const dlc_image out = {direct ? dst : w->tmp, ow, oh, C, (size_t)ow * C};
    rc = dlc_resize(&px->img, b->left * px->sx, b->top * px->sy, b->w * px->sx, b->h * px->sy, &out,
                    w->scratch, w->scratch_size);
    if (rc != DLC_OK || direct)
        return rc;
    const dlc__box all = {0, 0, oh, ow};
    dlc__crop_convert(w->tmp, (size_t)ow * C, all, vp->flip, &o->cv, dst);
    return DLC_OK;
}

/* The spatial fields of a record share one size: the crops are drawn on it. */
static dlc_status check_same_size(const dlc_loader *l, const dlc__output *o,
                                  const dlc__sample_view *sv)
{
    const dlc_value *v = &sv->v[o->field], *p = &sv->v[l->primary];
    if (o->field == l->primary || (v->dim0 == p->dim0 && v->dim1 == p->dim1))
        return DLC_OK;
    return dlc__errorf(DLC_EINVAL,
                       "%s: record %llu: field \"%s\" is %ux%u and field \"%s\" %ux%u (height x "
                       "width): the images and masks of a record must have one size to be cropped "
                       "together",
                       l->path, (unsigned long long)sv->index, l->fields[o->field].name, v->dim0,
                       v->dim1, l->fields[l->primary].name, p->dim0, p->dim1);
}

static dlc_status out_image(const dlc_loader *l, dlc__worker *w, const dlc__output *o,
                            const dlc__sample_view *sv, uint8_t *dst)
{
    dlc_status rc = check_same_size(l, o, sv);
    pixels px;
    if (rc == DLC_OK)
        rc = get_pixels(l, w, o, sv, &px);
    const dlc__group *gr = &l->groups[o->group];
    assert((size_t)gr->count * o->view_bytes <= o->sample_cap); /* The views fill the sample. */
    for (uint32_t k = 0; rc == DLC_OK && k < gr->count; k++) {
        const dlc__view_params *vp = &w->views[gr->first + k];
        uint8_t *out = dst + (size_t)k * o->view_bytes;
        const dlc__view_aug *va = l->aug_any ? &w->vaug[gr->first + k] : NULL;
        if (o->op == DLC__OUT_IMAGE && va && va->rec.n && gr->aug_on)
            rc = image_view_ops(l, w, o, &px, vp, va, sv->index, out);
        else if (o->op == DLC__OUT_IMAGE)
            rc = image_view(l, w, o, &px, vp, out);
        else if (gr->augment == DLC_AUGMENT_RANDOM_RESIZED_CROP)
            dlc__resize_nearest(px.img.data, px.img.stride, o->out_c, vp->box.left, vp->box.top,
                                vp->box.w, vp->box.h, vp->flip, out, o->out_w, o->out_h);
        else
            dlc__crop_convert(px.img.data, px.img.stride, vp->box, vp->flip, &o->cv, out);
        /* RandomErasing on the converted view; the device path's float images are erased on the
         * device after their conversion (dlc__aug_plan_outputs()). */
        if (rc == DLC_OK && o->op == DLC__OUT_IMAGE && va && gr->erase_p > 0 && !l->erase_dev)
            dlc__aug_erase(gr, o, va, out);
    }
    return rc;
}

/* The geometry of view 0, as a map of the primary image's pixels to the output's. */
static dlc__geom view0_geom(const dlc_loader *l, const dlc__worker *w, const dlc__sample_view *sv)
{
    const dlc__group *gr = &l->groups[0];
    const dlc__view_params *vp = &w->views[0];
    const dlc_value *p = &sv->v[l->primary];
    const uint32_t ow = gr->crop_w ? gr->crop_w : p->dim1, oh = gr->crop_h ? gr->crop_h : p->dim0;
    dlc__geom g = {vp->box.left, vp->box.top, 1.0, 1.0, ow, oh, vp->flip};
    if (gr->augment == DLC_AUGMENT_RANDOM_RESIZED_CROP) {
        g.sx = (double)ow / vp->box.w;
        g.sy = (double)oh / vp->box.h;
    }
    return g;
}

static void out_boxes(const dlc_loader *l, dlc__worker *w, const dlc__output *o,
                      const dlc__sample_view *sv, uint8_t *dst, int64_t *length)
{
    const dlc_value *v = &sv->v[o->field];
    /* The store reader holds every record to the schema's max_dim0, which sized the staging
     * room and the worker's keep flags. */
    assert(v->dim0 <= l->max_boxes && (size_t)v->dim0 * o->row_bytes <= o->sample_cap);
    const dlc__geom g = view0_geom(l, w, sv);
    uint32_t kept = dlc__boxes_transform(dlc__payload(sv, v), v->dim0, &g, (float *)dst, w->keep);
    if (kept > o->rows_cap) {
        /* PAD_TO shorter than the boxes kept: the first max_len stay, with their classes. */
        uint32_t seen = 0;
        for (uint32_t i = 0; i < v->dim0; i++)
            if (w->keep[i] && ++seen > o->rows_cap)
                w->keep[i] = 0;
        kept = o->rows_cap;
    }
    assert(kept <= o->rows_cap);
    *length = kept;
}

/* An array; the classes of boxes keep the entries of the boxes that were kept. */
static dlc_status out_array(const dlc_loader *l, const dlc__worker *w, const dlc__output *o,
                            const dlc__sample_view *sv, uint8_t *dst, int64_t *length)
{
    const dlc_value *v = &sv->v[o->field];
    const uint8_t *src = dlc__payload(sv, v);
    if (o->var == DLC__VAR_FIXED) {
        assert(v->size <= o->sample_cap); /* The reader holds a fixed array to its shape. */
        if (v->size) /* An empty value may have no data pointer: memcpy wants one. */
            memcpy(dst, src, v->size);
        return DLC_OK;
    }
    if (o->filtered_by < 0) {
        const uint32_t rows = v->dim0 < o->rows_cap ? v->dim0 : o->rows_cap;
        if (rows) /* An empty value may have no data pointer: memcpy wants one. */
            memcpy(dst, src, (size_t)rows * o->row_bytes);
        *length = rows;
        return DLC_OK;
    }
    const dlc_value *b = &sv->v[l->out[o->filtered_by].field];
    if (b->dim0 != v->dim0)
        return dlc__errorf(DLC_EINVAL, "%s: record %llu: field \"%s\" has %u entries for %u boxes",
                           l->path, (unsigned long long)sv->index, l->fields[o->field].name,
                           v->dim0, b->dim0);
    uint32_t rows = 0;
    for (uint32_t i = 0; i < v->dim0 && rows < o->rows_cap; i++)
        if (w->keep[i])
            memcpy(dst + (size_t)rows++ * o->row_bytes, src + (size_t)i * o->row_bytes,
                   o->row_bytes);
    *length = rows;
    return DLC_OK;
}

/* Output @p i of sample @p j. */
static dlc_status build_output(const dlc_loader *l, dlc__worker *w, dlc__slot *s, uint32_t i,
                               uint32_t j, const dlc__sample_view *sv)
{
    const dlc__output *o = &l->out[i];
    dlc__slot_out *so = &s->out[i];
    assert(j < s->count);
    uint8_t *dst = so->data + (size_t)j * o->sample_cap;
    int64_t *len = so->lengths ? &so->lengths[j] : NULL;
    if (o->op == DLC__OUT_PARAMS) { /* No field of the store: what the views drew. */
        dlc__aug_params_write(l, w, o, dst);
        return DLC_OK;
    }
    const dlc_value *v = &sv->v[o->field];
    switch (o->op) {
    case DLC__OUT_IMAGE:
    case DLC__OUT_MASK:
        return out_image(l, w, o, sv, dst);
    case DLC__OUT_BOXES:
        out_boxes(l, w, o, sv, dst, len);
        return DLC_OK;
    case DLC__OUT_ARRAY:
        return out_array(l, w, o, sv, dst, len);
    case DLC__OUT_SCALAR:
        if (o->dtype == DLC_DTYPE_INT64) {
            /* A mixture's label field carries its source's offset, as dlc_batch.labels does. */
            const int64_t x = l->mixl && o->field == l->info->label_field
                                  ? v->i + l->mixl->file_label[v->file]
                                  : v->i;
            memcpy(dst, &x, 8);
        } else
            memcpy(dst, &v->f, 8);
        return DLC_OK;
    case DLC__OUT_BYTES:
        /* The reader holds a bytes value to the schema's max_size, this output's room. */
        assert(v->size <= o->sample_cap);
        memcpy(dst, dlc__payload(sv, v), v->size);
        *len = (int64_t)v->size;
        return DLC_OK;
    default:
        return dlc__errorf(DLC_EINVAL, "loader: output %u of unknown kind", i);
    }
}

dlc_status dlc__build_sample(const dlc_loader *l, dlc__worker *w, dlc__slot *s, uint32_t j,
                             uint64_t pos, const dlc__sample_view *sv)
{
    dlc_status rc = DLC_OK;
    if (l->spatial) {
        const dlc_value *p = &sv->v[l->primary];
        rc = draw_views(l, w, s, pos, sv->index, p->dim1, p->dim0);
    }
    /* Boxes first: they decide which entries of their classes stay. */
    for (uint32_t i = 0; rc == DLC_OK && i < l->nout; i++)
        if (l->out[i].op == DLC__OUT_BOXES)
            rc = build_output(l, w, s, i, j, sv);
    for (uint32_t i = 0; rc == DLC_OK && i < l->nout; i++)
        if (l->out[i].op != DLC__OUT_BOXES)
            rc = build_output(l, w, s, i, j, sv);
    if (rc != DLC_OK)
        return rc;
    assert(j < s->count);
    s->labels[j] = l->info->label_field != DLC_NO_FIELD ? sv->v[l->info->label_field].i : 0;
    if (l->mixl && l->info->label_field != DLC_NO_FIELD)
        s->labels[j] += l->mixl->file_label[sv->v[l->info->label_field].file];
    s->indices[j] = sv->index;
    if (l->erase_dev)
        dlc__aug_erase_boxes(
            l, w, s->arena + l->arena_erase + (size_t)j * l->nviews * sizeof(dlc__hd_erase_box));
    return DLC_OK;
}
