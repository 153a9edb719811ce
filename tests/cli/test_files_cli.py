"""emb info, convert and lookup: output, exit codes and round trips through every format."""
import os
import re
import struct

import pytest

from conftest import run
from shared_data import shared_path

DATA = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "data", "bad"))


@pytest.fixture
def vec(tmp_path):
    p = tmp_path / "small.vec"
    p.write_text("3 4\n"
                 "the 0.5 -1.25 2 0 \n"
                 "cat 1e-3 3.5 -0.75 1\n"
                 "кот 0 0 0 0\n", encoding="utf-8")
    return p


def test_info(emb_bin, vec):
    r = run([emb_bin, "info", str(vec)])
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    lines = dict(re.findall(r"(?m)^([a-z -]+):\s+(.*)$", r.stdout))
    assert lines["format"] == "word2vec-text"
    assert lines["rows"] == "3"
    assert lines["dim"] == "4"
    assert lines["dtype"] == "float32"
    assert lines["words"] == "3"
    norm_the = (0.25 + 1.5625 + 4) ** 0.5
    norm_cat = (1e-6 + 12.25 + 0.5625 + 1) ** 0.5
    m = re.fullmatch(r"min (\S+), mean (\S+), max (\S+) \(L2, over 3 rows\)", lines["norms"])
    assert m, lines["norms"]
    assert float(m.group(1)) == 0
    assert abs(float(m.group(2)) - (norm_the + norm_cat) / 3) < 1e-5
    assert abs(float(m.group(3)) - norm_cat) < 1e-5
    assert lines["smallest norm"] == "кот" and lines["largest norm"] == "cat"
    assert lines["zero rows"] == "1"


def test_info_lists_tensors_when_it_cannot_pick_one(emb_bin, tmp_path):
    """A safetensors file with two 2-D tables and neither named weight: the error is followed
    by the list of tensors (name, dtype, shape), and --tensor picks one."""
    import json
    import struct
    header = {"a": {"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 24]},
              "b": {"dtype": "F32", "shape": [4, 2], "data_offsets": [24, 56]}}
    h = json.dumps(header).encode()
    h += b" " * (-(8 + len(h)) % 8)  # values aligned, as torch's writer does
    p = tmp_path / "two.safetensors"
    p.write_bytes(struct.pack("<Q", len(h)) + h + bytes(56))
    r = run([emb_bin, "info", str(p)])
    assert r.returncode == 1
    assert "name one (--tensor)" in r.stderr
    assert "holds these tensors (pick one with --tensor NAME):" in r.stderr
    assert re.search(r"(?m)^  a +F32 +torch\.Size\(\[3, 2\]\)$", r.stderr), r.stderr
    assert re.search(r"(?m)^  b +F32 +torch\.Size\(\[4, 2\]\)$", r.stderr), r.stderr
    r = run([emb_bin, "info", "--tensor", "b", str(p)])
    assert r.returncode == 0, r.stderr
    assert re.search(r"(?m)^rows: +4$", r.stdout)


def test_info_limit_and_fixture(emb_bin):
    path = shared_path("fixtures", "gensim", "lee_fasttext.vec")
    r = run([emb_bin, "info", "--limit", "100", path])
    assert r.returncode == 0, r.stderr
    assert "rows:       100 (the file declares 1762; --limit applied)\n" in r.stdout
    assert "dim:        10\n" in r.stdout


@pytest.mark.parametrize("name,err", [
    ("st_overlap.safetensors", "overlaps the previous tensor"),
    ("w2v_truncated.bin", "truncated: row 2 of 2"),
    ("npy_object.npy", "Python objects"),
    ("w2v_bad_utf8.txt", "not valid UTF-8"),
])
def test_bad_files_fail_with_the_reason(emb_bin, name, err):
    path = os.path.join(DATA, name)
    r = run([emb_bin, "info", path])
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.startswith("emb info: " + path + ":")
    assert err in r.stderr
    assert r.stderr.count("\n") == 1


def test_fasttext_bin_is_read(emb_bin):
    """gensim's fixture model (a fastText .bin): emb's vectors of its words and of unseen words
    are gensim's load_facebook_vectors', within float32 rounding."""
    import numpy as np
    from gensim.models.fasttext import load_facebook_vectors
    path = shared_path("fixtures", "gensim", "crime-and-punishment.bin")
    kv = load_facebook_vectors(path)
    words = [w for w in kv.index_to_key if w != "</s>"] + ["раскольниковым", "unseen", "петербургe"]
    r = run([emb_bin, "lookup", "--raw", "--", path] + words)  # the word "--" is in it
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == len(words)
    for w, line in zip(words, lines):
        parts = line.split(" ")
        assert parts[0] == w
        got, want = np.array([float(x) for x in parts[1:]], dtype=np.float32), kv.get_vector(w)
        assert np.allclose(got, want, rtol=1e-5, atol=1e-7), (w, got, want)


def test_missing_file(emb_bin, tmp_path):
    r = run([emb_bin, "info", str(tmp_path / "nope.bin")])
    assert r.returncode == 1
    assert "cannot open: No such file or directory" in r.stderr


def test_convert_round_trip_every_format(emb_bin, vec, tmp_path):
    want = run([emb_bin, "lookup", "--raw", str(vec), "the", "cat", "кот"]).stdout
    assert want.startswith("the 0.5 -1.25 2 0\ncat 0.00100000005 3.5 -0.75 1\n")
    src = vec
    for ext in ["safetensors", "npy", "bin", "txt", "vec"]:
        out = tmp_path / f"c.{ext}"
        r = run([emb_bin, "convert", str(src), str(out)])
        assert r.returncode == 0, r.stderr
        assert r.stdout == ""
        assert re.match(r"emb convert: .* \(\S+, 3 x 4\) -> .*\n", r.stderr)
        assert run([emb_bin, "lookup", "--raw", str(out), "the", "cat", "кот"]).stdout == want
        src = out
    # GloVe through --to, read back (sniffed: no header)
    r = run([emb_bin, "convert", "--to", "glove", str(src), str(tmp_path / "g.data")])
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "g.data").read_text(encoding="utf-8").startswith("the 0.5 -1.25 2 0\n")
    r = run([emb_bin, "info", str(tmp_path / "g.data")])
    assert "format:     glove\n" in r.stdout


def test_convert_dtype_and_limit(emb_bin, vec, tmp_path):
    out = tmp_path / "h.safetensors"
    r = run([emb_bin, "convert", "--dtype", "f16", "--limit", "2", str(vec), str(out)])
    assert r.returncode == 0, r.stderr
    b = out.read_bytes()
    (n,) = struct.unpack("<Q", b[:8])
    assert b'"dtype":"F16","shape":[2,4]' in b[8:8 + n]
    r = run([emb_bin, "info", str(out)])
    assert "dtype:      float16\n" in r.stdout and "rows:       2\n" in r.stdout
    r = run([emb_bin, "lookup", "--raw", str(out), "cat"])
    assert r.stdout == "cat 0.00100040436 3.5 -0.75 1\n"  # 1e-3 rounded to float16


@pytest.mark.parametrize("args,msg", [
    (["--dtype", "f8", "a.vec", "b.npy"],
     r"invalid value 'f8' for --dtype: expected f32, f16, bf16, f64, int8 or int4"),
    (["--dtype", "int8", "a.vec", "b.npy"],
     r"--dtype int8 tables are written as safetensors only \(a \.safetensors OUT\)"),
    (["--dtype", "int4", "--output-tensor", "t", "a.vec", "b.safetensors"],
     r"--output-tensor: a int4 table is always the tensor \"weight\""),
    (["a.vec", "b.weird"], r"cannot tell the output format from 'b.weird': .*"),
    (["--to", "xml", "a.vec", "b.npy"], r"--to: unknown format \"xml\" .*"),
    (["a.vec"], r"missing IN OUT"),
])
def test_convert_usage_errors(emb_bin, args, msg):
    r = run([emb_bin, "convert", *args])
    assert r.returncode == 2
    assert r.stdout == ""
    assert re.fullmatch(r"emb convert: " + msg + r" \(see 'emb convert --help'\)\n", r.stderr), r.stderr


def test_convert_failure_keeps_the_old_file(emb_bin, vec, tmp_path):
    out = tmp_path / "keep.npy"
    out.write_bytes(b"old contents")
    r = run([emb_bin, "convert", "--dtype", "bf16", str(vec), str(out)])
    assert r.returncode == 1
    assert "float32, float16 or float64" in r.stderr
    assert out.read_bytes() == b"old contents"
    assert sorted(os.listdir(tmp_path)) == ["keep.npy", "small.vec"]


def test_lookup_pytorch_print(emb_bin, vec):
    import torch
    r = run([emb_bin, "lookup", str(vec), "cat", "the", "1"])
    assert r.returncode == 0, r.stderr
    w = torch.tensor([[0.5, -1.25, 2, 0], [1e-3, 3.5, -0.75, 1], [0, 0, 0, 0]])
    assert r.stdout == str(w[[1, 0, 1]]) + "\n"


def test_lookup_unknown_word(emb_bin, vec):
    r = run([emb_bin, "lookup", "--raw", str(vec), "dog", "the", "7"])
    assert r.returncode == 1
    assert r.stdout == "the 0.5 -1.25 2 0\n"
    assert "'dog' is not in the vocabulary" in r.stderr
    assert "'7' is not in the vocabulary" in r.stderr


def test_lookup_ids_without_words(emb_bin, vec, tmp_path):
    out = tmp_path / "t.npy"
    assert run([emb_bin, "convert", str(vec), str(out)]).returncode == 0
    os.remove(tmp_path / "t.vocab")
    r = run([emb_bin, "lookup", "--raw", str(out), "1", "0"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "1 0.00100000005 3.5 -0.75 1\n0 0.5 -1.25 2 0\n"
    r = run([emb_bin, "lookup", str(out), "the"])
    assert r.returncode == 1
    assert "'the' is not a row id" in r.stderr


@pytest.mark.parametrize("dtype,row_bytes", [("int8", 12), ("int4", 6), ("f16", 8)])
def test_convert_quantized_info_and_search(emb_bin, vec, tmp_path, dtype, row_bytes):
    """convert --dtype int8/int4/f16 writes the table with its words and reports its error;
    info shows the storage and the same error; nn, analogy and lookup read it."""
    out = tmp_path / f"q.{dtype}.safetensors"
    r = run([emb_bin, "convert", "--dtype", dtype, str(vec), str(out)])
    assert r.returncode == 0, r.stderr
    m = re.search(r"error against the float32 rows: max abs (\S+), mean abs (\S+), mean cosine (\S+)",
                  r.stderr)
    assert m, r.stderr
    conv_err = [float(x) for x in m.groups()]
    assert 0 < conv_err[0] < 0.2 and 0 < conv_err[1] <= conv_err[0]
    r = run([emb_bin, "info", str(out)])
    assert r.returncode == 0, r.stderr
    lines = dict(re.findall(r"(?m)^([a-z -]+):\s+(.*)$", r.stdout))
    assert lines["storage"].startswith(f"{dtype}, {row_bytes} bytes per row"), lines["storage"]
    m = re.fullmatch(r"against the float32 source: max abs (\S+), mean abs (\S+), mean cosine (\S+)",
                     lines["error"])
    assert m and [float(x) for x in m.groups()] == pytest.approx(conv_err, rel=1e-5)
    assert lines["words"] == "3" and lines["rows"] == "3"
    r = run([emb_bin, "nn", str(out), "the"])
    assert r.returncode == 0, r.stderr
    # cos(the, cat) < 0 = cos(the, the zero row кот)
    assert [ln.split()[0] for ln in r.stdout.splitlines()] == ["кот", "cat"]
    r = run([emb_bin, "lookup", "--raw", str(out), "the"])
    assert r.returncode == 0, r.stderr
    got = [float(x) for x in r.stdout.split()[1:]]
    assert got == pytest.approx([0.5, -1.25, 2, 0], abs=conv_err[0] + 1e-6)


def test_convert_quantized_refuses_nan_and_keeps_the_old_file(emb_bin, tmp_path):
    src = tmp_path / "nan.vec"
    src.write_text("2 3\na 1 2 3\nb 1 nan 3\n")
    out = tmp_path / "o.safetensors"
    out.write_bytes(b"old")
    for dtype in ("int8", "int4", "f16", "bf16"):
        r = run([emb_bin, "convert", "--dtype", dtype, str(src), str(out)])
        assert r.returncode == 1, r.stderr
        assert "row 1 holds NaN at column 1" in r.stderr, r.stderr
    big = tmp_path / "big.vec"
    big.write_text("1 2\na 70000 1\n")
    r = run([emb_bin, "convert", "--dtype", "f16", str(big), str(out)])
    assert r.returncode == 1 and "overflows f16" in r.stderr, r.stderr
    assert out.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["big.vec", "nan.vec", "o.safetensors"]
