"""Parity of emb's reduced-precision and quantized tables (include/emb/quant.h) with PyTorch
1.13, against live torch.

Bit for bit, on random cases:
- conversion: int8 rows equal torch.ops.quantized.embedding_bag_byte_prepack, int4 rows
  embedding_bag_4bit_prepack (odd dims: the even-dim prepack of the row with its first
  value repeated, which leaves min and max unchanged; emb's unused high nibble is 0), f16
  and bf16 rows equal Tensor.half() / .bfloat16();
- lookups: int8/int4 rows equal torch's quantized bag of that one row (the dequantized
  value), f16/bf16 lookups equal F.embedding on the half / bfloat16 table, upcast;
- bags: int8/int4 sum, with and without per_sample_weights, int32/int64 indices and
  offsets, include_last_offset, 2-D input, equal embedding_bag_{byte,4bit}_rowwise_offsets;
  with padding_idx (which torch's quantized ops lack) they equal torch's op on the input
  with the padding positions removed; mean equals torch's quantized sum divided by the
  count in float32 (torch's quantized ops ignore the mode); max and the f16/bf16 bags in
  every mode equal F.embedding_bag (torch.embedding_bag, with max indices) on the torch-
  dequantized / upcast table;
- the same bits at 1 and 2 threads and with the reference kernels.
Refusals: NaN, infinities, f16/bf16 overflow, int8/int4 ranges that overflow, leave the
destination untouched.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import emb
from parity_util import FAST_KERNEL_MODE, RUN_KERNEL_MODE, assert_close

torch.set_num_threads(1)
Q = torch.ops.quantized


def rand_table(rng, V, D):
    """Rows on very different scales, with constant rows, zero rows and signed zeros."""
    w = rng.standard_normal((V, D)).astype(np.float32)
    w *= (10.0 ** rng.uniform(-4, 4, (V, 1))).astype(np.float32)
    for r in range(V):
        k = rng.integers(0, 8)
        if k == 0:
            w[r] = w[r, 0]
        elif k == 1:
            w[r] = 0.0
            w[r, rng.integers(0, D)] = -0.0
        elif k == 2:
            w[r, rng.integers(0, D, max(1, D // 3))] = 0.0
    return w


def prepack(w, qtype):
    t = torch.from_numpy(np.ascontiguousarray(w))
    return Q.embedding_bag_byte_prepack(t) if qtype == "int8" else Q.embedding_bag_4bit_prepack(t)


def qbag_torch(packed, qtype, idx, off, psw=None, last=False):
    f = (Q.embedding_bag_byte_rowwise_offsets if qtype == "int8"
         else Q.embedding_bag_4bit_rowwise_offsets)
    return f(packed, torch.from_numpy(idx), torch.from_numpy(off), False, 0, False,
             None if psw is None else torch.from_numpy(psw), None, last).numpy()


def torch_dequant(packed, qtype, V):
    """torch's own dequantized table: each row as a bag of itself."""
    ar = np.arange(V, dtype=np.int64)
    return qbag_torch(packed, qtype, ar, ar)


def QTable(w, qtype):
    return emb.QTable.quantize(np.ascontiguousarray(w, np.float32), qtype)


def qbytes(q):
    """The stored rows as uint8 [V, row_nbytes] (a copy)."""
    return np.asarray(q).copy()


def opts(mode, padding_idx=None, last=False):
    """The bag options of QTable.bag (torch's names)."""
    return dict(mode=mode, padding_idx=padding_idx, include_last_offset=last)


def rand_bags(rng, V, n_max=40, B_max=7):
    n = int(rng.integers(0, n_max))
    idx = rng.integers(0, V, n)
    B = int(rng.integers(1, B_max))
    off = np.sort(rng.integers(0, n + 1, B))
    off[0] = 0
    return idx, off


@pytest.mark.parametrize("qtype", ["int8", "int4"])
def test_quantize_matches_prepack(qtype):
    rng = np.random.default_rng(1 if qtype == "int8" else 2)
    for case in range(400):
        V, D = int(rng.integers(0, 12)), int(rng.integers(1, 70))
        w = rand_table(rng, V, D)
        got = qbytes(QTable(w, qtype))
        if qtype == "int8" or D % 2 == 0:
            want = prepack(w, qtype).numpy() if V else np.zeros((0, got.shape[1]), np.uint8)
            assert_close(got, want, exact=True, what=f"case {case} {V}x{D}")
        else:
            wp = np.concatenate([w, w[:, :1]], axis=1)
            want = prepack(wp, qtype).numpy() if V else np.zeros((0, got.shape[1]), np.uint8)
            nb = (D + 1) // 2
            assert_close(got[:, nb:], want[:, nb:], exact=True, what=f"case {case} scale/bias")
            assert_close(got[:, :nb - 1], want[:, :nb - 1], exact=True, what=f"case {case}")
            assert_close(got[:, nb - 1] & 15, want[:, nb - 1] & 15, exact=True)
            assert (got[:, nb - 1] >> 4 == 0).all(), "the unused high nibble must be 0"


@pytest.mark.parametrize("qtype", ["f16", "bf16"])
def test_half_conversion_matches_torch(qtype):
    rng = np.random.default_rng(3)
    for case in range(100):
        V, D = int(rng.integers(0, 10)), int(rng.integers(0, 40))
        w = (rng.standard_normal((V, D)) * 10.0 ** rng.uniform(-8, 4)).astype(np.float32)
        t = torch.from_numpy(w)
        want = (t.half() if qtype == "f16" else t.bfloat16()).view(torch.int16).numpy()
        got = qbytes(QTable(w, qtype)).view(np.int16).reshape(V, D)
        assert_close(got, want, exact=True, what=f"case {case}")


@pytest.mark.parametrize("qtype", ["f32", "f16", "bf16", "int8", "int4"])
def test_lookup(qtype):
    rng = np.random.default_rng(4)
    for case in range(60):
        V, D = int(rng.integers(1, 20)), int(rng.integers(1, 40)) * (2 if qtype == "int4" else 1)
        w = rand_table(rng, V, D)
        q = QTable(w, qtype)
        shape = tuple(int(s) for s in rng.integers(0, 5, int(rng.integers(0, 4))))
        idx = rng.integers(0, V, shape).astype(np.int64 if case % 2 else np.int32)
        if qtype in ("int8", "int4"):
            table = torch_dequant(prepack(w, qtype), qtype, V)
        else:
            t = torch.from_numpy(w)
            table = {"f32": t, "f16": t.half(), "bf16": t.bfloat16()}[qtype]
        want = F.embedding(torch.from_numpy(idx.astype(np.int64)),
                           torch.as_tensor(table)).float().numpy()
        assert_close(q.forward(idx), want, exact=True, what=f"case {case}")
        assert_close(q.dequantize(), torch.as_tensor(table).float().numpy(), exact=True)


@pytest.mark.parametrize("qtype", ["int8", "int4"])
def test_quantized_sum_matches_torch_ops(qtype):
    rng = np.random.default_rng(5 if qtype == "int8" else 6)
    for case in range(500):
        V, D = int(rng.integers(1, 30)), int(rng.integers(1, 33)) * 2
        w = rand_table(rng, V, D)
        p = prepack(w, qtype)
        q = QTable(w, qtype)
        idx, off = rand_bags(rng, V)
        idt = np.int32 if case % 3 == 0 else np.int64
        odt = np.int32 if case % 5 == 0 else np.int64
        idx, off = idx.astype(idt), off.astype(odt)
        psw = rng.standard_normal(len(idx)).astype(np.float32) if case % 2 else None
        last = case % 4 == 1
        o = off if not last else np.append(off, len(idx)).astype(odt)
        want = qbag_torch(p, qtype, idx, o, psw, last)
        got = q.bag(idx, o, psw, **opts("sum", last=last))
        assert_close(got, want, exact=True, what=f"case {case} {V}x{D}")
        if psw is None:
            counts = np.diff(np.append(off, len(idx))).astype(np.float32)
            mean_want = (torch.from_numpy(want) /
                         torch.from_numpy(np.maximum(counts, 1)[:, None])).numpy()
            got = q.bag(idx, o, None, **opts("mean", last=last))
            assert_close(got, mean_want, exact=True, what=f"case {case} mean")


@pytest.mark.parametrize("qtype", ["int8", "int4"])
def test_quantized_2d_and_padding(qtype):
    rng = np.random.default_rng(7)
    for case in range(200):
        V, D = int(rng.integers(2, 20)), int(rng.integers(1, 17)) * 2
        w = rand_table(rng, V, D)
        p, q = prepack(w, qtype), QTable(w, qtype)
        B, L = int(rng.integers(1, 5)), int(rng.integers(1, 6))
        idx2 = rng.integers(0, V, (B, L))
        psw = rng.standard_normal((B, L)).astype(np.float32) if case % 2 else None
        flat_off = np.arange(0, B * L, L)
        want = qbag_torch(p, qtype, idx2.ravel(), flat_off,
                          None if psw is None else psw.ravel())
        assert_close(q.bag(idx2, None, psw, **opts("sum")), want, exact=True, what="2-D")
        # padding_idx: torch's quantized ops have none; the same op without those positions
        pad = int(rng.integers(0, V))
        idx, off = rand_bags(rng, V)
        idx[rng.random(len(idx)) < 0.3] = pad
        psw1 = rng.standard_normal(len(idx)).astype(np.float32) if case % 2 else None
        keep = idx != pad
        ends = np.append(off[1:], len(idx))
        kept_off = np.array([keep[:s].sum() for s in off], np.int64)
        want = qbag_torch(p, qtype, idx[keep], kept_off,
                          None if psw1 is None else psw1[keep])
        assert_close(q.bag(idx, off, psw1, **opts("sum", padding_idx=pad)), want, exact=True,
                     what=f"case {case} padding")
        neg = pad - V
        assert_close(q.bag(idx, off, psw1, **opts("sum", padding_idx=neg)), want, exact=True)
        counts = np.array([keep[s:e].sum() for s, e in zip(off, ends)], np.float32)
        if psw1 is None:
            mean_want = (torch.from_numpy(want) /
                         torch.from_numpy(np.maximum(counts, 1)[:, None])).numpy()
            assert_close(q.bag(idx, off, None, **opts("mean", padding_idx=pad)), mean_want,
                         exact=True, what="mean with padding")


@pytest.mark.parametrize("qtype", ["f32", "f16", "bf16", "int8", "int4"])
def test_bags_against_embedding_bag_on_dequantized_table(qtype):
    """max for every type; sum and mean too for the float types, per_sample_weights and
    padding included."""
    rng = np.random.default_rng(8)
    modes = ["max"] if qtype in ("int8", "int4") else ["sum", "mean", "max"]
    for case in range(300):
        V, D = int(rng.integers(1, 20)), int(rng.integers(1, 20)) * 2
        w = rand_table(rng, V, D)
        q = QTable(w, qtype)
        if qtype in ("int8", "int4"):
            table = torch.from_numpy(torch_dequant(prepack(w, qtype), qtype, V))
        else:
            t = torch.from_numpy(w)
            table = {"f32": t, "f16": t.half().float(), "bf16": t.bfloat16().float()}[qtype]
        idx, off = rand_bags(rng, V)
        mode = modes[case % len(modes)]
        pad = int(rng.integers(0, V)) if case % 3 == 0 else None
        psw = (rng.standard_normal(len(idx)).astype(np.float32)
               if mode == "sum" and case % 2 else None)
        res = torch.embedding_bag(table, torch.from_numpy(idx), torch.from_numpy(off), False,
                                  {"sum": 0, "mean": 1, "max": 2}[mode], False,
                                  None if psw is None else torch.from_numpy(psw), False,
                                  pad)
        if mode == "max":
            got, mi = q.bag(idx, off, None, **opts(mode, pad), return_max_indices=True)
            assert_close(got, res[0].numpy(), exact=True, what=f"case {case} max")
            # torch's max indices of an empty bag are -1 in 1.13's forward-only path; emb
            # gives 0 (as emb_bag_forward); compare the non-empty bags
            full = np.array([n > 0 for n in res[2].numpy()])
            assert_close(mi[full], res[3].numpy()[full], exact=True, what="max indices")
        else:
            got = q.bag(idx, off, psw, **opts(mode, pad))
            assert_close(got, res[0].numpy(), exact=True, what=f"case {case} {mode}")


@pytest.mark.parametrize("qtype", ["f16", "int8", "int4"])
def test_threads_and_kernels_agree(qtype):
    rng = np.random.default_rng(9)
    V, D = 5000, 64
    w = rand_table(rng, V, D)
    q = QTable(w, qtype)
    idx = rng.integers(0, V, 40000)
    off = np.arange(0, 40000, 20)
    psw = rng.standard_normal(40000).astype(np.float32)
    runs = []
    for nt, mode in ((1, FAST_KERNEL_MODE), (2, FAST_KERNEL_MODE), (2, "ref")):
        emb.set_num_threads(nt)
        emb.set_kernel_mode(mode)
        try:
            runs.append((q.forward(idx), q.bag(idx, off, psw, **opts("sum")),
                         q.bag(idx, off, None, **opts("max")), q.dequantize()))
        finally:
            emb.set_num_threads(0)
            emb.set_kernel_mode(RUN_KERNEL_MODE)
    for r in runs[1:]:
        for a, b in zip(runs[0], r):
            assert_close(b, a, exact=True)


@pytest.mark.parametrize("qtype", ["f16", "bf16", "int8", "int4"])
def test_refusals_leave_destination_untouched(qtype):
    rb = emb.qtype_row_nbytes(qtype, 4)
    bad_rows = [[1.0, float("nan"), 2.0, 3.0], [1.0, float("inf"), 0.0, 0.0],
                [-float("inf"), 1.0, 1.0, 1.0]]
    if qtype == "f16":
        bad_rows.append([70000.0, 0.0, 0.0, 0.0])
    if qtype == "bf16":
        bad_rows.append([3.4e38, 0.0, 0.0, 0.0])
    if qtype in ("int8", "int4"):
        bad_rows.append([3e38, -3e38, 0.0, 0.0])
    if qtype == "int4":
        bad_rows.append([-1e5, 0.0, 0.0, 0.0])   # the float16 bias overflows
        bad_rows.append([-6e4, 6e4, 0.0, 0.0])   # range / 15 fits, but ... see below
    for row in bad_rows:
        src = np.array([[0.5, 0.25, 0.0, -1.0], row], np.float32)
        dst = np.full(2 * rb, 0xAB, np.uint8)
        if row == [-6e4, 6e4, 0.0, 0.0]:
            # range 1.2e5: its scale 8000 fits in float16, so the row is accepted
            assert emb.quantize_rows(src, qtype, out=dst) is dst
            continue
        with pytest.raises(emb.InvalidArgumentError) as exc:
            emb.quantize_rows(src, qtype, out=dst)
        assert "row 1" in str(exc.value), (row, str(exc.value))
        assert (dst == 0xAB).all(), "nothing may be written on a refusal"
        with pytest.raises(emb.InvalidArgumentError):
            QTable(src, qtype)


def test_read_only_and_index_errors():
    rng = np.random.default_rng(10)
    w = rand_table(rng, 6, 8)
    q = QTable(w, "int8")
    before = qbytes(q)
    # (the C calls leave a caller's output untouched on these errors: the package returns
    # no output then; tests/unit/test_quant.c checks the C side)
    with pytest.raises(emb.ReadOnlyError) as exc:
        q.bag(np.array([1, 2]), np.array([0]), max_norm=1.0, **opts("sum"))
    assert "max_norm" in str(exc.value)
    with pytest.raises(emb.IndexOutOfRangeError) as exc:
        q.bag(np.array([1, 6]), np.array([0]), **opts("sum"))
    assert "6" in str(exc.value)
    with pytest.raises(emb.IndexOutOfRangeError):
        q.forward(np.array([0, -1]))
    assert np.array_equal(qbytes(q), before)


def test_error_metrics_against_numpy():
    rng = np.random.default_rng(11)
    w = rand_table(rng, 50, 24)
    for qtype in ("f16", "bf16", "int8", "int4"):
        q = QTable(w, qtype)
        deq = q.dequantize().astype(np.float64)
        e = q.error(w)
        x = w.astype(np.float64)
        diff = np.abs(x - deq)
        na, nb = np.linalg.norm(x, axis=1), np.linalg.norm(deq, axis=1)
        cos = np.where((na == 0) | (nb == 0), (na == nb).astype(float),
                       (x * deq).sum(1) / np.where(na * nb == 0, 1, na * nb))
        assert e["rows"] == 50 and e["elements"] == 50 * 24
        assert e["max_abs"] == pytest.approx(diff.max(), rel=1e-12, abs=0)
        assert e["mean_abs"] == pytest.approx(diff.mean(), rel=1e-9)
        assert e["mean_cosine"] == pytest.approx(cos.mean(), rel=1e-9)


@pytest.mark.parametrize("qtype", ["f16", "int8", "int4"])
def test_knn_on_quantized_table_equals_knn_on_its_dequantized_rows(qtype):
    """A Knn index over a QTable reads the quantized rows directly; its neighbours and scores
    are those of a Knn index over the dequantized float32 table, bit for bit, and those
    of a float64 numpy cosine ranking within float32 tolerance."""
    rng = np.random.default_rng(12)
    V, D, Qn, k = 5000, 40, 70, 10   # more rows than one 2048-row block
    w = rng.standard_normal((V, D)).astype(np.float32)
    q = QTable(w, qtype)
    deq = q.dequantize()
    queries = rng.standard_normal((Qn, D)).astype(np.float32)
    res = []
    for source in (q, deq):
        index = emb.Knn(source, 4000)
        ids, sc = index.search(queries, k)
        abc = rng.integers(0, V, (5, 3)) if not res else res[0][2]
        aids, asc = index.analogy(np.ascontiguousarray(abc), k)
        res.append((ids, sc, abc, aids, asc))
    (i1, s1, _, a1, as1), (i2, s2, _, a2, as2) = res
    assert_close(i1, i2, exact=True, what="ids")
    assert_close(s1, s2, exact=True, what="scores")
    assert_close(a1, a2, exact=True, what="analogy ids")
    assert_close(as1, as2, exact=True, what="analogy scores")
    x = deq[:4000].astype(np.float64)
    cos = (queries @ x.T) / np.outer(np.linalg.norm(queries, axis=1), np.linalg.norm(x, axis=1))
    top = np.sort(cos, axis=1)[:, ::-1][:, :k]
    assert_close(s1, top.astype(np.float32), rtol=1e-5, atol=1e-6, what="scores vs float64")
