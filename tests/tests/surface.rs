//! The Redis command surface real clients and operators use, end to end.

use redis::Value;
use std::io::Write;

use sluice_tests::{Sluice, read_exact_str};

fn q<T: redis::FromRedisValue>(
    conn: &mut redis::Connection,
    args: &[&str],
) -> redis::RedisResult<T> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(conn)
}

#[test]
fn connection_commands() {
    let server = Sluice::start();
    let mut c = server.client();
    assert_eq!(q::<String>(&mut c, &["PING"]).unwrap(), "PONG");
    assert_eq!(q::<String>(&mut c, &["PING", "hi"]).unwrap(), "hi");
    assert_eq!(q::<String>(&mut c, &["ECHO", "x y"]).unwrap(), "x y");
    assert_eq!(q::<String>(&mut c, &["SELECT", "0"]).unwrap(), "OK");
    assert!(
        q::<String>(&mut c, &["SELECT", "1"])
            .unwrap_err()
            .to_string()
            .contains("out of range")
    );
    let id: i64 = q(&mut c, &["CLIENT", "ID"]).unwrap();
    assert!(id > 0);
    assert_eq!(
        q::<String>(&mut c, &["CLIENT", "SETNAME", "gw-1"]).unwrap(),
        "OK"
    );
    assert_eq!(q::<String>(&mut c, &["CLIENT", "GETNAME"]).unwrap(), "gw-1");
    assert!(q::<String>(&mut c, &["CLIENT", "SETNAME", "a b"]).is_err());
    assert_eq!(
        q::<String>(&mut c, &["CLIENT", "SETINFO", "LIB-NAME", "mylib"]).unwrap(),
        "OK"
    );
    let list: String = q(&mut c, &["CLIENT", "LIST"]).unwrap();
    assert!(
        list.contains(&format!("id={id} ")) && list.contains("name=gw-1"),
        "{list}"
    );
    let mut raw = server.raw();
    raw.write_all(b"NOSUCH a b\r\n").unwrap();
    let expected = "-ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' \r\n";
    assert_eq!(read_exact_str(&mut raw, expected.len()), expected);
    let e = q::<String>(&mut c, &["GET"]).unwrap_err();
    assert!(
        e.to_string()
            .contains("wrong number of arguments for 'get' command"),
        "{e}"
    );
}

#[test]
fn client_kill_closes_the_other_connection() {
    let server = Sluice::start();
    let mut killer = server.client();
    let mut victim = server.client();
    let victim_id: i64 = q(&mut victim, &["CLIENT", "ID"]).unwrap();
    let killed: i64 = q(
        &mut killer,
        &["CLIENT", "KILL", "ID", &victim_id.to_string()],
    )
    .unwrap();
    assert_eq!(killed, 1);
    // The kill is asynchronous: the victim's task closes at its next turn.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while q::<String>(&mut victim, &["PING"]).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "victim's connection is closed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(q::<String>(&mut killer, &["PING"]).unwrap(), "PONG");
}

#[test]
fn hello_switches_protocol_and_rejects_unknown_versions() {
    let server = Sluice::start();
    let mut c = server.client();
    let v: Value = q(&mut c, &["HELLO", "3"]).unwrap();
    let Value::Map(pairs) = v else {
        panic!("HELLO 3 replies a map: {v:?}")
    };
    assert!(pairs.iter().any(|(k, v)| matches!(k, Value::BulkString(b) if b == b"proto") && *v == Value::Int(3)));
    let e = q::<Value>(&mut c, &["HELLO", "4"]).unwrap_err();
    assert_eq!(e.code(), Some("NOPROTO"));
    // A RESP3 client gets the same five integers from RL.CHECK.
    let mut r3 = server.resp3();
    let r: Vec<i64> = q(&mut r3, &["RL.CHECK", "k", "5", "10"]).unwrap();
    assert_eq!(&r[..4], &[1, 5, 4, -1]);
    let nil: Value = q(&mut r3, &["GET", "missing"]).unwrap();
    assert_eq!(nil, Value::Nil);
}

#[test]
fn counters_behave_like_redis_strings() {
    let server = Sluice::start();
    let mut c = server.client();
    assert_eq!(q::<Option<String>>(&mut c, &["GET", "n"]).unwrap(), None);
    assert_eq!(q::<i64>(&mut c, &["INCR", "n"]).unwrap(), 1);
    assert_eq!(q::<i64>(&mut c, &["INCRBY", "n", "10"]).unwrap(), 11);
    assert_eq!(q::<i64>(&mut c, &["DECR", "n"]).unwrap(), 10);
    assert_eq!(q::<i64>(&mut c, &["DECRBY", "n", "4"]).unwrap(), 6);
    assert_eq!(q::<String>(&mut c, &["GET", "n"]).unwrap(), "6");
    assert_eq!(q::<String>(&mut c, &["SET", "s", "hello"]).unwrap(), "OK");
    assert_eq!(q::<String>(&mut c, &["GET", "s"]).unwrap(), "hello");
    assert!(
        q::<i64>(&mut c, &["INCR", "s"])
            .unwrap_err()
            .to_string()
            .contains("not an integer")
    );
    assert_eq!(
        q::<String>(&mut c, &["SET", "big", "9223372036854775807"]).unwrap(),
        "OK"
    );
    assert!(
        q::<i64>(&mut c, &["INCR", "big"])
            .unwrap_err()
            .to_string()
            .contains("overflow")
    );
    assert_eq!(
        q::<Option<String>>(&mut c, &["SET", "s", "x", "NX"]).unwrap(),
        None
    );
    assert_eq!(
        q::<Option<String>>(&mut c, &["SET", "new", "x", "XX"]).unwrap(),
        None
    );
    assert_eq!(q::<i64>(&mut c, &["TTL", "s"]).unwrap(), -1);
    assert_eq!(q::<i64>(&mut c, &["TTL", "nope"]).unwrap(), -2);
    assert_eq!(q::<i64>(&mut c, &["EXPIRE", "s", "100"]).unwrap(), 1);
    let ttl: i64 = q(&mut c, &["TTL", "s"]).unwrap();
    assert!((99..=100).contains(&ttl), "{ttl}");
    assert_eq!(
        q::<i64>(&mut c, &["PEXPIRE", "s", "5000", "GT"]).unwrap(),
        0
    );
    assert_eq!(q::<i64>(&mut c, &["INCR", "n"]).unwrap(), 7);
    assert_eq!(
        q::<String>(&mut c, &["SET", "e", "v", "PX", "100000"]).unwrap(),
        "OK"
    );
    let pttl: i64 = q(&mut c, &["PTTL", "e"]).unwrap();
    assert!(pttl > 99_000 && pttl <= 100_000, "{pttl}");
    assert!(
        q::<String>(&mut c, &["SET", "e", "v", "EX", "0"])
            .unwrap_err()
            .to_string()
            .contains("invalid expire time")
    );
    assert_eq!(
        q::<i64>(&mut c, &["EXISTS", "n", "s", "n", "zz"]).unwrap(),
        3
    );
    assert_eq!(q::<i64>(&mut c, &["DEL", "n", "zz"]).unwrap(), 1);
    assert_eq!(q::<i64>(&mut c, &["EXPIRE", "s", "-1"]).unwrap(), 1);
    assert_eq!(
        q::<i64>(&mut c, &["EXISTS", "s"]).unwrap(),
        0,
        "a past expiry deletes"
    );
}

#[test]
fn server_commands_info_config_command_dbsize_flush_time() {
    let server = Sluice::start();
    let mut c = server.client();
    for i in 0..3 {
        let _: Vec<i64> = q(&mut c, &["RL.CHECK", &format!("k{i}"), "5", "1h"]).unwrap();
    }
    let _: () = q(&mut c, &["SET", "plain", "1"]).unwrap();
    assert_eq!(q::<i64>(&mut c, &["DBSIZE"]).unwrap(), 4);
    let info: String = q(&mut c, &["INFO"]).unwrap();
    for field in [
        "redis_version:",
        "uptime_in_seconds:",
        "connected_clients:1",
        "used_memory:",
        "total_commands_processed:",
        "instantaneous_ops_per_sec:",
        "role:master",
        "db0:keys=4,expires=3",
    ] {
        assert!(info.contains(field), "INFO lacks {field}:\n{info}");
    }
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(used > 0);
    let only: String = q(&mut c, &["INFO", "keyspace"]).unwrap();
    assert!(
        only.contains("# Keyspace") && !only.contains("# Server"),
        "{only}"
    );
    let cfg: Vec<String> = q(&mut c, &["CONFIG", "GET", "port"]).unwrap();
    assert_eq!(cfg, vec!["port".to_string(), server.port.to_string()]);
    let cfg: Vec<String> = q(&mut c, &["CONFIG", "GET", "save"]).unwrap();
    assert_eq!(cfg, vec!["save".to_string(), String::new()]);
    assert!(q::<String>(&mut c, &["CONFIG", "SET", "port", "1"]).is_err());
    let count: i64 = q(&mut c, &["COMMAND", "COUNT"]).unwrap();
    assert!(count >= 30, "{count}");
    let info: Value = q(&mut c, &["COMMAND", "INFO", "rl.check"]).unwrap();
    let Value::Array(rows) = info else { panic!() };
    let Value::Array(row) = &rows[0] else {
        panic!("{rows:?}")
    };
    assert_eq!(row[0], Value::BulkString(b"rl.check".to_vec()));
    assert_eq!(row[1], Value::Int(-4));
    let docs: Value = q(&mut c, &["COMMAND", "DOCS", "rl.check"]).unwrap();
    assert!(format!("{docs:?}").contains("summary"), "{docs:?}");
    let time: Vec<String> = q(&mut c, &["TIME"]).unwrap();
    let secs: u64 = time[0].parse().unwrap();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(secs.abs_diff(wall) <= 2, "{secs} vs {wall}");
    assert_eq!(q::<String>(&mut c, &["FLUSHALL"]).unwrap(), "OK");
    assert_eq!(q::<i64>(&mut c, &["DBSIZE"]).unwrap(), 0);
}

#[test]
fn requirepass_gates_every_command_but_auth_hello_quit() {
    let server = Sluice::start_with(&["--requirepass", "s3cret"]);
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let e = q::<String>(&mut raw, &["PING"]).unwrap_err();
    assert_eq!(e.code(), Some("NOAUTH"));
    let e = q::<Vec<i64>>(&mut raw, &["RL.CHECK", "k", "1", "1"]).unwrap_err();
    assert_eq!(e.code(), Some("NOAUTH"));
    let e = q::<String>(&mut raw, &["AUTH", "wrong"]).unwrap_err();
    assert_eq!(e.code(), Some("WRONGPASS"));
    assert_eq!(q::<String>(&mut raw, &["AUTH", "s3cret"]).unwrap(), "OK");
    assert_eq!(q::<String>(&mut raw, &["PING"]).unwrap(), "PONG");
    // The redis crate authenticates from the URL (HELLO 3 AUTH with RESP3).
    let url = format!(
        "redis://default:s3cret@127.0.0.1:{}/?protocol=resp3",
        server.port
    );
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    assert_eq!(q::<String>(&mut c, &["PING"]).unwrap(), "PONG");
    // CONFIG SET requirepass "" turns authentication off for new connections.
    assert_eq!(
        q::<String>(&mut c, &["CONFIG", "SET", "requirepass", ""]).unwrap(),
        "OK"
    );
    let mut open = server.client();
    assert_eq!(q::<String>(&mut open, &["PING"]).unwrap(), "PONG");
}
