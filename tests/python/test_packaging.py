"""`pip install .` works offline, with the in-tree build backend
(python/_backend/dlcache_backend.py): the wheel is well formed, and in a fresh
venv (--system-site-packages, for Debian's torch) pip installs it with
--no-index, after which the venv's Python, started in another directory with
no DLCACHE_LIB or PYTHONPATH, imports dlcache, builds a store of real JPEGs,
loads a batch, and has the library shipped inside the package mapped, no
other.

Two ways to the library are exercised: a prebuilt one (this build's, named by
DLCACHE_LIB while pip runs: fast) and one built by the backend with CMake from
an sdist (--config-settings build=always; about 10 s on two cores)."""

import hashlib
import base64
import csv
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from conftest import DEMO_COUNT, LIB, REPO, require_lib

require_lib("dlc_build", "dlc_loader_open")

import dlcache  # noqa: E402


def _backend():
    path = os.path.join(REPO, "python", "_backend", "dlcache_backend.py")
    spec = importlib.util.spec_from_file_location("dlcache_backend", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


backend = _backend()


def _header_version():
    """MAJOR.MINOR.PATCH of include/dlcache/version.h, where the version is written."""
    with open(os.path.join(REPO, "include", "dlcache", "version.h")) as f:
        text = f.read()
    return ".".join(re.search(r"#define DLC_VERSION_%s (\d+)" % p, text).group(1)
                    for p in ("MAJOR", "MINOR", "PATCH"))


def test_versions_agree():
    """One version: the header's, the package's, the library's, the wheel's."""
    n = dlcache._clib.dlc_version_number()
    number = "%d.%d.%d" % (n // 10000, n // 100 % 100, n % 100)
    assert dlcache.__version__ == _header_version() == dlcache.version() == number \
        == backend.version()


def test_other_version_refused():
    """A library of another version than the package's is refused, naming both paths and
    versions: the package's struct mirrors were written for its own version."""
    from dlcache import _lib

    class Other:
        path = "/elsewhere/libdlcache.so.1"

        def has(self, name):
            return True

        def dlc_version_number(self):
            return 10203

    with pytest.raises(OSError) as e:
        _lib.check_version(Other())
    msg = str(e.value)
    assert "/elsewhere/libdlcache.so.1 is libdlcache 1.2.3" in msg, msg
    assert os.path.dirname(_lib.__file__) in msg and dlcache.__version__ in msg, msg
    _lib.check_version(dlcache._clib)


def _read_wheel(path):
    with zipfile.ZipFile(path) as z:
        return {i.filename: (z.read(i), i.external_attr >> 16) for i in z.infolist()}


def test_wheel_is_well_formed(tmp_path):
    """build_wheel with a prebuilt library: the package's modules, the library
    as dlcache/libdlcache.so.1, dist-info with METADATA, WHEEL and a RECORD
    whose hashes and sizes are right; the same bytes when built again."""
    name = backend.build_wheel(str(tmp_path / "a"), {"lib": LIB})
    tag = "py3-none-" + backend.platform_tag()
    assert name == "dlcache-%s-%s.whl" % (dlcache.__version__, tag)
    assert re.fullmatch(r"linux_[a-z0-9_]+", backend.platform_tag())
    files = _read_wheel(tmp_path / "a" / name)
    di = "dlcache-%s.dist-info/" % dlcache.__version__

    py = sorted(n for n in os.listdir(os.path.join(REPO, "python", "dlcache"))
                if n.endswith(".py") and n != "_install.py") + ["py.typed"]
    assert sorted(files) == sorted(["dlcache/" + n for n in py] + [
        "dlcache/libdlcache.so.1", di + "METADATA", di + "WHEEL", di + "top_level.txt",
        di + "RECORD"])
    for n in py:
        with open(os.path.join(REPO, "python", "dlcache", n), "rb") as f:
            assert files["dlcache/" + n][0] == f.read(), n
    lib, mode = files["dlcache/libdlcache.so.1"]
    with open(os.path.realpath(LIB), "rb") as f:
        assert lib == f.read(), "the library named by -C lib is the one shipped"
    assert mode & 0o777 == 0o755 and lib[:4] == b"\x7fELF"

    wheel = files[di + "WHEEL"][0].decode()
    assert "Wheel-Version: 1.0\n" in wheel and "Root-Is-Purelib: false\n" in wheel
    assert "Tag: %s\n" % tag in wheel
    meta = files[di + "METADATA"][0].decode()
    head = meta.split("\n\n", 1)[0].splitlines()
    assert head[:3] == ["Metadata-Version: 2.1", "Name: dlcache",
                        "Version: " + dlcache.__version__]
    assert "Provides-Extra: torch" in head
    assert 'Requires-Dist: torch>=1.10; extra == "torch"' in head
    assert not [h for h in head if h.startswith("Requires-Dist:") and "extra ==" not in h], \
        "import dlcache, build() and info() need no other package"
    assert "Description-Content-Type: text/markdown" in head
    assert meta.split("\n\n", 1)[1].startswith("# dlcache")

    rows = list(csv.reader(io.StringIO(files[di + "RECORD"][0].decode())))
    assert sorted(r[0] for r in rows) == sorted(files)
    for path, digest, size in rows:
        if path == di + "RECORD":
            assert digest == size == ""
            continue
        data = files[path][0]
        want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == "sha256=" + want and int(size) == len(data), path

    md = tmp_path / "md"
    d = backend.prepare_metadata_for_build_wheel(str(md))
    assert d + "/" == di and (md / d / "METADATA").read_bytes() == files[di + "METADATA"][0]

    again = backend.build_wheel(str(tmp_path / "b"), {"lib": LIB})
    assert (tmp_path / "b" / again).read_bytes() == (tmp_path / "a" / name).read_bytes()


def test_library_that_does_not_load_is_refused(tmp_path, monkeypatch):
    """An explicit library that does not load is an error, not a silent
    fallback; found ones that do not load are passed over."""
    bad = tmp_path / "libdlcache.so"
    bad.write_bytes(b"not a library")
    monkeypatch.delenv("DLCACHE_LIB", raising=False)
    with pytest.raises(RuntimeError, match="does not load"):
        backend.find_library({"lib": str(tmp_path)})
    monkeypatch.setenv("DLCACHE_LIB", str(tmp_path / "missing.so"))
    with pytest.raises(RuntimeError, match="DLCACHE_LIB=.*no such file"):
        backend.find_library()
    assert backend._usable(str(bad), "test") is False
    assert backend._usable(LIB, "test") is True
    with pytest.raises(RuntimeError, match="build=sometimes"):
        backend.build_wheel(str(tmp_path), {"build": "sometimes"})


def test_sdist(tmp_path):
    name = backend.build_sdist(str(tmp_path))
    base = "dlcache-%s" % dlcache.__version__
    assert name == base + ".tar.gz"
    with tarfile.open(tmp_path / name) as t:
        names = set(t.getnames())
        pkg_info = t.extractfile(base + "/PKG-INFO").read().decode()
    for f in ("PKG-INFO", "pyproject.toml", "CMakeLists.txt", "include/dlcache/status.h",
              "python/_backend/dlcache_backend.py", "python/dlcache/__init__.py",
              "cache/builder/build_run.c"):
        assert "%s/%s" % (base, f) in names, f
    assert all(n.startswith(base + "/") for n in names)
    # Build folders sit at the root of the tree (build/, build-asan/); cache/builder/ is source.
    assert not [n for n in names if re.search(r"^[^/]+/build[^/]*/|__pycache__|\.pyc$|\.dlc$", n)]
    assert pkg_info == backend.metadata()


# ------------------------------------------------------------ pip in a venv

CHECK = r"""
import json, os, sys
import dlcache
out = {"file": dlcache.__file__, "lib": dlcache.library_path, "version": dlcache.version()}
out["count"] = dlcache.build(sys.argv[1], sys.argv[2], size=32, threads=2).count
if sys.argv[3] == "torch":
    with dlcache.Loader(sys.argv[2], batch_size=8, crop=24, dtype="float32", threads=2) as ld:
        x, y = next(iter(ld))
        out["shape"], out["labels"] = list(x.shape), len(y)
with open("/proc/self/maps") as f:
    out["maps"] = sorted({l.split()[-1] for l in f if "libdlcache" in l})
print(json.dumps(out))
"""


def _have_torch():
    return importlib.util.find_spec("torch") is not None


def _env(**extra):
    """The environment pip and the venv's Python run in: nothing that would
    point them at this tree or an index."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DLCACHE_LIB", "DLCACHE_BUILD_DIR", "PYTHONPATH", "PYTHONHOME",
                        "VIRTUAL_ENV") and not k.startswith("PIP_")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
               PIP_CONFIG_FILE=os.devnull)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv that sees the system's packages (Debian's torch), with pip."""
    d = tmp_path_factory.mktemp("venv") / "v"
    r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(d)],
                       capture_output=True, text=True, env=_env())
    if r.returncode != 0:
        msg = (r.stdout + r.stderr).strip()
        if "ensurepip" in msg or "No module named venv" in msg:
            pytest.skip("venv with pip is unavailable (Debian: python3-venv): " + msg[-300:])
        pytest.fail("python3 -m venv failed:\n" + msg)
    py = d / "bin" / "python"
    if subprocess.run([str(py), "-m", "pip", "--version"], capture_output=True).returncode:
        pytest.skip("the venv has no pip (Debian: python3-venv, python3-pip)")
    return d


def _pip(venv, *args, env):
    """pip install ARGS into the venv, in place of whatever dlcache it had.
    (Not --force-reinstall: that reinstalls the dependencies too, and torch
    cannot be fetched offline.)"""
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", "dlcache"],
                   capture_output=True, env=env, cwd=str(venv))
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index",
                        "--no-cache-dir", "-v"] + list(args),
                       capture_output=True, text=True, env=env, cwd=str(venv))
    assert r.returncode == 0, "pip install failed:\n%s\n%s" % (r.stdout[-6000:], r.stderr[-4000:])
    return r.stdout + r.stderr


def _check(venv, demo_dir, tmp_path):
    """Run CHECK with the venv's Python in an unrelated directory."""
    work = tmp_path / "elsewhere"
    work.mkdir()
    r = subprocess.run([str(venv / "bin" / "python"), "-c", CHECK, str(demo_dir),
                        str(work / "s.dlc"), "torch" if _have_torch() else "-"],
                       capture_output=True, text=True, env=_env(), cwd=str(work))
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["count"] == DEMO_COUNT and out["version"] == dlcache.__version__
    if _have_torch():
        assert out["shape"] == [8, 3, 24, 24] and out["labels"] == 8
    return out


def _installed(venv, out):
    """The package is the venv's, and so is the only libdlcache in the process."""
    pkg = os.path.dirname(out["file"])
    assert os.path.realpath(pkg).startswith(os.path.realpath(str(venv)) + os.sep), out
    assert os.path.basename(pkg) == "dlcache" and "site-packages" in pkg, out
    assert out["lib"] == os.path.join(pkg, "libdlcache.so.1"), out
    assert out["maps"] == [out["lib"]], "exactly the package's library is mapped: %r" % out
    return out["lib"]


def test_pip_install_prebuilt_library(venv, demo_dir, tmp_path):
    """pip install --no-index '.[torch]' with DLCACHE_LIB naming this build:
    that library is shipped; torch comes from the system's site-packages."""
    spec = REPO + ("[torch]" if _have_torch() else "")
    log = _pip(venv, spec, env=_env(DLCACHE_LIB=LIB))
    assert "using the library of DLCACHE_LIB" in log
    if _have_torch():
        assert re.search(r"Requirement already satisfied: torch>=1\.10 in /", log)
    lib = _installed(venv, _check(venv, demo_dir, tmp_path))
    with open(lib, "rb") as a, open(os.path.realpath(LIB), "rb") as b:
        assert a.read() == b.read()


def test_pip_install_sdist_builds_with_cmake(venv, demo_dir, tmp_path):
    """From an sdist (no build/ inside) with build=always: the backend runs
    CMake (Release, no tests, only the library) and ships what it built."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    sdist = tmp_path / "sdist"
    name = backend.build_sdist(str(sdist))
    log = _pip(venv, "--config-settings", "build=always",
               str(sdist / name), env=_env())
    assert "building libdlcache with CMake" in log
    assert "-DCMAKE_BUILD_TYPE=Release -DDLCACHE_TESTS=OFF" in log and "--target dlcache" in log
    assert "-S %s " % REPO not in log, "built from the unpacked sdist, not this tree"
    _installed(venv, _check(venv, demo_dir, tmp_path))


def test_pip_install_editable(venv, tmp_path):
    """pip install -e: a .pth naming python/; the package is used in place and
    finds its library as in the source tree (here through DLCACHE_LIB)."""
    _pip(venv, "-e", REPO, env=_env(DLCACHE_LIB=LIB))
    code = "import dlcache; print(dlcache.__file__); print(dlcache.library_path)"
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True,
                       text=True, env=_env(DLCACHE_LIB=LIB), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    f, lib = r.stdout.split()
    assert f == os.path.join(REPO, "python", "dlcache", "__init__.py")
    assert lib == os.path.normpath(LIB)
