//! `SET key value [NX|XX] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]` — a plain string (counter) value.
//! Overwrites a key of any type, as Redis does. `+OK`, or nil when NX/XX prevented it.

use sluice_core::Nanos;
use sluice_resp::reply;
use sluice_store::{SetCond, SetTtl};

use super::args::parse_i64;
use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Set<'a> {
    key: &'a [u8],
    value: &'a [u8],
    cond: SetCond,
    ttl: Expiry,
}

/// The expiry as given; relative ones are resolved against the batch clock in `apply`.
#[derive(Debug, Clone, Copy)]
enum Expiry {
    None,
    Keep,
    RelativeMs(u64),
    AbsoluteMs(u64),
}

fn invalid_expire() -> CmdError {
    CmdError::msg("ERR invalid expire time in 'set' command")
}

/// The expiry option as written, its number not yet parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Ex,
    Px,
    ExAt,
    PxAt,
}

impl<'a> Command<'a> for Set<'a> {
    /// Options as Redis 7 reads them: any order, one repeated is fine (the last amount wins),
    /// NX with XX or two kinds of expiry is a syntax error, and the amount is parsed only once
    /// every option has, so a syntax error anywhere is reported before a bad number.
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let value = args.key()?;
        let mut cond = SetCond::Always;
        let mut keep = false;
        let mut expire: Option<(Unit, &[u8])> = None;
        while let Some(opt) = args.next() {
            let opt = opt.to_ascii_uppercase();
            let unit = match opt.as_slice() {
                b"NX" if cond != SetCond::Xx => {
                    cond = SetCond::Nx;
                    continue;
                }
                b"XX" if cond != SetCond::Nx => {
                    cond = SetCond::Xx;
                    continue;
                }
                b"KEEPTTL" if expire.is_none() => {
                    keep = true;
                    continue;
                }
                b"EX" => Unit::Ex,
                b"PX" => Unit::Px,
                b"EXAT" => Unit::ExAt,
                b"PXAT" => Unit::PxAt,
                _ => return Err(CmdError::Syntax),
            };
            if keep || expire.is_some_and(|(u, _)| u != unit) {
                return Err(CmdError::Syntax);
            }
            expire = Some((unit, args.required()?));
        }
        let ttl = match expire {
            None if keep => Expiry::Keep,
            None => Expiry::None,
            Some((unit, amount)) => {
                let n = parse_i64(amount).ok_or(CmdError::NotInteger)?;
                if n <= 0 {
                    return Err(invalid_expire());
                }
                let n = n as u64;
                let ms = if matches!(unit, Unit::Ex | Unit::ExAt) {
                    n.checked_mul(1000).ok_or_else(invalid_expire)?
                } else {
                    n
                };
                if matches!(unit, Unit::ExAt | Unit::PxAt) {
                    Expiry::AbsoluteMs(ms)
                } else {
                    Expiry::RelativeMs(ms)
                }
            }
        };
        Ok(Set {
            key,
            value,
            cond,
            ttl,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        // As Redis: the absolute expiry in ms must fit an i64.
        let fits = |at_ms: Option<u64>| at_ms.filter(|&ms| ms <= i64::MAX as u64);
        let ttl = match self.ttl {
            Expiry::None => SetTtl::Clear,
            Expiry::Keep => SetTtl::Keep,
            Expiry::RelativeMs(ms) => {
                fits(ctx.now.as_millis_floor().checked_add(ms)).ok_or_else(invalid_expire)?;
                SetTtl::At(ctx.now.saturating_add(Nanos::from_millis(ms)))
            }
            Expiry::AbsoluteMs(ms) => SetTtl::At(Nanos::from_millis(
                fits(Some(ms)).ok_or_else(invalid_expire)?,
            )),
        };
        if ctx
            .shared
            .store
            .try_set(self.key, self.value, self.cond, ttl, ctx.now)?
        {
            reply::simple(ctx.out, "OK");
        } else {
            reply::null(ctx.out, ctx.session.proto);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Config, Executor};

    fn run(e: &mut Executor, args: &[&str]) -> String {
        e.text_at(1_000_000, args)
    }

    /// What redis-server 7.0.15 answers to each (tests/tests/differential.rs found these).
    #[test]
    fn options_are_read_as_redis_reads_them() {
        let mut e = Executor::new(Config::default_for_tests());
        let syntax = "-ERR syntax error\r\n";
        // One option repeated is fine; the last amount wins.
        assert_eq!(
            run(&mut e, &["SET", "k", "1", "KEEPTTL", "keepttl"]),
            "+OK\r\n"
        );
        assert_eq!(run(&mut e, &["SET", "k", "1", "NX", "nx"]), "$-1\r\n");
        assert_eq!(run(&mut e, &["SET", "k", "1", "XX", "XX"]), "+OK\r\n");
        assert_eq!(
            run(&mut e, &["SET", "k", "1", "EX", "5", "ex", "9"]),
            "+OK\r\n"
        );
        assert_eq!(run(&mut e, &["PTTL", "k"]), ":9000\r\n");
        // Two conditions or two kinds of expiry are not.
        assert_eq!(run(&mut e, &["SET", "k", "1", "NX", "XX"]), syntax);
        assert_eq!(
            run(&mut e, &["SET", "k", "1", "EX", "5", "PX", "9"]),
            syntax
        );
        assert_eq!(
            run(&mut e, &["SET", "k", "1", "KEEPTTL", "EX", "5"]),
            syntax
        );
        assert_eq!(
            run(&mut e, &["SET", "k", "1", "EX", "5", "KEEPTTL"]),
            syntax
        );
        // The amount is checked after every option.
        assert_eq!(run(&mut e, &["SET", "k", "1", "EX", "x", "FOO"]), syntax);
        assert_eq!(
            run(&mut e, &["SET", "k", "1", "EX", "0", "NX", "XX"]),
            syntax
        );
        assert_eq!(
            run(&mut e, &["SET", "k", "1", "EX", "x", "NX"]),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(
            run(&mut e, &["SET", "k", "1", "PX", "-1", "EX", "3"]),
            syntax
        );
        assert_eq!(
            run(&mut e, &["SET", "k", "1", "PX", "-1", "PX", "3"]),
            "+OK\r\n"
        );
    }
}
