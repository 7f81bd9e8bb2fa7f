#!/usr/bin/env bash
# What the streaming cache (cache/stream/) refuses from a hostile bucket or a hostile co-tenant of
# its folder (issue 23), against a real S3 server (s3rver on loopback). The lies are indexes
# re-sealed by tests/stream/stream_index_edit.c (their checksum recomputed, as anyone who can
# write the bucket can) and put in the bucket beside the real shards:
#   1. an index saying a shard holds 0 records: the loader (cachebench load) and the cache
#      refuse the set naming the shard, instead of delivering the others' records quietly;
#   2. an index saying a shard holds 2^32 records: refused at open at once, naming the shard;
#      one saying 2^40 records in a shard of 2^50 bytes (no cache folder holds it): the same,
#      for the loader and cacheinfo --plan too (planning would walk every record);
#   3. shard names that hide from the cache's scan (".p") or collide with its own files
#      ("index.dlcset", "x.999.dlcs-tmp"): refused at open, naming the shard;
#   4. an index lying about a shard's size (far larger than the object): refused before anything
#      is reserved or evicted for it, so another set's shards in the cache stay;
#   5. 16 bytes flipped in a shard's unused space (record checksums and content digest still
#      right): refused by the MD5 check cachewarm runs too ("hash to"), never published;
#   6. planted links: the set's folder, the lock file or a shard name a link is refused, naming
#      it, and nothing is written or deleted through it;
#   7. cacheinfo --plan of a URL writes and deletes nothing in --cache-dir (a stale shard, a dead
#      download and a link there stay; a missing folder is not made).
set -euo pipefail
source "$DLC_SRC/tests/lib/warm.sh"
drive=$DLC_BIN/stream_cache_drive
edit=$DLC_BIN/stream_index_edit
bench=$DLC_BIN/cachebench
[ -x "$drive" ] && [ -x "$edit" ] || skip "stream_cache_drive and stream_index_edit are not built"
[ -x "$DLC_BIN/mkdemo" ] && [ -x "$DLC_BIN/cachebuild" ] && [ -x "$bench" ] ||
    skip "mkdemo, cachebuild and cachebench are needed"

warm_start_s3rver
src=$warm_tmp/src
out=$warm_tmp/out
mkdir -p "$src" "$out"
"$DLC_BIN/mkdemo" "$src/demo" --count 100 --seed 5 >/dev/null 2>&1 || fail "mkdemo failed"
"$DLC_BIN/cachebuild" "$src/demo/train" -o "$src/set" --shards 5 --size 96 \
    >/dev/null 2>"$src/build.log" || fail "cachebuild failed: $(tail -3 "$src/build.log")"
"$DLC_BIN/mkdemo" "$src/demo2" --count 60 --seed 9 >/dev/null 2>&1 || fail "mkdemo failed"
"$DLC_BIN/cachebuild" "$src/demo2/train" -o "$src/other" --shards 3 --size 96 \
    >/dev/null 2>"$src/build.log" || fail "cachebuild failed: $(tail -3 "$src/build.log")"
# push NAME [SET]: the set (default set) at s3://b/sets/NAME.
push() {
    "$DLC_BIN/cachewarm" push "$src/${2:-set}" "s3://b/sets/$1" --endpoint "$S3_URL" -q \
        2>"$out/push.err" || fail "push: $(cat "$out/push.err")"
}
# lie NAME EDITS...: the set pushed at NAME, its index replaced by one re-sealed with EDITS.
lie() {
    local name=$1
    shift
    push "$name"
    "$edit" "$src/set/index.dlcset" "$out/$name.dlcset" "$@" || fail "stream_index_edit $*"
    s3_put "$out/$name.dlcset" "sets/$name/index.dlcset"
}
# refused NAME WHAT PATTERN [drive args]: the drive on s3://b/sets/NAME must fail, its message
# matching PATTERN.
refused() {
    local name=$1 what=$2 pat=$3
    shift 3
    if "$drive" --url "s3://b/sets/$name" --dir "$warm_tmp/c-$name" --endpoint "$S3_URL" "$@" \
        >"$out/$name.json" 2>"$out/$name.err"; then
        fail "$what was accepted: $(cat "$out/$name.json")"
    fi
    grep -Eq "$pat" "$out/$name.err" || fail "$what: the message does not say /$pat/: $(cat "$out/$name.err")"
    note "$what: $(head -c 400 "$out/$name.err")"
}
temps() { { find "$1" -name '*.dlcs-tmp' 2>/dev/null || true; } | wc -l; }

note "1. an index saying a shard holds 0 records"
lie zero --count 2=0
refused zero "a shard said empty" "s3://b/sets/zero/part-00002-of-00005.dlc: shard 2 .*holds 20 records, the set's index says 0"
[ -z "$(find "$warm_tmp/c-zero" -name part-00002-of-00005.dlc)" ] || fail "the lying shard was published"
if "$bench" load s3://b/sets/zero --cache-dir "$warm_tmp/l-zero" --endpoint "$S3_URL" --batch 8 --crop 64 \
    --sampler windows --window-shards 2 --epochs 1 --json >"$out/lzero.json" 2>"$out/lzero.err"; then
    fail "the loader read a set whose index hides a shard's records: $(cat "$out/lzero.json")"
fi
grep -q "shard 2 (part-00002-of-00005.dlc) holds 20 records, the set's index says 0" "$out/lzero.err" ||
    fail "the loader's refusal does not name the shard and both counts: $(cat "$out/lzero.err")"
# One sentence: the shard is named once (the loader's words added nothing the cache had said).
[ "$(grep -o "shard 2 " "$out/lzero.err" | wc -l)" = 1 ] ||
    fail "the loader's refusal repeats itself: $(cat "$out/lzero.err")"
note "loader: $(head -c 400 "$out/lzero.err")"

note "2. an index saying a shard holds 2^32 records"
lie huge --count 1=4294967296
start=$(date +%s)
refused huge "a count of 2^32" "shard 1 \(part-00001-of-00005.dlc\): 4294967296 records cannot fit"
[ $(($(date +%s) - start)) -lt 60 ] || fail "the refusal took over a minute"
# Counts the sizes allow, but sizes no cache folder can hold: the planning at open (the loader's,
# cacheinfo --plan's) would walk 2^40 records for hours. Refused at once, naming the shard; the
# timeout turns a hang into a failure.
lie both --count 1=1099511627776 --bytes 1=1125899906842624
both="shard 1 \(part-00001-of-00005.dlc\) is 1125899906842624 bytes, more than the file system of .* can ever hold"
refused both "a size and count of 2^50 and 2^40" "$both"
for how in load plan; do
    if [ $how = load ]; then
        cmd=("$bench" load s3://b/sets/both --cache-dir "$warm_tmp/l-both" --endpoint "$S3_URL"
            --batch 8 --crop 64 --sampler windows --window-shards 2 --epochs 1 --json)
    else
        cmd=("$DLC_BIN/cacheinfo" s3://b/sets/both --plan --cache-dir "$warm_tmp/l-both"
            --endpoint "$S3_URL" --batch 8 --window-shards 2)
    fi
    rc=0
    timeout 60 "${cmd[@]}" >"$out/both-$how.out" 2>"$out/both-$how.err" || rc=$?
    [ $rc -ne 124 ] || fail "$how of an index saying 2^40 records did not end within a minute"
    [ $rc -ne 0 ] || fail "$how of an index saying 2^40 records was accepted"
    grep -Eq "$both" "$out/both-$how.err" || fail "$how: the refusal does not name the shard: $(cat "$out/both-$how.err")"
done

note "3. shard names that hide or collide"
lie dot --name 0=.p0
refused dot "a hidden shard name" "shard 0 \".p0\": it starts with '.'"
lie idx --name 1=index.dlcset
refused idx "a shard named like the index" "shard 1 \"index.dlcset\""
lie tmp --name 2=x.999.dlcs-tmp
refused tmp "a shard named like a temporary file" "shard 2 \"x.999.dlcs-tmp\""

note "4. a shard's size lied about: nothing evicted for it"
push other other
cache=$warm_tmp/c4
"$drive" --url s3://b/sets/other --dir "$cache" --endpoint "$S3_URL" >"$out/other.json" \
    2>"$out/other.err" || fail "the other set: $(cat "$out/other.err")"
other_dir=$(json_get "$out/other.json" set_dir)
have=$(find "$other_dir" -name 'part-*' | wc -l)
[ "$have" = 3 ] || fail "the other set left $have shards in the cache"
used=$({ find "$cache" -type f -printf '%b\n'; } | awk '{s += $1 * 512} END {print s + 0}')
big=$((used * 4))
lie big --bytes 0=$big
# A limit that holds the lie beside the index, but not beside the other set's shards.
refused big "a size lie" "s3://b/sets/big/part-00000-of-00005.dlc.*bytes on the server, the set's index says $big.*before anything was reserved or evicted" \
    --limit $((big + 65536)) --dir "$cache"
have=$(find "$other_dir" -name 'part-*' | wc -l)
[ "$have" = 3 ] || fail "the size lie evicted $((3 - have)) shards of another set"

note "5. 16 bytes flipped in a shard's unused space"
push flip
obj=$warm_tmp/s3data/b/sets/flip/part-00001-of-00005.dlc._S3rver_object
[ -f "$obj" ] || fail "s3rver's file of the object is not at $obj"
# The first 16 zero bytes whose flip keeps every record checksum and the content digest right.
"$PY" - "$obj" "$DLC_BIN/cacheinfo" "$warm_tmp/flip.dlc" <<'PY' || fail "no unused bytes found to flip"
import json, shutil, subprocess, sys
obj, info, tmp = sys.argv[1:4]
orig = open(obj, 'rb').read()
def digest(p):
    r = subprocess.run([info, p, '--verify', '--json'], capture_output=True)
    return json.loads(r.stdout)['content_digest'] if r.returncode == 0 else None
want = digest(obj)
for off in range(8192, len(orig) - 16, 4096 * 7 + 16 * 37):
    if orig[off:off + 16] != bytes(16):
        continue
    b = bytearray(orig)
    for i in range(off, off + 16):
        b[i] ^= 0xFF
    open(tmp, 'wb').write(b)
    if digest(tmp) == want:
        shutil.copyfile(tmp, obj)
        sys.exit(0)
sys.exit(1)
PY
refused flip "flipped unused bytes" "s3://b/sets/flip/part-00001-of-00005.dlc: the downloaded bytes hash to .*, the object says"
[ -z "$(find "$warm_tmp/c-flip" -name part-00001-of-00005.dlc)" ] || fail "the flipped shard was published"
[ "$(temps "$warm_tmp/c-flip")" = 0 ] || fail "the refused download was left behind"
if "$DLC_BIN/cachewarm" s3://b/sets/flip/part-00001-of-00005.dlc -o "$out/flip.dlc" \
    --endpoint "$S3_URL" -q 2>"$out/warmflip.err"; then
    fail "cachewarm accepted the flipped shard"
fi
grep -q "hash to" "$out/warmflip.err" || fail "cachewarm refused otherwise: $(cat "$out/warmflip.err")"

note "6. planted links"
push links
# The set's folder name: run once to learn it, then plant links in fresh caches.
"$drive" --url s3://b/sets/links --dir "$warm_tmp/learn" --endpoint "$S3_URL" >"$out/learn.json" \
    2>"$out/learn.err" || fail "links: $(cat "$out/learn.err")"
setid=$(basename "$(json_get "$out/learn.json" set_dir)")
victim=$warm_tmp/victim
mkdir -p "$victim"
cp "$src/set/part-00000-of-00005.dlc" "$victim/part-00000-of-00005.dlc"
echo keep >"$victim/part-00003-of-00005.dlc"
echo keep >"$victim/lockfile"
# (a) the set's folder is a link to the victim's folder
mkdir -p "$warm_tmp/c-la"
ln -s "$victim" "$warm_tmp/c-la/$setid"
if "$drive" --url s3://b/sets/links --dir "$warm_tmp/c-la" --endpoint "$S3_URL" --limit 2000000 \
    >/dev/null 2>"$out/la.err"; then
    fail "a cache whose set folder is a link was used"
fi
grep -q "$setid: is a symbolic link" "$out/la.err" || fail "the refusal does not name the link: $(cat "$out/la.err")"
# (b) the lock file is a link
mkdir -p "$warm_tmp/c-lb"
ln -s "$victim/lockfile" "$warm_tmp/c-lb/.dlcs.lock"
if "$drive" --url s3://b/sets/links --dir "$warm_tmp/c-lb" --endpoint "$S3_URL" \
    >/dev/null 2>"$out/lb.err"; then
    fail "a cache whose lock file is a link was used"
fi
grep -q ".dlcs.lock: is a symbolic link" "$out/lb.err" || fail "the lock link is not named: $(cat "$out/lb.err")"
# (c) a shard's name in the set's folder is a link
mkdir -p "$warm_tmp/c-lc/$setid"
ln -s "$victim/part-00003-of-00005.dlc" "$warm_tmp/c-lc/$setid/part-00003-of-00005.dlc"
if "$drive" --url s3://b/sets/links --dir "$warm_tmp/c-lc" --endpoint "$S3_URL" \
    >/dev/null 2>"$out/lc.err"; then
    fail "a cache with a link for a shard was used"
fi
grep -q "part-00003-of-00005.dlc: is a symbolic link" "$out/lc.err" ||
    fail "the shard link is not named: $(cat "$out/lc.err")"
# Nothing of the victim's was written, truncated or removed.
cmp -s "$victim/part-00000-of-00005.dlc" "$src/set/part-00000-of-00005.dlc" || fail "a file behind a link changed"
[ "$(cat "$victim/part-00003-of-00005.dlc")" = keep ] && [ "$(cat "$victim/lockfile")" = keep ] ||
    fail "a file behind a link was written"
[ "$(ls "$victim" | wc -l)" = 3 ] || fail "files appeared or went behind a link: $(ls "$victim")"

note "7. cacheinfo --plan writes and deletes nothing"
plan=$warm_tmp/c-plan
mkdir -p "$plan/$setid"
echo stale >"$plan/$setid/part-00001-of-00005.dlc"
echo dead >"$plan/$setid/part-00002-of-00005.dlc.99999.dlcs-tmp"
ln -s "$victim" "$plan/0123456789abcdef"
before=$(cd "$plan" && find . -printf '%p %s %y\n' | sort)
"$DLC_BIN/cacheinfo" s3://b/sets/links --plan --cache-dir "$plan" --endpoint "$S3_URL" --batch 8 \
    --window-shards 2 >"$out/plan.txt" 2>"$out/plan.err" || fail "cacheinfo --plan: $(cat "$out/plan.err")"
after=$(cd "$plan" && find . -printf '%p %s %y\n' | sort)
[ "$before" = "$after" ] || fail "cacheinfo --plan changed the cache folder: $before -> $after"
"$DLC_BIN/cacheinfo" s3://b/sets/links --plan --cache-dir "$warm_tmp/c-none" --endpoint "$S3_URL" \
    --batch 8 --window-shards 2 >/dev/null 2>"$out/plan2.err" || fail "cacheinfo --plan: $(cat "$out/plan2.err")"
[ ! -e "$warm_tmp/c-none" ] || fail "cacheinfo --plan made the cache folder"
echo "stream_trust: ok"
