//! Issue 34's limits on what a client may make a front hold, end to end, on the node's two
//! connection loops (`--io epoll`, `--io uring`) and on the sidecar (`sluice proxy`):
//!
//! - Before AUTH (only when a password is required) a request is small, as in Redis: more than
//!   10 arguments or a bulk over 16 KB is a protocol error that closes the connection, and a
//!   stranger cannot make the server hold what it sends (hole 6).
//! - The sidecar has a query-buffer limit as the node does (hole 6).
//! - A MULTI queue counts against the query-buffer limit: a client that queues more is closed
//!   as one over its query buffer (hole 7).
//! - SLOWLOG redacts credentials as Redis does, and records on both loops (hole 11); the
//!   expected entries are what a real redis-server shows for the same commands.
//!
//! Every writer is bounded in bytes and time (a write timeout), every wait has a deadline, and
//! every process is stopped by its PID when its handle drops.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use sluice_tests::{RedisServer, Sluice, have_tool, read_to_close, redis_cli, wait_until};

const MIB: usize = 1024 * 1024;

/// A node on this connection loop with these flags (the loop's flag comes last, and wins).
fn node(io: &str, args: &[&str]) -> Sluice {
    let mut all = args.to_vec();
    all.extend(["--io", io]);
    Sluice::start_with(&all)
}

/// A sidecar in front of a node (returned too, to keep it running) with these flags.
fn sidecar(args: &[&str]) -> (Sluice, Sluice) {
    let upstream = Sluice::start();
    let to = format!("127.0.0.1:{}", upstream.port);
    let mut all = vec!["--upstream", to.as_str()];
    all.extend_from_slice(args);
    let proxy = Sluice::start_proxy(&all);
    (proxy, upstream)
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Writes `header`, then `body` bytes of `x` in 1 MiB writes, stopping at the first failed
/// write (the server closed); returns how many body bytes went out.
fn stream_bulk(s: &mut TcpStream, header: &[u8], body: usize) -> usize {
    if s.write_all(header).is_err() {
        return 0;
    }
    let chunk = vec![b'x'; MIB];
    let mut sent = 0;
    while sent < body {
        let n = chunk.len().min(body - sent);
        if s.write_all(&chunk[..n]).is_err() {
            break;
        }
        sent += n;
    }
    sent
}

/// What a fresh connection gets for `request`, and whether the server closed it.
fn answer_to(port: u16, request: &[u8]) -> (String, bool) {
    let mut s = connect(port);
    s.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    s.write_all(request).unwrap();
    read_to_close(&mut s)
}

fn bulk(n: usize) -> Vec<u8> {
    let mut v = format!("${n}\r\n").into_bytes();
    v.extend(std::iter::repeat_n(b'x', n));
    v.extend_from_slice(b"\r\n");
    v
}

/// The Redis errors before AUTH, the boundaries (10 arguments and 16 KB pass), and what a
/// client that did authenticate may send.
fn assert_unauthenticated_limits(port: u16) {
    let (reply, closed) = answer_to(port, b"*11\r\n");
    assert_eq!(
        reply, "-ERR Protocol error: unauthenticated multibulk length\r\n",
        "11 arguments before AUTH"
    );
    assert!(closed, "the connection is closed after the multibulk error");
    let (reply, closed) = answer_to(port, b"*2\r\n$4\r\nAUTH\r\n$16385\r\n");
    assert_eq!(
        reply, "-ERR Protocol error: unauthenticated bulk length\r\n",
        "a 16385-byte bulk before AUTH"
    );
    assert!(closed, "the connection is closed after the bulk error");

    // At the limits: an ordinary reply, and the connection stays.
    let mut at_limit = b"*2\r\n$4\r\nAUTH\r\n".to_vec();
    at_limit.extend(bulk(16384));
    let (reply, closed) = answer_to(port, &at_limit);
    assert!(reply.starts_with("-WRONGPASS"), "16384 bytes: {reply}");
    assert!(!closed, "a wrong password does not close the connection");
    let mut ten = b"*10\r\n$4\r\nECHO\r\n".to_vec();
    ten.extend(b"$1\r\na\r\n".repeat(9));
    let (reply, closed) = answer_to(port, &ten);
    assert!(reply.starts_with("-"), "10 arguments: {reply}");
    assert!(!reply.contains("Protocol error"), "10 arguments: {reply}");
    assert!(!closed);

    // AUTH then a large request in the same write: the limits end with AUTH's success.
    let mut after_auth = b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*2\r\n$4\r\nECHO\r\n".to_vec();
    after_auth.extend(bulk(20_000));
    let (reply, closed) = answer_to(port, &after_auth);
    assert!(
        reply.starts_with("+OK\r\n$20000\r\nxxx"),
        "AUTH then 20000 bytes: {}",
        &reply[..reply.len().min(80)]
    );
    assert!(!closed);
    // A wrong password leaves them in force, for the next request of the same write.
    let (reply, closed) = answer_to(
        port,
        b"*2\r\n$4\r\nAUTH\r\n$2\r\nno\r\n*2\r\n$4\r\nECHO\r\n$20000\r\n",
    );
    assert_eq!(
        reply,
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n-ERR Protocol error: unauthenticated bulk length\r\n"
    );
    assert!(closed);
}

/// Four strangers each send the header of a 60 MiB AUTH bulk and then as much of it as the
/// server takes: the server holds none of it (RSS does not grow by the sent size), and each
/// gets the Redis error and a closed connection.
fn assert_strangers_pin_nothing(server: &Sluice) {
    let before = server.rss();
    let header = format!("*2\r\n$4\r\nAUTH\r\n${}\r\n", 60 * MIB);
    let mut conns: Vec<TcpStream> = (0..4).map(|_| connect(server.port)).collect();
    for s in &mut conns {
        s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
        stream_bulk(s, header.as_bytes(), 60 * MIB);
    }
    let grown = server.rss().saturating_sub(before);
    for s in &mut conns {
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let (reply, closed) = read_to_close(s);
        assert_eq!(
            reply, "-ERR Protocol error: unauthenticated bulk length\r\n",
            "the stranger's reply"
        );
        assert!(closed, "the stranger's connection is closed");
    }
    assert!(
        grown < (24 * MIB) as u64,
        "4 strangers sending 60 MiB each grew RSS by {} MiB",
        grown / MIB as u64
    );
}

#[test]
fn before_auth_requests_are_small_on_epoll() {
    let server = node("epoll", &["--requirepass", "pw"]);
    assert_unauthenticated_limits(server.port);
    assert_strangers_pin_nothing(&server);
}

#[test]
fn before_auth_requests_are_small_on_uring() {
    let server = node("uring", &["--requirepass", "pw"]);
    assert_unauthenticated_limits(server.port);
    assert_strangers_pin_nothing(&server);
}

#[test]
fn before_auth_requests_are_small_on_the_sidecar() {
    let (proxy, _node) = sidecar(&["--requirepass", "pw"]);
    assert_unauthenticated_limits(proxy.port);
    assert_strangers_pin_nothing(&proxy);
}

#[test]
fn without_a_password_large_requests_are_served() {
    let server = node("epoll", &[]);
    let mut echo = b"*2\r\n$4\r\nECHO\r\n".to_vec();
    echo.extend(bulk(20_000));
    let (reply, closed) = answer_to(server.port, &echo);
    assert!(
        reply.starts_with("$20000\r\n"),
        "{}",
        &reply[..reply.len().min(40)]
    );
    assert!(!closed);
    let mut many = b"*12\r\n$4\r\nECHO\r\n".to_vec();
    many.extend(b"$1\r\na\r\n".repeat(11));
    let (reply, _) = answer_to(server.port, &many);
    assert!(!reply.contains("Protocol error"), "{reply}");
}

/// A client that sends more than the query-buffer limit (64 MB) in one bulk is closed, and
/// the server does not hold what it sent: 320 MiB grow it by less than the limit's buffer in
/// its doubling steps (which the allocator keeps a while after they are freed).
#[test]
fn the_sidecar_has_a_query_buffer_limit() {
    let (proxy, _node) = sidecar(&[]);
    let before = proxy.rss();
    let mut s = connect(proxy.port);
    s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
    let header = format!("*2\r\n$4\r\nECHO\r\n${}\r\n", 400 * MIB);
    let sent = stream_bulk(&mut s, header.as_bytes(), 320 * MIB);
    let grown = proxy.rss().saturating_sub(before);
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let (reply, closed) = read_to_close(&mut s);
    assert!(
        closed,
        "a client past the query-buffer limit is closed (sent {} MiB, got {reply:?})",
        sent / MIB
    );
    assert!(
        grown < (256 * MIB) as u64,
        "sending {} MiB grew the sidecar's RSS by {} MiB",
        sent / MIB,
        grown / MIB as u64
    );
    assert!(proxy.wait_for_log("query buffer limit"), "{}", proxy.log());
}

/// MULTI, then 40 x ECHO of 16 MiB (640 MiB): the queue counts against the query-buffer
/// limit (64 MB), so the client is closed long before, and RSS does not grow by the queue.
fn assert_multi_queue_is_bounded(server: &Sluice) {
    let before = server.rss();
    let mut s = connect(server.port);
    s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
    // The replies are read as they come, so the client is never the one that stalls.
    let mut reader = s.try_clone().unwrap();
    let replies = std::thread::spawn(move || read_to_close(&mut reader));
    let mut queued = 0;
    if s.write_all(b"*1\r\n$5\r\nMULTI\r\n").is_ok() {
        let header = format!("*2\r\n$4\r\nECHO\r\n${}\r\n", 16 * MIB);
        for _ in 0..40 {
            if stream_bulk(&mut s, header.as_bytes(), 16 * MIB) < 16 * MIB
                || s.write_all(b"\r\n").is_err()
            {
                break;
            }
            queued += 1;
        }
    }
    let grown = server.rss().saturating_sub(before);
    let (reply, closed) = replies.join().unwrap();
    assert!(
        closed,
        "a client whose MULTI queue passes the query-buffer limit is closed ({queued} queued)"
    );
    assert!(reply.starts_with("+OK\r\n+QUEUED\r\n"), "{reply:?}");
    assert!(
        grown < (200 * MIB) as u64,
        "MULTI + {queued} x ECHO <16 MiB> grew RSS by {} MiB",
        grown / MIB as u64
    );
    assert!(
        server.wait_for_log("query buffer limit"),
        "{}",
        server.log()
    );
}

#[test]
fn the_multi_queue_is_bounded_on_epoll() {
    assert_multi_queue_is_bounded(&node("epoll", &[]));
}

#[test]
fn the_multi_queue_is_bounded_on_uring() {
    assert_multi_queue_is_bounded(&node("uring", &[]));
}

#[test]
fn the_multi_queue_is_bounded_on_the_sidecar() {
    let (proxy, _node) = sidecar(&[]);
    assert_multi_queue_is_bounded(&proxy);
}

/// The commands whose SLOWLOG entries are compared with Redis's: every way a credential is
/// sent, and ones with nothing to hide.
const CREDENTIAL_COMMANDS: &[&[&str]] = &[
    &[
        "ACL",
        "SETUSER",
        "gw",
        "on",
        ">gateway-secret",
        "~*",
        "+@all",
    ],
    &[
        "ACL",
        "SETUSER",
        "gw",
        "<gateway-secret",
        ">new-secret",
        "#a665a45920422f9d417e4867efdc4fb8a04a1f3fff1fa07e998e86f7f7a27ae3",
    ],
    &["AUTH", "gw", "new-secret"],
    &["AUTH", "gw", "wrong-secret"],
    &["HELLO", "3", "AUTH", "gw", "new-secret", "SETNAME", "x"],
    &["AUTH", "a", "b", "c"],
    &["CONFIG", "SET", "requirepass", ""],
    &["ECHO", "hi"],
];

/// Runs each command on its own connection (redis-cli), then reads SLOWLOG: the argument
/// lists, oldest first, without the SLOWLOG calls themselves.
fn slowlog_of_commands(port: u16) -> Vec<Vec<String>> {
    let reset = redis_cli(port, &["SLOWLOG", "RESET"]);
    assert!(reset.status.success());
    for args in CREDENTIAL_COMMANDS {
        redis_cli(port, args);
    }
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection())
        .expect("connect");
    type Entry = (i64, i64, i64, Vec<String>, String, String);
    let entries: Vec<Entry> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(&mut c)
        .unwrap();
    let mut args: Vec<Vec<String>> = entries
        .into_iter()
        .map(|e| e.3)
        .filter(|a| !a[0].eq_ignore_ascii_case("SLOWLOG"))
        .collect();
    args.reverse();
    // Only the commands sent above: the client that reads the log says hello after them.
    args.truncate(CREDENTIAL_COMMANDS.len());
    args
}

/// What Redis's SLOWLOG shows for [`CREDENTIAL_COMMANDS`]; the texts written here are the
/// ones redis-server 7.0 showed, for a machine without it.
fn redis_slowlog() -> Vec<Vec<String>> {
    if have_tool("redis-server") {
        let redis = RedisServer::start(&["--slowlog-log-slower-than", "0"]);
        return slowlog_of_commands(redis.port);
    }
    let r = "(redacted)";
    [
        vec!["ACL", "SETUSER", r, r, r, r, r],
        vec!["ACL", "SETUSER", r, r, r, r],
        vec!["AUTH", r, r],
        vec!["AUTH", r, r],
        vec!["HELLO", "3", "AUTH", r, r, "SETNAME", "x"],
        vec!["AUTH", "a", "b", "c"],
        vec!["CONFIG", "SET", "requirepass", r],
        vec!["ECHO", "hi"],
    ]
    .into_iter()
    .map(|e| e.into_iter().map(String::from).collect())
    .collect()
}

fn assert_slowlog_redacts_like_redis(io: &str) {
    let want = redis_slowlog();
    let server = node(io, &["--slowlog-log-slower-than", "0"]);
    let got = slowlog_of_commands(server.port);
    assert_eq!(got, want, "SLOWLOG on --io {io}, against redis-server's");
    let all = format!("{got:?}");
    for secret in ["gateway-secret", "new-secret", "wrong-secret", "a665a459"] {
        assert!(
            !all.contains(secret),
            "{secret} shows in SLOWLOG on --io {io}"
        );
    }
}

#[test]
fn slowlog_redacts_credentials_on_epoll() {
    assert_slowlog_redacts_like_redis("epoll");
}

#[test]
fn slowlog_redacts_credentials_on_uring() {
    assert_slowlog_redacts_like_redis("uring");
}

/// A connection that sends command after command on one socket (as a pooled client does) gets
/// one entry for each, on both loops.
#[test]
fn slowlog_records_every_command_on_both_loops() {
    for io in ["epoll", "uring"] {
        let server = node(io, &["--slowlog-log-slower-than", "0"]);
        let mut s = connect(server.port);
        for _ in 0..5 {
            s.write_all(b"*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n").unwrap();
            let mut reply = [0u8; 8];
            s.read_exact(&mut reply).unwrap();
            assert_eq!(&reply, b"$2\r\nhi\r\n");
        }
        s.write_all(b"*2\r\n$7\r\nSLOWLOG\r\n$3\r\nLEN\r\n")
            .unwrap();
        let mut reply = [0u8; 4];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b":5\r\n", "SLOWLOG LEN on --io {io}");
    }
}

/// The sidecar takes at most `--maxclients` connections, as a node does: one more is answered
/// Redis's `max number of clients reached` and closed, and a seat given back is taken again.
#[test]
fn the_sidecar_has_maxclients() {
    let (proxy, _node) = sidecar(&["--maxclients", "2"]);
    let ping = |s: &mut TcpStream| {
        s.write_all(b"PING\r\n").unwrap();
        let mut reply = [0u8; 7];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"+PONG\r\n");
    };
    let mut first = connect(proxy.port);
    ping(&mut first);
    let mut second = connect(proxy.port);
    ping(&mut second);
    let (third, closed) = read_to_close(&mut connect(proxy.port));
    assert_eq!(third, "-ERR max number of clients reached\r\n");
    assert!(closed, "the third client is closed");
    drop(first);
    // The seat comes back once the sidecar has seen the close.
    let again = wait_until(Duration::from_secs(10), || {
        let mut s = connect(proxy.port);
        s.write_all(b"PING\r\n").ok()?;
        let mut reply = [0u8; 7];
        s.read_exact(&mut reply).ok()?;
        (&reply == b"+PONG\r\n").then_some(())
    });
    assert!(again.is_some(), "a closed client's seat is taken again");
    ping(&mut second);
}

/// At threshold 0 each command is logged as it ends, as Redis logs it: one pipeline written
/// at once (the threshold set, then commands, then SLOWLOG LEN and GET) gets the same count and
/// the same commands from Sluice, on both loops, as from redis-server.
#[test]
fn a_pipelined_slowlog_sees_the_commands_before_it_as_redis_does() {
    const PIPELINE: &[u8] = b"CONFIG SET slowlog-log-slower-than 0\r\nSLOWLOG RESET\r\n\
        SET a 1\r\nGET a\r\nSLOWLOG LEN\r\nSLOWLOG GET 10\r\nPING\r\n";
    // The replies up to PING's, the last: the count and each entry's command words.
    fn logged(port: u16) -> (String, Vec<String>) {
        let mut s = connect(port);
        s.write_all(PIPELINE).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"+PONG\r\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(
                n > 0,
                "closed before PING's reply: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&got).into_owned();
        let count = text
            .lines()
            .find(|l| l.starts_with(':'))
            .expect("SLOWLOG LEN's reply")
            .to_owned();
        // Each entry's command: the bulk strings after a `*2` or `*3` argument array header.
        let lines: Vec<&str> = text.lines().collect();
        let mut commands = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            if (*l == "*2" || *l == "*3") && lines.get(i + 1).is_some_and(|n| n.starts_with('$')) {
                commands.push(lines[i + 2].to_owned());
            }
        }
        (count, commands)
    }
    let redis = RedisServer::start(&[]);
    let want = logged(redis.port);
    assert_eq!(want.0, ":3", "redis-server's count");
    for io in ["epoll", "uring"] {
        let server = node(io, &[]);
        assert_eq!(logged(server.port), want, "--io {io} against redis-server");
    }
}

/// A client that pipelines small requests with large replies and never reads them: the
/// sidecar reads a bounded amount and writes its replies before it reads again, so what it
/// holds is one read's replies, not every reply the requests sent would make (here 300,000
/// INFO replies of some 480 bytes, about 140 MB), even once its read buffer has grown for a
/// large request.
#[test]
fn the_sidecar_holds_one_bounded_batch_of_replies_for_a_client_that_does_not_read() {
    let (proxy, _node) = sidecar(&[]);
    let info = redis_cli(proxy.port, &["INFO"]);
    assert!(info.stdout.len() > 400, "an INFO reply is large");
    let mut s = connect(proxy.port);
    s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    // First a large request, read back whole: the read buffer grew for it.
    let header = format!("*2\r\n$4\r\nECHO\r\n${}\r\n", 40 * MIB);
    assert_eq!(stream_bulk(&mut s, header.as_bytes(), 40 * MIB), 40 * MIB);
    s.write_all(b"\r\n").unwrap();
    let mut echoed = vec![0u8; format!("${}\r\n", 40 * MIB).len() + 40 * MIB + 2];
    s.read_exact(&mut echoed).unwrap();
    let before = proxy.rss();
    let requests = b"INFO\r\n".repeat(300_000);
    let mut sent = 0;
    for chunk in requests.chunks(64 * 1024) {
        if s.write_all(chunk).is_err() {
            break;
        }
        sent += chunk.len();
    }
    // Whatever the sidecar took, it has answered within two seconds: it must not hold it all.
    let grew = wait_until(Duration::from_secs(2), || {
        let grown = proxy.rss().saturating_sub(before);
        (grown > (32 * MIB) as u64).then_some(grown)
    });
    assert!(
        grew.is_none(),
        "{} INFO requests left unread grew the sidecar's RSS by {} MiB",
        sent / 6,
        grew.unwrap_or(0) / MIB as u64
    );
    // It still serves others.
    let pong = redis_cli(proxy.port, &["PING"]);
    assert_eq!(String::from_utf8_lossy(&pong.stdout).trim(), "PONG");
}
