/* dlc__set_join(), the heart of dlc_set_join() (include/dlcache/set.h): check that the parts in a
 * directory make one whole set and write its index, index.dlcset, last and atomically.
 *
 * The checks go from the cheap to the costly, so that the message names the real fault: first
 * the file names (every part present once, of one N), then each part opened in turn with all of
 * dlc_store_open()'s checks (one at a time, so a set of thousands of parts needs a few file
 * descriptors, not thousands), then what the parts say about each other. A part built from
 * other sources or options is found by its set_id before the schemas and labels are compared,
 * since it usually differs there too and "foreign part" is the useful message. */
#include "common.h"
#include "store_format.h"
#include "store_set.h"

#include <dlcache/set.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The most missing parts a message names one by one. */
#define MAX_NAMED 8u

/* A file whose name says it is a part. */
typedef struct part_file {
    uint32_t part, parts;
    char name[NAME_MAX + 1];
} part_file;

/* What a part says about itself, read while it is open. */
typedef struct part_info {
    dlc__set_part sp;
    uint64_t count, digest, bytes;
} part_info;

/* The join's state. */
typedef struct join {
    const char *dir;
    part_file *files;
    uint32_t nfiles, cap;
    uint32_t temps; /* NAME.tmp-PID files: not parts. */
    uint32_t n;     /* N, once the names agree on it. */
    part_info *info;
    dlc__schema_merge merge;
    char *labels; /* Part 0's label names and their bytes: every part must have the same. */
    size_t labels_len;
    uint32_t num_labels;
    /* The first schema or label disagreement, reported after the set_ids are compared. */
    dlc_status deferred_rc;
    char deferred[1024];
} join;

/* "part-<digits>-of-<digits>.dlc"; numbers too large to be parts become UINT32_MAX. */
static int parse_name(const char *name, uint32_t *part, uint32_t *parts)
{
    if (strncmp(name, "part-", 5) != 0 || name[5] < '0' || name[5] > '9')
        return 0;
    char *end = NULL;
    const unsigned long long a = strtoull(name + 5, &end, 10);
    if (strncmp(end, "-of-", 4) != 0 || end[4] < '0' || end[4] > '9')
        return 0;
    const unsigned long long b = strtoull(end + 4, &end, 10);
    if (strcmp(end, ".dlc") != 0)
        return 0;
    *part = a > UINT32_MAX ? UINT32_MAX : (uint32_t)a;
    *parts = b > UINT32_MAX ? UINT32_MAX : (uint32_t)b;
    return 1;
}

/* Remove an index.dlcset.tmp-PID left by a join that was killed (its process is gone);
 * returns 1 when it did. */
static int remove_stale_index_temp(DIR *d, const char *name)
{
    const size_t n = strlen(DLC__SET_INDEX_NAME ".tmp-");
    if (strncmp(name, DLC__SET_INDEX_NAME ".tmp-", n) != 0)
        return 0;
    char *end = NULL;
    const long pid = strtol(name + n, &end, 10);
    return end && *end == '\0' && pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 &&
           errno == ESRCH && unlinkat(dirfd(d), name, 0) == 0;
}

static dlc_status scan(join *j)
{
    dlc_status rc = DLC_OK;
    DIR *d = opendir(j->dir);
    FAIL_IF(!d, -errno, "%s: cannot read the directory: %s", j->dir, strerror(errno));
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strstr(e->d_name, ".tmp-")) {
            j->temps += !remove_stale_index_temp(d, e->d_name);
            continue;
        }
        uint32_t part, parts;
        if (!parse_name(e->d_name, &part, &parts))
            continue;
        if (j->nfiles == j->cap) {
            const uint32_t cap = j->cap ? 2 * j->cap : 64;
            part_file *f = realloc(j->files, cap * sizeof *f);
            FAIL_IF(!f, -ENOMEM, "%s: out of memory", j->dir);
            j->files = f;
            j->cap = cap;
        }
        part_file *f = &j->files[j->nfiles++];
        f->part = part;
        f->parts = parts;
        snprintf(f->name, sizeof f->name, "%s", e->d_name);
    }
fail:
    if (d)
        closedir(d);
    return rc;
}

static int cmp_files(const void *a, const void *b)
{
    const part_file *x = a, *y = b;
    if (x->parts != y->parts)
        return x->parts < y->parts ? -1 : 1;
    if (x->part != y->part)
        return x->part < y->part ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Every part of one N present once, under the name the writer gives it. */
static dlc_status check_names(join *j)
{
    dlc_status rc = DLC_OK;
    FAIL_IF(j->nfiles == 0, DLC_EINVAL, "%s: no part-*-of-*.dlc files to join%s", j->dir,
            j->temps ? " (only NAME.tmp-PID files: parts still being written)" : "");
    qsort(j->files, j->nfiles, sizeof *j->files, cmp_files);
    const part_file *lo = &j->files[0], *hi = &j->files[j->nfiles - 1];
    FAIL_IF(lo->parts != hi->parts, DLC_EINVAL,
            "%s: parts of different sets: %s is one of %u parts, %s one of %u (remove the parts "
            "of the other build)",
            j->dir, lo->name, lo->parts, hi->name, hi->parts);
    j->n = lo->parts;
    FAIL_IF(j->n == 0 || j->n > DLC__SET_MAX_SHARDS, DLC_EINVAL,
            "%s: %s: a set has 1 to %u parts, not %u", j->dir, lo->name, DLC__SET_MAX_SHARDS, j->n);
    FAIL_IF(hi->part >= j->n, DLC_EINVAL, "%s: %s: part %u of %u cannot exist", j->dir, hi->name,
            hi->part, j->n);
    for (uint32_t k = 1; k < j->nfiles; k++)
        FAIL_IF(j->files[k].part == j->files[k - 1].part, DLC_EINVAL,
                "%s: two files for part %u of %u: %s and %s", j->dir, j->files[k].part, j->n,
                j->files[k - 1].name, j->files[k].name);
    if (j->nfiles < j->n) {
        char list[MAX_NAMED * (DLC__SET_NAME_SIZE + 2) + 64] = "";
        uint32_t named = 0, k = 0;
        for (uint32_t i = 0; i < j->n; i++) {
            if (k < j->nfiles && j->files[k].part == i) {
                k++;
                continue;
            }
            char name[DLC__SET_NAME_SIZE];
            dlc__set_part_name(name, i, j->n);
            if (named++ < MAX_NAMED)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                         named > 1 ? ", " : "", name);
        }
        if (named > MAX_NAMED)
            snprintf(list + strlen(list), sizeof list - strlen(list), " and %u more",
                     named - MAX_NAMED);
        FAIL_IF(1, -ENOENT, "%s: %u of %u parts missing: %s%s", j->dir, named, j->n, list,
                j->temps ? " (NAME.tmp-PID files are present: parts still being written, or left "
                           "by a crash)"
                         : "");
    }
    for (uint32_t k = 0; k < j->n; k++) {
        char name[DLC__SET_NAME_SIZE];
        dlc__set_part_name(name, k, j->n);
        FAIL_IF(strcmp(name, j->files[k].name) != 0, DLC_EINVAL,
                "%s: %s: part %u of %u is named %s", j->dir, j->files[k].name, k, j->n, name);
    }
fail:
    return rc;
}

/* Remember the first disagreement of schemas or labels; reported after the set_ids. */
static void defer(join *j, dlc_status rc)
{
    if (j->deferred_rc == DLC_OK) {
        j->deferred_rc = rc;
        snprintf(j->deferred, sizeof j->deferred, "%s", dlc_errmsg());
    }
}

/* What open part @p k says: its set_part, records, digest and size; its labels and schema
 * against the parts before it. */
static dlc_status read_part(join *j, uint32_t k, const dlc_store *s)
{
    dlc_status rc = DLC_OK;
    const char *name = j->files[k].name;
    const dlc_store_info *in = dlc_store_get_info(s);
    FAIL_IF(in->format_version != DLC_STORE_FORMAT_VERSION, DLC_EINVAL,
            "%s: %s: a version %u store cannot be a part", j->dir, name, in->format_version);
    const void *v = NULL;
    size_t n = 0;
    FAIL_IF(dlc_store_meta(s, DLC__META_SET_PART, &v, &n) != DLC_OK, DLC_EINVAL,
            "%s: %s: not a part of a set (no \"%s\" metadata): a store written on its own", j->dir,
            name, DLC__META_SET_PART);
    part_info *pi = &j->info[k];
    CHECK(dlc__set_part_decode(v, n, dlc_store_path(s), &pi->sp));
    pi->count = in->count;
    pi->digest = in->content_digest;
    pi->bytes = in->file_bytes;
    (void)dlc_store_meta(s, DLC__META_LABELS, &v, &n);
    if (k == 0) {
        j->labels = malloc(n ? n : 1);
        FAIL_IF(!j->labels, -ENOMEM, "%s: out of memory", j->dir);
        memcpy(j->labels, v, n);
        j->labels_len = n;
        j->num_labels = in->num_labels;
    } else if (j->deferred_rc == DLC_OK && (in->num_labels != j->num_labels || n != j->labels_len ||
                                            (n && memcmp(v, j->labels, n) != 0))) {
        defer(j, dlc__errorf(DLC_EINVAL,
                             "%s: %s: its %u labels differ from %s's %u (the parts of one set "
                             "name the same labels)",
                             j->dir, name, in->num_labels, j->files[0].name, j->num_labels));
    }
    if (j->deferred_rc == DLC_OK) {
        const dlc_status mrc = dlc__set_merge_add(&j->merge, s, j->dir, name, DLC_EINVAL);
        if (mrc < 0)
            defer(j, mrc);
    }
fail:
    return rc;
}

/* Open each part in turn with every check of a store, read it, close it. */
static dlc_status read_parts(join *j)
{
    dlc_status rc = DLC_OK;
    char *path = NULL;
    dlc_store *s = NULL;
    j->info = calloc(j->n, sizeof *j->info);
    FAIL_IF(!j->info, -ENOMEM, "%s: out of memory for %u parts", j->dir, j->n);
    for (uint32_t k = 0; k < j->n; k++) {
        FAIL_IF(!(path = dlc__set_path(j->dir, "/", j->files[k].name)), -ENOMEM,
                "%s: out of memory", j->dir);
        rc = dlc__store_open_file(path, DLC_STORE_RANDOM, &s);
        if (rc < 0) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", dlc_errmsg());
            const size_t pl = strlen(path);
            const char *why = strncmp(msg, path, pl) == 0 && msg[pl] == ':' ? msg + pl + 2 : msg;
            FAIL_IF(1, rc, "%s: part %s cannot be used: %s", j->dir, j->files[k].name, why);
        }
        CHECK(read_part(j, k, s));
        dlc_store_close(s);
        s = NULL;
        free(path);
        path = NULL;
    }
fail:
    dlc_store_close(s);
    free(path);
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The set_id most parts share (part 0's on a tie): the others are foreign. */
static dlc_status majority_id(const join *j, uint64_t *id)
{
    uint64_t *ids = malloc(j->n * sizeof *ids);
    if (!ids)
        return dlc__errorf(-ENOMEM, "%s: out of memory", j->dir);
    for (uint32_t k = 0; k < j->n; k++)
        ids[k] = j->info[k].sp.set_id;
    qsort(ids, j->n, sizeof *ids, cmp_u64);
    uint64_t best = j->info[0].sp.set_id;
    uint32_t best_run = 0;
    for (uint32_t k = 0; k < j->n; k++)
        if (ids[k] == best)
            best_run++;
    for (uint32_t a = 0, b; a < j->n; a = b) {
        for (b = a; b < j->n && ids[b] == ids[a]; b++)
            ;
        if (b - a > best_run) {
            best = ids[a];
            best_run = b - a;
        }
    }
    free(ids);
    *id = best;
    return DLC_OK;
}

/* What the parts say about each other: one set_id, their places, their items in order. */
static dlc_status check_parts(const join *j, uint64_t *set_id)
{
    dlc_status rc = DLC_OK;
    CHECK(majority_id(j, set_id));
    uint32_t foreign = 0, first = UINT32_MAX;
    for (uint32_t k = 0; k < j->n; k++)
        if (j->info[k].sp.set_id != *set_id && foreign++ == 0)
            first = k;
    FAIL_IF(foreign, DLC_EINVAL,
            "%s: %s was built from other sources or options than the other parts (set_id "
            "%016" PRIx64 ", theirs %016" PRIx64 "; %u such part%s): rebuild it with the same "
            "sources and options, or remove the parts of the other build",
            j->dir, j->files[first].name, j->info[first].sp.set_id, *set_id, foreign,
            foreign > 1 ? "s" : "");
    for (uint32_t k = 0; k < j->n; k++) {
        const dlc__set_part *sp = &j->info[k].sp;
        FAIL_IF(sp->part != k || sp->parts != j->n, DLC_EINVAL,
                "%s: %s holds part %u of %u (its \"set_part\" record), not part %u of %u: a copy "
                "of another part under this name?",
                j->dir, j->files[k].name, sp->part, sp->parts, k, j->n);
        const dlc__set_part *prev = k ? &j->info[k - 1].sp : NULL;
        FAIL_IF(!dlc__set_items_follow(prev, sp), DLC_EINVAL,
                "%s: %s was built from source items [%" PRIu64 ", %" PRIu64
                "), which do not follow the part before it (ending at %" PRIu64 ")",
                j->dir, j->files[k].name, sp->first_item, sp->end_item, prev ? prev->end_item : 0);
    }
    FAIL_IF(j->deferred_rc < 0, j->deferred_rc, "%s", j->deferred);
fail:
    return rc;
}

/* The index of the checked parts. */
static dlc_status make_index(const join *j, uint64_t set_id, uint8_t **out, size_t *len)
{
    dlc_status rc = DLC_OK;
    dlc__set_index x = {
        .num_shards = j->n,
        .set_id = set_id,
        .num_fields = j->merge.num_fields,
        .num_labels = j->num_labels,
        .labels_bytes = (uint32_t)j->labels_len,
        .labels = j->labels,
    };
    memcpy(x.fields, j->merge.fields, sizeof x.fields);
    x.shards = calloc(j->n, sizeof *x.shards);
    FAIL_IF(!x.shards, -ENOMEM, "%s: out of memory", j->dir);
    for (uint32_t k = 0; k < j->n; k++) {
        dlc__set_shard *sh = &x.shards[k];
        dlc__set_part_name(sh->name, k, j->n); /* = files[k].name, checked. */
        sh->count = j->info[k].count;
        sh->first = x.count;
        sh->content_digest = j->info[k].digest;
        sh->file_bytes = j->info[k].bytes;
        x.count += sh->count;
    }
    /* What open will check, checked before anything is written: a failure here is a part
     * that disagrees in a way the merge did not catch. */
    char prefix[PATH_MAX + 64];
    snprintf(prefix, sizeof prefix, "%s: the set's schema", j->dir);
    CHECK(dlc__schema_check(x.fields, x.num_fields, DLC_EINVAL, prefix));
    CHECK(dlc__schema_check_maxes(x.fields, x.num_fields, x.count, DLC_EINVAL, prefix));
    CHECK(dlc__set_index_encode(&x, out, len));
fail:
    free(x.shards);
    return rc;
}

/* Does @p path hold exactly @p len bytes @p p? */
static int same_bytes(const char *path, const uint8_t *p, size_t len)
{
    uint8_t *old = NULL;
    size_t n = 0;
    const int same =
        dlc__set_index_read(path, &old, &n) == DLC_OK && n == len && memcmp(old, p, len) == 0;
    free(old);
    dlc__clear_error();
    return same;
}

dlc_status dlc__set_join(const char *dir, dlc_set_join_report *report)
{
    dlc_status rc = DLC_OK;
    join j = {.dir = dir};
    uint8_t *index = NULL;
    size_t len = 0;
    char *path = NULL;
    FAIL_IF(!dir, DLC_EINVAL, "dlc_set_join: NULL directory");
    CHECK(scan(&j));
    CHECK(check_names(&j));
    CHECK(read_parts(&j));
    uint64_t set_id = 0;
    CHECK(check_parts(&j, &set_id));
    CHECK(make_index(&j, set_id, &index, &len));
    FAIL_IF(!(path = dlc__set_path(dir, "/", DLC__SET_INDEX_NAME)), -ENOMEM, "%s: out of memory",
            dir);
    const int unchanged = same_bytes(path, index, len);
    if (!unchanged)
        CHECK(dlc__replace_file(path, index, len));
    if (report) {
        *report = (dlc_set_join_report){
            .num_shards = j.n, .set_id = set_id, .temp_files = j.temps, .unchanged = unchanged};
        for (uint32_t k = 0; k < j.n; k++) {
            report->count += j.info[k].count;
            report->file_bytes += j.info[k].bytes;
        }
    }
    dlc__clear_error();
fail:
    free(path);
    free(index);
    free(j.files);
    free(j.info);
    free(j.labels);
    return rc;
}
