#!/usr/bin/env bash
# A store is readable without dlcache (docs/FORMAT.md): write one with the real
# writer (store_fixture), then read it with LMDB's own mdb_stat, with the Python
# snippet printed in docs/FORMAT.md, and with a full Python check of every
# record, label count and the content digest; finally flip one payload byte and
# make sure the snippet reports the bad hash.
# Env: DLC_BIN (build/bin), DLC_SRC (source tree); set by ctest.
set -euo pipefail
SRC=${DLC_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${DLC_BIN:-$SRC/build/bin}
PY=${PY:-/usr/bin/python3}
N=37

for tool in "$BIN/store_fixture" mdb_stat "$PY"; do
    command -v "$tool" >/dev/null || { echo "store_foreign: missing $tool" >&2; exit 1; }
done
"$PY" -c 'import lmdb' || { echo "store_foreign: $PY has no lmdb module (python3-lmdb)" >&2; exit 1; }

work=$(mktemp -d /tmp/dlc-store-foreign-XXXXXX)
trap 'rm -rf "$work"' EXIT
store=$work/fixture.dlc

"$BIN/store_fixture" "$store" "$N"
[ -f "$store" ] || { echo "store_foreign: no store written" >&2; exit 1; }
if ls -a "$work" | grep -q -- '-lock\|\.tmp-'; then
    echo "store_foreign: lock or temporary file left next to the store" >&2; exit 1
fi

# LMDB's own tool sees both databases with the right number of entries.
stat_out=$(mdb_stat -n -a "$store")
echo "$stat_out"
samples_entries=$(awk '/^Status of samples/{f=1} f && /Entries:/{print $2; exit}' <<<"$stat_out")
meta_entries=$(awk '/^Status of meta/{f=1} f && /Entries:/{print $2; exit}' <<<"$stat_out")
[ "$samples_entries" = "$N" ] || { echo "store_foreign: mdb_stat: samples has '$samples_entries' entries, expected $N" >&2; exit 1; }
[ "$meta_entries" = 5 ] || { echo "store_foreign: mdb_stat: meta has '$meta_entries' entries, expected 5" >&2; exit 1; }

# The snippet exactly as docs/FORMAT.md prints it.
snippet=$work/read_record.py
awk '/^```python$/{f=1; next} /^```$/{f=0} f' "$SRC/docs/FORMAT.md" >"$snippet"
grep -q 'dlcache-format-snippet' "$snippet" || { echo "store_foreign: no snippet in docs/FORMAT.md" >&2; exit 1; }
for i in 0 1 $((N - 1)); do
    "$PY" "$snippet" "$store" "$i"
done
out=$("$PY" "$snippet" "$store" 5)
grep -q 'record 5 of 37: label 2 (gamma), 41x87x3, 10701 bytes, encoding 0, hash ok' <<<"$out" ||
    { echo "store_foreign: unexpected snippet output: $out" >&2; exit 1; }

# Every record, the label counts and the content digest.
"$PY" "$SRC/tests/e2e/store_foreign.py" "$store" "$N"

# Flip one byte of record 5's payload, found by its header (FORMAT.md): the
# payload must sit 64-byte aligned, and the snippet must notice the change.
"$PY" - "$store" <<'PYEOF'
import struct, sys
path = sys.argv[1]
header = struct.pack("<IHHqIIIIQ", 0x52434C44, 48, 0, 2, 41, 87, 3, 0, 41 * 87 * 3)
data = bytearray(open(path, "rb").read())
at = data.find(header) + 48
assert at > 48 and data.find(header, at) < 0, "record 5's header is not unique"
assert at % 64 == 0, f"record 5's payload at offset {at}, not 64-byte aligned"
data[at + 100] ^= 0x01
open(path, "wb").write(data)
PYEOF
if out=$("$PY" "$snippet" "$store" 5); then
    echo "store_foreign: a flipped byte went unnoticed: $out" >&2; exit 1
fi
grep -q 'hash MISMATCH' <<<"$out" || { echo "store_foreign: unexpected output: $out" >&2; exit 1; }
echo "store_foreign: ok"
