//! `DEL key [key ...]` — how many of the keys existed and were removed.

use sluice_resp::ArgIter;
use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Del<'a>(ArgIter<'a>);

impl<'a> Command<'a> for Del<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Del(args.rest()))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let store = &ctx.shared.store;
        let removed = self.0.filter(|k| store.del(k, ctx.now)).count();
        reply::integer(ctx.out, removed as i64);
        Ok(())
    }
}
