//! `QUIT` — `+OK`, then the connection closes once the reply is written.

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Quit;

impl Command<'_> for Quit {
    fn parse(_args: &mut Args<'_>) -> Result<Self, CmdError> {
        Ok(Quit)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        reply::simple(ctx.out, "OK");
        ctx.session.close = true;
        Ok(())
    }
}
