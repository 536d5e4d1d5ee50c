//! Lists, hashes, sets and sorted sets keep every guarantee a bucket has: a replica gets them
//! by full sync and by the stream (small ones and ones past the compact encodings, with their
//! TTLs), a promoted replica serves them, and a restart from a snapshot keeps them.

use std::time::Duration;

use redis::{Connection, Value};
use sluice_tests::{Sluice, TempDir, holds_within};

fn cmd(c: &mut Connection, args: &[&str]) -> Value {
    let mut command = redis::cmd(args[0]);
    for a in &args[1..] {
        command.arg(*a);
    }
    command.query(c).unwrap()
}

/// A key's whole state, the same text on any node that holds the same value: its type, its
/// entries (sets and hashes sorted, as their order is the server's) and whether it has a TTL.
fn state(c: &mut Connection, key: &str) -> String {
    let kind: String = redis::cmd("TYPE").arg(key).query(c).unwrap();
    let mut entries: Vec<String> = match kind.as_str() {
        "list" => redis::cmd("LRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .query(c)
            .unwrap(),
        "hash" => {
            let pairs: Vec<(String, String)> = redis::cmd("HGETALL").arg(key).query(c).unwrap();
            pairs.into_iter().map(|(f, v)| format!("{f}={v}")).collect()
        }
        "set" => redis::cmd("SMEMBERS").arg(key).query(c).unwrap(),
        "zset" => {
            let pairs: Vec<(String, String)> = redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(c)
                .unwrap();
            pairs.into_iter().map(|(m, s)| format!("{m}@{s}")).collect()
        }
        _ => Vec::new(),
    };
    if matches!(kind.as_str(), "hash" | "set") {
        entries.sort();
    }
    let ttl: i64 = redis::cmd("TTL").arg(key).query(c).unwrap();
    format!(
        "{kind} ttl={} n={} {}",
        ttl > 0,
        entries.len(),
        entries.join(",")
    )
}

/// Small and big collections of every type, some with a TTL.
fn fill(c: &mut Connection) {
    cmd(c, &["RPUSH", "list:small", "a", "b", "c"]);
    cmd(c, &["HSET", "hash:small", "f1", "1", "f2", "two"]);
    cmd(c, &["SADD", "set:small", "x", "y", "7"]);
    cmd(
        c,
        &["ZADD", "zset:small", "1", "a", "2.5", "b", "-inf", "c"],
    );
    cmd(c, &["EXPIRE", "hash:small", "1000"]);
    let mut pipe = redis::pipe();
    for i in 0..20_000 {
        let i = i.to_string();
        pipe.cmd("RPUSH").arg("list:big").arg(&i).ignore();
        pipe.cmd("HSET")
            .arg("hash:big")
            .arg(format!("f{i}"))
            .arg(&i)
            .ignore();
        pipe.cmd("SADD")
            .arg("set:big")
            .arg(format!("m{i}"))
            .ignore();
        pipe.cmd("ZADD")
            .arg("zset:big")
            .arg(&i)
            .arg(format!("m{i}"))
            .ignore();
    }
    let () = pipe.query(c).unwrap();
    cmd(c, &["EXPIRE", "zset:big", "1000"]);
}

const KEYS: &[&str] = &[
    "list:small",
    "hash:small",
    "set:small",
    "zset:small",
    "list:big",
    "hash:big",
    "set:big",
    "zset:big",
];

fn states(c: &mut Connection) -> Vec<String> {
    KEYS.iter().map(|k| state(c, k)).collect()
}

#[test]
fn collections_reach_a_replica_by_sync_and_stream_and_survive_promotion() {
    let primary = Sluice::start();
    let mut p = primary.client();
    fill(&mut p);
    let want = states(&mut p);
    assert!(want[7].starts_with("zset ttl=true n=20000"), "{}", want[7]);

    let to = format!("127.0.0.1:{}", primary.port);
    let replica = Sluice::start_with(&["--replicaof", &to]);
    let mut r = replica.client();
    assert!(
        holds_within(60, || states(&mut r) == want),
        "full sync: the replica differs\nprimary {:?}\nreplica {:?}",
        want.iter()
            .map(|s| &s[..s.len().min(80)])
            .collect::<Vec<_>>(),
        states(&mut r)
            .iter()
            .map(|s| &s[..s.len().min(80)])
            .collect::<Vec<_>>()
    );

    // The stream: a change of each kind to each type, then WAIT.
    for args in [
        &["LPUSH", "list:small", "z"][..],
        &["LTRIM", "list:big", "5", "-5"],
        &["LSET", "list:big", "0", "first"],
        &["HDEL", "hash:small", "f1"],
        &["HINCRBY", "hash:big", "f7", "10"],
        &["SREM", "set:big", "m1", "m2"],
        &["SPOP", "set:small"],
        &["ZINCRBY", "zset:small", "5", "a"],
        &["ZREMRANGEBYSCORE", "zset:big", "0", "999"],
        &["ZPOPMAX", "zset:big", "3"],
        &["RENAME", "set:small", "set:renamed"],
        &["PERSIST", "zset:big"],
    ] {
        cmd(&mut p, args);
    }
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut p).unwrap();
    assert_eq!(acked, 1);
    let mut keys: Vec<&str> = KEYS.to_vec();
    keys.push("set:renamed");
    let want: Vec<String> = keys.iter().map(|k| state(&mut p, k)).collect();
    assert!(
        holds_within(10, || keys
            .iter()
            .map(|k| state(&mut r, k))
            .collect::<Vec<_>>()
            == want),
        "stream: the replica differs"
    );

    // Promoted, the replica serves and changes them.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    let n: i64 = redis::cmd("HINCRBY")
        .arg("hash:big")
        .arg("f7")
        .arg(1)
        .query(&mut r)
        .unwrap();
    assert_eq!(n, 18);
    let card: i64 = redis::cmd("ZCARD").arg("zset:big").query(&mut r).unwrap();
    assert_eq!(card, 20_000 - 1000 - 3);
}

#[test]
fn collections_survive_a_restart_from_a_snapshot() {
    let dir = TempDir::new("snap-types");
    let d = dir.path().to_str().unwrap().to_owned();
    let mut node = Sluice::start_with(&["--dir", &d, "--save-interval", "0"]);
    let want = {
        let mut c = node.client();
        fill(&mut c);
        let _ = redis::cmd("SHUTDOWN").query::<()>(&mut c);
        // What the same writes give on a node that never restarted.
        let fresh = Sluice::start();
        let mut f = fresh.client();
        fill(&mut f);
        states(&mut f)
    };
    assert!(node.wait_exit(Duration::from_secs(10)).unwrap().success());
    let node = Sluice::start_with(&["--dir", &d, "--save-interval", "0"]);
    let mut c = node.client();
    assert_eq!(states(&mut c), want, "{}", node.log());
}
