"""Issue 32, item 1 and 6: every lock wait of the stream cache and of cachewarm is bounded, ends
on close() and on Ctrl-C, and names the lock file and its holder. The holders are real processes
(a child that takes the flock and sleeps); the streamed set is served by the s3rver of
test_stream.py. Each call runs in a child process with a generous bound (60 s): a hang is a
failure, not a hung session; no assertion measures a speed."""

import fcntl
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import LIB, REPO, require_lib, tool

require_lib("dlc_loader_open")

from test_stream import local_set, s3, url  # noqa: E402,F401  (fixtures: the s3rver and its set)

BOUND = 60  # seconds a child may take before it counts as hung

# A child that holds an flock on each path given until it is killed; prints "held" once it has.
_HOLDER = r"""
import fcntl, os, sys, time
fds = []
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    fds.append(fd)
print("held", flush=True)
time.sleep(3600)
"""


def _env():
    return dict(os.environ, DLCACHE_LIB=LIB, PYTHONPATH=os.path.join(REPO, "python"))


def _default_sigint():
    # The child's Ctrl-C is Python's own, whatever the test runner's parent ignores (a
    # background job of a non-interactive shell starts with SIGINT ignored).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class Holder:
    """A real process holding flock(LOCK_EX) on @p paths."""

    def __init__(self, *paths):
        self.p = subprocess.Popen([sys.executable, "-c", _HOLDER] + [str(p) for p in paths],
                                  stdout=subprocess.PIPE, text=True)
        assert self.p.stdout.readline().strip() == "held"
        self.pid = self.p.pid

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.p.kill()
        self.p.wait()


def _run(src, *args, sigint_after=None, timeout=BOUND, argv=None):
    """Run @p src in a child (or the command @p argv); with @p sigint_after, send it SIGINT that
    many seconds after it printed "waiting". Returns (returncode, stdout, stderr); a child that
    does not end within @p timeout fails the test."""
    if argv is None:
        argv = [sys.executable, "-c", src] + [str(a) for a in args]
    child = subprocess.Popen(argv, env=_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_default_sigint)
    try:
        if sigint_after is not None:
            line = child.stdout.readline().strip()
            assert line == "waiting", (line, child.stderr.read()[-2000:])
            time.sleep(sigint_after)
            child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        pytest.fail("the child did not end within %d s (a lock wait that never ends): %s"
                    % (timeout, err[-2000:]))
    return child.returncode, out, err


_OPEN = r"""
import sys, threading, time
import dlcache
url, cache, endpoint, timeout = sys.argv[1:5]
def loader():
    return dlcache.Loader(url, cache_dir=cache, cache_ranks=1, endpoint=endpoint, batch_size=4,
                          crop=32, window_shards=2, threads=2, timeout=float(timeout), retries=1)
"""

_OPEN_CHILD = _OPEN + r"""
print("waiting", flush=True)
try:
    ld = loader()
    print("opened", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
except dlcache.DlcacheError as e:
    print("error", e, flush=True)
"""


def test_open_ends_when_another_process_holds_the_cache_lock(url, s3, tmp_path):
    """Before: Loader() waited in its constructor for as long as the lock was held."""
    cache = tmp_path / "c"
    cache.mkdir()
    with Holder(cache / ".dlcs.lock") as h:
        rc, out, err = _run(_OPEN_CHILD, url, cache, s3, 2)
    assert rc == 0, err[-2000:]
    assert out.splitlines()[-1].startswith("error"), out
    assert ".dlcs.lock" in out and "process %d" % h.pid in out, out


def test_ctrl_c_ends_an_open_waiting_for_the_cache_lock(url, s3, tmp_path):
    """Ctrl-C in the constructor while the lock is held (the lock's bound, 300 s, is past the
    child's): KeyboardInterrupt. Before: the constructor was deaf to Ctrl-C."""
    cache = tmp_path / "c"
    cache.mkdir()
    with Holder(cache / ".dlcs.lock"):
        rc, out, err = _run(_OPEN_CHILD, url, cache, s3, 300, sigint_after=2)
    assert rc == 0, err[-2000:]
    assert out.splitlines()[-1] == "interrupted", out + err[-2000:]


_NEXT_CHILD = _OPEN + r"""
ld = loader()
print("opened", flush=True)
sys.stdin.readline()  # the parent takes the lock
print("waiting", flush=True)
try:
    for _ in ld:
        pass
    print("epoch")
except KeyboardInterrupt:
    print("interrupted", flush=True)
except dlcache.DlcacheError as e:
    print("error", e, flush=True)
t = time.monotonic()
ld.close()
print("closed", flush=True)
"""


@pytest.mark.parametrize("timeout,sigint", [(2, None), (300, 2)])
def test_open_loader_ends_when_the_cache_lock_is_taken(url, s3, tmp_path, timeout, sigint):
    """The lock taken after the open: next() ends with the error naming the lock file and its
    holder (timeout 2 s) or with KeyboardInterrupt (timeout 300 s, Ctrl-C), and close() returns.
    Before: next() and close() waited for as long as the lock was held."""
    cache = tmp_path / "c"
    child = subprocess.Popen([sys.executable, "-c", _NEXT_CHILD, url, str(cache), s3,
                              str(timeout)], env=_env(), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_default_sigint)
    holder = None
    try:
        line = child.stdout.readline().strip()
        assert line == "opened", (line, child.stderr.read()[-2000:])
        holder = Holder(cache / ".dlcs.lock")
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "waiting"
        if sigint:
            time.sleep(sigint)
            child.send_signal(signal.SIGINT)
        try:
            out, err = child.communicate(timeout=BOUND)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
            pytest.fail("next() or close() did not end with the lock held: %s" % err[-2000:])
    finally:
        if holder is not None:
            holder.__exit__()
        if child.poll() is None:
            child.kill()
            child.wait()
    lines = out.splitlines()
    assert lines[-1] == "closed", out + err[-2000:]
    if sigint:
        assert lines[-2] == "interrupted", out
    else:
        # A download that got the lock before the holder may have delivered some batches.
        assert lines[-2].startswith("error"), out
        assert ".dlcs.lock" in lines[-2] and "process %d" % holder.pid in lines[-2], out


def _set_folder(url, s3, cache):
    """Open and close a loader on @p cache so that the set's folder exists; its path."""
    rc, out, err = _run(_OPEN + "loader().close()\n", url, cache, s3, 30)
    assert rc == 0, err[-2000:]
    sub = [d for d in os.listdir(cache) if len(d) == 16]
    assert len(sub) == 1, os.listdir(cache)
    return cache / sub[0]


def test_a_planted_locked_temporary_file_ends_the_wait_for_its_shard(local_set, url, s3,
                                                                     tmp_path):
    """Every shard's NAME.PID.dlcs-tmp made and locked by a process that never writes it (a
    planted file, or a sibling job stopped with Ctrl-Z mid-download): next() waits for that
    "download elsewhere" only as long as timeout x (retries + 1) without a change, then fails
    naming the file and its holder. Before: it waited for as long as the lock was held."""
    cache = tmp_path / "c"
    folder = _set_folder(url, s3, cache)
    names = [f for f in os.listdir(local_set) if f.endswith(".dlc")]
    tmps = [folder / ("%s.999999.dlcs-tmp" % n) for n in names]
    with Holder(*tmps) as h:
        rc, out, err = _run(_NEXT_CHILD.replace("sys.stdin.readline()", "pass"), url, cache, s3,
                            1)
    assert rc == 0, err[-2000:]
    lines = out.splitlines()
    assert lines[-1] == "closed" and lines[-2].startswith("error"), out + err[-2000:]
    assert ".dlcs-tmp" in lines[-2] and "process %d" % h.pid in lines[-2], out


_CTRL_C_TMP_CHILD = _OPEN + r"""
ld = loader()
it = iter(ld)
print("waiting", flush=True)
try:
    next(it)
    print("batch", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
ld.close()
print("closed", flush=True)
"""


def test_ctrl_c_ends_a_wait_for_a_download_elsewhere(local_set, url, s3, tmp_path):
    """Issue 32, item 6: Ctrl-C while next() waits for a shard another process is downloading
    (a locked temporary file; the wait's own bound, 600 s, is past the child's) ends the wait,
    and close() returns."""
    cache = tmp_path / "c"
    folder = _set_folder(url, s3, cache)
    names = [f for f in os.listdir(local_set) if f.endswith(".dlc")]
    with Holder(*[folder / ("%s.999999.dlcs-tmp" % n) for n in names]):
        rc, out, err = _run(_CTRL_C_TMP_CHILD, url, cache, s3, 300, sigint_after=2)
    assert rc == 0, err[-2000:]
    assert out.splitlines()[-2:] == ["interrupted", "closed"], out + err[-2000:]


def test_ctrl_c_ends_an_open_waiting_for_a_download_elsewhere(s3, tmp_path):
    """Issue 32, item 6: the open checks each shard the index says is empty (it downloads it);
    when another process is downloading it (a locked temporary file, whose bound of 300 x 2 s is
    past the child's), Ctrl-C ends the constructor's wait. Before: only close() ended a wait
    for a shard, and a constructor has no close()."""
    src = tmp_path / "src"
    r = subprocess.run([tool("mkdemo"), str(src), "--count", "3", "--seed", "3"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    small = tmp_path / "set"
    r = subprocess.run([tool("cachebuild"), str(src / "train"), "-o", str(small), "--shards", "5",
                        "--size", "32"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    set_url = "s3://b/sets/with-empty"
    r = subprocess.run([tool("cachewarm"), "push", str(small), set_url, "--endpoint", s3, "-q"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    folder = _set_folder(set_url, s3, tmp_path / "first")
    cache = tmp_path / "c"
    (cache / folder.name).mkdir(parents=True)
    names = [f for f in os.listdir(small) if f.endswith(".dlc")]
    with Holder(*[cache / folder.name / ("%s.999999.dlcs-tmp" % n) for n in names]):
        rc, out, err = _run(_OPEN_CHILD, set_url, cache, s3, 300, sigint_after=2)
    assert rc == 0, err[-2000:]
    assert out.splitlines()[-1] == "interrupted", out + err[-2000:]


# ---- cachewarm's DEST.lock -------------------------------------------------------------------
# The lock is taken before anything is fetched: no server is needed (nothing listens at the URL).

def test_cachewarm_gives_up_on_a_lock_held_without_work(tmp_path):
    """DEST.lock held by a process that does not download (no heartbeat): cachewarm waits
    timeout x (retries + 1) seconds, then fails naming DEST.lock and its holder. Before: it
    waited for as long as the lock was held, whatever --timeout said."""
    dest = tmp_path / "store.dlc"
    with Holder(str(dest) + ".lock") as h:
        rc, out, err = _run(None, argv=[tool("cachewarm"), "http://127.0.0.1:9/store.dlc",
                                        "-o", str(dest), "--timeout", "1", "--retries", "1"])
    assert rc != 0
    assert "store.dlc.lock" in err and "process %d" % h.pid in err, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cachewarm_waiting_for_a_lock_ends_on_a_signal(tmp_path, sig):
    """SIGINT and SIGTERM end cachewarm's wait for DEST.lock (its bound, 300 s x 2, is past the
    test's). Before: both were ignored while it waited."""
    dest = tmp_path / "store.dlc"
    with Holder(str(dest) + ".lock"):
        p = subprocess.Popen([tool("cachewarm"), "http://127.0.0.1:9/store.dlc", "-o", str(dest),
                              "--timeout", "300", "--retries", "1"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
        try:
            time.sleep(2)  # let it find the lock taken and wait
            assert p.poll() is None, p.communicate()
            p.send_signal(sig)
            out, err = p.communicate(timeout=BOUND)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            pytest.fail("cachewarm did not end on %s while waiting for the lock" % sig.name)
    assert p.returncode != 0, out + err
    assert "cancel" in err.lower() or "interrupt" in err.lower(), err


# ---- A disk with less free space than the set, and no cache_limit ----------------------------

_EPOCH_CHILD = r"""
import sys
import dlcache
url, cache, endpoint = sys.argv[1:4]
with dlcache.Loader(url, cache_dir=cache, cache_ranks=1, endpoint=endpoint, batch_size=4,
                    prefetch=2, crop=32, seed=5, window_shards=2, streams=2, threads=2,
                    timeout=30, retries=2) as ld:
    n = sum(len(b[1]) for b in ld)
    print("records", n, "evictions", ld.stream_stats()["evictions"], flush=True)
"""


def _windows_need(url, s3, tmp_path):
    """The bytes the plan of _EPOCH_CHILD's loader pins at once."""
    import dlcache
    return dlcache.plan(url, 4, window_shards=2, streams=2, world_size=1, cache_ranks=1,
                        cache_dir=str(tmp_path / "plan"), endpoint=s3)["cache_needed_bytes"]


def _epoch_on_tmpfs(url, s3, tmp_path, size):
    """_EPOCH_CHILD's (rc, stdout, stderr), its cache on a tmpfs of @p size bytes and no
    cache_limit; skips where mounting one is not permitted."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size, "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here: %s" % r.stderr.strip())
    try:
        return _run(_EPOCH_CHILD, url, mnt / "c", s3)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_disk_smaller_than_the_set_works_as_a_limit(local_set, url, s3, tmp_path):
    """Issue 32: no cache_limit, on a disk (a tmpfs) with room for the plan's windows but not for
    the set: the epoch completes, evicting as a limit of what is free would, and the log says so
    once. Before: 'cannot reserve N bytes: No space left on device' mid-epoch, for a temporary
    file named without its folder."""
    need = _windows_need(url, s3, tmp_path)
    set_bytes = sum(os.path.getsize(os.path.join(local_set, f)) for f in os.listdir(local_set))
    size = need + (1 << 20)
    if size >= set_bytes:
        pytest.skip("the set (%d bytes) is not larger than its windows need (%d)"
                    % (set_bytes, need))
    rc, out, err = _epoch_on_tmpfs(url, s3, tmp_path, size)
    assert rc == 0, err[-2000:]
    words = out.split()
    assert words[:1] == ["records"] and int(words[1]) > 0 and int(words[3]) > 0, out + err
    assert err.count("no cache_limit, and the disk has") == 1, err[-2000:]


def test_a_disk_too_small_for_the_plan_is_named_not_other_processes(local_set, url, s3,
                                                                     tmp_path):
    """No cache_limit, on a disk (a tmpfs) with room for less than the plan's windows: the epoch
    fails naming the disk's free bytes and what to change. Before: it blamed 'other processes
    sharing the folder' and 'the cache's limit of 0 bytes', with no other process there."""
    need = _windows_need(url, s3, tmp_path)
    biggest = max(os.path.getsize(os.path.join(local_set, f)) for f in os.listdir(local_set)
                  if f.endswith(".dlc"))
    size = biggest + (256 << 10)
    if size >= need:
        pytest.skip("the windows (%d bytes) are not much larger than a shard (%d)"
                    % (need, biggest))
    rc, out, err = _epoch_on_tmpfs(url, s3, tmp_path, size)
    assert rc != 0, out + err[-2000:]
    assert "the disk holding the cache has had too little free" in err, err[-2000:]
    assert "window_shards" in err and "limit of 0" not in err, err[-2000:]
    assert "cache_ranks" not in err and "OSError" in err, err[-2000:]


def test_fifos_planted_at_the_shard_names_do_not_hold_the_loader(local_set, url, s3, tmp_path):
    """A co-tenant replaces the shards of a set being read with FIFOs once the Loader is open:
    each is refused as not a regular file and downloaded again over it, and the epoch ends.
    Before: the open of a FIFO blocked under the cache-wide lock, and next() and close() with
    it, for ever."""
    cache = tmp_path / "c"
    folder = _set_folder(url, s3, cache)
    names = [f for f in os.listdir(local_set) if f.endswith(".dlc")]
    child = subprocess.Popen([sys.executable, "-c", _NEXT_CHILD, url, str(cache), s3, "2"], env=_env(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    try:
        assert child.stdout.readline().strip() == "opened", child.stderr.read()[-2000:]
        for n in names:
            p = folder / n
            if os.path.lexists(p):
                os.unlink(p)
            os.mkfifo(p)
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=BOUND)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        pytest.fail("the loader hung on a FIFO at a shard's name: %s" % err[-2000:])
    assert child.returncode == 0, err[-2000:]
    assert out.splitlines()[-2:] == ["epoch", "closed"], out + err[-2000:]
