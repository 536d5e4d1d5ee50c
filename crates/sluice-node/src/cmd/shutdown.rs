//! `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE]` — stop accepting, finish the replies in flight, exit 0.
//! With `--dir` the server writes a snapshot as it stops unless `NOSAVE` is given (`SAVE` asks
//! for what happens anyway). On success there is no reply: the connection closes, as with Redis.
//!
//! While a script is busy (past `busy-reply-threshold`), `SHUTDOWN` without `NOSAVE` answers
//! `-BUSY`, as Redis's does; `SHUTDOWN NOSAVE` stops every script, written or not, at its next
//! look at its flags (a few thousand Lua instructions), so its worker thread ends and the node
//! exits without saving what the stopped scripts left half done.

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Shutdown {
    nosave: bool,
}

impl Command<'_> for Shutdown {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        let mut nosave = false;
        while let Some(opt) = args.next() {
            match opt.to_ascii_uppercase().as_slice() {
                b"NOSAVE" => nosave = true,
                b"SAVE" => nosave = false,
                b"NOW" | b"FORCE" => {}
                b"ABORT" => return Err(CmdError::msg("ERR No shutdown in progress.")),
                _ => return Err(CmdError::Syntax),
            }
        }
        Ok(Shutdown { nosave })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        if !self.nosave && crate::script::busy::any_busy() {
            return Err(CmdError::msg(super::script::BUSY));
        }
        sluice_log::log("SHUTDOWN requested by a client");
        if self.nosave {
            crate::script::busy::stop_all();
            ctx.shared
                .persist
                .skip_shutdown_save
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        ctx.shared.shutdown();
        ctx.session.close = true;
        Ok(())
    }
}
