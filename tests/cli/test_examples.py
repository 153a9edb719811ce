"""The seed examples (tools/tour/seed00*.c with examples/seed_main.c): each prints exactly what PyTorch prints when the
same document steps run in torch with the same seeds (generated live by the twins in
conftest.py); 000 and 003, whose documents fixed the seed, also print the documents' own
tables verbatim. Plus their argument handling and output errors."""
import glob
import os
import re

import pytest

from conftest import TOUR, run

SECTIONS = sorted(TOUR)
SEEDED = [s for s in SECTIONS if TOUR[s][2]]
FIXED = [s for s in SECTIONS if not TOUR[s][2]]


@pytest.mark.parametrize("section", SECTIONS)
def test_example_prints_what_torch_prints(section, example, tour):
    prog, twin, _ = TOUR[section]
    r = run([example(prog)])
    assert r.returncode == 0, f"{prog} exited {r.returncode}: {r.stderr}"
    assert r.stderr == ""
    tour.match_exact(r.stdout, twin(), prog)


@pytest.mark.parametrize("seed", [0, 7, 2**32 + 7, 2**64 - 1])
@pytest.mark.parametrize("section", SEEDED)
def test_seeded_example_follows_its_seed(section, seed, example, tour):
    prog, twin, _ = TOUR[section]
    r = run([example(prog), str(seed)])
    assert r.returncode == 0, f"{prog} {seed} exited {r.returncode}: {r.stderr}"
    assert r.stderr == ""
    tour.match_exact(r.stdout, twin(seed), f"{prog} {seed}")


def _printed_blocks(text):
    """Splits a program's output into what one print() produced: a tensor repr (from the
    line starting 'tensor(' to its closing parenthesis, with a 'Parameter containing:'
    line before it when present) or a single other line."""
    lines = text.splitlines(keepends=True)
    blocks, i = [], 0
    while i < len(lines):
        start = i
        if lines[i] == "Parameter containing:\n":
            i += 1
        if i < len(lines) and lines[i].startswith("tensor("):
            depth = 0
            while i < len(lines):
                depth += lines[i].count("(") - lines[i].count(")")
                i += 1
                if depth <= 0:
                    break
        else:
            i += 1
        blocks.append("".join(lines[start:i]))
    return blocks


def _seed_document(seeds_dir, section):
    paths = glob.glob(os.path.join(seeds_dir, f"{section}_*.txt"))
    assert len(paths) == 1, f"expected one seed document {section}_*.txt in {seeds_dir}"
    with open(paths[0], encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("section", FIXED)
def test_fixed_seed_example_reproduces_the_document(section, example, seeds_dir):
    doc = _seed_document(seeds_dir, section)
    prog = TOUR[section][0]
    r = run([example(prog)])
    assert r.returncode == 0, r.stderr
    blocks = _printed_blocks(r.stdout)
    tables = [b for b in blocks if b.startswith(("tensor(", "Parameter containing:"))]
    # 000: 1 index tensor, 6 lookups, the table, the one-hot product; 003: the table, 3
    # lookups, the one-hot matrix, the Linear weight, its output, the lookup again.
    assert len(tables) == {"000": 9, "003": 8}[section], blocks
    missing = [b for b in blocks if b not in doc]
    assert not missing, ("not in the seed document verbatim:\n" + "\n".join(missing))


def test_equivalence_outputs_are_equal_in_003(example):
    """The point of document 003, on emb's own numbers: Linear(one_hot(idx).float()) with
    the table as weight prints the same values as embedding(idx)."""
    r = run([example("seed003_linear")])
    assert r.returncode == 0, r.stderr
    blocks = _printed_blocks(r.stdout)
    mm = [b for b in blocks if "grad_fn=<MmBackward0>" in b]
    assert len(mm) == 1
    lookup = blocks[blocks.index(mm[0]) + 1]
    assert "grad_fn=<EmbeddingBackward0>" in lookup

    def values(b):
        return re.findall(r"-?\d+\.\d+", b)
    assert len(values(mm[0])) == 15
    assert values(mm[0]) == values(lookup)


@pytest.mark.parametrize("section", SECTIONS)
def test_example_help(section, example):
    prog, _, seeded = TOUR[section]
    r = run([example(prog), "--help"])
    assert r.returncode == 0
    assert r.stdout.startswith("usage: ")
    assert ("[SEED]" in r.stdout) == seeded
    assert r.stderr == ""


@pytest.mark.parametrize("args, message", [
    (["abc"], "invalid seed 'abc'"),
    (["-1"], "invalid seed '-1'"),
    (["12x"], "invalid seed '12x'"),
    ([""], "invalid seed ''"),
    (["18446744073709551616"], "invalid seed '18446744073709551616'"),
    (["1", "2"], "too many arguments"),
])
@pytest.mark.parametrize("section", SEEDED)
def test_seeded_example_rejects_bad_arguments(section, args, message, example):
    prog = TOUR[section][0]
    r = run([example(prog)] + args)
    assert r.returncode == 2, r.stdout
    assert message in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("section", FIXED)
def test_fixed_seed_example_takes_no_arguments(section, example):
    prog = TOUR[section][0]
    r = run([example(prog), "5"])
    assert r.returncode == 2
    assert "too many arguments" in r.stderr
    assert "usage: " in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("section", SECTIONS)
def test_example_reports_a_write_error(section, example):
    prog = TOUR[section][0]
    with open("/dev/full", "w") as full:
        r = run([example(prog)], stdout=full)
    assert r.returncode == 1
    assert re.fullmatch(r"emb: [^\n]+: [^\n]+\n", r.stderr), r.stderr
