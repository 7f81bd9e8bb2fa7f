// libdlcache_spm.so: SentencePiece behind the C interface of spm_api.h, loaded by the builder with
// dlopen() (cache/builder/build_tokens_spm.c). The only C++ in the tree; exceptions never cross
// the interface.
#include "spm_api.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

void say(char *err, size_t cap, const std::string &msg)
{
    if (cap)
        std::snprintf(err, cap, "%s", msg.c_str());
}

void *load(const void *data, size_t len, char *err, size_t cap)
{
    try {
        auto *sp = new sentencepiece::SentencePieceProcessor();
        const auto st =
            sp->LoadFromSerializedProto(std::string(static_cast<const char *>(data), len));
        if (!st.ok()) {
            say(err, cap, st.ToString());
            delete sp;
            return nullptr;
        }
        return sp;
    } catch (const std::exception &e) {
        say(err, cap, e.what());
        return nullptr;
    }
}

int encode(void *model, const char *text, size_t len, uint32_t *ids, size_t cap, size_t *n,
           char *err, size_t errcap)
{
    try {
        auto *sp = static_cast<sentencepiece::SentencePieceProcessor *>(model);
        std::vector<int> out;
        const auto st = sp->Encode(std::string(text, len), &out);
        if (!st.ok()) {
            say(err, errcap, st.ToString());
            return -1;
        }
        *n = out.size();
        if (out.size() <= cap)
            for (size_t i = 0; i < out.size(); i++)
                ids[i] = static_cast<uint32_t>(out[i]);
        return 0;
    } catch (const std::exception &e) {
        say(err, errcap, e.what());
        return -1;
    }
}

int eos_id(void *model)
{
    return static_cast<sentencepiece::SentencePieceProcessor *>(model)->eos_id();
}

int vocab_size(void *model)
{
    return static_cast<sentencepiece::SentencePieceProcessor *>(model)->GetPieceSize();
}

void free_model(void *model)
{
    delete static_cast<sentencepiece::SentencePieceProcessor *>(model);
}

const dlc__spm_api api = {DLC__SPM_API_VERSION, load, encode, eos_id, vocab_size, free_model};

} // namespace

extern "C" __attribute__((visibility("default"))) const dlc__spm_api *dlc_spm_plugin_v2(void)
{
    return &api;
}
