#!/usr/bin/env bash
# scale-bench.sh — Sluice and Redis from ten thousand to fifty million buckets, side by side, in
# one run (issue 42: "Fifty million buckets").
#
# For each count N (default 10k, 1M, 10M, 50M), each side on a fresh server pinned to CPU 0:
#   - loads keys 0..N-1, every one, through a pipelined stream (redis-cli --pipe fed by a
#     generator; redis-benchmark -r would leave some keys unmade), bounded by --load-limit;
#   - reads RSS --settle s after the load's end; bytes per bucket = (that RSS − the RSS of the
#     empty server) ÷ N. Counted from the empty server, the connection loop's fixed costs are in;
#   - measures server CPU per request at -P 16 -c 50 over the N keys (redis-benchmark -r N with
#     `__rand_int__`, pinned to CPU 1; utime + stime of the server from /proc/PID/stat ÷ requests).
# The sides: Sluice RL.CHECK TOKEN (--threads 1), Redis INCR, and Redis with the Lua token bucket
# (scripts/lua/token_bucket.lua, EVALSHA: a hash per key). Sluice SLIDING and FIXED get their
# RSS per bucket at the --algo-counts (default 1M and 50M). A side whose load would not fit in
# the memory available (its bytes per key at the last count, times N, with half again for a
# table's growth), or whose load would take longer than --load-limit at the rate of its last
# load (Redis's Lua bucket: about 100,000 keys a second at best), is left out at that count and
# the table says so. The load average before and
# after each count is printed with the table: other work on the machine moves these figures.
#
# Usage: scripts/scale-bench.sh [--counts "10000 1000000 10000000 50000000"]
#                               [--algo-counts "1000000 50000000"] [--duration SECONDS]
#                               [--settle SECONDS] [--load-limit SECONDS] [--sluice PATH] [--build]
#   --counts       bucket counts (default: 10000 1000000 10000000 50000000)
#   --algo-counts  counts at which SLIDING and FIXED are loaded too (default: 1000000 50000000)
#   --duration     seconds per CPU run (default 4); -n is sized from a short probe run
#   --settle       seconds between a load's end and its RSS reading (default 1; the issue's bound
#                  is RSS within 2 s of the load)
#   --load-limit   seconds a load may take (default 600): a side whose last load's rate says it
#                  would take longer is left out, and a load still going then is stopped
#   --sluice       the sluice binary (default $SLUICE_BIN, else release/sluice in $CARGO_TARGET_DIR
#                  or target/)
#   --build        run `cargo build --release --bin sluice` even if the binary exists
#
# Needs redis-server, redis-cli, redis-benchmark, python3, taskset, timeout and awk. Every
# process it starts is stopped by PID on exit. The whole run takes about 30 minutes and 4 GB of
# memory on a 2-core VM (Redis's fifty million INCR keys). Redis's Lua bucket loads about 60,000
# keys a second there: at fifty million (some 10 GB) only with --load-limit 900 or more.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"
# shellcheck source=scripts/side-by-side.sh
. "$ROOT/scripts/side-by-side.sh"

COUNTS="10000 1000000 10000000 50000000" ALGO_COUNTS="1000000 50000000"
DURATION=4 SETTLE=1 LOAD_LIMIT=600 BUILD=0 SLUICE= CLIENTS=50 PIPELINE=16
while [ $# -gt 0 ]; do
  case "$1" in
    --counts) COUNTS="$2"; shift ;;
    --algo-counts) ALGO_COUNTS="$2"; shift ;;
    --duration) DURATION="$2"; shift ;;
    --settle) SETTLE="$2"; shift ;;
    --load-limit) LOAD_LIMIT="$2"; shift ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done

log() { echo "[scale] $*" >&2; }
die() { echo "[scale] error: $*" >&2; exit 1; }

need_tools redis-server redis-cli redis-benchmark python3 taskset timeout awk
need_sluice
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs: the server on CPU 0, the client on CPU 1"
TICK_NS=$((1000000000 / $(getconf CLK_TCK)))

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-scale.XXXXXX")
RES="$WORK/results"
mkdir -p "$RES"

# Bytes per key assumed before a side has been measured, for the fit check: generous.
declare -A PER_KEY=([TOKEN]=80 [SLIDING]=96 [FIXED]=96 [INCR]=120 [LUA]=240)

# Seconds per key of each side's last load, for the time check: none yet.
declare -A LOAD_RATE=()

mem_available() { awk '/^MemAvailable:/ { print $2 * 1024 }' /proc/meminfo; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# fits SIDE N: whether N keys of SIDE fit in the memory available, with 1 GB to spare.
fits() {
  awk -v b="${PER_KEY[$1]}" -v n="$2" -v a="$(mem_available)" \
    'BEGIN { exit !(b * n * 1.5 + 1073741824 < a) }'
}

# cpu_run PORT PID N CMD...: ns of server CPU per request at -P 16 -c 50 over N keys, and rps.
cpu_run() {
  local port=$1 pid=$2 keys=$3 probe n t0 t1 rps
  shift 3
  probe=$(bench_csv 1 "$port" -c "$CLIENTS" -P "$PIPELINE" -n $((2000 * PIPELINE)) -r "$keys" "$@")
  n=$(awk -F, -v d="$DURATION" '{ n = int($2 * d); if (n < 100000) n = 100000; print n }' <<<"$probe")
  t0=$(cpu_ticks "$pid")
  rps=$(bench_csv 1 "$port" -c "$CLIENTS" -P "$PIPELINE" -n "$n" -r "$keys" "$@" | cut -d, -f2)
  t1=$(cpu_ticks "$pid")
  awk -v d=$((t1 - t0)) -v t="$TICK_NS" -v n="$n" -v r="$rps" 'BEGIN { printf "%.0f %.0f\n", d * t / n, r }'
}

# measure SIDE N: a fresh server of SIDE (TOKEN, SLIDING, FIXED: Sluice; INCR, LUA: Redis),
# N keys loaded; writes "bytes/key ns/request rps load-seconds" to $RES/SIDE_N ("-" for what
# was not measured), or "skip REASON".
measure() {
  local side=$1 n=$2 port pid prefix rss0 rss1 t0 secs per cpu="- -" words
  if ! fits "$side" "$n"; then
    echo "skip memory" >"$RES/${side}_$n"
    log "$(printf '%-7s %9d keys: left out, would not fit in %d MB available' "$side" "$n" $(($(mem_available) >> 20)))"
    return
  fi
  if [ -n "${LOAD_RATE[$side]:-}" ] \
    && awk -v r="${LOAD_RATE[$side]}" -v n="$n" -v l="$LOAD_LIMIT" 'BEGIN { exit !(r * n > l) }'; then
    echo "skip time" >"$RES/${side}_$n"
    log "$(printf '%-7s %9d keys: left out, its load would take %.0f s (--load-limit %d)' "$side" "$n" \
      "$(awk -v r="${LOAD_RATE[$side]}" -v n="$n" 'BEGIN { print r * n }')" "$LOAD_LIMIT")"
    return
  fi
  case "$side" in
    TOKEN | SLIDING | FIXED)
      start_sluice 0 1
      port=$S_PORT pid=$S_PID prefix=$(prefix_of "$side")
      # shellcheck disable=SC2207
      words=($(sluice_cmd "$side" KEY 1000)) ;;
    INCR)
      start_redis 0
      port=$R_PORT pid=$R_PID prefix=ctr: words=(INCR KEY) ;;
    LUA)
      start_redis 0
      port=$R_PORT pid=$R_PID prefix=rlt:
      # shellcheck disable=SC2207
      words=($(redis_cmd TOKEN KEY 1000)) ;;
  esac
  rss0=$(rss_bytes "$pid")
  t0=$(date +%s.%N)
  # The load's generator and redis-cli on CPU 1, as the benchmark client.
  if ! (taskset -p -c 1 "$BASHPID" >/dev/null && load_keys "$port" "$n" "$prefix" "$LOAD_LIMIT" "${words[@]}"); then
    echo "skip load (over ${LOAD_LIMIT}s or failed)" >"$RES/${side}_$n"
    log "$side $n keys: the load did not finish: $(tail -c 300 "$WORK/load.out" | tr '\r\n' '  ')"
    stop "$pid"
    return
  fi
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
  LOAD_RATE[$side]=$(awk -v a="$t0" -v b="$(date +%s.%N)" -v n="$n" 'BEGIN { print (b - a) / n }')
  sleep "$SETTLE"
  rss1=$(rss_bytes "$pid")
  [ "$(dbsize "$port")" -ge "$n" ] || log "warning: $side holds $(dbsize "$port") keys after loading $n"
  per=$(awk -v a="$rss0" -v b="$rss1" -v n="$n" 'BEGIN { printf "%.1f", (b - a) / n }')
  PER_KEY[$side]=$per
  case "$side" in
    TOKEN)
      expect_allowed "$port" $(sluice_cmd TOKEN rlt:000000000000)
      cpu=$(cpu_run "$port" "$pid" "$n" $(sluice_cmd TOKEN rlt:__rand_int__)) ;;
    INCR) cpu=$(cpu_run "$port" "$pid" "$n" INCR ctr:__rand_int__) ;;
    LUA)
      expect_allowed "$port" $(redis_cmd TOKEN rlt:000000000000)
      cpu=$(cpu_run "$port" "$pid" "$n" $(redis_cmd TOKEN rlt:__rand_int__)) ;;
  esac
  echo "$per $cpu $secs" >"$RES/${side}_$n"
  log "$(printf '%-7s %9d keys: %6.1f B RSS per key (loaded in %d s); %s ns server CPU per request, %s rps at -P %d' \
    "$side" "$n" "$per" "$secs" ${cpu% *} ${cpu#* } "$PIPELINE")"
  stop "$pid"
}

STARTED=$SECONDS
log "sluice: $SLUICE; counts: $COUNTS; servers on CPU 0, loads and redis-benchmark on CPU 1"
for n in $COUNTS; do
  echo "$(loadavg)" >"$RES/load0_$n"
  sides="TOKEN INCR LUA"
  case " $ALGO_COUNTS " in *" $n "*) sides="$sides SLIDING FIXED" ;; esac
  for side in $sides; do measure "$side" "$n"; done
  echo "$(loadavg)" >"$RES/load1_$n"
done

# ---------------------------------------------------------------------------------------------
# The tables.

field() { # SIDE N COLUMN: a measured field, or the reason it is missing
  local f="$RES/$1_$2"
  [ -f "$f" ] || { echo "-"; return; }
  case "$(cat "$f")" in
    skip*) cut -d' ' -f2 "$f" | sed 's/^memory$/(no room)/; s/^time$/(load over limit)/; s/^load$/(load failed)/' ;;
    *) awk -v c="$3" '{ print $c }' "$f" ;;
  esac
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }
first_count=$(echo "$COUNTS" | awk '{ for (i = 1; i <= NF; i++) if ($i == 1000000) { print $i; exit } print $1 }')

echo
echo "Sluice vs Redis $(redis-server --version | awk '{ print $3 }' | tr -d 'v='), $(nproc) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "Each figure from one fresh server; servers on CPU 0, client on CPU 1; -P $PIPELINE -c $CLIENTS, ${DURATION}s runs."
echo
echo "Server CPU per request (ns), -P $PIPELINE over N keys; S/x = Sluice ÷ x; growth = Sluice ÷ Sluice at $first_count:"
echo
echo "| buckets | Sluice RL.CHECK | Redis INCR | Redis Lua bucket | S/INCR | S/Lua | growth | load avg before → after |"
echo "|---|---|---|---|---|---|---|---|"
for n in $COUNTS; do
  s=$(field TOKEN "$n" 2) i=$(field INCR "$n" 2) l=$(field LUA "$n" 2)
  echo "| $n | $s | $i | $l | $(ratio "$s" "$i") | $(ratio "$s" "$l") | $(ratio "$s" "$(field TOKEN "$first_count" 2)") | $(cat "$RES/load0_$n") → $(cat "$RES/load1_$n") |"
done
echo
echo "RSS per bucket (B): (RSS --settle ${SETTLE}s after the load − RSS of the empty server) ÷ N:"
echo
echo "| buckets | Sluice TOKEN | Sluice SLIDING | Sluice FIXED | Redis INCR | Redis Lua bucket | TOKEN/INCR | TOKEN/Lua | load s (TOKEN, INCR, Lua) |"
echo "|---|---|---|---|---|---|---|---|---|"
for n in $COUNTS; do
  t=$(field TOKEN "$n" 1) i=$(field INCR "$n" 1) l=$(field LUA "$n" 1)
  echo "| $n | $t | $(field SLIDING "$n" 1) | $(field FIXED "$n" 1) | $i | $l | $(ratio "$t" "$i") | $(ratio "$t" "$l") | $(field TOKEN "$n" 4), $(field INCR "$n" 4), $(field LUA "$n" 4) |"
done
echo
echo "Total time: $((SECONDS - STARTED)) s."
