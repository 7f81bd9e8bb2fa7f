"""The ctypes structures of the binding match the C headers byte for byte.

A small C program compiled against include/dlcache prints sizeof and offsetof
of every struct the binding mirrors; any difference (a header changed and
python/dlcache/_lib.py did not follow) would make the binding read or write
the wrong bytes, so it fails here first."""

import ctypes
import os
import shutil
import subprocess

import pytest

from conftest import REPO, require_lib

require_lib()

STRUCTS = {
    "dlc_store_info": "StoreInfo",
    "dlc_record": "Record",
    "dlc_verify_progress": "VerifyProgress",
    "dlc_build_progress": "BuildProgress",
    "dlc_build_options": "BuildOptions",
    "dlc_build_skip": "BuildSkip",
    "dlc_build_report": "BuildReport",
    "dlc_loader_config": "LoaderConfig",
    "dlc_batch": "Batch",
    "dlc_loader_stats": "LoaderStats",
}

CONSTANTS = ["DLC_LOADER_STATE_SIZE", "DLC_END", "DLC_ENCODING_JPEG", "DLC_STORE_SEQUENTIAL",
             "DLC_SAMPLER_SHUFFLE", "DLC_AUGMENT_RANDOM_RESIZED_CROP", "DLC_DTYPE_FLOAT16",
             "DLC_LAYOUT_NCHW", "DLC_VERIFY_ALWAYS", "DLC_CORRUPT_REPLACE", "DLC_IO_DIRECT"]


def _c_program():
    from dlcache import _lib as L
    lines = ["#include <dlcache/store.h>", "#include <dlcache/build.h>",
             "#include <dlcache/loader.h>", "#include <stdio.h>", "#include <stddef.h>",
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
    py_values.update({
        "DLC_LOADER_STATE_SIZE": L.LOADER_STATE_SIZE, "DLC_END": L.DLC_END,
        "DLC_ENCODING_JPEG": L.ENCODING_JPEG, "DLC_STORE_SEQUENTIAL": L.STORE_SEQUENTIAL,
        "DLC_SAMPLER_SHUFFLE": L.SAMPLER_SHUFFLE,
        "DLC_AUGMENT_RANDOM_RESIZED_CROP": L.AUGMENT_RANDOM_RESIZED_CROP,
        "DLC_DTYPE_FLOAT16": L.DTYPE_FLOAT16, "DLC_LAYOUT_NCHW": L.LAYOUT_NCHW,
        "DLC_VERIFY_ALWAYS": L.VERIFY_ALWAYS, "DLC_CORRUPT_REPLACE": L.CORRUPT_REPLACE,
        "DLC_IO_DIRECT": L.IO_DIRECT,
    })
    diff = {k: (c_values[k], py_values[k]) for k in c_values if c_values[k] != py_values[k]}
    assert not diff, "C value vs ctypes value: %r" % diff


def test_error_codes_match_header():
    """Every DLC_E* code of status.h has its exception class."""
    import re
    from dlcache import errors
    text = open(os.path.join(REPO, "include", "dlcache", "status.h")).read()
    codes = {int(v) for v in re.findall(r"XX\(E[A-Z]+,\s*(-\d+)", text)}
    assert codes, "no DLC_E* codes found in status.h"
    assert codes == set(errors._BY_CODE), "status.h codes differ from dlcache.errors"
