//! Native fast paths: the well-known limiter scripts, recognized by the SHA1 of their exact
//! bytes and run without Lua.
//!
//! A library that changes its state with a script sends the same bytes on every call (by
//! `EVALSHA`, or by `EVAL`), so the SHA1 names the script. For the scripts in [`KNOWN`] this
//! module does what the script does, call for call: the same commands on the same keys, in the
//! same order, through the same [`Host::call`] as `redis.call`, and the same reply. Only the
//! Lua around the calls is replaced by Rust. So the effects (journal records, replication,
//! ACL checks, a replica's refusal, a cluster's slots) are the commands' own, as on the Lua
//! path. Two reads are extra, and show only in the command counters: the acquisition of a
//! sliding window reads the current counter (`GET`) before it starts a new window, to know the
//! value is a number before it writes; and a call a native hands to Lua has made its reads
//! twice.
//!
//! All but the two moving windows (list scripts) first try a direct lane ([`Host::direct`]);
//! the sliding windows, while their window needs no shift. Once the host has checked that
//! each of their commands would run for this client (ACL, role, slots, min-replicas), they make
//! the store operations those commands make (`incr_by`, `expire_at`, `try_set`, reads) without
//! dispatching each command, and `INFO commandstats` counts the commands they stood for. A
//! lane changes nothing until it can no longer fail (every deadline made, every value read,
//! before the first write), and declines otherwise: the calls are then made one by one.
//!
//! # Invariants
//! - **Bytes, not meaning.** A script is recognized only by the SHA1 of its exact bytes: one
//!   character more (a space, a comment) and it takes the Lua path.
//! - **Lua decides the edges.** Each native accepts only inputs whose every step it mirrors
//!   exactly: arguments in a strict decimal form (where Lua's `tonumber` and Rust's parse agree
//!   and `%.17g` writes them back unchanged), values read from keys in the same form. Anything
//!   else, and any error a command answers before the script has written, hands the call to
//!   Lua ([`Stop::Lua`]), which starts over on the same, unchanged keys and gives Redis's
//!   answer. After a write, a command's error ends the script as Lua's `redis.call` would:
//!   Redis's error text with the script's line ([`Stop::Raise`]), the writes kept.
//! - **Numbers as Lua has them.** Every number the scripts compute is a double, as in Lua 5.1:
//!   the natives compute in `f64` and convert as the script's return value would be
//!   (`convert::truncate`) and as an argument would be (`%.17g`).
//! - No native writes from `EVAL_RO`/`EVALSHA_RO`: a script that writes runs in Lua there,
//!   which refuses the write with Redis's error.
//!
//! # The scripts
//! - Python `limits` 5.x (Flask-Limiter, slowapi): `incr_expire` (fixed window),
//!   `moving_window` and `acquire_moving_window` (a list of timestamps), `sliding_window` and
//!   `acquire_sliding_window` (two counters).
//! - rate-limit-redis 4–6 (express-rate-limit): its `increment` and `get` scripts.
//! - rate-limiter-flexible 2–11 (`RateLimiterRedis`): its incr-and-TTL script.
//!
//! INFO's `scripting` section counts the calls of each, the calls run in Lua, and the calls a
//! native handed to Lua.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::BytesMut;
use sluice_resp::reply::{self, Proto};

use sluice_core::Nanos;
use sluice_store::{SetCond, SetTtl, Store};

use super::cache::{self, Sha};
use super::convert::{self, g17};
use super::{Cmd, Host, Source};
use crate::cmd::{expire_deadline, pttl, set_deadline};

/// A recognized script: its SHA1, its name in INFO, its byte length (an `EVAL` body of another
/// length is not hashed), and its native.
struct Known {
    sha: &'static [u8; 40],
    name: &'static str,
    len: usize,
    /// Whether the script may write (no native from a read-only `EVAL_RO`).
    writes: bool,
    run: Native,
}

type Native = fn(&mut Run<'_>, &[&[u8]], &[&[u8]]) -> Result<Ret, Stop>;

/// The scripts run natively. Their bytes are in `tests/fixtures/known-scripts`, where the
/// differential test (`tests/tests/scripting_native.rs`) runs each through Lua and through its
/// native and compares.
const KNOWN: [Known; 8] = [
    Known {
        sha: b"628bd136a573a06b346879695681af12ccef300f",
        name: "limits_incr_expire",
        len: 195,
        writes: true,
        run: incr_expire,
    },
    Known {
        sha: b"ad795214f59fe26d6fdec07973836dd16586f5ec",
        name: "limits_moving_window",
        len: 717,
        writes: false,
        run: moving_window,
    },
    Known {
        sha: b"741eab638ba93ed71020bb821c45c022d0fa02c4",
        name: "limits_acquire_moving_window",
        len: 594,
        writes: true,
        run: acquire_moving_window,
    },
    Known {
        sha: b"e7a0a27d4101baabb124af209bb0245197a359a1",
        name: "limits_sliding_window",
        len: 713,
        writes: true,
        run: sliding_window,
    },
    Known {
        sha: b"e8ac2a60cb040b0dbb56815a1e9c6fd032ce62e7",
        name: "limits_acquire_sliding_window",
        len: 1329,
        writes: true,
        run: acquire_sliding_window,
    },
    Known {
        sha: b"895b92e1712734e1b464999be23953485475357b",
        name: "rate_limit_redis_increment",
        len: 271,
        writes: true,
        run: rlr_increment,
    },
    Known {
        sha: b"6aeb97ed6086dcdeafdc6fda3999a0d0e38ec96a",
        name: "rate_limit_redis_get",
        len: 128,
        writes: false,
        run: rlr_get,
    },
    Known {
        sha: b"a1de965f42e177aa339706bd580f049065eca79a",
        name: "rate_limiter_flexible_incr_ttl",
        len: 256,
        writes: true,
        run: rlf_incr_ttl,
    },
];

/// Calls run natively, per script in [`KNOWN`].
static NATIVE_CALLS: [AtomicU64; KNOWN.len()] = [const { AtomicU64::new(0) }; KNOWN.len()];
/// Calls of a known script that its native handed to Lua (an input outside what it mirrors).
static HANDED_TO_LUA: AtomicU64 = AtomicU64::new(0);
/// Calls run in Lua.
static LUA_CALLS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Where the commands a native calls write their replies: kept between runs, so a run
    /// allocates nothing for them.
    static SCRATCH: std::cell::Cell<BytesMut> = std::cell::Cell::new(BytesMut::new());
}

/// How a native ended early.
#[derive(Debug)]
enum Stop {
    /// Not written anything yet: run the script in Lua instead.
    Lua,
    /// A command failed after the script wrote: this error (Redis's text with the line).
    Raise(String),
}

/// A script's return value, as the Lua value it would be.
#[derive(Debug)]
enum Ret {
    /// `false` or `nil`: a null reply.
    Null,
    /// `true`: `:1`.
    True,
    /// A Lua number: an integer reply of its truncation.
    Number(f64),
    /// A Lua string: a bulk reply.
    Str(Vec<u8>),
    /// A table of these, up to its first `nil`.
    Array(Vec<Ret>),
    /// A table of two numbers (what most of the scripts answer), without allocating.
    Numbers(f64, f64),
}

impl Ret {
    fn write(&self, proto: Proto, out: &mut BytesMut) {
        match self {
            Ret::Null => reply::null(out, proto),
            Ret::True => reply::integer(out, 1),
            Ret::Number(f) => reply::integer(out, convert::truncate(*f)),
            Ret::Str(s) => reply::bulk(out, s),
            Ret::Array(items) => {
                reply::array(out, items.len());
                for item in items {
                    item.write(proto, out);
                }
            }
            Ret::Numbers(a, b) => {
                reply::array(out, 2);
                reply::integer(out, convert::truncate(*a));
                reply::integer(out, convert::truncate(*b));
            }
        }
    }
}

/// A command's reply, as the natives read it (RESP2, as a script's calls are made).
#[derive(Debug, PartialEq)]
enum Reply {
    Int(i64),
    /// A bulk string, or `None` for the null bulk (Lua's `false`).
    Bulk(Option<Vec<u8>>),
    /// A status (`+OK`).
    Status,
}

impl Reply {
    /// The Lua number this reply becomes after `tonumber(...)`, where the natives can be sure of
    /// it: `Ok(None)` is Lua's `nil` (a null bulk); a string outside the strict decimal form
    /// hands the call to Lua.
    fn number(&self) -> Result<Option<f64>, Stop> {
        match self {
            Reply::Int(n) => Ok(Some(*n as f64)),
            Reply::Bulk(None) => Ok(None),
            Reply::Bulk(Some(s)) => decimal(s).map(Some).ok_or(Stop::Lua),
            Reply::Status => Err(Stop::Lua),
        }
    }

    fn int(&self) -> Result<i64, Stop> {
        match self {
            Reply::Int(n) => Ok(*n),
            _ => Err(Stop::Lua),
        }
    }

    /// As the script's return value would carry it (a string, or `false` for the null bulk).
    fn ret(self) -> Ret {
        match self {
            Reply::Int(n) => Ret::Number(n as f64),
            Reply::Bulk(Some(s)) => Ret::Str(s),
            Reply::Bulk(None) | Reply::Status => Ret::Null,
        }
    }
}

/// One native run: the host its commands go through, and whether it has written.
struct Run<'h> {
    host: &'h mut dyn Host,
    sha: &'h Sha,
    scratch: BytesMut,
    wrote: bool,
}

impl Run<'_> {
    /// `redis.call(args...)` at `line` of the script, for a command that only reads.
    fn read(&mut self, line: u32, args: &[&[u8]]) -> Result<Reply, Stop> {
        self.call(line, args, false)
    }

    /// `redis.call(args...)` at `line`, for a command that writes.
    fn write(&mut self, line: u32, args: &[&[u8]]) -> Result<Reply, Stop> {
        self.call(line, args, true)
    }

    /// The direct lane ([`Host::direct`]): `f` changes the store as `cmds` would and returns its
    /// result and the commands it stood for, or `None` having changed nothing. `None`: the
    /// host refused the lane or `f` declined; make the calls one by one.
    fn direct<T>(
        &mut self,
        cmds: &[Cmd],
        keys: &[&[u8]],
        mut f: impl FnMut(&Store, Nanos) -> Option<(T, &'static [Cmd])>,
    ) -> Option<T> {
        let mut result = None;
        let ran = self.host.direct(cmds, keys, &mut |store, now| {
            let (value, made) = f(store, now)?;
            result = Some(value);
            Some(made)
        });
        if ran { result } else { None }
    }

    fn call(&mut self, line: u32, args: &[&[u8]], writes: bool) -> Result<Reply, Stop> {
        self.scratch.clear();
        self.host.call_declared(args, &mut self.scratch);
        match parse(&self.scratch) {
            Ok(r) => {
                self.wrote |= writes;
                Ok(r)
            }
            Err(_) if !self.wrote => Err(Stop::Lua),
            Err(error) => {
                let sha = String::from_utf8_lossy(self.sha);
                Err(Stop::Raise(format!(
                    "{} script: {sha}, on @user_script:{line}.",
                    convert::error_text(&error)
                )))
            }
        }
    }
}

/// Reads one RESP2 reply of a scalar kind; `Err` carries an error reply's text (or says the
/// reply is of a kind no native expects).
fn parse(buf: &[u8]) -> Result<Reply, String> {
    let body = buf.strip_suffix(b"\r\n").unwrap_or(buf);
    let (&kind, rest) = body.split_first().ok_or_else(String::new)?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    match kind {
        b':' => std::str::from_utf8(rest)
            .ok()
            .and_then(|s| s.parse().ok())
            .map(Reply::Int)
            .ok_or_else(text),
        b'$' if rest == b"-1" => Ok(Reply::Bulk(None)),
        b'$' => {
            let at = rest.iter().position(|&b| b == b'\r').ok_or_else(text)?;
            Ok(Reply::Bulk(Some(rest[at + 2..].to_vec())))
        }
        b'+' => Ok(Reply::Status),
        b'-' => Err(text()),
        _ => Err(format!("ERR unexpected reply {}", text())),
    }
}

/// Integers past this are not always exact in a double: the natives leave them to Lua.
const EXACT: i64 = 1 << 53;

/// `s` in the strict integer form (`0`, or an optional `-` and digits without a leading zero)
/// within ±2^53: there `tonumber(s)` is exact and `%.17g` writes it back as `s`.
fn integer(s: &[u8]) -> Option<i64> {
    let digits = s.strip_prefix(b"-").unwrap_or(s);
    let canonical = match digits {
        [b'0'] => s.len() == 1,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if !canonical || digits.len() > 16 {
        return None;
    }
    let magnitude = digits
        .iter()
        .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
    let n = if s[0] == b'-' { -magnitude } else { magnitude };
    (n.abs() <= EXACT).then_some(n)
}

/// `s` in the strict decimal form (an optional `-`, digits, optionally `.` and digits): Lua's
/// `tonumber` (C's `strtod`) and Rust's parse both round it correctly, so they agree.
fn decimal(s: &[u8]) -> Option<f64> {
    let digits = s.strip_prefix(b"-").unwrap_or(s);
    let (int, frac) = match digits.iter().position(|&b| b == b'.') {
        Some(dot) => (&digits[..dot], Some(&digits[dot + 1..])),
        None => (digits, None),
    };
    let ok = !int.is_empty()
        && int.iter().all(u8::is_ascii_digit)
        && frac.is_none_or(|f| !f.is_empty() && f.iter().all(u8::is_ascii_digit));
    if !ok || s.len() > 64 {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// The `n`th argument in the strict integer form, or hand the call to Lua.
fn int_arg(argv: &[&[u8]], n: usize) -> Result<i64, Stop> {
    argv.get(n).and_then(|a| integer(a)).ok_or(Stop::Lua)
}

/// An integral Lua number as a command argument (`%.17g` of it, for the values the natives
/// keep within ±2^53).
fn num(f: f64) -> Result<String, Stop> {
    if f.fract() == 0.0 && f.abs() <= EXACT as f64 {
        Ok(g17(f))
    } else {
        Err(Stop::Lua)
    }
}

/// `EVAL`/`EVALSHA` of a known script: runs its native and writes its reply to `out`. False if
/// the script is not known (or not cached, for `EVALSHA`: Lua answers NOSCRIPT), or its native
/// handed it over: then nothing was changed or written, and the Lua path runs it.
pub fn run(
    host: &mut dyn Host,
    source: Source<'_>,
    keys: &[&[u8]],
    argv: &[&[u8]],
    read_only: bool,
    proto: Proto,
    out: &mut BytesMut,
) -> bool {
    let found = match source {
        Source::Sha(text) => cache::parse_sha(text)
            .and_then(|sha| known(&sha).map(|k| (sha, k)))
            .filter(|(sha, _)| cache::contains(sha)),
        Source::Body(body) => {
            if !KNOWN.iter().any(|k| k.len == body.len()) {
                None
            } else {
                let sha = cache::sha1hex(body);
                let k = known(&sha);
                if k.is_some() && !cache::contains(&sha) {
                    // Cached as the Lua path caches what it compiled.
                    let _ = cache::insert(sha, body, false);
                }
                k.map(|k| (sha, k))
            }
        }
    };
    let Some((sha, (index, k))) = found else {
        LUA_CALLS.fetch_add(1, Relaxed);
        return false;
    };
    if read_only && k.writes {
        LUA_CALLS.fetch_add(1, Relaxed);
        return false;
    }
    let mut run = Run {
        host,
        sha: &sha,
        scratch: SCRATCH.take(),
        wrote: false,
    };
    let result = (k.run)(&mut run, keys, argv);
    SCRATCH.set(std::mem::take(&mut run.scratch));
    match result {
        Ok(ret) => ret.write(proto, out),
        Err(Stop::Raise(text)) => reply::error(out, &text),
        Err(Stop::Lua) if run.wrote => {
            // Never: each native makes every value its writes need before the first. Lua
            // must not run the script again over what was written.
            debug_assert!(false, "{} handed a call to Lua after writing", k.name);
            reply::error(out, "ERR the script's native run stopped after writing");
        }
        Err(Stop::Lua) => {
            HANDED_TO_LUA.fetch_add(1, Relaxed);
            LUA_CALLS.fetch_add(1, Relaxed);
            return false;
        }
    }
    NATIVE_CALLS[index].fetch_add(1, Relaxed);
    true
}

fn known(sha: &Sha) -> Option<(usize, &'static Known)> {
    // A first byte that differs rules a script out before the full comparison.
    KNOWN
        .iter()
        .enumerate()
        .find(|(_, k)| k.sha[0] == sha[0] && k.sha == sha)
}

/// INFO's `scripting` section (after the cache's own fields).
pub fn info(t: &mut String) {
    use std::fmt::Write;
    let native: u64 = NATIVE_CALLS.iter().map(|c| c.load(Relaxed)).sum();
    let _ = write!(
        t,
        "scripts_lua_calls:{}\r\nscripts_native_calls:{native}\r\nscripts_native_handed_to_lua:{}\r\n",
        LUA_CALLS.load(Relaxed),
        HANDED_TO_LUA.load(Relaxed),
    );
    for (k, calls) in KNOWN.iter().zip(&NATIVE_CALLS) {
        let _ = write!(
            t,
            "script_native_{}:sha={},calls={}\r\n",
            k.name,
            String::from_utf8_lossy(k.sha),
            calls.load(Relaxed)
        );
    }
}

// The natives. Each names the script's lines its commands are on (for errors after a write);
// the scripts' text is in tests/fixtures/known-scripts.

/// limits `incr_expire.lua`: `INCRBY key amount`; on the first hit, `EXPIRE key expiry`;
/// returns the count.
fn incr_expire(r: &mut Run<'_>, keys: &[&[u8]], argv: &[&[u8]]) -> Result<Ret, Stop> {
    let [key, ..] = keys else {
        return Err(Stop::Lua);
    };
    let (Some(&expiry), Some(&amount)) = (argv.first(), argv.get(1)) else {
        return Err(Stop::Lua);
    };
    let amount_n = integer(amount).ok_or(Stop::Lua)?;
    // Direct: INCRBY, then EXPIRE on a new window, with the store's own operations.
    if let Some(expire_ms) = integer(expiry).and_then(|s| s.checked_mul(1000)) {
        let direct = r.direct(&[Cmd::IncrBy, Cmd::Expire], &[key], |store, now| {
            // (Within ±2^53 s no deadline leaves the i64 range: EXPIRE cannot fail after
            // the INCRBY.)
            let at = expire_deadline(now, expire_ms)?;
            let current = store.incr_by(key, amount_n, now).ok()?;
            if current as f64 != amount_n as f64 {
                return Some((current, &[Cmd::IncrBy]));
            }
            store.expire_at(key, at, now);
            Some((current, &[Cmd::IncrBy, Cmd::Expire]))
        });
        if let Some(current) = direct {
            return Ok(Ret::Number(current as f64));
        }
    }
    let current = r.write(3, &[b"incrby", key, amount])?.int()?;
    if current as f64 == amount_n as f64 {
        r.write(6, &[b"expire", key, expiry])?;
    }
    Ok(Ret::Number(current as f64))
}

/// limits `moving_window.lua`: a binary search of the list (newest first) for the oldest
/// timestamp at or after ARGV[1] among its first ARGV[2] entries; returns it (as Lua's
/// `tostring` writes it) and the count, or nil.
fn moving_window(r: &mut Run<'_>, keys: &[&[u8]], argv: &[&[u8]]) -> Result<Ret, Stop> {
    let [key, ..] = keys else {
        return Err(Stop::Lua);
    };
    let target = argv.first().and_then(|a| decimal(a)).ok_or(Stop::Lua)?;
    let len = int_arg(argv, 1)?;
    let entry = |r: &mut Run<'_>, at: i64, line| -> Result<Option<f64>, Stop> {
        r.read(line, &[b"lindex", key, at.to_string().as_bytes()])?
            .number()
    };
    let (mut low, mut high, mut found) = (0i64, len - 1, None);
    while low <= high {
        let mid = (low + high).div_euclid(2);
        match entry(r, mid, 11)? {
            Some(val) if val >= target => {
                found = Some(mid);
                low = mid + 1;
            }
            _ => high = mid - 1,
        }
    }
    let Some(index) = found else {
        return Ok(Ret::Null);
    };
    let oldest = entry(r, index, 28)?.ok_or(Stop::Lua)?;
    Ok(Ret::Array(vec![
        Ret::Str(convert::gfmt(oldest, 14).into_bytes()),
        Ret::Number((index + 1) as f64),
    ]))
}

/// At most this many timestamps pushed by one call natively: one `LPUSH`, as the script
/// pushes 5,000 at a time.
const MAX_PUSH: i64 = 5000;

/// limits `acquire_moving_window.lua`: refuses if the entry at `limit - amount` is inside the
/// window; else pushes `amount` timestamps, trims the list to `limit` and sets its expiry.
fn acquire_moving_window(r: &mut Run<'_>, keys: &[&[u8]], argv: &[&[u8]]) -> Result<Ret, Stop> {
    let [key, ..] = keys else {
        return Err(Stop::Lua);
    };
    let timestamp = argv.first().and_then(|a| decimal(a)).ok_or(Stop::Lua)?;
    let limit = int_arg(argv, 1)?;
    let expiry = int_arg(argv, 2)?;
    let amount = int_arg(argv, 3)?;
    if amount > limit {
        return Ok(Ret::Null);
    }
    if !(1..=MAX_PUSH).contains(&amount) {
        return Err(Stop::Lua);
    }
    let index = num((limit - amount) as f64)?;
    let entry = r.read(10, &[b"lindex", key, index.as_bytes()])?;
    if !matches!(entry, Reply::Bulk(None)) {
        // A present entry that is no number makes Lua's comparison fail: Lua says so.
        let at = entry.number()?.ok_or(Stop::Lua)?;
        if at >= timestamp - expiry as f64 {
            return Ok(Ret::Null);
        }
    }
    let stamp = g17(timestamp);
    let last = num((limit - 1) as f64)?;
    let expiry = num(expiry as f64)?;
    let mut args: Vec<&[u8]> = Vec::with_capacity(2 + amount as usize);
    args.extend([b"lpush".as_slice(), key]);
    args.extend((0..amount).map(|_| stamp.as_bytes()));
    r.write(21, &args)?;
    r.write(23, &[b"ltrim", key, b"0", last.as_bytes()])?;
    r.write(24, &[b"expire", key, expiry.as_bytes()])?;
    Ok(Ret::True)
}

/// The four reads both sliding-window scripts make: `(previous count, previous TTL, current
/// count, current TTL)` as the replies.
fn windows(
    r: &mut Run<'_>,
    previous: &[u8],
    current: &[u8],
    lines: [u32; 4],
) -> Result<[Reply; 4], Stop> {
    Ok([
        r.read(lines[0], &[b"get", previous])?,
        r.read(lines[1], &[b"pttl", previous])?,
        r.read(lines[2], &[b"get", current])?,
        r.read(lines[3], &[b"pttl", current])?,
    ])
}

/// Both sliding-window scripts: when the current window's counter has less than a window to
/// live, it becomes the previous one (`RENAME`), and a new current counter starts at 0 with
/// the rest of its life plus a window.
fn shift(
    r: &mut Run<'_>,
    previous: &[u8],
    current: &[u8],
    current_ttl: f64,
    expiry: f64,
    lines: [u32; 2],
) -> Result<(), Stop> {
    let px = num(current_ttl + expiry)?;
    r.write(lines[0], &[b"rename", current, previous])?;
    r.write(lines[1], &[b"set", current, b"0", b"PX", px.as_bytes()])?;
    Ok(())
}

/// limits `sliding_window.lua`: the two counters and their TTLs, after the shift.
fn sliding_window(r: &mut Run<'_>, keys: &[&[u8]], argv: &[&[u8]]) -> Result<Ret, Stop> {
    let [previous, current, ..] = keys else {
        return Err(Stop::Lua);
    };
    let expiry = int_arg(argv, 0)? as f64 * 1000.0;
    // Direct, when the current window needs no shift (a shift goes call by call).
    let made = r.direct(
        &[Cmd::Get, Cmd::Pttl],
        &[previous, current],
        |store, now| {
            let (current_value, current_ttl) = string(store, current, now, <[u8]>::to_vec)?;
            if current_ttl > 0 && (current_ttl as f64) < expiry {
                return None;
            }
            let (previous_value, previous_ttl) = string(store, previous, now, <[u8]>::to_vec)?;
            let got = Ret::Array(vec![
                bulk(previous_value),
                Ret::Number(previous_ttl as f64),
                bulk(current_value),
                Ret::Number(current_ttl as f64),
            ]);
            Some((got, &[Cmd::Get, Cmd::Pttl, Cmd::Get, Cmd::Pttl]))
        },
    );
    if let Some(got) = made {
        return Ok(got);
    }
    let mut got = windows(r, previous, current, [2, 3, 4, 5])?;
    let current_ttl = got[3].int()? as f64;
    if current_ttl > 0.0 && current_ttl < expiry {
        shift(r, previous, current, current_ttl, expiry, [9, 10])?;
        got = windows(r, previous, current, [11, 12, 13, 14])?;
    }
    Ok(Ret::Array(got.map(Reply::ret).into()))
}

/// limits `acquire_sliding_window.lua`: the weighted count of both windows plus `amount`
/// against the limit; if it fits, the current counter grows by `amount` (or starts at it, for
/// two windows).
fn acquire_sliding_window(r: &mut Run<'_>, keys: &[&[u8]], argv: &[&[u8]]) -> Result<Ret, Stop> {
    let [previous, current, ..] = keys else {
        return Err(Stop::Lua);
    };
    let limit = int_arg(argv, 0)? as f64;
    let expiry = int_arg(argv, 1)? as f64 * 1000.0;
    let amount = int_arg(argv, 2)?;
    if amount as f64 > limit {
        return Ok(Ret::Null);
    }
    // Every argument the writes below take, made before the first write.
    let amount_text = num(amount as f64)?;
    let px = num(expiry * 2.0)?;
    // Direct, when the current window needs no shift (a shift goes call by call): the two
    // counters read once each, then INCRBY or SET PX of the current one.
    // (SET PX takes a positive time only: a window of none goes call by call, to its error.)
    let cmds = [Cmd::Pttl, Cmd::Get, Cmd::Exists, Cmd::IncrBy, Cmd::Set];
    let made = r.direct(&cmds, &[previous, current], |store, now| {
        if expiry <= 0.0 {
            return None;
        }
        const READS: &[Cmd] = &[Cmd::Pttl, Cmd::Get, Cmd::Pttl, Cmd::Get, Cmd::Pttl];
        const INCRBY: &[Cmd] = &[
            Cmd::Pttl,
            Cmd::Get,
            Cmd::Pttl,
            Cmd::Get,
            Cmd::Pttl,
            Cmd::Exists,
            Cmd::IncrBy,
        ];
        const SET: &[Cmd] = &[
            Cmd::Pttl,
            Cmd::Get,
            Cmd::Pttl,
            Cmd::Get,
            Cmd::Pttl,
            Cmd::Exists,
            Cmd::Set,
        ];
        let (current_count, current_ttl) = counter(store, current, now)?;
        if current_ttl > 0 && (current_ttl as f64) < expiry {
            return None;
        }
        let (previous_count, previous_ttl) = counter(store, previous, now)?;
        let previous_ttl = (previous_ttl as f64).max(0.0);
        let weighted = (previous_count.unwrap_or(0.0) * previous_ttl / expiry).floor()
            + current_count.unwrap_or(0.0);
        if weighted + amount as f64 > limit {
            return Some((false, READS));
        }
        if current_count.is_some() {
            store.incr_by(current, amount, now).ok()?;
            return Some((true, INCRBY));
        }
        let at = SetTtl::At(set_deadline(now, (expiry * 2.0) as u64));
        store
            .try_set(current, amount_text.as_bytes(), SetCond::Always, at, now)
            .ok()?;
        Some((true, SET))
    });
    if let Some(allowed) = made {
        return Ok(if allowed { Ret::True } else { Ret::Null });
    }
    let current_ttl = r.read(11, &[b"pttl", current])?.int()? as f64;
    if current_ttl > 0.0 && current_ttl < expiry {
        // The current counter becomes the previous one, read below with `tonumber`: one that
        // is not in the strict form goes to Lua before anything is written.
        r.read(19, &[b"get", current])?.number()?;
        shift(r, previous, current, current_ttl, expiry, [15, 16])?;
    }
    let [pc, pt, cc, ct] = windows(r, previous, current, [19, 20, 21, 22])?;
    let previous_count = pc.number()?.unwrap_or(0.0);
    let previous_ttl = pt.number()?.unwrap_or(0.0).max(0.0);
    let current_count = cc.number()?.unwrap_or(0.0);
    // (the script clamps the current TTL too, and reads it no more)
    ct.number()?;
    let weighted = (previous_count * previous_ttl / expiry).floor() + current_count;
    if weighted + amount as f64 > limit {
        return Ok(Ret::Null);
    }
    if r.read(38, &[b"exists", current])?.int()? == 1 {
        r.write(39, &[b"incrby", current, amount_text.as_bytes()])?;
    } else {
        let set: [&[u8]; 5] = [
            b"set",
            current,
            amount_text.as_bytes(),
            b"PX",
            px.as_bytes(),
        ];
        r.write(42, &set)?;
    }
    Ok(Ret::True)
}

/// A counter as `tonumber(GET key)` and `PTTL key` read it, for the direct lanes: its number
/// (`None`: missing) and its PTTL. `None` when the two calls would not give that: a value
/// outside the strict decimal form, or a key of another type.
fn counter(store: &Store, key: &[u8], now: Nanos) -> Option<(Option<f64>, i64)> {
    match string(store, key, now, decimal)? {
        (Some(None), _) => None,
        (number, ttl) => Some((number.flatten(), ttl)),
    }
}

/// A string key as `GET key` and `PTTL key` read it, for the direct lanes: `read` of its value
/// (`None`: missing) and its PTTL; `None` for a key of another type (GET's `WRONGTYPE`).
fn string<T>(
    store: &Store,
    key: &[u8],
    now: Nanos,
    read: impl FnOnce(&[u8]) -> T,
) -> Option<(Option<T>, i64)> {
    use sluice_store::{StrWrite, Ttl};
    let found = store.string(key, now, |old| {
        let found = old.map(|(value, deadline)| (read(value), deadline));
        Ok((StrWrite::Keep, found))
    });
    match found.ok()? {
        None => Some((None, pttl(Ttl::Missing))),
        Some((value, deadline)) => Some((Some(value), pttl(Ttl::of(deadline, now)))),
    }
}

/// A `GET` reply as the script returns it: the string, or `false` (a null) for none.
fn bulk(value: Option<Vec<u8>>) -> Ret {
    value.map_or(Ret::Null, Ret::Str)
}

/// rate-limit-redis `increment`: a new window (`SET key 1 PX windowMs`) when the key has no
/// time left, else `INCR`; returns the hits and the time left.
fn rlr_increment(r: &mut Run<'_>, keys: &[&[u8]], argv: &[&[u8]]) -> Result<Ret, Stop> {
    let [key, ..] = keys else {
        return Err(Stop::Lua);
    };
    let window = int_arg(argv, 0)?;
    // Direct: PTTL, then SET PX (a window of no time left) or INCR.
    if window > 0 {
        let direct = r.direct(&[Cmd::Pttl, Cmd::Set, Cmd::Incr], &[key], |store, now| {
            let ttl = pttl(store.ttl(key, now));
            if ttl <= 0 {
                let at = SetTtl::At(set_deadline(now, window as u64));
                store.try_set(key, b"1", SetCond::Always, at, now).ok()?;
                return Some(((1, window), &[Cmd::Pttl, Cmd::Set]));
            }
            let hits = store.incr_by(key, 1, now).ok()?;
            Some(((hits, ttl), &[Cmd::Pttl, Cmd::Incr]))
        });
        if let Some((hits, ttl)) = direct {
            return Ok(Ret::Numbers(hits as f64, ttl as f64));
        }
    }
    let ttl = r.read(2, &[b"PTTL", key])?.int()?;
    if ttl <= 0 {
        let px = num(window as f64)?;
        r.write(4, &[b"SET", key, b"1", b"PX", px.as_bytes()])?;
        return Ok(Ret::Numbers(1.0, window as f64));
    }
    let hits = r.write(7, &[b"INCR", key])?.int()?;
    Ok(Ret::Numbers(hits as f64, ttl as f64))
}

/// rate-limit-redis `get`: the hits (or false) and the time left.
fn rlr_get(r: &mut Run<'_>, keys: &[&[u8]], _argv: &[&[u8]]) -> Result<Ret, Stop> {
    let [key, ..] = keys else {
        return Err(Stop::Lua);
    };
    let made = r.direct(&[Cmd::Get, Cmd::Pttl], &[key], |store, now| {
        let (hits, ttl) = string(store, key, now, <[u8]>::to_vec)?;
        let got = Ret::Array(vec![bulk(hits), Ret::Number(ttl as f64)]);
        Some((got, &[Cmd::Get, Cmd::Pttl]))
    });
    if let Some(got) = made {
        return Ok(got);
    }
    let hits = r.read(1, &[b"GET", key])?;
    let ttl = r.read(2, &[b"PTTL", key])?;
    Ok(Ret::Array(vec![hits.ret(), ttl.ret()]))
}

/// rate-limiter-flexible's incr-and-TTL (one line): `SET key 0 EX duration NX`, `INCRBY key
/// points`, `PTTL key`, and an `EXPIRE` if the key had none; returns the points and the TTL.
fn rlf_incr_ttl(r: &mut Run<'_>, keys: &[&[u8]], argv: &[&[u8]]) -> Result<Ret, Stop> {
    let [key, ..] = keys else {
        return Err(Stop::Lua);
    };
    let (Some(&points), Some(&duration)) = (argv.first(), argv.get(1)) else {
        return Err(Stop::Lua);
    };
    // `1000 * ARGV[2]` below coerces the string as `tonumber` would.
    let seconds = integer(duration).ok_or(Stop::Lua)?;
    let points_n = integer(points).ok_or(Stop::Lua)?;
    // Direct: SET NX EX, INCRBY, PTTL and an EXPIRE if the key had none. (EX must be
    // positive; within ±2^53 s no deadline leaves the i64 range. Once SET created the key, the
    // INCRBY of a number within ±2^53 cannot fail.)
    if seconds > 0 {
        let ms = seconds * 1000;
        let made = r.direct(
            &[Cmd::Set, Cmd::IncrBy, Cmd::Pttl, Cmd::Expire],
            &[key],
            |store, now| {
                let created = SetTtl::At(set_deadline(now, ms as u64));
                let expired = expire_deadline(now, ms)?;
                store.try_set(key, b"0", SetCond::Nx, created, now).ok()?;
                let consumed = store.incr_by(key, points_n, now).ok()?;
                let ttl = pttl(store.ttl(key, now));
                if ttl == -1 {
                    store.expire_at(key, expired, now);
                    let all = &[Cmd::Set, Cmd::IncrBy, Cmd::Pttl, Cmd::Expire];
                    return Some(((consumed, 1000.0 * seconds as f64), all));
                }
                Some(((consumed, ttl as f64), &[Cmd::Set, Cmd::IncrBy, Cmd::Pttl]))
            },
        );
        if let Some((consumed, ttl)) = made {
            return Ok(Ret::Numbers(consumed as f64, ttl));
        }
    }
    r.write(1, &[b"set", key, b"0", b"EX", duration, b"NX"])?;
    let consumed = r.write(1, &[b"incrby", key, points])?.int()?;
    let mut ttl = r.read(1, &[b"pttl", key])?.int()? as f64;
    if ttl == -1.0 {
        r.write(1, &[b"expire", key, duration])?;
        ttl = 1000.0 * seconds as f64;
    }
    Ok(Ret::Numbers(consumed as f64, ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_forms_are_what_lua_and_rust_agree_on() {
        assert_eq!(integer(b"0"), Some(0));
        assert_eq!(integer(b"-17"), Some(-17));
        assert_eq!(integer(b"9007199254740992"), Some(1 << 53));
        for bad in [
            &b"007"[..],
            b"-0",
            b"+1",
            b" 1",
            b"1 ",
            b"0x10",
            b"1e3",
            b"",
            b"-",
            b"9007199254740993",
            b"1.0",
        ] {
            assert_eq!(integer(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(decimal(b"1733366400.125"), Some(1_733_366_400.125));
        assert_eq!(decimal(b"-2"), Some(-2.0));
        for bad in [
            &b"1."[..],
            b".5",
            b"1e3",
            b"inf",
            b"nan",
            b" 1",
            b"0x1",
            b"",
        ] {
            assert_eq!(decimal(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn replies_are_read_as_lua_gets_them() {
        assert_eq!(parse(b":42\r\n"), Ok(Reply::Int(42)));
        assert_eq!(parse(b"$-1\r\n"), Ok(Reply::Bulk(None)));
        assert_eq!(
            parse(b"$2\r\nab\r\n"),
            Ok(Reply::Bulk(Some(b"ab".to_vec())))
        );
        assert_eq!(parse(b"+OK\r\n"), Ok(Reply::Status));
        assert_eq!(
            parse(b"-WRONGTYPE Operation\r\n"),
            Err("WRONGTYPE Operation".into())
        );
    }

    /// Every known script's length is its bytes' (the fixtures are the scripts' bytes).
    #[test]
    fn the_table_names_distinct_scripts() {
        for (i, a) in KNOWN.iter().enumerate() {
            for b in &KNOWN[i + 1..] {
                assert_ne!(a.sha, b.sha);
                assert_ne!(a.name, b.name);
            }
        }
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/known-scripts"
        );
        for k in &KNOWN {
            let body = std::fs::read(format!("{dir}/{}.lua", k.name)).unwrap();
            assert_eq!(body.len(), k.len, "{}", k.name);
            assert_eq!(&cache::sha1hex(&body), k.sha, "{}", k.name);
        }
    }
}
