#!/usr/bin/env bash
# regions-demo.sh — two regions share one GLOBAL rule of 1,000 a minute through one etcd
# (issue 20), on loopback.
#
# What it does:
#   - starts an etcd and two regions, mumbai and hyderabad, one Sluice node each
#     (`--region NAME --regions-etcd URL --rebalance-interval 1s`, so a lease of 3 s), with the
#     rule `api` (LIMIT 1000 PERIOD 1m GLOBAL) from a rules file;
#   - waits for both to finish learning (equal shares);
#   - runs scripts/regions-load.py, which hits `api` in both regions with a traffic split read
#     from a file every 100 ms, and prints each second: the shares, what each region allowed,
#     the total against the exact global limit, the overshoot and its bound;
#   - the split is 600:400 requests a second, then 200:800 from second 10; at second 20 etcd is
#     killed: each region keeps its share for its lease, then falls to its minimum (0.25);
#   - the split file's path is printed: write two numbers to it to change the split by hand.
#
# Usage: scripts/regions-demo.sh [--sluice PATH] [--build] [--seconds N]
#   --seconds  how long the load runs (default 30; the phases change at 1/3 and 2/3 of it)
#
# Needs etcd, redis-cli and python3. Every process it starts is stopped by its PID on exit;
# KEEP_LOGS=1 keeps the logs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

BUILD=0 SECONDS_TOTAL=30 SLUICE=
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_TOTAL="$2"; shift ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done
case "$SECONDS_TOTAL" in '' | *[!0-9]*) echo "--seconds takes a number" >&2; exit 2 ;; esac
[ "$SECONDS_TOTAL" -ge 9 ] || { echo "--seconds must be at least 9" >&2; exit 2; }

log() { echo "[regions] $*" >&2; }
die() { echo "[regions] error: $*" >&2; exit 1; }

command -v etcd >/dev/null || die "etcd is missing (apt-get install -y etcd-server)"
command -v redis-cli >/dev/null || die "redis-cli is missing (apt-get install -y redis-tools)"
command -v python3 >/dev/null || die "python3 is missing"
need_sluice

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-regions-demo.XXXXXX")

free_port; ETCD_PORT=$PORT; free_port; ETCD_PEER=$PORT
etcd --name demo --data-dir "$WORK/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-cluster "demo=http://127.0.0.1:$ETCD_PEER" >"$WORK/etcd.log" 2>&1 &
ETCD_PID=$!
PIDS+=("$ETCD_PID")
etcd_up() { python3 -c "import urllib.request,sys; sys.exit(0 if b'true' in urllib.request.urlopen('http://127.0.0.1:$ETCD_PORT/health', timeout=1).read() else 1)" 2>/dev/null; }
wait_for 20 "etcd" etcd_up

printf '[api]\nlimit = 1000\nperiod = "1m"\nglobal = true\n' >"$WORK/rules.toml"
REGION_ARGS=(--regions-etcd "http://127.0.0.1:$ETCD_PORT" --rebalance-interval 1s --rules "$WORK/rules.toml")
launch_sluice mumbai --region mumbai "${REGION_ARGS[@]}"
PORT_A=$S_PORT
launch_sluice hyderabad --region hyderabad "${REGION_ARGS[@]}"
PORT_B=$S_PORT
log "etcd :$ETCD_PORT, mumbai :$PORT_A, hyderabad :$PORT_B; rule api: LIMIT 1000 PERIOD 1m GLOBAL"

share_of() { redis-cli -p "$1" INFO regions | tr -d '\r' | sed -n 's/^global_rule_api:share=\([0-9.]*\),.*/\1/p'; }
learned() { [ "$(share_of "$PORT_A")" = 0.500000 ] && [ "$(share_of "$PORT_B")" = 0.500000 ]; }
log "learning: at most the minimum share (0.25) for one lease: mumbai $(share_of "$PORT_A"), hyderabad $(share_of "$PORT_B")"
wait_for 20 "both regions to finish learning" learned
log "learned: equal shares, mumbai $(share_of "$PORT_A"), hyderabad $(share_of "$PORT_B")"

SPLIT="$WORK/split"
echo "600 400" >"$SPLIT"
log "traffic split file: $SPLIT (requests a second per region; write e.g. '300 700' to it)"
python3 "$ROOT/scripts/regions-load.py" "$SPLIT" "$SECONDS_TOTAL" 1000 60 1 \
  "mumbai:$PORT_A" "hyderabad:$PORT_B" &
LOAD_PID=$!
PIDS+=("$LOAD_PID")
sleep $((SECONDS_TOTAL / 3))
echo "200 800" >"$SPLIT"
log "second $((SECONDS_TOTAL / 3)): traffic moves to 200:800"
sleep $((SECONDS_TOTAL / 3))
log "second $((2 * SECONDS_TOTAL / 3)): etcd killed; each region keeps its share for its lease (3 s), then falls to the minimum"
stop "$ETCD_PID"
STATUS=0
wait "$LOAD_PID" || STATUS=$?
forget "$LOAD_PID"
echo
echo "INFO regions on hyderabad with etcd gone:"
redis-cli -p "$PORT_B" INFO regions | tr -d '\r' | grep -E '^(region_etcd|region_min_share|global_rule_api):'
exit "$STATUS"
