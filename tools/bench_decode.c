/* `cachebench decode`: plain libjpeg-turbo decode at full size, the reference that the builder's
 * images/s is compared with (docs/BENCHMARKS.md, "The builder against plain decoding"); with
 * --size, also the builder's own transform (dlc_jpeg_decode_resize(), as cache/builder/
 * build_item.c calls it for a 3-channel store) into memory, nothing written: the fair ceiling of
 * a build, measured in the same run right after the plain decode. */
#include "bench.h"

#include <dlcache/image.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct decode_opts {
    const char *source;
    uint64_t threads, limit;
    uint64_t size; /* --size: also decode + resize to this short side; 0: plain decode only */
    double seconds;
    int json, center_crop;
} decode_opts;

typedef struct decode_shared {
    const bench_jpeg_set *set;
    uint32_t size; /* 0: plain decode; else decode + resize to this short side */
    int center_crop;
    bench_sync sync;
    double min_seconds;
    atomic_uint_fast64_t next;  /* next image number; image = number % count */
    atomic_uint_fast64_t limit; /* numbers from here on are not decoded */
} decode_shared;

typedef struct decode_arg {
    decode_shared *sh;
    uint64_t images, pixels, bytes;
    double cpu_s; /* the thread's CPU time in the window: a cost the machine's load moves little */
} decode_arg;

/* What one run measured, summed over the threads. */
typedef struct decode_result {
    uint64_t images, pixels, bytes, files, file_bytes;
    double seconds, cpu_s;
} decode_result;

/* Close the window at image number @p k, the first of a pass: numbers from @p k on are not
 * decoded by any thread. */
static void close_at(decode_shared *sh, uint64_t k)
{
    uint_fast64_t cur = atomic_load(&sh->limit);
    while (k < cur && !atomic_compare_exchange_weak(&sh->limit, &cur, k)) {
    }
}

static void *decode_worker(void *p)
{
    decode_arg *a = p;
    decode_shared *sh = a->sh;
    const uint64_t n = sh->set->count;
    dlc_codec *codec = NULL;
    const dlc_status crc = dlc_codec_create(&codec);
    pthread_barrier_wait(&sh->sync.start);
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    if (crc != DLC_OK) {
        tool_report(TOOL, crc, "creating a codec");
        atomic_store(&sh->sync.failed, 1);
        return NULL;
    }
    for (;;) {
        const uint64_t k = atomic_fetch_add(&sh->next, 1);
        if (k >= atomic_load(&sh->limit) || atomic_load(&sh->sync.failed))
            break;
        /* Passes are whole: the window may only close where a pass begins, so that every image
         * weighs the same in the result. */
        if (k % n == 0 && k > 0 && dlc__now_s() - sh->sync.t0 >= sh->min_seconds) {
            close_at(sh, k);
            break;
        }
        const bench_jpeg_file *f = &sh->set->files[k % n];
        dlc_image img;
        const dlc_status rc = sh->size ? dlc_jpeg_decode_resize(codec, f->data, f->size, sh->size,
                                                                sh->center_crop, &img)
                                       : dlc_jpeg_decode(codec, f->data, f->size, 0, 0, &img);
        if (rc != DLC_OK) {
            tool_report(TOOL, rc, f->path);
            atomic_store(&sh->sync.failed, 1);
            break;
        }
        a->images++;
        a->pixels += (uint64_t)img.width * img.height;
        a->bytes += f->size;
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    a->cpu_s = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9;
    dlc_codec_destroy(codec);
    return NULL;
}

/* Returns 0 to run, 1 after --help, 2 on a usage error (printed). */
static int parse_decode(int argc, char **argv, decode_opts *o)
{
    *o = (decode_opts){.threads = dlc__cpu_count(), .seconds = BENCH_DEFAULT_SECONDS};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bench_usage(stdout);
            return 1;
        } else if (a[0] != '-' && !o->source) {
            o->source = a;
            continue;
        } else if (!strcmp(a, "--center-crop")) {
            o->center_crop = 1;
            continue;
        } else if (!strcmp(a, "--size") && v) {
            bad = tool_parse_u64(v, 65535, &o->size) || o->size == 0;
        } else if (!strcmp(a, "--threads") && v) {
            bad = tool_parse_u64(v, 4096, &o->threads);
        } else if (!strcmp(a, "--limit") && v) {
            bad = tool_parse_u64(v, UINT64_MAX, &o->limit);
        } else if (!strcmp(a, "--seconds") && v) {
            bad = bench_parse_seconds(v, &o->seconds);
        } else {
            fprintf(stderr, TOOL ": error: decode: unknown option or missing value: %s\n", a);
            return 2;
        }
        if (bad) {
            fprintf(stderr, TOOL ": error: decode: bad value for %s: %s\n", a, v);
            return 2;
        }
        i++;
    }
    if (!o->source) {
        fprintf(stderr, TOOL ": error: decode: missing SOURCE\n");
        bench_usage(stderr);
        return 2;
    }
    if (o->threads == 0)
        o->threads = dlc__cpu_count();
    return 0;
}

/* Decode the files of @p set in whole passes on the threads, plain (@p size 0) or resized to
 * @p size. Returns 0 or -1 (printed). */
static int measure_decode(const decode_opts *o, const bench_jpeg_set *set, uint32_t size,
                          decode_result *res)
{
    decode_arg *args = NULL;
    int status = -1;
    memset(res, 0, sizeof *res);
    decode_shared sh = {
        .set = set, .size = size, .center_crop = o->center_crop, .min_seconds = o->seconds};
    atomic_init(&sh.next, 0);
    atomic_init(&sh.limit, UINT64_MAX);
    atomic_init(&sh.sync.failed, 0);
    if (!(args = calloc(o->threads, sizeof *args))) {
        fprintf(stderr, TOOL ": error: out of memory\n");
        goto out;
    }
    for (uint64_t t = 0; t < o->threads; t++)
        args[t].sh = &sh;
    res->seconds =
        bench_run_window((int)o->threads, decode_worker, args, sizeof *args, &sh.sync, 0);
    for (uint64_t t = 0; t < o->threads; t++) {
        res->images += args[t].images;
        res->pixels += args[t].pixels;
        res->bytes += args[t].bytes;
        res->cpu_s += args[t].cpu_s;
    }
    res->files = set->count;
    res->file_bytes = set->bytes;
    status = atomic_load(&sh.sync.failed) ? -1 : 0;
out:
    free(args);
    return status;
}

/* The plain decode @p r and, with --size, the decode + resize @p z (NULL without). */
static void print_decode(const decode_opts *o, const decode_result *r, const decode_result *z)
{
    const double passes = (double)r->images / (double)r->files;
    if (!o->json) {
        printf("decode: %llu images (%llu files, %.1f passes) on %llu threads in %.2f s: "
               "%.0f images/s, %.1f Mpixel/s, %.1f MB/s of JPEG\n",
               (unsigned long long)r->images, (unsigned long long)r->files, passes,
               (unsigned long long)o->threads, r->seconds, (double)r->images / r->seconds,
               (double)r->pixels / r->seconds / 1e6, (double)r->bytes / r->seconds / 1e6);
        if (z)
            printf("decode + resize to %llu%s: %llu images in %.2f s: %.0f images/s, %.2f of "
                   "the plain decode\n",
                   (unsigned long long)o->size, o->center_crop ? " (center crop)" : "",
                   (unsigned long long)z->images, z->seconds, (double)z->images / z->seconds,
                   ((double)z->images / z->seconds) / ((double)r->images / r->seconds));
        return;
    }
    tool_json j;
    tool_json_init(&j, stdout);
    tool_json_object_begin(&j, NULL);
    tool_json_str(&j, "command", "decode");
    tool_json_str(&j, "source", o->source);
    tool_json_u64(&j, "files", r->files);
    tool_json_u64(&j, "file_bytes", r->file_bytes);
    tool_json_u64(&j, "images", r->images);
    tool_json_f64(&j, "passes", passes);
    tool_json_u64(&j, "threads", o->threads);
    tool_json_f64(&j, "seconds", r->seconds);
    tool_json_f64(&j, "images_per_s", (double)r->images / r->seconds);
    tool_json_f64(&j, "megapixels_per_s", (double)r->pixels / r->seconds / 1e6);
    tool_json_f64(&j, "mbytes_per_s", (double)r->bytes / r->seconds / 1e6);
    /* CPU time of the decoding threads per image: on a loaded machine a steadier cost than
     * threads / images_per_s. */
    tool_json_f64(&j, "cpu_ms_per_image", 1e3 * r->cpu_s / (double)r->images);
    if (z) {
        /* The builder's ceiling, measured right after the plain decode on the same files. */
        tool_json_u64(&j, "size", o->size);
        tool_json_u64(&j, "center_crop", (uint64_t)o->center_crop);
        tool_json_u64(&j, "resize_images", z->images);
        tool_json_f64(&j, "resize_seconds", z->seconds);
        tool_json_f64(&j, "resize_images_per_s", (double)z->images / z->seconds);
        tool_json_f64(&j, "resize_cpu_ms_per_image", 1e3 * z->cpu_s / (double)z->images);
    }
    tool_json_object_end(&j);
    tool_json_finish(&j);
}

int bench_cmd_decode(int argc, char **argv)
{
    decode_opts o;
    const int prc = parse_decode(argc, argv, &o);
    if (prc != 0)
        return prc == 1 ? 0 : prc;
    bench_jpeg_set set;
    if (bench_jpeg_set_load(&set, o.source, o.limit) != 0)
        return 1;
    decode_result r, z;
    int status = measure_decode(&o, &set, 0, &r);
    if (status == 0 && o.size)
        status = measure_decode(&o, &set, (uint32_t)o.size, &z);
    if (status == 0)
        print_decode(&o, &r, o.size ? &z : NULL);
    bench_jpeg_set_free(&set);
    return status == 0 ? 0 : 1;
}
