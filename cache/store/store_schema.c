/* The schema of a version 2 store: element types, and the rules every field obeys
 * (docs/FORMAT.md, "schema"). The writer checks a schema it is given with these functions
 * (DLC_EINVAL) and the reader one it finds in a file (DLC_ECORRUPT), so a store that one writes
 * the other reads, and nothing else. */
#include "store_internal.h"

#include "common.h"
#include "store_format.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

static const struct {
    size_t size;
    const char *name;
} DTYPES[] = {
    [DLC_DTYPE_UINT8] = {1, "uint8"},     [DLC_DTYPE_FLOAT32] = {4, "float32"},
    [DLC_DTYPE_FLOAT16] = {2, "float16"}, [DLC_DTYPE_INT8] = {1, "int8"},
    [DLC_DTYPE_UINT16] = {2, "uint16"},   [DLC_DTYPE_INT16] = {2, "int16"},
    [DLC_DTYPE_INT32] = {4, "int32"},     [DLC_DTYPE_INT64] = {8, "int64"},
    [DLC_DTYPE_FLOAT64] = {8, "float64"}, [DLC_DTYPE_BFLOAT16] = {2, "bfloat16"},
};
#define NUM_DTYPES (sizeof DTYPES / sizeof DTYPES[0])

size_t dlc_dtype_size(uint32_t dtype)
{
    return dtype < NUM_DTYPES ? DTYPES[dtype].size : 0;
}

const char *dlc_dtype_name(uint32_t dtype)
{
    return dtype < NUM_DTYPES ? DTYPES[dtype].name : "?";
}

static int name_ok(const char *name)
{
    const size_t n = strnlen(name, sizeof((dlc_field *)0)->name);
    if (n == 0 || n >= sizeof((dlc_field *)0)->name)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const char c = name[i];
        const int alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
        if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
            return 0;
    }
    return 1;
}

/* Record the reason for field @p i and return @p code. */
#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static dlc_status
bad_field(const dlc_field *f, uint32_t i, dlc_status code, const char *prefix, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (name_ok(f->name))
        return dlc__errorf(code, "%s: field %u \"%s\": %s", prefix, i, f->name, why);
    return dlc__errorf(code, "%s: field %u: %s", prefix, i, why);
}

/* Shape entries from @p from on must be 0. */
static int shape_zero_from(const dlc_field *f, uint32_t from)
{
    for (uint32_t d = from; d < DLC_MAX_DIMS; d++)
        if (f->shape[d] != 0)
            return 0;
    return 1;
}

uint64_t dlc__field_row_bytes(const dlc_field *f)
{
    if (f->kind != DLC_FIELD_NDARRAY)
        return 0;
    uint64_t row = dlc_dtype_size(f->dtype);
    for (uint32_t d = 1; d < f->ndim && d < DLC_MAX_DIMS; d++)
        row *= f->shape[d];
    return row;
}

#define BAD(...) return bad_field(f, i, code, prefix, __VA_ARGS__)

static dlc_status check_image(const dlc_field *f, uint32_t i, dlc_status code, const char *prefix)
{
    const uint32_t c = f->shape[2];
    if (f->dtype != DLC_DTYPE_UINT8)
        BAD("an image holds uint8 pixels, not dtype %u", f->dtype);
    if (f->encoding > DLC_ENCODING_PNG)
        BAD("unknown image encoding %u (0 raw, 1 jpeg, 2 png)", f->encoding);
    if (f->flags & ~(uint32_t)(DLC_FIELD_VARIABLE | DLC_FIELD_MASK))
        BAD("flags 0x%x: an image may only be VARIABLE and MASK", f->flags);
    if (f->ndim != 3)
        BAD("an image has 3 dimensions (height, width, channels), not %u", f->ndim);
    if (c != 1 && c != 3 && c != 4)
        BAD("%u channels; an image has 1, 3 or 4", c);
    if (!shape_zero_from(f, 3))
        BAD("shape entries past the third must be 0");
    if (f->link != DLC_NO_FIELD)
        BAD("link %u on a field that is not BOXES", f->link);
    if (f->flags & DLC_FIELD_VARIABLE) {
        if (f->shape[0] || f->shape[1])
            BAD("a VARIABLE image has height and width 0 in its shape, not %ux%u", f->shape[0],
                f->shape[1]);
    } else if (!f->shape[0] || !f->shape[1] || f->shape[0] > DLC__MAX_SIDE ||
               f->shape[1] > DLC__MAX_SIDE) {
        BAD("size %ux%u: a fixed image is 1 to %u pixels on each side (or VARIABLE)", f->shape[0],
            f->shape[1], DLC__MAX_SIDE);
    } else if ((uint64_t)f->shape[0] * f->shape[1] * c > DLC__MAX_VALUE) {
        BAD("%ux%ux%u pixels do not fit in one LMDB value (4 GiB)", f->shape[0], f->shape[1], c);
    }
    if (f->encoding == DLC_ENCODING_JPEG) {
        if (f->flags & DLC_FIELD_MASK)
            BAD("a MASK is stored raw or PNG: JPEG would blend its class ids");
        if (c == 4)
            BAD("JPEG holds 1 or 3 channels, not 4 (store 4 channels raw or PNG)");
        if (f->shape[0] > DLC__JPEG_MAX_SIDE || f->shape[1] > DLC__JPEG_MAX_SIDE)
            BAD("%ux%u is larger than a JPEG can be (%u)", f->shape[0], f->shape[1],
                DLC__JPEG_MAX_SIDE);
    }
    return DLC_OK;
}

static dlc_status check_ndarray(const dlc_field *fields, uint32_t n, uint32_t i, dlc_status code,
                                const char *prefix)
{
    const dlc_field *f = &fields[i];
    if (f->dtype > DLC_DTYPE_FLOAT64)
        BAD("unknown dtype %u", f->dtype);
    if (f->encoding != DLC_ENCODING_RAW)
        BAD("an ndarray has encoding 0, not %u", f->encoding);
    if (f->flags & ~(uint32_t)(DLC_FIELD_VARIABLE | DLC_FIELD_BOXES))
        BAD("flags 0x%x: an ndarray may only be VARIABLE and BOXES", f->flags);
    if (f->ndim < 1 || f->ndim > DLC_MAX_DIMS)
        BAD("ndim %u; an ndarray has 1 to %u dimensions", f->ndim, DLC_MAX_DIMS);
    if (!shape_zero_from(f, f->ndim))
        BAD("shape entries past ndim %u must be 0", f->ndim);
    const int variable = (f->flags & DLC_FIELD_VARIABLE) != 0;
    if (variable != (f->shape[0] == 0))
        BAD("shape[0] is %u: it is 0 exactly when the field is VARIABLE", f->shape[0]);
    uint64_t row = dlc_dtype_size(f->dtype);
    for (uint32_t d = 1; d < f->ndim; d++) {
        if (f->shape[d] == 0)
            BAD("shape[%u] is 0; only the leading dimension may vary", d);
        row *= f->shape[d];
        if (row > DLC__MAX_VALUE)
            BAD("one row of the leading dimension is over 4 GiB");
    }
    if ((uint64_t)f->shape[0] * row > DLC__MAX_VALUE)
        BAD("%u rows of %" PRIu64 " bytes do not fit in one LMDB value (4 GiB)", f->shape[0], row);
    if (!(f->flags & DLC_FIELD_BOXES)) {
        if (f->link != DLC_NO_FIELD)
            BAD("link %u on a field that is not BOXES", f->link);
        return DLC_OK;
    }
    if (f->dtype != DLC_DTYPE_FLOAT32 || f->ndim != 2 || f->shape[1] != 4)
        BAD("BOXES is a float32 ndarray of N x 4 (x0, y0, x1, y1), not %s of %u dimensions",
            dlc_dtype_name(f->dtype), f->ndim);
    if (f->link >= n || f->link == i)
        BAD("BOXES needs a link to the field of its per-box classes (link %u of %u fields)",
            f->link, n);
    const dlc_field *c = &fields[f->link];
    if (c->kind != DLC_FIELD_NDARRAY || c->ndim != 1 || (c->flags & DLC_FIELD_BOXES))
        BAD("its class field %u is not an ndarray of one dimension", f->link);
    if (((c->flags & DLC_FIELD_VARIABLE) != 0) != variable || c->shape[0] != f->shape[0])
        BAD("its class field %u must have as many entries as there are boxes (both VARIABLE, or "
            "both %u)",
            f->link, f->shape[0]);
    return DLC_OK;
}

/* int, float, bytes: no shape, one dtype. */
static dlc_status check_plain(const dlc_field *f, uint32_t i, dlc_status code, const char *prefix)
{
    static const uint32_t dtype_of[] = {[DLC_FIELD_INT] = DLC_DTYPE_INT64,
                                        [DLC_FIELD_FLOAT] = DLC_DTYPE_FLOAT64,
                                        [DLC_FIELD_BYTES] = DLC_DTYPE_UINT8};
    if (f->dtype != dtype_of[f->kind])
        BAD("dtype %u; this kind of field is %s", f->dtype, dlc_dtype_name(dtype_of[f->kind]));
    if (f->encoding != DLC_ENCODING_RAW)
        BAD("encoding %u on a field that is not an image", f->encoding);
    const uint32_t allowed = f->kind == DLC_FIELD_INT ? DLC_FIELD_LABEL : 0;
    if (f->flags & ~allowed)
        BAD("flags 0x%x not allowed on this kind of field%s", f->flags,
            f->kind == DLC_FIELD_INT ? " (only LABEL)" : "");
    if (f->ndim != 0 || !shape_zero_from(f, 0))
        BAD("a scalar or bytes field has no shape (ndim %u)", f->ndim);
    if (f->link != DLC_NO_FIELD)
        BAD("link %u on a field that is not BOXES", f->link);
    return DLC_OK;
}

dlc_status dlc__schema_check(const dlc_field *fields, uint32_t n, dlc_status code,
                             const char *prefix)
{
    uint32_t labels = 0;
    for (uint32_t i = 0; i < n; i++) {
        const dlc_field *f = &fields[i];
        if (!name_ok(f->name))
            BAD("bad name: 1 to 31 characters of [A-Za-z0-9_], not starting with a digit");
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(fields[j].name, f->name) == 0)
                BAD("the name is also field %u's", j);
        dlc_status rc;
        switch (f->kind) {
        case DLC_FIELD_IMAGE:
            rc = check_image(f, i, code, prefix);
            break;
        case DLC_FIELD_NDARRAY:
            rc = check_ndarray(fields, n, i, code, prefix);
            break;
        case DLC_FIELD_INT:
        case DLC_FIELD_FLOAT:
        case DLC_FIELD_BYTES:
            rc = check_plain(f, i, code, prefix);
            break;
        default:
            BAD("unknown kind %u (1 image, 2 ndarray, 3 int, 4 float, 5 bytes)", f->kind);
        }
        if (rc < 0)
            return rc;
        if ((f->flags & DLC_FIELD_LABEL) && ++labels > 1)
            BAD("a second LABEL field; a store has at most one");
    }
    return DLC_OK;
}

static dlc_status check_maxes(const dlc_field *f, uint32_t i, uint64_t count, dlc_status code,
                              const char *prefix)
{
    const int fixed = !(f->flags & DLC_FIELD_VARIABLE);
    if (f->max_size > DLC__MAX_VALUE)
        BAD("max_size %" PRIu64 " is over LMDB's 4 GiB value limit", f->max_size);
    switch (f->kind) {
    case DLC_FIELD_IMAGE: {
        const uint64_t c = f->shape[2];
        if (fixed && (f->max_dim0 != f->shape[0] || f->max_dim1 != f->shape[1]))
            BAD("max size %ux%u differs from the fixed %ux%u", f->max_dim0, f->max_dim1,
                f->shape[0], f->shape[1]);
        if (!fixed && (f->max_dim0 > DLC__MAX_SIDE || f->max_dim1 > DLC__MAX_SIDE ||
                       (count > 0 && (!f->max_dim0 || !f->max_dim1))))
            BAD("max size %ux%u is impossible", f->max_dim0, f->max_dim1);
        const uint64_t raw = (uint64_t)f->max_dim0 * f->max_dim1 * c;
        if (f->encoding == DLC_ENCODING_RAW && (fixed ? f->max_size != raw : f->max_size > raw))
            BAD("max_size %" PRIu64 " does not fit %ux%ux%" PRIu64 " raw pixels", f->max_size,
                f->max_dim0, f->max_dim1, c);
        return DLC_OK;
    }
    case DLC_FIELD_NDARRAY: {
        const uint64_t row = dlc__field_row_bytes(f);
        if ((fixed && f->max_dim0 != f->shape[0]) || f->max_dim1 != 0 ||
            f->max_size != f->max_dim0 * row)
            BAD("max_dim0 %u, max_dim1 %u and max_size %" PRIu64
                " disagree with the shape (%" PRIu64 " bytes a row)",
                f->max_dim0, f->max_dim1, f->max_size, row);
        return DLC_OK;
    }
    default: {
        const uint64_t size = dlc__kind_is_scalar(f->kind) ? 8 : f->max_size;
        if (f->max_dim0 || f->max_dim1 || f->max_size != size)
            BAD("max_dim0 %u, max_dim1 %u, max_size %" PRIu64 ": a %s has no dimensions",
                f->max_dim0, f->max_dim1, f->max_size,
                f->kind == DLC_FIELD_BYTES ? "bytes field" : "scalar of 8 bytes");
        return DLC_OK;
    }
    }
}

#undef BAD

dlc_status dlc__schema_check_maxes(const dlc_field *fields, uint32_t n, uint64_t count,
                                   dlc_status code, const char *prefix)
{
    for (uint32_t i = 0; i < n; i++) {
        const dlc_status rc = check_maxes(&fields[i], i, count, code, prefix);
        if (rc < 0)
            return rc;
    }
    return DLC_OK;
}

dlc_status dlc__schema_decode(const uint8_t *p, uint32_t nf, uint64_t count, const char *path,
                              dlc_field *out)
{
    for (uint32_t i = 0; i < nf; i++) {
        const uint8_t *e = p + (size_t)i * DLC__SCHEMA_ENTRY_SIZE;
        uint64_t reserved[3], stored;
        dlc__schema_entry_load(e, &out[i], reserved, &stored);
        const uint64_t h = XXH3_64bits(e, DLC__SCHEMA_ENTRY_HASHED);
        if (h != stored)
            return dlc__errorf(DLC_ECORRUPT,
                               "%s: corrupt: schema field %u: checksum mismatch (stored %016" PRIx64
                               ", computed %016" PRIx64 ")",
                               path, i, stored, h);
        /* Equal schemas are equal bytes: after the name's NUL, only NULs. */
        const size_t len = strnlen((const char *)e, DLC__FIELD_NAME_SIZE);
        int padded = len < DLC__FIELD_NAME_SIZE;
        for (size_t j = len; j < DLC__FIELD_NAME_SIZE; j++)
            padded &= e[j] == 0;
        if (!padded || reserved[0] || reserved[1] || reserved[2])
            return dlc__errorf(
                DLC_ECORRUPT,
                "%s: corrupt: schema field %u: bytes after the name or reserved words not zero",
                path, i);
    }
    char prefix[PATH_MAX + 32];
    snprintf(prefix, sizeof prefix, "%s: corrupt: schema", path);
    const dlc_status rc = dlc__schema_check(out, nf, DLC_ECORRUPT, prefix);
    return rc < 0 ? rc : dlc__schema_check_maxes(out, nf, count, DLC_ECORRUPT, prefix);
}

/* Does field @p f of a store of @p count records have an entry of its own in "min_dims"? Fixed
 * images need none: their shape is their smallest size. */
static int min_recorded(const dlc_field *f, uint64_t count)
{
    return f->kind == DLC_FIELD_IMAGE && (f->flags & DLC_FIELD_VARIABLE) && count > 0;
}

void dlc__schema_min_fixed(dlc_field *fields, uint32_t n, uint64_t count)
{
    for (uint32_t i = 0; i < n; i++) {
        dlc_field *f = &fields[i];
        if (f->kind == DLC_FIELD_IMAGE && !(f->flags & DLC_FIELD_VARIABLE) && count > 0) {
            f->min_dim0 = f->shape[0];
            f->min_dim1 = f->shape[1];
            f->min_record0 = f->min_record1 = 0;
        }
    }
}

int dlc__min_dims_wanted(const dlc_field *fields, uint32_t n, uint64_t count)
{
    for (uint32_t i = 0; i < n; i++)
        if (min_recorded(&fields[i], count))
            return 1;
    return 0;
}

void dlc__min_dims_encode(uint8_t *p, const dlc_field *fields, uint32_t n, uint64_t count)
{
    memset(p, 0, DLC__MIN_DIMS_SIZE(n));
    for (uint32_t i = 0; i < n; i++) {
        const dlc_field *f = &fields[i];
        if (!min_recorded(f, count))
            continue;
        uint8_t *e = p + (size_t)i * DLC__MIN_DIMS_ENTRY;
        dlc__st32(e, f->min_dim0);
        dlc__st32(e + 4, f->min_dim1);
        dlc__st64(e + 8, f->min_record0);
        dlc__st64(e + 16, f->min_record1);
    }
    const size_t len = (size_t)n * DLC__MIN_DIMS_ENTRY;
    dlc__st64(p + len, XXH3_64bits(p, len));
}

dlc_status dlc__min_dims_decode(const uint8_t *v, size_t len, uint32_t n, uint64_t count,
                                const char *path, dlc_field *fields)
{
    if (len != DLC__MIN_DIMS_SIZE(n))
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: corrupt: \"%s\" of %zu bytes, expected %zu for %u fields", path,
                           DLC__META_MIN_DIMS, len, DLC__MIN_DIMS_SIZE(n), n);
    const size_t body = (size_t)n * DLC__MIN_DIMS_ENTRY;
    const uint64_t stored = dlc__ld64(v + body), h = XXH3_64bits(v, body);
    if (h != stored)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: corrupt: \"%s\" checksum mismatch (stored %016" PRIx64
                           ", computed %016" PRIx64 ")",
                           path, DLC__META_MIN_DIMS, stored, h);
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *e = v + (size_t)i * DLC__MIN_DIMS_ENTRY;
        dlc_field *f = &fields[i];
        const uint32_t d0 = dlc__ld32(e), d1 = dlc__ld32(e + 4);
        const uint64_t r0 = dlc__ld64(e + 8), r1 = dlc__ld64(e + 16);
        if (!min_recorded(f, count)) {
            if (d0 || d1 || r0 || r1)
                return dlc__errorf(DLC_ECORRUPT,
                                   "%s: corrupt: \"%s\": field %u \"%s\" is not a variable image "
                                   "of a store with records, and its entry is not zero",
                                   path, DLC__META_MIN_DIMS, i, f->name);
            continue;
        }
        if (!d0 || !d1 || d0 > f->max_dim0 || d1 > f->max_dim1 || r0 >= count || r1 >= count)
            return dlc__errorf(DLC_ECORRUPT,
                               "%s: corrupt: \"%s\": field %u \"%s\": smallest %ux%u (height x "
                               "width; records %" PRIu64 " and %" PRIu64
                               ") is impossible with the largest %ux%u and %" PRIu64 " records",
                               path, DLC__META_MIN_DIMS, i, f->name, d0, d1, r0, r1, f->max_dim0,
                               f->max_dim1, count);
        f->min_dim0 = d0;
        f->min_dim1 = d1;
        f->min_record0 = r0;
        f->min_record1 = r1;
    }
    return DLC_OK;
}

void dlc__schema_v1(dlc_field out[2], uint32_t encoding, uint32_t height, uint32_t width,
                    uint32_t channels, uint64_t max_size)
{
    memset(out, 0, 2 * sizeof *out);
    const int fixed = height && width;
    out[0] = (dlc_field){
        .name = "image",
        .kind = DLC_FIELD_IMAGE,
        .dtype = DLC_DTYPE_UINT8,
        .encoding = encoding,
        .flags = fixed ? 0 : DLC_FIELD_VARIABLE,
        .ndim = 3,
        .shape = {fixed ? height : 0, fixed ? width : 0, channels},
        /* A version 1 store records no largest size; only a fixed one is known without reading
         * every record. */
        .max_dim0 = fixed ? height : 0,
        .max_dim1 = fixed ? width : 0,
        .max_size = max_size,
        .link = DLC_NO_FIELD,
    };
    out[1] = (dlc_field){
        .name = "label",
        .kind = DLC_FIELD_INT,
        .dtype = DLC_DTYPE_INT64,
        .flags = DLC_FIELD_LABEL,
        .max_size = 8,
        .link = DLC_NO_FIELD,
    };
}

void dlc__field_rt_init(dlc__field_rt *rt, const dlc_field *f)
{
    const int fixed = !(f->flags & DLC_FIELD_VARIABLE);
    *rt = (dlc__field_rt){
        .kind = f->kind,
        .encoding = f->encoding,
        .fixed = (uint32_t)fixed,
        .dim0 = fixed ? f->shape[0] : 0,
        .dim1 = fixed && f->kind == DLC_FIELD_IMAGE ? f->shape[1] : 0,
        .max_dim0 = f->max_dim0,
        .max_dim1 = f->max_dim1,
        .min_dim0 = fixed ? 0 : f->min_dim0,
        .min_dim1 = fixed ? 0 : f->min_dim1,
        .link = f->link,
        .unit = f->kind == DLC_FIELD_IMAGE ? f->shape[2] : dlc__field_row_bytes(f),
        .max_size = f->max_size,
    };
}
