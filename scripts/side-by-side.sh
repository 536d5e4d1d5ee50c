# Shared by the scripts that run Sluice and Redis side by side (bench-vs-redis.sh,
# scale-bench.sh); sourced after scripts/lib.sh, not run. The caller sets ROOT, WORK and SLUICE
# and defines `log` and `die`.
#
# Both sides hold the same limiters: capacity 1,000,000 refilled at 0.01/s (1,000,000 per
# 10^8 s; Lua takes the period in ms), so a bucket preloaded with COST 1000 lives ~28 h and
# every request of a run is allowed. Keys are a prefix and 12 digits (`rlt:000000123456`), the
# names redis-benchmark's `-r` gives `__rand_int__`.

LUA_DIR="$ROOT/scripts/lua"
LIMIT=1000000 PERIOD_S=100000000 PERIOD_MS=100000000000

# start_redis CPUS: a fresh Redis (--save '' --appendonly no) pinned to CPUS with the Lua
# scripts loaded; sets R_PORT, R_PID and SHA_TOKEN, SHA_GCRA, SHA_SLIDING.
start_redis() {
  free_port
  R_PORT=$PORT
  taskset -c "$1" redis-server --port "$R_PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --protected-mode no --dir "$WORK" --logfile "$WORK/redis-$R_PORT.log" &
  R_PID=$!
  PIDS+=("$R_PID")
  wait_serving "$R_PORT" "$R_PID" "$WORK/redis-$R_PORT.log"
  SHA_TOKEN=$(redis-cli -p "$R_PORT" SCRIPT LOAD "$(cat "$LUA_DIR/token_bucket.lua")")
  SHA_GCRA=$(redis-cli -p "$R_PORT" SCRIPT LOAD "$(cat "$LUA_DIR/gcra.lua")")
  SHA_SLIDING=$(redis-cli -p "$R_PORT" SCRIPT LOAD "$(cat "$LUA_DIR/sliding.lua")")
  [ ${#SHA_TOKEN} = 40 ] && [ ${#SHA_GCRA} = 40 ] && [ ${#SHA_SLIDING} = 40 ] \
    || die "SCRIPT LOAD failed: $SHA_TOKEN $SHA_GCRA $SHA_SLIDING"
}

# start_sluice CPUS THREADS: a fresh Sluice pinned to CPUS; sets S_PORT, S_PID.
start_sluice() {
  free_port
  S_PORT=$PORT
  taskset -c "$1" "$SLUICE" --port "$S_PORT" --bind 127.0.0.1 --threads "$2" \
    >"$WORK/sluice-$S_PORT.log" 2>&1 &
  S_PID=$!
  PIDS+=("$S_PID")
  wait_serving "$S_PORT" "$S_PID" "$WORK/sluice-$S_PORT.log"
}

# The commands. KEY stands for the key in preloads; redis-benchmark gets `<prefix>__rand_int__`.
sluice_cmd() { # ALGO KEY [COST]
  local cost=() algo=()
  [ "${3:-1}" = 1 ] || cost=(COST "$3")
  [ "$1" = TOKEN ] || algo=(ALGO "$1")
  echo RL.CHECK "$2" "$LIMIT" "$PERIOD_S" "${cost[@]}" "${algo[@]}"
}
redis_cmd() { # ALGO KEY [COST]
  case "$1" in
    TOKEN) echo EVALSHA "$SHA_TOKEN" 1 "$2" "$LIMIT" "$PERIOD_MS" "$LIMIT" "${3:-1}" ;;
    GCRA) echo EVALSHA "$SHA_GCRA" 1 "$2" "$LIMIT" "$PERIOD_MS" "$LIMIT" "${3:-1}" ;;
    SLIDING) echo EVALSHA "$SHA_SLIDING" 1 "$2" "$LIMIT" "$PERIOD_MS" "${3:-1}" ;;
  esac
}
lua_of() {
  case "$1" in TOKEN) echo token_bucket.lua ;; GCRA) echo gcra.lua ;; SLIDING) echo sliding.lua ;; esac
}
prefix_of() {
  case "$1" in TOKEN) echo rlt: ;; GCRA) echo rlg: ;; SLIDING) echo rls: ;; FIXED) echo rlf: ;; LOG) echo rll: ;; esac
}

# expect_allowed PORT CMD...: dies unless CMD is allowed (the reply's first integer is 1).
expect_allowed() {
  local port=$1 first
  shift
  first=$(redis-cli -p "$port" "$@" 2>&1 | head -1)
  [ "$first" = 1 ] || die "port $port: '$*' answered '$first', not an allowed decision"
}

rss_bytes() { awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$1/status"; }
used_memory() {
  redis-cli -p "$1" INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'
}
dbsize() { redis-cli -p "$1" DBSIZE; }

# load_keys PORT COUNT PREFIX SECONDS WORDS...: sends WORDS with KEY replaced by PREFIX + 12
# digits, for 0..COUNT-1, as one RESP stream through redis-cli --pipe (the generator is Python:
# a 50-million-key stream in well under a minute, where awk takes minutes). False if the stream
# is not all answered without an error within SECONDS (the output is in $WORK/load.out).
load_keys() {
  local port=$1 count=$2 prefix=$3 secs=$4
  shift 4
  timeout "$secs" python3 -c '
import sys
count, prefix, words = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3:]
def bulk(w):
    return b"$%d\r\n%s\r\n" % (len(w), w)
at = words.index("KEY")
head = b"*%d\r\n" % len(words) + b"".join(bulk(w.encode()) for w in words[:at])
head += b"$%d\r\n" % (len(prefix) + 12) + prefix
tail = b"\r\n" + b"".join(bulk(w.encode()) for w in words[at + 1:])
out = sys.stdout.buffer
step = 100000
for start in range(0, count, step):
    out.write(b"".join(head + b"%012d" % i + tail for i in range(start, min(count, start + step))))
' "$count" "$prefix" "$@" | timeout "$secs" redis-cli -p "$port" --pipe >"$WORK/load.out" 2>&1
  grep -q "errors: 0, replies: $count\$" "$WORK/load.out"
}
