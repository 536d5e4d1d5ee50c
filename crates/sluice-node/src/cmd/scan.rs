//! HSCAN, SSCAN and ZSCAN (one command over the collection type), and what SCAN shares with
//! them: the cursor and the MATCH and COUNT options.
//! A collection answers all of its entries in one reply with the cursor 0, as Redis does for
//! its compact encodings (COUNT is a hint; a reply past the output limit closes the client).

use std::marker::PhantomData;

use sluice_resp::ArgIter;
use sluice_resp::reply;
use sluice_store::Collection;
use sluice_store::types::{Hash, Set, ZSet};

use super::{Args, CmdError, Command, Ctx, float};
use crate::glob::glob_match;

/// `key cursor [MATCH pattern] [COUNT count]` after the command name.
#[derive(Debug)]
pub struct ScanArgs<'a> {
    pub key: &'a [u8],
    options: ArgIter<'a>,
}

/// The parsed options: MATCH, COUNT (10 unless given), and TYPE (SCAN's alone).
#[derive(Debug)]
pub struct Options<'a> {
    pattern: Option<&'a [u8]>,
    pub count: usize,
    pub kind: Option<&'a [u8]>,
}

impl<'a> Options<'a> {
    pub fn keeps(&self, item: &[u8]) -> bool {
        self.pattern.is_none_or(|p| glob_match(p, item))
    }

    /// Redis's `scanGenericCommand` options, in pairs: COUNT (at least 1), MATCH (`*` is no
    /// pattern), and TYPE where `typed` (the keyspace's SCAN); anything else is a syntax error.
    pub(super) fn parse(
        args: impl Iterator<Item = &'a [u8]>,
        typed: bool,
    ) -> Result<Self, CmdError> {
        let args: Vec<&[u8]> = args.collect();
        let mut opts = Options {
            pattern: None,
            count: 10,
            kind: None,
        };
        let mut i = 0;
        while i < args.len() {
            let (opt, value) = (args[i], args.get(i + 1).copied());
            match value {
                Some(n) if opt.eq_ignore_ascii_case(b"count") => {
                    opts.count = match super::args::parse_i64(n) {
                        None => return Err(CmdError::NotInteger),
                        Some(n) if n < 1 => return Err(CmdError::Syntax),
                        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
                    };
                }
                Some(p) if opt.eq_ignore_ascii_case(b"match") => {
                    opts.pattern = (p != b"*").then_some(p);
                }
                Some(t) if typed && opt.eq_ignore_ascii_case(b"type") => opts.kind = Some(t),
                _ => return Err(CmdError::Syntax),
            }
            i += 2;
        }
        Ok(opts)
    }
}

/// Redis's `parseScanCursorOrReply`, which is `strtoul`: an optional sign (a negative cursor
/// wraps), decimal digits, nothing else; the empty string is 0.
pub(super) fn cursor(b: &[u8]) -> Result<u64, CmdError> {
    let (negative, digits) = match b {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, b),
    };
    let invalid = || CmdError::msg("ERR invalid cursor");
    if digits.is_empty() {
        return if b.is_empty() { Ok(0) } else { Err(invalid()) };
    }
    let n: u64 = std::str::from_utf8(digits)
        .ok()
        .filter(|s| s.bytes().all(|c| c.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or_else(invalid)?;
    Ok(if negative { n.wrapping_neg() } else { n })
}

impl<'a> ScanArgs<'a> {
    pub fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        cursor(args.key()?)?;
        Ok(ScanArgs {
            key,
            options: args.rest(),
        })
    }

    /// The options, parsed once the key is known to hold the right type (Redis checks them
    /// after the key).
    pub fn options(&self) -> Result<Options<'a>, CmdError> {
        Options::parse(self.options.clone(), false)
    }
}

/// The reply: cursor 0 and every string of `items`.
fn reply_all<T: AsRef<[u8]>>(ctx: &mut Ctx<'_>, items: &[T]) {
    reply::array(ctx.out, 2);
    reply::bulk(ctx.out, b"0");
    reply::array(ctx.out, items.len());
    for item in items {
        reply::bulk(ctx.out, item.as_ref());
    }
}

/// A collection a scan walks: the strings it answers for each entry whose first string (a
/// field, a member) `keep` accepts.
pub trait Scanned: Collection {
    fn scanned(&self, keep: &dyn Fn(&[u8]) -> bool) -> Vec<Vec<u8>>;
}

impl Scanned for Hash {
    fn scanned(&self, keep: &dyn Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
        let pairs = self.pairs().into_iter().filter(|(f, _)| keep(f));
        pairs.flat_map(|(f, v)| [f.to_vec(), v.to_vec()]).collect()
    }
}

impl Scanned for Set {
    fn scanned(&self, keep: &dyn Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
        let members = self.members().into_iter().filter(|m| keep(m));
        members.map(<[u8]>::to_vec).collect()
    }
}

impl Scanned for ZSet {
    fn scanned(&self, keep: &dyn Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
        let entries = self.iter().filter(|(_, m)| keep(m));
        entries
            .flat_map(|(s, m)| [m.to_vec(), float::text(s).into_bytes()])
            .collect()
    }
}

/// `HSCAN`, `SSCAN` and `ZSCAN key cursor [MATCH pattern] [COUNT count]`.
#[derive(Debug)]
pub struct CollScan<'a, T>(ScanArgs<'a>, PhantomData<T>);

pub type HScan<'a> = CollScan<'a, Hash>;
pub type SScan<'a> = CollScan<'a, Set>;
pub type ZScan<'a> = CollScan<'a, ZSet>;

impl<'a, T: Scanned> Command<'a> for CollScan<'a, T> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(CollScan(ScanArgs::parse(args)?, PhantomData))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let scan = self.0;
        let items = ctx.shared.store.read(scan.key, ctx.now, |c: Option<&T>| {
            let Some(c) = c else {
                return Ok(Vec::new());
            };
            let opts = scan.options()?;
            Ok::<_, CmdError>(c.scanned(&|item| opts.keeps(item)))
        })??;
        reply_all(ctx, &items);
        Ok(())
    }
}
