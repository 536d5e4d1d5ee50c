#!/usr/bin/env bash
# tls-bench.sh — server CPU per RL.CHECK over TLS against plain TCP, side by side.
#
# One sluice (--threads 1, pinned to CPU 0) serves both ports: --port (plain) and --tls-port
# (TLS 1.3, rustls, --tls-auth-clients no); redis-benchmark runs on CPU 1 against each in
# alternating rounds. The figure: the server's user + system ticks from /proc/PID/stat read
# before and after a fixed load, divided by its requests. Buckets are preloaded (capacity
# 1,000,000, refilled slowly) so every request is an allowed check of an existing bucket.
#
# Rows: -P 1 (each request its own TLS record both ways: the cost a gateway making one check
# per HTTP request pays) and -P 16 (pipelined: records carry 16 requests), each with -c 50
# connections made before the load (the handshakes are outside the figure; redis-benchmark
# opens its connections once). Then the TLS ÷ plain ratio of each.
#
# Usage: scripts/tls-bench.sh [--requests N] [--keys N] [--rounds N] [--sluice PATH] [--build]
#   --requests   requests per measured run at -P 16 (default 1,000,000; -P 1 runs a fifth)
#   --keys       preloaded buckets (default 100,000)
#   --rounds     alternating rounds; the table shows the best (default 2)
#   --sluice     the sluice binary (default target/release/sluice, or $SLUICE_BIN)
#   --build      run `cargo build --release --bin sluice` first
#
# Needs redis-cli and redis-benchmark with TLS (Debian's have it), openssl, taskset, awk.
# Every process it starts is stopped by PID on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

KEYS=100000 REQUESTS=1000000 ROUNDS=2 BUILD=0 CLIENTS=50
SLUICE="${SLUICE_BIN:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) REQUESTS="$2"; shift ;;
    --keys) KEYS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done

log() { echo "[tls] $*" >&2; }
die() { echo "[tls] error: $*" >&2; exit 1; }

for tool in redis-cli redis-benchmark openssl taskset awk; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install -y redis-tools openssl util-linux mawk)"
done
redis-benchmark --help 2>&1 | grep -q -- '--tls' || die "this redis-benchmark has no --tls"
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs: the server on CPU 0, the client on CPU 1"
need_sluice

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-tls.XXXXXX")
TICK_NS=$((1000000000 / $(getconf CLK_TCK)))
LIMIT=1000000 PERIOD_S=100000000

log "making a test CA and a certificate for 127.0.0.1"
(
  cd "$WORK"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 \
    -subj "/CN=tls-bench CA" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout node.key -out node.csr -subj "/CN=node" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\n' >ext.cnf
  openssl x509 -req -in node.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out node.crt \
    -days 1 -extfile ext.cnf 2>/dev/null
)

free_port
TLS_PORT=$PORT
start_pinned 0 sluice "$SLUICE" --bind 127.0.0.1 --threads 1 --tls-port "$TLS_PORT" \
  --tls-cert-file "$WORK/node.crt" --tls-key-file "$WORK/node.key" --tls-auth-clients no
log "preloading $KEYS buckets"
preload "$PORT_sluice" "$KEYS" rlt: RL.CHECK KEY "$LIMIT" "$PERIOD_S" COST 1000
first=$(redis-cli -p "$TLS_PORT" --tls --cacert "$WORK/ca.crt" RL.CHECK rlt:000000000000 "$LIMIT" "$PERIOD_S" | head -1)
[ "$first" = 1 ] || die "RL.CHECK over TLS answered '$first'"

# measure LABEL PIPELINE N [TLS OPTIONS...]: server CPU ns per request over one run.
measure() {
  local label=$1 pipeline=$2 n=$3 port=$PORT_sluice t0 t1
  shift 3
  [ $# -eq 0 ] || port=$TLS_PORT
  t0=$(cpu_ticks "$PID_sluice")
  taskset -c 1 redis-benchmark -h 127.0.0.1 -p "$port" "$@" -c "$CLIENTS" -P "$pipeline" \
    -n "$n" -r "$KEYS" -q RL.CHECK rlt:__rand_int__ "$LIMIT" "$PERIOD_S" >"$WORK/bench.out" 2>&1 \
    || { cat "$WORK/bench.out" >&2; die "redis-benchmark failed: $label"; }
  t1=$(cpu_ticks "$PID_sluice")
  awk -v d=$((t1 - t0)) -v t="$TICK_NS" -v n="$n" 'BEGIN { printf "%.0f\n", d * t / n }' \
    | tee -a "$WORK/$label" | awk -v l="$label" '{ printf "[tls] %-10s %6d ns/request\n", l, $1 }' >&2
}

TLS_ARGS=(--tls --cacert "$WORK/ca.crt")
ONE_N=$((REQUESTS / 5))
STARTED=$SECONDS
for round in $(seq 1 "$ROUNDS"); do
  log "round $round of $ROUNDS"
  if [ $((round % 2)) = 1 ]; then
    measure plain-P1 1 "$ONE_N"; measure tls-P1 1 "$ONE_N" "${TLS_ARGS[@]}"
    measure plain-P16 16 "$REQUESTS"; measure tls-P16 16 "$REQUESTS" "${TLS_ARGS[@]}"
  else
    measure tls-P1 1 "$ONE_N" "${TLS_ARGS[@]}"; measure plain-P1 1 "$ONE_N"
    measure tls-P16 16 "$REQUESTS" "${TLS_ARGS[@]}"; measure plain-P16 16 "$REQUESTS"
  fi
done

best() { sort -n "$WORK/$1" | head -1; }
echo
echo "Server CPU per RL.CHECK, TLS against plain TCP, $(date -u +%Y-%m-%dT%H:%MZ), $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
echo "sluice --threads 1 on CPU 0, redis-benchmark on CPU 1, -c $CLIENTS, $KEYS preloaded keys;"
echo "(utime + stime) from /proc/PID/stat ÷ requests, best of $ROUNDS alternating round(s)."
echo
printf '| %-12s | %13s | %13s | %11s |\n' pipeline "plain TCP" "TLS" "TLS ÷ plain"
echo "|--------------|---------------|---------------|-------------|"
for p in 1 16; do
  awk -v p="$p" -v a="$(best "plain-P$p")" -v b="$(best "tls-P$p")" \
    'BEGIN { printf "| -P %-9s | %10d ns | %10d ns | %10.2f× |\n", p, a, b, b / a }'
done
echo
echo "Total time: $((SECONDS - STARTED)) s."
