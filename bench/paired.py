"""Two or more commands timed in alternating pairs, for machines whose speed drifts (the
2-CPU virtual machines of docs/word2vec.md run whole minutes 30% slower than others): round
i runs every command once, in order on even rounds and in reverse on odd ones, and each
command's wall time is divided by the first command's of the same round. The median of
those ratios is steadier than a ratio of medians taken minutes apart.

    /usr/bin/python3 bench/paired.py ROUNDS "CMD0" "CMD1" [...]

Prints each round's times and ratios, then per command: the median ratio to CMD0, its range
and the median times. The commands run through the shell (environment variables may prefix
them); their output is discarded and a failure stops the run.
"""
import statistics
import subprocess
import sys
import time


def main():
    if len(sys.argv) < 4 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        sys.exit(__doc__)
    rounds, cmds = int(sys.argv[1]), sys.argv[2:]
    times = [[] for _ in cmds]
    for r in range(rounds):
        order = range(len(cmds)) if r % 2 == 0 else reversed(range(len(cmds)))
        row = {}
        for k in order:
            t0 = time.perf_counter()
            p = subprocess.run(cmds[k], shell=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
            row[k] = time.perf_counter() - t0
            if p.returncode != 0:
                sys.exit(f"command {k} failed ({p.returncode}): {p.stderr[-1000:]}")
        for k, t in row.items():
            times[k].append(t)
        print(f"round {r + 1}: " + " ".join(f"{row[k]:.3f}" for k in range(len(cmds))) +
              "  ratios " + " ".join(f"{row[k] / row[0]:.3f}" for k in range(1, len(cmds))),
              flush=True)
    for k in range(1, len(cmds)):
        ratios = [b / a for a, b in zip(times[0], times[k])]
        print(f"cmd{k}/cmd0: median {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.3f}-{max(ratios):.3f}); median times "
              f"{statistics.median(times[0]):.3f} s and {statistics.median(times[k]):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
