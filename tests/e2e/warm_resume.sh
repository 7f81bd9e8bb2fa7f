#!/usr/bin/env bash
# cachewarm is SIGKILLed at several points of a download (slowed down by a
# rate-limited proxy of the test's own in front of s3rver); each rerun fetches
# only what is missing and the last one publishes a valid, bit-exact store.
# An object that changed between runs is fetched again from the start.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"

warm_start_s3rver
warm_make_store "$warm_tmp/src" 100 448
s3_put "$STORE" train.dlc
size=$(stat -c %s "$STORE")
chunk=$((1024 * 1024))
nchunks=$(((size + chunk - 1) / chunk))
note "store: $size bytes, $nchunks chunks of 1 MiB"
# About 30 MB/s through the proxy: long enough to stop the download midway.
warm_start_proxy slow "$S3_PORT" --rate 30000000
slow=http://127.0.0.1:$PROXY_PORT

out=$warm_tmp/out
mkdir -p "$out"
dest=$out/train.dlc
journal=$dest.warm-journal
records() { # chunks journaled so far (32-byte header, a 24-byte record per 1 MiB chunk)
    local n
    n=$(stat -c %s "$journal" 2>/dev/null || echo 0)
    [ "$n" -ge 32 ] && echo $(((n - 32) / 24)) || echo 0
}

# kill_at N: start a download through the slow proxy, SIGKILL it once N
# chunks are journaled.
kill_at() {
    local want=$1 pid i
    "$DLC_BIN/cachewarm" s3://b/train.dlc -o "$dest" --endpoint "$slow" --chunk-size 1M \
        --connections 4 $WARM_VERIFY -q &
    pid=$!
    for i in $(seq 1 600); do
        [ "$(records)" -ge "$want" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.02
    done
    kill -9 "$pid" 2>/dev/null || fail "cachewarm finished before it could be killed at $want"
    wait "$pid" 2>/dev/null || true
    [ ! -e "$dest" ] || fail "a file under the final name after SIGKILL"
    note "killed with $(records) of $nchunks chunks journaled"
}

kill_at 8
first=$(records)
kill_at $((first + 15))
second=$(records)
[ "$second" -gt "$first" ] || fail "the second run did not add to the journal ($first -> $second)"
[ "$second" -lt "$nchunks" ] || fail "the download completed before the kill"

note "rerun to the end"
"$DLC_BIN/cachewarm" s3://b/train.dlc -o "$dest" --endpoint "$S3_URL" --chunk-size 1M \
    $WARM_VERIFY --json >"$out/final.json" 2>"$out/final.err" || fail "$(cat "$out/final.err")"
got=$(json_get "$out/final.json" bytes_downloaded)
[ "$(json_get "$out/final.json" resumed)" = true ] || fail "the rerun did not resume"
[ "$(json_get "$out/final.json" bytes)" = "$size" ] || fail "bytes"
[ "$got" -lt "$size" ] || fail "the rerun fetched everything ($got of $size)"
[ "$got" -le $((size - second * chunk)) ] || fail "the rerun fetched journaled chunks ($got)"
cmp "$STORE" "$dest" || fail "the resumed download differs from the object"
[ ! -e "$journal" ] || fail "journal left behind"
note "rerun fetched $got of $size bytes"

note "a partial download of an object that changed is started over"
head -c 20000000 /dev/urandom >"$warm_tmp/a.bin"
s3_put "$warm_tmp/a.bin" obj.bin
dest=$out/obj.bin
journal=$dest.warm-journal
"$DLC_BIN/cachewarm" s3://b/obj.bin -o "$dest" --endpoint "$slow" --chunk-size 1M \
    --connections 2 --no-verify -q &
pid=$!
for i in $(seq 1 600); do
    [ "$(records)" -ge 3 ] && break
    sleep 0.02
done
kill -9 "$pid" 2>/dev/null || fail "cachewarm finished before it could be killed"
wait "$pid" 2>/dev/null || true
head -c 20000000 /dev/urandom >"$warm_tmp/b.bin"
s3_put "$warm_tmp/b.bin" obj.bin
"$DLC_BIN/cachewarm" s3://b/obj.bin -o "$dest" --endpoint "$S3_URL" --chunk-size 1M \
    --no-verify --json >"$out/changed.json" 2>/dev/null
[ "$(json_get "$out/changed.json" resumed)" = false ] || fail "resumed a changed object"
cmp "$warm_tmp/b.bin" "$dest" || fail "the changed object differs"
echo "warm_resume: ok"
