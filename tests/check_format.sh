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
bad=()
for f in "${files[@]}"; do
    "$CF" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
    echo "check_format: ${#bad[@]} file(s) differ from $CF's layout (fix: tests/check_format.sh --fix):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
fi
echo "check_format: ${#files[@]} files match $("$CF" --version | sed 's/.*version //')"
