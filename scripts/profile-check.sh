#!/usr/bin/env bash
# profile-check.sh — where a server's CPU goes at `-P 16`, kernel and user space, by sampling.
#
# For hosts without `perf` (scripts/profile.py samples through the same system call). One
# server at a time, pinned to CPU 0, with redis-benchmark (-c 50 -P 16) on CPU 1:
#   - Sluice (--threads 1): RL.CHECK over --keys preloaded TOKEN buckets (16-byte keys,
#     `rlt:000000123456`, every check allowed), as scripts/bench-vs-redis.sh loads them;
#   - with --redis, then Redis: PING, the figure issue 42 compares RL.CHECK against.
# After 2 s of load, the serving thread (Sluice's worker `sluice-0`, Redis's main thread) is
# sampled for --seconds; the requests served meanwhile come from INFO's
# total_commands_processed, read just before and just after the sampling. Each report gives the share of samples and the ns per request of
# user space by function, and of the kernel by subsystem and by function
# (`scripts/profile.py report`; what a sample means is said there). Sampling slows the thread
# by some 5–15%: compare runs sampled alike, and take CPU per request from
# scripts/bench-vs-redis.sh. Redis's functions are named only if its binary has symbols (the
# Debian package's has none: its user space is one row).
#
# Usage: scripts/profile-check.sh [--keys N] [--seconds S] [--period-us N] [--redis]
#                                 [--sluice-args "ARGS"] [--out DIR] [--sluice PATH] [--build]
#   --keys        preloaded buckets (default 1,000,000)
#   --seconds     sampled time per server (default 6)
#   --period-us   one sample per N µs of the thread's CPU time (default 50)
#   --redis       profile Redis's PING too
#   --sluice-args extra flags for Sluice, split on spaces (e.g. "--shards 4", "--io epoll")
#   --out         keep the samples there (default: a scratch directory, removed on exit)
#   --sluice      the sluice binary (default: the release build's, or $SLUICE_BIN)
#   --build       run `cargo build --release --bin sluice` first
#
# Needs root (or kernel.perf_event_paranoid <= 1), python3, addr2line and readelf (binutils),
# redis-server, redis-cli, redis-benchmark and taskset. Every process it starts is stopped by
# PID on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

KEYS=1000000 SECONDS_SAMPLED=6 PERIOD_US=50 REDIS=0 SLUICE_ARGS="" OUT="" BUILD=0 SLUICE=
while [ $# -gt 0 ]; do
  case "$1" in
    --keys) KEYS="$2"; shift ;;
    --seconds) SECONDS_SAMPLED="$2"; shift ;;
    --period-us) PERIOD_US="$2"; shift ;;
    --redis) REDIS=1 ;;
    --sluice-args) SLUICE_ARGS="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done

log() { echo "[profile] $*" >&2; }
die() { echo "[profile] error: $*" >&2; exit 1; }

need_tools redis-server redis-cli redis-benchmark taskset python3 addr2line readelf
need_sluice
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs: the server on CPU 0, the client on CPU 1"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-profile.XXXXXX")
OUT=${OUT:-$WORK}
mkdir -p "$OUT"
# shellcheck source=scripts/side-by-side.sh
. "$ROOT/scripts/side-by-side.sh"

# profile NAME PORT TID COMMAND...: load on PORT (bounded: at most 2 s + the sampled time + 10 s),
# TID sampled, then the report.
profile() {
  local name=$1 port=$2 tid=$3 bench
  shift 3
  timeout $((SECONDS_SAMPLED + 12)) taskset -c 1 redis-benchmark -p "$port" -c 50 -P 16 \
    -n 2000000000 -r "$KEYS" -q "$@" >/dev/null 2>&1 &
  bench=$!
  PIDS+=("$bench")
  sleep 2
  kill -0 "$bench" 2>/dev/null || die "redis-benchmark against $name exited early"
  python3 "$ROOT/scripts/profile.py" record "$tid" "$SECONDS_SAMPLED" "$OUT/$name" \
    --period-us "$PERIOD_US" --port "$port" >&2
  stop "$bench"
  echo "== $name: $*"
  python3 "$ROOT/scripts/profile.py" report "$OUT/$name"
  echo
}

# shellcheck disable=SC2086 # SLUICE_ARGS is split on purpose
start_pinned 0 sluice "$SLUICE" --bind 127.0.0.1 --threads 1 $SLUICE_ARGS
S_PORT=$PORT_sluice S_PID=$PID_sluice
log "preloading $KEYS buckets"
load_keys "$S_PORT" "$KEYS" rlt: 600 $(sluice_cmd TOKEN KEY 1000) || die "preload failed"
WORKER=
for task in /proc/"$S_PID"/task/*; do
  [ "$(cat "$task/comm")" = sluice-0 ] && WORKER=${task##*/}
done
[ -n "$WORKER" ] || die "no worker thread sluice-0 in process $S_PID"
# shellcheck disable=SC2046 # the command's words
profile sluice "$S_PORT" "$WORKER" $(sluice_cmd TOKEN rlt:__rand_int__)
stop "$S_PID"

if [ "$REDIS" = 1 ]; then
  start_redis 0
  profile redis "$R_PORT" "$R_PID" PING
fi
