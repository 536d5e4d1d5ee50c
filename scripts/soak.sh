#!/usr/bin/env bash
# soak.sh — the fault-injection soak: clients check keys with known limits while a nemesis
# injects faults picked from a seed; a checker then holds what was allowed against one exact
# limiter plus the bound the docs state for the faults of each span (issue 37).
#
# What it runs (scripts/soak.py, python3 standard library only), on 127.0.0.1, free ports:
#   - a primary and two replicas (sluice --threads 1, --dir with a snapshot every second,
#     --min-replicas-to-write 1 --min-replicas-max-lag 2), each under libfaketime so its wall
#     clock can be stepped (its monotonic clock untouched), and three redis-sentinel (quorum 2,
#     down-after-milliseconds 2000, as docs/replication.md recommends);
#   - two sidecars (`sluice proxy --sentinel ...`), fail mode `local` and `closed`;
#   - one etcd (its data under the work dir), shared by the two cells below;
#   - a cluster (`--cluster yes --etcd`, --threads 1): `sluice cluster create --replicas 1` of six
#     nodes (three primaries, one replica each) and a spare node the slot moves add and remove;
#   - two regions, mumbai and hyderabad, one node each (`--region --regions-etcd
#     --rebalance-interval 1s`, rules from etcd), four GLOBAL rules (TOKEN and GCRA, 20 per 2 s
#     and 50 per 10 s) written with RL.RULE SET;
#   - clients on three paths of the pair (direct through Sentinel, each sidecar), on the
#     cluster (a slot map from CLUSTER SLOTS, following MOVED and ASK, retrying on TRYAGAIN) and
#     in each region (RL.HIT, at the region's part of the traffic), each path its own keys:
#     TOKEN, GCRA, FIXED, SLIDING and LOG, 20 per 2 s and 50 per 10 s (the regions: the GLOBAL
#     rules' buckets, checked in both), far above their limits; every check recorded (sent,
#     answered, key, allowed, the node that answered);
#   - the nemesis, every 1-3 s, the next kind from a bag of every enabled kind, shuffled by the
#     seed (so each kind comes about as often as any other), one of: kill -9 of the primary
#     (Sentinel fails over, the node comes back as a replica of the one the Sentinels name),
#     SIGSTOP of the primary for 0.1-0.6 s, SIGSTOP until Sentinel fails over, a replica's wall
#     clock stepped (50 ms to 2 min, either way) and the replica restarted under it, NOREPLICAS
#     on the primary for 0.3-2 s (the sidecars' fail modes), NOREPLICAS flapping 150 ms x 10,
#     kill -9 of a sidecar and its restart; the primary cut off from everyone for 0.5-5 s
#     (iptables DROP on its port, in a network namespace of the soak's own: the script runs
#     itself under `unshare -n`);
#     slot moves under load (`sluice cluster add-node` of the spare, or `remove-node` of it);
#     `etcdctl compact` at etcd's current revision; kill -9 of etcd, restarted on the same data
#     dir and ports after 0.2-3 s; the traffic split between the regions moved (0.8:0.2 to
#     0.2:0.8), so their shares rebalance; SIGSTOP of one region's node for 1-6 s;
#   - the checker: per key, the worst excess over one exact limiter in any span (TOKEN, GCRA:
#     limit + rate x span; LOG: limit within a period; FIXED, SLIDING: twice the limit within a
#     period, the two windows a span can meet), each span taken at its widest (first send to
#     last answer), against the bounds the docs state for the faults that acted on it: every
#     failover the Sentinels made (read from their logs, injected or not) may cost what the old
#     primary admitted that the promoted replica never saw; an outage at the `local` sidecar an
#     eighth of the capacity plus the refill of the outage; a slot move, an etcd compaction or
#     restart nothing (docs/cluster.md, docs/failure-matrix.md); a GLOBAL rule's bucket is
#     counted over both regions against the global limit, with the bound docs/regions.md
#     states for rebalancing over any span (regions x limit x interval / period).
# It prints a table (fault, injected, path or cell, keys over the exact limiter, worst
# overshoot, its bound, pass or fail)
# and, on a failure, the seed and the event log that reproduce it; exits 1 then.
#
# Usage: scripts/soak.sh [--minutes M] [--seed N] [--sluice PATH] [--build] [-- soak.py args]
#   --minutes  how long the nemesis runs (default 2)
#   --seed     the nemesis' seed (default 1)
#   --sluice   the sluice binary (default $SLUICE_BIN, else release/sluice in $CARGO_TARGET_DIR
#              or target/); --build builds it first
#   after --, soak.py's own: --cells pair,cluster,regions (the topologies to run), --faults
#   KIND,... (of kill pause stop clock outage flap sidecar partition slotmove compact etcd
#   shares regionpause), --rate, --clients, --keys
# Needs redis-sentinel, faketime (libfaketime), etcd, etcdctl and python3 (installed with
# apt-get when missing). Every process it starts is stopped by its PID on exit; the work
# directory (the nodes', sidecars', Sentinels' and etcd's logs and data, events.json) is kept on
# a failure or with KEEP_LOGS=1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

BUILD=0 SLUICE= MINUTES=2 SEED=1 EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) MINUTES="$2"; shift ;;
    --seed) SEED="$2"; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    *) common_arg "$@"; shift $((ARG_WORDS - 1)) ;;
  esac
  shift
done

log() { echo "[soak] $*" >&2; }
die() { echo "[soak] error: $*" >&2; exit 1; }

missing=()
command -v iptables >/dev/null || missing+=(iptables)
command -v redis-sentinel >/dev/null || missing+=(redis-sentinel)
command -v redis-cli >/dev/null || missing+=(redis-tools)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] || missing+=(faketime)
command -v etcd >/dev/null || missing+=(etcd-server)
command -v etcdctl >/dev/null || missing+=(etcd-client)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi
command -v python3 >/dev/null || die "python3 is missing (apt-get install -y python3)"
need_sluice

# Partitions need a network namespace of the soak's own, where iptables rules touch nothing
# else: the script runs itself again under `unshare -n` with its loopback up. Where that is not
# permitted (not root), the soak runs without the partition fault, and says so.
if [ "${SOAK_NETNS:-0}" != 1 ]; then
  if command -v iptables >/dev/null && unshare -n true 2>/dev/null; then
    exec unshare -n env SOAK_NETNS=1 bash -c 'ip link set lo up && exec "$0" "$@"' "$0" \
      --minutes "$MINUTES" --seed "$SEED" --sluice "$SLUICE" -- "${EXTRA[@]}"
  fi
  log "no partitions: unshare -n or iptables is not available here"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-soak.XXXXXX")
STATUS=0
# soak.py stops every process it started by its PID, on any exit.
timeout $(( ${MINUTES%.*} * 60 + 600 )) python3 "$ROOT/scripts/soak.py" --sluice "$SLUICE" \
  --minutes "$MINUTES" --seed "$SEED" --work "$WORK" "${EXTRA[@]}" || STATUS=$?
# lib.sh's exit trap removes WORK unless KEEP_LOGS=1: a failure keeps it, with its event log.
if [ "$STATUS" != 0 ]; then
  KEEP_LOGS=1
fi
exit "$STATUS"
