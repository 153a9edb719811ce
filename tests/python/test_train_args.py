"""The package's own checks on the arguments of the optimizers' sparse and row steps, the
QTable training steps, QTableWriter and quantize_rows: the exception class and message a
Python user gets, and that a refused call changes nothing. (Their results against torch are
tests/parity/test_optim*.py and test_quant*.py.)"""
import threading

import numpy as np
import pytest

import emb


def test_step_sparse_coalesced_rows_must_ascend():
    p = np.ones((6, 2), np.float32)
    opt = emb.Adagrad([p])
    with pytest.raises(ValueError, match=r"strictly ascending rows, but rows\[2\] = 3 follows 4"):
        opt.step_sparse(0, np.array([1, 4, 3]), np.ones((3, 2), np.float32), coalesced=True)
    with pytest.raises(ValueError, match="strictly ascending"):
        opt.step_sparse(0, np.array([2, 2], np.int32), np.ones((2, 2), np.float32),
                        coalesced=True)
    assert (p == 1).all() and opt.param_steps(0) == 0
    opt.step_sparse(0, np.array([1, 3, 4]), np.ones((3, 2), np.float32), coalesced=True)
    assert opt.param_steps(0) == 1 and (p[[0, 2, 5]] == 1).all() and (p[[1, 3, 4]] < 1).all()


def test_step_sparse_shapes_and_dtypes():
    p = np.ones((6, 2), np.float32)
    opt = emb.SGD([p], lr=0.1)
    with pytest.raises(ValueError, match=r"values must be float32 \[len\(rows\), dim\] = "
                                         r"\[2, 2\], got shape \(2, 3\)"):
        opt.step_sparse(0, np.array([1, 2]), np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="rows must be 1-D, got 2 dimensions"):
        opt.step_sparse(0, np.array([[1, 2]]), np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="rows must be int64 or int32, got float64"):
        opt.step_sparse(0, np.array([1.0]), np.ones((1, 2), np.float32))
    with pytest.raises(TypeError, match="values must be float32"):
        opt.step_sparse(0, np.array([1]), np.ones((1, 2)))
    with pytest.raises(IndexError):
        opt.step_sparse(3, np.array([1]), np.ones((1, 2), np.float32))
    assert (p == 1).all() and opt.param_steps(0) == 0
    # non-contiguous values are read through a copy; the caller's arrays stay as they were
    values = np.arange(8, dtype=np.float32).reshape(2, 4)[:, ::2]
    keep = values.copy()
    opt.step_sparse(0, np.array([5, 0]), values)
    assert np.array_equal(values, keep)
    assert np.array_equal(p[5], 1 - np.float32(0.1) * keep[0])


def test_update_rows_from_threads():
    """update_rows takes no lock of the optimizer's: threads update rows concurrently, and
    disjoint rows end as one step_sparse of all the entries leaves them."""
    V, D, n = 400, 8, 4
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal((V, D)).astype(np.float32)
    grads = [rng.standard_normal((V // n, D)).astype(np.float32) for _ in range(n)]
    rows = [np.arange(k, V, n) for k in range(n)]
    hog = p0.copy()
    opt = emb.SparseAdam([hog], lr=0.01)
    opt.init_state(0)
    whole = p0.copy()
    ref = emb.SparseAdam([whole], lr=0.01)
    for _ in range(3):
        opt.advance_step(0)
        threads = [threading.Thread(target=opt.update_rows, args=(0, rows[k], grads[k]))
                   for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ref.step_sparse(0, np.concatenate(rows), np.concatenate(grads))
    assert np.array_equal(hog, whole)
    assert opt.param_steps(0) == ref.param_steps(0) == 3


def test_defaults_are_the_constructors():
    opt = emb.Adam([np.zeros(3, np.float32)], lr=0.5, betas=(0.8, 0.9), amsgrad=True)
    opt.lr = 0.25
    assert opt.lr == 0.25 and opt.kind == "adam"
    assert opt.defaults == dict(lr=0.5, betas=(0.8, 0.9), eps=1e-8, weight_decay=0.0,
                                amsgrad=True, maximize=False)


def test_qtable_step_arguments():
    w = np.ones((4, 3), np.float32)
    q = emb.QTable.quantize(w, "bf16")
    before = np.asarray(q).copy()
    g = emb.Generator(1)
    with pytest.raises(TypeError, match="generator must be an emb.Generator or None, got int"):
        q.sgd_step(np.array([1]), np.ones((1, 3), np.float32), 0.1, "stochastic", 7)
    with pytest.raises(ValueError, match="unknown rounding 'up' \\(nearest or stochastic\\)"):
        q.sgd_step_bag(np.array([1]), np.ones((1, 3), np.float32), 0.1, np.array([0]),
                       rounding="up", generator=g)
    with pytest.raises(ValueError, match=r"= \[2, 3\], got shape \(1, 3\)"):
        q.sgd_step(np.array([1, 2]), np.ones((1, 3), np.float32), 0.1)
    with pytest.raises(IndexError):
        q.sgd_step(np.array([4]), np.ones((1, 3), np.float32), 0.1)
    with pytest.raises(emb.ReadOnlyError, match="max_norm"):
        q.backward_sparse(np.array([1]), np.ones((1, 3), np.float32), np.array([0]),
                          max_norm=1.0)
    assert np.array_equal(np.asarray(q), before)
    assert g.random() == emb.Generator(1).random()
    # the default generator: the same draws as an explicit generator in the same state
    emb.manual_seed(9)
    a, b = emb.QTable.quantize(w * 1.001, "f16"), emb.QTable.quantize(w * 1.001, "f16")
    a.sgd_step(np.array([0, 3]), np.full((2, 3), 1e-3, np.float32), 0.5, "stochastic")
    b.sgd_step(np.array([0, 3]), np.full((2, 3), 1e-3, np.float32), 0.5, "stochastic",
               emb.Generator(9))
    assert np.array_equal(np.asarray(a), np.asarray(b))


def test_writer_arguments(tmp_path):
    path = tmp_path / "t.safetensors"
    with pytest.raises(emb.InvalidArgumentError, match="int7"):
        emb.QTableWriter(path, "int7", 2, 4)
    with emb.QTableWriter(path, "f16", 2, 4) as writer:
        with pytest.raises(TypeError, match="rows must be float32, got float64"):
            writer.append(np.ones((2, 4)))
        with pytest.raises(ValueError, match=r"\[n, 4\] \(the writer's dim\), got shape \(8,\)"):
            writer.append(np.ones(8, np.float32))
        writer.append(np.ones((2, 4), np.float32)[:, ::1])
        assert writer.commit()["rows"] == 2
    with pytest.raises(ValueError, match="closed"):
        writer.commit()
    assert emb.QTable.load(path).dequantize().tolist() == [[1.0] * 4] * 2


def test_quantize_rows_arguments():
    rows = np.ones((2, 4), np.float32)
    assert emb.qtype_row_nbytes("int8", 4) == 12 and emb.qtype_row_nbytes("f16", 4) == 8
    with pytest.raises(emb.InvalidArgumentError):
        emb.qtype_row_nbytes("f8", 4)
    with pytest.raises(ValueError, match="float32 \\[n, dim\\], got 1-D"):
        emb.quantize_rows(rows[0], "int8")
    with pytest.raises(TypeError, match="out must be uint8"):
        emb.quantize_rows(rows, "int8", out=np.zeros(24, np.int8))
    with pytest.raises(ValueError, match="writable"):
        emb.quantize_rows(rows, "int8", out=_read_only(np.zeros(24, np.uint8)))
    small = np.full(23, 7, np.uint8)
    with pytest.raises(emb.Error):
        emb.quantize_rows(rows, "int8", out=small)
    assert (small == 7).all()
    out = emb.quantize_rows(rows, "int8")
    assert out.shape == (2, 12) and out.dtype == np.uint8
    assert np.array_equal(out, np.asarray(emb.QTable.quantize(rows, "int8")))


def _read_only(a):
    a.flags.writeable = False
    return a
