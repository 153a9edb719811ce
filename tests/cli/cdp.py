"""A small driver of a real headless Chromium (Debian's /usr/bin/chromium) through the
DevTools protocol over a pipe (--remote-debugging-pipe: JSON messages separated by NUL bytes
on file descriptors 3 and 4), with the standard library only: open a page, type into it,
read the DOM, take a screenshot."""
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

CHROMIUM = os.environ.get("EMB_CHROMIUM", "/usr/bin/chromium")


class CDPError(Exception):
    pass


class Browser:
    def __init__(self, width=1360, height=900):
        if not os.path.exists(CHROMIUM):
            raise CDPError(f"{CHROMIUM} is missing: install Debian's chromium (scripts/deps.sh test)")
        self.profile = tempfile.mkdtemp(prefix="emb-chromium-")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        # Chromium reads commands on fd 3 and writes replies on fd 4.
        fds = {3: to_chrome_r, 4: from_chrome_w}

        def child_fds():
            # out of the way first (F_DUPFD: a number >= 10), so that no dup2 below
            # overwrites a pipe end that happens to be fd 3 or 4
            high = {target: fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for target, fd in fds.items()}
            for target, fd in high.items():
                os.dup2(fd, target)
                os.set_inheritable(target, True)
                os.close(fd)

        args = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars",
                "--mute-audio", "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}", "about:blank"]
        self.proc = subprocess.Popen(args, preexec_fn=child_fds,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, close_fds=False)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.session = None
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next((t for t in targets if t["type"] == "page"), None)
        target = page["targetId"] if page else self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    # -- the protocol --------------------------------------------------------------------

    def _read_message(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError("no answer from chromium in time")
            r, _, _ = select.select([self.from_chrome], [], [], left)
            if not r:
                continue
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else ""
                raise CDPError(f"chromium closed the pipe: {err[-2000:]}")
            self.buf += chunk
        msg, _, self.buf = self.buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method, timeout=30, **params):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params}
        if self.session and not method.startswith(("Target.", "Browser.")):
            msg["sessionId"] = self.session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            n = os.write(self.to_chrome, data)
            data = data[n:]
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == mid:
                if "error" in m:
                    raise CDPError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, name, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            for i, e in enumerate(self.events):
                if e.get("method") == name:
                    return self.events.pop(i)
            self.events.append(self._read_message(deadline))

    # -- what a test does ----------------------------------------------------------------

    def open(self, url, timeout=30):
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired", timeout)

    def js(self, expression, timeout=30):
        """The value of a JavaScript expression (awaited when it is a promise)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                      awaitPromise=True, timeout=timeout)
        if "exceptionDetails" in r:
            raise CDPError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression, timeout=60, what=None):
        """Polls a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            v = self.js(expression)
            if v:
                return v
            if time.monotonic() > deadline:
                raise CDPError(f"timed out waiting for {what or expression}")
            time.sleep(0.1)

    def click(self, selector):
        x, y = self.js(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                       f".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def type(self, text):
        """Types text into the focused element, key by key, as a person would."""
        for ch in text:
            self.call("Input.dispatchKeyEvent", type="keyDown", text=ch, key=ch,
                      unmodifiedText=ch)
            self.call("Input.dispatchKeyEvent", type="keyUp", key=ch)

    def press_enter(self):
        common = dict(key="Enter", code="Enter", windowsVirtualKeyCode=13, nativeVirtualKeyCode=13)
        self.call("Input.dispatchKeyEvent", type="keyDown", text="\r", **common)
        self.call("Input.dispatchKeyEvent", type="keyUp", **common)

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self):
        try:
            if self.proc.poll() is None:
                try:
                    self.session = None
                    self.call("Browser.close", timeout=5)
                except (CDPError, OSError):
                    pass
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            for fd in (self.to_chrome, self.from_chrome):
                try:
                    os.close(fd)
                except OSError:
                    pass
            if self.proc.stderr:
                self.proc.stderr.close()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
