//! The key commands that move, copy and list keys of any type: RENAME, RENAMENX, COPY, KEYS,
//! SCAN (MATCH, COUNT, TYPE), RANDOMKEY and OBJECT (ENCODING, FREQ, IDLETIME, REFCOUNT, HELP).
//!
//! KEYS and SCAN walk the store one shard at a time, never holding more than one shard's lock
//! and that only for bounded steps. A SCAN cursor is a shard's index: each call answers whole
//! shards until it has COUNT keys, so every key present for the whole scan is answered exactly
//! once (a key never changes shard). RENAME and COPY hold both keys' shards for their whole
//! run (see `hold`): no other command sees the source gone and the destination not yet
//! written; a refused write puts the source back.

use bytes::Bytes;
use sluice_resp::reply;
use sluice_store::{Kind, Value};

use super::hold::hold_keys;
use super::scan::Options;
use super::{Args, CmdError, Command, Ctx, sample};
use crate::glob::glob_match;

fn no_such_key() -> CmdError {
    CmdError::msg("ERR no such key")
}

/// `RENAME key newkey` and `RENAMENX` (`NX`: 1 if renamed, 0 if `newkey` exists).
#[derive(Debug)]
pub struct Rename<'a, const NX: bool> {
    from: &'a [u8],
    to: &'a [u8],
}

pub type RenameCmd<'a> = Rename<'a, false>;
pub type RenameNx<'a> = Rename<'a, true>;

impl<'a, const NX: bool> Command<'a> for Rename<'a, NX> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Rename {
            from: args.key()?,
            to: args.key()?,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (store, now) = (&ctx.shared.store, ctx.now);
        let _hold = hold_keys(store, &[self.from, self.to]);
        let done = if self.from == self.to {
            if !store.exists(self.from, now) {
                return Err(no_such_key());
            }
            !NX
        } else if NX && store.exists(self.to, now) {
            if !store.exists(self.from, now) {
                return Err(no_such_key());
            }
            false
        } else {
            let (value, deadline) = store.take(self.from, now).ok_or_else(no_such_key)?;
            match store.place(self.to, value.clone(), deadline, now, !NX) {
                Ok(true) => true,
                refused => {
                    // Put the source back as it was: nothing accepted is lost.
                    store.place(self.from, value, deadline, now, true)?;
                    refused?;
                    false
                }
            }
        };
        if NX {
            reply::integer(ctx.out, i64::from(done));
        } else {
            reply::simple(ctx.out, "OK");
        }
        Ok(())
    }
}

/// `COPY source destination [DB destination-db] [REPLACE]` (only database 0 exists).
#[derive(Debug)]
pub struct Copy<'a> {
    from: &'a [u8],
    to: &'a [u8],
    replace: bool,
}

impl<'a> Command<'a> for Copy<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let from = args.key()?;
        let to = args.key()?;
        let mut replace = false;
        while let Some(opt) = args.next() {
            if opt.eq_ignore_ascii_case(b"replace") {
                replace = true;
            } else if opt.eq_ignore_ascii_case(b"db") && !args.is_empty() {
                let db = super::args::parse_i64(args.key()?)
                    .filter(|n| i32::try_from(*n).is_ok())
                    .ok_or(CmdError::NotInteger)?;
                if db != 0 {
                    return Err(CmdError::msg("ERR DB index is out of range"));
                }
            } else {
                return Err(CmdError::Syntax);
            }
        }
        if from == to {
            return Err(CmdError::msg(
                "ERR source and destination objects are the same",
            ));
        }
        Ok(Copy { from, to, replace })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (store, now) = (&ctx.shared.store, ctx.now);
        let _hold = hold_keys(store, &[self.from, self.to]);
        let copied = match store.value(self.from, now) {
            None => false,
            Some((value, deadline)) => store.place(self.to, value, deadline, now, self.replace)?,
        };
        reply::integer(ctx.out, i64::from(copied));
        Ok(())
    }
}

/// `KEYS pattern`: every live key that matches, in no order.
#[derive(Debug)]
pub struct Keys<'a>(&'a [u8]);

impl<'a> Command<'a> for Keys<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Keys(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let pattern = self.0;
        let all = pattern == b"*";
        let keys: Vec<Bytes> = ctx
            .shared
            .store
            .keys_where(ctx.now, usize::MAX, |k| all || glob_match(pattern, k));
        reply::array(ctx.out, keys.len());
        for k in &keys {
            reply::bulk(ctx.out, k);
        }
        Ok(())
    }
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`.
#[derive(Debug)]
pub struct Scan<'a> {
    cursor: u64,
    opts: Options<'a>,
}

impl<'a> Command<'a> for Scan<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let cursor = super::scan::cursor(args.key()?)?;
        let opts = Options::parse(args.rest(), true)?;
        Ok(Scan { cursor, opts })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let store = &ctx.shared.store;
        let shards = store.shard_count() as u64;
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut next = self.cursor;
        let opts = &self.opts;
        while next < shards && keys.len() < opts.count {
            store.shard_keys(next as usize, ctx.now, |key, kind| {
                let typed = opts
                    .kind
                    .is_none_or(|t| t.eq_ignore_ascii_case(kind.name().as_bytes()));
                if typed && opts.keeps(key) {
                    keys.push(key.to_vec());
                }
            });
            next += 1;
        }
        let next = if next >= shards { 0 } else { next };
        reply::array(ctx.out, 2);
        reply::bulk(ctx.out, itoa::Buffer::new().format(next).as_bytes());
        reply::array(ctx.out, keys.len());
        for k in &keys {
            reply::bulk(ctx.out, k);
        }
        Ok(())
    }
}

/// `RANDOMKEY`: a key of a random shard that has any, nil when there are none.
#[derive(Debug)]
pub struct RandomKey;

impl Command<'_> for RandomKey {
    fn parse(_: &mut Args<'_>) -> Result<Self, CmdError> {
        Ok(RandomKey)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let store = &ctx.shared.store;
        let shards = store.shard_count();
        let start = sample::below(shards);
        for i in 0..shards {
            let mut keys: Vec<Vec<u8>> = Vec::new();
            store.shard_keys((start + i) % shards, ctx.now, |key, _| {
                keys.push(key.to_vec())
            });
            if !keys.is_empty() {
                reply::bulk(ctx.out, &keys[sample::below(keys.len())]);
                return Ok(());
            }
        }
        reply::null(ctx.out, ctx.session.proto);
        Ok(())
    }
}

/// `OBJECT ENCODING|FREQ|IDLETIME|REFCOUNT key` and `OBJECT HELP`.
#[derive(Debug)]
pub enum Object<'a> {
    Encoding(&'a [u8]),
    Freq(&'a [u8]),
    IdleTime(&'a [u8]),
    RefCount(&'a [u8]),
    Help,
}

const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Print this help.",
];

impl<'a> Command<'a> for Object<'a> {
    const ROUTED_AFTER_PARSE: bool = true;

    fn keys(&self) -> impl Iterator<Item = &[u8]> {
        match self {
            Object::Encoding(k) | Object::Freq(k) | Object::IdleTime(k) | Object::RefCount(k) => {
                Some(*k)
            }
            Object::Help => None,
        }
        .into_iter()
    }

    fn writes(&self) -> bool {
        false
    }

    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let sub = args.key()?;
        let name = sub.to_ascii_lowercase();
        let arity = |n: usize, args: &Args<'a>| {
            if args.remaining() == n {
                Ok(())
            } else {
                Err(CmdError::msg(format!(
                    "ERR wrong number of arguments for 'object|{}' command",
                    String::from_utf8_lossy(&name)
                )))
            }
        };
        Ok(match name.as_slice() {
            b"encoding" | b"freq" | b"idletime" | b"refcount" => {
                arity(1, args)?;
                let key = args.key()?;
                match name.as_slice() {
                    b"encoding" => Object::Encoding(key),
                    b"freq" => Object::Freq(key),
                    b"idletime" => Object::IdleTime(key),
                    _ => Object::RefCount(key),
                }
            }
            b"help" => {
                arity(0, args)?;
                Object::Help
            }
            _ => {
                return Err(CmdError::msg(format!(
                    "ERR unknown subcommand '{}'. Try OBJECT HELP.",
                    String::from_utf8_lossy(sub)
                )));
            }
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let key = match self {
            Object::Help => {
                reply::array(ctx.out, OBJECT_HELP.len());
                for line in OBJECT_HELP {
                    reply::simple(ctx.out, line);
                }
                return Ok(());
            }
            Object::Encoding(k) | Object::Freq(k) | Object::IdleTime(k) | Object::RefCount(k) => k,
        };
        let Some((value, _)) = ctx.shared.store.value(key, ctx.now) else {
            reply::null(ctx.out, ctx.session.proto);
            return Ok(());
        };
        match self {
            Object::Encoding(_) => reply::bulk(ctx.out, encoding(&value).as_bytes()),
            Object::Freq(_) => {
                return Err(CmdError::msg(
                    "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
                ));
            }
            // No access clock is kept: every key reads as just used.
            Object::IdleTime(_) => reply::integer(ctx.out, 0),
            // Redis shares the integers 0..10000 among keys and reports them as never freed.
            Object::RefCount(_) => match value {
                Value::Counter(sluice_store::Counter::Int(0..10_000)) => {
                    reply::integer(ctx.out, i64::from(i32::MAX))
                }
                _ => reply::integer(ctx.out, 1),
            },
            Object::Help => unreachable!("answered above"),
        }
        Ok(())
    }
}

/// OBJECT ENCODING's answer, by Redis's names (a limiter: `ratelimit`).
fn encoding(value: &Value) -> String {
    match value {
        Value::Counter(c) => {
            let mut digits = itoa::Buffer::new();
            let bytes = c.as_bytes(&mut digits);
            if matches!(c, sluice_store::Counter::Int(_)) {
                "int"
            } else if bytes.len() <= 44 {
                "embstr"
            } else {
                "raw"
            }
            .into()
        }
        Value::List(l) => l.encoding().into(),
        Value::Hash(h) => h.encoding().into(),
        Value::Set(s) => s.encoding().into(),
        Value::ZSet(z) => z.encoding().into(),
        Value::Limiter(_) => Kind::Limiter.name().into(),
    }
}
