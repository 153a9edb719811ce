"""`emb train` over real corpora: gzip, bzip2, xz and zstd data recognised by content,
several files and directories, and standard input in every mode (fresh, checkpointed,
resumed). The expected vectors are those of the same run over the plain, concatenated text,
so every comparison is bit for bit at one thread."""
import bz2
import gzip
import lzma
import os
import shutil
import subprocess

import pytest

from conftest import run, synthetic

BASE = ["--dim", 8, "--min-count", 1, "--threads", 1, "--epochs", 2, "--seed", 7, "-q"]


def train(emb_bin, *args, stdin=None, check=True):
    p = subprocess.run([emb_bin, "train", *map(str, args)], input=stdin, capture_output=True,
                       timeout=300)
    if check:
        assert p.returncode == 0, p.stderr.decode()
    p.err = p.stderr.decode()
    return p


def zstd(data):
    if not shutil.which("zstd"):
        pytest.fail("the zstd command (Debian: zstd) is needed to write the test's zstd files")
    return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True,
                          check=True).stdout


COMPRESS = {"gzip": gzip.compress, "bzip2": bz2.compress,
            "xz": lambda d: lzma.compress(d, format=lzma.FORMAT_XZ), "zstd": zstd}


def vectors(emb_bin, tmp_path, *corpus, stdin=None, extra=()):
    out = tmp_path / "v.bin"
    if out.exists():
        out.unlink()
    train(emb_bin, *corpus, "-o", out, *BASE, *extra, stdin=stdin)
    return out.read_bytes()


@pytest.fixture
def text(tmp_path):
    return open(synthetic(tmp_path / "plain.txt", lines=600), "rb").read()


def test_compressed_input_gives_the_plain_runs_vectors(emb_bin, tmp_path, text):
    want = vectors(emb_bin, tmp_path, tmp_path / "plain.txt")
    for kind, compress in COMPRESS.items():
        data = compress(text)
        # the content decides, not the name: compressed data named .txt is decompressed
        for name in ["c." + kind, "c-%s.txt" % kind]:
            (tmp_path / name).write_bytes(data)
            assert vectors(emb_bin, tmp_path, tmp_path / name) == want, (kind, name)
        # and through standard input
        assert vectors(emb_bin, tmp_path, "-", stdin=data) == want, kind
    # plain text named .gz is read as plain text
    (tmp_path / "plain.gz").write_bytes(text)
    assert vectors(emb_bin, tmp_path, tmp_path / "plain.gz") == want


def test_concatenated_members_and_frames_are_read_whole(emb_bin, tmp_path, text):
    half = text.index(b"\n", len(text) // 2) + 1
    want = vectors(emb_bin, tmp_path, tmp_path / "plain.txt")
    for kind, compress in COMPRESS.items():
        (tmp_path / "two").write_bytes(compress(text[:half]) + compress(text[half:]))
        assert vectors(emb_bin, tmp_path, tmp_path / "two") == want, kind


def test_corrupt_or_truncated_data_is_an_error_naming_file_and_offset(emb_bin, tmp_path, text):
    for kind, compress in COMPRESS.items():
        data = compress(text)
        cut = tmp_path / ("cut." + kind)
        cut.write_bytes(data[: len(data) // 2])
        p = train(emb_bin, cut, "-o", tmp_path / "v.bin", *BASE, check=False)
        assert p.returncode == 1, (kind, p.err)
        assert "%s: %s data is truncated" % (cut, kind) in p.err, p.err
        assert "byte %d" % (len(data) // 2) in p.err, p.err
        bad = bytearray(data)
        bad[len(bad) // 2] ^= 0x55
        bad[len(bad) // 2 + 1] ^= 0x55
        broken = tmp_path / ("bad." + kind)
        broken.write_bytes(bytes(bad))
        p = train(emb_bin, broken, "-o", tmp_path / "v.bin", *BASE, check=False)
        assert p.returncode == 1, (kind, p.err)
        assert "%s: %s data is corrupt or truncated near byte" % (broken, kind) in p.err, p.err
        # trailing bytes that start no member or stream are not silently dropped
        (tmp_path / "tail").write_bytes(data + b"garbage that is no compressed data\n")
        p = train(emb_bin, tmp_path / "tail", "-o", tmp_path / "v.bin", *BASE, check=False)
        assert p.returncode == 1, (kind, p.err)
        assert "corrupt or truncated" in p.err, p.err
        assert not (tmp_path / "v.bin").exists()


def split_lines(text, parts):
    lines = text.splitlines(keepends=True)
    k = len(lines) // parts
    return [b"".join(lines[i * k: (i + 1) * k if i < parts - 1 else len(lines)])
            for i in range(parts)]


def test_files_and_directories_give_the_concatenations_vectors(emb_bin, tmp_path, text):
    a, b, c, d = split_lines(text, 4)
    # the end of a file ends a sentence: b without its last line end, cut mid-line
    cut = b.rindex(b" ", 0, len(b) - 1)
    b1, b2 = b[:cut], b[cut + 1:]
    joined = a + b1 + b"\n" + b2 + c + d
    (tmp_path / "joined.txt").write_bytes(joined)
    want = vectors(emb_bin, tmp_path, tmp_path / "joined.txt")
    root = tmp_path / "dir"
    (root / "x" / "y").mkdir(parents=True)
    (root / "a.txt").write_bytes(a)
    (root / "b.txt.gz").write_bytes(gzip.compress(b1))   # byte order: "b.txt.gz" < "x/..."
    (root / "x" / "y" / "1").write_bytes(bz2.compress(b2))
    (root / "x" / "z").write_bytes(c)
    # skipped: hidden names (files and folders), a fifo, a link to a folder
    (root / ".hidden").write_bytes(b"hidden words here\n")
    (root / ".git").mkdir()
    (root / ".git" / "f").write_bytes(b"more hidden words\n")
    os.mkfifo(root / "x" / "fifo")
    os.symlink(root / "x", root / "x" / "loop")
    (tmp_path / "d.txt").write_bytes(d)
    assert vectors(emb_bin, tmp_path, root, tmp_path / "d.txt") == want
    # the same files named one by one
    files = [root / "a.txt", root / "b.txt.gz", root / "x/y/1", root / "x/z", tmp_path / "d.txt"]
    assert vectors(emb_bin, tmp_path, *files) == want
    # stdin among the files
    assert vectors(emb_bin, tmp_path, *files[:4], "-", stdin=d) == want
    # another order is another corpus
    assert vectors(emb_bin, tmp_path, tmp_path / "d.txt", root) != want


def test_bad_lists_are_errors(emb_bin, tmp_path, text):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ".only-hidden").write_bytes(text)
    p = train(emb_bin, tmp_path / "plain.txt", tmp_path / "empty", "-o", tmp_path / "v.bin",
              *BASE, check=False)
    assert p.returncode == 1 and "%s: a directory without files to read" % (tmp_path / "empty") \
        in p.err, p.err
    p = train(emb_bin, "-", tmp_path / "plain.txt", "-", "-o", tmp_path / "v.bin", *BASE,
              stdin=text, check=False)
    assert p.returncode == 1 and "standard input (-) is given twice" in p.err, p.err
    p = train(emb_bin, tmp_path / "plain.txt", tmp_path / "nope", "-o", tmp_path / "v.bin",
              *BASE, check=False)
    assert p.returncode == 1 and "cannot open %s" % (tmp_path / "nope") in p.err, p.err
    # an error names the file and its line, not the first file of the list
    (tmp_path / "bad.txt").write_bytes(b"fine words\nnot \xff utf8\n")
    p = train(emb_bin, tmp_path / "plain.txt", tmp_path / "bad.txt", "-o", tmp_path / "v.bin",
              *BASE, check=False)
    assert p.returncode == 1 and "%s:2: invalid UTF-8" % (tmp_path / "bad.txt") in p.err, p.err


def checkpointed(emb_bin, tmp_path, corpus, stdin=None):
    """Trains with checkpoints every microsecond, keeping the last one; returns it."""
    ck = tmp_path / "run.ckpt"
    train(emb_bin, *corpus, "-o", tmp_path / "first.bin", *BASE, "--epochs", 6,
          "--checkpoint", ck, "--checkpoint-every", "0.000001", "--keep-checkpoint",
          stdin=stdin)
    assert ck.exists()
    return ck


def test_stdin_fresh_checkpointed_and_resumed(emb_bin, tmp_path, text):
    big = text * 4
    (tmp_path / "big.txt").write_bytes(big)
    want = vectors(emb_bin, tmp_path, tmp_path / "big.txt", extra=["--epochs", 6])
    ck = checkpointed(emb_bin, tmp_path, ["-"], stdin=big)
    assert (tmp_path / "first.bin").read_bytes() == want
    out = tmp_path / "resumed.bin"
    p = train(emb_bin, "-", "-o", out, *BASE, "--epochs", 6, "--resume", ck, "--keep-checkpoint",
              stdin=gzip.compress(big))
    assert out.read_bytes() == want
    # other text on stdin: the fingerprint does not match
    p = train(emb_bin, "-", "-o", out, *BASE, "--epochs", 6, "--resume", ck, stdin=text * 3,
              check=False)
    assert p.returncode == 1 and "was written for another corpus" in p.err, p.err


def test_resume_over_a_list(emb_bin, tmp_path, text):
    a, b, _ = split_lines(text * 4, 3)  # a and b differ: swapped, they are another corpus
    (tmp_path / "a.txt").write_bytes(a)
    (tmp_path / "b.txt.xz").write_bytes(lzma.compress(b))
    files = [tmp_path / "a.txt", tmp_path / "b.txt.xz"]
    ck = checkpointed(emb_bin, tmp_path, files)
    want = (tmp_path / "first.bin").read_bytes()
    out = tmp_path / "resumed.bin"
    train(emb_bin, *files, "-o", out, *BASE, "--epochs", 6, "--resume", ck, "--keep-checkpoint")
    assert out.read_bytes() == want
    p = train(emb_bin, *files[::-1], "-o", out, *BASE, "--epochs", 6, "--resume", ck,
              check=False)
    assert p.returncode == 1 and "was written for another corpus" in p.err, p.err
    p = train(emb_bin, files[0], "-o", out, *BASE, "--epochs", 6, "--resume", ck, check=False)
    assert p.returncode == 1 and "was written for another corpus" in p.err, p.err


def text_fingerprint(data):
    """A corpus file's fingerprint as a checkpoint records it (docs/word2vec.md, version 4):
    FNV-1a 64's basis and prime over the text's 8-byte little-endian words, then its last
    bytes one by one, then its length."""
    h, prime, mask = 14695981039346656037, 1099511628211, 2 ** 64 - 1
    whole = len(data) // 8 * 8
    for i in range(0, whole, 8):
        h = ((h ^ int.from_bytes(data[i:i + 8], "little")) * prime) & mask
    for b in data[whole:]:
        h = ((h ^ b) * prime) & mask
    return ((h ^ len(data)) * prime) & mask


def test_resume_names_the_file_that_differs(emb_bin, tmp_path, text):
    """A resume over another list of files is refused with the file that differs: its
    position, and the checkpoint's name, text size and fingerprint against this run's."""
    a, b, c = split_lines(text * 4, 3)
    (tmp_path / "a.txt").write_bytes(a)
    (tmp_path / "b.txt").write_bytes(b)
    (tmp_path / "c.gz").write_bytes(gzip.compress(c))
    A, B, C = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.gz"
    ck = checkpointed(emb_bin, tmp_path, [A, C])
    out = tmp_path / "resumed.bin"

    def refused(*files):
        p = train(emb_bin, *files, "-o", out, *BASE, "--epochs", 6, "--resume", ck, check=False)
        assert p.returncode == 1 and p.err.count("\n") == 1, p.err
        assert f"{ck} was written for another corpus: " in p.err, p.err
        assert "(resume with the files the checkpoint was written for, in the same order)" in p.err
        return p.err

    err = refused(A, B)
    assert (f"file 2 of 2 differs: the checkpoint's is {C} ({len(c)} bytes of text, fingerprint "
            f"{text_fingerprint(c):016x}), this run's is {B} ({len(b)} bytes, fingerprint "
            f"{text_fingerprint(b):016x})") in err, err
    err = refused(B, C)
    assert f"file 1 of 2 differs: the checkpoint's is {A} ({len(a)} bytes" in err, err
    err = refused(A)
    assert ("the checkpoint was written for 2 files, this run reads the first 1 of them: file 2 "
            "and later are missing") in err, err
    err = refused(A, C, B)
    assert (f"this run reads 3 files, the checkpoint was written for the first 2 of them: file 3, "
            f"{B} ({len(b)} bytes of text), is new") in err, err
    # the same text under another name, compressed otherwise, in a directory: it resumes
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "1").write_bytes(a)
    (tmp_path / "d" / "2").write_bytes(lzma.compress(c))
    train(emb_bin, tmp_path / "d", "-o", out, *BASE, "--epochs", 6, "--resume", ck,
          "--keep-checkpoint")
    assert out.read_bytes() == (tmp_path / "first.bin").read_bytes()
