#!/usr/bin/env bash
# The bounded shard cache of streaming (cache/stream/stream_cache.h) against a real S3 server
# (s3rver on loopback), driven by tests/stream/stream_cache_drive.c over a set of 10 shards that
# cachewarm push put in the bucket:
#   1. a cache limited to about 30 % of the set never holds more than its limit while a driver
#      walks two epochs (the allocated bytes of every file under the cache directory are polled
#      the whole time, and the driver's own peak_bytes is checked too), evicting as it goes;
#   2. a driver SIGKILLed in the middle of a download leaves a temporary file that the next run
#      removes; that run completes and leaves no temporary file, and a third run is all hits;
#   3. two drivers at once on one cache directory download each shard once between them;
#   4. a shard corrupted in the bucket (bytes flipped in s3rver's object file) is refused, named
#      with the URL, and never published;
#   5. a limit too small for the index and the largest shard fails at open with the bytes needed.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"
drive=$DLC_BIN/stream_cache_drive
[ -x "$drive" ] || skip "stream_cache_drive is not built"
[ -x "$DLC_BIN/mkdemo" ] && [ -x "$DLC_BIN/cachebuild" ] || skip "mkdemo and cachebuild are needed"

warm_start_s3rver
src=$warm_tmp/src
mkdir -p "$src"
"$DLC_BIN/mkdemo" "$src/demo" --count 200 --seed 5 >/dev/null 2>&1 || fail "mkdemo failed"
"$DLC_BIN/cachebuild" "$src/demo/train" -o "$src/set" --shards 10 --size 160 \
    >/dev/null 2>"$src/build.log" || fail "cachebuild failed: $(tail -3 "$src/build.log")"
set_bytes=0
for f in "$src"/set/part-*.dlc; do set_bytes=$((set_bytes + $(stat -c %s "$f"))); done
note "set: 10 shards, $set_bytes bytes"
"$DLC_BIN/cachewarm" push "$src/set" s3://b/sets/s --endpoint "$S3_URL" -q 2>"$warm_tmp/push.err" ||
    fail "push: $(cat "$warm_tmp/push.err")"
url=s3://b/sets/s
out=$warm_tmp/out
mkdir -p "$out"

# used DIR: the bytes allocated to every file under DIR (what the cap is about).
used() {
    { find "$1" -type f -printf '%b\n' 2>/dev/null || true; } | awk '{s += $1 * 512} END {print s + 0}'
}
# temps DIR: the cache's temporary files under DIR.
temps() { { find "$1" -name '*.dlcs-tmp' 2>/dev/null || true; } | wc -l; }

note "1. the cap at about 30 % of the set is never exceeded"
cache=$warm_tmp/c1
limit=$((set_bytes * 3 / 10))
"$drive" --url "$url" --dir "$cache" --endpoint "$S3_URL" --limit "$limit" --epochs 2 \
    --hold-ms 30 >"$out/cap.json" 2>"$out/cap.err" &
pid=$!
max=0
samples=0
while kill -0 "$pid" 2>/dev/null; do
    u=$(used "$cache")
    [ "$u" -le "$limit" ] || fail "the cache holds $u bytes, over its limit of $limit"
    if [ "$u" -gt "$max" ]; then max=$u; fi
    samples=$((samples + 1))
done
wait "$pid" || fail "driver: $(cat "$out/cap.err")"
peak=$(json_get "$out/cap.json" peak_bytes)
[ "$peak" -le "$limit" ] || fail "peak_bytes $peak is over the limit $limit"
[ "$(json_get "$out/cap.json" evictions)" -gt 0 ] || fail "no eviction under a 30 % limit"
[ "$(json_get "$out/cap.json" records)" = 400 ] || fail "records read: $(cat "$out/cap.json")"
[ "$(temps "$cache")" = 0 ] || fail "temporary files left"
note "limit $limit: at most $max bytes seen in $samples samples, peak_bytes $peak," \
    "$(json_get "$out/cap.json" evictions) evictions"

note "2. kill -9 in the middle of a download, then a clean run"
cache=$warm_tmp/c2
warm_start_proxy slow "$S3_PORT" --rate 2000000
proxy=$!
"$drive" --url "$url" --dir "$cache" --endpoint "http://127.0.0.1:$PROXY_PORT" --downloads 1 \
    >/dev/null 2>"$out/killed.err" &
pid=$!
for i in $(seq 1 1500); do
    [ "$(temps "$cache")" != 0 ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
done
sleep 0.2
kill -9 "$pid" 2>/dev/null || fail "the driver ended before it could be killed"
wait "$pid" 2>/dev/null || true
kill "$proxy"
[ "$(temps "$cache")" != 0 ] || fail "the kill left no temporary file to clean up (killed too late?)"
"$drive" --url "$url" --dir "$cache" --endpoint "$S3_URL" --verbose >"$out/after.json" \
    2>"$out/after.err" || fail "the run after the kill: $(cat "$out/after.err")"
grep -q "left unfinished" "$out/after.err" || fail "the dead process's temporary file was not removed"
[ "$(temps "$cache")" = 0 ] || fail "temporary files left after the clean run"
[ "$(json_get "$out/after.json" records)" = 200 ] || fail "records after the kill"
"$drive" --url "$url" --dir "$cache" --endpoint "$S3_URL" >"$out/again.json" 2>"$out/again.err" ||
    fail "third run: $(cat "$out/again.err")"
[ "$(json_get "$out/again.json" downloads)" = 0 ] || fail "the third run downloaded shards"
[ "$(json_get "$out/again.json" hits)" = 10 ] || fail "the third run missed"
"$DLC_BIN/cacheinfo" "$(json_get "$out/again.json" set_dir)" >/dev/null 2>"$out/info.err" ||
    fail "the complete cache folder does not open as a set: $(cat "$out/info.err")"

note "3. two drivers on one cache directory download each shard once"
cache=$warm_tmp/c3
"$drive" --url "$url" --dir "$cache" --endpoint "$S3_URL" --hold-ms 20 >"$out/a.json" \
    2>"$out/a.err" &
pa=$!
"$drive" --url "$url" --dir "$cache" --endpoint "$S3_URL" --hold-ms 20 >"$out/b.json" \
    2>"$out/b.err" &
pb=$!
wait "$pa" || fail "driver a: $(cat "$out/a.err")"
wait "$pb" || fail "driver b: $(cat "$out/b.err")"
da=$(json_get "$out/a.json" downloads)
db=$(json_get "$out/b.json" downloads)
[ $((da + db)) = 10 ] || fail "$da + $db shards downloaded for 10"
fa=$(json_get "$out/a.json" bytes_fetched)
fb=$(json_get "$out/b.json" bytes_fetched)
index_bytes=$(stat -c %s "$src/set/index.dlcset")
[ $((fa + fb)) = $((set_bytes + 2 * index_bytes)) ] ||
    fail "$fa + $fb bytes fetched for a set of $set_bytes (index $index_bytes, fetched by each)"
note "downloads: $da + $db; bytes $fa + $fb"

note "4. a shard corrupted in the bucket is refused and named"
"$DLC_BIN/cachewarm" push "$src/set" s3://b/sets/bad --endpoint "$S3_URL" -q ||
    fail "push of the set to corrupt"
obj=$warm_tmp/s3data/b/sets/bad/part-00003-of-00010.dlc._S3rver_object
[ -f "$obj" ] || fail "s3rver's file of the object is not at $obj"
"$PY" - "$obj" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
for i in range(len(b) // 2, len(b) // 2 + 64):
    b[i] ^= 0xFF
open(p, 'wb').write(b)
PY
cache=$warm_tmp/c4
if "$drive" --url s3://b/sets/bad --dir "$cache" --endpoint "$S3_URL" >"$out/bad.json" \
    2>"$out/bad.err"; then
    fail "a corrupt shard was accepted"
fi
grep -q "s3://b/sets/bad/part-00003-of-00010.dlc" "$out/bad.err" ||
    fail "the refusal does not name the shard's URL: $(cat "$out/bad.err")"
grep -q "refused" "$out/bad.err" || fail "the message does not say refused: $(cat "$out/bad.err")"
[ ! -e "$(find "$cache" -name part-00003-of-00010.dlc | head -1)" ] || fail "the corrupt shard was published"
[ "$(temps "$cache")" = 0 ] || fail "the corrupt download was left behind"
note "refused: $(head -c 300 "$out/bad.err")"

note "5. a limit too small for one shard fails with the bytes needed"
cache=$warm_tmp/c5
if "$drive" --url "$url" --dir "$cache" --endpoint "$S3_URL" --limit 100000 >/dev/null \
    2>"$out/small.err"; then
    fail "a 100000-byte cache opened"
fi
grep -Eq "needs at least [0-9]+ bytes" "$out/small.err" ||
    fail "no number of bytes needed: $(cat "$out/small.err")"
note "$(cat "$out/small.err")"
echo "stream_cache: ok"
