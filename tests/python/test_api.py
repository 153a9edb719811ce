"""The rest of the API from Python against torch and numpy at test time: optimizers (with
state save/load), losses, files, quantized tables, the k-NN index, the generator."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import emb
from conftest import same_bits

rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("kind,kw", [
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01)),
])
def test_dense_optimizers_match_torch(kind, kw):
    p0 = randn(6, 4)
    mine = p0.copy()
    ref = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = getattr(emb, kind)([mine], **kw)
    topt = getattr(torch.optim, kind)([ref], **kw)
    for step in range(5):
        g = randn(6, 4)
        opt.step(0, g)
        ref.grad = torch.from_numpy(g)
        topt.step()
        same_bits(mine, ref.detach().numpy(), f"{kind} step {step}")


@pytest.mark.parametrize("kind,kw", [("SGD", dict(lr=0.1, momentum=0.5)),
                                     ("Adagrad", dict(lr=0.1)),
                                     ("SparseAdam", dict(lr=0.01))])
def test_sparse_steps_and_state_resume(kind, kw):
    """Sparse steps equal torch's; a state saved after 3 steps and loaded into a fresh
    optimizer continues bit for bit."""
    emb.manual_seed(1)
    table = emb.Embedding(10, 3, sparse=True)
    ref = torch.nn.Parameter(torch.from_numpy(table.weight.copy()))
    opt = getattr(emb, kind)([table], **kw)
    topt = getattr(torch.optim, kind)([ref], **kw)
    copy = emb.Embedding.from_pretrained(table.weight.copy(), freeze=False)
    saved = None
    for step in range(6):
        rows = rng.integers(0, 10, 5)
        vals = randn(5, 3)
        if step == 3:
            copy.weight = table.weight
            saved = opt.state_dict()
            resumed = getattr(emb, kind)([copy], **kw)
            resumed.load_state_dict(saved)
        opt.step_sparse(0, rows, vals)
        if saved is not None:
            resumed.step_sparse(0, rows, vals)
        ref.grad = torch.sparse_coo_tensor(torch.from_numpy(rows)[None], torch.from_numpy(vals),
                                           (10, 3))
        topt.step()
        same_bits(table.weight, ref.detach().numpy(), f"{kind} step {step}")
    same_bits(copy.weight, table.weight, "resumed")
    assert opt.param_steps(0) == 6
    with pytest.raises(emb.FormatError):
        resumed.load_state_dict(saved[:-1])


def test_fused_step_equals_backward_and_step():
    emb.manual_seed(2)
    a = emb.Embedding(12, 4, sparse=True, padding_idx=0)
    b = emb.Embedding.from_pretrained(a.weight.copy(), freeze=False, padding_idx=0, sparse=True)
    oa, ob = emb.Adagrad([a], lr=0.1), emb.Adagrad([b], lr=0.1)
    idx = np.array([[0, 3, 3], [11, 2, 3]])
    up = randn(2, 3, 4)
    oa.step_fused(0, a, idx, up)
    ob.step_sparse(0, *b.backward_sparse(idx, up))
    same_bits(a.weight, b.weight, "fused")


def test_optimizer_errors():
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        emb.SGD([randn(2, 2)], lr=-1.0)
    with pytest.raises(ValueError, match="unknown optimizer"):
        emb.Optimizer("rmsprop")
    opt = emb.Adam([randn(2, 2)])
    with pytest.raises(NotImplementedError, match="Adam does not support sparse gradients"):
        opt.step_sparse(0, np.array([0]), randn(1, 2))
    with pytest.raises(IndexError):
        opt.step(3, randn(2, 2))
    with pytest.raises(ValueError, match="C-contiguous"):
        emb.SGD([randn(4, 4)[:, ::2]])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_match_torch(reduction):
    x, t = randn(5, 7), rng.integers(0, 7, 5)
    w = np.abs(randn(7))
    xt = torch.from_numpy(x).requires_grad_()
    for name, ref in [("cross_entropy", lambda a: F.cross_entropy(a, torch.from_numpy(t),
                                                                   weight=torch.from_numpy(w),
                                                                   reduction=reduction,
                                                                   label_smoothing=0.1)),
                      ]:
        got = emb.cross_entropy(x, t, weight=w, reduction=reduction, label_smoothing=0.1)
        want = ref(xt)
        torch.testing.assert_close(torch.from_numpy(np.asarray(got)), want.detach(),
                                   rtol=1.3e-6, atol=1e-5)
        gl = np.ones(want.shape, np.float32)
        want.backward(torch.from_numpy(gl))
        gx = emb.cross_entropy_backward(x, t, gl, weight=w, reduction=reduction,
                                        label_smoothing=0.1)
        torch.testing.assert_close(torch.from_numpy(gx), xt.grad, rtol=1.3e-6, atol=1e-5)
    y, target = randn(4, 3), randn(4, 3)
    torch.testing.assert_close(
        torch.from_numpy(np.asarray(emb.mse_loss(y, target, reduction=reduction))),
        F.mse_loss(torch.from_numpy(y), torch.from_numpy(target), reduction=reduction))
    pw = np.abs(randn(3))
    labels = (np.abs(target) > 0.5).astype(np.float32)
    got = emb.binary_cross_entropy_with_logits(y, labels, pos_weight=pw, reduction=reduction)
    want = F.binary_cross_entropy_with_logits(torch.from_numpy(y), torch.from_numpy(labels),
                                              pos_weight=torch.from_numpy(pw),
                                              reduction=reduction)
    torch.testing.assert_close(torch.from_numpy(np.asarray(got)), want, rtol=1.3e-6, atol=1e-5)
    lp = emb.log_softmax(x)
    torch.testing.assert_close(torch.from_numpy(lp), F.log_softmax(torch.from_numpy(x), -1),
                               rtol=1.3e-6, atol=1e-5)
    torch.testing.assert_close(
        torch.from_numpy(np.asarray(emb.nll_loss(lp, t, reduction=reduction))),
        F.nll_loss(torch.from_numpy(lp), torch.from_numpy(t), reduction=reduction))


def test_loss_errors():
    with pytest.raises(IndexError, match="Target 9 is out of bounds"):
        emb.cross_entropy(randn(2, 3), np.array([0, 9]))
    with pytest.raises(TypeError, match="target must be int64"):
        emb.cross_entropy(randn(2, 3), np.array([0, 1], np.int32))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        emb.mse_loss(randn(2), randn(2), reduction="avg")


def test_files_roundtrip(tmp_path):
    a = randn(5, 3)
    emb.save_npy(tmp_path / "a.npy", a)
    same_bits(np.load(tmp_path / "a.npy"), a, "npy written by emb, read by numpy")
    np.save(tmp_path / "b.npy", np.arange(6, dtype=np.int32).reshape(2, 3))
    same_bits(emb.load_npy(tmp_path / "b.npy"), np.arange(6, dtype=np.int32).reshape(2, 3),
              "npy written by numpy")
    emb.save_safetensors(tmp_path / "m.safetensors", {"weight": a, "ids": np.arange(4)},
                         {"note": "x"})
    tensors, meta = emb.load_safetensors(tmp_path / "m.safetensors")
    same_bits(tensors["weight"], a, "safetensors weight")
    same_bits(tensors["ids"], np.arange(4), "safetensors ids")
    assert meta["note"] == "x"
    emb.write_vectors(tmp_path / "w.vec", a, ["a", "b", "c", "d", "e"])
    words, counts, back, info = emb.read_vectors(tmp_path / "w.vec")
    assert words == ["a", "b", "c", "d", "e"] and info["format"] == "word2vec-text"
    same_bits(back, a, "word2vec text")
    with pytest.raises(OSError):
        emb.read_vectors(tmp_path / "missing.vec")
    with pytest.raises(ValueError, match="repeats"):
        emb.write_vectors(tmp_path / "x.vec", a, ["a", "a", "c", "d", "e"])


@pytest.mark.parametrize("qtype", ["f16", "bf16", "int8", "int4"])
def test_quantized_tables(qtype, tmp_path):
    w = randn(20, 8)
    q = emb.QTable.quantize(w, qtype)
    assert (q.qtype, q.num_rows, q.dim) == (qtype, 20, 8)
    deq = q.dequantize()
    idx = np.array([[3, 19], [0, 3]])
    same_bits(q.forward(idx), deq[idx], "lookup = dequantized rows")
    tw = torch.from_numpy(w)
    if qtype == "int8":  # the bytes of torch's prepack op
        ref = torch.ops.quantized.embedding_bag_byte_prepack(tw).numpy()
        same_bits(np.asarray(q), ref, "int8 rows")
    elif qtype == "f16":
        same_bits(deq, tw.half().float().numpy(), "f16")
    elif qtype == "bf16":
        same_bits(deq, tw.bfloat16().float().numpy(), "bf16")
    same_bits(q.bag(idx, mode="max"), deq[idx].max(1), "bag max")
    _, mi = q.bag(idx, mode="max", return_max_indices=True)
    same_bits(mi, np.take_along_axis(idx, deq[idx].argmax(1), 1), "bag max indices")
    q.save(tmp_path / "q.safetensors", words=[f"w{i}" for i in range(20)])
    m = emb.QTable.map(tmp_path / "q.safetensors")
    assert m.words[3] == "w3" and not np.asarray(m).flags.writeable
    same_bits(m.forward(idx), q.forward(idx), "mapped")
    with pytest.raises(ValueError, match="NaN|nan|not finite|infinite"):
        emb.QTable.quantize(np.full((2, 2), np.nan, np.float32), qtype)


def test_knn_matches_numpy():
    t = randn(300, 16)
    index = emb.Knn(t)
    q = randn(4, 16)
    ids, scores = index.search(q, 5, exclude=np.array([[0], [1], [2], [-1]]))
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (t / np.linalg.norm(t, axis=1,
                                                                               keepdims=True)).T
    for i in range(4):
        cos[i, i] = -np.inf if i < 3 else cos[i, i]
        want = np.argsort(-cos[i], kind="stable")[:5]
        assert list(ids[i]) == list(want)
        np.testing.assert_allclose(scores[i], cos[i, want], rtol=1e-5, atol=1e-6)
    small = emb.Knn(t, num_rows=10)
    assert small.num_rows == 10 and small.search(q, 3)[0].max() < 10
    with pytest.raises(ValueError):
        index.search(randn(2, 15), 3)


def test_manual_seed_and_fill_match_torch():
    emb.manual_seed(-3)
    torch.manual_seed(-3)
    a = np.empty(20, np.float32)
    emb._emb.random_fill(a, "normal", 0.5, 2.0)
    same_bits(a, torch.empty(20).normal_(0.5, 2.0).numpy(), "normal_")
    assert emb.initial_seed() == torch.initial_seed()
