"""The reference server bench/serve.py compares `emb serve` with: what people write today to
serve word vectors (word2vec-api and its kind), a Flask app around gensim's KeyedVectors,
with the same routes, request and response shapes as emb serve for the three requests timed:

  POST /v1/lookup         {"words": [...]}               -> {"data": [{"embedding": [...]}]}
  POST /v1/embeddings     {"input": "text" | [texts]}    -> OpenAI's shape, the mean of the
                                                            known words' vectors
  POST /v1/most_similar   {"positive", "negative", "topn"} -> {"results": [...]}

Run: /usr/bin/python3 bench/serve_reference.py TABLE.bin --port N (Flask's threaded server)."""
import argparse
import logging

import numpy as np
from flask import Flask, jsonify, request
from gensim.models import KeyedVectors


def make_app(kv):
    app = Flask("emb-bench-reference")

    @app.get("/health")
    def health():
        return jsonify(status="ok")

    @app.post("/v1/lookup")
    def lookup():
        words = request.get_json(force=True)["words"]
        return jsonify(object="list", data=[
            {"index": i, "word": w, "id": kv.key_to_index[w], "embedding": kv[w].tolist()}
            for i, w in enumerate(words)])

    @app.post("/v1/embeddings")
    def embeddings():
        inp = request.get_json(force=True)["input"]
        texts = [inp] if isinstance(inp, str) else inp
        data, ntok = [], 0
        for i, t in enumerate(texts):
            words = t.split()
            ntok += len(words)
            known = [w for w in words if w in kv.key_to_index]
            v = kv[known].mean(axis=0) if known else np.zeros(kv.vector_size, np.float32)
            data.append({"object": "embedding", "index": i, "embedding": v.tolist()})
        return jsonify(object="list", data=data, model="reference",
                       usage={"prompt_tokens": ntok, "total_tokens": ntok})

    @app.post("/v1/most_similar")
    def most_similar():
        req = request.get_json(force=True)
        res = kv.most_similar(positive=req.get("positive", []), negative=req.get("negative", []),
                              topn=req.get("topn", 10))
        return jsonify(results=[{"word": w, "id": kv.key_to_index[w], "similarity": float(s)}
                                for w, s in res])

    return app


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("table")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    a = ap.parse_args()
    kv = KeyedVectors.load_word2vec_format(a.table, binary=a.table.endswith(".bin"))
    kv.fill_norms()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    make_app(kv).run(host=a.host, port=a.port, threaded=True)


if __name__ == "__main__":
    main()
