"""The inputs of docs/DISTRIBUTED.md's scaling model, measured here, and the model's predicted
throughput on real links.

    EMB_BUILD_DIR=build /usr/bin/python3 bench/mpi/scaling_model.py [--np 1,2,4] [--epochs 1]
        [--corpus FILE] [--tables]

Word vectors: `emb train` on State of the Union (scripts/fetch-corpus.sh sotu; or --corpus),
skip-gram with emb's defaults, one thread per process: the single process's words per second
per CPU second (the per-rank compute rate c, from CPU time so that the machine's load
changes it little), then `mpirun -np R emb train` for each R, whose summary gives
every rank's merge traffic (bytes sent and received, rounds). With --tables, bench_mpi's
sharded-table step at the same rank counts (bytes per step per rank, bags per second).

The model (docs/DISTRIBUTED.md, "Scaling"): a round of R ranks costs each rank
T / c (training its T tokens) + (R - 1) (b / B + L) (a ring all-gather of the R parts of b
bytes each over a link of B bytes/s and latency L per step) + R b / M (applying every rank's
changed rows at memory rate M); the run does R T tokens per round. Only b, T and c are
measured; B is the link's nominal rate, L and M are stated assumptions (printed). Runs as
root need Open MPI's OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1. Timings
on a shared machine are noisy; the bytes are exact counts.
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (name, bytes per second, latency per all-gather step in seconds): nominal line rates; the
# latencies are assumptions of the order MPI over TCP (Ethernet) and over verbs (InfiniBand)
# show, not measurements.
LINKS = [("10 GbE", 10e9 / 8, 30e-6), ("25 GbE", 25e9 / 8, 20e-6),
         ("100 GbE", 100e9 / 8, 10e-6), ("IB HDR 200 Gb/s", 200e9 / 8, 2e-6)]
MERGE_RATE = 5e9  # bytes/s at which a rank applies received rows (an assumption)
RANKS = [1, 2, 4, 8, 16, 32, 64]


def train(cmd):
    """Runs cmd; returns its words, wall seconds of training, traffic lines and the CPU
    seconds it used (user + system, reading the corpus included)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}")
    m = re.search(r"(\d+) words in ([\d.]+) s \((\d+) words/s", p.stdout)
    if not m:
        sys.exit(f"no summary in:\n{p.stdout}")
    traffic = [tuple(int(x) for x in t) for t in re.findall(
        r"merge traffic of rank (\d+) of \d+: sent (\d+) bytes, received (\d+) over (\d+) rounds",
        p.stdout)]
    return int(m.group(1)), float(m.group(2)), traffic, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", default="1,2,4")
    ap.add_argument("--epochs", default="1")
    ap.add_argument("--corpus")
    ap.add_argument("--mpiexec", default="mpirun")
    ap.add_argument("--tables", action="store_true")
    args = ap.parse_args()
    build = os.environ.get("EMB_BUILD_DIR", os.path.join(ROOT, "build"))
    emb = os.path.join(build, "emb")
    corpus = args.corpus or subprocess.run(
        [os.path.join(ROOT, "scripts", "fetch-corpus.sh"), "sotu"], check=True,
        stdout=subprocess.PIPE, text=True).stdout.strip()
    nps = [int(x) for x in args.np.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        base = [emb, "train", corpus, "-o", os.path.join(tmp, "v.bin"), "--lowercase",
                "--strip-punct", "--threads", "1", "--epochs", args.epochs]
        words, secs, _, cpu = train(base)
        c = words / cpu
        print(f"# word vectors: {corpus}, {args.epochs} epoch(s), skip-gram defaults, 1 thread")
        print(f"single process: {words} words in {cpu:.2f} s of CPU: c = {c:.0f} words/s per "
              f"core (CPU time, reading included: load does not change it much); "
              f"{words / secs:.0f} words/s of wall time (noisy)")
        print(f"{'ranks':>5} {'rounds':>7} {'tokens/round/rank':>18} {'sent B/round/rank':>18} "
              f"{'recv B/round/rank':>18} {'words/s (all, noisy)':>21}")
        b = T = None
        for r in nps:
            words, secs, traffic, _ = train([args.mpiexec, "-np", str(r), "--oversubscribe"] + base)
            rounds = traffic[0][3]
            sent = sum(t[1] for t in traffic) / r / rounds
            recv = sum(t[2] for t in traffic) / r / rounds
            T = words / rounds / r
            print(f"{r:>5} {rounds:>7} {T:>18.0f} {sent:>18.0f} {recv:>18.0f} "
                  f"{words / secs:>21.0f}", flush=True)
            if r > 1:
                b = sent
    if b is None:
        sys.exit("no run of several ranks: nothing to model (give --np with R > 1)")
    print(f"\n# model: b = {b:.0f} bytes per rank and round (largest R measured), "
          f"T = {T:.0f} tokens, c = {c:.0f} words/s, M = {MERGE_RATE / 1e9:.0f} GB/s (assumed)")
    print(f"{'link':>16} " + " ".join(f"{'R=' + str(r):>9}" for r in RANKS) +
          "   (million words/s; efficiency at R=64)")
    for name, bw, lat in LINKS:
        row = []
        for r in RANKS:
            t = T / c + (r - 1) * (b / bw + lat) + (r * b / MERGE_RATE if r > 1 else 0)
            row.append(r * T / t)
        print(f"{name:>16} " + " ".join(f"{x / 1e6:>9.2f}" for x in row) +
              f"   {row[-1] / (RANKS[-1] * c):.0%}")
    if args.tables:
        print("\n# sharded tables: bench_mpi (row-wise, forward + Adagrad step)")
        for r in nps:
            p = subprocess.run([args.mpiexec, "-np", str(r), "--oversubscribe",
                                os.path.join(build, "bench", "bench_mpi"), "--steps", "3"],
                               check=True, stdout=subprocess.PIPE, text=True)
            j = json.loads(p.stdout.splitlines()[0])
            print(f"ranks {r}: {j['bytes_per_step_per_rank']:.0f} bytes per step per rank, "
                  f"{j['seconds_per_step']:.3f} s per step, "
                  f"{j['bags_per_s_per_rank']:.0f} bags/s per rank (noisy)")


if __name__ == "__main__":
    main()
