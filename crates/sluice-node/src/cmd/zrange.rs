//! The sorted-set range commands: ZRANGE in every form (BYSCORE BYLEX REV LIMIT WITHSCORES),
//! ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX, ZREVRANGE, ZRANGESTORE, ZCOUNT,
//! ZLEXCOUNT, ZREMRANGEBYSCORE, ZREMRANGEBYRANK and ZREMRANGEBYLEX. One parser reads every
//! form's options as Redis 7.0's `zrangeGenericCommand` does, and one selection walks a set as
//! its listpack code does (so even lex ranges over mixed scores pick what Redis picks).

use sluice_resp::reply::{self, Proto};
use sluice_store::types::ZSet;

use super::{Args, CmdError, Command, Ctx, float};

/// A score bound: the value and whether it is excluded (`(`).
#[derive(Clone, Copy, Debug)]
struct ScoreBound(f64, bool);

/// A lex bound: `-`, `+`, `[x` or `(x`.
#[derive(Clone, Debug)]
enum LexBound<'a> {
    Min,
    Max,
    Incl(&'a [u8]),
    Excl(&'a [u8]),
}

/// Which entries a range takes.
#[derive(Clone, Debug)]
enum Range<'a> {
    Rank(i64, i64),
    Score(ScoreBound, ScoreBound),
    Lex(LexBound<'a>, LexBound<'a>),
}

fn score_bound(b: &[u8]) -> Option<ScoreBound> {
    match b {
        [b'(', rest @ ..] => float::parse_range(rest).map(|v| ScoreBound(v, true)),
        _ => float::parse_range(b).map(|v| ScoreBound(v, false)),
    }
}

fn lex_bound(b: &[u8]) -> Option<LexBound<'_>> {
    match b {
        b"+" => Some(LexBound::Max),
        b"-" => Some(LexBound::Min),
        [b'(', rest @ ..] => Some(LexBound::Excl(rest)),
        [b'[', rest @ ..] => Some(LexBound::Incl(rest)),
        _ => None,
    }
}

fn not_float_range() -> CmdError {
    CmdError::msg("ERR min or max is not a float")
}

fn not_lex_range() -> CmdError {
    CmdError::msg("ERR min or max not valid string range item")
}

impl<'a> Range<'a> {
    fn parse(kind: Kind, min: &'a [u8], max: &'a [u8]) -> Result<Range<'a>, CmdError> {
        Ok(match kind {
            Kind::Rank => Range::Rank(
                super::args::parse_i64(min).ok_or(CmdError::NotInteger)?,
                super::args::parse_i64(max).ok_or(CmdError::NotInteger)?,
            ),
            Kind::Score => Range::Score(
                score_bound(min).ok_or_else(not_float_range)?,
                score_bound(max).ok_or_else(not_float_range)?,
            ),
            Kind::Lex => Range::Lex(
                lex_bound(min).ok_or_else(not_lex_range)?,
                lex_bound(max).ok_or_else(not_lex_range)?,
            ),
        })
    }
}

fn gte_min(s: f64, min: ScoreBound) -> bool {
    if min.1 { s > min.0 } else { s >= min.0 }
}

fn lte_max(s: f64, max: ScoreBound) -> bool {
    if max.1 { s < max.0 } else { s <= max.0 }
}

fn lex_gte_min(m: &[u8], min: &LexBound<'_>) -> bool {
    match min {
        LexBound::Min => true,
        LexBound::Max => false,
        LexBound::Incl(b) => m >= *b,
        LexBound::Excl(b) => m > *b,
    }
}

fn lex_lte_max(m: &[u8], max: &LexBound<'_>) -> bool {
    match max {
        LexBound::Min => false,
        LexBound::Max => true,
        LexBound::Incl(b) => m <= *b,
        LexBound::Excl(b) => m < *b,
    }
}

/// Whether a lex range can hold nothing whatever the set (`zslParseLexRange`'s callers'
/// `sdscmplex` test).
fn lex_always_empty(min: &LexBound<'_>, max: &LexBound<'_>) -> bool {
    use std::cmp::Ordering::*;
    let rank = |b: &LexBound<'_>| match b {
        LexBound::Min => 0,
        LexBound::Max => 2,
        _ => 1,
    };
    let cmp = match (min, max) {
        (LexBound::Incl(a) | LexBound::Excl(a), LexBound::Incl(b) | LexBound::Excl(b)) => a.cmp(b),
        _ => rank(min).cmp(&rank(max)),
    };
    let excl = matches!(min, LexBound::Excl(_)) || matches!(max, LexBound::Excl(_));
    cmp == Greater || (cmp == Equal && excl)
}

/// The entries `range` takes from `z`, in the order asked (`rev`: highest first), after
/// skipping `offset` and taking at most `limit` (negative: all), as Redis's listpack walks pick
/// them.
fn select<'z>(
    z: &'z ZSet,
    range: &Range<'_>,
    rev: bool,
    offset: i64,
    limit: i64,
) -> Vec<(f64, &'z [u8])> {
    let len = z.len();
    let picked: Vec<(f64, &[u8])> = match range {
        Range::Rank(start, stop) => {
            let Some((a, b)) = super::list::clamp(*start, *stop, len) else {
                return Vec::new();
            };
            if rev {
                z.iter().rev().skip(a).take(b - a + 1).collect()
            } else {
                z.iter().skip(a).take(b - a + 1).collect()
            }
        }
        Range::Score(min, max) => {
            if min.0 > max.0 || (min.0 == max.0 && (min.1 || max.1)) {
                return Vec::new();
            }
            if rev {
                z.iter()
                    .rev()
                    .skip_while(|(s, _)| !lte_max(*s, *max))
                    .take_while(|(s, _)| gte_min(*s, *min))
                    .collect()
            } else {
                z.from_score(min.0)
                    .skip_while(|(s, _)| !gte_min(*s, *min))
                    .take_while(|(s, _)| lte_max(*s, *max))
                    .collect()
            }
        }
        Range::Lex(min, max) => {
            if lex_always_empty(min, max) {
                return Vec::new();
            }
            let all: Vec<(f64, &[u8])> = z.iter().collect();
            let (Some(first), Some(last)) = (all.first(), all.last()) else {
                return Vec::new();
            };
            if !lex_gte_min(last.1, min) || !lex_lte_max(first.1, max) {
                return Vec::new();
            }
            if rev {
                let Some(at) = all.iter().rposition(|(_, m)| lex_lte_max(m, max)) else {
                    return Vec::new();
                };
                all[..=at]
                    .iter()
                    .rev()
                    .take_while(|(_, m)| lex_gte_min(m, min))
                    .copied()
                    .collect()
            } else {
                let Some(at) = all.iter().position(|(_, m)| lex_gte_min(m, min)) else {
                    return Vec::new();
                };
                all[at..]
                    .iter()
                    .take_while(|(_, m)| lex_lte_max(m, max))
                    .copied()
                    .collect()
            }
        }
    };
    if matches!(range, Range::Rank(..)) {
        return picked;
    }
    if offset < 0 || (offset > 0 && offset as u64 >= len as u64) {
        return Vec::new();
    }
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    picked
        .into_iter()
        .skip(offset as usize)
        .take(limit)
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Rank,
    Score,
    Lex,
}

/// How a range command reads its arguments: its fixed kind and direction, or `None` where
/// ZRANGE's options choose them.
#[derive(Debug)]
pub struct Form {
    kind: Option<Kind>,
    rev: Option<bool>,
}

/// ZRANGE's family, parsed: `STORE` is ZRANGESTORE (a destination first, no WITHSCORES).
#[derive(Debug)]
pub struct ZRangeCmd<'a, const FORM: u8> {
    dest: Option<&'a [u8]>,
    key: &'a [u8],
    range: Range<'a>,
    rev: bool,
    offset: i64,
    limit: i64,
    scores: bool,
}

const ZRANGE: u8 = 0;
const ZRANGESTORE: u8 = 1;
const BYSCORE: u8 = 2;
const REVBYSCORE: u8 = 3;
const BYLEX: u8 = 4;
const REVBYLEX: u8 = 5;
const REVRANGE: u8 = 6;

pub type ZRange<'a> = ZRangeCmd<'a, ZRANGE>;
pub type ZRangeStore<'a> = ZRangeCmd<'a, ZRANGESTORE>;
pub type ZRangeByScore<'a> = ZRangeCmd<'a, BYSCORE>;
pub type ZRevRangeByScore<'a> = ZRangeCmd<'a, REVBYSCORE>;
pub type ZRangeByLex<'a> = ZRangeCmd<'a, BYLEX>;
pub type ZRevRangeByLex<'a> = ZRangeCmd<'a, REVBYLEX>;
pub type ZRevRange<'a> = ZRangeCmd<'a, REVRANGE>;

fn form(f: u8) -> Form {
    let (kind, rev) = match f {
        BYSCORE => (Some(Kind::Score), Some(false)),
        REVBYSCORE => (Some(Kind::Score), Some(true)),
        BYLEX => (Some(Kind::Lex), Some(false)),
        REVBYLEX => (Some(Kind::Lex), Some(true)),
        REVRANGE => (Some(Kind::Rank), Some(true)),
        _ => (None, None),
    };
    Form { kind, rev }
}

impl<'a, const FORM: u8> Command<'a> for ZRangeCmd<'a, FORM> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let store = FORM == ZRANGESTORE;
        let dest = if store { Some(args.key()?) } else { None };
        let key = args.key()?;
        let (a, b) = (args.key()?, args.key()?);
        let Form { kind, rev } = form(FORM);
        let (mut scores, mut offset, mut limit) = (false, 0, -1);
        // Each of REV, BYSCORE and BYLEX once (Redis 7.0 refuses a second).
        let (mut opt_kind, mut opt_rev) = (None, None);
        let rest: Vec<&[u8]> = args.rest().collect();
        let mut i = 0;
        while i < rest.len() {
            let w = rest[i].to_ascii_lowercase();
            let left = rest.len() - i - 1;
            match w.as_slice() {
                b"withscores" if !store => scores = true,
                b"limit" if left >= 2 => {
                    offset = super::args::parse_i64(rest[i + 1]).ok_or(CmdError::NotInteger)?;
                    limit = super::args::parse_i64(rest[i + 2]).ok_or(CmdError::NotInteger)?;
                    i += 2;
                }
                b"rev" if rev.is_none() && opt_rev.is_none() => opt_rev = Some(true),
                b"bylex" if rev.is_none() && kind.is_none() && opt_kind.is_none() => {
                    opt_kind = Some(Kind::Lex)
                }
                b"byscore" if rev.is_none() && kind.is_none() && opt_kind.is_none() => {
                    opt_kind = Some(Kind::Score)
                }
                _ => return Err(CmdError::Syntax),
            }
            i += 1;
        }
        let rev = rev.or(opt_rev).unwrap_or(false);
        let kind = kind.or(opt_kind).unwrap_or(Kind::Rank);
        if limit != -1 && kind == Kind::Rank {
            return Err(CmdError::msg(
                "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
            ));
        }
        if scores && kind == Kind::Lex {
            return Err(CmdError::msg(
                "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
            ));
        }
        // A reversed score or lex range is given as max, min.
        let (min, max) = if rev && kind != Kind::Rank {
            (b, a)
        } else {
            (a, b)
        };
        Ok(ZRangeCmd {
            dest,
            key,
            range: Range::parse(kind, min, max)?,
            rev,
            offset,
            limit,
            scores,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (range, rev, offset, limit) = (&self.range, self.rev, self.offset, self.limit);
        if let Some(dest) = self.dest {
            let _hold = super::hold::hold_keys(&ctx.shared.store, &[self.key, dest]);
            let picked = ctx
                .shared
                .store
                .read(self.key, ctx.now, |z: Option<&ZSet>| {
                    let mut out = ZSet::default();
                    if let Some(z) = z {
                        for (s, m) in select(z, range, rev, offset, limit) {
                            out.insert(m, s);
                        }
                    }
                    out
                })?;
            let n = picked.len();
            ctx.shared.store.overwrite(dest, ctx.now, picked)?;
            reply::integer(ctx.out, n as i64);
            return Ok(());
        }
        let (scores, proto, out) = (self.scores, ctx.session.proto, &mut *ctx.out);
        ctx.shared
            .store
            .read(self.key, ctx.now, |z: Option<&ZSet>| {
                let picked = z
                    .map(|z| select(z, range, rev, offset, limit))
                    .unwrap_or_default();
                reply_entries(out, proto, &picked, scores);
            })?;
        Ok(())
    }
}

/// Members, with their scores if asked (pairs in RESP3, flat in RESP2).
fn reply_entries(out: &mut bytes::BytesMut, proto: Proto, picked: &[(f64, &[u8])], scores: bool) {
    let nested = scores && proto == Proto::Resp3;
    reply::array(
        out,
        if scores && !nested {
            picked.len() * 2
        } else {
            picked.len()
        },
    );
    for (s, m) in picked {
        if nested {
            reply::array(out, 2);
        }
        reply::bulk(out, m);
        if scores {
            float::reply(out, proto, *s);
        }
    }
}

/// `ZCOUNT key min max` (`LEX` false) and `ZLEXCOUNT key min max`.
#[derive(Debug)]
pub struct ZCount<'a, const LEX: bool> {
    key: &'a [u8],
    range: Range<'a>,
}

pub type ZCountCmd<'a> = ZCount<'a, false>;
pub type ZLexCount<'a> = ZCount<'a, true>;

impl<'a, const LEX: bool> Command<'a> for ZCount<'a, LEX> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let kind = if LEX { Kind::Lex } else { Kind::Score };
        Ok(ZCount {
            key,
            range: Range::parse(kind, args.key()?, args.key()?)?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let range = &self.range;
        let n = ctx
            .shared
            .store
            .read(self.key, ctx.now, |z: Option<&ZSet>| {
                z.map_or(0, |z| select(z, range, false, 0, -1).len())
            })?;
        reply::integer(ctx.out, n as i64);
        Ok(())
    }
}

/// `ZREMRANGEBYSCORE`, `ZREMRANGEBYRANK` and `ZREMRANGEBYLEX`.
#[derive(Debug)]
pub struct ZRemRange<'a, const KIND: u8> {
    key: &'a [u8],
    range: Range<'a>,
}

pub type ZRemRangeByScore<'a> = ZRemRange<'a, 0>;
pub type ZRemRangeByRank<'a> = ZRemRange<'a, 1>;
pub type ZRemRangeByLex<'a> = ZRemRange<'a, 2>;

impl<'a, const KIND: u8> Command<'a> for ZRemRange<'a, KIND> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let kind = match KIND {
            0 => Kind::Score,
            1 => Kind::Rank,
            _ => Kind::Lex,
        };
        Ok(ZRemRange {
            key,
            range: Range::parse(kind, args.key()?, args.key()?)?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let range = &self.range;
        let n = ctx
            .shared
            .store
            .edit(self.key, ctx.now, false, |z: &mut ZSet| {
                let gone: Vec<Vec<u8>> = select(z, range, false, 0, -1)
                    .into_iter()
                    .map(|(_, m)| m.to_vec())
                    .collect();
                for m in &gone {
                    z.remove(m);
                }
                (gone.len(), !gone.is_empty())
            })?;
        reply::integer(ctx.out, n.unwrap_or(0) as i64);
        Ok(())
    }
}
