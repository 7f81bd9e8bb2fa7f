#!/usr/bin/env python3
"""threads="auto" against a sweep of fixed thread counts, in two situations: a loop that needs
every core (RandomResizedCrop to float32, the loop does nothing) and one that needs one (uint8
crops, the loop sleeps 20 ms a step). For each: samples/s of every fixed count 1..cores, then
auto's thread count after each batch and its samples/s over the run and over its last half,
with the process's CPU time (user + sys) of each run. The runs are interleaved: each of
--rounds rounds runs every count and auto once, in an order that rotates, so that a machine
whose load drifts weighs on all of them alike; the ratio of auto to the best fixed count is
taken within each round. Writes a JSON file and an SVG plot (auto's count per batch in the
last round, the sweep's best as a line).

    DLCACHE_LIB=build/lib/libdlcache.so PYTHONPATH=python \\
        /usr/bin/python3 tests/bench/bench_auto.py STORE OUT.json OUT.svg [--batches N] \\
        [--rounds R] [--counts 1,2,4,8,16] [--situation "all cores"] [--situation "one core"]

STORE: a store of 256x256 images (cachebuild --size 256). --counts: the fixed counts of the
sweep (default every count from 1 to the cores); --situation: run only the one(s) named (the
GPU bundle runs each with a sweep of its own, to fit its time)."""

import argparse
import json
import os
import resource
import time

import dlcache

SITUATIONS = {
    "all cores": dict(kw=dict(batch_size=32, crop=224, random_resized_crop=True,
                              dtype="float32"), sleep=0.0),
    "one core": dict(kw=dict(batch_size=32, crop=224), sleep=0.02),
}


def run(store, threads, kw, sleep, batches):
    counts = []
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    with dlcache.Loader(store, threads=threads, seed=1, **kw) as ld:
        n = 0
        t0 = time.perf_counter()
        half = None
        while n < batches:
            for _ in ld:
                if sleep:
                    time.sleep(sleep)
                n += 1
                counts.append(ld.stats()["threads"])
                if n == batches // 2:
                    half = time.perf_counter()
                if n >= batches:
                    break
        t1 = time.perf_counter()
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    bs = kw["batch_size"]
    changes = sum(1 for a, b in zip(counts, counts[1:]) if a != b)
    # The first batch from which the count stays what it ends at.
    settled = len(counts)
    while settled > 0 and counts[settled - 1] == counts[-1]:
        settled -= 1
    return dict(samples_per_s=n * bs / (t1 - t0),
                last_half_samples_per_s=(n - batches // 2) * bs / (t1 - half),
                cpu_s=cpu, samples_per_cpu_s=n * bs / cpu if cpu > 0 else 0.0,
                threads=counts, changes=changes, settled_at_batch=settled + 1)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("json_out")
    ap.add_argument("svg_out")
    ap.add_argument("--batches", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--counts", default="")
    ap.add_argument("--situation", action="append", choices=sorted(SITUATIONS))
    a = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    counts = sorted({int(x) for x in a.counts.split(",") if x.strip()}) or list(range(1, cores + 1))
    if counts[0] < 1:
        ap.error("--counts: thread counts start at 1")
    out = {"cores": cores, "batches": a.batches, "rounds": a.rounds, "counts": counts,
           "loadavg_before": os.getloadavg()[0], "situations": {}}
    for name, s in SITUATIONS.items():
        if a.situation and name not in a.situation:
            continue
        kinds = counts + ["auto"]
        runs = {k: [] for k in kinds}
        ratios = []
        for r in range(a.rounds):
            order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
            got = {k: run(a.store, k, s["kw"], s["sleep"], a.batches) for k in order}
            for k in kinds:
                runs[k].append(got[k])
            best = max(got[t]["last_half_samples_per_s"] for t in kinds if t != "auto")
            ratios.append(got["auto"]["last_half_samples_per_s"] / best)
        sweep = {t: median([x["last_half_samples_per_s"] for x in runs[t]])
                 for t in kinds if t != "auto"}
        auto = runs["auto"][-1]
        out["situations"][name] = dict(
            sweep=sweep, best_fixed=max(sweep, key=sweep.get), auto=auto,
            runs={str(k): [{f: x[f] for f in ("last_half_samples_per_s", "samples_per_s",
                                              "cpu_s", "samples_per_cpu_s", "changes",
                                              "settled_at_batch")} for x in v]
                  for k, v in runs.items()},
            auto_last_half_median=median([x["last_half_samples_per_s"] for x in runs["auto"]]),
            auto_over_best_per_round=ratios,
            auto_over_best_last_half=median(ratios))
        print("%-9s sweep (median of %d) %s  auto %.0f samples/s (last half, median); "
              "auto / best fixed per round %s; threads %s, %d changes, settled at batch %d"
              % (name, a.rounds, {k: round(v) for k, v in sweep.items()},
                 out["situations"][name]["auto_last_half_median"],
                 [round(x, 2) for x in ratios], sorted(set(auto["threads"])), auto["changes"],
                 auto["settled_at_batch"]))
        print("          samples per CPU second (median): %s"
              % {str(k): round(median([x["samples_per_cpu_s"] for x in v]))
                 for k, v in runs.items()})
    out["loadavg_after"] = os.getloadavg()[0]
    with open(a.json_out, "w") as f:
        json.dump(out, f, indent=1)
    svg(out, a.svg_out)


def svg(out, path):
    w, h, left, top, bottom = 760, 300, 60, 40, 50
    pw, ph = w - left - 20, h - top - bottom
    cores, n = out["cores"], out["batches"]
    top_t = max(cores, 2)
    colors = {"all cores": "#e15759", "one core": "#4e79a7"}
    s = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif"'
         ' font-size="12">' % (w, h), '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="22" font-size="14">threads="auto": working threads after each batch '
         '(%d cores; dashed: best fixed count of the sweep)</text>' % (left, cores)]
    def x(i):
        return left + pw * i / max(n - 1, 1)
    def y(t):
        return top + ph - ph * t / top_t
    for t in range(0, top_t + 1):
        s.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>'
                 % (left, left + pw, y(t), y(t)))
        s.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (left - 6, y(t) + 4, t))
    for i in range(0, n + 1, max(n // 6, 1)):
        s.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (x(i), top + ph + 18, i))
    s.append('<text x="%d" y="%d" text-anchor="middle">batch</text>'
             % (left + pw / 2, top + ph + 36))
    ly = top + 10
    for name, r in out["situations"].items():
        c = colors.get(name, "#333")
        pts = " ".join("%.1f,%.1f" % (x(i), y(t)) for i, t in enumerate(r["auto"]["threads"]))
        s.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>' % (pts, c))
        s.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="5,4"/>'
                 % (left, left + pw, y(r["best_fixed"]) + 3, y(r["best_fixed"]) + 3, c))
        s.append('<text x="%d" y="%d" fill="%s">%s: auto at %.2f of the best fixed (%d)</text>'
                 % (left + pw - 330, ly, c, name, r["auto_over_best_last_half"],
                    r["best_fixed"]))
        ly += 16
    s.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(s) + "\n")


if __name__ == "__main__":
    main()
