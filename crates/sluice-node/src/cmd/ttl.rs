//! `TTL key` / `PTTL key` — time to live: -2 missing, -1 no expiry, else the remaining time.
//! A limiter key's time to live is the time until it is back to its fresh state.

use sluice_resp::reply;
use sluice_store::Ttl as StoreTtl;

use super::{Args, CmdError, Command, Ctx};

fn reply_ttl(ctx: &mut Ctx<'_>, key: &[u8], millis: bool) {
    let answer = match ctx.shared.store.ttl(key, ctx.now) {
        StoreTtl::Missing => -2,
        StoreTtl::Persistent => -1,
        // Redis rounds TTL to the nearest second and PTTL down to the millisecond.
        StoreTtl::Remaining(left) => {
            let ms = left.as_millis_floor();
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
        reply_ttl(ctx, self.0, false);
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
        reply_ttl(ctx, self.0, true);
        Ok(())
    }
}
