/*
 * cacheinfo: what a store holds, how it was built, whether it is intact.
 *
 *   cacheinfo STORE [--json] [--verify] [--dump I -o FILE.ppm]
 *
 * Prints the record count, shape, encoding, labels with their record counts,
 * the size on disk, how the store was built (its "build" metadata) and how
 * much of it is in the page cache now. --verify re-hashes every record and
 * names each bad one; --dump writes record I as a binary PPM (JPEG records
 * are decoded first).
 *
 * Exit status: 0 ok, 1 verification (or the dumped record's checksum)
 * failed, 2 usage error or the store cannot be opened.
 */
#include <dlcache/image.h>
#include <dlcache/store.h>

#include "toolutil.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOOL "cacheinfo"
/* Labels listed in the text output; --json lists all. */
#define MAX_LABEL_LINES 40
/* The "build" text is untrusted input: its nesting is bounded. */
#define MAX_JSON_DEPTH 16

static void usage(FILE *f)
{
    fputs("usage: " TOOL " STORE [--json] [--verify] [--dump I -o FILE.ppm]\n"
          "\n"
          "Show what a dlcache store holds and how it was built.\n"
          "\n"
          "options:\n"
          "  --json             print a JSON report on stdout\n"
          "  --verify           re-hash every record; exit 1 naming each bad one\n"
          "  --dump I           write record I as a binary PPM to the -o file\n"
          "  -o, --output FILE  where --dump writes\n"
          "  -h, --help         this text\n",
          f);
}

/* ---- A small JSON reader for the "build" metadata: it validates the text
 * (dry run, j == NULL) and re-emits it through tool_json, so --json embeds
 * it as an object. ---- */

static const char *js_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Decode a string at p (which points at '"') into out (cap bytes, truncated). */
static const char *js_string(const char *p, const char *end, char *out, size_t cap)
{
    size_t n = 0;
    if (p >= end || *p != '"')
        return NULL;
    p++;
    while (p < end && *p != '"') {
        unsigned c = (unsigned char)*p++;
        if (c < 0x20)
            return NULL;
        if (c == '\\') {
            if (p >= end)
                return NULL;
            const char e = *p++;
            switch (e) {
            case '"':
            case '\\':
            case '/':
                c = (unsigned char)e;
                break;
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            case 'n':
                c = '\n';
                break;
            case 'r':
                c = '\r';
                break;
            case 't':
                c = '\t';
                break;
            case 'u': {
                if (end - p < 4)
                    return NULL;
                c = 0;
                for (int i = 0; i < 4; i++) {
                    const char h = *p++;
                    c <<= 4;
                    if (h >= '0' && h <= '9')
                        c |= (unsigned)(h - '0');
                    else if (h >= 'a' && h <= 'f')
                        c |= (unsigned)(h - 'a' + 10);
                    else if (h >= 'A' && h <= 'F')
                        c |= (unsigned)(h - 'A' + 10);
                    else
                        return NULL;
                }
                if (c >= 0x80)
                    c = '?'; /* Only control characters are escaped by our writer. */
                break;
            }
            default:
                return NULL;
            }
        }
        if (out && n + 1 < cap)
            out[n++] = (char)c;
    }
    if (p >= end)
        return NULL;
    if (out && cap)
        out[n] = '\0';
    return p + 1;
}

static const char *js_value(const char *p, const char *end, tool_json *j, const char *key,
                            int depth)
{
    p = js_ws(p, end);
    if (p >= end || depth > MAX_JSON_DEPTH)
        return NULL;
    if (*p == '{' || *p == '[') {
        const int obj = *p == '{';
        if (j)
            (obj ? tool_json_object_begin : tool_json_array_begin)(j, key);
        p = js_ws(p + 1, end);
        if (p < end && *p == (obj ? '}' : ']')) {
            p++;
        } else {
            for (;;) {
                char k[256];
                if (obj) {
                    p = js_string(js_ws(p, end), end, k, sizeof k);
                    if (!p)
                        return NULL;
                    p = js_ws(p, end);
                    if (p >= end || *p != ':')
                        return NULL;
                    p++;
                }
                p = js_value(p, end, j, obj ? k : NULL, depth + 1);
                if (!p)
                    return NULL;
                p = js_ws(p, end);
                if (p < end && *p == ',') {
                    p++;
                    continue;
                }
                if (p < end && *p == (obj ? '}' : ']')) {
                    p++;
                    break;
                }
                return NULL;
            }
        }
        if (j)
            (obj ? tool_json_object_end : tool_json_array_end)(j);
        return p;
    }
    if (*p == '"') {
        char s[4096];
        const char *q = js_string(p, end, s, sizeof s);
        if (q && j)
            tool_json_str(j, key, s);
        return q;
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int w = 0; w < 3; w++) {
        const size_t n = strlen(words[w]);
        if ((size_t)(end - p) >= n && memcmp(p, words[w], n) == 0) {
            if (j && w < 2)
                tool_json_bool(j, key, w == 0);
            else if (j)
                tool_json_str(j, key, NULL);
            return p + n;
        }
    }
    /* A number. */
    char num[64];
    size_t n = 0;
    while (p + n < end && n + 1 < sizeof num && strchr("+-0123456789.eE", p[n]))
        n++;
    if (n == 0)
        return NULL;
    memcpy(num, p, n);
    num[n] = '\0';
    char *e;
    if (strpbrk(num, ".eE")) {
        const double d = strtod(num, &e);
        if (*e)
            return NULL;
        if (j)
            tool_json_f64(j, key, d);
    } else {
        errno = 0;
        const long long v = strtoll(num, &e, 10);
        if (*e || errno)
            return NULL;
        if (j)
            tool_json_i64(j, key, v);
    }
    return p + n;
}

/* Find top-level member @p key of the object in [p, end): its value's span. */
static int js_find(const char *p, const char *end, const char *key, const char **vs,
                   const char **ve)
{
    p = js_ws(p, end);
    if (p >= end || *p != '{')
        return -1;
    p++;
    for (;;) {
        char k[256];
        p = js_string(js_ws(p, end), end, k, sizeof k);
        if (!p)
            return -1;
        p = js_ws(p, end);
        if (p >= end || *p != ':')
            return -1;
        const char *s = js_ws(p + 1, end);
        const char *e = js_value(s, end, NULL, NULL, 1);
        if (!e)
            return -1;
        if (strcmp(k, key) == 0) {
            *vs = s;
            *ve = e;
            return 0;
        }
        p = js_ws(e, end);
        if (p >= end || *p != ',')
            return -1;
        p++;
    }
}

/* The string value of top-level @p key, or NULL. */
static const char *js_get_str(const char *text, const char *key, char *buf, size_t cap)
{
    const char *vs, *ve;
    const char *end = text + strlen(text);
    if (js_find(text, end, key, &vs, &ve) != 0 || *vs != '"')
        return NULL;
    return js_string(vs, ve, buf, cap) ? buf : NULL;
}

/* ---- Verify ---- */

typedef struct verify_state {
    tool_progress pg;
    uint64_t *bad;
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
            if (!b)
                return 1;
            v->bad = b;
            v->cap = cap;
        }
        v->bad[v->nbad++] = p->bad_index;
        return 0;
    }
    const double dt = dlc__now_s() - v->t0;
    char eta[32];
    const double rate = dt > 0 ? (double)p->done / dt : 0;
    tool_human_seconds(rate > 0 ? (double)(p->total - p->done) / rate : -1, eta, sizeof eta);
    tool_progress_line(&v->pg, 0, "verify: %llu/%llu records  %.0f MB/s  ETA %s  %llu bad",
                       (unsigned long long)p->done, (unsigned long long)p->total,
                       dt > 0 ? (double)p->bytes_done / dt / 1e6 : 0.0, eta,
                       (unsigned long long)p->bad);
    return 0;
}

/* ---- Dump ---- */

static int dump_record(const dlc_store *s, uint64_t index, const char *path)
{
    dlc_store_reader *r = NULL;
    dlc_codec *codec = NULL;
    FILE *f = NULL;
    int status = 2;
    dlc_record rec;
    dlc_status rc = dlc_store_reader_open(s, &r);
    if (rc < 0) {
        tool_report(TOOL, rc, "cannot read the store");
        goto done;
    }
    rc = dlc_store_read(r, index, &rec);
    if (rc < 0) {
        tool_report(TOOL, rc, "cannot read the record");
        goto done;
    }
    rc = dlc_record_verify(s, &rec);
    if (rc < 0) {
        tool_report(TOOL, rc, "the record is damaged");
        status = 1;
        goto done;
    }
    dlc_image img = {.data = (uint8_t *)rec.data,
                     .width = rec.width,
                     .height = rec.height,
                     .channels = rec.channels,
                     .stride = (size_t)rec.width * rec.channels};
    if (rec.encoding == DLC_ENCODING_JPEG) {
        if ((rc = dlc_codec_create(&codec)) < 0 ||
            (rc = dlc_jpeg_decode(codec, rec.data, rec.size, 0, 0, &img)) < 0) {
            tool_report(TOOL, rc, "cannot decode the record");
            status = 1;
            goto done;
        }
    }
    if (img.channels != 1 && img.channels != 3) {
        fprintf(stderr, "%s: error: record %llu has %u channels; PPM holds 1 or 3\n", TOOL,
                (unsigned long long)index, img.channels);
        goto done;
    }
    f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "%s: error: %s: %s\n", TOOL, path, strerror(errno));
        goto done;
    }
    fprintf(f, "P%c\n%u %u\n255\n", img.channels == 3 ? '6' : '5', img.width, img.height);
    const size_t row = (size_t)img.width * img.channels;
    for (uint32_t y = 0; y < img.height; y++)
        fwrite(img.data + (size_t)y * img.stride, 1, row, f);
    if (fclose(f) != 0 || ferror(stdout)) {
        f = NULL;
        fprintf(stderr, "%s: error: %s: cannot write: %s\n", TOOL, path, strerror(errno));
        goto done;
    }
    f = NULL;
    fprintf(stderr, "%s: record %llu (label %lld, %ux%u) written to %s\n", TOOL,
            (unsigned long long)index, (long long)rec.label, img.width, img.height, path);
    status = 0;
done:
    if (f)
        fclose(f);
    dlc_codec_destroy(codec);
    dlc_store_reader_close(r);
    return status;
}

/* ---- Main ---- */

int main(int argc, char **argv)
{
    enum { O_JSON = 256, O_VERIFY, O_DUMP };
    static const struct option longopts[] = {
        {"json", no_argument, NULL, O_JSON},       {"verify", no_argument, NULL, O_VERIFY},
        {"dump", required_argument, NULL, O_DUMP}, {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    int json = 0, verify = 0, dump = 0;
    uint64_t dump_index = 0;
    const char *dump_path = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case O_JSON:
            json = 1;
            break;
        case O_VERIFY:
            verify = 1;
            break;
        case O_DUMP:
            if (tool_parse_u64(optarg, UINT64_MAX, &dump_index) != 0) {
                fprintf(stderr, "%s: error: --dump wants a record number, not '%s'\n", TOOL,
                        optarg);
                return 2;
            }
            dump = 1;
            break;
        case 'o':
            dump_path = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            fprintf(stderr, "%s: error: unknown option or missing value: %s\n", TOOL,
                    argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind + 1 != argc || (dump && !dump_path) || (dump_path && !dump)) {
        fprintf(stderr, "%s: error: %s\n", TOOL,
                optind + 1 != argc ? "exactly one STORE is needed"
                                   : "--dump I and -o FILE go together");
        usage(stderr);
        return 2;
    }
    const char *path = argv[optind];
    dlc_store *s = NULL;
    dlc_status rc = dlc_store_open(path, verify ? DLC_STORE_SEQUENTIAL : DLC_STORE_RANDOM, &s);
    if (rc < 0) {
        tool_report(TOOL, rc, "cannot open the store");
        return 2;
    }
    const dlc_store_info *info = dlc_store_get_info(s);

    if (dump) {
        if (dump_index >= info->count) {
            fprintf(stderr, "%s: error: %s has records 0..%llu, not %llu\n", TOOL, path,
                    (unsigned long long)info->count - 1, (unsigned long long)dump_index);
            dlc_store_close(s);
            return 2;
        }
        const int st = dump_record(s, dump_index, dump_path);
        dlc_store_close(s);
        return st;
    }

    /* The "build" text, NUL-terminated, and whether it is valid JSON. */
    char *build = NULL;
    int build_ok = 0;
    const void *bdata;
    size_t bsize;
    if (dlc_store_meta(s, "build", &bdata, &bsize) == DLC_OK && (build = malloc(bsize + 1))) {
        memcpy(build, bdata, bsize);
        build[bsize] = '\0';
        const char *e = js_value(build, build + bsize, NULL, NULL, 0);
        build_ok = e && js_ws(e, build + bsize) == build + bsize && memchr(build, 0, bsize) == NULL;
    }

    verify_state v = {0};
    uint64_t nbad = 0;
    dlc_status vrc = DLC_OK;
    if (verify) {
        tool_progress_init(&v.pg, 10);
        v.t0 = dlc__now_s();
        vrc = dlc_store_verify(s, on_verify, &v, &nbad);
        tool_progress_end(&v.pg);
        if (vrc < 0)
            tool_report(TOOL, vrc, "verify failed");
        else if (!json)
            fprintf(stderr, "%s: verify: %llu records, all checksums and counts match\n", TOOL,
                    (unsigned long long)info->count);
    }

    uint64_t resident = 0;
    const int have_resident = dlc_store_resident(s, &resident) == DLC_OK;
    const uint64_t *counts = dlc_store_label_counts(s);
    const char *enc = info->encoding == DLC_ENCODING_JPEG ? "jpeg" : "raw";

    if (json) {
        tool_json j;
        tool_json_init(&j, stdout);
        tool_json_object_begin(&j, NULL);
        tool_json_str(&j, "store", path);
        tool_json_u64(&j, "format_version", info->format_version);
        tool_json_u64(&j, "count", info->count);
        tool_json_str(&j, "encoding", enc);
        tool_json_u64(&j, "height", info->height);
        tool_json_u64(&j, "width", info->width);
        tool_json_u64(&j, "channels", info->channels);
        tool_json_u64(&j, "num_labels", info->num_labels);
        tool_json_array_begin(&j, "labels");
        for (uint32_t l = 0; l < info->num_labels; l++)
            tool_json_str(&j, NULL, dlc_store_label_name(s, l));
        tool_json_array_end(&j);
        tool_json_array_begin(&j, "label_counts");
        for (uint32_t l = 0; l < info->num_labels; l++)
            tool_json_u64(&j, NULL, counts ? counts[l] : 0);
        tool_json_array_end(&j);
        tool_json_u64(&j, "skipped", info->skipped);
        tool_json_u64(&j, "bytes", info->file_bytes);
        tool_json_u64(&j, "payload_bytes", info->payload_bytes);
        tool_json_f64(&j, "bytes_per_image",
                      info->count ? (double)info->file_bytes / (double)info->count : 0.0);
        tool_json_hex64(&j, "content_digest", info->content_digest);
        if (have_resident)
            tool_json_u64(&j, "resident_bytes", resident);
        else
            tool_json_str(&j, "resident_bytes", NULL);
        if (build_ok)
            js_value(build, build + bsize, &j, "build", 0);
        else
            tool_json_str(&j, "build", build);
        if (verify) {
            tool_json_bool(&j, "ok", vrc == DLC_OK);
            tool_json_array_begin(&j, "bad");
            for (size_t i = 0; i < v.nbad; i++)
                tool_json_u64(&j, NULL, v.bad[i]);
            tool_json_array_end(&j);
            if (vrc != DLC_OK)
                tool_json_str(&j, "error", dlc_errmsg());
        }
        tool_json_object_end(&j);
        tool_json_finish(&j);
    } else {
        char b1[32], b2[32], b3[32];
        printf("store        %s\n", path);
        printf("records      %llu (%llu source files skipped when built)\n",
               (unsigned long long)info->count, (unsigned long long)info->skipped);
        if (info->height && info->width)
            printf("shape        %u x %u x %u (height x width x channels)\n", info->height,
                   info->width, info->channels);
        else
            printf("shape        varies (built without a crop), %u channels\n", info->channels);
        printf("encoding     %s\n", info->encoding == DLC_ENCODING_JPEG
                                        ? "jpeg (decoded by the loader)"
                                        : "raw (uint8 RGB, HWC)");
        printf("labels       %u\n", info->num_labels);
        for (uint32_t l = 0; l < info->num_labels && l < MAX_LABEL_LINES; l++) {
            const char *name = dlc_store_label_name(s, l);
            printf("  %6u  %-24s %llu\n", l, name ? name : "?",
                   (unsigned long long)(counts ? counts[l] : 0));
        }
        if (info->num_labels > MAX_LABEL_LINES)
            printf("  ... %u more (--json lists all)\n", info->num_labels - MAX_LABEL_LINES);
        printf("size         %s on disk, %s per image (payload %s)\n",
               tool_human_bytes(info->file_bytes, b1, sizeof b1),
               tool_human_bytes(info->count ? info->file_bytes / info->count : 0, b2, sizeof b2),
               tool_human_bytes(info->payload_bytes, b3, sizeof b3));
        printf("digest       %016llx\n", (unsigned long long)info->content_digest);
        if (build_ok) {
            char date[64], ver[64], cmd[4096];
            const char *vs, *ve;
            printf("built        %s by dlcache %s\n",
                   js_get_str(build, "date", date, sizeof date) ? date : "?",
                   js_get_str(build, "version", ver, sizeof ver) ? ver : "?");
            if (js_get_str(build, "command", cmd, sizeof cmd))
                printf("command      %s\n", cmd);
            if (js_find(build, build + bsize, "options", &vs, &ve) == 0)
                printf("options      %.*s\n", (int)(ve - vs), vs);
            if (js_find(build, build + bsize, "sources", &vs, &ve) == 0)
                printf("sources      %.*s\n", (int)(ve - vs), vs);
        } else if (build) {
            printf("built        (unreadable build metadata)\n");
        } else {
            printf("built        (no build metadata)\n");
        }
        if (have_resident)
            printf("page cache   %s of %s resident (%.0f%%)\n",
                   tool_human_bytes(resident, b1, sizeof b1),
                   tool_human_bytes(info->file_bytes, b2, sizeof b2),
                   info->file_bytes ? 100.0 * (double)resident / (double)info->file_bytes : 0.0);
        if (verify)
            printf("verify       %s\n", vrc == DLC_OK ? "ok" : "FAILED");
    }
    free(v.bad);
    free(build);
    dlc_store_close(s);
    if (verify && vrc != DLC_OK)
        return vrc == DLC_ECORRUPT || nbad ? 1 : 2;
    return 0;
}
