//! `LLEN`, `HLEN`, `SCARD` and `ZCARD`: a collection's size, 0 for a missing key, WRONGTYPE for
//! a key of another type. One command over the collection type.

use std::marker::PhantomData;

use sluice_resp::reply;
use sluice_store::Collection;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Card<'a, T>(&'a [u8], PhantomData<T>);

pub type LLen<'a> = Card<'a, sluice_store::types::List>;
pub type HLen<'a> = Card<'a, sluice_store::types::Hash>;
pub type SCard<'a> = Card<'a, sluice_store::types::Set>;
pub type ZCard<'a> = Card<'a, sluice_store::types::ZSet>;

impl<'a, T: Collection> Command<'a> for Card<'a, T> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Card(args.key()?, PhantomData))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let n = ctx
            .shared
            .store
            .read(self.0, ctx.now, |c: Option<&T>| c.map_or(0, T::len))?;
        reply::integer(ctx.out, n as i64);
        Ok(())
    }
}
