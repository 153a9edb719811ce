"""Interop with the real tools, live: tables written by emb load in torch (load_state_dict)
and NumPy; files written by torch, NumPy and gensim load in emb with identical values."""
import os

import numpy as np
import pytest
import torch
from gensim.models import KeyedVectors

import embio
from shared_data import shared_path


def rand_table(rows, dim, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, dim, generator=g) * torch.exp(torch.randn(rows, 1, generator=g) * 3)
    w[0, 0] = 1e-40  # a float32 subnormal
    if rows > 1:
        w[1, 0] = 7e4  # beyond float16's range
        w[1, 1] = -0.0
    return w


def words_for(n):
    base = ["</s>", "the", "кот", "naïve", "日本", "a.b", "x"]
    return [base[i] if i < len(base) else f"w{i}" for i in range(n)]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "f64"])
def test_emb_safetensors_loads_in_torch(tmp_path, seed, dtype):
    w = rand_table(37 + seed, 5 + seed, seed)
    path = tmp_path / "e.safetensors"
    code = {"f32": 0, "f16": 4, "bf16": 5, "f64": 3}[dtype]
    embio.write(path, w.numpy(), dtype=code)
    tensors, meta = embio.st_load(path)
    assert list(tensors) == ["weight"] and meta == {"format": "pt"}
    arr = tensors["weight"]
    t = (torch.from_numpy(arr.astype(np.int32) << 16).view(torch.float32).to(torch.bfloat16)
         if dtype == "bf16" else torch.from_numpy(arr.copy()))
    want = {"f32": w, "f16": w.half(), "bf16": w.bfloat16(), "f64": w.double()}[dtype]
    # the conversion is torch's, bit for bit (float16 and bfloat16 round to nearest even)
    assert torch.equal(t.view(torch.int16) if dtype in ("f16", "bf16") else t,
                       want.view(torch.int16) if dtype in ("f16", "bf16") else want)
    # a file holding one tensor "weight" is exactly an nn.Embedding state_dict
    emb = torch.nn.Embedding(*w.shape, dtype=want.dtype)
    emb.load_state_dict({"weight": t})
    assert torch.equal(emb.weight.detach(), want)
    # and emb reads it back as torch's .float() of the stored values
    _, back, m = embio.read(path)
    assert np.array_equal(back.view(np.uint32), want.float().numpy().view(np.uint32))
    assert m["file_dtype"] == {"f32": 0, "f16": 4, "bf16": 5, "f64": 3}[dtype]


def test_torch_model_safetensors_loads_in_emb(tmp_path):
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(20, 6)
            self.fc = torch.nn.Linear(6, 3)
    torch.manual_seed(3)
    m = Model()
    sd = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    sd["ids"] = np.arange(7, dtype=np.int64)
    path = tmp_path / "model.safetensors"
    embio.st_save(path, sd, {"format": "pt"})
    _, got, _ = embio.read(path)  # finds "embedding.weight" by name
    assert np.array_equal(got.view(np.uint32), sd["embedding.weight"].view(np.uint32))
    _, got, _ = embio.read(path, tensor="fc.weight")
    assert np.array_equal(got, sd["fc.weight"])
    # F16 / BF16 / F64 tables written from torch
    w = rand_table(9, 4, 1)
    embio.st_save(tmp_path / "h.safetensors", {"weight": w.half().numpy()})
    _, got, _ = embio.read(tmp_path / "h.safetensors")
    assert np.array_equal(got, w.half().float().numpy())
    bits = w.bfloat16().view(torch.int16).numpy().view(np.uint16)
    embio.st_save(tmp_path / "b.safetensors", {"weight": bits}, dtypes={"weight": "BF16"})
    _, got, _ = embio.read(tmp_path / "b.safetensors")
    assert np.array_equal(got, w.bfloat16().float().numpy())
    embio.st_save(tmp_path / "d.safetensors", {"weight": w.double().numpy() / 3})
    _, got, _ = embio.read(tmp_path / "d.safetensors")
    assert np.array_equal(got, (w.double() / 3).float().numpy())


def test_vocab_in_safetensors_metadata(tmp_path):
    w = rand_table(7, 3, 2).numpy()
    words = words_for(7)
    path = tmp_path / "v.safetensors"
    embio.write(path, w, words, counts=[70, 60, 50, 40, 30, 20, 10])
    tensors, meta = embio.st_load(path)
    assert list(tensors) == ["weight"]  # still exactly a state_dict
    assert meta["emb.vocab"].split("\n") == words
    assert meta["emb.counts"] == "70 60 50 40 30 20 10"
    got_words, got, _ = embio.read(path)
    assert got_words == words and np.array_equal(got, w)


@pytest.mark.parametrize("case", ["c", "fortran", "big", "v2", "v3", "f64", "f16", "empty"])
def test_numpy_npy_loads_in_emb(tmp_path, case):
    rng = np.random.default_rng(len(case))
    a = rng.standard_normal((11, 7)).astype(np.float32)
    path = str(tmp_path / "a.npy")
    if case == "c":
        np.save(path, a)
    elif case == "fortran":
        np.save(path, np.asfortranarray(a))
    elif case == "big":
        np.save(path, a.astype(">f4"))
    elif case in ("v2", "v3"):
        with open(path, "wb") as f:
            np.lib.format.write_array(f, a, version=(2, 0) if case == "v2" else (3, 0))
    elif case == "f64":
        a = a.astype(np.float64) / 3
        np.save(path, a)
    elif case == "f16":
        a = a.astype(np.float16)
        np.save(path, a)
    elif case == "empty":
        a = np.zeros((0, 7), np.float32)
        np.save(path, a)
    words, got, meta = embio.read(path)
    assert words is None and meta["format"] == embio.FMT_NPY
    assert got.shape == a.shape
    assert np.array_equal(got.view(np.uint32), a.astype(np.float32).view(np.uint32))


def test_emb_npy_loads_in_numpy_byte_identical(tmp_path):
    for shape in [(5, 3), (1, 1), (0, 4), (123456, 2)]:
        a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        p = tmp_path / "e.npy"
        embio.write(p, a)
        assert np.array_equal(np.load(p), a)
        np.save(tmp_path / "n.npy", a)
        assert p.read_bytes() == (tmp_path / "n.npy").read_bytes()
    embio.write(tmp_path / "h.npy", a, dtype=4)
    assert np.array_equal(np.load(tmp_path / "h.npy"), a.astype(np.float16))
    # with words: a "<stem>.vocab" list next to it, read back by emb
    embio.write(tmp_path / "w.npy", a[:3], ["a", "b", "c"], counts=[3, 2, 1])
    assert (tmp_path / "w.vocab").read_text() == "a 3\nb 2\nc 1\n"
    words, got, _ = embio.read(tmp_path / "w.npy")
    assert words == ["a", "b", "c"] and np.array_equal(got, a[:3])


def kv_of(words, arr):
    kv = KeyedVectors(arr.shape[1])
    kv.add_vectors(words, arr)
    return kv


@pytest.mark.parametrize("variant", [
    dict(name="t.txt"), dict(name="t.vec", trailing_space=True), dict(name="t.bin"),
    dict(name="t.bin", binary_newline=False), dict(name="t6.txt", precision=6)])
def test_emb_word2vec_loads_in_gensim(tmp_path, variant):
    variant = dict(variant)
    name = variant.pop("name")
    w = rand_table(50, 8, 5).numpy()
    w[1, 0] = 7.5
    words = words_for(50)
    p = tmp_path / name
    embio.write(p, w, words, **variant)
    kv = KeyedVectors.load_word2vec_format(str(p), binary=name.endswith(".bin"))
    assert kv.index_to_key == words
    if variant.get("precision"):
        assert np.allclose(kv.vectors, w, rtol=1e-5, atol=1e-6 * np.abs(w).max())
    else:
        assert np.array_equal(kv.vectors.view(np.uint32), w.view(np.uint32))


@pytest.mark.parametrize("binary", [False, True])
def test_gensim_word2vec_loads_in_emb(tmp_path, binary):
    w = rand_table(60, 9, 6).numpy()
    words = words_for(60)
    p = tmp_path / ("g.bin" if binary else "g.txt")
    kv_of(words, w).save_word2vec_format(str(p), binary=binary)
    got_words, got, meta = embio.read(p)
    assert meta["format"] == (embio.FMT_W2V_BINARY if binary else embio.FMT_W2V_TEXT)
    assert got_words == words
    assert np.array_equal(got.view(np.uint32), w.view(np.uint32))
    # gensim's limit= and emb's limit agree
    kv = KeyedVectors.load_word2vec_format(str(p), binary=binary, limit=13)
    got_words, got, _ = embio.read(p, limit=13)
    assert got_words == kv.index_to_key and np.array_equal(got, kv.vectors)
    # round trip: emb writes what it read, gensim reads the same thing
    embio.write(tmp_path / ("r.bin" if binary else "r.txt"), got, got_words)
    kv2 = KeyedVectors.load_word2vec_format(str(tmp_path / ("r.bin" if binary else "r.txt")), binary=binary)
    assert kv2.index_to_key == kv.index_to_key and np.array_equal(kv2.vectors, kv.vectors)


def test_gensim_headerless_is_glove(tmp_path):
    w = rand_table(12, 4, 7).numpy()
    words = words_for(12)
    p = tmp_path / "glove.txt"
    kv_of(words, w).save_word2vec_format(str(p), binary=False, write_header=False)
    got_words, got, meta = embio.read(p)
    assert meta["format"] == embio.FMT_GLOVE
    assert got_words == words and np.array_equal(got, w)
    embio.write(tmp_path / "e.glove", w, words, format=embio.FMT_GLOVE)
    kv = KeyedVectors.load_word2vec_format(str(tmp_path / "e.glove"), binary=False, no_header=True)
    assert kv.index_to_key == words and np.array_equal(kv.vectors, w)


@pytest.mark.parametrize("name", ["lee_fasttext.vec", "crime-and-punishment.vec"])
def test_fixtures_match_gensim(name):
    path = shared_path("fixtures", "gensim", name)
    kv = KeyedVectors.load_word2vec_format(path, binary=False)
    words, got, meta = embio.read(path)
    assert words == kv.index_to_key
    assert np.array_equal(got.view(np.uint32), kv.vectors.view(np.uint32))
    assert meta["file_rows"] == len(words)
