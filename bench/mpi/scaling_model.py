"""The inputs of docs/DISTRIBUTED.md's scaling model, measured here, and the model's predicted
throughput on real links.

    EMB_BUILD_DIR=build /usr/bin/python3 bench/mpi/scaling_model.py [--np 1,2,4] [--epochs 1]
        [--corpus FILE] [--tables]
    EMB_BUILD_DIR=build /usr/bin/python3 bench/mpi/scaling_model.py --simhosts
        [--np 2,4] [--links 1gbit:0.1ms,1gbit:1ms,...] [--out results.jsonl]

Word vectors: `emb train` on State of the Union (scripts/fetch-corpus.sh sotu; or --corpus),
skip-gram with emb's defaults, one thread per process: the single process's words per second
per CPU second (the per-rank compute rate c, from CPU time so that the machine's load
changes it little), then `mpirun -np R emb train` for each R, whose summary gives
every rank's merge traffic (bytes sent and received, rounds). With --tables, bench_mpi's
sharded-table step at the same rank counts (bytes per step per rank, bags per second).

The model (docs/DISTRIBUTED.md, "Traffic and scaling"): a round of R ranks costs each rank
T / c (training its T tokens) + (R - 1) b / B (its part of b bytes to each other rank over a
link of B bytes/s) + K s(R) L (K collectives per round, each waiting s(R) one-way latencies L)
+ R b / M (applying every rank's changed rows at memory rate M); the run does R T tokens per
round. b, T, c and K are measured; B is the link's nominal rate, L and M are stated
assumptions (printed). s(R) counts the collective algorithm's latency steps: R - 1 for a ring
(the pessimistic case printed in the table), 1 for the direct exchange Open MPI's
non-blocking collectives post at once (plus 2 for the rendezvous of a message above TCP's
64 KiB eager limit), log2(R) for recursive doubling.

--simhosts runs bench_mpi --steps 3 and `emb train` (State of the Union, 1 epoch) over the
simulated hosts of bench/mpi/simhosts.sh (needs root) at each host count of --np and each
RATE:DELAY of --links, after a run without limits at each host count (the base), and prints
the measured time beside the model's: the base plus the bytes over the rate plus the latency
term, with the collectives per step or round of COLLECTIVES below. Runs as root need Open MPI's
OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1. Timings on a shared machine are
noisy; the bytes are exact counts.
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile

import simhosts_check  # bench/mpi/simhosts_check.py: the spellings of rates and delays

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (name, bytes per second, latency per all-gather step in seconds): nominal line rates; the
# latencies are assumptions of the order MPI over TCP (Ethernet) and over verbs (InfiniBand)
# show, not measurements.
LINKS = [("10 GbE", 10e9 / 8, 30e-6), ("25 GbE", 25e9 / 8, 20e-6),
         ("100 GbE", 100e9 / 8, 10e-6), ("IB HDR 200 Gb/s", 200e9 / 8, 2e-6)]
MERGE_RATE = 5e9  # bytes/s at which a rank applies received rows (an assumption)
RANKS = [1, 2, 4, 8, 16, 32, 64]
# Collectives per bench_mpi training step (bag forward 6, Adagrad step 5) and per word2vec
# merge round (2 all-gathers of counts, 2 all-gathervs of rows and lane states, 1 all-reduce),
# counted with a PMPI wrapper around MPI_I* at 2 and 4 ranks; of them, the ones that carry
# rows (above TCP's 64 KiB eager limit: rendezvous, 2 more one-way latencies).
COLLECTIVES = {"bench_step": (11, 3), "w2v_round": (5, 1)}
EAGER_LIMIT = 65536


def latency_steps(r, ring):
    """One-way latencies a collective waits on R ranks: R - 1 for a ring, 1 for a direct
    exchange."""
    return r - 1 if ring else 1




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


def simhosts(args, build, corpus):
    """Runs bench_mpi and emb train over bench/mpi/simhosts.sh's hosts for each host count
    and link; prints measured and modelled times, appends each run to args.out as JSON."""
    sh = [os.path.join(ROOT, "bench", "mpi", "simhosts.sh")]
    links = ["none:0"] + args.links.split(",")
    out = open(args.out, "a") if args.out else None
    print("# hosts link | bench_mpi s/step: measured, model | emb train s: measured, model "
          "(ring, direct) | bytes")
    for hosts in [int(x) for x in args.np.split(",")]:
        base = None
        for link in links:
            rate, delay = link.split(":")
            subprocess.run(sh + ["down"], check=True)
            subprocess.run(sh + ["up", str(hosts), rate, delay], check=True)
            B, d = simhosts_check.parse_rate(rate) / 8, simhosts_check.parse_delay(delay)
            p = subprocess.run(sh + ["run", str(hosts), os.path.join(build, "bench", "bench_mpi"),
                                     "--steps", "3"], check=True, stdout=subprocess.PIPE, text=True)
            j = json.loads(p.stdout.splitlines()[0])
            with tempfile.TemporaryDirectory() as tmp:
                words, secs, traffic, _ = train(sh + ["run", str(hosts)] + [
                    os.path.join(build, "emb"), "train", corpus, "-o", os.path.join(tmp, "v.bin"),
                    "--lowercase", "--strip-punct", "--threads", "1", "--epochs", "1"])
            rounds = traffic[0][3]
            sent = max(t[1] for t in traffic)  # the busiest uplink, per run
            recv = max(t[2] for t in traffic)
            res = {"hosts": hosts, "rate": rate, "delay": delay, "step_s": j["seconds_per_step"],
                   "step_bytes": j["max_bytes_per_step"], "w2v_s": secs, "w2v_rounds": rounds,
                   "w2v_sent": sent, "w2v_recv": recv, "words": words,
                   "load": os.getloadavg()[0]}
            if base is None:
                base = res
            kb, kb_big = COLLECTIVES["bench_step"]
            kw, kw_big = COLLECTIVES["w2v_round"]
            lat_b = (kb * latency_steps(hosts, False) + 2 * kb_big) * d
            step_model = base["step_s"] + (res["step_bytes"] / B if B else 0) + lat_b
            # a rank hands its part once to MPI, which sends it to each other rank
            w2v_bytes = max((hosts - 1) * sent, recv) / B if B else 0
            w2v_ring = base["w2v_s"] + w2v_bytes + rounds * (kw * latency_steps(hosts, True) +
                                                             2 * kw_big) * d
            w2v_direct = base["w2v_s"] + w2v_bytes + rounds * (kw + 2 * kw_big) * d
            res.update(step_model=step_model, w2v_model_ring=w2v_ring,
                       w2v_model_direct=w2v_direct)
            print(f"{hosts} {rate:>7} {delay:>6} | {res['step_s']:.3f} {step_model:.3f} | "
                  f"{secs:.1f} {w2v_ring:.1f} {w2v_direct:.1f} | step {res['step_bytes']} B, "
                  f"w2v {sent} B sent over {rounds} rounds | load {res['load']:.1f}", flush=True)
            if out:
                out.write(json.dumps(res) + "\n")
                out.flush()
    subprocess.run(sh + ["down"], check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", default="1,2,4")
    ap.add_argument("--epochs", default="1")
    ap.add_argument("--corpus")
    ap.add_argument("--mpiexec", default="mpirun")
    ap.add_argument("--tables", action="store_true")
    ap.add_argument("--simhosts", action="store_true")
    ap.add_argument("--links", default="1gbit:0.1ms,1gbit:1ms,1gbit:5ms,"
                    "100mbit:0.1ms,100mbit:1ms,100mbit:5ms")
    ap.add_argument("--out")
    args = ap.parse_args()
    build = os.environ.get("EMB_BUILD_DIR", os.path.join(ROOT, "build"))
    emb = os.path.join(build, "emb")
    corpus = args.corpus or subprocess.run(
        [os.path.join(ROOT, "scripts", "fetch-corpus.sh"), "sotu"], check=True,
        stdout=subprocess.PIPE, text=True).stdout.strip()
    if args.simhosts:
        return simhosts(args, build, corpus)
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
          f"T = {T:.0f} tokens, c = {c:.0f} words/s, M = {MERGE_RATE / 1e9:.0f} GB/s (assumed), "
          f"K = {COLLECTIVES['w2v_round'][0]} collectives per round of R - 1 latencies (ring)")
    print(f"{'link':>16} " + " ".join(f"{'R=' + str(r):>9}" for r in RANKS) +
          "   (million words/s; efficiency at R=64)")
    for name, bw, lat in LINKS:
        row = []
        for r in RANKS:
            k = COLLECTIVES["w2v_round"][0]
            t = T / c + (r - 1) * b / bw + (k * latency_steps(r, True) * lat if r > 1 else 0) + \
                (r * b / MERGE_RATE if r > 1 else 0)
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
