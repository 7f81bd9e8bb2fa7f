#!/usr/bin/env bash
# make_seeds.sh FUZZ_BIN_DIR OUT_DIR: fill OUT_DIR/<harness>/ with the seed
# inputs of every harness: the small hand-written ones committed in
# tests/fuzz/corpus/<harness>/, plus the ones that are made rather than
# committed because they are binary and derived from our own code (stores
# written by the real writer, schemas of every field kind, JPEGs from our encoder, loader states, resume
# journals with our hashes, store set indexes joined from real parts) or tiny
# tar shards in each tar dialect. The
# harnesses write their own seeds when DLC_FUZZ_SEED_DIR is set; -runs=0
# makes libFuzzer stop right after initialising.
set -euo pipefail
bin=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for h in store schema setindex manifest tar jpeg state warm stream tokens; do
    mkdir -p "$out/$h"
    if [ -d "$here/corpus/$h" ]; then
        find "$here/corpus/$h" -maxdepth 1 -type f -exec cp -f {} "$out/$h/" \;
    fi
done
for h in store schema setindex jpeg state warm stream; do
    if [ -x "$bin/fuzz_$h" ]; then
        DLC_FUZZ_SEED_DIR="$out/$h" "$bin/fuzz_$h" -runs=0 >/dev/null 2>&1 || {
            echo "make_seeds: fuzz_$h could not write its seeds" >&2
            exit 1
        }
    fi
done

# WebDataset shards: ustar, GNU (long names) and pax (long names, size
# records), with a good sample, a sample without .cls, one with a bad .cls,
# a .png sample and a directory; the trailing zero blocks are cut to the two
# the format asks for, to keep the seeds small.
"${PY:-/usr/bin/python3}" - "$out/tar" <<'PY'
import io, sys, tarfile
out = sys.argv[1]
jpeg = b"\xff\xd8\xff\xe0" + b"\0" * 28 + b"\xff\xd9"
def shard(name, fmt, members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for n, data in members:
            ti = tarfile.TarInfo(n)
            if data is None:
                ti.type = tarfile.DIRTYPE
                t.addfile(ti)
                continue
            ti.size = len(data)
            ti.mtime = 1700000000
            t.addfile(ti, io.BytesIO(data))
    raw = buf.getvalue().rstrip(b"\0")
    raw += b"\0" * (-len(raw) % 512) + b"\0" * 1024
    open(f"{out}/{name}", "wb").write(raw)
shard("ustar", tarfile.USTAR_FORMAT,
      [("d", None), ("d/s0.jpg", jpeg), ("d/s0.cls", b"3\n"), ("d/s1.jpeg", jpeg),
       ("d/s2.cls", b"7"), ("d/s3.png", b"png"), ("d/s3.cls", b"1"), ("d/s4.jpg", jpeg),
       ("d/s4.cls", b"x1")])
shard("gnu", tarfile.GNU_FORMAT,
      [("L" * 120 + "/a.b.jpg", jpeg), ("L" * 120 + "/a.b.cls", b"12")])
shard("pax", tarfile.PAX_FORMAT,
      [("P" * 200 + "/k.JPG", jpeg), ("P" * 200 + "/k.cls", b"0"), ("\u00e9t\u00e9.jpg", jpeg),
       ("\u00e9t\u00e9.cls", b"5")])
PY

# Token sources (fuzz_tokens: the first byte picks JSON lines, flat .bin, .npy or a Megatron
# pair, whose .idx length is in the next two bytes): one of each, in the layouts the reference
# writers of tests/python/test_tokens_build.py write (with the standard library only: make fuzz
# installs no numpy).
"${PY:-/usr/bin/python3}" - "$out/tokens" <<'PY'
import struct, sys
out = sys.argv[1]
def seed(name, kind, body):
    open(f"{out}/{name}", "wb").write(bytes([kind]) + body)
def npy(descr, shape, fmt, values):  # numpy.save's version 1.0 layout, without numpy
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * ((64 - (len(h) + 11) % 64) % 64) + "\n"
    return (b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() +
            struct.pack("<%d%s" % (len(values), fmt), *values))
seed("jsonl", 0, b'{"tokens": [5, 6, 7]}\n{"tokens": []}\n{"tokens": [9, 0, 3]}\n')
seed("bin", 1, struct.pack("<8H", 5, 6, 0, 7, 8, 9, 0, 4))
seed("npy1", 2, npy("<i4", "(4,)", "i", [3, 4, 0, 5]))
seed("npy2", 2, npy("<u2", "(2, 3)", "H", [1, 2, 3, 4, 5, 6]))
lens, ptrs, docs = [2, 3, 1], [0, 4, 10], [0, 2, 3]
idx = (b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(lens), len(docs)) +
       struct.pack("<3i", *lens) + struct.pack("<3q", *ptrs) + struct.pack("<3q", *docs))
seed("megatron", 3, struct.pack("<H", len(idx)) + idx + struct.pack("<6H", *range(1, 7)))
PY
