#!/usr/bin/env bash
# tail-bench.sh — the latency tail while new keys are created, Sluice against Redis, in one run.
#
# Setup (issue 23, item 2):
#   - Redis (--save '' --appendonly no) and Sluice (--threads 1), both pinned to CPU 0;
#     redis-benchmark pinned to CPU 1, -c 50 -P 1, --requests requests per row (default 200,000)
#     over --keys random keys (default 100,000), so most requests create a key;
#   - each round starts from empty servers (Redis FLUSHALL, Sluice restarted), so both grow
#     their tables during the run: Redis PING, Redis INCR on new keys, Sluice PING, Sluice
#     RL.CHECK on new keys (capacity 1,000,000, period 100,000,000 s);
#   - prints p99 and max latency of each row, and per round whether RL.CHECK's p99 is at most
#     Redis INCR's p99 and RL.CHECK's max at most twice Redis INCR's max.
#
# Usage: scripts/tail-bench.sh [--keys N] [--requests N] [--rounds N] [--sluice PATH]
#                              [--before PATH] [--build] [-- SLUICE-ARGS...]
#   --rounds     rounds (default 3)
#   --sluice     the sluice binary (default target/release/sluice, or $SLUICE_BIN)
#   --before     an older sluice binary, measured in the same rounds (row "before RL.CHECK")
#   --build      run `cargo build --release --bin sluice` first
#   SLUICE-ARGS  extra arguments for the sluice server (e.g. --io uring)
#
# Needs redis-server, redis-cli, redis-benchmark, taskset and awk. Every process it starts is
# stopped by PID on exit. Exit status 0 whatever the figures: it measures, it does not judge.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

KEYS=100000 REQUESTS=200000 ROUNDS=3 BUILD=0 SLUICE= BEFORE= EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --keys) KEYS="$2"; shift ;;
    --requests) REQUESTS="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --before) BEFORE="$2"; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done

log() { echo "[tail] $*" >&2; }
die() { echo "[tail] error: $*" >&2; exit 1; }

for tool in redis-server redis-cli redis-benchmark taskset awk; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install -y redis-server redis-tools util-linux mawk)"
done
need_sluice
[ -z "$BEFORE" ] || [ -x "$BEFORE" ] || die "no sluice binary at $BEFORE"
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs: the servers on CPU 0, the client on CPU 1"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-tail.XXXXXX")
LIMIT=1000000 PERIOD_S=100000000
ROWS="$WORK/rows"
: >"$ROWS"

# row ROUND LABEL PORT CMD...: one redis-benchmark run at -c 50 -P 1; appends
# "ROUND LABEL p99 max" to $ROWS.
row() {
  local round=$1 label=$2 port=$3 line
  shift 3
  line=$(bench_csv 1 "$port" -c 50 -P 1 -n "$REQUESTS" -r "$KEYS" "$@")
  echo "$line" | awk -F, -v r="$round" -v l="$label" '{ print r, l, $7, $8 }' | tee -a "$ROWS" \
    | awk '{ printf "[tail] round %s %-16s p99 %s ms, max %s ms\n", $1, $2, $3, $4 }' >&2
}

start_pinned 0 redis redis-server --bind 127.0.0.1 --save '' --appendonly no --protected-mode no \
  --dir "$WORK"
for round in $(seq 1 "$ROUNDS"); do
  redis-cli -p "$PORT_redis" FLUSHALL >/dev/null
  start_pinned 0 sluice "$SLUICE" --bind 127.0.0.1 --threads 1 "${EXTRA[@]}"
  row "$round" redis-PING "$PORT_redis" PING
  row "$round" redis-INCR "$PORT_redis" INCR "ctr:__rand_int__"
  row "$round" sluice-PING "$PORT_sluice" PING
  row "$round" sluice-RL.CHECK "$PORT_sluice" RL.CHECK "rl:__rand_int__" "$LIMIT" "$PERIOD_S"
  keys=$(redis-cli -p "$PORT_sluice" DBSIZE)
  [ "$keys" -gt $((KEYS / 2)) ] || die "sluice holds $keys keys after the run, not ~$KEYS"
  stop "$PID_sluice"
  [ -n "$BEFORE" ] || continue
  start_pinned 0 before "$BEFORE" --bind 127.0.0.1 --threads 1 "${EXTRA[@]}"
  row "$round" before-RL.CHECK "$PORT_before" RL.CHECK "rl:__rand_int__" "$LIMIT" "$PERIOD_S"
  stop "$PID_before"
done
stop "$PID_redis"

echo
echo "Tail at -c 50 -P 1, $KEYS random keys, $REQUESTS requests per row, $(date -u +%Y-%m-%dT%H:%MZ),"
echo "servers on CPU 0, redis-benchmark on CPU 1, each round from empty servers${EXTRA[*]:+, sluice ${EXTRA[*]}}."
echo
echo "| round | Redis PING p99/max | Redis INCR p99/max | Sluice PING p99/max | RL.CHECK p99/max | p99 ≤ INCR | max ≤ 2×INCR |${BEFORE:+ before: RL.CHECK p99/max |}"
echo "|---|---|---|---|---|---|---|${BEFORE:+---|}"
awk '
  { p99[$1, $2] = $3; mx[$1, $2] = $4; if ($1 > n) n = $1 }
  END {
    for (r = 1; r <= n; r++) {
      c = "sluice-RL.CHECK"; i = "redis-INCR"
      printf "| %d | %.3f / %.3f | %.3f / %.3f | %.3f / %.3f | %.3f / %.3f | %s | %s |", r,
        p99[r, "redis-PING"], mx[r, "redis-PING"], p99[r, i], mx[r, i],
        p99[r, "sluice-PING"], mx[r, "sluice-PING"], p99[r, c], mx[r, c],
        (p99[r, c] <= p99[r, i]) ? "yes" : "no", (mx[r, c] <= 2 * mx[r, i]) ? "yes" : "no"
      b = "before-RL.CHECK"
      if ((r, b) in p99) printf " %.3f / %.3f |", p99[r, b], mx[r, b]
      printf "\n"
    }
  }' "$ROWS"
