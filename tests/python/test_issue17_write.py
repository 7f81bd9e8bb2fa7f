"""Issue 17, dlcache.write(): no silent schema drift, empty sequences that round-trip, and a
last progress call with done == total.

* A later sample whose image size or array length differs from sample 0's is an error naming
  the sample and the field, unless the field is declared variable (variable=, the field's
  "variable" option, a declared "ndarray", boxes and their classes).
* [] and typed empty arrays after non-empty samples are stored with the field's dtype; an
  empty list as the first value (no dtype to infer) asks for a declaration.
"""

import io
import os

import numpy as np
import pytest
import torch

from conftest import require_lib

require_lib("dlc_writer_open", "dlc_loader_open")

import dlcache  # noqa: E402
from dlcache import InvalidArgumentError  # noqa: E402


def leftovers(d):
    return [n for n in os.listdir(d) if ".tmp-" in n]


def refused(tmp_path, samples, match, **kw):
    p = tmp_path / "bad.dlc"
    with pytest.raises(InvalidArgumentError, match=match) as e:
        dlcache.write(samples, p, progress=False, **kw)
    assert not p.exists() and not leftovers(tmp_path), "nothing written"
    return str(e.value)


def fields_of(path):
    return {f["name"]: f for f in dlcache.info(path).fields}


# ---- schema drift ----------------------------------------------------------------------------

def tokens(n, dtype=np.int64):
    return np.arange(n, dtype=dtype)


def test_an_array_of_another_length_is_an_error_naming_sample_and_field(tmp_path):
    samples = [{"tokens": tokens(5), "label": 1} for _ in range(6)]
    samples[3] = {"tokens": tokens(7), "label": 1}
    msg = refused(tmp_path, samples, r"sample 3: field 'tokens': expected ndarray int64 of "
                  r"shape \(5,\) like sample 0, found a int64 array of shape \(7,\)")
    assert "variable=['tokens']" in msg, "the message says how to allow it"
    # The same from a generator on two workers, and with trailing dimensions.
    gen = ({"feat": np.zeros((2 if i != 4 else 3, 5), np.float32)} for i in range(9))
    refused(tmp_path, gen, r"sample 4: field 'feat': expected ndarray float32 of shape \(2, 5\) "
            r"like sample 0, found a float32 array of shape \(3, 5\)", workers=2)


def test_an_image_of_another_size_is_an_error_naming_sample_and_field(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    img = [np.zeros((4, 6, 3), np.uint8)] * 5 + [np.zeros((6, 4, 3), np.uint8)]
    msg = refused(tmp_path, [{"image": a} for a in img],
                  r"sample 5: field 'image': expected a 4x6 \(HxW\) image like sample 0, "
                  r"found a uint8 array of shape \(6, 4, 3\)")
    assert "variable=['image']" in msg
    pil = [Image.new("RGB", (6, 4)), Image.new("RGB", (6, 4)), Image.new("RGB", (8, 4))]
    refused(tmp_path, [(p, 0) for p in pil], r"sample 2: field 'image': expected a 4x6 \(HxW\) "
            r"image like sample 0, found a PIL image of mode 'RGB' \(4x8\)")
    jpegs = []
    for w in (6, 6, 6, 9):
        buf = io.BytesIO()
        Image.new("RGB", (w, 4)).save(buf, "JPEG")
        jpegs.append({"photo": buf.getvalue()})
    refused(tmp_path, jpegs, r"sample 3: field 'photo': expected a 4x6 \(HxW\) image like "
            r"sample 0, found a 4x9 JPEG", fields={"photo": {"kind": "image",
                                                              "encoding": "jpeg"}})
    # A mask is held to its first size too.
    masks = [{"m": np.zeros((4, 4), np.uint8)}, {"m": np.zeros((4, 5), np.uint8)}]
    refused(tmp_path, masks, r"sample 1: field 'm': expected a 4x4", fields={"m": "mask"})


def variable_samples():
    rng = np.random.default_rng(17)
    return [{"image": rng.integers(0, 256, (4 + i, 6 + 2 * i, 3), dtype=np.uint8),
             "tokens": tokens(1 + i, np.int32), "label": i % 2} for i in range(6)]


@pytest.mark.parametrize("kw", [
    dict(variable=("image", "tokens")),
    dict(variable=True),
    dict(fields={"image": {"variable": True}, "tokens": {"variable": True}}),
    dict(fields={"image": {"kind": "image", "variable": True}, "tokens": "ndarray"}),
    dict(fields={"tokens": {"kind": "ndarray", "dtype": "int32"}}, variable=["image"]),
])
def test_a_field_declared_variable_accepts_any_size(tmp_path, kw):
    samples = variable_samples()
    p = tmp_path / "v.dlc"
    dlcache.write(samples, p, progress=False, **kw)
    f = fields_of(p)
    assert f["image"]["variable"] and f["image"]["shape"] == (None, None, 3)
    assert f["tokens"]["variable"] and f["tokens"]["shape"] == (None,)
    assert f["tokens"]["dtype"] == "int32"
    with dlcache.Store(p) as st:
        for i, s in enumerate(samples):
            r = st[i]
            assert np.array_equal(r["image"], s["image"])
            assert r["tokens"].dtype == np.int32 and np.array_equal(r["tokens"], s["tokens"])


def test_variable_is_exact_about_what_it_names(tmp_path):
    s = [{"tokens": tokens(2), "n": 1}, {"tokens": tokens(3), "n": 2}]
    # variable= names only the fields it names: others stay fixed.
    two = [{"a": tokens(2), "b": tokens(2)}, {"a": tokens(3), "b": tokens(3)}]
    refused(tmp_path, two, r"sample 1: field 'b'", variable=["a"])
    # "variable": False holds even a declared ndarray to sample 0's shape.
    refused(tmp_path, s, r"sample 1: field 'tokens'",
            fields={"tokens": {"kind": "ndarray", "variable": False}})
    for bad, match in [(dict(variable=["nope"]), "variable names 'nope'"),
                       (dict(variable=["n"]), "'n', an int: only images and ndarrays"),
                       (dict(variable=3), "variable must be None, True or field names"),
                       (dict(fields={"tokens": {"variable": "yes"}}), "True or False"),
                       (dict(fields={"n": {"variable": True}}), "applies to images and nd"),
                       (dict(variable=["tokens"], fields={"tokens": {"variable": False}}),
                        "variable= but fields")]:
        with pytest.raises(ValueError, match=match):
            dlcache.write(s, tmp_path / "x.dlc", progress=False, **bad)
    assert not (tmp_path / "x.dlc").exists() and not leftovers(tmp_path)


def test_fixed_fields_that_agree_and_boxes_are_unchanged(tmp_path):
    """Samples that agree with sample 0 write as before; boxes and their classes vary by
    nature, without a declaration."""
    p = tmp_path / "f.dlc"
    dlcache.write([{"x": np.zeros((3, 2), np.float32), "image": np.zeros((4, 4), np.uint8)}
                   for _ in range(4)], p, progress=False)
    f = fields_of(p)
    assert f["x"]["shape"] == (3, 2) and f["image"]["shape"] == (4, 4, 1)
    boxes = [{"image": np.zeros((8, 8, 3), np.uint8),
              "boxes": np.ones((n, 4), np.float32), "classes": np.arange(n, dtype=np.int32)}
             for n in (1, 3, 0, 2)]
    p = tmp_path / "b.dlc"
    dlcache.write(boxes, p, fields={"boxes": "boxes"}, progress=False)
    f = fields_of(p)
    assert f["boxes"]["variable"] and f["classes"]["variable"]
    with dlcache.Store(p) as st:
        assert [len(st[i]["classes"]) for i in range(4)] == [1, 3, 0, 2]


# ---- empty sequences --------------------------------------------------------------------------

def test_empty_sequences_after_non_empty_ones_round_trip(tmp_path):
    values = [[3, 1, 4], [], np.array([], dtype=np.int32), torch.tensor([], dtype=torch.int64),
              np.array([], dtype=np.float64), [1, 5]]
    p = tmp_path / "e.dlc"
    dlcache.write([{"t": v, "label": 0} for v in values], p, variable=["t"], progress=False)
    assert fields_of(p)["t"]["dtype"] == "int64", "inferred from sample 0"
    with dlcache.Store(p) as st:
        got = [r["t"] for r in st[:]]
    assert [g.dtype for g in got] == [np.int64] * 6
    assert [g.tolist() for g in got] == [[3, 1, 4], [], [], [], [], [1, 5]]
    with dlcache.Loader(p, 6, shuffle=False, crop=None, flip=0, random_crop=False,
                        as_dict=True) as ld:
        b = next(iter(ld))
        assert b["t_lengths"].tolist() == [3, 0, 0, 0, 0, 2]
        assert b["t"][0].tolist() == [3, 1, 4] and b["t"][5][:2].tolist() == [1, 5]


def test_a_declared_dtype_takes_empty_values(tmp_path):
    """The fix the old error suggested (declaring the dtype) works: [] becomes an empty int32."""
    p = tmp_path / "d.dlc"
    dlcache.write([{"t": [7, 8]}, {"t": []}, {"t": np.array([], np.float32)}], p,
                  fields={"t": {"kind": "ndarray", "dtype": "int32"}}, progress=False)
    with dlcache.Store(p) as st:
        got = st[:]
    assert [r["t"].dtype for r in got] == [np.int32] * 3
    assert [r["t"].tolist() for r in got] == [[7, 8], [], []]
    # With trailing dimensions, [] is an empty (0, d) array.
    p = tmp_path / "d2.dlc"
    dlcache.write([{"xy": np.ones((2, 2), np.float32)}, {"xy": []}], p, variable=True,
                  progress=False)
    with dlcache.Store(p) as st:
        assert st[1]["xy"].shape == (0, 2) and st[1]["xy"].dtype == np.float32


def test_an_empty_first_value(tmp_path):
    """An empty list first has no dtype: refused with the declaration to make (it used to
    become float64 silently). A typed empty array or a declaration decides the dtype."""
    msg = refused(tmp_path, [{"t": []}, {"t": [1, 2]}], r"sample 0: field 't': an empty list "
                  r"has no element type", variable=["t"])
    assert "'dtype': 'int64'" in msg
    p = tmp_path / "a.dlc"
    dlcache.write([{"t": []}, {"t": [1, 2]}], p, fields={"t": {"kind": "ndarray",
                                                                "dtype": "int16"}},
                  progress=False)
    with dlcache.Store(p) as st:
        assert [r["t"].tolist() for r in st[:]] == [[], [1, 2]]
        assert st[0]["t"].dtype == np.int16
    p = tmp_path / "b.dlc"
    dlcache.write([{"t": np.array([], np.uint16)}, {"t": np.array([1, 2], np.uint8)}], p,
                  variable=True,
                  progress=False)
    assert fields_of(p)["t"]["dtype"] == "uint16"


# ---- progress ---------------------------------------------------------------------------------

def test_progress_callable_gets_a_last_call_with_done_equal_total(tmp_path):
    seen = []
    dlcache.write([{"a": i} for i in range(50)], tmp_path / "p.dlc", progress=seen.append)
    assert seen and seen[-1]["done"] == seen[-1]["total"] == 50
    seen = []
    dlcache.write(({"a": i} for i in range(30)), tmp_path / "g.dlc", progress=seen.append)
    assert seen[-1]["done"] == 30 and seen[-1]["total"] is None
    assert [s["done"] for s in seen] == sorted(s["done"] for s in seen)


# ---- the smallest image, checked at construction ---------------------------------------------

def test_a_loader_whose_crop_is_larger_than_one_image_fails_at_construction(tmp_path):
    """The store records its smallest image and the record that has it: a Loader whose plain
    crop is larger fails at construction naming that record, not when its batch is built."""
    rng = np.random.default_rng(17)
    sizes = [(40, 36)] * 12
    sizes[3] = (40, 44)
    sizes[9] = (20, 30)  # the one small image
    samples = [{"image": rng.integers(0, 256, (h, w, 3), np.uint8), "label": i % 2}
               for i, (h, w) in enumerate(sizes)]
    p = tmp_path / "small.dlc"
    dlcache.write(samples, p, variable=["image"], progress=False)
    with pytest.raises(InvalidArgumentError, match=r"field \"image\": record 9 is 20x30 \(height "
                       r"x width\), smaller than the 24x24 crop; use a crop of at most 20x30, "
                       r"random_resized_crop, or rebuild") as e:
        dlcache.Loader(p, 4, crop=24, shuffle=True)
    assert str(p) in str(e.value)
    with pytest.raises(InvalidArgumentError, match=r"record 9 is 20x30"):
        dlcache.Loader(p, 4, crop=(16, 32), random_crop=False)
    # A crop that fits every image, and RandomResizedCrop, load every record.
    for kw in (dict(crop=(20, 30)), dict(crop=24, random_resized_crop=True)):
        with dlcache.Loader(p, 4, shuffle=False, **kw) as ld:
            assert sum(len(labels) for _, labels in ld) == 12
    f = dlcache.info(p)["fields"][0]
    assert (f["min_dim0"], f["min_dim1"], f["min_record0"], f["min_record1"]) == (20, 30, 9, 9)
