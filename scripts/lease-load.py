#!/usr/bin/env python3
"""Load for scripts/lease-bench.sh: pipelined batches over raw sockets, one thread a connection.

  lease-load.py PORT MODE COUNT [ARG...]

MODE (each batch is DEPTH commands on DEPTH distinct keys of a pool of KEYS):
  check        RL.CHECK key 1000000 100000000                      one command per unit
  pair         RL.ACQUIRE key 100 30s, then RL.RELEASE key id      two commands per unit
  redis-check  EVALSHA ARG1 1 key 1000000 100000000000 1000000 1   one command per unit
  redis-pair   EVALSHA ARG1 1 key 100 30000 id, then ZREM key id   two commands per unit

COUNT units are sent in all; it prints how many were allowed, and exits non-zero if any reply
is an error or a denial (every unit is meant to be granted).
"""
import os
import socket
import sys
import threading

from resp_wire import command

CONNS, DEPTH, KEYS = 4, 64, 10_000


class Replies:
    """Reads RESP replies (integers, bulk strings, nil, arrays, errors) from a socket."""

    def __init__(self, sock):
        self.sock, self.buf, self.pos = sock, b"", 0

    def line(self):
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                line, self.pos = self.buf[self.pos:end], end + 2
                return line
            self.buf, self.pos = self.buf[self.pos:] + self.sock.recv(1 << 16), 0

    def take(self, n):
        while len(self.buf) - self.pos < n + 2:
            self.buf, self.pos = self.buf[self.pos:] + self.sock.recv(1 << 16), 0
        data, self.pos = self.buf[self.pos:self.pos + n], self.pos + n + 2
        return data

    def read(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b":":
            return int(rest)
        if kind in (b"$", b"*"):
            n = int(rest)
            if n < 0:
                return None
            return self.take(n) if kind == b"$" else [self.read() for _ in range(n)]
        if kind == b"_":
            return None
        raise RuntimeError(line.decode(errors="replace"))


def worker(port, mode, units, sha, conn_no, granted):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    replies = Replies(sock)
    done, batch, ok = 0, 0, 0
    while done < units:
        n = min(DEPTH, units - done)
        keys = [b"%s:%d" % (mode.encode(), (conn_no * 7919 + batch * DEPTH + i) % KEYS)
                for i in range(n)]
        if mode == "check":
            sock.sendall(b"".join(command("RL.CHECK", k, 1000000, 100000000) for k in keys))
            ok += sum(replies.read()[0] for _ in keys)
        elif mode == "redis-check":
            sock.sendall(b"".join(
                command("EVALSHA", sha, 1, k, 1000000, 100000000000, 1000000, 1) for k in keys))
            ok += sum(replies.read()[0] for _ in keys)
        else:
            if mode == "pair":
                sock.sendall(b"".join(command("RL.ACQUIRE", k, 100, "30s") for k in keys))
            else:
                ids = [b"%d-%d-%d" % (os.getpid(), conn_no, done + i) for i in range(n)]
                sock.sendall(b"".join(
                    command("EVALSHA", sha, 1, k, 100, 30000, i) for k, i in zip(keys, ids)))
            got = [replies.read() for _ in keys]
            if any(r[0] != 1 for r in got):
                raise RuntimeError("an acquire was denied: %r" % got)
            release = "RL.RELEASE" if mode == "pair" else "ZREM"
            sock.sendall(b"".join(command(release, k, r[4]) for k, r in zip(keys, got)))
            ok += sum(replies.read() for _ in keys)
        done += n
        batch += 1
    sock.close()
    granted[conn_no] = ok


def main():
    port, mode, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    sha = sys.argv[4] if len(sys.argv) > 4 else ""
    granted = [0] * CONNS
    errors = []

    def run(i):
        try:
            worker(port, mode, count // CONNS, sha, i, granted)
        except Exception as e:  # reported below: a failed run must not look measured
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CONNS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit("lease-load: %s" % errors[0])
    total = sum(granted)
    print(total)
    if total != count // CONNS * CONNS:
        sys.exit("lease-load: %d of %d granted" % (total, count))


if __name__ == "__main__":
    main()
