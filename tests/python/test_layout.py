"""The ctypes structures of the binding match the C headers byte for byte.

A small C program compiled against include/dlcache prints sizeof and offsetof
of every struct the binding mirrors; any difference (a header changed and
python/dlcache/_lib.py did not follow) would make the binding read or write
the wrong bytes, so it fails here first.

Likewise the DLC_ERRORS list of include/dlcache/status.h (names, values,
texts) is parsed and compared with dlcache.errors (every code, its value, its
exception class) and with dlc_strerror() of the loaded library."""

import ctypes
import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO, require_lib

require_lib()

STRUCTS = {
    "dlc_store_info": "StoreInfo",
    "dlc_field": "Field",
    "dlc_value": "Value",
    "dlc_record": "Record",
    "dlc_image": "Image",
    "dlc_field_spec": "FieldSpec",
    "dlc_writer_config": "WriterConfig",
    "dlc_field_option": "FieldOption",
    "dlc_view_spec": "ViewSpec",
    "dlc_batch_field": "BatchField",
    "dlc_verify_progress": "VerifyProgress",
    "dlc_build_progress": "BuildProgress",
    "dlc_build_options": "BuildOptions",
    "dlc_build_skip": "BuildSkip",
    "dlc_build_report": "BuildReport",
    "dlc_build_part": "BuildPart",
    "dlc_set_join_report": "SetJoinReport",
    "dlc_loader_config": "LoaderConfig",
    "dlc_batch": "Batch",
    "dlc_loader_stats": "LoaderStats",
    "dlc_loader_stream_stats": "LoaderStreamStats",
    "dlc_loader_report": "LoaderReport",
    "dlc_loader_plan_info": "LoaderPlanInfo",
    "dlc_mix_source": "MixSource",
    "dlc_mix_options": "MixOptions",
    "dlc_mix_source_info": "MixSourceInfo",
    "dlc_warm_progress": "WarmProgress",
    "dlc_warm_options": "WarmOptions",
    "dlc_device_field": "DeviceField",
    "dlc_device_batch": "DeviceBatch",
    "dlc_device_dst": "DeviceDst",
    "dlc_op_params": "OpParams",
}

# C name: the name of its mirror in dlcache._lib.
CONSTANTS = {
    "DLC_LOADER_STATE_SIZE": "LOADER_STATE_SIZE",
    "DLC_LOADER_MIX_STATE_MAX": "LOADER_MIX_STATE_MAX", "DLC_END": "DLC_END",
    "DLC_AGAIN": "DLC_AGAIN",
    "DLC_ENCODING_RAW": "ENCODING_RAW", "DLC_ENCODING_JPEG": "ENCODING_JPEG",
    "DLC_ENCODING_PNG": "ENCODING_PNG", "DLC_STORE_SEQUENTIAL": "STORE_SEQUENTIAL",
    "DLC_SAMPLER_SEQUENTIAL": "SAMPLER_SEQUENTIAL", "DLC_SAMPLER_SHUFFLE": "SAMPLER_SHUFFLE",
    "DLC_SAMPLER_SHARD_WINDOWS": "SAMPLER_SHARD_WINDOWS",
    "DLC_AUGMENT_CENTER_CROP": "AUGMENT_CENTER_CROP",
    "DLC_AUGMENT_RANDOM_CROP": "AUGMENT_RANDOM_CROP",
    "DLC_AUGMENT_RANDOM_RESIZED_CROP": "AUGMENT_RANDOM_RESIZED_CROP",
    "DLC_DTYPE_UINT8": "DTYPE_UINT8", "DLC_DTYPE_FLOAT32": "DTYPE_FLOAT32",
    "DLC_DTYPE_FLOAT16": "DTYPE_FLOAT16", "DLC_DTYPE_INT8": "DTYPE_INT8",
    "DLC_DTYPE_UINT16": "DTYPE_UINT16", "DLC_DTYPE_INT16": "DTYPE_INT16",
    "DLC_DTYPE_INT32": "DTYPE_INT32", "DLC_DTYPE_INT64": "DTYPE_INT64",
    "DLC_DTYPE_FLOAT64": "DTYPE_FLOAT64",
    "DLC_FIELD_IMAGE": "FIELD_IMAGE", "DLC_FIELD_NDARRAY": "FIELD_NDARRAY",
    "DLC_FIELD_INT": "FIELD_INT", "DLC_FIELD_FLOAT": "FIELD_FLOAT", "DLC_FIELD_BYTES": "FIELD_BYTES",
    "DLC_FIELD_VARIABLE": "FIELD_VARIABLE", "DLC_FIELD_MASK": "FIELD_MASK",
    "DLC_FIELD_BOXES": "FIELD_BOXES", "DLC_FIELD_LABEL": "FIELD_LABEL",
    "DLC_MAX_FIELDS": "MAX_FIELDS", "DLC_MAX_DIMS": "MAX_DIMS", "DLC_NO_FIELD": "NO_FIELD",
    "DLC_LAYOUT_NHWC": "LAYOUT_NHWC", "DLC_LAYOUT_NCHW": "LAYOUT_NCHW",
    "DLC_LAYOUT_NONE": "LAYOUT_NONE", "DLC_VARIABLE_PAD": "VARIABLE_PAD",
    "DLC_VARIABLE_PAD_TO": "VARIABLE_PAD_TO", "DLC_VARIABLE_OFFSETS": "VARIABLE_OFFSETS",
    "DLC_VERIFY_ALWAYS": "VERIFY_ALWAYS", "DLC_CORRUPT_REPLACE": "CORRUPT_REPLACE",
        "DLC_BOUND_MODEL": "BOUND_MODEL", "DLC_BOUND_CPU": "BOUND_CPU",
    "DLC_BOUND_STORAGE": "BOUND_STORAGE", "DLC_BOUND_NETWORK": "BOUND_NETWORK",
    "DLC_BOUND_COPY": "BOUND_COPY", "DLC_BOUND_CONSUMER": "BOUND_CONSUMER",
    "DLC_BOUND_BATCH": "BOUND_BATCH",
    "DLC_IO_DIRECT": "IO_DIRECT", "DLC_LOADER_MAX_PREFETCH": "MAX_PREFETCH",
}


def _c_program():
    from dlcache import _lib as L
    lines = ["#include <dlcache/store.h>", "#include <dlcache/build.h>",
             "#include <dlcache/loader.h>", "#include <dlcache/writer.h>",
             "#include <dlcache/image.h>", "#include <dlcache/set.h>", "#include <dlcache/warm.h>",
             "#include <dlcache/ops.h>",
             "#include <stdio.h>",
             "#include <stddef.h>",
             "int main(void) {"]
    for cname, pyname in STRUCTS.items():
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (cname, cname))
        for field, _ in getattr(L, pyname)._fields_:
            lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));'
                         % (cname, field, cname, field))
    for c in CONSTANTS:
        lines.append('printf("%s %%lld\\n", (long long)(%s));' % (c, c))
    lines += ["return 0;", "}"]
    return "\n".join(lines) + "\n"


def test_structs_match_headers(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to check the struct layouts")
    from dlcache import _lib as L
    src = tmp_path / "layout.c"
    src.write_text(_c_program())
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), str(src), "-o",
                    str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    c_values = {k: int(v) for k, v in (line.rsplit(" ", 1) for line in out.splitlines())}
    py_values = {}
    for cname, pyname in STRUCTS.items():
        cls = getattr(L, pyname)
        py_values["%s sizeof" % cname] = ctypes.sizeof(cls)
        for field, _ in cls._fields_:
            py_values["%s.%s" % (cname, field)] = getattr(cls, field).offset
    py_values.update({c: getattr(L, py) for c, py in CONSTANTS.items()})
    diff = {k: (c_values[k], py_values[k]) for k in c_values if c_values[k] != py_values[k]}
    assert not diff, "C value vs ctypes value: %r" % diff


def _header_errors():
    """The DLC_ERRORS X-macro list of include/dlcache/status.h as
    [(name, value, text)], in the header's order."""
    path = os.path.join(REPO, "include", "dlcache", "status.h")
    with open(path) as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#define DLC_ERRORS(XX)"))
    body = []
    for line in lines[start + 1:]:
        body.append(line.rstrip().rstrip("\\"))
        if not line.rstrip().endswith("\\"):
            break
    body = "\n".join(body)
    entries = [(name, int(value), text.encode().decode("unicode_escape")) for name, value, text
               in re.findall(r'XX\(\s*([A-Z0-9_]+)\s*,\s*(-?\d+)\s*,\s*"((?:[^"\\]|\\.)*)"\s*\)',
                             body)]
    assert entries, "no XX(...) entries in DLC_ERRORS of %s" % path
    assert len(entries) == body.count("XX("), "an entry of DLC_ERRORS was not understood:\n" + body
    return entries


# The class each status.h code is meant to raise, and the builtin exception it
# also is (docs/PYTHON.md, "Errors"). A new code in status.h fails the tests
# until it has its class here and in dlcache/errors.py.
INTENDED = {
    "EINVAL": ("InvalidArgumentError", ValueError),
    "ECORRUPT": ("CorruptError", None),
    "EVERSION": ("VersionError", None),
    "ENOTFOUND": ("NotFoundError", LookupError),
    "EDECODE": ("DecodeError", None),
    "ENOIMAGES": ("NoImagesError", None),
    "EEXIST": ("ExistsError", FileExistsError),
    "EHTTP": ("HTTPError", None),
    "ENETWORK": ("NetworkError", None),
    "ECHANGED": ("ChangedError", None),
    "ECANCELED": ("CanceledError", None),
    "ESTATE": ("StateError", RuntimeError),
    "ECUDA": ("CudaError", None),
    "ENOSYS": ("UnsupportedError", NotImplementedError),
}


def test_error_codes_match_header():
    """dlcache.errors maps exactly the DLC_E* codes of status.h: every name,
    the same values, each to its intended class."""
    from dlcache import errors
    header = _header_errors()
    names = [n for n, _, _ in header]
    values = [v for _, v, _ in header]
    assert len(set(names)) == len(names) and len(set(values)) == len(values), header
    assert all(v <= -1000 for v in values), "dlcache's own codes are <= -1000: %r" % header
    assert set(names) == set(INTENDED), "status.h codes vs this test's INTENDED table"
    assert {n: v for n, v, _ in header} == {n: v for n, (v, _) in errors.CODES.items()}, \
        "status.h (name: value) differs from dlcache.errors.CODES"
    assert set(errors._BY_CODE) == set(values)
    for name, value, _ in header:
        cls = errors._BY_CODE[value]
        want, builtin = INTENDED[name]
        assert cls is getattr(errors, want), "DLC_%s (%d) raises %s, not %s" % (
            name, value, cls.__name__, want)
        assert issubclass(cls, errors.DlcacheError)
        if builtin is not None:
            assert issubclass(cls, builtin), "%s is also a %s" % (want, builtin.__name__)
        assert cls.__doc__.startswith("DLC_" + name), "%s's docstring names DLC_%s" % (want, name)
    assert len(set(errors._BY_CODE.values())) == len(values), "one class per code"


def test_error_texts_match_header():
    """dlc_strerror() of the loaded library gives status.h's texts, and every
    code raised through error_for() carries that text and its class."""
    from dlcache import errors
    from dlcache._lib import lib
    for name, value, text in _header_errors():
        assert lib.dlc_strerror(value).decode() == text, "DLC_%s" % name
        e = errors.error_for(value, context="ctx")
        assert type(e) is getattr(errors, INTENDED[name][0]), "DLC_%s" % name
        assert e.status == value and e.strerror == text and str(e).startswith("ctx: ")
    assert lib.dlc_strerror(0).decode() == "success"
    # Negated errno values: the system's text, an OSError with errno set.
    import errno
    for code, cls in ((errno.ENOENT, errors.FileNotFound),
                      (errno.EACCES, errors.PermissionDenied),
                      (errno.EPERM, errors.PermissionDenied),
                      (errno.ENOSPC, errors.DlcacheOSError)):
        e = errors.error_for(-code)
        assert type(e) is cls and isinstance(e, OSError) and e.errno == code
        assert e.strerror == lib.dlc_strerror(-code).decode() == os.strerror(code)
    # A code this version does not know is still a DlcacheError.
    e = errors.error_for(-1999)
    assert type(e) is errors.DlcacheError and e.strerror == "unknown error"


def test_dtype_names_match_library():
    """The binding's dtype table is the library's: numpy's names, numpy's item sizes."""
    np = pytest.importorskip("numpy")
    from dlcache import _lib as L
    for code, name in enumerate(L.DTYPE_NAMES):
        assert L.lib.dlc_dtype_name(code).decode() == name
        assert L.lib.dlc_dtype_size(code) == np.dtype(name).itemsize
    # After numpy's types, bfloat16: a loader output type only (numpy has none).
    assert L.lib.dlc_dtype_name(L.DTYPE_BFLOAT16).decode() == "bfloat16"
    assert L.lib.dlc_dtype_size(L.DTYPE_BFLOAT16) == 2
    assert L.lib.dlc_dtype_name(L.DTYPE_BFLOAT16 + 1).decode() == "?"


def test_options_init_sets_struct_size():
    """Every options mirror starts with struct_size, which its _init() sets to the library's
    sizeof (status.h, "How structs grow"); the mirror's own sizeof must be that size, or the
    library would take a Python caller for an older or newer header."""
    from dlcache import _lib as L
    for cls, init in ((L.LoaderConfig, "dlc_loader_config_init"),
                      (L.WriterConfig, "dlc_writer_config_init"),
                      (L.BuildOptions, "dlc_build_options_init"),
                      (L.WarmOptions, "dlc_warm_options_init")):
        assert cls._fields_[0] == ("struct_size", ctypes.c_uint32), cls.__name__
        c = cls()
        getattr(L.lib, init)(ctypes.byref(c))
        assert c.struct_size == ctypes.sizeof(cls), cls.__name__
