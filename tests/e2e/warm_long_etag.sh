#!/usr/bin/env bash
# A server whose ETags are long (300 bytes) and share all but their last bytes, as an https
# server's W/"<long path>-<mtime>" or a CDN's opaque tags may (tests/lib/gcsserver.py
# --long-etag). cachewarm used to keep the first 127 bytes of an ETag, so every version of such
# an object looked the same: a partial download was resumed with the bytes of another version,
# and chunks fetched after a change were assembled with those before it. Now:
#   1. an unchanged object downloads, is found complete again, and resumes after a SIGKILL;
#   2. an object changed between a killed download and its rerun is fetched from the start;
#   3. an object changed during a download fails naming the object (or, had every chunk come
#      before the change, publishes the old version whole), never a file mixing the two, and
#      the next run publishes the new version;
#   4. a sidecar written by an older cachewarm, whose ETag is the 127-byte cut, matches no
#      version: the download is made again.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"

ETAG_LEN=300
warm_start_gcs --long-etag "$ETAG_LEN"
root=$warm_tmp/gcsroot/files
mkdir -p "$root"
warm_start_proxy slow "$GCS_PORT" --rate 1500000
fast=http://127.0.0.1:$GCS_PORT/files
slow=http://127.0.0.1:$PROXY_PORT/files
out=$warm_tmp/out
mkdir -p "$out"
size=$((4 * 1024 * 1024))
chunk=$((256 * 1024))
nchunks=$((size / chunk))

# put NAME FROM STAMP: make FROM the object NAME (by rename: a download already under way keeps
# reading the old file), modified at STAMP (seconds), which its ETag's last bytes carry.
put() {
    cp "$2" "$root/$1.new"
    touch -d "@$3" "$root/$1.new"
    mv "$root/$1.new" "$root/$1"
}
# server_etag NAME: the ETag the server sends for NAME.
server_etag() {
    curl -sS -o /dev/null -D - "$fast/$1" | tr -d '\r' | sed -n 's/^[Ee][Tt][Aa][Gg]: //p'
}
records() { # pieces journaled so far for DEST $1 (a 32-byte header, 24 bytes a record)
    local n
    n=$(stat -c %s "$1.warm-journal" 2>/dev/null || echo 0)
    [ "$n" -ge 32 ] && echo $(((n - 32) / 24)) || echo 0
}
# slow_until DEST N NAME: start a download of NAME through the slow proxy into DEST; sets PID,
# and returns once N pieces are journaled. Its rerun goes through the proxy too: the journal
# and the sidecar are those of one URL.
slow_until() {
    "$DLC_BIN/cachewarm" "$slow/$3" -o "$1" --chunk-size "$chunk" --connections 2 --no-verify \
        --json >"$1.json" 2>"$1.err" &
    PID=$!
    for _ in $(seq 1 1000); do
        [ "$(records "$1")" -ge "$2" ] && return 0
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.02
    done
    fail "the download of $3 finished or stalled before $2 pieces were journaled: $(cat "$1.err")"
}
kill_now() {
    kill -9 "$PID" 2>/dev/null || fail "cachewarm finished before it could be killed"
    wait "$PID" 2>/dev/null || true
    [ ! -e "$1" ] || fail "a file under the final name after SIGKILL"
}

head -c "$size" /dev/urandom >"$warm_tmp/v1.bin"
head -c "$size" /dev/urandom >"$warm_tmp/v2.bin"
put obj.bin "$warm_tmp/v1.bin" 1000000000
e1=$(server_etag obj.bin)
put obj.bin "$warm_tmp/v2.bin" 2000000000
e2=$(server_etag obj.bin)
if [ "${#e1}" -ne "$ETAG_LEN" ] || [ "${#e2}" -ne "$ETAG_LEN" ]; then
    fail "the server's ETags are ${#e1} and ${#e2} bytes, not $ETAG_LEN"
fi
same=0
while [ "${e1:same:1}" = "${e2:same:1}" ] && [ "$same" -lt "$ETAG_LEN" ]; do
    same=$((same + 1))
done
if [ "$same" -lt 200 ] || [ "$e1" = "$e2" ]; then
    fail "the two versions' ETags must share their first 200 bytes and differ"
fi
note "two versions, ETags of $ETAG_LEN bytes equal in their first $same"

note "1. an unchanged object with a long ETag: download, found complete, resume"
put obj.bin "$warm_tmp/v1.bin" 1000000000
dest=$out/one.bin
"$DLC_BIN/cachewarm" "$fast/obj.bin" -o "$dest" --chunk-size "$chunk" --no-verify \
    --json >"$out/one.json" 2>"$out/one.err" || fail "download: $(cat "$out/one.err")"
cmp "$warm_tmp/v1.bin" "$dest" || fail "the download differs from the object"
kept=$(json_get "$out/one.json" etag)
case $kept in
dlcache-xxh3:*) ;;
*) fail "the long ETag is reported as '$kept', not as its digest" ;;
esac
"$DLC_BIN/cachewarm" "$fast/obj.bin" -o "$dest" --chunk-size "$chunk" --no-verify \
    --json >"$out/again.json" 2>"$out/again.err" || fail "rerun: $(cat "$out/again.err")"
[ "$(json_get "$out/again.json" already_complete)" = true ] ||
    fail "the rerun did not find the copy complete"
[ "$(json_get "$out/again.json" etag)" = "$kept" ] || fail "the digest differs between runs"

dest=$out/resume.bin
slow_until "$dest" 3 obj.bin
kill_now "$dest"
have=$(records "$dest")
"$DLC_BIN/cachewarm" "$slow/obj.bin" -o "$dest" --chunk-size "$chunk" --no-verify \
    --json >"$out/resume.json" 2>"$out/resume.err" || fail "resume: $(cat "$out/resume.err")"
[ "$(json_get "$out/resume.json" resumed)" = true ] || fail "the rerun did not resume"
got=$(json_get "$out/resume.json" bytes_downloaded)
[ "$got" -le $((size - have * chunk)) ] || fail "the resume fetched journaled pieces ($got)"
cmp "$warm_tmp/v1.bin" "$dest" || fail "the resumed download differs from the object"
note "resumed with $have of $nchunks pieces journaled, fetched $got of $size bytes"

note "2. changed between a killed download and its rerun: fetched from the start"
put obj.bin "$warm_tmp/v1.bin" 1000000000
dest=$out/two.bin
slow_until "$dest" 3 obj.bin
kill_now "$dest"
put obj.bin "$warm_tmp/v2.bin" 2000000000
"$DLC_BIN/cachewarm" "$slow/obj.bin" -o "$dest" --chunk-size "$chunk" --no-verify \
    --json >"$out/two.json" 2>"$out/two.err" || fail "rerun: $(cat "$out/two.err")"
[ "$(json_get "$out/two.json" resumed)" = false ] ||
    fail "resumed the download of another version (its ETag shares the first $same bytes)"
cmp -s "$warm_tmp/v2.bin" "$dest" || fail "the rerun did not publish the new version"

note "3. changed during a download: refused, never a mix"
put obj.bin "$warm_tmp/v1.bin" 1000000000
dest=$out/three.bin
slow_until "$dest" 2 obj.bin
put obj.bin "$warm_tmp/v2.bin" 2000000000
set +e
wait "$PID"
rc=$?
set -e
if [ "$rc" -eq 0 ]; then
    cmp -s "$warm_tmp/v1.bin" "$dest" ||
        fail "published a file that is not the version it started with (a mix of the two?)"
    note "every piece had come before the change: the old version was published whole"
else
    [ ! -e "$dest" ] || fail "failed, but left a file under the final name"
    said=$(cat "$dest.err" "$dest.json")
    grep -q "/files/obj.bin" <<<"$said" || fail "failed without naming the object: $said"
    grep -qi "changed" <<<"$said" || fail "failed without saying the object changed: $said"
    note "refused: $(tail -1 "$dest.err")"
fi
"$DLC_BIN/cachewarm" "$slow/obj.bin" -o "$dest" --chunk-size "$chunk" --no-verify \
    --json >"$out/four.json" 2>"$out/four.err" || fail "the next run: $(cat "$out/four.err")"
cmp -s "$warm_tmp/v2.bin" "$dest" || fail "the next run did not publish the new version"
note "4. a sidecar of an older cachewarm (the ETag cut at 127 bytes) vouches for nothing"
dest=$out/one.bin
grep -q "^etag $kept\$" "$dest.warm" || fail "the sidecar does not hold the digest: $(cat "$dest.warm")"
old=${e1:0:127}
awk -v e="$old" '/^etag /{print "etag " e; next} {print}' "$dest.warm" >"$dest.warm.old"
mv "$dest.warm.old" "$dest.warm"
put obj.bin "$warm_tmp/v2.bin" 2000000000
[ "${e2:0:127}" = "$old" ] || fail "the new version's ETag must share the old sidecar's 127 bytes"
"$DLC_BIN/cachewarm" "$fast/obj.bin" -o "$dest" --chunk-size "$chunk" --no-verify \
    --json >"$out/old.json" 2>"$out/old.err" || fail "rerun: $(cat "$out/old.err")"
[ "$(json_get "$out/old.json" already_complete)" = false ] ||
    fail "an old sidecar's cut ETag passed the new version for the copy it has"
cmp -s "$warm_tmp/v2.bin" "$dest" || fail "the rerun did not publish the new version"
echo "warm_long_etag: ok"
