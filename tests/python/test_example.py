"""examples/train.py runs end to end (a few tiny steps of both pipelines)."""

import os
import re
import subprocess
import sys

from conftest import LIB, REPO, require_lib

require_lib("dlc_loader_open", "dlc_build")


def test_train_example_smoke(demo_dir, tmp_path):
    env = dict(os.environ, DLCACHE_LIB=LIB)
    r = subprocess.run([sys.executable, os.path.join(REPO, "examples", "train.py"),
                        "--data", str(demo_dir), "--store", str(tmp_path / "s.dlc"),
                        "--steps", "3", "--data-batches", "2", "--batch-size", "8",
                        "--crop", "48", "--workers", "1"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dlcache / torch: data path" in r.stdout
    # Which step was faster, by name (issue 34: "0.57x faster" said of a slower step).
    assert re.search(r"step time: (dlcache|torch)'s [0-9.]+ s is [0-9.]+x faster than "
                     r"(dlcache|torch)'s", r.stdout), r.stdout
    assert "loss curve" in r.stdout


def test_train_example_recipes(demo_dir, tmp_path):
    """Each --recipe runs end to end, or (status 3) names the Loader arguments this build of
    dlcache lacks; classic and ffcv (progressive resizing, bfloat16, label smoothing) always
    run."""
    env = dict(os.environ, DLCACHE_LIB=LIB)
    ran = []
    for recipe in ("classic", "ffcv", "torchvision", "timm", "dino"):
        r = subprocess.run([sys.executable, os.path.join(REPO, "examples", "train.py"),
                            "--recipe", recipe, "--data", str(demo_dir),
                            "--store", str(tmp_path / "s.dlc"), "--steps", "3",
                            "--data-batches", "2", "--batch-size", "8", "--crop", "48",
                            "--workers", "1"],
                           env=env, capture_output=True, text=True, timeout=600)
        if r.returncode == 3:
            assert "needs dlcache.Loader(" in r.stderr, r.stderr
            assert recipe not in ("classic", "ffcv")
            continue
        assert r.returncode == 0, recipe + ": " + r.stdout + r.stderr
        assert "recipe %s" % recipe in r.stdout and "loss curve" in r.stdout
        ran.append(recipe)
    assert "classic" in ran and "ffcv" in ran
