"""examples/bow_classifier against PyTorch 1.13: the same model (EmbeddingBag mean ->
Linear -> cross-entropy; SparseAdam, Adagrad or SGD on the bag, Adam on the Linear), the same
initialisation (torch.manual_seed), the same data in the same order (the example dumps
them with --dump) and the same number of steps, replayed in torch. Every parameter must be
bit-identical to torch's after the run (220 steps), at 1 and at 2 threads, with the fused
and with the unfused bag update, and with either bag optimizer: every piece of the step is
bit-exact (bag forward and sparse backward, Linear through torch's own sgemm calls,
cross-entropy with SLEEF's exp/log in torch's order, the optimizers). The Linear layer's
products are bit-identical to torch's with the same OpenBLAS kernel (one process, one
OpenBLAS: the same core type) at the same thread count, as torch's own are (docs/semantics.md
§8), so each run is replayed in torch at the thread count it ran with.

Nothing here touches the network: the corpus is synthetic, written by the test."""
import os
import re
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("EMB_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD_DIR = os.environ.get("EMB_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
BOW = os.path.join(BUILD_DIR, "examples", "bow_classifier")

STEPS = 220


def synthetic_corpus(n_docs=60, words_per_doc=1300, seed=7):
    """One document per line. Words come from a shared pool and an era-specific pool (the
    era of a document is its third of the file), so the eras are learnable but not
    trivially."""
    common = [f"w{i}" for i in range(300)]
    eras = [[f"e{e}x{i}" for i in range(60)] for e in range(3)]
    state = seed
    lines = []
    for d in range(n_docs):
        era = d * 3 // n_docs
        words = []
        for _ in range(words_per_doc):
            state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            r = state >> 33
            if r % 5 == 0:
                words.append(eras[era][(r >> 3) % 60])
            else:
                words.append(common[(r >> 3) % 300])
        lines.append(" ".join(words))
    return "\n\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("bow") / "corpus.txt"
    # letters only in words: the example's tokenizer keeps runs of a-z
    p.write_text(synthetic_corpus().replace("0", "a").replace("1", "b").replace("2", "c")
                 .replace("3", "d").replace("4", "e").replace("5", "f").replace("6", "g")
                 .replace("7", "h").replace("8", "i").replace("9", "j"), encoding="utf-8")
    return p


COMMON = ["--words", "16", "--batch", "16", "--dim", "16", "--epochs", "2", "--min-count", "3",
          "--seed", "11"]


def run(corpus, out, *extra):
    r = subprocess.run([BOW, "--corpus", str(corpus), "--dump", str(out)] + COMMON +
                       [str(x) for x in extra], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def load(d):
    meta = dict(line.split(" ", 1) for line in (d / "meta.txt").read_text().splitlines())
    V, D, C = int(meta["vocab"]), int(meta["dim"]), int(meta["classes"])
    rd = lambda name, dt: np.fromfile(d / name, dtype=dt)
    return dict(
        V=V, D=D, C=C, B=int(meta["batch"]), steps=int(meta["steps"]), lr=float(meta["lr"]),
        bag_lr=float(meta["bag_lr"]),
        optimizer=meta["optimizer"].strip(), seed=int(meta["seed"]),
        ids=rd("train_ids.i64", np.int64), start=rd("train_start.i64", np.int64),
        label=rd("train_label.i64", np.int64), order=rd("order.i64", np.int64),
        bag=rd("bag.f32", np.float32).reshape(V, D),
        w=rd("linear_weight.f32", np.float32).reshape(C, D),
        b=rd("linear_bias.f32", np.float32))


def replay(m, threads=1):
    """The same training in torch, on `threads` intra-op threads."""
    torch.set_num_threads(threads)
    torch.manual_seed(m["seed"])
    bag = torch.nn.EmbeddingBag(m["V"], m["D"], mode="mean", sparse=True)
    lin = torch.nn.Linear(m["D"], m["C"])
    if m["optimizer"] == "adagrad":
        ob = torch.optim.Adagrad(bag.parameters(), lr=m["bag_lr"])
    elif m["optimizer"] == "sgd":
        ob = torch.optim.SGD(bag.parameters(), lr=m["bag_lr"])
    else:
        ob = torch.optim.SparseAdam(list(bag.parameters()), lr=m["bag_lr"])
    ol = torch.optim.Adam(lin.parameters(), lr=m["lr"])
    B = m["B"]
    for s in range(m["steps"]):
        ps = m["order"][s * B:(s + 1) * B]
        ids = [m["ids"][m["start"][p]:m["start"][p + 1]] for p in ps]
        off = torch.tensor(np.concatenate([[0], np.cumsum([len(x) for x in ids])[:-1]]))
        inp = torch.from_numpy(np.concatenate(ids).astype(np.int64))
        y = torch.from_numpy(m["label"][ps])
        ob.zero_grad()
        ol.zero_grad()
        loss = F.cross_entropy(lin(bag(inp, off)), y)
        loss.backward()
        ob.step()
        ol.step()
    return (bag.weight.detach().numpy(), lin.weight.detach().numpy(),
            lin.bias.detach().numpy())


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_initialisation_is_torchs(corpus, tmp_path):
    """The initial parameters are torch's, bit for bit (torch.manual_seed(seed), then
    nn.EmbeddingBag, then nn.Linear); one step later they agree within tolerance."""
    out = run(corpus, tmp_path / "one", "--max-steps", "1")
    assert "held-out accuracy" in out
    d = tmp_path / "one"
    m = load(d)
    assert m["steps"] == 1
    torch.manual_seed(m["seed"])
    bag = torch.nn.EmbeddingBag(m["V"], m["D"], mode="mean", sparse=True)
    lin = torch.nn.Linear(m["D"], m["C"])
    for name, want in (("init_bag.f32", bag.weight), ("init_linear_weight.f32", lin.weight),
                       ("init_linear_bias.f32", lin.bias)):
        got = np.fromfile(d / name, dtype=np.float32)
        assert same_bits(got, want.detach().numpy().ravel()), name
    assert_params_equal(m, replay(m))


def assert_params_equal(m, torch_params):
    """Every parameter bit-identical; on failure, say by how much and how many differ."""
    for name, got, want in zip(("bag", "linear weight", "linear bias"), (m["bag"], m["w"], m["b"]),
                               torch_params):
        if not same_bits(got, want):
            bad = np.count_nonzero(got.view(np.uint32) != want.view(np.uint32))
            raise AssertionError(f"{name}: {bad} of {got.size} values differ from torch's; "
                                 f"max |diff| {np.max(np.abs(got - want)):.3g}")


def test_training_run_matches_torch(corpus, tmp_path):
    out1 = run(corpus, tmp_path / "t1", "--max-steps", STEPS, "--threads", "1")
    out2 = run(corpus, tmp_path / "t2", "--max-steps", STEPS, "--threads", "2")
    out3 = run(corpus, tmp_path / "t3", "--max-steps", STEPS, "--threads", "2", "--unfused")
    m1, m2, m3 = load(tmp_path / "t1"), load(tmp_path / "t2"), load(tmp_path / "t3")
    assert m1["steps"] == STEPS >= 200
    for k in ("bag", "w", "b"):
        assert same_bits(m2[k], m3[k]), f"{k}: fused and unfused differ"
    assert out2 == out3
    assert_params_equal(m1, replay(m1, threads=1))
    try:
        assert_params_equal(m2, replay(m2, threads=2))
    finally:
        torch.set_num_threads(1)


def test_adagrad_variant(corpus, tmp_path):
    run(corpus, tmp_path / "a", "--max-steps", STEPS, "--optimizer", "adagrad")
    m = load(tmp_path / "a")
    assert_params_equal(m, replay(m))


def test_sgd_variant(corpus, tmp_path):
    run(corpus, tmp_path / "s", "--max-steps", STEPS, "--optimizer", "sgd", "--bag-lr", "0.5")
    m = load(tmp_path / "s")
    assert m["bag_lr"] == 0.5 and m["lr"] == 0.01
    assert_params_equal(m, replay(m))


def test_usage_errors():
    r = subprocess.run([BOW, "--optimizer", "sgdx"], capture_output=True, text=True)
    assert r.returncode == 2 and "expected sparse_adam, adagrad or sgd" in r.stderr
    r = subprocess.run([BOW, "--dtype", "f16"], capture_output=True, text=True)
    assert r.returncode == 2 and "--optimizer sgd" in r.stderr
    r = subprocess.run([BOW, "--dtype", "int8", "--optimizer", "sgd"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "expected f32, f16 or bf16" in r.stderr
    r = subprocess.run([BOW, "--dtype", "bf16", "--optimizer", "sgd", "--dump", "x"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--dump" in r.stderr
    r = subprocess.run([BOW, "--dim", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and "--dim" in r.stderr
    r = subprocess.run([BOW, "--corpus", "/nonexistent/x.txt"], capture_output=True, text=True)
    assert r.returncode == 1 and "cannot open corpus" in r.stderr


def epochs(out):
    """[(train loss, held-out accuracy)] per epoch from the example's output."""
    got = re.findall(r"train loss ([0-9.]+)\s+held-out accuracy ([0-9.]+)", out)
    return [(float(a), float(b)) for a, b in got]


def test_half_precision_tables_still_learn(corpus):
    """The bag's table in f16 / bf16 (emb_qtable), trained by SGD with stochastic rounding,
    follows the float32 SGD run closely: final loss within 0.02, held-out accuracy within
    0.03, both well above chance (three eras). Round-to-nearest bf16 loses many of the small
    updates (a bfloat16 has 8 significant bits) and ends clearly worse, which is why
    stochastic rounding is the default. The fused step and backward + step give the same
    run, and so do 1 and 2 threads."""
    args = COMMON[:]
    args[args.index("--epochs") + 1] = "4"
    base = [BOW, "--corpus", str(corpus), "--optimizer", "sgd", "--bag-lr", "0.5"] + args

    def go(*extra):
        r = subprocess.run(base + list(extra), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout

    f32 = epochs(go("--dtype", "f32"))
    assert len(f32) == 4 and f32[-1][0] < f32[0][0] and f32[-1][1] > 0.6
    for dt in ("f16", "bf16"):
        out = go("--dtype", dt)
        half = epochs(out)
        assert len(half) == 4
        assert abs(half[-1][0] - f32[-1][0]) < 0.02, (dt, half, f32)
        assert abs(half[-1][1] - f32[-1][1]) < 0.03, (dt, half, f32)
        assert half[-1][0] < half[0][0]
        assert go("--dtype", dt, "--unfused") == out
        assert go("--dtype", dt, "--threads", "2") == out
    nearest = epochs(go("--dtype", "bf16", "--rounding", "nearest"))
    stochastic = epochs(go("--dtype", "bf16"))
    assert nearest[-1][0] > stochastic[-1][0] + 0.1, (nearest, stochastic)
