/* The work of dlc_build()'s workers on one item: it is read, decoded and resized in the worker's
 * codec, its values are set in its slot's record builder and the record is sealed there
 * (build_internal.h describes the pipeline; build_part.c claims the items and hands the slots to
 * the writers). */
#include "build_internal.h"

#include "common.h"
#include "image_internal.h"
#include "store_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Record a failure that stops the build in the slot; returns DLC__SLOT_FATAL. */
static int set_fatal(dlc__build_slot *sl, dlc_status rc)
{
    sl->status = rc;
    snprintf(sl->why, DLC__BUILD_WHY, "%s", dlc_errmsg());
    return DLC__SLOT_FATAL;
}

/* Read item @p i's source bytes into @p d. Returns DLC__SLOT_READY when they are worth decoding,
 * else DLC__SLOT_SKIP or DLC__SLOT_FATAL with the slot's why set. The slot's digest fields are
 * set either way. */
static int read_item(dlc__build_worker *w, size_t i, dlc__build_slot *sl, dlc__source_data *d)
{
    const dlc__source_set *src = w->p->src;
    const dlc__item *it = &src->items[i];
    if (it->skip != DLC__SKIP_NONE) {
        dlc__source_stat(src, i, d);
        sl->file_size = d->file_size;
        sl->mtime_ns = d->mtime_ns;
        snprintf(sl->why, DLC__BUILD_WHY, "%s", dlc__skip_reason((dlc__skip_code)it->skip));
        return DLC__SLOT_SKIP;
    }
    const dlc_status rc = dlc__source_read(src, i, &w->buf, &w->cap, d, sl->why, DLC__BUILD_WHY);
    sl->file_size = d->file_size;
    sl->mtime_ns = d->mtime_ns;
    if (rc == DLC_EDECODE)
        return DLC__SLOT_SKIP;
    if (rc < 0)
        return set_fatal(sl, rc);
    sl->bytes_in = d->size;
    /* Every JPEG starts with SOI and another marker; this names the common
     * mistakes (a PNG or a text file called .jpg) better than the decoder does. */
    if (d->size < 3 || d->data[0] != 0xFF || d->data[1] != 0xD8 || d->data[2] != 0xFF) {
        snprintf(sl->why, DLC__BUILD_WHY,
                 "not a JPEG (the file does not start with a JPEG marker)");
        return DLC__SLOT_SKIP;
    }
    return DLC__SLOT_READY;
}

/* A decoder's failure: out of memory stops the build, anything else skips the item. */
static int decode_failed(dlc__build_slot *sl, dlc_status rc, const char *what)
{
    if (rc == -ENOMEM)
        return set_fatal(sl, rc);
    const char *m = dlc_errmsg();
    snprintf(sl->why, DLC__BUILD_WHY, "%s: %s", what, *m ? m : dlc_strerror(rc));
    return DLC__SLOT_SKIP;
}

/* The source image's size and channels from its JPEG header, for its mask and for a channel
 * conversion; a header that does not read skips the item as the decoder would. */
static int read_header(dlc__build_worker *w, const dlc__source_data *d, dlc__build_slot *sl,
                       uint32_t *width, uint32_t *height)
{
    const dlc__build_plan *plan = w->p->plan;
    uint32_t comps;
    const dlc_status rc = dlc_jpeg_header(w->codec, d->data, d->size, width, height, &comps);
    if (rc < 0)
        return decode_failed(sl, rc, "cannot decode");
    sl->src_channels = comps == 1 ? 1 : 3;
    sl->converted = plan->keep && sl->src_channels != plan->channels;
    return DLC__SLOT_READY;
}

/* Read item @p i's mask file into the worker's buffer: DLC__SLOT_SKIP with the reason when the
 * item has none. */
static int read_mask(dlc__build_worker *w, size_t i, dlc__build_slot *sl, dlc__source_data *md)
{
    const dlc__source_set *src = w->p->src;
    const char *masks = w->p->plan->masks;
    const char *rel = dlc__item_rel(&src->items[i], dlc__source_path(src, &src->items[i]));
    if (!rel) {
        snprintf(sl->why, DLC__BUILD_WHY,
                 "no mask: an absolute path in a manifest has no relative path to find its mask "
                 "by under %s",
                 masks);
        return DLC__SLOT_SKIP;
    }
    dlc_status rc = dlc__build_mask_path(masks, rel, &w->mpath, &w->mpath_cap);
    if (rc < 0)
        return set_fatal(sl, rc);
    char why[DLC__BUILD_WHY / 2];
    rc = dlc__source_read_path(w->mpath, &w->mbuf, &w->mcap, md, why, sizeof why);
    sl->mask_size = md->file_size;
    sl->mask_mtime_ns = md->mtime_ns;
    if (rc == DLC_EDECODE) {
        snprintf(sl->why, DLC__BUILD_WHY, "no mask: %.200s: %s", w->mpath, why);
        return DLC__SLOT_SKIP;
    }
    if (rc < 0)
        return set_fatal(sl, rc);
    sl->bytes_in += md->size;
    return DLC__SLOT_READY;
}

/* Decode item @p i's mask, check it against its image's source size (@p width x @p height) and
 * resize it with nearest neighbour to the image's geometry, into the worker's mask buffer.
 * Before the image's decode: both use the worker's codec. */
static int make_mask(dlc__build_worker *w, size_t i, dlc__build_slot *sl, uint32_t width,
                     uint32_t height, dlc_image *mask)
{
    const dlc_build_options *o = w->p->opts;
    const dlc__build_plan *plan = w->p->plan;
    dlc__source_data md;
    const int state = read_mask(w, i, sl, &md);
    if (state != DLC__SLOT_READY)
        return state;
    dlc_image m;
    /* Palette masks (VOC style) are class ids by index, not colours. */
    dlc_status rc = dlc_png_decode_ids(w->codec, md.data, md.size, &m);
    if (rc < 0) {
        char what[DLC__BUILD_WHY / 2];
        snprintf(what, sizeof what, "the mask %.200s cannot be decoded", w->mpath);
        return decode_failed(sl, rc, what);
    }
    if (m.width != width || m.height != height) {
        snprintf(sl->why, DLC__BUILD_WHY,
                 "the mask %.200s is %ux%u, its image %ux%u (height x width)", w->mpath, m.height,
                 m.width, height, width);
        return DLC__SLOT_SKIP;
    }
    if (m.channels != plan->mask_channels) {
        snprintf(sl->why, DLC__BUILD_WHY,
                 "the mask %.200s has %u channels; the store's masks have %u (the first mask "
                 "decided)",
                 w->mpath, m.channels, plan->mask_channels);
        return DLC__SLOT_SKIP;
    }
    dlc_resize_geometry g;
    if ((rc = dlc_resize_geometry_get(width, height, o->size, o->center_crop, &g)) < 0)
        return decode_failed(sl, rc, "cannot decode");
    const size_t need = (size_t)g.width * g.height * m.channels;
    if (need > w->mask_cap) {
        uint8_t *p = realloc(w->mask, need);
        if (!p)
            return set_fatal(sl, dlc__errorf(-ENOMEM, "build: out of memory for a mask"));
        w->mask = p;
        w->mask_cap = need;
    }
    *mask = (dlc_image){w->mask, g.width, g.height, m.channels, (size_t)g.width * m.channels};
    if ((rc = dlc_resize_nearest(&m, g.resized_w, g.resized_h, g.x, g.y, mask)) < 0)
        return set_fatal(sl, rc);
    return DLC__SLOT_READY;
}

/* Decode and resize the item's bytes in the worker's codec into the image of the record: straight
 * into its place in the slot's record (dlc__record_image_place()), so that the seal does not copy
 * 196 KiB per 256 px image from the codec's buffer, or into the worker's own buffer when the
 * record has no such place (an encoded image). */
static int decode_image(dlc__build_worker *w, const dlc__source_data *d, dlc__build_slot *sl,
                        dlc_image *img)
{
    const dlc_build_options *o = w->p->opts;
    const dlc__build_plan *plan = w->p->plan;
    dlc__jpeg_resize jr = {0};
    dlc_status rc = dlc__jpeg_resize_plan(w->codec, d->data, d->size, plan->channels, o->size,
                                          o->center_crop, &jr);
    if (rc < 0)
        return decode_failed(sl, rc, "cannot decode");
    const size_t bytes = dlc__jpeg_resize_bytes(&jr);
    uint8_t *dst = dlc__record_image_place(sl->rec, plan->f_image, bytes);
    if (!dst) {
        if (bytes > w->pix_cap) {
            uint8_t *p = realloc(w->pix, bytes);
            if (!p)
                return set_fatal(sl, dlc__errorf(-ENOMEM, "build: out of memory for an image"));
            w->pix = p;
            w->pix_cap = bytes;
        }
        dst = w->pix;
    }
    if ((rc = dlc__jpeg_resize_run(w->codec, d->data, d->size, &jr, dst, img)) < 0)
        return decode_failed(sl, rc, "cannot decode");
    return DLC__SLOT_READY;
}

/* Set the values of item @p i's source columns. */
static dlc_status set_columns(const dlc__build_pipe *p, size_t i, dlc_record_builder *b)
{
    const dlc__source_set *src = p->src;
    dlc_status rc = DLC_OK;
    for (uint32_t c = 0; c < src->ncols && rc == DLC_OK; c++) {
        const dlc__column *col = &src->cols[c];
        const uint32_t f = p->plan->f_col[c];
        if (col->kind == DLC__COL_LABEL) {
            rc = dlc_record_set_int(b, f, src->items[i].label);
        } else if (col->kind == DLC__COL_INTS || col->kind == DLC__COL_FLOATS) {
            size_t n;
            const uint64_t *v = dlc__source_list(src, i, col->index, &n);
            rc = dlc_record_set_array(b, f, v, n * sizeof *v, (uint32_t)n);
        } else if (col->is_float) {
            const uint64_t bits = dlc__source_cell(src, i, col->index);
            double d;
            memcpy(&d, &bits, sizeof d);
            rc = dlc_record_set_float(b, f, d);
        } else {
            rc = dlc_record_set_int(b, f, (int64_t)dlc__source_cell(src, i, col->index));
        }
    }
    return rc;
}

/* Set the record's values in the slot's builder and seal it (encode, hash, lay out). Values the
 * builder refuses are the builder's own mistakes, never the source's: they stop the build. */
static int fill_record(dlc__build_worker *w, size_t i, dlc__build_slot *sl, const dlc_image *img,
                       const dlc_image *mask)
{
    const dlc__build_plan *plan = w->p->plan;
    dlc_record_builder *b = sl->rec;
    dlc_status rc = dlc_record_set_image(b, plan->f_image, img);
    if (rc == DLC_OK && mask)
        rc = dlc_record_set_image(b, plan->f_mask, mask);
    if (rc == DLC_OK)
        rc = set_columns(w->p, i, b);
    if (rc == DLC_OK)
        rc = dlc_record_seal(b);
    if (rc < 0) {
        dlc_record_builder_reset(b);
        return set_fatal(sl, rc);
    }
    return DLC__SLOT_READY;
}

int dlc__build_item(dlc__build_worker *w, size_t i, dlc__build_slot *sl)
{
    const dlc__build_plan *plan = w->p->plan;
    sl->bytes_in = sl->mask_size = 0;
    sl->mask_mtime_ns = 0;
    sl->converted = 0;
    sl->why[0] = '\0';
    dlc_record_builder_reset(sl->rec);
    dlc__source_data d;
    dlc_image img, mask;
    uint32_t width = 0, height = 0;
    int state = read_item(w, i, sl, &d);
    if (state == DLC__SLOT_READY && (plan->keep || plan->masks))
        state = read_header(w, &d, sl, &width, &height);
    if (state == DLC__SLOT_READY && plan->masks)
        state = make_mask(w, i, sl, width, height, &mask);
    if (state == DLC__SLOT_READY)
        state = decode_image(w, &d, sl, &img);
    if (state == DLC__SLOT_READY)
        state = fill_record(w, i, sl, &img, plan->masks ? &mask : NULL);
    return state;
}

void dlc__build_worker_free(dlc__build_worker *w)
{
    dlc_codec_destroy(w->codec);
    free(w->buf);
    free(w->mbuf);
    free(w->mask);
    free(w->pix);
    free(w->mpath);
}
