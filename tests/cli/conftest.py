"""Shared fixtures of the CLI suite: where the programs are, how to run them, and the
"seed tour" twins — the steps of the five seed documents re-run in PyTorch, producing the
text that `emb demo` and the seed example programs (tools/tour/seed00*.c) must print.

ctest passes EMB_BIN (the emb binary), EMB_BUILD_DIR (examples are in
$EMB_BUILD_DIR/examples) and EMB_SOURCE_DIR. Without them the default build directory
(<repo>/build) is used.
"""
import contextlib
import difflib
import io
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from shared_data import shared_path  # noqa: E402  (tests/shared_data.py)

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("EMB_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD_DIR = os.environ.get("EMB_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
EMB_BIN = os.environ.get("EMB_BIN") or os.path.join(BUILD_DIR, "emb")
EXAMPLES_DIR = os.path.join(BUILD_DIR, "examples")

# The seed the tour programs use when given none (TOUR_DEFAULT_SEED in tools/tour/seed_tour.h).
TOUR_DEFAULT_SEED = 42


def header_version():
    """MAJOR.MINOR.PATCH from include/emb/core.h (the one place the version is written),
    which `emb --version` must print."""
    with open(os.path.join(SOURCE_DIR, "include", "emb", "core.h")) as f:
        text = f.read()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"^#define EMB_VERSION_{part} +([0-9]+)$", text, re.M)
        assert m, f"EMB_VERSION_{part} not found in include/emb/core.h"
        parts.append(m.group(1))
    return ".".join(parts)


def _require(path, what):
    if not os.path.exists(path):
        pytest.fail(f"{what} not found at {path}: build first (cmake --build <dir>) and run "
                    f"through ctest, which sets EMB_BIN and EMB_BUILD_DIR")
    return path


@pytest.fixture(scope="session")
def build_dir():
    return BUILD_DIR


@pytest.fixture(scope="session")
def emb_bin():
    return _require(EMB_BIN, "the emb binary")


@pytest.fixture(scope="session")
def examples_dir():
    return EXAMPLES_DIR


@pytest.fixture(scope="session")
def example():
    """example(name) -> path of the built example program, failing clearly when missing."""
    return lambda name: _require(os.path.join(EXAMPLES_DIR, name), f"example {name}")


@pytest.fixture
def seeds_dir():
    """The seed documents' directory (tests/shared_data.py); the test fails without it."""
    return shared_path("seeds")


def synthetic(path, lines=400, seed=1, words_per_line=20, the="The,"):
    """A training corpus with two topics that never share a line (colors and animals),
    plus a frequent word `the`; returns its path as a string."""
    import random
    rng = random.Random(seed)
    colors = "red green blue yellow purple orange".split()
    animals = "cat dog horse mouse sheep goat".split()
    with open(path, "w") as f:
        for i in range(lines):
            topic = colors if i % 2 else animals
            toks = []
            for _ in range(words_per_line):
                toks.append(rng.choice(topic))
                if rng.random() < 0.1:
                    toks.append(the)
            f.write(" ".join(toks) + "\n")
    return str(path)


def run(argv, timeout=120, stdout=subprocess.PIPE, **kw):
    """Runs a program and returns the CompletedProcess (text mode, output captured unless
    stdout is given)."""
    return subprocess.run(argv, stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, **kw)


@pytest.fixture(scope="session")
def run_prog():
    return run


# ---------------------------------------------------------------------------------------
# The seed tour in PyTorch. Each twin runs the document's steps in torch with the same seeds
# and the same sequence of random calls as the C program and returns the list of blocks the
# C program prints, one per print: plain strings (torch's own text) or compiled regexes for
# the few lines that are emb's own (the error message of an out-of-range lookup).
# ---------------------------------------------------------------------------------------

class _Printer:
    def __init__(self):
        self.blocks = []

    def __call__(self, *args):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            print(*args)
        self.blocks.append(buf.getvalue())

    def expect(self, regex):
        self.blocks.append(re.compile(regex))


def twin_000(seed=None):
    import torch
    import torch.nn as nn
    p = _Printer()
    vocab = ['a', 'b', 'c', 'd', 'e', 'f']
    p(vocab)
    p(vocab.index('c'))
    p(torch.tensor([vocab.index('c')]))
    torch.manual_seed(0)
    embedding_layer = nn.Embedding(num_embeddings=len(vocab), embedding_dim=2)
    for c in vocab:
        token = torch.tensor([vocab.index(c)])
        p(embedding_layer(token).detach())
    for prm in embedding_layer.parameters():
        p(prm)
        p(prm.shape)
    p((embedding_layer.weight.T @ torch.tensor([[1., 0., 0., 0., 0., 0.]]).T).T)
    return p.blocks


def twin_001(seed=TOUR_DEFAULT_SEED):
    import torch
    import torch.nn as nn
    p = _Printer()
    p(f"manual_seed({seed})")
    torch.manual_seed(seed)
    emb = nn.Embedding(10, 3)
    p(emb.weight)
    X = torch.randint(0, 10, (10,))
    p(X.shape)
    p(emb(X).shape)
    X = torch.randint(0, 10, (5,))
    p(X.shape)
    p(emb(X).shape)
    p(X)
    p(emb.weight)
    p(emb(torch.tensor([0, 1])))
    p(emb(torch.tensor([2, 3, 4])))
    with pytest.raises(IndexError, match="index out of range in self"):
        emb(torch.tensor([10]))
    # emb reports the same failure as a status and a message naming the index, its
    # position and the valid range.
    p.expect(r"error: emb_embedding_forward\(tensor\(\[10\]\)\) returned -4 "
             r"\(index out of range\): [^\n]*\bindex 10\b[^\n]*\bposition 0\b[^\n]*"
             r"\[0, 10\)[^\n]*\n")
    emb = nn.Embedding(10, 3)
    labels = torch.randint(0, 10, (64,))
    p(labels.shape)
    X = torch.randn(64, 10)
    p(X.shape)
    emb_out = emb(labels)
    p(emb_out.shape)
    cat = torch.cat((X, emb_out), dim=1)
    p(cat.shape)
    p(X[0])
    p(emb.weight[0])
    p(cat[0])
    cat = cat.unsqueeze(-1)
    p(cat.shape)
    p(cat[0])
    return p.blocks


def twin_002(seed=TOUR_DEFAULT_SEED):
    import string
    import torch
    import torch.nn as nn
    p = _Printer()
    p(f"manual_seed({seed})")
    torch.manual_seed(seed)
    chars = list(string.printable)
    n_chars = len(chars)
    tokenizer = dict(zip(chars, range(len(chars))))
    input_string = "WTF does nn.Embedding do?"
    input_tensor = torch.tensor([[tokenizer[c] for c in input_string]], dtype=torch.long)
    p(f"Input Tensor Shape: {input_tensor.shape}")
    embed_dim = 10
    embedding = nn.Embedding(n_chars, embed_dim)
    output_embedding = embedding(input_tensor)
    p(f"Output Tensor Shape: {output_embedding.shape}")
    a_tokenized = torch.tensor([[tokenizer['a']]], dtype=torch.long)
    a_embedded = embedding(a_tokenized)
    p(f"Embedding for 'a': {a_embedded}")
    x = torch.tensor([[1, 0, 1, 0], [0, 0, 1, 1], [1, 1, 1, 0]], dtype=torch.float32)
    w_linear = nn.Linear(4, 3, bias=False)
    p(w_linear.weight)
    p(w_linear(x[0, :]))
    w_embedding = nn.Embedding(4, 3).from_pretrained(w_linear.weight.t())
    p(w_embedding.weight)
    row_indices = torch.tensor([0, 2], dtype=torch.long)
    embedding_output = w_embedding(row_indices).sum(dim=0)
    p(embedding_output)
    # The document's claim, checked in torch itself: the sum equals the Linear output.
    assert torch.equal(embedding_output, w_linear(x[0, :]).detach())
    return p.blocks


def twin_003(seed=None):
    import torch
    p = _Printer()
    idx = torch.tensor([2, 3, 1])
    num_idx = max(idx) + 1
    out_dim = 5
    torch.manual_seed(123)
    embedding = torch.nn.Embedding(num_idx, out_dim)
    p(embedding.weight)
    p(embedding(torch.tensor([1])))
    p(embedding(torch.tensor([2])))
    p(embedding(idx))
    onehot = torch.nn.functional.one_hot(idx)
    p(onehot)
    torch.manual_seed(123)
    linear = torch.nn.Linear(num_idx, out_dim, bias=False)
    p(linear.weight)
    linear.weight = torch.nn.Parameter(embedding.weight.T.detach())
    p(linear(onehot.float()))
    p(embedding(idx))
    return p.blocks


def twin_004(seed=TOUR_DEFAULT_SEED):
    import torch
    import torch.nn as nn
    p = _Printer()
    p(f"manual_seed({seed})")
    torch.manual_seed(seed)
    sequence = torch.randint(low=0, high=10, size=(5, 3))
    p(sequence)
    embedding = nn.Embedding(num_embeddings=10, embedding_dim=4)
    p(embedding.weight)
    with torch.inference_mode():
        p(embedding(torch.tensor(0)))
        p(embedding(sequence))
    return p.blocks


# section id -> (example program, its PyTorch twin, whether the program takes a seed)
TOUR = {
    "000": ("seed000_vocab", twin_000, False),
    "001": ("seed001_lookup", twin_001, True),
    "002": ("seed002_chars", twin_002, True),
    "003": ("seed003_linear", twin_003, False),
    "004": ("seed004_words", twin_004, True),
}


def _context(text, pos, width=400):
    return text[max(0, pos - 80):pos + width]


def _describe(block):
    return block.pattern if isinstance(block, re.Pattern) else block


def match_exact(stdout, blocks, what):
    """stdout must be exactly the concatenation of the blocks."""
    pos = 0
    for i, b in enumerate(blocks):
        if isinstance(b, re.Pattern):
            m = b.match(stdout, pos)
            ok = m is not None
            end = m.end() if m else pos
        else:
            ok = stdout.startswith(b, pos)
            end = pos + len(b)
        if not ok:
            got = stdout[pos:pos + max(len(_describe(b)), 200)]
            diff = "\n".join(difflib.unified_diff(
                _describe(b).splitlines(), got.splitlines(), "torch", "emb", lineterm=""))
            pytest.fail(f"{what}: printed block {i} differs from PyTorch's\n{diff}\n"
                        f"--- whole output so far ---\n{stdout[:pos]}")
        pos = end
    if pos != len(stdout):
        pytest.fail(f"{what}: unexpected output after the last block:\n{stdout[pos:pos + 400]}")


def match_in_order(stdout, blocks, what):
    """Each block must appear, starting at a line start, after the previous one (other lines,
    the demo's commentary, may come in between). Returns the (start, end) span of each."""
    pos = 0
    spans = []
    for i, b in enumerate(blocks):
        if isinstance(b, re.Pattern):
            m = re.compile(r"(?m)^(?:" + b.pattern + ")").search(stdout, pos)
            start, end = (m.start(), m.end()) if m else (-1, -1)
        else:
            start = pos
            while True:
                start = stdout.find(b, start)
                if start <= 0 or stdout[start - 1] == "\n":
                    break
                start += 1
            end = start + len(b)
        if start < 0:
            pytest.fail(f"{what}: PyTorch's block {i} not found after position {pos}:\n"
                        f"{_describe(b)}\n--- emb's output from there ---\n"
                        f"{_context(stdout, pos)}")
        spans.append((start, end))
        pos = end
    return spans


@pytest.fixture(scope="session")
def tour():
    """The seed tour helpers: tour.TOUR, tour.match_exact, tour.match_in_order,
    tour.DEFAULT_SEED."""
    class _Tour:
        pass
    t = _Tour()
    t.TOUR = TOUR
    t.DEFAULT_SEED = TOUR_DEFAULT_SEED
    t.match_exact = match_exact
    t.match_in_order = match_in_order
    return t
