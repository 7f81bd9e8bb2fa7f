#!/usr/bin/env bash
# The tree's C sources and headers, and the CUDA plugin's .cu, are exactly as the root
# .clang-format lays them out. The version is pinned: clang-format's output changes between releases, so the check runs Debian
# 12's clang-format-14 (the package of that name) and no other. `make test` runs this;
# `tests/check_format.sh --fix` rewrites the files in place.
set -euo pipefail
cd "$(dirname "$0")/.."
CF=${CLANG_FORMAT:-clang-format-14}
command -v "$CF" >/dev/null || { echo "check_format: $CF is not installed (apt-get install clang-format-14)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' 2>/dev/null || find . \( -name '*.[ch]' -o -name '*.cu' \) -not -path './build*')
if [ "${1:-}" = --fix ]; then
    "$CF" -i "${files[@]}"
    exit 0
fi
# One run over every file: each start of clang-format loads LLVM (about 0.1 s), so a run per
# file took 30-40 s of a CI run where one run takes 3-4 s. Its diagnostics name each file that
# differs ("FILE:LINE:COL: error: code should be clang-formatted"); any other failure (a file
# it cannot read) fails the check with its own words.
out=$("$CF" --dry-run -Werror "${files[@]}" 2>&1 >/dev/null) && rc=0 || rc=$?
mapfile -t bad < <(printf '%s\n' "$out" |
    sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
if [ "$rc" != 0 ] && [ ${#bad[@]} = 0 ]; then
    printf 'check_format: %s failed:\n%s\n' "$CF" "$out" >&2
    exit 1
fi
if [ ${#bad[@]} -gt 0 ]; then
    echo "check_format: ${#bad[@]} file(s) differ from $CF's layout (fix: tests/check_format.sh --fix):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
fi
echo "check_format: ${#files[@]} files match $("$CF" --version | sed 's/.*version //')"
