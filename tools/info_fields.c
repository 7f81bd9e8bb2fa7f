/* cacheinfo's view of the schema: each field's kind, dtype, shape, encoding and flags, and how
 * many payload bytes it takes in total and per record. */
#include "info.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const char *info_kind_name(uint32_t kind)
{
    static const char *const names[] = {"?", "image", "ndarray", "int", "float", "bytes"};
    return kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

const char *info_encoding_name(uint32_t encoding)
{
    static const char *const names[] = {"raw", "jpeg", "png"};
    return encoding < 3 ? names[encoding] : "?";
}

/* The payload bytes every record has in field @p f, or 0 when they vary (an encoded image, a
 * variable shape, bytes). Scalars: their 8 bytes. */
static uint64_t fixed_size(const dlc_field *f)
{
    if (f->kind == DLC_FIELD_INT || f->kind == DLC_FIELD_FLOAT)
        return 8;
    if (f->kind == DLC_FIELD_BYTES || (f->flags & DLC_FIELD_VARIABLE))
        return 0;
    if (f->kind == DLC_FIELD_IMAGE)
        return f->encoding == DLC_ENCODING_RAW ? (uint64_t)f->shape[0] * f->shape[1] * f->shape[2]
                                               : 0;
    uint64_t n = dlc_dtype_size(f->dtype);
    for (uint32_t d = 0; d < f->ndim; d++)
        n *= f->shape[d];
    return n;
}

static int is_scalar(const dlc_field *f)
{
    return f->kind == DLC_FIELD_INT || f->kind == DLC_FIELD_FLOAT;
}

/* Read every record's header and add up the sizes of the fields in @p vary. */
static int sum_records(const dlc_store *s, const int *vary, info_sizes *sz)
{
    const dlc_store_info *info = dlc_store_get_info(s);
    dlc_store_reader *r = NULL;
    dlc_value v[DLC_MAX_FIELDS];
    dlc_status rc = dlc_store_reader_open(s, &r);
    for (uint64_t i = 0; rc == DLC_OK && i < info->count; i++) {
        if ((rc = dlc_store_read_values(r, i, v)) != DLC_OK)
            break;
        for (uint32_t f = 0; f < info->num_fields; f++)
            if (vary[f])
                sz->total[f] += v[f].size;
    }
    if (rc != DLC_OK)
        tool_report(TOOL, rc, "per-field sizes unknown");
    dlc_store_reader_close(r);
    return rc == DLC_OK ? 0 : -1;
}

void info_field_sizes(const dlc_store *s, info_sizes *sz)
{
    const dlc_store_info *info = dlc_store_get_info(s);
    const dlc_field *fs = dlc_store_fields(s);
    int vary[DLC_MAX_FIELDS] = {0};
    uint32_t nvary = 0, last = 0;
    uint64_t fixed_payload = 0;
    memset(sz, 0, sizeof *sz);
    for (uint32_t f = 0; f < info->num_fields; f++) {
        const uint64_t n = fixed_size(&fs[f]);
        sz->total[f] = n * info->count;
        if (n == 0) {
            vary[f] = 1;
            nvary++;
            last = f;
        } else if (!is_scalar(&fs[f])) {
            fixed_payload += sz->total[f];
        }
    }
    sz->known = 1;
    /* The store's payload total is the sum of every payload field's: one unknown is the rest. */
    if (nvary == 1 && info->payload_bytes >= fixed_payload)
        sz->total[last] = info->payload_bytes - fixed_payload;
    else if (nvary > 1)
        sz->known = sum_records(s, vary, sz) == 0;
}

/* "256 x 256 x 3", "variable x 4", "scalar". */
static void shape_text(const dlc_field *f, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    if (is_scalar(f) || f->kind == DLC_FIELD_BYTES) {
        snprintf(buf, cap, "%s", is_scalar(f) ? "scalar" : "variable");
        return;
    }
    for (uint32_t d = 0; d < f->ndim && at < cap; d++) {
        const int var =
            (f->flags & DLC_FIELD_VARIABLE) && (d == 0 || (d == 1 && f->kind == DLC_FIELD_IMAGE));
        char dim[16];
        snprintf(dim, sizeof dim, "%" PRIu32, f->shape[d]);
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", d ? " x " : "", var ? "variable" : dim);
    }
}

/* "variable,mask,label", or "-". */
static void flags_text(const dlc_store *s, const dlc_field *f, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    if (f->flags & DLC_FIELD_VARIABLE)
        at += (size_t)snprintf(buf + at, cap - at, "%svariable", at ? "," : "");
    if ((f->flags & DLC_FIELD_MASK) && at < cap)
        at += (size_t)snprintf(buf + at, cap - at, "%smask", at ? "," : "");
    if ((f->flags & DLC_FIELD_BOXES) && at < cap) {
        const uint32_t n = dlc_store_get_info(s)->num_fields;
        at += (size_t)snprintf(buf + at, cap - at, "%sboxes(%s)", at ? "," : "",
                               f->link < n ? dlc_store_fields(s)[f->link].name : "?");
    }
    if ((f->flags & DLC_FIELD_LABEL) && at < cap)
        at += (size_t)snprintf(buf + at, cap - at, "%slabel", at ? "," : "");
    if (at == 0)
        snprintf(buf, cap, "-");
}

/* The width of the widest of @p n texts of @p stride bytes from @p first. */
static int widest(const char *first, size_t stride, uint32_t n)
{
    size_t w = 0;
    for (uint32_t i = 0; i < n; i++) {
        const size_t l = strlen(first + i * stride);
        w = l > w ? l : w;
    }
    return (int)w;
}

void info_print_fields_text(const dlc_store *s, const info_sizes *sz)
{
    const dlc_store_info *info = dlc_store_get_info(s);
    const dlc_field *fs = dlc_store_fields(s);
    char shape[DLC_MAX_FIELDS][64], flags[DLC_MAX_FIELDS][80];
    for (uint32_t f = 0; f < info->num_fields; f++) {
        shape_text(&fs[f], shape[f], sizeof shape[f]);
        flags_text(s, &fs[f], flags[f], sizeof flags[f]);
    }
    const int wn = widest(fs[0].name, sizeof fs[0], info->num_fields);
    const int ws = widest(shape[0], sizeof shape[0], info->num_fields);
    const int wf = widest(flags[0], sizeof flags[0], info->num_fields);
    printf("fields       %u (name, kind, dtype, shape, encoding, flags, payload bytes)\n",
           info->num_fields);
    for (uint32_t f = 0; f < info->num_fields; f++) {
        char b1[32];
        printf("  %-*s  %-7s %-7s  %-*s  %-4s  %-*s ", wn, fs[f].name, info_kind_name(fs[f].kind),
               dlc_dtype_name(fs[f].dtype), ws, shape[f], info_encoding_name(fs[f].encoding), wf,
               flags[f]);
        if (!sz->known)
            printf(" ?\n");
        else if (is_scalar(&fs[f]))
            printf(" 8 B/record (in its header)\n");
        else
            printf(" %.0f B/record, %s\n",
                   info->count ? (double)sz->total[f] / (double)info->count : 0.0,
                   tool_human_bytes(sz->total[f], b1, sizeof b1));
        if (fs[f].kind == DLC_FIELD_IMAGE && (fs[f].flags & DLC_FIELD_VARIABLE) && fs[f].min_dim0)
            printf("  %-*s  %ux%u to %ux%u (height x width; the smallest height: record %" PRIu64
                   ", width: record %" PRIu64 ")\n",
                   wn, "", fs[f].min_dim0, fs[f].min_dim1, fs[f].max_dim0, fs[f].max_dim1,
                   fs[f].min_record0, fs[f].min_record1);
    }
}

/* The shape as a JSON array: numbers, and "variable" where a dimension varies. */
static void shape_json(tool_json *j, const dlc_field *f)
{
    tool_json_array_begin(j, "shape");
    for (uint32_t d = 0; d < f->ndim; d++) {
        const int var =
            (f->flags & DLC_FIELD_VARIABLE) && (d == 0 || (d == 1 && f->kind == DLC_FIELD_IMAGE));
        if (var)
            tool_json_str(j, NULL, "variable");
        else
            tool_json_u64(j, NULL, f->shape[d]);
    }
    if (f->kind == DLC_FIELD_BYTES)
        tool_json_str(j, NULL, "variable");
    tool_json_array_end(j);
}

static void field_json(tool_json *j, const dlc_store *s, uint32_t f, const info_sizes *sz)
{
    const dlc_store_info *info = dlc_store_get_info(s);
    const dlc_field *fd = &dlc_store_fields(s)[f];
    tool_json_object_begin(j, NULL);
    tool_json_str(j, "name", fd->name);
    tool_json_str(j, "kind", info_kind_name(fd->kind));
    tool_json_str(j, "dtype", dlc_dtype_name(fd->dtype));
    shape_json(j, fd);
    tool_json_str(j, "encoding", info_encoding_name(fd->encoding));
    tool_json_array_begin(j, "flags");
    static const struct {
        uint32_t bit;
        const char *name;
    } bits[] = {{DLC_FIELD_VARIABLE, "variable"},
                {DLC_FIELD_MASK, "mask"},
                {DLC_FIELD_BOXES, "boxes"},
                {DLC_FIELD_LABEL, "label"}};
    for (size_t b = 0; b < sizeof bits / sizeof bits[0]; b++)
        if (fd->flags & bits[b].bit)
            tool_json_str(j, NULL, bits[b].name);
    tool_json_array_end(j);
    tool_json_str(j, "link",
                  fd->link < info->num_fields ? dlc_store_fields(s)[fd->link].name : NULL);
    tool_json_u64(j, "max_dim0", fd->max_dim0);
    tool_json_u64(j, "max_dim1", fd->max_dim1);
    tool_json_u64(j, "max_bytes", fd->max_size);
    if (fd->kind == DLC_FIELD_IMAGE) {
        /* null: unknown (a store written before the smallest image was recorded). */
        if (fd->min_dim0) {
            tool_json_u64(j, "min_dim0", fd->min_dim0);
            tool_json_u64(j, "min_dim1", fd->min_dim1);
            tool_json_u64(j, "min_record0", fd->min_record0);
            tool_json_u64(j, "min_record1", fd->min_record1);
        } else {
            tool_json_str(j, "min_dim0", NULL);
            tool_json_str(j, "min_dim1", NULL);
            tool_json_str(j, "min_record0", NULL);
            tool_json_str(j, "min_record1", NULL);
        }
    }
    if (sz->known) {
        tool_json_u64(j, "bytes", sz->total[f]);
        tool_json_f64(j, "mean_bytes",
                      info->count ? (double)sz->total[f] / (double)info->count : 0.0);
    } else {
        tool_json_str(j, "bytes", NULL);
        tool_json_str(j, "mean_bytes", NULL);
    }
    tool_json_object_end(j);
}

void info_print_fields_json(tool_json *j, const dlc_store *s, const info_sizes *sz)
{
    tool_json_array_begin(j, "fields");
    for (uint32_t f = 0; f < dlc_store_get_info(s)->num_fields; f++)
        field_json(j, s, f, sz);
    tool_json_array_end(j);
}
