/* Private to the store part and the token loader (loader/tokens/): a document of a token store
 * with its whole value, for the loader's verify= (include/dlcache/tokens.h has the public calls,
 * cache/store/store_tokens.c both). */
#ifndef DLCACHE_STORE_TOKENS_H
#define DLCACHE_STORE_TOKENS_H

#include <dlcache/tokens.h>

#include <stdint.h>

/* dlc_tokens_doc() that gives the value of the document's tokens field, as read: its bytes
 * (data, size, dim0 tokens) and its stored checksum (xxh3, for dlc_value_verify()), in one read
 * of the record. The same checks and errors. */
dlc_status dlc__tokens_doc_value(const dlc_tokens *t, dlc_store_reader *r, uint64_t doc,
                                 dlc_value *v);

#endif /* DLCACHE_STORE_TOKENS_H */
