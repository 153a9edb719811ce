"""emb.KeyedVectors.load on files gensim 4.2 writes at test time with KeyedVectors.save()
(inline and separate arrays, small and large, compressed), read without gensim's classes;
and most_similar_cosmul against gensim's on the same vectors."""
import os
import pickle

import numpy as np
import pytest
from conftest import same_bits
from gensim.models import KeyedVectors as GensimKV

import emb


def gensim_kv(n, dim, seed, counts=True, ties=False):
    rng = np.random.default_rng(seed)
    vec = rng.standard_normal((n, dim)).astype(np.float32)
    if ties:  # rows that repeat others exactly: equal scores, so the order of ties shows
        vec[n // 2:n // 2 + 8] = vec[3]
        vec[n // 2 + 8:n // 2 + 12] = vec[5]
    kv = GensimKV(dim)
    if n > 1000:  # what add_vectors stores, without its per-key work
        kv.index_to_key = [f"w{i}" for i in range(n)]
        kv.key_to_index = {w: i for i, w in enumerate(kv.index_to_key)}
        kv.vectors = vec
        kv.next_index = n
    else:
        kv.add_vectors([f"w{i}" for i in range(n)], vec)
    if counts:  # what set_vecattr(key, "count", c) stores, for every key at once
        kv.allocate_vecattrs(attrs=["count"], types=[np.int64])
        kv.expandos["count"][:] = rng.integers(1, 10 ** 6, n)
    return kv


def same_as_gensim(ours, path, mmap=None):
    theirs = GensimKV.load(str(path), mmap=mmap)
    assert ours.index_to_key == theirs.index_to_key
    assert ours.key_to_index == theirs.key_to_index
    same_bits(ours.vectors, theirs.vectors, "vectors")
    if "count" in theirs.expandos:
        assert [ours.get_vecattr(w, "count") for w in ours.index_to_key] == \
            [theirs.get_vecattr(w, "count") for w in theirs.index_to_key]
    else:
        assert ours.counts is None
    return theirs


# (rows, dim, save arguments, files beside the pickle): gensim's default sep_limit (arrays of
# 10 * 2**20 elements or more go beside the pickle) keeps a small table inline and puts a large
# one (110000 x 96 float32, 42 MB) in .vectors.npy.
CASES = {
    "small-inline": (50, 8, {}, []),
    "small-separate": (50, 8, {"sep_limit": 100}, ["vectors.npy"]),
    "large-separate": (110000, 96, {}, ["vectors.npy"]),
    "large-inline": (110000, 96, {"separately": []}, []),
    "small-gzip": (50, 8, {"sep_limit": 100}, ["vectors.npz"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_load_files_gensim_saved(case, tmp_path):
    n, dim, kw, beside = CASES[case]
    path = tmp_path / ("vectors.kv.gz" if case.endswith("gzip") else "vectors.kv")
    gensim_kv(n, dim, seed=n, counts=case != "small-inline").save(str(path), **kw)
    assert sorted(os.listdir(tmp_path)) == sorted([path.name] +
                                                  [f"{path.name}.{b}" for b in beside])
    ours = emb.KeyedVectors.load(path)
    theirs = same_as_gensim(ours, path)
    if n <= 1000:
        assert [w for w, _ in ours.most_similar("w7", topn=5)] == \
            [w for w, _ in theirs.most_similar("w7", topn=5)]


def test_load_maps_the_separate_vectors(tmp_path):
    path = tmp_path / "vectors.kv"
    gensim_kv(3000, 16, seed=1).save(str(path), sep_limit=1000)
    ours = emb.KeyedVectors.load(path, mmap="r")
    assert isinstance(ours.vectors, np.memmap) and not ours.vectors.flags.writeable
    same_as_gensim(ours, path, mmap="r")
    read = emb.KeyedVectors.load(path)
    assert not isinstance(read.vectors, np.memmap)
    assert ours.most_similar("w9", topn=10) == read.most_similar("w9", topn=10)
    gz = tmp_path / "vectors.kv.gz"
    gensim_kv(30, 4, seed=2).save(str(gz), sep_limit=10)
    with pytest.raises(OSError, match="Cannot mmap compressed"):
        emb.KeyedVectors.load(gz, mmap="r")


class _RunsCode:
    """A pickle that calls os.system when loaded by the standard unpickler."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_load_refuses_pickles_that_name_other_code(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "evil.kv"
    with open(path, "wb") as f:
        pickle.dump({"vectors": _RunsCode(marker)}, f, protocol=4)
    with pytest.raises(pickle.UnpicklingError, match="posix.system|os.system"):
        emb.KeyedVectors.load(path)
    assert not marker.exists()
    # a gensim file whose pickle also names something else is refused the same way
    gensim_kv(5, 4, seed=3).save(str(path))
    data = open(path, "rb").read().replace(b"\x8c\x0cKeyedVectors", b"\x8c\x0cFeyedVectors")
    path.write_bytes(data)
    with pytest.raises(pickle.UnpicklingError, match="FeyedVectors"):
        emb.KeyedVectors.load(path)


def cosmul_pairs(kv):
    return [(["w1"], []), (["w1", "w2"], ["w3"]), (["w4"], ["w5", "w6"]), ("w3", "w5"),
            ([kv["w2"] + 0.5], ["w7"]), (["w3"], [])]


@pytest.mark.parametrize("ties", [False, True])
def test_most_similar_cosmul_as_gensim(ties, tmp_path):
    theirs = gensim_kv(400, 12, seed=7, ties=ties)
    path = tmp_path / "vectors.kv"
    theirs.save(str(path))
    ours = emb.KeyedVectors.load(path)
    for pos, neg in cosmul_pairs(ours):
        for topn in (1, 10, 30):
            assert ours.most_similar_cosmul(pos, neg, topn=topn) == \
                theirs.most_similar_cosmul(pos, neg, topn=topn), (pos, neg, topn)
        same_bits(ours.most_similar_cosmul(pos, neg, topn=None),
                  theirs.most_similar_cosmul(pos, neg, topn=None), "all scores")
    assert ours.most_similar_cosmul(["w1"], topn=0) == []
    with pytest.raises(ValueError, match="no input"):
        ours.most_similar_cosmul(negative=["w1"])
    if ties:  # ties reach the top 10 of w3 (its 8 copies) and are ordered as gensim orders
        top = ours.most_similar_cosmul(["w3"], topn=10)
        assert len({s for _, s in top[:8]}) == 1


def test_most_similar_cosmul_restrict_vocab(tmp_path):
    # gensim 4.2 ignores restrict_vocab here; the oracle is gensim on the first n keys only
    full = gensim_kv(400, 12, seed=9)
    n = 150
    head = GensimKV(12)
    head.add_vectors(full.index_to_key[:n], full.vectors[:n])
    path = tmp_path / "vectors.kv"
    full.save(str(path))
    ours = emb.KeyedVectors.load(path)
    for pos, neg in cosmul_pairs(ours):
        got = ours.most_similar_cosmul(pos, neg, topn=20, restrict_vocab=n)
        assert got == head.most_similar_cosmul(pos, neg, topn=20)
        assert all(ours.key_to_index[w] < n for w, _ in got)
