"""Read a whole store written by tests/lib/store_fixture.c with nothing but Python's lmdb
module, zlib and the system's libxxhash, following docs/FORMAT.md (format version 2), and check
the format block, every schema entry, the offset table, every record header, field entry,
payload alignment and value (recomputed from the formulas of tests/lib/store_kinds.h; PNGs decoded
here, JPEGs checked by hash and header), every hash, the label counts and the content digest.

usage: store_foreign.py STORE COUNT
Exits non-zero with a message naming the record and the field on the first mismatch."""
import ctypes
import struct
import sys
import zlib

import lmdb

_lib = ctypes.CDLL("libxxhash.so.0")
_lib.XXH3_64bits.restype = ctypes.c_uint64
_lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
_lib.XXH3_createState.restype = ctypes.c_void_p
_lib.XXH3_64bits_reset.argtypes = [ctypes.c_void_p]
_lib.XXH3_64bits_update.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
_lib.XXH3_64bits_digest.restype = ctypes.c_uint64
_lib.XXH3_64bits_digest.argtypes = [ctypes.c_void_p]


def xxh3_64(data):
    data = bytes(data)
    return _lib.XXH3_64bits(data, len(data))


IMAGE, NDARRAY, INT, FLOAT, BYTES = 1, 2, 3, 4, 5
VARIABLE, MASK, BOXES, LABEL = 1, 2, 4, 8
NO_FIELD = 0xFFFFFFFF
DTYPE = {0: "B", 1: "f", 2: "e", 3: "b", 4: "H", 5: "h", 6: "i", 7: "q", 8: "d"}

# name: (kind, dtype, encoding, flags of a store of many records, ndim, shape) as written
# (tests/lib/store_kinds.h); VARIABLE shapes have 0 where they vary.
FIELDS = [
    ("image", IMAGE, 0, 0, VARIABLE, 3, (0, 0, 3)),
    ("gray", IMAGE, 0, 0, 0, 3, (16, 12, 1)),
    ("rgba", IMAGE, 0, 2, 0, 3, (10, 12, 4)),
    ("photo", IMAGE, 0, 1, 0, 3, (32, 32, 3)),
    ("thumb", IMAGE, 0, 1, VARIABLE, 3, (0, 0, 1)),
    ("mask", IMAGE, 0, 2, VARIABLE | MASK, 3, (0, 0, 1)),
    ("boxes", NDARRAY, 1, 0, VARIABLE | BOXES, 2, (0, 4)),
    ("classes", NDARRAY, 6, 0, VARIABLE, 1, (0,)),
    ("tokens", NDARRAY, 4, 0, VARIABLE, 2, (0, 2)),
    ("a_u8", NDARRAY, 0, 0, 0, 1, (3,)),
    ("a_i8", NDARRAY, 3, 0, 0, 2, (2, 2)),
    ("a_u16", NDARRAY, 4, 0, 0, 1, (5,)),
    ("a_i16", NDARRAY, 5, 0, 0, 3, (1, 3, 1)),
    ("a_i32", NDARRAY, 6, 0, 0, 1, (2,)),
    ("a_i64", NDARRAY, 7, 0, 0, 1, (2,)),
    ("a_f16", NDARRAY, 2, 0, 0, 1, (4,)),
    ("a_f32", NDARRAY, 1, 0, 0, 2, (2, 3)),
    ("a_f64", NDARRAY, 8, 0, 0, 1, (3,)),
    ("id", INT, 7, 0, 0, 0, ()),
    ("weight", FLOAT, 8, 0, 0, 0, ()),
    ("caption", BYTES, 0, 0, 0, 0, ()),
    ("label", INT, 7, 0, LABEL, 0, ()),
]
NAMES = [f[0] for f in FIELDS]


def fail(msg):
    print(f"store_foreign.py: {msg}", file=sys.stderr)
    sys.exit(1)


def png_pixels(data):
    """(height, width, channels, pixels) of an 8-bit, non-interlaced gray, RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "no PNG signature"
    pos, idat = 8, b""
    while pos < len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and color in (0, 2, 6), (depth, color, interlace)
            ch = {0: 1, 2: 3, 6: 4}[color]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, out = zlib.decompress(idat), w * ch, bytearray()
    prev = bytearray(stride)
    for y in range(h):
        ftype, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - ch] if x >= ch else 0
            b, c = prev[x], prev[x - ch] if x >= ch else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 255
            elif ftype == 2:
                line[x] = (line[x] + b) & 255
            elif ftype == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += line
        prev = line
    return h, w, ch, bytes(out)


def jpeg_psnr(data, channels, want):
    """PSNR in dB of a JPEG against its pixels, decoded by Pillow when it is installed."""
    try:
        import io
        import math
        from PIL import Image
    except ImportError:
        return None
    img = Image.open(io.BytesIO(bytes(data))).convert("L" if channels == 1 else "RGB")
    got = img.tobytes()
    se = sum((a - b) ** 2 for a, b in zip(got, want))
    return math.inf if se == 0 else 10 * math.log10(255 * 255 * len(want) / se)


def smooth(i, y, x, c):
    return (2 * x + 2 * y + 40 * c + 4 * (i % 8)) & 255


def f16(d):
    return struct.pack("<e", d)


def expected(i):
    """Record i's values: {name: (dim0, dim1, bytes or (h, w, c, pixels) or number)}."""
    h, w = (16 + i * 5 % 49, 32 + i * 11 % 65) if i % 2 else (8, 8)
    v = {"image": (h, w, bytes((31 * i + 7 * j + (j >> 9)) & 255 for j in range(h * w * 3)))}
    v["gray"] = (16, 12, bytes((3 * i + 5 * j) & 255 for j in range(16 * 12)))
    v["rgba"] = (10, 12, bytes((i + j * j) & 255 for j in range(10 * 12 * 4)))
    v["photo"] = (32, 32, bytes(smooth(i, y, x, c) for y in range(32) for x in range(32)
                                for c in range(3)))
    th, tw = 8 + i % 9, 8 + i * 3 % 13
    v["thumb"] = (th, tw, bytes(smooth(i, y, x, 0) for y in range(th) for x in range(tw)))
    v["mask"] = (h, w, bytes((y // 4 + x // 4 + i) % 5 for y in range(h) for x in range(w)))
    nb = i % 4
    v["boxes"] = (nb, 0, b"".join(struct.pack("<4f", k, k + 1, k + 10.5, i + 0.25)
                                  for k in range(nb)))
    v["classes"] = (nb, 0, b"".join(struct.pack("<i", (i + k) % 3) for k in range(nb)))
    ln = i * 7 % 5
    v["tokens"] = (ln, 0, b"".join(struct.pack("<H", (100 * i + e) & 0xFFFF)
                                   for e in range(2 * ln)))
    for name, kind, dtype, _, _, ndim, shape in FIELDS[9:18]:
        elems = 1
        for d in shape:
            elems *= d
        out = b""
        for e in range(elems):
            n, d = 37 * i + 11 * e - 20, i + e / 4 - 3
            if DTYPE[dtype] in "fed":
                out += struct.pack("<" + DTYPE[dtype], d)
            else:
                size = struct.calcsize(DTYPE[dtype])
                out += (n % (1 << (8 * size))).to_bytes(size, "little")
        v[name] = (shape[0], 0, out)
    v["id"] = 1000003 * i - 7
    v["weight"] = i / 2 - 1.25
    v["caption"] = (0, 0, (f"record {i}" * (i % 3)).encode())
    v["label"] = i % 3
    return v


def check_schema(schema):
    if len(schema) != 128 * len(FIELDS):
        fail(f"schema of {len(schema)} bytes")
    fields = []
    for f, want in enumerate(FIELDS):
        e = schema[128 * f:128 * (f + 1)]
        if struct.unpack_from("<Q", e, 120)[0] != xxh3_64(e[:120]):
            fail(f"schema entry {f}: hash mismatch")
        name = e[:32].rstrip(b"\0").decode()
        kind, dtype, enc, flags, ndim = struct.unpack_from("<5I", e, 32)
        shape = struct.unpack_from("<6I", e, 52)
        link, max_dim0, max_dim1, max_size = struct.unpack_from("<IIIQ", e, 76)
        # The fixture's variable fields vary over its 37 records, so none became fixed.
        got = (name, kind, dtype, enc, flags, ndim, shape[:ndim])
        if got != want:
            fail(f"schema entry {f}: {got} is not {want}")
        if (link != NAMES.index("classes")) != (name != "boxes"):
            fail(f"schema entry {f}: link {link}")
        fields.append((name, kind, dtype, enc, flags, shape, max_dim0, max_dim1, max_size))
    return fields


def check_field(i, f, field, value, off, cursor, want):
    """Check field f of record i (value at file offset off); returns (payload end, digest item)."""
    name, kind, _, enc, _, shape, _, _, _ = field
    word, size, dim0, dim1, stored = struct.unpack_from("<QQIIQ", value, 16 + 32 * f)
    if kind in (INT, FLOAT):
        data = value[16 + 32 * f:24 + 32 * f]
        got = struct.unpack("<q" if kind == INT else "<d", data)[0]
        if (size, dim0, dim1, got) != (8, 0, 0, want[name]):
            fail(f"record {i}: {name}: {got}, size {size}, not {want[name]}")
    else:
        at = cursor + (48 - cursor % 64) % 64
        if word != at:
            fail(f"record {i}: {name}: payload at {word}, expected {at}")
        data = value[word:word + size]
        if len(value) > 2100 and (off + word) % 64:
            fail(f"record {i}: {name}: payload at file offset {off + word}, not 64-byte aligned")
        wd0, wd1, wbytes = want[name]
        if (dim0, dim1) != (wd0, wd1) or len(data) != size:
            fail(f"record {i}: {name}: dimensions {dim0}x{dim1}, not {wd0}x{wd1}")
        if kind == IMAGE and enc == 2:
            h, w, c, px = png_pixels(data)
            if (h, w, c, px) != (dim0, dim1, shape[2], wbytes):
                fail(f"record {i}: {name}: the PNG's pixels differ")
        elif kind == IMAGE and enc == 1:
            if data[:2] != b"\xff\xd8":
                fail(f"record {i}: {name}: not a JPEG")
            psnr = jpeg_psnr(data, shape[2], wbytes)
            if psnr is not None and psnr < 35:
                fail(f"record {i}: {name}: JPEG PSNR {psnr:.1f} dB")
        elif data != wbytes:
            fail(f"record {i}: {name}: bytes differ")
        cursor = word + size
    if xxh3_64(data) != stored:
        fail(f"record {i}: {name}: checksum mismatch")
    return cursor, struct.pack("<QQII", stored, size, dim0, dim1), (0 if kind in (INT, FLOAT) else size)


def main():
    path, want_count = sys.argv[1], int(sys.argv[2])
    env = lmdb.open(path, subdir=False, readonly=True, lock=False, max_dbs=2)
    meta = env.open_db(b"meta", create=False)
    samples = env.open_db(b"samples", create=False)
    raw_file = open(path, "rb").read()
    with env.begin() as txn:
        info = txn.get(b"format", db=meta)
        if info is None or len(info) != 104 or \
                struct.unpack_from("<Q", info, 96)[0] != xxh3_64(info[:96]):
            fail("no 104-byte format block with its hash")
        (magic, version, num_fields, count, label_field, flags, _, num_labels, skipped,
         payload_bytes, content_digest) = struct.unpack_from("<8sIIQIIIIQQQ", info)
        if (magic, version, num_fields, count, label_field, flags, num_labels, skipped) != (
                b"DLCSTORE", 2, len(FIELDS), want_count, NAMES.index("label"), 0, 3, 2):
            fail(f"unexpected format block {magic, version, num_fields, count, label_field}")
        fields = check_schema(txn.get(b"schema", db=meta))
        index = txn.get(b"index", db=meta)
        if len(index) != 8 * count:
            fail(f"offset table of {len(index)} bytes")
        if txn.get(b"labels", db=meta).split(b"\0")[:-1] != [b"alpha", b"beta", b"gamma"]:
            fail("labels")
        counts = struct.unpack("<3Q", txn.get(b"label_counts", db=meta))
        if txn.get(b"source_digest", db=meta) != b"0123456789abcdef":
            fail("source_digest")
        if b"store_kinds" not in txn.get(b"build", db=meta):
            fail("build JSON")

        header = 16 + 32 * num_fields
        header += (48 - header % 64) % 64
        seen, total = [0, 0, 0], 0
        mins = {}  # VARIABLE image field: [min_dim0, min_dim1, first record of each]
        digest = _lib.XXH3_createState()
        _lib.XXH3_64bits_reset(digest)
        for i in range(count):
            value = txn.get(struct.pack(">Q", i), db=samples)
            (off,) = struct.unpack_from("<Q", index, 8 * i)
            if value is None or raw_file[off:off + len(value)] != value:
                fail(f"record {i}: the offset table's {off} does not hold the record")
            if struct.unpack_from("<IHHQ", value) != (0x32524C44, header, num_fields, i):
                fail(f"record {i}: bad header {struct.unpack_from('<IHHQ', value)}")
            want, cursor = expected(i), header
            for f, field in enumerate(fields):
                cursor, item, size = check_field(i, f, field, value, off, cursor, want)
                _lib.XXH3_64bits_update(digest, item, len(item))
                total += size
                if field[1] == IMAGE and field[4] & 1:
                    d0, d1 = struct.unpack_from("<II", value, 16 + 32 * f + 16)
                    m = mins.setdefault(f, [d0, d1, i, i])
                    if d0 < m[0]:
                        m[0], m[2] = d0, i
                    if d1 < m[1]:
                        m[1], m[3] = d1, i
            if cursor != len(value):
                fail(f"record {i}: the value is {len(value)} bytes, its fields end at {cursor}")
            seen[want["label"]] += 1
        if txn.get(struct.pack(">Q", count), db=samples) is not None:
            fail("a record past count")
        if tuple(seen) != counts:
            fail(f"label counts {seen}, metadata {counts}")
        if total != payload_bytes:
            fail(f"payload bytes {total}, metadata {payload_bytes}")
        if _lib.XXH3_64bits_digest(digest) != content_digest:
            fail("content digest mismatch")
        # min_dims: 24 bytes per field (smallest height, width, the first record of each), zero
        # but for VARIABLE images, then the hash of the entries.
        md = txn.get(b"min_dims", db=meta)
        if not mins or md is None or len(md) != 24 * num_fields + 8 or \
                struct.unpack_from("<Q", md, 24 * num_fields)[0] != xxh3_64(md[:24 * num_fields]):
            fail("no min_dims of 24 bytes a field with its hash")
        for f in range(num_fields):
            got = list(struct.unpack_from("<IIQQ", md, 24 * f))
            if got != mins.get(f, [0, 0, 0, 0]):
                fail(f"min_dims of field {f}: {got}, the records make {mins.get(f)}")
    print(f"foreign reader: {count} records of {num_fields} fields, labels {counts}, "
          f"content digest {content_digest:016x}: ok")


if __name__ == "__main__":
    main()
