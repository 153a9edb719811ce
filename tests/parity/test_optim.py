"""Parity of emb's optimizers with torch.optim 1.13 (single-tensor, foreach=False, CPU).

Every test feeds the SAME gradients (generated in numpy) to torch (p.grad = ..., dense or an
uncoalesced torch.sparse_coo_tensor with duplicates) and to emb, and compares the
parameters after every step, bit for bit. Also: the fused sparse step against the unfused
path and against torch, PyTorch's validation and rejection messages, thread-count and
kernel-variant independence."""
import itertools
import zlib

import numpy as np
import pytest
import torch

import emb
from parity_util import FAST_KERNEL_MODE, RUN_KERNEL_MODE, assert_close

STEPS = 20
SGD, ADAGRAD, ADAM, ADAMW, SPARSE_ADAM = range(5)
KIND_NAMES = {SGD: "SGD", ADAGRAD: "Adagrad", ADAM: "Adam", ADAMW: "AdamW",
              SPARSE_ADAM: "SparseAdam"}
OPT_NAMES = {SGD: "sgd", ADAGRAD: "adagrad", ADAM: "adam", ADAMW: "adamw",
             SPARSE_ADAM: "sparse_adam"}


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------

def emb_optimizer(kind, cfg):
    """emb.Optimizer of a kind, from an options dict (emb's beta1/beta2 as torch's betas)."""
    c = dict(cfg)
    if "beta1" in c or "beta2" in c:
        c["betas"] = (c.pop("beta1", 0.9), c.pop("beta2", 0.999))
    return emb.Optimizer(OPT_NAMES[kind], **c)


class Opt:
    """An emb optimizer with its parameters (numpy arrays the optimizer updates in place)."""

    def __init__(self, kind, **cfg):
        self.o = emb_optimizer(kind, cfg)

    def add(self, arr):
        assert arr.dtype == np.float32 and arr.flags.c_contiguous
        return self.o.add_param(arr)

    def step(self, pid, g):
        self.o.step(pid, g)

    def step_sparse(self, pid, idx, val, coalesced=False):
        self.o.step_sparse(pid, idx, val, coalesced=coalesced)

    def add_table(self, table):
        """Registers a Table's weight (the optimizer keeps the table alive)."""
        return self.o.add_param(table.e)

    def fused(self, pid, table, indices, grad_output):
        self.o.step_fused(pid, table.e, indices, grad_output)

    def steps(self, pid):
        return self.o.param_steps(pid)


class Table:
    """An emb.Embedding holding a copy of w0 (from_pretrained, sparse), with a numpy view of
    its weight."""

    def __init__(self, w0, padding_idx=None, freeze=False):
        self.e = emb.Embedding.from_pretrained(w0.copy(), freeze=freeze,
                                               padding_idx=padding_idx, sparse=True)
        self.weight = np.asarray(self.e)


def raises(cls, fn, *args, **kw):
    """The message of the exception of class cls that fn(*args, **kw) raises."""
    with pytest.raises(cls) as exc:
        fn(*args, **kw)
    return str(exc.value)


def torch_optimizer(kind, params, cfg):
    """The torch optimizer matching an emb options dict (emb field names)."""
    c = dict(cfg)
    betas = (c.pop("beta1", 0.9), c.pop("beta2", 0.999))
    if kind == SGD:
        return torch.optim.SGD(params, foreach=False, **c)
    if kind == ADAGRAD:
        return torch.optim.Adagrad(params, foreach=False, **c)
    if kind == ADAM:
        return torch.optim.Adam(params, betas=betas, foreach=False, **c)
    if kind == ADAMW:
        return torch.optim.AdamW(params, betas=betas, foreach=False, **c)
    if kind == SPARSE_ADAM:
        return torch.optim.SparseAdam(params, betas=betas, **c)
    raise ValueError(kind)


def emb_cfg(kind, cfg):
    """PyTorch's defaults that emb must fill in itself, made explicit for the emb side:
    nothing to add (emb_optimizer_options_default gives them); SGD needs lr (torch requires
    it)."""
    return dict(cfg)


def rand_grad(rng, shape, step):
    """A gradient whose scale changes with the step, with some exact zeros and -0.0."""
    scale = [1.0, 1e-3, 10.0, 0.1][step % 4]
    g = np.array(rng.standard_normal(shape) * scale, dtype=np.float32)
    flat = g.reshape(-1)
    if flat.size > 4:
        flat[rng.integers(0, flat.size, max(1, flat.size // 20))] = 0.0
        flat[rng.integers(0, flat.size, max(1, flat.size // 40))] = -0.0
    return g


def rand_sparse(rng, V, D, step):
    """An uncoalesced sparse row gradient: heavy duplicates, sometimes empty, sometimes more
    than 16 entries (coalesce then uses introsort, whose order matters)."""
    nnz = [37, 0, 5, 1, 60, 17, 16, 120][step % 8]
    hot = rng.integers(0, V, 3)
    idx = np.where(rng.random(nnz) < 0.5, rng.choice(hot, nnz), rng.integers(0, V, nnz))
    idx = idx.astype(np.int64)
    val = rand_grad(rng, (nnz, D), step)
    return idx, val


def torch_sparse(idx, val, V, D):
    return torch.sparse_coo_tensor(torch.from_numpy(idx.copy())[None],
                                   torch.from_numpy(val.copy()), (V, D))


def torch_step(topt, kind, grad):
    """topt.step(). PyTorch 1.13's Adagrad and SparseAdam usually raise on an empty sparse
    gradient (a size mismatch in sparse_mask or in building the update), after counting the
    step and having changed nothing else; emb completes such a step as a no-op that counts,
    so both sides stay in the same state."""
    if grad is not None and grad.is_sparse and grad._nnz() == 0 and kind in (ADAGRAD,
                                                                            SPARSE_ADAM):
        try:
            topt.step()
        except RuntimeError as e:
            assert "size" in str(e), e
    else:
        topt.step()


def dense_trajectory(kind, cfg, shape, seed, steps=STEPS, values=None):
    """`steps` steps of torch's and emb's optimizer from the same start, bit-exact after
    each. values(rng, shape, step) makes the start (step -1) and the gradients (default:
    standard normal and rand_grad)."""
    rng = np.random.default_rng(seed)
    values = values or (lambda r, sh, s: (np.array(r.standard_normal(sh), np.float32) if s < 0
                                          else rand_grad(r, sh, s)))
    p0 = values(rng, shape, -1)
    pe = p0.copy()
    pt = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    topt = torch_optimizer(kind, [pt], cfg)
    eo = Opt(kind, **emb_cfg(kind, cfg))
    pid = eo.add(pe)
    for s in range(steps):
        g = values(rng, shape, s)
        pt.grad = torch.from_numpy(g.copy())
        topt.step()
        eo.step(pid, g)
        assert_close(pe, pt.detach().numpy(), exact=True,
                     what=f"{KIND_NAMES[kind]} {cfg} shape {shape} step {s}")
    assert eo.steps(pid) == steps


def sparse_trajectory(kind, cfg, V, D, seed, steps=STEPS, coalesced=False, values=None):
    """As dense_trajectory with sparse gradients; values(rng, V, D, step) makes the start
    (step -1, [V, D]) and the gradients ((indices, values); default rand_sparse)."""
    rng = np.random.default_rng(seed)
    values = values or (lambda r, v, d, s: (r.standard_normal((v, d)).astype(np.float32)
                                            if s < 0 else rand_sparse(r, v, d, s)))
    p0 = values(rng, V, D, -1)
    pe = p0.copy()
    pt = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    topt = torch_optimizer(kind, [pt], cfg)
    eo = Opt(kind, **emb_cfg(kind, cfg))
    pid = eo.add(pe)
    for s in range(steps):
        idx, val = values(rng, V, D, s)
        tg = torch_sparse(idx, val, V, D)
        if coalesced:
            tg = tg.coalesce()
            idx = tg._indices()[0].numpy().copy()
            val = tg._values().numpy().copy()
        pt.grad = tg
        torch_step(topt, kind, tg)
        idx_before, val_before = idx.copy(), val.copy()
        eo.step_sparse(pid, idx, val, coalesced=coalesced)
        assert np.array_equal(idx, idx_before) and np.array_equal(val.view(np.uint32),
                                                                  val_before.view(np.uint32)), \
            "step_sparse modified the gradient"
        assert_close(pe, pt.detach().numpy(), exact=True,
                     what=f"{KIND_NAMES[kind]} {cfg} sparse step {s}")
    assert eo.steps(pid) == steps


def seed_of(kind, cfg):
    return zlib.crc32(f"{kind} {sorted(cfg.items())}".encode())


def grid(**axes):
    keys = list(axes)
    for combo in itertools.product(*(axes[k] for k in keys)):
        yield dict(zip(keys, combo))


def sgd_configs(sparse):
    out = []
    for c in grid(lr=[0.05], momentum=[0.0, 0.9], dampening=[0.0, 0.3], nesterov=[False, True],
                  weight_decay=[0.0] if sparse else [0.0, 0.05], maximize=[False, True]):
        if c["nesterov"] and (c["momentum"] <= 0 or c["dampening"] != 0):
            continue
        out.append(c)
    out.append(dict(lr=1.7, momentum=0.5))  # a large lr and a momentum that is not 0.9
    return out


def adagrad_configs(sparse):
    out = list(grid(lr=[0.1], lr_decay=[0.0, 0.05], weight_decay=[0.0] if sparse else [0.0, 0.1],
                    initial_accumulator_value=[0.0, 0.3], eps=[1e-10, 1e-2],
                    maximize=[False, True]))
    out.append(dict())  # PyTorch's defaults
    return out


def adam_configs():
    out = list(grid(lr=[0.01], weight_decay=[0.0, 0.1], amsgrad=[False, True],
                    maximize=[False, True], beta1=[0.9, 0.5], beta2=[0.999, 0.8],
                    eps=[1e-8, 1e-3]))
    out.append(dict())
    return out


def sparse_adam_configs():
    out = list(grid(lr=[0.01], beta1=[0.9, 0.5, 0.0], beta2=[0.999, 0.8], eps=[1e-8, 1e-3],
                    maximize=[False, True]))
    out.append(dict())
    return out


def ids(cases):
    return [f"{KIND_NAMES[k]}-{i}" for i, (k, _) in enumerate(cases)]


DENSE = ([(SGD, c) for c in sgd_configs(False)] + [(ADAGRAD, c) for c in adagrad_configs(False)]
         + [(ADAM, c) for c in adam_configs()] + [(ADAMW, c) for c in adam_configs()])
SPARSE = ([(SGD, c) for c in sgd_configs(True)] + [(ADAGRAD, c) for c in adagrad_configs(True)]
          + [(SPARSE_ADAM, c) for c in sparse_adam_configs()])


# ---------------------------------------------------------------------------------------
# (a) trajectories against torch
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,cfg", DENSE, ids=ids(DENSE))
def test_dense_trajectory(kind, cfg):
    dense_trajectory(kind, cfg, (13, 37), seed=seed_of(kind, cfg))


@pytest.mark.parametrize("kind", [SGD, ADAGRAD, ADAM, ADAMW])
@pytest.mark.parametrize("shape", [(), (1,), (1000,), (3, 4, 5), (2, 1, 3, 1, 17), (0, 5)])
def test_dense_shapes(kind, shape):
    cfg = {SGD: dict(lr=0.1, momentum=0.9, nesterov=True), ADAGRAD: dict(lr_decay=0.01),
           ADAM: dict(amsgrad=True), ADAMW: dict(amsgrad=True)}[kind]
    dense_trajectory(kind, cfg, shape, seed=len(shape), steps=8)


def test_dense_large_values():
    """Huge and tiny gradients (overflow to inf in v, underflow in m) behave as in torch."""
    for kind, cfg in [(ADAM, dict(lr=0.1)), (ADAMW, dict(amsgrad=True)), (ADAGRAD, dict()),
                      (SGD, dict(lr=0.1, momentum=0.9))]:
        rng = np.random.default_rng(7)
        shape = (64,)
        p0 = rng.standard_normal(shape).astype(np.float32)
        pe = p0.copy()
        pt = torch.nn.Parameter(torch.from_numpy(p0.copy()))
        topt = torch_optimizer(kind, [pt], cfg)
        eo = Opt(kind, **cfg)
        pid = eo.add(pe)
        for s in range(6):
            g = (rng.standard_normal(shape) * [1e30, 1e-30, 3e19, 1.0, 1e-45, 1e38][s])
            g = g.astype(np.float32)
            pt.grad = torch.from_numpy(g.copy())
            topt.step()
            eo.step(pid, g)
            assert_close(pe, pt.detach().numpy(), exact=True, what=f"{KIND_NAMES[kind]} {s}")


@pytest.mark.parametrize("kind,cfg", SPARSE, ids=ids(SPARSE))
def test_sparse_trajectory(kind, cfg):
    sparse_trajectory(kind, cfg, 13, 37, seed=seed_of(kind, cfg))


@pytest.mark.parametrize("kind,cfg", [(SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
                                      (ADAGRAD, dict(lr_decay=0.1)), (SPARSE_ADAM, dict())])
@pytest.mark.parametrize("D", [1, 8, 16, 33])
def test_sparse_coalesced_input(kind, cfg, D):
    """A gradient torch already coalesced (flagged coalesced in emb too)."""
    sparse_trajectory(kind, cfg, 11, D, seed=D, steps=10, coalesced=True)


def test_sparse_many_rows():
    """A larger table: coalesce of thousands of entries (introsort) and many threads."""
    for kind, cfg in [(ADAGRAD, dict()), (SPARSE_ADAM, dict(lr=0.01)), (SGD, dict(lr=0.1)),
                      (SGD, dict(lr=0.1, momentum=0.9, nesterov=True))]:
        rng = np.random.default_rng(3)
        V, D = 3000, 24
        p0 = rng.standard_normal((V, D)).astype(np.float32)
        pe = p0.copy()
        pt = torch.nn.Parameter(torch.from_numpy(p0.copy()))
        topt = torch_optimizer(kind, [pt], cfg)
        eo = Opt(kind, **cfg)
        pid = eo.add(pe)
        for s in range(4):
            nnz = 5000
            idx = rng.zipf(1.3, nnz) % V
            val = rng.standard_normal((nnz, D)).astype(np.float32)
            pt.grad = torch_sparse(idx, val, V, D)
            topt.step()
            eo.step_sparse(pid, idx, val)
            assert_close(pe, pt.detach().numpy(), exact=True, what=f"{KIND_NAMES[kind]} {s}")


def test_sgd_momentum_dense_then_sparse():
    """A dense momentum buffer (dense steps) then sparse gradients, as torch does it."""
    rng = np.random.default_rng(11)
    V, D = 9, 5
    for cfg in [dict(lr=0.1, momentum=0.9), dict(lr=0.1, momentum=0.8, dampening=0.5,
                                                  maximize=True)]:
        p0 = rng.standard_normal((V, D)).astype(np.float32)
        pe = p0.copy()
        pt = torch.nn.Parameter(torch.from_numpy(p0.copy()))
        topt = torch_optimizer(SGD, [pt], cfg)
        eo = Opt(SGD, **cfg)
        pid = eo.add(pe)
        for s in range(8):
            if s < 2:
                g = rand_grad(rng, (V, D), s)
                pt.grad = torch.from_numpy(g.copy())
                eo.step(pid, g)
            else:
                idx, val = rand_sparse(rng, V, D, s)
                pt.grad = torch_sparse(idx, val, V, D)
                eo.step_sparse(pid, idx, val)
            torch_step(topt, SGD, pt.grad)
            assert_close(pe, pt.detach().numpy(), exact=True, what=f"step {s}")


def test_adagrad_dense_and_sparse_mixed():
    rng = np.random.default_rng(12)
    V, D = 10, 6
    cfg = dict(lr=0.2, lr_decay=0.01, initial_accumulator_value=0.1)
    p0 = rng.standard_normal((V, D)).astype(np.float32)
    pe = p0.copy()
    pt = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    topt = torch_optimizer(ADAGRAD, [pt], cfg)
    eo = Opt(ADAGRAD, **cfg)
    pid = eo.add(pe)
    for s in range(10):
        if s % 3 == 0:
            g = rand_grad(rng, (V, D), s)
            pt.grad = torch.from_numpy(g.copy())
            eo.step(pid, g)
        else:
            idx, val = rand_sparse(rng, V, D, s)
            pt.grad = torch_sparse(idx, val, V, D)
            eo.step_sparse(pid, idx, val)
        torch_step(topt, ADAGRAD, pt.grad)
        assert_close(pe, pt.detach().numpy(), exact=True, what=f"step {s}")


def test_several_params_independent_state():
    """Per-parameter state and step counts: parameters stepped at different times."""
    rng = np.random.default_rng(5)
    shapes = [(4, 3), (7,), (2, 2, 2)]
    for kind, cfg in [(ADAM, dict(lr=0.01, amsgrad=True)), (ADAGRAD, dict(lr_decay=0.1)),
                      (SGD, dict(lr=0.1, momentum=0.9))]:
        p0 = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        pe = [x.copy() for x in p0]
        pt = [torch.nn.Parameter(torch.from_numpy(x.copy())) for x in p0]
        topt = torch_optimizer(kind, pt, cfg)
        eo = Opt(kind, **cfg)
        pids = [eo.add(x) for x in pe]
        assert pids == [0, 1, 2]
        counts = [0, 0, 0]
        for s in range(9):
            topt.zero_grad(set_to_none=True)
            for i, shape in enumerate(shapes):
                if (s + i) % (i + 1) == 0:
                    g = rand_grad(rng, shape, s)
                    pt[i].grad = torch.from_numpy(g.copy())
                    eo.step(pids[i], g)
                    counts[i] += 1
            topt.step()
            for i in range(3):
                assert_close(pe[i], pt[i].detach().numpy(), exact=True, what=f"p{i} step {s}")
                assert eo.steps(pids[i]) == counts[i]
        if kind != SGD:
            for i in range(3):
                assert int(topt.state[pt[i]]["step"]) == counts[i]


# ---------------------------------------------------------------------------------------
# (c) the fused step: == backward_sparse + step_sparse, and == torch
# ---------------------------------------------------------------------------------------

FUSED = [(SGD, dict(lr=0.1)), (SGD, dict(lr=0.1, maximize=True)),
         (SGD, dict(lr=0.1, momentum=0.9)), (SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
         (SGD, dict(lr=0.1, momentum=0.5, dampening=0.25, maximize=True)),
         (ADAGRAD, dict()), (ADAGRAD, dict(lr=0.3, lr_decay=0.1, initial_accumulator_value=0.2,
                                           maximize=True)),
         (SPARSE_ADAM, dict()), (SPARSE_ADAM, dict(lr=0.02, beta1=0.5, beta2=0.9, eps=1e-4,
                                                   maximize=True))]


@pytest.mark.parametrize("pad", [None, 3], ids=["no-padding", "padding"])
@pytest.mark.parametrize("kind,cfg", FUSED, ids=ids(FUSED))
def test_fused_equals_unfused_and_torch(kind, cfg, pad):
    rng = np.random.default_rng(seed_of(kind, cfg) + (pad or 0))
    V, D = 17, 13
    w0 = rng.standard_normal((V, D)).astype(np.float32)
    # fused, on one table
    tf = Table(w0, pad)
    of = Opt(kind, **cfg)
    pf = of.add_table(tf)
    # unfused: emb backward_sparse + step_sparse on another
    tu = Table(w0, pad)
    ou = Opt(kind, **cfg)
    pu = ou.add_table(tu)
    # torch
    pt = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    topt = torch_optimizer(kind, [pt], cfg)
    for s in range(STEPS):
        shape = [(4, 9), (3, 2, 5), (40,), (0,), (2, 0, 3), (), (7, 11)][s % 7]
        hot = rng.integers(0, V, 2)
        idx = np.where(rng.random(shape) < 0.6, rng.choice(hot, shape),
                       rng.integers(0, V, shape)).astype(np.int64)
        if idx.size:
            idx.reshape(-1)[rng.integers(0, idx.size, max(1, idx.size // 5))] = 3
        if s % 2:
            idx = idx.astype(np.int32)
        gout = rand_grad(rng, tuple(shape) + (D,), s)
        of.fused(pf, tf, idx, gout)
        rows, values = tu.e.backward_sparse(idx, gout)
        ou.step_sparse(pu, rows, values)
        # torch: nn.Embedding(padding_idx=pad) leaves the padding positions out
        keep = idx.reshape(-1) != pad if pad is not None else np.ones(idx.size, bool)
        tidx = idx.reshape(-1)[keep].astype(np.int64)
        tval = gout.reshape(-1, D)[keep]
        pt.grad = torch_sparse(tidx, tval, V, D)
        torch_step(topt, kind, pt.grad)
        assert_close(tf.weight, tu.weight, exact=True, what=f"fused vs unfused step {s}")
        assert_close(tf.weight, pt.detach().numpy(), exact=True, what=f"fused vs torch step {s}")
    assert of.steps(pf) == STEPS


def test_fused_matches_embedding_sparse_backward_exactly():
    """backward_sparse's own output (padding removed by emb) fed to step_sparse, for a
    padding embedding, equals the fused step, over many random cases."""
    rng = np.random.default_rng(99)
    for case in range(30):
        kind, cfg = FUSED[case % len(FUSED)]
        V, D = int(rng.integers(2, 30)), int(rng.integers(1, 20))
        pad = int(rng.integers(0, V))
        w0 = rng.standard_normal((V, D)).astype(np.float32)
        tu, tf = Table(w0, pad), Table(w0, pad)
        of, ou = Opt(kind, **cfg), Opt(kind, **cfg)
        pf, pu = of.add_table(tf), ou.add_table(tu)
        for s in range(3):
            n = int(rng.integers(0, 80))
            idx = rng.integers(0, min(V, 4), n) if case % 2 else rng.integers(0, V, n)
            gout = rng.standard_normal((n, D)).astype(np.float32)
            rows, values = tu.e.backward_sparse(idx, gout)
            ou.step_sparse(pu, rows, values)
            of.fused(pf, tf, idx, gout)
            assert_close(tf.weight, tu.weight, exact=True, what=f"case {case} step {s}")


# ---------------------------------------------------------------------------------------
# validation and rejection messages: PyTorch's, compared live
# ---------------------------------------------------------------------------------------

BAD_OPTIONS = [
    (SGD, dict(lr=-1.0)), (SGD, dict(lr=-0.001)), (SGD, dict(lr=0.1, momentum=-0.5)),
    (SGD, dict(lr=0.1, weight_decay=-1e-05)), (SGD, dict(lr=0.1, nesterov=True)),
    (SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)),
    (ADAGRAD, dict(lr=-0.01)), (ADAGRAD, dict(lr_decay=-1.0)), (ADAGRAD, dict(weight_decay=-2.5)),
    (ADAGRAD, dict(initial_accumulator_value=-0.1)), (ADAGRAD, dict(eps=-1e-10)),
    (ADAGRAD, dict(lr=float("nan"))),
    (ADAM, dict(lr=-1e-3)), (ADAM, dict(eps=-1.0)), (ADAM, dict(beta1=1.0)),
    (ADAM, dict(beta2=-0.1)), (ADAM, dict(weight_decay=-1e20)), (ADAM, dict(beta1=float("nan"))),
    (ADAMW, dict(lr=-3e-17)), (ADAMW, dict(eps=-1e-8)), (ADAMW, dict(beta1=1.5)),
    (ADAMW, dict(beta2=1.0)), (ADAMW, dict(weight_decay=-0.01)),
    (SPARSE_ADAM, dict(lr=0.0)), (SPARSE_ADAM, dict(lr=-1.0)), (SPARSE_ADAM, dict(eps=0.0)),
    (SPARSE_ADAM, dict(beta1=1.0)), (SPARSE_ADAM, dict(beta2=12345678901234567.0)),
]


@pytest.mark.parametrize("kind,cfg", BAD_OPTIONS, ids=ids(BAD_OPTIONS))
def test_bad_options_message(kind, cfg):
    p = torch.nn.Parameter(torch.zeros(2))
    tcfg = dict(cfg)
    if kind == SGD:
        tcfg.setdefault("lr", 1e-3)
    with pytest.raises(ValueError) as exc:
        torch_optimizer(kind, [p], tcfg)
    # (that the C call leaves *out untouched is tests/unit/test_optim.c's test_create_errors)
    msg = raises(emb.InvalidArgumentError, emb_optimizer, kind, cfg)
    assert msg == str(exc.value)


def test_sgd_nan_lr_rejected():
    """PyTorch's SGD lets a NaN lr through (`lr < 0.0` is false); emb rejects it."""
    assert raises(emb.InvalidArgumentError, emb_optimizer, SGD,
                  dict(lr=float("nan"))) == "Invalid learning rate: nan"


def test_defaults_match_torch():
    p = torch.nn.Parameter(torch.zeros(2))
    for kind in [ADAGRAD, ADAM, ADAMW, SPARSE_ADAM]:
        d = torch_optimizer(kind, [p], {}).defaults
        eo = emb.Optimizer(OPT_NAMES[kind])
        o = eo.defaults
        assert eo.kind == OPT_NAMES[kind] and o["lr"] == d["lr"] and o["eps"] == d["eps"]
        if "betas" in d:
            assert o["betas"] == d["betas"]
        for f in ["weight_decay", "lr_decay", "initial_accumulator_value", "amsgrad",
                  "maximize"]:
            if f in d:
                assert o[f] == d[f], (kind, f)
    o = emb.Optimizer("sgd").defaults
    d = torch.optim.SGD([p], lr=1e-3).defaults
    for f in ["lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"]:
        assert o[f] == d[f], f


def _torch_error(kind, cfg, grad):
    p = torch.nn.Parameter(torch.zeros(5, 3))
    opt = torch_optimizer(kind, [p], cfg)
    p.grad = grad
    with pytest.raises(RuntimeError) as exc:
        opt.step()
    return str(exc.value)


SPARSE_IDX = np.array([1, 4, 1], np.int64)
SPARSE_VAL = np.arange(9, dtype=np.float32).reshape(3, 3)


@pytest.mark.parametrize("kind,cfg,sparse,want", [
    (ADAM, {}, True, None), (ADAMW, {}, True, None), (SPARSE_ADAM, {}, False, None),
    (ADAGRAD, dict(weight_decay=0.1), True, None),
    (SGD, dict(lr=0.1, weight_decay=0.1), True, "add(sparse, dense) is not supported"),
    (SGD, dict(lr=0.1, weight_decay=0.1, momentum=0.9), True,
     "add(sparse, dense) is not supported"),
])
def test_rejections_change_nothing(kind, cfg, sparse, want):
    tg = (torch_sparse(SPARSE_IDX, SPARSE_VAL, 5, 3) if sparse else torch.ones(5, 3))
    tmsg = _torch_error(kind, cfg, tg)
    p0 = np.arange(15, dtype=np.float32).reshape(5, 3) / 7
    table = Table(p0)
    pe = table.weight
    eo = Opt(kind, **cfg)
    pid = eo.add_table(table)
    for how in ["step", "fused"] if sparse else ["step"]:
        if not sparse:
            msg = raises(emb.UnsupportedError, eo.step, pid, np.ones((5, 3), np.float32))
        elif how == "step":
            msg = raises(emb.UnsupportedError, eo.step_sparse, pid, SPARSE_IDX, SPARSE_VAL)
        else:
            msg = raises(emb.UnsupportedError, eo.fused, pid, table, SPARSE_IDX, SPARSE_VAL)
        if want is None:
            assert msg == tmsg
        else:
            assert want in tmsg and want in msg, (tmsg, msg)
        assert np.array_equal(pe, p0)
        assert eo.steps(pid) == 0


def test_sparse_bad_rows_change_nothing():
    for kind, cfg in [(SGD, dict(lr=0.1, momentum=0.9)), (ADAGRAD, {}), (SPARSE_ADAM, {})]:
        table = Table(np.ones((5, 3), np.float32), padding_idx=2)
        pe = table.weight
        eo = Opt(kind, **cfg)
        pid = eo.add_table(table)
        eo.step_sparse(pid, SPARSE_IDX, SPARSE_VAL)
        p1 = pe.copy()
        msg = raises(emb.IndexOutOfRangeError, eo.step_sparse, pid, np.array([0, 5, 1]),
                     SPARSE_VAL)
        assert "grad entry 1 has row 5" in msg and "[0, 5)" in msg
        msg = raises(emb.IndexOutOfRangeError, eo.step_sparse, pid, np.array([-1, 2, 1]),
                     SPARSE_VAL)
        assert "row -1" in msg
        msg = raises(emb.IndexOutOfRangeError, eo.fused, pid, table,
                     np.array([[0, 1], [2, 7]], np.int32), np.ones((2, 2, 3), np.float32))
        assert "index 7 at position 3" in msg
        msg = raises(emb.ShapeError, eo.fused, pid, table, np.array([0, 1]),
                     np.ones((2, 4), np.float32))
        assert "grad_output" in msg
        # a bad index at the padding position is refused too, as backward_sparse does
        msg = raises(emb.IndexOutOfRangeError, eo.fused, pid, table, np.array([2, -2]),
                     np.ones((2, 3), np.float32))
        assert "index -2 at position 1" in msg
        table.e.requires_grad = False
        msg = raises(emb.StateError, eo.fused, pid, table, np.array([0, 1]),
                     np.ones((2, 3), np.float32))
        assert "does not require grad" in msg
        table.e.requires_grad = True
        assert np.array_equal(pe, p1) and eo.steps(pid) == 1


# ---------------------------------------------------------------------------------------
# independence of the thread count and of the kernel variant
# ---------------------------------------------------------------------------------------

def _run_all_paths(seed):
    """Dense steps on a large tensor and sparse/fused steps on a large table; returns the
    final parameters."""
    rng = np.random.default_rng(seed)
    out = []
    for kind, cfg in [(SGD, dict(lr=0.1, momentum=0.9, nesterov=True)), (ADAM, dict(amsgrad=True)),
                      (ADAMW, {}), (ADAGRAD, dict(lr_decay=0.1))]:
        p = rng.standard_normal((300, 257)).astype(np.float32)
        eo = Opt(kind, **cfg)
        pid = eo.add(p)
        for s in range(3):
            eo.step(pid, rand_grad(rng, p.shape, s))
        out.append(p)
    for kind, cfg in FUSED:
        V, D = 2000, 40
        table = Table(rng.standard_normal((V, D)).astype(np.float32), padding_idx=0)
        p = table.weight
        eo = Opt(kind, **cfg)
        pid = eo.add_table(table)
        for s in range(3):
            n = 24000  # n * D = 960K float operations: several threads (256K each)
            idx = (rng.zipf(1.2, n) % V).astype(np.int64)
            g = rng.standard_normal((n, D)).astype(np.float32)
            if s == 1:
                eo.fused(pid, table, idx.reshape(240, 100), g.reshape(240, 100, D))
            else:
                eo.step_sparse(pid, idx, g)
        out.append(p.copy())
        # enough entries for the coalescing sort to run on several threads (65,536 and more);
        # SGD: a table over 16 MiB, which SGD's row owners split between threads
        V, D, n = (70_000, 64, 20_000) if kind == SGD else (5000, 8, 90_000)
        table = Table(rng.standard_normal((V, D)).astype(np.float32))
        p = table.weight
        eo = Opt(kind, **cfg)
        pid = eo.add_table(table)
        for s in range(2):
            idx = rng.integers(0, V, n)
            g = rng.standard_normal((n, D)).astype(np.float32)
            if s == 0:
                eo.fused(pid, table, idx, g)
            else:
                eo.step_sparse(pid, idx, g)
        out.append(p.copy())
    return out


def test_thread_count_and_kernel_variant_do_not_matter():
    emb.set_num_threads(1)
    emb.set_kernel_mode("ref")  # reference kernels
    try:
        ref = _run_all_paths(21)
        emb.set_kernel_mode(FAST_KERNEL_MODE)
        one = _run_all_paths(21)
        emb.set_num_threads(2)
        two = _run_all_paths(21)
        emb.set_num_threads(7)
        seven = _run_all_paths(21)
    finally:
        emb.set_num_threads(0)
        emb.set_kernel_mode(RUN_KERNEL_MODE)
    for i, r in enumerate(ref):
        assert_close(one[i], r, exact=True, what=f"auto kernels, 1 thread, case {i}")
        assert_close(two[i], r, exact=True, what=f"2 threads, case {i}")
        assert_close(seven[i], r, exact=True, what=f"7 threads, case {i}")


def test_message_float_format_is_pythons():
    """Messages print the value as Python's repr() does (PyTorch formats with {})."""
    rng = np.random.default_rng(8)
    values = [-0.1, -1e16, -1e-5, -0.0001, -1234567890123456.0, -12345678901234567.0,
              -5e-324, -1.7976931348623157e308, -2.0 ** 60, -1.5, -100.0, -1e15, -9.999e15,
              -float("inf")]
    values += list(-np.exp(rng.uniform(-700, 700, 300)))
    values += list(-rng.integers(1, 10 ** 6, 100) / 10.0 ** rng.integers(0, 20, 100))
    for x in values:
        x = float(x)
        assert raises(emb.InvalidArgumentError, emb_optimizer, ADAM,
                      dict(lr=x)) == f"Invalid learning rate: {x}"
