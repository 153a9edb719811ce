#!/usr/bin/env python3
"""Load speed of vector files: emb against gensim (Debian python3-gensim) on the same file in
one run, and emb's binary readers against the speed of reading the same bytes.

Usage: /usr/bin/python3 bench/io.py [--mb 1000] [--dim 300] [--dir DIR]
       (make bench-io does this). The files are generated (never committed) in DIR
       (default: a temporary folder, removed afterwards). All reads are from the page cache
       (each file is read once before timing), so "disk speed" is read() of the file into
       new memory of its size (what any load must at least do); the ratio is what matters."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("EMB_BUILD_DIR", os.path.join(HERE, "..", "build"))
BENCH = os.path.join(BUILD, "bench", "bench_io")
EMB = os.path.join(BUILD, "emb")


def tool(*args):
    r = subprocess.run([BENCH, *map(str, args)], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"bench_io {' '.join(map(str, args))} failed: {r.stderr}")
    return {k: float(v) for k, v in re.findall(r"(\w+)=(\S+)", r.stdout)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=1000, help="size of the text file in MB")
    ap.add_argument("--dim", type=int, default=300)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    d = a.dir or tempfile.mkdtemp(prefix="emb-bench-io.")
    try:
        txt = os.path.join(d, "vectors.txt")
        rows = int(a.mb * 1e6 / (a.dim * 9.6 + 8))
        g = tool("gen", txt, rows, a.dim)
        print(f"generated {txt}: {g['bytes'] / 1e6:.0f} MB, {rows} rows x {a.dim} "
              f"(emb wrote it in {g['seconds']:.1f} s)")
        tool("raw", txt, 1)  # into the page cache
        e = tool("load", txt, a.reps)
        print(f"emb    word2vec text load: {e['seconds']:7.2f} s  ({g['bytes'] / 1e6 / e['seconds']:6.0f} MB/s, "
              f"best of {a.reps})")
        from gensim.models import KeyedVectors
        t0 = time.perf_counter()
        kv = KeyedVectors.load_word2vec_format(txt, binary=False)
        tg = time.perf_counter() - t0
        assert kv.vectors.shape == (rows, a.dim)
        del kv
        print(f"gensim word2vec text load: {tg:7.2f} s  ({g['bytes'] / 1e6 / tg:6.0f} MB/s, one run)")
        print(f"ratio gensim/emb (text): {tg / e['seconds']:.1f}x")
        for ext in ["bin", "safetensors", "npy"]:
            out = os.path.join(d, "vectors." + ext)
            subprocess.run([EMB, "convert", txt, out], check=True, capture_output=True)
            raw = tool("raw", out, a.reps)
            ld = tool("load", out, a.reps)
            mb = raw["bytes"] / 1e6
            print(f"emb {ext:11s} load: {ld['seconds']:6.3f} s ({mb / ld['seconds']:6.0f} MB/s); "
                  f"read() of the same file: {raw['seconds']:6.3f} s ({mb / raw['seconds']:6.0f} MB/s); "
                  f"ratio {ld['seconds'] / raw['seconds']:.2f}")
            if ext == "bin":
                t0 = time.perf_counter()
                KeyedVectors.load_word2vec_format(out, binary=True)
                tb = time.perf_counter() - t0
                print(f"gensim word2vec binary load: {tb:6.2f} s (ratio gensim/emb {tb / ld['seconds']:.1f}x)")
            os.remove(out)
    finally:
        if not a.dir:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
