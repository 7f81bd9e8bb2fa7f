#!/usr/bin/env bash
# A build killed with SIGKILL at any point (early, mid-way, while finishing)
# leaves either the previous store, intact and with its old digest, or no
# store, or the complete new one, never a store that opens and lies. A
# rerun with --force succeeds and removes the dead build's temporary file.
# SIGINT stops a build cleanly: exit 130, no temporary file, old store kept.
. "$(dirname "$0")/../lib/e2e.sh" build_kill
digest() { # digest STORE: the content digest cacheinfo --verify reports, or fail
    "$DLC_BIN/cacheinfo" "$1" --verify --json 2>/dev/null |
        $PY -c 'import json,sys; d=json.load(sys.stdin); assert d["ok"]; print(d["content_digest"])'
}
temps() { ls "$tmp" | grep -c '\.tmp-' || true; }

"$DLC_BIN/mkdemo" "$tmp/demo" --count 200 --classes 5 >/dev/null
tree=$tmp/demo/train
args=(--size 160 --threads 2)

# The store a finished build makes, and how long it takes.
t0=$(date +%s.%N)
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/ref.dlc" "${args[@]}" 2>/dev/null
t1=$(date +%s.%N)
new=$(digest "$tmp/ref.dlc")
full=$($PY -c "print(max(0.3, $t1 - $t0))")
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/old.dlc" --size 32 2>/dev/null
old=$(digest "$tmp/old.dlc")
[ "$old" != "$new" ] || fail "old and new stores have the same digest"
rm "$tmp/ref.dlc"

# Kill points: fixed early ones, then fractions of a full build (the last
# ones land in finish: meta, sync, rename).
delays=(0.2 0.5 1.0)
for f in 0.9 1.0; do delays+=("$($PY -c "print(round($full * $f, 3))")"); done
runs=0
left=0
for with_old in 0 1; do
    for d in "${delays[@]}"; do
        out=$tmp/s.dlc
        rm -f "$out"
        [ "$with_old" = 1 ] && cp "$tmp/old.dlc" "$out"
        "$DLC_BIN/cachebuild" "$tree" -o "$out" "${args[@]}" --force 2>/dev/null &
        pid=$!
        sleep "$d"
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        runs=$((runs + 1))
        [ "$(temps)" = 0 ] || left=$((left + 1))
        if [ -e "$out" ]; then
            got=$(digest "$out") || fail "after SIGKILL at ${d}s (old=$with_old) the store does not verify"
            if [ "$got" = "$new" ]; then
                :
            elif [ "$with_old" = 1 ] && [ "$got" = "$old" ]; then
                :
            else
                fail "after SIGKILL at ${d}s (old=$with_old): digest $got is neither old nor new"
            fi
        else
            [ "$with_old" = 0 ] || fail "after SIGKILL at ${d}s the old store is gone"
        fi
        # Whatever was left, a rerun builds the new store and cleans up.
        "$DLC_BIN/cachebuild" "$tree" -o "$out" "${args[@]}" --force 2>/dev/null ||
            fail "rerun after SIGKILL at ${d}s failed"
        [ "$(digest "$out")" = "$new" ] || fail "rerun after SIGKILL at ${d}s: wrong digest"
        [ "$(temps)" = 0 ] || fail "rerun after SIGKILL at ${d}s left temporary files: $(ls "$tmp")"
    done
done

# stopped WHAT SIG STATUS STORE DIGEST CMD...: run the build CMD and send it SIG once its
# temporary file is there (a sleep of a fraction of the measured build missed it when the build
# took the 0.3 s floor); it must exit STATUS saying STORE was not written, STORE must keep
# DIGEST, and no temporary file may be left.
stopped() {
    local what=$1 sig=$2 want=$3 store=$4 old=$5 pid rc
    shift 5
    "$@" >/dev/null 2>"$tmp/err" &
    pid=$!
    for _ in $(seq 1 500); do
        [ "$(temps)" = 0 ] || break
        sleep 0.01
    done
    kill -"$sig" "$pid" 2>/dev/null || true
    set +e
    wait "$pid"
    rc=$?
    set -e
    if [ "$rc" = 0 ]; then
        echo "build_kill: the $what finished before SIG$sig; SIG$sig not checked" >&2
    else
        [ "$rc" = "$want" ] || fail "$what, SIG$sig: exit status $rc, want $want ($(cat "$tmp/err"))"
        grep -q "interrupted; $store was not written" "$tmp/err" ||
            fail "$what, SIG$sig: $(cat "$tmp/err")"
        [ "$(digest "$store")" = "$old" ] || fail "$what, SIG$sig: the old store changed"
    fi
    [ "$(temps)" = 0 ] || fail "$what, SIG$sig left a temporary file: $(ls "$tmp")"
}

# SIGINT: a clean stop. One thread: the build takes about twice as long as the measured one.
cp "$tmp/old.dlc" "$tmp/s.dlc"
stopped build INT 130 "$tmp/s.dlc" "$old" \
    "$DLC_BIN/cachebuild" "$tree" -o "$tmp/s.dlc" --size 160 --threads 1 --force

# SIGTERM stops a token build as cleanly (cachebuild --tokens polls for it every 256 documents;
# it used to die with its 100 MB temporary file left for the next build to remove).
$PY -c "
import numpy as np
a = np.random.default_rng(0).integers(1, 50000, size=40_000_000, dtype=np.uint16)
a[::300] = 0
a.tofile('$tmp/tok.bin')"
head -c 2000000 "$tmp/tok.bin" >"$tmp/small.bin"
"$DLC_BIN/cachebuild" --tokens "$tmp/small.bin" -o "$tmp/t.dlc" --eos 0 --force >/dev/null
stopped "token build" TERM 143 "$tmp/t.dlc" "$(digest "$tmp/t.dlc")" \
    "$DLC_BIN/cachebuild" --tokens "$tmp/tok.bin" -o "$tmp/t.dlc" --eos 0 --force
echo "build_kill: ok ($runs SIGKILL runs, $left left a temporary file; full build ${full}s)"
