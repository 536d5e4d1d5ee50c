//! The sorted-set commands that act on members: ZADD (NX XX GT LT CH INCR), ZINCRBY, ZREM,
//! ZCARD, ZSCORE, ZMSCORE, ZRANK and ZREVRANK (WITHSCORE, as Redis 7.2 has it), ZPOPMIN,
//! ZPOPMAX, ZRANDMEMBER and ZSCAN. The range commands are in `zrange`. Scores are replied in
//! Redis 7.0's `%.17g` (`float`).

use sluice_resp::reply;
use sluice_store::types::ZSet;

use super::args::KeyAnd;
use super::{Args, CmdError, Command, Ctx, float, sample};

fn not_float() -> CmdError {
    CmdError::msg("ERR value is not a valid float")
}

/// ZADD's flags.
#[derive(Clone, Copy, Debug, Default)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

#[derive(Debug)]
pub struct ZAdd<'a> {
    key: &'a [u8],
    flags: AddFlags,
    pairs: Vec<(f64, &'a [u8])>,
}

impl<'a> Command<'a> for ZAdd<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let mut flags = AddFlags::default();
        let rest: Vec<&[u8]> = args.rest().collect();
        let mut i = 0;
        while let Some(word) = rest.get(i) {
            let f = match word.to_ascii_lowercase().as_slice() {
                b"nx" => &mut flags.nx,
                b"xx" => &mut flags.xx,
                b"gt" => &mut flags.gt,
                b"lt" => &mut flags.lt,
                b"ch" => &mut flags.ch,
                b"incr" => &mut flags.incr,
                _ => break,
            };
            *f = true;
            i += 1;
        }
        let elements = &rest[i..];
        if elements.is_empty() || !elements.len().is_multiple_of(2) {
            return Err(CmdError::Syntax);
        }
        if flags.incr && elements.len() > 2 {
            return Err(CmdError::msg(
                "ERR INCR option supports a single increment-element pair",
            ));
        }
        if flags.nx && flags.xx {
            return Err(CmdError::msg(
                "ERR XX and NX options at the same time are not compatible",
            ));
        }
        if (flags.nx && (flags.gt || flags.lt)) || (flags.gt && flags.lt) {
            return Err(CmdError::msg(
                "ERR GT, LT, and/or NX options at the same time are not compatible",
            ));
        }
        let pairs = elements
            .chunks(2)
            .map(|p| Ok((float::parse(p[0]).ok_or_else(not_float)?, p[1])))
            .collect::<Result<_, CmdError>>()?;
        Ok(ZAdd { key, flags, pairs })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        zadd(ctx, self.key, self.flags, &self.pairs)
    }
}

/// What one ZADD pair did.
enum Added {
    New(f64),
    Updated(f64),
    Same(f64),
    Nothing,
}

fn add_one(z: &mut ZSet, flags: AddFlags, score: f64, member: &[u8]) -> Result<Added, CmdError> {
    match z.score(member) {
        Some(_) if flags.nx => Ok(Added::Nothing),
        Some(cur) => {
            let new = if flags.incr { cur + score } else { score };
            if new.is_nan() {
                return Err(CmdError::msg("ERR resulting score is not a number (NaN)"));
            }
            if (flags.gt && new <= cur) || (flags.lt && new >= cur) {
                return Ok(Added::Nothing);
            }
            if new == cur {
                return Ok(Added::Same(new));
            }
            z.insert(member, new);
            Ok(Added::Updated(new))
        }
        None if flags.xx => Ok(Added::Nothing),
        None => {
            z.insert(member, score);
            Ok(Added::New(score))
        }
    }
}

fn zadd(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    flags: AddFlags,
    pairs: &[(f64, &[u8])],
) -> Result<(), CmdError> {
    let outcome = ctx
        .shared
        .store
        .edit(key, ctx.now, !flags.xx, |z: &mut ZSet| {
            let (mut added, mut updated, mut last) = (0, 0, None);
            for &(score, member) in pairs {
                match add_one(z, flags, score, member) {
                    Err(e) => return (Err(e), added + updated > 0),
                    Ok(Added::New(s)) => (added, last) = (added + 1, Some(s)),
                    Ok(Added::Updated(s)) => (updated, last) = (updated + 1, Some(s)),
                    Ok(Added::Same(s)) => last = Some(s),
                    Ok(Added::Nothing) => last = None,
                }
            }
            (Ok((added, updated, last)), added + updated > 0)
        })?;
    let (added, updated, last) = match outcome {
        None => (0, 0, None),
        Some(r) => r?,
    };
    if flags.incr {
        match last {
            Some(s) => float::reply(ctx.out, ctx.session.proto, s),
            None => reply::null(ctx.out, ctx.session.proto),
        }
    } else {
        reply::integer(ctx.out, added + if flags.ch { updated } else { 0 });
    }
    Ok(())
}

#[derive(Debug)]
pub struct ZIncrBy<'a> {
    key: &'a [u8],
    by: f64,
    member: &'a [u8],
}

impl<'a> Command<'a> for ZIncrBy<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(ZIncrBy {
            key: args.key()?,
            by: float::parse(args.key()?).ok_or_else(not_float)?,
            member: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let flags = AddFlags {
            incr: true,
            ..AddFlags::default()
        };
        zadd(ctx, self.key, flags, &[(self.by, self.member)])
    }
}

#[derive(Debug)]
pub struct ZRem<'a>(KeyAnd<'a>);

impl<'a> Command<'a> for ZRem<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(ZRem(KeyAnd::parse(args)?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let KeyAnd { key, rest: members } = self.0;
        let n = ctx.shared.store.edit(key, ctx.now, false, |z: &mut ZSet| {
            let n = members.filter(|m| z.remove(m)).count();
            (n, n > 0)
        })?;
        reply::integer(ctx.out, n.unwrap_or(0) as i64);
        Ok(())
    }
}

/// `ZSCORE key member` and `ZMSCORE key member [member ...]` (`MANY`).
#[derive(Debug)]
pub struct ZScore<'a, const MANY: bool>(KeyAnd<'a>);

pub type ZScoreCmd<'a> = ZScore<'a, false>;
pub type ZMScore<'a> = ZScore<'a, true>;

impl<'a, const MANY: bool> Command<'a> for ZScore<'a, MANY> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(ZScore(KeyAnd::parse(args)?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (KeyAnd { key, rest: members }, proto, out) =
            (self.0, ctx.session.proto, &mut *ctx.out);
        ctx.shared.store.read(key, ctx.now, |z: Option<&ZSet>| {
            if MANY {
                reply::array(out, members.len());
            }
            for m in members {
                match z.and_then(|z| z.score(m)) {
                    Some(s) => float::reply(out, proto, s),
                    None => reply::null(out, proto),
                }
            }
        })?;
        Ok(())
    }
}

/// `ZRANK key member [WITHSCORE]` and `ZREVRANK` (`REV`).
#[derive(Debug)]
pub struct ZRank<'a, const REV: bool> {
    key: &'a [u8],
    member: &'a [u8],
    with_score: bool,
}

pub type ZRankCmd<'a> = ZRank<'a, false>;
pub type ZRevRank<'a> = ZRank<'a, true>;

impl<'a, const REV: bool> Command<'a> for ZRank<'a, REV> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let member = args.key()?;
        let with_score = match (args.next(), args.next()) {
            (None, _) => false,
            (Some(w), None) if w.eq_ignore_ascii_case(b"withscore") => true,
            (Some(_), None) => return Err(CmdError::Syntax),
            _ => return Err(CmdError::Arity),
        };
        Ok(ZRank {
            key,
            member,
            with_score,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (member, proto) = (self.member, ctx.session.proto);
        let found = ctx
            .shared
            .store
            .read(self.key, ctx.now, |z: Option<&ZSet>| {
                let z = z?;
                let rank = z.rank(member)?;
                let rank = if REV { z.len() - 1 - rank } else { rank };
                Some((rank, z.score(member)?))
            })?;
        match (found, self.with_score) {
            (None, false) => reply::null(ctx.out, proto),
            (None, true) => reply::null_array(ctx.out, proto),
            (Some((rank, _)), false) => reply::integer(ctx.out, rank as i64),
            (Some((rank, score)), true) => {
                reply::array(ctx.out, 2);
                reply::integer(ctx.out, rank as i64);
                float::reply(ctx.out, proto, score);
            }
        }
        Ok(())
    }
}

/// `ZPOPMIN key [count]` and `ZPOPMAX` (`MAX`).
#[derive(Debug)]
pub struct ZPop<'a, const MAX: bool> {
    key: &'a [u8],
    count: Option<usize>,
}

pub type ZPopMin<'a> = ZPop<'a, false>;
pub type ZPopMax<'a> = ZPop<'a, true>;

impl<'a, const MAX: bool> Command<'a> for ZPop<'a, MAX> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        if args.remaining() > 1 {
            return Err(CmdError::Syntax);
        }
        let count = match args.next() {
            None => None,
            Some(c) => match super::args::parse_i64(c) {
                Some(n) if n >= 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
                _ => return Err(CmdError::msg("ERR value is out of range, must be positive")),
            },
        };
        Ok(ZPop { key, count })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let count = self.count;
        let popped = ctx
            .shared
            .store
            .edit(self.key, ctx.now, false, |z: &mut ZSet| {
                let n = count.unwrap_or(1).min(z.len());
                let picked: Vec<(f64, Vec<u8>)> = if MAX {
                    z.iter()
                        .rev()
                        .take(n)
                        .map(|(s, m)| (s, m.to_vec()))
                        .collect()
                } else {
                    z.iter().take(n).map(|(s, m)| (s, m.to_vec())).collect()
                };
                for (_, m) in &picked {
                    z.remove(m);
                }
                let changed = !picked.is_empty();
                (picked, changed)
            })?;
        let popped = popped.unwrap_or_default();
        let proto = ctx.session.proto;
        let nested = count.is_some() && proto == reply::Proto::Resp3;
        reply::array(
            ctx.out,
            if nested {
                popped.len()
            } else {
                popped.len() * 2
            },
        );
        for (s, m) in &popped {
            if nested {
                reply::array(ctx.out, 2);
            }
            reply::bulk(ctx.out, m);
            float::reply(ctx.out, proto, *s);
        }
        Ok(())
    }
}

/// `ZRANDMEMBER key [count [WITHSCORES]]`.
#[derive(Debug)]
pub struct ZRandMember<'a> {
    key: &'a [u8],
    count: Option<i64>,
    scores: bool,
}

impl<'a> Command<'a> for ZRandMember<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let (count, scores) = super::hash::random_count(args)?;
        Ok(ZRandMember { key, count, scores })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (count, scores, proto) = (self.count, self.scores, ctx.session.proto);
        let out = &mut *ctx.out;
        ctx.shared
            .store
            .read(self.key, ctx.now, |z: Option<&ZSet>| {
                let all: Vec<(f64, &[u8])> = z.map(|z| z.iter().collect()).unwrap_or_default();
                let Some(count) = count else {
                    match all.get(sample::below(all.len().max(1))) {
                        Some((_, m)) => reply::bulk(out, m),
                        None => reply::null(out, proto),
                    }
                    return;
                };
                let n = sample::count(all.len(), count) as usize;
                let nested = scores && proto == reply::Proto::Resp3;
                reply::array(out, if scores && !nested { n * 2 } else { n });
                for i in sample::indexes(all.len(), count) {
                    let (s, m) = all[i];
                    if nested {
                        reply::array(out, 2);
                    }
                    reply::bulk(out, m);
                    if scores {
                        float::reply(out, proto, s);
                    }
                }
            })?;
        Ok(())
    }
}
