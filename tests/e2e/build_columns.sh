#!/usr/bin/env bash
# Manifests with named columns end to end: several labels per image, numbers and lists of
# numbers become fields of the store, with the types the header and the values give; every
# record's values are read back with python3-lmdb and with cacheinfo --dump (.npy through
# np.load, scalars as text) and equal the manifest's; the store is the same at 1 and 2 threads;
# a bad cell names the manifest, the line and the column.
. "$(dirname "$0")/../lib/e2e.sh" build_columns

"$DLC_BIN/mkdemo" "$tmp/demo" --count 15 --classes 3 >/dev/null
cd "$tmp"
$PY - <<'PYEOF'
import json, os
files = sorted(os.path.join(r, f) for r, _, fs in os.walk("demo/train") for f in fs)
rows = []
with open("multi.tsv", "w") as m:
    m.write("# made by a labelling tool\n#columns: path label labels weight n score:float box:floats\n")
    for i, f in enumerate(files):
        # weight: whole numbers on even lines, fractions on odd ones: the column is float64.
        weight = str(i // 4) if i % 2 == 0 else repr(i / 4)
        row = dict(label=i % 4, labels=[(i * 7 + k) % 20 for k in range(i % 4)],
                   weight=float(weight), n=i * 1000 - 3, score=i, box=[i + 0.5, -i / 8, 2.0][: i % 3 + 1])
        rows.append(row)
        m.write("\t".join([f, str(row["label"]), ",".join(map(str, row["labels"])), weight,
                           str(row["n"]), str(row["score"]), ",".join(map(repr, row["box"]))]) + "\n")
json.dump(rows, open("rows.json", "w"))
PYEOF
digest() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["content_digest"])' "$1"; }
"$DLC_BIN/cachebuild" multi.tsv -o m1.dlc --size 32 --threads 1 --json >m1.json 2>/dev/null
"$DLC_BIN/cachebuild" multi.tsv -o m2.dlc --size 32 --threads 2 --json >m2.json 2>/dev/null
[ "$(digest m1.json)" = "$(digest m2.json)" ] || fail "1 and 2 threads gave other stores"
"$DLC_BIN/cacheinfo" m1.dlc --json >info.json
for i in 0 5 7; do
    "$DLC_BIN/cacheinfo" m1.dlc --dump $i --field labels -o labels$i.npy 2>/dev/null
    "$DLC_BIN/cacheinfo" m1.dlc --dump $i --field box -o box$i.npy 2>/dev/null
    "$DLC_BIN/cacheinfo" m1.dlc --dump $i --field weight -o weight$i.txt 2>/dev/null
    "$DLC_BIN/cacheinfo" m1.dlc --dump $i --field n -o n$i.npy 2>/dev/null
done
$PY - "$DLC_SRC/tests/lib" <<'PYEOF'
import json, struct, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import build_check as bc
rows = json.load(open("rows.json"))
info = json.load(open("info.json"))
fields = {f["name"]: f for f in info["fields"]}
assert [f["name"] for f in info["fields"]] == ["image", "label", "labels", "weight", "n", "score", "box"]
want = {"label": ("int", "int64", ["label"]), "labels": ("ndarray", "int64", ["variable"]),
        "weight": ("float", "float64", []), "n": ("int", "int64", []),
        "score": ("float", "float64", []), "box": ("ndarray", "float64", ["variable"])}
for name, (kind, dtype, flags) in want.items():
    f = fields[name]
    assert (f["kind"], f["dtype"], f["flags"]) == (kind, dtype, flags), f
assert fields["labels"]["shape"] == ["variable"] and fields["box"]["shape"] == ["variable"]
assert info["num_labels"] == 4 and info["labels"] == ["0", "1", "2", "3"]
s = bc.Store("m1.dlc")
assert s.count == len(rows)
for i, row in enumerate(rows):
    r = s.record(i)
    assert r["label"] == row["label"] and r["n"] == row["n"], (i, r["label"], r["n"])
    assert r["weight"] == row["weight"] and r["score"] == float(row["score"]), (i, r["weight"])
    labels = list(struct.unpack(f"<{len(r['labels'][0]) // 8}q", r["labels"][0]))
    box = list(struct.unpack(f"<{len(r['box'][0]) // 8}d", r["box"][0]))
    assert labels == row["labels"] and r["labels"][1] == len(row["labels"]), (i, labels)
    assert box == row["box"], (i, box)
for i in (0, 5, 7):
    l, b = np.load(f"labels{i}.npy"), np.load(f"box{i}.npy")
    assert l.dtype == np.int64 and l.tolist() == rows[i]["labels"], (i, l)
    assert b.dtype == np.float64 and b.tolist() == rows[i]["box"], (i, b)
    assert float(open(f"weight{i}.txt").read()) == rows[i]["weight"]
    n = np.load(f"n{i}.npy")
    assert n.shape == () and n.dtype == np.int64 and int(n) == rows[i]["n"]
print(f"build_columns: {len(rows)} records hold the manifest's values")
PYEOF

# A bad cell stops the build before anything is written, naming where it is.
sed -i '5s/\t[0-9]*\t/\tseven\t/' multi.tsv
if "$DLC_BIN/cachebuild" multi.tsv -o bad.dlc 2>err; then fail "a bad cell was accepted"; fi
grep -q "multi.tsv:5: column 2 (label): 'seven' is not an integer in 0..16777215" err ||
    { cat err >&2; fail "the message does not name line and column"; }
printf 'demo/train/x.jpg\t3,17,42\n' >plain.tsv
if "$DLC_BIN/cachebuild" plain.tsv -o bad.dlc 2>err; then fail "a list without a header"; fi
grep -q "#columns: path labels" err || { cat err >&2; fail "no hint for several labels"; }
echo "build_columns: ok"
