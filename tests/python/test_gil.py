"""The GIL is released while the C loader works, and while dlc_record_seal() encodes a record
(what dlcache.write() runs on its worker threads).

A Python thread stamps time.monotonic() in a loop that sleeps briefly (so it
gives the GIL back by itself), and the switch interval is raised to 10 s so
that the interpreter never forces a thread switch during the test. Then the
only way a stamp can fall strictly inside the window of a C call made by the
main thread is that the call released the GIL. The control calls the same
function through ctypes.PyDLL, which holds the GIL: no stamp may fall inside
its windows. So the test can fail, and does not depend on timing: a slower
machine only makes the calls longer."""

import ctypes
import os
import sys
import threading
import time

import pytest

from conftest import require_lib

require_lib("dlc_loader_open", "dlc_writer_open")

import dlcache  # noqa: E402
from dlcache import _lib as L  # noqa: E402

# Heavy batches (upsampling random-resized crops to float32) so that each
# dlc_loader_next() waits for the worker many milliseconds.
HEAVY = dict(crop=160, random_resized_crop=True, dtype="float32", threads=1, prefetch=1)


class Stamper(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.stamps = []
        self.stop = False

    def run(self):
        while not self.stop:
            self.stamps.append(time.monotonic())
            time.sleep(0.0002)


def inside(stamps, windows):
    return sum(1 for s in stamps for (a, b) in windows if a < s < b)


@pytest.fixture
def no_forced_switch():
    old = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    yield
    sys.setswitchinterval(old)


def _raw_loader(store, batch_size):
    cfg = L.LoaderConfig()
    L.lib.dlc_loader_config_init(ctypes.byref(cfg))
    cfg.batch_size, cfg.crop_h, cfg.crop_w = batch_size, 160, 160
    cfg.augment, cfg.dtype = L.AUGMENT_RANDOM_RESIZED_CROP, L.DTYPE_FLOAT32
    cfg.threads, cfg.prefetch = 1, 1  # log stays NULL: no callback can want the GIL
    h = ctypes.c_void_p()
    assert L.lib.dlc_loader_open(str(store).encode(), ctypes.byref(cfg), ctypes.byref(h)) == 0
    return h


def _windows(next_fn, h, n):
    """Call next_fn(h, batch) n times (starting epochs again as needed)."""
    b = L.Batch()
    wins, epoch = [], 0
    while len(wins) < n:
        t0 = time.monotonic()
        rc = next_fn(h, ctypes.byref(b))
        t1 = time.monotonic()
        if rc == L.DLC_END:
            epoch += 1
            assert L.lib.dlc_loader_set_epoch(h, epoch) == 0
            continue
        assert rc == 0
        wins.append((t0, t1))
    return wins


def test_c_calls_release_the_gil(store, no_forced_switch):
    # The control first: the same C function through PyDLL keeps the GIL.
    held = ctypes.PyDLL(dlcache.library_path).dlc_loader_next
    held.restype, held.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(L.Batch)]
    h = _raw_loader(store, 64)
    st = Stamper()
    st.start()
    try:
        time.sleep(0.01)
        ctl = _windows(held, h, 8)
        free = _windows(L.lib.dlc_loader_next, h, 8)  # what dlcache.Loader calls
    finally:
        st.stop = True
        st.join()
        L.lib.dlc_loader_close(h)
    assert inside(st.stamps, ctl) == 0, "PyDLL holds the GIL: the control must see no stamp"
    assert sum(b - a for a, b in ctl) > 0.005, "calls long enough to tell"
    assert inside(st.stamps, free) >= 3, \
        "the Python thread made no progress while dlc_loader_next() ran: GIL held?"


def test_loader_iteration_lets_python_threads_run(store, no_forced_switch):
    st = Stamper()
    wins = []
    with dlcache.Loader(store, 64, **HEAVY) as ld:
        st.start()
        try:
            time.sleep(0.01)
            for _ in range(3):
                it = iter(ld)
                while True:
                    t0 = time.monotonic()
                    try:
                        next(it)
                    except StopIteration:
                        break
                    wins.append((t0, time.monotonic()))
        finally:
            st.stop = True
            st.join()
    assert len(wins) == 3 * len(ld)
    assert inside(st.stamps, wins) >= 3


def test_record_seal_releases_the_gil(tmp_path, no_forced_switch):
    """dlc_record_seal() (PNG encoding of a large noisy image) through CDLL, as
    dlcache.write() calls it, lets another Python thread run; through PyDLL it does not."""
    import numpy as np
    spec = L.FieldSpec()
    spec.name, spec.kind, spec.encoding, spec.ndim = b"image", L.FIELD_IMAGE, L.ENCODING_PNG, 3
    spec.shape[0], spec.shape[1], spec.shape[2] = 768, 768, 3
    cfg = L.WriterConfig()
    L.lib.dlc_writer_config_init(ctypes.byref(cfg))
    cfg.fields, cfg.num_fields = ctypes.pointer(spec), 1
    w, b = ctypes.c_void_p(), ctypes.c_void_p()
    assert L.lib.dlc_writer_open(str(tmp_path / "g.dlc").encode(), ctypes.byref(cfg),
                                 ctypes.byref(w)) == 0
    assert L.lib.dlc_record_builder_create(w, ctypes.byref(b)) == 0
    pixels = np.random.default_rng(0).integers(0, 256, (768, 768, 3), dtype=np.uint8)
    img = L.Image(pixels.ctypes.data, 768, 768, 3, 768 * 3)
    held = ctypes.PyDLL(dlcache.library_path).dlc_record_seal
    held.restype, held.argtypes = ctypes.c_int, [ctypes.c_void_p]

    def windows(seal, n):
        out = []
        for _ in range(n):
            L.lib.dlc_record_builder_reset(b)
            assert L.lib.dlc_record_set_image(b, 0, ctypes.byref(img)) == 0
            t0 = time.monotonic()
            assert seal(b) == 0
            out.append((t0, time.monotonic()))
        return out
    st = Stamper()
    st.start()
    try:
        time.sleep(0.01)
        ctl = windows(held, 4)
        free = windows(L.lib.dlc_record_seal, 4)  # what dlcache.write() calls
    finally:
        st.stop = True
        st.join()
        L.lib.dlc_record_builder_destroy(b)
        L.lib.dlc_writer_abort(w)
    assert inside(st.stamps, ctl) == 0, "PyDLL holds the GIL: the control must see no stamp"
    assert sum(b - a for a, b in ctl) > 0.005, "calls long enough to tell"
    assert inside(st.stamps, free) >= 3, \
        "the Python thread made no progress while dlc_record_seal() ran: GIL held?"
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n], "the writer was aborted"
