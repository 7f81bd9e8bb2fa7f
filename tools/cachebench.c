/*
 * cachebench: throughput of the loader, measured against the machine's memcpy
 * ceiling and against decoding the JPEGs every epoch, in one process and one
 * run (docs/BENCHMARKS.md).
 *
 *   cachebench decode SOURCE --threads T [--json] [--limit N]
 *   cachebench load STORE --batch B --threads T ... [--jpeg-dir DIR] [--json]
 *
 * The machines this runs on are shared and noisy, so every absolute figure is
 * reported next to a reference measured seconds apart on the same threads:
 * the loader's bytes per second over a plain memcpy of the same bytes, and its
 * samples per second over the decode-every-epoch path. Those ratios are what
 * docs/BENCHMARKS.md quotes.
 *
 * Uses only the public headers and tools/toolutil.h.
 */
#include "toolutil.h"

#include <dlcache/image.h>
#include <dlcache/loader.h>
#include <dlcache/store.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define TOOL "cachebench"

/* Each time-based measurement runs at least this long by default: long
 * enough that thread start, the first page faults and one slow batch are a
 * small part of the window, short enough for a sweep over thread counts. */
#define DEFAULT_MIN_SECONDS 2.0

static void usage(FILE *out)
{
    fputs("usage: cachebench decode SOURCE [--threads T] [--limit N] [--seconds S] [--json]\n"
          "       cachebench load STORE [options] [--json]\n"
          "\n"
          "decode: plain libjpeg-turbo decode at full size of every JPEG under SOURCE (an\n"
          "  ImageFolder tree or any directory of .jpg files, searched recursively and\n"
          "  sorted), on T threads with one codec each. Files are read into memory first\n"
          "  (not timed); passes over all images repeat until S seconds (default 2) have\n"
          "  passed. This is the reference the builder's images/s is compared with.\n"
          "\n"
          "load: in one run, (1) the memcpy ceiling: T threads copy sample-sized blocks from a\n"
          "  buffer larger than the last-level cache into batch-sized destinations, (2) the\n"
          "  loader's samples/s and GB/s of output, (3) with --jpeg-dir, the decode-every-\n"
          "  epoch path: decode + resize to the store's size + crop + flip + convert into a\n"
          "  batch, on the same T threads. Options:\n"
          "  --batch B            samples per batch (default 256)\n"
          "  --threads T          worker threads for all three (default: all cores)\n"
          "  --prefetch P         batches in flight (default 4)\n"
          "  --crop C             output C x C (default 224; 0 = the store's size)\n"
          "  --random-resized-crop  RandomResizedCrop(C) instead of a random C x C crop\n"
          "  --flip P             horizontal flip probability (default 0.5)\n"
          "  --dtype uint8|float32|float16  (default uint8; floats are normalized NCHW)\n"
          "  --seed S --epoch E   sampler seed and first epoch (default 0, 0)\n"
          "  --epochs K | --batches K  measure exactly K epochs or K batches after the\n"
          "                       warm-up batch (default: as many as fit in S seconds)\n"
          "  --seconds S          length of each time-based window (default 2)\n"
          "  --io auto|mmap|direct  how the loader reads records (default auto)\n"
          "  --rank R --world-size W  read rank R's shard of W\n"
          "  --device N           CUDA device for the loader (host batches in a CPU build)\n"
          "  --jpeg-dir DIR       the JPEGs the store was built from: also time the\n"
          "                       decode-every-epoch path and report the loader's speed-up\n"
          "  --digest | --no-digest  hash every delivered batch (default: on with\n"
          "                       --epochs/--batches, where the run length is fixed)\n"
          "  --no-prewarm         do not read the store into the page cache first\n"
          "  --json               print one JSON object on stdout\n",
          out);
}

/* ---- Small helpers --------------------------------------------------------------------------- */

static int online_cpus(void)
{
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void *xaligned(size_t size)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, size ? size : 64) != 0)
        return NULL;
    return p;
}

/* splitmix64's finalizer: a counter-based generator for the JPEG path's crop
 * and flip choices and the ceiling's block order. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

typedef struct rng {
    uint64_t key;
    uint64_t n;
} rng;

static double rng_uniform(rng *r) /* [0, 1) */
{
    return (double)(mix64(r->key + r->n++) >> 11) * 0x1.0p-53;
}

static uint32_t rng_below(rng *r, uint32_t bound) /* [0, bound]; bound inclusive */
{
    return (uint32_t)(rng_uniform(r) * ((double)bound + 1.0));
}

/* Bytes of resident and anonymous memory of this process now (not the peak):
 * the file-backed part of the store's map is shared page cache, the
 * anonymous part is what the loader itself allocated. */
static void memory_now(uint64_t *rss, uint64_t *anon)
{
    *rss = 0;
    *anon = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
            *rss = (uint64_t)kb * 1024;
        else if (sscanf(line, "RssAnon: %llu kB", &kb) == 1)
            *anon = (uint64_t)kb * 1024;
    }
    fclose(f);
}

/* A start line for worker threads, so that the clock starts when all of
 * them are ready rather than while the last one is still being created. */
typedef struct bench_sync {
    pthread_barrier_t start;
    atomic_int stop;   /* set by the main thread when the window is over */
    atomic_int failed; /* a worker hit an error and reported it */
    double t0;         /* dlc__now_s() when the window opened */
} bench_sync;

/* Start @p n threads running @p fn on args[i], open the window when all are
 * ready, let it run @p seconds (0: until the workers stop by themselves),
 * and return the window's length. */
static double run_window(int n, void *(*fn)(void *), void *args, size_t arg_size, bench_sync *sync,
                         double seconds)
{
    pthread_t *tids = calloc((size_t)n, sizeof *tids);
    if (!tids) {
        fprintf(stderr, TOOL ": error: out of memory\n");
        exit(1);
    }
    pthread_barrier_init(&sync->start, NULL, (unsigned)n + 1);
    atomic_store(&sync->stop, 0);
    sync->t0 = 0;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&tids[i], NULL, fn, (char *)args + (size_t)i * arg_size) != 0) {
            fprintf(stderr, TOOL ": error: cannot start thread %d\n", i);
            exit(1);
        }
    }
    sync->t0 = dlc__now_s();
    pthread_barrier_wait(&sync->start);
    if (seconds > 0) {
        /* Sleep in short steps so a failing worker ends the window early. */
        while (!atomic_load(&sync->failed)) {
            const double left = sync->t0 + seconds - dlc__now_s();
            if (left <= 0)
                break;
            usleep(left > 0.05 ? 50000 : (useconds_t)(left * 1e6) + 1);
        }
        atomic_store(&sync->stop, 1);
    }
    for (int i = 0; i < n; i++)
        pthread_join(tids[i], NULL);
    const double elapsed = dlc__now_s() - sync->t0;
    pthread_barrier_destroy(&sync->start);
    free(tids);
    return elapsed;
}

/* ---- JPEG files in memory ---------------------------------------------------------------------
 */

typedef struct jpeg_file {
    char *path;    /* full path, for error messages */
    uint8_t *data; /* whole file */
    size_t size;
    int64_t label; /* index of the top-level folder, ImageFolder style */
} jpeg_file;

typedef struct jpeg_set {
    jpeg_file *files;
    size_t count, cap;
    uint64_t bytes;
} jpeg_set;

static int is_jpeg_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Append every JPEG under @p dir to @p set, in sorted order at each level so
 * that the list (and the labels) do not depend on readdir's order. */
static int scan_dir(jpeg_set *set, const char *dir, int64_t label)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, TOOL ": error: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **grown = realloc(names, cap * sizeof *names);
            if (!grown) {
                rc = -1;
                break;
            }
            names = grown;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc == 0)
        qsort(names, n, sizeof *names, cmp_str);
    /* At the top level (label < 0) each folder is a class, numbered like
     * torchvision's ImageFolder numbers sorted class folders; files lying at
     * the top level get label 0. */
    int64_t next_class = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *path = malloc(len);
        if (!path) {
            rc = -1;
            break;
        }
        snprintf(path, len, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) != 0) {
            fprintf(stderr, TOOL ": error: %s: %s\n", path, strerror(errno));
            free(path);
            rc = -1;
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            rc = scan_dir(set, path, label < 0 ? next_class++ : label);
            free(path);
        } else if (S_ISREG(st.st_mode) && is_jpeg_name(names[i])) {
            if (set->count == set->cap) {
                set->cap = set->cap ? set->cap * 2 : 1024;
                jpeg_file *grown = realloc(set->files, set->cap * sizeof *grown);
                if (!grown) {
                    free(path);
                    rc = -1;
                    break;
                }
                set->files = grown;
            }
            set->files[set->count++] = (jpeg_file){
                .path = path, .size = (size_t)st.st_size, .label = label < 0 ? 0 : label};
        } else {
            free(path);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (rc != 0 && errno == ENOMEM)
        fprintf(stderr, TOOL ": error: out of memory while listing %s\n", dir);
    return rc;
}

static void jpeg_set_free(jpeg_set *set)
{
    for (size_t i = 0; i < set->count; i++) {
        free(set->files[i].path);
        free(set->files[i].data);
    }
    free(set->files);
    memset(set, 0, sizeof *set);
}

/* List and read the JPEGs under @p dir (at most @p limit when non-zero). */
static int jpeg_set_load(jpeg_set *set, const char *dir, uint64_t limit)
{
    memset(set, 0, sizeof *set);
    if (scan_dir(set, dir, -1) != 0)
        return -1;
    if (set->count == 0) {
        fprintf(stderr, TOOL ": error: %s: no .jpg or .jpeg file found\n", dir);
        return -1;
    }
    if (limit && set->count > limit) {
        for (size_t i = limit; i < set->count; i++)
            free(set->files[i].path);
        set->count = limit;
    }
    for (size_t i = 0; i < set->count; i++) {
        jpeg_file *f = &set->files[i];
        const int fd = open(f->path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, TOOL ": error: %s: %s\n", f->path, strerror(errno));
            return -1;
        }
        f->data = malloc(f->size ? f->size : 1);
        size_t got = 0;
        while (f->data && got < f->size) {
            const ssize_t r = read(fd, f->data + got, f->size - got);
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        close(fd);
        if (!f->data || got != f->size) {
            fprintf(stderr, TOOL ": error: %s: %s\n", f->path,
                    f->data ? "short read (did the file change?)" : "out of memory");
            return -1;
        }
        set->bytes += f->size;
    }
    return 0;
}

/* ---- decode ---------------------------------------------------------------------------------- */

typedef struct decode_shared {
    const jpeg_set *set;
    bench_sync sync;
    double min_seconds;
    atomic_uint_fast64_t next;  /* next image number; image = number % count */
    atomic_uint_fast64_t limit; /* numbers from here on are not decoded */
} decode_shared;

typedef struct decode_arg {
    decode_shared *sh;
    uint64_t images, pixels, bytes;
} decode_arg;

static void *decode_worker(void *p)
{
    decode_arg *a = p;
    decode_shared *sh = a->sh;
    const uint64_t n = sh->set->count;
    dlc_codec *codec = NULL;
    const dlc_status crc = dlc_codec_create(&codec);
    pthread_barrier_wait(&sh->sync.start);
    if (crc != DLC_OK) {
        tool_report(TOOL, crc, "creating a codec");
        atomic_store(&sh->sync.failed, 1);
        return NULL;
    }
    for (;;) {
        const uint64_t k = atomic_fetch_add(&sh->next, 1);
        if (k >= atomic_load(&sh->limit) || atomic_load(&sh->sync.failed))
            break;
        /* Passes are whole: the window may only close where a pass begins, so
         * that every image weighs the same in the result. */
        if (k % n == 0 && k > 0 && dlc__now_s() - sh->sync.t0 >= sh->min_seconds) {
            uint_fast64_t cur = atomic_load(&sh->limit);
            while (k < cur && !atomic_compare_exchange_weak(&sh->limit, &cur, k)) {
            }
            break;
        }
        const jpeg_file *f = &sh->set->files[k % n];
        dlc_image img;
        const dlc_status rc = dlc_jpeg_decode(codec, f->data, f->size, 0, 0, &img);
        if (rc != DLC_OK) {
            tool_report(TOOL, rc, f->path);
            atomic_store(&sh->sync.failed, 1);
            break;
        }
        a->images++;
        a->pixels += (uint64_t)img.width * img.height;
        a->bytes += f->size;
    }
    dlc_codec_destroy(codec);
    return NULL;
}

static int cmd_decode(int argc, char **argv)
{
    const char *source = NULL;
    uint64_t threads = (uint64_t)online_cpus(), limit = 0;
    double seconds = DEFAULT_MIN_SECONDS;
    int json = 0;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--json")) {
            json = 1;
        } else if (!strcmp(o, "--threads") && v) {
            if (tool_parse_u64(v, 4096, &threads) != 0)
                goto bad_value;
            i++;
        } else if (!strcmp(o, "--limit") && v) {
            if (tool_parse_u64(v, UINT64_MAX, &limit) != 0)
                goto bad_value;
            i++;
        } else if (!strcmp(o, "--seconds") && v) {
            char *end;
            seconds = strtod(v, &end);
            if (*end || !(seconds > 0))
                goto bad_value;
            i++;
        } else if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        } else if (o[0] != '-' && !source) {
            source = o;
        } else {
            fprintf(stderr, TOOL ": error: decode: unknown option or missing value: %s\n", o);
            return 2;
        }
        continue;
    bad_value:
        fprintf(stderr, TOOL ": error: decode: bad value for %s: %s\n", o, v);
        return 2;
    }
    if (!source) {
        fprintf(stderr, TOOL ": error: decode: missing SOURCE\n");
        usage(stderr);
        return 2;
    }
    if (threads == 0)
        threads = (uint64_t)online_cpus();

    jpeg_set set;
    if (jpeg_set_load(&set, source, limit) != 0) {
        jpeg_set_free(&set);
        return 1;
    }
    decode_shared sh = {.set = &set, .min_seconds = seconds};
    atomic_init(&sh.next, 0);
    atomic_init(&sh.limit, UINT64_MAX);
    atomic_init(&sh.sync.failed, 0);
    decode_arg *args = calloc(threads, sizeof *args);
    if (!args) {
        jpeg_set_free(&set);
        fprintf(stderr, TOOL ": error: out of memory\n");
        return 1;
    }
    for (uint64_t t = 0; t < threads; t++)
        args[t].sh = &sh;
    const double elapsed = run_window((int)threads, decode_worker, args, sizeof *args, &sh.sync, 0);
    uint64_t images = 0, pixels = 0, bytes = 0;
    for (uint64_t t = 0; t < threads; t++) {
        images += args[t].images;
        pixels += args[t].pixels;
        bytes += args[t].bytes;
    }
    free(args);
    const int failed = atomic_load(&sh.sync.failed);
    const uint64_t files = set.count, file_bytes = set.bytes;
    jpeg_set_free(&set);
    if (failed)
        return 1;

    if (json) {
        tool_json j;
        tool_json_init(&j, stdout);
        tool_json_object_begin(&j, NULL);
        tool_json_str(&j, "command", "decode");
        tool_json_str(&j, "source", source);
        tool_json_u64(&j, "files", files);
        tool_json_u64(&j, "file_bytes", file_bytes);
        tool_json_u64(&j, "images", images);
        tool_json_f64(&j, "passes", (double)images / (double)files);
        tool_json_u64(&j, "threads", threads);
        tool_json_f64(&j, "seconds", elapsed);
        tool_json_f64(&j, "images_per_s", (double)images / elapsed);
        tool_json_f64(&j, "megapixels_per_s", (double)pixels / elapsed / 1e6);
        tool_json_f64(&j, "mbytes_per_s", (double)bytes / elapsed / 1e6);
        tool_json_object_end(&j);
        tool_json_finish(&j);
    } else {
        printf("decode: %llu images (%llu files, %.1f passes) on %llu threads in %.2f s: "
               "%.0f images/s, %.1f Mpixel/s, %.1f MB/s of JPEG\n",
               (unsigned long long)images, (unsigned long long)files,
               (double)images / (double)files, (unsigned long long)threads, elapsed,
               (double)images / elapsed, (double)pixels / elapsed / 1e6,
               (double)bytes / elapsed / 1e6);
    }
    return 0;
}

/* ---- load: the memcpy ceiling ---------------------------------------------------------------- */

typedef struct ceiling_shared {
    bench_sync sync;
    const uint8_t *src;
    size_t slots;        /* sample-sized blocks in src */
    size_t slot_stride;  /* bytes between blocks (sample bytes rounded up to 64) */
    size_t sample_bytes; /* bytes copied per sample */
    uint32_t batch;
} ceiling_shared;

typedef struct ceiling_arg {
    ceiling_shared *sh;
    uint8_t *dst; /* one batch */
    uint64_t seed;
    uint64_t samples;
} ceiling_arg;

static void *ceiling_worker(void *p)
{
    ceiling_arg *a = p;
    const ceiling_shared *sh = a->sh;
    rng r = {.key = mix64(a->seed), .n = 0};
    pthread_barrier_wait(&a->sh->sync.start);
    /* The stop flag is read once a batch, like the loader's workers look for
     * new work once a sample at most; blocks come from random places in a
     * buffer larger than the last-level cache, as records do from the map. */
    while (!atomic_load_explicit(&a->sh->sync.stop, memory_order_relaxed)) {
        for (uint32_t i = 0; i < sh->batch; i++) {
            const size_t slot = (size_t)(mix64(r.key + r.n++) % sh->slots);
            memcpy(a->dst + (size_t)i * sh->sample_bytes, sh->src + slot * sh->slot_stride,
                   sh->sample_bytes);
        }
        a->samples += sh->batch;
    }
    return NULL;
}

/* Size of the ceiling's source buffer: twice the last-level cache so that
 * copies come from memory, never less than 256 MiB, at most 1 GiB. */
static size_t ceiling_source_bytes(void)
{
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0)
        llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    size_t want = llc > 0 ? (size_t)llc * 2 : 0;
    if (want < ((size_t)256 << 20))
        want = (size_t)256 << 20;
    if (want > ((size_t)1 << 30))
        want = (size_t)1 << 30;
    return want;
}

/* The ceiling's buffers, made once and used for the windows before and
 * after the loader. */
typedef struct ceiling {
    ceiling_shared sh;
    ceiling_arg *args;
    uint8_t *src;
    size_t src_bytes;
    int threads;
} ceiling;

static void ceiling_free(ceiling *c)
{
    if (c->args)
        for (int t = 0; t < c->threads; t++)
            free(c->args[t].dst);
    free(c->args);
    free(c->src);
    memset(c, 0, sizeof *c);
}

static int ceiling_setup(ceiling *c, int threads, uint32_t batch, size_t sample_bytes)
{
    memset(c, 0, sizeof *c);
    const size_t stride = (sample_bytes + 63) & ~(size_t)63;
    c->threads = threads;
    c->src_bytes = ceiling_source_bytes();
    if (c->src_bytes < stride * 4)
        c->src_bytes = stride * 4;
    c->src = xaligned(c->src_bytes);
    c->args = calloc((size_t)threads, sizeof *c->args);
    if (!c->src || !c->args)
        goto oom;
    /* Touch every page now so that page faults are not timed, with bytes
     * that are not all zero (no zero-page tricks). */
    for (size_t i = 0; i < c->src_bytes; i += 8) {
        const uint64_t v = mix64(i);
        memcpy(c->src + i, &v, c->src_bytes - i < 8 ? c->src_bytes - i : 8);
    }
    c->sh = (ceiling_shared){.src = c->src,
                             .slots = c->src_bytes / stride,
                             .slot_stride = stride,
                             .sample_bytes = sample_bytes,
                             .batch = batch};
    atomic_init(&c->sh.sync.failed, 0);
    for (int t = 0; t < threads; t++) {
        c->args[t].sh = &c->sh;
        c->args[t].seed = 0x5eed0000u + (uint64_t)t;
        c->args[t].dst = xaligned((size_t)batch * sample_bytes);
        if (!c->args[t].dst)
            goto oom;
        memset(c->args[t].dst, 1, (size_t)batch * sample_bytes);
    }
    return 0;
oom:
    fprintf(stderr, TOOL ": error: out of memory for the memcpy ceiling\n");
    ceiling_free(c);
    return -1;
}

typedef struct ceiling_result {
    double seconds;
    uint64_t samples;
    double gbytes_per_s;
} ceiling_result;

static void ceiling_run(ceiling *c, double seconds, ceiling_result *res)
{
    for (int t = 0; t < c->threads; t++)
        c->args[t].samples = 0;
    res->seconds =
        run_window(c->threads, ceiling_worker, c->args, sizeof *c->args, &c->sh.sync, seconds);
    res->samples = 0;
    for (int t = 0; t < c->threads; t++)
        res->samples += c->args[t].samples;
    res->gbytes_per_s = (double)res->samples * (double)c->sh.sample_bytes / res->seconds / 1e9;
}

/* ---- load: the decode-every-epoch path ------------------------------------------------------- */

/* IEEE half from float, round to nearest even (the same result as a
 * hardware conversion), without relying on _Float16 support. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) /* Inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0));
    if (x >= 0x477ff000u) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (x < 0x38800000u) { /* subnormal half or zero */
        if (x < 0x33000000u)
            return (uint16_t)sign;
        const uint32_t m = (x & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - (x >> 23);
        const uint32_t half = m >> shift;
        const uint32_t rest = m & ((1u << shift) - 1u);
        const uint32_t mid = 1u << (shift - 1u);
        return (uint16_t)(sign | (half + (rest > mid || (rest == mid && (half & 1u)))));
    }
    const uint32_t base = ((x >> 13) - (112u << 10)) & 0xffffu;
    const uint32_t rest = x & 0x1fffu;
    return (uint16_t)(sign | (base + (rest > 0x1000u || (rest == 0x1000u && (base & 1u)))));
}

typedef struct jpeg_shared {
    bench_sync sync;
    const jpeg_set *set;
    const uint32_t *order; /* a shuffled order of the files */
    uint32_t store_side;   /* decode_resize target (the store's square size) */
    uint32_t crop;         /* output crop x crop */
    uint32_t batch;
    uint32_t dtype;
    int rrc;
    float rrc_scale[2], rrc_ratio[2];
    float flip_prob;
    uint64_t seed, epoch;
    size_t sample_bytes;
    float lut_f32[3][256]; /* normalized value of each pixel value per channel */
    uint16_t lut_f16[3][256];
    atomic_uint_fast64_t next;
} jpeg_shared;

typedef struct jpeg_arg {
    jpeg_shared *sh;
    dlc_codec *codec; /* this thread's; made at setup so that no window times its creation */
    uint8_t *batch;   /* batch x sample_bytes */
    int64_t *labels;  /* batch */
    uint8_t *tmp;     /* crop x crop x 3: the resized crop before flip/convert */
    void *scratch;    /* dlc_resize() scratch */
    size_t scratch_size;
    uint64_t samples;
} jpeg_arg;

/* torchvision's RandomResizedCrop.get_params on a w x h image. */
static void rrc_params(rng *r, const jpeg_shared *sh, uint32_t w, uint32_t h, double *x, double *y,
                       double *cw, double *ch)
{
    const double area = (double)w * h;
    const double lr0 = log(sh->rrc_ratio[0]), lr1 = log(sh->rrc_ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
        const double target =
            area * (sh->rrc_scale[0] + (sh->rrc_scale[1] - sh->rrc_scale[0]) * rng_uniform(r));
        const double aspect = exp(lr0 + (lr1 - lr0) * rng_uniform(r));
        const double tw = round(sqrt(target * aspect)), th = round(sqrt(target / aspect));
        if (tw > 0 && tw <= w && th > 0 && th <= h) {
            *y = rng_below(r, (uint32_t)(h - th));
            *x = rng_below(r, (uint32_t)(w - tw));
            *cw = tw;
            *ch = th;
            return;
        }
    }
    const double in_ratio = (double)w / h;
    double tw = w, th = h;
    if (in_ratio < sh->rrc_ratio[0])
        th = round(tw / sh->rrc_ratio[0]);
    else if (in_ratio > sh->rrc_ratio[1])
        tw = round(th * sh->rrc_ratio[1]);
    *x = floor((w - tw) / 2);
    *y = floor((h - th) / 2);
    *cw = tw;
    *ch = th;
}

/* Write the crop x crop RGB region at @p px (row stride @p stride) into
 * @p out in the batch's dtype and layout, mirrored when @p flip. */
static void emit_sample(const jpeg_shared *sh, const uint8_t *px, size_t stride, int flip,
                        uint8_t *out)
{
    const uint32_t c = sh->crop;
    if (sh->dtype == DLC_DTYPE_UINT8) {
        for (uint32_t yy = 0; yy < c; yy++) {
            const uint8_t *row = px + yy * stride;
            uint8_t *o = out + (size_t)yy * c * 3;
            if (!flip) {
                memcpy(o, row, (size_t)c * 3);
            } else {
                for (uint32_t xx = 0; xx < c; xx++)
                    memcpy(o + (size_t)xx * 3, row + (size_t)(c - 1 - xx) * 3, 3);
            }
        }
        return;
    }
    const size_t plane = (size_t)c * c;
    for (uint32_t yy = 0; yy < c; yy++) {
        const uint8_t *row = px + yy * stride;
        for (uint32_t xx = 0; xx < c; xx++) {
            const uint8_t *s = row + (size_t)(flip ? c - 1 - xx : xx) * 3;
            const size_t at = (size_t)yy * c + xx;
            if (sh->dtype == DLC_DTYPE_FLOAT32) {
                float *o = (float *)(void *)out;
                o[at] = sh->lut_f32[0][s[0]];
                o[plane + at] = sh->lut_f32[1][s[1]];
                o[2 * plane + at] = sh->lut_f32[2][s[2]];
            } else {
                uint16_t *o = (uint16_t *)(void *)out;
                o[at] = sh->lut_f16[0][s[0]];
                o[plane + at] = sh->lut_f16[1][s[1]];
                o[2 * plane + at] = sh->lut_f16[2][s[2]];
            }
        }
    }
}

static void *jpeg_worker(void *p)
{
    jpeg_arg *a = p;
    jpeg_shared *sh = a->sh;
    const uint64_t n = sh->set->count;
    dlc_codec *codec = a->codec;
    pthread_barrier_wait(&sh->sync.start);
    while (!atomic_load_explicit(&sh->sync.stop, memory_order_relaxed)) {
        const uint64_t k = atomic_fetch_add(&sh->next, 1);
        const uint64_t epoch = sh->epoch + k / n;
        const jpeg_file *f = &sh->set->files[sh->order[k % n]];
        /* The same heavy transform as the builder, every epoch: decode, resize
         * the shorter side to the store's size, center crop. */
        dlc_image img;
        dlc_status rc = dlc_jpeg_decode_resize(codec, f->data, f->size, sh->store_side, 1, &img);
        if (rc == DLC_OK && (img.width < sh->crop || img.height < sh->crop))
            rc = DLC_EINVAL;
        if (rc != DLC_OK) {
            tool_report(TOOL, rc, f->path);
            atomic_store(&sh->sync.failed, 1);
            break;
        }
        rng r = {.key = mix64(sh->seed ^ mix64(epoch ^ mix64(k % n))), .n = 0};
        const uint32_t slot = (uint32_t)(a->samples % sh->batch);
        uint8_t *out = a->batch + (size_t)slot * sh->sample_bytes;
        if (sh->rrc) {
            double x, y, w, h;
            rrc_params(&r, sh, img.width, img.height, &x, &y, &w, &h);
            const dlc_image dst = {.data = a->tmp,
                                   .width = sh->crop,
                                   .height = sh->crop,
                                   .channels = 3,
                                   .stride = (size_t)sh->crop * 3};
            rc = dlc_resize(&img, x, y, w, h, &dst, a->scratch, a->scratch_size);
            if (rc != DLC_OK) {
                tool_report(TOOL, rc, f->path);
                atomic_store(&sh->sync.failed, 1);
                break;
            }
            emit_sample(sh, a->tmp, dst.stride, rng_uniform(&r) < sh->flip_prob, out);
        } else {
            const uint32_t y0 = rng_below(&r, img.height - sh->crop);
            const uint32_t x0 = rng_below(&r, img.width - sh->crop);
            emit_sample(sh, img.data + (size_t)y0 * img.stride + (size_t)x0 * 3, img.stride,
                        rng_uniform(&r) < sh->flip_prob, out);
        }
        a->labels[slot] = f->label;
        a->samples++;
    }
    return NULL;
}

typedef struct jpeg_result {
    double seconds;
    uint64_t samples;
} jpeg_result;

/* The JPEG path's files and buffers, made once and used for the windows
 * before and after the loader. */
typedef struct jpeg_bench {
    jpeg_set set;
    jpeg_shared *sh;
    jpeg_arg *args;
    uint32_t *order;
    int threads;
} jpeg_bench;

static void jpeg_bench_free(jpeg_bench *jb)
{
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
    jpeg_set_free(&jb->set);
    memset(jb, 0, sizeof *jb);
}

static int jpeg_bench_setup(jpeg_bench *jb, const char *dir, int threads,
                            const dlc_loader_config *cfg, uint32_t store_side, size_t sample_bytes)
{
    memset(jb, 0, sizeof *jb);
    jb->threads = threads;
    if (jpeg_set_load(&jb->set, dir, 0) != 0)
        goto fail;
    if (jb->set.count > UINT32_MAX) {
        fprintf(stderr, TOOL ": error: %s: too many files\n", dir);
        goto fail;
    }
    jpeg_shared *sh = jb->sh = calloc(1, sizeof *sh);
    jb->args = calloc((size_t)threads, sizeof *jb->args);
    uint32_t *order = jb->order = malloc(jb->set.count * sizeof *order);
    if (!sh || !jb->args || !order)
        goto oom;
    /* A shuffled order, as a training epoch reads the files. */
    for (size_t i = 0; i < jb->set.count; i++)
        order[i] = (uint32_t)i;
    for (size_t i = jb->set.count - 1; i > 0; i--) {
        const size_t j = (size_t)(mix64(cfg->seed ^ i) % (i + 1));
        const uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    sh->set = &jb->set;
    sh->order = order;
    sh->store_side = store_side;
    sh->crop = cfg->crop_h;
    sh->batch = cfg->batch_size;
    sh->dtype = cfg->dtype;
    sh->rrc = cfg->augment == DLC_AUGMENT_RANDOM_RESIZED_CROP;
    memcpy(sh->rrc_scale, cfg->rrc_scale, sizeof sh->rrc_scale);
    memcpy(sh->rrc_ratio, cfg->rrc_ratio, sizeof sh->rrc_ratio);
    sh->flip_prob = cfg->flip_prob;
    sh->seed = cfg->seed;
    sh->epoch = cfg->epoch;
    sh->sample_bytes = sample_bytes;
    for (int c = 0; c < 3; c++) {
        for (int v = 0; v < 256; v++) {
            const float x = ((float)v / 255.0f - cfg->mean[c]) / cfg->std[c];
            sh->lut_f32[c][v] = x;
            sh->lut_f16[c][v] = f32_to_f16(x);
        }
    }
    atomic_init(&sh->next, 0);
    atomic_init(&sh->sync.failed, 0);
    const size_t scratch = dlc_resize_scratch_bound(store_side, store_side, sh->crop, sh->crop, 3);
    for (int t = 0; t < threads; t++) {
        jpeg_arg *a = &jb->args[t];
        a->sh = sh;
        const dlc_status rc = dlc_codec_create(&a->codec);
        if (rc != DLC_OK) {
            tool_report(TOOL, rc, "creating a codec");
            goto fail;
        }
        a->batch = xaligned((size_t)sh->batch * sample_bytes);
        a->labels = calloc(sh->batch, sizeof *a->labels);
        a->tmp = xaligned((size_t)sh->crop * sh->crop * 3);
        a->scratch = xaligned(scratch);
        a->scratch_size = scratch;
        if (!a->batch || !a->labels || !a->tmp || !a->scratch)
            goto oom;
        memset(a->batch, 0, (size_t)sh->batch * sample_bytes);
    }
    return 0;
oom:
    fprintf(stderr, TOOL ": error: out of memory for the JPEG path\n");
fail:
    jpeg_bench_free(jb);
    return -1;
}

/* One window of the JPEG path; the files' order continues from the last. */
static int jpeg_bench_run(jpeg_bench *jb, double seconds, jpeg_result *res)
{
    for (int t = 0; t < jb->threads; t++)
        jb->args[t].samples = 0;
    res->seconds =
        run_window(jb->threads, jpeg_worker, jb->args, sizeof *jb->args, &jb->sh->sync, seconds);
    res->samples = 0;
    for (int t = 0; t < jb->threads; t++)
        res->samples += jb->args[t].samples;
    return atomic_load(&jb->sh->sync.failed) ? -1 : 0;
}

/* ---- load: the loader ------------------------------------------------------------------------ */

static void log_to_stderr(void *user, dlc_log_level level, const char *msg)
{
    (void)user;
    static const char *const names[] = {"debug", "info", "warning"};
    if (level == DLC_LOG_DEBUG && !getenv("CACHEBENCH_DEBUG"))
        return;
    fprintf(stderr, TOOL ": loader %s: %s\n", names[level <= DLC_LOG_WARN ? level : 0], msg);
}

static const char *dtype_name(uint32_t dtype)
{
    return dtype == DLC_DTYPE_FLOAT32   ? "float32"
           : dtype == DLC_DTYPE_FLOAT16 ? "float16"
                                        : "uint8";
}

static const char *io_name(uint32_t io)
{
    return io == DLC_IO_MMAP ? "mmap" : io == DLC_IO_DIRECT ? "direct" : "auto";
}

/* Read the store file once, unless it is resident already, so that the
 * loader is measured at memory speed rather than at the disk's (the store
 * lives on local SSD and in the page cache in the steady state README.md
 * describes). Skipped when the file would take more than half the RAM. */
static double prewarm_store(const dlc_store *store, uint64_t *resident_before)
{
    const dlc_store_info *info = dlc_store_get_info(store);
    *resident_before = 0;
    if (dlc_store_resident(store, resident_before) != DLC_OK)
        *resident_before = 0;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (*resident_before >= info->file_bytes ||
        (pages > 0 && page > 0 && info->file_bytes > (uint64_t)pages * (uint64_t)page / 2))
        return 0;
    const double t0 = dlc__now_s();
    const int fd = dlc_store_fd(store);
    const size_t chunk = (size_t)4 << 20;
    uint8_t *buf = malloc(chunk);
    if (!buf)
        return 0;
    for (uint64_t off = 0; off < info->file_bytes; off += chunk) {
        if (pread(fd, buf, chunk, (off_t)off) <= 0)
            break;
    }
    free(buf);
    return dlc__now_s() - t0;
}

typedef struct load_opts {
    const char *store, *jpeg_dir;
    dlc_loader_config cfg;
    uint64_t epochs, batches;
    double seconds;
    int json, digest, prewarm;
} load_opts;

static int parse_u32_opt(const char *v, uint32_t max, uint32_t *out)
{
    uint64_t x;
    if (tool_parse_u64(v, max, &x) != 0)
        return -1;
    *out = (uint32_t)x;
    return 0;
}

static int parse_float_opt(const char *v, float lo, float hi, float *out)
{
    char *end;
    const float x = strtof(v, &end);
    if (!*v || *end || !(x >= lo && x <= hi))
        return -1;
    *out = x;
    return 0;
}

static int parse_load(int argc, char **argv, load_opts *o)
{
    memset(o, 0, sizeof *o);
    dlc_loader_config_init(&o->cfg);
    o->cfg.batch_size = 256;
    o->cfg.threads = (uint32_t)online_cpus();
    o->cfg.crop_h = o->cfg.crop_w = 224;
    o->cfg.augment = DLC_AUGMENT_RANDOM_CROP;
    o->cfg.log = log_to_stderr;
    o->seconds = DEFAULT_MIN_SECONDS;
    o->digest = -1;
    o->prewarm = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0, takes = 1;
        uint32_t u32 = 0;
        if (!strcmp(a, "--json")) {
            o->json = 1, takes = 0;
        } else if (!strcmp(a, "--random-resized-crop")) {
            o->cfg.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP, takes = 0;
        } else if (!strcmp(a, "--digest")) {
            o->digest = 1, takes = 0;
        } else if (!strcmp(a, "--no-digest")) {
            o->digest = 0, takes = 0;
        } else if (!strcmp(a, "--no-prewarm")) {
            o->prewarm = 0, takes = 0;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (a[0] != '-') {
            if (o->store) {
                fprintf(stderr, TOOL ": error: load: more than one STORE: %s\n", a);
                return -1;
            }
            o->store = a, takes = 0;
        } else if (!v) {
            fprintf(stderr, TOOL ": error: load: %s needs a value\n", a);
            return -1;
        } else if (!strcmp(a, "--batch")) {
            bad = parse_u32_opt(v, 1u << 20, &o->cfg.batch_size) || o->cfg.batch_size == 0;
        } else if (!strcmp(a, "--threads")) {
            bad = parse_u32_opt(v, 4096, &o->cfg.threads);
            if (!bad && o->cfg.threads == 0)
                o->cfg.threads = (uint32_t)online_cpus();
        } else if (!strcmp(a, "--prefetch")) {
            bad = parse_u32_opt(v, 1024, &o->cfg.prefetch) || o->cfg.prefetch == 0;
        } else if (!strcmp(a, "--crop")) {
            bad = parse_u32_opt(v, 1u << 16, &u32);
            o->cfg.crop_h = o->cfg.crop_w = u32;
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "uint8"))
                o->cfg.dtype = DLC_DTYPE_UINT8;
            else if (!strcmp(v, "float32"))
                o->cfg.dtype = DLC_DTYPE_FLOAT32;
            else if (!strcmp(v, "float16"))
                o->cfg.dtype = DLC_DTYPE_FLOAT16;
            else
                bad = 1;
        } else if (!strcmp(a, "--io")) {
            if (!strcmp(v, "auto"))
                o->cfg.io = DLC_IO_AUTO;
            else if (!strcmp(v, "mmap"))
                o->cfg.io = DLC_IO_MMAP;
            else if (!strcmp(v, "direct"))
                o->cfg.io = DLC_IO_DIRECT;
            else
                bad = 1;
        } else if (!strcmp(a, "--seed")) {
            bad = tool_parse_u64(v, UINT64_MAX, &o->cfg.seed);
        } else if (!strcmp(a, "--epoch")) {
            bad = tool_parse_u64(v, UINT64_MAX / 2, &o->cfg.epoch);
        } else if (!strcmp(a, "--epochs")) {
            bad = tool_parse_u64(v, 1u << 20, &o->epochs) || o->epochs == 0;
        } else if (!strcmp(a, "--batches")) {
            bad = tool_parse_u64(v, UINT64_MAX / 2, &o->batches) || o->batches == 0;
        } else if (!strcmp(a, "--seconds")) {
            char *end;
            o->seconds = strtod(v, &end);
            bad = *end || !(o->seconds > 0);
        } else if (!strcmp(a, "--rank")) {
            bad = parse_u32_opt(v, UINT32_MAX, &o->cfg.rank);
        } else if (!strcmp(a, "--world-size")) {
            bad = parse_u32_opt(v, UINT32_MAX, &o->cfg.world_size) || o->cfg.world_size == 0;
        } else if (!strcmp(a, "--device")) {
            bad = parse_u32_opt(v, INT32_MAX, &u32);
            o->cfg.device = (int32_t)u32;
        } else if (!strcmp(a, "--flip")) {
            bad = parse_float_opt(v, 0.0f, 1.0f, &o->cfg.flip_prob);
        } else if (!strcmp(a, "--jpeg-dir")) {
            o->jpeg_dir = v;
        } else {
            fprintf(stderr, TOOL ": error: load: unknown option %s (see --help)\n", a);
            return -1;
        }
        if (bad) {
            fprintf(stderr, TOOL ": error: load: bad value for %s: %s\n", a, v);
            return -1;
        }
        i += takes;
    }
    if (!o->store) {
        fprintf(stderr, TOOL ": error: load: missing STORE\n");
        usage(stderr);
        return -1;
    }
    if (o->epochs && o->batches) {
        fprintf(stderr, TOOL ": error: load: give --epochs or --batches, not both\n");
        return -1;
    }
    if (o->cfg.rank >= o->cfg.world_size) {
        fprintf(stderr, TOOL ": error: load: --rank %u is not below --world-size %u\n", o->cfg.rank,
                o->cfg.world_size);
        return -1;
    }
    if (o->digest < 0)
        o->digest = o->epochs || o->batches;
    return 0;
}

typedef struct loader_result {
    double open_seconds, first_batch_seconds, seconds;
    uint64_t warmup_samples; /* the first batch, not timed */
    uint64_t samples, batches, bytes, epochs_done;
    uint64_t digest;
    uint64_t rss_open, anon_open; /* before dlc_loader_open */
    uint64_t rss_first_batch, anon_first_batch, rss_end, anon_end;
    dlc_loader_stats stats;
} loader_result;

static void digest_batch(XXH3_state_t *st, const dlc_batch *b)
{
    XXH3_64bits_update(st, b->data, b->bytes);
    XXH3_64bits_update(st, b->labels, (size_t)b->count * sizeof *b->labels);
}

static int measure_loader(const load_opts *o, loader_result *res)
{
    memset(res, 0, sizeof *res);
    XXH3_state_t *st = NULL;
    if (o->digest) {
        st = XXH3_createState();
        if (!st) {
            fprintf(stderr, TOOL ": error: out of memory\n");
            return -1;
        }
        XXH3_64bits_reset(st);
    }
    dlc_loader *l = NULL;
    dlc_batch b;
    memory_now(&res->rss_open, &res->anon_open);
    const double t0 = dlc__now_s();
    dlc_status rc = dlc_loader_open(o->store, &o->cfg, &l);
    res->open_seconds = dlc__now_s() - t0;
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, "opening the loader");
        goto fail;
    }
    rc = dlc_loader_next(l, &b);
    res->first_batch_seconds = dlc__now_s() - t0;
    if (rc == DLC_END) {
        fprintf(stderr, TOOL ": error: %s: epoch %llu has no batch for rank %u\n", o->store,
                (unsigned long long)o->cfg.epoch, o->cfg.rank);
        goto fail;
    }
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, "first batch");
        goto fail;
    }
    memory_now(&res->rss_first_batch, &res->anon_first_batch);
    if (st)
        digest_batch(st, &b);
    res->warmup_samples = b.count;

    /* The window opens after the warm-up batch: the workers are running and
     * the ring is filling, as in the steady state of a training run. */
    uint64_t epoch = o->cfg.epoch;
    tool_progress prog;
    tool_progress_init(&prog, 4);
    const double w0 = dlc__now_s();
    for (;;) {
        if (o->batches && res->batches >= o->batches)
            break;
        if (!o->batches && !o->epochs && dlc__now_s() - w0 >= o->seconds)
            break;
        rc = dlc_loader_next(l, &b);
        if (rc == DLC_END) {
            res->epochs_done++;
            if (o->epochs && res->epochs_done >= o->epochs)
                break;
            rc = dlc_loader_set_epoch(l, ++epoch);
            if (rc != DLC_OK) {
                tool_report(TOOL, rc, "starting the next epoch");
                goto fail;
            }
            continue;
        }
        if (rc != DLC_OK) {
            tool_report(TOOL, rc, "next batch");
            goto fail;
        }
        if (st)
            digest_batch(st, &b);
        res->batches++;
        res->samples += b.count;
        res->bytes += b.bytes;
        tool_progress_line(&prog, 0, "load: %llu batches, %.0f samples/s",
                           (unsigned long long)res->batches,
                           (double)res->samples / (dlc__now_s() - w0));
    }
    res->seconds = dlc__now_s() - w0;
    tool_progress_end(&prog);
    memory_now(&res->rss_end, &res->anon_end);
    dlc_loader_get_stats(l, &res->stats);
    dlc_loader_close(l);
    if (st) {
        res->digest = XXH3_64bits_digest(st);
        XXH3_freeState(st);
    }
    if (res->batches == 0) {
        fprintf(stderr,
                TOOL ": error: %s: no batch after the warm-up one to time "
                     "(the epoch is one batch long; use a smaller --batch or --epochs 2)\n",
                o->store);
        return -1;
    }
    return 0;
fail:
    dlc_loader_close(l);
    XXH3_freeState(st);
    return -1;
}

static int cmd_load(int argc, char **argv)
{
    load_opts o;
    if (parse_load(argc, argv, &o) != 0)
        return 2;

    /* The store's own metadata gives the sample size for the ceiling and the
     * JPEG path's resize target; its page-cache state is reported. */
    dlc_store *store = NULL;
    dlc_status rc = dlc_store_open(o.store, 0, &store);
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, "opening the store");
        return 1;
    }
    const dlc_store_info info = *dlc_store_get_info(store);
    if (o.cfg.crop_h == 0) {
        if (info.height == 0 || info.width != info.height) {
            fprintf(stderr, TOOL ": error: %s: --crop 0 needs a store of square images\n", o.store);
            dlc_store_close(store);
            return 2;
        }
        o.cfg.crop_h = o.cfg.crop_w = info.height;
    }
    const size_t esize = o.cfg.dtype == DLC_DTYPE_UINT8     ? 1
                         : o.cfg.dtype == DLC_DTYPE_FLOAT16 ? 2
                                                            : 4;
    const size_t sample_bytes = (size_t)o.cfg.crop_h * o.cfg.crop_w * 3 * esize;
    uint64_t resident_before = 0;
    const double prewarm_seconds = o.prewarm ? prewarm_store(store, &resident_before) : 0;
    if (!o.prewarm && dlc_store_resident(store, &resident_before) != DLC_OK)
        resident_before = 0;
    uint64_t resident_after = 0;
    if (dlc_store_resident(store, &resident_after) != DLC_OK)
        resident_after = 0;
    const int threads = (int)o.cfg.threads;
    int status = 1;
    ceiling cl = {0};
    jpeg_bench jb = {0};
    ceiling_result ceil = {0}, ceil_after = {0};
    jpeg_result jr = {0}, jr_after = {0};
    loader_result lr;
    if (o.jpeg_dir) {
        if (info.height == 0 || info.width != info.height) {
            fprintf(stderr,
                    TOOL ": error: %s: the JPEG path needs a store of square images "
                         "(built with a center crop) to know the resize target\n",
                    o.store);
            goto out;
        }
        if (jpeg_bench_setup(&jb, o.jpeg_dir, threads, &o.cfg, info.height, sample_bytes) != 0)
            goto out;
    }
    if (ceiling_setup(&cl, threads, o.cfg.batch_size, sample_bytes) != 0)
        goto out;

    /* The references are measured on both sides of the loader, half their
     * window each, and pooled: on a shared machine the load changes within
     * seconds, and a reference taken on one side only would move the ratio
     * with it. The order is symmetric around the loader. */
    const double half = o.seconds / 2 > 0.5 ? o.seconds / 2 : 0.5;
    if (o.jpeg_dir && jpeg_bench_run(&jb, half, &jr) != 0)
        goto out;
    ceiling_run(&cl, half, &ceil);
    if (measure_loader(&o, &lr) != 0)
        goto out;
    ceiling_run(&cl, half, &ceil_after);
    if (o.jpeg_dir && jpeg_bench_run(&jb, half, &jr_after) != 0)
        goto out;
    const uint64_t jpeg_files = jb.set.count;
    const size_t ceil_source_bytes = cl.src_bytes;
    jpeg_bench_free(&jb);
    ceiling_free(&cl);
    dlc_store_close(store);
    store = NULL;

    const double ceil_before_gbps = ceil.gbytes_per_s;
    ceil.samples += ceil_after.samples;
    ceil.seconds += ceil_after.seconds;
    ceil.gbytes_per_s = (double)ceil.samples * (double)sample_bytes / ceil.seconds / 1e9;
    const double jpeg_before_sps = (double)jr.samples / jr.seconds;
    const double jpeg_after_sps = (double)jr_after.samples / jr_after.seconds;
    jr.samples += jr_after.samples;
    jr.seconds += jr_after.seconds;

    const double sps = (double)lr.samples / lr.seconds;
    const double gbps = (double)lr.bytes / lr.seconds / 1e9;
    const double ceil_sps = (double)ceil.samples / ceil.seconds;
    const double jpeg_sps = o.jpeg_dir ? (double)jr.samples / jr.seconds : NAN;
    if (o.json) {
        tool_json j;
        tool_json_init(&j, stdout);
        tool_json_object_begin(&j, NULL);
        tool_json_str(&j, "command", "load");
        tool_json_str(&j, "store", o.store);
        tool_json_f64(&j, "samples_per_s", sps);
        tool_json_f64(&j, "gbytes_per_s", gbps);
        tool_json_f64(&j, "ceiling_gbytes_per_s", ceil.gbytes_per_s);
        tool_json_f64(&j, "ceiling_samples_per_s", ceil_sps);
        tool_json_f64(&j, "ratio_to_ceiling", gbps / ceil.gbytes_per_s);
        tool_json_f64(&j, "jpeg_samples_per_s", jpeg_sps);
        tool_json_f64(&j, "speedup_vs_jpeg", sps / jpeg_sps);
        tool_json_f64(&j, "open_seconds", lr.open_seconds);
        tool_json_f64(&j, "first_batch_seconds", lr.first_batch_seconds);
        if (o.digest)
            tool_json_hex64(&j, "digest", lr.digest);
        else
            tool_json_str(&j, "digest", NULL);
        /* The configuration, echoed so that a JSON file says what it measured. */
        tool_json_u64(&j, "batch", o.cfg.batch_size);
        tool_json_u64(&j, "threads", o.cfg.threads);
        tool_json_u64(&j, "loader_threads", lr.stats.threads);
        tool_json_u64(&j, "prefetch", o.cfg.prefetch);
        tool_json_u64(&j, "crop", o.cfg.crop_h);
        tool_json_str(&j, "augment",
                      o.cfg.augment == DLC_AUGMENT_RANDOM_RESIZED_CROP ? "random_resized_crop"
                                                                       : "random_crop");
        tool_json_f64(&j, "flip", o.cfg.flip_prob);
        tool_json_str(&j, "dtype", dtype_name(o.cfg.dtype));
        tool_json_u64(&j, "sample_bytes", sample_bytes);
        tool_json_str(&j, "io_requested", io_name(o.cfg.io));
        tool_json_str(&j, "io", io_name(lr.stats.io_mode));
        tool_json_u64(&j, "seed", o.cfg.seed);
        tool_json_u64(&j, "epoch", o.cfg.epoch);
        tool_json_u64(&j, "rank", o.cfg.rank);
        tool_json_u64(&j, "world_size", o.cfg.world_size);
        tool_json_i64(&j, "device", o.cfg.device);
        if (o.epochs)
            tool_json_u64(&j, "epochs", o.epochs);
        else
            tool_json_str(&j, "epochs", NULL);
        if (o.batches)
            tool_json_u64(&j, "batches_requested", o.batches);
        else
            tool_json_str(&j, "batches_requested", NULL);
        /* What the timed window held. */
        tool_json_u64(&j, "batches", lr.batches);
        tool_json_u64(&j, "samples", lr.samples);
        tool_json_u64(&j, "warmup_samples", lr.warmup_samples);
        tool_json_u64(&j, "bytes", lr.bytes);
        tool_json_f64(&j, "seconds", lr.seconds);
        tool_json_bool(&j, "digest_in_window", o.digest);
        tool_json_f64(&j, "wait_seconds", lr.stats.wait_seconds);
        tool_json_f64(&j, "io_wait_seconds", lr.stats.io_wait_seconds);
        tool_json_u64(&j, "bytes_read", lr.stats.bytes_read);
        tool_json_u64(&j, "corrupt_replaced", lr.stats.corrupt_replaced);
        /* Growth of this process's memory from just before dlc_loader_open:
         * the loader's own (anonymous) allocations, and the resident total,
         * which adds the pages of the store's map it touched. The ceiling's
         * buffers exist during the loader's run and are not counted. */
        tool_json_i64(&j, "loader_anon_first_batch_bytes",
                      (int64_t)lr.anon_first_batch - (int64_t)lr.anon_open);
        tool_json_i64(&j, "loader_rss_first_batch_bytes",
                      (int64_t)lr.rss_first_batch - (int64_t)lr.rss_open);
        tool_json_i64(&j, "loader_anon_end_bytes", (int64_t)lr.anon_end - (int64_t)lr.anon_open);
        tool_json_i64(&j, "loader_rss_end_bytes", (int64_t)lr.rss_end - (int64_t)lr.rss_open);
        tool_json_f64(&j, "ceiling_seconds", ceil.seconds);
        tool_json_f64(&j, "ceiling_before_gbytes_per_s", ceil_before_gbps);
        tool_json_f64(&j, "ceiling_after_gbytes_per_s", ceil_after.gbytes_per_s);
        tool_json_u64(&j, "ceiling_source_bytes", ceil_source_bytes);
        if (o.jpeg_dir) {
            tool_json_str(&j, "jpeg_dir", o.jpeg_dir);
            tool_json_u64(&j, "jpeg_files", jpeg_files);
            tool_json_u64(&j, "jpeg_samples", jr.samples);
            tool_json_f64(&j, "jpeg_seconds", jr.seconds);
            tool_json_f64(&j, "jpeg_before_samples_per_s", jpeg_before_sps);
            tool_json_f64(&j, "jpeg_after_samples_per_s", jpeg_after_sps);
        }
        tool_json_object_begin(&j, "store_info");
        tool_json_u64(&j, "count", info.count);
        tool_json_u64(&j, "height", info.height);
        tool_json_u64(&j, "width", info.width);
        tool_json_u64(&j, "encoding", info.encoding);
        tool_json_u64(&j, "file_bytes", info.file_bytes);
        tool_json_u64(&j, "resident_before_bytes", resident_before);
        tool_json_u64(&j, "resident_after_prewarm_bytes", resident_after);
        tool_json_f64(&j, "prewarm_seconds", prewarm_seconds);
        tool_json_object_end(&j);
        tool_json_object_end(&j);
        tool_json_finish(&j);
    } else {
        char b1[32];
        printf("store:   %s, %llu records of %ux%u, %s, %.0f%% in the page cache\n", o.store,
               (unsigned long long)info.count, info.width, info.height,
               tool_human_bytes(info.file_bytes, b1, sizeof b1),
               info.file_bytes ? 100.0 * (double)resident_after / (double)info.file_bytes : 0.0);
        printf("loader:  %.0f samples/s, %.2f GB/s of %s %ux%u (%llu batches of %u, %.2f s, "
               "%u threads, io %s)\n",
               sps, gbps, dtype_name(o.cfg.dtype), o.cfg.crop_h, o.cfg.crop_w,
               (unsigned long long)lr.batches, o.cfg.batch_size, lr.seconds, lr.stats.threads,
               io_name(lr.stats.io_mode));
        printf("ceiling: %.2f GB/s memcpy of the same bytes (%.0f samples/s): loader at %.0f%%\n",
               ceil.gbytes_per_s, ceil_sps, 100.0 * gbps / ceil.gbytes_per_s);
        if (o.jpeg_dir)
            printf("jpeg:    %.0f samples/s decoding every epoch: loader %.1fx faster\n", jpeg_sps,
                   sps / jpeg_sps);
        printf("open:    %.3f s; first batch %.3f s after open began", lr.open_seconds,
               lr.first_batch_seconds);
        if (o.digest)
            printf("; digest %016llx", (unsigned long long)lr.digest);
        printf("\n");
    }
    status = 0;
out:
    jpeg_bench_free(&jb);
    ceiling_free(&cl);
    dlc_store_close(store);
    return status;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "decode"))
        return cmd_decode(argc - 2, argv + 2);
    if (!strcmp(argv[1], "load"))
        return cmd_load(argc - 2, argv + 2);
    fprintf(stderr, TOOL ": error: unknown command '%s' (decode or load; see --help)\n", argv[1]);
    return 2;
}
