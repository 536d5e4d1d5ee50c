#!/usr/bin/env bash
# cpu-per-request.sh — server CPU time per request, Sluice against Redis, in one run.
#
# The figure: a server's user + system ticks from /proc/PID/stat (every thread; kernel time and
# cache misses included), read before and after a fixed load, divided by the requests of that
# load. It is the fair measure where redis-benchmark, not the server, is the bottleneck.
#
# Setup (issue 12's table):
#   - Redis (--save '' --appendonly no, scripts/lua/token_bucket.lua loaded) and Sluice
#     (--threads 1), both pinned to CPU 0; redis-benchmark pinned to CPU 1, -c 50 -P 16;
#   - 1,000,000 preloaded 16-byte keys on both (`rlt:000000123456`, the names `-r` gives
#     `__rand_int__`), capacity 1,000,000 refilled at 0.01/s, so every request is allowed and
#     updates an existing bucket;
#   - rows: Redis PING, Redis INCR, Redis EVALSHA token bucket, Sluice PING, Sluice RL.CHECK,
#     and Sluice PING / RL.CHECK with --threads 2 (server and client then share CPUs 0-1);
#   - best (lowest) of --rounds alternating rounds (default 2).
# It prints the table, each row's ratio to Redis PING, and the p99 latency redis-benchmark saw
# (the lowest and highest of the rounds).
#
# Usage: scripts/cpu-per-request.sh [--keys N] [--requests N] [--rounds N] [--sluice PATH]
#                                   [--before PATH] [--build] [--io LOOPS] [--pipeline N]
#   --keys       preloaded buckets (default 1,000,000)
#   --requests   requests per measured run at -P 16 (default 2,000,000; EVALSHA runs a tenth)
#   --rounds     alternating rounds; the table shows the best (default 2)
#   --sluice     the sluice binary (default target/release/sluice, or $SLUICE_BIN)
#   --before     an older sluice binary, measured in the same rounds (rows "... before") so a
#                change is compared before and after in one run
#   --build      run `cargo build --release --bin sluice` first
#   --io         Sluice's connection loops to measure, comma-separated: epoll (default), uring,
#                or epoll,uring for both side by side (one server each, rows "Sluice ... (LOOP)")
#   --pipeline   requests in flight per connection (-P; default 16); -P 1 is a gateway that
#                does not pipeline
#
# Needs redis-server, redis-cli, redis-benchmark, taskset and awk. Every process it starts is
# stopped by PID on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

KEYS=1000000 REQUESTS=2000000 ROUNDS=2 BUILD=0 CLIENTS=50 PIPELINE=16 BEFORE= IO_LOOPS=epoll
SLUICE="${SLUICE_BIN:-$ROOT/target/release/sluice}"
while [ $# -gt 0 ]; do
  case "$1" in
    --keys) KEYS="$2"; shift ;;
    --requests) REQUESTS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --sluice) SLUICE="$2"; shift ;;
    --before) BEFORE="$2"; shift ;;
    --build) BUILD=1 ;;
    --io) IO_LOOPS="$2"; shift ;;
    --pipeline) PIPELINE="$2"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "[cpu] $*" >&2; }
die() { echo "[cpu] error: $*" >&2; exit 1; }

for tool in redis-server redis-cli redis-benchmark taskset awk; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install -y redis-server redis-tools util-linux mawk)"
done
if [ "$BUILD" = 1 ] || [ ! -x "$SLUICE" ]; then
  log "building the release binary"
  (cd "$ROOT" && cargo build --release --bin sluice >&2)
fi
[ -x "$SLUICE" ] || die "no sluice binary at $SLUICE"
[ -z "$BEFORE" ] || [ -x "$BEFORE" ] || die "no sluice binary at $BEFORE"
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs: the server on CPU 0, the client on CPU 1"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-cpu.XXXXXX")
TICK_NS=$((1000000000 / $(getconf CLK_TCK)))
LIMIT=1000000 PERIOD_S=100000000 PERIOD_MS=100000000000


IO_LOOPS=${IO_LOOPS//,/ }
for io in $IO_LOOPS; do
  case "$io" in epoll|uring) ;; *) die "--io takes epoll, uring or both (epoll,uring), not $io" ;; esac
done

# measure LABEL PID PORT CLIENT_CPUS N CMD...: server CPU ns per request over one run of N
# requests, appended to $WORK/LABEL, and the run's p99 latency (ms) to $WORK/LABEL.p99.
measure() {
  local label=$1 pid=$2 port=$3 cpus=$4 n=$5 t0 t1 line
  shift 5
  t0=$(cpu_ticks "$pid")
  line=$(bench_csv "$cpus" "$port" -c "$CLIENTS" -P "$PIPELINE" -n "$n" -r "$KEYS" "$@")
  t1=$(cpu_ticks "$pid")
  printf '%s\n' "$line" | awk -F, '{ print $7 }' >>"$WORK/$label.p99"
  awk -v d=$((t1 - t0)) -v t="$TICK_NS" -v n="$n" 'BEGIN { printf "%.0f\n", d * t / n }' \
    | tee -a "$WORK/$label" | awk -v l="$label" '{ printf "[cpu] %-22s %6d ns/request\n", l, $1 }' >&2
}

expect_allowed() { # PORT CMD...
  local port=$1 first
  shift
  first=$(redis-cli -p "$port" "$@" 2>&1 | head -1)
  [ "$first" = 1 ] || die "port $port: '$*' answered '$first', not an allowed decision"
}

STARTED=$SECONDS
start_pinned 0 redis redis-server --bind 127.0.0.1 --save '' --appendonly no --protected-mode no \
  --dir "$WORK"
for io in $IO_LOOPS; do
  start_pinned 0 "sluice_$io" "$SLUICE" --bind 127.0.0.1 --threads 1 --io "$io"
done
[ -z "$BEFORE" ] || start_pinned 0 before "$BEFORE" --bind 127.0.0.1 --threads 1
SHA=$(redis-cli -p "$PORT_redis" SCRIPT LOAD "$(cat "$ROOT/scripts/lua/token_bucket.lua")")
[ ${#SHA} = 40 ] || die "SCRIPT LOAD failed: $SHA"
log "preloading $KEYS buckets into each server"
preload "$PORT_redis" "$KEYS" rlt: EVALSHA "$SHA" 1 KEY "$LIMIT" "$PERIOD_MS" "$LIMIT" 1000
for io in $IO_LOOPS; do
  port="PORT_sluice_$io"
  preload "${!port}" "$KEYS" rlt: RL.CHECK KEY "$LIMIT" "$PERIOD_S" COST 1000
  expect_allowed "${!port}" RL.CHECK rlt:000000000000 "$LIMIT" "$PERIOD_S"
done
[ -z "$BEFORE" ] || preload "$PORT_before" "$KEYS" rlt: RL.CHECK KEY "$LIMIT" "$PERIOD_S" COST 1000
expect_allowed "$PORT_redis" EVALSHA "$SHA" 1 rlt:000000000000 "$LIMIT" "$PERIOD_MS" "$LIMIT" 1

EVAL_N=$((REQUESTS / 10))
redis_rows() {
  measure redis-PING "$PID_redis" "$PORT_redis" 1 "$REQUESTS" PING
  measure redis-INCR "$PID_redis" "$PORT_redis" 1 "$REQUESTS" INCR ctr:__rand_int__
  measure redis-EVALSHA "$PID_redis" "$PORT_redis" 1 "$EVAL_N" \
    EVALSHA "$SHA" 1 rlt:__rand_int__ "$LIMIT" "$PERIOD_MS" "$LIMIT" 1
}
sluice_rows() {
  local io pid port
  for io in $IO_LOOPS; do
    pid="PID_sluice_$io" port="PORT_sluice_$io"
    measure "sluice-$io-PING" "${!pid}" "${!port}" 1 "$REQUESTS" PING
    measure "sluice-$io-RL.CHECK" "${!pid}" "${!port}" 1 "$REQUESTS" \
      RL.CHECK rlt:__rand_int__ "$LIMIT" "$PERIOD_S"
  done
  [ -n "$BEFORE" ] || return 0
  measure before-PING "$PID_before" "$PORT_before" 1 "$REQUESTS" PING
  measure before-RL.CHECK "$PID_before" "$PORT_before" 1 "$REQUESTS" \
    RL.CHECK rlt:__rand_int__ "$LIMIT" "$PERIOD_S"
}
for round in $(seq 1 "$ROUNDS"); do
  log "round $round of $ROUNDS"
  if [ $((round % 2)) = 1 ]; then redis_rows; sluice_rows; else sluice_rows; redis_rows; fi
done
for io in $IO_LOOPS; do
  pid="PID_sluice_$io"
  stop "${!pid}"
done
[ -z "$BEFORE" ] || stop "$PID_before"

for io in $IO_LOOPS; do
  log "--threads 2 --io $io: server and client on CPUs 0-1"
  start_pinned 0,1 sluice2 "$SLUICE" --bind 127.0.0.1 --threads 2 --io "$io"
  preload "$PORT_sluice2" "$KEYS" rlt: RL.CHECK KEY "$LIMIT" "$PERIOD_S" COST 1000
  for round in $(seq 1 "$ROUNDS"); do
    measure "sluice-t2-$io-PING" "$PID_sluice2" "$PORT_sluice2" 0,1 "$REQUESTS" PING
    measure "sluice-t2-$io-RL.CHECK" "$PID_sluice2" "$PORT_sluice2" 0,1 "$REQUESTS" \
      RL.CHECK rlt:__rand_int__ "$LIMIT" "$PERIOD_S"
  done
  stop "$PID_sluice2"
done
stop "$PID_redis"

best() { sort -n "$WORK/$1" | head -1; }
PING_NS=$(best redis-PING)
echo
echo "Server CPU per request, $(date -u +%Y-%m-%dT%H:%MZ), $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
echo "Redis $(redis-server --version | awk '{ print $3 }' | tr -d 'v='); servers on CPU 0, redis-benchmark on CPU 1, -c $CLIENTS -P $PIPELINE, $KEYS preloaded keys;"
echo "(utime + stime) from /proc/PID/stat ÷ requests, best of $ROUNDS alternating round(s);"
echo "p99: redis-benchmark's, lowest–highest of the rounds. Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
echo
printf '| %-46s | %11s | %12s | %15s |\n' request "CPU/request" "÷ Redis PING" "p99 (ms)"
echo "|------------------------------------------------|-------------|--------------|-----------------|"
row() { # LABEL FILE
  local p99
  p99=$(sort -n "$WORK/$2.p99" | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.3f–%.3f", lo, hi }')
  awk -v l="$1" -v v="$(best "$2")" -v p="$PING_NS" -v q="$p99" \
    'BEGIN { printf "| %-46s | %8d ns | %11.2f× | %15s |\n", l, v, v / p, q }'
}
row "Redis PING" redis-PING
row "Redis INCR" redis-INCR
row "Redis EVALSHA token bucket" redis-EVALSHA
for io in $IO_LOOPS; do
  row "Sluice PING ($io)" "sluice-$io-PING"
  row "Sluice RL.CHECK ($io)" "sluice-$io-RL.CHECK"
done
if [ -n "$BEFORE" ]; then
  row "Sluice PING, before ($(basename "$BEFORE"))" before-PING
  row "Sluice RL.CHECK, before ($(basename "$BEFORE"))" before-RL.CHECK
fi
for io in $IO_LOOPS; do
  row "Sluice PING ($io), --threads 2 (CPUs 0-1)" "sluice-t2-$io-PING"
  row "Sluice RL.CHECK ($io), --threads 2 (CPUs 0-1)" "sluice-t2-$io-RL.CHECK"
done
echo
echo "Total time: $((SECONDS - STARTED)) s."
