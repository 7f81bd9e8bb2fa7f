/* Private to loader/: the per-sample ops of issue 33 as the loader runs them (sample_aug.c).
 * config.augment_specs become the view groups' dlc__aug_config at open; each view draws its ops
 * (dlc__aug_draw(), augment/aug_internal.h) and its RandomErasing box from its own stream after
 * its crop and flip, so that a loader without them gives the bytes it always gave; the worker
 * applies the ops to the uint8 view before the conversion and erases after it; with
 * config.return_params the drawn values become outputs of the batch. */
#ifndef DLCACHE_LOADER_SAMPLE_AUG_H
#define DLCACHE_LOADER_SAMPLE_AUG_H

#include "internal.h"

/* Which drawn value a DLC__OUT_PARAMS output carries. */
enum {
    DLC__PAR_BOX,       /* int32 [4]: top, left, height, width of the crop. */
    DLC__PAR_FLIP,      /* uint8: mirrored. */
    DLC__PAR_OPS,       /* int32 [DLC_AUGMENT_MAX_OPS, 2]: op id (-1 after the last), flags. */
    DLC__PAR_ARGS,      /* float32 [DLC_AUGMENT_MAX_OPS, 8]: each op's arguments. */
    DLC__PAR_MAGNITUDE, /* float32 [DLC_AUGMENT_MAX_OPS]: the magnitude a policy drew. */
    DLC__PAR_ERASE,     /* int32 [4]: top, left, height, width of the erased box (0s: none). */
    DLC__PAR_COUNT
};

/* Take config.augment_specs into the groups planned from config.views (outputs.c's
 * plan_groups(), before the fields are planned): checked, each group's aug and erase_* set. */
dlc_status dlc__aug_plan_groups(struct dlc_loader *l);

/* After the fields' outputs are planned: check what the groups' ops meet (channels, masks and
 * boxes, the device path, the dtype), size the workers' buffers, and add the PARAMS outputs of
 * config.return_params. DLC_EINVAL names the group and the reason. */
dlc_status dlc__aug_plan_outputs(struct dlc_loader *l);

/* A worker's buffers for the ops (at its start) and their release. */
dlc_status dlc__aug_worker_alloc(const struct dlc_loader *l, dlc__worker *w);
void dlc__aug_worker_free(dlc__worker *w);

/* Draw what view @p v (global view number) of group @p gr draws after its crop and flip, on its
 * @p ow x @p oh output, from @p r (the view's stream, just past the flip), for the sample at
 * global position @p pos of the plan keyed by @p seed and @p epoch. Draws nothing from @p r
 * for what the group does not configure. */
void dlc__aug_draw_view(const dlc__group *gr, uint32_t v, uint32_t ow, uint32_t oh, uint64_t seed,
                        uint64_t epoch, uint64_t pos, dlc__rng *r, dlc__view_aug *va);

/* RandomErasing of image output @p o's view at @p dst (converted: uint8 NHWC, float NCHW), as
 * view aug @p va drew it; nothing when it drew no box. */
void dlc__aug_erase(const dlc__group *gr, const dlc__output *o, const dlc__view_aug *va,
                    uint8_t *dst);

/* The device path's erasing (l->erase_dev): write the @p l->nviews boxes and noise keys the
 * worker drew for its sample as dlc__hd_erase_box entries at @p table. */
void dlc__aug_erase_boxes(const struct dlc_loader *l, const dlc__worker *w, uint8_t *table);

/* Write PARAMS output @p o of one sample at @p dst from the views the worker drew. */
void dlc__aug_params_write(const struct dlc_loader *l, const dlc__worker *w, const dlc__output *o,
                           uint8_t *dst);

#endif /* DLCACHE_LOADER_SAMPLE_AUG_H */
