#!/usr/bin/env bash
# tools/gpu_bundle.sh DIR: make, on this Debian 12 machine, a relocatable bundle that runs the
# GPU checks on a machine with a GPU and none of Debian's libraries (docs in
# /work/shared/notes/gpu-h100.md: Ubuntu 24.04, CUDA 13, torch 2.11, no package registry).
#
#   DIR/run.sh            the checks (tools/gpu_run.sh): `bash DIR/run.sh [--quick]`
#   DIR/bin/              cachebuild, cacheinfo, cachebench, mkdemo (run.sh points mkdemo at the
#                         bundled photos with $DLCACHE_DEMO_PHOTOS)
#   DIR/lib/              libdlcache.so, libdlcache_cuda.so and every library that ldd lists for
#                         the bundled programs except glibc's own and GCC's runtime (below)
#   DIR/python/dlcache    the Python package
#   DIR/pylib/            Debian's pytest and what it imports, used only where python3 has none
#   DIR/tests/            tests/python/test_device.py, the other files with device cases, with
#                         conftest.py and the helpers they import; tests/bin/test_cuda_plugin
#                         with Criterion, when it is built (run.sh points it at the bundled
#                         plugin with $DLCACHE_CUDA_PLUGIN); tests/bench/bench_build.sh and
#                         bench_auto.py
#   DIR/tools/            gpu_node8.py
#   DIR/examples/         train_gpu.py
#   DIR/share/photos/     the photographs mkdemo cuts the data set from
#   DIR/BUNDLE_INFO       where and from what the bundle was made
#
# The build is a Release build of its own ($GPU_BUNDLE_BUILD, default build-gpu-bundle/ in the
# tree) with the CUDA plugin and the tests; only the targets above are built. Programs get the
# RUNPATH '$ORIGIN/../lib', libraries '$ORIGIN', so the bundle runs from wherever it is copied.
# Fails when the bundle is over $GPU_BUNDLE_MAX_BYTES (60 MB) or a bundled program would load a
# library from outside it (glibc's aside).
set -euo pipefail

die() { echo "gpu_bundle: error: $*" >&2; exit 1; }
say() { echo "gpu_bundle: $*"; }

if [ $# -ne 1 ] || [ -z "$1" ]; then echo "usage: tools/gpu_bundle.sh DIR" >&2; exit 2; fi
SRC=$(cd "$(dirname "$0")/.." && pwd)
DIR=$1
BUILD=${GPU_BUNDLE_BUILD:-$SRC/build-gpu-bundle}
MAX_BYTES=${GPU_BUNDLE_MAX_BYTES:-60000000}
PHOTOS=${GPU_BUNDLE_PHOTOS:-/usr/share/backgrounds/mate/nature}
PYDIST=/usr/lib/python3/dist-packages
JOBS=$(nproc)
TOOLS=(cachebuild cacheinfo cachebench mkdemo)
# Left to the target: glibc's own libraries (a foreign glibc cannot be mixed with its loader),
# and GCC's runtime (libstdc++, libgcc_s), which every Ubuntu has in a newer version than Debian
# 12's: a bundled older libstdc++ loaded first (the plugin before torch) would make torch's
# import fail on a missing GLIBCXX version. GPU_BUNDLE_GCC_RUNTIME=1 bundles it anyway.
glibc='linux-vdso|linux-gate|ld-linux[^ ]*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libmvec'
[ "${GPU_BUNDLE_GCC_RUNTIME:-0}" = 1 ] || glibc="$glibc|libstdc\+\+|libgcc_s"
GLIBC_RE="^($glibc)\.so"

# ---- Tools this needs ----------------------------------------------------------------------------
need_pkg() { # need_pkg COMMAND-OR-PATH PACKAGE: install Debian's PACKAGE when missing
    if [ -e "$1" ] || command -v "$1" >/dev/null 2>&1; then return; fi
    [ "$(id -u)" = 0 ] || die "$1 is missing: apt-get install $2"
    say "installing Debian's $2"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
             apt-get install -y -qq --no-install-recommends "$2" >/dev/null; } \
        || die "cannot install $2"
}
need_pkg patchelf patchelf
need_pkg "$PHOTOS" mate-backgrounds
need_pkg "$PYDIST/pytest" python3-pytest
command -v cmake >/dev/null || die "cmake is missing (make deps)"

# ---- DIR: new, empty, or an earlier bundle ---------------------------------------------------------
if [ -e "$DIR" ]; then
    [ -d "$DIR" ] || die "$DIR exists and is not a directory"
    if [ -n "$(ls -A "$DIR")" ] && [ ! -f "$DIR/BUNDLE_INFO" ]; then
        die "$DIR is not empty and not an earlier bundle: not touching it"
    fi
    rm -rf "$DIR"
fi
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
[ "$DIR" != "$SRC" ] || die "DIR cannot be the source tree"
# Marks the folder as a bundle (so that a rerun may replace it) until the real one is written.
echo "incomplete=1" >"$DIR/BUNDLE_INFO"

# ---- The Release build ---------------------------------------------------------------------------
say "configuring a Release build with the CUDA plugin in $BUILD"
mkdir -p "$BUILD"
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DDLCACHE_CUDA=ON -DDLCACHE_TESTS=ON \
    >"$BUILD/gpu_bundle.configure.log" 2>&1 || { tail -20 "$BUILD/gpu_bundle.configure.log" >&2; die "cmake failed"; }
targets=(dlcache "${TOOLS[@]}" dlcache_cuda)
help=$(cmake --build "$BUILD" --target help 2>/dev/null || true)
has_target() { grep -Eq "(^|\.\.\. )$1(:|\$| )" <<<"$help"; }
has_target dlcache_cuda || die "the build has no dlcache_cuda target (cmake/cuda.cmake; nvcc?)"
have_ctest=0
if has_target test_cuda_plugin; then
    targets+=(test_cuda_plugin)
    have_ctest=1
fi
say "building ${targets[*]} ($JOBS jobs)"
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" >"$BUILD/gpu_bundle.build.log" 2>&1 \
    || { grep -E "error|Error" "$BUILD/gpu_bundle.build.log" | head -20 >&2; die "the build failed ($BUILD/gpu_bundle.build.log)"; }

# ---- Files ---------------------------------------------------------------------------------------
mkdir -p "$DIR"/{bin,lib,python/dlcache,pylib,tests/python,tests/bin,examples,share/photos}
for t in "${TOOLS[@]}"; do
    install -m 755 "$BUILD/bin/$t" "$DIR/bin/$t"
done
# Under the name the Python package and its tests look for; nothing NEEDs libdlcache.so.1.
install -m 755 "$(readlink -f "$BUILD/lib/libdlcache.so")" "$DIR/lib/libdlcache.so"
[ -f "$BUILD/lib/libdlcache_cuda.so" ] || die "the plugin was not built ($BUILD/lib/libdlcache_cuda.so)"
install -m 755 "$BUILD/lib/libdlcache_cuda.so" "$DIR/lib/libdlcache_cuda.so"
cp "$PHOTOS"/*.jpg "$DIR/share/photos/"

# The test dlopens $DLCACHE_CUDA_PLUGIN when set (run.sh sets it), else the build's path.
[ "$have_ctest" = 1 ] && install -m 755 "$BUILD/tests/test_cuda_plugin" "$DIR/tests/bin/test_cuda_plugin"

# The Python package, the GPU tests and what they import from tests/python, the example.
cp "$SRC"/python/dlcache/*.py "$DIR/python/dlcache/"
cp "$SRC/examples/train_gpu.py" "$DIR/examples/"
cp "$SRC/tests/python/conftest.py" "$DIR/tests/python/"
if [ -f "$SRC/tests/python/test_device.py" ]; then
    # The other files' device cases (run.sh picks them by name with pytest -k): a mixture's
    # batches, a store set's, the sliced waits of next(), and the recipes' device ops and
    # bfloat16 where the files are there. The list is run.sh's GPU_TESTS.
    for t in test_device test_device_paths test_mix test_stream test_loader test_batchaug \
        test_augment_loader test_ops test_tokens_dropin; do
        [ -f "$SRC/tests/python/$t.py" ] || continue
        cp "$SRC/tests/python/$t.py" "$DIR/tests/python/"
        sed -nE 's/^(from|import) +([A-Za-z_][A-Za-z0-9_]*).*/\2/p' "$SRC/tests/python/$t.py" |
            sort -u | while read -r m; do
                [ ! -f "$SRC/tests/python/$m.py" ] || cp "$SRC/tests/python/$m.py" "$DIR/tests/python/"
            done
    done
else
    say "warning: tests/python/test_device.py does not exist yet: run.sh will skip it"
fi
# The benchmarks run.sh runs as they are: the builder's (interleaved, as in docs/BENCHMARKS.md),
# threads="auto"'s sweep, and the node of 8 trainers.
mkdir -p "$DIR/tests/bench" "$DIR/tools"
install -m 755 "$SRC/tests/bench/bench_build.sh" "$DIR/tests/bench/"
install -m 644 "$SRC/tests/bench/bench_auto.py" "$DIR/tests/bench/"
install -m 644 "$SRC/tools/gpu_node8.py" "$DIR/tools/"
# pytest 7.2 and what it imports, for a python3 without pytest (the GPU machine has no registry).
for p in pytest _pytest pluggy iniconfig packaging attr attrs py.py; do
    [ -e "$PYDIST/$p" ] && cp -r "$PYDIST/$p" "$DIR/pylib/"
done
find "$DIR" -name __pycache__ -type d -prune -exec rm -rf {} +
install -m 755 "$SRC/tools/gpu_run.sh" "$DIR/run.sh"

# ---- Libraries -----------------------------------------------------------------------------------
elves=("${TOOLS[@]/#/$DIR/bin/}" "$DIR"/lib/libdlcache.so "$DIR"/lib/libdlcache_cuda.so)
[ "$have_ctest" = 1 ] && elves+=("$DIR/tests/bin/test_cuda_plugin")
# ldd lists the whole closure; each library goes in under the name it is NEEDED by.
while read -r name path; do
    [[ $name =~ $GLIBC_RE ]] && continue
    [ -e "$DIR/lib/$name" ] || install -m 644 "$(readlink -f "$path")" "$DIR/lib/$name"
done < <(for f in "${elves[@]}"; do ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
if for f in "${elves[@]}"; do ldd "$f"; done | grep -q "not found"; then
    die "a library is missing here: $(for f in "${elves[@]}"; do ldd "$f"; done | grep "not found" | sort -u | head -3)"
fi
# shellcheck disable=SC2016 # $ORIGIN is for the dynamic loader, not the shell
for f in "$DIR"/lib/*; do patchelf --set-rpath '$ORIGIN' "$f"; done
for f in "${TOOLS[@]/#/$DIR/bin/}"; do
    # shellcheck disable=SC2016
    patchelf --set-rpath '$ORIGIN/../lib' "$f"
done
# shellcheck disable=SC2016
[ "$have_ctest" = 1 ] && patchelf --set-rpath '$ORIGIN/../../lib' "$DIR/tests/bin/test_cuda_plugin"

# Every library a bundled program loads must now come from DIR/lib (or be glibc's), with no help
# from the environment.
bad=$(for f in "${elves[@]}" "$DIR"/lib/*; do
          env -i PATH=/usr/bin:/bin ldd "$f" 2>&1 | awk -v f="$f" '$2 == "=>" {print f": "$1" "$3}'
      done | while read -r f name path; do
          [[ $name =~ $GLIBC_RE ]] && continue
          case "$(readlink -f "$path")" in "$DIR"/lib/*) ;; *) echo "$f $name -> $path";; esac
      done)
[ -z "$bad" ] || die "loaded from outside the bundle:"$'\n'"$bad"

# ---- What it is ----------------------------------------------------------------------------------
{
    echo "made=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host=$(hostname)"
    echo "source=$SRC"
    echo "commit=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "dirty=$(git -C "$SRC" status --porcelain 2>/dev/null | grep -c . || true)"
    echo "build=$BUILD (Release, DLCACHE_CUDA=ON)"
    echo "nvcc=$(sed -n 's/^DLCACHE_NVCC:FILEPATH=//p' "$BUILD/CMakeCache.txt")"
    echo "test_cuda_plugin=$have_ctest"
    echo "test_device=$([ -f "$DIR/tests/python/test_device.py" ] && echo 1 || echo 0)"
    echo "debian_libs=$(find "$DIR/lib" -type f ! -name 'libdlcache*' | wc -l)"
} >"$DIR/BUNDLE_INFO"

bytes=$(du -sb "$DIR" | cut -f1)
say "$DIR: $(awk -v b="$bytes" 'BEGIN {printf "%.1f MB", b / 1e6}') ($bytes bytes;" \
    "lib $(du -sh "$DIR/lib" | cut -f1), $(find "$DIR/lib" -type f | wc -l) libraries)"
[ "$bytes" -le "$MAX_BYTES" ] || die "the bundle is $bytes bytes, over the limit of $MAX_BYTES"
say "run it there with: bash DIR/run.sh [--quick]"
