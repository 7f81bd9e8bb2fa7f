#!/usr/bin/env bash
# Replacing a store set: only with --force, and a build killed with SIGKILL at any point (while
# the old set is retired, while the parts are written, while joining, while the retired files
# are removed) leaves a directory that opens and verifies as the old set or the new one, never
# an index naming a missing or half-written part. A rerun finishes the new set and leaves no
# retired part, stray part or temporary file. SIGINT stops cleanly (exit 130) with the old set
# readable; a failed build (--strict on a bad image) leaves the old set as it was.
. "$(dirname "$0")/../lib/e2e.sh" set_replace
digest() { # the content digest of a set that opens and verifies, or fail
    "$DLC_BIN/cacheinfo" "$1" --verify --json 2>/dev/null |
        $PY -c 'import json,sys; d=json.load(sys.stdin); assert d["ok"]; print(d["content_digest"])'
}
clean() { # no retired part, no part the index does not name, no temporary file
    local extra
    extra=$(ls -a "$1" | grep -E '^retired-|\.tmp-' || true)
    [ -z "$extra" ] || fail "$2: left $extra"
    [ "$(ls "$1" | grep -c '^part-')" = "$3" ] || fail "$2: $(ls "$1")"
}

"$DLC_BIN/mkdemo" "$tmp/demo" --count 600 --classes 5 >/dev/null
tree=$tmp/demo/train
set=$tmp/set
# The new set: 3 parts (the old set's N: every part name is reused) at 160 px.
new_args=(--shards 3 --size 160 --threads 2)
t0=$(date +%s.%N)
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/ref" "${new_args[@]}" 2>/dev/null
t1=$(date +%s.%N)
new=$(digest "$tmp/ref")
full=$($PY -c "print(max(0.3, $t1 - $t0))")
# The old sets: 3 parts at 32 px, and 2 parts at 48 px (another N: other names).
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/old3" --shards 3 --size 32 --threads 2 2>/dev/null
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/old2" --shards 2 --size 48 --threads 2 2>/dev/null
old3=$(digest "$tmp/old3")
old2=$(digest "$tmp/old2")

set +e
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/old3" "${new_args[@]}" 2>"$tmp/err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "replacing a set without --force: exit $rc"
grep -q "force" "$tmp/err" || fail "no word of --force: $(cat "$tmp/err")"
[ "$(digest "$tmp/old3")" = "$old3" ] || fail "a refused build changed the old set"

delays=(0.02 0.1 0.3)
for f in 0.5 0.8 0.95 1.0 1.1; do delays+=("$($PY -c "print(round($full * $f, 3))")"); done
runs=0
seen_old=0
seen_new=0
for old in old3 old2; do
    for d in "${delays[@]}"; do
        rm -rf "$set"
        cp -r "$tmp/$old" "$set"
        want_old=$([ "$old" = old3 ] && echo "$old3" || echo "$old2")
        "$DLC_BIN/cachebuild" "$tree" -o "$set" "${new_args[@]}" --force 2>/dev/null &
        pid=$!
        sleep "$d"
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        runs=$((runs + 1))
        got=$(digest "$set") || fail "after SIGKILL at ${d}s (old $old) the set does not open and verify: $(ls -a "$set")"
        if [ "$got" = "$want_old" ]; then
            seen_old=$((seen_old + 1))
        elif [ "$got" = "$new" ]; then
            seen_new=$((seen_new + 1))
        else
            fail "after SIGKILL at ${d}s (old $old): digest $got is neither old nor new"
        fi
        "$DLC_BIN/cachebuild" "$tree" -o "$set" "${new_args[@]}" --force 2>/dev/null ||
            fail "rerun after SIGKILL at ${d}s (old $old) failed"
        [ "$(digest "$set")" = "$new" ] || fail "rerun after SIGKILL at ${d}s: wrong digest"
        clean "$set" "rerun after SIGKILL at ${d}s (old $old)" 3
    done
done

# SIGINT: a clean stop, the old set readable.
rm -rf "$set"
cp -r "$tmp/old3" "$set"
"$DLC_BIN/cachebuild" "$tree" -o "$set" --shards 3 --size 160 --threads 1 --force 2>"$tmp/err" &
pid=$!
sleep "$($PY -c "print(round($full * 0.4, 3))")"
kill -INT "$pid" 2>/dev/null || true
set +e
wait "$pid"
rc=$?
set -e
if [ "$rc" = 0 ]; then
    echo "set_replace: the build finished before SIGINT; SIGINT not checked" >&2
else
    [ "$rc" = 130 ] || fail "SIGINT: exit $rc ($(cat "$tmp/err"))"
    [ "$(digest "$set")" = "$old3" ] || fail "SIGINT: the old set is not what the directory holds"
    if ls -a "$set" | grep -q '\.tmp-'; then fail "SIGINT left a temporary file: $(ls -a "$set")"; fi
    [ "$(ls "$set" | grep -c '^part-')" = 0 ] || fail "SIGINT left new parts: $(ls "$set")"
fi

# A failed build: the old set stays as it was, the new parts go.
rm -rf "$set"
cp -r "$tmp/old2" "$set"
echo "not a jpeg" >"$tree/$(ls "$tree" | tail -1)/zz-bad.jpg"
set +e
"$DLC_BIN/cachebuild" "$tree" -o "$set" "${new_args[@]}" --strict --force 2>"$tmp/err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "--strict with a bad image: exit $rc"
grep -q "error: .*zz-bad.jpg" "$tmp/err" || fail "the error does not name the bad image: $(cat "$tmp/err")"
[ "$(digest "$set")" = "$old2" ] || fail "a failed build changed the old set"
[ "$(ls "$set" | grep -c '^part-')" = 0 ] || fail "a failed build left its parts: $(ls "$set")"
echo "set_replace: ok ($runs SIGKILL runs: $seen_old left the old set, $seen_new the new; full build ${full}s)"
