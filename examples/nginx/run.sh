#!/usr/bin/env bash
# Runs examples/nginx/nginx.conf as shipped: creates the rule it checks against, fills in its
# placeholders, and starts nginx in front of a small static site.
#
# Usage:
#   examples/nginx/run.sh [SLUICE [PORT]]   create the rule, start nginx on 127.0.0.1:PORT, and
#                                           return once it answers (nginx goes on running)
#   examples/nginx/run.sh stop [PORT]       stop that nginx
#
#   SLUICE  host:port of Sluice's HTTP API (its --http-port); default 127.0.0.1:8080
#   PORT    the port nginx listens on; default 8081
#
# The rule is `per-ip`, 3 requests a minute per client address, made with
#   curl -X PUT http://SLUICE/rules/per-ip -H 'Content-Type: application/json' \
#        -d '{"scope":"ip","limit":3,"window":"1m"}'
# (RULE='{...}' sends another body; SLUICE_PASSWORD, a node's password, is sent as a bearer
# token). The site is ROOT when set, else a directory with one index.html. nginx's files (the
# filled-in config, its pid file, error log and temp files) live in
# ${TMPDIR:-/tmp}/sluice-nginx-PORT. Needs nginx and curl.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
die() { echo "run.sh: $*" >&2; exit 1; }

if [ "${1:-}" = stop ]; then
    PORT=${2:-8081}
    PREFIX="${TMPDIR:-/tmp}/sluice-nginx-$PORT"
    [ -f "$PREFIX/nginx.pid" ] || die "no nginx of this script on port $PORT"
    pid=$(cat "$PREFIX/nginx.pid")
    kill "$pid"
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    rm -rf "$PREFIX"
    echo "nginx on port $PORT stopped"
    exit 0
fi

SLUICE=${1:-127.0.0.1:8080}
PORT=${2:-8081}
RULE=${RULE:-'{"scope":"ip","limit":3,"window":"1m"}'}
PREFIX="${TMPDIR:-/tmp}/sluice-nginx-$PORT"
command -v nginx >/dev/null || die "nginx is not installed"
command -v curl >/dev/null || die "curl is not installed"

auth=()
[ -z "${SLUICE_PASSWORD:-}" ] || auth=(-H "Authorization: Bearer $SLUICE_PASSWORD")
reply=$(curl -sS -w '\n%{http_code}' -X PUT "http://$SLUICE/rules/per-ip" \
    -H 'Content-Type: application/json' ${auth[@]+"${auth[@]}"} -d "$RULE") ||
    die "cannot reach Sluice's HTTP API at $SLUICE (start it with --http-port)"
[ "$(tail -n 1 <<<"$reply")" = 200 ] || die "PUT /rules/per-ip: $(head -n 1 <<<"$reply")"
echo "rule per-ip: $RULE"

mkdir -p "$PREFIX"
ROOT=${ROOT:-$PREFIX/site}
if [ ! -d "$ROOT" ]; then
    mkdir -p "$ROOT"
    echo "hello from the backend" >"$ROOT/index.html"
fi
sed -e "s|@LISTEN@|$PORT|g" -e "s|@SLUICE@|$SLUICE|g" -e "s|@ROOT@|$ROOT|g" \
    -e "s|@PREFIX@|$PREFIX|g" "$HERE/nginx.conf" >"$PREFIX/nginx.conf"

# In the background but in this shell's process group (not nginx's own daemon mode, which
# leaves the session): whatever stops the group stops nginx too.
nginx -p "$PREFIX" -e "$PREFIX/error.log" -c "$PREFIX/nginx.conf" -g 'daemon off;' \
    </dev/null >>"$PREFIX/error.log" 2>&1 &
for _ in $(seq 100); do
    # A connection, not a request: a request would be checked, and charged.
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
        echo "nginx on http://127.0.0.1:$PORT/ (stop it: examples/nginx/run.sh stop $PORT)"
        exit 0
    fi
    kill -0 $! 2>/dev/null || die "nginx did not start: $(tail -n 3 "$PREFIX/error.log")"
    sleep 0.1
done
die "nginx did not answer on port $PORT within 10 s"
