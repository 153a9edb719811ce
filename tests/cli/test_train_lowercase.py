"""`emb train --lowercase` lowercases as Python's str.lower() does (the oracle is the Python
running this test): every code point 0..0x10FFFF but the surrogates, each in a token of its
own, and tokens that put a capital sigma among cased, case-ignorable and other characters
(str.lower()'s final-sigma rule). The words emb keeps are read back with --save-vocab."""
import os
import random
import subprocess

from conftest import SOURCE_DIR

SIGMA = "\u03a3"
ASCII_SPACE = set(map(ord, " \t\n\v\f\r"))


def vocab_words(emb_bin, tmp_path, tokens, *extra):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes("\n".join(tokens).encode("utf-8", "surrogatepass") + b"\n")
    vocab = tmp_path / "v.txt"
    p = subprocess.run([emb_bin, "train", str(corpus), "-o", str(tmp_path / "v.vec"), "--dim",
                        "1", "--epochs", "1", "--threads", "1", "--min-count", "1",
                        "--save-vocab", str(vocab), "-q", *extra], capture_output=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr.decode()
    words = set()
    for line in vocab.read_bytes().split(b"\n"):
        if line:
            words.add(line.rsplit(b" ", 1)[0].decode("utf-8"))
    return words


def test_every_code_point_lowers_as_python(emb_bin, tmp_path):
    # "q<decimal>_" keeps every token distinct; NUL and ASCII whitespace cannot be in a token
    tokens = ["q%d_%s" % (c, chr(c)) for c in range(1, 0x110000)
              if not 0xD800 <= c <= 0xDFFF and c not in ASCII_SPACE]
    got = vocab_words(emb_bin, tmp_path, tokens, "--lowercase")
    want = {t.lower() for t in tokens}
    assert len(got) == len(want)
    wrong = sorted(want - got)[:10]
    assert not wrong, "emb's lowercase differs from str.lower() for %r" % wrong
    # without --lowercase nothing changes
    assert vocab_words(emb_bin, tmp_path, tokens) == set(tokens)


def test_final_sigma_in_context_as_python(emb_bin, tmp_path):
    rng = random.Random(5)
    # cased, case-ignorable (apostrophe, combining marks, U+00AD, U+0345) and other code
    # points, in every order around capital sigmas
    pool = ["A", "a", "\u0391", "\u03c3", SIGMA, SIGMA, "'", ".", ":", "\u0301", "\u00ad",
            "\u0345", "\u02b0", "1", "-", "\u0130", "\u1e9e", "\u2126", "\U00010400", "\u00df"]
    tokens = {"".join(rng.choice(pool) for _ in range(rng.randint(1, 7))) for _ in range(20000)}
    tokens = sorted("q%d_%s" % (i, t) for i, t in enumerate(tokens))
    got = vocab_words(emb_bin, tmp_path, tokens, "--lowercase")
    want = {t.lower() for t in tokens}
    wrong = sorted(want - got)[:10]
    assert not wrong, "emb's lowercase differs from str.lower() for %r" % wrong
    assert got == want


def test_committed_table_is_what_the_generator_writes():
    """src/text/casefold_table.c is scripts/gen-casefold.py's output with this Python."""
    gen = os.path.join(SOURCE_DIR, "scripts", "gen-casefold.py")
    out = subprocess.run(["/usr/bin/python3", gen], capture_output=True, check=True,
                         timeout=600).stdout
    with open(os.path.join(SOURCE_DIR, "src", "text", "casefold_table.c"), "rb") as f:
        assert f.read() == out, "regenerate: /usr/bin/python3 scripts/gen-casefold.py > " \
                                "src/text/casefold_table.c"
