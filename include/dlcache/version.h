/**
 * @file version.h
 * @brief The library's version: the one place it is written.
 *
 * CMake (the project version, the soname, the pkg-config file), the Python
 * package's check of the library it loads and dlc_version() all read these
 * three macros; nothing else names a version number. A program checks at
 * compile time with ::DLC_VERSION_NUMBER and at run time with
 * dlc_version_number(), which gives the number of the library it runs with:
 *
 *     if (dlc_version_number() / 10000 != DLC_VERSION_MAJOR) ... not the ABI I was built for
 *
 * The major version is the soname's number: it moves, and only it moves, when
 * the ABI changes incompatibly (CHANGELOG.md, tests/abi/README.md).
 */
#ifndef DLCACHE_VERSION_H
#define DLCACHE_VERSION_H

/** Major version: incompatible ABI changes (the soname, libdlcache.so.MAJOR). */
#define DLC_VERSION_MAJOR 1
/** Minor version: functions or struct fields added, compatibly. */
#define DLC_VERSION_MINOR 0
/** Patch version: fixes only. */
#define DLC_VERSION_PATCH 0

/** One number for comparisons: MAJOR * 10000 + MINOR * 100 + PATCH (1.0.0 is 10000). */
#define DLC_VERSION_NUMBER (DLC_VERSION_MAJOR * 10000 + DLC_VERSION_MINOR * 100 + DLC_VERSION_PATCH)

#endif /* DLCACHE_VERSION_H */
