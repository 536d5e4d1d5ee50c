//! Snapshots on disk: a restart keeps every spent quota; kill -9 loses at most one save
//! interval; a corrupted or newer snapshot stops the start with a message saying why.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use sluice_tests::{Sluice, TempDir, binary, rl_check, wait_until};

fn start(dir: &Path, extra: &[&str]) -> Sluice {
    let dir = dir.to_str().unwrap();
    let mut args = vec!["--dir", dir];
    args.extend_from_slice(extra);
    Sluice::start_with(&args)
}

/// `remaining` of `key`, read with `COST 0` (1 000 per 10 h: one unit refills every 36 s,
/// more than these tests take between a spend and its read).
fn remaining(server: &Sluice, key: &str) -> i64 {
    let mut c = server.client();
    rl_check(&mut c, &[key, "1000", "10h", "COST", "0"]).unwrap()[2]
}

fn spend(server: &Sluice, key: &str, n: usize) {
    let mut c = server.client();
    for _ in 0..n {
        assert_eq!(rl_check(&mut c, &[key, "1000", "10h"]).unwrap()[0], 1);
    }
}

#[test]
fn sigterm_and_shutdown_keep_quotas_across_restarts() {
    let dir = TempDir::new("snap-restart");
    let mut server = start(dir.path(), &["--save-interval", "0"]);
    spend(&server, "user:1", 7);
    spend(&server, "user:2", 3);
    {
        let mut c = server.client();
        let _: String = redis::cmd("SET")
            .arg("plain")
            .arg(41)
            .query(&mut c)
            .unwrap();
    }
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(Duration::from_secs(10)).unwrap().success());
    assert!(
        server.log().contains("Saving the final snapshot"),
        "{}",
        server.log()
    );

    let mut server = start(dir.path(), &["--save-interval", "0"]);
    assert!(
        server.log().contains("snapshot loaded: 3 entries"),
        "{}",
        server.log()
    );
    assert_eq!(remaining(&server, "user:1"), 993);
    assert_eq!(remaining(&server, "user:2"), 997);
    let mut c = server.client();
    let v: i64 = redis::cmd("INCR").arg("plain").query(&mut c).unwrap();
    assert_eq!(v, 42);

    // SHUTDOWN saves too; SHUTDOWN NOSAVE does not.
    spend(&server, "user:1", 1);
    let _ = redis::cmd("SHUTDOWN").query::<()>(&mut c);
    assert!(server.wait_exit(Duration::from_secs(10)).unwrap().success());
    let mut server = start(dir.path(), &["--save-interval", "0"]);
    assert_eq!(remaining(&server, "user:1"), 992);
    spend(&server, "user:1", 2);
    let mut c = server.client();
    let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut c);
    assert!(server.wait_exit(Duration::from_secs(10)).unwrap().success());
    let server = start(dir.path(), &["--save-interval", "0"]);
    assert_eq!(remaining(&server, "user:1"), 992);
}

#[test]
fn save_bgsave_lastsave() {
    let dir = TempDir::new("snap-cmds");
    let server = start(dir.path(), &["--save-interval", "0"]);
    let mut c = server.client();
    let before: i64 = redis::cmd("LASTSAVE").query(&mut c).unwrap();
    assert!(before > 1_600_000_000);
    spend(&server, "a", 1);
    let ok: String = redis::cmd("SAVE").query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    let snap = dir.path().join("sluice.snap");
    let size = std::fs::metadata(&snap).unwrap().len();
    let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
    assert!(info.contains("rdb_last_bgsave_status:ok"), "{info}");
    assert!(info.contains("snapshot_enabled:1"), "{info}");
    let save: Vec<String> = redis::cmd("CONFIG")
        .arg(&["GET", "save"])
        .query(&mut c)
        .unwrap();
    assert_eq!(save, ["save", ""]);
    assert!(size > 20);
    spend(&server, "b", 1);
    let started: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
    assert_eq!(started, "Background saving started");
    // The background save lands: the file grows by key b's record.
    assert!(
        wait_until(Duration::from_secs(10), || {
            (std::fs::metadata(&snap).ok()?.len() > size).then_some(())
        })
        .is_some()
    );
    let err = redis::cmd("SAVE")
        .arg("extra")
        .query::<String>(&mut c)
        .unwrap_err();
    assert!(
        err.to_string().contains("wrong number of arguments"),
        "{err}"
    );
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["sluice.snap"]);

    // Without --dir there is nothing to save to.
    let plain = Sluice::start();
    let mut c = plain.client();
    for cmd in ["SAVE", "BGSAVE"] {
        let err = redis::cmd(cmd).query::<String>(&mut c).unwrap_err();
        assert!(err.to_string().contains("snapshots are off"), "{err}");
    }
}

#[test]
fn kill_9_loses_at_most_one_save_interval() {
    let dir = TempDir::new("snap-kill");
    let server = start(dir.path(), &["--save-interval", "1"]);
    let snap = dir.path().join("sluice.snap");
    spend(&server, "k", 10);
    let spent_at = SystemTime::now();
    // One interval later a periodic save has the 10 checks.
    let saved = wait_until(Duration::from_secs(10), || {
        let m = std::fs::metadata(&snap).ok()?.modified().ok()?;
        (m > spent_at).then_some(())
    });
    assert!(saved.is_some(), "no periodic save:\n{}", server.log());
    // These may be lost: no save has run since.
    spend(&server, "k", 5);
    server.signal(libc::SIGKILL);
    drop(server);

    let server = start(dir.path(), &["--save-interval", "1"]);
    let left = remaining(&server, "k");
    assert!(
        (985..=990).contains(&left),
        "a kill -9 kept {left}: the 10 saved checks must survive"
    );
}

/// Starts sluice on `dir` expecting it to refuse; returns its log.
fn refused_start(dir: &Path) -> String {
    let out = Command::new("timeout")
        .arg("30")
        .arg(binary())
        .args(["--port", "0", "--bind", "127.0.0.1", "--dir"])
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run sluice");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn damaged_or_newer_snapshots_are_refused() {
    let dir = TempDir::new("snap-bad");
    let mut server = start(dir.path(), &["--save-interval", "0"]);
    spend(&server, "k", 3);
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(Duration::from_secs(10)).unwrap().success());
    let snap = dir.path().join("sluice.snap");
    let good = std::fs::read(&snap).unwrap();

    let mut flipped = good.clone();
    flipped[20] ^= 0x10;
    std::fs::write(&snap, &flipped).unwrap();
    let log = refused_start(dir.path());
    assert!(log.contains("refusing to start"), "{log}");
    assert!(log.contains("checksum mismatch"), "{log}");

    std::fs::write(&snap, &good[..good.len() - 5]).unwrap();
    let log = refused_start(dir.path());
    assert!(log.contains("refusing to start"), "{log}");

    let mut newer = good.clone();
    newer[10] = 0xfe;
    std::fs::write(&snap, &newer).unwrap();
    let log = refused_start(dir.path());
    assert!(log.contains("version 254 is not supported"), "{log}");

    std::fs::write(&snap, b"REDIS0011 not ours").unwrap();
    assert!(refused_start(dir.path()).contains("not a Sluice snapshot"));

    // The good file starts again, whole.
    std::fs::write(&snap, &good).unwrap();
    let server = start(dir.path(), &["--save-interval", "0"]);
    assert_eq!(remaining(&server, "k"), 997);
}
