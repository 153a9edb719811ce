"""emb.torch.Embedding / EmbeddingBag against torch.nn.Embedding / EmbeddingBag: the same
model built twice from the same seed, one with torch's modules and one with emb's, trained
with torch's own optimizers on the same batches; every parameter must be the same bits after
every step, and so must every output and gradient."""
import gc
import weakref

import pytest
import torch
from torch import nn

import emb.torch as et
from conftest import same_bits

V, D = 40, 8


class Model(nn.Module):
    """An Embedding and an EmbeddingBag feeding a Linear layer."""

    def __init__(self, emb_cls, bag_cls, eopts, bopts):
        super().__init__()
        self.e = emb_cls(V, D, **eopts)
        self.b = bag_cls(V, D, **bopts)
        self.l = nn.Linear(2 * D, 5)

    def forward(self, x, bag_in, offsets, psw):
        return self.l(torch.cat([self.e(x).sum(1), self.b(bag_in, offsets, psw)], 1))


def batches(n, steps, seed, one_d, psw, index_dtype):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randint(0, V, (n, 6), generator=g).to(index_dtype)
        t = torch.randint(0, 5, (n,), generator=g)
        if one_d:  # 1-D input with offsets, including empty bags
            lens = torch.randint(0, 5, (n,), generator=g)
            bag_in = torch.randint(0, V, (int(lens.sum()),), generator=g).to(index_dtype)
            offsets = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)[:-1]])
        else:
            bag_in = torch.randint(0, V, (n, 4), generator=g).to(index_dtype)
            offsets = None
        w = torch.rand(bag_in.shape, generator=g) if psw else None
        yield x, bag_in, offsets, w, t


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "sparse_adam": None,  # sparse parameters only: built below
}

CASES = [
    # (name, embedding options, bag options, 1-D bag input, per_sample_weights, optimizer)
    ("dense_plain", {}, {"mode": "mean"}, False, False, "adam"),
    ("dense_padding", {"padding_idx": 3}, {"mode": "sum", "padding_idx": 2}, True, False, "sgd"),
    ("dense_max_norm", {"max_norm": 1.0}, {"mode": "mean", "max_norm": 0.5, "norm_type": 1.5},
     False, False, "sgd_momentum"),
    # (the bag's scale_grad_by_freq is torch's bug, docs/differences.md: test below)
    ("dense_scale", {"scale_grad_by_freq": True}, {"mode": "sum"}, True, False, "adagrad"),
    ("dense_max", {"padding_idx": -1}, {"mode": "max"}, True, False, "adam"),
    ("dense_psw", {}, {"mode": "sum"}, True, True, "sgd"),
    ("sparse_sgd", {"sparse": True, "padding_idx": 0}, {"mode": "mean", "sparse": True}, True,
     False, "sgd"),
    ("sparse_momentum", {"sparse": True}, {"mode": "sum", "sparse": True}, False, False,
     "sgd_momentum"),
    ("sparse_adagrad", {"sparse": True}, {"mode": "sum", "sparse": True, "padding_idx": 1},
     True, True, "adagrad"),
    ("sparse_adam", {"sparse": True}, {"mode": "mean", "sparse": True}, False, False,
     "sparse_adam"),
]


def make_optimizer(name, model):
    if name != "sparse_adam":
        return OPTIMIZERS[name](model.parameters())
    sparse = [model.e.weight, model.b.weight]
    return [torch.optim.SparseAdam(sparse, lr=0.01),
            torch.optim.Adam(model.l.parameters(), lr=0.01)]


@pytest.mark.parametrize("name,eopts,bopts,one_d,psw,opt", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_training_matches_torch_bit_for_bit(name, eopts, bopts, one_d, psw, opt, index_dtype):
    torch.manual_seed(7)
    ref = Model(nn.Embedding, nn.EmbeddingBag, eopts, bopts)
    torch.manual_seed(7)
    mine = Model(et.Embedding, et.EmbeddingBag, eopts, bopts)
    assert isinstance(mine.e, nn.Embedding) and isinstance(mine.b, nn.EmbeddingBag)
    for (pn, a), b in zip(ref.named_parameters(), mine.parameters()):
        same_bits(b.detach().numpy(), a.detach().numpy(), f"initial {pn}")
    opts = [make_optimizer(opt, m) for m in (ref, mine)]
    opts = [o if isinstance(o, list) else [o] for o in opts]
    for step, (x, bag_in, offsets, w, t) in enumerate(batches(12, 15, 3, one_d, psw,
                                                                index_dtype)):
        outs = []
        for m, os_ in zip((ref, mine), opts):
            for o in os_:
                o.zero_grad()
            wr = None if w is None else w.clone().requires_grad_()
            out = m(x, bag_in, offsets, wr)
            nn.functional.cross_entropy(out, t).backward()
            outs.append((out.detach(), None if wr is None else wr.grad))
            for o in os_:
                o.step()
        same_bits(outs[1][0].numpy(), outs[0][0].numpy(), f"step {step} output")
        if psw:
            # the per_sample_weights gradient is a BLAS dot in torch: within float32 tolerance
            torch.testing.assert_close(outs[1][1], outs[0][1], rtol=1.3e-6, atol=1e-5)
        for (pn, a), b in zip(ref.named_parameters(), mine.parameters()):
            same_bits(b.detach().numpy(), a.detach().numpy(), f"step {step} {pn}")


def test_gradients_accumulate_like_torch():
    """Two backward passes before a step: .grad accumulates as in torch (dense and sparse)."""
    for sparse in (False, True):
        torch.manual_seed(0)
        a = nn.Embedding(V, D, sparse=sparse)
        torch.manual_seed(0)
        b = et.Embedding(V, D, sparse=sparse)
        g = torch.Generator().manual_seed(1)
        for _ in range(2):
            x = torch.randint(0, V, (5, 3), generator=g)
            up = torch.randn(5, 3, D, generator=g)
            (a(x) * up).sum().backward()
            (b(x) * up).sum().backward()
        ga, gb = a.weight.grad, b.weight.grad
        assert ga.is_sparse == gb.is_sparse == sparse
        if sparse:
            ga, gb = ga.coalesce().to_dense(), gb.coalesce().to_dense()
        same_bits(gb.numpy(), ga.numpy(), f"accumulated grad (sparse={sparse})")


def test_from_pretrained_and_state_dict():
    w = torch.randn(V, D)
    a = nn.Embedding.from_pretrained(w, freeze=False, padding_idx=2)
    b = et.Embedding.from_pretrained(w, freeze=False, padding_idx=2)
    assert type(b) is et.Embedding
    x = torch.tensor([[1, 2, 3]])
    same_bits(b(x).detach().numpy(), a(x).detach().numpy(), "from_pretrained lookup")
    c = et.Embedding(V, D)
    c.load_state_dict(a.state_dict())
    same_bits(c(x).detach().numpy(), a(x).detach().numpy(), "state_dict lookup")
    bag = et.EmbeddingBag.from_pretrained(w, mode="max")
    same_bits(bag(x).numpy(), nn.EmbeddingBag.from_pretrained(w, mode="max")(x).numpy(),
              "bag from_pretrained")


def test_errors_are_torchs_kinds():
    e = et.Embedding(5, 3)
    with pytest.raises(IndexError, match="out of range"):
        e(torch.tensor([5]))
    with pytest.raises(TypeError) as ei:  # torch's own message (F.embedding's checks)
        e(torch.tensor([1.0]))
    with pytest.raises(RuntimeError) as want:
        nn.Embedding(5, 3)(torch.tensor([1.0]))
    assert str(ei.value) == str(want.value)
    b = et.EmbeddingBag(5, 3, mode="max")
    with pytest.raises(ValueError, match="offsets has to be None"):
        b(torch.tensor([[1, 2]]), torch.tensor([0]))
    with pytest.raises(NotImplementedError):
        b(torch.tensor([1, 2]), torch.tensor([0]), torch.ones(2))


def test_double_weight_falls_back_to_torch():
    """A float64 module is not emb's: torch's own forward runs, with torch's result."""
    torch.manual_seed(0)
    a = nn.Embedding(V, D).double()
    torch.manual_seed(0)
    b = et.Embedding(V, D).double()
    x = torch.tensor([1, 2])
    assert torch.equal(a(x), b(x))


def test_bag_scale_grad_by_freq_is_the_documented_meaning():
    """EmbeddingBag(scale_grad_by_freq=True) divides by the count of the row's own index
    (docs/differences.md: torch 1.13 divides by another index's count): its gradient equals
    that of F.embedding(scale_grad_by_freq=True) summed per bag, computed by torch."""
    torch.manual_seed(0)
    bag = et.EmbeddingBag(V, D, mode="sum", scale_grad_by_freq=True)
    w = bag.weight.detach().clone().requires_grad_()
    x = torch.tensor([[3, 1, 3, 7], [1, 1, 2, 9]])
    up = torch.randn(2, D)
    (bag(x) * up).sum().backward()
    (nn.functional.embedding(x, w, scale_grad_by_freq=True).sum(1) * up).sum().backward()
    torch.testing.assert_close(bag.weight.grad, w.grad, rtol=0, atol=1e-6)
    # and torch's own module differs here, which is why the training test leaves it out
    ref = nn.EmbeddingBag.from_pretrained(w.detach(), freeze=False, mode="sum",
                                          scale_grad_by_freq=True)
    (ref(x) * up).sum().backward()
    assert not torch.equal(ref.weight.grad, bag.weight.grad)


@pytest.mark.parametrize("set_to_none", [False, True])
def test_large_dense_gradients_train_like_torch(set_to_none):
    """Tables whose dense gradients come from the module's cache of freed gradients (256 KiB
    and more): the same parameters as torch's modules after every step, whether .grad is
    zeroed (the gradient is added into it) or set to None (autograd keeps the gradient
    itself as .grad while the cache hands out other blocks)."""
    from emb import _emb
    rows, dim = 3000, 32  # 384,000-byte gradients
    et.empty_cache()
    models = []
    for e_cls, b_cls in ((nn.Embedding, nn.EmbeddingBag), (et.Embedding, et.EmbeddingBag)):
        torch.manual_seed(5)
        m = nn.ModuleDict({"e": e_cls(rows, dim), "s": b_cls(rows, dim, mode="sum"),
                           "x": b_cls(rows, dim, mode="max"), "l": nn.Linear(3 * dim, 4)})
        models.append((m, torch.optim.Adam(m.parameters(), lr=0.01)))
    g = torch.Generator().manual_seed(2)
    for step in range(4):
        x = torch.randint(0, rows, (64, 7), generator=g)
        t = torch.randint(0, 4, (64,), generator=g)
        for m, opt in models:
            opt.zero_grad(set_to_none=set_to_none)
            h = torch.cat([m["e"](x).mean(1), m["s"](x), m["x"](x)], 1)
            nn.functional.cross_entropy(m["l"](h), t).backward()
            opt.step()
        for (pn, a), b in zip(models[0][0].named_parameters(), models[1][0].parameters()):
            same_bits(b.detach().numpy(), a.detach().numpy(), f"step {step} {pn}")
    models[1][1].zero_grad(set_to_none=True)  # frees the gradients autograd kept as .grad
    assert _emb.cached_bytes() >= 3 * rows * dim * 4, "the gradients are not the cache's"
    et.empty_cache()
    assert _emb.cached_bytes() == 0


def test_cached_gradients_never_share_memory():
    """A gradient still referenced is never handed out again: two live gradients of the same
    table are distinct memory, each torch's value; only a freed one is reused."""
    from emb import _emb
    et.empty_cache()
    torch.manual_seed(0)
    w = torch.randn(3000, 32)
    ours = et.Embedding.from_pretrained(w, freeze=False)
    theirs = nn.Embedding.from_pretrained(w, freeze=False)
    g = torch.Generator().manual_seed(4)
    xs = [torch.randint(0, 3000, (50,), generator=g) for _ in range(3)]
    ups = [torch.randn(50, 32, generator=g) for _ in range(3)]
    mine = [torch.autograd.grad((ours(x) * u).sum(), ours.weight)[0] for x, u in zip(xs, ups)]
    want = [torch.autograd.grad((theirs(x) * u).sum(), theirs.weight)[0]
            for x, u in zip(xs, ups)]
    ptrs = {t.data_ptr() for t in mine}
    assert len(ptrs) == 3
    for i in range(3):
        same_bits(mine[i].numpy(), want[i].numpy(), f"gradient {i}")
    freed = mine.pop().data_ptr()
    assert _emb.cached_bytes() >= 3000 * 32 * 4  # (whole pages)
    again = torch.autograd.grad((ours(xs[0]) * ups[0]).sum(), ours.weight)[0]
    assert again.data_ptr() == freed and _emb.cached_bytes() == 0
    same_bits(again.numpy(), want[0].numpy(), "gradient from a reused block")
    for a, b in zip(mine, want[:2]):  # the live ones were not touched
        same_bits(a.numpy(), b.numpy(), "live gradient")


def test_sparse_bag_gradient_owns_emb_storage():
    """The sparse gradient of the bag is emb's own storage handed to numpy: its values stay
    valid after the rows array is gone, and equal torch's."""
    import gc
    from emb import _emb
    torch.manual_seed(0)
    w = torch.randn(V, D)
    x = torch.randint(0, V, (6, 4))
    up = torch.randn(6, D)
    rows, values = _emb.embedding_bag_backward(w.numpy(), x.numpy(), up.numpy(), mode="mean",
                                               what="sparse")
    rows_copy = rows.copy()
    del rows
    gc.collect()
    ref = nn.EmbeddingBag.from_pretrained(w, freeze=False, mode="mean", sparse=True)
    (ref(x) * up).sum().backward()
    gw = ref.weight.grad
    same_bits(rows_copy, gw._indices()[0].numpy(), "rows")
    same_bits(values, gw._values().numpy(), "values")
    values[:] = 0  # writable, and nobody else's memory


@pytest.mark.parametrize("cls", ["Embedding", "EmbeddingBag"])
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_sparse_gradient_indices_are_the_input_as_torchs(cls, padding_idx):
    """A sparse gradient whose entries are the input's indices in order (int64, no padding)
    has the input tensor itself as its indices, as torch's gradient has; with padding_idx
    the entries are fewer and the indices are emb's. Either way the entries equal torch's."""
    torch.manual_seed(0)
    w = torch.randn(V, D)
    x = torch.randint(0, V, (6, 4))
    x[0, 0] = 3
    out = {}
    for name, mod in (("emb", getattr(et, cls)), ("torch", getattr(nn, cls))):
        m = mod.from_pretrained(w, freeze=False, sparse=True, padding_idx=padding_idx)
        y = m(x)
        (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
        out[name] = m.weight.grad
    mine, theirs = out["emb"], out["torch"]
    same_bits(mine._indices().numpy(), theirs._indices().numpy(), "indices")
    same_bits(mine._values().numpy(), theirs._values().numpy(), "values")
    assert mine.is_coalesced() == theirs.is_coalesced()
    shares = mine._indices().data_ptr() == x.data_ptr()
    assert shares == (theirs._indices().data_ptr() == x.data_ptr()) == (padding_idx is None)


@pytest.mark.parametrize("layout", ["transposed input", "transposed grad", "int32 input",
                                    "empty input"])
def test_sparse_embedding_gradient_of_any_layout_is_torchs(layout):
    """The sparse gradient borrows the forward's indices and grad_output as views when it
    can: a non-contiguous input or grad_output, int32 indices and an empty input still give
    torch's gradient, with the input tensor as its indices exactly when torch's has it."""
    torch.manual_seed(0)
    w = torch.randn(V, D)
    x = torch.randint(0, V, (4, 6) if layout != "empty input" else (0, 6))
    if layout == "transposed input":
        x = x.t()
    elif layout == "int32 input":
        x = x.int()
    out = {}
    for name, mod in (("emb", et), ("torch", nn)):
        m = mod.Embedding.from_pretrained(w, freeze=False, sparse=True)
        y = m(x)
        if layout == "transposed grad":
            y = y.transpose(0, 1)
        (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
        out[name] = m.weight.grad
    mine, theirs = out["emb"], out["torch"]
    assert mine.shape == theirs.shape and mine._indices().dtype == theirs._indices().dtype
    same_bits(mine._indices().numpy(), theirs._indices().numpy(), "indices")
    same_bits(mine._values().numpy(), theirs._values().numpy(), "values")
    assert (mine._indices().data_ptr() == x.data_ptr()) == \
        (theirs._indices().data_ptr() == x.data_ptr())


@pytest.mark.parametrize("what", ["embedding", "sparse embedding", "bag input", "bag offsets",
                                  "bag psw", "bag weight"])
def test_in_place_change_before_backward_is_an_error_as_in_torch(what):
    """torch saves what its backward reads and refuses a backward after one of them was
    changed in place; the drop-ins do the same (they would read the changed values)."""
    def run(mod):
        torch.manual_seed(0)
        if what.endswith("embedding"):
            m = mod.Embedding(10, 3, sparse=what.startswith("sparse"))
            x = torch.tensor([[1, 2], [3, 4]])
            out = m(x)
            x.add_(1)
        else:
            m = mod.EmbeddingBag(10, 3, mode="sum")
            x, off = torch.tensor([1, 2, 3, 4]), torch.tensor([0, 2])
            p = torch.ones(4, requires_grad=True)
            out = m(x, off, per_sample_weights=p)
            if what == "bag input":
                x.add_(1)
            elif what == "bag offsets":
                off[1] = 1
            elif what == "bag psw":
                with torch.no_grad():
                    p.mul_(2)
            else:
                with torch.no_grad():
                    m.weight.mul_(2)
        with pytest.raises(RuntimeError) as e:
            out.sum().backward()
        return str(e.value)

    want, got = run(nn), run(et)
    assert "modified by an inplace operation" in want
    assert "modified by an inplace operation" in got


IN_BACKWARD = {
    "sgd": (torch.optim.SGD, {"lr": 0.1}),
    "sgd_momentum": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
    "adagrad": (torch.optim.Adagrad, {"lr": 0.1, "lr_decay": 0.01, "foreach": False}),
    "adam": (torch.optim.Adam, {"lr": 0.01}),
}


@pytest.mark.parametrize("name,eopts,bopts,one_d,psw,opt", CASES, ids=[c[0] for c in CASES])
def test_optimizer_in_backward_matches_torchs_step(name, eopts, bopts, one_d, psw, opt):
    """apply_optimizer_in_backward (TorchRec's call) on every parameter of emb's model: the
    Embedding and EmbeddingBag weights stepped inside their backward (fused when sparse),
    the Linear layer's from torch's gradient by the AccumulateGrad hook; after each step the
    parameters are the bits of torch's model trained with torch's optimizer, and no
    gradient is left in .grad."""
    torch.manual_seed(7)
    ref = Model(nn.Embedding, nn.EmbeddingBag, eopts, bopts)
    torch.manual_seed(7)
    mine = Model(et.Embedding, et.EmbeddingBag, eopts, bopts)
    ref_opts = make_optimizer(opt, ref)
    ref_opts = ref_opts if isinstance(ref_opts, list) else [ref_opts]
    if opt == "sparse_adam":
        et.apply_optimizer_in_backward(torch.optim.SparseAdam, [mine.e.weight, mine.b.weight],
                                       {"lr": 0.01})
        et.apply_optimizer_in_backward(torch.optim.Adam, mine.l.parameters(), {"lr": 0.01})
    else:
        cls, kw = IN_BACKWARD[opt]
        if opt == "adagrad":  # the reference with the same lr_decay
            ref_opts = [torch.optim.Adagrad(ref.parameters(), lr=0.1, lr_decay=0.01)]
        et.apply_optimizer_in_backward(cls, mine.parameters(), kw)
    for step, (x, bag_in, offsets, w, t) in enumerate(batches(12, 8, 5, one_d, psw,
                                                                torch.int64)):
        for o in ref_opts:
            o.zero_grad()
        outs = []
        for m in (ref, mine):
            wr = None if w is None else w.clone().requires_grad_()
            out = m(x, bag_in, offsets, wr)
            nn.functional.cross_entropy(out, t).backward()
            outs.append(None if wr is None else wr.grad)
        for o in ref_opts:
            o.step()
        if psw:  # read before the fused step changed the weight: torch's, within rounding
            torch.testing.assert_close(outs[1], outs[0], rtol=1.3e-6, atol=1e-5)
        for (pn, a), b in zip(ref.named_parameters(), mine.parameters()):
            same_bits(b.detach().numpy(), a.detach().numpy(), f"step {step} {pn}")
            assert b.grad is None, pn
    assert all(len(p._in_backward_optimizers) == 1 for p in mine.parameters())


def test_optimizer_in_backward_refusals():
    """What apply_optimizer_in_backward cannot do is refused when it is called (nothing
    attached), and a parameter whose memory was replaced afterwards is refused at its step."""
    m = et.Embedding(10, 4, sparse=True)
    with pytest.raises(TypeError, match="RMSprop"):
        et.apply_optimizer_in_backward(torch.optim.RMSprop, m.parameters(), {"lr": 0.1})
    with pytest.raises(ValueError, match="foreach=True"):
        et.apply_optimizer_in_backward(torch.optim.Adagrad, m.parameters(), {"foreach": True})
    with pytest.raises(TypeError, match="float64"):
        et.apply_optimizer_in_backward(torch.optim.SGD, [nn.Parameter(torch.ones(3).double())],
                                       {"lr": 0.1})
    with pytest.raises(ValueError, match="leaf"):
        et.apply_optimizer_in_backward(torch.optim.SGD, [m.weight * 2], {"lr": 0.1})
    with pytest.raises(ValueError, match="Invalid learning rate"):  # torch's check and message
        et.apply_optimizer_in_backward(torch.optim.SGD, m.parameters(), {"lr": -1.0})
    assert "_emb_in_backward" not in m.weight.__dict__
    et.apply_optimizer_in_backward(torch.optim.SGD, m.parameters(), {"lr": 0.1})
    with pytest.raises(ValueError, match="already"):
        et.apply_optimizer_in_backward(torch.optim.SGD, m.parameters(), {"lr": 0.1})
    before = m.weight.detach().clone()
    m(torch.tensor([1, 2])).sum().backward()
    assert not torch.equal(m.weight, before) and m.weight.grad is None
    m.weight.data = torch.zeros(10, 4)
    with pytest.raises(RuntimeError, match="memory changed"):
        m(torch.tensor([1, 2])).sum().backward()
    assert torch.equal(m.weight, torch.zeros(10, 4))


def test_optimizer_in_backward_leaves_an_old_grad_alone():
    """A gradient left in .grad before apply_optimizer_in_backward is neither stepped nor
    cleared by the backward of a module that steps its weight itself (its AccumulateGrad
    receives nothing): the weight moves by this backward's gradient only, as torch's SGD
    on that gradient moves it."""
    torch.manual_seed(3)
    mine, ref = et.Embedding(10, 4, sparse=True), nn.Embedding(10, 4, sparse=True)
    ref.load_state_dict(mine.state_dict())
    old = torch.full((10, 4), 7.0)
    mine.weight.grad = old
    et.apply_optimizer_in_backward(torch.optim.SGD, mine.parameters(), {"lr": 0.5})
    x = torch.tensor([[1, 2, 2], [9, 0, 1]])
    mine(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    torch.optim.SGD(ref.parameters(), lr=0.5).step()
    same_bits(mine.weight.detach().numpy(), ref.weight.detach().numpy(), "the weight")
    assert mine.weight.grad is old and torch.equal(old, torch.full((10, 4), 7.0))


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("cls,kw", [(torch.optim.SGD, {"lr": 0.3}),
                                    (torch.optim.Adagrad, {"lr": 0.1})])
def test_optimizer_in_backward_with_a_weight_used_twice(sparse, cls, kw):
    """A weight used more than once by a graph (an Embedding called twice, and a bag sharing
    its weight) is stepped once on the summed gradient, as torch's optimizer after the
    backward steps it: the uses return their gradients and the AccumulateGrad hook steps
    the sum. The next step, with one use, is fused again."""
    def build(ecls, bcls):
        torch.manual_seed(4)
        e = ecls(V, D, sparse=sparse)
        b = bcls(V, D, mode="sum", sparse=sparse)
        b.weight = e.weight
        return e, b
    ref, mine = build(nn.Embedding, nn.EmbeddingBag), build(et.Embedding, et.EmbeddingBag)
    opt = cls([ref[0].weight], **kw)
    et.apply_optimizer_in_backward(cls, [mine[0].weight], kw)
    g = torch.Generator().manual_seed(2)
    for step in range(6):
        x1, x2 = (torch.randint(0, V, (5, 3), generator=g) for _ in range(2))
        for e, b in (ref, mine):
            out = e(x1).sum() * 0.5 + (e(x2) ** 2).sum()
            if step % 2 == 0:  # the bag too: three uses
                out = out + b(x1).pow(3).sum()
            if step == 5:  # one use only
                out = e(x1).pow(2).sum()
            out.backward()
        opt.step()
        opt.zero_grad()
        same_bits(mine[0].weight.detach().numpy(), ref[0].weight.detach().numpy(),
                  f"step {step}")
        assert mine[0].weight.grad is None
        assert mine[0].weight._emb_in_backward.uses == 0


def test_remove_optimizer_in_backward():
    """remove_optimizer_in_backward undoes apply_optimizer_in_backward: the gradients
    accumulate in .grad again, the same as the plain modules' (the weight as stepped so
    far, by torch's SGD's bits), a new optimizer can be applied, and the model is freed when
    dropped (the AccumulateGrad node the hook lives on held its parameters until then)."""
    torch.manual_seed(5)
    mine = nn.ModuleDict({"e": et.Embedding(V, D, sparse=True), "l": nn.Linear(D, 1)})
    ref = nn.ModuleDict({"e": nn.Embedding(V, D, sparse=True), "l": nn.Linear(D, 1)})
    ref.load_state_dict(mine.state_dict())
    opt = torch.optim.SGD(ref.parameters(), lr=0.2)
    et.apply_optimizer_in_backward(torch.optim.SGD, mine.parameters(), {"lr": 0.2})
    x = torch.tensor([[1, 2, 3], [4, 4, 0]])

    def loss(m):
        return m["l"](m["e"](x)).pow(2).sum()
    for m in (mine, ref):
        loss(m).backward()
    opt.step()
    opt.zero_grad()
    assert et.remove_optimizer_in_backward(mine.parameters()) == 3
    assert et.remove_optimizer_in_backward(mine.parameters()) == 0
    for m in (mine, ref):
        loss(m).backward()
    for (name, a), b in zip(mine.named_parameters(), ref.parameters()):
        assert "_in_backward_optimizers" not in a.__dict__
        same_bits(a.detach().numpy(), b.detach().numpy(), name)
        ga, gb = a.grad, b.grad
        if ga.is_sparse:
            ga, gb = ga.to_dense(), gb.to_dense()
        same_bits(ga.numpy(), gb.numpy(), f"{name}'s gradient")
    et.apply_optimizer_in_backward(torch.optim.Adagrad, mine.parameters(), {"lr": 0.1})
    et.remove_optimizer_in_backward(mine.parameters())
    refs = [weakref.ref(p) for p in mine.parameters()]
    del mine, m, a
    gc.collect()
    assert all(r() is None for r in refs), "a parameter was not freed"
