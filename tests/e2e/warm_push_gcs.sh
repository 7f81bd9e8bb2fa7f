#!/usr/bin/env bash
# cachewarm push to gs:// against the project's own GCS server (tests/lib/gcsserver.py, which
# speaks the JSON API's resumable upload sessions and checks the bearer token): a store goes up
# and comes back bit-exact with its MD5 checked (x-goog-hash); a push SIGKILLed midway asks its
# session how far it got and sends the rest; a session the server no longer knows starts over;
# a server that persists less of a chunk than it was sent is followed; a chunk that fails is
# followed by a question to the session; a wrong token is named;
# a set goes up shards first and index last and comes back; neither the token nor the session
# URI appears in any output.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"

TOKEN=ya29.TokenMustNotLeak4711
warm_start_gcs --token "$TOKEN" --short-every 5
gcs=http://127.0.0.1:$GCS_PORT
root=$warm_tmp/gcsroot
mkdir -p "$root/bkt"
warm_make_store "$warm_tmp/src" 100 448
size=$(stat -c %s "$STORE")
out=$warm_tmp/out
mkdir -p "$out"
export DLCACHE_STATE_DIR=$warm_tmp/state GOOGLE_OAUTH_ACCESS_TOKEN=$TOKEN DLCACHE_GCS_ENDPOINT=$gcs

# session_bytes: what the server has persisted of the open sessions.
session_bytes() {
    local n=0 f
    for f in "$root"/.uploads/*.data; do
        [ -e "$f" ] && n=$((n + $(stat -c %s "$f")))
    done
    echo "$n"
}
fetch_back() {
    rm -f "$out/back.dlc" "$out/back.dlc.warm"
    "$DLC_BIN/cachewarm" "gs://bkt/$1" -o "$out/back.dlc" $WARM_VERIFY --json \
        >"$out/back.json" 2>"$out/back.err" || fail "download of $1: $(cat "$out/back.err")"
    cmp "$STORE" "$out/back.dlc" || fail "$1 differs from the store"
    [ "$(json_get "$out/back.json" md5_checked)" = true ] || fail "$1: the MD5 was not checked"
}

note "push a store in chunks (one of five persisted short), fetch it back"
"$DLC_BIN/cachewarm" push "$STORE" gs://bkt/stores/train.dlc --part-size 1M --json \
    >"$out/p1.json" 2>"$out/p1.err" || fail "push: $(cat "$out/p1.err")"
[ "$(json_get "$out/p1.json" bytes)" = "$size" ] || fail "bytes"
[ "$(json_get "$out/p1.json" resumed)" = false ] || fail "resumed a fresh push"
sent=$(json_get "$out/p1.json" bytes_uploaded)
[ "$sent" -gt "$size" ] || fail "no chunk was sent again after a short persist ($sent of $size)"
[ -z "$(ls "$DLCACHE_STATE_DIR")" ] || fail "a journal was left after a push that succeeded"
fetch_back stores/train.dlc

note "SIGKILL midway: the rerun asks the session and sends the rest"
warm_start_proxy slow "$GCS_PORT" --rate 20000000
"$DLC_BIN/cachewarm" push "$STORE" gs://bkt/k/a.dlc --endpoint "http://127.0.0.1:$PROXY_PORT" \
    --part-size 1M -q 2>"$out/killed.err" &
pid=$!
for i in $(seq 1 600); do
    [ "$(session_bytes)" -ge $((size / 4)) ] && break
    sleep 0.02
done
kill -9 "$pid" 2>/dev/null || fail "the push finished before it could be killed"
wait "$pid" 2>/dev/null || true
sleep 0.5
had=$(session_bytes)
note "killed with $had of $size bytes in the session"
"$DLC_BIN/cachewarm" push "$STORE" gs://bkt/k/a.dlc --part-size 1M --json \
    >"$out/p2.json" 2>"$out/p2.err" || fail "rerun: $(cat "$out/p2.err")"
[ "$(json_get "$out/p2.json" resumed)" = true ] || fail "the rerun did not resume"
grep -q "resuming: the upload session has" "$out/p2.err" || fail "no word of the session"
sent=$(json_get "$out/p2.json" bytes_uploaded)
# The bytes that were missing, and those the server persisted short (one chunk in five).
[ "$sent" -le $((size - had + size / 10)) ] || fail "the rerun sent $sent bytes, $had were there"
note "the rerun sent $sent of $size bytes"
fetch_back k/a.dlc

note "a session the server no longer knows starts over"
"$DLC_BIN/cachewarm" push "$STORE" gs://bkt/k/b.dlc --endpoint "http://127.0.0.1:$PROXY_PORT" \
    --part-size 1M -q 2>>"$out/killed.err" &
pid=$!
for i in $(seq 1 600); do
    [ "$(session_bytes)" -ge $((size / 4)) ] && break
    sleep 0.02
done
kill -9 "$pid" 2>/dev/null || fail "the push finished before it could be killed"
wait "$pid" 2>/dev/null || true
sleep 0.5
rm -f "$root"/.uploads/*
"$DLC_BIN/cachewarm" push "$STORE" gs://bkt/k/b.dlc --part-size 1M --json \
    >"$out/p3.json" 2>"$out/p3.err" || fail "rerun: $(cat "$out/p3.err")"
grep -q "the upload session is gone" "$out/p3.err" || fail "no word of the lost session"
fetch_back k/b.dlc

note "chunks that fail (503, a reset) are followed by a question to the session"
warm_start_proxy faults "$GCS_PORT" --put-pattern "ok,503,ok,ok,reset,ok"
"$DLC_BIN/cachewarm" push "$STORE" gs://bkt/k/f.dlc --endpoint "http://127.0.0.1:$PROXY_PORT" \
    --part-size 1M --json >"$out/p6.json" 2>"$out/p6.err" || fail "through faults: $(cat "$out/p6.err")"
[ "$(json_get "$out/p6.json" retries)" -ge 2 ] || fail "the faults did not happen"
fetch_back k/f.dlc

note "a wrong token is named, and nothing is made"
set +e
GOOGLE_OAUTH_ACCESS_TOKEN=ya29.WrongTokenMustNotLeak "$DLC_BIN/cachewarm" push "$STORE" \
    gs://bkt/k/c.dlc --json >"$out/p4.json" 2>"$out/p4.err"
rc=$?
set -e
[ $rc = 1 ] || fail "wrong token: exit $rc"
grep -q "gs://bkt/k/c.dlc: starting a resumable upload: HTTP 403: Invalid Credentials" \
    "$out/p4.err" || fail "403 not explained: $(cat "$out/p4.err")"
[ ! -e "$root/bkt/k/c.dlc" ] || fail "an object was made"

if [ -x "$DLC_BIN/set_split" ] && [ -z "$WARM_VERIFY" ]; then
    note "a set: shards, then the index; fetched back"
    "$DLC_BIN/set_split" "$STORE" 3 "$warm_tmp/set" >/dev/null
    "$DLC_BIN/cachewarm" push "$warm_tmp/set" gs://bkt/sets/s --part-size 1M --json \
        >"$out/p5.json" 2>"$out/p5.err" || fail "set push: $(cat "$out/p5.err")"
    [ "$(json_get "$out/p5.json" files)" = 4 ] || fail "files of the set"
    "$DLC_BIN/cachewarm" gs://bkt/sets/s -o "$out/set" --json >"$out/g5.json" 2>"$out/g5.err" ||
        fail "set fetch: $(cat "$out/g5.err")"
    [ "$(json_get "$out/g5.json" md5_checked)" = true ] || fail "the set's MD5s were not checked"
    for f in "$warm_tmp/set"/*; do
        cmp "$f" "$out/set/$(basename "$f")" || fail "$(basename "$f") differs"
    done
fi

note "neither the token nor a session URI appears in any output"
if grep -rl -e "$TOKEN" -e WrongTokenMustNotLeak -e UploadSessionMustNotLeak "$out"; then
    fail "a secret was printed"
fi
echo "warm_push_gcs: ok"
