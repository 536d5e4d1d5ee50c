//! A limit as a caller states it: parsed and checked in one place. RL.CHECK, RL.HITS KEYS, named
//! rules, the sidecar and Envoy's service all go through here, so a period, a count, an
//! algorithm or a fail mode means the same everywhere and is refused with the same words.
//!
//! Errors are [`SpecError`]s whose text is the message after Redis's `ERR ` (callers that speak
//! RESP put the prefix in front).

use std::fmt;

use crate::{Algo, LOG_LIMIT_MAX, MAX_SPAN, Nanos, Params};

/// Why a stated limit was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecError {
    /// A count that must be in 1..=i64::MAX (every count is replied as a RESP integer).
    NotPositive(&'static str),
    /// Not a number of seconds nor a duration with a unit.
    Period,
    /// A period whose nanoseconds do not fit: far past what any state may span.
    PeriodOverflow,
    /// The state of one key would span more than [`MAX_SPAN`]: a bucket's refill, or two
    /// windows.
    SpanTooLong {
        window: bool,
    },
    /// BURST given to an algorithm that has no bucket.
    BurstNotApplicable(Algo),
    /// A limit above what this algorithm stores.
    LimitTooLarge {
        algo: Algo,
        max: u64,
    },
    /// A cost that no wait would ever let through.
    CostExceedsCapacity {
        cost: u64,
        capacity: u64,
    },
    /// `SPLIT k` with fewer units of the limit (or BURST) than sub-keys.
    SplitTooLarge {
        k: u64,
        capacity: u64,
        burst: bool,
    },
    UnknownAlgo(String),
    UnknownFailMode,
    /// `COST` that is not an integer in 0..=u64::MAX.
    Cost,
    /// An option given without its value.
    NeedsValue(&'static str),
    /// A word RL.CHECK does not know.
    UnknownOption(String),
    /// `limit` or `period` missing.
    Arity,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::NotPositive(name) => write!(
                f,
                "{name} must be a positive integer (at most 9223372036854775807)"
            ),
            SpecError::Period => f.write_str(
                "period must be a positive number of seconds or a duration such as 500ms, 10s, 1m, 1h or 1d",
            ),
            SpecError::PeriodOverflow => {
                f.write_str("period too long: it would span more than 146 years")
            }
            SpecError::SpanTooLong { window: false } => f.write_str(
                "period too long: BURST × period ÷ limit would span more than 146 years",
            ),
            // A window's state spans the current window and the one before it.
            SpecError::SpanTooLong { window: true } => {
                f.write_str("period too long: a window may span at most 73 years")
            }
            SpecError::BurstNotApplicable(algo) => write!(
                f,
                "BURST applies to ALGO TOKEN, GCRA and LEAKY only, not {}",
                algo.name()
            ),
            SpecError::LimitTooLarge { algo, max } => {
                write!(f, "limit for ALGO {} must be at most {max}", algo.name())
            }
            SpecError::CostExceedsCapacity { cost, capacity } => write!(
                f,
                "COST {cost} exceeds the capacity {capacity}: it could never be allowed"
            ),
            SpecError::SplitTooLarge { k, capacity, burst } => write!(
                f,
                "SPLIT {k} is more than the {} {capacity}: every sub-key needs at least 1",
                if *burst { "BURST" } else { "limit" }
            ),
            SpecError::UnknownAlgo(name) => write!(
                f,
                "unknown ALGO '{name}'; expected TOKEN, GCRA, SLIDING, FIXED, LOG or LEAKY"
            ),
            SpecError::UnknownFailMode => f.write_str("FAILMODE must be OPEN, CLOSED or LOCAL"),
            SpecError::Cost => f.write_str("COST must be a non-negative integer"),
            SpecError::NeedsValue(option) => write!(f, "{option} needs a value"),
            SpecError::UnknownOption(word) => write!(f, "unknown option '{word}' for 'rl.check'"),
            SpecError::Arity => f.write_str("wrong number of arguments for 'rl.check' command"),
        }
    }
}

impl std::error::Error for SpecError {}

/// Why a period was refused: one byte, so that the period parser's result travels in
/// registers on the check path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeriodError {
    /// Not a number of seconds nor a duration with a unit.
    Format,
    /// Well formed, but too large to count in nanoseconds.
    Overflow,
}

impl From<PeriodError> for SpecError {
    fn from(e: PeriodError) -> SpecError {
        match e {
            PeriodError::Format => SpecError::Period,
            PeriodError::Overflow => SpecError::PeriodOverflow,
        }
    }
}

/// Parses an unsigned decimal with no sign, no spaces and no leading zeros.
pub fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 || (b.len() > 1 && b[0] == b'0') {
        return None;
    }
    // Up to 19 digits cannot overflow a u64: no checked arithmetic on the common path.
    let (fast, last) = if b.len() == 20 {
        b.split_at(19)
    } else {
        (b, &b[..0])
    };
    let mut n: u64 = 0;
    for &c in fast {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n * 10 + u64::from(d);
    }
    for &c in last {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(n)
}

/// Parses a count in 1..=i64::MAX (every count is replied as a RESP integer).
#[inline]
pub fn positive(arg: &[u8]) -> Option<u64> {
    parse_u64(arg).filter(|&n| n >= 1 && n <= i64::MAX as u64)
}

/// [`positive`], with the error naming the argument `name`.
pub fn count(arg: &[u8], name: &'static str) -> Result<u64, SpecError> {
    positive(arg).ok_or(SpecError::NotPositive(name))
}

/// Parses `period`: integer seconds, or an integer with a unit `ms`, `s`, `m`, `h` or `d`. The
/// number follows [`parse_u64`]'s rules (digits only, no leading zero). A number too large to
/// count in nanoseconds is [`PeriodError::Overflow`], not a format error.
///
/// One pass over the digits, then the unit: this runs on every check.
pub fn parse_period(arg: &[u8]) -> Result<Nanos, PeriodError> {
    let mut n: u64 = 0;
    let mut digits = 0;
    for &c in arg {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        // Up to 19 digits cannot overflow a u64: checked arithmetic only past them.
        n = if digits < 19 {
            n * 10 + u64::from(d)
        } else {
            n.checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(d)))
                .ok_or(PeriodError::Overflow)?
        };
        digits += 1;
    }
    if digits == 0 || (digits > 1 && arg[0] == b'0') {
        return Err(PeriodError::Format);
    }
    // Matched without allocating.
    let unit_ns: u64 = match &arg[digits..] {
        b"" | b"s" | b"S" => Nanos::PER_SEC,
        [m, s] if m.eq_ignore_ascii_case(&b'm') && s.eq_ignore_ascii_case(&b's') => Nanos::PER_MS,
        b"m" | b"M" => 60 * Nanos::PER_SEC,
        b"h" | b"H" => 3600 * Nanos::PER_SEC,
        b"d" | b"D" => 86_400 * Nanos::PER_SEC,
        _ => return Err(PeriodError::Format),
    };
    match n.checked_mul(unit_ns) {
        Some(0) => Err(PeriodError::Format),
        Some(ns) => Ok(Nanos(ns)),
        None => Err(PeriodError::Overflow),
    }
}

/// Parses an algorithm name (any case).
pub fn parse_algo(name: &[u8]) -> Result<Algo, SpecError> {
    Algo::parse(name).ok_or_else(|| SpecError::UnknownAlgo(String::from_utf8_lossy(name).into()))
}

/// Checks `limit`, `period`, `BURST` and `COST` against each other and the algorithm, and gives
/// the checked [`Params`]: every state the algorithms then compute stays inside [`MAX_SPAN`].
pub fn validate(
    algo: Algo,
    limit: u64,
    period: Nanos,
    burst: Option<u64>,
    cost: u64,
) -> Result<Params, SpecError> {
    let bucket = matches!(algo, Algo::Token | Algo::Gcra | Algo::Leaky);
    if burst.is_some() && !bucket {
        return Err(SpecError::BurstNotApplicable(algo));
    }
    let max = match algo {
        Algo::Log => LOG_LIMIT_MAX,
        Algo::Sliding => crate::sliding::SLIDING_LIMIT_MAX,
        _ => u64::MAX,
    };
    if limit > max {
        return Err(SpecError::LimitTooLarge { algo, max });
    }
    let capacity = burst.unwrap_or(limit);
    if horizon(algo, limit, period, capacity) > u128::from(MAX_SPAN.0) {
        return Err(SpecError::SpanTooLong { window: !bucket });
    }
    if cost > capacity {
        return Err(SpecError::CostExceedsCapacity { cost, capacity });
    }
    Ok(Params {
        limit,
        period,
        burst: capacity,
        cost,
    })
}

/// How long the state of one key can span: for the buckets, the time to refill `capacity`
/// units at one per ⌈period ÷ limit⌉; for the windows, two periods.
pub fn horizon(algo: Algo, limit: u64, period: Nanos, capacity: u64) -> u128 {
    match algo {
        Algo::Token | Algo::Gcra | Algo::Leaky => {
            u128::from(period.0.div_ceil(limit)) * u128::from(capacity)
        }
        Algo::Sliding | Algo::Fixed | Algo::Log => 2 * u128::from(period.0),
    }
}

/// `SPLIT k` needs a unit of the limit (and of the BURST) per sub-key: the sub-keys' shares sum
/// exactly to the whole, and none may be 0.
pub fn check_split(k: u64, limit: u64, burst: Option<u64>) -> Result<(), SpecError> {
    let capacity = burst.map_or(limit, |b| b.min(limit));
    if k > capacity {
        return Err(SpecError::SplitTooLarge {
            k,
            capacity,
            burst: burst.is_some_and(|b| b < limit),
        });
    }
    Ok(())
}

/// RL.CHECK's arguments after the key, as a node and the sidecar both read them:
/// `limit period [BURST n] [COST n] [ALGO a] [DRY] [FAILMODE m] [SPLIT k] [APPROX ms]`.
/// Parsing checks each word; [`CheckArgs::params`] checks them against each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckArgs {
    pub limit: u64,
    pub period: Nanos,
    pub burst: Option<u64>,
    pub cost: u64,
    pub algo: Algo,
    pub dry: bool,
    /// Gateway options: a node validates and ignores them, the sidecar acts on them.
    pub fail_mode: Option<FailMode>,
    pub split: Option<u64>,
    pub approx_ms: Option<u64>,
}

impl CheckArgs {
    pub fn parse<'a>(mut args: impl Iterator<Item = &'a [u8]>) -> Result<CheckArgs, SpecError> {
        let limit = count(args.next().ok_or(SpecError::Arity)?, "limit")?;
        let period = parse_period(args.next().ok_or(SpecError::Arity)?)?;
        let mut parsed = CheckArgs {
            limit,
            period,
            burst: None,
            cost: 1,
            algo: Algo::Token,
            dry: false,
            fail_mode: None,
            split: None,
            approx_ms: None,
        };
        while let Some(opt) = args.next() {
            let is = |name: &str| opt.eq_ignore_ascii_case(name.as_bytes());
            let mut value = |name: &'static str| args.next().ok_or(SpecError::NeedsValue(name));
            match () {
                _ if is("BURST") => parsed.burst = Some(count(value("BURST")?, "BURST")?),
                _ if is("COST") => {
                    parsed.cost = parse_u64(value("COST")?).ok_or(SpecError::Cost)?
                }
                _ if is("ALGO") => parsed.algo = parse_algo(value("ALGO")?)?,
                _ if is("DRY") => parsed.dry = true,
                _ if is("FAILMODE") => {
                    parsed.fail_mode = Some(FailMode::parse(value("FAILMODE")?)?)
                }
                _ if is("SPLIT") => parsed.split = Some(count(value("SPLIT")?, "SPLIT")?),
                _ if is("APPROX") => parsed.approx_ms = Some(count(value("APPROX")?, "APPROX")?),
                _ => {
                    return Err(SpecError::UnknownOption(
                        String::from_utf8_lossy(opt).into(),
                    ));
                }
            }
        }
        if let Some(k) = parsed.split {
            check_split(k, parsed.limit, parsed.burst)?;
        }
        Ok(parsed)
    }

    /// The checked parameters of the check these arguments ask for.
    pub fn params(&self) -> Result<Params, SpecError> {
        validate(self.algo, self.limit, self.period, self.burst, self.cost)
    }
}

/// What a gateway answers when the node cannot answer within the deadline (down, breaker open,
/// garbage, or just too slow).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FailMode {
    /// Allow: for low-risk reads, where an outage of the limiter must not become an outage.
    #[default]
    Open,
    /// Deny: for expensive or write routes.
    Closed,
    /// An in-process token bucket of the gateway's share (the rate ÷ gateways, and burst ÷
    /// gateways), started from what the node last said: the fleet as a whole stays near the
    /// limit while the node is away (`sluice-client`'s `local_bucket`).
    Local,
}

impl FailMode {
    pub fn parse(s: &[u8]) -> Result<FailMode, SpecError> {
        [
            ("open", FailMode::Open),
            ("closed", FailMode::Closed),
            ("local", FailMode::Local),
        ]
        .into_iter()
        .find(|(name, _)| s.eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, m)| m)
        .ok_or(SpecError::UnknownFailMode)
    }

    pub fn name(self) -> &'static str {
        match self {
            FailMode::Open => "open",
            FailMode::Closed => "closed",
            FailMode::Local => "local",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_parse_with_units_and_say_why_not() {
        assert_eq!(parse_period(b"10"), Ok(Nanos::from_secs(10)));
        assert_eq!(parse_period(b"500ms"), Ok(Nanos::from_millis(500)));
        assert_eq!(parse_period(b"2MS"), Ok(Nanos::from_millis(2)));
        assert_eq!(parse_period(b"1m"), Ok(Nanos::from_secs(60)));
        assert_eq!(parse_period(b"1h"), Ok(Nanos::from_secs(3600)));
        assert_eq!(parse_period(b"1d"), Ok(Nanos::from_secs(86_400)));
        for bad in [
            &b"0"[..],
            b"0ms",
            b"",
            b"ms",
            b"01",
            b"-1",
            b"1x",
            b"1.5",
            b" 1",
        ] {
            assert_eq!(parse_period(bad), Err(PeriodError::Format), "{bad:?}");
        }
        // Large but well formed: the accurate error, not the format one.
        for huge in [
            &b"99999999999"[..],
            b"18446744073709551616",
            b"999999999999999999999d",
        ] {
            assert_eq!(parse_period(huge), Err(PeriodError::Overflow), "{huge:?}");
        }
        assert!(
            parse_period(b"5000000000").is_ok(),
            "fits; validate refuses its span"
        );
    }

    #[test]
    fn validate_bounds_every_state() {
        assert_eq!(
            horizon(Algo::Token, 1000, Nanos::from_secs(86_400), 1000),
            86_400 * 1_000_000_000
        );
        let day = Nanos::from_secs(86_400);
        assert!(validate(Algo::Token, 5, day, Some(10), 10).is_ok());
        assert_eq!(
            validate(Algo::Token, 5, day, None, 6),
            Err(SpecError::CostExceedsCapacity {
                cost: 6,
                capacity: 5
            })
        );
        assert_eq!(
            validate(Algo::Sliding, 5, day, Some(1), 1),
            Err(SpecError::BurstNotApplicable(Algo::Sliding))
        );
        assert_eq!(
            validate(Algo::Fixed, 5, Nanos::from_secs(27_000 * 86_400), None, 1),
            Err(SpecError::SpanTooLong { window: true })
        );
        assert_eq!(
            validate(
                Algo::Token,
                1,
                Nanos::from_secs(1),
                Some(i64::MAX as u64),
                1
            ),
            Err(SpecError::SpanTooLong { window: false })
        );
        assert!(matches!(
            validate(Algo::Log, LOG_LIMIT_MAX + 1, day, None, 1),
            Err(SpecError::LimitTooLarge { .. })
        ));
    }

    #[test]
    fn counts_splits_and_names() {
        assert_eq!(count(b"9223372036854775807", "limit"), Ok(i64::MAX as u64));
        for bad in [&b"0"[..], b"9223372036854775808", b"-1", b"01", b""] {
            assert_eq!(count(bad, "limit"), Err(SpecError::NotPositive("limit")));
            assert_eq!(positive(bad), None);
        }
        assert!(check_split(10, 10, None).is_ok());
        assert_eq!(
            check_split(5, 10, Some(4)).unwrap_err().to_string(),
            "SPLIT 5 is more than the BURST 4: every sub-key needs at least 1"
        );
        assert_eq!(FailMode::parse(b"LOCAL"), Ok(FailMode::Local));
        assert_eq!(FailMode::parse(b"half"), Err(SpecError::UnknownFailMode));
        assert_eq!(parse_algo(b"sliding"), Ok(Algo::Sliding));
        assert!(
            parse_algo(b"magic")
                .unwrap_err()
                .to_string()
                .contains("'magic'")
        );
    }

    /// The one-pass parser against its definition: `parse_u64` of the leading digits, then the
    /// unit, then the product; over every prefix-and-unit shape a fuzzer would try.
    #[test]
    fn one_pass_period_parse_matches_its_definition() {
        fn reference(arg: &[u8]) -> Option<Nanos> {
            let digits = arg.iter().take_while(|c| c.is_ascii_digit()).count();
            let (number, unit) = arg.split_at(digits);
            let n = parse_u64(number)?;
            let unit_ns: u64 = match unit {
                b"" | b"s" | b"S" => Nanos::PER_SEC,
                b"ms" | b"MS" | b"mS" | b"Ms" => Nanos::PER_MS,
                b"m" | b"M" => 60 * Nanos::PER_SEC,
                b"h" | b"H" => 3600 * Nanos::PER_SEC,
                b"d" | b"D" => 86_400 * Nanos::PER_SEC,
                _ => return None,
            };
            let ns = n.checked_mul(unit_ns)?;
            (ns > 0).then_some(Nanos(ns))
        }
        let numbers = [
            "",
            "0",
            "1",
            "01",
            "7",
            "10",
            "99",
            "500",
            "86400",
            "4294967296",
            "18446744073",
            "18446744074",
            "9999999999999999999",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999",
            "123456789012345678901",
        ];
        let units = [
            "", "s", "S", "ms", "MS", "mS", "m", "M", "h", "H", "d", "D", "x", "sec", "1", " ",
        ];
        for n in numbers {
            for u in units {
                let arg = format!("{n}{u}");
                let got = parse_period(arg.as_bytes());
                assert_eq!(got.ok(), reference(arg.as_bytes()), "{arg:?}");
                // Refused for its size only when digits and unit are well formed.
                if got == Err(PeriodError::Overflow) {
                    assert!(n.len() > 1 && !n.starts_with('0'), "{arg:?}");
                }
            }
        }
        // The largest that fit: u64::MAX ns is 18446744073 s (and 18446744073709 ms).
        assert_eq!(
            parse_period(b"18446744073"),
            Ok(Nanos(18_446_744_073_000_000_000))
        );
        assert_eq!(parse_period(b"18446744074"), Err(PeriodError::Overflow));
    }
}
