//! INCRBYFLOAT and HINCRBYFLOAT against a real redis-server: random sequences of float
//! increments run on both servers, every reply compared exactly. Redis 7.0 sums these in x87
//! 80-bit `long double` and stores the `%.17Lf` text, which it reads back at the next
//! increment; a sum that is right in f64 but not bit-for-bit in `long double` shows here as
//! a different digit, often many commands later.
//!
//! Increments and stored values come from a pool of edge forms (ties at the 17th decimal,
//! i64 edges, values near `LDBL_MAX` and the smallest denormals, hexadecimal floats, `inf`,
//! strings `strtold` half-reads) and from random decimals and hexadecimals whose exponents
//! reach the ends of the `long double` range. Keys are few (two strings, one hash of two
//! fields, one list), so values are read back, overwritten and met with the wrong type.
//!
//! Budget: `SLUICE_INCRBYFLOAT_CASES` sequences (default [`DEFAULT_CASES`], about 36 s and
//! 36,000 commands on a 2-core machine) of up to 24 commands, and at most [`MAX_TIME`] of them:
//! the sequences generated past it are not run (the count printed is of those run). A difference is shrunk by proptest to a minimal sequence, printed as redis-cli
//! lines.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sluice_tests::resp::{Reply, RespConn};
use sluice_tests::{RedisServer, Sluice, have_tool};

const DEFAULT_CASES: u32 = 3000;
const MAX_TIME: Duration = Duration::from_secs(90);

const STRINGS: &[&str] = &["a", "b"];
const FIELDS: &[&str] = &["f", "g"];
/// The hash, and a list: each is the wrong type for the other family's commands.
const HASH: &str = "h";
const LIST: &str = "l";
/// The keys DEL removes.
const DELETED: &[&str] = &["a", "b", HASH];

/// Numbers and near-numbers both as increments and as stored values.
const POOL: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "0.1",
    "-0.1",
    "0.2",
    "0.3",
    "10.50",
    "1.5",
    "3.0e3",
    "5.0e3",
    "2.0e2",
    "1e3",
    "-5",
    "1e20",
    "-1e20",
    "1e-17",
    "5e-18",
    "6e-18",
    "1e-20",
    // 2^-18 and 3 × 2^-18: ties at the 17th decimal.
    "0.000003814697265625",
    "0.000011444091796875",
    "0.25",
    "-0.25",
    "0.5",
    "9223372036854775807",
    "9223372036854775806",
    "-9223372036854775808",
    "9223372036854775808",
    "18446744073709551616",
    "123456789012345678901234567890",
    "1e4932",
    "-1e4932",
    "1.18e4932",
    "0x1.fffffffffffffffep16383",
    "-0x1.fffffffffffffffep16383",
    "1e-4940",
    "2e-4951",
    "0x1p-16445",
    "0x1p-16382",
    "0x1p3",
    "0x1.8",
    "0X.8P1",
    "0xffffffffffffffffff",
    "+5",
    ".5",
    "5.",
    "+.5",
    "00012",
    "1E2",
    "1e+2",
    "inf",
    "-inf",
    "+inf",
    "Infinity",
    "-INF",
    "nan",
    "-nan",
    " 1",
    "1 ",
    "",
    "abc",
    "1e",
    "1e+",
    "0x",
    "0x1p",
    ".",
    "1_0",
    "1.2.3",
    "Infinit",
    "1e5000",
    "1e-4951",
    "0x1p-16446",
    "0x1p99999",
];

const SIGNS: &[&str] = &["", "-", "+"];

/// Integers HINCRBY and INCRBY add, up to the i64 edges.
const INTEGERS: &[&str] = &[
    "1",
    "-1",
    "100",
    "9223372036854775807",
    "-9223372036854775808",
];

/// A random decimal: up to 21 digits, a point anywhere or none, an exponent from the tiny to
/// the huge end of the `long double` range (or none).
fn decimal() -> impl Strategy<Value = String> {
    let exponent = prop_oneof![
        3 => Just(None),
        3 => (-25i32..25).prop_map(Some),
        1 => (-4965i32..-4925).prop_map(Some),
        1 => (4910i32..4935).prop_map(Some),
    ];
    (select(SIGNS), "[0-9]{1,21}", 0usize..24, exponent).prop_map(|(sign, digits, point, exp)| {
        let mut s = format!("{sign}{digits}");
        if point <= digits.len() {
            s.insert(sign.len() + point, '.');
        }
        if let Some(e) = exp {
            s.push_str(&format!("e{e}"));
        }
        s
    })
}

/// A random hexadecimal float, with or without a binary exponent.
fn hexadecimal() -> impl Strategy<Value = String> {
    (
        select(SIGNS),
        "[0-9a-fA-F]{1,20}(\\.[0-9a-f]{0,6})?",
        prop_oneof![
            Just(None),
            (-16500i32..16400).prop_map(Some),
            (-70i32..70).prop_map(Some)
        ],
    )
        .prop_map(|(sign, digits, exp)| match exp {
            Some(e) => format!("{sign}0x{digits}p{e}"),
            None => format!("{sign}0x{digits}"),
        })
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(POOL).prop_map(str::to_owned),
        4 => decimal(),
        1 => hexadecimal(),
    ]
}

fn string_key() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => select(STRINGS).prop_map(str::to_owned),
        1 => Just(HASH.to_owned()),
        1 => Just(LIST.to_owned()),
    ]
}

fn hash_key() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => Just(HASH.to_owned()),
        1 => select(STRINGS).prop_map(str::to_owned),
        1 => Just(LIST.to_owned()),
    ]
}

fn field() -> impl Strategy<Value = String> {
    select(FIELDS).prop_map(str::to_owned)
}

fn command() -> impl Strategy<Value = Vec<String>> {
    let v = |xs: &[&str]| xs.iter().map(|&x| x.to_owned()).collect::<Vec<_>>();
    prop_oneof![
        8 => (string_key(), number()).prop_map(move |(k, n)| v(&["INCRBYFLOAT", &k, &n])),
        8 => (hash_key(), field(), number())
            .prop_map(move |(k, f, n)| v(&["HINCRBYFLOAT", &k, &f, &n])),
        2 => (select(STRINGS), number()).prop_map(move |(k, n)| v(&["SET", k, &n])),
        2 => (field(), number()).prop_map(move |(f, n)| v(&["HSET", HASH, &f, &n])),
        1 => (select(STRINGS), select(INTEGERS)).prop_map(move |(k, n)| v(&["INCRBY", k, n])),
        1 => (field(), select(INTEGERS)).prop_map(move |(f, n)| v(&["HINCRBY", HASH, &f, n])),
        1 => select(STRINGS).prop_map(move |k| v(&["GET", k])),
        1 => field().prop_map(move |f| v(&["HGET", HASH, &f])),
        1 => select(DELETED).prop_map(move |k| v(&["DEL", k])),
        1 => select(STRINGS).prop_map(move |k| v(&["EXPIRE", k, "1000"])),
        1 => select(STRINGS).prop_map(move |k| v(&["TTL", k])),
        1 => Just(v(&["RPUSH", LIST, "x"])),
        // Wrong arity.
        1 => Just(v(&["INCRBYFLOAT", "a"])),
        1 => Just(v(&["HINCRBYFLOAT", HASH, "f"])),
    ]
}

fn sequence() -> impl Strategy<Value = Vec<Vec<String>>> {
    prop::collection::vec(command(), 1..24)
}

/// The command as a redis-cli line, arguments quoted.
fn cli_line(cmd: &[String]) -> String {
    cmd.iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `seq` on both servers; the first difference is the error. TTL may differ by a second
/// (the servers answer moments apart); every other reply must be byte for byte the same.
fn run(seq: &[Vec<String>], redis: u16, sluice: u16) -> Result<(), String> {
    let mut r = RespConn::connect(redis);
    let mut s = RespConn::connect(sluice);
    assert_eq!(r.call(&["FLUSHALL"]), Reply::Status("OK".into()));
    assert_eq!(s.call(&["FLUSHALL"]), Reply::Status("OK".into()));
    for (i, cmd) in seq.iter().enumerate() {
        let want = r.call(cmd);
        let got = s.call(cmd);
        let same = match (&want, &got) {
            (Reply::Int(a), Reply::Int(b)) if cmd[0] == "TTL" && *a >= 0 && *b >= 0 => {
                (a - b).abs() <= 1
            }
            _ => want == got,
        };
        if !same {
            return Err(format!(
                "command {} `{}`: redis-server answered {want:?}, Sluice answered {got:?}",
                i + 1,
                cli_line(cmd)
            ));
        }
    }
    Ok(())
}

#[test]
fn float_increments_match_redis_server() {
    if !have_tool("redis-server") {
        eprintln!("redis-server not installed: the INCRBYFLOAT comparison is skipped");
        return;
    }
    let cases = std::env::var("SLUICE_INCRBYFLOAT_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let redis = RedisServer::start(&[]);
    let sluice = Sluice::start();
    let (sequences, commands) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let failed = AtomicBool::new(false);
    let started = Instant::now();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let outcome = runner.run(&sequence(), |seq| {
        // Past the budget no new sequence runs, but a failure found in time still shrinks.
        if started.elapsed() > MAX_TIME && !failed.load(Relaxed) {
            return Ok(());
        }
        sequences.fetch_add(1, Relaxed);
        commands.fetch_add(seq.len(), Relaxed);
        run(&seq, redis.port, sluice.port).map_err(|e| {
            failed.store(true, Relaxed);
            TestCaseError::fail(e)
        })
    });
    eprintln!(
        "incrbyfloat: {} sequences, {} commands, {:.1} s",
        sequences.load(Relaxed),
        commands.load(Relaxed),
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = outcome {
        panic!("Sluice differs from redis-server: {e}");
    }
}
