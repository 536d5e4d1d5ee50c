#!/usr/bin/env bash
# http-bench.sh — what the HTTP API costs: checks per second and server CPU per check through
# POST /v1/check (HTTP/1.1 keep-alive, wrk) against RL.CHECK over RESP (redis-benchmark), and
# against throttlecrab-server's POST /throttle, its peer among rate limiters with an HTTP
# API, in one run.
#
# Setup:
#   - one sluice --threads 1 --http-port P, pinned to CPU 0 (its RESP worker and its HTTP
#     thread both); one throttlecrab-server --http, pinned to CPU 0 too (its runtime then has
#     one worker); the load tool pinned to CPU 1;
#   - every check allowed and on a random one of --keys keys (capacity 1,000,000, refilled at
#     0.01/s), so every path updates existing buckets the same way;
#   - RESP: redis-benchmark -c 50 -P 1 (one request in flight per connection, as HTTP/1.1)
#     and -P 16 for reference; HTTP: wrk -t 1 -c 50 for --seconds with a Lua script that posts
#     {"key","limit","period"} bodies (throttlecrab: {"key","max_burst","count_per_period",
#     "period"}, the same bucket in its words);
#   - server CPU from /proc/PID/stat (utime + stime, every thread) before and after each run,
#     divided by the checks it answered; best (lowest) of --rounds alternating rounds.
# It prints checks/s and CPU ns per check for each row, HTTP's CPU per check over RESP's at
# -P 1 (the target is at most 3), and POST /v1/check's CPU per check and checks/s over
# throttlecrab's (the CPU target is at most 0.8).
#
# throttlecrab-server: --throttlecrab PATH, else $THROTTLECRAB_BIN, else
# ${TMPDIR:-/tmp}/throttlecrab/bin/throttlecrab-server; when that is missing it is installed
# there with `cargo install throttlecrab-server --version 0.4.40 --root DIR` (its build needs
# protoc: `apt-get install -y protobuf-compiler`, done when running as root; Sluice's build
# never needs it). --no-throttlecrab leaves its row out.
#
# Usage: scripts/http-bench.sh [--keys N] [--requests N] [--seconds S] [--rounds N]
#                              [--throttlecrab PATH | --no-throttlecrab] [--sluice PATH] [--build]
#   --keys       distinct keys (default 100,000)
#   --requests   RESP checks per run (default 500,000)
#   --seconds    length of each wrk run (default 10)
#   --rounds     alternating rounds (default 2)
#
# Needs wrk (Debian's wrk; installed with apt-get when missing and running as root),
# curl, redis-benchmark, redis-cli, taskset and awk. Every process it starts is stopped by PID on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

KEYS=100000 REQUESTS=500000 SECONDS_RUN=10 ROUNDS=2 BUILD=0
THROTTLECRAB=${THROTTLECRAB_BIN:-} TC_VERSION=0.4.40 TC_ROW=1
TC_ROOT="${TMPDIR:-/tmp}/throttlecrab"
while [ $# -gt 0 ]; do
  case "$1" in
    --keys) KEYS="$2"; shift ;;
    --throttlecrab) THROTTLECRAB="$2"; shift ;;
    --no-throttlecrab) TC_ROW=0 ;;
    --requests) REQUESTS="$2"; shift ;;
    --seconds) SECONDS_RUN="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done

log() { echo "[http-bench] $*" >&2; }
die() { echo "[http-bench] error: $*" >&2; exit 1; }

if ! command -v wrk >/dev/null; then
  [ "$(id -u)" = 0 ] || die "wrk is missing (apt-get install -y wrk)"
  log "installing wrk (Debian package)"
  apt-get install -y wrk >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y wrk >/dev/null; }
fi
for tool in wrk curl redis-cli redis-benchmark taskset awk; do
  command -v "$tool" >/dev/null || die "$tool is missing"
done
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs: the server on CPU 0, the client on CPU 1"
need_sluice

# need_throttlecrab: sets THROTTLECRAB to an executable throttlecrab-server, installing it
# outside the repository when there is none.
need_throttlecrab() {
  if [ -n "$THROTTLECRAB" ]; then
    [ -x "$THROTTLECRAB" ] || die "no throttlecrab-server at $THROTTLECRAB"
    return 0
  fi
  THROTTLECRAB=$TC_ROOT/bin/throttlecrab-server
  [ -x "$THROTTLECRAB" ] && return 0
  command -v cargo >/dev/null || die "throttlecrab-server is missing and cargo is not installed"
  if ! command -v protoc >/dev/null; then
    [ "$(id -u)" = 0 ] || die "throttlecrab-server's build needs protoc (apt-get install -y protobuf-compiler)"
    log "installing protoc for throttlecrab-server's build (Debian package protobuf-compiler)"
    apt-get install -y protobuf-compiler >/dev/null 2>&1 \
      || { apt-get update >/dev/null && apt-get install -y protobuf-compiler >/dev/null; }
  fi
  log "installing throttlecrab-server $TC_VERSION into $TC_ROOT (cargo install, a few minutes)"
  cargo install throttlecrab-server --version "$TC_VERSION" --root "$TC_ROOT" >&2 \
    || die "cargo install throttlecrab-server failed"
  [ -x "$THROTTLECRAB" ] || die "no throttlecrab-server at $THROTTLECRAB"
}
[ "$TC_ROW" = 0 ] || need_throttlecrab

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-http-bench.XXXXXX")
TICK_NS=$((1000000000 / $(getconf CLK_TCK)))
LIMIT=1000000 PERIOD_S=100000000

free_port
HTTP_PORT=$PORT
start_pinned 0 sluice "$SLUICE" --bind 127.0.0.1 --threads 1 --http-port "$HTTP_PORT"
PID=$PID_sluice
wait_for 10 "GET /healthz" curl -sf -o /dev/null "http://127.0.0.1:$HTTP_PORT/healthz"
# Both paths name the same keys: RESP's __rand_int__ is 12 digits, the Lua script pads alike.
# wrk_script FILE PATH FIELDS: a wrk script that POSTs {"key":<random key>,FIELDS} to PATH.
wrk_script() {
  cat >"$1" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
math.randomseed(os.time())
request = function()
  local key = string.format("rlt:%012d", math.random(0, $KEYS - 1))
  local body = '{"key":"' .. key .. '",$3}'
  return wrk.format(nil, "$2", nil, body)
end
LUA
}
wrk_script "$WORK/check.lua" /v1/check "\"limit\":$LIMIT,\"period\":$PERIOD_S"
first=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
  -d "{\"key\":\"rlt:000000000000\",\"limit\":$LIMIT,\"period\":$PERIOD_S}" \
  "http://127.0.0.1:$HTTP_PORT/v1/check" 2>/dev/null || true)
[ "$first" = 200 ] || die "POST /v1/check answered '$first', not 200"

if [ "$TC_ROW" = 1 ]; then
  free_port
  TC_PORT=$PORT
  taskset -c 0 "$THROTTLECRAB" --http --http-host 127.0.0.1 --http-port "$TC_PORT" \
    --log-level error >"$WORK/throttlecrab.log" 2>&1 &
  TC_PID=$!
  PIDS+=("$TC_PID")
  wait_for 10 "throttlecrab's GET /health" curl -sf -o /dev/null "http://127.0.0.1:$TC_PORT/health"
  # The same keys and bucket: a burst of LIMIT, LIMIT per PERIOD_S seconds.
  wrk_script "$WORK/throttle.lua" /throttle \
    "\"max_burst\":$LIMIT,\"count_per_period\":$LIMIT,\"period\":$PERIOD_S"
  answer=$(curl -s -H 'Content-Type: application/json' \
    -d "{\"key\":\"rlt:000000000000\",\"max_burst\":$LIMIT,\"count_per_period\":$LIMIT,\"period\":$PERIOD_S}" \
    "http://127.0.0.1:$TC_PORT/throttle" 2>/dev/null || true)
  case "$answer" in
    *'"allowed":true'*) ;;
    *) die "throttlecrab's POST /throttle answered '$answer'" ;;
  esac
fi

# resp LABEL PIPELINE: one redis-benchmark run; appends "ns_per_check checks_per_s" to $WORK/LABEL.
resp() {
  local label=$1 pipeline=$2 t0 t1 rps
  t0=$(cpu_ticks "$PID")
  rps=$(bench_csv 1 "$PORT_sluice" -c 50 -P "$pipeline" -n "$REQUESTS" -r "$KEYS" \
    RL.CHECK rlt:__rand_int__ "$LIMIT" "$PERIOD_S" | cut -d, -f2)
  t1=$(cpu_ticks "$PID")
  awk -v d=$((t1 - t0)) -v t="$TICK_NS" -v n="$REQUESTS" -v r="$rps" \
    'BEGIN { printf "%.0f %.0f\n", d * t / n, r }' | tee -a "$WORK/$label" >/dev/null
}

# http LABEL [PID PORT SCRIPT]: one wrk run against sluice's HTTP port (or the server PID on
# PORT with the Lua SCRIPT); appends "ns_per_check checks_per_s" to $WORK/LABEL.
http() {
  local label=$1 pid=${2:-$PID} port=${3:-$HTTP_PORT} script=${4:-$WORK/check.lua} t0 t1 n
  t0=$(cpu_ticks "$pid")
  taskset -c 1 wrk -t 1 -c 50 -d "${SECONDS_RUN}s" -s "$script" \
    "http://127.0.0.1:$port" >"$WORK/wrk.out" 2>&1 || { cat "$WORK/wrk.out" >&2; die "wrk failed"; }
  t1=$(cpu_ticks "$pid")
  ! grep -q "Non-2xx" "$WORK/wrk.out" || { cat "$WORK/wrk.out" >&2; die "some checks were not 200"; }
  n=$(awk '/requests in/ { print $1 }' "$WORK/wrk.out")
  [ -n "$n" ] && [ "$n" -gt 0 ] || { cat "$WORK/wrk.out" >&2; die "wrk made no requests"; }
  awk -v d=$((t1 - t0)) -v t="$TICK_NS" -v n="$n" -v s="$SECONDS_RUN" \
    'BEGIN { printf "%.0f %.0f\n", d * t / n, n / s }' | tee -a "$WORK/$label" >/dev/null
}

# throttle: one wrk run against throttlecrab (when its row is on).
throttle() {
  [ "$TC_ROW" = 0 ] || http throttlecrab "$TC_PID" "$TC_PORT" "$WORK/throttle.lua"
}

for round in $(seq 1 "$ROUNDS"); do
  log "round $round of $ROUNDS"
  if [ $((round % 2)) = 1 ]; then
    resp resp-P1 1; resp resp-P16 16; http http-keepalive; throttle
  else
    throttle; http http-keepalive; resp resp-P16 16; resp resp-P1 1
  fi
done

best() { sort -n "$WORK/$1" | head -1; }
rows=(resp-P1:"RL.CHECK over RESP, -P 1" resp-P16:"RL.CHECK over RESP, -P 16"
  http-keepalive:"POST /v1/check, keep-alive")
[ "$TC_ROW" = 0 ] || rows+=(throttlecrab:"throttlecrab $TC_VERSION POST /throttle")
printf '%-38s %14s %16s\n' "path" "checks/s" "CPU ns/check"
for row in "${rows[@]}"; do
  read -r ns rps <<<"$(best "${row%%:*}")"
  printf '%-38s %14s %16s\n' "${row#*:}" "$rps" "$ns"
done
read -r resp_ns _ <<<"$(best resp-P1)"
read -r http_ns http_rps <<<"$(best http-keepalive)"
awk -v h="$http_ns" -v r="$resp_ns" 'BEGIN {
  printf "HTTP CPU per check / RESP (-P 1): %.2fx (target <= 3x)\n", h / r }'
if [ "$TC_ROW" = 1 ]; then
  read -r tc_ns tc_rps <<<"$(best throttlecrab)"
  awk -v h="$http_ns" -v t="$tc_ns" -v hr="$http_rps" -v tr="$tc_rps" 'BEGIN {
    printf "POST /v1/check / throttlecrab POST /throttle: CPU per check %.2fx (target <= 0.8x), checks/s %.2fx\n", h / t, hr / tr }'
fi
