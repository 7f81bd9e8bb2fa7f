/* Fuzz the WebDataset tar scanner (cache/builder/source_tar.c): the input is a whole
 * shard. The scan walks 512-byte headers (ustar, GNU long names and base-256
 * sizes, pax records), groups members by key and reads the .cls labels; then
 * each item's bytes are read at the offsets the scan recorded, as the build's
 * workers do. Either the items lie inside the shard with labels in range, or
 * the scan fails with a message naming the shard and the offset. */
#include "fuzz_util.h"

#include "source.h"

#include <errno.h>

#define MAX_ITEM_READS 64u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[512];
    if (!path[0])
        fz_path(path, sizeof path, "shard.tar");
    fz_write_file(path, data, size);

    dlc__source_set set;
    dlc__source_init(&set);
    const dlc_status rc = dlc__source_scan_tar(&set, path);
    if (rc < 0 && dlc_errmsg()[0] == '\0')
        abort();
    if (rc == DLC_OK) {
        uint8_t *buf = NULL;
        size_t cap = 0;
        for (size_t i = 0; i < set.count; i++) {
            const dlc__item *it = &set.items[i];
            if (it->path >= set.arena_len || it->label >= DLC__SOURCE_MAX_LABEL)
                abort();
            if (it->skip == 0 && it->label < 0)
                abort(); /* An item the build would store must have a label. */
            if (it->shard != UINT32_MAX && (it->offset > size || it->size > size - it->offset))
                abort(); /* A member outside the shard. */
            if (i < MAX_ITEM_READS && it->skip == 0) {
                dlc__source_data d;
                char why[256] = "";
                const dlc_status r2 = dlc__source_read(&set, i, &buf, &cap, &d, why, sizeof why);
                if (r2 == DLC_OK && d.size != it->size)
                    abort();
                if (r2 != DLC_OK && r2 != DLC_EDECODE && r2 != -ENOMEM)
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
