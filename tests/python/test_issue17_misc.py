"""Issue 17, the smaller things: build(progress=False) is silent, exception names end in Error,
dir(dlcache), Store slices, py.typed, messages (the path once, random bytes not called a version,
cachebuild --strict without "skipped"), what dlc_errmsg() promises, and the docs."""

import ctypes
import os
import re
import subprocess
import sys

import pytest

from conftest import LIB, require_lib, tool

require_lib("dlc_build", "dlc_writer_open")

import dlcache  # noqa: E402
from dlcache import errors  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(REPO, "python", "dlcache")


def tree_with_a_bad_file(demo_dir, tmp_path):
    """A small copy of two classes of the demo tree, plus a file that is not a JPEG."""
    src = tmp_path / "src"
    for cls in sorted(os.listdir(demo_dir))[:2]:
        (src / cls).mkdir(parents=True)
        for n in sorted(os.listdir(demo_dir / cls))[:3]:
            (src / cls / n).write_bytes((demo_dir / cls / n).read_bytes())
    bad = src / sorted(os.listdir(src))[0] / "000bad.jpg"
    bad.write_bytes(b"this is not an image\n")
    return src


def run_python(code, cwd):
    env = dict(os.environ, DLCACHE_LIB=LIB, PYTHONPATH=os.path.join(REPO, "python"))
    return subprocess.run([sys.executable, "-c", code], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=120)


# ---- 3: build(progress=False) -----------------------------------------------------------------

def test_build_progress_false_prints_nothing_but_reports_skips(demo_dir, tmp_path):
    """In a plain Python (no logging configured, as a script runs), the skip notices reached
    stderr through the "dlcache" logger even with progress=False."""
    src = tree_with_a_bad_file(demo_dir, tmp_path)
    code = ("import dlcache\n"
            "r = dlcache.build(%r, 'o.dlc', size=32, threads=1, progress=False)\n"
            "print(r.skipped, r.skips[0][0].endswith('000bad.jpg'))\n" % str(src))
    run = run_python(code, tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["1", "True"], "the report still lists the skip"
    assert run.stderr == "", run.stderr
    # Without progress=False the notice still goes to the log (shown on stderr).
    run = run_python(code.replace("progress=False", "force=True"), tmp_path)
    assert "000bad.jpg: skipped" in run.stderr, run.stderr


# ---- 4: names, dir(), Store slices, py.typed --------------------------------------------------

def test_exception_names_end_in_error_and_old_names_remain():
    classes = [v for v in vars(errors).values()
               if isinstance(v, type) and issubclass(v, BaseException)]
    assert classes and all(c.__name__.endswith("Error") for c in classes), \
        [c.__name__ for c in classes if not c.__name__.endswith("Error")]
    for name in errors.__all__ + dlcache.__all__:
        v = getattr(dlcache, name, None) or getattr(errors, name)
        if isinstance(v, type) and issubclass(v, BaseException):
            assert v.__name__.endswith("Error"), name
    assert dlcache.FileNotFound is dlcache.DlcacheFileNotFoundError
    assert dlcache.PermissionDenied is dlcache.DlcachePermissionError
    assert issubclass(dlcache.DlcacheFileNotFoundError, FileNotFoundError)
    assert issubclass(dlcache.DlcachePermissionError, PermissionError)
    ns = {}
    exec("from dlcache import *", ns)
    assert "FileNotFoundError" not in ns and "PermissionError" not in ns, \
        "a star import does not shadow the builtins"


def test_dir_lists_the_lazy_names():
    names = dir(dlcache)
    for n in ("Loader", "write", "Store", "WriteReport", "build", "info"):
        assert n in names, n


@pytest.fixture(scope="module")
def ten(tmp_path_factory):
    p = tmp_path_factory.mktemp("ten") / "ten.dlc"
    dlcache.write([{"i": i, "name": "r%d" % i} for i in range(10)], p, progress=False)
    return p


def test_store_takes_slices(ten):
    with dlcache.Store(ten) as st:
        ids = lambda rs: [r["i"] for r in rs]  # noqa: E731
        assert ids(st[2:5]) == [2, 3, 4]
        assert ids(st[::2]) == [0, 2, 4, 6, 8]
        assert ids(st[-3:]) == [7, 8, 9] and ids(st[::-3]) == [9, 6, 3, 0]
        assert ids(st[5:100]) == [5, 6, 7, 8, 9] and st[7:2] == []
        assert st[-1]["i"] == 9 and st[-10]["i"] == 0 and st[3]["name"] == b"r3"
        assert isinstance(st[2:3], list) and isinstance(st[2], dict)
        import numpy as np
        assert st[np.int64(4)]["i"] == 4
        for bad in (10, -11, 2**40):
            with pytest.raises(IndexError):
                st[bad]
        with pytest.raises(TypeError):
            st["3"]
        with pytest.raises(TypeError):
            st[1.0]


def test_py_typed_marker_is_in_the_package_and_the_wheel():
    assert os.path.isfile(os.path.join(PKG, "py.typed"))
    sys.path.insert(0, os.path.join(REPO, "python", "_backend"))
    try:
        import dlcache_backend
    finally:
        sys.path.pop(0)
    assert "dlcache/py.typed" in [arc for _, arc in dlcache_backend._package_files()]
    with open(os.path.join(REPO, "cmake", "install.cmake")) as f:
        assert '"py.typed"' in f.read(), "make install copies it too"


# ---- 5: messages ------------------------------------------------------------------------------

def test_a_missing_path_is_named_once(tmp_path):
    p = str(tmp_path / "nope.dlc")
    for call in (dlcache.info, dlcache.Store):
        with pytest.raises(FileNotFoundError) as e:
            call(p)
        assert str(e.value).count("nope.dlc") == 1, str(e.value)
        assert str(e.value) == "%s: No such file or directory" % p


def test_random_bytes_are_not_called_a_version(tmp_path):
    p = tmp_path / "junk.dlc"
    p.write_bytes(bytes((i * 2654435761 >> 13) & 0xFF for i in range(64 * 1024)))
    with pytest.raises(dlcache.VersionError) as e:
        dlcache.info(p)
    text = str(e.value)
    assert "not a dlcache store" in text and "version" not in text, text
    assert text.count("junk.dlc") == 1, text


def test_a_store_of_another_version_says_so(ten, tmp_path):
    """A real store of a newer format stays a VersionError that names the version."""
    data = bytearray(ten.read_bytes())
    at = data.find(b"DLCSTORE")
    assert at >= 0
    data[at + 8] ^= 0x01  # the format version, 2 -> 3
    p = tmp_path / "newer.dlc"
    p.write_bytes(bytes(data))
    with pytest.raises(dlcache.VersionError, match=r"format version 3, this library reads"):
        dlcache.info(p)


def test_strict_build_does_not_say_skipped(demo_dir, tmp_path):
    src = tree_with_a_bad_file(demo_dir, tmp_path)
    run = subprocess.run([tool("cachebuild"), str(src), "-o", str(tmp_path / "s.dlc"),
                          "--strict", "--size", "32", "--threads", "1"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "000bad.jpg" in run.stderr, run.stderr
    assert "skipped" not in run.stderr, run.stderr
    # dlcache.build(strict=True) logs no skip either: the DecodeError names the file.
    code = ("import logging, dlcache\n"
            "logging.basicConfig(level=logging.DEBUG)\n"
            "try:\n"
            "    dlcache.build(%r, 'o.dlc', size=32, threads=1, strict=True)\n"
            "except dlcache.DecodeError as e:\n"
            "    print('refused:', e)\n" % str(src))
    run = run_python(code, tmp_path)
    assert "refused:" in run.stdout and "000bad.jpg" in run.stdout, run.stdout + run.stderr
    assert "skipped" not in run.stderr, run.stderr


# ---- 6: dlc_errmsg() --------------------------------------------------------------------------

def _errmsg_doc():
    with open(os.path.join(REPO, "include", "dlcache", "status.h")) as f:
        text = f.read()
    return re.search(r"/\*\*((?:(?!\*/).)*)\*/\s*DLC_API const char \*dlc_errmsg", text,
                     re.S).group(1)


def test_errmsg_header_promises_what_the_code_does(ten, tmp_path):
    """status.h promised "" after a call that recorded nothing, but a success leaves the
    message of an earlier failure (the code does not clear it on the hot paths): the header
    now says that the message is meaningful after a failure only. What it still promises: a
    failure records its own detail, which the Python exception carries."""
    doc = " ".join(_errmsg_doc().replace("*", " ").split())
    assert "when the last call recorded nothing" not in doc
    assert "need not clear it" in doc and "after a failure only" in doc
    from dlcache._lib import lib
    with pytest.raises(FileNotFoundError, match="first-missing"):
        dlcache.info(tmp_path / "first-missing.dlc")
    with dlcache.Store(ten) as st:
        assert st[1]["i"] == 1  # successes in between
        # As documented: not cleared by a success (this is not a promise of a stale text,
        # only that the header says what happens).
        assert isinstance(lib.dlc_errmsg(), bytes)
        r = ctypes.c_void_p()
        assert lib.dlc_store_reader_open(st._st.h, ctypes.byref(r)) == 0
        from dlcache import _lib as L
        values = (L.Value * len(st.fields))()
        rc = lib.dlc_store_read_values(r, 12, values)
        lib.dlc_store_reader_close(r)
    e = errors.error_for(rc)
    assert isinstance(e, dlcache.NotFoundError) and "record 12" in e.detail, e.detail
    assert "first-missing" not in str(e)


# ---- 7: docs ----------------------------------------------------------------------------------

def test_python_doc_names_only_loader_attributes_that_exist():
    pytest.importorskip("torch")
    with open(os.path.join(REPO, "docs", "PYTHON.md")) as f:
        doc = f.read()
    # The inference rule of the label names the Loader's attributes about labels (elsewhere
    # "the Loader's `crop`" means its argument).
    row = next(line for line in doc.splitlines() if line.startswith("| an int field named"))
    named = re.findall(r"the Loader's `(\w+)`(?: and `(\w+)`)?", row)
    named = [n for pair in named for n in pair if n]
    assert named and "labels" not in named, row
    for name in named:
        assert hasattr(dlcache.Loader, name), "docs/PYTHON.md: Loader has no %r" % name


def test_readme_and_python_doc_make_the_venv_alike():
    """Both make the venv from /usr/bin/python3 (the Python that has Debian's torch), with
    --system-site-packages so that the venv sees it, and the README says why."""
    for doc in ("README.md", os.path.join("docs", "PYTHON.md")):
        with open(os.path.join(REPO, doc)) as f:
            text = f.read()
        uses = re.findall(r"(\S+) -m venv( --system-site-packages)?", text)
        assert uses, doc
        assert all(u == ("`/usr/bin/python3", " --system-site-packages") or
                   u == ("/usr/bin/python3", " --system-site-packages") for u in uses), \
            (doc, uses)
    with open(os.path.join(REPO, "README.md")) as f:
        readme = " ".join(f.read().split())
    assert "torch and numpy, which are installed for `/usr/bin/python3` only" in readme
