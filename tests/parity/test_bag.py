"""Parity of nn.EmbeddingBag / F.embedding_bag with PyTorch 1.13, against live torch.

Random cases (well over 5,000 in all) across modes sum/mean/max, 1-D input with offsets
(empty bags, include_last_offset) and 2-D input, per_sample_weights, padding_idx (positive
and negative), max_norm, int32/int64 inputs and offsets mixed. Checked bit for bit: the
forward output, max mode's arg-max indices, the weight after max_norm, the dense weight
gradient (sum/mean in the unstable-sort order, max routed to the winning rows), the sparse
gradient's indices and values, and the per_sample_weights gradient: a dot product torch hands to
its BLAS's sdot, which emb calls too (the same OpenBLAS, hence the same core type, in one
process); with the reference kernels (EMB_KERNELS=ref) emb sums in order instead, and the
gradient is checked against the error bound of docs/semantics.md §14. Results at 1, 2 and 3
emb threads are identical.

Where PyTorch has a bug (docs/differences.md: scale_grad_by_freq dividing by another
index's count, include_last_offset with a short last offset, NaN in max, 2-D input with
include_last_offset dropping the last bag), the test checks emb's correct behaviour against
a straightforward reference instead of torch: torch on the truncated input, torch with
include_last_offset=False, numpy's argmax (which propagates the first NaN), and torch's own
weighted bag with per-sample weights 1/count (bit-exact for sum) or a float64 sum.
"""
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import emb
from parity_util import FAST_KERNEL_MODE, RUN_KERNEL_MODE, assert_close

torch.set_num_threads(1)


def bag_kw(mode="mean", padding_idx=None, max_norm=None, norm_type=2.0, sgbf=False,
           sparse=False, include_last_offset=False):
    """The package's EmbeddingBag arguments (torch's names) of the tests' short ones."""
    return dict(mode=mode, padding_idx=padding_idx, max_norm=max_norm, norm_type=norm_type,
                scale_grad_by_freq=sgbf, sparse=sparse, include_last_offset=include_last_offset)


class Bag:
    """An emb.EmbeddingBag over a copy of a known weight (from_pretrained, freeze=False)."""

    def __init__(self, w, **kw):
        self.mode = kw.get("mode", "mean")
        self.b = emb.EmbeddingBag.from_pretrained(w.copy(), freeze=False, **bag_kw(**kw))
        self.V, self.D = w.shape

    def weight(self):
        return np.array(self.b, copy=True)

    def forward(self, inp, off, psw):
        """(output, max_indices or None)."""
        return self.b.forward(inp, off, psw, return_max_indices=True)

    def backward(self, inp, off, psw, mi, g):
        """The gradient accumulated into zeros; also checks that the overwriting form gives
        the same bits over a buffer of NaNs (at an offset that alternates between calls, so
        both the streaming and the plain stores are used where the sizes allow)."""
        gw = np.zeros((self.V, self.D), np.float32)
        assert self.b.backward(inp, g, off, psw, mi, grad=gw) is gw
        self.skew = 1 - getattr(self, "skew", 1)
        base = np.full(self.V * self.D + self.skew, np.nan, np.float32)
        fresh = base[self.skew:].reshape(self.V, self.D)
        assert self.b.backward(inp, g, off, psw, mi, grad=fresh, overwrite=True) is fresh
        assert_close(fresh, gw, exact=True, what="overwriting backward vs zeros + backward")
        assert_close(self.b.backward(inp, g, off, psw, mi), gw, exact=True,
                     what="backward into a new array vs zeros + backward")
        return gw

    def backward_sparse(self, inp, off, psw, g):
        """(indices int64 [nnz], values float32 [nnz, D])."""
        return self.b.backward_sparse(inp, g, off, psw)

    def backward_psw(self, inp, off, g):
        return self.b.backward_per_sample_weights(inp, g, off)


def functional(w, inp, off, psw, **kw):
    """emb.embedding_bag (emb_bag_lookup) on w itself (max_norm renormalises it in place)."""
    return emb.embedding_bag(w, inp, off, psw, **kw)


def torch_bag(w, inp, off, psw, mode, padding_idx=None, max_norm=None, sgbf=False,
              sparse=False, include_last_offset=False, grad=None, want_psw_grad=False):
    """torch's forward (output, max_indices, renormed weight) and, given grad, the weight
    gradient (dense array, or (indices, values) when sparse) and the psw gradient."""
    W = torch.from_numpy(w.copy()).requires_grad_(grad is not None)
    ti = torch.from_numpy(inp)
    to = None if off is None else torch.from_numpy(off)
    tp = None
    if psw is not None:
        tp = torch.from_numpy(psw.copy()).requires_grad_(want_psw_grad)
    out = F.embedding_bag(ti, W, to, max_norm=max_norm, scale_grad_by_freq=sgbf, mode=mode,
                          sparse=sparse, per_sample_weights=tp,
                          include_last_offset=include_last_offset, padding_idx=padding_idx)
    mi = None
    if mode == "max":
        # the ATen op returns the arg-max indices (on the renormalised weight: run it on the
        # weight F.embedding_bag left behind, without max_norm, for the same result)
        i2 = ti.reshape(-1)
        o2 = (to if to is not None else
              torch.arange(0, inp.size, max(inp.shape[1], 1)) if inp.ndim == 2 else None)
        if to is not None and o2.dtype != i2.dtype:
            dt = torch.int64
            i2, o2 = i2.to(dt), o2.to(dt)
        if inp.ndim == 2:
            o2 = o2.to(i2.dtype)
        pad = -1 if padding_idx is None else (padding_idx % w.shape[0])
        res = torch.ops.aten._embedding_bag_forward_only(W.detach(), i2, o2, False, 2, False,
                                                         None, include_last_offset, pad)
        mi = res[3].numpy().astype(np.int64)
    gw = gp = None
    if grad is not None:
        out.backward(torch.from_numpy(grad))
        if sparse:
            gs = W.grad
            gw = (gs._indices()[0].numpy().astype(np.int64), gs._values().numpy())
        else:
            gw = W.grad.numpy()
        if want_psw_grad:
            gp = tp.grad.numpy()
    return out.detach().numpy(), mi, W.detach().numpy(), gw, gp


# ---- random cases ----------------------------------------------------------------------

def random_case(rng, allow_bugs=False):
    V = int(rng.integers(1, 40))
    D = int(rng.integers(1, 24))
    if rng.random() < 0.25:  # widths the pooling kernels take in register blocks of 16/64/128
        D = int(rng.choice([16, 32, 48, 64, 72, 80, 128, 144, 192, 256]))
    mode = ["sum", "mean", "max"][int(rng.integers(0, 3))]
    w = rng.standard_normal((V, D)).astype(np.float32)
    if rng.random() < 0.2:  # many ties for max
        w = np.round(w).astype(np.float32)
    idt = [np.int64, np.int32][int(rng.integers(0, 2))]
    odt = [np.int64, np.int32][int(rng.integers(0, 2))]
    layout = rng.random()
    off = None
    ilo = False
    if layout < 0.25:
        B = int(rng.integers(0, 6))
        N = int(rng.integers(1, 6))
        inp = rng.integers(0, V, (B, N)).astype(idt)
        n = B * N
    else:
        B = int(rng.integers(0, 9))
        sizes = rng.integers(0, 7, B)
        sizes[rng.random(B) < 0.25] = 0  # empty bags
        n = int(sizes.sum())
        inp = rng.integers(0, V, n).astype(idt)
        if rng.random() < 0.2 and V > 2:  # heavy duplicates (unstable-sort order matters)
            inp = rng.integers(0, 3, n).astype(idt)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if B else np.zeros(0)
        ilo = bool(rng.random() < 0.3)
        if ilo:
            starts = np.concatenate([starts, [n]])
        off = starts.astype(odt)
    pad = None
    if rng.random() < 0.35:
        pad = int(rng.integers(-V, V))
        if n and rng.random() < 0.7:  # make sure padding occurs
            flat = inp.reshape(-1)
            flat[rng.random(n) < 0.3] = pad % V
    psw = None
    if mode == "sum" and rng.random() < 0.5:
        psw = rng.standard_normal(inp.shape).astype(np.float32)
    max_norm = None
    if rng.random() < 0.15:
        max_norm = float(rng.uniform(0.5, 3.0))
    sgbf = mode != "max" and rng.random() < 0.2
    return dict(w=w, inp=inp, off=off, psw=psw, mode=mode, pad=pad, max_norm=max_norm,
                sgbf=sgbf, ilo=ilo)


def sgbf_reference(c, g):
    """The correct scale_grad_by_freq gradient: each row's count is its own index's count.
    For sum without weights, torch's weighted sum with psw = (float)(1/count[idx]) performs
    exactly emb's arithmetic (bit-exact); otherwise a float64 sum (tolerance)."""
    inp, off, w = c["inp"], c["off"], c["w"]
    flat = inp.reshape(-1).astype(np.int64)
    counts = np.bincount(flat, minlength=w.shape[0])
    if c["mode"] == "sum" and c["psw"] is None:
        psw = (1.0 / counts[flat]).astype(np.float32).reshape(inp.shape)
        _, _, _, gw, _ = torch_bag(w, inp, off, psw, "sum", padding_idx=c["pad"],
                                   include_last_offset=c["ilo"], grad=g)
        return gw, True
    V, D = w.shape
    ref = np.zeros((V, D), np.float64)
    B = g.shape[0]
    if inp.ndim == 2:
        starts = [b * inp.shape[1] for b in range(B + 1)]
    else:
        starts = list(off[:B].astype(np.int64)) + [len(flat) if not c["ilo"] else int(off[-1])]
    pad = None if c["pad"] is None else c["pad"] % V
    for b in range(B):
        pos = [p for p in range(starts[b], starts[b + 1]) if flat[p] != pad]
        for p in pos:
            s = 1.0 if c["psw"] is None else float(c["psw"].reshape(-1)[p])
            s /= counts[flat[p]]
            if c["mode"] == "mean":
                s /= len(pos)
            ref[flat[p]] += g[b].astype(np.float64) * s
    return ref.astype(np.float32), False


def run_case(c, rng, threads=None):
    w, inp, off, psw, mode = c["w"], c["inp"], c["off"], c["psw"], c["mode"]
    kw = dict(mode=mode, padding_idx=c["pad"], max_norm=c["max_norm"], sgbf=c["sgbf"],
              include_last_offset=c["ilo"])
    bag = Bag(w, **kw)
    out, mi = bag.forward(inp, off, psw)
    g = rng.standard_normal(out.shape).astype(np.float32)
    t_out, t_mi, t_w, t_gw, t_gp = torch_bag(w, inp, off, psw, mode, padding_idx=c["pad"],
                                             max_norm=c["max_norm"], include_last_offset=c["ilo"],
                                             grad=g, want_psw_grad=psw is not None)
    assert_close(out, t_out, exact=True, what="forward")
    assert_close(bag.weight(), t_w, exact=True, what="weight after max_norm")
    if mode == "max":
        assert np.array_equal(mi, t_mi), f"max_indices {mi} != {t_mi}"
    gw = bag.backward(inp, off, psw, mi, g)
    if c["sgbf"]:
        ref, exact = sgbf_reference(c, g)
        assert_close(gw, ref, exact=exact, rtol=1e-5, atol=1e-6, what="sgbf gradient")
    else:
        assert_close(gw, t_gw, exact=True, what="dense gradient")
    if psw is not None:
        gp = bag.backward_psw(inp, off, g)
        check_psw_grad(gp, t_gp, w, inp, off, c["ilo"], c["pad"], g, RUN_KERNEL_MODE)
    # functional form on a fresh copy of the weight
    w2 = w.copy()
    fo, fmi = functional(w2, inp, off, psw, mode=mode, padding_idx=c["pad"],
                         max_norm=c["max_norm"], include_last_offset=c["ilo"])
    assert_close(fo, t_out, exact=True, what="functional forward")
    assert_close(w2, t_w, exact=True, what="functional weight after max_norm")
    if mode == "max":
        assert np.array_equal(fmi, t_mi)
    # sparse gradient
    if mode != "max" and not c["sgbf"]:
        sbag = Bag(w, mode=mode, padding_idx=c["pad"], include_last_offset=c["ilo"], sparse=True)
        sbag.forward(inp, off, psw)
        si, sv = sbag.backward_sparse(inp, off, psw, g)
        _, _, _, (ti, tv), _ = torch_bag(w, inp, off, psw, mode, padding_idx=c["pad"],
                                         sparse=True, include_last_offset=c["ilo"], grad=g)
        assert np.array_equal(si, ti), f"sparse indices {si} != {ti}"
        assert_close(sv, tv, exact=True, what="sparse values")


def psw_abs_sums(w, inp, off, ilo, pad, g):
    """Per position, sum over d of |grad_output[bag][d] * w[idx][d]| in float64 (0 for
    padding and positions in no bag), and the dimension."""
    flat = inp.reshape(-1).astype(np.int64)
    n, D = len(flat), w.shape[1]
    if inp.ndim == 2:
        o2b = np.arange(n) // max(inp.shape[1], 1)
    else:
        B = len(off) - (1 if ilo else 0)
        starts = off.astype(np.int64)
        o2b = np.searchsorted(starts[:B], np.arange(n), side="right") - 1
        if ilo and B >= 0:
            o2b[np.arange(n) >= (starts[B] if B < len(starts) else n)] = -1
    s = np.zeros(n)
    p_pad = None if pad is None else pad % w.shape[0]
    for p in range(n):
        if o2b[p] < 0 or flat[p] == p_pad:
            continue
        s[p] = np.abs(g[o2b[p]].astype(np.float64) * w[flat[p]].astype(np.float64)).sum()
    return s, D


def check_psw_grad(got, want, w, inp, off, ilo, pad, g, mode):
    """The per_sample_weights gradient: torch's bits through CBLAS (emb makes torch's sdot
    call); with the reference kernels, a sequential float sum whose distance from any other
    order's result (torch's) is at most 2 * gamma_D * sum|g * w|, gamma_D = D u / (1 - D u),
    u = 2^-24 (each result is within gamma_D * sum|g * w| of the exact dot product;
    docs/semantics.md §14), plus 2^-140 per term for products that underflow."""
    if mode != "ref":
        assert_close(got, want, exact=True, what="per_sample_weights gradient (sdot)")
        return
    s, D = psw_abs_sums(w, inp, off, ilo, pad, g)
    u = 2.0 ** -24
    gamma = D * u / (1 - D * u)
    err = np.abs(got.astype(np.float64).reshape(-1) - want.astype(np.float64).reshape(-1))
    bound = 2 * gamma * s + D * 2.0 ** -140
    assert np.all(err <= bound), (f"per_sample_weights gradient: error {err.max():.3g} above "
                                  f"the bound at {int(np.argmax(err - bound))}")


@pytest.mark.parametrize("mode", [FAST_KERNEL_MODE, "ref"], ids=["sdot", "ref"])
def test_per_sample_weights_gradient_cancelling_rows(mode):
    """Rows whose dot product cancels (e.g. [1e8, 1, -1e8, 1, 0, ...] against ones: exact 2,
    torch's lane order 0, an in-order sum 1): through CBLAS emb's bits are torch's; with the
    reference kernels the error stays within the bound, which is relative to sum|g * w|, not
    to the result. Also checks the bound against the exact value."""
    rng = np.random.default_rng(77)
    emb.set_kernel_mode(mode)
    try:
        for case in range(300):
            V = int(rng.integers(3, 25))
            D = int(rng.choice([1, 3, 4, 8, 16, 31, 32, 33, 63, 64, 100, 128, 300]))
            w = rng.standard_normal((V, D)).astype(np.float32)
            if D >= 4:  # cancelling rows
                w[0, :4] = [1e8, 1, -1e8, 1]
                w[1, :] = rng.choice([-3e7, 3e7, 1.0, -1.0, 0.5], size=D).astype(np.float32)
            n = int(rng.integers(1, 24))
            inp = rng.integers(0, V, n).astype(np.int64)
            inp[0], inp[-1] = 0, 1
            off = np.sort(rng.integers(0, n + 1, int(rng.integers(1, 4)))).astype(np.int64)
            off[0] = 0
            psw = rng.standard_normal(n).astype(np.float32)
            pad = 2 if case % 4 == 0 else None
            bag = Bag(w, mode="sum", padding_idx=pad)
            out, _ = bag.forward(inp, off, psw)
            g = (np.ones_like(out) if case % 2 else
                 rng.standard_normal(out.shape).astype(np.float32))
            gp = bag.backward_psw(inp, off, g)
            *_, t_gp = torch_bag(w, inp, off, psw, "sum", padding_idx=pad, grad=g,
                                 want_psw_grad=True)
            check_psw_grad(gp, t_gp, w, inp, off, False, pad, g, mode)
            if mode == "ref":  # within gamma_D * sum|g w| of the float64 value
                s, _ = psw_abs_sums(w, inp, off, False, pad, g)
                flat = inp.astype(np.int64)
                o2b = np.searchsorted(off, np.arange(n), side="right") - 1
                exact = np.array([0.0 if flat[p] == (None if pad is None else pad) else
                                  float(np.dot(g[o2b[p]].astype(np.float64),
                                               w[flat[p]].astype(np.float64)))
                                  for p in range(n)])
                gamma = D * 2.0 ** -24 / (1 - D * 2.0 ** -24)
                assert np.all(np.abs(gp - exact) <= gamma * s * (1 + 1e-9) + 1e-30)
    finally:
        emb.set_kernel_mode(RUN_KERNEL_MODE)


N_RANDOM = 5000


@pytest.mark.parametrize("chunk", range(10))
def test_random_cases_against_torch(chunk):
    rng = np.random.default_rng(1000 + chunk)
    for i in range(N_RANDOM // 10):
        c = random_case(rng)
        try:
            run_case(c, rng)
        except AssertionError as e:
            raise AssertionError(f"case {chunk}/{i}: mode {c['mode']} V,D {c['w'].shape} "
                                 f"inp {c['inp'].tolist()} off {c['off']} pad {c['pad']} "
                                 f"psw {c['psw'] is not None} max_norm {c['max_norm']} "
                                 f"sgbf {c['sgbf']} ilo {c['ilo']}\n{e}") from e


def test_spec_example():
    """A small table of bags through the module (values produced by torch here)."""
    w = np.arange(12, dtype=np.float32).reshape(6, 2)
    inp = np.array([1, 2, 4, 5, 4, 3])
    off = np.array([0, 2, 2, 4])
    for mode in ("sum", "mean", "max"):
        for pad in (None, 4):
            out, _ = Bag(w, mode=mode, padding_idx=pad).forward(inp, off, None)
            t = F.embedding_bag(torch.from_numpy(inp), torch.from_numpy(w),
                                torch.from_numpy(off), mode=mode, padding_idx=pad)
            assert_close(out, t.numpy(), exact=True, what=f"{mode} pad {pad}")


def test_large_bags_unstable_sort_order():
    """Rows with many contributions among > 16 positions: the summation order is torch's
    unstable sort order, which differs from input order."""
    rng = np.random.default_rng(5)
    for mode in ("sum", "mean"):
        V, D = 7, 33
        w = rng.standard_normal((V, D)).astype(np.float32)
        n = 3000
        inp = rng.integers(0, V, n)
        off = np.sort(rng.integers(0, n, 200))
        off[0] = 0
        psw = rng.standard_normal(n).astype(np.float32) if mode == "sum" else None
        bag = Bag(w, mode=mode)
        out, _ = bag.forward(inp, off, psw)
        g = rng.standard_normal(out.shape).astype(np.float32)
        t_out, _, _, t_gw, _ = torch_bag(w, inp, off, psw, mode, grad=g)
        assert_close(out, t_out, exact=True, what="forward")
        assert_close(bag.backward(inp, off, psw, None, g), t_gw, exact=True, what="gradient")


def test_accumulates_into_existing_gradient():
    rng = np.random.default_rng(6)
    w = rng.standard_normal((10, 5)).astype(np.float32)
    inp = rng.integers(0, 10, 30)
    off = np.array([0, 7, 7, 19])
    for mode in ("sum", "mean", "max"):
        bag = Bag(w, mode=mode)
        W = torch.from_numpy(w.copy()).requires_grad_()
        gw = np.zeros_like(w)
        for _ in range(3):
            out, mi = bag.forward(inp, off, None)
            g = rng.standard_normal(out.shape).astype(np.float32)
            assert bag.b.backward(inp, g, off, None, mi, grad=gw) is gw
            F.embedding_bag(torch.from_numpy(inp), W, torch.from_numpy(off),
                            mode=mode).backward(torch.from_numpy(g))
        assert_close(gw, W.grad.numpy(), exact=True, what=f"accumulated {mode}")


@pytest.mark.parametrize("pad", [3, None])
def test_threads_identical(pad):
    """1, 2 and 3 threads give the same bits, on cases large enough to be split (without
    padding the sparse gradient's gather is split over bags too)."""
    rng = np.random.default_rng(7)
    try:
        for mode in ("sum", "mean", "max"):
            V, D = 500, 64
            w = rng.standard_normal((V, D)).astype(np.float32)
            n = 20000
            inp = rng.integers(0, V, n)
            off = np.arange(0, n, 20)
            psw = rng.standard_normal(n).astype(np.float32) if mode == "sum" else None
            res = []
            for nt in (1, 2, 3):
                emb.set_num_threads(nt)
                bag = Bag(w, mode=mode, padding_idx=pad)
                out, mi = bag.forward(inp, off, psw)
                g = np.sin(np.arange(out.size, dtype=np.float32)).reshape(out.shape)
                gw = bag.backward(inp, off, psw, mi, g)
                extra = []
                if mode != "max":
                    sb = Bag(w, mode=mode, padding_idx=pad, sparse=True)
                    extra = list(sb.backward_sparse(inp, off, psw, g))
                if psw is not None:
                    extra.append(bag.backward_psw(inp, off, g))
                res.append([out, gw] + ([mi] if mi is not None else []) + extra)
            for other in res[1:]:
                for a, b in zip(res[0], other):
                    assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
            # and equal to torch
            t_out, _, _, t_gw, _ = torch_bag(w, inp, off, psw, mode, padding_idx=pad, grad=g)
            assert_close(res[0][0], t_out, exact=True)
            assert_close(res[0][1], t_gw, exact=True)
    finally:
        emb.set_num_threads(0)


# ---- PyTorch bugs: emb's correct behaviour against a straightforward reference ----------

def test_scale_grad_by_freq_uses_the_rows_own_count():
    """Example: input [1,1,1,2,3,3] in bags [0,3) and [3,6), sum, unit gradient.
    torch gives row 2 1/3 and row 3 2/3 (another index's count); the right answer is
    1.0 for each of rows 1, 2, 3."""
    w = np.random.default_rng(8).standard_normal((5, 3)).astype(np.float32)
    inp = np.array([1, 1, 1, 2, 3, 3])
    off = np.array([0, 3])
    bag = Bag(w, mode="sum", sgbf=True)
    out, _ = bag.forward(inp, off, None)
    gw = bag.backward(inp, off, None, None, np.ones_like(out))
    ref, exact = sgbf_reference(dict(inp=inp, off=off, w=w, mode="sum", psw=None, pad=None,
                                     ilo=False), np.ones_like(out))
    assert exact
    assert_close(gw, ref, exact=True)
    assert_close(gw[1:4], np.ones((3, 3), np.float32), rtol=0, atol=1e-6)
    # torch really has the bug (so that this test keeps meaning something)
    _, _, _, t_gw, _ = torch_bag(w, inp, off, None, "sum", sgbf=True, grad=np.ones_like(out))
    assert not np.allclose(t_gw, ref)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_include_last_offset_short_last_offset(mode):
    """offsets[-1] < N with include_last_offset: emb ends the last bag at offsets[-1] in
    every mode and ignores the rest; reference: torch on the truncated input."""
    rng = np.random.default_rng(9)
    for _ in range(200):
        V, D = int(rng.integers(2, 20)), int(rng.integers(1, 9))
        w = rng.standard_normal((V, D)).astype(np.float32)
        n = int(rng.integers(2, 30))
        inp = rng.integers(0, V, n)
        cut = int(rng.integers(0, n))
        off = np.concatenate([np.sort(rng.integers(0, cut + 1, int(rng.integers(0, 5)))), [cut]])
        off[0] = 0
        cut = int(off[-1])  # (off == [0] after the line above: no bag at all)
        psw = rng.standard_normal(n).astype(np.float32) if mode == "sum" else None
        bag = Bag(w, mode=mode, include_last_offset=True)
        out, mi = bag.forward(inp, off, psw)
        g = rng.standard_normal(out.shape).astype(np.float32)
        t_out, t_mi, _, t_gw, t_gp = torch_bag(w, inp[:cut], off, None if psw is None else
                                               psw[:cut], mode, include_last_offset=True,
                                               grad=g, want_psw_grad=psw is not None)
        assert_close(out, t_out, exact=True)
        if mode == "max":
            assert np.array_equal(mi, t_mi)
        assert_close(bag.backward(inp, off, psw, mi, g), t_gw, exact=True)
        if psw is not None:
            gp = bag.backward_psw(inp, off, g)
            assert_close(gp[:cut], t_gp, rtol=1e-5, atol=1e-5)
            assert np.all(gp[cut:] == 0)


def test_max_nan_propagates():
    """A NaN anywhere in a bag's column gives NaN and the first NaN's index (torch lets only
    a leading NaN through); reference: numpy's argmax, which returns the first NaN."""
    rng = np.random.default_rng(10)
    for _ in range(300):
        V, D = int(rng.integers(2, 12)), int(rng.integers(1, 8))
        w = rng.standard_normal((V, D)).astype(np.float32)
        w[rng.random((V, D)) < 0.2] = np.nan
        n = int(rng.integers(0, 20))
        inp = rng.integers(0, V, n)
        off = np.concatenate([[0], np.sort(rng.integers(0, n + 1, int(rng.integers(0, 5))))])
        bag = Bag(w, mode="max")
        out, mi = bag.forward(inp, off, None)
        ends = list(off[1:]) + [n]
        for b in range(len(off)):
            rows = inp[off[b]:ends[b]]
            if len(rows) == 0:
                assert np.all(out[b] == 0) and np.all(mi[b] == 0)
                continue
            vals = w[rows]
            am = np.argmax(vals, axis=0)
            want = vals[am, np.arange(D)]
            assert_close(out[b], want, exact=True)
            assert np.array_equal(mi[b], rows[am])
        g = rng.standard_normal(out.shape).astype(np.float32)
        gw = bag.backward(inp, off, None, mi, g)
        ref = np.zeros_like(w)
        for b in range(len(off)):
            if ends[b] > off[b]:
                for d in range(D):
                    ref[mi[b, d], d] += g[b, d]
        assert_close(gw, ref, exact=True)


def test_2d_input_with_include_last_offset_keeps_every_bag():
    """torch drops the last row of a 2-D input when include_last_offset is set; emb
    treats a 2-D input as B bags regardless. Reference: torch without include_last_offset."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((9, 4)).astype(np.float32)
    inp = rng.integers(0, 9, (5, 3))
    for mode in ("sum", "mean", "max"):
        out, _ = Bag(w, mode=mode, include_last_offset=True).forward(inp, None, None)
        t = F.embedding_bag(torch.from_numpy(inp), torch.from_numpy(w), mode=mode)
        assert out.shape == (5, 4)
        assert_close(out, t.numpy(), exact=True)


def test_2d_input_with_empty_rows():
    """[B, 0] input: B empty bags, zeros (torch fails with 'step must be nonzero')."""
    w = np.ones((4, 3), np.float32)
    for mode in ("sum", "mean", "max"):
        out, _ = Bag(w, mode=mode).forward(np.zeros((3, 0), np.int64), None, None)
        assert out.shape == (3, 3) and np.all(out == 0)


# ---- construction --------------------------------------------------------------------

def test_create_draws_like_torch():
    for V, D, pad in ((10, 4, None), (37, 16, 3), (5, 33, -1), (1000, 3, 999)):
        torch.manual_seed(1234)
        m = torch.nn.EmbeddingBag(V, D, padding_idx=pad)
        emb.manual_seed(1234)
        b = emb.EmbeddingBag(V, D, padding_idx=pad)
        assert_close(np.asarray(b), m.weight.detach().numpy(), exact=True)
        # the generators are left in the same state: the next numbers agree
        nxt = np.zeros(20, np.float32)
        emb.default_generator().randn_(nxt)
        assert_close(nxt, torch.randn(20).numpy(), exact=True, what="next draws")


@pytest.mark.parametrize("kind", ["sgd", "sgd_momentum", "adagrad", "sparse_adam"])
@pytest.mark.parametrize("mode", ["sum", "sum_psw", "mean"])
def test_fused_bag_step_against_torch(kind, mode):
    """Optimizer.step_fused_bag over several steps equals torch's EmbeddingBag(sparse=True)
    backward + optimizer.step(), bit for bit (padding included)."""
    rng = np.random.default_rng(12)
    V, D = 30, 9
    w = rng.standard_normal((V, D)).astype(np.float32)
    m = "sum" if mode.startswith("sum") else "mean"
    bag = Bag(w, mode=m, padding_idx=2, sparse=True)
    opt = emb.Optimizer("sgd" if kind == "sgd_momentum" else kind, lr=0.05,
                        momentum=0.9 if kind == "sgd_momentum" else None)
    pid = opt.add_param(bag.b)
    W = torch.nn.Parameter(torch.from_numpy(w.copy()))
    topt = {"sgd": lambda: torch.optim.SGD([W], lr=0.05),
            "sgd_momentum": lambda: torch.optim.SGD([W], lr=0.05, momentum=0.9),
            "adagrad": lambda: torch.optim.Adagrad([W], lr=0.05),
            "sparse_adam": lambda: torch.optim.SparseAdam([W], lr=0.05)}[kind]()
    for step in range(5):
        n = int(rng.integers(5, 60))
        inp = rng.integers(0, 8, n)
        off = np.concatenate([[0], np.sort(rng.integers(0, n + 1, 6))])
        psw = rng.standard_normal(n).astype(np.float32) if mode == "sum_psw" else None
        out, _ = bag.forward(inp, off, psw)
        g = rng.standard_normal(out.shape).astype(np.float32)
        opt.step_fused_bag(pid, bag.b, inp, g, off, psw)
        topt.zero_grad()
        F.embedding_bag(torch.from_numpy(inp), W, torch.from_numpy(off), mode=m, sparse=True,
                        padding_idx=2,
                        per_sample_weights=None if psw is None else torch.from_numpy(psw)
                        ).backward(torch.from_numpy(g))
        topt.step()
        assert_close(bag.weight(), W.detach().numpy(), exact=True, what=f"step {step}")


# ---- refusals: every one emb makes, against torch's own -------------------------------

def _torch_error(fn):
    """torch's exception message, or None when torch accepts the call."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
    except Exception as e:  # noqa: BLE001 (any of torch's exception types)
        return str(e)
    return None


def _emb_bag_call(w, inp, off, psw=None, backward=None, **kw):
    """emb's refusal for the same call, through an emb.EmbeddingBag over w (its _weight, so
    that the C library checks w itself) or, with functional=True, emb.embedding_bag;
    backward: None, "sparse" or "psw". Returns (emb status, message): (0, "") when emb
    accepts the call. Only emb.Error counts: a check the package made itself in other
    words would fail the comparison."""
    functional_form = kw.pop("functional", False)
    try:
        if functional_form:
            emb.embedding_bag(w, inp, off, psw, **kw)
            return 0, ""
        bag = emb.EmbeddingBag(w.shape[0] if w.ndim else 1, w.shape[-1] if w.ndim else 1,
                               _weight=w.copy(), _freeze=False, **bag_kw(**kw))
        if backward is None:
            bag.forward(inp, off, psw)
            return 0, ""
        B = inp.shape[0] if inp.ndim == 2 else len(off)
        g = np.ones((B, w.shape[1]), np.float32)
        if backward == "psw":
            bag.backward_per_sample_weights(inp, g, off)
        else:
            bag.backward_sparse(inp, g, off, psw)
    except emb.Error as e:
        return e.status, str(e)
    return 0, ""


def _torch_sparse_sgbf_backward(w, inp, off):
    W = torch.from_numpy(w.copy()).requires_grad_()
    F.embedding_bag(torch.from_numpy(inp), W, torch.from_numpy(off), sparse=True,
                    scale_grad_by_freq=True).sum().backward()


_W = np.arange(30, dtype=np.float32).reshape(10, 3)
_I = np.array([1, 2, 4, 5, 4, 3], np.int64)
_O = np.array([0, 2, 4], np.int64)
_t = torch.from_numpy
# (name, torch's call, emb's call, the phrase emb's message must hold, how torch 1.13 reacts,
# what docs/differences.md must quote about it). How torch reacts: "torch" -- it refuses and
# its message holds the phrase too (checked); "wording" -- it refuses in other words, and
# emb's wording is a documented difference; "later" -- 1.13 accepts the call, later PyTorch
# refuses it with this phrase, which its tests match; "accepts" -- torch accepts it, emb's
# stricter check is documented.
REFUSALS = [
    ("weight 3-D", lambda: F.embedding_bag(_t(_I), torch.zeros(10, 3, 2), _t(_O)),
     lambda: _emb_bag_call(np.zeros((10, 3, 2), np.float32), _I, _O, functional=True),
     "weight has to be a 2D Tensor", "later", "weight has to be a 2D Tensor"),
    ("weight 1-D", lambda: F.embedding_bag(_t(_I), torch.zeros(10), _t(_O)),
     lambda: _emb_bag_call(np.zeros(10, np.float32), _I, _O, functional=True),
     "weight has to be a 2D Tensor", "wording", "weight has to be a 2D Tensor"),
    ("from_pretrained 3-D", lambda: torch.nn.EmbeddingBag.from_pretrained(torch.zeros(10, 3, 2)),
     lambda: _emb_bag_call(np.zeros((10, 3, 2), np.float32), _I, _O),
     "Embeddings parameter is expected to be 2-dimensional", "torch", None),
    ("weight int64", lambda: F.embedding_bag(_t(_I), torch.zeros(10, 3, dtype=torch.long),
                                             _t(_O)),
     lambda: _emb_bag_call(np.zeros((10, 3), np.int64), _I, _O, functional=True),
     "to have one of the following scalar types", "torch", None),
    ("per_sample_weights float64",
     lambda: F.embedding_bag(_t(_I), _t(_W), _t(_O), mode="sum",
                             per_sample_weights=torch.ones(6, dtype=torch.float64)),
     lambda: _emb_bag_call(_W, _I, _O, np.ones(6, np.float64), mode="sum"),
     "have the same type as", "torch", None),
    ("per_sample_weights shape",
     lambda: F.embedding_bag(_t(_I), _t(_W), _t(_O), mode="sum",
                             per_sample_weights=torch.ones(5)),
     lambda: _emb_bag_call(_W, _I, _O, np.ones(5, np.float32), mode="sum"),
     "same shape as the input", "torch", None),
    ("per_sample_weights shape, 2-D input",
     lambda: F.embedding_bag(_t(_I).view(2, 3), _t(_W), None, mode="sum",
                             per_sample_weights=torch.ones(6)),
     lambda: _emb_bag_call(_W, _I.reshape(2, 3), None, np.ones(6, np.float32), mode="sum"),
     "same shape as the input", "torch", None),
    ("per_sample_weights with mean",
     lambda: F.embedding_bag(_t(_I), _t(_W), _t(_O), mode="mean",
                             per_sample_weights=torch.ones(6)),
     lambda: _emb_bag_call(_W, _I, _O, np.ones(6, np.float32), mode="mean"),
     "only supported for mode='sum'", "torch", None),
    ("per_sample_weights with max",
     lambda: F.embedding_bag(_t(_I), _t(_W), _t(_O), mode="max",
                             per_sample_weights=torch.ones(6)),
     lambda: _emb_bag_call(_W, _I, _O, np.ones(6, np.float32), mode="max"),
     "only supported for mode='sum'", "torch", None),
    ("per_sample_weights gradient with mean",
     lambda: torch.ops.aten._embedding_bag_per_sample_weights_backward(
         torch.ones(3, 3), _t(_W), _t(_I), _t(_O), torch.zeros(6, dtype=torch.long), 1, -1),
     lambda: _emb_bag_call(_W, _I, _O, backward="psw", mode="mean"),
     "only supported for mode='sum'", "torch", None),
    ("input 3-D", lambda: F.embedding_bag(torch.zeros(2, 2, 2, dtype=torch.long), _t(_W)),
     lambda: _emb_bag_call(_W, np.zeros((2, 2, 2), np.int64), None),
     "input has to be 1D or 2D Tensor", "torch", None),
    ("input 0-D", lambda: F.embedding_bag(torch.tensor(1), _t(_W), _t(_O)),
     lambda: _emb_bag_call(_W, np.array(1, np.int64), _O),
     "input has to be 1D or 2D Tensor", "torch", None),
    ("input float", lambda: F.embedding_bag(_t(_I).float(), _t(_W), _t(_O)),
     lambda: _emb_bag_call(_W, _I.astype(np.float32), _O),
     "to have one of the following scalar types: Long, Int", "torch", None),
    ("offsets float", lambda: F.embedding_bag(_t(_I), _t(_W), _t(_O).float()),
     lambda: _emb_bag_call(_W, _I, _O.astype(np.float32)),
     "to have one of the following scalar types: Long, Int", "torch", None),
    ("2-D input with offsets", lambda: F.embedding_bag(_t(_I).view(2, 3), _t(_W), _t(_O)),
     lambda: _emb_bag_call(_W, _I.reshape(2, 3), _O),
     "if input is 2D, then offsets has to be", "torch", None),
    ("1-D input without offsets", lambda: F.embedding_bag(_t(_I), _t(_W)),
     lambda: _emb_bag_call(_W, _I, None),
     "offsets has to be a 1D Tensor", "torch", None),
    ("offsets 2-D", lambda: F.embedding_bag(_t(_I), _t(_W), _t(_O).view(3, 1)),
     lambda: _emb_bag_call(_W, _I, _O.reshape(3, 1)),
     "offsets has to be a 1D Tensor", "torch", None),
    ("include_last_offset without offsets",
     lambda: F.embedding_bag(_t(_I), _t(_W), torch.zeros(0, dtype=torch.long),
                             include_last_offset=True),
     lambda: _emb_bag_call(_W, _I, np.zeros(0, np.int64), include_last_offset=True),
     "include_last_offset: number of offset should be at least 1", "torch", None),
    ("offsets[0] not 0", lambda: F.embedding_bag(_t(_I), _t(_W), torch.tensor([1, 2])),
     lambda: _emb_bag_call(_W, _I, np.array([1, 2], np.int64)),
     "offsets[0] has to be 0", "torch", None),
    ("decreasing offsets", lambda: F.embedding_bag(_t(_I), _t(_W), torch.tensor([0, 4, 2])),
     lambda: _emb_bag_call(_W, _I, np.array([0, 4, 2], np.int64)),
     "offsets must be non-decreasing", "wording", "offsets must be non-decreasing"),
    ("decreasing offsets with padding_idx",
     lambda: F.embedding_bag(_t(_I), _t(_W), torch.tensor([0, 2, 1]), padding_idx=2),
     lambda: _emb_bag_call(_W, _I, np.array([0, 2, 1], np.int64), padding_idx=2),
     "offsets must be non-decreasing", "accepts", "non-monotonic offsets"),
    ("decreasing offsets in max mode",
     lambda: F.embedding_bag(_t(_I), _t(_W), torch.tensor([0, 4, 2]), mode="max"),
     lambda: _emb_bag_call(_W, _I, np.array([0, 4, 2], np.int64), mode="max"),
     "offsets must be non-decreasing", "accepts", "non-monotonic offsets"),
    ("offset past the end", lambda: F.embedding_bag(_t(_I), _t(_W), torch.tensor([0, 7])),
     lambda: _emb_bag_call(_W, _I, np.array([0, 7], np.int64)),
     "is past the end of the input", "wording", "is past the end of the input"),
    ("index out of range", lambda: F.embedding_bag(torch.tensor([1, 10]), _t(_W),
                                                   torch.tensor([0])),
     lambda: _emb_bag_call(_W, np.array([1, 10], np.int64), np.array([0], np.int64)),
     "is out of range for a table of 10 rows", "wording", "is out of range for a table of"),
    ("negative index, max mode", lambda: F.embedding_bag(torch.tensor([1, -1]), _t(_W),
                                                         torch.tensor([0]), mode="max"),
     lambda: _emb_bag_call(_W, np.array([1, -1], np.int64), np.array([0], np.int64),
                           mode="max"),
     "is out of range for a table of 10 rows", "wording", "is out of range for a table of"),
    ("max with scale_grad_by_freq",
     lambda: F.embedding_bag(_t(_I), _t(_W), _t(_O), mode="max", scale_grad_by_freq=True),
     lambda: _emb_bag_call(_W, _I, _O, mode="max", sgbf=True),
     "max mode does not support scaling the gradient by the frequency", "torch", None),
    ("max with sparse", lambda: F.embedding_bag(_t(_I), _t(_W), _t(_O), mode="max",
                                                sparse=True),
     lambda: _emb_bag_call(_W, _I, _O, mode="max", sparse=True),
     "max mode does not support sparse weights", "torch", None),
    ("padding_idx out of range, module",
     lambda: torch.nn.EmbeddingBag(10, 3, padding_idx=10),
     lambda: _emb_bag_call(_W, _I, _O, padding_idx=10),
     "padding_idx must be within num_embeddings", "torch", None),
    ("padding_idx out of range, functional",
     lambda: F.embedding_bag(_t(_I), _t(_W), _t(_O), padding_idx=10),
     lambda: _emb_bag_call(_W, _I, _O, padding_idx=10, functional=True),
     "padding_idx must be within the number of embeddings, -10 through 9, but got 10",
     "torch", None),
    ("sparse gradient with scale_grad_by_freq",
     lambda: _torch_sparse_sgbf_backward(_W, _I, _O),
     lambda: _emb_bag_call(_W, _I, _O, backward="sparse", sparse=True, sgbf=True),
     "scale_grad_by_freq not supported with sparse gradients", "torch", None),
    ("max_norm negative", lambda: F.embedding_bag(_t(_I), _t(_W).clone(), _t(_O), max_norm=-1.0),
     lambda: _emb_bag_call(_W, _I, _O, max_norm=-1.0),
     "max_norm must be > 0", "accepts", "`max_norm <= 0` is accepted"),
]


def test_every_refusal_against_torch():
    """Each refusal of emb's bag API: emb refuses with a status and a message that holds the
    phrase torch's message (or later PyTorch's, whose tests match it) uses; torch 1.13
    refuses too, or docs/differences.md says how it differs."""
    import os
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                           "differences.md")) as f:
        differences = f.read()
    for name, torch_fn, emb_fn, phrase, source, doc in REFUSALS:
        st, msg = emb_fn()
        assert st != 0, f"{name}: emb accepted the call"
        assert phrase in msg, f"{name}: emb's message {msg!r} lacks {phrase!r}"
        t = _torch_error(torch_fn)
        if source in ("torch", "wording"):
            assert t is not None, f"{name}: torch 1.13 accepts the call"
        else:
            assert t is None, f"{name}: torch 1.13 refuses it now ({t!r}): update the table"
        if source == "torch":
            assert phrase in t, f"{name}: torch's message {t!r} lacks {phrase!r}"
        else:
            assert doc in differences, f"{name}: differences.md does not quote {doc!r}"
