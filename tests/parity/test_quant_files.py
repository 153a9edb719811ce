"""Reduced-precision and quantized tables in safetensors files (include/emb/quant.h "Files"):
the streaming writer, save, load and map, against live torch and a plain reader of the
format (tests/parity/embio.py), and the refusals of bad files (nothing written half-way).

- A table written in batches by emb.QTableWriter holds, byte for byte, what torch's
  prepack ops (int8, int4) or .half()/.bfloat16() produce; its metadata carries the qtype,
  the dim and the quantization error, equal to numpy's on torch's dequantized table.
- torch's quantized bag op run on the bytes read back from the file equals emb's bag on the
  mapped file.
- A byte-prepacked table saved by another program (no emb metadata) loads as int8.
- Bad rows, missing or extra rows, and bad files (row size not matching the dim, dtype not
  matching the qtype, bad metadata, truncation) are refused with a clear message; the
  destination is never created or changed.
"""
import os

import numpy as np
import pytest
import torch

import emb
from embio import st_load, st_save
from parity_util import assert_close

torch.set_num_threads(1)
Q = torch.ops.quantized


def write_batches(path, w, qtype, batch, words=None, counts=None):
    with emb.QTableWriter(path, qtype, w.shape[0], w.shape[1], words=words,
                          counts=counts) as writer:
        for r in range(0, w.shape[0], batch):
            writer.append(w[r:r + batch])
        return writer.commit()


def open_file(path, map=False):  # noqa: A002 (QTable.map)
    return emb.QTable.map(path) if map else emb.QTable.load(path)


def torch_rows(w, qtype):
    t = torch.from_numpy(w)
    if qtype == "int8":
        return Q.embedding_bag_byte_prepack(t).numpy()
    if qtype == "int4":
        return Q.embedding_bag_4bit_prepack(t).numpy()
    return {"f32": t, "f16": t.half(), "bf16": t.bfloat16().view(torch.int16)}[qtype].numpy()


def torch_dequant(w, qtype):
    t = torch.from_numpy(w)
    if qtype in ("f32", "f16", "bf16"):
        return {"f32": t, "f16": t.half().float(), "bf16": t.bfloat16().float()}[qtype].numpy()
    p = torch.from_numpy(torch_rows(w, qtype))
    f = (Q.embedding_bag_byte_rowwise_offsets if qtype == "int8"
         else Q.embedding_bag_4bit_rowwise_offsets)
    ar = torch.arange(w.shape[0])
    return f(p, ar, ar, False, 0, False, None, None, False).numpy()


@pytest.mark.parametrize("qtype", ["f32", "f16", "bf16", "int8", "int4"])
def test_streamed_file_matches_torch(tmp_path, qtype):
    rng = np.random.default_rng(20)
    V, D = 1000, 48
    w = (rng.standard_normal((V, D)) * 10.0 ** rng.uniform(-2, 2, (V, 1))).astype(np.float32)
    path = tmp_path / f"t.{qtype}.safetensors"
    e = write_batches(path, w, qtype, batch=97)
    tensors, meta = st_load(path)
    assert list(tensors) == ["weight"]
    assert meta["emb.qtype"] == qtype and meta["emb.dim"] == str(D)
    got = tensors["weight"]
    want = torch_rows(w, qtype)
    assert_close(got.view(np.uint8).reshape(V, -1), want.view(np.uint8).reshape(V, -1),
                 exact=True, what="file bytes")
    deq = torch_dequant(w, qtype).astype(np.float64)
    x = w.astype(np.float64)
    diff = np.abs(x - deq)
    cos = (x * deq).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(deq, axis=1))
    for key, ref, val in (("max_abs", diff.max(), e["max_abs"]), ("mean_abs", diff.mean(), e["mean_abs"]),
                          ("mean_cosine", cos.mean(), e["mean_cosine"])):
        assert val == pytest.approx(ref, rel=1e-9, abs=1e-300), key
        assert float(meta["emb.error." + key]) == pytest.approx(ref, rel=1e-8, abs=1e-300), key
    for mapped in (False, True):
        f = open_file(path, map=mapped)
        assert (f.qtype, f.num_rows, f.dim) == (qtype, V, D)
        assert f.read_only == mapped
        assert_close(f.dequantize(), deq.astype(np.float32), exact=True, what="read back")


@pytest.mark.parametrize("qtype", ["int8", "int4"])
def test_torch_op_on_file_bytes_equals_mapped_bag(tmp_path, qtype):
    rng = np.random.default_rng(21)
    V, D = 500, 32
    w = rng.standard_normal((V, D)).astype(np.float32)
    path = tmp_path / "q.safetensors"
    write_batches(path, w, qtype, batch=64)
    rows = torch.from_numpy(st_load(path)[0]["weight"].copy())
    idx = rng.integers(0, V, 600)
    off = np.arange(0, 600, 20)
    psw = rng.standard_normal(600).astype(np.float32)
    f = (Q.embedding_bag_byte_rowwise_offsets if qtype == "int8"
         else Q.embedding_bag_4bit_rowwise_offsets)
    want = f(rows, torch.from_numpy(idx), torch.from_numpy(off), False, 0, False,
             torch.from_numpy(psw), None, False).numpy()
    m = open_file(path, map=True)
    assert_close(m.bag(idx, off, psw, mode="sum"), want, exact=True,
                 what="bag on the mapped file")


def test_foreign_prepacked_file_loads_as_int8(tmp_path):
    rng = np.random.default_rng(22)
    w = rng.standard_normal((40, 16)).astype(np.float32)
    p = torch_rows(w, "int8")
    path = tmp_path / "torch.safetensors"
    st_save(path, {"emb": p}, {"format": "pt"})
    f = open_file(path)
    assert (f.qtype, f.num_rows, f.dim) == ("int8", 40, 16)
    assert_close(f.dequantize(), torch_dequant(w, "int8"), exact=True)


def test_vocab_and_save_roundtrip(tmp_path):
    rng = np.random.default_rng(23)
    w = rng.standard_normal((3, 8)).astype(np.float32)
    words = ["king", "queen", "k\u00f6nig"]
    path = tmp_path / "v.safetensors"
    write_batches(path, w, "int4", batch=2, words=words, counts=[10, 9, 8])
    _, meta = st_load(path)
    assert meta["emb.vocab"] == "king\nqueen\nk\u00f6nig" and meta["emb.counts"] == "10 9 8"
    f = open_file(path)
    assert f.words == words and f.counts == [10, 9, 8]
    assert open_file(path, map=True).words == words
    # save() writes the stored bytes as they are
    q = emb.QTable.quantize(w, "int8")
    p2 = tmp_path / "s.safetensors"
    q.save(p2)
    t2, meta2 = st_load(p2)
    assert_close(t2["weight"], np.asarray(q), exact=True)
    assert meta2["emb.qtype"] == "int8" and "emb.error.max_abs" not in meta2


def test_failed_writes_leave_nothing(tmp_path):
    path = tmp_path / "out.safetensors"
    path.write_bytes(b"previous contents")
    w = np.ones((10, 4), np.float32)
    bad = w.copy()
    bad[7, 2] = np.nan
    for qtype in ("f16", "int8", "int4"):
        # a NaN in the second batch
        writer = emb.QTableWriter(path, qtype, 10, 4)
        writer.append(bad[:5])
        with pytest.raises(emb.InvalidArgumentError) as exc:
            writer.append(bad[5:])
        msg = str(exc.value)
        assert "row 7" in msg and "column 2" in msg, msg
        with pytest.raises(emb.InvalidArgumentError):
            writer.commit()
        # a committed writer refuses further calls until it is freed
        with pytest.raises(emb.StateError) as exc:
            writer.commit()
        assert "already been committed" in str(exc.value), str(exc.value)
        with pytest.raises(emb.StateError) as exc:
            writer.append(w[:1])
        assert "already been committed" in str(exc.value), str(exc.value)
        writer.close()
        with pytest.raises(ValueError, match="closed"):
            writer.append(w[:1])
        # too few rows
        with emb.QTableWriter(path, qtype, 10, 4) as writer:
            writer.append(w[:9])
            with pytest.raises(emb.StateError) as exc:
                writer.commit()
            assert "9 of the announced 10" in str(exc.value), str(exc.value)
        # too many
        with emb.QTableWriter(path, qtype, 5, 4) as writer:
            with pytest.raises(emb.InvalidArgumentError) as exc:
                writer.append(w)
            assert "remain" in str(exc.value), str(exc.value)
        # rows of another dim are refused before emb reads them
        with emb.QTableWriter(path, qtype, 5, 4) as writer:
            with pytest.raises(ValueError, match=r"\[n, 4\]"):
                writer.append(np.ones((2, 3), np.float32))
        # a writer abandoned without commit leaves nothing
        with emb.QTableWriter(path, qtype, 10, 4) as writer:
            writer.append(w)
    assert path.read_bytes() == b"previous contents"
    assert sorted(os.listdir(tmp_path)) == ["out.safetensors"], "temporary files left behind"
    with pytest.raises(emb.Error) as exc:
        emb.QTableWriter(tmp_path / "no" / "x.st", "int8", 1, 4)
    assert "x.st" in str(exc.value)


def test_bad_files_are_refused(tmp_path):
    rng = np.random.default_rng(24)
    w = rng.standard_normal((6, 16)).astype(np.float32)
    p8 = torch_rows(w, "int8")
    cases = {
        "row size": ({"weight": p8[:, :-2].copy()}, {"emb.qtype": "int8", "emb.dim": "16"},
                     "row size 22 bytes, but int8 rows of dim 16 take 24"),
        "dim": ({"weight": p8}, {"emb.qtype": "int4", "emb.dim": "16"}, "int4 rows of dim 16 take 12"),
        "dtype": ({"weight": w.astype(np.float16)}, {"emb.qtype": "int8"}, "says int8"),
        "qtype": ({"weight": p8}, {"emb.qtype": "int7"}, "int7"),
        "bad dim": ({"weight": p8}, {"emb.qtype": "int8", "emb.dim": "x"}, "emb.dim"),
        "no codes": ({"weight": p8[:, :8].copy()}, {}, "row size 8 bytes"),
        "float dim": ({"weight": w}, {"emb.qtype": "f32", "emb.dim": "15"}, "rows of 16 values"),
        "choice": ({"a": w, "b": w}, {}, "no tensor named \"weight\""),
        "int dtype": ({"weight": np.zeros((2, 2), np.int64)}, {}, "I64 is not a table storage type"),
    }
    for name, (tensors, meta, needle) in cases.items():
        path = tmp_path / f"{name}.safetensors"
        st_save(path, tensors, dict(meta, format="pt"))
        for mapped in (False, True):
            with pytest.raises(emb.FormatError) as exc:
                open_file(path, map=mapped)
            assert needle in str(exc.value), (name, str(exc.value))
    # truncated: the safetensors reader names it
    good = tmp_path / "good.safetensors"
    write_batches(good, w, "int8", batch=6)
    data = good.read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[:-5])
    with pytest.raises(emb.FormatError):
        open_file(cut, map=True)
