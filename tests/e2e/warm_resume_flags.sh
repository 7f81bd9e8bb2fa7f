#!/usr/bin/env bash
# A download SIGKILLed midway is finished by reruns with another --chunk-size
# AND another --connections than the run that started it. The journal records
# byte ranges, so each rerun keeps every byte already in place and fetches only
# the rest, each missing piece inside one of its own chunks:
#   run 1: 1 MiB chunks, 4 connections, through a slow proxy, killed;
#   run 2: 1.5 MiB chunks, 3 connections, through the proxy, killed;
#   run 3: 4 MiB chunks, 7 connections, straight to s3rver, to the end.
# The result is bit-exact and verified, and run 3's --json report says it
# resumed and downloaded exactly the bytes the journal did not cover, which
# is clearly less than the object.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"

warm_start_s3rver
warm_make_store "$warm_tmp/src" 100 448
s3_put "$STORE" train.dlc
size=$(stat -c %s "$STORE")
note "store: $size bytes"
# About 15 MB/s through the proxy, so that the journal (synced every 0.5 s)
# grows in steps of about an eighth of the object.
warm_start_proxy slow "$S3_PORT" --rate 15000000
slow=http://127.0.0.1:$PROXY_PORT

out=$warm_tmp/out
mkdir -p "$out"
dest=$out/train.dlc
journal=$dest.warm-journal

# covered: the bytes the journal says are in place. Version 2 layout: a
# 32-byte header ("DLCWARM2", size, id, check), then 24-byte records
# {offset, length, check}; overlapping runs are counted once.
covered() {
    "$PY" - "$journal" <<'PYEOF'
import struct, sys
try:
    b = open(sys.argv[1], "rb").read()
except FileNotFoundError:
    b = b""
total = end = 0
if b[:8] == b"DLCWARM2":
    runs = sorted(struct.unpack_from("<QQ", b, o) for o in range(32, len(b) - 23, 24))
    for off, n in runs:
        if off + n > max(off, end):
            total += off + n - max(off, end)
        end = max(end, off + n)
print(total)
PYEOF
}

# kill_when BYTES LOG ARGS...: start a download through the slow proxy with
# ARGS and SIGKILL it once the journal covers BYTES.
kill_when() {
    local want=$1 log=$2 pid i
    shift 2
    "$DLC_BIN/cachewarm" s3://b/train.dlc -o "$dest" --endpoint "$slow" $WARM_VERIFY "$@" \
        2>"$log" &
    pid=$!
    for i in $(seq 1 400); do
        [ "$(covered)" -ge "$want" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null || fail "cachewarm finished before it could be killed at $want bytes"
    wait "$pid" 2>/dev/null || true
    [ ! -e "$dest" ] || fail "a file under the final name after SIGKILL"
    [ -e "$dest.warm-part" ] || fail "no partial file after SIGKILL"
}

kill_when $((size * 15 / 100)) "$out/run1.err" --chunk-size 1M --connections 4 -q
c1=$(covered)
note "run 1 (1 MiB chunks, 4 connections) killed with $c1 of $size bytes journaled"
cp "$journal" "$out/journal1"
jlen1=$(stat -c %s "$out/journal1")

kill_when $((c1 + size * 15 / 100)) "$out/run2.err" --chunk-size 1536K --connections 3
c2=$(covered)
note "run 2 (1.5 MiB chunks, 3 connections) killed with $c2 of $size bytes journaled"
grep -q "resuming: $c1 of $size bytes are already here" "$out/run2.err" ||
    fail "run 2 did not resume from run 1's $c1 bytes: $(cat "$out/run2.err")"
# Run 2 appended to run 1's journal instead of starting it over.
cmp -n "$jlen1" "$out/journal1" "$journal" || fail "run 2 rewrote run 1's journal records"
[ "$c2" -gt "$c1" ] || fail "run 2 added nothing to the journal ($c1 -> $c2)"
[ "$c2" -lt "$size" ] || fail "the download completed before the second kill"

note "run 3 (4 MiB chunks, 7 connections) to the end"
"$DLC_BIN/cachewarm" s3://b/train.dlc -o "$dest" --endpoint "$S3_URL" --chunk-size 4M \
    --connections 7 $WARM_VERIFY --json >"$out/final.json" 2>"$out/final.err" ||
    fail "$(cat "$out/final.err")"
got=$(json_get "$out/final.json" bytes_downloaded)
retries=$(json_get "$out/final.json" retries)
[ "$(json_get "$out/final.json" ok)" = true ] || fail "run 3 failed"
[ "$(json_get "$out/final.json" resumed)" = true ] || fail "run 3 did not resume"
[ "$(json_get "$out/final.json" bytes)" = "$size" ] || fail "bytes"
[ "$(json_get "$out/final.json" chunk_size)" = $((4 << 20)) ] || fail "chunk_size"
[ "$(json_get "$out/final.json" connections)" = 7 ] || fail "connections"
if [ -z "$WARM_VERIFY" ]; then
    [ "$(json_get "$out/final.json" verified)" = true ] || fail "run 3 did not verify the store"
fi
cmp "$STORE" "$dest" || fail "the resumed download differs from the object"
[ ! -e "$journal" ] && [ ! -e "$dest.warm-part" ] || fail "journal or partial file left behind"
# Exactly the bytes the journal did not cover (a retried request may add some).
if [ "$retries" = 0 ]; then
    [ "$got" -eq $((size - c2)) ] || fail "run 3 fetched $got bytes, $((size - c2)) were missing"
else
    [ "$got" -lt "$size" ] || fail "run 3 fetched everything ($got of $size)"
fi
# Clearly less than the object: runs 1 and 2 left at least 30% of it.
[ $((got * 10)) -le $((size * 7)) ] || fail "run 3 fetched $got of $size bytes"
note "run 3 fetched $got of $size bytes ($((got * 100 / size))%), chunks_fetched" \
    "$(json_get "$out/final.json" chunks_fetched) of $(json_get "$out/final.json" chunks)"
echo "warm_resume_flags: ok"
