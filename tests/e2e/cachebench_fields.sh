#!/usr/bin/env bash
# cachebench load --fields on stores that have no 224 x 224 RGB image to measure: one-channel
# 28 x 28 images with labels (cachebuild --channels 1), and a store of token ids only (written
# with the public writer). Byte and sample counts cover every selected field, the ceiling copies
# samples of that size, the digest is the same at any thread count and changes with the
# selection, and an unknown field or a JPEG path without an RGB image is refused with a reason.
. "$(dirname "$0")/../lib/e2e.sh" cachebench_fields

B=$DLC_BIN/cachebench
"$DLC_BIN/mkdemo" "$tmp/demo" --count 40 --classes 4 >/dev/null
"$DLC_BIN/cachebuild" "$tmp/demo/train" -o "$tmp/g.dlc" --channels 1 --size 28 2>/dev/null
$PY "$DLC_SRC/tests/lib/write_tokens.py" "$DLC_LIB/libdlcache.so" "$tmp/tok.dlc" 50
run() { # run OUT.json STORE ARGS...
    local out=$1 store=$2
    shift 2
    "$B" load "$store" --batch 8 --epochs 2 --seconds 0.2 --json "$@" >"$out" 2>"$out.err" ||
        { cat "$out.err" >&2; fail "load $store $*"; }
}
run "$tmp/all1.json" "$tmp/g.dlc" --crop 28 --threads 1
run "$tmp/all2.json" "$tmp/g.dlc" --crop 0 --threads 2 --prefetch 3
run "$tmp/img.json" "$tmp/g.dlc" --crop 24 --fields image --threads 2
run "$tmp/lab.json" "$tmp/g.dlc" --fields label --threads 2
run "$tmp/tok1.json" "$tmp/tok.dlc" --threads 1
run "$tmp/tok2.json" "$tmp/tok.dlc" --threads 2 --fields tokens
$PY - "$tmp" <<'PYEOF' || fail "load JSON"
import json, sys
r = {n: json.load(open(f"{sys.argv[1]}/{n}.json")) for n in
     ("all1", "all2", "img", "lab", "tok1", "tok2")}
for n, v in r.items():
    assert v["samples"] > 0 and v["samples_per_s"] > 0 and v["ratio_to_ceiling"] > 0, (n, v)
    assert len(v["digest"]) == 16 and v["digest_samples"] in (80, 100), (n, v)
    rep = v["report"]  # the loader's report over the window (docs/WAITING.md)
    assert rep["bound"] in ("model", "cpu", "storage", "network", "copy", "consumer",
                          "batch"), (n, rep)
    assert rep["reason"] and rep["advice"] and rep["batches"] > 0, (n, rep)
    assert all(0 <= rep[k] <= 1 for k in rep if k.endswith("_share")), (n, rep)
a = r["all1"]
assert a["fields"] == ["image", "label"] and a["sample_bytes"] == 28 * 28 + 8, a
assert a["bytes"] == a["samples"] * (28 * 28 + 8), a
assert r["all2"]["crop"] == 28 and r["all2"]["digest"] == a["digest"], "--crop 0, other threads"
i = r["img"]
assert i["fields"] == ["image"] and i["sample_bytes"] == 24 * 24 and i["bytes"] == i["samples"] * 576, i
l = r["lab"]
assert l["fields"] == ["label"] and l["sample_bytes"] == 8 and l["bytes"] == l["samples"] * 8, l
assert len({a["digest"], i["digest"], l["digest"]}) == 3, "the selection changes the digest"
t1, t2 = r["tok1"], r["tok2"]
assert t1["fields"] == ["tokens"] and t1["digest"] == t2["digest"], (t1, t2)
# Tokens are padded to the longest of the batch (8 ids at most): 4 bytes each.
assert 0 < t1["bytes"] <= t1["samples"] * 8 * 4 and t1["sample_bytes"] == 8 * 4, t1
print("cachebench_fields: 1-channel and token stores measured by their selected fields")
PYEOF

set +e
"$B" load "$tmp/g.dlc" --fields image,nope --seconds 0.1 2>"$tmp/err1"; rc1=$?
"$B" load "$tmp/g.dlc" --crop 28 --jpeg-dir "$tmp/demo/train" --seconds 0.1 2>"$tmp/err2"; rc2=$?
"$B" load "$tmp/g.dlc" --fields , --seconds 0.1 2>"$tmp/err3"; rc3=$?
set -e
[ $rc1 -eq 2 ] && grep -q 'no field "nope" (it has: image, label)' "$tmp/err1" ||
    { cat "$tmp/err1" >&2; fail "unknown field: rc $rc1"; }
[ $rc2 -eq 2 ] && grep -q "must have 3 channels" "$tmp/err2" ||
    { cat "$tmp/err2" >&2; fail "JPEG path on a gray store: rc $rc2"; }
[ $rc3 -eq 2 ] || fail "--fields , accepted"
echo "cachebench_fields: ok"
