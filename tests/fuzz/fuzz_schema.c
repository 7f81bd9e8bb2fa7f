/* Fuzz the writer and the reader together: the input describes a schema (field kinds, dtypes,
 * encodings, flags, shapes, names and links, with invalid values among them) and a few records
 * of values (sizes, channels and dimensions that may disagree with their fields, encoded images
 * of random bytes, labels out of range). The harness drives dlc_writer_open, the dlc_record_set_*
 * calls, seal, append and finish, then opens the store it wrote and reads every record back.
 *
 * The promise checked: whatever is refused is refused with a message; whatever is accepted reads
 * back exactly (raw pixels, PNG pixels after decoding, arrays, bytes and scalars bit for bit,
 * JPEG at its size), with the schema as given (a VARIABLE field may come back fixed, at the one
 * size all its records had), and the store verifies.
 *
 * Seeds: inputs of valid schemas of every kind, written by this harness when it runs with
 * DLC_FUZZ_SEED_DIR set (tests/fuzz/make_seeds.sh). */
#include "fuzz_util.h"

#include <dlcache/store.h>
#include <dlcache/writer.h>

#include <math.h>

#define MAX_FIELDS 12u
#define MAX_RECORDS 4u
#define MAX_VALUE 4096u /* Largest value the harness passes; larger fields are given none. */

static const char *const NAMES[] = {"a",
                                    "b",
                                    "img",
                                    "mask",
                                    "boxes",
                                    "cls",
                                    "x_1",
                                    "_",
                                    "9bad",
                                    "bad-name",
                                    "",
                                    "A23456789012345678901234567890b",
                                    "A23456789012345678901234567890bc",
                                    "c"};
#define NUM_NAMES (sizeof NAMES / sizeof NAMES[0])

/* The input, read a byte at a time; 0 once it is used up. */
typedef struct fz_in {
    const uint8_t *p;
    size_t n;
} fz_in;

static uint8_t u8(fz_in *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

/* A dimension: mostly small, sometimes one at or past a limit. */
static uint32_t dim(fz_in *in)
{
    static const uint32_t big[] = {65500, 65501, 1u << 20, (1u << 20) + 1, 65535, 0x7fffffff};
    const uint8_t v = u8(in);
    return v < 250 ? v % 9 : big[v - 250];
}

static void read_field(fz_in *in, dlc_field_spec *f)
{
    memset(f, 0, sizeof *f);
    f->kind = u8(in) % 7;
    f->dtype = u8(in) % 11;
    f->encoding = u8(in) % 4;
    const uint8_t fl = u8(in);
    f->flags = (fl & 0x0fu) | (fl & 0x10u ? 0x20u : 0);
    f->ndim = u8(in) % 8;
    f->name = NAMES[u8(in) % NUM_NAMES];
    const uint8_t link = u8(in);
    f->link = link == 0xff ? NULL : NAMES[link % NUM_NAMES];
    f->quality = u8(in) % 121;
    for (unsigned d = 0; d < DLC_MAX_DIMS; d++)
        f->shape[d] = dim(in);
}

/* What was accepted for one field of one record. */
typedef struct expect {
    int kind; /* 0: not set. */
    uint32_t dim0, dim1, channels;
    int encoded;   /* Set with dlc_record_set_encoded: the bytes stored as they are. */
    size_t size;   /* Bytes in data (pixels, array, bytes, encoded image). */
    uint64_t bits; /* Scalars. */
    uint8_t data[MAX_VALUE];
} expect;

typedef struct run {
    dlc_field_spec fields[MAX_FIELDS];
    uint32_t nf;
    expect want[MAX_RECORDS][MAX_FIELDS];
    expect cur[MAX_FIELDS];
    uint64_t count;
    dlc_codec *codec;
} run;

static void check_msg(dlc_status rc)
{
    /* Every refusal explains itself. */
    if (rc < 0 && dlc_errmsg()[0] == '\0')
        abort();
}

static void fill(fz_in *in, uint8_t *p, size_t n)
{
    for (size_t j = 0; j < n; j++)
        p[j] = in->n ? u8(in) : (uint8_t)(j * 7 + 3);
}

/* The bytes of one row of ndarray field @p f, or 0 when it is not a sensible one. */
static uint64_t row_bytes(const dlc_field_spec *f)
{
    uint64_t row = f->dtype < 9 ? (uint64_t[]){1, 4, 2, 1, 2, 2, 4, 8, 8}[f->dtype] : 1;
    for (uint32_t d = 1; d < f->ndim && d < DLC_MAX_DIMS; d++)
        row *= f->shape[d] ? f->shape[d] : 1;
    return row;
}

static dlc_status set_image(run *r, fz_in *in, dlc_record_builder *b, uint32_t i, uint8_t op)
{
    const dlc_field_spec *f = &r->fields[i];
    expect *e = &r->cur[i];
    const int fixed = !(f->flags & DLC_FIELD_VARIABLE) && !(op & 0x08);
    const uint32_t h = fixed ? f->shape[0] : 1 + u8(in) % 6;
    const uint32_t w = fixed ? f->shape[1] : 1 + u8(in) % 6;
    const uint32_t c = op & 0x10 ? u8(in) % 5 : f->shape[2];
    if ((uint64_t)h * w * (c ? c : 1) > MAX_VALUE)
        return DLC_OK; /* Too large to pass: no value. */
    if ((op & 0x20) && f->encoding != DLC_ENCODING_RAW) {
        e->size = u8(in) % 40;
        fill(in, e->data, e->size);
        const dlc_status rc = dlc_record_set_encoded(b, i, e->data, e->size, h, w);
        if (rc == DLC_OK) {
            e->kind = (int)f->kind;
            e->encoded = 1;
            e->dim0 = h;
            e->dim1 = w;
        }
        return rc;
    }
    e->size = (size_t)h * w * c;
    fill(in, e->data, e->size);
    const dlc_image img = {e->data, w, h, c, (size_t)w * c};
    const dlc_status rc = dlc_record_set_image(b, i, &img);
    if (rc == DLC_OK) {
        e->kind = (int)f->kind;
        e->dim0 = h;
        e->dim1 = w;
        e->channels = c;
        e->encoded = 0;
    }
    return rc;
}

static dlc_status set_array(run *r, fz_in *in, dlc_record_builder *b, uint32_t i, uint8_t op)
{
    const dlc_field_spec *f = &r->fields[i];
    expect *e = &r->cur[i];
    const int fixed = !(f->flags & DLC_FIELD_VARIABLE) && !(op & 0x08);
    const uint32_t d0 = fixed ? f->shape[0] : u8(in) % 4;
    const uint64_t row = row_bytes(f);
    uint64_t bytes = (uint64_t)d0 * row;
    if (op & 0x40)
        bytes = bytes ? bytes - 1 : 1;
    if (bytes > MAX_VALUE)
        bytes = op & 1; /* Never more than the harness holds: a wrong small size instead. */
    fill(in, e->data, (size_t)bytes);
    const dlc_status rc = dlc_record_set_array(b, i, e->data, (size_t)bytes, d0);
    if (rc == DLC_OK) {
        e->kind = (int)f->kind;
        e->dim0 = d0;
        e->dim1 = 0;
        e->size = (size_t)bytes;
        e->encoded = 0;
    }
    return rc;
}

/* Set field @p i of the record being built from the input. */
static dlc_status set_field(run *r, fz_in *in, dlc_record_builder *b, uint32_t i)
{
    const uint8_t op = u8(in);
    if (op % 8 == 7)
        return DLC_OK; /* No value: seal must say which is missing. */
    expect *e = &r->cur[i];
    dlc_status rc;
    switch (r->fields[i].kind) {
    case DLC_FIELD_IMAGE:
        return set_image(r, in, b, i, op);
    case DLC_FIELD_NDARRAY:
        return set_array(r, in, b, i, op);
    case DLC_FIELD_INT: {
        const int64_t v = op & 0x10 ? (int8_t)u8(in) : (int64_t)((uint64_t)u8(in) << 56 | u8(in));
        rc = dlc_record_set_int(b, i, v);
        if (rc == DLC_OK)
            *e = (expect){.kind = DLC_FIELD_INT, .bits = (uint64_t)v};
        return rc;
    }
    case DLC_FIELD_FLOAT: {
        uint64_t bits = 0;
        for (int k = 0; k < 8; k++)
            bits = bits << 8 | u8(in);
        double d;
        memcpy(&d, &bits, 8);
        rc = dlc_record_set_float(b, i, d);
        if (rc == DLC_OK)
            *e = (expect){.kind = DLC_FIELD_FLOAT, .bits = bits};
        return rc;
    }
    default: {
        const size_t n = u8(in) % 24;
        fill(in, e->data, n);
        rc = dlc_record_set_bytes(b, i, e->data, n);
        if (rc == DLC_OK) {
            e->kind = DLC_FIELD_BYTES;
            e->size = n;
            e->encoded = 0;
        }
        return rc;
    }
    }
}

/* Build and append up to MAX_RECORDS records. Returns -1 when the writer failed to write. */
static int write_records(run *r, fz_in *in, dlc_writer *w)
{
    dlc_record_builder *b = NULL;
    if (dlc_record_builder_create(w, &b) != DLC_OK)
        abort();
    const uint32_t n = u8(in) % (MAX_RECORDS + 1);
    for (uint32_t k = 0; k < n; k++) {
        memset(r->cur, 0, sizeof r->cur);
        dlc_record_builder_reset(b);
        for (uint32_t i = 0; i < r->nf; i++)
            check_msg(set_field(r, in, b, i));
        dlc_status rc = dlc_record_seal(b);
        check_msg(rc);
        if (rc == DLC_OK) {
            rc = dlc_writer_append(w, b);
            check_msg(rc);
            if (rc != DLC_OK && rc != DLC_EINVAL) {
                dlc_record_builder_destroy(b);
                return -1;
            }
        }
        if (rc == DLC_OK)
            memcpy(r->want[r->count++], r->cur, sizeof r->cur);
        else if (getenv("DLC_FUZZ_TRACE"))
            fprintf(stderr, "fuzz_schema: record %u: %s\n", k, dlc_errmsg());
    }
    dlc_record_builder_destroy(b);
    return 0;
}

/* The schema read back is the one given, up to VARIABLE fields made fixed. */
static void check_schema(const run *r, const dlc_store *s)
{
    const dlc_store_info *info = dlc_store_get_info(s);
    if (info->num_fields != r->nf || info->count != r->count || info->format_version != 2)
        abort();
    const dlc_field *f = dlc_store_fields(s);
    for (uint32_t i = 0; i < r->nf; i++) {
        const dlc_field_spec *g = &r->fields[i];
        if (strcmp(f[i].name, g->name) != 0 || f[i].kind != g->kind ||
            (f[i].flags | DLC_FIELD_VARIABLE) != (g->flags | DLC_FIELD_VARIABLE) ||
            (g->kind == DLC_FIELD_NDARRAY && f[i].dtype != g->dtype) ||
            (g->kind == DLC_FIELD_IMAGE &&
             (f[i].encoding != g->encoding || f[i].shape[2] != g->shape[2])))
            abort();
        if (dlc_store_find_field(s, g->name) != (int)i)
            abort();
    }
}

/* Record @p k's field @p i as read against what was set. */
static void check_value(run *r, const dlc_store *s, uint64_t k, uint32_t i, const dlc_value *v)
{
    const expect *e = &r->want[k][i];
    if (dlc_value_verify(s, k, i, v) != DLC_OK)
        abort();
    if (e->kind == DLC_FIELD_INT || e->kind == DLC_FIELD_FLOAT) {
        uint64_t fb;
        memcpy(&fb, &v->f, 8);
        if (v->size != 8 || (e->kind == DLC_FIELD_INT ? (uint64_t)v->i : fb) != e->bits)
            abort();
        return;
    }
    if (v->dim0 != e->dim0 || v->dim1 != e->dim1)
        abort();
    const uint32_t enc = dlc_store_fields(s)[i].encoding;
    if (e->kind != DLC_FIELD_IMAGE || enc == DLC_ENCODING_RAW || e->encoded) {
        if (v->size != e->size || (e->size && memcmp(v->data, e->data, e->size) != 0))
            abort();
        return;
    }
    dlc_image img;
    const dlc_status rc = enc == DLC_ENCODING_PNG ? dlc_png_decode(r->codec, v->data, v->size, &img)
                                                  : dlc_jpeg_decode_as(r->codec, v->data, v->size,
                                                                       e->channels, 0, 0, &img);
    if (rc != DLC_OK || img.width != e->dim1 || img.height != e->dim0 ||
        img.channels != e->channels)
        abort();
    if (enc == DLC_ENCODING_PNG && memcmp(img.data, e->data, e->size) != 0)
        abort();
}

/* Open what was written and read every record back. */
static void read_back(run *r, const char *path)
{
    dlc_store *s = NULL;
    if (dlc_store_open(path, 0, &s) != DLC_OK)
        abort(); /* Anything the writer accepted must open. */
    check_schema(r, s);
    dlc_store_reader *rd = NULL;
    if (dlc_store_reader_open(s, &rd) != DLC_OK)
        abort();
    dlc_value v[MAX_FIELDS];
    for (uint64_t k = 0; k < r->count; k++) {
        if (dlc_store_read_values(rd, k, v) != DLC_OK)
            abort();
        for (uint32_t i = 0; i < r->nf; i++)
            check_value(r, s, k, i, &v[i]);
    }
    if (dlc_store_read_values(rd, r->count, v) != DLC_ENOTFOUND)
        abort();
    dlc_store_reader_close(rd);
    if (dlc_store_verify(s, NULL, NULL, NULL) != DLC_OK)
        abort();
    dlc_store_close(s);
}

static run R;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[512];
    if (!path[0])
        fz_path(path, sizeof path, "schema.dlc");
    if (!R.codec && dlc_codec_create(&R.codec) != DLC_OK)
        abort();
    fz_in in = {data, size};
    R.nf = 1 + u8(&in) % MAX_FIELDS;
    R.count = 0;
    for (uint32_t i = 0; i < R.nf; i++)
        read_field(&in, &R.fields[i]);
    static const char *const labels[] = {"zero", "one", "two", "three"};
    const uint32_t nl = u8(&in) % 5;
    const dlc_writer_config cfg = {.struct_size = sizeof(dlc_writer_config),
                                   .fields = R.fields,
                                   .num_fields = R.nf,
                                   /* 0 labels and no names: named "0".."K-1" at finish. */
                                   .label_names = nl ? labels : NULL,
                                   .num_labels = nl,
                                   .force = 1,
                                   .build_json = size & 1 ? "{}" : NULL};
    dlc_writer *w = NULL;
    dlc_status rc = dlc_writer_open(path, &cfg, &w);
    check_msg(rc);
    if (rc != DLC_OK && getenv("DLC_FUZZ_TRACE"))
        fprintf(stderr, "fuzz_schema: %s\n", dlc_errmsg());
    if (rc != DLC_OK)
        return 0;
    if (write_records(&R, &in, w) < 0) {
        dlc_writer_abort(w);
        return 0;
    }
    rc = dlc_writer_finish(w);
    check_msg(rc);
    if (getenv("DLC_FUZZ_TRACE")) /* To see what a seed reaches. */
        fprintf(stderr, "fuzz_schema: %u fields, %llu records: %s\n", R.nf,
                (unsigned long long)R.count, rc == DLC_OK ? "written" : dlc_errmsg());
    if ((rc == DLC_OK) != (R.count > 0))
        abort(); /* Refused exactly when there is no record. */
    if (rc == DLC_OK)
        read_back(&R, path);
    return 0;
}

/* ---- Seeds ----------------------------------------------------------------------------------- */

/* Append one field's bytes as read_field() reads them. */
static size_t put_field(uint8_t *p, const dlc_field_spec *f, uint8_t name, uint8_t link)
{
    const uint8_t head[8] = {(uint8_t)f->kind,
                             (uint8_t)f->dtype,
                             (uint8_t)f->encoding,
                             (uint8_t)f->flags,
                             (uint8_t)f->ndim,
                             name,
                             link,
                             90};
    memcpy(p, head, 8);
    for (unsigned d = 0; d < DLC_MAX_DIMS; d++)
        p[8 + d] = (uint8_t)f->shape[d];
    return 8 + DLC_MAX_DIMS;
}

/* Append a valid value of field @p f of record @p k, as set_field() reads it. */
static size_t put_value(uint8_t *p, const dlc_field_spec *f, uint32_t k)
{
    size_t n = 0;
    const int variable = (f->flags & DLC_FIELD_VARIABLE) != 0;
    uint64_t bytes = 0;
    switch (f->kind) {
    case DLC_FIELD_IMAGE:
        p[n++] = 0;
        if (variable) {
            p[n++] = (uint8_t)(k + 2); /* height 3 + k % 6... */
            p[n++] = (uint8_t)(k + 3);
        }
        bytes = variable ? (uint64_t)(1 + (k + 2) % 6) * (1 + (k + 3) % 6) * f->shape[2]
                         : (uint64_t)f->shape[0] * f->shape[1] * f->shape[2];
        break;
    case DLC_FIELD_NDARRAY:
        p[n++] = 0;
        if (variable)
            p[n++] = (uint8_t)(k % 3);
        bytes = (variable ? k % 3 : f->shape[0]) * row_bytes(f);
        break;
    case DLC_FIELD_INT:
        p[n++] = 0x10;
        p[n++] = (uint8_t)(k % 3);
        break;
    case DLC_FIELD_FLOAT:
        p[n++] = 0;
        bytes = 8;
        break;
    default:
        p[n++] = 0;
        p[n++] = (uint8_t)(5 + k);
        bytes = 5 + k;
    }
    for (uint64_t j = 0; j < bytes; j++)
        p[n++] = (uint8_t)(j * 29 + k * 7 + 1);
    return n;
}

/* A seed of the fields @p f (names and links by index into NAMES) and @p records records. */
static void write_seed(const char *dir, const char *name, const dlc_field_spec *f,
                       const uint8_t *names, const uint8_t *links, uint32_t nf, uint32_t records)
{
    uint8_t buf[4096];
    size_t n = 0;
    buf[n++] = (uint8_t)(nf - 1);
    for (uint32_t i = 0; i < nf; i++)
        n += put_field(buf + n, &f[i], names[i], links[i]);
    uint8_t labels = 0;
    for (uint32_t i = 0; i < nf; i++)
        labels = f[i].flags & DLC_FIELD_LABEL ? 3 : labels;
    buf[n++] = labels; /* label names */
    buf[n++] = (uint8_t)records;
    for (uint32_t k = 0; k < records; k++)
        for (uint32_t i = 0; i < nf; i++)
            n += put_value(buf + n, &f[i], k);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fz_write_file(path, buf, n);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("DLC_FUZZ_SEED_DIR");
    if (!dir)
        return 0;
    /* Every kind: raw and JPEG images, a PNG mask, boxes and their classes, an array of every
     * rank's sort, int (the label), float, bytes. Names index NAMES; 0xff: no link. */
    const dlc_field_spec every[] = {
        {.kind = DLC_FIELD_IMAGE, .ndim = 3, .shape = {4, 5, 3}},
        {.kind = DLC_FIELD_IMAGE,
         .encoding = DLC_ENCODING_PNG,
         .flags = DLC_FIELD_VARIABLE | DLC_FIELD_MASK,
         .ndim = 3,
         .shape = {0, 0, 1}},
        {.kind = DLC_FIELD_NDARRAY,
         .dtype = DLC_DTYPE_FLOAT32,
         .flags = DLC_FIELD_VARIABLE | DLC_FIELD_BOXES,
         .ndim = 2,
         .shape = {0, 4}},
        {.kind = DLC_FIELD_NDARRAY,
         .dtype = DLC_DTYPE_INT32,
         .flags = DLC_FIELD_VARIABLE,
         .ndim = 1},
        {.kind = DLC_FIELD_NDARRAY, .dtype = DLC_DTYPE_FLOAT64, .ndim = 2, .shape = {2, 3}},
        {.kind = DLC_FIELD_INT, .flags = DLC_FIELD_LABEL},
        {.kind = DLC_FIELD_FLOAT},
        {.kind = DLC_FIELD_BYTES},
        {.kind = DLC_FIELD_IMAGE,
         .encoding = DLC_ENCODING_JPEG,
         .flags = DLC_FIELD_VARIABLE,
         .ndim = 3,
         .shape = {0, 0, 3}},
        {.kind = DLC_FIELD_IMAGE, .encoding = DLC_ENCODING_PNG, .ndim = 3, .shape = {3, 3, 4}},
    };
    static const uint8_t names[] = {2, 3, 4, 5, 0, 1, 6, 7, 11, 13};
    static const uint8_t links[] = {0xff, 0xff, 5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    write_seed(dir, "every-kind", every, names, links, 10, 4);
    write_seed(dir, "image-only", every, names, links, 1, 2);
    const dlc_field_spec two[] = {every[8], every[5]};
    static const uint8_t two_names[] = {2, 1}, two_links[] = {0xff, 0xff};
    write_seed(dir, "jpeg-label", two, two_names, two_links, 2, 3);
    return 0;
}
