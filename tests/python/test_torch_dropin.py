"""emb.torch.Embedding / EmbeddingBag against torch.nn.Embedding / EmbeddingBag: the same
model built twice from the same seed, one with torch's modules and one with emb's, trained
with torch's own optimizers on the same batches; every parameter must be the same bits after
every step, and so must every output and gradient."""
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
