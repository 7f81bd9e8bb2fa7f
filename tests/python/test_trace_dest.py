"""A trace destination that is not a regular file (issue 32, item 7): Loader(trace=...) and
$DLCACHE_TRACE naming a FIFO, or (as root) a character device made with mknod like /dev/null,
are refused at open, naming the path and what it is; the node stays what it was and nothing is
left beside it. The real /dev/null is never a target here."""

import os
import stat

import pytest

from conftest import require_lib

require_lib("dlc_loader_open")

import dlcache  # noqa: E402


def _nodes(tmp_path):
    """(path, kind, test) of the nodes this machine lets us make."""
    out = []
    fifo = tmp_path / "fifo" / "trace.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    out.append((fifo, "a FIFO", stat.S_ISFIFO))
    dev = tmp_path / "dev" / "null"
    dev.parent.mkdir()
    try:
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        out.append((dev, "a character device", stat.S_ISCHR))
    except PermissionError:
        pass  # not root: the FIFO stands for every node
    return out


@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_trace_that_is_not_a_regular_file_is_refused(store, tmp_path, monkeypatch, how):
    for path, kind, is_kind in _nodes(tmp_path):
        kw = {}
        if how == "option":
            kw["trace"] = str(path)
        else:
            monkeypatch.setenv("DLCACHE_TRACE", str(path))
        with pytest.raises(ValueError) as ei:
            with dlcache.Loader(store, 8, crop=8, threads=1, **kw) as ld:
                next(iter(ld))
        assert str(path) in str(ei.value) and kind in str(ei.value), str(ei.value)
        assert is_kind(os.lstat(path).st_mode), "%s is no longer %s" % (path, kind)
        assert os.listdir(path.parent) == [path.name], os.listdir(path.parent)


def test_a_regular_trace_file_is_replaced(store, tmp_path):
    path = tmp_path / "trace.json"
    path.write_text("old")
    with dlcache.Loader(store, 8, crop=8, threads=1, trace=str(path)) as ld:
        next(iter(ld))
    assert path.read_text().startswith("{")
    assert os.listdir(tmp_path) == ["trace.json"]
