#!/usr/bin/env python3
"""emb against PyTorch 1.13 in one run on one machine: embedding lookup, backward, sparse
training steps and EmbeddingBag, at 1 and 2 threads, with the machine's limits (stream copy
bandwidth, random-row gather probe) measured in the same run.

Each case is timed as `reps` repetitions (each of enough calls to take ~20 ms, at least one)
after one warm-up call; the numbers are per-call medians. The suite measures every table
shape in `rounds` rounds (default 3), emb then torch in each, and keeps for every operation
its lowest median over the rounds (`round_medians_s` lists them all): on a shared 2-core
machine one disturbed stretch moved single-round ratios by 30% and more, and alternating the
libraries round by round gives both the same chances. emb runs in the C programs
bench_embedding and bench_bag (one JSON line per operation); torch runs here, with
torch.set_num_threads(threads). Ratios are torch time / emb time: above 1 means emb is
faster. "probe" is emb's fraction of the gather probe: the probe's time to fetch the same
rows (plain C, same table and indices, same threads) divided by emb's time.

Usage (make bench runs the suite; EMB_BUILD_DIR picks the build):
  /usr/bin/python3 bench/run.py [--threads 1,2] [--reps 7] [--rounds 3] [--json FILE]
                                [--quick]
  /usr/bin/python3 bench/run.py --case OP --rows V --dim D --indices N [--bag B]
                                [--threads T] [--reps R]
The suite writes every JSON line (emb, torch, machine) to --json (default
$EMB_BUILD_DIR/bench_results.jsonl); bench/plot.py turns that file into an SVG and a table.
--case runs one emb operation and the torch operations it is compared with, printing JSON
lines only. OP is one of bench_embedding's or bench_bag's operations (their --help).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("EMB_BUILD_DIR", os.path.join(HERE, "..", "build"))

# (rows, dim, indices, bag, emb operations)
TRAIN = ["dense_backward", "sparse_backward", "sparse_backward_view", "sgd_unfused",
         "sgd_unfused_view", "sgd_fused", "adagrad_unfused", "adagrad_unfused_view",
         "adagrad_fused", "sparseadam_unfused", "sparseadam_unfused_view", "sparseadam_fused"]
BAG_OPS = ["bag_sum_fwd", "bag_sum_fwd_bwd", "bag_sum_sparse",
           "bag_sum_psw_fwd", "bag_sum_psw_fwd_bwd", "bag_sum_psw_sparse",
           "bag_mean_fwd", "bag_mean_fwd_bwd", "bag_mean_sparse",
           "bag_max_fwd", "bag_max_fwd_bwd"]
SUITE = [
    (1000000, 64, 262144, 0, ["forward"] + TRAIN),
    (1000000, 128, 262144, 0, ["forward"]),
    (100000, 512, 65536, 0, ["forward"]),
    (50000, 16, 1048576, 0, ["forward"] + TRAIN),
    (1000, 64, 4096, 0, ["forward"] + TRAIN),  # 256 KiB table: cache-resident
    (1000000, 64, 40960, 20, BAG_OPS),
    (50000, 128, 40960, 20, BAG_OPS),
]
QUICK = [
    (100000, 64, 65536, 0, ["forward"] + TRAIN),
    (1000, 64, 4096, 0, ["forward"] + TRAIN),
    (50000, 128, 40960, 20, BAG_OPS),
]

# emb operation -> the torch operations it is compared with
TORCH_OF = {
    "forward": ["F.embedding", "index_select_out"],
    "dense_backward": ["dense_backward"],
    "sparse_backward": ["sparse_backward"], "sparse_backward_view": ["sparse_backward"],
    "sgd_unfused": ["sgd_step"], "sgd_fused": ["sgd_step"], "sgd_unfused_view": ["sgd_step"],
    "adagrad_unfused": ["adagrad_step"], "adagrad_fused": ["adagrad_step"],
    "adagrad_unfused_view": ["adagrad_step"],
    "sparseadam_unfused": ["sparseadam_step"], "sparseadam_fused": ["sparseadam_step"],
    "sparseadam_unfused_view": ["sparseadam_step"],
}
for _op in BAG_OPS:
    TORCH_OF[_op] = [_op]


def time_median(fn, reps):
    """The C programs' timing (bench_common.h): one warm-up call, then reps repetitions of
    `calls` calls each (~20 ms per repetition); per-call median and minimum."""
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    calls = 1 if once >= 0.02 else int(0.02 / max(once, 1e-7)) + 1
    ts = []
    for _ in range(reps):
        s = time.perf_counter()
        for _ in range(calls):
            fn()
        ts.append((time.perf_counter() - s) / calls)
    return statistics.median(ts), min(ts), calls


class TorchCase:
    """One table shape in torch: N(0,1) weight, uniform indices, N(0,1) output gradient."""

    def __init__(self, V, D, N, bag):
        torch.manual_seed(0)
        self.V, self.D, self.N, self.bag = V, D, N, bag
        self.w = torch.randn(V, D)
        self.idx = torch.randint(0, V, (N,))
        if bag:
            self.off = torch.arange(0, N, bag)
            self.psw = torch.randn(N)
            self.g = torch.randn(N // bag, D)
        else:
            self.g = torch.randn(N, D)
            self.buf = torch.empty(N, D)

    def fn(self, op):
        V, w, idx, g = self.V, self.w, self.idx, self.g
        if op == "F.embedding":
            def f():
                with torch.no_grad():
                    F.embedding(idx, w)
            return f
        if op == "index_select_out":
            buf = self.buf
            return lambda: torch.index_select(w, 0, idx, out=buf)
        if op == "dense_backward":  # autograd's call: allocates a zeroed [V, D] gradient
            return lambda: torch.ops.aten.embedding_dense_backward(g, idx, V, -1, False)
        if op == "sparse_backward":  # autograd's call for sparse=True
            return lambda: torch.ops.aten.embedding_sparse_backward(g, idx, V, -1, False)
        if op.endswith("_step"):
            wp = torch.nn.Parameter(w.clone())
            kind = op[:-5]
            opt = {"sgd": lambda: torch.optim.SGD([wp], lr=1e-3),
                   "adagrad": lambda: torch.optim.Adagrad([wp], lr=1e-3),
                   "sparseadam": lambda: torch.optim.SparseAdam([wp], lr=1e-3)}[kind]()

            def step():  # backward (what autograd stores in .grad) + optimizer.step()
                wp.grad = torch.ops.aten.embedding_sparse_backward(g, idx, V, -1, False)
                opt.step()
                wp.grad = None
            return step
        if op.startswith("bag_"):
            name = op[4:]
            weighted = "_psw" in name
            mode = name.split("_")[0]
            p = self.psw if weighted else None
            off = self.off
            if name.endswith("_fwd"):
                def fwd():
                    with torch.no_grad():
                        F.embedding_bag(idx, w, off, mode=mode, per_sample_weights=p)
                return fwd
            sparse = name.endswith("_sparse")
            wp = torch.nn.Parameter(w.clone())

            def fwd_bwd():
                wp.grad = None
                F.embedding_bag(idx, wp, off, mode=mode, per_sample_weights=p,
                                sparse=sparse).backward(g)
            return fwd_bwd
        raise ValueError(f"unknown torch op {op}")


def emb_program(ops):
    return "bench_bag" if ops[0].startswith("bag_") else "bench_embedding"


def run_emb(ops, V, D, N, bag, threads, reps, extra=()):
    exe = os.path.join(BUILD, "bench", emb_program(ops))
    cmd = [exe, "--op", ",".join(list(extra) + ops), "--rows", str(V), "--dim", str(D),
           "--indices", str(N), "--threads", str(threads), "--reps", str(reps)]
    if bag:
        cmd += ["--bag", str(bag)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    res = [json.loads(line) for line in out.splitlines() if line.strip()]
    for r in res:
        if r["lib"] == "emb":
            r["vs"] = TORCH_OF[r["op"]]
    return res


def run_torch(ops, V, D, N, bag, threads, reps):
    torch.set_num_threads(threads)
    case = TorchCase(V, D, N, bag)
    res = []
    for op in ops:
        med, mn, calls = time_median(case.fn(op), reps)
        res.append({"lib": "torch", "op": op, "rows": V, "dim": D, "indices": N, "bag": bag,
                    "threads": threads, "reps": reps, "calls": calls, "median_s": med,
                    "min_s": mn})
    del case
    return res


def torch_ops_for(ops):
    seen = []
    for op in ops:
        for t in TORCH_OF[op]:
            if t not in seen:
                seen.append(t)
    return seen


def best_of_rounds(rounds):
    """The lines of several rounds of one shape merged: per (lib, op, threads), the line with
    the lowest median, carrying every round's median; emb lines get the lowest probe time and
    their probe fraction from it."""
    best, order = {}, []
    for lines in rounds:
        for r in lines:
            k = (r["lib"], r["op"], r["threads"])
            if k not in best:
                order.append(k)
                best[k] = dict(r, round_medians_s=[])
            b = best[k]
            b["round_medians_s"].append(r["median_s"])
            if r["median_s"] < b["median_s"]:
                best[k] = dict(r, round_medians_s=b["round_medians_s"])
            if "probe_s" in r:
                best[k]["probe_s"] = min(b.get("probe_s", r["probe_s"]), r["probe_s"])
    out = [best[k] for k in order]
    for r in out:
        if "probe_s" in r and r["median_s"] > 0:
            r["probe_fraction"] = round(r["probe_s"] / r["median_s"], 4)
    return out


def loadavg():
    try:
        return [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return None


def print_table(lines):
    """Human-readable table: emb median, each torch median and ratio, probe fraction."""
    torch_t = {(r["op"], r["rows"], r["dim"], r["indices"], r["threads"]): r["median_s"]
               for r in lines if r["lib"] == "torch"}
    print(f"{'op':<20}{'V':>8}{'D':>5}{'N':>8}{'T':>3}{'emb ms':>10}  "
          f"{'torch op':<18}{'torch ms':>10}{'ratio':>7}{'probe':>7}")
    for r in lines:
        if r["lib"] == "machine":
            if r["op"] == "copy":
                print(f"# stream copy, {r['threads']} thread(s): {r['gbps']:.1f} GB/s "
                      "(read + write)")
            else:
                print(f"# gather probe {r['rows']}x{r['dim']}, {r['indices']} rows, "
                      f"{r['threads']} thread(s): {r['median_s'] * 1e3:.3f} ms, "
                      f"{r['rows_per_s'] / 1e6:.1f} M rows/s (prefetch {r['prefetch_rows']})")
            continue
        if r["lib"] != "emb":
            continue
        for k, t in enumerate(TORCH_OF[r["op"]]):
            tt = torch_t.get((t, r["rows"], r["dim"], r["indices"], r["threads"]))
            head = (f"{r['op']:<20}{r['rows']:>8}{r['dim']:>5}{r['indices']:>8}"
                    f"{r['threads']:>3}{r['median_s'] * 1e3:>10.3f}") if k == 0 else " " * 54
            probe = f"{r['probe_fraction']:>7.2f}" if k == 0 else ""
            ratio = f"{tt / r['median_s']:>7.2f}" if tt else f"{'-':>7}"
            tms = f"{tt * 1e3:>10.3f}" if tt else f"{'-':>10}"
            print(f"{head}  {t:<18}{tms}{ratio}{probe}")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds per table shape (emb, then torch); the best median counts")
    ap.add_argument("--json", default=os.path.join(BUILD, "bench_results.jsonl"))
    ap.add_argument("--quick", action="store_true", help="smaller tables, for a smoke run")
    ap.add_argument("--case", help="one emb operation (and its torch counterparts)")
    ap.add_argument("--rows", type=int, default=1000000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--indices", type=int, default=262144)
    ap.add_argument("--bag", type=int, default=0)
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]

    if a.case:
        if a.case not in TORCH_OF:
            ap.error(f"unknown operation {a.case}; one of: {', '.join(TORCH_OF)}")
        bag = a.bag or (20 if a.case.startswith("bag_") else 0)
        for t in threads:
            for r in run_emb([a.case], a.rows, a.dim, a.indices, bag, t, a.reps,
                             extra=() if bag else ("gather_probe",)):
                print(json.dumps(r))
            for r in run_torch(TORCH_OF[a.case], a.rows, a.dim, a.indices, bag, t, a.reps):
                print(json.dumps(r))
        return 0

    meta = {"lib": "meta", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "loadavg_start": loadavg(), "reps": a.reps,
            "rounds": a.rounds,
            "command": " ".join(["bench/run.py"] + sys.argv[1:])}
    lines = [meta]
    print(f"# emb vs torch {torch.__version__}; medians of {a.reps} repetitions, the lowest "
          f"of {a.rounds} rounds; load average at start {meta['loadavg_start']}")
    for t in threads:
        lines += run_emb(["copy"], 1000, 16, 16, 0, t, a.reps)
        for V, D, N, bag, ops in (QUICK if a.quick else SUITE):
            extra = () if bag else ("gather_probe",)
            rounds = []
            for _ in range(max(1, a.rounds)):
                rounds.append(run_emb(ops, V, D, N, bag, t, a.reps, extra) +
                              run_torch(torch_ops_for(ops), V, D, N, bag, t, a.reps))
            merged = best_of_rounds(rounds)
            lines += merged
            print_table(merged)
    lines.append({"lib": "meta", "loadavg_end": loadavg(),
                  "date_end": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    print(f"# load average at end {lines[-1]['loadavg_end']}")
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        for r in lines:
            f.write(json.dumps(r) + "\n")
    print(f"# JSON lines: {a.json} (bench/plot.py {a.json} writes the SVG and a table)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
