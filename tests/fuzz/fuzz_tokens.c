/* Fuzz the token builder's readers (cache/builder/build_tokens.c, cachebuild --tokens): the
 * first byte picks the source format (JSON lines, a flat .bin, .npy, or a Megatron pair whose
 * .idx is the input's first N bytes, N in the next two), the rest is the file. Either the build
 * fails with a message, or it writes a token store that opens and verifies, whose documents
 * hold no more tokens than the input has bytes (no source makes ids out of nothing: a .npy of
 * empty rows kept cachebuild busy for ever). */
#include "fuzz_util.h"

#include <dlcache/store.h>
#include <dlcache/tokens.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char jsonl[512], bin[512], npy[512], idx[512], mbin[512], prefix[512], out[512];
    if (!out[0]) {
        fz_path(jsonl, sizeof jsonl, "src.jsonl");
        fz_path(bin, sizeof bin, "src.bin");
        fz_path(npy, sizeof npy, "src.npy");
        fz_path(idx, sizeof idx, "m.idx");
        fz_path(mbin, sizeof mbin, "m.bin");
        fz_path(prefix, sizeof prefix, "m");
        fz_path(out, sizeof out, "out.dlc");
    }
    if (size < 1)
        return 0;
    const unsigned kind = data[0] % 4;
    data++;
    size--;
    const char *src = NULL;
    uint32_t format = 0;
    if (kind == 0) {
        fz_write_file(jsonl, data, size);
        src = jsonl, format = DLC_TOKENS_FORMAT_JSONL;
    } else if (kind == 1) {
        fz_write_file(bin, data, size);
        src = bin, format = DLC_TOKENS_FORMAT_BIN;
    } else if (kind == 2) {
        fz_write_file(npy, data, size);
        src = npy, format = DLC_TOKENS_FORMAT_NPY;
    } else {
        if (size < 2)
            return 0;
        size_t n = (size_t)data[0] | (size_t)data[1] << 8;
        data += 2;
        size -= 2;
        n = n < size ? n : size;
        fz_write_file(idx, data, n);
        fz_write_file(mbin, data + n, size - n);
        src = prefix, format = DLC_TOKENS_FORMAT_MEGATRON;
    }
    dlc_tokens_build_options o;
    dlc_tokens_build_options_init(&o);
    o.sources = &src;
    o.num_sources = 1;
    o.format = format;
    o.output = out;
    o.force = 1;
    o.eos_id = 0;
    dlc_tokens_build_report r;
    memset(&r, 0, sizeof r);
    const dlc_status rc = dlc_tokens_build(&o, &r);
    if (rc < 0 && dlc_errmsg()[0] == '\0')
        abort();
    if (rc != DLC_OK)
        return 0;
    /* Each document may gain one end-of-document id, and other ids take at least a byte of the
     * input (JSON: a digit; flat and .npy files: 1 to 8 bytes). A Megatron index may point many
     * sequences at the same bytes of its .bin, so only its documents are bounded. */
    if (r.documents > r.tokens || (kind != 3 && r.tokens > 2 * (uint64_t)size + 1))
        abort();
    dlc_store *s = NULL;
    if (dlc_store_open(out, 0, &s) != DLC_OK)
        abort();
    dlc_tokens *t = NULL;
    if (dlc_tokens_open(s, &t) != DLC_OK || dlc_tokens_verify(t, s) != DLC_OK)
        abort();
    const dlc_tokens_info *info = dlc_tokens_get_info(t);
    if (info->num_docs != r.documents || info->num_tokens != r.tokens)
        abort();
    dlc_tokens_close(t);
    dlc_store_close(s);
    return 0;
}
