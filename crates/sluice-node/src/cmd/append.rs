//! `APPEND key value` (the new length; a missing key starts empty; the TTL is kept) and
//! `STRLEN key` (0 if missing), WRONGTYPE on a limiter.

use std::borrow::Cow;

use sluice_resp::reply;
use sluice_store::{SetTtl, StrWrite};

use super::{Args, CmdError, Command, Ctx};

/// Redis's refusal of a string that would outgrow `proto-max-bulk-len` (`checkStringLength`).
pub(super) fn too_long() -> CmdError {
    CmdError::msg("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
}

#[derive(Debug)]
pub struct Append<'a> {
    key: &'a [u8],
    value: &'a [u8],
}

impl<'a> Command<'a> for Append<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Append {
            key: args.key()?,
            value: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (value, limit) = (self.value, ctx.shared.config.proto_max_bulk_len);
        let len = ctx.shared.store.string(self.key, ctx.now, |old| {
            let old = old.map_or(&[][..], |(v, _)| v);
            let len = old.len() + value.len();
            if len as u64 > limit {
                return Ok((StrWrite::Keep, Err(too_long())));
            }
            let joined = [old, value].concat();
            Ok((StrWrite::Put(Cow::Owned(joined), SetTtl::Keep), Ok(len)))
        })??;
        reply::integer(ctx.out, len as i64);
        Ok(())
    }
}

#[derive(Debug)]
pub struct StrLen<'a>(&'a [u8]);

impl<'a> Command<'a> for StrLen<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(StrLen(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let len = ctx.shared.store.string(self.0, ctx.now, |old| {
            Ok((StrWrite::Keep, old.map_or(0, |(v, _)| v.len())))
        })?;
        reply::integer(ctx.out, len as i64);
        Ok(())
    }
}
