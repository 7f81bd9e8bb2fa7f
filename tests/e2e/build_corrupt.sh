#!/usr/bin/env bash
# Bad input files are skipped and named with their reason, counted in the
# store, and the store still verifies; --strict stops at the first one with
# exit status 1 and writes nothing. Also: an existing store is kept without
# --force, and a build with no valid image at all fails and writes nothing.
. "$(dirname "$0")/../lib/e2e.sh" build_corrupt

"$DLC_BIN/mkdemo" "$tmp/demo" --count 24 --classes 3 >/dev/null
tree=$tmp/demo/train
c=$tree/$(ls "$tree" | head -1)
good=$c/$(ls "$c" | head -1)
head -c 4000 "$good" > "$c/a_truncated.jpg"       # ends in the middle of the scan
echo "just some text" > "$c/b_text.jpg"            # not a JPEG at all
: > "$c/c_empty.jpg"                               # empty
ln -s "$tmp/nowhere.jpg" "$c/d_dangling.jpg"       # unreadable (root reads chmod 000 files)
mkdir "$c/e_folder.jpg"                            # a folder: walked into, not a file
printf '\xff\xd8\xff\xe0garbage after a JPEG start' > "$c/f_header_only.jpeg"

"$DLC_BIN/cachebuild" "$tree" -o "$tmp/s.dlc" --size 48 --json > "$tmp/b.json" 2>"$tmp/err"
$PY "$DLC_SRC/tests/lib/build_check.py" skips "$tmp/b.json" \
    "/a_truncated.jpg=decode" "/b_text.jpg=not a JPEG" "/c_empty.jpg=empty file" \
    "/d_dangling.jpg=cannot open" "/f_header_only.jpeg=decode"
for f in a_truncated b_text c_empty d_dangling f_header_only; do
    grep -q "$f" "$tmp/err" || fail "$f is not named on stderr"
done
"$DLC_BIN/cacheinfo" "$tmp/s.dlc" --verify --json > "$tmp/i.json"
$PY - "$tmp/i.json" <<'PYEOF'
import json, sys
info = json.load(open(sys.argv[1]))
assert info["count"] == 24, info["count"]
assert info["skipped"] == 5, info["skipped"]
assert info["ok"] is True and info["bad"] == [], info
assert info["build"]["options"]["size"] == 48, info["build"]
PYEOF

# --strict: the first bad file in item order stops the build.
set +e
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/strict.dlc" --size 48 --strict 2>"$tmp/err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "--strict exit status $rc, want 1"
grep -q "a_truncated.jpg" "$tmp/err" || fail "--strict does not name the file: $(cat "$tmp/err")"
[ ! -e "$tmp/strict.dlc" ] || fail "--strict left a store"
! ls "$tmp" | grep -q 'tmp-' || fail "--strict left a temporary file"

# An existing store is kept without --force (exit 2), replaced with it.
before=$(md5sum < "$tmp/s.dlc")
set +e
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/s.dlc" --size 32 2>"$tmp/err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "existing store: exit status $rc, want 2"
[ "$(md5sum < "$tmp/s.dlc")" = "$before" ] || fail "the existing store was changed"
"$DLC_BIN/cachebuild" "$tree" -o "$tmp/s.dlc" --size 32 --force 2>/dev/null
"$DLC_BIN/cacheinfo" "$tmp/s.dlc" --json | grep -q '"height": 32' || fail "--force did not replace"

# No valid image at all.
mkdir -p "$tmp/bad/only"
cp "$c/b_text.jpg" "$c/c_empty.jpg" "$tmp/bad/only/"
set +e
"$DLC_BIN/cachebuild" "$tmp/bad" -o "$tmp/none.dlc" 2>"$tmp/err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "no images: exit status $rc, want 1"
grep -q "no valid image" "$tmp/err" || fail "no images: $(cat "$tmp/err")"
[ ! -e "$tmp/none.dlc" ] || fail "no images: a store was written"

# cacheinfo --dump writes a PPM of the record's shape.
"$DLC_BIN/cacheinfo" "$tmp/s.dlc" --dump 3 -o "$tmp/r3.ppm" 2>/dev/null
[ "$(head -c 2 "$tmp/r3.ppm")" = P6 ] || fail "--dump did not write a PPM"
[ "$(stat -c %s "$tmp/r3.ppm")" -eq $((32 * 32 * 3 + 13)) ] || fail "--dump size"
# --dump -o replaces a file only once the value is whole, and never through a link or into a
# FIFO: a link planted at FILE made the dump overwrite the file it named, a FIFO held it for
# ever, and a full disk left FILE cut short and reported success.
echo "someone's notes" >"$tmp/notes"
ln -s "$tmp/notes" "$tmp/r4.ppm"
if "$DLC_BIN/cacheinfo" "$tmp/s.dlc" --dump 4 -o "$tmp/r4.ppm" 2>"$tmp/err"; then
    fail "--dump wrote through a link"
fi
grep -q "r4.ppm: is a symbolic link, not a file to write" "$tmp/err" || fail "$(cat "$tmp/err")"
[ "$(cat "$tmp/notes")" = "someone's notes" ] || fail "--dump changed the link's target"
mkfifo "$tmp/r5.ppm"
timeout 20 "$DLC_BIN/cacheinfo" "$tmp/s.dlc" --dump 4 -o "$tmp/r5.ppm" 2>"$tmp/err" && fail "a FIFO"
grep -q "r5.ppm: is a FIFO" "$tmp/err" || fail "a FIFO at --dump's file: $(cat "$tmp/err")"
if mkdir -p "$tmp/small" && mount -t tmpfs -o size=64k tmpfs "$tmp/small" 2>/dev/null; then
    echo "old" >"$tmp/small/old.ppm"
    head -c 60000 /dev/zero >"$tmp/small/fill" 2>/dev/null || true
    if "$DLC_BIN/cacheinfo" "$tmp/s.dlc" --dump 4 -o "$tmp/small/old.ppm" 2>"$tmp/err"; then
        umount -l "$tmp/small"
        fail "--dump on a full disk said it wrote the file"
    fi
    grep -q "No space left on device" "$tmp/err" || { umount -l "$tmp/small"; fail "$(cat "$tmp/err")"; }
    [ "$(cat "$tmp/small/old.ppm")" = old ] || { umount -l "$tmp/small"; fail "old file lost"; }
    [ -z "$(ls "$tmp/small" | grep tmp-)" ] || { umount -l "$tmp/small"; fail "a temporary left"; }
    umount -l "$tmp/small"
fi
# cacheinfo --verify names a damaged record and exits 1: flip one payload
# byte of record 5 (found through python3-lmdb, as docs/FORMAT.md reads it).
cp "$tmp/s.dlc" "$tmp/bad.dlc"
$PY - "$tmp/bad.dlc" <<'PYEOF'
import lmdb, struct, sys
path = sys.argv[1]
env = lmdb.open(path, subdir=False, readonly=True, lock=False, max_dbs=2)
with env.begin(db=env.open_db(b"samples", create=False)) as txn:
    payload = bytes(txn.get(struct.pack(">Q", 5)))[48:]
env.close()
data = bytearray(open(path, "rb").read())
at = data.find(payload)
assert at > 0 and data.find(payload, at + 1) < 0
data[at + 100] ^= 0xFF
open(path, "wb").write(data)
PYEOF
set +e
"$DLC_BIN/cacheinfo" "$tmp/bad.dlc" --verify --json > "$tmp/v.json" 2>"$tmp/err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "--verify of a damaged store: exit status $rc, want 1"
grep -q "record 5" "$tmp/err" || fail "--verify does not name record 5: $(cat "$tmp/err")"
$PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] is False and d["bad"] == [5], d' "$tmp/v.json"
echo "build_corrupt: ok"
