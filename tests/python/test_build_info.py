"""dlcache.build() and dlcache.info() over the C builder and store reader."""

import os
import subprocess

import pytest

from conftest import DEMO_CLASSES, DEMO_COUNT, STORE_SIZE, require_lib, tool

require_lib("dlc_build", "dlc_store_open")

import dlcache  # noqa: E402


def test_info_of_session_store(store, demo_dir):
    i = dlcache.info(store)
    assert i.count == DEMO_COUNT and i.num_labels == DEMO_CLASSES
    assert (i.height, i.width, i.channels) == (STORE_SIZE, STORE_SIZE, 3)
    assert i.encoding == "raw" and i.format_version == 2
    assert sum(i.label_counts) == DEMO_COUNT
    assert i.classes == sorted(os.listdir(demo_dir))
    assert i.payload_bytes == DEMO_COUNT * STORE_SIZE * STORE_SIZE * 3
    assert i.file_bytes == os.path.getsize(store)
    assert not i.verified
    assert dlcache.info(store, verify=True).verified
    # The schema of cachebuild's stores: a fixed image and the label.
    assert (i.image_field, i.label_field) == ("image", "label")
    image, label = i.fields
    assert (image["name"], image["kind"], image["dtype"], image["encoding"]) == \
        ("image", "image", "uint8", "raw")
    assert image["shape"] == (STORE_SIZE, STORE_SIZE, 3) and not image["variable"]
    assert (label["name"], label["kind"], label["dtype"], label["label"]) == \
        ("label", "int", "int64", True)


def test_build_report_progress_and_jpeg(demo_dir, tmp_path):
    seen = []
    out = tmp_path / "j.dlc"
    r = dlcache.build(str(demo_dir), out, size=48, encoding="jpeg", quality=80, threads=2,
                      progress=lambda p: seen.append(p))
    assert r.count == DEMO_COUNT and r.skipped == 0 and r.skips == []
    assert r.file_bytes == os.path.getsize(out) and r.images_per_s > 0
    i = dlcache.info(out)
    assert i.encoding == "jpeg" and i.content_digest == r.content_digest
    assert all(p["done"] <= p["total"] for p in seen)
    # Same sources, same options: same content whatever the thread count.
    r1 = dlcache.build(str(demo_dir), tmp_path / "j1.dlc", size=48, encoding="jpeg",
                       quality=80, threads=1)
    assert r1.content_digest == r.content_digest


def test_build_matches_cachebuild(demo_dir, store, tmp_path):
    """The binding builds the same store content as the command-line tool."""
    out = tmp_path / "cli.dlc"
    subprocess.run([tool("cachebuild"), str(demo_dir), "-o", str(out), "--size",
                    str(STORE_SIZE)], check=True, capture_output=True)
    assert dlcache.info(out).content_digest == dlcache.info(store).content_digest


def many_images(demo_dir, tmp_path, copies=12):
    """An ImageFolder of links to the demo images, large enough that a
    one-thread build outlasts the first progress call (after 0.1 s)."""
    src = tmp_path / "many"
    for cls in sorted(os.listdir(demo_dir)):
        (src / cls).mkdir(parents=True)
        for name in os.listdir(demo_dir / cls):
            for k in range(copies):
                os.symlink(demo_dir / cls / name, src / cls / ("%d_%s" % (k, name)))
    return src


def test_build_cancel_leaves_no_store(demo_dir, tmp_path):
    out = tmp_path / "c.dlc"
    calls = []
    with pytest.raises(dlcache.CanceledError):
        dlcache.build(many_images(demo_dir, tmp_path), out, size=32, threads=1,
                      progress=lambda p: calls.append(p) or True)
    assert len(calls) == 1 and calls[0]["done"] < calls[0]["total"]
    assert not out.exists()
    assert not [f for f in os.listdir(tmp_path) if f.startswith("c.dlc")]


def test_build_keyboard_interrupt_in_callback(demo_dir, tmp_path):
    def boom(p):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        dlcache.build(many_images(demo_dir, tmp_path), tmp_path / "k.dlc", size=32, threads=1,
                      progress=boom)
    assert not (tmp_path / "k.dlc").exists()


def test_skipped_file_is_reported(demo_dir, tmp_path):
    src = tmp_path / "src"
    cls = src / "a"
    cls.mkdir(parents=True)
    some = sorted(os.listdir(demo_dir / os.listdir(demo_dir)[0]))[:3]
    for n in some:
        os.symlink(demo_dir / os.listdir(demo_dir)[0] / n, cls / n)
    (cls / "zz_broken.jpg").write_bytes(b"\xff\xd8\xff garbage")
    r = dlcache.build(src, tmp_path / "s.dlc", size=32)
    assert r.count == 3 and r.skipped == 1
    assert r.skips[0][0].endswith("zz_broken.jpg") and r.skips[0][1]
    with pytest.raises(dlcache.DecodeError, match="zz_broken.jpg"):
        dlcache.build(src, tmp_path / "t.dlc", size=32, strict=True)


def test_version():
    v = dlcache.version()
    assert v.count(".") == 2 and os.path.isfile(dlcache.library_path)


@pytest.mark.parametrize("sig,status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_stops_cachebuild_cleanly(demo_dir, tmp_path, sig, status):
    """SIGINT and SIGTERM, sent once the build's temporary file exists, stop cachebuild with
    128 + the signal, "interrupted", no temporary file, and the old store as it was.
    (tests/e2e/build_kill.sh sends SIGINT after a quarter of a measured build, which a fast
    machine finishes first; this one waits for the build to be under way.)"""
    import glob
    import signal
    import time
    out = tmp_path / "s.dlc"
    subprocess.run([tool("cachebuild"), str(demo_dir), "-o", str(out), "--size", "16"],
                   check=True, capture_output=True)
    before = dlcache.info(out, verify=True).content_digest
    p = subprocess.Popen([tool("cachebuild"), str(many_images(demo_dir, tmp_path, 24)), "-o",
                          str(out), "--size", "160", "--threads", "1", "--force"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not glob.glob(str(out) + ".tmp-*") and p.poll() is None and \
            time.monotonic() < deadline:
        time.sleep(0.002)
    p.send_signal(getattr(signal, sig))
    _, err = p.communicate(timeout=120)
    assert not glob.glob(str(out) + ".tmp-*"), "a temporary file was left"
    if p.returncode == 0:
        pytest.skip("the build finished before %s reached it" % sig)
    assert p.returncode == status, err
    assert "interrupted; %s was not written" % out in err, err
    assert dlcache.info(out, verify=True).content_digest == before, "the old store changed"


def test_strict_stops_at_a_folder_the_scan_cannot_search(demo_dir, tmp_path):
    """A folder deeper than the scan goes (64) was a warning, and --strict built a store
    without its images, saying 0 skipped; a strict build stops there now, as it stops at a
    file it cannot read. (A folder it cannot list is the same rule; root lists any.)"""
    import shutil
    src = tmp_path / "src"
    cls = sorted(os.listdir(demo_dir))[0]
    shutil.copytree(demo_dir / cls, src / cls)
    deep = src / cls
    for _ in range(66):
        deep = deep / "d"
    deep.mkdir(parents=True)
    first = sorted(os.listdir(demo_dir / cls))[0]
    shutil.copy(demo_dir / cls / first, deep / "x.jpg")
    r = subprocess.run([tool("cachebuild"), str(src), "-o", str(tmp_path / "s.dlc"), "--size",
                        "16"], capture_output=True, text=True)
    assert r.returncode == 0 and "deeper than 64 folders; not searched further" in r.stderr
    r = subprocess.run([tool("cachebuild"), str(src), "-o", str(tmp_path / "t.dlc"), "--size",
                        "16", "--strict"], capture_output=True, text=True)
    assert r.returncode != 0 and "deeper than 64 folders (--strict)" in r.stderr, r.stderr
    assert not (tmp_path / "t.dlc").exists()


def test_tar_shards_without_a_label_name_each_sample(demo_dir, tmp_path):
    """Shards none of whose samples has a usable KEY.cls failed at the schema ("label_names
    given without num_labels"), naming neither the shard nor the reason; now each sample is
    skipped with its reason and the build ends with "no valid image"."""
    import tarfile
    cls = sorted(os.listdir(demo_dir))[0]
    jpgs = sorted(os.listdir(demo_dir / cls))[:2]
    with tarfile.open(tmp_path / "s.tar", "w") as t:
        t.add(demo_dir / cls / jpgs[0], "a.jpg")
        t.add(demo_dir / cls / jpgs[1], "b.jpg")
        (tmp_path / "b.cls").write_text("cat\n")
        t.add(tmp_path / "b.cls", "b.cls")
    r = subprocess.run([tool("cachebuild"), str(tmp_path / "s.tar"), "-o",
                        str(tmp_path / "o.dlc"), "--size", "16"], capture_output=True, text=True)
    assert r.returncode != 0, r.stderr
    assert "s.tar:a.jpg: skipped: no KEY.cls label member" in r.stderr, r.stderr
    assert "s.tar:b.jpg: skipped:" in r.stderr and "no valid image among 2 items" in r.stderr
    assert not (tmp_path / "o.dlc").exists()


def test_a_fan_out_of_links_stops_the_scan(demo_dir, tmp_path):
    """torchvision's os.walk(followlinks=True) lists a folder reached by two routes twice, and so
    does the scan; but folders of two links each to the next multiply the routes (16 levels made
    a 2 GB store of one JPEG). The scan stops once the repeats far outnumber the folders; a
    folder shared by a few classes is still listed in each."""
    import shutil
    cls = sorted(os.listdir(demo_dir))[0]
    jpg = demo_dir / cls / sorted(os.listdir(demo_dir / cls))[0]
    src = tmp_path / "fan"
    levels = 14
    for k in range(levels + 1):
        (src / ("n%d" % k)).mkdir(parents=True)
    shutil.copy(jpg, src / ("n%d" % levels) / "x.jpg")
    for k in range(levels):
        for name in ("a", "b"):
            os.symlink("../n%d" % (k + 1), src / ("n%d" % k) / name)
    r = subprocess.run([tool("cachebuild"), str(src), "-o", str(tmp_path / "f.dlc"), "--size",
                        "16"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "links lead to the same folders again and again" in r.stderr, \
        r.stderr[-500:]
    assert not (tmp_path / "f.dlc").exists()
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copy(jpg, shared / "s.jpg")
    tree = tmp_path / "tree"
    for c in ("a", "b", "c"):
        (tree / c).mkdir(parents=True)
        os.symlink(shared, tree / c / "common")
    r = subprocess.run([tool("cachebuild"), str(tree), "-o", str(tmp_path / "t.dlc"), "--size",
                        "16", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert dlcache.info(tmp_path / "t.dlc").count == 3


def test_a_name_cannot_split_a_warning_or_drive_the_terminal(tmp_path):
    """File names are bytes: a newline split a warning in two, and an escape sequence in a name
    reached the terminal as it was. Every line the tools print shows them as \\xHH."""
    cls = tmp_path / "src" / "a"
    cls.mkdir(parents=True)
    (cls / "bad\n\x1b[31mred.jpg").write_bytes(b"\xff\xd8\xff not a JPEG")
    r = subprocess.run([tool("cachebuild"), str(tmp_path / "src"), "-o", str(tmp_path / "o.dlc"),
                        "--size", "16"], capture_output=True, text=True)
    assert r.returncode != 0
    lines = [x for x in r.stderr.splitlines() if "bad" in x]
    assert lines and all("bad\\x0a\\x1b[31mred.jpg" in x for x in lines), r.stderr
    assert "\x1b" not in r.stderr, r.stderr


def test_an_output_name_cannot_drive_the_terminal_either(tmp_path):
    """The summaries named the output raw: cachebuild's line (a store, a join), its "pass
    --force" hint, cacheinfo's store line and a token build's line let an escape sequence in
    the output's name reach the terminal."""
    cls = tmp_path / "src" / "a"
    cls.mkdir(parents=True)
    from PIL import Image
    Image.new("RGB", (20, 20), (10, 200, 30)).save(cls / "x.jpg")
    out = tmp_path / "o\n\x1b[31mred.dlc"
    shown = "o\\x0a\\x1b[31mred.dlc"
    for args in (["--size", "16"], ["--size", "16"]):  # the second: the "pass --force" hint
        r = subprocess.run([tool("cachebuild"), str(tmp_path / "src"), "-o", str(out)] + args,
                           capture_output=True, text=True)
        assert shown in r.stderr and "\x1b" not in r.stderr, r.stderr
    r = subprocess.run([tool("cacheinfo"), str(out)], capture_output=True, text=True)
    assert r.returncode == 0 and shown in r.stdout and "\x1b" not in r.stdout, r.stdout
    (tmp_path / "t.jsonl").write_text('{"tokens": [1, 2]}\n')
    tok = tmp_path / "t\x1b[31m.dlc"
    r = subprocess.run([tool("cachebuild"), "--tokens", str(tmp_path / "t.jsonl"), "-o", str(tok),
                        "--eos", "0"], capture_output=True, text=True)
    assert r.returncode == 0 and "t\\x1b[31m.dlc" in r.stdout and "\x1b" not in r.stdout, r.stdout
