/* cacheinfo --dump I [--field NAME] -o FILE: one field of one record, checked against its stored
 * checksum, in the format its kind asks for:
 *   image, mask  PNG; a binary PPM/PGM when FILE ends in .ppm, .pgm or .pnm (3 or 1 channels);
 *                an .npy of height x width x channels uint8 when it ends in .npy. JPEG and PNG
 *                fields are decoded first.
 *   ndarray      .npy (numpy's format, version 1.0), whatever the name.
 *   int, float   one line of text; a 0-d .npy when FILE ends in .npy.
 *   bytes        the bytes as they are. */
#include "info.h"

#include <dlcache/image.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static int has_ext(const char *path, const char *ext)
{
    const size_t n = strlen(path), m = strlen(ext);
    return n > m && strcasecmp(path + n - m, ext) == 0;
}

/* numpy's name of a little-endian element of @p dtype ("<i8"), or NULL. */
static const char *npy_descr(uint32_t dtype)
{
    static const char *const d[] = {"|u1", "<f4", "<f2", "|i1", "<u2", "<i2", "<i4", "<i8", "<f8"};
    return dtype < sizeof d / sizeof d[0] ? d[dtype] : NULL;
}

/* An .npy file (format 1.0): magic, header length, a Python dict literal padded with blanks to a
 * multiple of 64 bytes with its newline, then the elements in C order. The store's elements are
 * little-endian, as the descr says. */
static int write_npy(FILE *f, uint32_t dtype, const uint64_t *shape, uint32_t ndim,
                     const void *data, size_t size)
{
    const char *descr = npy_descr(dtype);
    if (!descr)
        return -1;
    char dict[256];
    int n =
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (uint32_t d = 0; d < ndim; d++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%" PRIu64, d ? ", " : "", shape[d]);
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", ndim == 1 ? "," : "");
    const size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
    const size_t hlen = total - 10;
    unsigned char head[10] = {0x93,
                              'N',
                              'U',
                              'M',
                              'P',
                              'Y',
                              1,
                              0,
                              (unsigned char)(hlen & 255),
                              (unsigned char)(hlen >> 8)};
    fwrite(head, 1, sizeof head, f);
    fwrite(dict, 1, (size_t)n, f);
    for (size_t i = (size_t)n; i + 1 < hlen; i++)
        fputc(' ', f);
    fputc('\n', f);
    if (size)
        fwrite(data, 1, size, f);
    return 0;
}

/* The pixels of image value @p v of field @p fd, decoded when they are encoded. */
static dlc_status image_pixels(dlc_codec *c, const dlc_field *fd, const dlc_value *v,
                               dlc_image *img)
{
    *img = (dlc_image){.data = (uint8_t *)v->data,
                       .width = v->dim1,
                       .height = v->dim0,
                       .channels = fd->shape[2],
                       .stride = (size_t)v->dim1 * fd->shape[2]};
    if (fd->encoding == DLC_ENCODING_JPEG)
        return dlc_jpeg_decode_as(c, v->data, v->size, fd->shape[2] == 1 ? 1 : 3, 0, 0, img);
    if (fd->encoding == DLC_ENCODING_PNG)
        return dlc_png_decode(c, v->data, v->size, img);
    return DLC_OK;
}

/* An image as PNG, PPM/PGM or .npy, as the file name asks. Returns 0, or 2 with a message. */
static int write_image(FILE *f, dlc_codec *c, const char *path, const dlc_image *img)
{
    if (has_ext(path, ".ppm") || has_ext(path, ".pgm") || has_ext(path, ".pnm")) {
        if (img->channels != 1 && img->channels != 3) {
            tool_error(TOOL, "%s: %u channels; PPM and PGM hold 1 or 3 (name a .png)", path,
                       img->channels);
            return 2;
        }
        fprintf(f, "P%c\n%u %u\n255\n", img->channels == 3 ? '6' : '5', img->width, img->height);
        for (uint32_t y = 0; y < img->height; y++)
            fwrite(img->data + (size_t)y * img->stride, 1, (size_t)img->width * img->channels, f);
        return 0;
    }
    if (has_ext(path, ".npy")) {
        const uint64_t shape[3] = {img->height, img->width, img->channels};
        write_npy(f, DLC_DTYPE_UINT8, shape, 3, NULL, 0);
        for (uint32_t y = 0; y < img->height; y++)
            fwrite(img->data + (size_t)y * img->stride, 1, (size_t)img->width * img->channels, f);
        return 0;
    }
    const uint8_t *png;
    size_t size;
    const dlc_status rc = dlc_png_encode(c, img, &png, &size);
    if (rc < 0) {
        tool_report(TOOL, rc, "cannot encode the PNG");
        return 2;
    }
    fwrite(png, 1, size, f);
    return 0;
}

/* Field @p fd's value @p v into @p f as its kind asks. Returns 0, 1 (it cannot be decoded) or
 * 2. @p what receives a few words for the closing message. */
static int write_value(FILE *f, const char *path, const dlc_field *fd, const dlc_value *v,
                       char *what, size_t cap)
{
    dlc_codec *c = NULL;
    int status = 0;
    if (fd->kind == DLC_FIELD_IMAGE) {
        dlc_image img;
        dlc_status rc = dlc_codec_create(&c);
        if (rc == DLC_OK)
            rc = image_pixels(c, fd, v, &img);
        if (rc < 0) {
            tool_report(TOOL, rc, "cannot decode the record");
            status = 1;
        } else {
            status = write_image(f, c, path, &img);
            snprintf(what, cap, "%u high x %u wide", img.height, img.width);
        }
    } else if (fd->kind == DLC_FIELD_NDARRAY) {
        uint64_t shape[DLC_MAX_DIMS];
        for (uint32_t d = 0; d < fd->ndim; d++)
            shape[d] = d == 0 ? v->dim0 : fd->shape[d];
        write_npy(f, fd->dtype, shape, fd->ndim, v->data, v->size);
        int n = snprintf(what, cap, "%s [", dlc_dtype_name(fd->dtype));
        for (uint32_t d = 0; d < fd->ndim && n > 0 && (size_t)n < cap; d++)
            n += snprintf(what + n, cap - (size_t)n, "%s%" PRIu64, d ? " x " : "", shape[d]);
        if (n > 0 && (size_t)n < cap)
            snprintf(what + n, cap - (size_t)n, "]");
    } else if (fd->kind == DLC_FIELD_BYTES) {
        fwrite(v->data, 1, v->size, f);
        snprintf(what, cap, "%zu bytes", v->size);
    } else if (has_ext(path, ".npy")) {
        write_npy(f, fd->dtype, NULL, 0, v->data, 8);
        snprintf(what, cap, "one %s", dlc_dtype_name(fd->dtype));
    } else if (fd->kind == DLC_FIELD_INT) {
        fprintf(f, "%" PRId64 "\n", v->i);
        snprintf(what, cap, "%" PRId64, v->i);
    } else {
        fprintf(f, "%.17g\n", v->f);
        snprintf(what, cap, "%.17g", v->f);
    }
    dlc_codec_destroy(c);
    return status;
}

/* The field @p name, or without a name the first image; -1 after saying why there is none. */
static int pick_field(const dlc_store *s, const char *store, const char *name)
{
    const dlc_store_info *info = dlc_store_get_info(s);
    int f = name ? dlc_store_find_field(s, name) : (int)info->image_field;
    if (!name && info->image_field == DLC_NO_FIELD)
        f = -1;
    if (f >= 0)
        return f;
    char have[1024] = "";
    size_t at = 0;
    for (uint32_t k = 0; k < info->num_fields && at < sizeof have; k++)
        at += (size_t)snprintf(have + at, sizeof have - at, "%s%s", k ? ", " : "",
                               dlc_store_fields(s)[k].name);
    if (name)
        tool_error(TOOL, "%s has no field \"%s\" (it has: %s)", store, name, have);
    else
        tool_error(TOOL, "%s has no image field; name one with --field (it has: %s)", store, have);
    return -1;
}

/* Read record @p index, check field @p f's checksum. Returns 0, 1 (damaged) or 2. */
static int read_checked(const dlc_store *s, uint64_t index, uint32_t f, dlc_value *values)
{
    dlc_store_reader *r = NULL;
    dlc_status rc = dlc_store_reader_open(s, &r);
    if (rc == DLC_OK)
        rc = dlc_store_read_values(r, index, values);
    dlc_store_reader_close(r);
    if (rc < 0) {
        tool_report(TOOL, rc, "cannot read the record");
        return rc == DLC_ECORRUPT ? 1 : 2;
    }
    if ((rc = dlc_value_verify(s, index, f, &values[f])) < 0) {
        tool_report(TOOL, rc, "the record is damaged");
        return 1;
    }
    return 0;
}

/* What may stand at @p path for the dump to replace: nothing or a regular file. A link is not
 * followed (in a folder others may write, one planted there made a dump overwrite the file it
 * named), and a FIFO or a device is not written to (the dump blocked on a FIFO). */
static int check_output(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode))
        return 0;
    tool_error(TOOL, "%s: is a %s, not a file to write: give -o a file's name", path,
               S_ISLNK(st.st_mode)    ? "symbolic link"
               : S_ISDIR(st.st_mode)  ? "directory"
               : S_ISFIFO(st.st_mode) ? "FIFO"
                                      : "device or special file");
    return 2;
}

/* Write the value to PATH.tmp-PID (new, never through a link), check every write and sync, then
 * rename it over PATH: a full disk or an error leaves PATH as it was, never cut short. */
static int dump_to(const char *path, const dlc_field *fd, const dlc_value *v, char *what,
                   size_t cap)
{
    if (check_output(path) != 0)
        return 2;
    const size_t tlen = strlen(path) + 32;
    char *tmp = malloc(tlen);
    if (!tmp) {
        tool_error(TOOL, "%s: out of memory", path);
        return 2;
    }
    snprintf(tmp, tlen, "%s.tmp-%ld", path, (long)getpid());
    const int fd_out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *out = fd_out >= 0 ? fdopen(fd_out, "wb") : NULL;
    if (!out) {
        tool_error(TOOL, "%s: cannot create: %s", tmp, strerror(errno));
        if (fd_out >= 0) {
            close(fd_out);
            unlink(tmp);
        }
        free(tmp);
        return 2;
    }
    int status = write_value(out, path, fd, v, what, cap);
    if (status == 0 && (fflush(out) != 0 || ferror(out) || fsync(fileno(out)) != 0)) {
        tool_error(TOOL, "%s: cannot write: %s", path, strerror(errno ? errno : EIO));
        status = 2;
    }
    if (fclose(out) != 0 && status == 0) {
        tool_error(TOOL, "%s: cannot write: %s", path, strerror(errno));
        status = 2;
    }
    if (status == 0 && (status = check_output(path)) == 0 && rename(tmp, path) != 0) {
        tool_error(TOOL, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        status = 2;
    }
    if (status != 0)
        unlink(tmp);
    free(tmp);
    return status;
}

int info_dump(const dlc_store *s, const char *store, uint64_t index, const char *field,
              const char *path)
{
    const int f = pick_field(s, store, field);
    if (f < 0)
        return 2;
    dlc_value values[DLC_MAX_FIELDS];
    int status = read_checked(s, index, (uint32_t)f, values);
    if (status != 0)
        return status;
    const dlc_field *fd = &dlc_store_fields(s)[f];
    char what[96] = "";
    status = dump_to(path, fd, &values[f], what, sizeof what);
    if (status != 0)
        return status;
    const uint32_t lf = dlc_store_get_info(s)->label_field;
    if (fd->kind == DLC_FIELD_IMAGE && !field && lf != DLC_NO_FIELD)
        fprintf(stderr, "%s: record %" PRIu64 " (label %" PRId64 ", %s) written to %s\n", TOOL,
                index, values[lf].i, what, path);
    else
        fprintf(stderr, "%s: record %" PRIu64 " field %s (%s) written to %s\n", TOOL, index,
                fd->name, what, path);
    return 0;
}
