//! `INCR key`, `DECR key`, `INCRBY key n`, `DECRBY key n` — integer counters with Redis's
//! errors (not an integer, overflow, WRONGTYPE on a limiter). The TTL is kept.

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

fn incr(ctx: &mut Ctx<'_>, key: &[u8], delta: i64) -> Result<(), CmdError> {
    let value = ctx.shared.store.incr_by(key, delta, ctx.now)?;
    reply::integer(ctx.out, value);
    Ok(())
}

#[derive(Debug)]
pub struct Incr<'a>(&'a [u8]);

impl<'a> Command<'a> for Incr<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Incr(args.key()?))
    }
    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        incr(ctx, self.0, 1)
    }
}

#[derive(Debug)]
pub struct Decr<'a>(&'a [u8]);

impl<'a> Command<'a> for Decr<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Decr(args.key()?))
    }
    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        incr(ctx, self.0, -1)
    }
}

#[derive(Debug)]
pub struct IncrBy<'a>(&'a [u8], i64);

impl<'a> Command<'a> for IncrBy<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(IncrBy(args.key()?, args.i64()?))
    }
    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        incr(ctx, self.0, self.1)
    }
}

#[derive(Debug)]
pub struct DecrBy<'a>(&'a [u8], i64);

impl<'a> Command<'a> for DecrBy<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        // Redis refuses to negate i64::MIN rather than overflow.
        let delta = args
            .i64()?
            .checked_neg()
            .ok_or_else(|| CmdError::msg("ERR decrement would overflow"))?;
        Ok(DecrBy(key, delta))
    }
    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        incr(ctx, self.0, self.1)
    }
}
