#!/usr/bin/env bash
# bench-vs-redis.sh — Sluice against "Redis + a Lua rate limiter", side by side, in one run.
#
# What it does (issue 3's harness):
#   - starts a real Redis (--save '' --appendonly no) with the Lua scripts in scripts/lua/
#     (token_bucket.lua, gcra.lua, sliding.lua: the same semantics as RL.CHECK's TOKEN, GCRA and
#     SLIDING), and Sluice with --threads 1; both pinned to CPU 0 with taskset;
#   - preloads the same keyspace into both (--keys buckets, 16-byte keys `rlt:000000123456`,
#     the names redis-benchmark's `-r` gives `__rand_int__`), pipelined through redis-cli --pipe,
#     so every request updates an existing limiter; capacity 1,000,000 refilled at 0.01/s
#     (1,000,000 per 10^8 s), preloaded with COST 1000 so each bucket lives ~28 h: every
#     request is allowed and no bucket expires during the run;
#   - runs the same redis-benchmark, pinned to CPU 1, -c 50, at -P 1 and -P 16, over
#     `-r <keys>`, for several rounds alternating which server goes first; reports medians;
#   - measures bytes per limiter (RSS delta ÷ keys, and INFO used_memory delta ÷ keys) on fresh
#     servers, for TOKEN, GCRA and SLIDING on both and FIXED and LOG on Sluice. Before the first
#     reading, the same stream with EXISTS in place of the check (no key is made) warms the
#     server's connection buffers (Sluice's io_uring loop touches the receive buffers it lends,
#     256 KB per worker until many connections at once want more): that fixed cost is printed
#     on its own, and the figure per limiter is what the buckets add ("RSS from fresh" keeps
#     the warm-up in). Both
#     readings are taken --settle seconds after their load: the table moves still going when a
#     load ends are over by then, and jemalloc has purged what was freed (~100 ms);
#   - a churn test: an empty keyspace, `-r 1000000000` so nearly every request makes a new
#     bucket, with 10 per second buckets that expire 100 ms after their last request;
#   - a --threads 2 row: Sluice with two threads, Redis (re-pinned), and the client all on
#     CPUs 0-1.
# Then it prints one table with the ratios Sluice ÷ Redis.
#
# Usage: scripts/bench-vs-redis.sh [--quick] [--memory-only] [--keys N] [--clients N]
#                                  [--rounds N] [--duration SECONDS] [--settle SECONDS]
#                                  [--sluice PATH] [--build]
#   --quick      100,000 keys, 1 round, 1 s runs: finishes in under a minute
#   --memory-only  only Sluice's bytes/limiter rows (TOKEN, GCRA, SLIDING, FIXED, LOG, each on a
#                fresh server): no Redis and no redis-benchmark runs; needs only redis-cli
#   --keys       preloaded buckets per test (default 1,000,000)
#   --clients    redis-benchmark -c (default 50)
#   --rounds     alternating rounds; the table shows medians (default 3)
#   --duration   seconds per run (default 4); -n is sized from a short probe run
#   --settle     seconds between a memory load and its reading (default 1; the issue's bound is
#                RSS within 2 s of the load)
#   --sluice     the sluice binary (default $SLUICE_BIN, else release/sluice in $CARGO_TARGET_DIR
#                or target/)
#   --build      run `cargo build --release --bin sluice` even if the binary exists
#
# Needs redis-server, redis-cli, redis-benchmark (installed with apt-get when missing), taskset
# and awk. Every process it starts is stopped by PID on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"
# start_redis, start_sluice, the commands of both sides (sluice_cmd, redis_cmd), rss_bytes,
# used_memory, dbsize and expect_allowed.
# shellcheck source=scripts/side-by-side.sh
. "$ROOT/scripts/side-by-side.sh"

KEYS="" CLIENTS=50 ROUNDS="" DURATION="" SETTLE=1 QUICK=0 BUILD=0 MEMORY_ONLY=0 SLUICE=
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --memory-only) MEMORY_ONLY=1 ;;
    --keys) KEYS="$2"; shift ;;
    --clients) CLIENTS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --duration) DURATION="$2"; shift ;;
    --settle) SETTLE="$2"; shift ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done
if [ "$QUICK" = 1 ]; then
  KEYS=${KEYS:-100000} ROUNDS=${ROUNDS:-1} DURATION=${DURATION:-1}
else
  KEYS=${KEYS:-1000000} ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-4}
fi
CHURN_KEYSPACE=1000000000
TICK_NS=$((1000000000 / $(getconf CLK_TCK)))

log() { echo "[bench] $*" >&2; }
die() { echo "[bench] error: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Tools and the binary.

if [ "$MEMORY_ONLY" = 1 ]; then
  command -v redis-cli >/dev/null || {
    log "installing redis-tools"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-tools >&2
  }
elif ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null \
  || ! command -v redis-benchmark >/dev/null; then
  log "installing redis-server and redis-tools"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >&2
fi
for tool in taskset awk sort; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install -y util-linux mawk coreutils)"
done
need_sluice

if [ "$(nproc)" -ge 2 ]; then
  SERVER_CPU=0 CLIENT_CPU=1 BOTH_CPUS=0,1
else
  log "only one CPU: server and client share CPU 0"
  SERVER_CPU=0 CLIENT_CPU=0 BOTH_CPUS=0
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
RES="$WORK/results"
mkdir -p "$RES"

# ---------------------------------------------------------------------------------------------
# Processes: every one we start is recorded and stopped by its PID.

# PIDS, cleanup, stop, free_port and wait_serving (PORT PID LOG: PONG, or die showing LOG) come
# from scripts/lib.sh; start_redis (CPUS) and start_sluice (CPUS THREADS) from
# scripts/side-by-side.sh.

# Churn: 10 per second, so a bucket is fresh again (and dropped) 100 ms after its request.
CHURN_SLUICE="RL.CHECK rlc:__rand_int__ 10 1"
churn_redis() { echo EVALSHA "$SHA_TOKEN" 1 rlc:__rand_int__ 10 1000 10 1; }

# measure_memory NAME SIDE PORT PID COUNT PREFIX WORDS...: preloads and records bytes per bucket,
# from a baseline taken after the same stream of EXISTS (see the top), each reading SETTLE s
# after its load. The warm-up's own RSS delta (the server's fixed cost of such a burst) goes to
# $RES/fixed_NAME_SIDE.
measure_memory() {
  local name=$1 side=$2 port=$3 pid=$4 count=$5 prefix=$6 cold rss0 used0 rss1 used1 n t0
  shift 6
  cold=$(rss_bytes "$pid")
  preload "$port" "$count" "$prefix" EXISTS KEY
  sleep "$SETTLE"
  rss0=$(rss_bytes "$pid") used0=$(used_memory "$port")
  echo $((rss0 - cold)) >"$RES/fixed_${name}_$side"
  t0=$SECONDS
  preload "$port" "$count" "$prefix" "$@"
  sleep "$SETTLE"
  rss1=$(rss_bytes "$pid") used1=$(used_memory "$port")
  n=$(dbsize "$port")
  [ "$n" -ge "$count" ] || log "warning: $side $name holds $n keys after loading $count"
  awk -v a="$rss0" -v b="$rss1" -v c="$used0" -v d="$used1" -v n="$count" -v z="$cold" \
    'BEGIN { printf "%.1f %.1f %.1f\n", (b - a) / n, (d - c) / n, (b - z) / n }' >"$RES/mem_${name}_$side"
  log "$(printf '%-8s %-6s %9d keys: %6.1f B RSS, %6.1f B used_memory per limiter; %6.1f B RSS from the fresh server (the warm-up: %.1f MB) (loaded in %d s)' \
    "$name" "$side" "$count" $(cat "$RES/mem_${name}_$side") \
    "$(awk -v f="$(cat "$RES/fixed_${name}_$side")" 'BEGIN { print f / 1048576 }')" $((SECONDS - t0)))"
}

mem_row() { # LABEL ALGO COLUMN(1=RSS from the warm baseline,2=used,3=RSS from the fresh server)
  local r s
  r=$( [ -f "$RES/mem_$2_redis" ] && awk -v c="$3" '{ print $c }' "$RES/mem_$2_redis" || echo -)
  s=$(awk -v c="$3" '{ print $c }' "$RES/mem_$2_sluice")
  awk -v l="$1" -v r="$r" -v s="$s" 'BEGIN {
      rr = (r == "-") ? "-" : sprintf("%.1f", r)
      q = (r == "-" || r <= 0) ? "" : sprintf("%6.2f", s / r)
      printf "| %-43s | %2s | %10s | %7s | %7s | %10.1f | %7s | %7s | %6s | %-28s |\n",
        l, "", rr, "", "", s, "", "", q, "(Sluice/Redis: lower wins)" }'
}
memory_rows() {
  local algo
  for algo in TOKEN GCRA SLIDING FIXED; do
    mem_row "bytes/limiter $algo, RSS delta/keys" "$algo" 1
    mem_row "bytes/limiter $algo, used_memory delta" "$algo" 2
    mem_row "bytes/limiter $algo, RSS from fresh/keys" "$algo" 3
  done
  mem_row "bytes/limiter LOG(10/h, 1 entry), RSS" LOG 1
  mem_row "bytes/limiter LOG(10/h, 1 entry), used" LOG 2
  fixed_row
}
# fixed_row: the warm-up's RSS (before TOKEN's load), in MB: not per limiter.
fixed_row() {
  local r s
  r=$( [ -f "$RES/fixed_TOKEN_redis" ] && awk '{ printf "%.1f", $1 / 1048576 }' "$RES/fixed_TOKEN_redis" || echo -)
  s=$(awk '{ printf "%.1f", $1 / 1048576 }' "$RES/fixed_TOKEN_sluice")
  printf '| %-43s | %2s | %10s | %7s | %7s | %10s | %7s | %7s | %6s | %-28s |\n' \
    "MB RSS of the warm-up (EXISTS, no keys)" "" "$r" "" "" "$s" "" "" "" "(fixed: connection buffers)"
}

# sluice_memory NAME WORDS...: a fresh Sluice, preloaded with WORDS per key, its bytes per bucket.
sluice_memory() {
  local name=$1
  shift
  start_sluice "$SERVER_CPU" 1
  measure_memory "$name" sluice "$S_PORT" "$S_PID" "$KEYS" "$(prefix_of "$name")" "$@"
  stop "$S_PID"
}

# ---------------------------------------------------------------------------------------------
# redis-benchmark. Each (test, side, -P) gets a probe run once to size -n for --duration.

bench_once() { # PORT CLIENT_CPUS P N KEYSPACE CMD... -> "rps p50 p99"
  local port=$1 cpus=$2 p=$3 n=$4 r=$5
  shift 5
  bench_csv "$cpus" "$port" -c "$CLIENTS" -P "$p" -n "$n" -r "$r" "$@" | awk -F, '{ print $2, $5, $7 }'
}

# run TEST SIDE PORT CLIENT_CPUS P KEYSPACE CMD...: one measured run, appended to the results.
run() {
  local test=$1 side=$2 port=$3 cpus=$4 p=$5 r=$6 sizefile n probe pid u0 k0 u1 k1
  shift 6
  sizefile="$RES/n_${test}_${side}_$p"
  if [ ! -f "$sizefile" ]; then
    probe=$(bench_once "$port" "$cpus" "$p" $((2000 * p)) "$r" "$@")
    awk -v rps="${probe%% *}" -v d="$DURATION" -v p="$p" -v c="$CLIENTS" 'BEGIN {
        n = int(rps * d); m = 4 * p * c; if (n < m) n = m; print n }' >"$sizefile"
  fi
  n=$(cat "$sizefile")
  pid=$([ "$port" = "$R_PORT" ] && echo "$R_PID" || echo "$S_PID")
  read -r u0 k0 < <(cpu_split "$pid")
  bench_once "$port" "$cpus" "$p" "$n" "$r" "$@" | tee -a "$RES/${test}_${side}_$p" |
    awk -v t="$test" -v s="$side" -v p="$p" -v n="$n" \
      '{ printf "[bench] %-14s -P %-2s %-6s %9d rps  p50 %6.3f ms  p99 %6.3f ms  (-n %d)\n", t, p, s, $1, $2, $3, n }' >&2
  read -r u1 k1 < <(cpu_split "$pid")
  awk -v d=$((u1 - u0 + k1 - k0)) -v t="$TICK_NS" -v n="$n" 'BEGIN { printf "%.0f\n", d * t / n }' \
    >>"$RES/cpu_${test}_${side}_$p"
  awk -v d=$((u1 - u0)) -v t="$TICK_NS" -v n="$n" 'BEGIN { printf "%.0f\n", d * t / n }' \
    >>"$RES/user_${test}_${side}_$p"
  awk -v d=$((k1 - k0)) -v t="$TICK_NS" -v n="$n" 'BEGIN { printf "%.0f\n", d * t / n }' \
    >>"$RES/kernel_${test}_${side}_$p"
}

# pair TEST P ROUND KEYSPACE REDIS_CMD -- SLUICE_CMD: Redis and Sluice back to back, the order
# alternating by round.
pair() {
  local test=$1 p=$2 round=$3 r=$4 rcmd=() scmd=()
  shift 4
  while [ "$1" != -- ]; do rcmd+=("$1"); shift; done
  shift
  scmd=("$@")
  if [ $((round % 2)) = 1 ]; then
    run "$test" redis "$R_PORT" "$CLIENT_CPUS" "$p" "$r" "${rcmd[@]}"
    run "$test" sluice "$S_PORT" "$CLIENT_CPUS" "$p" "$r" "${scmd[@]}"
  else
    run "$test" sluice "$S_PORT" "$CLIENT_CPUS" "$p" "$r" "${scmd[@]}"
    run "$test" redis "$R_PORT" "$CLIENT_CPUS" "$p" "$r" "${rcmd[@]}"
  fi
}

# ---------------------------------------------------------------------------------------------
# The phases. Each starts fresh servers so that each memory figure starts from an empty server.

STARTED=$SECONDS
if [ "$MEMORY_ONLY" = 1 ]; then
  log "sluice: $SLUICE; memory only, $KEYS keys per algorithm; server on CPU $SERVER_CPU"
  for algo in TOKEN GCRA SLIDING FIXED; do
    # shellcheck disable=SC2046
    sluice_memory "$algo" $(sluice_cmd "$algo" KEY 1000)
  done
  sluice_memory LOG RL.CHECK KEY 10 3600 ALGO LOG
  echo
  echo "Sluice memory per limiter, $(nproc) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "--threads 1 on CPU $SERVER_CPU, $KEYS preloaded 16-byte keys per algorithm, each on a fresh server."
  echo
  printf '| %-43s | %2s | %10s | %7s | %7s | %10s | %7s | %7s | %6s | %-28s |\n' \
    test -P "Redis rps" p50 p99 "Sluice rps" p50 p99 "S/R" note
  echo "|---------------------------------------------|----|------------|---------|---------|------------|---------|---------|--------|------------------------------|"
  memory_rows
  echo
  echo "Total time: $((SECONDS - STARTED)) s."
  exit 0
fi
log "sluice: $SLUICE; $KEYS keys, -c $CLIENTS, $ROUNDS round(s) of ${DURATION}s runs; servers on CPU $SERVER_CPU, client on CPU $CLIENT_CPU"

# steady ALGO EXTRA_TESTS: one server pair, ALGO preloaded, ALGO (and PING, INCR) benchmarked.
steady() {
  local algo=$1 with_floor=$2 prefix round p
  prefix=$(prefix_of "$algo")
  start_redis "$SERVER_CPU"
  start_sluice "$SERVER_CPU" 1
  CLIENT_CPUS=$CLIENT_CPU
  # shellcheck disable=SC2046
  measure_memory "$algo" redis "$R_PORT" "$R_PID" "$KEYS" "$prefix" $(redis_cmd "$algo" KEY 1000)
  # shellcheck disable=SC2046
  measure_memory "$algo" sluice "$S_PORT" "$S_PID" "$KEYS" "$prefix" $(sluice_cmd "$algo" KEY 1000)
  # shellcheck disable=SC2046
  expect_allowed "$R_PORT" $(redis_cmd "$algo" "${prefix}000000000000")
  # shellcheck disable=SC2046
  expect_allowed "$S_PORT" $(sluice_cmd "$algo" "${prefix}000000000000")
  for round in $(seq 1 "$ROUNDS"); do
    for p in 1 16; do
      if [ "$with_floor" = 1 ]; then
        pair PING "$p" "$round" "$KEYS" PING -- PING
        pair INCR "$p" "$round" "$KEYS" INCR ctr:__rand_int__ -- INCR ctr:__rand_int__
      fi
      # shellcheck disable=SC2046
      pair "$algo" "$p" "$round" "$KEYS" $(redis_cmd "$algo" "${prefix}__rand_int__") -- \
        $(sluice_cmd "$algo" "${prefix}__rand_int__")
    done
  done
  stop "$S_PID"
  if [ "$with_floor" = 1 ]; then
    two_threads
  fi
  stop "$R_PID"
}

# Two threads: Sluice --threads 2 (fresh, preloaded the same way); the Redis of the TOKEN phase,
# its keys already loaded, re-pinned to CPUs 0-1 like Sluice and the client.
two_threads() {
  local round
  taskset -a -p -c "$BOTH_CPUS" "$R_PID" >/dev/null
  start_sluice "$BOTH_CPUS" 2
  CLIENT_CPUS=$BOTH_CPUS
  # shellcheck disable=SC2046
  preload "$S_PORT" "$KEYS" rlt: $(sluice_cmd TOKEN KEY 1000)
  for round in $(seq 1 "$ROUNDS"); do
    pair PING-t2 16 "$round" "$KEYS" PING -- PING
    # shellcheck disable=SC2046
    pair TOKEN-t2 16 "$round" "$KEYS" $(redis_cmd TOKEN rlt:__rand_int__) -- \
      $(sluice_cmd TOKEN rlt:__rand_int__)
  done
  stop "$S_PID"
}

steady TOKEN 1
steady GCRA 0
steady SLIDING 0

# FIXED and LOG: memory only (Redis has no script for them). FIXED as the others; LOG limit 10
# per hour, one request per bucket.
# shellcheck disable=SC2046
sluice_memory FIXED $(sluice_cmd FIXED KEY 1000)
sluice_memory LOG RL.CHECK KEY 10 3600 ALGO LOG

# Churn: empty servers, nearly every request makes a bucket, buckets expire 100 ms later.
start_redis "$SERVER_CPU"
start_sluice "$SERVER_CPU" 1
CLIENT_CPUS=$CLIENT_CPU
for round in $(seq 1 "$ROUNDS"); do
  for p in 1 16; do
    # shellcheck disable=SC2046
    pair churn "$p" "$round" "$CHURN_KEYSPACE" $(churn_redis) -- $CHURN_SLUICE
  done
done
log "after churn: redis holds $(dbsize "$R_PORT") keys, sluice $(dbsize "$S_PORT")"
stop "$R_PID"
stop "$S_PID"

# ---------------------------------------------------------------------------------------------
# The table: medians over rounds.

median3() { # FILE -> median of each of the 3 columns
  local col
  for col in 1 2 3; do
    awk -v c="$col" '{ print $c }' "$1" | sort -g |
      awk '{ a[NR] = $1 } END { if (NR % 2) m = a[(NR + 1) / 2]; else m = (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%s ", m }'
  done
  echo
}
rps_of() { local f="$RES/${1}_${2}_$3"; [ -f "$f" ] && median3 "$f" | awk '{ print $1 }'; }

row() { # LABEL TEST P NOTE
  local label=$1 test=$2 p=$3 note=$4 r s
  r=$(median3 "$RES/${test}_redis_$p") s=$(median3 "$RES/${test}_sluice_$p")
  # shellcheck disable=SC2086
  set -- $r $s
  awk -v l="$label" -v p="$p" -v r1="$1" -v r2="$2" -v r3="$3" -v s1="$4" -v s2="$5" -v s3="$6" \
    -v note="$note" 'BEGIN {
      printf "| %-43s | %2s | %10d | %7.3f | %7.3f | %10d | %7.3f | %7.3f | %6.2f | %-28s |\n",
        l, p, r1, r2, r3, s1, s2, s3, (r1 > 0 ? s1 / r1 : 0), note }'
}
ratio() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { if (a > 0 && b > 0) printf "%s %.2f", t, a / b }'; }

echo
echo "Sluice vs Redis $(redis-server --version | awk '{ print $3 }' | tr -d 'v='), $(nproc) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "servers on CPU $SERVER_CPU, redis-benchmark on CPU $CLIENT_CPU, -c $CLIENTS, $KEYS preloaded 16-byte keys, medians of $ROUNDS round(s) of ${DURATION}s; latency in ms"
echo "Redis side: EVALSHA of scripts/lua/*.lua; Sluice side: RL.CHECK (--threads 1 unless t2)."
echo
printf '| %-43s | %2s | %10s | %7s | %7s | %10s | %7s | %7s | %6s | %-28s |\n' \
  test -P "Redis rps" p50 p99 "Sluice rps" p50 p99 "S/R" note
echo "|---------------------------------------------|----|------------|---------|---------|------------|---------|---------|--------|------------------------------|"
for p in 1 16; do
  row "PING (protocol floor)" PING "$p" ""
  row "INCR (native write)" INCR "$p" ""
  for algo in TOKEN GCRA SLIDING; do
    row "$algo: EVALSHA $(lua_of "$algo") vs RL.CHECK" "$algo" "$p" \
      "$(ratio "$(rps_of "$algo" sluice "$p")" "$(rps_of PING sluice "$p")" "S/S-PING")"
  done
  row "churn TOKEN: new keys, expire in 100ms" churn "$p" \
    "$(ratio "$(rps_of churn sluice "$p")" "$(rps_of TOKEN sluice "$p")" "S/steady")$(ratio "$(rps_of churn redis "$p")" "$(rps_of TOKEN redis "$p")" " R/steady")"
done
row "PING --threads 2 (all on CPUs 0-1)" PING-t2 16 ""
row "TOKEN --threads 2 (all on CPUs 0-1)" TOKEN-t2 16 \
  "$(ratio "$(rps_of TOKEN-t2 sluice 16)" "$(rps_of PING-t2 sluice 16)" "S/S-PING")$(ratio "$(rps_of TOKEN-t2 sluice 16)" "$(rps_of TOKEN sluice 16)" " t2/t1")"
memory_rows

echo
echo "Server CPU per request: (utime + stime) of the server process from /proc/PID/stat over each run ÷ its requests, median of rounds."
echo "For --threads 2 rows the client shares the server's CPUs. Lower is better; S/R is Sluice ÷ Redis."
echo
printf '| %-43s | %2s | %13s | %13s | %6s |\n' test -P "Redis ns/req" "Sluice ns/req" "S/R"
echo "|---------------------------------------------|----|---------------|---------------|--------|"
cpu_median() { sort -g "$1" | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
cpu_row() { # LABEL TEST P
  local r s
  r=$(cpu_median "$RES/cpu_$2_redis_$3") s=$(cpu_median "$RES/cpu_$2_sluice_$3")
  awk -v l="$1" -v p="$3" -v r="$r" -v s="$s" 'BEGIN {
      printf "| %-43s | %2s | %13d | %13d | %6.2f |\n", l, p, r, s, (r > 0 ? s / r : 0) }'
}
for p in 1 16; do
  cpu_row "PING" PING "$p"
  cpu_row "INCR" INCR "$p"
  for algo in TOKEN GCRA SLIDING; do cpu_row "$algo: EVALSHA vs RL.CHECK" "$algo" "$p"; done
  cpu_row "churn TOKEN" churn "$p"
done
cpu_row "PING --threads 2" PING-t2 16
cpu_row "TOKEN --threads 2" TOKEN-t2 16
echo
echo "The same at -P 16, user and kernel time apart (utime and stime, medians of rounds; a"
echo "column's two medians need not add up to the table above). At -P 16 the kernel's share"
echo "(the socket reads and writes, and on loopback the peer's TCP receive work that a send runs)"
echo "is most of a request on both sides."
echo
printf '| %-43s | %13s | %13s | %13s | %13s |\n' test "Redis user" "Redis kernel" "Sluice user" "Sluice kernel"
echo "|---------------------------------------------|---------------|---------------|---------------|---------------|"
split_row() { # LABEL TEST
  awk -v l="$1" -v a="$(cpu_median "$RES/user_$2_redis_16")" -v b="$(cpu_median "$RES/kernel_$2_redis_16")" \
    -v c="$(cpu_median "$RES/user_$2_sluice_16")" -v d="$(cpu_median "$RES/kernel_$2_sluice_16")" \
    'BEGIN { printf "| %-43s | %13d | %13d | %13d | %13d |\n", l, a, b, c, d }'
}
split_row "PING" PING
split_row "INCR" INCR
for algo in TOKEN GCRA SLIDING; do split_row "$algo: EVALSHA vs RL.CHECK" "$algo"; done
echo
echo "S/R: Sluice ÷ Redis (rps; for bytes, lower is better). S/S-PING: RL.CHECK rps ÷ Sluice PING rps at the same -P."
echo "S/steady, R/steady: churn rps ÷ steady-state TOKEN rps on the same side. t2/t1: Sluice --threads 2 ÷ --threads 1."
echo "Total time: $((SECONDS - STARTED)) s."
