#!/usr/bin/env bash
# readme-check.sh: runs the README's "Two commands" in a fresh clone of this repository, with
# no protoc on PATH, so the promise that a new user needs nothing else cannot drift.
#
# - The first command (the server) is run as written: its build must need nothing but cargo,
#   and the server it starts must answer PING on 127.0.0.1:6379 through redis-cli. It is
#   stopped by its PID (`cargo run` execs the server, so cargo's PID is the server's).
# - The second command (the tests) must be scripts/test.sh, which .ci/run runs on this
#   checkout; with --tests it is also run in the clone.
#
# The clone is of the committed HEAD: commit before checking. It builds in its own target
# directory unless CARGO_TARGET_DIR is set. Needs git and redis-cli.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

run_tests=0
case "${1:-}" in
    --tests) run_tests=1 ;;
    "") ;;
    *) echo "usage: $0 [--tests]" >&2; exit 2 ;;
esac

log() { echo "readme-check: $*" >&2; }
die() { log "$*"; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-readme.XXXXXX")
# shellcheck source=scripts/lib.sh
. "$here/scripts/lib.sh"

# The README's commands: the lines of the sh block under "## Two commands", comments dropped.
mapfile -t commands < <(awk '
    /^## / { in_section = ($0 == "## Two commands"); next }
    in_section && /^```sh$/ { in_block = 1; next }
    in_block && /^```$/ { exit }
    in_block { sub(/[ \t]+#.*$/, ""); if ($0 != "") print }
' "$here/README.md")
[ ${#commands[@]} -eq 2 ] ||
    die "the README's \"Two commands\" block has ${#commands[@]} commands, not 2: ${commands[*]:-}"
run_cmd=${commands[0]}
test_cmd=${commands[1]}
log "run command: $run_cmd"
log "test command: $test_cmd"
[ "$test_cmd" = scripts/test.sh ] ||
    die "the README's test command is '$test_cmd', but .ci/run runs scripts/test.sh"

if redis-cli -h 127.0.0.1 -p 6379 PING >/dev/null 2>&1; then
    die "something already answers on 127.0.0.1:6379, where the README's server listens"
fi

git clone -q "$here" "$WORK/sluice"
cd "$WORK/sluice"
log "cloned $(git rev-parse --short HEAD) into $WORK/sluice; running the run command without protoc"
no_protoc=$(path_without_protoc "$WORK/bin")
# bash execs the command, and `cargo run` execs the server: $! is the server's PID.
(unset PROTOC; PATH=$no_protoc exec bash -c "exec $run_cmd") >"$WORK/run.log" 2>&1 &
pid=$!
PIDS+=("$pid")

# The command builds first: wait while it runs, up to READMECHECK_TIMEOUT seconds in all.
deadline=$((SECONDS + ${READMECHECK_TIMEOUT:-3600}))
until [ "$(redis-cli -h 127.0.0.1 -p 6379 PING 2>/dev/null)" = PONG ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
        tail -n 30 "$WORK/run.log" >&2
        die "the run command exited before its server answered PING (log above)"
    fi
    if [ $SECONDS -ge $deadline ]; then
        tail -n 30 "$WORK/run.log" >&2
        die "no PING answer within ${READMECHECK_TIMEOUT:-3600} s (log above)"
    fi
    sleep 1
done
log "the server answered PING; stopping it (PID $pid)"
stop "$pid"

if [ $run_tests = 1 ]; then
    log "running the test command in the clone"
    (unset PROTOC; PATH=$no_protoc bash -c "$test_cmd")
fi
log "ok"
