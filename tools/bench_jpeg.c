/* The decode-every-epoch path: what a training run pays when it keeps JPEGs. Each sample is the
 * builder's decode + resize (dlc_jpeg_decode_resize), then exactly the loader's augmentation: the
 * same crop boxes, flip and conversion code (loader/augment.h), fed by the same random streams
 * (dlc__key4(DLC__KEY_AUGMENT, seed, epoch, position)), written into a batch buffer. So the
 * loader's speed-up over it is what keeping decoded pixels saves, and nothing else. */
#include "bench.h"

#include "augment.h"

#include <dlcache/image.h>

#include <stdlib.h>
#include <string.h>

typedef struct jpeg_shared {
    bench_sync sync;
    const bench_jpeg_set *set;
    const uint32_t *order; /* a shuffled order of the files, as a training epoch reads them */
    dlc_loader_config cfg; /* crop, augment, flip, seed, first epoch, batch */
    uint32_t store_side;   /* decode_resize target (the store's square size) */
    size_t sample_bytes;   /* bytes of one output sample */
    dlc__convert cv;       /* the loader's conversion tables, made as dlc_loader_open makes them */
    atomic_uint_fast64_t next; /* sample number k: file order[k % n] of epoch first + k / n */
} jpeg_shared;

typedef struct jpeg_arg {
    jpeg_shared *sh;
    dlc_codec *codec; /* this thread's; made at open so that no window times its creation */
    uint8_t *batch;   /* batch x sample_bytes */
    int64_t *labels;  /* batch */
    uint8_t *tmp;     /* crop_h x crop_w x 3: the resized box before flip and conversion */
    void *scratch;    /* dlc_resize() scratch, for the largest box: the whole image */
    size_t scratch_size;
    uint64_t samples;
} jpeg_arg;

struct bench_jpeg {
    bench_jpeg_set set;
    jpeg_shared *sh;
    jpeg_arg *args;
    uint32_t *order;
    int threads;
};

/* Crop, flip and convert @p img into @p dst with the loader's code, in the loader's order of
 * random draws (loader/pipeline.c, augment()): box, then flip. */
static dlc_status augment_sample(const jpeg_shared *sh, jpeg_arg *a, dlc__rng *r,
                                 const dlc_image *img, void *dst)
{
    const dlc_loader_config *c = &sh->cfg;
    const uint32_t oh = c->crop_h, ow = c->crop_w;
    if (c->augment != DLC_AUGMENT_RANDOM_RESIZED_CROP) {
        if (img->width < ow || img->height < oh)
            return dlc__errorf(DLC_EINVAL,
                               "its image of %ux%u (height x width) is smaller than the %ux%u crop",
                               img->height, img->width, oh, ow);
        const dlc__box box = c->augment == DLC_AUGMENT_CENTER_CROP
                                 ? dlc__center_box(img->width, img->height, ow, oh)
                                 : dlc__random_box(img->width, img->height, ow, oh, r);
        const int flip = c->flip_prob > 0 && dlc__rng_uniform(r) < c->flip_prob;
        dlc__crop_convert(img->data, img->stride, box, flip, &sh->cv, dst);
        return DLC_OK;
    }
    const dlc__box box = dlc__rrc_params(img->width, img->height, c->rrc_scale, c->rrc_ratio, r);
    const int flip = c->flip_prob > 0 && dlc__rng_uniform(r) < c->flip_prob;
    /* As in the loader: without flip or conversion the resize writes the sample itself. */
    const int direct = !flip && sh->cv.dtype == DLC_DTYPE_UINT8;
    const dlc_image out = {direct ? dst : a->tmp, ow, oh, 3, (size_t)ow * 3};
    const dlc_status rc =
        dlc_resize(img, box.left, box.top, box.w, box.h, &out, a->scratch, a->scratch_size);
    if (rc != DLC_OK || direct)
        return rc;
    const dlc__box all = {0, 0, oh, ow};
    dlc__crop_convert(a->tmp, (size_t)ow * 3, all, flip, &sh->cv, dst);
    return DLC_OK;
}

/* Sample number @p k into the thread's batch: decode + resize as the builder does, once per
 * epoch, then the loader's augmentation keyed by the sample's epoch and position. */
static dlc_status jpeg_sample(const jpeg_shared *sh, jpeg_arg *a, uint64_t k)
{
    const uint64_t n = sh->set->count, pos = k % n, epoch = sh->cfg.epoch + k / n;
    const bench_jpeg_file *f = &sh->set->files[sh->order[pos]];
    dlc_image img;
    dlc_status rc = dlc_jpeg_decode_resize(a->codec, f->data, f->size, sh->store_side, 1, &img);
    const uint32_t at = (uint32_t)(a->samples % sh->cfg.batch_size);
    if (rc == DLC_OK) {
        dlc__rng r = {dlc__key4(DLC__KEY_AUGMENT, sh->cfg.seed, epoch, pos), 0};
        rc = augment_sample(sh, a, &r, &img, a->batch + (size_t)at * sh->sample_bytes);
    }
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, f->path);
        return rc;
    }
    a->labels[at] = f->label;
    a->samples++;
    return DLC_OK;
}

static void *jpeg_worker(void *p)
{
    jpeg_arg *a = p;
    jpeg_shared *sh = a->sh;
    pthread_barrier_wait(&sh->sync.start);
    while (!atomic_load_explicit(&sh->sync.stop, memory_order_relaxed)) {
        if (jpeg_sample(sh, a, atomic_fetch_add(&sh->next, 1)) != DLC_OK) {
            atomic_store(&sh->sync.failed, 1);
            break;
        }
    }
    return NULL;
}

void bench_jpeg_close(bench_jpeg *jb)
{
    if (!jb)
        return;
    if (jb->args) {
        for (int t = 0; t < jb->threads; t++) {
            dlc_codec_destroy(jb->args[t].codec);
            free(jb->args[t].batch);
            free(jb->args[t].labels);
            free(jb->args[t].tmp);
            free(jb->args[t].scratch);
        }
    }
    free(jb->args);
    free(jb->sh);
    free(jb->order);
    bench_jpeg_set_free(&jb->set);
    free(jb);
}

/* A Fisher-Yates shuffle of the file numbers, from the loader's seed. */
static void shuffle(uint32_t *order, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    dlc__rng r = {dlc__key4(DLC__KEY_SHUFFLE, seed, 0, 0), 0};
    for (size_t i = n - 1; i > 0; i--) {
        const size_t j = (size_t)dlc__rng_below(&r, i + 1);
        const uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* One thread's codec and buffers. Returns 0, or -1 after printing why. */
static int thread_setup(jpeg_arg *a, jpeg_shared *sh)
{
    const dlc_loader_config *c = &sh->cfg;
    a->sh = sh;
    const dlc_status rc = dlc_codec_create(&a->codec);
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, "creating a codec");
        return -1;
    }
    const size_t batch_bytes = (size_t)c->batch_size * sh->sample_bytes;
    a->scratch_size =
        dlc_resize_scratch_bound(sh->store_side, sh->store_side, c->crop_w, c->crop_h, 3);
    a->batch = bench_aligned(batch_bytes);
    a->labels = calloc(c->batch_size, sizeof *a->labels);
    a->tmp = bench_aligned((size_t)c->crop_h * c->crop_w * 3);
    a->scratch = bench_aligned(a->scratch_size);
    if (!a->batch || !a->labels || !a->tmp || !a->scratch) {
        fprintf(stderr, TOOL ": error: out of memory for the JPEG path\n");
        return -1;
    }
    memset(a->batch, 0, batch_bytes);
    return 0;
}

int bench_jpeg_open(const char *dir, int threads, const dlc_loader_config *cfg, uint32_t store_side,
                    size_t sample_bytes, bench_jpeg **out)
{
    *out = NULL;
    bench_jpeg *jb = calloc(1, sizeof *jb);
    if (!jb)
        goto oom;
    jb->threads = threads;
    if (bench_jpeg_set_load(&jb->set, dir, 0) != 0)
        goto fail;
    if (jb->set.count > UINT32_MAX) {
        fprintf(stderr, TOOL ": error: %s: too many files\n", dir);
        goto fail;
    }
    jpeg_shared *sh = jb->sh = calloc(1, sizeof *sh);
    jb->args = calloc((size_t)threads, sizeof *jb->args);
    jb->order = malloc(jb->set.count * sizeof *jb->order);
    if (!sh || !jb->args || !jb->order)
        goto oom;
    shuffle(jb->order, jb->set.count, cfg->seed);
    sh->set = &jb->set;
    sh->order = jb->order;
    sh->cfg = *cfg;
    sh->store_side = store_side;
    sh->sample_bytes = sample_bytes;
    dlc__convert_init(&sh->cv, cfg->dtype, 3, cfg->mean, cfg->std);
    atomic_init(&sh->next, 0);
    atomic_init(&sh->sync.failed, 0);
    for (int t = 0; t < threads; t++)
        if (thread_setup(&jb->args[t], sh) != 0)
            goto fail;
    *out = jb;
    return 0;
oom:
    fprintf(stderr, TOOL ": error: out of memory for the JPEG path\n");
fail:
    bench_jpeg_close(jb);
    return -1;
}

int bench_jpeg_run(bench_jpeg *jb, double seconds, bench_window *res)
{
    for (int t = 0; t < jb->threads; t++)
        jb->args[t].samples = 0;
    res->seconds = bench_run_window(jb->threads, jpeg_worker, jb->args, sizeof *jb->args,
                                    &jb->sh->sync, seconds);
    res->samples = 0;
    for (int t = 0; t < jb->threads; t++)
        res->samples += jb->args[t].samples;
    return atomic_load(&jb->sh->sync.failed) ? -1 : 0;
}

uint64_t bench_jpeg_files(const bench_jpeg *jb)
{
    return jb ? jb->set.count : 0;
}
