#!/usr/bin/env python3
"""The fault-injection soak (run by scripts/soak.sh; see its opening comment).

Clients check keys with known limits, over every algorithm, in three cells with keys of their
own: a replicated pair under the real redis-sentinel, directly (a Sentinel-aware client) and
through two sidecars (`sluice proxy`, fail mode `local` and `closed`); a cluster of three
primaries with one replica each and its table in etcd (a client following MOVED); two regions
sharing GLOBAL rules through the same etcd. One nemesis injects faults picked from a seed among
every enabled kind of every cell. Every client records each check: when it was sent, when it
was answered, the key, allowed or not. A checker then holds what was allowed against what one
exact limiter allows (a GLOBAL rule's bucket: both regions together against the global limit),
plus the bound the docs state for the faults of that span, and prints a table: fault kind,
faults injected, path or cell, the keys over the exact limiter, the worst overshoot seen, the
bound, pass or fail.

Standard library only. Every process it starts is stopped by its PID on exit.
"""

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

# The least replication lag a failover is charged for: the probe samples every 100 ms and
# cannot reach a primary cut off by a partition, whose last writes the cut may have held back.
LAG_FLOOR = 0.25
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
MASTER = "mymaster"
# Clocks within 100 ms count as agreeing for a bucket (docs/failure-matrix.md): a failover to a
# node whose clock differs can refill a bucket by at most 100 ms.
SKEW_REFILL = 0.1
# The paths clients take, by cell: the replicated pair (Sentinel-aware, and the two sidecars),
# the cluster (a slot-map client following MOVED) and the two regions (GLOBAL rules).
PATHS = {"pair": ("direct", "local", "closed"), "cluster": ("cluster",), "regions": ("regions",)}
CELL_OF = {path: cell for cell, paths in PATHS.items() for path in paths}
REGIONS = ("mumbai", "hyderabad")
REBALANCE_INTERVAL = 1.0  # --rebalance-interval of the regions, in seconds
ETCD_CLUSTER_PREFIX = "/soak/cluster/"
ETCD_RULES_PREFIX = "/soak/rules/"


def region_bound(limit, period_s, regions=len(REGIONS), interval_s=REBALANCE_INTERVAL):
    """What rebalancing may cost a GLOBAL rule over any span (docs/regions.md, "What overshoot
    remains"): one rebalance interval's worth of the limit per region, `regions x limit x
    interval / period`. The one place to change when the doc's bound changes."""
    return regions * limit * interval_s / period_s


# CRC16 (XMODEM) for Redis Cluster's key slots.
CRC16 = []
for _i in range(256):
    _c = _i << 8
    for _ in range(8):
        _c = ((_c << 1) ^ 0x1021) if _c & 0x8000 else (_c << 1)
    CRC16.append(_c & 0xFFFF)


def key_slot(key):
    """The key's slot: CRC16 of the key, or of its first non-empty {hash tag}, mod 16384."""
    k = key.encode()
    a = k.find(b"{")
    if a >= 0:
        b = k.find(b"}", a + 1)
        if b > a + 1:
            k = k[a + 1:b]
    crc = 0
    for x in k:
        crc = ((crc << 8) & 0xFFFF) ^ CRC16[(crc >> 8) ^ x]
    return crc & 16383


def log(*args):
    print("[soak]", *args, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# RESP: a minimal client (RESP2).


class RespError(Exception):
    pass


class Conn:
    def __init__(self, port, timeout=1.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.port = port

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _line(self):
        while b"\r\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n + 2:]
        return out

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ConnectionError("bad reply %r" % line)

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        r = self._reply()
        if isinstance(r, RespError):
            raise r
        return r


def call(port, *args, timeout=1.0):
    c = Conn(port, timeout)
    try:
        return c.call(*args)
    finally:
        c.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, cond, deadline_s):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if cond():
                return
        except (OSError, RespError, ConnectionError):
            pass
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


# ---------------------------------------------------------------------------------------------
# Processes: each one recorded and stopped by its PID.


class Procs:
    def __init__(self, work):
        self.work = work
        self.live = {}

    def start(self, name, argv, env=None):
        out = open(os.path.join(self.work, name + ".log"), "ab")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                             stdin=subprocess.DEVNULL)
        out.close()
        self.live[p.pid] = p
        return p

    def kill(self, p, sig=signal.SIGKILL):
        try:
            os.kill(p.pid, signal.SIGCONT)
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        self.live.pop(p.pid, None)

    def stop_all(self):
        for p in list(self.live.values()):
            self.kill(p, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------
# The topology: a primary, two replicas, three sentinels, two sidecars.


class Node:
    """A sluice node under libfaketime (its wall clock moved by a file, monotonic untouched)."""

    def __init__(self, soak, name):
        self.soak, self.name = soak, name
        self.port = free_port()
        self.dir = os.path.join(soak.work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.clock = os.path.join(self.dir, "clock")
        self.set_clock(0.0)
        self.proc = None

    def set_clock(self, offset_s):
        self.offset = offset_s
        with open(self.clock, "w") as f:
            f.write("%+.3f\n" % offset_s)

    def start(self, replicaof=None, sentinels=None):
        """Starts the node; `replicaof` a port, or `sentinels` to ask who the primary is (the
        node's own `--sentinel`, as the shipped systemd unit's config has it)."""
        argv = [self.soak.sluice, "--port", str(self.port), "--bind", "127.0.0.1",
                "--threads", "1", "--dir", self.dir, "--save-interval", "1",
                "--min-replicas-to-write", "1", "--min-replicas-max-lag", "2"]
        if replicaof:
            argv += ["--replicaof", "127.0.0.1:%d" % replicaof]
        if sentinels:
            argv += ["--sentinel", ",".join("127.0.0.1:%d" % p for p in sentinels),
                     "--master-name", MASTER]
        env = dict(os.environ)
        if self.soak.faketime:
            env.update(LD_PRELOAD=LIBFAKETIME, FAKETIME_TIMESTAMP_FILE=self.clock,
                       FAKETIME_NO_CACHE="1", DONT_FAKE_MONOTONIC="1")
        self.proc = self.soak.procs.start(self.name, argv, env)
        wait_for(self.name + " to answer PING", lambda: call(self.port, "PING") == "PONG", 90)
        # From now on the node runs on this clock (the wall clock is read once, at start).
        self.soak.clock_log.append((time.time(), self.port, self.offset))

    def kill(self, sig=signal.SIGKILL):
        self.soak.procs.kill(self.proc, sig)
        self.proc = None


class Soak:
    def __init__(self, args):
        self.args = args
        self.sluice = args.sluice
        self.rng = random.Random(args.seed)
        self.work = args.work or tempfile.mkdtemp(prefix="sluice-soak.")
        self.procs = Procs(self.work)
        self.faketime = os.path.exists(LIBFAKETIME)
        # Inside a network namespace of its own (soak.sh runs it under `unshare -n`), where
        # iptables rules touch nothing else.
        self.netns = os.environ.get("SOAK_NETNS") == "1"
        self.events = []  # (t, kind, detail)
        self.faults = []  # dicts: kind, t0, t1, charges ("lost" | "local" | "skew")
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.records = []  # per client thread: list of (send, recv, key index, allowed)
        self.errors = {}
        self.lags = []  # (t, WAIT round trip in s; 1.0 when it timed out)
        self.skewed = False
        self.clock_log = []  # (t, port, wall clock offset the node runs on from t)

    def event(self, kind, detail=""):
        t = time.time()
        with self.lock:
            self.events.append((t, kind, detail))
        log("%.3f %s %s" % (t - self.t0, kind, detail))
        return t

    # -- topology ---------------------------------------------------------------------------

    def start(self):
        self.t0 = time.time()
        if "pair" in self.args.cells:
            self.start_pair()
        if "cluster" in self.args.cells or "regions" in self.args.cells:
            self.start_etcd()
        if "cluster" in self.args.cells:
            self.start_cluster()
        if "regions" in self.args.cells:
            self.start_regions()
        log("work dir", self.work)

    def start_pair(self):
        self.nodes = [Node(self, "node-%d" % i) for i in range(3)]
        self.nodes[0].start()
        for n in self.nodes[1:]:
            n.start(replicaof=self.nodes[0].port)
        for n in self.nodes[1:]:
            wait_for(n.name + " to link", lambda n=n: "master_link_status:up"
                     in call(n.port, "INFO", "replication"), 20)
        self.sentinels = []
        for i in range(3):
            port = free_port()
            d = os.path.join(self.work, "sentinel-%d" % i)
            os.makedirs(d, exist_ok=True)
            conf = os.path.join(d, "sentinel.conf")
            with open(conf, "w") as f:
                f.write("port %d\nbind 127.0.0.1\ndaemonize no\nprotected-mode no\ndir %s\n"
                        "sentinel monitor %s 127.0.0.1 %d 2\n"
                        "sentinel down-after-milliseconds %s 2000\n"
                        "sentinel failover-timeout %s 4000\n"
                        "sentinel parallel-syncs %s 2\n"
                        % (port, d, MASTER, self.nodes[0].port, MASTER, MASTER, MASTER))
            self.procs.start("sentinel-%d" % i, ["redis-sentinel", conf])
            self.sentinels.append(port)
        for s in self.sentinels:
            wait_for("sentinel :%d to know the topology" % s, lambda s=s: len(
                call(s, "SENTINEL", "REPLICAS", MASTER)) == 2 and len(
                call(s, "SENTINEL", "SENTINELS", MASTER)) == 2, 40)
        self.sidecars = {}
        for mode in ("local", "closed"):
            port = free_port()
            argv = [self.sluice, "proxy", "--port", str(port), "--fail-mode", mode,
                    "--sentinel", ",".join("127.0.0.1:%d" % s for s in self.sentinels),
                    "--master-name", MASTER, "--gateways", "1"]
            self.procs.start("sidecar-" + mode, argv)
            wait_for("sidecar " + mode, lambda port=port: call(port, "PING") == "PONG", 20)
            self.sidecars[mode] = port
        log("nodes", [n.port for n in self.nodes], "sentinels", self.sentinels,
            "sidecars", self.sidecars)

    def primary_port(self):
        """The primary a majority of the Sentinels name (None while they disagree)."""
        votes = {}
        for s in self.sentinels:
            try:
                addr = call(s, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER, timeout=0.5)
                if addr:
                    votes[int(addr[1])] = votes.get(int(addr[1]), 0) + 1
            except (OSError, RespError, ConnectionError):
                continue
        return next((p for p, n in votes.items() if n * 2 > len(self.sentinels)), None)

    def role(self, node):
        try:
            return call(node.port, "ROLE", timeout=0.5)[0] if node.proc else None
        except (OSError, RespError, ConnectionError):
            return None

    def primary(self):
        """The node a majority of the Sentinels name, if it says it is a primary."""
        port = self.primary_port()
        node = next((n for n in self.nodes if n.port == port), None)
        try:
            return node if node and call(node.port, "ROLE")[0] == "master" else None
        except (OSError, RespError, ConnectionError):
            return None

    # -- the etcd the cluster and the regions share ------------------------------------------

    def start_etcd(self):
        """One etcd (the Debian etcd-server's) on free ports, its data under the work dir; the
        cluster keeps its table under one prefix, the regions their shares and rules under
        others. Restarted by the `etcd` fault on the same data dir and ports."""
        self.etcd_port, peer = free_port(), free_port()
        client = "http://127.0.0.1:%d" % self.etcd_port
        peer_url = "http://127.0.0.1:%d" % peer
        self.etcd_url = client
        self.etcd_argv = ["etcd", "--name", "soak", "--data-dir", os.path.join(self.work, "etcd"),
                          "--listen-client-urls", client, "--advertise-client-urls", client,
                          "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls",
                          peer_url, "--initial-cluster", "soak=" + peer_url]
        self.etcd = self.procs.start("etcd", self.etcd_argv)
        wait_for("etcd to be healthy", self.etcd_healthy, 30)
        log("etcd", client)

    def etcd_healthy(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % self.etcd_port,
                                    timeout=1) as r:
            return b"true" in r.read()

    def etcdctl(self, *args):
        env = dict(os.environ, ETCDCTL_API="3")
        r = subprocess.run(["etcdctl", "--endpoints", self.etcd_url] + list(args), env=env,
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError("etcdctl %s: %s" % (" ".join(args), r.stderr.strip()))
        return r.stdout

    # -- the cluster: three primaries with one replica each, and a spare ---------------------

    def start_cluster(self):
        """Seven cluster nodes (`--cluster yes --etcd`); `sluice cluster create` of six with
        `--replicas 1` (three primaries, one replica each); the seventh, a spare, is added and
        removed by the slot-move fault."""
        self.cnodes = []
        for i in range(7):
            port = free_port()
            d = os.path.join(self.work, "cluster-%d" % i)
            os.makedirs(d, exist_ok=True)
            argv = [self.sluice, "--port", str(port), "--bind", "127.0.0.1", "--threads", "1",
                    "--cluster", "yes", "--cluster-config-file", os.path.join(d, "nodes.conf"),
                    "--etcd", self.etcd_url, "--etcd-prefix", ETCD_CLUSTER_PREFIX]
            self.procs.start("cluster-%d" % i, argv)
            self.cnodes.append(port)
        for port in self.cnodes:
            wait_for("cluster node :%d" % port, lambda port=port: call(port, "PING") == "PONG",
                     20)
        self.admin("create", *["127.0.0.1:%d" % p for p in self.cnodes[:6]],
                   "--replicas", "1")
        self.spare_in = False
        wait_for("the cluster to cover every slot", lambda: all(
            call(p, "CLUSTER", "INFO").find("cluster_state:ok") >= 0
            for p in self.cnodes[:6]), 30)
        log("cluster", self.cnodes[:6], "spare", self.cnodes[6])

    def admin(self, *args):
        """`sluice cluster ARGS --etcd ...`; its output, or RuntimeError when it fails."""
        argv = [self.sluice, "cluster"] + list(args) + ["--etcd", self.etcd_url,
                                                       "--etcd-prefix", ETCD_CLUSTER_PREFIX]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=180,
                           stdin=subprocess.DEVNULL)
        with open(os.path.join(self.work, "admin.log"), "a") as f:
            f.write("$ %s\n%s%s(exit %d)\n" % (" ".join(argv), r.stdout, r.stderr,
                                                 r.returncode))
        if r.returncode != 0:
            raise RuntimeError("sluice cluster %s failed: %s" % (
                args[0], (r.stdout + r.stderr).strip().splitlines()[-1:]))
        return r.stdout

    def slot_map(self):
        """owner[slot] = the port of its primary, from the first node that answers CLUSTER
        SLOTS."""
        ports = list(self.cnodes)
        random.shuffle(ports)
        for p in ports:
            try:
                owner = [None] * 16384
                for r in call(p, "CLUSTER", "SLOTS", timeout=0.5):
                    for s in range(r[0], r[1] + 1):
                        owner[s] = int(r[2][1])
                if None not in owner:
                    return owner
            except (OSError, RespError, ConnectionError, TypeError, IndexError):
                continue
        return None

    # -- the regions: two single-node regions sharing GLOBAL rules through etcd --------------

    def start_regions(self):
        """Two regions, one node each (`--region NAME --regions-etcd --rebalance-interval 1s`,
        rules from etcd); the GLOBAL rules written through one of them (RL.RULE SET)."""
        self.rnodes = {}
        self.rprocs = {}
        self.split = {r: 1.0 / len(REGIONS) for r in REGIONS}
        for name in REGIONS:
            port = free_port()
            argv = [self.sluice, "--port", str(port), "--bind", "127.0.0.1", "--threads", "1",
                    "--region", name, "--regions-etcd", self.etcd_url,
                    "--rebalance-interval", "%gs" % REBALANCE_INTERVAL,
                    "--rules-etcd", self.etcd_url, "--rules-prefix", ETCD_RULES_PREFIX]
            self.rprocs[name] = self.procs.start("region-" + name, argv)
            self.rnodes[name] = port
        for name, port in self.rnodes.items():
            wait_for("region " + name, lambda port=port: call(port, "PING") == "PONG", 20)
        first = self.rnodes[REGIONS[0]]
        for rule, limit, period, algo in self.region_rules():
            call(first, "RL.RULE", "SET", rule, "LIMIT", limit, "WINDOW", "%ds" % period,
                 "ALGO", algo, "GLOBAL", timeout=10)
        for name, port in self.rnodes.items():
            for rule, *_ in self.region_rules():
                wait_for("rule %s in %s" % (rule, name), lambda port=port, rule=rule: call(
                    port, "RL.RULE", "GET", rule) is not None, 20)

        def learned():
            for port in self.rnodes.values():
                info = call(port, "INFO", "regions")
                for rule, *_ in self.region_rules():
                    line = [x for x in info.splitlines()
                            if x.startswith("global_rule_%s:share=" % rule)]
                    if not line or float(line[0].split("share=")[1].split(",")[0]) <= 0:
                        return False
            return True
        wait_for("both regions to hold a share of every rule", learned, 40)
        log("regions", self.rnodes)

    def region_rules(self):
        """(rule, limit, period_s, algo): GLOBAL rules of the token family, the one whose
        rebalancing bound docs/regions.md states."""
        return [("g-%s-%d" % (algo.lower(), i), limit, period, algo)
                for algo in ("TOKEN", "GCRA")
                for i, (limit, period) in enumerate(((20, 2), (50, 10)))]

    # -- clients ----------------------------------------------------------------------------

    def keys(self):
        """(path, name, limit, period_s, algo) for every key the clients check."""
        out = []
        paths = [p for c in ("pair", "cluster") if c in self.args.cells for p in PATHS[c]]
        for path in paths:
            for algo in ("TOKEN", "GCRA", "FIXED", "SLIDING", "LOG"):
                for i in range(self.args.keys):
                    limit, period = (20, 2) if i % 2 == 0 else (50, 10)
                    out.append((path, "%s:%s:%d" % (path, algo.lower(), i), limit, period,
                                algo))
        if "regions" in self.args.cells:
            # A GLOBAL rule's bucket `rule:subject`, checked in both regions: held against the
            # rule's global limit.
            for rule, limit, period, algo in self.region_rules():
                for i in range(max(1, self.args.keys // 2)):
                    out.append(("regions", "%s:s%d" % (rule, i), limit, period, algo))
        return out

    def ticks(self, rate=None):
        """Yields at `rate()` a second (default `--rate`) until the soak stops; a client that
        fell more than a second behind starts over from now instead of bursting."""
        rate = rate or (lambda: self.args.rate)
        next_at = time.time()
        while not self.stop.is_set():
            next_at += 1.0 / rate()
            pause = next_at - time.time()
            if pause > 0:
                time.sleep(pause)
            elif pause < -1.0:
                next_at = time.time()
            yield

    def client(self, path, keys, out):
        rng = random.Random(self.rng.random())
        conn = None
        errors = 0
        for _ in self.ticks():
            if conn is None:
                port = self.sidecars[path] if path != "direct" else self.primary_port()
                if port is None:
                    time.sleep(0.05)
                    continue
                try:
                    conn = Conn(port, timeout=0.5)
                    if path == "direct" and call(port, "ROLE", timeout=0.5)[0] != "master":
                        conn.close()
                        conn = None
                        time.sleep(0.05)
                        continue
                except (OSError, RespError, ConnectionError):
                    conn = None
                    time.sleep(0.05)
                    continue
            k = rng.randrange(len(keys))
            _, name, limit, period, algo = keys[k][1]
            send = time.time()
            try:
                r = conn.call("RL.CHECK", name, limit, "%ds" % period, "ALGO", algo)
                out.append((send, time.time(), keys[k][0], r[0], conn.port))
            except RespError:
                # NOREPLICAS, READONLY, LOADING: nothing was allowed; ask again.
                errors += 1
                conn.close()
                conn = None
            except (OSError, ConnectionError):
                errors += 1
                conn.close()
                conn = None
        with self.lock:
            self.errors[path] = self.errors.get(path, 0) + errors

    def client_cluster(self, keys, out):
        """A cluster-aware client: a slot map from CLUSTER SLOTS, one connection per node; it
        follows MOVED (and ASK, with ASKING), waits and retries on TRYAGAIN and CLUSTERDOWN.
        Only the attempt that was answered is recorded (a redirect allowed nothing)."""
        rng = random.Random(self.rng.random())
        conns = {}
        owner = None
        errors = 0
        for _ in self.ticks():
            if owner is None:
                owner = self.slot_map()
                if owner is None:
                    time.sleep(0.1)
                    continue
            k = rng.randrange(len(keys))
            _, name, limit, period, algo = keys[k][1]
            port, ask = owner[key_slot(name)], False
            for _ in range(10):
                try:
                    conn = conns.get(port)
                    if conn is None:
                        conn = conns[port] = Conn(port, timeout=1.0)
                    if ask:
                        conn.call("ASKING")
                    send = time.time()
                    r = conn.call("RL.CHECK", name, limit, "%ds" % period, "ALGO", algo)
                    out.append((send, time.time(), keys[k][0], r[0], port))
                    break
                except RespError as e:
                    words = str(e).split()
                    if words[0] in ("MOVED", "ASK"):
                        port, ask = int(words[2].rsplit(":", 1)[1]), words[0] == "ASK"
                        if not ask:
                            owner[int(words[1])] = port
                        continue
                    errors += 1
                    if words[0] == "CLUSTERDOWN":
                        owner = None
                        break
                    time.sleep(0.01)  # TRYAGAIN: a moving slot's writes pause for a moment
                except (OSError, ConnectionError):
                    errors += 1
                    c = conns.pop(port, None)
                    if c:
                        c.close()
                    owner = None
                    break
        for c in conns.values():
            c.close()
        with self.lock:
            self.errors["cluster"] = self.errors.get("cluster", 0) + errors

    def client_region(self, region, keys, out):
        """A client of one region: `RL.HIT rule subject` at the region's part of the traffic
        (self.split, which the `shares` fault moves). A long timeout: a check sent to a paused
        node is answered, and recorded, when it resumes."""
        rng = random.Random(self.rng.random())
        conn = None
        errors = 0
        for _ in self.ticks(lambda: max(1.0, self.args.rate * self.split[region])):
            port = self.rnodes[region]
            try:
                if conn is None:
                    conn = Conn(port, timeout=15.0)
                k = rng.randrange(len(keys))
                rule, subject = keys[k][1][1].split(":", 1)
                send = time.time()
                r = conn.call("RL.HIT", rule, subject)
                out.append((send, time.time(), keys[k][0], r[0], port))
            except (OSError, RespError, ConnectionError):
                errors += 1
                if conn:
                    conn.close()
                conn = None
                time.sleep(0.05)
        if conn:
            conn.close()
        with self.lock:
            self.errors["regions"] = self.errors.get("regions", 0) + errors

    def lag_probe(self):
        """The replication lag under load: WAIT 1 round trips on the primary, every 100 ms (the
        replica Sentinel promotes is the one furthest along)."""
        while not self.stop.wait(0.1):
            port = self.primary_port()
            if port is None:
                continue
            try:
                t = time.time()
                acked = call(port, "WAIT", 1, 1000, timeout=1.5)
                self.lags.append((t, time.time() - t if acked >= 1 else 1.0))
            except (OSError, RespError, ConnectionError):
                pass

    def fault_near(self, t):
        """The injected fault a failover at t followed (within 10 s), or None."""
        near = [f for f in self.faults if f["kind"] in ("kill", "stop", "partition")
                and f["t0"] <= t <= f["t1"] + 10]
        return near[-1]["kind"] if near else None

    def lag_before(self, t):
        """The largest replication lag the probe saw in the 3 s before t (at least 50 ms)."""
        return max([lag for s, lag in self.lags if t - 3.0 <= s <= t] + [LAG_FLOOR])

    # -- the nemesis ------------------------------------------------------------------------

    def wait_failover(self, old_port, deadline_s=30):
        wait_for("Sentinel to promote a replica", lambda: self.primary_port() not in (
            None, old_port) and call(self.primary_port(), "ROLE")[0] == "master", deadline_s)

    def restart_as_replica(self, node):
        """Restarts a node that died or was stopped: it asks the Sentinels who the primary is
        (`--sentinel`) and follows that one, or waits for their failover."""
        node.start(sentinels=self.sentinels)

    def offset_at(self, port, t):
        """The wall clock offset the node on `port` ran on at `t`."""
        runs = [o for s, p, o in self.clock_log if p == port and s <= t]
        return runs[-1] if runs else 0.0

    def fault_kill(self):
        p = self.primary()
        if p is None:
            return
        t0 = self.event("kill", "kill -9 of the primary %s" % p.name)
        p.kill()
        self.wait_failover(p.port)
        t1 = self.event("kill-done", "promoted :%d" % self.primary_port())
        self.faults.append(dict(kind="kill", t0=t0, t1=t1, charges=["local"]))
        self.restart_as_replica(p)

    def fault_pause(self):
        p = self.primary()
        if p is None:
            return
        d = self.rng.uniform(0.1, 0.6)
        t0 = self.event("pause", "SIGSTOP of the primary %s for %.2f s" % (p.name, d))
        os.kill(p.proc.pid, signal.SIGSTOP)
        time.sleep(d)
        os.kill(p.proc.pid, signal.SIGCONT)
        t1 = self.event("pause-done")
        self.faults.append(dict(kind="pause", t0=t0, t1=t1, charges=["local"]))

    def fault_stop(self):
        """SIGSTOP past down-after-milliseconds: Sentinel fails over; then SIGCONT."""
        p = self.primary()
        if p is None:
            return
        t0 = self.event("stop", "SIGSTOP of the primary %s until a failover" % p.name)
        os.kill(p.proc.pid, signal.SIGSTOP)
        try:
            self.wait_failover(p.port)
        finally:
            os.kill(p.proc.pid, signal.SIGCONT)
        t1 = self.event("stop-done", "promoted :%d, old primary resumed" % self.primary_port())
        self.faults.append(dict(kind="stop", t0=t0, t1=t1, charges=["local"]))

    def fault_clock(self):
        """A node's wall clock steps (libfaketime); a replica restarts under it."""
        if not self.faketime:
            return
        replicas = [n for n in self.nodes if self.role(n) == "slave"]
        if not replicas:
            return
        n = self.rng.choice(replicas)
        step = self.rng.choice([-1, 1]) * self.rng.choice([0.05, 0.3, 2.0, 120.0])
        t0 = self.event("clock", "%s's clock %+.2f s, restarted" % (n.name, step))
        n.set_clock(n.offset + step)
        n.kill(signal.SIGTERM)
        self.restart_as_replica(n)
        wait_for(n.name + " to link", lambda: "master_link_status:up"
                 in call(n.port, "INFO", "replication"), 30)
        self.skewed = True
        t1 = self.event("clock-done")
        self.faults.append(dict(kind="clock", t0=t0, t1=t1, charges=[]))

    def fault_outage(self):
        """The primary refuses writes (NOREPLICAS) for a while: the sidecars' fail modes."""
        p = self.primary()
        if p is None:
            return
        d = self.rng.uniform(0.3, 2.0)
        t0 = self.event("outage", "NOREPLICAS on %s for %.2f s" % (p.name, d))
        try:
            call(p.port, "CONFIG", "SET", "min-replicas-to-write", 3)
            time.sleep(d)
        finally:
            call(p.port, "CONFIG", "SET", "min-replicas-to-write", 1)
        t1 = self.event("outage-done")
        self.faults.append(dict(kind="outage", t0=t0, t1=t1, charges=["local"]))

    def fault_flap(self):
        """NOREPLICAS 150 ms on, 150 ms off, ten times."""
        p = self.primary()
        if p is None:
            return
        t0 = self.event("flap", "NOREPLICAS on %s flapping 150 ms x 10" % p.name)
        for _ in range(10):
            try:
                call(p.port, "CONFIG", "SET", "min-replicas-to-write", 3)
                time.sleep(0.15)
            finally:
                call(p.port, "CONFIG", "SET", "min-replicas-to-write", 1)
            t = self.event("flap-up")
            self.faults.append(dict(kind="flap", t0=t - 0.15, t1=t, charges=["local"]))
            time.sleep(0.15)
        self.event("flap-done", "%.2f s" % (time.time() - t0))

    def fault_sidecar(self):
        """kill -9 of a sidecar, restarted at once: its local state is gone."""
        mode = self.rng.choice(sorted(self.sidecars))
        port = self.sidecars[mode]
        proc = next(p for p in self.procs.live.values() if "--fail-mode" in p.args
                    and p.args[p.args.index("--fail-mode") + 1] == mode)
        t0 = self.event("sidecar", "kill -9 of the %s sidecar, restarted" % mode)
        self.procs.kill(proc)
        self.procs.start("sidecar-" + mode, proc.args)
        wait_for("sidecar " + mode, lambda: call(port, "PING") == "PONG", 20)
        t1 = self.event("sidecar-done")
        self.faults.append(dict(kind="sidecar", t0=t0, t1=t1, charges=[]))

    def fault_partition(self):
        """The primary cut off from everyone (iptables DROP both ways on its port, inside the
        soak's own network namespace) for 0.5-5 s: past down-after-milliseconds Sentinel fails
        over, and the old primary, its replicas gone, answers NOREPLICAS after
        min-replicas-max-lag."""
        if not self.netns:
            return
        p = self.primary()
        if p is None:
            return
        d = self.rng.uniform(0.5, 5.0)
        rules = [["INPUT", "-p", "tcp", "--dport", str(p.port), "-j", "DROP"],
                 ["INPUT", "-p", "tcp", "--sport", str(p.port), "-j", "DROP"]]
        t0 = self.event("partition", "%s cut off for %.2f s" % (p.name, d))
        for r in rules:
            subprocess.run(["iptables", "-A"] + r, check=True)
        try:
            time.sleep(d)
        finally:
            for r in rules:
                subprocess.run(["iptables", "-D"] + r, check=True)
        t1 = self.event("partition-done")
        self.faults.append(dict(kind="partition", t0=t0, t1=t1, charges=["local"]))

    # -- faults of the cluster and the regions ----------------------------------------------

    def fault_slotmove(self):
        """Slots move under load: `sluice cluster add-node` of the spare (it takes about a
        quarter of the slots, with their buckets), or `remove-node` of it (they go back)."""
        spare, seed = "127.0.0.1:%d" % self.cnodes[6], "127.0.0.1:%d" % self.cnodes[0]
        if not self.spare_in:
            # A removed node drops what it handed over in the background: add it back empty.
            wait_for("the spare to be empty", lambda: call(self.cnodes[6], "DBSIZE") == 0, 15)
        what = "remove-node" if self.spare_in else "add-node"
        t0 = self.event("slotmove", "sluice cluster %s %s" % (what, spare))
        try:
            out = self.admin(what, spare, seed)
        finally:
            t1 = time.time()
            self.faults.append(dict(kind="slotmove", t0=t0, t1=t1, charges=[],
                                    cells=["cluster"]))
        self.spare_in = not self.spare_in
        self.event("slotmove-done", " ".join(
            (out.strip().splitlines() or [""])[-1].split()[:12]))

    def fault_compact(self):
        """etcd compacted at its current revision (`etcdctl compact`): a watch that must resume
        from an older revision is cancelled by etcd."""
        rev = json.loads(self.etcdctl("put", "/soak/compact", str(time.time()), "-w", "json"))
        rev = rev["header"]["revision"]
        t0 = self.event("compact", "etcdctl compact %d" % rev)
        self.etcdctl("compact", str(rev))
        self.faults.append(dict(kind="compact", t0=t0, t1=time.time(), charges=[],
                                cells=["cluster", "regions"]))

    def fault_etcd(self):
        """kill -9 of etcd, down for 0.2-3 s, restarted on the same data dir and ports."""
        d = self.rng.uniform(0.2, 3.0)
        t0 = self.event("etcd", "kill -9 of etcd, restarted after %.2f s" % d)
        try:
            self.procs.kill(self.etcd)
            time.sleep(d)
        finally:
            self.etcd = self.procs.start("etcd", self.etcd_argv)
            wait_for("etcd to be healthy", self.etcd_healthy, 30)
            t1 = self.event("etcd-done")
            self.faults.append(dict(kind="etcd", t0=t0, t1=t1, charges=[],
                                    cells=["cluster", "regions"]))

    SPLITS = ((0.5, 0.5), (0.8, 0.2), (0.2, 0.8), (0.65, 0.35), (0.35, 0.65))

    def fault_shares(self):
        """The traffic moves between the regions (a new split of the region clients' rate):
        their demands change and the coordinators rebalance the shares, shrinking at once and
        growing into what is free. The span it acts on: until the smoothed demand has followed
        (97% after three intervals) and one more rebalance."""
        now = tuple(self.split[r] for r in REGIONS)
        split = self.rng.choice([x for x in self.SPLITS if x != now])
        t0 = self.event("shares", "traffic split %s" % ":".join("%.2f" % x for x in split))
        for r, x in zip(REGIONS, split):
            self.split[r] = x
        self.faults.append(dict(kind="shares", t0=t0, t1=t0 + 4 * REBALANCE_INTERVAL,
                                charges=[], cells=["regions"]))

    def fault_regionpause(self):
        """SIGSTOP of one region's node for 1-6 s, then SIGCONT: its peer grows into what it
        stops claiming; its clients' checks wait and are answered when it resumes."""
        region = self.rng.choice(REGIONS)
        d = self.rng.uniform(1.0, 6.0)
        pid = self.rprocs[region].pid
        t0 = self.event("regionpause", "SIGSTOP of region %s for %.2f s" % (region, d))
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(d)
        finally:
            os.kill(pid, signal.SIGCONT)
        t1 = self.event("regionpause-done")
        self.faults.append(dict(kind="regionpause", t0=t0, t1=t1, charges=[],
                                cells=["regions"]))

    KINDS = ("kill", "pause", "stop", "clock", "outage", "flap", "sidecar", "partition",
             "slotmove", "compact", "etcd", "shares", "regionpause")
    # The cells each kind acts on (the etcd is the cluster's and the regions').
    KIND_CELLS = dict({k: ("pair",) for k in KINDS[:8]}, slotmove=("cluster",),
                      compact=("cluster", "regions"), etcd=("cluster", "regions"),
                      shares=("regions",), regionpause=("regions",))

    def nemesis(self, end):
        """Every 1-3 s, the next kind from a bag of every enabled kind, shuffled by the seed
        and refilled when empty: each kind is injected about as often as any other, whatever
        the cells' faults cost in time."""
        kinds = [k for k in self.KINDS if k in self.args.faults
                 and set(self.KIND_CELLS[k]) & set(self.args.cells)]
        bag = []
        while time.time() < end and not self.stop.is_set():
            time.sleep(self.rng.uniform(1.0, 3.0))
            if time.time() >= end:
                break
            if not bag:
                bag = list(kinds)
                self.rng.shuffle(bag)
            kind = bag.pop()
            try:
                getattr(self, "fault_" + kind)()
            except Exception as e:  # a fault that could not be made is reported, not fatal
                self.event("nemesis-error", "%s: %r" % (kind, e))
                if kind == "etcd" and self.etcd.poll() is not None:
                    try:
                        self.etcd = self.procs.start("etcd", self.etcd_argv)
                    except Exception as e2:
                        self.event("nemesis-error", "restart etcd: %r" % e2)
                for n in getattr(self, "nodes", []):
                    if n.proc is None:
                        try:
                            self.restart_as_replica(n)
                        except Exception as e2:
                            self.event("nemesis-error", "restart %s: %r" % (n.name, e2))

    def failovers(self):
        """Every failover the Sentinels made, injected or not, from their logs: when the
        promoted replica was told to stop following (its state diverges from there), the old
        primary's port and the new one's."""
        out = {}
        for i in range(len(getattr(self, "sentinels", []))):
            with open(os.path.join(self.work, "sentinel-%d.log" % i), errors="replace") as f:
                for line in f:
                    if "+failover-state-send-slaveof-noone" not in line:
                        continue
                    words = line.split()
                    stamp = " ".join(words[1:5])
                    t = time.mktime(time.strptime(stamp[:-4], "%d %b %Y %H:%M:%S"))
                    t += float(stamp[-4:])
                    new, old = int(words[10]), int(words[-1])
                    out.setdefault((old, new, round(t)), t)
        return sorted((t, old, new) for (old, new, _), t in out.items())

    # -- the run ----------------------------------------------------------------------------

    def run(self):
        self.start()
        keys = self.keys()
        threads = []

        def add(target, *args):
            out = []
            self.records.append(out)
            threads.append(threading.Thread(target=target, args=args + (out,)))
        for path in ("direct", "local", "closed", "cluster", "regions"):
            mine = [(i, k) for i, k in enumerate(keys) if k[0] == path]
            if not mine:
                continue
            for _ in range(self.args.clients):
                if path == "cluster":
                    add(self.client_cluster, mine)
                elif path == "regions":
                    for region in REGIONS:
                        add(self.client_region, region, mine)
                else:
                    add(self.client, path, mine)
        if "pair" in self.args.cells:
            threads.append(threading.Thread(target=self.lag_probe))
        for t in threads:
            t.daemon = True
            t.start()
        end = time.time() + self.args.minutes * 60
        self.nemesis(end)
        # Let the last fault's after-effects show, then stop.
        time.sleep(max(0.0, end - time.time()) + 2.0)
        self.stop.set()
        for t in threads:
            t.join(timeout=10)
        return keys


# ---------------------------------------------------------------------------------------------
# The checker.


def exact_excess(algo, limit, period, events):
    """The worst excess of allowed checks over one exact limiter, and the span where it was seen.

    events: (send, recv) of the allowed checks of one key, by send time. The server decided
    each at some instant in [send, recv], so an interval is taken at its widest: from the
    first's send to the last's recv. Returns (excess, first index, last index).
    """
    best = (0, 0, 0)
    n = len(events)
    rate = limit / period
    i0 = 0
    for j in range(n):
        recv_j = events[j][1]
        if algo in ("TOKEN", "GCRA"):
            # j-i+1 <= limit + rate*(recv_j - send_i): intervals up to three periods.
            while events[i0][0] < recv_j - 3 * period:
                i0 += 1
            for i in range(i0, j + 1):
                excess = (j - i + 1) - (limit + rate * (recv_j - events[i][0]))
                if excess > best[0]:
                    best = (excess, i, j)
        else:
            # LOG: at most limit within any span shorter than the period. FIXED and SLIDING:
            # a span shorter than the period meets at most two windows, so at most twice.
            while events[i0][0] <= recv_j - period:
                i0 += 1
            cap = limit if algo == "LOG" else 2 * limit
            excess = (j - i0 + 1) - cap
            if excess > best[0]:
                best = (excess, i0, j)
    return best


def check(soak, keys):
    """Holds every key's allowed checks against one exact limiter plus the faults' bounds.

    What a fault may cost a key, from the docs:
    - a failover (any: injected or not): what the old primary admitted that the promoted replica
      never saw. That is what the old primary answered from the replication lag before the
      promotion (the largest WAIT round trip of the 3 s before) until it stopped answering as
      a primary, read from the records (each names the node that answered); through a
      sidecar, what the sidecar admitted over that span. docs/replication.md bounds it: the
      last flush interval and the lag for a kill, min-replicas-max-lag for a primary that
      lives on;
    - a failover to a node whose clock differs (after a clock step): 100 ms of refill for a
      bucket (docs/failure-matrix.md, clocks that close count as agreeing);
    - an outage seen by the `local` sidecar: an eighth of the capacity beyond what the node had
      left, plus the refill of the outage (docs/gateways.md).
    """
    allowed = {}
    total = 0
    for rec in soak.records:
        for send, recv, k, ok, port in rec:
            total += 1
            if ok == 1:
                allowed.setdefault(k, []).append((send, recv, port))
    direct = sorted(e for k, ev in allowed.items() if keys[k][0] == "direct" for e in ev)
    splits = []
    failovers = soak.failovers()
    for t, old, new in failovers:
        # The old primary's span: from the replication lag before its last answer up to the
        # promotion (a killed or stopped primary answers nothing after the fault), until it
        # stopped answering as a primary (30 s at most, and never past a later failover that
        # made it the primary again).
        before = [r for s, r, p in direct if p == old and t - 30 <= r <= t]
        last = max(before + [t - 30])
        lag = soak.lag_before(last)
        upto = min([t2 for t2, _, new2 in failovers if new2 == old and t2 > t] + [t + 30])
        ends = [r for s, r, p in direct if p == old and t <= r <= upto]
        splits.append(dict(t=t, old=old, new=new, lag=lag, lo=last - lag, end=max(ends + [last]),
                           kind=soak.fault_near(t)))
    injected = {}
    for f in soak.faults:
        injected[f["kind"]] = injected.get(f["kind"], 0) + 1
    injected["failover, no fault"] = sum(1 for sp in splits if sp["kind"] is None)
    rows = {}
    failures = []
    for k, (path, name, limit, period, algo) in enumerate(keys):
        ev = sorted(allowed.get(k, []))
        if not ev:
            continue
        excess, i, j = exact_excess(algo, limit, period, ev)
        if excess <= 0:
            continue
        a, b = ev[i][0], ev[j][1]
        bound = 0.0
        kinds = set()
        cell = CELL_OF[path]
        if cell == "regions":
            # Rebalancing, at any time: the bound docs/regions.md states over any span.
            bound += region_bound(limit, period)
        for sp in splits:
            if cell != "pair":
                break
            # Failing over between clocks that differ: a bucket may refill by 100 ms (clocks
            # that close count as agreeing); a FIXED or SLIDING key's window after the moved
            # one follows the new clock's multiples of the period and can be short, so one
            # limit more (docs/failure-matrix.md, nodes whose clocks disagree). Either shows
            # within two periods of the failover: the moved window's rest, then the short one.
            skew = abs(soak.offset_at(sp["old"], sp["t"]) - soak.offset_at(sp["new"], sp["t"]))
            if skew > 0 and sp["t"] <= b and a <= sp["t"] + 2 * period:
                if algo in ("TOKEN", "GCRA"):
                    kinds.add(sp["kind"] or "failover, no fault")
                    bound += limit * min(skew, SKEW_REFILL) / period
                if skew >= 0.001 and algo in ("FIXED", "SLIDING"):
                    kinds.add(sp["kind"] or "failover, no fault")
                    bound += limit
            if sp["lo"] > b or sp["end"] < a:
                continue
            kinds.add(sp["kind"] or "failover, no fault")
            lo = sp["lo"]
            if path == "direct":
                bound += sum(1 for s, r, p in ev if p == sp["old"] and lo <= r <= sp["end"])
            else:
                bound += sum(1 for s, r, p in ev if lo <= r and s <= sp["end"])
        for f in soak.faults:
            if f["t0"] > b or f["t1"] + period < a or cell not in f.get("cells", ["pair"]):
                continue
            kinds.add(f["kind"])
            if "local" in f["charges"] and path == "local":
                bound += limit / 8 + limit * (f["t1"] - f["t0"]) / period + 1
        ok = excess <= bound + 1e-9
        for kd in kinds or {"none"}:
            # The largest overshoot a fault of this kind acted on, with the bound of its span
            # (a failing span first, whatever its size), and how many keys went over at all.
            row = rows.setdefault((kd, path), dict(worst=0, bound=0, fail=0, keys=0))
            row["keys"] += 1
            if (not ok, excess) > (row["fail"] > 0, row["worst"]):
                row["worst"], row["bound"] = excess, bound
            row["fail"] += 0 if ok else 1
        if not ok:
            failures.append(dict(key=name, algo=algo, limit=limit, period=period,
                                 excess=round(excess, 2), bound=round(bound, 2),
                                 faults="+".join(sorted(kinds)) or "none",
                                 span=[round(a - soak.t0, 3), round(b - soak.t0, 3)],
                                 allowed=[(round(s - soak.t0, 3), round(r - soak.t0, 3), p)
                                          for s, r, p in ev[i:j + 1]]))
    return (total, sum(len(v) for v in allowed.values()), injected, rows, failures, splits)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keys", type=int, default=6, help="keys per algorithm and path")
    ap.add_argument("--clients", type=int, default=2, help="client threads per path")
    ap.add_argument("--rate", type=float, default=400.0, help="checks a second per client")
    ap.add_argument("--faults", default=",".join(Soak.KINDS))
    ap.add_argument("--cells", default=",".join(PATHS),
                    help="the topologies to run: pair, cluster, regions")
    ap.add_argument("--work")
    args = ap.parse_args()
    args.faults = args.faults.split(",")
    args.cells = args.cells.split(",")
    soak = Soak(args)

    def on_signal(signum, frame):
        raise SystemExit(130)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        keys = soak.run()
    finally:
        soak.stop.set()
        soak.procs.stop_all()
    total, allowed, injected, rows, failures, splits = check(soak, keys)
    print("seed %d, %.1f min, %d checks (%d allowed), errors %s, largest WAIT round trip "
          "%.0f ms, work dir %s" % (args.seed, args.minutes, total, allowed,
                                    dict(sorted(soak.errors.items())),
                                    max([lag for _, lag in soak.lags] + [0]) * 1000, soak.work))
    print()
    print("Per fault kind and path: the keys that went over one exact limiter in a span where a")
    print("fault of that kind acted, the largest of those overshoots, and the bound the docs state")
    print("for the faults of that span (- : no key over the exact limiter at all).")
    print()
    print("| fault | injected | path/cell | keys over | worst overshoot | its bound | result |")
    print("|---|---|---|---|---|---|---|")
    paths_of = dict({k: [p for c in Soak.KIND_CELLS[k] for p in PATHS[c]] for k in Soak.KINDS},
                    **{"failover, no fault": list(PATHS["pair"]),
                       "none": [p for c in PATHS for p in PATHS[c]]})
    for kind in [k for k in Soak.KINDS if k in args.faults] + ["failover, no fault", "none"]:
        for path in paths_of[kind]:
            if CELL_OF[path] not in args.cells:
                continue
            r = rows.get((kind, path))
            over = 0 if r is None else r["keys"]
            worst = "-" if r is None else "%.1f" % r["worst"]
            bound = "-" if r is None else "%.1f" % r["bound"]
            result = "pass" if r is None or r["fail"] == 0 else "FAIL (%d keys)" % r["fail"]
            print("| %s | %d | %s | %d | %s | %s | %s |" % (kind, injected.get(kind, 0), path,
                                                          over, worst, bound, result))
    log_path = os.path.join(soak.work, "events.json")
    with open(log_path, "w") as f:
        json.dump(dict(seed=args.seed, events=[(round(t - soak.t0, 3), k, d)
                                              for t, k, d in soak.events],
                       failovers=[dict(sp, t=round(sp["t"] - soak.t0, 3),
                                       lo=round(sp["lo"] - soak.t0, 3),
                                       end=round(sp["end"] - soak.t0, 3)) for sp in splits],
                       faults=[dict(f, t0=round(f["t0"] - soak.t0, 3),
                                    t1=round(f["t1"] - soak.t0, 3)) for f in soak.faults],
                       failures=failures), f, indent=1)
    if failures:
        print()
        print("FAILED: %d keys over their bound; seed %d reproduces it; the event log: %s"
              % (len(failures), args.seed, log_path))
        for f in failures[:20]:
            print("  ", {k: v for k, v in f.items() if k != "allowed"})
        sys.exit(1)


if __name__ == "__main__":
    main()
