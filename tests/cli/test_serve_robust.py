"""`emb serve` under hostile and careless clients, all on loopback and bounded in time:
malformed JSON, bodies over the limit (announced or chunked), oversized headers, garbage
instead of HTTP, slow clients that trickle a request (slowloris), more connections than
allowed — each refused cleanly while the server keeps answering everyone else; SIGTERM and
SIGINT drain the requests in flight and exit 0; the address in use, the API key, CORS."""
import concurrent.futures
import http.client
import json
import signal
import socket
import threading
import time

import pytest

from conftest import EMB_BIN, run, shared_path
from serve_util import Server, wait_until


@pytest.fixture(scope="module")
def vec_path():
    return shared_path("fixtures", "gensim", "lee_fasttext.vec")


def raw(s, data, timeout=10, shut=False):
    """Sends bytes on a new connection and returns everything the server sends back until
    it closes the connection (or the timeout)."""
    c = socket.create_connection((s.host, s.port), timeout=timeout)
    try:
        c.sendall(data)
        if shut:
            c.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            try:
                chunk = c.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        c.close()


def status_of(reply):
    line = reply.split(b"\r\n", 1)[0]
    return int(line.split()[1]) if line.startswith(b"HTTP/1.1 ") else None


def body_of(reply):
    return json.loads(reply.split(b"\r\n\r\n", 1)[1])


def healthy(s):
    assert s.get("/health") == {"status": "ok"}
    assert s.post("/v1/most_similar", {"positive": "Arafat", "topn": 3})["results"]


def test_malformed_json_then_still_serving(vec_path):
    with Server(vec_path) as s:
        for body in ["{", "nul", '{"input": "a"', "\x00\x01", '{"input": "\\ud800"}', "[" * 5000]:
            msg = s.error("POST", "/v1/embeddings", body, 400)
            assert "JSON" in msg or "must be" in msg, msg
        healthy(s)


def test_body_over_the_limit_announced(vec_path):
    """Content-Length over --max-body: 413 at once, before the body is sent (no 100
    Continue), and the connection is closed."""
    with Server(vec_path, "--max-body", 4096) as s:
        t0 = time.monotonic()
        reply = raw(s, b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n"
                       b"Expect: 100-continue\r\n\r\n")
        assert time.monotonic() - t0 < 5
        assert status_of(reply) == 413, reply[:200]
        assert b"100 Continue" not in reply
        assert "larger than 4096 bytes" in body_of(reply)["error"]["message"]
        status, _, data = s.request("POST", "/v1/embeddings", '{"input": "' + "a " * 3000 + '"}')
        assert status == 413 and data["error"]["type"] == "request_too_large"
        s.post("/v1/embeddings", {"input": "a " * 1000})  # under the limit
        healthy(s)


def test_body_over_the_limit_chunked(vec_path):
    """A chunked body (no Content-Length) that outgrows the limit: 413 once it ends; one that
    goes on for more than 4 times the limit: the connection is closed."""
    chunk = b"400\r\n" + b"a" * 1024 + b"\r\n"
    head = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    with Server(vec_path, "--max-body", 4096) as s:
        reply = raw(s, head + chunk * 10 + b"0\r\n\r\n")
        assert status_of(reply) == 413, reply[:200]
        c = socket.create_connection((s.host, s.port), timeout=10)
        c.sendall(head)
        closed = False
        try:
            for _ in range(200):  # 200 KB, far more than 4 x 4096
                c.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        if not closed:
            c.settimeout(10)
            try:
                closed = c.recv(100) == b""
            except ConnectionResetError:
                closed = True
        c.close()
        assert closed
        healthy(s)


def test_oversized_headers_and_garbage(vec_path):
    with Server(vec_path) as s:
        reply = raw(s, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
        assert reply == b"" or status_of(reply) in (400, 413, 431), reply[:200]
        reply = raw(s, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)) * 4,
                    shut=True)
        assert reply == b"" or status_of(reply) == 400, reply[:200]
        reply = raw(s, b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", timeout=3)
        assert status_of(reply) == 404 and b"root:" not in reply
        reply = raw(s, b"GET /index.html/../../x HTTP/1.1\r\nHost: x\r\n\r\n", timeout=3)
        assert status_of(reply) == 404
        healthy(s)


def test_slow_clients_hold_no_worker(vec_path):
    """Slowloris: 40 clients trickle the headers of a request, a byte at a time. With two
    worker threads the others are still answered at once, and a client idle for longer than
    --timeout is disconnected."""
    with Server(vec_path, "--threads", 2, "--timeout", 2) as s:
        socks = []
        for _ in range(40):
            c = socket.create_connection((s.host, s.port), timeout=10)
            c.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Le")
            socks.append(c)
        stop = threading.Event()

        def trickle():
            i = 0
            while not stop.is_set() and i < 20:
                for c in socks:
                    try:
                        c.send(b"n")
                    except OSError:
                        pass
                i += 1
                stop.wait(0.5)

        t = threading.Thread(target=trickle)
        t.start()
        try:
            for _ in range(10):
                t0 = time.monotonic()
                healthy(s)
                assert time.monotonic() - t0 < 2.0
        finally:
            stop.set()
            t.join()
        # now idle: each is closed by the server after --timeout (2 s)
        t0 = time.monotonic()
        for c in socks:
            c.settimeout(15)
            try:
                assert c.recv(100) == b""
            except ConnectionResetError:
                pass
            c.close()
        assert time.monotonic() - t0 < 12
        healthy(s)


def test_more_connections_than_allowed(vec_path):
    """--connections 16 and 80 clients connect at once: those over the limit are closed by
    the server; every answered request is complete; once they leave, all is served."""
    with Server(vec_path, "--connections", 16, "--threads", 2) as s:
        socks = [socket.create_connection((s.host, s.port), timeout=10) for _ in range(80)]
        time.sleep(0.5)
        closed = 0
        for c in socks:
            c.setblocking(False)
            try:
                if c.recv(1) == b"":
                    closed += 1
            except BlockingIOError:
                pass
            except ConnectionResetError:
                closed += 1
        assert closed >= 80 - 16 - 2, closed  # (a worker may count one or two in flight)
        for c in socks:
            c.close()

        def can_connect():  # the server has seen them leave: 8 clients at once are served
            try:
                with concurrent.futures.ThreadPoolExecutor(8) as ex:
                    return all(ex.map(lambda i: s.get("/health") == {"status": "ok"}, range(8)))
            except OSError:
                return False

        wait_until(can_connect, 20, "the server to see the connections close")

        def client(i):  # 8 requests on one kept-alive connection
            conn = http.client.HTTPConnection(s.host, s.port, timeout=30)
            try:
                got = []
                for j in range(8):
                    conn.request("POST", "/v1/embeddings", json.dumps({"input": f"Arafat {i} {j}"}))
                    r = conn.getresponse()
                    got.append((r.status, json.loads(r.read())["data"][0]["index"]))
                return got
            finally:
                conn.close()

        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            assert list(ex.map(client, range(8))) == [[(200, 0)] * 8] * 8
        healthy(s)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_drains_requests_in_flight(tmp_path, vec_path, sig):
    """A slow request (a t-SNE map) is in flight when the signal comes: it is answered in
    full, new connections are refused, and the server exits 0."""
    s = Server(vec_path, "--threads", 2, "--drain-timeout", 600)
    try:
        result = {}

        def slow():
            result["reply"] = s.request("POST", "/v1/map",
                                        {"method": "tsne", "n": 1500, "iterations": 2000},
                                        timeout=600)

        t = threading.Thread(target=slow)
        t.start()
        wait_until(lambda: _busy(s), 20, "the request to start")
        s.proc.send_signal(sig)
        rc = s.proc.wait(600)
        t.join(10)
        assert rc == 0, s.stderr
        status, _, data = result["reply"]
        assert status == 200 and len(data["points"]) == 1500
        assert "stopping, 1 request in flight" in s.stderr, s.stderr
        with pytest.raises(OSError):
            socket.create_connection((s.host, s.port), timeout=2).close()
    finally:
        s.stop()


def _busy(s):
    """True once the server is computing (its CPU time grows)."""
    with open(f"/proc/{s.proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12]) > 20  # utime + stime in ticks


def test_idle_keepalive_connections_do_not_hold_the_stop(vec_path):
    s = Server(vec_path, "--timeout", 60)
    c = socket.create_connection((s.host, s.port), timeout=10)
    c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert c.recv(4096).startswith(b"HTTP/1.1 200")
    t0 = time.monotonic()
    assert s.stop() == 0
    assert time.monotonic() - t0 < 10
    c.close()


def test_address_in_use_and_bad_host(vec_path):
    with Server(vec_path) as s:
        r = run([EMB_BIN, "serve", "--port", str(s.port), vec_path], timeout=30)
        assert r.returncode == 1 and "cannot listen on 127.0.0.1 port" in r.stderr, r.stderr
    r = run([EMB_BIN, "serve", "--host", "no.such.host.invalid", vec_path], timeout=60)
    assert r.returncode == 1 and "cannot use host 'no.such.host.invalid'" in r.stderr
    r = run([EMB_BIN, "serve", "--port", "70000", vec_path])
    assert r.returncode == 2 and "--port" in r.stderr
    r = run([EMB_BIN, "serve", "/nonexistent/table.vec"])
    assert r.returncode == 1 and "/nonexistent/table.vec" in r.stderr


def test_api_key_and_cors(vec_path):
    with Server(vec_path, "--api-key", "s3cret", "--cors", "http://localhost:3000") as s:
        status, headers, data = s.request("POST", "/v1/embeddings", {"input": "a"})
        assert status == 401 and "API key" in data["error"]["message"]
        status, headers, data = s.request("POST", "/v1/embeddings", {"input": "a"},
                                          headers={"Authorization": "Bearer wrong"})
        assert status == 401
        status, headers, data = s.request("POST", "/v1/embeddings", {"input": "a"},
                                          headers={"Authorization": "Bearer s3cret"})
        assert status == 200 and headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
        status, headers, _ = s.request("OPTIONS", "/v1/embeddings",
                                       headers={"Origin": "http://localhost:3000",
                                                "Access-Control-Request-Method": "POST"})
        assert status == 204 and "POST" in headers["Access-Control-Allow-Methods"]
        assert s.get("/health") == {"status": "ok"}  # not under the key
    with Server(vec_path) as s:
        status, headers, _ = s.request("POST", "/v1/embeddings", {"input": "a"})
        assert status == 200 and "Access-Control-Allow-Origin" not in headers
