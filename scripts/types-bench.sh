#!/usr/bin/env bash
# types-bench.sh — what the collection types cost, Sluice against Redis, in one run (issue 35).
#
# Two tables:
#
# 1. Server CPU per request, measured as scripts/cpu-per-request.sh does: (utime + stime) from
#    /proc/PID/stat ÷ requests; Redis (--save '' --appendonly no) and Sluice (--threads 1) pinned
#    to CPU 0, redis-benchmark pinned to CPU 1, -c 50, at -P 16 and at -P 1, best of --rounds
#    alternating rounds. Each server is preloaded with --keys keys of each shape below (12-digit
#    names, as `-r` gives `__rand_int__`), so every request finds its key:
#      INCR              ctr:N, preloaded `SET ctr:N 1234567 EX 3600`
#      LPUSH, LTRIM      log:N, ten 10-digit integers with a TTL; `LPUSH log:N 1733356800`, then
#                        a run of `LTRIM log:N 0 9` that trims the lists back (a capped log)
#      HINCRBY           h:N, field0..field9 -> small ints; `HINCRBY h:N field5 1`
#      ZADD, ZREMRANGE.. z:N, m0..m9 scored 1000001..1000010; `ZADD z:N <rand> <rand>` adds a
#                        member scored below 1,000,000, then a run of `ZREMRANGEBYSCORE z:N -inf
#                        999999` removes them: on average what the ZADD run added (one member a
#                        request when both runs are as long), the same on both servers
#    The row "LPUSH+LTRIM" is the sum of its two runs' CPU per request (redis-benchmark sends one
#    command; a sliding-log limiter sends the pair). Ratio: Sluice ÷ Redis (the bar: ≤ 1.00).
#
# 2. Memory per key after loading --mem-keys keys (default 100,000) into a fresh server of each
#    side: the INFO `used_memory` delta ÷ keys (each server's own accounting) and the process's
#    RSS delta ÷ keys (VmRSS), for: `SET k 1234567 EX 3600`; a 10-field hash (fieldN -> N); a
#    10-member sorted set (mN scored N); a 10-entry list of 10-digit integers with `EXPIRE 3600`.
#    Both are read --settle seconds after the load: both servers use jemalloc, which hands freed
#    pages (the load's buffers) back to the system after about 10 s.  At 100,000 keys a fixed
#    cost (a table's growth step, buffers) still shows in the RSS figure: --mem-keys 1000000
#    gives the figure per key at scale.
#
# Usage: scripts/types-bench.sh [--keys N] [--requests N] [--rounds N] [--mem-keys N]
#                               [--settle S] [--memory-only] [--cpu-only] [--sluice PATH]
#                               [--build]
#   --keys         preloaded keys of each shape for the CPU table (default 1,000,000)
#   --requests     requests per run at -P 16 (default 2,000,000); -P 1 runs a tenth
#   --rounds       alternating rounds; the table shows the best (default 2)
#   --mem-keys     keys of each shape for the memory table (default 100,000)
#   --settle       seconds between the load and the memory readings (default 12)
#   --memory-only, --cpu-only   one of the two tables
#   --sluice       the sluice binary (default: the release build, or $SLUICE_BIN)
#   --build        run `cargo build --release --bin sluice` first
#
# Needs redis-server, redis-cli, redis-benchmark, taskset and awk, and 2 CPUs. Every process it
# starts is stopped by PID on exit (scripts/lib.sh's trap).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

KEYS=1000000 REQUESTS=2000000 ROUNDS=2 MEM_KEYS=100000 SETTLE=12 CLIENTS=50 CPU=1 MEMORY=1 SLUICE=
while [ $# -gt 0 ]; do
  case "$1" in
    --keys) KEYS="$2"; shift ;;
    --requests) REQUESTS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --mem-keys) MEM_KEYS="$2"; shift ;;
    --settle) SETTLE="$2"; shift ;;
    --memory-only) CPU=0 ;;
    --cpu-only) MEMORY=0 ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done

log() { echo "[types] $*" >&2; }
die() { echo "[types] error: $*" >&2; exit 1; }

need_tools redis-server redis-cli redis-benchmark taskset awk
need_sluice
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs: the servers on CPU 0, the client on CPU 1"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-types.XXXXXX")
STARTED=$SECONDS
REDIS=(redis-server --bind 127.0.0.1 --save '' --appendonly no --protected-mode no --dir "$WORK")
SLUICE_CMD=("$SLUICE" --bind 127.0.0.1 --threads 1)

# The shapes: a 10-entry list of 10-digit integers, a 10-field hash, a 10-member sorted set.
LIST_ITEMS=$(seq 1733356800 1733356809 | tr '\n' ' ')
HASH_PAIRS=$(for i in $(seq 0 9); do printf 'field%d %d ' "$i" "$i"; done)

used_memory() { # PORT
  redis-cli -p "$1" INFO memory | awk -F: '/^used_memory:/ { print $2 + 0 }'
}
rss_bytes() { # PID
  awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$1/status"
}

# --- memory per key --------------------------------------------------------------------------

# mem_shape NAME PREFIX COMMAND... [-- COMMAND...]: on a fresh Redis and a fresh Sluice, the
# used_memory and RSS deltas of preloading MEM_KEYS keys with each COMMAND (KEY: the key), per
# key, read SETTLE seconds later, appended to $WORK/mem as "NAME side used rss".
mem_shape() {
  local name=$1 prefix=$2 side pid port u0 r0 words
  shift 2
  for side in redis sluice; do
    if [ "$side" = redis ]; then start_pinned 0 m_redis "${REDIS[@]}"; pid=$PID_m_redis port=$PORT_m_redis
    else start_pinned 0 m_sluice "${SLUICE_CMD[@]}"; pid=$PID_m_sluice port=$PORT_m_sluice; fi
    u0=$(used_memory "$port") r0=$(rss_bytes "$pid")
    words=()
    for w in "$@" --; do
      if [ "$w" = -- ]; then
        [ ${#words[@]} = 0 ] || preload "$port" "$MEM_KEYS" "$prefix" "${words[@]}"
        words=()
      else
        words+=("$w")
      fi
    done
    sleep "$SETTLE"
    echo "$name $side $(( ($(used_memory "$port") - u0) / MEM_KEYS )) $(( ($(rss_bytes "$pid") - r0) / MEM_KEYS ))" >>"$WORK/mem"
    stop "$pid"
  done
}

if [ "$MEMORY" = 1 ]; then
  log "memory: $MEM_KEYS keys of each shape, a fresh server each, read ${SETTLE}s after the load"
  mem_shape "string counter, EX 3600" c: SET KEY 1234567 EX 3600
  # shellcheck disable=SC2086  # the shapes are lists of words
  mem_shape "hash, 10 fields" h: HSET KEY $HASH_PAIRS
  # shellcheck disable=SC2086
  mem_shape "sorted set, 10 members" z: ZADD KEY 0 m0 1 m1 2 m2 3 m3 4 m4 5 m5 6 m6 7 m7 8 m8 9 m9
  # shellcheck disable=SC2086
  mem_shape "list, 10 integers, EXPIRE 3600" l: RPUSH KEY $LIST_ITEMS -- EXPIRE KEY 3600
fi

# --- CPU per request -------------------------------------------------------------------------

# rows SIDE: one round of every command on one server, at -P 16 then at -P 1.
rows() {
  local side=$1 pid port p n
  pid="PID_$side" port="PORT_$side"
  for p in 16 1; do
    n=$REQUESTS
    [ "$p" = 16 ] || n=$((REQUESTS / 10))
    cpu_per_request "$side-P$p-INCR" "${!pid}" "${!port}" "$p" "$n" INCR ctr:__rand_int__
    cpu_per_request "$side-P$p-LPUSH" "${!pid}" "${!port}" "$p" "$n" LPUSH log:__rand_int__ 1733356810
    cpu_per_request "$side-P$p-LTRIM" "${!pid}" "${!port}" "$p" "$n" LTRIM log:__rand_int__ 0 9
    cpu_per_request "$side-P$p-HINCRBY" "${!pid}" "${!port}" "$p" "$n" HINCRBY h:__rand_int__ field5 1
    cpu_per_request "$side-P$p-ZADD" "${!pid}" "${!port}" "$p" "$n" \
      ZADD z:__rand_int__ __rand_int__ __rand_int__
    cpu_per_request "$side-P$p-ZREMRANGEBYSCORE" "${!pid}" "${!port}" "$p" "$n" \
      ZREMRANGEBYSCORE z:__rand_int__ -inf 999999
  done
}

if [ "$CPU" = 1 ]; then
  start_pinned 0 redis "${REDIS[@]}"
  start_pinned 0 sluice "${SLUICE_CMD[@]}"
  for side in redis sluice; do
    port="PORT_$side"
    log "preloading $KEYS keys of each shape into $side"
    preload "${!port}" "$KEYS" ctr: SET KEY 1234567 EX 3600
    # shellcheck disable=SC2086
    preload "${!port}" "$KEYS" log: RPUSH KEY $LIST_ITEMS
    preload "${!port}" "$KEYS" log: EXPIRE KEY 3600
    # shellcheck disable=SC2086
    preload "${!port}" "$KEYS" h: HSET KEY $HASH_PAIRS
    preload "${!port}" "$KEYS" z: ZADD KEY 1000001 m0 1000002 m1 1000003 m2 1000004 m3 \
      1000005 m4 1000006 m5 1000007 m6 1000008 m7 1000009 m8 1000010 m9
  done
  for round in $(seq 1 "$ROUNDS"); do
    log "round $round of $ROUNDS"
    if [ $((round % 2)) = 1 ]; then rows redis; rows sluice; else rows sluice; rows redis; fi
  done
  # Both must still hold the shapes they started with: a capped list, ten-field hashes.
  for side in redis sluice; do
    port="PORT_$side"
    [ "$(redis-cli -p "${!port}" LLEN log:000000000007)" = 10 ] || die "$side: a list is not capped at 10"
    [ "$(redis-cli -p "${!port}" HLEN h:000000000007)" = 10 ] || die "$side: a hash lost its fields"
  done
  stop "$PID_sluice"
  stop "$PID_redis"
fi

# --- tables ----------------------------------------------------------------------------------

best() { sort -n "$WORK/cpu-$1" | head -1; }
echo
echo "Sluice's collection types against Redis $(redis-server --version | awk '{ print $3 }' | tr -d 'v='), $(date -u +%Y-%m-%dT%H:%MZ), $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
if [ "$CPU" = 1 ]; then
  echo
  echo "Server CPU per request: servers on CPU 0, redis-benchmark on CPU 1, -c $CLIENTS, $KEYS keys of each"
  echo "shape, $REQUESTS requests a run at -P 16 and $((REQUESTS / 10)) at -P 1; (utime + stime) ÷ requests, best of"
  echo "$ROUNDS alternating round(s). Ratio: Sluice ÷ Redis (the bar: ≤ 1.00). Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  printf '| %-18s | %9s | %9s | %6s | %9s | %9s | %6s |\n' request "Redis -P16" "Sluice" ratio "Redis -P1" "Sluice" ratio
  echo "|--------------------|------------|-----------|--------|-----------|-----------|--------|"
  for cmd in INCR LPUSH LTRIM LPUSH+LTRIM HINCRBY ZADD ZREMRANGEBYSCORE; do
    cells=()
    for p in 16 1; do
      for side in redis sluice; do
        if [ "$cmd" = LPUSH+LTRIM ]; then
          cells+=("$(($(best "$side-P$p-LPUSH") + $(best "$side-P$p-LTRIM")))")
        else
          cells+=("$(best "$side-P$p-$cmd")")
        fi
      done
    done
    awk -v c="$cmd" -v a="${cells[0]}" -v b="${cells[1]}" -v x="${cells[2]}" -v y="${cells[3]}" 'BEGIN {
      printf "| %-18s | %7d ns | %6d ns | %5.2f× | %6d ns | %6d ns | %5.2f× |\n", c, a, b, b / a, x, y, y / x }'
  done
fi
if [ "$MEMORY" = 1 ]; then
  echo
  echo "Memory per key: $MEM_KEYS keys of each shape loaded into a fresh server of each side; the INFO"
  echo "used_memory delta and the VmRSS delta ${SETTLE}s after the load, ÷ keys. Ratio: Sluice ÷ Redis"
  echo "(the bar: used_memory ≤ 1.00)."
  echo
  printf '| %-31s | %11s | %11s | %6s | %9s | %9s | %6s |\n' shape "Redis used" "Sluice used" ratio "Redis RSS" "Sluice RSS" ratio
  echo "|---------------------------------|-------------|-------------|--------|-----------|------------|--------|"
  awk '{ side = $(NF - 2); used[side] = $(NF - 1); rss[side] = $NF; NF -= 3; name = $0
         if (side == "sluice")
           printf "| %-31s | %9d B | %9d B | %5.2f× | %7d B | %8d B | %5.2f× |\n", name,
             used["redis"], used["sluice"], used["sluice"] / used["redis"],
             rss["redis"], rss["sluice"], rss["sluice"] / rss["redis"] }' "$WORK/mem"
fi
echo
echo "Total time: $((SECONDS - STARTED)) s."
