//! `GETSET key value`, `GETDEL key`, `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]` — a string
//! read and changed in one step: the old value (nil if missing), WRONGTYPE on a limiter.

use std::borrow::Cow;

use sluice_resp::reply;
use sluice_store::{SetTtl, StrWrite};

use super::set::{For, Options, deadline, parse_options};
use super::{Args, CmdError, Command, Ctx};

/// Replies with the old value, or nil.
fn reply_old(ctx: &mut Ctx<'_>, old: Option<Vec<u8>>) {
    match old {
        Some(v) => reply::bulk(ctx.out, &v),
        None => reply::null(ctx.out, ctx.session.proto),
    }
}

#[derive(Debug)]
pub struct GetSet<'a> {
    key: &'a [u8],
    value: &'a [u8],
}

impl<'a> Command<'a> for GetSet<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(GetSet {
            key: args.key()?,
            value: args.key()?,
        })
    }

    /// As `SET key value GET`: the TTL is cleared.
    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let value = self.value;
        let old = ctx.shared.store.string(self.key, ctx.now, |old| {
            let write = StrWrite::Put(Cow::Borrowed(value), SetTtl::Clear);
            Ok((write, old.map(|(v, _)| v.to_vec())))
        })?;
        reply_old(ctx, old);
        Ok(())
    }
}

#[derive(Debug)]
pub struct GetDel<'a>(&'a [u8]);

impl<'a> Command<'a> for GetDel<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(GetDel(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let old = ctx.shared.store.string(self.0, ctx.now, |old| {
            Ok((StrWrite::Delete, old.map(|(v, _)| v.to_vec())))
        })?;
        reply_old(ctx, old);
        Ok(())
    }
}

#[derive(Debug)]
pub struct GetEx<'a> {
    key: &'a [u8],
    opts: Options<'a>,
}

impl<'a> Command<'a> for GetEx<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(GetEx {
            key: args.key()?,
            opts: parse_options(args, For::GetEx)?,
        })
    }

    /// As Redis: a missing key answers nil before the amount is read; a bad amount on a string
    /// is an error and changes nothing; a deadline already past deletes the key after the reply.
    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (o, now) = (self.opts, ctx.now);
        let got = ctx.shared.store.string(self.key, now, |old| {
            let Some((value, _)) = old else {
                return Ok((StrWrite::Keep, Ok(None)));
            };
            let write = match o.expire {
                Some((unit, amount)) => match deadline(unit, amount, now, "getex") {
                    Ok(at) => StrWrite::Expire(SetTtl::At(at)),
                    Err(e) => return Ok((StrWrite::Keep, Err(e))),
                },
                None if o.persist => StrWrite::Expire(SetTtl::Clear),
                None => StrWrite::Keep,
            };
            Ok((write, Ok(Some(value.to_vec()))))
        })?;
        reply_old(ctx, got?);
        Ok(())
    }
}
