//! Fuzzes command argument parsing and execution in-process, through `sluice_node::Executor`.
//!
//! # Input
//! A structured script (`arbitrary`): a start time, then steps of "move the clock forward by
//! some delta (up to saturating at `u64::MAX`), run one command". A command is a name from the
//! table [`sluice_node::cmd::COMMANDS`] in some letter case (so every command the table gains
//! is drawn without touching this file), or random bytes, with arguments biased toward what the
//! parsers branch on: a few keys (so commands meet each other's state), option and subcommand
//! names, numbers at the edges of `i64`/`u64`, malformed numbers and durations with every unit.
//!
//! Every command in the table runs. In-process, `SHUTDOWN` only flips the shared shutdown flag
//! (and logs a line); `REPLICAOF host port` only records its target (the Executor starts no
//! replication thread, and its local port is 0, so the "is that myself" check never resolves a
//! host name); `WAIT` and `PSYNC`/`SYNC` leave a state for a connection loop the Executor does
//! not have (see `may_answer_nothing`). Nothing sleeps or blocks.
//!
//! # Invariants
//! - No script panics the server.
//! - Every reply is exactly one complete, well-formed RESP value in the connection's protocol
//!   (RESP2, or RESP3 after `HELLO 3`), decoded by `redis-protocol` consuming every byte.
//!   Exceptions: (P)SUBSCRIBE and (P)UNSUBSCRIBE answer one confirmation per name (each a
//!   complete `[kind, name, count]`); SHUTDOWN that goes through, a WAIT that blocks and a
//!   PSYNC/SYNC that hands the socket off answer nothing (outside MULTI only).
//! - Transactions, followed from the replies (MULTI's `+OK` opens a block; EXEC, DISCARD and
//!   RESET end it):
//!   - inside MULTI every command but MULTI/EXEC/DISCARD/QUIT/RESET answers exactly `+QUEUED`
//!     or one error, and an error dooms the block;
//!   - EXEC answers EXECABORT exactly when the block is doomed, or else `*N` where N is the
//!     number of commands queued, followed by exactly N complete replies and nothing after
//!     them, each checked as its own command's reply in the protocol in force when it ran (a
//!     queued HELLO switches protocol in the middle of the array, as in Redis).
//! - Every error reply, nested ones included, starts with a known code (or redis-cell's
//!   `Cell`, from `CL.THROTTLE`) and holds no CR or LF.
//!
//! - After every command, the settings a connection derives its timers from still give a
//!   deadline without overflow (`CONFIG SET timeout <huge>` once crashed the connection loop;
//!   the executor has no loop, so the check calls what the loop calls).
//!
//! `SLUICE_FUZZ_TRACE=1` prints each request and reply to stderr, to read a crashing script;
//! `SLUICE_FUZZ_EXCLUDE=replconf,...` skips the steps sending those commands (see `excluded`).

#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use redis_protocol::{resp2, resp3};
use sluice_core::Nanos;
use sluice_node::cmd::COMMANDS;
use sluice_node::{Config, Executor};

/// Few keys, so that commands of different types collide on them.
const KEYS: &[&str] = &["k", "key", "a", "", "rl:user:1", "{k}x"];

/// Option names, subcommands, algorithm names, CONFIG parameters, and numbers and durations that
/// are almost right.
const TOKENS: &[&str] = &[
    // RL.CHECK and its algorithms
    "BURST",
    "COST",
    "ALGO",
    "DRY",
    "TOKEN",
    "GCRA",
    "SLIDING",
    "FIXED",
    "LOG",
    "LEAKY",
    "TOKENS",
    // SET, EXPIRE
    "NX",
    "XX",
    "GT",
    "LT",
    "EX",
    "PX",
    "EXAT",
    "PXAT",
    "KEEPTTL",
    "GET",
    // HELLO, AUTH, CLIENT
    "AUTH",
    "SETNAME",
    "default",
    "secret",
    "GETNAME",
    "SETINFO",
    "LIB-NAME",
    "LIB-VER",
    "ID",
    "LIST",
    "INFO",
    "KILL",
    "HELP",
    "ADDR",
    "LADDR",
    "SKIPME",
    "yes",
    "no",
    "127.0.0.1:0",
    "[::1]:6379",
    "2",
    "3",
    // CONFIG, COMMAND, INFO, FLUSHALL, SHUTDOWN
    "SET",
    "RESETSTAT",
    "requirepass",
    "maxmemory",
    "maxmemory-policy",
    "port",
    "*",
    "p*",
    "timeout",
    "maxclients",
    "tcp-keepalive",
    "save",
    "repl-timeout",
    "reject",
    "evict-soonest",
    "[a-",
    "\\",
    "COUNT",
    "DOCS",
    "server",
    "clients",
    "stats",
    "keyspace",
    "all",
    "everything",
    "ASYNC",
    "SYNC",
    "NOSAVE",
    "SAVE",
    "NOW",
    "FORCE",
    "ABORT",
    // numbers that parsers must refuse, or accept exactly
    "-0",
    "+1",
    "01",
    " 1",
    "1 ",
    "1.5",
    "1e3",
    "0x10",
    "-",
    "",
    "00",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    // durations
    "500ms",
    "1d",
    "0ms",
    "0",
    "1s",
    "1m",
    "1h",
    "10",
    "1MS",
    "1us",
    "ms",
    "s",
    "-1s",
    "213503d",
    "213504d",
    "5124095h",
    "18446744073709551615ms",
    "18446744073709552s",
    // REPLICAOF/SLAVEOF, REPLCONF, PSYNC/SYNC, WAIT
    "NO",
    "ONE",
    "127.0.0.1",
    "localhost",
    "6379",
    "65535",
    "65536",
    "listening-port",
    "capa",
    sluice_repl::CAPA,
    "eof",
    "psync2",
    "ACK",
    "GETACK",
    "ip-address",
    "rdb-only",
    "?",
    "-1",
    "0000000000000000000000000000000000000000",
    // SUBSCRIBE family, PUBLISH
    "__sentinel__:hello",
    "ch",
    "h?llo",
    "h*",
    "[",
    // CLIENT KILL TYPE, CONFIG REWRITE, INFO replication
    "TYPE",
    "normal",
    "pubsub",
    "replica",
    "slave",
    "master",
    "REWRITE",
    "replication",
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
                .map(|(i, b)| {
                    if i % 2 == 0 {
                        b.to_ascii_uppercase()
                    } else {
                        b
                    }
                })
                .collect(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Number {
    Small(i8),
    /// An edge value, moved by a small delta (possibly past the type's range).
    Near {
        edge: u8,
        delta: i8,
    },
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
    b"READONLY",
];

/// `CL.THROTTLE` answers with redis-cell's own texts (`Cell error: ...`), on purpose.
const CELL_CODE: &[u8] = b"Cell";

/// Whether a command name (as sent, any case) is `command`.
fn is(name: &[u8], command: &str) -> bool {
    name.eq_ignore_ascii_case(command.as_bytes())
}

/// A request as text, for failure messages.
fn show(request: &[Vec<u8>]) -> String {
    let words: Vec<String> = request
        .iter()
        .map(|a| format!("{:?}", String::from_utf8_lossy(a)))
        .collect();
    format!("[{}]", words.join(" "))
}

/// An error line may quote argument bytes as they came (Redis does, for unknown commands), so it
/// is checked as bytes: a known code first, and no CR or LF that would end the line early.
/// `request` is the command whose reply holds the error (the queued one, inside EXEC).
fn check_error(text: &[u8], request: &[Vec<u8>], shown: &dyn Fn() -> String) {
    let code = text.split(|&b| b == b' ').next().unwrap_or_default();
    let cell = code == CELL_CODE && is(&request[0], "cl.throttle");
    assert!(
        cell || ERROR_CODES.contains(&code),
        "unknown error code {:?} in {}",
        String::from_utf8_lossy(code),
        shown()
    );
    assert!(
        !text.iter().any(|&b| b == b'\r' || b == b'\n'),
        "CR or LF inside an error: {}",
        shown()
    );
}

/// One decoded value, as byte ranges into the buffer it was decoded from (`redis-protocol`
/// insists on UTF-8 only when it builds owned strings).
enum Frame {
    Resp2(resp2::types::RangeFrame),
    Resp3(resp3::types::RangeFrame),
}

impl Frame {
    fn is_error(&self) -> bool {
        matches!(
            self,
            Frame::Resp2(resp2::types::RangeFrame::Error(_))
                | Frame::Resp3(
                    resp3::types::RangeFrame::SimpleError { .. }
                        | resp3::types::RangeFrame::BlobError { .. }
                )
        )
    }

    /// The byte ranges of every error in the value, nested ones included.
    fn errors(&self) -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        match self {
            Frame::Resp2(f) => errors_resp2(f, &mut found),
            Frame::Resp3(f) => errors_resp3(f, &mut found),
        }
        found
    }

    /// The kind (`subscribe`, `unsubscribe`, ...) of a pub/sub confirmation
    /// `[kind, channel, count]`: an array in RESP2, a push in RESP3.
    fn confirmation_kind<'b>(&self, buf: &'b [u8]) -> Option<&'b [u8]> {
        use resp2::types::RangeFrame as R2;
        use resp3::types::RangeFrame as R3;
        let (start, end) = match self {
            Frame::Resp2(R2::Array(items)) => match items.as_slice() {
                [R2::BulkString(kind), _, R2::Integer(_)] => *kind,
                _ => return None,
            },
            Frame::Resp3(R3::Push { data, .. }) => match data.as_slice() {
                [R3::BlobString { data: kind, .. }, _, R3::Number { .. }] => *kind,
                _ => return None,
            },
            _ => return None,
        };
        Some(&buf[start..end])
    }
}

fn errors_resp2(frame: &resp2::types::RangeFrame, found: &mut Vec<(usize, usize)>) {
    use resp2::types::RangeFrame;
    match frame {
        RangeFrame::Error(range) => found.push(*range),
        RangeFrame::Array(items) => items.iter().for_each(|f| errors_resp2(f, found)),
        _ => {}
    }
}

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

/// Decodes the one complete value at the start of `buf` in the given protocol and checks its
/// errors (as errors of `request`); returns it with the number of bytes it takes.
fn value_at(
    resp3_on: bool,
    request: &[Vec<u8>],
    buf: &[u8],
    shown: &dyn Fn() -> String,
) -> (Frame, usize) {
    let (frame, used) = if resp3_on {
        match resp3::decode::complete::decode_range(buf) {
            Ok(Some((frame, used))) => (Frame::Resp3(frame), used),
            other => panic!("not a complete RESP3 value ({other:?}): {}", shown()),
        }
    } else {
        match resp2::decode::decode_range(buf) {
            Ok(Some((frame, used))) => (Frame::Resp2(frame), used),
            other => panic!("not a complete RESP2 value ({other:?}): {}", shown()),
        }
    };
    assert!(
        used > 0 && used <= buf.len(),
        "decoder took {used} bytes: {}",
        shown()
    );
    for (start, end) in frame.errors() {
        check_error(&buf[start..end], request, shown);
    }
    (frame, used)
}

/// Asserts that `reply` is exactly one complete value, nothing after it; returns it.
fn one_value(
    resp3_on: bool,
    request: &[Vec<u8>],
    reply: &[u8],
    shown: &dyn Fn() -> String,
) -> Frame {
    let (frame, used) = value_at(resp3_on, request, reply, shown);
    assert_eq!(used, reply.len(), "bytes after the reply: {}", shown());
    frame
}

/// What the checker knows of the connection, followed from the replies alone.
#[derive(Debug, Default)]
struct Conn {
    /// RESP3 after a `HELLO 3` that succeeded; RESP2 again after `HELLO 2` or `RESET`.
    resp3: bool,
    /// Open from MULTI's `+OK` until the EXEC, DISCARD or RESET that ends the block.
    tx: Option<Tx>,
}

#[derive(Debug, Default)]
struct Tx {
    /// The requests answered `+QUEUED`, in order: EXEC must answer once for each.
    queued: Vec<Vec<Vec<u8>>>,
    /// A request was refused while queueing: EXEC must answer EXECABORT.
    failed: bool,
}

/// Commands that act on the transaction and so run at once inside MULTI (the server's
/// `cmd::multi::controls_transaction`); every other command is queued or refused.
fn controls_transaction(name: &[u8]) -> bool {
    ["multi", "exec", "discard", "quit", "reset"]
        .iter()
        .any(|c| is(name, c))
}

/// Commands whose reply is one confirmation per channel or pattern (refused inside MULTI).
fn confirms_each(name: &[u8]) -> bool {
    ["subscribe", "psubscribe", "unsubscribe", "punsubscribe"]
        .iter()
        .any(|c| is(name, c))
}

/// Commands that may, outside MULTI, write nothing at all to the in-process Executor:
/// - `SHUTDOWN` that goes through: the connection closes without a reply, as with Redis.
/// - `WAIT` with fewer replicas acked than asked for (here there are no replicas, so any
///   `numreplicas` > 0): `apply` only sets `session.blocked`; the connection loop (`conn.rs`)
///   writes the count when acks arrive or the timeout passes, and the Executor has no loop.
///   Inside EXEC it answers at once (`in_exec`), which the EXEC check holds it to.
/// - `PSYNC`, and `SYNC` (the same code path, `psync::start`), after `REPLCONF capa
///   sluice-v1`: `apply` only sets `session.handoff`; the connection loop hands the socket to
///   the replication thread, which answers `+FULLRESYNC` or `+CONTINUE`. The Executor has no
///   such thread. Both are `no_multi`, so they never run inside EXEC.
/// - `REPLCONF` whose options reach `ACK` or `GETACK`: a replica's ack on a connection that is
///   not a replica link is ignored without a reply, as Redis ignores it (real acks arrive on
///   the handed-off link, read by the replication thread). `no_multi`, so never inside EXEC.
///
/// Nothing else may be silent: a command that writes no reply leaves a real client waiting,
/// and inside EXEC it breaks the array's count.
fn may_answer_nothing(name: &[u8]) -> bool {
    ["shutdown", "wait", "psync", "sync", "replconf"]
        .iter()
        .any(|c| is(name, c))
}

/// Parses EXEC's array header `*N\r\n`; returns N and the header's length.
fn array_header(reply: &[u8], shown: &dyn Fn() -> String) -> (usize, usize) {
    let end = reply
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or_else(|| panic!("EXEC's header has no CRLF: {}", shown()));
    let digits = &reply[1..end];
    assert!(
        !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) && digits.len() <= 18,
        "EXEC's header is not *<count>: {}",
        shown()
    );
    let n = std::str::from_utf8(digits)
        .expect("digits")
        .parse()
        .expect("fits");
    (n, end + 2)
}

/// EXEC: an error (EXECABORT exactly when the block was doomed), or `*N` with N the number of
/// queued commands, then exactly N complete replies and nothing after them. Each reply is
/// checked as its queued command's own, in the protocol in force when that command ran: a
/// queued HELLO switches it in the middle of the array (the header was written before), as
/// in Redis.
fn check_exec(conn: &mut Conn, request: &[Vec<u8>], reply: &[u8]) {
    let shown = || format!("{} -> {:?}", show(request), String::from_utf8_lossy(reply));
    if reply.first() != Some(&b'*') {
        let frame = one_value(conn.resp3, request, reply, &shown);
        assert!(
            frame.is_error(),
            "EXEC answered neither an array nor an error: {}",
            shown()
        );
        if reply.starts_with(b"-EXECABORT ") {
            let tx = conn.tx.take();
            assert!(
                tx.as_ref().is_some_and(|tx| tx.failed),
                "EXECABORT, but the block {tx:?} had nothing refused: {}",
                shown()
            );
        } else if let Some(tx) = conn.tx.as_mut() {
            // Refused before it ran (arity): the block stays open and is doomed.
            tx.failed = true;
        }
        return;
    }
    let Some(tx) = conn.tx.take() else {
        panic!("EXEC answered an array without MULTI: {}", shown());
    };
    assert!(
        !tx.failed,
        "EXEC ran a block that had a refused command: {}",
        shown()
    );
    let (n, mut pos) = array_header(reply, &shown);
    assert_eq!(
        n,
        tx.queued.len(),
        "EXEC's header counts {n} replies for {} queued commands: {}",
        tx.queued.len(),
        shown()
    );
    for (i, queued) in tx.queued.iter().enumerate() {
        let rest = &reply[pos..];
        assert!(
            !rest.is_empty(),
            "EXEC's header promised {n} replies, only {i} follow (none for {}): {}",
            show(queued),
            shown()
        );
        if is(&queued[0], "hello") {
            match rest[0] {
                b'%' => conn.resp3 = true,
                b'*' => conn.resp3 = false,
                _ => {}
            }
        }
        let (_, used) = value_at(conn.resp3, queued, rest, &shown);
        pos += used;
    }
    assert_eq!(
        pos,
        reply.len(),
        "bytes after EXEC's {n} replies: {}",
        shown()
    );
}

/// Checks one command's reply against the invariants (module docs) and follows the
/// connection's protocol and transaction.
fn check_reply(conn: &mut Conn, request: &[Vec<u8>], reply: &[u8]) {
    let name = request[0].as_slice();
    let shown = || format!("{} -> {:?}", show(request), String::from_utf8_lossy(reply));
    if let Some(tx) = conn.tx.as_mut()
        && !controls_transaction(name)
    {
        if reply == b"+QUEUED\r\n" {
            tx.queued.push(request.to_vec());
        } else {
            let frame = one_value(conn.resp3, request, reply, &shown);
            assert!(
                frame.is_error(),
                "inside MULTI, neither +QUEUED nor an error: {}",
                shown()
            );
            tx.failed = true;
        }
        return;
    }
    if is(name, "exec") {
        return check_exec(conn, request, reply);
    }
    // HELLO switches first and answers in the new protocol: a map in RESP3, an array in RESP2
    // (an error leaves the protocol as it was).
    if is(name, "hello") {
        match reply.first() {
            Some(b'%') => conn.resp3 = true,
            Some(b'*') => conn.resp3 = false,
            _ => {}
        }
    }
    if reply.is_empty() {
        assert!(may_answer_nothing(name), "no reply to {}", show(request));
        return;
    }
    if confirms_each(name) && reply[0] != b'-' {
        // One confirmation per channel or pattern named; with none named, UNSUBSCRIBE confirms
        // each one dropped, or once with a null if there were none.
        let kind = name.to_ascii_lowercase();
        let mut pos = 0;
        let mut count = 0;
        while pos < reply.len() {
            let (frame, used) = value_at(conn.resp3, request, &reply[pos..], &shown);
            assert_eq!(
                frame.confirmation_kind(&reply[pos..]),
                Some(kind.as_slice()),
                "not a {} confirmation: {}",
                String::from_utf8_lossy(&kind),
                shown()
            );
            pos += used;
            count += 1;
        }
        if request.len() > 1 {
            assert_eq!(
                count,
                request.len() - 1,
                "one confirmation per name: {}",
                shown()
            );
        }
        return;
    }
    let frame = one_value(conn.resp3, request, reply, &shown);
    if is(name, "multi") && reply == b"+OK\r\n" {
        assert!(
            conn.tx.is_none(),
            "MULTI inside MULTI answered +OK: {}",
            shown()
        );
        conn.tx = Some(Tx::default());
    } else if (is(name, "discard") && reply == b"+OK\r\n")
        || (is(name, "reset") && reply == b"+RESET\r\n")
    {
        assert!(
            conn.tx.is_some() || !is(name, "discard"),
            "DISCARD without MULTI answered +OK: {}",
            shown()
        );
        conn.tx = None;
        if is(name, "reset") {
            conn.resp3 = false;
        }
    } else if let Some(tx) = conn.tx.as_mut()
        && frame.is_error()
        && reply != b"-ERR MULTI calls can not be nested\r\n"
    {
        // MULTI, DISCARD, RESET or QUIT refused before it ran (arity): the block is doomed, as
        // in Redis. A nested MULTI is only an error of its own.
        tx.failed = true;
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

/// `SLUICE_FUZZ_TRACE=1` prints every request and reply to stderr (to read a crash's script).
fn trace() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("SLUICE_FUZZ_TRACE").is_some())
}

/// `SLUICE_FUZZ_EXCLUDE=name,name` skips every step that sends one of these commands (any
/// case, drawn from the table or spelled by raw bytes): to fuzz on past a known finding until
/// it is fixed. The checks themselves never change. Unset in `scripts/fuzz.sh`.
fn excluded(name: &[u8]) -> bool {
    static EXCLUDE: OnceLock<Vec<String>> = OnceLock::new();
    EXCLUDE
        .get_or_init(|| {
            std::env::var("SLUICE_FUZZ_EXCLUDE")
                .unwrap_or_default()
                .split(',')
                .map(|n| n.trim().to_ascii_lowercase())
                .filter(|n| !n.is_empty())
                .collect()
        })
        .iter()
        .any(|n| is(name, n))
}

fuzz_target!(|script: Script| {
    let mut executor = Executor::new(config());
    let mut now = match script.start {
        Start::Now(offset) => 1_700_000_000 * Nanos::PER_SEC + u64::from(offset) * Nanos::PER_MS,
        Start::Zero => 0,
        Start::Any(t) => t,
    };
    let mut conn = Conn::default();
    for step in &script.steps {
        now = now.saturating_add(step.advance.nanos());
        let mut request = vec![step.name.render()];
        if excluded(&request[0]) {
            continue;
        }
        request.extend(step.args.iter().map(Arg::render));
        let args: Vec<&[u8]> = request.iter().map(Vec::as_slice).collect();
        let reply = executor.exec_at(Nanos(now), &args);
        if trace() {
            eprintln!(
                "{} -> {:?}",
                show(&request),
                String::from_utf8_lossy(&reply)
            );
        }
        check_reply(&mut conn, &request, &reply);
        let _ = executor.shared.idle_deadline(std::time::Instant::now());
    }
});
