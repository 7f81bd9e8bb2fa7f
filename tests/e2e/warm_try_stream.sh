#!/usr/bin/env bash
# tools/try_stream.sh end to end, as a user on a laptop runs it (docs/STREAMING.md, "Try it on
# one machine"): it installs s3rver with npm into a folder of its own (here the one the warm
# tests share, when it is there), starts it on 127.0.0.1, builds a set from the demo photos,
# pushes it and streams it with cachebench through a cache the plan sizes. Checked: it says it
# is done, the cache never held more than its limit, the limit is below the set's size, and no
# s3rver is left running. Exit 77 (skipped) where node or npm cannot be had, as the warm tests.
set -euo pipefail
. "$(dirname "$0")/../lib/e2e.sh" warm_try_stream
[ -x "$DLC_BIN/mkdemo" ] && [ -x "$DLC_BIN/cachebench" ] ||
    { echo "SKIP: mkdemo and cachebench are not built" >&2; exit 77; }
node_dir="$(cd "$DLC_BIN/.." && pwd)/warm-node"
if [ -f "$node_dir/node_modules/s3rver/bin/s3rver.js" ]; then
    export TRY_STREAM_NODE_DIR=$node_dir
fi
rc=0
bash "$DLC_SRC/tools/try_stream.sh" --bin "$DLC_BIN" --dir "$tmp/try" --images 300 --keep \
    2>"$tmp/out.txt" || rc=$?
[ "$rc" != 77 ] || { cat "$tmp/out.txt" >&2; exit 77; }
[ "$rc" = 0 ] || fail "try_stream.sh exited with $rc: $(tail -5 "$tmp/out.txt")"
grep -q "try_stream: done: the set streamed from http://127.0.0.1:" "$tmp/out.txt" ||
    fail "no 'done' line: $(tail -5 "$tmp/out.txt")"
$PY - "$tmp/try" <<'PYEOF'
import json, os, sys
d = sys.argv[1]
r = json.load(open(os.path.join(d, "stream.json")))
plan = json.load(open(os.path.join(d, "plan.json")))
limit = r["cache_limit"]
assert limit == plan["cache_needed_bytes"] < plan["set_bytes"], (limit, plan)
assert 0 < r["peak_cache_bytes"] <= limit, (r["peak_cache_bytes"], limit)
assert r["downloads"] >= plan["shards"], (r["downloads"], plan["shards"])
assert r["samples"] + r["warmup_samples"] == 2 * plan["samples_per_rank"], r["samples"]
PYEOF
# The server it started is gone (its pid file is not kept: look for its data folder).
! pgrep -f "s3rver.js -d $tmp/try/s3data" >/dev/null || fail "s3rver is still running"
echo "warm_try_stream: ok"
