#!/usr/bin/env python3
"""Analogy accuracy of skip-gram's two negative-sampling forms over several seeds: negatives
drawn per (centre, context) pair, as the word2vec tool does ("emb-pair"), against one draw per
window shared by its context words ("emb-shared"), with gensim 4.2 as the reference for the
spread between seeds. Each cell is one layout (lines / oneline, as bench_word2vec.py writes
them) at one thread count; the table gives the mean and the sample standard deviation of the
accuracy over the seeds, and the difference shared - pair in units of the larger of the two
standard deviations ("emb" is emb train's default form; with a build whose default is per
pair, --tools emb,emb-shared,gensim compares the same two forms).

Same corpus, settings and evaluator as bench_word2vec.py (dim 100, window 5, negative 5,
sample 1e-3, min_count 5, 5 epochs, alpha 0.025; `emb eval-analogies` on questions-words.txt
with gensim's default restriction to the 30,000 most frequent words). Accuracy does not depend
on the machine's load; the wall times printed per run do.

Usage: nice -n 10 /usr/bin/python3 bench/eval_negatives.py [--seeds 1,2,3,4,5]
       [--threads 1,2] [--layouts lines,oneline] [--tools emb-pair,emb-shared,gensim]
       [--log FILE]   (JSON lines, one per run; EMB_BUILD_DIR picks the build)
       /usr/bin/python3 bench/eval_negatives.py --table LOG... [same selection options]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import bench_word2vec as bw


def summary(values):
    if not values:
        return float("nan"), float("nan")
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    return statistics.mean(values), sd


def print_table(results, layouts, threads, tools, seeds):
    print(f"\n# skip-gram analogy accuracy (%), mean +- sample standard deviation (number of "
          f"seeds) over seeds {','.join(map(str, seeds))}")
    head = f"{'layout':<8}{'threads':>8}" + "".join(f"{t + ' (seeds)':>21}" for t in tools)
    pair = "emb-pair" if "emb-pair" in tools else "emb"
    if pair in tools and "emb-shared" in tools:
        head += f"{'shared-pair':>13}{'/ max sd':>10}"
    print(head)
    for layout in layouts:
        for th in threads:
            row = f"{layout:<8}{th:>8}"
            stats = {t: summary(results.get((layout, th, t), [])) for t in tools}
            for t in tools:
                m, sd = stats[t]
                row += f"{m:>10.2f} +-{sd:>5.2f} ({len(results.get((layout, th, t), []))})"
            if pair in tools and "emb-shared" in tools:
                diff = stats["emb-shared"][0] - stats[pair][0]
                sd = max(stats["emb-shared"][1], stats[pair][1])
                row += f"{diff:>+13.2f}{diff / sd if sd > 0 else float('nan'):>+10.2f}"
            print(row)
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--layouts", default="lines,oneline")
    ap.add_argument("--tools", default="emb-pair,emb-shared,gensim")
    ap.add_argument("--log", help="append one JSON line per run to this file")
    ap.add_argument("--table", nargs="+", metavar="LOG",
                    help="train nothing: print the table of the runs in these --log files (a "
                         "grid split over several processes), for the cells, tools and seeds "
                         "asked")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    layouts = args.layouts.split(",")
    tools = args.tools.split(",")
    if args.table:
        results = {}
        for path in args.table:
            with open(path) as f:
                for r in map(json.loads, f):
                    if r["seed"] in seeds:
                        results.setdefault((r["layout"], r["threads"], r["tool"]), {})[
                            r["seed"]] = r["accuracy"]
        results = {k: [v[s] for s in sorted(v)] for k, v in results.items()}
        print_table(results, layouts, threads, tools, seeds)
        return 0
    raw = subprocess.run([os.path.join(bw.ROOT, "scripts", "fetch-corpus.sh"), "sotu"],
                         capture_output=True, text=True, check=True).stdout.strip()
    results = {}
    log = open(args.log, "a") if args.log else None
    with tempfile.TemporaryDirectory(prefix="emb-w2v-neg-") as work:
        corpora = {}
        for layout in layouts:
            corpora[layout] = os.path.join(work, f"sotu-{layout}.txt")
            ntok = bw.prepare(raw, corpora[layout], oneline=layout == "oneline")
        print(f"# State of the Union: {ntok} tokens; skip-gram, dim 100, window 5, negative 5, "
              f"5 epochs; {os.cpu_count()} CPUs (wall times: this machine's load)")
        print(f"{'layout':<8}{'threads':>8}  {'tool':<11}{'seed':>5}{'accuracy':>10}"
              f"{'(n/N)':>12}{'wall s':>8}")
        # emb's forms side by side first (the comparison asked for; a run cut short still
        # has both in every cell it reached), gensim (the reference for the spread) after them
        runs = [(layout, th, seed, tool) for group in ([t for t in tools if t != "gensim"],
                                                       [t for t in tools if t == "gensim"])
                for layout in layouts for th in threads for seed in seeds for tool in group]
        for layout, th, seed, tool in runs:
            wall, rss, acc, frac = bw.run_tool(tool, "sg", th, corpora[layout], work, seed=seed)
            os.remove(os.path.join(work, f"{tool}-sg-{th}-{seed}.bin"))
            results.setdefault((layout, th, tool), []).append(acc)
            print(f"{layout:<8}{th:>8}  {tool:<11}{seed:>5}{acc:>9.2f}%{frac:>12}{wall:>8.2f}")
            if log:
                log.write(json.dumps({"layout": layout, "threads": th, "tool": tool, "seed": seed,
                                      "accuracy": acc, "n/N": frac, "wall": wall,
                                      "peak_mb": rss}) + "\n")
                log.flush()
            sys.stdout.flush()
    print_table(results, layouts, threads, tools, seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
