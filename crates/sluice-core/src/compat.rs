//! Drop-in replies for the two GCRA commands users already call: redis-cell's `CL.THROTTLE`
//! and Redis's native `GCRA`. Both run on the [`State::Gcra`] variant, so one key can be shared
//! with `RL.CHECK ... ALGO GCRA`; the stored `tat` is absolute nanoseconds as everywhere else.
//! Both count capacity as `max_burst + 1`, unlike `RL.CHECK`'s `BURST`.
//!
//! What was matched, and where it was read:
//!
//! # `CL.THROTTLE key max_burst count period [quantity]` (brandur/redis-cell)
//! - `redis-cell/src/lib.rs`: 5 or 6 arguments (with the command name), else
//!   `Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]`; every number
//!   is an `i64` parsed with `str::parse` (`Couldn't parse as integer: <arg>`; negatives are
//!   accepted). Errors are replied as `Cell error: <e>` (`redis-cell/src/redis/mod.rs`), and the
//!   generic error displays as `Store error: <msg>` (`redis-cell-impl/src/error.rs`), so the
//!   line is `-Cell error: Store error: <msg>`. `period` is whole seconds.
//! - `redis-cell-impl/src/lib.rs` (`Rate::per_period`, `RateLimiter::rate_limit`): emission
//!   interval `T = (period_ns as f64 / count as f64) as i64` ns (0 → `Zero rates are not
//!   supported`); DVT = `T·(max_burst+1)`; `new_tat = max(tat, now) + T·quantity`; limited iff
//!   `new_tat − DVT > now`; then `retry_after = new_tat − DVT − now` only if `T·quantity ≤ DVT`
//!   (else −1 s: never fits), `ttl = tat − now`; allowed: `ttl = new_tat − now`. `remaining =
//!   (next_µs as f64 / T_µs as f64) as i64` with `next = DVT − ttl`, only if `next > −T` (else 0);
//!   `reset_after = ttl`. Quantity 0 only peeks.
//! - Reply: five integers `[limited, max_burst+1, remaining, retry_after_s, reset_after_s]`,
//!   seconds = whole seconds plus one if the sub-second part has a whole millisecond
//!   (`subsec_milliseconds() > 0`): a 1.0004 s wait answers 1, −1 s stays −1.
//!
//! # `GCRA key max_burst tokens_per_period period [TOKENS n]` (redis/redis, Redis 8.8)
//! - `src/gcra.c` (`gcraCommand`), `src/commands/gcra.json` (arity −5; all five reply elements
//!   are integers), `tests/unit/type/gcra.tcl`. Validation order: more than 7 arguments → arity
//!   error; `max_burst` via `getPositiveLongFromObjectOrReply` (any failure: `value is out of
//!   range, must be positive`); `tokens_per_period` in `1..=LONG_MAX` (`value is not an integer
//!   or out of range` / `value is out of range, value must between 1 and 9223372036854775807`);
//!   `period` a double in seconds, fractional allowed (`value is not a valid float`; `period must
//!   be > 0 and < 1e12`); then `TOKENS` (case-insensitive, else `syntax error`; missing value:
//!   `Missing TOKENS value`; value in `1..=LONG_MAX`, so `TOKENS 0` is an error); then the key
//!   type (`WRONGTYPE`); then the overflow checks (`GCRA limiting uses microsecond accuracy.
//!   Combination of period, tokens_per_period and TOKENS|max_burst would cause an overflow`).
//! - Math in microseconds: `T = (long long)(period·1e6 / tokens_per_period + 0.5)`, at least 1;
//!   variance = `T·(max_burst+1)`; increment = `T·n`; limited iff `max(tat, now) + increment −
//!   variance > now`; `retry_after = ceil((that − now) / 1e6)` if `increment ≤ variance`;
//!   `remaining = (variance − ttl) / T` (C division) when `> −T`; `reset_after = ceil(ttl/1e6)`.
//! - A cost that can never fit (`increment > variance`, redis/redis#15113): limited, remaining 0,
//!   retry_after −1, reset_after −1.
//!
//! Deviations, on purpose: the parameter-only overflow checks run at parse time (before the key
//! type is known); Redis takes `now` from a millisecond snapshot, this takes it in microseconds.

use crate::{CheckError, Nanos, State};

const NS_PER_US: i128 = 1_000;
const NS_PER_MS: i128 = 1_000_000;
const NS_PER_S: i128 = 1_000_000_000;

/// Reads a `Gcra` slot: its `tat` in ns, `None` if fresh. Another algorithm is `WRONGTYPE`.
fn gcra_tat(slot: &Option<State>) -> Result<Option<i128>, CheckError> {
    match slot {
        None => Ok(None),
        Some(State::Gcra { tat }) => Ok(Some(i128::from(tat.0))),
        Some(_) => Err(CheckError::WrongType),
    }
}

/// Writes a `tat` (ns) back; a `tat` not after `now` is fresh. Returns whether the slot changed.
fn store_tat(slot: &mut Option<State>, tat: i128, now: i128) -> bool {
    let new = (tat > now).then(|| State::Gcra {
        tat: Nanos(tat.clamp(0, i128::from(u64::MAX)) as u64),
    });
    let changed = *slot != new;
    *slot = new;
    changed
}

/// The bucket a GCRA-compatible request checks, as the tokens out on lease see it: its
/// capacity in tokens, its emission interval in ns, the tokens the request spends, and the
/// clock's step in ns (`GCRA` reads time in whole µs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub capacity: i64,
    pub emission_interval_ns: i128,
    pub cost: i64,
    pub step_ns: i128,
}

/// Lowers `slot` (a `Gcra` key) so that a check at `now` finds at most `capacity − held` of
/// its tokens (none when `held` is the capacity or more): the tokens out on lease stay with
/// their holders, as RL.CHECK leaves them (`token_lease::check_keeping_held`). A bucket
/// already that low is left as it is. Returns whether the slot changed.
pub fn keep_held(
    slot: &mut Option<State>,
    bucket: &Bucket,
    held: u64,
    now: Nanos,
) -> Result<bool, CheckError> {
    if held == 0 || bucket.capacity <= 0 || bucket.emission_interval_ns <= 0 {
        return Ok(false);
    }
    let now_ns = i128::from(now.0);
    let tat = gcra_tat(slot)?.unwrap_or(now_ns);
    let held = i128::from(held).min(i128::from(bucket.capacity));
    // From `now` as the request reads it, so that it finds exactly `capacity − held`.
    let floor = now_ns - now_ns % bucket.step_ns.max(1) + held * bucket.emission_interval_ns;
    if tat >= floor {
        return Ok(false);
    }
    Ok(store_tat(slot, floor, now_ns))
}

/// `CL.THROTTLE`'s arguments after the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClThrottle {
    pub max_burst: i64,
    pub count: i64,
    /// Seconds.
    pub period: i64,
    pub quantity: i64,
}

/// `CL.THROTTLE`'s reply: the same five integers as [`GcraReply`], in seconds rounded as
/// redis-cell rounds them; `retry_after` is −1 when allowed (and when the quantity can never
/// fit).
pub type ClThrottleReply = GcraReply;

impl ClThrottle {
    /// Parses the arguments after the key: `max_burst count period [quantity]`. The error is
    /// the whole error line without its leading `-`, as redis-cell writes it.
    pub fn parse(args: &[&[u8]]) -> Result<Self, String> {
        const ERR: &str = "Cell error: Store error: ";
        if !(3..=4).contains(&args.len()) {
            return Err(format!(
                "{ERR}Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"
            ));
        }
        let int = |a: &[u8]| {
            let s = String::from_utf8_lossy(a);
            s.parse::<i64>()
                .map_err(|_| format!("{ERR}Couldn't parse as integer: {s}"))
        };
        let req = ClThrottle {
            max_burst: int(args[0])?,
            count: int(args[1])?,
            period: int(args[2])?,
            quantity: args.get(3).map_or(Ok(1), |a| int(a))?,
        };
        if req.emission_interval() == 0 {
            return Err(format!("{ERR}Zero rates are not supported"));
        }
        Ok(req)
    }

    /// The bucket this request checks, for [`keep_held`].
    pub fn bucket(&self) -> Bucket {
        Bucket {
            capacity: self.max_burst.saturating_add(1),
            emission_interval_ns: self.emission_interval(),
            cost: self.quantity,
            step_ns: 1,
        }
    }

    /// redis-cell's emission interval in ns: a float division truncated, as `Rate::per_period`.
    fn emission_interval(&self) -> i128 {
        // `Duration::seconds(period).whole_nanoseconds() as i64` wraps like this.
        let period_ns = (i128::from(self.period) * NS_PER_S) as i64;
        if self.count == 0 || period_ns == 0 {
            return 0;
        }
        i128::from((period_ns as f64 / self.count as f64) as i64)
    }
}

/// Whole seconds, plus one if there is a whole millisecond beyond them (redis-cell's rounding).
fn cell_secs(d_ns: i128) -> i64 {
    let secs = d_ns / NS_PER_S;
    let subsec_ms = (d_ns % NS_PER_S) / NS_PER_MS;
    let secs = if subsec_ms > 0 { secs + 1 } else { secs };
    secs.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// `CL.THROTTLE` on `slot` (a `Gcra` key) at `now`. Returns the reply and whether the slot
/// changed (only allowed requests with a non-zero quantity change it).
pub fn cl_throttle(
    slot: &mut Option<State>,
    req: &ClThrottle,
    now: Nanos,
) -> Result<(ClThrottleReply, bool), CheckError> {
    let stored = gcra_tat(slot)?;
    let now_ns = i128::from(now.0);
    let ei = req.emission_interval();
    let dvt = ei * (i128::from(req.max_burst) + 1);
    let increment = ei * i128::from(req.quantity);
    // An expired key reads as missing in Redis: tat = now.
    let tat = stored.filter(|&t| t > now_ns).unwrap_or(now_ns);
    let new_tat = tat.max(now_ns) + increment;
    let diff = now_ns - (new_tat - dvt);
    let (limited, retry_after, ttl, changed) = if diff < 0 {
        let retry = if increment <= dvt { -diff } else { -NS_PER_S };
        (true, retry, tat - now_ns, false)
    } else {
        let changed = store_tat(slot, new_tat, now_ns);
        (false, -NS_PER_S, new_tat - now_ns, changed)
    };
    let next = dvt - ttl;
    let remaining = if next > -ei {
        ((next / NS_PER_US) as f64 / (ei / NS_PER_US) as f64) as i64
    } else {
        0
    };
    let reply = ClThrottleReply {
        limited: i64::from(limited),
        max_tokens: req.max_burst.saturating_add(1),
        remaining,
        retry_after: cell_secs(retry_after),
        reset_after: cell_secs(ttl),
    };
    Ok((reply, changed))
}

/// Redis `GCRA`'s arguments after the key.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GcraCmd {
    /// As given (≥ 0); the capacity is `max_burst + 1`.
    pub max_burst: i64,
    /// ≥ 1.
    pub tokens_per_period: i64,
    /// Seconds, fractional allowed, in (0, 1e12).
    pub period: f64,
    /// `TOKENS n`, ≥ 1 (default 1).
    pub tokens: i64,
}

/// Redis `GCRA`'s reply, and `CL.THROTTLE`'s: an array of five integers in RESP2 and RESP3
/// alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraReply {
    /// 1 if limited, 0 if allowed.
    pub limited: i64,
    /// `max_burst + 1`.
    pub max_tokens: i64,
    pub remaining: i64,
    /// Seconds, rounded up; −1 when allowed or when the cost can never fit.
    pub retry_after: i64,
    /// Seconds until a full burst is available, rounded up; −1 when the cost can never fit
    /// (`GCRA` only).
    pub reset_after: i64,
}

impl GcraReply {
    /// The five integers, in reply order.
    pub fn to_array(self) -> [i64; 5] {
        [
            self.limited,
            self.max_tokens,
            self.remaining,
            self.retry_after,
            self.reset_after,
        ]
    }
}

/// The runtime overflow Redis reports when `max(tat, now) + increment` would pass `i64::MAX`
/// µs; [`gcra`] answers it as `Err(CheckError::CostExceedsCapacity)` and the command replies
/// with this line.
pub const GCRA_TOKENS_OVERFLOW: &str = "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and TOKENS would cause an overflow";
const GCRA_BURST_OVERFLOW: &str = "ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and max_burst would cause an overflow";

/// Redis's `string2ll`: optional `-`, no leading zeros, no `+`, no spaces, fits in i64.
fn redis_ll(a: &[u8]) -> Option<i64> {
    let digits = a.strip_prefix(b"-").unwrap_or(a);
    let canonical = a == b"0" || matches!(digits.first(), Some(b'1'..=b'9'));
    if !canonical || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(a).ok()?.parse().ok()
}

/// `getRangeLongFromObjectOrReply(c, o, 1, LONG_MAX, .., NULL)`.
fn redis_positive_long(a: &[u8]) -> Result<i64, String> {
    match redis_ll(a) {
        None => Err("ERR value is not an integer or out of range".into()),
        Some(v) if v < 1 => Err(format!(
            "ERR value is out of range, value must between 1 and {}",
            i64::MAX
        )),
        Some(v) => Ok(v),
    }
}

impl GcraCmd {
    /// Parses the arguments after the key: `max_burst tokens_per_period period [TOKENS n]`,
    /// checking in Redis's order with Redis's error lines (without the leading `-`).
    pub fn parse(args: &[&[u8]]) -> Result<Self, String> {
        if !(3..=5).contains(&args.len()) {
            return Err("ERR wrong number of arguments for 'gcra' command".into());
        }
        let max_burst = redis_ll(args[0])
            .filter(|&v| v >= 0)
            .ok_or_else(|| "ERR value is out of range, must be positive".to_string())?;
        let tokens_per_period = redis_positive_long(args[1])?;
        let period = std::str::from_utf8(args[2])
            .ok()
            .filter(|s| !s.starts_with(|c: char| c.is_ascii_whitespace()))
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|p| !p.is_nan())
            .ok_or_else(|| "ERR value is not a valid float".to_string())?;
        if period <= 0.0 || period >= 1e12 {
            return Err("ERR period must be > 0 and < 1e12".into());
        }
        let mut tokens = 1;
        if let Some(kw) = args.get(3) {
            if !kw.eq_ignore_ascii_case(b"TOKENS") {
                return Err("ERR syntax error".into());
            }
            let value = args
                .get(4)
                .ok_or_else(|| "ERR Missing TOKENS value".to_string())?;
            tokens = redis_positive_long(value)?;
        }
        let cmd = GcraCmd {
            max_burst,
            tokens_per_period,
            period,
            tokens,
        };
        let ei = cmd.emission_interval_us();
        if ei > i64::MAX / cmd.tokens {
            return Err(GCRA_TOKENS_OVERFLOW.into());
        }
        if ei > i64::MAX / cmd.capacity() {
            return Err(GCRA_BURST_OVERFLOW.into());
        }
        Ok(cmd)
    }

    /// The bucket this request checks, for [`keep_held`].
    pub fn bucket(&self) -> Bucket {
        Bucket {
            capacity: self.capacity(),
            emission_interval_ns: i128::from(self.emission_interval_us()) * NS_PER_US,
            cost: self.tokens,
            step_ns: NS_PER_US,
        }
    }

    /// `max_burst + 1`, saturating as Redis does (`if max_burst < LONG_MAX`).
    fn capacity(&self) -> i64 {
        self.max_burst.saturating_add(1)
    }

    /// Redis's emission interval: microseconds rounded to nearest, at least 1.
    fn emission_interval_us(&self) -> i64 {
        (((self.period * 1_000_000.0) / self.tokens_per_period as f64 + 0.5) as i64).max(1)
    }
}

/// Redis `GCRA` on `slot` (a `Gcra` key) at `now`. Returns the reply and whether the slot
/// changed (only allowed requests change it).
pub fn gcra(
    slot: &mut Option<State>,
    cmd: &GcraCmd,
    now: Nanos,
) -> Result<(GcraReply, bool), CheckError> {
    let stored = gcra_tat(slot)?;
    let now_us = i128::from(now.0) / NS_PER_US;
    // A tat written by RL.CHECK in ns rounds up to the next µs: never more permissive.
    let tat_us = stored.map_or(now_us, |t| (t + NS_PER_US - 1) / NS_PER_US);
    let ei = i128::from(cmd.emission_interval_us());
    let variance = ei * i128::from(cmd.capacity());
    let increment = ei * i128::from(cmd.tokens);
    let base = tat_us.max(now_us);
    if base + increment > i128::from(i64::MAX) {
        return Err(CheckError::CostExceedsCapacity);
    }
    let new_tat = base + increment;
    let diff = now_us - (new_tat - variance);
    let secs_ceil = |us: i128| -> i64 {
        (us.div_euclid(1_000_000) + i128::from(us.rem_euclid(1_000_000) > 0)) as i64
    };
    if diff < 0 && increment > variance {
        // Never fits at these parameters (redis/redis#15113): a coherent "don't retry".
        let reply = GcraReply {
            limited: 1,
            max_tokens: cmd.capacity(),
            remaining: 0,
            retry_after: -1,
            reset_after: -1,
        };
        return Ok((reply, false));
    }
    let (limited, retry_after, ttl, changed) = if diff < 0 {
        (true, secs_ceil(-diff), tat_us.max(now_us) - now_us, false)
    } else {
        let changed = store_tat(slot, new_tat * NS_PER_US, i128::from(now.0));
        (false, -1, new_tat - now_us, changed)
    };
    let next = variance - ttl;
    let remaining = if next > -ei { (next / ei) as i64 } else { 0 };
    let reply = GcraReply {
        limited: i64::from(limited),
        max_tokens: cmd.capacity(),
        remaining,
        retry_after,
        reset_after: secs_ceil(ttl),
    };
    Ok((reply, changed))
}
