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
