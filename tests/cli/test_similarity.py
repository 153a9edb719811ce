"""`emb most-similar`, `emb similarity` and `emb doesnt-match` (include/emb/similarity.h)
against gensim 4.2's KeyedVectors on the same vectors: most_similar with positive and
negative words and restrict_vocab, similarity, n_similarity, doesnt_match, and queries by row
id on a table without words. Also eval-analogies' note when every question is skipped."""
import itertools

import numpy as np
import pytest
from gensim.models import KeyedVectors

from conftest import run
from shared_data import shared_path


@pytest.fixture(scope="module")
def lee():
    path = shared_path("fixtures", "gensim", "lee_fasttext.vec")
    return path, KeyedVectors.load_word2vec_format(path)


def pairs(text):
    return [(w, float(s)) for w, s in (line.rsplit(" ", 1) for line in text.splitlines() if line)]


def check_same_ranking(got, want, atol):
    """Same words in the same order, except where gensim's float32 scores of two neighbours
    are within atol of each other (their order is then a matter of rounding)."""
    assert len(got) == len(want)
    assert np.allclose([s for _, s in got], [s for _, s in want], atol=atol)
    for (gw, gs), (ww, ws) in zip(got, want):
        if gw != ww:
            assert abs(gs - ws) <= atol and any(abs(s - gs) <= 2 * atol for w, s in want if w == gw), \
                (got, want)


@pytest.mark.parametrize("positive,negative,restrict", [
    (["government"], [], None),
    (["women", "Israel"], ["men"], None),
    (["police", "officers"], [], None),
    (["Australia"], ["government", "police"], None),
    ([], ["day"], None),
    (["government", "minister"], ["police"], 500),
])
def test_most_similar_matches_gensim(emb_bin, lee, positive, negative, restrict):
    path, kv = lee
    argv = [emb_bin, "most-similar", path, *positive, "-k", "8"]
    if negative:
        argv += ["-n", ",".join(negative)]
    if restrict:
        argv += ["--restrict", str(restrict)]
    p = run(argv)
    assert p.returncode == 0, p.stderr
    want = kv.most_similar(positive=positive, negative=negative, topn=8, restrict_vocab=restrict)
    check_same_ranking(pairs(p.stdout), want, 2e-6)
    if restrict:
        assert all(kv.key_to_index[w] < restrict for w, _ in pairs(p.stdout))


def test_similarity_and_n_similarity_match_gensim(emb_bin, lee):
    path, kv = lee
    words = ["government", "police", "Australia", "day", "man", "women", "the"]
    for a, b in itertools.combinations(words, 2):
        p = run([emb_bin, "similarity", path, a, b])
        assert p.returncode == 0, p.stderr
        assert abs(float(p.stdout) - float(kv.similarity(a, b))) < 1e-6
    for s1, s2 in [(["president", "minister"], ["Israel", "Palestinian"]),
                   (["government", "police"], ["day"]), (["man", "women", "the"], ["children", "men"])]:
        p = run([emb_bin, "similarity", path, ",".join(s1), ",".join(s2)])
        assert p.returncode == 0, p.stderr
        assert abs(float(p.stdout) - float(kv.n_similarity(s1, s2))) < 1e-6


def test_doesnt_match_matches_gensim(emb_bin, lee):
    path, kv = lee
    vocab = kv.index_to_key[:300]
    rng = np.random.default_rng(5)
    for _ in range(20):
        words = list(rng.choice(vocab, size=5, replace=False))
        p = run([emb_bin, "doesnt-match", path, *words])
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == kv.doesnt_match(words)
    # unknown words are left out with a warning, as gensim does
    p = run([emb_bin, "doesnt-match", path, "government", "police", "not-a-word", "day"])
    assert p.returncode == 0
    assert "'not-a-word' is not in the vocabulary; left out" in p.stderr
    assert p.stdout.strip() == kv.doesnt_match(["government", "police", "day"])


def test_rows_of_a_table_without_words(emb_bin, lee, tmp_path):
    """--rows: the same answers by row id, also from an .npy table that has no words."""
    path, kv = lee
    npy = tmp_path / "t.npy"
    np.save(npy, kv.vectors)
    row = kv.key_to_index["government"]
    p = run([emb_bin, "most-similar", str(npy), "--rows", str(row), "-k", "6"])
    assert p.returncode == 0, p.stderr
    got = [(int(r), s) for r, s in pairs(p.stdout)]
    want = kv.most_similar(positive=[row], topn=6)
    check_same_ranking([(kv.index_to_key[r], s) for r, s in got], want, 2e-6)
    a, b = kv.key_to_index["man"], kv.key_to_index["women"]
    p = run([emb_bin, "similarity", str(npy), "--rows", str(a), str(b)])
    assert abs(float(p.stdout) - float(kv.similarity("man", "women"))) < 1e-6
    p = run([emb_bin, "most-similar", str(npy), "--rows", str(len(kv.index_to_key))])
    assert p.returncode == 1 and "expected an integer in [0, %d]" % (len(kv.index_to_key) - 1) in p.stderr
    p = run([emb_bin, "most-similar", str(npy), "government"])
    assert p.returncode == 1 and "holds no words" in p.stderr


def test_errors(emb_bin, lee):
    path, kv = lee
    p = run([emb_bin, "most-similar", path, "not-a-word"])
    assert p.returncode == 1 and "'not-a-word' is not in the vocabulary" in p.stderr
    p = run([emb_bin, "most-similar", path])
    assert p.returncode == 2 and "nothing to compare" in p.stderr
    p = run([emb_bin, "similarity", path, "man"])
    assert p.returncode == 2


def test_eval_analogies_note_when_everything_is_skipped(emb_bin, lee, tmp_path):
    path, kv = lee
    q = tmp_path / "q.txt"
    q.write_text(": capital\nzzqx zzqy zzqz zzqw\nAthens Greece Baghdad Iraq\n")
    p = run([emb_bin, "eval-analogies", path, str(q), "--restrict", "10"])
    assert p.returncode == 0, p.stderr
    assert "note: every question was skipped: none has its four words among the first 10 rows" \
        in p.stderr
    p = run([emb_bin, "eval-analogies", "--help"])
    assert "restrict_vocab=300000" in p.stdout
