"""`emb serve`'s JSON API (docs/serve.md) against the tools it stands in for, at test time:

- /v1/most_similar, /v1/similarity, /v1/doesnt_match and /v1/analogy against gensim 4.2's
  KeyedVectors on the same file (most_similar(positive, negative, topn), similarity,
  doesnt_match, most_similar(positive=[b, c], negative=[a]));
- /v1/embeddings and /api/embed: a text's vector is torch's F.embedding_bag(mode="mean") of
  its known words' rows, bit for bit; the OpenAI response shape, base64 encoding, token-id
  inputs, usage counts;
- every format and storage type emb reads: the rows served equal what torch makes of the
  float32 table (.half(), .bfloat16(), the quantized prepack ops' dequantized rows);
  safetensors tables are mapped, and two servers of one file map the same file;
- tables without words: lookups and neighbours by row id;
- /v1/map: PCA coordinates equal scikit-learn's PCA of the unit rows; t-SNE and
  neighbourhood maps have the right points;
- errors: JSON bodies with HTTP status codes (400, 404, 405) that name what is wrong, and
  the limits (topn, batch, words per text).
"""
import base64
import os
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gensim.models import KeyedVectors
from sklearn.decomposition import PCA

from conftest import EMB_BIN, run, shared_path
from serve_util import Server

ATOL = 2e-6  # cosines: float32 products of unit vectors, against gensim's float32 NumPy


@pytest.fixture(scope="module")
def vec_path():
    return shared_path("fixtures", "gensim", "lee_fasttext.vec")


@pytest.fixture(scope="module")
def kv(vec_path):
    return KeyedVectors.load_word2vec_format(vec_path, binary=False)


@pytest.fixture(scope="module")
def srv(vec_path):
    with Server(vec_path, "--threads", 2) as s:
        yield s


@pytest.fixture(scope="module")
def weight(srv, kv):
    """The table as the server reads it (float32 rows by id), checked against gensim's."""
    n = len(kv.index_to_key)
    data = srv.post("/v1/lookup", {"ids": list(range(n))})["data"]
    w = np.array([d["embedding"] for d in data], dtype=np.float32)
    assert [d["word"] for d in data] == kv.index_to_key
    np.testing.assert_allclose(w, kv.vectors, rtol=1e-7, atol=0)
    return w


def check_results(got, want, what):
    """Server results [{word, similarity}] against gensim's [(word, score)]: the same scores
    within ATOL, the same words except where gensim's scores tie within ATOL."""
    assert len(got) == len(want), (what, got, want)
    gs = np.array([g["similarity"] for g in got])
    ws = np.array([s for _, s in want])
    np.testing.assert_allclose(gs, ws, rtol=0, atol=ATOL, err_msg=what)
    for i, (g, (w, s)) in enumerate(zip(got, want)):
        if g["word"] != w:
            close = [ww for ww, ss in want if abs(ss - s) <= 2 * ATOL]
            assert g["word"] in close, (what, i, g, w)


QUERIES = [
    (["Arafat"], []),
    (["Israel", "Palestinian"], []),
    (["Sydney"], ["Australia"]),
    (["police", "attacks"], ["the"]),
    (["Taliban", "Afghanistan", "bin"], ["Government", "Minister"]),
]


@pytest.mark.parametrize("pos,neg", QUERIES)
@pytest.mark.parametrize("topn", [1, 10, 37])
def test_most_similar_is_gensims(srv, kv, pos, neg, topn):
    got = srv.post("/v1/most_similar", {"positive": pos, "negative": neg, "topn": topn})["results"]
    want = kv.most_similar(positive=pos, negative=neg, topn=topn)
    check_results(got, want, (pos, neg, topn))
    for g in got:
        assert g["id"] == kv.key_to_index[g["word"]]


def test_most_similar_takes_a_string_ids_and_defaults_to_10(srv, kv):
    got = srv.post("/v1/most_similar", {"positive": "Arafat"})["results"]
    check_results(got, kv.most_similar("Arafat"), "string")
    by_id = srv.post("/v1/most_similar", {"positive": [kv.key_to_index["Arafat"]]})["results"]
    assert by_id == got


@pytest.mark.parametrize("a,b", [("Israel", "Israeli"), ("police", "security"), ("the", "Arafat"),
                                 ("Sydney", "Sydney")])
def test_similarity_is_gensims(srv, kv, a, b):
    got = srv.post("/v1/similarity", {"w1": a, "w2": b})["similarity"]
    assert abs(got - float(kv.similarity(a, b))) <= ATOL


@pytest.mark.parametrize("words", [
    ["Israel", "Israeli", "Palestinian", "cricket"],
    ["Sydney", "Melbourne", "Australia", "Arafat", "Hamas"],
    ["police", "security", "forces", "the"],
    ["Arafat", "nosuchword", "Sharon", "Qantas"],
])
def test_doesnt_match_is_gensims(srv, kv, words):
    got = srv.post("/v1/doesnt_match", {"words": words})
    assert got["word"] == kv.doesnt_match(words)
    assert got["ignored"] == [w for w in words if w not in kv.key_to_index]
    assert got["id"] == kv.key_to_index[got["word"]]


@pytest.mark.parametrize("a,b,c", [("Israel", "Israeli", "Palestinian"),
                                   ("Sydney", "Australia", "Afghanistan"),
                                   ("he", "his", "they")])
def test_analogy_is_gensims_3cosadd(srv, kv, a, b, c):
    got = srv.post("/v1/analogy", {"a": a, "b": b, "c": c, "topn": 12})["results"]
    check_results(got, kv.most_similar(positive=[b, c], negative=[a], topn=12), (a, b, c))


# ---- embeddings --------------------------------------------------------------------------

TEXTS = ["the Government of Israel", "Arafat", "police said attacks on Sydney",
         "nosuchword the nosuchword", "", "   ", "Qaeda Qaeda Qaeda"]


def bag_ids(kv, text):
    return [kv.key_to_index[w] for w in text.split() if w in kv.key_to_index]


def test_embeddings_are_embedding_bag_means(srv, kv, weight):
    r = srv.post("/v1/embeddings", {"input": TEXTS, "model": "anything"})
    assert r["object"] == "list" and r["model"] == "lee_fasttext.vec"
    assert [d["index"] for d in r["data"]] == list(range(len(TEXTS)))
    assert all(d["object"] == "embedding" for d in r["data"])
    ntok = sum(len(t.split()) for t in TEXTS)
    assert r["usage"] == {"prompt_tokens": ntok, "total_tokens": ntok}
    got = np.array([d["embedding"] for d in r["data"]], dtype=np.float32)
    ids = [bag_ids(kv, t) for t in TEXTS]
    flat = torch.tensor([i for b in ids for i in b], dtype=torch.int64)
    offsets = torch.tensor(np.cumsum([0] + [len(b) for b in ids[:-1]]), dtype=torch.int64)
    want = F.embedding_bag(flat, torch.from_numpy(weight), offsets, mode="mean").numpy()
    assert np.array_equal(got, want)  # bit for bit, the empty bags' zeros included
    assert not got[4].any() and not got[5].any() and got[3].any()


def test_embeddings_single_string_base64_and_ids(srv, kv, weight):
    one = srv.post("/v1/embeddings", {"input": "Arafat said"})["data"]
    assert len(one) == 1
    b64 = srv.post("/v1/embeddings", {"input": "Arafat said", "encoding_format": "base64"})["data"]
    raw = base64.b64decode(b64[0]["embedding"])
    assert np.array_equal(np.frombuffer(raw, dtype="<f4"), np.array(one[0]["embedding"], np.float32))
    ids = bag_ids(kv, "Arafat said")
    by_ids = srv.post("/v1/embeddings", {"input": ids})["data"]          # one token array
    assert by_ids[0]["embedding"] == one[0]["embedding"]
    many = srv.post("/v1/embeddings", {"input": [ids, [0], []]})["data"]  # token arrays
    assert many[0]["embedding"] == one[0]["embedding"]
    assert np.array_equal(np.array(many[1]["embedding"], np.float32), weight[0])
    assert not any(many[2]["embedding"])


def test_words_are_found_case_folded_and_without_punctuation(srv, kv, weight):
    """A word not in the table is tried case-folded (ASCII; the first row whose lowercased
    word matches), then without the punctuation around it."""
    for text, word in [("(Qantas)", "Qantas"), ("SYDNEY", "Sydney"), ("militants!", "militants"),
                       ("XYZZY", None), ("?!?", None)]:
        got = np.array(srv.post("/v1/embeddings", {"input": text})["data"][0]["embedding"], np.float32)
        if word is None:
            assert not got.any()
        else:
            assert text not in kv.key_to_index
            assert np.array_equal(got, weight[kv.key_to_index[word]])


def test_ollama_embed(srv, weight, kv):
    r = srv.post("/api/embed", {"model": "x", "input": ["Arafat", "the"]})
    assert r["model"] == "lee_fasttext.vec" and r["prompt_eval_count"] == 2
    assert np.array_equal(np.array(r["embeddings"], np.float32),
                          weight[[kv.key_to_index["Arafat"], kv.key_to_index["the"]]])


def test_models_info_health(srv, kv):
    assert srv.get("/health") == {"status": "ok"}
    m = srv.get("/v1/models")
    assert m["object"] == "list" and m["data"][0]["id"] == "lee_fasttext.vec"
    info = srv.get("/v1/info")
    assert info["rows"] == len(kv.index_to_key) and info["dim"] == kv.vector_size
    assert info["storage"] == "f32" and info["format"] == "word2vec-text"
    assert info["words"] is True and info["mapped"] is False
    # a .vec holds no n-grams: no vectors for unseen words (a .bin does: test_fasttext.py)
    assert info["unseen_words"] is False


def test_lookup_by_word_and_id(srv, kv, weight):
    r = srv.post("/v1/lookup", {"words": ["Arafat", "the"]})["data"]
    assert [d["word"] for d in r] == ["Arafat", "the"]
    assert [d["id"] for d in r] == [kv.key_to_index["Arafat"], 0]
    assert np.array_equal(np.array(r[0]["embedding"], np.float32), weight[kv.key_to_index["Arafat"]])


# ---- errors and limits -------------------------------------------------------------------

@pytest.mark.parametrize("path,body,status,pattern", [
    ("/v1/most_similar", "{bad json", 400, r"not valid JSON.*line 1"),
    ("/v1/most_similar", "[1, 2]", 400, r"must be a JSON object"),
    ("/v1/most_similar", "", 400, r"not valid JSON"),
    ("/v1/most_similar", {"positive": ["nosuchword"]}, 404, r"positive\[0\]: word 'nosuchword' is not in the vocabulary"),
    ("/v1/most_similar", {"positive": [1.5]}, 400, r"positive\[0\] must be a word"),
    ("/v1/most_similar", {"positive": [99999]}, 404, r"row 99999 is out of range \(the table has rows 0..1761\)"),
    ("/v1/most_similar", {}, 400, r"at least one word"),
    ("/v1/most_similar", {"positive": ["the"], "topn": 0}, 400, r"'topn' must be an integer in \[1, 1000\]"),
    ("/v1/most_similar", {"positive": ["the"], "topn": 1001}, 400, r"'topn' must be an integer"),
    ("/v1/most_similar", {"positive": ["the"], "topn": "5"}, 400, r"'topn' must be an integer"),
    ("/v1/most_similar", '{"positive": ["the"], "positive": ["a"]}', 400, r"duplicate"),
    ("/v1/similarity", {"w1": "the"}, 400, r"'w1' and 'w2'"),
    ("/v1/doesnt_match", {"words": []}, 400, r"non-empty array"),
    ("/v1/doesnt_match", {"words": ["nosuch", "words"]}, 404, r"none of the words"),
    ("/v1/analogy", {"a": "the", "b": "a"}, 400, r"'c' is missing"),
    ("/v1/embeddings", {"input": []}, 400, r"'input' is empty"),
    ("/v1/embeddings", {"input": 5}, 400, r"'input' must be"),
    ("/v1/embeddings", {"input": [5, "x"]}, 400, r"integers only"),
    ("/v1/embeddings", {"input": [[0, -1]]}, 404, r"row -1 is out of range"),
    ("/v1/embeddings", {"input": "x", "encoding_format": "hex"}, 400, r"encoding_format"),
    ("/v1/lookup", {"ids": "x"}, 400, r"'ids'.*as an array"),
    ("/v1/map", {"method": "umap"}, 400, r"'method' must be"),
    ("/v1/map", {"n": 1}, 400, r"'n' must be an integer in \[2, 3000\]"),
    ("/v1/map", {"query": "nosuchword"}, 404, r"not in the vocabulary"),
    ("/v1/nosuch", {}, 404, r"no route /v1/nosuch"),
])
def test_errors(srv, path, body, status, pattern):
    msg = srv.error("POST", path, body, status)
    assert re.search(pattern, msg), msg


def test_wrong_method_is_405_with_allow(srv):
    status, headers, data = srv.request("GET", "/v1/most_similar")
    assert status == 405 and headers["Allow"] == "POST", (status, headers)
    assert data["error"]["code"] == 405
    status, headers, data = srv.request("POST", "/v1/info", {})
    assert status == 405 and headers["Allow"] == "GET, HEAD"
    status, headers, _ = srv.request("DELETE", "/")
    assert status == 405


def test_batch_topn_and_token_limits(vec_path):
    with Server(vec_path, "--max-batch", 3, "--max-topn", 5, "--max-tokens", 4,
                "--max-map", 50) as s:
        msg = s.error("POST", "/v1/embeddings", {"input": ["a", "b", "c", "d"]}, 400)
        assert "at most 3 are allowed" in msg
        s.post("/v1/embeddings", {"input": ["a", "b", "c"]})
        assert "more than 4 words" in s.error("POST", "/v1/embeddings", {"input": "a b c d e"}, 400)
        assert "[1, 5]" in s.error("POST", "/v1/most_similar", {"positive": "the", "topn": 6}, 400)
        assert "at most 3" in s.error("POST", "/v1/lookup", {"ids": [0, 1, 2, 3]}, 400)
        assert "[2, 50]" in s.error("POST", "/v1/map", {"n": 51}, 400)
        assert s.get("/v1/info")["limits"]["max_batch"] == 3


# ---- every format and storage type -------------------------------------------------------

def convert(src, dst, *args):
    r = run([EMB_BIN, "convert", *args, src, dst])
    assert r.returncode == 0, r.stderr
    return dst


def torch_rows(w, storage):
    """What torch makes of the float32 table in each storage type."""
    t = torch.from_numpy(w)
    if storage == "f32":
        return w
    if storage == "f16":
        return t.half().float().numpy()
    if storage == "bf16":
        return t.bfloat16().float().numpy()
    Q = torch.ops.quantized
    packed = Q.embedding_bag_byte_prepack(t) if storage == "int8" else Q.embedding_bag_4bit_prepack(t)
    f = Q.embedding_bag_byte_rowwise_offsets if storage == "int8" else Q.embedding_bag_4bit_rowwise_offsets
    ar = torch.arange(w.shape[0])
    return f(packed, ar, ar, False, 0, False, None, None, False).numpy()


TABLES = [  # (file name, convert options, format, storage, mapped, words)
    ("t.bin", [], "word2vec-binary", "f32", False, True),
    ("t.txt", ["--to", "glove"], "glove", "f32", False, True),
    ("t.npy", [], "npy", "f32", False, True),
    ("t.safetensors", [], "safetensors", "f32", True, True),
    ("t.f16.safetensors", ["--dtype", "f16"], "safetensors", "f16", True, True),
    ("t.bf16.safetensors", ["--dtype", "bf16"], "safetensors", "bf16", True, True),
    ("t.int8.safetensors", ["--dtype", "int8"], "safetensors", "int8", True, True),
    ("t.int4.safetensors", ["--dtype", "int4"], "safetensors", "int4", True, True),
]


@pytest.mark.parametrize("name,opts,fmt,storage,mapped,words", TABLES)
def test_every_format_and_storage(tmp_path, vec_path, weight, kv, name, opts, fmt, storage,
                                  mapped, words):
    path = convert(vec_path, str(tmp_path / name), *opts)
    want = torch_rows(weight, storage)
    with Server(path, "--threads", 1) as s:
        info = s.get("/v1/info")
        assert (info["format"], info["storage"], info["mapped"], info["words"]) == \
            (fmt, storage, mapped, words)
        ids = [0, 5, 17, 1761]
        got = np.array([d["embedding"] for d in s.post("/v1/lookup", {"ids": ids})["data"]],
                       np.float32)
        assert np.array_equal(got, want[ids])
        # neighbours over the stored rows: cosines of the dequantized table
        res = s.post("/v1/most_similar", {"positive": ["Arafat"], "topn": 8})["results"]
        u = want / np.linalg.norm(want.astype(np.float64), axis=1, keepdims=True)
        cos = u @ u[kv.key_to_index["Arafat"]]
        for r in res:
            assert abs(r["similarity"] - cos[r["id"]]) <= 1e-5
        cos[kv.key_to_index["Arafat"]] = -np.inf
        assert min(r["similarity"] for r in res) >= np.sort(cos)[-8] - 1e-5
        # text vectors: the mean of the stored rows
        e = s.post("/v1/embeddings", {"input": "Arafat the"})["data"][0]["embedding"]
        m = want[[kv.key_to_index["Arafat"], 0]].astype(np.float64).mean(0)
        np.testing.assert_allclose(e, m, rtol=0, atol=1e-6)


def mappings(pid, path):
    real = os.path.realpath(path)
    with open(f"/proc/{pid}/maps") as f:
        return [line.split() for line in f if line.rstrip().endswith(real)]


def test_two_servers_share_one_mapping(tmp_path, vec_path):
    """A safetensors table is mapped read-only, not copied: both servers map the file."""
    path = convert(vec_path, str(tmp_path / "shared.int8.safetensors"), "--dtype", "int8")
    with Server(path) as a, Server(path) as b:
        for s in (a, b):
            maps = mappings(s.proc.pid, path)
            assert maps, f"{path} is not mapped by {s.proc.pid}"
            assert all(m[1].startswith("r") and "w" not in m[1] for m in maps), maps
        assert a.post("/v1/lookup", {"ids": [3]}) == b.post("/v1/lookup", {"ids": [3]})


# ---- tables without words ----------------------------------------------------------------

def test_table_without_words(tmp_path):
    rng = np.random.default_rng(3)
    w = rng.normal(size=(300, 16)).astype(np.float32)
    path = str(tmp_path / "ids.npy")
    np.save(path, w)
    with Server(path) as s:
        info = s.get("/v1/info")
        assert info["words"] is False and info["rows"] == 300
        r = s.post("/v1/lookup", {"ids": [7, 299]})["data"]
        assert "word" not in r[0] and r[0]["id"] == 7
        assert np.array_equal(np.array(r[1]["embedding"], np.float32), w[299])
        res = s.post("/v1/most_similar", {"positive": [7], "topn": 5})["results"]
        u = w / np.linalg.norm(w.astype(np.float64), axis=1, keepdims=True)
        cos = u @ u[7]
        cos[7] = -np.inf
        assert [x["id"] for x in res] == list(np.argsort(-cos)[:5])
        msg = s.error("POST", "/v1/most_similar", {"positive": ["seven"]}, 404)
        assert "this table has no words (look rows up by id, 0..299)" in msg
        e = s.post("/v1/embeddings", {"input": [[1, 2, 3]]})["data"][0]["embedding"]
        want = F.embedding_bag(torch.tensor([1, 2, 3]), torch.from_numpy(w), torch.tensor([0]),
                               mode="mean").numpy()[0]
        assert np.array_equal(np.array(e, np.float32), want)


# ---- maps --------------------------------------------------------------------------------

def unit(w):
    return (w / np.linalg.norm(w.astype(np.float64), axis=1, keepdims=True)).astype(np.float32)


def test_pca_map_is_sklearns(srv, weight):
    m = srv.post("/v1/map", {"method": "pca", "n": 400})
    assert m["method"] == "pca" and m["n"] == 400
    pts = m["points"]
    assert [p["id"] for p in pts] == list(range(400))
    got = np.array([[p["x"], p["y"]] for p in pts])
    p = PCA(2, svd_solver="full").fit(unit(weight[:400]).astype(np.float64))
    want = p.transform(unit(weight[:400]).astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(m["variance"], p.explained_variance_, rtol=1e-5)


def test_tsne_and_neighbourhood_maps(srv, kv):
    m = srv.post("/v1/map", {"method": "tsne", "n": 120, "iterations": 300})
    xy = np.array([[p["x"], p["y"]] for p in m["points"]])
    assert xy.shape == (120, 2) and np.isfinite(xy).all() and xy.std(0).min() > 0.1
    assert m["kl_divergence"] > 0
    again = srv.post("/v1/map", {"method": "tsne", "n": 120, "iterations": 300})
    assert again == m  # deterministic (and cached)
    nb = srv.post("/v1/map", {"method": "pca", "n": 31, "query": "Arafat"})
    ids = [p["id"] for p in nb["points"]]
    assert ids[0] == kv.key_to_index["Arafat"] and nb["query"] == ids[0]
    want = [kv.key_to_index[w] for w, _ in kv.most_similar("Arafat", topn=30)]
    assert sorted(ids[1:]) == sorted(want)
