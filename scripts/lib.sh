# Shared by the scripts in scripts/; sourced, not run. The caller sets ROOT (the repository),
# defines `log` and `die`, and sets WORK (a scratch directory) before it starts a process.

# common_arg ARGS...: the options of a script that runs sluice, at the head of ARGS: --sluice
# PATH, --build, -h/--help (prints the script's opening comment); anything else is an error.
# Sets ARG_WORDS to how many words it took.
common_arg() {
  ARG_WORDS=1
  case "$1" in
    --sluice) SLUICE="$2"; ARG_WORDS=2 ;;
    --build) BUILD=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
}

# need_sluice: makes SLUICE the binary to run: as the caller set it (--sluice), else $SLUICE_BIN,
# else the release build's (in $CARGO_TARGET_DIR, or target/). With BUILD=1, or when that is not
# an executable, builds it first (`cargo build --release --bin sluice`) and runs the build's.
need_sluice() {
  local built=${SLUICE_BIN:-} dir=${CARGO_TARGET_DIR:-target}
  case "$dir" in /*) ;; *) dir="$ROOT/$dir" ;; esac
  built=${built:-$dir/release/sluice}
  SLUICE=${SLUICE:-$built}
  if [ "${BUILD:-0}" = 1 ] || [ ! -x "$SLUICE" ]; then
    log "building the release binary"
    (cd "$ROOT" && cargo build --release --bin sluice >&2)
    SLUICE=$built
  fi
  [ -x "$SLUICE" ] || die "no sluice binary at $SLUICE"
}

# preload PORT COUNT PREFIX WORDS...: sends WORDS with KEY replaced by PREFIX + 12 digits, for
# 0..COUNT-1, as one RESP stream through redis-cli --pipe.
preload() {
  local port=$1 count=$2 prefix=$3 out
  shift 3
  out=$(awk -v n="$count" -v prefix="$prefix" -v words="$*" 'BEGIN {
      nw = split(words, w, " ")
      for (i = 0; i < n; i++) {
        key = sprintf("%s%012d", prefix, i)
        printf "*%d\r\n", nw
        for (j = 1; j <= nw; j++) {
          a = (w[j] == "KEY") ? key : w[j]
          printf "$%d\r\n%s\r\n", length(a), a
        }
      }
    }' | redis-cli -p "$port" --pipe 2>&1)
  case "$out" in
    *"errors: 0, replies: $count"*) ;;
    *) die "preload on port $port failed: $out" ;;
  esac
}


# Processes a script starts: recorded in PIDS and stopped by their PID when it exits, even on
# an error or ^C (continued first: a measurement may have paused one with SIGSTOP). WORK goes
# too, unless KEEP_LOGS=1.
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  if [ -n "${WORK:-}" ]; then
    if [ "${KEEP_LOGS:-0}" = 1 ]; then
      log "logs kept in $WORK"
    else
      rm -rf "$WORK"
    fi
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# forget PID: a process that has exited and been waited for is no longer ours to stop (its PID
# may be reused).
forget() {
  local kept=() p
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || kept+=("$p"); done
  PIDS=("${kept[@]}")
}

# stop PID: stops one of our processes now.
stop() {
  kill "$1" 2>/dev/null || true
  kill -CONT "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  forget "$1"
}

# free_port: sets PORT to a port no socket uses and this run has not used yet. Taken below the
# ephemeral range: a port there may be held by a TIME-WAIT socket of an earlier client, which
# makes the server's bind fail (EADDRINUSE) although nothing listens on it.
USED_PORTS=" "
EPHEMERAL_LOW=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$EPHEMERAL_LOW" -gt 12000 ] || EPHEMERAL_LOW=61000
free_port() {
  local p i
  for i in $(seq 1 1000); do
    p=$((10000 + RANDOM % (EPHEMERAL_LOW - 10000)))
    case "$USED_PORTS" in *" $p "*) continue ;; esac
    if command -v ss >/dev/null && [ -n "$(ss -Htan "( sport = :$p )" 2>/dev/null)" ]; then
      continue
    fi
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      USED_PORTS="$USED_PORTS$p "
      PORT=$p
      return
    fi
  done
  die "no free port found"
}

# wait_ready PORT PID: true once PORT answers PING; false if PID exits or 10 s pass.
wait_ready() {
  local port=$1 pid=$2 i
  for i in $(seq 1 200); do
    if [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ]; then return 0; fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# start_pinned CPUS NAME COMMAND...: a server pinned to CPUS (taskset) on a free port, its log
# in $WORK/NAME.log; sets PORT_<NAME> and PID_<NAME>, and stops it on exit (PIDS).
start_pinned() {
  local cpus=$1 name=$2 pid
  shift 2
  free_port
  taskset -c "$cpus" "$@" --port "$PORT" >"$WORK/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_ready "$PORT" "$pid" || { cat "$WORK/$name.log" >&2; die "$name did not start"; }
  printf -v "PORT_$name" %s "$PORT"
  printf -v "PID_$name" %s "$pid"
}

# wait_serving PORT PID LOG: wait_ready, or dies with the server's LOG on the terminal.
wait_serving() {
  wait_ready "$1" "$2" && return 0
  cat "$3" >&2
  kill -0 "$2" 2>/dev/null || die "server on port $1 exited"
  die "server on port $1 did not answer PING"
}

# launch_sluice NAME ARGS...: starts $SLUICE --threads 1 ARGS on a free port of 127.0.0.1, its
# output in $WORK/NAME.log (NAME empty: sluice-PORT.log), trying three ports before it dies; sets
# S_PORT and S_PID.
launch_sluice() {
  local name=$1 attempt logfile
  shift
  for attempt in 1 2 3; do
    free_port
    S_PORT=$PORT
    logfile="$WORK/${name:-sluice-$S_PORT}.log"
    "$SLUICE" --port "$S_PORT" --bind 127.0.0.1 --threads 1 "$@" >"$logfile" 2>&1 &
    S_PID=$!
    PIDS+=("$S_PID")
    wait_ready "$S_PORT" "$S_PID" && return 0
    kill "$S_PID" 2>/dev/null || true
    log "sluice${name:+ $name} on :$S_PORT did not start (attempt $attempt): $(tail -1 "$logfile")"
  done
  die "sluice${name:+ $name} did not start"
}

# bench_csv CPUS PORT ARGS...: runs `redis-benchmark --csv ARGS` (options, then the command)
# against 127.0.0.1:PORT on CPUS and prints its last CSV line unquoted: test, rps, avg, min,
# p50, p95, p99 and max latency (ms). Dies with redis-benchmark's errors if it fails.
bench_csv() {
  local cpus=$1 port=$2 out line
  shift 2
  out=$(taskset -c "$cpus" redis-benchmark --csv -h 127.0.0.1 -p "$port" "$@" 2>"$WORK/bench.err") || {
    cat "$WORK/bench.err" >&2
    die "redis-benchmark failed on port $port: $*"
  }
  line=$(printf '%s\n' "$out" | grep -v '^"test"' | tail -1)
  [ -n "$line" ] || { cat "$WORK/bench.err" >&2; die "no CSV from redis-benchmark on port $port: $*"; }
  printf '%s\n' "$line" | tr -d '"'
}

# wait_for SECONDS WHAT COMMAND...: runs COMMAND every 0.1 s until it succeeds, or dies.
wait_for() {
  local secs=$1 what=$2 i
  shift 2
  for i in $(seq 1 $((secs * 10))); do
    if "$@"; then return 0; fi
    sleep 0.1
  done
  die "timed out after ${secs}s waiting for $what"
}

# cpu_ticks PID: the process's utime + stime over all its threads, in clock ticks (fields 14
# and 15 of /proc/PID/stat, counted after the command name, which may hold spaces).
cpu_ticks() {
  awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

# cpu_split PID: the same two counts apart, "utime stime", in clock ticks.
cpu_split() {
  awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$1/stat"
}

# path_without_protoc DIR: fills DIR with links to every command on PATH except protoc and
# prints DIR, a PATH in which the build must still succeed. Dropping protoc's directory from
# PATH is not enough: on a merged-/usr system /bin and /usr/bin are one directory, and it
# holds everything else too.
path_without_protoc() {
  local bin=$1 dir cmd name dirs
  mkdir -p "$bin"
  IFS=: read -r -a dirs <<<"$PATH"
  for dir in "${dirs[@]}"; do
    [ -d "$dir" ] || continue
    for cmd in "$dir"/*; do
      name=${cmd##*/}
      # The first directory on PATH wins, as it would for the shell.
      if [ -x "$cmd" ] && [ ! -e "$bin/$name" ] && [ "$name" != protoc ]; then
        ln -s "$cmd" "$bin/$name"
      fi
    done
  done
  if PATH=$bin command -v protoc >/dev/null; then
    die "protoc is still on PATH $bin"
  fi
  echo "$bin"
}

# need_tools TOOL...: dies unless every TOOL is on PATH (with the Debian packages that have
# the benchmarks' tools).
need_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null \
      || die "$tool is missing (apt-get install -y redis-server redis-tools util-linux mawk)"
  done
}

# cpu_per_request LABEL PID PORT PIPELINE N CMD...: one redis-benchmark run of N requests of CMD
# on CPU 1 (-c $CLIENTS, -r $KEYS) against the server PID on PORT; the server's CPU ns per
# request over it (utime + stime from /proc/PID/stat) is logged and appended to
# $WORK/cpu-LABEL.
cpu_per_request() {
  local label=$1 pid=$2 port=$3 pipeline=$4 n=$5 t0 t1 ns
  shift 5
  t0=$(cpu_ticks "$pid")
  bench_csv 1 "$port" -c "$CLIENTS" -P "$pipeline" -n "$n" -r "$KEYS" "$@" >/dev/null
  t1=$(cpu_ticks "$pid")
  ns=$(awk -v d=$((t1 - t0)) -v t=$((1000000000 / $(getconf CLK_TCK))) -v n="$n" \
    'BEGIN { printf "%.0f\n", d * t / n }')
  echo "$ns" >>"$WORK/cpu-$label"
  log "$(printf '%-36s %6d ns/request' "$label" "$ns")"
}
