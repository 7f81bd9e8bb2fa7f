/* store_fixture OUT COUNT: write a small deterministic store with the public writer, for tests
 * that read it with other tools (tests/e2e/store_foreign.sh reads it with Python's lmdb module
 * and mdb_stat). It has a field of every kind, encoding, channel count and dtype; record i's
 * values are the formulas of tests/lib/store_kinds.h, which tests/e2e/store_foreign.py computes
 * again in Python. Built by cmake/store.cmake; not installed. */
#include "store_kinds.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: store_fixture OUT COUNT\n");
        return 2;
    }
    const unsigned long long n = strtoull(argv[2], NULL, 10);
    const dlc_status rc = sk_write_store(argv[1], n, 1);
    if (rc != DLC_OK) {
        fprintf(stderr, "store_fixture: %s\n", dlc_errmsg());
        return 1;
    }
    return 0;
}
