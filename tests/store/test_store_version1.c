/* Stores of format version 1, made before schemas (tests/lib/store_v1.h writes them with LMDB
 * directly, as the version 1 writer did): they open and read through every API exactly as
 * before, and read as the two fields "image" and "label". */
#include "store_test_util.h"
#include "store_v1.h"

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

TestSuite(store_version1, .init = setup, .fini = teardown);

/* Open a version 1 store of @p o at DIR/v1.dlc. */
static dlc_store *open_v1(const tv1_options *o, char **path)
{
    *path = tmp_path(dir, "v1.dlc");
    cr_assert_eq(tv1_write_store(*path, o), DLC_OK, "%s", dlc_errmsg());
    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(*path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    return s;
}

Test(store_version1, every_api_reads_a_version_1_store)
{
    const tv1_options o = {.count = 40, .channels = 3, .num_labels = 3};
    char *path;
    dlc_store *s = open_v1(&o, &path);
    const dlc_store_info *info = dlc_store_get_info(s);
    cr_assert_eq(info->format_version, 1);
    cr_assert_eq(info->count, 40);
    cr_assert_eq(info->encoding, DLC_ENCODING_RAW);
    cr_assert(info->height == 0 && info->width == 0 && info->channels == 3);
    cr_assert_eq(info->num_labels, 3);
    cr_assert_eq(info->skipped, 1);
    cr_assert_eq(info->num_fields, 2);
    cr_assert_eq(info->image_field, 0);
    cr_assert_eq(info->label_field, 1);
    const dlc_field *f = dlc_store_fields(s);
    cr_assert_str_eq(f[0].name, "image");
    cr_assert_eq(f[0].kind, DLC_FIELD_IMAGE);
    cr_assert_eq(f[0].flags, DLC_FIELD_VARIABLE);
    cr_assert_eq(f[0].ndim, 3);
    cr_assert_eq(f[0].shape[2], 3);
    cr_assert_eq(f[0].link, DLC_NO_FIELD);
    cr_assert_str_eq(f[1].name, "label");
    cr_assert_eq(f[1].kind, DLC_FIELD_INT);
    cr_assert_eq(f[1].dtype, DLC_DTYPE_INT64);
    cr_assert_eq(f[1].flags, DLC_FIELD_LABEL);
    cr_assert_eq(dlc_store_find_field(s, "label"), 1);
    cr_assert_eq(dlc_store_find_field(s, "schema"), -1);
    cr_assert_str_eq(dlc_store_label_name(s, 2), "class2");
    cr_assert_eq(dlc_store_label_counts(s)[0], 14);
    const void *mv;
    size_t ms;
    cr_assert_eq(dlc_store_meta(s, "source_digest", &mv, &ms), DLC_OK);
    cr_assert_eq(memcmp(mv, "00000000cafef00d", 16), 0);

    dlc_store_reader *r = NULL;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    uint8_t want[256 * 3 * 100];
    uint64_t max_size = 0;
    for (uint64_t i = 0; i < o.count; i++) {
        uint32_t h, w;
        tv1_shape(&o, i, &h, &w);
        const size_t size = (size_t)h * w * 3;
        max_size = size > max_size ? size : max_size;
        for (size_t j = 0; j < size; j++)
            want[j] = tv1_byte(i, j);
        dlc_record rec;
        cr_assert_eq(dlc_store_read(r, i, &rec), DLC_OK, "%s", dlc_errmsg());
        cr_assert(rec.index == i && rec.label == (int64_t)(i % 3) && rec.height == h &&
                  rec.width == w && rec.channels == 3 && rec.size == size);
        cr_assert_eq(memcmp(rec.data, want, size), 0);
        cr_assert_eq(dlc_record_verify(s, &rec), DLC_OK);
        if (size > 2100)
            cr_assert_eq(rec.offset % 64, 0, "version 1 payloads are aligned too");
        dlc_value v[2];
        cr_assert_eq(dlc_store_read_values(r, i, v), DLC_OK, "%s", dlc_errmsg());
        cr_assert(v[0].data == rec.data && v[0].size == size && v[0].offset == rec.offset);
        cr_assert(v[0].dim0 == h && v[0].dim1 == w && v[0].xxh3 == rec.xxh3);
        cr_assert(v[1].i == rec.label && v[1].size == 8 && dlc__ld64(v[1].data) == i % 3);
        cr_assert_eq(dlc_value_verify(s, i, 0, &v[0]), DLC_OK);
        cr_assert_eq(dlc_value_verify(s, i, 1, &v[1]), DLC_OK);
    }
    cr_assert_eq(f[0].max_size, max_size, "the largest payload, found at open");
    dlc_record rec;
    cr_assert_eq(dlc_store_read(r, 40, &rec), DLC_ENOTFOUND);
    dlc_value v[2];
    cr_assert_eq(dlc_store_read_values(r, 40, v), DLC_ENOTFOUND);
    dlc_store_reader_close(r);
    uint64_t bad = 7;
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, &bad), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(bad, 0);
    dlc_store_close(s);
    free(path);
}

Test(store_version1, fixed_size_and_jpeg_version_1_stores)
{
    const tv1_options o = {
        .count = 9, .height = 20, .width = 30, .channels = 1, .num_labels = 2, .jpeg = 1};
    char *path;
    dlc_store *s = open_v1(&o, &path);
    const dlc_store_info *info = dlc_store_get_info(s);
    cr_assert(info->encoding == DLC_ENCODING_JPEG && info->height == 20 && info->width == 30 &&
              info->channels == 1);
    const dlc_field *f = dlc_store_fields(s);
    cr_assert_eq(f[0].flags, 0, "one size: a fixed field");
    cr_assert(f[0].shape[0] == 20 && f[0].shape[1] == 30 && f[0].max_dim0 == 20);
    dlc_store_reader *r = NULL;
    dlc_codec *c = NULL;
    cr_assert_eq(dlc_codec_create(&c), DLC_OK);
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    for (uint64_t i = 0; i < o.count; i++) {
        dlc_value v[2];
        cr_assert_eq(dlc_store_read_values(r, i, v), DLC_OK, "%s", dlc_errmsg());
        dlc_image img;
        cr_assert_eq(dlc_jpeg_decode_as(c, v[0].data, v[0].size, 1, 0, 0, &img), DLC_OK);
        cr_assert(img.width == 30 && img.height == 20);
    }
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, NULL), DLC_OK, "%s", dlc_errmsg());
    dlc_codec_destroy(c);
    dlc_store_reader_close(r);
    dlc_store_close(s);
    free(path);
}

Test(store_version1, damaged_version_1_records_are_named)
{
    const tv1_options o = {.count = 12, .height = 40, .width = 40, .channels = 3, .num_labels = 3};
    char *path;
    dlc_store *s = open_v1(&o, &path);
    dlc_store_reader *r = NULL;
    dlc_record rec;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    cr_assert_eq(dlc_store_read(r, 7, &rec), DLC_OK);
    const uint64_t payload = rec.offset;
    dlc_store_reader_close(r);
    dlc_store_close(s);

    FILE *fp = fopen(path, "r+b");
    cr_assert_not_null(fp);
    fseek(fp, (long)payload + 100, SEEK_SET);
    fputc(0x5a, fp);
    fseek(fp, (long)payload - 48, SEEK_SET); /* Record 7's magic. */
    fputc('X', fp);
    fclose(fp);
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    dlc_value v[2];
    cr_assert_eq(dlc_store_read_values(r, 7, v), DLC_ECORRUPT);
    cr_assert(strstr(dlc_errmsg(), "record 7: bad header magic"), "%s", dlc_errmsg());
    cr_assert_eq(dlc_store_read(r, 7, &rec), DLC_ECORRUPT);
    uint64_t bad = 0;
    cr_assert_eq(dlc_store_verify(s, NULL, NULL, &bad), DLC_ECORRUPT);
    cr_assert_eq(bad, 1);
    cr_assert(strstr(dlc_errmsg(), "record 7"), "%s", dlc_errmsg());
    dlc_store_reader_close(r);
    dlc_store_close(s);
    free(path);
}
