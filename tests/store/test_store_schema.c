/* Schemas (cache/store/store_schema.c): dlc_writer_open() refuses every schema that breaks a rule
 * of docs/FORMAT.md, before it makes a file, with DLC_EINVAL and a message naming the field and the
 * reason; the element types have their sizes and numpy's names. */
#include "store_test_util.h"

#include <dlcache/writer.h>

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

TestSuite(store_schema, .init = setup, .fini = teardown);

/* A valid schema of an image, boxes with their classes, and a label. */
static void base(dlc_field_spec f[4])
{
    memset(f, 0, 4 * sizeof *f);
    f[0] = (dlc_field_spec){.name = "img", .kind = DLC_FIELD_IMAGE, .shape = {8, 8, 3}};
    f[1] = (dlc_field_spec){.name = "boxes",
                            .kind = DLC_FIELD_NDARRAY,
                            .dtype = DLC_DTYPE_FLOAT32,
                            .flags = DLC_FIELD_VARIABLE | DLC_FIELD_BOXES,
                            .ndim = 2,
                            .shape = {0, 4},
                            .link = "cls"};
    f[2] = (dlc_field_spec){
        .name = "cls", .kind = DLC_FIELD_NDARRAY, .flags = DLC_FIELD_VARIABLE, .ndim = 1};
    f[3] = (dlc_field_spec){.name = "label", .kind = DLC_FIELD_INT, .flags = DLC_FIELD_LABEL};
}

static const char *const names[] = {"a", "b"};

/* Open with @p f; expect @p want (DLC_OK: then abort) and, on failure, @p msg in the message
 * and no file left in the directory. */
static void expect(const dlc_field_spec *f, uint32_t n, dlc_status want, const char *msg)
{
    char *path = tmp_path(dir, "s.dlc");
    const dlc_writer_config cfg = {.struct_size = sizeof(dlc_writer_config),
                                   .fields = f,
                                   .num_fields = n,
                                   .label_names = names,
                                   .num_labels = 2};
    dlc_writer *w = NULL;
    const dlc_status rc = dlc_writer_open(path, &cfg, &w);
    cr_assert_eq(rc, want, "want %d, got %d: %s (%s)", want, rc, dlc_errmsg(), msg);
    if (rc == DLC_OK) {
        dlc_writer_abort(w);
    } else {
        cr_assert_null(w);
        cr_assert(strstr(dlc_errmsg(), msg), "\"%s\" not in \"%s\"", msg, dlc_errmsg());
        cr_assert(strstr(dlc_errmsg(), path), "the store is named: %s", dlc_errmsg());
    }
    cr_assert_neq(access(path, F_OK), 0);
    cr_assert_not(tsu_has_temp(dir));
    free(path);
}

Test(store_schema, the_base_schema_is_valid)
{
    dlc_field_spec f[4];
    base(f);
    expect(f, 4, DLC_OK, "");
}

typedef struct hostile {
    int field;          /* Which field to change. */
    dlc_field_spec bad; /* Its replacement. */
    const char *msg;    /* In the message. */
} hostile;

Test(store_schema, hostile_fields_are_refused_naming_the_field)
{
    const hostile cases[] = {
        {0, {.name = "", .kind = DLC_FIELD_IMAGE, .shape = {8, 8, 3}}, "field 0: bad name"},
        {0, {.name = "9lives", .kind = DLC_FIELD_IMAGE, .shape = {8, 8, 3}}, "bad name"},
        {0, {.name = "a-b", .kind = DLC_FIELD_IMAGE, .shape = {8, 8, 3}}, "bad name"},
        {0, {.name = "caf\xc3\xa9", .kind = DLC_FIELD_IMAGE, .shape = {8, 8, 3}}, "bad name"},
        {0,
         {.name = "a_name_of_thirty_two_characters_", .kind = DLC_FIELD_IMAGE, .shape = {8, 8, 3}},
         "a name of 32 characters; at most 31"},
        {0, {.kind = DLC_FIELD_IMAGE, .shape = {8, 8, 3}}, "field 0: no name"},
        {3,
         {.name = "boxes", .kind = DLC_FIELD_INT, .flags = DLC_FIELD_LABEL},
         "field 3 \"boxes\": the name is also field 1's"},
        {0, {.name = "img", .kind = 0}, "unknown kind 0"},
        {0, {.name = "img", .kind = 6}, "unknown kind 6"},
        {0, {.name = "img", .kind = DLC_FIELD_IMAGE, .shape = {8, 8, 2}}, "2 channels"},
        {0, {.name = "img", .kind = DLC_FIELD_IMAGE, .shape = {8, 8, 0}}, "0 channels"},
        {0, {.name = "img", .kind = DLC_FIELD_IMAGE, .shape = {0, 8, 3}}, "a fixed image is 1 to"},
        {0,
         {.name = "img", .kind = DLC_FIELD_IMAGE, .flags = DLC_FIELD_VARIABLE, .shape = {8, 8, 3}},
         "a VARIABLE image has height and width 0"},
        {0,
         {.name = "img", .kind = DLC_FIELD_IMAGE, .shape = {1u << 21, 8, 3}},
         "a fixed image is 1 to"},
        {0,
         {.name = "img", .kind = DLC_FIELD_IMAGE, .shape = {1u << 20, 1u << 20, 4}},
         "do not fit in one LMDB value"},
        {0,
         {.name = "img", .kind = DLC_FIELD_IMAGE, .encoding = 3, .shape = {8, 8, 3}},
         "unknown image encoding 3"},
        {0,
         {.name = "img", .kind = DLC_FIELD_IMAGE, .ndim = 2, .shape = {8, 8, 3}},
         "3 dimensions"},
        {0, {.name = "img", .kind = DLC_FIELD_IMAGE, .shape = {8, 8, 3, 1}}, "past the third"},
        {0,
         {.name = "img",
          .kind = DLC_FIELD_IMAGE,
          .encoding = DLC_ENCODING_JPEG,
          .flags = DLC_FIELD_MASK,
          .shape = {8, 8, 1}},
         "a MASK is stored raw or PNG"},
        {0,
         {.name = "img",
          .kind = DLC_FIELD_IMAGE,
          .encoding = DLC_ENCODING_JPEG,
          .shape = {8, 8, 4}},
         "JPEG holds 1 or 3 channels"},
        {0,
         {.name = "img",
          .kind = DLC_FIELD_IMAGE,
          .encoding = DLC_ENCODING_JPEG,
          .shape = {70000, 8, 3}},
         "larger than a JPEG can be"},
        {0,
         {.name = "img",
          .kind = DLC_FIELD_IMAGE,
          .encoding = DLC_ENCODING_JPEG,
          .shape = {8, 8, 3},
          .quality = 101},
         "JPEG quality 101"},
        {0,
         {.name = "img", .kind = DLC_FIELD_IMAGE, .flags = DLC_FIELD_BOXES, .shape = {8, 8, 3}},
         "an image may only be VARIABLE and MASK"},
        {0,
         {.name = "img", .kind = DLC_FIELD_IMAGE, .shape = {8, 8, 3}, .link = "cls"},
         "link 2 on a field that is not BOXES"},
        {0,
         {.name = "arr", .kind = DLC_FIELD_NDARRAY, .dtype = 9, .ndim = 1, .shape = {1}},
         "\"arr\": unknown dtype 9"},
        {0, {.name = "arr", .kind = DLC_FIELD_NDARRAY, .ndim = 0}, "ndim 0"},
        {0, {.name = "arr", .kind = DLC_FIELD_NDARRAY, .ndim = 7}, "ndim 7"},
        {0, {.name = "arr", .kind = DLC_FIELD_NDARRAY, .ndim = 1}, "shape[0] is 0"},
        {0,
         {.name = "arr", .kind = DLC_FIELD_NDARRAY, .ndim = 2, .shape = {3, 0}},
         "shape[1] is 0"},
        {0,
         {.name = "arr", .kind = DLC_FIELD_NDARRAY, .ndim = 1, .shape = {3, 3}},
         "past ndim 1 must be 0"},
        {0,
         {.name = "arr",
          .kind = DLC_FIELD_NDARRAY,
          .dtype = DLC_DTYPE_INT64,
          .ndim = 3,
          .shape = {65536, 65536, 65536}},
         "over 4 GiB"},
        {0,
         {.name = "arr", .kind = DLC_FIELD_NDARRAY, .encoding = 1, .ndim = 1, .shape = {2}},
         "an ndarray has encoding 0"},
        {0,
         {.name = "arr", .kind = DLC_FIELD_NDARRAY, .flags = DLC_FIELD_MASK, .ndim = 1},
         "an ndarray may only be VARIABLE and BOXES"},
        {1,
         {.name = "boxes",
          .kind = DLC_FIELD_NDARRAY,
          .dtype = DLC_DTYPE_FLOAT32,
          .flags = DLC_FIELD_VARIABLE | DLC_FIELD_BOXES,
          .ndim = 2,
          .shape = {0, 4}},
         "BOXES needs a link"},
        {1,
         {.name = "boxes",
          .kind = DLC_FIELD_NDARRAY,
          .dtype = DLC_DTYPE_FLOAT32,
          .flags = DLC_FIELD_VARIABLE | DLC_FIELD_BOXES,
          .ndim = 2,
          .shape = {0, 4},
          .link = "nope"},
         "link \"nope\" names no field"},
        {1,
         {.name = "boxes",
          .kind = DLC_FIELD_NDARRAY,
          .dtype = DLC_DTYPE_FLOAT32,
          .flags = DLC_FIELD_VARIABLE | DLC_FIELD_BOXES,
          .ndim = 2,
          .shape = {0, 4},
          .link = "boxes"},
         "BOXES needs a link"},
        {1,
         {.name = "boxes",
          .kind = DLC_FIELD_NDARRAY,
          .dtype = DLC_DTYPE_FLOAT32,
          .flags = DLC_FIELD_VARIABLE | DLC_FIELD_BOXES,
          .ndim = 2,
          .shape = {0, 4},
          .link = "img"},
         "its class field 0 is not an ndarray of one dimension"},
        {1,
         {.name = "boxes",
          .kind = DLC_FIELD_NDARRAY,
          .dtype = DLC_DTYPE_FLOAT64,
          .flags = DLC_FIELD_VARIABLE | DLC_FIELD_BOXES,
          .ndim = 2,
          .shape = {0, 4},
          .link = "cls"},
         "BOXES is a float32 ndarray of N x 4"},
        {1,
         {.name = "boxes",
          .kind = DLC_FIELD_NDARRAY,
          .dtype = DLC_DTYPE_FLOAT32,
          .flags = DLC_FIELD_VARIABLE | DLC_FIELD_BOXES,
          .ndim = 2,
          .shape = {0, 5},
          .link = "cls"},
         "BOXES is a float32 ndarray of N x 4"},
        {1,
         {.name = "boxes",
          .kind = DLC_FIELD_NDARRAY,
          .dtype = DLC_DTYPE_FLOAT32,
          .flags = DLC_FIELD_BOXES,
          .ndim = 2,
          .shape = {3, 4},
          .link = "cls"},
         "must have as many entries as there are boxes"},
        {3,
         {.name = "label", .kind = DLC_FIELD_FLOAT, .flags = DLC_FIELD_LABEL},
         "\"label\": flags 0x8 not allowed"},
        {3, {.name = "label", .kind = DLC_FIELD_INT, .flags = DLC_FIELD_VARIABLE}, "(only LABEL)"},
        {3, {.name = "label", .kind = DLC_FIELD_INT, .ndim = 1}, "no shape"},
        {3, {.name = "label", .kind = DLC_FIELD_BYTES, .encoding = 2}, "encoding 2 on a field"},
        {3, {.name = "label", .kind = DLC_FIELD_BYTES, .shape = {1}}, "no shape"},
        {0,
         {.name = "img", .kind = DLC_FIELD_INT, .flags = DLC_FIELD_LABEL},
         "field 3 \"label\": a second LABEL field"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dlc_field_spec f[4];
        base(f);
        f[cases[k].field] = cases[k].bad;
        expect(f, 4, DLC_EINVAL, cases[k].msg);
    }
}

Test(store_schema, hostile_configurations_are_refused)
{
    char *path = tmp_path(dir, "c.dlc");
    dlc_field_spec f[4];
    base(f);
    dlc_writer *w = NULL;
    dlc_writer_config cfg = {.struct_size = sizeof(dlc_writer_config),
                             .fields = f,
                             .num_fields = 0,
                             .label_names = names,
                             .num_labels = 2};
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "0 fields; a record has 1 to 64"), "%s", dlc_errmsg());
    cfg.num_fields = 65;
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_EINVAL);
    cfg = (dlc_writer_config){.struct_size = sizeof(dlc_writer_config), .num_fields = 4};
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_EINVAL, "no fields");
    /* num_labels = 0 with a LABEL names the labels at finish (test_store_writer.c); names given
     * without their count are a mistake. */
    cfg = (dlc_writer_config){.struct_size = sizeof(dlc_writer_config),
                              .fields = f,
                              .num_fields = 4,
                              .label_names = names};
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "\"label\" is the LABEL: label_names given without num_labels"),
              "%s", dlc_errmsg());
    cfg = (dlc_writer_config){.struct_size = sizeof(dlc_writer_config),
                              .fields = f,
                              .num_fields = 3,
                              .label_names = names,
                              .num_labels = 2};
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "2 label names but no field is the LABEL"), "%s", dlc_errmsg());
    const char *const holes[] = {"a", NULL};
    cfg = (dlc_writer_config){.struct_size = sizeof(dlc_writer_config),
                              .fields = f,
                              .num_fields = 4,
                              .label_names = holes,
                              .num_labels = 2};
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "label name 1 is NULL"), "%s", dlc_errmsg());
    cfg.label_names = NULL;
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_EINVAL);
    cr_assert_eq(dlc_writer_open(NULL, &cfg, &w), DLC_EINVAL);
    cr_assert_eq(dlc_writer_open(path, NULL, &w), DLC_EINVAL);
    cr_assert_null(w);
    cr_assert_neq(access(path, F_OK), 0);
    cr_assert_not(tsu_has_temp(dir));
    free(path);
}

Test(store_schema, every_field_kind_alone_and_sixty_four_fields)
{
    const dlc_field_spec alone[] = {
        {.name = "b", .kind = DLC_FIELD_BYTES},
        {.name = "f", .kind = DLC_FIELD_FLOAT},
        {.name = "i", .kind = DLC_FIELD_INT},
        {.name = "m",
         .kind = DLC_FIELD_IMAGE,
         .encoding = DLC_ENCODING_PNG,
         .flags = DLC_FIELD_MASK | DLC_FIELD_VARIABLE,
         .shape = {0, 0, 1}},
        {.name = "t",
         .kind = DLC_FIELD_NDARRAY,
         .dtype = DLC_DTYPE_FLOAT64,
         .ndim = 6,
         .shape = {1, 2, 3, 4, 5, 6}},
    };
    char *path = tmp_path(dir, "k.dlc");
    for (size_t k = 0; k < sizeof alone / sizeof alone[0]; k++) {
        const dlc_writer_config cfg = {
            .struct_size = sizeof(dlc_writer_config), .fields = &alone[k], .num_fields = 1};
        dlc_writer *w = NULL;
        cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK, "%s", dlc_errmsg());
        dlc_writer_abort(w);
    }
    dlc_field_spec many[DLC_MAX_FIELDS];
    char nm[DLC_MAX_FIELDS][8];
    for (uint32_t k = 0; k < DLC_MAX_FIELDS; k++) {
        snprintf(nm[k], sizeof nm[k], "f%u", k);
        many[k] = (dlc_field_spec){.name = nm[k], .kind = DLC_FIELD_INT};
    }
    const dlc_writer_config cfg = {
        .struct_size = sizeof(dlc_writer_config), .fields = many, .num_fields = DLC_MAX_FIELDS};
    dlc_writer *w = NULL;
    cr_assert_eq(dlc_writer_open(path, &cfg, &w), DLC_OK, "%s", dlc_errmsg());
    dlc_writer_abort(w);
    free(path);
}

Test(store_schema, dtypes_have_their_sizes_and_names)
{
    const struct {
        uint32_t dtype;
        size_t size;
        const char *name;
    } want[] = {
        {DLC_DTYPE_UINT8, 1, "uint8"},     {DLC_DTYPE_FLOAT32, 4, "float32"},
        {DLC_DTYPE_FLOAT16, 2, "float16"}, {DLC_DTYPE_INT8, 1, "int8"},
        {DLC_DTYPE_UINT16, 2, "uint16"},   {DLC_DTYPE_INT16, 2, "int16"},
        {DLC_DTYPE_INT32, 4, "int32"},     {DLC_DTYPE_INT64, 8, "int64"},
        {DLC_DTYPE_FLOAT64, 8, "float64"}, {DLC_DTYPE_BFLOAT16, 2, "bfloat16"},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        cr_assert_eq(dlc_dtype_size(want[k].dtype), want[k].size);
        cr_assert_str_eq(dlc_dtype_name(want[k].dtype), want[k].name);
    }
    cr_assert_eq(dlc_dtype_size(10), 0);
    cr_assert_str_eq(dlc_dtype_name(10), "?");
    cr_assert_str_eq(dlc_dtype_name(UINT32_MAX), "?");
}
