#!/usr/bin/env bash
# Store sets through a real S3 server (s3rver on loopback): cachewarm push uploads the shards in
# parallel and the index last; cachewarm fetches the set bit-exact, verified and MD5-checked, and
# a second run finds it complete; a push SIGKILLed after two of four shards is resumed (the
# finished shards checked, not sent again) and the index is never on the server before every
# shard; a fetch SIGKILLed midway leaves DEST no set and is resumed shard by shard; a new version
# of the set replacing an old one at DEST, killed midway, leaves the old set whole and readable,
# and killed between its moves, a rerun that finishes them; a refresh that both versions cannot
# fit is refused before fetching; four ranks fetching the set at once download it once; secrets
# appear in no output.
# A fetched set's directory holds the set's files alone: the shards' locks, journals and sidecars
# are in DEST.warm-set/ beside it, and the leftovers of the layout before it are removed.
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"
[ -x "$DLC_BIN/set_split" ] || skip "set_split is not built"

warm_start_s3rver
warm_make_store "$warm_tmp/src" 100 448
[ -z "$WARM_VERIFY" ] || skip "mkdemo and cachebuild are needed for a real store"
set1=$warm_tmp/set1
"$DLC_BIN/set_split" "$STORE" 4 "$set1" >/dev/null
files=(index.dlcset part-00000-of-00004.dlc part-00001-of-00004.dlc part-00002-of-00004.dlc
    part-00003-of-00004.dlc)
total=0
for f in "${files[@]}"; do total=$((total + $(stat -c %s "$set1/$f"))); done
note "set: 4 shards, $total bytes"
out=$warm_tmp/out
mkdir -p "$out"
export DLCACHE_STATE_DIR=$warm_tmp/state
export AWS_SESSION_TOKEN=SessionTokenMustNotLeak123
objects=$warm_tmp/s3data/b

# holds_only DIR SRC FILE... [-- EXTRA...]: DIR holds the FILEs, bit-exact copies of SRC's (the
# index first), and the EXTRA files, and nothing else; it opens as a set, and the shards'
# bookkeeping is in DIR.warm-set/ (a sidecar for each shard).
holds_only() {
    local dir=$1 src=$2 f extra=false
    shift 2
    for f in "$@"; do
        if [ "$f" = -- ]; then extra=true; elif ! $extra; then
            cmp "$src/$f" "$dir/$f" || fail "$dir/$f differs"
            [ "$f" = index.dlcset ] || [ -s "$dir.warm-set/$f.warm" ] ||
                fail "$dir.warm-set/$f.warm: no sidecar for the shard"
        fi
    done
    [ "$(ls -A "$dir" | sort)" = "$(printf '%s\n' "$@" | grep -vx -- -- | sort)" ] ||
        fail "$dir holds more than the set: $(ls -A "$dir" | tr '\n' ' ')"
    "$DLC_BIN/cacheinfo" "$dir" >"$out/info.txt" 2>&1 || fail "$dir does not open: $(cat "$out/info.txt")"
}
# same_set DIR SRC: DIR holds the 4-shard set SRC and nothing else.
same_set() { holds_only "$1" "$2" "${files[@]}"; }
head_status() { curl -s -o /dev/null -w '%{http_code}' -I "$S3_URL/b/$1"; }
# mtime_ns FILE: s3rver's file of an object, for the order in which objects were completed.
mtime_ns() { "$PY" -c 'import os,sys; print(os.stat(sys.argv[1]).st_mtime_ns)' "$1"; }

note "push the set: shards in parallel, the index last"
"$DLC_BIN/cachewarm" push "$set1" s3://b/sets/a --endpoint "$S3_URL" --part-size 2M \
    --json >"$out/push1.json" 2>"$out/push1.err" || fail "push: $(cat "$out/push1.err")"
[ "$(json_get "$out/push1.json" is_set)" = true ] || fail "not pushed as a set"
[ "$(json_get "$out/push1.json" files)" = 5 ] || fail "files in the report"
[ "$(json_get "$out/push1.json" bytes)" = "$total" ] || fail "bytes in the report"
index_time=$(mtime_ns "$objects/sets/a/index.dlcset._S3rver_object")
for f in "${files[@]:1}"; do
    [ "$(mtime_ns "$objects/sets/a/$f._S3rver_object")" -le "$index_time" ] ||
        fail "the index was completed before $f"
done

note "fetch the set: verified, MD5-checked, bit-exact; a second run fetches nothing"
"$DLC_BIN/cachewarm" s3://b/sets/a -o "$out/a" --endpoint "$S3_URL" --json \
    >"$out/get1.json" 2>"$out/get1.err" || fail "fetch: $(cat "$out/get1.err")"
[ "$(json_get "$out/get1.json" is_set)" = true ] || fail "not fetched as a set"
[ "$(json_get "$out/get1.json" verified)" = true ] || fail "not verified"
[ "$(json_get "$out/get1.json" md5_checked)" = true ] || fail "MD5s not checked"
[ "$(json_get "$out/get1.json" bytes_downloaded)" = "$total" ] || fail "bytes_downloaded"
same_set "$out/a" "$set1"
[ ! -e "$out/a/index.dlcset.warm-new" ] || fail "the temporary index was left"

note "the leftovers of the layout before DEST.warm-set/, a lock and a sidecar beside each shard, go"
for f in "${files[@]:1}"; do
    : >"$out/a/$f.lock"
    cp "$out/a.warm-set/$f.warm" "$out/a/$f.warm"
done
rm "$out/a.warm"
"$DLC_BIN/cachewarm" s3://b/sets/a -o "$out/a" --endpoint "$S3_URL" -q 2>"$out/old.err" ||
    fail "fetch over the older layout: $(cat "$out/old.err")"
same_set "$out/a" "$set1"
"$DLC_BIN/cachewarm" s3://b/sets/a -o "$out/a" --endpoint "$S3_URL" --json \
    >"$out/get2.json" 2>/dev/null || fail "second fetch"
[ "$(json_get "$out/get2.json" already_complete)" = true ] || fail "the second run fetched again"
[ "$(json_get "$out/get2.json" bytes_downloaded)" = 0 ] || fail "the second run fetched bytes"

note "a push SIGKILLed after two shards: the rerun checks them and sends the rest"
warm_start_proxy slowpush "$S3_PORT" --rate 20000000
proxy=$!
# One connection takes the files in order, so the shards complete one after the other.
"$DLC_BIN/cachewarm" push "$set1" s3://b/sets/k --endpoint "http://127.0.0.1:$PROXY_PORT" \
    --part-size 2M --connections 1 -q 2>"$out/killed.err" &
pid=$!
for i in $(seq 1 1500); do
    [ -e "$objects/sets/k/part-00001-of-00004.dlc._S3rver_object" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
done
kill -9 "$pid" 2>/dev/null || fail "the push finished before it could be killed"
wait "$pid" 2>/dev/null || true
kill -9 "$proxy"
wait "$proxy" 2>/dev/null || true
sleep 0.3
[ "$(head_status sets/k/index.dlcset)" = 404 ] || fail "the index is on the server before its shards"
"$DLC_BIN/cachewarm" push "$set1" s3://b/sets/k --endpoint "$S3_URL" --part-size 2M \
    --json >"$out/push2.json" 2>"$out/push2.err" || fail "rerun: $(cat "$out/push2.err")"
[ "$(json_get "$out/push2.json" files_skipped)" -ge 2 ] || fail "finished shards were sent again"
sent=$(json_get "$out/push2.json" bytes_uploaded)
[ "$sent" -lt $((total * 6 / 10)) ] || fail "the rerun sent $sent of $total bytes"
note "the rerun sent $sent of $total bytes, $(json_get "$out/push2.json" files_skipped) shards checked"
"$DLC_BIN/cachewarm" s3://b/sets/k -o "$out/k" --endpoint "$S3_URL" -q || fail "fetch of sets/k"
same_set "$out/k" "$set1"

# kill_fetch DEST URL: fetch through a slow proxy of its own with two shards at a time, and
# SIGKILL it once a shard is published (a part file newer than the start).
# kill_fetch DEST URL [PATTERN]: SIGKILL a fetch of URL into DEST once a file matching PATTERN
# (default: a shard) is new in DEST.
kill_fetch() {
    local dest=$1 url=$2 pattern=${3:-part-*.dlc} pid proxy i
    warm_start_proxy "slow$(basename "$dest")$RANDOM" "$S3_PORT" --rate 20000000
    proxy=$!
    touch "$out/start.mark"
    sleep 0.01
    "$DLC_BIN/cachewarm" "$url" -o "$dest" --endpoint "http://127.0.0.1:$PROXY_PORT" \
        --connections 2 --chunk-size 1M -q 2>>"$out/killed.err" &
    pid=$!
    for i in $(seq 1 1500); do
        [ -n "$(find "$dest" -name "$pattern" -newer "$out/start.mark" 2>/dev/null)" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.02
    done
    kill -9 "$pid" 2>/dev/null || fail "the fetch finished before it could be killed"
    wait "$pid" 2>/dev/null || true
    kill -9 "$proxy"
    wait "$proxy" 2>/dev/null || true
}
# no_set DEST: a first fetch killed midway left no set.
no_set() {
    [ ! -e "$1/index.dlcset" ] || fail "$1 is a set after the kill"
    if "$DLC_BIN/cacheinfo" "$1" >/dev/null 2>&1; then fail "$1 opens after the kill"; fi
}

note "a fetch SIGKILLed midway leaves no set; the rerun resumes shard by shard"
kill_fetch "$out/b" s3://b/sets/a
no_set "$out/b"
"$DLC_BIN/cachewarm" s3://b/sets/a -o "$out/b" --endpoint "$S3_URL" --json \
    >"$out/get3.json" 2>"$out/get3.err" || fail "rerun: $(cat "$out/get3.err")"
got=$(json_get "$out/get3.json" bytes_downloaded)
[ "$got" -lt "$total" ] || fail "the rerun fetched everything ($got of $total)"
same_set "$out/b" "$set1"
note "the rerun fetched $got of $total bytes"

# The exact point of the race above: killed right after a shard's rename into DEST, before
# anything else. Its sidecar in DEST.warm-set/ is written before the rename, so the rerun knows
# the shard as ours rather than refusing a stranger (and downloads it no more).
fi_lib=${DLC_LIB:-}/libdlc_faultinject.so
if [ -n "${DLC_LIB:-}" ] && [ -f "$fi_lib" ]; then
    note "a fetch killed just after a shard's rename: the rerun takes the shard as the set's"
    set +e
    env DLC_FAULT_CALLS=rename DLC_FAULT_PATH=part-00002-of-00004.dlc.warm-part DLC_FAULT_KILL=1 \
        LD_PRELOAD="$fi_lib" "$DLC_BIN/cachewarm" s3://b/sets/a -o "$out/killed" \
        --endpoint "$S3_URL" --connections 1 -q 2>"$out/k.err"
    rc=$?
    set -e
    [ "$rc" = 137 ] || fail "the fetch was not killed at the rename (exit $rc): $(cat "$out/k.err")"
    [ -f "$out/killed/part-00002-of-00004.dlc" ] || fail "the killed fetch did not rename the shard"
    [ ! -e "$out/killed/index.dlcset" ] || fail "$out/killed is a set after the kill"
    "$DLC_BIN/cachewarm" s3://b/sets/a -o "$out/killed" --endpoint "$S3_URL" --json \
        >"$out/get5.json" 2>"$out/get5.err" || fail "rerun after the kill: $(cat "$out/get5.err")"
    got=$(json_get "$out/get5.json" bytes_downloaded)
    part2=$(stat -c %s "$set1/part-00002-of-00004.dlc")
    [ "$got" -le $((total - part2)) ] || fail "the rerun fetched the renamed shard again ($got)"
    same_set "$out/killed" "$set1"
else
    note "the fault injector is not built here (sanitized build): the kill at the rename is skipped"
fi

note "a new version over the old one, killed midway: the old set stays whole, then the new one"
"$DLC_BIN/mkdemo" "$warm_tmp/demo2" --count 100 --seed 9 >/dev/null 2>&1
"$DLC_BIN/cachebuild" "$warm_tmp/demo2/train" -o "$warm_tmp/v2.dlc" --size 448 >/dev/null 2>&1
"$DLC_BIN/set_split" "$warm_tmp/v2.dlc" 4 "$warm_tmp/set2" >/dev/null
"$DLC_BIN/cachewarm" push "$warm_tmp/set2" s3://b/sets/a --endpoint "$S3_URL" -q ||
    fail "push of the new version"
# Every shard changed: each is fetched to NAME.warm-next beside the old set, which still opens and
# reads as it was when one of them is complete and the fetch is killed.
kill_fetch "$out/a" s3://b/sets/a 'part-*.dlc.warm-next'
[ -n "$(find "$out/a" -name 'part-*.dlc.warm-next')" ] || fail "no shard was staged"
for f in "${files[@]}"; do
    cmp "$set1/$f" "$out/a/$f" || fail "the old set's $f changed before the new one was in"
done
"$DLC_BIN/cacheinfo" "$out/a" >"$out/info.txt" 2>&1 ||
    fail "the old set does not open during the refresh: $(cat "$out/info.txt")"
"$DLC_BIN/cachewarm" s3://b/sets/a -o "$out/a" --endpoint "$S3_URL" -q 2>"$out/get4.err" ||
    fail "rerun of the new version: $(cat "$out/get4.err")"
same_set "$out/a" "$warm_tmp/set2"

# A version that changes one image: its other shards keep their size and content digest but carry
# the new set_id, so they are other files, which the old index refuses. Every shard the old index
# names is staged: killed midway the old set still opens; a server gone back to the old version
# makes the rerun find the set current and drop the staged files; the new version then comes in.
note "a new version changing one image, killed midway, rolled back, then fetched"
cp -r "$warm_tmp/demo2" "$warm_tmp/demo3"
last=$(find "$warm_tmp/demo3/train" -name '*.jpg' | sort | tail -1)
first=$(find "$(dirname "$last")" -name '*.jpg' | sort | head -1)
cp "$first" "$last"
"$DLC_BIN/cachebuild" "$warm_tmp/demo3/train" -o "$warm_tmp/v3.dlc" --size 448 >/dev/null 2>&1
"$DLC_BIN/set_split" "$warm_tmp/v3.dlc" 4 "$warm_tmp/set3" >/dev/null
cmp -s "$warm_tmp/set2/part-00000-of-00004.dlc" "$warm_tmp/set3/part-00000-of-00004.dlc" &&
    fail "the versions' first shards are the same file: the case is not made"
"$DLC_BIN/cachewarm" push "$warm_tmp/set3" s3://b/sets/a --endpoint "$S3_URL" -q ||
    fail "push of the one-image version"
kill_fetch "$out/a" s3://b/sets/a 'part-*.dlc.warm-next'
for f in "${files[@]}"; do
    cmp "$warm_tmp/set2/$f" "$out/a/$f" || fail "the old set's $f changed before the new one was in"
done
"$DLC_BIN/cacheinfo" "$out/a" >"$out/info.txt" 2>&1 ||
    fail "the old set does not open during the refresh: $(cat "$out/info.txt")"
"$DLC_BIN/cachewarm" push "$warm_tmp/set2" s3://b/sets/a --endpoint "$S3_URL" -q ||
    fail "push of the old version back"
"$DLC_BIN/cachewarm" s3://b/sets/a -o "$out/a" --endpoint "$S3_URL" --json >"$out/back.json" \
    2>"$out/back.err" || fail "rerun after the rollback: $(cat "$out/back.err")"
[ "$(json_get "$out/back.json" already_complete)" = true ] || fail "the old set is not current"
same_set "$out/a" "$warm_tmp/set2" # and nothing staged is left
"$DLC_BIN/cachewarm" push "$warm_tmp/set3" s3://b/sets/a --endpoint "$S3_URL" -q ||
    fail "push of the one-image version again"
"$DLC_BIN/cachewarm" s3://b/sets/a -o "$out/a" --endpoint "$S3_URL" -q 2>"$out/get7.err" ||
    fail "fetch of the one-image version: $(cat "$out/get7.err")"
same_set "$out/a" "$warm_tmp/set3"

# Killed in the commit itself, after the older index went and before the staged shards were all
# moved: the rerun moves what its sidecars vouch for and fetches nothing again.
if [ -n "${DLC_LIB:-}" ] && [ -f "$fi_lib" ]; then
    note "a refresh killed between moving two staged shards: the rerun finishes it"
    "$DLC_BIN/cachewarm" push "$set1" s3://b/sets/a --endpoint "$S3_URL" -q ||
        fail "push of the first version again"
    set +e
    # The second rename naming part 1's staged file: the first published it, the second moves it.
    env DLC_FAULT_CALLS=rename DLC_FAULT_PATH=part-00001-of-00004.dlc.warm-next DLC_FAULT_AT=2 \
        DLC_FAULT_KILL=1 \
        LD_PRELOAD="$fi_lib" "$DLC_BIN/cachewarm" s3://b/sets/a -o "$out/a" \
        --endpoint "$S3_URL" --connections 1 -q 2>"$out/k2.err"
    rc=$?
    set -e
    [ "$rc" = 137 ] || fail "the refresh was not killed at the move (exit $rc): $(cat "$out/k2.err")"
    [ ! -e "$out/a/index.dlcset" ] || fail "an index is there mid-commit"
    [ ! -e "$out/a/part-00001-of-00004.dlc.warm-next" ] || fail "the kill came before the move"
    [ -e "$out/a/part-00002-of-00004.dlc.warm-next" ] || fail "the kill came after the moves"
    "$DLC_BIN/cachewarm" s3://b/sets/a -o "$out/a" --endpoint "$S3_URL" --json \
        >"$out/get6.json" 2>"$out/get6.err" || fail "rerun after the commit's kill: $(cat "$out/get6.err")"
    idx=$(stat -c %s "$set1/index.dlcset")
    [ "$(json_get "$out/get6.json" bytes_downloaded)" -le "$idx" ] ||
        fail "the rerun fetched shards again: $(json_get "$out/get6.json" bytes_downloaded)"
    same_set "$out/a" "$set1"
fi

# Shards are named part-I-of-N: a version with another N names none of the older ones, which
# stayed in DEST for good (a whole set left behind at each refresh). They go once the new index is
# in, each only when its sidecar says it is the file cachewarm published there from this URL.
note "versions of other shard counts: the older shards go, a file changed since stays"
"$DLC_BIN/set_split" "$warm_tmp/v2.dlc" 2 "$warm_tmp/set2b" >/dev/null
"$DLC_BIN/set_split" "$warm_tmp/v3.dlc" 3 "$warm_tmp/set3c" >/dev/null
files2=(index.dlcset part-00000-of-00002.dlc part-00001-of-00002.dlc)
files3=(index.dlcset part-00000-of-00003.dlc part-00001-of-00003.dlc part-00002-of-00003.dlc)
nd=$out/nshards
"$DLC_BIN/cachewarm" push "$set1" s3://b/sets/n --endpoint "$S3_URL" -q || fail "push to n"
"$DLC_BIN/cachewarm" s3://b/sets/n -o "$nd" --endpoint "$S3_URL" -q 2>"$out/n1.err" ||
    fail "fetch of n: $(cat "$out/n1.err")"
same_set "$nd" "$set1"
touch -d 2001-01-01 "$nd/part-00003-of-00004.dlc" # changed since it was published
"$DLC_BIN/cachewarm" push "$warm_tmp/set2b" s3://b/sets/n --endpoint "$S3_URL" -q ||
    fail "push of n's 2-shard version"
"$DLC_BIN/cachewarm" s3://b/sets/n -o "$nd" --endpoint "$S3_URL" -q 2>"$out/n2.err" ||
    fail "refresh of n: $(cat "$out/n2.err")"
holds_only "$nd" "$warm_tmp/set2b" "${files2[@]}" -- part-00003-of-00004.dlc
[ -z "$(ls "$nd.warm-set" | grep -e '-of-00004.dlc.warm$' | grep -v part-00003)" ] ||
    fail "the sidecars of the removed shards are left: $(ls "$nd.warm-set" | tr '\n' ' ')"
"$DLC_BIN/cachewarm" push "$warm_tmp/set3c" s3://b/sets/n --endpoint "$S3_URL" -q ||
    fail "push of n's 3-shard version"
if [ -n "${DLC_LIB:-}" ] && [ -f "$fi_lib" ]; then
    # Killed right after the set's sidecar is written, before the older shards go: the rerun
    # finds the set current and removes them.
    set +e
    env DLC_FAULT_CALLS=rename DLC_FAULT_PATH=nshards.warm DLC_FAULT_KILL=1 LD_PRELOAD="$fi_lib" \
        "$DLC_BIN/cachewarm" s3://b/sets/n -o "$nd" --endpoint "$S3_URL" -q 2>"$out/n3.err"
    rc=$?
    set -e
    [ "$rc" = 137 ] || fail "the refresh was not killed at its sidecar (exit $rc): $(cat "$out/n3.err")"
    [ -e "$nd/part-00000-of-00002.dlc" ] || fail "the kill came after the older shards went"
    "$DLC_BIN/cachewarm" s3://b/sets/n -o "$nd" --endpoint "$S3_URL" --json >"$out/n4.json" \
        2>"$out/n4.err" || fail "rerun after the kill: $(cat "$out/n4.err")"
    [ "$(json_get "$out/n4.json" already_complete)" = true ] || fail "the set is not current"
else
    "$DLC_BIN/cachewarm" s3://b/sets/n -o "$nd" --endpoint "$S3_URL" -q 2>"$out/n4.err" ||
        fail "refresh of n: $(cat "$out/n4.err")"
fi
holds_only "$nd" "$warm_tmp/set3c" "${files3[@]}" -- part-00003-of-00004.dlc
note "left after two refreshes: $(ls -A "$nd" | tr '\n' ' ')"
# The sidecars are the only proof that a file is cachewarm's: one in a DEST.warm-set/ of another
# user (a co-tenant who can write DEST's parent can make that folder) naming a file of the user's
# in DEST must not get it removed. Root here, so the folder is given to another uid.
if [ "$(id -u)" = 0 ]; then
    note "a sidecar in a DEST.warm-set/ of another user removes nothing"
    echo "the user's own notes" >"$nd/notes.txt"
    "$PY" - "$nd/notes.txt" "$nd.warm-set/notes.txt.warm" <<'PYEOF'
import os, sys
st = os.stat(sys.argv[1])
with open(sys.argv[2], "w") as f:
    f.write("dlcache-warm 1\nsource s3://b/sets/n/notes.txt\nsize %d\netag x\ninode %d\n"
            "mtime_ns %d\n" % (st.st_size, st.st_ino, st.st_mtime_ns))
PYEOF
    chown 65534 "$nd.warm-set" "$nd.warm-set/notes.txt.warm"
    "$DLC_BIN/cachewarm" s3://b/sets/n -o "$nd" --endpoint "$S3_URL" --json >"$out/n5.json" \
        2>"$out/n5.err" || fail "rerun with a planted sidecar: $(cat "$out/n5.err")"
    [ "$(json_get "$out/n5.json" already_complete)" = true ] || fail "the set is not current"
    [ -f "$nd/notes.txt" ] || fail "a sidecar in another user's folder got the user's file removed"
    chown 0 "$nd.warm-set"
    rm -f "$nd/notes.txt" "$nd.warm-set/notes.txt.warm"
fi

note "a refresh that both versions cannot fit on the disk is refused before fetching"
mnt=$warm_tmp/small
mkdir -p "$mnt"
if mount -t tmpfs -o size=$((total * 3 / 2)) tmpfs "$mnt" 2>/dev/null; then
    warm_mnt=$mnt # warm_cleanup unmounts it if a step below fails.
    "$DLC_BIN/cachewarm" push "$set1" s3://b/sets/r --endpoint "$S3_URL" -q || fail "push to r"
    "$DLC_BIN/cachewarm" s3://b/sets/r -o "$mnt/r" --endpoint "$S3_URL" -q 2>"$out/r1.err" ||
        fail "fetch into the small disk: $(cat "$out/r1.err")"
    "$DLC_BIN/cachewarm" push "$warm_tmp/set2" s3://b/sets/r --endpoint "$S3_URL" -q ||
        fail "push of the new version to r"
    set +e
    "$DLC_BIN/cachewarm" s3://b/sets/r -o "$mnt/r" --endpoint "$S3_URL" --json \
        >"$out/r2.json" 2>"$out/r2.err"
    rc=$?
    set -e
    left=$(ls -A "$mnt/r" | sort | tr '\n' ' ')
    for f in "${files[@]}"; do
        cmp -s "$set1/$f" "$mnt/r/$f" || fail "the refused refresh changed $f"
    done
    umount "$mnt"
    warm_mnt=
    [ "$rc" = 1 ] || fail "a refresh too big for the disk: exit $rc"
    grep -q "need [0-9]* bytes more and the disk has [0-9]* free" "$out/r2.err" ||
        fail "the refusal does not say what is missing: $(cat "$out/r2.err")"
    [ "$(json_get "$out/r2.json" bytes_downloaded)" -le "$(stat -c %s "$warm_tmp/set2/index.dlcset")" ] ||
        fail "shards were fetched before the refusal"
    [ "$left" = "$(printf '%s\n' "${files[@]}" | sort | tr '\n' ' ')" ] ||
        fail "the refused refresh left files in the set: $left"
else
    note "SKIP: mounting a tmpfs is not permitted here"
fi

note "four ranks fetch the set at once: one downloads"
warm_start_proxy count "$S3_PORT" --rate 40000000
pids=()
for i in 1 2 3 4; do
    "$DLC_BIN/cachewarm" s3://b/sets/k -o "$out/shared" --endpoint "http://127.0.0.1:$PROXY_PORT" \
        --json >"$out/rank$i.json" 2>"$out/rank$i.err" &
    pids+=("$!")
done
for p in "${pids[@]}"; do
    wait "$p" || fail "a rank failed: $(cat "$out"/rank*.err)"
done
same_set "$out/shared" "$set1"
downloaders=0
for i in 1 2 3 4; do
    [ "$(json_get "$out/rank$i.json" bytes_downloaded)" = 0 ] || downloaders=$((downloaders + 1))
done
[ "$downloaders" = 1 ] || fail "$downloaders ranks downloaded"
bytes=$(curl -sf "http://127.0.0.1:$PROXY_PORT/__proxy/stats" |
    "$PY" -c 'import json,sys; print(json.load(sys.stdin)["bytes"])')
[ "$bytes" -lt $((total + total / 4)) ] || fail "$bytes bytes through the proxy for $total"

note "secrets appear in no output"
if grep -rl -e SessionTokenMustNotLeak123 -e 'S3RVER:' "$out"; then
    fail "a secret was printed"
fi
echo "warm_set: ok"
