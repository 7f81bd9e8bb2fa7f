#!/usr/bin/env bash
# The public headers, include/dlcache/*.h, are the contract (CONTRIBUTING.md): every function
# says what it returns and how failure shows, every parameter, field, macro and enum value is
# documented. Doxygen checks it mechanically with docs/Doxyfile, which turns on every
# "undocumented" warning; this script prints the warnings and fails if there is one. `make test`
# runs it; it needs Debian's doxygen package (apt-get install doxygen).
set -euo pipefail
cd "$(dirname "$0")/.."
DOXYGEN=${DOXYGEN:-doxygen}
command -v "$DOXYGEN" >/dev/null || {
    echo "check_docs: $DOXYGEN is not installed (apt-get install doxygen)" >&2
    exit 1
}
# Doxygen must write some output to read the comments (docs/Doxyfile says why): send it to a
# temporary directory, removed on exit, by appending OUTPUT_DIRECTORY to the configuration
# (`doxygen -` reads it from standard input; a later setting overrides an earlier one).
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
log=$out/warnings.log
rc=0
{ cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $out/doxygen"; } | "$DOXYGEN" - >"$log" 2>&1 || rc=$?
# FAIL_ON_WARNINGS makes the exit status non-zero on a warning (and prints each as "error:");
# count them from the log too, so that a warning is caught whatever the exit status.
n=$(grep -cE ': (warning|error): ' "$log" || true)
if [ "$rc" -ne 0 ] || [ "$n" -gt 0 ]; then
    sed "s|^$PWD/||" "$log" >&2
    echo "check_docs: $n doxygen warning(s) in include/dlcache (doxygen exit status $rc)" >&2
    exit 1
fi
echo "check_docs: include/dlcache/*.h fully documented ($("$DOXYGEN" --version | cut -d' ' -f1))"
