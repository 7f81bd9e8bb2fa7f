/* The store writer (cache/store/store_writer.c, and the version 1 API of cache/store/store_compat.c
 * on it): round trips of every field kind through the reader, automatic fixing of variable fields,
 * identical bytes at any number of builder threads, atomic replacement, and rejection of bad
 * input. Real LMDB files in a temporary directory. */
#include "store_internal.h"
#include "store_kinds.h"
#include "store_test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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

/* A FIFO (or a device: /dev/null as root) at the path is not a store to replace, with force
 * either; a link is replaced itself, its target left as it was. */
Test(store_writer, only_a_file_or_a_link_is_replaced)
{
    char *path = tmp_path(dir, "fifo.dlc");
    cr_assert_eq(mkfifo(path, 0600), 0);
    dlc__store_writer *w = (dlc__store_writer *)1;
    cr_assert_eq(dlc__store_writer_open(path, 1, 0, &w), DLC_EINVAL);
    cr_assert_null(w);
    cr_assert(strstr(dlc_errmsg(), "is a FIFO, not a store file"), "%s", dlc_errmsg());
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0);
    cr_assert(S_ISFIFO(st.st_mode), "the FIFO was replaced");
    cr_assert_not(tsu_has_temp(dir));
    char *target = tmp_path(dir, "target.dlc"), *link = tmp_path(dir, "link.dlc");
    tsu_write_store(target, 3, 0, 0);
    cr_assert_eq(symlink(target, link), 0);
    tsu_write_store(link, 5, 0, 1);
    cr_assert_eq(lstat(link, &st), 0);
    cr_assert(S_ISREG(st.st_mode), "the link itself is replaced");
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(target, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_get_info(s)->count, 3, "the link's target changed");
    dlc_store_close(s);
    free(link);
    free(target);
    free(path);
}

/* A co-tenant of a folder others may write moves the temporary file aside while the store is
 * written and plants a link to a file of someone else's at its name: the seal must neither
 * truncate what the link points to nor publish the link. */
Test(store_writer, a_temporary_file_moved_aside_is_never_written_through)
{
    char *path = tmp_path(dir, "s.dlc"), *victim = tmp_path(dir, "victim.txt");
    char *aside = tmp_path(dir, "aside");
    FILE *f = fopen(victim, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 100000; i++)
        fputs("precious ", f);
    fclose(f);
    struct stat before;
    cr_assert_eq(stat(victim, &before), 0);
    dlc__store_writer *w = NULL;
    cr_assert_eq(dlc__store_writer_open(path, 1, 1u << 20, &w), DLC_OK, "%s", dlc_errmsg());
    uint8_t buf[12] = {0};
    cr_assert_eq(dlc__store_writer_put(w, 0, 2, 2, 3, DLC_ENCODING_RAW, buf, 12), DLC_OK);
    const char *temp = dlc__store_writer_temp_path(w);
    cr_assert_eq(rename(temp, aside), 0);
    cr_assert_eq(symlink(victim, temp), 0);
    const char *names[] = {"a"};
    const dlc__store_meta meta = {names, 1, 0, NULL, 0};
    cr_assert_eq(dlc__store_writer_finish(w, &meta), DLC_EINVAL); /* frees the writer */
    cr_assert(strstr(dlc_errmsg(), "was replaced while the store was written"), "%s", dlc_errmsg());
    struct stat after;
    cr_assert_eq(stat(victim, &after), 0);
    cr_assert_eq(after.st_size, before.st_size, "the link's target was truncated");
    cr_assert_neq(lstat(path, &after), 0, "nothing was published");
    free(aside);
    free(victim);
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

/* ---- The public writer (include/dlcache/writer.h) ------------------------------------------- */

/* Every kind, encoding, channel count and dtype comes back: bit for bit (raw, PNG, arrays,
 * scalars, bytes) or within a PSNR bound (JPEG); the store verifies; its metadata, label counts
 * and content digest are what docs/FORMAT.md says; and the payloads of records on overflow pages
 * are 64-byte aligned in the file. */
Test(store_writer, round_trip_every_kind_and_dtype)
{
    char *path = tmp_path(dir, "kinds.dlc");
    const uint64_t n = 37;
    cr_assert_eq(sk_write_store(path, n, 0), DLC_OK, "%s", dlc_errmsg());
    cr_assert_not(tsu_has_temp(dir));
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    const dlc_store_info *info = dlc_store_get_info(s);
    cr_assert_eq(info->format_version, 2);
    cr_assert_eq(info->count, n);
    cr_assert_eq(info->num_fields, SK_NUM_FIELDS);
    cr_assert_eq(info->image_field, SK_IMAGE);
    cr_assert_eq(info->label_field, SK_LABEL);
    cr_assert_eq(info->num_labels, 3);
    cr_assert_eq(info->skipped, 2);
    cr_assert_eq(info->channels, 3);
    cr_assert_eq(info->height, 0, "image sizes differ");
    cr_assert_str_eq(dlc_store_label_name(s, 1), "beta");
    const dlc_field *fields = dlc_store_fields(s);
    for (uint32_t f = 0; f < SK_NUM_FIELDS; f++) {
        cr_assert_str_eq(fields[f].name, SK_FIELDS[f].name);
        cr_assert_eq(dlc_store_find_field(s, SK_FIELDS[f].name), (int)f);
        cr_assert_eq(fields[f].kind, SK_FIELDS[f].kind);
    }
    cr_assert_eq(dlc_store_find_field(s, "nope"), -1);
    cr_assert_eq(fields[SK_BOXES].link, SK_CLASSES);
    cr_assert_eq(fields[SK_A_I16].ndim, 3);
    cr_assert_eq(fields[SK_A_F16].dtype, DLC_DTYPE_FLOAT16);
    cr_assert_eq(fields[SK_PHOTO].encoding, DLC_ENCODING_JPEG);
    cr_assert(fields[SK_MASK].flags & DLC_FIELD_MASK);
    uint32_t max_h = 0, max_w = 0;
    uint64_t max_size = 0;
    for (uint64_t i = 0; i < n; i++) {
        const uint32_t h = sk_image_h(i), w = sk_image_w(i);
        max_h = h > max_h ? h : max_h;
        max_w = w > max_w ? w : max_w;
        max_size = (uint64_t)h * w * 3 > max_size ? (uint64_t)h * w * 3 : max_size;
    }
    cr_assert_eq(fields[SK_IMAGE].max_dim0, max_h);
    cr_assert_eq(fields[SK_IMAGE].max_dim1, max_w);
    cr_assert_eq(fields[SK_IMAGE].max_size, max_size);
    cr_assert_eq(fields[SK_TOKENS].max_dim0, 4);
    cr_assert_eq(fields[SK_TOKENS].max_size, 16);

    dlc_store_reader *r = NULL;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    dlc_codec *c = NULL;
    cr_assert_eq(dlc_codec_create(&c), DLC_OK);
    sk_record *want = malloc(sizeof *want);
    dlc_value v[SK_NUM_FIELDS];
    XXH3_state_t *dig = XXH3_createState();
    XXH3_64bits_reset(dig);
    uint64_t payload = 0, counts[3] = {0};
    for (uint64_t i = 0; i < n; i++) {
        cr_assert_eq(dlc_store_read_values(r, i, v), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(sk_check(c, want, v, i), DLC_OK, "%s", dlc_errmsg());
        const int overflow = v[SK_IMAGE].size > 2100;
        for (uint32_t f = 0; f < SK_NUM_FIELDS; f++) {
            cr_assert_eq(dlc_value_verify(s, i, f, &v[f]), DLC_OK, "%s", dlc_errmsg());
            uint8_t item[24];
            tsu_digest_item(item, XXH3_64bits(v[f].data, v[f].size), v[f].size, v[f].dim0,
                            v[f].dim1);
            XXH3_64bits_update(dig, item, sizeof item);
            if (SK_FIELDS[f].kind == DLC_FIELD_INT || SK_FIELDS[f].kind == DLC_FIELD_FLOAT)
                continue;
            payload += v[f].size;
            if (overflow)
                cr_assert_eq(v[f].offset % DLC_STORE_PAYLOAD_ALIGN, 0,
                             "record %llu field %u at %llu", (unsigned long long)i, f,
                             (unsigned long long)v[f].offset);
        }
        counts[i % 3]++;
        /* The version 1 view: the first image field and the label. */
        dlc_record rec;
        cr_assert_eq(dlc_store_read(r, i, &rec), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(rec.data, v[SK_IMAGE].data);
        cr_assert_eq(rec.label, (int64_t)(i % 3));
        cr_assert_eq(rec.channels, 3);
        cr_assert_eq(dlc_record_verify(s, &rec), DLC_OK);
    }
    cr_assert_eq(info->payload_bytes, payload);
    cr_assert_eq(info->content_digest, XXH3_64bits_digest(dig));
    for (int l = 0; l < 3; l++)
        cr_assert_eq(dlc_store_label_counts(s)[l], counts[l]);
    uint64_t bad = 9;
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, &bad), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(bad, 0);
    XXH3_freeState(dig);
    free(want);
    dlc_codec_destroy(c);
    dlc_store_reader_close(r);
    dlc_store_close(s);
    free(path);
}

/* A field declared VARIABLE whose records all share one size is written fixed, so batches of it
 * stack; one whose records differ stays variable. */
Test(store_writer, variable_fields_that_agree_become_fixed)
{
    char *path = tmp_path(dir, "fix.dlc");
    cr_assert_eq(sk_write_store(path, 1, 0), DLC_OK, "%s", dlc_errmsg());
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    const dlc_field *f = dlc_store_fields(s);
    /* Record 0: image and mask 8x8, thumb 8x8, no boxes, no tokens. */
    cr_assert_eq(f[SK_IMAGE].flags & DLC_FIELD_VARIABLE, 0);
    cr_assert_eq(f[SK_IMAGE].shape[0], 8);
    cr_assert_eq(f[SK_IMAGE].shape[1], 8);
    cr_assert_eq(f[SK_THUMB].flags & DLC_FIELD_VARIABLE, 0);
    cr_assert_eq(f[SK_MASK].flags, DLC_FIELD_MASK);
    cr_assert_eq(dlc_store_get_info(s)->height, 8);
    /* A leading dimension of 0 cannot be a fixed shape: those stay variable, with their link. */
    cr_assert(f[SK_BOXES].flags & DLC_FIELD_VARIABLE);
    cr_assert(f[SK_CLASSES].flags & DLC_FIELD_VARIABLE);
    cr_assert(f[SK_TOKENS].flags & DLC_FIELD_VARIABLE);
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, NULL), DLC_OK, "%s", dlc_errmsg());
    dlc_store_close(s);

    cr_assert_eq(sk_write_store(path, 8, 1), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    f = dlc_store_fields(s);
    for (uint32_t k = 0; k < SK_NUM_FIELDS; k++)
        cr_assert_eq(f[k].flags & DLC_FIELD_VARIABLE, SK_FIELDS[k].flags & DLC_FIELD_VARIABLE,
                     "field %s", f[k].name);
    dlc_store_close(s);

    /* Boxes of one count in every record: boxes and classes both become fixed. */
    const dlc_field_spec spec[2] = {
        {.name = "b",
         .kind = DLC_FIELD_NDARRAY,
         .dtype = DLC_DTYPE_FLOAT32,
         .flags = DLC_FIELD_VARIABLE | DLC_FIELD_BOXES,
         .ndim = 2,
         .shape = {0, 4},
         .link = "c"},
        {.name = "c", .kind = DLC_FIELD_NDARRAY, .flags = DLC_FIELD_VARIABLE, .ndim = 1},
    };
    const dlc_writer_config cfg = {
        .struct_size = sizeof(dlc_writer_config), .fields = spec, .num_fields = 2, .force = 1};
    dlc_writer *w = NULL;
    dlc_record_builder *b = NULL;
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_record_builder_create(w, &b), DLC_OK);
    const float boxes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const uint8_t classes[2] = {1, 2};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(dlc_record_set_array(b, 0, boxes, sizeof boxes, 2), DLC_OK, "%s",
                     dlc_errmsg());
        cr_assert_eq(dlc_record_set_array(b, 1, classes, 2, 2), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_seal(b), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_writer_append(w, b), DLC_OK, "%s", dlc_errmsg());
    }
    cr_assert_eq(dlc_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
    dlc_record_builder_destroy(b);
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    f = dlc_store_fields(s);
    cr_assert_eq(f[0].flags, DLC_FIELD_BOXES);
    cr_assert_eq(f[0].shape[0], 2);
    cr_assert_eq(f[1].flags, 0);
    cr_assert_eq(f[1].shape[0], 2);
    cr_assert_eq(dlc_store_get_info(s)->image_field, DLC_NO_FIELD);
    cr_assert_eq(dlc_store_get_info(s)->label_field, DLC_NO_FIELD);
    dlc_store_reader *r = NULL;
    dlc_record rec;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    cr_assert_eq(dlc_store_read(r, 0, &rec), DLC_EINVAL, "no image field to read as a record");
    dlc_store_reader_close(r);
    dlc_store_close(s);
    free(path);
}

typedef struct seal_job {
    dlc_record_builder *b;
    sk_record *r;
    uint64_t i;
    dlc_status rc;
} seal_job;

static void *seal_one(void *p)
{
    seal_job *j = p;
    j->rc = sk_set(j->b, j->r, j->i);
    if (j->rc == DLC_OK)
        j->rc = dlc_record_seal(j->b);
    return NULL;
}

/* Write the kinds store with @p threads builders sealing records at once, appended in order. */
static void write_threaded(const char *path, uint64_t n, int threads)
{
    const dlc_writer_config cfg = sk_config(1);
    dlc_writer *w = NULL;
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK, "%s", dlc_errmsg());
    seal_job jobs[4];
    pthread_t t[4];
    for (int k = 0; k < threads; k++) {
        jobs[k] = (seal_job){.r = malloc(sizeof(sk_record))};
        cr_assert_eq(dlc_record_builder_create(w, &jobs[k].b), DLC_OK);
    }
    for (uint64_t i = 0; i < n; i += (uint64_t)threads) {
        int started = 0;
        for (int k = 0; k < threads && i + (uint64_t)k < n; k++, started++) {
            jobs[k].i = i + (uint64_t)k;
            cr_assert_eq(pthread_create(&t[k], NULL, seal_one, &jobs[k]), 0);
        }
        for (int k = 0; k < started; k++) {
            pthread_join(t[k], NULL);
            cr_assert_eq(jobs[k].rc, DLC_OK);
            cr_assert_eq(dlc_writer_append(w, jobs[k].b), DLC_OK, "%s", dlc_errmsg());
        }
    }
    cr_assert_eq(dlc_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
    for (int k = 0; k < threads; k++) {
        dlc_record_builder_destroy(jobs[k].b);
        free(jobs[k].r);
    }
}

static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*size);
    cr_assert_eq(fread(p, 1, *size, f), *size);
    fclose(f);
    return p;
}

/* A record's bytes depend only on its values: the store is the same file, byte for byte, with
 * one builder or four sealing at once. */
Test(store_writer, identical_bytes_at_any_number_of_builder_threads)
{
    char *one = tmp_path(dir, "one.dlc"), *four = tmp_path(dir, "four.dlc");
    write_threaded(one, 23, 1);
    write_threaded(four, 23, 4);
    size_t n1, n4;
    uint8_t *a = slurp(one, &n1), *b = slurp(four, &n4);
    cr_assert_eq(n1, n4);
    cr_assert_eq(memcmp(a, b, n1), 0, "the files differ");
    free(a);
    free(b);
    free(one);
    free(four);
}

/* Records of a page or more reach the page cache through pwrite() at the place LMDB gave them
 * in its map (cache/store/store_writer_file.c: dlc__wfile_put_value()); the file is the same,
 * byte for byte, as when every record is copied through the map. */
Test(store_writer, pwrite_and_the_map_write_the_same_file)
{
    char *pw = tmp_path(dir, "pwrite.dlc"), *map = tmp_path(dir, "map.dlc");
    write_threaded(pw, 23, 1);
    cr_assert_eq(setenv("DLCACHE_WRITER_NO_PWRITE", "1", 1), 0);
    write_threaded(map, 23, 1);
    unsetenv("DLCACHE_WRITER_NO_PWRITE");
    size_t n1, n2;
    uint8_t *a = slurp(pw, &n1), *b = slurp(map, &n2);
    cr_assert_eq(n1, n2);
    cr_assert_eq(memcmp(a, b, n1), 0, "the files differ");
    free(a);
    free(b);
    free(pw);
    free(map);
}

Test(store_writer, label_out_of_range_is_refused_at_append)
{
    char *path = tmp_path(dir, "lab.dlc");
    const dlc_writer_config cfg = sk_config(0);
    dlc_writer *w = NULL;
    dlc_record_builder *b = NULL;
    sk_record *r = malloc(sizeof *r);
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_record_builder_create(w, &b), DLC_OK);
    for (int64_t bad = -1; bad <= 3; bad += 4) {
        cr_assert_eq(sk_set(b, r, 0), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_set_int(b, SK_LABEL, bad), DLC_OK);
        cr_assert_eq(dlc_record_seal(b), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_writer_append(w, b), DLC_EINVAL);
        cr_assert(strstr(dlc_errmsg(), "record 0: field \"label\": label") &&
                      strstr(dlc_errmsg(), "out of range 0..2"),
                  "%s", dlc_errmsg());
        dlc_record_builder_reset(b);
    }
    /* The writer is still usable. */
    cr_assert_eq(sk_set(b, r, 0), DLC_OK);
    cr_assert_eq(dlc_record_seal(b), DLC_OK);
    cr_assert_eq(dlc_writer_append(w, b), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_writer_count(w), 1);
    cr_assert_eq(dlc_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
    dlc_record_builder_destroy(b);
    free(r);
    free(path);
}

/* num_labels = 0 with a LABEL field: any label in 0..2^24-1 is taken, and finish names K = the
 * largest + 1 labels "0".."K-1", with their counts (labels never seen count 0). */
Test(store_writer, labels_named_at_finish_without_num_labels)
{
    char *path = tmp_path(dir, "auto.dlc");
    dlc_writer_config cfg = sk_config(0);
    cfg.label_names = NULL;
    cfg.num_labels = 0;
    dlc_writer *w = NULL;
    dlc_record_builder *b = NULL;
    sk_record *r = malloc(sizeof *r);
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_record_builder_create(w, &b), DLC_OK);
    const int64_t labels[] = {3, 0, 11, 3, -1, 1 << 24};
    for (uint64_t i = 0; i < sizeof labels / sizeof labels[0]; i++) {
        cr_assert_eq(sk_set(b, r, i), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_set_int(b, SK_LABEL, labels[i]), DLC_OK);
        cr_assert_eq(dlc_record_seal(b), DLC_OK, "%s", dlc_errmsg());
        const dlc_status rc = dlc_writer_append(w, b);
        if (labels[i] < 0 || labels[i] >= 1 << 24) {
            cr_assert_eq(rc, DLC_EINVAL, "label %lld", (long long)labels[i]);
            cr_assert(strstr(dlc_errmsg(), "out of range 0..16777215"), "%s", dlc_errmsg());
            dlc_record_builder_reset(b);
        } else {
            cr_assert_eq(rc, DLC_OK, "%s", dlc_errmsg());
        }
    }
    cr_assert_eq(dlc_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    const dlc_store_info *in = dlc_store_get_info(s);
    cr_assert_eq(in->count, 4);
    cr_assert_eq(in->num_labels, 12);
    const uint64_t *counts = dlc_store_label_counts(s);
    char want[8];
    for (uint32_t k = 0; k < 12; k++) {
        snprintf(want, sizeof want, "%u", k);
        cr_assert_str_eq(dlc_store_label_name(s, k), want);
        cr_assert_eq(counts[k], k == 3 ? 2u : k == 0 || k == 11 ? 1u : 0u, "label %u", k);
    }
    cr_assert_null(dlc_store_label_name(s, 12));
    uint64_t bad = 1;
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, &bad), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(bad, 0);
    dlc_store_close(s);
    dlc_record_builder_destroy(b);
    free(r);
    free(path);
}

/* Publishing is atomic and guarded as with the version 1 API: no store without force, an abort or
 * a failed finish leaves the old store and no temporary file, a store of no record is refused. */
Test(store_writer, public_writer_publishes_atomically)
{
    char *path = tmp_path(dir, "pub.dlc");
    cr_assert_eq(sk_write_store(path, 3, 0), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(sk_write_store(path, 4, 0), DLC_EEXIST);
    cr_assert(strstr(dlc_errmsg(), path), "%s", dlc_errmsg());
    cr_assert_not(tsu_has_temp(dir));

    dlc_writer_config cfg = sk_config(1);
    dlc_writer *w = NULL;
    dlc_record_builder *b = NULL;
    sk_record *r = malloc(sizeof *r);
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK, "%s", dlc_errmsg());
    cr_assert(strstr(dlc__writer_temp_path(w), ".tmp-"));
    cr_assert_eq(dlc_writer_find_field(w, "mask"), SK_MASK);
    cr_assert_eq(dlc_writer_find_field(w, "masks"), -1);
    cr_assert_eq(dlc_record_builder_create(w, &b), DLC_OK);
    cr_assert_eq(sk_set(b, r, 0), DLC_OK);
    cr_assert_eq(dlc_writer_append(w, b), DLC_ESTATE, "not sealed");
    cr_assert_eq(dlc_record_seal(b), DLC_OK);
    cr_assert_eq(dlc_writer_append(w, b), DLC_OK, "%s", dlc_errmsg());
    cr_assert(tsu_has_temp(dir));
    dlc_writer_abort(w);
    dlc_writer_abort(NULL);
    cr_assert_not(tsu_has_temp(dir));
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_get_info(s)->count, 3, "the old store");
    dlc_store_close(s);

    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_writer_finish(w), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "no record"), "%s", dlc_errmsg());
    cr_assert_not(tsu_has_temp(dir));
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_get_info(s)->count, 3, "the old store");
    dlc_store_close(s);

    cfg.size_hint = 1ull << 50;
    const dlc_status rc = dlc_writer_open(path, &cfg, &w);
    if (rc == DLC_OK)
        dlc_writer_abort(w);
    else
        cr_assert(rc == -ENOSPC && strstr(dlc_errmsg(), "disk full"), "%d %s", rc, dlc_errmsg());
    cr_assert_not(tsu_has_temp(dir));
    dlc_record_builder_destroy(b);
    free(r);
    free(path);
}

/* Without force, a file that appears at PATH while the store is written (another run's store,
 * a user's file) is never replaced at the rename: the check at open and the one before the
 * rename both passed, and a plain rename() replaced it. */
Test(store_writer, a_file_that_appears_during_the_build_is_never_replaced)
{
    char *path = tmp_path(dir, "late.dlc");
    dlc_writer_config cfg = sk_config(0);
    dlc_writer *w = NULL;
    dlc_record_builder *b = NULL;
    sk_record *r = malloc(sizeof *r);
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_record_builder_create(w, &b), DLC_OK);
    cr_assert_eq(sk_set(b, r, 0), DLC_OK);
    cr_assert_eq(dlc_record_seal(b), DLC_OK);
    cr_assert_eq(dlc_writer_append(w, b), DLC_OK, "%s", dlc_errmsg());
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("a user's notes\n", f);
    fclose(f);
    cr_assert_eq(dlc_writer_finish(w), DLC_EEXIST);
    cr_assert(strstr(dlc_errmsg(), "appeared while the store was written"), "%s", dlc_errmsg());
    char buf[64] = "";
    f = fopen(path, "r");
    cr_assert(f && fgets(buf, sizeof buf, f));
    fclose(f);
    cr_assert_str_eq(buf, "a user's notes\n", "the file that appeared was replaced");
    cr_assert_not(tsu_has_temp(dir));
    /* With force it is replaced, as before. */
    cfg.force = 1;
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK, "%s", dlc_errmsg());
    dlc_record_builder_destroy(b);
    cr_assert_eq(dlc_record_builder_create(w, &b), DLC_OK);
    cr_assert_eq(sk_set(b, r, 0), DLC_OK);
    cr_assert_eq(dlc_record_seal(b), DLC_OK);
    cr_assert_eq(dlc_writer_append(w, b), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    dlc_store_close(s);
    dlc_record_builder_destroy(b);
    free(r);
    free(path);
}

/* Records of the smallest-image tests: (height, width). The smallest height, 30, is first at
 * record 1 and the smallest width, 20, at record 2; record 3 has both again (a later tie) and
 * record 6 the largest, 60x70. */
static const uint32_t min_sizes[][2] = {{40, 50}, {30, 60}, {45, 20}, {30, 20},
                                        {50, 50}, {35, 25}, {60, 70}, {31, 21}};
#define MIN_N (sizeof min_sizes / sizeof min_sizes[0])

/* A store of MIN_N records: "image" (VARIABLE, RGB), "label", "mask" (VARIABLE, of the image's
 * size) and "thumb" (fixed 4x4), with the writer API. */
static void write_min_store(const char *path)
{
    const dlc_field_spec spec[4] = {
        {.name = "image", .kind = DLC_FIELD_IMAGE, .flags = DLC_FIELD_VARIABLE, .shape = {0, 0, 3}},
        {.name = "label", .kind = DLC_FIELD_INT},
        {.name = "mask",
         .kind = DLC_FIELD_IMAGE,
         .flags = DLC_FIELD_VARIABLE | DLC_FIELD_MASK,
         .shape = {0, 0, 1}},
        {.name = "thumb", .kind = DLC_FIELD_IMAGE, .shape = {4, 4, 3}},
    };
    const dlc_writer_config cfg = {
        .struct_size = sizeof(dlc_writer_config), .fields = spec, .num_fields = 4, .force = 1};
    dlc_writer *w = NULL;
    dlc_record_builder *b = NULL;
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_record_builder_create(w, &b), DLC_OK);
    uint8_t *px = calloc(60 * 70 * 3, 1);
    for (size_t i = 0; i < MIN_N; i++) {
        const uint32_t h = min_sizes[i][0], wd = min_sizes[i][1];
        const dlc_image img = {px, wd, h, 3, (size_t)wd * 3}, mask = {px, wd, h, 1, wd},
                        thumb = {px, 4, 4, 3, 12};
        cr_assert_eq(dlc_record_set_image(b, 0, &img), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_set_int(b, 1, (int64_t)i), DLC_OK);
        cr_assert_eq(dlc_record_set_image(b, 2, &mask), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_set_image(b, 3, &thumb), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_seal(b), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_writer_append(w, b), DLC_OK, "%s", dlc_errmsg());
    }
    cr_assert_eq(dlc_writer_finish(w), DLC_OK, "%s", dlc_errmsg());
    dlc_record_builder_destroy(b);
    free(px);
}

static void st32(uint8_t *p, uint32_t v)
{
    for (int b = 0; b < 4; b++)
        p[b] = (uint8_t)(v >> (8 * b));
}

static void st64(uint8_t *p, uint64_t v)
{
    for (int b = 0; b < 8; b++)
        p[b] = (uint8_t)(v >> (8 * b));
}

/* The "min_dims" value of docs/FORMAT.md, written out here: 24 bytes per field, then the hash. */
static size_t min_dims_value(uint8_t *out, const uint32_t (*e)[2], const uint64_t (*rec)[2],
                             uint32_t nf)
{
    memset(out, 0, (size_t)nf * 24 + 8);
    for (uint32_t f = 0; f < nf; f++) {
        st32(out + 24 * f, e[f][0]);
        st32(out + 24 * f + 4, e[f][1]);
        st64(out + 24 * f + 8, rec[f][0]);
        st64(out + 24 * f + 16, rec[f][1]);
    }
    st64(out + 24 * nf, XXH3_64bits(out, (size_t)nf * 24));
    return (size_t)nf * 24 + 8;
}

static dlc_store *open_store(const char *path)
{
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    return s;
}

/* The writer records each variable image's smallest height and width and the first record of
 * each ("min_dims", as docs/FORMAT.md lays it out); the reader gives them in dlc_field, fixed
 * images their shape; verify agrees. */
Test(store_writer, smallest_image_and_its_first_record_are_recorded)
{
    char *path = tmp_path(dir, "min.dlc");
    write_min_store(path);
    dlc_store *s = open_store(path);
    const dlc_field *f = dlc_store_fields(s);
    for (int k = 0; k < 3; k += 2) {
        cr_assert(f[k].flags & DLC_FIELD_VARIABLE, "%s", f[k].name);
        cr_assert_eq(f[k].max_dim0, 60);
        cr_assert_eq(f[k].max_dim1, 70);
        cr_assert_eq(f[k].min_dim0, 30, "%s: %u", f[k].name, f[k].min_dim0);
        cr_assert_eq(f[k].min_dim1, 20, "%s: %u", f[k].name, f[k].min_dim1);
        cr_assert_eq(f[k].min_record0, 1, "the first record 30 high, not the later tie");
        cr_assert_eq(f[k].min_record1, 2, "the first record 20 wide");
    }
    cr_assert_eq(f[1].min_dim0 | f[1].min_dim1, 0, "not an image");
    cr_assert_eq(f[3].min_dim0, 4, "a fixed image: its shape");
    cr_assert_eq(f[3].min_dim1, 4);
    cr_assert_eq(f[3].min_record0 | f[3].min_record1, 0);
    /* The bytes on disk: an entry for each variable image, zeros for the others. */
    const void *v = NULL;
    size_t len = 0;
    cr_assert_eq(dlc_store_meta(s, "min_dims", &v, &len), DLC_OK, "%s", dlc_errmsg());
    const uint32_t dims[4][2] = {{30, 20}, {0, 0}, {30, 20}, {0, 0}};
    const uint64_t recs[4][2] = {{1, 2}, {0, 0}, {1, 2}, {0, 0}};
    uint8_t want[4 * 24 + 8];
    cr_assert_eq(len, min_dims_value(want, dims, recs, 4));
    cr_assert_eq(memcmp(v, want, len), 0);
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, NULL), DLC_OK, "%s", dlc_errmsg());
    dlc_store_close(s);
    free(path);
}

/* A store written before "min_dims" (the key deleted) opens, reads and verifies, its variable
 * images' smallest size unknown (0); a damaged or lying value is refused as corrupt. */
Test(store_writer, smallest_image_unknown_in_old_stores_and_checked)
{
    char *path = tmp_path(dir, "old.dlc");
    write_min_store(path);
    tsu_put_meta(path, "min_dims", NULL, 0);
    dlc_store *s = open_store(path);
    const dlc_field *f = dlc_store_fields(s);
    cr_assert_eq(f[0].min_dim0 | f[0].min_dim1, 0, "unknown");
    cr_assert_eq(f[0].min_record0 | f[0].min_record1, 0);
    cr_assert_eq(f[2].min_dim0, 0);
    cr_assert_eq(f[3].min_dim0, 4, "a fixed image's is its shape, also in an old store");
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, NULL), DLC_OK, "%s", dlc_errmsg());
    dlc_store_close(s);

    uint32_t dims[4][2] = {{30, 20}, {0, 0}, {30, 20}, {0, 0}};
    uint64_t recs[4][2] = {{1, 2}, {0, 0}, {1, 2}, {0, 0}};
    uint8_t v[4 * 24 + 8];
    size_t len = min_dims_value(v, dims, recs, 4);
    v[3] ^= 1; /* The hash no longer matches. */
    tsu_put_meta(path, "min_dims", v, len);
    s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "\"min_dims\" checksum mismatch"), "%s", dlc_errmsg());
    tsu_put_meta(path, "min_dims", v, len - 1);
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "\"min_dims\" of 103 bytes"), "%s", dlc_errmsg());
    /* Larger than the largest; an entry for a field that is not a variable image. */
    dims[0][0] = 61;
    tsu_put_meta(path, "min_dims", v, min_dims_value(v, dims, recs, 4));
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "field 0 \"image\": smallest 61x20"), "%s", dlc_errmsg());
    dims[0][0] = 30;
    dims[3][0] = 4;
    tsu_put_meta(path, "min_dims", v, min_dims_value(v, dims, recs, 4));
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "field 3 \"thumb\" is not a variable image"), "%s",
              dlc_errmsg());
    /* A smallest size that some record is under: that record is refused when read, and verify
     * finds a first record that is not the one named. */
    dims[3][0] = 0;
    dims[0][0] = 31;
    tsu_put_meta(path, "min_dims", v, min_dims_value(v, dims, recs, 4));
    s = open_store(path);
    dlc_store_reader *r = NULL;
    dlc_value vals[4];
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    cr_assert_eq(dlc_store_read_values(r, 0, vals), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_read_values(r, 1, vals), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "record 1: field \"image\": image size"), "%s", dlc_errmsg());
    dlc_store_reader_close(r);
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, NULL), DLC_ECORRUPT);
    dlc_store_close(s);
    dims[0][0] = 30;
    recs[2][1] = 3; /* 20 wide, but not the first such record. */
    tsu_put_meta(path, "min_dims", v, min_dims_value(v, dims, recs, 4));
    s = open_store(path);
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, NULL), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "field \"mask\": the smallest image is 30x20"), "%s",
              dlc_errmsg());
    dlc_store_close(s);
    free(path);
}

/* Options grow at their end (status.h, "How structs grow"): a program built before
 * source_digest existed sends a struct that ends at build_json, and the writer takes the
 * default, none, whatever that program's memory holds after it. */
static dlc_status write_one(const char *path, const dlc_writer_config *cfg)
{
    dlc_writer *w = NULL;
    dlc_record_builder *b = NULL;
    const dlc_status rc = dlc_writer_open(path, cfg, &w);
    if (rc != DLC_OK)
        return rc;
    cr_assert_eq(dlc_record_builder_create(w, &b), DLC_OK);
    cr_assert_eq(dlc_record_set_int(b, 0, 7), DLC_OK);
    cr_assert_eq(dlc_record_seal(b), DLC_OK);
    cr_assert_eq(dlc_writer_append(w, b), DLC_OK, "%s", dlc_errmsg());
    dlc_record_builder_destroy(b);
    return dlc_writer_finish(w);
}

static int has_source_digest(const char *path)
{
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    const void *v = NULL;
    size_t n = 0;
    const int has = dlc_store_meta(s, "source_digest", &v, &n) == DLC_OK;
    dlc_store_close(s);
    return has;
}

/* A struct_size is taken only when some header had it (status.h, "How structs grow"; the defaults
 * an older size gets are tested on the rule itself, tests/common/test_common_options.c): one
 * ending at build_json, which no released header had, is refused naming the struct. */
Test(store_writer, a_size_no_header_had_is_refused)
{
    const dlc_field_spec one = {.name = "x", .kind = DLC_FIELD_INT};
    dlc_writer_config cfg;
    dlc_writer_config_init(&cfg);
    cfg.fields = &one;
    cfg.num_fields = 1;
    cfg.source_digest = 0x1234;
    char *now = tmp_path(dir, "now.dlc"), *old = tmp_path(dir, "old.dlc");
    cr_assert_eq(write_one(now, &cfg), DLC_OK, "%s", dlc_errmsg());
    cr_assert(has_source_digest(now));
    cfg.struct_size = offsetof(dlc_writer_config, build_json) + sizeof cfg.build_json;
    cr_assert_eq(write_one(old, &cfg), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "dlc_writer_config: struct_size") != NULL, "%s", dlc_errmsg());
    free(old);
    free(now);
}

Test(store_writer, a_config_without_init_or_from_a_newer_header_is_refused)
{
    const dlc_field_spec one = {.name = "x", .kind = DLC_FIELD_INT};
    dlc_writer_config cfg = {.fields = &one, .num_fields = 1}; /* struct_size 0: no _init() */
    char *path = tmp_path(dir, "no.dlc");
    dlc_writer *w = NULL;
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "dlc_writer_config: struct_size is 0") != NULL, "%s",
              dlc_errmsg());
    cr_assert(strstr(dlc_errmsg(), "dlc_writer_config_init()") != NULL, "%s", dlc_errmsg());
    cr_assert_null(w);
    cfg.struct_size = sizeof cfg + 8;
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "newer dlcache header") != NULL, "%s", dlc_errmsg());
    cr_assert_null(w);
    struct stat st;
    cr_assert_neq(stat(path, &st), 0, "nothing was made");
    free(path);
}
