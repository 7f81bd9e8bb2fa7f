"""The examples of records with many fields run end to end with tiny settings:
examples/segmentation.py, detection.py, tokens.py and small_images.py each write
a store with dlcache.write(), check it against their source data, time both
pipelines and (the first two) train a few steps. No timing is asserted: only that
they finish, print their table, clean up their temporary directory and fail with
a non-zero status on bad arguments."""

import glob
import os
import subprocess
import sys

import pytest

from conftest import LIB, REPO, require_lib, tool

require_lib("dlc_writer_open", "dlc_loader_open")
pytest.importorskip("torchvision", reason="the examples train torchvision models and use "
                    "torchvision.transforms; Debian's python3-torchvision is not installed")

EXAMPLES = os.path.join(REPO, "examples")


def run_example(name, args, tmp_path, timeout=300):
    """Run examples/NAME with @p args; its temporary directories go to a fresh TMPDIR,
    which must be empty again at the end."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir(exist_ok=True)
    env = dict(os.environ, DLCACHE_LIB=LIB, TMPDIR=str(tmp),
               PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)] + args, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, "%s %s\n%s%s" % (name, " ".join(args), r.stdout, r.stderr)
    left = [p for p in os.listdir(tmp) if p.startswith("dlcache-")]
    assert not left, "%s left %s in TMPDIR" % (name, left)
    return r.stdout


def test_segmentation(tmp_path):
    out = run_example("segmentation.py", [
        "--count", "16", "--size", "48", "--crop", "32", "--batch-size", "2", "--steps", "2",
        "--data-seconds", "0.2", "--workers", "2", "--mkdemo", tool("mkdemo")], tmp_path)
    assert "dlcache.write: 16 samples" in out
    assert "data path: dlcache / torch = " in out
    assert "dlcache (store: raw pixels + png masks)" in out
    assert "torch DataLoader (PIL JPEG + PNG, TF transforms)" in out


def test_segmentation_raw_masks_in_a_kept_workdir(tmp_path):
    work = tmp_path / "work"
    args = ["--count", "12", "--size", "40", "--crop", "32", "--batch-size", "4", "--steps",
            "0", "--data-seconds", "0.1", "--workers", "1", "--mask-encoding", "raw",
            "--only", "dlcache", "--workdir", str(work), "--mkdemo", tool("mkdemo")]
    out = run_example("segmentation.py", args, tmp_path)
    assert "dlcache.write: 12 samples" in out and "torch DataLoader" not in out
    assert glob.glob(str(work / "segmentation-12-40-raw.dlc"))
    out = run_example("segmentation.py", args, tmp_path)  # the second run reuses the store
    assert "reusing" in out and "dlcache.write" not in out


def test_detection(tmp_path):
    out = run_example("detection.py", [
        "--count", "16", "--size", "48", "--crop", "32", "--batch-size", "2", "--steps", "1",
        "--data-seconds", "0.2", "--workers", "2", "--mkdemo", tool("mkdemo")], tmp_path)
    assert "dlcache.write: 16 samples" in out
    assert "data path: dlcache / torch = " in out
    assert "boxes by hand" in out


def test_tokens(tmp_path):
    sources = [os.path.join(REPO, d) for d in ("cache/*/*.c", "loader/*.c", "tools/*.c",
                                               "include/dlcache/*.h", "docs/*.md")]
    out = run_example("tokens.py", [
        "--docs", "50", "--max-len", "100", "--batch-size", "8", "--vocab", "500",
        "--data-seconds", "0.2", "--workers", "2", "--sources"] + sources, tmp_path)
    assert "checked: one unshuffled epoch of dlcache equals pad_sequence's batches" in out
    assert "torch DataLoader + pad_sequence, 0 workers" in out
    assert "torch DataLoader + pad_sequence, 2 workers" in out
    assert "dlcache / best torch: " in out


def test_small_images(tmp_path):
    out = run_example("small_images.py", [
        "--count", "3000", "--photos-count", "30", "--data-seconds", "0.2",
        "--bench-seconds", "0.3", "--workers", "2", "--mkdemo", tool("mkdemo"),
        "--cachebench", tool("cachebench")], tmp_path)
    assert "checked: one unshuffled epoch of dlcache (float32 and uint8)" in out
    for dtype in ("float32", "uint8"):
        assert "--dtype %s --seconds 0.3 --json -> " % dtype in out
    assert "torch TensorDataset + DataLoader, 0 workers" in out
    assert "issue's target, C loader on 2 threads" in out


@pytest.mark.parametrize("name", ["segmentation.py", "detection.py", "tokens.py",
                                  "small_images.py"])
def test_help_and_bad_arguments(name, tmp_path):
    env = dict(os.environ, DLCACHE_LIB=LIB, PYTHONPATH=os.path.join(REPO, "python"))
    path = os.path.join(EXAMPLES, name)
    r = subprocess.run([sys.executable, path, "--help"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "usage:" in r.stdout and "--workdir" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, path, "--batch-size", "0" if name == "tokens.py"
                        else "100000000"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "error" in r.stderr, r.stdout + r.stderr
