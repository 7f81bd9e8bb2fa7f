/* store_fixture OUT COUNT: write a small deterministic store with the real
 * writer, for tests that read it with other tools (tests/e2e/store_foreign.sh
 * reads it with Python's lmdb module and mdb_stat). Record i has label i % 3,
 * a shape that alternates between values stored inline in LMDB leaf pages and
 * values on overflow pages, and payload byte j = (31*i + 7*j + (j >> 9)) & 255.
 * Built by cmake/store.cmake; not installed. */
#include "store_writer.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: store_fixture OUT COUNT\n");
        return 2;
    }
    const unsigned long long n = strtoull(argv[2], NULL, 10);
    dlc__store_writer *w = NULL;
    dlc_status rc = dlc__store_writer_open(argv[1], 1, 0, &w);
    uint8_t *buf = malloc(64 * 96 * 3);
    for (unsigned long long i = 0; rc == DLC_OK && i < n; i++) {
        /* Even records are 8x8x3 (192 bytes, inline); odd ones up to 64x96x3. */
        const uint32_t h = i % 2 ? 16 + (uint32_t)(i * 5 % 49) : 8;
        const uint32_t wd = i % 2 ? 32 + (uint32_t)(i * 11 % 65) : 8;
        const size_t size = (size_t)h * wd * 3;
        for (size_t j = 0; j < size; j++)
            buf[j] = (uint8_t)(31 * i + 7 * j + (j >> 9));
        rc = dlc__store_writer_put(w, (int64_t)(i % 3), h, wd, 3, DLC_ENCODING_RAW, buf, size);
    }
    free(buf);
    if (rc != DLC_OK) {
        fprintf(stderr, "store_fixture: %s\n", dlc_errmsg());
        dlc__store_writer_abort(w);
        return 1;
    }
    static const char *const names[] = {"alpha", "beta", "gamma"};
    const dlc__store_meta meta = {
        .label_names = names,
        .num_labels = 3,
        .skipped = 2,
        .build_json = "{\"tool\":\"store_fixture\"}",
        .source_digest = 0x0123456789abcdefull,
    };
    rc = dlc__store_writer_finish(w, &meta);
    if (rc != DLC_OK) {
        fprintf(stderr, "store_fixture: %s\n", dlc_errmsg());
        return 1;
    }
    return 0;
}
