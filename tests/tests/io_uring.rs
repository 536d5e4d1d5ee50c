//! The io_uring connection loop (`--io uring`) end to end: the same behaviour as the epoll
//! loop for checks, pipelines, split and large frames, transactions, the connections it hands
//! back to the epoll loop (WAIT, SUBSCRIBE, PSYNC), the client limits, CLIENT KILL, SHUTDOWN,
//! many connections and redis-benchmark traffic; and the fallback to epoll where io_uring
//! cannot be had.
//!
//! The rest of the suite runs on this loop too, as it is the default; scripts/test.sh runs a
//! part of it again on `--io epoll` (`SLUICE_TEST_IO=epoll`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use sluice_tests::{
    Sentinel, Sluice, have_tool, read_exact_str, read_to_close, redis_benchmark, rl_check,
    wait_until,
};

/// A node on the io_uring loop, which says so in its log. Where the kernel or a container
/// forbids io_uring the node says that instead and serves with epoll: the tests then check
/// the fallback serves the same, and say so.
fn uring(extra: &[&str]) -> Sluice {
    let mut args = vec!["--io", "uring"];
    args.extend_from_slice(extra);
    let server = Sluice::start_with(&args);
    let log = server.log();
    if log.contains("io_uring is not available") {
        eprintln!("NOTE: io_uring is not permitted here; this test ran on the epoll fallback");
    } else {
        assert!(
            log.contains("io_uring connection loop"),
            "the node runs the io_uring loop: {log}"
        );
    }
    server
}

fn q<T: redis::FromRedisValue>(c: &mut redis::Connection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c).unwrap()
}

#[test]
fn rl_check_decides_as_on_epoll() {
    let server = uring(&[]);
    let mut c = server.client();
    for used in 1..=3 {
        let r = rl_check(&mut c, &["k", "3", "60"]).unwrap();
        assert_eq!(&r[..3], &[1, 3, 3 - used]);
    }
    let r = rl_check(&mut c, &["k", "3", "60"]).unwrap();
    assert_eq!(r[0], 0, "the fourth check is limited: {r:?}");
    let e = rl_check(&mut c, &["k", "x", "60"]).unwrap_err();
    assert!(e.to_string().contains("limit must be"), "{e}");
    assert_eq!(
        q::<String>(&mut c, &["PING"]),
        "PONG",
        "the connection goes on"
    );
    let io: Vec<String> = q(&mut c, &["CONFIG", "GET", "io"]);
    assert_eq!(io, ["io", "uring"]);
}

#[test]
fn a_pipeline_gets_every_reply_in_order_in_one_write() {
    let server = uring(&[]);
    let mut s = server.raw();
    let mut batch = Vec::new();
    for i in 0..200 {
        batch.extend_from_slice(format!("ECHO m{i:03}\r\n").as_bytes());
    }
    s.write_all(&batch).unwrap();
    let expected: String = (0..200).map(|i| format!("$4\r\nm{i:03}\r\n")).collect();
    assert_eq!(read_exact_str(&mut s, expected.len()), expected);
}

#[test]
fn frames_split_across_reads_and_larger_than_a_read_are_whole() {
    let server = uring(&[]);
    let mut s = server.raw();
    s.set_nodelay(true).unwrap();
    // Byte by byte: every read ends inside a frame.
    for b in b"*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n" {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(read_exact_str(&mut s, 11), "$5\r\nhello\r\n");
    // 3 MB in one frame: many reads, the buffer grows.
    let big = "v".repeat(3 << 20);
    let frame = format!(
        "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${}\r\n{big}\r\n",
        big.len()
    );
    s.write_all(frame.as_bytes()).unwrap();
    assert_eq!(read_exact_str(&mut s, 5), "+OK\r\n");
    let mut c = server.client();
    let got: String = q(&mut c, &["GET", "big"]);
    assert_eq!(got.len(), big.len());
}

#[test]
fn multi_exec_and_protocol_errors_behave_as_on_epoll() {
    let server = uring(&[]);
    let mut c = server.client();
    let (a, b): (Vec<i64>, Vec<i64>) = redis::pipe()
        .atomic()
        .cmd("RL.CHECK")
        .arg("t")
        .arg(5)
        .arg(60)
        .cmd("RL.CHECK")
        .arg("t")
        .arg(5)
        .arg(60)
        .query(&mut c)
        .unwrap();
    assert_eq!((a[2], b[2]), (4, 3));
    let mut s = server.raw();
    s.write_all(b"PING\r\n*1\r\n$x\r\n").unwrap();
    let (text, closed) = read_to_close(&mut s);
    assert!(text.starts_with("+PONG\r\n-ERR Protocol error"), "{text}");
    assert!(closed, "a framing error closes the connection");
    let mut s = server.raw();
    s.write_all(b"PING\r\nQUIT\r\nPING\r\n").unwrap();
    let (text, closed) = read_to_close(&mut s);
    assert_eq!(text, "+PONG\r\n+OK\r\n");
    assert!(closed);
}

/// Whole multibulk frames run where they lie in the read buffer; everything around them (a
/// frame cut by the read, `*0`, a blank line, an inline command, `*-1`, a framing error) is
/// read as before, in order, once.
#[test]
fn frames_read_in_place_mix_with_every_other_framing() {
    let server = uring(&[]);
    let mut s = server.raw();
    s.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$4\r\nINCR\r\n$1\r\na\r\n")
        .unwrap();
    s.write_all(b"*2\r\n$4\r\nECHO\r\n$5\r\nhel").unwrap();
    assert_eq!(read_exact_str(&mut s, 5 + 4), "+OK\r\n:2\r\n");
    s.write_all(b"lo\r\n").unwrap();
    assert_eq!(read_exact_str(&mut s, 11), "$5\r\nhello\r\n");
    s.write_all(
        b"*2\r\n$4\r\nINCR\r\n$1\r\na\r\n*0\r\n\r\nINCR a\r\n*-1\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\n",
    )
    .unwrap();
    assert_eq!(read_exact_str(&mut s, 4 + 4 + 7), ":3\r\n:4\r\n$1\r\n4\r\n");
    s.write_all(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$1\r\ny\r\n*abc\r\n*1\r\n$4\r\nPING\r\n")
        .unwrap();
    let (text, closed) = read_to_close(&mut s);
    assert!(
        text.starts_with("+PONG\r\n$1\r\ny\r\n-ERR Protocol error"),
        "{text}"
    );
    assert!(
        !text.ends_with("+PONG\r\n"),
        "nothing runs after the error: {text}"
    );
    assert!(closed, "a framing error closes the connection");
}

#[test]
fn subscribe_goes_on_in_the_epoll_loop_with_what_followed_it() {
    let server = uring(&[]);
    let mut sub = server.raw();
    // SUBSCRIBE and a PING behind it in one write: both answered, in order.
    sub.write_all(b"SUBSCRIBE news\r\nPING\r\n").unwrap();
    let confirm = "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n";
    let pong = "*2\r\n$4\r\npong\r\n$0\r\n\r\n";
    assert_eq!(
        read_exact_str(&mut sub, confirm.len() + pong.len()),
        format!("{confirm}{pong}")
    );
    let mut c = server.client();
    let n: i64 = q(&mut c, &["PUBLISH", "news", "hi"]);
    assert_eq!(n, 1);
    let msg = "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n";
    assert_eq!(read_exact_str(&mut sub, msg.len()), msg);
}

#[test]
fn wait_blocks_then_answers_and_the_requests_behind_it_run_after() {
    let primary = uring(&[]);
    let to = format!("127.0.0.1:{}", primary.port);
    let replica = Sluice::start_with(&["--io", "uring", "--replicaof", &to]);
    let mut c = primary.client();
    let mut r = replica.client();
    let linked = wait_until(Duration::from_secs(10), || {
        let info: String = q(&mut r, &["INFO", "replication"]);
        info.contains("master_link_status:up").then_some(())
    });
    assert!(linked.is_some(), "the replica links (PSYNC hands it over)");
    let mut s = primary.raw();
    s.write_all(b"SET a 1\r\nWAIT 1 5000\r\nGET a\r\n").unwrap();
    assert_eq!(
        read_exact_str(&mut s, 5 + 4 + 7),
        "+OK\r\n:1\r\n$1\r\n1\r\n"
    );
    // The same as frames read in place, with a frame cut after them that the epoll loop
    // completes.
    s.write_all(
        b"*3\r\n$3\r\nSET\r\n$1\r\nw\r\n$1\r\n0\r\n*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$4\r\n5000\r\n",
    )
    .unwrap();
    s.write_all(b"*2\r\n$4\r\nINCR\r\n$1\r\nw\r\n*2\r\n$4\r\nINCR\r\n$1\r\nw\r\n*2\r\n$4\r\nECHO\r\n$2\r\nz")
        .unwrap();
    assert_eq!(
        read_exact_str(&mut s, 5 + 4 + 4 + 4),
        "+OK\r\n:1\r\n:1\r\n:2\r\n"
    );
    s.write_all(b"z\r\n").unwrap();
    assert_eq!(read_exact_str(&mut s, 8), "$2\r\nzz\r\n");
    // A WAIT no replica can satisfy times out with the count it has.
    let started = Instant::now();
    let n: i64 = q(&mut c, &["WAIT", "2", "200"]);
    assert_eq!(n, 1);
    assert!(started.elapsed() >= Duration::from_millis(200));
    let got = wait_until(Duration::from_secs(10), || {
        let v: Option<String> = q(&mut r, &["GET", "a"]);
        v
    });
    assert_eq!(got.as_deref(), Some("1"), "the write reached the replica");
}

#[test]
fn client_kill_closes_a_connection_on_the_ring() {
    let server = uring(&[]);
    let mut killer = server.client();
    let mut victim = server.raw();
    victim.write_all(b"CLIENT ID\r\n").unwrap();
    let mut buf = [0u8; 64];
    let n = victim.read(&mut buf).unwrap();
    let id = std::str::from_utf8(&buf[1..n]).unwrap().trim().to_string();
    let killed: i64 = q(&mut killer, &["CLIENT", "KILL", "ID", &id]);
    assert_eq!(killed, 1);
    victim
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(
        victim.read(&mut buf).unwrap(),
        0,
        "the victim sees the close"
    );
    assert_eq!(q::<String>(&mut killer, &["PING"]), "PONG");
}

#[test]
fn the_query_buffer_limit_and_the_idle_timeout_close_clients_on_the_ring() {
    let server = uring(&["--client-query-buffer-limit", "1mb", "--timeout", "1"]);
    let sentinel = Sentinel::write(&server);
    let mut s = server.raw();
    s.write_all(b"*2\r\n$4\r\nECHO\r\n$10000000\r\n").unwrap();
    let chunk = vec![b'y'; 64 * 1024];
    let mut closed = (0..100).any(|_| s.write_all(&chunk).is_err());
    if !closed {
        closed = read_to_close(&mut s).1;
    }
    assert!(closed);
    assert!(
        server.wait_for_log("query buffer limit"),
        "{}",
        server.log()
    );
    // About real time: the timeout is one second.
    let mut idle = server.raw();
    let started = Instant::now();
    let (_, closed) = read_to_close(&mut idle);
    assert!(closed, "the idle client is closed");
    assert!(started.elapsed() >= Duration::from_millis(900));
    sentinel.assert_intact(&server);
}

#[test]
fn a_client_that_does_not_read_hits_the_output_buffer_limit() {
    let server = uring(&["--client-output-buffer-limit", "1mb"]);
    let mut s = server.raw();
    let value = "x".repeat(512 * 1024);
    let set = format!(
        "*3\r\n$3\r\nSET\r\n$1\r\nv\r\n${}\r\n{value}\r\n",
        value.len()
    );
    s.write_all(set.as_bytes()).unwrap();
    assert_eq!(read_exact_str(&mut s, 5), "+OK\r\n");
    // GETs it never reads: the socket fills, then the replies owed pass the limit.
    let gets = "GET v\r\n".repeat(64);
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    for _ in 0..20 {
        if s.write_all(gets.as_bytes()).is_err() {
            break;
        }
    }
    assert!(
        server.wait_for_log("output buffer limit"),
        "{}",
        server.log()
    );
    let mut c = server.client();
    assert_eq!(q::<String>(&mut c, &["PING"]), "PONG");
}

#[test]
fn many_connections_each_get_their_own_replies() {
    let server = uring(&["--threads", "2"]);
    let port = server.port;
    std::thread::scope(|scope| {
        for t in 0..8 {
            scope.spawn(move || {
                let mut conns: Vec<TcpStream> = (0..50)
                    .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
                    .collect();
                for round in 0..5 {
                    for (i, s) in conns.iter_mut().enumerate() {
                        let msg = format!("t{t}c{i:02}r{round}");
                        s.write_all(format!("ECHO {msg}\r\n").as_bytes()).unwrap();
                    }
                    for (i, s) in conns.iter_mut().enumerate() {
                        let msg = format!("t{t}c{i:02}r{round}");
                        let want = format!("${}\r\n{msg}\r\n", msg.len());
                        assert_eq!(read_exact_str(s, want.len()), want);
                    }
                }
            });
        }
    });
    let clients = sluice_tests::info_field(port, "connected_clients");
    assert!(
        clients.is_some_and(|n| n < 400),
        "closed clients are gone: {clients:?}"
    );
}

#[test]
fn redis_benchmark_traffic_is_served() {
    if !have_tool("redis-benchmark") {
        return;
    }
    let server = uring(&["--threads", "2"]);
    let out = redis_benchmark(
        server.port,
        &[
            "-n",
            "20000",
            "-c",
            "20",
            "-P",
            "8",
            "-r",
            "1000",
            "-q",
            "--csv",
            "RL.CHECK",
            "k:__rand_int__",
            "1000000",
            "60",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("RL.CHECK"), "{text}");
    let commands = sluice_tests::info_field(server.port, "total_commands_processed");
    assert!(commands.is_some_and(|n| n >= 20_000), "{commands:?}");
}

#[test]
fn shutdown_writes_the_replies_owed_then_stops() {
    let mut server = uring(&[]);
    let mut s = server.raw();
    s.write_all(b"PING\r\nSHUTDOWN NOSAVE\r\n").unwrap();
    let (text, _) = read_to_close(&mut s);
    assert!(text.starts_with("+PONG\r\n"), "{text}");
    let status = server.wait_exit(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

#[test]
fn where_io_uring_is_denied_the_node_says_so_and_serves_with_epoll() {
    let server = Sluice::start_on_env(
        0,
        &["--io", "uring"],
        &[("SLUICE_TEST_IO_URING_DENIED", "1")],
    );
    assert!(
        server.log().contains("io_uring is not available"),
        "{}",
        server.log()
    );
    assert!(!server.log().contains("io_uring connection loop"));
    let mut c = server.client();
    let r = rl_check(&mut c, &["k", "2", "60"]).unwrap();
    assert_eq!(&r[..3], &[1, 2, 1]);
    assert_eq!(multiplexing_api(&mut c), "epoll");
}

/// INFO server's `multiplexing_api`.
fn multiplexing_api(c: &mut redis::Connection) -> String {
    let info: String = q(c, &["INFO", "server"]);
    info.lines()
        .find_map(|l| l.strip_prefix("multiplexing_api:"))
        .expect("INFO server has multiplexing_api")
        .to_string()
}

#[test]
fn info_names_the_loop_that_serves() {
    let server = uring(&["--threads", "2"]);
    let mut c = server.client();
    // The node is ready only once every thread has its loop, so its log says them all.
    let log = server.log();
    let want = if log.contains("io_uring is not available") {
        "epoll"
    } else if log.contains("io_uring setup failed") {
        "io_uring,epoll"
    } else {
        "io_uring"
    };
    assert_eq!(multiplexing_api(&mut c), want);
    let epoll = Sluice::start_with(&["--io", "epoll"]);
    assert_eq!(multiplexing_api(&mut epoll.client()), "epoll");
}

#[test]
fn a_new_client_is_served_while_the_ring_is_busy() {
    if !have_tool("redis-benchmark") {
        return;
    }
    let server = uring(&["--threads", "1"]);
    let port = server.port;
    let load = std::thread::spawn(move || {
        let args = ["-n", "300000", "-c", "20", "-P", "16", "-q", "PING"];
        redis_benchmark(port, &args)
    });
    let busy = wait_until(Duration::from_secs(10), || {
        let n = sluice_tests::info_field(port, "total_commands_processed")?;
        (n > 20_000).then_some(())
    });
    assert!(busy.is_some(), "the load runs");
    let started = Instant::now();
    let mut c = server.client();
    assert_eq!(q::<String>(&mut c, &["PING"]), "PONG");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a new client waited {:?} behind the load",
        started.elapsed()
    );
    assert!(load.join().unwrap().status.success());
}
