"""emb.Knn's search and analogy and emb.spearman (emb_knn_search, emb_knn_analogy,
emb_spearman, through the package) against independent references: a float64 NumPy
computation of cosine similarities, gensim 4.2's most_similar on the same vectors, and
scipy-style average-rank Spearman computed here. Scores are within float32 tolerance of the
exact cosines, with rankings that agree except where two scores are within rounding; against
itself, emb's search gives the same bits at any thread count and in every kernel tier
(docs/search.md)."""
import numpy as np
import pytest
from gensim.models import KeyedVectors
from scipy.stats import spearmanr

import emb
from parity_util import RUN_KERNEL_MODE, kernel_modes

TOL = 2e-6  # cosine scores: float32 products of unit vectors


def Index(table, rows=0):
    """emb's cosine index over a float32 copy of the table (the index keeps the copy)."""
    return emb.Knn(np.ascontiguousarray(table, dtype=np.float32), rows)


def ref_cos(table, q):
    t = table.astype(np.float64)
    n = np.linalg.norm(t, axis=1)
    tn = np.where(n[:, None] > 0, t / np.where(n > 0, n, 1)[:, None], 0)
    qq = q.astype(np.float64)
    qn = np.linalg.norm(qq, axis=1)
    qq = np.where(qn[:, None] > 0, qq / np.where(qn > 0, qn, 1)[:, None], 0)
    return qq @ tn.T


def check_topk(ids, sc, cos, k, excluded=None):
    """ids/sc are a valid top-k of cos: scores match cos[ids], sorted, and nothing outside
    is better than the k-th by more than the tolerance."""
    for q in range(cos.shape[0]):
        row = cos[q].copy()
        if excluded is not None:
            for e in excluded[q]:
                if e >= 0:
                    row[e] = -np.inf
        got = ids[q]
        valid = got[got >= 0]
        assert len(valid) == min(k, np.isfinite(row).sum())
        assert len(set(valid.tolist())) == len(valid)
        np.testing.assert_allclose(sc[q, :len(valid)], row[valid], rtol=0, atol=TOL)
        assert np.all(np.diff(sc[q, :len(valid)]) <= 0)
        if len(valid):
            kth = row[valid[-1]]
            others = np.setdiff1d(np.arange(len(row)), valid)
            assert np.all(row[others] <= kth + 2 * TOL)
        # where emb and the reference agree on a clear order, the ids must match
        want = np.argsort(-row, kind="stable")[:len(valid)]
        for j in range(len(valid)):
            if j + 1 < len(valid) and abs(row[want[j]] - row[want[j + 1]]) < 4 * TOL:
                continue
            if j > 0 and abs(row[want[j]] - row[want[j - 1]]) < 4 * TOL:
                continue
            assert got[j] == want[j], (q, j, got[:len(valid)], want)


@pytest.mark.parametrize("seed", range(40))
def test_search_random(seed):
    rng = np.random.default_rng(seed)
    v = int(rng.integers(1, 5000))
    d = int(rng.integers(1, 130))
    nq = int(rng.integers(0, 150))
    k = int(rng.integers(1, 20))
    table = rng.standard_normal((v, d)).astype(np.float32)
    if v > 3:
        table[rng.integers(0, v)] = 0  # a zero row: similarity 0
    rows = int(rng.integers(0, v + 1))
    idx = Index(table, rows)
    q = rng.standard_normal((nq, d)).astype(np.float32)
    nex = int(rng.integers(0, 4))
    ex = rng.integers(-1, v, size=(nq, nex)) if nex else None
    ids, sc = idx.search(q, k, ex)
    searched = rows or v
    cos = ref_cos(table[:searched], q)
    check_topk(ids, sc, cos, k, None if ex is None else np.where(ex < searched, ex, -1))


def _search_and_analogies(idx, q, abc):
    return idx.search(q, 10) + idx.analogy(abc, 5)


def _same_bits(a, b):
    return all(np.array_equal(x.view(np.int32) if x.dtype == np.float32 else x,
                              y.view(np.int32) if y.dtype == np.float32 else y)
               for x, y in zip(a, b))


@pytest.mark.parametrize("shape", [(20000, 64, 300), (5000, 100, 70), (3001, 300, 130),
                                   (777, 7, 65)])
def test_search_threads_identical(shape):
    """The same bits at 1, 2 and 3 threads, for searches and analogies. 20000 x 64 with 300
    queries is where scores through OpenBLAS's sgemm differed by an ulp between 1 and 2
    threads on its Haswell/Zen kernels (docs/search.md)."""
    v, d, nq = shape
    rng = np.random.default_rng(v)
    table = rng.standard_normal((v, d)).astype(np.float32)
    q = rng.standard_normal((nq, d)).astype(np.float32)
    abc = rng.integers(0, v, size=(nq, 3))
    idx = Index(table)
    try:
        runs = []
        for threads in (1, 2, 3):
            emb.set_num_threads(threads)
            runs.append(_search_and_analogies(idx, q, abc))
    finally:
        emb.set_num_threads(0)
    assert _same_bits(runs[0], runs[1]), "1 vs 2 threads"
    assert _same_bits(runs[0], runs[2]), "1 vs 3 threads"


def test_search_kernel_tiers_identical():
    """The same bits from every kernel variant this CPU runs (the scalar reference, AVX2,
    AVX-512), at one and two threads."""
    rng = np.random.default_rng(11)
    table = rng.standard_normal((9000, 100)).astype(np.float32)
    table[5] = 0
    q = rng.standard_normal((150, 100)).astype(np.float32)
    abc = rng.integers(0, 9000, size=(150, 3))
    idx = Index(table)
    runs = {}
    try:
        for mode in kernel_modes():
            for threads in (1, 2):
                emb.set_kernel_mode(mode)
                emb.set_num_threads(threads)
                runs[(mode, threads)] = _search_and_analogies(idx, q, abc)
    finally:
        emb.set_kernel_mode(RUN_KERNEL_MODE)
        emb.set_num_threads(0)
    first = next(iter(runs))
    for key, r in runs.items():
        assert _same_bits(runs[first], r), f"mode/threads {key} differs from {first}"
    # and the scores are the documented chain of fused multiply-adds: within float32
    # rounding of the float64 cosines (the ranking test above checks the order)
    ids, sc = runs[first][0], runs[first][1]
    cos = ref_cos(table, q)
    np.testing.assert_allclose(sc, np.take_along_axis(cos, ids, 1), rtol=0, atol=TOL)


def test_analogy_matches_gensim():
    rng = np.random.default_rng(3)
    v, d = 3000, 50
    table = rng.standard_normal((v, d)).astype(np.float32)
    kv = KeyedVectors(d)
    kv.add_vectors([f"w{i}" for i in range(v)], table)
    idx = Index(table)
    abc = rng.integers(0, v, size=(200, 3))
    ids, sc = idx.analogy(abc, 5)
    for q, (a, b, c) in enumerate(abc):
        res = kv.most_similar(positive=[f"w{b}", f"w{c}"], negative=[f"w{a}"], topn=5)
        want = [int(w[1:]) for w, _ in res]
        wsc = np.array([s for _, s in res])
        np.testing.assert_allclose(sc[q], wsc, rtol=0, atol=1e-5)
        for j in range(5):
            close = (j > 0 and abs(wsc[j] - wsc[j - 1]) < 1e-5) or \
                    (j < 4 and abs(wsc[j] - wsc[j + 1]) < 1e-5)
            if not close:
                assert ids[q, j] == want[j], (q, ids[q], want)


def test_nn_matches_gensim():
    rng = np.random.default_rng(5)
    v, d = 2000, 32
    table = rng.standard_normal((v, d)).astype(np.float32)
    kv = KeyedVectors(d)
    kv.add_vectors([f"w{i}" for i in range(v)], table)
    idx = Index(table, 1500)
    for w in rng.integers(0, v, size=50):
        res = kv.most_similar(f"w{w}", topn=8, restrict_vocab=1500)
        ids, sc = idx.search(table[w:w + 1], 8, np.array([[w]]))
        np.testing.assert_allclose(sc[0], [s for _, s in res], rtol=0, atol=1e-5)
        assert [int(x[1:]) for x, _ in res] == ids[0].tolist()


def ref_spearman(x, y):
    def ranks(v):
        order = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        sv = v[order]
        i = 0
        while i < len(v):
            j = i
            while j + 1 < len(v) and sv[j + 1] == sv[i]:
                j += 1
            r[order[i:j + 1]] = (i + j + 2) / 2
            i = j + 1
        return r
    return np.corrcoef(ranks(x), ranks(y))[0, 1]


@pytest.mark.parametrize("seed", range(30))
def test_spearman(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    x = np.round(rng.standard_normal(n), int(rng.integers(0, 3)))  # ties
    y = x * rng.standard_normal() + rng.standard_normal(n)
    rho = emb.spearman(x, y)
    want = ref_spearman(x, y)
    if np.isnan(want):
        assert np.isnan(rho)
    else:
        assert abs(rho - want) < 1e-12
    s = spearmanr(x, y).correlation  # SciPy's, too (python3-scipy comes with python3-gensim)
    if not np.isnan(s):
        assert abs(rho - s) < 1e-12
