//! `SETNX key value` (1 if set, 0 if the key existed), `SETEX key seconds value` and
//! `PSETEX key milliseconds value` (`+OK`; SET with NX, EX or PX, with those commands' own
//! replies and error names).

use sluice_resp::reply;
use sluice_store::{SetCond, SetTtl};

use super::set::{Unit, deadline};
use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct SetNx<'a> {
    key: &'a [u8],
    value: &'a [u8],
}

impl<'a> Command<'a> for SetNx<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(SetNx {
            key: args.key()?,
            value: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let set =
            ctx.shared
                .store
                .try_set(self.key, self.value, SetCond::Nx, SetTtl::Clear, ctx.now)?;
        reply::integer(ctx.out, i64::from(set));
        Ok(())
    }
}

/// SETEX and PSETEX: the key, the amount as written, the value.
#[derive(Debug)]
pub struct SetEx<'a, const MILLIS: bool> {
    key: &'a [u8],
    amount: &'a [u8],
    value: &'a [u8],
}

pub type SetExSecs<'a> = SetEx<'a, false>;
pub type PSetEx<'a> = SetEx<'a, true>;

impl<'a, const MILLIS: bool> Command<'a> for SetEx<'a, MILLIS> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(SetEx {
            key: args.key()?,
            amount: args.key()?,
            value: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (unit, name) = if MILLIS {
            (Unit::Px, "psetex")
        } else {
            (Unit::Ex, "setex")
        };
        let at = deadline(unit, self.amount, ctx.now, name)?;
        ctx.shared.store.try_set(
            self.key,
            self.value,
            SetCond::Always,
            SetTtl::At(at),
            ctx.now,
        )?;
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}
