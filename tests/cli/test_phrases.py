"""`emb phrases` (include/emb/phrases.h) against gensim 4.2's Phrases on the same corpus:
the same text comes out, pair for pair, at gensim's defaults and at other settings, with the
default and the npmi scorers; a corpus in any form emb train reads (compressed, several files,
a directory, stdin) gives the bytes of its plain text; and the phrased text trains."""
import bz2
import gzip
import lzma
import os
import shutil
import subprocess

import numpy as np
import pytest
from gensim.models.phrases import Phrases
from gensim.models.word2vec import LineSentence

from conftest import run

PAIRS = [("new", "york"), ("united", "states"), ("prime", "minister"), ("ice", "cream"),
         ("los", "angeles")]
WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at "
         "which but have an they you were her she there been one all we their has would when if "
         "so no will can more about said what some my them who its out time up other new york "
         "states minister cream ice").split()


def corpus(path, lines=3000, seed=7):
    """Common words drawn by a Zipf-like law, with planted pairs at several rates (some
    frequent enough to score above the threshold, some not); the pairs' words also occur
    alone."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(WORDS) + 1)
    p /= p.sum()
    with open(path, "w") as f:
        for i in range(lines):
            toks = list(rng.choice(WORDS, size=int(rng.integers(3, 25)), p=p))
            for k, (a, b) in enumerate(PAIRS):
                if rng.random() < 0.02 * (k + 1):
                    at = int(rng.integers(0, len(toks) + 1))
                    toks[at:at] = [a, b]
            f.write(" ".join(toks) + "\n")
    return str(path)


@pytest.mark.parametrize("min_count,threshold,delimiter", [(5, 10.0, "_"), (1, 2.0, "_"),
                                                          (20, 0.5, "--"), (3, 50.0, "_")])
def test_same_text_as_gensim(emb_bin, tmp_path, min_count, threshold, delimiter):
    c = corpus(tmp_path / "c.txt")
    out = tmp_path / "p.txt"
    r = run([emb_bin, "phrases", c, "-o", str(out), "--min-count", str(min_count), "--threshold",
             str(threshold), "--delimiter", delimiter])
    assert r.returncode == 0, r.stderr
    ph = Phrases(LineSentence(c), min_count=min_count, threshold=threshold, delimiter=delimiter)
    want = [" ".join(ph[s]) for s in LineSentence(c)]
    got = out.read_text().split("\n")
    assert got[-1] == "" and got[:-1] == want
    joined = sum(t.count(delimiter) for t in want)
    assert f"{joined} phrases joined" in r.stderr
    if (min_count, threshold) == (5, 10.0):
        assert joined > 0  # the test means something at the defaults


def test_phrased_text_trains_with_phrase_tokens(emb_bin, tmp_path):
    c = corpus(tmp_path / "c.txt")
    r = run([emb_bin, "phrases", c, "-q"])
    assert r.returncode == 0 and r.stderr == ""
    (tmp_path / "p.txt").write_text(r.stdout)
    r = run([emb_bin, "train", str(tmp_path / "p.txt"), "-o", str(tmp_path / "v.vec"), "--dim", "8",
             "--epochs", "1", "-q", "--save-vocab", str(tmp_path / "v.vocab")])
    assert r.returncode == 0, r.stderr
    words = {line.split(" ")[0] for line in open(tmp_path / "v.vocab")}
    assert "los_angeles" in words


def test_errors(emb_bin, tmp_path):
    r = run([emb_bin, "phrases", str(tmp_path / "missing.txt")])
    assert r.returncode == 1 and "missing.txt" in r.stderr
    (tmp_path / "c.txt").write_text("a b\n")
    r = run([emb_bin, "phrases", str(tmp_path / "c.txt"), "--delimiter", "a b"])
    assert r.returncode == 1 and "whitespace" in r.stderr
    r = run([emb_bin, "phrases", str(tmp_path / "c.txt"), "--scoring", "pmi"])
    assert r.returncode == 2 and "default or npmi" in r.stderr
    (tmp_path / "bad.gz").write_bytes(gzip.compress(b"a b\n" * 1000)[:-30])
    r = run([emb_bin, "phrases", str(tmp_path / "c.txt"), str(tmp_path / "bad.gz"), "-o",
             str(tmp_path / "out.txt")])
    assert r.returncode == 1 and "bad.gz: gzip data is" in r.stderr and "truncated" in r.stderr
    assert not (tmp_path / "out.txt").exists()
    (tmp_path / "keep.txt").write_text("kept\n")  # an unreadable corpus leaves OUT alone
    r = run([emb_bin, "phrases", str(tmp_path / "c.txt"), str(tmp_path / "missing.txt"), "-o",
             str(tmp_path / "keep.txt")])
    assert r.returncode == 1 and "missing.txt" in r.stderr
    assert (tmp_path / "keep.txt").read_text() == "kept\n"
    r = run([emb_bin, "phrases", "-", "-"])
    assert r.returncode == 1 and "standard input (-) is given twice" in r.stderr


def _compress(kind, data):
    if kind == "gz":
        return gzip.compress(data)
    if kind == "bz2":
        return bz2.compress(data)
    if kind == "xz":
        return lzma.compress(data)
    return subprocess.run(["zstd", "-q", "-c"], input=data, stdout=subprocess.PIPE,
                          check=True).stdout


def corpus_forms(tmp_path):
    """A corpus as one plain file, and the same text as other forms emb reads: one gzip file
    named without .gz, several files of every compression, a directory, and stdin (gzip data
    through a pipe). Returns (plain path, {form: (paths, stdin file or None)})."""
    c = corpus(tmp_path / "c.txt", lines=4000)
    text = open(c, "rb").read()
    lines = text.split(b"\n")[:-1]
    parts = [b"\n".join(lines[k * 1000:(k + 1) * 1000]) + b"\n" for k in range(4)]
    assert b"".join(parts) == text
    (tmp_path / "c.data").write_bytes(gzip.compress(text))
    files = []
    kinds = ["zstd" if shutil.which("zstd") else "plain", "gz", "bz2", "xz"]
    for k, kind in enumerate(kinds):
        f = tmp_path / f"part{k}"
        f.write_bytes(parts[k] if kind == "plain" else _compress(kind, parts[k]))
        files.append(str(f))
    d = tmp_path / "dir"
    (d / "b").mkdir(parents=True)
    (d / "a.txt").write_bytes(_compress("xz", parts[0]))
    (d / "b" / "1").write_bytes(parts[1])
    (d / "b" / "2.gz").write_bytes(_compress("gz", parts[2]))
    (d / "c").write_bytes(_compress("bz2", parts[3]))
    (d / ".hidden").write_bytes(b"never read\n")
    (tmp_path / "stdin.gz").write_bytes(gzip.compress(parts[2] + parts[3]))
    (tmp_path / "head.txt").write_bytes(parts[0] + parts[1])
    forms = {"gzip by content": ([str(tmp_path / "c.data")], None),
             "several files": (files, None),
             "directory": ([str(d)], None),
             "stdin": ([str(tmp_path / "head.txt"), "-"], tmp_path / "stdin.gz")}
    return c, forms


def _gensim_text(c, **kw):
    ph = Phrases(LineSentence(c), **kw)
    return "".join(" ".join(ph[s]) + "\n" for s in LineSentence(c))


@pytest.mark.parametrize("form", ["gzip by content", "several files", "directory", "stdin"])
def test_corpus_forms_as_plain_text(emb_bin, tmp_path, form):
    """emb phrases on a compressed, split, directory or stdin corpus writes the bytes it writes
    on the plain concatenation, and those are gensim's text on the same sentences."""
    c, forms = corpus_forms(tmp_path)
    paths, stdin = forms[form]
    r = run([emb_bin, "phrases", c, "-o", str(tmp_path / "ref.txt"), "-q"])
    assert r.returncode == 0, r.stderr
    ref = (tmp_path / "ref.txt").read_text()
    assert ref == _gensim_text(c) and "_" in ref
    with open(stdin or os.devnull, "rb") as f:
        r = run([emb_bin, "phrases", *paths, "-o", str(tmp_path / "got.txt")], stdin=f)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "got.txt").read_text() == ref
    assert f"{ref.count('_')} phrases joined" in r.stderr


@pytest.mark.parametrize("form", ["gzip by content", "several files", "directory", "stdin"])
def test_train_phrases_on_corpus_forms(emb_bin, tmp_path, form):
    """emb train --phrases on every corpus form: the vocabulary and the vectors of the run on
    the plain concatenation, bit for bit (1 thread)."""
    c, forms = corpus_forms(tmp_path)
    paths, stdin = forms[form]
    train = ["--phrases", "--dim", "8", "--epochs", "1", "--threads", "1", "--min-count", "1",
             "-q", "--binary", "0"]
    r = run([emb_bin, "train", c, "-o", str(tmp_path / "ref.txt"), *train, "--save-vocab",
             str(tmp_path / "ref.vocab")])
    assert r.returncode == 0, r.stderr
    assert "united_states " in (tmp_path / "ref.vocab").read_text()  # phrases were joined
    with open(stdin or os.devnull, "rb") as f:
        r = run([emb_bin, "train", *paths, "-o", str(tmp_path / "got.txt"), *train,
                 "--save-vocab", str(tmp_path / "got.vocab")], stdin=f)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "got.vocab").read_bytes() == (tmp_path / "ref.vocab").read_bytes()
    assert (tmp_path / "got.txt").read_bytes() == (tmp_path / "ref.txt").read_bytes()


@pytest.mark.parametrize("min_count,threshold", [(5, 0.5), (1, 0.3), (20, 0.0), (3, -0.5),
                                                 (5, 0.95)])
def test_npmi_same_text_as_gensim(emb_bin, tmp_path, min_count, threshold):
    c = corpus(tmp_path / "c.txt")
    out = tmp_path / "p.txt"
    r = run([emb_bin, "phrases", c, "-o", str(out), "--scoring", "npmi", "--min-count",
             str(min_count), "--threshold", str(threshold)])
    assert r.returncode == 0, r.stderr
    want = _gensim_text(c, min_count=min_count, threshold=threshold, scoring="npmi")
    assert out.read_text() == want
    if threshold < 0.9:
        assert "_" in want  # the comparison means something
    if (min_count, threshold) == (1, 0.3):  # a setting where the scorers disagree
        assert _gensim_text(c, min_count=1, threshold=0.3) != want


def test_train_npmi_as_gensim(emb_bin, tmp_path):
    """emb train --phrases-scoring npmi: the vocabulary is the tokens of gensim's
    Phrases(scoring='npmi') output on the same corpus."""
    c = corpus(tmp_path / "c.txt")
    r = run([emb_bin, "train", c, "-o", str(tmp_path / "v.vec"), "--phrases-scoring", "npmi",
             "--phrases-threshold", "0.4", "--dim", "8", "--epochs", "1", "--min-count", "1",
             "-q", "--save-vocab", str(tmp_path / "v.vocab")])
    assert r.returncode == 0, r.stderr
    got = {}
    for line in open(tmp_path / "v.vocab", encoding="utf-8"):
        w, n = line.split(" ")
        got[w] = int(n)
    want = {}
    for t in _gensim_text(c, threshold=0.4, scoring="npmi").split():
        want[t] = want.get(t, 0) + 1
    assert got == want and any("_" in w for w in got)


def test_npmi_threshold_refused(emb_bin, tmp_path):
    c = corpus(tmp_path / "c.txt", lines=50)
    for t in ["1.5", "-1.01", "10"]:
        r = run([emb_bin, "phrases", c, "--scoring", "npmi", "--threshold", t])
        assert r.returncode == 1 and "threshold must be in [-1, 1] with npmi" in r.stderr
        r = run([emb_bin, "train", c, "-o", str(tmp_path / "v.vec"), "--phrases-scoring", "npmi",
                 "--phrases-threshold", t])
        assert r.returncode == 2 and "threshold must be in [-1, 1] with npmi" in r.stderr
    r = run([emb_bin, "train", c, "-o", str(tmp_path / "v.vec"), "--phrases-scoring", "x"])
    assert r.returncode == 2 and "default or npmi" in r.stderr


@pytest.mark.parametrize("passes,min_count,threshold,delimiter", [(1, 5, 10.0, "_"),
                                                                  (2, 5, 10.0, "_"),
                                                                  (1, 3, 2.0, "--")])
def test_train_with_phrases_as_gensim(emb_bin, tmp_path, passes, min_count, threshold, delimiter):
    """emb train --phrases: the vocabulary (every word and its count, at --min-count 1) is the
    tokens of the text gensim's Phrases gives (applied `passes` times, each learning from the
    text before it), and the vectors are those of training on the text `emb phrases` writes."""
    c = corpus(tmp_path / "c.txt")
    with open(c, "a") as f:  # a three-word phrase for the second pass
        for i in range(40):
            f.write(f"we saw new york city again {WORDS[i % 9]} and it was new york city\n")
    knobs = ["--phrases-min-count", str(min_count), "--phrases-threshold", str(threshold),
             "--phrases-delimiter", delimiter]
    train = ["--dim", "8", "--epochs", "2", "--threads", "1", "--min-count", "1", "-q", "--binary",
             "0"]
    r = run([emb_bin, "train", c, "-o", str(tmp_path / "v.txt"), "--phrases-passes", str(passes),
             *knobs, *train, "--save-vocab", str(tmp_path / "v.vocab")])
    assert r.returncode == 0, r.stderr
    got = {}
    for line in open(tmp_path / "v.vocab", encoding="utf-8"):
        w, n = line.split(" ")
        got[w] = int(n)
    sentences = [list(s) for s in LineSentence(c)]
    for _ in range(passes):
        ph = Phrases(sentences, min_count=min_count, threshold=threshold, delimiter=delimiter)
        sentences = [ph[s] for s in sentences]
    want = {}
    for s in sentences:
        for t in s:
            want[t] = want.get(t, 0) + 1
    assert got == want
    joined = [w for w in got if delimiter in w]
    assert joined  # the comparison means something
    if passes == 2:
        assert any(w.count(delimiter) >= 2 for w in got)  # a phrase of phrases
    # the same vectors as training on the text emb phrases writes (bit for bit: same text)
    text = c
    for k in range(passes):
        out = tmp_path / f"p{k}.txt"
        r = run([emb_bin, "phrases", text, "-o", str(out), "-q", "--min-count", str(min_count),
                 "--threshold", str(threshold), "--delimiter", delimiter])
        assert r.returncode == 0, r.stderr
        text = str(out)
    r = run([emb_bin, "train", text, "-o", str(tmp_path / "w.txt"), *train])
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "v.txt").read_bytes() == (tmp_path / "w.txt").read_bytes()


def test_train_phrases_errors(emb_bin, tmp_path):
    c = corpus(tmp_path / "c.txt", lines=50)
    out = ["-o", str(tmp_path / "v.vec"), "-q"]
    r = run([emb_bin, "train", c, "--phrases-delimiter", "a b", *out])
    assert r.returncode == 2 and "whitespace" in r.stderr
    r = run([emb_bin, "train", c, "--phrases-delimiter", "x" * 17, *out])
    assert r.returncode == 2 and "1 to 16 bytes" in r.stderr
    r = run([emb_bin, "train", c, "--phrases-passes", "9", *out])
    assert r.returncode == 2
    r = run([emb_bin, "train", c, "--phrases", "--read-vocab", c, *out])
    assert r.returncode == 2 and "--phrases cannot be combined with --read-vocab" in r.stderr
