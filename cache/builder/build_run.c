/* dlc_build(): scan the sources, decide what a record holds, write the store or the parts of a
 * set (build_part.c: make and seal the records on every core, append them in
 * item order), then report (build_internal.h describes the pipeline).
 *
 * Stages: start() copies the options; scan_sources(), plan_record() and choose_threads() fill
 * the job every part shares; dlc__build_write() runs the parts; fill_report() gathers what they
 * did. A set adds its directory's checks, its identity and the join (set_prepare(),
 * set_finish()). build_end() releases everything on every path.
 *
 * The writer is the public one (include/dlcache/writer.h), opened with the schema and the label
 * names; only what is known at the end of a part (the "build" text, the source digest, the
 * skipped count, its place in its set) goes in through the store part's private hooks
 * dlc__writer_set_meta() and dlc__writer_set_part(). */
#include "build_internal.h"
#include "common.h"
#include "source.h"
#include "store_set.h"

#include <dlcache/set.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_THREADS 256u
#define MAX_SIZE 8192u

/* The fields' options: channels, a masks folder, their encoding. */
static dlc_status check_fields(const dlc_build_options *f)
{
    struct stat st;
    if (f->channels != 1 && f->channels != 3 && f->channels != DLC_BUILD_CHANNELS_KEEP)
        return dlc__errorf(DLC_EINVAL, "build: %u channels; the image keeps 1, 3 or the source's",
                           f->channels);
    if (f->mask_encoding != -1 && f->mask_encoding != DLC_ENCODING_RAW &&
        f->mask_encoding != DLC_ENCODING_PNG)
        return dlc__errorf(DLC_EINVAL, "build: mask encoding %d; masks are raw or PNG, never JPEG",
                           f->mask_encoding);
    if (f->masks && stat(f->masks, &st) != 0)
        return dlc__errorf(-errno, "%s: cannot open the masks folder: %s", f->masks,
                           strerror(errno));
    if (f->masks && !S_ISDIR(st.st_mode))
        return dlc__errorf(DLC_EINVAL, "%s: the masks are a folder tree, not a file", f->masks);
    return DLC_OK;
}

static dlc_status check_options(const char *const *sources, size_t nsources, const char *out,
                                const dlc_build_options *o)
{
    if (!sources || nsources == 0)
        return dlc__errorf(DLC_EINVAL, "build: no source given");
    for (size_t i = 0; i < nsources; i++)
        if (!sources[i] || !*sources[i])
            return dlc__errorf(DLC_EINVAL, "build: source %zu is empty", i + 1);
    if (!out || !*out)
        return dlc__errorf(DLC_EINVAL, "build: no output path given");
    if (!o->parts && (o->one_part || o->part))
        return dlc__errorf(DLC_EINVAL, "build: one_part and part build one part of a set: set "
                                       "parts, the set's N, too");
    if (o->size < 1 || o->size > MAX_SIZE)
        return dlc__errorf(DLC_EINVAL, "build: size %u is outside 1..%u", o->size, MAX_SIZE);
    if (o->encoding != DLC_ENCODING_RAW && o->encoding != DLC_ENCODING_JPEG)
        return dlc__errorf(DLC_EINVAL, "build: unknown encoding %u", o->encoding);
    if (o->encoding == DLC_ENCODING_JPEG && (o->quality < 1 || o->quality > 100))
        return dlc__errorf(DLC_EINVAL, "build: JPEG quality %d is outside 1..100", o->quality);
    return DLC_OK;
}

/* Everything one dlc_build() call owns; build_end() releases it. */
typedef struct build_run {
    dlc__build_job job;
    dlc_build_report *rep;
    int keep_report; /* ENOIMAGES and strict EDECODE come with the report */
    dlc__build_part *parts;
    uint32_t nparts;
    int published;    /* a set build: some part of this run reached its final name */
    int made_dir;     /* a set build made the set's directory */
    dlc_store *store; /* the finished store or set, opened again for the report */
} build_run;

/* Scan the sources into the job's item list. */
static dlc_status scan_sources(build_run *b)
{
    dlc_status rc;
    dlc__build_job *job = &b->job;
    for (size_t i = 0; i < job->nsources; i++)
        CHECK(dlc__source_add(&job->src, job->sources[i]));
    b->rep = calloc(1, sizeof *b->rep);
    FAIL_IF(!b->rep, -ENOMEM, "build: out of memory");
    b->keep_report = 1; /* From here, ENOIMAGES and strict EDECODE come with a report. */
    FAIL_IF(job->src.count == 0, DLC_ENOIMAGES, "%s: no image file in the source%s%s",
            job->sources[0], job->nsources > 1 ? "s" : "",
            job->src.kind == DLC__SOURCE_LIST
                ? " (a tar sample is KEY.jpg with KEY.cls, and the key ends at the first '.' "
                  "of the member's file name)"
                : "");
    b->rep->items = job->src.count;
fail:
    return rc;
}

/* Worker threads: as asked (0: every core), at most MAX_THREADS and one per item. */
static void choose_threads(build_run *b)
{
    const dlc_build_options *o = &b->job.o;
    const uint32_t want = o->threads ? o->threads : dlc__cpu_count();
    uint32_t t = want < MAX_THREADS ? want : MAX_THREADS;
    if (t > b->job.src.count)
        t = (uint32_t)b->job.src.count;
    b->job.threads = t;
    b->rep->threads = t;
}

/* The label names the writers are opened with: class folder names, or "0".."K-1" for lists,
 * packed into one buffer. Each part gets the names of the whole list, so that parts without a
 * record of some class still agree. */
static dlc_status label_names(dlc__build_job *job)
{
    dlc_status rc = DLC_OK;
    /* No label at all (tar shards none of whose samples has a usable .cls) means every item is
     * skipped: one name lets the build run to its "no valid image" with each item's reason,
     * where the schema's "label_names given without num_labels" said neither. */
    uint32_t nl = dlc__source_num_labels(&job->src);
    if (nl == 0)
        nl = 1;
    size_t len = 0;
    if (job->src.kind != DLC__SOURCE_FOLDER)
        for (uint32_t l = 0; l < nl; l++)
            len += (size_t)snprintf(NULL, 0, "%" PRIu32, l) + 1;
    job->names = calloc(nl ? nl : 1, sizeof *job->names);
    job->name_buf = malloc(len ? len : 1);
    FAIL_IF(!job->names || !job->name_buf, -ENOMEM, "build: out of memory for %u label names", nl);
    char tmp[24];
    for (uint32_t l = 0, off = 0; l < nl; l++) {
        const char *name = dlc__source_label_name(&job->src, l, tmp, sizeof tmp);
        if (job->src.kind != DLC__SOURCE_FOLDER) {
            const size_t n = strlen(name) + 1;
            memcpy(job->name_buf + off, name, n);
            name = job->name_buf + off;
            off += (uint32_t)n;
        }
        job->names[l] = name;
    }
    job->num_labels = nl;
fail:
    return rc;
}

/* What a record holds, field by field, as the writer's schema; and the label names. */
static dlc_status plan_record(dlc__build_job *job)
{
    const dlc_status rc =
        dlc__build_plan_make(&job->src, &job->o, &job->plan, job->fields, &job->nfields);
    if (rc < 0 || job->plan.f_label == DLC_NO_FIELD)
        return rc;
    return label_names(job);
}

/* Gather what the parts did into the report, skips in item order. */
static dlc_status gather(build_run *b)
{
    dlc_build_report *rep = b->rep;
    size_t cap = 0;
    for (uint32_t k = 0; k < b->nparts; k++) {
        const dlc__build_part *part = &b->parts[k];
        rep->count += part->count;
        rep->bytes_in += part->bytes_in;
        rep->bytes_out += part->bytes_out;
        rep->converted += part->converted;
        rep->file_bytes += part->file_bytes;
        for (size_t i = 0; i < part->nskips; i++) {
            size_t n = (size_t)rep->skipped;
            const dlc_status rc =
                dlc__skips_add(&rep->skips, &n, &cap, part->skips[i].path, part->skips[i].reason);
            rep->skipped = n;
            if (rc < 0)
                return rc;
        }
    }
    rep->channels = b->job.plan.channels;
    return DLC_OK;
}

/* What every build does once the job knows its sources: the record's plan and the threads. */
static dlc_status prepare(build_run *b)
{
    dlc_status rc;
    CHECK(scan_sources(b));
    CHECK(plan_record(&b->job));
    choose_threads(b);
fail:
    return rc;
}

/* Write the parts, then gather what they did (also after a failure: the report of ENOIMAGES
 * and strict EDECODE lists the skips). */
static dlc_status write_parts(build_run *b, uint32_t nwriters)
{
    const dlc_status rc = dlc__build_write(&b->job, b->parts, b->nparts, nwriters);
    dlc__errsave saved;
    dlc__err_save(&saved);
    const dlc_status grc = gather(b);
    if (rc < 0)
        return dlc__err_restore(&saved, rc);
    return grc;
}

/* Read back what the store (or set) says about itself: the report then shows the digest a
 * reader will compute, and the store is known to open; the progress callback hears the end. */
static dlc_status fill_report(build_run *b, const char *path)
{
    const dlc_status rc = dlc_store_open(path, DLC_STORE_SEQUENTIAL, &b->store);
    if (rc < 0)
        return rc;
    const dlc_store_info *info = dlc_store_get_info(b->store);
    dlc__build_job *job = &b->job;
    dlc_build_report *rep = b->rep;
    rep->content_digest = info->content_digest;
    rep->file_bytes = info->file_bytes;
    rep->seconds = dlc__now_s() - job->t0;
    uint64_t items = 0;
    for (uint32_t k = 0; k < b->nparts; k++)
        items += b->parts[k].end - b->parts[k].first;
    rep->images_per_s = rep->seconds > 0 ? (double)items / rep->seconds : 0;
    if (job->o.progress) {
        const dlc_build_progress prog = {.done = items,
                                         .total = items,
                                         .skipped = rep->skipped,
                                         .bytes_in = rep->bytes_in,
                                         .bytes_out = rep->bytes_out,
                                         .seconds = rep->seconds};
        (void)job->o.progress(job->o.progress_user, &prog);
    }
    return DLC_OK;
}

/* Copy the caller's arguments into @p b. */
static void start(build_run *b, const char *const *sources, size_t nsources, const char *out,
                  const dlc_build_options *opts)
{
    memset(b, 0, sizeof *b);
    dlc__build_job *job = &b->job;
    job->t0 = dlc__now_s();
    job->sources = sources;
    job->nsources = nsources;
    job->out = out;
    job->o = *opts;
    dlc__source_init(&job->src);
    job->src.log = job->o.log;
    job->src.log_user = job->o.log_user;
    job->src.strict = job->o.strict;
}

/* Release everything @p b holds and hand out the report where the contract gives one. */
static dlc_status build_end(build_run *b, dlc_status rc, dlc_build_report **report_out)
{
    if (rc < 0 && b->rep) {
        b->rep->seconds = dlc__now_s() - b->job.t0;
        b->rep->images_per_s = b->rep->seconds > 0 ? (double)b->rep->count / b->rep->seconds : 0;
    }
    /* Keep the message of the failure: cleanup must not replace it. */
    dlc__errsave saved;
    if (rc < 0)
        dlc__err_save(&saved);
    dlc_store_close(b->store);
    dlc__build_parts_free(b->parts, b->nparts);
    free(b->job.names);
    free(b->job.name_buf);
    dlc__source_free(&b->job.src);
    if (rc < 0)
        dlc__err_restore(&saved, rc);
    const int give_report =
        rc == DLC_OK || (b->keep_report && (rc == DLC_ENOIMAGES || rc == DLC_EDECODE));
    if (give_report && report_out)
        *report_out = b->rep;
    else
        dlc_build_report_free(b->rep);
    return rc;
}

/* One store: the file @p out. The caller's build_end() releases what this made. */
static dlc_status build_store(build_run *b, const char *out)
{
    dlc_status rc;
    struct stat st;
    FAIL_IF(!b->job.o.force && lstat(out, &st) == 0, DLC_EEXIST,
            "%s: a store (or another file) is already there; it is replaced only with force", out);
    CHECK(prepare(b));
    b->parts = calloc(1, sizeof *b->parts);
    FAIL_IF(!b->parts, -ENOMEM, "build: out of memory");
    b->nparts = 1;
    b->parts[0].end = b->job.src.count;
    b->parts[0].path = strdup(out);
    FAIL_IF(!b->parts[0].path, -ENOMEM, "build: out of memory");
    CHECK(write_parts(b, 1));
    CHECK(fill_report(b, out));
    rc = DLC_OK;
fail:
    return rc;
}

/* ---- Store sets ----------------------------------------------------------------------------- */

/* The set's options; parts is not 0 here (0 is one store). */
static dlc_status check_set(const dlc_build_options *s)
{
    if (s->parts > DLC__SET_MAX_SHARDS)
        return dlc__errorf(DLC_EINVAL, "build: a set has 1 to %u parts, not %u",
                           DLC__SET_MAX_SHARDS, s->parts);
    if (s->one_part && s->part >= s->parts)
        return dlc__errorf(DLC_EINVAL, "build: part %u of %u: parts are numbered 0..%u", s->part,
                           s->parts, s->parts - 1);
    return DLC_OK;
}

/* @p dir as the set's directory, checked before the sources are scanned: made when missing,
 * refused when it is something else, or when it holds a set (or parts of one, or the part to
 * build) and force is not set. */
static dlc_status set_dir_check(build_run *b)
{
    dlc_status rc = DLC_OK;
    const char *dir = b->job.out;
    const int force = b->job.o.force;
    CHECK(dlc__build_set_dir_check(dir, force, b->job.o.one_part, &b->made_dir, &b->job.dir_dev,
                                   &b->job.dir_ino));
    b->job.dir_known = 1;
    if (!b->job.o.one_part)
        return DLC_OK;
    struct stat st;
    char name[DLC__SET_NAME_SIZE];
    dlc__set_part_name(name, b->job.o.part, b->job.o.parts);
    char *path = dlc__set_path(dir, "/", name);
    FAIL_IF(!path, -ENOMEM, "build: out of memory");
    const int exists = lstat(path, &st) == 0;
    free(path);
    FAIL_IF(!force && exists, DLC_EEXIST,
            "%s: part %u of %u (%s) is already there; it is replaced only with force", dir,
            b->job.o.part, b->job.o.parts, name);
fail:
    return rc;
}

dlc_status dlc__build_dir_same(const dlc__build_job *job)
{
    struct stat st;
    if (!job->dir_known)
        return DLC_OK;
    if (stat(job->out, &st) == 0 && (uint64_t)st.st_dev == job->dir_dev &&
        (uint64_t)st.st_ino == job->dir_ino)
        return DLC_OK;
    return dlc__errorf(DLC_ECHANGED,
                       "%s: the set's directory was replaced during the build (moved aside, or a "
                       "link put in its place): nothing more is written to or removed from "
                       "what is there now",
                       job->out);
}

/* Just before the first part is written: the set in @p dir is retired (it stays readable under
 * its retired names until the new index replaces it) and, building every part here, stray part
 * files are removed, so that the join sees this build's parts alone. */
static dlc_status set_dir_clean(build_run *b)
{
    const char *dir = b->job.out;
    const dlc_build_options *o = &b->job.o;
    const dlc_status same = dlc__build_dir_same(&b->job);
    if (same < 0)
        return same;
    if (dlc__build_has_index(dir)) {
        const dlc_status rc = dlc__build_retire(dir, o->log, o->log_user);
        if (rc < 0)
            return rc;
    }
    if (!b->job.o.one_part)
        (void)dlc__build_tidy(dir, o->log, o->log_user);
    return DLC_OK;
}

/* The parts this call writes, with their items and paths. */
static dlc_status make_parts(build_run *b)
{
    dlc_status rc = DLC_OK;
    const uint32_t n = b->job.o.parts;
    const uint32_t first = b->job.o.one_part ? b->job.o.part : 0;
    b->nparts = b->job.o.one_part ? 1 : n;
    b->parts = calloc(b->nparts, sizeof *b->parts);
    FAIL_IF(!b->parts, -ENOMEM, "build: out of memory");
    for (uint32_t k = 0; k < b->nparts; k++) {
        dlc__build_part *part = &b->parts[k];
        uint64_t lo, hi;
        part->index = first + k;
        dlc__build_split(b->job.src.count, n, part->index, &lo, &hi);
        part->first = (size_t)lo;
        part->end = (size_t)hi;
        char name[DLC__SET_NAME_SIZE];
        dlc__set_part_name(name, part->index, n);
        part->path = dlc__set_path(b->job.out, "/", name);
        FAIL_IF(!part->path, -ENOMEM, "build: out of memory");
    }
fail:
    return rc;
}

/* The report's part entries. */
static dlc_status report_parts(build_run *b)
{
    dlc_build_report *rep = b->rep;
    rep->parts = b->job.o.parts;
    rep->set_id = b->job.set_id;
    rep->built = calloc(b->nparts, sizeof *rep->built);
    if (!rep->built)
        return dlc__errorf(-ENOMEM, "build: out of memory");
    rep->num_built = b->nparts;
    for (uint32_t k = 0; k < b->nparts; k++) {
        const dlc__build_part *part = &b->parts[k];
        rep->built[k] = (dlc_build_part){.part = part->index,
                                         .first_item = part->first,
                                         .end_item = part->end,
                                         .count = part->count,
                                         .skipped = part->skipped,
                                         .file_bytes = part->file_bytes};
    }
    return DLC_OK;
}

/* Building every part: a set of no record at all is refused like a store of none; else join
 * (the index is the commit point) and remove what the new index made garbage. */
static dlc_status set_finish(build_run *b)
{
    dlc_status rc;
    const char *dir = b->job.out;
    FAIL_IF(b->rep->count == 0, DLC_ENOIMAGES, "%s: no valid image among %zu items (%llu skipped)",
            b->job.sources[0], b->job.src.count, (unsigned long long)b->rep->skipped);
    dlc_set_join_report jr;
    CHECK(dlc__build_dir_same(&b->job));
    CHECK(dlc__set_join(dir, &jr));
    if (dlc__build_dir_same(&b->job) == DLC_OK)
        (void)dlc__build_tidy(dir, b->job.o.log, b->job.o.log_user);
    CHECK(fill_report(b, dir));
fail:
    return rc;
}

/* Does the index in the set's directory name this run's parts (the join got past its commit
 * point, even if it then failed)? */
static int joined(const build_run *b)
{
    char *index = dlc__set_path(b->job.out, "/", DLC__SET_INDEX_NAME);
    uint8_t *bytes = NULL;
    size_t len = 0;
    dlc__set_index x;
    memset(&x, 0, sizeof x);
    int named = 0;
    if (index && dlc__set_index_read(index, &bytes, &len) == DLC_OK &&
        dlc__set_index_decode(bytes, len, index, &x) == DLC_OK && x.set_id == b->job.set_id) {
        char name[DLC__SET_NAME_SIZE];
        dlc__set_part_name(name, 0, b->job.o.parts);
        named = strcmp(x.shards[0].name, name) == 0;
    }
    dlc__set_index_free(&x);
    free(bytes);
    free(index);
    dlc__clear_error();
    return named;
}

/* After a failure of a build of every part: remove the parts it published, which no index
 * names (the old set, if any, is under its retired names). */
static void remove_new_parts(const build_run *b)
{
    /* Not through a directory that is not the set's any more: those names are someone else's. */
    if (joined(b) || dlc__build_dir_same(&b->job) != DLC_OK)
        return;
    for (uint32_t k = 0; k < b->nparts; k++)
        if (b->parts[k].path && b->parts[k].file_bytes)
            (void)unlink(b->parts[k].path);
}

/* A set: its parts in the directory @p dir, and with all parts its index. */
static dlc_status build_set(build_run *b, const char *dir)
{
    dlc_status rc;
    CHECK(check_set(&b->job.o));
    CHECK(set_dir_check(b));
    CHECK(prepare(b));
    uint64_t items;
    CHECK(dlc__build_items_digest(&b->job.src, b->job.plan.masks, b->job.threads, &items));
    b->job.parts = b->job.o.parts;
    CHECK(dlc__build_set_id(items, &b->job, &b->job.set_id));
    CHECK(make_parts(b));
    CHECK(set_dir_clean(b));
    const uint32_t nwriters = b->nparts < b->job.threads ? b->nparts : b->job.threads;
    b->published = 1;
    CHECK(write_parts(b, nwriters));
    CHECK(report_parts(b));
    if (b->job.o.one_part)
        CHECK(fill_report(b, b->parts[0].path));
    else
        CHECK(set_finish(b));
    rc = DLC_OK;
fail:
    if (rc < 0) {
        /* Keep the message of the failure: the cleanup reads files and may replace it. */
        dlc__errsave saved;
        dlc__err_save(&saved);
        if (b->published && !b->job.o.one_part)
            remove_new_parts(b);
        if (b->rep && b->parts && !b->rep->built)
            (void)report_parts(b);
        /* A directory this build made and left empty goes with it; not one part's: another
         * machine may have found it made and be about to write there. */
        if (b->made_dir && !b->job.o.one_part)
            (void)rmdir(dir);
        dlc__err_restore(&saved, rc);
    }
    return rc;
}

dlc_status dlc_build(const char *const *sources, size_t nsources, const char *out,
                     const dlc_build_options *opts, dlc_build_report **report_out)
{
    dlc_status rc;
    dlc_build_options o;
    dlc_build_options_init(&o);
    const dlc_status taken =
        opts ? dlc__options_take(&o, sizeof o, opts, "dlc_build_options", "dlc_build_options_init")
             : DLC_OK;
    build_run b;
    start(&b, sources, nsources, out, &o);
    if (report_out)
        *report_out = NULL;
    CHECK(taken);
    CHECK(check_options(sources, nsources, out, &b.job.o));
    CHECK(check_fields(&b.job.o));
    rc = b.job.o.parts ? build_set(&b, out) : build_store(&b, out);
fail:
    return build_end(&b, rc, report_out);
}

/* The public join (set.h) is the store part's, wrapped in the builder's clean-up of a replaced
 * set, which the store part does not know. */
dlc_status dlc_set_join(const char *dir, dlc_set_join_report *report)
{
    if (dir)
        (void)dlc__build_restore(dir, NULL, NULL);
    const dlc_status rc = dlc__set_join(dir, report);
    if (rc == DLC_OK)
        (void)dlc__build_tidy(dir, NULL, NULL);
    return rc;
}
