#!/usr/bin/env bash
# Issue 23, item 10, for cachewarm: a co-tenant of the destination's folder plants symbolic links
# where cachewarm keeps its own files (DEST.lock, DEST.warm-part, DEST.warm-journal, a set's
# DEST.warm-set/ and DEST/). cachewarm refuses each, naming it, and the link's target is never
# truncated, written or made into DEST; with the links gone the same download succeeds. The
# object comes from tests/lib/gcsserver.py's plain URLs on loopback (no s3rver needed).
. "$(dirname "$0")/../lib/e2e.sh" warm_links

srv=
cleanup() {
    if [ -n "$srv" ]; then kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
export NO_PROXY=127.0.0.1,localhost

mkdir -p "$tmp/root/files" "$tmp/dst" "$tmp/victim"
head -c 300000 /dev/urandom >"$tmp/root/files/obj.bin"
"$PY" "$DLC_SRC/tests/lib/gcsserver.py" --root "$tmp/root" --port-file "$tmp/port" \
    2>/dev/null &
srv=$!
for _ in $(seq 100); do
    [ -s "$tmp/port" ] && break
    sleep 0.1
done
[ -s "$tmp/port" ] || fail "gcsserver.py did not start"
url="http://127.0.0.1:$(cat "$tmp/port")/files/obj.bin"
dest="$tmp/dst/obj.bin"

echo "precious" >"$tmp/victim/file"
victim_sum=$(sha256sum <"$tmp/victim/file")

warm_refuses() { # NAME-OF-THE-LINK
    set +e
    "$DLC_BIN/cachewarm" "$url" -o "$dest" --no-verify --retries 1 >"$tmp/out" 2>&1
    local rc=$?
    set -e
    [ "$rc" -ne 0 ] || fail "$1 as a link: cachewarm succeeded"
    grep -q "$1: is a symbolic link" "$tmp/out" ||
        { cat "$tmp/out" >&2; fail "$1 as a link: the refusal does not name it"; }
    [ "$(sha256sum <"$tmp/victim/file")" = "$victim_sum" ] || fail "$1: the link's target changed"
    [ ! -L "$dest" ] || fail "$1: DEST became a link"
}

for name in "$dest.lock" "$dest.warm-part" "$dest.warm-journal"; do
    ln -s "$tmp/victim/file" "$name"
    if [ "$name" = "$dest.warm-journal" ]; then
        # The journal is read on resume: a part file of the right size makes it be opened.
        head -c 300000 /dev/zero >"$dest.warm-part"
    fi
    warm_refuses "$name"
    rm -f "$name" "$dest.warm-part"
done

"$DLC_BIN/cachewarm" "$url" -o "$dest" --no-verify >"$tmp/out" 2>&1 ||
    { cat "$tmp/out" >&2; fail "without the links the download failed"; }
cmp -s "$dest" "$tmp/root/files/obj.bin" || fail "DEST differs from the object"
[ -f "$dest" ] && [ ! -L "$dest" ] || fail "DEST is not a plain file"

# A set (gs://bucket/set holds index.dlcset, through the server's JSON API): its folders of
# ours, as links to a folder elsewhere. The refusal comes before the index is read.
mkdir -p "$tmp/root/bucket/set" "$tmp/victim/dir"
echo "x" >"$tmp/root/bucket/set/index.dlcset"
sdest="$tmp/dst/set"
for name in "$sdest.warm-set" "$sdest"; do
    rm -rf "$sdest" "$sdest.warm-set"
    ln -s "$tmp/victim/dir" "$name"
    set +e
    DLCACHE_GCS_ENDPOINT="${url%/files/obj.bin}" GOOGLE_OAUTH_ACCESS_TOKEN= \
        "$DLC_BIN/cachewarm" gs://bucket/set -o "$sdest" --retries 1 >"$tmp/out" 2>&1
    set -e
    grep -q "$name: is a symbolic link" "$tmp/out" ||
        { cat "$tmp/out" >&2; fail "$name as a link: not refused by name"; }
    [ -z "$(ls -A "$tmp/victim/dir")" ] || fail "something was written through $name"
    rm -f "$name"
done
echo "warm_links: every planted link refused by name; targets untouched"
