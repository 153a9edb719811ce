"""Parity of nn.Linear and F.one_hot with PyTorch 1.13.

* Initialisation is bit-exact: torch.manual_seed(s); nn.Linear(i, o, bias) against
  emb.Linear (emb_linear_create) with an emb.Generator seeded s, for random shapes (in 0..49,
  out 1..19, with and without bias), the seed-003 layer, two layers in a row from one
  generator, and the default generator.
* Forward and backward (y, grad_x, grad_weight, grad_bias, and a second accumulating
  backward) are BIT-EXACT with torch autograd through CBLAS (emb issues the sgemm call
  torch's addmm/mm issue, on the same OpenBLAS, here in the same process), for inputs of
  rank 1..4 and every degenerate size (1 row, 1 feature, 1 output), with torch and emb at
  1 and at 2 threads; with the reference kernels within float32 tolerance (assert_close's
  rtol 1.3e-6, atol 1e-5). The error messages are torch's own, caught live.
* one_hot is bit-exact (int64 and float32 outputs) and its errors carry torch's messages.
Every expected value is produced by torch during the test."""
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import emb
from parity_util import FAST_KERNEL_MODE, RUN_KERNEL_MODE, assert_close, tensor_out

torch.set_num_threads(1)
# A number per kernel mode, for the seeds of the cases (emb's emb_kernel_mode values)
MODE_CODE = {"auto": 0, "ref": 1, "avx2": 2}


def Linear(i, o, bias=True, seed=None, gen=None):
    """An emb.Linear drawn from `gen`, from a new emb.Generator(seed), or from emb's default
    generator."""
    if gen is None and seed is not None:
        gen = emb.Generator(seed)
    return emb.Linear(i, o, bias, generator=gen)


def call(fn, *args, **kw):
    """(exception class, message) of a package call: (None, "") or the emb.Error it raised."""
    try:
        fn(*args, **kw)
    except emb.Error as e:
        return type(e), str(e)
    return None, ""


def torch_linear(seed, i, o, bias):
    torch.manual_seed(seed)
    return torch.nn.Linear(i, o, bias=bias)


def check_init(emb_lin, t_lin, what):
    assert_close(emb_lin.weight, t_lin.weight.detach().numpy(), exact=True,
                 what=f"{what} weight")
    if t_lin.bias is not None:
        assert_close(emb_lin.bias, t_lin.bias.detach().numpy(), exact=True,
                     what=f"{what} bias")


@pytest.fixture(autouse=True)
def _restore_modes():
    """Each test starts on the fast kernels (CBLAS, torch's own calls), whatever tier the
    run is under; the tests of the reference GEMM select it themselves."""
    emb.set_kernel_mode(FAST_KERNEL_MODE)
    yield
    emb.set_kernel_mode(RUN_KERNEL_MODE)
    emb.set_num_threads(0)


# ---- initialisation (bit-exact) ---------------------------------------------------------

def test_init_seed003_layer():
    # manual_seed(123); Linear(4, 5, bias=False): the layer printed in seed 003
    check_init(Linear(4, 5, False, seed=123), torch_linear(123, 4, 5, False), "seed 003")
    check_init(Linear(4, 5, True, seed=123), torch_linear(123, 4, 5, True), "Linear(4, 5)")


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
def test_init_random_shapes():
    rnd = random.Random(1234)
    for case in range(400):
        i, o, bias = rnd.randint(0, 49), rnd.randint(1, 19), rnd.random() < 0.5
        seed = rnd.randrange(2 ** 64)
        check_init(Linear(i, o, bias, seed=seed), torch_linear(seed, i, o, bias),
                   f"case {case}: seed {seed} Linear({i}, {o}, bias={bias})")


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
def test_init_zero_sizes_draw_counts():
    # in == 0 draws nothing for the weight but out_features for the bias; out == 0 nothing.
    for i, o in [(0, 3), (5, 0), (0, 0), (0, 7)]:
        for bias in (False, True):
            gen = emb.Generator(77)
            a = Linear(i, o, bias, gen=gen)
            b = Linear(3, 2, True, gen=gen)
            torch.manual_seed(77)
            ta = torch.nn.Linear(i, o, bias=bias)
            tb = torch.nn.Linear(3, 2)
            check_init(a, ta, f"Linear({i}, {o}, {bias})")
            check_init(b, tb, f"the layer after Linear({i}, {o}, {bias})")
            del a, b


def test_init_two_layers_in_a_row():
    rnd = random.Random(99)
    for case in range(60):
        seed = rnd.randrange(2 ** 32)
        shapes = [(rnd.randint(1, 49), rnd.randint(1, 19), rnd.random() < 0.5) for _ in range(2)]
        gen = emb.Generator(seed)
        mine = [Linear(i, o, b, gen=gen) for i, o, b in shapes]
        torch.manual_seed(seed)
        theirs = [torch.nn.Linear(i, o, bias=b) for i, o, b in shapes]
        for k in range(2):
            check_init(mine[k], theirs[k], f"case {case} layer {k} {shapes[k]}")
        del mine


def test_init_default_generator():
    emb.manual_seed(2024)
    a = Linear(13, 7, True)
    b = Linear(6, 3, False)
    torch.manual_seed(2024)
    ta, tb = torch.nn.Linear(13, 7), torch.nn.Linear(6, 3, bias=False)
    check_init(a, ta, "default generator, first layer")
    check_init(b, tb, "default generator, second layer")


# ---- forward / backward against autograd -----------------------------------------------

def run_case(rnd, mode, case):
    i, o, bias = rnd.randint(0, 20), rnd.randint(0, 20), rnd.random() < 0.6
    rank = rnd.randint(1, 4)
    lead = tuple(rnd.choice([0, 1, 2, 3, 5, 8]) if rnd.random() < 0.1 else rnd.randint(1, 6)
                 for _ in range(rank - 1))
    seed = rnd.randrange(2 ** 32)
    mine = Linear(i, o, bias, seed=seed)
    with _nowarn():
        ref = torch_linear(seed, i, o, bias)
    check_init(mine, ref, "init")
    x = (np.random.default_rng(seed).standard_normal(lead + (i,)) * 2).astype(np.float32)
    gy = np.random.default_rng(seed + 1).standard_normal(lead + (o,)).astype(np.float32)
    xt = torch.from_numpy(x.copy()).requires_grad_()
    yt = ref(xt)
    yt.backward(torch.from_numpy(gy))
    what = f"mode {mode} case {case}: Linear({i}, {o}, bias={bias}) x{list(x.shape)}"
    emb.set_kernel_mode(mode)
    exact = mode != "ref"  # CBLAS: torch's own BLAS call
    y = mine.forward(x)
    assert_close(y, yt.detach().numpy(), exact=exact, what=f"{what} y")
    gx, gw, gb = mine.backward(x, gy)
    assert_close(gx, xt.grad.numpy(), exact=exact, what=f"{what} grad_x")
    # grad_weight sums over all rows: allow for the summation length in the absolute term
    rows = int(np.prod(lead)) if lead else 1
    assert_close(gw, ref.weight.grad.numpy(), exact=exact, atol=1e-5 * max(1, rows) ** 0.5,
                 what=f"{what} grad_weight")
    if bias:  # bit-exact: emb sums the rows in torch's (single-thread) order
        assert_close(gb, ref.bias.grad.numpy(), exact=True, what=f"{what} grad_bias")
    # a second backward accumulates, as .grad does
    yt2 = ref(xt)
    yt2.backward(torch.from_numpy(gy))
    _, gw2, gb2 = mine.backward(x, gy, grad_weight=gw, grad_bias=gb if bias else None)
    assert_close(gw2, ref.weight.grad.numpy(), exact=exact, atol=2e-5 * max(1, rows) ** 0.5,
                 what=f"{what} accumulated grad_weight")
    if bias:
        assert_close(gb2, ref.bias.grad.numpy(), exact=True,
                     what=f"{what} accumulated grad_bias")


class _nowarn:
    def __enter__(self):
        import warnings
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *a):
        self._w.__exit__(*a)


@pytest.mark.filterwarnings("ignore:grad and param do not obey")
@pytest.mark.parametrize("mode", [FAST_KERNEL_MODE, "ref"], ids=["fast", "ref"])
def test_forward_backward_random(mode):
    rnd = random.Random(555 + MODE_CODE[mode])
    for case in range(150):
        run_case(rnd, mode, case)


@pytest.mark.filterwarnings("ignore:grad and param do not obey")
@pytest.mark.parametrize("threads", [1, 2], ids=["1thread", "2threads"])
def test_blas_bit_exact_sizes_and_threads(threads):
    """Larger and degenerate products (inner dimensions past OpenBLAS's blocking, 1-row,
    1-feature, 1-output layers), torch and emb both at `threads` threads (OpenBLAS follows
    emb's count during emb's calls, as it follows torch.set_num_threads)."""
    old_t, old_e = torch.get_num_threads(), emb.get_num_threads()
    torch.set_num_threads(threads)
    emb.set_num_threads(threads)
    try:
        rnd = random.Random(808 + threads)
        for case in range(120):
            i = rnd.choice([1, 2, 3, 17, 64, 300, 700])
            o = rnd.choice([1, 2, 5, 16, 33, 130, 500])
            bias = rnd.random() < 0.7
            rank = rnd.choice([1, 2, 2, 3, 4])
            m = rnd.choice([1, 2, 7, 64, 300, 1100])
            lead = {1: (), 2: (m,), 3: (2, max(1, m // 2)), 4: (2, 2, max(1, m // 4))}[rank]
            seed = rnd.randrange(2 ** 32)
            mine = Linear(i, o, bias, seed=seed)
            ref = torch_linear(seed, i, o, bias)
            x = np.random.default_rng(seed).standard_normal(lead + (i,)).astype(np.float32)
            gy = np.random.default_rng(seed + 1).standard_normal(lead + (o,)).astype(np.float32)
            xt = torch.from_numpy(x.copy()).requires_grad_()
            yt = ref(xt)
            yt.backward(torch.from_numpy(gy))
            what = f"threads {threads} case {case}: Linear({i}, {o}, {bias}) x{list(x.shape)}"
            assert_close(mine.forward(x), yt.detach().numpy(), exact=True, what=f"{what} y")
            gx, gw, gb = mine.backward(x, gy)
            assert_close(gx, xt.grad.numpy(), exact=True, what=f"{what} grad_x")
            assert_close(gw, ref.weight.grad.numpy(), exact=True, what=f"{what} grad_weight")
            if bias:
                assert_close(gb, ref.bias.grad.numpy(), exact=True, what=f"{what} grad_bias")
    finally:
        torch.set_num_threads(old_t)
        emb.set_num_threads(old_e)


def test_forward_larger_threads():
    """A larger product: CBLAS and the reference kernels on 1 and 2 threads agree with torch,
    and the reference results do not depend on the thread count."""
    mine = Linear(300, 120, True, seed=3)
    ref = torch_linear(3, 300, 120, True)
    x = np.random.default_rng(0).standard_normal((257, 300)).astype(np.float32)
    want = ref(torch.from_numpy(x)).detach().numpy()
    outs = []
    for mode, threads in [(FAST_KERNEL_MODE, 0), ("ref", 1), ("ref", 2)]:
        emb.set_kernel_mode(mode)
        emb.set_num_threads(threads)
        outs.append(mine.forward(x))
        # 300-term dot products: tolerance grows with the length of the sum
        assert_close(outs[-1], want, atol=5e-5, what=f"mode {mode} threads {threads}")
    assert_close(outs[2], outs[1], exact=True, what="ref kernels, 2 threads vs 1")


def test_grad_bias_long_sums_bit_exact():
    """Long row sums (multi-level cascades, every column-grouping rule) match torch's
    single-threaded sum bit for bit, for 2-D and 3-D inputs."""
    rnd = random.Random(4321)
    for case in range(40):
        o = rnd.choice([1, 2, 3, 4, 5, 7, 8, 12, 31, 32, 33, 64, 70, 100])
        m = rnd.choice([rnd.randint(1, 40), rnd.randint(100, 3000), rnd.randint(5000, 20000)])
        mine = Linear(3, o, True, seed=case)
        ref = torch_linear(case, 3, o, True)
        lead = (m,) if rnd.random() < 0.5 else (1, m)
        x = np.random.default_rng(case).standard_normal(lead + (3,)).astype(np.float32)
        gy = np.random.default_rng(case + 7).standard_normal(lead + (o,)).astype(np.float32)
        ref(torch.from_numpy(x)).backward(torch.from_numpy(gy))
        gb = np.zeros(o, np.float32)
        got = mine.backward(x, gy, grad_x=False, grad_weight=False, grad_bias=gb)
        assert got[0] is None and got[1] is None and got[2] is gb
        assert_close(gb, ref.bias.grad.numpy(), exact=True, what=f"case {case}: m {m} out {o}")


def torch_error(fn):
    try:
        fn()
    except Exception as e:  # torch raises RuntimeError/IndexError/ValueError
        return str(e)
    raise AssertionError("torch did not fail")


def test_forward_shape_errors_match_torch():
    rnd = random.Random(7)
    for case in range(40):
        i, o, bias = rnd.randint(1, 9), rnd.randint(1, 9), rnd.random() < 0.5
        k = rnd.choice([v for v in range(0, 11) if v != i])
        lead = tuple(rnd.randint(1, 4) for _ in range(rnd.randint(0, 3)))
        x = np.ones(lead + (k,), np.float32)
        with _nowarn():
            ref = torch_linear(0, i, o, bias)
        want = torch_error(lambda: ref(torch.from_numpy(x)))
        mine = Linear(i, o, bias, seed=0)
        y = tensor_out(lead + (o,), fill=7.0)
        st, msg = call(mine.forward, x, out=y)
        assert st is emb.ShapeError, (st, msg)
        assert want in msg, (want, msg)
        assert (y == 7.0).all()
        gx = tensor_out(x.shape, fill=7.0)
        gw = np.full((o, i), 7.0, np.float32)
        st, msg = call(mine.backward, x, y, grad_x=gx, grad_weight=gw, grad_bias=None)
        assert st is emb.ShapeError and want in msg, (st, msg)
        assert (gx == 7.0).all() and (gw == 7.0).all()


def test_forward_dtype_and_rank_errors_match_torch():
    ref = torch_linear(0, 3, 2, True)
    mine = Linear(3, 2, True, seed=0)
    y = tensor_out((2, 2), fill=7.0)
    for dt in (np.float64, np.int64):
        x = np.ones((2, 3), dt)
        want = torch_error(lambda: ref(torch.from_numpy(x)))
        st, msg = call(mine.forward, x, out=y)
        assert st is emb.DtypeError and want in msg, (want, st, msg)
    x0 = np.array(1.0, np.float32)
    want = torch_error(lambda: ref(torch.from_numpy(x0)))
    st, msg = call(mine.forward, x0, out=y)
    assert st is emb.ShapeError and want in msg, (want, st, msg)
    assert (y == 7.0).all()
    # no bias: the bias is None (as torch's), and a grad_bias array is a state error
    nb = Linear(3, 2, False, seed=0)
    assert nb.bias is None and torch_linear(0, 3, 2, False).bias is None
    assert nb.backward(np.ones((2, 3), np.float32), y)[2] is None
    x = np.ones((2, 3), np.float32)
    gb = np.full(2, 7.0, np.float32)
    st, msg = call(nb.backward, x, y, grad_x=None, grad_weight=None, grad_bias=gb)
    assert st is emb.StateError and "no bias" in msg
    assert (gb == 7.0).all()


# ---- one_hot ----------------------------------------------------------------------------

def emb_one_hot(idx, num_classes, dtype=np.int64):
    """emb.one_hot into a new array, and into a given one pre-filled with 9: the same."""
    got = emb.one_hot(idx, num_classes, dtype=dtype)
    assert got.dtype == dtype
    out = np.full(got.shape, 9, dtype)
    assert emb.one_hot(idx, num_classes, out=out) is out
    assert_close(out, got, exact=True, what="one_hot into out=")
    return got


def test_one_hot_random():
    rnd = random.Random(11)
    for case in range(300):
        rank = rnd.randint(0, 5)
        shape = tuple(rnd.randint(0 if rnd.random() < 0.1 else 1, 4) for _ in range(rank))
        hi = rnd.randint(1, 12)
        idx = np.random.default_rng(case).integers(0, hi, size=shape).astype(np.int64)
        empty = idx.size == 0
        nc = rnd.choice([-1, hi, hi + rnd.randint(0, 5)]) if not empty else rnd.randint(1, 6)
        want = F.one_hot(torch.from_numpy(idx), nc).numpy()
        assert want.dtype == np.int64
        got = emb_one_hot(idx, nc)
        assert_close(got, want, exact=True, what=f"case {case} shape {shape} nc {nc}")
        gotf = emb_one_hot(idx, nc, np.float32)
        assert_close(gotf, F.one_hot(torch.from_numpy(idx), nc).float().numpy(), exact=True,
                     what=f"float case {case}")


def test_one_hot_seed003():
    idx = np.array([2, 3, 1], np.int64)
    assert_close(emb_one_hot(idx, -1), F.one_hot(torch.from_numpy(idx)).numpy(), exact=True)


@pytest.mark.parametrize("idx,nc,status", [
    (np.array([1, 2], np.int32), -1, emb.DtypeError),
    (np.array([1.0, 2.0], np.float32), 3, emb.DtypeError),
    (np.array([1, 2], np.int16), 3, emb.DtypeError),
    (np.zeros(0, np.int64), -1, emb.InvalidArgumentError),
    (np.zeros((2, 0), np.int64), 0, emb.InvalidArgumentError),
    (np.array([1, -1], np.int64), 3, emb.IndexOutOfRangeError),
    (np.array([[0, -5], [1, 2]], np.int64), -1, emb.IndexOutOfRangeError),
    (np.array([1, 5], np.int64), 3, emb.IndexOutOfRangeError),
    (np.array([1, 5], np.int64), 0, emb.IndexOutOfRangeError),
    (np.array([1, 5], np.int64), -2, emb.IndexOutOfRangeError),
    (np.array(4, np.int64), 4, emb.IndexOutOfRangeError),
])
def test_one_hot_errors_match_torch(idx, nc, status):
    want = torch_error(lambda: F.one_hot(torch.from_numpy(idx), nc))
    out = np.full(idx.shape + (6,), 42, np.int64)
    st, msg = call(emb.one_hot, idx, nc, out=out)
    assert st is status, (st, msg)
    assert want in msg, (want, msg)
    assert (out == 42).all()
    st, msg = call(emb.one_hot, idx, nc)  # the output allocated by emb: the same refusal
    assert st is status and want in msg, (want, st, msg)


def test_one_hot_out_errors():
    idx = np.array([0, 2], np.int64)
    for out, status, frag in [
        (np.zeros((2, 4), np.int64), emb.ShapeError, "out has shape [2, 4], expected [2, 3]"),
        (np.zeros(6, np.int64), emb.ShapeError, "expected [2, 3]"),
        (np.zeros((2, 3), np.int32), emb.DtypeError, "out must be int64 or float32, got int32"),
        (np.zeros((2, 3), np.float64), emb.DtypeError, "got float64"),
    ]:
        before = out.copy()
        st, msg = call(emb.one_hot, idx, -1, out=out)
        assert st is status and frag in msg, (st, msg)
        assert (out == before).all()


def test_package_arguments_and_views():
    """emb.Linear's weight and bias are views of the layer (writes change it; a view keeps
    the layer alive); arguments of the wrong kind are TypeErrors naming what was expected."""
    lin = Linear(3, 2, True, seed=1)
    w, b = lin.weight, lin.bias
    w[:] = np.arange(6, dtype=np.float32).reshape(2, 3)
    b[:] = [0.5, -0.5]
    x = np.array([[1.0, 2.0, 3.0]], np.float32)
    want = F.linear(torch.from_numpy(x), torch.from_numpy(w.copy()), torch.from_numpy(b.copy()))
    del lin
    assert_close(w, np.arange(6, dtype=np.float32).reshape(2, 3), exact=True)
    with pytest.raises(TypeError, match="generator must be an emb.Generator or None, got int"):
        emb.Linear(3, 2, generator=5)
    with pytest.raises(TypeError, match="dtype must be int64 or float32, got float64"):
        emb.one_hot(np.array([1]), 3, dtype=np.float64)
    lin = Linear(3, 2, True, seed=1)
    lin.weight[:] = w
    lin.bias[:] = b
    assert_close(lin(x), want, exact=True, what="after writes through the views")
    with pytest.raises(ValueError, match="C-contiguous"):
        lin.forward(x, out=np.zeros((2, 4), np.float32)[:, ::2].T[:1])
