/* The store writer (cache/store_writer.c): round trip through the reader,
 * atomic replacement, and rejection of bad input. Real LMDB files in a
 * temporary directory. */
#include "store_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <xxhash.h>

static char *dir;

static void setup(void)
{
    dir = tmp_mkdtemp();
}

static void teardown(void)
{
    tmp_rmdir(dir);
    dir = NULL;
}

TestSuite(store_writer, .init = setup, .fini = teardown);

/* Every field and byte written comes back, and each payload's offset is what
 * pread of the file at that offset returns. */
Test(store_writer, round_trip_every_field_and_byte)
{
    char *path = tmp_path(dir, "a.dlc");
    const uint64_t n = 40;
    tsu_write_store(path, n, 0, 0);

    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    const dlc_store_info *info = dlc_store_get_info(s);
    cr_assert_eq(info->format_version, DLC_STORE_FORMAT_VERSION);
    cr_assert_eq(info->count, n);
    cr_assert_eq(info->encoding, DLC_ENCODING_RAW);
    cr_assert_eq(info->height, 0, "shapes differ, so height is 0");
    cr_assert_eq(info->width, 0);
    cr_assert_eq(info->channels, 3);
    cr_assert_eq(info->num_labels, 3);
    cr_assert_eq(info->skipped, 5);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(info->file_bytes, (uint64_t)st.st_size);
    cr_assert_str_eq(dlc_store_path(s), path);
    cr_assert_str_eq(dlc_store_label_name(s, 0), "cat");
    cr_assert_str_eq(dlc_store_label_name(s, 2), "emu");
    cr_assert_null(dlc_store_label_name(s, 3));
    const uint64_t *counts = dlc_store_label_counts(s);
    cr_assert_eq(counts[0], 14);
    cr_assert_eq(counts[1], 13);
    cr_assert_eq(counts[2], 13);

    const void *mv;
    size_t ms;
    cr_assert_eq(dlc_store_meta(s, "build", &mv, &ms), DLC_OK);
    cr_assert_eq(ms, strlen("{\"tool\":\"test\"}"));
    cr_assert_eq(memcmp(mv, "{\"tool\":\"test\"}", ms), 0);
    cr_assert_eq(dlc_store_meta(s, "source_digest", &mv, &ms), DLC_OK);
    cr_assert_eq(ms, 16);
    cr_assert_eq(memcmp(mv, "00000000deadbeef", 16), 0);
    cr_assert_eq(dlc_store_meta(s, "nope", &mv, &ms), DLC_ENOTFOUND);

    dlc_store_reader *r = NULL;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    uint8_t *want = malloc(256 * 256 * 3), *got = malloc(256 * 256 * 3);
    uint64_t payload = 0;
    XXH3_state_t *dig = XXH3_createState();
    XXH3_64bits_reset(dig);
    for (uint64_t i = 0; i < n; i++) {
        dlc_record rec;
        cr_assert_eq(dlc_store_read(r, i, &rec), DLC_OK, "%s", dlc_errmsg());
        const uint32_t *sh = tsu_shape(i, 0);
        const size_t size = (size_t)sh[0] * sh[1] * sh[2];
        cr_assert_eq(rec.index, i);
        cr_assert_eq(rec.label, (int64_t)(i % 3));
        cr_assert_eq(rec.height, sh[0]);
        cr_assert_eq(rec.width, sh[1]);
        cr_assert_eq(rec.channels, sh[2]);
        cr_assert_eq(rec.encoding, DLC_ENCODING_RAW);
        cr_assert_eq(rec.size, size);
        tsu_fill(want, i, size);
        cr_assert_eq(memcmp(rec.data, want, size), 0, "record %llu bytes", (unsigned long long)i);
        cr_assert_eq(rec.xxh3, XXH3_64bits(want, size));
        cr_assert_eq(dlc_record_verify(s, &rec), DLC_OK);
        /* Records on overflow pages (over ~2 KiB) start 64-byte aligned. */
        if (size > 2100)
            cr_assert_eq(rec.offset % DLC_STORE_PAYLOAD_ALIGN, 0, "record %llu offset %llu",
                         (unsigned long long)i, (unsigned long long)rec.offset);
        cr_assert_eq(pread(dlc_store_fd(s), got, size, (off_t)rec.offset), (ssize_t)size);
        cr_assert_eq(memcmp(got, want, size), 0);
        payload += size;
        /* The version 2 digest: per field, its hash, size and dimensions (docs/FORMAT.md). */
        uint8_t le[8], item[2][24];
        for (int b = 0; b < 8; b++)
            le[b] = (uint8_t)((uint64_t)rec.label >> (8 * b));
        tsu_digest_item(item[0], XXH3_64bits(want, size), size, sh[0], sh[1]);
        tsu_digest_item(item[1], XXH3_64bits(le, 8), 8, 0, 0);
        XXH3_64bits_update(dig, item, sizeof item);
    }
    cr_assert_eq(info->payload_bytes, payload);
    cr_assert_eq(info->content_digest, XXH3_64bits_digest(dig));
    dlc_record rec;
    cr_assert_eq(dlc_store_read(r, n, &rec), DLC_ENOTFOUND);
    cr_assert(strstr(dlc_errmsg(), "record 40") != NULL, "%s", dlc_errmsg());
    XXH3_freeState(dig);
    free(want);
    free(got);
    dlc_store_reader_close(r);
    dlc_store_close(s);
    cr_assert_not(tsu_has_temp(dir));
    free(path);
}

Test(store_writer, uniform_shape_is_recorded)
{
    char *path = tmp_path(dir, "u.dlc");
    tsu_write_store(path, 5, 1, 0);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_get_info(s)->height, 256);
    cr_assert_eq(dlc_store_get_info(s)->width, 256);
    cr_assert_eq(dlc_store_get_info(s)->channels, 3);
    dlc_store_close(s);
    free(path);
}

/* Thousands of records force several write transactions; 80 MiB without a
 * size hint forces the map to grow past its 64 MiB start. */
Test(store_writer, many_records_and_map_growth)
{
    char *path = tmp_path(dir, "big.dlc");
    dlc__store_writer *w = NULL;
    cr_assert_eq(dlc__store_writer_open(path, 0, 0, &w), DLC_OK, "%s", dlc_errmsg());
    const size_t big = 256 * 256 * 3;
    uint8_t *buf = malloc(big);
    uint64_t n = 0;
    for (; n < 9000; n++) {
        tsu_fill(buf, n, 12);
        cr_assert_eq(dlc__store_writer_put(w, 0, 2, 2, 3, DLC_ENCODING_RAW, buf, 12), DLC_OK);
    }
    for (int k = 0; k < 430; k++, n++) {
        tsu_fill(buf, n, big);
        cr_assert_eq(dlc__store_writer_put(w, 1, 256, 256, 3, DLC_ENCODING_RAW, buf, big), DLC_OK,
                     "%s", dlc_errmsg());
    }
    cr_assert_eq(dlc__store_writer_count(w), n);
    const char *names[] = {"a", "b"};
    const dlc__store_meta meta = {.label_names = names, .num_labels = 2};
    cr_assert_eq(dlc__store_writer_finish(w, &meta), DLC_OK, "%s", dlc_errmsg());

    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_get_info(s)->count, n);
    cr_assert_eq(dlc_store_label_counts(s)[0], 9000);
    cr_assert_eq(dlc_store_label_counts(s)[1], 430);
    uint64_t bad = 99;
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, &bad), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(bad, 0);
    /* The file holds the pages used, not the map: about 430 x 192 KiB. */
    const uint64_t fb = dlc_store_get_info(s)->file_bytes;
    cr_assert(fb > 430ull * big && fb < 430ull * big + (8u << 20), "file %llu bytes",
              (unsigned long long)fb);
    dlc_store_close(s);
    free(buf);
    free(path);
}

Test(store_writer, existing_store_needs_force)
{
    char *path = tmp_path(dir, "s.dlc");
    tsu_write_store(path, 3, 0, 0);
    dlc__store_writer *w = (dlc__store_writer *)1;
    cr_assert_eq(dlc__store_writer_open(path, 0, 0, &w), DLC_EEXIST);
    cr_assert_null(w);
    cr_assert(strstr(dlc_errmsg(), path) != NULL, "%s", dlc_errmsg());
    cr_assert_not(tsu_has_temp(dir));

    tsu_write_store(path, 7, 0, 1);
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_get_info(s)->count, 7, "force replaced the store");
    dlc_store_close(s);
    cr_assert_not(tsu_has_temp(dir));
    free(path);
}

Test(store_writer, abort_keeps_the_old_store_and_no_temp)
{
    char *path = tmp_path(dir, "s.dlc");
    tsu_write_store(path, 3, 0, 0);
    dlc__store_writer *w = NULL;
    cr_assert_eq(dlc__store_writer_open(path, 1, 1u << 20, &w), DLC_OK, "%s", dlc_errmsg());
    cr_assert(strstr(dlc__store_writer_temp_path(w), ".tmp-") != NULL);
    uint8_t buf[12] = {0};
    cr_assert_eq(dlc__store_writer_put(w, 0, 2, 2, 3, DLC_ENCODING_RAW, buf, 12), DLC_OK);
    cr_assert(tsu_has_temp(dir), "the build writes a temporary file");
    dlc__store_writer_abort(w);
    dlc__store_writer_abort(NULL);
    cr_assert_not(tsu_has_temp(dir));
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_get_info(s)->count, 3);
    dlc_store_close(s);
    free(path);
}

Test(store_writer, label_out_of_range_is_rejected)
{
    char *path = tmp_path(dir, "l.dlc");
    dlc__store_writer *w = NULL;
    cr_assert_eq(dlc__store_writer_open(path, 0, 0, &w), DLC_OK);
    uint8_t buf[12] = {0};
    cr_assert_eq(dlc__store_writer_put(w, -1, 2, 2, 3, DLC_ENCODING_RAW, buf, 12), DLC_EINVAL);
    cr_assert_eq(dlc__store_writer_put(w, 0, 2, 2, 3, DLC_ENCODING_RAW, buf, 12), DLC_OK);
    cr_assert_eq(dlc__store_writer_put(w, 5, 2, 2, 3, DLC_ENCODING_RAW, buf, 12), DLC_OK);
    const dlc__store_meta meta = {.label_names = tsu_labels, .num_labels = 3};
    cr_assert_eq(dlc__store_writer_finish(w, &meta), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "record 1") && strstr(dlc_errmsg(), "label 5"), "%s",
              dlc_errmsg());
    cr_assert_not(tsu_has_temp(dir));
    cr_assert_neq(access(path, F_OK), 0, "no store after a failed finish");
    free(path);
}

Test(store_writer, bad_records_are_rejected)
{
    char *path = tmp_path(dir, "b.dlc");
    dlc__store_writer *w = NULL;
    cr_assert_eq(dlc__store_writer_open(path, 0, 0, &w), DLC_OK);
    uint8_t buf[64] = {0};
    /* A raw payload must be exactly height x width x channels bytes. */
    cr_assert_eq(dlc__store_writer_put(w, 0, 2, 2, 3, DLC_ENCODING_RAW, buf, 13), DLC_EINVAL);
    cr_assert_eq(dlc__store_writer_put(w, 0, 0xffffffffu, 0xffffffffu, 0xffffffffu,
                                       DLC_ENCODING_RAW, buf, 13),
                 DLC_EINVAL);
    cr_assert_eq(dlc__store_writer_put(w, 0, 2, 2, 3, 7, buf, 12), DLC_EINVAL);
    /* An encoded payload must be what it says, of the size it says. */
    cr_assert_eq(dlc__store_writer_put(w, 0, 2, 2, 3, DLC_ENCODING_JPEG, buf, 40), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "not a JPEG"), "%s", dlc_errmsg());
    dlc_codec *codec = NULL;
    cr_assert_eq(dlc_codec_create(&codec), DLC_OK);
    const dlc_image img = {buf, 2, 2, 3, 6};
    const uint8_t *jpeg;
    size_t jsize;
    cr_assert_eq(dlc_jpeg_encode(codec, &img, 90, &jpeg, &jsize), DLC_OK);
    cr_assert_eq(dlc__store_writer_put(w, 0, 2, 3, 3, DLC_ENCODING_JPEG, jpeg, jsize), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "the JPEG is 2x2, not the 2x3 given"), "%s", dlc_errmsg());
    cr_assert_eq(dlc__store_writer_put(w, 0, 2, 2, 3, DLC_ENCODING_JPEG, jpeg, jsize), DLC_OK);
    dlc_codec_destroy(codec);
    /* One store, one encoding, one channel count. */
    cr_assert_eq(dlc__store_writer_put(w, 0, 2, 2, 3, DLC_ENCODING_RAW, buf, 12), DLC_EINVAL);
    cr_assert_eq(dlc__store_writer_count(w), 1);
    const dlc__store_meta meta = {.label_names = tsu_labels, .num_labels = 1};
    cr_assert_eq(dlc__store_writer_finish(w, &meta), DLC_OK, "%s", dlc_errmsg());
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_get_info(s)->encoding, DLC_ENCODING_JPEG);
    const void *mv;
    size_t ms;
    cr_assert_eq(dlc_store_meta(s, "build", &mv, &ms), DLC_ENOTFOUND, "no build JSON given");
    dlc_store_close(s);
    free(path);
}

Test(store_writer, missing_directory_fails_cleanly)
{
    char *path = tmp_path(dir, "no/such/dir/s.dlc");
    dlc__store_writer *w = NULL;
    cr_assert_eq(dlc__store_writer_open(path, 0, 0, &w), -ENOENT);
    cr_assert(strstr(dlc_errmsg(), "no/such/dir") != NULL, "%s", dlc_errmsg());
    free(path);
}

/* A size hint far beyond the free space fails at open with "disk full", not
 * hours later. */
Test(store_writer, impossible_size_hint_reports_disk_full)
{
    char *path = tmp_path(dir, "huge.dlc");
    dlc__store_writer *w = NULL;
    const dlc_status rc = dlc__store_writer_open(path, 0, 1ull << 50, &w);
    if (rc == DLC_OK) {
        dlc__store_writer_abort(w);
        cr_skip_test("this file system does not reserve space with fallocate");
    }
    cr_assert_eq(rc, -ENOSPC, "%s", dlc_errmsg());
    cr_assert(strstr(dlc_errmsg(), "disk full") != NULL, "%s", dlc_errmsg());
    cr_assert_not(tsu_has_temp(dir));
    free(path);
}
