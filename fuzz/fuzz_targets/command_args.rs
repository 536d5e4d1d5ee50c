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
//! - Every error reply starts with a known code (or redis-cell's `Cell`, from `CL.THROTTLE`)
//!   and holds no CR or LF.

#![no_main]

use std::sync::OnceLock;

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

/// Redis's error codes that Sluice uses.
const ERROR_CODES: &[&[u8]] = &[
    b"ERR",
    b"WRONGTYPE",
    b"NOAUTH",
    b"WRONGPASS",
    b"NOPROTO",
    b"EXECABORT",
    b"OOM",
];

/// `CL.THROTTLE` answers with redis-cell's own texts (`Cell error: ...`), on purpose.
const CELL_CODE: &[u8] = b"Cell";

/// An error line may quote argument bytes as they came (Redis does, for unknown commands), so it
/// is checked as bytes: a known code first, and no CR or LF that would end the line early.
fn check_error(text: &[u8], request: &[Vec<u8>], reply: &[u8]) {
    let code = text.split(|&b| b == b' ').next().unwrap_or_default();
    // CL.THROTTLE's own texts, directly or inside an EXEC reply that queued it.
    let cell = code == CELL_CODE
        && (request[0].eq_ignore_ascii_case(b"cl.throttle")
            || request[0].eq_ignore_ascii_case(b"exec"));
    assert!(
        cell || ERROR_CODES.contains(&code),
        "unknown error code {:?} in {:?}",
        String::from_utf8_lossy(code),
        String::from_utf8_lossy(reply)
    );
    assert!(
        !text.iter().any(|&b| b == b'\r' || b == b'\n'),
        "CR or LF inside an error: {:?}",
        String::from_utf8_lossy(reply)
    );
}

/// The byte ranges of every error in a RESP2 value.
fn errors_resp2(frame: &resp2::types::RangeFrame, found: &mut Vec<(usize, usize)>) {
    use resp2::types::RangeFrame;
    match frame {
        RangeFrame::Error(range) => found.push(*range),
        RangeFrame::Array(items) => items.iter().for_each(|f| errors_resp2(f, found)),
        _ => {}
    }
}

/// The byte ranges of every error in a RESP3 value.
fn errors_resp3(frame: &resp3::types::RangeFrame, found: &mut Vec<(usize, usize)>) {
    use resp3::types::RangeFrame;
    match frame {
        RangeFrame::SimpleError { data, .. } | RangeFrame::BlobError { data, .. } => {
            found.push(*data)
        }
        RangeFrame::Array { data, .. } | RangeFrame::Push { data, .. } => {
            data.iter().for_each(|f| errors_resp3(f, found))
        }
        RangeFrame::Set { data, .. } => data.iter().for_each(|f| errors_resp3(f, found)),
        RangeFrame::Map { data, .. } => data.iter().for_each(|(k, v)| {
            errors_resp3(k, found);
            errors_resp3(v, found);
        }),
        _ => {}
    }
}

/// Asserts that `reply` is one well-formed value in the connection's protocol. Decoded to byte
/// ranges, not owned frames: `redis-protocol` insists on UTF-8 only when it builds strings.
fn check_reply(resp3_on: bool, request: &[Vec<u8>], reply: &[u8]) {
    if reply.is_empty() {
        assert!(
            request[0].eq_ignore_ascii_case(b"shutdown"),
            "no reply to {request:?}"
        );
        return;
    }
    let shown = || format!("{request:?} -> {:?}", String::from_utf8_lossy(reply));
    let mut errors = Vec::new();
    let used = if resp3_on {
        match resp3::decode::complete::decode_range(reply) {
            Ok(Some((frame, used))) => {
                errors_resp3(&frame, &mut errors);
                used
            }
            other => panic!("not one RESP3 value ({other:?}): {}", shown()),
        }
    } else {
        match resp2::decode::decode_range(reply) {
            Ok(Some((frame, used))) => {
                errors_resp2(&frame, &mut errors);
                used
            }
            other => panic!("not one RESP2 value ({other:?}): {}", shown()),
        }
    };
    assert_eq!(used, reply.len(), "trailing bytes after the reply: {}", shown());
    for (start, end) in errors {
        check_error(&reply[start..end], request, reply);
    }
}

/// The test defaults with one thread and two shards: a fresh server per input must be cheap
/// (the default 64 shards per core dominated the run time), few shards make keys meet in one
/// table, and two still exercise the paths that visit every shard (DBSIZE, FLUSHALL, INFO).
fn config() -> Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut config = Config::default_for_tests();
            config.threads = Some(1);
            config.shards = Some(2);
            config
        })
        .clone()
}

fuzz_target!(|script: Script| {
    let mut executor = Executor::new(config());
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
        let name = &request[0];
        // HELLO switches first and answers in the new protocol: a map in RESP3, an array in
        // RESP2 (an error leaves the protocol as it was).
        if name.eq_ignore_ascii_case(b"hello") {
            match reply.first() {
                Some(b'%') => resp3_on = true,
                Some(b'*') => resp3_on = false,
                _ => {}
            }
        }
        check_reply(resp3_on, &request, &reply);
        if name.eq_ignore_ascii_case(b"reset") && reply.starts_with(b"+RESET") {
            resp3_on = false;
        }
    }
});
