"""`emb phrases` (include/emb/phrases.h) against gensim 4.2's Phrases on the same corpus:
the same text comes out, pair for pair, at gensim's defaults and at other settings; and the
phrased text trains."""
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
    r = run([emb_bin, "phrases", "-"])
    assert r.returncode == 2


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
    r = run([emb_bin, "train", "-", "--phrases", *out])
    assert r.returncode == 2 and "give a file, not stdin" in r.stderr
    r = run([emb_bin, "train", c, "--phrases-delimiter", "a b", *out])
    assert r.returncode == 2 and "whitespace" in r.stderr
    r = run([emb_bin, "train", c, "--phrases-delimiter", "x" * 17, *out])
    assert r.returncode == 2 and "1 to 16 bytes" in r.stderr
    r = run([emb_bin, "train", c, "--phrases-passes", "9", *out])
    assert r.returncode == 2
    r = run([emb_bin, "train", c, "--phrases", "--read-vocab", c, *out])
    assert r.returncode == 2 and "--phrases cannot be combined with --read-vocab" in r.stderr
    import gzip
    with open(c, "rb") as f, gzip.open(tmp_path / "c.txt.gz", "wb") as g:
        g.write(f.read())
    r = run([emb_bin, "train", str(tmp_path / "c.txt.gz"), "--phrases", *out])
    assert r.returncode == 1 and "is compressed: phrases read plain text" in r.stderr
    r = run([emb_bin, "train", str(tmp_path), "--phrases", *out])
    assert r.returncode == 1 and "is a directory" in r.stderr
