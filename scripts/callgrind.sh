#!/usr/bin/env bash
# callgrind.sh — user-space instructions per request, Sluice and Redis, counted by callgrind.
#
# A figure machine noise does not move (issue 3): each server runs under
# `valgrind --tool=callgrind` with instrumentation off while it starts and while the keyspace is
# preloaded; then for each test the counters are zeroed (`callgrind_control -z`), the load runs
# (redis-benchmark -c 1 -P 16 -n 20000 -r 100000: keys over a 100k keyspace, preloaded so every
# request updates an existing limiter or counter: a steady-state figure, no table growth in it),
# and the counters are dumped (`callgrind_control -d`).
# Instructions ÷ requests is the figure. The server's idle work during a run (timers, cron) is
# measured the same way over an idle window and subtracted in proportion to each run's length.
# That subtraction follows each run's wall time, which a loaded machine stretches (± 300 per
# request seen on a VM at load 7), so the table also shows the request path alone
# (`Core::run_batch` inclusive): nothing is subtracted from it and it repeats to the instruction.
#
# Tests: PING and INCR on both; RL.CHECK TOKEN, GCRA, SLIDING on Sluice; EVALSHA of
# scripts/lua/token_bucket.lua (the Lua token bucket RL.CHECK replaces) on Redis; and NEWKEY,
# RL.CHECK TOKEN on the empty server before anything is preloaded, so most requests create
# their bucket and the table grows as it goes (20,000 requests over 100k keys: about 90% new).
# RL.HIT under a named rule and under a GLOBAL rule (issue 20: a region enforces its share
# through the rules table, so the two must cost the same); with --regions the server is a
# region (a real etcd, --rebalance-interval 1s), so its region thread runs during the tests.
#
# Usage: scripts/callgrind.sh [--requests N] [--keyspace N] [--out DIR] [--sluice PATH]
#                             [--skip-redis] [--build] [--cluster] [--cache-sim]
#                             [--replica [--flush-ms MS]] [--sluice-args "ARGS"] [--regions]
#   --requests   requests per test (default 20000)
#   --keyspace   keys preloaded and used by -r (default 100000)
#   --out        where the callgrind dumps are kept (default /tmp/sluice-callgrind); annotate
#                one with `callgrind_annotate --inclusive=yes DIR/sluice.out.<n>`
#   --sluice     the sluice binary (default target/release/sluice, or $SLUICE_BIN)
#   --skip-redis only Sluice
#   --build      run `cargo build --release --bin sluice` even if the binary exists
#   --cache-sim  also simulate the caches (valgrind --cache-sim=yes): the table then adds D1 and
#                LL (last-level) data misses per request, the misses a 36 MB table costs
#   --sluice-args extra flags for the Sluice server, split on spaces (e.g. "--metrics-port 9121")
#   --cluster    run Sluice in cluster mode (a one-node cluster that owns every slot), so the
#                figures include the slot check of every keyed command; compare them with a
#                run without it
#   --replica    attach a replica (a native sluice, on the other CPU if there is one) to the
#                Sluice under callgrind before the tests, so every change is journaled and
#                streamed: the figures then include what replication costs the primary's user
#                space; compare them with a run without it (issue 7, "Cost to the primary")
#   --regions    start an etcd and run Sluice as region `demo` of it (needs etcd)
#   --flush-ms   the primary's --repl-flush-ms with --replica (default 20): under callgrind the
#                server runs some 50x slower, so a 1 ms flush would carry 50x fewer records
#                than at full speed and overstate the per-flush work; 20 ms brings the records
#                per flush near those of the real server at -P 16 (a few hundred)
#
# Needs valgrind (callgrind_control), redis-server and redis-tools: installed with apt-get
# when missing. Every process it starts is stopped by PID on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"
REQUESTS=20000 KEYSPACE=100000 OUT="${TMPDIR:-/tmp}/sluice-callgrind" SKIP_REDIS=0 BUILD=0 CLUSTER=0 REPLICA=0 FLUSH_MS=20
CACHE_SIM=no SLUICE_ARGS="" REGIONS=0
SLUICE="${SLUICE_BIN:-$ROOT/target/release/sluice}"
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) REQUESTS="$2"; shift ;;
    --keyspace) KEYSPACE="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    --sluice) SLUICE="$2"; shift ;;
    --skip-redis) SKIP_REDIS=1 ;;
    --build) BUILD=1 ;;
    --cluster) CLUSTER=1 ;;
    --cache-sim) CACHE_SIM=yes ;;
    --replica) REPLICA=1 ;;
    --flush-ms) FLUSH_MS="$2"; shift ;;
    --sluice-args) SLUICE_ARGS="$2"; shift ;;
    --regions) REGIONS=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "[callgrind] $*" >&2; }
die() { echo "[callgrind] error: $*" >&2; exit 1; }

missing=()
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null || missing+=(valgrind)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null && command -v redis-benchmark >/dev/null || missing+=(redis-tools)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi
if [ "$BUILD" = 1 ] || [ ! -x "$SLUICE" ]; then
  log "building the release binary"
  (cd "$ROOT" && cargo build --release --bin sluice >&2)
  SLUICE="${SLUICE_BIN:-$ROOT/target/release/sluice}"
fi
[ -x "$SLUICE" ] || die "no sluice binary at $SLUICE"

mkdir -p "$OUT"
rm -f "$OUT"/sluice.out* "$OUT"/redis.out*
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-callgrind-run.XXXXXX")

# PIDS, cleanup and stop come from scripts/lib.sh.

# free_port comes from scripts/lib.sh.

wait_ready() { # PORT PID LOG: valgrind starts slowly.
  local i
  for i in $(seq 1 600); do
    if [ "$(redis-cli -p "$1" PING 2>/dev/null)" = PONG ]; then return 0; fi
    kill -0 "$2" 2>/dev/null || { cat "$3" >&2; die "server on port $1 exited"; }
    sleep 0.1
  done
  cat "$3" >&2
  die "server on port $1 did not answer PING"
}

# start NAME CMD...: the server under callgrind, instrumentation off; sets PORT and PID.
start() {
  local name=$1
  shift
  valgrind --tool=callgrind --instr-atstart=no --cache-sim="$CACHE_SIM" \
    --callgrind-out-file="$OUT/$name.out" \
    "$@" >"$WORK/$name.log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  wait_ready "$PORT" "$PID" "$WORK/$name.log"
}


# The dump callgrind_control -d just wrote: the highest-numbered NAME.out.N.
last_dump() {
  find "$OUT" -maxdepth 1 -name "$1.out.*" -printf '%f\n' | sort -t. -k3,3n | tail -1
}
totals() { awk '/^(totals|summary):/ { print $2; exit }' "$OUT/$1"; }

# measure NAME SERVER_PID PORT LABEL CMD...: zero, run the load, dump; appends a result line
# "LABEL instructions seconds dumpfile" to $WORK/NAME.
measure() {
  local name=$1 pid=$2 port=$3 label=$4 t0 t1 dump
  shift 4
  callgrind_control -z "$pid" >/dev/null 2>&1
  t0=$(date +%s.%N)
  if [ "$label" = idle ]; then
    sleep "$IDLE_SECONDS"
  else
    redis-benchmark -h 127.0.0.1 -p "$port" -c 1 -P 16 -n "$REQUESTS" -r "$KEYSPACE" -q "$@" \
      >"$WORK/bench.out" 2>&1 || { cat "$WORK/bench.out" >&2; die "redis-benchmark failed: $*"; }
  fi
  t1=$(date +%s.%N)
  callgrind_control -d "$label" "$pid" >/dev/null 2>&1
  dump=$(last_dump "$name")
  [ -n "$dump" ] || die "no dump from $name"
  echo "$label $(totals "$dump") $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') $dump" >>"$WORK/$name"
  log "$(printf '%-8s %-20s %14d Ir in %6.1f s  (%s)' "$name" "$label" "$(totals "$dump")" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$OUT/$dump")"
}

IDLE_SECONDS=3
TOKEN_ARGS=(1000000 100000000)             # capacity 1,000,000, refill 0.01/s (period in s)
TOKEN_ARGS_MS=(1000000 100000000000 1000000) # the same for the Lua script (period in ms, burst)

# ---- Sluice ----
CLUSTER_ARGS=()
[ "$CLUSTER" = 1 ] && CLUSTER_ARGS=(--cluster yes --cluster-config-file "$WORK/nodes.conf")
REPL_ARGS=()
[ "$REPLICA" = 1 ] && REPL_ARGS=(--repl-flush-ms "$FLUSH_MS")
if [ "$REGIONS" = 1 ]; then
  command -v etcd >/dev/null || die "--regions needs etcd"
  free_port; ETCD_PORT=$PORT; free_port; ETCD_PEER=$PORT
  etcd --name cg --data-dir "$WORK/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
    --initial-cluster "cg=http://127.0.0.1:$ETCD_PEER" >"$WORK/etcd.log" 2>&1 &
  PIDS+=($!)
  SLUICE_ARGS="$SLUICE_ARGS --region demo --regions-etcd http://127.0.0.1:$ETCD_PORT --rebalance-interval 1s"
  log "etcd on port $ETCD_PORT; Sluice is region demo"
fi
free_port
# shellcheck disable=SC2086 # SLUICE_ARGS is a list of flags
start sluice "$SLUICE" --port "$PORT" --bind 127.0.0.1 --threads 1 "${CLUSTER_ARGS[@]}" "${REPL_ARGS[@]}" $SLUICE_ARGS
S_PORT=$PORT S_PID=$PID
if [ "$CLUSTER" = 1 ]; then
  log "cluster mode: a one-node cluster owns every slot"
  "$SLUICE" cluster create "127.0.0.1:$S_PORT" >&2 || die "cluster create failed"
fi
callgrind_control -i on "$S_PID" >/dev/null 2>&1
measure sluice "$S_PID" "$S_PORT" idle
# New keys first, on the empty server: most requests create their bucket, and the table grows
# as it would in production (issue 12's new-key figure).
measure sluice "$S_PID" "$S_PORT" NEWKEY RL.CHECK rln:__rand_int__ "${TOKEN_ARGS[@]}"
callgrind_control -i off "$S_PID" >/dev/null 2>&1
log "sluice under callgrind on port $S_PORT; preloading $KEYSPACE keys per algorithm"
preload "$S_PORT" "$KEYSPACE" rlt: RL.CHECK KEY "${TOKEN_ARGS[@]}" COST 1000
preload "$S_PORT" "$KEYSPACE" rlg: RL.CHECK KEY "${TOKEN_ARGS[@]}" COST 1000 ALGO GCRA
preload "$S_PORT" "$KEYSPACE" rls: RL.CHECK KEY "${TOKEN_ARGS[@]}" COST 1000 ALGO SLIDING
preload "$S_PORT" "$KEYSPACE" ctr: SET KEY 0
redis-cli -p "$S_PORT" RL.RULE SET loc LIMIT 1000000 PERIOD 365d >/dev/null
redis-cli -p "$S_PORT" RL.RULE SET glb LIMIT 1000000 PERIOD 365d GLOBAL >/dev/null
preload "$S_PORT" "$KEYSPACE" s: RL.HIT loc KEY COST 1000
preload "$S_PORT" "$KEYSPACE" s: RL.HIT glb KEY COST 1000
if [ "$REPLICA" = 1 ]; then
  free_port
  REPLICA_CPU=$(($(nproc) - 1))
  taskset -c "$REPLICA_CPU" "$SLUICE" --port "$PORT" --bind 127.0.0.1 --threads 1 \
    --replicaof "127.0.0.1:$S_PORT" >"$WORK/replica.log" 2>&1 &
  RP_PID=$!
  PIDS+=("$RP_PID")
  for i in $(seq 1 600); do
    redis-cli -p "$PORT" INFO replication 2>/dev/null | grep -q '^master_link_status:up' && break
    kill -0 "$RP_PID" 2>/dev/null || { cat "$WORK/replica.log" >&2; die "the replica exited"; }
    sleep 0.1
  done
  [ "$(redis-cli -p "$PORT" DBSIZE)" = "$(redis-cli -p "$S_PORT" DBSIZE)" ] ||
    die "the replica did not sync (see $WORK/replica.log)"
  log "replica on port $PORT (CPU $REPLICA_CPU) synced; the primary flushes every $FLUSH_MS ms"
fi
callgrind_control -i on "$S_PID" >/dev/null 2>&1
measure sluice "$S_PID" "$S_PORT" PING PING
measure sluice "$S_PID" "$S_PORT" INCR INCR ctr:__rand_int__
measure sluice "$S_PID" "$S_PORT" TOKEN RL.CHECK rlt:__rand_int__ "${TOKEN_ARGS[@]}"
measure sluice "$S_PID" "$S_PORT" GCRA RL.CHECK rlg:__rand_int__ "${TOKEN_ARGS[@]}" ALGO GCRA
measure sluice "$S_PID" "$S_PORT" SLIDING RL.CHECK rls:__rand_int__ "${TOKEN_ARGS[@]}" ALGO SLIDING
measure sluice "$S_PID" "$S_PORT" HIT RL.HIT loc s:__rand_int__
measure sluice "$S_PID" "$S_PORT" HITGLOBAL RL.HIT glb s:__rand_int__
if [ "$REGIONS" = 1 ]; then
  log "region: $(redis-cli -p "$S_PORT" INFO regions | grep -E '^(region_coordinator|global_rule_glb):' | tr -d '\r' | tr '\n' ' ')"
fi
stop "$S_PID"

# ---- Redis ----
if [ "$SKIP_REDIS" = 0 ]; then
  free_port
  start redis redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --protected-mode no --dir "$WORK"
  R_PORT=$PORT R_PID=$PID
  SHA=$(redis-cli -p "$R_PORT" SCRIPT LOAD "$(cat "$ROOT/scripts/lua/token_bucket.lua")")
  [ ${#SHA} = 40 ] || die "SCRIPT LOAD failed: $SHA"
  log "redis under callgrind on port $R_PORT; preloading $KEYSPACE keys"
  preload "$R_PORT" "$KEYSPACE" rlt: EVALSHA "$SHA" 1 KEY "${TOKEN_ARGS_MS[@]}" 1000
  preload "$R_PORT" "$KEYSPACE" ctr: SET KEY 0
  callgrind_control -i on "$R_PID" >/dev/null 2>&1
  measure redis "$R_PID" "$R_PORT" idle
  measure redis "$R_PID" "$R_PORT" PING PING
  measure redis "$R_PID" "$R_PORT" INCR INCR ctr:__rand_int__
  measure redis "$R_PID" "$R_PORT" TOKEN EVALSHA "$SHA" 1 rlt:__rand_int__ "${TOKEN_ARGS_MS[@]}" 1
  stop "$R_PID"
fi

# ---- The table ----
per_request() { # NAME LABEL -> instructions per request, idle work subtracted
  [ -f "$WORK/$1" ] || { echo -; return; }
  awk -v label="$2" -v n="$REQUESTS" '
    $1 == "idle" { idle_rate = $2 / $3 }
    $1 == label { ir = $2; secs = $3 }
    END { if (ir == "") print "-"; else printf "%.0f\n", (ir - idle_rate * secs) / n }' "$WORK/$1"
}
idle_rate() { [ -f "$WORK/$1" ] && awk '$1 == "idle" { printf "%.0f", $2 / $3 }' "$WORK/$1" || echo -; }

# The request path alone: Core::run_batch's inclusive Ir (decode, execute, reply), which no
# background thread (the region thread with --regions) adds to.
path_ir() { # LABEL -> Ir per request under Core::run_batch
  local dump
  [ -f "$WORK/sluice" ] || { echo 0; return; }
  dump=$(awk -v l="$1" '$1 == l { print $4 }' "$WORK/sluice")
  [ -n "$dump" ] || { echo 0; return; }
  callgrind_annotate --auto=no --threshold=100 --inclusive=yes "$OUT/$dump" 2>/dev/null |
    awk -v n="$REQUESTS" '!done && /conn::Core::run_batch/ { gsub(/,/, "", $1); print $1 / n; done = 1 }'
}
echo
echo "Instructions per request (user space, callgrind Ir), $REQUESTS requests, redis-benchmark -c 1 -P 16 -r $KEYSPACE (preloaded)"
[ "$REPLICA" = 1 ] && echo "Sluice with a replica attached (--repl-flush-ms $FLUSH_MS): every change journaled and streamed"
echo "Sluice: $SLUICE --threads 1; Redis: $(redis-server --version | awk '{ print $3 }'); idle work subtracted (Sluice $(idle_rate sluice) Ir/s, Redis $(idle_rate redis) Ir/s)"
echo
# The last column is Sluice's request path alone (Core::run_batch inclusive, see path_ir): no
# idle work is subtracted from it, so machine load (which stretches each run and so the idle
# share) cannot move it.
printf '| %-40s | %13s | %12s | %7s | %17s |\n' test "Sluice Ir/req" "Redis Ir/req" "S/R" "Sluice path Ir/req"
echo "|------------------------------------------|---------------|--------------|---------|--------------------|"
line() { # LABEL SLUICE_LABEL REDIS_LABEL
  local s r p
  s=$(per_request sluice "$2") r=$(per_request redis "$3") p=$(path_ir "$2")
  awk -v l="$1" -v s="$s" -v r="$r" -v p="$p" 'BEGIN {
      q = (s == "-" || r == "-" || r <= 0) ? "" : sprintf("%.3f", s / r)
      path = (p > 0) ? sprintf("%.0f", p) : "-"
      printf "| %-40s | %13s | %12s | %7s | %18s |\n", l, s, r, q, path }'
}
line "PING" PING PING
line "INCR" INCR INCR
line "RL.CHECK TOKEN vs EVALSHA token_bucket" TOKEN TOKEN
line "RL.CHECK ALGO GCRA" GCRA none
line "RL.CHECK ALGO SLIDING" SLIDING none
line "RL.CHECK TOKEN, new keys (empty server)" NEWKEY none
line "RL.HIT rule" HIT none
line "RL.HIT GLOBAL rule" HITGLOBAL none
awk -v g="$(per_request sluice HITGLOBAL)" -v l="$(per_request sluice HIT)" 'BEGIN {
  if (l > 0) printf "\nRL.HIT GLOBAL rule / RL.HIT rule: %.4f (whole process, idle work subtracted)\n", g / l }'
awk -v g="$(path_ir HITGLOBAL)" -v l="$(path_ir HIT)" 'BEGIN {
  if (l > 0) printf "Request path (Core::run_batch inclusive): RL.HIT rule %.1f, GLOBAL rule %.1f Ir/req, ratio %.4f\n", l, g, g / l }'
# misses DUMP -> "D1 LL": data-cache misses (reads + writes) at the first level and the last
# level, from the dump's totals in the order its `events:` line names them.
misses() {
  awk '/^events:/ { for (i = 2; i <= NF; i++) col[$i] = i - 1 }
       /^(totals|summary):/ { print $(col["D1mr"] + 1) + $(col["D1mw"] + 1), $(col["DLmr"] + 1) + $(col["DLmw"] + 1); exit }' "$OUT/$1"
}
if [ "$CACHE_SIM" = yes ]; then
  echo
  echo "Simulated data-cache misses per request (valgrind --cache-sim=yes; D1 = first level, LL = last level, which goes to DRAM)"
  echo
  printf '| %-40s | %9s | %9s | %9s | %9s |\n' test "Sluice D1" "Sluice LL" "Redis D1" "Redis LL"
  echo "|------------------------------------------|-----------|-----------|-----------|-----------|"
  miss_line() { # LABEL SLUICE_LABEL REDIS_LABEL
    local s r
    s=$([ -f "$WORK/sluice" ] && awk -v l="$2" '$1 == l { print $4 }' "$WORK/sluice")
    r=$([ -f "$WORK/redis" ] && awk -v l="$3" '$1 == l { print $4 }' "$WORK/redis")
    s=$([ -n "$s" ] && misses "$s" || echo "- -") r=$([ -n "$r" ] && misses "$r" || echo "- -")
    # shellcheck disable=SC2086
    set -- "$1" $s $r
    awk -v l="$1" -v a="$2" -v b="$3" -v c="$4" -v d="$5" -v n="$REQUESTS" 'function f(x) { return x == "-" ? "-" : sprintf("%.2f", x / n) }
      BEGIN { printf "| %-40s | %9s | %9s | %9s | %9s |\n", l, f(a), f(b), f(c), f(d) }'
  }
  miss_line "PING" PING PING
  miss_line "INCR" INCR INCR
  miss_line "RL.CHECK TOKEN vs EVALSHA token_bucket" TOKEN TOKEN
  miss_line "RL.CHECK ALGO GCRA" GCRA none
  miss_line "RL.CHECK ALGO SLIDING" SLIDING none
  miss_line "RL.CHECK TOKEN, new keys (empty server)" NEWKEY none
fi

echo
echo "Dumps in $OUT (one per test, in order: idle, PING, INCR, TOKEN, ...):"
for name in sluice redis; do
  [ -f "$WORK/$name" ] && awk -v d="$OUT" -v n="$name" '{ printf "  %-7s %-8s %s/%s\n", n, $1, d, $4 }' "$WORK/$name"
done
echo "Profile one: callgrind_annotate --inclusive=yes <dump> | head -40"

# Where RL.CHECK's instructions go: callgrind_annotate lists cost per (source file, function),
# so code inlined from another file shows as a separate line under its host function. Fold those
# lines into their function: self cost is their sum, inclusive cost their largest.
top_functions() { # DUMP
  local mode
  for mode in self inclusive; do
    echo
    echo "Sluice RL.CHECK TOKEN: top 15 functions by $mode Ir per request ($1)"
    callgrind_annotate --auto=no --threshold=100 --inclusive="$([ $mode = inclusive ] && echo yes || echo no)" \
      "$1" 2>/dev/null | awk -v n="$REQUESTS" -v mode="$mode" '
        /file:function/ { body = 1; next }
        body && match($0, /^ *[0-9,]+ \( *[0-9.]+%\)  /) {
          cost = substr($0, 1, RLENGTH); gsub(/[ ,]|\(.*/, "", cost); cost += 0
          rest = substr($0, RLENGTH + 1)
          fn = substr(rest, index(rest, ":") + 1)
          sub(/ \[[^]]*\]$/, "", fn)
          if (fn ~ /PROGRAM TOTALS|^$/) next
          if (mode == "self") c[fn] += cost; else if (cost > c[fn]) c[fn] = cost
        }
        END { for (f in c) printf "%12.1f  %s\n", c[f] / n, f }' | sort -rn | head -15
  done
}
TOKEN_DUMP=$(awk '$1 == "TOKEN" { print $4 }' "$WORK/sluice")
[ -n "$TOKEN_DUMP" ] && top_functions "$OUT/$TOKEN_DUMP"
