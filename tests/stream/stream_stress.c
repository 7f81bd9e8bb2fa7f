/* The shard cache's threads under ThreadSanitizer, without Criterion (its runner cannot start under
 * TSan, Snaipe/Criterion#274): a plain program that hammers one cache (cache/stream/) from many
 * threads, and a second process on the same folder, over a set that a small HTTP server in this
 * program serves on loopback (ranged GETs, as an object store answers them). A limit that holds
 * a little more than both processes' pins and downloads makes every round evict and download
 * again. Checked: every acquire succeeds; a pinned shard is on disk at its size until released;
 * the cache never counts more than its limit (peak_bytes); the asserts on the cache's states
 * (stream_cache.c) hold; TSan finds no race. Exit status 0 = pass. Run by ctest with the label
 * "threads" (cmake/stream.cmake), so tests/run_all.sh's tsan step runs it under TSan too. */
#include "set_fixture.h"
#include "stream_cache.h"
#include "test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SHARDS 24u
#define THREADS 4u
#define ROUNDS 60u

static const char *set_dir;

/* ---- A tiny HTTP/1.1 server: GET with an optional Range, keep-alive, a thread a connection. */

static void *serve_conn(void *arg)
{
    const int fd = (int)(intptr_t)arg;
    char req[8192];
    size_t have = 0;
    for (;;) {
        char *end = NULL;
        while (!(end = (have ? strstr(req, "\r\n\r\n") : NULL))) {
            if (have + 1 >= sizeof req)
                goto done;
            const ssize_t r = read(fd, req + have, sizeof req - 1 - have);
            if (r <= 0)
                goto done;
            have += (size_t)r;
            req[have] = '\0';
        }
        char path[1024] = "";
        if (sscanf(req, "GET /%1023s HTTP/1.1", path) != 1)
            goto done;
        unsigned long long a = 0, b = UINT64_MAX;
        const char *range = strcasestr(req, "\r\nRange: bytes=");
        const int ranged = range && range < end;
        if (ranged) {
            const char *p = range + strlen("\r\nRange: bytes=");
            a = strtoull(p, NULL, 10);
            const char *dash = strchr(p, '-');
            if (dash && dash[1] >= '0' && dash[1] <= '9')
                b = strtoull(dash + 1, NULL, 10);
        }
        char file[1200];
        snprintf(file, sizeof file, "%s/%s", set_dir, path);
        const int ffd = open(file, O_RDONLY | O_CLOEXEC);
        struct stat st;
        char head[512];
        int n;
        if (ffd < 0 || fstat(ffd, &st) != 0) {
            n = snprintf(head, sizeof head, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
            if (write(fd, head, (size_t)n) != n)
                goto done;
        } else {
            const uint64_t size = (uint64_t)st.st_size;
            if (b >= size)
                b = size ? size - 1 : 0;
            const uint64_t len = size ? b - a + 1 : 0;
            if (ranged)
                n = snprintf(head, sizeof head,
                             "HTTP/1.1 206 Partial Content\r\nContent-Length: %" PRIu64
                             "\r\nContent-Range: bytes %llu-%llu/%" PRIu64 "\r\n\r\n",
                             len, a, b, size);
            else
                n = snprintf(head, sizeof head,
                             "HTTP/1.1 200 OK\r\nContent-Length: %" PRIu64 "\r\n\r\n", size);
            if (write(fd, head, (size_t)n) != n)
                goto done;
            char buf[65536];
            for (uint64_t off = ranged ? a : 0, left = ranged ? len : size; left > 0;) {
                const ssize_t r =
                    pread(ffd, buf, left < sizeof buf ? left : sizeof buf, (off_t)off);
                if (r <= 0 || write(fd, buf, (size_t)r) != r)
                    break;
                off += (uint64_t)r, left -= (uint64_t)r;
            }
        }
        if (ffd >= 0)
            close(ffd);
        const size_t used = (size_t)(end + 4 - req);
        memmove(req, req + used, have - used + 1);
        have -= used;
    }
done:
    close(fd);
    return NULL;
}

static void *serve(void *arg)
{
    const int ls = (int)(intptr_t)arg;
    for (;;) {
        const int fd = accept(ls, NULL, NULL);
        if (fd < 0)
            return NULL;
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, serve_conn, (void *)(intptr_t)fd) != 0)
            close(fd);
        pthread_attr_destroy(&at);
    }
}

/* ---- The hammer ------------------------------------------------------------------------------ */

typedef struct hammer {
    dlc__scache *c;
    const dlc__set_index *x;
    uint32_t id;
    int failed;
} hammer;

static void *hammer_main(void *arg)
{
    hammer *h = arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (h->id + 1) ^ (uint64_t)getpid();
    for (uint32_t r = 0; r < ROUNDS && !h->failed; r++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        const uint32_t k = (uint32_t)(rng >> 33) % h->x->num_shards;
        if (h->id == 0 && r % 10 == 0) {
            /* A new schedule from one thread while the others acquire. */
            uint32_t sched[SHARDS * 2];
            for (uint32_t i = 0; i < SHARDS * 2; i++)
                sched[i] = (k + i * 5) % h->x->num_shards;
            if (dlc__scache_schedule(h->c, sched, SHARDS * 2) != DLC_OK) {
                fprintf(stderr, "stream_stress: schedule: %s\n", dlc_errmsg());
                h->failed = 1;
            }
        }
        const char *path = NULL;
        const dlc_status rc = dlc__scache_acquire(h->c, k, &path);
        if (rc != DLC_OK) {
            fprintf(stderr, "stream_stress: acquire %u: %s\n", k, dlc_errmsg());
            h->failed = 1;
            break;
        }
        /* Pinned twice (pins nest), then released twice. */
        const char *again = NULL;
        if (r % 7 == 0 && dlc__scache_acquire(h->c, k, &again) != DLC_OK) {
            fprintf(stderr, "stream_stress: second acquire %u: %s\n", k, dlc_errmsg());
            h->failed = 1;
        }
        struct stat st;
        if (stat(path, &st) != 0 || (uint64_t)st.st_size != h->x->shards[k].file_bytes) {
            fprintf(stderr, "stream_stress: %s is not there whole while pinned\n", path);
            h->failed = 1;
        }
        dlc__scache_stats s;
        dlc__scache_stats_get(h->c, &s);
        if (r % 7 == 0 && again)
            dlc__scache_release(h->c, k);
        dlc__scache_release(h->c, k);
    }
    return NULL;
}

/* One process's run: THREADS hammers on one cache. Returns 0 when every check held. */
static int run(const char *cache_dir, const char *url, uint64_t limit)
{
    dlc__scache_config cfg = {.dir = cache_dir, .limit = limit, .url = url, .downloads = 2};
    dlc_warm_options net;
    dlc_warm_options_init(&net);
    net.max_retries = 2;
    cfg.net = &net;
    dlc__scache *c = NULL;
    if (dlc__scache_open(&cfg, &c) != DLC_OK) {
        fprintf(stderr, "stream_stress: open: %s\n", dlc_errmsg());
        return 1;
    }
    hammer h[THREADS];
    pthread_t t[THREADS];
    for (uint32_t i = 0; i < THREADS; i++) {
        h[i] = (hammer){.c = c, .x = dlc__scache_index(c), .id = i};
        TU_REQUIRE(pthread_create(&t[i], NULL, hammer_main, &h[i]) == 0);
    }
    int failed = 0;
    for (uint32_t i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        failed |= h[i].failed;
    }
    dlc__scache_stats s;
    dlc__scache_stats_get(c, &s);
    if (limit && s.peak_bytes > limit) {
        fprintf(stderr, "stream_stress: peak %" PRIu64 " bytes over the limit %" PRIu64 "\n",
                s.peak_bytes, limit);
        failed = 1;
    }
    fprintf(stderr,
            "stream_stress: pid %ld: %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64
            " downloads, %" PRIu64 " evictions, peak %" PRIu64 " of %" PRIu64 "\n",
            (long)getpid(), s.hits, s.misses, s.downloads, s.evictions, s.peak_bytes, limit);
    dlc__scache_close(c);
    return failed;
}

int main(void)
{
    char *tmp = tu_mkdtemp();
    TU_REQUIRE(tmp);
    char *set = tu_path(tmp, "set"), *cache = tu_path(tmp, "cache");
    TU_REQUIRE(set && cache);
    set_dir = set;
    TU_REQUIRE(sf_make_set(set, 96, SHARDS, 0x57e55, NULL) == DLC_OK);

    const int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    TU_REQUIRE(ls >= 0 && bind(ls, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(ls, 64) == 0 &&
               getsockname(ls, (struct sockaddr *)&sa, &sl) == 0);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/", (unsigned)ntohs(sa.sin_port));

    /* The limit: both processes' pins and downloads, the index, and two shards to spare: far
     * below the set's 24 shards, so every round evicts. */
    uint8_t *ib = NULL;
    size_t il = 0;
    dlc__set_index x = {0};
    char *ipath = tu_path(set, DLC__SET_INDEX_NAME);
    TU_REQUIRE(ipath && dlc__set_index_read(ipath, &ib, &il) == DLC_OK &&
               dlc__set_index_decode(ib, il, ipath, &x) == DLC_OK);
    const uint64_t limit = dlc__scache_needed(&x, 2 * (THREADS + 2) + 2, 0);
    uint64_t set_bytes = 0;
    for (uint32_t k = 0; k < x.num_shards; k++)
        set_bytes += x.shards[k].file_bytes;
    fprintf(stderr, "stream_stress: %u shards, %" PRIu64 " bytes; limit %" PRIu64 "\n",
            x.num_shards, set_bytes, limit);
    dlc__set_index_free(&x);
    free(ib);
    free(ipath);

    /* The second process forks before this one starts a thread; it only connects. */
    const pid_t child = fork();
    TU_REQUIRE(child >= 0);
    if (child == 0) {
        close(ls);
        _exit(run(cache, url, limit));
    }
    pthread_t srv;
    TU_REQUIRE(pthread_create(&srv, NULL, serve, (void *)(intptr_t)ls) == 0);
    pthread_detach(srv);
    int failed = run(cache, url, limit);
    int status = 0;
    TU_REQUIRE(waitpid(child, &status, 0) == child);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "stream_stress: the second process failed (status %d)\n", status);
        failed = 1;
    }
    tu_rmtree(tmp);
    /* set stays: set_dir, read by server threads that may still be closing their connections. */
    free(cache), free(tmp);
    if (failed)
        return 1;
    fprintf(stderr, "stream_stress: ok\n");
    return 0;
}
