/* stream_index_edit: a test program of the stream part (not a tool): rewrite a store set's index
 * as someone who can write the bucket could, re-sealed (its checksum recomputed) so that it
 * decodes, for the tests of what the streaming cache refuses (tests/e2e/stream_trust.sh).
 *
 *   stream_index_edit IN OUT [--count K=N] [--bytes K=N] [--name K=NAME]
 *
 * --count sets shard K's record count (the firsts and the set's count follow, as a careful liar
 * would make them), --bytes its file size, --name its name. The edits are not checked: the
 * output is written even where the library's decoder would refuse it. Exits 0, or 1 with a
 * message on stderr. */
#include "store_set.h"

#include <dlcache/status.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr,
            "usage: stream_index_edit IN OUT [--count K=N] [--bytes K=N] [--name K=NAME]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    uint8_t *buf = NULL;
    size_t len = 0;
    dlc__set_index x;
    memset(&x, 0, sizeof x);
    if (dlc__set_index_read(argv[1], &buf, &len) != DLC_OK ||
        dlc__set_index_decode(buf, len, argv[1], &x) != DLC_OK) {
        fprintf(stderr, "stream_index_edit: %s\n", dlc_errmsg());
        return 1;
    }
    for (int i = 3; i + 1 < argc; i += 2) {
        const char *eq = strchr(argv[i + 1], '=');
        if (!eq)
            return usage();
        const unsigned long k = strtoul(argv[i + 1], NULL, 10);
        if (k >= x.num_shards) {
            fprintf(stderr, "stream_index_edit: no shard %lu\n", k);
            return 1;
        }
        dlc__set_shard *e = &x.shards[k];
        if (strcmp(argv[i], "--count") == 0)
            e->count = strtoull(eq + 1, NULL, 10);
        else if (strcmp(argv[i], "--bytes") == 0)
            e->file_bytes = strtoull(eq + 1, NULL, 10);
        else if (strcmp(argv[i], "--name") == 0)
            snprintf(e->name, sizeof e->name, "%s", eq + 1);
        else
            return usage();
    }
    uint64_t sum = 0;
    for (uint32_t k = 0; k < x.num_shards; k++) {
        x.shards[k].first = sum;
        sum += x.shards[k].count;
    }
    x.count = sum;
    uint8_t *out = NULL;
    size_t olen = 0;
    FILE *f = NULL;
    if (dlc__set_index_encode(&x, &out, &olen) != DLC_OK || !(f = fopen(argv[2], "wb")) ||
        fwrite(out, 1, olen, f) != olen || fclose(f) != 0) {
        fprintf(stderr, "stream_index_edit: %s: %s\n", argv[2], strerror(errno));
        return 1;
    }
    free(out);
    free(buf);
    dlc__set_index_free(&x);
    return 0;
}
