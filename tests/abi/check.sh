#!/usr/bin/env bash
# The ABI check of `make test` (tests/run_all.sh abi): the library built from the tree against the
# baseline of the version it says it is (tests/abi/libdlcache.abi, written by tests/abi/update.sh).
#   - abidiff, with the growth status.h allows (fields added at the end of a struct, functions
#     added) suppressed: any other change (a removed or changed function, a field moved, a type
#     changed) fails, unless the baseline moved with the version;
#   - the baseline's soname must be the library's (libdlcache.so.MAJOR): a new major version needs
#     a new baseline, and a new baseline of an incompatible change needs a new major version.
# Usage: bash tests/abi/check.sh [BUILD_DIR]   (default build/)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
lib=$BUILD/lib/libdlcache.so
base=tests/abi/libdlcache.abi
command -v abidiff >/dev/null || { echo "abi: abidiff is missing (apt-get install abigail-tools)" >&2; exit 1; }
[ -f "$lib" ] || { echo "abi: $lib is missing (make build)" >&2; exit 1; }
so_lib=$(objdump -p "$(readlink -f "$lib")" | awk '$1 == "SONAME" {print $2}')
so_base=$(sed -n "s/.*<abi-corpus [^>]*soname='\([^']*\)'.*/\1/p" "$base" | head -1)
if [ "$so_lib" != "$so_base" ]; then
    echo "abi: the library is $so_lib but $base is the ABI of $so_base: the version and the" >&2
    echo "     baseline move together (include/dlcache/version.h, then bash tests/abi/update.sh)" >&2
    exit 1
fi
rc=0
out=$(abidiff --no-added-syms --suppressions tests/abi/growth.suppr --headers-dir1 \
    tests/abi/include/dlcache --headers-dir2 include/dlcache "$base" "$lib") || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "$out" >&2
    echo "abi: $lib is not compatible with $so_base's baseline (abidiff exit $rc, above)." >&2
    echo "     Only fields added at a struct's end and new functions keep the ABI" >&2
    echo "     (include/dlcache/status.h, \"How structs grow\"). Undo the change, or make it a" >&2
    echo "     new major version: DLC_VERSION_MAJOR in include/dlcache/version.h, a node in" >&2
    echo "     cmake/dlcache.map, then bash tests/abi/update.sh (tests/abi/README.md)." >&2
    exit 1
fi
echo "abi: $so_lib matches tests/abi/libdlcache.abi (growth at the end only)"
