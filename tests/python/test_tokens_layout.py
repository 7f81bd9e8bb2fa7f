"""The ctypes mirrors of include/dlcache/tokens.h (python/dlcache/tokens.py) match the header
byte for byte, as tests/python/test_layout.py checks the other headers' structs."""
import ctypes
import os
import shutil
import subprocess

import pytest

from conftest import REPO, require_lib

require_lib()

from dlcache import tokens as T  # noqa: E402

STRUCTS = {"dlc_tokens_info": T.TokensInfo, "dlc_token_writer_config": T.TokenWriterConfig,
           "dlc_token_loader_config": T.TokenLoaderConfig, "dlc_token_batch": T.TokenBatch}


def test_token_structs_match_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    lines = ["#include <dlcache/tokens.h>", "#include <stdio.h>", "#include <stddef.h>",
             "int main(void) {"]
    for cname, cls in STRUCTS.items():
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (cname, cname))
        for field, _ in cls._fields_:
            lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (cname, field, cname,
                                                                        field))
    lines.append('printf("DLC_TOKEN_MIX_STATE_SIZE64 %zu\\n", '
                 '(size_t)DLC_TOKEN_MIX_STATE_SIZE(64));')
    lines += ["return 0;", "}"]
    (tmp_path / "l.c").write_text("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), str(tmp_path / "l.c"),
                    "-o", str(tmp_path / "l")], check=True)
    out = subprocess.run([str(tmp_path / "l")], check=True, capture_output=True,
                         text=True).stdout
    c = {k: int(v) for k, v in (line.rsplit(" ", 1) for line in out.splitlines())}
    py = {"DLC_TOKEN_MIX_STATE_SIZE64": 72 + 40 * 64 + 8}
    for cname, cls in STRUCTS.items():
        py["%s sizeof" % cname] = ctypes.sizeof(cls)
        for field, _ in cls._fields_:
            py["%s.%s" % (cname, field)] = getattr(cls, field).offset
    assert {k: (c[k], py[k]) for k in c if c[k] != py[k]} == {}
