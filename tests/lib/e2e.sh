# The prelude of the end-to-end tests (tests/e2e/*.sh), sourced as
#     . "$(dirname "$0")/../lib/e2e.sh" NAME
# Strict mode; DLC_BIN and DLC_SRC checked (ctest sets them, and DLC_LIB, from
# the build); PY is Debian's Python; $tmp is a fresh directory removed at exit
# (a test that needs more cleanup sets its own EXIT trap and removes $tmp
# there); fail MESSAGE stops the test with its name.
set -euo pipefail
: "${DLC_BIN:?DLC_BIN must name the bin directory of the build}"
: "${DLC_SRC:?DLC_SRC must name the source tree}"
E2E_NAME=${1:?the test sourcing tests/lib/e2e.sh must give its name}
PY=${PY:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "$E2E_NAME: $*" >&2
    exit 1
}
