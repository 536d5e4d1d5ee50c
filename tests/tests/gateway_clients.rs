//! The sidecar as real clients see it: redis-py 8, ioredis and redis-rs, each in its default
//! settings (redis-py 8 opens with `HELLO 3`), running RL.CHECK and a pipeline through
//! `sluice proxy`; a burst on one key; named rules with the node killed; a replica that answers
//! READONLY; a second sidecar on a taken port.
//!
//! Python and Node come with their clients from `scripts/test.sh` (`pip install 'redis>=8'`,
//! `npm install` in tests/js). Under `CI=true` a missing one fails the test.

use std::process::Command;
use std::time::{Duration, Instant};

use sluice_tests::{Sluice, TempDir, have_command, info_field, repo_path, run_client, wait_until};

fn sidecar() -> (Sluice, Sluice) {
    let node = Sluice::start();
    let proxy = Sluice::start_proxy(&["--upstream", &format!("127.0.0.1:{}", node.port)]);
    (node, proxy)
}

#[test]
fn redis_py_8_in_its_default_settings_speaks_resp3_through_the_sidecar() {
    let import = "import redis, sys; sys.exit(int(redis.__version__.split('.')[0]) < 8)";
    if !have_command("python3 with redis-py 8", "python3", &["-c", import]) {
        return;
    }
    let (_node, proxy) = sidecar();
    let script = repo_path("py/sidecar_client.py");
    let out = run_client(
        "python3",
        &[script.to_str().unwrap(), &proxy.port.to_string()],
    );
    eprintln!("redis-py: {out}");
    assert!(out.contains(r#""pong": true"#), "{out}");
    assert!(out.contains(r#""one": [1, 5, 4, -1"#), "{out}");
    // The transactional pipeline (redis-py's default: MULTI ... EXEC) and a plain one.
    assert!(
        out.contains(r#""multi": [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]"#),
        "{out}"
    );
    assert!(
        out.contains(r#""pipe": [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]"#),
        "{out}"
    );
    assert!(
        out.contains("resp=3"),
        "redis-py 8 switched to RESP3: {out}"
    );
}

#[test]
fn ioredis_in_its_default_settings_runs_checks_and_a_pipeline_through_the_sidecar() {
    let modules = repo_path("js/node_modules/ioredis");
    let installed = modules.exists();
    if !have_command("node", "node", &["--version"]) || !installed {
        assert!(
            installed || std::env::var("CI").is_err(),
            "ioredis is not installed in tests/js (scripts/test.sh runs npm install there)"
        );
        return;
    }
    let (_node, proxy) = sidecar();
    let script = repo_path("js/sidecar_client.js");
    let out = run_client("node", &[script.to_str().unwrap(), &proxy.port.to_string()]);
    eprintln!("ioredis: {out}");
    assert!(out.contains(r#""pong":"PONG""#), "{out}");
    assert!(out.contains(r#""one":[1,5,4,-1"#), "{out}");
    assert!(out.contains(r#""allowed":[1,1,1,1,1,0,0,0,0,0]"#), "{out}");
}

#[test]
fn redis_rs_in_its_default_settings_and_in_resp3_runs_checks_and_a_pipeline() {
    let (_node, proxy) = sidecar();
    for (name, mut c) in [("default", proxy.client()), ("resp3", proxy.resp3())] {
        let r: Vec<i64> = redis::cmd("RL.CHECK")
            .arg(&[&format!("rs:{name}"), "5", "1h"])
            .query(&mut c)
            .unwrap();
        assert_eq!(&r[..4], &[1, 5, 4, -1], "{name}");
        let mut pipe = redis::pipe();
        for _ in 0..10 {
            pipe.cmd("RL.CHECK")
                .arg(&[&format!("rs:pipe:{name}"), "5", "1h"]);
        }
        let rs: Vec<Vec<i64>> = pipe.query(&mut c).unwrap();
        let allowed: Vec<i64> = rs.iter().map(|r| r[0]).collect();
        assert_eq!(allowed, [1, 1, 1, 1, 1, 0, 0, 0, 0, 0], "{name}");
        let mut tx = redis::pipe();
        tx.atomic();
        for _ in 0..3 {
            tx.cmd("RL.CHECK")
                .arg(&[&format!("rs:tx:{name}"), "2", "1h"]);
        }
        let rs: Vec<Vec<i64>> = tx.query(&mut c).unwrap();
        assert_eq!(rs.iter().map(|r| r[0]).collect::<Vec<_>>(), [1, 1, 0]);
        let e = redis::cmd("EXEC")
            .query::<redis::Value>(&mut c)
            .unwrap_err();
        assert!(e.to_string().contains("EXEC without MULTI"), "{e}");
        // RESET inside MULTI leaves the transaction: the queued check never runs.
        let _: () = redis::cmd("MULTI").query(&mut c).unwrap();
        let q: String = redis::cmd("RL.CHECK")
            .arg(&[&format!("rs:reset:{name}"), "1", "1h"])
            .query(&mut c)
            .unwrap();
        assert_eq!(q, "QUEUED");
        let r: String = redis::cmd("RESET").query(&mut c).unwrap();
        assert_eq!(r, "RESET");
        let r: Vec<i64> = redis::cmd("RL.CHECK")
            .arg(&[&format!("rs:reset:{name}"), "1", "1h"])
            .query(&mut c)
            .unwrap();
        assert_eq!(r[0], 1, "the queued check did not run");
        // RESP3 types where a node uses them: INFO is a verbatim string, a null is a null.
        let info: String = redis::cmd("INFO").query(&mut c).unwrap();
        assert!(info.contains("checks_allowed:"), "{name}: {info}");
        let none: Option<String> = redis::cmd("CLIENT").arg("GETNAME").query(&mut c).unwrap();
        assert_eq!(none, None);
    }
}

#[test]
fn hello_with_auth_and_requirepass() {
    let node = Sluice::start();
    let proxy = Sluice::start_proxy(&[
        "--upstream",
        &format!("127.0.0.1:{}", node.port),
        "--requirepass",
        "s3cret",
    ]);
    let mut c = redis::Client::open(proxy.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let e = redis::cmd("RL.CHECK")
        .arg(&["k", "5", "1h"])
        .query::<Vec<i64>>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("NOAUTH"), "{e}");
    // redis-rs with a password and RESP3 sends HELLO 3 AUTH default s3cret.
    let url = format!(
        "redis://default:s3cret@127.0.0.1:{}/?protocol=resp3",
        proxy.port
    );
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let r: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&["k", "5", "1h"])
        .query(&mut c)
        .unwrap();
    assert_eq!(r[0], 1);
    let bad = format!(
        "redis://default:nope@127.0.0.1:{}/?protocol=resp3",
        proxy.port
    );
    let Err(e) = redis::Client::open(bad).unwrap().get_connection() else {
        panic!("a wrong password connected");
    };
    assert!(e.to_string().contains("WRONGPASS"), "{e}");
}

/// 2,000 checks on one key from 20 connections at once: the blocked cache answers most of the
/// denials, so at most 10% reach the node, and exactly the limit is allowed.
#[test]
fn a_burst_on_one_key_sends_at_most_10_percent_to_the_node_and_allows_exactly_the_limit() {
    let (node, proxy) = sidecar();
    let before = info_field(node.port, "total_commands_processed").unwrap();
    let start = std::sync::Arc::new(std::sync::Barrier::new(20));
    let threads: Vec<_> = (0..20)
        .map(|_| {
            let mut c = proxy.client();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let mut allowed = 0;
                for _ in 0..100 {
                    let r: Vec<i64> = redis::cmd("RL.CHECK")
                        .arg(&["burst", "100", "1h"])
                        .query(&mut c)
                        .unwrap();
                    allowed += r[0];
                }
                allowed
            })
        })
        .collect();
    let allowed: i64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    // Minus this INFO and the rule book's refreshes (RL.RULE LIST, one a second).
    let reached = info_field(node.port, "total_commands_processed").unwrap() - before - 1;
    eprintln!("burst: 2000 checks, {allowed} allowed, {reached} reached the node");
    assert_eq!(allowed, 100);
    assert!(reached <= 200, "{reached} of 2000 checks reached the node");
}

#[test]
fn rl_hit_and_rl_hits_go_through_and_each_rule_fail_mode_applies_when_the_node_is_killed() {
    let dir = TempDir::new("gw-rules");
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[open]\nlimit = 3\nperiod = \"1h\"\nfailmode = \"open\"\n\n\
         [closed]\nlimit = 3\nperiod = \"1h\"\nfailmode = \"closed\"\n\n\
         [local]\nlimit = 8\nperiod = \"1h\"\nfailmode = \"local\"\n",
    )
    .unwrap();
    let mut node = Sluice::start_with(&["--rules", rules.to_str().unwrap()]);
    let proxy = Sluice::start_proxy(&[
        "--upstream",
        &format!("127.0.0.1:{}", node.port),
        "--gateways",
        "2",
    ]);
    let mut c = proxy.client();
    // Through the sidecar, answered by the node.
    let hit = |c: &mut redis::Connection, rule: &str, subject: &str| -> Vec<i64> {
        redis::cmd("RL.HIT").arg(&[rule, subject]).query(c).unwrap()
    };
    assert_eq!(&hit(&mut c, "open", "u1")[..3], &[1, 3, 2]);
    let hits: (i64, i64, i64, i64, i64, String) = redis::cmd("RL.HITS")
        .arg(&["u1", "open", "closed"])
        .query(&mut c)
        .unwrap();
    assert_eq!((hits.0, hits.2), (1, 1), "{hits:?}");
    let names: Vec<String> = redis::cmd("RL.RULE").arg("LIST").query(&mut c).unwrap();
    assert_eq!(names, ["closed", "local", "open"]);
    let rule: Vec<redis::Value> = redis::cmd("RL.RULE")
        .arg(&["GET", "closed"])
        .query(&mut c)
        .unwrap();
    assert!(rule.len() >= 26, "{rule:?}");
    // The sidecar has learned the rules (INFO rules_known), then the node dies.
    wait_until(Duration::from_secs(10), || {
        (info_field(proxy.port, "rules_known") == Some(3)).then_some(())
    })
    .expect("the sidecar learned the rules");
    node.signal(libc::SIGKILL);
    assert!(node.wait_exit(Duration::from_secs(5)).is_some());
    let t = Instant::now();
    assert_eq!(hit(&mut c, "open", "u2")[0], 1, "fail open");
    assert_eq!(hit(&mut c, "closed", "u2")[0], 0, "fail closed");
    let local: i64 = (0..10).map(|_| hit(&mut c, "local", "u2")[0]).sum();
    assert_eq!(local, 4, "fail local: 8 ÷ 2 gateways");
    let hits: (i64, i64, i64, i64, i64, String) = redis::cmd("RL.HITS")
        .arg(&["u3", "open", "closed"])
        .query(&mut c)
        .unwrap();
    assert_eq!((hits.0, hits.5.as_str()), (0, "closed"), "{hits:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let e = redis::cmd("RL.HIT")
        .arg(&["nosuchrule", "u"])
        .query::<Vec<i64>>(&mut c)
        .unwrap_err();
    assert!(e.to_string().to_uppercase().contains("TRYAGAIN"), "{e}");
}

#[test]
fn a_replica_answering_readonly_gets_the_fail_mode_and_wrongtype_passes_through() {
    let primary = Sluice::start();
    let to = format!("127.0.0.1:{}", primary.port);
    let replica = Sluice::start_with(&["--replicaof", &to]);
    wait_until(Duration::from_secs(10), || {
        let mut c = replica.client();
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut c).ok()?;
        let r = redis::cmd("RL.CHECK")
            .arg(&["probe", "5", "1h"])
            .query::<Vec<i64>>(&mut c);
        (role.len() > 1 && r.is_err_and(|e| e.to_string().to_uppercase().contains("READONLY")))
            .then_some(())
    })
    .expect("the replica answers READONLY");
    let proxy = Sluice::start_proxy(&["--upstream", &format!("127.0.0.1:{}", replica.port)]);
    let mut c = proxy.client();
    for (mode, allowed) in [("open", 1), ("closed", 0)] {
        let r: Vec<i64> = redis::cmd("RL.CHECK")
            .arg(&["k", "5", "1h", "FAILMODE", mode])
            .query(&mut c)
            .unwrap();
        assert_eq!(r[0], allowed, "{mode}: {r:?}");
    }
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    assert!(info.contains("decisions_fail_closed:1"), "{info}");

    // Straight to a primary: WRONGTYPE and a syntax error are errors, never a fail mode.
    let proxy = Sluice::start_proxy(&["--upstream", &format!("127.0.0.1:{}", primary.port)]);
    let mut c = proxy.client();
    let _: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&["typed", "5", "1h"])
        .query(&mut c)
        .unwrap();
    let e = redis::cmd("RL.CHECK")
        .arg(&["typed", "5", "1h", "ALGO", "SLIDING", "FAILMODE", "open"])
        .query::<Vec<i64>>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("WRONGTYPE"), "{e}");
    let e = redis::cmd("CL.THROTTLE")
        .arg(&["t", "x"])
        .query::<Vec<i64>>(&mut c)
        .unwrap_err();
    assert!(!e.to_string().contains("TRYAGAIN"), "{e}");

    // The library gives the same answers.
    let rt = sluice_tests::runtime();
    rt.block_on(async {
        use sluice_client::{Client, Config, FailMode, Limit, Source, Topology};
        let to = |port: u16| Config::new(Topology::Single(format!("127.0.0.1:{port}")));
        let client = Client::connect(to(replica.port)).await;
        let limit = Limit::new(5, Duration::from_secs(3600)).fail_mode(FailMode::Closed);
        let d = client.check(b"k", &limit, 1).await.unwrap();
        assert_eq!(d.source, Source::FailClosed);
        let client = Client::connect(to(primary.port)).await;
        let sliding = Limit::new(5, Duration::from_secs(3600)).algo(sluice_client::Algo::Sliding);
        let e = client.check(b"typed", &sliding, 1).await.unwrap_err();
        assert!(e.0.starts_with("WRONGTYPE"), "{e}");
    });
}

#[test]
fn a_second_sidecar_on_a_taken_port_exits_and_the_first_keeps_serving() {
    let (_node, first) = sidecar();
    let upstream = format!("127.0.0.1:{}", _node.port);
    let out = Command::new("timeout")
        .arg("30")
        .arg(sluice_tests::binary())
        .args([
            "proxy",
            "--bind",
            "127.0.0.1",
            "--port",
            &first.port.to_string(),
        ])
        .args(["--upstream", &upstream])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        out.status.code().is_some_and(|c| c != 124),
        "it exited, not timed out"
    );
    assert!(stderr.contains("Address already in use"), "{stderr}");
    assert!(stderr.contains(&first.port.to_string()), "{stderr}");
    // The first takes every connection, and counts alone.
    for i in 0..20 {
        let mut c = first.client();
        let r: Vec<i64> = redis::cmd("RL.CHECK")
            .arg(&["alone", "5", "1h"])
            .query(&mut c)
            .unwrap();
        assert_eq!(r[0], i64::from(i < 5), "check {i}: {r:?}");
    }
}

/// `SENTINEL FAILOVER`: the old primary becomes a replica (answering READONLY, which the
/// library takes as "cannot answer": the fail mode, never an error) and the library, asking
/// Sentinel again, sends its checks to the new primary. (Whether a check meets the READONLY
/// window depends on timing; the replica test above meets it for certain.)
#[test]
fn after_a_sentinel_failover_checks_reach_the_new_primary_without_an_error() {
    use sluice_client::{Client, Config, FailMode, Limit, Source, Topology};
    use sluice_tests::{RedisSentinel, have_tool};
    if !have_tool("redis-sentinel") {
        return;
    }
    let primary = Sluice::start();
    let replica = Sluice::start_with(&["--replicaof", &format!("127.0.0.1:{}", primary.port)]);
    let sentinel = RedisSentinel::start(&format!(
        "sentinel monitor gw 127.0.0.1 {} 1\nsentinel down-after-milliseconds gw 5000\nsentinel failover-timeout gw 10000",
        primary.port
    ));
    wait_until(Duration::from_secs(20), || {
        let mut c = sentinel.client();
        let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
            .arg(&["REPLICAS", "gw"])
            .query(&mut c)
            .ok()?;
        (!replicas.is_empty()).then_some(())
    })
    .expect("Sentinel discovered the replica");
    let rt = sluice_tests::runtime();
    let (old, new) = (
        format!("127.0.0.1:{}", primary.port),
        format!("127.0.0.1:{}", replica.port),
    );
    rt.block_on(async {
        let client = Client::connect(Config::new(Topology::Sentinel {
            sentinels: vec![format!("127.0.0.1:{}", sentinel.port)],
            master_name: "gw".into(),
        }))
        .await;
        let limit = Limit::new(1_000_000, Duration::from_secs(3600)).fail_mode(FailMode::Closed);
        let d = client.check(b"k", &limit, 1).await.unwrap();
        assert_eq!(d.source, Source::Node(old.as_str().into()));
        // Sentinel promotes a replica only once it has its INFO (NOGOODSLAVE until then).
        let port = sentinel.port;
        tokio::task::spawn_blocking(move || {
            wait_until(Duration::from_secs(30), || {
                let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                    .ok()?
                    .get_connection()
                    .ok()?;
                let r: redis::RedisResult<String> = redis::cmd("SENTINEL")
                    .arg(&["FAILOVER", "gw"])
                    .query(&mut c);
                r.ok().filter(|ok| ok == "OK")
            })
        })
        .await
        .unwrap()
        .expect("SENTINEL FAILOVER accepted");
        let started = Instant::now();
        let mut seen = Vec::new();
        loop {
            // Never an error: READONLY from the old primary is the fail mode.
            let d = client.check(b"k", &limit, 1).await.unwrap();
            if seen.last() != Some(&d.source) {
                seen.push(d.source.clone());
            }
            if d.source == Source::Node(new.as_str().into()) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no check reached the new primary: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        eprintln!("after SENTINEL FAILOVER, decisions by source in order: {seen:?}");
    });
}
