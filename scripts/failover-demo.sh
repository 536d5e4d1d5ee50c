#!/usr/bin/env bash
# failover-demo.sh — what a kill -9 of the primary costs, with failover by the real
# redis-sentinel (issue 7, item 8).
#
# What it does:
#   - starts on 127.0.0.1, on free ports: a primary and two replicas (sluice --threads 1,
#     --replicaof), and three redis-sentinel processes (quorum 2, down-after-milliseconds 1000,
#     failover-timeout 10000, parallel-syncs 1), each with a fresh, writable config file;
#   - waits until every sentinel knows both replicas and the two other sentinels;
#   - runs a Sentinel-aware client (python3, standard library only: it asks the sentinels for
#     the primary's address with SENTINEL GET-MASTER-ADDR-BY-NAME and checks ROLE there, as
#     Sentinel client libraries do) that pipelines RL.CHECK (16 per round trip) on one
#     connection:
#       1. one second on a key with a huge limit; meanwhile, and until the kill, a process of
#          its own measures the replication lag under load: `WAIT 2 1000` round trips (flush
#          now, both replicas apply and ack) every 20 ms on a second connection;
#       2. then ONE hot key, `RL.CHECK hot 20000 1d`; once about half its limit has been
#          allowed, another process sends SIGKILL to the primary (kill -9) at whatever point
#          the client's round trips are, checks in flight;
#       3. the client keeps checking: on a dead link it asks the sentinels again, until
#          Sentinel has promoted a replica; it then checks on the new primary until the hot
#          bucket has said no for 0.5 s;
#   - prints how long clients could not check (kill -9 to the first check answered by the new
#     primary), the allowed count against the limit, how many requests were over-allowed
#     (allowed − limit − the refill during the run), and the bound rate × (measured lag + flush
#     interval), rate being the checks per second before the kill and lag the largest WAIT
#     round trip: the checks the primary may have answered whose state had not yet reached the
#     replica that Sentinel promotes;
#   - shows which replica Sentinel promoted and that it repointed the other one.
#
# Usage: scripts/failover-demo.sh [--sluice PATH] [--build] [--flush-ms N] [--pipeline N]
#   --sluice     the sluice binary (default $SLUICE_BIN, else release/sluice in $CARGO_TARGET_DIR
#                or target/)
#   --build      run `cargo build --release --bin sluice` even if the binary exists
#   --flush-ms   the primary's --repl-flush-ms (default 1)
#   --pipeline   checks per round trip (default 16)
#
# Needs redis-sentinel and redis-cli (installed with apt-get when missing) and python3.
# Every process it starts is stopped by its PID on exit; KEEP_LOGS=1 keeps the nodes' and the
# sentinels' logs (the sentinels log at verbose level).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

BUILD=0 FLUSH_MS=1 PIPELINE=16 SLUICE=
while [ $# -gt 0 ]; do
  case "$1" in
    --flush-ms) FLUSH_MS="$2"; shift ;;
    --pipeline) PIPELINE="$2"; shift ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done

LIMIT=20000 PERIOD=1d PERIOD_S=86400 MASTER=mymaster

log() { echo "[failover] $*" >&2; }
die() { echo "[failover] error: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Tools and the binary.

if ! command -v redis-sentinel >/dev/null || ! command -v redis-cli >/dev/null; then
  log "installing redis-sentinel and redis-tools"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-sentinel redis-tools >&2
fi
command -v python3 >/dev/null || die "python3 is missing (apt-get install -y python3)"
need_sluice

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-failover.XXXXXX")

# ---------------------------------------------------------------------------------------------
# Processes: every one we start is recorded and stopped by its PID.

# PIDS, cleanup, forget, stop, free_port, wait_ready, wait_for and launch_sluice (a node on a
# free port; with NAME "", its log in $WORK/sluice-PORT.log) come from scripts/lib.sh.

# start_sentinel MASTER_PORT: sets T_PORT, T_PID.
start_sentinel() {
  local attempt dir
  for attempt in 1 2 3; do
    free_port
    T_PORT=$PORT
    dir="$WORK/sentinel-$T_PORT"
    mkdir -p "$dir"
    cat >"$dir/sentinel.conf" <<EOF
port $T_PORT
bind 127.0.0.1
daemonize no
protected-mode no
loglevel verbose
dir $dir
logfile $dir/sentinel.log
sentinel monitor $MASTER 127.0.0.1 $1 2
sentinel down-after-milliseconds $MASTER 1000
sentinel failover-timeout $MASTER 10000
sentinel parallel-syncs $MASTER 1
EOF
    redis-sentinel "$dir/sentinel.conf" >/dev/null 2>&1 &
    T_PID=$!
    PIDS+=("$T_PID")
    wait_ready "$T_PORT" "$T_PID" && return 0
    kill "$T_PID" 2>/dev/null || true
    log "redis-sentinel on :$T_PORT did not start (attempt $attempt): $(tail -1 "$dir/sentinel.log")"
  done
  die "redis-sentinel did not start"
}

link_up() { redis-cli -p "$1" INFO replication 2>/dev/null | grep -q '^master_link_status:up'; }
knows_topology() {
  [ "$(redis-cli -p "$1" SENTINEL REPLICAS "$MASTER" 2>/dev/null | grep -cx name)" = 2 ] \
    && [ "$(redis-cli -p "$1" SENTINEL SENTINELS "$MASTER" 2>/dev/null | grep -cx name)" = 2 ]
}

# ---------------------------------------------------------------------------------------------
# The topology.

launch_sluice "" --repl-flush-ms "$FLUSH_MS"
P_PORT=$S_PORT P_PID=$S_PID
launch_sluice "" --replicaof "127.0.0.1:$P_PORT"
R1_PORT=$S_PORT
launch_sluice "" --replicaof "127.0.0.1:$P_PORT"
R2_PORT=$S_PORT
wait_for 20 "replica :$R1_PORT to link" link_up "$R1_PORT"
wait_for 20 "replica :$R2_PORT to link" link_up "$R2_PORT"
SENTINEL_PORTS=()
for _ in 1 2 3; do
  start_sentinel "$P_PORT"
  SENTINEL_PORTS+=("$T_PORT")
done
for s in "${SENTINEL_PORTS[@]}"; do
  wait_for 30 "sentinel :$s to discover the replicas and the other sentinels" knows_topology "$s"
done
log "primary :$P_PORT (pid $P_PID), replicas :$R1_PORT :$R2_PORT, sentinels :${SENTINEL_PORTS[*]}"

# ---------------------------------------------------------------------------------------------
# The client: checks through Sentinel, kills the primary at half the limit, measures.

OUT="$WORK/client.out"
# Bash reports the primary's death by SIGKILL ("Killed") on its own stderr: park that while the
# client runs (the client's own stderr stays on the terminal).
exec 4>&2 2>"$WORK/shell.err"
STATUS=0
timeout 120 python3 - "$P_PID" "$LIMIT" "$PERIOD" "$PERIOD_S" "$PIPELINE" "$FLUSH_MS" \
  "$MASTER" "${SENTINEL_PORTS[@]}" >"$OUT" 2>&4 <<'PY' || STATUS=$?
import multiprocessing, os, signal, socket, statistics, sys, time

primary_pid, limit, period, period_s, depth, flush_ms = (
    int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
    float(sys.argv[6]))
master = sys.argv[7]
sentinels = [int(p) for p in sys.argv[8:]]
DEADLINE = time.monotonic() + 100     # the whole client, whatever happens
MAX_REQUESTS = 50_000_000             # and a count bound

def command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)

def read_reply(f):
    line = f.readline()
    if not line:
        raise ConnectionError("closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        if len(data) < n + 2:
            raise ConnectionError("closed")
        return data[:-2]
    if kind == b":":
        return int(rest)
    if kind == b"+":
        return rest
    if kind == b"-":
        return RuntimeError(rest.decode())
    raise ConnectionError("bad reply %r" % line)

class Conn:
    def __init__(self, port, timeout=2.0):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.sock.makefile("rb", buffering=65536)
    def call(self, *args):
        self.sock.sendall(command(*args))
        return read_reply(self.f)
    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

def find_primary():
    """Asks each sentinel where the primary is and checks ROLE there, as Sentinel clients do."""
    for s in sentinels:
        try:
            c = Conn(s, 1.0)
            addr = c.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", master)
            c.close()
            if not isinstance(addr, list):
                continue
            node = Conn(int(addr[1]))
            role = node.call("ROLE")
            if isinstance(role, list) and role[0] == b"master":
                return node
            node.close()
        except (OSError, ConnectionError, ValueError):
            continue
    return None

class Stats:
    def __init__(self):
        self.allowed = 0           # hot key replies that said allowed
        self.denied = 0
        self.checks = 0            # every successful check, both keys
        self.errors = 0
        self.reconnects = 0
        self.last_ok = None
        self.max_gap = 0.0
        self.first_ok_after_kill = None
        self.first_ok_port = None
        self.hot_started = None
        self.started = None
        self.denied_since = None
        self.checks_before_kill = 0
        self.allowed_before_kill = 0
        self.last_before_kill = None
st = Stats()
fork = multiprocessing.get_context("fork")
stop_lag = fork.Event()
# Shared with the killer process: the hot key's allowed count, and when the kill was sent.
shared_allowed = fork.RawValue("q", 0)
killed_at = fork.RawValue("d", 0.0)

def measure_lag(port, out):
    """WAIT 2 round trips on the primary, under load: flush now, both replicas apply and ack.
    Runs in a process of its own, so the client's GIL does not stretch the timings."""
    lags = []
    try:
        c = Conn(port)
        while not stop_lag.is_set() and time.monotonic() < DEADLINE:
            t = time.perf_counter()
            n = c.call("WAIT", 2, 1000)
            dt = time.perf_counter() - t
            if n == 2:
                lags.append(dt)
            stop_lag.wait(0.02)
        c.close()
    except (OSError, ConnectionError):
        pass
    out.send(lags)
    out.close()

def killer():
    """kill -9 of the primary once about half the hot key's limit was allowed. A process of its
    own, so the kill falls at any point of the client's round trips, checks in flight."""
    while time.monotonic() < DEADLINE:
        if shared_allowed.value >= limit // 2:
            stop_lag.set()
            os.kill(primary_pid, signal.SIGKILL)
            killed_at.value = time.monotonic()
            return
        time.sleep(0.0001)

conn = find_primary()
if conn is None:
    sys.exit("no primary found through the sentinels")
primary_port = conn.port
lags_rx, lags_tx = fork.Pipe(duplex=False)
lagger = fork.Process(target=measure_lag, args=(primary_port, lags_tx), daemon=True)
lagger.start()
kill_proc = fork.Process(target=killer, daemon=True)
st.started = time.monotonic()
warm = command("RL.CHECK", "warm", 10**12, period) * depth
hot = command("RL.CHECK", "hot", limit, period) * depth
requests = 0
done = False
while not done and time.monotonic() < DEADLINE and requests < MAX_REQUESTS:
    if conn is None:
        conn = find_primary()
        if conn is None:
            time.sleep(0.01)
            continue
        st.reconnects += 1
    now = time.monotonic()
    hot_phase = now - st.started >= 1.0
    if hot_phase and st.hot_started is None:
        st.hot_started = now
        kill_proc.start()
    try:
        conn.sock.sendall(hot if hot_phase else warm)
        requests += depth
        for _ in range(depth):
            r = read_reply(conn.f)
            if not isinstance(r, list):
                raise ConnectionError("error reply: %r" % (r,))
            now = time.monotonic()
            st.checks += 1
            if st.last_ok is not None:
                st.max_gap = max(st.max_gap, now - st.last_ok)
            st.last_ok = now
            if hot_phase:
                if r[0] == 1:
                    st.allowed += 1
                    st.denied_since = None
                else:
                    st.denied += 1
                    if st.denied_since is None:
                        st.denied_since = now
            kill_time = killed_at.value
            if kill_time == 0.0 or now < kill_time:
                st.checks_before_kill = st.checks
                st.allowed_before_kill = st.allowed
                st.last_before_kill = now
            elif st.first_ok_after_kill is None and conn.port != primary_port:
                st.first_ok_after_kill = now
                st.first_ok_port = conn.port
            # Done: the bucket on the new primary has said no for 0.5 s.
            if st.first_ok_after_kill is not None and st.denied_since is not None \
                    and now - st.denied_since >= 0.5:
                done = True
        shared_allowed.value = st.allowed
    except (OSError, ConnectionError):
        st.errors += 1
        conn.close()
        conn = None
ended = time.monotonic()
stop_lag.set()
if not done:
    sys.exit("the client did not see the failover through (allowed %d, killed %s)"
             % (st.allowed, killed_at.value != 0.0))

# The bucket's refill during the run, which a single node would allow too.
refill = int((ended - st.hot_started) * limit / period_s)
over = max(0, st.allowed - limit - refill)
# Rate: checks answered before the kill (both phases) per second.
rate = st.checks_before_kill / (st.last_before_kill - st.started)
lags = sorted(lags_rx.recv()) if lags_rx.poll(5) else []
lagger.join(5)
if not lags:
    sys.exit("no WAIT round trip was measured")
lag = lags[-1]
bound = rate * (lag + flush_ms / 1000)
ms = lambda s: "%.0f ms" % (s * 1000)
print("Failover under load: RL.CHECK hot %d %s, %d checks per round trip, --repl-flush-ms %g"
      % (limit, period, depth, flush_ms))
print("  checks/s before the kill          %.0f" % rate)
print("  replication lag (WAIT 2 rtt)      median %.2f ms, max %.2f ms (%d samples under load)"
      % (statistics.median(lags) * 1000, lag * 1000, len(lags)))
print("  clients could not check           %s (kill -9 -> first check on the new primary :%d);"
      " longest gap between two checks %s" % (ms(st.first_ok_after_kill - killed_at.value),
                                              st.first_ok_port, ms(st.max_gap)))
print("  allowed                           %d of limit %d (+%d refilled during the run);"
      " %d allowed before the kill" % (st.allowed, limit, refill, st.allowed_before_kill))
print("  over-allowed                      %d (%.2f%% of the limit)" % (over, 100 * over / limit))
print("  bound rate x (lag + flush)        %.0f/s x (%.2f + %g) ms = %.0f"
      % (rate, lag * 1000, flush_ms, bound))
print("  over-allowed within the bound     %s; within 2%% of the limit: %s"
      % ("yes" if over <= bound else "NO", "yes" if over <= 0.02 * limit else "NO"))
print("  client: %d checks, %d dead links, %d reconnects through the sentinels"
      % (st.checks, st.errors, st.reconnects))
PY
if ! kill -0 "$P_PID" 2>/dev/null; then
  wait "$P_PID" 2>/dev/null || true
  forget "$P_PID"
fi
exec 2>&4 4>&-
[ "$STATUS" = 0 ] || { cat "$OUT" >&2; die "the client failed (exit $STATUS)"; }
cat "$OUT"

# What Sentinel did with the two replicas.
follows() {
  local info
  info=$(redis-cli -p "$1" INFO replication 2>/dev/null)
  info=$(tr -d '\r' <<<"$info")
  grep -qx "master_port:$2" <<<"$info" && grep -qx 'master_link_status:up' <<<"$info"
}
NEW_PORT=$(redis-cli -p "${SENTINEL_PORTS[0]}" SENTINEL GET-MASTER-ADDR-BY-NAME "$MASTER" | sed -n 2p)
case "$NEW_PORT" in
  "$R1_PORT") OTHER=$R2_PORT ;;
  "$R2_PORT") OTHER=$R1_PORT ;;
  *) die "Sentinel names :$NEW_PORT as the primary, which is neither replica" ;;
esac
wait_for 20 "replica :$OTHER to follow :$NEW_PORT" follows "$OTHER" "$NEW_PORT"
echo "  Sentinel promoted :$NEW_PORT (ROLE: $(redis-cli -p "$NEW_PORT" ROLE | head -1));" \
  "replica :$OTHER follows it (master_link_status:up)"
