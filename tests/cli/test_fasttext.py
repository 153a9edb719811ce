"""fastText models (.bin): emb reads what Debian's fastText 0.9.2 trains, at test time, and
gives the vectors `fasttext print-word-vectors` gives, for words of the vocabulary and for
words the model never saw (from their character n-grams); nn and analogy answer for unseen
words as gensim 4.2's FastText vectors do, and eval-pairs scores every pair.

fastText prints 5 significant digits (setprecision(5)), so that is the precision of the
comparison: every value emb computes, printed the same way, is the same text, and the largest
difference with the printed value is reported against half a unit of the 5th digit."""
import math
import os
import random
import shutil
import struct
import subprocess

import pytest

from conftest import run

# Words with 1- to 4-byte UTF-8 characters, a word shorter than minn, and fastText's </s>.
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda",
         "über", "naïve", "café", "日本語", "x", "ab", "emoji😀s"]
UNSEEN = ["alphas", "überx", "unseenword", "日本", "q", "zz", "😀😀", "a" * 300, "café-au-lait",
          "ALPHA"]


def fasttext():
    path = shutil.which("fasttext")
    assert path, "Debian's fasttext 0.9.2 is needed (apt-get install fasttext; scripts/deps.sh test)"
    return path


def corpus(path, lines=300, seed=1):
    rnd = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(lines):
            f.write(" ".join(rnd.choice(WORDS) for _ in range(12)) + "\n")


@pytest.fixture(scope="module", params=["skipgram", "cbow"])
def model(request, tmp_path_factory):
    d = tmp_path_factory.mktemp("ft-" + request.param)
    corpus(d / "c.txt")
    prefix = str(d / "m")
    r = subprocess.run([fasttext(), request.param, "-input", str(d / "c.txt"), "-output", prefix,
                        "-dim", "12", "-epoch", "3", "-minCount", "1", "-bucket", "5000",
                        "-minn", "2", "-maxn", "4", "-thread", "1", "-verbose", "0"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return prefix + ".bin"


def fasttext_vectors(model_path, words):
    r = subprocess.run([fasttext(), "print-word-vectors", model_path], input="\n".join(words) + "\n",
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        out[parts[0]] = parts[1:]
    assert sorted(out) == sorted(words)
    return out


def emb_vectors(emb_bin, model_path, words):
    r = run([emb_bin, "lookup", "--raw", model_path] + words)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        parts = line.split(" ")
        out[parts[0]] = [f32(float(x)) for x in parts[1:]]  # 9 digits: the float32 exactly
    return out


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def g5(x):
    """A float printed as C++'s ostream with setprecision(5) prints it (printf's %.5g)."""
    return "%.5g" % x


def test_vectors_match_print_word_vectors(emb_bin, model):
    words = [w for w in WORDS if w != "x"] + UNSEEN + ["</s>"]
    ft = fasttext_vectors(model, words)
    em = emb_vectors(emb_bin, model, words)
    worst = 0.0
    for w in words:
        assert len(em[w]) == len(ft[w]) == 12, w
        assert [g5(x) for x in em[w]] == ft[w], (w, em[w], ft[w])
        for x, t in zip(em[w], ft[w]):
            t = float(t)
            half_unit = 0.5 * 10 ** (math.floor(math.log10(abs(t))) - 4) if t else 0.0
            worst = max(worst, abs(x - t) / half_unit if half_unit else 0.0)
    # every difference is within the printing's rounding (half a unit of the 5th digit)
    assert worst <= 1.0, worst
    print(f"max |emb - fastText| = {worst:.3f} half-units of fastText's 5th printed digit")
    # a word without n-grams that is not in the vocabulary has the zero vector
    assert em["q"] == [0.0] * 12


def test_bin_rows_are_the_vec(emb_bin, model, tmp_path):
    """The vocabulary part of the .bin is what fastText wrote to its .vec, word for word."""
    vec = model[:-4] + ".vec"
    out = tmp_path / "from-bin.vec"
    r = run([emb_bin, "convert", "--precision", "9", model, str(out)])
    assert r.returncode == 0, r.stderr
    with open(vec, encoding="utf-8") as f:
        ft_lines = f.read().splitlines()
    with open(out, encoding="utf-8") as f:
        emb_lines = f.read().splitlines()
    assert ft_lines[0].split() == emb_lines[0].split()
    assert len(ft_lines) == len(emb_lines)
    for a, b in zip(ft_lines[1:], emb_lines[1:]):
        fa, fb = a.split(), b.split()
        assert fa[0] == fb[0]
        assert fa[1:] == [g5(float(x)) for x in fb[1:]], (a, b)


def gensim_model(path):
    from gensim.models.fasttext import load_facebook_vectors
    return load_facebook_vectors(path)


def without_eos(pairs):
    """gensim gives fastText's </s> the n-grams of "<</s>>" (fastText gives it none, and emb
    follows fastText: test_vectors_match_print_word_vectors), so its scores differ: left out."""
    return [p for p in pairs if p[0] != "</s>"]


def test_nn_of_unseen_words_matches_gensim(emb_bin, model):
    kv = gensim_model(model)
    for word in ["alphas", "überx", "unseenword", "café-au-lait"]:
        assert word not in kv.key_to_index
        r = run([emb_bin, "nn", model, word, "-k", "6"])
        assert r.returncode == 0, r.stderr
        got = without_eos([line.split(" ") for line in r.stdout.splitlines()])[:5]
        want = without_eos(kv.most_similar(word, topn=6))[:5]
        assert [w for w, _ in got] == [w for w, _ in want], (word, got, want)
        for (_, s1), (_, s2) in zip(got, want):
            assert abs(float(s1) - s2) < 1e-5


def test_analogy_with_unseen_words_matches_gensim(emb_bin, model):
    kv = gensim_model(model)
    a, b, c = "alphas", "beta", "gammas"
    r = run([emb_bin, "analogy", model, a, b, c, "-k", "4"])
    assert r.returncode == 0, r.stderr
    got = without_eos([line.split(" ") for line in r.stdout.splitlines()])[:3]
    want = without_eos(kv.most_similar(positive=[b, c], negative=[a], topn=4))[:3]
    assert [w for w, _ in got] == [w for w, _ in want]
    for (_, s1), (_, s2) in zip(got, want):
        assert abs(float(s1) - s2) < 1e-5


def test_eval_pairs_scores_unseen_words(emb_bin, model, tmp_path):
    """Every pair is scored, unseen words from their n-grams; the oracle is the cosine of
    fastText's own vectors (print-word-vectors, 5 digits) and scipy's correlations. (gensim's
    evaluate_word_pairs counts such pairs as out of vocabulary, even for FastText vectors.)"""
    import numpy as np
    from scipy import stats
    pairs = [("alpha", "alphas", 9.0), ("beta", "betas", 8.5), ("gamma", "zzz", 1.0),
             ("delta", "deltas", 7.0), ("kappa", "lambda", 3.0), ("über", "uberx", 2.0),
             ("café", "cafés", 6.0)]
    p = tmp_path / "pairs.tsv"
    p.write_text("".join(f"{a}\t{b}\t{s}\n" for a, b, s in pairs), encoding="utf-8")
    r = run([emb_bin, "eval-pairs", model, str(p), "--case-sensitive"])
    assert r.returncode == 0, r.stderr
    ft = fasttext_vectors(model, sorted({w for a, b, _ in pairs for w in (a, b)}))
    cos = []
    for a, b, _ in pairs:
        x, y = np.array(ft[a], dtype=float), np.array(ft[b], dtype=float)
        cos.append(x @ y / np.sqrt((x @ x) * (y @ y)))
    human = [s for _, _, s in pairs]
    lines = dict(line.split(": ", 1) for line in r.stdout.splitlines())
    assert float(lines["spearman"]) == pytest.approx(stats.spearmanr(human, cos)[0], abs=1e-4)
    assert float(lines["pearson"]) == pytest.approx(stats.pearsonr(human, cos)[0], abs=1e-3)
    assert lines["pairs"].startswith(f"{len(pairs)} used, 0 out of vocabulary")
    # the same vectors without the model (its .vec) skip the pairs with unseen words
    r = run([emb_bin, "eval-pairs", model[:-4] + ".vec", str(p), "--case-sensitive"])
    assert r.returncode == 1 and "fewer than 2 pairs" in r.stderr


def test_info_reads_a_bin(emb_bin, model):
    r = run([emb_bin, "info", model])
    assert r.returncode == 0, r.stderr
    assert "fasttext-bin" in r.stdout


@pytest.mark.parametrize("kind", ["skipgram", "cbow"])
def test_model_emb_trains_loads_in_fasttext(emb_bin, tmp_path, kind):
    """emb train --subwords --save-model writes a .bin that fastText loads, and fastText then
    gives the vectors emb gives, for its words and for unseen words; the .vec emb writes is
    the words' vectors."""
    corpus(tmp_path / "c.txt")
    vec, bin_ = str(tmp_path / "e.vec"), str(tmp_path / "e.bin")
    r = run([emb_bin, "train", str(tmp_path / "c.txt"), "-o", vec, "--model", kind, "--subwords",
             "--minn", "2", "--maxn", "4", "--bucket", "5000", "--min-count", "1", "--dim", "12",
             "--epochs", "3", "--threads", "1", "--save-model", bin_, "-q"])
    assert r.returncode == 0, r.stderr
    words = WORDS + UNSEEN
    ft = fasttext_vectors(bin_, words)
    em = emb_vectors(emb_bin, bin_, words)
    for w in words:
        assert [g5(x) for x in em[w]] == ft[w], (w, em[w], ft[w])
    with open(vec, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert lines[0] == f"{len(WORDS)} 12"
    for line in lines[1:]:
        parts = line.split(" ")
        assert [f32(float(x)) for x in parts[1:]] == em[parts[0]], parts[0]


def test_subword_options(emb_bin, tmp_path):
    corpus(tmp_path / "c.txt")
    base = [emb_bin, "train", str(tmp_path / "c.txt"), "-o", str(tmp_path / "o.vec"), "--min-count", "1",
            "--dim", "4", "--epochs", "1", "--threads", "1", "-q"]
    # checkpoints of subword runs: the final state resumes to the same vectors, and the subword
    # options are part of its identity
    sub = base + ["--subwords", "--bucket", "1000", "--binary", "0"]
    r = run(sub + ["--save-state", str(tmp_path / "s.ckpt")])
    assert r.returncode == 0, r.stderr
    want = (tmp_path / "o.vec").read_bytes()
    (tmp_path / "o.vec").unlink()
    r = run(sub + ["--resume", str(tmp_path / "s.ckpt"), "--keep-checkpoint"])
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o.vec").read_bytes() == want
    r = run(base + ["--subwords", "--bucket", "1001", "--resume", str(tmp_path / "s.ckpt")])
    assert r.returncode == 1 and "bucket 1000, but this run has bucket 1001" in r.stderr
    r = run(base + ["--minn", "7"])  # maxn takes fastText's 6
    assert r.returncode == 2 and "minn must be in [1, maxn = 6], got 7" in r.stderr
    # fastText's spellings and defaults: -minn/-maxn/-bucket, bucket 2,000,000
    r = run(base + ["-minn", "3", "-maxn", "5", "-bucket", "100", "--save-model", str(tmp_path / "m.bin")])
    assert r.returncode == 0, r.stderr
    info = subprocess.run([fasttext(), "dump", str(tmp_path / "m.bin"), "args"], capture_output=True,
                          text=True, timeout=60)
    assert info.returncode == 0, info.stderr
    args = dict(line.split() for line in info.stdout.splitlines() if len(line.split()) == 2)
    assert (args["minn"], args["maxn"], args["bucket"], args["model"], args["loss"]) == \
        ("3", "5", "100", "sg", "ns")


def test_continue_a_subword_model(emb_bin, tmp_path):
    """--continue on a model trained with subwords: the vocabulary grows as gensim 4.2's
    FastText build_vocab(update=True) grows it, the run keeps the model's n-gram settings (none
    given here), fastText's `-output PREFIX` writes PREFIX.vec and PREFIX.bin, and fastText
    loads that .bin and gives the vectors emb gives, for old, new and unseen words."""
    from gensim.models import FastText
    from gensim.models.word2vec import LineSentence

    corpus(tmp_path / "c.txt")
    rnd = random.Random(7)
    with open(tmp_path / "new.txt", "w", encoding="utf-8") as f:
        for i in range(120):  # "omega" is new and frequent, "rho" new and rare
            words = [rnd.choice(WORDS[:5]) for _ in range(8)] + ["omega"] * 2
            if i % 60 == 0:
                words.append("rho")
            f.write(" ".join(words) + "\n")
    r = run([emb_bin, "train", str(tmp_path / "c.txt"), "-o", str(tmp_path / "old.vec"),
             "--subwords", "--minn", "2", "--maxn", "4", "--bucket", "5000", "--min-count", "3",
             "--dim", "12", "--epochs", "3", "--threads", "1", "--save-state",
             str(tmp_path / "old.model"), "-q"])
    assert r.returncode == 0, r.stderr
    prefix = str(tmp_path / "cont")
    r = run([emb_bin, "train", "-input", str(tmp_path / "new.txt"), "-output", prefix, "--continue",
             str(tmp_path / "old.model"), "--min-count", "3", "--epochs", "3", "--threads", "1",
             "--save-vocab", str(tmp_path / "new.vocab")])
    assert r.returncode == 0, r.stderr
    assert "subwords" in r.stderr and "(continued)" in r.stderr
    got = {}
    for line in open(tmp_path / "new.vocab", encoding="utf-8"):
        w, c = line.rstrip("\n").rsplit(" ", 1)
        got[w] = int(c)
    m = FastText(min_count=3, vector_size=4, min_n=2, max_n=4, bucket=5000, workers=1)
    m.build_vocab(LineSentence(str(tmp_path / "c.txt")))
    m.build_vocab(LineSentence(str(tmp_path / "new.txt")), update=True)
    assert got == {w: m.wv.get_vecattr(w, "count") for w in m.wv.index_to_key}
    assert "omega" in got and "rho" not in got
    info = subprocess.run([fasttext(), "dump", prefix + ".bin", "args"], capture_output=True,
                          text=True, timeout=60)
    assert info.returncode == 0, info.stderr
    args = dict(line.split() for line in info.stdout.splitlines() if len(line.split()) == 2)
    assert (args["dim"], args["minn"], args["maxn"], args["bucket"]) == ("12", "2", "4", "5000")
    words = WORDS + ["omega"] + UNSEEN
    ft = fasttext_vectors(prefix + ".bin", words)
    em = emb_vectors(emb_bin, prefix + ".bin", words)
    for w in words:
        assert [g5(x) for x in em[w]] == ft[w], (w, em[w], ft[w])
    with open(prefix + ".vec", encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert lines[0] == f"{len(got)} 12"
    for line in lines[1:]:
        parts = line.split(" ")
        assert [f32(float(x)) for x in parts[1:]] == em[parts[0]], parts[0]


def test_continue_a_fasttext_model(emb_bin, model, tmp_path):
    """--continue on a model Debian's fastText trained (cbow and skipgram): the vocabulary
    (with fastText's "</s>") grows as gensim 4.2's load_facebook_model then
    build_vocab(update=True) grows it; with a learning rate of 1e-9 the old words' and unseen
    words' vectors stay the model's; the continued .bin loads in fastText with emb's vectors.
    A classifier and a model trained with another loss are refused by name."""
    from gensim.models.fasttext import load_facebook_model
    from gensim.models.word2vec import LineSentence

    rnd = random.Random(3)
    new = tmp_path / "new.txt"
    with open(new, "w", encoding="utf-8") as f:
        for _ in range(100):
            f.write(" ".join([rnd.choice(WORDS[:6]) for _ in range(8)] + ["omega"] * 2) + "\n")
    prefix = str(tmp_path / "cont")
    r = run([emb_bin, "train", "-input", str(new), "-output", prefix, "--continue", model,
             "--min-count", "1", "--alpha", "1e-9", "--epochs", "1", "--threads", "1",
             "--save-vocab", str(tmp_path / "new.vocab"), "-q"])
    assert r.returncode == 0, r.stderr
    got = {}
    for line in open(tmp_path / "new.vocab", encoding="utf-8"):
        w, c = line.rstrip("\n").rsplit(" ", 1)
        got[w] = int(c)
    m = load_facebook_model(model)  # the model's min_count (1) decides for new words there
    m.build_vocab(LineSentence(str(new)), update=True)
    assert got == {w: m.wv.get_vecattr(w, "count") for w in m.wv.index_to_key}
    assert "</s>" in got and "omega" in got
    old_words = WORDS + UNSEEN
    before = emb_vectors(emb_bin, model, old_words)
    after = emb_vectors(emb_bin, prefix + ".bin", old_words + ["omega"])
    for w in old_words:
        assert max(abs(a - b) for a, b in zip(after[w], before[w])) < 1e-6, w
    ft = fasttext_vectors(prefix + ".bin", old_words + ["omega"])
    for w in old_words + ["omega"]:
        assert [g5(x) for x in after[w]] == ft[w], (w, after[w], ft[w])
    # what emb does not train further
    with open(tmp_path / "lab.txt", "w") as f:
        for i in range(50):
            f.write(f"__label__{i % 2} " + " ".join(rnd.choice(WORDS) for _ in range(6)) + "\n")
    for kind, extra, needle in [("supervised", [], "is a supervised fastText model"),
                                ("skipgram", ["-loss", "hs"], "trained with loss hs")]:
        src = tmp_path / ("lab.txt" if kind == "supervised" else "new.txt")
        out = str(tmp_path / kind)
        p = subprocess.run([fasttext(), kind, "-input", str(src), "-output", out, "-dim", "4",
                            "-epoch", "1", "-minCount", "1", "-bucket", "100", "-thread", "1",
                            "-verbose", "0"] + extra, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        r = run([emb_bin, "train", str(new), "-o", str(tmp_path / "x.vec"), "--continue",
                 out + ".bin", "-q"])
        assert r.returncode == 1 and needle in r.stderr, r.stderr


def test_serve_answers_unseen_words(emb_bin, model):
    """emb serve on a .bin: unseen words get the vector fastText prints for them, in lookups,
    texts and queries."""
    import numpy as np
    from serve_util import Server

    unseen = ["alphas", "unseenword", "café-au-lait", "日本"]
    want = emb_vectors(emb_bin, model, unseen)  # checked against print-word-vectors above
    with Server(model) as s:
        info = s.get("/v1/info")
        assert info["unseen_words"] is True and info["format"] == "fasttext-bin", info
        got = s.post("/v1/lookup", {"words": unseen})["data"]
        assert [d["word"] for d in got] == unseen and all(d["id"] is None for d in got)
        for d in got:
            assert np.array_equal(np.array(d["embedding"], np.float32),
                                  np.array(want[d["word"]], np.float32)), d["word"]
        emb1 = s.post("/v1/embeddings", {"input": ["alphas"]})["data"][0]["embedding"]
        assert np.array_equal(np.array(emb1, np.float32), np.array(want["alphas"], np.float32))
        near = s.post("/v1/most_similar", {"positive": ["unseenword"], "topn": 3})["results"]
        assert len(near) == 3 and all(r["word"] in WORDS + ["</s>"] for r in near), near


def test_model_through_a_pipe_is_read_once(emb_bin, model, tmp_path):
    """A model given through a pipe can be read once only: nn answers for the model's words
    from that one read (without the n-grams' answers for unseen words, which need the model
    a second time), as it answers from the file."""
    fifo = tmp_path / "model.fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["/bin/sh", "-c", 'cat "$1" > "$2"', "sh", model, str(fifo)])
    try:
        piped = subprocess.run([emb_bin, "nn", str(fifo), "alpha", "-k", "5"], capture_output=True,
                               text=True, timeout=120)
    finally:
        writer.wait(timeout=120)
    assert piped.returncode == 0, piped.stderr
    whole = run([emb_bin, "nn", model, "alpha", "-k", "5"])
    assert whole.returncode == 0, whole.stderr
    assert piped.stdout == whole.stdout and piped.stdout
