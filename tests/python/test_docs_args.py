"""docs/LOADER_ARGS.md is the one table of every Loader argument: it must follow the signature.

Each parameter of ``dlcache.Loader`` has a row ``| `name` | type | default | meaning |`` whose
default is the signature's (``required`` for those without one), and no row names an argument
the Loader does not take. A new argument without its row fails here.
"""
import inspect
import os
import re

import dlcache

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "LOADER_ARGS.md")
ROW = re.compile(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \| ([^|]*) \| ([^|]*) \| (.+) \|$")


def _rows():
    rows = {}
    with open(DOC, encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line.rstrip("\n"))
            if m:
                name, typ, default, meaning = (g.strip() for g in m.groups())
                assert name not in rows, "LOADER_ARGS.md lists %s twice" % name
                rows[name] = (typ, default, meaning)
    return rows


def _params():
    sig = inspect.signature(dlcache.Loader)
    assert "batch_size" in sig.parameters, "inspect.signature(dlcache.Loader) is %s" % sig
    return {n: p for n, p in sig.parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def test_every_argument_has_a_row_with_its_default():
    rows, params = _rows(), _params()
    missing = sorted(set(params) - set(rows))
    assert not missing, "arguments without a row in docs/LOADER_ARGS.md: %s" % missing
    for name, p in params.items():
        _, default, meaning = rows[name]
        assert meaning, name
        if p.default is inspect.Parameter.empty:
            assert default == "required", (name, default)
        else:
            want = {"`%r`" % (p.default,)}
            if isinstance(p.default, str):
                want.add('`"%s"`' % p.default)
            assert default in want, \
                "docs/LOADER_ARGS.md gives %s the default %s; the signature has %r" % (
                    name, default, p.default)


def test_no_row_for_an_argument_the_loader_does_not_take():
    extra = sorted(set(_rows()) - set(_params()))
    assert not extra, "docs/LOADER_ARGS.md lists arguments the Loader does not take: %s" % extra


def test_the_signature_in_python_md_is_the_loaders():
    """docs/PYTHON.md prints the Loader's signature and says it is every argument: the names in
    its order, with the signature's defaults (it had fallen 20 arguments behind)."""
    with open(os.path.join(os.path.dirname(DOC), "PYTHON.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"```python\ndlcache\.Loader\((.*?)\)\n```", text, re.S)
    assert m, "docs/PYTHON.md has no ```python dlcache.Loader(...) block"
    shown = [a.strip() for a in " ".join(m.group(1).split()).split(",")]
    shown = [a for a in shown if a != "*"]
    want = []
    for name, p in _params().items():
        if p.default is inspect.Parameter.empty:
            want.append(name)
        elif isinstance(p.default, str):
            want.append('%s="%s"' % (name, p.default))
        else:
            want.append("%s=%r" % (name, p.default))
    assert shown == want, "docs/PYTHON.md's signature differs: %s" % (
        [(a, b) for a, b in zip(shown, want) if a != b] or (len(shown), len(want)))
