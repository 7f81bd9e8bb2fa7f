#!/usr/bin/env python3
"""Draw a dlcache trace (Loader(trace=...), $DLCACHE_TRACE: Chrome trace-event JSON) as an SVG
timeline: one lane per thread, one box per span coloured by stage, the batch number in the box
when it fits. Standard library only.

    tests/bench/plot_trace.py run.json docs/trace_timeline.svg [--last-ms MS] [--title TEXT]

--last-ms draws only the last MS milliseconds of the trace (default: all of it)."""

import argparse
import json
import sys
from xml.sax.saxutils import escape

COLORS = {"io": "#4e79a7", "download": "#f28e2b", "work": "#59a14f", "copy": "#b07aa1",
          "next": "#e15759", "fetch": "#9c755f"}
LABELS = {"io": "I/O: lookups and reads", "download": "waiting for a shard",
          "work": "worker: crop, flip, convert", "copy": "copy to the device",
          "next": "consumer waiting in next()", "fetch": "downloading a shard"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("svg")
    ap.add_argument("--last-ms", type=float, default=0)
    ap.add_argument("--title", default="dlcache loader timeline")
    a = ap.parse_args()
    with open(a.trace) as f:
        ev = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    spans = [e for e in ev if e.get("ph") == "X"]
    if not spans:
        sys.exit("plot_trace: %s has no spans" % a.trace)
    end = max(s["ts"] + s["dur"] for s in spans)
    start = min(s["ts"] for s in spans)
    if a.last_ms > 0:
        start = max(start, end - 1000 * a.last_ms)
    spans = [s for s in spans if s["ts"] + s["dur"] >= start]
    tids = sorted({s["tid"] for s in spans})
    left, right, top, lane, gap = 190, 20, 50, 26, 6
    width = 1000
    plot_w = width - left - right
    height = top + len(tids) * (lane + gap) + 70
    scale = plot_w / max(end - start, 1e-9)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="24" font-size="15">%s</text>' % (left, escape(a.title))]
    for i, tid in enumerate(tids):
        y = top + i * (lane + gap)
        out.append('<text x="%d" y="%d" text-anchor="end">%s</text>'
                   % (left - 8, y + lane / 2 + 4, escape(names.get(tid, "thread %d" % tid))))
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="#f3f3f3"/>'
                   % (left, y, plot_w, lane))
    for s in spans:
        i = tids.index(s["tid"])
        y = top + i * (lane + gap)
        x0 = left + max(s["ts"] - start, 0) * scale
        w = max((s["ts"] + s["dur"] - max(s["ts"], start)) * scale, 0.8)
        inner = 4 if s["name"] == "download" else 0
        if s["name"] == "fetch":  # a download thread's shard: its name and bytes
            what = "%s, %d bytes%s" % (s["args"].get("shard"), s["args"].get("bytes", 0),
                                       "" if s["args"].get("ok", True) else ", failed")
            label = s["args"].get("shard", "")
        else:
            what = "batch %s (epoch %s)" % (s["args"].get("batch"), s["args"].get("epoch"))
            label = str(s["args"].get("batch"))
        out.append('<rect x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="%s">'
                   '<title>%s %s: %.3f ms</title></rect>'
                   % (x0, y + inner, w, lane - 2 * inner, COLORS.get(s["name"], "#999"),
                      s["name"], escape(what), s["dur"] / 1000))
        if w > 7 * len(label) + 4:
            out.append('<text x="%.1f" y="%.1f" fill="white" font-size="10">%s</text>'
                       % (x0 + 2, y + lane / 2 + 3, escape(label)))
    # The time axis, in ms from the window's start.
    ya = top + len(tids) * (lane + gap) + 4
    span_ms = (end - start) / 1000
    step = next(t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
                if span_ms / t <= 10)
    t = 0.0
    while t <= span_ms + 1e-9:
        x = left + t * 1000 * scale
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#555"/>' % (x, ya, x, ya + 5))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>' % (x, ya + 18, t))
        t += step
    out.append('<text x="%d" y="%d" text-anchor="end">ms</text>' % (left - 8, ya + 18))
    x = left
    for k in ("next", "io", "work", "download", "fetch", "copy"):
        if not any(s["name"] == k for s in spans):
            continue
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>'
                   % (x, ya + 32, COLORS[k]))
        out.append('<text x="%d" y="%d">%s</text>' % (x + 16, ya + 42, LABELS[k]))
        x += 16 + 7 * len(LABELS[k]) + 20
    out.append("</svg>")
    with open(a.svg, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
