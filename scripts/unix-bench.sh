#!/usr/bin/env bash
# unix-bench.sh — server CPU per request over a Unix socket, Sluice against Redis, in one run.
#
# The figure: a server's user + system ticks from /proc/PID/stat (every thread), read before
# and after a fixed load, divided by the requests of that load (as scripts/cpu-per-request.sh).
#
# Setup (issue 42): Redis (--save '' --appendonly no, --unixsocket) and Sluice (--threads 1,
# --unixsocket, one server per connection loop), all pinned to CPU 0; redis-benchmark pinned
# to CPU 1, -c 50 -P 1 (a gateway that does not pipeline); Sluice's checks on --keys preloaded
# 16-byte keys (`rlt:000000123456`), every one allowed. Rows, side by side in alternating rounds
# (the best of --rounds):
#   - Redis PING over TCP, and over its Unix socket;
#   - Sluice RL.CHECK over its Unix socket (each --io loop), and over TCP for reference.
# It prints the table, and the ratios the issue asks for: Sluice RL.CHECK over the socket ÷
# Redis PING over its socket, and ÷ Redis PING over TCP.
#
# Usage: scripts/unix-bench.sh [--keys N] [--requests N] [--rounds N] [--io LOOPS]
#                              [--sluice PATH] [--build]
#   --keys       preloaded buckets (default 1,000,000)
#   --requests   requests per measured run (default 500,000)
#   --rounds     alternating rounds; the table shows the best (default 2)
#   --io         Sluice's connection loops, comma-separated (default uring,epoll)
#   --sluice     the sluice binary (default: the release build's, or $SLUICE_BIN)
#   --build      run `cargo build --release --bin sluice` first
#
# Needs redis-server, redis-cli, redis-benchmark, taskset and awk. Every process it starts is
# stopped by PID on exit; the sockets live in a scratch directory removed then.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

KEYS=1000000 REQUESTS=500000 ROUNDS=2 BUILD=0 CLIENTS=50 IO_LOOPS=uring,epoll SLUICE=
while [ $# -gt 0 ]; do
  case "$1" in
    --keys) KEYS="$2"; shift ;;
    --requests) REQUESTS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --io) IO_LOOPS="$2"; shift ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done

log() { echo "[unix] $*" >&2; }
die() { echo "[unix] error: $*" >&2; exit 1; }

need_tools redis-server redis-cli redis-benchmark taskset awk
need_sluice
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs: the servers on CPU 0, the client on CPU 1"
IO_LOOPS=${IO_LOOPS//,/ }
for io in $IO_LOOPS; do
  case "$io" in epoll|uring) ;; *) die "--io takes epoll, uring or both, not $io" ;; esac
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-unix.XXXXXX")
TICK_NS=$((1000000000 / $(getconf CLK_TCK)))
LIMIT=1000000 PERIOD_S=100000000

# measure LABEL PID TARGET N CMD...: server CPU ns per request over one run of N requests
# against TARGET (`-s PATH` or `-h 127.0.0.1 -p PORT`, one word, split here), appended to
# $WORK/LABEL.
measure() {
  local label=$1 pid=$2 target=$3 n=$4 t0 t1
  shift 4
  t0=$(cpu_ticks "$pid")
  # shellcheck disable=SC2086 # TARGET is two or four words on purpose
  taskset -c 1 redis-benchmark $target -c "$CLIENTS" -P 1 -n "$n" -r "$KEYS" -q "$@" \
    >"$WORK/bench.out" 2>"$WORK/bench.err" || {
    cat "$WORK/bench.err" >&2
    die "redis-benchmark failed: $target $*"
  }
  t1=$(cpu_ticks "$pid")
  awk -v d=$((t1 - t0)) -v t="$TICK_NS" -v n="$n" 'BEGIN { printf "%.0f\n", d * t / n }' \
    | tee -a "$WORK/$label" | awk -v l="$label" '{ printf "[unix] %-24s %6d ns/request\n", l, $1 }' >&2
}

STARTED=$SECONDS
start_pinned 0 redis redis-server --bind 127.0.0.1 --save '' --appendonly no --protected-mode no \
  --dir "$WORK" --unixsocket "$WORK/redis.sock" --unixsocketperm 700
for io in $IO_LOOPS; do
  start_pinned 0 "sluice_$io" "$SLUICE" --bind 127.0.0.1 --threads 1 --io "$io" \
    --unixsocket "$WORK/sluice-$io.sock"
  port="PORT_sluice_$io"
  log "preloading $KEYS buckets into Sluice ($io)"
  preload "${!port}" "$KEYS" rlt: RL.CHECK KEY "$LIMIT" "$PERIOD_S" COST 1000
  first=$(redis-cli -s "$WORK/sluice-$io.sock" RL.CHECK rlt:000000000000 "$LIMIT" "$PERIOD_S" | head -1)
  [ "$first" = 1 ] || die "Sluice ($io) over its socket answered '$first', not an allowed decision"
done
[ "$(redis-cli -s "$WORK/redis.sock" PING)" = PONG ] || die "Redis does not answer on its socket"

CHECK=(RL.CHECK rlt:__rand_int__ "$LIMIT" "$PERIOD_S")
redis_rows() {
  measure redis-tcp-PING "$PID_redis" "-h 127.0.0.1 -p $PORT_redis" "$REQUESTS" PING
  measure redis-unix-PING "$PID_redis" "-s $WORK/redis.sock" "$REQUESTS" PING
}
sluice_rows() {
  local io pid port
  for io in $IO_LOOPS; do
    pid="PID_sluice_$io" port="PORT_sluice_$io"
    measure "sluice-$io-unix-CHECK" "${!pid}" "-s $WORK/sluice-$io.sock" "$REQUESTS" "${CHECK[@]}"
    measure "sluice-$io-tcp-CHECK" "${!pid}" "-h 127.0.0.1 -p ${!port}" "$REQUESTS" "${CHECK[@]}"
  done
}
for round in $(seq 1 "$ROUNDS"); do
  log "round $round of $ROUNDS"
  if [ $((round % 2)) = 1 ]; then redis_rows; sluice_rows; else sluice_rows; redis_rows; fi
done

best() { sort -n "$WORK/$1" | head -1; }
UNIX_PING=$(best redis-unix-PING) TCP_PING=$(best redis-tcp-PING)
echo
echo "Server CPU per request over a Unix socket, $(date -u +%Y-%m-%dT%H:%MZ), $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
echo "Redis $(redis-server --version | awk '{ print $3 }' | tr -d 'v='); servers on CPU 0, redis-benchmark on CPU 1, -c $CLIENTS -P 1, $KEYS preloaded keys;"
echo "(utime + stime) from /proc/PID/stat ÷ requests, best of $ROUNDS alternating round(s). Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
printf '| %-36s | %11s | %19s | %16s |\n' request "CPU/request" "÷ Redis PING (unix)" "÷ Redis PING (tcp)"
echo "|--------------------------------------|-------------|---------------------|--------------------|"
row() { # LABEL FILE
  awk -v l="$1" -v v="$(best "$2")" -v u="$UNIX_PING" -v t="$TCP_PING" \
    'BEGIN { printf "| %-36s | %8d ns | %18.2f× | %17.2f× |\n", l, v, v / u, v / t }'
}
row "Redis PING, TCP" redis-tcp-PING
row "Redis PING, Unix socket" redis-unix-PING
for io in $IO_LOOPS; do
  row "Sluice RL.CHECK, Unix socket ($io)" "sluice-$io-unix-CHECK"
  row "Sluice RL.CHECK, TCP ($io)" "sluice-$io-tcp-CHECK"
done
echo
echo "Total time: $((SECONDS - STARTED)) s."
