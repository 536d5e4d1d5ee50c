//! `EXISTS key [key ...]` — how many of the keys exist (a key named twice counts twice); also
//! `TOUCH key [key ...]`, which answers the same (no access clock is kept, so nothing else
//! changes).

use sluice_resp::ArgIter;
use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Exists<'a>(ArgIter<'a>);

impl<'a> Command<'a> for Exists<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Exists(args.rest()))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let store = &ctx.shared.store;
        let found = self.0.filter(|k| store.exists(k, ctx.now)).count();
        reply::integer(ctx.out, found as i64);
        Ok(())
    }
}
