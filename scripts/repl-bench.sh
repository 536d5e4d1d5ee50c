#!/usr/bin/env bash
# repl-bench.sh — what replication costs (issue 7, "What must be shown": full sync, cost to the
# primary), in one run.
#
# 1. Full sync. A primary (--threads 1) is preloaded with --keys TOKEN buckets (16-byte keys
#    `rlt:000000123456`, capacity 1,000,000 refilled at 0.01/s, preloaded with COST 1000 so each
#    bucket lives ~28 h: none expires during the run), pipelined through redis-cli --pipe (the
#    preload helper of scripts/lib.sh). Then a replica is started with --replicaof; the time
#    from its launch until INFO replication shows master_link_status:up and its DBSIZE equals
#    the primary's is measured by polling (every 20 ms), next to the replica's own log line
#    "MASTER <-> REPLICA sync: loaded N entries (B bytes) in X ms" and the primary's
#    "Synchronization with replica ... (snapshot X ms, sent Y ms)". Memory per bucket on the
#    replica: VmRSS minus the VmRSS of an empty replica (same flags, synced to an empty
#    primary, measured first), ÷ keys; and INFO memory used_memory (minus the empty replica's)
#    ÷ keys. The primary's own figures, from its preload, are printed next to them. The RSS is
#    taken again after the replica's link reconnects (the primary runs CLIENT KILL TYPE
#    replica; the replica continues with +CONTINUE, no snapshot): what the first link holds
#    from the full sync shows as the difference.
# 2. Cost to the primary (issue 7: with one replica attached, RL.CHECK at -P 16 keeps at least
#    0.9x its throughput without one). redis-benchmark -P 16 -c 50 -r 1000000 -n N running
#    `RL.CHECK rl:__rand_int__ 100 60` against a primary WITHOUT a replica and one WITH a
#    replica attached, alternating (without, with; --rounds times). Printed: each round's
#    throughput ratio (with / without of that round), their median, min and max (the spread is
#    how noisy the machine was), and each side's median run: throughput, server CPU per check
#    (the primary's utime+stime from /proc/PID/stat, all its threads, over the run / requests;
#    "of it sys": stime alone), the primary's share of a CPU, and in the with runs the
#    replica's CPU per check applied. N is sized by a probe run to --duration seconds.
#    Note the workload: with 100 per 60 s a bucket is full again 0.6 s after its last check and
#    is dropped, so over -r 1000000 most checks create a bucket; every check is a change that
#    the primary journals and the replica applies.
#
#    Why two primaries. A primary starts journaling with its first replica and keeps journaling
#    (and flushing every --repl-flush-ms) after that replica leaves, until REPLICAOF. So
#    "without a replica" cannot be the same process with its replica stopped: it is a second
#    primary, started the same way and preloaded with the same buckets, that never had a
#    replica. While one primary is measured the other is stopped with SIGSTOP (continued with
#    SIGCONT after), so the idle one's timers do not run on CPU 0 during the other's runs.
#    The replica's link survives the pauses (--repl-timeout is 60 s; a run takes seconds).
#
# Pinning (the machine has two cores): both primaries, each --threads 1, on CPU 0, with every
# thread of their process (the flusher and the stream to the replica run on the worker, so
# that is the primary's cost). redis-benchmark on CPU 1, and the replica (--threads 1) on CPU 1
# too, pinned: unpinned it would land on CPU 0 part of the time and take CPU from the primary.
# On CPU 1, though, it competes with the client, which needs most of that core by itself: an
# uncapped primary is then limited by CPU 1 in the with runs, and the ratio prices the
# replica's work on the client's core, not the cost to the primary. So by default each
# primary is capped at --quota 50% of one CPU (a cgroup of its own, cpu controller v1 or v2,
# period 10 ms): the primary is the bottleneck in both runs (its "primary CPU %" column sits
# at the cap) and CPU 1 keeps headroom (its "CPU1 busy" column). The cap is, if anything,
# pessimistic: what the primary does per flush interval rather than per check (a timer, a
# drain, a socket write every millisecond) weighs twice as much against half a CPU as against
# a whole one. --quota 0 runs uncapped (the script then prints the bound CPU 1 puts on the
# with run). Needs a writable cgroup (root); without one it warns and runs uncapped.
#
# Usage: scripts/repl-bench.sh [--keys N] [--workload new|steady|hot] [--duration SECONDS]
#                              [--rounds N] [--clients N] [--quota PERCENT] [--flush-ms MS]
#                              [--primary-args "FLAGS"] [--sluice PATH] [--build]
#   --keys       buckets preloaded for the full sync (default 1,000,000); also -r of the runs
#   --workload   new (default: most checks create a bucket, `RL.CHECK rl:__rand_int__ 100 60`)
#                steady (every check updates a preloaded bucket), or hot (one key, every check
#                allowed: the journal coalesces its records into one per flush)
#   --duration   seconds per benchmark run (default 4); -n is sized from a probe run
#   --rounds     alternating without/with rounds (default 5)
#   --clients    redis-benchmark -c (default 50)
#   --quota      each primary's CPU cap, % of one CPU (default 50; 0 = uncapped)
#   --flush-ms   --repl-flush-ms of both primaries (default: the server's default, 1)
#   --primary-args  more flags for both primaries, for experiments (e.g. "--repl-backlog-size 16kb")
#   --sluice     the sluice binary (default $SLUICE_BIN, else release/sluice in $CARGO_TARGET_DIR
#                or target/)
#   --build      run `cargo build --release --bin sluice` even if the binary exists
#
# Needs redis-cli and redis-benchmark (installed with apt-get when missing), taskset, getconf
# and awk. Uses free ports on 127.0.0.1 only. Every process it starts is stopped by PID on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

KEYS=1000000 DURATION=4 ROUNDS=5 CLIENTS=50 BUILD=0 WORKLOAD=new QUOTA=50 FLUSH_MS= EXTRA_PRIMARY_ARGS=
SLUICE=
while [ $# -gt 0 ]; do
  case "$1" in
    --keys) KEYS="$2"; shift ;;
    --workload) WORKLOAD="$2"; shift ;;
    --duration) DURATION="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --clients) CLIENTS="$2"; shift ;;
    --quota) QUOTA="$2"; shift ;;
    --flush-ms) FLUSH_MS="$2"; shift ;;
    --primary-args) EXTRA_PRIMARY_ARGS="$2"; shift ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done

log() { echo "[repl-bench] $*" >&2; }
die() { echo "[repl-bench] error: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Tools and the binary.

if ! command -v redis-cli >/dev/null || ! command -v redis-benchmark >/dev/null; then
  log "installing redis-tools"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-tools >&2
fi
for tool in taskset awk getconf; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install -y util-linux mawk libc-bin)"
done
need_sluice

if [ "$(nproc)" -ge 2 ]; then
  SERVER_CPU=0 CLIENT_CPU=1 REPLICA_CPU=1
else
  log "only one CPU: everything on CPU 0"
  SERVER_CPU=0 CLIENT_CPU=0 REPLICA_CPU=0
fi
HZ=$(getconf CLK_TCK)
PRIMARY_ARGS=()
[ -z "$FLUSH_MS" ] || PRIMARY_ARGS=(--repl-flush-ms "$FLUSH_MS")
# shellcheck disable=SC2206 # split on purpose: several flags
[ -z "$EXTRA_PRIMARY_ARGS" ] || PRIMARY_ARGS+=($EXTRA_PRIMARY_ARGS)

# The primaries' CPU cap (--quota): one cgroup per primary, the cgroup v1 cpu controller or
# cgroup v2's cpu.max, period 10 ms. Removed on exit, after the processes in them are stopped.
CGROUPS=()
CG_ROOT="" CG_KIND=""
if [ "$QUOTA" != 0 ]; then
  if [ -w /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] || [ -w /sys/fs/cgroup/cpu ]; then
    CG_ROOT=/sys/fs/cgroup/cpu CG_KIND=v1
  elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null && [ -w /sys/fs/cgroup ]; then
    CG_ROOT=/sys/fs/cgroup CG_KIND=v2
  else
    log "warning: no writable cgroup cpu controller: --quota $QUOTA ignored, the primaries run uncapped"
    QUOTA=0
  fi
fi
# cap_cpu PID: moves PID (every thread) into a new cgroup limited to QUOTA% of one CPU.
cap_cpu() {
  local dir="$CG_ROOT/sluice-repl-bench.$$.$1" period=10000
  mkdir "$dir" || die "cannot create the cgroup $dir"
  CGROUPS+=("$dir")
  if [ "$CG_KIND" = v1 ]; then
    echo "$period" >"$dir/cpu.cfs_period_us"
    echo $((period * QUOTA / 100)) >"$dir/cpu.cfs_quota_us"
  else
    echo "$((period * QUOTA / 100)) $period" >"$dir/cpu.max"
  fi
  echo "$1" >"$dir/cgroup.procs"
}
uncap() {
  local dir
  for dir in "${CGROUPS[@]}"; do rmdir "$dir" 2>/dev/null || true; done
}
trap 'cleanup; uncap' EXIT

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-repl-bench.XXXXXX")

# ---------------------------------------------------------------------------------------------
# Processes: every one we start is recorded and stopped by its PID. A process paused with
# SIGSTOP is continued after the SIGTERM, or it would never act on it.

# PIDS, cleanup, stop, free_port and wait_serving (PORT PID LOG: PONG, or die showing LOG) come
# from scripts/lib.sh.

# start_sluice CPUS EXTRA_ARGS...: sets S_PORT, S_PID, S_LOG.
start_sluice() {
  local cpus=$1
  shift
  free_port
  S_PORT=$PORT
  S_LOG="$WORK/sluice-$S_PORT.log"
  taskset -c "$cpus" "$SLUICE" --port "$S_PORT" --bind 127.0.0.1 --threads 1 "$@" >"$S_LOG" 2>&1 &
  S_PID=$!
  PIDS+=("$S_PID")
  wait_serving "$S_PORT" "$S_PID" "$S_LOG"
}

# ---------------------------------------------------------------------------------------------
# Probes.

rss_bytes() { awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$1/status"; }
info_field() { # PORT SECTION FIELD
  redis-cli -p "$1" INFO "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f { print $2 }'
}
used_memory() { info_field "$1" memory used_memory; }
dbsize() { redis-cli -p "$1" DBSIZE; }
sys_ticks() { # PID -> stime of every thread (field 15): the kernel's share
  awk '{ sub(/^.*\) /, ""); print $13 }' "/proc/$1/stat"
}
now() { date +%s.%N; }
cpu_jiffies() { # -> "busy0 total0 busy1 total1": /proc/stat for CPUs 0 and 1 (idle+iowait = not busy)
  awk '$1 == "cpu0" || $1 == "cpu1" { t = 0; for (i = 2; i <= NF; i++) t += $i; printf "%d %d ", t - $5 - $6, t }
       END { print "" }' /proc/stat
}
per_key() { awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { printf "%.1f", (b - a) / n }'; }

# wait_synced PORT PRIMARY_PORT PID LOG BOUND_S: polls until the replica's link is up and its
# DBSIZE equals the primary's; sets UP_AT and SYNCED_AT (epoch seconds, first poll seeing each).
wait_synced() {
  local port=$1 pport=$2 pid=$3 logfile=$4 bound=$5 want i link n
  want=$(dbsize "$pport")
  UP_AT="" SYNCED_AT=""
  for i in $(seq 1 $((bound * 50))); do
    kill -0 "$pid" 2>/dev/null || { cat "$logfile" >&2; die "replica on port $port exited"; }
    link=$(info_field "$port" replication master_link_status 2>/dev/null || true)
    if [ "$link" = up ]; then
      [ -n "$UP_AT" ] || UP_AT=$(now)
      n=$(dbsize "$port" 2>/dev/null || echo -1)
      if [ "$n" = "$want" ]; then SYNCED_AT=$(now); return 0; fi
    fi
    sleep 0.02
  done
  log "replica log:"; cat "$logfile" >&2
  log "replica INFO replication:"; redis-cli -p "$port" INFO replication >&2 || true
  die "replica on port $port not synced after ${bound}s (link: ${link:-?}, DBSIZE ${n:-?} of $want)"
}

# ---------------------------------------------------------------------------------------------
# 0. An empty replica: the baseline its memory is measured against.

STARTED=$SECONDS
log "sluice: $SLUICE; $KEYS keys; primaries on CPU $SERVER_CPU, client and replica on CPU $CLIENT_CPU/$REPLICA_CPU"
TOKEN_WORDS=(RL.CHECK KEY 1000000 100000000 COST 1000)

start_sluice "$SERVER_CPU"
E_PORT=$S_PORT E_PID=$S_PID
start_sluice "$REPLICA_CPU" --replicaof "127.0.0.1:$E_PORT"
R0_PORT=$S_PORT R0_PID=$S_PID R0_LOG=$S_LOG
wait_synced "$R0_PORT" "$E_PORT" "$R0_PID" "$R0_LOG" 10
sleep 0.5
EMPTY_RSS=$(rss_bytes "$R0_PID") EMPTY_USED=$(used_memory "$R0_PORT")
log "empty replica: VmRSS $EMPTY_RSS B, used_memory $EMPTY_USED B"
stop "$R0_PID"
stop "$E_PID"

# ---------------------------------------------------------------------------------------------
# 1. Full sync of KEYS buckets.

start_sluice "$SERVER_CPU" "${PRIMARY_ARGS[@]}"
W_PORT=$S_PORT W_PID=$S_PID W_LOG=$S_LOG # the primary WITH the replica
rss0=$(rss_bytes "$W_PID") used0=$(used_memory "$W_PORT")
t0=$SECONDS
preload "$W_PORT" "$KEYS" rlt: "${TOKEN_WORDS[@]}"
P_KEYS=$(dbsize "$W_PORT")
[ "$P_KEYS" = "$KEYS" ] || die "primary holds $P_KEYS keys after loading $KEYS"
P_RSS=$(per_key "$rss0" "$(rss_bytes "$W_PID")" "$KEYS")
P_USED=$(per_key "$used0" "$(used_memory "$W_PORT")" "$KEYS")
log "primary preloaded with $KEYS buckets in $((SECONDS - t0)) s: $P_RSS B RSS, $P_USED B used_memory per bucket"

T_START=$(now)
start_sluice "$REPLICA_CPU" --replicaof "127.0.0.1:$W_PORT"
R_PORT=$S_PORT R_PID=$S_PID R_LOG=$S_LOG
wait_synced "$R_PORT" "$W_PORT" "$R_PID" "$R_LOG" 120
UP_S=$(awk -v a="$T_START" -v b="$UP_AT" 'BEGIN { printf "%.2f", b - a }')
SYNC_S=$(awk -v a="$T_START" -v b="$SYNCED_AT" 'BEGIN { printf "%.2f", b - a }')
LOADED_LINE=$(grep -m1 'MASTER <-> REPLICA sync: loaded' "$R_LOG" | cut -d' ' -f2- || true)
SENT_LINE=$(grep -m1 'Synchronization with replica' "$W_LOG" | cut -d' ' -f2- || true)
[ -n "$LOADED_LINE" ] || { cat "$R_LOG" >&2; die "no 'sync: loaded' line in the replica's log"; }
R_KEYS=$(dbsize "$R_PORT")
sleep 1 # let the link task settle; then the memory the replica keeps
R_RSS_ABS=$(rss_bytes "$R_PID") R_USED_ABS=$(used_memory "$R_PORT")
R_RSS=$(per_key "$EMPTY_RSS" "$R_RSS_ABS" "$R_KEYS")
R_USED=$(per_key "$EMPTY_USED" "$R_USED_ABS" "$R_KEYS")
R_USED_RAW=$(per_key 0 "$R_USED_ABS" "$R_KEYS")
log "replica synced: link up after $UP_S s, DBSIZE $R_KEYS = primary's after $SYNC_S s (from launch)"
log "replica: $LOADED_LINE"
log "primary: $SENT_LINE"
# The same bucket read on both sides (COST 0 changes nothing and is allowed on a replica):
# allowed, limit, remaining and retry-after must match; reset-after (ms from now) moves.
probe_key="rlt:$(printf '%012d' $((KEYS / 2)))"
p_ans=$(redis-cli -p "$W_PORT" RL.CHECK "$probe_key" 1000000 100000000 COST 0 | head -4 | tr '\n' ' ')
r_ans=$(redis-cli -p "$R_PORT" RL.CHECK "$probe_key" 1000000 100000000 COST 0 | head -4 | tr '\n' ' ')
[ "$p_ans" = "$r_ans" ] || log "warning: $probe_key reads '$p_ans' on the primary, '$r_ans' on the replica"

# The replica's memory again after its link reconnects: the primary drops the replica's
# connection (CLIENT KILL TYPE replica), the replica reconnects within ~1 s and continues
# (+CONTINUE, a partial resync: no snapshot). If the figure right after the full sync holds
# more than the buckets, this shows whether it is the sync's buffers, tied to the first link.
PARTIAL0=$(info_field "$W_PORT" stats sync_partial_ok)
redis-cli -p "$W_PORT" CLIENT KILL TYPE replica >/dev/null
for i in $(seq 1 200); do
  [ "$(info_field "$W_PORT" stats sync_partial_ok)" -gt "$PARTIAL0" ] \
    && [ "$(info_field "$R_PORT" replication master_link_status)" = up ] && break
  sleep 0.05
done
if [ "$(info_field "$W_PORT" stats sync_partial_ok)" -gt "$PARTIAL0" ]; then
  sleep 1
  R_RSS2_ABS=$(rss_bytes "$R_PID")
  R_RSS2=$(per_key "$EMPTY_RSS" "$R_RSS2_ABS" "$R_KEYS")
  log "replica after a reconnect (partial resync): VmRSS $R_RSS2_ABS B, $R_RSS2 B per bucket"
else
  R_RSS2_ABS=0 R_RSS2=-
  log "warning: the replica did not continue (partial resync) within 10 s of CLIENT KILL TYPE replica"
  tail -5 "$R_LOG" >&2
fi
wait_synced "$R_PORT" "$W_PORT" "$R_PID" "$R_LOG" 60
SYNC_FULL0=$(info_field "$W_PORT" stats sync_full)

# ---------------------------------------------------------------------------------------------
# 2. Cost to the primary: the same load on a primary without a replica and on the one with.

start_sluice "$SERVER_CPU" "${PRIMARY_ARGS[@]}"
N_PORT=$S_PORT N_PID=$S_PID # the primary WITHOUT a replica
preload "$N_PORT" "$KEYS" rlt: "${TOKEN_WORDS[@]}"
log "second primary (never replicated) preloaded with $(dbsize "$N_PORT") buckets"

case "$WORKLOAD" in
  # Most checks create a bucket (full again 0.6 s after its last check, so dropped): the
  # heaviest case for the replica, which inserts as often as the primary.
  new) BENCH_CMD=(RL.CHECK rl:__rand_int__ 100 60) ;;
  # Every check updates one of the preloaded buckets (they never refill within the run): the
  # steady state of a limiter whose clients come back.
  steady) BENCH_CMD=(RL.CHECK rlt:__rand_int__ 1000000 100000000) ;;
  # One hot key, every check allowed (a billion per second): a global limit. Its records
  # within one flush interval coalesce into one.
  hot) BENCH_CMD=(RL.CHECK hot 1000000000 1) ;;
  *) echo "--workload is new, steady or hot" >&2; exit 2 ;;
esac
RANGE=1000000
bench() { # PORT N -> rps
  bench_csv "$CLIENT_CPU" "$1" -c "$CLIENTS" -P 16 -r "$RANGE" -n "$2" "${BENCH_CMD[@]}" |
    awk -F, '{ printf "%d\n", $2 }'
}

# measure SIDE ROUND: one run; appends "rps primary_ns/check primary_util% replica_ns/check
# cpu0_busy% cpu1_busy% primary_sys_ns/check" to $WORK/SIDE (busy: of the whole CPU, from
# /proc/stat; sys: the primary's stime alone). The other primary is paused meanwhile.
measure() {
  local side=$1 round=$2 port pid other a0 a1 s0 s1 r0 r1 c0 c1 t0 t1 rps lag=""
  if [ "$side" = with ]; then port=$W_PORT pid=$W_PID other=$N_PID
  else port=$N_PORT pid=$N_PID other=$W_PID; fi
  kill -STOP "$other"
  a0=$(cpu_ticks "$pid") s0=$(sys_ticks "$pid") r0=$(cpu_ticks "$R_PID") c0=$(cpu_jiffies) t0=$(now)
  rps=$(bench "$port" "$N")
  a1=$(cpu_ticks "$pid") s1=$(sys_ticks "$pid") r1=$(cpu_ticks "$R_PID") c1=$(cpu_jiffies) t1=$(now)
  if [ "$side" = with ]; then
    # How far behind the replica is as the load stops (its last ack is up to 1 s old).
    lag=$(redis-cli -p "$W_PORT" INFO replication | tr -d '\r' | awk -F'[:,=]' '
      $1 == "master_repl_offset" { m = $2 }
      $1 == "slave0" { for (i = 2; i < NF; i++) if ($i == "offset") o = $(i + 1) }
      END { if (o != "") printf "primary offset %d, replica acked %d", m, o; else print "no replica online" }')
  fi
  kill -CONT "$other"
  awk -v rps="$rps" -v n="$N" -v hz="$HZ" -v a="$((a1 - a0))" -v s="$((s1 - s0))" -v r="$((r1 - r0))" \
    -v t0="$t0" -v t1="$t1" -v side="$side" -v c0="$c0" -v c1="$c1" 'BEGIN {
      if (side != "with") r = 0
      split(c0, x, " "); split(c1, y, " ")
      cpu0 = (y[2] > x[2]) ? 100 * (y[1] - x[1]) / (y[2] - x[2]) : 0
      cpu1 = (y[4] > x[4]) ? 100 * (y[3] - x[3]) / (y[4] - x[4]) : 0
      printf "%d %.1f %.1f %.1f %.1f %.1f %.1f\n", rps, a * 1e9 / hz / n, 100 * a / hz / (t1 - t0), r * 1e9 / hz / n, cpu0, cpu1, s * 1e9 / hz / n }' |
    tee -a "$WORK/$side" | awk -v s="$side" -v k="$round" -v n="$N" -v lag="$lag" '{
      printf "[repl-bench] round %d %-7s %7d rps  primary %6.1f ns/check (sys %6.1f; %5.1f%% of a CPU)", k, s, $1, $2, $7, $3
      if (s == "with") printf "  replica %6.1f ns/check", $4
      printf "  CPU0 %5.1f%% CPU1 %5.1f%% busy  -n %d", $5, $6, n
      if (s == "with") printf "  (%s)", lag
      printf "\n" }' >&2
}

# Anything else running spoils the figures: say so before measuring.
idle0=$(cpu_jiffies)
sleep 1
idle1=$(cpu_jiffies)
awk -v c0="$idle0" -v c1="$idle1" 'BEGIN {
    split(c0, x, " "); split(c1, y, " ")
    b0 = (y[2] > x[2]) ? 100 * (y[1] - x[1]) / (y[2] - x[2]) : 0
    b1 = (y[4] > x[4]) ? 100 * (y[3] - x[3]) / (y[4] - x[4]) : 0
    if (b0 > 5 || b1 > 5)
      printf "[repl-bench] warning: before the runs, with our servers idle, CPU0 was %.0f%% and CPU1 %.0f%% busy: other processes are running; the figures below will suffer\n", b0, b1
  }' >&2

if [ "$QUOTA" != 0 ]; then
  cap_cpu "$W_PID"
  cap_cpu "$N_PID"
  QUOTA_NOTE="each primary capped at $QUOTA% of CPU $SERVER_CPU ($CG_KIND cgroup, 10 ms period)"
else
  QUOTA_NOTE="primaries uncapped"
fi
log "$QUOTA_NOTE"

# Size -n from a probe on the primary without a replica (it also warms up the client path).
probe=$(bench "$N_PORT" 400000)
N=$(awk -v rps="$probe" -v d="$DURATION" 'BEGIN { n = int(rps * d / 100000) * 100000; if (n < 200000) n = 200000; print n }')
log "probe: $probe rps; -n $N per run, $ROUNDS round(s) of without then with"
for round in $(seq 1 "$ROUNDS"); do
  measure without "$round"
  measure with "$round"
done

SYNC_FULL=$(info_field "$W_PORT" stats sync_full)
LINK=$(info_field "$R_PORT" replication master_link_status)
CUT=$(grep -c 'output buffer limit' "$W_LOG" || true)
[ "$SYNC_FULL" = "$SYNC_FULL0" ] || log "warning: the primary made $((SYNC_FULL - SYNC_FULL0)) full sync(s) during the runs (the replica was cut and resynced?)"
[ "$CUT" = 0 ] || log "warning: the primary cut its replica at the output buffer limit $CUT time(s)"
sleep 1
log "after the runs: primary $(dbsize "$W_PORT") keys, replica $(dbsize "$R_PORT") keys, link $LINK, sync_full $SYNC_FULL"

# Each side's median run (by throughput), and the ratio of each round's pair: the spread of
# those ratios is how noisy the machine was.
median() { sort -k1,1n "$WORK/$1" | awk '{ l[NR] = $0 } END { print l[int((NR + 1) / 2)] }'; }
read -r W_RPS W_NS W_UTIL W_RNS W_C0 W_C1 W_SYS <<<"$(median with)"
read -r N_RPS N_NS N_UTIL _ N_C0 N_C1 N_SYS <<<"$(median without)"
RATIOS=$(paste -d' ' "$WORK/without" "$WORK/with" | awk '{ printf "%.3f %.3f\n", $8 / $1, $9 / $2 }')

# ---------------------------------------------------------------------------------------------
# The report.

echo
echo "Sluice replication, $(nproc) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "$SLUICE, every node --threads 1, primaries --repl-flush-ms ${FLUSH_MS:-1 (default)}; primaries on CPU $SERVER_CPU, replica and redis-benchmark on CPU $CLIENT_CPU"
echo
echo "Full sync of $R_KEYS TOKEN buckets (16-byte keys)"
printf '  %-46s %s s\n' "replica launch -> master_link_status:up" "$UP_S"
printf '  %-46s %s s\n' "replica launch -> DBSIZE equal to the primary's" "$SYNC_S"
printf '  %-46s %s\n' "replica log" "$LOADED_LINE"
printf '  %-46s %s\n' "primary log" "$SENT_LINE"
printf '  %-46s %s B  (VmRSS %d B - empty replica %d B)\n' "replica RSS per bucket" "$R_RSS" "$R_RSS_ABS" "$EMPTY_RSS"
printf '  %-46s %s B  (used_memory %d B - empty %d B; %s B undifferenced)\n' \
  "replica used_memory per bucket" "$R_USED" "$R_USED_ABS" "$EMPTY_USED" "$R_USED_RAW"
printf '  %-46s %s B  (VmRSS %d B; CLIENT KILL TYPE replica, +CONTINUE)\n' "replica RSS per bucket after a reconnect" "$R_RSS2" "$R_RSS2_ABS"
printf '  %-46s %s B RSS, %s B used_memory\n' "primary per bucket (its preload delta)" "$P_RSS" "$P_USED"
echo
echo "Cost to the primary: redis-benchmark -P 16 -c $CLIENTS -r $RANGE -n $N ${BENCH_CMD[*]}"
echo "$ROUNDS alternating round(s) (without, then with); median run of each side; CPU per check ="
echo "the primary's utime+stime over the run / requests (sys: stime alone); $QUOTA_NOTE"
printf '  %-20s %9s %17s %11s %14s %17s %11s %11s\n' "" "rps" "primary ns/check" "of it sys" "primary CPU %" "replica ns/check" "CPU0 busy" "CPU1 busy"
printf '  %-20s %9d %17.1f %11.1f %14.1f %17s %10.1f%% %10.1f%%\n' "without a replica" "$N_RPS" "$N_NS" "$N_SYS" "$N_UTIL" "-" "$N_C0" "$N_C1"
printf '  %-20s %9d %17.1f %11.1f %14.1f %17.1f %10.1f%% %10.1f%%\n' "with one replica" "$W_RPS" "$W_NS" "$W_SYS" "$W_UTIL" "$W_RNS" "$W_C0" "$W_C1"
spread() { # COLUMN -> "median min max" of that column of $RATIOS
  printf '%s\n' "$RATIOS" | awk -v k="$1" '{ print $k }' | sort -n |
    awk '{ v[NR] = $1 } END { printf "%.3f %.3f %.3f\n", v[int((NR + 1) / 2)], v[1], v[NR] }'
}
read -r T_MED T_MIN T_MAX <<<"$(spread 1)"
read -r C_MED C_MIN C_MAX <<<"$(spread 2)"
echo "  throughput with / without, per round: $(printf '%s\n' "$RATIOS" | awk '{ printf " %s", $1 }')"
awk -v m="$T_MED" -v lo="$T_MIN" -v hi="$T_MAX" -v n="$ROUNDS" 'BEGIN {
    printf "  throughput with / without: median %.3f (min %.3f, max %.3f over %d rounds; target >= 0.9: %s)\n",
      m, lo, hi, n, (m >= 0.9 ? "met" : "NOT met") }'
echo "  primary CPU per check with / without: median $C_MED (min $C_MIN, max $C_MAX)"
# Uncapped: CPU 1 carries the client, and in the with runs the replica too. If CPU 1 is what
# limits the without run (busy near 100%, primary below it), the with run can only reach
# 1 / (client ns/check + replica ns/check): the throughput ratio then prices the replica's
# work on the client's CPU, not the primary's cost, which is the ns/check column.
if [ "$QUOTA" = 0 ]; then
  awk -v rps="$N_RPS" -v c1="$N_C1" -v rns="$W_RNS" -v w="$W_RPS" 'BEGIN {
      cns = c1 / 100 * 1e9 / rps; pred = 1e9 / (cns + rns)
      printf "  CPU 1 in the without run: %.0f ns/check (client; CPU1 busy / rps); + replica %.0f ns/check\n", cns, rns
      printf "    -> if CPU 1 is the limit, with-replica throughput <= %d rps (ratio %.3f); measured %d\n", pred, pred / rps, w }'
fi
if [ "$QUOTA" != 0 ]; then
  # Capped, the throughput ratio is the ratio of CPU shares over the ratio of CPU per check:
  # it prices the primary's cost only while both primaries get their whole cap.
  awk -v q="$QUOTA" -v a="$N_UTIL" -v b="$W_UTIL" 'BEGIN {
      if (a < 0.95 * q || b < 0.95 * q)
        printf "  warning: a primary got less than its %d%% cap (without %.1f%%, with %.1f%%): other processes took CPU 0; the throughput ratio then mixes their share in, the CPU per check ratio does not\n", q, a, b }'
fi
awk -v a="$N_C0" -v b="$N_UTIL" -v c="$W_C0" -v d="$W_UTIL" 'BEGIN {
    printf "  CPU0 busy beyond the primary (other processes; should be ~0): without %.1f%%, with %.1f%%\n", a - b, c - d }'
echo "  replica after the runs: link $LINK, full syncs during the runs $((SYNC_FULL - SYNC_FULL0)), cut at the output limit $CUT time(s)"
echo "Total time: $((SECONDS - STARTED)) s."
