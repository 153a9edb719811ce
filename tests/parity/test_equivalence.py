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
import ctypes as C
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from embpy import (FAST_KERNEL_MODE, KERNELS_REF, RUN_KERNEL_MODE, EmbeddingOptions, Gen, T,
                   Tensor, assert_close, check, lib, ptr, tensor_out)

torch.set_num_threads(1)

MODES = pytest.mark.parametrize("mode", [FAST_KERNEL_MODE, KERNELS_REF], ids=["fast", "ref"])


@pytest.fixture(autouse=True)
def _restore_mode():
    yield
    lib.emb_set_kernel_mode(RUN_KERNEL_MODE)


def view_array(fn, h):
    v = Tensor()
    check(fn(h, ptr(v)))
    shape = tuple(v.shape[k] for k in range(v.ndim))
    n = int(np.prod(shape))
    return np.ctypeslib.as_array(C.cast(v.data, C.POINTER(C.c_float)), (n,)).reshape(shape)


class Linear:
    def __init__(self, i, o, bias, gen):
        self.h = C.c_void_p()
        check(lib.emb_linear_create(i, o, bias, gen.h, ptr(self.h)))
        self.o = o

    def weight(self):
        return view_array(lib.emb_linear_weight, self.h)

    def bias(self):
        return view_array(lib.emb_linear_bias, self.h)

    def forward(self, x):
        y = tensor_out(x.shape[:-1] + (self.o,))
        check(lib.emb_linear_forward(self.h, T(x), T(y)))
        return y

    def grad_weight(self, x, gy):
        gw = np.zeros((self.o, x.shape[-1]), np.float32)
        check(lib.emb_linear_backward(self.h, T(x), T(gy), None, T(gw), None))
        return gw

    def __del__(self):
        lib.emb_linear_free(self.h)


class Embedding:
    def __init__(self, weights, freeze=True):
        self.h = C.c_void_p()
        o = lib.emb_embedding_options_default()
        check(lib.emb_embedding_from_pretrained(T(np.ascontiguousarray(weights)), freeze,
                                                ptr(o), ptr(self.h)))
        self.d = weights.shape[1]
        self.v = weights.shape[0]

    @classmethod
    def create(cls, v, d, gen):
        self = cls.__new__(cls)
        self.h = C.c_void_p()
        o = lib.emb_embedding_options_default()
        o.generator = gen.h
        check(lib.emb_embedding_create(v, d, ptr(o), ptr(self.h)))
        self.v, self.d = v, d
        return self

    def weight(self):
        return view_array(lib.emb_embedding_weight, self.h)

    def forward(self, idx):
        out = tensor_out(idx.shape + (self.d,))
        check(lib.emb_embedding_forward(self.h, T(idx), T(out)))
        return out

    def grad_weight(self, idx, gout):
        gw = np.zeros((self.v, self.d), np.float32)
        check(lib.emb_embedding_backward(self.h, T(idx), T(gout), T(gw)))
        return gw

    def __del__(self):
        lib.emb_embedding_free(self.h)


def one_hot(idx, num_classes=-1):
    c = C.c_int64()
    check(lib.emb_one_hot_num_classes(T(idx), num_classes, ptr(c)))
    out = tensor_out(idx.shape + (c.value,))
    check(lib.emb_one_hot(T(idx), num_classes, T(out)))
    return out


def exact(got, want, what):
    assert_close(got, np.asarray(want), exact=True, what=what)


# ---- seed 003 ---------------------------------------------------------------------------

@MODES
def test_seed003_linear_vs_embedding(mode):
    lib.emb_set_kernel_mode(mode)
    idx = np.array([2, 3, 1], np.int64)
    oh = one_hot(idx)                                 # num_classes = max(idx) + 1 = 4
    assert oh.shape == (3, 4)
    lin = Linear(4, 5, False, Gen(123))               # manual_seed(123); Linear(4, 5, False)
    emb = Embedding(lin.weight().T)                   # from_pretrained(linear.weight.T)
    y_lin = lin.forward(oh)
    y_emb = emb.forward(idx)
    exact(y_lin, y_emb, "emb: Linear(one_hot) vs from_pretrained lookup")

    torch.manual_seed(123)
    tlin = torch.nn.Linear(4, 5, bias=False)
    exact(lin.weight(), tlin.weight.detach().numpy(), "Linear(4, 5) init vs torch")
    toh = F.one_hot(torch.from_numpy(idx)).float()
    exact(oh, toh.numpy(), "one_hot vs torch")
    with torch.no_grad():
        exact(y_lin, tlin(toh).numpy(), "Linear(one_hot) vs torch")
        temb = torch.nn.Embedding.from_pretrained(tlin.weight.t())
        exact(y_emb, temb(torch.from_numpy(idx)).numpy(), "lookup vs torch")


@MODES
def test_seed003_embedding_weights_into_linear(mode):
    """The notebook's direction: manual_seed(123); Embedding(4, 5); linear.weight = E^T."""
    lib.emb_set_kernel_mode(mode)
    idx = np.array([2, 3, 1], np.int64)
    emb = Embedding.create(4, 5, Gen(123))
    lin = Linear(4, 5, False, Gen(0))
    lin.weight()[...] = emb.weight().T               # assign through the writable view
    y_lin = lin.forward(one_hot(idx))
    y_emb = emb.forward(idx)
    exact(y_lin, y_emb, "Linear(one_hot) vs embedding")
    torch.manual_seed(123)
    temb = torch.nn.Embedding(4, 5)
    exact(emb.weight(), temb.weight.detach().numpy(), "Embedding(4, 5) init vs torch")
    tlin = torch.nn.Linear(4, 5, bias=False)
    tlin.weight = torch.nn.Parameter(temb.weight.T.detach())
    with torch.no_grad():
        toh = F.one_hot(torch.from_numpy(idx)).float()
        exact(y_lin, tlin(toh).numpy(), "Linear(one_hot) vs torch")
        exact(y_emb, temb(torch.from_numpy(idx)).numpy(), "embedding vs torch")


# ---- seed 002 ---------------------------------------------------------------------------

@MODES
def test_seed002_multi_hot_rows(mode):
    lib.emb_set_kernel_mode(mode)
    x = np.array([[1, 0, 1, 0], [0, 0, 1, 1], [1, 1, 1, 0]], np.float32)
    for seed in (0, 1, 42, 2024):
        lin = Linear(4, 3, False, Gen(seed))
        emb = Embedding(lin.weight().T)
        torch.manual_seed(seed)
        tlin = torch.nn.Linear(4, 3, bias=False)
        exact(lin.weight(), tlin.weight.detach().numpy(), f"seed {seed}: init vs torch")
        temb = torch.nn.Embedding(4, 3).from_pretrained(tlin.weight.t())
        for r in range(3):
            rows = np.nonzero(x[r])[0].astype(np.int64)
            looked = emb.forward(rows)
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
    lib.emb_set_kernel_mode(mode)
    rnd = random.Random(17 + mode)
    for case in range(120):
        v, d, bias = rnd.randint(1, 50), rnd.randint(1, 20), rnd.random() < 0.5
        shape = tuple(rnd.randint(1, 5) for _ in range(rnd.randint(1, 3)))
        seed = rnd.randrange(2 ** 32)
        idx = np.random.default_rng(seed).integers(0, v, size=shape).astype(np.int64)
        lin = Linear(v, d, bias, Gen(seed))
        emb = Embedding(lin.weight().T)
        oh = one_hot(idx, v)
        y_lin = lin.forward(oh)
        y_emb = emb.forward(idx)
        if bias:
            y_emb = y_emb + lin.bias()               # one float32 add per element
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
    lib.emb_set_kernel_mode(mode)
    rnd = random.Random(99 + mode)
    for case in range(60):
        v, d = rnd.randint(2, 60), rnd.randint(1, 16)
        seed = rnd.randrange(2 ** 32)
        rng = np.random.default_rng(seed)
        lin = Linear(v, d, False, Gen(seed))
        emb = Embedding(lin.weight().T)
        torch.manual_seed(seed)
        tlin = torch.nn.Linear(v, d, bias=False)
        for r in range(3):
            k = rnd.randint(1, v)
            rows = np.sort(rng.choice(v, size=k, replace=False)).astype(np.int64)
            mh = np.zeros(v, np.float32)
            mh[rows] = 1.0
            summed = emb.forward(rows).astype(np.float64).sum(axis=0)
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
    lib.emb_set_kernel_mode(mode)
    rnd = random.Random(5 + mode)
    for case in range(60):
        v, d = rnd.randint(1, 30), rnd.randint(1, 12)
        n = rnd.randint(1, 40)
        seed = rnd.randrange(2 ** 32)
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, v, size=n).astype(np.int64)
        gy = rng.standard_normal((n, d)).astype(np.float32)
        lin = Linear(v, d, False, Gen(seed))
        emb = Embedding(lin.weight().T, freeze=False)
        gw_lin = lin.grad_weight(one_hot(idx, v), gy)        # [D, V]
        gw_emb = emb.grad_weight(idx, gy)                    # [V, D]
        what = f"case {case}: V {v} D {d} N {n}"
        assert_close(gw_lin.T, gw_emb, what=f"{what}: Linear grad^T vs embedding grad")
        torch.manual_seed(seed)
        tlin = torch.nn.Linear(v, d, bias=False)
        tlin(F.one_hot(torch.from_numpy(idx), v).float()).backward(torch.from_numpy(gy))
        assert_close(gw_lin, tlin.weight.grad.numpy(), what=f"{what}: vs torch Linear grad")
        tw = tlin.weight.detach().t().clone().requires_grad_()
        F.embedding(torch.from_numpy(idx), tw).backward(torch.from_numpy(gy))
        exact(gw_emb, tw.grad.numpy(), f"{what}: embedding grad vs torch")
