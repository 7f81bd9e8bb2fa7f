#!/usr/bin/env bash
# docs.sh [--check]: build the documentation site into build-docs/html (`make docs`).
#   1. Doxygen writes the public headers' XML (docs/Doxyfile, with XML on) to build-docs/xml;
#   2. Sphinx builds the pages (docs/*.md, MyST), the Python API (autodoc over python/dlcache
#      with the library of build/) and the C API (Breathe over that XML), warnings as errors.
# With --check (`make test`'s "site" step) it then checks the result: every link and image of
# every page that stays inside the site must lead to a file that exists and, for #anchors, to an
# id in it (tools/check_site.py), and every page must render in headless Chromium without a
# console error or an uncaught exception.
# Needs Debian's python3-sphinx, python3-myst-parser, python3-breathe, doxygen (and chromium for
# --check); `make docs` installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-/usr/bin/python3}
OUT=$(realpath -m "${DOCS_OUT:-build-docs}")
check=0
[ "${1:-}" = --check ] && check=1

for t in doxygen sphinx-build; do
    command -v "$t" >/dev/null || { echo "docs: $t is not installed (make docs installs it)" >&2; exit 1; }
done
mkdir -p "$OUT"
rm -rf "$OUT/xml" "$OUT/html" "$OUT/doctrees"
# The same Doxyfile as tests/check_docs.sh, with XML on and nothing else written.
{ cat docs/Doxyfile
  echo "OUTPUT_DIRECTORY = $OUT"; echo "GENERATE_MAN = NO"; echo "GENERATE_XML = YES"
  echo "XML_OUTPUT = xml"; echo "WARN_AS_ERROR = NO"; } | doxygen - >"$OUT/doxygen.log" 2>&1 ||
    { cat "$OUT/doxygen.log" >&2; echo "docs: doxygen failed" >&2; exit 1; }

# autodoc imports the package, which loads the library that make build made.
export DLCACHE_LIB=${DLCACHE_LIB:-$PWD/build/lib/libdlcache.so}
export DLCACHE_DOXYGEN_XML=$OUT/xml
"$PY" -m sphinx -W --keep-going -q -b html -d "$OUT/doctrees" docs "$OUT/html"
echo "docs: the site is $OUT/html/index.html"
[ $check = 1 ] || exit 0

"$PY" tools/check_site.py "$OUT/html"

# Each page in a real browser. At --log-level=0 Chromium's log carries each console message and
# uncaught exception as a ":CONSOLE" line; the site's pages log nothing when they work, so any
# such line fails the check. A page that fails to load leaves no document. A canary page with a
# script error is run first: if its error is not seen, the check itself is broken and fails.
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
    echo "docs: chromium is not installed (make test installs it)" >&2
    exit 1
fi
prof=$(mktemp -d)
trap 'rm -rf "$prof"' EXIT
render() { # render FILE: the DOM to $prof/dom.html, the browser's log to $prof/log.txt
    timeout 60 "$browser" --headless=new --no-sandbox --disable-gpu --user-data-dir="$prof/u" \
        --enable-logging=stderr --log-level=0 --virtual-time-budget=2000 --dump-dom \
        "file://$1" >"$prof/dom.html" 2>"$prof/log.txt"
}
echo '<html><body><script>dlcache_canary_undefined()</script></body></html>' >"$prof/canary.html"
render "$prof/canary.html" || true
grep -q ':CONSOLE.*dlcache_canary_undefined' "$prof/log.txt" || {
    echo "docs: Chromium's log did not show the canary page's script error: the check is blind" >&2
    exit 1
}
bad=0
n=0
while IFS= read -r page; do
    n=$((n + 1))
    render "$page" || { echo "docs: chromium failed on $page" >&2; bad=1; continue; }
    if ! grep -q '</html>' "$prof/dom.html"; then
        echo "docs: $page rendered no document" >&2; bad=1
    fi
    if grep ':CONSOLE' "$prof/log.txt" >&2; then
        echo "docs: $page logged the console messages above in Chromium" >&2; bad=1
    fi
done < <(find "$OUT/html" -name '*.html' -not -path '*/_*' | sort)
[ $bad = 0 ] || exit 1
echo "docs: $n pages render in $("$browser" --version 2>/dev/null | head -1) without console messages"
