#!/usr/bin/env bash
# cluster-demo.sh — a three-node Sluice cluster on loopback, and what each step costs
# (issue 8, item 7).
#
# What it does:
#   - starts on 127.0.0.1, on free ports, three cluster nodes (sluice --cluster yes --threads 1,
#     each with its own --cluster-config-file) and a fourth one, empty, to add later;
#   - creates the cluster (`sluice cluster create`) and shows its placement;
#   - shows a client that ignores MOVED (plain redis-cli) and one that follows it (redis-cli -c);
#   - preloads N buckets `b:<12 digits>` spread over all 16384 slots, bucket i having taken
#     1 + i % 7 of `RL.CHECK b:... 100 1d`. A small python3 client (standard library only)
#     routes each key to its owner by CRC16 and CLUSTER SLOTS and pipelines 20,000 per round
#     trip. (redis-benchmark --cluster is not used for this: it substitutes one hash tag per
#     node for `{tag}`, so all of a node's keys would land in a single slot and a move would
#     take all or none of them);
#   - adds the fourth node (`sluice cluster add-node`) and prints the fraction of slots and of
#     buckets moved, the migration time and the longest write pause of a moving slot, then asks
#     every bucket with DRY at its owner: 0 must come back fresh (reset) or changed;
#   - removes that node again (`sluice cluster remove-node`), with the same check;
#   - runs `redis-benchmark --cluster` with RL.CHECK on the three nodes and the same benchmark
#     on one non-cluster node (--threads 1), alternating, in the same run, and prints both rates
#     and their ratio; and, to tell the slot check's cost from that of three processes, on a
#     one-node cluster (plain redis-benchmark: its --cluster mode refuses a single node). On a
#     2-core machine the three nodes and redis-benchmark share two cores: this shows what
#     cluster mode costs, not how it scales.
#
# Usage: scripts/cluster-demo.sh [--sluice PATH] [--build] [--keys N] [--requests N] [--rounds N]
#   --sluice     the sluice binary (default $SLUICE_BIN, else release/sluice in $CARGO_TARGET_DIR
#                or target/)
#   --build      run `cargo build --release --bin sluice` even if the binary exists
#   --keys       buckets to preload (default 1000000)
#   --requests   requests per benchmark run (default 2000000)
#   --rounds     benchmark rounds, cluster and single node alternating (default 3; medians shown)
#
# Needs redis-cli and redis-benchmark (installed with apt-get when missing) and python3.
# Every process it starts is stopped by its PID on exit; KEEP_LOGS=1 keeps the nodes' logs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

BUILD=0 KEYS=1000000 REQUESTS=2000000 ROUNDS=3 SLUICE=
while [ $# -gt 0 ]; do
  case "$1" in
    --keys) KEYS="$2"; shift ;;
    --requests) REQUESTS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done
case "$KEYS$REQUESTS$ROUNDS" in *[!0-9]*) echo "--keys, --requests and --rounds take numbers" >&2; exit 2 ;; esac
[ "$ROUNDS" -ge 1 ] || { echo "--rounds must be at least 1" >&2; exit 2; }

log() { echo "[cluster] $*" >&2; }
die() { echo "[cluster] error: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Tools and the binary.

if ! command -v redis-cli >/dev/null || ! command -v redis-benchmark >/dev/null; then
  log "installing redis-tools"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-tools >&2
fi
command -v python3 >/dev/null || die "python3 is missing (apt-get install -y python3)"
need_sluice

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-cluster-demo.XXXXXX")

# ---------------------------------------------------------------------------------------------
# Processes: every one we start is recorded and stopped by its PID.

# PIDS, cleanup, forget, stop, free_port, wait_ready, wait_for and launch_sluice (a node on a
# free port, its log in $WORK/NAME.log) come from scripts/lib.sh.

# start_node NAME: a cluster node, its log node-NAME.log and its config file nodes-NAME.conf.
start_node() {
  launch_sluice "node-$1" --cluster yes --cluster-config-file "$WORK/nodes-$1.conf"
}

# admin ARGS...: runs `sluice cluster ARGS` (bounded), its output indented into $WORK/admin.out
# and on the terminal; dies if it fails.
admin() {
  local status=0
  timeout 900 "$SLUICE" cluster "$@" >"$WORK/admin.out" 2>&1 || status=$?
  sed 's/^/    /' "$WORK/admin.out"
  [ "$status" = 0 ] || die "sluice cluster $1 failed (exit $status)"
}

dbsize() { redis-cli -p "$1" DBSIZE; }
cluster_epoch() {
  redis-cli -p "$1" CLUSTER INFO | tr -d '\r' | sed -n 's/^cluster_current_epoch://p'
}
# all_at_epoch EPOCH PORT...: every node has taken the table of EPOCH.
all_at_epoch() {
  local epoch=$1 p
  shift
  for p in "$@"; do [ "$(cluster_epoch "$p")" = "$epoch" ] || return 1; done
}
# keys_total PORT...: the sum of DBSIZE.
keys_total() {
  local p n=0
  for p in "$@"; do n=$((n + $(dbsize "$p"))); done
  echo "$n"
}
# settled COUNT PORT...: the nodes hold COUNT keys in all (old owners drop what they handed over
# in the background).
settled() {
  local count=$1
  shift
  [ "$(keys_total "$@")" = "$count" ]
}

# ---------------------------------------------------------------------------------------------
# The bucket client: preload and check N buckets, each at its owner (python3, standard library).

cat >"$WORK/buckets.py" <<'PY'
"""buckets.py preload|check PORT N

Bucket i is `b:%012d`; preload takes 1 + i % 7 of `RL.CHECK key 100 1d` from it, check asks
it with DRY, where `remaining` is what would be left after one more request: 100 - cost - 1 for
a bucket that kept its state (the refill of 100 a day adds a unit only after 864 s), 99 for one
that came back fresh. Each key goes to its owner by CRC16 and the CLUSTER SLOTS of the node at
PORT; 20,000 commands per round trip. Prints `key=value` figures on one line."""
import socket, sys, time

TABLE = []
for i in range(256):
    c = i << 8
    for _ in range(8):
        c = ((c << 1) ^ 0x1021) if c & 0x8000 else (c << 1)
    TABLE.append(c & 0xFFFF)

def key_slot(key):
    crc = 0
    for b in key:
        crc = ((crc << 8) & 0xFFFF) ^ TABLE[(crc >> 8) ^ b]
    return crc & 16383

def command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)

class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.f = self.sock.makefile("rb", buffering=1 << 20)

    def reply(self):
        line = self.f.readline()
        if not line:
            raise ConnectionError("closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if kind == b":":
            return int(rest)
        if kind == b"-":
            return RuntimeError(rest.decode())
        return rest

mode, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seed = Conn(port)
seed.sock.sendall(command(b"CLUSTER", b"SLOTS"))
owner = [None] * 16384
for r in seed.reply():
    for s in range(r[0], r[1] + 1):
        owner[s] = r[2][1]
if None in owner:
    sys.exit("CLUSTER SLOTS does not cover every slot")
by_node = {}
for i in range(n):
    key = b"b:%012d" % i
    by_node.setdefault(owner[key_slot(key)], []).append((i, key))

started = time.monotonic()
ok = reset = changed = errors = 0
first_error = ""
for node_port, keys in sorted(by_node.items()):
    c = Conn(node_port)
    for start in range(0, len(keys), 20000):
        chunk = keys[start:start + 20000]
        if mode == "preload":
            c.sock.sendall(b"".join(
                command(b"RL.CHECK", k, b"100", b"1d", b"COST", b"%d" % (1 + i % 7))
                for i, k in chunk))
        else:
            c.sock.sendall(b"".join(
                command(b"RL.CHECK", k, b"100", b"1d", b"DRY") for i, k in chunk))
        for i, k in chunk:
            r = c.reply()
            if isinstance(r, Exception) or not isinstance(r, list):
                errors += 1
                first_error = first_error or "%s: %s" % (k.decode(), r)
            elif mode == "preload":
                ok += r[0] == 1
                errors += r[0] != 1
            elif r[2] == 100 - (1 + i % 7) - 1:
                ok += 1
            elif r[2] == 99:
                reset += 1
            else:
                changed += 1
secs = time.monotonic() - started
print("mode=%s buckets=%d nodes=%d ok=%d reset=%d changed=%d errors=%d secs=%.2f rate=%.0f%s"
      % (mode, n, len(by_node), ok, reset, changed, errors, secs, n / secs if secs else 0,
         " first_error=" + first_error.replace(" ", "_") if first_error else ""))
PY

# buckets MODE PORT: runs buckets.py, sets B_* from its key=value figures.
buckets() {
  local out
  out=$(timeout 600 python3 "$WORK/buckets.py" "$1" "$2" "$KEYS") || die "buckets.py $1 failed: $out"
  B_OK=$(sed -n 's/.* ok=\([0-9]*\).*/\1/p' <<<"$out")
  B_RESET=$(sed -n 's/.* reset=\([0-9]*\).*/\1/p' <<<"$out")
  B_CHANGED=$(sed -n 's/.* changed=\([0-9]*\).*/\1/p' <<<"$out")
  B_ERRORS=$(sed -n 's/.* errors=\([0-9]*\).*/\1/p' <<<"$out")
  B_SECS=$(sed -n 's/.* secs=\([0-9.]*\).*/\1/p' <<<"$out")
  B_RATE=$(sed -n 's/.* rate=\([0-9]*\).*/\1/p' <<<"$out")
  [ "$B_ERRORS" = 0 ] || die "buckets.py $1: $out"
}

# check_buckets WHEN: asks every bucket, prints the outcome, dies on a reset or changed one.
check_buckets() {
  buckets check "$N1"
  echo "  every bucket asked with DRY at its owner ($B_SECS s): $B_OK kept their state," \
    "$B_RESET came back fresh (reset), $B_CHANGED changed"
  [ "$B_OK" = "$KEYS" ] || die "$1: $B_RESET buckets reset, $B_CHANGED changed"
}

# The [OK] line of a migration: sets M_SLOTS, M_MS, M_PAUSE.
migration_figures() {
  local line
  line=$(grep '^\[OK\].*slots moved in' "$WORK/admin.out") || die "no [OK] line"
  M_SLOTS=$(sed -n 's/^\[OK\] \([0-9]*\) slots moved.*/\1/p' <<<"$line")
  M_MS=$(sed -n 's/.* moved in \([0-9]*\) ms.*/\1/p' <<<"$line")
  M_PAUSE=$(sed -n 's/.*moving slot: \([0-9]*\) ms.*/\1/p' <<<"$line")
}

pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f%%", 100 * a / b }'; }

# ---------------------------------------------------------------------------------------------
# Three nodes and a spare; the cluster.

echo "== Three cluster nodes (sluice --cluster yes --threads 1) and a fourth, empty one"
start_node 1; N1=$S_PORT
start_node 2; N2=$S_PORT
start_node 3; N3=$S_PORT
start_node 4; N4=$S_PORT
echo "  127.0.0.1:$N1 127.0.0.1:$N2 127.0.0.1:$N3, spare 127.0.0.1:$N4"
echo "  before create: redis-cli -p $N1 RL.CHECK user:42 100 1d -> $(redis-cli -p "$N1" RL.CHECK user:42 100 1d | tr '\n' ' ')"

echo
echo "== sluice cluster create 127.0.0.1:$N1 127.0.0.1:$N2 127.0.0.1:$N3"
T0=$(date +%s%N)
admin create "127.0.0.1:$N1" "127.0.0.1:$N2" "127.0.0.1:$N3"
echo "  took $((($(date +%s%N) - T0) / 1000000)) ms; CLUSTER INFO on :$N2:" \
  "$(redis-cli -p "$N2" CLUSTER INFO | tr -d '\r' | grep -E '^cluster_(state|slots_assigned|known_nodes|current_epoch):' | tr '\n' ' ')"

echo
echo "== Clients: one that ignores MOVED, one that follows it"
SLOT=$(redis-cli -p "$N1" CLUSTER KEYSLOT user:42)
WRONG=$N1
for p in "$N1" "$N2" "$N3"; do
  case "$(redis-cli -p "$p" RL.CHECK user:42 100 1d DRY)" in MOVED*) WRONG=$p; break ;; esac
done
echo "  CLUSTER KEYSLOT user:42 -> $SLOT"
echo "  redis-cli -p $WRONG RL.CHECK user:42 100 1d      -> $(redis-cli -p "$WRONG" RL.CHECK user:42 100 1d | tr '\n' ' ')(and again: $(redis-cli -p "$WRONG" RL.CHECK user:42 100 1d | tr '\n' ' '))"
echo "  redis-cli -c -p $WRONG RL.CHECK user:42 100 1d   -> $(redis-cli -c -p "$WRONG" RL.CHECK user:42 100 1d | tr '\n' ' ')"
echo "  redis-cli -c -p $WRONG RL.CHECK user:42 100 1d   -> $(redis-cli -c -p "$WRONG" RL.CHECK user:42 100 1d | tr '\n' ' ')"
echo "  redis-cli -p $N1 DEL a b                         -> $(redis-cli -p "$N1" DEL a b)"
echo "  redis-cli -c -p $N1 DEL {user:42}:ip {user:42}:route -> $(redis-cli -c -p "$N1" DEL '{user:42}:ip' '{user:42}:route')"

echo
echo "== Preloading $KEYS buckets over all 16384 slots (bucket i took 1 + i % 7 of 100 per day)"
buckets preload "$N1"
echo "  $B_OK buckets in $B_SECS s ($B_RATE checks/s, pipelined python3 client)"
TOTAL=$((KEYS + 1))   # user:42 too
wait_for 10 "the preload to show in DBSIZE" settled "$TOTAL" "$N1" "$N2" "$N3"
echo "  DBSIZE: :$N1 $(dbsize "$N1"), :$N2 $(dbsize "$N2"), :$N3 $(dbsize "$N3")"
check_buckets "after the preload"

# ---------------------------------------------------------------------------------------------
# add-node and remove-node.

echo
echo "== sluice cluster add-node 127.0.0.1:$N4 127.0.0.1:$N1"
admin add-node "127.0.0.1:$N4" "127.0.0.1:$N1"
migration_figures
wait_for 10 "every node to take table epoch 2" all_at_epoch 2 "$N1" "$N2" "$N3" "$N4"
wait_for 30 "the old owners to drop what they handed over" settled "$TOTAL" "$N1" "$N2" "$N3" "$N4"
MOVED_KEYS=$(dbsize "$N4")
ADD_SLOTS=$M_SLOTS ADD_MS=$M_MS ADD_PAUSE=$M_PAUSE
echo "  slots moved:     $M_SLOTS of 16384 ($(pct "$M_SLOTS" 16384)), all onto the new node"
echo "  buckets moved:   $MOVED_KEYS of $TOTAL ($(pct "$MOVED_KEYS" "$TOTAL"))"
echo "  migration time:  $M_MS ms (snapshot of the moving slots, their changes, the handover)"
echo "  longest write pause of a moving slot: $M_PAUSE ms"
check_buckets "after add-node"
ADD_RESET=$B_RESET

echo
echo "== sluice cluster remove-node 127.0.0.1:$N4 127.0.0.1:$N1"
admin remove-node "127.0.0.1:$N4" "127.0.0.1:$N1"
migration_figures
wait_for 10 "every node to take table epoch 3" all_at_epoch 3 "$N1" "$N2" "$N3" "$N4"
wait_for 30 "the removed node to drop its buckets" settled "$TOTAL" "$N1" "$N2" "$N3" "$N4"
echo "  slots moved:     $M_SLOTS ($(pct "$M_SLOTS" 16384)), back to the three nodes; $(dbsize "$N4") keys left on :$N4"
echo "  migration time:  $M_MS ms; longest write pause of a moving slot: $M_PAUSE ms"
check_buckets "after remove-node"

# ---------------------------------------------------------------------------------------------
# Throughput: the three nodes against one non-cluster node, alternating.

echo
echo "== Throughput: redis-benchmark RL.CHECK, -n $REQUESTS -r 100000 -P 16 -c 50, $ROUNDS rounds alternating"
launch_sluice single; SINGLE=$S_PORT
# A one-node cluster too (redis-benchmark --cluster refuses one node, so it gets the plain
# benchmark): what the slot check costs on the node, apart from running three processes.
start_node solo; SOLO=$S_PORT
timeout 60 "$SLUICE" cluster create "127.0.0.1:$SOLO" >"$WORK/admin.out" 2>&1 \
  || die "sluice cluster create 127.0.0.1:$SOLO: $(cat "$WORK/admin.out")"
echo "  3-node cluster: redis-benchmark --cluster -p $N1 ... RL.CHECK 'rl:{tag}:__rand_int__' 100 1d"
echo "  one node (no cluster) :$SINGLE and a one-node cluster :$SOLO: redis-benchmark -p PORT ... RL.CHECK 'rl:__rand_int__' 100 1d"
# bench PORT [--cluster]: one redis-benchmark run of RL.CHECK; prints its requests per second.
bench() {
  local port=$1 out rps key='rl:__rand_int__'
  shift
  [ "${1:-}" = --cluster ] && key='rl:{tag}:__rand_int__'
  out=$(timeout 300 redis-benchmark -h 127.0.0.1 -p "$port" "$@" -n "$REQUESTS" -r 100000 -P 16 \
    -c 50 -q RL.CHECK "$key" 100 1d 2>&1) || die "redis-benchmark -p $port $*: $out"
  case "$out" in *[Ee]rror*|*MOVED*) die "redis-benchmark -p $port $*: $out" ;; esac
  rps=$(tr '\r' '\n' <<<"$out" | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1)
  [ -n "$rps" ] || die "redis-benchmark -p $port $*: no rate in $out"
  echo "${rps%.*}"
}
CLUSTER_RPS=() SINGLE_RPS=() SOLO_RPS=()
for r in $(seq 1 "$ROUNDS"); do
  c=$(bench "$N1" --cluster)
  s=$(bench "$SINGLE")
  o=$(bench "$SOLO")
  CLUSTER_RPS+=("$c") SINGLE_RPS+=("$s") SOLO_RPS+=("$o")
  echo "  round $r: 3-node cluster $c/s, one node $s/s, one-node cluster $o/s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
C_MED=$(median "${CLUSTER_RPS[@]}") S_MED=$(median "${SINGLE_RPS[@]}") O_MED=$(median "${SOLO_RPS[@]}")
echo "  median: 3-node cluster $C_MED/s, one node $S_MED/s: ratio $(ratio "$C_MED" "$S_MED")"
echo "          one-node cluster $O_MED/s: ratio $(ratio "$O_MED" "$S_MED") to the same node without cluster mode"
echo "  (2 cores: the three nodes and redis-benchmark share them, so the 3-node figure shows what"
echo "  cluster mode and three processes cost here, not how a cluster scales)"

echo
echo "== Summary"
echo "  add-node on 3 nodes with $KEYS buckets: $ADD_SLOTS slots moved ($(pct "$ADD_SLOTS" 16384)), $MOVED_KEYS buckets ($(pct "$MOVED_KEYS" "$TOTAL")),"
echo "  in $ADD_MS ms, longest write pause $ADD_PAUSE ms, $ADD_RESET buckets reset."
echo "  RL.CHECK throughput: 3-node cluster $C_MED/s vs one node $S_MED/s ($(ratio "$C_MED" "$S_MED")); one-node cluster $O_MED/s ($(ratio "$O_MED" "$S_MED"))."
