/* The push journal (cache/warm/warm_push_journal.c): an upload id and the parts the server
 * confirmed, read back by a rerun of the same file to the same destination; a torn or damaged
 * record is dropped with everything after it; another version of the file gives its upload id back
 * as stale (to abort) and is started over; another destination is ignored; a second push of the
 * same file is refused while the first holds the journal; the completion record; the state
 * directory and the journal's name. */
#include "tmpdir_util.h"
#include "warm_internal.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TMPDIR_SUITE(warm_push_journal);

/* 10 MiB + 5 bytes in parts of 1 MiB: 11 parts, the last of 5 bytes. */
static const dlc__push_ident ident = {
    .size = (10u << 20) + 5, .inode = 1234, .mtime_ns = 1700000000123456789, .dest = 0xd1};
#define PART (1u << 20)
#define UPLOAD "2~hGd-example_upload.ID/with+odd=chars"

static void md5_of_part(uint32_t part, uint8_t md5[16])
{
    for (int i = 0; i < 16; i++)
        md5[i] = (uint8_t)(part * 17 + (uint32_t)i);
}

static uint64_t len_of_part(uint32_t part)
{
    return part < 11 ? PART : 5;
}

static char *journal_with_parts(const uint32_t *parts, size_t n)
{
    char *path = tmp_path(dir, "push.journal");
    dlc__push_journal j;
    int matched = -1;
    char stale[DLC__PUSH_ID_MAX];
    cr_assert_eq(dlc__push_journal_open(&j, path, &ident, &matched, stale, sizeof stale), DLC_OK,
                 "%s", dlc_errmsg());
    cr_assert_eq(matched, 0);
    cr_assert_str_eq(stale, "");
    cr_assert_eq(dlc__push_journal_start(&j, PART, UPLOAD), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(j.nparts, 11);
    for (size_t i = 0; i < n; i++) {
        uint8_t md5[16];
        md5_of_part(parts[i], md5);
        cr_assert_eq(dlc__push_journal_part(&j, parts[i], len_of_part(parts[i]), md5), DLC_OK);
    }
    dlc__push_journal_close(&j, 0);
    return path;
}

static void reopen(const char *path, const dlc__push_ident *id, dlc__push_journal *j, int *matched,
                   char *stale)
{
    cr_assert_eq(dlc__push_journal_open(j, path, id, matched, stale, DLC__PUSH_ID_MAX), DLC_OK,
                 "%s", dlc_errmsg());
}

Test(warm_push_journal, a_rerun_reads_the_upload_and_its_parts)
{
    const uint32_t parts[] = {3, 1, 11, 7};
    char *path = journal_with_parts(parts, 4);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "the journal holds a GCS session URI: owner only");

    dlc__push_journal j;
    int matched = 0;
    char stale[DLC__PUSH_ID_MAX];
    reopen(path, &ident, &j, &matched, stale);
    cr_assert_eq(matched, 1);
    cr_assert_str_eq(j.upload_id, UPLOAD);
    cr_assert_eq(j.part_size, PART);
    cr_assert_eq(j.nparts, 11);
    for (uint32_t p = 1; p <= 11; p++) {
        const int want = p == 1 || p == 3 || p == 7 || p == 11;
        cr_assert_eq(j.have[p - 1], want, "part %u", p);
        if (want) {
            uint8_t md5[16];
            md5_of_part(p, md5);
            cr_assert_eq(memcmp(j.md5s + 16 * (p - 1), md5, 16), 0, "part %u's MD5", p);
        }
    }
    cr_assert_eq(j.complete, 0);
    /* Parts that do not exist, or with the wrong length, are refused before they are written. */
    uint8_t md5[16] = {0};
    cr_assert_eq(dlc__push_journal_part(&j, 12, 5, md5), DLC_EINVAL);
    cr_assert_eq(dlc__push_journal_part(&j, 0, PART, md5), DLC_EINVAL);
    cr_assert_eq(dlc__push_journal_part(&j, 2, PART - 1, md5), DLC_EINVAL);
    cr_assert_eq(dlc__push_journal_complete(&j, md5, 11), DLC_OK);
    dlc__push_journal_close(&j, 0);

    reopen(path, &ident, &j, &matched, stale);
    cr_assert_eq(matched, 1);
    cr_assert_eq(j.complete, 1);
    cr_assert_eq(j.final_parts, 11);
    dlc__push_journal_close(&j, 1);
    cr_assert_neq(access(path, F_OK), 0, "close with remove leaves the journal");
    free(path);
}

Test(warm_push_journal, a_torn_or_damaged_record_drops_it_and_the_rest)
{
    const uint32_t parts[] = {1, 2, 3, 4};
    char *path = journal_with_parts(parts, 4);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    const off_t header = 56 + (off_t)strlen(UPLOAD) + 8;
    cr_assert_eq(st.st_size, header + 4 * 40);

    /* A flipped byte in the third record's MD5: records 1 and 2 stay. */
    int fd = open(path, O_RDWR);
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, header + 2 * 40 + 20), 1);
    b ^= 0x10;
    cr_assert_eq(pwrite(fd, &b, 1, header + 2 * 40 + 20), 1);
    close(fd);
    dlc__push_journal j;
    int matched = 0;
    char stale[DLC__PUSH_ID_MAX];
    reopen(path, &ident, &j, &matched, stale);
    cr_assert_eq(matched, 1);
    cr_assert(j.have[0] && j.have[1] && !j.have[2] && !j.have[3]);
    /* A new record goes right after the good ones. */
    uint8_t md5[16];
    md5_of_part(5, md5);
    cr_assert_eq(dlc__push_journal_part(&j, 5, PART, md5), DLC_OK);
    dlc__push_journal_close(&j, 0);
    reopen(path, &ident, &j, &matched, stale);
    cr_assert(j.have[0] && j.have[1] && !j.have[2] && !j.have[3] && j.have[4]);
    dlc__push_journal_close(&j, 0);

    /* A torn append: half a record at the end. */
    fd = open(path, O_WRONLY | O_APPEND);
    const uint8_t half[20] = {6};
    cr_assert_eq(write(fd, half, sizeof half), (ssize_t)sizeof half);
    close(fd);
    reopen(path, &ident, &j, &matched, stale);
    cr_assert_eq(matched, 1);
    cr_assert(j.have[4] && !j.have[5]);
    dlc__push_journal_close(&j, 0);

    /* A damaged header: nothing of it is believed. */
    fd = open(path, O_RDWR);
    cr_assert_eq(pwrite(fd, "X", 1, 60), 1);
    close(fd);
    reopen(path, &ident, &j, &matched, stale);
    cr_assert_eq(matched, 0);
    cr_assert_str_eq(stale, "");
    dlc__push_journal_close(&j, 0);
    free(path);
}

Test(warm_push_journal, another_version_of_the_file_is_stale_another_destination_ignored)
{
    const uint32_t parts[] = {1, 2};
    char *path = journal_with_parts(parts, 2);
    dlc__push_journal j;
    int matched = 1;
    char stale[DLC__PUSH_ID_MAX];
    const dlc__push_ident changed[] = {
        {ident.size + 1, ident.inode, ident.mtime_ns, ident.dest},
        {ident.size, ident.inode + 1, ident.mtime_ns, ident.dest},
        {ident.size, ident.inode, ident.mtime_ns + 1, ident.dest},
    };
    for (size_t i = 0; i < 3; i++) {
        reopen(path, &changed[i], &j, &matched, stale);
        cr_assert_eq(matched, 0, "change %zu", i);
        cr_assert_str_eq(stale, UPLOAD, "change %zu: the old upload is not offered to abort", i);
        dlc__push_journal_close(&j, 0);
    }
    const dlc__push_ident other = {ident.size, ident.inode, ident.mtime_ns, ident.dest + 1};
    reopen(path, &other, &j, &matched, stale);
    cr_assert_eq(matched, 0);
    cr_assert_str_eq(stale, "");
    /* Starting over replaces it. */
    cr_assert_eq(dlc__push_journal_start(&j, 2 * PART, "new-id"), DLC_OK);
    dlc__push_journal_close(&j, 0);
    reopen(path, &other, &j, &matched, stale);
    cr_assert_eq(matched, 1);
    cr_assert_str_eq(j.upload_id, "new-id");
    cr_assert_eq(j.part_size, 2 * PART);
    cr_assert_eq(j.nparts, 6);
    cr_assert_eq(j.have[0] + j.have[1], 0);
    dlc__push_journal_close(&j, 0);
    free(path);
}

Test(warm_push_journal, a_second_push_of_the_same_file_is_refused)
{
    char *path = tmp_path(dir, "busy.journal");
    dlc__push_journal a, b;
    int matched;
    cr_assert_eq(dlc__push_journal_open(&a, path, &ident, &matched, NULL, 0), DLC_OK);
    cr_assert_eq(dlc__push_journal_open(&b, path, &ident, &matched, NULL, 0), DLC_ESTATE);
    cr_assert_not_null(strstr(dlc_errmsg(), "another push"), "%s", dlc_errmsg());
    dlc__push_journal_close(&b, 0);
    dlc__push_journal_close(&a, 0);
    cr_assert_eq(dlc__push_journal_open(&b, path, &ident, &matched, NULL, 0), DLC_OK);
    dlc__push_journal_close(&b, 1);
    free(path);
}

Test(warm_push_journal, the_state_directory_and_the_journals_name)
{
    char *state = tmp_path(dir, "state/deeper");
    char *src = tmp_path(dir, "store.dlc");
    const int fd = open(src, O_WRONLY | O_CREAT, 0644);
    close(fd);
    char a[4096], b[4096], c[4096];
    cr_assert_eq(dlc__push_journal_path(state, src, "s3://b/k", a, sizeof a), DLC_OK, "%s",
                 dlc_errmsg());
    struct stat st;
    cr_assert_eq(stat(state, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700);
    cr_assert_eq(strncmp(a, state, strlen(state)), 0, "%s", a);
    cr_assert_not_null(strstr(a, "/push-"));
    /* The same file by another path name is the same journal; another destination is not. */
    char *dotted = tmp_path(dir, "./store.dlc");
    cr_assert_eq(dlc__push_journal_path(state, dotted, "s3://b/k", b, sizeof b), DLC_OK);
    cr_assert_str_eq(a, b);
    cr_assert_eq(dlc__push_journal_path(state, src, "s3://b/k2", c, sizeof c), DLC_OK);
    cr_assert_str_neq(a, c);
    cr_assert_eq(dlc__push_journal_path(state, "/nonexistent/x", "s3://b/k", c, sizeof c), -ENOENT);
    free(dotted);
    free(src);
    free(state);
}

Test(warm_push_journal, a_link_is_refused_and_the_journal_removed_where_it_was_opened)
{
    /* A link planted as the journal: refused naming it, its target untouched. */
    char *target = tmp_path(dir, "victim");
    char *link = tmp_path(dir, "linked.journal");
    int fd = open(target, O_WRONLY | O_CREAT, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "keep", 4), 4);
    close(fd);
    cr_assert_eq(symlink(target, link), 0);
    dlc__push_journal j;
    int matched;
    cr_assert_eq(dlc__push_journal_open(&j, link, &ident, &matched, NULL, 0), -ELOOP);
    cr_assert_not_null(strstr(dlc_errmsg(), "linked.journal"), "%s", dlc_errmsg());
    dlc__push_journal_close(&j, 1);
    struct stat st;
    cr_assert_eq(stat(target, &st), 0);
    cr_assert_eq(st.st_size, 4, "the link's target was written");
    cr_assert_eq(lstat(link, &st), 0, "the planted link was removed");

    /* The journal's folder swapped for a link to another one while it is open: the removal at
     * the end happens in the folder it was opened in, nothing in the other. */
    char *held = tmp_path(dir, "held");
    char *moved = tmp_path(dir, "held.moved");
    char *other = tmp_path(dir, "other");
    cr_assert_eq(mkdir(held, 0700), 0);
    cr_assert_eq(mkdir(other, 0700), 0);
    char path[4096], planted[4096], kept[4096];
    snprintf(path, sizeof path, "%s/p.journal", held);
    snprintf(planted, sizeof planted, "%s/p.journal", other);
    snprintf(kept, sizeof kept, "%s/p.journal", moved);
    cr_assert_eq(dlc__push_journal_open(&j, path, &ident, &matched, NULL, 0), DLC_OK, "%s",
                 dlc_errmsg());
    fd = open(planted, O_WRONLY | O_CREAT, 0644);
    close(fd);
    cr_assert_eq(rename(held, moved), 0);
    cr_assert_eq(symlink(other, held), 0);
    dlc__push_journal_close(&j, 1);
    cr_assert_eq(stat(planted, &st), 0, "a file in the link's target was removed");
    cr_assert_neq(stat(kept, &st), 0, "the journal was not removed where it was opened");
    free(target), free(link), free(held), free(moved), free(other);
}
