"""What the examples of records with many fields share: finding the build's tools,
a work directory that is removed at the end, real photos from the demo maker, a
timing loop that is the same for both pipelines, a training loop that measures
the step time and the data wait, and the tables they print.

Not a public module: examples/segmentation.py, detection.py, tokens.py and
small_images.py import it from their own directory.
"""

import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if os.path.join(REPO, "python") not in sys.path:
    sys.path.insert(0, os.path.join(REPO, "python"))

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def cores():
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def build_dir():
    """The build whose tools the examples run: $DLCACHE_BUILD_DIR, else the one
    holding $DLCACHE_LIB (BUILD/lib/libdlcache.so), else the repository's build/
    (the same rule as tests/python/conftest.py)."""
    if os.environ.get("DLCACHE_BUILD_DIR"):
        return os.path.abspath(os.environ["DLCACHE_BUILD_DIR"])
    lib = os.environ.get("DLCACHE_LIB")
    if lib:
        lib = os.path.abspath(lib)
        libdir = lib if os.path.isdir(lib) else os.path.dirname(lib)
        return os.path.dirname(libdir)
    return os.path.join(REPO, "build")


def tool(name, given=None):
    """Path of build tool @p name (mkdemo, cachebench), or exit saying how to get it."""
    path = given or os.path.join(build_dir(), "bin", name)
    if not os.access(path, os.X_OK):
        sys.exit("%s is missing: build the project (make build, or cmake) and set "
                 "DLCACHE_BUILD_DIR or DLCACHE_LIB, or pass --%s PATH" % (path, name))
    return path


def add_common_args(p, workers=True, photos=True):
    """Options every example takes (--mkdemo and --photos: those made from the demo photos)."""
    p.add_argument("--workdir", help="keep the generated data and stores here and reuse them "
                   "on the next run (default: a temporary directory, removed at the end)")
    if photos:
        add_photo_args(p)
    if workers:
        p.add_argument("--workers", type=int, default=cores(),
                       help="dlcache threads = DataLoader worker processes (default: the "
                       "cores, %d)" % cores())
    p.add_argument("--seed", type=int, default=0)


def add_photo_args(p):
    p.add_argument("--mkdemo", help="path of build/bin/mkdemo (default: the build of "
                   "$DLCACHE_BUILD_DIR or $DLCACHE_LIB, else the repository's build/)")
    p.add_argument("--photos", help="directory of the photographs mkdemo cuts the demo "
                   "images from (mkdemo's default: /usr/share/backgrounds/mate/nature)")


@contextlib.contextmanager
def workdir(given, prefix):
    """@p given (made if missing, kept), or a temporary directory removed at the end."""
    if given:
        os.makedirs(given, exist_ok=True)
        yield os.path.abspath(given)
        return
    d = tempfile.mkdtemp(prefix=prefix)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def demo_photos(args, root, count, classes=10):
    """@p count ImageNet-like JPEGs (ROOT/demo-N-K/train/<class>/<n>.jpg) cut by
    build/bin/mkdemo from real photographs, one class per photograph; made once per
    work directory. Returns a sorted list of (path, class index)."""
    out = os.path.join(root, "demo-%d-%d-%d" % (count, classes, args.seed))
    train = os.path.join(out, "train")
    stamp = os.path.join(out, "done")
    if not os.path.exists(stamp):
        shutil.rmtree(out, ignore_errors=True)
        cmd = [tool("mkdemo", args.mkdemo), out, "--count", str(count), "--classes",
               str(classes), "--seed", str(args.seed), "--threads", str(cores())]
        if args.photos:
            cmd += ["--photos", args.photos]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        print("made %d demo JPEGs with mkdemo in %.1f s" % (count, time.perf_counter() - t0),
              flush=True)
        open(stamp, "w").close()
    names = sorted(d for d in os.listdir(train) if os.path.isdir(os.path.join(train, d)))
    files = []
    for k, name in enumerate(names):
        for f in sorted(glob.glob(os.path.join(train, name, "*.jpg"))):
            files.append((f, k))
    if len(files) != count:
        sys.exit("%s holds %d JPEGs, expected %d" % (train, len(files), count))
    return files


def done_marker(path, params):
    """True when @p path was made with @p params (a stamp file beside it says so)."""
    stamp = path + ".params.json"
    if not os.path.exists(path) or not os.path.exists(stamp):
        return False
    with open(stamp) as f:
        return json.load(f) == params


def mark_done(path, params):
    with open(path + ".params.json", "w") as f:
        json.dump(params, f)


def forever(loader):
    """Batches across epoch boundaries (a new iter() is the next epoch for both
    dlcache and torch's DataLoader)."""
    while True:
        n = 0
        for batch in loader:
            n += 1
            yield batch
        if n == 0:
            raise RuntimeError("the loader yields no batch (fewer samples than one batch "
                               "with drop_last?)")


def data_rate(batches, size_of, seconds, min_batches=5, warmup=3):
    """Samples/s of an input pipeline alone: @p warmup batches untimed (worker
    start-up, first page faults), then batches until at least @p seconds and
    @p min_batches have passed. @p size_of(batch) gives a batch's samples; the
    consumer does nothing else with the batch. Returns (samples/s, samples, seconds)."""
    for _ in range(warmup):
        next(batches)
    samples = n = 0
    t0 = time.perf_counter()
    while True:
        samples += size_of(next(batches))
        n += 1
        dt = time.perf_counter() - t0
        if dt >= seconds and n >= min_batches:
            return samples / dt, samples, dt


def train_steps(name, batches, step, steps, log_every=5):
    """Run @p steps training steps. @p batches yields what @p step(batch) takes;
    @p step returns the loss (a float). Returns per-step (loss, step time, data wait),
    where the data wait is the time spent in next() on the pipeline and the step
    time is from the end of one step to the end of the next."""
    out = []
    t_prev = time.perf_counter()
    for i in range(steps):
        t0 = time.perf_counter()
        batch = next(batches)
        wait = time.perf_counter() - t0
        loss = step(batch)
        now = time.perf_counter()
        out.append((loss, now - t_prev, wait))
        t_prev = now
        if i % log_every == 0 or i == steps - 1:
            print("  %-8s step %3d  loss %.3f  step %.3f s (data wait %.3f s)"
                  % (name, i, loss, now - t0 + wait, wait), flush=True)
    return out


def steps_skipped(steps):
    """Training steps left out of the means: the first ones pay for worker start-up and
    the first use of every kernel."""
    return 2 if steps > 4 else (1 if steps > 1 else 0)


def summarize_steps(rows):
    """(mean step s, mean data wait s, first loss, last loss) of train_steps()'s rows,
    without the first steps_skipped() steps; the losses are means of up to 3 steps."""
    kept = rows[steps_skipped(len(rows)):]
    k = max(1, min(3, len(rows) // 3))
    first = sum(r[0] for r in rows[:k]) / k
    last = sum(r[0] for r in rows[-k:]) / k
    return (sum(r[1] for r in kept) / len(kept), sum(r[2] for r in kept) / len(kept),
            first, last)


def table(headers, rows, aligns=None):
    """A plain-text table: a header line, a rule, the rows (str()-ed)."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    aligns = aligns or ["<"] + [">"] * (len(headers) - 1)

    def line(vals):
        return "  ".join(("%-*s" if a == "<" else "%*s") % (w, v)
                         for v, w, a in zip(vals, widths, aligns)).rstrip()
    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out)


def load_avg():
    """The 1-minute load average now (the machine may be shared)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def check(cond, msg):
    """Fail the example (non-zero exit through the exception) unless @p cond."""
    if not cond:
        raise AssertionError(msg)


def close_torch_loader(loader):
    """Stop the persistent worker processes of a DataLoader now, not at exit."""
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    loader._iterator = None


# ---------------------------------------------------------------- scenes: images, masks, boxes
#
# The segmentation and detection examples share one data set made from the demo's real
# photographs: each demo JPEG is resized (shorter side to --size) and center-cropped like
# cachebuild --size does, saved as a JPEG (quality 90), and given
#   * a mask of SCENE_CLASSES classes by colour quantisation of the (blurred) decoded pixels:
#     dark (value < 64), pale (saturation < 48), then by hue: warm (red to yellow), green,
#     blue (cyan to purple); cleaned with a 5x5 mode filter, saved as an 8-bit PNG;
#   * boxes: the bounding boxes of the connected regions (4-connected, at a quarter of the
#     resolution) of each class covering at least 1.5% of the image, at most 12 per image,
#     largest first, with the region's class: boxes.json.
# These are not semantic labels, but they are real image structure a model can learn.

SCENE_CLASSES = ("dark", "pale", "warm", "green", "blue")


def quantise(im):
    """The class mask (an L image of ids 0..4) of an RGB PIL image."""
    import numpy as np
    from PIL import ImageFilter, Image
    hsv = np.asarray(im.filter(ImageFilter.GaussianBlur(2)).convert("HSV")).astype(np.int32)
    h, s, v = hsv[..., 0], hsv[..., 1], hsv[..., 2]
    cls = np.where(v < 64, 0,
                   np.where(s < 48, 1,
                            np.where((h < 50) | (h >= 215), 2, np.where(h < 115, 3, 4))))
    mask = Image.fromarray(cls.astype(np.uint8), "L")
    return mask.filter(ImageFilter.ModeFilter(5))


def regions(mask, step=4, min_frac=0.015, max_boxes=12):
    """Boxes (float32 N x 4, x0 y0 x1 y1 in pixels) and classes (int64 N) of the connected
    regions of each class of @p mask (an L image), found on a grid of step x step cells."""
    import numpy as np
    m = np.asarray(mask)[step // 2::step, step // 2::step]
    gh, gw = m.shape
    lab = np.arange(gh * gw).reshape(gh, gw)
    while True:  # propagate the smallest cell number through each region, with pointer jumps
        new = lab.copy()
        for a, b, ma, mb in ((new[1:], lab[:-1], m[1:], m[:-1]), (new[:-1], lab[1:], m[:-1], m[1:]),
                             (new[:, 1:], lab[:, :-1], m[:, 1:], m[:, :-1]),
                             (new[:, :-1], lab[:, 1:], m[:, :-1], m[:, 1:])):
            np.minimum(a, np.where(ma == mb, b, a), out=a)
        new = new.reshape(-1)[new.reshape(-1)].reshape(gh, gw)
        if np.array_equal(new, lab):
            break
        lab = new
    ids, inv, area = np.unique(lab.reshape(-1), return_inverse=True, return_counts=True)
    ys, xs = np.divmod(np.arange(gh * gw), gw)
    n = len(ids)
    x0 = np.full(n, gw); y0 = np.full(n, gh); x1 = np.zeros(n, int); y1 = np.zeros(n, int)
    np.minimum.at(x0, inv, xs); np.minimum.at(y0, inv, ys)
    np.maximum.at(x1, inv, xs + 1); np.maximum.at(y1, inv, ys + 1)
    keep = [i for i in np.argsort(-area, kind="stable") if area[i] >= min_frac * gh * gw]
    keep = keep[:max_boxes]
    H, W = mask.height, mask.width
    boxes = np.array([[x0[i] * step, y0[i] * step, min(W, x1[i] * step), min(H, y1[i] * step)]
                      for i in keep], dtype=np.float32).reshape(-1, 4)
    classes = np.array([m.reshape(-1)[ids[i]] for i in keep], dtype=np.int64)
    return boxes, classes


def _scene(job):
    src, jpg, png, size = job
    from PIL import Image
    im = Image.open(src).convert("RGB")
    w, h = im.size
    s = size / min(w, h)
    nw, nh = max(size, round(w * s)), max(size, round(h * s))
    im = im.resize((nw, nh), Image.BILINEAR)
    left, top = (nw - size) // 2, (nh - size) // 2
    im = im.crop((left, top, left + size, top + size))
    im.save(jpg, quality=90)
    im = Image.open(jpg).convert("RGB")  # the decoded pixels both pipelines start from
    mask = quantise(im)
    mask.save(png)
    boxes, classes = regions(mask)
    return boxes.tolist(), classes.tolist()


def scenes(args, root, count, size):
    """The scene data set (see above), made once per work directory. Returns a list of
    dicts {image: JPEG path, mask: PNG path, boxes: [[x0, y0, x1, y1]...], classes: [...]}."""
    import concurrent.futures
    photos = demo_photos(args, root, count)
    out = os.path.join(root, "scenes-%d-%d-%d" % (count, size, args.seed))
    index = os.path.join(out, "scenes.json")
    if not os.path.exists(index):
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        jobs = [(src, os.path.join(out, "%05d.jpg" % i), os.path.join(out, "%05d.png" % i), size)
                for i, (src, _) in enumerate(photos)]
        t0 = time.perf_counter()
        with concurrent.futures.ProcessPoolExecutor(cores()) as ex:
            anns = list(ex.map(_scene, jobs, chunksize=16))
        items = [{"image": j[1], "mask": j[2], "boxes": b, "classes": c}
                 for j, (b, c) in zip(jobs, anns)]
        with open(index + ".tmp", "w") as f:
            json.dump(items, f)
        os.rename(index + ".tmp", index)
        print("made %d scenes (%dx%d JPEG + PNG mask + boxes) in %.1f s"
              % (count, size, size, time.perf_counter() - t0), flush=True)
    with open(index) as f:
        return json.load(f)
