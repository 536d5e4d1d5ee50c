"""redis-py (8 or later) in its default settings against `sluice proxy`
(tests/tests/gateway_clients.rs): RL.CHECK, a pipeline (transactional, redis-py's default) and
one without a transaction. Prints one JSON line; exits non-zero on any failure.

Usage: python3 sidecar_client.py PORT
"""

import json
import sys

import redis


def main():
    port = int(sys.argv[1])
    r = redis.Redis(host="127.0.0.1", port=port)
    pong = r.ping()
    one = r.execute_command("RL.CHECK", "py", 5, "1h")
    with r.pipeline() as p:
        for _ in range(10):
            p.execute_command("RL.CHECK", "py:multi", 5, "1h")
        multi = [x[0] for x in p.execute()]
    with r.pipeline(transaction=False) as p:
        for _ in range(10):
            p.execute_command("RL.CHECK", "py:pipe", 5, "1h")
        pipe = [x[0] for x in p.execute()]
    info = r.execute_command("CLIENT", "INFO")
    if isinstance(info, bytes):
        info = info.decode()
    print(json.dumps({
        "version": redis.__version__,
        "pong": pong,
        "one": list(one),
        "multi": multi,
        "pipe": pipe,
        "info": str(info).strip(),
    }))


if __name__ == "__main__":
    main()
