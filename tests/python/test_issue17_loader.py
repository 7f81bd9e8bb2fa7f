"""The Loader is correct by default: batches a user keeps stay right (they are
detached from the slot before it is refilled), small arrays are tensors of
their own, a closed or collected Loader never leaves held tensors over freed
memory, and the smaller surprises of the Loader's signature and resume."""

import gc
import warnings

import pytest
import torch

from conftest import DEMO_COUNT, STORE_SIZE, require_lib

require_lib("dlc_loader_open", "dlc_loader_host_slots")

import dlcache  # noqa: E402
from dlcache import _lib as L  # noqa: E402
from dlcache._lib import lib  # noqa: E402

KW = dict(shuffle=False, crop=16, flip=0, threads=2)


def reference(store, **kw):
    """Every batch of one epoch, each cloned inside the loop (the always-right way)."""
    with dlcache.Loader(store, 10, **{**KW, **kw}) as ld:
        return [tuple(t.clone() for t in b) for b in ld]


def slot_ranges(ld):
    n = lib.dlc_loader_host_slots(ld._ptr(), None, None, 0)
    import ctypes
    bases = (ctypes.c_void_p * n)()
    sizes = (ctypes.c_size_t * n)()
    lib.dlc_loader_host_slots(ld._ptr(), bases, sizes, n)
    return [(bases[i], bases[i] + sizes[i]) for i in range(n)]


def in_slots(t, ranges):
    return any(a <= t.data_ptr() < b for a, b in ranges)


def test_list_of_loader_is_right(store):
    ref = reference(store)
    with dlcache.Loader(store, 10, **KW) as ld:
        kept = list(ld)
    assert len(kept) == len(ref) == DEMO_COUNT // 10
    for (x, y), (rx, ry) in zip(kept, ref):
        assert torch.equal(x, rx) and torch.equal(y, ry)
    assert kept[0][1][:3].tolist() == ref[0][1][:3].tolist()


def test_evaluation_loop_that_appends_labels_and_images(store):
    ref = reference(store)
    all_labels, all_images = [], []
    with dlcache.Loader(store, 10, **KW) as ld:
        for x, y in ld:
            all_labels.append(y)
            all_images.append(x)
    assert torch.equal(torch.cat(all_labels), torch.cat([r[1] for r in ref]))
    assert torch.equal(torch.cat(all_images), torch.cat([r[0] for r in ref]))


def test_usual_loop_copies_nothing_and_labels_are_own_tensors(store):
    with dlcache.Loader(store, 10, **KW) as ld:
        ranges = slot_ranges(ld)
        for i, (x, y) in enumerate(ld):
            assert in_slots(x, ranges), "images are views of a slot"
            assert not in_slots(y, ranges), "labels are tensors of their own"
            if i == 5:
                break
        # The loop's variables still name the batch: it is still a view now, also across a new
        # epoch (held batches stay lent)...
        assert in_slots(x, ranges)
        ld.set_epoch(1)
        it = iter(ld)
        next(it)
        assert in_slots(x, ranges)
        # ...and handed over once its slot was going to be refilled: the slot has new memory,
        # and the batch keeps its bytes.
        want = x.clone()
        next(it)
        assert not in_slots(x, slot_ranges(ld))
        for _ in it:
            pass
        assert torch.equal(x, want)


def test_dict_batches_small_outputs_are_own(store):
    with dlcache.Loader(store, 10, as_dict=True, return_indices=True, **KW) as ld:
        ranges = slot_ranges(ld)
        b = next(iter(ld))
        assert in_slots(b["image"], ranges)
        assert not in_slots(b["label"], ranges) and not in_slots(b["indices"], ranges)


def test_close_and_collect_while_batches_are_held(store):
    ref = reference(store)
    ld = dlcache.Loader(store, 10, **KW)
    it = iter(ld)
    a, b = next(it), next(it)
    ld.close()
    assert "closed" in repr(ld)
    assert torch.equal(a[0], ref[0][0]) and torch.equal(b[0], ref[1][0])
    ld = dlcache.Loader(store, 10, **KW)
    c = next(iter(ld))
    del ld, it
    gc.collect()
    junk = [torch.full((10, 16, 16, 3), 7, dtype=torch.uint8) for _ in range(50)]
    assert torch.equal(c[0], ref[0][0]) and junk[0][0, 0, 0, 0] == 7


def test_held_batch_survives_set_epoch_and_restore(store):
    ref = reference(store)
    with dlcache.Loader(store, 10, **KW) as ld:
        it = iter(ld)
        first = next(it)
        sd = ld.state_dict()
        ld.set_epoch(3)
        for _ in ld:
            pass
        ld.load_state_dict(sd)
        for _ in ld:
            pass
        assert torch.equal(first[0], ref[0][0]) and torch.equal(first[1], ref[0][1])


def test_debug_poison_makes_a_kept_view_fail_loudly(store):
    with dlcache.Loader(store, 10, debug_poison=True, prefetch=8, dtype="float32",
                        **KW) as ld:
        it = iter(ld)
        x, _ = next(it)
        first = x[0]  # a view cut from the batch, kept alone
        del x
        next(it), next(it)
        assert torch.isnan(first).all(), "a released slot reads as NaN"
    with dlcache.Loader(store, 10, prefetch=8, dtype="float32", **KW) as ld:
        it = iter(ld)
        x, _ = next(it)
        first = x[0]
        del x
        next(it), next(it)
        assert not torch.isnan(first).any()


def test_small_prefetch_still_right(store):
    ref = reference(store)
    with dlcache.Loader(store, 10, prefetch=1, **KW) as ld:
        kept = list(ld)
    for (x, y), (rx, ry) in zip(kept, ref):
        assert torch.equal(x, rx) and torch.equal(y, ry)


def test_arguments_after_batch_size_are_keyword_only(store):
    with pytest.raises(TypeError):
        dlcache.Loader(store, 10, False)


def test_default_crop_is_the_stores_size(store):
    with dlcache.Loader(store, 10) as ld:
        x, _ = next(iter(ld))
    assert tuple(x.shape[1:3]) == (STORE_SIZE, STORE_SIZE)


def test_resume_with_another_batch_size_says_what_it_does(store):
    with dlcache.Loader(store, 10, **KW) as a:
        it = iter(a)
        next(it), next(it)
        sd = a.state_dict()
    with dlcache.Loader(store, 5, **KW) as b:
        with pytest.warns(RuntimeWarning, match="batch_size 10 and this Loader has 5"):
            b.load_state_dict(sd)
        x, y = next(iter(b))
    assert torch.equal(y, reference(store)[2][1][:5])
    with dlcache.Loader(store, 10, **KW) as c, warnings.catch_warnings():
        warnings.simplefilter("error")
        c.load_state_dict(sd)


def test_replaced_records_are_said_once_and_counted_per_epoch(store, tmp_path):
    import ctypes
    import shutil
    bad = tmp_path / "damaged.dlc"
    shutil.copyfile(store, bad)
    st, rd, rec = ctypes.c_void_p(), ctypes.c_void_p(), L.Record()
    assert lib.dlc_store_open(str(store).encode(), 0, ctypes.byref(st)) == 0
    assert lib.dlc_store_reader_open(st, ctypes.byref(rd)) == 0
    assert lib.dlc_store_read(rd, 7, ctypes.byref(rec)) == 0
    offset, size = rec.offset, rec.size
    lib.dlc_store_reader_close(rd)
    lib.dlc_store_close(st)
    with open(bad, "r+b") as f:
        f.seek(offset + size // 2)
        f.write(b"\xff" * 16)
    # Recording starts before the Loader opens: its workers start on the first batches at once.
    with pytest.warns(RuntimeWarning) as got:
        with dlcache.Loader(bad, 10, verify="first", **KW) as ld:
            for _ in ld:
                pass
            for _ in ld:
                pass
    texts = [str(w.message) for w in got]
    first = [t for t in texts if "replaced by record" in t]
    assert len(first) == 1 and "record 7" in first[0] and "damaged.dlc" in first[0], texts
    assert any("epoch 0: 1 damaged record was replaced" in t for t in texts), texts
    assert any("epoch 1: 1 damaged record was replaced" in t for t in texts), texts


def test_loader_has_type_hints_that_resolve():
    import typing
    import dlcache.loader as dl
    hints = typing.get_type_hints(dlcache.Loader.__init__, vars(dl))
    assert hints["batch_size"] is int and "device" in hints and "memory_format" in hints
    assert typing.get_type_hints(dlcache.Loader.state_dict, vars(dl))["return"]
