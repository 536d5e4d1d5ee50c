//! Fuzzes command argument parsing and execution in-process, through `sluice_server::Executor`.
//!
//! # Input
//! A structured script (`arbitrary`): a start time, then steps of "move the clock forward by
//! some delta (up to saturating at `u64::MAX`), run one command". A command is a name from the
//! table [`sluice_server::cmd::COMMANDS`] in some letter case, or random bytes, with arguments
//! biased toward what the parsers branch on: a few keys (so commands meet each other's state),
//! option and subcommand names, numbers at the edges of `i64`/`u64`, malformed numbers and
//! durations with every unit.
//!
//! Every command in the table runs, `SHUTDOWN` included: in-process it only flips the shared
//! shutdown flag (and logs a line), and nothing in the table sleeps or blocks.
//!
//! # Invariants
//! - No script panics the server.
//! - Every reply is exactly one well-formed RESP value in the connection's protocol (RESP2, or
//!   RESP3 after `HELLO 3`), decoded by `redis-protocol` consuming every byte. The only empty
//!   reply is a `SHUTDOWN` that went through (the connection then closes without a reply).
//! - Every error reply starts with a known code and holds no CR or LF.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use redis_protocol::{resp2, resp3};
use sluice_core::Nanos;
use sluice_server::cmd::COMMANDS;
use sluice_server::{Config, Executor};

/// Few keys, so that commands of different types collide on them.
const KEYS: &[&str] = &["k", "key", "a", "", "rl:user:1", "{k}x"];

/// Option names, subcommands, algorithm names, CONFIG parameters, and numbers and durations that
/// are almost right.
const TOKENS: &[&str] = &[
    // RL.CHECK and its algorithms
    "BURST", "COST", "ALGO", "DRY", "TOKEN", "GCRA", "SLIDING", "FIXED", "LOG", "LEAKY", "TOKENS",
    // SET, EXPIRE
    "NX", "XX", "GT", "LT", "EX", "PX", "EXAT", "PXAT", "KEEPTTL", "GET",
    // HELLO, AUTH, CLIENT
    "AUTH", "SETNAME", "default", "secret", "GETNAME", "SETINFO", "LIB-NAME", "LIB-VER", "ID",
    "LIST", "INFO", "KILL", "HELP", "ADDR", "LADDR", "SKIPME", "yes", "no", "127.0.0.1:0",
    "[::1]:6379", "2", "3",
    // CONFIG, COMMAND, INFO, FLUSHALL, SHUTDOWN
    "SET", "RESETSTAT", "requirepass", "maxmemory", "maxmemory-policy", "port", "*", "p*",
    "[a-", "\\", "COUNT", "DOCS", "server", "clients", "stats", "keyspace", "all", "everything",
    "ASYNC", "SYNC", "NOSAVE", "SAVE", "NOW", "FORCE", "ABORT",
    // numbers that parsers must refuse, or accept exactly
    "-0", "+1", "01", " 1", "1 ", "1.5", "1e3", "0x10", "-", "", "00",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808",
    "-9223372036854775809", "18446744073709551615", "18446744073709551616",
    // durations
    "500ms", "1d", "0ms", "0", "1s", "1m", "1h", "10", "1MS", "1us", "ms", "s", "-1s",
    "213503d", "213504d", "5124095h", "18446744073709551615ms", "18446744073709552s",
];

/// Where numbers get interesting.
const EDGES: &[i128] = &[
    0,
    1,
    1_000,
    86_400,
    i32::MAX as i128,
    u32::MAX as i128,
    1_000_000_000_000,
    i64::MAX as i128 / 1_000_000,
    i64::MAX as i128 / 1_000,
    u64::MAX as i128 / 1_000_000_000,
    u64::MAX as i128 / 1_000_000,
    u64::MAX as i128 / 1_000,
    i64::MAX as i128,
    i64::MIN as i128,
    u64::MAX as i128,
];

const UNITS: &[&str] = &["", "ms", "s", "m", "h", "d", "MS", "D", "x", "us"];

#[derive(Arbitrary, Debug)]
enum Case {
    Lower,
    Upper,
    Mixed,
}

impl Case {
    fn apply(&self, s: &str) -> Vec<u8> {
        match self {
            Case::Lower => s.to_ascii_lowercase().into_bytes(),
            Case::Upper => s.to_ascii_uppercase().into_bytes(),
            Case::Mixed => s
                .bytes()
                .enumerate()
                .map(|(i, b)| if i % 2 == 0 { b.to_ascii_uppercase() } else { b })
                .collect(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Number {
    Small(i8),
    /// An edge value, moved by a small delta (possibly past the type's range).
    Near { edge: u8, delta: i8 },
    I64(i64),
    U64(u64),
}

impl Number {
    fn render(&self) -> String {
        match self {
            Number::Small(n) => n.to_string(),
            Number::Near { edge, delta } => {
                let edge = EDGES[usize::from(*edge) % EDGES.len()];
                (edge + i128::from(*delta)).to_string()
            }
            Number::I64(n) => n.to_string(),
            Number::U64(n) => n.to_string(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Arg {
    Key(u8),
    Token(u8, Case),
    Number(Number),
    Duration(Number, u8),
    Raw(Vec<u8>),
}

impl Arg {
    fn render(&self) -> Vec<u8> {
        match self {
            Arg::Key(i) => KEYS[usize::from(*i) % KEYS.len()].as_bytes().to_vec(),
            Arg::Token(i, case) => case.apply(TOKENS[usize::from(*i) % TOKENS.len()]),
            Arg::Number(n) => n.render().into_bytes(),
            Arg::Duration(n, unit) => {
                format!("{}{}", n.render(), UNITS[usize::from(*unit) % UNITS.len()]).into_bytes()
            }
            Arg::Raw(bytes) => bytes.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Name {
    Known(u8, Case),
    Raw(Vec<u8>),
}

impl Name {
    fn render(&self) -> Vec<u8> {
        match self {
            Name::Known(i, case) => case.apply(COMMANDS[usize::from(*i) % COMMANDS.len()].name),
            Name::Raw(bytes) => bytes.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Advance {
    None,
    Nanos(u16),
    Millis(u16),
    Seconds(u32),
    Days(u16),
    Huge(u64),
}

impl Advance {
    fn nanos(&self) -> u64 {
        match *self {
            Advance::None => 0,
            Advance::Nanos(n) => u64::from(n),
            Advance::Millis(n) => u64::from(n) * Nanos::PER_MS,
            Advance::Seconds(n) => u64::from(n) * Nanos::PER_SEC,
            Advance::Days(n) => u64::from(n) * 86_400 * Nanos::PER_SEC,
            Advance::Huge(n) => n,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Start {
    /// Around now, as the server clock (Unix time) would read.
    Now(u32),
    Zero,
    Any(u64),
}

#[derive(Arbitrary, Debug)]
struct Step {
    advance: Advance,
    name: Name,
    args: Vec<Arg>,
}

#[derive(Arbitrary, Debug)]
struct Script {
    start: Start,
    steps: Vec<Step>,
}

const ERROR_CODES: &[&str] = &["ERR", "WRONGTYPE", "NOAUTH", "WRONGPASS", "NOPROTO"];

fn check_error(text: &str, reply: &[u8]) {
    let code = text.split(' ').next().unwrap_or("");
    assert!(
        ERROR_CODES.contains(&code),
        "unknown error code {code:?} in {:?}",
        String::from_utf8_lossy(reply)
    );
    assert!(
        !text.contains(['\r', '\n']),
        "CR or LF inside an error: {:?}",
        String::from_utf8_lossy(reply)
    );
}

fn check_errors_resp2(frame: &resp2::types::OwnedFrame, reply: &[u8]) {
    use resp2::types::OwnedFrame;
    match frame {
        OwnedFrame::Error(text) => check_error(text, reply),
        OwnedFrame::Array(items) => items.iter().for_each(|f| check_errors_resp2(f, reply)),
        _ => {}
    }
}

fn check_errors_resp3(frame: &resp3::types::OwnedFrame, reply: &[u8]) {
    use resp3::types::OwnedFrame;
    match frame {
        OwnedFrame::SimpleError { data, .. } => check_error(data, reply),
        OwnedFrame::BlobError { data, .. } => check_error(&String::from_utf8_lossy(data), reply),
        OwnedFrame::Array { data, .. } | OwnedFrame::Push { data, .. } => {
            data.iter().for_each(|f| check_errors_resp3(f, reply))
        }
        OwnedFrame::Set { data, .. } => data.iter().for_each(|f| check_errors_resp3(f, reply)),
        OwnedFrame::Map { data, .. } => data.iter().for_each(|(k, v)| {
            check_errors_resp3(k, reply);
            check_errors_resp3(v, reply);
        }),
        _ => {}
    }
}

/// Asserts that `reply` is one well-formed value in the connection's protocol.
fn check_reply(resp3_on: bool, request: &[Vec<u8>], reply: &[u8]) {
    if reply.is_empty() {
        assert!(
            request[0].eq_ignore_ascii_case(b"shutdown"),
            "no reply to {request:?}"
        );
        return;
    }
    let shown = || format!("{request:?} -> {:?}", String::from_utf8_lossy(reply));
    let used = if resp3_on {
        match resp3::decode::complete::decode(reply) {
            Ok(Some((frame, used))) => {
                check_errors_resp3(&frame, reply);
                used
            }
            other => panic!("not one RESP3 value ({other:?}): {}", shown()),
        }
    } else {
        match resp2::decode::decode(reply) {
            Ok(Some((frame, used))) => {
                check_errors_resp2(&frame, reply);
                used
            }
            other => panic!("not one RESP2 value ({other:?}): {}", shown()),
        }
    };
    assert_eq!(used, reply.len(), "trailing bytes after the reply: {}", shown());
}

fuzz_target!(|script: Script| {
    let mut executor = Executor::new(Config::default_for_tests());
    let mut now = match script.start {
        Start::Now(offset) => 1_700_000_000 * Nanos::PER_SEC + u64::from(offset) * Nanos::PER_MS,
        Start::Zero => 0,
        Start::Any(t) => t,
    };
    // Which protocol the connection speaks, followed from the replies that change it.
    let mut resp3_on = false;
    for step in &script.steps {
        now = now.saturating_add(step.advance.nanos());
        let mut request = vec![step.name.render()];
        request.extend(step.args.iter().map(Arg::render));
        let args: Vec<&[u8]> = request.iter().map(Vec::as_slice).collect();
        let reply = executor.exec_at(Nanos(now), &args);
        check_reply(resp3_on, &request, &reply);
        let name = &request[0];
        if name.eq_ignore_ascii_case(b"hello") {
            match reply.first() {
                Some(b'%') => resp3_on = true,
                Some(b'*') => resp3_on = false,
                _ => {}
            }
        } else if name.eq_ignore_ascii_case(b"reset") && reply.starts_with(b"+RESET") {
            resp3_on = false;
        }
    }
});
