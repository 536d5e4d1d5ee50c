//! `EXPIRE key seconds [NX|XX|GT|LT]`, `PEXPIRE key ms [NX|XX|GT|LT]`, and `EXPIREAT` /
//! `PEXPIREAT` with a Unix time instead — 1 if the timeout was set, 0 if the key is missing or
//! the condition refused it. A time in the past deletes the key.

use sluice_core::Nanos;
use sluice_resp::reply;
use sluice_store::Ttl;

use super::args::parse_i64;
use super::{Args, CmdError, Command, Ctx};

/// The conditions, as Redis keeps them: flags, since XX combines with GT or LT.
#[derive(Debug, Clone, Copy, Default)]
struct Cond {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

#[derive(Debug)]
struct ExpireArgs<'a> {
    key: &'a [u8],
    amount: i64,
    cond: Cond,
}

/// Reads the options before the amount, as Redis does: an unknown option is reported before a
/// conflict between known ones, and both before an amount that is not a number.
fn parse<'a>(args: &mut Args<'a>) -> Result<ExpireArgs<'a>, CmdError> {
    let key = args.key()?;
    let amount = args.key()?;
    let mut cond = Cond::default();
    while let Some(opt) = args.next() {
        match opt.to_ascii_uppercase().as_slice() {
            b"NX" => cond.nx = true,
            b"XX" => cond.xx = true,
            b"GT" => cond.gt = true,
            b"LT" => cond.lt = true,
            _ => {
                return Err(CmdError::msg(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(opt)
                )));
            }
        }
    }
    if cond.nx && (cond.xx || cond.gt || cond.lt) {
        return Err(CmdError::msg(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if cond.gt && cond.lt {
        return Err(CmdError::msg(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    let amount = parse_i64(amount).ok_or(CmdError::NotInteger)?;
    Ok(ExpireArgs { key, amount, cond })
}

/// The deadline `delta_ms` after `base`'s millisecond (its sub-millisecond part dropped, as Redis
/// counts in milliseconds); a deadline before the epoch is the epoch. None past `i64`
/// milliseconds. (A script's native makes the same.)
pub(crate) fn expire_deadline(base: Nanos, delta_ms: i64) -> Option<Nanos> {
    let at_ms = (base.as_millis_floor() as i64).checked_add(delta_ms)?;
    Some(Nanos::from_millis(at_ms.max(0) as u64))
}

/// `unit_ms`: 1000 for seconds, 1 for milliseconds; `relative`: the amount counts from now
/// (EXPIRE, PEXPIRE) rather than from the Unix epoch (EXPIREAT, PEXPIREAT).
fn apply(
    a: ExpireArgs<'_>,
    unit_ms: i64,
    relative: bool,
    command: &str,
    ctx: &mut Ctx<'_>,
) -> Result<(), CmdError> {
    let invalid = || CmdError::msg(format!("ERR invalid expire time in '{command}' command"));
    let delta_ms = a.amount.checked_mul(unit_ms).ok_or_else(invalid)?;
    let base = if relative { ctx.now } else { Nanos::ZERO };
    let at = expire_deadline(base, delta_ms).ok_or_else(invalid)?;
    let store = &ctx.shared.store;
    let current = store.ttl(a.key, ctx.now);
    let c = a.cond;
    let allowed = match current {
        Ttl::Missing => false,
        // A key with no expiry counts as an infinite TTL, as in Redis: LT sets one, GT never.
        Ttl::Persistent => !c.xx && !c.gt,
        Ttl::Remaining(left) => {
            let deadline = ctx.now.saturating_add(left);
            let refused = c.nx || (c.gt && at <= deadline) || (c.lt && at >= deadline);
            !refused
        }
    };
    let set = allowed && store.expire_at(a.key, at, ctx.now);
    reply::integer(ctx.out, i64::from(set));
    Ok(())
}

/// EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT: an amount in milliseconds or seconds, from now or
/// from the Unix epoch.
#[derive(Debug)]
pub struct ExpireOf<'a, const MILLIS: bool, const RELATIVE: bool>(ExpireArgs<'a>);

pub type Expire<'a> = ExpireOf<'a, false, true>;
pub type PExpire<'a> = ExpireOf<'a, true, true>;
pub type ExpireAt<'a> = ExpireOf<'a, false, false>;
pub type PExpireAt<'a> = ExpireOf<'a, true, false>;

impl<'a, const MILLIS: bool, const RELATIVE: bool> Command<'a> for ExpireOf<'a, MILLIS, RELATIVE> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        parse(args).map(ExpireOf)
    }
    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (unit_ms, name) = match (MILLIS, RELATIVE) {
            (false, true) => (1000, "expire"),
            (true, true) => (1, "pexpire"),
            (false, false) => (1000, "expireat"),
            (true, false) => (1, "pexpireat"),
        };
        apply(self.0, unit_ms, RELATIVE, name, ctx)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Config, Executor};

    fn run(e: &mut Executor, args: &[&str]) -> String {
        e.text_at(1_000_000, args)
    }

    /// What redis-server 7.0.15 answers to each (tests/tests/differential.rs found the order).
    #[test]
    fn options_are_read_before_the_amount_and_xx_combines() {
        let mut e = Executor::new(Config::default_for_tests());
        let both = "-ERR GT and LT options at the same time are not compatible\r\n";
        let nx = "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n";
        assert_eq!(run(&mut e, &["PEXPIRE", "k", "abc", "GT", "LT"]), both);
        assert_eq!(run(&mut e, &["EXPIRE", "k", "abc", "nx", "xx"]), nx);
        assert_eq!(
            run(&mut e, &["EXPIRE", "k", "abc", "NX", "GT", "BOGUS"]),
            "-ERR Unsupported option BOGUS\r\n"
        );
        assert_eq!(
            run(&mut e, &["EXPIRE", "k", "9223372036854775807", "FOO"]),
            "-ERR Unsupported option FOO\r\n"
        );
        assert_eq!(
            run(&mut e, &["EXPIRE", "k", "abc"]),
            "-ERR value is not an integer or out of range\r\n"
        );
        // XX with GT or LT: both conditions hold.
        run(&mut e, &["SET", "k", "1"]);
        assert_eq!(run(&mut e, &["EXPIRE", "k", "100", "XX", "GT"]), ":0\r\n");
        assert_eq!(run(&mut e, &["EXPIRE", "k", "100", "LT", "XX"]), ":0\r\n");
        assert_eq!(run(&mut e, &["EXPIRE", "k", "100", "LT"]), ":1\r\n");
        assert_eq!(run(&mut e, &["EXPIRE", "k", "200", "XX", "GT"]), ":1\r\n");
        assert_eq!(run(&mut e, &["EXPIRE", "k", "150", "XX", "GT"]), ":0\r\n");
        assert_eq!(run(&mut e, &["EXPIRE", "k", "150", "LT", "XX"]), ":1\r\n");
        assert_eq!(run(&mut e, &["EXPIRE", "k", "1", "NX", "NX"]), ":0\r\n");
        assert_eq!(run(&mut e, &["TTL", "k"]), ":150\r\n");
    }
}
