//! `MGET key [key ...]` — each key's string, nil where a key is missing or holds a limiter (as
//! Redis answers nil for a key of another type).

use sluice_resp::ArgIter;
use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct MGet<'a>(ArgIter<'a>);

impl<'a> Command<'a> for MGet<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(MGet(args.rest()))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        reply::array(ctx.out, self.0.len());
        for key in self.0 {
            match ctx.shared.store.get(key, ctx.now) {
                Ok(Some(v)) => reply::bulk(ctx.out, &v),
                Ok(None) | Err(_) => reply::null(ctx.out, ctx.session.proto),
            }
        }
        Ok(())
    }
}
