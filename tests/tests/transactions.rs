//! WATCH/MULTI/EXEC across connections: a watched key changed by another client, by its
//! expiry or by FLUSHALL aborts the EXEC; an EXEC runs with no other client's command between
//! its commands; optimistic read-modify-write loops lose no update. (The one-connection cases
//! are in the differential test, against redis-server.)

use std::thread;
use std::time::{Duration, Instant};

use sluice_tests::resp::{Reply, RespConn};
use sluice_tests::{Sluice, wait_until};

fn ok() -> Reply {
    Reply::Status("OK".into())
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

/// MULTI, `cmds`, EXEC on `conn`: EXEC's reply.
fn exec(conn: &mut RespConn, cmds: &[&[&str]]) -> Reply {
    assert_eq!(conn.call(&["MULTI"]), ok());
    for c in cmds {
        assert_eq!(conn.call(c), Reply::Status("QUEUED".into()));
    }
    conn.call(&["EXEC"])
}

#[test]
fn a_change_by_another_client_aborts_the_exec() {
    let node = Sluice::start();
    let (mut a, mut b) = (RespConn::connect(node.port), RespConn::connect(node.port));
    for (kind, setup, change) in [
        ("string", vec!["SET", "k", "1"], vec!["INCR", "k"]),
        ("list", vec!["RPUSH", "k", "x"], vec!["LPOP", "k"]),
        (
            "hash",
            vec!["HSET", "k", "f", "1"],
            vec!["HINCRBY", "k", "f", "1"],
        ),
        ("set", vec!["SADD", "k", "m"], vec!["SADD", "k", "n"]),
        (
            "zset",
            vec!["ZADD", "k", "1", "m"],
            vec!["ZINCRBY", "k", "1", "m"],
        ),
        ("missing key", vec!["DEL", "k"], vec!["SET", "k", "new"]),
        ("a delete", vec!["SET", "k", "1"], vec!["DEL", "k"]),
    ] {
        a.call(&["DEL", "k"]);
        a.call(&setup);
        assert_eq!(a.call(&["WATCH", "k", "other"]), ok(), "{kind}");
        b.call(&change);
        assert_eq!(
            exec(&mut a, &[&["SET", "k", "mine"]]),
            Reply::NilArray,
            "{kind}: the EXEC after another client's change"
        );
        assert_ne!(a.call(&["GET", "k"]), bulk("mine"), "{kind}: nothing ran");
        // The same, with the change on a key nobody watches: the block runs.
        a.call(&["WATCH", "k"]);
        b.call(&["SET", "unwatched", "1"]);
        b.call(&["GET", "k"]);
        assert_eq!(
            exec(&mut a, &[&["PING"]]),
            Reply::Array(vec![Reply::Status("PONG".into())]),
            "{kind}"
        );
    }
    // UNWATCH forgets.
    a.call(&["WATCH", "k"]);
    a.call(&["UNWATCH"]);
    b.call(&["SET", "k", "2"]);
    assert_eq!(
        exec(&mut a, &[&["GET", "k"]]),
        Reply::Array(vec![bulk("2")])
    );
}

#[test]
fn an_expiry_or_a_flushall_aborts_the_exec() {
    let node = Sluice::start();
    let (mut a, mut b) = (RespConn::connect(node.port), RespConn::connect(node.port));
    assert_eq!(a.call(&["SET", "k", "1", "PX", "150"]), ok());
    assert_eq!(a.call(&["WATCH", "k"]), ok());
    // Wait, with a deadline, until the key is gone for every client.
    wait_until(Duration::from_secs(10), || {
        (b.call(&["EXISTS", "k"]) == Reply::Int(0)).then_some(())
    })
    .expect("the key expires");
    assert_eq!(exec(&mut a, &[&["SET", "k", "2"]]), Reply::NilArray);

    // An expiry no one observed before EXEC (the wheel or EXEC's own look finds it).
    assert_eq!(a.call(&["SET", "k", "1", "PX", "100"]), ok());
    assert_eq!(a.call(&["WATCH", "k"]), ok());
    let until = Instant::now() + Duration::from_millis(150);
    while Instant::now() < until {
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(exec(&mut a, &[&["SET", "k", "2"]]), Reply::NilArray);

    a.call(&["SET", "k", "1"]);
    a.call(&["WATCH", "k"]);
    assert_eq!(b.call(&["FLUSHALL"]), ok());
    assert_eq!(exec(&mut a, &[&["SET", "k", "2"]]), Reply::NilArray);
}

/// Eight clients each add 1 to a counter 200 times with WATCH, GET, MULTI, SET, EXEC, retrying
/// an aborted EXEC: the count is exact only if every lost race aborts.
#[test]
fn optimistic_increments_lose_nothing() {
    let node = Sluice::start();
    let port = node.port;
    let (clients, each) = (8, 200);
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            thread::spawn(move || {
                let mut c = RespConn::connect(port);
                let mut retries = 0u64;
                let deadline = Instant::now() + Duration::from_secs(60);
                for _ in 0..each {
                    loop {
                        assert!(Instant::now() < deadline, "increments took over 60 s");
                        c.call(&["WATCH", "counter"]);
                        let n = match c.call(&["GET", "counter"]) {
                            Reply::Bulk(b) => String::from_utf8(b).unwrap().parse::<u64>().unwrap(),
                            _ => 0,
                        };
                        let next = (n + 1).to_string();
                        match exec(&mut c, &[&["SET", "counter", &next]]) {
                            Reply::NilArray => retries += 1,
                            Reply::Array(_) => break,
                            other => panic!("EXEC answered {other:?}"),
                        }
                    }
                }
                retries
            })
        })
        .collect();
    let retries: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let mut c = RespConn::connect(port);
    assert_eq!(
        c.call(&["GET", "counter"]),
        bulk(&(clients * each).to_string())
    );
    eprintln!(
        "{} increments, {retries} aborted EXECs retried",
        clients * each
    );
}

/// Writers move one unit from `a` to `b` in a MULTI block while readers read both in one: a
/// reader never sees a block half done (the keys live on different shards).
#[test]
fn an_exec_is_isolated_from_other_clients() {
    let node = Sluice::start();
    let port = node.port;
    let mut setup = RespConn::connect(port);
    setup.call(&["SET", "a", "1000"]);
    setup.call(&["SET", "b", "0"]);
    let writers: Vec<_> = (0..2)
        .map(|_| {
            thread::spawn(move || {
                let mut c = RespConn::connect(port);
                for _ in 0..300 {
                    exec(&mut c, &[&["DECR", "a"], &["INCR", "b"]]);
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            thread::spawn(move || {
                let mut c = RespConn::connect(port);
                for _ in 0..300 {
                    let Reply::Array(v) = exec(&mut c, &[&["GET", "a"], &["GET", "b"]]) else {
                        panic!("EXEC failed");
                    };
                    let n = |r: &Reply| match r {
                        Reply::Bulk(b) => String::from_utf8_lossy(b).parse::<i64>().unwrap(),
                        other => panic!("{other:?}"),
                    };
                    assert_eq!(n(&v[0]) + n(&v[1]), 1000, "a block seen half done");
                }
            })
        })
        .collect();
    for t in writers.into_iter().chain(readers) {
        t.join().unwrap();
    }
    assert_eq!(setup.call(&["GET", "b"]), bulk("600"));
}

/// A command over two keys is atomic too: while clients move entries between two lists
/// (RPOPLPUSH both ways) and between two sets (SMOVE), readers counting both in one EXEC always
/// see every entry once (the keys live on different shards).
#[test]
fn moves_between_keys_are_never_seen_half_done() {
    let node = Sluice::start();
    let port = node.port;
    let mut setup = RespConn::connect(port);
    let items: Vec<String> = (0..50).map(|i| i.to_string()).collect();
    let mut push = vec!["RPUSH", "la"];
    push.extend(items.iter().map(String::as_str));
    setup.call(&push);
    let mut add = vec!["SADD", "sa"];
    add.extend(items.iter().map(String::as_str));
    setup.call(&add);
    let movers: Vec<_> = (0..2)
        .map(|n| {
            thread::spawn(move || {
                let mut c = RespConn::connect(port);
                for i in 0..400 {
                    let (from, to) = if (i + n) % 2 == 0 {
                        ("la", "lb")
                    } else {
                        ("lb", "la")
                    };
                    c.call(&["RPOPLPUSH", from, to]);
                    let (from, to) = if (i + n) % 2 == 0 {
                        ("sa", "sb")
                    } else {
                        ("sb", "sa")
                    };
                    c.call(&["SMOVE", from, to, &(i % 50).to_string()]);
                }
            })
        })
        .collect();
    let reader = thread::spawn(move || {
        let mut c = RespConn::connect(port);
        for _ in 0..400 {
            let Reply::Array(v) = exec(
                &mut c,
                &[
                    &["LLEN", "la"],
                    &["LLEN", "lb"],
                    &["SCARD", "sa"],
                    &["SCARD", "sb"],
                ],
            ) else {
                panic!("EXEC failed");
            };
            let n = |r: &Reply| match r {
                Reply::Int(n) => *n,
                other => panic!("{other:?}"),
            };
            assert_eq!(n(&v[0]) + n(&v[1]), 50, "a list move seen half done");
            assert_eq!(n(&v[2]) + n(&v[3]), 50, "a set move seen half done");
        }
    });
    for t in movers.into_iter().chain([reader]) {
        t.join().unwrap();
    }
}
