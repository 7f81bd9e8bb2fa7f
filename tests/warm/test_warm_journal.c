/* The resume journal as byte ranges (cache/warm/warm_journal.c): what a run with
 * one chunk size journaled counts for a rerun with another (the rerun fetches
 * only the missing bytes, each piece inside one of its chunks); a torn or
 * damaged record is dropped with everything after it; a journal of another
 * object (source, ETag, size) or of the earlier chunk-index format is started
 * over, never misread. */
#include "tmpdir_util.h"
#include "warm_internal.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static off_t file_size(const char *p)
{
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    return st.st_size;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void assert_ranges(const dlc__warm_ranges *have, const dlc__warm_range *want, size_t n)
{
    cr_assert_eq(have->n, n, "%zu runs, expected %zu", have->n, n);
    for (size_t i = 0; i < n; i++)
        cr_assert(have->v[i].off == want[i].off && have->v[i].len == want[i].len,
                  "run %zu is [%llu, +%llu), expected [%llu, +%llu)", i,
                  (unsigned long long)have->v[i].off, (unsigned long long)have->v[i].len,
                  (unsigned long long)want[i].off, (unsigned long long)want[i].len);
}

/* The pieces that dlc__warm_gaps gives for @p have, into @p out (at most @p cap). */
static size_t gaps_of(const dlc__warm_ranges *have, uint64_t size, uint64_t chunk,
                      dlc__warm_range *out, size_t cap)
{
    dlc__warm_gaps g;
    dlc__warm_gaps_init(&g, have, size, chunk);
    size_t n = 0;
    dlc__warm_range piece;
    while (dlc__warm_gaps_next(&g, &piece)) {
        cr_assert_lt(n, cap);
        out[n++] = piece;
    }
    return n;
}

/* The promise of the gaps, for any coverage and chunk size: the pieces come in
 * order, lie each inside one chunk, miss every covered byte and, with the
 * covered bytes, make up the whole object exactly once; dlc__warm_gaps_count
 * agrees. */
static void check_gaps(const dlc__warm_ranges *have, uint64_t size, uint64_t chunk)
{
    uint8_t *seen = calloc(size + 1, 1);
    for (size_t i = 0; i < have->n; i++)
        for (uint64_t b = have->v[i].off; b < have->v[i].off + have->v[i].len && b < size; b++)
            seen[b] = 1;
    /* At most one piece per byte. */
    dlc__warm_range *pieces = malloc((size + 1) * sizeof *pieces);
    const size_t n = gaps_of(have, size, chunk, pieces, size + 1);
    uint64_t prev_end = 0, touched = 0, last = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        const dlc__warm_range p = pieces[i];
        cr_assert_gt(p.len, 0);
        cr_assert_geq(p.off, prev_end, "pieces out of order");
        cr_assert_eq(p.off / chunk, (p.off + p.len - 1) / chunk, "a piece spans two chunks");
        for (uint64_t b = p.off; b < p.off + p.len; b++) {
            cr_assert_eq(seen[b], 0, "byte %llu fetched twice (chunk %llu)", (unsigned long long)b,
                         (unsigned long long)chunk);
            seen[b] = 1;
        }
        prev_end = p.off + p.len;
        touched += p.off / chunk != last;
        last = p.off / chunk;
    }
    for (uint64_t b = 0; b < size; b++)
        cr_assert_eq(seen[b], 1, "byte %llu neither covered nor fetched", (unsigned long long)b);
    uint64_t np = 0, complete = 0;
    dlc__warm_gaps_count(have, size, chunk, &np, &complete);
    cr_assert_eq(np, n);
    cr_assert_eq(complete, (size + chunk - 1) / chunk - touched);
    free(pieces);
    free(seen);
}

Test(warm_journal, ranges_normalize_sorts_and_merges)
{
    dlc__warm_ranges s = {0};
    const dlc__warm_range in[] = {{500, 100}, {0, 100}, {100, 50}, {520, 10},
                                  {590, 20},  {900, 1}, {140, 30}, {700, 100}};
    for (size_t i = 0; i < sizeof in / sizeof *in; i++)
        cr_assert_eq(dlc__warm_ranges_add(&s, in[i].off, in[i].len), DLC_OK);
    cr_assert_eq(dlc__warm_ranges_normalize(&s), 170 + 110 + 100 + 1);
    const dlc__warm_range want[] = {{0, 170}, {500, 110}, {700, 100}, {900, 1}};
    assert_ranges(&s, want, 4);
    /* Normalizing again changes nothing. */
    cr_assert_eq(dlc__warm_ranges_normalize(&s), 381);
    assert_ranges(&s, want, 4);
    dlc__warm_ranges_free(&s);
    cr_assert_eq(dlc__warm_ranges_normalize(&s), 0);
}

/* A run with 1000-byte chunks finished chunks 0, 1, 2 and 5 of a 10,500-byte
 * object; the rerun uses 1500-byte chunks. Its chunks 0 and 1 are complete,
 * chunk 3 ([4500, 6000)) is half there and fetches only [4500, 5000). */
Test(warm_journal, coverage_under_another_chunk_size)
{
    char *dir = tmp_mkdtemp();
    char *path = tmp_path(dir, "x.warm-journal");
    const dlc__warm_journal_id id = {.size = 10500,
                                     .id = dlc__warm_journal_key("s3://b/k", "\"e\"")};
    dlc__warm_ranges have = {0};
    uint64_t bytes = 0;
    int fd = -1;
    cr_assert_eq(dlc__warm_journal_open(path, &id, &have, &bytes, &fd), DLC_OK);
    const dlc__warm_range first[] = {{1000, 1000}, {0, 1000}, {5000, 1000}};
    const dlc__warm_range later[] = {{2000, 1000}};
    cr_assert_eq(dlc__warm_journal_append(fd, path, &id, first, 3), DLC_OK);
    cr_assert_eq(dlc__warm_journal_append(fd, path, &id, later, 1), DLC_OK);
    close(fd);

    cr_assert_eq(dlc__warm_journal_open(path, &id, &have, &bytes, &fd), DLC_OK);
    cr_assert_eq(bytes, 4000);
    const dlc__warm_range runs[] = {{0, 3000}, {5000, 1000}};
    assert_ranges(&have, runs, 2);

    dlc__warm_range pieces[16];
    size_t n = gaps_of(&have, 10500, 1500, pieces, 16);
    const dlc__warm_range want[] = {
        {3000, 1500}, {4500, 500}, {6000, 1500}, {7500, 1500}, {9000, 1500}};
    cr_assert_eq(n, 5);
    for (size_t i = 0; i < n; i++)
        cr_assert(pieces[i].off == want[i].off && pieces[i].len == want[i].len, "piece %zu", i);
    uint64_t np = 0, complete = 0;
    dlc__warm_gaps_count(&have, 10500, 1500, &np, &complete);
    cr_assert_eq(np, 5);
    cr_assert_eq(complete, 2);

    /* One chunk larger than the object: the two holes, nothing more. */
    n = gaps_of(&have, 10500, 1u << 20, pieces, 16);
    cr_assert_eq(n, 2);
    cr_assert(pieces[0].off == 3000 && pieces[0].len == 2000);
    cr_assert(pieces[1].off == 6000 && pieces[1].len == 4500);

    /* The rerun journals its pieces; a third run with yet another chunk size
     * finds the union. */
    const dlc__warm_range second[] = {{4500, 500}, {3000, 1500}};
    cr_assert_eq(dlc__warm_journal_append(fd, path, &id, second, 2), DLC_OK);
    close(fd);
    cr_assert_eq(dlc__warm_journal_open(path, &id, &have, &bytes, &fd), DLC_OK);
    close(fd);
    cr_assert_eq(bytes, 6000);
    const dlc__warm_range runs2[] = {{0, 6000}};
    assert_ranges(&have, runs2, 1);
    n = gaps_of(&have, 10500, 4096, pieces, 16);
    cr_assert_eq(n, 2);
    cr_assert(pieces[0].off == 6000 && pieces[0].len == 8192 - 6000);
    cr_assert(pieces[1].off == 8192 && pieces[1].len == 10500 - 8192);
    check_gaps(&have, 10500, 4096);

    dlc__warm_ranges_free(&have);
    free(path);
    tmp_rmdir(dir);
}

Test(warm_journal, gaps_cover_every_missing_byte_once_for_any_chunk_size)
{
    /* Coverage as several runs with different chunk sizes would leave it. */
    dlc__warm_ranges have = {0};
    const dlc__warm_range in[] = {{0, 64},    {192, 64},  {300, 100}, {400, 1},
                                  {700, 300}, {999, 100}, {2000, 5},  {2990, 10}};
    for (size_t i = 0; i < sizeof in / sizeof *in; i++)
        cr_assert_eq(dlc__warm_ranges_add(&have, in[i].off, in[i].len), DLC_OK);
    dlc__warm_ranges_normalize(&have);
    const uint64_t chunks[] = {1, 7, 64, 100, 333, 1000, 1500, 4096, 1u << 20};
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        check_gaps(&have, 3000, chunks[c]);
        check_gaps(&have, 2999, chunks[c]);
        check_gaps(&have, 5000, chunks[c]);
    }
    /* Nothing covered: whole chunks, the last one short. */
    dlc__warm_ranges none = {0};
    dlc__warm_range pieces[8];
    const size_t n = gaps_of(&none, 2500, 1000, pieces, 8);
    cr_assert_eq(n, 3);
    cr_assert(pieces[2].off == 2000 && pieces[2].len == 500);
    check_gaps(&none, 2500, 1000);
    /* Everything covered, and an empty object: no piece at all. */
    dlc__warm_ranges all = {0};
    cr_assert_eq(dlc__warm_ranges_add(&all, 0, 2500), DLC_OK);
    cr_assert_eq(gaps_of(&all, 2500, 1000, pieces, 8), 0);
    cr_assert_eq(gaps_of(&none, 0, 1000, pieces, 8), 0);
    uint64_t np = 1, complete = 1;
    dlc__warm_gaps_count(&all, 2500, 1000, &np, &complete);
    cr_assert(np == 0 && complete == 3);
    dlc__warm_ranges_free(&all);
    dlc__warm_ranges_free(&have);
}

/* A record whose check fails (a torn append, a flipped bit) or that does not
 * lie inside the object ends the journal there: it and every record after it
 * are dropped, and the file is cut so that new records follow good ones. */
Test(warm_journal, torn_or_damaged_record_drops_it_and_the_rest)
{
    char *dir = tmp_mkdtemp();
    char *path = tmp_path(dir, "x.warm-journal");
    const dlc__warm_journal_id id = {.size = 1000,
                                     .id = dlc__warm_journal_key("s3://b/k", "\"e\"")};
    dlc__warm_ranges have = {0};
    uint64_t bytes = 0;
    int fd = -1;
    const dlc__warm_range recs[] = {{0, 100}, {200, 100}, {400, 100}};

    /* A flipped bit in the second record's check. */
    cr_assert_eq(dlc__warm_journal_open(path, &id, &have, &bytes, &fd), DLC_OK);
    cr_assert_eq(dlc__warm_journal_append(fd, path, &id, recs, 3), DLC_OK);
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, 32 + 24 + 20), 1);
    b ^= 0x10;
    cr_assert_eq(pwrite(fd, &b, 1, 32 + 24 + 20), 1);
    close(fd);
    cr_assert_eq(dlc__warm_journal_open(path, &id, &have, &bytes, &fd), DLC_OK);
    cr_assert_eq(bytes, 100);
    assert_ranges(&have, recs, 1);
    cr_assert_eq(file_size(path), 32 + 24);

    /* A record cut short by a crash. */
    cr_assert_eq(dlc__warm_journal_append(fd, path, &id, recs + 1, 2), DLC_OK);
    cr_assert_eq(ftruncate(fd, 32 + 3 * 24 - 5), 0);
    close(fd);
    cr_assert_eq(dlc__warm_journal_open(path, &id, &have, &bytes, &fd), DLC_OK);
    cr_assert_eq(bytes, 200);
    cr_assert_eq(file_size(path), 32 + 2 * 24);

    /* A record with a good check that reaches past the object's end, and one
     * of length 0: only a damaged or hostile file says that. */
    const dlc__warm_range bad[] = {{900, 200}, {500, 0}};
    for (size_t i = 0; i < 2; i++) {
        uint8_t rec[24];
        put64(rec, bad[i].off);
        put64(rec + 8, bad[i].len);
        put64(rec + 16, XXH3_64bits_withSeed(rec, 16, id.id));
        cr_assert_eq(pwrite(fd, rec, 24, 32 + 2 * 24), 24);
        const dlc__warm_range after[] = {{600, 100}};
        cr_assert_eq(dlc__warm_journal_append(fd, path, &id, after, 1), DLC_OK);
        close(fd);
        cr_assert_eq(dlc__warm_journal_open(path, &id, &have, &bytes, &fd), DLC_OK);
        cr_assert_eq(bytes, 200, "record %zu", i);
        cr_assert_eq(file_size(path), 32 + 2 * 24);
    }
    close(fd);
    dlc__warm_ranges_free(&have);
    free(path);
    tmp_rmdir(dir);
}

/* Write a journal of @p id with one record, then open it as @p as. */
static uint64_t reopen_as(const char *path, const dlc__warm_journal_id *id,
                          const dlc__warm_journal_id *as)
{
    unlink(path);
    dlc__warm_ranges have = {0};
    uint64_t bytes = 0;
    int fd = -1;
    cr_assert_eq(dlc__warm_journal_open(path, id, &have, &bytes, &fd), DLC_OK);
    const dlc__warm_range r = {0, 100};
    cr_assert_eq(dlc__warm_journal_append(fd, path, id, &r, 1), DLC_OK);
    close(fd);
    cr_assert_eq(dlc__warm_journal_open(path, as, &have, &bytes, &fd), DLC_OK);
    cr_assert_eq(have.n, bytes ? 1 : 0);
    close(fd);
    dlc__warm_ranges_free(&have);
    return bytes;
}

Test(warm_journal, a_journal_of_another_object_is_started_over)
{
    char *dir = tmp_mkdtemp();
    char *path = tmp_path(dir, "x.warm-journal");
    const dlc__warm_journal_id id = {.size = 1000,
                                     .id = dlc__warm_journal_key("s3://b/k", "\"e\"")};
    const dlc__warm_journal_id other_source = {
        .size = 1000, .id = dlc__warm_journal_key("s3://b/other", "\"e\"")};
    const dlc__warm_journal_id other_etag = {.size = 1000,
                                             .id = dlc__warm_journal_key("s3://b/k", "\"f\"")};
    const dlc__warm_journal_id other_size = {.size = 1001, .id = id.id};
    cr_assert_eq(reopen_as(path, &id, &id), 100);
    cr_assert_eq(reopen_as(path, &id, &other_source), 0);
    cr_assert_eq(file_size(path), 32);
    cr_assert_eq(reopen_as(path, &id, &other_etag), 0);
    cr_assert_eq(file_size(path), 32);
    cr_assert_eq(reopen_as(path, &id, &other_size), 0);
    cr_assert_eq(file_size(path), 32);
    /* The record the foreign journal held is gone for good: the journal now
     * belongs to the other object. */
    dlc__warm_ranges have = {0};
    uint64_t bytes = 1;
    int fd = -1;
    cr_assert_eq(dlc__warm_journal_open(path, &other_size, &have, &bytes, &fd), DLC_OK);
    cr_assert_eq(bytes, 0);
    close(fd);
    dlc__warm_ranges_free(&have);
    free(path);
    tmp_rmdir(dir);
}

/* A journal of the first format (chunk indices, "DLCWARM1", 40-byte header
 * and 16-byte records, every hash right) must not be read as byte ranges. */
Test(warm_journal, a_version_1_journal_is_ignored_never_misread)
{
    char *dir = tmp_mkdtemp();
    char *path = tmp_path(dir, "x.warm-journal");
    const dlc__warm_journal_id id = {.size = 1u << 20,
                                     .id = dlc__warm_journal_key("s3://b/k", "\"e\"")};
    uint8_t v1[40 + 3 * 16];
    memcpy(v1, "DLCWARM1", 8);
    put64(v1 + 8, id.size);
    put64(v1 + 16, 64u << 10);
    put64(v1 + 24, id.id);
    put64(v1 + 32, XXH3_64bits(v1, 32));
    for (uint64_t i = 0; i < 3; i++) {
        uint8_t c[8];
        put64(c, i);
        put64(v1 + 40 + i * 16, i);
        put64(v1 + 40 + i * 16 + 8, XXH3_64bits_withSeed(c, 8, id.id));
    }
    FILE *f = fopen(path, "wb");
    cr_assert_eq(fwrite(v1, 1, sizeof v1, f), sizeof v1);
    fclose(f);
    dlc__warm_ranges have = {0};
    uint64_t bytes = 1;
    int fd = -1;
    cr_assert_eq(dlc__warm_journal_open(path, &id, &have, &bytes, &fd), DLC_OK);
    cr_assert_eq(bytes, 0);
    cr_assert_eq(have.n, 0);
    cr_assert_eq(file_size(path), 32);
    uint8_t magic[8];
    cr_assert_eq(pread(fd, magic, 8, 0), 8);
    cr_assert_eq(memcmp(magic, "DLCWARM2", 8), 0);
    close(fd);

    /* Shorter than a header, or garbage of a header's length: started over. */
    static const char *const junk[] = {"", "DLCWARM2",
                                       ("DLCWARM2\x01\x02\x03\x04\x05\x06\x07\x08"
                                        "0123456789abcdef0123456789abcdef")};
    for (size_t i = 0; i < 3; i++) {
        f = fopen(path, "wb");
        fputs(junk[i], f);
        fclose(f);
        cr_assert_eq(dlc__warm_journal_open(path, &id, &have, &bytes, &fd), DLC_OK);
        cr_assert_eq(bytes, 0);
        cr_assert_eq(file_size(path), 32);
        close(fd);
    }
    dlc__warm_ranges_free(&have);
    free(path);
    tmp_rmdir(dir);
}
