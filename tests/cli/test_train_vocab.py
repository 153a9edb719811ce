"""`emb train --save-vocab / --read-vocab` (the word2vec tool's vocabulary files) and
continued training (`--save-state`, `--continue`), with gensim 4.2's build_vocab and
build_vocab(update=True) as the oracle for the vocabulary."""
from collections import Counter

import numpy as np
from gensim.models import KeyedVectors, Word2Vec
from gensim.models.word2vec import LineSentence

from test_word2vec import COLORS, synthetic, train

BASE = ["--dim", 12, "--threads", 1, "--epochs", 2, "--seed", 4, "-q"]


def read_vocab(path):
    out = []
    for line in open(path, encoding="utf-8"):
        w, c = line.rstrip("\n").rsplit(" ", 1)
        out.append((w, int(c)))
    return out


def gensim_vocab(corpus, min_count):
    m = Word2Vec(min_count=min_count, vector_size=4, workers=1)
    m.build_vocab(LineSentence(str(corpus)))
    return m


def test_save_vocab_matches_gensim(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt", lines=300)
    with open(corpus, "a") as f:  # rare words around min_count
        f.write("rare1 rare2 rare2 rare3 rare3 rare3\n")
    train(emb_bin, corpus, "-o", tmp_path / "v.vec", "--min-count", 3, "--save-vocab",
          tmp_path / "v.vocab", *BASE)
    got = read_vocab(tmp_path / "v.vocab")
    m = gensim_vocab(corpus, 3)
    assert dict(got) == {w: m.wv.get_vecattr(w, "count") for w in m.wv.index_to_key}
    assert [c for _, c in got] == sorted((c for _, c in got), reverse=True)
    # the rows of the vectors are the words of the file, in order
    kv = KeyedVectors.load_word2vec_format(str(tmp_path / "v.vec"))
    assert kv.index_to_key == [w for w, _ in got]


def test_read_vocab_gives_the_same_run(emb_bin, tmp_path):
    """A vocabulary file saved from the corpus itself gives bit-identical vectors (1 thread):
    same words, order, counts and subsampling."""
    corpus = synthetic(tmp_path / "c.txt", lines=300)
    train(emb_bin, corpus, "-o", tmp_path / "a.bin", "--min-count", 2, "--save-vocab",
          tmp_path / "a.vocab", *BASE)
    train(emb_bin, corpus, "-o", tmp_path / "b.bin", "--min-count", 2, "--read-vocab",
          tmp_path / "a.vocab", *BASE)
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()


def test_read_vocab_decides_the_words(emb_bin, tmp_path):
    """The file's counts decide order and min_count; corpus words missing from it are
    dropped; a word of the file missing from the corpus keeps its (untrained) row."""
    corpus = synthetic(tmp_path / "c.txt", lines=300)
    (tmp_path / "v.vocab").write_text("cat 10\ndog 50\nred 7\nunseen 20\nblue 1\n")
    train(emb_bin, corpus, "-o", tmp_path / "v.vec", "--min-count", 5, "--read-vocab",
          tmp_path / "v.vocab", *BASE)
    kv = KeyedVectors.load_word2vec_format(str(tmp_path / "v.vec"))
    assert kv.index_to_key == ["dog", "unseen", "cat", "red"]
    for text, needle in [("cat 10\ncat 3\n", "line 2 (byte offset 7): the word repeats an earlier one"),
                         ("cat ten\n", "line 1 (byte offset 0): the count \"ten\" is not a number"),
                         ("cat\n", "line 1 (byte offset 0): expected \"word count\""),
                         ("", "no \"word count\" line")]:
        (tmp_path / "bad.vocab").write_text(text)
        p = train(emb_bin, corpus, "-o", tmp_path / "w.vec", "--read-vocab", tmp_path / "bad.vocab",
                  *BASE, check=False)
        assert p.returncode == 1 and needle in p.stderr and "bad.vocab" in p.stderr, p.stderr


def test_continue_grows_the_vocabulary_as_gensim(emb_bin, tmp_path):
    old = synthetic(tmp_path / "old.txt", lines=300)
    new = tmp_path / "new.txt"
    rng = np.random.default_rng(3)
    with open(new, "w") as f:
        for i in range(200):  # new words: zebra (frequent, with colours), newt (rare)
            words = list(rng.choice(["red", "green", "blue", "zebra"], size=12))
            if i % 50 == 0:
                words.append("newt")
            f.write(" ".join(words) + "\n")
    train(emb_bin, old, "-o", tmp_path / "old.vec", "--min-count", 5, "--save-state",
          tmp_path / "old.model", "--save-vocab", tmp_path / "old.vocab", *BASE)
    # negatives per pair: on this corpus of four words (dim 12) one draw per window separates
    # zebra from the animals less clearly (docs/word2vec.md, "Shared negatives as the default")
    train(emb_bin, new, "-o", tmp_path / "new.vec", "--min-count", 5, "--continue",
          tmp_path / "old.model", "--save-vocab", tmp_path / "new.vocab", "--threads", 1,
          "--epochs", 10, "--sample", 0, "-q", "--per-pair-negatives")
    got = read_vocab(tmp_path / "new.vocab")
    # gensim: build_vocab on the old text, then build_vocab(update=True) on the new one
    m = gensim_vocab(old, 5)
    m.build_vocab(LineSentence(str(new)), update=True)
    want = {w: m.wv.get_vecattr(w, "count") for w in m.wv.index_to_key}
    assert dict(got) == want
    old_words = [w for w, _ in read_vocab(tmp_path / "old.vocab")]
    assert [w for w, _ in got][:len(old_words)] == old_words  # old rows keep their place
    assert "zebra" in want and "newt" not in want
    kv = KeyedVectors.load_word2vec_format(str(tmp_path / "new.vec"))
    assert kv.vector_size == 12  # the model's dim, without --dim
    # zebra was learned among the colours
    colours = np.mean([kv.similarity("zebra", c) for c in ("red", "green", "blue")])
    animals = np.mean([kv.similarity("zebra", a) for a in ("cat", "dog", "horse")])
    assert colours > animals, (colours, animals)
    assert {w for w, _ in kv.most_similar("zebra", topn=3)} <= set(COLORS)


def test_continue_keeps_the_model_rows(emb_bin, tmp_path):
    """With a learning rate of 1e-9 nothing moves: the model's vectors come back as they were,
    and a new word's vector is a fresh one, in [-0.5/dim, 0.5/dim)."""
    old = synthetic(tmp_path / "old.txt", lines=300)
    train(emb_bin, old, "-o", tmp_path / "old.bin", "--min-count", 5, "--save-state",
          tmp_path / "old.model", *BASE)
    (tmp_path / "new.txt").write_text("red green zebra blue zebra\n" * 3)
    train(emb_bin, tmp_path / "new.txt", "-o", tmp_path / "new.bin", "--min-count", 3,
          "--continue", tmp_path / "old.model", "--alpha", "1e-9", "--epochs", 1, "-q")
    a = KeyedVectors.load_word2vec_format(str(tmp_path / "old.bin"), binary=True)
    b = KeyedVectors.load_word2vec_format(str(tmp_path / "new.bin"), binary=True)
    assert b.index_to_key[:len(a.index_to_key)] == a.index_to_key
    assert np.allclose(b.vectors[:len(a.index_to_key)], a.vectors, atol=1e-6)
    assert np.all(np.abs(b["zebra"]) <= 0.5 / 12)
    p = train(emb_bin, tmp_path / "new.txt", "-o", tmp_path / "x.bin", "--continue",
              tmp_path / "old.bin", check=False)
    assert p.returncode == 1 and "old.bin is not an emb word2vec model" in p.stderr
