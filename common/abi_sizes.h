/* Written by tests/abi/update.sh: do not edit. Every size a released dlcache header gave each
 * public struct that opens with its uint32_t struct_size, one row per struct and version
 * (XX(struct, vMAJOR_MINOR, sizeof)), on LP64 Linux. common/options.c accepts these sizes besides
 * the library's own sizeof (include/dlcache/status.h, "How structs grow"). */
#ifndef DLCACHE_ABI_SIZES_H
#define DLCACHE_ABI_SIZES_H

#define DLC__ABI_SIZES(XX)                                                                         \
    XX(dlc_build_options, v1_0, 104)                                                               \
    XX(dlc_loader_config, v1_0, 296)                                                               \
    XX(dlc_loader_plan_info, v1_0, 88)                                                             \
    XX(dlc_loader_report, v1_0, 712)                                                               \
    XX(dlc_loader_stream_stats, v1_0, 72)                                                          \
    XX(dlc_mix_options, v1_0, 16)                                                                  \
    XX(dlc_mix_source, v1_0, 32)                                                                   \
    XX(dlc_mix_source_info, v1_0, 72)                                                              \
    XX(dlc_warm_options, v1_0, 88)                                                                 \
    XX(dlc_warm_push_options, v1_0, 32)                                                            \
    XX(dlc_writer_config, v1_0, 64)

#endif /* DLCACHE_ABI_SIZES_H */
