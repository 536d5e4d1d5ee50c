#!/usr/bin/env python3
"""Load and report for scripts/regions-demo.sh: one GLOBAL rule hit in several regions.

  regions-load.py SPLITFILE SECONDS LIMIT PERIOD_S INTERVAL_S NAME:PORT [NAME:PORT ...]

Every 100 ms it sends each region its part of the traffic as pipelined `RL.HIT api u` (one
connection per region, standard library only). SPLITFILE holds one number per region, the
requests per second each gets; it is read again every tick, so the split can be changed while
it runs (`echo "200 800" > SPLITFILE`). Every second it prints: the time, the split, each
region's enforced share (INFO regions), what each allowed that second, the total allowed, the
exact global limit over the same time (a token bucket of capacity LIMIT refilled at LIMIT per
PERIOD, starting full), the overshoot (total − exact) and the bound it is held to (one
rebalance interval's worth of the limit per region). It exits non-zero if the overshoot ever
passes the bound.
"""
import socket
import sys
import time

from resp_wire import command


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind in (b"*", b"%", b"~"):
            n = int(rest) * (2 if kind == b"%" else 1)
            return [self.reply() for _ in range(max(n, 0))]
        if kind in (b"$", b"="):
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(65536)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b":":
            return int(rest)
        if kind == b"-":
            return RuntimeError(rest.decode())
        return rest

    def hits(self, n):
        if n <= 0:
            return 0
        self.sock.sendall(command("RL.HIT", "api", "u") * n)
        return sum(r[0] for r in (self.reply() for _ in range(n)) if isinstance(r, list))

    def share(self):
        self.sock.sendall(command("INFO", "regions"))
        text = self.reply().decode()
        for line in text.splitlines():
            if line.startswith("global_rule_api:"):
                return float(line.split("share=")[1].split(",")[0])
        return float("nan")


def main():
    split_file, seconds, limit, period, interval = sys.argv[1:6]
    seconds, limit, period, interval = int(seconds), float(limit), float(period), float(interval)
    regions = [(a.split(":")[0], Conn(int(a.split(":")[1]))) for a in sys.argv[6:]]
    info = {name: Conn(c.sock.getpeername()[1]) for name, c in regions}
    bound = len(regions) * limit * interval / period
    names = " ".join(f"{n:>10}" for n, _ in regions)
    print(f"{'t':>4} {'split':>9} | share {names} | allowed {names} | {'total':>6} {'exact':>6} {'over':>5} {'bound':>5}")
    total, worst = 0, float("-inf")
    start = time.monotonic()
    carry = [0.0] * len(regions)
    for second in range(1, seconds + 1):
        allowed = [0] * len(regions)
        for tick in range(10):
            try:
                rates = [float(x) for x in open(split_file).read().split()]
            except (OSError, ValueError):
                rates = [0.0] * len(regions)
            for i, (_, c) in enumerate(regions):
                carry[i] += (rates[i] if i < len(rates) else 0.0) / 10
                n = int(carry[i])
                carry[i] -= n
                allowed[i] += c.hits(n)
            wake = start + (second - 1) + (tick + 1) / 10
            time.sleep(max(0.0, wake - time.monotonic()))
        total += sum(allowed)
        exact = limit + limit * (time.monotonic() - start) / period
        over = total - exact
        worst = max(worst, over)
        shares = " ".join(f"{info[n].share():>10.3f}" for n, _ in regions)
        counts = " ".join(f"{a:>10}" for a in allowed)
        split = "/".join(str(int(r)) for r in rates)
        print(f"{second:>4} {split:>9} | share {shares} | allowed {counts} | {total:>6} {exact:>6.0f} {over:>5.0f} {bound:>5.0f}", flush=True)
    print(f"worst overshoot {worst:.0f} against a bound of {bound:.0f} (negative: under the exact global limit)")
    sys.exit(0 if worst <= bound else 1)


if __name__ == "__main__":
    main()
