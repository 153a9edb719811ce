"""bench/mpi/simnet.c, the delaying and rate-limiting network of the simulated hosts: two
network namespaces of this test's own with a TUN device each, simnet between them.

    /usr/bin/python3 tests/mpi/simnet.py build/bench/simnet

Checks what holds on a loaded machine too: every ping RTT is at least twice the one-way
delay; a TCP transfer is no faster than the rate; loopback inside a namespace does not go
through simnet; a full destination queue drops packets and counts them; bad arguments and a
missing namespace are refused; SIGTERM ends simnet at once with exit status 0, also while
packets keep arriving; a device removed under it ends it with status 1. Needs root,
`ip` and /dev/net/tun; without them it exits 77 (ctest's skip) saying which is missing.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bench", "mpi"))
import simhosts_check  # noqa: E402  (its ping and TCP ends)

FAILED = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILED.append(what)


def ip(*args):
    subprocess.run(["ip"] + list(args), check=True)


def in_ns(ns, *args, **kw):
    return subprocess.run(["ip", "netns", "exec", ns, sys.executable] + list(args), **kw)


def start(simnet, tmp, hosts, *opts):
    pidfile = os.path.join(tmp, "pid")
    if os.path.exists(pidfile):
        os.unlink(pidfile)
    p = subprocess.Popen([simnet, *opts, "--pidfile", pidfile, *hosts],
                         stderr=subprocess.PIPE, text=True)
    for _ in range(200):
        if os.path.exists(pidfile) or p.poll() is not None:
            break
        time.sleep(0.02)
    check(os.path.exists(pidfile), f"simnet {' '.join(opts)} started")
    return p


def stop(p):
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    try:
        _, err = p.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    check(p.returncode == 0 and time.monotonic() - t0 < 2,
          f"SIGTERM: exit {p.returncode} after {time.monotonic() - t0:.2f} s")
    return err


def main():
    simnet = sys.argv[1]
    missing = [w for w, ok in (("root", os.geteuid() == 0), ("ip", shutil.which("ip")),
                               ("/dev/net/tun", os.path.exists("/dev/net/tun"))) if not ok]
    if missing:
        print(f"skipped: needs {', '.join(missing)}")
        return 77
    # a container can be root without the right to make namespaces (CAP_SYS_ADMIN): ask
    probe = f"emb_sn{os.getpid()}_probe"
    made = subprocess.run(["ip", "netns", "add", probe], stderr=subprocess.PIPE, text=True)
    if made.returncode != 0:
        print(f"skipped: cannot create a network namespace here: {made.stderr.strip()}")
        return 77
    subprocess.run(["ip", "netns", "del", probe], check=True)

    for args, rc in ((["--rate", "fast", "a", "b"], 2), (["--delay", "5m", "a", "b"], 2),
                     (["a"], 2), (["--mtu", "40", "a", "b"], 2),
                     (["emb_no_such_ns_1", "emb_no_such_ns_2"], 1)):
        p = subprocess.run([simnet] + args, stderr=subprocess.PIPE, text=True)
        check(p.returncode == rc and p.stderr.startswith(("simnet:", "usage:")),
              f"simnet {' '.join(args)}: exit {p.returncode}, {p.stderr.strip()!r}")

    hosts = [f"emb_sn{os.getpid()}_{k}" for k in (1, 2)]
    tmp = tempfile.mkdtemp()
    made = []
    try:
        for k, ns in enumerate(hosts, 1):
            ip("netns", "add", ns)
            made.append(ns)
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "tuntap", "add", "dev", "emb_tun", "mode", "tun")
            ip("-n", ns, "addr", "add", f"10.77.0.{k}/24", "dev", "emb_tun")
            ip("-n", ns, "link", "set", "emb_tun", "up")

        # delay and rate: 20 ms one way, 20 Mbit/s
        p = start(simnet, tmp, hosts, "--rate", "20mbit", "--delay", "20ms")
        out = in_ns(hosts[0], simhosts_check.__file__, "--ping", "10.77.0.2", "--pings", "5",
                    check=True, stdout=subprocess.PIPE, text=True).stdout.split()
        rtts = [float(x) for x in out]
        check(len(rtts) == 5 and min(rtts) >= 0.040,
              f"ping RTTs {[round(r * 1e3, 2) for r in rtts]} ms are all >= 40 ms")
        check(bool(rtts) and min(rtts) < 0.040 + 0.2, "and the smallest is within 200 ms of it")
        srv = subprocess.Popen(["ip", "netns", "exec", hosts[1], sys.executable,
                                simhosts_check.__file__, "--serve", "5202"],
                               stdout=subprocess.PIPE, text=True)
        check(srv.stdout.readline().strip() == "ready", "TCP receiver ready")
        in_ns(hosts[0], simhosts_check.__file__, "--send", "10.77.0.2", "5202", "2", check=True)
        n, secs = srv.stdout.readline().split()
        srv.wait()
        rate = int(n) * 8 / float(secs) if float(secs) > 0 else 0.0
        check(0.3 * 20e6 <= rate <= 1.02 * 20e6,
              f"TCP payload {rate / 1e6:.2f} Mbit/s over {float(secs):.2f} s: at most 20.4, "
              f"at least 6")
        t0 = time.perf_counter()
        lo = in_ns(hosts[0], "-c", "import socket; s = socket.socket(); "
                   "s.bind(('127.0.0.1', 0)); s.listen(); c = socket.create_connection("
                   "s.getsockname()); print('ok')", stdout=subprocess.PIPE, text=True)
        check(lo.stdout.strip() == "ok",
              f"loopback inside a host works ({time.perf_counter() - t0:.2f} s)")
        err = stop(p)
        m = re.search(r"host 1 \(\S+\): sent (\d+) packets", err)
        check(bool(m) and int(m.group(1)) > 100, f"host 1's packets counted: {err.splitlines()[:1]}")

        # a full queue drops: 1 Mbit/s, 5 packets, a burst of 300 datagrams
        p = start(simnet, tmp, hosts, "--rate", "1mbit", "--limit", "5", "--jitter", "1ms",
                  "--seed", "3")
        in_ns(hosts[0], "-c", "import socket\ns = socket.socket(socket.AF_INET, "
              "socket.SOCK_DGRAM)\nfor i in range(300): s.sendto(bytes(1000), "
              "('10.77.0.2', 9))", check=True)
        err = stop(p)
        m = re.search(r"host 2 \(\S+\): sent \d+ packets \(\d+ bytes\); delivered to it (\d+) "
                      r"\(\d+ bytes\); dropped at its full queue (\d+)", err)
        check(bool(m) and int(m.group(2)) > 0 and int(m.group(1)) < 300,
              f"drops at the full queue: {m.group(0) if m else err!r}")

        # SIGTERM while packets keep coming (every poll finds a packet), then a device removed
        p = start(simnet, tmp, hosts)
        flood = subprocess.Popen(["ip", "netns", "exec", hosts[0], sys.executable, "-c",
                                  "import socket, time\ns = socket.socket(socket.AF_INET, "
                                  "socket.SOCK_DGRAM)\nend = time.time() + 8\n"
                                  "while time.time() < end: s.sendto(bytes(100), "
                                  "('10.77.0.2', 9))"])
        time.sleep(1)
        stop(p)
        flood.kill()
        flood.wait()
        p = start(simnet, tmp, hosts)
        ip("-n", hosts[1], "link", "del", "emb_tun")
        try:
            _, err = p.communicate(timeout=3)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        check(p.returncode == 1 and "failed; stopping" in err,
              f"a removed device stops simnet: exit {p.returncode}, {err.strip()!r}")
    finally:
        for ns in made:
            subprocess.run(["ip", "-n", ns, "link", "del", "emb_tun"], stderr=subprocess.DEVNULL)
            subprocess.run(["ip", "netns", "del", ns])
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(FAILED)} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
