/* How fast new bytes reach fresh page-cache pages, from 1, 2, ... threads at once: the builder's
 * one serial step (docs/BENCHMARKS.md, "The builder at the speed of decoding"). Each thread writes
 * BYTES of the same record-sized pattern into a file of its own in DIR, in one of three ways:
 *
 *   map     ftruncate + fallocate(KEEP_SIZE) as the store writer does, then memcpy into a
 *           MAP_SHARED map of it: every new folio is a first-touch fault, and the kernel zeroes
 *           it before the copy lands (what LMDB's MDB_WRITEMAP costs without help).
 *   pwrite  the same reserved file, written with pwrite() of BLOCK bytes: no fault, no zeroing
 *           of pages wholly overwritten, and the page cache may use large folios.
 *   direct  O_DIRECT pwrite() of BLOCK bytes from an aligned buffer: no page cache at all.
 *
 * Every thread writes the same number of bytes, so with a cost that scales the wall time stays
 * flat as threads are added; the GB/s of all threads together, the faults (getrusage) and the
 * system time per GB say where it does not. Files are removed after each run.
 *
 *   bench_pagecache DIR [MIB_PER_THREAD (256)] [THREADS ("1 2")] [BLOCK_KIB (196)]
 *
 * A benchmark, not a test: built with the tests, registered with no ctest entry. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { MODE_MAP, MODE_PWRITE, MODE_DIRECT, MODES };
static const char *const mode_name[MODES] = {"map", "pwrite", "direct"};

typedef struct job {
    const char *dir;
    int mode, index;
    size_t bytes, block;
    const uint8_t *src; /* one block of pattern, 4 KiB aligned */
    int failed;
    pthread_barrier_t *start;
} job;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *writer(void *arg)
{
    job *j = arg;
    char path[4096];
    snprintf(path, sizeof path, "%s/pagecache-%d-%d.tmp", j->dir, (int)getpid(), j->index);
    const int flags =
        O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | (j->mode == MODE_DIRECT ? O_DIRECT : 0);
    const int fd = open(path, flags, 0600);
    uint8_t *map = NULL;
    if (fd < 0) {
        fprintf(stderr, "bench_pagecache: %s: %s\n", path, strerror(errno));
        j->failed = 1;
        pthread_barrier_wait(j->start);
        return NULL;
    }
    /* Reserved like the store writer's map (cache/store/store_writer_file.c: create_file()). */
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)j->bytes) != 0 ||
        (j->mode == MODE_MAP && ftruncate(fd, (off_t)j->bytes) != 0))
        j->failed = 1;
    if (!j->failed && j->mode == MODE_MAP) {
        map = mmap(NULL, j->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            map = NULL;
            j->failed = 1;
        }
    }
    pthread_barrier_wait(j->start);
    for (size_t off = 0; !j->failed && off < j->bytes; off += j->block) {
        const size_t n = j->bytes - off < j->block ? j->bytes - off : j->block;
        if (j->mode == MODE_MAP)
            memcpy(map + off, j->src, n);
        else if (pwrite(fd, j->src, n, (off_t)off) != (ssize_t)n)
            j->failed = 1;
    }
    if (map)
        munmap(map, j->bytes);
    close(fd);
    unlink(path);
    return NULL;
}

/* One run of @p threads writers in @p mode; prints one line. Returns 0 or -1. */
static int run(const char *dir, int mode, int threads, size_t bytes, size_t block,
               const uint8_t *src)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    job jobs[64];
    pthread_t tid[64];
    struct rusage r0, r1;
    sync();
    for (int t = 0; t < threads; t++) {
        jobs[t] = (job){.dir = dir,
                        .mode = mode,
                        .index = t,
                        .bytes = bytes,
                        .block = block,
                        .src = src,
                        .start = &start};
        pthread_create(&tid[t], NULL, writer, &jobs[t]);
    }
    getrusage(RUSAGE_SELF, &r0);
    pthread_barrier_wait(&start);
    const double t0 = now_s();
    int failed = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        failed |= jobs[t].failed;
    }
    const double s = now_s() - t0;
    getrusage(RUSAGE_SELF, &r1);
    pthread_barrier_destroy(&start);
    if (failed) {
        fprintf(stderr, "bench_pagecache: %s with %d threads failed\n", mode_name[mode], threads);
        return -1;
    }
    const double gb = (double)bytes * threads / 1e9;
    const double sys = (double)(r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                       (double)(r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e6;
    const double usr = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) +
                       (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) / 1e6;
    printf("%-7s %2d threads: %6.2f GB/s in all, %5.2f per thread; %8ld faults/GB; "
           "sys %.2f s/GB, user %.2f s/GB\n",
           mode_name[mode], threads, gb / s, gb / s / threads,
           (long)((double)(r1.ru_minflt - r0.ru_minflt) / gb), sys / gb, usr / gb);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [MIB_PER_THREAD] [THREADS] [BLOCK_KIB]\n", argv[0]);
        return 2;
    }
    const size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 256;
    const char *tlist = argc > 3 ? argv[3] : "1 2";
    const size_t block = (argc > 4 ? strtoul(argv[4], NULL, 10) : 196) << 10;
    if (mib == 0 || block == 0) {
        fprintf(stderr, "bench_pagecache: sizes must be positive\n");
        return 2;
    }
    uint8_t *src = aligned_alloc(4096, block);
    if (!src)
        return 1;
    for (size_t i = 0; i < block; i++)
        src[i] = (uint8_t)(i * 2654435761u >> 13);
    int rc = 0;
    /* Modes interleaved within each thread count, so that the machine's load moves them alike. */
    char *list = strdup(tlist);
    for (char *tok = strtok(list, " ,"); tok && rc == 0; tok = strtok(NULL, " ,")) {
        const int t = atoi(tok);
        if (t < 1 || t > 64) {
            fprintf(stderr, "bench_pagecache: threads must be 1..64\n");
            rc = 2;
            break;
        }
        for (int m = 0; m < MODES && rc == 0; m++)
            rc = run(argv[1], m, t, mib << 20, block, src) ? 1 : 0;
    }
    free(list);
    free(src);
    return rc;
}
