#!/usr/bin/env bash
# Every test, in the order that fails fastest: the layout check, the check that
# the public headers are documented, the ABI against the frozen baseline, the unit and end-to-end tests of the
# normal build, the unit tests again under ASan+UBSan, the loader's threading
# tests and streaming end to end under TSan, the Python tests, Release builds with gcc and clang, and a
# short fuzzing run.
# `make test` runs this after `make build`.
#
#   tests/run_all.sh              every step
#   tests/run_all.sh STEP...      only those steps, in the order given
#   tests/run_all.sh --list       the steps' names, one a line, with what each runs
#
# The steps: format, docs, types, site, abi, ctest, asan, tsan, pytest, release, fuzz. Each but format, docs and types
# needs build/ (`make build`), as the whole run does; asan, tsan and release make their own
# build folders. A failing step does not stop the others; the exit status is 1 when any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
PY=${PY:-/usr/bin/python3}
failed=()

STEPS=(format docs types site abi ctest asan tsan pytest release fuzz)
declare -A ABOUT=(
    [format]="layout of the C sources (clang-format-14)"
    [docs]="public headers documented (doxygen)"
    [types]="type check of python/ and examples/ (Debian's mypy, config in pyproject.toml)"
    [site]="the documentation site: Sphinx with warnings as errors, its links, every page in headless Chromium"
    [abi]="the library's ABI against tests/abi/libdlcache.abi (abidiff)"
    [ctest]="unit and end-to-end tests (build/)"
    [asan]="unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)"
    [tsan]="loader threading tests and streaming end to end under ThreadSanitizer (build-tsan/)"
    [pytest]="Python tests (pytest, $PY)"
    [release]="Release builds with gcc and clang, as a user makes them: no tests (warnings as errors here)"
    [fuzz]="fuzzing, ${FUZZ_SECONDS:-16} s per harness"
)

step() { printf '\n== %s\n' "$*"; }
run() { # run NAME CMD...: record a failing step, keep going
    local name=$1; shift
    if ! "$@"; then failed+=("$name"); fi
}

step_format() { run format bash tests/check_format.sh; }

step_docs() { run docs bash tests/check_docs.sh; }

step_types() { run types mypy python/ examples/; }

step_site() { run site bash tools/docs.sh --check; }

step_abi() { run abi bash tests/abi/check.sh build; }

step_ctest() { run ctest ctest --test-dir build --output-on-failure -j "$JOBS"; }

step_asan() {
    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DDLCACHE_SANITIZE=address,undefined \
          -DDLCACHE_E2E=OFF -DDLCACHE_TESTS=ON -DDLCACHE_WERROR=ON >/dev/null &&
        cmake --build build-asan -j "$JOBS" >/dev/null &&
        run asan env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
            ctest --test-dir build-asan -L unit --output-on-failure -j "$JOBS" || failed+=(asan-build)
}

step_tsan() {
    cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DDLCACHE_SANITIZE=thread \
          -DDLCACHE_E2E=OFF -DDLCACHE_TESTS=ON -DDLCACHE_WERROR=ON >/dev/null &&
        cmake --build build-tsan -j "$JOBS" >/dev/null &&
        run tsan env TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
            ctest --test-dir build-tsan -L threads --output-on-failure -j "$JOBS" \
            --no-tests=error || failed+=(tsan-build)
    # Streaming runs the loader's threads and the cache's download threads against a real S3
    # server: its end-to-end test again with the TSan build's tools, the part of it that runs
    # threads in one process (DLC_E2E_TSAN=1; 77 is its skip, when node or s3rver cannot be had).
    local rc=0
    DLC_SRC=$PWD DLC_BIN=$PWD/build-tsan/bin PY=$PY DLC_E2E_TSAN=1 \
        TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 bash tests/e2e/stream_load.sh || rc=$?
    [ "$rc" = 0 ] || [ "$rc" = 77 ] || failed+=(tsan-stream)
}

step_pytest() {
    if ! ls tests/python/test_*.py >/dev/null 2>&1; then
        echo "no tests/python/test_*.py: nothing to run"
        return
    fi
    run pytest env DLCACHE_LIB="$PWD/build/lib/libdlcache.so" PYTHONPATH="$PWD/python" \
        "$PY" -m pytest -q tests/python
}

step_release() {
    # What a user builds: no tests (a user has no Criterion, so DLCACHE_TESTS=AUTO leaves them
    # out), warnings as errors here only. The tests' own sources are built with -Werror in build/,
    # build-asan/ and build-tsan/; building them twice more took about 100 s of a CI run.
    local cc
    for cc in gcc clang; do
        if command -v "$cc" >/dev/null; then
            CC=$cc cmake -S . -B "build-release-$cc" -DCMAKE_BUILD_TYPE=Release \
                -DDLCACHE_TESTS=OFF -DDLCACHE_WERROR=ON >/dev/null &&
                cmake --build "build-release-$cc" -j "$JOBS" >"build-release-$cc/build.log" 2>&1 ||
                { grep -E "error|warning" "build-release-$cc/build.log" | head -20
                  failed+=("release-$cc"); }
        fi
    done
}

step_fuzz() {
    if [ ! -x tests/fuzz/run.sh ]; then
        echo "no tests/fuzz/run.sh: nothing to run"
        return
    fi
    # 16 s each: at 20 s, ten harnesses and their build took 262 s of a `make test` of 1,693 s on
    # 2 cores (d3feadd), too near its 30 minutes; 16 s gives back about 40 s. Each harness
    # replays its regression inputs first whatever the time. `make fuzz FUZZ_SECONDS=N` fuzzes
    # as long as one likes.
    run fuzz bash tests/fuzz/run.sh "${FUZZ_SECONDS:-16}"
}

if [ "${1:-}" = --list ]; then
    for s in "${STEPS[@]}"; do printf '%-8s %s\n' "$s" "${ABOUT[$s]}"; done
    exit 0
fi
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=("${STEPS[@]}")
for s in "${wanted[@]}"; do
    if [ -z "${ABOUT[$s]+x}" ]; then
        echo "run_all.sh: no step '$s'; the steps are: ${STEPS[*]}" >&2
        exit 2
    fi
done
# Each step's wall time, printed at the end: the whole run must stay under 30 minutes on 2
# cores, and a CI log that says where the time went shows what to trim when it grows.
declare -A took
for s in "${wanted[@]}"; do
    step "${ABOUT[$s]}"
    t0=$SECONDS
    "step_$s"
    took[$s]=$((SECONDS - t0))
done

printf '\n== wall time per step\n'
for s in "${wanted[@]}"; do printf '%-8s %5d s\n' "$s" "${took[$s]}"; done
printf '%-8s %5d s\n\n' total "$SECONDS"
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED steps: ${failed[*]}"
    exit 1
fi
echo "all test steps passed (${wanted[*]})"
