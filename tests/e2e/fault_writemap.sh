#!/usr/bin/env bash
# The writer maps its file with MDB_WRITEMAP, where a store to a page of the map whose block the
# file system cannot allocate would kill the process with SIGBUS. It never gets there: the map
# is only ever as large as the blocks fallocate() reserved for it, and a growth that cannot be
# reserved is a clean "disk full". Shown on a 100 MiB tmpfs with the Python writer (which gives
# the writer no size estimate, so the map starts at 64 MiB and must grow): the write of 140 MiB
# fails with ENOSPC naming the file, no temporary file is left, and an older store at that path
# is unchanged. Skipped (77) where a tmpfs cannot be mounted.
set -euo pipefail
: "${DLC_LIB:?DLC_LIB must name the lib directory of the build}"
: "${DLC_SRC:?DLC_SRC must name the source tree}"
PY=${PY:-/usr/bin/python3}
[ -f "$DLC_LIB/libdlcache.so" ] || { echo "SKIP: $DLC_LIB/libdlcache.so is not built" >&2; exit 77; }
tmp=$(mktemp -d)
mnt=$tmp/small
mkdir -p "$mnt"
cleanup() {
    umount "$mnt" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mount -t tmpfs -o size=100m tmpfs "$mnt" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs" >&2; exit 77; }
export DLCACHE_LIB=$DLC_LIB/libdlcache.so PYTHONPATH=$DLC_SRC/python

# write N MIB: N records of 1 MiB random bytes; prints the error, or "ok".
write() {
    "$PY" - "$mnt/s.dlc" "$1" <<'EOF'
import os, sys, dlcache
path, n = sys.argv[1], int(sys.argv[2])
try:
    dlcache.write(({"blob": os.urandom(1 << 20), "n": i} for i in range(n)), path,
                  force=True, progress=False)
    print("ok")
except Exception as e:
    print("%s: %s" % (type(e).__name__, e))
EOF
}

[ "$(write 8)" = ok ] || fail "a small store does not fit in 100 MiB"
old=$(sha256sum <"$mnt/s.dlc")
set +e
out=$(write 140)
rc=$?
set -e
[ "$rc" = 0 ] || fail "the writer died (exit $rc; SIGBUS is 135): $out"
case $out in
*"No space left on device"*"s.dlc"*"disk full"*) ;;
*) fail "not a clean disk full: $out" ;;
esac
if ls -a "$mnt" | grep -q '\.tmp-'; then fail "a temporary file was left: $(ls -a "$mnt")"; fi
[ "$(sha256sum <"$mnt/s.dlc")" = "$old" ] || fail "the older store changed"
echo "fault_writemap: ok ($out)"
