//! `PING [message]` — `+PONG`, or the message as a bulk string.

use sluice_resp::reply::{self, Proto};

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Ping<'a>(Option<&'a [u8]>);

impl<'a> Command<'a> for Ping<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let message = args.next();
        if !args.is_empty() {
            return Err(CmdError::Arity);
        }
        Ok(Ping(message))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        // A subscribed RESP2 connection gets a message-shaped pong, as Redis sends.
        if ctx.session.proto == Proto::Resp2 && ctx.session.subscribed() {
            reply::array(ctx.out, 2);
            reply::bulk(ctx.out, b"pong");
            reply::bulk(ctx.out, self.0.unwrap_or_default());
            return Ok(());
        }
        match self.0 {
            None => reply::simple(ctx.out, "PONG"),
            Some(m) => reply::bulk(ctx.out, m),
        }
        Ok(())
    }
}
