"""`emb demo`, the tour of the five seed documents. The demo's tensors are compared with what
PyTorch prints for the same steps and seeds (the twins in conftest.py), generated live. The
rules every command follows (help, usage errors, write errors) are in test_cli.py."""
import re

import pytest

from conftest import TOUR, header_version, run

SECTIONS = sorted(TOUR)
HEADING = re.compile(r"(?m)^== (00\d): [^\n]+ ==$")


def _twin_blocks(sections, seed):
    blocks = []
    for s in sections:
        twin, seeded = TOUR[s][1], TOUR[s][2]
        blocks += twin(seed) if seeded else twin()
    return blocks


def _commentary_only(text):
    """What is left of the demo's output once the tensors are taken out must be its own
    prose: the introduction, headings, '-- ' commentary and blank lines."""
    first = text.find("\n== ")
    assert first > 0, "no section heading"
    for line in text[first:].splitlines():
        assert line == "" or HEADING.fullmatch(line) or line.startswith("-- "), (
            f"unexpected line in the demo: {line!r}")


def _demo(emb_bin, *args):
    r = run([emb_bin, "demo", *args])
    assert r.returncode == 0, f"emb demo {' '.join(args)} exited {r.returncode}: {r.stderr}"
    assert r.stderr == ""
    return r.stdout


def test_demo_tours_all_five_documents_like_torch(emb_bin, tour):
    out = _demo(emb_bin)
    assert out.startswith(f"emb {header_version()}: a tour of nn.Embedding\n")
    assert HEADING.findall(out) == SECTIONS
    spans = tour.match_in_order(out, _twin_blocks(SECTIONS, tour.DEFAULT_SEED), "emb demo")
    rest, pos = [], 0
    for start, end in spans:
        rest.append(out[pos:start])
        pos = end
    rest.append(out[pos:])
    _commentary_only("".join(rest))
    # Every step is explained: at least one commentary line per section, and more
    # commentary lines than sections overall.
    for part in re.split(r"(?m)^== 00\d: [^\n]+ ==$", out)[1:]:
        assert re.search(r"(?m)^-- \S", part)
    assert len(re.findall(r"(?m)^-- ", out)) >= 30


@pytest.mark.parametrize("args, sections, seed", [
    (["--seed", "7", "001", "004"], ["001", "004"], 7),
    (["--seed=123456789012", "2"], ["002"], 123456789012),
    (["003", "000"], ["000", "003"], None),
])
def test_demo_sections_and_seed(emb_bin, tour, args, sections, seed):
    out = _demo(emb_bin, *args)
    assert HEADING.findall(out) == sections
    tour.match_in_order(out, _twin_blocks(sections, seed if seed is not None
                                          else tour.DEFAULT_SEED), "emb demo " + " ".join(args))


@pytest.mark.parametrize("section", SECTIONS)
def test_demo_section_is_its_example_plus_commentary(section, emb_bin, example):
    """The demo and the example programs run the same code: without its introduction,
    heading and commentary, a demo section prints exactly what the example prints."""
    out = _demo(emb_bin, section)
    body = out[out.index("\n== "):]
    body = re.sub(r"^\n== [^\n]+ ==\n\n", "", body)
    body = "".join(l for l in body.splitlines(keepends=True) if not l.startswith("-- "))
    r = run([example(TOUR[section][0])])
    assert r.returncode == 0, r.stderr
    assert body == r.stdout


def test_demo_help(emb_bin):
    r = run([emb_bin, "demo", "--help"])
    assert r.returncode == 0
    assert r.stdout.startswith("usage: emb demo [--seed N] [SECTION...]\n")
    assert "--seed N" in r.stdout
    for s in SECTIONS:
        assert re.search(rf"(?m)^  {s}  \S", r.stdout), f"section {s} not described"
    assert r.stderr == ""


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "unknown option '--bogus'"),
    (["-x"], "unknown option '-x'"),
    (["007"], "unknown section '007': sections are 000 to 004"),
    (["000", "x"], "unknown section 'x': sections are 000 to 004"),
    (["--", "--seed"], "unknown section '--seed': sections are 000 to 004"),
    (["--seed"], "--seed needs a value"),
    (["--seed", "abc"], "invalid value 'abc' for --seed: expected an integer in [0, 2^64)"),
    (["--seed=-3"], "invalid value '-3' for --seed: expected an integer in [0, 2^64)"),
    (["-seed", " 3"], "invalid value ' 3' for -seed: expected an integer in [0, 2^64)"),
    (["--seed", "99999999999999999999"],
     "invalid value '99999999999999999999' for --seed: expected an integer in [0, 2^64)"),
])
def test_demo_usage_errors(emb_bin, args, message):
    r = run([emb_bin, "demo", *args])
    assert r.returncode == 2
    assert r.stderr == f"emb demo: {message} (see 'emb demo --help')\n"
    assert r.stdout == ""


@pytest.mark.parametrize("args", [
    ["--seed", "7", "001"], ["--seed=7", "001"], ["-seed", "7", "001"], ["-seed=7", "001"],
    ["001", "--seed", "7"], ["--seed", "3", "--seed", "7", "001"], ["--seed", "7", "--", "001"],
    ["--seed", "7", "1"],
])
def test_demo_option_spellings(emb_bin, args):
    """--seed 7, --seed=7, -seed 7 and -seed=7 are the same; options may follow operands;
    the last of a repeated option wins; `--` ends the options."""
    assert _demo(emb_bin, *args) == _demo(emb_bin, "--seed", "7", "001")


def test_demo_reports_a_write_error(emb_bin):
    with open("/dev/full", "w") as full:
        r = run([emb_bin, "demo"], stdout=full)
    assert r.returncode == 1
    assert re.fullmatch(r"emb: [^\n]+: [^\n]+\n", r.stderr), r.stderr
