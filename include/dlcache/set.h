/**
 * @file set.h
 * @brief Join the parts of a store set into a set: write its index, last.
 *
 * A store set (docs/FORMAT.md, "Store sets") is a directory DIR of N ordinary version 2 stores,
 * DIR/part-00000-of-0000N.dlc ... (the shards, each built on its own, maybe on other machines,
 * each carrying its place in the set in its "set_part" metadata) and the index
 * DIR/index.dlcset. The index is what makes DIR a set: dlc_store_open() of DIR (and so the
 * loader, every tool and the Python package) presents the shards as one store whose records are
 * numbered globally in part order, the records of a single store built from the same items.
 *
 * The builder writes the parts (dlc_build() with ::dlc_build_options.parts, build.h);
 * dlc_set_join() checks that they make a whole set and writes the index. Run it once every part
 * is built; running it again writes nothing new (the index is a pure function of the parts, byte
 * for byte). It is the one join: dlc_build() of every part at once runs it itself. It is built
 * into the library with the builder, whose way of replacing a set (retired parts, see
 * dlc_build()) it completes.
 *
 * Thread safety: dlc_set_join() shares nothing; two joins of one directory at once leave one of
 * their (equal) indexes.
 */
#ifndef DLCACHE_SET_H
#define DLCACHE_SET_H

#include <dlcache/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** What dlc_set_join() found and wrote. */
typedef struct dlc_set_join_report {
    uint32_t num_shards;  /**< N: the parts joined. */
    uint64_t count;       /**< Records of the set. */
    uint64_t file_bytes;  /**< The parts' bytes, summed. */
    uint64_t set_id;      /**< The build's identity, the same in every part. */
    uint32_t temp_files;  /**< Files named NAME.tmp-PID that were not taken as parts: parts still
                               being written, or left by a crash. */
    int unchanged;        /**< 1: index.dlcset already held exactly these bytes and was left as it
                               was (a repeated join); 0: it was written. */
    uint64_t reserved[8]; /**< Zero; fields added in later 1.x versions take these words, so
                               the struct keeps its size (status.h, "How structs grow"). */
} dlc_set_join_report;

/**
 * @brief Check the parts in @p dir and write @p dir/index.dlcset.
 *
 * Scans @p dir for part-IIIII-of-NNNNN.dlc files (names containing ".tmp-" are files being
 * written, never parts; other files are left alone), and refuses: no part at all; parts of
 * different N; a part number at or past its N; two files for one part; a missing part (all are
 * named); a part whose name is not the one the writer gives it. Then opens every part, one at a
 * time, with every check of dlc_store_open() (a damaged part is refused with the reason), and
 * refuses: a store that is not a part ("set_part" metadata missing); a part that says it is
 * another part than its name does (a copy, renamed); a part built from other sources, options or
 * N than the others (its set_id differs from the one most parts share: it is named, with both
 * ids); parts whose source items do not follow each other; parts whose labels or schemas
 * disagree. The set's schema is the union of the parts' (fixed where every part with records
 * has one fixed shape, else VARIABLE with the largest sizes: the schema one store of all the
 * records would have). Finally writes the index to a temporary file, syncs it, renames it into
 * place and syncs @p dir, unless the index there already holds the same bytes.
 *
 * Around the checks, for a set that dlc_build() replaced with force: before them, a part missing
 * under its own name whose retired copy (retired-NAME) belongs to the same set as the parts
 * present (the same set_id) is taken back (a hard link), so that one part of a joined set
 * rebuilt alone, which retires the whole set, joins again with the other parts as they were.
 * After a successful join, the files the new index made garbage are removed: part files it does
 * not name (of another N) and the retired parts of the set it replaced; that clean-up never
 * changes the result.
 *
 * @param[in] dir The set's directory; not retained.
 * @param[out] report What was joined (may be NULL); filled on success.
 * @return DLC_OK; -ENOENT (missing parts, named; or no such directory); DLC_EINVAL (no parts,
 *         parts of different N, duplicates, a misnamed, foreign or non-part store, items, labels
 *         or schemas that disagree); DLC_ECORRUPT or DLC_EVERSION (a damaged part, named);
 *         -ENOSPC or -errno writing the index. dlc_errmsg() names @p dir, the part and the
 *         reason. A refused join writes no index.
 */
DLC_API dlc_status dlc_set_join(const char *dir, dlc_set_join_report *report);

#ifdef __cplusplus
}
#endif
#endif /* DLCACHE_SET_H */
