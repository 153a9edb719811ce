"""Hostile input to the emb CLI: training that diverges, sizes that overflow, zero-width
tables, files replaced or truncated while they are read, device nodes, symlinks and pipes as
inputs and outputs, tampered checkpoints, stale temporary files and signals.

Registered twice: with the normal build (label cli) and with the sanitizer build (label
unit, so that `make test` runs it under AddressSanitizer, UndefinedBehaviorSanitizer and
LeakSanitizer: EMB_SANITIZED=1 then).
"""
import fcntl
import io
import json
import math
import os
import random
import re
import signal
import stat
import struct
import subprocess
import threading
import time

import numpy as np
import pytest

import conftest
from conftest import run

SANITIZED = os.environ.get("EMB_SANITIZED") == "1"


# ---- helpers ----

def st_bytes(header, data=b"", header_len=None):
    """A safetensors file; header_len pads the JSON header to that many bytes."""
    h = json.dumps(header, separators=(",", ":")).encode()
    n = header_len if header_len is not None else len(h) + (-len(h) % 8)
    assert n >= len(h)
    h += b" " * (n - len(h))
    return struct.pack("<Q", len(h)) + h + data


def npy_bytes(header, data=b""):
    h = header.encode("latin-1")
    h += b" " * (-(10 + len(h) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data


def synthetic(path, lines=400, seed=1, words_per_line=20):
    return conftest.synthetic(path, lines, seed, words_per_line, the="the")


def small_vec(path, rows=3, dim=4, prefix="w"):
    with open(path, "w") as f:
        f.write(f"{rows} {dim}\n")
        for i in range(rows):
            f.write(prefix + f"{i:06d} " + " ".join(f"{i + k / 8:g}" for k in range(dim)) + "\n")
    return str(path)


def temporaries(folder):
    return sorted(n for n in os.listdir(folder) if ".tmp." in n)


def fnv1a(data):
    """A checkpoint's checksum over the bytes after the magic (docs/word2vec.md): FNV-1a 64
    from FNV's offset basis; version 1 started from 1469598103934665603."""
    version = struct.unpack_from("<Q", data, 0)[0]
    h = 1469598103934665603 if version == 1 else 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def one_line_error(r, cmd):
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.startswith(f"emb {cmd}: "), r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    assert "emb_" not in r.stderr, "a CLI message names an API call: " + r.stderr
    return r.stderr


# ---- training that diverges ----

@pytest.mark.parametrize("model", ["skipgram", "cbow", "per-pair"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kernels", ["ref", "auto"])
def test_diverging_training_stops_with_an_error(emb_bin, tmp_path, model, threads, kernels):
    """alpha 1 without subsampling makes these vectors blow up to infinity and NaN: the run
    must stop with a message naming what diverged (it read the sigmoid table far out of
    bounds and died with SIGSEGV), and write no output."""
    if SANITIZED and (threads == 2 or kernels == "ref"):
        pytest.skip("one variant per model under the sanitizers (time)")
    corpus = synthetic(tmp_path / "c.txt")
    extra = ["--per-pair-negatives"] if model == "per-pair" else ["--model", model]
    out = tmp_path / "v.vec"
    r = run([emb_bin, "train", corpus, "-o", str(out), "--alpha", "1", "--sample", "0",
             "--epochs", "5", "--dim", "20", "--min-count", "1", "--threads", str(threads),
             "-q", *extra], env=dict(os.environ, EMB_KERNELS=kernels))
    msg = one_line_error(r, "train")
    assert "training diverged" in msg
    assert re.search(r'vector of "(red|green|blue|yellow|purple|orange|cat|dog|horse|mouse|'
                     r'sheep|goat|the)"', msg), msg
    assert "alpha 1" in msg
    assert not out.exists()
    assert temporaries(tmp_path) == []


@pytest.mark.parametrize("alpha", ["2", "1e30", "1e300", "0"])
def test_alpha_has_a_sane_range(emb_bin, tmp_path, alpha):
    corpus = synthetic(tmp_path / "c.txt", lines=20)
    r = run([emb_bin, "train", corpus, "-o", str(tmp_path / "v.vec"), "--alpha", alpha, "-q"])
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "--alpha" in r.stderr and "(0, 1]" in r.stderr, r.stderr


@pytest.mark.parametrize("n", [str(2 ** 62), str(2 ** 62 + 1), str(2 ** 63 - 1)])
def test_max_sentence_that_would_overflow_is_refused(emb_bin, tmp_path, n):
    """2^62 tokens of 4 bytes wrapped the buffer size to 0 and the trainer wrote past it."""
    corpus = synthetic(tmp_path / "c.txt", lines=20)
    r = run([emb_bin, "train", corpus, "-o", str(tmp_path / "v.vec"), "--max-sentence", n,
             "--min-count", "1", "--threads", "1", "-q"])
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "--max-sentence" in r.stderr and "2147483647" in r.stderr, r.stderr


def test_longest_max_sentence_trains(emb_bin, tmp_path):
    """The largest accepted value needs no buffer larger than the corpus."""
    corpus = synthetic(tmp_path / "c.txt", lines=20)
    r = run([emb_bin, "train", corpus, "-o", str(tmp_path / "v.vec"), "--max-sentence",
             "2147483647", "--min-count", "1", "--threads", "1", "--dim", "8", "-q"])
    assert r.returncode == 0, r.stderr


# ---- checkpoints: every field range-checked ----

def checkpoint(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt")
    ck = tmp_path / "x.ckpt"
    r = run([emb_bin, "train", corpus, "-o", str(tmp_path / "v.bin"), "--min-count", "1",
             "--threads", "1", "--dim", "8", "--epochs", "40", "--checkpoint", str(ck),
             "--checkpoint-every", "0.000001", "--keep-checkpoint", "-q"])
    assert r.returncode == 0, r.stderr
    assert ck.exists()
    # the offsets below are those of version 4 (a new layout must update them)
    assert struct.unpack_from("<Q", ck.read_bytes(), 8) == (4,), "not a version 4 checkpoint"
    return corpus, ck


# Layout (docs/word2vec.md, version 4): magic, version, 17 options, 64 bytes of subword and
# phrase options, the corpus files (a count, then each its name's length, name, text bytes
# and fingerprint), V, token ids, fingerprint, words_done, then per thread lo, hi, pos,
# epoch, rng; words; both tables; checksum.
FILES = 8 + 8 + 17 * 8 + 64


def vocab_size_at(data):
    """The offset of V: after the list of corpus files."""
    (n,) = struct.unpack_from("<Q", data, FILES)
    at = FILES + 8
    for _ in range(n):
        (length,) = struct.unpack_from("<Q", data, at)
        at += 8 + length + 16
    return at


def offset(data, where):
    """where: ("done" | "lane0", delta)."""
    base = vocab_size_at(data) + 3 * 8
    return base + (8 if where[0] == "lane0" else 0) + where[1]


def patched(ck, edits, name):
    data = bytearray(ck.read_bytes())
    for where, fmt, value in edits:
        off = where if isinstance(where, int) else offset(data, where)
        struct.pack_into(fmt, data, off, value)
    struct.pack_into("<Q", data, len(data) - 8, fnv1a(bytes(data[8:-8])))
    out = ck.parent / name
    out.write_bytes(bytes(data))
    return out


def resume(emb_bin, tmp_path, corpus, ck):
    return run([emb_bin, "train", corpus, "-o", str(tmp_path / "r.bin"), "--min-count", "1",
                "--threads", "1", "--dim", "8", "--epochs", "40", "--resume", str(ck), "-q"])


@pytest.mark.parametrize("what,edits,needle", [
    ("words_done near INT64_MAX", [(("done", 0), "<q", 2 ** 63 - 10)], "words done (9223372036854775798) do not match"),
    ("words_done beyond the total", [(("done", 0), "<q", 40 * 10 ** 6)], "words done (40000000) do not match"),
    ("words_done negative", [(("done", 0), "<q", -5)], "do not match"),
    ("epoch 2^32", [(("lane0", 24), "<Q", 2 ** 32)], "epoch"),
    ("epoch beyond the epochs", [(("lane0", 24), "<Q", 41)], "epoch"),
    ("random state zero", [(("lane0", 32), "<Q", 0)], "random state"),
])
def test_tampered_checkpoint_fields_are_refused(emb_bin, tmp_path, what, edits, needle):
    """The checksum re-sealed after the edit, so only the range checks can catch it."""
    corpus, ck = checkpoint(emb_bin, tmp_path)
    bad = patched(ck, edits, "bad.ckpt")
    r = resume(emb_bin, tmp_path, corpus, bad)
    msg = one_line_error(r, "train")
    assert needle in msg, msg
    assert not (tmp_path / "r.bin").exists()


def test_checkpoint_holding_nan_is_refused(emb_bin, tmp_path):
    corpus, ck = checkpoint(emb_bin, tmp_path)
    data = ck.read_bytes()
    # the input table starts after the words: find it from the end (two tables, checksum)
    (V,) = struct.unpack_from("<Q", data, vocab_size_at(data))
    table = len(data) - 8 - 2 * V * 8 * 4
    bad = patched(ck, [(table + 3 * 8 * 4 + 4, "<f", float("nan"))], "nan.ckpt")
    r = resume(emb_bin, tmp_path, corpus, bad)
    msg = one_line_error(r, "train")
    assert "NaN or infinite" in msg and "input vector of" in msg, msg
    bad = patched(ck, [(len(data) - 8 - 4, "<f", float("inf"))], "inf.ckpt")
    msg = one_line_error(resume(emb_bin, tmp_path, corpus, bad), "train")
    assert "NaN or infinite" in msg and "output vector of" in msg, msg


def test_resume_from_a_folder_says_so(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt", lines=20)
    r = run([emb_bin, "train", corpus, "-o", str(tmp_path / "v.vec"), "--min-count", "1",
             "--resume", str(tmp_path), "-q"])
    msg = one_line_error(r, "train")
    assert "is a directory" in msg and "allocate" not in msg, msg


# ---- zero-width and empty tables ----

HUGE = 2 ** 58


@pytest.fixture
def zero_width(tmp_path):
    files = {
        "f32.safetensors": st_bytes({"weight": {"dtype": "F32", "shape": [HUGE, 0], "data_offsets": [0, 0]}}),
        "f16.safetensors": st_bytes({"weight": {"dtype": "F16", "shape": [HUGE, 0], "data_offsets": [0, 0]}}),
        "f16big.safetensors": st_bytes({"weight": {"dtype": "F16", "shape": [2 ** 59, 0],
                                                   "data_offsets": [0, 0]}}),
        "t.npy": npy_bytes(f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({HUGE}, 0), }}"),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return tmp_path


@pytest.mark.parametrize("name", ["f32.safetensors", "f16.safetensors", "f16big.safetensors", "t.npy"])
def test_info_on_a_zero_width_table_does_no_per_row_work(emb_bin, zero_width, name):
    """2^58 rows of dimension 0 in under 100 bytes: info ran its norm loop once per row."""
    r = run([emb_bin, "info", str(zero_width / name)], timeout=60)
    assert r.returncode == 0, r.stderr
    rows = 2 ** 59 if "big" in name else HUGE
    assert f"rows:       {rows}\n" in r.stdout
    assert "dim:        0\n" in r.stdout
    assert f"norms:      min 0, mean 0, max 0 (L2, over {rows} rows)\n" in r.stdout
    assert f"zero rows:  {rows}\n" in r.stdout


@pytest.mark.parametrize("name", ["f32.safetensors", "f16.safetensors", "f16big.safetensors", "t.npy"])
@pytest.mark.parametrize("out,dtype", [("o.safetensors", "f16"), ("o.safetensors", "f32"),
                                       ("o.safetensors", "bf16"), ("o.npy", "f32"),
                                       ("o.npy", "f16")])
def test_convert_a_zero_width_table_and_read_it_back(emb_bin, zero_width, name, out, dtype):
    """What emb writes it reads: a [2^59, 0] F16 table was written, then refused."""
    r = run([emb_bin, "convert", str(zero_width / name), str(zero_width / out), "--dtype", dtype],
            timeout=60)
    assert r.returncode == 0, r.stderr
    r = run([emb_bin, "info", str(zero_width / out)], timeout=60)
    assert r.returncode == 0, r.stderr
    assert "dim:        0\n" in r.stdout


def test_zero_width_table_to_word_formats_is_refused(emb_bin, tmp_path):
    (tmp_path / "z.safetensors").write_bytes(st_bytes(
        {"__metadata__": {"emb.vocab": "a\nb"},
         "weight": {"dtype": "F32", "shape": [2, 0], "data_offsets": [0, 0]}}))
    for out in ("z.vec", "z.bin"):
        r = run([emb_bin, "convert", str(tmp_path / "z.safetensors"), str(tmp_path / out)])
        msg = one_line_error(r, "convert")
        assert "dimension 0" in msg, msg
        assert not (tmp_path / out).exists()


@pytest.mark.parametrize("shape", [[3, 0], [0, 3], [0, 0]])
@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16", "F64"])
def test_empty_tables_through_every_command(emb_bin, tmp_path, shape, dtype):
    """memcpy(NULL, p, 0) aborted the sanitizer build on such shapes."""
    rows = shape[0]
    meta = {"emb.vocab": "\n".join(f"w{i}" for i in range(rows))} if rows else {}
    hdr = {"weight": {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]}}
    if rows:
        hdr["__metadata__"] = meta
    p = tmp_path / "e.safetensors"
    p.write_bytes(st_bytes(hdr))
    assert run([emb_bin, "info", str(p)]).returncode == 0
    for out, extra in (("o.safetensors", []), ("o.npy", []), ("q.safetensors", ["--dtype", "f16"])):
        r = run([emb_bin, "convert", str(p), str(tmp_path / out), *extra])
        assert r.returncode == 0, r.stderr
    if rows:
        r = run([emb_bin, "lookup", "--raw", str(p), "w1"])
        assert r.returncode == 0 and r.stdout == "w1\n", r.stderr
        r = run([emb_bin, "lookup", str(p), "w1", "w2"])
        assert r.returncode == 0, r.stderr
        r = run([emb_bin, "nn", str(p), "w1"])
        if shape[1]:
            assert r.returncode == 0, r.stderr
        else:  # vectors of no values have no direction to compare
            assert "at least one row and column" in one_line_error(r, "nn")


def test_quantized_file_with_no_rows_and_a_huge_dim(emb_bin, tmp_path):
    """0 rows with emb.dim 2^40: converting it to int8 sized a row buffer from the dim (a
    terabyte)."""
    for d in (2 ** 40, 2 ** 33):
        p = tmp_path / f"q{d}.safetensors"
        p.write_bytes(st_bytes({"__metadata__": {"format": "pt", "emb.qtype": "int8", "emb.dim": str(d)},
                                "weight": {"dtype": "U8", "shape": [0, d + 8], "data_offsets": [0, 0]}}))
        for dtype in ("int8", "int4", "f16"):
            r = run(["/bin/sh", "-c", 'ulimit -v 4000000; exec "$@"', "sh", emb_bin, "convert", str(p),
                     str(tmp_path / "o.safetensors"), "--dtype", dtype]) if not SANITIZED else \
                run([emb_bin, "convert", str(p), str(tmp_path / "o.safetensors"), "--dtype", dtype])
            assert r.returncode == 0, (d, dtype, r.stderr)


# ---- files replaced or truncated while they are read ----

def make_pair(tmp_path, rows=200, dim=4):
    """A and B: the same shapes, words aNNNNNN / bNNNNNN, row i holds i + 0.25 (A) or
    i + 0.75 (B)."""
    for tag, frac in (("a", 0.25), ("b", 0.75)):
        words = "\n".join(f"{tag}{i:06d}" for i in range(rows))
        vals = np.repeat(np.arange(rows, dtype=np.float32)[:, None] + frac, dim, axis=1)
        (tmp_path / f"{tag}.safetensors").write_bytes(st_bytes(
            {"__metadata__": {"format": "pt", "emb.vocab": words},
             "weight": {"dtype": "F32", "shape": [rows, dim], "data_offsets": [0, rows * dim * 4]}},
            vals.tobytes()))


def test_no_torn_reads_while_the_file_is_replaced(emb_bin, tmp_path):
    """A writer replaces X with A and B in turn (copy + rename); every lookup must print
    the words and the values of the same version."""
    make_pair(tmp_path)
    x = tmp_path / "x.safetensors"
    a, b = (tmp_path / "a.safetensors").read_bytes(), (tmp_path / "b.safetensors").read_bytes()
    x.write_bytes(a)
    stop = threading.Event()

    def writer():
        k = 0
        while not stop.is_set():
            t = tmp_path / f"t{k % 2}"
            t.write_bytes(a if k % 2 else b)
            os.replace(t, x)
            k += 1

    th = threading.Thread(target=writer)
    th.start()
    torn, runs, t0 = [], 0, time.time()
    try:
        # at least 50 lookups however slow the machine is, more while there is time
        while runs < 50 or (runs < 300 and time.time() - t0 < 20):
            r = run([emb_bin, "lookup", "--raw", str(x), "a000005", "b000005"])
            runs += 1
            for line in r.stdout.splitlines():
                word, *vals = line.split()
                want = 5.25 if word.startswith("a") else 5.75
                if any(float(v) != want for v in vals):
                    torn.append(line)
    finally:
        stop.set()
        th.join()
    assert not torn, f"{len(torn)} torn reads of {runs}, e.g. {torn[:3]}"


def test_a_mapped_table_truncated_under_emb_nn_is_an_error(emb_bin, tmp_path):
    """emb nn maps a quantized table; truncated under it, the next query touched pages past
    the end of the file: SIGBUS, exit 135 and no message."""
    rows, dim = 4000, 64
    rng = np.random.default_rng(3)
    vec = tmp_path / "v.vec"
    with open(vec, "w") as f:
        f.write(f"{rows} {dim}\n")
        for i in range(rows):
            f.write(f"w{i} " + " ".join(f"{v:.4f}" for v in rng.standard_normal(dim)) + "\n")
    q = tmp_path / "q.safetensors"
    assert run([emb_bin, "convert", str(vec), str(q), "--dtype", "int8"]).returncode == 0
    p = subprocess.Popen([emb_bin, "nn", str(q), "-k", "3"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdin.write("w1\n")
    p.stdin.flush()
    first = p.stdout.readline()
    assert first.startswith("w"), first
    os.truncate(q, 4096)
    out, err = p.communicate(f"w{rows - 1}\n", timeout=60)
    assert p.returncode == 1, (p.returncode, err)
    assert err.startswith("emb nn: "), err
    assert str(q) in err and "shrank" in err, err


# ---- outputs that are not regular files ----

@pytest.fixture
def vec(tmp_path):
    return small_vec(tmp_path / "in.vec")


def converted(emb_bin, tmp_path, vec):
    ref = tmp_path / "ref.vec"
    assert run([emb_bin, "convert", vec, str(ref)]).returncode == 0
    return ref.read_bytes()


def test_writing_to_a_fifo_streams_through_it(emb_bin, tmp_path, vec):
    want = converted(emb_bin, tmp_path, vec)
    n = tmp_path / "n"
    os.mkfifo(n)
    got = []
    th = threading.Thread(target=lambda: got.append(open(n, "rb").read()))
    th.start()
    r = run([emb_bin, "convert", vec, str(n), "--to", "vec"], timeout=60)
    th.join(timeout=60)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISFIFO(os.lstat(n).st_mode), "the FIFO was replaced"
    assert got == [want]
    assert temporaries(tmp_path) == []


def test_a_symlink_to_standard_output_is_written_through(emb_bin, tmp_path, vec):
    want = converted(emb_bin, tmp_path, vec)
    n = tmp_path / "n"
    os.symlink("/proc/self/fd/1", n)
    r = subprocess.run([emb_bin, "convert", vec, str(n), "--to", "vec"], capture_output=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == want
    assert os.path.islink(n) and os.readlink(n) == "/proc/self/fd/1"


def test_a_symlink_to_a_file_replaces_the_target(emb_bin, tmp_path, vec):
    want = converted(emb_bin, tmp_path, vec)
    (tmp_path / "sub").mkdir()
    target = tmp_path / "sub" / "target.vec"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.vec"
    os.symlink("sub/target.vec", link)
    r = run([emb_bin, "convert", vec, str(link)])
    assert r.returncode == 0, r.stderr
    assert os.path.islink(link) and os.readlink(link) == "sub/target.vec"
    assert target.read_bytes() == want
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert temporaries(tmp_path) == [] and temporaries(tmp_path / "sub") == []


def test_a_dangling_symlink_is_not_written_through(emb_bin, tmp_path, vec):
    link = tmp_path / "link.vec"
    os.symlink("missing/nothing.vec", link)
    msg = one_line_error(run([emb_bin, "convert", vec, str(link)]), "convert")
    assert "symbolic link" in msg, msg
    assert os.path.islink(link) and not os.path.exists(tmp_path / "missing")


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_character_device_is_written_through(emb_bin, tmp_path, vec):
    """As root, -o /dev/null replaced the system's device with a regular file."""
    n = tmp_path / "null"
    os.mknod(n, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    for out in ("null.safetensors", "null.npy", "null.bin"):
        os.symlink("null", tmp_path / out)
        r = run([emb_bin, "convert", vec, str(tmp_path / out)])
        assert r.returncode == 0, r.stderr
        assert os.path.islink(tmp_path / out)
    r = run([emb_bin, "convert", vec, str(n), "--to", "vec"])
    assert r.returncode == 0, r.stderr
    r = run([emb_bin, "convert", vec, str(n), "--to", "safetensors", "--dtype", "int8"])
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.lstat(n).st_mode), "the device node was replaced"
    assert temporaries(tmp_path) == []


def test_the_npy_and_its_words_are_replaced_together(emb_bin, tmp_path, vec):
    out = tmp_path / "t.npy"
    assert run([emb_bin, "convert", vec, str(out)]).returncode == 0
    assert (tmp_path / "t.vocab").read_text().splitlines()[0] == "w000000 0"
    # a table without words in its place: the old words must not stay with it
    (tmp_path / "z.safetensors").write_bytes(st_bytes(
        {"weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}}, bytes(48)))
    assert run([emb_bin, "convert", str(tmp_path / "z.safetensors"), str(out)]).returncode == 0
    assert not (tmp_path / "t.vocab").exists()
    r = run([emb_bin, "info", str(out)])
    assert r.returncode == 0 and "words:      none" in r.stdout


@pytest.mark.parametrize("lines,needle", [
    (["a 1", "b 2", "c 3", "d 4"], "more words than the table's 3 rows"),
    (["a 1", "b 2"], "2 words for a table of 3 rows"),
    (["a 1", "b 99999999999999999999", "c 3"], "count"),
    (["a 1", "\xff\xfe 2", "c 3"], "UTF-8"),
    (["a 1", "b", "c 3"], "expected \"word count\""),
])
def test_a_sidecar_that_does_not_match_the_table_is_an_error(emb_bin, tmp_path, lines, needle):
    (tmp_path / "t.npy").write_bytes(npy_bytes(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", bytes(24)))
    (tmp_path / "t.vocab").write_bytes("\n".join(lines).encode("utf-8", "surrogateescape")
                                       .replace(b"\xc3\xbf\xc3\xbe", b"\xff\xfe") + b"\n")
    msg = one_line_error(run([emb_bin, "info", str(tmp_path / "t.npy")]), "info")
    assert "t.vocab" in msg and needle in msg, msg


def test_npy_header_with_a_repeated_key_keeps_the_last_as_numpy(emb_bin, tmp_path):
    data = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (9, 9), 'shape': (2, 3), }",
                     np.arange(6, dtype="<f4").tobytes())
    p = tmp_path / "d.npy"
    p.write_bytes(data)
    want = np.load(io.BytesIO(data))
    r = run([emb_bin, "lookup", "--raw", str(p), "0", "1"])
    assert r.returncode == 0, r.stderr
    got = np.array([[float(v) for v in line.split()[1:]] for line in r.stdout.splitlines()],
                   dtype=np.float32)
    assert got.shape == want.shape and (got == want).all()


# ---- pipes, terminals and devices as inputs ----

def test_a_pipe_is_read_once(emb_bin, tmp_path, vec):
    with open(vec, "rb") as f:
        r = run([emb_bin, "info", "/dev/stdin"], stdin=f)
    assert r.returncode == 0, r.stderr
    with open(vec, "rb") as f:
        data = f.read()
    p = subprocess.run(["/bin/sh", "-c", f"cat '{vec}' | '{emb_bin}' info /dev/stdin"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "rows:       3\n" in p.stdout and "format:     word2vec-text\n" in p.stdout
    st = tmp_path / "s.safetensors"
    assert run([emb_bin, "convert", vec, str(st)]).returncode == 0
    p = subprocess.run(["/bin/sh", "-c", f"cat '{st}' | '{emb_bin}' convert /dev/stdin '{tmp_path}/o.vec'"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "o.vec").read_bytes() == data.replace(b" \n", b"\n")


def test_an_endless_device_is_refused_at_once(emb_bin, tmp_path):
    for cmd in (["info", "/dev/zero"], ["convert", "/dev/zero", str(tmp_path / "o.vec")],
                ["lookup", "/dev/zero", "0"], ["nn", "/dev/zero", "a"]):
        r = run([emb_bin, *cmd], timeout=30)
        msg = one_line_error(r, cmd[0])
        assert "/dev/zero" in msg and "character device" in msg, msg
    r = run([emb_bin, "train", "/dev/zero", "-o", str(tmp_path / "v.vec"), "-q"], timeout=30)
    msg = one_line_error(r, "train")
    assert "/dev/zero" in msg, msg


# ---- misleading messages ----

def test_a_truncated_safetensors_named_bin_is_reported_as_safetensors(emb_bin, tmp_path, vec):
    st = tmp_path / "s.safetensors"
    assert run([emb_bin, "convert", vec, str(st)]).returncode == 0
    b = tmp_path / "s.bin"
    b.write_bytes(st.read_bytes()[:40])
    msg = one_line_error(run([emb_bin, "info", str(b)]), "info")
    assert "invalid safetensors file" in msg and "truncated" in msg, msg


def test_an_unaligned_tensor_shows_its_shape(emb_bin, tmp_path):
    p = tmp_path / "u.safetensors"
    p.write_bytes(st_bytes({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                            "weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [1, 25]}},
                           b"\x07" + np.arange(6, dtype="<f4").tobytes()))
    r = run([emb_bin, "info", str(p)])
    assert r.returncode == 0, r.stderr
    assert re.search(r"weight +F32 +torch\.Size\(\[2, 3\]\)", r.stdout), r.stdout
    assert "cannot represent" not in r.stdout


def test_an_unaligned_quantized_table_is_searched(emb_bin, tmp_path):
    """A reduced-precision table whose data is not 2-byte aligned cannot be mapped: nn said
    so by naming an API call; it reads it into memory instead."""
    rows, dim = 5, 4
    vals = np.arange(rows * dim, dtype=np.float32).reshape(rows, dim) % 7 - 3
    hdr = {"__metadata__": {"format": "pt", "emb.qtype": "f16", "emb.dim": str(dim),
                            "emb.vocab": "\n".join(f"w{i}" for i in range(rows))},
           "weight": {"dtype": "F16", "shape": [rows, dim], "data_offsets": [0, rows * dim * 2]}}
    h = json.dumps(hdr, separators=(",", ":"))
    p = tmp_path / "h.safetensors"
    p.write_bytes(st_bytes(hdr, vals.astype("<f2").tobytes(), header_len=len(h) + (len(h) % 2 == 0)))
    assert (8 + len(st_bytes(hdr, header_len=len(h) + (len(h) % 2 == 0))) - 8) % 2 == 1
    r = run([emb_bin, "nn", str(p), "w1", "-k", "2"])
    assert r.returncode == 0, r.stderr
    assert "emb_" not in r.stderr and len(r.stdout.splitlines()) == 2


def test_a_quantized_table_without_words_is_refused_without_a_leak(emb_bin, tmp_path, vec):
    q = tmp_path / "q.safetensors"
    (tmp_path / "z.safetensors").write_bytes(st_bytes(
        {"weight": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}}, bytes(48)))
    assert run([emb_bin, "convert", str(tmp_path / "z.safetensors"), str(q), "--dtype", "int8"]).returncode == 0
    msg = one_line_error(run([emb_bin, "nn", str(q), "a"]), "nn")
    assert "holds no words" in msg and "LeakSanitizer" not in msg


def test_a_sidecar_word_too_long_names_the_file(emb_bin, tmp_path):
    (tmp_path / "t.npy").write_bytes(npy_bytes(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }", bytes(8)))
    (tmp_path / "t.vocab").write_text("x" * (1 << 21) + " 1\n")
    msg = one_line_error(run([emb_bin, "info", str(tmp_path / "t.npy")]), "info")
    assert "t.vocab" in msg and "line 1" in msg, msg


# ---- temporary files ----

def test_a_later_run_removes_stale_temporaries_of_its_output(emb_bin, tmp_path, vec):
    stale = tmp_path / ".out.vec.tmp.Ab12Cd"
    stale.write_bytes(b"left by a killed run")
    live = tmp_path / ".out.vec.tmp.Zz99Yy"
    live.write_bytes(b"being written")
    other = tmp_path / ".other.vec.tmp.Ab12Cd"
    other.write_bytes(b"not ours")
    with open(live, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a writer that is still alive holds its lock
        r = run([emb_bin, "convert", vec, str(tmp_path / "out.vec")])
        assert r.returncode == 0, r.stderr
    assert not stale.exists()
    assert live.exists() and other.exists()


def test_checkpoint_temporaries_follow_the_scheme_and_are_cleaned(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt")
    stale = tmp_path / ".run.ckpt.tmp.q1W2e3"
    stale.write_bytes(b"x" * 1000)
    r = run([emb_bin, "train", corpus, "-o", str(tmp_path / "v.bin"), "--min-count", "1",
             "--threads", "1", "--dim", "8", "--epochs", "5", "--checkpoint",
             str(tmp_path / "run.ckpt"), "--checkpoint-every", "0.000001", "-q"])
    assert r.returncode == 0, r.stderr
    assert not stale.exists()
    assert temporaries(tmp_path) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_during_a_write_removes_the_temporary(emb_bin, tmp_path, sig):
    """Catch emb train while it writes a checkpoint (the temporary exists) and stop it with
    a signal: the temporary goes with it."""
    rng = random.Random(5)
    with open(tmp_path / "c.txt", "w") as f:
        for _ in range(3000):
            f.write(" ".join(f"w{rng.randrange(20000)}" for _ in range(40)) + "\n")
    caught = 0
    for attempt in range(20):
        for n in os.listdir(tmp_path):
            if n.startswith(".") or n.endswith(".ckpt"):
                os.unlink(tmp_path / n)
        p = subprocess.Popen([emb_bin, "train", str(tmp_path / "c.txt"), "-o", str(tmp_path / "v.bin"),
                              "--min-count", "1", "--threads", "1", "--dim", "200", "--epochs", "50",
                              "--checkpoint", str(tmp_path / "r.ckpt"), "--checkpoint-every",
                              "0.000001", "-q"], stderr=subprocess.PIPE)
        seen = False
        t0 = time.time()
        while time.time() - t0 < 30 and p.poll() is None:
            if any(n.startswith(".r.ckpt.tmp.") or (".ckpt.tmp." in n) for n in os.listdir(tmp_path)):
                p.send_signal(sig)
                seen = True
                break
        p.wait(timeout=60)
        if not seen:
            p.kill()
            continue
        caught += 1
        assert p.returncode == -sig, (p.returncode, p.stderr.read())
        assert temporaries(tmp_path) == [], temporaries(tmp_path)
        if caught >= 3:
            break
    assert caught >= 1, "never caught a checkpoint being written"
