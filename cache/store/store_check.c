/* Structural checks of an LMDB file before LMDB is allowed to walk it.
 *
 * LMDB trusts its file: a node offset, key size or page number taken from a
 * damaged page sends it outside the page or the map, and the process dies.
 * A store is untrusted input (a half-copied download, a bad disk, a fuzzer),
 * so dlc_store_open() checks here, with bounds on every access, every page
 * that LMDB reads on the way to a record: the two meta pages, and every
 * branch and leaf page of the main, "meta" and "samples" databases. Record
 * payloads (overflow pages) are not read; their extents are checked against
 * the file instead, and their bytes against their checksums by verify.
 *
 * A version 2 store's records are found through its offset table, never
 * through LMDB: only dlc_store_verify() walks its samples database (with a
 * cursor, to check the table against it). Its pages are therefore walked
 * there, before that cursor, and not at open, where they would cost one page
 * read per few records (the whole file for a store of short documents: 0.7 s
 * for 10^7 records of 1-3 tokens). Open checks its database record only.
 *
 * The layout below is LMDB 0.9's (mdb.c), which has been stable since 2011:
 * a page starts with a 16-byte header {pgno u64, pad u16, flags u16,
 * lower u16, upper u16 | overflow page count u32}, then an array of u16 node
 * offsets; a node is {lo u16, hi u16, flags u16, ksize u16, key, data}. */
#include "common.h"
#include "store_format.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define P_BRANCH 0x01u
#define P_LEAF 0x02u
#define P_OVERFLOW 0x04u
#define P_META 0x08u
#define P_DIRTY 0x10u
#define P_LOOSE 0x4000u
#define P_KEEP 0x8000u
#define F_BIGDATA 0x01u
#define F_SUBDATA 0x02u
#define MDB_MAGIC 0xBEEFC0DEu
#define MDB_DATA_VERSION 1u
#define NODESIZE 8u
#define MDB_DB_SIZE 48u  /* sizeof(MDB_db) on 64-bit. */
#define CURSOR_STACK 32u /* LMDB's deepest tree. */
#define P_INVALID UINT64_MAX

/* Offsets inside a meta page (page header, then MDB_meta). */
#define META_MAGIC 16u
#define META_VERSION 20u
#define META_FREE_DB 40u /* mm_dbs[0]; its md_pad holds the page size. */
#define META_MAIN_DB 88u /* mm_dbs[1]. */
#define META_LAST_PG 136u
#define META_TXNID 144u
#define META_END 152u

static void load_db(const uint8_t *p, dlc__lmdb_db *db)
{
    /* MDB_db: pad u32, flags u16, depth u16, branch, leaf, overflow pages,
     * entries, root (u64 each). */
    db->flags = dlc__ld16(p + 4);
    db->depth = dlc__ld16(p + 6);
    db->entries = dlc__ld64(p + 32);
    db->root = dlc__ld64(p + 40);
}

dlc_status dlc__lmdb_read_layout(const char *path, int fd, uint64_t file_size,
                                 dlc__lmdb_layout *out)
{
    uint8_t m[2][META_END];
    uint64_t psize = 0;
    for (int i = 0; i < 2; i++) {
        const uint64_t off = i == 0 ? 0 : psize;
        if (off + META_END > file_size)
            return i == 0 ? dlc__errorf(DLC_EVERSION,
                                        "%s: not a dlcache store (%" PRIu64
                                        " bytes, too small for an LMDB file)",
                                        path, file_size)
                          : dlc__errorf(DLC_ECORRUPT,
                                        "%s: truncated: file has %" PRIu64
                                        " bytes, LMDB needs at least %" PRIu64,
                                        path, file_size, 2 * psize);
        const ssize_t n = pread(fd, m[i], META_END, (off_t)off);
        if (n < 0)
            return dlc__errorf(-errno, "%s: read: %s", path, strerror(errno));
        if ((size_t)n != META_END)
            return dlc__errorf(DLC_ECORRUPT, "%s: short read of LMDB meta page %d", path, i);
        if (dlc__ld32(m[i] + META_MAGIC) != MDB_MAGIC || !(dlc__ld16(m[i] + 10) & P_META))
            return dlc__errorf(i == 0 ? DLC_EVERSION : DLC_ECORRUPT,
                               "%s: %s (LMDB meta page %d has no LMDB magic)", path,
                               i == 0 ? "not a dlcache store" : "corrupt", i);
        if (dlc__ld32(m[i] + META_VERSION) != MDB_DATA_VERSION)
            return dlc__errorf(DLC_EVERSION, "%s: LMDB data format %u, this library reads %u", path,
                               dlc__ld32(m[i] + META_VERSION), MDB_DATA_VERSION);
        if (i == 0) {
            psize = dlc__ld32(m[0] + META_FREE_DB);
            if (psize < 512 || psize > 65536 || (psize & (psize - 1)) != 0)
                return dlc__errorf(DLC_ECORRUPT, "%s: LMDB page size %" PRIu64 " is impossible",
                                   path, psize);
        } else if (dlc__ld32(m[1] + META_FREE_DB) != psize) {
            /* LMDB sizes its map and finds meta page 1 with the page size of
             * the newer meta page, not of page 0: a disagreement would send
             * it past the end of the file (SIGBUS; found by fuzz_store). */
            return dlc__errorf(DLC_ECORRUPT,
                               "%s: corrupt: LMDB meta pages disagree on the page "
                               "size (%" PRIu64 " and %u)",
                               path, psize, dlc__ld32(m[1] + META_FREE_DB));
        }
    }
    /* Like LMDB, use the meta page of the newer transaction. */
    const int cur = dlc__ld64(m[1] + META_TXNID) > dlc__ld64(m[0] + META_TXNID) ? 1 : 0;
    const uint8_t *meta = m[cur];
    out->psize = psize;
    out->last_pg = dlc__ld64(meta + META_LAST_PG);
    out->txnid = dlc__ld64(meta + META_TXNID);
    load_db(meta + META_MAIN_DB, &out->main_db);
    if (out->last_pg < 1 || out->last_pg > UINT64_MAX / psize - 1)
        return dlc__errorf(DLC_ECORRUPT, "%s: LMDB's last page %" PRIu64 " is impossible", path,
                           out->last_pg);
    const uint64_t need = (out->last_pg + 1) * psize;
    if (file_size < need)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: truncated: file has %" PRIu64 " bytes, LMDB needs %" PRIu64, path,
                           file_size, need);
    return DLC_OK;
}

typedef struct walk {
    const char *path;
    const char *db; /* Name of the database being walked, for messages. */
    const uint8_t *map;
    uint64_t file_size;
    uint64_t psize;
    uint64_t last_pg;
    uint8_t *seen;      /* One bit per page: no page is part of two trees or twice of one. */
    uint64_t leaves;    /* Leaf entries found. */
    uint64_t max_value; /* Largest value found. */
    int leaf_depth;     /* Depth of the first leaf; every leaf must be at it. */
    int is_main;        /* Leaves of the main database name the other databases. */
    dlc__lmdb_db *meta_db;
    dlc__lmdb_db *samples_db;
    dlc__lmdb_entry *entries; /* Filled while walking "meta". */
    size_t entry_cap;
    size_t num_entries;
} walk;

static dlc_status bad_page(const walk *w, uint64_t pgno, const char *why)
{
    return dlc__errorf(DLC_ECORRUPT, "%s: corrupt: %s database, page %" PRIu64 ": %s", w->path,
                       w->db, pgno, why);
}

static dlc_status walk_page(walk *w, uint64_t pgno, int depth)
{
    if (depth > (int)CURSOR_STACK)
        return bad_page(w, pgno, "tree deeper than LMDB allows");
    if (pgno < 2 || pgno > w->last_pg)
        return bad_page(w, pgno, "page number outside the file");
    if (w->seen[pgno / 8] & (1u << (pgno % 8)))
        return bad_page(w, pgno, "page reached twice");
    w->seen[pgno / 8] |= (uint8_t)(1u << (pgno % 8));

    const uint8_t *p = w->map + pgno * w->psize;
    const uint64_t ps = w->psize;
    const uint16_t flags = dlc__ld16(p + 10) & (uint16_t) ~(P_DIRTY | P_LOOSE | P_KEEP);
    const uint16_t lower = dlc__ld16(p + 12);
    const uint16_t upper = dlc__ld16(p + 14);
    if (dlc__ld64(p) != pgno)
        return bad_page(w, pgno, "page number in the header disagrees");
    if (flags != P_BRANCH && flags != P_LEAF)
        return bad_page(w, pgno, "neither a branch nor a leaf page");
    if (lower < DLC__LMDB_PAGEHDRSZ || lower > upper || upper > ps || (lower & 1u))
        return bad_page(w, pgno, "node table outside the page");
    const unsigned n = (lower - DLC__LMDB_PAGEHDRSZ) / 2u;
    if (flags == P_BRANCH && n == 0)
        return bad_page(w, pgno, "empty branch page");
    if (flags == P_LEAF) {
        if (w->leaf_depth == 0)
            w->leaf_depth = depth;
        else if (w->leaf_depth != depth)
            return bad_page(w, pgno, "leaves at different depths");
    }

    for (unsigned i = 0; i < n; i++) {
        const uint64_t off = dlc__ld16(p + DLC__LMDB_PAGEHDRSZ + 2 * i);
        if (off < upper || (off & 1u) || off + NODESIZE > ps)
            return bad_page(w, pgno, "node outside the page");
        const uint8_t *node = p + off;
        const uint64_t lo = dlc__ld16(node), hi = dlc__ld16(node + 2);
        const uint16_t nflags = dlc__ld16(node + 4);
        const uint64_t ksize = dlc__ld16(node + 6);
        if (off + NODESIZE + ksize > ps)
            return bad_page(w, pgno, "key outside the page");
        if (flags == P_BRANCH) {
            const uint64_t child = lo | hi << 16 | (uint64_t)nflags << 32;
            const dlc_status rc = walk_page(w, child, depth + 1);
            if (rc < 0)
                return rc;
            continue;
        }
        const uint64_t dsize = lo | hi << 16;
        const uint64_t data_off = off + NODESIZE + ksize;
        uint64_t val_file_off = pgno * ps + data_off;
        w->leaves++;
        if (dsize > w->max_value)
            w->max_value = dsize;
        if (nflags == F_BIGDATA) {
            if (data_off + 8 > ps)
                return bad_page(w, pgno, "overflow page number outside the page");
            const uint64_t ov = dlc__ld64(p + data_off);
            /* ov <= last_pg keeps ov * ps + 16 inside the file: no underflow. */
            if (ov < 2 || ov > w->last_pg || dsize > w->file_size - ov * ps - DLC__LMDB_PAGEHDRSZ)
                return bad_page(w, pgno, "value outside the file");
            val_file_off = ov * ps + DLC__LMDB_PAGEHDRSZ;
        } else if (nflags == F_SUBDATA && w->is_main) {
            if (dsize != MDB_DB_SIZE || data_off + MDB_DB_SIZE > ps)
                return bad_page(w, pgno, "bad database record");
            dlc__lmdb_db db;
            load_db(p + data_off, &db);
            const uint8_t *key = node + NODESIZE;
            if (ksize == strlen(DLC__DB_META) && !memcmp(key, DLC__DB_META, ksize))
                *w->meta_db = db;
            else if (ksize == strlen(DLC__DB_SAMPLES) && !memcmp(key, DLC__DB_SAMPLES, ksize))
                *w->samples_db = db;
        } else if (nflags == 0) {
            if (data_off + dsize > ps)
                return bad_page(w, pgno, "value outside the page");
        } else {
            return bad_page(w, pgno, "node flags a dlcache store never has");
        }
        if (w->entries) {
            if (w->num_entries >= w->entry_cap)
                return bad_page(w, pgno, "more keys than a dlcache store has");
            w->entries[w->num_entries++] = (dlc__lmdb_entry){
                .key_off = pgno * ps + off + NODESIZE,
                .key_len = ksize,
                .val_off = val_file_off,
                .val_len = dsize,
            };
        }
    }
    return DLC_OK;
}

/* A database's record in the main database, before its pages are walked or trusted: empty with
 * nothing claimed, or without flags. *empty says which. */
static dlc_status check_db_head(const walk *w, const char *name, const dlc__lmdb_db *db, int *empty)
{
    *empty = db->root == P_INVALID;
    if (*empty && (db->entries != 0 || db->depth != 0))
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: corrupt: %s database is empty but claims %" PRIu64 " entries",
                           w->path, name, db->entries);
    if (!*empty && db->flags != 0)
        return dlc__errorf(DLC_ECORRUPT, "%s: corrupt: %s database has flags 0x%x", w->path, name,
                           db->flags);
    return DLC_OK;
}

static dlc_status walk_db(walk *w, const char *name, const dlc__lmdb_db *db)
{
    w->db = name;
    w->leaves = 0;
    w->max_value = 0;
    w->leaf_depth = 0;
    int empty;
    dlc_status rc = check_db_head(w, name, db, &empty);
    if (rc < 0 || empty)
        return rc;
    rc = walk_page(w, db->root, 1);
    if (rc < 0)
        return rc;
    if (w->leaves != db->entries || w->leaf_depth != db->depth)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: corrupt: %s database has %" PRIu64
                           " entries in %d levels, its record says %" PRIu64 " in %u",
                           w->path, name, w->leaves, w->leaf_depth, db->entries, db->depth);
    return DLC_OK;
}

/* The samples database's record in the main database, when its pages are not walked: enough that
 * LMDB, should anything ask it for that tree, starts inside the file. */
static dlc_status check_db_record(const walk *w, const char *name, const dlc__lmdb_db *db)
{
    int empty;
    const dlc_status rc = check_db_head(w, name, db, &empty);
    if (rc < 0 || empty)
        return rc;
    if (db->root < 2 || db->root > w->last_pg || db->depth == 0 || db->depth > CURSOR_STACK ||
        db->entries == 0)
        return dlc__errorf(DLC_ECORRUPT,
                           "%s: corrupt: %s database with root page %" PRIu64 " of %" PRIu64
                           ", %u levels and %" PRIu64 " entries",
                           w->path, name, db->root, w->last_pg, db->depth, db->entries);
    return DLC_OK;
}

dlc_status dlc__lmdb_check_trees(const char *path, const uint8_t *map, uint64_t file_size,
                                 const dlc__lmdb_layout *layout, dlc__lmdb_db *meta_db,
                                 dlc__lmdb_db *samples_db, dlc__lmdb_entry *meta_entries,
                                 size_t meta_cap, size_t *num_meta, int walk_samples)
{
    dlc_status rc = DLC_OK;
    /* flags 0xffff marks "not found": no real database has every flag set. */
    const dlc__lmdb_db none = {.flags = 0xffff, .root = P_INVALID};
    *meta_db = none;
    *samples_db = none;
    walk w = {
        .path = path,
        .map = map,
        .file_size = file_size,
        .psize = layout->psize,
        .last_pg = layout->last_pg,
        .meta_db = meta_db,
        .samples_db = samples_db,
        .is_main = 1,
    };
    /* Transient: one bit per page, 32 MiB for a 1 TiB store of 4 KiB pages. */
    w.seen = calloc(layout->last_pg / 8 + 1, 1);
    FAIL_IF(!w.seen, -ENOMEM, "%s: out of memory", path);
    CHECK(walk_db(&w, "main", &layout->main_db));
    FAIL_IF(meta_db->flags == 0xffff || samples_db->flags == 0xffff, DLC_EVERSION,
            "%s: not a dlcache store (an LMDB file without \"%s\" and \"%s\" databases)", path,
            DLC__DB_META, DLC__DB_SAMPLES);
    w.is_main = 0;
    w.entries = meta_entries;
    w.entry_cap = meta_cap;
    CHECK(walk_db(&w, DLC__DB_META, meta_db));
    *num_meta = w.num_entries;
    w.entries = NULL;
    if (walk_samples) {
        CHECK(walk_db(&w, DLC__DB_SAMPLES, samples_db));
        samples_db->max_value = w.max_value;
    } else {
        CHECK(check_db_record(&w, DLC__DB_SAMPLES, samples_db));
        samples_db->max_value = 0; /* Unknown: no leaf was read. */
    }

fail:
    free(w.seen);
    return rc;
}
