# Shared by bench-vs-redis.sh and callgrind.sh; sourced, not run. The caller defines `die`.

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

