#!/usr/bin/env bash
# test.sh [CARGO TEST ARGS...]: runs every test, after installing what the tests need (with
# arguments, only `cargo test --workspace ARGS`).
#
# The tests drive real programs: redis-cli and redis-benchmark as clients, redis-server and
# redis-sentinel for the Sentinel tests, etcd (and etcdctl, which the soak compacts it with)
# for the cluster table and the rules, nginx and
# iptables for the gateway tests, unshare, ip and iptables for the partition tests (each in a
# network namespace of its own), libfaketime (package faketime) to jump a node's wall clock,
# redis-py 8 (pip) and ioredis, rate-limiter-flexible, express, express-rate-limit and
# rate-limit-redis (npm) for the sidecar's clients and the Node limiter libraries, openssl
# (test certificates and s_client) and curl (HTTPS metrics, gRPC over TLS) for the TLS tests, tmux
# (a real terminal for `sluice top`'s live screen), chromium (headless, to load `/dashboard`), python3-venv for the
# `limits` library's own tests (from PyPI, in a virtualenv). Whichever is missing is
# installed from Debian packages (as root, or through sudo), after saying which. Then `cargo test --workspace` runs with CI=true,
# so a test whose tool is still missing fails instead of skipping and passing.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "test.sh: $*" >&2; }

# command package: the Debian package that provides each command the tests run.
need=()
while read -r cmd pkg; do
    if ! command -v "$cmd" >/dev/null && ! [ -x "/usr/sbin/$cmd" ] && ! [ -x "/sbin/$cmd" ]; then
        case " ${need[*]:-} " in *" $pkg "*) ;; *) need+=("$pkg") ;; esac
    fi
done <<'TOOLS'
redis-server redis-server
redis-cli redis-tools
redis-benchmark redis-tools
redis-sentinel redis-sentinel
etcd etcd-server
etcdctl etcd-client
nginx nginx
iptables iptables
ip iproute2
unshare util-linux
faketime faketime
node nodejs
npm npm
pip3 python3-pip
openssl openssl
curl curl
tmux tmux
chromium chromium
TOOLS
# The `limits` library's tests run in a virtualenv of their own (scripts/limits-tests.sh).
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    need+=(python3-venv)
fi

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        sudo=()
    elif command -v sudo >/dev/null; then
        sudo=(sudo)
    else
        say "the tests need these Debian packages: ${need[*]}; run this as root, or install them"
        exit 1
    fi
    if ! command -v apt-get >/dev/null; then
        say "the tests need ${need[*]} (Debian package names), and there is no apt-get to install them"
        exit 1
    fi
    say "installing what the tests need: apt-get install ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq "${need[@]}" >/dev/null
    # The packages just installed start system services on the default ports; the tests start
    # their own. Services that were there before are left alone.
    for pkg in "${need[@]}"; do
        case $pkg in
            etcd-server) svc=etcd ;;
            redis-server | redis-sentinel | nginx) svc=$pkg ;;
            *) continue ;;
        esac
        "${sudo[@]}" systemctl stop "$svc" 2>/dev/null ||
            "${sudo[@]}" service "$svc" stop 2>/dev/null || true
    done
fi

# The real clients the sidecar tests drive in their default settings: redis-py 8 (it opens with
# HELLO 3) and ioredis (installed into tests/js, where tests/js/sidecar_client.js finds it).
if ! python3 -c 'import redis, sys; sys.exit(int(redis.__version__.split(".")[0]) < 8)' 2>/dev/null; then
    say "installing redis-py 8: pip install 'redis>=8'"
    python3 -m pip install -q 'redis>=8' ||
        python3 -m pip install -q --break-system-packages 'redis>=8'
fi
if ! [ -d tests/js/node_modules/ioredis ] || ! [ -d tests/js/node_modules/rate-limiter-flexible ]; then
    command -v npm >/dev/null || { say "the tests need npm (for ioredis and the limiter libraries)"; exit 1; }
    say "installing ioredis and the Node limiter libraries: npm install in tests/js"
    (cd tests/js && npm install --silent --no-audit --no-fund)
fi

export CI=true
cargo test --workspace "$@"
# In release, only with no arguments (the whole suite): the million-bucket memory figures the
# README quotes, one at a time (they read the process's RSS), and 100,000 lease acquire/release
# pairs on one key against a release build of the server.
if [ $# -eq 0 ]; then
    cargo test --release -p sluice-store --test memory -- --ignored million --test-threads 1
    cargo build --release -p sluice
    SLUICE_BIN="$PWD/target/release/sluice" \
        cargo test -p sluice-tests --test leases one_key_takes_a_hundred_thousand_pairs
    # The Python `limits` library's own sync Redis and Redis Cluster tests, unchanged, against
    # the release build (one node, then a three-node cluster) and against redis-server (one
    # node, then a Redis Cluster of three); its sdist and test dependencies come from PyPI.
    # Every test that passes against Redis must pass against Sluice.
    scripts/limits-tests.sh --sluice "$PWD/target/release/sluice" --require-equal
    # The fault-injection soak, two minutes on a fixed seed against the release build: a
    # replicated pair under redis-sentinel with two sidecars, a cluster with etcd, two
    # regions, and a nemesis drawing every fault kind; each key's allowed checks held to one
    # exact limiter plus the bound the docs state for the faults of its span
    # (`scripts/soak.sh --minutes 30` for the long run).
    scripts/soak.sh --minutes 2 --seed 1 --sluice "$PWD/target/release/sluice"
    # The wire, the hostile clients, the command surface, replication (WAIT, PSYNC), the
    # checks, operations and ACLs (CLIENT KILL USER) again, every node on the epoll connection
    # loop (--io epoll; the suite above ran on the default, io_uring where it is permitted).
    SLUICE_TEST_IO=epoll cargo test -p sluice-tests --test protocol --test hostile \
        --test surface --test replication --test rl_check --test operations --test tls_acl
fi
