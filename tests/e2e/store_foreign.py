"""Read a whole store written by tests/e2e/store_fixture.c with nothing but
Python's lmdb module and the system's libxxhash, following docs/FORMAT.md, and
check every field, byte, label count and the content digest.

usage: store_foreign.py STORE COUNT
Exits non-zero with a message naming the record on the first mismatch."""
import ctypes
import struct
import sys

import lmdb

_lib = ctypes.CDLL("libxxhash.so.0")
_lib.XXH3_64bits.restype = ctypes.c_uint64
_lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3_64(data):
    return _lib.XXH3_64bits(bytes(data), len(data))


def expected(i):
    """The fixture's record i: (label, height, width, payload)."""
    h, w = (16 + i * 5 % 49, 32 + i * 11 % 65) if i % 2 else (8, 8)
    size = h * w * 3
    payload = bytes((31 * i + 7 * j + (j >> 9)) & 255 for j in range(size))
    return i % 3, h, w, payload


def fail(msg):
    print(f"store_foreign.py: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    path, want_count = sys.argv[1], int(sys.argv[2])
    env = lmdb.open(path, subdir=False, readonly=True, lock=False, max_dbs=2)
    meta = env.open_db(b"meta", create=False)
    samples = env.open_db(b"samples", create=False)
    with env.begin() as txn:
        info = txn.get(b"format", db=meta)
        if info is None or len(info) != 104:
            fail("no 104-byte format record")
        (magic, version, encoding, count, height, width, channels, num_labels, skipped,
         payload_bytes, content_digest) = struct.unpack_from("<8sIIQIIIIQQQ", info)
        if struct.unpack_from("<Q", info, 96)[0] != xxh3_64(info[:96]):
            fail("format block hash mismatch")
        if (magic, version, encoding, count, channels, num_labels, skipped) != (
                b"DLCSTORE", 1, 0, want_count, 3, 3, 2):
            fail(f"unexpected format block {magic, version, encoding, count, channels}")
        if (height, width) != ((0, 0) if count > 1 else (8, 8)):
            fail(f"shape {height}x{width}: the fixture's shapes differ")
        names = txn.get(b"labels", db=meta).split(b"\0")[:-1]
        if names != [b"alpha", b"beta", b"gamma"]:
            fail(f"labels {names}")
        counts = struct.unpack("<3Q", txn.get(b"label_counts", db=meta))
        if txn.get(b"source_digest", db=meta) != b"0123456789abcdef":
            fail("source_digest")
        if b"store_fixture" not in txn.get(b"build", db=meta):
            fail("build JSON")

        seen = [0, 0, 0]
        total = 0
        stream = bytearray()
        for i in range(count):
            value = txn.get(struct.pack(">Q", i), db=samples)
            if value is None:
                fail(f"record {i}: missing")
            (rmagic, hsize, renc, label, h, w, c, flags, size,
             stored) = struct.unpack_from("<IHHqIIIIQQ", value)
            payload = value[48:]
            if (rmagic, hsize, renc, flags, size) != (0x52434C44, 48, 0, 0, len(payload)):
                fail(f"record {i}: bad header {rmagic:#x} {hsize} {renc} {flags} {size}")
            if xxh3_64(payload) != stored:
                fail(f"record {i}: checksum mismatch")
            if (label, h, w, bytes(payload)) != expected(i) or c != 3:
                fail(f"record {i}: content differs from the fixture")
            seen[label] += 1
            total += size
            stream += struct.pack("<q", label) + payload
        if txn.get(struct.pack(">Q", count), db=samples) is not None:
            fail("a record past count")
        if tuple(seen) != counts:
            fail(f"label counts {seen}, metadata {counts}")
        if total != payload_bytes:
            fail(f"payload bytes {total}, metadata {payload_bytes}")
        if xxh3_64(stream) != content_digest:
            fail("content digest mismatch")
    print(f"foreign reader: {count} records, labels {counts}, "
          f"content digest {content_digest:016x}: ok")


if __name__ == "__main__":
    main()
