"""Training f32, f16 and bf16 tables (include/emb/quant.h, "Training"), against live torch 1.13.

Bit for bit, on random bags (sum and mean, per_sample_weights, padding_idx,
include_last_offset, duplicates):
- the sparse gradient of QTable.bag (QTable.backward_sparse) equals F.embedding_bag(sparse=True)'s
  gradient;
- an f32 table after QTable.sgd_step_bag equals torch.optim.SGD's sparse step on
  nn.EmbeddingBag's weight;
- an f16 / bf16 table with round-to-nearest equals: upcast the table to float32 in torch,
  take that same SGD step, cast back with Tensor.half() / .bfloat16();
- with stochastic rounding every element is one of the two stored neighbours of that
  float32 result (or the result itself when it is representable), and over many draws the
  rounding is unbiased (the count of upward roundings is within 5 standard deviations of its
  expectation, on a fixed seed);
- the fused step (sgd_step_bag) and backward_sparse + sgd_step give the same bits, stochastic rounding included,
  and refuse the same inputs with the same exception and message; a refusal leaves the table
  and the generator unchanged.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import emb

torch.set_num_threads(1)
HALF = {"f16": (np.float16, torch.float16), "bf16": (None, torch.bfloat16)}
NEAREST, STOCHASTIC = "nearest", "stochastic"


def QTable(w, qtype):
    return emb.QTable.quantize(w, qtype)


def qbytes(q):
    """The stored rows as uint8 [V, row_nbytes] (a copy)."""
    return np.asarray(q).copy()


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


def bag_args(c):
    """The keyword arguments of QTable.backward_sparse / sgd_step_bag for a case."""
    return dict(input=c["idx"], grad_output=c["go"], offsets=c["off"],
                per_sample_weights=c["psw"], mode=c["mode"], padding_idx=c["pad"],
                include_last_offset=c["last"])


def rand_weights(rng, V, D):
    return (rng.standard_normal((V, D)) * 10.0 ** rng.uniform(-2, 2, (V, 1))).astype(np.float32)


def test_backward_sparse_matches_torch():
    rng = np.random.default_rng(40)
    for _ in range(300):
        V, D = int(rng.integers(1, 12)), int(rng.integers(1, 9))
        c = rand_case(rng, V, D)
        q = QTable(rand_weights(rng, V, D), ["f16", "bf16", "int8"][int(rng.integers(0, 3))])
        _, rows, vals = torch_step(stored_as_f32(q), c)
        got_rows, got_vals = q.backward_sparse(**bag_args(c))
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
        q.sgd_step_bag(lr=c["lr"], rounding=NEAREST, **bag_args(c))
        assert np.array_equal(qbytes(q), bytes_of_torch(new, qtype))


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
    gen = emb.Generator(7)
    for _ in range(200):
        V, D = int(rng.integers(1, 12)), int(rng.integers(1, 9))
        c = rand_case(rng, V, D)
        q = QTable(rand_weights(rng, V, D), qtype)
        new, _, _ = torch_step(stored_as_f32(q), c)
        u = new.numpy()
        q.sgd_step_bag(lr=c["lr"], rounding=STOCHASTIC, generator=gen, **bag_args(c))
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
    gen = emb.Generator(11)
    w0_stored = stored_as_f32(QTable(w0, qtype))
    ups, expect, var, lost = 0, 0.0, 0.0, 0
    for _ in range(40):
        q = QTable(w0, qtype)
        new, _, _ = torch_step(stored_as_f32(q), c)
        u = new.numpy()
        lo, hi = neighbours(u, qtype)
        p = np.where(lo == u, 0.0, (np.abs(u.astype(np.float64)) - np.abs(lo.astype(np.float64)))
                     / (np.abs(hi.astype(np.float64)) - np.abs(lo.astype(np.float64))))
        q.sgd_step_bag(lr=c["lr"], rounding=STOCHASTIC, generator=gen, **bag_args(c))
        got = stored_as_f32(q)
        ups += int(np.sum((got == hi) & (lo != u)))
        expect += float(p.sum())
        var += float((p * (1 - p)).sum())
        qn = QTable(w0, qtype)
        qn.sgd_step_bag(lr=c["lr"], rounding=NEAREST, **bag_args(c))
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
        rounding = STOCHASTIC if i % 2 else NEAREST
        a, b = QTable(w, qtype), QTable(w, qtype)
        ga, gb = emb.Generator(100 + i), emb.Generator(100 + i)
        a.sgd_step_bag(lr=c["lr"], rounding=rounding, generator=ga, **bag_args(c))
        unfused(b, c, c["lr"], rounding, gb)
        assert np.array_equal(qbytes(a), qbytes(b))
        assert ga.random() == gb.random()


def unfused(q, c, lr, rounding, gen):
    rows, values = q.backward_sparse(**bag_args(c))
    q.sgd_step(rows, values, lr, rounding=rounding, generator=gen)


def fused(q, c, lr, rounding, gen):
    q.sgd_step_bag(lr=lr, rounding=rounding, generator=gen, **bag_args(c))


def test_refusals_are_the_same_and_change_nothing(tmp_path):
    rng = np.random.default_rng(50)
    w = rand_weights(rng, 5, 4)
    w[2, 1] = 65000.0
    base = dict(mode="sum", idx=np.array([2, 1]), off=np.array([0]), last=False, pad=None,
                psw=None, go=np.ones((1, 4), np.float32), lr=0.5)
    path = tmp_path / "t.safetensors"
    src = QTable(w, "f16")
    src.save(path)
    cases = [
        ("int8", base, 0.5, NEAREST, emb.UnsupportedError, "int8 table is not trained"),
        ("f16", base, -1.0, NEAREST, emb.InvalidArgumentError, "Invalid learning rate"),
        ("f16", base, float("nan"), NEAREST, emb.InvalidArgumentError, "Invalid learning rate"),
        # the rounding is checked by the package, before emb runs (emb's own check of an
        # unknown rounding value is tests/unit's)
        ("f16", base, 0.5, "upward", ValueError, "unknown rounding"),
        ("f16", dict(base, go=np.full((1, 4), -20000.0, np.float32)), 0.5, STOCHASTIC,
         OverflowError, "out of float16's range"),
        ("f16", dict(base, go=np.full((1, 4), -20000.0, np.float32)), 0.5, NEAREST,
         OverflowError, "out of float16's range"),
        ("f16", dict(base, mode="mean", psw=np.ones(2, np.float32)), 0.5, NEAREST,
         emb.UnsupportedError, "per_sample_weights"),
        ("f16", dict(base, go=np.ones((2, 4), np.float32)), 0.5, NEAREST, emb.ShapeError, ""),
        ("mapped", base, 0.5, NEAREST, emb.ReadOnlyError, "read-only"),
    ]
    for qtype, c, lr, rounding, cls, text in cases:
        results = []
        for step in (fused, unfused):
            q = emb.QTable.map(path) if qtype == "mapped" else QTable(w, qtype)
            before = qbytes(q)
            gen = emb.Generator(5)
            with pytest.raises(cls) as exc:
                step(q, c, lr, rounding, gen)
            msg = str(exc.value)
            assert text in msg, (qtype, step, msg)
            # emb's own refusals carry its status; the rounding name is the package's check
            assert isinstance(exc.value, emb.Error) == (rounding != "upward"), (qtype, step)
            assert np.array_equal(qbytes(q), before)
            assert gen.random() == emb.Generator(5).random()
            results.append((type(exc.value), getattr(exc.value, "status", None), msg))
        assert results[0] == results[1]
    # the overflow is one element: with a smaller step the same table trains
    q = QTable(w, "f16")
    fused(q, dict(base, go=np.full((1, 4), -1.0, np.float32)), 0.5, STOCHASTIC, None)
    assert not q.read_only
    assert emb.QTable.map(path).read_only
    assert not emb.QTable.load(path).read_only
