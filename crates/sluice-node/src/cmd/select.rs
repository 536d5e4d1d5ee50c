//! `SELECT index` — only database 0 exists, as in Redis Cluster.

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Select;

impl Command<'_> for Select {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        match args.i64()? {
            0 => Ok(Select),
            _ => Err(CmdError::msg("ERR DB index is out of range")),
        }
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}
