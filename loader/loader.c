/* The public loader API: configuration, open/close, lending batches, state and stats. */
#include "internal.h"
#include "sample_aug.h"
#include "stream_cache.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

/* The defaults, at this library's size: dlc_loader_config_init_sized() gives the caller its part.
 */
static void loader_config_defaults(dlc_loader_config *c)
{
    memset(c, 0, sizeof *c);
    c->batch_size = 256;
    c->sampler = DLC_SAMPLER_SHUFFLE;
    c->world_size = 1;
    c->prefetch = 4;
    c->quasi_group = 64;
    c->augment = DLC_AUGMENT_RANDOM_CROP;
    c->crop_h = 224;
    c->crop_w = 224;
    c->rrc_scale[0] = 0.08f;
    c->rrc_scale[1] = 1.0f;
    c->rrc_ratio[0] = 3.0f / 4.0f;
    c->rrc_ratio[1] = 4.0f / 3.0f;
    c->flip_prob = 0.5f;
    c->dtype = DLC_DTYPE_UINT8;
    /* ImageNet's, and 0.5 for a fourth channel (alpha, depth: no convention to follow). */
    c->mean[0] = 0.485f, c->mean[1] = 0.456f, c->mean[2] = 0.406f, c->mean[3] = 0.5f;
    c->std[0] = 0.229f, c->std[1] = 0.224f, c->std[2] = 0.225f, c->std[3] = 0.5f;
    c->verify = DLC_VERIFY_OFF;
    c->on_corrupt = DLC_CORRUPT_FAIL;
    c->io = DLC_IO_AUTO;
    c->device = -1;
    c->device_layout = DLC_LAYOUT_NONE;
    c->device_staging = 2;
    c->max_lent = 1;
    c->window_shards = 4;
    c->cache_ranks = 1;
    c->downloads = 2;
    c->mix_prob = 1.0f;
    c->switch_prob = 0.5f;
}

void dlc_loader_config_init_sized(dlc_loader_config *c, size_t size)
{
    dlc_loader_config d;
    loader_config_defaults(&d);
    dlc__options_init(c, size, &d, sizeof d);
}

/* Every field that can be wrong, named, before anything is allocated. */
static dlc_status check_config(const dlc_loader_config *c, const char *path)
{
    dlc_status rc = DLC_OK;
    FAIL_IF(c->batch_size == 0 || c->batch_size > (1u << 24), DLC_EINVAL,
            "%s: config.batch_size = %u must be in 1..16777216", path, c->batch_size);
    FAIL_IF(c->world_size == 0, DLC_EINVAL, "%s: config.world_size must be at least 1", path);
    FAIL_IF(c->rank >= c->world_size, DLC_EINVAL, "%s: config.rank = %u is not below world_size %u",
            path, c->rank, c->world_size);
    FAIL_IF(c->prefetch == 0 || c->prefetch > DLC_LOADER_MAX_PREFETCH, DLC_EINVAL,
            "%s: config.prefetch = %u must be in 1..%u", path, c->prefetch,
            DLC_LOADER_MAX_PREFETCH);
    FAIL_IF(c->max_lent == 0 || c->max_lent > DLC__MAX_LENT ||
                (c->max_lent > 1 && c->max_lent >= c->prefetch),
            DLC_EINVAL,
            "%s: config.max_lent = %u must be 1, or in 2..%u and below prefetch (%u), so that "
            "the workers always have a slot to fill",
            path, c->max_lent, DLC__MAX_LENT, c->prefetch);
    FAIL_IF(c->threads > 1024, DLC_EINVAL, "%s: config.threads = %u is more than 1024", path,
            c->threads);
    FAIL_IF(c->sampler > DLC_SAMPLER_SHARD_WINDOWS, DLC_EINVAL,
            "%s: config.sampler = %u is not a dlc_sampler", path, c->sampler);
    FAIL_IF(c->augment > DLC_AUGMENT_RANDOM_RESIZED_CROP, DLC_EINVAL,
            "%s: config.augment = %u is not a dlc_augment", path, c->augment);
    FAIL_IF(c->dtype > DLC_DTYPE_FLOAT16 && c->dtype != DLC_DTYPE_BFLOAT16, DLC_EINVAL,
            "%s: config.dtype = %u is not an image output type (uint8, float32, float16, "
            "bfloat16)",
            path, c->dtype);
    FAIL_IF(c->verify > DLC_VERIFY_ALWAYS, DLC_EINVAL,
            "%s: config.verify = %u is not a dlc_verify_mode", path, c->verify);
    FAIL_IF(c->on_corrupt > DLC_CORRUPT_REPLACE, DLC_EINVAL,
            "%s: config.on_corrupt = %u is not a dlc_corrupt_policy", path, c->on_corrupt);
    FAIL_IF(c->io > DLC_IO_DIRECT, DLC_EINVAL, "%s: config.io = %u is not a dlc_io_mode", path,
            c->io);
    FAIL_IF(!(c->flip_prob >= 0 && c->flip_prob <= 1), DLC_EINVAL,
            "%s: config.flip_prob = %g must be in [0, 1]", path, c->flip_prob);
    if (c->augment == DLC_AUGMENT_RANDOM_RESIZED_CROP) {
        FAIL_IF(
            !(c->rrc_scale[0] > 0 && c->rrc_scale[0] <= c->rrc_scale[1] && c->rrc_scale[1] <= 1e6f),
            DLC_EINVAL, "%s: config.rrc_scale = (%g, %g) must satisfy 0 < lo <= hi <= 1e6", path,
            c->rrc_scale[0], c->rrc_scale[1]);
        FAIL_IF(
            !(c->rrc_ratio[0] > 0 && c->rrc_ratio[0] <= c->rrc_ratio[1] && c->rrc_ratio[1] <= 1e6f),
            DLC_EINVAL, "%s: config.rrc_ratio = (%g, %g) must satisfy 0 < lo <= hi <= 1e6", path,
            c->rrc_ratio[0], c->rrc_ratio[1]);
    }
    FAIL_IF(c->num_fields && !c->fields, DLC_EINVAL, "%s: config.num_fields = %u without fields",
            path, c->num_fields);
    FAIL_IF(c->num_field_options && !c->field_options, DLC_EINVAL,
            "%s: config.num_field_options = %u without field_options", path, c->num_field_options);
    FAIL_IF(c->num_views && !c->views, DLC_EINVAL, "%s: config.num_views = %u without views", path,
            c->num_views);
    FAIL_IF(c->auto_threads > 1, DLC_EINVAL, "%s: config.auto_threads = %u must be 0 or 1", path,
            c->auto_threads);
    FAIL_IF(c->aug_repeats > DLC__MAX_AUG_REPEATS, DLC_EINVAL,
            "%s: config.aug_repeats = %u must be in 0..%u", path, c->aug_repeats,
            DLC__MAX_AUG_REPEATS);
    FAIL_IF(c->trace_batches > (1u << 20), DLC_EINVAL,
            "%s: config.trace_batches = %u: at most 1048576", path, c->trace_batches);
    FAIL_IF(c->crop_h > 65536 || c->crop_w > 65536, DLC_EINVAL,
            "%s: config.crop_h x crop_w = %ux%u: at most 65536 a side", path, c->crop_h, c->crop_w);
    return DLC_OK;
fail:
    return rc;
}

/* Labels of every record, for the weighted sampler's per-class lists. */
static dlc_status read_labels(dlc_loader *l, int64_t **out)
{
    dlc_status rc = DLC_OK;
    dlc_store_reader *r = NULL;
    dlc_value *v = calloc(l->info->num_fields, sizeof *v);
    int64_t *labels = malloc(l->info->count * sizeof *labels);
    FAIL_IF(!labels || !v, -ENOMEM, "%s: out of memory for %llu labels", l->path,
            (unsigned long long)l->info->count);
    FAIL_IF(l->info->label_field == DLC_NO_FIELD, DLC_EINVAL,
            "%s: the weighted sampler needs a label field, and the store has none", l->path);
    CHECK(dlc_store_reader_open(l->store, &r));
    for (uint64_t i = 0; i < l->info->count; i++) {
        CHECK(dlc_store_read_values(r, i, v));
        labels[i] = v[l->info->label_field].i;
    }
    dlc_store_reader_close(r);
    free(v);
    *out = labels;
    return DLC_OK;
fail:
    dlc_store_reader_close(r);
    free(v);
    free(labels);
    return rc;
}

static void stop_threads(dlc_loader *l)
{
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv_io);
    pthread_cond_broadcast(&l->cv_work);
    pthread_cond_broadcast(&l->cv_done);
    pthread_mutex_unlock(&l->mu);
    dlc__dev_join(l);
    if (l->io_started)
        pthread_join(l->io_thread, NULL);
    l->io_started = 0;
    for (uint32_t i = 0; i < l->nworkers; i++) {
        if (l->workers[i].started)
            pthread_join(l->workers[i].thread, NULL);
        l->workers[i].started = 0;
    }
}

dlc_status dlc__shard_firsts(const dlc_store *s, uint32_t n, uint64_t **out)
{
    const uint64_t count = dlc_store_get_info(s)->count;
    uint64_t *f = malloc(((size_t)n + 1) * sizeof *f);
    if (!f)
        return dlc__errorf(-ENOMEM, "%s: out of memory", dlc_store_path(s));
    for (uint32_t k = 0; k < n; k++) {
        uint64_t lo = 0, hi = count;
        while (lo < hi) {
            const uint64_t m = lo + (hi - lo) / 2;
            if (dlc_store_record_file(s, m) < k)
                lo = m + 1;
            else
                hi = m;
        }
        f[k] = lo;
    }
    f[n] = count;
    *out = f;
    return DLC_OK;
}

/* The sampler, with the labels and a copy of the class weights when it is the weighted one. */
static dlc_status sampler_open(dlc_loader *l)
{
    dlc_status rc = DLC_OK;
    const dlc_loader_config *cfg = &l->cfg;
    const dlc_store_info *in = l->info;
    int64_t *labels = NULL;
    uint64_t *firsts = NULL;
    if (cfg->sampler == DLC_SAMPLER_WEIGHTED) {
        FAIL_IF(!cfg->class_weights || cfg->num_class_weights != in->num_labels, DLC_EINVAL,
                "%s: config.class_weights: the weighted sampler needs %u weights, got %u", l->path,
                in->num_labels, cfg->class_weights ? cfg->num_class_weights : 0);
        l->weights = malloc(in->num_labels * sizeof *l->weights);
        FAIL_IF(!l->weights, -ENOMEM, "%s: out of memory", l->path);
        memcpy(l->weights, cfg->class_weights, in->num_labels * sizeof *l->weights);
        l->cfg.class_weights = l->weights;
        CHECK(read_labels(l, &labels));
    }
    /* A set streamed in shard windows plans the shards a rank pins from its positions, one
     * record each; repeats would read fewer records per window than it plans for. */
    FAIL_IF(cfg->sampler == DLC_SAMPLER_SHARD_WINDOWS && cfg->aug_repeats > 1, DLC_EINVAL,
            "%s: config.aug_repeats = %u: repeated augmentation does not apply to shard windows "
            "(a streamed set's order); use it on a local store or set",
            l->path, cfg->aug_repeats);
    if (cfg->sampler == DLC_SAMPLER_SHARD_WINDOWS) {
        const uint32_t n = dlc_store_num_files(l->store);
        CHECK(dlc__shard_firsts(l->store, n, &firsts));
        l->cfg.streams = cfg->streams ? cfg->streams : cfg->world_size;
        CHECK(
            dlc__sampler_init_windows(&l->sampler, firsts, n, cfg->window_shards, l->cfg.streams));
    } else {
        CHECK(dlc__sampler_init(&l->sampler, cfg->sampler, in->count, cfg->num_samples,
                                cfg->quasi_group, labels, in->num_labels, l->weights));
        l->sampler.repeats = cfg->aug_repeats;
    }
fail:
    free(firsts);
    free(labels);
    return rc;
}

/* The verification bitmaps and the ring of slots: everything a batch needs, allocated once. */
static dlc_status slots_alloc(dlc_loader *l)
{
    dlc_status rc = DLC_OK;
    const dlc_loader_config *cfg = &l->cfg;
    const dlc_store_info *in = l->info;
    if (cfg->verify != DLC_VERIFY_OFF) {
        const size_t words = (size_t)(in->count + 63) / 64;
        l->verified_ok = calloc(words, sizeof *l->verified_ok);
        l->verified_bad = calloc(words, sizeof *l->verified_bad);
        FAIL_IF(!l->verified_ok || !l->verified_bad, -ENOMEM, "%s: out of memory", l->path);
    }
    l->nslots = cfg->prefetch;
    l->slots = calloc(l->nslots, sizeof *l->slots);
    FAIL_IF(!l->slots, -ENOMEM, "%s: out of memory", l->path);
    for (uint32_t i = 0; i < l->nslots; i++) {
        dlc__slot *s = &l->slots[i];
        s->io = calloc(cfg->batch_size, sizeof *s->io);
        s->values = calloc((size_t)cfg->batch_size * in->num_fields, sizeof *s->values);
        FAIL_IF(!s->io || !s->values, -ENOMEM, "%s: out of memory for %u batch slots", l->path,
                l->nslots);
        uint8_t *arena = dlc__dev_host_alloc(l);
        if (!arena && l->dev)
            CHECK(DLC_ECUDA); /* The message names the failure. */
        FAIL_IF(!arena, -ENOMEM, "%s: out of memory for %u batch slots of %zu bytes", l->path,
                l->nslots, l->arena_bytes);
        CHECK(dlc__slot_outputs_alloc(l, s, arena));
        atomic_init(&s->claim, 0);
        atomic_init(&s->done, 0);
    }
fail:
    return rc;
}

/* How many workers, and with threads="auto" how many work at first and at most (at open,
 * before the trace counts their tracks). */
static void threads_plan(dlc_loader *l)
{
    uint32_t threads = l->cfg.threads;
    if (!threads && l->cfg.auto_threads) {
        /* threads="auto" shares the cores among the node's ranks, as torch's launchers say. */
        const char *env = getenv("LOCAL_WORLD_SIZE");
        const long local = env ? strtol(env, NULL, 10) : 1;
        threads = dlc__cpu_count() / (uint32_t)(local >= 1 && local <= 4096 ? local : 1);
        threads = threads < 1 ? 1 : threads < 256 ? threads : 256;
    } else if (!threads) {
        threads = dlc__cpu_count();
        threads = threads < 256 ? threads : 256;
    }
    l->nworkers = threads;
    /* threads="auto" starts every worker (each owns its scratch from the start) and lets two
     * of them work; the consumer's thread adds and parks them (report.c). */
    l->auto_max = l->cfg.auto_threads ? threads : 0;
    l->nactive = l->cfg.auto_threads && threads > 2 ? 2 : threads;
}

/* Start the I/O thread and the workers (l->nworkers, threads_plan()), wait until every one has
 * reported in, then unpause.
 * *sync_made once the mutex and condition variables exist (the caller's cleanup stops the
 * threads then). */
static dlc_status threads_start(dlc_loader *l, int *sync_made)
{
    dlc_status rc = DLC_OK;
    FAIL_IF(pthread_mutex_init(&l->mu, NULL), -ENOMEM, "%s: pthread_mutex_init failed", l->path);
    /* cv_done measures dlc_loader_next_wait()'s slices on the clock dlc__now_ns() reads, which
     * a change of the wall clock does not move. */
    pthread_condattr_t mono;
    int cfail = pthread_condattr_init(&mono);
    if (!cfail) {
        cfail = pthread_condattr_setclock(&mono, CLOCK_MONOTONIC) ||
                pthread_cond_init(&l->cv_done, &mono);
        pthread_condattr_destroy(&mono);
    }
    if (!cfail && (pthread_cond_init(&l->cv_io, NULL) || pthread_cond_init(&l->cv_work, NULL)))
        cfail = 1;
    if (cfail) {
        pthread_mutex_destroy(&l->mu);
        FAIL_IF(1, -ENOMEM, "%s: pthread_cond_init failed", l->path);
    }
    *sync_made = 1;
    const uint32_t threads = l->nworkers;
    l->workers = calloc(threads, sizeof *l->workers);
    FAIL_IF(!l->workers, -ENOMEM, "%s: out of memory", l->path);
    CHECK(dlc__report_open(l));
    int prc = pthread_create(&l->io_thread, NULL, dlc__io_main, l);
    FAIL_IF(prc, -prc, "%s: cannot start the I/O thread: %s", l->path, strerror(prc));
    l->io_started = 1;
    uint32_t started = 1;
    for (uint32_t i = 0; i < threads; i++) {
        dlc__worker *w = &l->workers[i];
        w->l = l;
        w->id = i;
        prc = pthread_create(&w->thread, NULL, dlc__worker_main, w);
        FAIL_IF(prc, -prc, "%s: cannot start worker %u: %s", l->path, i, strerror(prc));
        w->started = 1;
        started++;
    }
    pthread_mutex_lock(&l->mu);
    while (l->ready_workers < started)
        pthread_cond_wait(&l->cv_done, &l->mu);
    rc = l->start_rc;
    if (rc == DLC_OK) {
        l->paused = 0;
        pthread_cond_broadcast(&l->cv_io);
    }
    pthread_mutex_unlock(&l->mu);
    FAIL_IF(rc != DLC_OK, rc, "%s", l->start_msg);
fail:
    return rc;
}

dlc_status dlc_loader_open(const char *path, const dlc_loader_config *config, dlc_loader **out)
{
    return dlc__loader_open_with(path, config, NULL, out);
}

dlc_status dlc__loader_open_with(const char *path, const dlc_loader_config *config,
                                 const struct dlc__devops *ops, dlc_loader **out)
{
    if (!path)
        return dlc__errorf(DLC_EINVAL, "loader: path and out must not be NULL");
    return dlc__loader_open_any(path, NULL, 0, NULL, config, ops, out);
}

dlc_status dlc__loader_open_any(const char *path, const dlc_mix_source *sources, uint32_t n,
                                const dlc_mix_options *mix, const dlc_loader_config *config,
                                const struct dlc__devops *ops, dlc_loader **out)
{
    dlc_status rc = DLC_OK;
    dlc_loader *l = NULL;
    int sync_made = 0;
    FAIL_IF(!path || !out, DLC_EINVAL, "loader: path and out must not be NULL");
    *out = NULL;
    dlc_loader_config cfg;
    dlc_loader_config_init(&cfg);
    if (config)
        CHECK(dlc__options_take(&cfg, sizeof cfg, config, "dlc_loader_config",
                                "dlc_loader_config_init"));
    /* config.net is read at open only (its progress callback while the first epoch is planned;
     * a streamed set's cache takes a copy of its own): taken here on any path, so that a bad
     * struct_size is refused where it is given and the caller's struct is never read past its
     * size. Not retained. */
    dlc_warm_options net;
    CHECK(dlc__scache_net_take(&cfg.net, &net, "dlc_loader_config.net"));
    CHECK(check_config(&cfg, path));

    l = calloc(1, sizeof *l);
    FAIL_IF(!l, -ENOMEM, "%s: out of memory", path);
    l->cfg = cfg;
    l->paused = 1; /* Until every thread has started. */
    threads_plan(l);
    /* Before a streamed set's download threads start: they have tracks of their own. */
    CHECK(dlc__trace_open(l));
    /* A mixture's schedule counts each source's draws by position: a position repeating
     * another's record would draw nothing, and the passes would fall out of step. */
    FAIL_IF(sources && cfg.aug_repeats > 1, DLC_EINVAL,
            "%s: config.aug_repeats = %u: repeated augmentation does not apply to a mixture", path,
            cfg.aug_repeats);
    if (sources)
        CHECK(dlc__mixload_open(l, sources, n, mix));
    else if (dlc__stream_is_url(path))
        CHECK(dlc__stream_open(l, path));
    else
        CHECK(dlc_store_open(path, DLC_STORE_RANDOM, &l->store));
    l->info = dlc_store_get_info(l->store);
    l->fields = dlc_store_fields(l->store);
    l->path = dlc_store_path(l->store);
    FAIL_IF(l->info->count == 0, DLC_EINVAL, "%s: the store has no records", l->path);
    CHECK(dlc__dev_select(l, ops));
    CHECK(dlc__batchaug_prepare(l));
    CHECK(dlc__outputs_plan(l));
    CHECK(dlc__batchaug_plan(l));
    dlc__arena_plan(l);
    dlc__batchaug_sized(l);
    /* The options pointed into the caller's memory, which need not outlive this call; the plan
     * holds all that is needed of them. */
    l->cfg.fields = NULL, l->cfg.field_options = NULL, l->cfg.views = NULL;
    l->cfg.num_fields = l->cfg.num_field_options = l->cfg.num_views = 0;
    l->cfg.augment_specs = NULL, l->cfg.num_augment_specs = 0;

    /* A one-source mixture over its whole count is the plain loader (mix.c keeps its spare). */
    if (!l->mixl || l->mixl->plain)
        CHECK(sampler_open(l));
    if (l->mixl)
        CHECK(dlc__mixload_sampler(l));
    CHECK(dlc__dev_open(l));
    CHECK(slots_alloc(l));
    CHECK(dlc__stream_check(l)); /* The slots in flight bound the shards pinned. */
    CHECK(dlc__io_open(l));
    l->resident = dlc__io_resident(l);

    /* Plan the first epoch, then start the threads (paused until all report in). */
    dlc__sampler_set_epoch(&l->sampler, cfg.seed, cfg.epoch);
    dlc__shard_plan(&l->shard, l->sampler.len, 0, cfg.rank, cfg.world_size, cfg.batch_size,
                    cfg.drop_last);
    CHECK(dlc__stream_plan(l, cfg.net)); /* Ctrl-C: the net options' progress callback. */
    l->cfg.net = NULL;
    CHECK(threads_start(l, &sync_made));
    CHECK(dlc__dev_start(l));
    l->alive = DLC__LOADER_ALIVE;
    *out = l;
    return DLC_OK;
fail:
    if (l) {
        /* Keep the failure's message: closing must not overwrite it. */
        dlc__errsave es;
        dlc__err_save(&es);
        if (sync_made)
            stop_threads(l);
        dlc__trace_close(l, 0); /* A loader that never opened leaves no file. */
        dlc_loader_close(l);
        dlc__err_restore(&es, rc);
    }
    return rc;
}

void dlc_loader_close(dlc_loader *l)
{
    if (!l)
        return;
    l->alive = 0;
    /* A shard the I/O thread waits for may be held by a stalled server for a whole timeout:
     * the downloads end first (issue 23, item 6), then the threads are joined. */
    dlc__stream_stop(l);
    if (l->workers || l->io_started) {
        stop_threads(l);
    }
    dlc__trace_close(l, 1);
    if (l->workers) {
        for (uint32_t i = 0; i < l->nworkers; i++) {
            dlc__worker *w = &l->workers[i];
            for (uint32_t f = 0; w->codecs && f < l->info->num_fields; f++)
                dlc_codec_destroy(w->codecs[f]);
            free(w->codecs);
            free(w->tmp);
            free(w->scratch);
            free(w->rvalues);
            free(w->keep);
            free(w->views);
            dlc__aug_worker_free(w);
        }
        free(l->workers);
        pthread_cond_destroy(&l->cv_io);
        pthread_cond_destroy(&l->cv_work);
        pthread_cond_destroy(&l->cv_done);
        pthread_mutex_destroy(&l->mu);
    }
    dlc__report_close(l);
    dlc__io_close(l);
    dlc__dev_close(l); /* Frees the slots' arenas: after the threads, before the slots. */
    if (l->slots) {
        for (uint32_t i = 0; i < l->nslots; i++) {
            dlc__slot_outputs_free(l, &l->slots[i]);
            free(l->slots[i].values);
            free(l->slots[i].io);
            free(l->slots[i].iobuf);
        }
        free(l->slots);
    }
    free((void *)l->verified_ok);
    free((void *)l->verified_bad);
    dlc__sampler_free(&l->sampler);
    free(l->dev_why);
    free(l->weights);
    free(l->out);
    dlc__stream_close(l); /* Closes a streamed store, after its shards are given back. */
    dlc_store_close(l->store);
    dlc__mixload_free(l);
    free(l);
}

/* Has the slot of batch @p b been made READY? */
static int batch_ready(const dlc__slot *s, uint64_t b)
{
    return s->state == DLC__SLOT_READY && s->batch == b;
}

uint64_t dlc__next_deadline(uint64_t t_in, uint64_t wait_ns)
{
    return wait_ns == UINT64_MAX || wait_ns > UINT64_MAX - t_in - 1 ? UINT64_MAX : t_in + wait_ns;
}

int dlc__done_wait(dlc_loader *l, uint64_t deadline)
{
    if (deadline == UINT64_MAX) {
        pthread_cond_wait(&l->cv_done, &l->mu);
        return 1;
    }
    const struct timespec until = {(time_t)(deadline / 1000000000u),
                                   (long)(deadline % 1000000000u)};
    return pthread_cond_timedwait(&l->cv_done, &l->mu, &until) != ETIMEDOUT;
}

/* Wait under mu until batch @p b is READY in @p s, at most until @p deadline. Returns whether
 * it is. */
static int wait_ready(dlc_loader *l, const dlc__slot *s, uint64_t b, uint64_t deadline)
{
    const uint64_t t0 = dlc__now_ns();
    while (!batch_ready(s, b) && dlc__done_wait(l, deadline))
        ;
    atomic_fetch_add_explicit(&l->st_wait_ns, dlc__now_ns() - t0, memory_order_relaxed);
    return batch_ready(s, b);
}

/* dlc_loader_next() (@p wait_ns UINT64_MAX) and dlc_loader_next_wait() (@p name says which). */
static dlc_status next_host(dlc_loader *l, dlc_batch *batch, uint64_t wait_ns, const char *name)
{
    if (!l || !batch)
        return dlc__errorf(DLC_EINVAL, "loader: %s() needs a loader and a batch", name);
    if (l->alive != DLC__LOADER_ALIVE)
        return dlc__errorf(DLC_ESTATE, "loader: %s(): the loader was closed", name);
    if (l->dev)
        return dlc__errorf(DLC_ESTATE,
                           "%s: the batches go to CUDA device %d: take them with "
                           "dlc_loader_next_device()",
                           l->path, dlc_loader_device(l, NULL));
    const uint64_t t_in = dlc__now_ns();
    const uint64_t deadline = dlc__next_deadline(t_in, wait_ns);
    pthread_mutex_lock(&l->mu);
    dlc__assert_lent(l);
    if (l->nlent >= l->cfg.max_lent) {
        /* The oldest lent batch goes back: the caller holds at most max_lent. */
        assert(l->nlent == l->cfg.max_lent);
        assert(l->slots[l->lent[0]].state == DLC__SLOT_LENT);
        l->slots[l->lent[0]].state = DLC__SLOT_FREE;
        memmove(l->lent, l->lent + 1, --l->nlent * sizeof *l->lent);
        pthread_cond_broadcast(&l->cv_io);
    }
    if (l->cons_next >= l->shard.batches) {
        pthread_mutex_unlock(&l->mu);
        memset(batch, 0, sizeof *batch);
        dlc__epoch_end(l);
        dlc__report_consumer(l, t_in, dlc__now_ns(), 0);
        return DLC_END;
    }
    const uint64_t b = l->cons_next;
    const uint32_t si = dlc__slot_of(l, b);
    dlc__slot *s = &l->slots[si];
    if (!batch_ready(s, b) && !wait_ready(l, s, b, deadline)) {
        /* Not yet: the caller comes back for it (the lent batches and the position are as
         * they were; the consumer is still waiting, see dlc__report_pending()). */
        pthread_mutex_unlock(&l->mu);
        memset(batch, 0, sizeof *batch);
        dlc__report_pending(l, t_in);
        return DLC_AGAIN;
    }
    /* The I/O thread took batch b before the workers made it READY: the consumer never runs
     * ahead of it. A READY slot has every sample done. */
    assert(b < l->fill_next);
    assert(s->count >= 1 && s->count <= l->cfg.batch_size);
    assert(atomic_load_explicit(&s->done, memory_order_relaxed) == s->count);
    l->cons_next++;
    if (s->err != DLC_OK) {
        /* The batch is consumed: the stream moves past it, and the caller decides. */
        const dlc_status err = s->err;
        dlc__errorf(err, "%s", s->errmsg);
        s->state = DLC__SLOT_FREE;
        pthread_cond_broadcast(&l->cv_io);
        pthread_mutex_unlock(&l->mu);
        memset(batch, 0, sizeof *batch);
        dlc__report_consumer(l, t_in, dlc__now_ns(), 0);
        return err;
    }
    s->state = DLC__SLOT_LENT;
    assert(l->nlent < l->cfg.max_lent);
    l->lent[l->nlent++] = si;
    dlc__assert_lent(l);
    pthread_mutex_unlock(&l->mu);

    memset(batch, 0, sizeof *batch);
    batch->labels = s->labels;
    batch->indices = s->indices;
    batch->count = s->count;
    batch->shape[0] = s->count;
    dlc__outputs_describe(l, s, batch);
    batch->epoch = s->epoch;
    batch->batch_index = l->batch_base + b;
    atomic_fetch_add_explicit(&l->st_batches, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->st_samples, s->count, memory_order_relaxed);
    dlc__report_consumer(l, t_in, dlc__now_ns(), 1);
    return DLC_OK;
}

dlc_status dlc_loader_next(dlc_loader *l, dlc_batch *batch)
{
    return next_host(l, batch, UINT64_MAX, "dlc_loader_next");
}

dlc_status dlc_loader_next_wait(dlc_loader *l, dlc_batch *batch, uint32_t timeout_ms)
{
    return next_host(l, batch, (uint64_t)timeout_ms * 1000000u, "dlc_loader_next_wait");
}

void dlc__epoch_end(dlc_loader *l)
{
    if (l->end_said)
        return;
    l->end_said = 1;
    const uint64_t now = atomic_load(&l->st_replaced), n = now - l->replaced_mark;
    l->replaced_mark = now;
    /* A streamed shard refused at download is what found them, whatever verify says. */
    const uint32_t refused = dlc__stream_refused(l);
    char how[160];
    if (refused)
        snprintf(how, sizeof how,
                 "the records of %u shard%s that the download check refused, and any record "
                 "that fails its check",
                 refused, refused == 1 ? "" : "s");
    if (n)
        dlc__logf(l->cfg.log, l->cfg.log_user, DLC_LOG_WARN,
                  "%s: epoch %llu: %llu damaged record%s replaced by others (on_corrupt = "
                  "replace; verify = %s)",
                  l->path, (unsigned long long)l->sampler.epoch, (unsigned long long)n,
                  n == 1 ? " was" : "s were",
                  refused                             ? how
                  : l->cfg.verify == DLC_VERIFY_OFF   ? "off: only broken headers are found"
                  : l->cfg.verify == DLC_VERIFY_FIRST ? "first"
                                                      : "always");
}

/* The place of @p batch in l->lent, or l->nlent when it is not one lent; under mu. */
static uint32_t lent_index_locked(const dlc_loader *l, const dlc_batch *batch)
{
    uint32_t k = 0;
    while (k < l->nlent && batch->labels != l->slots[l->lent[k]].labels)
        k++;
    return k;
}

/* Give back the slot lent as l->lent[k], to be refilled; under mu. */
static void give_back_locked(dlc_loader *l, uint32_t k)
{
    assert(k < l->nlent && l->slots[l->lent[k]].state == DLC__SLOT_LENT);
    l->slots[l->lent[k]].state = DLC__SLOT_FREE;
    memmove(l->lent + k, l->lent + k + 1, (--l->nlent - k) * sizeof *l->lent);
    pthread_cond_broadcast(&l->cv_io);
}

dlc_status dlc_loader_release(dlc_loader *l, const dlc_batch *batch)
{
    if (!l || !batch)
        return dlc__errorf(DLC_EINVAL, "loader: dlc_loader_release() needs a loader and a batch");
    pthread_mutex_lock(&l->mu);
    dlc__assert_lent(l);
    const uint32_t k = lent_index_locked(l, batch);
    if (k == l->nlent) {
        pthread_mutex_unlock(&l->mu);
        return dlc__errorf(DLC_EINVAL, "loader: the batch released is not one lent");
    }
    give_back_locked(l, k);
    pthread_mutex_unlock(&l->mu);
    return DLC_OK;
}

dlc_status dlc_loader_put_back(dlc_loader *l, const dlc_batch *batch)
{
    if (!l || !batch)
        return dlc__errorf(DLC_EINVAL, "loader: dlc_loader_put_back() needs a loader and a batch");
    pthread_mutex_lock(&l->mu);
    dlc__assert_lent(l);
    const uint32_t k = lent_index_locked(l, batch);
    /* Only the newest lend, still the one before the consumer's position: the slot holds its
     * batch unchanged (the workers fill only free slots), so READY again makes the next
     * next() lend the same bytes. */
    dlc__slot *s = k < l->nlent ? &l->slots[l->lent[k]] : NULL;
    if (!s || k + 1 != l->nlent || l->cons_next == 0 || s->batch != l->cons_next - 1) {
        pthread_mutex_unlock(&l->mu);
        return dlc__errorf(DLC_EINVAL, "loader: the batch put back is not the last one lent");
    }
    s->state = DLC__SLOT_READY;
    l->nlent--;
    l->cons_next--;
    atomic_fetch_sub_explicit(&l->st_batches, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&l->st_samples, s->count, memory_order_relaxed);
    dlc__assert_lent(l);
    pthread_mutex_unlock(&l->mu);
    return DLC_OK;
}

dlc_status dlc_loader_keep(dlc_loader *l, const dlc_batch *batch, void **memory)
{
    if (memory)
        *memory = NULL;
    if (!l || !batch || !memory)
        return dlc__errorf(DLC_EINVAL, "loader: dlc_loader_keep() needs a loader, a batch and a "
                                       "place for the memory");
    if (l->dev)
        return dlc__errorf(DLC_ESTATE,
                           "%s: the batches go to CUDA device %d: their slots are page-locked "
                           "and lent with dlc_loader_next_device(), not kept",
                           l->path, dlc_loader_device(l, NULL));
    /* Allocated before the lock, as at open: the workers never wait for it. Only a caller that
     * keeps a batch's memory pays for it, once per batch kept. */
    uint8_t *const fresh = dlc__dev_host_alloc(l);
    if (!fresh)
        return dlc__errorf(-ENOMEM, "%s: out of memory for a new batch slot of %zu bytes", l->path,
                           l->arena_bytes);
    pthread_mutex_lock(&l->mu);
    dlc__assert_lent(l);
    const uint32_t k = lent_index_locked(l, batch);
    if (k == l->nlent) {
        pthread_mutex_unlock(&l->mu);
        free(fresh);
        return dlc__errorf(DLC_EINVAL, "loader: the batch kept is not one lent");
    }
    /* A lent slot is touched by no thread of the loader: its outputs may move to new memory. */
    dlc__slot *const s = &l->slots[l->lent[k]];
    *memory = s->arena;
    dlc__slot_outputs_point(l, s, fresh);
    give_back_locked(l, k);
    pthread_mutex_unlock(&l->mu);
    return DLC_OK;
}

void dlc_loader_kept_free(void *memory)
{
    free(memory); /* dlc__dev_host_alloc()'s aligned_alloc() without the device path. */
}

uint64_t dlc_loader_batches_per_epoch(const dlc_loader *l)
{
    if (!l)
        return 0;
    dlc__shard sh;
    dlc__shard_plan(&sh, l->sampler.len, 0, l->cfg.rank, l->cfg.world_size, l->cfg.batch_size,
                    l->cfg.drop_last);
    return sh.batches;
}

const dlc_store *dlc_loader_store(const dlc_loader *l)
{
    return l ? l->store : NULL;
}

uint64_t dlc_loader_store_count(const dlc_loader *l)
{
    return l ? l->info->count : 0;
}

dlc_status dlc_loader_set_epoch(dlc_loader *l, uint64_t epoch)
{
    if (!l)
        return dlc__errorf(DLC_EINVAL, "loader: NULL loader");
    if (l->mixl)
        dlc__mixload_set_epoch(l, epoch);
    dlc__pipeline_reset(l, l->sampler.seed, epoch, 0);
    return DLC_OK;
}

/* ---- State ---- */

/* The state's sampler word: the kind, and for shard windows what the order depends on beside
 * (seed, epoch, store): streams in bits 8..19, window_shards in 20..31. */
static uint32_t state_sampler(const dlc_loader *l)
{
    /* Repeated augmentation: its count in bits 8..31 (a state without it reads as before). */
    if (l->sampler.kind != DLC_SAMPLER_SHARD_WINDOWS)
        return l->sampler.kind | (l->sampler.repeats > 1 ? l->sampler.repeats : 0) << 8;
    return l->sampler.kind | l->cfg.streams << 8 | l->cfg.window_shards << 20;
}

#define STATE_MAGIC 0x31545344434c44ull /* "DLCDST1" + NUL, little-endian: version 1. */
#define STATE_VERSION 1u
#define STATE_MAGIC2 0x3253434cu /* "LCS2", little-endian: version 2. */

/* Layout, version 2 (little-endian): magic u32 | sampler u32 | store content digest u64 | seed u64
 * | epoch u64 | position u64 | store count u64 | epoch length u64 | XXH3-64 of bytes 0..55.
 * Version 1 (still read; it names no store but by its count): magic u64 | version u32 | sampler
 * u32, then the same from the seed on. Seed, epoch, position, count and length keep their
 * offsets, so a plain one-source mixture's state (mix.c) reads either. */
_Static_assert(DLC_LOADER_STATE_SIZE == 64, "the state layout fills 64 bytes");

dlc_status dlc_loader_state_save(const dlc_loader *l, uint8_t buf[DLC_LOADER_STATE_SIZE])
{
    if (!l || !buf)
        return dlc__errorf(DLC_EINVAL,
                           "loader: dlc_loader_state_save() needs a loader and a buffer");
    if (l->mixl)
        return dlc__errorf(DLC_EINVAL, "%s: a mixture's state is dlc_loader_mix_state_save()'s",
                           l->path);
    return dlc__loader_state_save(l, buf);
}

dlc_status dlc__loader_state_save(const dlc_loader *l, uint8_t *buf)
{
    dlc_loader *m = (dlc_loader *)l; /* The mutex is not part of the logical state. */
    pthread_mutex_lock(&m->mu);
    const dlc__shard *sh = &l->shard;
    uint64_t pos;
    if (l->cons_next >= sh->batches) {
        /* Everything of this rank's share was delivered: the epoch is complete, also for the
         * few samples drop_last cut. */
        pos = sh->start + sh->per_rank * sh->world;
        if (pos < l->sampler.len)
            pos = l->sampler.len;
    } else {
        pos = sh->start + l->cons_next * sh->batch * sh->world;
    }
    dlc__st32(buf + 0, STATE_MAGIC2);
    dlc__st32(buf + 4, state_sampler(l));
    dlc__st64(buf + 8, l->info->content_digest);
    dlc__st64(buf + 16, l->sampler.seed);
    dlc__st64(buf + 24, l->sampler.epoch);
    dlc__st64(buf + 32, pos);
    dlc__st64(buf + 40, l->info->count);
    dlc__st64(buf + 48, l->sampler.len);
    pthread_mutex_unlock(&m->mu);
    dlc__st64(buf + 56, XXH3_64bits(buf, 56));
    return DLC_OK;
}

dlc_status dlc_loader_state_restore(dlc_loader *l, const void *buf, size_t size)
{
    if (!l || !buf)
        return dlc__errorf(DLC_EINVAL, "loader: dlc_loader_state_restore() needs a loader and a "
                                       "buffer");
    if (l->mixl)
        return dlc__errorf(DLC_EINVAL,
                           "%s: a mixture's state is restored by dlc_loader_mix_state_restore()",
                           l->path);
    const dlc_status rc = dlc__loader_state_check(l, buf, size);
    if (rc != DLC_OK)
        return rc;
    const uint8_t *p = buf;
    dlc__pipeline_reset(l, dlc__ld64(p + 16), dlc__ld64(p + 24), dlc__ld64(p + 32));
    return DLC_OK;
}

dlc_status dlc__loader_state_check(const dlc_loader *l, const void *buf, size_t size)
{
    if (size != DLC_LOADER_STATE_SIZE)
        return dlc__errorf(DLC_EINVAL, "%s: loader state: %zu bytes, expected %u", l->path, size,
                           DLC_LOADER_STATE_SIZE);
    const uint8_t *p = buf;
    const int v2 = dlc__ld32(p) == STATE_MAGIC2;
    if (!v2 && dlc__ld64(p) != STATE_MAGIC)
        return dlc__errorf(DLC_EINVAL, "%s: loader state: bad magic", l->path);
    if (dlc__ld64(p + 56) != XXH3_64bits(p, 56))
        return dlc__errorf(DLC_EINVAL, "%s: loader state: checksum mismatch", l->path);
    if (!v2 && dlc__ld32(p + 8) != STATE_VERSION)
        return dlc__errorf(DLC_EINVAL, "%s: loader state: version %u, this library reads 1 and 2",
                           l->path, dlc__ld32(p + 8));
    /* A state names the store it came from by its content digest: another store of as many
     * records would otherwise take it and walk an order that means nothing for it. A version 1
     * state (saved before 2.x named it) is matched by its count only, as it always was. */
    if (v2 && dlc__ld64(p + 8) != l->info->content_digest)
        return dlc__errorf(DLC_EINVAL,
                           "%s: loader state: saved from a store of %llu records with "
                           "content_digest %016llx, this one has %llu records with content_digest "
                           "%016llx: a state resumes only the store it was saved from",
                           l->path, (unsigned long long)dlc__ld64(p + 40),
                           (unsigned long long)dlc__ld64(p + 8), (unsigned long long)l->info->count,
                           (unsigned long long)l->info->content_digest);
    const uint32_t saved = dlc__ld32(p + (v2 ? 4 : 12)), mine = state_sampler(l);
    if (saved != mine && (saved & 0xff) == DLC_SAMPLER_SHARD_WINDOWS &&
        (mine & 0xff) == (saved & 0xff))
        return dlc__errorf(DLC_EINVAL,
                           "%s: loader state: saved with streams = %u and window_shards = %u, this "
                           "loader has %u and %u: open it with the saved ones to resume (the "
                           "order depends on them; streams defaults to the world size)",
                           l->path, saved >> 8 & 0xfff, saved >> 20, mine >> 8 & 0xfff, mine >> 20);
    if (saved != mine && (saved & 0xff) == (mine & 0xff))
        return dlc__errorf(DLC_EINVAL,
                           "%s: loader state: saved with aug_repeats = %u, this loader has %u: "
                           "open it with the saved one to resume (the order depends on it)",
                           l->path, saved >> 8 ? saved >> 8 : 1, mine >> 8 ? mine >> 8 : 1);
    if (saved != mine)
        return dlc__errorf(DLC_EINVAL,
                           "%s: loader state: saved with sampler %u, this loader uses %u", l->path,
                           saved & 0xff, mine & 0xff);
    if (dlc__ld64(p + 40) != l->info->count)
        return dlc__errorf(
            DLC_EINVAL, "%s: loader state: saved for a store of %llu records, this one has %llu",
            l->path, (unsigned long long)dlc__ld64(p + 40), (unsigned long long)l->info->count);
    /* Shard windows: the length is the epoch's (its streams' longest), checked by what made it. */
    if (l->sampler.kind != DLC_SAMPLER_SHARD_WINDOWS && dlc__ld64(p + 48) != l->sampler.len)
        return dlc__errorf(
            DLC_EINVAL, "%s: loader state: an epoch of %llu samples, this loader's has %llu",
            l->path, (unsigned long long)dlc__ld64(p + 48), (unsigned long long)l->sampler.len);
    const uint64_t pos = dlc__ld64(p + 32);
    /* Padding can take a position past the epoch's length by less than a world size. */
    if (pos > l->sampler.len + UINT32_MAX)
        return dlc__errorf(DLC_EINVAL, "%s: loader state: position %llu is beyond the epoch",
                           l->path, (unsigned long long)pos);
    /* The epoch is any the caller could give dlc_loader_set_epoch(), but one past 2^63 is no
     * count of epochs run: a negative number written as unsigned. */
    if (dlc__ld64(p + 24) > (uint64_t)INT64_MAX)
        return dlc__errorf(DLC_EINVAL, "%s: loader state: epoch %llu is beyond 2^63", l->path,
                           (unsigned long long)dlc__ld64(p + 24));
    return DLC_OK;
}

dlc_status dlc_loader_get_stream_stats(const dlc_loader *l, dlc_loader_stream_stats *st)
{
    if (!l || !st)
        return dlc__errorf(DLC_EINVAL,
                           "loader: dlc_loader_get_stream_stats() needs a loader and stats");
    dlc_loader_stream_stats all;
    memset(&all, 0, sizeof all);
    dlc__stream_stats(l, &all);
    return dlc__result_give(st, &all, sizeof all, "dlc_loader_stream_stats");
}

void dlc_loader_get_stats(const dlc_loader *l, dlc_loader_stats *st)
{
    if (!st)
        return;
    memset(st, 0, sizeof *st);
    if (!l) {
        st->device = -1;
        return;
    }
    dlc_loader *m = (dlc_loader *)l; /* Atomic loads need a non-const object in C11. */
    st->batches = atomic_load(&m->st_batches);
    st->samples = atomic_load(&m->st_samples);
    st->wait_seconds = (double)atomic_load(&m->st_wait_ns) * 1e-9;
    st->io_wait_seconds = (double)atomic_load(&m->st_io_wait_ns) * 1e-9;
    st->corrupt_replaced = atomic_load(&m->st_replaced);
    st->bytes_read = atomic_load(&m->st_bytes);
    st->io_mode = l->io_mode;
    st->threads = l->nactive;
    dlc__dev_stats(l, st);
}
