#!/usr/bin/env python3
"""Turns the JSON lines of bench/run.py into an SVG plot of emb against torch per case and a
Markdown table of the same numbers (standard library only; the SVG is written by hand).

Usage: python3 bench/plot.py RESULTS.jsonl [--svg OUT.svg] [--md OUT.md]
Without --svg / --md it prints the Markdown table. The plot shows, per case (emb operation,
torch operation, table shape), the ratio torch median / emb median on a log scale, one bar
per thread count: bars right of the 1x line are cases where emb is faster.
"""
import argparse
import json
import math
import sys
from xml.sax.saxutils import escape

COLORS = {1: "#4477aa", 2: "#ee6677", 4: "#228833"}


def load(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def shape(r):
    s = f"{r['rows']:,}x{r['dim']}, {r['indices']:,} idx"
    return s + (f", bags of {r['bag']}" if r.get("bag") else "")


def cases(lines):
    """[(label, shape, {threads: (emb_s, torch_s, probe_fraction)})] in run order."""
    torch_t = {(r["op"], r["rows"], r["dim"], r["indices"], r["threads"]): r["median_s"]
               for r in lines if r["lib"] == "torch"}
    out, index = [], {}
    for r in lines:
        if r["lib"] != "emb":
            continue
        for t in r.get("vs", []):  # the torch ops run.py compares it with
            key = (r["op"], t, r["rows"], r["dim"], r["indices"])
            tt = torch_t.get((t, r["rows"], r["dim"], r["indices"], r["threads"]))
            if tt is None:
                continue
            if key not in index:
                label = r["op"] if t == r["op"] else f"{r['op']} vs {t}"
                index[key] = len(out)
                out.append((label, shape(r), {}))
            out[index[key]][2][r["threads"]] = (r["median_s"], tt, r["probe_fraction"])
    return out


def machine(lines):
    rows = []
    for r in lines:
        if r["lib"] == "machine" and r["op"] == "copy":
            rows.append(f"stream copy, {r['threads']} thread(s): {r['gbps']:.1f} GB/s "
                        "(bytes read + written)")
        elif r["lib"] == "machine":
            rows.append(f"gather probe {r['rows']:,}x{r['dim']}, {r['indices']:,} rows, "
                        f"{r['threads']} thread(s): {r['median_s'] * 1e3:.3f} ms = "
                        f"{r['rows_per_s'] / 1e6:.1f} M rows/s (prefetch {r['prefetch_rows']})")
    return rows


def markdown(lines):
    cs = cases(lines)
    threads = sorted({t for _, _, d in cs for t in d})
    head = "| case | table |" + "".join(
        f" emb ms {t}T | torch ms {t}T | ratio {t}T | probe {t}T |" for t in threads)
    out = [head, "|---|---|" + "---:|" * (4 * len(threads))]
    for label, shp, d in cs:
        row = f"| {label} | {shp} |"
        for t in threads:
            if t in d:
                e, tt, p = d[t]
                row += f" {e * 1e3:.3f} | {tt * 1e3:.3f} | **{tt / e:.2f}** | {p:.2f} |"
            else:
                row += " | | | |"
        out.append(row)
    meta = [r for r in lines if r["lib"] == "meta"]
    notes = [f"- {m}" for m in machine(lines)]
    for m in meta:
        if "loadavg_start" in m:
            notes.append(f"- run started {m['date']}, torch {m['torch']}, {m['cpus']} CPUs, "
                         f"load average {m['loadavg_start']}, command `{m['command']}`")
        if "loadavg_end" in m:
            notes.append(f"- run ended {m['date_end']}, load average {m['loadavg_end']}")
    return "\n".join(out + [""] + notes + ["", "Issue 9's targets in this run:", "",
                                             targets(lines)]) + "\n"


# Issue 9's targets: (name, predicate on a case (emb op, torch op, rows), minimum ratio)
TARGETS = [
    ("forward >= 2x F.embedding", lambda o, t, v: o == "forward" and t == "F.embedding", 2.0),
    ("forward >= 1.2x index_select(out=)",
     lambda o, t, v: o == "forward" and t == "index_select_out", 1.2),
    ("dense backward >= 5x", lambda o, t, v: o == "dense_backward", 5.0),
    ("sparse backward >= 1.5x", lambda o, t, v: o.startswith("sparse_backward"), 1.5),
    ("sparse backward + step >= 5x", lambda o, t, v: o.endswith(("_fused", "_unfused", "_unfused_view")), 5.0),
    ("bag sum/mean forward >= 1.5x",
     lambda o, t, v: o.startswith(("bag_sum", "bag_mean")) and o.endswith("_fwd"), 1.5),
    ("bag max forward >= 10x", lambda o, t, v: o == "bag_max_fwd", 10.0),
    ("bag backward >= 5x", lambda o, t, v: o.startswith("bag_") and not o.endswith("_fwd"), 5.0),
]
LARGE_TABLE_BYTES = 64 << 20  # "larger than the last-level cache" for the probe target


def targets(lines):
    """Markdown: per target, the cases meeting it and the worst ratio (case named)."""
    rows = ["| target | cases met | worst ratio (case, threads) |", "|---|---:|---|"]
    torch_t = {(r["op"], r["rows"], r["dim"], r["indices"], r["threads"]): r["median_s"]
               for r in lines if r["lib"] == "torch"}
    emb = [r for r in lines if r["lib"] == "emb"]
    for name, pred, need in TARGETS:
        got = []
        for r in emb:
            for t in r.get("vs", []):
                tt = torch_t.get((t, r["rows"], r["dim"], r["indices"], r["threads"]))
                if tt and pred(r["op"], t, r["rows"]):
                    got.append((tt / r["median_s"], r))
        if got:
            worst = min(got, key=lambda g: g[0])
            ok = sum(g[0] >= need for g in got)
            rows.append(f"| {name} | {ok} of {len(got)} | {worst[0]:.2f} ({worst[1]['op']}, "
                        f"{shape(worst[1])}, {worst[1]['threads']}T) |")
    big = [r for r in emb if r["op"] == "forward"
           and r["rows"] * r["dim"] * 4 >= LARGE_TABLE_BYTES]
    if big:
        worst = min(big, key=lambda r: r["probe_fraction"])
        ok = sum(r["probe_fraction"] >= 0.8 for r in big)
        rows.append(f"| forward >= 80% of the gather probe (tables >= 64 MiB) | {ok} of "
                    f"{len(big)} | {worst['probe_fraction']:.2f} ({shape(worst)}, "
                    f"{worst['threads']}T) |")
    by = {}
    for r in emb:
        if r["rows"] * r["dim"] * 4 >= LARGE_TABLE_BYTES:
            by.setdefault((r["op"], r["rows"], r["dim"], r["indices"]), {})[r["threads"]] = r
    pairs = [(d[1]["median_s"] / d[2]["median_s"], d[2]) for d in by.values() if 1 in d and 2 in d]
    if pairs:
        worst = min(pairs, key=lambda p: p[0])
        ok = sum(p[0] > 1.0 for p in pairs)
        rows.append(f"| 2 threads faster than 1 (tables >= 64 MiB) | {ok} of {len(pairs)} | "
                    f"{worst[0]:.2f}x ({worst[1]['op']}, {shape(worst[1])}) |")
    return "\n".join(rows) + "\n"


def svg(lines):
    cs = cases(lines)
    threads = sorted({t for _, _, d in cs for t in d})
    ratios = [d[t][1] / d[t][0] for _, _, d in cs for t in d]
    # ratios beyond [1/16, 64] are drawn at the edge (their label gives the value)
    lo = max(2.0 ** math.floor(math.log2(min(ratios + [0.5]))), 1 / 16)
    hi = min(2.0 ** math.ceil(math.log2(max(ratios + [2.0]))), 64.0)
    left, right, top, bar, gap = 430, 40, 60, 9, 8
    width = 1000
    plot_w = width - left - right
    row_h = bar * len(threads) + gap
    height = top + row_h * len(cs) + 50

    def x(v):
        return left + plot_w * (math.log2(v) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))

    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'font-family="sans-serif" font-size="11">',
         f'<rect width="{width}" height="{height}" fill="white"/>',
         f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">emb vs torch 1.13: '
         'torch median / emb median (log scale; right of 1x: emb faster)</text>']
    for k, t in enumerate(threads):
        s.append(f'<rect x="{left + 120 * k}" y="32" width="12" height="10" '
                 f'fill="{COLORS.get(t, "#999")}"/>')
        s.append(f'<text x="{left + 120 * k + 16}" y="41">{t} thread{"s" if t > 1 else ""}</text>')
    v = lo
    while v <= hi * 1.0001:
        xv = x(v)
        s.append(f'<line x1="{xv:.1f}" y1="{top - 5}" x2="{xv:.1f}" y2="{height - 45}" '
                 f'stroke="{"#000" if v == 1 else "#ddd"}" stroke-width="{1.5 if v == 1 else 1}"/>')
        lab = f"{v:g}x" if v >= 1 else f"1/{1 / v:g}x"
        s.append(f'<text x="{xv:.1f}" y="{height - 30}" text-anchor="middle">{lab}</text>')
        v *= 2
    for i, (label, shp, d) in enumerate(cs):
        y0 = top + i * row_h
        s.append(f'<text x="{left - 6}" y="{y0 + row_h / 2 + 1:.1f}" text-anchor="end">'
                 f'{escape(label)} ({escape(shp)})</text>')
        for k, t in enumerate(threads):
            if t not in d:
                continue
            e, tt, _ = d[t]
            r = tt / e
            x0, x1 = sorted((x(1.0), x(min(max(r, lo), hi))))
            s.append(f'<rect x="{x0:.1f}" y="{y0 + k * bar}" width="{max(x1 - x0, 1):.1f}" '
                     f'height="{bar - 1}" fill="{COLORS.get(t, "#999")}">'
                     f'<title>{escape(label)} {escape(shp)}, {t} thread(s): emb '
                     f'{e * 1e3:.3f} ms, torch {tt * 1e3:.3f} ms, {r:.2f}x</title></rect>')
            if r < lo:  # off scale on the left: the label goes right of the 1x line
                s.append(f'<text x="{x(1.0) + 3:.1f}" y="{y0 + k * bar + bar - 1}" '
                         f'font-size="8">{r:.3g} (off scale)</text>')
                continue
            s.append(f'<text x="{x1 + 3 if r >= 1 else x0 - 3:.1f}" y="{y0 + k * bar + bar - 1}" '
                     f'font-size="8" text-anchor="{"start" if r >= 1 else "end"}">{r:.2f}</text>')
    s.append("</svg>")
    return "\n".join(s) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("--svg")
    ap.add_argument("--md")
    a = ap.parse_args()
    lines = load(a.results)
    if a.svg:
        with open(a.svg, "w") as f:
            f.write(svg(lines))
    if a.md:
        with open(a.md, "w") as f:
            f.write(markdown(lines))
    if not a.svg and not a.md:
        sys.stdout.write(markdown(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
