//! `TTL key` / `PTTL key` — time to live: -2 missing, -1 no expiry, else the remaining time;
//! `EXPIRETIME key` / `PEXPIRETIME key` — the same as a Unix time.
//! A limiter key's time to live is the time until it is back to its fresh state.

use sluice_resp::reply;
use sluice_store::Ttl as StoreTtl;

use super::{Args, CmdError, Command, Ctx};

/// `absolute`: the deadline as a Unix time (EXPIRETIME) instead of the time left (TTL).
fn reply_ttl(ctx: &mut Ctx<'_>, key: &[u8], millis: bool, absolute: bool) {
    let answer = match ctx.shared.store.ttl(key, ctx.now) {
        StoreTtl::Missing => -2,
        StoreTtl::Persistent => -1,
        // Redis rounds to the nearest second, and down to the millisecond.
        StoreTtl::Remaining(left) => {
            let ms = if absolute {
                ctx.now.saturating_add(left).as_millis_floor()
            } else {
                left.as_millis_floor()
            };
            (if millis { ms } else { (ms + 500) / 1000 }) as i64
        }
    };
    reply::integer(ctx.out, answer);
}

#[derive(Debug)]
pub struct Ttl<'a>(&'a [u8]);

impl<'a> Command<'a> for Ttl<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Ttl(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        reply_ttl(ctx, self.0, false, false);
        Ok(())
    }
}

#[derive(Debug)]
pub struct PTtl<'a>(&'a [u8]);

impl<'a> Command<'a> for PTtl<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(PTtl(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        reply_ttl(ctx, self.0, true, false);
        Ok(())
    }
}

#[derive(Debug)]
pub struct ExpireTime<'a>(&'a [u8]);

impl<'a> Command<'a> for ExpireTime<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(ExpireTime(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        reply_ttl(ctx, self.0, false, true);
        Ok(())
    }
}

#[derive(Debug)]
pub struct PExpireTime<'a>(&'a [u8]);

impl<'a> Command<'a> for PExpireTime<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(PExpireTime(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        reply_ttl(ctx, self.0, true, true);
        Ok(())
    }
}
