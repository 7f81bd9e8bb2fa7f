/*
 * cacheinfo: what a store holds, how it was built, whether it is intact.
 *
 *   cacheinfo STORE [--json] [--verify] [--dump I [--field NAME] -o FILE]
 *   cacheinfo STORE|URL --plan [options] [--json]   (info_plan.c)
 *
 * Prints the record count, shape, encoding, labels with their record counts,
 * the size on disk, the schema (each field with its payload bytes), how the
 * store was built (its "build" metadata) and how much of it is in the page
 * cache now. --verify re-hashes every record and names each bad one; --dump
 * writes one field of record I (info_dump.c says in which format).
 *
 * Exit status: 0 ok, 1 verification (or the dumped record's checksum)
 * failed, 2 usage error or the store cannot be opened.
 */
#include <dlcache/store.h>
#include <dlcache/tokens.h>

#include "info.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Labels listed in the text output; --json lists all. */
#define MAX_LABEL_LINES 40

static void usage(FILE *f)
{
    fputs("usage: " TOOL " STORE [--json] [--verify] [--dump I [--field NAME] -o FILE]\n"
          "\n"
          "Show what a dlcache store holds and how it was built.\n"
          "\n"
          "options:\n"
          "  --json             print a JSON report on stdout\n"
          "  --verify           re-hash every record; exit 1 naming each bad one\n"
          "  --dump I           write one field of record I to the -o file: an image or\n"
          "                     mask as PNG (PPM/PGM when FILE ends in .ppm/.pgm, .npy\n"
          "                     when in .npy), an ndarray as .npy, bytes as they are, a\n"
          "                     number as text\n"
          "  --field NAME       the field --dump writes (default: the first image)\n"
          "  -o, --output FILE  where --dump writes\n"
          "  --plan             plan a shard-window or streamed run instead (STORE may be\n"
          "                     a set's URL): cacheinfo --plan --help\n"
          "  -h, --help         this text\n",
          f);
}

/* ---- The "build" metadata, re-emitted through tool_json by the library's JSON reader
 * (common.h), so that --json embeds it as an object. ---- */

typedef struct reemit {
    tool_json *j;
    const char *top_key; /* The key of the top value in the report. */
} reemit;

static int on_build_value(void *user, const dlc__json_item *it)
{
    const reemit *r = user;
    tool_json *j = r->j;
    const char *key = it->depth == 0 ? r->top_key : it->key;
    switch (it->kind) {
    case DLC__JSON_OBJECT:
        tool_json_object_begin(j, key);
        break;
    case DLC__JSON_ARRAY:
        tool_json_array_begin(j, key);
        break;
    case DLC__JSON_OBJECT_END:
        tool_json_object_end(j);
        break;
    case DLC__JSON_ARRAY_END:
        tool_json_array_end(j);
        break;
    case DLC__JSON_STRING:
        tool_json_str(j, key, it->str);
        break;
    case DLC__JSON_INT:
        tool_json_i64(j, key, it->i);
        break;
    case DLC__JSON_DOUBLE:
        tool_json_f64(j, key, it->d);
        break;
    case DLC__JSON_BOOL:
        tool_json_bool(j, key, it->b);
        break;
    case DLC__JSON_NULL:
        tool_json_str(j, key, NULL);
        break;
    }
    return 0;
}

/* The string value of top-level @p key, or NULL. */
static const char *build_str(const char *text, const char *key, char *buf, size_t cap)
{
    const char *vs, *ve;
    if (dlc__json_member(text, text + strlen(text), key, &vs, &ve) != 0 || *vs != '"')
        return NULL;
    return dlc__json_string(vs, ve, buf, cap, NULL) ? buf : NULL;
}

/* ---- Verify ---- */

typedef struct verify_state {
    tool_progress pg;
    uint64_t *bad;
    char **why; /* each bad record's reason (a set's names its shard), or NULL */
    size_t nbad, cap;
    double t0;
} verify_state;

static int on_verify(void *user, const dlc_verify_progress *p)
{
    verify_state *v = user;
    if (p->bad_status != 0) {
        fprintf(stderr, "%s%s: bad record %llu: %s\n", v->pg.drawn ? "\r\033[K" : "", TOOL,
                (unsigned long long)p->bad_index, p->bad_msg ? p->bad_msg : "");
        v->pg.drawn = 0;
        if (v->nbad == v->cap) {
            const size_t cap = v->cap ? v->cap * 2 : 64;
            uint64_t *b = realloc(v->bad, cap * sizeof *b);
            if (b)
                v->bad = b;
            char **w = b ? realloc(v->why, cap * sizeof *w) : NULL;
            if (!w)
                return 1;
            v->why = w;
            v->cap = cap;
        }
        v->why[v->nbad] = p->bad_msg ? strdup(p->bad_msg) : NULL;
        v->bad[v->nbad++] = p->bad_index;
        return 0;
    }
    const double dt = dlc__now_s() - v->t0;
    char eta[32];
    tool_human_eta(p->done, p->total, dt > 0 ? (double)p->done / dt : 0, eta, sizeof eta);
    tool_progress_line(&v->pg, 0, "verify: %llu/%llu records  %.0f MB/s  ETA %s  %llu bad",
                       (unsigned long long)p->done, (unsigned long long)p->total,
                       dt > 0 ? (double)p->bytes_done / dt / 1e6 : 0.0, eta,
                       (unsigned long long)p->bad);
    return 0;
}

/* ---- Main ---- */

/* What the command line asks for. */
typedef struct info_args {
    const char *path;
    int json, verify, dump;
    uint64_t dump_index;
    const char *dump_path;  /* -o */
    const char *dump_field; /* --field */
} info_args;

/* Parse the command line into @p a. Returns -1 to go on, or the exit status (0 after
 * --help). */
static int parse_args(int argc, char **argv, info_args *a)
{
    enum { O_JSON = 256, O_VERIFY, O_DUMP, O_FIELD };
    static const struct option longopts[] = {
        {"json", no_argument, NULL, O_JSON},
        {"verify", no_argument, NULL, O_VERIFY},
        {"dump", required_argument, NULL, O_DUMP},
        {"field", required_argument, NULL, O_FIELD},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case O_JSON:
            a->json = 1;
            break;
        case O_VERIFY:
            a->verify = 1;
            break;
        case O_DUMP:
            if (tool_parse_u64(optarg, UINT64_MAX, &a->dump_index) != 0)
                return tool_usage_error(TOOL, NULL, "--dump wants a record number, not '%s'",
                                        optarg);
            a->dump = 1;
            break;
        case O_FIELD:
            a->dump_field = optarg;
            break;
        case 'o':
            a->dump_path = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return tool_usage_error(TOOL, usage, "unknown option or missing value: %s",
                                    argv[optind - 1]);
        }
    }
    if (optind + 1 != argc || (a->dump && !a->dump_path) || (a->dump_path && !a->dump))
        return tool_usage_error(TOOL, usage, "%s",
                                optind + 1 != argc ? "exactly one STORE is needed"
                                                   : "--dump I and -o FILE go together");
    if (a->dump_field && !a->dump)
        return tool_usage_error(TOOL, usage, "--field goes with --dump I");
    a->path = argv[optind];
    return -1;
}

/* --dump: check the record number, then write the record. Returns the exit status. */
static int run_dump(const dlc_store *s, const info_args *a)
{
    const dlc_store_info *info = dlc_store_get_info(s);
    if (a->dump_index >= info->count) {
        tool_error(TOOL, "%s has records 0..%llu, not %llu", a->path,
                   (unsigned long long)info->count - 1, (unsigned long long)a->dump_index);
        return 2;
    }
    return info_dump(s, a->path, a->dump_index, a->dump_field, a->dump_path);
}

/* Everything the report shows, gathered once for the JSON and the text printers. */
typedef struct info_report {
    const char *path;
    const dlc_store *s;
    const dlc_store_info *info;
    char *build;       /* the "build" metadata, NUL-terminated; NULL when there is none */
    size_t build_size; /* its bytes */
    int build_ok;      /* it is valid JSON, to be shown as an object */
    int verify;        /* --verify ran */
    dlc_status vrc;    /* what it found */
    verify_state v;
    int have_resident;
    uint64_t resident;      /* bytes of the store in the page cache */
    const uint64_t *counts; /* records per label, or NULL */
    info_sizes sizes;       /* payload bytes per field */
} info_report;

/* Copy the "build" metadata and check that it is one JSON value with no NUL inside. */
static void read_build_meta(info_report *r)
{
    const void *data;
    if (dlc_store_meta(r->s, "build", &data, &r->build_size) != DLC_OK ||
        !(r->build = malloc(r->build_size + 1)))
        return;
    const size_t n = r->build_size;
    memcpy(r->build, data, n);
    r->build[n] = '\0';
    r->build_ok = dlc__json_valid(r->build, n) && memchr(r->build, 0, n) == NULL;
}

/* A token store's prefix sums against their digest and every record (DLC_OK for other stores). */
static dlc_status verify_tokens(const dlc_store *s)
{
    dlc_tokens *t = NULL;
    dlc_status rc = dlc_tokens_open(s, &t);
    if (rc == DLC_ENOTFOUND || rc == DLC_ENOSYS)
        return DLC_OK; /* Not a token store (or a set, whose shards are verified as stores). */
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, "token metadata");
        return rc;
    }
    rc = dlc_tokens_verify(t, s);
    if (rc != DLC_OK)
        tool_report(TOOL, rc, "token offsets");
    dlc_tokens_close(t);
    return rc;
}

/* A token store's line: documents, tokens, element type, end-of-document id, tokenizer. */
static void print_text_tokens(const dlc_store *s)
{
    dlc_tokens *t = NULL;
    if (dlc_tokens_open(s, &t) != DLC_OK)
        return;
    const dlc_tokens_info *ti = dlc_tokens_get_info(t);
    printf("tokens       %llu documents, %llu tokens (%s, end-of-document id %u, longest %llu), "
           "tokenizer %s\n",
           (unsigned long long)ti->num_docs, (unsigned long long)ti->num_tokens,
           dlc_dtype_name(ti->dtype), ti->eos_id, (unsigned long long)ti->max_doc_tokens,
           ti->tokenizer);
    dlc_tokens_close(t);
}

/* --verify: re-hash every record, naming the bad ones as they come. Returns the exit status
 * it asks for: 0, 1 (bad records) or 2 (the verification itself failed). */
static int run_verify(info_report *r, int json)
{
    uint64_t nbad = 0;
    tool_progress_init(&r->v.pg, 10);
    r->v.t0 = dlc__now_s();
    r->vrc = dlc_store_verify(r->s, on_verify, &r->v, &nbad);
    tool_progress_end(&r->v.pg);
    if (r->vrc == DLC_OK)
        r->vrc = verify_tokens(r->s);
    if (r->vrc < 0)
        tool_report(TOOL, r->vrc, "verify failed");
    else if (!json)
        fprintf(stderr, "%s: verify: %llu records, all checksums and counts match\n", TOOL,
                (unsigned long long)r->info->count);
    if (r->vrc == DLC_OK)
        return 0;
    return r->vrc == DLC_ECORRUPT || nbad ? 1 : 2;
}

/* ---- Sets ---- */

/* Is the store a set (a directory of shards), even one of a single shard? */
static int is_set(const dlc_store *s)
{
    const char *f0 = dlc_store_file_path(s, 0);
    return f0 && strcmp(f0, dlc_store_path(s)) != 0;
}

/* The first record of file @p k: a binary search over dlc_store_record_file(), which never
 * touches the map; the count for k past the last file. */
static uint64_t file_first(const dlc_store *s, uint32_t k)
{
    uint64_t lo = 0, hi = dlc_store_get_info(s)->count;
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (dlc_store_record_file(s, mid) < k)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static const char *base_name(const char *path)
{
    const char *slash = path ? strrchr(path, '/') : NULL;
    return slash ? slash + 1 : path ? path : "?";
}

/* A set's shards: name, first record, records and bytes of each. */
static void print_json_set(tool_json *j, const dlc_store *s)
{
    if (!is_set(s)) {
        tool_json_str(j, "set", NULL);
        return;
    }
    const uint32_t n = dlc_store_num_files(s);
    tool_json_object_begin(j, "set");
    tool_json_u64(j, "shards", n);
    tool_json_array_begin(j, "files");
    uint64_t first = 0;
    for (uint32_t k = 0; k < n; k++) {
        const uint64_t next = file_first(s, k + 1);
        tool_json_object_begin(j, NULL);
        tool_json_str(j, "name", base_name(dlc_store_file_path(s, k)));
        tool_json_u64(j, "first", first);
        tool_json_u64(j, "count", next - first);
        tool_json_u64(j, "bytes", dlc_store_file_bytes(s, k));
        tool_json_object_end(j);
        first = next;
    }
    tool_json_array_end(j);
    tool_json_object_end(j);
}

static void print_text_set(const dlc_store *s)
{
    if (!is_set(s))
        return;
    const uint32_t n = dlc_store_num_files(s);
    char b1[32];
    printf("set          %u shard%s, %s in all\n", n, n == 1 ? "" : "s",
           tool_human_bytes(dlc_store_get_info(s)->file_bytes, b1, sizeof b1));
    uint64_t first = 0;
    for (uint32_t k = 0; k < n && k < MAX_LABEL_LINES; k++) {
        const uint64_t next = file_first(s, k + 1);
        printf("  %-28s %10llu records from %-10llu %s\n", base_name(dlc_store_file_path(s, k)),
               (unsigned long long)(next - first), (unsigned long long)first,
               tool_human_bytes(dlc_store_file_bytes(s, k), b1, sizeof b1));
        first = next;
    }
    if (n > MAX_LABEL_LINES)
        printf("  ... %u more (--json lists all)\n", n - MAX_LABEL_LINES);
}

static void print_json(const info_report *r)
{
    const dlc_store_info *info = r->info;
    tool_json j;
    tool_json_init(&j, stdout);
    tool_json_object_begin(&j, NULL);
    tool_json_str(&j, "store", r->path);
    tool_json_u64(&j, "format_version", info->format_version);
    tool_json_u64(&j, "count", info->count);
    tool_json_str(&j, "encoding", info_encoding_name(info->encoding));
    tool_json_u64(&j, "height", info->height);
    tool_json_u64(&j, "width", info->width);
    tool_json_u64(&j, "channels", info->channels);
    tool_json_u64(&j, "num_labels", info->num_labels);
    tool_json_array_begin(&j, "labels");
    for (uint32_t l = 0; l < info->num_labels; l++)
        tool_json_str(&j, NULL, dlc_store_label_name(r->s, l));
    tool_json_array_end(&j);
    tool_json_array_begin(&j, "label_counts");
    for (uint32_t l = 0; l < info->num_labels; l++)
        tool_json_u64(&j, NULL, r->counts ? r->counts[l] : 0);
    tool_json_array_end(&j);
    tool_json_u64(&j, "skipped", info->skipped);
    tool_json_u64(&j, "bytes", info->file_bytes);
    tool_json_u64(&j, "payload_bytes", info->payload_bytes);
    tool_json_f64(&j, "bytes_per_image",
                  info->count ? (double)info->file_bytes / (double)info->count : 0.0);
    tool_json_hex64(&j, "content_digest", info->content_digest);
    info_print_fields_json(&j, r->s, &r->sizes);
    if (r->have_resident)
        tool_json_u64(&j, "resident_bytes", r->resident);
    else
        tool_json_str(&j, "resident_bytes", NULL);
    if (r->build_ok) {
        reemit re = {&j, "build"};
        dlc__json_walk(r->build, r->build + r->build_size, on_build_value, &re, NULL);
    } else {
        tool_json_str(&j, "build", r->build);
    }
    print_json_set(&j, r->s);
    if (r->verify) {
        tool_json_bool(&j, "ok", r->vrc == DLC_OK);
        tool_json_array_begin(&j, "bad");
        for (size_t i = 0; i < r->v.nbad; i++)
            tool_json_u64(&j, NULL, r->v.bad[i]);
        tool_json_array_end(&j);
        /* Each bad record with the file that holds it (a set's shard) and the reason. */
        tool_json_array_begin(&j, "bad_records");
        for (size_t i = 0; i < r->v.nbad; i++) {
            const uint32_t f = dlc_store_record_file(r->s, r->v.bad[i]);
            tool_json_object_begin(&j, NULL);
            tool_json_u64(&j, "record", r->v.bad[i]);
            tool_json_str(&j, "file", base_name(dlc_store_file_path(r->s, f)));
            tool_json_str(&j, "message", r->v.why[i]);
            tool_json_object_end(&j);
        }
        tool_json_array_end(&j);
        if (r->vrc != DLC_OK)
            tool_json_str(&j, "error", dlc_errmsg());
    }
    tool_json_object_end(&j);
    tool_json_finish(&j);
}

/* The labels with their record counts, the first MAX_LABEL_LINES of them. */
static void print_text_labels(const info_report *r)
{
    const uint32_t n = r->info->num_labels;
    printf("labels       %u\n", n);
    for (uint32_t l = 0; l < n && l < MAX_LABEL_LINES; l++) {
        const char *name = dlc_store_label_name(r->s, l);
        printf("  %6u  %-24s %llu\n", l, name ? name : "?",
               (unsigned long long)(r->counts ? r->counts[l] : 0));
    }
    if (n > MAX_LABEL_LINES)
        printf("  ... %u more (--json lists all)\n", n - MAX_LABEL_LINES);
}

/* How the store was built, from its "build" metadata. */
static void print_text_build(const info_report *r)
{
    const char *build = r->build, *end = r->build + r->build_size;
    if (!r->build_ok) {
        printf("built        %s\n", build ? "(unreadable build metadata)" : "(no build metadata)");
        return;
    }
    /* The store's words, decoded from JSON: shown as \xHH where they hold control bytes (an
     * output's name with an escape sequence, or a store made to hold one). */
    char date[64], ver[64], cmd[4096], s1[256], s2[256], s3[16384];
    const char *vs, *ve;
    printf("built        %s by dlcache %s\n",
           build_str(build, "date", date, sizeof date) ? tool_printable(date, s1, sizeof s1) : "?",
           build_str(build, "version", ver, sizeof ver) ? tool_printable(ver, s2, sizeof s2) : "?");
    if (build_str(build, "command", cmd, sizeof cmd))
        printf("command      %s\n", tool_printable(cmd, s3, sizeof s3));
    static const char *const spans[2][2] = {{"options", "options      "},
                                            {"sources", "sources      "}};
    for (int k = 0; k < 2; k++) {
        if (dlc__json_member(build, end, spans[k][0], &vs, &ve) != 0)
            continue;
        char *text = strndup(vs, (size_t)(ve - vs));
        char *shown = text ? malloc(4 * (size_t)(ve - vs) + 8) : NULL;
        if (shown)
            printf("%s%s\n", spans[k][1], tool_printable(text, shown, 4 * (size_t)(ve - vs) + 8));
        free(shown);
        free(text);
    }
}

/* "raw (uint8 RGB, HWC)": the first image field's encoding, in words. */
static const char *encoding_text(const dlc_store_info *info)
{
    if (info->encoding == DLC_ENCODING_JPEG)
        return "jpeg (decoded by the loader)";
    if (info->encoding == DLC_ENCODING_PNG)
        return "png (decoded by the loader)";
    return info->channels == 1   ? "raw (uint8 gray, HWC)"
           : info->channels == 4 ? "raw (uint8 RGBA, HWC)"
                                 : "raw (uint8 RGB, HWC)";
}

static void print_text(const info_report *r)
{
    const dlc_store_info *info = r->info;
    char b1[32], b2[32], b3[32], shown[1024];
    printf("store        %s\n", tool_printable(r->path, shown, sizeof shown));
    printf("records      %llu (%llu source files skipped when built)\n",
           (unsigned long long)info->count, (unsigned long long)info->skipped);
    if (info->image_field == DLC_NO_FIELD)
        printf("shape        no image field\n");
    else if (info->height && info->width)
        printf("shape        %u x %u x %u (height x width x channels)\n", info->height, info->width,
               info->channels);
    else
        printf("shape        varies (built without a crop), %u channels\n", info->channels);
    if (info->image_field != DLC_NO_FIELD)
        printf("encoding     %s\n", encoding_text(info));
    print_text_labels(r);
    print_text_tokens(r->s);
    printf("size         %s on disk, %s per %s (payload %s)\n",
           tool_human_bytes(info->file_bytes, b1, sizeof b1),
           tool_human_bytes(info->count ? info->file_bytes / info->count : 0, b2, sizeof b2),
           info->image_field == DLC_NO_FIELD ? "record" : "image",
           tool_human_bytes(info->payload_bytes, b3, sizeof b3));
    printf("digest       %016llx\n", (unsigned long long)info->content_digest);
    print_text_set(r->s);
    info_print_fields_text(r->s, &r->sizes);
    print_text_build(r);
    if (r->have_resident)
        printf("page cache   %s of %s resident (%.0f%%)\n",
               tool_human_bytes(r->resident, b1, sizeof b1),
               tool_human_bytes(info->file_bytes, b2, sizeof b2),
               info->file_bytes ? 100.0 * (double)r->resident / (double)info->file_bytes : 0.0);
    if (r->verify)
        printf("verify       %s\n", r->vrc == DLC_OK ? "ok" : "FAILED");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--plan"))
            return info_plan_main(argc, argv);
    info_args a = {.path = NULL};
    int status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;
    dlc_store *s = NULL;
    const dlc_status rc =
        dlc_store_open(a.path, a.verify ? DLC_STORE_SEQUENTIAL : DLC_STORE_RANDOM, &s);
    if (rc < 0) {
        tool_report(TOOL, rc, "cannot open the store");
        return 2;
    }
    if (a.dump) {
        status = run_dump(s, &a);
        dlc_store_close(s);
        return status;
    }

    info_report r = {.path = a.path, .s = s, .info = dlc_store_get_info(s), .verify = a.verify};
    read_build_meta(&r);
    status = a.verify ? run_verify(&r, a.json) : 0;
    r.have_resident = dlc_store_resident(s, &r.resident) == DLC_OK;
    r.counts = dlc_store_label_counts(s);
    info_field_sizes(s, &r.sizes);
    if (a.json)
        print_json(&r);
    else
        print_text(&r);
    for (size_t i = 0; i < r.v.nbad; i++)
        free(r.v.why[i]);
    free(r.v.why);
    free(r.v.bad);
    free(r.build);
    dlc_store_close(s);
    return status;
}
