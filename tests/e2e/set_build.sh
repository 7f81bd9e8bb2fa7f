#!/usr/bin/env bash
# A store set built by cachebuild from the demo data delivers exactly what a single store built
# from the same sources delivers: the same loader digests (an epoch of uint8 random crops, of
# float16 RandomResizedCrop, and of whole records uncropped and unflipped: every byte of every
# record), the same labels, counts and skips. Built with --shards 3 in one process, or as three
# --part processes and a --join, the set is the same (its content digest). cacheinfo shows the
# shards and names the shard of a bad record.
. "$(dirname "$0")/../lib/e2e.sh" set_build

"$DLC_BIN/mkdemo" "$tmp/demo" --count 240 --classes 6 >/dev/null
tree=$tmp/demo/train
# Items that cannot be records, in what becomes part 1 of 3: skipped there as in the store.
classes=($(ls "$tree"))
echo "not a jpeg" >"$tree/${classes[2]}/zz-bad.jpg"
echo "png" >"$tree/${classes[3]}/zz-skip.png"
args=(--size 96 --threads 2)

"$DLC_BIN/cachebuild" "$tree" -o "$tmp/one.dlc" "${args[@]}" 2>/dev/null
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/set" --shards 3 "${args[@]}" --json >"$tmp/set.json" \
    2>/dev/null
[ -f "$tmp/set/index.dlcset" ] || fail "--shards 3 wrote no index"
[ "$(ls "$tmp/set" | grep -c '^part-0000[0-2]-of-00003\.dlc$')" = 3 ] || fail "not 3 parts: $(ls "$tmp/set")"
$PY - "$tmp/set.json" <<'EOF' || fail "--json of --shards"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] and d["set"]["parts"] == 3, d
b = d["set"]["built"]
assert [p["part"] for p in b] == [0, 1, 2], b
assert b[0]["first_item"] == 0 and b[0]["end_item"] == b[1]["first_item"], b
assert b[2]["end_item"] == d["set"]["items"] == 242, b
assert sum(p["count"] for p in b) == d["count"] == 240, d
assert sum(p["skipped"] for p in b) == d["skipped_count"] == 2, d
EOF

# load STORE ARGS...: the digest of an epoch through cachebench load (short reference windows).
load() {
    local store=$1
    shift
    "$DLC_BIN/cachebench" load "$store" --epochs 1 --batch 32 --threads 2 --seconds 0.2 "$@" --json 2>/dev/null |
        $PY -c 'import json,sys; print(json.load(sys.stdin)["digest"])'
}
views=("--crop 64" "--crop 64 --random-resized-crop --dtype float16" "--crop 0 --flip 0")
for v in "${views[@]}"; do
    # shellcheck disable=SC2086
    a=$(load "$tmp/one.dlc" $v) || fail "load one.dlc $v"
    # shellcheck disable=SC2086
    b=$(load "$tmp/set" $v) || fail "load set $v"
    [ "$a" = "$b" ] || fail "loader digests differ ($v): store $a, set $b"
done

# The same records, labels, counts and skips in cacheinfo.
"$DLC_BIN/cacheinfo" "$tmp/one.dlc" --json >"$tmp/one.info"
"$DLC_BIN/cacheinfo" "$tmp/set" --verify --json >"$tmp/set.info" || fail "the set does not verify"
$PY - "$tmp/one.info" "$tmp/set.info" <<'EOF' || fail "cacheinfo of the store and the set disagree"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for k in ("count", "labels", "label_counts", "skipped", "payload_bytes", "height", "width",
          "channels", "encoding", "num_labels"):
    assert a[k] == b[k], (k, a[k], b[k])
assert a["set"] is None
s = b["set"]
assert s["shards"] == 3 and [f["name"] for f in s["files"]] == \
    ["part-0000%d-of-00003.dlc" % k for k in range(3)], s
assert sum(f["count"] for f in s["files"]) == b["count"], s
assert s["files"][1]["first"] == s["files"][0]["count"], s
assert sum(f["bytes"] for f in s["files"]) == b["bytes"], s
EOF
"$DLC_BIN/cacheinfo" "$tmp/set" | grep -q "^set  *3 shards" || fail "cacheinfo shows no set line"

# Three processes, one part each, then the join: the same set.
for i in 0 1 2; do
    "$DLC_BIN/cachebuild" "$tree" -o "$tmp/parts" --part "$i/3" --size 96 --threads 1 \
        --json >"$tmp/part$i.json" 2>/dev/null &
    pids[i]=$!
done
for i in 0 1 2; do wait "${pids[i]}" || fail "part $i/3 failed"; done
$PY - "$tmp/part1.json" <<'EOF' || fail "--json of --part"
import json, sys
d = json.load(open(sys.argv[1]))
b = d["set"]["built"]
assert d["ok"] and d["set"]["parts"] == 3 and len(b) == 1 and b[0]["part"] == 1, d
assert b[0]["name"] == "part-00001-of-00003.dlc" and b[0]["skipped"] == d["skipped_count"], d
EOF
[ ! -e "$tmp/parts/index.dlcset" ] || fail "a part wrote an index"
"$DLC_BIN/cachebuild" --join "$tmp/parts" 2>/dev/null || fail "--join of 3 parts failed"
dig() { "$DLC_BIN/cacheinfo" "$1" --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["content_digest"])'; }
[ "$(dig "$tmp/parts")" = "$(dig "$tmp/set")" ] || fail "parts built apart differ from --shards"
[ "$(load "$tmp/parts" --crop 0 --flip 0)" = "$(load "$tmp/one.dlc" --crop 0 --flip 0)" ] ||
    fail "parts built apart deliver other records"
"$DLC_BIN/cachebuild" --join "$tmp/parts" --json 2>/dev/null | grep -q '"unchanged": true' ||
    fail "a second join rewrote the index"

# JPEG records: the same holds.
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/one.jpg.dlc" "${args[@]}" --encoding jpeg 2>/dev/null
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/jset" --shards 2 "${args[@]}" --encoding jpeg 2>/dev/null
[ "$(load "$tmp/jset" --crop 0 --flip 0)" = "$(load "$tmp/one.jpg.dlc" --crop 0 --flip 0)" ] ||
    fail "a JPEG set delivers other records"

# A bad byte in shard 1: --verify names the shard, in text and JSON.
cp -r "$tmp/set" "$tmp/bad"
$PY - "$tmp/bad/part-00001-of-00003.dlc" <<'EOF'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(20 * 28672 + 4000)  # inside the pixels of some record of the shard
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0xFF]))
EOF
set +e
"$DLC_BIN/cacheinfo" "$tmp/bad" --verify >/dev/null 2>"$tmp/bad.err"
rc=$?
"$DLC_BIN/cacheinfo" "$tmp/bad" --verify --json >"$tmp/bad.json" 2>/dev/null
set -e
[ "$rc" = 1 ] || fail "verify of a bad set: exit $rc"
grep -q "bad record .*part-00001-of-00003.dlc" "$tmp/bad.err" || fail "no shard named: $(cat "$tmp/bad.err")"
$PY - "$tmp/bad.json" <<'EOF' || fail "--verify --json names no shard"
import json, sys
d = json.load(open(sys.argv[1]))
assert not d["ok"] and d["bad"], d
r = d["bad_records"][0]
assert r["file"] == "part-00001-of-00003.dlc" and "part-00001" in r["message"], r
assert r["record"] >= d["set"]["files"][1]["first"], r
EOF
echo "set_build: ok (3 views, --shards 3 and 3 --part processes, JPEG, a bad shard named)"
