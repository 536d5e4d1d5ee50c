//! Replication end to end: real primaries and replicas on loopback, driven by the `redis`
//! crate. Every wait has a deadline; every process is stopped by its PID when its guard drops.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use redis::Connection;
use sluice_tests::{Sluice, holds_within, rl_check};

fn info(c: &mut Connection, section: &str) -> String {
    redis::cmd("INFO").arg(section).query(c).unwrap()
}

fn field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_string())
}

fn dbsize(c: &mut Connection) -> i64 {
    redis::cmd("DBSIZE").query(c).unwrap()
}

fn replica_of(primary: &Sluice, extra: &[&str]) -> Sluice {
    let to = format!("127.0.0.1:{}", primary.port);
    let mut args = vec!["--replicaof", to.as_str()];
    args.extend_from_slice(extra);
    Sluice::start_with(&args)
}

fn link_up(c: &mut Connection) -> bool {
    field(&info(c, "replication"), "master_link_status").as_deref() == Some("up")
}

fn wait(c: &mut Connection, replicas: usize) -> i64 {
    redis::cmd("WAIT")
        .arg(replicas)
        .arg(10_000)
        .query(c)
        .unwrap()
}

fn err_text(e: redis::RedisError) -> String {
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
}

/// Writes `n` TOKEN buckets `prefix:i` (2 of 100 per day taken), pipelined.
fn preload(c: &mut Connection, prefix: &str, n: usize) {
    for start in (0..n).step_by(10_000) {
        let mut pipe = redis::pipe();
        for i in start..(start + 10_000).min(n) {
            pipe.cmd("RL.CHECK")
                .arg(format!("{prefix}:{i}"))
                .arg(100)
                .arg("1d")
                .arg("COST")
                .arg(2)
                .ignore();
        }
        let () = pipe.query(c).unwrap();
    }
}

/// What DRY shows for a key on both nodes: the same decision (retry_after and reset_after
/// within a second, the time between the two reads).
fn assert_same_bucket(p: &mut Connection, r: &mut Connection, args: &[&str]) {
    let mut dry = args.to_vec();
    dry.push("DRY");
    let a = rl_check(p, &dry).unwrap();
    let b = rl_check(r, &dry).unwrap();
    assert_eq!(a[..3], b[..3], "{args:?}: primary {a:?} replica {b:?}");
    // The times are relative to each node's now, read a moment apart.
    for i in [3, 4] {
        assert!((a[i] - b[i]).abs() <= 1000, "{args:?}: {a:?} vs {b:?}");
    }
}

#[test]
fn full_sync_then_stream_keeps_replica_equal() {
    let primary = Sluice::start();
    let mut p = primary.client();
    preload(&mut p, "pre", 100_000);
    let _: () = redis::cmd("SET")
        .arg("counter")
        .arg(7)
        .query(&mut p)
        .unwrap();

    let replica = replica_of(&primary, &[]);
    let mut r = replica.client();
    assert!(
        holds_within(60, || link_up(&mut r) && dbsize(&mut r) == 100_001),
        "full sync of 100k buckets did not complete: {}",
        replica.log()
    );
    assert_same_bucket(&mut p, &mut r, &["pre:0", "100", "1d"]);
    assert_same_bucket(&mut p, &mut r, &["pre:99999", "100", "1d"]);

    // Streamed changes of every kind, then WAIT: both sides hold the same state.
    for algo in ["TOKEN", "GCRA", "SLIDING", "FIXED", "LOG", "LEAKY"] {
        for _ in 0..3 {
            rl_check(&mut p, &[&format!("s:{algo}"), "10", "1h", "ALGO", algo]).unwrap();
        }
    }
    let _: i64 = redis::cmd("INCRBY")
        .arg("counter")
        .arg(5)
        .query(&mut p)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("ttl")
        .arg("v")
        .arg("EX")
        .arg(100)
        .query(&mut p)
        .unwrap();
    let _: i64 = redis::cmd("DEL").arg("pre:1").query(&mut p).unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("pre:2")
        .arg(50)
        .query(&mut p)
        .unwrap();
    assert_eq!(wait(&mut p, 1), 1);

    for algo in ["TOKEN", "GCRA", "SLIDING", "FIXED", "LOG", "LEAKY"] {
        assert_same_bucket(
            &mut p,
            &mut r,
            &[&format!("s:{algo}"), "10", "1h", "ALGO", algo],
        );
    }
    let v: String = redis::cmd("GET").arg("counter").query(&mut r).unwrap();
    assert_eq!(v, "12");
    let v: String = redis::cmd("GET").arg("ttl").query(&mut r).unwrap();
    assert_eq!(v, "v");
    let ttl: i64 = redis::cmd("TTL").arg("ttl").query(&mut r).unwrap();
    assert!((99..=100).contains(&ttl), "ttl {ttl}");
    let gone: i64 = redis::cmd("EXISTS").arg("pre:1").query(&mut r).unwrap();
    assert_eq!(gone, 0, "DEL replicated");
    // The deadline travels as an absolute time: the replica drops pre:2 on its own.
    assert!(holds_within(5, || {
        redis::cmd("EXISTS")
            .arg("pre:2")
            .query::<i64>(&mut r)
            .unwrap()
            == 0
    }));
    assert_eq!(dbsize(&mut p), dbsize(&mut r));

    // FLUSHALL travels too, in order with the writes around it.
    let _: () = redis::cmd("FLUSHALL").query(&mut p).unwrap();
    rl_check(&mut p, &["after", "5", "1h"]).unwrap();
    assert_eq!(wait(&mut p, 1), 1);
    assert_eq!(dbsize(&mut r), 1);
    assert_same_bucket(&mut p, &mut r, &["after", "5", "1h"]);

    let pinfo = info(&mut p, "replication");
    assert_eq!(field(&pinfo, "role").as_deref(), Some("master"));
    assert_eq!(field(&pinfo, "connected_slaves").as_deref(), Some("1"));
    let slave0 = field(&pinfo, "slave0").unwrap();
    assert!(
        slave0.starts_with(&format!(
            "ip=127.0.0.1,port={},state=online,offset=",
            replica.port
        )),
        "{slave0}"
    );
    let run_id = field(&info(&mut p, "server"), "run_id").unwrap();
    assert_eq!(run_id.len(), 40);
    assert!(run_id.bytes().all(|b| b.is_ascii_hexdigit()));
    let rinfo = info(&mut r, "replication");
    for (name, want) in [
        ("role", "slave"),
        ("master_host", "127.0.0.1"),
        ("master_link_status", "up"),
        ("master_sync_in_progress", "0"),
        ("slave_priority", "100"),
        ("slave_read_only", "1"),
    ] {
        assert_eq!(
            field(&rinfo, name).as_deref(),
            Some(want),
            "{name} in\n{rinfo}"
        );
    }
    // The replica has applied every byte the primary streamed.
    assert_eq!(
        field(&rinfo, "slave_repl_offset"),
        field(&info(&mut p, "replication"), "master_repl_offset")
    );
    let role: redis::Value = redis::cmd("ROLE").query(&mut r).unwrap();
    let text = format!("{role:?}");
    assert!(
        text.contains("slave") && text.contains("connected"),
        "{text}"
    );
}

#[test]
fn replica_serves_reads_and_refuses_writes() {
    let primary = Sluice::start();
    let mut p = primary.client();
    rl_check(&mut p, &["k", "5", "1h", "COST", "2"]).unwrap();
    let _: () = redis::cmd("SET").arg("c").arg(1).query(&mut p).unwrap();
    let replica = replica_of(&primary, &[]);
    let mut r = replica.client();
    assert!(holds_within(20, || link_up(&mut r) && dbsize(&mut r) == 2));

    assert_eq!(rl_check(&mut r, &["k", "5", "1h", "DRY"]).unwrap()[2], 2);
    assert_eq!(
        rl_check(&mut r, &["k", "5", "1h", "COST", "0"]).unwrap()[2],
        3
    );
    let v: String = redis::cmd("GET").arg("c").query(&mut r).unwrap();
    assert_eq!(v, "1");
    let pttl: i64 = redis::cmd("PTTL").arg("k").query(&mut r).unwrap();
    assert!(pttl > 0);
    for cmd in [
        vec!["RL.CHECK", "k", "5", "1h"],
        vec!["SET", "c", "2"],
        vec!["INCR", "c"],
        vec!["DEL", "k"],
        vec!["EXPIRE", "k", "5"],
        vec!["FLUSHALL"],
        vec!["CL.THROTTLE", "k2", "5", "5", "60"],
    ] {
        let mut c = redis::cmd(cmd[0]);
        for a in &cmd[1..] {
            c.arg(*a);
        }
        let e = c.query::<redis::Value>(&mut r).unwrap_err();
        assert_eq!(
            err_text(e),
            "READONLY You can't write against a read only replica.",
            "{cmd:?}"
        );
    }
    // Nothing changed.
    assert_eq!(rl_check(&mut r, &["k", "5", "1h", "DRY"]).unwrap()[2], 2);
    assert_eq!(dbsize(&mut r), 2);
    let e = redis::cmd("WAIT")
        .arg(0)
        .arg(0)
        .query::<i64>(&mut r)
        .unwrap_err();
    assert!(err_text(e).contains("WAIT cannot be used with replica instances"));
}

#[test]
fn short_disconnect_resyncs_partially_and_overrun_resyncs_fully() {
    let primary = Sluice::start_with(&["--repl-backlog-size", "64kb"]);
    let mut p = primary.client();
    let replica = replica_of(&primary, &[]);
    let mut r = replica.client();
    assert!(holds_within(20, || link_up(&mut r)));
    preload(&mut p, "a", 100);
    assert_eq!(wait(&mut p, 1), 1);

    // A short disconnect: the replica continues from the backlog.
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut p)
        .unwrap();
    assert_eq!(killed, 1);
    preload(&mut p, "b", 100);
    assert!(holds_within(20, || {
        field(&info(&mut p, "stats"), "sync_partial_ok").as_deref() == Some("1") && link_up(&mut r)
    }));
    assert_eq!(wait(&mut p, 1), 1);
    assert_eq!(dbsize(&mut r), 200);
    assert!(replica.wait_for_log("partial resynchronization accepted"));

    // A replica that is away while more than the backlog is written must sync in full.
    replica.signal(libc::SIGSTOP);
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut p)
        .unwrap();
    // About 200 kB of records in several flushes (WAIT 0 flushes at once), over the 64 kB
    // backlog: its oldest chunks go.
    for part in 0..4 {
        preload(&mut p, &format!("c{part}"), 1_250);
        let _: i64 = redis::cmd("WAIT").arg(0).arg(0).query(&mut p).unwrap();
    }
    replica.signal(libc::SIGCONT);
    let count = |c: &mut Connection, name: &str| -> u64 {
        field(&info(c, "stats"), name).map_or(0, |v| v.parse().unwrap_or(0))
    };
    assert!(
        holds_within(30, || count(&mut p, "sync_full") >= 2 && link_up(&mut r)),
        "no full resync after the backlog was overrun: {}\n{}",
        primary.log(),
        replica.log()
    );
    assert_eq!(wait(&mut p, 1), 1);
    assert_eq!(dbsize(&mut r), 5_200);
    let stats = info(&mut p, "stats");
    assert_eq!(
        field(&stats, "sync_partial_err").as_deref(),
        Some("1"),
        "{stats}"
    );
}

#[test]
fn promotion_keeps_buckets_and_old_primary_rejoins() {
    let primary = Sluice::start();
    let mut p = primary.client();
    rl_check(&mut p, &["hot", "10", "1d", "COST", "4"]).unwrap();
    let replica = replica_of(&primary, &[]);
    let mut r = replica.client();
    assert!(holds_within(20, || link_up(&mut r) && dbsize(&mut r) == 1));
    let old_replid = field(&info(&mut r, "replication"), "master_replid").unwrap();

    let ok: String = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    assert_eq!(ok, "OK");
    let rinfo = info(&mut r, "replication");
    assert_eq!(field(&rinfo, "role").as_deref(), Some("master"));
    assert_eq!(
        field(&rinfo, "master_replid2").as_deref(),
        Some(old_replid.as_str())
    );
    assert_ne!(
        field(&rinfo, "master_replid").as_deref(),
        Some(old_replid.as_str())
    );
    // Every bucket kept, and writes accepted now.
    assert_eq!(rl_check(&mut r, &["hot", "10", "1d"]).unwrap()[2], 5);

    // The old primary follows the new one and gets its state, not a fresh quota.
    let ok: String = redis::cmd("SLAVEOF")
        .arg("127.0.0.1")
        .arg(replica.port)
        .query(&mut p)
        .unwrap();
    assert_eq!(ok, "OK");
    let again: String = redis::cmd("SLAVEOF")
        .arg("127.0.0.1")
        .arg(replica.port)
        .query(&mut p)
        .unwrap();
    assert_eq!(again, "OK Already connected to specified master");
    assert!(holds_within(20, || link_up(&mut p)), "{}", primary.log());
    assert_eq!(wait(&mut r, 1), 1);
    // 10 - 4 - 1 taken; DRY shows what would be left after one more.
    assert_eq!(rl_check(&mut p, &["hot", "10", "1d", "DRY"]).unwrap()[2], 4);
    let e = rl_check(&mut p, &["hot", "10", "1d"]).unwrap_err();
    assert!(err_text(e).starts_with("READONLY"));
}

#[test]
fn bad_targets_and_garbage_streams_leave_the_node_serving() {
    let node = Sluice::start();
    let mut c = node.client();
    rl_check(&mut c, &["mine", "5", "1h"]).unwrap();

    // Itself.
    let e = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(node.port)
        .query::<String>(&mut c)
        .unwrap_err();
    assert!(err_text(e).contains("can't replicate from myself"));
    assert_eq!(
        field(&info(&mut c, "replication"), "role").as_deref(),
        Some("master")
    );
    let e = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(70000)
        .query::<String>(&mut c)
        .unwrap_err();
    assert!(err_text(e).contains("Invalid master port"));

    // Nobody listening: the link stays down, reads go on.
    let dead = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    drop(dead);
    let _: String = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(dead_port)
        .query(&mut c)
        .unwrap();
    assert!(holds_within(10, || {
        let i = info(&mut c, "replication");
        field(&i, "master_link_status").as_deref() == Some("down")
            && field(&i, "master_link_down_since_seconds").is_some()
    }));
    assert_eq!(rl_check(&mut c, &["mine", "5", "1h", "DRY"]).unwrap()[2], 3);

    // A "primary" that answers the handshake, then sends a snapshot that is garbage.
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_port = fake.local_addr().unwrap().port();
    let _: String = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(fake_port)
        .query(&mut c)
        .unwrap();
    fake.set_nonblocking(false).unwrap();
    let (mut s, _) = fake.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    // PING, REPLCONF x2, TIME and INFO answered (a TIME that is not one leaves the clocks
    // taken as agreeing, an INFO that is not one says nothing of the primary's streams);
    // PSYNC gets a full resync with a corrupt payload.
    for reply in ["+PONG\r\n", "+OK\r\n", "+OK\r\n", "+OK\r\n", "+OK\r\n"] {
        let n = s.read(&mut buf).unwrap();
        seen.extend_from_slice(&buf[..n]);
        s.write_all(reply.as_bytes()).unwrap();
    }
    let n = s.read(&mut buf).unwrap();
    seen.extend_from_slice(&buf[..n]);
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(
        text.contains("listening-port") && text.contains(sluice_repl::CAPA),
        "{text}"
    );
    assert!(text.contains("PSYNC"), "{text}");
    s.write_all(format!("+FULLRESYNC {} 0\r\n$12\r\nnot-a-snapsh", "a".repeat(40)).as_bytes())
        .unwrap();
    assert!(node.wait_for_log("snapshot refused"), "{}", node.log());
    drop(s);

    // Again, with a valid empty snapshot and then a garbage record in the stream.
    let (mut s, _) = fake.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for reply in ["+PONG\r\n", "+OK\r\n", "+OK\r\n", "+OK\r\n", "+OK\r\n"] {
        let _ = s.read(&mut buf).unwrap();
        s.write_all(reply.as_bytes()).unwrap();
    }
    let _ = s.read(&mut buf).unwrap();
    let empty = sluice_repl::SnapshotWriter::new().finish();
    s.write_all(format!("+FULLRESYNC {} 0\r\n${}\r\n", "b".repeat(40), empty.len()).as_bytes())
        .unwrap();
    s.write_all(&empty).unwrap();
    assert!(node.wait_for_log("up: streaming"), "{}", node.log());
    s.write_all(&[9, 0, 0, 0, 0xee, 1, 2, 3, 4, 5, 6, 7, 8])
        .unwrap();
    assert!(
        node.wait_for_log("bad record from the primary"),
        "{}",
        node.log()
    );
    drop(s);
    // The node survived; the bad snapshot loaded nothing (the good empty one replaced the
    // store, as a full sync does).
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(dbsize(&mut c), 0);

    // A real primary refuses a client that is not a Sluice replica.
    let _: String = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut c)
        .unwrap();
    let e = redis::cmd("PSYNC")
        .arg("?")
        .arg(-1)
        .query::<String>(&mut c)
        .unwrap_err();
    assert!(err_text(e).contains("only a Sluice replica"));
}

#[test]
fn replica_that_stops_reading_is_cut_and_resyncs() {
    let primary = Sluice::start_with(&["--client-output-buffer-limit-replica", "256kb"]);
    let mut p = primary.client();
    let replica = replica_of(&primary, &[]);
    let mut r = replica.client();
    assert!(holds_within(20, || link_up(&mut r)));
    replica.signal(libc::SIGSTOP);
    // More than the kernel's socket buffers and the limit together.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut batch = 0;
    while !primary.log().contains("replica output buffer limit") && Instant::now() < deadline {
        preload(&mut p, &format!("flood{batch}"), 20_000);
        batch += 1;
    }
    replica.signal(libc::SIGCONT);
    assert!(
        primary.log().contains("replica output buffer limit"),
        "{}",
        primary.log()
    );
    // The primary never stalled, and the replica comes back whole.
    assert!(holds_within(60, || link_up(&mut r) && dbsize(&mut r) == dbsize(&mut p)));
}

#[test]
fn pubsub_fans_out_across_connections_in_both_protocols() {
    let node = Sluice::start_with(&["--threads", "2"]);
    let mut sub2 = node.raw();
    sub2.write_all(b"SUBSCRIBE __sentinel__:hello other\r\n")
        .unwrap();
    let confirm = sluice_tests::read_exact_str(
        &mut sub2,
        "*3\r\n$9\r\nsubscribe\r\n$18\r\n__sentinel__:hello\r\n:1\r\n".len()
            + "*3\r\n$9\r\nsubscribe\r\n$5\r\nother\r\n:2\r\n".len(),
    );
    assert_eq!(
        confirm,
        "*3\r\n$9\r\nsubscribe\r\n$18\r\n__sentinel__:hello\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$5\r\nother\r\n:2\r\n"
    );
    let mut sub3 = node.raw();
    sub3.write_all(b"HELLO 3\r\n").unwrap();
    let mut hello = [0u8; 4096];
    let _ = sub3.read(&mut hello).unwrap();
    sub3.write_all(b"PSUBSCRIBE __sentinel__:*\r\n").unwrap();
    let confirm = sluice_tests::read_exact_str(
        &mut sub3,
        ">3\r\n$10\r\npsubscribe\r\n$14\r\n__sentinel__:*\r\n:1\r\n".len(),
    );
    assert!(confirm.starts_with(">3\r\n$10\r\npsubscribe"), "{confirm}");

    // A subscribed RESP2 connection may only (un)subscribe, PING, QUIT, RESET.
    sub2.write_all(b"GET x\r\nPING\r\n").unwrap();
    let err = "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n";
    let pong = "*2\r\n$4\r\npong\r\n$0\r\n\r\n";
    assert_eq!(
        sluice_tests::read_exact_str(&mut sub2, err.len() + pong.len()),
        format!("{err}{pong}")
    );

    let mut publisher = node.client();
    let n: i64 = redis::cmd("PUBLISH")
        .arg("__sentinel__:hello")
        .arg("127.0.0.1,26379,abc,0")
        .query(&mut publisher)
        .unwrap();
    assert_eq!(n, 2);
    let msg =
        "*3\r\n$7\r\nmessage\r\n$18\r\n__sentinel__:hello\r\n$21\r\n127.0.0.1,26379,abc,0\r\n";
    assert_eq!(sluice_tests::read_exact_str(&mut sub2, msg.len()), msg);
    let pmsg = ">4\r\n$8\r\npmessage\r\n$14\r\n__sentinel__:*\r\n$18\r\n__sentinel__:hello\r\n$21\r\n127.0.0.1,26379,abc,0\r\n";
    assert_eq!(sluice_tests::read_exact_str(&mut sub3, pmsg.len()), pmsg);

    // UNSUBSCRIBE with no channel drops them all; then the connection is normal again.
    sub2.write_all(b"UNSUBSCRIBE\r\nPING\r\n").unwrap();
    let want = "*3\r\n$11\r\nunsubscribe\r\n$18\r\n__sentinel__:hello\r\n:1\r\n*3\r\n$11\r\nunsubscribe\r\n$5\r\nother\r\n:0\r\n+PONG\r\n";
    assert_eq!(sluice_tests::read_exact_str(&mut sub2, want.len()), want);
    drop(sub3);
    assert!(holds_within(5, || {
        redis::cmd("PUBLISH")
            .arg("__sentinel__:hello")
            .arg("x")
            .query::<i64>(&mut publisher)
            .unwrap()
            == 0
    }));
}

#[test]
fn sentinel_reconfiguration_block_is_queued_whole() {
    let primary = Sluice::start();
    let replica = replica_of(&primary, &[]);
    let mut r = replica.client();
    assert!(holds_within(20, || link_up(&mut r)));
    // What Sentinel pipelines at a failover; every command must be QUEUED, none refused.
    let mut s = replica.raw();
    s.write_all(
        b"MULTI\r\nSLAVEOF NO ONE\r\nCONFIG REWRITE\r\nCLIENT KILL TYPE normal\r\nCLIENT KILL TYPE pubsub\r\nEXEC\r\n",
    )
    .unwrap();
    let want = "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*4\r\n+OK\r\n-ERR The server is running without a config file\r\n:1\r\n:0\r\n";
    assert_eq!(sluice_tests::read_exact_str(&mut s, want.len()), want);
    assert!(holds_within(5, || {
        let mut c = replica.client();
        field(&info(&mut c, "replication"), "role").as_deref() == Some("master")
    }));
    // SHUTDOWN is refused inside MULTI, and EXEC then aborts: the node lives.
    s.write_all(b"MULTI\r\nSHUTDOWN\r\nEXEC\r\nPING\r\n")
        .unwrap();
    let want = "+OK\r\n-ERR Command not allowed inside a transaction\r\n-EXECABORT Transaction discarded because of previous errors.\r\n+PONG\r\n";
    assert_eq!(sluice_tests::read_exact_str(&mut s, want.len()), want);
}

#[test]
fn replica_authenticates_with_masterauth() {
    let primary = Sluice::start_with(&["--requirepass", "s3cret"]);
    let wrong = replica_of(&primary, &["--masterauth", "nope"]);
    assert!(wrong.wait_for_log("refused AUTH"), "{}", wrong.log());
    let mut w = wrong.client();
    assert_eq!(
        field(&info(&mut w, "replication"), "master_link_status").as_deref(),
        Some("down")
    );
    let right = replica_of(&primary, &["--masterauth", "s3cret"]);
    let mut r = right.client();
    assert!(holds_within(20, || link_up(&mut r)), "{}", right.log());
}

/// A primary killed and restarted from a snapshot older than what its replica holds: the
/// replica refuses the full sync that would wipe its newer buckets (and says why), and the
/// primary says which replica is ahead of it. Without the refusal, every unit spent after the
/// snapshot would be handed out again by both.
#[test]
fn a_primary_restarted_from_an_old_snapshot_does_not_wipe_a_replica_ahead_of_it() {
    let dir = sluice_tests::TempDir::new("restart-behind");
    let dir_arg = dir.path().to_str().unwrap().to_string();
    let mut primary = Sluice::start_with(&["--dir", &dir_arg]);
    let port = primary.port;
    let replica = replica_of(&primary, &[]);
    let mut p = primary.client();
    let mut r = replica.client();
    assert!(holds_within(20, || link_up(&mut r)));
    rl_check(&mut p, &["k", "100", "1d", "COST", "10"]).unwrap();
    assert_eq!(wait(&mut p, 1), 1);
    let () = redis::cmd("SAVE").query(&mut p).unwrap();
    rl_check(&mut p, &["k", "100", "1d", "COST", "50"]).unwrap();
    assert_eq!(wait(&mut p, 1), 1);
    assert_eq!(rl_check(&mut r, &["k", "100", "1d", "DRY"]).unwrap()[2], 39);
    // kill -9: no final save, so the snapshot on disk holds only the first 10.
    primary.signal(libc::SIGKILL);
    assert!(primary.wait_exit(Duration::from_secs(10)).is_some());
    let restarted = Sluice::start_on(port, &["--dir", &dir_arg]);
    assert!(
        replica.wait_for_log("refusing a full sync: the primary restarted from a snapshot"),
        "{}",
        replica.log()
    );
    assert!(
        restarted.wait_for_log("ahead of this node"),
        "{}",
        restarted.log()
    );
    let mut p = restarted.client();
    assert_eq!(
        rl_check(&mut p, &["k", "100", "1d", "DRY"]).unwrap()[2],
        89,
        "the restarted primary holds its snapshot's state"
    );
    assert_eq!(
        rl_check(&mut r, &["k", "100", "1d", "DRY"]).unwrap()[2],
        39,
        "the replica was wiped by the restarted primary"
    );
    // The operator's way to keep the newer buckets: promote the replica, then follow it.
    let () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    let _: String = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(replica.port)
        .query(&mut p)
        .unwrap();
    assert!(holds_within(20, || link_up(&mut p)), "{}", restarted.log());
    assert_eq!(rl_check(&mut p, &["k", "100", "1d", "DRY"]).unwrap()[2], 39);
}
