//! `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]` — a plain string value.
//! Overwrites a key of any type, as Redis does (but with GET, only a string). `+OK`, or nil
//! when NX/XX prevented it; with GET, the old value (nil if none).
//!
//! The option parser and the expiry arithmetic here serve SET, GETEX, SETEX and PSETEX alike.

use std::borrow::Cow;

use sluice_core::Nanos;
use sluice_resp::reply;
use sluice_store::{SetCond, SetTtl, StrWrite};

use super::args::parse_i64;
use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Set<'a> {
    key: &'a [u8],
    value: &'a [u8],
    opts: Options<'a>,
}

/// An expiry option as written, its number not yet parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unit {
    Ex,
    Px,
    ExAt,
    PxAt,
}

/// The options of SET (or GETEX, which takes the expiry ones and PERSIST), as written.
#[derive(Debug, Clone, Copy)]
pub(super) struct Options<'a> {
    pub cond: SetCond,
    pub get: bool,
    pub keep: bool,
    pub persist: bool,
    pub expire: Option<(Unit, &'a [u8])>,
}

/// Which command's options: SET's, or GETEX's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum For {
    Set,
    GetEx,
}

/// Options as Redis 7 reads them (`parseExtendedStringArgumentsOrReply`): any order, one
/// repeated is fine (the last amount wins), NX with XX or two kinds of expiry is a syntax
/// error, and the amount is parsed only later, so a syntax error anywhere comes first.
pub(super) fn parse_options<'a>(args: &mut Args<'a>, which: For) -> Result<Options<'a>, CmdError> {
    let mut o = Options {
        cond: SetCond::Always,
        get: false,
        keep: false,
        persist: false,
        expire: None,
    };
    let set = which == For::Set;
    while let Some(opt) = args.next() {
        // Upper-cased on the stack: every option is at most 7 bytes, and a longer word is none.
        let mut buf = [0u8; 8];
        let word: &[u8] = match buf.get_mut(..opt.len()) {
            Some(word) => {
                word.copy_from_slice(opt);
                word.make_ascii_uppercase();
                word
            }
            None => b"",
        };
        let unit = match word {
            b"NX" if set && o.cond != SetCond::Xx => {
                o.cond = SetCond::Nx;
                continue;
            }
            b"XX" if set && o.cond != SetCond::Nx => {
                o.cond = SetCond::Xx;
                continue;
            }
            b"GET" if set => {
                o.get = true;
                continue;
            }
            b"KEEPTTL" if set && o.expire.is_none() => {
                o.keep = true;
                continue;
            }
            b"PERSIST" if !set && o.expire.is_none() => {
                o.persist = true;
                continue;
            }
            b"EX" => Unit::Ex,
            b"PX" => Unit::Px,
            b"EXAT" => Unit::ExAt,
            b"PXAT" => Unit::PxAt,
            _ => return Err(CmdError::Syntax),
        };
        if o.keep || o.persist || o.expire.is_some_and(|(u, _)| u != unit) {
            return Err(CmdError::Syntax);
        }
        o.expire = Some((unit, args.required()?));
    }
    Ok(o)
}

/// The deadline an expiry option sets, with Redis's errors (`getExpireMillisecondsOrReply`):
/// not a number; zero, negative, or past an i64 of milliseconds once made absolute.
/// A relative `SET` expiry of `ms` (`PX ms`, `EX ms/1000`): it keeps the clock's
/// sub-millisecond part, as the batch clock has it. (A script's native makes the same.)
pub(crate) fn set_deadline(now: Nanos, ms: u64) -> Nanos {
    now.saturating_add(Nanos::from_millis(ms))
}

pub(super) fn deadline(
    unit: Unit,
    amount: &[u8],
    now: Nanos,
    command: &str,
) -> Result<Nanos, CmdError> {
    let invalid = || CmdError::msg(format!("ERR invalid expire time in '{command}' command"));
    let n = parse_i64(amount).ok_or(CmdError::NotInteger)?;
    if n <= 0 {
        return Err(invalid());
    }
    let ms = match unit {
        Unit::Ex | Unit::ExAt => n.checked_mul(1000).ok_or_else(invalid)?,
        Unit::Px | Unit::PxAt => n,
    };
    let at_ms = match unit {
        Unit::Ex | Unit::Px => (now.as_millis_floor() as i64)
            .checked_add(ms)
            .ok_or_else(invalid)?,
        Unit::ExAt | Unit::PxAt => ms,
    };
    Ok(match unit {
        Unit::Ex | Unit::Px => set_deadline(now, ms as u64),
        Unit::ExAt | Unit::PxAt => Nanos::from_millis(at_ms as u64),
    })
}

impl<'a> Command<'a> for Set<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let value = args.key()?;
        let opts = parse_options(args, For::Set)?;
        // SET parses the amount before it looks at the key.
        if let Some((_, amount)) = opts.expire {
            parse_i64(amount).ok_or(CmdError::NotInteger)?;
        }
        Ok(Set { key, value, opts })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let o = self.opts;
        let ttl = match o.expire {
            None if o.keep => SetTtl::Keep,
            None => SetTtl::Clear,
            Some((unit, amount)) => SetTtl::At(deadline(unit, amount, ctx.now, "set")?),
        };
        if o.get {
            let value = self.value;
            let old = ctx.shared.store.string(self.key, ctx.now, |old| {
                let write = match (o.cond, old.is_some()) {
                    (SetCond::Nx, true) | (SetCond::Xx, false) => StrWrite::Keep,
                    _ => StrWrite::Put(Cow::Borrowed(value), ttl),
                };
                Ok((write, old.map(|(v, _)| v.to_vec())))
            })?;
            match old {
                Some(v) => reply::bulk(ctx.out, &v),
                None => reply::null(ctx.out, ctx.session.proto),
            }
            return Ok(());
        }
        if ctx
            .shared
            .store
            .try_set(self.key, self.value, o.cond, ttl, ctx.now)?
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
