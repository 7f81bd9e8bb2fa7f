"""dlcache.Loader as a peer of torch's DataLoader (issue 34): pickling, the attributes that
frameworks read (with small, faithful re-creations of the code of Lightning and Accelerate that
reads them: neither is a Debian package), a real signature, transform=, presets, mixtures'
defaults, threads="auto", retries=0 and plan()'s arguments."""

import copy
import inspect
import logging
import os
import pickle
import subprocess
import sys
import threading
import warnings

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler
from torch.utils.data import SequentialSampler

from conftest import LIB, REPO, require_lib

require_lib("dlc_loader_open", "dlc_loader_open_mix", "dlc_build")

import dlcache  # noqa: E402
from dlcache import loader as dl  # noqa: E402

KW = dict(threads=2, prefetch=2, seed=7)


def clone(batch):
    if isinstance(batch, dict):
        return {k: v.clone() for k, v in batch.items()}
    return tuple(t.clone() for t in batch)


def same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def store256(demo_dir, tmp_path_factory):
    """40 records at 256 x 256, the size presets are for (cachebuild --size 256)."""
    import shutil
    src = tmp_path_factory.mktemp("few") / "train"
    for cls in sorted(os.listdir(demo_dir))[:4]:
        os.makedirs(src / cls)
        for name in sorted(os.listdir(demo_dir / cls))[:10]:
            shutil.copy(demo_dir / cls / name, src / cls / name)
    path = tmp_path_factory.mktemp("store256") / "s.dlc"
    dlcache.build(str(src), str(path), size=256, threads=2)
    return path


# ---- 1: pickling ----------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_pickled_loader_continues_the_same_batches(store, how):
    ld = dlcache.Loader(store, 16, crop=32, **KW)
    it = iter(ld)
    for _ in range(3):
        next(it)
    twin = pickle.loads(pickle.dumps(ld)) if how == "pickle" else copy.deepcopy(ld)
    # No thread, no memory until its first use.
    assert "_lazy" in twin.__dict__ and "opens at first use" in repr(twin)
    want = [clone(b) for b in it] + [clone(b) for b in ld]  # the rest, then the next epoch
    got = [clone(b) for b in twin] + [clone(b) for b in twin]
    assert len(got) == len(want) == len(ld) - 3 + len(ld)
    assert all(same(g, w) for g, w in zip(got, want))
    assert twin.epoch == ld.epoch == 1
    ld.close()
    twin.close()
    with pytest.raises(ValueError, match="closed dlcache.Loader cannot be pickled"):
        pickle.dumps(ld)


def test_pickle_keeps_set_epoch_and_the_arguments_given(store):
    with dlcache.Loader(store, 8, crop=24, flip=0.0, **KW) as ld:
        ld.set_epoch(3)
        twin = pickle.loads(pickle.dumps(ld))
        assert twin._args == {"path": store, "batch_size": 8, "crop": 24, "flip": 0.0, **KW}
        want = [clone(b) for b in ld]
        assert ld.epoch == 3
        got = [clone(b) for b in twin]
        assert twin.epoch == 3 and all(same(g, w) for g, w in zip(got, want))
        twin.close()
    # A copy never used is closed without ever opening.
    lazy = pickle.loads(pickle.dumps(dlcache.Loader(store, 8, **KW)))
    lazy.close()
    with pytest.raises(ValueError, match="closed"):
        iter(lazy)


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_set_epoch_on_a_copy_not_yet_opened_is_kept(store, how):
    """mp.spawn, ddp_spawn and Ray hand each process a pickled Loader, and a resume calls
    set_epoch() on it before the first iter(). set_epoch() only marked the epoch; the open at
    the first use reset the mark, so the copy gave the epoch after its state's instead."""
    with dlcache.Loader(store, 8, crop=24, **KW) as ld:
        for _ in ld:
            pass
        for _ in ld:
            pass  # two epochs done: the copy's own next epoch would be 2
        twin = pickle.loads(pickle.dumps(ld)) if how == "pickle" else copy.deepcopy(ld)
        assert "_lazy" in twin.__dict__
        twin.set_epoch(0)
        twin.sampler.set_epoch(0)  # the same, through the sampler, as torch's loops call it
        assert "_lazy" in twin.__dict__, "set_epoch() does not open it"
        got = [clone(b) for b in twin]
        assert twin.epoch == 0
        ld.set_epoch(0)
        want = [clone(b) for b in ld]
        assert len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
        twin.close()


class MyLoader(dlcache.Loader):
    """A subclass pickles as itself."""


def test_subclass_pickles_as_itself(store):
    with MyLoader(store, 8, **KW) as ld:
        twin = pickle.loads(pickle.dumps(ld))
        assert type(twin) is MyLoader and len(twin) == len(ld)
        twin.close()


def test_pickled_urls_hold_no_secret():
    args = {"path": "https://user:hunter2@example.com:8443/sets/s?X-Amz-Signature=abc&x=1",
            "batch_size": 4, "endpoint": "http://AKIAABCDEFGHIJKLMNOP:pw@127.0.0.1:9000",
            "cache_dir": "/ssd/c"}
    clean = dl._without_secrets(args)
    assert clean["path"] == "https://example.com:8443/sets/s"
    assert clean["endpoint"] == "http://127.0.0.1:9000"
    assert dl._without_secrets({"path": ["s3://b/a", b"gs://b/x?token=t"]})["path"] == \
        ["s3://b/a", b"gs://b/x"]
    assert dl._without_secrets({"path": "s3://b/plain"})["path"] == "s3://b/plain"
    blob = pickle.dumps(dl._restore(clean, None, {}))
    for secret in (b"hunter2", b"Signature", b"AKIA", b"pw@", b"user"):
        assert secret not in blob


# ---- 2: what frameworks read ------------------------------------------------------------------
def test_dataloader_attributes(store):
    with dlcache.Loader(store, 16, drop_last=True, **KW) as ld:
        assert len(ld.dataset) == ld.num_samples == 150
        assert ld.dataset[3]["label"] == dlcache.Store(store)[3]["label"]
        assert ld.batch_size == 16 and ld.drop_last is True
        assert len(ld.sampler) == 150 and len(ld) == 150 // 16
        assert ld.num_workers == 0 and ld.threads == 2 and ld.prefetch == 2
        assert ld.pin_memory is False and ld.collate_fn is None
        assert ld.batch_sampler is None and ld.persistent_workers is False
        assert ld.prefetch_factor == \
            inspect.signature(DataLoader).parameters["prefetch_factor"].default
        # sampler.set_epoch() is the Loader's.
        ld.sampler.set_epoch(4)
        first = clone(next(iter(ld)))
        assert ld.epoch == 4 and ld.sampler.epoch == 4
    with dlcache.Loader(store, 16, **KW) as other:
        other.set_epoch(4)
        assert same(first, next(iter(other)))
    with dlcache.Loader(store, 16, rank=1, world_size=4, **KW) as ld:
        assert len(ld.sampler) == 38 and ld.sampler.num_replicas == 4 and ld.sampler.rank == 1


# Lightning (lightning/pytorch/utilities/data.py, loops/utilities.py, trainer/connectors/
# data_connector.py), as a trainer calls them on a loader it did not make.
def _lightning_has_len(dataloader):
    try:
        if len(dataloader) == 0:
            warnings.warn("returned 0 length")
        has_len = True
    except (TypeError, NotImplementedError):
        has_len = False
    if has_len and hasattr(dataloader, "dataset") and \
            isinstance(dataloader.dataset, IterableDataset):
        warnings.warn("Your `IterableDataset` has `__len__` defined.")
    return has_len


def _lightning_set_sampler_epoch(dataloader, epoch):
    objects = {}
    sampler = getattr(dataloader, "sampler", None)
    if sampler is not None:
        objects[id(sampler)] = sampler
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    if batch_sampler is not None:
        sampler = getattr(batch_sampler, "sampler", None)
        if sampler is not None:
            objects[id(sampler)] = sampler
    for obj in objects.values():
        set_epoch = getattr(obj, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)


def _lightning_is_dataloader_shuffled(dataloader):
    if not hasattr(dataloader, "sampler"):
        return False
    batch_sampler = dataloader.batch_sampler
    if batch_sampler is not None:
        sampler = batch_sampler.sampler if hasattr(batch_sampler, "sampler") else batch_sampler
    else:
        sampler = dataloader.sampler
    if isinstance(sampler, SequentialSampler):
        return False
    return isinstance(sampler, RandomSampler)


def _lightning_prepare_dataloader(dataloader):
    # _update_dataloader() re-instantiates torch DataLoaders only; anything else goes through.
    if not isinstance(dataloader, DataLoader):
        return dataloader
    raise AssertionError("not reached")


def test_lightning_fit_loop_drives_the_loader(store):
    with dlcache.Loader(store, 32, **KW) as ld, warnings.catch_warnings():
        warnings.simplefilter("error")  # no Lightning warning either
        loader = _lightning_prepare_dataloader(ld)
        assert loader is ld and _lightning_has_len(loader)
        assert _lightning_is_dataloader_shuffled(loader) is False  # not a torch RandomSampler
        seen = []
        for epoch in range(3):
            _lightning_set_sampler_epoch(loader, epoch)
            seen.append([clone(b) for b in loader])
        assert ld.epoch == 2 and len(seen[2]) == len(ld)
    with dlcache.Loader(store, 32, **KW) as ref:
        for epoch in (0, 1, 2):
            ref.set_epoch(epoch)
            assert all(same(a, b) for a, b in zip(seen[epoch], ref))


# Accelerate (accelerate/data_loader.py prepare_data_loader, one process): the attributes it
# reads, and the DataLoaderShard it builds from them.
_PYTORCH_DATALOADER_KWARGS = {
    "batch_size": 1, "shuffle": False, "sampler": None, "batch_sampler": None, "num_workers": 0,
    "collate_fn": None, "pin_memory": False, "drop_last": False, "timeout": 0,
    "worker_init_fn": None, "multiprocessing_context": None, "generator": None,
    "prefetch_factor": 2, "persistent_workers": False,
}


def _accelerate_prepare_data_loader(dataloader):
    new_dataset = dataloader.dataset
    new_batch_sampler = dataloader.batch_sampler if not isinstance(new_dataset, IterableDataset) \
        else None
    sampler_is_batch_sampler = isinstance(dataloader.sampler, BatchSampler)
    assert not sampler_is_batch_sampler
    ignore_kwargs = ["batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"]
    kwargs = {k: getattr(dataloader, k, _PYTORCH_DATALOADER_KWARGS[k])
              for k in _PYTORCH_DATALOADER_KWARGS if k not in ignore_kwargs}
    if new_batch_sampler is None:
        kwargs["drop_last"] = dataloader.drop_last
        kwargs["batch_size"] = dataloader.batch_size
    return DataLoader(new_dataset, batch_sampler=new_batch_sampler, **kwargs)


def test_as_iterable_dataset_in_a_dataloader_and_accelerate(store):
    with dlcache.Loader(store, 16, **KW) as ld:
        want = [clone(b) for b in ld]
    with dlcache.Loader(store, 16, **KW) as ld:
        ds = ld.as_iterable_dataset()
        assert isinstance(ds, IterableDataset) and len(ds) == len(ld)
        plain = DataLoader(ds, batch_size=None)
        assert len(plain) == len(ld)
        got = [clone(b) for b in plain]
        assert len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
        ld.set_epoch(0)
        prepared = _accelerate_prepare_data_loader(plain)
        got = [clone(b) for b in prepared]
        assert len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
        with pytest.raises(RuntimeError, match="num_workers=0"):
            next(iter(DataLoader(ds, batch_size=None, num_workers=1)))
        # The attributes Accelerate reads off the Loader itself make a valid DataLoader.
        kwargs = {k: getattr(ld, k, v) for k, v in _PYTORCH_DATALOADER_KWARGS.items()
                  if k not in ("sampler", "shuffle")}
        DataLoader(ld.dataset, **kwargs)


# ---- 3: a signature ---------------------------------------------------------------------------
def test_signature_shows_every_argument():
    sig = inspect.signature(dlcache.Loader)
    params = sig.parameters
    assert list(params)[:2] == ["path", "batch_size"] and "args" not in params
    assert params["shuffle"].default is True and params["shuffle"].annotation is bool
    assert params["crop"].default is None and "int" in str(params["crop"].annotation)
    for name in ("transform", "preset", "timeout", "retries", "threads", "prefetch"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[name].annotation is not inspect.Parameter.empty
    assert os.path.isfile(os.path.join(REPO, "python", "dlcache", "py.typed"))
    steps = subprocess.run(["bash", os.path.join(REPO, "tests", "run_all.sh"), "--list"],
                           capture_output=True, text=True, check=True).stdout
    assert any(line.startswith("types ") and "mypy" in line for line in steps.splitlines())


# ---- 4: transform=, and torch's arguments -----------------------------------------------------
def test_transform_runs_on_each_batch_in_the_consumers_thread(store):
    threads = set()

    def tf(batch):
        threads.add(threading.get_ident())
        images, labels = batch
        return images.float().mean(dim=(1, 2, 3)), labels + 100

    with dlcache.Loader(store, 16, **KW) as ld:
        want = [clone(b) for b in ld]
    with dlcache.Loader(store, 16, transform=tf, **KW) as ld:
        got = list(ld)
    assert threads == {threading.get_ident()}
    for (m, lab), (img, wl) in zip(got, want):
        assert torch.equal(lab, wl + 100) and torch.allclose(m, img.float().mean(dim=(1, 2, 3)))
    with dlcache.Loader(store, 16, as_dict=True, transform=lambda b: sorted(b), **KW) as ld:
        assert next(iter(ld)) == ["image", "label"]
    with pytest.raises(TypeError, match="transform must be a callable"):
        dlcache.Loader(store, 16, transform=3)


@pytest.mark.parametrize("name, value, hint", [
    ("collate_fn", lambda b: b, "transform="),
    ("worker_init_fn", lambda i: None, "threads="),
    ("batch_sampler", None, "batch_size="),
    ("sampler", RandomSampler(range(10)), "'shuffle', 'sequential' or 'windows'"),
    ("num_workers", 4, "threads="),
    ("generator", torch.Generator(), "seed="),
    ("multiprocessing_context", "spawn", "threads="),
    ("pin_memory_device", "cuda", "device="),
])
def test_torch_arguments_say_what_to_use(store, name, value, hint):
    with pytest.raises(TypeError, match=r"takes no .*%s" % hint.replace("(", r"\(")):
        dlcache.Loader(store, 16, **{name: value})


# ---- 5: presets -------------------------------------------------------------------------------
def test_presets(store256):
    with dlcache.Loader(store256, 8, preset="train", **KW) as ld:
        x, y = next(iter(ld))
        assert x.dtype == torch.float32 and x.shape == (8, 3, 224, 224) and y.dtype == torch.int64
        assert -3 < float(x.mean()) < 3  # normalized
    with dlcache.Loader(store256, 8, preset="eval", **KW) as ld:
        got = [clone(b) for b in ld]
    with dlcache.Loader(store256, 8, crop=224, random_crop=False, flip=0.0, dtype="float32",
                        shuffle=False, **KW) as ld:
        assert all(same(g, w) for g, w in zip(got, ld))
    # "eval" reads in record order, as QUICKSTART.md says and torch's eval loaders do; shuffle=
    # or sampler= given win.
    with dlcache.Loader(store256, 8, preset="eval", return_indices=True, **KW) as ld:
        idx = [i for b in ld for i in b[2].tolist()]
        assert idx == sorted(idx) == list(range(len(idx)))
    for kw in (dict(shuffle=True), dict(sampler="shuffle")):
        with dlcache.Loader(store256, 8, preset="eval", return_indices=True, **kw, **KW) as ld:
            idx = [i for b in ld for i in b[2].tolist()]
            assert idx != sorted(idx) and sorted(idx) == list(range(len(idx)))
    # Any argument given wins over the preset.
    with dlcache.Loader(store256, 8, preset="train", dtype="uint8", crop=200, **KW) as ld:
        x, _ = next(iter(ld))
        assert x.dtype == torch.uint8 and x.shape == (8, 200, 200, 3)
    assert dl._preset("train", "cuda")["dtype"] == "float16"
    with pytest.raises(ValueError, match="preset must be 'train' or 'eval'"):
        dlcache.Loader(store256, 8, preset="fast")


def test_newcomers_training_loop(store256):
    """A newcomer's 20 lines with preset="train": no dtype, no layout, no permute."""
    torch.manual_seed(0)
    loader = dlcache.Loader(store256, 8, preset="train", threads=2)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, kernel_size=7, stride=4), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(8, loader.num_classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    before = [p.detach().clone() for p in model.parameters()]
    losses = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        for images, labels in loader:
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    loader.close()
    assert len(losses) == 2 * 5 and all(l == l and l < 100 for l in losses)
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


# ---- 6: mixtures' defaults --------------------------------------------------------------------
def test_mixture_tuples_warn_that_source_is_dropped(store, tmp_path):
    # Two parts of the store (a mixture refuses one store twice: its passes would be in step).
    from conftest import tool
    subprocess.run([tool("set_split"), str(store), "2", str(tmp_path / "parts")], check=True,
                   stdout=subprocess.DEVNULL)
    a, b = sorted(str(p) for p in (tmp_path / "parts").glob("*.dlc"))
    with pytest.warns(UserWarning, match=r"leave out each sample's source: pass as_dict=True"):
        dlcache.Loader([a, b], 8, **KW).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dlcache.Loader([a, b], 8, as_dict=True, **KW).close()
        dlcache.Loader([a, b], 8, return_source=True, **KW).close()
        dlcache.Loader([store], 8, **KW).close()  # one source: nothing left out
        with dlcache.Loader([a, b], 8, as_dict=True, **KW) as ld:
            # A mixture pickles and continues too.
            it = iter(ld)
            next(it)
            twin = pickle.loads(pickle.dumps(ld))
            want = [clone(b) for b in it]
            got = [clone(b) for b in twin]
            assert len(got) == len(want) == len(ld) - 1
            assert all(same(g, w) for g, w in zip(got, want))
            twin.close()
        with dlcache.Loader([a, b], 8, as_dict=True, **KW) as ld:
            # Equal weights by default, whatever the sizes.
            assert [s["weight"] for s in ld.sources] == [1.0, 1.0]


# ---- 7: threads="auto" ------------------------------------------------------------------------
def test_threads_auto_any_case(store):
    with dlcache.Loader(store, 8, threads="Auto", prefetch=2) as ld:
        assert ld._config.auto_threads == 1 and ld.threads >= 1
    with pytest.raises(ValueError, match="an integer or 'auto'"):
        dlcache.Loader(store, 8, threads="many")


def test_report_before_the_first_batch_is_unknown(store):
    with dlcache.Loader(store, 8, **KW) as ld:
        assert ld.report().bound == "unknown"


# ---- 8: streaming arguments -------------------------------------------------------------------
def _dead_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: each connection is refused at once
    return port


def test_retries_zero_fails_fast_and_retries_are_logged_not_warned(tmp_path, caplog):
    url = "http://127.0.0.1:%d/b/set" % _dead_port()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(dlcache.NetworkError) as e:
            dlcache.Loader(url, 4, cache_dir=tmp_path, retries=0, timeout=5)
        assert "gave up after 1 attempt" in str(e.value)
        caplog.set_level(logging.INFO, logger="dlcache")
        with pytest.raises(dlcache.NetworkError):
            dlcache.Loader(url, 4, cache_dir=tmp_path, retries=1, timeout=5)
    notes = [r for r in caplog.records if r.name == "dlcache" and "retry 1" in r.getMessage()]
    assert notes and notes[0].levelno == logging.WARNING
    with pytest.raises(ValueError, match="retries"):
        dlcache.Loader(url, 4, cache_dir=tmp_path, retries=-1)


def test_retry_notice_without_logging_set_up_is_one_line(tmp_path):
    url = "http://127.0.0.1:%d/b/set" % _dead_port()
    code = ("import warnings, dlcache\nwarnings.simplefilter('error')\n"
            "try:\n    dlcache.Loader(%r, 4, cache_dir=%r, retries=1, timeout=5)\n"
            "except dlcache.NetworkError:\n    print('ERR')\n" % (url, str(tmp_path)))
    env = dict(os.environ, DLCACHE_LIB=LIB, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.strip() == "ERR", r.stderr
    assert r.stderr.count("retry 1 in") == 1 and "Warning" not in r.stderr, r.stderr


def test_tools_take_retries_zero(tmp_path):
    from conftest import tool
    url = "http://127.0.0.1:%d/x.dlc" % _dead_port()
    r = subprocess.run([tool("cachewarm"), url, "-o", str(tmp_path / "x.dlc"), "--retries", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "gave up after 1 attempt" in r.stderr, r.stderr
    assert "retry 1" not in r.stderr


def test_sizes_follow_the_usual_rule():
    parse = dlcache._stream.parse_size
    assert parse("6MB") == 6_000_000 and parse("6MiB") == parse("6M") == 6 << 20
    assert parse("2kB") == 2000 and parse("2KiB") == parse("2k") == 2048


def test_tools_sizes_follow_the_same_rule(demo_dir, tmp_path):
    import json
    from conftest import tool
    dlcache.build(str(demo_dir), str(tmp_path / "set"), size=32, threads=2, shards=3)
    got = {}
    for size in ("6MB", "6MiB", "6M", "6kB", "6K", "7"):
        r = subprocess.run([tool("cacheinfo"), str(tmp_path / "set"), "--plan", "--cache-limit",
                            size, "--json"], capture_output=True, text=True)
        assert r.returncode in (0, 1), r.stderr  # 1: the limit is too small for the windows
        got[size] = json.loads(r.stdout)["cache_limit"]
    assert got == {"6MB": 6_000_000, "6MiB": 6 << 20, "6M": 6 << 20, "6kB": 6000, "6K": 6144,
                   "7": 7}
    r = subprocess.run([tool("cacheinfo"), str(tmp_path / "set"), "--plan", "--cache-limit",
                        "6XB"], capture_output=True, text=True)
    assert r.returncode == 2 and "wants a size" in r.stderr


def test_plan_takes_every_loader_argument(store):
    a = dlcache.plan(store, 8, window_shards=1, world_size=1, cache_ranks=1, prefetch=1)
    b = dlcache.plan(store, 8, window_shards=1, world_size=1, cache_ranks=1, prefetch=8,
                     crop=32, dtype="float16", threads=2, flip=0.0, transform=None)
    assert a["cache_needed_bytes"] <= b["cache_needed_bytes"]
    # A host Loader holds one batch beyond prefetch; a device one does not.
    assert dlcache.plan(store, 8, prefetch=3, device="cuda", window_shards=1, world_size=1,
                        cache_ranks=1) == \
        dlcache.plan(store, 8, prefetch=2, window_shards=1, world_size=1, cache_ranks=1)
    with pytest.raises(TypeError, match="does not take: num_wrkers"):
        dlcache.plan(store, 8, num_wrkers=2)


# ---- 9: the README's claims -------------------------------------------------------------------
def _readme():
    with open(os.path.join(REPO, "README.md")) as f:
        return f.read()


def test_readme_device_claim_is_what_the_loader_does(store):
    text = " ".join(_readme().split())
    assert "serves host batches and says why once" not in text
    assert '`device="cuda"` raises `ValueError`' in text
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch.cuda.is_available"):
            dlcache.Loader(store, 8, device="cuda")


def test_readme_speed_table_cases_are_the_demos():
    import re
    with open(os.path.join(REPO, "tools", "demo.sh")) as f:
        demo = set(re.findall(r'^case\("([^"]+)", ', f.read(), re.M))
    assert demo == {"uint8", "rrc f16"}
    text = _readme()
    table = text[text.index("## How fast"):]
    table = table[:table.index("\n\n", table.index("| ---"))]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert {re.match(r"\| `([^`]+)`", r).group(1) for r in rows} == demo, rows
    assert "make demo" in text[text.index("## How fast"):][:600]


def test_train_example_says_which_step_is_faster():
    with open(os.path.join(REPO, "examples", "train.py")) as f:
        src = f.read()
    assert "step time %.2fx faster" not in src
    assert "is %.2fx faster than" in src and "the model bounds both steps" in src


# ---- 10: make demo does only what it says -----------------------------------------------------
def test_make_demo_sets_no_hooks_and_builds_no_tests():
    r = subprocess.run(["make", "-n", "demo"], cwd=REPO, capture_output=True, text=True,
                       check=True)
    cmds = r.stdout
    assert "hooksPath" not in cmds and "git config" not in cmds
    builds = [line for line in cmds.splitlines() if "cmake --build" in line]
    assert builds and all("--target" in b for b in builds), builds
    targets = builds[0].split("--target", 1)[1].split(";")[0].split()
    assert set(targets) == {"dlcache", "cachebuild", "cacheinfo", "cachebench", "mkdemo"}
    assert ">build/demo-build.log" in cmds  # make's Entering/Leaving lines go to the log


def test_prefetch_reads_back_as_given(store):
    """The host Loader adds a slot for the batch held over: .prefetch said 5 for prefetch=4
    (and for the default), so Loader(..., prefetch=ld.prefetch) grew at each copy."""
    for given, want in ((None, 4), (1, 1), (4, 4), (9, 9)):
        kw = {} if given is None else {"prefetch": given}
        with dlcache.Loader(store, 8, threads=1, **kw) as ld:
            assert ld.prefetch == want
            with dlcache.Loader(store, 8, threads=1, prefetch=ld.prefetch) as again:
                assert again.prefetch == want


def test_state_dict_says_what_comes_next_after_set_epoch_and_a_resume(store):
    """state_dict() is "the batches this one yields next": it left out a set_epoch() not yet
    iterated (the copy replayed the old position), and a Loader restored mid-epoch could not
    tell its epoch's end (its share is unknown after a restore), so a state saved in its last
    batch gave an empty epoch."""
    kw = dict(threads=1, crop=24, return_indices=True)

    def indices(ld):
        return [i.tolist() for _, _, i in ld]

    a = dlcache.Loader(store, 16, **kw)
    it = iter(a)
    next(it)
    a.set_epoch(5)
    b = dlcache.Loader(store, 16, **kw)
    b.load_state_dict(a.state_dict())
    assert indices(b) == indices(a) and a.epoch == b.epoch == 5
    # Restored mid-epoch, saved in the body of its last batch.
    it = iter(a)
    for _ in range(3):
        next(it)
    r = dlcache.Loader(store, 16, **kw)
    r.load_state_dict(a.state_dict())
    for _ in r:
        last = r.state_dict()
    assert last["epoch_finished"]
    r2 = dlcache.Loader(store, 16, **kw)
    r2.load_state_dict(last)
    want = indices(r)
    assert indices(r2) == want and r2.epoch == r.epoch == 7 and len(want) == len(r)
    for ld in (a, b, r, r2):
        ld.close()
