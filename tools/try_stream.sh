#!/usr/bin/env bash
# Try streaming on one machine (a laptop), with nothing in the cloud: a local S3 server
# (s3rver, installed with npm into a folder of its own), a small store set built from the demo
# photos with the project's tools, uploaded with `cachewarm push` and streamed back with
# `cachebench load s3://...` through a bounded cache folder. docs/STREAMING.md walks through it.
#
#   tools/try_stream.sh [--bin DIR] [--dir DIR] [--images N] [--cache-limit SIZE] [--keep]
#
#   --bin DIR          the built tools (default: build/bin of this tree, or $DLC_BIN)
#   --dir DIR          where everything goes: s3rver's install and data, the demo images, the
#                      set, the cache (default: a new temporary folder)
#   --images N         demo images (default 600)
#   --cache-limit SIZE the most the cache folder may hold (default: the least the plan needs,
#                      well below the set's size)
#   --keep             leave DIR (and print how to stream again) instead of removing it
#
# Needs node and npm (Debian: apt-get install nodejs npm), the network once for npm, and the
# photos that mkdemo crops (Debian: mate-backgrounds; `make demo` installs them). Everything
# listens on 127.0.0.1 only. s3rver's fixed test key (S3RVER/S3RVER) is set for the tools of
# this run only. Exit status: 0 streamed; 1 a step failed (named); 77 node or npm is missing, or
# npm could not install s3rver (offline): nothing was tried.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
bin=${DLC_BIN:-$src/build/bin}
work=
images=600
limit=
keep=0
S3RVER_VERSION=3.7.1

say() { echo "try_stream: $*" >&2; }
die() {
    say "error: $*"
    exit 1
}
cannot() {
    say "cannot run here: $*"
    exit 77
}
while [ $# -gt 0 ]; do
    case $1 in
    --bin) bin=$2 && shift 2 ;;
    --dir) work=$2 && shift 2 ;;
    --images) images=$2 && shift 2 ;;
    --cache-limit) limit=$2 && shift 2 ;;
    --keep) keep=1 && shift ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *) die "unknown argument $1 (see --help)" ;;
    esac
done
for t in mkdemo cachebuild cachewarm cachebench cacheinfo; do
    [ -x "$bin/$t" ] || die "$bin/$t is missing: build first (make build), or give --bin DIR"
done
command -v node >/dev/null || cannot "node is not installed (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null || cannot "npm is not installed (Debian: apt-get install npm)"

if [ -z "$work" ]; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/dlcache-try.XXXXXX")
else
    mkdir -p "$work"
    work=$(cd "$work" && pwd)
fi
server_pid=
finish() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    if [ "$keep" = 0 ]; then rm -rf "$work"; fi
}
trap finish EXIT

# 1. s3rver, pinned (the version and lock file the tests use), in a folder of its own.
node_dir=${TRY_STREAM_NODE_DIR:-$work/node}
s3rver_js=$node_dir/node_modules/s3rver/bin/s3rver.js
if [ ! -f "$s3rver_js" ]; then
    say "installing s3rver $S3RVER_VERSION with npm into $node_dir"
    mkdir -p "$node_dir"
    cp "$src/tests/lib/package.json" "$src/tests/lib/package-lock.json" "$node_dir/"
    (cd "$node_dir" && timeout 300 npm ci --ignore-scripts --no-audit --no-fund \
        --loglevel=error) >"$node_dir/npm.log" 2>&1 ||
        cannot "npm could not install s3rver (offline?): $(tail -3 "$node_dir/npm.log")"
fi

# 2. Start it on a free port of 127.0.0.1, with one bucket, "demo".
free_port() {
    node -e 'const s = require("net").createServer();
             s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}
up() {
    node -e 'require("http").get(process.argv[1], () => process.exit(0))
                 .on("error", () => process.exit(1));' "$1"
}
mkdir -p "$work/s3data"
for attempt in 1 2 3; do
    port=$(free_port)
    # --openssl-legacy-provider: s3rver 3 signs with an algorithm newer node hides.
    node --openssl-legacy-provider "$s3rver_js" -d "$work/s3data" -a 127.0.0.1 -p "$port" \
        --no-vhost-buckets --silent --configure-bucket demo >"$work/s3rver.log" 2>&1 &
    server_pid=$!
    endpoint=http://127.0.0.1:$port
    for _ in $(seq 1 100); do
        if up "$endpoint/"; then break 2; fi
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
done
[ -n "$server_pid" ] || die "s3rver did not start: $(tail -5 "$work/s3rver.log")"
say "s3rver listens on $endpoint (bucket demo, data in $work/s3data)"

# s3rver's own test key; AWS_ENDPOINT_URL_S3 would do instead of --endpoint.
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
unset AWS_SESSION_TOKEN
export NO_PROXY=127.0.0.1,localhost
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy

# 3. A store set of the demo photos, built and uploaded with the project's own tools.
say "building a set of $images demo images in 24 shards"
"$bin/mkdemo" "$work/demo" --count "$images" --seed 7 >/dev/null 2>"$work/mkdemo.log" ||
    die "mkdemo failed: $(tail -3 "$work/mkdemo.log")"
"$bin/cachebuild" "$work/demo/train" -o "$work/set" --shards 24 --size 96 \
    >/dev/null 2>"$work/build.log" || die "cachebuild failed: $(tail -3 "$work/build.log")"
"$bin/cachewarm" push "$work/set" s3://demo/sets/train --endpoint "$endpoint" -q \
    2>"$work/push.log" || die "cachewarm push failed: $(tail -3 "$work/push.log")"
set_bytes=$(du -sb "$work/set" | cut -f1)
say "uploaded $work/set ($set_bytes bytes) to s3://demo/sets/train"

# 4. What streaming it needs (cacheinfo --plan reads the set's index only), then stream it
#    for two epochs through a cache folder bounded by that.
url=s3://demo/sets/train
shape=(--batch 16 --window-shards 2 --prefetch 2 --downloads 1)
"$bin/cacheinfo" "$url" --plan --json --cache-dir "$work/cache" --endpoint "$endpoint" \
    "${shape[@]}" >"$work/plan.json" 2>"$work/plan.err" ||
    die "cacheinfo --plan failed: $(tail -3 "$work/plan.err")"
need=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).cache_needed_bytes)' \
    "$work/plan.json")
say "the plan: a cache of $need bytes is enough for this set of $set_bytes bytes"
[ -n "$limit" ] || limit=$need
say "streaming: cachebench load $url --cache-dir $work/cache --cache-limit $limit"
"$bin/cachebench" load "$url" --cache-dir "$work/cache" --cache-limit "$limit" \
    --endpoint "$endpoint" "${shape[@]}" --crop 64 --epochs 2 --threads 2 --json \
    >"$work/stream.json" 2>"$work/stream.err" ||
    die "cachebench failed: $(tail -3 "$work/stream.err")"
node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1]));
         const s = r.stream || {};
         const pick = k => (k in r ? r[k] : s[k]);
         console.log("  2 epochs: samples/s " + Math.round(pick("samples_per_s") || 0) +
                     ", bytes fetched " + pick("bytes_fetched") +
                     ", peak cache bytes " + pick("peak_cache_bytes") +
                     ", shards downloaded " + pick("downloads"));' "$work/stream.json" >&2
say "done: the set streamed from $endpoint through a cache of at most $limit bytes"
if [ "$keep" = 1 ]; then
    say "kept $work; s3rver is stopped. To stream again, start it as above and run:"
    say "  AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER $bin/cachebench load $url \\"
    say "    --cache-dir $work/cache --cache-limit $limit --endpoint http://127.0.0.1:PORT"
fi
