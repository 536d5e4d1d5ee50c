//! `INCRBYFLOAT key increment`: the string at `key` read as a number, plus `increment`, both
//! as Redis 7.0 reads them (`strtold`), summed in x87 `long double` and written back in
//! `ld2string`'s human form (`%.17Lf`, trailing zeros cut); the reply is that text as a bulk
//! string. A missing key counts as 0; the TTL is kept.
//!
//! # Errors, in Redis's order
//!
//! - WRONGTYPE if the key holds a limiter or a collection (checked before the increment);
//! - `ERR value is not a valid float` if the stored string or the increment is not a number;
//! - `ERR increment would produce NaN or Infinity` if the sum is not finite (an `inf`
//!   increment included: unlike HINCRBYFLOAT, INCRBYFLOAT takes one and refuses the sum).

use std::borrow::Cow;

use sluice_resp::reply;
use sluice_store::{SetTtl, StrWrite};

use super::float::LongDouble;
use super::{Args, CmdError, Command, Ctx};

fn not_float() -> CmdError {
    CmdError::msg("ERR value is not a valid float")
}

#[derive(Debug)]
pub struct IncrByFloat<'a> {
    key: &'a [u8],
    /// Read only once the key's type is known: Redis answers WRONGTYPE before it looks at it.
    increment: &'a [u8],
}

impl<'a> Command<'a> for IncrByFloat<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(IncrByFloat {
            key: args.key()?,
            increment: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let increment = self.increment;
        let text = ctx.shared.store.string(self.key, ctx.now, |old| {
            let old = match old {
                None => Some(LongDouble::ZERO),
                Some((v, _)) => LongDouble::parse(v),
            };
            let Some((old, by)) = old.zip(LongDouble::parse(increment)) else {
                return Ok((StrWrite::Keep, Err(not_float())));
            };
            let Some(sum) = old.add(by) else {
                return Ok((
                    StrWrite::Keep,
                    Err(CmdError::msg("ERR increment would produce NaN or Infinity")),
                ));
            };
            let text = sum.human();
            let stored = Cow::Owned(text.clone().into_bytes());
            Ok((StrWrite::Put(stored, SetTtl::Keep), Ok(text)))
        })??;
        reply::bulk(ctx.out, text.as_bytes());
        Ok(())
    }
}
