#!/usr/bin/env python3
"""Plot cachebench results as an SVG, with the Python standard library only.

    plot_bench.py [-o OUT.svg] [--title TEXT] FILE.json...

Each FILE is what `cachebench load --json` printed (one object), a JSON array
of such objects, or what tests/bench/bench_threads.sh writes ({"runs": [...], ...}).
The plot shows worker threads against samples per second for the three paths
that cachebench measures in one run: the memcpy ceiling (the same output bytes
copied by the same number of threads), the loader, and decoding the JPEGs
every epoch. The y axis is logarithmic because the three are an order of
magnitude or more apart; the loader's share of the ceiling and its speed-up
over the JPEG path are printed at each point, since those ratios (not the
absolute rates of a shared machine) are what the benchmark claims.
"""

import argparse
import html
import json
import math
import sys

SERIES = [
    # key in the JSON, legend, colour, dash pattern
    ("ceiling_samples_per_s", "memcpy ceiling (same bytes)", "#7f7f7f", "6,4"),
    ("samples_per_s", "dlcache loader", "#1f77b4", None),
    ("jpeg_samples_per_s", "decode JPEG every epoch", "#d62728", None),
]


def load_runs(paths):
    """Every cachebench load result in the given files, in file order."""
    runs = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if isinstance(doc, dict) and "runs" in doc:
            doc = doc["runs"]
        if isinstance(doc, dict):
            doc = [doc]
        for run in doc:
            if not isinstance(run, dict) or "samples_per_s" not in run:
                raise SystemExit(f"plot_bench.py: {path}: not a cachebench load result")
            runs.append(run)
    if not runs:
        raise SystemExit("plot_bench.py: no results in the given files")
    return runs


def nice_log_ticks(lo, hi):
    """Ticks at 1, 2 and 5 times powers of ten between lo and hi."""
    ticks = []
    for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0 ** e
            if lo <= v <= hi:
                ticks.append(v)
    return ticks


def fmt_rate(v):
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def svg_plot(runs, title):
    width, height = 760, 480
    left, right, top, bottom = 80, 230, 50, 60
    pw, ph = width - left - right, height - top - bottom

    # One point per thread count; when a thread count appears more than once
    # (several files), the last result wins, as a re-run replaces a run.
    by_threads = {}
    for run in runs:
        by_threads[int(run.get("threads", 0))] = run
    threads = sorted(by_threads)
    values = [
        run[key]
        for run in by_threads.values()
        for key, *_ in SERIES
        if isinstance(run.get(key), (int, float)) and run[key] > 0
    ]
    if not values:
        raise SystemExit("plot_bench.py: no positive samples/s values to plot")
    ylo = 10 ** math.floor(math.log10(min(values)))
    yhi = 10 ** math.ceil(math.log10(max(values)))
    if yhi / ylo < 100:
        yhi = ylo * 100
    xlo, xhi = min(threads), max(threads)
    if xlo == xhi:
        xlo, xhi = xlo - 1, xhi + 1

    def x_of(t):
        return left + (t - xlo) / (xhi - xlo) * pw

    def y_of(v):
        return top + ph - (math.log10(v) - math.log10(ylo)) / (math.log10(yhi) - math.log10(ylo)) * ph

    out = []
    w = out.append
    w(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
      f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">')
    w(f'<rect width="{width}" height="{height}" fill="white"/>')
    w(f'<text x="{left + pw / 2}" y="24" text-anchor="middle" font-size="15">'
      f"{html.escape(title)}</text>")

    # Grid and axes.
    for v in nice_log_ticks(ylo, yhi):
        y = y_of(v)
        w(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#e0e0e0"/>')
        w(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt_rate(v)}</text>')
    step = max(1, math.ceil((xhi - xlo) / 16))
    for t in range(int(math.ceil(xlo)), int(xhi) + 1, step):
        x = x_of(t)
        w(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#f0f0f0"/>')
        w(f'<text x="{x:.1f}" y="{top + ph + 18}" text-anchor="middle">{t}</text>')
    w(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    w(f'<text x="{left + pw / 2}" y="{height - 18}" text-anchor="middle">worker threads</text>')
    w(f'<text transform="translate(20 {top + ph / 2}) rotate(-90)" text-anchor="middle">'
      "samples per second (log scale)</text>")

    # The three series.
    for key, label, colour, dash in SERIES:
        pts = [(t, by_threads[t].get(key)) for t in threads]
        pts = [(t, v) for t, v in pts if isinstance(v, (int, float)) and v > 0]
        if not pts:
            continue
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        path = " ".join(f"{x_of(t):.1f},{y_of(v):.1f}" for t, v in pts)
        w(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}/>')
        for t, v in pts:
            w(f'<circle cx="{x_of(t):.1f}" cy="{y_of(v):.1f}" r="3.5" fill="{colour}">'
              f"<title>{html.escape(label)}: {v:,.0f} samples/s at {t} threads</title></circle>")

    # The ratios the benchmark claims, next to the loader's points.
    for t in threads:
        run = by_threads[t]
        v = run.get("samples_per_s")
        if not isinstance(v, (int, float)) or v <= 0:
            continue
        parts = []
        if isinstance(run.get("ratio_to_ceiling"), (int, float)):
            parts.append(f"{run['ratio_to_ceiling'] * 100:.0f}%")
        if isinstance(run.get("speedup_vs_jpeg"), (int, float)):
            parts.append(f"{run['speedup_vs_jpeg']:.0f}x")
        if parts:
            w(f'<text x="{x_of(t) + 6:.1f}" y="{y_of(v) + 16:.1f}" font-size="10" fill="#1f77b4">'
              f"{' / '.join(parts)}</text>")

    # Legend and the configuration the runs share.
    lx, ly = left + pw + 16, top + 10
    for i, (key, label, colour, dash) in enumerate(SERIES):
        y = ly + i * 20
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        w(f'<line x1="{lx}" y1="{y}" x2="{lx + 24}" y2="{y}" stroke="{colour}" '
          f'stroke-width="2"{dash_attr}/>')
        w(f'<text x="{lx + 30}" y="{y + 4}">{html.escape(label)}</text>')
    first = by_threads[threads[0]]
    notes = [
        "labels: share of the ceiling",
        "         / speed-up over JPEG",
        "",
        f"batch {first.get('batch', '?')}, crop {first.get('crop', '?')}",
        f"{first.get('dtype', '?')}, {first.get('augment', '?').replace('_', ' ')}",
        f"flip {first.get('flip', '?')}, io {first.get('io', '?')}",
    ]
    info = first.get("store_info") or {}
    if info:
        notes.append(f"store {info.get('count', '?')} x {info.get('width', '?')}"
                     f"x{info.get('height', '?')}")
    for i, note in enumerate(notes):
        w(f'<text x="{lx}" y="{ly + 80 + i * 16}" font-size="11" fill="#444" '
          f'xml:space="preserve">{html.escape(note)}</text>')
    w("</svg>")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="cachebench JSON results")
    ap.add_argument("-o", "--output", default="-", help="SVG file (default: stdout)")
    ap.add_argument("--title", default="dlcache: samples/s by worker threads (one run per point)")
    args = ap.parse_args(argv)
    svg = svg_plot(load_runs(args.files), args.title)
    if args.output == "-":
        sys.stdout.write(svg)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
