#!/usr/bin/env bash
# Issue 23, item 12, for cachewarm: a set whose index the server says is 300 MiB (more than any
# index the reader accepts) is refused from the size the server reports, before its bytes are
# downloaded, and --json's bytes_downloaded says what the refusal cost (a probe's few bytes, not
# 0 after fetching it all, as eda0975 did). tests/lib/gcsserver.py serves it on loopback (a sparse
# file: nothing is written to disk).
. "$(dirname "$0")/../lib/e2e.sh" warm_sizes

srv=
cleanup() {
    if [ -n "$srv" ]; then kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy GOOGLE_OAUTH_ACCESS_TOKEN
export NO_PROXY=127.0.0.1,localhost

mkdir -p "$tmp/root/bucket/big" "$tmp/dst"
truncate -s 300M "$tmp/root/bucket/big/index.dlcset"
"$PY" "$DLC_SRC/tests/lib/gcsserver.py" --root "$tmp/root" --port-file "$tmp/port" \
    2>/dev/null &
srv=$!
for _ in $(seq 100); do
    [ -s "$tmp/port" ] && break
    sleep 0.1
done
[ -s "$tmp/port" ] || fail "gcsserver.py did not start"

set +e
DLCACHE_GCS_ENDPOINT="http://127.0.0.1:$(cat "$tmp/port")" \
    "$DLC_BIN/cachewarm" gs://bucket/big -o "$tmp/dst/big" --retries 1 --json \
    >"$tmp/out.json" 2>"$tmp/err"
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "a 300 MiB index was accepted"
grep -q "refused before downloading" "$tmp/out.json" ||
    { cat "$tmp/out.json" "$tmp/err" >&2; fail "the refusal does not say it came before the download"; }
got=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes_downloaded"])' \
    "$tmp/out.json")
[ "$got" -lt $((16 << 20)) ] || fail "$got bytes downloaded for an index refused by its size"
[ ! -e "$tmp/dst/big/index.dlcset.warm-new" ] ||
    [ "$(stat -c %s "$tmp/dst/big/index.dlcset.warm-new")" -lt $((16 << 20)) ] ||
    fail "the index was fetched before being refused"
echo "warm_sizes: a 300 MiB index refused from its size ($got bytes downloaded)"
