/*
 * mkdemo: make an ImageNet-like ImageFolder tree from a few real photographs.
 *
 *   mkdemo OUTDIR [--count N] [--classes K] [--seed S] [--photos DIR] [--threads T]
 *          [--scale X]
 *
 * writes OUTDIR/train/<class>/<n>.jpg. Class k is made from the k-th photo of
 * DIR (default $DLCACHE_DEMO_PHOTOS when set, else /usr/share/backgrounds/mate/nature,
 * Debian's mate-backgrounds; *.jpg sorted by name) and
 * named after it in lower case ("aqua", "blinds", ...). Each image is a random
 * crop of its class's photo (10% to 100% of the area, aspect 3/4 to 4/3, as
 * RandomResizedCrop draws them), resized so both sides are 300 to 600 pixels
 * and saved as JPEG at quality 85 to 95, which is roughly what ImageNet's
 * training images look like. --scale X multiplies those sides (and the
 * decoded photos' size) by X, for data sets of larger images. Real photographs matter: decode and
 * resize cost depend on the content, and a benchmark on flat synthetic images would flatter any
 * JPEG path.
 *
 * Everything is a function of the seed and the image's index, never of the
 * thread that made it, so the same arguments give the same bytes. The tool
 * uses only dlcache's codec and resampler.
 */
#include <dlcache/image.h>

#include "toolutil.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOOL "mkdemo"
#define DEFAULT_PHOTOS "/usr/share/backgrounds/mate/nature"
/* Names the photos' folder when --photos does not: for machines without Debian's
 * mate-backgrounds, such as the GPU bundle's (tools/gpu_bundle.sh), which carries its own. */
#define PHOTOS_ENV "DLCACHE_DEMO_PHOTOS"
#define MAX_CLASSES 1000
#define MAX_THREADS 64
#define MIN_SIDE 300u
#define MAX_SIDE 600u
/* Photos are decoded once with DCT scaling to a shorter side of at least
 * this many pixels (about 1500 on the longer side for the 16:10 wallpapers):
 * enough that a crop of a tenth of the area still shrinks to its output size,
 * and a fraction of the memory and time of a full decode. */
#define PHOTO_MIN_SHORT 800u

typedef struct photo {
    char name[256];  /* class name: file name without extension, lower case */
    char path[4096]; /* source file */
    uint8_t *pix;    /* decoded RGB, owned */
    dlc_image img;
} photo;

typedef struct job {
    const char *outdir;
    uint32_t scale; /* sides of MIN_SIDE * scale .. MAX_SIDE * scale */
    photo *photos;
    uint32_t classes;
    uint64_t count;
    uint64_t seed;
    uint32_t thread;
    uint32_t threads;
    uint64_t bytes; /* written by this thread */
    dlc_status rc;  /* first failure of this thread */
    char err[1200]; /* its message */
} job;

/* splitmix64 as a sequential generator: one stream per image. */
static uint64_t mix64(uint64_t *s)
{
    const uint64_t z = dlc__mix64(*s);
    *s += 0x9e3779b97f4a7c15ull;
    return z;
}

/* Uniform in [0, 1). */
static double uniform(uint64_t *s)
{
    return (double)(mix64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [lo, hi]. */
static uint32_t uniform_int(uint64_t *s, uint32_t lo, uint32_t hi)
{
    return lo + (uint32_t)(mix64(s) % ((uint64_t)hi - lo + 1));
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_jpeg_ext(const char *n)
{
    const char *dot = strrchr(n, '.');
    return dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0);
}

/* The first @p want JPEG files of @p dir in name order. */
static int list_photos(const char *dir, photo *out, uint32_t want, uint32_t *found)
{
    DIR *d = opendir(dir);
    if (!d) {
        tool_error(TOOL, "cannot open %s: %s", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !has_jpeg_ext(e->d_name))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **p = realloc(names, cap * sizeof *names);
            if (!p)
                break;
            names = p;
        }
        names[n] = strdup(e->d_name);
        if (!names[n])
            break;
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, name_cmp);
    uint32_t k = 0;
    int rc = 0;
    for (size_t i = 0; i < n && k < want; i++) {
        photo *p = &out[k];
        /* Cut short, the path would name another file (a prefix of this one's name). */
        if ((size_t)snprintf(p->path, sizeof p->path, "%s/%s", dir, names[i]) >= sizeof p->path) {
            tool_error(TOOL, "%s/%s: path too long (the longest is %zu bytes)", dir, names[i],
                       sizeof p->path - 1);
            rc = -1;
            break;
        }
        snprintf(p->name, sizeof p->name, "%s", names[i]);
        char *dot = strrchr(p->name, '.');
        if (dot)
            *dot = '\0';
        for (char *c = p->name; *c; c++)
            *c = (char)tolower((unsigned char)*c);
        k++;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    *found = k;
    return rc;
}

static int read_file(const char *path, uint8_t **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            uint8_t *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                return -ENOMEM;
            }
            buf = p;
        }
        const size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    const int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return -EIO;
    }
    *data = buf;
    *size = len;
    return 0;
}

/* Decode every class photo once, DCT-scaled, into memory it owns. */
static int load_photos(photo *photos, uint32_t n, uint32_t scale)
{
    dlc_codec *c = NULL;
    dlc_status rc = dlc_codec_create(&c);
    if (rc < 0) {
        tool_report(TOOL, rc, "dlc_codec_create");
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        photo *p = &photos[i];
        uint8_t *data = NULL;
        size_t size = 0;
        const int err = read_file(p->path, &data, &size);
        if (err < 0) {
            tool_error(TOOL, "cannot read %s: %s", p->path, strerror(-err));
            dlc_codec_destroy(c);
            return -1;
        }
        uint32_t w, h;
        rc = dlc_jpeg_info(c, data, size, &w, &h);
        if (rc == DLC_OK) {
            /* Ask for a shorter side of PHOTO_MIN_SHORT; the decode keeps the
             * aspect, so give the other axis its proportional minimum. */
            const double f = (double)PHOTO_MIN_SHORT * scale / (w < h ? w : h);
            const uint32_t mw = f < 1.0 ? (uint32_t)ceil(w * f) : 0;
            const uint32_t mh = f < 1.0 ? (uint32_t)ceil(h * f) : 0;
            rc = dlc_jpeg_decode(c, data, size, mw, mh, &p->img);
        }
        free(data);
        if (rc < 0) {
            char what[4200];
            snprintf(what, sizeof what, "decoding %s", p->path);
            tool_report(TOOL, rc, what);
            dlc_codec_destroy(c);
            return -1;
        }
        if (p->img.width < MIN_SIDE * scale || p->img.height < MIN_SIDE * scale) {
            tool_error(TOOL, "%s is %ux%u (height x width), below %ux%u", p->path, p->img.height,
                       p->img.width, MIN_SIDE * scale, MIN_SIDE * scale);
            dlc_codec_destroy(c);
            return -1;
        }
        /* The codec's buffer is reused by the next decode: keep a copy. */
        const size_t bytes = p->img.stride * p->img.height;
        p->pix = malloc(bytes);
        if (!p->pix) {
            tool_error(TOOL, "out of memory for %s", p->path);
            dlc_codec_destroy(c);
            return -1;
        }
        memcpy(p->pix, p->img.data, bytes);
        p->img.data = p->pix;
    }
    dlc_codec_destroy(c);
    return 0;
}

/* RandomResizedCrop's get_params (torchvision) with scale (0.1, 1) and ratio
 * (3/4, 4/3): ten tries at a random area and log-uniform aspect, then a
 * central crop. */
static void pick_crop(uint64_t *s, uint32_t W, uint32_t H, uint32_t *x, uint32_t *y, uint32_t *w,
                      uint32_t *h)
{
    const double area = (double)W * H;
    const double lo = log(3.0 / 4.0), hi = log(4.0 / 3.0);
    for (int attempt = 0; attempt < 10; attempt++) {
        const double target = area * (0.1 + 0.9 * uniform(s));
        const double ratio = exp(lo + (hi - lo) * uniform(s));
        const double cw = round(sqrt(target * ratio)), ch = round(sqrt(target / ratio));
        if (cw >= 1 && ch >= 1 && cw <= W && ch <= H) {
            *w = (uint32_t)cw;
            *h = (uint32_t)ch;
            *x = uniform_int(s, 0, W - *w);
            *y = uniform_int(s, 0, H - *h);
            return;
        }
    }
    const double in_ratio = (double)W / H;
    if (in_ratio < 3.0 / 4.0) {
        *w = W;
        *h = (uint32_t)round(W / (3.0 / 4.0));
    } else if (in_ratio > 4.0 / 3.0) {
        *h = H;
        *w = (uint32_t)round(H * (4.0 / 3.0));
    } else {
        *w = W;
        *h = H;
    }
    *x = (W - *w) / 2;
    *y = (H - *h) / 2;
}

/* A regular file only: a link there is not followed (ELOOP) and a FIFO neither blocks the run
 * (O_NONBLOCK: ENXIO without a reader) nor is written to (EINVAL), so that rerunning into a
 * folder others can write to replaces no file of theirs through a name of ours. */
static int write_file(const char *path, const uint8_t *data, size_t size)
{
    const int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    struct stat st;
    int e = 0;
    if (fstat(fd, &st) != 0)
        e = errno;
    else if (!S_ISREG(st.st_mode))
        e = EINVAL;
    else if (ftruncate(fd, 0) != 0)
        e = errno;
    if (e) {
        close(fd);
        return -e;
    }
    size_t off = 0;
    while (off < size) {
        const ssize_t n = write(fd, data + off, size - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            e = errno;
            close(fd);
            return -e;
        }
        off += (size_t)n;
    }
    if (close(fd) != 0)
        return -errno;
    return 0;
}

/* Scratch bytes dlc_resize() needs for the largest output from any class's photo. */
static size_t scratch_bound(const job *j)
{
    size_t size = 0;
    for (uint32_t k = 0; k < j->classes; k++) {
        const size_t b = dlc_resize_scratch_bound(j->photos[k].img.width, j->photos[k].img.height,
                                                  MAX_SIDE * j->scale, MAX_SIDE * j->scale, 3);
        if (b > size)
            size = b;
    }
    return size;
}

/* A worker's buffers: the resized image and the resampler's scratch. */
typedef struct canvas {
    dlc_codec *codec;
    uint8_t *out; /* MAX_SIDE x MAX_SIDE x 3, times scale squared */
    void *scratch;
    size_t scratch_size;
} canvas;

/* Make and write image @p i: a random crop of its class's photo, resized and encoded. On a
 * failure, j->rc and j->err say what went wrong. */
static dlc_status make_image(job *j, canvas *cv, uint64_t i)
{
    /* One random stream per image, from the seed and the index only. */
    uint64_t s = j->seed ^ (0xd1b54a32d192ed03ull * (i + 1));
    mix64(&s);
    const uint32_t cls = (uint32_t)(i % j->classes);
    const photo *p = &j->photos[cls];
    uint32_t cx, cy, cw, ch;
    pick_crop(&s, p->img.width, p->img.height, &cx, &cy, &cw, &ch);
    /* Shorter side 300..450, the longer one by the crop's aspect (at
     * most 4/3 of it, so at most 600); times the scale. */
    const uint32_t min_side = MIN_SIDE * j->scale, max_side = MAX_SIDE * j->scale;
    const uint32_t short_side = uniform_int(&s, min_side, max_side * 3 / 4);
    uint32_t ow, oh;
    if (cw >= ch) {
        oh = short_side;
        ow = (uint32_t)lround((double)short_side * cw / ch);
    } else {
        ow = short_side;
        oh = (uint32_t)lround((double)short_side * ch / cw);
    }
    ow = ow > max_side ? max_side : ow;
    oh = oh > max_side ? max_side : oh;
    const int quality = (int)uniform_int(&s, 85, 95);

    const dlc_image dst = {cv->out, ow, oh, 3, (size_t)ow * 3};
    j->rc = dlc_resize(&p->img, cx, cy, cw, ch, &dst, cv->scratch, cv->scratch_size);
    if (j->rc < 0) {
        snprintf(j->err, sizeof j->err, "image %llu: resize: %s", (unsigned long long)i,
                 dlc_errmsg());
        return j->rc;
    }
    const uint8_t *jpeg;
    size_t jpeg_size;
    j->rc = dlc_jpeg_encode(cv->codec, &dst, quality, &jpeg, &jpeg_size);
    if (j->rc < 0) {
        snprintf(j->err, sizeof j->err, "image %llu: encode: %s", (unsigned long long)i,
                 dlc_errmsg());
        return j->rc;
    }
    char path[8192];
    snprintf(path, sizeof path, "%s/train/%s/%05llu.jpg", j->outdir, p->name,
             (unsigned long long)(i / j->classes));
    const int err = write_file(path, jpeg, jpeg_size);
    if (err < 0) {
        j->rc = err;
        snprintf(j->err, sizeof j->err, "cannot write %.1000s: %s", path,
                 err == -ELOOP    ? "it is a symbolic link, which mkdemo does not follow"
                 : err == -EINVAL ? "it is not a regular file"
                 : err == -ENXIO  ? "it is a FIFO"
                                  : strerror(-err));
        return j->rc;
    }
    j->bytes += jpeg_size;
    return DLC_OK;
}

/* Images thread, thread + threads, ... of the job. */
static void *worker(void *arg)
{
    job *j = arg;
    const size_t side = (size_t)MAX_SIDE * j->scale;
    canvas cv = {.out = malloc(side * side * 3), .scratch_size = scratch_bound(j)};
    cv.scratch = aligned_alloc(64, (cv.scratch_size + 63) & ~(size_t)63);
    if (!cv.out || !cv.scratch) {
        j->rc = -ENOMEM;
        snprintf(j->err, sizeof j->err, "out of memory");
        goto done;
    }
    j->rc = dlc_codec_create(&cv.codec);
    if (j->rc < 0) {
        snprintf(j->err, sizeof j->err, "dlc_codec_create: %s", dlc_errmsg());
        goto done;
    }
    for (uint64_t i = j->thread; i < j->count; i += j->threads)
        if (make_image(j, &cv, i) < 0)
            break;
done:
    dlc_codec_destroy(cv.codec);
    free(cv.scratch);
    free(cv.out);
    return NULL;
}

static int make_dir(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        tool_error(TOOL, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: " TOOL " OUTDIR [--count N (3000)] [--classes K (10)] [--seed S (0)]\n"
               "              [--photos DIR ($" PHOTOS_ENV " or " DEFAULT_PHOTOS ")]\n"
               "              [--threads T (2)] [--scale X (1): image sides times X, 1..4]\n"
               "Makes OUTDIR/train/<class>/<n>.jpg from real photographs, one class per photo.\n");
}

/* What the command line asks for. */
typedef struct demo_args {
    const char *outdir, *photos_dir;
    uint64_t count, classes, seed, threads, scale;
} demo_args;

/* Parse the command line into @p a. Returns -1 to go on, or the exit status (0 after
 * --help). */
static int parse_args(int argc, char **argv, demo_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        uint64_t *num = NULL, max = 0;
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(arg, "--count") == 0) {
            num = &a->count;
            max = 100000000;
        } else if (strcmp(arg, "--classes") == 0) {
            num = &a->classes;
            max = MAX_CLASSES;
        } else if (strcmp(arg, "--seed") == 0) {
            num = &a->seed;
            max = UINT64_MAX;
        } else if (strcmp(arg, "--threads") == 0) {
            num = &a->threads;
            max = MAX_THREADS;
        } else if (strcmp(arg, "--scale") == 0) {
            num = &a->scale;
            max = 4;
        } else if (strcmp(arg, "--photos") == 0) {
            if (++i >= argc) {
                usage(stderr);
                return 2;
            }
            a->photos_dir = argv[i];
            continue;
        } else if (arg[0] == '-' || a->outdir) {
            return tool_usage_error(TOOL, usage, "unexpected argument '%s'", arg);
        } else {
            a->outdir = arg;
            continue;
        }
        if (++i >= argc || tool_parse_u64(argv[i], max, num) != 0)
            return tool_usage_error(TOOL, NULL, "%s needs a number up to %llu", arg,
                                    (unsigned long long)max);
    }
    if (!a->outdir || a->classes == 0 || a->threads == 0 || a->scale == 0) {
        usage(stderr);
        return 2;
    }
    return -1;
}

/* OUTDIR, OUTDIR/train and a folder per class. */
static int make_dirs(const demo_args *a, const photo *photos)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/train", a->outdir);
    if (make_dir(a->outdir) != 0 || make_dir(path) != 0)
        return -1;
    for (uint32_t k = 0; k < a->classes; k++) {
        snprintf(path, sizeof path, "%s/train/%s", a->outdir, photos[k].name);
        if (make_dir(path) != 0)
            return -1;
    }
    return 0;
}

/* Make the images on a->threads threads. Returns the exit status; *bytes is what they wrote. */
static int make_images(const demo_args *a, photo *photos, job *jobs, pthread_t *tids,
                       uint64_t *bytes)
{
    uint32_t started = 0;
    for (uint32_t t = 0; t < a->threads; t++) {
        jobs[t] = (job){.outdir = a->outdir,
                        .scale = (uint32_t)a->scale,
                        .photos = photos,
                        .classes = (uint32_t)a->classes,
                        .count = a->count,
                        .seed = a->seed,
                        .thread = t,
                        .threads = (uint32_t)a->threads};
        if (pthread_create(&tids[t], NULL, worker, &jobs[t]) != 0) {
            jobs[t].rc = -EAGAIN;
            snprintf(jobs[t].err, sizeof jobs[t].err, "cannot start a thread");
            break;
        }
        started++;
    }
    for (uint32_t t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    int status = 0;
    *bytes = 0;
    for (uint32_t t = 0; t < a->threads; t++) {
        if (jobs[t].rc < 0) {
            tool_error(TOOL, "%s", jobs[t].err);
            status = 1;
        }
        *bytes += jobs[t].bytes;
    }
    return status;
}

int main(int argc, char **argv)
{
    const char *env_photos = getenv(PHOTOS_ENV);
    demo_args a = {.photos_dir = env_photos && *env_photos ? env_photos : DEFAULT_PHOTOS,
                   .count = 3000,
                   .classes = 10,
                   .threads = 2,
                   .scale = 1};
    int status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;

    const double t0 = dlc__now_s();
    status = 1;
    photo *photos = calloc(a.classes, sizeof *photos);
    job *jobs = calloc(a.threads, sizeof *jobs);
    pthread_t *tids = calloc(a.threads, sizeof *tids);
    uint32_t found = 0;
    uint64_t bytes = 0;
    if (!photos || !jobs || !tids) {
        tool_error(TOOL, "out of memory");
        goto out;
    }
    if (list_photos(a.photos_dir, photos, (uint32_t)a.classes, &found) != 0)
        goto out;
    if (found < a.classes) {
        tool_error(TOOL, "%s has %u JPEG photos, %llu classes need one each", a.photos_dir, found,
                   (unsigned long long)a.classes);
        goto out;
    }
    if (load_photos(photos, (uint32_t)a.classes, (uint32_t)a.scale) != 0 ||
        make_dirs(&a, photos) != 0)
        goto out;
    status = make_images(&a, photos, jobs, tids, &bytes);
    if (status == 0) {
        char hb[32];
        printf(TOOL ": wrote %llu images in %llu classes to %s/train (%s, %.1f s, seed %llu)\n",
               (unsigned long long)a.count, (unsigned long long)a.classes, a.outdir,
               tool_human_bytes(bytes, hb, sizeof hb), dlc__now_s() - t0,
               (unsigned long long)a.seed);
    }
out:
    if (photos)
        for (uint32_t k = 0; k < a.classes; k++)
            free(photos[k].pix);
    free(photos);
    free(jobs);
    free(tids);
    return status;
}
