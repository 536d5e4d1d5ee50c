//! Nodes whose clocks disagree (issue: no quota lost or doubled). Each process's clock is set
//! wrong at start with `SLUICE_CLOCK_OFFSET_MS`, as a wall clock stepped between two starts
//! would set it. What crosses between them (a full sync, the stream, a snapshot on disk) must
//! mean the same bucket on both sides:
//! - a replica two minutes ahead of its primary, promoted, does not hand every client a fresh
//!   quota;
//! - a replica two minutes behind, promoted, does not lock a LOG client out for two minutes;
//! - a node restarted from its snapshot under a clock two minutes behind the one that saved
//!   it does not lock a LOG client out for two minutes either;
//! - a FIXED or SLIDING window spent on a primary is still spent on a replica behind it (150 ms
//!   or two minutes) or ahead of it after a failover, and on a node restarted under a clock
//!   stepped back: a window moved onto another clock keeps its age, not the other clock's
//!   alignment to the hour.
//!
//! Every wait has a deadline; every process is stopped by its PID when its guard drops.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Connection;
use sluice_tests::{Sluice, TempDir, rl_check, wait_until};

const TWO_MINUTES_AHEAD: &str = "120000";
const TWO_MINUTES_BEHIND: &str = "-120000";

fn replica_with_clock(primary: &Sluice, offset_ms: &str) -> Sluice {
    let to = format!("127.0.0.1:{}", primary.port);
    Sluice::start_on_env(
        0,
        &["--replicaof", &to],
        &[("SLUICE_CLOCK_OFFSET_MS", offset_ms)],
    )
}

/// Waits until the replica's link is up and it applied everything the primary wrote so far.
fn synced(primary: &mut Connection, replica: &Sluice) {
    let up = wait_until(Duration::from_secs(20), || {
        let text: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut replica.client())
            .ok()?;
        text.contains("master_link_status:up").then_some(())
    });
    assert!(
        up.is_some(),
        "the replica never linked up:\n{}",
        replica.log()
    );
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query(primary)
        .unwrap();
    assert_eq!(acked, 1, "the replica did not ack the writes");
}

fn promote(replica: &Sluice) -> Connection {
    let mut c = replica.client();
    let () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut c)
        .unwrap();
    c
}

/// The replica learns it is two minutes ahead (INFO `master_clock_offset_ms`), and after the
/// failover the bucket the primary emptied is still empty: 10 per minute refills one unit in
/// 6 s, so far less than two minutes' worth (the whole bucket) has come back.
#[test]
fn a_replica_ahead_of_its_primary_keeps_spent_buckets_spent_after_a_failover() {
    let primary = Sluice::start();
    let replica = replica_with_clock(&primary, TWO_MINUTES_AHEAD);
    let mut p = primary.client();
    let r = rl_check(&mut p, &["k", "10", "1m", "COST", "10"]).unwrap();
    assert_eq!((r[0], r[2]), (1, 0), "the primary emptied the bucket");
    synced(&mut p, &replica);
    let offset = wait_until(Duration::from_secs(10), || {
        let text: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut replica.client())
            .ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("master_clock_offset_ms:"))
            .and_then(|v| v.trim().parse::<i64>().ok())
    });
    let offset = offset.expect("no master_clock_offset_ms on the replica");
    assert!(
        (-121_000..=-119_000).contains(&offset),
        "the replica measured its primary's clock {offset} ms off, not about -120000"
    );
    assert!(
        replica.wait_for_log("ms behind ours: times from it are moved"),
        "the skew was not logged:\n{}",
        replica.log()
    );
    let mut r = promote(&replica);
    let after = rl_check(&mut r, &["k", "10", "1m", "DRY"]).unwrap();
    assert!(
        after[2] < 5,
        "after the failover the bucket holds {} of 10: the replica's clock refilled it",
        after[2] + 1
    );
}

/// A LOG limit of 3 per 2 s, spent on the primary: after the failover to a replica whose clock
/// is two minutes behind, the client is allowed again within the period, not two minutes on.
#[test]
fn a_replica_behind_its_primary_does_not_lock_log_clients_out() {
    let primary = Sluice::start();
    let replica = replica_with_clock(&primary, TWO_MINUTES_BEHIND);
    let mut p = primary.client();
    for _ in 0..3 {
        let r = rl_check(&mut p, &["log", "3", "2s", "ALGO", "LOG"]).unwrap();
        assert_eq!(r[0], 1);
    }
    synced(&mut p, &replica);
    let mut r = promote(&replica);
    let denied = rl_check(&mut r, &["log", "3", "2s", "ALGO", "LOG", "DRY"]).unwrap();
    assert_eq!(denied[0], 0, "the spent LOG key came over spent");
    let allowed = wait_until(Duration::from_secs(8), || {
        let d = rl_check(&mut r, &["log", "3", "2s", "ALGO", "LOG", "DRY"]).ok()?;
        (d[0] == 1).then_some(())
    });
    assert!(
        allowed.is_some(),
        "the LOG client was still locked out 8 s after a 2 s period: the replica's clock kept it"
    );
}

/// A snapshot saved under a clock two minutes ahead of the one that loads it (the wall clock
/// stepped back while the node was down): it counts as saved now, so a LOG client is allowed
/// again within its period.
#[test]
fn a_restart_under_a_clock_stepped_back_does_not_lock_log_clients_out() {
    let dir = TempDir::new("clocks");
    let dir_arg = dir.path().to_str().unwrap().to_string();
    let mut first = Sluice::start_with(&["--dir", &dir_arg]);
    let mut c = first.client();
    for _ in 0..3 {
        let r = rl_check(&mut c, &["log", "3", "2s", "ALGO", "LOG"]).unwrap();
        assert_eq!(r[0], 1);
    }
    let () = redis::cmd("SAVE").query(&mut c).unwrap();
    first.signal(libc::SIGTERM);
    assert!(first.wait_exit(Duration::from_secs(10)).is_some());
    let second = Sluice::start_on_env(
        0,
        &["--dir", &dir_arg],
        &[("SLUICE_CLOCK_OFFSET_MS", TWO_MINUTES_BEHIND)],
    );
    assert!(
        second.wait_for_log("ahead of this clock: counting it as saved now"),
        "no line about the snapshot from the future:\n{}",
        second.log()
    );
    let mut c = second.client();
    let denied = rl_check(&mut c, &["log", "3", "2s", "ALGO", "LOG", "DRY"]).unwrap();
    assert_eq!(denied[0], 0, "the spent LOG key came back spent");
    let allowed = wait_until(Duration::from_secs(8), || {
        let d = rl_check(&mut c, &["log", "3", "2s", "ALGO", "LOG", "DRY"]).ok()?;
        (d[0] == 1).then_some(())
    });
    assert!(
        allowed.is_some(),
        "the LOG client was still locked out 8 s after a 2 s period, two minutes of clock step on"
    );
}

/// libfaketime, from Debian's `faketime` package: moves the wall clock of the process it is
/// preloaded into, here read from a file at every call, and leaves the monotonic clock alone.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// The hour of a log line (`PID:R DD Mon YYYY HH:MM:SS.mmm * ...`).
fn log_hour(line: &str) -> u32 {
    let time = line.split_whitespace().nth(4).expect("time field");
    time[..2].parse().expect("hour")
}

/// The wall clock of a running node jumps two hours forwards, then back: a spent bucket stays
/// spent (a jump forwards refills nothing), and a LOG key frees up after its period as usual (a
/// jump back freezes nothing). The limiter reads only the monotonic clock after start.
#[test]
fn a_wall_clock_jump_on_a_running_node_neither_refills_nor_freezes_buckets() {
    if !have_libfaketime() {
        return;
    }
    let dir = TempDir::new("clock-jump");
    let offset = dir.path().join("offset");
    std::fs::write(&offset, "+0\n").unwrap();
    let dir_arg = dir.path().to_str().unwrap().to_string();
    let offset_arg = offset.to_str().unwrap().to_string();
    let node = Sluice::start_on_env(
        0,
        &["--dir", &dir_arg],
        &[
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME_TIMESTAMP_FILE", &offset_arg),
            ("FAKETIME_NO_CACHE", "1"),
            ("DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    let mut c = node.client();
    let r = rl_check(&mut c, &["k", "10", "1h", "COST", "10"]).unwrap();
    assert_eq!((r[0], r[2]), (1, 0));
    for _ in 0..3 {
        assert_eq!(
            rl_check(&mut c, &["log", "3", "2s", "ALGO", "LOG"]).unwrap()[0],
            1
        );
    }
    let started = log_hour(node.log().lines().next().unwrap());

    // Two hours forwards: the node's own log shows the jump, the bucket does not.
    std::fs::write(&offset, "+2h\n").unwrap();
    let _: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
    assert!(node.wait_for_log("Background saving"), "{}", node.log());
    let log = node.log();
    let saved = log
        .lines()
        .find(|l| l.contains("Background saving"))
        .map(log_hour)
        .unwrap();
    assert_eq!(
        (saved + 24 - started) % 24,
        2,
        "the wall clock did not jump:\n{}",
        node.log()
    );
    let after = rl_check(&mut c, &["k", "10", "1h", "DRY"]).unwrap();
    assert_eq!(
        after[0], 0,
        "a wall-clock jump forwards refilled a bucket: {after:?}"
    );

    // Two hours back: the LOG key frees up after its 2 s period, not two hours on.
    std::fs::write(&offset, "-2h\n").unwrap();
    let allowed = wait_until(Duration::from_secs(8), || {
        let d = rl_check(&mut c, &["log", "3", "2s", "ALGO", "LOG", "DRY"]).ok()?;
        (d[0] == 1).then_some(())
    });
    assert!(allowed.is_some(), "a wall-clock jump back froze a LOG key");
    let still = rl_check(&mut c, &["k", "10", "1h", "DRY"]).unwrap();
    assert_eq!(still[0], 0);
}

const HOUR_MS: i64 = 3_600_000;

/// A `SLUICE_CLOCK_OFFSET_MS` that sets a clock `phase_ms` into the hour (a window of `1h`):
/// where in its window a node spends a limit must not depend on the time of day the test runs.
fn offset_to_phase(phase_ms: i64) -> i64 {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    phase_ms - i64::try_from(now_ms % HOUR_MS as u128).unwrap()
}

/// Spends `10 per 1h` under FIXED and under SLIDING, a key each.
fn spend_windows(c: &mut Connection) {
    for algo in ["FIXED", "SLIDING"] {
        let r = rl_check(c, &[algo, "10", "1h", "ALGO", algo, "COST", "10"]).unwrap();
        assert_eq!((r[0], r[2]), (1, 0), "{algo}: the limit was not spent");
    }
}

/// How many of 10 more `10 per 1h` checks each window key allows: none while it is spent.
fn allowed_after(c: &mut Connection) -> Vec<(&'static str, usize)> {
    ["FIXED", "SLIDING"]
        .into_iter()
        .map(|algo| {
            let allowed = (0..10)
                .filter(|_| rl_check(c, &[algo, "10", "1h", "ALGO", algo]).unwrap()[0] == 1)
                .count();
            (algo, allowed)
        })
        .collect()
}

/// Limit 10 per hour, spent under FIXED and SLIDING on a primary half an hour into its hour
/// (and, for a replica ahead, a minute before its end), then a failover to a replica whose
/// clock is 150 ms (just past the threshold below which clocks count as agreeing) or two
/// minutes off: both windows are still spent. Moved by the skew and read against the
/// replica's own hours, a window moved back started before the replica's hour (FIXED allowed
/// 10 more, SLIDING 4), and one moved forwards across the hour ended early (FIXED 10).
#[test]
fn a_replica_off_its_primarys_clock_keeps_spent_windows_spent_after_a_failover() {
    let mut reset = Vec::new();
    for (phase_ms, skew_ms) in [
        (HOUR_MS / 2, -150),
        (HOUR_MS / 2, -120_000),
        (HOUR_MS - 60_000, 120_000),
    ] {
        let base = offset_to_phase(phase_ms);
        let primary =
            Sluice::start_on_env(0, &[], &[("SLUICE_CLOCK_OFFSET_MS", &base.to_string())]);
        let replica = replica_with_clock(&primary, &(base + skew_ms).to_string());
        let mut p = primary.client();
        spend_windows(&mut p);
        synced(&mut p, &replica);
        let mut r = promote(&replica);
        for (algo, allowed) in allowed_after(&mut r) {
            if allowed > 0 {
                reset.push(format!(
                    "{algo} spent {} s into the hour, replica {skew_ms} ms off: {allowed} more \
                     allowed",
                    phase_ms / 1000
                ));
            }
        }
    }
    assert!(
        reset.is_empty(),
        "spent windows were reset by a failover:\n{}",
        reset.join("\n")
    );
}

/// Limit 10 per hour spent under FIXED and SLIDING half an hour into the hour, `SAVE`, then a
/// restart under a wall clock stepped two minutes back (libfaketime): the snapshot counts as
/// saved now, and both windows are still spent. Moved back two minutes and read against the
/// hour, the FIXED window had started before it and came back with all 10 again (SLIDING 4).
#[test]
fn a_restart_under_a_clock_stepped_back_keeps_spent_windows_spent() {
    if !have_libfaketime() {
        return;
    }
    let dir = TempDir::new("clocks-windows");
    let dir_arg = dir.path().to_str().unwrap().to_string();
    let base = offset_to_phase(HOUR_MS / 2).to_string();
    let mut first = Sluice::start_on_env(
        0,
        &["--dir", &dir_arg],
        &[("SLUICE_CLOCK_OFFSET_MS", &base)],
    );
    let mut c = first.client();
    spend_windows(&mut c);
    let () = redis::cmd("SAVE").query(&mut c).unwrap();
    first.signal(libc::SIGTERM);
    assert!(first.wait_exit(Duration::from_secs(10)).is_some());
    let second = Sluice::start_on_env(
        0,
        &["--dir", &dir_arg],
        &[
            ("SLUICE_CLOCK_OFFSET_MS", &base),
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME", "-120"),
            ("DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    assert!(
        second.wait_for_log("ahead of this clock: counting it as saved now"),
        "the wall clock was not stepped back:\n{}",
        second.log()
    );
    assert_eq!(
        allowed_after(&mut second.client()),
        [("FIXED", 0), ("SLIDING", 0)],
        "after a restart under a clock two minutes back, spent windows were reset"
    );
}

/// Whether libfaketime is installed; under `CI=true` its absence fails the test (the test
/// command installs it).
fn have_libfaketime() -> bool {
    if std::path::Path::new(LIBFAKETIME).exists() {
        return true;
    }
    assert!(
        std::env::var("CI").is_err(),
        "{LIBFAKETIME} is missing (scripts/test.sh installs the faketime package)"
    );
    eprintln!("SKIPPED: libfaketime not installed");
    false
}

/// A replica restarted from its own snapshot under a clock stepped two hours forwards while it
/// was down asks for a full sync instead of continuing its primary's stream: the snapshot's
/// times are on the clock it was saved under, so continuing from them would hold every bucket
/// two hours refilled, and a failover would hand them out. The full sync moves the primary's
/// times by the difference it measures, and the spent bucket stays spent.
#[test]
fn a_replica_restarted_under_a_stepped_clock_takes_a_full_sync() {
    let dir = TempDir::new("clocks-replica-step");
    let dir_arg = dir.path().to_str().unwrap().to_string();
    let primary = Sluice::start();
    let mut p = primary.client();
    let to = format!("127.0.0.1:{}", primary.port);
    let mut replica = Sluice::start_with(&["--replicaof", &to, "--dir", &dir_arg]);
    let port = replica.port;
    synced(&mut p, &replica);
    assert_eq!(
        rl_check(&mut p, &["b", "10", "1h", "COST", "10"]).unwrap()[0],
        1
    );
    synced(&mut p, &replica);
    replica.signal(libc::SIGTERM);
    assert!(replica.wait_exit(Duration::from_secs(10)).is_some());
    let replica = Sluice::start_on_env(
        port,
        &["--replicaof", &to, "--dir", &dir_arg],
        &[("SLUICE_CLOCK_OFFSET_MS", "7200000")],
    );
    synced(&mut p, &replica);
    let mut c = promote(&replica);
    assert_eq!(
        rl_check(&mut c, &["b", "10", "1h"]).unwrap()[0],
        0,
        "the bucket spent on the primary came back refilled by the clock step:\n{}",
        replica.log()
    );
    assert!(
        replica
            .log()
            .contains("asking for a full sync instead of continuing"),
        "{}",
        replica.log()
    );
}
