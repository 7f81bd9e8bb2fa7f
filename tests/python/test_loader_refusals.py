"""What the Loader refuses, and how it says it (issue 23): a FIFO is refused by name at once
(it hung forever), prefetch has one limit that Python and C agree on (prefetch=1024 passed
Python's check and failed in C as "1025 must be in 1..1024"), and torch DataLoader arguments
say what dlcache uses instead (they gave a bare TypeError)."""

import os
import subprocess
import sys

import pytest

from conftest import REPO, require_lib

require_lib("dlc_loader_open")

import dlcache  # noqa: E402
from dlcache import _lib as L  # noqa: E402

KW = dict(shuffle=False, crop=16, flip=0, threads=2)


def test_a_fifo_is_refused_by_name_without_waiting(tmp_path):
    fifo = tmp_path / "fifo.dlc"
    os.mkfifo(fifo)
    code = ("import dlcache, sys\n"
            "try:\n"
            "    dlcache.Loader(sys.argv[1], 4)\n"
            "except Exception as e:\n"
            "    print(type(e).__name__, e)\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    try:
        p = subprocess.run([sys.executable, "-c", code, str(fifo)], env=env, timeout=120,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except subprocess.TimeoutExpired:
        pytest.fail("Loader(fifo) still waits after 120 s")
    out = p.stdout.decode(errors="replace")
    assert "InvalidArgumentError" in out and str(fifo) in out and "a FIFO" in out, out


def test_prefetch_has_one_limit(store):
    assert L.MAX_PREFETCH == 1024
    with dlcache.Loader(store, 10, prefetch=L.MAX_PREFETCH, **KW) as ld:
        x, _ = next(iter(ld))
        assert ld._config.prefetch == L.MAX_PREFETCH
    with dlcache.Loader(store, 10, prefetch=L.MAX_PREFETCH - 1, **KW) as ld:
        assert ld._config.prefetch == L.MAX_PREFETCH  # the held-over batch's slot added
    with pytest.raises(ValueError, match="prefetch"):
        dlcache.Loader(store, 10, prefetch=L.MAX_PREFETCH + 1, **KW)


@pytest.mark.parametrize("arg, value, words", [
    ("num_workers", 4, "dlcache uses threads="),
    ("pin_memory", True, "pinned memory is automatic with device="),
    ("prefetch_factor", 2, "prefetch="),
    ("dataset", [1, 2], "give its path first"),
])
def test_torch_dataloader_arguments_say_what_to_use(store, arg, value, words):
    with pytest.raises(TypeError, match=words) as e:
        if arg == "dataset":  # DataLoader(dataset=ds, batch_size=10)
            dlcache.Loader(dataset=value, batch_size=10)
        else:
            dlcache.Loader(store, 10, **{arg: value}, **KW)
    assert arg + "=" in str(e.value)


def test_other_unknown_arguments_are_still_a_plain_type_error(store):
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        dlcache.Loader(store, 10, colour=1)


def test_a_python_without_torch_is_told_which_python_to_use():
    """The python3 first on PATH is often not the one with torch: dlcache.Loader said only
    "No module named 'torch'" from inside dlcache/loader.py. It now names this Python and what
    to run instead; build() and info() still work without torch."""
    code = ("import sys\nsys.modules['torch'] = None\nimport dlcache\n"
            "assert callable(dlcache.info)\n"
            "try:\n    dlcache.Loader\nexcept ModuleNotFoundError as e:\n"
            "    print(e.name, '|', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    name, msg = r.stdout.split(" | ", 1)
    assert name == "torch" and "needs torch, which this Python" in msg, r.stdout
    assert sys.executable in msg and "--system-site-packages" in msg, r.stdout


def test_a_crop_the_store_cannot_give_says_to_pass_crop(tmp_path):
    """A variable-size image field with no crop=, or a crop larger than the images: the
    message named C's config.crop_h/crop_w and no way out."""
    import numpy as np
    imgs = [np.zeros((8 + i, 10, 3), np.uint8) for i in range(3)]
    dlcache.write([{"image": a, "label": 0} for a in imgs], tmp_path / "v.dlc",
                  variable=["image"], progress=False)
    with pytest.raises(dlcache.InvalidArgumentError, match=r"differ in size.*crop= in Python"):
        dlcache.Loader(tmp_path / "v.dlc", 2)
    dlcache.write([{"image": imgs[0], "label": 0}] * 2, tmp_path / "f.dlc", progress=False)
    with pytest.raises(dlcache.InvalidArgumentError,
                       match=r"larger than field \"image\"'s 8x10: give a crop of at most that"):
        dlcache.Loader(tmp_path / "f.dlc", 2, crop=16)


def test_integer_arguments_of_the_methods_are_checked(tmp_path):
    """Values went to C's uint32/uint64 as ctypes cut them: mixup_params(2**64, 0) was epoch
    0's draw and (-1, 0) epoch 2**64 - 1's, report(-1) the whole run and report(2**32 + 1)
    the last batch; 1.5 raised a bare ctypes.ArgumentError. And set_epoch(2**63 - 1) let the
    next iter() move to 2**63, where a state is refused."""
    import numpy as np
    dlcache.write([{"image": np.zeros((8, 8, 3), np.uint8), "label": i % 2} for i in range(8)],
                  tmp_path / "s.dlc", progress=False)
    with dlcache.Loader(tmp_path / "s.dlc", 4, crop=8, mixup=0.8, num_classes=2,
                        dtype="float32") as ld:
        assert ld.mixup_params(np.int64(1), 0) == ld.mixup_params(1, 0)
        for args, name in (((2**64, 0), "epoch"), ((-1, 0), "epoch"), ((1.5, 0), "epoch"),
                           ((0, -1), "batch_index"), ((0, 2**64), "batch_index")):
            with pytest.raises(ValueError, match=name):
                ld.mixup_params(*args)
        next(iter(ld))
        for bad in (-1, 2**32 + 1, 1.5, None):
            with pytest.raises((ValueError, TypeError), match="last"):
                ld.report(bad)
        ld.set_epoch(2**63 - 1)
        assert len(list(ld)) == 2
        with pytest.raises(ValueError, match=r"epoch 9223372036854775807 was the last"):
            next(iter(ld))


def test_numpy_scalars_are_numbers_everywhere(tmp_path):
    """A config read from numpy (np.int64(32), np.float32(0.5)) was taken by batch_size, flip
    and seed but refused by crop, a view's flip, a fill and mean with messages that
    contradicted themselves ("crop must be an int ... got 32")."""
    import numpy as np
    from dlcache import _stream
    dlcache.write([{"image": np.zeros((16, 16, 3), np.uint8), "label": 0}] * 4,
                  tmp_path / "s.dlc", progress=False)
    s = str(tmp_path / "s.dlc")
    for kw in (dict(crop=np.int64(8)), dict(crop=(np.int32(8), np.uint16(8))),
               dict(views=[{"name": "g", "count": 1, "crop": np.int64(8),
                            "flip": np.float32(0.5)}]),
               dict(crop=8, auto_augment="rand_augment",
                    auto_augment_options={"fill": np.uint8(3)}),
               dict(crop=8, dtype="float32", mean=np.float32(0.5), std=np.float64(0.25)),
               dict(crop=8, random_erasing={"p": np.float32(1.0), "value": np.uint8(7)})):
        with dlcache.Loader(s, 2, **kw) as ld:
            assert len(next(iter(ld))) == 2, kw
    assert _stream.parse_size(np.int64(1 << 30), "cache_limit") == 1 << 30


def test_the_hidden_bounds_of_crop_and_erasing_ratios_are_named(tmp_path):
    """hi of RandomResizedCrop's scale and ratio is at most 1e6 in C, and RandomErasing's ratio
    below 1e6: (1e30, 1e30) was called 'must satisfy 0 < lo <= hi', and an erasing ratio of
    (1, 1e6) passed the Python check and failed in C with the same words."""
    import numpy as np
    dlcache.write([{"image": np.zeros((16, 16, 3), np.uint8), "label": 0}] * 2,
                  tmp_path / "s.dlc", progress=False)
    s = str(tmp_path / "s.dlc")
    with pytest.raises(ValueError, match=r"ratio must satisfy 0 < lo <= hi <= 1e6"):
        dlcache.Loader(s, 2, crop=8, random_resized_crop=((0.1, 1), (1e30, 1e30)))
    with pytest.raises(ValueError, match=r"ratio must satisfy 0 < lo <= hi < 1e6"):
        dlcache.Loader(s, 2, crop=8, random_erasing={"ratio": (1, 1e6)})
    with dlcache.Loader(s, 2, crop=8, random_resized_crop=((0.1, 1), (1, 1e6)),
                        random_erasing={"ratio": (1, 999999.0)}) as ld:
        assert len(next(iter(ld))) == 2


def test_flags_are_bools_not_any_truthy_value(tmp_path):
    """shuffle="False" shuffled, as_dict="False" gave dicts, write(force="no") replaced a store,
    info(verify="no") verified, mixup="4" mixed with alpha 4 and DLCACHE_DEBUG_POISON=no
    poisoned: any non-empty string is true. Flags take bools (and 0/1, numpy's bools)."""
    import numpy as np
    samples = [{"image": np.zeros((8, 8, 3), np.uint8), "label": 0}] * 4
    s = tmp_path / "s.dlc"
    dlcache.write(samples, s, progress=False)
    for kw in ("shuffle", "drop_last", "random_crop", "as_dict", "return_indices",
               "debug_poison"):
        with pytest.raises(TypeError, match="%s must be a bool, not 'False'" % kw):
            dlcache.Loader(s, 2, crop=8, **{kw: "False"})
    with dlcache.Loader(s, 2, crop=8, shuffle=np.bool_(False), drop_last=0) as ld:
        assert len(list(ld)) == 2
    with pytest.raises(TypeError, match="force must be a bool"):
        dlcache.write(samples, s, force="no", progress=False)
    with pytest.raises(TypeError, match="verify must be a bool"):
        dlcache.info(s, verify="no")
    with pytest.raises(ValueError, match="mixup must be a Beta alpha"):
        dlcache.Loader(s, 2, crop=8, dtype="float32", mixup="4", num_classes=2)
    r = subprocess.run([sys.executable, "-c", "import dlcache; dlcache.Loader(%r, 2, crop=8)"
                        % str(s)], env=dict(os.environ, DLCACHE_DEBUG_POISON="nope"),
                       capture_output=True, text=True, timeout=120)
    assert "$DLCACHE_DEBUG_POISON is 'nope'" in r.stderr, r.stderr[-2000:]
    with dlcache.Loader(s, 2, crop=8, debug_poison=None) as ld:
        assert ld._poison is False
