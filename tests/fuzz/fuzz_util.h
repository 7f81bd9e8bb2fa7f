/* Helpers shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c): a private
 * scratch directory per process (on tmpfs when /dev/shm exists, so that the
 * file written for each input costs no disk I/O) and a whole-file write.
 * Header-only so that each harness stays one translation unit. */
#ifndef DLCACHE_FUZZ_UTIL_H
#define DLCACHE_FUZZ_UTIL_H

#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char fz_dir[256];

static inline int fz_rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(p);
}

static inline void fz_cleanup(void)
{
    if (fz_dir[0])
        nftw(fz_dir, fz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* The scratch directory, made on first use and removed at exit. */
static inline const char *fz_scratch(void)
{
    if (!fz_dir[0]) {
        struct stat st;
        const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
        snprintf(fz_dir, sizeof fz_dir, "%s/dlc-fuzz-XXXXXX", base);
        if (!mkdtemp(fz_dir)) {
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
