//! `MSET key value [key value ...]` (every key set, TTLs cleared) and `MSETNX` (all or none: 1
//! if no key existed and all were set, else 0), every key's shard held for the call (see
//! `hold`), so no other command sees some keys written and not others.

use sluice_resp::reply;
use sluice_store::{SetCond, SetTtl};

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct MSet<'a, const NX: bool>(Vec<(&'a [u8], &'a [u8])>);

pub type MSetCmd<'a> = MSet<'a, false>;
pub type MSetNx<'a> = MSet<'a, true>;

impl<'a, const NX: bool> Command<'a> for MSet<'a, NX> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        if !args.remaining().is_multiple_of(2) {
            return Err(CmdError::Arity);
        }
        let mut pairs = Vec::with_capacity(args.remaining() / 2);
        while let (Some(k), Some(v)) = (args.next(), args.next()) {
            pairs.push((k, v));
        }
        Ok(MSet(pairs))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (store, now) = (&ctx.shared.store, ctx.now);
        let keys: Vec<&[u8]> = self.0.iter().map(|(k, _)| *k).collect();
        let _hold = super::hold::hold_keys(store, &keys);
        if NX && self.0.iter().any(|(k, _)| store.exists(k, now)) {
            reply::integer(ctx.out, 0);
            return Ok(());
        }
        for (k, v) in &self.0 {
            store.try_set(k, v, SetCond::Always, SetTtl::Clear, now)?;
        }
        if NX {
            reply::integer(ctx.out, 1);
        } else {
            reply::simple(ctx.out, "OK");
        }
        Ok(())
    }
}
