"""PEP 517 / PEP 660 build backend of dlcache, written with the standard library only.

`pip install .` runs it (pyproject.toml: requires = [], backend-path =
["python/_backend"]), so an offline machine needs no setuptools or wheel in
pip's isolated build environment, and nothing is fetched.

The wheel holds python/dlcache/*.py and, next to them, libdlcache.so.1 (the
library's SONAME), which dlcache/_lib.py loads before anything but
$DLCACHE_LIB. The library put into the wheel is the first of:

1. ``-C lib=PATH`` or ``$DLCACHE_LIB`` (a file, or a directory holding
   libdlcache.so): an explicit choice, so an error if it is missing or does not
   load;
2. the source tree's build/lib (what ``make build`` made);
3. an installed one: ``pkg-config --variable=libdir dlcache``, then ``ldconfig -p``;
4. otherwise one built here: ``cmake -S . -B <temporary directory>
   -DCMAKE_BUILD_TYPE=Release -DDLCACHE_TESTS=OFF`` and ``cmake --build
   --target dlcache`` (the temporary directory is removed afterwards).

A found library (2, 3) is used only if it loads in a fresh Python process and
its dlc_version() is this package's version, so a stale build, a build for
another machine or a sanitizer build (which cannot be loaded without its
runtime) is passed over and the library is built instead.

Config settings (``pip install -C KEY=VALUE .``):

``lib=PATH``        as $DLCACHE_LIB;
``build=auto``      the order above (the default); ``always``: build with CMake
                    even when a library is found; ``never``: fail instead of building;
``build-dir=DIR``   build in DIR and keep it (a rebuild is then incremental).

The wheel is tagged py3-none-<platform> (linux_x86_64): the Python code is the
same for every Python 3, the library is for this platform. It links the
system's liblmdb, libturbojpeg, liburing, libxxhash and libcurl, so it is for
machines that have those installed, like the one that built it.

build_sdist packs the source tree (the files git tracks or would track, or the
whole tree but build output without git); a wheel built from it builds the
library with CMake unless one is found as above. build_editable installs a .pth
naming python/: the package is then used in place and finds its library as in
the source tree ($DLCACHE_LIB, build/lib, the system), nothing is copied.
"""

import base64
import csv
import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

__all__ = [
    "get_requires_for_build_wheel", "prepare_metadata_for_build_wheel", "build_wheel",
    "get_requires_for_build_sdist", "build_sdist",
    "get_requires_for_build_editable", "prepare_metadata_for_build_editable", "build_editable",
]

# python/_backend/dlcache_backend.py -> the root of the source tree.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = "dlcache"
PACKAGE_DIR = os.path.join(ROOT, "python", PACKAGE)
SONAME = "libdlcache.so.1"

# ------------------------------------------------------------------ metadata


def _pyproject():
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        try:
            import tomli as tomllib
        except ImportError:
            raise RuntimeError("dlcache's build backend reads pyproject.toml with tomllib "
                               "(Python 3.11 or newer) or the tomli package") from None
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def version():
    """__version__ of python/dlcache/_version.py, read without importing the package
    (importing it would load the library)."""
    with open(os.path.join(PACKAGE_DIR, "_version.py"), encoding="utf-8") as f:
        m = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", f.read(), re.M)
    if not m:
        raise RuntimeError("no __version__ in %s" % os.path.join(PACKAGE_DIR, "_version.py"))
    return m.group(1)


# The [project] keys this backend turns into core metadata. Any other key is an
# error rather than silently left out of the wheel.
_KNOWN = {"name", "version", "dynamic", "description", "readme", "requires-python",
          "license", "keywords", "classifiers", "urls", "dependencies",
          "optional-dependencies"}


def metadata():
    """The METADATA (core metadata 2.1) text of [project] in pyproject.toml."""
    project = _pyproject()["project"]
    unknown = sorted(set(project) - _KNOWN)
    if unknown:
        raise RuntimeError("pyproject.toml [project]: dlcache_backend does not handle %s"
                           % ", ".join(unknown))
    if project.get("name") != PACKAGE:
        raise RuntimeError("pyproject.toml [project] name must be %r" % PACKAGE)
    if "version" in project or "version" not in project.get("dynamic", []):
        raise RuntimeError("pyproject.toml: the version is dynamic (dlcache.__version__)")
    lines = ["Metadata-Version: 2.1", "Name: " + PACKAGE, "Version: " + version()]
    if project.get("description"):
        lines.append("Summary: " + project["description"])
    if project.get("keywords"):
        lines.append("Keywords: " + ",".join(project["keywords"]))
    lic = project.get("license")
    if isinstance(lic, dict) and "text" in lic:
        lines.append("License: " + lic["text"])
    elif isinstance(lic, dict) and "file" in lic:
        with open(os.path.join(ROOT, lic["file"]), encoding="utf-8") as f:
            lines.append("License: " + f.read().strip().replace("\n", "\n       "))
    for c in project.get("classifiers", []):
        lines.append("Classifier: " + c)
    for label, url in project.get("urls", {}).items():
        lines.append("Project-URL: %s, %s" % (label, url))
    if project.get("requires-python"):
        lines.append("Requires-Python: " + project["requires-python"])
    for req in project.get("dependencies", []):
        lines.append("Requires-Dist: " + req)
    for extra, reqs in project.get("optional-dependencies", {}).items():
        lines.append("Provides-Extra: " + extra)
        for req in reqs:
            spec, _, marker = req.partition(";")
            marker = marker.strip()
            cond = 'extra == "%s"' % extra
            lines.append("Requires-Dist: %s; %s" % (
                spec.strip(), "(%s) and %s" % (marker, cond) if marker else cond))
    body = ""
    readme = project.get("readme")
    if readme:
        path = readme if isinstance(readme, str) else readme["file"]
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            body = f.read()
        ctype = ("text/markdown" if path.endswith(".md") else
                 "text/x-rst" if path.endswith(".rst") else "text/plain")
        if isinstance(readme, dict) and readme.get("content-type"):
            ctype = readme["content-type"]
        lines.append("Description-Content-Type: " + ctype)
    text = "\n".join(lines) + "\n"
    return text + ("\n" + body if body else "")


def _dist_info():
    return "%s-%s.dist-info" % (PACKAGE, version())


def _wheel_text(tag, purelib):
    return ("Wheel-Version: 1.0\nGenerator: dlcache_backend %s\nRoot-Is-Purelib: %s\nTag: %s\n"
            % (version(), "true" if purelib else "false", tag))


def platform_tag():
    """This interpreter's platform as a wheel tag: linux-x86_64 -> linux_x86_64."""
    return re.sub(r"[^A-Za-z0-9_]", "_", sysconfig.get_platform())


def _write_metadata_dir(directory, tag, purelib):
    d = os.path.join(directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as f:
        f.write(metadata())
    with open(os.path.join(d, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(_wheel_text(tag, purelib))
    return os.path.basename(d)


# ------------------------------------------------------------ the library


def _log(msg):
    print("dlcache_backend: " + msg, file=sys.stderr, flush=True)


def _setting(config_settings, key, default=None):
    value = (config_settings or {}).get(key, default)
    if isinstance(value, list):  # pip passes a repeated -C KEY=... as a list
        value = value[-1]
    return value


_PROBE = ("import ctypes, sys\n"
          "f = ctypes.CDLL(sys.argv[1]).dlc_version\n"
          "f.restype = ctypes.c_char_p\n"
          "print(f().decode())\n")


def library_version(path):
    """dlc_version() of the library at @p path, loaded in a fresh Python process
    (so a library that cannot load, or crashes, cannot take the build down);
    raises RuntimeError saying why when it does not load."""
    r = subprocess.run([sys.executable, "-c", _PROBE, path], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        err = (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]
        raise RuntimeError("%s does not load: %s" % (path, err))
    return r.stdout.strip()


def _usable(path, why):
    """True when @p path loads and is this version; says why not otherwise."""
    try:
        v = library_version(path)
    except RuntimeError as e:
        _log("not using %s (%s): %s" % (path, why, e))
        return False
    if v != version():
        _log("not using %s (%s): version %s, this package is %s" % (path, why, v, version()))
        return False
    return True


def _system_candidates():
    """Installed copies: pkg-config's libdir, then the dynamic linker's cache."""
    out = []
    pc = shutil.which("pkg-config")
    if pc:
        r = subprocess.run([pc, "--variable=libdir", "dlcache"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            out.append(os.path.join(r.stdout.strip(), SONAME))
    ldconfig = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(p, os.X_OK)), None)
    if ldconfig:
        r = subprocess.run([ldconfig, "-p"], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            name, _, target = line.strip().partition(" => ")
            if name.split(" ")[0] == SONAME and target:
                out.append(target.strip())
    return out


def find_library(config_settings=None):
    """(path, how) of an already built libdlcache to put into the wheel, or None."""
    explicit = _setting(config_settings, "lib") or os.environ.get("DLCACHE_LIB")
    if explicit:
        src = "-C lib" if _setting(config_settings, "lib") else "DLCACHE_LIB"
        path = os.path.join(explicit, "libdlcache.so") if os.path.isdir(explicit) else explicit
        if not os.path.isfile(path):
            raise RuntimeError("%s=%s: no such file; unset it or point it at libdlcache.so"
                               % (src, explicit))
        v = library_version(path)
        if v != version():
            raise RuntimeError("%s=%s is libdlcache %s, this package is %s"
                               % (src, explicit, v, version()))
        return path, src
    tree = os.path.join(ROOT, "build", "lib", "libdlcache.so")
    if os.path.isfile(tree) and _usable(tree, "build/lib"):
        return tree, "build/lib"
    for path in _system_candidates():
        if os.path.isfile(path) and _usable(path, "installed"):
            return path, "installed"
    return None


def _run(cmd):
    _log("$ " + " ".join(cmd))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stderr.write(r.stdout)
    if r.returncode != 0:
        tail = "\n".join(r.stdout.splitlines()[-30:])
        raise RuntimeError(
            "building libdlcache failed (`%s` exited with %d):\n%s\n\nA missing build "
            "dependency? `make deps` (as root) installs them. Or build the library yourself "
            "(make build), or point DLCACHE_LIB at one, and run pip again."
            % (" ".join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd[:3])),
               r.returncode, tail))


def build_library(build_dir):
    """Configure and build only the shared library in @p build_dir; its path."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("libdlcache is not built and cmake is not installed: install "
                           "cmake and the build dependencies (make deps), or build the "
                           "library (make build) or point DLCACHE_LIB at one")
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    _run([cmake, "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
          "-DDLCACHE_TESTS=OFF"])
    _run([cmake, "--build", build_dir, "--target", "dlcache", "-j", jobs])
    path = os.path.join(build_dir, "lib", "libdlcache.so")
    if not os.path.isfile(path):
        raise RuntimeError("cmake built no %s" % path)
    return path


# ------------------------------------------------------------------ archives


def _date_time():
    """Timestamp of every archive member: $SOURCE_DATE_EPOCH, else 1980-01-01,
    so that the same inputs give the same bytes."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        return max(time.gmtime(int(epoch))[:6], (1980, 1, 1, 0, 0, 0))
    return (1980, 1, 1, 0, 0, 0)


def _record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
        b"=").decode("ascii")


class _WheelWriter:
    """A .whl: members added with their RECORD line; RECORD written last."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.rows = []
        self.date_time = _date_time()

    def add(self, arcname, data, mode=0o644):
        if isinstance(data, str):
            data = data.encode("utf-8")
        zi = zipfile.ZipInfo(arcname, date_time=self.date_time)
        zi.external_attr = (0o100000 | mode) << 16  # a regular file, with its permissions
        zi.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(zi, data)
        self.rows.append((arcname, _record_hash(data), str(len(data))))

    def close(self, record):
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerows(self.rows + [(record, "", "")])
        zi = zipfile.ZipInfo(record, date_time=self.date_time)
        zi.external_attr = (0o100644) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(zi, buf.getvalue().encode("utf-8"))
        self.zip.close()


def _package_files():
    """python/dlcache/*.py and the py.typed marker (PEP 561: type checkers read
    the package's annotations), sorted; not _install.py (written by `make
    install` for its prefix) nor any library copy lying there."""
    names = sorted(n for n in os.listdir(PACKAGE_DIR)
                   if (n.endswith(".py") and n != "_install.py") or n == "py.typed")
    return [(os.path.join(PACKAGE_DIR, n), "%s/%s" % (PACKAGE, n)) for n in names]


def _write_wheel(wheel_directory, tag, purelib, members):
    """members: (arcname, bytes, mode). Returns the wheel's file name."""
    name = "%s-%s-%s.whl" % (PACKAGE, version(), tag)
    dist_info = _dist_info()
    os.makedirs(wheel_directory, exist_ok=True)
    path = os.path.join(wheel_directory, name)
    tmp = path + ".part"
    w = _WheelWriter(tmp)
    try:
        for arcname, data, mode in members:
            w.add(arcname, data, mode)
        w.add(dist_info + "/METADATA", metadata())
        w.add(dist_info + "/WHEEL", _wheel_text(tag, purelib))
        w.add(dist_info + "/top_level.txt", PACKAGE + "\n")
        w.close(dist_info + "/RECORD")
    except BaseException:
        w.zip.close()
        os.unlink(tmp)
        raise
    os.replace(tmp, path)
    return name


# ------------------------------------------------------------ PEP 517 hooks


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _write_metadata_dir(metadata_directory, "py3-none-" + platform_tag(), False)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _write_metadata_dir(metadata_directory, "py3-none-any", True)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    mode = _setting(config_settings, "build", "auto")
    if mode not in ("auto", "always", "never"):
        raise RuntimeError("-C build=%s: use auto, always or never" % mode)
    found = None if mode == "always" else find_library(config_settings)
    tmpdir = None
    try:
        if found:
            lib, how = found
            _log("using the library of %s: %s" % (how, lib))
        elif mode == "never":
            raise RuntimeError("no built libdlcache found (DLCACHE_LIB, build/lib, the "
                               "system) and -C build=never")
        else:
            build_dir = _setting(config_settings, "build-dir")
            if build_dir:
                build_dir = os.path.abspath(build_dir)
            else:
                build_dir = tmpdir = tempfile.mkdtemp(prefix="dlcache-build-")
            _log("building libdlcache with CMake in %s" % build_dir)
            lib = build_library(build_dir)
            if library_version(lib) != version():
                raise RuntimeError("the library built in %s is not version %s"
                                   % (build_dir, version()))
        with open(os.path.realpath(lib), "rb") as f:
            lib_bytes = f.read()
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
    members = []
    for path, arcname in _package_files():
        with open(path, "rb") as f:
            members.append((arcname, f.read(), 0o644))
    members.append(("%s/%s" % (PACKAGE, SONAME), lib_bytes, 0o755))
    return _write_wheel(wheel_directory, "py3-none-" + platform_tag(), False, members)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    python_dir = os.path.join(ROOT, "python")
    if not os.path.isfile(os.path.join(ROOT, "build", "lib", "libdlcache.so")) and not any(
            os.path.isfile(p) for p in _system_candidates()):
        _log("warning: no build/lib/libdlcache.so and none installed: `import dlcache` "
             "will fail until `make build` (or with DLCACHE_LIB set)")
    members = [("__editable__.%s-%s.pth" % (PACKAGE, version()), python_dir + "\n", 0o644)]
    return _write_wheel(wheel_directory, "py3-none-any", True, members)


# Never into a source distribution: build output, data sets, stores.
_SDIST_SKIP_DIRS = re.compile(r"^(build[^/]*|demo-data|fuzz-out|node_modules|\.git|\.gl)(/|$)"
                              r"|(^|/)(__pycache__|\.pytest_cache|\.mypy_cache|\.venv)(/|$)")
_SDIST_SKIP_FILES = re.compile(r"\.(pyc|dlc|whl)$|\.dlc\.(tmp-.*|lock)$")


def _source_files():
    """Relative paths of the source tree: what git tracks or would track (not
    ignored), or without git every file but build output and data."""
    files = None
    if os.path.isdir(os.path.join(ROOT, ".git")) and shutil.which("git"):
        r = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], capture_output=True)
        if r.returncode == 0:
            files = [p.decode() for p in r.stdout.split(b"\0") if p]
    if files is None:
        files = []
        for d, dirs, names in os.walk(ROOT):
            rel = os.path.relpath(d, ROOT)
            rel = "" if rel == "." else rel + "/"
            dirs[:] = [x for x in dirs if not _SDIST_SKIP_DIRS.search(rel + x)]
            files += [rel + n for n in names]
    return sorted(p for p in set(files)
                  if not _SDIST_SKIP_DIRS.search(p) and not _SDIST_SKIP_FILES.search(p)
                  and os.path.lexists(os.path.join(ROOT, p)))


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (PACKAGE, version())
    name = base + ".tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    path = os.path.join(sdist_directory, name)
    mtime = max(int(os.environ.get("SOURCE_DATE_EPOCH") or 0), 315532800)  # >= 1980-01-01

    def norm(ti):
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        ti.mtime = mtime
        if ti.isfile():
            ti.mode = 0o755 if ti.mode & 0o111 else 0o644
        return ti

    # gzip's header holds a time too: the same one, not the current one.
    with open(path + ".part", "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        pkg_info = metadata().encode("utf-8")
        ti = norm(tarfile.TarInfo(base + "/PKG-INFO"))
        ti.size, ti.mode = len(pkg_info), 0o644
        tar.addfile(ti, io.BytesIO(pkg_info))
        for rel in _source_files():
            full = os.path.join(ROOT, rel)
            ti = norm(tar.gettarinfo(full, arcname="%s/%s" % (base, rel)))
            if ti.isfile():
                with open(full, "rb") as f:
                    tar.addfile(ti, f)
            elif ti.issym():
                tar.addfile(ti)
    os.replace(path + ".part", path)
    return name
