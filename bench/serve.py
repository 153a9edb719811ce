"""Load test of `emb serve` against a gensim-backed Flask server (bench/serve_reference.py) on
the same table and the same requests, in the same run, on loopback, with wrk (Debian's wrk):
requests per second and latency percentiles for lookups (one word), embeddings (a text of
8 words, the mean of their vectors) and k-NN (most_similar of one word, topn 10).

The table is made here: V words "w0".."w{V-1}" with random vectors (word2vec binary), so
that both servers read the same file. Each request picks its words at random (wrk's Lua,
a fixed seed). Before timing, both servers must give the same answers to a few requests.

Run: make bench-serve, or EMB_BUILD_DIR=build /usr/bin/python3 bench/serve.py [--rows N]
[--dim D] [--seconds S] [--connections C] [--threads T]. Results: a Markdown table on
standard output and in $EMB_BUILD_DIR/bench_serve.md, JSON lines in bench_serve.jsonl."""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("EMB_BUILD_DIR") or os.path.join(HERE, "..", "build")
EMB = os.environ.get("EMB_BIN") or os.path.join(BUILD, "emb")

LUA = {
    "lookup": """
math.randomseed(7)
request = function()
  local body = '{"words": ["w' .. math.random(0, {V} - 1) .. '"]}'
  return wrk.format("POST", "/v1/lookup", {["Content-Type"] = "application/json"}, body)
end
""",
    "embeddings": """
math.randomseed(7)
request = function()
  local w = {}
  for i = 1, 8 do w[i] = "w" .. math.random(0, {V} - 1) end
  local body = '{"input": "' .. table.concat(w, " ") .. '", "model": "x"}'
  return wrk.format("POST", "/v1/embeddings", {["Content-Type"] = "application/json"}, body)
end
""",
    "knn": """
math.randomseed(7)
request = function()
  local body = '{"positive": ["w' .. math.random(0, {V} - 1) .. '"], "topn": 10}'
  return wrk.format("POST", "/v1/most_similar", {["Content-Type"] = "application/json"}, body)
end
""",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def wait_health(url, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {proc.args}")
        try:
            with urllib.request.urlopen(url + "health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the server did not answer in {timeout} s: {proc.args}")


def write_table(path, rows, dim, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(rows, dim)).astype("<f4")
    with open(path, "wb") as f:
        f.write(f"{rows} {dim}\n".encode())
        for i in range(rows):
            f.write(b"w%d " % i + w[i].tobytes() + b"\n")


UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def run_wrk(url, script, seconds, connections, threads):
    out = subprocess.run(["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s",
                          "--latency", "-s", script, url], capture_output=True, text=True,
                         timeout=seconds + 60)
    if out.returncode != 0:
        raise SystemExit(f"wrk failed: {out.stderr}")
    text = out.stdout
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", text).group(1))
    lat = {}
    for p, v, u in re.findall(r"^\s+(50|75|90|99)%\s+([0-9.]+)(us|ms|s)\s*$", text, re.M):
        lat[p] = float(v) * UNITS[u]
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    errors = re.search(r"Socket errors:.*", text)
    return {"rps": rps, "p50": lat.get("50"), "p90": lat.get("90"), "p99": lat.get("99"),
            "non2xx": int(bad.group(1)) if bad else 0, "socket_errors": errors.group(0) if errors else ""}


def check_same(emb_url, ref_url, rows):
    """Both servers answer alike before anything is timed."""
    for w in ("w0", f"w{rows // 2}", f"w{rows - 1}"):
        a = post(emb_url + "v1/most_similar", {"positive": [w], "topn": 10})["results"]
        b = post(ref_url + "v1/most_similar", {"positive": [w], "topn": 10})["results"]
        sa, sb = [x["similarity"] for x in a], [x["similarity"] for x in b]
        assert np.allclose(sa, sb, atol=1e-5), (w, a, b)
        a = post(emb_url + "v1/embeddings", {"input": f"w1 w2 {w}"})["data"][0]["embedding"]
        b = post(ref_url + "v1/embeddings", {"input": f"w1 w2 {w}"})["data"][0]["embedding"]
        assert np.allclose(a, b, atol=1e-6), w
        a = post(emb_url + "v1/lookup", {"words": [w]})["data"][0]["embedding"]
        b = post(ref_url + "v1/lookup", {"words": [w]})["data"][0]["embedding"]
        assert np.array_equal(np.float32(a), np.float32(b)), w


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2, help="worker threads of emb serve")
    ap.add_argument("--wrk-threads", type=int, default=1)
    a = ap.parse_args()
    if not os.path.exists(EMB):
        raise SystemExit(f"{EMB} not found: build first (make bench-serve does)")
    tmp = tempfile.mkdtemp(prefix="emb-bench-serve-")
    table = os.path.join(tmp, "table.bin")
    write_table(table, a.rows, a.dim)
    procs = []
    try:
        pe, pr = free_port(), free_port()
        emb = subprocess.Popen([EMB, "serve", "--quiet", "--port", str(pe), "--threads", str(a.threads),
                                "--connections", str(4 * a.connections), table],
                               stdout=subprocess.DEVNULL)
        procs.append(emb)
        ref = subprocess.Popen([sys.executable, os.path.join(HERE, "serve_reference.py"), table,
                                "--port", str(pr)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(ref)
        emb_url, ref_url = f"http://127.0.0.1:{pe}/", f"http://127.0.0.1:{pr}/"
        t0 = time.monotonic()
        wait_health(emb_url, emb)
        t_emb = time.monotonic() - t0
        wait_health(ref_url, ref)
        t_ref = time.monotonic() - t0
        check_same(emb_url, ref_url, a.rows)
        results = []
        for name, lua in LUA.items():
            script = os.path.join(tmp, f"{name}.lua")
            with open(script, "w") as f:
                f.write(lua.replace("{V}", str(a.rows)))
            for server, url in (("emb serve", emb_url), ("Flask + gensim", ref_url)):
                r = run_wrk(url, script, a.seconds, a.connections, a.wrk_threads)
                r.update(request=name, server=server)
                results.append(r)
                print(json.dumps(r), file=sys.stderr)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    lines = [f"Table: {a.rows} words x {a.dim} (random vectors, word2vec binary); wrk -t{a.wrk_threads} "
             f"-c{a.connections} -d{a.seconds}s on loopback; emb serve --threads {a.threads}; the "
             f"reference is Flask {flask_version()} (threaded) + gensim {gensim_version()}. Ready "
             f"to answer after start: emb {t_emb:.2f} s, reference {t_ref:.2f} s.",
             "",
             "| request | server | requests/s | p50 ms | p90 ms | p99 ms | non-2xx | emb / reference |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    by = {(r["request"], r["server"]): r for r in results}
    for r in results:
        ref = by[(r["request"], "Flask + gensim")]
        ratio = f"{r['rps'] / ref['rps']:.1f}x" if r["server"] == "emb serve" else ""
        lines.append(f"| {r['request']} | {r['server']} | {r['rps']:.0f} | {r['p50']:.2f} | "
                     f"{r['p90']:.2f} | {r['p99']:.2f} | {r['non2xx']} | {ratio} |")
    md = "\n".join(lines) + "\n"
    print(md)
    with open(os.path.join(BUILD, "bench_serve.md"), "w") as f:
        f.write(md)
    with open(os.path.join(BUILD, "bench_serve.jsonl"), "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")


def flask_version():
    import importlib.metadata
    return importlib.metadata.version("flask")


def gensim_version():
    import gensim
    return gensim.__version__


if __name__ == "__main__":
    main()
