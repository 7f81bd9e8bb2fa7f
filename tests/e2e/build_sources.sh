#!/usr/bin/env bash
# Manifest and WebDataset sources end to end: tar shards written by Python's
# tarfile (pax format, long member names) and GNU tar, a manifest with
# relative paths and comments; records come out in source order with the
# given labels, and the same images give the same pixels whatever the source.
. "$(dirname "$0")/../lib/e2e.sh" build_sources

"$DLC_BIN/mkdemo" "$tmp/demo" --count 12 --classes 3 >/dev/null
cd "$tmp"
# The same 12 images as a manifest (labels 7 - class index) and as two shards.
$PY - <<'PYEOF'
import io, os, tarfile
files = sorted(os.path.join(r, f) for r, _, fs in os.walk("demo/train") for f in fs)
classes = sorted(os.listdir("demo/train"))
with open("list.tsv", "w") as m:
    m.write("# path\tlabel\n\n")
    for f in files:
        m.write(f"{f}\t{7 - classes.index(f.split('/')[2])}\n")
long = "a-very-long-folder-name-" * 6
for shard, part in (("shard-0.tar", files[:7]), ("shard-1.tar", files[7:])):
    with tarfile.open(shard, "w", format=tarfile.PAX_FORMAT) as t:
        for i, f in enumerate(part):
            key = f"{long}/{shard[:-4]}-{i:04d}"  # no dot: the key ends at the first one
            t.add(f, arcname=key + ".jpg")
            cls = str(7 - classes.index(f.split('/')[2])).encode()
            info = tarfile.TarInfo(key + ".cls")
            info.size = len(cls)
            t.addfile(info, io.BytesIO(cls))
PYEOF
"$DLC_BIN/cachebuild" list.tsv -o m.dlc --size 40 --json > m.json 2>/dev/null
"$DLC_BIN/cachebuild" shard-0.tar shard-1.tar -o t.dlc --size 40 --json > t.json 2>/dev/null
"$DLC_BIN/cacheinfo" m.dlc --json > mi.json
"$DLC_BIN/cacheinfo" t.dlc --json > ti.json
$PY - <<'PYEOF'
import json
m, t = json.load(open("mi.json")), json.load(open("ti.json"))
for d in (m, t):
    assert d["count"] == 12, d["count"]
    assert d["labels"] == [str(i) for i in range(8)], d["labels"]
    assert d["label_counts"][:5] == [0, 0, 0, 0, 0] and sum(d["label_counts"]) == 12
# Same images in the same order with the same labels: the same content.
assert m["content_digest"] == t["content_digest"], (m["content_digest"], t["content_digest"])
PYEOF
# GNU tar's own format, built from the same members.
mkdir gnu && tar -xf shard-0.tar -C gnu && (cd gnu && tar --format=gnu -cf ../gnu.tar $(tar -tf ../shard-0.tar))
"$DLC_BIN/cachebuild" gnu.tar -o g.dlc --size 40 --json > g.json 2>/dev/null
$PY -c 'import json; d=json.load(open("g.json")); assert d["count"] == 7 and not d["skipped"], d'
# A malformed manifest line stops the build and names the line.
printf 'demo/train/x.jpg\t1\ndemo/train/y.jpg one\n' > bad.tsv
if "$DLC_BIN/cachebuild" bad.tsv -o bad.dlc 2>err; then fail "malformed manifest accepted"; fi
grep -q "bad.tsv:2" err || fail "malformed manifest: $(cat err)"
echo "build_sources: ok"
