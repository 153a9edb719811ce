#!/usr/bin/env python3
"""Tables larger than memory: a 100M x 64 table in int8 rowwise (7.2 GB), f16 (12.8 GB)
and float32 (25.6 GB, more than this machine's 24 GB of RAM), written by emb's streaming
writer and served read-only from memory-mapped safetensors files, against the machine's
gather probe and against PyTorch 1.13 on the same files (torch.from_file maps them too).

For each file, at 1 and 2 threads, on 262,144 random rows (bags of 20 for the pooled case):
  probe    plain C: copy the rows' stored bytes into a buffer (bench_large.c)
  forward  emb_qtable_forward / torch: quantized bag of one row each (int8),
           F.embedding (f16, f32)
  bag_sum  emb_qtable_bag_forward / torch: embedding_bag_byte_rowwise_offsets (int8),
           F.embedding_bag(mode='sum') (f16, f32)
  prefetch_forward  emb_qtable_prefetch (madvise WILLNEED on the rows' pages), then forward
each cold (the file dropped from the page cache with posix_fadvise(DONTNEED) and mapped
afresh just before the first call) and warm (median of --reps calls on the same rows), with
the process's peak RSS. The float32 file is also served through emb_embedding
(emb_embedding_map_safetensors: the ordinary table API on the mapping).

Usage (make bench-large, or make bench BENCH_LARGE=1; plain make bench does not run it):
  /usr/bin/python3 bench/large.py [--dir DIR] [--rows 100000000] [--dim 64]
        [--qtypes int8,f16,f32] [--threads 1,2] [--reps 5] [--json FILE] [--no-torch]
The files are created once in DIR (default $EMB_BUILD_DIR/large-tables) and reused while
their size matches; a file whose free disk space is missing is skipped with a message.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("EMB_BUILD_DIR", os.path.join(HERE, "..", "build"))
ROW_BYTES = {"f32": lambda d: 4 * d, "f16": lambda d: 2 * d, "bf16": lambda d: 2 * d,
             "int8": lambda d: d + 8, "int4": lambda d: (d + 1) // 2 + 4}

TORCH_CASE = r'''
import json, os, resource, struct, sys, time
import torch
import torch.nn.functional as F
path, qtype, rows, dim, n, bag, threads, reps, seed = sys.argv[1:10]
rows, dim, n, bag, threads, reps, seed = map(int, (rows, dim, n, bag, threads, reps, seed))
torch.set_num_threads(threads)
with open(path, "rb") as f:
    hl = struct.unpack("<Q", f.read(8))[0]
size = os.path.getsize(path)
g = torch.Generator().manual_seed(seed)
idx = torch.randint(0, rows, (n,), generator=g)
off = torch.arange(0, n, bag)
ar = torch.arange(0, n)

def mapped():
    raw = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)  # a shared mapping; never written
    body = raw[8 + hl:]
    if qtype == "int8":
        return body.view(rows, dim + 8)
    return body.view(torch.float16 if qtype == "f16" else torch.float32).view(rows, dim)

def op_fn(name, W):
    if qtype == "int8":
        q = torch.ops.quantized.embedding_bag_byte_rowwise_offsets
        if name == "forward":
            return lambda: q(W, idx, ar, False, 0, False, None, None, False)
        return lambda: q(W, idx, off, False, 0, False, None, None, False)
    if name == "forward":
        return lambda: F.embedding(idx, W)
    return lambda: F.embedding_bag(idx, W, off, mode="sum")

for name in ("forward", "bag_sum"):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    W = mapped()
    f = op_fn(name, W)
    t0 = time.perf_counter(); f(); cold = time.perf_counter() - t0
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    ts.sort()
    warm = ts[reps // 2] if reps % 2 else 0.5 * (ts[reps // 2 - 1] + ts[reps // 2])
    del f, W
    print(json.dumps({"lib": "torch", "op": name, "qtype": qtype, "rows": rows, "dim": dim,
                      "indices": n, "bag": bag, "threads": threads, "reps": reps,
                      "cold_s": cold, "warm_median_s": warm, "warm_min_s": ts[0],
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}),
          flush=True)
'''


def file_ok(path, rows, dim, qtype):
    """The file exists with the expected size and qtype."""
    try:
        with open(path, "rb") as f:
            hl = struct.unpack("<Q", f.read(8))[0]
            meta = json.loads(f.read(hl)).get("__metadata__", {})
        return (meta.get("emb.qtype") == qtype and meta.get("emb.dim") == str(dim) and
                os.path.getsize(path) == 8 + hl + rows * ROW_BYTES[qtype](dim))
    except (OSError, ValueError, struct.error):
        return False


def run_json(cmd):
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=os.path.join(BUILD, "large-tables"))
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--qtypes", default="int8,f16,f32")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--indices", type=int, default=262144)
    ap.add_argument("--bag", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=os.path.join(BUILD, "bench_large.jsonl"))
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()
    prog = os.path.join(BUILD, "bench", "bench_large")
    os.makedirs(a.dir, exist_ok=True)
    lines = []
    with open("/proc/meminfo") as f:
        mem_gb = int(f.readline().split()[1]) / 1e6
    print(f"# {a.rows} x {a.dim}; RAM {mem_gb:.1f} GB; load {os.getloadavg()[0]:.2f}",
          flush=True)
    for qtype in a.qtypes.split(","):
        path = os.path.join(a.dir, f"table_{a.rows}x{a.dim}.{qtype}.safetensors")
        need = a.rows * ROW_BYTES[qtype](a.dim)
        if not file_ok(path, a.rows, a.dim, qtype):
            free = shutil.disk_usage(a.dir).free
            if free < need + 2e9:
                print(f"# skipping {qtype}: the file needs {need / 1e9:.1f} GB, "
                      f"{free / 1e9:.1f} GB free in {a.dir}", flush=True)
                continue
            print(f"# creating {path} ({need / 1e9:.1f} GB)", flush=True)
            lines += run_json([prog, "create", "--qtype", qtype, "--rows", str(a.rows),
                               "--dim", str(a.dim), "--out", path])
            print(json.dumps(lines[-1]), flush=True)
        apis = ["qtable", "embedding"] if qtype == "f32" else ["qtable"]
        for t in a.threads.split(","):
            for api in apis:
                got = run_json([prog, "run", "--file", path, "--indices", str(a.indices),
                                "--bag", str(a.bag), "--threads", t, "--reps", str(a.reps),
                                "--api", api])
                for g in got:
                    print(json.dumps(g), flush=True)
                lines += got
            if not a.no_torch:
                r = subprocess.run(["/usr/bin/python3", "-c", TORCH_CASE, path, qtype,
                                    str(a.rows), str(a.dim), str(a.indices), str(a.bag), t,
                                    str(a.reps), "1"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
                got = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
                if r.returncode != 0:  # recorded, not fatal: torch may not serve such a file
                    err = (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]
                    got.append({"lib": "torch", "qtype": qtype, "threads": int(t),
                                "error": err[:300]})
                for g in got:
                    print(json.dumps(g), flush=True)
                lines += got
    with open(a.json, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    print_table(lines)
    print(f"# load {os.getloadavg()[0]:.2f}; JSON lines in {a.json}")


def print_table(lines):
    probe = {}
    for d in lines:
        if d.get("op") == "probe":
            probe[(d["qtype"], d["threads"], d["api"])] = d
    torch = {(d["qtype"], d["threads"], d["op"]): d for d in lines
             if d.get("lib") == "torch" and "op" in d}
    for d in lines:
        if d.get("lib") == "torch" and "error" in d:
            print(f"# torch failed on {d['qtype']} at {d['threads']} threads: {d['error']}")
    print("\nqtype  threads api        op                warm ms  cold ms  probe-frac(w/c)  "
          "torch warm/cold ms  torch/emb(w/c)  RSS MB (emb/torch)")
    for d in lines:
        if d.get("lib") != "emb" or d.get("op") not in ("probe", "forward", "bag_sum",
                                                          "prefetch_forward"):
            continue
        tk = torch.get((d["qtype"], d["threads"], d["op"]))
        tcol = (f"{tk['warm_median_s'] * 1e3:8.1f}/{tk['cold_s'] * 1e3:8.1f}  "
                f"{tk['warm_median_s'] / d['warm_median_s']:5.2f}/{tk['cold_s'] / d['cold_s']:5.2f}"
                if tk and d["op"] != "probe" else " " * 31)
        rss = f"{d['peak_rss_mb']:.0f}" + (f"/{tk['peak_rss_mb']:.0f}" if tk and d["op"] != "probe" else "")
        print(f"{d['qtype']:6} {d['threads']:7} {d['api']:10} {d['op']:16} "
              f"{d['warm_median_s'] * 1e3:8.2f} {d['cold_s'] * 1e3:8.1f}  "
              f"{d['probe_fraction_warm']:5.2f}/{d['probe_fraction_cold']:5.2f}      {tcol}  {rss}")


if __name__ == "__main__":
    sys.exit(main())
