/* The workers of dlc_build(): each item is read, decoded and resized in the worker's codec, its
 * values are set in its slot's record builder and the record is sealed there, then the slot is
 * handed to the writer (build_internal.h describes the pipeline). */
#include "build_internal.h"

#include "common.h"

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

/* Decode and resize the item's bytes in the worker's codec into the image of the record. */
static int decode_image(dlc__build_worker *w, const dlc__source_data *d, dlc__build_slot *sl,
                        dlc_image *img)
{
    const dlc_build_options *o = w->p->opts;
    const dlc__build_plan *plan = w->p->plan;
    /* Three channels take the plain path, the one torchvision's comparison measures. */
    const dlc_status rc =
        plan->channels == 3
            ? dlc_jpeg_decode_resize(w->codec, d->data, d->size, o->size, o->center_crop, img)
            : dlc_jpeg_decode_resize_as(w->codec, d->data, d->size, plan->channels, o->size,
                                        o->center_crop, img);
    if (rc < 0)
        return decode_failed(sl, rc, "cannot decode");
    return DLC__SLOT_READY;
}

/* Set the record's values in the slot's builder and seal it (encode, hash, lay out). Values the
 * builder refuses are the builder's own mistakes, never the source's: they stop the build. */
static int fill_record(dlc__build_worker *w, size_t i, dlc__build_slot *sl, const dlc_image *img)
{
    const dlc__build_plan *plan = w->p->plan;
    const dlc__item *it = &w->p->src->items[i];
    dlc_record_builder *b = sl->rec;
    dlc_status rc = dlc_record_set_image(b, plan->f_image, img);
    if (rc == DLC_OK && plan->f_label != DLC_NO_FIELD)
        rc = dlc_record_set_int(b, plan->f_label, it->label);
    if (rc == DLC_OK)
        rc = dlc_record_seal(b);
    if (rc < 0) {
        dlc_record_builder_reset(b);
        return set_fatal(sl, rc);
    }
    return DLC__SLOT_READY;
}

/* Hand item @p i's slot to the writer. */
static void publish(dlc__build_pipe *p, dlc__build_slot *sl, int state)
{
    pthread_mutex_lock(&p->mu);
    sl->state = state;
    pthread_cond_signal(&p->ready);
    pthread_mutex_unlock(&p->mu);
}

/* Make item @p i's record in its slot and hand it to the writer. */
static void work_item(dlc__build_worker *w, size_t i)
{
    dlc__build_slot *sl = &w->p->slots[i % w->p->window];
    sl->bytes_in = 0;
    sl->why[0] = '\0';
    dlc_record_builder_reset(sl->rec);
    dlc__source_data d;
    dlc_image img;
    int state = read_item(w, i, sl, &d);
    if (state == DLC__SLOT_READY)
        state = decode_image(w, &d, sl, &img);
    if (state == DLC__SLOT_READY)
        state = fill_record(w, i, sl, &img);
    publish(w->p, sl, state);
}

void *dlc__build_worker_main(void *arg)
{
    dlc__build_worker *w = arg;
    dlc__build_pipe *p = w->p;
    for (;;) {
        const size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n || atomic_load(&p->stop))
            break;
        /* Slot i % window is free once the writer is past item i - window. */
        pthread_mutex_lock(&p->mu);
        while (i >= p->write_next + p->window && !atomic_load(&p->stop))
            pthread_cond_wait(&p->space, &p->mu);
        pthread_mutex_unlock(&p->mu);
        if (atomic_load(&p->stop))
            break;
        work_item(w, i);
    }
    return NULL;
}

void dlc__build_worker_free(dlc__build_worker *w)
{
    dlc_codec_destroy(w->codec);
    free(w->buf);
    free(w->mbuf);
    free(w->mask);
    free(w->mpath);
}
