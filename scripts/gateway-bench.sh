#!/usr/bin/env bash
# The gateway side, measured: the sidecar's cost, its fail modes' first answers, and what the
# blocked cache and approximate mode save the node.
#
# 1. Throughput through `sluice proxy` vs straight to the node (redis-benchmark, same client,
#    same load, alternating rounds), as a ratio; server CPU per check from /proc/PID/stat
#    (utime+stime over the run ÷ requests) for the node and for the sidecar, and the sidecar's
#    CPU per proxied check as a ratio to the node's CPU per check.
# 2. The first answer after the upstream dies, per fail mode, against the deadline: the node
#    killed (SIGKILL: the socket closes) and the node frozen (SIGSTOP: the socket stays open and
#    nothing answers, the worst case). Timed over one persistent connection from bash.
# 3. A hot denied key (limit 100/h): calls reaching the node (its total_commands_processed)
#    for N checks straight to the node vs through the sidecar's blocked cache.
# 4. Approximate mode (leases of tokens), one hot key through 1, 2 and 4 sidecars
#    (--gateways G) at once, APPROX 50: calls reaching the node vs the same checks exact; both
#    bounds (overshoot 0, undershoot 2Q + G × ⌈burst ÷ G⌉, Q = ⌈rate × interval⌉) and the
#    measured difference (allowed − (burst + rate × T), T the wall span of the run). At 1000/s,
#    1000/min and 1000/h. (tests/tests/gateway_approx.rs compares against the exact limiter
#    over the same traffic at the same moments.)
#
# Usage: scripts/gateway-bench.sh [--rounds N] [--requests N] [--clients N] [--pipeline N]
# Needs redis-benchmark, redis-cli, awk. Builds the release binary. Free ports on 127.0.0.1
# only; every process it starts is stopped by its PID on exit.
set -euo pipefail

ROUNDS=3 REQUESTS=200000 CLIENTS=50 PIPELINE=16 HOT=20000 APPROX_N=200000
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift ;;
    --requests) REQUESTS="$2"; shift ;;
    --clients) CLIENTS="$2"; shift ;;
    --pipeline) PIPELINE="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "[gateway-bench] $*" >&2; }
die() { log "error: $*"; exit 1; }
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
cd "$HERE/.."
for t in redis-benchmark redis-cli awk; do command -v "$t" >/dev/null || die "$t not found"; done
log "building the release binary"
cargo build --release -q --bin sluice
BIN=$PWD/target/release/sluice
WORK=$(mktemp -d /tmp/gateway-bench.XXXXXX)
HZ=$(getconf CLK_TCK)

now() { date +%s%N; }
info() { redis-cli -p "$1" INFO | tr -d '\r' | awk -F: -v k="$2" '$1 == k { print $2 }'; }

# start_node NAME -> sets NODE_PORT, NODE_PID
start_node() {
  free_port
  NODE_PORT=$PORT
  "$BIN" --port "$NODE_PORT" --bind 127.0.0.1 --threads 1 2>"$WORK/$1.log" &
  NODE_PID=$!
  PIDS+=("$NODE_PID")
  wait_ready "$NODE_PORT" "$NODE_PID" || die "node $1 did not start"
}
# start_proxy NAME ARGS... -> sets PROXY_PORT, PROXY_PID
start_proxy() {
  local name=$1
  shift
  free_port
  PROXY_PORT=$PORT
  "$BIN" proxy --port "$PROXY_PORT" "$@" 2>"$WORK/$name.log" &
  PROXY_PID=$!
  PIDS+=("$PROXY_PID")
  wait_ready "$PROXY_PORT" "$PROXY_PID" || die "proxy $name did not start"
}

# bench PORT N ARGS... -> prints rps
bench() {
  local port=$1 n=$2
  shift 2
  redis-benchmark -h 127.0.0.1 -p "$port" -n "$n" -c "$CLIENTS" -P "$PIPELINE" -r 1000000 --csv "$@" \
    | awk -F'","' 'NR == 2 { print $2 }'
}

echo "Sluice gateway side, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ); load average $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. Through the sidecar vs direct.
start_node main
MAIN_PORT=$NODE_PORT MAIN_PID=$NODE_PID
start_proxy main --upstream "127.0.0.1:$MAIN_PORT"
SIDE_PORT=$PROXY_PORT SIDE_PID=$PROXY_PID
CHECK=(RL.CHECK "k:__rand_int__" 1000000000 1s)
bench "$SIDE_PORT" 20000 "${CHECK[@]}" >/dev/null # warm up both
: >"$WORK/runs"
for r in $(seq 1 "$ROUNDS"); do
  for via in direct sidecar; do
    port=$MAIN_PORT
    [ "$via" = sidecar ] && port=$SIDE_PORT
    n0=$(cpu_ticks "$MAIN_PID") p0=$(cpu_ticks "$SIDE_PID")
    rps=$(bench "$port" "$REQUESTS" "${CHECK[@]}")
    n1=$(cpu_ticks "$MAIN_PID") p1=$(cpu_ticks "$SIDE_PID")
    echo "$via $rps $((n1 - n0)) $((p1 - p0))" >>"$WORK/runs"
  done
done
echo
echo "1. redis-benchmark -n $REQUESTS -c $CLIENTS -P $PIPELINE, RL.CHECK on random keys; $ROUNDS alternating rounds"
awk -v n="$REQUESTS" -v hz="$HZ" '
  { ns_node = $3 * 1e9 / hz / n; ns_side = $4 * 1e9 / hz / n
    printf "   %-8s %9.0f rps  node %6.0f ns/check  sidecar %6.0f ns/check\n", $1, $2, ns_node, ns_side
    if ($1 == "direct") { d += $2; dn += ns_node; k++ } else { s += $2; sn += ns_node; sp += ns_side } }
  END {
    printf "   throughput through the sidecar / direct: %.2f (mean of %d)\n", s / d, k
    printf "   node CPU per check: direct %.0f ns, behind the sidecar %.0f ns\n", dn / k, sn / k
    printf "   sidecar CPU per proxied check / node CPU per check: %.2f\n", sp / dn }' "$WORK/runs"

# 2. The first answer after the upstream dies, per fail mode.
# timed_check PORT ARGS...: one RL.CHECK on a fresh connection (bash's /dev/tcp socket has
# Nagle on: a second request on one connection can wait 40 ms for a delayed ACK, which is not
# the sidecar's time); prints "µs allowed". The µs include bash's own fork of `date`.
timed_check() {
  local port=$1 frame a t0 t1 line allowed
  shift
  frame="*$#\r\n"
  for a in "$@"; do frame+="\$${#a}\r\n$a\r\n"; done
  printf -v frame "$frame"
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  t0=$(now)
  printf '%s' "$frame" >&3
  read -r line <&3
  read -r allowed <&3
  for _ in 1 2 3 4; do read -r line <&3; done
  t1=$(now)
  exec 3>&-
  echo "$(((t1 - t0) / 1000)) ${allowed//[$'\r:']/}"
}
echo
echo "2. first answer after the upstream dies (deadline 20 ms; a connection per check; µs)"
for how in KILL STOP; do
  for mode in open closed local; do
    start_node "dies-$how-$mode"
    start_proxy "dies-$how-$mode" --upstream "127.0.0.1:$NODE_PORT" --timeout-ms 20 --gateways 4
    read -r ok_us _ < <(timed_check "$PROXY_PORT" RL.CHECK d 40 1h FAILMODE "$mode")
    kill -"$how" "$NODE_PID"
    if [ "$how" = KILL ]; then
      wait "$NODE_PID" 2>/dev/null || true
      forget "$NODE_PID"
    fi
    read -r first_us first_allowed < <(timed_check "$PROXY_PORT" RL.CHECK d 40 1h FAILMODE "$mode")
    read -r second_us _ < <(timed_check "$PROXY_PORT" RL.CHECK d 40 1h FAILMODE "$mode")
    printf "   SIG%-4s %-6s node up %5d µs | first after %6d µs (allowed=%s, %.2f × deadline) | second %6d µs\n" \
      "$how" "$mode" "$ok_us" "$first_us" "$first_allowed" "$(awk -v u="$first_us" 'BEGIN { print u / 20000 }')" "$second_us"
    [ "$how" = STOP ] && stop "$NODE_PID"
    stop "$PROXY_PID"
  done
done

# 3. A hot denied key: the blocked cache.
echo
echo "3. hot denied key (RL.CHECK hot 100 1h), $HOT checks: calls reaching the node"
c0=$(info "$MAIN_PORT" total_commands_processed)
bench "$MAIN_PORT" "$HOT" RL.CHECK hot:direct 100 1h >/dev/null
c1=$(info "$MAIN_PORT" total_commands_processed)
bench "$SIDE_PORT" "$HOT" RL.CHECK hot:cached 100 1h >/dev/null
c2=$(info "$MAIN_PORT" total_commands_processed)
awk -v a=$((c1 - c0 - 1)) -v b=$((c2 - c1 - 1)) 'BEGIN {
  printf "   without the blocked cache (direct): %d   with (sidecar): %d   cut %.2f%% (%.0f×)\n", a, b, 100 * (1 - b / a), a / (b > 0 ? b : 1) }'

# 4. Approximate mode: G sidecars (G gateways) on one key, G = 1, 2, 4.
# approx G LIMIT PERIOD PERIOD_MS: one key through the G sidecars at once, then the same load
# exact, straight to the node.
approx() {
  local g=$1 limit=$2 period=$3 period_ms=$4 key="warm:$1:$2:$3" c0 c1 c2 t0 t1 a0 a1 p
  local -a pids=()
  c0=$(info "$MAIN_PORT" total_commands_processed)
  a0=0
  for p in "${APPROX_PORTS[@]:0:$g}"; do a0=$((a0 + $(info "$p" checks_allowed))); done
  t0=$(now)
  for p in "${APPROX_PORTS[@]:0:$g}"; do
    bench "$p" "$APPROX_N" RL.CHECK "$key" "$limit" "$period" APPROX 50 >/dev/null &
    pids+=($!)
  done
  wait "${pids[@]}"
  t1=$(now)
  # The sidecars' last syncs (the leases given back) land within an interval.
  sleep 0.2
  c1=$(info "$MAIN_PORT" total_commands_processed)
  a1=0
  for p in "${APPROX_PORTS[@]:0:$g}"; do a1=$((a1 + $(info "$p" checks_allowed))); done
  bench "$MAIN_PORT" $((g * APPROX_N)) RL.CHECK "$key:exact" "$limit" "$period" >/dev/null
  c2=$(info "$MAIN_PORT" total_commands_processed)
  echo
  echo "4. approximate mode, RL.CHECK $key $limit $period APPROX 50 through $g sidecar(s) (--gateways $g), $APPROX_N checks each"
  awk -v approx=$((c1 - c0 - 1)) -v exact=$((c2 - c1 - 1)) -v allowed=$((a1 - a0)) -v us=$(((t1 - t0) / 1000)) \
      -v limit="$limit" -v pms="$period_ms" -v g="$g" 'BEGIN {
    q = limit * 50 / pms; q = (q == int(q)) ? q : int(q) + 1; if (q < 1) q = 1
    cap = limit / g; cap = (cap == int(cap)) ? cap : int(cap) + 1
    under = 2 * q + g * cap  # 2Q + gateways × the largest lease
    ideal = limit + limit * (us / 1000) / pms
    printf "   calls reaching the node: exact %d, approximate %d: %.0f× fewer\n", exact, approx, exact / approx
    printf "   allowed %d in %.3f s (the wall span of the run); the exact limiter allows at most %.1f in it; difference %+.1f (bounds -%d / +0)\n", allowed, us / 1e6, ideal, allowed - ideal, under }'
}
for g in 1 2 4; do
  APPROX_PORTS=() APPROX_PIDS=()
  for i in $(seq 1 "$g"); do
    start_proxy "approx-$g-$i" --upstream "127.0.0.1:$MAIN_PORT" --gateways "$g"
    APPROX_PORTS+=("$PROXY_PORT")
    APPROX_PIDS+=("$PROXY_PID")
  done
  approx "$g" 1000 1s 1000
  approx "$g" 1000 1m 60000
  approx "$g" 1000 1h 3600000
  for pid in "${APPROX_PIDS[@]}"; do stop "$pid"; done
done
