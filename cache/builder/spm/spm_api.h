/* The SentencePiece plugin's C interface (cache/builder/spm/plugin.cc, libdlcache_spm.so): the
 * builder loads it with dlopen() when --tokenizer is given, so the library builds, links and runs
 * without libsentencepiece, as it does without CUDA (cmake/spm.cmake). Private to the builder. */
#ifndef DLCACHE_SPM_API_H
#define DLCACHE_SPM_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: load() takes the model's bytes, not its path (1 read the path itself: a FIFO there stalled
 * the build, and the digest was of bytes read apart from those loaded). */
#define DLC__SPM_API_VERSION 2u
/* The symbol the plugin exports. */
#define DLC__SPM_ENTRY "dlc_spm_plugin_v2"

typedef struct dlc__spm_api {
    uint32_t version; /* DLC__SPM_API_VERSION. */
    /* Load the model from its file's @p len bytes at @p data (read by the builder, which also
     * hashes them); NULL with the reason in @p err on failure. */
    void *(*load)(const void *data, size_t len, char *err, size_t cap);
    /* Encode @p len bytes of UTF-8 at @p text into ids; *n is their count. When it exceeds
     * @p cap nothing is written to @p ids: call again with room for *n. 0, or -1 with @p err. */
    int (*encode)(void *model, const char *text, size_t len, uint32_t *ids, size_t cap, size_t *n,
                  char *err, size_t errcap);
    int (*eos_id)(void *model);     /* The model's </s> id, or -1. */
    int (*vocab_size)(void *model); /* Pieces of the model. */
    void (*free)(void *model);      /* Accepts NULL. */
} dlc__spm_api;

typedef const dlc__spm_api *(*dlc__spm_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* DLCACHE_SPM_API_H */
