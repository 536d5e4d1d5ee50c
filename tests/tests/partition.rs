//! Network partitions with real packet loss: each test re-runs itself under `unshare -n`, in a
//! network namespace of its own whose loopback only it uses, and cuts links there with
//! `iptables` rules (DROP: packets vanish, nothing is refused), then heals them.
//!
//! - `min_replicas_refuse_writes_when_replicas_go_quiet` (no namespace needed): a primary with
//!   `--min-replicas-to-write 1 --min-replicas-max-lag 1` answers `-NOREPLICAS` while its
//!   replica is stopped (SIGSTOP), still answers DRY and COST 0, and shows
//!   `min_slaves_good_slaves`; CONFIG SET/GET change and read both settings.
//! - `partitioned_primary_*`: the primary is cut off from its replicas and the three
//!   Sentinels, but one gateway (source address 127.0.0.9) still reaches it; another client
//!   follows Sentinel. Measured: the time to the new primary, how long the old one kept
//!   granting, and everything allowed on both sides against what one limiter allows. With
//!   `--min-replicas-to-write 1 --min-replicas-max-lag 2` the old primary stops within 3 s and
//!   the total stays within limit × 1.02 + rate × 3 s; without, the leak is printed. Healed,
//!   the old primary becomes a replica and one primary is left.
//! - `partitioned_replica_resyncs_partially`: a replica cut off past its `--repl-timeout`
//!   comes back with `+CONTINUE` (no full sync) and the primary's state.
//! - `sentinel_minority_partitioned_no_failover`: one Sentinel of three cut off (it runs as
//!   another user; its connections are marked and dropped both ways) sees the primary down,
//!   but cannot fail over alone.
//! - `cluster_shard_primary_partitioned_others_unaffected`: one shard's primary cut off; the
//!   other shard answers every check, the slot table follows Sentinel's promotion, the old
//!   primary rejoins as a replica.
//! - `etcd_lost_checks_go_on_rule_changes_wait`: etcd cut off from two `--rules-etcd` nodes.
//! - `save_on_a_full_disk_fails_cleanly_and_the_node_serves_on` (a mount namespace,
//!   `unshare -m`, with a 64 KiB tmpfs): SAVE fails, the last snapshot stays, the node serves.
//!
//! Skipped with a message where `unshare` is not permitted; under `CI=true` that fails.
//! `cargo test -p sluice-tests --test partition -- --nocapture` prints the figures.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_tests::{RedisSentinel, Sluice, have_tool, rl_check, wait_until};

/// Set in the re-run test process: it is inside its own namespace.
const NETNS_ENV: &str = "SLUICE_TEST_IN_NETNS";
const MASTER: &str = "mymaster";
/// The gateway that still reaches a partitioned primary binds its source to this address.
const GATEWAY: [u8; 4] = [127, 0, 0, 9];
/// The checked bucket: 100 a second (burst 100), hammered from both sides.
const LIMIT: u64 = 100;
const PERIOD: &str = "1s";
/// How long the primary stays partitioned.
const PARTITION: Duration = Duration::from_secs(8);

// ---------------------------------------------------------------------------------------
// The namespace and the firewall.

/// Runs `body` in a network namespace of its own: this test binary is run again, for this one
/// test, under `unshare -n`, and the copy inside (which sees [`NETNS_ENV`]) brings its
/// loopback up and runs `body`. Where `unshare -n` is not permitted it says so and returns;
/// with `CI=true` that is a failure.
fn in_netns(test: &str, body: impl FnOnce()) {
    in_namespace("-n", test, || {
        run(&["ip", "link", "set", "lo", "up"]);
        body();
    });
}

/// Runs `body` (in a copy of this test process) under `unshare FLAG`; see [`in_netns`].
fn in_namespace(flag: &str, test: &str, body: impl FnOnce()) {
    if std::env::var_os(NETNS_ENV).is_some() {
        body();
        return;
    }
    if !have_tool("iptables") || !have_tool("unshare") || !have_tool("redis-sentinel") {
        return;
    }
    let permitted = Command::new("unshare")
        .args([flag, "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !permitted {
        assert!(
            std::env::var("CI").is_err(),
            "unshare {flag} is not permitted here: the fault tests need a namespace"
        );
        eprintln!(
            "SKIPPED {test}: unshare {flag} is not permitted here (needs root or CAP_SYS_ADMIN)"
        );
        return;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let status = Command::new("unshare")
        .arg(flag)
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .env(NETNS_ENV, "1")
        .status()
        .expect("run the test under unshare");
    assert!(status.success(), "{test} failed in its namespace");
}

/// Runs a command that must succeed.
fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run a command");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// iptables rules (each the arguments after `-A`/`-D`), added at once and removed at once:
/// a partition, healed on drop.
struct Partition {
    rules: Vec<Vec<String>>,
    healed: bool,
}

impl Partition {
    fn cut(rules: Vec<Vec<String>>) -> Partition {
        for r in &rules {
            let mut args = vec!["iptables", "-A"];
            args.extend(r.iter().map(String::as_str));
            run(&args);
        }
        Partition {
            rules,
            healed: false,
        }
    }

    /// Drops every packet to `port` and from `port`, except to and from `except` if given.
    fn isolate_port(port: u16, except: Option<&str>) -> Partition {
        let p = port.to_string();
        let mut to = vec!["INPUT", "-p", "tcp", "--dport", &p];
        let mut from = vec!["INPUT", "-p", "tcp", "--sport", &p];
        if let Some(addr) = except {
            to.extend(["!", "-s", addr]);
            from.extend(["!", "-d", addr]);
        }
        Partition::cut(vec![rule(&to), rule(&from)])
    }

    fn heal(&mut self) {
        if std::mem::replace(&mut self.healed, true) {
            return;
        }
        for r in &self.rules {
            let mut args = vec!["iptables", "-D"];
            args.extend(r.iter().map(String::as_str));
            run(&args);
        }
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.heal();
        }
    }
}

fn rule(parts: &[&str]) -> Vec<String> {
    let mut r: Vec<String> = parts.iter().map(|s| s.to_string()).collect();
    r.extend(["-j", "DROP"].map(String::from));
    r
}

// ---------------------------------------------------------------------------------------
// A raw RESP client that can choose its source address.

/// A connection from `source` (any port) to 127.0.0.1:`port`, with 300 ms to connect and
/// 500 ms per reply: across a partition, a call fails fast instead of hanging.
fn connect_from(source: [u8; 4], port: u16) -> Option<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    let from = SocketAddr::from((source, 0));
    socket.bind(&from.into()).ok()?;
    let to = SocketAddr::from(([127, 0, 0, 1], port));
    socket
        .connect_timeout(&to.into(), Duration::from_millis(300))
        .ok()?;
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    stream.set_nodelay(true).ok()?;
    Some(stream)
}

/// What one check came back with.
#[derive(Debug, PartialEq)]
enum Answer {
    Allowed,
    Denied,
    /// An error reply (`NOREPLICAS`, `READONLY`, ...): its first word.
    Refused(String),
}

/// `RL.CHECK key LIMIT PERIOD` on `stream`; `None` if the connection failed.
fn check(stream: &mut TcpStream, key: &str) -> Option<Answer> {
    let limit = LIMIT.to_string();
    let args = ["RL.CHECK", key, &limit, PERIOD];
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    stream.write_all(req.as_bytes()).ok()?;
    let mut buf = Vec::with_capacity(128);
    let mut chunk = [0u8; 256];
    loop {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(err) = text.strip_prefix('-') {
            if text.ends_with("\r\n") {
                let word = err.split_whitespace().next().unwrap_or_default();
                return Some(Answer::Refused(word.to_string()));
            }
        } else if text.matches("\r\n").count() == 6 {
            // *5, then five integers: the first is `allowed`.
            let allowed = text.lines().nth(1)?.trim_start_matches(':').trim() == "1";
            return Some(if allowed {
                Answer::Allowed
            } else {
                Answer::Denied
            });
        }
    }
}

// ---------------------------------------------------------------------------------------
// Load: one side of the partition, hammering the checked bucket.

/// What one side saw: the instant of every allowed check, and the refusals by error word.
#[derive(Debug, Default)]
struct Seen {
    allowed: Vec<Instant>,
    denied: u64,
    refused: HashMap<String, u64>,
    failed: u64,
}

/// A client thread checking `key` as fast as a 1 ms pause allows (far above the bucket's
/// 100 a second, so it stays empty), connected where `target` says; bounded in count and
/// time, stopped and joined on drop.
struct Side {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    handle: Option<JoinHandle<()>>,
}

impl Side {
    fn start(
        key: String,
        source: [u8; 4],
        target: impl Fn() -> Option<u16> + Send + 'static,
    ) -> Side {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (s, out) = (stop.clone(), seen.clone());
        let handle = std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(180);
            let mut conn: Option<TcpStream> = None;
            for _ in 0..2_000_000 {
                if s.load(Ordering::Relaxed) || Instant::now() >= end {
                    break;
                }
                let Some(c) = conn.as_mut() else {
                    conn = target().and_then(|port| connect_from(source, port));
                    if conn.is_none() {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    continue;
                };
                let answer = check(c, &key);
                let now = Instant::now();
                let mut seen = out.lock().unwrap();
                match answer {
                    Some(Answer::Allowed) => seen.allowed.push(now),
                    Some(Answer::Denied) => seen.denied += 1,
                    Some(Answer::Refused(word)) => *seen.refused.entry(word).or_default() += 1,
                    None => {
                        seen.failed += 1;
                        conn = None;
                    }
                }
                drop(seen);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Side {
            stop,
            seen,
            handle: Some(handle),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.seen.lock().unwrap())
    }

    /// Allowed checks in `[from, to)`.
    fn allowed_between(&self, from: Instant, to: Instant) -> usize {
        self.with(|s| s.allowed.iter().filter(|&&t| t >= from && t < to).count())
    }

    fn last_allowed(&self) -> Option<Instant> {
        self.with(|s| s.allowed.last().copied())
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------------------
// Nodes and Sentinels.

fn connect(port: u16) -> Option<redis::Connection> {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .ok()?
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    Some(c)
}

fn info(port: u16, section: &str) -> Option<String> {
    redis::cmd("INFO")
        .arg(section)
        .query(&mut connect(port)?)
        .ok()
}

fn field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// `role` and, on a replica, `master_port` and whether its link is up.
fn role(port: u16) -> Option<(String, Option<u16>, bool)> {
    let i = info(port, "replication")?;
    Some((
        field(&i, "role")?,
        field(&i, "master_port").and_then(|p| p.parse().ok()),
        field(&i, "master_link_status").as_deref() == Some("up"),
    ))
}

fn follows(replica: u16, primary: u16) -> bool {
    role(replica).is_some_and(|(r, p, up)| r == "slave" && p == Some(primary) && up)
}

/// Where `sentinel` says the primary is.
fn named_primary(sentinel: u16) -> Option<u16> {
    let addr: Vec<String> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(MASTER)
        .query(&mut connect(sentinel)?)
        .ok()?;
    addr.get(1)?.parse().ok()
}

fn sentinel_list(sentinel: u16, what: &str) -> usize {
    connect(sentinel)
        .and_then(|mut c| {
            redis::cmd("SENTINEL")
                .arg(what)
                .arg(MASTER)
                .query::<Vec<redis::Value>>(&mut c)
                .ok()
        })
        .map_or(0, |v| v.len())
}

/// Three Sentinels (quorum 2, down after 2 s, as in the Sentinel test, which says why not 1 s)
/// watching `primary`, once each knows both
/// replicas and both other Sentinels.
fn start_sentinels(primary: u16) -> Vec<RedisSentinel> {
    let config = format!(
        "sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
         sentinel down-after-milliseconds {MASTER} 2000\n\
         sentinel failover-timeout {MASTER} 10000\n\
         sentinel parallel-syncs {MASTER} 1"
    );
    let sentinels: Vec<RedisSentinel> = (0..3).map(|_| RedisSentinel::start(&config)).collect();
    for s in &sentinels {
        assert!(
            wait_until(Duration::from_secs(30), || {
                (sentinel_list(s.port, "REPLICAS") == 2 && sentinel_list(s.port, "SENTINELS") == 2)
                    .then_some(())
            })
            .is_some(),
            "sentinel {} did not discover the topology; log:\n{}",
            s.port,
            s.log()
        );
    }
    sentinels
}

/// A primary and two replicas, all with `flags`, linked.
fn three_nodes(flags: &[&str]) -> (Sluice, Vec<Sluice>) {
    let mut args = vec!["--threads", "1"];
    args.extend_from_slice(flags);
    let primary = Sluice::start_with(&args);
    let master = format!("127.0.0.1:{}", primary.port);
    let replicas: Vec<Sluice> = (0..2)
        .map(|_| {
            let mut a = args.clone();
            a.extend(["--replicaof", &master]);
            Sluice::start_with(&a)
        })
        .collect();
    for r in &replicas {
        assert!(
            wait_until(Duration::from_secs(20), || follows(r.port, primary.port)
                .then_some(()))
            .is_some(),
            "replica {} did not link; log:\n{}",
            r.port,
            r.log()
        );
    }
    (primary, replicas)
}

// ---------------------------------------------------------------------------------------
// The tests.

#[test]
fn min_replicas_refuse_writes_when_replicas_go_quiet() {
    let flags = [
        "--min-replicas-to-write",
        "1",
        "--min-replicas-max-lag",
        "1",
    ];
    let primary = Sluice::start_with(&flags);
    let mut c = primary.client();
    let noreplicas = "NOREPLICAS Not enough good replicas to write.";

    // No replica yet: every write is refused, reads are answered.
    let err = rl_check(&mut c, &["mr:k", "1000000", "1m"]).unwrap_err();
    assert!(err.to_string().contains("NOREPLICAS"), "{err}");
    let raw = sluice_tests::redis_cli(primary.port, &["SET", "mr:c", "1"]);
    assert_eq!(String::from_utf8_lossy(&raw.stdout).trim(), noreplicas);
    assert_eq!(
        rl_check(&mut c, &["mr:k", "1000000", "1m", "DRY"]).unwrap()[0],
        1
    );
    assert_eq!(
        rl_check(&mut c, &["mr:k", "1000000", "1m", "COST", "0"]).unwrap()[0],
        1
    );
    let i = info(primary.port, "replication").unwrap();
    assert_eq!(
        field(&i, "min_slaves_good_slaves").as_deref(),
        Some("0"),
        "{i}"
    );

    // A replica that acks: writes go through.
    let master = format!("127.0.0.1:{}", primary.port);
    let replica = Sluice::start_with(&["--replicaof", &master]);
    let accepted = wait_until(Duration::from_secs(10), || {
        rl_check(&mut c, &["mr:k", "1000000", "1m"]).ok()
    });
    assert_eq!(accepted.map(|r| r[0]), Some(1));
    let i = info(primary.port, "replication").unwrap();
    assert_eq!(
        field(&i, "min_slaves_good_slaves").as_deref(),
        Some("1"),
        "{i}"
    );

    // The replica stops (SIGSTOP): within the lag and a refresh, writes are refused again.
    replica.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    let refused = wait_until(Duration::from_secs(5), || {
        rl_check(&mut c, &["mr:k", "1000000", "1m"])
            .err()
            .map(|_| stopped.elapsed())
    });
    println!("replica stopped: writes refused after {refused:?} (lag 1 s)");
    assert!(
        refused.is_some(),
        "writes still accepted 5 s after the replica stopped"
    );
    assert_eq!(
        rl_check(&mut c, &["mr:k", "1000000", "1m", "DRY"]).unwrap()[1],
        1_000_000
    );

    // CONFIG: read, refuse a bad value (changing nothing), turn the guard off.
    let get: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("min-replicas-*")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        get,
        ["min-replicas-max-lag", "1", "min-replicas-to-write", "1"]
    );
    let bad: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg("-1")
        .query(&mut c);
    assert!(bad.is_err());
    let slaves: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("min-slaves-to-write")
        .query(&mut c)
        .unwrap();
    assert_eq!(slaves[1], "1");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg("0")
        .query(&mut c)
        .unwrap();
    assert_eq!(rl_check(&mut c, &["mr:k", "1000000", "1m"]).unwrap()[0], 1);
    let i = info(primary.port, "replication").unwrap();
    assert!(field(&i, "min_slaves_good_slaves").is_none(), "{i}");

    // Back on, and the replica resumes: accepted again.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-slaves-to-write")
        .arg("1")
        .query(&mut c)
        .unwrap();
    assert!(rl_check(&mut c, &["mr:k", "1000000", "1m"]).is_err());
    replica.signal(libc::SIGCONT);
    assert!(
        wait_until(Duration::from_secs(10), || rl_check(
            &mut c,
            &["mr:k", "1000000", "1m"]
        )
        .ok())
        .is_some(),
        "writes still refused after the replica resumed"
    );
}

/// The figures of one partition of the primary.
#[derive(Debug)]
struct Figures {
    failover: Duration,
    /// From the cut to the old primary's last grant.
    old_granted_for: Duration,
    allowed_old: usize,
    allowed_new: usize,
    /// What one limiter allows over the partition: the burst plus the refill.
    one_limiter: f64,
}

/// Cuts the primary off from everything but the gateway for [`PARTITION`], with both sides
/// hammering one bucket; heals; checks the old primary becomes a replica and one primary is
/// left. The figures of the partition.
fn partition_primary(flags: &[&str]) -> Figures {
    let (primary, replicas) = three_nodes(flags);
    let sentinels = start_sentinels(primary.port);
    let old = primary.port;
    let sentinel_ports: Vec<u16> = sentinels.iter().map(|s| s.port).collect();
    let key = "part:bucket";
    let mut gateway = Side::start(key.into(), GATEWAY, move || Some(old));
    let follower_sentinels = sentinel_ports.clone();
    let mut majority = Side::start(key.into(), [127, 0, 0, 1], move || {
        follower_sentinels.iter().find_map(|&s| named_primary(s))
    });
    // Both sides check on the primary; the bucket is empty when the cut comes.
    assert!(
        wait_until(Duration::from_secs(10), || {
            (gateway.with(|s| s.denied) > 50 && majority.with(|s| s.denied) > 50).then_some(())
        })
        .is_some(),
        "the load did not start: gateway denied {}, other side denied {}",
        gateway.with(|s| s.denied),
        majority.with(|s| s.denied)
    );

    let gw = std::net::Ipv4Addr::from(GATEWAY).to_string();
    let mut cut = Partition::isolate_port(old, Some(&gw));
    let t0 = Instant::now();
    let new = wait_until(Duration::from_secs(30), || {
        named_primary(sentinel_ports[0]).filter(|&p| p != old)
    })
    .expect("Sentinel did not fail over within 30 s");
    let failover = t0.elapsed();
    assert!(replicas.iter().any(|r| r.port == new), "promoted {new}?");
    if let Some(rest) = PARTITION.checked_sub(t0.elapsed()) {
        std::thread::sleep(rest);
    }
    let t_end = Instant::now();
    let figures = Figures {
        failover,
        old_granted_for: gateway
            .last_allowed()
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(t0)),
        allowed_old: gateway.allowed_between(t0, t_end),
        allowed_new: majority.allowed_between(t0, t_end),
        one_limiter: LIMIT as f64 + LIMIT as f64 * t_end.duration_since(t0).as_secs_f64(),
    };

    cut.heal();
    let healed = Instant::now();
    let rejoined = wait_until(Duration::from_secs(60), || {
        follows(old, new).then(|| healed.elapsed())
    });
    assert!(
        rejoined.is_some(),
        "the old primary did not become a replica of {new}: {:?}",
        role(old)
    );
    let primaries: Vec<u16> = [old, replicas[0].port, replicas[1].port]
        .into_iter()
        .filter(|&p| role(p).is_some_and(|(r, _, _)| r == "master"))
        .collect();
    assert_eq!(primaries, [new], "exactly one primary after the heal");
    // The gateway's next grants come from the new primary's bucket, never the old one's.
    gateway.stop();
    majority.stop();
    println!(
        "healed: the old primary :{old} became a replica of :{new} {:?} after the heal; gateway refusals {:?}",
        rejoined.unwrap(),
        gateway.with(|s| s.refused.clone())
    );
    figures
}

fn report(name: &str, f: &Figures) -> f64 {
    let total = (f.allowed_old + f.allowed_new) as f64;
    println!(
        "{name}: new primary after {:?}; old primary granted for {:?} after the cut; allowed {} (old) + {} (new) = {total} against {:.0} for one limiter over the partition ({:+.0}%)",
        f.failover,
        f.old_granted_for,
        f.allowed_old,
        f.allowed_new,
        f.one_limiter,
        (total / f.one_limiter - 1.0) * 100.0
    );
    total
}

#[test]
fn partitioned_primary_with_min_replicas_stops_granting() {
    in_netns(
        "partitioned_primary_with_min_replicas_stops_granting",
        || {
            let f = partition_primary(&[
                "--min-replicas-to-write",
                "1",
                "--min-replicas-max-lag",
                "2",
            ]);
            let total = report(
                "with --min-replicas-to-write 1 --min-replicas-max-lag 2",
                &f,
            );
            assert!(
                f.old_granted_for <= Duration::from_secs(3),
                "the old primary granted for {:?} after the cut",
                f.old_granted_for
            );
            let bound = f.one_limiter * 1.02 + LIMIT as f64 * 3.0;
            assert!(total <= bound, "allowed {total}, bound {bound}: {f:?}");
        },
    );
}

#[test]
fn partitioned_primary_without_min_replicas_leaks() {
    in_netns("partitioned_primary_without_min_replicas_leaks", || {
        let f = partition_primary(&[]);
        let total = report("without min-replicas", &f);
        // Both sides grant: the old primary for the whole partition.
        assert!(
            f.old_granted_for >= PARTITION - Duration::from_secs(1),
            "the old primary stopped granting on its own? {f:?}"
        );
        assert!(total > f.one_limiter * 1.3, "no leak measured? {f:?}");
    });
}

#[test]
fn partitioned_replica_resyncs_partially() {
    in_netns("partitioned_replica_resyncs_partially", || {
        let primary = Sluice::start_with(&["--threads", "1"]);
        let master = format!("127.0.0.1:{}", primary.port);
        let replica = Sluice::start_with(&[
            "--threads",
            "1",
            "--replicaof",
            &master,
            "--repl-timeout",
            "2",
        ]);
        assert!(
            wait_until(Duration::from_secs(20), || follows(
                replica.port,
                primary.port
            )
            .then_some(()))
            .is_some()
        );
        let mut writer = primary.client();
        let stats = |f: &str| {
            info(primary.port, "stats")
                .and_then(|i| field(&i, f))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap()
        };
        let (full_before, partial_before) = (stats("sync_full"), stats("sync_partial_ok"));
        // The replica's link, by its port on the replica's side, and every new connection
        // to the primary: the replica cannot reconnect; this test's client stays connected.
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("TYPE")
            .arg("replica")
            .query(&mut writer)
            .unwrap();
        let link_port = list
            .split_whitespace()
            .find_map(|w| w.strip_prefix("addr="))
            .and_then(|a| a.rsplit_once(':'))
            .map(|(_, p)| p.to_string())
            .expect("the replica's link in CLIENT LIST");
        let p = primary.port.to_string();
        let mut cut = Partition::cut(vec![
            rule(&["INPUT", "-p", "tcp", "--sport", &link_port]),
            rule(&["INPUT", "-p", "tcp", "--dport", &link_port]),
            rule(&["INPUT", "-p", "tcp", "--dport", &p, "--syn"]),
        ]);
        let down = wait_until(Duration::from_secs(10), || {
            role(replica.port).filter(|r| !r.2).map(|_| ())
        });
        assert!(down.is_some(), "the replica's link did not go down");
        for i in 0..500 {
            let key = format!("resync:{}", i % 50);
            rl_check(&mut writer, &[&key, "1000", "1h"]).unwrap();
        }
        cut.heal();
        let healed = Instant::now();
        let back = wait_until(Duration::from_secs(30), || {
            follows(replica.port, primary.port).then(|| healed.elapsed())
        });
        assert!(
            back.is_some(),
            "the replica did not come back; log:\n{}",
            replica.log()
        );
        let mut r = replica.client();
        let same = wait_until(Duration::from_secs(10), || {
            (0..50)
                .all(|i| {
                    let key = format!("resync:{i}");
                    let dry = [key.as_str(), "1000", "1h", "DRY"];
                    rl_check(&mut r, &dry).ok().map(|v| v[2]) == Some(990)
                })
                .then_some(())
        });
        assert!(
            same.is_some(),
            "the replica missed what the primary did meanwhile"
        );
        println!(
            "replica partitioned past its repl-timeout: back {:?} after the heal, sync_full {} -> {}, sync_partial_ok {} -> {}",
            back.unwrap(),
            full_before,
            stats("sync_full"),
            partial_before,
            stats("sync_partial_ok")
        );
        assert_eq!(stats("sync_full"), full_before, "a full resync");
        assert_eq!(
            stats("sync_partial_ok"),
            partial_before + 1,
            "no partial resync"
        );
    });
}

/// The uid the cut-off Sentinel runs as: iptables' owner match finds its packets by it.
const LONELY_UID: u32 = 65534;

/// A `redis-sentinel` running as [`LONELY_UID`] in a directory of its own, watching `primary`
/// like the others; stopped by its PID on drop.
struct LonelySentinel {
    child: std::process::Child,
    port: u16,
    dir: sluice_tests::TempDir,
}

impl LonelySentinel {
    fn start(primary: u16) -> LonelySentinel {
        use std::os::unix::process::CommandExt;
        let dir = sluice_tests::TempDir::new("lonely-sentinel");
        std::os::unix::fs::chown(dir.path(), Some(LONELY_UID), Some(LONELY_UID))
            .expect("chown the Sentinel's directory");
        let port = sluice_tests::free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {d}\nlogfile {d}/sentinel.log\nloglevel verbose\n\
                 sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 10000\n",
                d = dir.path().display()
            ),
        )
        .expect("write sentinel.conf");
        std::os::unix::fs::chown(&conf, Some(LONELY_UID), Some(LONELY_UID)).expect("chown");
        let child = Command::new("redis-sentinel")
            .arg(&conf)
            .uid(LONELY_UID)
            .gid(LONELY_UID)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn redis-sentinel");
        let s = LonelySentinel { child, port, dir };
        assert!(
            wait_until(Duration::from_secs(10), || connect(port).map(|_| ())).is_some(),
            "the Sentinel running as {LONELY_UID} did not start: {}",
            s.log()
        );
        s
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sentinel.log")).unwrap_or_default()
    }
}

impl Drop for LonelySentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- cut-off redis-sentinel :{} log ---\n{}",
                self.port,
                self.log()
            );
        }
    }
}

#[test]
fn sentinel_minority_partitioned_no_failover() {
    in_netns("sentinel_minority_partitioned_no_failover", || {
        let (primary, _replicas) = three_nodes(&[]);
        let lonely = LonelySentinel::start(primary.port);
        let others: Vec<RedisSentinel> = (0..2)
            .map(|_| {
                RedisSentinel::start(&format!(
                    "sentinel monitor {MASTER} 127.0.0.1 {} 2\n\
                     sentinel down-after-milliseconds {MASTER} 1000\n\
                     sentinel failover-timeout {MASTER} 10000",
                    primary.port
                ))
            })
            .collect();
        let ports: Vec<u16> = others.iter().map(|s| s.port).chain([lonely.port]).collect();
        for &s in &ports {
            assert!(
                wait_until(Duration::from_secs(30), || {
                    (sentinel_list(s, "REPLICAS") == 2 && sentinel_list(s, "SENTINELS") == 2)
                        .then_some(())
                })
                .is_some(),
                "sentinel {s} did not discover the topology"
            );
        }
        let p = primary.port;
        let mut client = Side::start("minority:bucket".into(), [127, 0, 0, 1], move || Some(p));
        // Every connection the Sentinel's uid sends on is marked, then every packet of a
        // marked connection, either way, is dropped.
        let uid = LONELY_UID.to_string();
        let mut cut = Partition::cut(vec![
            vec![
                "OUTPUT",
                "-m",
                "owner",
                "--uid-owner",
                &uid,
                "-j",
                "CONNMARK",
                "--set-mark",
                "7",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
            rule(&["OUTPUT", "-m", "connmark", "--mark", "7"]),
            rule(&["INPUT", "-m", "connmark", "--mark", "7"]),
        ]);
        let t0 = Instant::now();
        let sdown = format!("+sdown master {MASTER} 127.0.0.1 {}", primary.port);
        assert!(
            wait_until(Duration::from_secs(10), || lonely
                .log()
                .contains(&sdown)
                .then_some(()))
            .is_some(),
            "the cut-off Sentinel never saw the primary down: the partition did not hold"
        );
        // Long past down-after: time enough to fail over, were a minority able to.
        std::thread::sleep(Duration::from_secs(4));
        let during = t0.elapsed();
        cut.heal();
        let back = format!("-sdown master {MASTER} 127.0.0.1 {}", primary.port);
        assert!(
            wait_until(Duration::from_secs(20), || lonely
                .log()
                .contains(&back)
                .then_some(()))
            .is_some(),
            "the cut-off Sentinel did not see the primary again after the heal"
        );
        client.stop();
        let logs = others.iter().map(RedisSentinel::log).chain([lonely.log()]);
        for (log, &s) in logs.zip(&ports) {
            assert!(
                !log.contains("+switch-master") && !log.contains("+odown"),
                "sentinel {s}: a failover from a minority:\n{log}"
            );
            assert_eq!(named_primary(s), Some(primary.port));
        }
        assert_eq!(role(primary.port).map(|r| r.0).as_deref(), Some("master"));
        println!(
            "one Sentinel of three cut off for {during:?}: it saw the primary down, no failover; {} checks answered, {} failed",
            client.with(|s| s.allowed.len() as u64 + s.denied),
            client.with(|s| s.failed)
        );
        assert_eq!(client.with(|s| s.failed), 0);
    });
}

/// Where `sentinel` says the primary `name` is.
fn named(sentinel: u16, name: &str) -> Option<u16> {
    let addr: Vec<String> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(name)
        .query(&mut connect(sentinel)?)
        .ok()?;
    addr.get(1)?.parse().ok()
}

/// A key whose slot `slots` gives to `owner`.
fn key_on(slots: &[sluice_tests::SlotsEntry], owner: u16, prefix: &str) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}:{i}"))
        .find(|k| {
            sluice_tests::owner_of(slots, sluice_tests::key_slot(k.as_bytes())) == Some(owner)
        })
        .expect("a key on the shard")
}

#[test]
fn cluster_shard_primary_partitioned_others_unaffected() {
    in_netns(
        "cluster_shard_primary_partitioned_others_unaffected",
        || {
            let dir = sluice_tests::TempDir::new("cluster-partition");
            let nodes = sluice_tests::two_shard_cluster(&dir, &[], &[]);
            // Nodes 0 and 1 are the primaries, node 2 replicates node 0 and node 3 node 1.
            let (p0, p1, r0) = (nodes[0].port, nodes[1].port, nodes[2].port);
            let slots = sluice_tests::cluster_slots(p1).expect("CLUSTER SLOTS");
            let other_key = key_on(&slots, p1, "other");
            let cut_slot = sluice_tests::key_slot(key_on(&slots, p0, "cut").as_bytes());
            let config = ["shard0", "shard1"]
                .iter()
                .zip([p0, p1])
                .map(|(name, port)| {
                    format!(
                        "sentinel monitor {name} 127.0.0.1 {port} 2\n\
                     sentinel down-after-milliseconds {name} 2000\n\
                     sentinel failover-timeout {name} 10000\n"
                    )
                })
                .collect::<String>();
            let sentinels: Vec<RedisSentinel> =
                (0..3).map(|_| RedisSentinel::start(&config)).collect();
            for s in &sentinels {
                let known = wait_until(Duration::from_secs(30), || {
                    let c = |what: &str, name: &str| -> usize {
                        connect(s.port)
                            .and_then(|mut c| {
                                redis::cmd("SENTINEL")
                                    .arg(what)
                                    .arg(name)
                                    .query::<Vec<redis::Value>>(&mut c)
                                    .ok()
                            })
                            .map_or(0, |v| v.len())
                    };
                    (["shard0", "shard1"]
                        .iter()
                        .all(|n| c("REPLICAS", n) == 1 && c("SENTINELS", n) == 2))
                    .then_some(())
                });
                assert!(
                    known.is_some(),
                    "sentinel {} did not discover the topology",
                    s.port
                );
            }
            // A client of the other shard, straight to its primary, all through.
            let mut other = Side::start(other_key, [127, 0, 0, 1], move || Some(p1));
            assert!(
                wait_until(Duration::from_secs(10), || (other.with(|s| s.denied) > 20)
                    .then_some(()))
                .is_some()
            );

            let mut cut = Partition::isolate_port(p0, None);
            let t0 = Instant::now();
            let promoted = wait_until(Duration::from_secs(30), || {
                named(sentinels[0].port, "shard0").filter(|&p| p == r0)
            });
            assert!(
                promoted.is_some(),
                "Sentinel did not promote shard 0's replica"
            );
            let failover = t0.elapsed();
            let moved = wait_until(Duration::from_secs(15), || {
                sluice_tests::cluster_slots(p1)
                    .filter(|s| sluice_tests::owner_of(s, cut_slot) == Some(r0))
                    .map(|_| t0.elapsed())
            });
            assert!(
                moved.is_some(),
                "shard 1 never saw shard 0's new primary: {:?}",
                sluice_tests::cluster_slots(p1)
            );
            // The rest of the partition: shard 1 keeps answering.
            if let Some(rest) = PARTITION.checked_sub(t0.elapsed()) {
                std::thread::sleep(rest);
            }
            cut.heal();
            let healed = Instant::now();
            let rejoined = wait_until(Duration::from_secs(60), || {
                follows(p0, r0).then(|| healed.elapsed())
            });
            assert!(
                rejoined.is_some(),
                "shard 0's old primary did not become a replica: {:?}",
                role(p0)
            );
            other.stop();
            let owners: Vec<u16> = [p0, p1, r0, nodes[3].port]
                .into_iter()
                .filter_map(sluice_tests::cluster_slots)
                .map(|s| sluice_tests::owner_of(&s, cut_slot).unwrap_or(0))
                .collect();
            assert!(
                owners.iter().all(|&o| o == r0),
                "owners of shard 0's slot after the heal: {owners:?}"
            );
            let (answered, failed, refused) = other.with(|s| {
                (
                    s.allowed.len() as u64 + s.denied,
                    s.failed,
                    s.refused.clone(),
                )
            });
            println!(
                "cluster: shard 0's primary cut off; Sentinel promoted its replica {failover:?} after the cut, shard 1 saw the new owner after {:?}; the old primary rejoined as a replica {:?} after the heal; shard 1 answered {answered} checks with {failed} failures and refusals {refused:?}",
                moved.unwrap(),
                rejoined.unwrap()
            );
            assert_eq!((failed, refused.len()), (0, 0), "shard 1 was affected");
        },
    );
}

/// SAVE on a full disk: the snapshot directory is a 64 KiB tmpfs, mounted in a mount
/// namespace of the test's own (`unshare -m`).
#[test]
fn save_on_a_full_disk_fails_cleanly_and_the_node_serves_on() {
    in_namespace(
        "-m",
        "save_on_a_full_disk_fails_cleanly_and_the_node_serves_on",
        || {
            let dir = sluice_tests::TempDir::new("disk-full");
            let d = dir.path().to_str().unwrap().to_string();
            run(&["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", &d]);
            let node = Sluice::start_with(&["--dir", &d, "--save-interval", "0"]);
            let mut c = node.client();
            rl_check(&mut c, &["disk:first", "10", "1h"]).unwrap();
            let _: String = redis::cmd("SAVE").query(&mut c).unwrap();
            let snap = dir.path().join("sluice.snap");
            let good = std::fs::read(&snap).expect("the first snapshot");
            // Far more buckets than 64 KiB holds.
            let mut pipe = redis::pipe();
            for i in 0..20_000 {
                pipe.cmd("RL.CHECK")
                    .arg(format!("disk:{i}"))
                    .arg(10)
                    .arg("1h")
                    .ignore();
            }
            let _: () = pipe.query(&mut c).unwrap();
            let failed: redis::RedisResult<String> = redis::cmd("SAVE").query(&mut c);
            let err = failed.expect_err("SAVE succeeded on a full disk");
            println!("SAVE on a full 64 KiB tmpfs: {err}");
            assert_eq!(
                std::fs::read(&snap).unwrap(),
                good,
                "the last good snapshot was changed"
            );
            let names: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(names, ["sluice.snap"], "a temporary file was left behind");
            let status =
                info(node.port, "persistence").and_then(|i| field(&i, "rdb_last_bgsave_status"));
            assert_eq!(status.as_deref(), Some("err"));
            // The node serves on, writes included.
            assert_eq!(rl_check(&mut c, &["disk:after", "10", "1h"]).unwrap()[0], 1);
            assert_eq!(rl_check(&mut c, &["disk:1", "10", "1h"]).unwrap()[2], 8);
            drop(node);
            run(&["umount", &d]);
        },
    );
}

/// `RL.RULE GET name`'s `version`.
fn rule_version(c: &mut redis::Connection, name: &str) -> Option<i64> {
    let v: redis::Value = redis::cmd("RL.RULE").arg("GET").arg(name).query(c).ok()?;
    let redis::Value::Array(items) = v else {
        return None;
    };
    let at = items
        .iter()
        .position(|i| matches!(i, redis::Value::BulkString(b) if b == b"version"))?;
    redis::from_redis_value(items[at + 1].clone()).ok()
}

#[test]
fn etcd_lost_checks_go_on_rule_changes_wait() {
    in_netns("etcd_lost_checks_go_on_rule_changes_wait", || {
        let etcd = sluice_tests::Etcd::start();
        let url = etcd.url();
        let nodes = [
            Sluice::start_with(&["--rules-etcd", &url]),
            Sluice::start_with(&["--rules-etcd", &url]),
        ];
        let mut a = nodes[0].client();
        let mut b = nodes[1].client();
        for c in [&mut a, &mut b] {
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        }
        let v1: i64 = redis::cmd("RL.RULE")
            .arg(&["SET", "api", "LIMIT", "1000", "PERIOD", "1s"])
            .query(&mut a)
            .unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || (rule_version(&mut b, "api")?
                == v1)
                .then_some(()))
            .is_some()
        );

        let mut cut = Partition::isolate_port(etcd.port, None);
        let t0 = Instant::now();
        // Checks against the rule go on, on both nodes, for the whole cut.
        let mut answered = 0;
        while t0.elapsed() < Duration::from_secs(4) {
            for c in [&mut a, &mut b] {
                let r: Vec<i64> = redis::cmd("RL.HIT").arg("api").arg("u1").query(c).unwrap();
                assert_eq!(r.len(), 5);
                answered += 1;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // A rule change cannot be written: an error, not a change on one node only.
        let asked = Instant::now();
        let change: redis::RedisResult<i64> = redis::cmd("RL.RULE")
            .arg(&["SET", "api", "LIMIT", "10", "PERIOD", "1s"])
            .query(&mut a);
        let refused_after = asked.elapsed();
        assert!(
            change.is_err(),
            "RL.RULE SET succeeded without etcd: {change:?}"
        );
        assert_eq!(rule_version(&mut a, "api"), Some(v1));
        cut.heal();
        let healed = Instant::now();
        let v2 = wait_until(Duration::from_secs(30), || {
            redis::cmd("RL.RULE")
                .arg(&["SET", "api", "LIMIT", "10", "PERIOD", "1s"])
                .query::<i64>(&mut a)
                .ok()
        })
        .expect("RL.RULE SET still failing after the heal");
        let seen = wait_until(Duration::from_secs(30), || {
            (rule_version(&mut b, "api")? == v2).then(|| healed.elapsed())
        });
        assert!(
            seen.is_some(),
            "the other node did not see the change after the heal"
        );
        println!(
            "etcd cut off: {answered} rule checks answered on two nodes in 4 s, RL.RULE SET refused after {refused_after:?} ({}), written and seen by the other node {:?} after the heal",
            change.unwrap_err(),
            seen.unwrap()
        );
    });
}
