#!/usr/bin/env bash
# lease-bench.sh — server CPU of an in-flight lease (RL.ACQUIRE + RL.RELEASE) against a rate-limit
# check (RL.CHECK), and the same two in Redis with the usual recipes, side by side in one run.
#
# The figure: a server's user + system ticks from /proc/PID/stat (every thread), read before and
# after a fixed load, divided by the units of that load: one unit is a check, or a lease
# taken and released (a pair of commands). Issue 22's target: Sluice's pair ≤ 2.5× its check.
#
# Setup:
#   - Sluice (--threads 1) and Redis (--save '' --appendonly no) pinned to CPU 0; the load,
#     scripts/lease-load.py, pinned to CPU 1: 4 connections, batches of 64 pipelined commands
#     on 64 distinct keys of a pool of 10,000;
#   - check: Sluice RL.CHECK, Redis EVALSHA of scripts/lua/token_bucket.lua (every one allowed);
#   - pair: Sluice RL.ACQUIRE key 100 30s then RL.RELEASE key id; Redis EVALSHA of
#     scripts/lua/lease_acquire.lua (a sorted set of ids scored by expiry, stale ones dropped)
#     then ZREM key id. Every lease is granted and released, so each acquire makes its key and
#     each release drops it again (a user with no other request in flight, the common case);
#   - best (lowest) of --rounds alternating rounds (default 2).
# It prints the table and the ratios: pair ÷ check for each server, and Sluice ÷ Redis.
#
# Usage: scripts/lease-bench.sh [--units N] [--rounds N] [--sluice PATH] [--build]
#   --units   checks, or pairs, per measured run (default 200,000)
#   --rounds  alternating rounds; the table shows the best (default 2)
#   --sluice  the sluice binary (default target/release/sluice, or $SLUICE_BIN)
#   --build   run `cargo build --release --bin sluice` first
#
# Needs redis-server, redis-cli, python3, taskset and awk. Every process it starts is stopped
# by PID on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

UNITS=200000 ROUNDS=2 BUILD=0 SLUICE=
while [ $# -gt 0 ]; do
  case "$1" in
    --units) UNITS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done

log() { echo "[lease] $*" >&2; }
die() { echo "[lease] error: $*" >&2; exit 1; }

for tool in redis-server redis-cli python3 taskset awk; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install -y redis-server redis-tools python3 util-linux mawk)"
done
need_sluice
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs: the servers on CPU 0, the load on CPU 1"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-lease.XXXXXX")
TICK_NS=$((1000000000 / $(getconf CLK_TCK)))
LOAD="$ROOT/scripts/lease-load.py"


# measure LABEL PID PORT MODE [SHA]: server CPU ns per unit over one run of UNITS units,
# appended to $WORK/LABEL.
measure() {
  local label=$1 pid=$2 port=$3 mode=$4 sha=${5:-} t0 t1
  t0=$(cpu_ticks "$pid")
  taskset -c 1 python3 "$LOAD" "$port" "$mode" "$UNITS" $sha >"$WORK/load.out" 2>&1 \
    || { cat "$WORK/load.out" >&2; die "the load failed: $label"; }
  t1=$(cpu_ticks "$pid")
  awk -v d=$((t1 - t0)) -v t="$TICK_NS" -v n="$UNITS" 'BEGIN { printf "%.0f\n", d * t / n }' \
    | tee -a "$WORK/$label" | awk -v l="$label" '{ printf "[lease] %-14s %6d ns/unit\n", l, $1 }' >&2
}

STARTED=$SECONDS
start_pinned 0 redis redis-server --bind 127.0.0.1 --save '' --appendonly no --protected-mode no --dir "$WORK"
start_pinned 0 sluice "$SLUICE" --bind 127.0.0.1 --threads 1
CHECK_SHA=$(redis-cli -p "$PORT_redis" SCRIPT LOAD "$(cat "$ROOT/scripts/lua/token_bucket.lua")")
LEASE_SHA=$(redis-cli -p "$PORT_redis" SCRIPT LOAD "$(cat "$ROOT/scripts/lua/lease_acquire.lua")")
[ ${#CHECK_SHA} = 40 ] && [ ${#LEASE_SHA} = 40 ] || die "SCRIPT LOAD failed: $CHECK_SHA $LEASE_SHA"

sluice_rows() {
  measure sluice-check "$PID_sluice" "$PORT_sluice" check
  measure sluice-pair "$PID_sluice" "$PORT_sluice" pair
}
redis_rows() {
  measure redis-check "$PID_redis" "$PORT_redis" redis-check "$CHECK_SHA"
  measure redis-pair "$PID_redis" "$PORT_redis" redis-pair "$LEASE_SHA"
}
for round in $(seq 1 "$ROUNDS"); do
  log "round $round of $ROUNDS"
  if [ $((round % 2)) = 1 ]; then sluice_rows; redis_rows; else redis_rows; sluice_rows; fi
done
# Every lease was released: nothing is left in flight on either server.
[ "$(redis-cli -p "$PORT_sluice" RL.ACQUIRE pair:0 1 1s | head -1)" = 1 ] \
  || die "sluice still holds leases after the run"
stop "$PID_sluice"
stop "$PID_redis"

best() { sort -n "$WORK/$1" | head -1; }
S_CHECK=$(best sluice-check) S_PAIR=$(best sluice-pair)
R_CHECK=$(best redis-check) R_PAIR=$(best redis-pair)
echo
echo "Server CPU per unit, $(date -u +%Y-%m-%dT%H:%MZ), $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
echo "Redis $(redis-server --version | awk '{ print $3 }' | tr -d 'v='); servers on CPU 0, the load on CPU 1 (4 connections, 64 pipelined);"
echo "(utime + stime) from /proc/PID/stat ÷ $UNITS units, best of $ROUNDS alternating round(s)."
echo
printf '| %-52s | %9s | %9s |\n' unit "Sluice" "Redis"
echo "|------------------------------------------------------|-----------|-----------|"
printf '| %-52s | %6d ns | %6d ns |\n' "check (RL.CHECK / EVALSHA token bucket)" "$S_CHECK" "$R_CHECK"
printf '| %-52s | %6d ns | %6d ns |\n' "lease pair (RL.ACQUIRE+RL.RELEASE / EVALSHA+ZREM)" "$S_PAIR" "$R_PAIR"
awk -v sc="$S_CHECK" -v sp="$S_PAIR" -v rc="$R_CHECK" -v rp="$R_PAIR" 'BEGIN {
  printf "| %-52s | %8.2f× | %8.2f× |\n", "pair / check (issue 22 target for Sluice: <= 2.5)", sp / sc, rp / rc
  printf "\nSluice ÷ Redis: check %.2f×, lease pair %.2f×\n", sc / rc, sp / rp
}'
echo
echo "Total time: $((SECONDS - STARTED)) s."
