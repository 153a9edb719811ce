"""The numpy side of `import emb`: zero-copy views both ways, read-only tables, the owners of
borrowed arrays kept alive, wrong dtypes and layouts, errors carrying emb's message, the GIL
released while C works. torch is the oracle for the numbers."""
import gc
import sys
import threading
import time

import numpy as np
import pytest
import torch

import emb
from conftest import same_bits


def torch_table(V, D, seed=0, **kw):
    torch.manual_seed(seed)
    return torch.nn.Embedding(V, D, **kw)


def test_seeded_table_is_torchs_and_the_view_is_live():
    emb.manual_seed(0)
    e = emb.Embedding(6, 2, padding_idx=1)
    same_bits(e.weight, torch_table(6, 2, padding_idx=1).weight.detach().numpy(), "init")
    w = np.asarray(e)
    assert np.shares_memory(w, e.weight) and w.flags.writeable and w.base is not None
    w[3] = [7.0, 8.0]  # a write through the view is the table's
    same_bits(e(np.array([3])), np.array([[7.0, 8.0]], np.float32), "lookup after write")
    e.weight = np.full((6, 2), 0.5)      # assignment copies into the table, in place
    assert w[0, 0] == 0.5 and np.shares_memory(w, e.weight)
    w[3] = [7.0, 8.0]
    del e
    gc.collect()
    assert w[3, 1] == 8.0  # the view keeps the table alive


def test_lookup_backward_match_torch():
    emb.manual_seed(3)
    e = emb.Embedding(20, 5, padding_idx=4, scale_grad_by_freq=True)
    t = torch_table(20, 5, seed=3, padding_idx=4, scale_grad_by_freq=True)
    idx = np.array([[1, 4, 1], [19, 0, 1]])
    up = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    out = t(torch.from_numpy(idx))
    (out * torch.from_numpy(up)).sum().backward()
    same_bits(e(idx), out.detach().numpy(), "forward")
    same_bits(e.backward(idx, up), t.weight.grad.numpy(), "dense backward")
    g = np.ones((20, 5), np.float32)
    assert e.backward(idx, up, grad=g) is g  # accumulation into a caller's gradient
    same_bits(g, t.weight.grad.numpy() + 1, "accumulated")
    nans = np.full((20, 5), np.nan, np.float32)
    assert e.backward(idx, up, grad=nans, overwrite=True) is nans  # written, never read
    same_bits(nans, t.weight.grad.numpy(), "overwritten")
    es = emb.Embedding.from_pretrained(e.weight, freeze=False, padding_idx=4, sparse=True)
    ts = torch.nn.Embedding.from_pretrained(t.weight.detach(), freeze=False, padding_idx=4,
                                            sparse=True)
    (ts(torch.from_numpy(idx)) * torch.from_numpy(up)).sum().backward()
    rows, vals = es.backward_sparse(idx, up)
    ref = ts.weight.grad
    same_bits(rows, ref._indices()[0].numpy(), "sparse rows")
    same_bits(vals, ref._values().numpy(), "sparse values")


def test_bag_matches_torch():
    w = np.random.default_rng(1).standard_normal((12, 4)).astype(np.float32)
    inp = np.array([1, 2, 3, 3, 9, 0, 11])
    off = np.array([0, 3, 3, 5])
    for mode in ("sum", "mean", "max"):
        b = emb.EmbeddingBag.from_pretrained(w, mode=mode, freeze=False)
        t = torch.nn.EmbeddingBag.from_pretrained(torch.from_numpy(w.copy()), mode=mode,
                                                  freeze=False)
        out, mi = b.forward(inp, off, return_max_indices=True)
        ref = t(torch.from_numpy(inp), torch.from_numpy(off))
        same_bits(out, ref.detach().numpy(), f"{mode} forward")
        assert (mi is None) == (mode != "max")
        up = np.arange(16, dtype=np.float32).reshape(4, 4)
        (ref * torch.from_numpy(up)).sum().backward()
        same_bits(b.backward(inp, up, off, max_indices=mi), t.weight.grad.numpy(),
                  f"{mode} backward")


def test_from_pretrained_shares_and_keeps_the_owner_alive():
    buf = bytearray(np.arange(12, dtype=np.float32).tobytes())
    arr = np.frombuffer(buf, np.float32).reshape(4, 3)
    e = emb.Embedding.from_pretrained(arr)
    assert np.shares_memory(np.asarray(e), arr)
    arr[2, 0] = 100.0  # the caller's writes are the table's (torch's from_pretrained shares)
    assert e(np.array([2]))[0, 0] == 100.0
    with pytest.raises(BufferError):
        buf.extend(b"0000")  # the memory is pinned while emb borrows it
    del arr
    gc.collect()
    same_bits(e(np.array([3])), np.array([[9, 10, 11]], np.float32), "after del")
    del e
    gc.collect()
    buf.extend(b"0000")  # released with the table


def test_read_only_tables(tmp_path):
    w = np.random.default_rng(2).standard_normal((8, 3)).astype(np.float32)
    np.save(tmp_path / "w.npy", w)
    mm = np.load(tmp_path / "w.npy", mmap_mode="r")
    e = emb.Embedding.from_pretrained(mm, max_norm=1.0)
    assert e.read_only
    v = np.asarray(e)
    assert not v.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        v[0, 0] = 1.0
    with pytest.raises(emb.ReadOnlyError, match="read-only"):
        e(np.array([0]))  # max_norm would write the table
    with pytest.raises(emb.ReadOnlyError):
        emb.SGD([e], lr=0.1)
    same_bits(np.asarray(e), w, "unchanged")
    emb.save_safetensors(tmp_path / "t.safetensors", {"weight": w})
    m = emb.map_safetensors(tmp_path / "t.safetensors")
    assert m.read_only and not np.asarray(m).flags.writeable
    same_bits(m(np.array([5, 1])), w[[5, 1]], "mapped lookup")


def test_wrong_dtypes_and_layouts():
    e = emb.Embedding(5, 3)
    with pytest.raises(TypeError, match="indices must be int64 or int32, got float64"):
        e(np.array([1.0]))
    with pytest.raises(TypeError, match="int64 or int32, got uint64"):
        e(np.array([1], np.uint64))
    with pytest.raises(TypeError, match=r"got int64 \(big-endian\)"):
        e(np.array([1], ">i8"))
    with pytest.raises(TypeError, match="weight must be float32, got float64"):
        emb.Embedding.from_pretrained(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="C-contiguous"):
        emb.Embedding.from_pretrained(np.zeros((4, 4), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="C-contiguous"):
        e.backward(np.array([1]), np.ones((1, 3), np.float32), grad=np.zeros((3, 5), np.float32).T)
    # a bag's index and weight dtypes are emb's to check: torch's wording, an emb.DtypeError
    b = emb.EmbeddingBag(5, 3, mode="sum", sparse=True)
    with pytest.raises(emb.DtypeError, match="one of the following scalar types: Long, Int"):
        b(np.array([1.0]), np.array([0]))
    with pytest.raises(TypeError, match="per_sample_weights must have the same type as"):
        b(np.array([1]), np.array([0]), np.array([1.0]))
    with pytest.raises(TypeError, match="expected an emb EmbeddingBag, got"):
        emb.SGD([e], lr=0.1).step_fused_bag(0, e, np.array([1]), np.ones((1, 3), np.float32),
                                            np.array([0]))
    # arrays emb only reads are copied when not contiguous: the same result as contiguous ones
    idx = np.array([[0, 9, 1, 9, 2, 9]])[:, ::2]
    same_bits(e(idx), e(np.ascontiguousarray(idx)), "non-contiguous indices")
    same_bits(e([[0, 1, 2]]), e(np.array([[0, 1, 2]])), "a list")
    same_bits(e(torch.tensor([0, 1, 2], dtype=torch.int32)), e(np.array([0, 1, 2])), "torch")


def test_errors_carry_embs_message_and_change_nothing():
    emb.manual_seed(0)
    e = emb.Embedding(10, 4, max_norm=0.5)
    before = e.weight.copy()
    with pytest.raises(IndexError) as info:
        e(np.array([3, 10]))
    assert isinstance(info.value, emb.Error) and info.value.status == -4
    assert str(info.value) == ("index 10 at position 1 is out of range for an embedding with "
                               "10 rows (valid: [0, 10))")
    same_bits(e.weight, before, "nothing renormalised")
    with pytest.raises(ValueError, match="Padding_idx must be within num_embeddings"):
        emb.Embedding(10, 4, padding_idx=10)
    with pytest.raises(ValueError, match="mode has to be one of sum, mean or max"):
        emb.EmbeddingBag(10, 4, mode="median")


def test_optimizer_keeps_its_parameters_alive():
    buf = bytearray(np.ones(6, np.float32).tobytes())
    p = np.frombuffer(buf, np.float32).reshape(2, 3)
    opt = emb.SGD([p], lr=0.5)
    del p
    gc.collect()
    with pytest.raises(BufferError):
        buf.extend(b"0000")
    opt.step(0, np.ones((2, 3), np.float32))
    same_bits(np.frombuffer(buf, np.float32), np.full(6, 0.5, np.float32), "stepped")
    del opt
    gc.collect()
    buf.extend(b"0000")


def test_calls_release_the_gil():
    """A long bag pooling in one thread lets another thread run Python meanwhile: with a
    switch interval far longer than the work, the main thread could run only if the
    worker's C calls release the GIL."""
    rng = np.random.default_rng(0)
    b = emb.EmbeddingBag.from_pretrained(rng.standard_normal((1000, 64)).astype(np.float32),
                                         mode="sum")
    inp = rng.integers(0, 1000, 4_000_000)
    off = np.array([0])
    done = threading.Event()
    ran = []

    def work():
        for _ in range(5):
            b(inp, off)
        done.set()

    old = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    try:
        t = threading.Thread(target=work)
        t.start()
        time.sleep(0)  # let the worker start its first call
        while not done.is_set():
            ran.append(1)
            if len(ran) >= 1000:
                break
        t.join()
    finally:
        sys.setswitchinterval(old)
    assert len(ran) >= 1000, f"the main thread ran {len(ran)} steps while emb worked"


def test_tables_created_in_threads_draw_whole_sequences():
    """emb's default generator is shared: tables created from several threads at once each get
    one whole run of draws, as if created one after the other in some order (each equals one
    of the tables a single thread creates after the same seed), never an interleaving."""
    n, V, D = 4, 100000, 64
    emb.manual_seed(0)
    sequential = [emb.Embedding(V, D).weight.copy() for _ in range(n)]
    emb.manual_seed(0)
    made = [None] * n
    start = threading.Barrier(n)

    def make(i):
        start.wait()
        made[i] = emb.Embedding(V, D).weight.copy()

    threads = [threading.Thread(target=make, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    matches = sorted(next((j for j, s in enumerate(sequential) if np.array_equal(m, s)), -1)
                     for m in made)
    assert matches == list(range(n)), matches
