"""emb.KeyedVectors against gensim 4.2's KeyedVectors on the same vectors (the same file read
by both), and emb.train: names, defaults and results."""
import os
import signal
import threading

import numpy as np
import pytest
from gensim.models import KeyedVectors as GensimKV

import emb
from conftest import same_bits

SRC = os.environ.get("EMB_SOURCE_DIR",
                     os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
QUESTIONS = os.path.join(SRC, "data", "eval", "questions-words.txt")


def question_subset(tmp_path, per_section=25):
    """A small questions file: the first questions of each section of the repository's
    questions-words.txt, plus the words they use (the vocabulary of the test vectors)."""
    lines, words, n = [], [], 0
    with open(QUESTIONS, encoding="utf8") as f:
        for line in f:
            if line.startswith(": "):
                lines.append(line)
                n = 0
            elif n < per_section:
                lines.append(line)
                words += line.split()
                n += 1
    path = tmp_path / "questions.txt"
    path.write_text("".join(lines), encoding="utf8")
    vocab = list(dict.fromkeys(words))
    return path, vocab


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kv")
    questions, vocab = question_subset(tmp)
    rng = np.random.default_rng(5)
    vocab += [f"extra{i}" for i in range(200)]
    vec = rng.standard_normal((len(vocab), 24)).astype(np.float32)
    # an analogy structure, so that some answers are right: pairs share an offset
    vec[1::2] = vec[0::2][: len(vec[1::2])] + rng.standard_normal(24).astype(np.float32)
    path = tmp / "vectors.txt"
    emb.write_vectors(path, vec, vocab)
    return emb.KeyedVectors.load_word2vec_format(path), GensimKV.load_word2vec_format(path), \
        questions, tmp


def close_lists(got, want):
    assert [w for w, _ in got] == [w for w, _ in want]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-5, atol=1e-6)


def test_loading_and_lookup(vectors):
    kv, gk, _, _ = vectors
    assert kv.index_to_key == gk.index_to_key and kv.key_to_index == gk.key_to_index
    assert np.array_equal(kv.vectors, gk.vectors) and kv.vector_size == gk.vector_size
    assert np.array_equal(kv["king"], gk["king"])
    assert np.array_equal(kv[["king", "queen"]], gk[["king", "queen"]])
    assert ("king" in kv) and ("no-such-word" not in kv) and len(kv) == len(gk)
    with pytest.raises(KeyError):
        kv["no-such-word"]


def test_most_similar(vectors):
    kv, gk, _, _ = vectors
    for kw in [dict(positive=["king"]), dict(positive="king", topn=3),
               dict(positive=["king", "woman"], negative=["man"]),
               dict(positive=[("king", 2.0), "woman"], negative=["man"], topn=7),
               dict(positive=["Paris"], restrict_vocab=100),
               dict(positive=[kv["king"]], topn=4),
               dict(positive=["king"], topn=len(kv))]:
        close_lists(kv.most_similar(**kw), gk.most_similar(**kw))
    np.testing.assert_allclose(kv.most_similar("king", topn=None),
                               gk.most_similar("king", topn=None), rtol=1e-6, atol=1e-6)
    assert kv.most_similar("king", topn=0) == gk.most_similar("king", topn=0) == []


def test_similarity_and_doesnt_match(vectors):
    kv, gk, _, _ = vectors
    assert np.isclose(kv.similarity("king", "queen"), gk.similarity("king", "queen"),
                      rtol=1e-6)
    assert np.isclose(kv.distance("king", "man"), gk.distance("king", "man"), rtol=1e-6)
    words = ["king", "queen", "man", "woman", "Paris"]
    assert kv.doesnt_match(words) == gk.doesnt_match(words)
    assert np.isclose(kv.n_similarity(["king", "man"], ["queen"]),
                      gk.n_similarity(["king", "man"], ["queen"]), rtol=1e-6)


def test_evaluate_word_analogies(vectors):
    kv, gk, questions, _ = vectors
    for kw in [{}, dict(restrict_vocab=150), dict(case_insensitive=False),
               dict(dummy4unknown=True)]:
        score, sections = kv.evaluate_word_analogies(questions, **kw)
        gscore, gsections = gk.evaluate_word_analogies(questions, **kw)
        assert score == gscore and score > 0
        assert [s["section"] for s in sections] == [s["section"] for s in gsections]
        for s, g in zip(sections, gsections):
            assert s["correct"] == g["correct"] and s["incorrect"] == g["incorrect"], s["section"]


def test_evaluate_word_pairs(vectors, tmp_path):
    kv, gk, _, _ = vectors
    rng = np.random.default_rng(1)
    words = kv.index_to_key[:60] + ["unknownword"]
    lines = ["# a comment"] + [f"{rng.choice(words)}\t{rng.choice(words)}\t{rng.random() * 10:.2f}"
                               for _ in range(80)]
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("\n".join(lines) + "\n", encoding="utf8")
    for kw in [{}, dict(dummy4unknown=True), dict(restrict_vocab=40)]:
        (r, rp), (rho, rhop), oov = kv.evaluate_word_pairs(pairs, **kw)
        (gr, grp), (grho, grhop), goov = gk.evaluate_word_pairs(pairs, **kw)
        np.testing.assert_allclose([r, rp, rho, rhop], [gr, grp, grho, grhop], rtol=1e-5,
                                   atol=1e-7)
        assert oov == goov


def test_every_format_reads_back(vectors):
    kv, gk, _, tmp = vectors
    for name in ["v.safetensors", "v.npy", "v.bin", "v.vec", "v.txt"]:
        kv.save(tmp / name)
        back = emb.KeyedVectors.load(tmp / name)
        assert back.index_to_key == kv.index_to_key, name
        assert np.array_equal(back.vectors, kv.vectors), name
    kv.save_word2vec_format(tmp / "g.bin", binary=True)
    g = GensimKV.load_word2vec_format(tmp / "g.bin", binary=True)
    assert g.index_to_key == kv.index_to_key and np.array_equal(g.vectors, kv.vectors)
    mapped = emb.KeyedVectors.load(tmp / "v.safetensors", mmap="r")
    assert not mapped.vectors.flags.writeable and np.array_equal(mapped.vectors, kv.vectors)
    close_lists(mapped.most_similar("king"), gk.most_similar("king"))
    with pytest.raises(emb.FormatError):
        emb.KeyedVectors.load(tmp / "questions.txt")


def corpus(path, sentences=3000, seed=0):
    """A synthetic corpus with structure: words of a topic occur together."""
    rng = np.random.default_rng(seed)
    topics = [[f"t{t}w{i}" for i in range(12)] for t in range(8)]
    with open(path, "w", encoding="utf8") as f:
        for _ in range(sentences):
            t = topics[rng.integers(len(topics))]
            f.write(" ".join(rng.choice(t, 10)) + "\n")
    return path


def test_train_from_a_file_and_from_sentences(tmp_path):
    path = corpus(tmp_path / "c.txt")
    kv = emb.train(str(path), vector_size=16, workers=1, epochs=3, sg=1)
    assert kv.finished and kv.vector_size == 16 and len(kv) == 96
    # a word's nearest neighbours are words of its topic
    near = [w for w, _ in kv.most_similar("t3w0", topn=5)]
    assert all(w.startswith("t3w") for w in near), near
    with open(path, encoding="utf8") as f:
        sentences = [line.split() for line in f]
    kv2 = emb.train(sentences, vector_size=16, workers=1, epochs=3, sg=1)
    assert kv2.index_to_key == kv.index_to_key and np.array_equal(kv2.vectors, kv.vectors)
    assert kv.get_vecattr("t3w0", "count") > 0
    with pytest.raises(emb.FormatError, match="no word occurs"):
        emb.train([["a", "b"]], min_count=5)
    # skip-gram shares a window's negatives unless told to draw them per pair (as gensim)
    shared = emb.train(str(path), vector_size=16, workers=1, epochs=3, sg=1,
                       shared_negatives=True)
    assert np.array_equal(shared.vectors, kv.vectors)
    pair = emb.train(str(path), vector_size=16, workers=1, epochs=3, sg=1,
                     shared_negatives=False)
    assert not np.array_equal(pair.vectors, kv.vectors)
    near = [w for w, _ in pair.most_similar("t3w0", topn=5)]
    assert all(w.startswith("t3w") for w in near), near


def test_train_lanes(tmp_path):
    """lanes (emb_w2v_options.lanes): one worker over 4 lanes gives the same bits twice and
    other vectors than over one lane, and still learns the topics; a negative count is a
    ValueError naming lanes."""
    path = corpus(tmp_path / "c.txt")
    one = emb.train(str(path), vector_size=16, workers=1, epochs=3, sg=1)
    four = emb.train(str(path), vector_size=16, workers=1, epochs=3, sg=1, lanes=4)
    again = emb.train(str(path), vector_size=16, workers=1, epochs=3, sg=1, lanes=4)
    assert np.array_equal(four.vectors, again.vectors)
    assert not np.array_equal(four.vectors, one.vectors)
    near = [w for w, _ in four.most_similar("t3w0", topn=5)]
    assert all(w.startswith("t3w") for w in near), near
    with pytest.raises(ValueError, match="lanes must be in"):
        emb.train(str(path), vector_size=16, workers=1, epochs=1, lanes=-1)


def test_train_over_several_paths(tmp_path):
    """emb.train takes a list of paths and directories, compressed or not, as emb train does:
    the vectors of the plain concatenation, bit for bit at one worker."""
    import bz2
    import gzip
    path = corpus(tmp_path / "c.txt")
    text = path.read_bytes()
    lines = text.split(b"\n")[:-1]
    a, b = b"\n".join(lines[:1000]) + b"\n", b"\n".join(lines[1000:]) + b"\n"
    (tmp_path / "a.gz").write_bytes(gzip.compress(a))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "1.txt").write_bytes(b[:len(b) // 2 + b[len(b) // 2:].index(b"\n") + 1])
    (tmp_path / "d" / "2").write_bytes(bz2.compress(b[len(b) // 2 + b[len(b) // 2:].index(b"\n")
                                                      + 1:]))
    args = dict(vector_size=16, workers=1, epochs=2, sg=1)
    want = emb.train(str(path), **args)
    for paths in ([tmp_path / "a.gz", tmp_path / "d"], (str(tmp_path / "a.gz"), tmp_path / "d")):
        got = emb.train(paths, **args)
        assert got.index_to_key == want.index_to_key
        assert np.array_equal(got.vectors, want.vectors)
    got = emb.train(corpus_file=[tmp_path / "a.gz", tmp_path / "d"], **args)
    assert np.array_equal(got.vectors, want.vectors)
    with pytest.raises(OSError, match="missing.txt"):
        emb.train([path, tmp_path / "missing.txt"], **args)


def test_train_lenient_and_lowercase(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"Hello world \xff\xfe hello WORLD\n" * 10)
    with pytest.raises(emb.FormatError, match="invalid UTF-8"):
        emb.train(path, min_count=1, vector_size=4, workers=1)
    kv = emb.train(path, min_count=1, vector_size=4, workers=1, lenient=True, lowercase=True)
    assert kv.skipped == (10, 0) and sorted(kv.index_to_key) == ["hello", "world"]
    assert kv.get_vecattr("hello", "count") == 20
    assert emb.train(path, min_count=1, vector_size=4, workers=1, lenient=True).skipped == (10, 0)


@pytest.mark.parametrize("scoring,threshold", [("default", 10.0), ("npmi", 0.3)])
def test_train_with_phrases_as_gensim(tmp_path, scoring, threshold):
    """emb.train(phrases=1): the vocabulary is the tokens of gensim's Phrases output."""
    from gensim.models.phrases import Phrases
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(200)]
    sentences = []
    for _ in range(2000):
        s = list(rng.choice(words, size=int(rng.integers(3, 15))))
        if rng.random() < 0.1:
            s[1:1] = ["new", "york"]
        sentences.append(s)
    path = tmp_path / "c.txt"
    path.write_text("".join(" ".join(s) + "\n" for s in sentences))
    kv = emb.train(path, min_count=1, vector_size=4, workers=1, epochs=1, phrases=1,
                   phrases_scoring=scoring, phrases_threshold=threshold)
    ph = Phrases(sentences, threshold=threshold, scoring=scoring)
    want = {}
    for s in sentences:
        for t in ph[s]:
            want[t] = want.get(t, 0) + 1
    got = {w: kv.get_vecattr(w, "count") for w in kv.index_to_key}
    assert got == want and "new_york" in got
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        emb.train(path, min_count=1, phrases=1, phrases_scoring="npmi")
    with pytest.raises(ValueError, match="default.*npmi"):
        emb.train(path, min_count=1, phrases=1, phrases_scoring="pmi")


def test_train_progress_and_stop(tmp_path):
    path = corpus(tmp_path / "c.txt", sentences=30000)
    seen = []

    def progress(p):
        seen.append(p)
        return len(seen) >= 2  # stop after the second report

    kv = emb.train(path, vector_size=8, workers=1, epochs=5, progress=progress)
    assert not kv.finished and len(seen) == 2
    assert 0 < seen[-1]["words_done"] < seen[-1]["words_total"] == 5 * 300000
    assert {"epoch", "alpha", "seconds"} <= set(seen[0])

    def boom(p):
        raise ZeroDivisionError("from the callback")

    with pytest.raises(ZeroDivisionError, match="from the callback"):
        emb.train(path, vector_size=8, workers=1, progress=boom)


def test_ctrl_c_stops_training(tmp_path):
    """SIGINT during training: emb stops at its next progress point and KeyboardInterrupt
    propagates (no callback given)."""
    path = corpus(tmp_path / "c.txt", sentences=60000)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            emb.train(path, vector_size=32, workers=1, epochs=50)
    finally:
        timer.cancel()


def without_eos(pairs, n=4):
    return [p for p in pairs if p[0] != "</s>"][:n]


def test_fasttext_vectors_as_gensim(tmp_path):
    """emb.load_facebook_vectors on a model Debian's fastText trains, against gensim 4.2's
    load_facebook_vectors on the same file: the vocabulary's vectors, unseen words' vectors,
    membership, similarity and most_similar with unseen words; and fastText's own
    print-word-vectors for the unseen words (emb computes them as fastText does)."""
    import shutil
    import subprocess
    from gensim.models.fasttext import load_facebook_vectors as gensim_load

    ft = shutil.which("fasttext")
    assert ft, "Debian's fasttext 0.9.2 is needed (scripts/deps.sh test)"
    rng = np.random.default_rng(2)
    words = ["alpha", "alphabet", "beta", "betamax", "gamma", "gammaray", "delta", "deltas",
             "café", "naïve", "日本語", "x"]
    with open(tmp_path / "c.txt", "w", encoding="utf8") as f:
        for _ in range(400):
            f.write(" ".join(rng.choice(words, size=10)) + "\n")
    r = subprocess.run([ft, "skipgram", "-input", str(tmp_path / "c.txt"), "-output",
                        str(tmp_path / "m"), "-dim", "16", "-epoch", "5", "-minCount", "1",
                        "-bucket", "3000", "-minn", "2", "-maxn", "4", "-thread", "1",
                        "-verbose", "0"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    path = tmp_path / "m.bin"
    kv, gk = emb.load_facebook_vectors(path), gensim_load(str(path))
    assert isinstance(kv, emb.FastTextKeyedVectors)
    assert kv.index_to_key == gk.index_to_key and (kv.min_n, kv.max_n) == (2, 4)
    # fastText's "</s>" has no n-grams (fastText's own vector: its row alone); gensim averages
    # it with the n-grams of "<</s>>" like any word
    eos = kv.key_to_index["</s>"]
    rows = [i for i in range(len(kv)) if i != eos]
    np.testing.assert_allclose(kv.vectors[rows], gk.vectors[rows], rtol=1e-5, atol=1e-7)
    unseen = ["alphas", "betam", "cafés", "日本", "zzz", "q"]
    for w in unseen:
        assert (w in kv) == (w in gk) and not kv.has_index_for(w)
        np.testing.assert_allclose(kv[w], gk[w], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(kv.get_vector(w, norm=True), gk.get_vector(w, norm=True),
                                   rtol=1e-5, atol=1e-7)
        if not np.any(gk[w]):  # "q": its n-grams' rows are zeros in this model (no direction)
            continue
        assert abs(kv.similarity(w, "alpha") - gk.similarity(w, "alpha")) < 1e-5
        close_lists(without_eos(kv.most_similar(w, topn=6)), without_eos(gk.most_similar(w, topn=6)))
    q = dict(positive=["alphas", "beta"], negative=["gammaray"], topn=5)
    close_lists(without_eos(kv.most_similar(**q)), without_eos(gk.most_similar(**q)))
    # fastText's own numbers for the unseen words (printed with 5 significant digits)
    p = subprocess.run([ft, "print-word-vectors", str(path)],
                       input="\n".join(unseen + ["</s>"]) + "\n", capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    for line in p.stdout.splitlines():
        w, *vals = line.split(" ")
        assert ["%.5g" % x for x in kv[w]] == [v for v in vals if v], w
    # written back byte for byte (gensim's save_facebook_model); a classifier is refused
    emb.save_facebook_model(kv, tmp_path / "again.bin")
    assert (tmp_path / "again.bin").read_bytes() == path.read_bytes()
    with open(tmp_path / "labeled.txt", "w", encoding="utf8") as f:
        for i in range(200):
            f.write(f"__label__{'ab'[i % 2]} " + " ".join(rng.choice(words, size=6)) + "\n")
    r = subprocess.run([ft, "supervised", "-input", str(tmp_path / "labeled.txt"), "-output",
                        str(tmp_path / "cls"), "-dim", "8", "-epoch", "2", "-thread", "1",
                        "-verbose", "0"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    cls = emb.load_facebook_vectors(tmp_path / "cls.bin")
    with pytest.raises(emb.UnsupportedError, match="supervised"):
        emb.save_facebook_model(cls, tmp_path / "cls-again.bin")
    assert not (tmp_path / "cls-again.bin").exists()
    with pytest.raises(TypeError, match="FastTextKeyedVectors"):
        emb.save_facebook_model(emb.KeyedVectors(vectors=np.ones((1, 2), np.float32),
                                                 index_to_key=["a"]), tmp_path / "x.bin")
    assert repr(kv).startswith(f"<FastTextKeyedVectors: {len(gk)} keys, vector_size 16")


@pytest.mark.parametrize("sg", [1, 0])
def test_train_with_subwords_as_the_cli(tmp_path, sg):
    """emb.train(max_n=...) trains fastText's subwords as `emb train --subwords` does: the
    same model, bit for bit (read back from the .bin the CLI writes with --save-model), an
    emb.FastTextKeyedVectors whose unseen words get vectors from their n-grams, and a model
    gensim 4.2 loads with the same vectors (within float32 rounding)."""
    import subprocess
    from gensim.models.fasttext import load_facebook_vectors as gensim_load

    rng = np.random.default_rng(5)
    words = ["alpha", "alphabet", "beta", "betamax", "gamma", "gammaray", "delta", "deltas",
             "café", "naïve", "日本語", "x"]
    path = tmp_path / "c.txt"
    with open(path, "w", encoding="utf8") as f:
        for _ in range(300):
            f.write(" ".join(rng.choice(words, size=10)) + "\n")
    args = dict(vector_size=16, window=3, negative=4, sample=1e-3, min_count=1, epochs=3,
                alpha=0.05, min_alpha=0.0001, seed=7, workers=1, sg=sg)
    kv = emb.train(str(path), min_n=2, max_n=4, bucket=3000, **args)
    assert isinstance(kv, emb.FastTextKeyedVectors) and kv.finished
    assert (kv.min_n, kv.max_n, kv.bucket) == (2, 4, 3000)
    r = subprocess.run([os.environ["EMB_BIN"], "train", str(path), "-o", str(tmp_path / "v.vec"),
                        "--model", "skipgram" if sg else "cbow", "--dim", "16", "--window", "3",
                        "--negative", "4", "--sample", "1e-3", "--min-count", "1",
                        "--epochs", "3", "--alpha", "0.05", "--min-alpha", "0.0001",
                        "--seed", "7", "--threads", "1", "--subwords", "--minn", "2",
                        "--maxn", "4", "--bucket", "3000", "--save-model",
                        str(tmp_path / "m.bin"), "-q"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    cli = emb.load_facebook_vectors(tmp_path / "m.bin")
    assert kv.index_to_key == cli.index_to_key
    same_bits(kv.vectors, cli.vectors, "the vocabulary's vectors")
    for w in ["alphas", "betam", "cafés", "日本", "zzz"]:
        assert w in kv and not kv.has_index_for(w)
        same_bits(kv[w], cli[w], f"the vector of unseen {w!r}")
    # saved from Python (gensim's save_facebook_model): the CLI's file, byte for byte, and
    # fastText's own numbers for unseen words
    emb.save_facebook_model(kv, tmp_path / "py.bin")
    assert (tmp_path / "py.bin").read_bytes() == (tmp_path / "m.bin").read_bytes()
    import shutil
    ft = shutil.which("fasttext")
    assert ft, "Debian's fasttext 0.9.2 is needed (scripts/deps.sh test)"
    unseen = ["alphas", "betam", "cafés", "日本"]
    p = subprocess.run([ft, "print-word-vectors", str(tmp_path / "py.bin")],
                       input="\n".join(unseen) + "\n", capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    for line in p.stdout.splitlines():
        w, *vals = line.split(" ")
        assert ["%.5g" % x for x in kv[w]] == [v for v in vals if v], w
    # skip-gram's per-pair negatives are the default with subwords, as in the CLI
    shared = emb.train(str(path), min_n=2, max_n=4, bucket=3000, shared_negatives=True, **args)
    assert np.array_equal(shared.vectors, kv.vectors) == (not sg)
    # gensim 4.2 reads the model the CLI wrote, with the same vectors within float32 rounding
    gk = gensim_load(str(tmp_path / "m.bin"))
    assert gk.index_to_key == kv.index_to_key and "</s>" not in kv.index_to_key
    np.testing.assert_allclose(kv.vectors, gk.vectors, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(kv["alphas"], gk["alphas"], rtol=1e-5, atol=1e-7)
    # trained further on new text (continue_from, `emb train --continue`): the CLI's model,
    # bit for bit; new words join, the model's words keep their rows' places
    path2 = tmp_path / "c2.txt"
    with open(path2, "w", encoding="utf8") as f:
        for _ in range(100):
            f.write(" ".join(rng.choice(words + ["epsilon", "epsilons"], size=8)) + "\n")
    more = emb.train(str(path2), continue_from=tmp_path / "py.bin", **args)
    assert isinstance(more, emb.FastTextKeyedVectors) and more.max_n == 4
    assert more.index_to_key[:len(kv)] == kv.index_to_key and "epsilon" in more.index_to_key
    r = subprocess.run([os.environ["EMB_BIN"], "train", str(path2), "-o", str(tmp_path / "v2.vec"),
                        "--model", "skipgram" if sg else "cbow", "--window", "3",
                        "--negative", "4", "--sample", "1e-3", "--min-count", "1",
                        "--epochs", "3", "--alpha", "0.05", "--min-alpha", "0.0001",
                        "--seed", "7", "--threads", "1", "--continue", str(tmp_path / "m.bin"),
                        "--save-model", str(tmp_path / "m2.bin"), "-q"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    cli2 = emb.load_facebook_vectors(tmp_path / "m2.bin")
    assert more.index_to_key == cli2.index_to_key
    same_bits(more.vectors, cli2.vectors, "the continued model's vectors")
    same_bits(more["epsilonic"], cli2["epsilonic"], "an unseen word after continuing")
    with pytest.raises(emb.Error, match="none.bin"):
        emb.train(str(path2), continue_from=tmp_path / "none.bin", **args)
    # without n-grams: a plain KeyedVectors, and an unseen word has no vector
    plain = emb.train(str(path), **args)
    assert type(plain) is emb.KeyedVectors and "alphas" not in plain
    with pytest.raises(emb.Error, match="minn must be in"):
        emb.train(str(path), min_n=5, max_n=4, **args)


def test_train_save_state_then_continue_as_the_cli(tmp_path):
    """emb.train(save_state=...) writes what `emb train --save-state` writes (byte for byte),
    so that a model trained without subwords can be trained further from Python
    (continue_from) as the CLI continues it (`--continue`), with the same bits; a run stopped
    by its progress callback saves what it trained so far, and a failed write raises."""
    import subprocess

    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(40)]
    path, path2 = tmp_path / "c.txt", tmp_path / "c2.txt"
    with open(path, "w", encoding="utf8") as f:
        for _ in range(300):
            f.write(" ".join(rng.choice(words, size=10)) + "\n")
    with open(path2, "w", encoding="utf8") as f:
        for _ in range(100):
            f.write(" ".join(rng.choice(words + ["new1", "new2"], size=8)) + "\n")
    args = dict(vector_size=12, window=3, negative=4, sample=1e-3, min_count=1, epochs=2,
                alpha=0.05, min_alpha=0.0001, seed=3, workers=1, sg=1, shared_negatives=False)
    cli = [os.environ["EMB_BIN"], "train", "--model", "skipgram", "--dim", "12", "--window",
           "3", "--negative", "4", "--sample", "1e-3", "--min-count", "1", "--epochs", "2",
           "--alpha", "0.05", "--min-alpha", "0.0001", "--seed", "3", "--threads", "1",
           "--per-pair-negatives", "-q"]
    kv = emb.train(str(path), save_state=tmp_path / "py.state", **args)
    assert type(kv) is emb.KeyedVectors and kv.finished
    r = subprocess.run(cli + [str(path), "-o", str(tmp_path / "v.vec"), "--save-state",
                              str(tmp_path / "cli.state")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "py.state").read_bytes() == (tmp_path / "cli.state").read_bytes()
    more = emb.train(str(path2), continue_from=tmp_path / "py.state",
                     save_state=tmp_path / "py2.state", **args)
    assert more.index_to_key[:len(kv)] == kv.index_to_key
    assert {"new1", "new2"} <= set(more.index_to_key)
    r = subprocess.run(cli + [str(path2), "-o", str(tmp_path / "v2.vec"), "--continue",
                              str(tmp_path / "cli.state"), "--save-state",
                              str(tmp_path / "cli2.state")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    cli2 = emb.KeyedVectors.load_word2vec_format(tmp_path / "v2.vec")
    assert more.index_to_key == cli2.index_to_key
    # the .vec is text (%.6g); the bits are compared through the states both wrote
    np.testing.assert_allclose(more.vectors, cli2.vectors, rtol=1e-5, atol=1e-6)
    assert (tmp_path / "py2.state").read_bytes() == (tmp_path / "cli2.state").read_bytes()
    # stopped by the callback: the state holds what was trained, and continues like any other
    part = emb.train(str(path), save_state=tmp_path / "part.state",
                     progress=lambda p: True, **args)
    assert not part.finished and (tmp_path / "part.state").stat().st_size > 0
    again = emb.train(str(path2), continue_from=tmp_path / "part.state", **args)
    assert again.index_to_key[:len(part)] == part.index_to_key
    # a state that cannot be written: emb's message, with the path
    with pytest.raises(emb.Error, match="no-such-dir"):
        emb.train(str(path), save_state=tmp_path / "no-such-dir" / "x.state", **args)
