//! `DBSIZE` — the exact number of live keys (buckets and counters).

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct DbSize;

impl Command<'_> for DbSize {
    fn parse(_args: &mut Args<'_>) -> Result<Self, CmdError> {
        Ok(DbSize)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let n = ctx.shared.store.len(ctx.now);
        reply::integer(ctx.out, n as i64);
        Ok(())
    }
}
