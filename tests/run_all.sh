#!/usr/bin/env bash
# Every test, in the order that fails fastest: the layout check, the check that
# the public headers are documented, the unit and end-to-end tests of the
# normal build, the unit tests again under ASan+UBSan, the loader's threading
# tests under TSan, the Python tests, Release builds with gcc and clang, and a
# short fuzzing run.
# `make test` runs this after `make build`.
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
PY=${PY:-/usr/bin/python3}
failed=()

step() { printf '\n== %s\n' "$*"; }
run() { # run NAME CMD...: record a failing step, keep going
    local name=$1; shift
    if ! "$@"; then failed+=("$name"); fi
}

step "layout of the C sources (clang-format-14)"
run format bash tests/check_format.sh

step "public headers documented (doxygen)"
run docs bash tests/check_docs.sh

step "unit and end-to-end tests (build/)"
run ctest ctest --test-dir build --output-on-failure -j "$JOBS"

step "unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DDLCACHE_SANITIZE=address,undefined \
      -DDLCACHE_E2E=OFF -DDLCACHE_TESTS=ON -DDLCACHE_WERROR=ON >/dev/null &&
    cmake --build build-asan -j "$JOBS" >/dev/null &&
    run asan env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
        ctest --test-dir build-asan -L unit --output-on-failure -j "$JOBS" || failed+=(asan-build)

step "loader threading tests under ThreadSanitizer (build-tsan/)"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DDLCACHE_SANITIZE=thread \
      -DDLCACHE_E2E=OFF -DDLCACHE_TESTS=ON -DDLCACHE_WERROR=ON >/dev/null &&
    cmake --build build-tsan -j "$JOBS" >/dev/null &&
    run tsan env TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
        ctest --test-dir build-tsan -L threads --output-on-failure -j "$JOBS" \
        --no-tests=error || failed+=(tsan-build)

if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then
    step "Python tests (pytest, $PY)"
    run pytest env DLCACHE_LIB="$PWD/build/lib/libdlcache.so" PYTHONPATH="$PWD/python" \
        "$PY" -m pytest -q tests/python
fi

step "Release builds with gcc and clang, as a user makes them (warnings as errors here)"
for cc in gcc clang; do
    if command -v "$cc" >/dev/null; then
        CC=$cc cmake -S . -B "build-release-$cc" -DCMAKE_BUILD_TYPE=Release -DDLCACHE_WERROR=ON \
            >/dev/null && cmake --build "build-release-$cc" -j "$JOBS" >"build-release-$cc/build.log" 2>&1 ||
            { grep -E "error|warning" "build-release-$cc/build.log" | head -20
              failed+=("release-$cc"); }
    fi
done

if [ -x tests/fuzz/run.sh ]; then
    step "fuzzing, ${FUZZ_SECONDS:-25} s per harness"
    run fuzz bash tests/fuzz/run.sh "${FUZZ_SECONDS:-25}"
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED steps: ${failed[*]}"
    exit 1
fi
echo "all test steps passed"
