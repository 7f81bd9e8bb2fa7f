/* Record builders (cache/store/store_record.c): every setter refuses a value that disagrees with
 * its field, with DLC_EINVAL naming the field and the reason, and leaves the builder usable; seal
 * refuses a record with a missing value or boxes without as many classes; calls out of order are
 * DLC_ESTATE. */
#include "store_kinds.h"
#include "store_internal.h"
#include "store_test_util.h"

static char *dir;
static dlc_writer *w;
static dlc_record_builder *b;

static void setup(void)
{
    dir = tmp_mkdtemp();
    char *path = tmp_path(dir, "r.dlc");
    const dlc_writer_config cfg = sk_config(0);
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_record_builder_create(w, &b), DLC_OK, "%s", dlc_errmsg());
    free(path);
}

static void teardown(void)
{
    dlc_record_builder_destroy(b);
    dlc_writer_abort(w);
    tmp_rmdir(dir);
    dir = NULL;
}

TestSuite(store_record, .init = setup, .fini = teardown);

#define REFUSED(call, code, msg)                                                                   \
    do {                                                                                           \
        const dlc_status rc_ = (call);                                                             \
        cr_assert_eq(rc_, (code), "%s: %d %s", #call, rc_, dlc_errmsg());                          \
        cr_assert(strstr(dlc_errmsg(), (msg)), "\"%s\" not in \"%s\"", (msg), dlc_errmsg());       \
    } while (0)

Test(store_record, images_of_the_wrong_shape_are_refused)
{
    static uint8_t px[64 * 64 * 4];
    const dlc_image rgb = {px, 12, 16, 3, 36};
    REFUSED(dlc_record_set_image(b, SK_GRAY, &rgb), DLC_EINVAL,
            "field 1 \"gray\": 3 channels; the field has 1");
    const dlc_image gray = {px, 13, 16, 1, 13};
    REFUSED(dlc_record_set_image(b, SK_GRAY, &gray), DLC_EINVAL,
            "\"gray\": 16x13 pixels; the field is fixed at 16x12");
    const dlc_image narrow = {px, 12, 16, 1, 11};
    REFUSED(dlc_record_set_image(b, SK_GRAY, &narrow), DLC_EINVAL,
            "rows of 11 bytes are shorter than 12 pixels");
    const dlc_image empty = {px, 0, 5, 3, 0};
    REFUSED(dlc_record_set_image(b, SK_IMAGE, &empty), DLC_EINVAL, "5x0 pixels; each side is 1");
    const dlc_image huge = {px, 70000, 1, 1, 70000};
    REFUSED(dlc_record_set_image(b, SK_THUMB, &huge), DLC_EINVAL, "each side is 1 to 65500");
    REFUSED(dlc_record_set_image(b, SK_IMAGE, NULL), DLC_EINVAL, "\"image\": no pixels");
    const dlc_image nodata = {NULL, 2, 2, 3, 6};
    REFUSED(dlc_record_set_image(b, SK_IMAGE, &nodata), DLC_EINVAL, "no pixels");
    const dlc_image four = {px, 12, 10, 4, 48};
    REFUSED(dlc_record_set_image(b, SK_MASK, &four), DLC_EINVAL, "\"mask\": 4 channels");
    REFUSED(dlc_record_set_image(b, SK_BOXES, &four), DLC_EINVAL,
            "dlc_record_set_image is for an image, the field is an ndarray");
    REFUSED(dlc_record_set_image(b, SK_NUM_FIELDS, &four), DLC_EINVAL,
            "field 22, the schema has 22");
    cr_assert_eq(dlc_record_set_image(b, SK_RGBA, &four), DLC_OK, "%s", dlc_errmsg());
}

Test(store_record, encoded_images_must_match_their_field)
{
    dlc_codec *c = NULL;
    cr_assert_eq(dlc_codec_create(&c), DLC_OK);
    static uint8_t px[32 * 32 * 4];
    const dlc_image rgb = {px, 32, 32, 3, 96}, gray = {px, 12, 16, 1, 12};
    const uint8_t *enc;
    size_t size;
    cr_assert_eq(dlc_jpeg_encode(c, &rgb, 90, &enc, &size), DLC_OK);
    uint8_t *jpeg = malloc(size);
    memcpy(jpeg, enc, size);
    const size_t jsize = size;
    REFUSED(dlc_record_set_encoded(b, SK_IMAGE, jpeg, jsize, 32, 32), DLC_EINVAL,
            "a raw image field takes pixels");
    REFUSED(dlc_record_set_encoded(b, SK_PHOTO, jpeg, jsize, 32, 31), DLC_EINVAL,
            "the JPEG is 32x32, not the 32x31 given");
    REFUSED(dlc_record_set_encoded(b, SK_PHOTO, jpeg, jsize / 4, 32, 32), DLC_EINVAL, "not a JPEG");
    REFUSED(dlc_record_set_encoded(b, SK_PHOTO, jpeg, 0, 32, 32), DLC_EINVAL,
            "an encoded image of 0 bytes");
    REFUSED(dlc_record_set_encoded(b, SK_THUMB, jpeg, jsize, 32, 32), DLC_EINVAL,
            "\"thumb\": 3 channels; the field has 1");
    REFUSED(dlc_record_set_encoded(b, SK_RGBA, jpeg, jsize, 10, 12), DLC_EINVAL, "not a PNG");
    cr_assert_eq(dlc_record_set_encoded(b, SK_PHOTO, jpeg, jsize, 32, 32), DLC_OK, "%s",
                 dlc_errmsg());

    cr_assert_eq(dlc_png_encode(c, &gray, &enc, &size), DLC_OK);
    REFUSED(dlc_record_set_encoded(b, SK_RGBA, enc, size, 16, 12), DLC_EINVAL,
            "\"rgba\": 1 channels; the field has 4");
    REFUSED(dlc_record_set_encoded(b, SK_MASK, enc, size, 12, 16), DLC_EINVAL,
            "the PNG is 16x12, not the 12x16 given");
    cr_assert_eq(dlc_record_set_encoded(b, SK_MASK, enc, size, 16, 12), DLC_OK, "%s", dlc_errmsg());
    /* A 16-bit or palette PNG would not come back as the bytes stored: refused. */
    uint8_t *deep = malloc(size);
    memcpy(deep, enc, size);
    deep[24] = 16;
    REFUSED(dlc_record_set_encoded(b, SK_MASK, deep, size, 16, 12), DLC_EINVAL, "not a PNG");
    free(deep);
    free(jpeg);
    dlc_codec_destroy(c);
}

Test(store_record, arrays_scalars_and_bytes_of_the_wrong_size_are_refused)
{
    static uint8_t data[256];
    REFUSED(dlc_record_set_array(b, SK_A_F32, data, 20, 2), DLC_EINVAL,
            "\"a_f32\": 20 bytes; 2 rows of 12 bytes (float32) are 24");
    REFUSED(dlc_record_set_array(b, SK_A_F32, data, 36, 3), DLC_EINVAL,
            "leading dimension 3; the field's is 2");
    REFUSED(dlc_record_set_array(b, SK_BOXES, data, 16, 2), DLC_EINVAL, "2 rows of 16 bytes");
    REFUSED(dlc_record_set_array(b, SK_TOKENS, data, 1, 0), DLC_EINVAL, "1 bytes; 0 rows");
    REFUSED(dlc_record_set_array(b, SK_TOKENS, NULL, 8, 2), DLC_EINVAL, "NULL data");
    REFUSED(dlc_record_set_array(b, SK_TOKENS, data, 0, UINT32_MAX), DLC_EINVAL,
            "over LMDB's 4 GiB value limit");
    REFUSED(dlc_record_set_array(b, SK_ID, data, 8, 1), DLC_EINVAL,
            "dlc_record_set_array is for an ndarray, the field is an int");
    REFUSED(dlc_record_set_int(b, SK_WEIGHT, 1), DLC_EINVAL, "the field is a float");
    REFUSED(dlc_record_set_float(b, SK_ID, 1.0), DLC_EINVAL, "the field is an int");
    REFUSED(dlc_record_set_bytes(b, SK_ID, data, 1), DLC_EINVAL, "the field is an int");
    REFUSED(dlc_record_set_bytes(b, SK_CAPTION, NULL, 3), DLC_EINVAL, "NULL data");
    cr_assert_eq(dlc_record_set_array(b, SK_TOKENS, NULL, 0, 0), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_record_set_bytes(b, SK_CAPTION, NULL, 0), DLC_OK, "%s", dlc_errmsg());
    REFUSED(dlc_record_set_int(NULL, SK_ID, 1), DLC_EINVAL, "NULL builder");
}

Test(store_record, seal_needs_every_value_and_matching_classes)
{
    sk_record *r = malloc(sizeof *r);
    cr_assert_eq(sk_set(b, r, 5), DLC_OK, "%s", dlc_errmsg());
    /* Record 5 has 1 box: give it classes of another count. */
    static const uint8_t cls[8] = {0};
    cr_assert_eq(dlc_record_set_array(b, SK_CLASSES, cls, 8, 2), DLC_OK);
    REFUSED(dlc_record_seal(b), DLC_EINVAL,
            "field 6 \"boxes\": 1 boxes, but its class field \"classes\" has 2 entries");
    dlc_record_builder_reset(b);
    cr_assert_eq(sk_set(b, r, 5), DLC_OK);
    dlc_record_builder_reset(b);
    cr_assert_eq(dlc_record_set_int(b, SK_LABEL, 1), DLC_OK);
    REFUSED(dlc_record_seal(b), DLC_EINVAL, "field 0 \"image\": no value was set");
    REFUSED(dlc_writer_append(w, b), DLC_ESTATE, "not sealed");

    cr_assert_eq(sk_set(b, r, 5), DLC_OK);
    cr_assert_eq(dlc_record_seal(b), DLC_OK, "%s", dlc_errmsg());
    REFUSED(dlc_record_seal(b), DLC_ESTATE, "already sealed");
    REFUSED(dlc_record_set_int(b, SK_ID, 3), DLC_ESTATE, "the record is sealed");
    cr_assert_eq(dlc_writer_append(w, b), DLC_OK, "%s", dlc_errmsg());
    REFUSED(dlc_writer_append(w, b), DLC_ESTATE, "not sealed");
    free(r);
}

Test(store_record, a_builder_of_another_schema_is_refused)
{
    char *path = tmp_path(dir, "other.dlc");
    const dlc_field_spec one = {.name = "x", .kind = DLC_FIELD_INT};
    const dlc_writer_config cfg = {
        .struct_size = sizeof(dlc_writer_config), .fields = &one, .num_fields = 1};
    dlc_writer *w2 = NULL;
    dlc_record_builder *b2 = NULL;
    cr_assert_eq(dlc_writer_open(path, &cfg, &w2), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_record_builder_create(w2, &b2), DLC_OK);
    cr_assert_eq(dlc_record_set_int(b2, 0, 7), DLC_OK);
    cr_assert_eq(dlc_record_seal(b2), DLC_OK);
    REFUSED(dlc_writer_append(w, b2), DLC_ESTATE, "built for another schema");
    cr_assert_eq(dlc_writer_append(w2, b2), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_writer_finish(w2), DLC_OK, "%s", dlc_errmsg());
    dlc_record_builder_destroy(b2);
    dlc_record_builder_destroy(NULL);

    dlc_store *s = NULL;
    cr_assert_eq(dlc_store_open(path, 0, &s), DLC_OK, "%s", dlc_errmsg());
    dlc_store_reader *r = NULL;
    dlc_value v;
    cr_assert_eq(dlc_store_reader_open(s, &r), DLC_OK);
    cr_assert_eq(dlc_store_read_values(r, 0, &v), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(v.i, 7);
    cr_assert_eq(v.size, 8);
    cr_assert_eq(dlc__ld64(v.data), 7, "the scalar's 8 bytes in the header");
    cr_assert_eq(dlc_value_verify(s, 0, 0, &v), DLC_OK);
    dlc_store_reader_close(r);
    dlc_store_close(s);
    free(path);
}

/* A builder of @p cfg's schema on a writer of its own under dir (abort it after). */
static void open_other(const char *name, const dlc_field_spec *fields, uint32_t n, dlc_writer **wo,
                       dlc_record_builder **bo)
{
    char *path = tmp_path(dir, name);
    const dlc_writer_config cfg = {
        .struct_size = sizeof(dlc_writer_config), .fields = fields, .num_fields = n};
    cr_assert_eq(dlc_writer_open(path, &cfg, wo), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_record_builder_create(*wo, bo), DLC_OK, "%s", dlc_errmsg());
    free(path);
}

/* The builder resizes straight into the record (build_item.c): pixels written at the place
 * dlc__record_image_place() gives make the same record, byte for byte, as the same pixels
 * copied from elsewhere by the seal; a field whose place is not known before the seal has none. */
Test(store_record, an_image_written_in_place_makes_the_same_record)
{
    const dlc_field_spec fields[] = {
        {.name = "label", .kind = DLC_FIELD_INT, .flags = DLC_FIELD_LABEL},
        {.name = "image", .kind = DLC_FIELD_IMAGE, .shape = {5, 7, 3}},
        {.name = "mask", .kind = DLC_FIELD_IMAGE, .flags = DLC_FIELD_MASK, .shape = {5, 7, 1}},
    };
    dlc_writer *w1 = NULL, *w2 = NULL;
    dlc_record_builder *in_place = NULL, *copied = NULL;
    open_other("a.dlc", fields, 3, &w1, &in_place);
    open_other("b.dlc", fields, 3, &w2, &copied);
    uint8_t px[5 * 7 * 3], mask[5 * 7];
    for (size_t k = 0; k < sizeof px; k++)
        px[k] = (uint8_t)(k * 37 + 11);
    memset(mask, 3, sizeof mask);
    const dlc_image m = {mask, 7, 5, 1, 7};
    for (int round = 0; round < 2; round++) { /* the second reuses the builders' buffers */
        px[0] = (uint8_t)round;
        cr_assert_null(dlc__record_image_place(in_place, 2, sizeof mask),
                       "the mask follows the image's payload: no place before the seal");
        uint8_t *place = dlc__record_image_place(in_place, 1, sizeof px);
        cr_assert_not_null(place);
        memcpy(place, px, sizeof px);
        const dlc_image a = {place, 7, 5, 3, 21}, b2 = {px, 7, 5, 3, 21};
        cr_assert_eq(dlc_record_set_int(in_place, 0, 4), DLC_OK);
        cr_assert_eq(dlc_record_set_image(in_place, 1, &a), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_set_image(in_place, 2, &m), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_seal(in_place), DLC_OK, "%s", dlc_errmsg());
        cr_assert_null(dlc__record_image_place(in_place, 1, sizeof px), "sealed: no place");
        cr_assert_eq(dlc_record_set_int(copied, 0, 4), DLC_OK);
        cr_assert_eq(dlc_record_set_image(copied, 1, &b2), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_set_image(copied, 2, &m), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_record_seal(copied), DLC_OK, "%s", dlc_errmsg());
        dlc__sealed ra, rb;
        cr_assert_eq(dlc__record_sealed(in_place, &ra), DLC_OK);
        cr_assert_eq(dlc__record_sealed(copied, &rb), DLC_OK);
        cr_assert_eq(ra.size, rb.size);
        cr_assert_eq(ra.payload, rb.payload);
        cr_assert_eq(memcmp(ra.value, rb.value, ra.size), 0, "round %d: the records differ", round);
        cr_assert_eq(dlc_writer_append(w1, in_place), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(dlc_writer_append(w2, copied), DLC_OK, "%s", dlc_errmsg());
    }
    dlc_record_builder_destroy(in_place);
    dlc_record_builder_destroy(copied);
    dlc_writer_abort(w1);
    dlc_writer_abort(w2);

    const dlc_field_spec jpeg = {.name = "image",
                                 .kind = DLC_FIELD_IMAGE,
                                 .encoding = DLC_ENCODING_JPEG,
                                 .shape = {5, 7, 3}};
    open_other("c.dlc", &jpeg, 1, &w1, &in_place);
    cr_assert_null(dlc__record_image_place(in_place, 0, sizeof px), "encoded at seal: no place");
    cr_assert_null(dlc__record_image_place(in_place, 1, sizeof px), "no such field");
    cr_assert_null(dlc__record_image_place(NULL, 0, sizeof px));
    dlc_record_builder_destroy(in_place);
    dlc_writer_abort(w1);
}
