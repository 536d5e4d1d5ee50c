//! `WATCH key [key ...]` and `UNWATCH`: optimistic locking for MULTI/EXEC. A connection's
//! watched keys share one dirty flag, set by the store when any of them changes (a write by
//! anyone, this connection included, a delete, an expiry, an eviction, FLUSHALL); EXEC then
//! answers a null array and runs nothing. EXEC, DISCARD, UNWATCH and RESET forget the keys
//! (see `sluice_store::Store::watch`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sluice_resp::{ArgIter, reply};

use super::{Args, CmdError, Command, Ctx};

/// What a connection watches.
#[derive(Debug, Default)]
pub struct Watching {
    /// Set when a watched key changes.
    dirty: Arc<AtomicBool>,
    /// The keys, for EXEC's check of the ones that expired since (Redis's
    /// `isWatchedKeyExpired`).
    keys: Vec<Vec<u8>>,
}

impl Watching {
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.keys.iter().map(Vec::as_slice)
    }

    /// Whether EXEC must refuse: a key changed, or one has expired meanwhile (looking it up
    /// drops an expired key, which touches its watchers).
    pub fn dirty(&self, ctx: &Ctx<'_>) -> bool {
        for key in &self.keys {
            ctx.shared.store.exists(key, ctx.now);
        }
        self.dirty.load(Ordering::Acquire)
    }
}

#[derive(Debug)]
pub struct Watch<'a>(ArgIter<'a>);

impl<'a> Command<'a> for Watch<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Watch(args.rest()))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        if ctx.session.transaction.is_some() {
            return Err(CmdError::msg("ERR WATCH inside MULTI is not allowed"));
        }
        let watching = ctx.session.watching.get_or_insert_default();
        for key in self.0 {
            if !watching.keys.iter().any(|k| k == key) {
                ctx.shared.store.watch(key, ctx.now, &watching.dirty);
                watching.keys.push(key.to_vec());
            }
        }
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}

#[derive(Debug)]
pub struct Unwatch;

impl Command<'_> for Unwatch {
    fn parse(_: &mut Args<'_>) -> Result<Self, CmdError> {
        Ok(Unwatch)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        // Dropping the flag is enough: the store holds it weakly.
        ctx.session.watching = None;
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}
