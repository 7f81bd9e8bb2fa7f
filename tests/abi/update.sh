#!/usr/bin/env bash
# Freeze the ABI of the version in include/dlcache/version.h: the one command that writes every
# ABI baseline, from the tree and its build (tests/abi/README.md says when to run it):
#   tests/abi/include/dlcache/*.h  the public headers as this version has them, which the old
#                                  caller (tests/abi/old_caller.c) is compiled against;
#   common/abi_sizes.h             the sizeof of every struct that opens with its struct_size, as
#                                  a row for this version (rows of other versions are kept), which
#                                  the library accepts besides its own sizes;
#   tests/abi/libdlcache.abi       abidw's description of the library, which tests/abi/check.sh
#                                  compares the build with (abidiff).
# Usage: bash tests/abi/update.sh [BUILD_DIR]   (default build/, made by `make build`)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
PY=${PY:-/usr/bin/python3}
CF=${CLANG_FORMAT:-clang-format-14}
lib=$BUILD/lib/libdlcache.so
command -v abidw >/dev/null || { echo "update.sh: abidw is missing (apt-get install abigail-tools)" >&2; exit 1; }
cmake --build "$BUILD" --target dlcache -j2 >/dev/null

ver=$(sed -n 's/^#define DLC_VERSION_\(MAJOR\|MINOR\) \([0-9]*\)$/\2/p' include/dlcache/version.h | paste -sd_)
echo "update.sh: freezing version ${ver/_/.}"

# The headers.
rm -rf tests/abi/include
mkdir -p tests/abi/include/dlcache
cp include/dlcache/*.h tests/abi/include/dlcache/

# The sizes: every public struct whose first member is uint32_t struct_size.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mapfile -t structs < <("$PY" - <<'PYEOF'
import glob, re
for h in sorted(glob.glob("include/dlcache/*.h")):
    text = open(h).read()
    for m in re.finditer(r"typedef struct (dlc_\w+) \{\s*(?:/\*\*.*?\*/\s*)?uint32_t struct_size;",
                         text, re.S):
        print(m.group(1))
PYEOF
)
{
    echo '#include <stdio.h>'
    for h in include/dlcache/*.h; do echo "#include <dlcache/$(basename "$h")>"; done
    echo 'int main(void) {'
    for s in "${structs[@]}"; do echo "    printf(\"%s %zu\\n\", \"$s\", sizeof($s));"; done
    echo '    return 0; }'
} >"$tmp/sizes.c"
cc -std=c11 -Iinclude "$tmp/sizes.c" -o "$tmp/sizes"
"$tmp/sizes" >"$tmp/sizes.txt"
"$PY" - "$ver" "$tmp/sizes.txt" <<'PYEOF'
import os, re, sys
ver, sizes = "v" + sys.argv[1], sys.argv[2]
path = "common/abi_sizes.h"
rows = []
if os.path.exists(path):
    rows = [m.groups() for m in re.finditer(r"XX\((\w+), (\w+), (\d+)\)", open(path).read())
            if m.group(2) != ver]
for line in open(sizes):
    name, size = line.split()
    rows.append((name, ver, size))
rows.sort(key=lambda r: (r[0], [int(x) for x in r[1][1:].split("_")]))
body = " \\\n".join("    XX(%s, %s, %s)" % r for r in rows)
open(path, "w").write("""/* Written by tests/abi/update.sh: do not edit. Every size a released dlcache header gave each
 * public struct that opens with its uint32_t struct_size, one row per struct and version
 * (XX(struct, vMAJOR_MINOR, sizeof)), on LP64 Linux. common/options.c accepts these sizes besides
 * the library's own sizeof (include/dlcache/status.h, "How structs grow"). */
#ifndef DLCACHE_ABI_SIZES_H
#define DLCACHE_ABI_SIZES_H

#define DLC__ABI_SIZES(XX) \\
%s

#endif /* DLCACHE_ABI_SIZES_H */
""" % body)
PYEOF
"$CF" -i common/abi_sizes.h

# The library's ABI, as abidw sees it from the public headers' types (paths stripped, so the file
# does not depend on where the tree is).
cmake --build "$BUILD" --target dlcache -j2 >/dev/null
abidw --headers-dir include/dlcache --no-corpus-path --no-comp-dir-path --short-locs \
    --drop-undefined-syms --out-file tests/abi/libdlcache.abi "$lib"
echo "update.sh: wrote tests/abi/include/dlcache/, common/abi_sizes.h, tests/abi/libdlcache.abi"
echo "update.sh: rebuild (make build) and run: bash tests/run_all.sh abi"
