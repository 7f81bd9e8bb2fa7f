"""dlcache.write(): samples of every kind and dtype through the C writer, read back by index
(dlcache.Store) and through the Loader (sequential, no augmentation), the schema inferred and
every refusal naming the sample and the field, the same bytes at any number of workers, and
nothing left behind by a failure."""

import collections
import os
import threading
import time

import numpy as np
import pytest
import torch

from conftest import require_lib

require_lib("dlc_writer_open", "dlc_loader_open")

import dlcache  # noqa: E402
from dlcache import InvalidArgumentError  # noqa: E402

Image = pytest.importorskip("PIL.Image")

DTYPES = ["uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32", "float64"]
N = 24
H, W = 12, 10


def leftovers(d):
    return [n for n in os.listdir(d) if ".tmp-" in n]


def psnr(a, b):
    se = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if se == 0 else 10 * np.log10(255.0 ** 2 / se)


def smooth(rng, h, w, c):
    """An image JPEG keeps well: a gradient with a little noise."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(w - 1, 1) + 40 * k) % 256 for k in range(c)], axis=-1)
    return np.clip(base + rng.integers(-4, 5, (h, w, c)), 0, 255).astype(np.uint8)


def kinds_sample(i):
    """Sample i of a store of every kind and dtype (deterministic)."""
    rng = np.random.default_rng(1000 + i)
    s = {}
    for dt in DTYPES:
        info = np.iinfo(dt) if np.dtype(dt).kind in "iu" else None
        lo, hi = (info.min, info.max) if info else (-1e3, 1e3)
        fixed = (rng.integers(lo, hi, (3, 2), endpoint=True) if info
                 else rng.uniform(lo, hi, (3, 2)))
        n = int(rng.integers(0, 6))
        var = (rng.integers(lo, hi, (n, 2), endpoint=True) if info
               else rng.uniform(lo, hi, (n, 2)))
        s["fix_" + dt] = fixed.astype(dt)
        s["var_" + dt] = var.astype(dt)
    s["rgb_raw"] = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    s["gray_raw"] = rng.integers(0, 256, (H, W), dtype=np.uint8)
    s["rgba_raw"] = rng.integers(0, 256, (H, W, 4), dtype=np.uint8)
    s["rgb_png"] = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    s["gray_png"] = rng.integers(0, 256, (H, W, 1), dtype=np.uint8)
    s["rgba_png"] = Image.fromarray(rng.integers(0, 256, (H, W, 4), dtype=np.uint8), "RGBA")
    # The loader crops every image and mask of a record together: one size for all.
    s["rgb_jpeg"] = smooth(rng, H, W, 3)
    s["gray_jpeg"] = Image.fromarray(smooth(rng, H, W, 1)[:, :, 0], "L")
    s["mask"] = rng.integers(0, 21, (H, W), dtype=np.uint8)
    nb = int(rng.integers(0, 4))
    x0 = rng.uniform(0, W / 2, nb)
    y0 = rng.uniform(0, H / 2, nb)
    s["boxes"] = np.stack([x0, y0, x0 + rng.uniform(1, W / 2 - 1, nb),
                           y0 + rng.uniform(1, H / 2 - 1, nb)], axis=1).astype(np.float32)
    s["box_classes"] = rng.integers(0, 80, nb).astype(np.int32)
    s["label"] = i % 4
    s["count"] = int(rng.integers(-2**40, 2**40))
    s["flag"] = bool(i % 2)
    s["weight"] = float(rng.normal())
    s["blob"] = rng.bytes(int(rng.integers(0, 40)))
    s["caption"] = "échantillon %d" % i
    s["t_scalar"] = torch.tensor(i * 3)
    return s


KIND_FIELDS = {
    "rgb_png": {"kind": "image", "encoding": "png"},
    "gray_png": {"kind": "image", "encoding": "png"},
    "rgba_png": {"kind": "image", "encoding": "png"},
    "rgb_jpeg": {"kind": "image", "encoding": "jpeg", "quality": 95},
    "gray_jpeg": {"kind": "image", "encoding": "jpeg", "quality": 95},
    "mask": "mask",
    "boxes": {"kind": "boxes", "classes": "box_classes"},
    "fix_uint8": "ndarray",  # 3 x 2 uint8 would be inferred as an image
    "var_uint8": "ndarray",
}
# Inferred fields are fixed by sample 0 (issue 17): the var_* arrays vary in length, so they are
# declared variable (var_uint8 is, as a declared "ndarray").
KIND_VARIABLE = ["var_" + dt for dt in DTYPES]


@pytest.fixture(scope="module")
def kinds_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("kinds") / "kinds.dlc"
    samples = [kinds_sample(i) for i in range(N)]
    rep = dlcache.write(samples, path, fields=KIND_FIELDS, workers=3, variable=KIND_VARIABLE)
    return path, samples, rep


def test_report_and_schema(kinds_store):
    path, samples, rep = kinds_store
    assert rep.count == N and rep.file_bytes == os.path.getsize(path) and rep.workers == 3
    assert rep.samples_per_s > 0 and rep.num_labels == 4
    info = dlcache.info(path, verify=True)
    assert info.content_digest == rep.content_digest and info.verified
    assert info.classes == ["0", "1", "2", "3"] and info.label_counts == [6, 6, 6, 6]
    f = {x["name"]: x for x in info.fields}
    assert list(f) == list(samples[0]), "schema order is the first sample's"
    for dt in DTYPES:
        assert (f["fix_" + dt]["kind"], f["fix_" + dt]["dtype"]) == ("ndarray", dt)
        assert f["fix_" + dt]["shape"] == (3, 2), "every record agrees: stored fixed"
        assert f["var_" + dt]["shape"] == (None, 2) and f["var_" + dt]["variable"]
    assert (f["rgb_raw"]["shape"], f["rgb_raw"]["encoding"]) == ((H, W, 3), "raw")
    assert f["gray_raw"]["shape"] == (H, W, 1) and f["rgba_raw"]["shape"] == (H, W, 4)
    assert [f[n]["encoding"] for n in ("rgb_png", "gray_png", "rgba_png")] == ["png"] * 3
    assert f["rgba_png"]["shape"][2] == 4 and f["gray_jpeg"]["shape"] == (H, W, 1)
    assert f["mask"]["mask"] and f["mask"]["encoding"] == "png"
    assert f["boxes"]["boxes"] and f["boxes"]["classes"] == "box_classes"
    assert f["boxes"]["dtype"] == "float32" and f["box_classes"]["dtype"] == "int32"
    assert f["label"]["label"] and info.label_field == "label"
    assert [f[n]["kind"] for n in ("count", "flag", "weight", "blob", "caption", "t_scalar")] \
        == ["int", "int", "float", "bytes", "bytes", "int"]
    assert info.build["tool"] == "dlcache.write"


def expect_image(name, got, want):
    want = np.asarray(want)
    if want.ndim == 2:
        want = want[:, :, None]
    if "jpeg" in name:
        assert got.shape == want.shape and psnr(got, want) > 30, name
    else:
        assert np.array_equal(got, want), name


def test_every_value_reads_back_by_index(kinds_store):
    path, samples, _ = kinds_store
    with dlcache.Store(path) as st:
        assert len(st) == N
        for i in (0, 5, N - 1, -1):
            got, want = st[i], samples[i]
            for k, v in want.items():
                if isinstance(v, (np.ndarray, Image.Image)) and \
                        (k.endswith(("raw", "png", "jpeg")) or k == "mask"):
                    expect_image(k, got[k], v)
                elif isinstance(v, np.ndarray):
                    assert got[k].dtype == v.dtype and np.array_equal(got[k], v), k
                elif isinstance(v, str):
                    assert got[k] == v.encode("utf-8")
                elif isinstance(v, torch.Tensor):
                    assert got[k] == int(v)
                else:
                    assert got[k] == v and type(got[k]) is type(v) or k == "flag", k
            assert got["flag"] == int(want["flag"])
        with pytest.raises(IndexError):
            st[N]


def batches(path, **kw):
    """Every batch of one sequential, unaugmented epoch, cloned."""
    kw = dict(dict(batch_size=7, shuffle=False, crop=None, flip=0, random_crop=False,
                   return_indices=True), **kw)
    with dlcache.Loader(path, **kw) as ld:
        return [{k: v.clone() for k, v in b.items()} for b in ld]


def test_every_value_through_the_loader(kinds_store):
    path, samples, _ = kinds_store
    got = batches(path)
    assert [b["indices"].tolist() for b in got] == [list(range(k, min(k + 7, N)))
                                                    for k in range(0, N, 7)]
    with dlcache.Store(path) as st:
        for b in got:
            for j, i in enumerate(b["indices"].tolist()):
                s, rec = samples[i], st[i]
                for dt in DTYPES:
                    want = torch.from_numpy(s["fix_" + dt].astype(
                        "int32" if dt == "uint16" else dt))
                    assert torch.equal(b["fix_" + dt][j], want), dt
                    n = int(b["var_%s_lengths" % dt][j])
                    assert n == len(s["var_" + dt])
                    var = b["var_" + dt][j]
                    assert torch.equal(var[:n], torch.from_numpy(s["var_" + dt].astype(
                        "int32" if dt == "uint16" else dt))), dt
                    assert not var[n:].any(), "zero padding"
                for k in ("rgb_raw", "gray_raw", "rgba_raw", "rgb_png", "gray_png", "rgba_png",
                          "mask"):
                    expect_image(k, b[k][j].numpy(), s[k])
                for k in ("rgb_jpeg", "gray_jpeg"):
                    assert np.array_equal(b[k][j].numpy(), rec[k]), "the loader decodes as " + k
                n = int(b["boxes_lengths"][j])
                assert n == len(s["boxes"]) and int(b["box_classes_lengths"][j]) == n
                assert torch.allclose(b["boxes"][j][:n], torch.from_numpy(s["boxes"]))
                assert b["box_classes"][j][:n].tolist() == s["box_classes"].tolist()
                assert int(b["label"][j]) == s["label"] and int(b["count"][j]) == s["count"]
                assert int(b["flag"][j]) == s["flag"] and float(b["weight"][j]) == s["weight"]
                o = b["blob_offsets"]
                assert bytes(b["blob"][o[j]:o[j + 1]].tolist()) == s["blob"]
                o = b["caption_offsets"]
                assert bytes(b["caption"][o[j]:o[j + 1]].tolist()).decode() == s["caption"]
    b = got[0]
    assert b["rgb_raw"].dtype == torch.uint8 and b["rgb_raw"].shape == (7, H, W, 3)
    assert b["mask"].shape == (7, H, W, 1) and b["gray_jpeg"].shape == (7, H, W, 1)
    assert b["label"].dtype == torch.int64 and b["weight"].dtype == torch.float64
    assert b["boxes"].dtype == torch.float32 and b["box_classes"].dtype == torch.int32
    assert b["fix_float16"].dtype == torch.float16 and b["var_int8"].dtype == torch.int8
    assert b["var_uint16"].dtype == getattr(torch, "uint16", torch.int32)


def test_selection_variable_modes_and_views(kinds_store):
    path, samples, _ = kinds_store
    sel = ["rgb_raw", "var_int32", "var_float64", "label", "caption"]
    got = batches(path, fields=sel, variable={"var_int32": "offsets",
                                              "var_float64": ("pad_to", 3)})
    assert set(got[0]) == {"rgb_raw", "var_int32", "var_int32_offsets", "var_float64",
                           "var_float64_lengths", "label", "caption", "caption_offsets",
                           "indices"}
    for b in got:
        o = b["var_int32_offsets"]
        assert o[0] == 0 and b["var_int32"].shape == (int(o[-1]), 2)
        assert b["var_float64"].shape == (len(b["indices"]), 3, 2)
        for j, i in enumerate(b["indices"].tolist()):
            want = samples[i]["var_int32"]
            assert np.array_equal(b["var_int32"][o[j]:o[j + 1]].numpy(), want)
            f = samples[i]["var_float64"][:3]
            assert int(b["var_float64_lengths"][j]) == len(f)
            assert np.array_equal(b["var_float64"][j][:len(f)].numpy(), f), "cut to 3"
    # The dict form reads as the tuple does, and is checked as it is: max_len 2**32 + 3 was 3
    # to C, True was 1, and a list as the mode raised "unhashable type".
    assert [b["var_float64"].shape for b in batches(
        path, fields=sel, variable={"var_float64": {"mode": "pad_to", "max_len": 3}})] == \
        [b["var_float64"].shape for b in got]
    for bad, why in (({"mode": "pad_to", "max_len": 2**32 + 3}, "max_len"),
                     ({"mode": "pad_to", "max_len": True}, "max_len"),
                     ({"mode": "pad_to", "max_len": 2.5}, "max_len"),
                     ({"mode": "pad", "max_len": 4}, "max_len is for mode 'pad_to'"),
                     ({"mode": "pad_to", "maxlen": 4}, "reads 'mode' and 'max_len'"),
                     ({"mode": ["pad"]}, "must be 'pad'"), (["pad"], "must be 'pad'")):
        with pytest.raises(ValueError, match=r"variable\['var_float64'\].*" + why):
            dlcache.Loader(path, 2, fields=sel, variable={"var_float64": bad})
    # Classes follow their boxes' mode; boxes and classes are cut together.
    got = batches(path, fields=["rgb_raw", "boxes", "box_classes"],
                  variable={"boxes": ("pad_to", 2)})
    for b in got:
        n = len(b["indices"])
        assert b["boxes"].shape == (n, 2, 4) and b["box_classes"].shape == (n, 2)
        for j, i in enumerate(b["indices"].tolist()):
            k = min(2, len(samples[i]["boxes"]))
            assert int(b["boxes_lengths"][j]) == int(b["box_classes_lengths"][j]) == k
            assert b["box_classes"][j][:k].tolist() == samples[i]["box_classes"][:k].tolist()
    views = [{"name": "g", "count": 2, "crop": 8, "scale": (0.5, 1.0)},
             {"name": "l", "count": 3, "crop": (4, 6), "augment": "random_crop", "flip": 0.0}]
    with dlcache.Loader(path, 5, fields=["rgb_raw", "mask", "label"], views=views,
                        dtype="float32", mean=0.5, std=(0.25, 0.25, 0.25)) as ld:
        b = next(iter(ld))
        assert b["rgb_raw_g"].shape == (5, 2, 3, 8, 8) and b["rgb_raw_g"].dtype == torch.float32
        assert b["rgb_raw_l"].shape == (5, 3, 3, 4, 6)
        assert b["mask_g"].shape == (5, 2, 8, 8, 1) and b["mask_g"].dtype == torch.uint8
        assert b["label"].shape == (5,) and set(b) == {"rgb_raw_g", "rgb_raw_l", "mask_g",
                                                        "mask_l", "label"}


def test_mean_and_std_of_four_channels(kinds_store):
    path, samples, _ = kinds_store
    mean, std = (0.1, 0.2, 0.3, 0.4), (0.5, 0.25, 0.2, 0.1)
    with dlcache.Loader(path, 4, shuffle=False, crop=None, flip=0, random_crop=False,
                        fields=["rgba_raw", "gray_raw"], dtype="float32", mean=mean,
                        std=std) as ld:
        b = {k: v.clone() for k, v in next(iter(ld)).items()}  # views die with the loader
    want = np.stack([s["rgba_raw"] for s in samples[:4]]).astype(np.float32) / 255
    want = ((want - np.float32(mean)) / np.float32(std)).transpose(0, 3, 1, 2)
    assert b["rgba_raw"].shape == (4, 4, H, W)
    assert np.abs(b["rgba_raw"].numpy() - want).max() < 1e-5
    gray = np.stack([s["gray_raw"] for s in samples[:4]]).astype(np.float32) / 255
    assert np.abs(b["gray_raw"][:, 0].numpy() - (gray - 0.1) / 0.5).max() < 1e-5, \
        "a 1-channel image takes the first channel's mean and std"


def test_pairs_stay_tuples_unless_asked(kinds_store, tmp_path):
    path, _, _ = kinds_store
    with dlcache.Loader(path, 8, fields=["rgb_raw", "label"], crop=8) as ld:
        x, y = next(iter(ld))
        assert x.shape == (8, 8, 8, 3) and y.dtype == torch.int64
    with dlcache.Loader(path, 8, fields=["rgb_raw", "label"], crop=8, as_dict=True) as ld:
        assert set(next(iter(ld))) == {"rgb_raw", "label"}
    with pytest.raises(ValueError, match="not exactly one image and the label"):
        dlcache.Loader(path, 8, as_dict=False)
    with pytest.raises(ValueError, match="has 3 values, but the store's images have 4"):
        dlcache.Loader(path, 8, dtype="float32", mean=(0.5, 0.5, 0.5))
    # More values than channels were dropped (torch's Normalize refuses them), and a string
    # was read a character at a time ("123" as 1.0, 2.0, 3.0).
    with pytest.raises(ValueError, match="has 3 values, but the store's images have 1 channel:"):
        dlcache.Loader(path, 8, fields=["gray_raw"], dtype="float32", mean=(0.1, 0.2, 0.3))
    for name in ("mean", "std"):
        with pytest.raises(ValueError, match=name + " must be a number or 1 to 4 numbers"):
            dlcache.Loader(path, 8, fields=["gray_raw"], dtype="float32", **{name: "123"})
    with pytest.raises(ValueError, match="no field 'nope'"):
        dlcache.Loader(path, 8, fields=["rgb_raw", "nope"])
    with pytest.raises(ValueError, match="variable"):
        dlcache.Loader(path, 8, variable={"var_int8": "squash"})
    with pytest.raises(ValueError, match=r"views\[0\]: unknown keys"):
        dlcache.Loader(path, 8, views=[{"name": "a", "size": 3}])
    # An (image, int) pair is stored as "image" + "label" and loads as (images, labels).
    rng = np.random.default_rng(0)
    pairs = [(rng.integers(0, 256, (9, 9, 3), dtype=np.uint8), k % 2) for k in range(10)]
    p = tmp_path / "pairs.dlc"
    dlcache.write(pairs, p, label_names=["cat", "dog"], progress=False)
    assert dlcache.info(p).classes == ["cat", "dog"]
    with dlcache.Loader(p, 10, shuffle=False, crop=None, flip=0, random_crop=False) as ld:
        x, y = next(iter(ld))
        assert np.array_equal(x.numpy(), np.stack([a for a, _ in pairs]))
        assert y.tolist() == [k % 2 for k in range(10)]


def test_variable_image_sizes_and_encoded_jpegs(tmp_path):
    """Images of many sizes stay variable; JPEG bytes go in as they are, without re-encoding."""
    import io
    rng = np.random.default_rng(4)
    samples = []
    for i in range(8):
        img = smooth(rng, 20 + i, 30 - i, 3)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=90)
        samples.append({"photo": buf.getvalue(), "pixels": img, "label": i})
    p = tmp_path / "v.dlc"
    dlcache.write(samples, p, fields={"photo": {"kind": "image", "encoding": "jpeg"}},
                  progress=False, variable=["photo", "pixels"])  # else fixed by sample 0
    info = dlcache.info(p)
    f = {x["name"]: x for x in info.fields}
    assert f["photo"]["shape"] == (None, None, 3) and f["pixels"]["variable"]
    assert (f["photo"]["max_dim0"], f["photo"]["max_dim1"]) == (27, 30)
    with dlcache.Store(p) as st:
        for i, s in enumerate(samples):
            r = st[i]
            assert np.array_equal(r["pixels"], s["pixels"])
            pil = np.asarray(Image.open(io.BytesIO(s["photo"])))
            assert r["photo"].shape == pil.shape and psnr(r["photo"], pil) > 40
    # The stored payload is the JPEG given, byte for byte.
    import lmdb
    import struct
    env = lmdb.open(str(p), subdir=False, readonly=True, lock=False, max_dbs=4)
    with env.begin(db=env.open_db(b"samples", create=False)) as txn:
        v = bytes(txn.get(struct.pack(">Q", 3)))
        off, size = struct.unpack_from("<QQ", v, 16)
        assert v[off:off + size] == samples[3]["photo"]
    env.close()
    with dlcache.Loader(p, 4, fields=["pixels", "label"], crop=16, random_crop=False,
                        flip=0, shuffle=False) as ld:
        x, _ = next(iter(ld))
        assert x.shape == (4, 16, 16, 3)


def test_inference_rules(tmp_path):
    rng = np.random.default_rng(5)
    rgb = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
    pil = {m: Image.fromarray(rgb).convert(m) for m in ("1", "L", "RGB", "RGBA", "CMYK", "LA")}
    pal = Image.fromarray(rgb).convert("P")
    sample = {
        "pil_1": pil["1"], "pil_l": pil["L"], "pil_rgb": pil["RGB"], "pil_rgba": pil["RGBA"],
        "pil_cmyk": pil["CMYK"], "pil_la": pil["LA"], "pil_p": pal,
        "t_hwc": torch.from_numpy(rgb), "np_hw": rgb[:, :, 0], "np_hwc1": rgb[:, :, :1],
        "t_float": torch.rand(5, 7), "np_bool": np.array([True, False, True]),
        "lst": [1, 2, 3], "py_int": 7, "py_bool": True, "np_int": np.int16(-3),
        "t_float0": torch.tensor(0.25), "np_float": np.float32(1.5), "py_float": 2.5,
        "raw": b"\x00\x01", "text": "hi", "label": 2,
    }
    p = tmp_path / "inf.dlc"
    dlcache.write([sample], p, progress=False)
    f = {x["name"]: x for x in dlcache.info(p).fields}
    ch = {k: f[k]["shape"][2] for k in f if f[k]["kind"] == "image"}
    assert ch == {"pil_1": 1, "pil_l": 1, "pil_rgb": 3, "pil_rgba": 4, "pil_cmyk": 3,
                  "pil_la": 4, "pil_p": 3, "t_hwc": 3, "np_hw": 1, "np_hwc1": 1}
    assert (f["t_float"]["kind"], f["t_float"]["dtype"], f["t_float"]["shape"]) == \
        ("ndarray", "float32", (5, 7))
    assert (f["np_bool"]["dtype"], f["lst"]["dtype"]) == ("uint8", "int64")
    assert {k: f[k]["kind"] for k in ("py_int", "py_bool", "np_int", "t_float0", "np_float",
                                      "py_float", "raw", "text")} == \
        {"py_int": "int", "py_bool": "int", "np_int": "int", "t_float0": "float",
         "np_float": "float", "py_float": "float", "raw": "bytes", "text": "bytes"}
    assert f["label"]["label"] and not f["py_int"]["label"]
    with dlcache.Store(p) as st:
        r = st[0]
        assert np.array_equal(r["pil_1"][:, :, 0], np.asarray(pil["1"].convert("L")))
        assert np.array_equal(r["pil_cmyk"], np.asarray(pil["CMYK"].convert("RGB")))
        assert np.array_equal(r["pil_p"], np.asarray(pal.convert("RGB")))
        assert r["np_bool"].tolist() == [1, 0, 1] and r["text"] == b"hi"
        assert r["t_float0"] == 0.25 and r["np_int"] == -3


def test_tuple_names(tmp_path):
    import typing
    img = np.zeros((4, 4, 3), np.uint8)
    cases = [
        ([(img, 1)], None, ["image", "label"]),
        ([(img, 1.5)], None, ["f0", "f1"]),
        ([(img, 1, "x")], None, ["f0", "f1", "f2"]),
        ([(img, 1, "x")], {"pixels": "image", "cls": "label", "note": None}, ["pixels", "cls"]),
        ([(img, 3)], ["a", "b"], ["a", "b"]),
    ]
    P = typing.NamedTuple("P", [("photo", np.ndarray), ("y", int)])
    cases.append(([P(img, 2)], None, ["photo", "y"]))
    for k, (samples, fields, names) in enumerate(cases):
        p = tmp_path / ("t%d.dlc" % k)
        dlcache.write(samples, p, fields=fields, progress=False)
        info = dlcache.info(p)
        assert [f["name"] for f in info.fields] == names, k
    assert dlcache.info(tmp_path / "t3.dlc").label_field == "cls"
    assert dlcache.info(tmp_path / "t4.dlc").label_field is None


def _refused(tmp_path, samples, match, **kw):
    p = tmp_path / "bad.dlc"
    with pytest.raises(InvalidArgumentError, match=match) as e:
        dlcache.write(samples, p, progress=False, **kw)
    assert not p.exists() and not leftovers(tmp_path), "nothing left behind"
    return str(e.value)


def test_a_later_sample_that_does_not_fit_is_named(tmp_path):
    def make(k, bad):
        s = {"image": np.zeros((4, 4, 3), np.uint8), "tokens": np.arange(3, dtype=np.int32),
             "feat": np.zeros((2, 5), np.float32), "label": 1, "w": 0.5, "txt": "a"}
        if k == 7:
            s.update(bad)
        return s
    cases = [
        ({"image": np.zeros((4, 4), np.uint8)}, r"sample 7: field 'image': expected image "
         r"\(3 channels, raw\) as HxWx3, found a uint8 array of shape \(4, 4\)"),
        ({"image": np.zeros((4, 4, 3), np.float32)}, r"sample 7: field 'image': an image field "
         r"holds uint8 HWC pixels, found a float32 array"),
        ({"feat": np.zeros((2, 6), np.float32)}, r"sample 7: field 'feat': expected ndarray "
         r"float32 of shape \(2, 5\), found a float32 array of shape \(2, 6\)"),
        ({"tokens": np.arange(3, dtype=np.float64)}, r"sample 7: field 'tokens': expected "
         r"int32 elements \(the first sample's\), found a float64 array"),
        ({"label": 2.5}, r"sample 7: field 'label': expected an int \(the store's label\), "
         r"found a float \(2.5\)"),
        ({"label": -1}, r"sample 7: field 'label': label -1 is not in 0\.\.16777215"),
        ({"w": "heavy"}, r"sample 7: field 'w': expected a float, found a str"),
        ({"txt": 3}, r"sample 7: field 'txt': expected bytes or a str, found a int \(3\)"),
        ({"extra": 1}, r"sample 7: field 'extra' not in sample 0"),
        ({"label": torch.tensor([1])}, r"use \.item\(\)"),
    ]
    for bad, match in cases:
        samples = [make(k, bad) for k in range(12)]
        _refused(tmp_path, samples, match, workers=2)
    samples = [make(k, {}) for k in range(12)]
    del samples[9]["w"]
    _refused(tmp_path, samples, r"sample 9: no field 'w'")
    _refused(tmp_path, [make(k, {}) for k in range(3)], r"label 1 is not in 0\.\.0 "
             r"\(label_names has 1 names\)", label_names=["only"])
    samples = [(np.zeros((4, 4, 3), np.uint8), 1)] * 3 + [(np.zeros((4, 4, 3), np.uint8),)]
    _refused(tmp_path, samples, r"sample 3: expected a tuple of 2 values \(image, label\)")


def test_refusals_of_the_schema(tmp_path):
    img = np.zeros((4, 4, 3), np.uint8)
    chw = torch.rand(3, 8, 8)
    msg = _refused(tmp_path, [{"x": chw}], r"sample 0: field 'x': a float32 tensor of shape "
                   r"\(3, 8, 8\) looks like an image")
    assert "fields={'x': 'ndarray'}" in msg and "permute(1, 2, 0)" in msg
    _refused(tmp_path, [{"x": torch.zeros(3, 8, 9, dtype=torch.uint8)}], r"CHW image")
    _refused(tmp_path, [{"x": np.zeros(3, np.uint32)}], r"dlcache stores uint8")
    _refused(tmp_path, [{"x": None}], r"a NoneType cannot be stored")
    _refused(tmp_path, [{"bad-name": 1}], r"field 'bad-name': a field name is 1 to 31")
    _refused(tmp_path, [{"m": img}], r"a mask is stored 'png' or 'raw'",
             fields={"m": {"kind": "mask", "encoding": "jpeg"}})
    # A mask's PIL mode is judged at sample 0 as at any later one, not as "2 channels".
    for mode in ("LA", "F", "CMYK"):
        _refused(tmp_path, [{"m": Image.new(mode, (4, 4))}], r"sample 0: field 'm': a mask "
                 r"from a PIL image of mode '%s' \(4x4\): give an L or P image" % mode,
                 fields={"m": "mask"})
    _refused(tmp_path, [{"m": np.zeros((4, 4, 4), np.uint8)}], r"JPEG holds 1 or 3 channels",
             fields={"m": {"kind": "image", "encoding": "jpeg"}})
    _refused(tmp_path, [{"b": np.zeros((2, 4), np.float32)}], r"needs the field of its "
             r"per-box classes", fields={"b": "boxes"})
    _refused(tmp_path, [{"b": np.zeros((2, 4), np.float32), "c": 3}], r"its classes field 'c' "
             r"must be an ndarray of one dimension", fields={"b": {"kind": "boxes",
                                                                   "classes": "c"}})
    _refused(tmp_path, [5], r"sample 0: a int \(5\); a sample is a dict")
    _refused(tmp_path, [(torch.rand(3, 8, 8), 1)], r"sample 0: field 'f0': a float32 tensor")
    _refused(tmp_path, [{"a": 1, "b": 2}], r"'a', 'b' are all the label",
             fields={"a": {"kind": "int", "label": True}, "b": {"kind": "int", "label": True}})
    _refused(tmp_path, [], r"no samples")
    _refused(tmp_path, iter([]), r"no samples")
    _refused(tmp_path, [{"a": 1, "b": 2}], r"fields= names 'c'", fields={"c": "int"})
    with pytest.raises(ValueError, match="unknown kind 'picture'"):
        dlcache.write([{"a": img}], tmp_path / "x.dlc", fields={"a": "picture"})
    with pytest.raises(ValueError, match="quality.* not an option of kind 'mask'"):
        dlcache.write([{"a": img}], tmp_path / "x.dlc", fields={"a": {"kind": "mask",
                                                                      "quality": 5}})
    with pytest.raises(ValueError, match="label_names given, but no field is the label"):
        dlcache.write([{"a": img}], tmp_path / "x.dlc", label_names=["a"])
    assert not leftovers(tmp_path) and not (tmp_path / "x.dlc").exists()


def test_existing_store_needs_force(tmp_path):
    p = tmp_path / "s.dlc"
    dlcache.write([{"a": 1}], p, progress=False)
    digest = dlcache.info(p).content_digest
    calls = []

    def gen():
        calls.append(1)
        yield {"a": 2}
    with pytest.raises(dlcache.ExistsError, match="force=True"):
        dlcache.write(gen(), p, progress=False)
    assert not calls, "refused before reading a sample"
    assert dlcache.info(p).content_digest == digest
    rep = dlcache.write(gen(), p, force=True, progress=False)
    assert rep.content_digest != digest and dlcache.Store(p)[0] == {"a": 2}


class Flaky:
    """A map-style data set whose sample @p bad raises @p exc; samples take varying time so
    that workers finish out of order."""

    def __init__(self, n, bad=None, exc=RuntimeError("disk on fire")):
        self.n, self.bad, self.exc = n, bad, exc

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.bad:
            raise self.exc
        time.sleep(((i * 7919) % 5) * 0.0005)
        rng = np.random.default_rng(i)
        return {"image": smooth(rng, 16, 16, 3), "mask": rng.integers(0, 3, (16, 16), np.uint8),
                "tokens": rng.integers(0, 50, int(rng.integers(1, 6))), "label": i % 3,
                "jpeg": smooth(rng, 16, 16, 3)}


# "tokens" vary in length: declared "ndarray", so variable (inferred, it would be fixed).
FLAKY_FIELDS = {"mask": "mask", "jpeg": {"kind": "image", "encoding": "jpeg"},
                "tokens": "ndarray"}


def test_workers_do_not_change_a_byte(tmp_path):
    reps = [dlcache.write(Flaky(60), tmp_path / ("w%d.dlc" % k), fields=FLAKY_FIELDS,
                          workers=k, progress=False) for k in (1, 4)]
    assert reps[0].content_digest == reps[1].content_digest
    a, b = [(tmp_path / ("w%d.dlc" % k)).read_bytes() for k in (1, 4)]
    assert a == b, "the store files differ"
    with dlcache.Store(tmp_path / "w4.dlc") as st:
        assert [st[i]["label"] for i in range(60)] == [i % 3 for i in range(60)], "in order"
        assert np.array_equal(st[41]["image"], Flaky(60)[41]["image"])


@pytest.mark.parametrize("exc", [RuntimeError("disk on fire"), KeyboardInterrupt()])
def test_an_exception_mid_way_leaves_no_store(tmp_path, exc):
    p = tmp_path / "f.dlc"
    with pytest.raises(type(exc)) as e:
        dlcache.write(Flaky(80, bad=37, exc=exc), p, fields=FLAKY_FIELDS, workers=3,
                      progress=False)
    assert e.value is exc, "the samples' own exception, unchanged"
    assert not p.exists() and not leftovers(tmp_path)
    # Over an existing store: the old one stays.
    dlcache.write(Flaky(5), p, fields=FLAKY_FIELDS, progress=False)
    old = p.read_bytes()

    def gen():
        for i in range(50):
            if i == 20:
                raise exc
            yield Flaky(50)[i]
    with pytest.raises(type(exc)):
        dlcache.write(gen(), p, fields=FLAKY_FIELDS, force=True, workers=2, progress=False)
    assert p.read_bytes() == old and not leftovers(tmp_path)


def test_ctrl_c_aborts_the_writer(tmp_path):
    """A real SIGINT (the main thread gets KeyboardInterrupt wherever it is) leaves no store."""
    import signal
    # Python's own handler for this test, whatever the runner's parent did with SIGINT (a
    # background job of a script starts with it ignored, and Python then installs none).
    old_handler = signal.signal(signal.SIGINT, signal.default_int_handler)

    class Interrupting(Flaky):
        def __getitem__(self, i):
            if i == 30:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)  # the main thread is interrupted meanwhile
            return Flaky.__getitem__(self, i)
    p = tmp_path / "c.dlc"
    try:
        with pytest.raises(KeyboardInterrupt):
            dlcache.write(Interrupting(200), p, fields=FLAKY_FIELDS, workers=2, progress=False)
    finally:
        signal.signal(signal.SIGINT, old_handler)
    assert not p.exists() and not leftovers(tmp_path)


def test_memory_is_bounded_by_the_window(tmp_path):
    """Samples in flight never exceed the window (2 x workers + 2), however long the input."""
    live = collections.Counter()
    lock = threading.Lock()

    class Sample(dict):
        def __del__(self):
            with lock:
                live["now"] -= 1

    def gen():
        for i in range(400):
            s = Sample(x=np.full(100, i), label=i % 2)
            with lock:
                live["now"] += 1
                live["max"] = max(live["max"], live["now"])
            yield s
    seen = []
    rep = dlcache.write(gen(), tmp_path / "g.dlc", workers=2, progress=seen.append)
    assert rep.count == 400 and rep.num_labels == 2
    assert live["max"] <= 2 * 2 + 2 + 2, live
    assert all(p["total"] is None and p["done"] <= 400 for p in seen)


def test_progress_line(tmp_path, capsys, monkeypatch):
    import builtins
    real = builtins.__import__

    def no_tqdm(name, *a, **k):
        if name == "tqdm":
            raise ImportError("no tqdm here")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    dlcache.write([{"a": i} for i in range(5)], tmp_path / "p.dlc", progress=True)
    err = capsys.readouterr().err
    assert "dlcache.write: 5/5 samples" in err
    dlcache.write([{"a": i} for i in range(5)], tmp_path / "q.dlc")  # not a terminal: silent
    assert capsys.readouterr().err == ""


# ---- values as they were when yielded, and casts that would change them -------------------------
def test_a_reused_buffer_dict_or_tensor_is_stored_as_it_was_when_yielded(tmp_path):
    """The workers prepare a sample after the iterator has moved on: a generator that fills one
    buffer (or one dict) for every sample had later values stored in earlier samples, 158 of
    200 wrong in a try, with no error."""
    def arrays():
        buf = np.zeros((2, 3), np.int64)
        for i in range(200):
            buf[:] = i
            yield {"x": buf}

    def dicts():
        d = {}
        for i in range(200):
            d["x"] = i
            d["t"] = torch.full((3,), float(i))
            yield d

    def tuples():
        t = torch.zeros(4)
        for i in range(200):
            t.fill_(i)
            yield (t, [i, i])

    for name, gen in (("a", arrays), ("d", dicts), ("t", tuples)):
        path = tmp_path / (name + ".dlc")
        dlcache.write(gen(), path, workers=2, progress=False)
        rows = dlcache.Store(path)[:]
        for i, r in enumerate(rows):
            vals = [np.asarray(v) for v in r.values()]
            assert all((v == i).all() for v in vals), (name, i, r)


@pytest.mark.parametrize("samples,fields,said", [
    ([np.array([1], np.int8), np.array([300])], {"kind": "ndarray", "dtype": "int8"},
     "element 0 (300) would be stored as 44 in int8"),
    ([np.array([1.0], np.float16), np.array([1e6])], {"kind": "ndarray", "dtype": "float16"},
     "element 0 (1000000.0) would be stored as inf in float16"),
    ([np.array([1]), np.array([2**63 + 1], np.uint64)], {"kind": "ndarray", "dtype": "int64"},
     "element 0 (9223372036854775809) would be stored as -9223372036854775807"),
    ([np.array([1.5]), np.array([2**53 + 1])], None,
     "element 0 (9007199254740993) would be stored as 9007199254740992.0 in float64"),
    ([1.5, 2**53 + 1], None, "the int 9007199254740993 is not exactly a float64"),
    ([1.5, 10**400], None, "an int of 401 digits does not fit in a float64"),
    ([np.ma.array([1, 2], mask=[0, 1])], None, "a masked array: its mask would be lost"),
])
def test_a_value_a_cast_would_change_is_refused(tmp_path, samples, fields, said):
    """Declared or inferred dtypes cast the later samples' values: same_kind casting wrapped
    300 into int8 as 44 and 1e6 into float16 as inf, int64 into float64 rounded 2**53 + 1, all
    quietly. Rounding a float to a narrower float is the conversion asked for, and stays."""
    with pytest.raises(InvalidArgumentError, match="sample %d: field 'x': .*%s" % (
            len(samples) - 1, said.replace("(", r"\(").replace(")", r"\)"))):
        dlcache.write([{"x": v} for v in samples], tmp_path / "x.dlc", progress=False,
                      fields=None if fields is None else {"x": fields}, workers=1)
    assert not (tmp_path / "x.dlc").exists()
    dlcache.write([{"x": np.array([1.0], np.float32)}, {"x": np.array([1.1])}],
                  tmp_path / "r.dlc", progress=False, workers=1,
                  fields={"x": {"kind": "ndarray", "dtype": "float32"}})
    assert dlcache.Store(tmp_path / "r.dlc")[1]["x"][0] == np.float32(1.1)


def test_other_libraries_errors_name_the_field_and_names_are_once(tmp_path):
    with pytest.raises(TypeError) as e:
        dlcache.write([{"x": torch.eye(3)}, {"x": torch.eye(3).to_sparse()}],
                      tmp_path / "s.dlc", progress=False, workers=1)
    assert "dlcache.write: raised by sample 1, field 'x'" in e.value.__notes__
    with pytest.raises(ValueError, match="fields names 'a' twice"):
        dlcache.write([(1, 2)], tmp_path / "t.dlc", fields=["a", "a"], progress=False)


def test_a_lazily_opened_image_of_the_wrong_size_is_refused_before_its_decode(tmp_path):
    """PIL opens an image without decoding it: a 9000 x 9000 PNG in a field of 10 x 10
    images was decoded whole (seconds and gigabytes for a larger one) before its size was
    checked. Its header says the size: the PNG here has no pixel data at all."""
    import struct
    import zlib
    from PIL import Image

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + \
            struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 9000, 9000, 8, 2,
                                                                0, 0, 0)) + chunk(b"IEND", b"")
    (tmp_path / "big.png").write_bytes(png)
    big = Image.open(tmp_path / "big.png")
    with pytest.raises(InvalidArgumentError, match="sample 1: field 'image': expected a 10x10"):
        dlcache.write([{"image": Image.new("RGB", (10, 10))}, {"image": big}],
                      tmp_path / "i.dlc", progress=False, workers=1)


def test_an_image_side_beyond_the_limit_is_refused_not_wrapped(tmp_path):
    """dlc_image takes 32-bit sides: a 1 x (2^32 + 2) image reached the store's own check as
    1 x 2, and a 1x2 image was stored. A zero-stride view makes the array without its 12 GB."""
    huge = np.lib.stride_tricks.as_strided(np.zeros(3, np.uint8), shape=(1, 2**32 + 2, 3),
                                           strides=(0, 0, 1))
    with pytest.raises(ValueError, match=r"sample 0.*sides are 1 to 1048576 pixels"):
        dlcache.write([{"image": huge, "label": 0}], tmp_path / "w.dlc", progress=False)
    assert not (tmp_path / "w.dlc").exists()
    wide = np.lib.stride_tricks.as_strided(np.zeros(3, np.uint8), shape=(2, (1 << 20) + 1, 3),
                                           strides=(0, 0, 1))
    with pytest.raises(ValueError, match=r"sides are 1 to 1048576 pixels"):
        dlcache.write([{"image": wide, "label": 0}], tmp_path / "w.dlc", progress=False)


def test_wrong_types_in_the_options_are_named(tmp_path):
    """Each raised a bare TypeError, ValueError or UnicodeEncodeError that named nothing:
    "'float' object cannot be interpreted as an integer", "unhashable type: 'list'"."""
    img = [{"image": np.zeros((4, 4, 3), np.uint8), "label": 0}]
    out = tmp_path / "o.dlc"
    for opt, why in (({"kind": "image", "channels": 3.0}, "channels 3.0; an image has 1, 3 or 4"),
                     ({"kind": "image", "channels": True}, "channels True"),
                     ({"kind": "image", "encoding": ["raw"]}, r"encoding \['raw'\]")):
        with pytest.raises(ValueError, match=why):
            dlcache.write(img, out, fields={"image": opt}, progress=False)
    dlcache.write(img, out, fields={"image": {"kind": "image", "channels": np.int64(3)}},
                  progress=False)
    assert dlcache.info(out)["fields"][0]["shape"][2] == 3
    with pytest.raises(ValueError, match=r"label_names\[1\] is not text UTF-8 can hold"):
        dlcache.write(img, out, label_names=["cat", "\udcff"], progress=False, force=True)
    with pytest.raises(ValueError, match="auto_augment must be one of"):
        dlcache.Loader(out, 1, auto_augment=[])
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", "import dlcache; dlcache.Loader(%r, 1)" % str(out)],
                       env=dict(os.environ, LOCAL_WORLD_SIZE="abc"), capture_output=True,
                       text=True, timeout=120)
    assert "$LOCAL_WORLD_SIZE is 'abc', not an integer" in r.stderr, r.stderr[-2000:]
