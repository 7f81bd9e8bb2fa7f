/* A loader over a mixture of stores and sets (include/dlcache/loader.h, "Mixtures"): the sources
 * are opened as one union store (cache/store/store_set_union.c), so that the pipeline reads a
 * mixture as it reads a set; the order is the mixture's (loader/sampler_mix.c); labels move by
 * each source's offset; and the state holds each source's draws so that a resume under other
 * weights, sources or world size continues every pass where it stood. */
#include "internal.h"
#include "store_set.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

void dlc_mix_source_init_sized(dlc_mix_source *s, size_t size)
{
    dlc_mix_source d;
    memset(&d, 0, sizeof d);
    d.weight = 1.0;
    dlc__options_init(s, size, &d, sizeof d);
}

void dlc_mix_options_init_sized(dlc_mix_options *o, size_t size)
{
    dlc_mix_options d;
    memset(&d, 0, sizeof d);
    dlc__options_init(o, size, &d, sizeof d);
}

dlc_status dlc_loader_open_mix(const dlc_mix_source *sources, uint32_t num_sources,
                               const dlc_mix_options *mix, const dlc_loader_config *config,
                               dlc_loader **out)
{
    if (out)
        *out = NULL;
    if (!sources || !out)
        return dlc__errorf(DLC_EINVAL, "loader: dlc_loader_open_mix() needs sources and out");
    return dlc__loader_open_any("mixture", sources, num_sources, mix, config, NULL, out);
}

dlc_status dlc__mixload_open(dlc_loader *l, const dlc_mix_source *sources, uint32_t n,
                             const dlc_mix_options *mix)
{
    dlc_status rc = DLC_OK;
    char *url_path[DLC__MIX_MAX_SOURCES] = {0};
    FAIL_IF(n == 0 || n > DLC__MIX_MAX_SOURCES, DLC_EINVAL,
            "loader: a mixture of %u sources: 1 to %u", n, DLC__MIX_MAX_SOURCES);
    dlc__mixload *m = l->mixl = calloc(1, sizeof *l->mixl);
    FAIL_IF(!m, -ENOMEM, "loader: out of memory");
    m->n = n;
    dlc_mix_options opt;
    dlc_mix_options_init(&opt);
    if (mix)
        CHECK(dlc__options_take(&opt, sizeof opt, mix, "dlc_mix_options", "dlc_mix_options_init"));
    /* Every entry of the caller's array has the size its header gave the first one. */
    uint32_t stride;
    memcpy(&stride, sources, sizeof stride);
    const char *paths[DLC__MIX_MAX_SOURCES];
    dlc_store *lazy[DLC__MIX_MAX_SOURCES] = {0};
    m->nurl = 0;
    char name[768];
    size_t at = (size_t)snprintf(name, sizeof name, "mixture of %u (", n);
    for (uint32_t i = 0; i < n; i++) {
        dlc_mix_source s;
        dlc_mix_source_init(&s);
        CHECK(dlc__options_take(&s, sizeof s, (const char *)sources + (size_t)i * stride,
                                "dlc_mix_source", "dlc_mix_source_init"));
        FAIL_IF(!s.path, DLC_EINVAL, "loader: mixture source %u has no path", i);
        /* A URL is shown redacted wherever it is named. */
        char shown[4096];
        const int url = dlc__stream_is_url(s.path);
        if (url)
            dlc_warm_redact_url(s.path, shown, sizeof shown);
        m->url[i] = (uint8_t)url;
        m->nurl += url;
        /* Before the sources are opened: a bad weight is the caller's, named first. */
        FAIL_IF(!(s.weight >= 0) || !isfinite(s.weight), DLC_EINVAL,
                "loader: mixture source %u (%s): weight %g is not a weight (a finite number, 0 "
                "or more)",
                i, s.path, s.weight);
        FAIL_IF(!(m->paths[i] = strdup(url ? shown : s.path)), -ENOMEM, "loader: out of memory");
        paths[i] = m->paths[i];
        if (url)
            FAIL_IF(!(url_path[i] = strdup(s.path)), -ENOMEM, "loader: out of memory");
        /* Of the path as shown (a URL redacted): a state holds no hash of a secret, and a URL
         * signed anew still names the same source. */
        m->path_hash[i] = XXH3_64bits(m->paths[i], strlen(m->paths[i]));
        m->weight[i] = s.weight;
        m->label_offset[i] = s.label_offset;
        if (at < sizeof name)
            at += (size_t)snprintf(name + at, sizeof name - at, "%s%s", i ? ", " : "", m->paths[i]);
    }
    if (at < sizeof name)
        snprintf(name + at, sizeof name - at, ")");
    else
        memcpy(name + sizeof name - 5, "...)", 5);
    FAIL_IF(!(m->name = strdup(name)), -ENOMEM, "loader: out of memory");
    dlc__union_part parts[DLC__MIX_MAX_SOURCES];
    /* The streamed source's cache, and its set from the index (no shard is fetched but the
     * empty ones, checked at bind). */
    for (uint32_t i = 0; i < n; i++)
        if (m->url[i])
            CHECK(dlc__stream_open_source(l, url_path[i], &lazy[i]));
    CHECK(dlc__store_open_union(m->name, paths, n, m->label_offset, DLC_STORE_RANDOM, lazy, parts,
                                &l->store));
    for (uint32_t u = 0; u < n; u++) {
        if (!m->url[u])
            continue;
        m->url_set[u] = lazy[u];
        CHECK(dlc__stream_bind(l, u, parts[u].first_file, parts[u].first, m->paths[u]));
    }
    const uint32_t files = dlc_store_num_files(l->store);
    m->file_label = calloc(files, sizeof *m->file_label);
    FAIL_IF(!m->file_label, -ENOMEM, "%s: out of memory", m->name);
    for (uint32_t i = 0; i < n; i++) {
        m->first[i] = parts[i].first;
        m->digest[i] = parts[i].digest;
        for (uint32_t k = 0; k < parts[i].num_files; k++)
            m->file_label[parts[i].first_file + k] = m->label_offset[i];
    }
    m->first[n] = dlc_store_get_info(l->store)->count;
    m->samples_per_epoch = opt.samples_per_epoch ? opt.samples_per_epoch : m->first[n];
    /* One source read whole each epoch is today's loader, byte for byte (its weight only has to
     * draw something). */
    m->plain = m->plain_open = n == 1 && m->samples_per_epoch == m->first[1] && m->nurl == 0;
    FAIL_IF(m->plain && !(m->weight[0] > 0), DLC_EINVAL,
            "loader: a mixture whose weights are all 0 draws nothing");
fail:
    for (uint32_t i = 0; i < DLC__MIX_MAX_SOURCES; i++)
        free(url_path[i]);
    return rc;
}

void dlc__mixload_free(dlc_loader *l)
{
    dlc__mixload *m = l->mixl;
    if (!m)
        return;
    for (uint32_t i = 0; i < m->n; i++)
        free(m->paths[i]);
    free(m->file_label);
    free(m->name);
    if (m->alt) {
        dlc__mix_free(m->alt);
        free(m->alt);
    }
    free(m);
    l->mixl = NULL;
}

static void mix_sources(const dlc__mixload *m, dlc__mix_source *src)
{
    for (uint32_t i = 0; i < m->n; i++)
        src[i] = (dlc__mix_source){.count = m->first[i + 1] - m->first[i],
                                   .first = m->first[i],
                                   .tag = m->digest[i],
                                   .weight = m->weight[i]};
}

dlc_status dlc__mixload_sampler(dlc_loader *l)
{
    dlc_status rc = DLC_OK;
    dlc__mixload *m = l->mixl;
    const dlc_loader_config *cfg = &l->cfg;
    dlc__mix_source src[DLC__MIX_MAX_SOURCES];
    mix_sources(m, src);
    if (m->plain) {
        /* The plain sampler is open; the spare serves a state another mixture saved. */
        if (cfg->sampler != DLC_SAMPLER_SHUFFLE && cfg->sampler != DLC_SAMPLER_SEQUENTIAL)
            return DLC_OK;
        m->alt = calloc(1, sizeof *m->alt);
        FAIL_IF(!m->alt, -ENOMEM, "%s: out of memory", l->path);
        CHECK(dlc__mix_init(m->alt, src, m->n, m->samples_per_epoch, cfg->world_size,
                            cfg->drop_last, cfg->sampler == DLC_SAMPLER_SEQUENTIAL,
                            (const char *const *)m->paths));
        m->alt->batch = cfg->batch_size;
        return DLC_OK;
    }
    FAIL_IF(cfg->sampler != DLC_SAMPLER_SHUFFLE && cfg->sampler != DLC_SAMPLER_SEQUENTIAL,
            DLC_EINVAL,
            "%s: config.sampler = %u: a mixture's sources walk shuffled (DLC_SAMPLER_SHUFFLE) or "
            "sequential passes",
            l->path, cfg->sampler);
    memset(&l->sampler, 0, sizeof l->sampler);
    l->sampler.kind = cfg->sampler;
    l->sampler.count = l->info->count;
    l->sampler.len = m->samples_per_epoch;
    l->sampler.mix = calloc(1, sizeof *l->sampler.mix);
    FAIL_IF(!l->sampler.mix, -ENOMEM, "%s: out of memory", l->path);
    CHECK(dlc__mix_init(l->sampler.mix, src, m->n, m->samples_per_epoch, cfg->world_size,
                        cfg->drop_last, cfg->sampler == DLC_SAMPLER_SEQUENTIAL,
                        (const char *const *)m->paths));
    l->sampler.mix->batch = cfg->batch_size;
    for (uint32_t u = 0; u < m->n; u++) /* Shard windows: a pass of exactly its records. */
        if (m->url[u])
            CHECK(dlc__mix_set_windows(l->sampler.mix, u, m->url_set[u]->firsts,
                                       m->url_set[u]->num_shards, cfg->window_shards, m->paths[u]));
fail:
    return rc;
}

void dlc__mixload_set_epoch(dlc_loader *l, uint64_t epoch)
{
    const dlc__mix *x = l->sampler.mix;
    if (!x)
        return; /* The plain loader's order: any epoch replays as a plain loader's would. */
    /* The restored segment's start and what came before it are not this loader's to replay:
     * going there replays the order of a run that was never restored. */
    if (epoch < x->seg_epoch || (epoch == x->seg_epoch && x->seg_pos > 0)) {
        dlc__mixload *m = l->mixl;
        m->pending = 1;
        m->pend_epoch = m->pend_pos = 0;
        memset(m->pend_base, 0, sizeof m->pend_base);
    }
}

void dlc__mixload_apply(dlc_loader *l)
{
    dlc__mixload *m = l->mixl;
    if (!m->pending)
        return;
    if (m->pend_switch > 0) {
        /* A state another mixture saved: from here this loader walks the mixture's schedule. The
         * plain sampler's tables stay unused meanwhile (its length is the same: the count). */
        l->sampler.mix = m->alt;
        m->alt = NULL;
        m->plain = 0;
    } else if (m->pend_switch < 0) {
        /* A plain state again: the plain sampler's order. */
        m->alt = l->sampler.mix;
        l->sampler.mix = NULL;
        m->plain = 1;
    }
    m->pend_switch = 0;
    m->pending = 0;
    if (!l->sampler.mix)
        return;
    dlc__mix_segment(l->sampler.mix, m->pend_epoch, m->pend_pos, m->pend_base);
}

uint32_t dlc_loader_num_sources(const dlc_loader *l)
{
    return l && l->mixl ? l->mixl->n : 0;
}

dlc_status dlc_loader_source_info(const dlc_loader *l, uint32_t source, dlc_mix_source_info *out)
{
    if (!l || !out)
        return dlc__errorf(DLC_EINVAL, "loader: dlc_loader_source_info() needs a loader and out");
    if (!l->mixl)
        return dlc__errorf(DLC_EINVAL, "%s: not a mixture", l->path);
    if (source >= l->mixl->n)
        return dlc__errorf(DLC_EINVAL, "%s: no source %u (it has %u)", l->path, source, l->mixl->n);
    const dlc__mixload *m = l->mixl;
    const dlc__mix *x = l->sampler.mix;
    const uint64_t e = l->sampler.epoch;
    if (!x) {
        /* The plain loader's order: each epoch is one pass. */
        dlc_mix_source_info one = {
            .struct_size = sizeof one,
            .quota = 1,
            .period = 1,
            .first = 0,
            .count = m->first[1],
            .epoch_samples = l->sampler.len,
            .drawn = e * l->sampler.len,
            .content_digest = m->digest[0],
            .label_offset = m->label_offset[0],
        };
        return dlc__result_give(out, &one, sizeof one, "dlc_mix_source_info");
    }
    uint64_t now[DLC__MIX_MAX_SOURCES], next[DLC__MIX_MAX_SOURCES];
    dlc__mix_draws(x, e, e == x->seg_epoch ? x->seg_pos : 0, now);
    dlc__mix_draws(x, e + 1, 0, next);
    dlc_mix_source_info all = {
        .struct_size = sizeof all,
        .quota = x->quota[source],
        .period = x->period,
        .first = m->first[source],
        .count = m->first[source + 1] - m->first[source],
        .epoch_samples = next[source] - now[source],
        .drawn = now[source],
        .content_digest = m->digest[source],
        .label_offset = m->label_offset[source],
        .cache_needed_bytes = dlc__stream_source_need(l, source),
    };
    return dlc__result_give(out, &all, sizeof all, "dlc_mix_source_info");
}

/* ---- State ---- */

#define MIX_MAGIC 0x3158494d434c44ull /* "DLCMIX1" + NUL, little-endian. */
#define MIX_VERSION 1u
#define MIX_HEAD 80u
#define MIX_ENTRY 40u
_Static_assert(DLC_LOADER_MIX_STATE_MAX == MIX_HEAD + MIX_ENTRY * DLC__MIX_MAX_SOURCES + 8,
               "the largest state holds every source");

/* Layout (little-endian): magic u64 | version u32 | sources u32 | seed u64 | epoch u64 |
 * position u64 | segment epoch u64 | segment position u64 | epoch length u64 | world u32 |
 * flags u32 (1: drop_last, 2: sequential, 4: plain) | batch u32 | 0 u32; per source: path hash u64
 * | count u64 | digest u64 | draws before the segment u64 | quota u32 | 0 u32; with flag 4 (one
 * source read by the plain loader's sampler) the plain loader's state (DLC_LOADER_STATE_SIZE
 * bytes, dlc_loader_state_save()'s); XXH3-64 of everything before it. */
#define MIX_PLAIN 4u

/* A plain one-source mixture's state: the mixture's header and entry around the plain loader's. */
static dlc_status plain_save(const dlc_loader *l, uint8_t *p, size_t cap, size_t *size)
{
    const dlc__mixload *m = l->mixl;
    const size_t need = MIX_HEAD + MIX_ENTRY + DLC_LOADER_STATE_SIZE + 8;
    if (cap < need)
        return dlc__errorf(DLC_EINVAL, "%s: mixture state: %zu bytes needed, %zu given", l->path,
                           need, cap);
    memset(p, 0, need);
    uint8_t *in = p + MIX_HEAD + MIX_ENTRY;
    const dlc_status rc = dlc__loader_state_save(l, in);
    if (rc != DLC_OK)
        return rc;
    const dlc_loader_config *cfg = &l->cfg;
    dlc__st64(p + 0, MIX_MAGIC);
    dlc__st32(p + 8, MIX_VERSION);
    dlc__st32(p + 12, 1);
    dlc__st64(p + 16, dlc__ld64(in + 16));
    dlc__st64(p + 24, dlc__ld64(in + 24));
    dlc__st64(p + 32, dlc__ld64(in + 32));
    dlc__st64(p + 56, dlc__ld64(in + 48));
    dlc__st32(p + 64, cfg->world_size);
    dlc__st32(p + 68, MIX_PLAIN | (cfg->drop_last ? 1u : 0u) |
                          (cfg->sampler == DLC_SAMPLER_SEQUENTIAL ? 2u : 0u));
    dlc__st32(p + 72, cfg->batch_size);
    uint8_t *e = p + MIX_HEAD;
    dlc__st64(e + 0, m->path_hash[0]);
    dlc__st64(e + 8, m->first[1]);
    dlc__st64(e + 16, m->digest[0]);
    dlc__st32(e + 32, 1);
    dlc__st64(p + need - 8, XXH3_64bits(p, need - 8));
    *size = need;
    return DLC_OK;
}

dlc_status dlc_loader_mix_state_save(const dlc_loader *l, void *buf, size_t cap, size_t *size)
{
    if (!l || !buf || !size)
        return dlc__errorf(DLC_EINVAL,
                           "loader: dlc_loader_mix_state_save() needs a loader, a buffer and size");
    if (!l->mixl)
        return dlc__errorf(DLC_EINVAL, "%s: not a mixture: use dlc_loader_state_save()", l->path);
    const dlc__mixload *m = l->mixl;
    if (!l->sampler.mix)
        return plain_save(l, buf, cap, size);
    const size_t need = MIX_HEAD + (size_t)MIX_ENTRY * m->n + 8;
    if (cap < need)
        return dlc__errorf(DLC_EINVAL, "%s: mixture state: %zu bytes needed, %zu given", l->path,
                           need, cap);
    uint8_t *p = buf;
    dlc_loader *mu = (dlc_loader *)l; /* The mutex is not part of the logical state. */
    pthread_mutex_lock(&mu->mu);
    const dlc__shard *sh = &l->shard;
    /* Every position before it was drawn (by some rank): a complete rank share ends exactly
     * where the epoch's draws end, which the next segment must not count again. */
    const uint64_t pos = l->cons_next >= sh->batches
                             ? sh->start + sh->per_rank * sh->world
                             : sh->start + l->cons_next * sh->batch * sh->world;
    const dlc__mix *x = l->sampler.mix;
    dlc__st64(p + 0, MIX_MAGIC);
    dlc__st32(p + 8, MIX_VERSION);
    dlc__st32(p + 12, m->n);
    dlc__st64(p + 16, l->sampler.seed);
    dlc__st64(p + 24, l->sampler.epoch);
    dlc__st64(p + 32, pos);
    dlc__st64(p + 40, x->seg_epoch);
    dlc__st64(p + 48, x->seg_pos);
    dlc__st64(p + 56, x->len);
    dlc__st32(p + 64, x->world);
    dlc__st32(p + 68, (x->drop_last ? 1u : 0u) | (x->sequential ? 2u : 0u));
    dlc__st32(p + 72, x->batch);
    dlc__st32(p + 76, 0);
    for (uint32_t i = 0; i < m->n; i++) {
        uint8_t *e = p + MIX_HEAD + (size_t)MIX_ENTRY * i;
        dlc__st64(e + 0, m->path_hash[i]);
        dlc__st64(e + 8, x->src[i].count);
        dlc__st64(e + 16, x->src[i].tag);
        dlc__st64(e + 24, x->base[i]);
        dlc__st32(e + 32, x->quota[i]);
        dlc__st32(e + 36, 0);
    }
    pthread_mutex_unlock(&mu->mu);
    dlc__st64(p + need - 8, XXH3_64bits(p, need - 8));
    *size = need;
    return DLC_OK;
}

dlc_status dlc_loader_mix_state_restore(dlc_loader *l, const void *buf, size_t size)
{
    dlc_status rc = DLC_OK;
    dlc__mix old = {0};
    if (!l || !buf)
        return dlc__errorf(DLC_EINVAL,
                           "loader: dlc_loader_mix_state_restore() needs a loader and a buffer");
    if (!l->mixl)
        return dlc__errorf(DLC_EINVAL, "%s: not a mixture: use dlc_loader_state_restore()",
                           l->path);
    dlc__mixload *m = l->mixl;
    /* A plain one-source loader compares with its spare mixture sampler (NULL: none). */
    const dlc__mix *x = l->sampler.mix ? l->sampler.mix : m->alt;
    const uint8_t *p = buf;
    FAIL_IF(size < MIX_HEAD + 8 || dlc__ld64(p) != MIX_MAGIC, DLC_EINVAL,
            "%s: mixture state: not one (%zu bytes, bad magic or too short)", l->path, size);
    const uint32_t n = dlc__ld32(p + 12);
    const int plain = (dlc__ld32(p + 68) & MIX_PLAIN) != 0;
    FAIL_IF(n == 0 || n > DLC__MIX_MAX_SOURCES || (plain && n != 1) ||
                size != MIX_HEAD + (size_t)MIX_ENTRY * n + (plain ? DLC_LOADER_STATE_SIZE : 0) + 8,
            DLC_EINVAL, "%s: mixture state: %zu bytes for %u sources", l->path, size, n);
    FAIL_IF(dlc__ld64(p + size - 8) != XXH3_64bits(p, size - 8), DLC_EINVAL,
            "%s: mixture state: checksum mismatch", l->path);
    FAIL_IF(dlc__ld32(p + 8) != MIX_VERSION, DLC_EINVAL,
            "%s: mixture state: version %u, this library reads %u", l->path, dlc__ld32(p + 8),
            MIX_VERSION);
    if (plain) {
        /* Its source walked the plain loader's order (keyed by the epoch, not by passes of the
         * mixture's): only a plain one-source loader continues it. */
        const uint8_t *e = p + MIX_HEAD;
        FAIL_IF(!m->plain_open, DLC_EINVAL,
                "%s: mixture state: saved by a mixture of one source, which walks the plain "
                "loader's order: it resumes only into a mixture of that one source read whole "
                "each epoch (no samples_per_epoch)",
                l->path);
        const int same_path = dlc__ld64(e) == m->path_hash[0];
        FAIL_IF(dlc__ld64(e + 8) != m->first[1] || dlc__ld64(e + 16) != m->digest[0], DLC_EINVAL,
                "%s: mixture state: source 0 (%s) %s: %" PRIu64
                " records with content_digest %016" PRIx64 ", saved %" PRIu64 " with %016" PRIx64
                ": its passes cannot be continued",
                l->path, m->paths[0],
                same_path ? "changed since the state was saved" : "is not the saved source",
                m->first[1], m->digest[0], dlc__ld64(e + 8), dlc__ld64(e + 16));
        const uint8_t *in = e + MIX_ENTRY;
        CHECK(dlc__loader_state_check(l, in, DLC_LOADER_STATE_SIZE));
        /* Back to the plain order if a state of another mixture had switched it. */
        m->pending = 1;
        m->pend_switch = m->plain ? 0 : -1;
        dlc__pipeline_reset(l, dlc__ld64(in + 16), dlc__ld64(in + 24), dlc__ld64(in + 32));
        return DLC_OK;
    }
    FAIL_IF(!x, DLC_EINVAL,
            "%s: mixture state: saved by a mixture's schedule, which this loader (one source "
            "with config.sampler = %u) cannot continue: use DLC_SAMPLER_SHUFFLE or "
            "DLC_SAMPLER_SEQUENTIAL",
            l->path, l->cfg.sampler);
    const uint64_t seed = dlc__ld64(p + 16), epoch = dlc__ld64(p + 24), pos = dlc__ld64(p + 32);
    const uint64_t seg_epoch = dlc__ld64(p + 40), seg_pos = dlc__ld64(p + 48);
    const uint64_t len = dlc__ld64(p + 56);
    const uint32_t world = dlc__ld32(p + 64), flags = dlc__ld32(p + 68);
    const uint32_t batch = dlc__ld32(p + 72);
    FAIL_IF(world == 0 || len == 0 || batch == 0, DLC_EINVAL,
            "%s: mixture state: world %u, batch %u, length %" PRIu64, l->path, world, batch, len);
    FAIL_IF(epoch < seg_epoch || (epoch == seg_epoch && pos < seg_pos), DLC_EINVAL,
            "%s: mixture state: position %" PRIu64 " of epoch %" PRIu64
            " is before its schedule began (%" PRIu64 " of %" PRIu64 ")",
            l->path, pos, epoch, seg_pos, seg_epoch);
    dlc__mix_source src[DLC__MIX_MAX_SOURCES];
    uint32_t quota[DLC__MIX_MAX_SOURCES];
    uint64_t base[DLC__MIX_MAX_SOURCES], hash[DLC__MIX_MAX_SOURCES];
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *e = p + MIX_HEAD + (size_t)MIX_ENTRY * i;
        hash[i] = dlc__ld64(e);
        src[i] = (dlc__mix_source){.count = dlc__ld64(e + 8), .tag = dlc__ld64(e + 16)};
        base[i] = dlc__ld64(e + 24);
        quota[i] = dlc__ld32(e + 32);
        FAIL_IF(src[i].count == 0, DLC_EINVAL, "%s: mixture state: source %u has no records",
                l->path, i);
    }
    CHECK(dlc__mix_init_quotas(&old, src, n, quota, len, world, flags & 1u, (flags & 2u) != 0));
    old.batch = batch;
    dlc__mix_segment(&old, seg_epoch, seg_pos, base);
    /* Past the saved epoch's draws is beyond the epoch. */
    FAIL_IF(pos > (epoch == seg_epoch ? seg_pos : 0) + dlc__mix_epoch_span(&old, epoch), DLC_EINVAL,
            "%s: mixture state: position %" PRIu64 " is beyond epoch %" PRIu64, l->path, pos,
            epoch);
    uint64_t draws[DLC__MIX_MAX_SOURCES];
    dlc__mix_draws(&old, epoch, pos, draws);
    /* Each source of this loader finds its saved self by path, then by its records. */
    uint64_t now[DLC__MIX_MAX_SOURCES];
    int used[DLC__MIX_MAX_SOURCES] = {0}, same = n == m->n;
    for (uint32_t i = 0; i < m->n; i++) {
        int j = -1;
        for (uint32_t k = 0; k < n && j < 0; k++)
            if (!used[k] && hash[k] == m->path_hash[i])
                j = (int)k;
        if (j >= 0)
            FAIL_IF(src[j].count != x->src[i].count || src[j].tag != x->src[i].tag, DLC_EINVAL,
                    "%s: mixture state: source %u (%s) changed since the state was saved: %" PRIu64
                    " records with content_digest %016" PRIx64 ", saved %" PRIu64
                    " with %016" PRIx64 ": its passes cannot be continued",
                    l->path, i, m->paths[i], x->src[i].count, x->src[i].tag, src[j].count,
                    src[j].tag);
        for (uint32_t k = 0; k < n && j < 0; k++)
            if (!used[k] && src[k].count == x->src[i].count && src[k].tag == x->src[i].tag)
                j = (int)k;
        if (j >= 0)
            used[j] = 1;
        now[i] = j >= 0 ? draws[j] : 0;
        same = same && j == (int)i && quota[i] == x->quota[i];
    }
    same = same && world == x->world && len == x->len && (flags & 1u) == (x->drop_last ? 1u : 0u) &&
           (!x->drop_last || batch == x->batch) && ((flags & 2u) != 0) == (x->sequential != 0);
    /* The same schedule continues exactly as it would have; another one begins here. A plain
     * one-source loader walks the mixture's schedule from here on. */
    m->pending = 1;
    m->pend_switch = m->plain ? 1 : 0;
    if (same) {
        m->pend_epoch = seg_epoch, m->pend_pos = seg_pos;
        memcpy(m->pend_base, base, n * sizeof *base);
    } else {
        m->pend_epoch = epoch, m->pend_pos = pos;
        memcpy(m->pend_base, now, m->n * sizeof *now);
    }
    dlc__mix_free(&old);
    dlc__pipeline_reset(l, seed, epoch, pos);
    return DLC_OK;
fail:
    dlc__mix_free(&old);
    return rc;
}
