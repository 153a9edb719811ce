"""Parity of emb_embedding_wrap (a table over the caller's memory) with PyTorch 1.13's
Embedding.from_pretrained, which shares the given tensor's storage in the same way.

For random tables and options: forward, max_norm renormalisation and the dense and sparse
backward through a wrapped table equal torch bit for bit, the renorm writes into the
caller's buffer exactly as torch writes into the tensor given to from_pretrained, and writes
by the caller are seen by both. A read-only table looks up like torch and refuses max_norm
without touching the buffer. Every expected value is produced by torch during the test."""
import ctypes as C
import math

import numpy as np
import torch

from embpy import (ERR_READ_ONLY, PADDING_NONE, RELEASE_FN, SparseGrad, Storage, T, Tensor,
                   assert_close, call, check, lib, ptr)

torch.set_num_threads(1)


def opts(padding_idx=None, max_norm=None, norm_type=2.0, scale=False):
    o = lib.emb_embedding_options_default()
    o.padding_idx = PADDING_NONE if padding_idx is None else padding_idx
    o.max_norm = math.inf if max_norm is None else max_norm
    o.norm_type = norm_type
    o.scale_grad_by_freq = scale
    return o


class Wrapped:
    """An emb_embedding over the numpy array w (kept alive here, as the caller must)."""

    def __init__(self, w, o, read_only=False, freeze=False, release=None, ctx=None):
        assert w.dtype == np.float32 and w.flags.c_contiguous
        self.w = w
        self.h = C.c_void_p()
        s = Storage()
        s.read_only = read_only
        if release is not None:
            s.release = release
            s.release_ctx = ctx
        check(lib.emb_embedding_wrap(T(w), ptr(s), freeze, ptr(o), ptr(self.h)))
        self.V, self.D = w.shape

    def free(self):
        if self.h:
            lib.emb_embedding_free(self.h)
            self.h = C.c_void_p()

    def __del__(self):
        self.free()

    def forward(self, idx):
        out = np.full(idx.shape + (self.D,), np.nan, np.float32)
        check(lib.emb_embedding_forward(self.h, T(idx), T(out)))
        return out

    def backward(self, idx, g):
        gw = np.zeros((self.V, self.D), np.float32)
        check(lib.emb_embedding_backward(self.h, T(idx), T(g), T(gw)))
        return gw

    def backward_sparse(self, idx, g):
        sg = SparseGrad()
        check(lib.emb_sparse_grad_init(ptr(sg), self.V, self.D))
        try:
            check(lib.emb_embedding_backward_sparse(self.h, T(idx), T(g), ptr(sg)))
            return sg.arrays()
        finally:
            lib.emb_sparse_grad_release(ptr(sg))

    def weight_ptr(self):
        v = Tensor()
        check(lib.emb_embedding_weight_const(self.h, ptr(v)))
        return v.data


def rand_table(rng, V, D):
    """Rows of very different norms, so that some exceed max_norm and some do not."""
    w = rng.standard_normal((V, D)) * 10.0 ** rng.uniform(-1, 1, (V, 1))
    return w.astype(np.float32)


def test_forward_renorm_backward_share_storage_like_torch():
    rng = np.random.default_rng(2024)
    renormed = 0
    for case in range(150):
        V = int(rng.integers(1, 200))
        D = int(rng.integers(1, 40))
        n = int(rng.integers(0, 60))
        max_norm = None if case % 4 == 0 else float(rng.uniform(0.2, 5.0))
        norm_type = (2.0, 1.0, 3.0, math.inf, 0.5)[case % 5]
        pad = None if case % 3 == 0 else int(rng.integers(0, V))
        scale = bool(case % 2)
        w0 = rand_table(rng, V, D)
        idx = rng.integers(0, V, n).astype(np.int64 if case % 2 else np.int32)
        g = rng.standard_normal((n, D)).astype(np.float32)
        what = f"case {case}: V={V} D={D} n={n} max_norm={max_norm} p={norm_type} pad={pad}"

        tw = torch.from_numpy(w0.copy())  # the caller's tensor, shared by torch's table
        te = torch.nn.Embedding.from_pretrained(tw, freeze=False, padding_idx=pad,
                                                max_norm=max_norm, norm_type=norm_type,
                                                scale_grad_by_freq=scale)
        assert te.weight.data_ptr() == tw.data_ptr()
        buf = w0.copy()  # emb's caller buffer
        e = Wrapped(buf, opts(pad, max_norm, norm_type, scale))
        assert e.weight_ptr() == buf.ctypes.data

        out_t = te(torch.from_numpy(idx).long())
        out_e = e.forward(idx)
        assert_close(out_e, out_t.detach(), exact=True, what=f"forward, {what}")
        # the renorm wrote into the caller's buffer exactly as torch wrote into tw
        assert_close(buf, tw, exact=True, what=f"caller's buffer after forward, {what}")
        if max_norm is None:
            assert buf.tobytes() == w0.tobytes()
        renormed += buf.tobytes() != w0.tobytes()

        out_t.backward(torch.from_numpy(g))
        want = te.weight.grad if te.weight.grad is not None else torch.zeros(V, D)
        assert_close(e.backward(idx, g), want, exact=True, what=f"backward, {what}")

        # the caller writes; both tables see it
        r = int(rng.integers(0, V))
        row = rng.standard_normal(D).astype(np.float32)
        with torch.no_grad():
            tw[r] = torch.from_numpy(row)
        buf[r] = row
        probe = np.array([r], np.int64)
        assert_close(e.forward(probe), te(torch.from_numpy(probe)).detach(), exact=True,
                     what=f"lookup after a caller write, {what}")
        assert_close(buf, tw, exact=True, what=f"caller's buffer after the probe, {what}")
        e.free()
    assert renormed > 50  # the renorm did write the caller's buffer in many cases


def test_sparse_backward_through_wrapped_table():
    rng = np.random.default_rng(77)
    for case in range(40):
        V, D, n = int(rng.integers(1, 100)), int(rng.integers(1, 20)), int(rng.integers(1, 50))
        pad = None if case % 2 else int(rng.integers(0, V))
        w0 = rand_table(rng, V, D)
        idx = rng.integers(0, V, n)
        g = rng.standard_normal((n, D)).astype(np.float32)
        te = torch.nn.Embedding.from_pretrained(torch.from_numpy(w0.copy()), freeze=False,
                                                padding_idx=pad, sparse=True)
        te(torch.from_numpy(idx)).backward(torch.from_numpy(g))
        e = Wrapped(w0.copy(), opts(pad))
        gi, gv = e.backward_sparse(idx, g)
        tg = te.weight.grad
        assert np.array_equal(gi, tg._indices().numpy()[0])
        assert_close(gv, tg._values(), exact=True, what=f"sparse values case {case}")


def test_thread_counts_share_storage():
    """A large renorm (parallel over rows) writes the caller's buffer as torch does, for 1,
    2 and 3 threads."""
    rng = np.random.default_rng(5)
    V, D, n = 20000, 64, 30000
    w0 = rand_table(rng, V, D)
    idx = rng.integers(0, V, n)
    tw = torch.from_numpy(w0.copy())
    te = torch.nn.Embedding.from_pretrained(tw, freeze=False, max_norm=1.0)
    want = te(torch.from_numpy(idx)).detach()
    for nt in (1, 2, 3):
        buf = w0.copy()
        lib.emb_set_num_threads(nt)
        try:
            e = Wrapped(buf, opts(max_norm=1.0))
            assert_close(e.forward(idx), want, exact=True, what=f"forward, {nt} threads")
            e.free()
        finally:
            lib.emb_set_num_threads(0)
        assert_close(buf, tw, exact=True, what=f"caller's buffer, {nt} threads")


def test_read_only_lookup_matches_torch_and_refuses_renorm():
    rng = np.random.default_rng(9)
    V, D = 50, 8
    w0 = rand_table(rng, V, D)
    idx = rng.integers(0, V, (4, 5))
    buf = w0.copy()
    plain = Wrapped(buf, opts(), read_only=True, freeze=True)
    assert lib.emb_embedding_is_read_only(plain.h)
    want = torch.nn.functional.embedding(torch.from_numpy(idx), torch.from_numpy(w0))
    assert_close(plain.forward(idx), want, exact=True, what="read-only lookup")
    renorm = Wrapped(buf, opts(max_norm=1.0), read_only=True)
    out = np.full((4, 5, D), 7.0, np.float32)
    st, msg = call(lib.emb_embedding_forward, renorm.h, T(idx), T(out))
    assert st == ERR_READ_ONLY, msg
    assert "read-only" in msg and "max_norm=1" in msg
    assert (out == 7.0).all()
    assert buf.tobytes() == w0.tobytes()
    v = Tensor()
    st, msg = call(lib.emb_embedding_weight, renorm.h, ptr(v))
    assert st == ERR_READ_ONLY and "emb_embedding_weight_const" in msg
    plain.free()
    renorm.free()


def test_release_called_once():
    calls = []

    @RELEASE_FN
    def release(data, ctx):
        calls.append((data, ctx))

    buf = np.ones((3, 2), np.float32)
    e = Wrapped(buf, opts(), release=release, ctx=1234)
    assert calls == []
    e.free()
    assert calls == [(buf.ctypes.data, 1234)]
