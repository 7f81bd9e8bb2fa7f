#!/usr/bin/env python3
"""A node's worth of trainers on one GPU: P processes (default 8), each training a small model on
the same GPU from its own dlcache.Loader(STORE, device="cuda:0") over one store (so one page
cache), against the same P processes training on a synthetic batch already on the GPU.

Each process builds its model (torchvision resnet18, or "tiny": three convolutions, where the
loaders rather than the GPU set the pace), then, all processes in step (a barrier before each
window):
  synthetic  --seconds of training steps on one random batch kept on the device;
  dlcache    --warmup steps, then --seconds of steps on the Loader's batches (RandomResizedCrop
             --crop + flip, float16, channels_last, --threads each: the cores shared out).
Printed: per pipeline, each process's samples/s and their sum (the node's samples/s), and the
dlcache sum's fraction of the synthetic one. --json FILE writes the figures.

Without CUDA (torch.cuda.is_available() False) it runs the same on the CPU, the host loader's
batches and the "tiny" model, with 2 processes and short windows unless told otherwise: a check
that the script works, not a figure.

    python3 tools/gpu_node8.py --store DATA/train.dlc [--procs 8] [--model resnet18|tiny]
"""

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def make_model(name, torch):
    if name == "tiny":
        nn = torch.nn
        return nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=4, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 1000))
    import torchvision
    return getattr(torchvision.models, name)(weights=None)


def worker(rank, a, barrier, out):
    """One trainer: its figures (or its error) go into out[rank]."""
    fig = {"rank": rank}
    try:
        import torch
        import torch.nn.functional as F
        dev = torch.device(a.device)
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
            torch.backends.cudnn.benchmark = True
        torch.set_num_threads(1)
        model = make_model(a.model, torch).to(dev).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        amp = torch.bfloat16

        def step(x, y):
            with torch.autocast(dev.type, dtype=amp, enabled=dev.type == "cuda"):
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        def sync():
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)

        def window(batches):
            """Steps for a.seconds after the barrier: samples/s of this process."""
            for _ in range(a.warmup):
                step(*next(batches))
            sync()
            barrier.wait(timeout=600)
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < a.seconds:
                x, y = next(batches)
                step(x, y)
                n += x.shape[0]
            sync()
            return n / (time.perf_counter() - t0)

        def synthetic():
            x = torch.randn(a.batch_size, 3, a.crop, a.crop, device=dev).contiguous(
                memory_format=torch.channels_last)
            y = torch.randint(0, 1000, (a.batch_size,), device=dev)
            while True:
                yield x, y

        fig["synthetic"] = window(synthetic())

        import dlcache
        kw = dict(device=str(dev), memory_format=torch.channels_last) \
            if dev.type == "cuda" else {}
        with dlcache.Loader(a.store, a.batch_size, drop_last=True, crop=a.crop,
                            random_resized_crop=True, flip=0.5, dtype="float16",
                            threads=a.threads, seed=rank, **kw) as ld:
            if len(ld) == 0:
                raise RuntimeError("%s holds fewer than %d records" % (a.store, a.batch_size))

            def batches():
                while True:
                    for x, y in ld:
                        x = x.to(dev).contiguous(memory_format=torch.channels_last)
                        if dev.type != "cuda":
                            x = x.float()
                        yield x, y.to(dev)

            fig["dlcache"] = window(batches())
            st = ld.stats()
            fig["loader_threads"] = st.get("threads")
            fig["device_backend"] = getattr(ld, "device_backend", None)
    except Exception as e:  # noqa: BLE001 - reported, and the barrier let go for the others
        fig["error"] = "%s: %s" % (type(e).__name__, e)
        barrier.abort()
    out[rank] = fig


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", required=True)
    p.add_argument("--procs", type=int, default=0, help="trainers (default 8; 2 on the CPU)")
    p.add_argument("--model", default="", help="resnet18 (default on a GPU) or tiny")
    p.add_argument("--batch-size", type=int, default=0, help="default 128; 32 on the CPU")
    p.add_argument("--crop", type=int, default=0, help="default 224; 64 on the CPU")
    p.add_argument("--threads", type=int, default=0,
                   help="loader threads per process (default: the cores shared out, at least 1)")
    p.add_argument("--seconds", type=float, default=0, help="each window (default 8; 1 on CPU)")
    p.add_argument("--warmup", type=int, default=-1, help="untimed steps (default 5; 1 on CPU)")
    p.add_argument("--json")
    a = p.parse_args(argv)
    import torch  # noqa: F401 - only to say whether CUDA is there, before the processes start
    cuda = torch.cuda.is_available()
    a.device = "cuda:0" if cuda else "cpu"
    a.procs = a.procs or (8 if cuda else 2)
    a.model = a.model or ("resnet18" if cuda else "tiny")
    a.batch_size = a.batch_size or (128 if cuda else 32)
    a.crop = a.crop or (224 if cuda else 64)
    a.seconds = a.seconds or (8.0 if cuda else 1.0)
    a.warmup = a.warmup if a.warmup >= 0 else (5 if cuda else 1)
    a.threads = a.threads or max(1, cores() // a.procs)
    print("gpu_node8: %d processes on %s, %s, batch %d, crop %d, %d loader threads each, "
          "%.0f s windows, torch %s" % (a.procs, a.device if cuda else "the CPU (no CUDA)",
                                        a.model, a.batch_size, a.crop, a.threads, a.seconds,
                                        torch.__version__), flush=True)
    ctx = mp.get_context("spawn")  # CUDA in the children: never fork a parent that holds it
    with ctx.Manager() as m:
        out = m.dict()
        barrier = ctx.Barrier(a.procs)
        procs = [ctx.Process(target=worker, args=(r, a, barrier, out)) for r in range(a.procs)]
        for pr in procs:
            pr.start()
        for pr in procs:
            pr.join()
        figs = [dict(out.get(r, {"rank": r, "error": "exit %s" % procs[r].exitcode}))
                for r in range(a.procs)]
    doc = {"device": a.device, "procs": a.procs, "model": a.model, "batch_size": a.batch_size,
           "crop": a.crop, "threads_each": a.threads, "seconds": a.seconds, "cores": cores(),
           "per_process": figs}
    errors = [f for f in figs if f.get("error")]
    if not errors:
        syn = sum(f["synthetic"] for f in figs)
        dl = sum(f["dlcache"] for f in figs)
        doc.update(synthetic_samples_per_s=syn, dlcache_samples_per_s=dl,
                   fraction_of_synthetic=dl / syn if syn > 0 else 0.0)
        print("synthetic: %.0f samples/s in all (%s)" % (
            syn, ", ".join("%.0f" % f["synthetic"] for f in figs)))
        print("dlcache:   %.0f samples/s in all (%s); %.2f of synthetic" % (
            dl, ", ".join("%.0f" % f["dlcache"] for f in figs), doc["fraction_of_synthetic"]))
    else:
        for f in errors:
            print("process %d: %s" % (f["rank"], f["error"]), file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
