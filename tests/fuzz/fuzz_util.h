/* Helpers shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c): a private
 * scratch directory per process (on tmpfs when /dev/shm exists, so that the
 * file written for each input costs no disk I/O) and a whole-file write.
 * Header-only so that each harness stays one translation unit. */
#ifndef DLCACHE_FUZZ_UTIL_H
#define DLCACHE_FUZZ_UTIL_H

#include "test_util.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char *fz_dir;

static inline void fz_cleanup(void)
{
    tu_rmtree(fz_dir);
    free(fz_dir);
    fz_dir = NULL;
}

/* The scratch directory, made on first use and removed at exit. */
static inline const char *fz_scratch(void)
{
    if (!fz_dir) {
        struct stat st;
        const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
        fz_dir = tu_mkdtemp_in(base);
        if (!fz_dir) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fz_cleanup);
    }
    return fz_dir;
}

/* "SCRATCH/name" in a static buffer per call site's own array. */
static inline void fz_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", fz_scratch(), name);
}

/* Replace @p path with exactly @p size bytes of @p data. A fresh inode each
 * time: a map of the previous input must never see the new bytes. */
static inline void fz_write_file(const char *path, const uint8_t *data, size_t size)
{
    unlink(path);
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror("fuzz: open");
        abort();
    }
    size_t done = 0;
    while (done < size) {
        const ssize_t n = write(fd, data + done, size - done);
        if (n <= 0) {
            perror("fuzz: write");
            abort();
        }
        done += (size_t)n;
    }
    close(fd);
}

#endif /* DLCACHE_FUZZ_UTIL_H */
