"""Views cut from host batches keep their values (issue 23, item 4): rows cut from a batch and
kept without it (``rows = [x[0] for x, _ in L]``) across later batches, close() and the Loader's
collection, in every dtype, with device=None and device="cpu", as pairs and as dicts. A slot
whose memory a tensor still views is never refilled nor freed: it is handed over to those
tensors (dlc_loader_keep()) and freed when the last of them dies.

The scenarios run in a child interpreter: before the fix they crashed it (SIGSEGV, float16 and
float32) or changed the rows' values (uint8), and a crash must fail this test, not end pytest."""

import contextlib
import ctypes
import os
import subprocess
import sys

import pytest
import torch

from conftest import DEMO_COUNT, REPO, require_lib

require_lib("dlc_loader_open")

import dlcache  # noqa: E402
from dlcache._lib import lib  # noqa: E402

KW = dict(shuffle=False, crop=16, flip=0, threads=2)

CHILD = r"""
import gc, sys
import torch
import dlcache

store, dtype, device, as_dict, prefetch = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], \
    sys.argv[5]
kw = dict(shuffle=False, crop=16, flip=0, threads=2, dtype=dtype,
          device=None if device == "none" else device, as_dict=as_dict == "dict",
          prefetch=None if prefetch == "none" else int(prefetch))

def image(b):
    return b["image"] if isinstance(b, dict) else b[0]

with dlcache.Loader(store, 10, **kw) as ld:
    ref = [image(b)[0].clone() for b in ld]

# Cut rows, kept without their batch, across every later batch and close().
ld = dlcache.Loader(store, 10, **kw)
rows = [image(b)[0] for b in ld]
ld.close()
junk = [torch.full((10, 3, 16, 16), 7.0) for _ in range(50)]
bad = [i for i, (r, e) in enumerate(zip(rows, ref)) if not torch.equal(r, e)]
assert not bad, "rows %s changed after close()" % bad[:5]
assert len(rows) == len(ref) > 2

# The same with the Loader collected instead of closed, and rows of a mid-epoch iterator.
ld = dlcache.Loader(store, 10, **kw)
it = iter(ld)
rows = [image(next(it))[1:3] for _ in range(4)]
del ld, it
gc.collect()
junk = [torch.full((10, 3, 16, 16), 7.0) for _ in range(50)]
for i, r in enumerate(rows):
    with dlcache.Loader(store, 10, **kw) as again:
        want = [image(b)[1:3].clone() for _, b in zip(range(4), again)]
    assert torch.equal(r, want[i]), "rows of batch %d changed after the Loader was collected" % i
print("OK", len(ref))
"""


def run_child(store, dtype, device, as_dict="pair", prefetch="none"):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", CHILD, str(store), dtype, device, as_dict,
                        prefetch], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=600)
    err = p.stderr.decode(errors="replace")[-3000:]
    assert p.returncode == 0, "the child exited with %d (a negative value is the signal):\n%s" \
        % (p.returncode, err)
    assert p.stdout.decode().startswith("OK %d" % (DEMO_COUNT // 10))


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32"])
@pytest.mark.parametrize("device", ["none", "cpu"])
def test_rows_cut_from_batches_keep_their_values(store, dtype, device):
    run_child(store, dtype, device)


@pytest.mark.parametrize("prefetch", ["1", "2"])
def test_rows_of_dict_batches_keep_their_values(store, prefetch):
    run_child(store, "float32", "none", as_dict="dict", prefetch=prefetch)


def test_kept_rows_do_not_keep_the_loader_open(store):
    """The memory handed to the rows is theirs: close() still stops the workers and frees the
    slots at once, and the rows' memory goes when they do."""
    with dlcache.Loader(store, 10, dtype="float32", **KW) as ld:
        want = next(iter(ld))[0][0].clone()
    ld = dlcache.Loader(store, 10, dtype="float32", **KW)
    it = iter(ld)
    row = next(it)[0][0]
    next(it), next(it)  # the first batch is given back: its memory goes with the row
    handle = ld._handle
    ld.close()
    assert handle.ptr is None and not handle._fin.alive, "close() closed the C loader"
    assert torch.equal(row, want)


def test_usual_loop_and_whole_batches_keep_nothing(store):
    """What nobody keeps after its turn is given back as before, in the same slot memory: the
    slots' blocks are the same after an epoch of the usual loop."""
    with dlcache.Loader(store, 10, **KW) as ld:
        n = lib.dlc_loader_host_slots(ld._ptr(), None, None, 0)
        bases = (ctypes.c_void_p * n)()
        sizes = (ctypes.c_size_t * n)()
        lib.dlc_loader_host_slots(ld._ptr(), bases, sizes, n)
        before = list(bases)
        for x, _ in ld:
            assert any(bases[i] <= x.data_ptr() < bases[i] + sizes[i] for i in range(n))
        lib.dlc_loader_host_slots(ld._ptr(), bases, sizes, n)
        assert list(bases) == before


@pytest.mark.parametrize("prefetch", [None, 1])
def test_kept_batches_stay_usable_by_autograd(store, prefetch):
    """Gradient accumulation that keeps each micro-batch's graph until one backward(), and a
    batch made a leaf that requires grad (saliency, adversarial examples) and kept: as with
    torch's DataLoader. Before: a kept batch was moved onto a copy with Tensor.set_, which
    bumps its version (backward: "modified by an inplace operation") and is refused on such a
    leaf (next() and close() raised)."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3)
    with dlcache.Loader(store, 4, dtype="float32", prefetch=prefetch, **KW) as ld:
        losses, grads = [], []
        for step, (x, _) in enumerate(ld):
            losses.append(conv(x).square().mean())
            if len(losses) == 4:
                sum(losses).backward()
                losses = []
            if step == 12:
                break
    with dlcache.Loader(store, 4, dtype="float32", prefetch=prefetch, **KW) as ld:
        kept = []
        for x, y in ld:
            x.requires_grad_(True)
            conv(x).sum().backward()
            grads.append(x.grad)
            kept.append((x, y))
        want = [x.detach().clone() for x, _ in dlcache.Loader(store, 4, dtype="float32", **KW)]
    assert len(kept) == len(want)
    assert all(torch.equal(k.detach(), w) for (k, _), w in zip(kept, want))
    assert all(g is not None and g.shape == w.shape for g, w in zip(grads, want))


@pytest.mark.parametrize("as_dict", [False, True])
def test_batches_kept_across_a_new_epoch_with_one_held_over(store, as_dict):
    """The loop's variables still name the last batch of an epoch when the next epoch's iter()
    starts (held batches stay lent across the new plan). Each lent batch needs a dlc_batch of
    its own: a new iterator that reused the held one's struct gave the new epoch's first batch
    back in its place (refilled under `list(loader)`), and kept the old one lent for ever."""
    def image(b):
        return b["image"] if as_dict else b[0]

    with dlcache.Loader(store, 10, as_dict=as_dict, **KW) as ld:
        ref0 = [image(b).clone() for b in ld]
        ref1 = [image(b).clone() for b in ld]
    with dlcache.Loader(store, 10, as_dict=as_dict, **KW) as ld:
        for b in ld:
            pass  # b names epoch 0's last batch, still lent
        kept = list(ld)  # epoch 1, every batch kept
        assert torch.equal(image(b), ref0[-1])
        again = list(ld)  # epoch 2: the ring still has every slot
    assert len(kept) == len(ref1) and len(again) == len(ref0)
    bad = [i for i, (k, r) in enumerate(zip(kept, ref1)) if not torch.equal(image(k), r)]
    assert not bad, "batches %s of epoch 1 changed" % bad


@contextlib.contextmanager
def _ctrl_c_after(monkeypatch, name, nth):
    """lib.NAME raising KeyboardInterrupt right after its @p nth call returned DLC_OK: where
    Python's SIGINT handler raises when the signal lands during the call."""
    real = getattr(lib, name)
    calls = []

    def interrupted(*args):
        rc = real(*args)
        calls.append(rc)
        if len(calls) == nth and rc == 0:
            raise KeyboardInterrupt
        return rc

    monkeypatch.setattr(lib, name, interrupted)
    try:
        yield
    finally:
        monkeypatch.setattr(lib, name, real)


@pytest.mark.parametrize("as_dict", [False, True])
def test_ctrl_c_between_the_lend_and_the_yield_changes_no_kept_batch(store, monkeypatch, as_dict):
    """Python runs a SIGINT handler right after a C call returns: a KeyboardInterrupt there,
    after dlc_loader_next_wait() lent the batch and before the Loader knew of it, left C one
    batch ahead. The next next() then gave back the oldest batch the caller still held (refilled
    under its tensors), and every later next() and close() failed ("the batch kept is not one
    lent"). The interrupted batch must go back at once, and the loop carry on as before."""
    def image(b):
        return b["image"] if as_dict else b[0]

    with dlcache.Loader(store, 10, as_dict=as_dict, **KW) as ld:
        ref = [image(b).clone() for b in ld]
    ld = dlcache.Loader(store, 10, as_dict=as_dict, **KW)
    kept = []
    with _ctrl_c_after(monkeypatch, "dlc_loader_next_wait", 3), pytest.raises(KeyboardInterrupt):
        for b in ld:
            kept.append(image(b))
    assert len(kept) == 2
    again = [image(b).clone() for b in ld]  # the next epoch, as a notebook runs the cell again
    bad = [i for i, k in enumerate(kept) if not torch.equal(k, ref[i])]
    assert not bad, "batches %s kept before the interrupt changed" % bad
    assert len(again) == len(ref)
    ld.close()
    assert ld._handle.ptr is None


def test_ctrl_c_right_after_a_kept_batch_is_handed_over(store, monkeypatch):
    """The same for dlc_loader_keep(): a KeyboardInterrupt after it handed a kept batch's
    memory over, before the Loader took note, left that batch in the Loader's list of lent
    ones, and every later next() and close() failed ("the batch kept is not one lent")."""
    with dlcache.Loader(store, 10, **KW) as ld:
        ref = [b[0].clone() for b in ld]
    ld = dlcache.Loader(store, 10, prefetch=1, **KW)  # every step keeps the batch held over
    kept = []
    with _ctrl_c_after(monkeypatch, "dlc_loader_keep", 1), pytest.raises(KeyboardInterrupt):
        for b in ld:
            kept.append(b[0])
    again = [b[0].clone() for b in ld]  # the loop run again, as a notebook does
    assert all(torch.equal(k, r) for k, r in zip(kept, ref))
    assert len(again) == len(ref)
    ld.close()
    assert ld._handle.ptr is None


@pytest.mark.parametrize("tokens", [False, True])
def test_a_fork_of_a_loader_says_why_and_exits(store, tmp_path, tokens):
    """A Loader used in a fork() child (multiprocessing's default start method on Linux) had
    none of its C threads: next() waited for ever. The child now gets an error saying so, and
    exits without waiting for threads that are not there; the parent's Loader goes on."""
    import numpy as np
    import time
    if tokens:
        path = tmp_path / "t.dlc"
        dlcache.write_tokens([np.arange(1, 50) for _ in range(20)], path, eos_id=0,
                             vocab_size=100)
        ld = dlcache.Loader(str(path), 2, seq_len=8)
    else:
        ld = dlcache.Loader(store, 10, **KW)
    it = iter(ld)
    next(it)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 1
        try:
            next(iter(ld))
        except RuntimeError as e:
            code = 0 if "is a fork of it" in str(e) else 2
        except BaseException:
            code = 3
        os.write(w, b"%d" % code)
        try:
            ld.close()
        finally:
            os._exit(code)
    os.close(w)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")
    told = os.read(r, 16)
    os.close(r)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, told
    assert next(it) is not None, "the parent's Loader goes on"
    ld.close()


def test_a_batch_interrupted_before_its_yield_is_not_lost_on_resume(store, monkeypatch):
    """A Ctrl-C landing after dlc_loader_next_wait() lent a batch and before the yield: the
    batch was given back as consumed, so a state saved then skipped it, and the resumed run
    never delivered it. It is put back as not taken (dlc_loader_put_back())."""
    kw = dict(KW, return_indices=True)
    with dlcache.Loader(store, 10, **kw) as ld:
        want = [b[2].clone() for b in ld]
    ld = dlcache.Loader(store, 10, **kw)
    got = []
    with _ctrl_c_after(monkeypatch, "dlc_loader_next_wait", 3), pytest.raises(KeyboardInterrupt):
        for b in ld:
            got.append(b[2].clone())
    state = ld.state_dict()
    assert ld.stats()["batches"] == 2, "the interrupted batch is not counted as delivered"
    ld.close()
    with dlcache.Loader(store, 10, **kw) as again:
        again.load_state_dict(state)
        again.set_epoch(state["epoch"])
        got += [b[2].clone() for b in again]
    assert len(got) == len(want)
    assert all(torch.equal(g, w) for g, w in zip(got, want)), "a batch lost or repeated"
