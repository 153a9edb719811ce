"""Optimizer state and scheduling against torch.optim 1.13, live:

- the bytes Optimizer.state_dict() returns, read with an independent parser that follows
  docs/optimizer-state.md, hold exactly torch's optimizer.state_dict() (every state tensor
  bit for bit, step counts, param_groups' hyper-parameters), dense and sparse, every kind;
- save + load into a fresh optimizer resumes exactly as torch does after load_state_dict;
- changing the learning rate between steps (param_group['lr']) matches torch bit for bit;
- a sparse gradient of the caller's rows (int64 or int32; step_sparse) and the Hogwild row
  update (advance_step + update_rows) step exactly as torch's sparse step."""
import struct

import numpy as np
import pytest
import torch

from parity_util import assert_close
from test_optim import (ADAGRAD, ADAM, ADAMW, KIND_NAMES, SGD, SPARSE_ADAM, Opt, rand_grad,
                        rand_sparse, torch_optimizer, torch_sparse, torch_step)

STEPS = 8


def save(opt):
    blob = opt.o.state_dict()
    assert isinstance(blob, bytes) and len(blob) > 0
    return blob


def load(opt, blob):
    opt.o.load_state_dict(blob)


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


OPTION_NAMES = ["lr", "momentum", "dampening", "weight_decay", "lr_decay",
                "initial_accumulator_value", "eps", "beta1", "beta2"]


def parse_state(b):
    """docs/optimizer-state.md, version 1, read independently of the C code."""
    assert b[:8] == b"EMBOPTST"
    version, kind = struct.unpack_from("<II", b, 8)
    assert version == 1
    opts = dict(zip(OPTION_NAMES, struct.unpack_from("<9d", b, 16)))
    flags, nparams = struct.unpack_from("<II", b, 88)
    opts.update(nesterov=bool(flags & 1), amsgrad=bool(flags & 2), maximize=bool(flags & 4))
    nbuf = {SGD: 0, ADAGRAD: 1, ADAM: 3 if opts["amsgrad"] else 2,
            ADAMW: 3 if opts["amsgrad"] else 2, SPARSE_ADAM: 2}[kind]
    off, params = 96, []
    for _ in range(nparams):
        ndim, pflags, steps, bk, reserved, sp_nnz = struct.unpack_from("<IIqIIq", b, off)
        off += 32
        assert reserved == 0
        shape = struct.unpack_from(f"<{ndim}q", b, off)
        off += 8 * ndim
        numel = int(np.prod(shape)) if ndim else 1
        rec = dict(shape=shape, steps=steps, buffers=[], momentum=None)
        if pflags & 1:
            for _ in range(nbuf):
                rec["buffers"].append(np.frombuffer(b, "<f4", numel, off).reshape(shape))
                off += 4 * numel
        if bk == 1:
            rec["momentum"] = np.frombuffer(b, "<f4", numel, off).reshape(shape)
            off += 4 * numel
        elif bk == 2:
            rows = np.frombuffer(b, "<i8", sp_nnz, off)
            off += 8 * sp_nnz
            vals = np.frombuffer(b, "<f4", sp_nnz * shape[1], off).reshape(sp_nnz, shape[1])
            off += 4 * sp_nnz * shape[1]
            rec["momentum"] = (rows, vals)
        params.append(rec)
    (checksum,) = struct.unpack_from("<Q", b, off)
    assert off + 8 == len(b)
    assert checksum == fnv1a64(b[:off])
    return kind, opts, params


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def assert_state_equals_torch(blob, kind, topt, what):
    k, opts, params = parse_state(blob)
    assert k == kind
    sd = topt.state_dict()
    group = sd["param_groups"][0]
    for name in ["lr", "momentum", "dampening", "weight_decay", "lr_decay", "eps",
                 "initial_accumulator_value"]:
        if name in group:
            assert opts[name] == group[name], (what, name)
    if "betas" in group:
        assert (opts["beta1"], opts["beta2"]) == tuple(group["betas"]), what
    for name in ["nesterov", "amsgrad", "maximize"]:
        if name in group:
            assert opts[name] == group[name], (what, name)
    for i, rec in enumerate(params):
        st = sd["state"].get(i, {})
        if "step" in st:
            assert rec["steps"] == int(st["step"]), (what, i)
        names = {ADAGRAD: ["sum"], ADAM: ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"],
                 ADAMW: ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"],
                 SPARSE_ADAM: ["exp_avg", "exp_avg_sq"], SGD: []}[kind]
        names = [n for n in names if n in st]
        if kind == ADAGRAD and not rec["buffers"] and names:
            # torch's Adagrad creates its state in __init__; emb on the first step (or
            # emb_optimizer_init_state), with exactly these values
            assert int(st["step"]) == 0 and rec["steps"] == 0, (what, i)
            init = np.full(rec["shape"], opts["initial_accumulator_value"], np.float32)
            assert np.array_equal(bits(st["sum"].numpy()), bits(init)), (what, i)
            continue
        assert len(names) == len(rec["buffers"]), (what, i, names)
        for n, buf in zip(names, rec["buffers"]):
            assert np.array_equal(bits(buf), bits(st[n].numpy())), (what, i, n)
        tb = st.get("momentum_buffer")
        if tb is None:
            assert rec["momentum"] is None, (what, i)
        elif tb.is_sparse:
            rows, vals = rec["momentum"]
            assert np.array_equal(rows, tb._indices()[0].numpy()), (what, i)
            assert np.array_equal(bits(vals), bits(tb._values().numpy())), (what, i)
        else:
            assert np.array_equal(bits(rec["momentum"]), bits(tb.numpy())), (what, i)


CASES = [
    (SGD, dict(lr=0.1), "dense"), (SGD, dict(lr=0.1, momentum=0.9, dampening=0.2), "dense"),
    (SGD, dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True), "dense"),
    (SGD, dict(lr=0.1, momentum=0.9), "sparse"),
    (SGD, dict(lr=0.05, momentum=0.5, nesterov=True), "sparse"),
    (ADAGRAD, dict(lr_decay=0.05, initial_accumulator_value=0.1), "dense"),
    (ADAGRAD, dict(lr=0.3), "sparse"),
    (ADAM, dict(lr=0.01, amsgrad=True, weight_decay=0.1), "dense"), (ADAM, dict(), "dense"),
    (ADAMW, dict(lr=0.01), "dense"), (ADAMW, dict(amsgrad=True, maximize=True), "dense"),
    (SPARSE_ADAM, dict(lr=0.01), "sparse"),
    (SPARSE_ADAM, dict(beta1=0.5, beta2=0.8, eps=1e-3, maximize=True), "sparse"),
]


def case_id(c):
    return f"{KIND_NAMES[c[0]]}-{c[2]}-" + "-".join(f"{k}={v}" for k, v in c[1].items())


class Run:
    """The same parameters and gradients in emb and torch (two parameters: one stepped,
    one never stepped, whose state stays empty)."""

    def __init__(self, kind, cfg, mode, seed):
        self.kind, self.mode = kind, mode
        self.rng = np.random.default_rng(seed)
        self.V, self.D = 9, 6
        p0 = self.rng.standard_normal((self.V, self.D)).astype(np.float32)
        q0 = self.rng.standard_normal(5).astype(np.float32)
        self.pe, self.qe = p0.copy(), q0.copy()
        self.eo = Opt(kind, **cfg)
        self.pid = self.eo.add(self.pe)
        self.eo.add(self.qe)
        self.pt = torch.nn.Parameter(torch.from_numpy(p0.copy()))
        self.qt = torch.nn.Parameter(torch.from_numpy(q0.copy()))
        self.topt = torch_optimizer(kind, [self.pt, self.qt], cfg)
        self.s = 0

    def step(self, lr=None):
        s = self.s
        if lr is not None:
            self.eo.o.lr = lr
            for g in self.topt.param_groups:
                g["lr"] = lr
            assert self.eo.o.lr == lr
        if self.mode == "dense":
            g = rand_grad(self.rng, (self.V, self.D), s)
            self.pt.grad = torch.from_numpy(g.copy())
            self.topt.step()
            self.eo.step(self.pid, g)
        else:
            idx, val = rand_sparse(self.rng, self.V, self.D, s)
            self.pt.grad = torch_sparse(idx, val, self.V, self.D)
            torch_step(self.topt, self.kind, self.pt.grad)
            self.eo.step_sparse(self.pid, idx, val)
        self.s += 1
        assert_close(self.pe, self.pt.detach().numpy(), exact=True,
                     what=f"{KIND_NAMES[self.kind]} step {s}")


@pytest.mark.parametrize("kind,cfg,mode", CASES, ids=[case_id(c) for c in CASES])
def test_saved_state_is_torch_state_dict(kind, cfg, mode):
    r = Run(kind, cfg, mode, seed=len(str(cfg)) * 31 + kind)
    for s in range(STEPS):
        r.step()
        assert_state_equals_torch(save(r.eo), kind, r.topt, f"after step {s}")


@pytest.mark.parametrize("kind,cfg,mode", CASES, ids=[case_id(c) for c in CASES])
def test_resume_matches_torch_load_state_dict(kind, cfg, mode):
    """k steps, save; a new emb optimizer loads the bytes and a new torch optimizer loads
    the state_dict; both continue with the same gradients, bit for bit."""
    r = Run(kind, cfg, mode, seed=7 + kind)
    for _ in range(4):
        r.step()
    blob = save(r.eo)
    sd = r.topt.state_dict()
    # fresh optimizers (other lr: the loaded state brings its own) over the same tensors
    eo2 = Opt(kind, **dict(cfg, lr=0.123))
    eo2.add(r.pe)
    eo2.add(r.qe)
    load(eo2, blob)
    assert save(eo2) == blob
    topt2 = torch_optimizer(kind, [r.pt, r.qt], dict(cfg, lr=0.123))
    topt2.load_state_dict(sd)
    r.eo, r.topt = eo2, topt2
    for _ in range(4):
        r.step()
    assert_state_equals_torch(save(r.eo), kind, r.topt, "after resuming")


LR_CASES = [c for c in CASES if c[0] != SGD or c[1].get("momentum")] + [
    (ADAGRAD, dict(lr_decay=0.1), "sparse")]


@pytest.mark.parametrize("kind,cfg,mode", LR_CASES, ids=[case_id(c) for c in LR_CASES])
def test_lr_schedule_matches_torch(kind, cfg, mode):
    r = Run(kind, cfg, mode, seed=99 + kind)
    base = cfg.get("lr", torch_optimizer(kind, [torch.zeros(1, requires_grad=True)],
                                         {}).defaults["lr"] if kind != SGD else 0.1)
    for s in range(12):
        r.step(lr=base * [1.0, 0.5, 0.1, 2.0, 0.3, 0.0001][s % 6])
    assert_state_equals_torch(save(r.eo), kind, r.topt, "after the schedule")


@pytest.mark.parametrize("kind,cfg", [(SGD, dict(lr=0.1)), (SGD, dict(lr=0.1, momentum=0.9)),
                                      (ADAGRAD, dict()), (SPARSE_ADAM, dict(maximize=True))],
                         ids=["sgd", "sgd-momentum", "adagrad", "sparse-adam"])
def test_sparse_grad_of_rows_steps_as_torch(kind, cfg):
    rng = np.random.default_rng(5)
    V, D = 11, 4
    p0 = rng.standard_normal((V, D)).astype(np.float32)
    pe = p0.copy()
    eo = Opt(kind, **cfg)
    pid = eo.add(pe)
    pt = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    topt = torch_optimizer(kind, [pt], cfg)
    for s in range(STEPS):
        idx, val = rand_sparse(rng, V, D, s)
        rows = idx.astype(np.int32) if s % 2 else idx
        # (that the gradient holds exactly these rows and values, int32 rows widened, is
        # tests/unit/test_optim.c's test_sparse_grad_from_rows)
        rows_before, val_before = rows.copy(), val.copy()
        eo.step_sparse(pid, rows, val)
        assert np.array_equal(rows, rows_before) and np.array_equal(bits(val), bits(val_before))
        pt.grad = torch_sparse(idx, val, V, D)
        torch_step(topt, kind, pt.grad)
        assert_close(pe, pt.detach().numpy(), exact=True, what=f"step {s}")


@pytest.mark.parametrize("kind,cfg", [(SGD, dict(lr=0.1)), (ADAGRAD, dict(lr_decay=0.1)),
                                      (SPARSE_ADAM, dict(lr=0.01))],
                         ids=["sgd", "adagrad", "sparse-adam"])
def test_update_rows_steps_as_torch(kind, cfg):
    """The Hogwild path, single-threaded: advance_step + update_rows == torch's step."""
    rng = np.random.default_rng(6)
    V, D = 11, 4
    p0 = rng.standard_normal((V, D)).astype(np.float32)
    pe = p0.copy()
    eo = Opt(kind, **cfg)
    pid = eo.add(pe)
    eo.o.init_state(pid)
    pt = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    topt = torch_optimizer(kind, [pt], cfg)
    for s in range(STEPS):
        idx, val = rand_sparse(rng, V, D, s)
        eo.o.advance_step(pid)
        eo.o.update_rows(pid, idx, val)
        pt.grad = torch_sparse(idx, val, V, D)
        torch_step(topt, kind, pt.grad)
        assert_close(pe, pt.detach().numpy(), exact=True, what=f"step {s}")
