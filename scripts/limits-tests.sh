#!/usr/bin/env bash
# limits-tests.sh — the Python `limits` library's own sync Redis and Redis Cluster tests (issue
# 36), against Sluice and against redis-server, with the counts side by side.
#
# `limits` (Flask-Limiter, slowapi) changes its state with Lua scripts (EVALSHA of six
# scripts). Its source distribution ships its tests; they expect their servers from
# docker-compose, at fixed ports. This script downloads the sdist (`pip download limits
# --no-binary :all:`), makes a virtualenv with the test dependencies, stands in for
# lovely-pytest-docker with a stub whose services are already running, and runs
# tests/test_storage.py and tests/test_strategy.py twice per server:
#   - with `-m redis` on the plain-TCP Redis (localhost:7379): once against redis-server, once
#     against a Sluice node;
#   - with `-m redis_cluster` on the cluster at localhost:7001 (redis-py's RedisCluster finds
#     the rest from CLUSTER SLOTS): once against a Redis Cluster of three redis-server primaries
#     (ports 7001-7003, made with `redis-cli --cluster create`), once against a three-node
#     Sluice cluster on the same ports (`sluice --cluster yes`, `sluice cluster create`).
# After the Sluice node's run, its INFO scripting must show each of the five scripts the tests
# use run natively (the library sends the exact bytes Sluice recognizes; see
# crates/sluice-node/src/script/native.rs). The sentinel, unix-socket, TLS and auth variants
# are left out. Ports 7379, 7001-7003 and
# 17001-17003 (redis-server's cluster bus) must be free.
#
# Usage: scripts/limits-tests.sh [--sluice PATH] [--build] [--version V] [--only sluice|redis]
#                                [--require-equal]
#   --sluice   the sluice binary (default target/release/sluice, or $SLUICE_BIN)
#   --build    run `cargo build --release --bin sluice` first
#   --version  the limits version (default 5.8.0, the one this was written against)
#   --only     run against one server only (its single node and its cluster)
#   --require-equal  exit 1 unless Sluice fails none and passes at least as many as redis-server,
#              on one node and in a cluster (the test command runs it so)
#
# Needs python3 with venv and pip (the packages come from PyPI), and redis-server and
# redis-cli for the Redis runs. Every process it starts is stopped by PID on exit; KEEP_LOGS=1
# keeps the servers' and pytest's logs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"
log() { echo "[limits] $*" >&2; }
die() { log "$*"; exit 1; }

VERSION=5.8.0 ONLY="" SLUICE="" BUILD=0 EQUAL=0
while [ $# -gt 0 ]; do
  case "$1" in
    --version) VERSION="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --require-equal) EQUAL=1; shift ;;
    *) common_arg "$@"; shift "$ARG_WORDS" ;;
  esac
done

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/sluice-limits-$VERSION"
WORK=$(mktemp -d)
# The ports the library's own tests name (its docker-compose's): the plain Redis, and the first
# three of its cluster's six (the tests reach the cluster through 7001 only). They must be free,
# and so must redis-server's cluster bus ports (each node's port + 10000).
PORT=7379
CLUSTER_PORTS=(7001 7002 7003)
declare -A SUMMARY
# taken PORT: something accepts connections on 127.0.0.1:PORT.
taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "$PORT" "${CLUSTER_PORTS[@]}"; do
  if taken "$p"; then die "port $p is taken: the limits tests connect to it"; fi
  if [ "$ONLY" != sluice ] && [ "$p" != "$PORT" ] && taken $((p + 10000)); then
    die "port $((p + 10000)) is taken: redis-server's cluster bus for port $p needs it"
  fi
done

if [ ! -d "$CACHE/limits-$VERSION" ]; then
  log "downloading limits $VERSION and its test dependencies into $CACHE"
  mkdir -p "$CACHE"
  python3 -m pip download -q "limits==$VERSION" --no-binary :all: --no-deps -d "$CACHE"
  tar xzf "$CACHE/limits-$VERSION.tar.gz" -C "$CACHE"
  python3 -m venv "$CACHE/venv"
  "$CACHE/venv/bin/pip" install -q pytest pytest-asyncio pytest-lazy-fixtures pytest-mock \
    hiro flaky pymemcache pymongo valkey redis deprecated packaging typing_extensions
fi
# A few of the library's tests read the clock closely (a sliding window's reset) and fail now
# and then on a loaded machine, against redis-server as against Sluice: each failure is run
# again, up to twice, on both.
if ! "$CACHE/venv/bin/python" -c 'import pytest_rerunfailures' 2>/dev/null; then
  "$CACHE/venv/bin/pip" install -q pytest-rerunfailures
fi

mkdir -p "$WORK/plugin"
cat > "$WORK/plugin/dockerstub.py" <<'EOF'
"""Stands in for lovely-pytest-docker: the server under test is already running."""
import pytest


class _Services:
    def start(self, *names):
        pass

    def wait_for_service(self, *args, **kwargs):
        pass


@pytest.fixture(scope="session")
def docker_services():
    return _Services()
EOF

# run NAME MODE: the tests of MODE (node: the plain Redis at localhost:$PORT; cluster: the
# cluster at localhost:7001) against whatever listens there; prints "NAME: <pytest summary>".
run() {
  local summary select
  case "$2" in
    node) select=(-m redis -k "not sentinel and not cluster and not uds and not ssl and not auth") ;;
    cluster) select=(-m redis_cluster -k "not auth and not ssl") ;;
  esac
  summary=$(cd "$CACHE/limits-$VERSION" && PYTHONPATH="$WORK/plugin:." \
    "$CACHE/venv/bin/python" -m pytest -p dockerstub -p rerunfailures --reruns 2 -o addopts="" \
      -o asyncio_default_fixture_loop_scope=function -o filterwarnings="" -q --tb=short -rf \
      -p no:cacheprovider "${select[@]}" \
      tests/test_storage.py tests/test_strategy.py 2>&1 | tee "$WORK/pytest-$1.log" | tail -1) || true
  echo "$1: $summary"
  SUMMARY[$1]=$summary
  grep -E "^FAILED " "$WORK/pytest-$1.log" | head -20 || true
  grep -E "^E |^/.*(Error|assert)" "$WORK/pytest-$1.log" | sort | uniq -c | sort -rn | head -5 || true
}

# wait_up PORT PID: until a PING on PORT answers; dies if PID exits or 10 s pass.
wait_up() {
  wait_ready "$1" "$2" && return 0
  tail -5 "$WORK"/*.log >&2 || true
  die "nothing answers on port $1"
}

# cluster_ok: every node of the cluster says cluster_state:ok.
cluster_ok() {
  local p
  for p in "${CLUSTER_PORTS[@]}"; do
    redis-cli -p "$p" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok' || return 1
  done
}

# stop_all: stops every server started so far.
stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do stop "$pid"; done
}

if [ "$ONLY" != sluice ]; then
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
  PIDS+=($!)
  wait_up "$PORT" "${PIDS[-1]}"
  run redis node
  stop_all
  # A Redis Cluster of three primaries (the tests need no replicas).
  for p in "${CLUSTER_PORTS[@]}"; do
    redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
      --cluster-enabled yes --cluster-config-file "$WORK/redis-nodes-$p.conf" \
      >"$WORK/redis-cluster-$p.log" 2>&1 &
    PIDS+=($!)
  done
  for i in "${!CLUSTER_PORTS[@]}"; do wait_up "${CLUSTER_PORTS[$i]}" "${PIDS[$i]}"; done
  timeout 60 redis-cli --cluster create "${CLUSTER_PORTS[@]/#/127.0.0.1:}" --cluster-yes \
    >"$WORK/redis-cluster-create.log" 2>&1 \
    || { cat "$WORK/redis-cluster-create.log" >&2; die "redis-cli --cluster create failed"; }
  wait_for 30 "the Redis Cluster's state ok" cluster_ok
  run redis-cluster cluster
  stop_all
fi
if [ "$ONLY" != redis ]; then
  need_sluice
  "$SLUICE" --port "$PORT" --bind 127.0.0.1 >"$WORK/sluice.log" 2>&1 &
  PIDS+=($!)
  wait_up "$PORT" "${PIDS[-1]}"
  run sluice node
  # The library sent the exact scripts Sluice knows (tests/fixtures/known-scripts): each of
  # the five its tests use ran natively (INFO scripting counts the calls per path).
  NATIVE=$(redis-cli -p "$PORT" INFO scripting | tr -d '\r')
  log "native calls: $(grep -oE '^script_native_limits_[a-z_]+:.*calls=[0-9]+' <<<"$NATIVE" \
    | sed -E 's/^script_native_limits_([a-z_]+):.*calls=/\1=/' | tr '\n' ' ')"
  for script in incr_expire moving_window acquire_moving_window sliding_window \
      acquire_sliding_window; do
    grep -qE "^script_native_limits_$script:.*calls=[1-9]" <<<"$NATIVE" \
      || die "the limits script $script never ran natively: $NATIVE"
  done
  stop_all
  # Three Sluice cluster nodes, one thread each (two cores serve the three and the tests).
  for p in "${CLUSTER_PORTS[@]}"; do
    "$SLUICE" --port "$p" --bind 127.0.0.1 --threads 1 --cluster yes \
      --cluster-config-file "$WORK/sluice-nodes-$p.conf" >"$WORK/sluice-cluster-$p.log" 2>&1 &
    PIDS+=($!)
  done
  for i in "${!CLUSTER_PORTS[@]}"; do wait_up "${CLUSTER_PORTS[$i]}" "${PIDS[$i]}"; done
  timeout 60 "$SLUICE" cluster create "${CLUSTER_PORTS[@]/#/127.0.0.1:}" \
    >"$WORK/sluice-cluster-create.log" 2>&1 \
    || { cat "$WORK/sluice-cluster-create.log" >&2; die "sluice cluster create failed"; }
  wait_for 30 "the Sluice cluster's state ok" cluster_ok
  run sluice-cluster cluster
  stop_all
fi

# The count of one outcome in a pytest summary line ("27 passed, 1 failed, ..."), 0 if absent.
count() { grep -oE "[0-9]+ $2" <<<"$1" | grep -oE '^[0-9]+' || echo 0; }
log "one node: redis-server ${SUMMARY[redis]:-not run} | Sluice ${SUMMARY[sluice]:-not run}"
log "cluster:  Redis Cluster ${SUMMARY[redis-cluster]:-not run} | Sluice ${SUMMARY[sluice-cluster]:-not run}"
if [ "$EQUAL" = 1 ]; then
  # equal REDIS SLUICE WHAT: Sluice's run SLUICE fails none and passes at least as many as REDIS.
  equal() {
    local theirs ours failed
    theirs=$(count "${SUMMARY[$1]:-}" passed) ours=$(count "${SUMMARY[$2]:-}" passed)
    failed=$(( $(count "${SUMMARY[$2]:-}" failed) + $(count "${SUMMARY[$2]:-}" error) ))
    if [ "$theirs" = 0 ] || [ "$ours" -lt "$theirs" ] || [ "$failed" != 0 ]; then
      die "$3: Sluice passed $ours and failed $failed of the tests redis-server passes ($theirs)"
    fi
    log "$3: Sluice passes all $ours tests redis-server passes"
  }
  equal redis sluice "one node"
  equal redis-cluster sluice-cluster "cluster"
fi
