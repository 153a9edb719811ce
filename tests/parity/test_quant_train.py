"""Training f32, f16 and bf16 tables (include/emb/quant.h, "Training"), against live torch 1.13.

Bit for bit, on random bags (sum and mean, per_sample_weights, padding_idx,
include_last_offset, duplicates):
- the sparse gradient of emb_qtable_bag_forward equals F.embedding_bag(sparse=True)'s gradient;
- an f32 table after emb_qtable_sgd_step_bag equals torch.optim.SGD's sparse step on
  nn.EmbeddingBag's weight;
- an f16 / bf16 table with round-to-nearest equals: upcast the table to float32 in torch,
  take that same SGD step, cast back with Tensor.half() / .bfloat16();
- with stochastic rounding every element is one of the two stored neighbours of that
  float32 result (or the result itself when it is representable), and over many draws the
  rounding is unbiased (the count of upward roundings is within 5 standard deviations of its
  expectation, on a fixed seed);
- the fused step and backward + step give the same bits, stochastic rounding included,
  and refuse the same inputs with the same status and message; a refusal leaves the table
  and the generator unchanged.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from embpy import (BAG_MEAN, BAG_SUM, ERR_INVALID, ERR_OVERFLOW, ERR_READ_ONLY, ERR_SHAPE,
                   ERR_UNSUPPORTED, PADDING_NONE, QROUND_NEAREST, QROUND_STOCHASTIC, QFile,
                   Gen, QTable, SparseGrad, T, call, check, lib, ptr)

torch.set_num_threads(1)
HALF = {"f16": (np.float16, torch.float16), "bf16": (None, torch.bfloat16)}


def opts(mode, padding_idx=None, last=False):
    o = lib.emb_bag_options_default()
    o.mode = {"sum": BAG_SUM, "mean": BAG_MEAN}[mode]
    o.padding_idx = PADDING_NONE if padding_idx is None else padding_idx
    o.include_last_offset = last
    return o


def stored_as_f32(q):
    """The table's values as float32 (exact: the stored values widened)."""
    return q.dequantize()


def bytes_of_torch(t, qtype):
    """The storage bytes of a float32 torch tensor converted as the table stores it."""
    if qtype == "f32":
        return t.contiguous().numpy().view(np.uint8).reshape(t.shape[0], -1)
    h = t.to(HALF[qtype][1]).contiguous()
    return h.view(torch.int16).numpy().view(np.uint8).reshape(t.shape[0], -1)


def rand_case(rng, V, D):
    mode = ["sum", "mean"][int(rng.integers(0, 2))]
    n = int(rng.integers(1, 30))  # torch 1.13 fails a sparse backward of no positions
    idx = rng.integers(0, V, n).astype(np.int64)
    if n and rng.integers(0, 3) == 0:
        idx[rng.integers(0, n, max(1, n // 3))] = idx[0]  # duplicates
    B = int(rng.integers(1, 6))
    off = np.sort(rng.integers(0, n + 1, B)).astype(np.int64)
    off[0] = 0
    last = bool(rng.integers(0, 4) == 0)
    if last:  # the last offset is n, as torch requires (docs/differences.md)
        off = np.concatenate([off, [n]]).astype(np.int64)
        B += 1
    pad = int(rng.integers(0, V)) if rng.integers(0, 3) == 0 else None
    psw = (rng.standard_normal(n).astype(np.float32)
           if mode == "sum" and rng.integers(0, 2) == 0 else None)
    nb = B - 1 if last else B
    go = (rng.standard_normal((nb, D)) * 10.0 ** rng.uniform(-2, 1)).astype(np.float32)
    lr = float(np.float32(10.0 ** rng.uniform(-3, 0)))
    return dict(mode=mode, idx=idx, off=off, last=last, pad=pad, psw=psw, go=go, lr=lr)


def torch_step(w32, c):
    """(new float32 weight, sparse gradient (rows, values)) of torch's EmbeddingBag + SGD."""
    w = torch.nn.Parameter(torch.from_numpy(w32.copy()))
    out = F.embedding_bag(torch.from_numpy(c["idx"]), w, torch.from_numpy(c["off"]),
                          mode=c["mode"], sparse=True,
                          per_sample_weights=None if c["psw"] is None
                          else torch.from_numpy(c["psw"]),
                          include_last_offset=c["last"], padding_idx=c["pad"])
    out.backward(torch.from_numpy(c["go"]))
    g = w.grad
    rows, vals = g._indices()[0].numpy().copy(), g._values().numpy().copy()
    torch.optim.SGD([w], lr=c["lr"]).step()
    return w.detach(), rows, vals


def emb_args(q, c):
    o = opts(c["mode"], c["pad"], c["last"])
    return (q.h, T(c["idx"]), T(c["off"]), None if c["psw"] is None else T(c["psw"]), ptr(o),
            T(c["go"]))


def rand_weights(rng, V, D):
    return (rng.standard_normal((V, D)) * 10.0 ** rng.uniform(-2, 2, (V, 1))).astype(np.float32)


def test_backward_sparse_matches_torch():
    rng = np.random.default_rng(40)
    for _ in range(300):
        V, D = int(rng.integers(1, 12)), int(rng.integers(1, 9))
        c = rand_case(rng, V, D)
        q = QTable(rand_weights(rng, V, D), ["f16", "bf16", "int8"][int(rng.integers(0, 3))])
        _, rows, vals = torch_step(stored_as_f32(q), c)
        g = SparseGrad()
        check(lib.emb_sparse_grad_init(ptr(g), V, D))
        check(lib.emb_qtable_bag_backward_sparse(*emb_args(q, c), ptr(g)))
        got_rows, got_vals = g.arrays()
        lib.emb_sparse_grad_release(ptr(g))
        assert np.array_equal(got_rows, rows)
        assert got_vals.tobytes() == vals.tobytes()


@pytest.mark.parametrize("qtype", ["f32", "f16", "bf16"])
def test_nearest_step_matches_torch(qtype):
    rng = np.random.default_rng({"f32": 41, "f16": 42, "bf16": 43}[qtype])
    for _ in range(300):
        V, D = int(rng.integers(1, 12)), int(rng.integers(1, 9))
        c = rand_case(rng, V, D)
        q = QTable(rand_weights(rng, V, D), qtype)
        new, _, _ = torch_step(stored_as_f32(q), c)
        check(lib.emb_qtable_sgd_step_bag(*emb_args(q, c), c["lr"], QROUND_NEAREST, None))
        assert np.array_equal(q.bytes(), bytes_of_torch(new, qtype))


def neighbours(u, qtype):
    """The stored values just below and above |u| towards and away from zero, as float32."""
    dt = HALF[qtype][1]
    h = torch.from_numpy(u).to(dt)
    hv = h.float().numpy()
    bits = h.view(torch.int16).numpy().astype(np.int32) & 0xFFFF
    lo_bits = np.where(np.abs(hv) > np.abs(u), bits - 1, bits)
    hi_bits = lo_bits + 1

    def widen(b):
        return torch.from_numpy(b.astype(np.uint16).view(np.int16)).view(dt).float().numpy()

    return widen(lo_bits), widen(hi_bits)


@pytest.mark.parametrize("qtype", ["f16", "bf16"])
def test_stochastic_step_rounds_to_a_neighbour(qtype):
    rng = np.random.default_rng({"f16": 44, "bf16": 45}[qtype])
    gen = Gen(7)
    for _ in range(200):
        V, D = int(rng.integers(1, 12)), int(rng.integers(1, 9))
        c = rand_case(rng, V, D)
        q = QTable(rand_weights(rng, V, D), qtype)
        new, _, _ = torch_step(stored_as_f32(q), c)
        u = new.numpy()
        check(lib.emb_qtable_sgd_step_bag(*emb_args(q, c), c["lr"], QROUND_STOCHASTIC, gen.h))
        got = stored_as_f32(q)
        lo, hi = neighbours(u, qtype)
        exact = lo == u
        assert np.all(np.where(exact, got == u, (got == lo) | (got == hi)))


@pytest.mark.parametrize("qtype", ["f16", "bf16"])
def test_stochastic_rounding_is_unbiased(qtype):
    """Small updates that round-to-nearest would lose: stochastic rounding keeps them on
    average. One row of 512 values, 40 steps of one fixed small gradient each."""
    rng = np.random.default_rng(46)
    D = 512
    w0 = rng.uniform(0.5, 2.0, (1, D)).astype(np.float32)
    go = (rng.uniform(-1, 1, (1, D)) * 1e-3).astype(np.float32)
    c = dict(mode="sum", idx=np.array([0]), off=np.array([0]), last=False, pad=None, psw=None,
             go=go, lr=0.5)
    gen = Gen(11)
    w0_stored = stored_as_f32(QTable(w0, qtype))
    ups, expect, var, lost = 0, 0.0, 0.0, 0
    for _ in range(40):
        q = QTable(w0, qtype)
        new, _, _ = torch_step(stored_as_f32(q), c)
        u = new.numpy()
        lo, hi = neighbours(u, qtype)
        p = np.where(lo == u, 0.0, (np.abs(u.astype(np.float64)) - np.abs(lo.astype(np.float64)))
                     / (np.abs(hi.astype(np.float64)) - np.abs(lo.astype(np.float64))))
        check(lib.emb_qtable_sgd_step_bag(*emb_args(q, c), c["lr"], QROUND_STOCHASTIC, gen.h))
        got = stored_as_f32(q)
        ups += int(np.sum((got == hi) & (lo != u)))
        expect += float(p.sum())
        var += float((p * (1 - p)).sum())
        qn = QTable(w0, qtype)
        check(lib.emb_qtable_sgd_step_bag(*emb_args(qn, c), c["lr"], QROUND_NEAREST, None))
        lost += int(np.sum((stored_as_f32(qn) == w0_stored) & (u != w0_stored)))
    assert lost > 0  # round-to-nearest drops some of these updates entirely
    assert expect > 100  # the case does exercise rounding
    assert abs(ups - expect) < 5 * var ** 0.5, (ups, expect, var)


@pytest.mark.parametrize("qtype", ["f32", "f16", "bf16"])
def test_fused_equals_backward_then_step(qtype):
    rng = np.random.default_rng({"f32": 47, "f16": 48, "bf16": 49}[qtype])
    for i in range(200):
        V, D = int(rng.integers(1, 12)), int(rng.integers(1, 9))
        c = rand_case(rng, V, D)
        w = rand_weights(rng, V, D)
        rounding = QROUND_STOCHASTIC if i % 2 else QROUND_NEAREST
        a, b = QTable(w, qtype), QTable(w, qtype)
        ga, gb = Gen(100 + i), Gen(100 + i)
        check(lib.emb_qtable_sgd_step_bag(*emb_args(a, c), c["lr"], rounding, ga.h))
        assert unfused(b, c, c["lr"], rounding, gb.h) == (0, "")
        assert np.array_equal(a.bytes(), b.bytes())
        assert ga.next() == gb.next()


def unfused(q, c, lr, rounding, gen):
    g = SparseGrad()
    check(lib.emb_sparse_grad_init(ptr(g), q.V, q.D))
    try:
        st, msg = call(lib.emb_qtable_bag_backward_sparse, *emb_args(q, c), ptr(g))
        if st:
            return st, msg
        return call(lib.emb_qtable_sgd_step, q.h, ptr(g), lr, rounding, gen)
    finally:
        lib.emb_sparse_grad_release(ptr(g))


def test_refusals_are_the_same_and_change_nothing(tmp_path):
    rng = np.random.default_rng(50)
    w = rand_weights(rng, 5, 4)
    w[2, 1] = 65000.0
    base = dict(mode="sum", idx=np.array([2, 1]), off=np.array([0]), last=False, pad=None,
                psw=None, go=np.ones((1, 4), np.float32), lr=0.5)
    path = tmp_path / "t.safetensors"
    src = QTable(w, "f16")
    check(lib.emb_qtable_save(str(path).encode(), src.h, None))
    cases = [
        ("int8", base, 0.5, QROUND_NEAREST, ERR_UNSUPPORTED, "int8 table is not trained"),
        ("f16", base, -1.0, QROUND_NEAREST, ERR_INVALID, "Invalid learning rate"),
        ("f16", base, float("nan"), QROUND_NEAREST, ERR_INVALID, "Invalid learning rate"),
        ("f16", base, 0.5, 9, ERR_INVALID, "unknown rounding"),
        ("f16", dict(base, go=np.full((1, 4), -20000.0, np.float32)), 0.5, QROUND_STOCHASTIC,
         ERR_OVERFLOW, "out of float16's range"),
        ("f16", dict(base, go=np.full((1, 4), -20000.0, np.float32)), 0.5, QROUND_NEAREST,
         ERR_OVERFLOW, "out of float16's range"),
        ("f16", dict(base, mode="mean", psw=np.ones(2, np.float32)), 0.5, QROUND_NEAREST,
         ERR_UNSUPPORTED, "per_sample_weights"),
        ("f16", dict(base, go=np.ones((2, 4), np.float32)), 0.5, QROUND_NEAREST, ERR_SHAPE, ""),
        ("mapped", base, 0.5, QROUND_NEAREST, ERR_READ_ONLY, "read-only"),
    ]
    for qtype, c, lr, rounding, status, text in cases:
        results = []
        for fused in (True, False):
            q = QFile(path, map=True) if qtype == "mapped" else QTable(w, qtype)
            before = q.bytes()
            gen = Gen(5)
            if fused:
                st, msg = call(lib.emb_qtable_sgd_step_bag, *emb_args(q, c), lr, rounding, gen.h)
            else:
                st, msg = unfused(q, c, lr, rounding, gen.h)
            assert st == status and text in msg, (qtype, fused, st, msg)
            assert np.array_equal(q.bytes(), before)
            assert gen.next() == Gen(5).next()
            results.append((st, msg))
        assert results[0] == results[1]
    # the overflow is one element: with a smaller step the same table trains
    q = QTable(w, "f16")
    check(lib.emb_qtable_sgd_step_bag(*emb_args(q, dict(base, go=np.full((1, 4), -1.0, np.float32))),
                                      0.5, QROUND_STOCHASTIC, None))
    assert not lib.emb_qtable_is_read_only(q.h)
    assert lib.emb_qtable_is_read_only(QFile(path, map=True).h)
    assert not lib.emb_qtable_is_read_only(QFile(path).h)
