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

impl<'a> Command<'a> for Set<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let value = args.key()?;
        let mut cond = SetCond::Always;
        let mut ttl = Expiry::None;
        while let Some(opt) = args.next() {
            let opt = opt.to_ascii_uppercase();
            match opt.as_slice() {
                b"NX" if matches!(cond, SetCond::Always) => cond = SetCond::Nx,
                b"XX" if matches!(cond, SetCond::Always) => cond = SetCond::Xx,
                b"KEEPTTL" if matches!(ttl, Expiry::None) => ttl = Expiry::Keep,
                b"EX" | b"PX" | b"EXAT" | b"PXAT" if matches!(ttl, Expiry::None) => {
                    let n = parse_i64(args.required()?).ok_or(CmdError::NotInteger)?;
                    if n <= 0 {
                        return Err(invalid_expire());
                    }
                    let n = n as u64;
                    let secs = opt.as_slice() == b"EX" || opt.as_slice() == b"EXAT";
                    let ms = if secs {
                        n.checked_mul(1000).ok_or_else(invalid_expire)?
                    } else {
                        n
                    };
                    ttl = if opt.ends_with(b"AT") {
                        Expiry::AbsoluteMs(ms)
                    } else {
                        Expiry::RelativeMs(ms)
                    };
                }
                _ => return Err(CmdError::Syntax),
            }
        }
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
