#!/usr/bin/env bash
# Issue 23's leftover, for cachewarm: a co-tenant swaps the destination's folder for a symbolic
# link to another folder WHILE a download runs (slowed by tests/lib/faultproxy.py's --rate).
# cachewarm holds DEST's folder open from its check on and creates, renames and deletes only
# relative to it: the link's target, which holds a planted DEST.warm-part, is left exactly as it
# was, and the run either finishes into the folder it checked or fails naming the folder.
# A set (gs://, the set's folder DEST/ swapped) is held the same way.
. "$(dirname "$0")/../lib/e2e.sh" warm_swap

pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
export NO_PROXY=127.0.0.1,localhost

wait_file() { # FILE: until it exists (10 s at most)
    for _ in $(seq 200); do
        [ -e "$1" ] && return 0
        sleep 0.05
    done
    return 1
}
port_of() { # PORT-FILE
    wait_file "$1" || fail "no server wrote $1"
    while [ ! -s "$1" ]; do sleep 0.05; done
    cat "$1"
}
# listing DIR: every entry below DIR with its kind, size and digest.
listing() {
    (cd "$1" && find . -mindepth 1 -printf '%p %y %s\n' | sort &&
        find . -type f -exec sha256sum {} + | sort)
}

mkdir -p "$tmp/root/files" "$tmp/victim"
head -c 1500000 /dev/urandom >"$tmp/root/files/obj.bin"
"$PY" "$DLC_SRC/tests/lib/gcsserver.py" --root "$tmp/root" --port-file "$tmp/srv.port" \
    2>/dev/null &
pids+=("$!")
srv_port=$(port_of "$tmp/srv.port")
"$PY" "$DLC_SRC/tests/lib/faultproxy.py" --upstream "127.0.0.1:$srv_port" \
    --port-file "$tmp/proxy.port" --rate 500000 2>"$tmp/proxy.log" &
pids+=("$!")
proxy=http://127.0.0.1:$(port_of "$tmp/proxy.port")

# What a co-tenant left in the folder the link will point to: a part file of its own, which a
# rename by path would publish there as DEST, and a file that must keep its bytes.
echo "planted by someone else" >"$tmp/victim/obj.bin.warm-part"
echo "precious" >"$tmp/victim/file"
before=$(listing "$tmp/victim")

# swap_during DEST-FOLDER NAME: once NAME appears in the folder (the download has begun), move
# the folder aside to FOLDER.real and put a link to the victim's folder in its place.
swap_during() {
    wait_file "$1/$2" || fail "$2 never appeared in $1"
    mv "$1" "$1.real"
    ln -s "$tmp/victim" "$1"
}
# judge WHAT RC OUT FOLDER FILE: the victim's folder unchanged; success means FILE is in the
# folder that was checked (FOLDER.real), failure must name FOLDER.
judge() {
    local what=$1 rc=$2 out=$3 folder=$4 file=$5
    [ "$(listing "$tmp/victim")" = "$before" ] ||
        { diff <(echo "$before") <(listing "$tmp/victim") >&2 || true;
          fail "$what: the link's target changed"; }
    if [ "$rc" -eq 0 ]; then
        [ -e "$folder.real/$file" ] || fail "$what: succeeded, but $file is not in the folder it checked"
        echo "$what: finished into the folder it checked" >&2
    else
        grep -q "$folder" "$out" || { cat "$out" >&2; fail "$what: failed without naming the folder"; }
        echo "$what: failed naming the folder: $(tail -1 "$out")" >&2
    fi
}

# 1. One file.
mkdir -p "$tmp/dst"
"$DLC_BIN/cachewarm" "$proxy/files/obj.bin" -o "$tmp/dst/obj.bin" --no-verify --retries 1 \
    >"$tmp/one.out" 2>&1 &
warm=$!
swap_during "$tmp/dst" obj.bin.warm-part
set +e
wait "$warm"
rc=$?
set -e
judge "one file" "$rc" "$tmp/one.out" "$tmp/dst" obj.bin
if [ "$rc" -eq 0 ]; then
    cmp -s "$tmp/dst.real/obj.bin" "$tmp/root/files/obj.bin" || fail "one file: DEST differs"
fi

# 2. A set, through gcsserver.py's JSON API (gs://bucket/set), its folder DEST/ swapped while a
# shard downloads.
if [ -x "$DLC_BIN/mkdemo" ] && [ -x "$DLC_BIN/cachebuild" ]; then
    "$DLC_BIN/mkdemo" "$tmp/demo" --count 60 --seed 3 >/dev/null 2>&1 || fail "mkdemo failed"
    "$DLC_BIN/cachebuild" "$tmp/demo/train" -o "$tmp/root/bucket/set" --shards 2 --size 64 \
        >/dev/null 2>"$tmp/build.log" || fail "cachebuild failed: $(tail -3 "$tmp/build.log")"
    rm -f "$tmp/victim/obj.bin.warm-part"
    for f in "$tmp/root/bucket/set"/*; do
        echo "planted" >"$tmp/victim/$(basename "$f").warm-part"
    done
    before=$(listing "$tmp/victim")
    first=$(cd "$tmp/root/bucket/set" && ls | grep -v index.dlcset | head -1)
    mkdir -p "$tmp/sdst"
    DLCACHE_GCS_ENDPOINT="$proxy" GOOGLE_OAUTH_ACCESS_TOKEN= \
        "$DLC_BIN/cachewarm" gs://bucket/set -o "$tmp/sdst/set" --retries 1 --connections 2 \
        >"$tmp/set.out" 2>&1 &
    warm=$!
    swap_during "$tmp/sdst/set" "$first.warm-part"
    set +e
    wait "$warm"
    rc=$?
    set -e
    judge "a set" "$rc" "$tmp/set.out" "$tmp/sdst/set" index.dlcset
fi
echo "warm_swap: the swapped folder's target untouched"
