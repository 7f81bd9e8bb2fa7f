#!/usr/bin/env python3
"""Train torchvision ResNets on one GPU fed three ways, and print how close each
input pipeline comes to a loop that needs no input pipeline at all.

For each model (resnet18 and resnet50 by default, weights=None, bf16 autocast,
channels_last, SGD with momentum, batch 256) the same training step runs on:

  synthetic   one random batch already on the GPU, reused every step: the
              ceiling, what the model alone can do;
  dlcache     dlcache.Loader(STORE, device="cuda", dtype=float16,
              memory_format=torch.channels_last) with its defaults (a
              thread per core unless --threads), RandomResizedCrop 224 +
              flip done by the C loader; once per backend asked for with
              --backends (DLCACHE_DEVICE_BACKEND: "plugin" = the C device
              path, "torch" = torch's cudart);
  torch       torch's DataLoader over an ImageFolder with PIL transforms
              (RandomResizedCrop 224, RandomHorizontalFlip, ToTensor,
              Normalize), pin_memory, persistent workers, W worker processes.

Each pipeline runs --warmup steps, then --steps timed steps between two
torch.cuda.synchronize() calls. The DataLoader queues 2 x W batches ahead, so
its warm-up is raised past that queue (otherwise the timed window measures the
queue, not the workers). Printed per model: img/s and the fraction of the
synthetic loop's img/s. --json FILE writes the figures, rewritten after every
measurement so that a run cut short keeps what it measured.

    python3 examples/train_gpu.py --store DATA/train.dlc --data DATA/train
    python3 examples/train_gpu.py --store S --data D --models resnet50 --steps 100

Needs CUDA (exits with status 77 and the reason without it); --help works
anywhere. The store is made with cachebuild DATA/train -o S --size 256.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if os.path.join(REPO, "python") not in sys.path:
    sys.path.insert(0, os.path.join(REPO, "python"))

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
EXIT_NO_CUDA = 77  # the "skipped" status of automake and of the project's test helpers


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_args(argv=None):
    w = max(1, cores() - 1)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", help="dlcache store of the images (needed by the dlcache pipeline)")
    p.add_argument("--data", help="ImageFolder directory of the same JPEGs (needed by the "
                   "torch pipeline)")
    p.add_argument("--models", default="resnet18,resnet50",
                   help="torchvision models, comma-separated (default resnet18,resnet50)")
    p.add_argument("--pipelines", default="synthetic,dlcache,torch",
                   help="which inputs to run, comma-separated (default synthetic,dlcache,torch; "
                   "synthetic is always run first, the fractions need it)")
    p.add_argument("--backends", default="default",
                   help="dlcache device backends, comma-separated: default (the Loader's own "
                   "choice), plugin, torch (default: default)")
    p.add_argument("--dtype", default="float16", choices=["float16", "float32", "uint8"],
                   help="dlcache's output dtype (default float16; uint8 is normalized here on "
                   "the GPU)")
    p.add_argument("--steps", type=int, default=100, help="timed steps per pipeline (100)")
    p.add_argument("--warmup", type=int, default=40,
                   help="untimed steps first (40; the torch pipeline takes at least 2 x W + 5)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--workers", type=int, default=w,
                   help="DataLoader worker processes (default: cores - 1, %d)" % w)
    p.add_argument("--threads", type=int, default=None,
                   help="dlcache threads (default: the Loader's own default, every core)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--device", default="cuda", help="torch device (default cuda)")
    p.add_argument("--json", metavar="FILE", help="write the figures as JSON to FILE")
    a = p.parse_args(argv)
    a.models = [m for m in a.models.split(",") if m]
    a.pipelines = [x for x in a.pipelines.split(",") if x]
    a.backends = [x for x in a.backends.split(",") if x]
    for x in a.pipelines:
        if x not in ("synthetic", "dlcache", "torch"):
            p.error("--pipelines: unknown %r" % x)
    for x in a.backends:
        if x not in ("default", "plugin", "torch"):
            p.error("--backends: unknown %r" % x)
    if a.steps < 1 or a.warmup < 0 or a.batch_size < 1 or a.workers < 0:
        p.error("--steps >= 1, --warmup >= 0, --batch-size >= 1, --workers >= 0")
    if "dlcache" in a.pipelines and not a.store:
        p.error("the dlcache pipeline needs --store (or leave it out of --pipelines)")
    if "torch" in a.pipelines and not a.data:
        p.error("the torch pipeline needs --data (or leave it out of --pipelines)")
    return a


class Report:
    """The figures, printed as they come and rewritten to --json after each one."""

    def __init__(self, args, torch):
        self.path = args.json
        self.doc = {
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name(torch.device(args.device)),
            "batch_size": args.batch_size, "crop": args.crop, "steps": args.steps,
            "warmup": args.warmup, "workers": args.workers,
            "dlcache_threads": args.threads, "dlcache_dtype": args.dtype,
            "autocast": "bfloat16", "memory_format": "channels_last",
            "store": args.store, "data": args.data, "models": {},
        }
        self.save()

    def add(self, model, name, fig):
        m = self.doc["models"].setdefault(model, {})
        syn = m.get("synthetic", {}).get("img_per_s")
        if syn and fig.get("img_per_s"):
            fig["fraction_of_synthetic"] = fig["img_per_s"] / syn
        m[name] = fig
        if fig.get("error"):
            print("  %-22s error: %s" % (name, fig["error"]), flush=True)
        else:
            frac = fig.get("fraction_of_synthetic")
            print("  %-22s %9.0f img/s  %s  (%d steps in %.2f s, host waited %.2f s for data)"
                  % (name, fig["img_per_s"], "%.2f" % frac if frac else "    ", fig["steps"],
                     fig["seconds"], fig["data_wait_s"]), flush=True)
        self.save()

    def save(self):
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=2)
        os.replace(tmp, self.path)

    def table(self):
        rows = []
        for model, m in self.doc["models"].items():
            for name, fig in m.items():
                if fig.get("error"):
                    rows.append((model, name, "error", "", fig["error"][:60]))
                else:
                    frac = fig.get("fraction_of_synthetic")
                    rows.append((model, name, "%.0f" % fig["img_per_s"],
                                 "%.2f" % frac if frac else "", fig.get("note", "")))
        print("\n%-10s %-22s %10s %9s  %s" % ("model", "input", "img/s", "of synth", "note"))
        for r in rows:
            print("%-10s %-22s %10s %9s  %s" % r)


def main(argv=None):
    args = parse_args(argv)
    import torch  # after argparse: --help needs no torch, and no CUDA
    if not torch.cuda.is_available():
        print("train_gpu: no CUDA device: torch %s says torch.cuda.is_available() is False "
              "(%s)" % (torch.__version__, "a CPU-only build of torch" if torch.version.cuda is None
                        else "no driver or GPU visible"), file=sys.stderr)
        return EXIT_NO_CUDA
    import torch.nn.functional as F
    import torchvision

    dev = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    report = Report(args, torch)
    print("train_gpu: %s, torch %s, batch %d, crop %d, %d warm-up + %d timed steps, %d workers"
          % (report.doc["device"], torch.__version__, args.batch_size, args.crop, args.warmup,
             args.steps, args.workers), flush=True)

    mean = torch.tensor(MEAN, device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=dev).view(1, 3, 1, 1) * 255

    def make_step(model, opt):
        def step(x, y):
            if x.dtype == torch.uint8:  # pixels as stored: normalize on the GPU
                if x.shape[1] not in (1, 3, 4):  # [N, H, W, C] rather than [N, C, H, W]
                    x = x.permute(0, 3, 1, 2)
                x = ((x.float() - mean) / std).contiguous(memory_format=torch.channels_last)
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return step

    def measure(step, batches, warmup):
        """warmup untimed steps, then args.steps timed ones; the window opens and closes
        with the device idle (synchronize), so it holds exactly the timed steps' work."""
        for _ in range(warmup):
            x, y = next(batches)
            step(x, y)
        torch.cuda.synchronize(dev)
        wait = 0.0
        t0 = time.perf_counter()
        for _ in range(args.steps):
            w0 = time.perf_counter()
            x, y = next(batches)
            wait += time.perf_counter() - w0
            step(x, y)
        torch.cuda.synchronize(dev)
        sec = time.perf_counter() - t0
        return {"img_per_s": args.steps * args.batch_size / sec, "seconds": sec,
                "steps": args.steps, "warmup": warmup, "data_wait_s": wait}

    def synthetic():
        x = torch.randn(args.batch_size, 3, args.crop, args.crop, device=dev).contiguous(
            memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (args.batch_size,), device=dev)
        while True:
            yield x, y

    def forever(loader, to_device):
        while True:
            n = 0
            for batch in loader:
                x, y = batch[0], batch[1]
                yield to_device(x, y)
                n += 1
            if n == 0:
                raise RuntimeError("the loader yielded no batch in an epoch")

    torch_loader = None

    def torch_batches():
        nonlocal torch_loader
        if torch_loader is None:  # made once: its workers persist across the models
            from torchvision import datasets, transforms
            tf = transforms.Compose([
                transforms.RandomResizedCrop(args.crop), transforms.RandomHorizontalFlip(),
                transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
            ds = datasets.ImageFolder(args.data, transform=tf)
            torch_loader = torch.utils.data.DataLoader(
                ds, batch_size=args.batch_size, shuffle=True, drop_last=True,
                num_workers=args.workers, pin_memory=dev.type == "cuda",
                persistent_workers=args.workers > 0)
            if len(torch_loader) == 0:
                raise RuntimeError("%s holds fewer than %d images" % (args.data, args.batch_size))

        def to_dev(x, y):
            return (x.to(dev, non_blocking=True).contiguous(memory_format=torch.channels_last),
                    y.to(dev, non_blocking=True))
        return forever(torch_loader, to_dev)

    def run_dlcache(model_name, step, backend):
        import dlcache
        name = "dlcache" if backend == "default" else "dlcache-" + backend
        saved = os.environ.get("DLCACHE_DEVICE_BACKEND")
        if backend != "default":
            os.environ["DLCACHE_DEVICE_BACKEND"] = backend
        loader = None
        try:
            loader = dlcache.Loader(args.store, args.batch_size, drop_last=True,
                                    crop=args.crop, random_resized_crop=True, flip=0.5,
                                    dtype=args.dtype, device=str(dev),
                                    memory_format=torch.channels_last, threads=args.threads)
            got = getattr(loader, "device_backend", "?")
            if len(loader) == 0:
                raise RuntimeError("%s holds fewer than %d records" % (args.store,
                                                                       args.batch_size))

            def to_dev(x, y):
                if x.device != dev:  # a Loader that left the copy to us
                    x = x.to(dev, non_blocking=True)
                    y = y.to(dev, non_blocking=True)
                if x.dtype != torch.uint8:
                    x = x.contiguous(memory_format=torch.channels_last)
                return x, y
            fig = measure(step, forever(loader, to_dev), args.warmup)
            st = loader.stats()
            fig["backend"] = got
            fig["threads"] = st.get("threads")
            fig["device_bytes"] = st.get("device_bytes")
            fig["device_copy_seconds"] = st.get("device_copy_seconds")
            fig["note"] = "backend %s, %s, %s threads" % (got, args.dtype, fig["threads"])
            if backend != "default" and got != backend:
                fig["note"] += " (asked for %s)" % backend
        except Exception as e:  # noqa: BLE001 - one pipeline's failure must not lose the others
            fig = {"error": "%s: %s" % (type(e).__name__, e)}
        finally:
            if loader is not None:
                loader.close()
            if saved is None:
                os.environ.pop("DLCACHE_DEVICE_BACKEND", None)
            else:
                os.environ["DLCACHE_DEVICE_BACKEND"] = saved
        report.add(model_name, name, fig)

    torch_warmup = max(args.warmup, 2 * args.workers + 5)
    for model_name in args.models:
        print("%s:" % model_name, flush=True)
        model = getattr(torchvision.models, model_name)(weights=None)
        model = model.to(dev).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
        step = make_step(model, opt)
        report.add(model_name, "synthetic", measure(step, synthetic(), args.warmup))
        if "dlcache" in args.pipelines:
            for backend in args.backends:
                run_dlcache(model_name, step, backend)
        if "torch" in args.pipelines:
            try:
                fig = measure(step, torch_batches(), torch_warmup)
                fig["note"] = "%d workers, warm-up %d" % (args.workers, torch_warmup)
            except Exception as e:  # noqa: BLE001
                fig = {"error": "%s: %s" % (type(e).__name__, e)}
            report.add(model_name, "torch-dataloader", fig)
        del model, opt, step
        torch.cuda.empty_cache()
    report.table()
    errors = [n for m in report.doc["models"].values() for n, f in m.items() if f.get("error")]
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
