//! A snapshot records where it stands in a replication stream whatever role saved it: a
//! replica's snapshot names its primary's stream and the offset it had applied. Real processes
//! on loopback; every wait has a deadline; every process is stopped by its PID when its guard
//! drops.

use std::time::Duration;

use redis::Connection;
use sluice_tests::{Sluice, holds_within, rl_check};

fn field(c: &mut Connection, name: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg("replication").query(c).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_string())
}

fn link_up(c: &mut Connection) -> bool {
    field(c, "master_link_status").as_deref() == Some("up")
}

fn wait(c: &mut Connection, replicas: usize) -> i64 {
    redis::cmd("WAIT")
        .arg(replicas)
        .arg(10_000)
        .query(c)
        .unwrap()
}

fn replica_of(port: u16, extra: &[&str]) -> Sluice {
    let to = format!("127.0.0.1:{port}");
    let mut args = vec!["--replicaof", to.as_str()];
    args.extend_from_slice(extra);
    Sluice::start_with(&args)
}

/// What `k` has left after one more unit (DRY: nothing is taken).
fn remaining(c: &mut Connection) -> i64 {
    rl_check(c, &["k", "100", "1d", "DRY"]).unwrap()[2]
}

/// A replica R saves a snapshot, is promoted, gets a replica R2 of its own, spends more, and is
/// killed and restarted from that snapshot (taken while it was a replica). R2 holds more of the
/// stream than the snapshot: it refuses the full sync that would wipe it, and keeps what R had
/// spent since. Without an origin in the snapshot, R2 cannot tell and is wiped back to it.
#[test]
fn a_promoted_replica_restarted_from_its_replica_snapshot_does_not_wipe_its_replica() {
    let dir = sluice_tests::TempDir::new("origin-promoted");
    let dir_arg = dir.path().to_str().unwrap().to_string();
    let primary = Sluice::start();
    let mut p = primary.client();
    let mut r_node = replica_of(primary.port, &["--dir", &dir_arg]);
    let r_port = r_node.port;
    let mut r = r_node.client();
    assert!(holds_within(20, || link_up(&mut r)), "{}", r_node.log());
    rl_check(&mut p, &["k", "100", "1d", "COST", "10"]).unwrap();
    assert_eq!(wait(&mut p, 1), 1);
    // Saved as a replica: 10 spent.
    let () = redis::cmd("SAVE").query(&mut r).unwrap();
    let () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    let r2_node = replica_of(r_port, &[]);
    let mut r2 = r2_node.client();
    assert!(holds_within(20, || link_up(&mut r2)), "{}", r2_node.log());
    rl_check(&mut r, &["k", "100", "1d", "COST", "50"]).unwrap();
    assert_eq!(wait(&mut r, 1), 1);
    assert_eq!(remaining(&mut r2), 39);

    // kill -9: no final save, so R's snapshot holds only the first 10.
    r_node.signal(libc::SIGKILL);
    assert!(r_node.wait_exit(Duration::from_secs(10)).is_some());
    let restarted = Sluice::start_on(r_port, &["--dir", &dir_arg]);
    let mut r = restarted.client();
    assert_eq!(remaining(&mut r), 89, "R holds its snapshot's state");
    // R2 either refuses R (it holds more) or takes a full sync from it: wait for either.
    let refused = "refusing a full sync: the primary restarted from a snapshot";
    assert!(
        holds_within(20, || r2_node.log().contains(refused)
            || r2_node
                .log()
                .matches("MASTER <-> REPLICA sync: loaded")
                .count()
                >= 2),
        "{}",
        r2_node.log()
    );
    assert_eq!(
        remaining(&mut r2),
        39,
        "R2 was wiped back to R's snapshot: {}",
        r2_node.log()
    );
    assert!(r2_node.log().contains(refused), "{}", r2_node.log());
    // The operator's way to keep the newer buckets: promote R2, then R follows it.
    let () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r2)
        .unwrap();
    let _: String = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(r2_node.port)
        .query(&mut r)
        .unwrap();
    assert!(holds_within(20, || link_up(&mut r)), "{}", restarted.log());
    assert_eq!(remaining(&mut r), 39);
}

fn stat(c: &mut Connection, name: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in INFO stats"))
}

/// A replica killed and restarted from the snapshot it saved asks its primary to continue
/// from where the snapshot stands: a partial sync from the backlog, no full sync, and it ends
/// with what the primary spent before and after the save.
#[test]
fn a_replica_restarted_from_its_snapshot_continues_its_primary_stream() {
    let dir = sluice_tests::TempDir::new("origin-replica");
    let dir_arg = dir.path().to_str().unwrap().to_string();
    let primary = Sluice::start();
    let mut p = primary.client();
    let mut r_node = replica_of(primary.port, &["--dir", &dir_arg]);
    let r_port = r_node.port;
    let mut r = r_node.client();
    assert!(holds_within(20, || link_up(&mut r)), "{}", r_node.log());
    rl_check(&mut p, &["k", "100", "1d", "COST", "10"]).unwrap();
    assert_eq!(wait(&mut p, 1), 1);
    let () = redis::cmd("SAVE").query(&mut r).unwrap();
    rl_check(&mut p, &["k", "100", "1d", "COST", "50"]).unwrap();
    assert_eq!(wait(&mut p, 1), 1);
    let (full, partial) = (stat(&mut p, "sync_full"), stat(&mut p, "sync_partial_ok"));

    r_node.signal(libc::SIGKILL);
    assert!(r_node.wait_exit(Duration::from_secs(10)).is_some());
    let to = format!("127.0.0.1:{}", primary.port);
    let restarted = Sluice::start_on(r_port, &["--replicaof", &to, "--dir", &dir_arg]);
    let mut r = restarted.client();
    assert!(holds_within(20, || link_up(&mut r)), "{}", restarted.log());
    assert_eq!(
        (stat(&mut p, "sync_full"), stat(&mut p, "sync_partial_ok")),
        (full, partial + 1),
        "the restarted replica did not continue the stream: {}",
        restarted.log()
    );
    assert_eq!(remaining(&mut r), 39);
}

/// A primary stopped and restarted from its own snapshot goes on under a new id, naming the
/// snapshot's place in its old stream. A replica that followed it since holds only what it
/// sent: when its link drops later, it links again (it is not ahead of the primary, however
/// far it has come in the new stream). And a replica that was ahead, refused the restarted
/// primary, and was told `REPLICAOF NO ONE` then `REPLICAOF` takes the primary's state, as
/// the refusal's message says.
#[test]
fn a_replica_relinks_to_a_restarted_primary_and_follows_one_it_was_told_to_take() {
    let dir = sluice_tests::TempDir::new("origin-relink");
    let dir_arg = dir.path().to_str().unwrap().to_string();
    let mut primary = Sluice::start_with(&["--dir", &dir_arg]);
    let p_port = primary.port;
    let mut p = primary.client();
    let r_node = replica_of(p_port, &[]);
    let mut r = r_node.client();
    assert!(holds_within(20, || link_up(&mut r)), "{}", r_node.log());
    rl_check(&mut p, &["k", "100", "1d", "COST", "10"]).unwrap();
    assert_eq!(wait(&mut p, 1), 1);

    // A planned restart: SIGTERM saves, the restart loads it.
    primary.signal(libc::SIGTERM);
    assert!(primary.wait_exit(Duration::from_secs(10)).is_some());
    let primary = Sluice::start_on(p_port, &["--dir", &dir_arg]);
    let mut p = primary.client();
    assert!(holds_within(20, || link_up(&mut r)), "{}", r_node.log());
    for _ in 0..5 {
        rl_check(&mut p, &["k", "100", "1d", "COST", "1"]).unwrap();
    }
    assert_eq!(wait(&mut p, 1), 1);
    assert_eq!(remaining(&mut r), 84);
    // The link drops; the replica is past the snapshot's offset, in the primary's new stream.
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut p)
        .unwrap();
    assert!(
        holds_within(20, || link_up(&mut r) && wait(&mut p, 1) == 1),
        "the replica did not link again: {}",
        r_node.log()
    );
    assert!(
        !r_node.log().contains("refusing a full sync"),
        "{}",
        r_node.log()
    );

    // Now the replica ahead: the primary spends more, is killed, and comes back from its
    // older snapshot; the replica refuses it, then is told to take it.
    let () = redis::cmd("SAVE").query(&mut p).unwrap();
    rl_check(&mut p, &["k", "100", "1d", "COST", "20"]).unwrap();
    assert_eq!(wait(&mut p, 1), 1);
    let mut primary = primary;
    primary.signal(libc::SIGKILL);
    assert!(primary.wait_exit(Duration::from_secs(10)).is_some());
    let primary = Sluice::start_on(p_port, &["--dir", &dir_arg]);
    let mut p = primary.client();
    assert_eq!(remaining(&mut p), 84);
    let refused = "refusing a full sync: the primary restarted from a snapshot";
    assert!(
        holds_within(20, || r_node.log().contains(refused)),
        "{}",
        r_node.log()
    );
    assert_eq!(remaining(&mut r), 64);
    let () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    let _: String = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(p_port)
        .query(&mut r)
        .unwrap();
    assert!(
        holds_within(20, || link_up(&mut r) && remaining(&mut r) == 84),
        "the replica told to follow did not take the primary's state: {}",
        r_node.log()
    );
}
