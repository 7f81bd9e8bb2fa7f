/* Token stores (include/dlcache/tokens.h, docs/FORMAT.md "Token stores"): the "tokens" block and
 * the prefix sums of the documents' lengths, read and checked at open without touching the table
 * beyond its two ends, and written beside the records by the token writer. */
#include "common.h"
#include "store_internal.h"
#include "store_set.h"
#include "store_tokens.h"

#include <dlcache/tokens.h>
#include <dlcache/writer.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define TOKENS_MAGIC "DLCTOK01"
#define TOKENS_VERSION 1u
#define TOKENS_BLOCK 128u
#define TOKENS_HASHED 120u

_Static_assert(DLC_TOKENS_NAME_MAX == 48, "the block's name is 48 bytes at offset 64");

struct dlc_tokens {
    const dlc_store *s;
    dlc_tokens_info info;
    const uint64_t *offsets; /* num_docs + 1: into the map, or `copy`; NULL for a set. */
    uint64_t *copy;          /* Owned when LMDB left the value unaligned (a small leaf value). */
    /* A store set: each shard's own view, the global number of its first document and of its
     * first token (nshards + 1 entries each, the last the totals). Nothing per document. */
    uint32_t nshards;
    struct dlc_tokens **shard;
    uint64_t *doc_first, *tok_base;
};

/* The block's layout (little-endian, docs/FORMAT.md):
 *   0 magic[8]  8 u32 version  12 u32 dtype  16 u64 num_docs  24 u64 num_tokens
 *   32 u32 eos_id  36 u32 vocab_size  40 u32 field  44 u32 reserved  48 u64 max_doc_tokens
 *   56 u64 offsets_digest  64 name[48]  112 u64 tokenizer_digest  120 u64 xxh3(0..119) */
static void block_store(uint8_t b[TOKENS_BLOCK], const dlc_tokens_info *in)
{
    memset(b, 0, TOKENS_BLOCK);
    memcpy(b, TOKENS_MAGIC, 8);
    dlc__st32(b + 8, TOKENS_VERSION);
    dlc__st32(b + 12, in->dtype);
    dlc__st64(b + 16, in->num_docs);
    dlc__st64(b + 24, in->num_tokens);
    dlc__st32(b + 32, in->eos_id);
    dlc__st32(b + 36, in->vocab_size);
    dlc__st32(b + 40, in->field);
    dlc__st64(b + 48, in->max_doc_tokens);
    dlc__st64(b + 56, in->offsets_digest);
    memcpy(b + 64, in->tokenizer, strnlen(in->tokenizer, DLC_TOKENS_NAME_MAX - 1));
    dlc__st64(b + 112, in->tokenizer_digest);
    dlc__st64(b + TOKENS_HASHED, XXH3_64bits(b, TOKENS_HASHED));
}

static dlc_status block_load(const dlc_store *s, const uint8_t *b, size_t size,
                             dlc_tokens_info *out)
{
    const char *path = dlc_store_path(s);
    if (size != TOKENS_BLOCK)
        return dlc__errorf(DLC_ECORRUPT, "%s: token metadata \"tokens\" is %zu bytes, not %u", path,
                           size, TOKENS_BLOCK);
    if (memcmp(b, TOKENS_MAGIC, 8) != 0)
        return dlc__errorf(DLC_ECORRUPT, "%s: token metadata: bad magic", path);
    if (dlc__ld64(b + TOKENS_HASHED) != XXH3_64bits(b, TOKENS_HASHED))
        return dlc__errorf(DLC_ECORRUPT, "%s: token metadata: checksum mismatch", path);
    if (dlc__ld32(b + 8) != TOKENS_VERSION)
        return dlc__errorf(DLC_EVERSION, "%s: token metadata of version %u; this library reads %u",
                           path, dlc__ld32(b + 8), TOKENS_VERSION);
    memset(out, 0, sizeof *out);
    out->dtype = dlc__ld32(b + 12);
    out->num_docs = dlc__ld64(b + 16);
    out->num_tokens = dlc__ld64(b + 24);
    out->eos_id = dlc__ld32(b + 32);
    out->vocab_size = dlc__ld32(b + 36);
    out->field = dlc__ld32(b + 40);
    out->max_doc_tokens = dlc__ld64(b + 48);
    out->offsets_digest = dlc__ld64(b + 56);
    memcpy(out->tokenizer, b + 64, DLC_TOKENS_NAME_MAX);
    out->tokenizer_digest = dlc__ld64(b + 112);
    const uint8_t *name = b + 64;
    size_t nl = 0;
    while (nl < DLC_TOKENS_NAME_MAX && name[nl])
        nl++;
    if (nl == 0 || nl == DLC_TOKENS_NAME_MAX)
        return dlc__errorf(DLC_ECORRUPT, "%s: token metadata: tokenizer name of %zu bytes", path,
                           nl);
    for (size_t i = nl; i < DLC_TOKENS_NAME_MAX; i++)
        if (name[i])
            return dlc__errorf(DLC_ECORRUPT, "%s: token metadata: tokenizer name not NUL-padded",
                               path);
    if (dlc__ld32(b + 44) != 0)
        return dlc__errorf(DLC_ECORRUPT, "%s: token metadata: reserved word not 0", path);
    return DLC_OK;
}

static dlc_status check_info(const dlc_store *s, const dlc_tokens_info *in)
{
    const char *path = dlc_store_path(s);
    const dlc_store_info *si = dlc_store_get_info(s);
    if (in->dtype != DLC_DTYPE_UINT16 && in->dtype != DLC_DTYPE_INT32)
        return dlc__errorf(DLC_ECORRUPT, "%s: token metadata: element type %u, not uint16 or int32",
                           path, in->dtype);
    if (in->num_docs != si->count)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: token metadata: %" PRIu64 " documents, the store has %" PRIu64
                           " records",
                           path, in->num_docs, si->count);
    if (in->field >= si->num_fields)
        return dlc__errorf(DLC_ECORRUPT, "%s: token metadata: field %u of %u", path, in->field,
                           si->num_fields);
    const dlc_field *f = &dlc_store_fields(s)[in->field];
    if (f->kind != DLC_FIELD_NDARRAY || f->ndim != 1 || f->dtype != in->dtype)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: token metadata: field '%s' is not a 1-D %s array of tokens", path,
                           f->name, dlc_dtype_name(in->dtype));
    const uint64_t limit = in->dtype == DLC_DTYPE_UINT16 ? 65536u : (1ull << 31);
    if (in->vocab_size > limit || (in->vocab_size && in->eos_id >= in->vocab_size) ||
        in->eos_id >= limit)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: token metadata: vocabulary %u or end-of-document id %u out of "
                           "range of %s",
                           path, in->vocab_size, in->eos_id, dlc_dtype_name(in->dtype));
    if (in->num_docs && (in->max_doc_tokens == 0 || in->max_doc_tokens > f->max_dim0 ||
                         in->num_tokens < in->num_docs))
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: token metadata: longest document %" PRIu64 " tokens, %" PRIu64
                           " tokens in %" PRIu64 " documents (field: %u)",
                           path, in->max_doc_tokens, in->num_tokens, in->num_docs, f->max_dim0);
    return DLC_OK;
}

/* A set: every shard's view, checked to agree with the first's (element type, end-of-document id,
 * vocabulary, tokenizer); the totals and the first document and token of each shard. */
static dlc_status open_set(const dlc_store *s, dlc_tokens **out)
{
    const char *path = dlc_store_path(s);
    const uint32_t n = s->num_shards;
    dlc_status rc = DLC_OK;
    dlc_tokens *t = calloc(1, sizeof *t);
    FAIL_IF(!t, -ENOMEM, "%s: out of memory", path);
    t->s = s;
    t->shard = calloc(n, sizeof *t->shard);
    t->doc_first = calloc((size_t)n + 1, sizeof *t->doc_first);
    t->tok_base = calloc((size_t)n + 1, sizeof *t->tok_base);
    FAIL_IF(!t->shard || !t->doc_first || !t->tok_base, -ENOMEM, "%s: out of memory", path);
    XXH3_state_t *h = XXH3_createState();
    FAIL_IF(!h, -ENOMEM, "%s: out of memory", path);
    XXH3_64bits_reset(h);
    for (uint32_t k = 0; k < n; k++) {
        rc = dlc_tokens_open(dlc__set_shard_at(s, k), &t->shard[k]);
        if (rc != DLC_OK) {
            XXH3_freeState(h);
            goto fail;
        }
        t->nshards = k + 1;
        const dlc_tokens_info *a = &t->shard[0]->info, *b = &t->shard[k]->info;
        if (a->dtype != b->dtype || a->eos_id != b->eos_id || a->vocab_size != b->vocab_size ||
            a->field != b->field || a->tokenizer_digest != b->tokenizer_digest ||
            strcmp(a->tokenizer, b->tokenizer) != 0) {
            XXH3_freeState(h);
            FAIL_IF(1, DLC_ECORRUPT,
                    "%s: shard %s holds other tokens than shard %s (element type, end-of-document "
                    "id, vocabulary or tokenizer)",
                    path, dlc_store_path(dlc__set_shard_at(s, k)),
                    dlc_store_path(dlc__set_shard_at(s, 0)));
        }
        t->doc_first[k + 1] = t->doc_first[k] + b->num_docs;
        t->tok_base[k + 1] = t->tok_base[k] + b->num_tokens;
        t->info.max_doc_tokens =
            b->max_doc_tokens > t->info.max_doc_tokens ? b->max_doc_tokens : t->info.max_doc_tokens;
        uint8_t d[8];
        dlc__st64(d, b->offsets_digest);
        XXH3_64bits_update(h, d, 8);
    }
    t->info.offsets_digest = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    const dlc_tokens_info *a = &t->shard[0]->info;
    t->info.dtype = a->dtype;
    t->info.eos_id = a->eos_id;
    t->info.vocab_size = a->vocab_size;
    t->info.field = a->field;
    t->info.tokenizer_digest = a->tokenizer_digest;
    memcpy(t->info.tokenizer, a->tokenizer, sizeof t->info.tokenizer);
    t->info.num_docs = t->doc_first[n];
    t->info.num_tokens = t->tok_base[n];
    FAIL_IF(t->info.num_docs != dlc_store_get_info(s)->count, DLC_ECORRUPT,
            "%s: the shards hold %" PRIu64 " documents, the set %" PRIu64 " records", path,
            t->info.num_docs, dlc_store_get_info(s)->count);
    *out = t;
    return DLC_OK;
fail:
    dlc_tokens_close(t);
    return rc;
}

dlc_status dlc_tokens_open(const dlc_store *s, dlc_tokens **out)
{
    if (out)
        *out = NULL;
    if (!s || !out)
        return dlc__errorf(DLC_EINVAL, "dlc_tokens_open: NULL argument");
    const char *path = dlc_store_path(s);
    if (s->lazy) {
        /* A streamed set: its parts' prefix sums are in the parts, so every part must be local
         * (attached) for as long as the view lives. dlc_token_loader_open() of the set's URL
         * fetches and holds them. */
        for (uint32_t k = 0; k < s->num_shards; k++)
            if (!dlc__set_attached(s, k))
                return dlc__errorf(DLC_ENOSYS,
                                   "%s: a streamed set of token stores is read with every part "
                                   "local: part %s is not (open its URL with "
                                   "dlc_token_loader_open(), which fetches them)",
                                   path, s->lazy_index->shards[k].name);
    }
    if (s->num_shards)
        return open_set(s, out);
    const void *b = NULL, *o = NULL;
    size_t bsize = 0, osize = 0;
    if (dlc_store_meta(s, DLC_TOKENS_META, &b, &bsize) != DLC_OK)
        return dlc__errorf(DLC_ENOTFOUND, "%s: not a token store (no \"%s\" metadata)", path,
                           DLC_TOKENS_META);
    dlc_tokens_info info;
    dlc_status rc = block_load(s, b, bsize, &info);
    if (rc == DLC_OK)
        rc = check_info(s, &info);
    if (rc != DLC_OK)
        return rc;
    if (dlc_store_meta(s, DLC_TOKENS_META_OFFSETS, &o, &osize) != DLC_OK)
        return dlc__errorf(DLC_ECORRUPT, "%s: token store without \"%s\" metadata", path,
                           DLC_TOKENS_META_OFFSETS);
    if (info.num_docs >= UINT64_MAX / 8 || osize != (info.num_docs + 1) * 8)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: token offsets: %zu bytes, %" PRIu64 " documents want %" PRIu64,
                           path, osize, info.num_docs, (info.num_docs + 1) * 8);
    const uint8_t *ob = o;
    if (dlc__ld64(ob) != 0 || dlc__ld64(ob + info.num_docs * 8) != info.num_tokens)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: token offsets run from %" PRIu64 " to %" PRIu64
                           ", not from 0 to %" PRIu64 " tokens",
                           path, dlc__ld64(ob), dlc__ld64(ob + info.num_docs * 8), info.num_tokens);
    dlc_tokens *t = calloc(1, sizeof *t);
    if (!t)
        return dlc__errorf(-ENOMEM, "%s: out of memory", path);
    t->s = s;
    t->info = info;
    if ((uintptr_t)o % 8 == 0) {
        t->offsets = o; /* A large table is on LMDB's overflow pages: 8-aligned, never copied. */
    } else {
        t->copy = malloc(osize);
        if (!t->copy) {
            free(t);
            return dlc__errorf(-ENOMEM, "%s: out of memory", path);
        }
        memcpy(t->copy, o, osize);
        t->offsets = t->copy;
    }
    *out = t;
    return DLC_OK;
}

void dlc_tokens_close(dlc_tokens *t)
{
    if (!t)
        return;
    for (uint32_t k = 0; t->shard && k < t->nshards; k++)
        dlc_tokens_close(t->shard[k]);
    free(t->shard);
    free(t->doc_first);
    free(t->tok_base);
    free(t->copy);
    free(t);
}

const dlc_tokens_info *dlc_tokens_get_info(const dlc_tokens *t)
{
    return t ? &t->info : NULL;
}

const uint64_t *dlc_tokens_offsets(const dlc_tokens *t)
{
    return t ? t->offsets : NULL;
}

/* The last k < n with base[k] <= v (base[0] = 0 <= v). */
static uint32_t last_at_most(const uint64_t *base, uint32_t n, uint64_t v)
{
    uint32_t lo = 0, hi = n;
    while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (base[mid] <= v)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

uint64_t dlc_tokens_doc_start(const dlc_tokens *t, uint64_t doc)
{
    if (!t || doc > t->info.num_docs)
        return UINT64_MAX;
    if (!t->nshards)
        return t->offsets[doc];
    if (doc == t->info.num_docs)
        return t->info.num_tokens;
    const uint32_t k = last_at_most(t->doc_first, t->nshards, doc);
    return t->tok_base[k] + t->shard[k]->offsets[doc - t->doc_first[k]];
}

uint64_t dlc_tokens_find(const dlc_tokens *t, uint64_t pos)
{
    if (!t || pos >= t->info.num_tokens)
        return UINT64_MAX;
    if (t->nshards) {
        /* The shard (the last of equal bases: shards without tokens are passed over), then the
         * document inside it. */
        const uint32_t k = last_at_most(t->tok_base, t->nshards, pos);
        return t->doc_first[k] + dlc_tokens_find(t->shard[k], pos - t->tok_base[k]);
    }
    /* The last d with offsets[d] <= pos; offsets[0] = 0 <= pos < offsets[num_docs]. A table that
     * does not increase gives some d in range, whose read then fails its length check. */
    uint64_t lo = 0, hi = t->info.num_docs;
    while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (t->offsets[mid] <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

dlc_status dlc__tokens_doc_value(const dlc_tokens *t, dlc_store_reader *r, uint64_t doc,
                                 dlc_value *out)
{
    if (!t || !r || !out)
        return dlc__errorf(DLC_EINVAL, "dlc_tokens_doc: NULL argument");
    if (doc >= t->info.num_docs)
        return dlc__errorf(DLC_ENOTFOUND, "%s: document %" PRIu64 " of %" PRIu64,
                           dlc_store_path(t->s), doc, t->info.num_docs);
    dlc_value v[DLC_MAX_FIELDS];
    const dlc_status rc = dlc_store_read_values(r, doc, v);
    if (rc != DLC_OK)
        return rc;
    const dlc_value *tv = &v[t->info.field];
    const uint64_t a = dlc_tokens_doc_start(t, doc), b = dlc_tokens_doc_start(t, doc + 1);
    const uint64_t want = b - a;
    if (b <= a || tv->dim0 != want)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: document %" PRIu64 ": %u tokens, the prefix sums say %" PRIu64
                           " - %" PRIu64,
                           dlc_store_path(t->s), doc, tv->dim0, b, a);
    const uint32_t last = t->info.dtype == DLC_DTYPE_UINT16
                              ? (uint32_t)tv->data[tv->size - 2] | (uint32_t)tv->data[tv->size - 1]
                                                                       << 8
                              : dlc__ld32(tv->data + tv->size - 4);
    if (last != t->info.eos_id)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: document %" PRIu64 ": ends with %u, not the end-of-document id %u",
                           dlc_store_path(t->s), doc, last, t->info.eos_id);
    *out = *tv;
    return DLC_OK;
}

dlc_status dlc_tokens_doc(const dlc_tokens *t, dlc_store_reader *r, uint64_t doc, const void **data,
                          uint64_t *n)
{
    if (!data || !n)
        return dlc__errorf(DLC_EINVAL, "dlc_tokens_doc: NULL argument");
    dlc_value v;
    const dlc_status rc = dlc__tokens_doc_value(t, r, doc, &v);
    if (rc != DLC_OK)
        return rc;
    *data = v.data;
    *n = v.dim0;
    return DLC_OK;
}

dlc_status dlc_tokens_verify(const dlc_tokens *t, const dlc_store *s)
{
    if (!t || !s || s != t->s)
        return dlc__errorf(DLC_EINVAL, "dlc_tokens_verify: NULL argument or another store");
    const char *path = dlc_store_path(s);
    for (uint32_t k = 0; k < t->nshards; k++) {
        const dlc_status rc = dlc_tokens_verify(t->shard[k], dlc__set_shard_at(s, k));
        if (rc != DLC_OK)
            return rc;
    }
    if (t->nshards)
        return DLC_OK;
    const uint64_t n = t->info.num_docs;
    if (XXH3_64bits(t->offsets, (n + 1) * 8) != t->info.offsets_digest)
        return dlc__errorf(DLC_ECORRUPT, "%s: token offsets: checksum mismatch", path);
    uint64_t longest = 0;
    for (uint64_t d = 0; d < n; d++) {
        if (t->offsets[d + 1] <= t->offsets[d])
            return dlc__errorf(DLC_ECORRUPT,
                               "%s: token offsets: document %" PRIu64 " starts at %" PRIu64
                               " and ends at %" PRIu64,
                               path, d, t->offsets[d], t->offsets[d + 1]);
        const uint64_t len = t->offsets[d + 1] - t->offsets[d];
        longest = len > longest ? len : longest;
    }
    if (n && longest != t->info.max_doc_tokens)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: token metadata says the longest document has %" PRIu64
                           " tokens, the offsets %" PRIu64,
                           path, t->info.max_doc_tokens, longest);
    dlc_store_reader *r = NULL;
    dlc_status rc = dlc_store_reader_open(s, &r);
    for (uint64_t d = 0; rc == DLC_OK && d < n; d++) {
        const void *data;
        uint64_t len;
        rc = dlc_tokens_doc(t, r, d, &data, &len);
    }
    dlc_store_reader_close(r);
    return rc;
}

/* ---- Writing ----------------------------------------------------------------------------------
 */

struct dlc_token_writer {
    dlc_writer *w;
    dlc_record_builder *b;
    dlc_tokens_info info;
    uint64_t *offsets; /* count + 1 entries used. */
    size_t offsets_cap;
    uint8_t *buf; /* One document in the stored element type. */
    size_t buf_cap;
};

void dlc_token_writer_config_init_sized(dlc_token_writer_config *c, size_t size)
{
    if (!c || size < sizeof(uint32_t))
        return;
    const size_t n = size < sizeof *c ? size : sizeof *c;
    memset(c, 0, n);
    c->struct_size = (uint32_t)n;
}

dlc_status dlc_token_writer_open(const char *path, const dlc_token_writer_config *config,
                                 dlc_token_writer **out)
{
    if (out)
        *out = NULL;
    if (!path || !config || !out)
        return dlc__errorf(DLC_EINVAL, "dlc_token_writer_open: NULL argument");
    if (config->struct_size != sizeof *config)
        return dlc__errorf(DLC_EINVAL,
                           "dlc_token_writer_open: struct_size %u is not %zu: fill the options "
                           "with dlc_token_writer_config_init()",
                           config->struct_size, sizeof *config);
    uint32_t dtype = config->dtype;
    if (dtype == 0)
        dtype = config->vocab_size >= 1 && config->vocab_size <= 65536 ? DLC_DTYPE_UINT16
                                                                       : DLC_DTYPE_INT32;
    if (dtype != DLC_DTYPE_UINT16 && dtype != DLC_DTYPE_INT32)
        return dlc__errorf(DLC_EINVAL, "%s: tokens are uint16 or int32, not %s", path,
                           dlc_dtype_name(dtype));
    const uint64_t limit = dtype == DLC_DTYPE_UINT16 ? 65536u : (1ull << 31);
    if (config->vocab_size > limit)
        return dlc__errorf(DLC_EINVAL, "%s: a vocabulary of %u ids does not fit %s", path,
                           config->vocab_size, dlc_dtype_name(dtype));
    if (config->eos_id >= limit || (config->vocab_size && config->eos_id >= config->vocab_size))
        return dlc__errorf(DLC_EINVAL,
                           "%s: end-of-document id %u is out of range (vocabulary %u, %s)", path,
                           config->eos_id, config->vocab_size, dlc_dtype_name(dtype));
    const char *name = config->tokenizer ? config->tokenizer : DLC_TOKENS_PRETOKENIZED;
    if (strlen(name) == 0 || strlen(name) > DLC_TOKENS_NAME_MAX - 1)
        return dlc__errorf(DLC_EINVAL, "%s: tokenizer name '%.60s': 1 to %u bytes", path, name,
                           DLC_TOKENS_NAME_MAX - 1);
    dlc_token_writer *t = calloc(1, sizeof *t);
    if (!t)
        return dlc__errorf(-ENOMEM, "%s: out of memory", path);
    t->info.dtype = dtype;
    t->info.vocab_size = config->vocab_size;
    t->info.eos_id = config->eos_id;
    t->info.tokenizer_digest = config->tokenizer_digest;
    memcpy(t->info.tokenizer, name, strlen(name));
    const dlc_field_spec spec = {.name = DLC_TOKENS_FIELD,
                                 .kind = DLC_FIELD_NDARRAY,
                                 .dtype = dtype,
                                 .flags = DLC_FIELD_VARIABLE,
                                 .ndim = 1};
    dlc_writer_config wc;
    dlc_writer_config_init(&wc);
    wc.fields = &spec;
    wc.num_fields = 1;
    wc.force = config->force;
    wc.build_json = config->build_json;
    wc.source_digest = config->source_digest;
    dlc_status rc = dlc_writer_open(path, &wc, &t->w);
    if (rc == DLC_OK && config->parts)
        rc = dlc__writer_set_part(t->w, config->part, config->parts, config->set_id,
                                  config->first_item, config->end_item);
    if (rc == DLC_OK)
        rc = dlc_record_builder_create(t->w, &t->b);
    t->offsets_cap = 1024;
    t->offsets = malloc(t->offsets_cap * sizeof *t->offsets);
    if (rc == DLC_OK && !t->offsets)
        rc = dlc__errorf(-ENOMEM, "%s: out of memory", path);
    if (rc != DLC_OK) {
        dlc_token_writer_abort(t);
        return rc;
    }
    t->offsets[0] = 0;
    *out = t;
    return DLC_OK;
}

dlc_status dlc_token_writer_add(dlc_token_writer *t, const uint32_t *ids, uint64_t n)
{
    if (!t || (!ids && n))
        return dlc__errorf(DLC_EINVAL, "dlc_token_writer_add: NULL argument");
    const uint64_t doc = t->info.num_docs;
    if (n == 0) {
        dlc_writer_add_skipped(t->w, 1);
        return DLC_OK;
    }
    const uint64_t total = n + (ids[n - 1] != t->info.eos_id);
    const size_t esize = dlc_dtype_size(t->info.dtype);
    if (total > DLC__TOKENS_DOC_MAX(esize) + 1)
        return dlc__errorf(DLC_EINVAL, "document %" PRIu64 ": %" PRIu64 " tokens, at most %zu", doc,
                           n, (size_t)DLC__TOKENS_DOC_MAX(esize));
    if (total * esize > t->buf_cap) {
        const size_t cap = (size_t)(total * esize) * 2;
        uint8_t *grown = realloc(t->buf, cap);
        if (!grown)
            return dlc__errorf(-ENOMEM, "document %" PRIu64 ": out of memory", doc);
        t->buf = grown;
        t->buf_cap = cap;
    }
    const uint64_t limit = t->info.vocab_size                  ? t->info.vocab_size
                           : t->info.dtype == DLC_DTYPE_UINT16 ? 65536u
                                                               : (1ull << 31);
    for (uint64_t i = 0; i < total; i++) {
        const uint32_t id = i < n ? ids[i] : t->info.eos_id;
        if (id >= limit)
            return dlc__errorf(
                DLC_EINVAL,
                "document %" PRIu64 ": token %" PRIu64 " is id %u, not below %" PRIu64 "%s", doc, i,
                id, limit, t->info.vocab_size ? " (the vocabulary)" : " (the element type)");
        if (t->info.dtype == DLC_DTYPE_UINT16) {
            t->buf[2 * i] = (uint8_t)id;
            t->buf[2 * i + 1] = (uint8_t)(id >> 8);
        } else {
            dlc__st32(t->buf + 4 * i, id);
        }
    }
    if (doc + 2 > t->offsets_cap) {
        uint64_t *grown = realloc(t->offsets, t->offsets_cap * 2 * sizeof *grown);
        if (!grown)
            return dlc__errorf(-ENOMEM, "document %" PRIu64 ": out of memory", doc);
        t->offsets = grown;
        t->offsets_cap *= 2;
    }
    dlc_status rc = dlc_record_set_array(t->b, 0, t->buf, (size_t)(total * esize), (uint32_t)total);
    if (rc == DLC_OK)
        rc = dlc_record_seal(t->b);
    if (rc == DLC_OK)
        rc = dlc_writer_append(t->w, t->b);
    if (rc != DLC_OK) {
        dlc_record_builder_reset(t->b);
        return rc;
    }
    t->offsets[doc + 1] = t->offsets[doc] + total;
    t->info.num_docs = doc + 1;
    t->info.num_tokens += total;
    if (total > t->info.max_doc_tokens)
        t->info.max_doc_tokens = total;
    return DLC_OK;
}

uint64_t dlc_token_writer_count(const dlc_token_writer *t)
{
    return t ? t->info.num_docs : 0;
}

uint64_t dlc_token_writer_tokens(const dlc_token_writer *t)
{
    return t ? t->info.num_tokens : 0;
}

dlc_status dlc_token_writer_finish(dlc_token_writer *t)
{
    if (!t)
        return dlc__errorf(DLC_EINVAL, "dlc_token_writer_finish: NULL writer");
    dlc_status rc = DLC_OK;
    const uint64_t n = t->info.num_docs;
    /* The table as stored: little-endian u64, which is the machine's on every host LMDB's pages
     * are read on (the file is not portable to a big-endian host, a property of LMDB). */
    for (uint64_t d = 0; d <= n; d++)
        dlc__st64((uint8_t *)&t->offsets[d], t->offsets[d]);
    t->info.offsets_digest = XXH3_64bits(t->offsets, (n + 1) * 8);
    uint8_t block[TOKENS_BLOCK];
    block_store(block, &t->info);
    rc = dlc_writer_put_meta(t->w, DLC_TOKENS_META, block, sizeof block);
    if (rc == DLC_OK)
        rc = dlc_writer_put_meta(t->w, DLC_TOKENS_META_OFFSETS, t->offsets, (n + 1) * 8);
    dlc_record_builder_destroy(t->b);
    t->b = NULL;
    if (rc == DLC_OK) {
        rc = dlc_writer_finish(t->w);
        t->w = NULL;
    }
    dlc_token_writer_abort(t);
    return rc;
}

void dlc_token_writer_abort(dlc_token_writer *t)
{
    if (!t)
        return;
    dlc_record_builder_destroy(t->b);
    dlc_writer_abort(t->w);
    free(t->offsets);
    free(t->buf);
    free(t);
}
