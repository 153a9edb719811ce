"""End-to-end training of an embedding model against torch, 20 steps per case.

Model: out = emb(idx); loss = F.mse_loss(out, target) (emb's MSE forward/backward) or
loss = (out * R).sum() (output gradient R). emb side, through the package: emb.Embedding
(drawn from a seeded emb.Generator, or from_pretrained) -> forward (max_norm renormalises in
place) -> emb.mse_loss_backward -> Embedding.backward (dense) or backward_sparse /
Optimizer.step_fused (sparse) -> emb.Optimizer. torch side: nn.Embedding with the same
options and torch.optim with foreach=False. Weights are compared bit for bit after every
step, losses too."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import emb
from parity_util import assert_close
from test_optim import ADAGRAD, ADAM, ADAMW, KIND_NAMES, SGD, SPARSE_ADAM, Opt, \
    torch_optimizer, torch_step

STEPS = 20
V, D = 23, 9


class EmbModel:
    """An emb.Embedding (drawn from an emb.Generator of its own, or from_pretrained) and its
    optimizer."""

    def __init__(self, kind, cfg, seed, padding_idx, max_norm, scale_grad_by_freq, sparse,
                 pretrained=None):
        kw = dict(padding_idx=padding_idx, max_norm=max_norm,
                  scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)
        if pretrained is None:
            self.table = emb.Embedding(V, D, generator=emb.Generator(seed), **kw)
        else:  # the C from_pretrained copies; the package's shares: give it a copy
            self.table = emb.Embedding.from_pretrained(pretrained.copy(), freeze=False, **kw)
        self.weight = np.asarray(self.table)
        self.opt = Opt(kind, **cfg)
        self.pid = self.opt.o.add_param(self.table)
        self.sparse = sparse

    def forward(self, idx):
        return self.table.forward(idx)

    def step(self, idx, gout, fused=False):
        if not self.sparse:
            gw = np.zeros((V, D), np.float32)
            self.table.backward(idx, gout, grad=gw)
            self.opt.step(self.pid, gw)
        elif fused:
            self.opt.o.step_fused(self.pid, self.table, idx, gout)
        else:
            rows, values = self.table.backward_sparse(idx, gout)
            self.opt.step_sparse(self.pid, rows, values)


def emb_mse(out, target):
    """emb's F.mse_loss (mean) forward and backward: (loss, d loss / d out)."""
    loss = emb.mse_loss(out, target)
    gout = emb.mse_loss_backward(out, target, np.ones((), np.float32))
    return loss, gout


def random_indices(rng, step, padding_idx):
    shape = [(6, 7), (40,), (3, 2, 5), (1,), (5, 13)][step % 5]
    hot = rng.integers(0, V, 3)
    idx = np.where(rng.random(shape) < 0.5, rng.choice(hot, shape),
                   rng.integers(0, V, shape)).astype(np.int64)
    if padding_idx is not None and idx.size > 2:
        idx.reshape(-1)[rng.integers(0, idx.size, idx.size // 6 + 1)] = padding_idx
    if step % 3 == 1:
        idx = idx.astype(np.int32)
    return idx


def train(kind, cfg, padding_idx=None, max_norm=None, scale_grad_by_freq=False, sparse=False,
          loss="mse", fused=False, seed=0, pretrained=False):
    rng = np.random.default_rng(seed + 1000 * kind)
    w0 = (rng.standard_normal((V, D)) * 2).astype(np.float32) if pretrained else None
    em = EmbModel(kind, cfg, seed, padding_idx, max_norm, scale_grad_by_freq, sparse, w0)
    kw = dict(padding_idx=padding_idx, max_norm=max_norm,
              scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)
    if pretrained:
        tm = torch.nn.Embedding.from_pretrained(torch.from_numpy(w0.copy()), freeze=False, **kw)
    else:
        g = torch.Generator().manual_seed(seed)
        tm = torch.nn.Embedding(V, D, **kw)
        with torch.no_grad():  # nn.Embedding's init with that generator
            tm.weight.normal_(0, 1, generator=g)
            if padding_idx is not None:
                tm.weight[padding_idx].fill_(0)
    topt = torch_optimizer(kind, [tm.weight], cfg)
    assert_close(em.weight, tm.weight.detach().numpy(), exact=True, what="initial weights")
    what = f"{KIND_NAMES[kind]} {cfg} pad={padding_idx} max_norm={max_norm} " \
           f"sgbf={scale_grad_by_freq} sparse={sparse} fused={fused} loss={loss}"
    for s in range(STEPS):
        idx = random_indices(rng, s, padding_idx)
        target = rng.standard_normal(idx.shape + (D,)).astype(np.float32)
        # torch
        topt.zero_grad(set_to_none=True)
        tout = tm(torch.from_numpy(idx))
        tout.retain_grad()
        if loss == "mse":
            tloss = F.mse_loss(tout, torch.from_numpy(target))
        else:
            tloss = (tout * torch.from_numpy(target)).sum()
        tloss.backward()
        torch_step(topt, kind, tm.weight.grad)
        # emb
        out = em.forward(idx)
        assert_close(out, tout.detach().numpy(), exact=True, what=f"{what}: output, step {s}")
        if loss == "mse":
            eloss, gout = emb_mse(out, target)
            # the loss value is a reduction whose order PyTorch does not pin down: tolerance;
            # its gradient is elementwise and must be exact
            assert_close(eloss, tloss.detach().numpy(), what=f"{what}: loss, step {s}")
            assert_close(gout, tout.grad.numpy(), exact=True,
                         what=f"{what}: d loss / d out, step {s}")
        else:
            gout = target  # d/d out of (out * R).sum() is R, bit for bit
            eloss = np.float64((out.astype(np.float64) * target).sum())
            assert_close(eloss, tloss.item(), rtol=1e-5, atol=1e-4, what=f"{what}: loss {s}")
        em.step(idx, gout, fused=fused)
        assert_close(em.weight, tm.weight.detach().numpy(), exact=True,
                     what=f"{what}: weight after step {s}")
    assert em.opt.steps(em.pid) == STEPS


DENSE_OPTS = [
    (SGD, dict(lr=0.5)),
    (SGD, dict(lr=0.3, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (SGD, dict(lr=0.3, momentum=0.5, dampening=0.2, maximize=True)),
    (ADAGRAD, dict(lr=0.3, lr_decay=0.01, initial_accumulator_value=0.1, weight_decay=0.01)),
    (ADAM, dict(lr=0.05)),
    (ADAM, dict(lr=0.05, amsgrad=True, weight_decay=0.1)),
    (ADAMW, dict(lr=0.05)),
    (ADAMW, dict(lr=0.05, amsgrad=True, maximize=True, beta1=0.5, beta2=0.9)),
]
SPARSE_OPTS = [
    (SGD, dict(lr=0.5)),
    (SGD, dict(lr=0.3, momentum=0.9)),
    (SGD, dict(lr=0.3, momentum=0.9, nesterov=True)),
    (SGD, dict(lr=0.3, momentum=0.5, dampening=0.3, maximize=True)),
    (ADAGRAD, dict(lr=0.3)),
    (ADAGRAD, dict(lr=0.3, lr_decay=0.05, initial_accumulator_value=0.2, maximize=True)),
    (SPARSE_ADAM, dict(lr=0.05)),
    (SPARSE_ADAM, dict(lr=0.05, beta1=0.5, beta2=0.9, eps=1e-6)),
]
MODEL_OPTS = [  # padding_idx, max_norm, scale_grad_by_freq
    (None, None, False), (2, None, False), (None, 1.5, False), (5, 2.0, True),
    (7, None, True),
]


def ids(cases):
    return [f"{KIND_NAMES[k]}-{i}" for i, (k, _) in enumerate(cases)]


@pytest.mark.parametrize("model", MODEL_OPTS, ids=lambda m: f"pad{m[0]}-mn{m[1]}-sgbf{m[2]}")
@pytest.mark.parametrize("kind,cfg", DENSE_OPTS, ids=ids(DENSE_OPTS))
def test_dense_training(kind, cfg, model):
    pad, mn, sgbf = model
    train(kind, cfg, padding_idx=pad, max_norm=mn, scale_grad_by_freq=sgbf, sparse=False,
          loss="mse", seed=11)


@pytest.mark.parametrize("model", [m for m in MODEL_OPTS if not m[2]],
                         ids=lambda m: f"pad{m[0]}-mn{m[1]}")
@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("kind,cfg", SPARSE_OPTS, ids=ids(SPARSE_OPTS))
def test_sparse_training(kind, cfg, fused, model):
    pad, mn, _ = model
    train(kind, cfg, padding_idx=pad, max_norm=mn, sparse=True, loss="mse", fused=fused,
          seed=12)


@pytest.mark.parametrize("kind,cfg,sparse", [
    (SGD, dict(lr=0.1, momentum=0.9), False), (SGD, dict(lr=0.1, momentum=0.9), True),
    (ADAGRAD, dict(), False), (ADAGRAD, dict(), True), (ADAM, dict(lr=0.01), False),
    (ADAMW, dict(lr=0.01), False), (SPARSE_ADAM, dict(lr=0.01), True)],
    ids=["SGD-dense", "SGD-sparse", "Adagrad-dense", "Adagrad-sparse", "Adam", "AdamW",
         "SparseAdam"])
def test_sum_loss_pretrained(kind, cfg, sparse):
    """loss = (out * R).sum() on a from_pretrained table (pad row not zeroed, rows renormed
    by max_norm)."""
    train(kind, cfg, padding_idx=4, max_norm=3.0, sparse=sparse, loss="sum", fused=sparse,
          seed=13, pretrained=True)


def test_sparse_scale_grad_by_freq_rejected_like_torch():
    """sparse=True with scale_grad_by_freq: torch's backward raises; so does emb's."""
    tm = torch.nn.Embedding(V, D, sparse=True, scale_grad_by_freq=True)
    with pytest.raises(RuntimeError, match="scale_grad_by_freq not supported"):
        tm(torch.tensor([1, 1])).sum().backward()
    em = EmbModel(SGD, dict(lr=0.1), 0, None, None, True, True)
    with pytest.raises(emb.Error, match="scale_grad_by_freq not supported"):
        em.table.backward_sparse(np.array([1, 1]), np.ones((2, D), np.float32))
