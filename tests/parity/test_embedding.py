"""Parity of nn.Embedding construction and forward with PyTorch 1.13 (bit-exact).

Covers emb_embedding_create (normal_ init, padding row, the shared Box-Muller cache),
from_pretrained, forward / F.embedding on index tensors of rank 0..8 (int64 and int32),
max_norm renormalisation for many norm types, torch.embedding_renorm_, thread-count
independence, and the bad-input contract (status, message, nothing changed). Every expected
value is produced by torch during the test."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import emb
from parity_util import assert_close

torch.set_num_threads(1)


# ---- helpers ---------------------------------------------------------------------------

def pretrained(w, freeze=True, **kw):
    """Embedding.from_pretrained over a copy of w (the table shares the array it is given,
    as torch's from_pretrained shares its tensor; the tests keep w as it was)."""
    return emb.Embedding.from_pretrained(w.copy(), freeze=freeze, **kw)


def weight(e):
    """A copy of a table's weight."""
    return np.array(e.weight)


def refused(fn, *args, error, **kw):
    """The message of the emb.Error of class `error` that fn(*args, **kw) raises."""
    with pytest.raises(emb.Error) as ei:
        fn(*args, **kw)
    assert type(ei.value) is error, (type(ei.value), str(ei.value))
    return str(ei.value)


def bits_equal(a, b):
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


# ---- initialisation --------------------------------------------------------------------

def test_seed000_table():
    """The seed notebook 000: manual_seed(0); nn.Embedding(6, 2)."""
    torch.manual_seed(0)
    want = torch.nn.Embedding(6, 2).weight.detach().numpy()
    emb.manual_seed(0)
    e = emb.Embedding(6, 2)
    got = weight(e)
    assert_close(got, want, exact=True, what="seed000 weight")
    # the notebook's printed values (torch's output, 4 decimals)
    printed = [[1.5410, -0.2934], [-2.1788, 0.5684], [-1.0845, -1.3986], [0.4033, 0.8380],
               [-0.7193, -0.4033], [-0.5966, 0.1820]]
    assert np.array_equal(np.round(got.astype(np.float64), 4), np.array(printed))
    # forward of each token, as the notebook does
    for i in range(6):
        out = e.forward(np.array([i], np.int64))
        assert_close(out, want[i:i + 1], exact=True, what=f"seed000 token {i}")


def test_init_random_shapes():
    rng = np.random.default_rng(1234)
    cases = 0
    for _ in range(3000):
        V = int(rng.integers(1, 65))
        D = int(rng.integers(1, 65))
        seed = int(rng.integers(0, 2 ** 63))
        kind = rng.integers(0, 3)
        pad = None if kind == 0 else int(rng.integers(0, V)) if kind == 1 else \
            -int(rng.integers(1, V + 1))
        torch.manual_seed(seed)
        m = torch.nn.Embedding(V, D, padding_idx=pad)
        emb.manual_seed(seed)
        e = emb.Embedding(V, D, padding_idx=pad)
        assert_close(weight(e), m.weight.detach().numpy(), exact=True,
                     what=f"init V={V} D={D} seed={seed} pad={pad}")
        assert e.padding_idx == m.padding_idx
        assert e.requires_grad
        cases += 1
    assert cases == 3000


@pytest.mark.parametrize("V,D,pad", [(1000, 300, None), (1000, 300, 7), (1000, 300, -1),
                                     (3, 5, None), (1, 16, 0), (1, 1, -1), (17, 1, 16)])
def test_init_large_and_edges(V, D, pad):
    for seed in (0, 1, 42, 2 ** 32 + 5, 2 ** 64 - 1):
        torch.manual_seed(seed)
        m = torch.nn.Embedding(V, D, padding_idx=pad)
        emb.manual_seed(seed)
        e = emb.Embedding(V, D, padding_idx=pad)
        w = weight(e)
        assert_close(w, m.weight.detach().numpy(), exact=True, what=f"init {V}x{D} seed {seed}")
        if pad is not None:
            assert not w[pad].any()
            assert np.signbit(w[pad]).sum() == 0  # +0.0, like fill_(0)


def test_init_successive_without_reseed():
    """The Box-Muller cache of the scalar path is shared across creations (docs/semantics.md
    §2.3): sequences of small and large tables after one seed must match torch's stream,
    cache included."""
    rng = np.random.default_rng(99)
    for trial in range(150):
        seed = int(rng.integers(0, 2 ** 32))
        shapes = []
        for _ in range(int(rng.integers(2, 7))):
            if rng.random() < 0.6:
                V, D = int(rng.integers(1, 5)), int(rng.integers(1, 4))  # numel < 16
            else:
                V, D = int(rng.integers(1, 30)), int(rng.integers(1, 30))
            shapes.append((V, D))
        torch.manual_seed(seed)
        want = [torch.nn.Embedding(V, D).weight.detach().numpy().copy() for V, D in shapes]
        emb.manual_seed(seed)
        for (V, D), w in zip(shapes, want):
            e = emb.Embedding(V, D)
            assert_close(weight(e), w, exact=True, what=f"trial {trial} {shapes}")
    # the classic case: Embedding(1,1) twice gives cos then sin of one pair
    torch.manual_seed(3)
    a = torch.nn.Embedding(1, 1).weight.item()
    b = torch.nn.Embedding(1, 1).weight.item()
    emb.manual_seed(3)
    assert weight(emb.Embedding(1, 1))[0, 0] == np.float32(a)
    assert weight(emb.Embedding(1, 1))[0, 0] == np.float32(b)


def test_init_with_generator():
    """opts.generator: the same numbers as normal_ with a torch.Generator of that seed; the
    default generator is not touched."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        V, D = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        seed = int(rng.integers(0, 2 ** 63))
        g = torch.Generator().manual_seed(seed)
        want = torch.empty(V, D).normal_(0, 1, generator=g).numpy()
        gen = emb.Generator(seed)
        emb.manual_seed(11)
        e = emb.Embedding(V, D, generator=gen)
        assert_close(weight(e), want, exact=True, what=f"generator init {V}x{D}")
        # the default generator was not touched: it still starts the stream of seed 11
        torch.manual_seed(11)
        first = torch.nn.Embedding(2, 9).weight.detach().numpy()
        assert_close(weight(emb.Embedding(2, 9)), first, exact=True, what="default generator")


def test_create_error_consumes_no_randomness():
    emb.manual_seed(77)
    for args, status in [((0, 3, {}), emb.InvalidArgumentError),
                         ((3, 0, {}), emb.InvalidArgumentError),
                         ((3, 2, dict(padding_idx=3)), emb.InvalidArgumentError),
                         ((3, 2, dict(max_norm=-1.0)), emb.InvalidArgumentError),
                         ((2 ** 62, 2 ** 3, {}), emb._emb.OverflowError_)]:
        V, D, kw = args
        refused(emb.Embedding, V, D, error=status, **kw)
    torch.manual_seed(77)
    want = torch.nn.Embedding(4, 5).weight.detach().numpy()
    assert_close(weight(emb.Embedding(4, 5)), want, exact=True, what="after failed creates")


# ---- from_pretrained -------------------------------------------------------------------

def test_from_pretrained():
    rng = np.random.default_rng(7)
    for _ in range(200):
        V, D = int(rng.integers(1, 50)), int(rng.integers(1, 50))
        w = rng.standard_normal((V, D)).astype(np.float32)
        pad = None if rng.random() < 0.5 else int(rng.integers(-V, V))
        freeze = bool(rng.random() < 0.5)
        m = torch.nn.Embedding.from_pretrained(torch.tensor(w), freeze=freeze, padding_idx=pad)
        emb.manual_seed(1)
        shared = w.copy()
        e = emb.Embedding.from_pretrained(shared, freeze, padding_idx=pad)
        assert_close(weight(e), m.weight.detach().numpy(), exact=True, what="pretrained")
        assert e.requires_grad == m.weight.requires_grad
        assert e.padding_idx == m.padding_idx
        idx = rng.integers(0, V, size=(3, 4))
        assert_close(e.forward(idx), m(torch.tensor(idx)).detach().numpy(), exact=True,
                     what="pretrained forward (padding row returned as stored)")
        # a view of the array, as torch's from_pretrained is of its tensor
        shared[0, 0] += 1
        assert weight(e)[0, 0] == shared[0, 0] != w[0, 0]
        t = torch.from_numpy(w.copy())
        torch.nn.Embedding.from_pretrained(t, freeze=freeze).weight.data[0, 0] += 1
        assert t[0, 0] != w[0, 0]
    # no randomness consumed
    torch.manual_seed(1)
    want = torch.nn.Embedding(3, 3).weight.detach().numpy()
    assert_close(weight(emb.Embedding(3, 3)), want, exact=True, what="after from_pretrained")


def test_from_pretrained_keeps_special_values():
    w = np.array([[np.nan, -0.0, np.inf], [-np.inf, 1e-45, -1e38]], np.float32)
    w.view(np.uint32)[0, 0] = 0x7fc12345  # NaN payload
    e = pretrained(w, False, padding_idx=0)
    assert bits_equal(weight(e), w)
    out = e.forward(np.array([[1, 0], [0, 0]], np.int64))
    want = F.embedding(torch.tensor([[1, 0], [0, 0]]), torch.tensor(w)).numpy()
    assert bits_equal(out, want)


# ---- forward ---------------------------------------------------------------------------

def random_shape(rng, rank):
    hi = {0: 1, 1: 40, 2: 9, 3: 6, 4: 4, 5: 3, 6: 3, 7: 2, 8: 2}[rank]
    return tuple(int(rng.integers(0 if rng.random() < 0.05 else 1, hi + 1))
                 for _ in range(rank))


def test_forward_ranks_and_dtypes():
    rng = np.random.default_rng(2024)
    cases = 0
    for trial in range(3000):
        V, D = int(rng.integers(1, 70)), int(rng.integers(1, 70))
        w = (rng.standard_normal((V, D)) * 3).astype(np.float32)
        rank = int(rng.integers(0, 9))
        shape = random_shape(rng, rank)
        dt = np.int64 if rng.random() < 0.5 else np.int32
        idx = rng.integers(0, V, size=shape).astype(dt)
        want = F.embedding(torch.from_numpy(idx), torch.tensor(w)).numpy()
        e = pretrained(w, False)
        got = e.forward(idx)
        assert_close(got, want, exact=True, what=f"forward rank {rank} shape {shape} {dt}")
        # the functional form on a caller weight (F.embedding); its shape is the output
        # shape (assert_close compares shapes first)
        assert_close(emb.embedding(w, idx), want, exact=True, what="emb.embedding")
        cases += 1
    assert cases == 3000


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dt", [np.int64, np.int32])
def test_forward_large_threaded(threads, dt):
    """Parallel, prefetching path (n*D > 32K, table > 4 MB): identical to torch for any thread
    count."""
    rng = np.random.default_rng(8)
    V, D = 70000, 20
    w = rng.standard_normal((V, D)).astype(np.float32)
    idx = rng.integers(0, V, size=(300, 170)).astype(dt)
    want = F.embedding(torch.from_numpy(idx), torch.tensor(w)).numpy()
    emb.set_num_threads(threads)
    try:
        e = pretrained(w, False)
        assert_close(e.forward(idx), want, exact=True, what=f"large forward, {threads} threads")
    finally:
        emb.set_num_threads(0)


# ---- max_norm --------------------------------------------------------------------------

NORM_TYPES = [1.0, 2.0, 3.0, math.inf, 0.5, 0.0, -1.0, -math.inf, 1.5, 4.0]


@pytest.mark.parametrize("p", NORM_TYPES)
def test_forward_max_norm(p):
    """Module forward with max_norm: the output and the whole weight after the call, with
    heavy duplicates among the indices."""
    rng = np.random.default_rng(int(1000 * (p if math.isfinite(p) else 77 * np.sign(p))) & 0xffff)
    renormed = 0
    for trial in range(300):
        V, D = int(rng.integers(1, 40)), int(rng.integers(1, 300))
        scale = float(rng.choice([0.01, 0.3, 1.0, 5.0]))
        w = (rng.standard_normal((V, D)) * scale).astype(np.float32)
        if p == 0.0:
            max_norm = float(rng.integers(1, D + 1)) - 0.5
        elif p < 0:  # negative-p "norms" are at most min |x|
            max_norm = float(rng.choice([0.001, 0.005, 0.02, 0.1]))
        else:
            max_norm = float(rng.choice([0.1, 0.5, 1.0, 2.0, 10.0]))
        hot = rng.integers(0, V, size=3)
        shape = random_shape(rng, int(rng.integers(1, 4)))
        idx = np.where(rng.random(shape) < 0.6, rng.choice(hot, size=shape),
                       rng.integers(0, V, size=shape)).astype(
            np.int64 if rng.random() < 0.5 else np.int32)
        pad = None if rng.random() < 0.7 else int(rng.integers(0, V))
        m = torch.nn.Embedding.from_pretrained(torch.tensor(w), freeze=False, max_norm=max_norm,
                                               norm_type=p, padding_idx=pad)
        want = m(torch.from_numpy(idx)).detach().numpy()
        want_w = m.weight.detach().numpy()
        e = pretrained(w, False, max_norm=max_norm, norm_type=p, padding_idx=pad)
        got = e.forward(idx)
        assert_close(got, want, exact=True, what=f"max_norm p={p} output")
        assert_close(weight(e), want_w, exact=True, what=f"max_norm p={p} weight")
        renormed += int((want_w != w).any(axis=1).sum())
    assert renormed > 100  # the cases exercise the rescaling, not only the no-op


@pytest.mark.parametrize("p", NORM_TYPES + [7.3, 0.1, -2.5])
def test_renorm_functional(p):
    rng = np.random.default_rng(31 + int(abs(p) * 10 if math.isfinite(p) else 999))
    for trial in range(120):
        V, D = int(rng.integers(1, 30)), int(rng.integers(1, 260))
        w = (rng.standard_normal((V, D)) * float(rng.choice([0.05, 1, 20]))).astype(np.float32)
        idx = rng.integers(0, V, size=int(rng.integers(0, 60))).astype(
            np.int64 if trial % 2 else np.int32)
        max_norm = float(rng.choice([0.25, 1.0, 3.0, 50.0]))
        wt = torch.tensor(w)
        torch.embedding_renorm_(wt, torch.from_numpy(idx), max_norm, p)
        mine = w.copy()
        emb.embedding_renorm_(mine, idx, max_norm, p)
        assert_close(mine, wt.numpy(), exact=True, what=f"renorm_ p={p}")


def test_renorm_long_rows():
    """Rows of >= 32768 elements: torch (1 thread, as in this module) reduces them in order,
    as emb does. (With several torch threads, PyTorch splits the p != 2 sums per thread and
    its result depends on the thread count; emb's does not.)"""
    rng = np.random.default_rng(3)
    for p in (1.0, 2.0, 3.0, 0.5, math.inf):
        w = rng.standard_normal((3, 40000)).astype(np.float32)
        idx = np.array([2, 0, 2])
        wt = torch.tensor(w)
        torch.embedding_renorm_(wt, torch.from_numpy(idx), 2.0, p)
        mine = w.copy()
        emb.embedding_renorm_(mine, idx, 2.0, p)
        assert_close(mine, wt.numpy(), exact=True, what=f"long rows p={p}")
        assert not bits_equal(mine, w)


def test_renorm_examples_from_reference():
    """docs/semantics.md §5.3: [3,4] with max_norm 1 -> [0.6000000238, 0.8000000119]; a
    p=-1 case; a row exactly at max_norm is untouched; special values."""
    for row, mx, p in [([3, 4], 1.0, 2.0), ([3, -4], 1.0, -1.0), ([3, 4], 5.0, 2.0),
                       ([np.nan, 1], 0.5, 2.0), ([np.inf, 1], 0.5, 2.0), ([np.inf, 1], 0.5, 1.0),
                       ([0, 0], 0.5, 2.0), ([0, 0, 2], 0.5, -1.0), ([1e30, 1e30], 1.0, 2.0),
                       ([1e-30, 3e-30], 1e-31, 2.0), ([0, 5, 0], 0.5, 0.0)]:
        w = np.array([row], np.float32)
        wt = torch.tensor(w)
        torch.embedding_renorm_(wt, torch.tensor([0]), mx, p)
        mine = w.copy()
        emb.embedding_renorm_(mine, np.array([0, 0]), mx, p)
        assert bits_equal(mine, wt.numpy()), (row, mx, p, mine, wt)


@pytest.mark.parametrize("threads", [1, 2])
def test_renorm_large_threaded(threads):
    """Parallel renorm over distinct rows (both the bitmap and the sort path)."""
    rng = np.random.default_rng(12)
    emb.set_num_threads(threads)
    try:
        for V, D, n in [(4000, 64, 20000), (200000, 40, 3000)]:
            w = rng.standard_normal((V, D)).astype(np.float32)
            idx = rng.integers(0, V, size=n)
            idx[: n // 2] = idx[n // 2:]  # duplicates
            m = torch.nn.Embedding.from_pretrained(torch.tensor(w), freeze=False, max_norm=5.0)
            want = m(torch.from_numpy(idx)).detach().numpy()
            e = pretrained(w, False, max_norm=5.0)
            assert_close(e.forward(idx), want, exact=True, what="large max_norm output")
            assert_close(weight(e), m.weight.detach().numpy(), exact=True,
                         what="large max_norm weight")
    finally:
        emb.set_num_threads(0)


# ---- bad inputs: exception class, message, nothing changed -----------------------------

def expect_unchanged_forward(e, idx, error, fragment):
    w0 = weight(e)
    with pytest.raises(error) as ei:
        e.forward(idx)
    msg = str(ei.value)
    assert fragment in msg, msg
    assert bits_equal(weight(e), w0)
    return msg


@pytest.mark.parametrize("np_dt,torch_dt", [(np.int16, torch.int16), (np.uint8, torch.uint8),
                                            (np.float32, torch.float32),
                                            (np.float64, torch.float64),
                                            (np.bool_, torch.bool), (np.int8, torch.int8),
                                            (np.float16, torch.float16)])
def test_bad_index_dtype_message_is_torchs(np_dt, torch_dt):
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([1, 0], dtype=np_dt)
    with pytest.raises(RuntimeError) as fwd:
        F.embedding(torch.tensor([1, 0], dtype=torch_dt), torch.tensor(w))
    with pytest.raises(RuntimeError) as ren:
        torch.embedding_renorm_(torch.tensor(w), torch.tensor([1, 0], dtype=torch_dt), 1.0, 2.0)
    e = pretrained(w, False, max_norm=1.0)
    # the module refuses the array itself, naming what it expects (docs/python.md)
    expect_unchanged_forward(e, idx, TypeError, "indices must be int64 or int32, got ")
    # F.embedding and embedding_renorm_ carry torch's message
    msg = refused(emb.embedding, w, idx, error=emb.DtypeError)
    assert msg == str(fwd.value)
    mine = w.copy()
    msg = refused(emb.embedding_renorm_, mine, idx, 1.0, 2.0, error=emb.DtypeError)
    assert msg == str(ren.value)
    assert bits_equal(mine, w)


@pytest.mark.parametrize("max_norm", [None, 0.5])
@pytest.mark.parametrize("dt", [np.int64, np.int32])
def test_bad_index_values(max_norm, dt):
    """Out-of-range indices anywhere: nothing renormalised (PyTorch renormalises row
    V-k for a negative index -k before failing; emb validates first), nothing written."""
    V, D = 10, 4
    w = np.random.default_rng(0).standard_normal((V, D)).astype(np.float32) * 3
    e = pretrained(w, False, max_norm=max_norm)
    for idx, val, pos in [([10], 10, 0), ([0, 1, -1], -1, 2), ([[1, 2], [3, 99]], 99, 3),
                          ([[1, 2], [-10, 1]], -10, 2), (5 * [3] + [2 ** 31 - 1], 2 ** 31 - 1, 5)]:
        a = np.array(idx, dtype=dt)
        msg = expect_unchanged_forward(e, a, emb.IndexOutOfRangeError, "")
        assert msg == (f"index {val} at position {pos} is out of range for an embedding with "
                       f"{V} rows (valid: [0, {V}))")
        if max_norm is not None and val < 0:
            # torch mutates the weight before failing (a deliberate difference)
            m = torch.nn.Embedding.from_pretrained(torch.tensor(w), freeze=False,
                                                   max_norm=max_norm)
            with pytest.raises(IndexError):
                m(torch.from_numpy(a.astype(np.int64)))
            assert not bits_equal(m.weight.detach().numpy(), w)
        mine = w.copy()
        msg2 = refused(emb.embedding_renorm_, mine, a, 0.5, 2.0, error=emb.IndexOutOfRangeError)
        assert msg2 == msg
        assert bits_equal(mine, w)
        msg3 = refused(emb.embedding, mine, a, error=emb.IndexOutOfRangeError)
        assert msg3 == msg and bits_equal(mine, w)


def test_bad_out_and_nulls():
    """Indices of 9 dimensions are refused and change nothing. (Output buffers of the wrong
    shape or dtype and NULL arguments exist only in the C API: tests/unit/test_embedding.c.)"""
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    e = pretrained(w, False, max_norm=1.0)
    big = np.zeros((1,) * 9, np.int64)
    expect_unchanged_forward(e, big, emb.ShapeError, "at most 8")
    assert bits_equal(weight(e), w)
    with pytest.raises(ValueError, match="more than 8 dimensions"):
        emb.embedding(w, big)


def test_bad_options_and_weights():
    cases = [
        (dict(padding_idx=5), "Padding_idx must be within num_embeddings: got padding_idx=5, "
                              "valid: [-5, 5)"),
        (dict(padding_idx=-6), "Padding_idx must be within num_embeddings: got padding_idx=-6"),
        (dict(max_norm=0.0), "max_norm must be > 0"),
        (dict(max_norm=-1.0), "max_norm must be > 0"),
        (dict(max_norm=math.nan), "max_norm must be > 0"),
        (dict(norm_type=math.nan), "norm_type must not be NaN"),
    ]
    for kw, frag in cases:
        if "padding_idx" in kw:  # torch agrees on the padding rule and the message head
            with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
                torch.nn.Embedding(5, 2, **kw)
        msg = refused(emb.Embedding, 5, 2, error=emb.InvalidArgumentError, **kw)
        assert frag in msg, msg
        w = np.ones((5, 2), np.float32)
        msg = refused(emb.Embedding.from_pretrained, w, True, error=emb.InvalidArgumentError,
                      **kw)
        assert frag in msg, msg
    with pytest.raises(AssertionError, match="Embeddings parameter is expected to be 2-dimensional"):
        torch.nn.Embedding.from_pretrained(torch.ones(3))
    with pytest.raises(ValueError, match="Embeddings parameter is expected to be 2-dimensional"):
        emb.Embedding.from_pretrained(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="float64"):
        emb.Embedding.from_pretrained(np.ones((2, 3)))
    # renorm_ argument checks
    w = np.ones((3, 2), np.float32)
    with pytest.raises(RuntimeError) as ei:
        torch.embedding_renorm_(torch.ones(3), torch.tensor([0]), 1.0, 2.0)
    msg = refused(emb.embedding_renorm_, np.ones(3, np.float32), np.array([0]), 1.0, 2.0,
                  error=emb.ShapeError)
    assert msg == str(ei.value)
    for mx, p, frag in [(0.0, 2.0, "max_norm must be > 0"), (math.nan, 2.0, "max_norm"),
                        (1.0, math.nan, "norm_type must not be NaN")]:
        mine = w.copy()
        msg = refused(emb.embedding_renorm_, mine, np.array([0, 1]), mx, p,
                      error=emb.InvalidArgumentError)
        assert frag in msg and bits_equal(mine, w)
