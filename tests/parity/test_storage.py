"""Parity of emb_embedding_wrap (a table over the caller's memory) with PyTorch 1.13's
Embedding.from_pretrained, which shares the given tensor's storage in the same way, through
the package (emb.Embedding.from_pretrained over a numpy array).

For random tables and options: forward, max_norm renormalisation and the dense and sparse
backward through a wrapped table equal torch bit for bit, the renorm writes into the
caller's buffer exactly as torch writes into the tensor given to from_pretrained, and writes
by the caller are seen by both. A read-only table looks up like torch and refuses max_norm
without touching the buffer. Every expected value is produced by torch during the test."""
import gc
import math

import numpy as np
import pytest
import torch

import emb
from parity_util import assert_close

torch.set_num_threads(1)


class Wrapped:
    """emb.Embedding.from_pretrained over the numpy array w (emb_embedding_wrap through the
    package: the table holds w's buffer); read_only wraps a read-only view of w."""

    def __init__(self, w, padding_idx=None, max_norm=None, norm_type=2.0, scale=False,
                 read_only=False, freeze=False):
        assert w.dtype == np.float32 and w.flags.c_contiguous
        if read_only:
            w = w.view()
            w.flags.writeable = False
        self.t = emb.Embedding.from_pretrained(w, freeze=freeze, padding_idx=padding_idx,
                                               max_norm=max_norm, norm_type=norm_type,
                                               scale_grad_by_freq=scale)
        self.V, self.D = w.shape

    def free(self):
        self.t = None

    def forward(self, idx):
        return self.t(idx)

    def backward(self, idx, g):
        gw = np.zeros((self.V, self.D), np.float32)
        return self.t.backward(idx, g, grad=gw)

    def backward_sparse(self, idx, g):
        return self.t.backward_sparse(idx, g)

    def weight_ptr(self):
        return np.asarray(self.t).__array_interface__["data"][0]


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
        e = Wrapped(buf, pad, max_norm, norm_type, scale)
        assert e.weight_ptr() == buf.__array_interface__["data"][0]

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
        e = Wrapped(w0.copy(), pad)
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
        emb.set_num_threads(nt)
        try:
            e = Wrapped(buf, max_norm=1.0)
            assert_close(e.forward(idx), want, exact=True, what=f"forward, {nt} threads")
            e.free()
        finally:
            emb.set_num_threads(0)
        assert_close(buf, tw, exact=True, what=f"caller's buffer, {nt} threads")


def test_read_only_lookup_matches_torch_and_refuses_renorm():
    rng = np.random.default_rng(9)
    V, D = 50, 8
    w0 = rand_table(rng, V, D)
    idx = rng.integers(0, V, (4, 5))
    buf = w0.copy()
    plain = Wrapped(buf, read_only=True, freeze=True)
    assert plain.t.read_only and not np.asarray(plain.t).flags.writeable
    want = torch.nn.functional.embedding(torch.from_numpy(idx), torch.from_numpy(w0))
    assert_close(plain.forward(idx), want, exact=True, what="read-only lookup")
    renorm = Wrapped(buf, max_norm=1.0, read_only=True)
    with pytest.raises(emb.ReadOnlyError) as e:
        renorm.forward(idx)
    assert e.value.status == -12  # EMB_ERR_READ_ONLY
    assert "read-only" in str(e.value) and "max_norm=1" in str(e.value)
    assert buf.tobytes() == w0.tobytes()
    with pytest.raises(TypeError, match="read-only"):  # its weight's views are read-only
        memoryview(renorm.t).cast("B")[0] = 0
    assert buf.tobytes() == w0.tobytes()
    plain.free()
    renorm.free()


def test_buffer_released_once_with_the_table():
    """The table holds its array's buffer while it lives (the memory cannot move: a
    bytearray under it cannot be resized) and lets it go when freed."""
    raw = bytearray(np.ones((3, 2), np.float32).tobytes())
    e = Wrapped(np.frombuffer(raw, np.float32).reshape(3, 2))
    with pytest.raises(BufferError):
        raw.extend(b"1234")
    assert e.forward(np.array([1])).tolist() == [[1.0, 1.0]]
    e.free()
    gc.collect()
    raw.extend(b"1234")  # no export left
    assert len(raw) == 28
