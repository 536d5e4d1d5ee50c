//! The hash commands: HSET, HMSET, HSETNX, HGET, HMGET, HEXISTS, HSTRLEN, HLEN, HGETALL, HKEYS,
//! HVALS, HDEL, HINCRBY, HINCRBYFLOAT, HRANDFIELD and HSCAN, with Redis 7.0's replies.

use sluice_resp::{ArgIter, reply};
use sluice_store::types::Hash;

use super::args::KeyAnd;
use super::{Args, CmdError, Command, Ctx, float, sample};

/// `HSET key field value [field value ...]` (the fields added) and `HMSET` (`OK`).
#[derive(Debug)]
pub struct HSet<'a, const OK: bool> {
    key: &'a [u8],
    pairs: ArgIter<'a>,
}

pub type HSetCmd<'a> = HSet<'a, false>;
pub type HMSet<'a> = HSet<'a, true>;

impl<'a, const OK: bool> Command<'a> for HSet<'a, OK> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        if !args.remaining().is_multiple_of(2) {
            return Err(CmdError::Arity);
        }
        Ok(HSet {
            key,
            pairs: args.rest(),
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let mut pairs = self.pairs;
        let added = ctx
            .shared
            .store
            .edit(self.key, ctx.now, true, |h: &mut Hash| {
                let mut added = 0;
                while let (Some(f), Some(v)) = (pairs.next(), pairs.next()) {
                    added += i64::from(h.set(f, v));
                }
                (added, true)
            })?;
        if OK {
            reply::simple(ctx.out, "OK");
        } else {
            reply::integer(ctx.out, added.unwrap_or(0));
        }
        Ok(())
    }
}

#[derive(Debug)]
pub struct HSetNx<'a> {
    key: &'a [u8],
    field: &'a [u8],
    value: &'a [u8],
}

impl<'a> Command<'a> for HSetNx<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(HSetNx {
            key: args.key()?,
            field: args.key()?,
            value: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (field, value) = (self.field, self.value);
        let set = ctx
            .shared
            .store
            .edit(self.key, ctx.now, true, |h: &mut Hash| {
                let new = h.get(field).is_none();
                if new {
                    h.set(field, value);
                }
                (new, new)
            })?;
        reply::integer(ctx.out, i64::from(set == Some(true)));
        Ok(())
    }
}

/// `HGET key field`, `HEXISTS key field` and `HSTRLEN key field`: one field, answered as `ANSWER`
/// says.
#[derive(Debug)]
pub struct HField<'a, const ANSWER: u8> {
    key: &'a [u8],
    field: &'a [u8],
}

const VALUE: u8 = 0;
const EXISTS: u8 = 1;
const STRLEN: u8 = 2;
pub type HGet<'a> = HField<'a, VALUE>;
pub type HExists<'a> = HField<'a, EXISTS>;
pub type HStrLen<'a> = HField<'a, STRLEN>;

impl<'a, const ANSWER: u8> Command<'a> for HField<'a, ANSWER> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(HField {
            key: args.key()?,
            field: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (field, proto, out) = (self.field, ctx.session.proto, &mut *ctx.out);
        ctx.shared
            .store
            .read(self.key, ctx.now, |h: Option<&Hash>| {
                let v = h.and_then(|h| h.get(field));
                match ANSWER {
                    VALUE => match v {
                        Some(v) => reply::bulk(out, v),
                        None => reply::null(out, proto),
                    },
                    EXISTS => reply::integer(out, i64::from(v.is_some())),
                    _ => reply::integer(out, v.map_or(0, <[u8]>::len) as i64),
                }
            })?;
        Ok(())
    }
}

#[derive(Debug)]
pub struct HMGet<'a>(KeyAnd<'a>);

impl<'a> Command<'a> for HMGet<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(HMGet(KeyAnd::parse(args)?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (KeyAnd { key, rest: fields }, proto, out) = (self.0, ctx.session.proto, &mut *ctx.out);
        ctx.shared.store.read(key, ctx.now, |h: Option<&Hash>| {
            reply::array(out, fields.len());
            for f in fields {
                match h.and_then(|h| h.get(f)) {
                    Some(v) => reply::bulk(out, v),
                    None => reply::null(out, proto),
                }
            }
        })?;
        Ok(())
    }
}

/// `HGETALL` (fields and values: a map in RESP3), `HKEYS` and `HVALS`.
#[derive(Debug)]
pub struct HAll<'a, const FIELDS: bool, const VALUES: bool>(&'a [u8]);

pub type HGetAll<'a> = HAll<'a, true, true>;
pub type HKeys<'a> = HAll<'a, true, false>;
pub type HVals<'a> = HAll<'a, false, true>;

impl<'a, const FIELDS: bool, const VALUES: bool> Command<'a> for HAll<'a, FIELDS, VALUES> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(HAll(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (proto, out) = (ctx.session.proto, &mut *ctx.out);
        ctx.shared.store.read(self.0, ctx.now, |h: Option<&Hash>| {
            let pairs = h.map(Hash::pairs).unwrap_or_default();
            if FIELDS && VALUES {
                reply::map(out, proto, pairs.len());
            } else {
                reply::array(out, pairs.len());
            }
            for (f, v) in pairs {
                if FIELDS {
                    reply::bulk(out, f);
                }
                if VALUES {
                    reply::bulk(out, v);
                }
            }
        })?;
        Ok(())
    }
}

#[derive(Debug)]
pub struct HDel<'a>(KeyAnd<'a>);

impl<'a> Command<'a> for HDel<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(HDel(KeyAnd::parse(args)?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let KeyAnd { key, rest: fields } = self.0;
        let n = ctx.shared.store.edit(key, ctx.now, false, |h: &mut Hash| {
            let n = fields.filter(|f| h.del(f)).count();
            (n, n > 0)
        })?;
        reply::integer(ctx.out, n.unwrap_or(0) as i64);
        Ok(())
    }
}

#[derive(Debug)]
pub struct HIncrBy<'a> {
    key: &'a [u8],
    field: &'a [u8],
    by: i64,
}

impl<'a> Command<'a> for HIncrBy<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(HIncrBy {
            key: args.key()?,
            field: args.key()?,
            by: args.i64()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (field, by) = (self.field, self.by);
        let n = ctx
            .shared
            .store
            .edit(self.key, ctx.now, true, |h: &mut Hash| {
                let old = match h.get(field) {
                    None => 0,
                    Some(v) => match super::args::parse_i64(v) {
                        Some(n) => n,
                        None => {
                            return (
                                Err(CmdError::msg("ERR hash value is not an integer")),
                                false,
                            );
                        }
                    },
                };
                match old.checked_add(by) {
                    None => (Err(CmdError::Overflow), false),
                    Some(n) => {
                        h.set(field, itoa::Buffer::new().format(n).as_bytes());
                        (Ok(n), true)
                    }
                }
            })?;
        reply::integer(ctx.out, n.expect("created")?);
        Ok(())
    }
}

#[derive(Debug)]
pub struct HIncrByFloat<'a> {
    key: &'a [u8],
    field: &'a [u8],
    by: float::LongDouble,
}

impl<'a> Command<'a> for HIncrByFloat<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let field = args.key()?;
        let by = float::LongDouble::parse(args.key()?)
            .ok_or_else(|| CmdError::msg("ERR value is not a valid float"))?;
        if !by.is_finite() {
            return Err(CmdError::msg("ERR value is NaN or Infinity"));
        }
        Ok(HIncrByFloat { key, field, by })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (field, by) = (self.field, self.by);
        let text = ctx
            .shared
            .store
            .edit(self.key, ctx.now, true, |h: &mut Hash| {
                let old = match h.get(field) {
                    None => float::LongDouble::ZERO,
                    Some(v) => match float::LongDouble::parse(v) {
                        Some(n) => n,
                        None => {
                            return (Err(CmdError::msg("ERR hash value is not a float")), false);
                        }
                    },
                };
                let Some(sum) = old.add(by) else {
                    return (
                        Err(CmdError::msg("ERR increment would produce NaN or Infinity")),
                        false,
                    );
                };
                let text = sum.human();
                h.set(field, text.as_bytes());
                (Ok(text), true)
            })?;
        reply::bulk(ctx.out, text.expect("created")?.as_bytes());
        Ok(())
    }
}

/// `HRANDFIELD key [count [WITHVALUES]]`.
#[derive(Debug)]
pub struct HRandField<'a> {
    key: &'a [u8],
    count: Option<i64>,
    values: bool,
}

impl<'a> Command<'a> for HRandField<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let (count, values) = random_count(args)?;
        Ok(HRandField { key, count, values })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (count, values, proto) = (self.count, self.values, ctx.session.proto);
        let out = &mut *ctx.out;
        ctx.shared
            .store
            .read(self.key, ctx.now, |h: Option<&Hash>| {
                let pairs = h.map(Hash::pairs).unwrap_or_default();
                let Some(count) = count else {
                    match pairs.get(sample::below(pairs.len().max(1))) {
                        Some((f, _)) => reply::bulk(out, f),
                        None => reply::null(out, proto),
                    }
                    return;
                };
                let n = sample::count(pairs.len(), count) as usize;
                let nested = values && proto == reply::Proto::Resp3;
                reply::array(out, if values && !nested { n * 2 } else { n });
                for i in sample::indexes(pairs.len(), count) {
                    let (f, v) = pairs[i];
                    if nested {
                        reply::array(out, 2);
                    }
                    reply::bulk(out, f);
                    if values {
                        reply::bulk(out, v);
                    }
                }
            })?;
        Ok(())
    }
}

/// The `[count [WITHVALUES|WITHSCORES]]` of HRANDFIELD and ZRANDMEMBER, as Redis 7.0 reads it.
pub(super) fn random_count(args: &mut Args<'_>) -> Result<(Option<i64>, bool), CmdError> {
    let Some(raw) = args.next() else {
        return Ok((None, false));
    };
    let count = super::args::parse_i64(raw)
        .filter(|&n| n != i64::MIN)
        .ok_or(CmdError::NotInteger)?;
    let with = match (args.next(), args.next()) {
        (None, _) => false,
        (Some(w), None)
            if w.eq_ignore_ascii_case(b"withvalues") || w.eq_ignore_ascii_case(b"withscores") =>
        {
            true
        }
        _ => return Err(CmdError::Syntax),
    };
    if with && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
        return Err(CmdError::msg("ERR value is out of range"));
    }
    Ok((Some(count), with))
}
