#!/usr/bin/env bash
# A store is readable without dlcache (docs/FORMAT.md): write one with a field of every kind and
# element type with the real writer (store_fixture), then read it with LMDB's own mdb_stat, with
# the Python snippet printed in docs/FORMAT.md, and with a full Python check of every schema
# entry, the offset table, every record, value, label count and the content digest; finally flip
# one payload byte and make sure the snippet reports the bad hash.
# Env: DLC_BIN (build/bin), DLC_SRC (source tree); set by ctest.
. "$(dirname "$0")/../lib/e2e.sh" store_foreign
N=37

for tool in "$DLC_BIN/store_fixture" mdb_stat "$PY"; do
    command -v "$tool" >/dev/null || fail "missing $tool"
done
"$PY" -c 'import lmdb' || fail "$PY has no lmdb module (python3-lmdb)"
store=$tmp/fixture.dlc

"$DLC_BIN/store_fixture" "$store" "$N"
[ -f "$store" ] || fail "no store written"
if ls -a "$tmp" | grep -q -- '-lock\|\.tmp-'; then
    fail "lock or temporary file left next to the store"
fi

# LMDB's own tool sees both databases with the right number of entries: the records, and
# format, schema, index, labels, label_counts, source_digest, build and min_dims.
stat_out=$(mdb_stat -n -a "$store")
echo "$stat_out"
samples_entries=$(awk '/^Status of samples/{f=1} f && /Entries:/{print $2; exit}' <<<"$stat_out")
meta_entries=$(awk '/^Status of meta/{f=1} f && /Entries:/{print $2; exit}' <<<"$stat_out")
[ "$samples_entries" = "$N" ] || fail "mdb_stat: samples has '$samples_entries' entries, expected $N"
[ "$meta_entries" = 8 ] || fail "mdb_stat: meta has '$meta_entries' entries, expected 8"

# The snippet exactly as docs/FORMAT.md prints it.
snippet=$tmp/read_record.py
awk '/^```python$/{f=1; next} /^```$/{f=0} f' "$DLC_SRC/docs/FORMAT.md" >"$snippet"
grep -q 'dlcache-format-snippet' "$snippet" || fail "no snippet in docs/FORMAT.md"
for i in 0 1 $((N - 1)); do
    "$PY" "$snippet" "$store" "$i" >/dev/null
done
out=$("$PY" "$snippet" "$store" 5)
echo "$out"
for want in 'record 5 of 37: image: image raw 41x87x3, 10701 bytes, hash ok' \
    'record 5 of 37: mask: image png 41x87x1, ' \
    'record 5 of 37: photo: image jpeg 32x32x3, ' \
    'record 5 of 37: boxes: ndarray float32 (1, 4), 16 bytes, hash ok' \
    'record 5 of 37: a_i16: ndarray int16 (1, 3, 1), 6 bytes, hash ok' \
    'record 5 of 37: id: int 5000008, 8 bytes, hash ok' \
    'record 5 of 37: weight: float 1.25, 8 bytes, hash ok' \
    "record 5 of 37: caption: bytes b'record 5record 5', 16 bytes, hash ok" \
    'record 5 of 37: label: int 2 (gamma), 8 bytes, hash ok'; do
    grep -qF "$want" <<<"$out" || fail "the snippet did not print: $want"
done
[ "$(grep -c 'hash ok' <<<"$out")" = 22 ] || fail "not every field of record 5 has a good hash"

# Every schema entry, record and value, the label counts and the content digest.
"$PY" "$DLC_SRC/tests/e2e/store_foreign.py" "$store" "$N"

# Flip one byte of record 5's image payload, found through the offset table and the field entry
# (FORMAT.md): it must sit 64-byte aligned, and the snippet must notice the change.
"$PY" - "$store" <<'PYEOF'
import struct, sys
import lmdb
path = sys.argv[1]
env = lmdb.open(path, subdir=False, readonly=True, lock=False, max_dbs=2)
meta = env.open_db(b"meta", create=False)
with env.begin() as txn:
    index = txn.get(b"index", db=meta)
env.close()
(off,) = struct.unpack_from("<Q", index, 8 * 5)
data = bytearray(open(path, "rb").read())
word, size = struct.unpack_from("<QQ", data, off + 16)  # field 0, "image"
at = off + word
assert size == 41 * 87 * 3 and at % 64 == 0, f"record 5's payload at offset {at}, size {size}"
data[at + 100] ^= 0x01
open(path, "wb").write(data)
PYEOF
if out=$("$PY" "$snippet" "$store" 5); then
    fail "a flipped byte went unnoticed: $out"
fi
grep -q 'image: image raw 41x87x3, 10701 bytes, hash MISMATCH' <<<"$out" ||
    fail "unexpected output: $out"
echo "store_foreign: ok"
