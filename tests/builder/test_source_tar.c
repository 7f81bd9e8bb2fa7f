/* The WebDataset tar reader: grouping by key, labels from KEY.cls, the tar
 * dialects (ustar prefix, GNU long names, pax paths, base-256 sizes), and
 * damaged shards. The shards are written byte by byte here, so each odd
 * header is exactly what the test says. */
#include "source.h"
#include "build_test_util.h"

#include <dlcache/status.h>

#include <criterion/criterion.h>
#include <errno.h>

TMPDIR_SUITE(source_tar);

typedef struct tarw {
    uint8_t *buf;
    size_t len, cap;
} tarw;

static void tw_put(tarw *t, const void *p, size_t n)
{
    if (t->len + n + 512 > t->cap) {
        t->cap = (t->len + n + 512) * 2;
        t->buf = realloc(t->buf, t->cap);
        cr_assert(t->buf != NULL);
    }
    memcpy(t->buf + t->len, p, n);
    t->len += n;
}

static void tw_pad(tarw *t)
{
    static const uint8_t zero[512];
    if (t->len % 512)
        tw_put(t, zero, 512 - t->len % 512);
}

enum { POSIX = 0, GNU = 1 };

/* A header; @p name may fill all 100 bytes without a NUL. */
static void tw_header(tarw *t, const char *name, const char *prefix, char type, uint64_t size,
                      int dialect)
{
    uint8_t h[512] = {0};
    memcpy(h, name, strnlen(name, 100));
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0001750", 8);
    memcpy(h + 116, "0001750", 8);
    if (size < 077777777777ull) {
        /* Through a buffer wide enough for any value: gcc cannot see that the bound above keeps
         * the text at 11 digits, and warns (format-truncation) when it goes straight in. */
        char octal[24];
        snprintf(octal, sizeof octal, "%011llo", (unsigned long long)size);
        memcpy(h + 124, octal, 12);
    } else {
        /* GNU base-256 for sizes an 11-digit octal field cannot hold. */
        h[124] = 0x80;
        for (int i = 0; i < 8; i++)
            h[135 - i] = (uint8_t)(size >> (8 * i));
    }
    snprintf((char *)h + 136, 12, "%011o", 01234567012);
    h[156] = (uint8_t)type;
    if (dialect == GNU) {
        memcpy(h + 257, "ustar  ", 8);
    } else {
        memcpy(h + 257, "ustar", 6);
        memcpy(h + 263, "00", 2);
        if (prefix)
            memcpy(h + 345, prefix, strnlen(prefix, 155));
    }
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    tw_put(t, h, 512);
}

static void tw_file(tarw *t, const char *name, const void *data, size_t size)
{
    tw_header(t, name, NULL, '0', size, POSIX);
    tw_put(t, data, size);
    tw_pad(t);
}

static void tw_str(tarw *t, const char *name, const char *text)
{
    tw_file(t, name, text, strlen(text));
}

static void tw_end(tarw *t)
{
    static const uint8_t zero[1024];
    tw_put(t, zero, sizeof zero);
}

/* Write the shard to dir/NAME and scan it into @p s. */
static dlc_status tw_scan(tarw *t, const char *name, dlc__source_set *s)
{
    char *p = tmp_path(dir, name);
    btu_write(p, t->buf, t->len);
    free(p);
    free(t->buf);
    memset(t, 0, sizeof *t);
    dlc__source_init(s);
    p = tmp_path(dir, name);
    const dlc_status rc = dlc__source_add(s, p);
    free(p);
    return rc;
}

static const char *member(const dlc__source_set *s, size_t i)
{
    const char *p = dlc__source_path(s, &s->items[i]);
    const char *colon = strstr(p, ".tar:");
    cr_assert(colon != NULL, "no SHARD:MEMBER in %s", p);
    return colon + 5;
}

static void expect_data(const dlc__source_set *s, size_t i, const char *want)
{
    uint8_t *buf = NULL;
    size_t cap = 0;
    dlc__source_data d;
    char why[256];
    cr_assert_eq(dlc__source_read(s, i, &buf, &cap, &d, why, sizeof why), DLC_OK, "%s", why);
    cr_assert_eq(d.size, strlen(want));
    cr_assert(memcmp(d.data, want, d.size) == 0);
    free(buf);
}

Test(source_tar, samples_in_tar_order)
{
    tarw t = {0};
    tw_str(&t, "s/000.jpg", "JPEG-zero");
    tw_str(&t, "s/000.cls", "4\n");
    tw_str(&t, "s/000.json", "{}");
    tw_str(&t, "s/001.cls", " 2 ");
    tw_str(&t, "s/001.JPEG", "JPEG-one");
    tw_header(&t, "s/", NULL, '5', 0, POSIX); /* a directory member */
    tw_str(&t, "s/002.jpg", "JPEG-two");
    tw_str(&t, "s/002.cls", "0");
    tw_end(&t);
    dlc__source_set s;
    cr_assert_eq(tw_scan(&t, "a.tar", &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(s.count, 3);
    cr_assert_str_eq(member(&s, 0), "s/000.jpg");
    cr_assert_str_eq(member(&s, 1), "s/001.JPEG", "extensions compare without case");
    cr_assert_str_eq(member(&s, 2), "s/002.jpg");
    cr_assert_eq(s.items[0].label, 4);
    cr_assert_eq(s.items[1].label, 2);
    cr_assert_eq(s.items[2].label, 0);
    for (size_t i = 0; i < 3; i++)
        cr_assert_eq(s.items[i].skip, DLC__SKIP_NONE);
    cr_assert_eq(s.items[0].mtime_ns, (int64_t)01234567012 * 1000000000);
    expect_data(&s, 0, "JPEG-zero");
    expect_data(&s, 1, "JPEG-one");
    expect_data(&s, 2, "JPEG-two");
    cr_assert_eq(dlc__source_num_labels(&s), 5);
    dlc__source_free(&s);
}

Test(source_tar, incomplete_samples_are_items_with_a_reason)
{
    tarw t = {0};
    tw_str(&t, "a.jpg", "A"); /* no a.cls */
    tw_str(&t, "b.jpg", "B");
    tw_str(&t, "b.cls", "cat"); /* not a number */
    tw_str(&t, "c.cls", "1");   /* no image */
    tw_str(&t, "d.png", "D");   /* not a JPEG */
    tw_str(&t, "d.cls", "2");
    tw_str(&t, "e.txt", "only text"); /* not a sample at all */
    tw_str(&t, "noext", "x");         /* no extension: not a member of a sample */
    tw_str(&t, "f.jpg", "F");
    tw_str(&t, "f.cls", "3");
    tw_end(&t);
    dlc__source_set s;
    cr_assert_eq(tw_scan(&t, "b.tar", &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(s.count, 5);
    cr_assert_eq(s.items[0].skip, DLC__SKIP_NO_CLS);
    cr_assert_eq(s.items[1].skip, DLC__SKIP_BAD_CLS);
    cr_assert_eq(s.items[2].skip, DLC__SKIP_NO_JPEG);
    cr_assert_eq(s.items[3].skip, DLC__SKIP_NOT_JPEG);
    cr_assert_eq(s.items[4].skip, DLC__SKIP_NONE);
    cr_assert_str_eq(member(&s, 0), "a.jpg");
    cr_assert_str_eq(member(&s, 2), "c");
    cr_assert_str_eq(member(&s, 3), "d.png");
    cr_assert_eq(s.items[4].label, 3);
    dlc__source_free(&s);
}

Test(source_tar, same_key_again_is_a_new_sample)
{
    tarw t = {0};
    tw_str(&t, "k.jpg", "1");
    tw_str(&t, "k.cls", "0");
    tw_str(&t, "k.jpg", "2");
    tw_str(&t, "k.cls", "1");
    tw_end(&t);
    dlc__source_set s;
    cr_assert_eq(tw_scan(&t, "c.tar", &s), DLC_OK);
    cr_assert_eq(s.count, 2);
    cr_assert_eq(s.items[1].label, 1);
    expect_data(&s, 1, "2");
    dlc__source_free(&s);
}

Test(source_tar, long_names_ustar_prefix_gnu_and_pax)
{
    tarw t = {0};
    /* ustar: prefix + name. */
    tw_header(&t, "k1.jpg", "deep/folder/of/shards", '0', 2, POSIX);
    tw_put(&t, "P1", 2);
    tw_pad(&t);
    tw_header(&t, "k1.cls", "deep/folder/of/shards", '0', 1, POSIX);
    tw_put(&t, "1", 1);
    tw_pad(&t);
    /* A name of exactly 100 bytes, no NUL. */
    char n100[101];
    memset(n100, 'n', 100);
    memcpy(n100 + 96, ".jpg", 4);
    n100[100] = '\0';
    tw_file(&t, n100, "H", 1);
    char c100[101];
    memcpy(c100, n100, 101);
    memcpy(c100 + 96, ".cls", 4);
    tw_file(&t, c100, "2", 1);
    /* GNU long name: an 'L' member holds the next member's name. */
    char longname[300];
    memset(longname, 'g', sizeof longname);
    memcpy(longname + 250, "/key.jpg", 9);
    tw_header(&t, "././@LongLink", NULL, 'L', strlen(longname) + 1, GNU);
    tw_put(&t, longname, strlen(longname) + 1);
    tw_pad(&t);
    tw_header(&t, "truncated-name", NULL, '0', 2, GNU);
    tw_put(&t, "G1", 2);
    tw_pad(&t);
    longname[254] = '\0'; /* keep "/key", drop ".jpg" */
    strcat(longname, ".cls");
    tw_header(&t, "././@LongLink", NULL, 'L', strlen(longname) + 1, GNU);
    tw_put(&t, longname, strlen(longname) + 1);
    tw_pad(&t);
    tw_header(&t, "truncated-name2", NULL, '0', 1, GNU);
    tw_put(&t, "3", 1);
    tw_pad(&t);
    /* pax: a path record. */
    const char *pax = "27 path=pax/dir/sample.jpg\n";
    tw_header(&t, "PaxHeaders/x", NULL, 'x', strlen(pax), POSIX);
    tw_put(&t, pax, strlen(pax));
    tw_pad(&t);
    tw_header(&t, "short.jpg", NULL, '0', 2, POSIX);
    tw_put(&t, "X1", 2);
    tw_pad(&t);
    tw_str(&t, "pax/dir/sample.cls", "4");
    tw_end(&t);

    dlc__source_set s;
    cr_assert_eq(tw_scan(&t, "long.tar", &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(s.count, 4);
    cr_assert_str_eq(member(&s, 0), "deep/folder/of/shards/k1.jpg");
    cr_assert_str_eq(member(&s, 1), n100);
    char want[300];
    memset(want, 'g', 250);
    memcpy(want + 250, "/key.jpg", 9);
    cr_assert_str_eq(member(&s, 2), want);
    cr_assert_str_eq(member(&s, 3), "pax/dir/sample.jpg");
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(s.items[i].skip, DLC__SKIP_NONE, "item %zu: skip %u", i, s.items[i].skip);
        cr_assert_eq(s.items[i].label, (int64_t)i + 1);
    }
    expect_data(&s, 2, "G1");
    expect_data(&s, 3, "X1");
    dlc__source_free(&s);
}

Test(source_tar, base256_size)
{
    tarw t = {0};
    tw_header(&t, "a.jpg", NULL, '0', 3, POSIX);
    /* Rewrite the size field as GNU base-256 and fix the checksum. */
    uint8_t *h = t.buf;
    memset(h + 124, 0, 12);
    h[124] = 0x80;
    h[135] = 3;
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    tw_put(&t, "abc", 3);
    tw_pad(&t);
    tw_str(&t, "a.cls", "0");
    tw_end(&t);
    dlc__source_set s;
    cr_assert_eq(tw_scan(&t, "b256.tar", &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(s.count, 1);
    expect_data(&s, 0, "abc");
    dlc__source_free(&s);
}

Test(source_tar, no_end_blocks_is_fine)
{
    tarw t = {0};
    tw_str(&t, "a.jpg", "A");
    tw_str(&t, "a.cls", "0");
    dlc__source_set s;
    cr_assert_eq(tw_scan(&t, "noend.tar", &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(s.count, 1);
    dlc__source_free(&s);
}

Test(source_tar, bad_checksum_names_shard_and_offset)
{
    tarw t = {0};
    tw_str(&t, "a.jpg", "A");
    tw_str(&t, "a.cls", "0");
    tw_str(&t, "b.jpg", "B");
    t.buf[2048 + 5] ^= 0x01; /* inside the name of the third header */
    tw_end(&t);
    dlc__source_set s;
    cr_assert_eq(tw_scan(&t, "bad.tar", &s), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "bad.tar") != NULL, "%s", dlc_errmsg());
    cr_assert(strstr(dlc_errmsg(), "byte 2048") != NULL, "%s", dlc_errmsg());
    dlc__source_free(&s);
}

Test(source_tar, truncated_member_data)
{
    tarw t = {0};
    tw_str(&t, "a.jpg", "A");
    tw_str(&t, "a.cls", "0");
    char big[3000];
    memset(big, 'z', sizeof big);
    tw_file(&t, "b.jpg", big, sizeof big);
    t.len -= 2048; /* cut inside b.jpg's data */
    dlc__source_set s;
    cr_assert_eq(tw_scan(&t, "trunc.tar", &s), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "trunc.tar") != NULL, "%s", dlc_errmsg());
    cr_assert(strstr(dlc_errmsg(), "truncated") != NULL, "%s", dlc_errmsg());
    dlc__source_free(&s);
}

Test(source_tar, truncated_header)
{
    tarw t = {0};
    tw_str(&t, "a.jpg", "A");
    tw_str(&t, "a.cls", "0");
    tw_header(&t, "b.jpg", NULL, '0', 1, POSIX);
    t.len -= 300;
    dlc__source_set s;
    cr_assert_eq(tw_scan(&t, "trunch.tar", &s), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "truncated") != NULL, "%s", dlc_errmsg());
    dlc__source_free(&s);
}

Test(source_tar, not_a_tar)
{
    char *p = tmp_path(dir, "text.tar");
    char junk[2048];
    memset(junk, 'x', sizeof junk);
    btu_write(p, junk, sizeof junk);
    dlc__source_set s;
    dlc__source_init(&s);
    cr_assert_eq(dlc__source_add(&s, p), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "checksum") != NULL, "%s", dlc_errmsg());
    dlc__source_free(&s);
    free(p);
}

Test(source_tar, shards_concatenate)
{
    tarw t = {0};
    tw_str(&t, "a.jpg", "A");
    tw_str(&t, "a.cls", "0");
    tw_end(&t);
    char *p1 = tmp_path(dir, "s1.tar"), *p2 = tmp_path(dir, "s2.tar");
    btu_write(p1, t.buf, t.len);
    t.len = 0;
    tw_str(&t, "a.jpg", "A2");
    tw_str(&t, "a.cls", "9");
    tw_end(&t);
    btu_write(p2, t.buf, t.len);
    free(t.buf);
    dlc__source_set s;
    dlc__source_init(&s);
    cr_assert_eq(dlc__source_add(&s, p1), DLC_OK);
    cr_assert_eq(dlc__source_add(&s, p2), DLC_OK);
    cr_assert_eq(s.count, 2);
    cr_assert_eq(s.items[1].shard, 1);
    cr_assert(strstr(dlc__source_path(&s, &s.items[1]), "s2.tar:a.jpg") != NULL);
    expect_data(&s, 1, "A2");
    cr_assert_eq(dlc__source_num_labels(&s), 10);
    dlc__source_free(&s);
    free(p1);
    free(p2);
}
