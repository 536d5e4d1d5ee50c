//! In-flight leases: how many requests of one key may run at once.
//!
//! # Format
//! - `RL.ACQUIRE key max ttl` → `*5 :allowed :max :in_flight :retry_after_ms lease_id`, where
//!   `lease_id` is an integer when allowed and nil when denied, and `retry_after_ms` is -1 when
//!   allowed, else the time until the earliest lease expires.
//! - `RL.RELEASE key lease_id` → `:1` released, `:0` unknown or already expired.
//! - `RL.RENEW key lease_id ttl` → `:1` renewed (it now expires `ttl` from now), `:0` unknown.
//!
//! `ttl` is a duration as RL.CHECK's `period` is (`30`, `500ms`, `10s`, `1m`), at most a day:
//! longer work renews. `max` is at most [`sluice_core::LEASE_MAX`]. A key holding leases answers
//! `WRONGTYPE` to the rate-limit commands and back. The state and its rules are in
//! [`sluice_core::lease`].

use sluice_core::Nanos;
use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx, parse_u64};

fn ttl(arg: &[u8]) -> Result<Nanos, CmdError> {
    sluice_core::lease::parse_ttl(arg).map_err(CmdError::msg)
}

fn lease_id(arg: &[u8]) -> Result<u64, CmdError> {
    parse_u64(arg).ok_or(CmdError::NotInteger)
}

/// `RL.ACQUIRE key max ttl`.
#[derive(Debug)]
pub struct RlAcquire<'a> {
    key: &'a [u8],
    max: u64,
    ttl: Nanos,
}

impl<'a> Command<'a> for RlAcquire<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let max = sluice_core::lease::parse_max(args.required()?).map_err(CmdError::msg)?;
        let ttl = ttl(args.required()?)?;
        args.finish()?;
        Ok(RlAcquire { key, max, ttl })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let now = ctx.now;
        let a = ctx.shared.store.limiter(self.key, now, |slot| {
            let (a, left) = sluice_core::acquire(slot, self.max, self.ttl, now)?;
            Ok((a, Some(left)))
        })?;
        reply::array(ctx.out, 5);
        reply::integer(ctx.out, i64::from(a.allowed));
        reply::integer(ctx.out, a.max as i64);
        reply::integer(ctx.out, a.in_flight as i64);
        reply::integer(ctx.out, a.retry_after_ms());
        match a.lease_id {
            Some(id) => reply::integer(ctx.out, i64::try_from(id).unwrap_or(i64::MAX)),
            None => reply::null(ctx.out, ctx.session.proto),
        }
        Ok(())
    }
}

/// `RL.RELEASE key lease_id`.
#[derive(Debug)]
pub struct RlRelease<'a> {
    key: &'a [u8],
    id: u64,
}

impl<'a> Command<'a> for RlRelease<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let id = lease_id(args.required()?)?;
        args.finish()?;
        Ok(RlRelease { key, id })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let now = ctx.now;
        let released = ctx.shared.store.limiter(self.key, now, |slot| {
            let (released, left) = sluice_core::release(slot, self.id, now)?;
            Ok((released, Some(left)))
        })?;
        reply::integer(ctx.out, i64::from(released));
        Ok(())
    }
}

/// `RL.RENEW key lease_id ttl`.
#[derive(Debug)]
pub struct RlRenew<'a> {
    key: &'a [u8],
    id: u64,
    ttl: Nanos,
}

impl<'a> Command<'a> for RlRenew<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let id = lease_id(args.required()?)?;
        let ttl = ttl(args.required()?)?;
        args.finish()?;
        Ok(RlRenew { key, id, ttl })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let now = ctx.now;
        let renewed = ctx.shared.store.limiter(self.key, now, |slot| {
            let (renewed, left) = sluice_core::renew(slot, self.id, self.ttl, now)?;
            Ok((renewed, Some(left)))
        })?;
        reply::integer(ctx.out, i64::from(renewed));
        Ok(())
    }
}
