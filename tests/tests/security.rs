//! The holes of the second security round (issue 24), each shown closed on the real binary:
//! SHUTDOWN before AUTH, a huge timeout that crashed the process, an HTTP request whose body
//! ran as commands, cluster nodes that could not reach each other behind a password, a
//! WAITing client INFO did not count, SPLIT that admitted past the limit through the sidecar,
//! replies that claimed a mode and role the node did not have, and a check latency metric that
//! saw only RL.CHECK.
//!
//! Every wait has a deadline; every process is stopped by its PID when its guard drops.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use sluice_tests::{
    Sentinel, Sluice, TempDir, cluster_node, free_port, http_get, read_to_close, two_shard_cluster,
    wait_until,
};

const PASS: &str = "s3cret";

/// A RESP2 connection that has authenticated with `PASS`.
fn authed(port: u16) -> redis::Connection {
    let c = redis::Client::open(format!("redis://:{PASS}@127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .expect("connect with the password");
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c
}

/// Sends raw bytes on a fresh connection and reads until the server closes it (or 2 s pass).
fn send_raw(server: &Sluice, bytes: &[u8]) -> (String, bool) {
    let mut s = server.raw();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(bytes).unwrap();
    read_to_close(&mut s)
}

#[test]
fn shutdown_needs_authentication() {
    let mut server = Sluice::start_with(&["--requirepass", PASS]);
    let (reply, _) = send_raw(&server, b"SHUTDOWN NOSAVE\r\nQUIT\r\n");
    assert!(reply.starts_with("-NOAUTH"), "{reply:?}");
    let pong: String = redis::cmd("PING").query(&mut authed(server.port)).unwrap();
    assert_eq!(pong, "PONG", "the node still runs");
    // Authenticated, it stops.
    let _ = redis::cmd("SHUTDOWN")
        .arg("NOSAVE")
        .query::<()>(&mut authed(server.port));
    assert!(server.wait_exit(Duration::from_secs(10)).is_some());
}

#[test]
fn huge_timeouts_are_refused_and_the_largest_allowed_is_harmless() {
    let server = Sluice::start();
    let sentinel = Sentinel::write(&server);
    let mut c = server.client();
    for huge in ["9223372036854775807", "2147483648"] {
        let e = redis::cmd("CONFIG")
            .arg(&["SET", "timeout", huge])
            .query::<()>(&mut c)
            .unwrap_err();
        assert!(e.to_string().contains("CONFIG SET failed"), "{e}");
    }
    // The largest value Redis takes: idle connections get a deadline 68 years out. The crash
    // came within a second of the setting, when every connection computed its deadline.
    let ok: String = redis::cmd("CONFIG")
        .arg(&["SET", "timeout", "2147483647"])
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    let idle = server.raw();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        let _: String = redis::cmd("PING").query(&mut c).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(idle);
    sentinel.assert_intact(&server);
    // The same bounds hold for the flags: the process refuses to start, saying why.
    for (flag, value) in [
        ("--timeout", "9223372036854775807"),
        ("--save-interval", "18446744073709551615"),
        ("--repl-timeout", "0"),
    ] {
        let out = std::process::Command::new(sluice_tests::binary())
            .args(["--port", "0", flag, value])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
}

#[test]
fn http_requests_are_dropped_before_their_body_runs() {
    let server = Sluice::start();
    let mut c = server.client();
    let _: () = redis::cmd("SET").arg(&["kept", "1"]).query(&mut c).unwrap();
    // What a web page's form POST to a loopback port sends: the request line, headers, a blank
    // line, then a body of commands.
    for request in [
        &b"POST / HTTP/1.1\r\nHost: localhost\r\n\r\nFLUSHALL\r\n"[..],
        b"Host: localhost\r\n\r\nFLUSHALL\r\n",
        b"post /x HTTP/1.0\r\n\r\nFLUSHALL\r\n",
    ] {
        let (reply, closed) = send_raw(&server, request);
        assert!(closed, "the connection is closed");
        assert_eq!(reply, "", "no reply, nothing run");
    }
    let kept: Option<String> = redis::cmd("GET").arg("kept").query(&mut c).unwrap();
    assert_eq!(kept.as_deref(), Some("1"), "FLUSHALL never ran");
    assert!(server.wait_for_log("Possible SECURITY ATTACK detected"));
    // A POST inside a valid pipeline stops the pipeline there, too.
    let (reply, closed) = send_raw(&server, b"PING\r\nPOST /\r\nFLUSHALL\r\n");
    assert_eq!((reply.as_str(), closed), ("+PONG\r\n", true));
    let kept: Option<String> = redis::cmd("GET").arg("kept").query(&mut c).unwrap();
    assert_eq!(kept.as_deref(), Some("1"));
}

#[test]
fn a_waiting_client_counts_as_blocked() {
    let server = Sluice::start();
    let mut waiter = server.raw();
    // No replica will ever ack: WAIT 1 0 blocks until the client goes away.
    waiter.write_all(b"WAIT 1 0\r\n").unwrap();
    let blocked = |n: u64| {
        wait_until(Duration::from_secs(10), || {
            (sluice_tests::info_field(server.port, "blocked_clients") == Some(n)).then_some(())
        })
        .is_some()
    };
    assert!(blocked(1), "INFO counts the WAITing client");
    drop(waiter);
    assert!(blocked(0), "and stops counting it when it leaves");
    // A WAIT that times out unblocks by itself.
    let mut timed = server.raw();
    timed.write_all(b"WAIT 1 300\r\n").unwrap();
    let mut reply = [0u8; 4];
    timed.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b":0\r\n");
    assert!(blocked(0));
}

#[test]
fn split_never_admits_past_the_limit_through_the_sidecar() {
    let node = Sluice::start();
    let upstream = format!("127.0.0.1:{}", node.port);
    let proxy = Sluice::start_proxy(&["--upstream", &upstream]);
    let mut c = proxy.client();
    let e = redis::cmd("RL.CHECK")
        .arg(&["whale", "10", "1h", "SPLIT", "1000"])
        .query::<Vec<i64>>(&mut c)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("SPLIT 1000 is more than the limit 10"),
        "{e}"
    );
    // SPLIT 3 of 10: shares 4, 3 and 3. However the 60 checks fall, at most 10 pass.
    let mut allowed = 0;
    for _ in 0..60 {
        let r: Vec<i64> = redis::cmd("RL.CHECK")
            .arg(&["whale", "10", "1h", "SPLIT", "3"])
            .query(&mut c)
            .unwrap();
        allowed += r[0];
    }
    assert!(
        (1..=10).contains(&allowed),
        "{allowed} of 60 allowed on a limit of 10"
    );
}

#[test]
fn check_latency_counts_every_checking_command() {
    let metrics = free_port();
    let server = Sluice::start_with(&["--metrics-port", &metrics.to_string()]);
    let mut c = server.client();
    let _: Vec<i64> = redis::cmd("CL.THROTTLE")
        .arg(&["cell", "5", "10", "60"])
        .query(&mut c)
        .unwrap();
    let _: Vec<redis::Value> = redis::cmd("RL.HITS")
        .arg(&["KEYS", "a", "5", "1m", "b", "5", "1m"])
        .query(&mut c)
        .unwrap();
    let count = wait_until(Duration::from_secs(10), || {
        let body = http_get(metrics, "/metrics")?;
        body.lines()
            .find_map(|l| l.strip_prefix("sluice_check_duration_seconds_count{api=\"resp\"} "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|&n| n >= 2)
    });
    assert_eq!(
        count,
        Some(2),
        "CL.THROTTLE and RL.HITS are timed as checks"
    );
}

/// A cluster behind a password: the nodes fetch and push the table to each other with AUTH
/// (`--masterauth`), HELLO says `mode cluster`, and CLUSTER SHARDS gives offsets and health only
/// for the nodes this node has a link with.
#[test]
fn cluster_nodes_authenticate_to_each_other() {
    let dir = TempDir::new("cluster-auth");
    let config = |i: usize| dir.path().join(format!("nodes-{i}.conf"));
    let flags = ["--requirepass", PASS, "--masterauth", PASS];
    let mut nodes = two_shard_cluster(&dir, &flags, &["--password", PASS]);
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let epoch = |port: u16| -> Option<u64> {
        let text: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut authed(port))
            .ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("cluster_current_epoch:"))
            .and_then(|v| v.trim().parse().ok())
    };
    let agreed = |want: u64, which: &[u16]| {
        wait_until(Duration::from_secs(15), || {
            which.iter().all(|&p| epoch(p) == Some(want)).then_some(())
        })
        .is_some()
    };
    let first = epoch(ports[0]).unwrap();
    assert!(agreed(first, &ports));

    // HELLO on a cluster node; CLUSTER SHARDS from node 0, the primary of node 2 (create pairs
    // nodes 0 and 1 with replicas 2 and 3).
    let hello: redis::Value = redis::cmd("HELLO")
        .arg(&["3", "AUTH", "default", PASS])
        .query(&mut sluice_tests::try_connect(ports[0]).unwrap())
        .unwrap();
    assert!(format!("{hello:?}").contains("cluster"), "{hello:?}");
    let shards = || {
        format!(
            "{:?}",
            redis::cmd("CLUSTER")
                .arg("SHARDS")
                .query::<redis::Value>(&mut authed(ports[0]))
                .unwrap()
        )
    };
    let mut last = String::new();
    let linked = wait_until(Duration::from_secs(15), || {
        last = shards();
        // Node 0 and its replica, once linked; nothing of the other shard.
        (last.matches("health").count() == 2 && last.matches("online").count() == 2).then_some(())
    });
    assert!(linked.is_some(), "{last}");

    // A promoted replica pushes its table to every node: each answers only after AUTH.
    let ok: String = redis::cmd("REPLICAOF")
        .arg(&["NO", "ONE"])
        .query(&mut authed(ports[2]))
        .unwrap();
    assert_eq!(ok, "OK");
    let after_push = first + 1;
    assert!(
        agreed(after_push, &ports),
        "the promotion's table reached every node: {:?}",
        ports.iter().map(|&p| epoch(p)).collect::<Vec<_>>()
    );

    // A node down while the table moves on asks its peers for it when it starts.
    let stopped = ports[3];
    nodes[3].signal(libc::SIGTERM);
    assert!(nodes[3].wait_exit(Duration::from_secs(10)).is_some());
    let table: String = redis::cmd("CLUSTER")
        .arg("GETTABLE")
        .query(&mut authed(ports[0]))
        .unwrap();
    let newer = table.replace(
        &format!("epoch {after_push}"),
        &format!("epoch {}", after_push + 1),
    );
    for &p in &ports[..3] {
        let ok: String = redis::cmd("CLUSTER")
            .arg(&["SETTABLE", &newer])
            .query(&mut authed(p))
            .unwrap();
        assert_eq!(ok, "OK");
    }
    nodes[3] = cluster_node(stopped, &config(3), &flags);
    assert!(
        nodes[3].wait_for_log(&format!(
            "Adopted a newer table (epoch {}) from a peer",
            after_push + 1
        )),
        "{}",
        nodes[3].log()
    );
    assert!(!nodes[3].log().contains("NOAUTH"), "{}", nodes[3].log());
}

/// Found by reading the code for more of the same kind: a pattern deep enough to overflow a
/// worker's stack in the recursive matcher, one that backtracked exponentially while holding
/// the pub/sub registry, and a pipeline or transaction whose replies grew past the output limit
/// before the limit was looked at.
#[test]
fn hostile_patterns_and_huge_replies_neither_crash_nor_stall() {
    let server = Sluice::start_with(&["--client-output-buffer-limit", "1mb"]);
    let sentinel = Sentinel::write(&server);
    let bulk = |s: &[u8]| {
        [
            format!("${}\r\n", s.len()).into_bytes(),
            s.to_vec(),
            b"\r\n".to_vec(),
        ]
        .concat()
    };
    let request = |args: &[&[u8]]| {
        let mut r = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            r.extend(bulk(a));
        }
        r
    };
    let deep = b"*a".repeat(100_000);
    let steep = b"*a*a*a*a*a*a*a*b".to_vec();
    let mut subscriber = server.raw();
    subscriber
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    subscriber
        .write_all(&request(&[b"PSUBSCRIBE", &deep, &steep]))
        .unwrap();
    // Both confirmations arrive: the patterns are registered.
    let confirmations = [
        request(&[b"psubscribe", &deep]),
        request(&[b"psubscribe", &steep]),
    ];
    let want: usize = confirmations.iter().map(|c| c.len() + 4).sum();
    let mut got = vec![0; want];
    subscriber.read_exact(&mut got).unwrap();
    assert!(
        got.ends_with(b":2\r\n"),
        "{:?}",
        String::from_utf8_lossy(&got[got.len() - 20..])
    );
    let mut c = server.client();
    let channel = vec![b'a'; 100_000];
    let received: i64 = redis::cmd("PUBLISH")
        .arg(&channel)
        .arg("x")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        received, 1,
        "the deep pattern matches, the steep one does not"
    );
    drop(subscriber);

    // 100,000 COMMANDs (each reply ~4 KB): a pipeline, then the same inside MULTI. Either
    // would have built ~400 MB of replies before the output limit was checked.
    let before = server.rss();
    for body in [
        b"COMMAND\r\n".repeat(100_000),
        [
            b"MULTI\r\n".to_vec(),
            b"COMMAND\r\n".repeat(100_000),
            b"EXEC\r\n".to_vec(),
        ]
        .concat(),
    ] {
        let mut s = server.raw();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(&body).unwrap();
        let (_, closed) = read_to_close(&mut s);
        assert!(closed, "a client past the output limit is closed");
        let grown = server.rss().saturating_sub(before);
        assert!(grown < 100 << 20, "RSS grew by {grown} bytes");
    }
    sentinel.assert_intact(&server);
}
