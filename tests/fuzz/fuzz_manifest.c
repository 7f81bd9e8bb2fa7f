/* Fuzz the manifest scanner (cache/builder/source_manifest.c): the input is a whole
 * manifest file, `PATH<TAB>LABEL` lines or a `#columns:` header and its
 * cells. The scan either lists items with labels in range, paths inside the
 * set's arena, columns with valid names and kinds and every list inside the
 * list values, or fails with a message that names the manifest and the line.
 * Nothing is decoded: the paths point nowhere, and reading them must be a
 * per-item skip, not a failure. */
#include "fuzz_util.h"

#include "source.h"

#include <dlcache/build.h>

#include <errno.h>

/* The columns: valid names, known kinds, indices in range, and every item's lists inside the
 * list values, end to end. */
static void check_columns(const dlc__source_set *set)
{
    if (!set->cols_set || set->ncols > DLC__SOURCE_MAX_COLS)
        abort();
    uint32_t scalars = 0, lists = 0;
    for (uint32_t c = 0; c < set->ncols; c++) {
        const dlc__column *col = &set->cols[c];
        const size_t n = strnlen(col->name, sizeof col->name);
        if (n == 0 || n >= sizeof col->name || col->kind < DLC__COL_LABEL ||
            col->kind > DLC__COL_FLOATS)
            abort();
        if (col->kind == DLC__COL_INTS || col->kind == DLC__COL_FLOATS) {
            if (col->index != lists++)
                abort();
        } else if (col->kind != DLC__COL_LABEL) {
            if (col->index != scalars++)
                abort();
        }
    }
    if (scalars != set->nscalars || lists != set->nlists)
        abort();
    size_t total = 0;
    for (size_t i = 0; i < set->count; i++)
        for (uint32_t k = 0; k < set->nlists; k++) {
            size_t n;
            const uint64_t *v = dlc__source_list(set, i, k, &n);
            if ((n && (v < set->list_vals || v + n > set->list_vals + set->nlist_vals)))
                abort();
            total += n;
        }
    if (total != set->nlist_vals)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[512];
    if (!path[0])
        fz_path(path, sizeof path, "list.tsv");
    fz_write_file(path, data, size);

    dlc__source_set set;
    dlc__source_init(&set);
    const dlc_status rc = dlc__source_scan_manifest(&set, path);
    if (rc < 0 && dlc_errmsg()[0] == '\0')
        abort();
    if (rc == DLC_OK) {
        check_columns(&set);
        const int labelled = dlc__source_has_label(&set);
        uint8_t *buf = NULL;
        size_t cap = 0;
        for (size_t i = 0; i < set.count; i++) {
            const dlc__item *it = &set.items[i];
            if (labelled && (it->label < 0 || it->label >= DLC__SOURCE_MAX_LABEL))
                abort();
            if (!labelled && it->label != -1)
                abort();
            if (it->path >= set.arena_len)
                abort();
            const char *rel = dlc__item_rel(it, dlc__source_path(&set, it));
            if (rel && (rel < dlc__source_path(&set, it) || strlen(rel) == 0))
                abort();
            if (strlen(dlc__source_path(&set, it)) == 0)
                abort();
            /* Read only paths inside the scratch directory (relative ones):
             * an absolute path could name any big file on the machine. */
            if (i < 4 && strncmp(dlc__source_path(&set, it), fz_dir, strlen(fz_dir)) == 0) {
                /* A missing file is a skip with a reason, never a hard error. */
                dlc__source_data d;
                char why[256] = "";
                const dlc_status r2 = dlc__source_read(&set, i, &buf, &cap, &d, why, sizeof why);
                if (r2 != DLC_OK && r2 != DLC_EDECODE && r2 != -ENOMEM)
                    abort();
                if (r2 == DLC_EDECODE && !why[0])
                    abort();
            }
        }
        free(buf);
        char nb[32];
        const uint32_t nl = dlc__source_num_labels(&set);
        if (nl > 0 && !dlc__source_label_name(&set, nl - 1, nb, sizeof nb))
            abort();
    }
    dlc__source_free(&set);
    return 0;
}
