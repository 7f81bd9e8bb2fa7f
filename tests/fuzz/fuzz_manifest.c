/* Fuzz the manifest scanner (cache/source_manifest.c): the input is a whole
 * manifest file, `PATH<TAB>LABEL` lines. The scan either lists items with
 * labels in range and paths inside the set's arena, or fails with a message
 * that names the manifest and the line. Nothing is decoded: the paths point
 * nowhere, and reading them must be a per-item skip, not a failure. */
#include "fuzz_util.h"

#include "source.h"

#include <dlcache/build.h>

#include <errno.h>

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
        uint8_t *buf = NULL;
        size_t cap = 0;
        for (size_t i = 0; i < set.count; i++) {
            const dlc__item *it = &set.items[i];
            if (it->label < 0 || it->label >= DLC__SOURCE_MAX_LABEL || it->path >= set.arena_len)
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
