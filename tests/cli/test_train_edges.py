"""`emb train` at its edges: -binary 0, compressed and standard-output names, fastText's
-output prefix, --checkpoint alone, checkpoints removed after success (or kept), a checkpoint
that cannot be written, and resuming with another thread count. Every output is read back
with gensim 4.2."""
import math
import os
import re
import subprocess

import numpy as np
from gensim.models import KeyedVectors

from test_word2vec import synthetic, train

BASE = ["--dim", 8, "--min-count", 1, "--threads", 1, "--epochs", 2, "--seed", 3, "-q"]


def test_binary_0_writes_text_whatever_the_name(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt")
    train(emb_bin, corpus, "-o", tmp_path / "v.bin", "-binary", 0, *BASE)
    text = KeyedVectors.load_word2vec_format(str(tmp_path / "v.bin"), binary=False)
    train(emb_bin, corpus, "-o", tmp_path / "w.bin", *BASE)
    binary = KeyedVectors.load_word2vec_format(str(tmp_path / "w.bin"), binary=True)
    assert text.index_to_key == binary.index_to_key
    assert np.array_equal(text.vectors, binary.vectors)
    p = train(emb_bin, corpus, "-o", tmp_path / "v.safetensors", "-binary", 0, *BASE, check=False)
    assert p.returncode == 2 and "-binary 0 asks for word2vec text" in p.stderr
    assert not (tmp_path / "v.safetensors").exists()


def test_compressed_names_are_refused(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt")
    for name in ["v.txt.gz", "v.vec.bz2", "v.bin.xz", "v.txt.zst"]:
        p = train(emb_bin, corpus, "-o", tmp_path / name, *BASE, check=False)
        assert p.returncode == 2, p.stderr
        assert "emb does not compress its output" in p.stderr and "-o - | gzip" in p.stderr
        assert not (tmp_path / name).exists()


def test_output_dash_writes_stdout(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt")
    p = subprocess.run([emb_bin, "train", corpus, "-o", "-", *map(str, BASE)], capture_output=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    (tmp_path / "out.txt").write_bytes(p.stdout)
    got = KeyedVectors.load_word2vec_format(str(tmp_path / "out.txt"))
    train(emb_bin, corpus, "-o", tmp_path / "file.txt", *BASE)
    want = KeyedVectors.load_word2vec_format(str(tmp_path / "file.txt"))
    assert got.index_to_key == want.index_to_key and np.array_equal(got.vectors, want.vectors)
    p = subprocess.run([emb_bin, "train", corpus, "-o", "-", "-binary", "1", *map(str, BASE)],
                       capture_output=True, timeout=120)
    assert p.returncode == 0
    (tmp_path / "out.bin").write_bytes(p.stdout)
    assert np.array_equal(KeyedVectors.load_word2vec_format(str(tmp_path / "out.bin"), binary=True).vectors,
                          want.vectors)
    assert not [f for f in os.listdir(tmp_path) if f.startswith("emb-train")]


def test_fasttext_output_prefix(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt")
    prefix = tmp_path / "model"
    train(emb_bin, "-input", corpus, "-output", prefix, *BASE)
    assert not prefix.exists()
    kv = KeyedVectors.load_word2vec_format(str(tmp_path / "model.vec"))
    assert kv.vector_size == 8
    assert not (tmp_path / "model.bin").exists()  # no subwords: the .vec holds everything
    # with subwords PREFIX.bin is the model too, as fastText writes it; gensim reads it and
    # gives the .vec's vectors for the words, and a vector for an unseen word
    sub = tmp_path / "sub"
    train(emb_bin, "-input", corpus, "-output", sub, "-minn", 2, "-maxn", 3, "-bucket", 1000, *BASE)
    vec = KeyedVectors.load_word2vec_format(str(tmp_path / "sub.vec"))
    from gensim.models.fasttext import load_facebook_vectors
    ft = load_facebook_vectors(str(tmp_path / "sub.bin"))
    for word in vec.index_to_key:
        assert np.allclose(ft[word], vec[word], rtol=1e-5, atol=1e-6), word
    assert np.isfinite(ft["zzunseenzz"]).all() and np.abs(ft["zzunseenzz"]).sum() > 0
    # word2vec's -train keeps the name as given
    train(emb_bin, "-train", corpus, "-output", tmp_path / "w2v", *BASE)
    assert KeyedVectors.load_word2vec_format(str(tmp_path / "w2v")).vector_size == 8


def test_checkpoint_alone_says_what_it_does(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt")
    p = train(emb_bin, corpus, "-o", tmp_path / "v.vec", "--checkpoint", tmp_path / "v.ck",
              "--dim", 8, "--min-count", 1, "--epochs", 1)
    assert "--checkpoint without --checkpoint-every: writing %s every 300 seconds" % (tmp_path / "v.ck") \
        in p.stderr


def test_checkpoint_removed_after_success_unless_kept(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt", lines=2000)
    args = [corpus, "-o", tmp_path / "v.vec", "--checkpoint-every", "0.000001", "--epochs", 5,
            "--dim", 8, "--min-count", 1, "--threads", 1, "-q"]
    train(emb_bin, *args, "--keep-checkpoint")
    assert (tmp_path / "v.vec.ckpt").exists()  # written during the run, kept
    (tmp_path / "v.vec.ckpt").unlink()
    train(emb_bin, *args)
    assert (tmp_path / "v.vec").exists() and not (tmp_path / "v.vec.ckpt").exists()


def test_progress_line_has_epoch_and_loss(emb_bin, tmp_path):
    corpus = synthetic(tmp_path / "c.txt", lines=2000)
    args = [corpus, "-o", tmp_path / "v.vec", "--dim", 8, "--min-count", 1, "--epochs", 3]
    p = train(emb_bin, *args, "--loss")
    # the first report is printed at once (standard error is not a terminal here)
    m = re.search(r"(?m)^progress: +[\d.]+%  epoch (\d+)/3  loss (\d+\.\d{4})  \d+ words/s", p.stderr)
    assert m, p.stderr
    # a fresh embedding starts at (negative + 1) log 2 = 4.16 per example and only falls
    assert 0 < float(m.group(2)) < 6 * math.log(2)
    p = train(emb_bin, *args)
    assert re.search(r"(?m)^progress: +[\d.]+%  epoch \d+/3  \d+ words/s", p.stderr), p.stderr
    assert "loss" not in p.stderr


def test_resume_with_another_thread_count(emb_bin, tmp_path):
    """threads is not part of a checkpoint's identity, its lanes are: a 1-thread checkpoint (one
    lane) resumed with --threads 2 (or the machine's default) continues its lane on 1 thread,
    says so, and ends with the vectors of the uninterrupted run."""
    corpus = synthetic(tmp_path / "c.txt", lines=2000)
    args = [corpus, "--dim", 8, "--min-count", 1, "--epochs", 10, "--seed", 2]
    train(emb_bin, *args, "-o", tmp_path / "want.bin", "--threads", 1, "-q")
    ck = tmp_path / "x.ckpt"
    train(emb_bin, *args, "-o", tmp_path / "first.bin", "--threads", 1, "--checkpoint", ck,
          "--checkpoint-every", "0.000001", "--keep-checkpoint", "-q")
    # the kept checkpoint is the last one written, before the run ended: resume it
    for extra in (["--threads", 2], []):
        out = tmp_path / "got.bin"
        p = train(emb_bin, *args, "-o", out, "--resume", ck, "--keep-checkpoint", *extra)
        if extra:
            assert "holds 1 lanes (parts of the corpus" in p.stderr
            assert "the run continues them on 1 threads" in p.stderr
        assert "1 threads (resumed)" in p.stderr
        assert out.read_bytes() == (tmp_path / "want.bin").read_bytes()


def test_lanes_option(emb_bin, tmp_path):
    """--lanes: one thread over 4 lanes writes the same file twice and another than over one
    lane; the count is checked."""
    corpus = synthetic(tmp_path / "c.txt", lines=2000)
    for name, extra in (("one", []), ("four", ["--lanes", 4]), ("again", ["--lanes", 4])):
        train(emb_bin, corpus, "-o", tmp_path / f"{name}.bin", *BASE, *extra)
    four = (tmp_path / "four.bin").read_bytes()
    assert four == (tmp_path / "again.bin").read_bytes()
    assert four != (tmp_path / "one.bin").read_bytes()
    p = train(emb_bin, corpus, "-o", tmp_path / "bad.bin", *BASE, "--lanes", 0, check=False)
    assert p.returncode == 2 and "--lanes" in p.stderr, p.stderr
    assert not (tmp_path / "bad.bin").exists()


def test_checkpoint_write_failure_names_file_and_reason(emb_bin, tmp_path):
    """A checkpoint that cannot be written (a full disk: a link to /dev/full, which emb's
    writer writes through) stops training with the file's name and the system's reason, not
    as a cancelled run, and leaves no output."""
    corpus = synthetic(tmp_path / "c.txt", lines=2000)
    ck = tmp_path / "full.ckpt"
    ck.symlink_to("/dev/full")
    out = tmp_path / "v.vec"
    p = train(emb_bin, corpus, "-o", out, "--min-count", 1, "--epochs", 5, "--checkpoint", ck,
              "--checkpoint-every", "0.000001", "-q", check=False)
    assert p.returncode == 1
    assert "training stopped: cannot write the checkpoint: %s" % ck in p.stderr, p.stderr
    assert "No space left on device" in p.stderr
    assert "cancelled" not in p.stderr
    assert not out.exists()
