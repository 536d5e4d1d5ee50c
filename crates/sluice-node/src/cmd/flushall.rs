//! `FLUSHALL [ASYNC|SYNC]` and `FLUSHDB [ASYNC|SYNC]` — drop every key (one database), and
//! every lease of tokens (`RL.LEASE`).

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct FlushAll;

impl Command<'_> for FlushAll {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        if let Some(mode) = args.next()
            && !(mode.eq_ignore_ascii_case(b"ASYNC") || mode.eq_ignore_ascii_case(b"SYNC"))
        {
            return Err(CmdError::Syntax);
        }
        args.finish()?;
        Ok(FlushAll)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        ctx.shared.store.flush();
        ctx.shared.token_leases.clear();
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}
