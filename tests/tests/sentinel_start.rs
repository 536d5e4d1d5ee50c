//! A primary killed -9 and restarted from an older snapshot does not serve that snapshot as a
//! primary when it starts with `--sentinel` (issue 37, item 6).
//!
//! The topology: a primary P with `--dir` (saved by `SAVE` only), a replica R, and a real
//! `redis-sentinel` (quorum 1, `down-after-milliseconds 2000`, `failover-timeout 10000`). A
//! bucket of 10 per hour gets 4 checks before P's `SAVE` and 6 after, `WAIT 1`: the snapshot
//! says 6 remain, R holds the truth, 0. Then kill -9 of P, and:
//!
//! - **after the failover**, P restarted with `--sentinel`: its first `ROLE` is a replica of R,
//!   it admits no check, and the bucket stays spent on R: 10 allowed in all.
//! - **right away** (as the old unit's `RestartSec=1`, before `down-after-milliseconds`),
//!   with `--sentinel`: P waits unreachable until Sentinel promotes R, then starts as its
//!   replica: 10 allowed in all.
//! - **right away without `--sentinel`** (what the shipped unit and config did): Sentinel sees
//!   P back before it counts it down, nothing fails over, and P serves its snapshot as the
//!   primary: 6 allowed again, 16 in all against a limit of 10. This is the figure before the
//!   fix; the test asserts the overshoot, so it notices if the scenario stops reproducing it.
//! - **right away, with a Sentinel that cannot fail over** (quorum 2 of one): P waits the
//!   Sentinel's `down-after-milliseconds` + `failover-timeout` (12 s), then serves as the
//!   primary with a warning.
//! - **after a graceful stop (SIGTERM), right away, with `--sentinel`**: R holds nothing past
//!   P's last snapshot, so P serves as the primary at once, grants nothing again, and nothing
//!   fails over.
//! - **with no Sentinel answering**: a node starts as configured, with a warning.
//!
//! Every process is stopped by its PID (the harness's guards); every wait is bounded.

use std::time::{Duration, Instant};

use sluice_tests::{RedisSentinel, Sluice, TempDir, free_port, have_tool, rl_check, wait_until};

const MASTER: &str = "mymaster";
const KEY: &str = "sentinel-start:bucket";
const LIMIT: i64 = 10;
const BEFORE_SAVE: i64 = 4;

/// P, R and the Sentinel, with the bucket spent as the module says.
struct Topology {
    primary: Sluice,
    replica: Sluice,
    sentinel: RedisSentinel,
    dir: TempDir,
    /// Checks allowed so far, over every node.
    allowed: i64,
}

/// The primary's port the Sentinel names.
fn named_port(sentinel: &RedisSentinel) -> Option<u16> {
    let mut c = sentinel.client();
    let addr: Vec<String> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(MASTER)
        .query(&mut c)
        .ok()?;
    addr.get(1)?.parse().ok()
}

/// Checks `KEY` `n` times on `node`; how many were allowed (an error reply allows none).
fn spend(node: &Sluice, n: i64) -> i64 {
    let mut c = node.client();
    let limit = LIMIT.to_string();
    (0..n)
        .map(|_| rl_check(&mut c, &[KEY, &limit, "1h"]).map_or(0, |r| r[0]))
        .sum()
}

/// What `node` says remains of `KEY`, without taking from it.
fn remaining(node: &Sluice) -> Option<i64> {
    let mut c = node.client();
    let limit = LIMIT.to_string();
    rl_check(&mut c, &[KEY, &limit, "1h", "DRY"])
        .ok()
        .map(|r| r[2])
}

fn up() -> Topology {
    up_with_quorum(1)
}

/// [`up`] with the Sentinel's quorum: 2, with one Sentinel, never fails over.
fn up_with_quorum(quorum: u32) -> Topology {
    let dir = TempDir::new("sentinel-start");
    let dir_arg = dir.path().to_str().unwrap().to_string();
    let primary =
        Sluice::start_with(&["--threads", "1", "--dir", &dir_arg, "--save-interval", "0"]);
    let replica = Sluice::start_with(&[
        "--threads",
        "1",
        "--replicaof",
        &format!("127.0.0.1:{}", primary.port),
    ]);
    let linked = wait_until(Duration::from_secs(20), || {
        matches!(replica.try_role(), Some(redis::Role::Replica { primary_port, replication_state, .. })
            if primary_port == primary.port && replication_state == "connected")
        .then_some(())
    });
    assert!(
        linked.is_some(),
        "R did not link to P: {:?}",
        replica.try_role()
    );
    let sentinel = RedisSentinel::start(&format!(
        "sentinel monitor {MASTER} 127.0.0.1 {} {quorum}\n\
         sentinel down-after-milliseconds {MASTER} 2000\n\
         sentinel failover-timeout {MASTER} 10000\n\
         sentinel parallel-syncs {MASTER} 1",
        primary.port
    ));
    let knows_replica = wait_until(Duration::from_secs(20), || {
        let mut c = sentinel.client();
        let replicas: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(MASTER)
            .query(&mut c)
            .unwrap_or_default();
        // Linked and up (a replica just learned of is `slave,disconnected`).
        (replicas.len() == 1 && replicas[0].get("flags").map(String::as_str) == Some("slave"))
            .then_some(())
    });
    assert!(knows_replica.is_some(), "Sentinel did not link to R");

    let mut allowed = spend(&primary, BEFORE_SAVE);
    let mut c = primary.client();
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    allowed += spend(&primary, LIMIT - BEFORE_SAVE);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c).unwrap();
    assert_eq!((allowed, acked), (LIMIT, 1), "spent on P, acked by R");
    assert_eq!(remaining(&replica), Some(0));
    Topology {
        primary,
        replica,
        sentinel,
        dir,
        allowed,
    }
}

impl Topology {
    /// kill -9 of P.
    fn kill_primary(&mut self) {
        self.primary.signal(libc::SIGKILL);
        assert!(
            self.primary.wait_exit(Duration::from_secs(10)).is_some(),
            "P did not die"
        );
    }

    /// Starts P again on its port from its snapshot, with `extra` flags.
    fn restart_primary(&mut self, extra: &[&str]) -> Duration {
        let dir_arg = self.dir.path().to_str().unwrap().to_string();
        let mut args = vec!["--threads", "1", "--dir", &dir_arg, "--save-interval", "0"];
        args.extend_from_slice(extra);
        let started = Instant::now();
        self.primary = Sluice::start_on(self.primary.port, &args);
        started.elapsed()
    }

    /// `--sentinel` with a dead address first (no answer: the next one is asked).
    fn sentinel_flags(&self) -> [String; 4] {
        [
            "--sentinel".into(),
            format!("127.0.0.1:{},127.0.0.1:{}", free_port(), self.sentinel.port),
            "--master-name".into(),
            MASTER.into(),
        ]
    }

    /// P's first answer to ROLE names R as its primary; P admits no check; R's bucket stays
    /// spent; the total allowed stays at the limit.
    fn assert_primary_follows_replica(&mut self) {
        match self.primary.try_role() {
            Some(redis::Role::Replica { primary_port, .. }) => {
                assert_eq!(primary_port, self.replica.port, "P follows R")
            }
            other => panic!(
                "P's first ROLE: {other:?}\nP's log:\n{}",
                self.primary.log()
            ),
        }
        let on_p = spend(&self.primary, LIMIT);
        assert_eq!(on_p, 0, "P admitted checks from its old snapshot");
        let mut c = self.primary.client();
        let err = rl_check(&mut c, &[KEY, &LIMIT.to_string(), "1h"]).unwrap_err();
        assert!(err.to_string().contains("read only replica"), "{err}");
        // The Sentinel's primary is R, and there the bucket is spent.
        assert_eq!(named_port(&self.sentinel), Some(self.replica.port));
        let on_r = spend(&self.replica, LIMIT);
        self.allowed += on_p + on_r;
        println!(
            "allowed in all: {} against a limit of {LIMIT} (P after its restart: {on_p}, R: {on_r})",
            self.allowed
        );
        assert_eq!(self.allowed, LIMIT);
        // P synced from R: its copy of the bucket is spent too.
        let synced = wait_until(Duration::from_secs(20), || {
            (remaining(&self.primary) == Some(0)).then_some(())
        });
        assert!(
            synced.is_some(),
            "P's copy of the bucket: {:?}",
            remaining(&self.primary)
        );
    }
}

#[test]
fn restarted_after_the_failover_it_starts_as_the_new_primarys_replica() {
    if !have_tool("redis-sentinel") {
        return;
    }
    let mut t = up();
    t.kill_primary();
    let promoted = wait_until(Duration::from_secs(30), || {
        named_port(&t.sentinel).filter(|&p| p == t.replica.port)
    });
    assert!(promoted.is_some(), "Sentinel did not promote R within 30 s");
    let flags = t.sentinel_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let took = t.restart_primary(&flags);
    println!("P restarted as a replica in {took:?}");
    assert!(
        t.primary.log().contains("starting as its replica"),
        "{}",
        t.primary.log()
    );
    t.assert_primary_follows_replica();
}

#[test]
fn restarted_before_down_after_it_waits_for_the_failover() {
    if !have_tool("redis-sentinel") {
        return;
    }
    let mut t = up();
    t.kill_primary();
    let flags = t.sentinel_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let took = t.restart_primary(&flags);
    println!("P restarted at once; it served after {took:?}");
    let log = t.primary.log();
    assert!(
        log.contains("still names this node") && log.contains("starting as its replica"),
        "P did not wait for the Sentinel's failover:\n{log}"
    );
    t.assert_primary_follows_replica();
}

#[test]
fn with_no_failover_coming_it_serves_after_the_bounded_wait() {
    if !have_tool("redis-sentinel") {
        return;
    }
    // Quorum 2 with one Sentinel: it sees P down, and never fails over.
    let mut t = up_with_quorum(2);
    t.kill_primary();
    let flags = t.sentinel_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let took = t.restart_primary(&flags);
    println!("no failover: P served as the primary after {took:?}");
    let log = t.primary.log();
    assert!(
        log.contains("still names this node") && log.contains("did not fail over"),
        "{log}"
    );
    // down-after-milliseconds 2000 + failover-timeout 10000.
    assert!(took >= Duration::from_secs(12), "{took:?}");
    assert!(
        matches!(t.primary.try_role(), Some(redis::Role::Primary { .. })),
        "P: {:?}",
        t.primary.try_role()
    );
}

#[test]
fn restarted_after_a_graceful_stop_it_serves_at_once() {
    if !have_tool("redis-sentinel") {
        return;
    }
    let mut t = up();
    // SIGTERM: the last snapshot holds everything R holds.
    t.primary.signal(libc::SIGTERM);
    assert!(
        t.primary.wait_exit(Duration::from_secs(10)).is_some(),
        "P did not stop"
    );
    let flags = t.sentinel_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let took = t.restart_primary(&flags);
    println!("after a graceful stop: P served as the primary after {took:?}");
    assert!(
        t.primary.log().contains("a clean stop"),
        "{}",
        t.primary.log()
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(
        matches!(t.primary.try_role(), Some(redis::Role::Primary { .. })),
        "P: {:?}",
        t.primary.try_role()
    );
    let again = spend(&t.primary, LIMIT);
    assert_eq!(again, 0, "P granted quota again after a graceful stop");
    assert_eq!(named_port(&t.sentinel), Some(t.primary.port), "no failover");
    // R follows P again, its bucket still spent.
    let port = t.primary.port;
    let relinked = wait_until(Duration::from_secs(20), || {
        matches!(t.replica.try_role(), Some(redis::Role::Replica { primary_port, replication_state, .. })
            if primary_port == port && replication_state == "connected")
        .then_some(())
    });
    assert!(relinked.is_some(), "R: {:?}", t.replica.try_role());
    assert_eq!(remaining(&t.replica), Some(0));
}

/// No Sentinel answers: the node starts as configured, and says so.
#[test]
fn with_no_sentinel_answering_it_starts_as_configured() {
    let dead = format!("127.0.0.1:{}", free_port());
    let node = Sluice::start_with(&[
        "--threads",
        "1",
        "--sentinel",
        &dead,
        "--master-name",
        MASTER,
    ]);
    assert!(
        node.log().contains("no Sentinel of --sentinel answered"),
        "{}",
        node.log()
    );
    assert!(matches!(node.try_role(), Some(redis::Role::Primary { .. })));
}

#[test]
fn without_sentinel_a_primary_restarted_within_down_after_serves_its_snapshot_again() {
    if !have_tool("redis-sentinel") {
        return;
    }
    let mut t = up();
    t.kill_primary();
    // The old unit's RestartSec=1.
    std::thread::sleep(Duration::from_secs(1));
    t.restart_primary(&[]);
    assert!(
        matches!(t.primary.try_role(), Some(redis::Role::Primary { .. })),
        "P: {:?}",
        t.primary.try_role()
    );
    let again = spend(&t.primary, LIMIT);
    t.allowed += again;
    println!(
        "without --sentinel: P allowed {again} again from its snapshot, {} in all against a limit of {LIMIT}; the Sentinel names :{:?} (P :{}, R :{})",
        t.allowed,
        named_port(&t.sentinel),
        t.primary.port,
        t.replica.port
    );
    assert_eq!(
        again,
        LIMIT - BEFORE_SAVE,
        "the restarted primary's snapshot should have granted the quota spent after it again"
    );
}
