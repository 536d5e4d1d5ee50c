//! `RL.CHECK key limit period [BURST n] [COST n] [ALGO name] [DRY]` — check and consume a rate
//! limit atomically.
//!
//! # Format
//! Reply (RESP2 and RESP3 alike): `*5 :allowed :limit :remaining :retry_after_ms :reset_after_ms`.
//! `period` is integer seconds or a duration with a unit (`500ms`, `10s`, `1m`, `1h`, `1d`).
//! Every argument is validated before the store is touched, so a bad one changes nothing and its
//! error names it.
//!
//! `FAILMODE open|closed|local`, `SPLIT k` and `APPROX ms` are gateway options (`sluice proxy`
//! acts on them and strips them): a node validates and ignores them, so a client can move between
//! a node and a sidecar unchanged.

use sluice_core::{Algo, CheckError, MAX_SPAN, Nanos, Params};
use sluice_resp::reply;
use sluice_store::StoreError;

use super::args::parse_u64;
use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct RlCheck<'a> {
    key: &'a [u8],
    algo: Algo,
    params: Params,
    dry: bool,
}

/// Parses `period`: integer seconds, or an integer with a unit `ms`, `s`, `m`, `h` or `d`. The
/// number follows [`parse_u64`]'s rules (digits only, no leading zero).
///
/// One pass over the digits, then the unit: this runs on every check.
pub fn parse_period(arg: &[u8]) -> Option<Nanos> {
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
            n.checked_mul(10)?.checked_add(u64::from(d))?
        };
        digits += 1;
    }
    if digits == 0 || (digits > 1 && arg[0] == b'0') {
        return None;
    }
    // Matched without allocating.
    let unit_ns: u64 = match &arg[digits..] {
        b"" | b"s" | b"S" => Nanos::PER_SEC,
        [m, s] if m.eq_ignore_ascii_case(&b'm') && s.eq_ignore_ascii_case(&b's') => Nanos::PER_MS,
        b"m" | b"M" => 60 * Nanos::PER_SEC,
        b"h" | b"H" => 3600 * Nanos::PER_SEC,
        b"d" | b"D" => 86_400 * Nanos::PER_SEC,
        _ => return None,
    };
    let ns = n.checked_mul(unit_ns)?;
    (ns > 0).then_some(Nanos(ns))
}

/// Parses a count in 1..=i64::MAX (every count is replied as a RESP integer).
pub(crate) fn positive(arg: &[u8], name: &str) -> Result<u64, CmdError> {
    match parse_u64(arg) {
        Some(n) if n >= 1 && n <= i64::MAX as u64 => Ok(n),
        _ => Err(CmdError::msg(format!(
            "ERR {name} must be a positive integer (at most 9223372036854775807)"
        ))),
    }
}

pub(super) fn value<'a>(args: &mut Args<'a>, option: &str) -> Result<&'a [u8], CmdError> {
    args.next()
        .ok_or_else(|| CmdError::msg(format!("ERR {option} needs a value")))
}

impl<'a> Command<'a> for RlCheck<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let limit = positive(args.key()?, "limit")?;
        let period = parse_period(args.key()?).ok_or_else(|| {
            CmdError::msg(
                "ERR period must be a positive number of seconds or a duration such as 500ms, 10s, 1m, 1h or 1d",
            )
        })?;
        let mut burst = None;
        let mut cost = 1;
        let mut algo = Algo::Token;
        let mut dry = false;
        let mut split = None;
        while let Some(opt) = args.next() {
            let is = |name: &str| opt.eq_ignore_ascii_case(name.as_bytes());
            match () {
                _ if is("BURST") => burst = Some(positive(value(args, "BURST")?, "BURST")?),
                _ if is("COST") => {
                    cost = parse_u64(value(args, "COST")?)
                        .ok_or_else(|| CmdError::msg("ERR COST must be a non-negative integer"))?;
                }
                _ if is("ALGO") => {
                    let name = value(args, "ALGO")?;
                    algo = Algo::parse(name).ok_or_else(|| {
                        CmdError::msg(format!(
                            "ERR unknown ALGO '{}'; expected TOKEN, GCRA, SLIDING, FIXED, LOG or LEAKY",
                            String::from_utf8_lossy(name)
                        ))
                    })?;
                }
                _ if is("DRY") => dry = true,
                // Gateway options: validated, then ignored (see the module docs).
                _ if is("FAILMODE") => {
                    if sluice_client::FailMode::parse(value(args, "FAILMODE")?).is_none() {
                        return Err(CmdError::msg("ERR FAILMODE must be OPEN, CLOSED or LOCAL"));
                    }
                }
                _ if is("SPLIT") => split = Some(positive(value(args, "SPLIT")?, "SPLIT")?),
                _ if is("APPROX") => {
                    positive(value(args, "APPROX")?, "APPROX")?;
                }
                _ => {
                    return Err(CmdError::msg(format!(
                        "ERR unknown option '{}' for 'rl.check'",
                        String::from_utf8_lossy(opt)
                    )));
                }
            }
        }
        if let Some(k) = split {
            sluice_client::split_fits(k, limit, burst).map_err(CmdError::msg)?;
        }
        Ok(RlCheck {
            key,
            algo,
            params: validate(algo, limit, period, burst, cost)?,
            dry,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        if ctx.shared.repl.is_readonly() && !self.dry && self.params.cost > 0 {
            // A cluster replica sends writes to its shard's primary, as MOVED.
            return Err(match &ctx.shared.cluster {
                Some(cluster) => cluster.moved(self.key).into_error(),
                None => CmdError::ReadOnly,
            });
        }
        let decision = ctx
            .shared
            .store
            .check(self.key, self.algo, &self.params, ctx.now, self.dry)
            .map_err(|e| match e {
                StoreError::Check(CheckError::CostExceedsCapacity) => {
                    cost_error(self.params.cost, self.params.burst)
                }
                StoreError::Check(CheckError::LimitTooLarge { max }) => CmdError::msg(format!(
                    "ERR limit for ALGO {} must be at most {max}",
                    self.algo.name()
                )),
                other => other.into(),
            })?;
        if !self.dry {
            let stats = ctx.shared.stats.slot(ctx.session.thread);
            stats.check(crate::stats::RuleId::UNNAMED, self.algo, &decision, false);
        }
        reply::int_array(
            ctx.out,
            &[
                i64::from(decision.allowed),
                clamp(decision.limit),
                clamp(decision.remaining),
                decision.retry_after_ms(),
                decision.reset_after_ms(),
            ],
        );
        Ok(())
    }
}

/// Checks `limit`, `period`, `BURST` and `COST` against each other and the algorithm, as
/// RL.CHECK does (named rules reuse it), and gives the checked [`Params`].
pub(crate) fn validate(
    algo: Algo,
    limit: u64,
    period: Nanos,
    burst: Option<u64>,
    cost: u64,
) -> Result<Params, CmdError> {
    let bucket = matches!(algo, Algo::Token | Algo::Gcra | Algo::Leaky);
    if burst.is_some() && !bucket {
        return Err(CmdError::msg(format!(
            "ERR BURST applies to ALGO TOKEN, GCRA and LEAKY only, not {}",
            algo.name()
        )));
    }
    let max_limit = match algo {
        Algo::Log => sluice_core::LOG_LIMIT_MAX,
        Algo::Sliding => sluice_core::sliding::SLIDING_LIMIT_MAX,
        _ => u64::MAX,
    };
    if limit > max_limit {
        return Err(limit_error(algo, max_limit));
    }
    let capacity = burst.unwrap_or(limit);
    if horizon(algo, limit, period, capacity) > u128::from(MAX_SPAN.0) {
        return Err(CmdError::msg(if bucket {
            "ERR period too long: BURST × period ÷ limit would span more than 146 years"
        } else {
            // A window's state spans the current window and the one before it.
            "ERR period too long: a window may span at most 73 years"
        }));
    }
    if cost > capacity {
        return Err(cost_error(cost, capacity));
    }
    Ok(Params {
        limit,
        period,
        burst: capacity,
        cost,
    })
}

pub(crate) fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// How long the state of one key can span: for the buckets, the time to refill `capacity`
/// units at one per ⌈period ÷ limit⌉; for the windows, two periods.
fn horizon(algo: Algo, limit: u64, period: Nanos, capacity: u64) -> u128 {
    match algo {
        Algo::Token | Algo::Gcra | Algo::Leaky => {
            u128::from(period.0.div_ceil(limit)) * u128::from(capacity)
        }
        Algo::Sliding | Algo::Fixed | Algo::Log => 2 * u128::from(period.0),
    }
}

fn limit_error(algo: Algo, max: u64) -> CmdError {
    CmdError::msg(format!(
        "ERR limit for ALGO {} must be at most {max}",
        algo.name()
    ))
}

pub(super) fn cost_error(cost: u64, capacity: u64) -> CmdError {
    CmdError::msg(format!(
        "ERR COST {cost} exceeds the capacity {capacity}: it could never be allowed"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn horizons_bound_every_state() {
        // A day's refill of a 1000/day bucket.
        assert_eq!(
            horizon(Algo::Token, 1000, Nanos::from_secs(86_400), 1000),
            86_400 * 1_000_000_000
        );
        // u64::MAX-sized arguments are caught before they reach an algorithm.
        assert!(
            horizon(Algo::Token, 1, Nanos::from_secs(1), i64::MAX as u64) > u128::from(MAX_SPAN.0)
        );
        assert!(horizon(Algo::Sliding, 5, Nanos::MAX, 5) > u128::from(MAX_SPAN.0));
    }

    #[test]
    fn periods_parse_with_units() {
        assert_eq!(parse_period(b"10"), Some(Nanos::from_secs(10)));
        assert_eq!(parse_period(b"500ms"), Some(Nanos::from_millis(500)));
        assert_eq!(parse_period(b"10s"), Some(Nanos::from_secs(10)));
        assert_eq!(parse_period(b"1m"), Some(Nanos::from_secs(60)));
        assert_eq!(parse_period(b"1h"), Some(Nanos::from_secs(3600)));
        assert_eq!(parse_period(b"1d"), Some(Nanos::from_secs(86_400)));
        assert_eq!(parse_period(b"2MS"), Some(Nanos::from_millis(2)));
        for bad in [
            &b"0"[..],
            b"0ms",
            b"",
            b"ms",
            b"-1",
            b"1.5",
            b"10x",
            b"1 s",
            b"99999999999999999999d",
            b"01",
            b"00s",
            b"18446744073709551616",
            b"184467440737095516150",
            b"18446744073709551615",
            b"18446744073709551ms",
        ] {
            assert_eq!(parse_period(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        // The largest that fit: u64::MAX ns is 18446744073 s (and 18446744073709 ms).
        assert_eq!(
            parse_period(b"18446744073"),
            Some(Nanos(18_446_744_073_000_000_000))
        );
        assert_eq!(parse_period(b"18446744074"), None);
        assert_eq!(
            parse_period(b"18446744073709ms"),
            Some(Nanos(18_446_744_073_709_000_000))
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
                assert_eq!(
                    parse_period(arg.as_bytes()),
                    reference(arg.as_bytes()),
                    "{arg:?}"
                );
            }
        }
    }
}
