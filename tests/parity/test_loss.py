"""Parity of the losses with PyTorch 1.13: F.cross_entropy (weight, ignore_index,
label_smoothing), F.nll_loss, F.log_softmax, F.mse_loss and F.binary_cross_entropy_with_logits
(pos_weight), forward and backward, for every reduction, against torch autograd at test time.

cross_entropy, nll_loss and log_softmax are compared BIT FOR BIT (NaN equals NaN) on
thousands of random cases, with torch and emb at 1 and at 2 threads, when emb uses its SLEEF
kernels and torch dispatches to AVX2 (the machine this suite runs on; the test checks it).
mse (targets broadcast to the input) and BCE with logits (pos_weight, a broadcast weight)
are bit-exact too, for every reduction. Errors carry torch's own messages, caught live.

The losses have two kernel tiers, each compared with the matching torch kernel: the fast one
(SLEEF, AVX2) in this process against torch's AVX2 kernels, whatever EMB_KERNELS says (an
autouse fixture selects it), and the reference one against torch forced to its DEFAULT
capability, in a subprocess (test_reference_kernels_match_torch_default_capability)."""
import os
import random
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import emb

torch.set_num_threads(1)

# The tier this run is under (EMB_KERNELS); "the fast kernels" are that tier unless it is ref.
RUN_KERNEL_MODE = emb.get_kernel_mode()
FAST_KERNEL_MODE = RUN_KERNEL_MODE if RUN_KERNEL_MODE != "ref" else "auto"


@pytest.fixture(autouse=True)
def _fast_kernels():
    """In process, torch runs its AVX2 kernels: emb's fast tier is the one to compare."""
    emb.set_kernel_mode(FAST_KERNEL_MODE)
    yield
    emb.set_kernel_mode(RUN_KERNEL_MODE)

REDUCTIONS = ["mean", "sum", "none"]


def grad_of_loss(rng, reduction, none_shape):
    shape = none_shape if reduction == "none" else ()
    return np.array(rng.uniform(0.5, 1.5, size=shape), np.float32)


def torch_error(fn):
    try:
        fn()
    except Exception as e:
        return str(e)
    raise AssertionError("torch did not fail")


def assert_bits(got, want, what):
    """Bitwise equality, any NaN equal to any NaN (torch's and emb's NaN payloads differ)."""
    got = np.asarray(got, np.float32)
    want = np.asarray(want.detach().numpy() if hasattr(want, "detach") else want, np.float32)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    same = (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))
    if not same.all():
        i = np.argwhere(~same)[0]
        raise AssertionError(f"{what}: {int((~same).sum())} of {got.size} values differ; first "
                             f"at {tuple(i)}: emb {got[tuple(i)]!r} torch {want[tuple(i)]!r}")


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """torch and emb both at 1, then both at 2 threads."""
    old_t, old_e = torch.get_num_threads(), emb.get_num_threads()
    torch.set_num_threads(request.param)
    emb.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(old_t)
    emb.set_num_threads(old_e)


def test_torch_dispatches_avx2():
    """The bit-exact assertions below hold for torch's AVX2 kernels; say so if that changed."""
    assert "CPU capability usage: AVX2" in torch.__config__.show()


def test_defaults():
    """The package's defaults are torch's: reduction 'mean', ignore_index -100, no label
    smoothing, no weight, no pos_weight (each loss called with no options, as torch is)."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((7, 5)) * 2).astype(np.float32)
    t = rng.integers(0, 5, size=7).astype(np.int64)
    t[[1, 4]] = -100
    y = rng.random((7, 5)).astype(np.float32)
    tx, tt, ty = torch.from_numpy(x), torch.from_numpy(t), torch.from_numpy(y)
    assert_bits(emb.cross_entropy(x, t), F.cross_entropy(tx, tt), "cross_entropy")
    assert_bits(emb.nll_loss(x, t), F.nll_loss(tx, tt), "nll_loss")
    assert_bits(emb.mse_loss(x, y), F.mse_loss(tx, ty), "mse_loss")
    assert_bits(emb.binary_cross_entropy_with_logits(x, y),
                F.binary_cross_entropy_with_logits(tx, ty), "bce with logits")


# ---- cross-entropy ----------------------------------------------------------------------

def ce_case(rng, x, t, reduction, ignore_index, ls, what, weight=None):
    kw = dict(weight=weight, ignore_index=ignore_index, reduction=reduction, label_smoothing=ls)
    none_shape = t.shape
    xt = torch.from_numpy(x.copy()).requires_grad_()
    want = F.cross_entropy(xt, torch.from_numpy(t), ignore_index=ignore_index,
                           weight=None if weight is None else torch.from_numpy(weight),
                           reduction=reduction, label_smoothing=ls)
    g = grad_of_loss(rng, reduction, none_shape)
    want.backward(torch.from_numpy(g))
    assert_bits(emb.cross_entropy(x, t, **kw), want, f"{what} loss")
    assert_bits(emb.cross_entropy_backward(x, t, g, **kw), xt.grad, f"{what} grad")


def random_ce(rnd, rng, n_max=300):
    n = rnd.choice([0, 1, 2, 3, 5, 8, 15, 16, 17, 31, 33, 64, 100, n_max]) \
        if rnd.random() < 0.9 else rnd.randint(0, n_max)
    c = rnd.choice([1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 40, 100]) \
        if rnd.random() < 0.7 else rnd.randint(1, 300)
    scale = rnd.choice([0.01, 0.5, 2.0, 10.0, 60.0])
    x = (rng.standard_normal((n, c)) * scale).astype(np.float32)
    ignore_index = rnd.choice([-100, -100, -1, rnd.randrange(c)])
    t = rng.integers(0, c, size=n).astype(np.int64)
    t[rng.random(n) < rnd.choice([0.0, 0.2, 0.9])] = ignore_index
    weight = None
    if rnd.random() < 0.4:
        weight = rng.uniform(0.05, 3.0, size=c).astype(np.float32)
    return x, t, ignore_index, weight


def test_cross_entropy_random_bit_exact(threads):
    rnd = random.Random(2023 + threads)
    rng = np.random.default_rng(2023 + threads)
    for case in range(1500):
        x, t, ignore_index, weight = random_ce(rnd, rng)
        reduction = rnd.choice(REDUCTIONS)
        ls = rnd.choice([0.0, 0.0, 0.1, 0.37, 1.0])
        ce_case(rng, x, t, reduction, ignore_index, ls,
                f"case {case}: {list(x.shape)} {reduction} ignore {ignore_index} ls {ls} "
                f"weight {weight is not None}", weight)


def test_cross_entropy_large_batches_bit_exact(threads):
    """Batches long enough for nll_loss's cascade to use more levels and wider steps."""
    rnd = random.Random(99)
    rng = np.random.default_rng(99)
    for case, n in enumerate([255, 256, 257, 4096, 70000]):
        c = rnd.choice([3, 10, 33])
        x = rng.standard_normal((n, c)).astype(np.float32)
        t = rng.integers(0, c, size=n).astype(np.int64)
        t[rng.random(n) < 0.1] = -100
        w = rng.uniform(0.5, 2, size=c).astype(np.float32)
        for reduction in ("mean", "sum"):
            ce_case(rng, x, t, reduction, -100, 0.0, f"n {n} {reduction}")
            ce_case(rng, x, t, reduction, -100, 0.0, f"n {n} {reduction} weight", w)
            if n <= 32768:  # torch splits longer sums between its threads
                ce_case(rng, x, t, reduction, -100, 0.2, f"n {n} {reduction} ls")


def test_cross_entropy_spatial_bit_exact(threads):
    """[N, C, d1, ...] logits: log_softmax over dim 1 (torch's kernel for a dimension that is
    not the last, its chunks, vector and scalar parts), nll_loss2d's cascade, the smoothing
    sum over classes (a non-innermost reduction)."""
    rnd = random.Random(31 + threads)
    rng = np.random.default_rng(31 + threads)
    for case in range(600):
        n = rnd.choice([0, 1, 2, 3, 5])
        c = rnd.choice([1, 2, 3, 8, 12, 40])
        sp = [rnd.choice([1, 2, 7, 8, 9, 17, 33]) for _ in range(rnd.choice([1, 1, 2, 3]))]
        if rnd.random() < 0.05:
            sp[0] = 3000  # more inner positions than one chunk of torch's kernel
        x = (rng.standard_normal([n, c] + sp) * rnd.choice([0.5, 3.0, 20.0])).astype(np.float32)
        ignore_index = rnd.choice([-100, rnd.randrange(c)])
        t = rng.integers(0, c, size=[n] + sp).astype(np.int64)
        t[rng.random(t.shape) < 0.2] = ignore_index
        w = rng.uniform(0.1, 2, size=c).astype(np.float32) if rnd.random() < 0.4 else None
        reduction = rnd.choice(REDUCTIONS)
        ls = rnd.choice([0.0, 0.0, 0.2])
        ce_case(rng, x, t, reduction, ignore_index, ls,
                f"case {case}: {list(x.shape)} {reduction} ls {ls} weight {w is not None}", w)


def test_cross_entropy_unbatched():
    rng = np.random.default_rng(5)
    for case in range(60):
        c = int(rng.integers(1, 20))
        x = (rng.standard_normal(c) * 2).astype(np.float32)
        t = np.array(rng.integers(0, c) if case % 7 else -100, np.int64)
        w = rng.uniform(0.1, 2, size=c).astype(np.float32) if case % 3 == 0 else None
        for reduction in REDUCTIONS:
            for ls in (0.0, 0.3):
                ce_case(rng, x, t, reduction, -100, ls, f"[{c}] target {int(t)} {reduction} {ls}",
                        w)


def test_cross_entropy_all_ignored_and_empty():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    t = np.full(4, -100, np.int64)
    w = np.ones(5, np.float32)
    for reduction in REDUCTIONS:
        for ls in (0.0, 0.2):
            ce_case(rng, x, t, reduction, -100, ls, f"all ignored {reduction} {ls}")
            ce_case(rng, x, t, reduction, -100, ls, f"all ignored {reduction} {ls} w", w)
    # mean over nothing is nan, as in torch
    assert np.isnan(emb.cross_entropy(x, t))
    for reduction in REDUCTIONS:
        ce_case(rng, np.zeros((0, 3), np.float32), np.zeros(0, np.int64), reduction, -100, 0.0,
                f"empty batch {reduction}")
    # zero classes with every target ignored (label smoothing divides by C = 0)
    for reduction in REDUCTIONS:
        for ls in (0.0, 0.1):
            ce_case(rng, np.zeros((3, 0), np.float32), np.full(3, -100, np.int64), reduction,
                    -100, ls, f"C = 0 {reduction} {ls}")


def test_cross_entropy_special_values():
    """inf, -inf and NaN logits, zero and negative class weights."""
    rng = np.random.default_rng(12)
    specials = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e30]
    for case in range(200):
        n, c = int(rng.integers(1, 6)), int(rng.integers(1, 20))
        x = rng.standard_normal((n, c)).astype(np.float32)
        k = int(rng.integers(0, 3))
        for _ in range(k):
            x[rng.integers(0, n), rng.integers(0, c)] = specials[int(rng.integers(0, 7))]
        t = rng.integers(0, c, size=n).astype(np.int64)
        w = rng.uniform(-1, 2, size=c).astype(np.float32) if case % 2 else None
        if w is not None and case % 4 == 1:
            w[:] = 0.0
        for reduction in REDUCTIONS:
            ce_case(rng, x, t, reduction, -100, [0.0, 0.25][case % 2], f"special {case}", w)


# ---- nll_loss and log_softmax --------------------------------------------------------------

def test_nll_loss_random_bit_exact(threads):
    rnd = random.Random(7 + threads)
    rng = np.random.default_rng(7 + threads)
    for case in range(1000):
        x, t, ignore_index, weight = random_ce(rnd, rng)
        reduction = rnd.choice(REDUCTIONS)
        kw = dict(weight=weight, ignore_index=ignore_index, reduction=reduction)
        xt = torch.from_numpy(x.copy()).requires_grad_()
        want = F.nll_loss(xt, torch.from_numpy(t), ignore_index=ignore_index,
                          weight=None if weight is None else torch.from_numpy(weight),
                          reduction=reduction)
        g = grad_of_loss(rng, reduction, t.shape)
        want.backward(torch.from_numpy(g))
        what = f"case {case}: {list(x.shape)} {reduction} weight {weight is not None}"
        assert_bits(emb.nll_loss(x, t, **kw), want, f"{what} loss")
        assert_bits(emb.nll_loss_backward(x, t, g, **kw), xt.grad, f"{what} grad")


def test_nll_loss_rejects_label_smoothing():
    """emb.nll_loss has no label_smoothing argument; the package's loss entry point passes
    one to emb, which refuses it."""
    x = np.zeros((2, 3), np.float32)
    t = np.array([0, 1], np.int64)
    with pytest.raises(emb.InvalidArgumentError, match="nll_loss has no label_smoothing"):
        emb._emb.loss("nll_loss", x, t, label_smoothing=0.1)


def test_log_softmax_random_bit_exact(threads):
    rnd = random.Random(11 + threads)
    rng = np.random.default_rng(11 + threads)
    for case in range(1500):
        rank = rnd.randint(1, 4)
        shape = [rnd.choice([1, 2, 3, 5]) for _ in range(rank - 1)]
        shape.append(rnd.choice([1, 2, 7, 8, 9, 16, 31, 64, 100]) if rnd.random() < 0.8
                     else rnd.randint(1, 1000))
        if rnd.random() < 0.03:
            shape[0] = 0
        x = (rng.standard_normal(shape) * rnd.choice([0.01, 1.0, 5.0, 50.0])).astype(np.float32)
        if rnd.random() < 0.1 and x.size:
            x.flat[rnd.randrange(x.size)] = rnd.choice([np.inf, -np.inf, np.nan])
        xt = torch.from_numpy(x.copy()).requires_grad_()
        yt = F.log_softmax(xt, dim=-1)
        gy = rng.standard_normal(shape).astype(np.float32)
        yt.backward(torch.from_numpy(gy))
        what = f"case {case}: {shape}"
        assert_bits(emb.log_softmax(x), yt, f"{what} y")
        assert_bits(emb.log_softmax(yt.detach().numpy(), grad_y=gy), xt.grad, f"{what} grad")


def test_log_softmax_errors():
    """The package allocates the output: emb's checks of a caller's output (its shape, an
    overlap with x) are C-only and not reached from here."""
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(emb.ShapeError, match="at least one dimension"):
        emb.log_softmax(np.zeros((), np.float32))
    with pytest.raises(emb.ShapeError):
        emb.log_softmax(x, grad_y=np.zeros((2, 4), np.float32))
    with pytest.raises(TypeError, match="grad_y must be float32, got float64"):
        emb.log_softmax(x, grad_y=x.astype(np.float64))


def test_cross_entropy_large_logits():
    rng = np.random.default_rng(8)
    x = np.array([[80.0, -80.0, 0.0], [-50.0, 60.0, 59.5]], np.float32)
    t = np.array([1, 2], np.int64)
    for reduction in REDUCTIONS:
        ce_case(rng, x, t, reduction, -100, 0.0, f"large logits {reduction}")


@pytest.mark.parametrize("x,t,kw,error", [
    (np.zeros((3, 4), np.float32), np.array([1, 5, 0]), {}, emb.IndexOutOfRangeError),
    (np.zeros((3, 4), np.float32), np.array([1, -1, 0]), {}, emb.IndexOutOfRangeError),
    (np.zeros((3, 4), np.float32), np.array([1, -100, 0]), {"ignore_index": 2},
     emb.IndexOutOfRangeError),
    (np.zeros((3, 4), np.float32), np.array([1, 2]), {}, emb.ShapeError),
    (np.zeros(4, np.float32), np.array([1]), {}, emb.ShapeError),
    (np.zeros((3, 4), np.float32), np.array([1, 2, 0], np.int32), {}, TypeError),
    (np.zeros((3, 4), np.float32), np.array([1, 2, 0]), {"label_smoothing": 1.5},
     emb.InvalidArgumentError),
    (np.zeros((3, 0), np.float32), np.array([0, 0, 0]), {}, emb.IndexOutOfRangeError),
    (np.zeros((2, 3, 2), np.float32), np.array([1, 2]), {}, emb.ShapeError),
    (np.zeros((2, 3), np.float32), np.zeros((2, 2), np.int64), {}, emb.ShapeError),
    (np.zeros((2, 3), np.float32), np.zeros((1, 2), np.int64), {}, emb.ShapeError),
    (np.zeros((2, 3, 4), np.float32), np.zeros((3, 4), np.int64), {}, emb.ShapeError),
    (np.zeros((2, 3, 4, 5), np.float32), np.zeros((2, 4), np.int64), {}, emb.ShapeError),
    (np.zeros((2, 3, 4, 5), np.float32), np.zeros((2, 4, 6), np.int64), {}, emb.ShapeError),
    (np.zeros((2, 3, 4, 5, 6), np.float32), np.zeros((2, 4, 5, 7), np.int64), {},
     emb.ShapeError),
    (np.zeros((2, 3, 4), np.float32), np.full((2, 4), 3), {}, emb.IndexOutOfRangeError),
])
def test_cross_entropy_errors_match_torch(x, t, kw, error):
    """emb's errors carry torch's message; an int32 target is refused by the package before
    emb runs (indices of a loss are int64), with the package's own message."""
    t = np.ascontiguousarray(t)
    want = torch_error(lambda: F.cross_entropy(torch.from_numpy(x), torch.from_numpy(t), **kw))
    if error is TypeError:
        want = "target must be int64, got int32"
    with pytest.raises(error) as e:
        emb.cross_entropy(x, t, **kw)
    assert want in str(e.value), (want, str(e.value))
    with pytest.raises(error) as e:
        emb.cross_entropy_backward(x, t, np.ones((), np.float32), **kw)
    assert want in str(e.value), (want, str(e.value))


def test_cross_entropy_other_errors():
    """Float targets (class probabilities) and float64 logits are refused by the package's
    dtype check before emb runs; the loss buffer is the package's, so emb's check of a
    caller's loss shape is C-only."""
    x = np.zeros((2, 3), np.float32)
    t = np.array([0, 1], np.int64)
    cases = [
        (x, np.array([0.0, 1.0], np.float32), {}, TypeError, "target must be int64, got float32"),
        (x.astype(np.float64), t, {}, TypeError, "input must be float32, got float64"),
        (np.zeros((), np.float32), t, {}, emb.ShapeError,
         "logits must be [N, C, d1, ...], [N, C] or [C], got shape []"),
        (x, t, {"label_smoothing": -0.5}, emb.InvalidArgumentError,
         "label_smoothing must be between 0.0 and 1.0. Got: -0.5"),
    ]
    for xx, tt, kw, error, frag in cases:
        with pytest.raises(error) as e:
            emb.cross_entropy(xx, tt, **kw)
        assert frag in str(e.value), (frag, str(e.value))


# ---- mse --------------------------------------------------------------------------------

def random_shape(rnd, min_rank=0):
    return tuple(rnd.randint(0 if rnd.random() < 0.05 else 1, 6)
                 for _ in range(rnd.randint(min_rank, 4)))


def test_mse_random_bit_exact(threads):
    """Every reduction, with targets torch broadcasts to the input's shape; sums longer than
    torch's 32768-value grain only with one torch thread (torch then splits them)."""
    import warnings
    rnd = random.Random(77 + threads)
    rng = np.random.default_rng(77 + threads)
    for case in range(800):
        shape = random_shape(rnd)
        if rnd.random() < 0.03:
            shape = (rnd.choice([5000, 40000 if threads == 1 else 30000]),)
        tshape = shape
        if rnd.random() < 0.4 and shape:
            tshape = tuple(d if rnd.random() < 0.6 else 1 for d in shape)[rnd.randint(0, len(shape)):]
        reduction = rnd.choice(REDUCTIONS)
        x = np.array(rng.standard_normal(shape) * 2, np.float32)
        y = np.array(rng.standard_normal(tshape) * 2, np.float32)
        xt = torch.from_numpy(x.copy()).requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns when the shapes differ
            want = F.mse_loss(xt, torch.from_numpy(y), reduction=reduction)
        g = grad_of_loss(rng, reduction, shape)
        want.backward(torch.from_numpy(g))
        what = f"case {case}: {shape} target {tshape} {reduction}"
        assert_bits(emb.mse_loss(x, y, reduction=reduction), want, f"{what} loss")
        assert_bits(emb.mse_loss_backward(x, y, g, reduction=reduction), xt.grad,
                    f"{what} grad")


def test_mse_errors():
    x = np.zeros((3, 4), np.float32)
    y = np.zeros((3, 3), np.float32)
    want = torch_error(lambda: F.mse_loss(torch.from_numpy(x), torch.from_numpy(y)))
    with pytest.raises(emb.ShapeError) as e:
        emb.mse_loss(x, y)
    assert want in str(e.value), (want, str(e.value))
    with pytest.raises(emb.ShapeError, match="emb broadcasts only the target to the input's "
                                             "shape"):
        emb.mse_loss(x, np.zeros((2, 3, 4), np.float32))
    with pytest.raises(TypeError, match="target must be float32, got float64"):
        emb.mse_loss(x, np.zeros((3, 4)))


# ---- binary cross-entropy with logits ---------------------------------------------------

def test_bce_with_logits_random_bit_exact(threads):
    """pos_weight, an elementwise weight broadcast to the input, every reduction. torch
    splits elementwise loops and sums of more than 32768 values between its threads, so the
    2-thread cases stay at or below that size."""
    rnd = random.Random(31 + threads)
    rng = np.random.default_rng(31 + threads)
    for case in range(800):
        use_pw = rnd.random() < 0.5
        use_w = rnd.random() < 0.4
        shape = random_shape(rnd, min_rank=1 if use_pw else 0)
        if rnd.random() < 0.03:
            shape = (rnd.choice([5000, 30000] + ([70000] if threads == 1 else [])),)
        reduction = rnd.choice(REDUCTIONS)
        x = np.array(rng.standard_normal(shape) * rnd.choice([1.0, 3.0, 30.0]), np.float32)
        if rnd.random() < 0.5:
            y = np.array(rng.integers(0, 2, size=shape), np.float32)
        else:
            y = np.array(rng.random(shape), np.float32)
        pw = rng.uniform(0.1, 4.0, size=shape[-1:]).astype(np.float32) if use_pw else None
        w = None
        if use_w:
            wshape = tuple(d if rnd.random() < 0.6 else 1 for d in shape)[rnd.randint(0, len(shape)):]
            w = np.array(rng.uniform(0.1, 2.0, size=wshape), np.float32)
        xt = torch.from_numpy(x.copy()).requires_grad_()
        want = F.binary_cross_entropy_with_logits(
            xt, torch.from_numpy(y), weight=None if w is None else torch.from_numpy(w),
            pos_weight=torch.from_numpy(pw) if use_pw else None, reduction=reduction)
        g = grad_of_loss(rng, reduction, shape)
        want.backward(torch.from_numpy(g))
        kw = dict(weight=w, pos_weight=pw, reduction=reduction)
        what = f"case {case}: {shape} {reduction} pos_weight {use_pw} weight {use_w}"
        assert_bits(emb.binary_cross_entropy_with_logits(x, y, **kw), want, f"{what} loss")
        assert_bits(emb.binary_cross_entropy_with_logits_backward(x, y, g, **kw), xt.grad,
                    f"{what} grad")


def test_bce_with_logits_extreme_logits():
    x = np.array([[90.0, -90.0, 30.0, -30.0, 0.0]], np.float32)
    y = np.array([[0.0, 1.0, 0.25, 0.75, 0.5]], np.float32)
    pw = np.array([2.0, 3.0, 0.5, 1.0, 1.5], np.float32)
    for reduction in REDUCTIONS:
        for use_pw in (False, True):
            xt = torch.from_numpy(x.copy()).requires_grad_()
            want = F.binary_cross_entropy_with_logits(
                xt, torch.from_numpy(y), pos_weight=torch.from_numpy(pw) if use_pw else None,
                reduction=reduction)
            want.backward(torch.ones_like(want))
            kw = dict(pos_weight=pw if use_pw else None, reduction=reduction)
            loss = emb.binary_cross_entropy_with_logits(x, y, **kw)
            assert np.isfinite(loss).all()
            assert_bits(loss, want, f"{reduction} {use_pw} loss")
            g = np.ones(loss.shape, np.float32)
            assert_bits(emb.binary_cross_entropy_with_logits_backward(x, y, g, **kw), xt.grad,
                        f"{reduction} {use_pw} grad")


def test_bce_with_logits_errors_match_torch():
    x = np.zeros((3, 4), np.float32)
    y = np.zeros((3, 3), np.float32)
    want = torch_error(lambda: F.binary_cross_entropy_with_logits(torch.from_numpy(x),
                                                                  torch.from_numpy(y)))
    bce = emb.binary_cross_entropy_with_logits
    y4 = np.zeros((3, 4), np.float32)
    with pytest.raises(emb.ShapeError) as e:
        bce(x, y)
    assert want in str(e.value), (want, str(e.value))
    with pytest.raises(emb.ShapeError, match=r"pos_weight has shape \[3\], expected \[4\]"):
        bce(x, y4, pos_weight=np.ones(3, np.float32))
    with pytest.raises(emb.ShapeError, match="emb broadcasts only the weight to the input's "
                                             "shape"):
        bce(x, y4, weight=np.ones((2, 3, 4), np.float32))
    w = np.ones(3, np.float32)
    want = torch_error(lambda: F.binary_cross_entropy_with_logits(
        torch.from_numpy(x), torch.from_numpy(y4), weight=torch.from_numpy(w)))
    with pytest.raises(emb.ShapeError) as e:
        bce(x, y4, weight=w)
    assert want in str(e.value), (want, str(e.value))


_DEFAULT_CAPABILITY_CHECK = r"""
import random, sys
import numpy as np, torch, torch.nn.functional as F
import emb
assert "CPU capability usage: NO AVX" in torch.__config__.show()
torch.set_num_threads(1)
rnd, rng = random.Random(5), np.random.default_rng(5)
bad = 0
for case in range(300):
    shape = [rnd.choice([1, 3, 5]), rnd.choice([1, 2, 7, 8, 9, 31, 100])]
    if rnd.random() < 0.3:
        shape.append(rnd.choice([1, 3, 9]))
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    t = rng.integers(0, shape[1], size=[shape[0]] + shape[2:]).astype(np.int64)
    ls = rnd.choice([0.0, 0.2])
    xt = torch.from_numpy(x.copy()).requires_grad_()
    want = F.cross_entropy(xt, torch.from_numpy(t), label_smoothing=ls)
    want.backward()
    loss = emb.cross_entropy(x, t, label_smoothing=ls)
    gx = emb.cross_entropy_backward(x, t, np.ones((), np.float32), label_smoothing=ls)
    y, yt = emb.log_softmax(x), F.log_softmax(torch.from_numpy(x), dim=-1).numpy()
    for got, exp in ((loss, want.detach().numpy()), (gx, xt.grad.numpy()), (y, yt)):
        bad += not np.array_equal(np.asarray(got).view(np.int32), np.asarray(exp).view(np.int32))
    # BCE with logits (pos_weight, a weight) and MSE, every reduction
    red = rnd.choice(["mean", "sum", "none"])
    yb = rng.random(shape).astype(np.float32)
    pw = rng.uniform(0.1, 4, shape[-1:]).astype(np.float32) if rnd.random() < 0.5 else None
    wb = rng.uniform(0.1, 2, shape[-1:]).astype(np.float32) if rnd.random() < 0.3 else None
    for name in ("bce", "mse"):
        xt = torch.from_numpy(x.copy()).requires_grad_()
        if name == "bce":
            want = F.binary_cross_entropy_with_logits(
                xt, torch.from_numpy(yb), reduction=red,
                weight=None if wb is None else torch.from_numpy(wb),
                pos_weight=None if pw is None else torch.from_numpy(pw))
        else:
            want = F.mse_loss(xt, torch.from_numpy(yb), reduction=red)
        g = rng.uniform(0.5, 1.5, tuple(want.shape)).astype(np.float32)
        want.backward(torch.from_numpy(g))
        if name == "bce":
            kw = dict(weight=wb, pos_weight=pw, reduction=red)
            loss = emb.binary_cross_entropy_with_logits(x, yb, **kw)
            gx = emb.binary_cross_entropy_with_logits_backward(x, yb, g, **kw)
        else:
            loss = emb.mse_loss(x, yb, reduction=red)
            gx = emb.mse_loss_backward(x, yb, g, reduction=red)
        for got, exp in ((loss, want.detach().numpy()), (gx, xt.grad.numpy())):
            bad += not np.array_equal(np.asarray(got).view(np.int32),
                                      np.asarray(exp).view(np.int32))
print(bad)
sys.exit(1 if bad else 0)
"""


def test_reference_kernels_match_torch_default_capability():
    """emb's reference kernels (EMB_KERNELS=ref) against torch forced to its non-vectorised
    DEFAULT capability (ATEN_CPU_CAPABILITY=default): cross-entropy, log_softmax, BCE with
    logits and MSE, forward and backward, bit-exact too (a separate process, as both are
    read at start-up)."""
    import subprocess
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(emb.__file__)))
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default", EMB_KERNELS="ref",
               PYTHONPATH=os.pathsep.join([package_dir] + [p for p in [os.environ.get(
                   "PYTHONPATH")] if p]))
    r = subprocess.run([sys.executable, "-c", _DEFAULT_CAPABILITY_CHECK], env=env,
                       cwd=os.path.dirname(os.path.abspath(__file__)), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, (r.stdout, r.stderr)
