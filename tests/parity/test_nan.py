"""NaN payloads against torch, bit for bit (docs/semantics.md §1.1): which NaN comes out of an
operation is part of the contract, and it must not depend on the kernel tier.

Inputs hold NaNs with distinct payloads and both signs, signalling NaNs (quiet bit clear),
infinities of both signs (inf - inf makes a new NaN) and ordinary values; outputs are
compared with torch's as raw bytes under every kernel tier this CPU runs (the reference
kernels, AVX2, AVX-512). Where several NaNs meet in an accumulation PyTorch makes with axpy /
add_ (the backward sums, bag sums, sparse accumulation, coalesce, dense.add_(sparse), the
optimizers), PyTorch's choice is a rule emb reproduces, and any number of NaNs is tested.
Where two NaNs meet in one elementwise multiply or subtract, or in the lanes of a sum, PyTorch
picks one by the element's place in its compiled loop (semantics.md §1.1 lists where that
happens); there the tests give each such operation at most one NaN (then its payload is
determined) and check, with many, only that the same outputs are NaN. EmbeddingBag max is a
documented difference (a NaN anywhere in a column wins, the first one): its reference is
written here."""
import ctypes as C

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import emb

from embpy import (ADAGRAD, ADAM, ADAMW, FAST_KERNEL_MODE, KERNELS_REF, RUN_KERNEL_MODE, SGD,
                   SPARSE_ADAM, T, assert_close, check, kernel_modes, lib, ptr, tensor_out)
from test_backward import Emb as BwdEmb, Sparse, compare_sparse, sparse_backward, torch_emb
from test_bag import Bag, torch_bag
from test_linear import Linear
from test_optim import (Opt, dense_trajectory, sparse_trajectory, torch_optimizer,
                        torch_sparse)

torch.set_num_threads(1)

MODES = pytest.mark.parametrize("mode", kernel_modes(),
                                ids=lambda m: {0: "auto", 1: "ref", 2: "avx2"}[m])


def set_mode(mode):
    """Selects a kernel tier in both bindings the helpers use: the ctypes library and the
    package (which links its own copy of emb)."""
    lib.emb_set_kernel_mode(mode)
    emb.set_kernel_mode({0: "auto", 1: "ref", 2: "avx2"}[mode])


@pytest.fixture(autouse=True)
def _restore():
    yield
    set_mode(RUN_KERNEL_MODE)
    lib.emb_set_num_threads(0)
    emb.set_num_threads(0)


def nan_bits(rng, n):
    """n NaNs as uint32: random payloads, both signs, a quarter signalling (quiet bit clear,
    payload non-zero)."""
    payload = rng.integers(1, 1 << 22, n, dtype=np.uint32)
    quiet = np.where(rng.random(n) < 0.75, np.uint32(1 << 22), np.uint32(0))
    sign = np.where(rng.random(n) < 0.5, np.uint32(1 << 31), np.uint32(0))
    return sign | np.uint32(0x7F800000) | quiet | payload


def sprinkle(rng, a, frac=0.15, inf_frac=0.05):
    """A copy of float32 array a with a fraction of NaNs (distinct payloads) and infinities."""
    a = np.array(a, np.float32, copy=True)
    flat = a.reshape(-1)
    n = flat.size
    if n == 0:
        return a
    r = rng.random(n)
    k = int((r < frac).sum())
    flat[r < frac] = nan_bits(rng, k).view(np.float32)
    infs = (r >= frac) & (r < frac + inf_frac)
    flat[infs] = np.where(rng.random(int(infs.sum())) < 0.5, np.inf, -np.inf)
    return a


def one_special_per_row(rng, a, p=0.6, inf=True):
    """A copy of 2-D a with at most one NaN (random payload) or infinity per row."""
    a = np.array(a, np.float32, copy=True)
    for r in range(a.shape[0]):
        if rng.random() < p:
            j = int(rng.integers(0, a.shape[1]))
            if inf and rng.random() < 0.3:
                a[r, j] = np.inf if rng.random() < 0.5 else -np.inf
            else:
                a[r, j] = nan_bits(rng, 1).view(np.float32)[0]
    return a


def exact(got, want, what):
    assert_close(np.asarray(got), np.asarray(want), exact=True, what=what)


def same_nans(got, want, what):
    """Where several NaNs meet in an operation whose NaN PyTorch picks by loop position: the
    same outputs are NaN, and every other output has torch's bits."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{what}: NaN positions differ"
    keep = ~np.isnan(want)
    exact(got[keep], want[keep], f"{what} (the outputs that are not NaN)")


# ---- Embedding: lookup, max_norm, dense and sparse backward ------------------------------

@MODES
def test_lookup_and_renorm(mode):
    set_mode(mode)
    rng = np.random.default_rng(1)
    for case in range(60):
        V, D = int(rng.integers(2, 30)), int(rng.choice([1, 3, 8, 16, 17, 33, 64, 100]))
        w = sprinkle(rng, rng.standard_normal((V, D)) * 2, frac=0.1)
        idx = rng.integers(0, V, int(rng.integers(1, 40)))
        max_norm = None if case % 3 == 0 else float(rng.uniform(0.5, 3))
        norm_type = float(rng.choice([2.0, 1.0, 3.0, np.inf]))
        o = lib.emb_embedding_options_default()
        o.max_norm = np.inf if max_norm is None else max_norm
        o.norm_type = norm_type
        h = C.c_void_p()
        check(lib.emb_embedding_from_pretrained(T(w), False, ptr(o), ptr(h)))
        try:
            out = tensor_out(idx.shape + (D,))
            check(lib.emb_embedding_forward(h, T(idx), T(out)))
            v = T(np.zeros((1, 1), np.float32))
            check(lib.emb_embedding_weight(h, v))
            wn = np.ctypeslib.as_array(C.cast(v.data, C.POINTER(C.c_float)), (V * D,)).copy()
        finally:
            lib.emb_embedding_free(h)
        tw = torch.from_numpy(w.copy())
        te = torch.nn.Embedding.from_pretrained(tw, freeze=False, max_norm=max_norm,
                                                norm_type=norm_type)
        with torch.no_grad():
            tout = te(torch.from_numpy(idx)).numpy()
        what = f"case {case} V,D {V},{D} max_norm {max_norm} p {norm_type}"
        exact(out, tout, f"{what}: lookup")
        exact(wn.reshape(V, D), te.weight.detach().numpy(), f"{what}: weight after max_norm")


@MODES
@pytest.mark.parametrize("scale", [False, True], ids=["plain", "scale_grad_by_freq"])
def test_dense_backward(mode, scale):
    set_mode(mode)
    rng = np.random.default_rng(2 + scale)
    for case in range(80):
        V, D = int(rng.integers(1, 12)), int(rng.choice([1, 2, 7, 8, 15, 16, 17, 31, 33, 64, 100]))
        w = rng.standard_normal((V, D)).astype(np.float32)
        idx = rng.integers(0, V, (int(rng.integers(1, 8)), int(rng.integers(1, 6))))
        pad = None if case % 4 else int(rng.integers(0, V))
        e = BwdEmb(w, padding_idx=pad, scale=scale)
        te = torch_emb(w, padding_idx=pad, scale=scale)
        what = f"case {case} V,D {V},{D} idx {idx.tolist()} pad {pad}"
        gw = None
        for step in range(2):  # the second backward accumulates
            g = sprinkle(rng, rng.standard_normal(idx.shape + (D,)), frac=0.2)
            gw = e.backward(idx, g, gw)
            tg = torch_emb_backward(te, idx, g)
            exact(gw, tg, f"{what} step {step}")
        over = e.backward_overwrite(idx, g)
        te2 = torch_emb(w, padding_idx=pad, scale=scale)
        exact(over, torch_emb_backward(te2, idx, g), f"{what}: overwriting backward")


def torch_emb_backward(te, idx, g):
    out = te(torch.from_numpy(idx))
    out.backward(torch.from_numpy(g.copy()))
    return te.weight.grad.numpy().copy()


@MODES
def test_sparse_backward_coalesce_and_add(mode):
    set_mode(mode)
    rng = np.random.default_rng(3)
    for case in range(60):
        V, D = int(rng.integers(1, 8)), int(rng.choice([1, 3, 8, 16, 17, 64]))
        w = rng.standard_normal((V, D)).astype(np.float32)
        n = int(rng.integers(1, 40))
        idx = rng.integers(0, V, n)
        pad = None if case % 3 else int(rng.integers(0, V))
        e = BwdEmb(w, padding_idx=pad, sparse=True)
        te = torch_emb(w, padding_idx=pad, sparse=True)
        sg = Sparse(V, D)
        what = f"case {case} V,D {V},{D} pad {pad}"
        for step in range(2):  # the second merges into the first
            g = sprinkle(rng, rng.standard_normal((n, D)), frac=0.2)
            sparse_backward(e, idx, g, sg)
            out = te(torch.from_numpy(idx))
            out.backward(torch.from_numpy(g.copy()))
            compare_sparse(sg, te.weight.grad, f"{what} step {step}")
        dense = sprinkle(rng, rng.standard_normal((V, D)), frac=0.2)
        tdense = torch.from_numpy(dense.copy())
        sg.add_to_dense(dense)
        tdense.add_(te.weight.grad)
        exact(dense, tdense.numpy(), f"{what}: dense.add_(sparse)")
        sg.coalesce()
        compare_sparse(sg, te.weight.grad.coalesce(), f"{what}: coalesced")


# ---- EmbeddingBag -------------------------------------------------------------------------

def bag_case(rng, mode):
    V = int(rng.integers(3, 12))
    D = int(rng.choice([1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 64, 65, 100, 128, 129]))
    w = sprinkle(rng, rng.standard_normal((V, D)), frac=float(rng.choice([0.05, 0.3])))
    n = int(rng.integers(1, 14))
    inp = rng.integers(0, V, n).astype(np.int64)
    off = np.sort(rng.integers(0, n + 1, int(rng.integers(1, 4)))).astype(np.int64)
    off[0] = 0
    pad = None if rng.random() < 0.5 else int(rng.integers(0, V))
    psw = None
    if mode == "sum" and rng.random() < 0.6:
        psw = sprinkle(rng, rng.standard_normal(n), frac=0.2)
    return w, inp, off, pad, psw


def max_reference(w, inp, off, pad):
    """emb's max (docs/differences.md): per column, the first non-padding position, replaced
    by a strictly greater value or by a NaN when the current value is not NaN: a NaN anywhere
    wins, the first one, its bits copied."""
    n = len(inp)
    B = len(off)
    ends = list(off[1:]) + [n]
    out = np.zeros((B, w.shape[1]), np.float32)
    for b in range(B):
        rows = [w[k] for k in inp[off[b]:ends[b]] if k != pad]
        if not rows:
            continue
        cur = rows[0].copy()
        for r in rows[1:]:
            take = (r > cur) | (np.isnan(r) & ~np.isnan(cur))
            cur[take] = r[take]
        out[b] = cur
    return out


@MODES
@pytest.mark.parametrize("bag_mode", ["sum", "mean", "max"])
def test_bag_forward_and_backward(mode, bag_mode):
    set_mode(mode)
    rng = np.random.default_rng({"sum": 4, "mean": 5, "max": 6}[bag_mode])
    for case in range(150):
        w, inp, off, pad, psw = bag_case(rng, bag_mode)
        what = (f"case {case} {bag_mode} V,D {w.shape} inp {inp.tolist()} off {off.tolist()} "
                f"pad {pad} psw {psw is not None}")
        bag = Bag(w, mode=bag_mode, padding_idx=pad)
        out, mi = bag.forward(inp, off, psw)
        g = sprinkle(rng, rng.standard_normal(out.shape), frac=0.2)
        if bag_mode == "max":
            exact(out, max_reference(w, inp, off, None if pad is None else pad % w.shape[0]),
                  f"{what}: forward")
            continue  # max's backward routes through max_indices: copies and adds, below
        t_out, _, _, t_gw, t_gp = torch_bag(w, inp, off, psw, bag_mode, padding_idx=pad,
                                            grad=g, want_psw_grad=psw is not None)
        exact(out, t_out, f"{what}: forward")
        exact(bag.backward(inp, off, psw, mi, g), t_gw, f"{what}: dense gradient")
        if psw is not None and mode != KERNELS_REF:  # the reference sums in order (§14)
            exact(bag.backward_psw(inp, off, g), t_gp, f"{what}: per_sample_weights gradient")
        sbag = Bag(w, mode=bag_mode, padding_idx=pad, sparse=True)
        si, sv = sbag.backward_sparse(inp, off, psw, g)
        _, _, _, (ti, tv), _ = torch_bag(w, inp, off, psw, bag_mode, padding_idx=pad,
                                         sparse=True, grad=g)
        assert np.array_equal(si, ti), f"{what}: sparse indices"
        exact(sv, tv, f"{what}: sparse values")


@MODES
def test_bag_max_backward(mode):
    """max routes each column's gradient to its arg-max row; a row that wins several bags
    sums them (torch's index_add order). With finite weights (torch and emb agree on the
    arg-max), NaN payloads in the gradient."""
    set_mode(mode)
    rng = np.random.default_rng(7)
    for case in range(100):
        w, inp, off, pad, _ = bag_case(rng, "max")
        w = np.round(rng.standard_normal(w.shape)).astype(np.float32)  # ties and repeats
        bag = Bag(w, mode="max", padding_idx=pad)
        out, mi = bag.forward(inp, off, None)
        g = sprinkle(rng, rng.standard_normal(out.shape), frac=0.3)
        _, _, _, t_gw, _ = torch_bag(w, inp, off, None, "max", padding_idx=pad, grad=g)
        exact(bag.backward(inp, off, None, mi, g), t_gw, f"case {case}: max dense gradient")


@MODES
def test_bag_sparse_gradient_nan_times_nan(mode):
    """The sparse backward's value grad[bag] * per_sample_weight when both are NaN: PyTorch's
    multiply returns one or the other by the element's place in its loop; emb follows the
    measured rule (kernels/bag_ref.c) for every width, and for width 1 every batch length."""
    set_mode(mode)
    rng = np.random.default_rng(13)
    for D in list(range(1, 41)) + [64, 100, 129]:
        for n in ([1, 2, 3, 5, 8, 9, 12, 15, 16, 17, 23, 24, 31, 40] if D == 1 else [3]):
            w = rng.standard_normal((4, D)).astype(np.float32)
            inp = rng.integers(0, 4, n).astype(np.int64)
            off = np.array([0, n // 2], np.int64)
            psw = nan_bits(rng, n).view(np.float32)
            g = nan_bits(rng, 2 * D).view(np.float32).reshape(2, D)
            sbag = Bag(w, mode="sum", sparse=True)
            si, sv = sbag.backward_sparse(inp, off, psw, g)
            _, _, _, (ti, tv), _ = torch_bag(w, inp, off, psw, "sum", sparse=True, grad=g)
            exact(sv, tv, f"D {D} n {n}: sparse values")


# ---- optimizers -----------------------------------------------------------------------------

OPTIMIZERS = [
    (SGD, dict(lr=0.1)), (SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    (SGD, dict(lr=0.1, momentum=0.9, nesterov=True, dampening=0.0)),
    (ADAGRAD, dict(lr=0.1, weight_decay=0.01, lr_decay=0.01)),
    (ADAM, dict(lr=0.01, weight_decay=0.01)), (ADAM, dict(lr=0.01, amsgrad=True)),
    (ADAMW, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
]


@MODES
@pytest.mark.parametrize("kind,cfg", OPTIMIZERS, ids=lambda x: str(x))
def test_optimizer_dense_steps(mode, kind, cfg):
    set_mode(mode)

    def values(rng, shape, step):  # NaNs in the start and in every gradient
        return sprinkle(rng, rng.standard_normal(shape), frac=0.1 if step < 0 else 0.15)
    for k, shape in enumerate([(7,), (3, 16), (5, 17), (2, 33), (40,)]):
        dense_trajectory(kind, cfg, shape, 8 + k, steps=4, values=values)


SPARSE_OPTIMIZERS = [(SGD, dict(lr=0.1)), (SGD, dict(lr=0.1, momentum=0.9)),
                     (ADAGRAD, dict(lr=0.1))]


@MODES
@pytest.mark.parametrize("kind,cfg", SPARSE_OPTIMIZERS, ids=lambda x: str(x))
def test_optimizer_sparse_steps(mode, kind, cfg):
    set_mode(mode)

    def values(rng, V, D, step):
        if step < 0:
            return sprinkle(rng, rng.standard_normal((V, D)), frac=0.1)
        nnz = int(rng.integers(1, 30))
        return (rng.integers(0, V, nnz).astype(np.int64),
                sprinkle(rng, rng.standard_normal((nnz, D)), frac=0.15))
    for k, (V, D) in enumerate([(5, 3), (9, 16), (4, 17)]):
        sparse_trajectory(kind, cfg, V, D, 9 + k, steps=4, values=values)


def test_sparse_adam():
    """SparseAdam: a first step from its zero state with NaNs (any number, duplicates
    coalesced) in the gradient is bit-exact; after that, its elementwise updates (grad -
    exp_avg, ...) meet two NaNs and PyTorch picks by loop position: the same outputs NaN,
    and emb's bits the same in every tier."""
    rng = np.random.default_rng(14)
    for V, D in [(5, 3), (9, 16), (4, 17), (30, 40)]:
        p0 = rng.standard_normal((V, D)).astype(np.float32)
        grads = [(rng.integers(0, V, 3 * V).astype(np.int64),
                  sprinkle(rng, rng.standard_normal((3 * V, D)), frac=0.3)) for _ in range(4)]
        results = []
        for mode in kernel_modes():
            set_mode(mode)
            pe = p0.copy()
            pt = torch.nn.Parameter(torch.from_numpy(p0.copy()))
            topt = torch_optimizer(SPARSE_ADAM, [pt], dict(lr=0.01))
            eo = Opt(SPARSE_ADAM, lr=0.01)
            pid = eo.add(pe)
            for step, (idx, val) in enumerate(grads):
                pt.grad = torch_sparse(idx, val, V, D)
                topt.step()
                check(eo.step_sparse(pid, idx, val)[0])
                what = f"V,D {V},{D} mode {mode} step {step}"
                (exact if step == 0 else same_nans)(pe, pt.detach().numpy(), what)
            results.append(pe)
        for r in results[1:]:
            exact(r, results[0], f"V,D {V},{D}: kernel tiers")


# ---- Linear, losses -------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:grad and param do not obey")
def test_linear_through_blas():
    """Through CBLAS emb makes torch's own sgemm calls: y, grad_x and grad_weight take their
    NaNs from the same OpenBLAS kernels, any number of them. grad_bias is emb's own sum in
    torch's order: exact with at most one NaN per column, the same NaN positions with
    more."""
    set_mode(FAST_KERNEL_MODE)
    rng = np.random.default_rng(10)
    for case in range(60):
        i, o = int(rng.choice([1, 3, 17, 64])), int(rng.choice([1, 2, 5, 33]))
        m = int(rng.choice([1, 2, 7, 30]))
        lin = Linear(i, o, True, seed=case)
        w, b = lin.weight, lin.bias
        w[...] = sprinkle(rng, w, frac=0.05)
        b[...] = sprinkle(rng, b, frac=0.2)
        x = sprinkle(rng, rng.standard_normal((m, i)), frac=0.1)
        single = case % 2 == 0  # grad_y with at most one NaN per column
        gy = (one_special_per_row(rng, rng.standard_normal((o, m)), inf=False).T.copy()
              if single else sprinkle(rng, rng.standard_normal((m, o)), frac=0.1))
        tl = torch.nn.Linear(i, o)
        with torch.no_grad():
            tl.weight.copy_(torch.from_numpy(w.copy()))
            tl.bias.copy_(torch.from_numpy(b.copy()))
        xt = torch.from_numpy(x.copy()).requires_grad_()
        yt = tl(xt)
        yt.backward(torch.from_numpy(gy.copy()))
        what = f"case {case}: Linear({i}, {o}) x[{m}, {i}]"
        exact(lin.forward(x), yt.detach().numpy(), f"{what} y")
        gx, gw, gb = lin.backward(x, gy)
        exact(gx, xt.grad.numpy(), f"{what} grad_x")
        exact(gw, tl.weight.grad.numpy(), f"{what} grad_weight")
        (exact if single else same_nans)(gb, tl.bias.grad.numpy(), f"{what} grad_bias")


def loss_opts(reduction, ignore_index=-100, label_smoothing=0.0):
    o = lib.emb_loss_options_default()
    o.reduction = {"mean": 0, "sum": 1, "none": 2}[reduction]
    o.ignore_index = ignore_index
    o.label_smoothing = label_smoothing
    return o


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_log_softmax_and_cross_entropy(reduction):
    """The SLEEF tier against torch's AVX2 kernels (the reference tier matches torch's
    DEFAULT capability: test_loss.py). At most one NaN or infinity per row (and per batch for
    a reduced loss) gives torch's bits; label smoothing sums a row of log-probabilities that
    holds two different NaNs (the input's and SLEEF's), whose pick is by lane: the same NaN
    positions there."""
    set_mode(FAST_KERNEL_MODE)
    rng = np.random.default_rng(11)
    for case in range(200):
        N, Cc = int(rng.integers(1, 6)), int(rng.choice([1, 2, 7, 8, 9, 16, 17, 33]))
        x = (rng.standard_normal((N, Cc)) * 3).astype(np.float32)
        if reduction == "none":
            x = one_special_per_row(rng, x)
        elif rng.random() < 0.7:
            x[int(rng.integers(0, N))] = one_special_per_row(rng, x[:1], p=1.0)[0]
        t = rng.integers(0, Cc, N)
        ls = float(rng.choice([0.0, 0.0, 0.2]))
        what = f"case {case} [{N}, {Cc}] {reduction} ls {ls}"
        y = tensor_out(x.shape)
        check(lib.emb_log_softmax_forward(T(x), T(y)))
        xt = torch.from_numpy(x.copy()).requires_grad_()
        yt = F.log_softmax(xt, dim=-1)
        exact(y, yt.detach().numpy(), f"{what}: log_softmax")
        gy = one_special_per_row(rng, rng.standard_normal(x.shape), inf=False)
        yt.backward(torch.from_numpy(gy.copy()))
        gx = tensor_out(x.shape)
        check(lib.emb_log_softmax_backward(T(y), T(gy), T(gx)))
        exact(gx, xt.grad.numpy(), f"{what}: log_softmax backward")
        o = loss_opts(reduction, label_smoothing=ls)
        xt = torch.from_numpy(x.copy()).requires_grad_()
        want = F.cross_entropy(xt, torch.from_numpy(t), reduction=reduction, label_smoothing=ls)
        g = np.ones(tuple(want.shape), np.float32)
        want.backward(torch.from_numpy(g))
        loss = tensor_out(tuple(want.shape))
        check(lib.emb_cross_entropy_forward(T(x), T(t), ptr(o), T(loss)))
        (exact if ls == 0 else same_nans)(loss, want.detach().numpy(), f"{what}: cross_entropy")
        gx = tensor_out(x.shape)
        check(lib.emb_cross_entropy_backward(T(x), T(t), ptr(o), T(g), T(gx)))
        exact(gx, xt.grad.numpy(), f"{what}: cross_entropy backward")


@MODES
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_and_bce(mode, reduction):
    """MSE in every tier; BCE with logits in the SLEEF tier (the reference tier matches torch's
    DEFAULT capability: test_loss.py). Elementwise, NaNs in the input or the target (not both
    in one element: x - t and (1 - t) * x would meet two); reduced, at most one NaN or
    infinity in all, then many with the same NaN positions."""
    set_mode(mode)
    rng = np.random.default_rng(12)
    for case in range(150):
        shape = (int(rng.integers(1, 5)), int(rng.choice([1, 7, 8, 16, 17, 33])))
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        y = rng.random(shape).astype(np.float32)
        many = reduction != "none" and case % 3 == 0
        if reduction == "none" or many:
            x = sprinkle(rng, x, frac=0.15)
            y = np.where(np.isnan(x) | np.isinf(x), y, sprinkle(rng, y, frac=0.15))
        elif rng.random() < 0.8:
            x.reshape(-1)[int(rng.integers(0, x.size))] = (
                nan_bits(rng, 1).view(np.float32)[0] if rng.random() < 0.7 else np.inf)
        o = loss_opts(reduction)
        for name in ("mse", "bce"):
            if name == "bce" and mode == KERNELS_REF:
                continue
            xt = torch.from_numpy(x.copy()).requires_grad_()
            fn = F.mse_loss if name == "mse" else F.binary_cross_entropy_with_logits
            want = fn(xt, torch.from_numpy(y), reduction=reduction)
            g = np.ones(tuple(want.shape), np.float32)
            want.backward(torch.from_numpy(g))
            loss, gx = tensor_out(tuple(want.shape)), tensor_out(shape)
            if name == "mse":
                check(lib.emb_mse_loss_forward(T(x), T(y), ptr(o), T(loss)))
                check(lib.emb_mse_loss_backward(T(x), T(y), ptr(o), T(g), T(gx)))
            else:
                check(lib.emb_bce_with_logits_forward(T(x), T(y), None, ptr(o), T(loss)))
                check(lib.emb_bce_with_logits_backward(T(x), T(y), None, ptr(o), T(g), T(gx)))
            what = f"case {case} {shape} {name} {reduction}"
            (same_nans if many else exact)(loss, want.detach().numpy(), f"{what}: loss")
            exact(gx, xt.grad.numpy(), f"{what}: grad")
