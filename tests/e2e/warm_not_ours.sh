#!/usr/bin/env bash
# Issue 32, items 7 and 8: files that are not cachewarm's to replace.
# - A regular file at DEST that cachewarm did not download there (no DEST.warm names it) is
#   refused, left as it was, with nothing beside it; --force replaces it; our own download is
#   refreshed without it. A folder as DEST of one object is refused before the download.
# - A destination that exists and is not a regular file (a FIFO; as root, a character device made
#   with mknod like /dev/null, the habit of `curl -o /dev/null`) is refused, naming it and what it
#   is, before anything is made beside it: the node stays what it was and no DEST.lock,
#   DEST.warm or DEST.warm-part is left. The real /dev/null is never a target here.
# - A set warmed into a folder of the user's that is not empty and not this set's (a file of
#   theirs, a file with a shard's name, another set's index) is refused, naming what is in the
#   way, and the folder is left as it was; --force writes there; an empty folder, the set's own
#   folder again and an interrupted warm of it (shards in, index not yet) are taken.
# The objects come from tests/lib/gcsserver.py's plain URLs on loopback.
. "$(dirname "$0")/../lib/e2e.sh" warm_not_ours

srv=
cleanup() {
    if [ -n "$srv" ]; then kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
export NO_PROXY=127.0.0.1,localhost
export DLCACHE_STATE_DIR=$tmp/state

mkdir -p "$tmp/root/files" "$tmp/dst"
head -c 100000 /dev/urandom >"$tmp/root/files/obj.bin"
"$DLC_BIN/mkdemo" "$tmp/demo" --count 40 --classes 2 >/dev/null
"$DLC_BIN/cachebuild" "$tmp/demo/train" -o "$tmp/root/files/set" --shards 2 --size 32 \
    --threads 1 >/dev/null 2>&1 || fail "cachebuild of the set"
"$DLC_BIN/cachebuild" "$tmp/demo/train" -o "$tmp/other" --shards 2 --size 24 --threads 1 \
    >/dev/null 2>&1 || fail "cachebuild of the other set"
"$PY" "$DLC_SRC/tests/lib/gcsserver.py" --root "$tmp/root" --port-file "$tmp/port" \
    2>/dev/null &
srv=$!
for _ in $(seq 100); do
    [ -s "$tmp/port" ] && break
    sleep 0.1
done
[ -s "$tmp/port" ] || fail "gcsserver.py did not start"
base="http://127.0.0.1:$(cat "$tmp/port")/files"

# refused DEST WHAT: cachewarm of the object into DEST fails naming DEST as WHAT.
refused() {
    set +e
    "$DLC_BIN/cachewarm" "$base/obj.bin" -o "$1" --no-verify --retries 1 -q >"$tmp/out" 2>&1
    local rc=$?
    set -e
    [ "$rc" -ne 0 ] || fail "$1 ($2): cachewarm succeeded"
    grep -q "$1: is $2, not a regular file" "$tmp/out" ||
        { cat "$tmp/out" >&2; fail "$1: the refusal does not name it as $2"; }
    local left
    left=$(ls -A "$(dirname "$1")")
    [ "$left" = "$(basename "$1")" ] || fail "$1: files were left beside it: $left"
}

mkdir "$tmp/dst/f"
mkfifo "$tmp/dst/f/pipe"
refused "$tmp/dst/f/pipe" "a FIFO"
[ -p "$tmp/dst/f/pipe" ] || fail "the FIFO was replaced"
if [ "$(id -u)" = 0 ] && mkdir "$tmp/dst/d" && mknod "$tmp/dst/d/null" c 1 3 2>/dev/null; then
    refused "$tmp/dst/d/null" "a character device"
    [ -c "$tmp/dst/d/null" ] || fail "the device node was replaced"
else
    echo "warm_not_ours: not root or no mknod here: the device node case is not run"
fi
"$DLC_BIN/cachewarm" "$base/obj.bin" -o "$tmp/dst/plain.bin" --no-verify -q ||
    fail "a new file as the destination"
cmp -s "$tmp/dst/plain.bin" "$tmp/root/files/obj.bin" || fail "the download differs"

# warm_obj DEST [FLAGS...]: cachewarm of the object into DEST; its status, the output in $tmp/out.
warm_obj() {
    local d=$1
    shift
    set +e
    "$DLC_BIN/cachewarm" "$base/obj.bin" -o "$d" --no-verify --retries 1 -q "$@" >"$tmp/out" 2>&1
    local rc=$?
    set -e
    return $rc
}
# A regular file of the user's at DEST (a store built in place, a mistyped -o) is not replaced and
# nothing is made beside it; --force replaces it.
mkdir "$tmp/dst/u"
echo "mine" >"$tmp/dst/u/mine.bin"
! warm_obj "$tmp/dst/u/mine.bin" || fail "a file of the user's was replaced"
grep -q "mine.bin: a file that is not a download of cachewarm's" "$tmp/out" ||
    { cat "$tmp/out" >&2; fail "the refusal does not name the user's file"; }
[ "$(cat "$tmp/dst/u/mine.bin")" = mine ] || fail "the user's file changed"
[ "$(ls -A "$tmp/dst/u")" = mine.bin ] || fail "files were left beside the user's file"
warm_obj "$tmp/dst/u/mine.bin" --force || { cat "$tmp/out" >&2; fail "--force over a file"; }
cmp -s "$tmp/dst/u/mine.bin" "$tmp/root/files/obj.bin" || fail "--force: the download differs"
# cachewarm's own download is refreshed when the object changes, and so is one whose sidecar names
# the part file beside it: a run killed between writing the sidecar and the rename.
head -c 70000 /dev/urandom >"$tmp/root/files/obj.bin"
warm_obj "$tmp/dst/plain.bin" || { cat "$tmp/out" >&2; fail "the refresh of our own download"; }
cmp -s "$tmp/dst/plain.bin" "$tmp/root/files/obj.bin" || fail "the refresh differs"
head -c 80000 /dev/urandom >"$tmp/root/files/obj.bin"
cp "$tmp/dst/plain.bin" "$tmp/dst/plain.bin.warm-part"
read -r ino mns < <("$PY" -c 'import os,sys; s=os.stat(sys.argv[1]); print(s.st_ino, s.st_mtime_ns)' \
    "$tmp/dst/plain.bin.warm-part")
sed -i -e "s/^inode .*/inode $ino/" -e "s/^mtime_ns .*/mtime_ns $mns/" "$tmp/dst/plain.bin.warm"
warm_obj "$tmp/dst/plain.bin" || { cat "$tmp/out" >&2; fail "a warm killed mid-publish, rerun"; }
cmp -s "$tmp/dst/plain.bin" "$tmp/root/files/obj.bin" || fail "the rerun's download differs"
# A folder as the destination of one object is refused before the download, not at the rename.
mkdir "$tmp/dst/folder"
! warm_obj "$tmp/dst/folder" || fail "one object into a folder"
grep -q "folder: is a folder, and .* is one object" "$tmp/out" ||
    { cat "$tmp/out" >&2; fail "the refusal does not say the destination is a folder"; }
[ -z "$(ls -A "$tmp/dst/folder")" ] || fail "files were made in the folder"
[ ! -e "$tmp/dst/folder.warm-part" ] || fail "the object was downloaded before the refusal"

# warm_set DEST [FLAGS...]: cachewarm of the set into DEST; its status, the output in $tmp/out.
warm_set() {
    local d=$1
    shift
    set +e
    "$DLC_BIN/cachewarm" "$base/set" -o "$d" --retries 1 -q "$@" >"$tmp/out" 2>&1
    local rc=$?
    set -e
    return $rc
}
set_refused() { # DEST WHAT-IS-NAMED
    ! warm_set "$1" || fail "$1: a folder holding $2 was taken"
    grep -q "$2" "$tmp/out" || { cat "$tmp/out" >&2; fail "$1: the refusal does not name $2"; }
}
snapshot() { (cd "$1" && find . -type f -exec sha256sum {} + | sort); }

# A folder of the user's: their file stays, nothing is added.
mkdir "$tmp/dst/photos"
echo "holiday" >"$tmp/dst/photos/photo.jpg"
set_refused "$tmp/dst/photos" "photo.jpg"
[ "$(ls -A "$tmp/dst/photos")" = "photo.jpg" ] || fail "files were added to the user's folder"
# A file of theirs with a shard's name is not overwritten.
mkdir "$tmp/dst/clash"
echo "mine" >"$tmp/dst/clash/part-00000-of-00002.dlc"
set_refused "$tmp/dst/clash" "part-00000-of-00002.dlc"
[ "$(cat "$tmp/dst/clash/part-00000-of-00002.dlc")" = mine ] || fail "the user's file was replaced"
# Another set's folder: its index and shards stay.
cp -r "$tmp/other" "$tmp/dst/other"
before=$(snapshot "$tmp/dst/other")
set_refused "$tmp/dst/other" "part-0000[01]-of-00002.dlc"
[ "$(snapshot "$tmp/dst/other")" = "$before" ] || fail "the other set's folder changed"
# Another set's index alone (its shards not yet there): refused once the new index names its set.
mkdir "$tmp/dst/index"
cp "$tmp/other/index.dlcset" "$tmp/dst/index/"
set_refused "$tmp/dst/index" "is another set's index"
[ "$(ls -A "$tmp/dst/index")" = index.dlcset ] || fail "files were left in the other set's folder"
cmp -s "$tmp/other/index.dlcset" "$tmp/dst/index/index.dlcset" || fail "the other index changed"
# --force writes there.
warm_set "$tmp/dst/photos" --force || { cat "$tmp/out" >&2; fail "--force"; }
"$DLC_BIN/cacheinfo" "$tmp/dst/photos" >/dev/null 2>&1 || fail "the set warmed with --force"
[ -f "$tmp/dst/photos/photo.jpg" ] || fail "--force removed the user's file"
# An empty folder, the set's own folder again, and an interrupted warm of it are taken.
mkdir "$tmp/dst/empty"
warm_set "$tmp/dst/empty" || { cat "$tmp/out" >&2; fail "an empty folder"; }
warm_set "$tmp/dst/empty" || { cat "$tmp/out" >&2; fail "the set's own folder again"; }
rm "$tmp/dst/empty/index.dlcset" "$tmp/dst/empty.warm"
warm_set "$tmp/dst/empty" || { cat "$tmp/out" >&2; fail "an interrupted warm of the set"; }
"$DLC_BIN/cacheinfo" "$tmp/dst/empty" >/dev/null 2>&1 || fail "the set does not open"
echo "warm_not_ours: nodes and folders that are not ours refused by name, left as they were"
