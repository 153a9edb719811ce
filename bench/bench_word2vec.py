#!/usr/bin/env python3
"""emb train against gensim 4.2 (Debian python3-gensim) and fastText 0.9.2 (Debian fasttext) on
the State of the Union corpus, in one run on one machine: wall time, words/s, analogy
accuracy on questions-words.txt (30,000 most frequent words, questions with a missing word
skipped; every tool's vectors scored by the same evaluator, `emb eval-analogies`, which
gives gensim's evaluate_word_analogies counts exactly) and peak resident memory, for
skip-gram and CBOW, at 1 and 2 threads.

Settings: dim 100, window 5, negative 5, sample 1e-3, min_count 5, 5 epochs.
All three tools read the same text: the corpus lowercased, ASCII punctuation stripped from
both ends of each token, in one of two layouts (--layouts): "lines", cut into lines of 1000
tokens (gensim gets it through LineSentence, i.e. as 1000-word sentences), and "oneline", the
whole corpus as one line without a newline, as text8 is (each tool then cuts it as it does:
emb and the word2vec tool every 1000 tokens, gensim's LineSentence every 10,000, fastText
every 1024). Learning rates: 0.025 for skip-gram, 0.05 for CBOW (the word2vec
tool's defaults) for emb and fastText; gensim uses its default 0.025 for both. "emb" is emb train
with its defaults (skip-gram: one draw of negatives per window, shared by its context words);
"emb-pair" adds --per-pair-negatives (a draw per (center, context) pair, as the word2vec tool,
gensim and fastText) and "emb-shared" --shared-negatives (the default, named); both are
skip-gram only (CBOW draws once a window either way).

--repeat N runs every tool of a row N times in alternating rounds (tool order reversed every
other round, so a slow phase of the machine falls on all of them) and reports each tool's
median wall time, the ratio of the medians and the range of the rounds' own ratios (each
round's tool wall over gensim's wall in that round); accuracy and memory are those of the
first round.

Usage: /usr/bin/python3 bench/bench_word2vec.py [--threads 1,2] [--models sg,cbow]
       [--tools emb,emb-pair,emb-shared,gensim,fasttext] [--layouts lines,oneline] [--repeat N]
       (make bench-w2v runs it with BENCH_W2V_FLAGS; EMB_BUILD_DIR picks the build)
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
BUILD = os.environ.get("EMB_BUILD_DIR", os.path.join(ROOT, "build"))
EMB = os.path.join(BUILD, "emb")
QUESTIONS = os.path.join(ROOT, "data", "eval", "questions-words.txt")
# emb's tools: its defaults, then skip-gram's two forms of negative sampling named explicitly
NEGATIVES = {"emb": [], "emb-shared": ["--shared-negatives"],
             "emb-pair": ["--per-pair-negatives"]}
PUNCT = "".join(chr(c) for c in range(33, 127) if not chr(c).isalnum())

GENSIM_SCRIPT = r"""
import sys, time, logging
from gensim.models import Word2Vec
from gensim.models.word2vec import LineSentence
corpus, out, sg, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
seed = int(sys.argv[5]) if len(sys.argv) > 5 else 1
t0 = time.perf_counter()
m = Word2Vec(LineSentence(corpus), vector_size=100, window=5, negative=5, hs=0, sample=1e-3,
             min_count=5, epochs=5, sg=sg, workers=threads, seed=seed)
t1 = time.perf_counter()
m.wv.save_word2vec_format(out, binary=True)
print(f"TRAIN_SECONDS {t1 - t0:.3f}")
"""


def prepare(src, dst, oneline=False):
    toks = []
    with open(src, encoding="utf-8") as f:
        for line in f:
            for t in line.split():
                t = t.strip(PUNCT)
                if t:
                    toks.append(t.translate(str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ",
                                                          "abcdefghijklmnopqrstuvwxyz")))
    with open(dst, "w", encoding="utf-8") as f:
        if oneline:
            f.write(" ".join(toks))
        else:
            for i in range(0, len(toks), 1000):
                f.write(" ".join(toks[i:i + 1000]) + "\n")
    return len(toks)


def peak_rss_mb(argv):
    """Peak RSS of a command through GNU time (-f %M, in KB)."""
    p = subprocess.run(["/usr/bin/time", "-f", "MAXRSS %M", *argv], capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({p.returncode}): {p.stderr[-2000:]}")
    m = re.findall(r"MAXRSS (\d+)", p.stderr)
    return int(m[-1]) / 1024.0, p


def accuracy(vectors):
    p = subprocess.run([EMB, "eval-analogies", vectors, QUESTIONS], capture_output=True,
                       text=True, check=True)
    m = re.search(r"^total: ([0-9.]+)% \((\d+)/(\d+)\)", p.stdout, re.M)
    return float(m.group(1)), f"{m.group(2)}/{m.group(3)}"


def run_tool(tool, model, threads, corpus, work, seed=1):
    """Trains with one tool; returns (wall s, peak MB, accuracy %, "n/N"). `seed` is emb's
    --seed and gensim's seed= (fastText keeps its own default seed)."""
    sg = model == "sg"
    lr = "0.025" if sg else "0.05"
    if tool in NEGATIVES:
        out = os.path.join(work, f"{tool}-{model}-{threads}-{seed}.bin")
        argv = [EMB, "train", corpus, "-o", out, "--model", "skipgram" if sg else "cbow",
                "--dim", "100", "--window", "5", "--negative", "5", "--sample", "1e-3",
                "--min-count", "5", "--epochs", "5", "--threads", str(threads), "--alpha", lr,
                "--seed", str(seed), "-q"] + NEGATIVES[tool]
    elif tool == "gensim":
        out = os.path.join(work, f"gensim-{model}-{threads}-{seed}.bin")
        script = os.path.join(work, "gensim_train.py")
        with open(script, "w") as f:
            f.write(GENSIM_SCRIPT)
        argv = ["/usr/bin/python3", script, corpus, out, "1" if sg else "0", str(threads),
                str(seed)]
    else:
        prefix = os.path.join(work, f"fasttext-{model}-{threads}-{seed}")
        out = prefix + ".vec"
        argv = ["fasttext", "skipgram" if sg else "cbow", "-input", corpus, "-output", prefix,
                "-dim", "100", "-ws", "5", "-neg", "5", "-t", "1e-3", "-minCount", "5",
                "-epoch", "5", "-thread", str(threads), "-lr", lr, "-minn", "0", "-maxn", "0",
                "-verbose", "0"]
    t0 = time.perf_counter()
    rss, p = peak_rss_mb(argv)
    wall = time.perf_counter() - t0
    m = re.search(r"TRAIN_SECONDS ([0-9.]+)", p.stdout or "")
    if m:  # gensim: the training call itself, without the interpreter and import time
        wall = float(m.group(1))
    acc, frac = accuracy(out)
    return wall, rss, acc, frac


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default="sg,cbow")
    ap.add_argument("--tools", default="emb,emb-pair,gensim,fasttext")
    ap.add_argument("--layouts", default="lines,oneline")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds per row (medians and the range of the rounds' ratios)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    tools = [t for t in args.tools.split(",") if t]
    if "fasttext" in tools and not shutil.which("fasttext"):
        print("# fasttext not installed (Debian: apt-get install fasttext): skipped")
        tools.remove("fasttext")
    raw = subprocess.run([os.path.join(ROOT, "scripts", "fetch-corpus.sh"), "sotu"],
                         capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="emb-w2v-bench-") as work:
        corpora = {}
        for layout in args.layouts.split(","):
            corpora[layout] = os.path.join(work, f"sotu-{layout}.txt")
            ntok = prepare(raw, corpora[layout], oneline=layout == "oneline")
        print(f"# State of the Union: {ntok} tokens (lowercased, punctuation stripped), "
              f"layouts {args.layouts} (lines: 1000 tokens a line; oneline: no newline); "
              f"dim 100, window 5, negative 5, sample 1e-3, min_count 5, 5 epochs; "
              f"{os.cpu_count()} CPUs")
        print(f"{'layout':<8}{'model':<6}{'threads':>8}  {'tool':<11}{'wall s':>8}{'words/s':>11}"
              f"{'accuracy':>10}{'(n/N)':>12}{'peak MB':>9}  {'tool/gensim':>11}{'RSS tool/gensim':>16}"
              + (f"  {'rounds tool/gensim':>20}" if args.repeat > 1 else ""))
        for layout, corpus in corpora.items():
            for model in args.models.split(","):
                for threads in [int(t) for t in args.threads.split(",")]:
                    use = [t for t in tools
                           if not (t in ("emb-pair", "emb-shared") and model == "cbow")]
                    rounds = []
                    for r in range(args.repeat):
                        order = use if r % 2 == 0 else use[::-1]
                        rounds.append({t: run_tool(t, model, threads, corpus, work)
                                       for t in order})
                    res = {t: (statistics.median(rd[t][0] for rd in rounds),) + rounds[0][t][1:]
                           for t in use}
                    for t in use:
                        wall, rss, acc, frac = res[t]
                        ratio = wall / res["gensim"][0] if "gensim" in res else float("nan")
                        mem = rss / res["gensim"][1] if "gensim" in res else float("nan")
                        spread = ""
                        if args.repeat > 1 and "gensim" in res:
                            rr = [rd[t][0] / rd["gensim"][0] for rd in rounds]
                            spread = f"  {min(rr):>9.3f}-{max(rr):<10.3f}"
                        print(f"{layout:<8}{model:<6}{threads:>8}  {t:<11}{wall:>8.2f}"
                              f"{ntok * 5 / wall:>11.0f}{acc:>9.2f}%{frac:>12}{rss:>9.1f}  "
                              f"{ratio:>11.3f}{mem:>16.2f}{spread}")
                    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
