#!/usr/bin/env bash
# limits-tests.sh — the Python `limits` library's own sync Redis tests (issue 36), against a
# Sluice node and against redis-server, with the counts side by side.
#
# `limits` (Flask-Limiter, slowapi) changes its state with Lua scripts (EVALSHA of six
# scripts). Its source distribution ships its tests; they expect their servers from
# docker-compose, at fixed ports. This script downloads the sdist (`pip download limits
# --no-binary :all:`), makes a virtualenv with the test dependencies, stands in for
# lovely-pytest-docker with a stub whose services are already running, and runs
# tests/test_storage.py and tests/test_strategy.py with `-m redis` on the plain-TCP Redis
# (localhost:7379; the sentinel, cluster, unix-socket, TLS and auth variants are left out):
# once against redis-server, once against Sluice. Port 7379 must be free.
#
# Usage: scripts/limits-tests.sh [--sluice PATH] [--build] [--version V] [--only sluice|redis]
#                                [--require-equal]
#   --sluice   the sluice binary (default target/release/sluice, or $SLUICE_BIN)
#   --build    run `cargo build --release --bin sluice` first
#   --version  the limits version (default 5.8.0, the one this was written against)
#   --only     run against one server only
#   --require-equal  exit 1 unless Sluice fails none and passes at least as many as redis-server
#              (the test command runs it so)
#
# Needs python3 with venv and pip (the packages come from PyPI), and redis-server for the
# Redis run. Every process it starts is stopped by PID on exit.
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
# The port the library's own tests name (its docker-compose's); it must be free.
PORT=7379
declare -A SUMMARY
if redis-cli -p "$PORT" ping >/dev/null 2>&1; then
  die "port $PORT is taken: the limits tests connect to it"
fi

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

# run NAME: the tests against whatever listens on $PORT; prints "NAME: <pytest summary>".
run() {
  local summary
  summary=$(cd "$CACHE/limits-$VERSION" && PYTHONPATH="$WORK/plugin:." \
    "$CACHE/venv/bin/python" -m pytest -p dockerstub -p rerunfailures --reruns 2 -o addopts="" \
      -o asyncio_default_fixture_loop_scope=function -o filterwarnings="" -q --tb=short -rf \
      -m redis -k "not sentinel and not cluster and not uds and not ssl and not auth" \
      tests/test_storage.py tests/test_strategy.py 2>&1 | tee "$WORK/$1.log" | tail -1) || true
  echo "$1: $summary"
  SUMMARY[$1]=$summary
  grep -E "^FAILED " "$WORK/$1.log" | head -20 || true
  grep -E "^E |^/.*(Error|assert)" "$WORK/$1.log" | sort | uniq -c | sort -rn | head -5 || true
}

# wait_up: until a PING on $PORT answers.
wait_up() {
  for _ in $(seq 100); do
    redis-cli -p "$PORT" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "nothing answers on port $PORT"
}

if [ "$ONLY" != sluice ]; then
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
  PIDS+=($!)
  wait_up
  run redis
  stop "${PIDS[-1]}"
fi
if [ "$ONLY" != redis ]; then
  need_sluice
  "$SLUICE" --port "$PORT" --bind 127.0.0.1 >"$WORK/sluice.log" 2>&1 &
  PIDS+=($!)
  wait_up
  run sluice
  stop "${PIDS[-1]}"
fi

# The count of one outcome in a pytest summary line ("27 passed, 1 failed, ..."), 0 if absent.
count() { grep -oE "[0-9]+ $2" <<<"$1" | grep -oE '^[0-9]+' || echo 0; }
if [ "$EQUAL" = 1 ]; then
  theirs=$(count "${SUMMARY[redis]}" passed) ours=$(count "${SUMMARY[sluice]}" passed)
  failed=$(( $(count "${SUMMARY[sluice]}" failed) + $(count "${SUMMARY[sluice]}" error) ))
  if [ "$theirs" = 0 ] || [ "$ours" -lt "$theirs" ] || [ "$failed" != 0 ]; then
    die "Sluice passed $ours and failed $failed of the tests redis-server passes ($theirs)"
  fi
  log "Sluice passes all $ours tests redis-server passes"
fi
