/* cachebench's plumbing: the timed window on worker threads, memory figures, names, and the
 * JPEG files that the decode reference and the JPEG path read into memory before timing. */
#include "bench.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

void *bench_aligned(size_t size)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, size ? size : 64) != 0)
        return NULL;
    return p;
}

void bench_memory_now(uint64_t *rss, uint64_t *anon)
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

int bench_parse_seconds(const char *v, double *out)
{
    char *end;
    const double s = strtod(v, &end);
    if (!*v || *end || !(s > 0))
        return -1;
    *out = s;
    return 0;
}

const char *bench_io_name(uint32_t io)
{
    return io == DLC_IO_MMAP ? "mmap" : io == DLC_IO_DIRECT ? "direct" : "auto";
}

double bench_run_window(int n, void *(*fn)(void *), void *args, size_t arg_size, bench_sync *sync,
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

/* ---- JPEG files in memory -------------------------------------------------------------------- */

static int is_jpeg_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The entries of @p dir except dot files, sorted, so that the list (and the labels) do not
 * depend on readdir's order. Returns 0, or -1 (errno says why). */
static int sorted_names(const char *dir, char ***out, size_t *count)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **grown = realloc(names, cap * sizeof *names);
            if (!grown)
                goto oom;
            names = grown;
        }
        if (!(names[n] = strdup(e->d_name)))
            goto oom;
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    *out = names;
    *count = n;
    return 0;
oom:
    closedir(d);
    free_names(names, n);
    errno = ENOMEM;
    return -1;
}

static int add_file(bench_jpeg_set *set, char *path, size_t size, int64_t label)
{
    if (set->count == set->cap) {
        const size_t cap = set->cap ? set->cap * 2 : 1024;
        bench_jpeg_file *grown = realloc(set->files, cap * sizeof *grown);
        if (!grown)
            return -1;
        set->files = grown;
        set->cap = cap;
    }
    set->files[set->count++] = (bench_jpeg_file){.path = path, .size = size, .label = label};
    return 0;
}

/* Append every JPEG under @p dir to @p set. At the top level (@p label < 0) each folder is a
 * class, numbered as torchvision's ImageFolder numbers sorted class folders; files lying at the
 * top level get label 0. */
static int scan_dir(bench_jpeg_set *set, const char *dir, int64_t label)
{
    char **names = NULL;
    size_t n = 0;
    if (sorted_names(dir, &names, &n) != 0) {
        fprintf(stderr, TOOL ": error: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    int64_t next_class = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *path = malloc(len);
        if (!path) {
            fprintf(stderr, TOOL ": error: out of memory while listing %s\n", dir);
            rc = -1;
            break;
        }
        snprintf(path, len, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) != 0) {
            fprintf(stderr, TOOL ": error: %s: %s\n", path, strerror(errno));
            rc = -1;
        } else if (S_ISDIR(st.st_mode)) {
            rc = scan_dir(set, path, label < 0 ? next_class++ : label);
        } else if (S_ISREG(st.st_mode) && is_jpeg_name(names[i])) {
            if (add_file(set, path, (size_t)st.st_size, label < 0 ? 0 : label) == 0)
                continue; /* the set owns the path now */
            fprintf(stderr, TOOL ": error: out of memory while listing %s\n", dir);
            rc = -1;
        }
        free(path);
    }
    free_names(names, n);
    return rc;
}

static int read_whole(bench_jpeg_file *f)
{
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
    return 0;
}

void bench_jpeg_set_free(bench_jpeg_set *set)
{
    for (size_t i = 0; i < set->count; i++) {
        free(set->files[i].path);
        free(set->files[i].data);
    }
    free(set->files);
    memset(set, 0, sizeof *set);
}

int bench_jpeg_set_load(bench_jpeg_set *set, const char *dir, uint64_t limit)
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
        if (read_whole(&set->files[i]) != 0)
            return -1;
        set->bytes += set->files[i].size;
    }
    return 0;
}
