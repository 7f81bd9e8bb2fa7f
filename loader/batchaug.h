/* Private to loader/: what happens to a whole batch or between epochs (batchaug.c): MixUp and
 * CutMix with soft targets when a batch is complete, and progressive resizing between plans.
 * See include/dlcache/loader.h, "MixUp and CutMix, progressive resizing". */
#ifndef DLCACHE_LOADER_BATCHAUG_H
#define DLCACHE_LOADER_BATCHAUG_H

#include <dlcache/loader.h>

#include <stdint.h>

struct dlc_loader;
struct dlc__slot;

/** The loader's batch options as planned at open. */
typedef struct dlc__batchaug {
    int soft;                /**< The label output carries float32 soft targets. */
    int mixing;              /**< MixUp or CutMix is on. */
    int label_out;           /**< The label's output, or -1. */
    uint32_t classes;        /**< Columns of the soft targets. */
    float on, off;           /**< One-hot values after label smoothing, as torch rounds them. */
    uint32_t max_h, max_w;   /**< The largest output (the slots' room); 0: no resizing. */
    uint32_t cur_h, cur_w;   /**< The output size now. */
    uint32_t pend_h, pend_w; /**< dlc_loader_set_resolution() for the next plan; 0: none. */
    int simd16;              /**< The CPU has AVX2 and F16C: 16-bit mixing in vectors. */
} dlc__batchaug;

/** Before dlc__outputs_plan(): the slots are planned for the largest size. */
dlc_status dlc__batchaug_prepare(struct dlc_loader *l);
/** After dlc__outputs_plan(), before dlc__arena_plan(): check the options and turn the label
 *  output into soft targets. */
dlc_status dlc__batchaug_plan(struct dlc_loader *l);
/** After dlc__arena_plan(): size the outputs for the first epoch's resolution. */
void dlc__batchaug_sized(struct dlc_loader *l);
/** The worker that completed slot @p s (every sample written, variable outputs packed): soft
 *  targets, then MixUp or CutMix of the images (host path). A bad label fails the slot. */
void dlc__batchaug_complete(struct dlc_loader *l, struct dlc__slot *s);
/** A new plan (dlc__pipeline_reset(), threads quiet, under mu): the pending resolution. */
void dlc__batchaug_reset(struct dlc_loader *l);
/** The draw of batch @p batch_index (dlc_loader_mixup_params()) under @p seed. */
void dlc__mixup_draw(const struct dlc_loader *l, uint64_t seed, uint64_t epoch,
                     uint64_t batch_index, uint32_t h, uint32_t w, dlc_mixup_params *out);

#endif /* DLCACHE_LOADER_BATCHAUG_H */
