/* ImageFolder scan: the same classes, labels and sample order as
 * torchvision.datasets.ImageFolder (torchvision 0.14, datasets/folder.py).
 *
 * torchvision does:
 *   classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
 *   for each class in that order, label = its position:
 *     for root, _, fnames in sorted(os.walk(root/class, followlinks=True)):
 *       for fname in sorted(fnames):
 *         if fname.lower().endswith(IMG_EXTENSIONS): sample (root/fname, label)
 * so: directory symlinks are followed; a class folder's subfolders are
 * searched too, visited in the sorted order of their full paths (which is not
 * the order of a depth-first walk: "a b" sorts before "a/x"); a "file" is any
 * entry that is not a directory after following symlinks, dangling symlinks
 * included. Python sorts str by code point; for UTF-8 names byte order
 * (strcmp) is the same order.
 *
 * Where we differ, on purpose:
 *   - torchvision raises when a class has no image file; we keep the class
 *     (its label number stays its position) with no records and log a notice.
 *   - os.walk follows a directory symlink loop until the path is too long; we
 *     skip a directory that is its own ancestor and log a notice.
 *   - Files with an image extension other than .jpg/.jpeg keep their place in
 *     the numbering but are skipped with "not a JPEG".
 */
#include "source.h"

#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Deeper trees are not data sets; the bound keeps the recursion's stack small. */
#define MAX_DEPTH 64

/* torchvision's IMG_EXTENSIONS; the first two are what we can decode. */
static const char *const img_ext[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                      ".pgm", ".tif",  ".tiff", ".webp"};

/* 0: not an image for torchvision, 1: JPEG, 2: another image type. */
static int image_kind(const char *name)
{
    const size_t n = strlen(name);
    for (size_t i = 0; i < sizeof img_ext / sizeof img_ext[0]; i++) {
        const size_t m = strlen(img_ext[i]);
        if (n >= m && strcasecmp(name + n - m, img_ext[i]) == 0)
            return i < 2 ? 1 : 2;
    }
    return 0;
}

/* Python's DirEntry.is_dir(): follows symlinks; an error means "not a dir". */
static int entry_is_dir(int dfd, const struct dirent *e, struct stat *st)
{
    if (e->d_type == DT_DIR) {
        if (st && fstatat(dfd, e->d_name, st, 0) != 0)
            return 0;
        return 1;
    }
    if (e->d_type != DT_LNK && e->d_type != DT_UNKNOWN)
        return 0;
    struct stat tmp;
    struct stat *sp = st ? st : &tmp;
    return fstatat(dfd, e->d_name, sp, 0) == 0 && S_ISDIR(sp->st_mode);
}

static int is_dot(const char *n)
{
    return n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A growable list of malloc'd strings. */
typedef struct strlist {
    char **v;
    size_t n, cap;
} strlist;

static dlc_status strlist_push(strlist *l, char *s)
{
    if (!s)
        return dlc__errorf(-ENOMEM, "ImageFolder scan: out of memory");
    if (l->n == l->cap) {
        const size_t cap = l->cap ? l->cap * 2 : 32;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            free(s);
            return dlc__errorf(-ENOMEM, "ImageFolder scan: out of memory");
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = s;
    return DLC_OK;
}

static void strlist_free(strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static char *join(const char *a, const char *b)
{
    const size_t na = strlen(a), nb = strlen(b);
    char *p = malloc(na + nb + 2);
    if (!p)
        return NULL;
    memcpy(p, a, na);
    p[na] = '/';
    memcpy(p + na + 1, b, nb + 1);
    return p;
}

typedef struct ancestor {
    dev_t dev;
    ino_t ino;
} ancestor;

/* The folders a scan has entered, by (dev, ino): a tsearch() tree, and how many entries
 * were of a folder entered before. Links may lead to one folder by several routes, and
 * torchvision's os.walk(followlinks=True) lists its images once per route, as we do; but 16
 * folders of two links each to the next are 65,536 routes (a 2 GB store of one JPEG), so the
 * scan stops once the repeats outnumber the folders by far. */
typedef struct dirseen {
    void *root; /* tsearch() tree of ancestor (dev, ino), each malloc'd. */
    size_t n, repeats;
} dirseen;

#define MAX_REPEATS_OVER 1024u

static int cmp_dir(const void *a, const void *b)
{
    const ancestor *x = a, *y = b;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    return (x->ino > y->ino) - (x->ino < y->ino);
}

/* Enter (dev, ino): DLC_OK, or DLC_EINVAL naming @p dir when the repeats run away. */
static dlc_status dirseen_enter(dirseen *d, const char *dir, dev_t dev, ino_t ino)
{
    ancestor *key = malloc(sizeof *key);
    if (!key)
        return dlc__errorf(-ENOMEM, "ImageFolder scan: out of memory");
    *key = (ancestor){dev, ino};
    ancestor **at = tsearch(key, &d->root, cmp_dir);
    if (!at) {
        free(key);
        return dlc__errorf(-ENOMEM, "ImageFolder scan: out of memory");
    }
    if (*at == key) {
        d->n++;
        return DLC_OK;
    }
    free(key);
    if (++d->repeats > d->n + MAX_REPEATS_OVER)
        return dlc__errorf(DLC_EINVAL,
                           "%s: links lead to the same folders again and again (%zu entries of "
                           "%zu folders): the scan stops rather than list their images over and "
                           "over",
                           dir, d->n + d->repeats, d->n);
    return DLC_OK;
}

/* Collect @p dir and every directory below it (following symlinks) into @p out. */
static dlc_status collect_dirs(dlc__source_set *s, const char *dir, ancestor *anc, int depth,
                               dirseen *seen, strlist *out)
{
    dlc_status rc = strlist_push(out, strdup(dir));
    if (rc < 0)
        return rc;
    if (depth >= MAX_DEPTH) {
        if (s->strict)
            return dlc__errorf(DLC_EINVAL, "%s: deeper than %d folders (--strict)", dir, MAX_DEPTH);
        dlc__logf(s->log, s->log_user, DLC_LOG_WARN,
                  "%s: deeper than %d folders; not searched further", dir, MAX_DEPTH);
        return DLC_OK;
    }
    DIR *d = opendir(dir);
    if (!d) {
        /* os.walk ignores folders it cannot list; say so at least, and a strict build, which
         * stops at a file it cannot read, stops here too: the images in it are lost. */
        if (s->strict)
            return dlc__errorf(-errno, "%s: cannot list folder (--strict): %s", dir,
                               strerror(errno));
        dlc__logf(s->log, s->log_user, DLC_LOG_WARN, "%s: cannot list folder: %s", dir,
                  strerror(errno));
        return DLC_OK;
    }
    const int dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (is_dot(e->d_name))
            continue;
        struct stat st;
        if (!entry_is_dir(dfd, e, &st))
            continue;
        int loop = 0;
        for (int i = 0; i <= depth; i++)
            loop |= anc[i].dev == st.st_dev && anc[i].ino == st.st_ino;
        char *sub = join(dir, e->d_name);
        if (!sub) {
            rc = dlc__errorf(-ENOMEM, "ImageFolder scan: out of memory");
            break;
        }
        if (loop) {
            dlc__logf(s->log, s->log_user, DLC_LOG_WARN,
                      "%s: a link back to a folder above it; not followed", sub);
            free(sub);
            continue;
        }
        anc[depth + 1].dev = st.st_dev;
        anc[depth + 1].ino = st.st_ino;
        rc = dirseen_enter(seen, sub, st.st_dev, st.st_ino);
        if (rc == DLC_OK)
            rc = collect_dirs(s, sub, anc, depth + 1, seen, out);
        free(sub);
        if (rc < 0)
            break;
    }
    closedir(d);
    return rc;
}

/* Push the files of one folder, sorted, as items of @p label. Returns the
 * number of image files through @p found. Paths relative to the tree start
 * @p root_len bytes into each path (the root and its slash). */
static dlc_status scan_files(dlc__source_set *s, const char *dir, int64_t label, size_t root_len,
                             size_t *found)
{
    strlist names = {0};
    dlc_status rc = DLC_OK;
    DIR *d = opendir(dir);
    if (!d)
        return DLC_OK; /* collect_dirs() already logged it */
    const int dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (is_dot(e->d_name) || !image_kind(e->d_name) || entry_is_dir(dfd, e, NULL))
            continue;
        if ((rc = strlist_push(&names, strdup(e->d_name))) < 0)
            goto fail;
    }
    if (names.n > 1)
        qsort(names.v, names.n, sizeof *names.v, cmp_str);
    for (size_t i = 0; i < names.n; i++) {
        char *path = join(dir, names.v[i]);
        FAIL_IF(!path, -ENOMEM, "ImageFolder scan: out of memory");
        dlc__item it = {.label = label, .shard = UINT32_MAX};
        it.skip = image_kind(names.v[i]) == 1 ? DLC__SKIP_NONE : DLC__SKIP_NOT_JPEG;
        /* A root too long to say where the relative path starts has none (no mask). */
        it.rel = root_len < UINT16_MAX ? (uint16_t)(root_len + 1) : 0;
        rc = dlc__source_intern(s, path, strlen(path), &it.path);
        free(path);
        CHECK(rc);
        CHECK(dlc__source_push(s, &it));
    }
    *found += names.n;
    rc = DLC_OK;
fail:
    closedir(d);
    strlist_free(&names);
    return rc;
}

/* The class folders of @p dir (its entries that are folders once links are followed), sorted
 * by byte value as torchvision sorts them. */
static dlc_status list_classes(const char *dir, strlist *classes)
{
    dlc_status rc = DLC_OK;
    DIR *d = opendir(dir);
    if (!d)
        return dlc__errorf(-errno, "%s: cannot list folder: %s", dir, strerror(errno));
    const int dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (is_dot(e->d_name) || !entry_is_dir(dfd, e, NULL))
            continue;
        if ((rc = strlist_push(classes, strdup(e->d_name))) < 0)
            break;
    }
    closedir(d);
    if (rc < 0)
        return rc;
    if (classes->n == 0)
        return dlc__errorf(DLC_ENOIMAGES,
                           "%s: no class folder (an ImageFolder holds one folder per class)", dir);
    if (classes->n > (size_t)DLC__SOURCE_MAX_LABEL)
        return dlc__errorf(DLC_EINVAL, "%s: %zu classes, at most %lld", dir, classes->n,
                           (long long)DLC__SOURCE_MAX_LABEL);
    qsort(classes->v, classes->n, sizeof *classes->v, cmp_str);
    return DLC_OK;
}

/* Push the items of class @p label, folder @p name of @p dir: every image file below it,
 * its folders visited in sorted full-path order. @p anc has MAX_DEPTH + 2 entries. */
static dlc_status scan_class(dlc__source_set *s, const char *dir, const char *name, size_t label,
                             ancestor *anc, dirseen *seen)
{
    dlc_status rc;
    strlist dirs = {0};
    char *cdir = join(dir, name);
    FAIL_IF(!cdir, -ENOMEM, "ImageFolder scan: out of memory");
    struct stat st;
    if (stat(cdir, &st) == 0) {
        anc[0].dev = st.st_dev;
        anc[0].ino = st.st_ino;
        CHECK(dirseen_enter(seen, cdir, st.st_dev, st.st_ino));
    }
    CHECK(collect_dirs(s, cdir, anc, 0, seen, &dirs));
    /* sorted(os.walk(...)) orders the walk by the full folder path. */
    qsort(dirs.v, dirs.n, sizeof *dirs.v, cmp_str);
    size_t found = 0;
    for (size_t i = 0; i < dirs.n; i++)
        CHECK(scan_files(s, dirs.v[i], (int64_t)label, strlen(dir) + 1, &found));
    if (found == 0)
        dlc__logf(s->log, s->log_user, DLC_LOG_WARN,
                  "%s: no image file; label %zu keeps its number but has no records "
                  "(torchvision's ImageFolder refuses a tree with an empty class)",
                  cdir, label);
    rc = DLC_OK;
fail:
    strlist_free(&dirs);
    free(cdir);
    return rc;
}

dlc_status dlc__source_scan_folder(dlc__source_set *s, const char *dir_in)
{
    dlc_status rc;
    strlist classes = {0};
    ancestor *anc = NULL;
    dirseen seen = {0};
    /* os.path.join drops the separator a trailing slash already gives. */
    char *dir = strdup(dir_in);
    FAIL_IF(!dir, -ENOMEM, "ImageFolder scan: out of memory");
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
        dir[n - 1] = '\0';
    CHECK(list_classes(dir, &classes));

    s->class_names = calloc(classes.n, sizeof *s->class_names);
    anc = calloc(MAX_DEPTH + 2, sizeof *anc);
    FAIL_IF(!s->class_names || !anc, -ENOMEM, "ImageFolder scan: out of memory");
    s->classes_cap = (uint32_t)classes.n;
    for (size_t c = 0; c < classes.n; c++) {
        CHECK(dlc__source_intern(s, classes.v[c], strlen(classes.v[c]), &s->class_names[c]));
        s->nclasses = (uint32_t)c + 1;
        CHECK(scan_class(s, dir, classes.v[c], c, anc, &seen));
    }
    rc = DLC_OK;
fail:
    tdestroy(seen.root, free);
    free(anc);
    strlist_free(&classes);
    free(dir);
    return rc;
}
