/* The held directories of common/platform.c: dlc__open_parent_dir() checks a folder once, and the
 * *_at helpers create, replace and remove relative to it, so a folder renamed or swapped for a
 * link after the check takes nothing elsewhere (issue 23's leftover, end to end in
 * tests/e2e/warm_swap.sh). */
#include "common.h"
#include "tmpdir_util.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TMPDIR_SUITE(platform);

static char *sub(const char *name)
{
    return tmp_path(dir, name);
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

Test(platform, the_parent_folder_is_held_through_a_swap)
{
    char *held = sub("held"), *moved = sub("moved"), *other = sub("other");
    cr_assert_eq(mkdir(held, 0755), 0);
    cr_assert_eq(mkdir(other, 0755), 0);
    char dest[4200], part[4200];
    snprintf(dest, sizeof dest, "%s/obj", held);
    snprintf(part, sizeof part, "%s/obj.part", held);
    int dfd = -1;
    cr_assert_eq(dlc__open_parent_dir(dest, "the destination", &dfd), DLC_OK, "%s", dlc_errmsg());
    /* The co-tenant's move: the folder renamed, a link to another in its place. */
    cr_assert_eq(rename(held, moved), 0);
    cr_assert_eq(symlink(other, held), 0);
    int fd = -1;
    cr_assert_eq(dlc__create_own_at(dfd, part, O_RDWR, &fd), DLC_OK, "%s", dlc_errmsg());
    close(fd);
    cr_assert_eq(dlc__replace_file_at(dfd, dest, "x", 1), DLC_OK, "%s", dlc_errmsg());
    char in_moved[4300], in_other[4300];
    snprintf(in_moved, sizeof in_moved, "%s/obj.part", moved);
    cr_expect(exists(in_moved), "the part file is not in the folder that was checked");
    snprintf(in_moved, sizeof in_moved, "%s/obj", moved);
    cr_expect(exists(in_moved), "the replaced file is not in the folder that was checked");
    snprintf(in_other, sizeof in_other, "%s/obj", other);
    cr_expect(!exists(in_other), "a file was made through the link");
    cr_expect_eq(dlc__fsync_dir_at(dfd, dest), DLC_OK);
    close(dfd);
    free(held);
    free(moved);
    free(other);
}

Test(platform, a_linked_parent_folder_is_refused_by_name)
{
    char *real = sub("real"), *link = sub("link");
    cr_assert_eq(mkdir(real, 0755), 0);
    cr_assert_eq(symlink(real, link), 0);
    char dest[4200];
    snprintf(dest, sizeof dest, "%s/obj", link);
    int fd = 123;
    cr_expect_eq(dlc__open_parent_dir(dest, "the destination", &fd), -ELOOP);
    cr_expect_eq(fd, -1);
    cr_expect_not_null(strstr(dlc_errmsg(), link), "%s", dlc_errmsg());
    cr_expect_not_null(strstr(dlc_errmsg(), "symbolic link"), "%s", dlc_errmsg());
    free(real);
    free(link);
}

Test(platform, a_parent_that_is_a_file_is_refused)
{
    char *file = sub("file");
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fclose(f);
    char dest[4200];
    snprintf(dest, sizeof dest, "%s/obj", file);
    int fd = -1;
    cr_expect_eq(dlc__open_parent_dir(dest, "the destination", &fd), DLC_EINVAL);
    cr_expect_not_null(strstr(dlc_errmsg(), "not a directory"), "%s", dlc_errmsg());
    free(file);
}

Test(platform, a_bare_name_holds_the_working_folder)
{
    int fd = -1;
    cr_assert_eq(dlc__open_parent_dir("obj", "the destination", &fd), DLC_OK, "%s", dlc_errmsg());
    cr_expect_str_eq(dlc__at_name(fd, "a/b/obj"), "obj");
    cr_expect_str_eq(dlc__at_name(AT_FDCWD, "a/b/obj"), "a/b/obj");
    close(fd);
}

Test(platform, a_link_planted_in_the_held_folder_is_refused)
{
    char *target = sub("target"), *name = sub("obj.lock");
    FILE *f = fopen(target, "w");
    cr_assert_not_null(f);
    fputs("precious", f);
    fclose(f);
    cr_assert_eq(symlink(target, name), 0);
    int dfd = -1, fd = -1;
    cr_assert_eq(dlc__open_parent_dir(name, "the destination", &dfd), DLC_OK);
    cr_expect_eq(dlc__open_own_at(dfd, name, O_RDWR | O_CREAT, &fd), -ELOOP);
    cr_expect_eq(dlc__create_own_at(dfd, name, O_RDWR, &fd), -ELOOP);
    cr_expect_not_null(strstr(dlc_errmsg(), name), "%s", dlc_errmsg());
    struct stat st;
    cr_expect(stat(target, &st) == 0 && st.st_size == 8, "the link's target changed");
    close(dfd);
    free(target);
    free(name);
}
