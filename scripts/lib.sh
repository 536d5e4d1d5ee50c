# Shared by the scripts in scripts/; sourced, not run. The caller defines `log` and `die`, and
# sets WORK (a scratch directory) before it starts a process.

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
