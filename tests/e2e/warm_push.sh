#!/usr/bin/env bash
# cachewarm push against a real S3 server (s3rver on loopback): a store goes up in parallel
# multipart uploads and comes back bit-exact, verified and MD5-checked; a push SIGKILLed midway
# is resumed by a rerun that sends only the missing parts, whether the server can list them
# (ListParts through tests/lib/faultproxy.py --s3-data, since s3rver lacks it) or not (the
# journal is trusted); a journaled part the server lost is sent again; an upload the server no
# longer knows starts over; a part corrupted on the way (or answered with a wrong ETag) is sent
# again, and refused for good when it keeps failing; a bucket whose ETags are not MD5s (KMS) is
# refused at once; a part corrupted at rest on the server is
# caught by the check after completing and the object deleted; a CompleteMultipartUpload kept
# alive with spaces for ever ends at its deadline; secrets appear in no output.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"

warm_start_s3rver
warm_make_store "$warm_tmp/src" 100 448
size=$(stat -c %s "$STORE")
part=$((1024 * 1024))
nparts=$(((size + part - 1) / part))
note "store: $size bytes, $nparts parts of 1 MiB"
out=$warm_tmp/out
mkdir -p "$out"
export DLCACHE_STATE_DIR=$warm_tmp/state
export AWS_SESSION_TOKEN=SessionTokenMustNotLeak123
uploads=$warm_tmp/s3data/b/._S3rver_uploads
run=0
nslow=0

# push ARGS...: cachewarm push with its report in $out/push$run.json and stderr beside it.
push() {
    run=$((run + 1))
    set +e
    "$DLC_BIN/cachewarm" push "$@" --json >"$out/push$run.json" 2>"$out/push$run.err"
    rc=$?
    set -e
}
# parts_journaled: part records in the push journal (layout in cache/warm/warm_internal.h).
parts_journaled() {
    "$PY" - "$DLCACHE_STATE_DIR" <<'PYEOF'
import glob, struct, sys
n = 0
for p in glob.glob(sys.argv[1] + "/push-*.journal"):
    b = open(p, "rb").read()
    if b[:8] == b"DLCPUSH1":
        idlen = struct.unpack_from("<I", b, 48)[0]
        off = 56 + idlen + 8
        n += sum(1 for o in range(off, len(b) - 39, 40) if struct.unpack_from("<I", b, o)[0] > 0)
print(n)
PYEOF
}
# kill_push WANT URL: start a push through a proxy of its own that slows it down (20 MB/s), and
# SIGKILL it once WANT parts are journaled; then the proxy too, so that no request of the dead
# push reaches the server later.
kill_push() {
    local want=$1 url=$2 pid proxy i
    nslow=$((nslow + 1))
    warm_start_proxy "slow$nslow" "$S3_PORT" --rate 20000000
    proxy=$!
    "$DLC_BIN/cachewarm" push "$STORE" "$url" --endpoint "http://127.0.0.1:$PROXY_PORT" \
        --part-size 1M --connections 4 -q 2>>"$out/killed.err" &
    pid=$!
    for i in $(seq 1 600); do
        [ "$(parts_journaled)" -ge "$want" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.02
    done
    kill -9 "$pid" 2>/dev/null || fail "the push finished before it could be killed at $want parts"
    wait "$pid" 2>/dev/null || true
    kill -9 "$proxy"
    wait "$proxy" 2>/dev/null || true
    sleep 0.3 # s3rver sees the proxy's connections close and drops their parts.
    killed=$(parts_journaled)
    note "killed with $killed of $nparts parts journaled"
    [ "$killed" -lt "$nparts" ] || fail "every part was journaled before the kill"
}
# fetch_back KEY: download KEY and compare with the store.
fetch_back() {
    rm -f "$out/back.dlc" "$out/back.dlc.warm"
    "$DLC_BIN/cachewarm" "s3://b/$1" -o "$out/back.dlc" --endpoint "$S3_URL" --json \
        >"$out/back.json" 2>"$out/back.err" || fail "download of $1: $(cat "$out/back.err")"
    cmp "$STORE" "$out/back.dlc" || fail "$1 differs from the store"
    [ "$(json_get "$out/back.json" verified)" = true ] || fail "$1 was not verified"
    [ "$(json_get "$out/back.json" md5_checked)" = true ] || fail "$1: the MD5 was not checked"
}
head_status() { curl -s -o /dev/null -w '%{http_code}' -I "$S3_URL/b/$1"; }

note "push a store in parts, fetch it back"
push "$STORE" s3://b/stores/train.dlc --endpoint "$S3_URL" --part-size 1M --connections 8
[ "$rc" = 0 ] || fail "push: $(cat "$out/push$run.err")"
[ "$(json_get "$out/push$run.json" parts)" = "$nparts" ] || fail "parts in the report"
[ "$(json_get "$out/push$run.json" parts_uploaded)" = "$nparts" ] || fail "parts_uploaded"
[ "$(json_get "$out/push$run.json" bytes_uploaded)" = "$size" ] || fail "bytes_uploaded"
[ "$(json_get "$out/push$run.json" resumed)" = false ] || fail "a fresh push resumed"
[ -z "$(ls "$DLCACHE_STATE_DIR")" ] || fail "a journal was left after a push that succeeded"
curl -sI "$S3_URL/b/stores/train.dlc" | grep -qi "x-amz-meta-dlcache-part-size: $part" ||
    fail "the object does not carry its part size"
fetch_back stores/train.dlc
note "a URL ending in / gets the file's name"
push "$STORE" s3://b/stores/ --endpoint "$S3_URL" -q
[ "$rc" = 0 ] && [ "$(head_status stores/store.dlc)" = 200 ] || fail "push to a prefix"

note "SIGKILL midway, rerun with ListParts: only the missing parts are sent"
warm_start_proxy lister "$S3_PORT" --s3-data "$warm_tmp/s3data"
lister=http://127.0.0.1:$PROXY_PORT
kill_push 10 s3://b/k/a.dlc
[ "$(head_status k/a.dlc)" = 404 ] || fail "an object exists after the killed push"
push "$STORE" s3://b/k/a.dlc --endpoint "$lister" --part-size 1M
[ "$rc" = 0 ] || fail "rerun: $(cat "$out/push$run.err")"
[ "$(json_get "$out/push$run.json" resumed)" = true ] || fail "the rerun did not resume"
resumed=$(json_get "$out/push$run.json" parts_resumed)
sent=$(json_get "$out/push$run.json" bytes_uploaded)
[ "$resumed" -ge "$killed" ] || fail "only $resumed parts resumed, $killed were journaled"
[ "$sent" -le $((size - killed * part)) ] || fail "the rerun sent $sent bytes"
note "rerun sent $sent of $size bytes ($resumed parts resumed)"
fetch_back k/a.dlc

note "a journaled part the server lost is sent again"
kill_push 10 s3://b/k/b.dlc
upload=$(ls -t "$uploads" | head -1)
rm "$uploads/$upload/3" "$uploads/$upload/3.md5"
push "$STORE" s3://b/k/b.dlc --endpoint "$lister" --part-size 1M
[ "$rc" = 0 ] || fail "rerun after a lost part: $(cat "$out/push$run.err")"
grep -q "journaled parts are not on the server" "$out/push$run.err" || fail "the lost part was not noticed"
[ "$(json_get "$out/push$run.json" parts_resumed)" -lt "$killed" ] || fail "the lost part was counted"
fetch_back k/b.dlc

note "an upload the server no longer knows starts over"
kill_push 10 s3://b/k/c.dlc
rm -rf "${uploads:?}"/*
push "$STORE" s3://b/k/c.dlc --endpoint "$lister" --part-size 1M
[ "$rc" = 0 ] || fail "rerun after a lost upload: $(cat "$out/push$run.err")"
grep -q "no longer knows the upload" "$out/push$run.err" || fail "the lost upload was not noticed"
[ "$(json_get "$out/push$run.json" resumed)" = false ] || fail "resumed a lost upload"
[ "$(json_get "$out/push$run.json" bytes_uploaded)" = "$size" ] || fail "did not send everything"
fetch_back k/c.dlc

note "a server without ListParts: the journal is trusted"
kill_push 10 s3://b/k/d.dlc
push "$STORE" s3://b/k/d.dlc --endpoint "$S3_URL" --part-size 1M
[ "$rc" = 0 ] || fail "rerun without ListParts: $(cat "$out/push$run.err")"
grep -q "trusting the journal" "$out/push$run.err" || fail "no notice about the journal"
[ "$(json_get "$out/push$run.json" parts_resumed)" -ge "$killed" ] || fail "nothing resumed"
fetch_back k/d.dlc

note "a part corrupted on the way is sent again; for good, it is refused"
warm_start_proxy corrupt1 "$S3_PORT" --put-pattern "ok,corrupt,ok,ok,ok,ok,ok,ok,ok,ok"
push "$STORE" s3://b/k/e.dlc --endpoint "http://127.0.0.1:$PROXY_PORT" --part-size 4M
[ "$rc" = 0 ] || fail "push through one corruption: $(cat "$out/push$run.err")"
[ "$(json_get "$out/push$run.json" retries)" -ge 1 ] || fail "the corrupt part was not retried"
grep -q "is not the MD5 of the bytes sent" "$out/push$run.err" || fail "no word of the bad ETag"
fetch_back k/e.dlc
for fault in corrupt etag; do
    warm_start_proxy "always$fault" "$S3_PORT" --put-pattern "$fault"
    push "$STORE" s3://b/k/f.dlc --endpoint "http://127.0.0.1:$PROXY_PORT" --part-size 4M \
        --retries 2
    [ "$rc" = 1 ] || fail "$fault every time: exit $rc"
    grep -q "corrupt data: s3://b/k/f.dlc: UploadPart .*gave up after 3 attempts: the part's ETag" \
        "$out/push$run.err" ||
        fail "$fault: $(cat "$out/push$run.err")"
    grep -q "s3://b/k/f.dlc: UploadPart" "$out/push$run.err" || fail "$fault: the object is not named"
    [ "$(head_status k/f.dlc)" = 404 ] || fail "$fault: an object was made"
done

note "a bucket encrypting with KMS keys (ETags that are not MD5s) is refused at the first part"
warm_start_proxy kms "$S3_PORT" --put-pattern kms
push "$STORE" s3://b/k/kms.dlc --endpoint "http://127.0.0.1:$PROXY_PORT" --part-size 4M
[ "$rc" = 1 ] || fail "KMS: exit $rc"
grep -q "encrypts with KMS keys, whose ETags are not the MD5" "$out/push$run.err" ||
    fail "KMS not explained: $(cat "$out/push$run.err")"
[ "$(json_get "$out/push$run.json" retries)" = 0 ] || fail "KMS: parts were sent again"

note "a part corrupted at rest on the server: the check after completing deletes the object"
rm -f "$DLCACHE_STATE_DIR"/*
warm_start_proxy slowg "$S3_PORT" --rate 20000000
"$DLC_BIN/cachewarm" push "$STORE" s3://b/k/g.dlc --endpoint "http://127.0.0.1:$PROXY_PORT" \
    --part-size 1M \
    --connections 4 --json >"$out/rest.json" 2>"$out/rest.err" &
pid=$!
for i in $(seq 1 600); do
    [ "$(parts_journaled)" -ge 3 ] && break
    sleep 0.02
done
upload=$(ls -t "$uploads" | head -1)
# A part s3rver has finished (it writes N.md5 after N), so that its own writes do not undo ours.
done_part=$(cd "$uploads/$upload" && ls -- *.md5 | head -1)
"$PY" - "$uploads/$upload/${done_part%.md5}" <<'PYEOF'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(1000)
    b = f.read(1)
    f.seek(1000)
    f.write(bytes([b[0] ^ 0x55]))
PYEOF
set +e
wait "$pid"
rc=$?
set -e
[ "$rc" = 1 ] || fail "a part corrupted at rest: exit $rc: $(cat "$out/rest.err")"
grep -q "the server holds other bytes; the object was deleted" "$out/rest.err" ||
    fail "not explained: $(cat "$out/rest.err")"
[ "$(head_status k/g.dlc)" = 404 ] || fail "the bad object was not deleted"
push "$STORE" s3://b/k/g.dlc --endpoint "$S3_URL" --part-size 1M
[ "$rc" = 0 ] && [ "$(json_get "$out/push$run.json" resumed)" = false ] ||
    fail "the rerun after a bad object: $(cat "$out/push$run.err")"
fetch_back k/g.dlc

note "a CompleteMultipartUpload answered with a space now and then, for ever, has a deadline"
warm_start_proxy trickle "$S3_PORT" --complete trickle
push "$STORE" s3://b/k/t.dlc --endpoint "http://127.0.0.1:$PROXY_PORT" --part-size 4M \
    --timeout 1 --retries 0
[ "$rc" = 1 ] || fail "a trickled CompleteMultipartUpload: exit $rc: $(cat "$out/push$run.err")"
grep -q "s3://b/k/t.dlc: CompleteMultipartUpload.*no answer in 20 s (20 x timeout_s" \
    "$out/push$run.err" || fail "the deadline is not named: $(cat "$out/push$run.err")"
[ "$(head_status k/t.dlc)" = 404 ] || fail "a trickled CompleteMultipartUpload made an object"

note "errors name the object and the server's Code and Message"
push "$STORE" s3://nosuchbucket/x.dlc --endpoint "$S3_URL" --part-size 1M
[ "$rc" = 1 ] || fail "no such bucket: exit $rc"
grep -q "s3://nosuchbucket/x.dlc: CreateMultipartUpload: HTTP 404: NoSuchBucket" \
    "$out/push$run.err" || fail "404 not explained: $(cat "$out/push$run.err")"
AWS_ACCESS_KEY_ID=NOTTHEKEY AWS_SECRET_ACCESS_KEY=SecretKeyMustNotLeak456 \
    push "$STORE" s3://b/k/h.dlc --endpoint "$S3_URL"
[ "$rc" = 1 ] && grep -q "HTTP 403: InvalidAccessKeyId" "$out/push$run.err" ||
    fail "403 not explained: $(cat "$out/push$run.err")"

note "secrets appear in no output"
if grep -rl -e SessionTokenMustNotLeak123 -e SecretKeyMustNotLeak456 -e 'S3RVER:' "$out"; then
    fail "a secret was printed"
fi
echo "warm_push: ok"
