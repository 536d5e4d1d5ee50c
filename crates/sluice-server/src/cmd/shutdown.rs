//! `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE]` — stop accepting, finish the replies in flight, exit 0.
//! Nothing is persisted, so the save modifiers are accepted and mean nothing. On success there is
//! no reply: the connection closes, as with Redis.

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Shutdown;

impl Command<'_> for Shutdown {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        while let Some(opt) = args.next() {
            match opt.to_ascii_uppercase().as_slice() {
                b"NOSAVE" | b"SAVE" | b"NOW" | b"FORCE" => {}
                b"ABORT" => return Err(CmdError::msg("ERR No shutdown in progress.")),
                _ => return Err(CmdError::Syntax),
            }
        }
        Ok(Shutdown)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        crate::log("SHUTDOWN requested by a client");
        ctx.shared.shutdown();
        ctx.session.close = true;
        Ok(())
    }
}
