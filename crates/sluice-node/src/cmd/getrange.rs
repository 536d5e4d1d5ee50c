//! `GETRANGE key start end` (the bytes between two inclusive offsets, negative ones from the
//! end; an empty string if missing) and `SETRANGE key offset value` (overwrites from `offset`,
//! padding with zero bytes; the new length), WRONGTYPE on a limiter.

use std::borrow::Cow;

use sluice_resp::reply;
use sluice_store::{SetTtl, StrWrite};

use super::append::too_long;
use super::{Args, CmdError, Command, Ctx};

/// The bytes of `s` from `start` to `end`, inclusive, as Redis's `getrangeCommand` clamps them.
fn range(s: &[u8], start: i64, end: i64) -> &[u8] {
    let len = s.len() as i128;
    let (mut start, mut end) = (i128::from(start), i128::from(end));
    if start < 0 && end < 0 && start > end {
        return &[];
    }
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    let start = start.max(0);
    let end = end.max(0).min(len - 1);
    if start > end || len == 0 {
        return &[];
    }
    &s[start as usize..=end as usize]
}

#[derive(Debug)]
pub struct GetRange<'a> {
    key: &'a [u8],
    start: i64,
    end: i64,
}

impl<'a> Command<'a> for GetRange<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(GetRange {
            key: args.key()?,
            start: args.i64()?,
            end: args.i64()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (start, end) = (self.start, self.end);
        let bytes = ctx.shared.store.string(self.key, ctx.now, |old| {
            let s = old.map_or(&[][..], |(v, _)| v);
            Ok((StrWrite::Keep, range(s, start, end).to_vec()))
        })?;
        reply::bulk(ctx.out, &bytes);
        Ok(())
    }
}

#[derive(Debug)]
pub struct SetRange<'a> {
    key: &'a [u8],
    offset: i64,
    value: &'a [u8],
}

impl<'a> Command<'a> for SetRange<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let offset = args.i64()?;
        if offset < 0 {
            return Err(CmdError::msg("ERR offset is out of range"));
        }
        Ok(SetRange {
            key,
            offset,
            value: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (value, offset) = (self.value, self.offset as u64);
        let limit = ctx.shared.config.proto_max_bulk_len;
        let len = ctx.shared.store.string(self.key, ctx.now, |old| {
            let old_len = old.map_or(0, |(v, _)| v.len());
            // Setting nothing changes nothing: 0 for a missing key, else its length.
            if value.is_empty() {
                return Ok((StrWrite::Keep, Ok(old_len)));
            }
            if offset.saturating_add(value.len() as u64) > limit {
                return Ok((StrWrite::Keep, Err(too_long())));
            }
            let start = offset as usize;
            let mut s = old.map_or_else(Vec::new, |(v, _)| v.to_vec());
            if s.len() < start + value.len() {
                s.resize(start + value.len(), 0);
            }
            s[start..start + value.len()].copy_from_slice(value);
            let len = s.len();
            Ok((StrWrite::Put(Cow::Owned(s), SetTtl::Keep), Ok(len)))
        })??;
        reply::integer(ctx.out, len as i64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::range;

    #[test]
    fn ranges_clamp_as_redis_does() {
        let s = b"Hello";
        assert_eq!(range(s, 0, 3), b"Hell");
        assert_eq!(range(s, -3, -1), b"llo");
        assert_eq!(range(s, 0, -1), b"Hello");
        assert_eq!(range(s, 10, 100), b"");
        assert_eq!(range(s, -1, -5), b"");
        assert_eq!(range(s, -100, 1), b"He");
        assert_eq!(range(s, i64::MIN, i64::MAX), b"Hello");
        assert_eq!(range(b"", 0, -1), b"");
    }
}
