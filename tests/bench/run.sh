#!/usr/bin/env bash
# `make bench`: the benchmarks that need no server and no GPU, on a small data set made here, each
# printing its ratios measured in one run (never a pass or fail): the store's record lookup
# (bench_store_read: offset table against LMDB's B-tree) and the loader against the memcpy ceiling
# and the decode-every-epoch path on 1 thread and on every core (bench_threads.sh), and today's
# training recipe against RRC + flip and against a torch DataLoader (bench_recipes.py). The other
# scripts of tests/bench/ (builder, streaming, cachewarm, comparing two builds) take arguments and
# servers; each says how to run it in its first lines.
#
#   make bench                       builds, then runs this
#   bash tests/bench/run.sh [WORK]   WORK: where the data set and the results go (build/bench)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/bin}
WORK=${1:-build/bench}
COUNT=${COUNT:-512}
mkdir -p "$WORK"
[ -x "$BIN/cachebench" ] || { echo "bench: $BIN/cachebench not found (make build)" >&2; exit 1; }
if [ ! -f "$WORK/train.dlc" ]; then
    "$BIN/mkdemo" "$WORK/data" --count "$COUNT" >/dev/null
    "$BIN/cachebuild" "$WORK/data/train" -o "$WORK/train.dlc" --size 256 --force >/dev/null
fi
echo "== bench_store_read (records found per second: offset table and B-tree)"
if [ -x "$BIN/bench_store_read" ]; then
    "$BIN/bench_store_read" 20000 "$WORK"
else
    echo "bench: $BIN/bench_store_read not built (the tests are off): skipped"
fi
echo "== bench_threads.sh (the loader against the memcpy ceiling and per-epoch JPEG decoding)"
THREADS="1 $(nproc)" SVG="" BIN=$BIN bash tests/bench/bench_threads.sh "$WORK/train.dlc" \
    "$WORK/data/train" "$WORK/threads.json" --seconds 3
echo "bench: results in $WORK/threads.json"
echo "== bench_tokens.py (packed token batches against memcpy and an np.memmap loader; open time)"
/usr/bin/python3 tests/bench/bench_tokens.py "$WORK" --tokens 5000000 --seconds 2
echo "== bench_recipes.py (torchvision's recipe against RRC + flip and a torch DataLoader, 2 threads)"
DLCACHE_LIB=${DLCACHE_LIB:-build/lib/libdlcache.so} ${PY:-/usr/bin/python3} tests/bench/bench_recipes.py \
    "$WORK/train.dlc" --threads 2 --seconds 3 --json "$WORK/recipes.json"
echo "bench: results in $WORK/recipes.json"
