//! `EXPIRE key seconds [NX|XX|GT|LT]`, `PEXPIRE key ms [NX|XX|GT|LT]` — 1 if the timeout was
//! set, 0 if the key is missing or the condition refused it. A time in the past deletes the key.

use sluice_core::Nanos;
use sluice_resp::reply;
use sluice_store::Ttl;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cond {
    Always,
    Nx,
    Xx,
    Gt,
    Lt,
}

#[derive(Debug)]
struct ExpireArgs<'a> {
    key: &'a [u8],
    amount: i64,
    cond: Cond,
}

fn parse<'a>(args: &mut Args<'a>) -> Result<ExpireArgs<'a>, CmdError> {
    let key = args.key()?;
    let amount = args.i64()?;
    let mut cond = Cond::Always;
    while let Some(opt) = args.next() {
        let next = match opt.to_ascii_uppercase().as_slice() {
            b"NX" => Cond::Nx,
            b"XX" => Cond::Xx,
            b"GT" => Cond::Gt,
            b"LT" => Cond::Lt,
            _ => {
                return Err(CmdError::msg(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(opt)
                )));
            }
        };
        if cond != Cond::Always && cond != next {
            return Err(CmdError::msg(
                if matches!((cond, next), (Cond::Gt, Cond::Lt) | (Cond::Lt, Cond::Gt)) {
                    "ERR GT and LT options at the same time are not compatible"
                } else {
                    "ERR NX and XX, GT or LT options at the same time are not compatible"
                },
            ));
        }
        cond = next;
    }
    Ok(ExpireArgs { key, amount, cond })
}

fn apply(
    a: ExpireArgs<'_>,
    unit_ms: i64,
    command: &str,
    ctx: &mut Ctx<'_>,
) -> Result<(), CmdError> {
    let invalid = || CmdError::msg(format!("ERR invalid expire time in '{command}' command"));
    let delta_ms = a.amount.checked_mul(unit_ms).ok_or_else(invalid)?;
    let now_ms = ctx.now.as_millis_floor() as i64;
    let at_ms = now_ms.checked_add(delta_ms).ok_or_else(invalid)?;
    let at = Nanos::from_millis(at_ms.max(0) as u64);
    let store = &ctx.shared.store;
    let current = store.ttl(a.key, ctx.now);
    let allowed = match (a.cond, current) {
        (_, Ttl::Missing) => false,
        (Cond::Always, _) => true,
        (Cond::Nx, t) => t == Ttl::Persistent,
        (Cond::Xx, t) => t != Ttl::Persistent,
        // A key with no expiry counts as an infinite TTL, as in Redis.
        (Cond::Gt, Ttl::Persistent) => false,
        (Cond::Lt, Ttl::Persistent) => true,
        (Cond::Gt, Ttl::Remaining(left)) => at > ctx.now.saturating_add(left),
        (Cond::Lt, Ttl::Remaining(left)) => at < ctx.now.saturating_add(left),
    };
    let set = allowed && store.expire_at(a.key, at, ctx.now);
    reply::integer(ctx.out, i64::from(set));
    Ok(())
}

#[derive(Debug)]
pub struct Expire<'a>(ExpireArgs<'a>);

impl<'a> Command<'a> for Expire<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        parse(args).map(Expire)
    }
    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        apply(self.0, 1000, "expire", ctx)
    }
}

#[derive(Debug)]
pub struct PExpire<'a>(ExpireArgs<'a>);

impl<'a> Command<'a> for PExpire<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        parse(args).map(PExpire)
    }
    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        apply(self.0, 1, "pexpire", ctx)
    }
}
