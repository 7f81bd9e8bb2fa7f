/* Fuzz the streaming cache's on-disk state (cache/stream/): the folder a crashed, older or
 * foreign process left is untrusted. Each input builds a cache folder: the set's own folder
 * with its shards whole, cut short or replaced by other bytes, an index.dlcset of any bytes,
 * temporary downloads of any name and process number (some held by a live flock, as a download
 * under way is), folders of other sets with indexes of any bytes, directories and symlinks named
 * like shards, and files the cache did not write. Then the cache is opened on it with the set's
 * real index (given as bytes: nothing is fetched), which scans the folder, removes dead
 * downloads and shards the index does not describe, and checks the limit; each shard is then
 * pinned as an acquire of a present shard would. Checked: no crash or sanitizer report, an
 * error always says why, the files the cache did not write are all still there, and a live
 * download is never removed.
 *
 * After the limit, the input may also tamper with the index (re-sealed, as anyone who can write
 * the bucket can: a shard's count, size or name changed, issue 23) and plant links where the
 * set's folder, the lock file or another set's folder should be, pointing into a victim folder:
 * nothing in the victim folder may be created, changed or removed.
 *
 * Last, any bytes of the index (tampered or not) may be changed and re-sealed: its checksum, and
 * the schema's hashes, recomputed so that they reach the checks behind them.
 *
 * Seeds: tests/fuzz/make_seeds.sh (DLC_FUZZ_SEED_DIR): a clean folder, one with every shard
 * present, one with a dead download, a tampered index, planted links and re-sealed bytes. */
#include "fuzz_util.h"
#include "set_fixture.h"
#include "store_format.h"
#include "store_set.h"
#include "stream_cache.h"
#include "stream_internal.h"

#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <xxhash.h>

#define SHARDS 3u
#define MAX_FILES 24
#define MAX_FILE_BYTES 4096

static uint8_t *index_bytes;
static size_t index_len;
static uint8_t *shard_bytes[SHARDS];
static size_t shard_len[SHARDS];
static char shard_names[SHARDS][DLC__SET_NAME_SIZE];
static char set_hex[17];

static void die(const char *what)
{
    fprintf(stderr, "fuzz_stream: %s: %s\n", what, dlc_errmsg());
    abort();
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die(path);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
        die("read");
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* The input, read a byte at a time; zeros once it runs out. */
typedef struct cursor {
    const uint8_t *p;
    size_t n;
} cursor;

static uint8_t next(cursor *c)
{
    if (!c->n)
        return 0;
    c->n--;
    return *c->p++;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char set[512], p[600];
    fz_path(set, sizeof set, "stream-set");
    if (sf_make_set(set, 12, SHARDS, 0x5715ea, NULL) != DLC_OK)
        die("sf_make_set");
    snprintf(p, sizeof p, "%s/" DLC__SET_INDEX_NAME, set);
    index_bytes = read_all(p, &index_len);
    dlc__set_index x = {0};
    if (dlc__set_index_decode(index_bytes, index_len, p, &x) != DLC_OK)
        die("decode");
    snprintf(set_hex, sizeof set_hex, "%016llx", (unsigned long long)x.set_id);
    for (uint32_t k = 0; k < SHARDS; k++) {
        snprintf(shard_names[k], sizeof shard_names[k], "%s", x.shards[k].name);
        snprintf(p, sizeof p, "%s/%s", set, x.shards[k].name);
        shard_bytes[k] = read_all(p, &shard_len[k]);
    }
    dlc__set_index_free(&x);
    const char *seeds = getenv("DLC_FUZZ_SEED_DIR");
    if (seeds) {
        /* The first byte is the number of files. Every shard whole; a dead download of shard 1
         * and a live one of shard 2; our index cut short; nothing at all. The byte after the
         * files is the limit (0: none). */
        static const uint8_t present[] = {3, 0, 0, 0, 0, 0, 1, 0, 1, 0, 2, 0, 2, 0};
        static const uint8_t temps[] = {2, 1, 0, 0, 1, 7, 0, 1, 1, 1, 0, 2, 0, 2, 200};
        static const uint8_t index_cut[] = {1, 5, 2, 0, 9, 40, 0, 0, 0, 0, 0, 0, 0};
        static const uint8_t empty[] = {0};
        /* No file, no limit; shard 1 named like the index, then a count of shard 2 past 2^32. */
        static const uint8_t tampered[] = {0, 0, 3, 2, 1};
        static const uint8_t tampered_count[] = {0, 0, 5, 0, 0xff, 0xff, 0xff, 0xff, 0xff};
        /* Shard 0 present, then every link planted. */
        static const uint8_t links[] = {1, 0, 0, 0, 0, 0, 0, 7};
        /* Any bytes of the index re-sealed: the shard count, the fields, an entry's name and a
         * count (the schema's hashes re-sealed too); then shard 0's count and size past 2^32. */
        static const uint8_t resealed[] = {0, 0,  0, 0, 3,  3,   0, 12,  2,
                                           0, 40, 5, 0, 56, '.', 0, 121, 0x40};
        static const uint8_t resealed_count[] = {0, 0, 0, 0, 1, 1, 0, 124, 0x10, 0, 148, 0x10};
        const struct {
            const char *name;
            const uint8_t *b;
            size_t n;
        } s[] = {{"present", present, sizeof present},
                 {"temps", temps, sizeof temps},
                 {"index-cut", index_cut, sizeof index_cut},
                 {"empty", empty, sizeof empty},
                 {"tampered", tampered, sizeof tampered},
                 {"tampered-count", tampered_count, sizeof tampered_count},
                 {"links", links, sizeof links},
                 {"resealed", resealed, sizeof resealed},
                 {"resealed-count", resealed_count, sizeof resealed_count}};
        for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
            snprintf(p, sizeof p, "%s/%s", seeds, s[i].name);
            fz_write_file(p, s[i].b, s[i].n);
        }
    }
    return 0;
}

/* A file of the input's choosing at @p path: a shard's bytes whole or cut, or input bytes. */
static void write_file(const char *path, cursor *c)
{
    const uint8_t how = next(c), k = next(c) % SHARDS;
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return; /* A directory or symlink an earlier step put there stays. */
    if (how % 3 == 0) {
        fz_write_file(path, shard_bytes[k], shard_len[k]);
    } else if (how % 3 == 1) {
        const size_t cut = ((size_t)next(c) << 8 | next(c)) % (shard_len[k] + 1);
        fz_write_file(path, shard_bytes[k], cut);
    } else {
        size_t n = next(c) % 64;
        if (n > c->n)
            n = c->n;
        fz_write_file(path, c->p, n);
        c->p += n, c->n -= n;
    }
}

/* A name of the input's choosing: a shard's, the index's, or input bytes made a file name. */
static void pick_name(cursor *c, char *out, size_t cap)
{
    const uint8_t how = next(c);
    if (how % 4 == 0) {
        snprintf(out, cap, "%s", shard_names[next(c) % SHARDS]);
    } else if (how % 4 == 1) {
        snprintf(out, cap, DLC__SET_INDEX_NAME);
    } else if (how % 4 == 2) {
        snprintf(out, cap, "part-%05u-of-%05u.dlc", next(c), next(c));
    } else {
        size_t n = 1 + next(c) % 20, i = 0;
        for (; i < n && i + 1 < cap; i++) {
            const uint8_t b = next(c);
            out[i] = (char)(b == '/' || b == 0 ? 'x' : b);
        }
        out[i] = '\0';
        if (!strcmp(out, ".") || !strcmp(out, ".."))
            snprintf(out, cap, "dots");
    }
}

/* The real index, re-sealed with one lie of the input's choosing about one shard. */
static void tamper_index(cursor *c, uint8_t t, uint8_t **out, size_t *len)
{
    dlc__set_index x = {0};
    if (dlc__set_index_decode(index_bytes, index_len, "index", &x) != DLC_OK)
        die("decode");
    dlc__set_shard *e = &x.shards[(t >> 1) % SHARDS];
    uint64_t v = 0;
    switch (next(c) % 4) {
    case 0: /* A count, up to 2^32 and more. */
        for (int i = 0; i < 5; i++)
            v = v << 8 | next(c);
        e->count = v;
        break;
    case 1: /* A size. */
        for (int i = 0; i < 5; i++)
            v = v << 8 | next(c);
        e->file_bytes = v;
        break;
    case 2: { /* A name that could hide or collide. */
        static const char *const names[] = {".hidden", DLC__SET_INDEX_NAME, "x.999.dlcs-tmp",
                                            DLC__SCACHE_LOCK, "a..b"};
        snprintf(e->name, sizeof e->name, "%s", names[next(c) % 5]);
        break;
    }
    default: /* Empty. */
        e->count = 0;
        break;
    }
    uint64_t sum = 0;
    for (uint32_t k = 0; k < x.num_shards; k++) {
        x.shards[k].first = sum;
        sum += x.shards[k].count;
    }
    x.count = sum;
    if (dlc__set_index_encode(&x, out, len) != DLC_OK)
        die("encode");
    dlc__set_index_free(&x);
}

/* Any bytes of the index (the one given, lied about or not) changed by the input, then re-sealed:
 * its whole-file XXH3 recomputed, and with bit 1 of @p how the schema's hashes too, so that the
 * bytes pass the checksums and reach every rule behind them (counts, firsts, sizes, names, the
 * header's numbers, the schema's entries), as an index written by anyone who can write the
 * bucket would. Returns a copy that the caller frees. */
static uint8_t *reseal_bytes(cursor *c, uint8_t how, const uint8_t *in, size_t len)
{
    uint8_t *p = malloc(len);
    if (!p)
        die("malloc");
    memcpy(p, in, len);
    const size_t hashed = len - 8; /* The cache refuses an index shorter than its header. */
    const unsigned writes = 1u + next(c) % 8u;
    for (unsigned i = 0; i < writes; i++) {
        size_t at = (size_t)next(c) << 8 | next(c);
        at %= hashed;
        p[at] = next(c);
    }
    if (how & 2) {
        /* The schema block follows the header and the entries, as many as the header now says:
         * each field's entry carries its own hash, and byte 32 the hash of the block. */
        const uint64_t n = dlc__ld32(p + 12), nf = dlc__ld32(p + 40);
        const uint64_t at = DLC__SET_HEADER + (uint64_t)DLC__SET_ENTRY * n;
        for (uint64_t i = 0; i < nf && at + (i + 1) * DLC__SCHEMA_ENTRY_SIZE <= hashed; i++) {
            uint8_t *e = p + at + i * DLC__SCHEMA_ENTRY_SIZE;
            dlc__st64(e + DLC__SCHEMA_ENTRY_HASHED, XXH3_64bits(e, DLC__SCHEMA_ENTRY_HASHED));
        }
        if (at + nf * DLC__SCHEMA_ENTRY_SIZE <= hashed)
            dlc__st64(p + 32, XXH3_64bits(p + at, (size_t)(nf * DLC__SCHEMA_ENTRY_SIZE)));
    }
    dlc__st64(p + hashed, XXH3_64bits(p, hashed));
    return p;
}

/* The victim folder's files, as names, sizes and inodes: what the cache must never touch. */
typedef struct victim_list {
    int n;
    char names[MAX_FILES + 4][256];
    struct stat st[MAX_FILES + 4];
} victim_list;

static void list_victim(const char *dir, victim_list *v)
{
    v->n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) && v->n < MAX_FILES + 4) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[900];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        snprintf(v->names[v->n], sizeof v->names[0], "%s", e->d_name);
        if (lstat(p, &v->st[v->n]) == 0)
            v->n++;
    }
    closedir(d);
}

static void same_victim(const char *dir, const victim_list *before)
{
    victim_list *now = calloc(1, sizeof *now);
    if (!now)
        die("calloc");
    list_victim(dir, now);
    int same = now->n == before->n;
    for (int i = 0; same && i < now->n; i++) {
        int found = 0;
        for (int j = 0; j < before->n && !found; j++)
            found = !strcmp(now->names[i], before->names[j]) &&
                    now->st[i].st_ino == before->st[j].st_ino &&
                    now->st[i].st_size == before->st[j].st_size &&
                    now->st[i].st_mtim.tv_sec == before->st[j].st_mtim.tv_sec &&
                    now->st[i].st_mtim.tv_nsec == before->st[j].st_mtim.tv_nsec;
        same = found;
    }
    if (!same) {
        fprintf(stderr, "fuzz_stream: the cache wrote or removed through a link in %s\n", dir);
        abort();
    }
    free(now);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cursor c = {data, size};
    char dir[512], ours[600];
    fz_path(dir, sizeof dir, "cache");
    tu_rmtree(dir);
    snprintf(ours, sizeof ours, "%s/%s", dir, set_hex);
    if (mkdir(dir, 0755) != 0 || mkdir(ours, 0755) != 0)
        die("mkdir");
    char keep[MAX_FILES][900]; /* Files the cache did not write: they must stay. */
    int nkeep = 0, held[MAX_FILES], nheld = 0;
    /* As many files as the first byte says: the bytes after them (the limit, a lie in the index,
     * links, re-sealed bytes) are then reached by short inputs too. */
    const unsigned nfiles = next(&c) % (MAX_FILES + 1u);
    for (unsigned f = 0; f < nfiles && c.n; f++) {
        char name[64], path[900], other[600];
        const uint8_t op = next(&c) % 6;
        switch (op) {
        case 0: /* One of our shards, whole, cut, or other bytes. */
            snprintf(path, sizeof path, "%s/%s", ours, shard_names[next(&c) % SHARDS]);
            write_file(path, &c);
            break;
        case 1: { /* A download: dead (nobody holds its lock) or live (held by us). */
            const uint8_t live = next(&c) & 1;
            pick_name(&c, name, sizeof name);
            const long pid = live ? 1 : 100000 + next(&c);
            snprintf(path, sizeof path, "%s/%s.%ld" DLC__SCACHE_TMP, ours, name, pid);
            write_file(path, &c);
            if (live) {
                const int fd = open(path, O_RDWR | O_CLOEXEC);
                if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && nheld < MAX_FILES) {
                    held[nheld++] = fd;
                    snprintf(keep[nkeep++], sizeof keep[0], "%s", path);
                } else if (fd >= 0) {
                    close(fd);
                }
            }
            break;
        }
        case 2: { /* Another set's folder, with an index of any bytes and files. */
            snprintf(other, sizeof other, "%s/%016llx", dir,
                     (unsigned long long)next(&c) << 32 | next(&c));
            mkdir(other, 0755);
            pick_name(&c, name, sizeof name);
            snprintf(path, sizeof path, "%s/%s", other, name);
            write_file(path, &c);
            break;
        }
        case 3: /* A file the cache did not write, in our folder or at the top. */
            pick_name(&c, name, sizeof name);
            if (!strcmp(name, DLC__SET_INDEX_NAME) || strstr(name, DLC__SCACHE_TMP))
                break;
            int shard = 0;
            for (uint32_t k = 0; k < SHARDS; k++)
                shard |= !strcmp(name, shard_names[k]);
            snprintf(path, sizeof path, "%s/%s", next(&c) & 1 ? ours : dir, name);
            if (shard && strstr(path, ours))
                break; /* That name is the cache's own. */
            write_file(path, &c);
            if (nkeep < MAX_FILES)
                snprintf(keep[nkeep++], sizeof keep[0], "%s", path);
            break;
        case 4: /* A directory or a symlink where a shard would be. */
            snprintf(path, sizeof path, "%s/%s", ours, shard_names[next(&c) % SHARDS]);
            if (next(&c) & 1 ? mkdir(path, 0755) != 0 : symlink("/etc/hostname", path) != 0)
                break; /* A file is there already: it is the cache's to judge. */
            if (nkeep < MAX_FILES)
                snprintf(keep[nkeep++], sizeof keep[0], "%s", path);
            break;
        default: /* Our index, of any bytes. */
            snprintf(path, sizeof path, "%s/" DLC__SET_INDEX_NAME, ours);
            write_file(path, &c);
            break;
        }
    }

    const uint8_t lim = next(&c);
    /* Past the limit (zeros in older inputs: no lie, no link). */
    uint8_t *idx = index_bytes, *lied = NULL;
    size_t idx_len = index_len;
    const uint8_t t = next(&c);
    if (t & 1) {
        tamper_index(&c, t, &lied, &idx_len);
        idx = lied;
    }
    const uint8_t links = next(&c);
    /* Past the links (zeros in older inputs: the index as it was): any bytes of it, re-sealed. */
    const uint8_t raw = next(&c);
    uint8_t *sealed = NULL;
    if ((raw & 1) && idx_len > DLC__SET_HEADER + 8) {
        sealed = reseal_bytes(&c, raw, idx, idx_len);
        idx = sealed;
    }
    char victim[600], vfile[700], link[700];
    snprintf(victim, sizeof victim, "%s-victim", dir);
    tu_rmtree(victim);
    if (links & 7) {
        /* The victim folder: our set folder's files moved there (bit 0), or a file of its own. */
        if (links & 1) {
            if (rename(ours, victim) != 0 || symlink(victim, ours) != 0)
                die("plant the set folder's link");
        } else if (mkdir(victim, 0755) != 0) {
            die("mkdir victim");
        }
        snprintf(vfile, sizeof vfile, "%s/file", victim);
        fz_write_file(vfile, (const uint8_t *)"keep", 4);
        snprintf(link, sizeof link, "%s/" DLC__SCACHE_LOCK, dir);
        if (links & 2)
            symlink(vfile, link);
        snprintf(link, sizeof link, "%s/%016llx", dir, 0x0123456789abcdefull);
        if (links & 4)
            symlink(victim, link);
    }
    victim_list *before = calloc(1, sizeof *before);
    if (!before)
        die("calloc");
    list_victim(victim, before);
    const dlc__scache_config cfg = {
        .dir = dir,
        .limit = lim < 128 ? 0 : (uint64_t)lim << 12,
        .url = "s3://fuzz/set",
        .downloads = 1,
        .index = idx,
        .index_len = idx_len,
    };
    dlc__scache *cache = NULL;
    const dlc_status rc = dlc__scache_open(&cfg, &cache);
    if (rc < 0 && dlc_errmsg()[0] == '\0')
        abort();
    for (uint32_t k = 0; cache && k < SHARDS; k++) {
        int fd = -1;
        const dlc_status prc = dlc__scache_try_pin(cache, k, &fd);
        if (prc < 0 && dlc_errmsg()[0] == '\0')
            abort();
    }
    dlc__scache_close(cache);
    same_victim(victim, before);
    free(before);
    free(lied);
    free(sealed);
    /* Nothing the cache did not write was removed, and no live download. */
    for (int i = 0; i < nkeep; i++) {
        struct stat st;
        if (lstat(keep[i], &st) != 0) {
            fprintf(stderr, "fuzz_stream: %s was removed\n", keep[i]);
            abort();
        }
    }
    for (int i = 0; i < nheld; i++)
        close(held[i]);
    return 0;
}
