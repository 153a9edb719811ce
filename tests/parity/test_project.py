"""emb_pca and emb_tsne (include/emb/search.h, docs/search.md), through the package (emb.pca,
emb.tsne), against scikit-learn 1.2, at test time:

- PCA: the coordinates and variances of sklearn.decomposition.PCA (full SVD), with its sign
  convention, on random and clustered data, wide and narrow, and on data of low rank;
- t-SNE: the input similarities are scikit-learn's (the KL divergence emb reports equals the
  one computed here from scikit-learn's own joint probabilities and emb's layout), and the
  layout is as good as scikit-learn's Barnes-Hut t-SNE run with the same recipe (KL
  divergence, trustworthiness); the exact gradient (theta 0) too;
- both give the same bits at 1, 2 and 3 threads; bad input is refused with emb's exception
  class and message.
"""
import re

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.manifold import TSNE, trustworthiness
from sklearn.manifold._t_sne import _joint_probabilities_nn
from sklearn.neighbors import NearestNeighbors
from threadpoolctl import threadpool_limits

import emb


def pca(x, k, threads=None):
    x = np.ascontiguousarray(x, dtype=np.float32)
    if threads:
        emb.set_num_threads(threads)
    try:
        return emb.pca(x, k)
    finally:
        emb.set_num_threads(0)


def tsne(x, threads=None, **kw):
    x = np.ascontiguousarray(x, dtype=np.float32)
    if threads:
        emb.set_num_threads(threads)
    try:
        return emb.tsne(x, **kw)
    finally:
        emb.set_num_threads(0)


def blobs(n, d, k=5, spread=3.0, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, d)) * spread
    labels = rng.integers(0, k, n)
    return (centres[labels] + rng.normal(size=(n, d))).astype(np.float32), labels


# ---- PCA ---------------------------------------------------------------------------------

@pytest.mark.parametrize("n,d,k", [(300, 20, 2), (500, 50, 3), (40, 100, 2), (1000, 8, 8),
                                   (7, 3, 1), (2, 5, 1)])
def test_pca_is_sklearns(n, d, k):
    x, _ = blobs(n, d, seed=n + d)
    got, var = pca(x, k)
    p = PCA(k, svd_solver="full").fit(x.astype(np.float64))
    want = p.transform(x.astype(np.float64))
    scale = max(1.0, np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * scale)
    np.testing.assert_allclose(var, p.explained_variance_, rtol=1e-6, atol=1e-9)


def test_pca_of_low_rank_data():
    """Rows on a line: one axis carries everything, the others have variance 0 and
    coordinates 0."""
    rng = np.random.default_rng(5)
    x = (rng.normal(size=(50, 1)) * rng.normal(size=(1, 6)) + rng.normal(size=(1, 6))).astype(np.float32)
    got, var = pca(x, 3)
    want = PCA(1, svd_solver="full").fit_transform(x.astype(np.float64))
    np.testing.assert_allclose(got[:, 0], want[:, 0], rtol=0, atol=1e-5)
    assert np.abs(got[:, 1:]).max() < 1e-5 and var[1:].max() < 1e-10
    same, v = pca(np.ones((4, 3), np.float32), 2)  # identical rows
    assert not same.any() and not v.any()


@pytest.mark.parametrize("threads", [2, 3])
def test_pca_same_bits_at_any_thread_count(threads):
    x, _ = blobs(700, 64, seed=9)
    one = pca(x, 2, threads=1)
    many = pca(x, 2, threads=threads)
    assert np.array_equal(one[0], many[0]) and np.array_equal(one[1], many[1])


# ---- t-SNE -------------------------------------------------------------------------------

def sklearn_p(x, perplexity):
    """scikit-learn's joint probabilities (its Barnes-Hut recipe) as a dense matrix."""
    n = x.shape[0]
    k = min(n - 1, int(3.0 * perplexity + 1))
    knn = NearestNeighbors(n_neighbors=k, metric="euclidean").fit(x)
    dist = knn.kneighbors_graph(mode="distance")
    dist.data **= 2
    return np.asarray(_joint_probabilities_nn(dist, perplexity, 0).todense())


def kl_of(p, y):
    y = y.astype(np.float64)
    d2 = ((y[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    q = 1 / (1 + d2)
    np.fill_diagonal(q, 0)
    q /= q.sum()
    m = p > 0
    return float((p[m] * np.log(p[m] / q[m])).sum())


@pytest.mark.parametrize("n,d,perplexity", [(400, 30, 30.0), (200, 10, 10.0), (60, 5, 5.0)])
def test_tsne_against_sklearn(n, d, perplexity):
    x, labels = blobs(n, d, seed=n)
    got, kl = tsne(x, perplexity=perplexity)
    assert np.isfinite(got).all()
    p = sklearn_p(x, perplexity)
    # the similarities are scikit-learn's: the KL emb reports is the one of its P
    assert abs(kl - kl_of(p, got)) <= 1e-4 * max(1.0, kl), (kl, kl_of(p, got))
    with threadpool_limits(1):  # scikit-learn's OpenMP threads crawl on a busy machine
        ref = TSNE(2, perplexity=perplexity, init="pca", learning_rate="auto",
                   method="barnes_hut", random_state=0, n_iter=1000).fit_transform(x)
    kl_ref = kl_of(p, ref)
    assert kl <= kl_ref * 1.1 + 0.02, (kl, kl_ref)
    tw, tw_ref = trustworthiness(x, got, n_neighbors=10), trustworthiness(x, ref, n_neighbors=10)
    assert tw >= tw_ref - 0.02, (tw, tw_ref)
    # clusters stay together: a point's nearest neighbour in the map shares its cluster
    nn = NearestNeighbors(n_neighbors=2).fit(got).kneighbors(got, return_distance=False)[:, 1]
    assert (labels[nn] == labels).mean() > 0.95


def test_tsne_exact_gradient():
    x, _ = blobs(150, 12, seed=4)
    bh, kl_bh = tsne(x, perplexity=20.0)
    exact, kl_exact = tsne(x, perplexity=20.0, theta=0.0)
    assert not np.array_equal(bh, exact)
    with threadpool_limits(1):
        ref = TSNE(2, perplexity=20.0, init="pca", learning_rate="auto", method="exact",
                   random_state=0, n_iter=1000).fit(x)
    # scikit-learn's exact method uses dense P over all pairs; compare with its own KL
    assert kl_exact <= ref.kl_divergence_ * 1.15 + 0.02, (kl_exact, ref.kl_divergence_)
    assert abs(kl_exact - kl_bh) < 0.1 * kl_exact


@pytest.mark.parametrize("threads", [2, 3])
def test_tsne_same_bits_at_any_thread_count(threads):
    x, _ = blobs(300, 16, seed=2)
    one = tsne(x, threads=1, iterations=300)
    many = tsne(x, threads=threads, iterations=300)
    assert np.array_equal(one[0], many[0]) and one[1] == many[1]


def test_tsne_of_duplicates_and_tiny_inputs():
    x = np.repeat(np.eye(3, dtype=np.float32), 20, axis=0)  # 3 points, 20 copies each
    got, kl = tsne(x, perplexity=5.0)
    assert np.isfinite(got).all() and np.isfinite(kl)
    two, _ = tsne(np.array([[0, 1], [1, 0]], np.float32), perplexity=0.5)
    assert np.isfinite(two).all()


# ---- refusals ----------------------------------------------------------------------------

def refused(fn, *args, error, pattern, **kw):
    with pytest.raises(emb.Error) as e:
        fn(*args, **kw)
    assert type(e.value) is error, (type(e.value), str(e.value))
    assert re.search(pattern, str(e.value)), str(e.value)


def test_bad_input_is_refused():
    x = np.ones((10, 4), np.float32)
    refused(emb.pca, x, 0, error=emb.InvalidArgumentError,
            pattern=r"pca: k must be in \[1, 4\]")
    refused(emb.pca, x, 5, error=emb.InvalidArgumentError, pattern=r"k must be in")
    bad = x.copy()
    bad[3, 2] = np.nan
    refused(emb.pca, bad, 2, error=emb.InvalidArgumentError, pattern=r"row 3, column 2 is NaN")
    bad[3, 2] = np.inf
    refused(emb.tsne, bad, perplexity=3.0, error=emb.InvalidArgumentError,
            pattern=r"row 3, column 2 is infinite")
    refused(emb.pca, x.astype(np.float64), 2, error=emb.DtypeError, pattern=r"float32")
    refused(emb.pca, np.ones(4, np.float32), 1, error=emb.ShapeError, pattern=r"2-D")
    refused(emb.tsne, np.ones((1, 3), np.float32), error=emb.ShapeError,
            pattern=r"at least 2 points")
    refused(emb.tsne, x, error=emb.InvalidArgumentError,  # default perplexity 30 >= 10 points
            pattern=r"perplexity must be positive and less than the number of points \(10\)")
    for field, value, pattern in [("perplexity", -1.0, "perplexity"), ("iterations", -1, "iterations"),
                                  ("theta", 1.5, "theta"), ("learning_rate", float("nan"), "learning_rate"),
                                  ("early_exaggeration", 0.5, "early_exaggeration"),
                                  ("exaggeration_iterations", 2000, "exaggeration_iterations")]:
        kw = {"perplexity": 3.0, field: value}
        refused(emb.tsne, x, error=emb.InvalidArgumentError, pattern=pattern, **kw)
