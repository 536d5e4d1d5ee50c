//! The native fast paths (issue 36) held to the Lua path: each recognized limiter script runs on
//! random inputs and random key states twice on one node, once by its exact bytes (the native)
//! and once with one character added (Lua, as any unknown script runs), on keys set up alike;
//! the replies and the resulting keys (type, value, TTL) must be the same. INFO's `scripting`
//! section then says which path each call took, so the test also shows that the exact bytes
//! ran natively, the changed bytes in Lua, and that inputs outside what a native mirrors were
//! handed to Lua. Half the native calls run inside MULTI, where a native makes its calls one
//! by one through the dispatcher; outside it, through its direct lane (the store itself,
//! after the host checked each command would run).
//!
//! The scripts' bytes are in tests/fixtures/known-scripts (from the libraries' packages: limits
//! 5.8.0, rate-limit-redis 6.0.1, rate-limiter-flexible 11.4.0); node_limiters.rs and
//! scripts/limits-tests.sh check that the installed libraries send exactly these.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};
use sluice_tests::resp::{Reply, RespConn};
use std::cell::RefCell;

use sluice_tests::{Sluice, repo_path, script_count};

/// A known script: its fixture's name, its key count, and the argument values to draw from
/// (one list per ARGV position), the well-formed ones and the edges a native hands to Lua.
struct Known {
    name: &'static str,
    keys: usize,
    argv: &'static [&'static [&'static str]],
}

const KNOWN: &[Known] = &[
    Known {
        name: "limits_incr_expire",
        keys: 1,
        argv: &[
            &["60", "1", "30", "0", "-5", "abc"],
            &[
                "1",
                "2",
                "5",
                "0",
                "-1",
                "007",
                "1.5",
                "abc",
                "9007199254740993",
            ],
        ],
    },
    Known {
        name: "limits_moving_window",
        keys: 1,
        argv: &[
            &["1000", "1000.5", "999", "1002", "abc", "1e3"],
            &["0", "1", "3", "5", "10", "-1", "abc"],
        ],
    },
    Known {
        name: "limits_acquire_moving_window",
        keys: 1,
        argv: &[
            &["1000", "1000.5", "1001.25", "1003", "abc"],
            &["1", "3", "5", "10", "0"],
            &["1", "2", "60", "0", "abc"],
            &["1", "2", "3", "0", "6000", "abc"],
        ],
    },
    Known {
        name: "limits_sliding_window",
        keys: 2,
        argv: &[&["60", "30", "1", "0", "abc"]],
    },
    Known {
        name: "limits_acquire_sliding_window",
        keys: 2,
        argv: &[
            &["1", "5", "10", "100", "abc"],
            &["60", "30", "1", "0"],
            &["1", "2", "5", "0", "-1", "abc"],
        ],
    },
    Known {
        name: "rate_limit_redis_increment",
        keys: 1,
        argv: &[&["60000", "1000", "0", "-5", "abc", "1.5"]],
    },
    Known {
        name: "rate_limit_redis_get",
        keys: 1,
        argv: &[],
    },
    Known {
        name: "rate_limiter_flexible_incr_ttl",
        keys: 1,
        argv: &[
            &["1", "2", "5", "0", "-1", "abc", "1.5"],
            &["60", "1", "0", "-1", "abc", "007"],
        ],
    },
];

/// A key's state before the script: what it holds. TTLs are whole seconds plus half a second,
/// so the scripts' thresholds (whole seconds) are never within the few milliseconds between the
/// two runs.
const STATES: &[&str] = &[
    "absent", "count", "count", "count", "text", "float", "list", "list", "hash",
];
const COUNTS: &[&str] = &["0", "1", "2", "4", "7", "9", "10", "50"];
const STAMPS: &[&str] = &["998", "999.5", "1000", "1000.5", "1001", "1002.25", "abc"];
const TTLS: &[i64] = &[
    0, 0, 1500, 20_500, 29_500, 30_500, 59_500, 60_500, 90_500, 119_500,
];

/// Draws from a list of choices by the random words the runner gave.
struct Pick(std::vec::IntoIter<u32>);

impl Pick {
    fn from<T: Copy>(&mut self, items: &[T]) -> T {
        let n = self.0.next().unwrap_or(0) as usize;
        items[n % items.len()]
    }
}

/// Sets `key` up as `state` says, the same on both sides.
fn set_up(c: &mut RespConn, key: &str, p: &mut Pick) -> Vec<Vec<String>> {
    let ttl = p.from(TTLS);
    let mut cmds: Vec<Vec<String>> = match p.from(STATES) {
        "count" => vec![vec!["SET".into(), key.into(), p.from(COUNTS).into()]],
        "text" => vec![vec!["SET".into(), key.into(), "abc".into()]],
        "float" => vec![vec!["SET".into(), key.into(), "1.5".into()]],
        "list" => {
            let mut push = vec!["RPUSH".to_string(), key.to_string()];
            for _ in 0..=p.from(&[0usize, 1, 2, 3, 5, 8]) {
                push.push(p.from(STAMPS).into());
            }
            vec![push]
        }
        "hash" => vec![vec!["HSET".into(), key.into(), "f".into(), "1".into()]],
        _ => vec![],
    };
    if ttl > 0 && !cmds.is_empty() {
        cmds.push(vec!["PEXPIRE".into(), key.into(), ttl.to_string()]);
    }
    for cmd in &cmds {
        c.call(cmd);
    }
    cmds
}

/// What a key holds and for how long: its type, its value, its TTL (ms, or -1/-2).
fn dump(c: &mut RespConn, key: &str) -> (Reply, Reply, Reply) {
    let kind = c.call(&["TYPE", key]);
    let value = match &kind {
        Reply::Status(t) if t == "string" => c.call(&["GET", key]),
        Reply::Status(t) if t == "list" => c.call(&["LRANGE", key, "0", "-1"]),
        Reply::Status(t) if t == "hash" => c.call(&["HGETALL", key]),
        _ => Reply::Nil,
    };
    (kind, value, c.call(&["PTTL", key]))
}

/// Replies alike: the same shape, errors the same once each side's SHA1 is taken out, and
/// integers equal, or within 100 (milliseconds) where they are times left (the counts the
/// scripts answer stay far below 900; the times left, above).
fn alike(a: &Reply, b: &Reply, shas: (&str, &str)) -> bool {
    match (a, b) {
        (Reply::Int(x), Reply::Int(y)) if *x >= 900 || *y >= 900 => (x - y).abs() <= 100,
        (Reply::Error(x), Reply::Error(y)) => x.replace(shas.0, "SHA") == y.replace(shas.1, "SHA"),
        (Reply::Array(x), Reply::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| alike(x, y, shas))
        }
        _ => a == b,
    }
}

fn sha1(c: &mut RespConn, body: &[u8]) -> String {
    match c.call(&[b"SCRIPT".as_slice(), b"LOAD", body]) {
        Reply::Bulk(sha) => String::from_utf8(sha).unwrap(),
        other => panic!("SCRIPT LOAD: {other:?}"),
    }
}

#[test]
fn each_native_answers_and_writes_as_its_script_does_in_lua() {
    let sluice = Sluice::start();
    let port = sluice.port;
    let conn = RefCell::new(RespConn::connect(port));
    let cases: u32 = std::env::var("NATIVE_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    for known in KNOWN {
        let path = repo_path(&format!("fixtures/known-scripts/{}.lua", known.name));
        let body = std::fs::read(&path).unwrap();
        // One character more: an unknown script, run in Lua.
        let mut changed = body.clone();
        changed.push(b' ');
        let native_sha = sha1(&mut conn.borrow_mut(), &body);
        let lua_sha = sha1(&mut conn.borrow_mut(), &changed);
        let field = format!("script_native_{}", known.name);
        let before = script_count(port, &field);
        let lua_before = script_count(port, "scripts_lua_calls");
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
                "proptest-regressions/scripting_native.txt",
            ))),
            ..Config::default()
        });
        let result = runner.run(&prop::collection::vec(any::<u32>(), 64), |words| {
            let c = &mut *conn.borrow_mut();
            let mut p = Pick(words.into_iter());
            c.call(&["FLUSHALL"]);
            let mut setup = Vec::new();
            for i in 0..known.keys {
                // The same state under both names: set up once, copied by replaying.
                let cmds = set_up(c, &format!("n:{i}"), &mut p);
                for cmd in &cmds {
                    let mut cmd = cmd.clone();
                    cmd[1] = format!("l:{i}");
                    c.call(&cmd);
                }
                setup.push(cmds);
            }
            let argv: Vec<&str> = known.argv.iter().map(|pos| p.from(pos)).collect();
            let by_body = p.from(&[false, true]);
            // Inside MULTI the shards are the EXEC's: a native makes its calls one by one
            // there instead of through its direct lane.
            let in_multi = p.from(&[false, true]);
            let call = |c: &mut RespConn, prefix: &str, sha: &str, body: &[u8]| {
                let mut args: Vec<Vec<u8>> = if by_body {
                    vec![b"EVAL".to_vec(), body.to_vec()]
                } else {
                    vec![b"EVALSHA".to_vec(), sha.as_bytes().to_vec()]
                };
                args.push(known.keys.to_string().into_bytes());
                args.extend((0..known.keys).map(|i| format!("{prefix}:{i}").into_bytes()));
                args.extend(argv.iter().map(|a| a.as_bytes().to_vec()));
                c.call(&args)
            };
            let native = if in_multi {
                c.call(&["MULTI"]);
                call(c, "n", &native_sha, &body);
                match c.call(&["EXEC"]) {
                    Reply::Array(mut replies) if replies.len() == 1 => replies.remove(0),
                    other => panic!("EXEC: {other:?}"),
                }
            } else {
                call(c, "n", &native_sha, &body)
            };
            let lua = call(c, "l", &lua_sha, &changed);
            let shas = (native_sha.as_str(), lua_sha.as_str());
            let context = || {
                format!(
                    "{}: setup {setup:?}, ARGV {argv:?}, by body {by_body}, in MULTI {in_multi}",
                    known.name
                )
            };
            prop_assert!(
                alike(&native, &lua, shas),
                "replies differ: native {native:?}, Lua {lua:?} ({})",
                context()
            );
            for i in 0..known.keys {
                let (n, l) = (dump(c, &format!("n:{i}")), dump(c, &format!("l:{i}")));
                prop_assert!(
                    n.0 == l.0 && n.1 == l.1 && alike(&n.2, &l.2, shas),
                    "key {i} differs: native {n:?}, Lua {l:?} ({})",
                    context()
                );
            }
            Ok::<(), TestCaseError>(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
        // The exact bytes ran natively (often: the edges drawn above are Lua's to answer),
        // and the changed bytes never did.
        let native_calls = script_count(port, &field) - before;
        assert!(
            native_calls >= u64::from(cases) / 8,
            "{}: {native_calls} of {cases} calls ran natively",
            known.name
        );
        let lua_calls = script_count(port, "scripts_lua_calls") - lua_before;
        assert!(
            lua_calls >= u64::from(cases),
            "{}: {lua_calls} Lua calls for {cases} changed scripts",
            known.name
        );
    }
    // Inputs outside what the natives mirror were handed to Lua, as the module promises.
    assert!(script_count(port, "scripts_native_handed_to_lua") > 0);
}

/// INFO scripting also counts the Lua calls that took shards beyond the declared keys': a key
/// the script did not declare (its shard taken for the rest of the run), and a command that
/// takes every shard.
#[test]
fn calls_beyond_the_declared_keys_are_counted() {
    let sluice = Sluice::start();
    let mut c = RespConn::connect(sluice.port);
    let calls = |c: &mut RespConn| {
        c.call(&["PING"]);
        (
            script_count(sluice.port, "scripts_undeclared_key_calls"),
            script_count(sluice.port, "scripts_every_shard_calls"),
        )
    };
    assert_eq!(calls(&mut c), (0, 0));
    c.call(&["EVAL", "return redis.call('incr', KEYS[1])", "1", "k"]);
    assert_eq!(calls(&mut c), (0, 0));
    c.call(&["EVAL", "return redis.call('incr', 'other')", "0"]);
    assert_eq!(calls(&mut c), (1, 0));
    c.call(&["EVAL", "return redis.call('dbsize')", "0"]);
    assert_eq!(calls(&mut c), (1, 1));
}

/// The calls of each command in `INFO commandstats` (0 for one never called).
fn command_calls(c: &mut RespConn, command: &str) -> u64 {
    let Reply::Bulk(info) = c.call(&["INFO", "commandstats"]) else {
        panic!("INFO commandstats");
    };
    let prefix = format!("cmdstat_{command}:calls=");
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// A native's direct lane stands for its commands only where each would run: a user who may
/// not run one of them, and a replica, get from the native what Lua gives them (the error of
/// the call that is refused, the writes before it kept); and where the lane runs, `INFO
/// commandstats` counts the commands it stood for as Lua's calls count.
#[test]
fn a_direct_lane_runs_only_where_its_commands_would() {
    let sluice = Sluice::start();
    let mut c = RespConn::connect(sluice.port);
    let body = std::fs::read(repo_path("fixtures/known-scripts/limits_incr_expire.lua")).unwrap();
    let mut changed = body.clone();
    changed.push(b' ');
    let (native, lua) = (sha1(&mut c, &body), sha1(&mut c, &changed));

    // Counted as the calls of the script in Lua: an INCRBY and, on a new key, an EXPIRE.
    let counts = |c: &mut RespConn, sha: &str, key: &str| {
        c.call(&["CONFIG", "RESETSTAT"]);
        c.call(&["EVALSHA", sha, "1", key, "60", "1"]);
        c.call(&["EVALSHA", sha, "1", key, "60", "1"]);
        (command_calls(c, "incrby"), command_calls(c, "expire"))
    };
    assert_eq!(counts(&mut c, &native, "n:stats"), (2, 1));
    assert_eq!(counts(&mut c, &lua, "l:stats"), (2, 1));

    // A user who may not EXPIRE: the INCRBY lands, then the EXPIRE's refusal, on both paths.
    c.call(&[
        "ACL", "SETUSER", "noexpire", "on", ">pw", "~*", "+@all", "-expire",
    ]);
    let mut u = RespConn::connect(sluice.port);
    assert_eq!(
        u.call(&["AUTH", "noexpire", "pw"]),
        Reply::Status("OK".into())
    );
    let n = u.call(&["EVALSHA", &native, "1", "n:acl", "60", "1"]);
    let l = u.call(&["EVALSHA", &lua, "1", "l:acl", "60", "1"]);
    assert!(
        matches!(&n, Reply::Error(e) if e.starts_with("NOPERM")),
        "{n:?}"
    );
    assert!(alike(&n, &l, (&native, &lua)), "native {n:?}, Lua {l:?}");
    assert_eq!(dump(&mut c, "n:acl"), dump(&mut c, "l:acl"));
    assert_eq!(c.call(&["GET", "n:acl"]), Reply::Bulk(b"1".to_vec()));

    // A replica refuses the first write on both paths (by body: its cache is its own).
    let replica = Sluice::start_with(&["--replicaof", &format!("127.0.0.1:{}", sluice.port)]);
    let mut r = RespConn::connect(replica.port);
    let eval = |r: &mut RespConn, body: &[u8], key: &str| {
        r.call(&[b"EVAL".as_slice(), body, b"1", key.as_bytes(), b"60", b"1"])
    };
    let n = eval(&mut r, &body, "n:ro");
    let l = eval(&mut r, &changed, "l:ro");
    assert!(
        matches!(&n, Reply::Error(e) if e.starts_with("READONLY")),
        "{n:?}"
    );
    assert!(alike(&n, &l, (&native, &lua)), "native {n:?}, Lua {l:?}");
}
