#!/usr/bin/env bash
# scripts-bench.sh — what the limiter libraries' scripts cost, Sluice against Redis, in one run
# (issue 36).
#
# Server CPU per request, measured as scripts/types-bench.sh does: (utime + stime) from
# /proc/PID/stat ÷ requests; Redis (--save '' --appendonly no) and Sluice (--threads 1) pinned
# to CPU 0, redis-benchmark pinned to CPU 1, -c 50, at -P 16 and at -P 1, best of --rounds
# alternating rounds, over --keys keys (12-digit names, as `-r` gives `__rand_int__`), each
# preloaded so every request finds its key inside its window:
#   limits incr_expire          EVALSHA <sha> 1 c:N 3600 1         (c:N: SET 1 EX 3600)
#   rate-limit-redis increment  EVALSHA <sha> 1 r:N 3600000        (r:N: SET 1 PX 3600000)
#   rate-limiter-flexible       EVALSHA <sha> 1 f:N 1 3600 ...     (f:N: SET 1 EX 3600)
#   limits acquire_sliding      EVALSHA <sha> 2 sp:N sc:M 1000000000 3600 1 (the previous and
#                               current windows, PX 3600000 and 7200000: no shift, INCRBY)
#   each of them + a comment    the same script with "\n-- unknown" added: an unknown script,
#                               which Sluice runs in Lua
#   RL.CHECK                    RL.CHECK k:N 1000000 3600          (k:N: one RL.CHECK)
# The scripts are the libraries' exact bytes (tests/fixtures/known-scripts), so Sluice runs the
# first three natively (INFO scripting, checked at the end: the native calls are counted, the
# commented ones are not).
#
# Ratios: a known script on Sluice ÷ the same on Redis (the bar: ≤ 0.25) and ÷ Sluice's RL.CHECK
# (the bar: ≤ 1.5); the commented script on Sluice (Lua) ÷ the same on Redis (the bar: ≤ 1.0).
#
# Usage: scripts/scripts-bench.sh [--keys N] [--requests N] [--rounds N] [--sluice PATH] [--build]
#   --keys      preloaded keys of each shape (default 1,000,000)
#   --requests  requests per run at -P 16 (default 1,000,000); -P 1 runs a tenth
#   --rounds    alternating rounds; the table shows the best (default 2)
#   --sluice    the sluice binary (default: the release build, or $SLUICE_BIN)
#   --build     run `cargo build --release --bin sluice` first
#
# Needs redis-server, redis-cli, redis-benchmark, taskset and awk, and 2 CPUs. Every process it
# starts is stopped by PID on exit (scripts/lib.sh's trap).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

KEYS=1000000 REQUESTS=1000000 ROUNDS=2 CLIENTS=50 SLUICE=
while [ $# -gt 0 ]; do
  case "$1" in
    --keys) KEYS="$2"; shift ;;
    --requests) REQUESTS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done

log() { echo "[scripts] $*" >&2; }
die() { echo "[scripts] error: $*" >&2; exit 1; }

need_tools redis-server redis-cli redis-benchmark taskset awk
need_sluice
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs: the servers on CPU 0, the client on CPU 1"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-scripts.XXXXXX")
STARTED=$SECONDS
FIXTURES="$ROOT/tests/fixtures/known-scripts"
REDIS=(redis-server --bind 127.0.0.1 --save '' --appendonly no --protected-mode no --dir "$WORK")
SLUICE_CMD=("$SLUICE" --bind 127.0.0.1 --threads 1)

# The scripts: NAME FIXTURE KEYS ARGS (the keys: their prefixes, each followed by
# __rand_int__, comma-separated).
SCRIPTS=(
  "incr_expire limits_incr_expire c: 3600 1"
  "rlr_increment rate_limit_redis_increment r: 3600000"
  "rlf_incr_ttl rate_limiter_flexible_incr_ttl f: 1 3600 100 3600"
  "acquire_sliding limits_acquire_sliding_window sp:,sc: 1000000000 3600 1"
)
for s in "${SCRIPTS[@]}"; do
  read -r name fixture _ <<<"$s"
  cp "$FIXTURES/$fixture.lua" "$WORK/$name.lua"
  { cat "$FIXTURES/$fixture.lua"; printf '\n-- unknown'; } >"$WORK/$name+comment.lua"
done

# rows SIDE: one round of every script on one server (and RL.CHECK on Sluice), at -P 16 then
# at -P 1.
rows() {
  local side=$1 pid port p n s name prefix args sha
  pid="PID_$side" port="PORT_$side"
  for p in 16 1; do
    n=$REQUESTS
    [ "$p" = 16 ] || n=$((REQUESTS / 10))
    for s in "${SCRIPTS[@]}"; do
      read -r name _ prefixes args <<<"$s"
      keys=()
      for prefix in ${prefixes//,/ }; do keys+=("$prefix"__rand_int__); done
      for variant in "$name" "$name+comment"; do
        sha=$(redis-cli -p "${!port}" -x SCRIPT LOAD <"$WORK/$variant.lua")
        # shellcheck disable=SC2086  # ARGS are words
        cpu_per_request "$side-P$p-$variant" "${!pid}" "${!port}" "$p" "$n" \
          EVALSHA "$sha" "${#keys[@]}" "${keys[@]}" $args
      done
    done
    if [ "$side" = sluice ]; then
      cpu_per_request "$side-P$p-RL.CHECK" "${!pid}" "${!port}" "$p" "$n" RL.CHECK k:__rand_int__ 1000000 3600
    fi
  done
}

start_pinned 0 redis "${REDIS[@]}"
start_pinned 0 sluice "${SLUICE_CMD[@]}"
for side in redis sluice; do
  port="PORT_$side"
  log "preloading $KEYS keys of each shape into $side"
  preload "${!port}" "$KEYS" c: SET KEY 1 EX 3600
  preload "${!port}" "$KEYS" r: SET KEY 1 PX 3600000
  preload "${!port}" "$KEYS" f: SET KEY 1 EX 3600
  # The previous window, and a current one with more than a window to live (no shift).
  preload "${!port}" "$KEYS" sp: SET KEY 1 PX 3600000
  preload "${!port}" "$KEYS" sc: SET KEY 1 PX 7200000
done
preload "$PORT_sluice" "$KEYS" k: RL.CHECK KEY 1000000 3600
for round in $(seq 1 "$ROUNDS"); do
  log "round $round of $ROUNDS"
  if [ $((round % 2)) = 1 ]; then rows redis; rows sluice; else rows sluice; rows redis; fi
done
# Sluice ran the exact scripts natively and the commented ones in Lua.
INFO=$(redis-cli -p "$PORT_sluice" INFO scripting | tr -d '\r')
for fixture in limits_incr_expire rate_limit_redis_increment rate_limiter_flexible_incr_ttl \
    limits_acquire_sliding_window; do
  grep -q "^script_native_$fixture:.*,calls=[1-9]" <<<"$INFO" || die "$fixture did not run natively: $INFO"
done
lua=$(awk -F: '/^scripts_lua_calls:/ { print $2 }' <<<"$INFO")
[ "$lua" -ge "$REQUESTS" ] || die "the commented scripts did not run in Lua: $INFO"
stop "$PID_sluice"
stop "$PID_redis"

best() { sort -n "$WORK/cpu-$1" | head -1; }
echo
echo "Limiter scripts, Sluice against Redis $(redis-server --version | awk '{ print $3 }' | tr -d 'v='), $(date -u +%Y-%m-%dT%H:%MZ), $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
echo
echo "Server CPU per request: servers on CPU 0, redis-benchmark on CPU 1, -c $CLIENTS, $KEYS keys of each"
echo "shape, $REQUESTS requests a run at -P 16 and $((REQUESTS / 10)) at -P 1; (utime + stime) ÷ requests, best of"
echo "$ROUNDS alternating round(s). Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
for p in 16 1; do
  check=$(best "sluice-P$p-RL.CHECK")
  echo
  echo "-P $p (Sluice's RL.CHECK: $check ns)"
  echo
  printf '| %-24s | %9s | %17s | %13s | %13s |\n' script Redis "Sluice" "Sluice ÷ Redis" "÷ RL.CHECK"
  echo "|--------------------------|-----------|-------------------|---------------|---------------|"
  for s in "${SCRIPTS[@]}"; do
    read -r name _ <<<"$s"
    for variant in "$name" "$name+comment"; do
      path=native
      [ "$variant" = "$name" ] || path=Lua
      awk -v v="$variant" -v a="$(best "redis-P$p-$variant")" -v b="$(best "sluice-P$p-$variant")" \
        -v c="$check" -v path="$path" 'BEGIN {
        printf "| %-24s | %6d ns | %6d ns (%-6s) | %12.2f× | %12.2f× |\n", v, a, b, path, b / a, b / c }'
    done
  done
done
echo
echo "The bars: a known script ≤ 0.25× Redis and ≤ 1.5× RL.CHECK; a script with a comment (Lua) ≤ 1.0× Redis."
echo "Total time: $((SECONDS - STARTED)) s."
