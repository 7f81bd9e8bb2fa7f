#!/usr/bin/env bash
# run.sh [SECONDS]: build the libFuzzer harnesses in build-fuzz/ with clang
# (-fsanitize=fuzzer,address,undefined; the normal gcc build is untouched),
# replay every saved regression input (tests/fuzz/regress/<harness>/), then
# fuzz each harness for SECONDS (default 30) from its seeds plus the corpus
# that earlier runs grew in build-fuzz/corpus/<harness>/. Prints each
# harness's executions and exits non-zero when any input crashed, leaked,
# hung or tripped a sanitizer; the input is then in build-fuzz/crashes/.
#
# Environment: FUZZ_HARNESSES="store tar" fuzzes only those; FUZZ_BUILD
# overrides the build folder; FUZZ_JOBS the build's -j (default 2).
# `make fuzz FUZZ_SECONDS=N` and tests/run_all.sh call this script.
set -uo pipefail
secs=${1:-30}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FUZZ_BUILD:-$root/build-fuzz}
cd "$root"

if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz: SKIPPED: clang is not installed (make deps installs clang and libclang-rt-dev)"
    exit 0
fi

echo "fuzz: building the harnesses in $build (clang, libFuzzer + ASan + UBSan)"
if ! CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLCACHE_FUZZ=ON \
        -DDLCACHE_TESTS=OFF -DDLCACHE_SANITIZE=address,undefined -DDLCACHE_WERROR=ON \
        -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link >"$build.configure.log" 2>&1; then
    cat "$build.configure.log" >&2
    echo "fuzz: FAILED to configure build-fuzz" >&2
    exit 1
fi
rm -f "$build.configure.log"
if ! cmake --build "$build" --target fuzz_all -j "${FUZZ_JOBS:-2}" >"$build/build.log" 2>&1; then
    tail -n 40 "$build/build.log" >&2
    echo "fuzz: FAILED to build the harnesses" >&2
    exit 1
fi

seeds=$build/seeds
rm -rf "$seeds"
if ! bash tests/fuzz/make_seeds.sh "$build/fuzz" "$seeds"; then
    echo "fuzz: FAILED to make the seeds" >&2
    exit 1
fi

# Largest input per harness: a little above the largest seed, so mutations
# stay near real files instead of growing into megabytes of noise.
max_len() {
    case $1 in
    store) echo 65536 ;; tar) echo 16384 ;; jpeg) echo 8192 ;;
    state) echo 128 ;; *) echo 4096 ;;
    esac
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
summary=()
harnesses=${FUZZ_HARNESSES:-store schema setindex manifest tar jpeg state warm stream tokens}
for h in $harnesses; do
    exe=$build/fuzz/fuzz_$h
    if [ ! -x "$exe" ]; then
        echo "fuzz_$h: not built (its part does not build yet): skipped"
        summary+=("$(printf '%-14s %12s %6s %8s  %s' "fuzz_$h" - - - "not built")")
        continue
    fi
    log=$build/logs/$h.log
    mkdir -p "$build/logs" "$build/crashes/$h" "$build/corpus/$h"

    # Every input that once crashed must keep passing.
    reg=$root/tests/fuzz/regress/$h
    if [ -d "$reg" ] && [ -n "$(ls -A "$reg" 2>/dev/null)" ]; then
        nreg=$(find "$reg" -maxdepth 1 -type f | wc -l)
        if ! "$exe" -runs=1 $(find "$reg" -maxdepth 1 -type f | sort) >"$log.regress" 2>&1; then
            grep -E "ERROR|SUMMARY|Running|panic|abort" "$log.regress" | head -n 20
            echo "fuzz_$h: FAILED: a regression input of tests/fuzz/regress/$h crashes again"
            failed+=("$h(regress)")
            continue
        fi
        echo "fuzz_$h: $nreg regression inputs replayed, all pass"
    fi

    start=$(date +%s)
    "$exe" -max_total_time="$secs" -max_len="$(max_len "$h")" -timeout=25 -rss_limit_mb=2560 \
        -print_final_stats=1 -artifact_prefix="$build/crashes/$h/" \
        "$build/corpus/$h" "$seeds/$h" >"$log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2)
    ncorp=$(find "$build/corpus/$h" -type f | wc -l)
    if [ $rc -ne 0 ]; then
        # The whole report (the harness's own message and the stack up to the check that
        # failed), and the input itself: CI keeps only what is printed.
        sed -n '/==ERROR\|^fuzz: \|runtime error/,$p' "$log" | grep -v '^#[0-9]* *\(NEW\|REDUCE\|pulse\)' |
            head -n 40
        # This run's inputs only: the folder keeps those of earlier runs.
        find "$build/crashes/$h" -type f -newermt "@$start" -size -4097c | while read -r f; do
            echo "fuzz_$h: the input, base64 (base64 -d > tests/fuzz/regress/$h/NAME):"
            base64 -w 100 "$f"
        done
        echo "fuzz_$h: FAILED (exit $rc): see $log and the input in $build/crashes/$h/"
        failed+=("$h")
        status=FAILED
    else
        status=ok
    fi
    echo "fuzz_$h: ${execs:-?} executions in ${took} s, coverage ${cov:-?}, corpus $ncorp: $status"
    summary+=("$(printf '%-14s %12s %6s %8s  %s' "fuzz_$h" "${execs:-?}" "$took" "${cov:-?}" "$status")")
done

echo
printf '%-14s %12s %6s %8s  %s\n' harness executions secs coverage result
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]}"
    echo "fuzz: a crashing input goes into tests/fuzz/regress/<harness>/ once its bug is fixed"
    exit 1
fi
echo "fuzz: no crash"
