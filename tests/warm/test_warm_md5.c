/* MD5 and ETags (cache/warm/warm_md5.c): RFC 1321's test values; S3's multipart ETag of a file
 * against the value Python's hashlib gives for the same bytes and part size; the ETag parser's
 * forms and refusals; GCS's base64 md5Hash both ways. */
#include "tmpdir_util.h"
#include "warm_internal.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TMPDIR_SUITE(warm_md5);

static void md5_hex_of(const void *p, size_t n, char hex[33])
{
    dlc__md5 m = {0};
    uint8_t d[16];
    cr_assert_eq(dlc__md5_begin(&m), DLC_OK, "%s", dlc_errmsg());
    dlc__md5_update(&m, p, n);
    dlc__md5_end(&m, d);
    dlc__md5_free(&m);
    dlc__md5_hex(d, hex);
}

Test(warm_md5, rfc1321_values)
{
    char hex[33];
    md5_hex_of("", 0, hex);
    cr_assert_str_eq(hex, "d41d8cd98f00b204e9800998ecf8427e");
    md5_hex_of("abc", 3, hex);
    cr_assert_str_eq(hex, "900150983cd24fb0d6963f7d28e17f72");
    md5_hex_of("message digest", 14, hex);
    cr_assert_str_eq(hex, "f96b697d7cb7938d525a2f31aaf161d0");
}

/* A file of 3 x 64 KiB + 100 bytes, (i * 7 + 3) mod 251; its values from Python:
 * hashlib.md5(b"".join(hashlib.md5(part).digest() for part in parts)).hexdigest(). */
static int make_file(char **path)
{
    const size_t n = 3 * 65536 + 100;
    uint8_t *b = malloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)((i * 7 + 3) % 251);
    *path = tmp_path(dir, "f.bin");
    const int fd = open(*path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, b, n), (ssize_t)n);
    free(b);
    return fd;
}

Test(warm_md5, a_files_s3_etag_is_the_md5_of_its_part_md5s)
{
    char *path;
    const int fd = make_file(&path);
    const uint64_t size = 3 * 65536 + 100;
    char etag[DLC__WARM_ETAG_MAX];
    cr_assert_eq(dlc__warm_file_etag(fd, path, size, 65536, 1, etag), DLC_OK, "%s", dlc_errmsg());
    cr_assert_str_eq(etag, "\"4424e03a621e0da237d68dd1decb1c73-4\"");
    cr_assert_eq(dlc__warm_file_etag(fd, path, size, 0, 0, etag), DLC_OK);
    cr_assert_str_eq(etag, "\"41c97c605c68e820511ba442a5f90069\"");

    /* The same from the parts' own digests, as a push journals them. */
    uint8_t md5s[4 * 16];
    for (int i = 0; i < 4; i++) {
        const uint64_t off = (uint64_t)i * 65536;
        cr_assert_eq(dlc__md5_file_range(fd, path, off, i < 3 ? 65536 : 100, md5s + 16 * i),
                     DLC_OK);
    }
    char again[DLC__WARM_ETAG_MAX];
    dlc__warm_multipart_etag(md5s, 4, again);
    cr_assert_str_eq(again, "\"4424e03a621e0da237d68dd1decb1c73-4\"");

    /* A range past the end of the file is a file that changed. */
    uint8_t d[16];
    cr_assert_eq(dlc__md5_file_range(fd, path, size - 10, 20, d), DLC_ECHANGED);
    close(fd);
    free(path);
}

Test(warm_md5, etag_forms_and_refusals)
{
    uint8_t d[16];
    uint32_t parts = 99;
    cr_assert_eq(dlc__warm_etag_parse("\"900150983cd24fb0d6963f7d28e17f72\"", d, &parts), 0);
    cr_assert_eq(parts, 0);
    cr_assert_eq(d[0], 0x90);
    cr_assert_eq(d[15], 0x72);
    cr_assert_eq(dlc__warm_etag_parse("900150983CD24FB0D6963F7D28E17F72", d, &parts), 0);
    cr_assert_eq(d[4], 0x3c);
    cr_assert_eq(dlc__warm_etag_parse("\"4424e03a621e0da237d68dd1decb1c73-4\"", d, &parts), 0);
    cr_assert_eq(parts, 4);
    cr_assert_eq(dlc__warm_etag_parse("\"4424e03a621e0da237d68dd1decb1c73-10000\"", d, &parts), 0);
    cr_assert_eq(parts, 10000);
    static const char *const bad[] = {
        "W/\"900150983cd24fb0d6963f7d28e17f72\"",     /* weak */
        "\"900150983cd24fb0d6963f7d28e17f7\"",        /* short */
        "\"900150983cd24fb0d6963f7d28e17f7g\"",       /* not hex */
        "\"4424e03a621e0da237d68dd1decb1c73-\"",      /* no count */
        "\"4424e03a621e0da237d68dd1decb1c73-0\"",     /* no parts */
        "\"4424e03a621e0da237d68dd1decb1c73-10001\"", /* more than S3 allows */
        "\"4424e03a621e0da237d68dd1decb1c73x4\"",
        "\"1-2c9a4b0d1b6e0f3a5a7c2b1d9e8f7a6b\"", /* GCS-style and SSE-KMS ETags */
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert_eq(dlc__warm_etag_parse(bad[i], d, &parts), -1, "accepted '%s'", bad[i]);
}

Test(warm_md5, gcs_md5hash_base64_both_ways)
{
    uint8_t d[16], back[16];
    uint32_t parts;
    cr_assert_eq(dlc__warm_etag_parse("900150983cd24fb0d6963f7d28e17f72", d, &parts), 0);
    char b64[25];
    dlc__md5_base64(d, b64);
    cr_assert_str_eq(b64, "kAFQmDzST7DWlj99KOF/cg==");
    cr_assert_eq(dlc__md5_from_base64(b64, back), 0);
    cr_assert_eq(memcmp(d, back, 16), 0);
    cr_assert_eq(dlc__md5_from_base64("kAFQmDzST7DWlj99KOF/cg=", back), -1);
    cr_assert_eq(dlc__md5_from_base64("kAFQmDzST7DWlj99KOF/cgAA", back), -1);
    cr_assert_eq(dlc__md5_from_base64("kAFQmDzST7DWlj99KOF/c!==", back), -1);
}
