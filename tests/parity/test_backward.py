"""Parity of the nn.Embedding backward with PyTorch 1.13 (bit-exact).

Covers the dense gradient (emb_embedding_backward) against torch autograd for random
tables, index ranks 0..4, int32/int64, heavy duplicates, padding_idx and
scale_grad_by_freq; accumulation over several backward calls; thread-count independence;
the sparse gradient (emb_embedding_backward_sparse) against grad._indices()/_values(),
including accumulation and zero_grad; coalesce() against torch's (unstable-sort order,
docs/semantics.md §6.5) and dense.add_(sparse); the unstable argsort itself against torch.sort on
random, sorted, reverse, few-distinct and adversarial (heapsort-forcing) arrays; and a
double-precision finite-difference check of the analytic gradient. Every expected value is
produced by torch during the test."""
import math
import os
import struct
import subprocess
import tempfile

import numpy as np
import pytest
import torch

import emb
from parity_util import RUN_KERNEL_MODE, assert_close

torch.set_num_threads(1)


# ---- helpers ---------------------------------------------------------------------------

class Emb:
    """An emb.Embedding over a copy of a known weight (from_pretrained, freeze=False)."""

    def __init__(self, w, padding_idx=None, scale=False, sparse=False, freeze=False):
        self.table = emb.Embedding.from_pretrained(w.copy(), freeze=freeze,
                                                   padding_idx=padding_idx,
                                                   scale_grad_by_freq=scale, sparse=sparse)
        self.V, self.D = w.shape
        self.padding_idx = padding_idx

    def backward(self, idx, g, gw=None):
        """The dense gradient accumulated into gw (zeros when None), as .grad accumulates."""
        if gw is None:
            gw = np.zeros((self.V, self.D), np.float32)
        assert self.table.backward(idx, g, grad=gw) is gw
        return gw

    def backward_overwrite(self, idx, g):
        """The fresh gradient (backward without grad=: emb overwrites a new array)."""
        return self.table.backward(idx, g)

    def forward(self, idx):
        return self.table.forward(idx)


def Sparse(V, D):
    return emb.SparseGrad(V, D)


def torch_emb(w, padding_idx=None, scale=False, sparse=False):
    return torch.nn.Embedding.from_pretrained(torch.from_numpy(w.copy()), freeze=False,
                                              padding_idx=padding_idx,
                                              scale_grad_by_freq=scale, sparse=sparse)


def torch_backward(te, idx, g):
    """One backward with a contiguous upstream gradient g (accumulates into .grad)."""
    out = te(torch.from_numpy(idx).clone())
    # clone: a torch-owned buffer (a sparse .grad may alias it and be resized in place)
    out.backward(torch.from_numpy(g).clone())
    return te.weight.grad


def rand_grad(rng, shape):
    """float32 values spread over many magnitudes, so that summation order matters."""
    g = rng.standard_normal(shape) * 10.0 ** rng.uniform(-4, 4, shape)
    return g.astype(np.float32)


def rand_indices(rng, shape, V, kind, dtype):
    n = int(np.prod(shape)) if len(shape) else 1
    if kind == "uniform":
        a = rng.integers(0, V, n)
    elif kind == "few":  # heavy duplicates
        pool = rng.integers(0, V, max(1, min(V, 3)))
        a = pool[rng.integers(0, len(pool), n)]
    else:  # skewed (Zipf-like)
        a = np.minimum((rng.pareto(1.2, n) * V / 20).astype(np.int64), V - 1)
    return a.reshape(shape).astype(dtype)


# ---- dense -----------------------------------------------------------------------------

def test_dense_reference_example():
    # the example of docs/semantics.md §6.3:
    # idx=[[1,2,1],[4,1,0]], padding_idx=0, g=arange(12).view(2,3,2)
    w = np.arange(10, dtype=np.float32).reshape(5, 2) + 0.5
    idx = np.array([[1, 2, 1], [4, 1, 0]], np.int64)
    g = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    for scale in (False, True):
        te = torch_emb(w, padding_idx=0, scale=scale)
        want = torch_backward(te, idx, g)
        got = Emb(w, padding_idx=0, scale=scale).backward(idx, g)
        assert_close(got, want, exact=True, what=f"dense example scale={scale}")
    assert got[0].tolist() == [0.0, 0.0]


def test_dense_random():
    rng = np.random.default_rng(1234)
    cases = 0
    for case in range(240):
        V = int(rng.integers(1, 300))
        # every seventh width a multiple of 16 (the row kernel's register-blocked sums)
        D = int(rng.integers(1, 70)) if case % 7 else 16 * int(rng.integers(1, 9))
        rank = int(rng.integers(0, 5))
        shape = tuple(int(s) for s in rng.integers(0 if case % 17 == 0 else 1, 7, rank))
        kind = ("uniform", "few", "skewed")[case % 3]
        dtype = np.int64 if case % 2 else np.int32
        idx = rand_indices(rng, shape, V, kind, dtype)
        choice = case % 4
        if choice == 0:
            pad = None
        elif choice == 1:
            pad = int(idx.reshape(-1)[0]) if idx.size else 0  # a padding row that occurs
        elif choice == 2:
            pad = -int(rng.integers(1, V + 1))  # negative padding_idx
        else:
            pad = int(rng.integers(0, V))
        scale = bool(case % 5 < 2)
        w = rng.standard_normal((V, D)).astype(np.float32)
        g = rand_grad(rng, shape + (D,))
        te = torch_emb(w, padding_idx=pad, scale=scale)
        want = torch_backward(te, idx, g)
        if want is None:
            want = torch.zeros(V, D)
        e = Emb(w, padding_idx=pad, scale=scale)
        got = e.backward(idx, g)
        what = (f"case {case}: V={V} D={D} shape={shape} {kind} pad={pad} "
                f"scale={scale} {np.dtype(dtype).name}")
        assert_close(got, want, exact=True, what=what)
        # the overwriting form gives torch's fresh gradient whatever the buffer held
        fresh = e.backward_overwrite(idx, g)
        assert_close(fresh, want, exact=True, what="overwrite " + what)
        cases += 1
    assert cases == 240


def test_dense_accumulates_like_autograd():
    rng = np.random.default_rng(7)
    for case in range(40):
        V, D = int(rng.integers(1, 50)), int(rng.integers(1, 20))
        pad = None if case % 3 == 0 else int(rng.integers(0, V))
        scale = case % 2 == 1
        w = rng.standard_normal((V, D)).astype(np.float32)
        te = torch_emb(w, padding_idx=pad, scale=scale)
        e = Emb(w, padding_idx=pad, scale=scale)
        gw = np.zeros((V, D), np.float32)
        for step in range(3):
            n = int(rng.integers(1, 80))
            idx = rng.integers(0, V, n).astype(np.int64)
            g = rand_grad(rng, (n, D))
            want = torch_backward(te, idx, g)
            e.backward(idx, g, gw)
            assert_close(gw, want, exact=True, what=f"case {case} step {step}")


def test_dense_signed_zero_and_specials():
    # A lone -0.0 contribution becomes +0.0 (the sum starts at +0.0); inf/nan propagate.
    w = np.zeros((4, 3), np.float32)
    idx = np.array([1, 2, 2, 3], np.int64)
    g = np.array([[-0.0, -0.0, 1.0], [-0.0, np.inf, np.nan], [-0.0, -np.inf, 1.0],
                  [1e38, 3e38, -3e38]], np.float32)
    want = torch_backward(torch_emb(w), idx, g)
    got = Emb(w).backward(idx, g)
    assert_close(got, want, exact=True, what="specials")
    assert not np.signbit(got[1, 0])


def test_dense_thread_count_independent():
    rng = np.random.default_rng(99)
    V, D, n = 5000, 32, 200_000
    w = rng.standard_normal((V, D)).astype(np.float32)
    idx = np.minimum((rng.pareto(1.0, n) * 50).astype(np.int64), V - 1)
    g = rand_grad(rng, (n, D))
    results = []
    for scale in (False, True):
        e = Emb(w, padding_idx=3, scale=scale)
        per_threads = []
        for nt in (1, 2, 3):
            emb.set_num_threads(nt)
            per_threads.append(e.backward(idx, g))
        emb.set_num_threads(0)
        for r in per_threads[1:]:
            assert_close(r, per_threads[0], exact=True, what=f"threads scale={scale}")
        results.append(per_threads[0])
    te = torch_emb(w, padding_idx=3, scale=False)
    assert_close(results[0], torch_backward(te, idx, g), exact=True, what="large vs torch")
    te = torch_emb(w, padding_idx=3, scale=True)
    want = torch_backward(te, idx, g)
    assert_close(results[1], want, exact=True, what="large scaled vs torch")
    emb.set_kernel_mode("ref")
    try:
        ref = Emb(w, padding_idx=3, scale=True).backward(idx, g)
    finally:
        emb.set_kernel_mode(RUN_KERNEL_MODE)
    assert_close(ref, want, exact=True, what="reference kernels vs torch")


def test_dense_large_vs_torch_threads():
    # torch itself splits the vocabulary into ranges for threads; emb splits by work.
    rng = np.random.default_rng(5)
    V, D, n = 3000, 17, 60_000
    w = rng.standard_normal((V, D)).astype(np.float32)
    idx = rng.integers(0, V, (n // 3, 3)).astype(np.int32)
    g = rand_grad(rng, (n // 3, 3, D))
    te = torch_emb(w, scale=True)
    want = torch_backward(te, idx, g)
    emb.set_num_threads(2)
    try:
        got = Emb(w, scale=True).backward(idx, g)
    finally:
        emb.set_num_threads(0)
    assert_close(got, want, exact=True, what="large scale_grad_by_freq")


@pytest.mark.parametrize("pad,dtype,accumulate", [(None, np.int64, False), (7, np.int32, False),
                                                   (None, np.int32, True), (0, np.int64, True)])
def test_dense_row_sums_table_vs_torch(pad, dtype, accumulate):
    """Shapes for which the dense backward uses its table of row sums (1-8 MiB, every row
    named about once or more, src/nn/embedding_backward.c backward_accumulate), against torch,
    a fresh gradient and one accumulated into an existing .grad, at 1 and 2 threads."""
    rng = np.random.default_rng(11)
    V, D, n = 16384, 32, 40_000
    w = rng.standard_normal((V, D)).astype(np.float32)
    idx = rand_indices(rng, (n // 4, 4), V, "skewed", dtype)
    g = rand_grad(rng, (n // 4, 4, D))
    te = torch_emb(w, padding_idx=pad)
    if accumulate:
        g0 = rand_grad(rng, (n // 4, 4, D))
        torch_backward(te, idx, g0)
    want = torch_backward(te, idx, g).numpy().copy()
    e = Emb(w, padding_idx=pad)
    for nt in (1, 2):
        gw = None
        if accumulate:
            gw = np.zeros((V, D), np.float32)
            gw = e.backward(idx, g0, gw)
        emb.set_num_threads(nt)
        try:
            got = e.backward(idx, g, gw)
        finally:
            emb.set_num_threads(0)
        assert_close(got, want, exact=True, what=f"row sums pad={pad} threads={nt}")


def test_finite_difference_gradient():
    """The analytic gradient matches central differences of a double-precision loss
    evaluated on emb's own float32 forward outputs."""
    rng = np.random.default_rng(11)
    V, D = 7, 5
    w = rng.standard_normal((V, D)).astype(np.float32)
    idx = rng.integers(0, V, (4, 6)).astype(np.int64)
    idx[0, 0] = 2  # the padding row occurs
    R = rng.standard_normal(idx.shape + (D,))
    pad = 2

    def loss(e):
        return float(np.sum(e.forward(idx).astype(np.float64) * R))

    e = Emb(w, padding_idx=pad)
    grad = e.backward(idx, R.astype(np.float32))
    W = e.table.weight  # a view of the table: writes through it move the loss
    checked = 0
    for r in range(V):
        for d in range(D):
            orig = W[r, d]
            h = np.float32(1e-2) * max(np.float32(1), abs(orig))
            W[r, d] = orig + h
            hp = float(W[r, d]) - float(orig)
            lp = loss(e)
            W[r, d] = orig - h
            hm = float(orig) - float(W[r, d])
            lm = loss(e)
            W[r, d] = orig
            fd = (lp - lm) / (hp + hm)
            if r == pad:
                # the padding row gets no gradient by definition, although the loss moves
                assert grad[r, d] == 0.0
                continue
            assert abs(fd - grad[r, d]) <= 1e-5 * max(1.0, abs(fd)), (r, d, fd, grad[r, d])
            checked += 1
    assert checked == (V - 1) * D


# ---- sparse ----------------------------------------------------------------------------

def sparse_backward(e, idx, g, sg, view=False):
    """SparseGrad.accumulate, or with view the borrowing form (which must give the same
    entries and flags; it borrows when the gradient is empty and the batch is int64 without
    padding)."""
    if not view:
        sg.accumulate(e.table, idx, g)
        return
    empty, before = sg.nnz == 0, sg.borrowed
    g = np.ascontiguousarray(g)
    sg.accumulate(e.table, idx, g, view=True)
    pad = e.padding_idx
    added = idx.size > 0 and (pad is None or (idx != pad).any())
    want = (empty and idx.dtype == np.int64 and idx.size > 0 and
            (pad is None or not (idx == pad).any())) if added else before
    assert sg.borrowed == want, f"borrowed {sg.borrowed}, expected {want}"
    if want and added and g.size:  # borrowing this call's arrays: g's memory is the values
        saved = g.copy()
        g.reshape(-1)[0] += 1.0
        changed = sg.values.reshape(-1)[0]
        g[...] = saved
        assert changed == saved.reshape(-1)[0] + np.float32(1.0) or \
            (np.isnan(changed) and np.isnan(saved.reshape(-1)[0])), "values are not g's memory"
        assert_close(sg.values, g.reshape(-1, g.shape[-1]), exact=True, what="borrowed values")


def compare_sparse(sg, tgrad, what):
    # clone first: .numpy() would pin torch's storage, and a later in-place sparse add
    # into this .grad must be able to resize it
    ti = tgrad._indices().clone().reshape(-1).numpy()
    tv = tgrad._values().clone().numpy()
    gi, gv = sg.indices, sg.values
    if tv.size == 0:  # torch's zero_grad() leaves values of shape (0,)
        tv = tv.reshape(gv.shape)
    assert gi.tolist() == ti.tolist(), f"{what}: indices {gi.tolist()} != {ti.tolist()}"
    assert_close(gv, tv, exact=True, what=f"{what}: values")
    assert sg.coalesced == tgrad.is_coalesced(), f"{what}: coalesced flag"


def test_sparse_reference_example():
    w = np.zeros((5, 2), np.float32)
    idx = np.array([[1, 2, 1], [4, 1, 0]], np.int64)
    g = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    e = Emb(w, padding_idx=0, sparse=True)
    sg = Sparse(5, 2)
    sparse_backward(e, idx, g, sg)
    gi, gv = sg.indices, sg.values
    assert gi.tolist() == [1, 2, 1, 4, 1]
    assert gv.tolist() == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    te = torch_emb(w, padding_idx=0, sparse=True)
    compare_sparse(sg, torch_backward(te, idx, g), "example")


@pytest.mark.parametrize("view", [False, True])
def test_sparse_random_and_accumulation(view):
    rng = np.random.default_rng(21)
    for case in range(80):
        V, D = int(rng.integers(1, 40)), int(rng.integers(1, 9))
        pad = None if case % 3 == 0 else int(rng.integers(0, V))
        w = rng.standard_normal((V, D)).astype(np.float32)
        te = torch_emb(w, padding_idx=pad, sparse=True)
        e = Emb(w, padding_idx=pad, sparse=True)
        sg = Sparse(V, D)
        steps = int(rng.integers(1, 5))
        for step in range(steps):
            if step and rng.random() < 0.2:  # optimizer.zero_grad() (set_to_none=False)
                te.zero_grad(set_to_none=False)
                sg.clear()
            n = int(rng.choice([0, 1, 1, 2, 3, int(rng.integers(1, 60))]))
            dtype = np.int32 if rng.random() < 0.5 else np.int64
            idx = rand_indices(rng, (n,), V, ("uniform", "few")[case % 2], dtype)
            g = rand_grad(rng, (n, D))
            # pytorch: an all-padding or empty batch still creates (or adds) an empty grad
            tgrad = torch_backward(te, idx, g)
            sparse_backward(e, idx, g, sg, view)
            compare_sparse(sg, tgrad, f"case {case} step {step} n={n} pad={pad}")


def test_sparse_then_dense_add_matches_add_():
    rng = np.random.default_rng(3)
    for case in range(30):
        V, D = int(rng.integers(1, 30)), int(rng.integers(1, 40))
        w = rng.standard_normal((V, D)).astype(np.float32)
        n = int(rng.integers(1, 200))
        idx = rng.integers(0, max(1, V // 4 + 1), n).astype(np.int64) % V
        g = rand_grad(rng, (n, D))
        te = torch_emb(w, sparse=True)
        tgrad = torch_backward(te, idx, g)
        dense = rand_grad(rng, (V, D))
        want = torch.from_numpy(dense.copy()).add_(tgrad)
        e = Emb(w, sparse=True)
        sg = Sparse(V, D)
        sparse_backward(e, idx, g, sg)
        got = dense.copy()
        for nt in (1, 2):
            emb.set_num_threads(nt)
            got = dense.copy()
            assert sg.add_to_dense(got) is got
        emb.set_num_threads(0)
        assert_close(got, want, exact=True, what=f"add_to_dense case {case}")


@pytest.mark.parametrize("view", [False, True])
def test_coalesce_matches_torch(view):
    rng = np.random.default_rng(17)
    cases = 0
    for case in range(150):
        D = int(rng.integers(1, 6))
        n = int(rng.integers(17, 1500)) if case % 10 else int(rng.integers(0, 17))
        rows = max(1, n // int(rng.integers(3, 12)))  # >= 3 entries per row on average
        V = rows + int(rng.integers(0, 5))
        if case % 3 == 0:
            idx = np.sort(rng.integers(0, rows, n))
        elif case % 3 == 1:
            idx = np.sort(rng.integers(0, rows, n))[::-1].copy()
        else:
            idx = rng.integers(0, rows, n)
        idx = idx.astype(np.int64)
        w = np.zeros((V, D), np.float32)
        g = rand_grad(rng, (n, D))
        te = torch_emb(w, sparse=True)
        tgrad = torch_backward(te, idx, g)
        e = Emb(w, sparse=True)
        sg = Sparse(V, D)
        sparse_backward(e, idx, g, sg, view)
        g_before = g.copy()
        sg.coalesce()
        assert np.array_equal(g, g_before)  # a borrowed gradient's coalesce copies first
        compare_sparse(sg, tgrad.coalesce(), f"coalesce case {case} n={n}")
        # coalescing again changes nothing
        before = sg.indices, sg.values
        sg.coalesce()
        after = sg.indices, sg.values
        assert before[0].tolist() == after[0].tolist()
        assert_close(after[1], before[1], exact=True, what="coalesce twice")
        cases += 1
    assert cases == 150


# ---- the unstable argsort --------------------------------------------------------------

@pytest.fixture(scope="module")
def argsort_lib():
    """argsort.c is private to libemb (hidden symbol): compile it alone with core's
    parallel.c, whose tasks it runs on, and argsort_driver.c, a filter that sorts the key
    arrays it reads on stdin; the fixture is the running filter."""
    root = os.environ.get("EMB_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    srcs = [os.path.join(root, "src", "kernels", "argsort.c"),
            os.path.join(root, "src", "core", "parallel.c"),
            os.path.join(root, "tests", "parity", "argsort_driver.c")]
    d = tempfile.mkdtemp(prefix="emb_argsort_")
    exe = os.path.join(d, "argsort_driver")
    cc = os.environ.get("CC", "cc")
    # with OpenMP, so that the threaded sort (ranges of the introsort as tasks) runs too
    subprocess.run([cc, "-std=gnu11", "-O2", "-fopenmp",
                    "-I" + os.path.join(root, "src", "core"),
                    "-I" + os.path.join(root, "src", "kernels"),
                    "-I" + os.path.join(root, "include"), "-o", exe] + srcs, check=True)
    proc = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    yield proc
    proc.stdin.close()
    assert proc.wait() == 0
    os.remove(exe)
    os.rmdir(d)


def emb_argsort(proc, keys, threads=0):
    """threads 0: the single-threaded entry point; otherwise the threaded one."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    n = len(keys)
    proc.stdin.write(struct.pack("<qq", n, threads) + keys.tobytes())
    proc.stdin.flush()
    answer = proc.stdout.read(8 * (n + 1))
    assert len(answer) == 8 * (n + 1), "the argsort filter stopped"
    out = np.frombuffer(answer, np.int64)
    assert out[n] == 1, "the keys were changed"
    return out[:n].copy()


def adversary_keys(n, tie_mod=0):
    """Keys that drive libstdc++'s introsort to its depth limit (so the heapsort fallback
    runs): McIlroy's adversary, answering the comparisons of a sort shaped like libstdc++'s
    (median of first+1/mid/last-1, unguarded partition, threshold 16) and fixing keys only
    when it must. The part left for heapsort gets keys that may tie (tie_mod)."""
    gas = n
    val = [gas] * n
    st = {"solid": 0, "cand": 0}

    def freeze(x):
        val[x] = st["solid"]
        st["solid"] += 1

    def lt(x, y):
        if val[x] == gas and val[y] == gas:
            freeze(x if x == st["cand"] else y)
        if val[x] == gas:
            st["cand"] = x
        elif val[y] == gas:
            st["cand"] = y
        return val[x] < val[y]

    a = list(range(n))

    def median_to_first(res, x, y, z):
        if lt(a[x], a[y]):
            if lt(a[y], a[z]):
                a[res], a[y] = a[y], a[res]
            elif lt(a[x], a[z]):
                a[res], a[z] = a[z], a[res]
            else:
                a[res], a[x] = a[x], a[res]
        elif lt(a[x], a[z]):
            a[res], a[x] = a[x], a[res]
        elif lt(a[y], a[z]):
            a[res], a[z] = a[z], a[res]
        else:
            a[res], a[y] = a[y], a[res]

    def partition(f, l, p):
        while True:
            while lt(a[f], a[p]):
                f += 1
            l -= 1
            while lt(a[p], a[l]):
                l -= 1
            if not f < l:
                return f
            a[f], a[l] = a[l], a[f]
            f += 1

    def loop(f, l, depth):
        while l - f > 16:
            if depth == 0:
                return
            depth -= 1
            median_to_first(f, f + 1, f + (l - f) // 2, l - 1)
            c = partition(f + 1, l, f)
            loop(c, l, depth)
            l = c

    loop(0, n, 2 * (n.bit_length() - 1))
    base = st["solid"]
    rest = [i for i in range(n) if val[i] == gas]
    for r, i in enumerate(rest):
        val[i] = base + (r % tie_mod if tie_mod else r)
    return np.array(val, np.int64)


def test_argsort_matches_torch_sort(argsort_lib):
    rng = np.random.default_rng(2024)
    arrays = []
    for n in list(range(0, 40)) + [int(x) for x in rng.integers(40, 3001, 90)]:
        arrays.append(rng.integers(0, max(1, n // 4 + 1), n))          # random, duplicates
        arrays.append(rng.integers(-2 ** 62, 2 ** 62, n))               # random, distinct
        arrays.append(np.sort(rng.integers(0, 20, n)))                  # sorted
        arrays.append(np.sort(rng.integers(0, 1000, n))[::-1].copy())   # reverse
        arrays.append(rng.integers(0, 3, n))                            # few distinct
    for n in (17, 33, 100, 257, 1000, 3000):                            # heapsort fallback
        for tie in (0, 1, 2, 5):
            arrays.append(adversary_keys(n, tie))
    for n in (64, 500, 2048):                                           # patterned
        i = np.arange(n)
        arrays.append(np.minimum(i, n - i))                            # organ pipe
        arrays.append(i % 7)                                           # saw tooth
        arrays.append(np.full(n, 5))                                   # all equal
    assert len(arrays) > 600
    for k, a in enumerate(arrays):
        a = np.asarray(a, np.int64)
        want = torch.sort(torch.from_numpy(a.copy()), stable=False)[1].numpy()
        # the public form: the order a SparseGrad's coalesce visits the entries in
        public = emb.sparse_coalesce_order(a)
        assert np.array_equal(public, want), f"sparse_coalesce_order of array {k}"
        got = emb_argsort(argsort_lib, a)
        assert np.array_equal(got, want), f"array {k} (n={len(a)}): first difference at " \
            f"{int(np.argmax(got != want))}"
    with pytest.raises(emb.DtypeError, match="int64"):
        emb.sparse_coalesce_order(np.zeros(3, np.int32))


def test_argsort_large_matches_torch_sort(argsort_lib):
    """Arrays long enough for the block partition's every branch and for the threaded sort
    (ranges of 32,768 keys and more become tasks), at 1, 2 and 3 threads."""
    rng = np.random.default_rng(77)
    arrays = [
        rng.integers(0, 50_000, 1_048_576),           # the bench's 50k x 16 step: ~21 per row
        rng.integers(0, 1_000_000, 262_144),          # mostly distinct
        rng.integers(0, 3, 200_000),                  # few distinct
        np.sort(rng.integers(0, 1000, 150_000)),      # sorted
        np.sort(rng.integers(0, 1000, 150_000))[::-1].copy(),
        np.full(100_000, 9),                          # all equal
        np.arange(300_000) % 1013,                    # saw tooth
        rng.integers(-2 ** 62, 2 ** 62, 70_000),      # wide keys
    ]
    for n in (65_537, 131_071):                                         # odd sizes
        arrays.append(rng.integers(0, n // 5, n))
    for k, a in enumerate(arrays):
        a = np.asarray(a, np.int64)
        want = torch.sort(torch.from_numpy(a.copy()), stable=False)[1].numpy()
        for threads in (0, 1, 2, 3):
            got = emb_argsort(argsort_lib, a, threads)
            assert np.array_equal(got, want), f"array {k} (n={len(a)}, threads {threads}): " \
                f"first difference at {int(np.argmax(got != want))}"


# ---- errors reachable from Python (full coverage is in the unit tests) -------------------

def test_errors_match_pytorch_wording():
    w = np.zeros((4, 2), np.float32)
    idx = np.array([1, 2], np.int64)
    g = np.ones((2, 2), np.float32)
    e = Emb(w, scale=True, sparse=True)
    sg = Sparse(4, 2)
    with pytest.raises(emb.UnsupportedError) as ei:
        sg.accumulate(e.table, idx, g)
    msg = str(ei.value)
    te = torch_emb(w, scale=True, sparse=True)
    with pytest.raises(RuntimeError) as exc:
        torch_backward(te, idx, g)
    assert msg in str(exc.value)
    assert sg.nnz == 0
    frozen = Emb(w, freeze=True)
    gw = np.full((4, 2), 7, np.float32)
    with pytest.raises(emb.StateError, match="does not require grad"):
        frozen.table.backward(idx, g, grad=gw)
    assert (gw == 7).all()


def test_borrowed_arrays_stay_alive():
    """A gradient that borrows (view=True) holds the arrays: deleting them changes nothing;
    a later accumulate gives it entries of its own and lets them go."""
    import gc
    import weakref
    w = np.zeros((6, 3), np.float32)
    e = Emb(w, sparse=True)
    te = torch_emb(w, sparse=True)
    sg = Sparse(6, 3)
    idx = np.array([4, 1, 4], np.int64)
    g = np.arange(9, dtype=np.float32).reshape(3, 3)

    class Owner(np.ndarray):  # an ndarray subclass, so that a weak reference can watch it
        pass

    go = g.copy().view(Owner)
    gone = weakref.ref(go)
    sg.accumulate(e.table, idx, go, view=True)
    assert sg.borrowed
    del go
    gc.collect()
    assert gone() is not None  # held by the gradient
    compare_sparse(sg, torch_backward(te, idx, g), "borrowed after the caller let go")
    sg.accumulate(e.table, np.array([2], np.int64), np.ones((1, 3), np.float32), view=True)
    assert not sg.borrowed
    gc.collect()
    assert gone() is None  # released once the entries are the gradient's own
    compare_sparse(sg, torch_backward(te, np.array([2]), np.ones((1, 3), np.float32)),
                   "after a second accumulate")
    with pytest.raises(TypeError):
        sg.accumulate(object(), idx, g)
    with pytest.raises(TypeError, match="indices must be int64 or int32"):
        sg.accumulate(e.table, idx.astype(np.float64), g)
