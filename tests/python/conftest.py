"""Shared setup of the Python tests: where the build is, and one demo data set
and store per session (built in a temp dir with build/bin/mkdemo and
dlcache.build, removed at the end).

The build directory is $DLCACHE_BUILD_DIR, else the parent of $DLCACHE_LIB's
folder, else the repository's build/. Without its lib/libdlcache.so every
test module skips with that reason (pytest then exits 0, not 5)."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _build_dir():
    if os.environ.get("DLCACHE_BUILD_DIR"):
        return os.path.abspath(os.environ["DLCACHE_BUILD_DIR"])
    lib = os.environ.get("DLCACHE_LIB")
    if lib:
        lib = os.path.abspath(lib)
        libdir = lib if os.path.isdir(lib) else os.path.dirname(lib)
        return os.path.dirname(libdir)
    return os.path.join(REPO, "build")


BUILD = _build_dir()
LIB = os.path.join(BUILD, "lib", "libdlcache.so")
BIN = os.path.join(BUILD, "bin")
HAVE_LIB = os.path.isfile(LIB)

# Test this tree's package against this build's library, whatever the caller's
# environment says.
if os.path.join(REPO, "python") not in sys.path:
    sys.path.insert(0, os.path.join(REPO, "python"))
if HAVE_LIB:
    os.environ["DLCACHE_LIB"] = LIB


def require_lib(*symbols):
    """Skip the calling test module when the library (or one of @p symbols,
    i.e. a part of it) is not built."""
    if not HAVE_LIB:
        pytest.skip("%s is missing: build the project first (make build)" % LIB,
                    allow_module_level=True)
    import dlcache
    missing = [s for s in symbols if not dlcache._lib.lib.has(s)]
    if missing:
        pytest.skip("%s lacks %s (that part is not built)" % (LIB, ", ".join(missing)),
                    allow_module_level=True)


def tool(name):
    path = os.path.join(BIN, name)
    if not os.access(path, os.X_OK):
        pytest.skip("%s is missing: build the project first (make build)" % path)
    return path


# Small enough to build in seconds on two busy cores, large enough for
# several batches, shuffles that differ and uneven shards.
DEMO_COUNT = 150
DEMO_CLASSES = 5
STORE_SIZE = 64


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory):
    """An ImageFolder tree of real JPEGs: DIR/train/<class>/*.jpg."""
    out = tmp_path_factory.mktemp("demo")
    subprocess.run([tool("mkdemo"), str(out), "--count", str(DEMO_COUNT), "--classes",
                    str(DEMO_CLASSES), "--threads", "2"], check=True,
                   stdout=subprocess.DEVNULL)
    return out / "train"


@pytest.fixture(scope="session")
def store(demo_dir, tmp_path_factory):
    """A raw store of demo_dir, center-cropped to STORE_SIZE."""
    import dlcache
    path = tmp_path_factory.mktemp("store") / "demo.dlc"
    dlcache.build(str(demo_dir), str(path), size=STORE_SIZE, threads=2)
    return path
