"""`mpirun -np N emb train` (docs/DISTRIBUTED.md, "Word vectors"), through the command:

  - `mpirun -np 1 emb train` writes the file `emb train --threads 1` writes, byte for byte;
  - `mpirun -np 2 emb train` twice: the same file; with --checkpoint-every, the checkpoint
    rank 0 wrote during the run, resumed with `mpirun -np 2 ... --resume`, gives that file
    too; resumed at 3 ranks it is refused (2 lanes), with a message and nothing written;
  - without -q, rank 0 prints each rank's merge traffic: every rank's line, the same number of
    rounds, and what one rank received is what the other sent (2 ranks); one rank sends nothing;
  - with subwords (`-minn 3 -maxn 6`, fastText's 2,000,000 buckets, `--save-model`):
    `mpirun -np 1` writes the .bin model and the .vec `emb train --threads 1` writes, byte
    for byte; two `-np 2` runs write the same files, and so does the second one's checkpoint
    resumed at 2 ranks; Debian's `fasttext` loads the `-np 2`
    model and prints the vectors `emb lookup` gives from it, for a word of the vocabulary and
    for unseen words;
  - a rank killed during training: mpirun returns non-zero within a bound, and no output
    file is left.

    w2v_cli.py MPIEXEC EMB
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BOUND = 120  # seconds: a hang is what the fault check catches (it takes a few seconds)


def make_corpus(path, lines):
    s = 12345
    with open(path, "w") as f:
        for line in range(lines):
            topic, n = line % 5, 6 + line % 11
            words = []
            for _ in range(n):
                s = (s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
                u = s >> 33
                words.append(f"w{u // 4 % 8}" if u % 4 == 0 else f"w{8 + topic * 30 + u // 4 % 40}")
            f.write(" ".join(words) + "\n")


def run(cmd, want_rc=0):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    if (p.returncode == 0) != (want_rc == 0):
        print(p.stdout)
        sys.exit(f"FAIL: {' '.join(cmd)} returned {p.returncode}")
    return p.stdout


def read(path):
    with open(path, "rb") as f:
        return f.read()


def rank_pid(mpirun_pid, rank):
    """The pid of the given rank among mpirun's children, or None."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status") as f:
                ppid = next(int(l.split()[1]) for l in f if l.startswith("PPid:"))
            if ppid != mpirun_pid:
                continue
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except (OSError, StopIteration):
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(d)
    return None


def lookup(cmd, model, words):
    """Each word's vector as printed by cmd (fasttext print-word-vectors or emb lookup --raw),
    every value as C++'s setprecision(5) (printf's %.5g) prints it."""
    p = subprocess.run(cmd + [model] + ([] if cmd[-1] == "print-word-vectors" else words),
                       input="\n".join(words) + "\n", stdout=subprocess.PIPE, text=True,
                       timeout=600)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} {model} returned {p.returncode}")
    out = {}
    for line in p.stdout.splitlines():
        parts = line.split()
        out[parts[0]] = ["%.5g" % float(x) for x in parts[1:]]
    return out


def subwords(mpi, emb, d, train):
    """Distributed training with fastText's n-grams against the single process and fastText."""
    sub = train + ["-minn", "3", "-maxn", "6"]
    ckpt = os.path.join(d, "sub.ckpt")
    keep = ["--checkpoint", ckpt, "--keep-checkpoint"]
    files = {}
    for name, cmd in (("single", [emb] + sub + ["--threads", "1"]),
                      ("np1", mpi + ["1", emb] + sub), ("np2a", mpi + ["2", emb] + sub),
                      ("np2b", mpi + ["2", emb] + sub + keep + ["--checkpoint-every", "0.000001"]),
                      ("resumed", mpi + ["2", emb] + sub + keep + ["--resume", ckpt])):
        prefix = os.path.join(d, "sub-" + name)
        run(cmd + ["-o", prefix + ".vec", "--save-model", prefix + ".bin"])
        files[name] = (read(prefix + ".bin"), read(prefix + ".vec"))
    if files["np1"] != files["single"]:
        sys.exit("FAIL: with subwords, mpirun -np 1 emb train differs from emb train --threads 1")
    if files["np2a"] != files["np2b"]:
        sys.exit("FAIL: with subwords, two runs of mpirun -np 2 emb train differ")
    if files["resumed"] != files["np2a"]:
        sys.exit("FAIL: with subwords, the -np 2 run resumed from its checkpoint differs")
    if files["np2a"] == files["single"]:
        sys.exit("FAIL: with subwords, -np 2 gave the single process's model (no ranks?)")
    model = os.path.join(d, "sub-np2a.bin")
    words = ["w10", "w7", "w123456", "xw10", "w10w"]  # in the vocabulary, then unseen
    fasttext = shutil.which("fasttext")
    if not fasttext:
        sys.exit("FAIL: Debian's fasttext is needed (scripts/deps.sh test)")
    ft = lookup([fasttext, "print-word-vectors"], model, words)
    em = lookup([emb, "lookup", "--raw"], model, words)
    for w in words:
        if w not in ft or ft[w] != em[w] or len(ft[w]) != 8:
            sys.exit(f"FAIL: fasttext gives {ft.get(w)} for {w}, emb {em.get(w)}")
        if all(float(x) == 0 for x in ft[w]):
            sys.exit(f"FAIL: the zero vector for {w}")
    print("ok: subwords: np 1 = single process (.bin and .vec); np 2 twice equal; resumed = "
          "uninterrupted; fasttext loads the np 2 model and gives emb's vectors for seen and "
          "unseen words")


def main():
    mpiexec, emb = sys.argv[1], sys.argv[2]
    mpi = [mpiexec, "--oversubscribe", "-np"]
    with tempfile.TemporaryDirectory() as d:
        corpus = os.path.join(d, "corpus.txt")
        make_corpus(corpus, 12000)
        train = ["train", corpus, "--dim", "8", "--window", "3", "--negative", "3",
                 "--min-count", "2", "--epochs", "2", "--seed", "5", "-q"]
        single = os.path.join(d, "single.bin")
        run([emb] + train + ["-o", single, "--threads", "1"])
        np1 = os.path.join(d, "np1.bin")
        run(mpi + ["1", emb] + train + ["-o", np1])
        if read(np1) != read(single):
            sys.exit("FAIL: mpirun -np 1 emb train differs from emb train --threads 1")
        a, b = os.path.join(d, "np2a.bin"), os.path.join(d, "np2b.bin")
        run(mpi + ["2", emb] + train + ["-o", a])
        ckpt = os.path.join(d, "run.ckpt")
        run(mpi + ["2", emb] + train + ["-o", b, "--checkpoint", ckpt, "--checkpoint-every",
                                        "0.000001", "--keep-checkpoint"])
        if read(a) != read(b):
            sys.exit("FAIL: two runs of mpirun -np 2 emb train differ")
        if not os.path.exists(ckpt):
            sys.exit("FAIL: no checkpoint was written during the run")
        resumed = os.path.join(d, "resumed.bin")
        run(mpi + ["2", emb] + train + ["-o", resumed, "--resume", ckpt, "--keep-checkpoint"])
        if read(resumed) != read(a):
            sys.exit("FAIL: the run resumed from its checkpoint differs from the uninterrupted run")
        three = os.path.join(d, "np3.bin")
        text = run(mpi + ["3", emb] + train + ["-o", three, "--resume", ckpt], want_rc=1)
        if "lanes" not in text or os.path.exists(three):
            print(text)
            sys.exit("FAIL: resuming 2 lanes at 3 ranks was not refused with a message")
        print("ok: np 1 = single process; np 2 twice equal; resumed = uninterrupted; "
              "3 ranks refused")
        subwords(mpi, emb, d, train)

        # The traffic summary (rank 0 alone prints it, for every rank).
        loud = [x for x in train if x != "-q"]
        for n in (1, 2):
            text = run(mpi + [str(n), emb] + loud + ["-o", os.path.join(d, f"loud{n}.bin")])
            lines = re.findall(r"merge traffic of rank (\d+) of (\d+): sent (\d+) bytes, "
                               r"received (\d+) over (\d+) rounds", text)
            if sorted(int(x[0]) for x in lines) != list(range(n)) or \
                    any(int(x[1]) != n for x in lines):
                print(text)
                sys.exit(f"FAIL: at {n} ranks the traffic lines are not one per rank")
            sent = [int(x[2]) for x in sorted(lines)]
            received = [int(x[3]) for x in sorted(lines)]
            rounds = {int(x[4]) for x in lines}
            if len(rounds) != 1 or min(rounds) < 1:
                sys.exit(f"FAIL: rounds {rounds}")
            if n == 1 and (sent != [0] or received != [0]):
                sys.exit(f"FAIL: one rank sent {sent} and received {received}")
            if n == 2 and (received != [sent[1], sent[0]] or min(sent) == 0):
                sys.exit(f"FAIL: 2 ranks sent {sent} and received {received}")
        print("ok: traffic lines at 1 and 2 ranks")

        # A rank killed while training.
        make_corpus(corpus, 200000)
        out = os.path.join(d, "killed.bin")
        marker = os.path.join(d, "killed.ckpt")
        cmd = mpi + ["2", emb] + train[:-1] + ["--epochs", "50", "-o", out, "--checkpoint",
                                               marker, "--checkpoint-every", "0.000001"]
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        victim = None
        while time.monotonic() - t0 < BOUND and p.poll() is None:
            if os.path.exists(marker):  # rank 0 checkpointed: training is under way
                victim = rank_pid(p.pid, 1)
                if victim:
                    break
            time.sleep(0.05)
        if victim is None:
            p.kill()
            sys.exit(f"FAIL: training did not start (rank 1 not found, mpirun {p.poll()})")
        os.kill(victim, signal.SIGKILL)
        t1 = time.monotonic()
        try:
            text, _ = p.communicate(timeout=BOUND)
        except subprocess.TimeoutExpired:
            p.kill()
            sys.exit(f"FAIL: mpirun still running {BOUND} s after rank 1 was killed (a hang)")
        took = time.monotonic() - t1
        print(text)
        if p.returncode == 0:
            sys.exit("FAIL: mpirun returned 0 although rank 1 was killed")
        if os.path.exists(out):
            sys.exit("FAIL: an output file was left behind")
        print(f"ok: rank 1 killed: mpirun returned {p.returncode} after {took:.1f} s, no output")


if __name__ == "__main__":
    main()
