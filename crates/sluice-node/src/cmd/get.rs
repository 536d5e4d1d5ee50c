//! `GET key` — a counter's value as a bulk string, nil if missing, WRONGTYPE on a limiter.

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Get<'a>(&'a [u8]);

impl<'a> Command<'a> for Get<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Get(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        match ctx.shared.store.get(self.0, ctx.now)? {
            Some(v) => reply::bulk(ctx.out, &v),
            None => reply::null(ctx.out, ctx.session.proto),
        }
        Ok(())
    }
}
