//! `TIME` — `[unix seconds, microseconds]` as bulk strings, from the server clock.

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Time;

impl Command<'_> for Time {
    fn parse(_args: &mut Args<'_>) -> Result<Self, CmdError> {
        Ok(Time)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let now = ctx.shared.clock.now().as_nanos();
        let secs = now / 1_000_000_000;
        let micros = (now % 1_000_000_000) / 1_000;
        reply::array(ctx.out, 2);
        reply::bulk(ctx.out, itoa::Buffer::new().format(secs).as_bytes());
        reply::bulk(ctx.out, itoa::Buffer::new().format(micros).as_bytes());
        Ok(())
    }
}
