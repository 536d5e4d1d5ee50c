//! `ECHO message` — the message as a bulk string.

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Echo<'a>(&'a [u8]);

impl<'a> Command<'a> for Echo<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Echo(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        reply::bulk(ctx.out, self.0);
        Ok(())
    }
}
