#!/usr/bin/env python3
"""emb train --subwords against fastText 0.9.2 (Debian fasttext) with subwords, in one run on
one machine: wall time, analogy accuracy on questions-words.txt (the vectors each tool writes
for its vocabulary, scored by `emb eval-analogies` as bench_word2vec.py scores them) and peak
resident memory, for skip-gram and CBOW.

The corpus and settings are bench_word2vec.py's (State of the Union lowercased, punctuation
stripped, lines of 1000 tokens; dim 100, window 5, negative 5, sample 1e-3, min_count 5,
5 epochs; learning rate 0.025 skip-gram, 0.05 CBOW) plus fastText's subword defaults for
both tools: n-grams of 3 to 6 characters hashed into 2,000,000 buckets.

Each (model, threads) is run once per seed in --seeds (emb --seed, fastText -seed), and the
mean and the range of the accuracy over the seeds are printed after the rows, so that a
difference can be told from seed noise. words/s is corpus tokens x epochs / wall time.

Usage: /usr/bin/python3 bench/bench_subwords.py [--threads 2] [--models sg,cbow] [--seeds 1]
       (EMB_BUILD_DIR picks the build)
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_word2vec import EMB, ROOT, accuracy, peak_rss_mb, prepare  # noqa: E402

SETTINGS = ["--dim", "100", "--window", "5", "--negative", "5", "--sample", "1e-3",
            "--min-count", "5", "--epochs", "5"]


def run_tool(tool, model, threads, corpus, work, seed):
    sg = model == "sg"
    lr = "0.025" if sg else "0.05"
    if tool == "emb":
        out = os.path.join(work, f"emb-{model}-{threads}.vec")
        argv = [EMB, "train", corpus, "-o", out, "--model", "skipgram" if sg else "cbow",
                *SETTINGS, "--threads", str(threads), "--alpha", lr, "--subwords",
                "--minn", "3", "--maxn", "6", "--bucket", "2000000", "--seed", str(seed), "-q"]
    else:
        prefix = os.path.join(work, f"fasttext-{model}-{threads}")
        out = prefix + ".vec"
        argv = ["fasttext", "skipgram" if sg else "cbow", "-input", corpus, "-output", prefix,
                "-dim", "100", "-ws", "5", "-neg", "5", "-t", "1e-3", "-minCount", "5",
                "-epoch", "5", "-thread", str(threads), "-lr", lr, "-minn", "3", "-maxn", "6",
                "-bucket", "2000000", "-seed", str(seed), "-verbose", "0"]
    t0 = time.perf_counter()
    rss, _ = peak_rss_mb(argv)
    wall = time.perf_counter() - t0
    acc, frac = accuracy(out)
    return wall, rss, acc, frac


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="2")
    ap.add_argument("--models", default="sg,cbow")
    ap.add_argument("--seeds", default="1", help="comma-separated seeds, e.g. 1,2,3")
    args = ap.parse_args()
    if not shutil.which("fasttext"):
        print("fasttext is not installed (Debian: apt-get install fasttext)", file=sys.stderr)
        return 1
    raw = subprocess.run([os.path.join(ROOT, "scripts", "fetch-corpus.sh"), "sotu"],
                         capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="emb-subword-bench-") as work:
        corpus = os.path.join(work, "sotu-1000.txt")
        ntok = prepare(raw, corpus)
        print(f"# State of the Union: {ntok} tokens; subwords 3..6 characters, 2000000 buckets; "
              f"dim 100, window 5, negative 5, sample 1e-3, min_count 5, 5 epochs; "
              f"{os.cpu_count()} CPUs")
        print(f"{'model':<6}{'threads':>8}{'seed':>5}  {'tool':<9}{'wall s':>8}{'words/s':>10}"
              f"{'accuracy':>10}{'(n/N)':>12}{'peak MB':>9}  {'fastText/tool time':>18}")
        summary = []
        for model in args.models.split(","):
            for threads in [int(t) for t in args.threads.split(",")]:
                accs = {"emb": [], "fasttext": []}
                for seed in [int(s) for s in args.seeds.split(",")]:
                    res = {t: run_tool(t, model, threads, corpus, work, seed)
                           for t in ("emb", "fasttext")}
                    for t, (wall, rss, acc, frac) in res.items():
                        accs[t].append(acc)
                        print(f"{model:<6}{threads:>8}{seed:>5}  {t:<9}{wall:>8.2f}"
                              f"{ntok * 5 / wall:>10.0f}{acc:>9.2f}%{frac:>12}{rss:>9.1f}"
                              f"  {res['fasttext'][0] / wall:>18.2f}")
                    sys.stdout.flush()
                for t, a in accs.items():
                    summary.append(f"{model:<6}{threads:>8}  {t:<9} accuracy mean {sum(a) / len(a):.2f}%"
                                   f" (min {min(a):.2f}%, max {max(a):.2f}%, {len(a)} seeds)")
        print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
