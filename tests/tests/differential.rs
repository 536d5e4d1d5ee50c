//! Differential test: random command sequences run on a real redis-server and on a Sluice node,
//! every reply compared exactly (error lines included), over every Redis command both serve:
//! strings (SET with every option, the GET/SET family, MGET/MSET/MSETNX, APPEND, GETRANGE,
//! SETRANGE, INCR/DECR and INCRBYFLOAT), keys (DEL, EXISTS, TYPE, the EXPIRE and TTL families,
//! PERSIST, RENAME, COPY, KEYS, SCAN, RANDOMKEY, OBJECT), lists, hashes, sets, sorted sets,
//! MULTI/EXEC/DISCARD and WATCH/UNWATCH, with wrong-arity, not-an-integer, not-a-float,
//! overflow, syntax-error and WRONGTYPE forms.
//!
//! Keys come from four names and values, fields and members from small pools (integers at 0
//! and at the i64 edges, non-numbers, the empty string), so commands collide, across types too.
//! Each sequence runs on one fresh connection per server after a FLUSHALL, half of them in
//! RESP3 (`HELLO 3` first, as redis-py 8 does); the servers take each command in turn, so both
//! see the same wall clock within a millisecond or two.
//!
//! Time without sleeps: every expiry the generator sets is either in the past (the key goes at
//! once, on both) or at least 100 s away (nothing expires during a run). TTL and PTTL replies may
//! then differ by the time between the two servers' commands: a non-negative TTL may differ by
//! 1 s and a PTTL by 1000 ms; -1 and -2 compare exactly.
//!
//! Where Redis chooses the answer, the shape is compared ([`Rule`]): random picks (HRANDFIELD,
//! SRANDMEMBER, ZRANDMEMBER, RANDOMKEY) by length, set replies (SMEMBERS, SINTER, KEYS, SCAN,
//! ...) in any order, a string's OBJECT ENCODING as any string encoding. Only what has one
//! right answer is generated: SPOP with a count that pops all, SSCAN and SCAN's first call.
//!
//! Budget: `SLUICE_DIFF_CASES` sequences (default [`DEFAULT_CASES`], about 20 s and 40,000
//! commands on a 2-core machine). A difference is shrunk by proptest to a minimal sequence,
//! printed as redis-cli lines, and kept in `proptest-regressions/differential.txt`, which
//! replays first on every run.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};
use sluice_tests::resp::{Reply, RespConn};
use sluice_tests::{RedisServer, Sluice, have_tool};

const DEFAULT_CASES: u32 = 2000;

const KEYS: &[&str] = &["a", "b", "c", "d"];

/// Values SET writes and INCRBY/DECRBY take: integers at 0 and the i64 edges, just past them,
/// forms Redis's string2ll refuses (leading zero or plus, spaces, a fraction), a word, empty.
const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "7",
    "9223372036854775807",
    "9223372036854775806",
    "-9223372036854775808",
    "-9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "01",
    "+1",
    "-0",
    " 1",
    "1.5",
    "abc",
    "",
];

/// Expiry amounts that never expire during a run (at least 100 s away, at most ten years).
///
/// Not generated: deadlines past the year 2554 (such as `PXAT 9223372036854775807` or
/// `PEXPIRE k 9223372036854775`), which Redis keeps. Sluice's clock is u64 nanoseconds, so such a
/// deadline saturates to "never" and TTL answers -1 where Redis answers the time left: a
/// difference this harness found, left to issue 35 (TTL, PTTL and EXPIRETIME with Redis 7's
/// replies).
const SECONDS: &[&str] = &["100", "3600", "315360000"];
const MILLIS: &[&str] = &["100000", "3600000", "315360000000"];
/// Absolute times for EXAT/PXAT: long past, or the year 2100.
const UNIX_SECONDS: &[&str] = &["1", "4102444800"];
const UNIX_MILLIS: &[&str] = &["1", "4102444800000"];
/// Amounts every expiry option and command refuses, or that lie in the past.
const BAD_OR_PAST: &[&str] = &["0", "-1", "-100", "-9223372036854775808", "abc", "", "1.5"];
/// Amounts that overflow a deadline in ms, in seconds and in ms (Redis refuses both).
const TOO_BIG_SECONDS: &[&str] = &["9223372036854775807", "9223372036854775"];
const TOO_BIG_MILLIS: &[&str] = &["9223372036854775807"];

fn amount(
    ok: &'static [&'static str],
    too_big: &'static [&'static str],
) -> impl Strategy<Value = String> + Clone {
    prop_oneof![pick(ok), pick(BAD_OR_PAST), pick(too_big)]
}

/// A command as its arguments, the name first.
type Cmd = Vec<String>;

/// A command sequence, printed as redis-cli lines.
#[derive(Clone)]
struct Seq {
    /// Whether the connections speak RESP3 (`HELLO 3` first), as redis-py 8 does by default.
    resp3: bool,
    cmds: Vec<Cmd>,
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f)?;
        if self.resp3 {
            writeln!(f, "HELLO 3")?;
        }
        for cmd in &self.cmds {
            writeln!(f, "{}", cli_line(cmd))?;
        }
        Ok(())
    }
}

fn cli_line(cmd: &[String]) -> String {
    let quoted: Vec<String> = cmd
        .iter()
        .map(|a| {
            if a.is_empty() || a.contains(' ') {
                format!("{a:?}")
            } else {
                a.clone()
            }
        })
        .collect();
    quoted.join(" ")
}

fn pick(pool: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    select(pool).prop_map(str::to_owned)
}

fn key() -> impl Strategy<Value = String> + Clone {
    pick(KEYS)
}

/// A command or option name in upper or lower case (Redis matches both).
fn word(name: &'static str) -> impl Strategy<Value = String> + Clone {
    any::<bool>().prop_map(move |lower| {
        if lower {
            name.to_ascii_lowercase()
        } else {
            name.to_owned()
        }
    })
}

/// An expiry option with its amount, as SET and GETEX both take them (past, refused, too big, or
/// far enough ahead never to expire during a run).
fn expiry_option() -> impl Strategy<Value = Vec<String>> {
    let with = |unit: &'static str, amount: BoxedStrategy<String>| {
        (word(unit), amount).prop_map(|(o, n)| vec![o, n])
    };
    prop_oneof![
        with("EX", amount(SECONDS, TOO_BIG_SECONDS).boxed()),
        with("PX", amount(MILLIS, TOO_BIG_MILLIS).boxed()),
        with("EXAT", amount(UNIX_SECONDS, TOO_BIG_MILLIS).boxed()),
        with(
            "PXAT",
            prop_oneof![pick(UNIX_MILLIS), pick(BAD_OR_PAST)].boxed()
        ),
    ]
}

/// One SET option with its argument.
fn set_option() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        1 => word("NX").prop_map(|o| vec![o]),
        1 => word("XX").prop_map(|o| vec![o]),
        1 => word("KEEPTTL").prop_map(|o| vec![o]),
        1 => word("GET").prop_map(|o| vec![o]),
        4 => expiry_option(),
        // An option without its argument, last on the line.
        1 => word("EX").prop_map(|o| vec![o]),
        1 => Just(vec!["FOO".to_owned()]),
    ]
}

fn set() -> impl Strategy<Value = Cmd> {
    (
        word("SET"),
        key(),
        pick(VALUES),
        prop::collection::vec(set_option(), 0..3),
    )
        .prop_map(|(name, k, v, opts)| {
            let mut c = vec![name, k, v];
            c.extend(opts.into_iter().flatten());
            c
        })
}

/// EXPIRE/PEXPIRE's conditions. GT and LT come only with an amount in the past or refused:
/// with a future amount they compare two deadlines that can tie to the millisecond on one server
/// and not on the other (two commands in a row with one amount), which is a race of the harness,
/// not a difference of the servers.
fn expire(
    name: &'static str,
    future: &'static [&'static str],
    too_big: &'static [&'static str],
) -> impl Strategy<Value = Cmd> {
    let plain = (
        word(name),
        key(),
        amount(future, too_big),
        prop::collection::vec(select(&["NX", "XX", "nx"][..]), 0..2),
    );
    let ordered = (
        word(name),
        key(),
        prop_oneof![pick(BAD_OR_PAST), pick(too_big)],
        prop::collection::vec(select(&["NX", "XX", "GT", "LT", "gt", "BOGUS"][..]), 0..3),
    );
    prop_oneof![plain, ordered].prop_map(|(n, k, amount, opts)| {
        let mut c = vec![n, k, amount];
        c.extend(opts.into_iter().map(str::to_owned));
        c
    })
}

/// GETEX and its options: SET's expiry ones and PERSIST (SET's others are syntax errors there).
fn getex() -> impl Strategy<Value = Cmd> {
    let option = prop_oneof![
        1 => word("PERSIST").prop_map(|o| vec![o]),
        4 => expiry_option(),
        1 => word("KEEPTTL").prop_map(|o| vec![o]),
        1 => word("PX").prop_map(|o| vec![o]),
    ];
    (word("GETEX"), key(), prop::collection::vec(option, 0..3)).prop_map(|(n, k, opts)| {
        let mut c = vec![n, k];
        c.extend(opts.into_iter().flatten());
        c
    })
}

/// EXPIREAT/PEXPIREAT: a Unix time (long past, or the year 2100), with every condition. Both
/// servers get the same deadline, so GT and LT compare the same two instants on both.
/// `too_big`: amounts that overflow (only EXPIREAT's seconds can; the ones that fit but lie past
/// the year 2554 are left out, as for SET).
fn expire_at(
    name: &'static str,
    at: &'static [&'static str],
    too_big: &'static [&'static str],
) -> impl Strategy<Value = Cmd> {
    (
        word(name),
        key(),
        prop_oneof![pick(at), pick(BAD_OR_PAST), pick(too_big)],
        prop::collection::vec(select(&["NX", "XX", "GT", "LT", "lt", "BOGUS"][..]), 0..3),
    )
        .prop_map(|(n, k, amount, opts)| {
            let mut c = vec![n, k, amount];
            c.extend(opts.into_iter().map(str::to_owned));
            c
        })
}

/// Offsets for GETRANGE (start, end) and SETRANGE (offset): around a short string's ends, the
/// i64 edges, not numbers. SETRANGE's 536870912 is past proto-max-bulk-len with any value, so
/// it is refused (or answers the length, with an empty value) and allocates nothing.
const OFFSETS: &[&str] = &[
    "0",
    "1",
    "2",
    "5",
    "-1",
    "-2",
    "-100",
    "100",
    "9223372036854775807",
    "-9223372036854775808",
    "abc",
    "536870912",
];

/// Commands with a wrong number of arguments (arity in Redis's convention: negative = at least).
fn wrong_arity() -> impl Strategy<Value = Cmd> {
    const ARITY: &[(&str, i32)] = &[
        ("GET", 2),
        ("SET", -3),
        ("SETNX", 3),
        ("SETEX", 4),
        ("PSETEX", 4),
        ("GETSET", 3),
        ("GETDEL", 2),
        ("GETEX", -2),
        ("MGET", -2),
        ("APPEND", 3),
        ("STRLEN", 2),
        ("GETRANGE", 4),
        ("SETRANGE", 4),
        ("UNLINK", -2),
        ("TOUCH", -2),
        ("TYPE", 2),
        ("PERSIST", 2),
        ("EXPIREAT", -3),
        ("PEXPIREAT", -3),
        ("EXPIRETIME", 2),
        ("PEXPIRETIME", 2),
        ("INCR", 2),
        ("DECR", 2),
        ("INCRBY", 3),
        ("DECRBY", 3),
        ("INCRBYFLOAT", 3),
        ("DEL", -2),
        ("EXISTS", -2),
        ("EXPIRE", -3),
        ("PEXPIRE", -3),
        ("TTL", 2),
        ("PTTL", 2),
        ("MULTI", 1),
        ("EXEC", 1),
        ("LPUSH", -3),
        ("RPUSHX", -3),
        ("LPOP", -2),
        ("LLEN", 2),
        ("LINDEX", 3),
        ("LRANGE", 4),
        ("LTRIM", 4),
        ("LSET", 4),
        ("LREM", 4),
        ("LINSERT", 5),
        ("LPOS", -3),
        ("LMOVE", 5),
        ("RPOPLPUSH", 3),
        ("HSET", -4),
        ("HSETNX", 4),
        ("HGET", 3),
        ("HMGET", -3),
        ("HGETALL", 2),
        ("HDEL", -3),
        ("HINCRBY", 4),
        ("HINCRBYFLOAT", 4),
        ("HRANDFIELD", -2),
        ("HSCAN", -3),
        ("ZADD", -4),
        ("ZINCRBY", 4),
        ("ZREM", -3),
        ("ZCARD", 2),
        ("ZSCORE", 3),
        ("ZMSCORE", -3),
        ("ZCOUNT", 4),
        ("ZRANGE", -4),
        ("ZRANGESTORE", -5),
        ("ZRANGEBYSCORE", -4),
        ("ZREMRANGEBYSCORE", 4),
        ("ZPOPMIN", -2),
        ("ZRANDMEMBER", -2),
        ("ZSCAN", -3),
        ("SADD", -3),
        ("SISMEMBER", 3),
        ("SMISMEMBER", -3),
        ("SCARD", 2),
        ("SPOP", -2),
        ("SINTER", -2),
        ("SUNIONSTORE", -3),
        ("SMOVE", 4),
        ("SSCAN", -3),
        ("RENAME", 3),
        ("RENAMENX", 3),
        ("COPY", -3),
        ("KEYS", 2),
        ("SCAN", -2),
        ("RANDOMKEY", 1),
        ("OBJECT", -2),
        ("MSET", -3),
        ("MSETNX", -3),
        ("WATCH", -2),
        ("UNWATCH", 1),
        ("DISCARD", 1),
    ];
    let wrong: Vec<(&str, usize)> = ARITY
        .iter()
        .flat_map(|&(name, arity)| {
            (1..=4usize)
                .filter(move |&argc| {
                    if arity >= 0 {
                        argc != arity as usize
                    } else {
                        argc < arity.unsigned_abs() as usize
                    }
                })
                .map(move |argc| (name, argc))
        })
        .collect();
    (select(wrong), any::<bool>()).prop_map(|((name, argc), lower)| {
        let name = if lower {
            name.to_ascii_lowercase()
        } else {
            name.to_owned()
        };
        let mut c = vec![name];
        c.extend(KEYS.iter().take(argc - 1).map(|k| (*k).to_owned()));
        c
    })
}

/// Entries lists, sets and hashes hold: a few that collide, numbers and the empty string.
const ITEMS: &[&str] = &["a", "b", "c", "1", "-1", "2.5", ""];

/// List indexes and counts: around a short list's ends, the i64 edges, not numbers.
const INDEXES: &[&str] = &[
    "0",
    "1",
    "2",
    "-1",
    "-2",
    "-3",
    "5",
    "-100",
    "100",
    "9223372036854775807",
    "-9223372036854775808",
    "abc",
    "1.5",
];

/// Builds a command from its parts.
fn cmd(parts: Vec<Vec<String>>) -> Cmd {
    parts.into_iter().flatten().collect()
}

fn some(pool: &'static [&'static str], n: std::ops::Range<usize>) -> BoxedStrategy<Vec<String>> {
    prop::collection::vec(pick(pool), n).boxed()
}

fn list_command() -> impl Strategy<Value = Cmd> {
    let w = |name: &'static str| word(name).prop_map(|n| vec![n]).boxed();
    let k = || key().prop_map(|k| vec![k]).boxed();
    let side = || {
        pick(&["LEFT", "RIGHT", "left", "UP"][..])
            .prop_map(|s| vec![s])
            .boxed()
    };
    let lpos_opt = prop_oneof![
        (pick(&["RANK", "rank"][..]), pick(INDEXES)).prop_map(|(o, n)| vec![o, n]),
        (pick(&["COUNT", "MAXLEN"][..]), pick(INDEXES)).prop_map(|(o, n)| vec![o, n]),
        Just(vec!["RANK".to_owned()]),
        Just(vec!["BOGUS".to_owned(), "1".to_owned()]),
    ];
    prop_oneof![
        4 => (w("LPUSH"), k(), some(ITEMS, 1..4)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        4 => (w("RPUSH"), k(), some(ITEMS, 1..4)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("LPUSHX"), k(), some(ITEMS, 1..3)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("RPUSHX"), k(), some(ITEMS, 1..3)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("LPOP"), k(), some(INDEXES, 0..2)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("RPOP"), k(), some(INDEXES, 0..3)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("LLEN"), k()).prop_map(|(a, b)| cmd(vec![a, b])),
        2 => (w("LINDEX"), k(), some(INDEXES, 1..2)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        3 => (w("LRANGE"), k(), some(INDEXES, 2..3)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("LTRIM"), k(), some(INDEXES, 2..3)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("LSET"), k(), some(INDEXES, 1..2), some(ITEMS, 1..2))
            .prop_map(|(a, b, c, d)| cmd(vec![a, b, c, d])),
        2 => (w("LREM"), k(), some(INDEXES, 1..2), some(ITEMS, 1..2))
            .prop_map(|(a, b, c, d)| cmd(vec![a, b, c, d])),
        2 => (w("LINSERT"), k(), pick(&["BEFORE", "after", "MIDDLE"][..]), some(ITEMS, 2..3))
            .prop_map(|(a, b, c, d)| cmd(vec![a, b, vec![c], d])),
        2 => (w("LPOS"), k(), some(ITEMS, 1..2), prop::collection::vec(lpos_opt, 0..3))
            .prop_map(|(a, b, c, d)| cmd(vec![a, b, c, d.concat()])),
        1 => (w("LMOVE"), k(), k(), side(), side())
            .prop_map(|(a, b, c, d, e)| cmd(vec![a, b, c, d, e])),
        1 => (w("RPOPLPUSH"), k(), k()).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
    ]
}

/// Hash fields, and the increments HINCRBY and HINCRBYFLOAT take.
const FIELDS: &[&str] = &["f1", "f2", "f3", "g"];
const INCRS: &[&str] = &[
    "1",
    "-1",
    "5",
    "9223372036854775807",
    "-9223372036854775808",
    "abc",
    "1.5",
];
/// INCRBYFLOAT's and HINCRBYFLOAT's increments (summed in x87 long double, as Redis does).
const FLOAT_INCRS: &[&str] = &[
    "1.5", "-0.25", "10", "1e3", "abc", "inf", "0.5", "", "0.1", "-0.3", "1e-20", "0x10",
];

/// SSCAN's cursor and options: Redis 7.0 keeps a small set of strings in a hash table, which
/// it scans a bucket at a time, so only a first call that covers the whole set (cursor 0, no
/// COUNT below the set's size) has one right answer to compare.
fn sscan_tail() -> BoxedStrategy<Vec<String>> {
    let opt = prop_oneof![
        (
            pick(&["MATCH", "match"][..]),
            pick(&["a*", "*", "?", "[ab]", "1"][..])
        )
            .prop_map(|(o, p)| vec![o, p]),
        (
            pick(&["COUNT", "count"][..]),
            pick(&["10", "0", "-1", "abc"][..])
        )
            .prop_map(|(o, n)| vec![o, n]),
        Just(vec!["TYPE".to_owned(), "string".to_owned()]),
    ];
    (pick(&["0", "abc"][..]), prop::collection::vec(opt, 0..3))
        .prop_map(|(c, o)| {
            let mut v = vec![c];
            v.extend(o.concat());
            v
        })
        .boxed()
}

/// SCAN's cursor and options, after the key.
fn scan_tail() -> BoxedStrategy<Vec<String>> {
    let opt = prop_oneof![
        (
            pick(&["MATCH", "match"][..]),
            pick(&["f*", "*", "?1", "[ab]", "a"][..])
        )
            .prop_map(|(o, p)| vec![o, p]),
        (
            pick(&["COUNT", "count"][..]),
            pick(&["1", "10", "0", "-1", "abc"][..])
        )
            .prop_map(|(o, n)| vec![o, n]),
        Just(vec!["TYPE".to_owned(), "string".to_owned()]),
        Just(vec!["MATCH".to_owned()]),
    ];
    (
        pick(&["0", "0", "5", "abc", "-1"][..]),
        prop::collection::vec(opt, 0..3),
    )
        .prop_map(|(c, o)| {
            let mut v = vec![c];
            v.extend(o.concat());
            v
        })
        .boxed()
}

fn hash_command() -> impl Strategy<Value = Cmd> {
    let w = |name: &'static str| word(name).prop_map(|n| vec![n]).boxed();
    let k = || key().prop_map(|k| vec![k]).boxed();
    let pairs = || {
        prop::collection::vec((pick(FIELDS), pick(ITEMS)), 1..4)
            .prop_map(|ps| ps.into_iter().flat_map(|(f, v)| [f, v]).collect::<Vec<_>>())
            .boxed()
    };
    let rand_tail = prop_oneof![
        Just(vec![]),
        pick(&["1", "2", "5", "-3", "0", "abc"][..]).prop_map(|c| vec![c]),
        (
            pick(&["1", "-2", "5", "0"][..]),
            pick(&["WITHVALUES", "withvalues", "BAD"][..])
        )
            .prop_map(|(c, w)| vec![c, w]),
    ];
    prop_oneof![
        4 => (w("HSET"), k(), pairs()).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("HSET"), k(), some(FIELDS, 1..2)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("HMSET"), k(), pairs()).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("HSETNX"), k(), some(FIELDS, 1..2), some(ITEMS, 1..2))
            .prop_map(|(a, b, c, d)| cmd(vec![a, b, c, d])),
        3 => (w("HGET"), k(), some(FIELDS, 1..2)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("HMGET"), k(), some(FIELDS, 1..4)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("HEXISTS"), k(), some(FIELDS, 1..2)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("HSTRLEN"), k(), some(FIELDS, 1..2)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("HLEN"), k()).prop_map(|(a, b)| cmd(vec![a, b])),
        2 => (w("HGETALL"), k()).prop_map(|(a, b)| cmd(vec![a, b])),
        1 => (w("HKEYS"), k()).prop_map(|(a, b)| cmd(vec![a, b])),
        1 => (w("HVALS"), k()).prop_map(|(a, b)| cmd(vec![a, b])),
        2 => (w("HDEL"), k(), some(FIELDS, 1..3)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        3 => (w("HINCRBY"), k(), some(FIELDS, 1..2), some(INCRS, 1..2))
            .prop_map(|(a, b, c, d)| cmd(vec![a, b, c, d])),
        2 => (w("HINCRBYFLOAT"), k(), some(FIELDS, 1..2), some(FLOAT_INCRS, 1..2))
            .prop_map(|(a, b, c, d)| cmd(vec![a, b, c, d])),
        1 => (w("HRANDFIELD"), k(), rand_tail).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("HSCAN"), k(), scan_tail()).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
    ]
}

/// Sorted-set members, scores (ties, infinities, refusals) and range bounds.
const MEMBERS: &[&str] = &["a", "b", "c", "d", "aa", ""];
const SCORES: &[&str] = &[
    "0", "1", "1", "2.5", "-3", "inf", "-inf", "1e3", "0.1", "abc", "nan",
];
const SCORE_BOUNDS: &[&str] = &[
    "0", "1", "(1", "2.5", "(2.5", "-inf", "+inf", "inf", "(-inf", "-3", "abc", "(", "10",
];
const LEX_BOUNDS: &[&str] = &["-", "+", "[a", "(a", "[b", "(c", "[", "(", "a", "[aa", "+x"];

fn zset_command() -> impl Strategy<Value = Cmd> {
    let w = |name: &'static str| word(name).prop_map(|n| vec![n]).boxed();
    let k = || key().prop_map(|k| vec![k]).boxed();
    let flags = prop::collection::vec(
        pick(&["NX", "XX", "GT", "LT", "CH", "INCR", "ch", "incr"][..]),
        0..3,
    );
    let pairs = || {
        prop::collection::vec((pick(SCORES), pick(MEMBERS)), 1..4)
            .prop_map(|ps| ps.into_iter().flat_map(|(s, m)| [s, m]).collect::<Vec<_>>())
            .boxed()
    };
    let bounds = |pool: &'static [&'static str]| some(pool, 2..3);
    let range_opts = prop::collection::vec(
        prop_oneof![
            pick(&["BYSCORE", "BYLEX", "REV", "WITHSCORES", "byscore", "rev"][..])
                .prop_map(|o| vec![o]),
            (
                pick(&["0", "1", "-1", "5"][..]),
                pick(&["1", "2", "-1", "0"][..])
            )
                .prop_map(|(a, b)| vec!["LIMIT".to_owned(), a, b]),
            Just(vec!["LIMIT".to_owned(), "1".to_owned()]),
        ],
        0..3,
    )
    .prop_map(|o| o.concat());
    let any_bounds = prop_oneof![
        some(INDEXES, 2..3),
        some(SCORE_BOUNDS, 2..3),
        some(LEX_BOUNDS, 2..3)
    ];
    let limit = prop_oneof![
        Just(vec![]),
        (
            pick(&["0", "1", "-1", "9"][..]),
            pick(&["1", "2", "-1", "0", "x"][..])
        )
            .prop_map(|(a, b)| vec!["LIMIT".to_owned(), a, b]),
    ];
    let withscores = prop_oneof![Just(vec![]), Just(vec!["WITHSCORES".to_owned()])];
    let rand_tail = prop_oneof![
        Just(vec![]),
        pick(&["1", "2", "10", "-3", "0", "abc"][..]).prop_map(|c| vec![c]),
        (
            pick(&["1", "-2", "10", "0"][..]),
            pick(&["WITHSCORES", "BAD"][..])
        )
            .prop_map(|(c, w)| vec![c, w]),
    ];
    prop_oneof![
        5 => (w("ZADD"), k(), flags, pairs()).prop_map(|(a, b, c, d)| cmd(vec![a, b, c, d])),
        2 => (w("ZINCRBY"), k(), some(SCORES, 1..2), some(MEMBERS, 1..2))
            .prop_map(|(a, b, c, d)| cmd(vec![a, b, c, d])),
        2 => (w("ZREM"), k(), some(MEMBERS, 1..3)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("ZCARD"), k()).prop_map(|(a, b)| cmd(vec![a, b])),
        2 => (w("ZSCORE"), k(), some(MEMBERS, 1..2)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("ZMSCORE"), k(), some(MEMBERS, 1..3)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("ZRANK"), k(), some(MEMBERS, 1..2)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("ZREVRANK"), k(), some(MEMBERS, 1..2)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("ZCOUNT"), k(), bounds(SCORE_BOUNDS)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("ZLEXCOUNT"), k(), bounds(LEX_BOUNDS)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        5 => (w("ZRANGE"), k(), any_bounds.clone(), range_opts.clone())
            .prop_map(|(a, b, c, d)| cmd(vec![a, b, c, d])),
        2 => (w("ZRANGESTORE"), k(), k(), any_bounds, range_opts)
            .prop_map(|(a, b, c, d, e)| cmd(vec![a, b, c, d, e])),
        2 => (w("ZRANGEBYSCORE"), k(), bounds(SCORE_BOUNDS), withscores.clone(), limit.clone())
            .prop_map(|(a, b, c, d, e)| cmd(vec![a, b, c, d, e])),
        1 => (w("ZREVRANGEBYSCORE"), k(), bounds(SCORE_BOUNDS), limit.clone(), withscores.clone())
            .prop_map(|(a, b, c, d, e)| cmd(vec![a, b, c, d, e])),
        1 => (w("ZRANGEBYLEX"), k(), bounds(LEX_BOUNDS), limit.clone())
            .prop_map(|(a, b, c, d)| cmd(vec![a, b, c, d])),
        1 => (w("ZREVRANGEBYLEX"), k(), bounds(LEX_BOUNDS), limit.clone(), withscores.clone())
            .prop_map(|(a, b, c, d, e)| cmd(vec![a, b, c, d, e])),
        1 => (w("ZREVRANGE"), k(), some(INDEXES, 2..3), withscores, limit)
            .prop_map(|(a, b, c, d, e)| cmd(vec![a, b, c, d, e])),
        2 => (w("ZREMRANGEBYSCORE"), k(), bounds(SCORE_BOUNDS))
            .prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("ZREMRANGEBYRANK"), k(), some(INDEXES, 2..3))
            .prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("ZREMRANGEBYLEX"), k(), bounds(LEX_BOUNDS))
            .prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("ZPOPMIN"), k(), some(INDEXES, 0..2)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("ZPOPMAX"), k(), some(INDEXES, 0..3)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("ZRANDMEMBER"), k(), rand_tail).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("ZSCAN"), k(), scan_tail()).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
    ]
}

fn set_command() -> impl Strategy<Value = Cmd> {
    let w = |name: &'static str| word(name).prop_map(|n| vec![n]).boxed();
    let k = || key().prop_map(|k| vec![k]).boxed();
    let keys = || prop::collection::vec(key(), 1..4).boxed();
    let counts = &["1", "2", "10", "-3", "0", "abc", "-9223372036854775808"][..];
    prop_oneof![
        5 => (w("SADD"), k(), some(ITEMS, 1..4)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("SREM"), k(), some(ITEMS, 1..3)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("SISMEMBER"), k(), some(ITEMS, 1..2)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        1 => (w("SMISMEMBER"), k(), some(ITEMS, 1..3)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("SCARD"), k()).prop_map(|(a, b)| cmd(vec![a, b])),
        2 => (w("SMEMBERS"), k()).prop_map(|(a, b)| cmd(vec![a, b])),
        // Only counts that pop every member (or none, or refuse): a random pop would leave
        // the two servers holding different sets.
        1 => (w("SPOP"), k(), pick(&["10", "0", "-1", "abc"][..]))
            .prop_map(|(a, b, c)| cmd(vec![a, b, vec![c]])),
        1 => (w("SRANDMEMBER"), k(), some(counts, 0..3)).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (pick(&["SINTER", "SUNION", "SDIFF", "sinter"][..]), keys())
            .prop_map(|(a, b)| cmd(vec![vec![a], b])),
        2 => (pick(&["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"][..]), k(), keys())
            .prop_map(|(a, b, c)| cmd(vec![vec![a], b, c])),
        1 => (w("SMOVE"), k(), k(), some(ITEMS, 1..2)).prop_map(|(a, b, c, d)| cmd(vec![a, b, c, d])),
        1 => (w("SSCAN"), k(), sscan_tail()).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
    ]
}

fn key_command() -> impl Strategy<Value = Cmd> {
    let w = |name: &'static str| word(name).prop_map(|n| vec![n]).boxed();
    let k = || key().prop_map(|k| vec![k]).boxed();
    let copy_opt = prop_oneof![
        Just(vec!["REPLACE".to_owned()]),
        Just(vec!["replace".to_owned()]),
        Just(vec!["DB".to_owned(), "0".to_owned()]),
        Just(vec!["DB".to_owned(), "abc".to_owned()]),
        Just(vec!["DB".to_owned()]),
        Just(vec!["BOGUS".to_owned()]),
    ];
    // A first SCAN call with COUNT at least the keyspace's size: the one call whose answer
    // Redis fixes (later calls depend on its hash table's buckets).
    let scan_opt = prop_oneof![
        (
            pick(&["MATCH", "match"][..]),
            pick(&["a*", "*", "?", "[ab]", "z"][..])
        )
            .prop_map(|(o, p)| vec![o, p]),
        (
            pick(&["COUNT", "count"][..]),
            pick(&["10", "0", "-1", "abc"][..])
        )
            .prop_map(|(o, n)| vec![o, n]),
        (
            pick(&["TYPE", "type"][..]),
            pick(&["string", "list", "hash", "set", "zset", "none", "LIST"][..])
        )
            .prop_map(|(o, t)| vec![o, t]),
        Just(vec!["MATCH".to_owned()]),
    ];
    let pairs = || {
        prop::collection::vec((key(), pick(VALUES)), 1..4)
            .prop_map(|ps| ps.into_iter().flat_map(|(k, v)| [k, v]).collect::<Vec<_>>())
            .boxed()
    };
    prop_oneof![
        2 => (w("RENAME"), k(), k()).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("RENAMENX"), k(), k()).prop_map(|(a, b, c)| cmd(vec![a, b, c])),
        2 => (w("COPY"), k(), k(), prop::collection::vec(copy_opt, 0..2))
            .prop_map(|(a, b, c, d)| cmd(vec![a, b, c, d.concat()])),
        1 => (w("KEYS"), pick(&["*", "a*", "?", "[a-c]", "z*", "\\a"][..]))
            .prop_map(|(a, p)| cmd(vec![a, vec![p]])),
        1 => (w("SCAN"), pick(&["0", "abc"][..]), prop::collection::vec(scan_opt, 0..3))
            .prop_map(|(a, c, o)| cmd(vec![a, vec![c], o.concat()])),
        1 => w("RANDOMKEY"),
        2 => (w("WATCH"), prop::collection::vec(key(), 1..3)).prop_map(|(a, b)| cmd(vec![a, b])),
        1 => w("UNWATCH"),
        2 => (
            w("OBJECT"),
            pick(&["ENCODING", "encoding", "FREQ"][..]),
            k()
        )
            .prop_map(|(a, b, c)| cmd(vec![a, vec![b], c])),
        1 => (w("MSET"), pairs()).prop_map(|(a, b)| cmd(vec![a, b])),
        1 => (w("MSETNX"), pairs()).prop_map(|(a, b)| cmd(vec![a, b])),
    ]
}

fn command() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        2 => key_command(),
        3 => string_command(),
        2 => list_command(),
        2 => hash_command(),
        3 => zset_command(),
        2 => set_command(),
    ]
}

fn string_command() -> impl Strategy<Value = Cmd> {
    let one = |name: &'static str| (word(name), key()).prop_map(|(n, k)| vec![n, k]);
    let by =
        |name: &'static str| (word(name), key(), pick(VALUES)).prop_map(|(n, k, v)| vec![n, k, v]);
    let many = |name: &'static str| {
        (word(name), prop::collection::vec(key(), 1..4)).prop_map(|(n, ks)| {
            let mut c = vec![n];
            c.extend(ks);
            c
        })
    };
    prop_oneof![
        4 => one("GET"),
        5 => set(),
        3 => one("INCR"),
        2 => one("DECR"),
        3 => by("INCRBY"),
        2 => by("DECRBY"),
        2 => (word("INCRBYFLOAT"), key(), pick(FLOAT_INCRS)).prop_map(|(n, k, v)| vec![n, k, v]),
        2 => many("DEL"),
        2 => many("EXISTS"),
        3 => expire("EXPIRE", SECONDS, TOO_BIG_SECONDS),
        3 => expire("PEXPIRE", MILLIS, TOO_BIG_MILLIS),
        3 => one("TTL"),
        3 => one("PTTL"),
        1 => word("MULTI").prop_map(|n| vec![n]),
        1 => word("EXEC").prop_map(|n| vec![n]),
        1 => word("DISCARD").prop_map(|n| vec![n]),
        2 => wrong_arity(),
        2 => by("SETNX"),
        1 => (word("SETEX"), key(), amount(SECONDS, TOO_BIG_SECONDS), pick(VALUES))
            .prop_map(|(n, k, a, v)| vec![n, k, a, v]),
        1 => (word("PSETEX"), key(), amount(MILLIS, TOO_BIG_MILLIS), pick(VALUES))
            .prop_map(|(n, k, a, v)| vec![n, k, a, v]),
        2 => by("GETSET"),
        2 => one("GETDEL"),
        2 => getex(),
        2 => many("MGET"),
        2 => by("APPEND"),
        2 => one("STRLEN"),
        2 => (word("GETRANGE"), key(), pick(OFFSETS), pick(OFFSETS))
            .prop_map(|(n, k, a, b)| vec![n, k, a, b]),
        2 => (word("SETRANGE"), key(), pick(OFFSETS), pick(VALUES))
            .prop_map(|(n, k, o, v)| vec![n, k, o, v]),
        1 => many("UNLINK"),
        1 => many("TOUCH"),
        2 => one("TYPE"),
        2 => one("PERSIST"),
        2 => expire_at("EXPIREAT", UNIX_SECONDS, &["9223372036854775807"]),
        2 => expire_at("PEXPIREAT", UNIX_MILLIS, &["1"]),
        2 => one("EXPIRETIME"),
        2 => one("PEXPIRETIME"),
    ]
}

/// A sequence: single commands and whole transactions (MULTI, commands, EXEC or DISCARD).
fn sequence() -> impl Strategy<Value = Seq> {
    let step = prop_oneof![
        4 => command().prop_map(|c| vec![c]),
        1 => (prop::collection::vec(command(), 0..6), select(&["EXEC", "DISCARD"][..])).prop_map(
            |(body, end)| {
                let mut cmds = vec![vec!["MULTI".to_owned()]];
                cmds.extend(body);
                cmds.push(vec![end.to_owned()]);
                cmds
            }
        ),
    ];
    (any::<bool>(), prop::collection::vec(step, 1..25)).prop_map(|(resp3, steps)| Seq {
        resp3,
        cmds: steps.into_iter().flatten().collect(),
    })
}

/// How two replies to one command are compared.
#[derive(Debug, Clone)]
enum Rule {
    Exact,
    /// A non-negative integer may differ by this much; anything else compares exactly.
    Within(i64),
    /// EXEC: each element by the rule of the command queued there.
    Exec(Vec<Rule>),
    /// A random pick: the same kind of reply, of the same length (an error exactly).
    Shape,
    /// A set's members, in no order: the same strings (SCAN's reply: its members).
    Unordered,
    /// OBJECT: a string's encoding depends on how Redis built it (SETRANGE and APPEND leave
    /// `raw` where SET of the same bytes gives `int`), so any string encoding matches another.
    Encoding,
}

fn rule(cmd: &[String]) -> Rule {
    match cmd[0].to_ascii_uppercase().as_str() {
        "TTL" | "EXPIRETIME" => Rule::Within(1),
        "PTTL" | "PEXPIRETIME" => Rule::Within(1000),
        "HRANDFIELD" | "SRANDMEMBER" | "ZRANDMEMBER" => Rule::Shape,
        "SMEMBERS" | "SINTER" | "SUNION" | "SDIFF" | "SSCAN" | "KEYS" | "SCAN" | "SPOP" => {
            Rule::Unordered
        }
        "RANDOMKEY" => Rule::Shape,
        "OBJECT" => Rule::Encoding,
        _ => Rule::Exact,
    }
}

fn same(rule: &Rule, redis: &Reply, sluice: &Reply) -> bool {
    match (rule, redis, sluice) {
        (Rule::Within(d), Reply::Int(a), Reply::Int(b)) if *a >= 0 && *b >= 0 => {
            (a - b).abs() <= *d
        }
        (Rule::Exec(rules), Reply::Array(a), Reply::Array(b)) if a.len() == b.len() => rules
            .iter()
            .zip(a.iter().zip(b))
            .all(|(r, (x, y))| same(r, x, y)),
        (Rule::Shape, Reply::Array(a), Reply::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(rule, x, y))
        }
        (Rule::Shape, Reply::Bulk(_), Reply::Bulk(_)) => true,
        (Rule::Shape, Reply::Set(a), Reply::Set(b)) => a.len() == b.len(),
        (Rule::Unordered, a, b) => sorted(a) == sorted(b),
        (Rule::Encoding, Reply::Bulk(a), Reply::Bulk(b)) => {
            let string = |e: &[u8]| matches!(e, b"int" | b"embstr" | b"raw");
            a == b || (string(a) && string(b))
        }
        (Rule::Shape, Reply::Double(_), Reply::Double(_)) => true,
        _ => redis == sluice,
    }
}

/// A reply with the members of every array and set in it sorted.
fn sorted(r: &Reply) -> Reply {
    let sort = |items: &[Reply]| {
        let mut items: Vec<Reply> = items.iter().map(sorted).collect();
        items.sort_by_key(|i| format!("{i:?}"));
        items
    };
    match r {
        Reply::Array(items) => Reply::Array(sort(items)),
        Reply::Set(items) => Reply::Set(sort(items)),
        other => other.clone(),
    }
}

/// Runs `seq` on both servers, command by command; the first difference is the error.
fn run(seq: &Seq, redis: u16, sluice: u16) -> Result<(), String> {
    let mut r = RespConn::connect(redis);
    let mut s = RespConn::connect(sluice);
    assert_eq!(r.call(&["FLUSHALL"]), Reply::Status("OK".into()));
    assert_eq!(s.call(&["FLUSHALL"]), Reply::Status("OK".into()));
    if seq.resp3 {
        // The servers' HELLO replies name different servers; only the protocol matters.
        for conn in [&mut r, &mut s] {
            assert!(matches!(conn.call(&["HELLO", "3"]), Reply::Map(_)));
        }
    }
    // The rules of the commands queued since MULTI, as Redis's replies tell them.
    let mut queued: Option<Vec<Rule>> = None;
    for (i, cmd) in seq.cmds.iter().enumerate() {
        let want = r.call(cmd);
        let got = s.call(cmd);
        let name = cmd[0].to_ascii_uppercase();
        let how = match (&queued, name.as_str()) {
            (Some(rules), "EXEC") => Rule::Exec(rules.clone()),
            _ => rule(cmd),
        };
        if !same(&how, &want, &got) {
            return Err(format!(
                "command {} `{}`: redis-server answered {want:?}, Sluice answered {got:?}",
                i + 1,
                cli_line(cmd)
            ));
        }
        match (&mut queued, name.as_str()) {
            (None, "MULTI") if want == Reply::Status("OK".into()) => queued = Some(Vec::new()),
            (Some(_), "EXEC" | "DISCARD") => queued = None,
            (Some(rules), _) if want == Reply::Status("QUEUED".into()) => rules.push(rule(cmd)),
            _ => {}
        }
    }
    Ok(())
}

#[test]
fn replies_match_redis_server() {
    if !have_tool("redis-server") {
        eprintln!("redis-server not installed: the differential test is skipped");
        return;
    }
    let cases = std::env::var("SLUICE_DIFF_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let redis = RedisServer::start(&[]);
    let sluice = Sluice::start();
    let (sequences, commands) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let started = Instant::now();
    let mut runner = TestRunner::new(Config {
        cases,
        // The path is relative to this crate's root, where cargo runs integration tests.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/differential.txt",
        ))),
        ..Config::default()
    });
    let outcome = runner.run(&sequence(), |seq| {
        sequences.fetch_add(1, Relaxed);
        commands.fetch_add(seq.cmds.len(), Relaxed);
        run(&seq, redis.port, sluice.port).map_err(TestCaseError::fail)
    });
    eprintln!(
        "differential: {} sequences, {} commands, {:.1} s",
        sequences.load(Relaxed),
        commands.load(Relaxed),
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = outcome {
        panic!("Sluice differs from redis-server: {e}");
    }
}
