//! `--unixsocket` end to end: a node serves on its Unix socket what it serves on TCP (RL.CHECK,
//! AUTH and ACL users, pipelines, CLIENT LIST, INFO, CONFIG GET) on both connection loops, to the
//! `redis` crate, `redis-cli -s` and `redis-benchmark -s`; a socket file left by a crash is
//! replaced, one a live process listens on refuses the start, and a clean shutdown removes it;
//! the sidecar listens on one and reaches its node over one; and Redis's own `--unixsocket`
//! answers the same commands with the same replies.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sluice_tests::{
    RedisServer, Sluice, TempDir, binary, have_tool, holds_within, rl_check, wait_until,
};

/// A connection over the Unix socket at `path`, logged in with `auth` (user, password) if given.
fn unix_client(path: &Path, auth: Option<(&str, &str)>) -> redis::Connection {
    let query = match auth {
        Some((user, pass)) => format!("?user={user}&pass={pass}"),
        None => String::new(),
    };
    redis::Client::open(format!("redis+unix://{}{query}", path.display()))
        .and_then(|c| c.get_connection())
        .expect("connected over the Unix socket")
}

fn q<T: redis::FromRedisValue>(c: &mut redis::Connection, args: &[&str]) -> redis::RedisResult<T> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c)
}

/// A node on loop `io` (`epoll` or `uring`) with `--unixsocket DIR/sluice.sock` and `extra`.
fn node_on_socket(dir: &TempDir, io: &str, extra: &[&str]) -> (Sluice, PathBuf) {
    let path = dir.path().join("sluice.sock");
    let path_arg = path.to_str().expect("a UTF-8 temp path");
    let mut args = vec!["--io", io, "--threads", "2", "--unixsocket", path_arg];
    args.extend_from_slice(extra);
    (Sluice::start_with(&args), path)
}

/// What `sluice ARGS` says when it refuses to start: its exit code and its log, within 30 s.
fn refused_start(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("timeout")
        .arg("30")
        .arg(binary())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run sluice");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `name=` field of a CLIENT LIST or CLIENT INFO line.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
}

/// RL.CHECK, AUTH (password and ACL user), a pipeline, CLIENT LIST, INFO and CONFIG over the
/// socket, on each connection loop; the file has `--unixsocketperm`'s mode.
#[test]
fn a_socket_client_does_what_a_tcp_client_does() {
    for io in ["epoll", "uring"] {
        let dir = TempDir::new("unix-clients");
        let (server, path) = node_on_socket(
            &dir,
            io,
            &["--requirepass", "s3cret", "--unixsocketperm", "770"],
        );
        let mode = std::fs::metadata(&path)
            .expect("the socket file")
            .permissions()
            .mode();
        assert!(std::fs::metadata(&path).unwrap().file_type().is_socket());
        assert_eq!(mode & 0o777, 0o770, "{io}: --unixsocketperm 770");

        let mut anon = unix_client(&path, None);
        let e = rl_check(&mut anon, &["k", "3", "60"]).unwrap_err();
        assert!(e.to_string().contains("NOAUTH"), "{io}: {e}");

        let mut c = unix_client(&path, Some(("default", "s3cret")));
        for used in 1..=3 {
            let r = rl_check(&mut c, &["k", "3", "60"]).unwrap();
            assert_eq!(&r[..3], &[1, 3, 3 - used], "{io}");
        }
        assert_eq!(rl_check(&mut c, &["k", "3", "60"]).unwrap()[0], 0, "{io}");

        // A pipeline of 200 checks: one reply each, in order.
        let mut pipe = redis::pipe();
        for _ in 0..200 {
            pipe.cmd("RL.CHECK").arg("p").arg("150").arg("60");
        }
        let replies: Vec<Vec<i64>> = pipe.query(&mut c).unwrap();
        let allowed = replies.iter().filter(|r| r[0] == 1).count();
        assert_eq!(allowed, 150, "{io}");
        assert_eq!(
            replies[149][2], 0,
            "{io}: the 150th check takes the last token"
        );

        // An ACL user logs in over the socket as over TCP.
        let _: String = q(
            &mut c,
            &["ACL", "SETUSER", "gw", "on", ">gwpass", "+@all", "~*"],
        )
        .unwrap();
        let mut gw = unix_client(&path, Some(("gw", "gwpass")));
        assert_eq!(
            q::<String>(&mut gw, &["ACL", "WHOAMI"]).unwrap(),
            "gw",
            "{io}"
        );

        // CLIENT LIST shows a socket client as Redis 7 does: addr= and laddr= are PATH:0.
        let list: String = q(&mut c, &["CLIENT", "LIST"]).unwrap();
        let shown = format!("{}:0", path.display());
        let socket_lines: Vec<&str> = list
            .lines()
            .filter(|l| field(l, "addr") == Some(shown.as_str()))
            .collect();
        assert_eq!(socket_lines.len(), 3, "{io}: {list}");
        for line in socket_lines {
            assert_eq!(field(line, "laddr"), Some(shown.as_str()), "{io}: {line}");
        }
        let info: String = q(&mut c, &["INFO", "server"]).unwrap();
        assert!(info.contains("sluice_version:"), "{io}: {info}");

        // CONFIG GET answers; CONFIG SET refuses, as Redis, for a setting fixed at start.
        let got: Vec<String> = q(&mut c, &["CONFIG", "GET", "unixsocket*"]).unwrap();
        assert_eq!(
            got,
            [
                "unixsocket",
                path.to_str().unwrap(),
                "unixsocketperm",
                "770"
            ],
            "{io}"
        );
        let e = q::<String>(&mut c, &["CONFIG", "SET", "unixsocket", "/tmp/x"]).unwrap_err();
        assert!(
            e.to_string().contains("can't set immutable config"),
            "{io}: {e}"
        );

        // TCP still serves, beside the socket.
        let mut tcp = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{}/", server.port))
            .and_then(|c| c.get_connection())
            .unwrap();
        assert_eq!(rl_check(&mut tcp, &["k", "3", "60"]).unwrap()[0], 0, "{io}");
    }
}

/// `redis-cli -s` and `redis-benchmark -s` work unchanged, on each loop.
#[test]
fn redis_cli_and_redis_benchmark_use_the_socket() {
    if !have_tool("redis-cli") || !have_tool("redis-benchmark") {
        return eprintln!("skipped: redis-cli or redis-benchmark is not installed");
    }
    for io in ["epoll", "uring"] {
        let dir = TempDir::new("unix-tools");
        let (_server, path) = node_on_socket(&dir, io, &[]);
        let path = path.to_str().unwrap();
        let out = Command::new("redis-cli")
            .args(["-s", path, "RL.CHECK", "cli", "10", "60"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.lines().take(3).collect::<Vec<_>>(),
            ["1", "10", "9"],
            "{io}: {text}"
        );
        let out = Command::new("timeout")
            .args([
                "60",
                "redis-benchmark",
                "-s",
                path,
                "-n",
                "2000",
                "-t",
                "ping",
                "-q",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{io}: {text}");
        assert_eq!(
            text.matches("requests per second").count(),
            2,
            "{io}: PING_INLINE and PING_MBULK both ran: {text}"
        );
    }
}

/// A socket file nothing listens on (a crash left it) is replaced; one a live process listens
/// on refuses the start with Redis's words, the node exiting non-zero; a clean shutdown
/// removes the file.
#[test]
fn a_stale_socket_file_is_replaced_and_a_live_one_refused() {
    let dir = TempDir::new("unix-stale");
    let path = dir.path().join("sluice.sock");
    // Bound, then closed: the file stays, and a connect to it is refused. (A process another
    // test thread forks at that moment holds the listener until it execs, so wait for that.)
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(
        holds_within(5, || std::os::unix::net::UnixStream::connect(&path)
            .is_err()),
        "a closed listener's socket still accepts"
    );

    let path_arg = path.to_str().unwrap();
    let mut server = Sluice::start_with(&["--unixsocket", path_arg]);
    let mut c = unix_client(&path, None);
    assert_eq!(rl_check(&mut c, &["k", "1", "60"]).unwrap()[0], 1);
    assert!(
        server.log().contains("removing the stale Unix socket"),
        "{}",
        server.log()
    );

    // A second node on the same path: refused, and the first keeps its socket.
    let (code, log) = refused_start(&["--port", "0", "--unixsocket", path_arg]);
    assert_ne!(code, Some(0), "{log}");
    assert!(
        log.contains("Failed opening Unix socket: bind: Address already in use"),
        "{log}"
    );
    assert_eq!(rl_check(&mut c, &["k", "1", "60"]).unwrap()[0], 0);

    server.signal(libc::SIGTERM);
    assert!(
        server
            .wait_exit(Duration::from_secs(20))
            .is_some_and(|s| s.success())
    );
    assert!(!path.exists(), "a clean shutdown removes the socket file");

    // Another program's live socket is refused too, and left alone.
    let other = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let (code, log) = refused_start(&["--port", "0", "--unixsocket", path_arg]);
    assert_ne!(code, Some(0), "{log}");
    assert!(
        log.contains("Failed opening Unix socket: bind: Address already in use"),
        "{log}"
    );
    assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
    drop(other);
}

/// `unixsocket` and `unixsocketperm` in the config file, as in redis.conf.
#[test]
fn the_config_file_names_the_socket() {
    let dir = TempDir::new("unix-conf");
    let path = dir.path().join("sluice.sock");
    let conf = dir.path().join("sluice.conf");
    std::fs::write(
        &conf,
        format!(
            "port 0\nbind 127.0.0.1\nunixsocket {}\nunixsocketperm 700\n",
            path.display()
        ),
    )
    .unwrap();
    let _server = Sluice::start_exact(&[conf.to_str().unwrap()], &[]);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let mut c = unix_client(&path, None);
    let got: Vec<String> = q(&mut c, &["CONFIG", "GET", "unixsocketperm"]).unwrap();
    assert_eq!(got, ["unixsocketperm", "700"]);
    let e = q::<String>(&mut c, &["CONFIG", "SET", "unixsocketperm", "777"]).unwrap_err();
    assert!(e.to_string().contains("can't set immutable config"), "{e}");
}

/// The sidecar listens on a socket (`--unixsocket`) and reaches its node over the node's
/// (`--upstream unix:PATH`), logging in there as over TCP.
#[test]
fn the_sidecar_serves_and_reaches_over_sockets() {
    let dir = TempDir::new("unix-sidecar");
    let (node, node_sock) = node_on_socket(&dir, "epoll", &["--requirepass", "nodepass"]);
    let proxy_sock = dir.path().join("proxy.sock");
    let upstream = format!("unix:{}", node_sock.display());
    let mut proxy = Sluice::start_proxy(&[
        "--unixsocket",
        proxy_sock.to_str().unwrap(),
        "--unixsocketperm",
        "770",
        "--upstream",
        &upstream,
        "--upstream-password",
        "nodepass",
        "--require-upstream",
    ]);
    let mode = std::fs::metadata(&proxy_sock).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o770);
    let mut c = unix_client(&proxy_sock, None);
    for used in 1..=2 {
        let r = rl_check(&mut c, &["k", "2", "60"]).unwrap();
        assert_eq!(&r[..3], &[1, 2, 2 - used]);
    }
    assert_eq!(rl_check(&mut c, &["k", "2", "60"]).unwrap()[0], 0);

    // The node saw the sidecar on its socket, and decided there.
    let mut on_node = unix_client(&node_sock, Some(("default", "nodepass")));
    let list: String = q(&mut on_node, &["CLIENT", "LIST"]).unwrap();
    let shown = format!("{}:0", node_sock.display());
    let sidecars = list
        .lines()
        .filter(|l| field(l, "addr") == Some(shown.as_str()))
        .count();
    assert!(sidecars >= 2, "the sidecar and this client: {list}");
    assert_eq!(rl_check(&mut on_node, &["k", "2", "60"]).unwrap()[0], 0);

    proxy.signal(libc::SIGTERM);
    assert!(proxy.wait_exit(Duration::from_secs(20)).is_some());
    assert!(
        !proxy_sock.exists(),
        "the sidecar removes its socket at shutdown"
    );
    drop(node);
}

/// The same commands over Sluice's socket and over Redis's own `--unixsocket`: the same
/// replies, CLIENT INFO's addresses included (each its own path).
#[test]
fn replies_match_redis_over_its_socket() {
    if !have_tool("redis-server") {
        return eprintln!("skipped: redis-server is not installed");
    }
    let dir = TempDir::new("unix-differential");
    let redis_sock = dir.path().join("redis.sock");
    let _redis = RedisServer::start(&[
        "--unixsocket",
        redis_sock.to_str().unwrap(),
        "--unixsocketperm",
        "700",
    ]);
    wait_until(Duration::from_secs(10), || {
        std::os::unix::net::UnixStream::connect(&redis_sock).ok()
    })
    .expect("redis-server's socket");
    let (_sluice, sluice_sock) = node_on_socket(&dir, "uring", &["--unixsocketperm", "700"]);

    let commands: &[&[&str]] = &[
        &["PING"],
        &["PING", "hello"],
        &["ECHO", "over a socket"],
        &["SET", "k", "v"],
        &["GET", "k"],
        &["INCR", "n"],
        &["INCRBY", "n", "41"],
        &["EXISTS", "k", "n", "none"],
        &["DEL", "k"],
        &["GET", "k"],
        &["GET"],
        &["CONFIG", "GET", "unixsocketperm"],
        &["CONFIG", "SET", "unixsocket", "/tmp/elsewhere.sock"],
        &["CONFIG", "SET", "unixsocketperm", "777"],
    ];
    let mut theirs = unix_client(&redis_sock, None);
    let mut ours = unix_client(&sluice_sock, None);
    for args in commands {
        let a: redis::RedisResult<redis::Value> = q(&mut theirs, args);
        let b: redis::RedisResult<redis::Value> = q(&mut ours, args);
        assert_eq!(format!("{b:?}"), format!("{a:?}"), "{args:?}");
    }
    for (conn, path) in [(&mut theirs, &redis_sock), (&mut ours, &sluice_sock)] {
        let line: String = q(conn, &["CLIENT", "INFO"]).unwrap();
        let shown = format!("{}:0", path.display());
        assert_eq!(field(&line, "addr"), Some(shown.as_str()), "{line}");
        assert_eq!(field(&line, "laddr"), Some(shown.as_str()), "{line}");
    }
    // CLIENT KILL names socket clients by PATH:0, as CLIENT LIST shows them: two more clients
    // of each server's socket, killed from a third with SKIPME yes, give the same count.
    for path in [&redis_sock, &sluice_sock] {
        let _extra = [unix_client(path, None), unix_client(path, None)];
        let mut killer = unix_client(path, None);
        let addr = format!("{}:0", path.display());
        let killed: i64 = q(
            &mut killer,
            &["CLIENT", "KILL", "ADDR", &addr, "SKIPME", "yes"],
        )
        .expect("CLIENT KILL ADDR PATH:0");
        // The two extra and the differential's own client; never the killer.
        assert_eq!(killed, 3, "{}", path.display());
        let pong: String = q(&mut killer, &["PING"]).expect("the killer lives on");
        assert_eq!(pong, "PONG");
    }
}
