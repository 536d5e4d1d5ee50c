//! The list commands: LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LLEN, LINDEX, LRANGE, LTRIM,
//! LSET, LREM, LINSERT, LPOS, LMOVE and RPOPLPUSH, with Redis 7's replies and its order of
//! checks (which argument errors come before the key's type is looked at). The blocking forms
//! (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH) answer an error: a server thread never waits here.

use sluice_resp::{ArgIter, reply};
use sluice_store::types::List;

use super::{Args, CmdError, Command, Ctx};

/// Redis's `LONG_MIN`-safe inclusive range over `len` entries (`lrange`/`ltrim`'s clamping):
/// `None` if it is empty.
pub(super) fn clamp(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i128;
    let (mut start, mut stop) = (i128::from(start), i128::from(stop));
    if start < 0 {
        start += len;
    }
    if stop < 0 {
        stop += len;
    }
    let start = start.max(0);
    if start > stop || start >= len {
        return None;
    }
    let stop = stop.min(len - 1);
    Some((start as usize, stop as usize))
}

/// An index from the head (`0..`) or the tail (`-1..`), if it is inside the list.
pub(super) fn index(i: i64, len: usize) -> Option<usize> {
    let i = if i < 0 {
        i128::from(i) + len as i128
    } else {
        i128::from(i)
    };
    (0..len as i128).contains(&i).then_some(i as usize)
}

fn side(word: &[u8]) -> Result<bool, CmdError> {
    if word.eq_ignore_ascii_case(b"left") {
        Ok(true)
    } else if word.eq_ignore_ascii_case(b"right") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

/// `LPUSH`/`RPUSH` (`FRONT`) and their `X` forms (`ONLY_EXISTING`).
#[derive(Debug)]
pub struct Push<'a, const FRONT: bool, const ONLY_EXISTING: bool> {
    key: &'a [u8],
    items: ArgIter<'a>,
}

pub type LPush<'a> = Push<'a, true, false>;
pub type RPush<'a> = Push<'a, false, false>;
pub type LPushX<'a> = Push<'a, true, true>;
pub type RPushX<'a> = Push<'a, false, true>;

impl<'a, const FRONT: bool, const ONLY_EXISTING: bool> Command<'a>
    for Push<'a, FRONT, ONLY_EXISTING>
{
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Push {
            key: args.key()?,
            items: args.rest(),
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let items = self.items;
        let len = ctx
            .shared
            .store
            .edit(self.key, ctx.now, !ONLY_EXISTING, |l: &mut List| {
                for item in items {
                    l.push(FRONT, item);
                }
                (l.len(), true)
            })?;
        reply::integer(ctx.out, len.unwrap_or(0) as i64);
        Ok(())
    }
}

/// `LPOP key [count]` (`FRONT`) and `RPOP`.
#[derive(Debug)]
pub struct Pop<'a, const FRONT: bool> {
    key: &'a [u8],
    count: Option<usize>,
}

pub type LPop<'a> = Pop<'a, true>;
pub type RPop<'a> = Pop<'a, false>;

/// A count that must be positive (Redis's `getPositiveLongFromObjectOrReply`).
fn positive_count(arg: &[u8]) -> Result<usize, CmdError> {
    match super::args::parse_i64(arg) {
        Some(n) if n >= 0 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        _ => Err(CmdError::msg("ERR value is out of range, must be positive")),
    }
}

impl<'a, const FRONT: bool> Command<'a> for Pop<'a, FRONT> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        if args.remaining() > 1 {
            return Err(CmdError::Arity);
        }
        let count = match args.next() {
            None => None,
            Some(c) => Some(positive_count(c)?),
        };
        Ok(Pop { key, count })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let proto = ctx.session.proto;
        let count = self.count;
        let popped = ctx
            .shared
            .store
            .edit(self.key, ctx.now, false, |l: &mut List| {
                let n = count.unwrap_or(1).min(l.len());
                let items: Vec<Vec<u8>> = (0..n).filter_map(|_| l.pop(FRONT)).collect();
                let changed = !items.is_empty();
                (items, changed)
            })?;
        match (popped, count) {
            (None, None) => reply::null(ctx.out, proto),
            (None, Some(_)) => reply::null_array(ctx.out, proto),
            (Some(items), None) => reply::bulk(ctx.out, &items[0]),
            (Some(items), Some(_)) => {
                reply::array(ctx.out, items.len());
                for item in &items {
                    reply::bulk(ctx.out, item);
                }
            }
        }
        Ok(())
    }
}

#[derive(Debug)]
pub struct LIndex<'a> {
    key: &'a [u8],
    index: &'a [u8],
}

impl<'a> Command<'a> for LIndex<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(LIndex {
            key: args.key()?,
            index: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let raw = self.index;
        let item = ctx
            .shared
            .store
            .read(self.key, ctx.now, |l: Option<&List>| {
                let Some(l) = l else {
                    return Ok::<_, CmdError>(None);
                };
                let i = super::args::parse_i64(raw).ok_or(CmdError::NotInteger)?;
                Ok(index(i, l.len()).and_then(|i| l.get(i)).map(<[u8]>::to_vec))
            })??;
        match item {
            Some(v) => reply::bulk(ctx.out, &v),
            None => reply::null(ctx.out, ctx.session.proto),
        }
        Ok(())
    }
}

#[derive(Debug)]
pub struct LRange<'a> {
    key: &'a [u8],
    start: i64,
    stop: i64,
}

impl<'a> Command<'a> for LRange<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(LRange {
            key: args.key()?,
            start: args.i64()?,
            stop: args.i64()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (start, stop, out) = (self.start, self.stop, &mut *ctx.out);
        ctx.shared
            .store
            .read(self.key, ctx.now, |l: Option<&List>| {
                let items = l.map(List::items).unwrap_or_default();
                match clamp(start, stop, items.len()) {
                    None => reply::array(out, 0),
                    Some((a, b)) => {
                        reply::array(out, b - a + 1);
                        for item in &items[a..=b] {
                            reply::bulk(out, item);
                        }
                    }
                }
            })?;
        Ok(())
    }
}

#[derive(Debug)]
pub struct LTrim<'a> {
    key: &'a [u8],
    start: i64,
    stop: i64,
}

impl<'a> Command<'a> for LTrim<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(LTrim {
            key: args.key()?,
            start: args.i64()?,
            stop: args.i64()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (start, stop) = (self.start, self.stop);
        ctx.shared
            .store
            .edit(self.key, ctx.now, false, |l: &mut List| {
                let len = l.len();
                let keep = clamp(start, stop, len);
                let changed = keep != Some((0, len.saturating_sub(1)));
                if changed {
                    l.trim(keep);
                }
                ((), changed)
            })?;
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}

#[derive(Debug)]
pub struct LSet<'a> {
    key: &'a [u8],
    index: &'a [u8],
    value: &'a [u8],
}

impl<'a> Command<'a> for LSet<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(LSet {
            key: args.key()?,
            index: args.key()?,
            value: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (raw, value) = (self.index, self.value);
        let done = ctx
            .shared
            .store
            .edit(self.key, ctx.now, false, |l: &mut List| {
                let Some(i) = super::args::parse_i64(raw) else {
                    return (Err(CmdError::NotInteger), false);
                };
                match index(i, l.len()) {
                    Some(i) => (Ok(l.set(i, value)), true),
                    None => (Err(CmdError::msg("ERR index out of range")), false),
                }
            })?;
        match done {
            None => return Err(CmdError::msg("ERR no such key")),
            Some(r) => r?,
        };
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}

#[derive(Debug)]
pub struct LRem<'a> {
    key: &'a [u8],
    count: i64,
    value: &'a [u8],
}

impl<'a> Command<'a> for LRem<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(LRem {
            key: args.key()?,
            count: args.i64()?,
            value: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (count, value) = (self.count, self.value);
        let removed = ctx
            .shared
            .store
            .edit(self.key, ctx.now, false, |l: &mut List| {
                let n = l.remove(count, value);
                (n, n > 0)
            })?;
        reply::integer(ctx.out, removed.unwrap_or(0) as i64);
        Ok(())
    }
}

#[derive(Debug)]
pub struct LInsert<'a> {
    key: &'a [u8],
    before: bool,
    pivot: &'a [u8],
    value: &'a [u8],
}

impl<'a> Command<'a> for LInsert<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let place = args.key()?;
        let before = if place.eq_ignore_ascii_case(b"before") {
            true
        } else if place.eq_ignore_ascii_case(b"after") {
            false
        } else {
            return Err(CmdError::Syntax);
        };
        Ok(LInsert {
            key,
            before,
            pivot: args.key()?,
            value: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (before, pivot, value) = (self.before, self.pivot, self.value);
        let len = ctx
            .shared
            .store
            .edit(self.key, ctx.now, false, |l: &mut List| {
                match l.insert(before, pivot, value) {
                    Some(n) => (n as i64, true),
                    None => (-1, false),
                }
            })?;
        reply::integer(ctx.out, len.unwrap_or(0));
        Ok(())
    }
}

#[derive(Debug)]
pub struct LPos<'a> {
    key: &'a [u8],
    value: &'a [u8],
    rank: i64,
    count: Option<usize>,
    maxlen: usize,
}

impl<'a> Command<'a> for LPos<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let value = args.key()?;
        let (mut rank, mut count, mut maxlen) = (1, None, 0);
        while let Some(opt) = args.next() {
            let arg = args.next().ok_or(CmdError::Syntax)?;
            let n = super::args::parse_i64(arg);
            let not_negative = |what: &'static str| match n {
                Some(n) if n >= 0 => Ok(n as usize),
                _ => Err(CmdError::msg(what)),
            };
            if opt.eq_ignore_ascii_case(b"rank") {
                rank = match n.ok_or(CmdError::NotInteger)? {
                    0 => {
                        return Err(CmdError::msg(
                            "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
                        ));
                    }
                    n => n,
                };
            } else if opt.eq_ignore_ascii_case(b"count") {
                count = Some(not_negative("ERR COUNT can't be negative")?);
            } else if opt.eq_ignore_ascii_case(b"maxlen") {
                maxlen = not_negative("ERR MAXLEN can't be negative")?;
            } else {
                return Err(CmdError::Syntax);
            }
        }
        Ok(LPos {
            key,
            value,
            rank,
            count,
            maxlen,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let LPos {
            value,
            rank,
            count,
            maxlen,
            ..
        } = self;
        let found = ctx
            .shared
            .store
            .read(self.key, ctx.now, |l: Option<&List>| {
                let items = l.map(List::items).unwrap_or_default();
                let n = items.len();
                let scan = if maxlen == 0 { n } else { maxlen.min(n) };
                let order: Box<dyn Iterator<Item = usize>> = if rank > 0 {
                    Box::new(0..scan)
                } else {
                    Box::new((n - scan..n).rev())
                };
                let want = match count {
                    None => 1,
                    Some(0) => usize::MAX,
                    Some(c) => c,
                };
                // Redis counts matches up to `rank`; its negation of i64::MIN stays negative, so
                // that rank takes the first match from the tail.
                let mut skip = if rank == i64::MIN {
                    0
                } else {
                    rank.unsigned_abs() - 1
                };
                let mut found = Vec::new();
                for i in order {
                    if items[i] == value {
                        if skip > 0 {
                            skip -= 1;
                        } else {
                            found.push(i as i64);
                            if found.len() == want {
                                break;
                            }
                        }
                    }
                }
                found
            })?;
        match count {
            None => match found.first() {
                Some(&i) => reply::integer(ctx.out, i),
                None => reply::null(ctx.out, ctx.session.proto),
            },
            Some(_) => reply::int_array(ctx.out, &found),
        }
        Ok(())
    }
}

/// `LMOVE source destination LEFT|RIGHT LEFT|RIGHT` and `RPOPLPUSH source destination`.
#[derive(Debug)]
pub struct LMove<'a> {
    from: &'a [u8],
    to: &'a [u8],
    from_front: bool,
    to_front: bool,
}

impl<'a> Command<'a> for LMove<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(LMove {
            from: args.key()?,
            to: args.key()?,
            from_front: side(args.key()?)?,
            to_front: side(args.key()?)?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        lmove(ctx, self.from, self.to, self.from_front, self.to_front)
    }
}

#[derive(Debug)]
pub struct RPopLPush<'a> {
    from: &'a [u8],
    to: &'a [u8],
}

impl<'a> Command<'a> for RPopLPush<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(RPopLPush {
            from: args.key()?,
            to: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        lmove(ctx, self.from, self.to, false, true)
    }
}

/// Moves one entry, both keys' shards held (see `hold`): the source's and the destination's
/// types are checked before anything moves, as Redis checks them, and no other command comes
/// between the pop and the push.
fn lmove(
    ctx: &mut Ctx<'_>,
    from: &[u8],
    to: &[u8],
    from_front: bool,
    to_front: bool,
) -> Result<(), CmdError> {
    let store = &ctx.shared.store;
    let now = ctx.now;
    let proto = ctx.session.proto;
    let _hold = super::hold::hold_keys(store, &[from, to]);
    if !store.read(from, now, |l: Option<&List>| l.is_some())? {
        reply::null(ctx.out, proto);
        return Ok(());
    }
    store.read(to, now, |_: Option<&List>| ())?;
    let item = store.edit(from, now, false, |l: &mut List| {
        let item = l.pop(from_front);
        let changed = item.is_some();
        (item, changed)
    })?;
    match item.flatten() {
        None => reply::null(ctx.out, proto),
        Some(item) => {
            store.edit(to, now, true, |l: &mut List| {
                l.push(to_front, &item);
                ((), true)
            })?;
            reply::bulk(ctx.out, &item);
        }
    }
    Ok(())
}

/// BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BZPOPMIN and BZPOPMAX: arity checked by the table, then
/// refused.
#[derive(Debug)]
pub struct Blocking;

impl Command<'_> for Blocking {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        args.rest();
        Err(CmdError::msg(
            "ERR blocking commands are not served by Sluice: poll with LPOP, RPOP, LMOVE or ZPOPMIN instead",
        ))
    }

    fn apply(self, _: &mut Ctx<'_>) -> Result<(), CmdError> {
        Ok(())
    }
}
