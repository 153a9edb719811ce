"""Running `emb serve` in the tests: start it on a free loopback port, talk JSON to it, stop
it with SIGTERM and check that it exits 0."""
import http.client
import json
import os
import signal
import subprocess
import threading
import time

from conftest import EMB_BIN


class Server:
    """`emb serve ARGS` on 127.0.0.1 and a free port (--port 0: the server prints its URL on
    standard output once it listens)."""

    def __init__(self, *args, env=None, timeout=60):
        self.args = [EMB_BIN, "serve", "--port", "0", *map(str, args)]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.stderr_lines = []
        line = self._readline(timeout)
        if not line.startswith("http://"):
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"emb serve did not start: {line!r} {out!r} {err!r}")
        self.url = line.strip()
        hostport = self.url[len("http://"):].rstrip("/")
        self.host, port = hostport.rsplit(":", 1)
        self.port = int(port)
        # keep reading stderr so that the server never blocks on a full pipe
        self._err = threading.Thread(target=self._drain_stderr, daemon=True)
        self._err.start()

    def _readline(self, timeout):
        result = []
        t = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        return result[0] if result else ""

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    @property
    def stderr(self):
        return "".join(self.stderr_lines)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers, decoded JSON or raw bytes)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            hdrs = dict(headers or {})
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
                hdrs.setdefault("Content-Type", "application/json")
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            ctype = resp.getheader("Content-Type") or ""
            if ctype.startswith("application/json"):
                data = json.loads(data)
            return resp.status, dict(resp.getheaders()), data
        finally:
            conn.close()

    def post(self, path, body, expect=200, **kw):
        status, headers, data = self.request("POST", path, body, **kw)
        assert status == expect, (status, data)
        return data

    def get(self, path, expect=200):
        status, headers, data = self.request("GET", path)
        assert status == expect, (status, data)
        return data

    def error(self, method, path, body, status):
        """The error message of a request that must fail with `status`, checking the JSON
        error shape."""
        got, headers, data = self.request(method, path, body)
        assert got == status, (got, data)
        assert isinstance(data, dict) and set(data) == {"error"}, data
        e = data["error"]
        assert e["code"] == status and isinstance(e["type"], str) and e["message"], e
        return e["message"]

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Sends sig and returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"emb serve did not stop within {timeout} s of signal {sig}")
        self._err.join(5)
        self.proc.stdout.close()
        return rc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        rc = self.stop()
        if exc[0] is None:
            assert rc == 0, (rc, self.stderr)


def wait_until(cond, timeout=10, what="a condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
