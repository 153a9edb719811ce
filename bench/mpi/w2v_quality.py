"""Analogy accuracy of `mpirun -np N emb train` against the single process (docs/DISTRIBUTED.md,
"Word vectors"): State of the Union (scripts/fetch-corpus.sh sotu), skip-gram with emb's
defaults (dim 100, window 5, negative 5, sample 1e-3, min_count 5, 5 epochs), lowercased and
punctuation stripped, one thread per process; several seeds; questions-words.txt.
--subwords trains with fastText's n-grams (minn 3, maxn 6, 2,000,000 buckets).

    EMB_BUILD_DIR=build /usr/bin/python3 bench/mpi/w2v_quality.py [--np 1,2,4] [--seeds 1,2,3]
        [--subwords]

Runs as root need Open MPI's OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1.
np 0 in --np is the single process (`emb train --threads 1`, no mpirun). Times are wall
seconds of the whole command (reading the corpus included); peak MB is the largest peak
resident memory of one process (each rank runs under /usr/bin/time); the traffic is what one
rank sent and received per round, the mean over the ranks of rank 0's traffic lines.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", default="0,2,4")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--mpiexec", default="mpirun")
    ap.add_argument("--subwords", action="store_true")
    args = ap.parse_args()
    build = os.environ.get("EMB_BUILD_DIR", os.path.join(ROOT, "build"))
    emb = os.path.join(build, "emb")
    corpus = subprocess.run([os.path.join(ROOT, "scripts", "fetch-corpus.sh"), "sotu"],
                            check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    questions = os.path.join(ROOT, "data", "eval", "questions-words.txt")
    print("# State of the Union, skip-gram, emb defaults, --lowercase --strip-punct, "
          "1 thread per process" + (", subwords" if args.subwords else ""))
    print(f"{'processes':>9}  {'seed':>4}  {'accuracy':>9}  {'(n/N)':>10}  {'wall s':>7}"
          f"  {'peak MB':>8}  {'sent/round':>11}  {'received/round':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for np_ in [int(x) for x in args.np.split(",")]:
            accs = []
            for seed in [int(x) for x in args.seeds.split(",")]:
                out = os.path.join(tmp, f"v{np_}_{seed}.bin")
                cmd = ["/usr/bin/time", "-f", "peak-rss-kb %M", emb, "train", corpus, "-o", out,
                       "--lowercase", "--strip-punct", "--threads", "1", "--seed", str(seed)]
                cmd += ["--subwords"] if args.subwords else []
                if np_ > 0:
                    cmd = [args.mpiexec, "-np", str(np_), "--oversubscribe"] + cmd
                t0 = time.monotonic()
                text = subprocess.run(cmd, check=True, stderr=subprocess.PIPE, text=True).stderr
                wall = time.monotonic() - t0
                peak = max(int(x) for x in re.findall(r"peak-rss-kb (\d+)", text)) / 1024
                per = re.findall(r"merge traffic of rank \d+ of \d+: .*\((\d+) and (\d+) per "
                                 r"round\)", text)
                sent = sum(int(a) for a, _ in per) / len(per) if per else 0
                got = sum(int(b) for _, b in per) / len(per) if per else 0
                ev = subprocess.run([emb, "eval-analogies", out, questions], check=True,
                                    stdout=subprocess.PIPE, text=True).stdout
                m = re.search(r"total\D*?([\d.]+)%\s*\((\d+)/(\d+)\)", ev)
                if not m:
                    sys.exit(f"cannot read the accuracy in:\n{ev}")
                accs.append(float(m.group(1)))
                label = "single" if np_ == 0 else f"np {np_}"
                print(f"{label:>9}  {seed:>4}  {m.group(1):>8}%  {m.group(2) + '/' + m.group(3):>10}"
                      f"  {wall:7.1f}  {peak:8.1f}  {sent:11.0f}  {got:14.0f}", flush=True)
            print(f"{'':>9}  mean  {sum(accs) / len(accs):8.2f}%", flush=True)


if __name__ == "__main__":
    main()
