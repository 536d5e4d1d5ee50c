//! `TTL key` / `PTTL key` — time to live: -2 missing, -1 no expiry, else the remaining time;
//! `EXPIRETIME key` / `PEXPIRETIME key` — the same as a Unix time.
//! A limiter key's time to live is the time until it is back to its fresh state.

use sluice_resp::reply;
use sluice_store::Ttl as StoreTtl;

use super::{Args, CmdError, Command, Ctx};

/// `PTTL`'s answer: -2 missing, -1 no expiry, else the milliseconds left, rounded down. (A
/// script's native reads it so too.)
pub(crate) fn pttl(ttl: StoreTtl) -> i64 {
    match ttl {
        StoreTtl::Missing => -2,
        StoreTtl::Persistent => -1,
        StoreTtl::Remaining(left) => left.as_millis_floor() as i64,
    }
}

/// `absolute`: the deadline as a Unix time (EXPIRETIME) instead of the time left (TTL).
fn reply_ttl(ctx: &mut Ctx<'_>, key: &[u8], millis: bool, absolute: bool) {
    let ttl = ctx.shared.store.ttl(key, ctx.now);
    let answer = match ttl {
        StoreTtl::Missing | StoreTtl::Persistent => pttl(ttl),
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

/// TTL, PTTL, EXPIRETIME and PEXPIRETIME: in milliseconds or seconds, as the time left or as a
/// Unix time.
#[derive(Debug)]
pub struct TtlOf<'a, const MILLIS: bool, const ABSOLUTE: bool>(&'a [u8]);

pub type Ttl<'a> = TtlOf<'a, false, false>;
pub type PTtl<'a> = TtlOf<'a, true, false>;
pub type ExpireTime<'a> = TtlOf<'a, false, true>;
pub type PExpireTime<'a> = TtlOf<'a, true, true>;

impl<'a, const MILLIS: bool, const ABSOLUTE: bool> Command<'a> for TtlOf<'a, MILLIS, ABSOLUTE> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(TtlOf(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        reply_ttl(ctx, self.0, MILLIS, ABSOLUTE);
        Ok(())
    }
}
