"""Measures the network of bench/mpi/simhosts.sh: the round-trip time of ICMP echoes (ping,
from a raw socket) and the rate of a TCP transfer, between host 1 and each other host, and
compares them with the delay and rate simnet was given (docs/DISTRIBUTED.md, "Simulated
hosts"). Needs root and hosts that are up:

    bench/mpi/simhosts.sh up 2 100mbit 1ms
    /usr/bin/python3 bench/mpi/simhosts_check.py [--pings 20] [--seconds 3] [--hosts 2]

Expected: the smallest RTT = 2 x delay plus the time simnet, the kernel and the pinger take
(a few hundred microseconds here; the check allows 0.5 ms + 20%); a 64-byte echo also crosses
both links at the rate (2 x 2 x 84 bytes / rate: 27 us at 100 Mbit/s). The median and largest
RTT are printed, not checked: on a loaded machine they add the time simnet and the pinger wait
for a CPU (both run at niceness -10 to wait less). The TCP goodput
is the rate times the payload share of a full packet (MTU - 52 of every MTU bytes: IPv4 and
TCP headers with timestamps), which the check wants within 15% (less if the machine is loaded:
then the check says so and fails). Exit status 1 if a figure is off.

With --serve PORT or --send HOST PORT SECONDS it is one end of the transfer (run inside a
namespace by the check itself).
"""
import argparse
import os
import socket
import struct
import subprocess
import sys
import time

STATE = os.path.join(os.environ.get("TMPDIR", "/tmp"), "emb-simhosts")


def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def ping(host, count, interval=0.1, timeout=2.0):
    """RTTs in seconds of `count` ICMP echoes (56 bytes of data) to host; lost ones omitted."""
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.settimeout(timeout)
    ident = os.getpid() & 0xFFFF
    rtts = []
    for seq in range(count):
        data = bytes(56)
        head = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
        pkt = struct.pack("!BBHHH", 8, 0, checksum(head + data), ident, seq) + data
        t0 = time.perf_counter()
        s.sendto(pkt, (host, 0))
        while True:
            try:
                reply, _ = s.recvfrom(2048)
            except socket.timeout:
                break
            ihl = (reply[0] & 15) * 4
            typ, _, _, rid, rseq = struct.unpack("!BBHHH", reply[ihl:ihl + 8])
            if typ == 0 and rid == ident and rseq == seq:
                rtts.append(time.perf_counter() - t0)
                break
        time.sleep(interval)
    return rtts


def serve(port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(1)
    print("ready", flush=True)
    c, _ = ls.accept()
    n, t0, t1 = 0, None, None
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        if t0 is None:
            t0 = time.perf_counter()
        n += len(b)
        t1 = time.perf_counter()
    # bytes after the first read, over the time from the first to the last read
    print(f"{n} {t1 - t0 if t0 is not None else 0}", flush=True)


def send(host, port, seconds):
    c = socket.create_connection((host, port))
    buf = bytes(1 << 16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        c.sendall(buf)
    c.close()


def netns_cmd(ns, *args):
    return ["ip", "netns", "exec", ns, sys.executable, os.path.abspath(__file__)] + list(args)


def tcp_rate(src, dst, host, seconds, port=5201):
    srv = subprocess.Popen(netns_cmd(dst, "--serve", str(port)), stdout=subprocess.PIPE, text=True)
    assert srv.stdout.readline().strip() == "ready"
    subprocess.run(netns_cmd(src, "--send", host, str(port), str(seconds)), check=True)
    n, secs = srv.stdout.readline().split()
    srv.wait()
    return int(n) / float(secs) if float(secs) > 0 else 0.0


def parse_rate(s):
    if s == "none":
        return 0.0
    for suf, m in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)):
        if s.endswith(suf):
            return float(s[:-len(suf)]) * m
    return float(s)


def parse_delay(s):
    for suf, m in (("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9), ("s", 1.0)):
        if s.endswith(suf):
            return float(s[:-len(suf)]) * m
    return float(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pings", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--hosts", type=int, help="check host 1 against hosts 2..N (default all)")
    ap.add_argument("--serve", type=int)
    ap.add_argument("--send", nargs=3)
    ap.add_argument("--ping", help="(inside a namespace) ping this address")
    args = ap.parse_args()
    if args.serve:
        return serve(args.serve)
    if args.send:
        return send(args.send[0], int(args.send[1]), float(args.send[2]))
    if args.ping:
        os.nice(-10)  # as simnet: a pinger waiting for a CPU measures the machine's load
        print(" ".join(f"{r:.9f}" for r in ping(args.ping, args.pings)))
        return 0
    with open(os.path.join(STATE, "net")) as f:
        words = f.read().split()  # rate R delay D jitter J
    rate, delay = parse_rate(words[1]), parse_delay(words[3])
    with open(os.path.join(STATE, "netns")) as f:
        hosts = f.read().split()
    mtu = int(os.environ.get("SIMHOSTS_MTU", "9000"))
    n = args.hosts or len(hosts)
    print(f"# simnet: {' '.join(words)}; MTU {mtu}; load average {os.getloadavg()[0]:.1f}")
    bad = 0
    for k in range(2, n + 1):
        addr = f"10.77.0.{k}"
        out = subprocess.run(netns_cmd(hosts[0], "--ping", addr, "--pings", str(args.pings)),
                             check=True, stdout=subprocess.PIPE, text=True).stdout.split()
        rtts = sorted(float(x) for x in out)
        want = 2 * delay + (4 * 84 * 8 / rate if rate else 0)
        if not rtts:
            print(f"host 1 -> {k}: no echo came back")
            bad += 1
            continue
        med = rtts[len(rtts) // 2]
        ok = want <= rtts[0] * 1.0001 + 2e-6 and rtts[0] <= want * 1.2 + 0.5e-3
        bad += not ok
        print(f"host 1 -> {k}: ping RTT min {rtts[0] * 1e3:.3f} ms, median {med * 1e3:.3f} ms, "
              f"max {rtts[-1] * 1e3:.3f} ms over {len(rtts)}/{args.pings}; expected "
              f"{want * 1e3:.3f} ms: {'ok' if ok else 'OFF'}")
        got = tcp_rate(hosts[0], hosts[k - 1], addr, args.seconds)
        if rate:
            want_tcp = rate / 8 * (mtu - 52) / mtu
            ok = abs(got / want_tcp - 1) <= 0.15
            bad += not ok
            print(f"host 1 -> {k}: TCP {got * 8 / 1e6:.1f} Mbit/s of payload over "
                  f"{args.seconds:g} s; expected {want_tcp * 8 / 1e6:.1f}: "
                  f"{'ok' if ok else 'OFF'} ({got / want_tcp:.1%})")
        else:
            print(f"host 1 -> {k}: TCP {got * 8 / 1e6:.1f} Mbit/s of payload (no rate limit)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
