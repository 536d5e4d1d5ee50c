//! Named rules end to end: RL.HITS atomic under 16 concurrent clients, a rules file reloaded
//! (and a broken one refused), and rules in etcd reaching two nodes, with rollback.

use std::time::Duration;

use sluice_tests::{Etcd, Sluice, TempDir, wait_until};

fn cmd(c: &mut redis::Connection, args: &str) -> redis::RedisResult<redis::Value> {
    let mut q = redis::cmd(args.split_whitespace().next().unwrap());
    for a in args.split_whitespace().skip(1) {
        q.arg(a);
    }
    q.query(c)
}

fn ints(c: &mut redis::Connection, args: &str) -> Vec<i64> {
    let v = cmd(c, args).unwrap_or_else(|e| panic!("{args}: {e}"));
    let redis::Value::Array(items) = v else {
        panic!("{args}: {v:?}")
    };
    items
        .into_iter()
        .filter_map(|i| match i {
            redis::Value::Int(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// `RL.RULE GET name`'s `field`, if the rule exists.
fn rule_field(c: &mut redis::Connection, name: &str, field: &str) -> Option<String> {
    let v: Option<Vec<redis::Value>> = redis::cmd("RL.RULE").arg("GET").arg(name).query(c).ok()?;
    let v = v?;
    let at = v
        .iter()
        .position(|x| *x == redis::Value::BulkString(field.as_bytes().to_vec()))?;
    Some(match &v[at + 1] {
        redis::Value::Int(n) => n.to_string(),
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    })
}

#[test]
fn hits_never_consume_partially_under_16_clients() {
    let server = Sluice::start();
    let mut c = server.client();
    for (name, limit) in [("a", 100), ("b", 40), ("c", 70)] {
        cmd(
            &mut c,
            &format!("RL.RULE SET {name} LIMIT {limit} PERIOD 10h"),
        )
        .unwrap();
    }
    let allowed: i64 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..16)
            .map(|i| {
                let server = &server;
                s.spawn(move || {
                    let mut c = server.client();
                    (0..20)
                        .map(|_| {
                            // Half the clients list the rules in another order.
                            let call = if i % 2 == 0 {
                                "RL.HITS s a b c"
                            } else {
                                "RL.HITS s c b a"
                            };
                            ints(&mut c, call)[0]
                        })
                        .sum::<i64>()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert_eq!(allowed, 40, "b allows 40");
    // Every bucket consumed exactly the 40 allowed calls: none consumed on a denial.
    for (name, limit) in [("a", 100), ("b", 40), ("c", 70)] {
        let r = ints(&mut c, &format!("RL.HIT {name} s COST 0"));
        assert_eq!(r[2], limit - 40, "rule {name}: {r:?}");
    }
}

#[test]
fn a_rules_file_is_reloaded_and_a_broken_one_keeps_the_last_good_rules() {
    let dir = TempDir::new("rules-file");
    let path = dir.path().join("rules.toml");
    std::fs::write(
        &path,
        "[user]\nlimit = 3\nperiod = \"1m\"\n\n[route]\nlimit = 1000\nperiod = 1\nshadow = true\nfloor = 500\n",
    )
    .unwrap();
    let server = Sluice::start_with(&["--rules", path.to_str().unwrap()]);
    let mut c = server.client();
    assert_eq!(ints(&mut c, "RL.HIT user alice")[1], 3);
    assert_eq!(rule_field(&mut c, "route", "shadow").as_deref(), Some("1"));

    std::fs::write(
        &path,
        "[user]\nlimit = 7\nperiod = \"1m\"\n\n[route]\nlimit = 1000\nperiod = 1\nfloor = 500\n",
    )
    .unwrap();
    let reloaded = wait_until(Duration::from_secs(10), || {
        (rule_field(&mut c, "user", "limit")? == "7").then_some(())
    });
    assert!(reloaded.is_some(), "{}", server.log());
    assert_eq!(rule_field(&mut c, "user", "version").as_deref(), Some("2"));
    assert_eq!(rule_field(&mut c, "route", "shadow").as_deref(), Some("0"));

    // Broken TOML, then a change below the floor: both keep the last good rules.
    for (broken, why) in [
        ("[user\nlimit = 1\n", "not valid TOML"),
        (
            "[user]\nlimit = 7\nperiod = \"1m\"\n\n[route]\nlimit = 5\nperiod = 1\n",
            "below its FLOOR 500",
        ),
        (
            "[user]\nlimit = 7\nperiod = \"0\"\n",
            "must be a positive duration",
        ),
    ] {
        std::fs::write(&path, broken).unwrap();
        let logged = wait_until(Duration::from_secs(10), || {
            let log = server.log();
            log.lines()
                .any(|l| l.contains("not reloaded") && l.contains(why))
                .then_some(())
        });
        assert!(logged.is_some(), "{why}: {}", server.log());
        assert_eq!(rule_field(&mut c, "user", "limit").as_deref(), Some("7"));
        assert_eq!(
            rule_field(&mut c, "route", "limit").as_deref(),
            Some("1000")
        );
    }
    // The file is the source: RL.RULE writes are refused.
    let err = cmd(&mut c, "RL.RULE SET user LIMIT 1 PERIOD 1m").unwrap_err();
    assert!(err.to_string().contains("edit that file"), "{err}");

    // YAML works the same; a rule dropped from the file is deleted.
    let yaml = dir.path().join("rules.yaml");
    std::fs::write(&yaml, "ip:\n  limit: 20\n  period: 1s\n  algo: gcra\n").unwrap();
    let server = Sluice::start_with(&["--rules", yaml.to_str().unwrap()]);
    let mut c = server.client();
    assert_eq!(rule_field(&mut c, "ip", "algo").as_deref(), Some("GCRA"));
    std::fs::write(&yaml, "user:\n  limit: 2\n  period: 1m\n").unwrap();
    let gone = wait_until(Duration::from_secs(10), || {
        rule_field(&mut c, "ip", "limit").is_none().then_some(())
    });
    assert!(gone.is_some());
    assert_eq!(ints(&mut c, "RL.HIT user x")[1], 2);
}

#[test]
fn a_broken_rules_file_stops_the_start() {
    let dir = TempDir::new("rules-bad");
    let path = dir.path().join("rules.toml");
    std::fs::write(
        &path,
        "[user]\nlimit = 3\nperiod = \"1m\"\nalgo = \"magic\"\n",
    )
    .unwrap();
    let out = std::process::Command::new("timeout")
        .arg("30")
        .arg(sluice_tests::binary())
        .args(["--port", "0", "--rules"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("rule 'user': unknown ALGO 'magic'"), "{log}");
}

#[test]
fn etcd_rules_reach_every_node_and_roll_back() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let a = Sluice::start_with(&["--rules-etcd", &url]);
    let b = Sluice::start_with(&["--rules-etcd", &url]);
    let (mut ca, mut cb) = (a.client(), b.client());

    let v1: i64 = redis::cmd("RL.RULE")
        .arg(&["SET", "user", "LIMIT", "5", "PERIOD", "1m", "FLOOR", "2"])
        .query(&mut ca)
        .unwrap();
    assert_eq!(rule_field(&mut ca, "user", "version"), Some(v1.to_string()));
    let v1 = v1.to_string();
    // Node b learns it through its watch.
    let seen = wait_until(Duration::from_secs(10), || {
        (rule_field(&mut cb, "user", "version")? == v1).then_some(())
    });
    assert!(seen.is_some(), "b:\n{}", b.log());
    assert_eq!(ints(&mut cb, "RL.HIT user bob")[1], 5);

    // A change on b reaches a; below the floor is refused on either.
    let err = cmd(&mut cb, "RL.RULE SET user LIMIT 1 PERIOD 1m").unwrap_err();
    assert!(err.to_string().contains("below its FLOOR"), "{err}");
    let v2: i64 = redis::cmd("RL.RULE")
        .arg(&["SET", "user", "LIMIT", "50", "PERIOD", "1m"])
        .query(&mut cb)
        .unwrap();
    assert!(v2 > v1.parse::<i64>().unwrap());
    let seen = wait_until(Duration::from_secs(10), || {
        (rule_field(&mut ca, "user", "limit")? == "50").then_some(())
    });
    assert!(seen.is_some());
    // History is the key's etcd revisions, on both nodes.
    let history: Vec<(i64, String)> = redis::cmd("RL.RULE")
        .arg(&["HISTORY", "user"])
        .query(&mut ca)
        .unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1].0, v2);
    assert!(history[1].1.contains("FLOOR 2"), "{history:?}");

    // ROLLBACK on a: every node enforces version 1's limit again.
    let v3: i64 = redis::cmd("RL.RULE")
        .arg(&["ROLLBACK", "user"])
        .query(&mut ca)
        .unwrap();
    assert!(v3 > v2);
    for c in [&mut ca, &mut cb] {
        let back = wait_until(Duration::from_secs(10), || {
            (rule_field(c, "user", "limit")? == "5").then_some(())
        });
        assert!(back.is_some());
    }
    // A node started later reads the rules and their history.
    let late = Sluice::start_with(&["--rules-etcd", &url]);
    let mut cl = late.client();
    assert_eq!(rule_field(&mut cl, "user", "limit").as_deref(), Some("5"));
    let history: Vec<(i64, String)> = redis::cmd("RL.RULE")
        .arg(&["HISTORY", "user"])
        .query(&mut cl)
        .unwrap();
    assert_eq!(history.last().map(|h| h.0), Some(v3));
    assert_eq!(history.len(), 3);

    // DEL goes through etcd too.
    let deleted: i64 = redis::cmd("RL.RULE")
        .arg(&["DEL", "user"])
        .query(&mut cl)
        .unwrap();
    assert_eq!(deleted, 1);
    let gone = wait_until(Duration::from_secs(10), || {
        rule_field(&mut ca, "user", "limit").is_none().then_some(())
    });
    assert!(gone.is_some());
}

#[test]
fn hits_in_a_cluster_need_a_hash_tag() {
    use sluice_tests::{cluster_info_field, cluster_node, key_slot, sluice_cluster};
    let dir = TempDir::new("rules-cluster");
    let node = cluster_node(0, &dir.path().join("nodes.conf"), &[]);
    let out = sluice_cluster(&["create", &format!("127.0.0.1:{}", node.port)]);
    assert!(out.status.success(), "{out:?}");
    let ok = wait_until(Duration::from_secs(10), || {
        (cluster_info_field(node.port, "cluster_state")? == "ok").then_some(())
    });
    assert!(ok.is_some());
    let mut c = node.client();
    cmd(&mut c, "RL.RULE SET user LIMIT 5 PERIOD 1m").unwrap();
    cmd(&mut c, "RL.RULE SET ip LIMIT 9 PERIOD 1m").unwrap();
    assert_ne!(key_slot(b"user:s"), key_slot(b"ip:s"));
    let err = cmd(&mut c, "RL.HITS s user ip").unwrap_err();
    assert!(err.to_string().contains("hash to the same slot"), "{err}");
    assert_eq!(ints(&mut c, "RL.HITS {s} user ip")[..3], [1, 5, 4]);
    assert_eq!(ints(&mut c, "RL.HIT user {s} COST 0")[2], 4);
    let err = cmd(&mut c, "RL.HITS KEYS a 5 1m b 5 1m").unwrap_err();
    assert!(err.to_string().contains("hash to the same slot"), "{err}");
}

#[test]
fn a_replica_reads_the_same_rules_file_and_refuses_hits() {
    let dir = TempDir::new("rules-replica");
    let path = dir.path().join("rules.toml");
    std::fs::write(&path, "[user]\nlimit = 4\nperiod = \"1m\"\n").unwrap();
    let rules = path.to_str().unwrap();
    let primary = Sluice::start_with(&["--rules", rules]);
    let replica = Sluice::start_with(&[
        "--rules",
        rules,
        "--replicaof",
        &format!("127.0.0.1:{}", primary.port),
    ]);
    let (mut p, mut r) = (primary.client(), replica.client());
    assert_eq!(ints(&mut p, "RL.HIT user alice")[2], 3);
    assert_eq!(rule_field(&mut r, "user", "limit").as_deref(), Some("4"));
    let err = cmd(&mut r, "RL.HIT user alice").unwrap_err();
    assert!(err.to_string().contains("read only replica"), "{err}");
    // The primary's bucket reaches the replica by replication, as any bucket does.
    let synced = wait_until(Duration::from_secs(10), || {
        let n: i64 = redis::cmd("DBSIZE").query(&mut r).ok()?;
        (n == 1).then_some(())
    });
    assert!(synced.is_some());
}
