//! The set commands: SADD, SREM, SISMEMBER, SMISMEMBER, SCARD, SMEMBERS, SPOP, SRANDMEMBER,
//! SINTER, SUNION, SDIFF and their STORE forms, SMOVE and SSCAN, with Redis 7.0's replies (a
//! RESP3 set where Redis answers one).

use sluice_resp::{ArgIter, reply};
use sluice_store::types::Set;

use super::args::KeyAnd;
use super::{Args, CmdError, Command, Ctx, sample};

/// `SADD key member [member ...]` (`ADD`) and `SREM`.
#[derive(Debug)]
pub struct SChange<'a, const ADD: bool>(KeyAnd<'a>);

pub type SAdd<'a> = SChange<'a, true>;
pub type SRem<'a> = SChange<'a, false>;

impl<'a, const ADD: bool> Command<'a> for SChange<'a, ADD> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(SChange(KeyAnd::parse(args)?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let KeyAnd { key, rest: members } = self.0;
        let n = ctx.shared.store.edit(key, ctx.now, ADD, |s: &mut Set| {
            let n = members
                .filter(|m| if ADD { s.add(m) } else { s.remove(m) })
                .count();
            (n, n > 0)
        })?;
        reply::integer(ctx.out, n.unwrap_or(0) as i64);
        Ok(())
    }
}

/// `SISMEMBER key member` and `SMISMEMBER key member [member ...]` (`MANY`).
#[derive(Debug)]
pub struct SIsMember<'a, const MANY: bool>(KeyAnd<'a>);

pub type SIsMemberCmd<'a> = SIsMember<'a, false>;
pub type SMIsMember<'a> = SIsMember<'a, true>;

impl<'a, const MANY: bool> Command<'a> for SIsMember<'a, MANY> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(SIsMember(KeyAnd::parse(args)?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (KeyAnd { key, rest: members }, out) = (self.0, &mut *ctx.out);
        ctx.shared.store.read(key, ctx.now, |s: Option<&Set>| {
            if MANY {
                reply::array(out, members.len());
            }
            for m in members {
                reply::integer(out, i64::from(s.is_some_and(|s| s.contains(m))));
            }
        })?;
        Ok(())
    }
}

/// Members as a set reply (an array in RESP2).
fn reply_members<T: AsRef<[u8]>>(ctx: &mut Ctx<'_>, members: &[T]) {
    reply::set(ctx.out, ctx.session.proto, members.len());
    for m in members {
        reply::bulk(ctx.out, m.as_ref());
    }
}

#[derive(Debug)]
pub struct SMembers<'a>(&'a [u8]);

impl<'a> Command<'a> for SMembers<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(SMembers(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let members = ctx.shared.store.read(self.0, ctx.now, |s: Option<&Set>| {
            s.map(|s| s.members().iter().map(|m| m.to_vec()).collect::<Vec<_>>())
                .unwrap_or_default()
        })?;
        reply_members(ctx, &members);
        Ok(())
    }
}

#[derive(Debug)]
pub struct SPop<'a> {
    key: &'a [u8],
    count: Option<usize>,
}

impl<'a> Command<'a> for SPop<'a> {
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
        Ok(SPop { key, count })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let count = self.count;
        let popped = ctx
            .shared
            .store
            .edit(self.key, ctx.now, false, |s: &mut Set| {
                let members = s.members();
                let n = count.unwrap_or(1).min(members.len());
                let picked: Vec<Vec<u8>> = sample::indexes(members.len(), n as i64)
                    .map(|i| members[i].to_vec())
                    .collect();
                for m in &picked {
                    s.remove(m);
                }
                let changed = !picked.is_empty();
                (picked, changed)
            })?;
        let popped = popped.unwrap_or_default();
        match count {
            Some(_) => reply_members(ctx, &popped),
            None => match popped.first() {
                Some(m) => reply::bulk(ctx.out, m),
                None => reply::null(ctx.out, ctx.session.proto),
            },
        }
        Ok(())
    }
}

#[derive(Debug)]
pub struct SRandMember<'a> {
    key: &'a [u8],
    count: Option<i64>,
}

impl<'a> Command<'a> for SRandMember<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        if args.remaining() > 1 {
            return Err(CmdError::Syntax);
        }
        let count = match args.next() {
            None => None,
            Some(c) => match super::args::parse_i64(c) {
                None => return Err(CmdError::NotInteger),
                Some(i64::MIN) => {
                    return Err(CmdError::msg(
                        "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
                    ));
                }
                Some(n) => Some(n),
            },
        };
        Ok(SRandMember { key, count })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (count, proto, out) = (self.count, ctx.session.proto, &mut *ctx.out);
        ctx.shared
            .store
            .read(self.key, ctx.now, |s: Option<&Set>| {
                let members = s.map(Set::members).unwrap_or_default();
                let Some(count) = count else {
                    match members.get(sample::below(members.len().max(1))) {
                        Some(m) => reply::bulk(out, m),
                        None => reply::null(out, proto),
                    }
                    return;
                };
                reply::array(out, sample::count(members.len(), count) as usize);
                for i in sample::indexes(members.len(), count) {
                    reply::bulk(out, members[i]);
                }
            })?;
        Ok(())
    }
}

/// SINTER, SUNION and SDIFF, and their STORE forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// The members `op` makes of `keys`' sets (a missing key is an empty set; every key's type is
/// checked, even after an intersection is known to be empty).
fn combine(ctx: &Ctx<'_>, op: Op, keys: ArgIter<'_>) -> Result<Vec<Vec<u8>>, CmdError> {
    let mut result: Option<Set> = None;
    let mut empty = false;
    for (i, key) in keys.enumerate() {
        let members: Option<Vec<Vec<u8>>> =
            ctx.shared.store.read(key, ctx.now, |s: Option<&Set>| {
                s.map(|s| s.members().iter().map(|m| m.to_vec()).collect())
            })?;
        let Some(members) = members else {
            match op {
                Op::Inter => empty = true,
                Op::Diff if i == 0 => result = Some(Set::default()),
                _ => {}
            }
            continue;
        };
        result = Some(match (result, op) {
            (None, _) => {
                let mut s = Set::default();
                for m in &members {
                    s.add(m);
                }
                s
            }
            (Some(mut acc), Op::Union) => {
                for m in &members {
                    acc.add(m);
                }
                acc
            }
            (Some(mut acc), Op::Diff) => {
                for m in &members {
                    acc.remove(m);
                }
                acc
            }
            (Some(acc), Op::Inter) => {
                let mut s = Set::default();
                for m in members.iter().filter(|m| acc.contains(m)) {
                    s.add(m);
                }
                s
            }
        });
    }
    if empty {
        return Ok(Vec::new());
    }
    Ok(result
        .map(|s| s.members().iter().map(|m| m.to_vec()).collect())
        .unwrap_or_default())
}

/// `SINTER`/`SUNION`/`SDIFF key [key ...]` (`OP` 0, 1, 2).
#[derive(Debug)]
pub struct SOp<'a, const OP: u8>(ArgIter<'a>);

pub type SInter<'a> = SOp<'a, 0>;
pub type SUnion<'a> = SOp<'a, 1>;
pub type SDiff<'a> = SOp<'a, 2>;

fn op(code: u8) -> Op {
    match code {
        0 => Op::Inter,
        1 => Op::Union,
        _ => Op::Diff,
    }
}

impl<'a, const OP: u8> Command<'a> for SOp<'a, OP> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(SOp(args.rest()))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let keys: Vec<&[u8]> = self.0.clone().collect();
        let _hold = super::hold::hold_keys(&ctx.shared.store, &keys);
        let members = combine(ctx, op(OP), self.0)?;
        reply_members(ctx, &members);
        Ok(())
    }
}

/// `SINTERSTORE`/`SUNIONSTORE`/`SDIFFSTORE destination key [key ...]`: the result replaces the
/// destination (an empty one deletes it); the reply is its size.
#[derive(Debug)]
pub struct SOpStore<'a, const OP: u8> {
    dest: &'a [u8],
    keys: ArgIter<'a>,
}

pub type SInterStore<'a> = SOpStore<'a, 0>;
pub type SUnionStore<'a> = SOpStore<'a, 1>;
pub type SDiffStore<'a> = SOpStore<'a, 2>;

impl<'a, const OP: u8> Command<'a> for SOpStore<'a, OP> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(SOpStore {
            dest: args.key()?,
            keys: args.rest(),
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let mut keys: Vec<&[u8]> = self.keys.clone().collect();
        keys.push(self.dest);
        let _hold = super::hold::hold_keys(&ctx.shared.store, &keys);
        let members = combine(ctx, op(OP), self.keys)?;
        let mut set = Set::default();
        for m in &members {
            set.add(m);
        }
        ctx.shared.store.overwrite(self.dest, ctx.now, set)?;
        reply::integer(ctx.out, members.len() as i64);
        Ok(())
    }
}

/// `SMOVE source destination member`, both keys' shards held (see `hold`): both types are
/// checked before anything moves, and no other command comes between the removal and the
/// addition.
#[derive(Debug)]
pub struct SMove<'a> {
    from: &'a [u8],
    to: &'a [u8],
    member: &'a [u8],
}

impl<'a> Command<'a> for SMove<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(SMove {
            from: args.key()?,
            to: args.key()?,
            member: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (store, now, member) = (&ctx.shared.store, ctx.now, self.member);
        let _hold = super::hold::hold_keys(store, &[self.from, self.to]);
        let here = store.read(self.from, now, |s: Option<&Set>| {
            s.map(|s| s.contains(member))
        })?;
        if here.is_some() {
            store.read(self.to, now, |_: Option<&Set>| ())?;
        }
        let moved = match here {
            None | Some(false) => false,
            Some(true) if self.from == self.to => true,
            Some(true) => {
                let gone = store.edit(self.from, now, false, |s: &mut Set| {
                    let gone = s.remove(member);
                    (gone, gone)
                })?;
                if gone == Some(true) {
                    store.edit(self.to, now, true, |s: &mut Set| {
                        let added = s.add(member);
                        ((), added)
                    })?;
                }
                gone == Some(true)
            }
        };
        reply::integer(ctx.out, i64::from(moved));
        Ok(())
    }
}
