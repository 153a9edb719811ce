"""`emb train`, `emb nn`, `emb analogy`, `emb eval-analogies` and `emb eval-pairs`:
outputs that gensim reads, word2vec-style options, bad input with clear errors and no
clobbered output, reproducibility, checkpoints that survive SIGKILL, and evaluations that
agree with gensim 4.2 (Debian's python3-gensim) on the same vectors."""
import os
import random
import signal
import subprocess
import time

import numpy as np
import pytest
from gensim.models import KeyedVectors

from conftest import SOURCE_DIR, run, synthetic
from shared_data import shared_path

COLORS = "red green blue yellow purple orange".split()
ANIMALS = "cat dog horse mouse sheep goat".split()


def train(emb_bin, *args, check=True, timeout=300):
    p = run([emb_bin, "train", *map(str, args)], timeout=timeout)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_formats_load_in_gensim(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt")
    base = ["--dim", 16, "--min-count", 1, "--threads", 1, "--epochs", 3, "--seed", 5,
            "--lowercase", "--strip-punct", "-q"]
    train(emb_bin, corpus, "-o", tmp_path / "v.bin", *base)
    train(emb_bin, corpus, "-o", tmp_path / "v.vec", *base)
    train(emb_bin, corpus, "-o", tmp_path / "v.txt", *base)
    b = KeyedVectors.load_word2vec_format(str(tmp_path / "v.bin"), binary=True)
    v = KeyedVectors.load_word2vec_format(str(tmp_path / "v.vec"))
    t = KeyedVectors.load_word2vec_format(str(tmp_path / "v.txt"))
    # 13 words: the 12 topic words and 'the' (lowercased, comma stripped), most frequent first
    assert len(b.index_to_key) == 13 and b.index_to_key[0] == "the"
    assert b.index_to_key == v.index_to_key == t.index_to_key
    # same seed, one thread: the three runs learned the same vectors; text is exact too
    assert np.array_equal(b.vectors, v.vectors) and np.array_equal(v.vectors, t.vectors)
    # the vectors reflect the topics
    same = np.mean([b.similarity(a, c) for a in COLORS for c in COLORS if a != c])
    cross = np.mean([b.similarity(a, c) for a in COLORS for c in ANIMALS])
    assert same - cross > 0.3, (same, cross)


def test_word2vec_option_names(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt")
    out = tmp_path / "w.txt"
    train(emb_bin, "-train", corpus, "-output", out, "-size", 12, "-window", 3, "-negative", 4,
          "-sample", "1e-3", "-min-count", 1, "-iter", 2, "-threads", 1, "-cbow", 1, "-hs", 0,
          "-binary", 0, "-alpha", 0.05, "-q")
    kv = KeyedVectors.load_word2vec_format(str(out))
    assert kv.vector_size == 12
    train(emb_bin, "-train", corpus, "-output", tmp_path / "w2", "-size", 12, "-min-count", 1,
          "-iter", 1, "-binary", 1, "-q")
    assert KeyedVectors.load_word2vec_format(str(tmp_path / "w2"), binary=True).vector_size == 12
    # fastText's names
    train(emb_bin, "-input", corpus, "-output", tmp_path / "f.vec", "-dim", 8, "-ws", 2,
          "-neg", 3, "-minCount", 1, "-epoch", 1, "-thread", 1, "-lr", 0.05, "-t", "1e-4", "-q")
    p = train(emb_bin, corpus, "-o", tmp_path / "x.vec", "-hs", 1, check=False)
    assert p.returncode == 2 and "hierarchical softmax" in p.stderr


def test_reproducible_one_thread(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt")
    for model in ("skipgram", "cbow"):
        outs = []
        for i in range(2):
            out = tmp_path / f"{model}{i}.bin"
            train(emb_bin, corpus, "-o", out, "--model", model, "--dim", 10, "--min-count", 1,
                  "--threads", 1, "--seed", 3, "-q")
            outs.append(out.read_bytes())
        assert outs[0] == outs[1]


def test_negative_sampling_forms(emb_bin, tmp_path):
    """Skip-gram shares a window's negatives by default (--shared-negatives gives the same
    bits), --per-pair-negatives draws them per pair; both forms give the scalar reference's
    bits (EMB_KERNELS=ref). CBOW is the same either way; --subwords draws per pair unless
    asked. A checkpoint of one form does not resume the other."""
    corpus = synthetic(tmp_path / "c.txt")
    base = ["--dim", 10, "--min-count", 1, "--threads", 1, "--seed", 3, "--epochs", 2, "-q"]

    def vectors(name, *extra, kernels="auto"):
        out = tmp_path / name
        p = run([emb_bin, "train", corpus, "-o", out, *map(str, base + list(extra))],
                env=dict(os.environ, EMB_KERNELS=kernels))
        assert p.returncode == 0, p.stderr
        return out.read_bytes()

    default = vectors("d.bin")
    assert default == vectors("s.bin", "--shared-negatives")
    pair = vectors("p.bin", "--per-pair-negatives")
    assert pair != default
    assert default == vectors("dr.bin", kernels="ref")
    assert pair == vectors("pr.bin", "--per-pair-negatives", kernels="ref")
    cbow = vectors("c.bin", "--model", "cbow")
    assert cbow == vectors("cp.bin", "--model", "cbow", "--per-pair-negatives")
    assert cbow == vectors("cs.bin", "--model", "cbow", "--shared-negatives")
    sub = vectors("w.vec", "--subwords", "--bucket", 1000)
    assert sub == vectors("wp.vec", "--subwords", "--bucket", 1000, "--per-pair-negatives")
    assert sub != vectors("ws.vec", "--subwords", "--bucket", 1000, "--shared-negatives")
    p = train(emb_bin, corpus, "-o", tmp_path / "x.bin", "--shared-negatives",
              "--per-pair-negatives", check=False)
    assert p.returncode == 2 and "exclude each other" in p.stderr
    ck = tmp_path / "p.ckpt"
    train(emb_bin, corpus, "-o", tmp_path / "k.bin", *base[:-3], "--epochs", 50,
          "--per-pair-negatives", "--checkpoint", ck, "--checkpoint-every", "0.000001",
          "--keep-checkpoint", "-q")
    p = train(emb_bin, corpus, "-o", tmp_path / "r.bin", *base[:-3], "--epochs", 50,
              "--resume", ck, check=False)
    assert p.returncode == 1
    assert "shared_negatives 0, but this run has shared_negatives 1" in p.stderr, p.stderr
    train(emb_bin, corpus, "-o", tmp_path / "r.bin", *base[:-3], "--epochs", 50,
          "--per-pair-negatives", "--resume", ck, "-q")


def test_progress_and_summary(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt", lines=2000)
    p = train(emb_bin, corpus, "-o", tmp_path / "v.bin", "--min-count", 1, "--dim", 8,
              "--threads", 2)
    assert "13 words in the vocabulary" in p.stderr
    assert "words/s" in p.stderr and "peak memory" in p.stderr and "wrote" in p.stderr
    assert p.stdout == ""


@pytest.mark.parametrize("content,needle", [
    (b"", "the corpus is empty"),
    (b"  \n\t\n", "the corpus is empty"),
    (b"ok words\nbad \xff\xfe token\n", "c.txt:2: invalid UTF-8"),
    (b"a b c d\n", "no word occurs at least 5 times (min_count)"),
])
def test_bad_corpus_keeps_output(emb_bin, tmp_path, content, needle):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(content)
    out = tmp_path / "v.bin"
    out.write_bytes(b"previous vectors")
    p = train(emb_bin, corpus, "-o", out, check=False)
    assert p.returncode == 1, p.stderr
    assert needle in p.stderr and p.stderr.startswith("emb train: ")
    assert out.read_bytes() == b"previous vectors"
    assert sorted(os.listdir(tmp_path)) == ["c.txt", "v.bin"]  # no temporary left behind


def test_bad_paths_and_usage(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt")
    p = train(emb_bin, corpus, "-o", tmp_path / "missing" / "v.bin", check=False)
    assert p.returncode == 1 and "missing" in p.stderr
    p = train(emb_bin, tmp_path / "nope.txt", "-o", tmp_path / "v.bin", check=False)
    assert p.returncode == 1 and "cannot open" in p.stderr
    p = train(emb_bin, corpus, check=False)
    assert p.returncode == 2 and "missing --output" in p.stderr
    p = train(emb_bin, corpus, "-o", tmp_path / "v.bin", "--dim", 0, check=False)
    assert p.returncode == 2 and "--dim" in p.stderr
    p = train(emb_bin, corpus, "-o", tmp_path / "v.bin", "--model", "glove", check=False)
    assert p.returncode == 2 and "skipgram or cbow" in p.stderr


def test_stdin_corpus(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt")
    with open(corpus) as f:
        p = subprocess.run([emb_bin, "train", "-", "-o", str(tmp_path / "s.bin"), "--min-count",
                            "1", "--threads", "1", "--dim", "8", "-q"], stdin=f,
                           capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    train(emb_bin, corpus, "-o", tmp_path / "f.bin", "--min-count", 1, "--threads", 1,
          "--dim", 8, "-q")
    assert (tmp_path / "s.bin").read_bytes() == (tmp_path / "f.bin").read_bytes()


def test_sigkill_then_resume(emb_bin, tmp_path):
    """Kill a run with SIGKILL while it trains, right after its 1st, 3rd and 8th checkpoint
    reached the disk (the file appeared or was replaced: watched, not timed); each time the
    checkpoint on disk is whole and a resumed run finishes with exactly the vectors of an
    uninterrupted run (1 thread). The uninterrupted run takes about 2 s here and writes a
    checkpoint every 0.05 s of wall time, so the kills fall early in training however slow
    the machine is."""
    corpus = synthetic(tmp_path / "c.txt", lines=6000, words_per_line=40)
    args = ["--dim", 32, "--min-count", 1, "--threads", 1, "--epochs", 6, "--seed", 9,
            "--sample", 0]
    want = tmp_path / "want.bin"
    train(emb_bin, corpus, "-o", want, *args, "-q")
    ck = tmp_path / "run.ckpt"
    got = tmp_path / "got.bin"

    def version():
        """Identifies the checkpoint on disk: a replaced file is a new inode, written later."""
        try:
            st = os.stat(ck)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    for writes in (1, 3, 8):
        if ck.exists():
            ck.unlink()
        proc = subprocess.Popen([emb_bin, "train", corpus, "-o", str(got), *map(str, args),
                                 "--checkpoint", str(ck), "--checkpoint-every", "0.05", "-q"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        seen, last, deadline = 0, None, time.monotonic() + 300
        while seen < writes:
            if proc.poll() is not None:
                pytest.fail(f"the run ended (exit status {proc.returncode}) after {seen} "
                            f"checkpoint(s), before the kill after the {writes}th: "
                            f"{proc.stderr.read().decode()}")
            assert time.monotonic() < deadline, f"{seen} checkpoint(s) in 300 s"
            v = version()
            if v is not None and v != last:
                seen, last = seen + 1, v
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL, \
            f"the run finished (exit status {proc.returncode}) before the kill"
        assert not got.exists(), "a killed run left its output"
        out = tmp_path / f"resumed{writes}.bin"
        train(emb_bin, corpus, "-o", out, *args, "--resume", ck, "-q")
        assert out.read_bytes() == want.read_bytes(), \
            f"resume after a kill following checkpoint {writes} differs"
        leftovers = [n for n in os.listdir(tmp_path) if ".tmp." in n]
        for n in leftovers:  # a temporary of the killed run may remain; never the checkpoint
            os.unlink(tmp_path / n)


def test_resume_with_other_settings(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt")
    ck = tmp_path / "x.ckpt"
    # a checkpoint from a finished run's middle: cancel is not reachable from the CLI, so
    # write one with a tiny interval on a longer run, and keep it
    train(emb_bin, corpus, "-o", tmp_path / "v.bin", "--min-count", 1, "--threads", 1,
          "--epochs", 50, "--checkpoint", ck, "--checkpoint-every", "0.000001", "--keep-checkpoint",
          "-q")
    assert ck.exists()
    p = train(emb_bin, corpus, "-o", tmp_path / "w.bin", "--min-count", 1, "--threads", 1,
              "--epochs", 50, "--window", 3, "--resume", ck, check=False)
    assert p.returncode == 1 and "window 5, but this run has window 3" in p.stderr
    other = synthetic(tmp_path / "o.txt", seed=2)
    p = train(emb_bin, other, "-o", tmp_path / "w.bin", "--min-count", 1, "--threads", 1,
              "--epochs", 50, "--resume", ck, check=False)
    assert p.returncode == 1 and "another corpus" in p.stderr
    assert not (tmp_path / "w.bin").exists()


# ---- queries and evaluations against gensim on the same file ----

@pytest.fixture(scope="module")
def lee():
    path = shared_path("fixtures", "gensim", "lee_fasttext.vec")
    return path, KeyedVectors.load_word2vec_format(path)


def parse_pairs(text):
    return [(w, float(s)) for w, s in (line.rsplit(" ", 1) for line in text.splitlines() if line)]


def test_nn_matches_gensim(emb_bin, lee):
    path, kv = lee
    for word in ("government", "police", "Australia", "day"):
        p = run([emb_bin, "nn", path, word, "-k", "7"])
        assert p.returncode == 0, p.stderr
        got = parse_pairs(p.stdout)
        want = kv.most_similar(word, topn=7)
        assert [w for w, _ in got] == [w for w, _ in want]
        assert np.allclose([s for _, s in got], [s for _, s in want], atol=2e-6)


def test_nn_stdin_and_errors(emb_bin, lee):
    path, kv = lee
    p = subprocess.run([emb_bin, "nn", path, "-k", "3"], input="police\nnot-a-word\n",
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "'not-a-word' is not in the vocabulary" in p.stderr
    assert [w for w, _ in parse_pairs(p.stdout.split("\n\n")[0])] == \
        [w for w, _ in kv.most_similar("police", topn=3)]
    p = run([emb_bin, "nn", path + ".missing", "x"])
    assert p.returncode == 1 and "cannot open" in p.stderr


def test_analogy_matches_gensim(emb_bin, lee):
    path, kv = lee
    for a, b, c in (("man", "woman", "king"), ("Australia", "Australian", "Israel"),
                    ("police", "officers", "government")):
        if not all(w in kv.key_to_index for w in (a, b, c)):
            continue
        p = run([emb_bin, "analogy", path, a, b, c, "-k", "5"])
        assert p.returncode == 0, p.stderr
        got = parse_pairs(p.stdout)
        want = kv.most_similar(positive=[b, c], negative=[a], topn=5)
        assert [w for w, _ in got] == [w for w, _ in want]
        assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-5)
    p = run([emb_bin, "analogy", path, "man", "woman"])
    assert p.returncode == 2 and "three words" in p.stderr


def test_eval_analogies_matches_gensim(emb_bin, lee, tmp_path):
    path, kv = lee
    q = os.path.join(SOURCE_DIR, "data", "eval", "questions-words.txt")
    for restrict in (3000, 0):
        p = run([emb_bin, "eval-analogies", path, q, "--restrict", str(restrict)])
        assert p.returncode == 0, p.stderr
        lines = dict(line.split(": ", 1) for line in p.stdout.splitlines())
        score, sections = kv.evaluate_word_analogies(q, restrict_vocab=restrict or len(kv))
        for s in sections:
            name = "total" if s["section"] == "Total accuracy" else s["section"]
            want = f"({len(s['correct'])}/{len(s['correct']) + len(s['incorrect'])})"
            assert want in lines[name], (name, lines[name], want)


def test_eval_pairs_matches_gensim(emb_bin, lee, tmp_path):
    path, kv = lee
    rng = random.Random(4)
    words = kv.index_to_key[:300]
    pairs = tmp_path / "pairs.tsv"
    with open(pairs, "w") as f:
        f.write("# a comment\n")
        for _ in range(120):
            a, b = rng.sample(words, 2)
            f.write(f"{a}\t{b}\t{rng.randint(0, 40) / 4}\n")  # ties in the human scores
        f.write("qqqunknownqqq\tpolice\t3.5\n")
    p = run([emb_bin, "eval-pairs", path, str(pairs)])
    assert p.returncode == 0, p.stderr
    got = dict(line.split(": ", 1) for line in p.stdout.splitlines())
    (pearson, _), (spearman, _), oov = kv.evaluate_word_pairs(str(pairs))
    assert abs(float(got["spearman"]) - spearman) < 1e-4
    assert abs(float(got["pearson"]) - pearson) < 1e-4
    assert got["pairs"].startswith("120 used, 1 out of vocabulary")
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\t1\nc d\n")
    p = run([emb_bin, "eval-pairs", path, str(bad)])
    assert p.returncode == 1 and "bad.tsv:2" in p.stderr


def test_binary_row_starting_with_newline_byte(emb_bin, tmp_path):
    """A word2vec binary row whose first float begins with the byte 0x0a (a newline) is still
    recognised as binary (format sniffing counts the first row's fields), as gensim reads it
    with binary=True."""
    import struct
    first = struct.unpack("<f", b"\x0a\x00\x80\x3f")[0]
    path = tmp_path / "nl.bin"
    with open(path, "wb") as f:
        f.write(b"2 3\n")
        f.write(b"a " + struct.pack("<3f", first, 2.0, 3.0) + b"\n")
        f.write(b"b " + struct.pack("<3f", 4.0, 5.0, 6.0) + b"\n")
    p = run([emb_bin, "info", str(path)])
    assert p.returncode == 0, p.stderr
    assert "word2vec-binary" in p.stdout
    kv = KeyedVectors.load_word2vec_format(str(path), binary=True)
    p = run([emb_bin, "nn", str(path), "a", "-k", "1"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[0] == "b"
    assert abs(float(p.stdout.split()[1]) - kv.similarity("a", "b")) < 1e-6


def test_bom_and_lenient(emb_bin, tmp_path):
    """A byte-order mark is dropped; a token that is not UTF-8 stops the run (naming the line)
    unless --lenient, which skips it, says how many it skipped even with -q, and learns what
    the text without that token gives."""
    with open(synthetic(tmp_path / "clean.txt"), "rb") as f:
        clean = f.read()
    lines = clean.split(b"\n")
    lines[3] = lines[3] + b" \xff\xfebad"
    dirty = tmp_path / "dirty.txt"
    dirty.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines))
    base = ["--dim", 8, "--min-count", 1, "--threads", 1, "--epochs", 2, "-q"]
    p = train(emb_bin, dirty, "-o", tmp_path / "d.vec", *base, check=False)
    assert p.returncode == 1 and "dirty.txt:4: invalid UTF-8" in p.stderr, p.stderr
    p = train(emb_bin, dirty, "-o", tmp_path / "d.vec", *base, "--lenient")
    assert "skipped 1 tokens that are not UTF-8 and 0 longer than" in p.stderr, p.stderr
    train(emb_bin, tmp_path / "clean.txt", "-o", tmp_path / "c.vec", *base)
    d = KeyedVectors.load_word2vec_format(str(tmp_path / "d.vec"))
    c = KeyedVectors.load_word2vec_format(str(tmp_path / "c.vec"))
    assert d.index_to_key == c.index_to_key
    assert np.array_equal(d.vectors, c.vectors)
