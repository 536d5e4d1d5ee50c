#!/usr/bin/env bash
# rules-bench.sh — what named rules and snapshots cost (issue 10, "What must be shown"), in one run.
#
# 1. RL.HIT vs RL.CHECK. One sluice (--threads 1, pinned to CPU 0), redis-benchmark pinned to
#    CPU 1, -P 16 -c 50 -r 1000000: `RL.CHECK rl:__rand_int__ 100 60` against
#    `RL.HIT r __rand_int__` with rule r = LIMIT 100 PERIOD 60s (so both check the same kind of
#    bucket, keys of the same length). --rounds interleaved rounds, the order alternating;
#    each round's ratio, then the median, min and max ratio (the spread says how noisy the
#    shared machine was). Server CPU per request from /proc/PID/stat beside each run.
# 2. Three rules at once. `RL.HITS __rand_int__ a b c` (three rules of 100 per 60 s) against
#    RL.CHECK: a three-rule decision made by one RL.HITS versus made by three RL.CHECK calls,
#    i.e. RL.HITS rps against RL.CHECK rps ÷ 3, and server CPU per decision (one RL.HITS vs
#    three RL.CHECKs).
# 3. Propagation. etcd on free loopback ports, two sluice nodes with --rules-etcd. --changes
#    times: a rule's new LIMIT is written to etcd directly (etcd's v3 HTTP gateway, with curl;
#    no node is the writer), then both nodes are polled (`RL.HIT p probe COST 0`, its limit
#    field) until both enforce it; the time from before the write to the poll that saw it on
#    the last node, and the same from the moment etcd acknowledged the put (etcd's own commit,
#    an fsync of its log, is in the first figure only). Polling granularity is one redis-cli
#    call per node (~2-5 ms): the figures are upper bounds.
# 4. Snapshots. A sluice with --dir, preloaded with --keys TOKEN buckets (16-byte keys) through
#    redis-cli --pipe; SAVE timed (wall clock around redis-cli SAVE), the file's size; then
#    SIGTERM (the shutdown save's own log line) and a restart on the same directory (its
#    "snapshot loaded: N entries in X ms" line), and DBSIZE after.
#
# Usage: scripts/rules-bench.sh [--rounds N] [--duration SECONDS] [--keys N] [--changes N]
#                               [--sluice PATH] [--build]
#   --rounds    interleaved rounds for 1 and 2 (default 5)
#   --duration  seconds per redis-benchmark run (default 3); -n sized by a probe run
#   --keys      buckets for the snapshot figures (default 1,000,000)
#   --changes   rule changes timed for propagation (default 20)
#   --sluice    the binary (default target/release/sluice or $SLUICE_BIN)
#   --build     cargo build --release --bin sluice first, even if the binary exists
#   --only P    run one part: rules (1 and 2), etcd (3) or snapshot (4)
#
# Needs redis-cli, redis-benchmark, etcd, curl, taskset, awk. Binds 127.0.0.1 only; every
# process it starts is stopped by its PID on exit (scripts/lib.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

ROUNDS=5 DURATION=3 KEYS=1000000 CHANGES=20 BUILD=0 CLIENTS=50 ONLY=all
TARGET_DIR=${CARGO_TARGET_DIR:-target}
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
SLUICE="${SLUICE_BIN:-$TARGET_DIR/release/sluice}"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift ;;
    --duration) DURATION="$2"; shift ;;
    --keys) KEYS="$2"; shift ;;
    --changes) CHANGES="$2"; shift ;;
    --sluice) SLUICE="$2"; shift ;;
    --build) BUILD=1 ;;
    --only) ONLY="$2"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "[rules-bench] $*" >&2; }
die() { echo "[rules-bench] error: $*" >&2; exit 1; }

for tool in redis-cli redis-benchmark etcd curl taskset awk; do
  command -v "$tool" >/dev/null || die "$tool is missing"
done
if [ "$BUILD" = 1 ] || [ ! -x "$SLUICE" ]; then
  log "building the release binary"
  (cd "$ROOT" && cargo build --release --bin sluice >&2)
fi
[ -x "$SLUICE" ] || die "no sluice binary at $SLUICE"
if [ "$(nproc)" -ge 2 ]; then SERVER_CPU=0 CLIENT_CPU=1; else SERVER_CPU=0 CLIENT_CPU=0; fi
HZ=$(getconf CLK_TCK)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-rules-bench.XXXXXX")

# start_sluice EXTRA_ARGS...: sets S_PORT, S_PID, S_LOG.
start_sluice() {
  free_port
  S_PORT=$PORT
  S_LOG="$WORK/sluice-$S_PORT.log"
  taskset -c "$SERVER_CPU" "$SLUICE" --port "$S_PORT" --bind 127.0.0.1 --threads 1 "$@" >"$S_LOG" 2>&1 &
  S_PID=$!
  PIDS+=("$S_PID")
  wait_ready "$S_PORT" "$S_PID" || { cat "$S_LOG" >&2; die "sluice on $S_PORT did not start"; }
}


# bench PORT PID N CMD... -> "rps cpu_us_per_request"
bench() {
  local port=$1 pid=$2 n=$3 out rps t0 t1
  shift 3
  t0=$(cpu_ticks "$pid")
  out=$(taskset -c "$CLIENT_CPU" redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -P 16 \
    -n "$n" -r 1000000 --csv "$@" 2>"$WORK/bench.err") || { cat "$WORK/bench.err" >&2; die "redis-benchmark: $*"; }
  t1=$(cpu_ticks "$pid")
  rps=$(printf '%s\n' "$out" | grep -v '^"test"' | tail -1 | tr -d '"' | awk -F, '{ print $2 }')
  awk -v r="$rps" -v a="$t0" -v b="$t1" -v n="$n" -v hz="$HZ" \
    'BEGIN { printf "%d %.3f\n", r, (b - a) / hz * 1e6 / n }'
}

# size PORT PID CMD...: -n for --duration seconds, from a probe run.
size() {
  local port=$1 pid=$2 probe
  shift 2
  probe=$(bench "$port" "$pid" 40000 "$@")
  awk -v r="${probe%% *}" -v d="$DURATION" 'BEGIN { n = int(r * d); if (n < 40000) n = 40000; print n }'
}

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

part() { [ "$ONLY" = all ] || [ "$ONLY" = "$1" ]; }

# ---------------------------------------------------------------------------------------------
# 1 and 2: RL.HIT, RL.HITS, RL.CHECK on one server.

if part rules; then

start_sluice
P1=$S_PORT PID1=$S_PID
for r in r a b c; do redis-cli -p "$P1" RL.RULE SET "$r" LIMIT 100 PERIOD 60s >/dev/null; done
CHECK=(RL.CHECK rl:__rand_int__ 100 60)
HIT=(RL.HIT r __rand_int__)
HITS=(RL.HITS __rand_int__ a b c)
N_CHECK=$(size "$P1" "$PID1" "${CHECK[@]}")
N_HIT=$(size "$P1" "$PID1" "${HIT[@]}")
N_HITS=$(size "$P1" "$PID1" "${HITS[@]}")
log "sluice $SLUICE on CPU $SERVER_CPU, redis-benchmark on CPU $CLIENT_CPU, -P 16 -c $CLIENTS, $ROUNDS rounds of ${DURATION}s"
: >"$WORK/hit_ratio"; : >"$WORK/hits_ratio"; : >"$WORK/hits_cpu_ratio"; : >"$WORK/hit_cpu_ratio"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then order="check hit hits"; else order="hits hit check"; fi
  for t in $order; do
    case $t in
      check) read -r c_rps c_cpu < <(bench "$P1" "$PID1" "$N_CHECK" "${CHECK[@]}") ;;
      hit) read -r h_rps h_cpu < <(bench "$P1" "$PID1" "$N_HIT" "${HIT[@]}") ;;
      hits) read -r m_rps m_cpu < <(bench "$P1" "$PID1" "$N_HITS" "${HITS[@]}") ;;
    esac
  done
  awk -v c="$c_rps" -v h="$h_rps" 'BEGIN { printf "%.3f\n", h / c }' >>"$WORK/hit_ratio"
  awk -v c="$c_cpu" -v h="$h_cpu" 'BEGIN { printf "%.3f\n", c / h }' >>"$WORK/hit_cpu_ratio"
  awk -v c="$c_rps" -v m="$m_rps" 'BEGIN { printf "%.3f\n", m / (c / 3) }' >>"$WORK/hits_ratio"
  awk -v c="$c_cpu" -v m="$m_cpu" 'BEGIN { printf "%.3f\n", 3 * c / m }' >>"$WORK/hits_cpu_ratio"
  printf '[bench] round %d: RL.CHECK %8d rps %6.3f us/req | RL.HIT %8d rps %6.3f us/req | RL.HITS(3) %8d rps %6.3f us/req\n' \
    "$round" "$c_rps" "$c_cpu" "$h_rps" "$h_cpu" "$m_rps" "$m_cpu" >&2
done
spread() { # FILE -> "median (min-max)"
  printf '%s (%s-%s)' "$(median <"$1")" "$(sort -g "$1" | head -1)" "$(sort -g "$1" | tail -1)"
}
echo "RL.HIT / RL.CHECK throughput at -P 16:                 $(spread "$WORK/hit_ratio")"
echo "RL.CHECK / RL.HIT server CPU per request:              $(spread "$WORK/hit_cpu_ratio")"
echo "RL.HITS (3 rules) / three RL.CHECKs, decisions per s:  $(spread "$WORK/hits_ratio")"
echo "three RL.CHECKs / one RL.HITS, server CPU per decision: $(spread "$WORK/hits_cpu_ratio")"
stop "$PID1"
fi

# ---------------------------------------------------------------------------------------------
# 3. Propagation from an etcd write to every node enforcing.

if part etcd; then

free_port; E_PORT=$PORT; free_port; E_PEER=$PORT
etcd --name rb --data-dir "$WORK/etcd" --listen-client-urls "http://127.0.0.1:$E_PORT" \
  --advertise-client-urls "http://127.0.0.1:$E_PORT" --listen-peer-urls "http://127.0.0.1:$E_PEER" \
  --initial-advertise-peer-urls "http://127.0.0.1:$E_PEER" \
  --initial-cluster "rb=http://127.0.0.1:$E_PEER" >"$WORK/etcd.log" 2>&1 &
E_PID=$!
PIDS+=("$E_PID")
etcd_healthy() { curl -sf "http://127.0.0.1:$E_PORT/health" | grep -q '"health":"true"'; }
wait_for 20 "etcd" etcd_healthy
b64() { printf '%s' "$1" | base64 -w0; }
etcd_put() { # KEY VALUE
  curl -sf "http://127.0.0.1:$E_PORT/v3/kv/put" \
    -d "{\"key\":\"$(b64 "$1")\",\"value\":\"$(b64 "$2")\"}" >/dev/null
}
etcd_put /sluice/rules/p "LIMIT 1000 PERIOD 1m"
start_sluice --rules-etcd "http://127.0.0.1:$E_PORT"
NA=$S_PORT
start_sluice --rules-etcd "http://127.0.0.1:$E_PORT"
NB=$S_PORT
limit_on() { redis-cli -p "$1" RL.HIT p probe COST 0 | sed -n 2p; }
: >"$WORK/prop"; : >"$WORK/prop_acked"
for i in $(seq 1 "$CHANGES"); do
  want=$((1000 + i))
  t0=$(date +%s%N)
  etcd_put /sluice/rules/p "LIMIT $want PERIOD 1m"
  ta=$(date +%s%N)
  for node in "$NA" "$NB"; do
    seen=0
    for _ in $(seq 1 2000); do
      if [ "$(limit_on "$node")" = "$want" ]; then seen=1; break; fi
    done
    [ "$seen" = 1 ] || die "node $node never enforced LIMIT $want"
  done
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000)) >>"$WORK/prop"
  echo $(((t1 - ta) / 1000)) >>"$WORK/prop_acked"
done
ms() { awk '{ printf "%.1f", $1 / 1000 }'; }
# The floor of this measurement: one poll of each node when nothing changes.
: >"$WORK/floor"
for _ in $(seq 1 "$CHANGES"); do
  t0=$(date +%s%N); limit_on "$NA" >/dev/null; limit_on "$NB" >/dev/null; t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000)) >>"$WORK/floor"
done
echo "polling floor (one redis-cli call per node, no change): median $(median <"$WORK/floor" | ms) ms"
echo "etcd write sent -> both nodes enforcing, ms over $CHANGES changes: median $(median <"$WORK/prop" | ms), max $(sort -g "$WORK/prop" | tail -1 | ms)"
echo "etcd write acked -> both nodes enforcing, ms over $CHANGES changes: median $(median <"$WORK/prop_acked" | ms), max $(sort -g "$WORK/prop_acked" | tail -1 | ms)"
fi

# ---------------------------------------------------------------------------------------------
# 4. Snapshot save and load for --keys buckets.

part snapshot || exit 0

mkdir -p "$WORK/snap"
start_sluice --dir "$WORK/snap" --save-interval 0
SP=$S_PORT SPID=$S_PID SLOG=$S_LOG
log "preloading $KEYS buckets"
preload "$SP" "$KEYS" rlt: RL.CHECK KEY 1000000 100000000 COST 1000
t0=$(date +%s%N)
[ "$(redis-cli -p "$SP" SAVE)" = OK ] || die "SAVE failed"
t1=$(date +%s%N)
size_b=$(stat -c %s "$WORK/snap/sluice.snap")
echo "SAVE of $KEYS buckets: $(((t1 - t0) / 1000000)) ms wall, $size_b bytes ($(awk -v s="$size_b" -v k="$KEYS" 'BEGIN { printf "%.1f", s / k }') bytes/bucket)"
kill -TERM "$SPID"
wait "$SPID" 2>/dev/null || true
forget "$SPID"
echo "shutdown save: $(grep -o 'Saving the final snapshot: .*' "$SLOG")"
start_sluice --dir "$WORK/snap" --save-interval 0
echo "load at start: $(grep -o 'snapshot loaded: .*' "$S_LOG"); DBSIZE after: $(redis-cli -p "$S_PORT" DBSIZE)"
