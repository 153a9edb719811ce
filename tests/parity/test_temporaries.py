"""Parity, bit for bit, of the dense backward and of max_norm renorm with PyTorch 1.13 on
shapes that take each of emb's two bucketing paths (tests/unit/test_temporaries.c compares
the paths with each other):
  - a large table and a small batch: the batch is radix-sorted (temporaries O(n));
  - a small table and a large batch: counting over the table's rows / a V-bit bitmap;
at 1, 2 and 3 threads, with padding, scale_grad_by_freq, int32 and int64 indices. The
automatic choice is V / 4 > n for the backward and V / 64 > n for the renorm. emb runs
through the package (emb.Embedding over the test's array). Every expected value is produced
by torch during the test."""
import numpy as np
import pytest
import torch

import emb
from parity_util import assert_close

torch.set_num_threads(1)


def make(w, pad=None, scale=False, max_norm=None, norm_type=2.0):
    """An embedding over the caller's array w (shared, as torch's from_pretrained)."""
    return emb.Embedding.from_pretrained(w, freeze=False, padding_idx=pad, max_norm=max_norm,
                                         norm_type=norm_type, scale_grad_by_freq=scale)


def same(got, want, what):
    """Bitwise equality, fast on large arrays; assert_close names the differences."""
    want = want.numpy() if hasattr(want, "numpy") else want
    if got.shape != want.shape or got.tobytes() != want.tobytes():
        assert_close(got, want, exact=True, what=what)


def rand_grad(rng, shape):
    g = rng.standard_normal(shape) * 10.0 ** rng.uniform(-4, 4, shape)
    return g.astype(np.float32)


def indices(rng, V, n, hot, dtype):
    a = rng.integers(0, V, n)
    if hot:  # three quarters of the positions on `hot` rows: long per-row sums
        pick = rng.random(n) < 0.75
        a[pick] = rng.integers(0, hot, pick.sum()) * (V // hot)
    return a.astype(dtype)


# (V, D, n, hot): large V small n (sorted batch), then small V large n (counting); the
# larger ones give each of 2 and 3 threads at least 2^18 floats of gradient.
BACKWARD_SHAPES = [
    (200_000, 32, 40_000, 0),
    (300_000, 8, 3_000, 40),
    (2_000_000, 4, 50_000, 0),
    (2_000, 64, 60_000, 0),
    (500, 16, 100_000, 7),
    (40_000, 32, 10_000, 0),  # V / n = 4: the counting path, next to the crossover
    (40_001, 32, 10_000, 0),  # just above it: the sorted path
]


@pytest.mark.parametrize("V,D,n,hot", BACKWARD_SHAPES)
def test_dense_backward_both_paths(V, D, n, hot):
    rng = np.random.default_rng(V * 31 + n)
    w = np.zeros((V, D), np.float32)  # the backward does not read the weight
    for case, (pad, scale, dtype) in enumerate([(None, False, np.int64), (V // 3, True, np.int32),
                                                (-1, True, np.int64)]):
        idx = indices(rng, V, n, hot, dtype)
        if pad is not None:
            idx[::11] = pad % V  # the padding row occurs
        g = rand_grad(rng, (n, D))
        te = torch.nn.Embedding.from_pretrained(torch.from_numpy(w.copy()), freeze=False,
                                                padding_idx=pad, scale_grad_by_freq=scale)
        te(torch.from_numpy(idx.astype(np.int64))).backward(torch.from_numpy(g))
        want = te.weight.grad
        h = make(w, pad, scale)
        for nt in (1, 2, 3):
            gw = np.zeros((V, D), np.float32)
            emb.set_num_threads(nt)
            try:
                h.backward(idx, g, grad=gw)  # added into gw, as torch adds into .grad
            finally:
                emb.set_num_threads(0)
            same(gw, want, f"V={V} D={D} n={n} pad={pad} scale={scale} threads={nt}")


# (V, D, n): large V small n (sorted batch), then small V large n (bitmap)
RENORM_SHAPES = [
    (70_000, 96, 1_024),  # sorted, and 3 threads share the rows
    (1_000_000, 8, 300),
    (3_000, 96, 40_000),
    (6_400, 16, 100),   # V / n = 64: the bitmap, at the crossover
    (6_401, 16, 100),   # just above it: the sorted batch
]


@pytest.mark.parametrize("V,D,n", RENORM_SHAPES)
def test_renorm_both_paths(V, D, n):
    rng = np.random.default_rng(V + n)
    w0 = rng.standard_normal((V, D), dtype=np.float32)
    w0 *= (10.0 ** rng.uniform(-1, 1, (V, 1))).astype(np.float32)
    for norm_type, dtype in ((2.0, np.int64), (1.0, np.int32)):
        idx = indices(rng, V, n, 0, dtype)
        tw = torch.from_numpy(w0.copy())
        te = torch.nn.Embedding.from_pretrained(tw, freeze=False, max_norm=1.0,
                                                norm_type=norm_type)
        want = te(torch.from_numpy(idx.astype(np.int64))).detach()
        for nt in (1, 2, 3):
            buf = w0.copy()
            h = make(buf, max_norm=1.0, norm_type=norm_type)
            emb.set_num_threads(nt)
            try:
                out = h(idx)
            finally:
                emb.set_num_threads(0)
            what = f"V={V} D={D} n={n} p={norm_type} threads={nt}"
            same(out, want, "forward " + what)
            same(buf, tw, "weight " + what)
        assert not np.array_equal(tw.numpy(), w0)  # rows were renormalised
