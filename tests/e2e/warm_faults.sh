#!/usr/bin/env bash
# cachewarm through a fault-injecting proxy of the test's own in front of
# s3rver (503s, connection resets, stalls, short bodies) still produces a
# bit-exact file; four concurrent invocations for one destination download
# it once (GETs counted at the proxy); a full destination disk (a small
# tmpfs) gives a clear error and leaves no file behind.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"

warm_start_s3rver
head -c 50000000 /dev/urandom >"$warm_tmp/obj.bin"
s3_put "$warm_tmp/obj.bin" obj.bin
size=$(stat -c %s "$warm_tmp/obj.bin")
out=$warm_tmp/out
mkdir -p "$out"
stats() { curl -sf "http://127.0.0.1:$1/__proxy/stats"; }

note "faults: 503, reset, stall, short body"
warm_start_proxy faults "$S3_PORT" --pattern "ok,503,reset,ok,stall,short,503,ok" --stall 4
"$DLC_BIN/cachewarm" s3://b/obj.bin -o "$out/faults.bin" --endpoint "http://127.0.0.1:$PROXY_PORT" \
    --chunk-size 4M --connections 4 --timeout 1 --no-verify --json \
    >"$out/faults.json" 2>"$out/faults.err" || fail "through faults: $(cat "$out/faults.err")"
cmp "$warm_tmp/obj.bin" "$out/faults.bin" || fail "the file differs after faults"
retries=$(json_get "$out/faults.json" retries)
[ "$retries" -ge 4 ] || fail "only $retries retries: the faults did not happen"
grep -q "retry" "$out/faults.err" || fail "retries were not reported"
note "$retries retries; proxy: $(stats "$PROXY_PORT")"

note "a server that keeps failing: a clear error after the retries"
warm_start_proxy always503 "$S3_PORT" --pattern 503
set +e
"$DLC_BIN/cachewarm" s3://b/obj.bin -o "$out/never.bin" --endpoint "http://127.0.0.1:$PROXY_PORT" \
    --retries 2 --no-verify 2>"$out/never.err"
rc=$?
set -e
[ $rc = 1 ] || fail "always 503: exit $rc"
grep -q "gave up after 3 attempts: HTTP 503: SlowDown" "$out/never.err" ||
    fail "503 not explained: $(cat "$out/never.err")"
[ ! -e "$out/never.bin" ] || fail "a file under the final name after 503s"

note "four concurrent invocations download once"
# Slow enough (40 MB/s) that all four start while the first is downloading.
warm_start_proxy count "$S3_PORT" --rate 40000000
pids=()
for i in 1 2 3 4; do
    "$DLC_BIN/cachewarm" s3://b/obj.bin -o "$out/shared.bin" \
        --endpoint "http://127.0.0.1:$PROXY_PORT" --chunk-size 4M --no-verify --json \
        >"$out/rank$i.json" 2>"$out/rank$i.err" &
    pids+=("$!")
done
for p in "${pids[@]}"; do
    wait "$p" || fail "a concurrent invocation failed: $(cat "$out"/rank*.err)"
done
cmp "$warm_tmp/obj.bin" "$out/shared.bin" || fail "the shared file differs"
st=$(stats "$PROXY_PORT")
note "proxy: $st"
bytes=$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["bytes"])' "$st")
gets=$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["gets"])' "$st")
chunks=$(((size + 4194304 - 1) / 4194304))
downloaders=0
for i in 1 2 3 4; do
    [ "$(json_get "$out/rank$i.json" bytes_downloaded)" = 0 ] || downloaders=$((downloaders + 1))
done
[ "$downloaders" = 1 ] || fail "$downloaders invocations downloaded"
# One probe and one GET per chunk, plus at most one probe per late starter.
[ "$gets" -le $((chunks + 4)) ] || fail "$gets GETs for $chunks chunks"
[ "$bytes" -lt $((size + 4 * 4194304)) ] || fail "$bytes bytes through the proxy for $size"

note "a full destination disk"
warm_mnt=$warm_tmp/small
mkdir -p "$warm_mnt"
if mount -t tmpfs -o size=16m tmpfs "$warm_mnt" 2>/dev/null; then
    set +e
    "$DLC_BIN/cachewarm" s3://b/obj.bin -o "$warm_mnt/full.bin" --endpoint "$S3_URL" \
        --no-verify 2>"$out/full.err"
    rc=$?
    set -e
    [ $rc = 1 ] || fail "full disk: exit $rc"
    grep -q "No space left on device" "$out/full.err" || fail "ENOSPC not explained: $(cat "$out/full.err")"
    [ ! -e "$warm_mnt/full.bin" ] || fail "a file under the final name on a full disk"
    [ ! -e "$warm_mnt/full.bin.warm-part" ] || fail "the partial file was left on a full disk"
    umount "$warm_mnt"
    warm_mnt=
else
    warm_mnt=
    note "SKIP full-disk case: mounting a tmpfs is not permitted here"
fi
echo "warm_faults: ok"
