"""Bad paths, corrupt stores and bad arguments give exceptions with messages."""

import os
import shutil

import pytest

from conftest import require_lib

require_lib("dlc_loader_open", "dlc_build")

import dlcache  # noqa: E402


def test_missing_store(tmp_path):
    path = tmp_path / "nope.dlc"
    with pytest.raises(dlcache.DlcacheError) as ei:
        dlcache.Loader(path, 8)
    assert isinstance(ei.value, FileNotFoundError) and ei.value.errno == 2
    assert "nope.dlc" in str(ei.value)
    with pytest.raises(FileNotFoundError, match="nope.dlc"):
        dlcache.info(path)


def test_not_a_store(tmp_path):
    path = tmp_path / "junk.dlc"
    path.write_bytes(os.urandom(64 * 1024))
    with pytest.raises(dlcache.DlcacheError) as ei:
        dlcache.info(path)
    assert ei.value.status < 0 and ei.value.detail, "the C library's message is carried"
    assert "junk.dlc" in str(ei.value)
    with pytest.raises(dlcache.DlcacheError, match="junk.dlc"):
        dlcache.Loader(path, 8)


def _corrupt_copy(store, tmp_path):
    """A copy of the store with bytes of one record's pixels flipped, found
    by searching the file for that record's payload (read with the C API's
    view, so the exact offset is known)."""
    bad = tmp_path / "corrupt.dlc"
    shutil.copyfile(store, bad)
    import ctypes
    from dlcache import _lib as L
    st = ctypes.c_void_p()
    assert L.lib.dlc_store_open(str(store).encode(), 0, ctypes.byref(st)) == 0
    rd = ctypes.c_void_p()
    assert L.lib.dlc_store_reader_open(st, ctypes.byref(rd)) == 0
    rec = L.Record()
    assert L.lib.dlc_store_read(rd, 7, ctypes.byref(rec)) == 0
    offset, size = rec.offset, rec.size
    L.lib.dlc_store_reader_close(rd)
    L.lib.dlc_store_close(st)
    with open(bad, "r+b") as f:
        f.seek(offset + size // 2)
        b = f.read(16)
        f.seek(offset + size // 2)
        f.write(bytes(x ^ 0xFF for x in b))
    return bad


def test_corrupt_store(store, tmp_path):
    bad = _corrupt_copy(store, tmp_path)
    with pytest.raises(dlcache.CorruptError) as ei:
        dlcache.info(bad, verify=True)
    assert "corrupt.dlc" in str(ei.value) and ei.value.bad and ei.value.bad[0][0] == 7
    assert dlcache.info(store, verify=True).verified

    with dlcache.Loader(bad, 16, shuffle=False, crop=8, verify="always",
                        on_corrupt="fail") as ld:
        with pytest.raises(dlcache.CorruptError) as ei:
            for _ in ld:
                pass
    assert "corrupt.dlc" in str(ei.value) and "7" in str(ei.value)

    with dlcache.Loader(bad, 16, shuffle=False, crop=8, verify="first",
                        return_indices=True) as ld:  # on_corrupt="replace" by default
        n = sum(x.shape[0] for x, _, _ in ld)
        assert n == dlcache.info(store).count, "a replaced record keeps the batch size"
        assert ld.stats()["corrupt_replaced"] == 1


@pytest.mark.parametrize("kw,word", [
    (dict(dtype="int7"), "dtype"),
    (dict(dtype="uint8", mean=(0.5, 0.5, 0.5)), "mean"),
    (dict(dtype="float32", mean=(120, 110, 100)), "mean"),
    (dict(dtype="float32", std=(0.2, 0, 0.2)), "std"),
    (dict(dtype="float32", std=(0.2, 0.2)), "std"),
    (dict(crop="big"), "crop"),
    (dict(crop=0), "crop"),
    (dict(flip=2), "flip"),
    (dict(verify="sometimes"), "verify"),
    (dict(on_corrupt="ignore"), "on_corrupt"),
    (dict(random_resized_crop=((0.5, 2.0), (0.75, 1.33))), "scale"),
    (dict(random_resized_crop="yes"), "random_resized_crop"),
    (dict(rank=2, world_size=2), "rank"),
    (dict(threads=0), "threads"),
    (dict(device="tpu"), "device"),
])
def test_bad_arguments_name_the_argument(store, kw, word):
    with pytest.raises(ValueError, match=word):
        dlcache.Loader(store, 8, **kw)


def test_bad_batch_size(store):
    for bs in (0, -1, 2.5, "8"):
        with pytest.raises(ValueError, match="batch_size"):
            dlcache.Loader(store, bs)


def test_crop_larger_than_store_is_rejected_by_c(store):
    with pytest.raises(dlcache.InvalidArgumentError) as ei:
        dlcache.Loader(store, 8, crop=4096)
    assert isinstance(ei.value, ValueError) and ei.value.detail


def test_closed_loader(store):
    ld = dlcache.Loader(store, 8, crop=8)
    it = iter(ld)
    next(it)
    ld.close()
    with pytest.raises((ValueError, RuntimeError)):
        next(it)
    with pytest.raises(ValueError, match="closed"):
        iter(ld)


def test_bad_state_dict(store):
    with dlcache.Loader(store, 8, crop=8) as ld:
        with pytest.raises(ValueError):
            ld.load_state_dict({"epoch": 3})
        sd = ld.state_dict()
        sd["state"] = bytes(64)
        with pytest.raises(dlcache.DlcacheError) as ei:
            ld.load_state_dict(sd)
        assert isinstance(ei.value, ValueError)


def test_build_errors(demo_dir, store, tmp_path):
    with pytest.raises(dlcache.ExistsError, match=os.path.basename(store)):
        dlcache.build(demo_dir, store, size=32)
    with pytest.raises(dlcache.DlcacheError, match="missing"):
        dlcache.build(tmp_path / "missing", tmp_path / "x.dlc")
    assert not (tmp_path / "x.dlc").exists()
    with pytest.raises(ValueError, match="encoding"):
        dlcache.build(demo_dir, tmp_path / "y.dlc", encoding="png")
    with pytest.raises(ValueError, match="size"):
        dlcache.build(demo_dir, tmp_path / "y.dlc", size=0)
    with pytest.raises(ValueError, match="crop"):
        dlcache.build(demo_dir, tmp_path / "y.dlc", crop="left")
    empty = tmp_path / "empty" / "cls"
    empty.mkdir(parents=True)
    (empty / "a.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(dlcache.DlcacheError) as ei:
        dlcache.build(empty.parent, tmp_path / "z.dlc")
    assert ei.value.detail
