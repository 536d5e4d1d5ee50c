#!/usr/bin/env bash
# metrics-bench.sh — what the metrics cost RL.CHECK, and Envoy's ShouldRateLimit against RL.CHECK.
#
# Part 1 (issue 11's throughput figure): RL.CHECK with `--metrics-port` set against unset.
#   - server A: sluice --threads 1; server B: the same binary with --metrics-port, scraped once a
#     second during its runs (as Prometheus would, more often); optional server C (--baseline
#     PATH): a build from before the per-thread command and check counters, to show what the
#     counters themselves cost (they run with or without --metrics-port: INFO commandstats
#     needs them);
#   - each server pinned to CPU 0 with taskset, redis-benchmark to CPU 1: -c 50 -P 16 -n N of
#     `RL.CHECK rlt:__rand_int__ 1000000 100000000` over a preloaded keyspace (-r KEYS), so
#     every request updates an existing bucket and is allowed;
#   - interleaved rounds, the order rotating every round; per run: requests per second and the
#     server's CPU per request (utime+stime from /proc/PID/stat, the fairer figure when the
#     machine is shared);
#   - prints every round, then the ratios B/A (and A/C) as median, min and max over the rounds.
# Part 2 (issue 11's gRPC figure): one sluice --threads 1 --grpc-port, every thread of it on
#   CPU 0, with a config of one domain `bench` (key `key`, 4,000,000,000 per second, FIXED);
#   crates/sluice-envoy/examples/rls_load.rs on CPU 1 (4 HTTP/2 connections × 16 calls in
#   flight); then redis-benchmark -c 64 -P 1 of RL.CHECK ALGO FIXED on the same server: calls
#   per second, p50 and p99 of both, and the ratio.
#
# Usage: scripts/metrics-bench.sh [--rounds N] [--requests N] [--keys N] [--seconds N]
#                                 [--sluice PATH] [--baseline PATH] [--build] [--skip-grpc]
#   --rounds     interleaved rounds of part 1 (default 5)
#   --requests   requests per part-1 run (default 1000000)
#   --keys       preloaded buckets (default 100000)
#   --seconds    length of each part-2 run (default 5)
#   --sluice     the sluice binary (default target/release/sluice, or $SLUICE_BIN)
#   --baseline   a sluice binary built without the counters, for a third column
#   --build      build the release binary and the load generator first
#   --skip-grpc  part 1 only
#
# Needs redis-cli, redis-benchmark, taskset, curl, awk. Every process it starts is stopped by
# PID on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

ROUNDS=5 REQUESTS=1000000 KEYS=100000 SECONDS_GRPC=5 BUILD=0 SKIP_GRPC=0 BASELINE=""
SLUICE="${SLUICE_BIN:-$ROOT/target/release/sluice}"
LOADGEN="$ROOT/target/release/examples/rls_load"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift ;;
    --requests) REQUESTS="$2"; shift ;;
    --keys) KEYS="$2"; shift ;;
    --seconds) SECONDS_GRPC="$2"; shift ;;
    --sluice) SLUICE="$2"; shift ;;
    --baseline) BASELINE="$2"; shift ;;
    --build) BUILD=1 ;;
    --skip-grpc) SKIP_GRPC=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "[metrics-bench] $*" >&2; }
die() { echo "[metrics-bench] error: $*" >&2; exit 1; }

for tool in redis-cli redis-benchmark taskset curl awk; do
  command -v "$tool" >/dev/null || die "$tool is needed"
done
if [ "$BUILD" = 1 ] || [ ! -x "$SLUICE" ] || { [ "$SKIP_GRPC" = 0 ] && [ ! -x "$LOADGEN" ]; }; then
  log "building the release binary and the gRPC load generator"
  (cd "$ROOT" && cargo build --release --bin sluice >&2 &&
    cargo build --release -p sluice-envoy --example rls_load >&2)
fi
[ -x "$SLUICE" ] || die "no sluice binary at $SLUICE"
[ -z "$BASELINE" ] || [ -x "$BASELINE" ] || die "no baseline binary at $BASELINE"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-metrics-bench.XXXXXX")

TOKEN_ARGS=(1000000 100000000)

# start_server NAME BINARY ARGS...: sluice pinned to CPU 0; sets PORT and PID.
start_server() {
  local name=$1 bin=$2
  shift 2
  free_port
  taskset -c 0 "$bin" --port "$PORT" --bind 127.0.0.1 --threads 1 "$@" >"$WORK/$name.log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  wait_ready "$PORT" "$PID" || { cat "$WORK/$name.log" >&2; die "$name did not start"; }
}

TICK_US=$(awk -v hz="$(getconf CLK_TCK)" 'BEGIN { print 1000000 / hz }')

# run NAME PORT PID: one redis-benchmark run; appends "NAME rps cpu_us_per_request" to results.
run() {
  local name=$1 port=$2 pid=$3 c0 c1 rps
  c0=$(cpu_ticks "$pid")
  rps=$(taskset -c 1 redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -P 16 -n "$REQUESTS" \
    -r "$KEYS" --csv RL.CHECK rlt:__rand_int__ "${TOKEN_ARGS[@]}" 2>/dev/null |
    awk -F'"' 'NR == 2 { print $4 }')
  c1=$(cpu_ticks "$pid")
  [ -n "$rps" ] || die "redis-benchmark gave no figure for $name"
  awk -v n="$name" -v r="$rps" -v t="$((c1 - c0))" -v us="$TICK_US" -v req="$REQUESTS" \
    'BEGIN { printf "%s %.0f %.3f\n", n, r, t * us / req }' >>"$WORK/results"
  log "$(tail -1 "$WORK/results")"
}

# ---- Part 1: --metrics-port set against unset ----
start_server unset "$SLUICE"
A_PORT=$PORT A_PID=$PID
free_port
METRICS_PORT=$PORT
start_server set "$SLUICE" --metrics-port "$METRICS_PORT"
B_PORT=$PORT B_PID=$PID
NAMES=(unset set)
PORTS=("$A_PORT" "$B_PORT")
SPIDS=("$A_PID" "$B_PID")
if [ -n "$BASELINE" ]; then
  start_server baseline "$BASELINE"
  NAMES+=(baseline) PORTS+=("$PORT") SPIDS+=("$PID")
fi
for i in "${!NAMES[@]}"; do
  preload "${PORTS[$i]}" "$KEYS" rlt: RL.CHECK KEY "${TOKEN_ARGS[@]}" COST 1000
done
# The scraper: once a second, for the whole of part 1.
(while kill -0 "$B_PID" 2>/dev/null; do
  curl -s -o /dev/null "http://127.0.0.1:$METRICS_PORT/metrics" || true
  sleep 1
done) &
PIDS+=("$!")
curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" | grep -q '^sluice_checks_total' ||
  die "the set server's /metrics has no sluice_checks_total"

log "part 1: $ROUNDS rounds of ${#NAMES[@]} servers, $REQUESTS requests each"
: >"$WORK/results"
n=${#NAMES[@]}
for round in $(seq 1 "$ROUNDS"); do
  for k in $(seq 0 $((n - 1))); do
    i=$(((round + k) % n))
    run "${NAMES[$i]}" "${PORTS[$i]}" "${SPIDS[$i]}"
  done
done
CHECKS_SEEN=$(curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk '$1 == "sluice_commands_total{command=\"rl.check\"}" { print $2 }')

# ratio NUM DEN FIELD: per-round ratios of FIELD (2: rps, 3: CPU per request), as
# "median min max".
ratios() {
  awk -v a="$1" -v b="$2" -v f="$3" '
    $1 == a { x[++na] = $f } $1 == b { y[++nb] = $f }
    END {
      for (i = 1; i <= na && i <= nb; i++) r[i] = x[i] / y[i]
      m = (na < nb) ? na : nb
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
      med = (m % 2) ? r[(m + 1) / 2] : (r[m / 2] + r[m / 2 + 1]) / 2
      printf "%.3f (min %.3f, max %.3f)", med, r[1], r[m] }' "$WORK/results"
}

echo
echo "Part 1: RL.CHECK, redis-benchmark -c 50 -P 16 -n $REQUESTS -r $KEYS (preloaded), sluice --threads 1 on CPU 0, client on CPU 1"
echo "$ROUNDS interleaved rounds; the set server was scraped once a second (its rl.check count at the end: $CHECKS_SEEN)"
echo
printf '| %-8s | %5s | %12s | %16s |\n' server round "requests/s" "server CPU us/req"
echo "|----------|-------|--------------|------------------|"
awk '{ c[$1]++; printf "| %-8s | %5d | %12d | %16.3f |\n", $1, c[$1], $2, $3 }' "$WORK/results"
echo
echo "set ÷ unset, throughput:         $(ratios set unset 2)   (issue 11: ≥ 0.97)"
echo "set ÷ unset, CPU per request:    $(ratios set unset 3)   (lower is cheaper)"
if [ -n "$BASELINE" ]; then
  echo "unset ÷ baseline, throughput:    $(ratios unset baseline 2)   (the counters' cost)"
  echo "unset ÷ baseline, CPU per request: $(ratios unset baseline 3)"
fi
for pid in "${SPIDS[@]}"; do stop "$pid"; done

# ---- Part 2: ShouldRateLimit against RL.CHECK ----
[ "$SKIP_GRPC" = 1 ] && exit 0
[ -x "$LOADGEN" ] || die "no load generator at $LOADGEN (run with --build)"
mkdir -p "$WORK/envoy"
cat >"$WORK/envoy/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: key
    rate_limit:
      unit: second
      requests_per_unit: 4000000000
EOF
free_port
GRPC_PORT=$PORT
start_server grpc "$SLUICE" --grpc-port "$GRPC_PORT" --envoy-config "$WORK/envoy"
G_PORT=$PORT G_PID=$PID
log "part 2: ShouldRateLimit for ${SECONDS_GRPC}s"
GRPC_LINE=$(taskset -c 1 "$LOADGEN" --port "$GRPC_PORT" --domain bench --connections 4 \
  --concurrency 16 --seconds "$SECONDS_GRPC" --keys "$KEYS")
log "$GRPC_LINE"
RESP_CSV=$(taskset -c 1 redis-benchmark -h 127.0.0.1 -p "$G_PORT" -c 64 -P 1 -n "$REQUESTS" -r "$KEYS" \
  --csv RL.CHECK bench:__rand_int__ 4000000000 1 ALGO FIXED 2>/dev/null | awk 'NR == 2')
stop "$G_PID"
grpc_rps=$(echo "$GRPC_LINE" | sed 's/.*rps=\([0-9]*\).*/\1/')
grpc_p50=$(echo "$GRPC_LINE" | sed 's/.*p50_us=\([0-9]*\).*/\1/')
grpc_p99=$(echo "$GRPC_LINE" | sed 's/.*p99_us=\([0-9]*\).*/\1/')
resp_rps=$(echo "$RESP_CSV" | awk -F'"' '{ printf "%.0f", $4 }')
resp_p50=$(echo "$RESP_CSV" | awk -F'"' '{ printf "%.0f", $10 * 1000 }')
resp_p99=$(echo "$RESP_CSV" | awk -F'"' '{ printf "%.0f", $14 * 1000 }')
echo
echo "Part 2: one core (every sluice thread on CPU 0, the client on CPU 1), 64 calls in flight"
echo
printf '| %-44s | %10s | %8s | %8s |\n' api "calls/s" "p50 us" "p99 us"
echo "|----------------------------------------------|------------|----------|----------|"
printf '| %-44s | %10s | %8s | %8s |\n' "gRPC ShouldRateLimit (4 conns x 16 in flight)" "$grpc_rps" "$grpc_p50" "$grpc_p99"
printf '| %-44s | %10s | %8s | %8s |\n' "RESP RL.CHECK ALGO FIXED (-c 64 -P 1)" "$resp_rps" "$resp_p50" "$resp_p99"
echo
awk -v g="$grpc_rps" -v r="$resp_rps" 'BEGIN { printf "gRPC ÷ RESP throughput: %.3f\n", g / r }'
