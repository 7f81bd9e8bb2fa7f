#!/usr/bin/env bash
# A read-only streaming cache folder that already holds every shard (a shared read-only cache,
# common on clusters: filled once, then mounted or chmod'ed read-only for the jobs), against a
# real S3 server (s3rver on loopback). The loader runs as an unprivileged user (nobody: root
# ignores permissions) on a folder it cannot write, with no lock file there:
#   1. it loads the set, downloading nothing, and creates, changes or removes nothing;
#   2. the same with the lock file left by the run that filled it;
#   3. with a shard missing it is refused, naming the folder, the shard and why;
#   4. a folder it may write, holding another user's lock file, is not read-only: it downloads.
# Needs root (to switch to nobody) and setpriv; skips otherwise.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"
bench=$DLC_BIN/cachebench
[ -x "$bench" ] && [ -x "$DLC_BIN/mkdemo" ] && [ -x "$DLC_BIN/cachebuild" ] ||
    skip "cachebench, mkdemo and cachebuild are needed"
[ "$(id -u)" = 0 ] || skip "needs root, to run the loader as the unprivileged user nobody"
command -v setpriv >/dev/null && id nobody >/dev/null 2>&1 && getent group nogroup >/dev/null ||
    skip "needs setpriv, the user nobody and the group nogroup"
as_nobody() { setpriv --reuid nobody --regid nogroup --clear-groups "$@"; }
as_nobody true 2>/dev/null || skip "setpriv cannot switch to nobody here"

warm_start_s3rver
src=$warm_tmp/src
out=$warm_tmp/out
mkdir -p "$src" "$out"
"$DLC_BIN/mkdemo" "$src/demo" --count 100 --seed 3 >/dev/null 2>&1 || fail "mkdemo failed"
"$DLC_BIN/cachebuild" "$src/demo/train" -o "$src/set" --shards 5 --size 64 \
    >/dev/null 2>"$src/build.log" || fail "cachebuild failed: $(tail -3 "$src/build.log")"
"$DLC_BIN/cachewarm" push "$src/set" s3://b/sets/s --endpoint "$S3_URL" -q 2>"$out/push.err" ||
    fail "push: $(cat "$out/push.err")"
url=s3://b/sets/s
load=(load "$url" --endpoint "$S3_URL" --batch 8 --crop 32 --sampler windows --window-shards 2
    --epochs 2 --json --cache-ranks 1)
# nobody may pass through the test's folder (not list it) and read the cache.
chmod 711 "$warm_tmp"
cache=$warm_tmp/ro
"$bench" "${load[@]}" --cache-dir "$cache" >"$out/fill.json" 2>"$out/fill.err" ||
    fail "filling the cache: $(tail -c 400 "$out/fill.err")"
[ -n "$(find "$cache" -name '*.dlc' -type f)" ] || fail "the filling run left no shard"

# readonly_run NAME: the loader as nobody on the read-only cache; it must succeed, download
# nothing and leave the folder as it was.
readonly_run() {
    chmod -R a-w "$cache"
    chmod -R a+rX "$cache"
    (cd "$cache" && find . -printf '%p %s %T@ %m\n' | sort) >"$out/$1.before"
    timeout 120 setpriv --reuid nobody --regid nogroup --clear-groups \
        "$bench" "${load[@]}" --cache-dir "$cache" >"$out/$1.json" 2>"$out/$1.err" ||
        fail "$1: the loader as nobody on a read-only cache holding every shard failed: $(tail -c 600 "$out/$1.err")"
    (cd "$cache" && find . -printf '%p %s %T@ %m\n' | sort) >"$out/$1.after"
    cmp -s "$out/$1.before" "$out/$1.after" ||
        fail "$1: the read-only folder changed: $(diff "$out/$1.before" "$out/$1.after" | head -5)"
    "$PY" - "$out/$1.json" <<'PY' || fail "$1: $(cat "$out/$1.json")"
import json, sys
j = json.load(open(sys.argv[1]))
s = j
assert s["downloads"] == 0, "it downloaded %d shards" % s["downloads"]
PY
    note "$1: loaded as nobody, downloaded nothing, changed nothing"
}

note "1. no lock file"
rm -f "$cache/.dlcs.lock"
readonly_run nolock
[ ! -e "$cache/.dlcs.lock" ] || fail "a lock file was made"

note "2. the filling run's lock file"
chmod u+w "$cache"
: >"$cache/.dlcs.lock"
chmod u-w "$cache"
readonly_run withlock

note "3. a shard missing"
shard=$(find "$cache" -name '*.dlc' -type f | sort | head -1)
chmod u+w "$(dirname "$shard")"
rm -f "$shard"
chmod -R a-w "$cache"
if timeout 120 setpriv --reuid nobody --regid nogroup --clear-groups \
    "$bench" "${load[@]}" --cache-dir "$cache" >"$out/missing.json" 2>"$out/missing.err"; then
    fail "a read-only cache without $(basename "$shard") was accepted"
fi
grep -q "$(basename "$shard")" "$out/missing.err" && grep -qi "read-only\|cannot write\|permission" "$out/missing.err" ||
    fail "the refusal does not name the shard and why: $(tail -c 600 "$out/missing.err")"
note "missing: $(grep -m1 "$(basename "$shard")" "$out/missing.err" | head -c 400)"
note "4. a folder the user nobody may write, holding root's lock file (0644)"
chmod -R a+rwX "$cache"
chmod 644 "$cache/.dlcs.lock"
timeout 120 setpriv --reuid nobody --regid nogroup --clear-groups \
    "$bench" "${load[@]}" --cache-dir "$cache" >"$out/shared.json" 2>"$out/shared.err" ||
    fail "a writable folder with another user's lock file was refused: $(tail -c 600 "$out/shared.err")"
[ -f "$shard" ] || fail "the missing shard was not downloaded into the writable folder"
note "shared: loaded as nobody beside root's lock file, the missing shard downloaded"
note "5. an empty read-only folder (issue 32)"
empty=$warm_tmp/empty
mkdir -p "$empty"
chmod 555 "$empty"
if timeout 120 setpriv --reuid nobody --regid nogroup --clear-groups \
    "$bench" "${load[@]}" --cache-dir "$empty" >"$out/empty.json" 2>"$out/empty.err"; then
    fail "an empty read-only cache was accepted"
fi
grep -q "$empty: the cache folder is read-only" "$out/empty.err" ||
    fail "the refusal does not name the folder as read-only: $(tail -c 600 "$out/empty.err")"
note "empty: $(grep -m1 "read-only" "$out/empty.err" | head -c 400)"
echo "stream_readonly: ok"
