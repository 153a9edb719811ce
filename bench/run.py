#!/usr/bin/env python3
"""Runs emb's benchmarks and the same operations in PyTorch, in one run on one machine, and
prints times and ratios (torch time / emb time: above 1 means emb is faster).

Usage: /usr/bin/python3 bench/run.py  (make bench does this; EMB_BUILD_DIR picks the build)
"""
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("EMB_BUILD_DIR", os.path.join(HERE, "..", "build"))


def best_time(fn, min_time=0.05, rounds=5):
    fn()
    best = float("inf")
    for _ in range(rounds):
        reps, t0 = 0, time.perf_counter()
        while True:
            fn()
            reps += 1
            t1 = time.perf_counter()
            if t1 - t0 >= min_time and reps >= 3:
                break
        best = min(best, (t1 - t0) / reps)
    return best


def torch_times(V, D, N):
    torch.manual_seed(0)
    w = torch.randn(V, D)
    idx = torch.randint(0, V, (N,))
    out = {}
    with torch.no_grad():
        out["forward"] = best_time(lambda: F.embedding(idx, w))
    g = torch.randn(N, D)
    out["dense_backward"] = best_time(
        lambda: torch.ops.aten.embedding_dense_backward(g, idx, V, -1, False))
    wp = torch.nn.Parameter(w.clone())

    def sparse():
        wp.grad = None
        F.embedding(idx, wp, sparse=True).backward(g)
    out["sparse_fwd_bwd"] = best_time(sparse)
    opt = torch.optim.SGD([wp], lr=1e-3)

    def step():
        out = F.embedding(idx, wp, sparse=True)
        out.backward(g)
        opt.step()
        opt.zero_grad()
    out["sgd_sparse_step"] = best_time(step)
    return out


def torch_bag_times(V, D, N, bag=20):
    """F.embedding_bag on bags of `bag` given by offsets: forward (no grad), forward +
    backward into a fresh dense gradient, forward + sparse backward."""
    torch.manual_seed(0)
    w = torch.randn(V, D)
    idx = torch.randint(0, V, (N,))
    off = torch.arange(0, N, bag)
    psw = torch.randn(N)
    g = torch.randn(N // bag, D)
    out = {}
    for mode in ("sum", "mean", "max"):
        for weighted in ((False, True) if mode == "sum" else (False,)):
            name = mode + ("_psw" if weighted else "")
            p = psw if weighted else None
            with torch.no_grad():
                out[name + "_fwd"] = best_time(
                    lambda: F.embedding_bag(idx, w, off, mode=mode, per_sample_weights=p))
            for sparse in ((False, True) if mode != "max" else (False,)):
                wp = torch.nn.Parameter(w.clone())

                def fwd_bwd():
                    wp.grad = None
                    F.embedding_bag(idx, wp, off, mode=mode, per_sample_weights=p,
                                    sparse=sparse).backward(g)
                out[name + ("_sparse" if sparse else "_fwd_bwd")] = best_time(fwd_bwd)
    return out


def bag_main(threads):
    exe = os.path.join(BUILD, "bench", "bench_bag")
    if not os.path.exists(exe):
        return
    res = subprocess.run([exe, str(threads)], capture_output=True, text=True, check=True)
    print()
    print("# EmbeddingBag, bags of 20 given by offsets (F.embedding_bag); _fwd_bwd: dense")
    print("# weight gradient into a fresh zeroed buffer; _sparse: sparse gradient; psw: weighted")
    print(f"{'operation':<20}{'V':>8}{'D':>6}{'N':>8}{'emb ms':>10}{'torch ms':>10}{'ratio':>8}")
    cache = {}
    for line in res.stdout.splitlines():
        name, V, D, N, val = line.split()
        V, D, N, val = int(V), int(D), int(N), float(val)
        if (V, D, N) not in cache:
            cache[(V, D, N)] = torch_bag_times(V, D, N)
        t = cache[(V, D, N)][name]
        print(f"{name:<20}{V:>8}{D:>6}{N:>8}{val * 1e3:>10.3f}{t * 1e3:>10.3f}{t / val:>8.2f}")


def main():
    threads = int(os.environ.get("EMB_BENCH_THREADS", "1"))
    torch.set_num_threads(threads)
    exe = os.path.join(BUILD, "bench", "bench_embedding")
    res = subprocess.run([exe, str(threads)], capture_output=True, text=True, check=True)
    print(f"# {threads} thread(s); torch {torch.__version__}; times are best-of-5 per call")
    print(f"{'operation':<16}{'V':>8}{'D':>6}{'N':>8}{'emb ms':>10}{'torch ms':>10}{'ratio':>8}")
    cache = {}
    for line in res.stdout.splitlines():
        name, V, D, N, val = line.split()
        V, D, N, val = int(V), int(D), int(N), float(val)
        if name == "memcpy_GBps":
            print(f"# memory copy bandwidth: {val:.1f} GB/s (read+write, {N >> 20} MiB)")
            continue
        if (V, D, N) not in cache:
            cache[(V, D, N)] = torch_times(V, D, N)
        t = cache[(V, D, N)][name]
        print(f"{name:<16}{V:>8}{D:>6}{N:>8}{val * 1e3:>10.3f}{t * 1e3:>10.3f}{t / val:>8.2f}")
        if name == "forward":
            gbps = 2.0 * N * D * 4 / val / 1e9
            print(f"{'':<16}{'':>22}  emb forward moves {gbps:.1f} GB/s (rows read + written)")
    bag_main(threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
