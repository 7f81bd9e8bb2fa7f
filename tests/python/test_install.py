"""`cmake --install` into a temp prefix gives a working layout: the Python
package imports from the configured dist-packages under PREFIX and loads the installed
library (not the build tree's), pkg-config and find_package(dlcache) compile
and link a C program against it."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import BUILD, require_lib

require_lib()


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    if not os.path.isfile(os.path.join(BUILD, "cmake_install.cmake")):
        pytest.skip("%s has no install rules (configure it with cmake first)" % BUILD)
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not installed")
    p = tmp_path_factory.mktemp("prefix")
    r = subprocess.run([cmake, "--install", BUILD, "--prefix", str(p)], capture_output=True,
                       text=True)
    assert r.returncode == 0, "cmake --install %s failed:\n%s%s" % (BUILD, r.stdout, r.stderr)
    return p


def _pydir(prefix):
    """Where the build put the Python package: DLCACHE_PYTHON_DIR, which `make
    install` sets per prefix (lib/python3/dist-packages or lib/python3.X/...)."""
    with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith("DLCACHE_PYTHON_DIR:"):
                return os.path.join(prefix, line.split("=", 1)[1].strip())
    return os.path.join(prefix, "lib", "python3", "dist-packages")


def _libdir(prefix):
    for d in ("lib", os.path.join("lib", "x86_64-linux-gnu"), "lib64"):
        if os.path.exists(os.path.join(prefix, d, "libdlcache.so")):
            return os.path.join(prefix, d)
    pytest.fail("no libdlcache.so under %s" % prefix)


def test_layout(prefix):
    libdir = _libdir(prefix)
    for f in ("include/dlcache/status.h", "include/dlcache/loader.h"):
        assert os.path.isfile(os.path.join(prefix, f)), f
    for f in ("dlcache/__init__.py", "dlcache/_install.py"):
        assert os.path.isfile(os.path.join(_pydir(prefix), f)), f
    assert os.path.isfile(os.path.join(libdir, "pkgconfig", "dlcache.pc"))
    assert os.path.isfile(os.path.join(libdir, "cmake", "dlcache", "dlcacheConfig.cmake"))
    for t in ("cachebuild", "cacheinfo", "mkdemo"):
        if os.path.exists(os.path.join(BUILD, "bin", t)):
            assert os.access(os.path.join(prefix, "bin", t), os.X_OK), t


def test_installed_package_uses_installed_library(prefix, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DLCACHE_LIB", "PYTHONPATH")}
    env["PYTHONPATH"] = _pydir(prefix)
    code = "import dlcache, sys; print(dlcache.__file__); print(dlcache.library_path); " \
           "print(dlcache.version())"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(tmp_path),
                         check=True, capture_output=True, text=True).stdout.split("\n")
    assert out[0].startswith(str(prefix)), out
    assert os.path.realpath(out[1]).startswith(os.path.realpath(str(prefix))), out
    assert out[2].count(".") == 2


C_PROGRAM = textwrap.dedent("""\
    #include <dlcache/status.h>
    #include <stdio.h>
    #include <string.h>
    int main(void) {
        printf("%s|%u|%d|%s\\n", dlc_version(), (unsigned)dlc_version_number(),
               DLC_VERSION_NUMBER, dlc_strerror(DLC_ECORRUPT));
        return strcmp(dlc_strerror(DLC_ECORRUPT), "corrupt data") != 0;
    }
    """)


def test_pkg_config(prefix, tmp_path):
    pc = shutil.which("pkg-config")
    cc = shutil.which("cc")
    if not pc or not cc:
        pytest.skip("pkg-config or cc missing")
    libdir = _libdir(prefix)
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"))
    flags = subprocess.run([pc, "--cflags", "--libs", "dlcache"], env=env, check=True,
                           capture_output=True, text=True).stdout.split()
    assert "-I%s/include" % prefix in flags and "-ldlcache" in flags
    (tmp_path / "v.c").write_text(C_PROGRAM)
    subprocess.run([cc, str(tmp_path / "v.c"), "-o", str(tmp_path / "v")] + flags, check=True)
    # No LD_LIBRARY_PATH: outside /usr the .pc file's Libs carry an rpath to the prefix.
    env.pop("LD_LIBRARY_PATH", None)
    run = subprocess.run([str(tmp_path / "v")], env=env, check=True, capture_output=True,
                         text=True)
    assert run.stdout.endswith("|corrupt data\n")
    version, number, header_number, _ = run.stdout.split("|")
    assert number == header_number == "%d" % (int(version.split(".")[0]) * 10000
                                             + int(version.split(".")[1]) * 100
                                             + int(version.split(".")[2])), run.stdout


def test_find_package(prefix, tmp_path):
    cmake = shutil.which("cmake")
    src = tmp_path / "proj"
    src.mkdir()
    (src / "v.c").write_text(C_PROGRAM)
    (src / "CMakeLists.txt").write_text(textwrap.dedent("""\
        cmake_minimum_required(VERSION 3.16)
        project(uses_dlcache C)
        find_package(dlcache 1.0 REQUIRED)
        add_executable(v v.c)
        target_link_libraries(v PRIVATE dlcache::dlcache)
        """))
    bld = tmp_path / "b"
    subprocess.run([cmake, "-S", str(src), "-B", str(bld), "-DCMAKE_PREFIX_PATH=%s" % prefix],
                   check=True, capture_output=True)
    subprocess.run([cmake, "--build", str(bld)], check=True, capture_output=True)
    run = subprocess.run([str(bld / "v")], check=True, capture_output=True, text=True)
    assert run.stdout.endswith("|corrupt data\n")
