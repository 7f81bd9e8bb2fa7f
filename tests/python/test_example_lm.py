"""examples/lm.py end to end, small: spm_train, cachebuild --tokens --tokenizer, both loaders,
training steps, and its resume check."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import BUILD, HAVE_LIB, LIB, REPO

pytestmark = pytest.mark.skipif(
    not HAVE_LIB or not shutil.which("spm_train")
    or not os.path.exists(os.path.join(BUILD, "lib", "libdlcache_spm.so")),
    reason="needs the build, spm_train and libdlcache_spm.so")


def test_lm_example(tmp_path):
    sources = [os.path.join(REPO, d) for d in ("cache/*/*.c", "loader/*.c", "docs/*.md")]
    env = dict(os.environ, DLCACHE_LIB=LIB, TMPDIR=str(tmp_path),
               PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, os.path.join(REPO, "examples", "lm.py"), "--docs", "30",
                        "--vocab", "200", "--seq-len", "32", "--batch-size", "4", "--steps", "2",
                        "--dim", "32", "--layers", "1", "--data-seconds", "0.2", "--sources"]
                       + sources, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cachebuild --tokens --tokenizer: 30 documents" in r.stdout
    assert "data path: dlcache / np.memmap = " in r.stdout
    assert "checked: a state saved after 3 batches resumes" in r.stdout
    assert not [p for p in os.listdir(tmp_path) if p.startswith("dlcache-lm-")]
