"""The "one-hot times Linear" equivalence (docs/semantics.md §9), with emb's own layers and
with torch doing the same at test time:

* an embedding built by from_pretrained(linear.weight^T) looks up exactly the rows that
  emb's Linear (bias=False) computes from one_hot(idx).float(): bit-identical, and equal to
  torch's results bit for bit (seeds 002 and 003, and random layers);
* with a bias, Linear on the one-hot rows equals lookup + bias (one float add), bit-exact;
* the sum of the looked-up rows equals Linear on the multi-hot row (within tolerance: BLAS
  may sum in another order), and torch agrees;
* the Linear weight gradient, transposed, equals the embedding's dense gradient (within
  tolerance; exact summation order differs), and torch agrees.
Checked with the CBLAS and the reference GEMM kernels."""
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import emb
from parity_util import FAST_KERNEL_MODE, RUN_KERNEL_MODE, assert_close

torch.set_num_threads(1)

MODES = pytest.mark.parametrize("mode", [FAST_KERNEL_MODE, "ref"], ids=["fast", "ref"])
# A number per kernel mode, for the seeds of the cases (emb's emb_kernel_mode values)
MODE_CODE = {"auto": 0, "ref": 1, "avx2": 2}


@pytest.fixture(autouse=True)
def _restore_mode():
    yield
    emb.set_kernel_mode(RUN_KERNEL_MODE)


def Linear(i, o, bias, seed):
    """emb.Linear drawn from a generator of its own seeded `seed` (torch.manual_seed(seed);
    nn.Linear(i, o, bias) draws the same numbers)."""
    return emb.Linear(i, o, bias, generator=emb.Generator(seed))


def from_pretrained(weights, freeze=True):
    """Embedding.from_pretrained of a copy of `weights` (a transposed view, say)."""
    return emb.Embedding.from_pretrained(np.ascontiguousarray(weights), freeze=freeze)


def one_hot(idx, num_classes=-1):
    """one_hot(idx).float()"""
    return emb.one_hot(idx, num_classes, dtype=np.float32)


def grad_weight(lin, x, gy):
    """The weight gradient of Linear alone (no grad_x, no grad_bias)."""
    gx, gw, gb = lin.backward(x, gy, grad_x=False, grad_bias=False)
    assert gx is None and gb is None
    return gw


def exact(got, want, what):
    assert_close(got, np.asarray(want), exact=True, what=what)


# ---- seed 003 ---------------------------------------------------------------------------

@MODES
def test_seed003_linear_vs_embedding(mode):
    emb.set_kernel_mode(mode)
    idx = np.array([2, 3, 1], np.int64)
    oh = one_hot(idx)                                 # num_classes = max(idx) + 1 = 4
    assert oh.shape == (3, 4)
    lin = Linear(4, 5, False, 123)                    # manual_seed(123); Linear(4, 5, False)
    table = from_pretrained(lin.weight.T)             # from_pretrained(linear.weight.T)
    y_lin = lin.forward(oh)
    y_emb = table.forward(idx)
    exact(y_lin, y_emb, "emb: Linear(one_hot) vs from_pretrained lookup")

    torch.manual_seed(123)
    tlin = torch.nn.Linear(4, 5, bias=False)
    exact(lin.weight, tlin.weight.detach().numpy(), "Linear(4, 5) init vs torch")
    toh = F.one_hot(torch.from_numpy(idx)).float()
    exact(oh, toh.numpy(), "one_hot vs torch")
    with torch.no_grad():
        exact(y_lin, tlin(toh).numpy(), "Linear(one_hot) vs torch")
        temb = torch.nn.Embedding.from_pretrained(tlin.weight.t())
        exact(y_emb, temb(torch.from_numpy(idx)).numpy(), "lookup vs torch")


@MODES
def test_seed003_embedding_weights_into_linear(mode):
    """The notebook's direction: manual_seed(123); Embedding(4, 5); linear.weight = E^T."""
    emb.set_kernel_mode(mode)
    idx = np.array([2, 3, 1], np.int64)
    emb.manual_seed(123)                              # manual_seed(123); Embedding(4, 5)
    table = emb.Embedding(4, 5)
    lin = Linear(4, 5, False, 0)
    lin.weight[...] = table.weight.T                  # assign through the writable view
    y_lin = lin.forward(one_hot(idx))
    y_emb = table.forward(idx)
    exact(y_lin, y_emb, "Linear(one_hot) vs embedding")
    torch.manual_seed(123)
    temb = torch.nn.Embedding(4, 5)
    exact(table.weight, temb.weight.detach().numpy(), "Embedding(4, 5) init vs torch")
    tlin = torch.nn.Linear(4, 5, bias=False)
    tlin.weight = torch.nn.Parameter(temb.weight.T.detach())
    with torch.no_grad():
        toh = F.one_hot(torch.from_numpy(idx)).float()
        exact(y_lin, tlin(toh).numpy(), "Linear(one_hot) vs torch")
        exact(y_emb, temb(torch.from_numpy(idx)).numpy(), "embedding vs torch")


# ---- seed 002 ---------------------------------------------------------------------------

@MODES
def test_seed002_multi_hot_rows(mode):
    emb.set_kernel_mode(mode)
    x = np.array([[1, 0, 1, 0], [0, 0, 1, 1], [1, 1, 1, 0]], np.float32)
    for seed in (0, 1, 42, 2024):
        lin = Linear(4, 3, False, seed)
        table = from_pretrained(lin.weight.T)
        torch.manual_seed(seed)
        tlin = torch.nn.Linear(4, 3, bias=False)
        exact(lin.weight, tlin.weight.detach().numpy(), f"seed {seed}: init vs torch")
        temb = torch.nn.Embedding(4, 3).from_pretrained(tlin.weight.t())
        for r in range(3):
            rows = np.nonzero(x[r])[0].astype(np.int64)
            looked = table.forward(rows)
            acc = np.zeros(3, np.float32)
            for v in looked:                         # sum in row order from +0
                acc = acc + v
            y = lin.forward(x[r])                    # 1-D input -> 1-D output
            what = f"seed {seed} row {r} {rows.tolist()}"
            assert_close(acc, y, what=f"{what}: sum of rows vs Linear(multi-hot)")
            with torch.no_grad():
                trows = torch.from_numpy(rows)
                exact(looked, temb(trows).numpy(), f"{what}: lookup vs torch")
                exact(acc, temb(trows).sum(dim=0).numpy(), f"{what}: row sum vs torch")
                assert_close(y, tlin(torch.from_numpy(x[r])).numpy(),
                             what=f"{what}: Linear vs torch")


# ---- random layers ----------------------------------------------------------------------

@MODES
def test_random_one_hot_equivalence(mode):
    emb.set_kernel_mode(mode)
    rnd = random.Random(17 + MODE_CODE[mode])
    for case in range(120):
        v, d, bias = rnd.randint(1, 50), rnd.randint(1, 20), rnd.random() < 0.5
        shape = tuple(rnd.randint(1, 5) for _ in range(rnd.randint(1, 3)))
        seed = rnd.randrange(2 ** 32)
        idx = np.random.default_rng(seed).integers(0, v, size=shape).astype(np.int64)
        lin = Linear(v, d, bias, seed)
        table = from_pretrained(lin.weight.T)
        oh = one_hot(idx, v)
        y_lin = lin.forward(oh)
        y_emb = table.forward(idx)
        if bias:
            y_emb = y_emb + lin.bias               # one float32 add per element
        what = f"case {case}: V {v} D {d} bias {bias} idx {list(shape)}"
        exact(y_lin, y_emb, f"{what}: Linear(one_hot) vs lookup")
        torch.manual_seed(seed)
        tlin = torch.nn.Linear(v, d, bias=bias)
        with torch.no_grad():
            tidx = torch.from_numpy(idx)
            exact(y_lin, tlin(F.one_hot(tidx, v).float()).numpy(), f"{what}: vs torch Linear")
            want = F.embedding(tidx, tlin.weight.t())
            if bias:
                want = want + tlin.bias
            exact(y_emb, want.numpy(), f"{what}: vs torch lookup")


@MODES
def test_random_multi_hot_sums(mode):
    emb.set_kernel_mode(mode)
    rnd = random.Random(99 + MODE_CODE[mode])
    for case in range(60):
        v, d = rnd.randint(2, 60), rnd.randint(1, 16)
        seed = rnd.randrange(2 ** 32)
        rng = np.random.default_rng(seed)
        lin = Linear(v, d, False, seed)
        table = from_pretrained(lin.weight.T)
        torch.manual_seed(seed)
        tlin = torch.nn.Linear(v, d, bias=False)
        for r in range(3):
            k = rnd.randint(1, v)
            rows = np.sort(rng.choice(v, size=k, replace=False)).astype(np.int64)
            mh = np.zeros(v, np.float32)
            mh[rows] = 1.0
            summed = table.forward(rows).astype(np.float64).sum(axis=0)
            y = lin.forward(mh)
            what = f"case {case} row {r}: V {v} D {d} {k} hot"
            # sums of up to 60 terms of size <~ 1/sqrt(V): float32 rounding of the order
            assert_close(y, summed.astype(np.float32), atol=2e-6 * k ** 0.5 + 1e-6,
                         what=f"{what}: Linear(multi-hot) vs sum of looked-up rows")
            with torch.no_grad():
                tsum = F.embedding(torch.from_numpy(rows), tlin.weight.t()).sum(dim=0)
                assert_close(y, tsum.numpy(), atol=2e-6 * k ** 0.5 + 1e-6,
                             what=f"{what}: vs torch row sum")


@MODES
def test_gradients_linear_vs_embedding(mode):
    emb.set_kernel_mode(mode)
    rnd = random.Random(5 + MODE_CODE[mode])
    for case in range(60):
        v, d = rnd.randint(1, 30), rnd.randint(1, 12)
        n = rnd.randint(1, 40)
        seed = rnd.randrange(2 ** 32)
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, v, size=n).astype(np.int64)
        gy = rng.standard_normal((n, d)).astype(np.float32)
        lin = Linear(v, d, False, seed)
        table = from_pretrained(lin.weight.T, freeze=False)
        gw_lin = grad_weight(lin, one_hot(idx, v), gy)        # [D, V]
        gw_emb = table.backward(idx, gy)                    # [V, D]
        what = f"case {case}: V {v} D {d} N {n}"
        assert_close(gw_lin.T, gw_emb, what=f"{what}: Linear grad^T vs embedding grad")
        torch.manual_seed(seed)
        tlin = torch.nn.Linear(v, d, bias=False)
        tlin(F.one_hot(torch.from_numpy(idx), v).float()).backward(torch.from_numpy(gy))
        assert_close(gw_lin, tlin.weight.grad.numpy(), what=f"{what}: vs torch Linear grad")
        tw = tlin.weight.detach().t().clone().requires_grad_()
        F.embedding(torch.from_numpy(idx), tw).backward(torch.from_numpy(gy))
        exact(gw_emb, tw.grad.numpy(), f"{what}: embedding grad vs torch")
